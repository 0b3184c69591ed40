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
