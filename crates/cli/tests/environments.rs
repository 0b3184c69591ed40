//! Environments (#59, contract section 9): a change tried in `dev` on real data runs only what
//! it changes, links the rest from prod, never touches prod's bytes or answers, and is promoted
//! in one step and rolled back as fast.

use crate::util::Project;

/// An external `flights`, then clean → agg → report, each a script that notes its run in
/// `runs.log`.
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

pub(crate) const DAY: &str = "2026-01-01";

pub(crate) fn script(job: &str, input: &str, body: &str) -> String {
    format!(
        "echo {job} >> runs.log\n\
         out=$(echo \"$DATABUILD_OUTPUTS\" | tr -d '[]\"')\n\
         d=${{out#{job}/}}\n\
         in=\"$DATABUILD_DATA_DIR/{input}/$d\"\n\
         mkdir -p \"$DATABUILD_OUTPUT_DIR/{job}\"\n\
         {body} > \"$DATABUILD_OUTPUT_DIR/$out\"\n"
    )
}

const CLEAN: &str = "tail -n +2 \"$in\"";
const AGG: &str = "wc -l < \"$in\"";
pub(crate) const AGG_EDITED: &str = "wc -l < \"$in\" | sed 's/^/n=/'";

pub(crate) fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file(&format!("data/flights/{DAY}"), "header\nAF1\nAF2\n");
    p.file("jobs/clean.sh", &script("clean", "flights", CLEAN));
    p.file("jobs/agg.sh", &script("agg", "clean", AGG));
    p.file("jobs/report.sh", &script("report", "agg", "cat \"$in\""));
    p
}

/// The jobs that ran since the last call (which empties `runs.log`).
pub(crate) fn ran(p: &Project) -> Vec<String> {
    let path = p.path().join("runs.log");
    let text = std::fs::read_to_string(&path).unwrap_or_default();
    let _ = std::fs::remove_file(&path);
    text.lines().map(str::to_string).collect()
}

pub(crate) fn json(p: &Project, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json"];
    all.extend(args);
    let out = p.run(&all);
    out.expect_code(0);
    out.json()
}

pub(crate) fn report() -> String {
    format!("report/{DAY}")
}

/// Each job's partition of DAY: (status, path) in `env`.
pub(crate) fn statuses(p: &Project, env: &str) -> Vec<(String, String)> {
    let refs: Vec<String> = ["clean", "agg", "report"]
        .iter()
        .map(|j| format!("{j}/{DAY}"))
        .collect();
    let mut args = vec!["--env", env, "status"];
    args.extend(refs.iter().map(String::as_str));
    json(p, &args)
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["status"].as_str().unwrap().to_string(),
                s["path"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

pub(crate) fn read(p: &Project, rel: &str) -> String {
    std::fs::read_to_string(p.path().join(rel)).unwrap()
}

#[test]
fn a_change_tried_in_dev_runs_only_what_it_changes_and_promotes_and_rolls_back_in_one_step() {
    let p = project();
    json(&p, &["build", &report()]);
    assert_eq!(ran(&p), ["clean", "agg", "report"]);
    let prod_report = read(&p, &format!("data/report/{DAY}"));

    let made = json(&p, &["env", "create", "dev"]);
    assert_eq!(made["name"], "dev");
    p.file("jobs/agg.sh", &script("agg", "clean", AGG_EDITED));
    let prod_before = statuses(&p, "prod");

    let built = json(&p, &["--env", "dev", "build", &report()]);
    assert_eq!(ran(&p), ["agg", "report"], "clean was reused: {built}");
    assert_eq!(built["counts"]["built"], 3, "{built}");
    assert_eq!(built["counts"]["reused"], 1, "{built}");

    let dev = statuses(&p, "dev");
    assert!(dev.iter().all(|(s, _)| s == "live"), "{dev:?}");
    let dev_dir = p.path().join("data/.databuild-env/dev");
    for (_, path) in &dev {
        assert!(path.starts_with(dev_dir.to_str().unwrap()), "{path}");
    }
    assert_eq!(
        read(&p, &format!("data/.databuild-env/dev/report/{DAY}")),
        "n=2\n"
    );
    // Prod's bytes and answers are as they were.
    assert_eq!(read(&p, &format!("data/report/{DAY}")), prod_report);
    assert_eq!(statuses(&p, "prod"), prod_before);
    // Clean's instance is prod's own bytes, linked: the same file.
    use std::os::unix::fs::MetadataExt;
    let inode = |rel: &str| std::fs::metadata(p.path().join(rel)).unwrap().ino();
    assert_eq!(
        inode(&format!("data/clean/{DAY}")),
        inode(&format!("data/.databuild-env/dev/clean/{DAY}"))
    );
    let clean = json(&p, &["--env", "dev", "status", &format!("clean/{DAY}")]);
    let run = clean[0]["built_by"].as_str().unwrap().to_string();
    let events = p.run(&["--json", "--env", "dev", "events", "--run", &run]);
    let completed: serde_json::Value = events
        .stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .find(|e: &serde_json::Value| e["status"] == "completed")
        .unwrap_or_else(|| panic!("{}", events.stdout));
    assert_eq!(
        completed["data"]["reused_from"]["environment"], "prod",
        "{completed}"
    );

    let diff = json(&p, &["env", "diff", "dev"]);
    assert_eq!(diff["partitions_total"], 2, "{diff}");
    let refs: Vec<&str> = diff["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["ref"].as_str().unwrap())
        .collect();
    assert_eq!(refs, [format!("agg/{DAY}"), format!("report/{DAY}")]);
    let agg = &diff["partitions"][0];
    assert_eq!(agg["content"]["change"], "changed", "{agg}");
    let unified = agg["content"]["unified"].as_str().unwrap();
    assert!(
        unified.contains("-2\n+n=2") || (unified.contains("-2") && unified.contains("+n=2")),
        "{unified}"
    );
    assert_eq!(diff["jobs"][0]["job"], "agg");
    assert_eq!(
        diff["jobs"][0]["reasons"][0], "jobs/agg.sh changed",
        "{diff}"
    );
    let text = p.run(&["env", "diff", "dev"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains("agg: jobs/agg.sh changed"),
        "{}",
        text.stdout
    );

    let promoted = json(&p, &["env", "promote", "dev"]);
    assert_eq!(promoted["kind"], "promote");
    assert_eq!(promoted["partitions"], 2, "agg and report: {promoted}");
    assert!(ran(&p).is_empty(), "no job ran to promote");
    assert_eq!(read(&p, &format!("data/report/{DAY}")), "n=2\n");
    let prod = statuses(&p, "prod");
    assert!(
        prod.iter().all(|(s, _)| s == "live"),
        "prod reads dev's: {prod:?}"
    );
    let log = p.run(&["logs", &report()]);
    log.expect_code(0);
    assert!(
        log.stdout.contains("of environment `dev`: no job ran"),
        "{}",
        log.stdout
    );
    let noop = json(&p, &["build", &report()]);
    assert!(ran(&p).is_empty(), "prod has it live and fresh: {noop}");

    let back = json(&p, &["env", "rollback"]);
    assert_eq!(back["kind"], "rollback");
    assert!(ran(&p).is_empty());
    assert_eq!(read(&p, &format!("data/report/{DAY}")), prod_report);
    assert_eq!(
        statuses(&p, "prod"),
        prod_before,
        "prod as before the promotion"
    );
}

#[test]
fn a_comment_only_change_reruns_its_job_and_nothing_downstream() {
    let p = project();
    json(&p, &["build", &report()]);
    ran(&p);
    json(&p, &["env", "create", "dev"]);
    p.file(
        "jobs/clean.sh",
        &format!("# a comment\n{}", script("clean", "flights", CLEAN)),
    );
    let text = p.run(&["--env", "dev", "build", &report()]);
    text.expect_code(0);
    assert_eq!(ran(&p), ["clean"], "agg and report reused: same bytes in");
    let said = format!("{}{}", text.stderr, text.stdout);
    assert!(said.contains(&format!("reused  agg  agg/{DAY}")), "{said}");
    assert!(text.stdout.contains("3 built (2 reused"), "{}", text.stdout);
}

#[test]
fn environments_are_listed_made_from_another_and_dropped() {
    let p = project();
    json(&p, &["build", &report()]);
    let made = json(&p, &["env", "create", "staging", "--from", "prod"]);
    assert_eq!(made["from"], "prod");
    assert_eq!(
        made["available"], 3,
        "prod's live partitions linked: {made}"
    );
    assert!(ran(&p).len() == 3, "only prod's build ran jobs");
    let list = json(&p, &["env", "list"]);
    let names: Vec<&str> = list["environments"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["prod", "staging"]);
    let again = p.run(&["env", "create", "staging"]);
    again.expect_code(2);
    let bad = p.run(&["env", "create", "Bad-Name"]);
    bad.expect_code(2);
    let unknown = p.run(&["--env", "nope", "status", &report()]);
    unknown.expect_code(2);
    assert!(
        unknown.stderr.contains("databuild env create nope"),
        "{}",
        unknown.stderr
    );
    json(&p, &["env", "drop", "staging"]);
    assert!(!p.path().join("data/.databuild-env/staging").exists());
    assert_eq!(
        read(&p, &format!("data/report/{DAY}")),
        "2\n",
        "prod's bytes stay"
    );
    let drop_prod = p.run(&["env", "drop", "prod"]);
    drop_prod.expect_code(2);
}

#[test]
fn gc_frees_what_older_promotions_replaced_keeps_the_last_and_leaves_environments_alone() {
    let p = project();
    json(&p, &["build", &report()]);
    json(&p, &["env", "create", "dev"]);
    let mut kept = Vec::new();
    for (i, body) in [AGG_EDITED, "wc -l < \"$in\" | sed 's/^/count=/'"]
        .iter()
        .enumerate()
    {
        p.file("jobs/agg.sh", &script("agg", "clean", body));
        json(&p, &["--env", "dev", "build", &report()]);
        let promoted = json(&p, &["env", "promote", "dev"]);
        assert_eq!(promoted["partitions"], 2, "promotion {i}: {promoted}");
        kept.push(p.path().join(format!(
            "data/.databuild-env/.replaced/prod/{}",
            promoted["build_request_id"].as_str().unwrap()
        )));
    }
    assert!(
        kept.iter().all(|k| k.join(format!("agg/{DAY}")).exists()),
        "{kept:?}"
    );
    // A dev file that looks like a leftover to prod's walk: dev's own, not prod's.
    p.file("data/.databuild-env/dev/agg/left.tmp", "x");
    let gc = json(&p, &["gc", "--older-than", "0s"]);
    assert_eq!(gc["totals"]["replaced"]["count"], 1, "{gc}");
    assert!(
        !kept[0].exists(),
        "the first promotion's replaced data is freed"
    );
    assert!(
        kept[1].exists(),
        "the last promotion's is kept for its rollback"
    );
    assert!(p
        .path()
        .join("data/.databuild-env/dev/agg/left.tmp")
        .exists());
    assert_eq!(
        read(&p, &format!("data/.databuild-env/dev/report/{DAY}")),
        "count=2\n"
    );
    json(&p, &["env", "rollback"]);
    assert_eq!(
        read(&p, &format!("data/report/{DAY}")),
        "n=2\n",
        "back to the first promotion's"
    );
}

/// Day two of flights, for a promotion that adds partitions prod never had.
const DAY2: &str = "2026-01-02";

#[test]
fn a_second_rollback_undoes_the_first_and_nothing_to_promote_records_nothing() {
    let p = project();
    p.file(&format!("data/flights/{DAY2}"), "header\nKL1\n");
    json(&p, &["build", &report()]);
    json(&p, &["env", "create", "dev"]);
    p.file("jobs/agg.sh", &script("agg", "clean", AGG_EDITED));
    json(
        &p,
        &[
            "--env",
            "dev",
            "build",
            &report(),
            &format!("report/{DAY2}"),
        ],
    );
    let promoted = json(&p, &["env", "promote", "dev"]);
    assert_eq!(promoted["partitions"], 5, "2 changed, 3 added: {promoted}");
    let day2 = p.path().join(format!("data/report/{DAY2}"));
    assert_eq!(read(&p, &format!("data/report/{DAY2}")), "n=1\n");

    let back = json(&p, &["env", "rollback"]);
    assert_eq!(back["removed"], 3, "{back}");
    assert!(!day2.exists());
    let status = json(&p, &["status", &format!("report/{DAY2}")]);
    assert_eq!(status[0]["status"], "missing", "{status}");

    let again = json(&p, &["env", "rollback"]);
    assert_eq!(again["partitions"], 5, "the rollback undone: {again}");
    assert_eq!(read(&p, &format!("data/report/{DAY2}")), "n=1\n");
    assert_eq!(read(&p, &format!("data/report/{DAY}")), "n=2\n");

    let nothing = json(&p, &["env", "promote", "dev"]);
    assert_eq!(nothing["partitions"], 0, "{nothing}");
    assert!(
        nothing["build_request_id"].is_null(),
        "nothing recorded: {nothing}"
    );
    let list = json(&p, &["env", "list"]);
    assert_eq!(
        list["environments"][0]["last_change"], again["build_request_id"],
        "the last change is still the rollback: {list}"
    );
    // Rolled back and promoted again: the removed partitions are claimed again.
    json(&p, &["env", "rollback"]);
    let re = json(&p, &["env", "promote", "dev"]);
    assert_eq!(re["partitions"], 5, "{re}");
}

#[test]
fn a_promotion_never_takes_prod_back_to_its_own_older_data() {
    let p = project();
    json(&p, &["build", &report()]);
    json(&p, &["env", "create", "dev"]);
    p.file("jobs/agg.sh", &script("agg", "clean", AGG_EDITED));
    json(&p, &["--env", "dev", "build", &report()]);
    // Prod moves on: new flights, rebuilt (dev's clean is prod's old one, reused).
    p.file(&format!("data/flights/{DAY}"), "header\nAF1\nAF2\nAF3\n");
    json(&p, &["build", &report()]);
    assert_eq!(read(&p, &format!("data/clean/{DAY}")), "AF1\nAF2\nAF3\n");
    let promoted = json(&p, &["env", "promote", "dev"]);
    assert_eq!(
        promoted["partitions"], 2,
        "agg and report, not clean: {promoted}"
    );
    assert_eq!(read(&p, &format!("data/clean/{DAY}")), "AF1\nAF2\nAF3\n");
    // What dev made read the older clean: prod says so.
    let agg = json(&p, &["status", &format!("agg/{DAY}")]);
    assert_eq!(agg[0]["status"], "stale", "{agg}");
}

#[test]
fn a_promotion_cut_short_on_disk_is_finished_by_the_next_one() {
    let p = project();
    json(&p, &["build", &report()]);
    json(&p, &["env", "create", "dev"]);
    p.file("jobs/agg.sh", &script("agg", "clean", AGG_EDITED));
    json(&p, &["--env", "dev", "build", &report()]);
    // Where prod's replaced data is kept cannot be made: the move fails after the record.
    p.file("data/.databuild-env/.replaced", "in the way");
    let cut = p.run(&["env", "promote", "dev"]);
    assert_ne!(cut.code, 0);
    assert!(cut.stderr.contains("finishes it"), "{}", cut.stderr);
    std::fs::remove_file(p.path().join("data/.databuild-env/.replaced")).unwrap();
    let gc = json(&p, &["gc", "--older-than", "0s", "--dry-run"]);
    assert!(gc["totals"].get("staging").is_none(), "gc keeps it: {gc}");
    let next = json(&p, &["env", "promote", "dev"]);
    assert!(
        next["build_request_id"].is_null(),
        "nothing new to take: {next}"
    );
    assert_eq!(read(&p, &format!("data/report/{DAY}")), "n=2\n", "finished");
    json(&p, &["env", "rollback"]);
    assert_eq!(read(&p, &format!("data/report/{DAY}")), "2\n");
}

/// On a PostgreSQL log an environment is a schema of the same database: the same story.
#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
fn environments_on_a_postgres_log_are_schemas_of_its_database() {
    let pg = crate::postgres::fresh_database();
    let p = project();
    let on = |args: &[&str]| {
        let mut all = vec!["--event-log", pg.as_str()];
        all.extend_from_slice(args);
        json(&p, &all)
    };
    on(&["build", &report()]);
    on(&["env", "create", "dev"]);
    p.file("jobs/agg.sh", &script("agg", "clean", AGG_EDITED));
    let built = on(&["--env", "dev", "build", &report()]);
    assert_eq!(built["counts"]["reused"], 1, "{built}");
    ran(&p);
    let schemas = std::process::Command::new("psql")
        .args([pg.as_str(), "-Atc", "SELECT schema_name FROM information_schema.schemata WHERE schema_name LIKE 'databuild_env_%'"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&schemas.stdout).trim(),
        "databuild_env_dev"
    );
    let promoted = on(&["env", "promote", "dev"]);
    assert_eq!(promoted["partitions"], 2, "{promoted}");
    assert_eq!(read(&p, &format!("data/report/{DAY}")), "n=2\n");
    on(&["env", "rollback"]);
    assert_eq!(read(&p, &format!("data/report/{DAY}")), "2\n");
    on(&["env", "drop", "dev"]);
    let list = on(&["env", "list"]);
    assert_eq!(list["environments"].as_array().unwrap().len(), 1, "{list}");
}

/// A table with two versions over a directory source.
const TABLES: &str = r#"
[graph]
name = "files"
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
"#;

#[test]
fn a_tables_alias_pinned_in_an_environment_moves_with_its_promotion() {
    let p = Project::new(TABLES);
    p.file("incoming/drops/a.json", r#"[{"n": 1}, {"n": 2}]"#);
    let on = |args: &[&str]| {
        let out = p
            .command()
            .env("DATABUILD_NOW", "2026-03-02")
            .args(["--json"])
            .args(args)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(
            out.status.success(),
            "{args:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_str::<serde_json::Value>(&text).unwrap_or(serde_json::Value::Null)
    };
    let day = "2026-03-02";
    on(&["source", "seal", "drops", "--through", day]);
    on(&["build", &format!("drops/date={day}")]);
    on(&["env", "create", "dev"]);
    on(&["--env", "dev", "build", &format!("drops/v2/date={day}")]);
    on(&["--env", "dev", "promote", "drops", "--version", "2"]);
    let promoted_in =
        |env: &str| on(&["--env", env, "source", "show", "drops"])["tables"][0]["promoted"].clone();
    assert_eq!(promoted_in("dev"), 2);
    assert_eq!(promoted_in("prod"), 1, "dev's pin is dev's");
    let diff = on(&["env", "diff", "dev"]);
    assert_eq!(diff["aliases"][0]["table"], "drops", "{diff}");
    assert_eq!(diff["aliases"][0]["version"], 2);
    let promoted = on(&["env", "promote", "dev"]);
    assert_eq!(promoted["aliases"], 1, "{promoted}");
    assert_eq!(promoted_in("prod"), 2);
    let status = on(&["status", &format!("drops/date={day}")]);
    assert_eq!(
        status[0]["status"], "live",
        "prod reads v2 through its alias: {status}"
    );
    on(&["env", "rollback"]);
    assert_eq!(promoted_in("prod"), 1, "rolled back with the partitions");
}
