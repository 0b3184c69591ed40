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
    json(&p, &["--env", "dev", "build", &report()]);
    assert_eq!(ran(&p), ["clean"], "agg and report reused: same bytes in");
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
