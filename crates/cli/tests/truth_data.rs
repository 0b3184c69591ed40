//! Statuses tell the truth about data: a taint works on external partitions too (their readers go
//! stale, and the taint holds until the data changes), and a partition whose data was deleted is
//! missing, not live, wherever DataBuild decides on it.

use crate::util::{Project, Service};

/// `raw` is a file dataset, `feed` a probed one (always present); `a` copies raw, `b` copies a
/// (and fails, opaquely, if a's data is not there), `c` reads feed. `wipe` deletes a's data
/// outside its own outputs; `b2` reads a after `wipe` ran. Each job notes its runs.
const GRAPH: &str = r#"
[graph]
name = "truth_data"
[[dataset]]
name = "raw"
pattern = "raw/{date:date}"
[[dataset]]
name = "feed"
pattern = "feed/{date:date}"
exists = ["sh", "-c", "exit 0"]
[[job]]
name = "a"
outputs = ["a/{date:date}"]
inputs = ["raw/{date}"]
command = ["sh", "-c", "echo a >> runs.log; mkdir -p data/a; cat data/raw/$DATABUILD_FIELD_DATE > data/a/$DATABUILD_FIELD_DATE"]
[[job]]
name = "b"
outputs = ["b/{date:date}"]
inputs = ["a/{date}"]
command = ["sh", "-c", "echo b >> runs.log; mkdir -p data/b; cat data/a/$DATABUILD_FIELD_DATE > data/b/$DATABUILD_FIELD_DATE"]
[[job]]
name = "c"
outputs = ["c/{date:date}"]
inputs = ["feed/{date}"]
command = ["sh", "-c", "echo c >> runs.log; mkdir -p data/c; touch data/c/$DATABUILD_FIELD_DATE"]
[[job]]
name = "wipe"
outputs = ["wipe/{date:date}"]
command = ["sh", "-c", "echo wipe >> runs.log; rm -rf data/a/$DATABUILD_FIELD_DATE; mkdir -p data/wipe; touch data/wipe/$DATABUILD_FIELD_DATE"]
[[job]]
name = "b2"
outputs = ["b2/{date:date}"]
inputs = ["wipe/{date}", "a/{date}"]
command = ["sh", "-c", "echo b2 >> runs.log; mkdir -p data/b2; cat data/a/$DATABUILD_FIELD_DATE > data/b2/$DATABUILD_FIELD_DATE"]
"#;

const D: &str = "2020-01-01";

/// The jobs that ran, in order, since the last call.
fn runs(p: &Project) -> Vec<String> {
    let path = p.path().join("runs.log");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    text.lines().map(str::to_string).collect()
}

fn status(p: &Project, r: &str) -> serde_json::Value {
    let out = p.run(&["--json", "status", r]);
    out.expect_code(0);
    out.json()[0].clone()
}

/// The status `partitions` shows for `r` (None when it is not listed).
fn listed(p: &Project, status_filter: Option<&str>, r: &str) -> Option<String> {
    let mut args = vec!["--json", "partitions"];
    if let Some(s) = status_filter {
        args.extend(["--status", s]);
    }
    let out = p.run(&args);
    out.expect_code(0);
    out.json()["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|row| row["ref"] == r)
        .map(|row| row["status"].as_str().unwrap().to_string())
}

/// `datasets`' counts of the external dataset `raw`.
fn raw_counts(p: &Project) -> serde_json::Value {
    let datasets = p.run(&["--json", "datasets"]).json();
    datasets["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "raw")
        .map(|d| d["partitions"].clone())
        .unwrap()
}

#[test]
fn a_tainted_external_file_makes_its_readers_stale_until_its_data_changes() {
    let p = Project::new(GRAPH);
    let raw = format!("raw/{D}");
    let a = format!("a/{D}");
    let b = format!("b/{D}");
    p.file(&format!("data/{raw}"), "first delivery\n");
    p.run(&["build", &b]).expect_code(0);
    assert_eq!(runs(&p), ["a", "b"]);

    let out = p.run(&["taint", &raw, "--reason", "bad delivery"]);
    out.expect_code(0);
    assert!(
        out.stdout.contains(&format!("tainted {raw}")),
        "{}",
        out.stdout
    );

    // The external itself says tainted, in status, explain and partitions.
    let s = status(&p, &raw);
    assert_eq!(s["status"], "tainted", "{s}");
    assert_eq!(s["reasons"][0], "tainted: bad delivery", "{s}");
    assert!(
        s["reasons"][1]
            .as_str()
            .unwrap()
            .contains("live again once its data changes"),
        "{s}"
    );
    let out = p.run(&["--json", "explain", &raw]);
    out.expect_code(0);
    assert_eq!(out.json()["status"], "tainted");
    assert_eq!(listed(&p, None, &raw).as_deref(), Some("tainted"));
    assert_eq!(raw_counts(&p), serde_json::json!({"tainted": 1}));

    // Its reader is stale, naming the tainted input; and so, through it, is the reader's reader.
    let s = status(&p, &a);
    assert_eq!(s["status"], "stale", "{s}");
    assert_eq!(
        s["reasons"][0],
        format!("input `{raw}` is tainted: bad delivery"),
        "{s}"
    );
    let s = status(&p, &b);
    assert_eq!(s["status"], "stale", "{s}");
    assert!(s["reasons"][0].as_str().unwrap().contains(&a), "{s}");

    // A build of the downstream partition rebuilds what read the tainted data, once; its bytes
    // came out the same (the data did not change), so b, built from them, is kept: one job runs.
    p.run(&["build", &b]).expect_code(0);
    assert_eq!(runs(&p), ["a"]);
    assert_eq!(status(&p, &a)["status"], "live");
    assert_eq!(status(&p, &b)["status"], "live");
    assert_eq!(
        status(&p, &raw)["status"],
        "tainted",
        "the data did not change"
    );
    p.run(&["build", &b]).expect_code(0);
    assert!(runs(&p).is_empty(), "a second build has nothing to do");

    // Through a service, the same answers.
    let s = Service::start(&p, &[]);
    let out = p.run(&["--server", &s.url, "--json", "status", &raw, &a]);
    out.expect_code(0);
    assert_eq!(out.json()[0]["status"], "tainted");
    assert_eq!(out.json()[1]["status"], "live");
    drop(s);

    // New data: the external is live again, and what read the tainted data is stale.
    p.file(&format!("data/{raw}"), "second, corrected delivery\n");
    let s = status(&p, &raw);
    assert_eq!(s["status"], "live", "{s}");
    assert_eq!(listed(&p, None, &raw).as_deref(), Some("live"));
    assert_eq!(listed(&p, Some("tainted"), &raw), None);
    assert_eq!(
        raw_counts(&p),
        serde_json::json!({"present": 1}),
        "datasets agrees"
    );
    let s = status(&p, &a);
    assert_eq!(s["status"], "stale", "{s}");
    assert_eq!(
        s["reasons"][0],
        format!("input `{raw}` changed since it was built")
    );
    p.run(&["build", &b]).expect_code(0);
    assert_eq!(runs(&p), ["a", "b"]);
    assert_eq!(
        std::fs::read_to_string(p.path().join(format!("data/{b}"))).unwrap(),
        "second, corrected delivery\n"
    );
}

#[test]
fn a_tainted_probed_external_rebuilds_its_readers_once() {
    let p = Project::new(GRAPH);
    let feed = format!("feed/{D}");
    let c = format!("c/{D}");
    p.run(&["build", &c]).expect_code(0);
    assert_eq!(runs(&p), ["c"]);
    p.run(&["taint", &feed]).expect_code(0);
    assert_eq!(status(&p, &feed)["status"], "tainted");
    let s = status(&p, &c);
    assert_eq!(s["status"], "stale", "{s}");
    assert_eq!(s["reasons"][0], format!("input `{feed}` is tainted"));
    p.run(&["build", &c]).expect_code(0);
    assert_eq!(runs(&p), ["c"]);
    assert_eq!(status(&p, &c)["status"], "live");
    // A probe shows no change of the data: the taint stays; a new taint is a new change.
    assert_eq!(status(&p, &feed)["status"], "tainted");
    p.run(&["build", &c]).expect_code(0);
    assert!(runs(&p).is_empty());
    p.run(&["taint", &feed, "--reason", "again"]).expect_code(0);
    assert_eq!(status(&p, &c)["status"], "stale");
    p.run(&["build", &c]).expect_code(0);
    assert_eq!(runs(&p), ["c"]);
}

#[test]
fn a_partition_whose_data_was_deleted_is_missing_and_rebuilt() {
    let p = Project::new(GRAPH);
    let a = format!("a/{D}");
    let b = format!("b/{D}");
    p.file(&format!("data/raw/{D}"), "reviews\n");
    p.run(&["build", &b]).expect_code(0);
    assert_eq!(runs(&p), ["a", "b"]);
    let built_by = status(&p, &a)["built_by"].as_str().unwrap().to_string();

    std::fs::remove_file(p.path().join(format!("data/{a}"))).unwrap();
    let s = status(&p, &a);
    assert_eq!(s["status"], "missing", "{s}");
    assert_eq!(
        s["reasons"][0],
        format!("recorded live by run {built_by}, but its data `data/{a}` is gone")
    );
    let out = p.run(&["--json", "explain", &a]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(v["status"], "missing");
    assert_eq!(v["to_build"][0]["job"], "a", "{v}");
    assert_eq!(listed(&p, None, &a).as_deref(), Some("missing"));
    assert_eq!(listed(&p, Some("live"), &a), None);
    let out = p.run(&["--json", "analyze", &a]);
    out.expect_code(0);
    assert_eq!(out.json()["job_runs"][0]["job"], "a");
    // Its reader's own data is there, and a rebuild of `a` from the same input records the same
    // version: the reader is not stale on its account.
    assert_eq!(status(&p, &b)["status"], "live");

    // A build rebuilds it; its reader stays live, and is not rebuilt.
    p.run(&["build", &a]).expect_code(0);
    assert_eq!(runs(&p), ["a"]);
    assert_eq!(status(&p, &a)["status"], "live");
    assert_eq!(status(&p, &b)["status"], "live");
    p.run(&["build", &b]).expect_code(0);
    assert!(runs(&p).is_empty());

    // A reader that must run finds its deleted input rebuilt first instead of failing on it.
    std::fs::remove_file(p.path().join(format!("data/{a}"))).unwrap();
    p.run(&["taint", &b]).expect_code(0);
    let out = p.run(&["build", &b]);
    out.expect_code(0);
    assert_eq!(runs(&p), ["a", "b"]);

    // Deleted and changed upstream: its version changes, so its reader is rebuilt too.
    std::fs::remove_file(p.path().join(format!("data/{a}"))).unwrap();
    p.file(&format!("data/raw/{D}"), "new reviews\n");
    assert_eq!(status(&p, &a)["status"], "missing");
    assert_eq!(status(&p, &b)["status"], "stale");
    p.run(&["build", &b]).expect_code(0);
    assert_eq!(runs(&p), ["a", "b"]);
    assert_eq!(
        std::fs::read_to_string(p.path().join(format!("data/{b}"))).unwrap(),
        "new reviews\n"
    );
}

#[test]
fn an_input_deleted_by_another_job_during_the_build_is_rebuilt_before_its_reader_runs() {
    let p = Project::new(GRAPH);
    let a = format!("a/{D}");
    let b2 = format!("b2/{D}");
    p.file(&format!("data/raw/{D}"), "reviews\n");
    p.run(&["build", &a]).expect_code(0);
    assert_eq!(runs(&p), ["a"]);
    // Planned with `a` live; `wipe` deletes it before `b2` starts.
    let out = p.run(&["build", "--parallel", "1", &b2]);
    out.expect_code(0);
    assert_eq!(runs(&p), ["wipe", "a", "b2"], "{}", out.stderr);
    assert!(
        out.stderr.contains("building its missing inputs first"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("FAILED"), "{}", out.stderr);
    assert_eq!(status(&p, &b2)["status"], "live");
    // The run that was not started says why.
    let out = p.run(&[
        "--json",
        "sql",
        "SELECT message FROM events WHERE kind = 'job_run' AND status = 'failed'",
    ]);
    let message = out.json()["rows"][0][0].as_str().unwrap().to_string();
    assert!(
        message.starts_with(&format!("not started: the data of its input `{a}`")),
        "{message}"
    );
}

#[test]
fn a_raw_source_partition_is_not_tainted_but_refused_with_what_to_do() {
    let p = Project::new(
        r#"
[graph]
name = "sources"
[[source]]
name = "lines"
kind = "webhook"
retention = "3d"
body_format = "text"
"#,
    );
    let out = p.run(&["taint", "source/lines/date=2020-01-01"]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("it is a raw partition of source `lines`, sealed and expired by DataBuild"),
        "{}",
        out.stderr
    );
    let out = p.run(&[
        "--json",
        "sql",
        "SELECT count(*) FROM events WHERE status = 'tainted'",
    ]);
    assert_eq!(out.json()["rows"][0][0], 0);
}

/// What was built from a tainted job output is stale saying why the taint was made, as for a
/// tainted external.
#[test]
fn a_reader_of_a_tainted_job_output_is_stale_with_the_taints_reason() {
    let p = Project::new(GRAPH);
    p.file(&format!("data/raw/{D}"), "delivery\n");
    let (a, b) = (format!("a/{D}"), format!("b/{D}"));
    p.run(&["build", &b]).expect_code(0);
    p.run(&["taint", &a, "--reason", "bad batch"])
        .expect_code(0);
    let s = status(&p, &b);
    assert_eq!(s["status"], "stale", "{s}");
    assert_eq!(
        s["reasons"][0],
        format!("input `{a}` is tainted: bad batch"),
        "{s}"
    );
}
