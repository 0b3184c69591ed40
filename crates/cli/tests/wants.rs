//! Wants with a real service: waiting for external data, building within seconds of it
//! appearing, SLA misses, recurring wants from the graph file, taints, two services where one
//! graph depends on the other's dataset, and a want whose build failed tried again (after its
//! backoff, or at once when what it needs changes).

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::{eventually, Pages, Project, Service};

const GRAPH: &str = r#"
[graph]
name = "w"

[[dataset]]
name = "raw"
pattern = "raw/date={date:date}"

[[job]]
name = "clean"
outputs = ["clean/date={date:date}"]
inputs = ["raw/date={date}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_DATA_DIR/clean && cp $DATABUILD_DATA_DIR/raw/date=$DATABUILD_FIELD_DATE $DATABUILD_DATA_DIR/clean/date=$DATABUILD_FIELD_DATE"]

[[job]]
name = "report"
outputs = ["report/date={date:date}"]
inputs = ["clean/date={date}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_DATA_DIR/report && wc -c < $DATABUILD_DATA_DIR/clean/date=$DATABUILD_FIELD_DATE > $DATABUILD_DATA_DIR/report/date=$DATABUILD_FIELD_DATE"]
"#;

fn fast(extra: &[(&'static str, &'static str)]) -> Vec<(&'static str, &'static str)> {
    let mut env = vec![("DATABUILD_WANT_PROBE_INTERVAL", "0.2")];
    env.extend_from_slice(extra);
    env
}

fn want(service: &Service, body: Value) -> String {
    let (status, v) = service.post("/api/v1/wants", &body);
    assert_eq!(status, 201, "{v}");
    v["want_id"].as_str().unwrap().to_string()
}

fn want_state(service: &Service, id: &str) -> Value {
    let (status, v) = service.get(&format!("/api/v1/wants/{id}"));
    assert_eq!(status, 200, "{v}");
    v
}

fn completed_runs(p: &Project, job: &str) -> u64 {
    let v = p
        .run(&[
            "--json",
            "sql",
            &format!("SELECT count(*) FROM job_runs WHERE job = '{job}' AND status = 'completed'"),
        ])
        .json();
    v["rows"][0][0].as_u64().unwrap()
}

#[test]
fn a_want_waits_for_its_input_builds_within_seconds_and_records_a_late_sla() {
    a_want_waits(Pages::Unchecked);
}

/// The same, its pages checked in Chromium along the way.
#[test]
#[ignore = "needs Chromium and playwright-core; ./test.sh installs them and runs it"]
fn a_want_waits_for_its_input_builds_within_seconds_and_records_a_late_sla_in_chromium() {
    a_want_waits(Pages::InChromium);
}

fn a_want_waits(pages: Pages) {
    let p = Project::new(GRAPH);
    let service = Service::start(&p, &fast(&[]));
    // 2020-01-01 ended long ago: with a one-hour SLA it is already late.
    let late = want(
        &service,
        json!({ "partitions": ["report/date=2020-01-01"], "sla": "1h" }),
    );
    // A day far ahead has time.
    let on_time = want(
        &service,
        json!({ "partitions": ["report/date=2099-01-01"], "sla": "1h" }),
    );
    let w = eventually(
        Duration::from_secs(10),
        "the want says what it waits for",
        || {
            let w = want_state(&service, &late);
            (w["status"] == "waiting" && w["sla_missed"] == 1).then_some(w)
        },
    );
    assert_eq!(w["waiting_for"], "raw/date=2020-01-01", "{w}");
    assert!(
        w["message"]
            .as_str()
            .unwrap()
            .contains("waiting for `raw/date=2020-01-01`"),
        "{w}"
    );
    let explained = p
        .run(&["--json", "explain", "report/date=2020-01-01"])
        .json();
    assert_eq!(
        explained["wants"][0]["want_id"],
        late.as_str(),
        "{explained}"
    );
    let told = p.run(&["explain", "report/date=2020-01-01"]);
    assert!(
        told.stdout
            .contains("waiting for `raw/date=2020-01-01` (dataset `raw`) since 20"),
        "{}",
        told.stdout
    );
    let missed = p.run(&["--json", "sql", "SELECT partition_ref, message FROM events WHERE kind = 'want' AND status = 'sla_missed'"]).json();
    assert_eq!(missed["rows"].as_array().unwrap().len(), 1, "{missed}");
    assert_eq!(missed["rows"][0][0], "report/date=2020-01-01");
    assert_eq!(want_state(&service, &on_time)["sla_missed"], 0);
    pages.browser(
        "page.mjs",
        &[
            &format!("{}/wants", service.url),
            "wants",
            "waiting for `raw/date=2020-01-01`",
            "1 missed",
        ],
    );
    pages.browser(
        "page.mjs",
        &[
            &format!("{}/partitions/report%2Fdate%3D2020-01-01", service.url),
            "partition-wanted",
            "Wanted (waiting): waiting for `raw/date=2020-01-01`",
        ],
    );

    // The input lands: the want is built and satisfied within seconds, with no command.
    p.file("data/raw/date=2020-01-01", "hello\n");
    let landed = Instant::now();
    eventually(Duration::from_secs(10), "the want is satisfied", || {
        (want_state(&service, &late)["status"] == "satisfied").then_some(())
    });
    assert!(
        landed.elapsed() < Duration::from_secs(5),
        "took {:?}",
        landed.elapsed()
    );
    assert_eq!(
        std::fs::read_to_string(p.path().join("data/report/date=2020-01-01"))
            .unwrap()
            .trim(),
        "6"
    );

    // A taint upstream makes the wanted partition stale: the reconciler rebuilds the tainted
    // partition; its bytes come out the same, so the wanted one, read from them, is kept.
    let before = (completed_runs(&p, "clean"), completed_runs(&p, "report"));
    p.run(&["taint", "clean/date=2020-01-01", "--reason", "bad upstream"])
        .expect_code(0);
    eventually(
        Duration::from_secs(10),
        "the wanted partition is fresh again after a taint",
        || {
            let w = want_state(&service, &late);
            (completed_runs(&p, "clean") > before.0 && w["status"] == "satisfied").then_some(())
        },
    );
    assert_eq!(completed_runs(&p, "report"), before.1, "kept, not rebuilt");

    // Withdrawn wants end; the CLI and the API show the same list.
    let out = p.run(&["--server", &service.url, "--json", "unwant", &on_time]);
    out.expect_code(0);
    assert_eq!(out.json()["status"], "cancelled");
    let local = p.run(&["--json", "wants", "--all"]).json();
    let remote = p
        .run(&["--server", &service.url, "--json", "wants", "--all"])
        .json();
    assert_eq!(local, remote);
    assert_eq!(local["wants"].as_array().unwrap().len(), 2);
}

#[test]
fn a_recurring_want_builds_yesterday_with_no_command() {
    let graph = format!(
        "{GRAPH}\n[[want]]\nname = \"daily\"\nrefs = [\"report/date={{today-1d}}\"]\nsla = \"6h\"\n"
    );
    let p = Project::new(&graph);
    p.file("data/raw/date=2026-05-01", "abc\n");
    let service = Service::start(&p, &fast(&[("DATABUILD_NOW", "2026-05-02")]));
    eventually(
        Duration::from_secs(10),
        "yesterday's report is built",
        || {
            p.path()
                .join("data/report/date=2026-05-01")
                .exists()
                .then_some(())
        },
    );
    let wants = p.run(&["--server", &service.url, "--json", "wants"]).json();
    let w = &wants["wants"][0];
    assert_eq!(w["recurring"], "daily", "{wants}");
    assert_eq!(w["refs"], json!(["report/date=2026-05-01"]));
    eventually(
        Duration::from_secs(10),
        "the recurring want is satisfied",
        || {
            (want_state(&service, w["want_id"].as_str().unwrap())["status"] == "satisfied")
                .then_some(())
        },
    );
    // A restart does not make the day's want twice.
    drop(service);
    let service = Service::start(&p, &fast(&[("DATABUILD_NOW", "2026-05-02")]));
    std::thread::sleep(Duration::from_millis(1500));
    let (_, all) = service.get("/api/v1/wants?all=true");
    assert_eq!(all["wants"].as_array().unwrap().len(), 1, "{all}");
}

#[test]
fn a_graph_builds_across_the_boundary_from_another_service() {
    let upstream = Project::new(GRAPH);
    upstream.file("data/raw/date=2026-02-03", "from upstream\n");
    let up = Service::start(&upstream, &[]);
    let downstream = Project::new(&format!(
        r#"
[graph]
name = "down"

[[dataset]]
name = "clean"
pattern = "clean/date={{date:date}}"
upstream = "{}"

[[job]]
name = "summary"
outputs = ["summary/date={{date:date}}"]
inputs = ["clean/date={{date}}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_DATA_DIR/summary && tr a-z A-Z < {}/data/clean/date=$DATABUILD_FIELD_DATE > $DATABUILD_DATA_DIR/summary/date=$DATABUILD_FIELD_DATE"]
"#,
        up.url,
        upstream.path().display()
    ));
    let down = Service::start(&downstream, &fast(&[]));
    let before = downstream
        .run(&["--json", "status", "clean/date=2026-02-03"])
        .json();
    assert_eq!(before[0]["status"], "missing", "{before}");
    let id = want(&down, json!({ "partitions": ["summary/date=2026-02-03"] }));
    eventually(
        Duration::from_secs(15),
        "the want across services is satisfied",
        || (want_state(&down, &id)["status"] == "satisfied").then_some(()),
    );
    assert_eq!(
        std::fs::read_to_string(downstream.path().join("data/summary/date=2026-02-03")).unwrap(),
        "FROM UPSTREAM\n"
    );
    // The upstream build is linked from our events, and it was a real build there.
    let linked = downstream.run(&["--json", "sql", "SELECT json_extract(data, '$.upstream') FROM events WHERE kind = 'want' AND json_extract(data, '$.upstream') LIKE 'http%'"]).json();
    let link = linked["rows"][0][0].as_str().unwrap().to_string();
    assert!(
        link.starts_with(&format!("{}/api/v1/builds/", up.url)),
        "{link}"
    );
    let upstream_build = link.rsplit('/').next().unwrap();
    let (status, b) = up.get(&format!("/api/v1/builds/{upstream_build}"));
    assert_eq!(status, 200);
    assert_eq!(b["status"], "completed", "{b}");
    let after = downstream
        .run(&["--json", "status", "clean/date=2026-02-03"])
        .json();
    assert_eq!(after[0]["status"], "live", "{after}");
}

/// A job that fails while the file `broken` is in the project.
const FLAKY: &str = r#"
[graph]
name = "f"

[[job]]
name = "flaky"
outputs = ["flaky/date={date:date}"]
command = ["sh", "-c", "test ! -e $DATABUILD_DATA_DIR/../broken && mkdir -p $DATABUILD_DATA_DIR/flaky && echo ok > $DATABUILD_DATA_DIR/flaky/date=$DATABUILD_FIELD_DATE"]
"#;

/// Failed builds of the job, as the log says.
fn failed_runs(p: &Project, job: &str) -> u64 {
    let v = p
        .run(&[
            "--json",
            "sql",
            &format!("SELECT count(*) FROM job_runs WHERE job = '{job}' AND status = 'failed'"),
        ])
        .json();
    v["rows"][0][0].as_u64().unwrap()
}

#[test]
fn a_want_whose_build_failed_is_tried_again_with_backoff_and_satisfied_once_fixed() {
    let p = Project::new(FLAKY);
    p.file("broken", "");
    let service = Service::start(&p, &fast(&[("DATABUILD_WANT_RETRY_INTERVAL", "2")]));
    let r = "flaky/date=2026-03-04";
    let id = want(&service, json!({ "partitions": [r] }));

    // The first build fails: the want says when it is tried again, 2 s after.
    let first = eventually(
        Duration::from_secs(15),
        "the want is held back after its build failed",
        || {
            let w = want_state(&service, &id);
            w["retry_at_ns"].as_i64().map(|_| w)
        },
    );
    assert_eq!(first["status"], "waiting", "{first}");
    assert_eq!(failed_runs(&p, "flaky"), 1);
    let retry_at = first["retry_at_ns"].as_i64().unwrap();
    let wait = retry_at - first["updated_at_ns"].as_i64().unwrap();
    assert!(
        (1_900_000_000..=2_100_000_000).contains(&wait),
        "{wait} ns: {first}"
    );
    let message = first["message"].as_str().unwrap();
    let at = first["retry_at"].as_str().unwrap();
    assert!(
        message.contains("failed (1 time(s) in a row); trying again at ") && message.contains(at),
        "{first}"
    );
    // The CLI (here and through the service) and the list answer the same.
    let listed = p.run(&["--json", "wants"]).json();
    assert_eq!(listed["wants"][0]["retry_at"], at, "{listed}");
    let remote = p.run(&["--server", &service.url, "--json", "wants"]).json();
    assert_eq!(remote["wants"][0]["retry_at_ns"], retry_at, "{remote}");
    // The dashboard counts down to that very time.
    let (_, html) = service.get("/wants");
    let html = html.as_str().unwrap();
    assert!(
        html.contains(&format!(r#"data-retry-at-ms="{}""#, retry_at / 1_000_000)),
        "{html}"
    );

    // Nobody asks again: the service tries again by itself, fails, and waits twice as long.
    let second = eventually(
        Duration::from_secs(15),
        "the want is tried again and held back longer",
        || {
            let w = want_state(&service, &id);
            w["retry_at_ns"]
                .as_i64()
                .is_some_and(|t| t > retry_at)
                .then_some(w)
        },
    );
    assert_eq!(failed_runs(&p, "flaky"), 2);
    let wait = second["retry_at_ns"].as_i64().unwrap() - second["updated_at_ns"].as_i64().unwrap();
    assert!(
        (3_900_000_000..=4_100_000_000).contains(&wait),
        "{wait} ns: {second}"
    );
    assert!(
        second["message"]
            .as_str()
            .unwrap()
            .contains("(2 time(s) in a row)"),
        "{second}"
    );

    // The job is fixed: the next attempt makes the partition, with no new request.
    std::fs::remove_file(p.path().join("broken")).unwrap();
    let satisfied = eventually(Duration::from_secs(15), "the want is satisfied", || {
        let w = want_state(&service, &id);
        (w["status"] == "satisfied").then_some(w)
    });
    assert_eq!(satisfied["retry_at"], Value::Null, "{satisfied}");
    let status = p.run(&["--json", "status", r]).json();
    assert_eq!(status[0]["status"], "live", "{status}");
    assert_eq!(failed_runs(&p, "flaky"), 2);
}

#[test]
fn a_want_held_back_after_a_failed_build_is_tried_at_once_when_what_it_needs_changes() {
    let graph = format!(
        r#"{GRAPH}
[[job]]
name = "flaky"
outputs = ["flaky/date={{date:date}}"]
inputs = ["clean/date={{date}}"]
command = ["sh", "-c", "test ! -e $DATABUILD_DATA_DIR/../broken && mkdir -p $DATABUILD_DATA_DIR/flaky && cp $DATABUILD_DATA_DIR/clean/date=$DATABUILD_FIELD_DATE $DATABUILD_DATA_DIR/flaky/date=$DATABUILD_FIELD_DATE"]
"#
    );
    let p = Project::new(&graph);
    p.file("broken", "");
    p.file("data/raw/date=2026-03-05", "x\n");
    // An hour between attempts: only a change to what the want needs can try it again soon.
    let service = Service::start(&p, &fast(&[("DATABUILD_WANT_RETRY_INTERVAL", "1h")]));
    let id = want(&service, json!({ "partitions": ["flaky/date=2026-03-05"] }));
    let held = eventually(
        Duration::from_secs(15),
        "the want is held back after its build failed",
        || {
            let w = want_state(&service, &id);
            w["retry_at_ns"].as_i64().map(|_| w)
        },
    );
    let wait = held["retry_at_ns"].as_i64().unwrap() - held["updated_at_ns"].as_i64().unwrap();
    assert!(
        (3_599_000_000_000..=3_601_000_000_000).contains(&wait),
        "{held}"
    );
    assert_eq!(completed_runs(&p, "clean"), 1);

    // The job is fixed, and a partition its build reads changes (a taint): tried at once.
    std::fs::remove_file(p.path().join("broken")).unwrap();
    p.run(&["taint", "clean/date=2026-03-05", "--reason", "redo"])
        .expect_code(0);
    let satisfied = eventually(Duration::from_secs(15), "the want is satisfied", || {
        let w = want_state(&service, &id);
        (w["status"] == "satisfied").then_some(w)
    });
    assert_eq!(satisfied["retry_at"], Value::Null, "{satisfied}");
    assert_eq!(completed_runs(&p, "clean"), 2);
    assert_eq!(completed_runs(&p, "flaky"), 1);
}

#[test]
fn a_recurring_wants_instance_is_due_by_its_time_of_its_day_and_a_missed_deadline_is_recorded() {
    let graph = format!(
        "{GRAPH}\n[[want]]\nname = \"daily\"\nrefs = [\"report/date={{today-1d}}\"]\nby = \"07:00\"\n"
    );
    let p = Project::new(&graph);
    let service = Service::start(&p, &fast(&[("DATABUILD_NOW", "2026-05-02")]));
    // Raw data never lands: the instance made on 2026-05-02 was due that day at 07:00, long past.
    let w = eventually(
        Duration::from_secs(10),
        "the deadline's miss is recorded",
        || {
            let (_, all) = service.get("/api/v1/wants");
            let w = all["wants"][0].clone();
            (w["sla_missed"] == 1).then_some(w)
        },
    );
    assert_eq!(w["deadline"], "2026-05-02T07:00:00.000Z", "{w:#}");
    assert_eq!(w["at_risk"], false, "{w:#}");
    assert!(w["expected_unknown"].is_string(), "{w:#}");
    drop(service);
    // A time of day that is not one is refused, naming the want.
    let bad = Project::new(&graph.replace("07:00", "7am"));
    let out = bad.run(&["wants"]);
    out.expect_code(2);
    assert!(out.stderr.contains("want `daily`"), "{}", out.stderr);
    assert!(out.stderr.contains("time of day"), "{}", out.stderr);
}

/// The `alert` events of the log: `(alert, status, attempt, message)`.
fn alert_events(p: &Project) -> Vec<(String, String, u64, String)> {
    let v = p
        .run(&["--json", "sql", "SELECT json_extract(data, '$.alert'), status, json_extract(data, '$.attempt'), message FROM events WHERE kind = 'alert' ORDER BY idx"])
        .json();
    v["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r[0].as_str().unwrap().to_string(),
                r[1].as_str().unwrap().to_string(),
                r[2].as_u64().unwrap(),
                r[3].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

#[test]
fn an_alert_command_reads_the_json_of_a_missed_deadline_and_of_a_failed_build() {
    let dir = tempfile::tempdir().unwrap();
    let told = dir.path().join("told.jsonl");
    let graph = format!(
        "{GRAPH}\n[[job]]\nname = \"broken\"\noutputs = [\"broken/{{n:int}}\"]\ncommand = [\"false\"]\n\n[[alert]]\nname = \"pager\"\non = [\"sla_missed\", \"build_failed\"]\ncommand = [\"sh\", \"-c\", \"cat >> {}; echo >> {}\"]\n",
        told.display(),
        told.display()
    );
    let p = Project::new(&graph);
    let service = Service::start(&p, &fast(&[]));
    let id = want(
        &service,
        json!({ "partitions": ["report/date=2020-01-01"], "sla": "1h" }),
    );
    let (code, build) = service.post("/api/v1/builds", &json!({ "partitions": ["broken/1"] }));
    assert!(code < 300, "{build}");
    let lines = eventually(Duration::from_secs(15), "both alerts are told", || {
        let text = std::fs::read_to_string(&told).ok()?;
        let lines: Vec<Value> = text
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        (lines.len() == 2).then_some(lines)
    });
    let missed = lines.iter().find(|l| l["event"] == "sla_missed").unwrap();
    assert_eq!(missed["want_id"], id.as_str(), "{missed}");
    assert_eq!(missed["partition_ref"], "report/date=2020-01-01");
    assert_eq!(missed["alert"], "pager");
    assert!(
        missed["message"].as_str().unwrap().contains("deadline"),
        "{missed}"
    );
    assert!(
        missed["dashboard_url"]
            .as_str()
            .unwrap()
            .starts_with(&service.url),
        "{missed}"
    );
    let failed = lines.iter().find(|l| l["event"] == "build_failed").unwrap();
    assert!(failed["build_request_id"].is_string(), "{failed}");
    let recorded = eventually(
        Duration::from_secs(5),
        "both deliveries are recorded",
        || {
            let e = alert_events(&p);
            (e.len() == 2).then_some(e)
        },
    );
    for (alert, status, attempt, _) in &recorded {
        assert_eq!(
            (alert.as_str(), status.as_str(), *attempt),
            ("pager", "completed", 1)
        );
    }
    // An alert naming what it cannot be sent for, or with no target, is refused, saying why.
    for (broken, says) in [
        (
            "on = [\"sla_missed\", \"nope\"]",
            "`on` names `nope`; use sla_at_risk",
        ),
        (
            "on = [\"late\"]\nurl = \"ftp://x\"",
            "give either `command`",
        ),
        (
            "on = [\"late\"]\ncommand = [\"true\"]\nchannel = \"#ops\"",
            "channel",
        ),
    ] {
        let bad = Project::new(&format!("{GRAPH}\n[[alert]]\nname = \"x\"\n{broken}\n"));
        let out = bad.run(&["wants"]);
        out.expect_code(2);
        assert!(out.stderr.contains(says), "{broken}: {}", out.stderr);
    }
}

/// A graph whose `broken` job fails, with an alert on failed builds that runs `command`
/// (`{told}` replaced by the file it appends each body to, a line each).
fn failing_graph(told: &std::path::Path, command: &str) -> String {
    let command = command.replace("{told}", &told.display().to_string());
    format!(
        "{GRAPH}\n[[job]]\nname = \"broken\"\noutputs = [\"broken/{{n:int}}\"]\ncommand = [\"false\"]\n\n[[alert]]\nname = \"pager\"\non = [\"build_failed\"]\ncommand = [\"sh\", \"-c\", \"{command}\"]\n"
    )
}

/// The build each body appended to `told` names, in order.
fn told_builds(told: &std::path::Path) -> Vec<String> {
    let text = std::fs::read_to_string(told).unwrap_or_default();
    text.lines()
        .map(|l| {
            let body: Value = serde_json::from_str(l).unwrap();
            assert_eq!(body["event"], "build_failed", "{body}");
            body["build_request_id"].as_str().unwrap().to_string()
        })
        .collect()
}

/// Of each recorded delivery, the event it names (`fired_by`), and of each failed build, its
/// `idx`: the two agree when each failure was told once.
fn fired_by_and_failed(p: &Project) -> (Vec<i64>, Vec<i64>) {
    let column = |sql: &str| -> Vec<i64> {
        let v = p.run(&["--json", "sql", sql]).json();
        v["rows"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r[0].as_i64().unwrap())
            .collect()
    };
    (
        column(
            "SELECT json_extract(data, '$.fired_by') FROM events WHERE kind = 'alert' ORDER BY 1",
        ),
        column(
            "SELECT idx FROM events WHERE kind = 'build_request' AND status = 'failed' ORDER BY 1",
        ),
    )
}

#[test]
fn a_build_failed_while_no_service_ran_is_told_once_one_starts_and_never_again() {
    let dir = tempfile::tempdir().unwrap();
    let told = dir.path().join("told.jsonl");
    let p = Project::new(&failing_graph(&told, "cat >> {told}; echo >> {told}"));
    // (a) No service runs: the CLI's failed build waits in the log.
    p.run(&["build", "broken/1"]).expect_code(1);
    let service = Service::start(&p, &fast(&[]));
    let first = eventually(Duration::from_secs(15), "the failure is told", || {
        let builds = told_builds(&told);
        (builds.len() == 1).then_some(builds)
    });
    eventually(Duration::from_secs(5), "the delivery is recorded", || {
        (alert_events(&p).len() == 1).then_some(())
    });
    drop(service);
    // (b) Started again, it tells the new failure, not the old one again.
    let service = Service::start(&p, &fast(&[]));
    p.run(&["build", "broken/2"]).expect_code(1);
    eventually(Duration::from_secs(15), "the new failure is told", || {
        (told_builds(&told).len() >= 2).then_some(())
    });
    eventually(Duration::from_secs(5), "the delivery is recorded", || {
        (alert_events(&p).len() == 2).then_some(())
    });
    drop(service);
    // And again, with nothing new: nothing is told (a few ticks pass).
    let service = Service::start(&p, &fast(&[]));
    std::thread::sleep(Duration::from_millis(1500));
    drop(service);
    let builds = told_builds(&told);
    assert_eq!(builds.len(), 2, "{builds:?}");
    assert_eq!(builds[0], first[0]);
    assert_ne!(builds[1], first[0], "{builds:?}");
    let (fired_by, failed) = fired_by_and_failed(&p);
    assert_eq!(fired_by, failed, "each delivery names the failure it told");
}

#[test]
fn deliveries_still_waiting_when_the_service_stops_are_sent_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let told = dir.path().join("told.jsonl");
    // Each delivery takes a second: the service stops with some still queued.
    let p = Project::new(&failing_graph(
        &told,
        "sleep 1; cat >> {told}; echo >> {told}",
    ));
    for n in 1..=3 {
        p.run(&["build", &format!("broken/{n}")]).expect_code(1);
    }
    let mut service = Service::start(&p, &fast(&[]));
    eventually(
        Duration::from_secs(15),
        "the first delivery is recorded",
        || (!alert_events(&p).is_empty()).then_some(()),
    );
    service.stop();
    assert!(
        alert_events(&p).len() < 3,
        "the service stopped too late to test this"
    );
    let _service = Service::start(&p, &fast(&[]));
    eventually(
        Duration::from_secs(15),
        "every delivery is recorded",
        || (alert_events(&p).len() == 3).then_some(()),
    );
    std::thread::sleep(Duration::from_millis(1500));
    let (fired_by, failed) = fired_by_and_failed(&p);
    assert_eq!(fired_by, failed, "each failure recorded told once");
    // At least once: the one being sent as the service stopped may be told twice, no other.
    let builds = told_builds(&told);
    let distinct: std::collections::BTreeSet<_> = builds.iter().collect();
    assert_eq!(distinct.len(), 3, "{builds:?}");
    assert!(builds.len() <= 4, "{builds:?}");
}

/// A local HTTP endpoint answering every request `code`, handing over each body and its
/// `X-DataBuild-Signature` header.
fn endpoint(code: u16) -> (String, std::sync::mpsc::Receiver<(String, String)>) {
    use std::io::{BufRead, BufReader, Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/hook", listener.local_addr().unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let mut reader = BufReader::new(stream.try_clone().unwrap());
            let (mut length, mut signature) = (0, String::new());
            loop {
                let mut line = String::new();
                if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                    break;
                }
                let lower = line.to_ascii_lowercase();
                if let Some(v) = lower.strip_prefix("content-length:") {
                    length = v.trim().parse().unwrap_or(0);
                }
                if lower.starts_with("x-databuild-signature:") {
                    signature = line["x-databuild-signature:".len()..].trim().to_string();
                }
            }
            let mut body = vec![0; length];
            let _ = reader.read_exact(&mut body);
            let _ = tx.send((String::from_utf8_lossy(&body).into_owned(), signature));
            let _ = write!(
                stream,
                "HTTP/1.1 {code} X\r\ncontent-length: 0\r\nconnection: close\r\n\r\n"
            );
        }
    });
    (url, rx)
}

#[test]
fn an_alert_url_gets_a_signed_body_and_a_failing_one_is_tried_three_times_and_recorded_failed() {
    use hmac::Mac;
    let (ok_url, ok) = endpoint(200);
    let (bad_url, bad) = endpoint(503);
    let graph = format!(
        "{GRAPH}\n[[alert]]\nname = \"hook\"\non = [\"sla_missed\"]\nurl = \"{ok_url}\"\nsecret_env = \"ALERT_SECRET\"\n\n[[alert]]\nname = \"down\"\non = [\"sla_missed\"]\nurl = \"{bad_url}\"\n"
    );
    let p = Project::new(&graph);
    let service = Service::start(&p, &fast(&[("ALERT_SECRET", "s3cret")]));
    want(
        &service,
        json!({ "partitions": ["report/date=2020-01-01"], "sla": "1h" }),
    );
    let (body, signature) = ok.recv_timeout(Duration::from_secs(15)).unwrap();
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"s3cret").unwrap();
    mac.update(body.as_bytes());
    let expected: String = mac
        .finalize()
        .into_bytes()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(signature, format!("sha256={expected}"), "{body}");
    let v: Value = serde_json::from_str(&body).unwrap();
    assert_eq!(v["event"], "sla_missed", "{v}");
    for _ in 0..3 {
        bad.recv_timeout(Duration::from_secs(15)).unwrap();
    }
    let recorded = eventually(
        Duration::from_secs(10),
        "both deliveries are recorded",
        || {
            let e = alert_events(&p);
            (e.len() == 2).then_some(e)
        },
    );
    let hook = recorded.iter().find(|e| e.0 == "hook").unwrap();
    assert_eq!((hook.1.as_str(), hook.2), ("completed", 1), "{recorded:?}");
    let down = recorded.iter().find(|e| e.0 == "down").unwrap();
    assert_eq!((down.1.as_str(), down.2), ("failed", 3), "{recorded:?}");
    assert!(down.3.contains("answered HTTP 503"), "{recorded:?}");
    assert!(
        bad.recv_timeout(Duration::from_millis(500)).is_err(),
        "a fourth try"
    );
}
