//! Data versions are the bytes (contract section 5, "Data versions"): a job output's version is
//! the hash of its content, so a rebuild that writes the same bytes leaves everything built from
//! it fresh ("rebuilt, unchanged"), and runs planned behind it are not run ("its inputs came out
//! unchanged"); one that writes other bytes makes its readers stale. On the flights graph:
//! external `flights/{d}`, jobs clean → agg → report.

use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use crate::equivalence::{assert_same_events, normalized};
use crate::util::{Project, Service};

const DAY: &str = "2026-01-01";

/// clean drops the header line, and appends the file `extra` if there is one (a way to make it
/// write other bytes); agg counts clean's lines; report words agg's count.
const GRAPH: &str = r#"
[graph]
name = "flights"
[[dataset]]
name = "flights"
pattern = "flights/{d:date}"
[[job]]
name = "clean"
outputs = ["clean/{d:date}"]
inputs = ["flights/{d}"]
command = ["sh", "jobs/clean.sh"]
[[job]]
name = "agg"
outputs = ["agg/{d:date}"]
inputs = ["clean/{d}"]
command = ["sh", "jobs/agg.sh"]
[[job]]
name = "report"
outputs = ["report/{d:date}"]
inputs = ["agg/{d}"]
command = ["sh", "jobs/report.sh"]
"#;

const CLEAN: &str = r#"out=$(echo "$DATABUILD_OUTPUTS" | tr -d '[]"')
d=${out#clean/}
mkdir -p "$DATABUILD_OUTPUT_DIR/clean"
tail -n +2 "$DATABUILD_DATA_DIR/flights/$d" > "$DATABUILD_OUTPUT_DIR/$out"
if [ -f extra ]; then cat extra >> "$DATABUILD_OUTPUT_DIR/$out"; fi
"#;

const AGG: &str = r#"out=$(echo "$DATABUILD_OUTPUTS" | tr -d '[]"')
d=${out#agg/}
mkdir -p "$DATABUILD_OUTPUT_DIR/agg"
wc -l < "$DATABUILD_DATA_DIR/clean/$d" > "$DATABUILD_OUTPUT_DIR/$out"
"#;

const REPORT: &str = r#"out=$(echo "$DATABUILD_OUTPUTS" | tr -d '[]"')
d=${out#report/}
mkdir -p "$DATABUILD_OUTPUT_DIR/report"
echo "flights on $d: $(cat "$DATABUILD_DATA_DIR/agg/$d")" > "$DATABUILD_OUTPUT_DIR/$out"
"#;

fn flights(graph: &str) -> Project {
    let p = Project::new(graph);
    p.file("jobs/clean.sh", CLEAN);
    p.file("jobs/agg.sh", AGG);
    p.file("jobs/report.sh", REPORT);
    let f = p.file(
        &format!("data/flights/{DAY}"),
        "from,to\nAMS,JFK\nCDG,SFO\n",
    );
    // The same modification time in every project: their logs then record the same versions.
    let file = std::fs::File::options().write(true).open(f).unwrap();
    file.set_modified(UNIX_EPOCH + Duration::from_secs(1_767_225_600))
        .unwrap();
    p
}

fn r(dataset: &str) -> String {
    format!("{dataset}/{DAY}")
}

/// A `--json build`'s summary, expecting it to succeed.
fn build(p: &Project, args: &[&str]) -> Value {
    let mut all = vec!["--json", "build"];
    all.extend_from_slice(args);
    let out = p.run(&all);
    out.expect_code(0);
    out.json()
}

fn status(p: &Project, r: &str) -> Value {
    let out = p.run(&["--json", "status", r]);
    out.expect_code(0);
    out.json()[0].clone()
}

/// The runs of build `id` as `--json builds ID` lists them, by job: (status, message).
pub(crate) fn runs_of(p: &Project, id: &str) -> Vec<(String, String, String)> {
    let detail = p.run(&["--json", "builds", id]);
    detail.expect_code(0);
    let detail = detail.json();
    let mut runs: Vec<(String, String, String)> = detail["job_runs"]
        .as_array()
        .unwrap_or_else(|| panic!("{detail}"))
        .iter()
        .map(|run| {
            (
                run["job"].as_str().unwrap_or_default().to_string(),
                run["status"].as_str().unwrap_or_default().to_string(),
                run["message"].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect();
    runs.sort();
    runs
}

/// The events of build `id` that carry `data.cutoff`, in order: (kind, status, cutoff).
fn cutoffs(p: &Project, id: &str) -> Vec<(String, String, String)> {
    let out = p.run(&["--json", "events", "--build", id]);
    out.expect_code(0);
    (out.stdout.lines())
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["data"]["cutoff"].is_string())
        .map(|e| {
            let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
            (
                text(&e["kind"]),
                text(&e["status"]),
                text(&e["data"]["cutoff"]),
            )
        })
        .collect()
}

fn run(job: &str, status: &str, message: &str) -> (String, String, String) {
    (job.to_string(), status.to_string(), message.to_string())
}

/// The summary's counts, and `builds ID`'s, agree.
fn counts_agree(p: &Project, summary: &Value) {
    let id = summary["build_request_id"].as_str().unwrap();
    let detail = p.run(&["--json", "builds", id]);
    detail.expect_code(0);
    let again = detail.json()["summary"].clone();
    assert_eq!(again["counts"], summary["counts"], "{again}\n{summary}");
}

#[test]
fn a_forced_rebuild_with_the_same_bytes_leaves_downstream_fresh() {
    let p = flights(GRAPH);
    build(&p, &[&r("report")]);
    let forced = build(&p, &["--force", &r("clean")]);
    assert_eq!(forced["counts"]["built"], 1, "{forced}");
    assert_eq!(forced["counts"]["unchanged"], 1, "{forced}");
    counts_agree(&p, &forced);
    let clean = status(&p, &r("clean"));
    assert_eq!(clean["status"], "live", "{clean}");
    let reason = clean["reasons"][0].as_str().unwrap();
    assert!(
        reason.starts_with("rebuilt by run ") && reason.ends_with(", unchanged: downstream kept"),
        "{clean}"
    );
    let explained = p.run(&["--json", "explain", &r("clean")]);
    explained.expect_code(0);
    assert_eq!(explained.json()["reasons"], clean["reasons"]);
    for d in ["agg", "report"] {
        assert_eq!(status(&p, &r(d))["status"], "live", "{d}");
    }
    // Nothing to do after it, and `diff` says the bytes are the same.
    assert_eq!(build(&p, &[&r("report")])["counts"]["built"], 0);
    let diff = p.run(&["--json", "diff", &r("clean")]);
    diff.expect_code(0);
    let diff = diff.json();
    assert_eq!(diff["data_changed"], false, "{diff}");
    assert_eq!(diff["from"]["data_version"], diff["to"]["data_version"]);
    let text = p.run(&["diff", &r("clean")]);
    assert!(text.stdout.contains("data unchanged"), "{}", text.stdout);
}

#[test]
fn a_forced_rebuild_with_other_bytes_makes_downstream_stale() {
    let p = flights(GRAPH);
    build(&p, &[&r("report")]);
    // Another line: clean's bytes change, and agg's count with them.
    p.file("extra", "LHR,BOS\n");
    let forced = build(&p, &["--force", &r("clean")]);
    assert_eq!(forced["counts"]["unchanged"], 0, "{forced}");
    for d in ["agg", "report"] {
        assert_eq!(status(&p, &r(d))["status"], "stale", "{d}");
    }
    let diff = p.run(&["--json", "diff", &r("clean")]).json();
    assert_eq!(diff["data_changed"], true, "{diff}");
    let text = p.run(&["diff", &r("clean")]);
    assert!(text.stdout.contains("data changed"), "{}", text.stdout);

    let rebuilt = build(&p, &[&r("report")]);
    assert_eq!(rebuilt["counts"]["built"], 2, "{rebuilt}");
    assert_eq!(rebuilt["counts"]["kept"], 0, "{rebuilt}");
    assert_eq!(
        std::fs::read_to_string(p.path().join("data").join(r("report"))).unwrap(),
        format!("flights on {DAY}: 3\n")
    );

    // Other bytes again, but as many lines: agg is rebuilt with the bytes it had, and report,
    // planned behind it, is not run.
    p.file("extra", "LGW,ORD\n");
    build(&p, &["--force", &r("clean")]);
    let cut = build(&p, &[&r("report")]);
    let id = cut["build_request_id"].as_str().unwrap();
    assert_eq!(cut["counts"]["built"], 1, "{cut}");
    assert_eq!(cut["counts"]["unchanged"], 1, "{cut}");
    assert_eq!(cut["counts"]["kept"], 1, "{cut}");
    assert_eq!(cut["skipped"], serde_json::json!([r("report")]), "{cut}");
    counts_agree(&p, &cut);
    assert_eq!(
        runs_of(&p, id),
        [
            run("agg", "completed", "rebuilt, unchanged"),
            run("report", "skipped", "its inputs came out unchanged"),
        ]
    );
    // The events say it typed too: what programs read instead of the message.
    assert_eq!(
        cutoffs(&p, id),
        [
            ("job_run", "completed", "rebuilt_unchanged"),
            ("partition", "available", "rebuilt_unchanged"),
            ("job_run", "skipped", "inputs_unchanged"),
        ]
        .map(|(k, s, c)| (k.to_string(), s.to_string(), c.to_string()))
    );
    let text = p.run(&["build", &r("report")]);
    text.expect_code(0);
    for d in ["clean", "agg", "report"] {
        assert_eq!(status(&p, &r(d))["status"], "live", "{d}");
    }
}

#[test]
fn a_new_job_version_that_writes_the_same_bytes_keeps_what_reads_it() {
    let p = flights(GRAPH);
    build(&p, &[&r("report")]);
    let v2 = GRAPH.replace("name = \"agg\"\n", "name = \"agg\"\nversion = \"2\"\n");
    std::fs::write(p.path().join("databuild.toml"), v2).unwrap();
    assert_eq!(status(&p, &r("report"))["status"], "stale");
    let cut = p.run(&["build", &r("report")]);
    cut.expect_code(0);
    // agg runs again and writes what it wrote; report, planned behind it, is kept.
    assert!(
        cut.stdout
            .contains("1 built (1 unchanged), 1 skipped (1 kept: inputs unchanged)"),
        "{}",
        cut.stdout
    );
    // The progress says so as it happens.
    assert!(
        cut.stderr.contains(&format!(
            "kept    report  {}  (its inputs came out unchanged)",
            r("report")
        )),
        "{}",
        cut.stderr
    );
    assert_eq!(status(&p, &r("report"))["status"], "live");
}

#[test]
fn a_taint_of_an_unchanged_external_reruns_its_reader_only() {
    let p = flights(GRAPH);
    build(&p, &[&r("report")]);
    p.run(&["taint", &r("flights"), "--reason", "re-delivered"])
        .expect_code(0);
    let after = build(&p, &[&r("report")]);
    let id = after["build_request_id"].as_str().unwrap();
    assert_eq!(after["counts"]["built"], 1, "{after}");
    assert_eq!(after["counts"]["kept"], 2, "{after}");
    counts_agree(&p, &after);
    assert_eq!(
        runs_of(&p, id),
        [
            run("agg", "skipped", "its inputs came out unchanged"),
            run("clean", "completed", "rebuilt, unchanged"),
            run("report", "skipped", "its inputs came out unchanged"),
        ]
    );
    // The skipped runs rely on the runs that built what they kept.
    let events = p.run(&["--json", "events", "--build", id]);
    let relied: Vec<Value> = events
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["status"] == "skipped")
        .map(|e| e["data"]["relies_on"].clone())
        .collect();
    assert_eq!(relied.len(), 2, "{}", events.stdout);
    assert!(relied.iter().all(Value::is_string), "{relied:?}");
    for d in ["clean", "agg", "report"] {
        assert_eq!(status(&p, &r(d))["status"], "live", "{d}");
    }
}

/// A job writing a folder of two files, the second from the file `second`.
const FOLDER: &str = r#"
[graph]
name = "tree"
[[job]]
name = "tree"
outputs = ["tree/{d:date}"]
command = ["sh", "jobs/tree.sh"]
"#;

const TREE: &str = r#"out=$(echo "$DATABUILD_OUTPUTS" | tr -d '[]"')
mkdir -p "$DATABUILD_OUTPUT_DIR/$out"
echo one > "$DATABUILD_OUTPUT_DIR/$out/a"
cat second > "$DATABUILD_OUTPUT_DIR/$out/b"
"#;

fn tree_project(second: &str) -> Project {
    let p = Project::new(FOLDER);
    p.file("jobs/tree.sh", TREE);
    p.file("second", second);
    p
}

/// The data version each `available` of `r` recorded, oldest first.
fn versions(p: &Project, r: &str) -> Vec<String> {
    let out = p.run(&["--json", "events", "--partition", r]);
    out.expect_code(0);
    out.stdout
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["status"] == "available")
        .filter_map(|e| e["data"]["data_version"].as_str().map(str::to_string))
        .collect()
}

#[test]
fn a_folder_output_is_versioned_by_its_tree() {
    let tree = format!("tree/{DAY}");
    let p = tree_project("two\n");
    build(&p, &[&tree]);
    build(&p, &["--force", &tree]);
    p.file("second", "three\n");
    build(&p, &["--force", &tree]);
    let v = versions(&p, &tree);
    assert_eq!(v.len(), 3, "{v:?}");
    assert_eq!(v[0], v[1], "the same tree, the same version");
    assert_ne!(v[1], v[2], "one file changed: another version");
    assert_eq!(v[0].len(), "sha256:".len() + 32);
    // The same content in a fresh project: the same version.
    let q = tree_project("two\n");
    build(&q, &[&tree]);
    assert_eq!(versions(&q, &tree), [v[0].clone()]);
}

#[test]
fn the_service_records_the_cutoff_as_the_cli_does() {
    let build_of = |p: &Project, through: Option<&Service>| -> String {
        let refs = [r("report")];
        match through {
            None => build(p, &["--parallel", "1", &refs[0]])["build_request_id"]
                .as_str()
                .unwrap()
                .to_string(),
            Some(s) => {
                let (code, v) = s.post(
                    "/api/v1/builds",
                    &serde_json::json!({ "partitions": refs, "parallel": 1 }),
                );
                assert_eq!(code, 202, "{v}");
                let id = v["build_request_id"].as_str().unwrap().to_string();
                let done = s.wait_for_build(&id);
                assert_eq!(done["status"], "completed", "{done}");
                id
            }
        }
    };
    let (cli, served) = (flights(GRAPH), flights(GRAPH));
    let mut service = Service::start(&served, &[]);
    for (p, through) in [(&cli, None), (&served, Some(&service))] {
        build_of(p, through);
        p.run(&["taint", &r("flights"), "--reason", "re-delivered"])
            .expect_code(0);
    }
    let cli_id = build_of(&cli, None);
    let served_id = build_of(&served, Some(&service));
    // The build's page says what the cutoff did, beside each run's status.
    let (code, page) = service.call("GET", &format!("/builds/{served_id}"), None, None);
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("rebuilt, unchanged"), "{page}");
    assert!(page.contains("its inputs came out unchanged"), "{page}");
    service.stop();
    assert_same_events(&normalized(&cli, &cli_id), &normalized(&served, &served_id));
}

/// A job reading a table's alias and another job's output of it, both rebuilt by `promote
/// --build-downstream`: the other job writes the bytes it had on the new version, and the reader,
/// derived again behind it as the build reads the alias (pinned to the new version), still runs
/// on that version rather than being kept on the old one.
#[test]
fn a_promotions_downstream_build_derives_its_cutoff_on_the_promoted_version() {
    let p = Project::new(
        r#"
[graph]
name = "promoted"
[[source]]
name = "drops"
kind = "directory"
retention = "5d"
body_format = "json_array"
[[table]]
name = "drops"
source = "drops"
version = 1
columns = { n = "int" }
[[table]]
name = "drops"
source = "drops"
version = 2
columns = { n = "float" }
[[job]]
name = "count"
outputs = ["count/date={d:date}"]
inputs = ["drops/date={d}"]
command = ["sh", "-c", "o=\"$DATABUILD_OUTPUT_DIR/$(echo \"$DATABUILD_OUTPUTS\" | tr -d '[]\\\"')\"; mkdir -p \"$(dirname \"$o\")\"; echo 1 > \"$o\""]
[[job]]
name = "both"
outputs = ["both/date={d:date}"]
inputs = ["drops/date={d}", "count/date={d}"]
command = ["sh", "-c", "o=\"$DATABUILD_OUTPUT_DIR/$(echo \"$DATABUILD_OUTPUTS\" | tr -d '[]\\\"')\"; mkdir -p \"$(dirname \"$o\")\"; echo \"$DATABUILD_INPUTS\" > \"$o\""]
"#,
    );
    let at = |today: &str, args: &[&str]| {
        let out = p.command().env("DATABUILD_NOW", today).args(args).output();
        let out = out.expect("run databuild");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {err}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    p.file("incoming/drops/a.json", r#"[{"n": 1}]"#);
    at("2026-03-01", &["source", "seal"]);
    at("2026-03-02", &["source", "seal"]);
    at("2026-03-02", &["build", "both/date=2026-03-01"]);
    at("2026-03-02", &["build", "drops/v2/date=2026-03-01"]);
    let read = || std::fs::read_to_string(p.path().join("data/both/date=2026-03-01")).unwrap();
    assert!(read().contains("drops/v1/date=2026-03-01"), "{}", read());
    at(
        "2026-03-02",
        &["promote", "drops", "--version", "2", "--build-downstream"],
    );
    // count wrote what it had; both read v2, so it ran on it.
    assert!(read().contains("drops/v2/date=2026-03-01"), "{}", read());
    let shown: Value = serde_json::from_str(&at(
        "2026-03-02",
        &["--json", "status", "both/date=2026-03-01"],
    ))
    .unwrap();
    assert_eq!(shown[0]["status"], "live", "{shown}");
}
