//! Every status, summary and exit code says exactly what the log says: retries and missing
//! inputs are not failures, and summaries name what failed. In-process and through a service.

use crate::util::{Project, Service};

/// `flaky` fails its first two attempts, noting each attempt it saw; `needs` asks for `dep/N`
/// at run time; `bad` always fails, after a last log line naming itself.
const GRAPH: &str = r#"
[graph]
name = "truth"
[[job]]
name = "flaky"
outputs = ["flaky/{n:int}"]
command = ["sh", "-c", "echo \"$DATABUILD_ATTEMPT\" >> attempts.log; [ \"$DATABUILD_ATTEMPT\" -ge 3 ] || { echo 'not yet'; exit 1; }; mkdir -p data/flaky; touch data/flaky/$DATABUILD_FIELD_N"]
retries = 2
[[job]]
name = "dep"
outputs = ["dep/{n:int}"]
command = ["sh", "-c", "mkdir -p data/dep; touch data/dep/$DATABUILD_FIELD_N"]
[[job]]
name = "needs"
outputs = ["needs/{n:int}"]
command = ["sh", "-c", "if [ -e data/dep/$DATABUILD_FIELD_N ]; then mkdir -p data/needs; touch data/needs/$DATABUILD_FIELD_N; else echo \"DATABUILD_MISSING_DEPS [\\\"dep/$DATABUILD_FIELD_N\\\"]\"; exit 1; fi"]
[[job]]
name = "bad"
outputs = ["bad/{n:int}"]
command = ["sh", "-c", "echo starting; echo \"bad $DATABUILD_FIELD_N gave up\"; exit 4"]
[[job]]
name = "after"
outputs = ["after/{n:int}"]
inputs = ["bad/{n}"]
command = ["sh", "-c", "mkdir -p data/after; touch data/after/$DATABUILD_FIELD_N"]
"#;

fn attempts(p: &Project) -> String {
    std::fs::read_to_string(p.path().join("attempts.log")).unwrap_or_default()
}

/// `build ARGS` in-process, then the same in a fresh project through a service.
fn both_ways(args: &[&str], check: impl Fn(&Project, &crate::util::Run)) {
    let p = Project::new(GRAPH);
    check(&p, &p.run(args));
    let p = Project::new(GRAPH);
    let s = Service::start(&p, &[]);
    let mut remote = vec!["--server", s.url.as_str()];
    remote.extend_from_slice(args);
    check(&p, &p.run(&remote));
}

#[test]
fn a_retried_run_says_so_and_knows_its_attempt() {
    both_ways(&["build", "flaky/1"], |p, out| {
        out.expect_code(0);
        assert!(!out.stderr.contains("FAILED"), "{}", out.stderr);
        assert!(
            out.stderr.contains("(attempt 2 of 3)") && out.stderr.contains("(attempt 3 of 3)"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("retrying  flaky  flaky/1"),
            "{}",
            out.stderr
        );
        assert_eq!(attempts(p), "1\n2\n3\n");
    });
    // Each failed attempt says in the log what followed it.
    let p = Project::new(GRAPH);
    p.run(&["build", "flaky/1"]).expect_code(0);
    let out = p.run(&[
        "--json",
        "sql",
        "SELECT json_extract(data, '$.attempt'), json_extract(data, '$.then') FROM events WHERE kind = 'job_run' AND status = 'failed' ORDER BY idx",
    ]);
    assert_eq!(
        out.json()["rows"],
        serde_json::json!([[1, "retry"], [2, "retry"]])
    );
}

#[test]
fn a_run_missing_inputs_waits_for_them_and_is_not_a_failure() {
    both_ways(&["build", "needs/7"], |p, out| {
        out.expect_code(0);
        assert!(!out.stderr.contains("FAILED"), "{}", out.stderr);
        assert!(
            out.stderr.contains("building its missing inputs first"),
            "{}",
            out.stderr
        );
        assert!(p.path().join("data/needs/7").exists());
    });
}

#[test]
fn a_run_that_fails_for_good_still_says_failed() {
    both_ways(&["build", "bad/1"], |_, out| {
        out.expect_code(1);
        assert!(out.stderr.contains("FAILED  bad  bad/1"), "{}", out.stderr);
    });
}

#[test]
fn a_keep_going_summary_names_every_failure_with_its_run_and_log() {
    both_ways(
        &[
            "build",
            "--keep-going",
            "--parallel",
            "2",
            "after/{1..3}",
            "flaky/5",
        ],
        |p, out| {
            out.expect_code(1);
            assert!(
                out.stdout.contains(
                    "1 built, 0 skipped, 0 delegated, 3 failed, 0 cancelled, 3 not started"
                ),
                "{}",
                out.stdout
            );
            for n in 1..=3 {
                assert!(
                    out.stdout
                        .contains(&format!("failed: bad/{n} (job bad, run ")),
                    "{}",
                    out.stdout
                );
                assert!(
                    out.stdout.contains(&format!("| log: bad {n} gave up")),
                    "{}",
                    out.stdout
                );
            }
            assert!(
                out.stdout
                    .contains("reason: 3 job runs failed: `bad/1`, `bad/2`, `bad/3`")
                    || out.stdout.contains("reason: 3 job runs failed:"),
                "{}",
                out.stdout
            );
            assert!(!out.stdout.contains("the build stopped"), "{}", out.stdout);
            let _ = p;
        },
    );
    // The same in --json, in-process and through a service.
    let json_of = |p: &Project, args: &[&str]| {
        let out = p.run(args);
        out.expect_code(1);
        out.json()
    };
    let args = ["--json", "build", "--keep-going", "after/{1..3}", "flaky/5"];
    let local = json_of(&Project::new(GRAPH), &args);
    let p = Project::new(GRAPH);
    let s = Service::start(&p, &[]);
    let mut remote_args = vec!["--server", s.url.as_str()];
    remote_args.extend_from_slice(&args);
    let remote = json_of(&p, &remote_args);
    for v in [&local, &remote] {
        assert_eq!(v["failures"].as_array().unwrap().len(), 3, "{v}");
        let f = &v["failures"][0];
        assert_eq!(f["job"], "bad");
        assert!(f["job_run_id"].as_str().unwrap().len() >= 32, "{f}");
        assert_eq!(f["message"], "the job ended with exit status 4");
        assert!(f["log_tail"].as_str().unwrap().ends_with("gave up"), "{f}");
        let mut not_started: Vec<&str> = v["not_started"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        not_started.sort();
        assert_eq!(not_started, ["after/1", "after/2", "after/3"]);
        assert_eq!(
            v["built"],
            serde_json::json!(["flaky/5"]),
            "retried, then built"
        );
        assert_eq!(v["cancelled"], serde_json::json!([]));
    }
}

#[test]
fn a_fail_fast_stop_counts_what_never_started_apart_from_what_failed() {
    let p = Project::new(GRAPH);
    let out = p.run(&["--json", "build", "--parallel", "1", "bad/1", "dep/{1..4}"]);
    out.expect_code(1);
    let v = out.json();
    assert_eq!(v["failures"].as_array().unwrap().len(), 1, "{v}");
    let not_started = v["not_started"].as_array().unwrap().len();
    let built = v["built"].as_array().unwrap().len();
    assert_eq!(
        built + not_started,
        4,
        "each dep run was built or not started: {v}"
    );
    assert!(
        v["message"].as_str().unwrap().contains("`bad/1` failed"),
        "{v}"
    );
    // A run claimed ahead but never started has no start time, and `runs` says so.
    let rows = p.run(&[
        "--json",
        "sql",
        "SELECT job_run_id, started_at FROM job_runs WHERE status = 'cancelled' AND message LIKE 'not started%'",
    ]);
    let rows = rows.json()["rows"].as_array().unwrap().clone();
    assert!(
        !rows.is_empty(),
        "--parallel 1 claims runs ahead of its slot"
    );
    assert_eq!(
        v["cancelled"],
        serde_json::json!([]),
        "nothing ran to be cancelled: {v}"
    );
    for row in &rows {
        assert!(row[1].is_null(), "{row}");
        let shown = p.run(&["runs", row[0].as_str().unwrap()]);
        assert!(shown.stdout.contains("never started"), "{}", shown.stdout);
        assert!(!shown.stdout.contains("took"), "{}", shown.stdout);
    }
}
