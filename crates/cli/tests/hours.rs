//! Hours as a field type through the real binary: an hourly dataset read across midnight
//! (`{hour-1h..hour}`), a daily job reading its 24 hours (`{date:hour..date:hour+23h}`), hour
//! ranges in ref arguments, an invalid hour refused, and a recurring want of `{now-2h}`.

use std::time::Duration;

use serde_json::json;

use crate::util::{eventually, Project, Service};

/// A job that writes each of its outputs.
const JOB: &str = r#"#!/bin/sh
set -e
for out in $(echo "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr ',' ' '); do
  mkdir -p "$(dirname "$DATABUILD_DATA_DIR/$out")"
  echo "$DATABUILD_INPUTS" > "$DATABUILD_DATA_DIR/$out"
done
"#;

const GRAPH: &str = r#"
[graph]
name = "hours"

[[dataset]]
name = "events"
pattern = "events/hour={hour:hour}"

[[job]]
name = "hourly"
outputs = ["hourly/hour={hour:hour}"]
inputs = ["events/hour={hour-1h..hour}"]
command = ["sh", "job.sh"]

[[job]]
name = "daily"
outputs = ["daily/date={date:date}"]
inputs = ["hourly/hour={date:hour..date:hour+23h}"]
command = ["sh", "job.sh"]
"#;

/// The project, with events from 2026-11-30T23 through 2026-12-02T01.
fn project(graph: &str) -> Project {
    let p = Project::new(graph);
    p.file("job.sh", JOB);
    for day in ["2026-12-01", "2026-12-02"] {
        for h in 0..24 {
            p.partition(&format!("events/hour={day}T{h:02}"));
        }
    }
    p.partition("events/hour=2026-11-30T23");
    p
}

fn runs(v: &serde_json::Value) -> Vec<(String, String)> {
    v["job_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["job"].as_str().unwrap().to_string(),
                r["outputs"][0].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn a_daily_job_plans_exactly_its_24_hourly_runs_and_builds_them() {
    let p = project(GRAPH);
    let v = p
        .run(&["--json", "analyze", "daily/date=2026-12-01"])
        .expect_code(0)
        .json();
    let runs = runs(&v);
    let hourly: Vec<&str> = runs
        .iter()
        .filter(|(job, _)| job == "hourly")
        .map(|(_, out)| out.as_str())
        .collect();
    let expected: Vec<String> = (0..24)
        .map(|h| format!("hourly/hour=2026-12-01T{h:02}"))
        .collect();
    assert_eq!(hourly, expected, "{v}");
    assert_eq!(runs.len(), 25, "{v}");
    assert_eq!(
        runs.last().unwrap(),
        &("daily".to_string(), "daily/date=2026-12-01".to_string())
    );
    // Midnight's run reads the hour before, of the day before.
    let midnight = v["job_runs"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["outputs"][0] == "hourly/hour=2026-12-01T00")
        .unwrap();
    assert_eq!(
        midnight["inputs"],
        json!(["events/hour=2026-11-30T23", "events/hour=2026-12-01T00"]),
        "{midnight}"
    );

    let v = p
        .run(&["--json", "build", "daily/date=2026-12-01"])
        .expect_code(0)
        .json();
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["counts"]["built"], 25, "{v}");
    let daily = std::fs::read_to_string(p.path().join("data/daily/date=2026-12-01")).unwrap();
    assert_eq!(
        daily.matches("hourly/hour=2026-12-01T").count(),
        24,
        "{daily}"
    );
}

#[test]
fn an_hour_range_builds_across_midnight() {
    let p = project(GRAPH);
    let v = p
        .run(&[
            "--json",
            "build",
            "hourly/hour={2026-12-01T22..2026-12-02T01}",
        ])
        .expect_code(0)
        .json();
    assert_eq!(v["status"], "completed", "{v}");
    assert_eq!(v["counts"]["built"], 4, "{v}");
    for h in [
        "2026-12-01T22",
        "2026-12-01T23",
        "2026-12-02T00",
        "2026-12-02T01",
    ] {
        assert!(
            p.path().join(format!("data/hourly/hour={h}")).exists(),
            "{h}: {v}"
        );
    }
    let inputs = std::fs::read_to_string(p.path().join("data/hourly/hour=2026-12-02T00")).unwrap();
    assert!(
        inputs.contains("events/hour=2026-12-01T23"),
        "midnight reads the hour before: {inputs}"
    );
    // Nothing else was built.
    assert!(!p.path().join("data/hourly/hour=2026-12-02T02").exists());
    assert!(!p.path().join("data/hourly/hour=2026-12-01T21").exists());
}

#[test]
fn an_invalid_hour_is_refused_naming_the_field_and_the_format() {
    let p = project(GRAPH);
    for cmd in ["analyze", "build"] {
        let out = p.run(&[cmd, "hourly/hour=2026-12-01T24"]);
        out.expect_code(2);
        assert!(
            out.stderr.contains(
                "`2026-12-01T24` is not a valid hour (`YYYY-MM-DDTHH`, UTC, `00` to `23`) for field `hour` in `hourly/hour=2026-12-01T24`"
            ),
            "{cmd}: {}",
            out.stderr
        );
    }
    // A brace range with an invalid end is refused before anything is planned.
    let out = p.run(&["build", "hourly/hour={2026-12-01T22..2026-12-01T24}"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("2026-12-01T00..2026-12-01T23"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_recurring_want_of_hours_before_now_builds_across_midnight() {
    let graph = format!(
        "{GRAPH}\n[[want]]\nname = \"last_hour\"\nrefs = [\"hourly/hour={{now-2h}}\"]\nsla = \"1h\"\n"
    );
    let p = project(&graph);
    let service = Service::start(
        &p,
        &[
            ("DATABUILD_WANT_PROBE_INTERVAL", "0.2"),
            // 01:30 UTC: two hours before is the last hour of the day before.
            ("DATABUILD_NOW", "2026-12-02T02:30:00+01:00"),
        ],
    );
    eventually(
        Duration::from_secs(10),
        "the hour before midnight is built",
        || {
            p.path()
                .join("data/hourly/hour=2026-12-01T23")
                .exists()
                .then_some(())
        },
    );
    let wants = p
        .run(&["--server", &service.url, "--json", "wants", "--all"])
        .expect_code(0)
        .json();
    let w = &wants["wants"][0];
    assert_eq!(w["recurring"], "last_hour", "{wants}");
    assert_eq!(w["refs"], json!(["hourly/hour=2026-12-01T23"]), "{wants}");
}
