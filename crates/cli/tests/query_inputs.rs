//! Query inputs (`dep = "query"`, #57.3): a config job's inputs read if present. They are never
//! planned nor built, are given to the run in `DATABUILD_QUERY_INPUTS` (the present ones), are
//! recorded with the data version read, and shown by `analyze`, `explain` and `lineage`; a
//! change of one does not make what read it stale.

use crate::util::{current_run, Project, Service};

/// `sum/1` needs `raw/1`, and reads `lk/a` and `lk/b` if present; `lk` builds them from `seed`,
/// but only when asked to. The run writes what it was given into its output.
const GRAPH: &str = r#"
[graph]
name = "g"
[[dataset]]
name = "raw"
pattern = "raw/{n:int}"
[[dataset]]
name = "seed"
pattern = "seed/{name}"
[[job]]
name = "lk"
outputs = ["lk/{name}"]
inputs = ["seed/{name}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/lk && date +%s%N > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
[[job]]
name = "sum"
outputs = ["sum/{n:int}"]
config = ["sh", "config.sh"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/sum && printf '%s\\n%s\\n' \"$DATABUILD_INPUTS\" \"${DATABUILD_QUERY_INPUTS-unset}\" > $DATABUILD_OUTPUT_DIR/sum/1"]
"#;

const CONFIG: &str = r#"printf '{"configs": [{"outputs": ["%s"], "inputs": [{"ref": "raw/1"}, {"ref": "lk/a", "dep": "query"}, {"ref": "lk/b", "dep": "query"}]}]}' "$1"
"#;

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file("config.sh", CONFIG);
    p.partition("raw/1");
    p.file("data/seed/a", "1");
    p
}

fn json(p: &Project, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend_from_slice(args);
    let out = p.run(&all);
    out.expect_code(0);
    out.json()
}

/// The data version the log holds for `r` now.
fn version_of(p: &Project, r: &str) -> String {
    let v = json(
        p,
        &[
            "sql",
            &format!("SELECT data_version FROM partitions WHERE partition_ref = '{r}'"),
        ],
    );
    v["rows"][0][0].as_str().expect("a version").to_string()
}

#[test]
fn analyze_plans_no_run_for_a_query_input_and_lists_it() {
    let p = project();
    let plan = json(&p, &["analyze", "sum/1"]);
    let runs = plan["job_runs"].as_array().expect("job_runs");
    assert_eq!(runs.len(), 1, "only sum runs, lk is never planned: {plan}");
    assert_eq!(runs[0]["job"], "sum");
    assert_eq!(runs[0]["inputs"], serde_json::json!(["raw/1"]), "{plan}");
    assert_eq!(
        runs[0]["query_inputs"],
        serde_json::json!(["lk/a", "lk/b"]),
        "{plan}"
    );
    assert!(
        plan["missing"].as_array().is_none_or(|m| m.is_empty()),
        "an absent query input is not missing: {plan}"
    );
    // The text names them as query inputs.
    let text = p.run(&["analyze", "sum/1"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains("(query, if present: lk/a, lk/b)"),
        "{}",
        text.stdout
    );
}

#[test]
fn a_run_reads_its_present_query_inputs_and_the_log_records_their_versions() {
    let p = project();
    p.run(&["build", "lk/a"]).expect_code(0);
    let lk_a = version_of(&p, "lk/a");
    let lk_a_run = current_run(&p, "lk/a");

    // The build runs sum alone: lk/b is absent, not built, and does not hold the run back.
    let built = json(&p, &["build", "sum/1"]);
    assert_eq!(built["status"], "completed", "{built}");
    let given = std::fs::read_to_string(p.path().join("data/sum/1")).unwrap();
    let mut lines = given.lines();
    assert_eq!(lines.next(), Some(r#"["raw/1"]"#), "{given}");
    assert_eq!(
        lines.next(),
        Some(r#"["lk/a"]"#),
        "only the present one: {given}"
    );
    assert!(!p.path().join("data/lk/b").exists(), "lk/b was built");
    let runs = json(
        &p,
        &["sql", "SELECT count(*) FROM job_runs WHERE job = 'lk'"],
    );
    assert_eq!(runs["rows"][0][0], 1, "only the build of lk/a: {runs}");

    // The scheduled event names every query input; its claim (`queued`) the version of the present one.
    let sum_run = current_run(&p, "sum/1");
    let events = json(
        &p,
        &[
            "sql",
            &format!("SELECT status, data FROM events WHERE job_run_id = '{sum_run}' AND kind = 'job_run' ORDER BY idx"),
        ],
    );
    let data = |status: &str| -> serde_json::Value {
        let row = events["rows"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r[0] == status)
            .unwrap_or_else(|| panic!("no {status} event: {events}"));
        serde_json::from_str(row[1].as_str().unwrap()).unwrap()
    };
    assert_eq!(
        data("scheduled")["query_inputs"],
        serde_json::json!(["lk/a", "lk/b"])
    );
    let running = data("queued");
    assert_eq!(
        running["input_versions"]["lk/a"],
        lk_a.as_str(),
        "{running}"
    );
    assert!(running["input_versions"].get("lk/b").is_none(), "{running}");
    assert_eq!(
        running["input_runs"]["lk/a"],
        lk_a_run.as_str(),
        "{running}"
    );

    // explain shows it, at the version read, apart from the required inputs.
    let x = json(&p, &["explain", "sum/1"]);
    assert_eq!(x["status"], "live", "{x}");
    let inputs: Vec<&str> = x["inputs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["ref"].as_str().unwrap())
        .collect();
    assert_eq!(inputs, ["raw/1"], "{x}");
    assert_eq!(
        x["query_inputs"],
        serde_json::json!([{
            "ref": "lk/a", "data_version": lk_a, "built_by": lk_a_run, "status": "live"
        }]),
        "{x}"
    );
    let text = p.run(&["explain", "sum/1"]);
    assert!(
        text.stdout
            .contains(&format!("lk/a  read at data version {lk_a}, live now")),
        "{}",
        text.stdout
    );

    // lineage: the instance read, marked as read as a query input; the required one is not.
    let up = json(&p, &["lineage", "sum/1"]);
    let children = up["root"]["children"].as_array().unwrap();
    assert_eq!(children.len(), 2, "{up}");
    let lk = children.iter().find(|c| c["ref"] == "lk/a").expect("lk/a");
    assert_eq!(lk["data_version"], lk_a.as_str(), "{up}");
    assert_eq!(lk["job_run_id"], lk_a_run.as_str(), "{up}");
    assert_eq!(lk["query"], true, "{up}");
    let raw = children
        .iter()
        .find(|c| c["ref"] == "raw/1")
        .expect("raw/1");
    assert!(raw.get("query").is_none(), "{up}");
    // Downstream from lk/a: sum/1 was built from it, as a query read.
    let down = json(&p, &["lineage", "lk/a", "--downstream"]);
    assert_eq!(down["root"]["children"][0]["ref"], "sum/1", "{down}");
    assert_eq!(down["root"]["children"][0]["query"], true, "{down}");

    // A new version of a query input does not make what read it stale (contract section 2);
    // its lineage still names the version it read.
    std::thread::sleep(std::time::Duration::from_millis(20));
    p.file("data/seed/a", "2, changed");
    p.run(&["build", "lk/a"]).expect_code(0);
    assert_ne!(version_of(&p, "lk/a"), lk_a);
    let status = json(&p, &["status", "sum/1"]);
    assert_eq!(status[0]["status"], "live", "{status}");
    let up = json(&p, &["lineage", "sum/1"]);
    let lk = up["root"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["ref"] == "lk/a")
        .cloned()
        .expect("lk/a");
    assert_eq!(lk["data_version"], lk_a.as_str(), "{up}");
    assert_eq!(lk["current"], false, "{up}");
    // Nor does a taint of it reach what read it.
    let impact = json(&p, &["taint", "lk/a", "--dry-run"]);
    assert_eq!(
        impact["would_become_stale"],
        serde_json::json!([]),
        "{impact}"
    );
}

#[test]
fn the_service_and_its_dashboard_show_the_query_inputs_read() {
    let p = project();
    // Apart: a query input is not waited for, so one the same build makes may be read or not.
    p.run(&["build", "lk/a"]).expect_code(0);
    p.run(&["build", "sum/1"]).expect_code(0);
    let lk_a = version_of(&p, "lk/a");
    let s = Service::start(&p, &[]);
    let (code, x) = s.get("/api/v1/partitions/sum%2F1/explain");
    assert_eq!(code, 200, "{x}");
    assert_eq!(x["query_inputs"][0]["ref"], "lk/a", "{x}");
    assert_eq!(x["query_inputs"][0]["data_version"], lk_a.as_str(), "{x}");
    assert_eq!(x["query_inputs"].as_array().map(Vec::len), Some(1), "{x}");
    let (code, up) = s.get("/api/v1/partitions/sum%2F1/lineage");
    assert_eq!(code, 200, "{up}");
    let lk = up["root"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["ref"] == "lk/a")
        .cloned()
        .expect("lk/a");
    assert_eq!(
        (lk["query"].clone(), lk["data_version"].clone()),
        (true.into(), lk_a.as_str().into()),
        "{up}"
    );
    let (code, page) = s.get("/partitions/sum%2F1");
    assert_eq!(code, 200);
    let page = page.as_str().expect("html").to_string();
    assert!(page.contains("Query inputs read"), "{page}");
    assert!(page.contains(&lk_a), "{page}");
}

#[test]
fn a_query_input_from_an_upstream_service_is_read_and_recorded_with_its_version() {
    // Upstream builds lk/a; downstream reads lk/* from it (a network call, made off the
    // scheduler's loop) as sum/1's query inputs.
    let upstream = project();
    upstream.run(&["build", "lk/a"]).expect_code(0);
    let lk_a_run = current_run(&upstream, "lk/a");
    let up = Service::start(&upstream, &[]);
    let down = Project::new(&format!(
        r#"
[graph]
name = "down"
[[dataset]]
name = "raw"
pattern = "raw/{{n:int}}"
[[dataset]]
name = "lk"
pattern = "lk/{{name}}"
upstream = "{}"
[[job]]
name = "sum"
outputs = ["sum/{{n:int}}"]
config = ["sh", "config.sh"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/sum && printf '%s\\n%s\\n' \"$DATABUILD_INPUTS\" \"${{DATABUILD_QUERY_INPUTS-unset}}\" > $DATABUILD_OUTPUT_DIR/sum/1"]
"#,
        up.url
    ));
    down.file("config.sh", CONFIG);
    down.partition("raw/1");

    let built = json(&down, &["build", "sum/1"]);
    assert_eq!(built["status"], "completed", "{built}");
    let given = std::fs::read_to_string(down.path().join("data/sum/1")).unwrap();
    assert_eq!(given.lines().nth(1), Some(r#"["lk/a"]"#), "{given}");
    let sum_run = current_run(&down, "sum/1");
    let running = json(
        &down,
        &[
            "sql",
            &format!("SELECT data FROM events WHERE job_run_id = '{sum_run}' AND kind = 'job_run' AND status = 'queued'"),
        ],
    );
    let running: serde_json::Value =
        serde_json::from_str(running["rows"][0][0].as_str().unwrap()).unwrap();
    assert_eq!(
        running["input_versions"]["lk/a"],
        format!("upstream:{lk_a_run}").as_str(),
        "{running}"
    );
    assert!(running["input_versions"].get("lk/b").is_none(), "{running}");
}
