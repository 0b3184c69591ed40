//! A no-op build keeps its plan, and the next build of the same request reuses it only while it
//! holds: the same answers and events as planning anew, and whatever changed (an output gone, an
//! external file re-delivered, anything else in the log, the graph, the date) planned anew.

use crate::util::Project;

/// `raw` is an external file; `a` reads it, `b` reads `a`. Each job notes its runs.
const GRAPH: &str = r#"
[graph]
name = "plan_cache"
[[dataset]]
name = "raw"
pattern = "raw/{date:date}"
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
"#;

const REFS: [&str; 2] = ["b/2020-01-01", "b/2020-01-02"];

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file("data/raw/2020-01-01", "one\n");
    p.file("data/raw/2020-01-02", "two\n");
    p
}

/// The jobs that ran, in order, since the last call.
fn runs(p: &Project) -> Vec<String> {
    let path = p.path().join("runs.log");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    text.lines().map(str::to_string).collect()
}

fn build(p: &Project, env: &[(&str, &str)]) -> serde_json::Value {
    let mut args = vec!["--json", "build"];
    args.extend(REFS);
    let out = p.command().args(&args).envs(env.iter().copied()).output();
    let out = out.expect("run databuild");
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON")
}

fn sql(p: &Project, query: &str) -> serde_json::Value {
    let out = p.run(&["--json", "sql", query]);
    out.expect_code(0);
    out.json()["rows"].clone()
}

/// Where the last kept plan holds, and the log's last event.
fn kept_at(p: &Project) -> (serde_json::Value, serde_json::Value) {
    (
        sql(p, "SELECT max(log_idx) FROM plan_cache"),
        sql(p, "SELECT max(idx) FROM events"),
    )
}

/// A build request's events without ids and times: kind, status, ref, job, message, data
/// (without its owner).
fn events(p: &Project, id: &str) -> Vec<[String; 6]> {
    let out = p.run(&["--json", "events", "--build", id]);
    out.expect_code(0);
    out.stdout
        .lines()
        .map(|l| {
            let mut e: serde_json::Value = serde_json::from_str(l).unwrap();
            // The process that drove it (its pid) is the one thing that differs.
            if let Some(data) = e["data"].as_object_mut() {
                data.remove("owner");
            }
            let s = |k: &str| e[k].as_str().unwrap_or_default().to_string();
            let data = e["data"].to_string();
            [
                s("kind"),
                s("status"),
                s("partition_ref"),
                s("job"),
                s("message"),
                data,
            ]
        })
        .collect()
}

/// A summary without its build request's id.
fn without_id(mut summary: serde_json::Value) -> serde_json::Value {
    summary["build_request_id"] = serde_json::Value::Null;
    summary
}

#[test]
fn a_reused_plan_answers_and_records_what_planning_anew_does() {
    let p = project();
    build(&p, &[]);
    assert_eq!(runs(&p), ["a", "a", "b", "b"]);
    // The build that made the refs live planned them again at its end, and kept that plan.
    let (kept, last) = kept_at(&p);
    assert_eq!(kept, last, "kept at the log's end");
    let planned = build(&p, &[("DATABUILD_NO_PLAN_CACHE", "1")]);
    // Planning anew kept nothing: the log moved on, so the next build plans and keeps.
    assert_eq!(kept_at(&p).0, kept);
    build(&p, &[]);
    let (kept, last) = kept_at(&p);
    assert_eq!(kept, last);
    let reused = build(&p, &[]);
    let (kept_after, last_after) = kept_at(&p);
    assert_eq!(
        kept_after, last_after,
        "moved forward past the reusing build"
    );
    assert_ne!(kept_after, kept);
    let anew = build(&p, &[("DATABUILD_NO_PLAN_CACHE", "1")]);
    assert_eq!(runs(&p), Vec::<String>::new());
    assert_eq!(without_id(reused.clone()), without_id(anew.clone()));
    assert_eq!(without_id(planned.clone()), without_id(anew.clone()));
    let id = |s: &serde_json::Value| s["build_request_id"].as_str().unwrap().to_string();
    assert_eq!(events(&p, &id(&reused)), events(&p, &id(&anew)));
    assert!(!events(&p, &id(&reused)).is_empty());
    assert_eq!(reused["skipped"], serde_json::json!(REFS));
}

#[test]
fn a_kept_plan_is_not_reused_once_anything_changed() {
    let p = project();
    build(&p, &[]);
    runs(&p);
    let keep = |p: &Project| {
        build(p, &[]);
        let (kept, last) = kept_at(p);
        assert_eq!(kept, last);
    };

    // An output's data is gone: it is built again.
    keep(&p);
    std::fs::remove_file(p.path().join("data/b/2020-01-02")).unwrap();
    build(&p, &[]);
    assert_eq!(runs(&p), ["b"]);

    // An external file is re-delivered: its readers are stale.
    keep(&p);
    p.file("data/raw/2020-01-01", "one, again\n");
    build(&p, &[]);
    assert_eq!(runs(&p), ["a", "b"]);

    // Re-delivered at the same size: its new time alone makes a new version.
    keep(&p);
    p.file("data/raw/2020-01-02", "TWO\n");
    let raw = std::fs::File::options()
        .write(true)
        .open(p.path().join("data/raw/2020-01-02"))
        .unwrap();
    raw.set_modified(std::time::SystemTime::now() + std::time::Duration::from_secs(60))
        .unwrap();
    build(&p, &[]);
    assert_eq!(runs(&p), ["a", "b"]);

    // Anything else in the log: a taint of an input.
    keep(&p);
    p.run(&["taint", "a/2020-01-02", "--reason", "bad rows"])
        .expect_code(0);
    build(&p, &[]);
    // a is rebuilt; its bytes came out the same, so b, read from them, is kept (early cutoff).
    assert_eq!(runs(&p), ["a"]);

    // A build of another request in between (nothing to do there either, so it keeps a plan
    // of its own) is a change too: reusing after it would be safe, but the log is only read as
    // unchanged or not.
    keep(&p);
    p.run(&["build", "a/2020-01-01"]).expect_code(0);
    let ours = "SELECT log_idx FROM plan_cache ORDER BY log_idx LIMIT 1";
    let before = sql(&p, ours);
    build(&p, &[]);
    assert_eq!(kept_at(&p).0, kept_at(&p).1, "planned anew and kept again");
    assert_ne!(sql(&p, ours), before);

    // The graph's text: a new version of `b`.
    keep(&p);
    let graph = GRAPH.replace("name = \"b\"\n", "name = \"b\"\nversion = \"2\"\n");
    std::fs::write(p.path().join("databuild.toml"), graph).unwrap();
    build(&p, &[]);
    assert_eq!(runs(&p), ["b", "b"]);

    // Another date (`DATABUILD_NOW`) is another key: planned anew, kept beside the others.
    keep(&p);
    let count = || {
        sql(&p, "SELECT count(*) FROM plan_cache")[0][0]
            .as_i64()
            .unwrap()
    };
    let before = count();
    build(&p, &[("DATABUILD_NOW", "2030-01-01")]);
    assert_eq!(count(), before + 1);
}

#[test]
fn plans_that_ask_more_than_the_log_and_files_are_not_kept() {
    // A probed dataset: whether it exists is a program's answer, which may change at any time.
    let p = Project::new(&GRAPH.replace(
        "pattern = \"raw/{date:date}\"\n",
        "pattern = \"raw/{date:date}\"\nexists = [\"sh\", \"-c\", \"test -e data/$0\"]\n",
    ));
    p.file("data/raw/2020-01-01", "one\n");
    p.file("data/raw/2020-01-02", "two\n");
    build(&p, &[]);
    build(&p, &[]);
    assert_eq!(
        sql(&p, "SELECT count(*) FROM plan_cache"),
        serde_json::json!([[0]])
    );
}

#[test]
fn the_next_build_takes_the_kept_plan_without_planning() {
    let p = project();
    build(&p, &[]);
    // Proof that the kept plan (here, the one the build kept at its end) is what the next
    // build uses: one edited behind DataBuild's back is what the next build believes.
    let edit = |p: &Project, f: &dyn Fn(&mut serde_json::Value)| {
        let db = rusqlite::Connection::open(p.path().join(".databuild/events.db")).unwrap();
        let body: Vec<u8> = db
            .query_row("SELECT body FROM plan_cache", [], |r| r.get(0))
            .unwrap();
        let mut body: serde_json::Value = serde_json::from_slice(&body).unwrap();
        f(&mut body);
        db.execute(
            "UPDATE plan_cache SET body = ?1",
            [serde_json::to_vec(&body).unwrap()],
        )
        .unwrap();
    };
    // An output deleted, and struck from what the plan found: the next build does not look.
    std::fs::remove_file(p.path().join("data/b/2020-01-02")).unwrap();
    edit(&p, &|body| {
        let present = body["seen"]["present"].as_array_mut().unwrap();
        present.retain(|r| r != REFS[1]);
    });
    let reused = build(&p, &[]);
    assert_eq!(reused["skipped"], serde_json::json!(REFS));
    // And the build after it too: reusing moved the plan forward, body and all.
    let again = build(&p, &[]);
    assert_eq!(again["skipped"], serde_json::json!(REFS));
    assert_eq!(runs(&p), ["a", "a", "b", "b"]);

    // A body that does not answer the request (a requested ref missing) is not trusted: the
    // build plans anew, and finds the output gone.
    edit(&p, &|body| body["skipped"] = serde_json::json!([REFS[0]]));
    let anew = build(&p, &[]);
    assert_eq!(anew["skipped"], serde_json::json!([REFS[0]]));
    assert_eq!(runs(&p), ["b"]);
}

#[test]
fn a_build_that_fails_keeps_no_plan_and_its_rerun_builds() {
    let p = project();
    std::fs::write(
        p.path().join("databuild.toml"),
        GRAPH.replace(
            "echo b >> runs.log;",
            "echo b >> runs.log; test -e fail && exit 3;",
        ),
    )
    .unwrap();
    p.file("fail", "");
    let mut args = vec!["build"];
    args.extend(REFS);
    p.run(&args).expect_code(1);
    assert_eq!(
        sql(&p, "SELECT count(*) FROM plan_cache"),
        serde_json::json!([[0]])
    );
    // (Both `b` runs, or one: the build stops starting runs at its first failure.)
    assert!(runs(&p).contains(&"b".to_string()));
    // The next build, the job fixed (the same graph, the same key), builds what failed.
    std::fs::remove_file(p.path().join("fail")).unwrap();
    build(&p, &[]);
    assert_eq!(runs(&p), ["b", "b"]);
}
