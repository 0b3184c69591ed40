//! A build's claimed runs through `databuild serve`: an executing build's summary fails no ref
//! it may yet build, and a build of long jobs (by the log's history) claims no run ahead of its
//! slots.

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::util::{Project, Service};

const GRAPH: &str = r#"
[graph]
name = "claims"
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
sleep 1.2
for out in $(echo "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr ',' ' '); do
  mkdir -p "$(dirname "$DATABUILD_DATA_DIR/$out")"
  echo "$DATABUILD_JOB_RUN_ID" > "$DATABUILD_DATA_DIR/$out"
done
"#;

const RUNS: usize = 6;

fn project() -> (Project, Vec<String>) {
    let p = Project::new(GRAPH);
    p.file("job.sh", JOB);
    let mut refs = Vec::new();
    for d in 1..=RUNS {
        p.partition(&format!("raw/2020-01-0{d}"));
        refs.push(format!("slow/2020-01-0{d}"));
    }
    (p, refs)
}

/// Builds `refs` at `--parallel 2` through the service, and returns each poll of its progress
/// and summary made while it was executing, then its end.
fn watch(s: &Service, refs: &[String], force: bool) -> (Vec<(Value, Value)>, Value) {
    let (status, v) = s.post(
        "/api/v1/builds",
        &json!({ "partitions": refs, "parallel": 2, "force": force }),
    );
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap().to_string();
    let start = Instant::now();
    let mut polls = Vec::new();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "build {id} never ended"
        );
        let (_, build) = s.get(&format!("/api/v1/builds/{id}"));
        let (_, summary) = s.get(&format!("/api/v1/builds/{id}/summary"));
        let (code, progress) = s.get(&format!("/api/v1/builds/{id}/progress"));
        if build["status"] != "executing" {
            if matches!(
                build["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return (polls, summary);
            }
        } else if code == 200 {
            polls.push((progress, summary));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn an_executing_build_fails_none_of_its_claimed_runs_and_long_jobs_are_not_claimed_ahead() {
    let (p, refs) = project();
    let s = Service::start(&p, &[]);
    // A fresh log: no history, every run claimed ahead of the two slots.
    let (polls, end) = watch(&s, &refs, false);
    assert!(
        polls.len() > 3,
        "too few polls while executing: {}",
        polls.len()
    );
    for (progress, summary) in &polls {
        assert_eq!(
            summary["counts"]["failed"], 0,
            "while executing: {summary} {progress}"
        );
        assert!(
            summary["failed"].as_array().unwrap().is_empty(),
            "{summary}"
        );
    }
    assert_eq!(end["counts"]["built"], RUNS as u64, "{end}");
    assert_eq!(end["counts"]["failed"], 0, "{end}");
    // Now the log knows the job takes over a second: a forced rebuild claims runs only as its
    // slots free, so no more than two hold their outputs at once.
    let (polls, end) = watch(&s, &refs, true);
    assert!(
        polls.len() > 3,
        "too few polls while executing: {}",
        polls.len()
    );
    for (progress, summary) in &polls {
        let running = progress["running"].as_u64().unwrap();
        assert!(
            running <= 2,
            "{running} runs claimed at --parallel 2: {progress}"
        );
        assert_eq!(summary["counts"]["failed"], 0, "while executing: {summary}");
    }
    assert_eq!(end["counts"]["built"], RUNS as u64, "{end}");
}
