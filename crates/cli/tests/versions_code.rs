//! Versions follow the code (#58): editing a job's script, a file its `code` globs match, or its
//! definition makes its partitions (and those built from them) stale with the reason, and a
//! build reruns them; reverting the edit makes them live again without a build. A check's code
//! reruns the check. Runs recorded before code versions compare on `version` only.

use crate::util::Project;

/// An external `flights`, jobs clean → agg → report (each a script that notes its run in
/// `runs.log`), agg with a `code` glob and env (`MODE` shown, `TOKEN` a secret), and a check of
/// report's outputs that notes its runs in `checks.log`.
const GRAPH: &str = r#"
[graph]
name = "flights"
show_env = ["MODE"]
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
code = ["jobs/lib/*.sh"]
env = { MODE = "fast", TOKEN = "s1" }
[[job]]
name = "report"
outputs = ["report/{d:date}"]
inputs = ["agg/{d}"]
command = ["sh", "jobs/report.sh"]
[[check]]
name = "report_ok"
applies_to = "report"
command = ["sh", "checks/report_ok.sh"]
"#;

const DAY: &str = "2026-01-01";

/// A job's script: notes its run, then writes its one output from `body` (`$in` is its input).
fn script(job: &str, input: &str, body: &str) -> String {
    format!(
        "echo {job} >> runs.log\n\
         out=$(echo \"$DATABUILD_OUTPUTS\" | tr -d '[]\"')\n\
         d=${{out#{job}/}}\n\
         in=\"$DATABUILD_DATA_DIR/{input}/$d\"\n\
         mkdir -p \"$DATABUILD_OUTPUT_DIR/{job}\"\n\
         {body} > \"$DATABUILD_OUTPUT_DIR/$out\"\n"
    )
}

const AGG: &str = "wc -l < \"$in\"";

/// An edit of agg that changes what it writes (`n=2` for `2`): what reads it is rebuilt too.
const AGG_EDITED: &str = "wc -l < \"$in\" | sed 's/^/n=/'";

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file(&format!("data/flights/{DAY}"), "header\nAF1\nAF2\n");
    p.file(
        "jobs/clean.sh",
        &script("clean", "flights", "tail -n +2 \"$in\""),
    );
    p.file("jobs/agg.sh", &script("agg", "clean", AGG));
    p.file("jobs/report.sh", &script("report", "agg", "cat \"$in\""));
    p.file("jobs/lib/x.sh", "# shared helpers\n");
    p.file(
        "checks/report_ok.sh",
        "echo check >> checks.log\ntest -s \"$DATABUILD_PARTITION_PATH\"\n",
    );
    p
}

/// The lines of `file` (runs.log, checks.log) since the last call, which empties it.
fn taken(p: &Project, file: &str) -> Vec<String> {
    let path = p.path().join(file);
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    text.lines().map(str::to_string).collect()
}

fn build(p: &Project) -> serde_json::Value {
    let out = p.run(&["--json", "build", &format!("report/{DAY}")]);
    out.expect_code(0);
    out.json()
}

/// `status --json` of each job's partition of `DAY`: (status, first reason).
fn statuses(p: &Project) -> Vec<(String, String)> {
    let refs: Vec<String> = ["clean", "agg", "report"]
        .iter()
        .map(|j| format!("{j}/{DAY}"))
        .collect();
    let mut args = vec!["--json", "status"];
    args.extend(refs.iter().map(String::as_str));
    let out = p.run(&args);
    out.expect_code(0);
    out.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["status"].as_str().unwrap().to_string(),
                s["reasons"][0].as_str().unwrap_or_default().to_string(),
            )
        })
        .collect()
}

fn explain(p: &Project, r: &str) -> serde_json::Value {
    let out = p.run(&["--json", "explain", r]);
    out.expect_code(0);
    out.json()
}

/// Built, then `jobs/agg.sh` edited (a real change of what it writes).
fn built_then_agg_edited(p: &Project) {
    build(p);
    assert_eq!(taken(p, "runs.log"), ["clean", "agg", "report"]);
    p.file("jobs/agg.sh", &script("agg", "clean", AGG_EDITED));
}

#[test]
fn an_edited_script_makes_its_job_and_what_reads_it_stale_and_a_build_reruns_only_them() {
    let p = project();
    built_then_agg_edited(&p);
    let was = explain(&p, &format!("agg/{DAY}"));
    let change = &was["code_changes"][0];
    assert_eq!(change["change"], "changed", "{was}");
    assert_eq!(change["path"], "jobs/agg.sh");
    let (from, to) = (
        change["from"].as_str().unwrap(),
        change["to"].as_str().unwrap(),
    );
    assert_eq!(was["run"]["code_versions"]["jobs/agg.sh"], from);
    let text = p.run(&["explain", &format!("agg/{DAY}")]);
    assert!(
        text.stdout
            .contains(&format!("    jobs/agg.sh  sha {from}"))
            && text.stdout.contains(&format!(
                "  code changed since: jobs/agg.sh (sha {}… → {}…)",
                &from[..8],
                &to[..8]
            )),
        "{}",
        text.stdout
    );
    let s = statuses(&p);
    assert_eq!(s[0].0, "live", "clean's code did not change: {s:?}");
    assert_eq!(s[1].0, "stale");
    assert_eq!(
        s[1].1,
        format!(
            "job `agg` changed code: jobs/agg.sh (sha {}… → {}…)",
            &from[..8],
            &to[..8]
        )
    );
    assert_eq!(s[2].0, "stale");
    assert!(
        s[2].1.starts_with(&format!(
            "input `agg/{DAY}` is stale: job `agg` changed code: jobs/agg.sh"
        )),
        "{s:?}"
    );
    build(&p);
    assert_eq!(taken(&p, "runs.log"), ["agg", "report"]);
    assert!(statuses(&p).iter().all(|(s, _)| s == "live"));
    // The new run recorded the new code.
    let now = explain(&p, &format!("agg/{DAY}"));
    assert_eq!(now["run"]["code_versions"]["jobs/agg.sh"], to);
    assert!(now.get("code_changes").is_none(), "{now}");
}

#[test]
fn a_reverted_edit_is_live_again_without_a_build() {
    let p = project();
    built_then_agg_edited(&p);
    assert_eq!(statuses(&p)[1].0, "stale");
    p.file("jobs/agg.sh", &script("agg", "clean", AGG));
    assert!(statuses(&p).iter().all(|(s, _)| s == "live"));
    build(&p);
    assert!(taken(&p, "runs.log").is_empty());
}

#[test]
fn a_file_a_code_glob_matches_is_code_too() {
    let p = project();
    build(&p);
    taken(&p, "runs.log");
    p.file("jobs/lib/x.sh", "# shared helpers, edited\n");
    let s = statuses(&p);
    assert_eq!(s[0].0, "live");
    assert!(s[1].1.contains("changed code: jobs/lib/x.sh (sha"), "{s:?}");
    // A new file the glob matches is code the job did not run.
    p.file("jobs/lib/x.sh", "# shared helpers\n");
    p.file("jobs/lib/y.sh", "# more\n");
    assert_eq!(
        statuses(&p)[1].1,
        "job `agg` changed code: jobs/lib/y.sh (added)"
    );
}

#[test]
fn a_code_glob_that_matches_nothing_is_refused_naming_the_job_and_the_glob() {
    let p = project();
    let graph = GRAPH.replace("jobs/lib/*.sh", "jobs/nope/*.sh");
    p.file("databuild.toml", &graph);
    for args in [
        vec!["status", "agg/2026-01-01"],
        vec!["build", "agg/2026-01-01"],
        vec!["analyze", "agg/2026-01-01"],
    ] {
        let out = p.run(&args);
        out.expect_code(2);
        assert!(
            out.stderr
                .contains("job `agg`: `code` glob `jobs/nope/*.sh` matches no file"),
            "{args:?}: {}",
            out.stderr
        );
        assert!(out.stderr.contains("relative to the graph file's folder"));
    }
    assert!(taken(&p, "runs.log").is_empty());
}

#[test]
fn a_secret_env_value_is_not_hashed_but_a_shown_one_is() {
    let p = project();
    build(&p);
    p.file(
        "databuild.toml",
        &GRAPH.replace("TOKEN = \"s1\"", "TOKEN = \"s2\""),
    );
    assert!(statuses(&p).iter().all(|(s, _)| s == "live"));
    p.file(
        "databuild.toml",
        &GRAPH.replace("MODE = \"fast\"", "MODE = \"slow\""),
    );
    let s = statuses(&p);
    assert_eq!(s[0].0, "live");
    assert_eq!(
        s[1],
        (
            "stale".to_string(),
            "job `agg` changed its definition (command, config or env)".to_string()
        )
    );
}

#[test]
fn a_checks_code_change_reruns_the_check_not_the_job() {
    let p = project();
    build(&p);
    assert_eq!(taken(&p, "checks.log"), ["check"]);
    taken(&p, "runs.log");
    p.file(
        "checks/report_ok.sh",
        "echo check >> checks.log\ntest -s \"$DATABUILD_PARTITION_PATH\" # edited\n",
    );
    let x = explain(&p, &format!("report/{DAY}"));
    let stale = x["checks"][0]["stale"].as_str().unwrap_or_default();
    assert!(
        stale.starts_with("check `report_ok` changed code: checks/report_ok.sh (sha"),
        "{x}"
    );
    build(&p);
    assert_eq!(taken(&p, "checks.log"), ["check"]);
    assert!(taken(&p, "runs.log").is_empty());
    let x = explain(&p, &format!("report/{DAY}"));
    assert!(x["checks"][0].get("stale").is_none(), "{x}");
}

#[test]
fn analyze_counts_what_a_code_change_rebuilds_and_lineage_and_diff_show_it() {
    let p = project();
    built_then_agg_edited(&p);
    let out = p.run(&["--json", "analyze", &format!("report/{DAY}")]);
    out.expect_code(0);
    let a = out.json();
    assert_eq!(a["job_runs"].as_array().unwrap().len(), 2, "{a}");
    assert_eq!(a["stale_by_code"], 2, "{a}");
    let text = p.run(&["analyze", &format!("report/{DAY}")]);
    assert!(
        text.stdout.contains("2 job runs because code changed"),
        "{}",
        text.stdout
    );
    build(&p);
    let out = p.run(&["lineage", &format!("report/{DAY}"), "--format", "json"]);
    out.expect_code(0);
    let root = out.json()["root"].clone();
    let agg = &root["children"][0];
    let code = agg["code_version"].as_str().unwrap();
    assert_eq!(code.len(), 12, "{agg}");
    assert_ne!(root["code_version"], agg["code_version"]);
    let out = p.run(&["--json", "diff", &format!("agg/{DAY}")]);
    out.expect_code(0);
    let d = out.json();
    assert_eq!(d["code"].as_array().unwrap().len(), 1, "{d}");
    assert_eq!(d["code"][0]["path"], "jobs/agg.sh");
    assert_eq!(d["code"][0]["change"], "changed");
    assert_ne!(d["from"]["code_version"], d["to"]["code_version"]);
    let text = p.run(&["diff", &format!("agg/{DAY}")]);
    assert!(
        text.stdout.contains("code changed: jobs/agg.sh (sha "),
        "{}",
        text.stdout
    );
}

#[test]
fn a_kept_plan_does_not_hide_a_code_edit() {
    let p = project();
    build(&p);
    // A no-op build: it keeps its plan for the next build of the same request.
    build(&p);
    let out = p.run(&["--json", "sql", "SELECT count(*) FROM plan_cache"]);
    out.expect_code(0);
    assert_eq!(out.json()["rows"][0][0], 1, "a plan is kept");
    taken(&p, "runs.log");
    p.file("jobs/agg.sh", &script("agg", "clean", AGG_EDITED));
    build(&p);
    assert_eq!(taken(&p, "runs.log"), ["agg", "report"]);
}

#[test]
fn runs_recorded_before_code_versions_compare_on_version_only() {
    let p = crate::versions_compat::old_project();
    std::fs::write(
        p.path().join("jobs/agg.sh"),
        "# edited after the upgrade\nexit 1\n",
    )
    .unwrap();
    let out = p.run(&["--json", "status", "agg/2026-01-01", "report/2026-01-01"]);
    out.expect_code(0);
    for s in out.json().as_array().unwrap() {
        assert_eq!(s["status"], "live", "{s}");
    }
}

#[test]
fn the_dashboards_partition_page_says_which_file_changed() {
    let p = project();
    built_then_agg_edited(&p);
    let mut s = crate::util::Service::start(&p, &[]);
    let (status, html) = s.call("GET", &format!("/partitions/agg%2F{DAY}"), None, None);
    s.stop();
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("job `agg` changed code: jobs/agg.sh (sha "),
        "{html}"
    );
    assert!(
        html.contains("<h2>Code changed since its run</h2>"),
        "{html}"
    );
}

#[test]
fn the_dashboards_analyze_page_counts_the_runs_a_code_change_makes() {
    let p = project();
    built_then_agg_edited(&p);
    let mut s = crate::util::Service::start(&p, &[]);
    let (status, html) = s.call("GET", &format!("/analyze?refs=report%2F{DAY}"), None, None);
    s.stop();
    assert_eq!(status, 200, "{html}");
    assert!(
        html.contains("2 of the runs because code changed"),
        "{html}"
    );
}

#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
fn code_versions_are_recorded_and_compared_on_postgres_too() {
    let pg = crate::postgres::fresh_database();
    let p = project();
    let graph = GRAPH.replace(
        "name = \"flights\"\nshow_env",
        &format!("name = \"flights\"\nevent_log = \"{pg}\"\nshow_env"),
    );
    assert_ne!(graph, GRAPH, "the log is PostgreSQL's");
    p.file("databuild.toml", &graph);
    built_then_agg_edited(&p);
    assert!(!p.path().join(".databuild/events.db").exists());
    p.file(
        "checks/report_ok.sh",
        "echo check >> checks.log\ntest -s \"$DATABUILD_PARTITION_PATH\" # edited\n",
    );
    taken(&p, "checks.log");
    let s = statuses(&p);
    assert_eq!(s[0].0, "live", "{s:?}");
    assert!(s[1].1.contains("changed code: jobs/agg.sh (sha"), "{s:?}");
    build(&p);
    assert_eq!(taken(&p, "runs.log"), ["agg", "report"]);
    assert_eq!(taken(&p, "checks.log"), ["check"]);
    assert!(statuses(&p).iter().all(|(s, _)| s == "live"));
    let x = explain(&p, &format!("report/{DAY}"));
    assert!(x["checks"][0].get("stale").is_none(), "{x}");
}

/// An edit that changes no byte of what the job writes (a comment) reruns the job, whose
/// unchanged output keeps everything built from it: nothing downstream runs.
#[test]
fn a_comment_only_edit_reruns_its_job_but_nothing_downstream() {
    let p = project();
    build(&p);
    taken(&p, "runs.log");
    let clean = script("clean", "flights", "tail -n +2 \"$in\"");
    p.file(
        "jobs/clean.sh",
        &format!("# drops the header line\n{clean}"),
    );
    let s = statuses(&p);
    assert_eq!(s[0].0, "stale", "{s:?}");
    assert!(s[0].1.contains("changed code: jobs/clean.sh"), "{s:?}");
    let out = p.run(&["--json", "build", &format!("report/{DAY}")]);
    out.expect_code(0);
    assert_eq!(taken(&p, "runs.log"), ["clean"]);
    let summary = out.json();
    assert_eq!(summary["counts"]["unchanged"], 1, "{summary}");
    assert_eq!(summary["counts"]["kept"], 2, "{summary}");
    let s = statuses(&p);
    assert!(s.iter().all(|(s, _)| s == "live"), "{s:?}");
    assert!(s[0].1.contains("unchanged: downstream kept"), "{s:?}");
}
