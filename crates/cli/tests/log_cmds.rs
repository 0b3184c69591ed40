//! The commands that read the event log: status, explain, partitions, builds, events, jobs, runs,
//! taint and sql, over real SQLite logs.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use crate::util::{seed_build, Project};

const GRAPH: &str = r#"
[graph]
name = "g"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["true"]
[[job]]
name = "b"
outputs = ["b/{d:date}"]
inputs = ["a/{d}"]
command = ["true"]
"#;

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.partition("raw/2020-01-01");
    seed_build(&p, "br1", "run1", "a", "a/2020-01-01", true);
    seed_build(&p, "br2", "run2", "a", "a/2020-01-02", false);
    p
}

#[test]
fn status_reports_every_state_with_reasons() {
    let p = project();
    let out = p.run(&[
        "--json",
        "status",
        "a/{2020-01-01..2020-01-03}",
        "raw/2020-01-01",
        "raw/2020-01-05",
        "zzz/1",
    ]);
    // An unknown ref is the user's input to fix: exit 2, every ref still answering (#57).
    out.expect_code(2);
    let v = out.json();
    let statuses: Vec<&str> = v
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["status"].as_str().unwrap())
        .collect();
    assert_eq!(
        statuses,
        ["live", "failed", "missing", "live", "missing", "missing"]
    );
    assert_eq!(v[0]["built_by"], "run1");
    assert_eq!(v[1]["reasons"][0], "run run2 failed: exit status 3");
    assert_eq!(
        v[5]["reasons"][0],
        "no job builds `zzz/1` and no dataset declares it"
    );
    assert_eq!(v[5]["error"]["kind"], "unknown");
    assert!(v[0]["updated_at"].as_str().unwrap().ends_with('Z'));
}

#[test]
fn explain_shows_the_run_its_inputs_and_what_a_build_would_do() {
    let p = project();
    let out = p.run(&["explain", "a/2020-01-01"]);
    out.expect_code(0);
    assert!(out.stdout.contains("a/2020-01-01: live"), "{}", out.stdout);
    assert!(
        out.stdout.contains("run run1: job `a`, completed"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("raw/2020-01-01  live"),
        "{}",
        out.stdout
    );
    let out = p.run(&["--json", "explain", "b/2020-01-02"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["status"], "missing");
    let jobs: Vec<&str> = v["to_build"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["job"].as_str().unwrap())
        .collect();
    assert_eq!(jobs, ["a", "b"], "a/2020-01-02 failed: rebuilt on the way");
}

#[test]
fn partitions_filter_by_glob_and_status_and_page() {
    let p = project();
    seed_build(&p, "br3", "run3", "a", "a/2020-01-03", true);
    let out = p.run(&["--json", "partitions", "--status", "live", "--limit", "1"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["partitions"][0]["ref"], "a/2020-01-01");
    assert_eq!(v["next"], "a/2020-01-01");
    let out = p.run(&[
        "--json",
        "partitions",
        "--status",
        "live",
        "--after",
        "a/2020-01-01",
    ]);
    assert_eq!(out.json()["partitions"][0]["ref"], "a/2020-01-03");
    let out = p.run(&["partitions", "--pattern", "a/*-02"]);
    out.expect_code(0);
    assert!(
        out.stdout.contains("a/2020-01-02  failed"),
        "{}",
        out.stdout
    );
    assert!(!out.stdout.contains("a/2020-01-01"), "{}", out.stdout);
}

#[test]
fn builds_list_and_show() {
    let p = project();
    let out = p.run(&["--json", "builds"]);
    out.expect_code(0);
    assert_eq!(out.json()["builds"].as_array().unwrap().len(), 2);
    let out = p.run(&["--json", "builds", "br2"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["status"], "failed");
    assert_eq!(v["partitions"][0]["status"], "failed");
    assert_eq!(v["job_runs"][0]["job_run_id"], "run2");
    let out = p.run(&["builds", "nope"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("no build request `nope`"),
        "{}",
        out.stderr
    );
}

#[test]
fn events_filter_and_follow() {
    let p = project();
    let out = p.run(&["--json", "events", "--build", "br1"]);
    out.expect_code(0);
    let lines: Vec<serde_json::Value> = out
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 12);
    assert_eq!(lines[0]["kind"], "build_request");
    assert_eq!(lines[0]["status"], "received");
    // A build or run no id names is refused, not shown as one without events.
    for (flag, id) in [("--build", "nonexist"), ("--run", "nonexist")] {
        let out = p.run(&["events", flag, id]);
        out.expect_code(2);
        assert!(
            out.stderr.contains("no ") && out.stderr.contains(id),
            "{}",
            out.stderr
        );
    }
    let out = p.run(&[
        "--json",
        "events",
        "--partition",
        "a/2020-01-02",
        "--since",
        "15",
    ]);
    assert_eq!(out.stdout.lines().count(), 3);
    let out = p.run(&["--json", "events", "--job", "a", "--limit", "2"]);
    assert_eq!(out.stdout.lines().count(), 2);

    let mut child = p
        .command()
        .args(["--json", "events", "--follow", "--since", "24"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    seed_build(&p, "br3", "run3", "a", "a/2020-01-03", true);
    let first: serde_json::Value = serde_json::from_str(&lines.next().unwrap().unwrap()).unwrap();
    assert_eq!(first["build_request_id"], "br3");
    assert_eq!(first["idx"], 25);
    child.kill().unwrap();
    child.wait().unwrap();
}

#[test]
fn jobs_and_runs_show_metrics_and_details() {
    let p = project();
    let out = p.run(&["--json", "jobs"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["jobs"][0]["job"], "a");
    assert_eq!(v["jobs"][0]["runs"], 2);
    assert_eq!(v["jobs"][0]["success_rate"], 0.5);
    let out = p.run(&["jobs"]);
    assert!(out.stdout.contains("a    2     50%"), "{}", out.stdout);
    assert!(out.stdout.contains("b    0     -"), "{}", out.stdout);
    let out = p.run(&["--json", "jobs", "a"]);
    assert_eq!(out.json()["runs"].as_array().unwrap().len(), 2);
    let out = p.run(&["jobs", "nope"]);
    out.expect_code(2);
    let out = p.run(&["--json", "runs", "run2"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["exit_code"], 3);
    assert_eq!(v["inputs"][0], "raw/2020-01-01");
    p.run(&["runs", "nope"]).expect_code(2);
}

#[test]
fn taint_marks_partitions_and_refuses_unknown_refs() {
    let p = project();
    p.run(&["taint", "a/2020-01-01", "--reason", "bad upstream"])
        .expect_code(0);
    let v = p.run(&["--json", "status", "a/2020-01-01"]).json();
    assert_eq!(v[0]["status"], "tainted");
    assert_eq!(v[0]["reasons"][0], "tainted: bad upstream");
    let out = p.run(&["taint", "zzz/1"]);
    out.expect_code(2);
    assert!(out.stderr.contains("no job builds it"), "{}", out.stderr);
}

#[test]
fn sql_answers_reads_and_refuses_writes_with_exit_2() {
    let p = project();
    let out = p.run(&[
        "--json",
        "sql",
        "SELECT job, status FROM job_run_durations ORDER BY job_run_id",
    ]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["columns"], serde_json::json!(["job", "status"]));
    assert_eq!(v["rows"][1], serde_json::json!(["a", "failed"]));
    for q in [
        "DELETE FROM events",
        "SELECT 1; SELECT 2",
        "ATTACH DATABASE 'x.db' AS x",
        "PRAGMA writable_schema = 1",
    ] {
        let out = p.run(&["sql", q]);
        out.expect_code(2);
        assert!(out.stderr.starts_with("error: "), "{q}: {}", out.stderr);
    }
    let count = p
        .run(&["--json", "sql", "SELECT count(*) FROM events"])
        .json();
    assert_eq!(count["rows"][0][0], 24, "nothing was written");
}

#[test]
fn analyze_records_its_build_request() {
    let p = project();
    let out = p.run(&["--json", "analyze", "b/2020-01-01"]);
    out.expect_code(0);
    let id = out.json()["build_request_id"].as_str().unwrap().to_string();
    let b = p.run(&["--json", "builds", &id]).json();
    assert_eq!(b["status"], "analysis_completed");
    assert_eq!(b["analyze_only"], true);
    assert_eq!(b["requested_partitions"][0], "b/2020-01-01");
    let events = p.run(&["--json", "events", "--build", &id]);
    let statuses: Vec<String> = events
        .stdout
        .lines()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["status"]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(statuses, ["received", "planning", "analysis_completed"]);
    // a/2020-01-01 is live in the log: only b runs.
    assert_eq!(out.json()["job_runs"].as_array().unwrap().len(), 1);
}

#[test]
fn broken_logs_get_one_clear_error() {
    let p = Project::new(GRAPH);
    p.file(".databuild/events.db", &"garbage ".repeat(1000));
    let out = p.run(&["status", "a/2020-01-01"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("is not an SQLite database"),
        "{}",
        out.stderr
    );
    assert_eq!(
        std::fs::read_to_string(p.path().join(".databuild/events.db")).unwrap(),
        "garbage ".repeat(1000)
    );
    let out = p.run(&["--event-log", "sqlite:no/such/dir/x.db", "builds"]);
    out.expect_code(2);
    assert!(out.stderr.contains("does not exist"), "{}", out.stderr);
    let out = p.run(&["--event-log", "mysql://x", "builds"]);
    out.expect_code(2);
    assert!(
        out.stderr.contains("unknown event log scheme `mysql`"),
        "{}",
        out.stderr
    );
}

/// A request of many refs is listed by its count and first few refs, however large: `builds`,
/// `/api/v1/builds` and the home page never carry its whole list, nor does a build's detail
/// (`builds ID --json`: its first 1,000).
#[test]
fn a_large_request_is_listed_by_its_count_and_first_refs() {
    let p = Project::new(
        r#"
[graph]
name = "wide"
[[job]]
name = "x"
outputs = ["x/{n:int}"]
command = ["true"]
"#,
    );
    // A build refused before it runs anything is recorded with its whole request.
    p.run(&["build", "--max-runs", "1", "x/{1..50000}"])
        .expect_code(2);
    let listed = p.run(&["--json", "builds"]).json();
    let b = &listed["builds"][0];
    let id = b["build_request_id"].as_str().unwrap().to_string();
    assert_eq!(b["requested_count"], 50000);
    assert_eq!(b["requested_partitions"].as_array().unwrap().len(), 10);
    assert_eq!(b["requested_partitions"][9], "x/10");
    let text = p.run(&["builds"]);
    assert!(
        text.stdout.contains("x/1, x/2 (+49998 more)"),
        "{}",
        text.stdout
    );
    let s = crate::util::Service::start(&p, &[]);
    let (_, v) = s.get("/api/v1/builds");
    assert_eq!(v["builds"][0]["requested_count"], 50000);
    assert_eq!(
        v["builds"][0]["requested_partitions"]
            .as_array()
            .unwrap()
            .len(),
        10
    );
    let (_, home) = s.call("GET", "/", None, None);
    assert!(
        home.contains("+49997 more"),
        "the home page counts the rest"
    );
    assert!(
        !home.contains("x/11<"),
        "the home page never lists them all"
    );
    // A build's detail is a page too: the first 1,000 refs, and the count.
    let detail = p.run(&["--json", "builds", &id]).json();
    assert_eq!(
        detail["requested_partitions"].as_array().unwrap().len(),
        1000
    );
    assert_eq!(detail["requested_partitions"][999], "x/1000");
    assert_eq!(detail["requested_count"], 50000);
}

/// A PostgreSQL log that does not answer is the system's failure (exit 1), said with why; not
/// the request's (exit 2).
#[test]
fn an_unreachable_postgres_log_exits_1_saying_why() {
    let p = project();
    // Nothing listens on port 1.
    let out = p.run(&[
        "--event-log",
        "postgres://127.0.0.1:1/db",
        "status",
        "a/2020-01-01",
    ]);
    out.expect_code(1);
    assert!(
        out.stderr.contains("is unreachable") && out.stderr.contains("Connection refused"),
        "{}",
        out.stderr
    );
}
