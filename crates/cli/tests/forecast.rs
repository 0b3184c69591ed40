//! Arrivals and forecasts (#60): an int-keyed external dataset whose partitions land a second
//! apart (files made, then seen by `status`); `forecast` of its next key and of a job output
//! reading it gives times from its cadence and the job's durations, says why when history is
//! too short, and turns `late` once the next key is past its p90; one being built waits for its
//! run. The service answers the same and its watcher records the next partition when it lands,
//! without being asked.

use std::time::Duration;

use serde_json::Value;

use crate::util::{eventually, Project, Service};

const GRAPH: &str = r#"
[graph]
name = "g"
[[dataset]]
name = "ticks"
pattern = "ticks/{n:int}"
[[job]]
name = "count"
outputs = ["counted/{n:int}"]
inputs = ["ticks/{n}"]
command = ["sh", "-c", "sleep $(cat slow 2>/dev/null || echo 0.2); mkdir -p $DATABUILD_OUTPUT_DIR/counted && echo 1 > $DATABUILD_OUTPUT_DIR/counted/$DATABUILD_FIELD_N"]
"#;

/// Ticks `1..=n` land a second apart, each seen by a `status` as it lands.
pub(crate) fn landed(n: u32) -> Project {
    let p = Project::new(GRAPH);
    for i in 1..=n {
        if i > 1 {
            std::thread::sleep(Duration::from_secs(1));
        }
        p.partition(&format!("ticks/{i}"));
        p.run(&["status", &format!("ticks/{i}")]).expect_code(0);
    }
    p
}

pub(crate) fn forecast(p: &Project, r: &str) -> serde_json::Value {
    let out = p.run(&["--json", "forecast", r]);
    out.expect_code(0);
    out.json()[0].clone()
}

/// The basis step of kind `step`.
fn step<'a>(f: &'a serde_json::Value, step: &str) -> &'a serde_json::Value {
    f["basis"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["step"] == step)
        .unwrap_or_else(|| panic!("no `{step}` step in {f:#}"))
}

#[test]
fn the_next_key_and_what_reads_it_are_forecast_from_the_cadence_and_the_jobs_durations() {
    let p = landed(4);
    p.run(&["build", "counted/{1..3}"]).expect_code(0);
    // Each arrival was recorded once, when first seen.
    let events = p
        .run(&["--json", "events", "--partition", "ticks/2"])
        .stdout;
    let kinds: Vec<String> = events
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["kind"].to_string())
        .collect();
    assert_eq!(kinds, ["\"arrival\""], "{events}");

    let next = forecast(&p, "ticks/5");
    assert_eq!(next["status"], "missing");
    assert_eq!(next["late"], false);
    let (at, by) = (
        next["expected_at_ns"].as_i64().unwrap(),
        next["expected_by_ns"].as_i64().unwrap(),
    );
    assert!(by >= at, "{next:#}");
    let input = step(&next, "external");
    assert_eq!(input["dataset"], "ticks");
    let cadence = input["cadence"].as_str().unwrap();
    assert!(
        cadence.starts_with("4 arrivals, one key every 1 s (median)"),
        "{cadence}"
    );
    assert!(next["expected_at"].as_str().unwrap().ends_with('Z'));

    let output = forecast(&p, "counted/5");
    assert_eq!(output["status"], "missing");
    assert!(output["reason"].is_null(), "{output:#}");
    assert!(
        output["expected_at_ns"].as_i64().unwrap() >= at,
        "{output:#}"
    );
    assert_eq!(step(&output, "external")["ref"], "ticks/5");
    let job = step(&output, "job");
    assert_eq!(job["job"], "count");
    assert_eq!(job["runs"], 1);
    assert!(job["p50_ms"].as_f64().unwrap() >= 200.0, "{job:#}");
    assert!(job["p90_ms"].as_f64().unwrap() >= job["p50_ms"].as_f64().unwrap());
    assert!(step(&output, "critical_path")["ms"].as_f64().unwrap() >= 200.0);
    step(&output, "queue_wait");

    let text = p.run(&["forecast", "counted/5", "counted/1"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains("counted/5: missing, expected at "),
        "{}",
        text.stdout
    );
    assert!(text
        .stdout
        .contains("input ticks/5 (dataset `ticks`): expected at "));
    assert!(text.stdout.contains("job `count`: 1 run(s) to go, p50 "));
    assert!(text.stdout.contains("counted/1: live\n"), "{}", text.stdout);

    // A build that finds an external partition records its arrival too, once.
    p.partition("ticks/7");
    p.run(&["build", "counted/7"]).expect_code(0);
    p.run(&["build", "counted/7", "--force"]).expect_code(0);
    let events = p
        .run(&["--json", "events", "--partition", "ticks/7"])
        .stdout;
    assert_eq!(events.lines().count(), 1, "{events}");
    assert!(events.contains("\"kind\":\"arrival\""), "{events}");
}

#[test]
fn too_little_history_gives_no_times_and_says_why() {
    let p = landed(2);
    let next = forecast(&p, "ticks/3");
    assert!(next["expected_at"].is_null() && next["expected_by"].is_null());
    assert_eq!(
        next["reason"],
        "dataset `ticks`: 2 arrivals recorded, 3 needed to predict"
    );
    let output = forecast(&p, "counted/3");
    assert!(output["expected_at"].is_null());
    let why = output["reason"].as_str().unwrap();
    assert!(why.contains("2 arrivals recorded, 3 needed"), "{why}");
    assert!(why.contains("job `count` has no timed run yet"), "{why}");
    let text = p.run(&["forecast", "counted/3"]);
    assert!(
        text.stdout.contains("counted/3: missing, no forecast: "),
        "{}",
        text.stdout
    );
    // An unknown ref is the user's to fix.
    let out = p.run(&["forecast", "nothing/1"]);
    out.expect_code(2);
}

#[test]
fn the_next_key_is_late_once_past_its_p90_and_so_is_what_reads_it() {
    let p = landed(3);
    let next = forecast(&p, "ticks/4");
    assert_eq!(next["late"], false, "{next:#}");
    let by = next["expected_by_ns"].as_i64().unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as i64;
    std::thread::sleep(Duration::from_nanos((by - now).max(0) as u64 + 300_000_000));
    let next = forecast(&p, "ticks/4");
    assert_eq!(next["late"], true, "{next:#}");
    assert_eq!(step(&next, "external")["late"], true);
    let output = forecast(&p, "counted/4");
    assert_eq!(output["late"], true, "{output:#}");
    let text = p.run(&["forecast", "ticks/4"]);
    assert!(text.stdout.contains(" LATE"), "{}", text.stdout);
    // One there but tainted awaits no arrival: no times, and its status's reasons.
    p.run(&["taint", "ticks/2"]).expect_code(0);
    let tainted = forecast(&p, "ticks/2");
    assert_eq!(tainted["status"], "tainted");
    assert!(tainted["expected_at"].is_null() && tainted["late"] == false);
    assert!(
        tainted["reason"]
            .as_str()
            .unwrap()
            .contains("live again once its data changes"),
        "{tainted:#}"
    );
}

#[test]
fn a_partition_being_built_waits_for_the_run_making_it() {
    let p = landed(3);
    p.run(&["build", "counted/{1..2}"]).expect_code(0);
    p.file("slow", "4");
    let mut build = p
        .command()
        .args(["build", "counted/3"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    eventually(Duration::from_secs(10), "counted/3 is being built", || {
        let s = p.run(&["--json", "status", "counted/3"]).json();
        (s[0]["status"] == "building").then_some(())
    });
    let f = forecast(&p, "counted/3");
    assert_eq!(f["status"], "building", "{f:#}");
    let run = step(&f, "running");
    assert_eq!(run["job"], "count");
    let end = run["expected_end_at_ns"].as_i64().unwrap();
    assert!(f["expected_at_ns"].as_i64().unwrap() >= end, "{f:#}");
    assert!(build.wait().unwrap().success());
}

#[test]
fn the_service_forecasts_the_same_and_its_watcher_records_the_next_arrival() {
    let p = landed(3);
    let s = Service::start(&p, &[("DATABUILD_ARRIVAL_PROBE_INTERVAL", "0.2")]);
    let (code, f) = s.get("/api/v1/partitions/ticks%2F4/forecast");
    assert_eq!(code, 200, "{f:#}");
    assert_eq!(f["ref"], "ticks/4");
    assert!(f["expected_at_ns"].is_i64(), "{f:#}");
    assert_eq!(step(&f, "external")["dataset"], "ticks");
    let (code, _) = s.get("/api/v1/partitions/nothing%2F1/forecast");
    assert_eq!(code, 400);
    // Over HTTP, the CLI says what in-process does.
    let over = p.run(&["--server", &s.url, "--json", "forecast", "ticks/4"]);
    over.expect_code(0);
    assert_eq!(over.json()[0]["expected_at_ns"], f["expected_at_ns"]);
    // Ticks/4 lands; no one asks, the watcher sees it.
    p.partition("ticks/4");
    eventually(
        Duration::from_secs(10),
        "the watcher records ticks/4",
        || {
            let (_, events) = s.get("/api/v1/events?partition=ticks%2F4");
            events["events"]
                .as_array()?
                .iter()
                .any(|e| e["kind"] == "arrival")
                .then_some(())
        },
    );
}

/// An RFC 3339 time `secs` seconds from now.
fn in_secs(secs: f64) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap();
    let at = chrono::DateTime::from_timestamp_nanos((now.as_nanos() as f64 + secs * 1e9) as i64);
    at.to_rfc3339_opts(chrono::SecondsFormat::Millis, true)
}

#[test]
fn a_want_due_before_its_forecast_is_at_risk_and_the_service_records_it_once() {
    let dir = tempfile::tempdir().unwrap();
    let told = dir.path().join("told.json");
    let p = Project::new(&format!(
        "{GRAPH}\n[[alert]]\nname = \"risks\"\non = [\"sla_at_risk\"]\ncommand = [\"sh\", \"-c\", \"cat > {}\"]\n",
        told.display()
    ));
    // Counting takes 3 s: timed once before the ticks' cadence is learned.
    p.file("slow", "3");
    p.partition("ticks/1");
    p.run(&["build", "counted/1"]).expect_code(0);
    let s = Service::start(&p, &[("DATABUILD_WANT_PROBE_INTERVAL", "0.2")]);
    for i in 2..=4 {
        std::thread::sleep(Duration::from_secs(1));
        p.partition(&format!("ticks/{i}"));
        p.run(&["status", &format!("ticks/{i}")]).expect_code(0);
    }
    // Ticks/5 lands in about a second, and counting it takes 3 s more: 2.5 s is too soon.
    let by = in_secs(2.5);
    let made = p.run(&[
        "--server",
        &s.url,
        "--json",
        "want",
        "counted/5",
        "--by",
        &by,
    ]);
    made.expect_code(0);
    let w = made.json();
    assert_eq!(w["at_risk"], true, "{w:#}");
    assert_eq!(w["at_risk_partition"], "ticks/5", "{w:#}");
    assert!(w["deadline"].as_str().unwrap().ends_with('Z'), "{w:#}");
    assert!(
        w["expected_satisfied_at_ns"].as_i64().unwrap()
            > w["deadline_ns"].as_i64().unwrap() - 3_000_000_000,
        "{w:#}"
    );
    let reason = w["at_risk_reason"].as_str().unwrap();
    assert!(reason.starts_with("counted/5 expected by "), "{reason}");
    assert!(
        reason.contains("deadline: ticks/5 expected by "),
        "{reason}"
    );
    // The dashboard draws it at risk, in red, with the reason.
    let (_, page) = s.call("GET", "/wants", None, None);
    assert!(page.contains(">at risk</span>"), "{page}");
    assert!(page.contains("counted/5 expected by "), "{page}");
    let id = w["want_id"].as_str().unwrap();
    let shown = p.run(&["wants", id]);
    assert!(
        shown.stdout.contains("at risk: counted/5 expected by"),
        "{}",
        shown.stdout
    );
    // The service records it once, naming what holds it back, and then, the deadline passed,
    // the miss.
    let risks = || {
        p.run(&["--json", "sql", "SELECT partition_ref, message FROM events WHERE kind = 'want' AND status = 'sla_at_risk'"]).json()["rows"].clone()
    };
    eventually(
        Duration::from_secs(10),
        "the service records the risk",
        || (risks().as_array()?.len() == 1).then_some(()),
    );
    eventually(
        Duration::from_secs(10),
        "the service records the miss",
        || {
            let (_, w) = s.get(&format!("/api/v1/wants/{id}"));
            (w["sla_missed"] == 1).then_some(())
        },
    );
    // Someone is told, with what holds it back and the deadline.
    let alert: Value = eventually(Duration::from_secs(5), "the alert is told", || {
        serde_json::from_str(&std::fs::read_to_string(&told).ok()?).ok()
    });
    assert_eq!(alert["event"], "sla_at_risk", "{alert:#}");
    assert_eq!(alert["want_id"], id, "{alert:#}");
    assert_eq!(alert["partition_ref"], "ticks/5", "{alert:#}");
    assert_eq!(alert["deadline"], w["deadline"], "{alert:#}");
    assert!(
        alert["expected_by"].as_str().unwrap() > w["deadline"].as_str().unwrap(),
        "{alert:#}"
    );
    let rows = risks();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert_eq!(rows[0][0], "ticks/5");
    assert!(rows[0][1].as_str().unwrap().contains("deadline"), "{rows}");
    // Not a deadline: refused, saying what one is.
    let bad = p.run(&["want", "counted/6", "--by", "7am"]);
    bad.expect_code(2);
    assert!(bad.stderr.contains("RFC 3339"), "{}", bad.stderr);
}
