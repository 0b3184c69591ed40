//! A claimed run is `queued` until its process starts: through the service (its build detail,
//! progress and event stream) and the CLI (`builds ID`, `runs ID`), while a build claims runs
//! ahead of its slots, and when it is cancelled before they start.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::{eventually, Project, Service};

const GRAPH: &str = r#"
[graph]
name = "queued"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "slow"
outputs = ["slow/{d:date}"]
inputs = ["raw/{d}"]
command = ["sh", "job.sh"]
"#;

const JOB: &str = r#"set -e
sleep "${SLEEP:-1}"
for out in $(echo "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr ',' ' '); do
  mkdir -p "$(dirname "$DATABUILD_DATA_DIR/$out")"
  echo "$DATABUILD_JOB_RUN_ID" > "$DATABUILD_DATA_DIR/$out"
done
"#;

const RUNS: usize = 10;

/// A fresh project (no history: every run is claimed ahead of the slots) of `RUNS` runs.
fn project() -> (Project, Vec<String>) {
    let p = Project::new(GRAPH);
    p.file("job.sh", JOB);
    let mut refs = Vec::new();
    for d in 1..=RUNS {
        p.partition(&format!("raw/2020-01-{d:02}"));
        refs.push(format!("slow/2020-01-{d:02}"));
    }
    (p, refs)
}

/// The runs of a build's detail (`builds ID --json` or the API's) by status.
fn by_status(detail: &Value) -> BTreeMap<String, Vec<Value>> {
    let mut out: BTreeMap<String, Vec<Value>> = BTreeMap::new();
    for r in detail["job_runs"].as_array().unwrap() {
        let status = r["status"].as_str().unwrap().to_string();
        out.entry(status).or_default().push(r.clone());
    }
    out
}

/// At most `slots` runs are `running`, each with a `started_at`; the `queued` have none; the
/// progress counts them apart. Returns how many were queued.
fn check_detail(detail: &Value, slots: usize) -> usize {
    let runs = by_status(detail);
    let running = runs.get("running").map_or(&[][..], Vec::as_slice);
    let queued = runs.get("queued").map_or(&[][..], Vec::as_slice);
    assert!(
        running.len() <= slots,
        "{} running: {detail}",
        running.len()
    );
    for r in running {
        assert!(r["started_at"].is_string(), "a running run started: {r}");
    }
    for r in queued {
        assert!(
            r["started_at"].is_null(),
            "a queued run has not started: {r}"
        );
        assert!(r["log_path"].is_string(), "its claim fixed its log: {r}");
    }
    let progress = &detail["progress"];
    if progress.is_object() {
        assert!(
            progress["running"].as_u64().unwrap() <= slots as u64,
            "{progress}"
        );
        let counted = ["done", "queued", "running", "failed", "cancelled"]
            .iter()
            .map(|k| progress[k].as_u64().unwrap())
            .sum::<u64>();
        assert!(counted <= RUNS as u64, "{progress}");
    }
    queued.len()
}

#[test]
fn claimed_runs_are_queued_until_their_process_starts_on_every_surface() {
    let (p, refs) = project();
    let s = Service::start(&p, &[]);
    let (status, v) = s.post(
        "/api/v1/builds",
        &json!({ "partitions": refs, "parallel": 2 }),
    );
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap().to_string();
    let start = Instant::now();
    let (mut most_queued, mut cli_polls, mut queued_run) = (0, 0, None);
    let mut most_not_started = 0;
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(90),
            "build {id} never ended"
        );
        let (_, detail) = s.get(&format!("/api/v1/builds/{id}"));
        if detail["status"] != "executing" {
            if matches!(
                detail["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                break;
            }
            continue;
        }
        let (code, progress) = s.get(&format!("/api/v1/builds/{id}/progress"));
        let queued = check_detail(&detail, 2);
        if code == 200 {
            // The progress, read just after the detail: its queued are those not started yet.
            assert!(progress["running"].as_u64().unwrap() <= 2, "{progress}");
            most_queued = most_queued.max(progress["queued"].as_u64().unwrap());
        }
        // The executing build's summary: its queued runs have not started yet, none failed (all
        // ten are claimed at once, so only queued ones are not started).
        let (_, summary) = s.get(&format!("/api/v1/builds/{id}/summary"));
        if summary["status"] == "executing" {
            assert_eq!(summary["counts"]["failed"], 0, "{summary}");
            assert_eq!(summary["counts"]["cancelled"], 0, "{summary}");
            most_not_started =
                most_not_started.max(summary["counts"]["not_started"].as_u64().unwrap());
        }
        if queued > 0 {
            queued_run = by_status(&detail)["queued"][0]["job_run_id"]
                .as_str()
                .map(String::from);
        }
        // The CLI's answers, now and then (each is a process).
        if cli_polls < 5 && queued > 2 {
            cli_polls += 1;
            let local = p.run(&["--json", "builds", &id]);
            local.expect_code(0);
            check_detail(&local.json(), 2);
            if let Some(run) = &queued_run {
                let shown = p.run(&["--json", "runs", run]).json();
                let status = shown["status"].as_str().unwrap();
                assert!(
                    status != "queued" || shown["started_at"].is_null(),
                    "{shown}"
                );
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        most_queued >= 4,
        "runs were claimed ahead, queued: {most_queued}"
    );
    assert!(
        cli_polls > 0,
        "the CLI never saw the build with runs queued"
    );
    assert!(
        most_not_started >= 4,
        "queued runs are not started yet: {most_not_started}"
    );
    let (_, summary) = s.get(&format!("/api/v1/builds/{id}/summary"));
    assert_eq!(summary["counts"]["built"], RUNS as u64, "{summary}");
    assert_eq!(summary["counts"]["failed"], 0, "{summary}");
    // The event stream: each run `queued` (its claim), then `running` once, then `completed`;
    // never more than two processes at once.
    let (code, body) = s.call(
        "GET",
        &format!("/api/v1/builds/{id}/events/stream"),
        None,
        None,
    );
    assert_eq!(code, 200);
    let mut seen: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut started = 0usize;
    for frame in body.split("\n\n") {
        let Some(data) = frame.lines().find_map(|l| l.strip_prefix("data:")) else {
            continue;
        };
        let e: Value = serde_json::from_str(data.trim()).unwrap();
        if e["kind"] != "job_run" {
            continue;
        }
        let status = e["status"].as_str().unwrap().to_string();
        match status.as_str() {
            "running" => started += 1,
            "completed" | "failed" | "cancelled" => started = started.saturating_sub(1),
            _ => {}
        }
        assert!(started <= 2, "{started} processes at once, at {e}");
        seen.entry(e["job_run_id"].as_str().unwrap().to_string())
            .or_default()
            .push(status);
    }
    assert_eq!(seen.len(), RUNS, "{seen:?}");
    for (run, statuses) in &seen {
        assert_eq!(
            statuses,
            &["scheduled", "queued", "running", "completed"],
            "{run}"
        );
    }
}

#[test]
fn runs_cancelled_while_queued_are_cancelled_not_started_and_the_summary_agrees() {
    let (p, refs) = project();
    let mut args = vec!["--json", "build", "--parallel", "2"];
    args.extend(refs.iter().map(String::as_str));
    let build = p
        .command()
        .args(&args)
        .env("SLEEP", "30")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let queued_sql = "SELECT count(*) FROM job_runs WHERE status = 'queued'";
    let running_sql = "SELECT count(*) FROM job_runs WHERE status = 'running'";
    let count = |sql: &str| p.run(&["--json", "sql", sql]).json()["rows"][0][0].as_i64();
    eventually(Duration::from_secs(20), "runs running and queued", || {
        (count(running_sql) == Some(2) && count(queued_sql) > Some(0)).then_some(())
    });
    let ok = std::process::Command::new("kill")
        .args(["-INT", &build.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let out = build.wait_with_output().unwrap();
    let printed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(printed["status"], "cancelled", "{printed}");
    let id = printed["build_request_id"].as_str().unwrap();
    let detail = p.run(&["--json", "builds", id, "--limit", "0"]).json();
    let runs = by_status(&detail);
    assert!(!runs.contains_key("failed"), "{detail}");
    assert!(
        !runs.contains_key("queued") && !runs.contains_key("running"),
        "{detail}"
    );
    // The two that ran were cancelled while running; the queued ones before they started.
    let cancelled = &runs["cancelled"];
    let started = cancelled
        .iter()
        .filter(|r| r["started_at"].is_string())
        .count();
    assert_eq!(started, 2, "{detail}");
    assert!(cancelled.len() > 2, "{detail}");
    let summary = &detail["summary"];
    assert_eq!(
        summary["counts"], printed["counts"],
        "{summary} vs {printed}"
    );
    // No job failed (`failed`: the requested refs not live, none of them built here).
    assert_eq!(summary["counts"]["failures"], 0, "{summary}");
    assert_eq!(summary["counts"]["cancelled"], 2, "{summary}");
    assert_eq!(
        summary["counts"]["not_started"],
        (RUNS - 2) as u64,
        "{summary}"
    );
    p.run(&["check-log"]).expect_code(0);
}

#[test]
fn a_build_cancelled_through_the_log_cancels_its_queued_runs_before_they_start() {
    let (p, refs) = project();
    let s = Service::start(&p, &[("SLEEP", "2")]);
    let (status, v) = s.post(
        "/api/v1/builds",
        &json!({ "partitions": refs, "parallel": 2 }),
    );
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap().to_string();
    eventually(Duration::from_secs(20), "runs running and queued", || {
        let (_, detail) = s.get(&format!("/api/v1/builds/{id}"));
        if !detail["job_runs"].is_array() {
            return None; // not planned yet
        }
        let runs = by_status(&detail);
        (runs.get("running").map_or(0, Vec::len) == 2 && runs.contains_key("queued")).then_some(())
    });
    // `cancel` ends the request in the log; the build then stops its runs (a start it had not
    // written yet still goes in under the cancelled request: `state.rs` tests that rule).
    p.run(&["cancel", &id]).expect_code(0);
    let end = s.wait_for_build(&id);
    assert_eq!(end["status"], "cancelled", "{end}");
    // The request ends at once; its runs as the build stops them.
    let detail = eventually(Duration::from_secs(20), "the build's runs ended", || {
        let (_, detail) = s.get(&format!("/api/v1/builds/{id}"));
        let runs = by_status(&detail);
        (!runs.contains_key("queued") && !runs.contains_key("running")).then_some(detail)
    });
    let runs = by_status(&detail);
    assert!(!runs.contains_key("failed"), "{detail}");
    assert!(
        !runs.contains_key("queued") && !runs.contains_key("running"),
        "{detail}"
    );
    let never_started = runs["cancelled"]
        .iter()
        .filter(|r| r["started_at"].is_null())
        .count();
    assert!(never_started > 0, "{detail}");
    let (_, summary) = s.get(&format!("/api/v1/builds/{id}/summary"));
    let local = p.run(&["--json", "builds", &id]).json();
    assert_eq!(local["summary"]["counts"], summary["counts"], "{summary}");
    assert_eq!(summary["counts"]["failures"], 0, "{summary}");
    assert_eq!(
        summary["counts"]["not_started"].as_u64(),
        Some(never_started as u64),
        "{summary}"
    );
    p.run(&["check-log"]).expect_code(0);
}
