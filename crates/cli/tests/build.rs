//! `build` over real processes: skipping, staleness, failures of every kind, retries, missing
//! dependencies, caps, concurrent builds, cancellation and crashes.

use std::process::Stdio;
use std::time::{Duration, Instant};

use crate::util::{Project, Service};

/// A job that writes each of its outputs and notes it in `built.log`, after `$SLEEP` seconds.
const JOB: &str = r#"#!/bin/sh
set -e
sleep "${SLEEP:-0}"
for out in $(echo "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr ',' ' '); do
  mkdir -p "$(dirname "$DATABUILD_DATA_DIR/$out")"
  echo "$DATABUILD_JOB_RUN_ID $DATABUILD_INPUTS" > "$DATABUILD_DATA_DIR/$out"
  echo "$out $(date +%s%N) $$" >> "$DATABUILD_DATA_DIR/../built.log"
done
"#;

const CHAIN: &str = r#"
[graph]
name = "chain"
[graph.domains]
c = ["x", "y"]
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
outputs = ["b/c={c}/{d:date}"]
inputs = ["a/{d-1d..d}"]
command = ["sh", "job.sh"]
[[job]]
name = "c"
outputs = ["c/{d:date}"]
inputs = ["b/c={c=*}/{d}"]
command = ["sh", "job.sh"]
"#;

fn chain() -> Project {
    let p = Project::new(CHAIN);
    p.file("job.sh", JOB);
    for d in 1..=9 {
        p.partition(&format!("raw/2020-01-0{d}"));
    }
    p
}

/// Refs in `built.log`, in order.
fn built(p: &Project) -> Vec<String> {
    std::fs::read_to_string(p.path().join("built.log"))
        .unwrap_or_default()
        .lines()
        .map(|l| l.split(' ').next().unwrap().to_string())
        .collect()
}

fn statuses(p: &Project, id: &str) -> Vec<(String, String)> {
    p.run(&["--json", "events", "--build", id])
        .stdout
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["kind"].as_str().unwrap().to_string(),
                v["status"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

#[test]
fn builds_exactly_what_is_needed_then_nothing() {
    let p = chain();
    let out = p.run(&["--json", "build", "c/2020-01-02"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["status"], "completed");
    assert_eq!(v["built"].as_array().unwrap().len(), 5, "a x2, b x2, c");
    let mut runs = built(&p);
    runs.sort();
    assert_eq!(
        runs,
        [
            "a/2020-01-01",
            "a/2020-01-02",
            "b/c=x/2020-01-02",
            "b/c=y/2020-01-02",
            "c/2020-01-02"
        ]
    );
    let content = std::fs::read_to_string(p.path().join("data/c/2020-01-02")).unwrap();
    assert!(
        content.contains("b/c=x/2020-01-02") && content.contains("b/c=y/2020-01-02"),
        "{content}"
    );

    let id = v["build_request_id"].as_str().unwrap().to_string();
    let events = statuses(&p, &id);
    assert_eq!(
        events.first().unwrap(),
        &("build_request".into(), "received".into())
    );
    assert_eq!(
        events.last().unwrap(),
        &("build_request".into(), "completed".into())
    );
    let completed = events
        .iter()
        .filter(|e| *e == &("job_run".to_string(), "completed".to_string()))
        .count();
    assert_eq!(completed, 5);

    let builder = crate::util::current_run(&p, "c/2020-01-02");
    let again = p.run(&["--json", "build", "c/2020-01-02"]);
    again.expect_code(0);
    assert_eq!(again.json()["skipped"], serde_json::json!(["c/2020-01-02"]));
    assert_eq!(built(&p).len(), 5, "nothing ran again");
    let id = again.json()["build_request_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(statuses(&p, &id).contains(&("job_run".into(), "skipped".into())));
    // The skipped run names the run that built what it found live.
    let relies_on = p.run(&[
        "--json",
        "sql",
        &format!("SELECT relies_on FROM job_runs WHERE build_request_id = '{id}'"),
    ]);
    assert_eq!(relies_on.json()["rows"], serde_json::json!([[builder]]));
}

#[test]
fn a_new_job_version_or_a_new_input_rebuilds_exactly_downstream() {
    let p = chain();
    p.run(&["build", "c/2020-01-02"]).expect_code(0);
    std::fs::write(
        p.path().join("databuild.toml"),
        CHAIN.replace("name = \"b\"\n", "name = \"b\"\nversion = \"2\"\n"),
    )
    .unwrap();
    let status = p
        .run(&["--json", "status", "c/2020-01-02", "a/2020-01-02"])
        .json();
    assert_eq!(status[0]["status"], "stale");
    assert!(
        status[0]["reasons"][0]
            .as_str()
            .unwrap()
            .contains("job `b` changed version from 0 to 2"),
        "{status}"
    );
    assert_eq!(status[1]["status"], "live");
    p.run(&["build", "c/2020-01-02"]).expect_code(0);
    let runs = built(&p);
    let mut rebuilt = runs[5..].to_vec();
    rebuilt.sort();
    assert_eq!(
        rebuilt,
        ["b/c=x/2020-01-02", "b/c=y/2020-01-02", "c/2020-01-02"]
    );

    // A re-delivered raw file makes its readers stale; --allow-stale builds nothing.
    std::thread::sleep(Duration::from_millis(20));
    p.file("data/raw/2020-01-02", "new delivery");
    p.run(&["build", "--allow-stale", "c/2020-01-02"])
        .expect_code(0);
    assert_eq!(built(&p).len(), 8);
    p.run(&["build", "c/2020-01-02"]).expect_code(0);
    let mut rebuilt = built(&p)[8..].to_vec();
    rebuilt.sort();
    assert_eq!(
        rebuilt,
        [
            "a/2020-01-02",
            "b/c=x/2020-01-02",
            "b/c=y/2020-01-02",
            "c/2020-01-02"
        ]
    );
    // --force rebuilds the requested ref alone.
    p.run(&["build", "--force", "c/2020-01-02"]).expect_code(0);
    assert_eq!(built(&p)[12..], ["c/2020-01-02"]);
}

fn failing(script: &str, extra: &str) -> Project {
    let p = Project::new(&format!(
        r#"
[graph]
name = "f"
[[job]]
name = "bad"
outputs = ["bad/{{n:int}}"]
command = ["sh", "-c", {script:?}]
{extra}
[[job]]
name = "good"
outputs = ["good/{{n:int}}"]
command = ["sh", "job.sh"]
[[job]]
name = "after"
outputs = ["after/{{n:int}}"]
inputs = ["bad/{{n}}"]
command = ["sh", "job.sh"]
"#
    ));
    p.file("job.sh", JOB);
    p
}

#[test]
fn failing_jobs_fail_their_runs_with_the_reason() {
    let cases = [
        ("exit 3", "", "the job ended with exit status 3"),
        ("true", "", "the job exited 0 but did not produce `bad/1`"),
        ("kill -9 $$", "", "the job was killed by signal 9 (SIGKILL)"),
        ("sleep 30", "timeout = \"300ms\"", "timed out after 300 ms"),
        ("yes databuild-flood", "", "more than 10 MiB of log"),
        ("echo '{not json'; exit 0", "", "did not produce"),
    ];
    for (script, extra, needle) in cases {
        let p = failing(script, extra);
        let started = Instant::now();
        let out = p.run(&["--json", "build", "after/1"]);
        out.expect_code(1);
        assert!(started.elapsed() < Duration::from_secs(20), "{script}");
        let v = out.json();
        assert_eq!(v["status"], "failed");
        assert_eq!(v["failed"], serde_json::json!(["after/1"]));
        let runs = p.run(&["--json", "jobs", "bad"]).json();
        let message = runs["runs"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        assert!(message.contains(needle), "{script}: {message}");
        let after = p.run(&["--json", "status", "after/1", "bad/1"]).json();
        assert_eq!(after[0]["status"], "missing");
        assert_eq!(after[1]["status"], "failed");
        assert!(
            after[1]["reasons"][0].as_str().unwrap().contains(needle),
            "{after}"
        );
        assert!(out.stderr.contains("FAILED  bad  bad/1"), "{}", out.stderr);
    }
}

/// Runs are claimed ahead of the slots (eight for one slot); when a failure stops the build, the
/// claimed runs are released in the log as not started, not left building, and none of them
/// starts after the failure.
#[test]
fn a_run_claimed_ahead_is_released_when_the_build_stops() {
    let p = failing("sleep 0.3; exit 3", "");
    let out = p.run(&["--json", "build", "--parallel", "1", "bad/{1..10}"]);
    out.expect_code(1);
    let runs = p.run(&["--json", "jobs", "bad"]).json();
    let mut seen: Vec<(String, String)> = runs["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let message = r["message"].as_str().unwrap_or_default();
            let message = message.split(':').next().unwrap_or_default();
            (
                r["status"].as_str().unwrap().to_string(),
                message.to_string(),
            )
        })
        .collect();
    seen.sort();
    assert_eq!(
        seen,
        [
            ("cancelled".to_string(), "not started".to_string()),
            ("cancelled".to_string(), "not started".to_string()),
            ("cancelled".to_string(), "not started".to_string()),
            ("cancelled".to_string(), "not started".to_string()),
            ("cancelled".to_string(), "not started".to_string()),
            ("cancelled".to_string(), "not started".to_string()),
            ("cancelled".to_string(), "not started".to_string()),
            ("cancelled".to_string(), "not started".to_string()),
            (
                "failed".to_string(),
                "the job ended with exit status 3".to_string()
            ),
        ],
        "{runs}"
    );
    // The tenth run was only planned: the plan's record says so (not run, the build having
    // ended), with no run of its own.
    let planned = p
        .run(&[
            "--json",
            "sql",
            "SELECT outputs, status, job_run_id IS NULL FROM planned_runs ORDER BY event_idx, position",
        ])
        .json();
    assert_eq!(planned["rows"].as_array().unwrap().len(), 10, "{planned}");
    assert_eq!(
        planned["rows"][9],
        serde_json::json!(["[\"bad/10\"]", "not_run", 1]),
        "{planned}"
    );
    let statuses = p.run(&["--json", "status", "bad/{1..10}"]).json();
    assert_eq!(statuses.as_array().unwrap().len(), 10, "{statuses}");
    for s in statuses.as_array().unwrap() {
        assert_ne!(s["status"], "building", "{statuses}");
    }
    p.run(&["check-log"]).expect_code(0);
}

#[test]
fn keep_going_builds_what_does_not_depend_on_the_failure() {
    let p = failing("exit 1", "");
    let out = p.run(&[
        "--json",
        "build",
        "--parallel",
        "1",
        "after/1",
        "good/1",
        "good/2",
    ]);
    out.expect_code(1);
    let v = out.json();
    assert!(
        v["built"].as_array().unwrap().len() < 2,
        "stopped after the failure: {v}"
    );
    let p = failing("exit 1", "");
    let out = p.run(&[
        "--json",
        "build",
        "--parallel",
        "1",
        "--keep-going",
        "after/1",
        "good/1",
        "good/2",
    ]);
    out.expect_code(1);
    let v = out.json();
    assert_eq!(v["built"], serde_json::json!(["good/1", "good/2"]));
    assert_eq!(v["failed"], serde_json::json!(["after/1"]));
}

#[test]
fn retries_run_again_and_missing_deps_are_built_first() {
    // Fails the first time, succeeds the second.
    let p = failing(
        r#"if [ -e tried ]; then mkdir -p data/bad && echo ok > data/bad/$DATABUILD_FIELD_N; else touch tried; exit 1; fi"#,
        "retries = 1",
    );
    let out = p.run(&["--json", "build", "bad/1"]);
    out.expect_code(0);
    let runs = p.run(&["--json", "jobs", "bad"]).json();
    assert_eq!(runs["job"]["runs"], 2);
    assert_eq!(runs["job"]["failed"], 1);

    // Needs good/N at run time, without declaring it: asks for it, then succeeds.
    let p = failing(
        r#"if [ -e data/good/$DATABUILD_FIELD_N ]; then mkdir -p data/bad && echo ok > data/bad/$DATABUILD_FIELD_N; else echo "DATABUILD_MISSING_DEPS [\"good/$DATABUILD_FIELD_N\"]"; exit 1; fi"#,
        "",
    );
    let out = p.run(&["--json", "build", "bad/7"]);
    out.expect_code(0);
    assert_eq!(built(&p), ["good/7"]);
    assert!(p.path().join("data/bad/7").exists());
}

/// A run that reports as missing an input built from its own output is a cycle: the build says
/// so, and the run that failed is in the summary's failures, not among what never started.
#[test]
fn a_missing_input_built_from_the_run_itself_is_a_cycle() {
    let p = Project::new(
        r#"
[graph]
name = "c"
[[job]]
name = "a"
outputs = ["a/{k}"]
command = ["sh", "-c", "echo 'DATABUILD_MISSING_DEPS [\"b/x\"]'; exit 5"]
[[job]]
name = "b"
outputs = ["b/{k}"]
inputs = ["a/{k}"]
command = ["true"]
"#,
    );
    let out = p.run(&["--json", "build", "a/x"]);
    out.expect_code(1);
    let v = out.json();
    assert!(
        v["message"]
            .as_str()
            .unwrap()
            .contains("a cycle (a/x → b/x → a/x)"),
        "{v}"
    );
    assert_eq!(
        v["failures"][0]["outputs"],
        serde_json::json!(["a/x"]),
        "{v}"
    );
    assert_eq!(v["not_started"], serde_json::json!(["b/x"]), "{v}");
    assert_eq!(v["failed"], serde_json::json!(["a/x"]), "{v}");
    p.run(&["check-log"]).expect_code(0);
}

/// The most runs of `job` alive at once, from `built.log`-style start/end records.
fn max_overlap(p: &Project) -> usize {
    let text = std::fs::read_to_string(p.path().join("spans.log")).unwrap();
    let mut points: Vec<(u128, i32)> = Vec::new();
    for line in text.lines() {
        let mut it = line.split(' ');
        let start: u128 = it.next().unwrap().parse().unwrap();
        let end: u128 = it.next().unwrap().parse().unwrap();
        points.push((start, 1));
        points.push((end, -1));
    }
    points.sort();
    let (mut now, mut max) = (0, 0);
    for (_, d) in points {
        now += d;
        max = max.max(now);
    }
    max as usize
}

#[test]
fn parallel_runs_overlap_and_concurrency_caps_them() {
    let span = r#"s=$(date +%s%N); sleep 0.3; mkdir -p data/w; touch data/w/$DATABUILD_FIELD_N; echo "$s $(date +%s%N)" >> spans.log"#;
    for (cap, expected) in [("", 4), ("concurrency = 1", 1)] {
        let p = Project::new(&format!(
            "[graph]\nname = \"p\"\n[[job]]\nname = \"w\"\noutputs = [\"w/{{n:int}}\"]\ncommand = [\"sh\", \"-c\", {span:?}]\n{cap}\n"
        ));
        p.run(&["build", "--parallel", "4", "w/{1..4}"])
            .expect_code(0);
        assert_eq!(max_overlap(&p), expected, "{cap}");
    }
}

/// Runs claimed ahead carry the completions of the runs before them into the log, but a
/// completion never waits for one: here the other runs wait until the test opens a gate. With
/// one slot and five runs waiting, the run's end does not even wake the scheduler
/// (`Launches::ended`): it is read at the scheduler's next timed wake-up, at most 100 ms on.
#[test]
fn a_finished_run_is_recorded_while_claimed_runs_wait_for_a_slot() {
    // The gate is given up after 20 s, so a failing test leaves no build behind.
    let job = r#"[ "$DATABUILD_FIELD_N" = 1 ] || for i in $(seq 400); do [ -e gate ] && break; sleep 0.05; done; mkdir -p data/w; touch data/w/$DATABUILD_FIELD_N"#;
    for (parallel, runs) in [("2", "w/{1..4}"), ("1", "w/{1..6}")] {
        let p = Project::new(&format!(
            "[graph]\nname = \"p\"\n[[job]]\nname = \"w\"\noutputs = [\"w/{{n:int}}\"]\ncommand = [\"sh\", \"-c\", {job:?}]\n"
        ));
        let mut build = p
            .command()
            .args(["build", "--parallel", parallel, runs])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let started = Instant::now();
        crate::util::eventually(Duration::from_secs(10), "w/1 live", || {
            let status = p.run(&["--json", "status", "w/1"]);
            (status.code == 0 && status.json()[0]["status"] == "live").then_some(())
        });
        assert!(
            started.elapsed() < Duration::from_millis(3500),
            "w/1 was recorded only after {:?} (--parallel {parallel})",
            started.elapsed()
        );
        assert!(build.try_wait().unwrap().is_none(), "the build still runs");
        p.file("gate", "");
        assert!(build.wait().unwrap().success(), "--parallel {parallel}");
        p.run(&["check-log"]).expect_code(0);
    }
}

/// A run's end is dated when its job ended, not when the scheduler read it: with one slot and
/// more than four runs waiting, the first runs' ends wait for the scheduler's next wake-up (up to
/// 100 ms), and their `ended_at` still says when each job ended.
#[test]
fn a_run_is_recorded_as_ending_when_its_job_ended() {
    let job = r#"[ "$DATABUILD_FIELD_N" = 1 ] || sleep 0.1; mkdir -p data/w; touch data/w/$DATABUILD_FIELD_N; date +%s%N > end.$DATABUILD_FIELD_N"#;
    let p = Project::new(&format!(
        "[graph]\nname = \"p\"\n[[job]]\nname = \"w\"\noutputs = [\"w/{{n:int}}\"]\ncommand = [\"sh\", \"-c\", {job:?}]\n"
    ));
    p.run(&["build", "--parallel", "1", "w/{1..8}"])
        .expect_code(0);
    for n in 1..=4 {
        let job_ended: i64 = std::fs::read_to_string(p.path().join(format!("end.{n}")))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let sql = format!(
            "SELECT r.ended_at FROM partitions p JOIN job_runs r USING (job_run_id) \
             WHERE p.partition_ref = 'w/{n}'"
        );
        let recorded = p.run(&["--json", "sql", &sql]).json()["rows"][0][0]
            .as_i64()
            .unwrap();
        let late_ms = (recorded - job_ended) / 1_000_000;
        assert!(
            (0..50).contains(&late_ms),
            "w/{n}'s end was recorded {late_ms} ms after its job ended"
        );
    }
}

/// Two builds wait for the same partition, then both claim what reads it: the one that comes
/// second has its batch of claims refused, relies on the other for the shared run, and still
/// claims and builds the run only it wants.
#[test]
fn a_refused_batch_of_claims_claims_the_other_runs_alone() {
    let p = Project::new(
        r#"
[graph]
name = "refused"
[[job]]
name = "a"
outputs = ["a/{n:int}"]
command = ["sh", "job.sh"]
[[job]]
name = "b"
outputs = ["b/{n:int}"]
inputs = ["a/{n}"]
command = ["sh", "job.sh"]
[[job]]
name = "c"
outputs = ["c/{n:int}"]
inputs = ["a/{n}"]
command = ["sh", "job.sh"]
"#,
    );
    p.file("job.sh", JOB);
    let spawn = |targets: &[&str]| {
        p.command()
            .args(["--json", "build", "--parallel", "2"])
            .args(targets)
            .env("SLEEP", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let first = spawn(&["b/1"]);
    wait_for_running_build(&p);
    let second = spawn(&["b/1", "c/1"]);
    let outputs: Vec<serde_json::Value> = [first, second]
        .into_iter()
        .map(|b| {
            let out = b.wait_with_output().unwrap();
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            serde_json::from_slice(&out.stdout).unwrap()
        })
        .collect();
    let mut runs = built(&p);
    runs.sort();
    assert_eq!(runs, ["a/1", "b/1", "c/1"], "each built once");
    assert_eq!(
        outputs[1]["built"],
        serde_json::json!(["c/1"]),
        "{}",
        outputs[1]
    );
    p.run(&["check-log"]).expect_code(0);
}

#[test]
fn two_concurrent_builds_run_each_job_once() {
    let p = chain();
    let builds: Vec<_> = (0..2)
        .map(|_| {
            p.command()
                .args(["--json", "build", "c/{2020-01-02..2020-01-04}"])
                .env("SLEEP", "0.2")
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs: Vec<_> = builds
        .into_iter()
        .map(|b| b.wait_with_output().unwrap())
        .collect();
    for o in &outputs {
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    }
    let runs = built(&p);
    let unique: std::collections::HashSet<_> = runs.iter().collect();
    assert_eq!(
        runs.len(),
        unique.len(),
        "a partition was built twice: {runs:?}"
    );
    assert_eq!(runs.len(), 4 + 6 + 3);
    let delegated: usize = outputs
        .iter()
        .map(|o| {
            let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            v["delegated"].as_array().unwrap().len() + v["skipped"].as_array().unwrap().len()
        })
        .sum();
    assert!(delegated > 0, "one build relied on the other");
    // Each build's record of its plan ends with every run accounted for: none left `planned`
    // or `not_run` (a run that lost its first claim to the other build is recorded
    // `cancelled`), and its progress counts what its runs say.
    let planned = p
        .run(&[
            "--json",
            "sql",
            "SELECT status, count(*) FROM planned_runs GROUP BY status ORDER BY status",
        ])
        .json();
    for row in planned["rows"].as_array().unwrap() {
        assert!(
            ["completed", "cancelled", "skipped"].contains(&row[0].as_str().unwrap()),
            "{planned}"
        );
    }
    for o in &outputs {
        let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let id = v["build_request_id"].as_str().unwrap();
        let progress = p.run(&["--json", "builds", id]).json()["progress"].clone();
        assert_eq!(progress["unclaimed"], 0, "{progress}");
        assert_eq!(
            progress["done"].as_u64().unwrap() + progress["cancelled"].as_u64().unwrap(),
            progress["planned"].as_u64().unwrap(),
            "{progress}"
        );
    }
    p.run(&["check-log"]).expect_code(0);
}

/// Starts a build of one job that sleeps 30 s and waits until it runs; returns it and its id.
fn sleeping_build(p: &Project) -> (std::process::Child, String) {
    let build = p
        .command()
        .args(["--json", "build", "a/2020-01-01"])
        .env("SLEEP", "30")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_for_running_build(p);
    (build, id)
}

/// The build ended cancelled, with its run cancelled, exiting 1.
fn assert_cancelled(p: &Project, build: std::process::Child, id: &str) {
    let out = build.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "cancelled");
    let b = p.run(&["--json", "builds", id]).json();
    assert_eq!(b["status"], "cancelled");
    assert_eq!(b["job_runs"][0]["status"], "cancelled");
}

#[test]
fn cancel_stops_running_jobs_and_records_it() {
    let p = chain();
    let (build, id) = sleeping_build(&p);
    let started = Instant::now();
    p.run(&["cancel", &id]).expect_code(0);
    assert_cancelled(&p, build, &id);
    assert!(started.elapsed() < Duration::from_secs(10));
    p.run(&["cancel", &id]).expect_code(2);
    // An analysis ends with its plan: nothing to cancel, and its record stays as it was.
    let analysis = p.run(&["--json", "analyze", "a/2020-01-09"]).json();
    let analysis = analysis["build_request_id"].as_str().unwrap();
    let out = p.run(&["cancel", analysis]);
    out.expect_code(2);
    assert!(out.stderr.contains("already"), "{}", out.stderr);
    let b = p.run(&["--json", "builds", analysis]).json();
    assert_eq!(b["status"], "analysis_completed", "{b}");
}

#[test]
fn interrupt_cancels_cleanly() {
    let p = chain();
    let (build, id) = sleeping_build(&p);
    nix_kill(build.id(), "INT");
    assert_cancelled(&p, build, &id);
}

#[test]
fn a_killed_build_is_closed_and_a_rerun_completes() {
    let p = chain();
    let build = p
        .command()
        .args(["build", "c/2020-01-02"])
        .env("SLEEP", "2")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_for_running_build(&p);
    nix_kill(build.id(), "KILL");
    let mut build = build;
    build.wait().unwrap();
    let out = p.run(&["--json", "build", "c/2020-01-02"]);
    out.expect_code(0);
    let old = p.run(&["--json", "builds", &id]).json();
    assert_eq!(old["status"], "failed");
    assert!(
        old["message"].as_str().unwrap().contains("is gone"),
        "{old}"
    );
    // The killed build's job died with it: nothing it started finished after the kill.
    std::thread::sleep(Duration::from_millis(2500));
    let runs = built(&p);
    let unique: std::collections::HashSet<_> = runs.iter().collect();
    assert_eq!(
        runs.len(),
        unique.len(),
        "a partition was built twice: {runs:?}"
    );
}

/// A job of a killed build that left its process group and dropped the watch token outlives the
/// build's watchdog; the build that closes the killed one ends it before releasing its partition,
/// so the rerun never writes the partition while it does.
#[test]
fn a_rerun_waits_for_what_a_killed_build_left_running() {
    let job = r#"set -u
mkdir -p locks data/w
if [ ! -e started ]; then
  touch started
  env -u DATABUILD_WATCH setsid sh -c 'exec 9>locks/w; flock 9; touch locked; sleep 30' &
  while [ ! -e locked ]; do sleep 0.01; done
  sleep 30
fi
exec 9>locks/w
flock -n 9 || { echo "$DATABUILD_JOB_RUN_ID" >> violations.log; exit 1; }
touch data/w/$DATABUILD_FIELD_N"#;
    let p = Project::new(&format!(
        "[graph]\nname = \"p\"\n[[job]]\nname = \"w\"\noutputs = [\"w/{{n:int}}\"]\ncommand = [\"sh\", \"-c\", {job:?}]\n"
    ));
    let mut build = p
        .command()
        .args(["build", "w/1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    crate::util::eventually(Duration::from_secs(10), "the job's lock taken", || {
        p.path().join("locked").exists().then_some(())
    });
    nix_kill(build.id(), "KILL");
    build.wait().unwrap();
    let rerun = p.run(&["build", "w/1"]);
    let violations = std::fs::read_to_string(p.path().join("violations.log")).unwrap_or_default();
    assert!(violations.is_empty(), "written twice at once: {violations}");
    rerun.expect_code(0);
    p.run(&["check-log"]).expect_code(0);
}

/// Quick jobs `q/N` (0.2 s each) and a slow one, `q/99` (30 s).
const QUICK_AND_SLOW: &str = r#"
[graph]
name = "quick"
[[job]]
name = "q"
outputs = ["q/{n:int}"]
command = ["sh", "-c", "if [ $DATABUILD_FIELD_N = 99 ]; then sleep 30; else sleep 0.2; fi; mkdir -p data/q; touch data/q/$DATABUILD_FIELD_N"]
"#;

/// The build's runs in `status`, by the log.
fn runs_of(p: &Project, id: &str, status: &str) -> usize {
    let out = p.run(&[
        "--json",
        "sql",
        &format!(
            "SELECT count(*) FROM job_runs WHERE build_request_id = '{id}' AND status = '{status}'"
        ),
    ]);
    out.json()["rows"][0][0].as_u64().unwrap_or(0) as usize
}

/// Ctrl-C in a forced rebuild of live partitions: the summary the build prints (and its
/// `--json`) counts what `builds ID` counts, and a partition the build never got to rebuild is
/// still live, so it is not counted failed (not live); what was missing and not built is.
#[test]
fn an_interrupted_summary_counts_what_builds_counts_and_no_live_ref_failed() {
    let p = Project::new(QUICK_AND_SLOW);
    p.run(&["build", "q/{1..30}"]).expect_code(0);
    let requested = ["q/{1..50}", "q/99"];
    for json in [true, false] {
        let mut args = vec!["build", "--force", "--parallel", "2"];
        if json {
            args.insert(0, "--json");
        }
        args.extend(requested);
        let build = p
            .command()
            .args(&args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let id = wait_for_running_build(&p);
        crate::util::eventually(Duration::from_secs(20), "quick runs done", || {
            (runs_of(&p, &id, "completed") >= 4).then_some(())
        });
        nix_kill(build.id(), "INT");
        let out = build.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(1));
        let stdout = String::from_utf8(out.stdout).unwrap();
        let listed = p.run(&["--json", "builds", &id]).json();
        assert_eq!(listed["status"], "cancelled", "{listed}");
        let counts = &listed["summary"]["counts"];
        // What is live now, as `status` says, and what of the request is not.
        let status = p.run(&["--json", "status", "q/{1..50}", "q/99"]).json();
        let not_live: Vec<&str> = status
            .as_array()
            .unwrap()
            .iter()
            .filter(|s| s["status"] != "live")
            .map(|s| s["ref"].as_str().unwrap())
            .collect();
        // The slow run was cancelled (q/99 was missing); forced rebuilds never started left
        // their live partitions live: some of those the build did not start are live.
        assert!(not_live.contains(&"q/99"), "{status}");
        let never_started = listed["summary"]["not_started"].as_array().unwrap();
        assert!(
            never_started
                .iter()
                .any(|r| !not_live.contains(&r.as_str().unwrap())),
            "{}",
            listed["summary"]
        );
        let summary = &listed["summary"];
        assert_eq!(counts["failed"], not_live.len(), "{summary}");
        let mut failed: Vec<&str> = listed["summary"]["failed"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        failed.sort_unstable();
        let mut expected = not_live.clone();
        expected.sort_unstable();
        assert_eq!(failed, expected, "{summary}");
        if json {
            let printed: serde_json::Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(&printed["counts"], counts, "{printed}\n{summary}");
            assert_eq!(printed["failed"], listed["summary"]["failed"]);
        } else {
            let c = |k: &str| counts[k].as_u64().unwrap();
            // Of the built, those unchanged; of the skipped, those kept (each said if any).
            let of = |n: u64, what: &str| match n {
                0 => String::new(),
                n => format!(" ({n} {what})"),
            };
            let line = format!(
                "cancelled: {} built{}, {} skipped{}, {} delegated, {} failed (no run failed), {} cancelled, {} not started",
                c("built"),
                of(c("unchanged"), "unchanged"),
                c("skipped"),
                of(c("kept"), "kept: inputs unchanged"),
                c("delegated"),
                c("failed"),
                c("cancelled"),
                c("not_started")
            );
            assert!(stdout.contains(&line), "{stdout}\nexpected: {line}");
        }
    }
}

/// Jobs `s/N` that sleep `$SLEEP` seconds.
const SLEEPY: &str = r#"
[graph]
name = "sleepy"
[[job]]
name = "s"
outputs = ["s/{n:int}"]
command = ["sh", "-c", "sleep ${SLEEP:-0}; mkdir -p data/s; touch data/s/$DATABUILD_FIELD_N"]
"#;

/// `s/1` and `s/2` live; a forced build of `s/{1..4}` with jobs of 60 s is started and, once
/// its runs are running, killed with SIGKILL. Answers the build's id and its process's id.
fn a_build_killed_while_running(p: &Project) -> (String, u32) {
    let mut build = p
        .command()
        .args(["build", "--force", "s/{1..4}"])
        .env("SLEEP", "60")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let id = wait_for_running_build(p);
    let pid = build.id();
    nix_kill(pid, "KILL");
    build.wait().unwrap();
    (id, pid)
}

/// The killed build is closed as failed, naming the process that is gone, and its partitions
/// are as they were before it: `s/1`, `s/2` live, `s/3`, `s/4` missing, none `building`. Read
/// with `sql`, which closes nothing itself.
fn assert_closed(p: &Project, id: &str, pid: u32) {
    let row = p
        .run(&[
            "--json",
            "sql",
            &format!("SELECT status, message FROM build_requests WHERE build_request_id = '{id}'"),
        ])
        .json();
    assert_eq!(row["rows"][0][0], "failed", "{row}");
    let message = row["rows"][0][1].as_str().unwrap();
    assert!(
        message.contains("is gone") && message.contains(&format!("/{pid}/")),
        "{message}"
    );
    let status = p.run(&["--json", "status", "s/{1..4}"]).json();
    let states: Vec<&str> = status
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(states, ["live", "live", "missing", "missing"], "{status}");
}

/// kill -9 of a CLI build: the next command that reads the log (`builds`, `status`,
/// `partitions`, `explain`, `datasets`), whichever comes first, finds its driver gone, closes it
/// as failed with the reason and gives its partitions back, and answers so.
#[test]
fn a_killed_build_is_closed_by_the_next_command_that_reads() {
    let p = Project::new(SLEEPY);
    p.run(&["build", "s/1", "s/2"]).expect_code(0);
    let reads: [&[&str]; 5] = [
        &["--json", "builds"],
        &["--json", "status", "s/{1..4}"],
        &["--json", "partitions"],
        &["--json", "explain", "s/3"],
        &["--json", "datasets"],
    ];
    for read in reads {
        let (id, pid) = a_build_killed_while_running(&p);
        let started = Instant::now();
        let out = p.run(read);
        out.expect_code(0);
        assert!(started.elapsed() < Duration::from_secs(5));
        // The answer itself shows it closed: nothing of it executing or building (but in
        // explain's history of events).
        let answer = match read[1] {
            "explain" => out.json()["status"].to_string(),
            _ => out.stdout.clone(),
        };
        assert!(
            !answer.contains("\"executing\"") && !answer.contains("\"building\""),
            "{read:?}: {}",
            out.stdout
        );
        assert_closed(&p, &id, pid);
        let b = p.run(&["--json", "builds", &id]).json();
        assert_eq!(b["status"], "failed", "{b}");
        assert!(b["progress"]["running"] == 0, "{b}");
    }
    p.run(&["check-log"]).expect_code(0);
}

/// kill -9 of a CLI build on a log a service serves: the service's sweep closes it within
/// seconds, though nobody asks anything.
#[test]
fn a_service_closes_a_killed_build_without_being_asked() {
    let p = Project::new(SLEEPY);
    p.run(&["build", "s/1", "s/2"]).expect_code(0);
    let s = Service::start(&p, &[]);
    let (id, pid) = a_build_killed_while_running(&p);
    crate::util::eventually(Duration::from_secs(10), "the killed build closed", || {
        let v = p.run(&[
            "--json",
            "sql",
            &format!("SELECT status FROM build_requests WHERE build_request_id = '{id}'"),
        ]);
        (v.json()["rows"][0][0] == "failed").then_some(())
    });
    assert_closed(&p, &id, pid);
    let (code, b) = s.get(&format!("/api/v1/builds/{id}"));
    assert_eq!((code, &b["status"]), (200, &serde_json::json!("failed")));
}

fn wait_for_running_build(p: &Project) -> String {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let v = p.run(&[
            "--json",
            "sql",
            "SELECT build_request_id FROM job_runs WHERE status = 'running'",
        ]);
        if v.code == 0 {
            if let Some(id) = v.json()["rows"][0][0].as_str() {
                return id.to_string();
            }
        }
        assert!(Instant::now() < deadline, "no run started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn nix_kill(pid: u32, signal: &str) {
    let ok = std::process::Command::new("kill")
        .arg(format!("-{signal}"))
        .arg(pid.to_string())
        .status()
        .unwrap()
        .success();
    assert!(ok);
}

/// Jobs that write into `DATABUILD_OUTPUT_DIR` have their outputs moved into place once the log
/// has recorded their runs: the next job reads them in place, a folder output replaces the old
/// folder whole, and what a failed run staged never appears.
#[test]
fn staged_outputs_move_into_place_only_once_recorded() {
    let p = Project::new(
        r#"
[graph]
name = "staged"
[[job]]
name = "a"
outputs = ["a/{n:int}"]
command = ["sh", "a.sh"]
[[job]]
name = "b"
outputs = ["b/{n:int}"]
inputs = ["a/{n}"]
command = ["sh", "b.sh"]
"#,
    );
    // `a` writes a folder; fails for n=2 after staging its output.
    p.file(
        "a.sh",
        r#"set -e
out="$DATABUILD_OUTPUT_DIR/a/$DATABUILD_FIELD_N"
mkdir -p "$out"
echo "$DATABUILD_JOB_RUN_ID" > "$out/part-0"
[ ! -e "$DATABUILD_DATA_DIR/a/$DATABUILD_FIELD_N" ] || echo old > "$out/gen"
[ "$DATABUILD_FIELD_N" != 2 ]
"#,
    );
    p.file(
        "b.sh",
        r#"set -e
mkdir -p "$DATABUILD_OUTPUT_DIR/b"
cat "$DATABUILD_DATA_DIR/a/$DATABUILD_FIELD_N/part-0" > "$DATABUILD_OUTPUT_DIR/b/$DATABUILD_FIELD_N"
"#,
    );
    p.run(&["build", "b/1"]).expect_code(0);
    let data = p.path().join("data");
    let first = std::fs::read_to_string(data.join("a/1/part-0")).unwrap();
    assert_eq!(std::fs::read_to_string(data.join("b/1")).unwrap(), first);
    let status = p.run(&["--json", "status", "a/1", "b/1"]).json();
    assert!(
        status
            .as_array()
            .unwrap()
            .iter()
            .all(|s| s["status"] == "live"),
        "{status}"
    );
    // Rebuilt: the new folder replaces the old one, nothing of the old is left in it.
    p.run(&["build", "--force", "a/1"]).expect_code(0);
    let second = std::fs::read_to_string(data.join("a/1/part-0")).unwrap();
    assert_ne!(first, second);
    assert!(data.join("a/1/gen").exists());
    // A failed run's staged output is dropped.
    p.run(&["build", "a/2"]).expect_code(1);
    assert!(!data.join("a/2").exists());
    let staging = data.join(".databuild-staging");
    let left: Vec<_> = std::fs::read_dir(&staging)
        .map(|d| d.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "staging folders left behind: {left:?}");
}

/// `--max-runs` refuses a plan larger than asked before anything runs, with the count and the
/// way out; the same over a service; a plan within it builds.
#[test]
fn max_runs_refuses_a_larger_plan_before_anything_runs() {
    let p = chain();
    let out = p.run(&["build", "c/2020-01-02", "--max-runs", "3"]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("the plan has 5 job runs, more than --max-runs 3 allows"),
        "{}",
        out.stderr
    );
    assert!(built(&p).is_empty(), "nothing ran");
    // Its summary fails nothing, and is what `builds ID` reads back from the log.
    let refused = p.run(&["--json", "build", "c/2020-01-02", "--max-runs", "3"]);
    refused.expect_code(2);
    let summary = refused.json();
    assert_eq!(summary["status"], "refused", "{summary}");
    assert_eq!(summary["counts"]["failed"], 0, "{summary}");
    let id = summary["build_request_id"].as_str().unwrap();
    let listed = p.run(&["--json", "builds", id]).json();
    assert_eq!(listed["summary"]["counts"], summary["counts"], "{listed}");
    let s = crate::util::Service::start(&p, &[]);
    let remote = p.run(&[
        "--server",
        &s.url,
        "build",
        "c/2020-01-02",
        "--max-runs",
        "3",
    ]);
    remote.expect_code(2);
    assert!(
        remote.stderr.contains("more than --max-runs 3"),
        "{}",
        remote.stderr
    );
    assert!(built(&p).is_empty(), "nothing ran");
    p.run(&["build", "c/2020-01-02", "--max-runs", "5"])
        .expect_code(0);
    assert_eq!(built(&p).len(), 5);
    // Each refusal is a build that ended `refused`, never a failed one.
    assert_eq!(
        build_statuses(&p),
        ["completed", "refused", "refused", "refused"],
        "newest first"
    );
    let (status, body) = s.call("GET", "/api/v1/builds?status=refused", None, None);
    assert_eq!(status, 200, "{body}");
    let refused: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(refused["builds"].as_array().unwrap().len(), 3, "{refused}");
}

/// The statuses of every build in the log (analyses too), newest first.
fn build_statuses(p: &Project) -> Vec<String> {
    let out = p.run(&["--json", "builds", "--all"]);
    out.expect_code(0);
    out.json()["builds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["status"].as_str().unwrap().to_string())
        .collect()
}

/// A ref nothing produces, or whose typed field does not parse, is refused before a build (or
/// an analysis) of it is recorded: the log has no build of it, failed or otherwise, and the
/// exit code and message are as ever; here and over a service.
#[test]
fn a_build_of_an_unknown_or_invalid_ref_records_no_build() {
    let p = chain();
    for r in ["nothing/2020-01-01", "a/2020-13-01"] {
        let out = p.run(&["build", r]);
        out.expect_code(2);
        assert!(out.stderr.contains("cannot plan"), "{}", out.stderr);
        let analyzed = p.run(&["analyze", r]);
        analyzed.expect_code(2);
    }
    assert!(p
        .run(&["build", "nothing/2020-01-01"])
        .stderr
        .contains("no job builds `nothing/2020-01-01` and no dataset declares it"),);
    assert!(p
        .run(&["build", "a/2020-13-01"])
        .stderr
        .contains("2020-13-01"));
    let s = Service::start(&p, &[]);
    let remote = p.run(&["--server", &s.url, "build", "nothing/2020-01-01"]);
    remote.expect_code(2);
    assert!(
        remote.stderr.contains("no job builds `nothing/2020-01-01`"),
        "{}",
        remote.stderr
    );
    assert!(build_statuses(&p).is_empty(), "{:?}", build_statuses(&p));
    assert!(built(&p).is_empty(), "nothing ran");
}

/// A build's progress is read from the log: per job done / running / left of what it planned,
/// the rate, and an ETA from the jobs' median durations at the build's parallelism and the
/// chain of jobs left; live over HTTP while it runs, and in `builds ID` (text and --json) after.
#[test]
fn a_builds_progress_counts_its_plan_and_its_eta_follows_the_jobs_history() {
    let p = Project::new(
        r#"
[graph]
name = "progress"
[[job]]
name = "a"
outputs = ["a/{n:int}"]
command = ["sh", "-c", "sleep 0.3; mkdir -p data/a; touch data/a/$DATABUILD_FIELD_N"]
[[job]]
name = "b"
outputs = ["b/{n:int}"]
inputs = ["a/{n}"]
command = ["sh", "-c", "sleep 0.3; mkdir -p data/b; touch data/b/$DATABUILD_FIELD_N"]
"#,
    );
    // History first: the ETA rests on it.
    p.run(&["build", "b/{1..2}", "--parallel", "2"])
        .expect_code(0);
    let s = Service::start(&p, &[]);
    let (status, v) = s.post(
        "/api/v1/builds",
        &serde_json::json!({ "partitions": ["b/{3..8}"], "parallel": 1 }),
    );
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap().to_string();
    let live = crate::util::eventually(Duration::from_secs(20), "a run under way", || {
        let (status, p) = s.get(&format!("/api/v1/builds/{id}/progress"));
        (status == 200 && p["done"].as_u64() >= Some(1)).then_some(p)
    });
    assert_eq!(live["planned"], 12, "{live}");
    assert_eq!(live["parallel"], 1, "{live}");
    assert_eq!(live["runs_without_history"], 0, "{live}");
    let jobs = live["jobs"].as_array().unwrap();
    assert_eq!(jobs.len(), 2, "{live}");
    assert_eq!(jobs[0]["job"], "a");
    assert_eq!(jobs[0]["planned"], 6);
    let left = live["left"].as_f64().unwrap();
    let eta = live["eta_s"].as_f64().unwrap();
    // One slot: every run left, one after the other, at ~0.3 s each.
    assert!(
        eta >= 0.2 * left && eta <= 0.6 * left,
        "{eta} s for {left} runs left: {live}"
    );
    let done = s.wait_for_build(&id);
    assert_eq!(done["status"], "completed", "{done}");
    let after = p.run(&["--json", "builds", &id]).json()["progress"].clone();
    assert_eq!(after["done"], 12, "{after}");
    assert_eq!(after["left"], 0, "{after}");
    assert_eq!(after["unclaimed"], 0, "{after}");
    assert_eq!(after["eta_s"], serde_json::Value::Null, "{after}");
    assert!(after["rate_per_s"].as_f64().unwrap() > 0.0, "{after}");
    let text = p.run(&["builds", &id]);
    assert!(
        text.stdout.contains("progress: 12 of 12 runs done"),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains("JOB"), "{}", text.stdout);
    let (status, _) = s.get("/api/v1/builds/no-such-build/progress");
    assert_eq!(status, 404);
}

/// A build that takes over the partitions of a build whose process died adds their runs to its
/// plan: its record of the plan, and its progress, count them.
#[test]
fn runs_a_build_adds_to_its_plan_are_recorded_and_counted() {
    let p = chain();
    let mut first = p
        .command()
        .args(["build", "--parallel", "2", "a/{2020-01-02..2020-01-03}"])
        .env("SLEEP", "30")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let first_id = wait_for_running_build(&p);
    // The second build waits on the first for the `a`s, then takes them over.
    let second = p
        .command()
        .args(["--json", "build", "b/c=x/{2020-01-02..2020-01-03}"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    crate::util::eventually(
        Duration::from_secs(10),
        "the second build to delegate",
        || {
            let v = p.run(&[
                "--json",
                "sql",
                "SELECT count(*) FROM events WHERE kind = 'delegation'",
            ]);
            (v.json()["rows"][0][0].as_i64() > Some(0)).then_some(())
        },
    );
    first.kill().unwrap(); // SIGKILL
    first.wait().unwrap();
    let out = second.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let id = v["build_request_id"].as_str().unwrap();
    assert_ne!(id, first_id);
    let progress = p.run(&["--json", "builds", id]).json()["progress"].clone();
    assert_eq!(progress["done"], progress["planned"], "{progress}");
    assert_eq!(progress["unclaimed"], 0, "{progress}");
    let planned = p
        .run(&[
            "--json",
            "sql",
            &format!(
                "SELECT job, status FROM planned_runs WHERE build_request_id = '{id}' ORDER BY job"
            ),
        ])
        .json();
    let rows = planned["rows"].as_array().unwrap();
    assert!(
        rows.iter().filter(|r| r[0] == "a").count() == 3
            && rows.iter().all(|r| r[1] == "completed"),
        "the taken-over runs are in its plan's record: {planned}"
    );
    p.run(&["check-log"]).expect_code(0);
}
