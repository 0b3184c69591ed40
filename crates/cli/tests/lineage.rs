//! `lineage` (#26): the instances a partition was built from, exactly, after its inputs were
//! rebuilt; everything built from an instance; the same through the service.

use crate::util::{Project, Service};

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
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/a && cat data/raw/* > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
[[job]]
name = "b"
outputs = ["b/{d:date}"]
inputs = ["a/{d}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/b && echo b > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
"#;

fn lineage(p: &Project, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "lineage"];
    all.extend_from_slice(args);
    let out = p.run(&all);
    out.expect_code(0);
    out.json()
}

use crate::util::current_run as run_of;

#[test]
fn lineage_names_the_instances_a_partition_was_built_from() {
    let p = Project::new(GRAPH);
    p.file("data/raw/2020-01-01", "one\n");
    p.run(&["build", "b/2020-01-01"]).expect_code(0);
    let (a1, b1) = (run_of(&p, "a/2020-01-01"), run_of(&p, "b/2020-01-01"));

    let up = lineage(&p, &["b/2020-01-01", "--depth", "2"]);
    assert_eq!(up["direction"], "upstream");
    let root = &up["root"];
    assert_eq!(root["ref"], "b/2020-01-01");
    assert_eq!(root["job_run_id"], b1.as_str());
    assert_eq!(root["current"], true);
    let a = &root["children"][0];
    assert_eq!(
        (a["ref"].as_str(), a["job_run_id"].as_str()),
        (Some("a/2020-01-01"), Some(a1.as_str()))
    );
    let raw = &a["children"][0];
    assert_eq!(raw["ref"], "raw/2020-01-01");
    assert!(raw["job_run_id"].is_null(), "{raw}");
    assert!(raw["data_version"].as_str().is_some(), "{raw}");
    let raw_version = raw["data_version"].clone();

    // The raw data changes: a and b are rebuilt from it.
    std::thread::sleep(std::time::Duration::from_millis(20));
    p.file("data/raw/2020-01-01", "one, changed\n");
    p.run(&["build", "b/2020-01-01"]).expect_code(0);
    let (a2, b2) = (run_of(&p, "a/2020-01-01"), run_of(&p, "b/2020-01-01"));
    assert_ne!(a1, a2);
    assert_ne!(b1, b2);
    let now = lineage(&p, &["b/2020-01-01", "--depth", "2"]);
    assert_eq!(now["root"]["children"][0]["job_run_id"], a2.as_str());
    assert_ne!(
        now["root"]["children"][0]["children"][0]["data_version"],
        raw_version
    );

    // The old instance still names the old input instance, and the raw data it read then.
    let old = lineage(&p, &["b/2020-01-01", "--depth", "2", "--instance", &b1]);
    assert_eq!(old["root"]["current"], false, "{old}");
    let old_a = &old["root"]["children"][0];
    assert_eq!(old_a["job_run_id"], a1.as_str(), "{old}");
    assert_eq!(old_a["current"], false);
    assert_eq!(old_a["children"][0]["data_version"], raw_version);
    // By its short form, as listings show it.
    let short = &b1[b1.len() - 8..];
    let by_short = lineage(&p, &["b/2020-01-01", "--depth", "2", "--instance", short]);
    assert_eq!(by_short["root"], old["root"]);

    // Downstream: what each instance of a was built into.
    let down = lineage(&p, &["a/2020-01-01", "--downstream"]);
    let built: Vec<&str> = down["root"]["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["job_run_id"].as_str().unwrap())
        .collect();
    assert_eq!(built, [b2.as_str()]);
    let old_down = lineage(&p, &["a/2020-01-01", "--downstream", "--instance", &a1]);
    assert_eq!(old_down["root"]["children"][0]["job_run_id"], b1.as_str());
    assert_eq!(old_down["root"]["children"][0]["current"], false);
    // From the external: both instances of a were built from one raw instance each.
    let from_raw = lineage(&p, &["raw/2020-01-01", "--downstream", "--depth", "2"]);
    assert_eq!(
        from_raw["root"]["children"][0]["job_run_id"],
        a2.as_str(),
        "{from_raw}"
    );
    assert_eq!(
        from_raw["root"]["children"][0]["children"][0]["job_run_id"],
        b2.as_str()
    );

    // The history of its instances: two built, the first superseded by the second.
    let history: Vec<(&str, &str)> = now["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["what"].as_str().unwrap(),
                e["job_run_id"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(history, [("built", b1.as_str()), ("built", b2.as_str())]);

    // Pictures and text.
    let text = p.run(&["lineage", "b/2020-01-01", "--depth", "2"]);
    text.expect_code(0);
    assert!(text.stdout.contains("└── a/2020-01-01"), "{}", text.stdout);
    assert!(text.stdout.contains("current"), "{}", text.stdout);
    let dot = p.run(&["lineage", "b/2020-01-01", "--format", "dot"]);
    assert!(dot.stdout.starts_with("digraph lineage"), "{}", dot.stdout);
    assert!(dot.stdout.contains("n1 -> n0"), "{}", dot.stdout);
    let mermaid = p.run(&["lineage", "b/2020-01-01", "--format", "mermaid"]);
    assert!(mermaid.stdout.contains("n1 --> n0"), "{}", mermaid.stdout);

    // The same answers through the service.
    let service = Service::start(&p, &[]);
    let remote = p.run(&[
        "--server",
        &service.url,
        "--json",
        "lineage",
        "b/2020-01-01",
        "--depth",
        "2",
        "--instance",
        &b1,
    ]);
    remote.expect_code(0);
    assert_eq!(remote.json(), old);

    // Errors say what is wrong.
    let never = p.run(&["lineage", "b/2020-01-09"]);
    never.expect_code(2);
    assert!(
        never.stderr.contains("has no instance yet"),
        "{}",
        never.stderr
    );
    let wrong = p.run(&["lineage", "b/2020-01-01", "--instance", &a1]);
    wrong.expect_code(2);
    assert!(
        wrong.stderr.contains("did not build `b/2020-01-01`"),
        "{}",
        wrong.stderr
    );
}

const FAN_OUT: &str = r#"
[[job]]
name = "c"
outputs = ["c/{d:date}"]
inputs = ["a/{d}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/c && echo c > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
[[job]]
name = "d"
outputs = ["d/{d:date}"]
inputs = ["b/{d}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/d && echo d > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
"#;

fn refs_of(items: &serde_json::Value) -> Vec<String> {
    let mut refs: Vec<String> = items
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["ref"].as_str().unwrap().to_string())
        .collect();
    refs.sort();
    refs
}

/// `taint --dry-run` lists exactly the live partitions `taint` then makes stale, and the wants
/// that would rebuild them; nothing is written until the taint itself.
#[test]
fn a_taint_dry_run_lists_exactly_what_the_taint_makes_stale() {
    let p = Project::new(&format!("{GRAPH}{FAN_OUT}"));
    for d in 1..=2 {
        p.file(&format!("data/raw/2020-01-0{d}"), "x\n");
    }
    p.run(&[
        "build",
        "d/{2020-01-01..2020-01-02}",
        "c/{2020-01-01..2020-01-02}",
    ])
    .expect_code(0);
    p.run(&["want", "c/2020-01-01"]).expect_code(0);
    let events_before = p
        .run(&["--json", "sql", "SELECT count(*) FROM events"])
        .json();

    let dry = p.run(&["--json", "taint", "--dry-run", "a/2020-01-01"]);
    dry.expect_code(0);
    let dry = dry.json();
    assert_eq!(dry["tainted"], serde_json::json!(["a/2020-01-01"]));
    let stale = refs_of(&dry["would_become_stale"]);
    assert_eq!(
        stale,
        ["b/2020-01-01", "c/2020-01-01", "d/2020-01-01"],
        "{dry}"
    );
    assert_eq!(
        dry["wants"][0]["refs"],
        serde_json::json!(["c/2020-01-01"]),
        "{dry}"
    );
    let text = p.run(&["taint", "--dry-run", "a/2020-01-01"]);
    assert!(
        text.stdout.contains("would make stale d/2020-01-01"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("1 tainted, 3 would become stale"),
        "{}",
        text.stdout
    );
    // Nothing was written.
    let events_after = p
        .run(&["--json", "sql", "SELECT count(*) FROM events"])
        .json();
    assert_eq!(events_before, events_after);
    // The same through the service.
    let service = Service::start(&p, &[]);
    let remote = p.run(&[
        "--server",
        &service.url,
        "--json",
        "taint",
        "--dry-run",
        "a/2020-01-01",
    ]);
    remote.expect_code(0);
    assert_eq!(remote.json(), dry);
    // The dashboard's Taint button says the same before it taints.
    let (status, page) = service.call("GET", "/taint?ref=a%2F2020-01-01&reason=bad", None, None);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains("3</b> live partition(s) built from it would become stale"),
        "{page}"
    );
    assert!(page.contains("/partitions/d%2F2020-01-01"), "{page}");
    assert!(page.contains(r#"action="/ui/taint""#), "{page}");
    drop(service);

    // The taint makes exactly those stale.
    p.run(&["taint", "a/2020-01-01"]).expect_code(0);
    let listed = p.run(&["--json", "partitions", "--status", "stale"]).json();
    assert_eq!(refs_of(&listed["partitions"]), stale, "{listed}");

    // An external's taint reaches everything built from its data.
    let dry = p
        .run(&["--json", "taint", "--dry-run", "raw/2020-01-02"])
        .json();
    assert_eq!(
        refs_of(&dry["would_become_stale"]),
        [
            "a/2020-01-02",
            "b/2020-01-02",
            "c/2020-01-02",
            "d/2020-01-02"
        ],
        "{dry}"
    );
    p.run(&["taint", "raw/2020-01-02"]).expect_code(0);
    let listed = p.run(&["--json", "partitions", "--status", "stale"]).json();
    let now_stale: Vec<String> = refs_of(&listed["partitions"])
        .into_iter()
        .filter(|r| r.ends_with("2020-01-02"))
        .collect();
    assert_eq!(now_stale, refs_of(&dry["would_become_stale"]), "{listed}");
    // Tainted again: nothing was built from the tainted data, nothing more goes stale.
    let again = p
        .run(&["--json", "taint", "--dry-run", "raw/2020-01-02"])
        .json();
    assert_eq!(
        again["would_become_stale"],
        serde_json::json!([]),
        "{again}"
    );
    // The other day's a is tainted already: counted, not listed, and not followed further.
    let a1 = p
        .run(&["--json", "taint", "--dry-run", "raw/2020-01-01"])
        .json();
    assert_eq!(
        refs_of(&a1["would_become_stale"]),
        Vec::<String>::new(),
        "{a1}"
    );
    assert_eq!(a1["already_stale"], 1, "{a1}");
    // A partition whose data is gone is missing, not stale: counted as not live.
    p.run(&["build", "d/2020-01-02"]).expect_code(0);
    std::fs::remove_file(p.path().join("data/d/2020-01-02")).unwrap();
    let gone = p
        .run(&["--json", "taint", "--dry-run", "b/2020-01-02"])
        .json();
    assert_eq!(
        (&gone["already_stale"], &gone["not_live"]),
        (&0.into(), &1.into()),
        "{gone}"
    );
    let text = p.run(&["taint", "--dry-run", "b/2020-01-02"]);
    assert!(
        text.stdout.contains("1 built from them not live"),
        "{}",
        text.stdout
    );
}

/// `diff`: between the current instance and the one before, what changed — an input rebuilt
/// from new data, the job's version; the same through the service.
#[test]
fn diff_says_what_changed_between_two_instances() {
    let p = Project::new(GRAPH);
    p.file("data/raw/2020-01-01", "one\n");
    p.run(&["build", "b/2020-01-01"]).expect_code(0);
    let only = p.run(&["diff", "b/2020-01-01"]);
    only.expect_code(2);
    assert!(
        only.stderr.contains("has one instance only"),
        "{}",
        only.stderr
    );
    let (a1, b1) = (run_of(&p, "a/2020-01-01"), run_of(&p, "b/2020-01-01"));

    std::thread::sleep(std::time::Duration::from_millis(20));
    p.file("data/raw/2020-01-01", "one, changed\n");
    p.run(&["build", "b/2020-01-01"]).expect_code(0);
    let a2 = run_of(&p, "a/2020-01-01");
    let d = p.run(&["--json", "diff", "b/2020-01-01"]);
    d.expect_code(0);
    let d = d.json();
    assert_eq!(d["from"]["job_run_id"], b1.as_str(), "{d}");
    assert_eq!(d["inputs"][0]["ref"], "a/2020-01-01", "{d}");
    assert_eq!(d["inputs"][0]["change"], "changed");
    assert_eq!(d["inputs"][0]["from_run"], a1.as_str());
    assert_eq!(d["inputs"][0]["to_run"], a2.as_str());
    assert_eq!(d["job_version_changed"], false);
    // b's bytes are the same (it writes `b` whatever it reads): its data did not change.
    assert_eq!(d["data_version_changed"], false);
    assert_eq!(d["data_changed"], false);
    let a = p.run(&["--json", "diff", "a/2020-01-01"]).json();
    assert_eq!(a["data_changed"], true, "a's bytes changed: {a}");

    // A new job version: a's next instance differs by its version, its input the same.
    let graph = GRAPH.replace("name = \"a\"\n", "name = \"a\"\nversion = \"2\"\n");
    std::fs::write(p.path().join("databuild.toml"), graph).unwrap();
    p.run(&["build", "a/2020-01-01"]).expect_code(0);
    let text = p.run(&["diff", "a/2020-01-01"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains("job version: 0 -> 2"),
        "{}",
        text.stdout
    );
    assert!(
        text.stdout.contains("1 input(s) unchanged"),
        "{}",
        text.stdout
    );
    // Any two instances, by their runs' short ids; the same through the service.
    let local = p.run(&[
        "--json",
        "diff",
        "a/2020-01-01",
        "--since",
        &a1[a1.len() - 8..],
    ]);
    local.expect_code(0);
    assert_eq!(local.json()["from"]["job_run_id"], a1.as_str());
    let service = Service::start(&p, &[]);
    let remote = p.run(&[
        "--server",
        &service.url,
        "--json",
        "diff",
        "a/2020-01-01",
        "--since",
        &a1[a1.len() - 8..],
    ]);
    remote.expect_code(0);
    assert_eq!(remote.json(), local.json());
}

/// `wants ID`: the builds and runs that made a want's partitions, each run with the runs that
/// made what it read, and what the others wait for; the same through the service and on its
/// page.
#[test]
fn a_want_shows_the_builds_and_runs_that_fulfilled_it() {
    let p = Project::new(GRAPH);
    p.file("data/raw/2020-01-01", "one\n");
    p.run(&["build", "b/2020-01-01"]).expect_code(0);
    let (a1, b1) = (run_of(&p, "a/2020-01-01"), run_of(&p, "b/2020-01-01"));
    let want = p
        .run(&["--json", "want", "b/{2020-01-01..2020-01-02}"])
        .json();
    let id = want["want_id"].as_str().unwrap().to_string();

    let detail = p.run(&["--json", "wants", &id[id.len() - 8..]]);
    detail.expect_code(0);
    let detail = detail.json();
    let run = &detail["fulfillment"][0]["runs"][0];
    assert_eq!(run["job_run_id"], b1.as_str(), "{detail}");
    assert_eq!(run["partitions"], serde_json::json!(["b/2020-01-01"]));
    assert_eq!(run["inputs"][0]["ref"], "a/2020-01-01");
    assert_eq!(run["inputs"][0]["job_run_id"], a1.as_str());
    assert_eq!(detail["fulfillment"][0]["status"], "completed");
    assert_eq!(detail["waiting"][0]["ref"], "b/2020-01-02", "{detail}");
    assert!(
        detail["waiting"][0]["waits_for"]
            .as_str()
            .unwrap()
            .contains("no run has built it yet"),
        "{detail}"
    );
    let text = p.run(&["wants", &id]);
    assert!(
        text.stdout.contains(&format!(
            "read a/2020-01-01 built by run {}",
            &a1[a1.len() - 8..]
        )),
        "{}",
        text.stdout
    );

    let service = Service::start(&p, &[]);
    let remote = p.run(&["--server", &service.url, "--json", "wants", &id]);
    remote.expect_code(0);
    assert_eq!(remote.json(), detail);
    let (status, page) = service.call("GET", &format!("/wants/{id}"), None, None);
    assert_eq!(status, 200, "{page}");
    assert!(
        page.contains(&format!("/runs/{b1}")) && page.contains(&format!("/runs/{a1}")),
        "{page}"
    );
    assert!(page.contains("no run has built it yet"), "{page}");
}

/// A forced rebuild that writes the same bytes records the same data version, so what was built from the instance it
/// replaces stays live: `analyze --force` says which, and a taint's dry run still finds them
/// (they are live on the same data), as the taint itself then does.
#[test]
fn a_forced_rebuild_keeps_downstream_live_and_says_so() {
    let p = Project::new(&format!("{GRAPH}{FAN_OUT}"));
    p.file("data/raw/2020-01-01", "x\n");
    p.run(&["build", "d/2020-01-01", "c/2020-01-01"])
        .expect_code(0);
    let preview = p
        .run(&["--json", "analyze", "--force", "a/2020-01-01"])
        .json();
    let mut kept: Vec<String> = preview["force_keeps_live"]["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().to_string())
        .collect();
    kept.sort();
    assert_eq!(
        kept,
        ["b/2020-01-01", "c/2020-01-01", "d/2020-01-01"],
        "{preview}"
    );
    let text = p.run(&["analyze", "--force", "a/2020-01-01"]);
    assert!(
        text.stdout
            .contains("3 live partitions built from the forced partitions are rebuilt only if"),
        "{}",
        text.stdout
    );

    p.run(&["build", "--force", "a/2020-01-01"]).expect_code(0);
    let status = p
        .run(&[
            "--json",
            "status",
            "b/2020-01-01",
            "c/2020-01-01",
            "d/2020-01-01",
        ])
        .json();
    for s in status.as_array().unwrap() {
        assert_eq!(s["status"], "live", "{status}");
    }
    // b was built from the instance the forced rebuild replaced: exactly, its downstream is
    // empty now; by its data, the taint reaches b.
    let down = lineage(&p, &["a/2020-01-01", "--downstream"]);
    assert_eq!(down["root"]["children"], serde_json::json!([]), "{down}");
    let dry = p
        .run(&["--json", "taint", "--dry-run", "a/2020-01-01"])
        .json();
    assert_eq!(refs_of(&dry["would_become_stale"]), kept, "{dry}");
    p.run(&["taint", "a/2020-01-01"]).expect_code(0);
    let listed = p.run(&["--json", "partitions", "--status", "stale"]).json();
    assert_eq!(refs_of(&listed["partitions"]), kept, "{listed}");
}
