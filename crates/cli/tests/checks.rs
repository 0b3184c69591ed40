//! Partition checks (#27): a blocking check decides what is live, per partition, so downstream
//! runs never build on bad data; `databuild check` re-runs checks without a rebuild; a
//! non-blocking failure warns; a changed check runs again without rebuilding the data; checks
//! run on the build's executor (Slurm too); jobs may report checks inline.

use crate::util::{current_run, Project, Service};

/// `a` copies raw data; `b` reads `a`. `nonempty` (blocking) fails on an empty `a`, with a
/// message and metrics in its report; `no_warn` (not blocking) fails when `a` says "warn".
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
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/a && cat data/raw/$DATABUILD_FIELD_D > $DATABUILD_OUTPUT_DIR/a/$DATABUILD_FIELD_D"]
[[job]]
name = "b"
outputs = ["b/{d:date}"]
inputs = ["a/{d}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/b && echo b > $DATABUILD_OUTPUT_DIR/b/$DATABUILD_FIELD_D"]
[[check]]
name = "nonempty"
applies_to = "a"
command = ["sh", "-c", "n=$(wc -c < \"$DATABUILD_PARTITION_PATH\"); echo \"{\\\"message\\\": \\\"$DATABUILD_PARTITION has $n bytes\\\", \\\"metrics\\\": {\\\"bytes\\\": $n}}\" > $DATABUILD_REPORT; test $n -gt 0"]
version = "1"
[[check]]
name = "no_warn"
applies_to = "a/{d:date}"
command = ["sh", "-c", "! grep -q warn \"$DATABUILD_PARTITION_PATH\""]
blocking = false
"#;

const A: &str = "a/2020-01-01";
const B: &str = "b/2020-01-01";

fn status(p: &Project, r: &str) -> serde_json::Value {
    let out = p.run(&["--json", "status", r]);
    out.expect_code(0);
    out.json()[0].clone()
}

fn runs(p: &Project) -> u64 {
    p.run(&[
        "--json",
        "sql",
        "SELECT count(*) FROM job_runs WHERE status = 'completed'",
    ])
    .json()["rows"][0][0]
        .as_u64()
        .unwrap()
}

fn check_events(p: &Project, r: &str, name: &str) -> u64 {
    p.run(&[
        "--json",
        "sql",
        &format!(
            "SELECT count(*) FROM events WHERE kind = 'check' AND partition_ref = '{r}' AND data LIKE '%\"check\":\"{name}\"%'"
        ),
    ])
    .json()["rows"][0][0]
        .as_u64()
        .unwrap()
}

#[test]
fn a_blocking_failure_stops_downstream_and_a_fixed_partition_is_live_again_without_a_rebuild() {
    let p = Project::new(GRAPH);
    p.file("data/raw/2020-01-01", "");
    let out = p.run(&["build", B]);
    out.expect_code(1);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("`a/2020-01-01` failed check `nonempty`: a/2020-01-01 has 0 bytes"),
        "{said}"
    );
    // `a` was built (its data is there, for a look) but is not live; `b` was never started.
    assert!(p.path().join("data/a/2020-01-01").exists());
    assert!(!p.path().join("data/b/2020-01-01").exists());
    let a = status(&p, A);
    assert_eq!(a["status"], "check_failed", "{a}");
    let why = a["reasons"][0].as_str().unwrap();
    assert!(
        why.starts_with("failed check `nonempty`: a/2020-01-01 has 0 bytes"),
        "{why}"
    );
    assert!(why.contains("databuild check a/2020-01-01"), "{why}");
    assert_eq!(a["checks"][0]["result"], "failed");
    assert_eq!(a["checks"][0]["metrics"]["bytes"], 0);
    let explain = p.run(&["--json", "explain", A]).json();
    assert_eq!(explain["status"], "check_failed");
    assert!(explain["to_build"].as_array().unwrap().is_empty());
    // The SQL view agrees.
    let view = p
        .run(&[
            "--json",
            "sql",
            &format!("SELECT status FROM partition_status WHERE partition_ref = '{A}'"),
        ])
        .json();
    assert_eq!(view["rows"][0][0], "check_failed");
    // So does a listing.
    let listed = p.run(&["--json", "partitions", "--pattern", A]).json();
    assert_eq!(
        listed["partitions"][0]["status"], "check_failed",
        "{listed}"
    );
    assert!(
        listed["partitions"][0]["reason"]
            .as_str()
            .is_some_and(|r| r.contains("failed check `nonempty`")),
        "{listed}"
    );
    // And `datasets` counts it as held back, not missing.
    let datasets = p.run(&["--json", "datasets"]).json();
    let job_a = datasets["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "a")
        .unwrap()
        .clone();
    assert_eq!(job_a["partitions"]["check_failed"], 1, "{job_a}");
    assert!(job_a["partitions"].get("missing").is_none(), "{job_a}");

    // Building again neither rebuilds `a` (the same inputs make the same data) nor runs `b`.
    let built = runs(&p);
    let a_run = current_run(&p, A);
    let again = p.run(&["build", B]);
    again.expect_code(2);
    assert!(
        again.stderr.contains("failed check `nonempty`") && again.stderr.contains("--force"),
        "{}",
        again.stderr
    );
    let analyze = p.run(&["--json", "analyze", B]);
    analyze.expect_code(2);
    assert_eq!(analyze.json()["missing"][0], A);
    assert_eq!(runs(&p), built);
    assert_eq!(current_run(&p, A), a_run);

    // The data is fixed in place; `databuild check` makes it live, with no run.
    p.file("data/a/2020-01-01", "fixed\n");
    let checked = p.run(&["--json", "check", A]);
    checked.expect_code(0);
    let answer = checked.json();
    assert_eq!(answer["partitions"][0]["status"], "live", "{answer}");
    assert_eq!(answer["partitions"][0]["checks"][0]["result"], "passed");
    assert_eq!(current_run(&p, A), a_run);
    assert_eq!(status(&p, A)["status"], "live");
    p.run(&["build", B]).expect_code(0);
    assert_eq!(runs(&p), built + 1, "only b ran");
    assert_eq!(current_run(&p, A), a_run);
    // check-log replays the check events into the same projection.
    p.run(&["check-log"]).expect_code(0);
}

#[test]
fn a_non_blocking_failure_warns_and_the_partition_stays_live() {
    let p = Project::new(GRAPH);
    p.file("data/raw/2020-01-01", "warn: odd\n");
    let out = p.run(&["build", B]);
    out.expect_code(0);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("warning: `a/2020-01-01` failed check `no_warn`"),
        "{said}"
    );
    let a = status(&p, A);
    assert_eq!(a["status"], "live");
    let reasons: Vec<&str> = a["reasons"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert!(
        reasons
            .iter()
            .any(|r| r.starts_with("warning: failed check `no_warn`")),
        "{reasons:?}"
    );
    let soft = a["checks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["name"] == "no_warn")
        .unwrap();
    assert_eq!(
        (soft["result"].as_str(), soft["blocking"].as_bool()),
        (Some("failed"), Some(false))
    );
    assert_eq!(status(&p, B)["status"], "live");
}

#[test]
fn a_check_version_bump_reruns_only_the_check() {
    let p = Project::new(GRAPH);
    p.file("data/raw/2020-01-01", "one\n");
    p.run(&["build", B]).expect_code(0);
    let (built, a_run) = (runs(&p), current_run(&p, A));
    assert_eq!(check_events(&p, A, "nonempty"), 1);
    // Nothing changed: nothing runs, not even the checks.
    p.run(&["build", B]).expect_code(0);
    assert_eq!(check_events(&p, A, "nonempty"), 1);

    p.file(
        "databuild.toml",
        &GRAPH.replace("version = \"1\"", "version = \"2\""),
    );
    let a = status(&p, A);
    assert_eq!(a["status"], "live");
    assert_eq!(
        a["checks"][0]["stale"],
        "check `nonempty` changed version from 1 to 2"
    );
    p.run(&["build", B]).expect_code(0);
    assert_eq!(runs(&p), built, "no job ran");
    assert_eq!(current_run(&p, A), a_run);
    assert_eq!(check_events(&p, A, "nonempty"), 2);
    assert_eq!(
        check_events(&p, A, "no_warn"),
        1,
        "only the changed check ran"
    );
    let a = status(&p, A);
    assert!(a["checks"][0].get("stale").is_none(), "{a}");
    assert_eq!(a["checks"][0]["version"], "2");

    // A new version that fails holds the partition back, still without a rebuild (what was
    // built from it before stays as it is: its data did not change).
    p.file(
        "databuild.toml",
        &GRAPH
            .replace("version = \"1\"", "version = \"3\"")
            .replace("test $n -gt 0", "test $n -gt 100"),
    );
    let out = p.run(&["build", A]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("failed check `nonempty`: a/2020-01-01 has 4 bytes"),
        "{}",
        out.stderr
    );
    assert_eq!(status(&p, A)["status"], "check_failed");
    assert_eq!(runs(&p), built);
}

#[test]
fn checks_a_job_reports_inline_are_recorded_the_same_way() {
    let graph = r#"
[graph]
name = "g"
[[job]]
name = "c"
outputs = ["c/{n:int}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/c && echo x > $DATABUILD_OUTPUT_DIR/c/$DATABUILD_FIELD_N && if [ $DATABUILD_FIELD_N = 1 ]; then ok=false; else ok=true; fi && echo \"{\\\"rows\\\": 1, \\\"checks\\\": [{\\\"name\\\": \\\"rows_match\\\", \\\"passed\\\": $ok, \\\"message\\\": \\\"1 row of 2\\\", \\\"metrics\\\": {\\\"rows\\\": 1}}]}\" > $DATABUILD_REPORT"]
[[job]]
name = "d"
outputs = ["d/{n:int}"]
inputs = ["c/{n}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/d && echo d > $DATABUILD_OUTPUT_DIR/d/$DATABUILD_FIELD_N"]
"#;
    let p = Project::new(graph);
    p.run(&["build", "d/2"]).expect_code(0);
    let c2 = status(&p, "c/2");
    assert_eq!(c2["status"], "live");
    assert_eq!(c2["checks"][0]["name"], "rows_match");
    assert_eq!(c2["checks"][0]["inline"], true);
    let out = p.run(&["build", "d/1"]);
    out.expect_code(1);
    let c1 = status(&p, "c/1");
    assert_eq!(c1["status"], "check_failed", "{c1}");
    assert!(c1["reasons"][0]
        .as_str()
        .unwrap()
        .starts_with("failed check `rows_match`: 1 row of 2"));
    assert_eq!(c1["checks"][0]["metrics"]["rows"], 1);
    assert!(!p.path().join("data/d/1").exists());
}

#[test]
fn check_answers_the_same_through_the_service() {
    let p = Project::new(GRAPH);
    p.file("data/raw/2020-01-01", "");
    p.run(&["build", A]).expect_code(1);
    let service = Service::start(&p, &[]);
    let strip = |mut v: serde_json::Value| {
        for part in v["partitions"].as_array_mut().unwrap() {
            for c in part["checks"].as_array_mut().unwrap() {
                c.as_object_mut().unwrap().remove("checked_at");
                c.as_object_mut().unwrap().remove("checked_at_ns");
            }
        }
        v
    };
    let local = p.run(&["--json", "check", A]);
    local.expect_code(1);
    let remote = p.run(&["--server", &service.url, "--json", "check", A]);
    remote.expect_code(1);
    assert_eq!(strip(local.json()), strip(remote.json()));
    assert_eq!(remote.json()["partitions"][0]["status"], "check_failed");
    // A ref no check applies to is refused, naming it, both ways.
    let graph_ref = "b/2020-01-01";
    for args in [
        vec!["check", graph_ref],
        vec!["--server", &service.url, "check", graph_ref],
    ] {
        let out = p.run(&args);
        out.expect_code(2);
        assert!(
            out.stderr.contains("no check applies to `b/2020-01-01`"),
            "{}",
            out.stderr
        );
    }
    // The dashboard shows it: the partition's checks, and pass rates per dataset.
    let (code, page) = service.call("GET", "/partitions/a%2F2020-01-01", None, None);
    assert_eq!(code, 200);
    assert!(
        page.contains("Checks") && page.contains("nonempty") && page.contains("check_failed"),
        "{page}"
    );
    let (_, datasets) = service.call("GET", "/datasets", None, None);
    assert!(
        datasets.contains("Checks passed") && datasets.contains("50%"),
        "{datasets}"
    );
    p.file("data/a/2020-01-01", "fixed\n");
    let (code, body) = service.post(
        "/api/v1/partitions/check",
        &serde_json::json!({"partitions": [A]}),
    );
    assert_eq!(code, 200, "{body}");
    assert_eq!(body["partitions"][0]["status"], "live");
    // Counted in the metrics, per check.
    let (_, metrics) = service.call("GET", "/metrics", None, None);
    assert!(
        metrics
            .contains("databuild_check_results{check=\"nonempty\",job=\"a\",result=\"passed\"} 1"),
        "{metrics}"
    );
}

/// On the Slurm executor, a build's checks run as Slurm jobs too (each its own `sbatch` job, on
/// the cluster like the run), and so does `databuild check`.
#[test]
#[ignore = "needs Slurm (DATABUILD_TEST_SLURM); ./test.sh runs it"]
fn checks_run_on_the_slurm_executor() {
    let conf = crate::slurm::slurm();
    let graph = r#"
[graph]
name = "g"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/a && cat data/raw/$DATABUILD_FIELD_D > $DATABUILD_OUTPUT_DIR/a/$DATABUILD_FIELD_D"]
[[job]]
name = "b"
outputs = ["b/{d:date}"]
inputs = ["a/{d}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/b && echo b > $DATABUILD_OUTPUT_DIR/b/$DATABUILD_FIELD_D"]
[[check]]
name = "nonempty"
applies_to = "a"
command = ["sh", "-c", "echo \"{\\\"message\\\": \\\"slurm job $SLURM_JOB_ID\\\", \\\"metrics\\\": {\\\"slurm_job_id\\\": \\\"$SLURM_JOB_ID\\\"}}\" > $DATABUILD_REPORT; test -s \"$DATABUILD_PARTITION_PATH\""]
"#;
    let p = Project::new(&crate::slurm::on_slurm(graph, ""));
    p.file("data/raw/2020-01-01", "");
    let out = crate::slurm::build(&p, Some(&conf), &["build", B]);
    out.expect_code(1);
    let a = status(&p, A);
    assert_eq!(a["status"], "check_failed", "{a}");
    let job_id = a["checks"][0]["metrics"]["slurm_job_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!job_id.is_empty(), "the check did not run under Slurm: {a}");
    assert!(!p.path().join("data/b/2020-01-01").exists());

    p.file("data/a/2020-01-01", "fixed\n");
    let checked = crate::slurm::build(&p, Some(&conf), &["--json", "check", A]);
    checked.expect_code(0);
    let answer = checked.json();
    assert_eq!(answer["partitions"][0]["status"], "live", "{answer}");
    let again = answer["partitions"][0]["checks"][0]["metrics"]["slurm_job_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(!again.is_empty() && again != job_id, "{answer}");
    crate::slurm::build(&p, Some(&conf), &["build", B]).expect_code(0);
}
