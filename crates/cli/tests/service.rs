//! `databuild serve` over real sockets: every endpoint, errors, the token, SSE, `--server`
//! parity, SIGTERM and restart after kill -9.

use std::io::{BufRead, BufReader};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::util::{Project, Service};

const GRAPH: &str = r#"
[graph]
name = "svc"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["sh", "job.sh"]
[[job]]
name = "b"
outputs = ["b/{d:date}"]
inputs = ["a/{d}"]
command = ["sh", "job.sh"]
"#;

const JOB: &str = r#"set -e
sleep "${SLEEP:-0}"
echo "building $DATABUILD_OUTPUTS"
for out in $(echo "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr ',' ' '); do
  mkdir -p "$(dirname "$DATABUILD_DATA_DIR/$out")"
  echo "$DATABUILD_JOB_RUN_ID" > "$DATABUILD_DATA_DIR/$out"
  echo "$out" >> "$DATABUILD_DATA_DIR/../built.log"
done
"#;

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file("job.sh", JOB);
    for d in 1..=5 {
        p.partition(&format!("raw/2020-01-0{d}"));
    }
    p
}

fn built(p: &Project) -> Vec<String> {
    std::fs::read_to_string(p.path().join("built.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn every_endpoint_answers_over_a_real_socket() {
    let p = project();
    let s = Service::start(&p, &[]);
    let (status, v) = s.post("/api/v1/builds", &json!({ "partitions": ["b/2020-01-01"] }));
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap().to_string();
    let build = s.wait_for_build(&id);
    assert_eq!(build["status"], "completed");
    assert_eq!(
        build["summary"]["built"],
        json!(["a/2020-01-01", "b/2020-01-01"])
    );
    assert_eq!(build["partitions"].as_array().unwrap().len(), 2);
    assert_eq!(build["job_runs"].as_array().unwrap().len(), 2);

    let (_, list) = s.get("/api/v1/builds?limit=5&status=completed");
    assert_eq!(list["builds"][0]["build_request_id"], id.as_str());
    let (_, events) = s.get(&format!("/api/v1/builds/{id}/events"));
    let events = events["events"].as_array().unwrap().clone();
    assert_eq!(events.first().unwrap()["status"], "received");
    assert_eq!(events.last().unwrap()["status"], "completed");

    // The stream replays the whole build and ends, as the build has.
    let (status, body) = s.call(
        "GET",
        &format!("/api/v1/builds/{id}/events/stream"),
        None,
        None,
    );
    assert_eq!(status, 200);
    let streamed = body.lines().filter(|l| l.starts_with("data:")).count();
    assert_eq!(streamed, events.len());

    let (status, analysis) = s.post(
        "/api/v1/analyze",
        &json!({ "partitions": ["b/2020-01-02"] }),
    );
    assert_eq!(status, 200, "{analysis}");
    assert_eq!(analysis["job_runs"].as_array().unwrap().len(), 2);
    assert_eq!(analysis["skipped"], json!(["raw/2020-01-02"]));

    let (_, page) = s.get("/api/v1/partitions?status=live&limit=1");
    assert_eq!(page["partitions"][0]["ref"], "a/2020-01-01");
    assert_eq!(page["next"], "a/2020-01-01");
    let (_, page) = s.get("/api/v1/partitions?status=live&after=a%2F2020-01-01");
    assert_eq!(page["partitions"][0]["ref"], "b/2020-01-01");
    let (_, st) = s.get("/api/v1/partitions/b%2F2020-01-01/status");
    assert_eq!(st["status"], "live");
    let (_, pe) = s.get("/api/v1/partitions/b%2F2020-01-01/events");
    // scheduled, building, available (the request's refs are in its `received`).
    assert_eq!(pe["events"].as_array().unwrap().len(), 3, "{pe}");
    let (_, x) = s.get("/api/v1/partitions/b%2F2020-01-03/explain");
    assert_eq!(x["to_build"].as_array().unwrap().len(), 2);
    let (_, ev) = s.get("/api/v1/events?since=3&limit=2");
    assert_eq!(ev["events"][0]["idx"], 4);
    assert_eq!(ev["next"], 5);
    // `limit=0` is a page of one on every listing, whose cursor moves on.
    for (path, rows) in [
        ("/api/v1/events?since=3&limit=0", "events"),
        ("/api/v1/partitions?limit=0", "partitions"),
    ] {
        let (code, page) = s.get(path);
        assert_eq!(code, 200, "{path}: {page}");
        assert_eq!(page[rows].as_array().unwrap().len(), 1, "{path}: {page}");
        assert!(!page["next"].is_null(), "{path}: {page}");
    }
    let (_, ev) = s.get("/api/v1/events?from=2000-01-01T00:00:00Z&to=2100-01-01T00:00:00Z&job=a");
    assert!(!ev["events"].as_array().unwrap().is_empty());
    let (_, jobs) = s.get("/api/v1/jobs");
    assert_eq!(jobs["jobs"].as_array().unwrap().len(), 2);
    let (_, job) = s.get("/api/v1/jobs/a");
    assert_eq!(job["job"]["runs"], 1);
    let (_, runs) = s.get("/api/v1/jobs/b/runs");
    let run_id = runs["runs"][0]["job_run_id"].as_str().unwrap().to_string();
    let (_, run) = s.get(&format!("/api/v1/job-runs/{run_id}"));
    assert_eq!(run["status"], "completed");
    let (status, log) = s.call("GET", &format!("/api/v1/job-runs/{run_id}/log"), None, None);
    assert_eq!(status, 200);
    assert!(log.contains("building [\"b/2020-01-01\"]"), "{log}");
    let (_, datasets) = s.get("/api/v1/datasets");
    let a = datasets["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "a")
        .unwrap()
        .clone();
    assert_eq!(a["partitions"]["live"], 1);
    let (status, sql) = s.post(
        "/api/v1/sql",
        &json!({ "query": "SELECT count(*) FROM job_runs" }),
    );
    assert_eq!(status, 200);
    assert_eq!(sql["rows"][0][0], 2);
    let (status, taint) = s.post(
        "/api/v1/partitions/taint",
        &json!({ "partitions": ["a/2020-01-01"], "reason": "bad" }),
    );
    assert_eq!(status, 200, "{taint}");
    let (_, graph) = s.get("/api/v1/graph?format=json");
    assert_eq!(graph["jobs"].as_array().unwrap().len(), 2);

    let (_, doc) = s.get("/api/v1/openapi.json");
    let paths = doc["paths"].as_object().unwrap();
    for path in [
        "/api/v1/builds",
        "/api/v1/builds/{id}",
        "/api/v1/builds/{id}/events/stream",
        "/api/v1/analyze",
        "/api/v1/partitions",
        "/api/v1/events",
        "/api/v1/jobs",
        "/api/v1/job-runs/{id}/log",
        "/api/v1/sql",
        "/api/v1/datasets",
    ] {
        assert!(
            paths.contains_key(path),
            "{path} missing from the OpenAPI document"
        );
    }
    let (status, body) = s.call("GET", "/healthz", None, None);
    assert_eq!((status, body.trim()), (200, "ok"));
    let (status, metrics) = s.call("GET", "/metrics", None, None);
    assert_eq!(status, 200);
    assert!(
        metrics.contains("databuild_build_requests{status=\"completed\"} 1"),
        "{metrics}"
    );
    assert!(
        metrics.contains("databuild_job_runs{job=\"a\",status=\"completed\"} 1"),
        "{metrics}"
    );
    assert!(metrics.contains("databuild_events "), "{metrics}");

    let (status, v) = s.call("DELETE", &format!("/api/v1/builds/{id}"), None, None);
    assert_eq!(status, 409, "{v}");
}

#[test]
fn bad_requests_get_json_errors_naming_the_problem() {
    let p = project();
    let s = Service::start(&p, &[]);
    // (method, path, body, status, code, words of the message)
    type Case = (
        &'static str,
        &'static str,
        Option<String>,
        u16,
        &'static str,
        &'static str,
    );
    let cases: Vec<Case> = vec![
        (
            "POST",
            "/api/v1/builds",
            Some("{not json".into()),
            400,
            "bad_json",
            "parse",
        ),
        (
            "POST",
            "/api/v1/builds",
            Some(r#"{"partitions": ["zzz/1"]}"#.into()),
            400,
            "bad_request",
            "no job builds `zzz/1`",
        ),
        (
            "POST",
            "/api/v1/builds",
            Some(r#"{"partitions": ["../etc/passwd"]}"#.into()),
            400,
            "bad_request",
            "path segment",
        ),
        (
            "POST",
            "/api/v1/builds",
            Some(r#"{"partitions": []}"#.into()),
            400,
            "bad_request",
            "empty",
        ),
        (
            "POST",
            "/api/v1/builds",
            Some(r#"{"partitions": ["a/2020-01-01"], "colour": 1}"#.into()),
            400,
            "bad_json",
            "unknown field",
        ),
        (
            "POST",
            "/api/v1/wants",
            Some(r#"{"partitions": ["a/2020-01-01"], "tll": "1h"}"#.into()),
            400,
            "bad_json",
            "unknown field `tll`",
        ),
        (
            "POST",
            "/api/v1/gc",
            Some("[]".into()),
            400,
            "bad_json",
            "expected a JSON object",
        ),
        (
            "POST",
            "/api/v1/builds",
            Some(r#"[["a/2020-01-01"]]"#.into()),
            400,
            "bad_json",
            "expected a JSON object",
        ),
        (
            "GET",
            "/api/v1/builds/nope",
            None,
            404,
            "not_found",
            "no build request `nope`",
        ),
        (
            "DELETE",
            "/api/v1/builds/nope",
            None,
            404,
            "not_found",
            "no build request `nope`",
        ),
        (
            "GET",
            "/api/v1/job-runs/nope",
            None,
            404,
            "not_found",
            "no job run",
        ),
        (
            "GET",
            "/api/v1/jobs/nope",
            None,
            404,
            "not_found",
            "no job `nope`",
        ),
        (
            "GET",
            "/api/v1/partitions?status=shiny",
            None,
            400,
            "bad_request",
            "`shiny` is not a partition status; use live, stale, building, failed, tainted",
        ),
        (
            "GET",
            "/api/v1/events?from=yesterday",
            None,
            400,
            "bad_request",
            "RFC 3339",
        ),
        (
            "POST",
            "/api/v1/sql",
            Some(r#"{"query": "DELETE FROM events"}"#.into()),
            400,
            "sql_refused",
            "only reads",
        ),
        (
            "POST",
            "/api/v1/sql",
            Some(r#"{"query": "SELECT printf('%.*c', 100000000, 'x')"}"#.into()),
            400,
            "sql_too_large",
            "longer than 1 MiB",
        ),
        (
            "GET",
            "/api/v1/nothing",
            None,
            404,
            "not_found",
            "no such endpoint",
        ),
    ];
    for (method, path, body, status, code, needle) in cases {
        let (got, text) = s.call(method, path, body.as_deref(), None);
        assert_eq!(got, status, "{method} {path}: {text}");
        let v: serde_json::Value = serde_json::from_str(&text)
            .unwrap_or_else(|_| panic!("{method} {path}: not JSON: {text}"));
        assert_eq!(v["code"], code, "{method} {path}: {v}");
        assert!(
            v["error"].as_str().unwrap().contains(needle),
            "{method} {path}: {v}"
        );
    }
}

#[test]
fn oversized_bodies_are_refused_before_they_are_read() {
    use std::io::{Read, Write};
    let p = project();
    let s = Service::start(&p, &[]);
    let addr = s.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    write!(
        stream,
        "POST /api/v1/builds HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: 2000000\r\nConnection: close\r\n\r\n{{\"partitions\": [\""
    )
    .unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
}

#[test]
fn the_token_guards_mutating_requests() {
    let p = project();
    let s = Service::start(&p, &[("DATABUILD_TOKEN", "s3cret")]);
    let body = r#"{"partitions": ["a/2020-01-01"]}"#;
    let (status, text) = s.call("POST", "/api/v1/builds", Some(body), None);
    assert_eq!(status, 401, "{text}");
    assert!(text.contains("unauthorized"));
    let (status, _) = s.call("POST", "/api/v1/builds", Some(body), Some("wrong"));
    assert_eq!(status, 401);
    let (status, _) = s.call("DELETE", "/api/v1/builds/x", None, None);
    assert_eq!(status, 401);
    let (status, text) = s.call("POST", "/api/v1/builds", Some(body), Some("s3cret"));
    assert_eq!(status, 202, "{text}");
    let (status, _) = s.call("GET", "/api/v1/builds", None, None);
    assert_eq!(status, 200, "reads need no token");
    // The CLI sends the token from the environment.
    let out = p
        .command()
        .args(["--server", &s.url, "taint", "a/2020-01-05"])
        .env("DATABUILD_TOKEN", "s3cret")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = p
        .command()
        .args(["--server", &s.url, "taint", "a/2020-01-05"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("Bearer"));
}

#[test]
fn the_cli_gives_the_same_answers_through_the_service() {
    let p = project();
    let s = Service::start(&p, &[]);
    let remote = |args: &[&str]| {
        let mut all = vec!["--server", s.url.as_str()];
        all.extend_from_slice(args);
        p.run(&all)
    };
    // A build through the service, followed with the same progress lines and summary.
    let out = remote(&["build", "b/2020-01-01"]);
    out.expect_code(0);
    assert!(
        out.stdout
            .contains("completed: 2 built, 0 skipped, 0 delegated, 0 failed"),
        "{}",
        out.stdout
    );
    assert!(
        out.stderr.contains("done    b  b/2020-01-01"),
        "{}",
        out.stderr
    );
    let json = remote(&["--json", "build", "b/2020-01-01"]);
    json.expect_code(0);
    assert_eq!(json.json()["skipped"], json!(["b/2020-01-01"]));
    let build_id = json.json()["build_request_id"]
        .as_str()
        .unwrap()
        .to_string();

    let run_id = p.run(&["--json", "jobs", "b"]).json()["runs"][0]["job_run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let same: Vec<Vec<&str>> = vec![
        vec!["status", "b/2020-01-0{1..3}", "zzz/1"],
        vec!["--json", "status", "b/2020-01-01"],
        vec!["explain", "b/2020-01-01"],
        vec!["--json", "explain", "b/2020-01-02"],
        vec!["partitions"],
        vec!["--json", "partitions", "--status", "live", "--limit", "1"],
        vec!["builds"],
        vec!["--json", "builds", &build_id],
        vec!["builds", &build_id],
        vec!["events", "--build", &build_id],
        vec!["--json", "events", "--job", "a", "--limit", "3"],
        vec!["jobs"],
        vec!["--json", "jobs", "b"],
        vec!["datasets"],
        vec!["--json", "datasets"],
        vec!["runs", &run_id],
        vec!["--json", "runs", &run_id],
        vec!["sql", "SELECT job, status FROM job_runs ORDER BY job"],
        vec![
            "--json",
            "sql",
            "SELECT count(*) AS n FROM events WHERE idx < 10",
        ],
        vec!["graph"],
        vec!["graph", "--format", "mermaid"],
        vec!["--json", "graph"],
        // Errors: same message, same exit code.
        vec!["builds", "nope"],
        vec!["runs", "nope"],
        vec!["sql", "DELETE FROM events"],
        vec!["status", "../x"],
        vec!["cancel", &build_id],
    ];
    for args in same {
        let local = p.run(&args);
        let served = remote(&args);
        assert_eq!(
            local.code, served.code,
            "{args:?}\nlocal: {}\nserved: {}",
            local.stderr, served.stderr
        );
        assert_eq!(local.stdout, served.stdout, "{args:?}");
        assert_eq!(local.stderr, served.stderr, "{args:?}");
    }
    // Analyses differ only by their new build request id.
    let mask = |s: &str| {
        s.lines()
            .filter(|l| !l.contains("build_request_id"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    let local = p.run(&["--json", "analyze", "b/2020-01-03"]);
    let served = remote(&["--json", "analyze", "b/2020-01-03"]);
    assert_eq!(mask(&local.stdout), mask(&served.stdout));
    assert_eq!(
        p.run(&["analyze", "b/2020-01-04"]).stdout,
        remote(&["analyze", "b/2020-01-04"]).stdout
    );
    let missing = (
        p.run(&["analyze", "b/2020-01-09"]),
        remote(&["analyze", "b/2020-01-09"]),
    );
    assert_eq!(
        (missing.0.code, missing.0.stderr),
        (missing.1.code, missing.1.stderr)
    );
    // Taint and cancel work remotely too.
    remote(&["taint", "a/2020-01-01"]).expect_code(0);
    assert_eq!(
        p.run(&["--json", "status", "a/2020-01-01"]).json()[0]["status"],
        "tainted"
    );
    let unreachable = p.run(&["--server", "http://127.0.0.1:9", "builds"]);
    unreachable.expect_code(1);
    assert!(
        unreachable
            .stderr
            .contains("cannot reach the databuild service at http://127.0.0.1:9"),
        "{}",
        unreachable.stderr
    );
}

#[test]
fn overlapping_requests_delegate_and_run_each_job_once() {
    let p = project();
    let s = Service::start(&p, &[("SLEEP", "0.3")]);
    let ids: Vec<String> = (0..3)
        .map(|_| {
            let (status, v) = s.post(
                "/api/v1/builds",
                &json!({ "partitions": ["b/2020-01-01", "b/2020-01-02"] }),
            );
            assert_eq!(status, 202);
            v["build_request_id"].as_str().unwrap().to_string()
        })
        .collect();
    for id in &ids {
        assert_eq!(s.wait_for_build(id)["status"], "completed");
    }
    let mut runs = built(&p);
    runs.sort();
    assert_eq!(
        runs,
        [
            "a/2020-01-01",
            "a/2020-01-02",
            "b/2020-01-01",
            "b/2020-01-02"
        ]
    );
    let delegated: usize = ids
        .iter()
        .map(|id| {
            s.get(&format!("/api/v1/builds/{id}")).1["summary"]["delegated"]
                .as_array()
                .unwrap()
                .len()
        })
        .sum();
    assert!(delegated >= 2, "later requests relied on the first");
}

#[test]
fn the_stream_follows_a_running_build_until_it_ends() {
    let p = project();
    let s = Service::start(&p, &[("SLEEP", "0.5")]);
    let (_, v) = s.post("/api/v1/builds", &json!({ "partitions": ["b/2020-01-01"] }));
    let id = v["build_request_id"].as_str().unwrap();
    let response = Service::agent()
        .get(&format!("{}/api/v1/builds/{id}/events/stream", s.url))
        .call()
        .unwrap();
    let reader = BufReader::new(response.into_body().into_reader());
    let statuses: Vec<String> = reader
        .lines()
        .map_while(Result::ok)
        .filter_map(|l| {
            l.strip_prefix("data:")
                .map(|d| serde_json::from_str::<serde_json::Value>(d.trim()).unwrap())
        })
        .map(|e| {
            format!(
                "{}:{}",
                e["kind"].as_str().unwrap(),
                e["status"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(statuses.first().unwrap(), "build_request:received");
    assert_eq!(statuses.last().unwrap(), "build_request:completed");
    assert!(statuses.contains(&"job_run:running".to_string()));
}

#[test]
fn sigterm_cancels_running_builds_and_exits_promptly() {
    let p = project();
    let mut s = Service::start(&p, &[("SLEEP", "60")]);
    let (_, v) = s.post("/api/v1/builds", &json!({ "partitions": ["a/2020-01-01"] }));
    let id = v["build_request_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.get(&format!("/api/v1/builds/{id}")).1["job_runs"][0]["status"] != "running" {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = s.stop();
    assert!(took < Duration::from_secs(10), "took {took:?}");
    let b = p.run(&["--json", "builds", &id]).json();
    assert_eq!(b["status"], "cancelled");
    assert_eq!(b["job_runs"][0]["status"], "cancelled");
}

#[test]
fn a_restart_after_kill_9_closes_what_was_left_running() {
    let p = project();
    let s = Service::start(&p, &[("SLEEP", "60")]);
    let (_, v) = s.post("/api/v1/builds", &json!({ "partitions": ["a/2020-01-01"] }));
    let id = v["build_request_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while s.get(&format!("/api/v1/builds/{id}")).1["job_runs"][0]["status"] != "running" {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(s); // SIGKILL
    let s = Service::start(&p, &[]);
    let (_, b) = s.get(&format!("/api/v1/builds/{id}"));
    assert_eq!(b["status"], "failed");
    assert!(b["message"].as_str().unwrap().contains("is gone"), "{b}");
    assert_eq!(b["job_runs"][0]["status"], "failed");
    // Its claim is given back (no job finished it): as it was before, missing, for anyone to build.
    let (_, st) = s.get("/api/v1/partitions/a%2F2020-01-01/status");
    assert_eq!(st["status"], "missing");
    let (_, v) = s.post("/api/v1/builds", &json!({ "partitions": ["a/2020-01-01"] }));
    let again = s.wait_for_build(v["build_request_id"].as_str().unwrap());
    assert_eq!(again["status"], "completed");
}

#[test]
fn every_entry_point_takes_refs_through_one_parser_braces_and_cap_included() {
    let p = project();
    p.run(&["build", "a/2020-01-{01,02}"]).expect_code(0);
    let s = Service::start(&p, &[("DATABUILD_MAX_REFS", "3")]);
    // Wants and taints expand braces as builds do (they took refs one by one before).
    let (status, want) = s.post(
        "/api/v1/wants",
        &json!({"partitions": ["b/2020-01-{01,02}"], "ttl": "1d"}),
    );
    assert_eq!(status, 201, "{want}");
    assert_eq!(want["refs"], json!(["b/2020-01-01", "b/2020-01-02"]));
    let (status, tainted) = s.post(
        "/api/v1/partitions/taint",
        &json!({"partitions": ["a/2020-01-{01,02}"]}),
    );
    assert_eq!(status, 200, "{tainted}");
    assert_eq!(tainted["events"].as_array().unwrap().len(), 2, "{tainted}");
    // And the same cap: more refs than DATABUILD_MAX_REFS is a 413 everywhere.
    for path in [
        "/api/v1/wants",
        "/api/v1/partitions/taint",
        "/api/v1/analyze",
    ] {
        let (status, v) = s.post(path, &json!({"partitions": ["a/2020-01-{01..09}"]}));
        assert_eq!(
            (status, v["code"].as_str()),
            (413, Some("too_many_refs")),
            "{path}: {v}"
        );
    }
}

/// The service's intervals are read once, at start: one that does not parse stops it with an
/// error naming the variable, instead of quietly running on the default.
#[test]
fn an_interval_that_does_not_parse_stops_the_service_naming_it() {
    let p = project();
    for (var, value) in [
        ("DATABUILD_SOURCE_INTERVAL", "soon"),
        ("DATABUILD_WANT_PROBE_INTERVAL", "-5"),
        ("DATABUILD_WANT_RETRY_INTERVAL", "0"),
    ] {
        let out = p
            .command()
            .args(["serve", "--bind", "127.0.0.1:0"])
            .env(var, value)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}: {stderr}");
        assert!(
            stderr.contains(&format!("{var}={value} is not a positive interval")),
            "{stderr}"
        );
    }
}

/// A build's detail is a page whatever the build's size: the first 1,000 partitions with a
/// cursor, the newest runs with their total, a summary whose lists are cut but whose counts are
/// whole; the rest is paged (`builds ID --partitions`, `/partitions`, `/events`), and the whole
/// summary has its own endpoint. The same through the CLI, in-process and with `--server`.
#[test]
fn a_big_builds_detail_is_a_page_and_the_rest_is_paged() {
    let p = project();
    let days = 1003;
    let first = chrono_day(0);
    let last = chrono_day(days - 1);
    for d in 0..days {
        p.partition(&format!("raw/{}", chrono_day(d)));
    }
    let requested = format!("a/{{{first}..{last}}}");
    p.run(&["build", "--parallel", "2", &requested])
        .expect_code(0);
    let s = Service::start(&p, &[]);
    let every: Vec<String> = (0..days).map(|d| format!("a/{}", chrono_day(d))).collect();
    for server in [None, Some(s.url.as_str())] {
        let cli = |args: &[&str]| {
            let mut all: Vec<&str> = server.map_or(vec![], |u| vec!["--server", u]);
            all.extend(args);
            p.run(&all).expect_code(0).json()
        };
        let detail = cli(&["--json", "builds", "last"]);
        let id = detail["build_request_id"].as_str().unwrap().to_string();
        assert_eq!(
            detail["partitions"].as_array().unwrap().len(),
            1000,
            "{server:?}"
        );
        assert_eq!(detail["partitions_next"], json!(every[999]));
        let summary = &detail["summary"];
        assert_eq!(summary["counts"]["built"], json!(days), "{summary}");
        assert_eq!(summary["built"].as_array().unwrap().len(), 1000);
        assert_eq!(detail["job_runs"].as_array().unwrap().len(), 1000);
        assert_eq!(detail["job_runs_total"], json!(days));
        assert_eq!(
            detail["requested_partitions"].as_array().unwrap().len(),
            1000
        );
        assert_eq!(detail["requested_count"], json!(days));
        // Every partition once, in order, a page at a time.
        let mut seen = Vec::new();
        let mut after: Option<String> = None;
        loop {
            let mut args = vec!["--json", "builds", &id, "--partitions", "--limit", "400"];
            if let Some(a) = &after {
                args.extend(["--after", a.as_str()]);
            }
            let page = cli(&args);
            seen.extend(
                page["partitions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .map(|r| r["ref"].as_str().unwrap().to_string()),
            );
            match page["next"].as_str() {
                Some(n) => after = Some(n.to_string()),
                None => break,
            }
        }
        assert_eq!(seen, every, "{server:?}");
    }
    let (_, detail) = s.get("/api/v1/builds/last");
    let id = detail["build_request_id"].as_str().unwrap();
    let (status, whole) = s.get(&format!("/api/v1/builds/{id}/summary"));
    assert_eq!(status, 200, "{whole}");
    assert_eq!(whole["built"].as_array().unwrap().len(), days);
    // (`unchanged`, `reused` and `kept` count parts of `built` and `skipped`, not lists of
    // their own.)
    let counts = detail["summary"]["counts"].as_object().unwrap();
    for (list, count) in counts
        .iter()
        .filter(|(k, _)| !["unchanged", "reused", "kept"].contains(&k.as_str()))
    {
        assert_eq!(
            whole[list].as_array().unwrap().len() as u64,
            count.as_u64().unwrap(),
            "{list}: the detail's count is the whole list's length"
        );
    }
    let (status, page) = s.get(&format!(
        "/api/v1/builds/{id}/partitions?limit=10&after=a%2F2020-01-05"
    ));
    assert_eq!(status, 200, "{page}");
    assert_eq!(page["partitions"][0]["ref"], json!("a/2020-01-06"));
    assert_eq!(page["next"], json!("a/2020-01-15"));
    let (_, events) = s.get(&format!("/api/v1/builds/{id}/events?limit=5"));
    assert_eq!(events["events"].as_array().unwrap().len(), 5);
    let next = events["next"].as_i64().expect("a full page names the next");
    let (_, more) = s.get(&format!("/api/v1/builds/{id}/events?limit=5&since={next}"));
    assert!(more["events"][0]["idx"].as_i64().unwrap() > next, "{more}");
    // `--limit 0`: all the detail holds (by default, `--limit` rows of it).
    let text = p.run(&["builds", id, "--limit", "0"]).stdout;
    assert!(
        text.contains(&format!("--partitions --after '{}'", every[999])),
        "{text}"
    );
}

/// `2020-01-01` plus `d` days.
fn chrono_day(d: usize) -> String {
    let start = chrono::NaiveDate::from_ymd_opt(2020, 1, 1).unwrap();
    (start + chrono::Duration::days(d as i64)).to_string()
}
