//! `databuild gc` (#29): what nothing reads goes, recorded in the log; a live partition, the log
//! of a partition's current run and anything of a running job stay.

use std::path::Path;

use crate::util::{current_run, Project, Service};

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
command = ["sh", "-c", "echo building $DATABUILD_OUTPUTS; mkdir -p $DATABUILD_OUTPUT_DIR/a && echo x > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
"#;

const JOB_B: &str = r#"
[[job]]
name = "b"
outputs = ["b/{d:date}"]
inputs = ["raw/{d}"]
command = ["sh", "-c", "echo building b; mkdir -p $DATABUILD_OUTPUT_DIR/b && echo y > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
"#;

fn runs_of(p: &Project, job: &str) -> Vec<String> {
    let out = p.run(&[
        "--json",
        "sql",
        &format!("SELECT job_run_id FROM job_runs WHERE job = '{job}' ORDER BY scheduled_at"),
    ]);
    out.json()["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|row| row[0].as_str().unwrap().to_string())
        .collect()
}

fn log_of(p: &Project, run: &str) -> std::path::PathBuf {
    p.path().join(format!(".databuild/logs/{run}.log"))
}

fn exists(path: &Path) -> bool {
    path.symlink_metadata().is_ok()
}

#[test]
fn gc_removes_what_nothing_reads_and_records_it() {
    let p = Project::new(&format!("{GRAPH}{JOB_B}"));
    for d in 1..=2 {
        p.partition(&format!("raw/2020-01-0{d}"));
    }
    p.run(&["build", "a/{2020-01-01..2020-01-02}", "b/2020-01-01"])
        .expect_code(0);
    // A forced rebuild: the first run of a/2020-01-01 no longer holds it.
    p.run(&["build", "--force", "a/2020-01-01"]).expect_code(0);
    let runs = runs_of(&p, "a");
    let superseded = runs
        .iter()
        .find(|r| **r != current_run(&p, "a/2020-01-01") && **r != current_run(&p, "a/2020-01-02"))
        .unwrap()
        .clone();
    let current = current_run(&p, "a/2020-01-01");
    let b_run = current_run(&p, "b/2020-01-01");
    assert!(exists(&log_of(&p, &superseded)));

    // What killed jobs and dead drivers leave: a half-written file, the staging folder of an
    // ended run, and one of a run no log knows.
    let tmp = p.file("data/a/2020-01-03.tmp", "half");
    let ended_staging = p.file(&format!("data/.databuild-staging/{superseded}/a/x"), "old");
    let unknown_staging = p.file("data/.databuild-staging/not-a-run/a/y", "old");
    // A completed run whose driver died before it moved its output into place.
    let a2 = current_run(&p, "a/2020-01-02");
    let staged = p
        .path()
        .join(format!("data/.databuild-staging/{a2}/a/2020-01-02"));
    std::fs::create_dir_all(staged.parent().unwrap()).unwrap();
    std::fs::rename(p.path().join("data/a/2020-01-02"), &staged).unwrap();
    let status = p.run(&["--json", "status", "a/2020-01-02"]).json();
    assert_eq!(status[0]["status"], "missing", "{status}");

    // Job b leaves the graph: its partition's data is nobody's now.
    std::fs::write(p.path().join("databuild.toml"), GRAPH).unwrap();

    // Everything here is recent: the default age keeps it all.
    let recent = p.run(&["gc"]);
    recent.expect_code(0);
    assert!(
        recent.stdout.contains("nothing to remove older than 30d"),
        "{}",
        recent.stdout
    );
    assert!(exists(&tmp) && exists(&unknown_staging));

    // A dry run lists, and removes nothing.
    let dry = p.run(&["--json", "gc", "--older-than", "0s", "--dry-run"]);
    dry.expect_code(0);
    let dry = dry.json();
    assert_eq!(dry["dry_run"], true);
    let listed: Vec<(String, String)> = dry["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["kind"].as_str().unwrap().to_string(),
                i["path"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    let has = |kind: &str, path: &Path| {
        listed
            .iter()
            .any(|(k, p)| k == kind && Path::new(p) == path)
    };
    assert!(has("run_log", &log_of(&p, &superseded)), "{listed:?}");
    assert!(!has("run_log", &log_of(&p, &current)), "{listed:?}");
    assert!(
        !has("run_log", &log_of(&p, &b_run)),
        "the log of b's current run: {listed:?}"
    );
    assert!(has("temp_file", &tmp), "{listed:?}");
    assert!(has(
        "staging",
        &p.path()
            .join(format!("data/.databuild-staging/{superseded}"))
    ));
    assert!(has(
        "staging",
        &p.path().join("data/.databuild-staging/not-a-run")
    ));
    assert!(has(
        "published",
        &p.path().join(format!("data/.databuild-staging/{a2}"))
    ));
    assert!(
        has("partition_data", &p.path().join("data/b/2020-01-01")),
        "{listed:?}"
    );
    assert!(
        !listed
            .iter()
            .any(|(_, path)| path.ends_with("data/a/2020-01-01") || path.contains("data/raw")),
        "a live partition or external data listed: {listed:?}"
    );
    assert_eq!(dry["totals"]["partition_data"]["count"], 1);
    for path in [&tmp, &ended_staging, &unknown_staging, &staged] {
        assert!(exists(path), "a dry run removed {}", path.display());
    }
    assert!(exists(&p.path().join("data/b/2020-01-01")));

    // The same answer through the service.
    let service = Service::start(&p, &[]);
    let remote = p.run(&[
        "--server",
        &service.url,
        "--json",
        "gc",
        "--older-than",
        "0s",
        "--dry-run",
    ]);
    remote.expect_code(0);
    assert_eq!(remote.json()["totals"], dry["totals"]);
    drop(service);

    // Now for real.
    let done = p.run(&["gc", "--older-than", "0s"]);
    done.expect_code(0);
    assert!(done.stdout.contains("removed "), "{}", done.stdout);
    assert!(
        done.stdout
            .contains("kept 3: the log of a partition's current run"),
        "{}",
        done.stdout
    );
    for path in [
        &tmp,
        &ended_staging,
        &unknown_staging,
        &log_of(&p, &superseded),
    ] {
        assert!(!exists(path), "{} is still there", path.display());
    }
    assert!(!exists(&p.path().join("data/b/2020-01-01")));
    // Live data and the logs `logs REF` reads are untouched; the stranded output is in place.
    assert_eq!(
        std::fs::read_to_string(p.path().join("data/a/2020-01-01")).unwrap(),
        "x\n"
    );
    assert!(exists(&log_of(&p, &current)));
    p.run(&["logs", "a/2020-01-01"]).expect_code(0);
    let status = p
        .run(&["--json", "status", "a/{2020-01-01..2020-01-02}"])
        .json();
    for s in status.as_array().unwrap() {
        assert_eq!(s["status"], "live", "{status}");
    }
    assert!(!exists(
        &p.path().join(format!("data/.databuild-staging/{a2}"))
    ));

    // The log says what went: the partition `removed`, and a `gc` event with the totals.
    let events = p.run(&["--json", "events", "--partition", "b/2020-01-01"]);
    assert!(
        events
            .stdout
            .lines()
            .any(|l| l.contains("\"status\":\"removed\"")),
        "{}",
        events.stdout
    );
    let gc = p.run(&[
        "--json",
        "sql",
        "SELECT message, data FROM events WHERE kind = 'gc'",
    ]);
    let rows = gc.json()["rows"].clone();
    assert_eq!(rows.as_array().unwrap().len(), 1, "{rows}");
    assert!(
        rows[0][1].as_str().unwrap().contains("partition_data"),
        "{rows}"
    );
    p.run(&["check-log"]).expect_code(0);

    // A second gc finds nothing more.
    let again = p.run(&["--json", "gc", "--older-than", "0s"]).json();
    assert_eq!(again["totals"], serde_json::json!({}), "{again}");

    // With job b back, its partition is missing, says why, and a build makes it again.
    std::fs::write(p.path().join("databuild.toml"), format!("{GRAPH}{JOB_B}")).unwrap();
    let status = p.run(&["--json", "status", "b/2020-01-01"]).json();
    assert_eq!(status[0]["status"], "missing", "{status}");
    let reasons = status[0]["reasons"].to_string();
    assert!(reasons.contains("removed by `databuild gc`"), "{reasons}");
    let listed = p.run(&["--json", "partitions", "--pattern", "b/*"]).json();
    assert_eq!(listed["partitions"][0]["status"], "missing", "{listed}");
    let datasets = p.run(&["--json", "datasets"]).json();
    let b = datasets["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "b")
        .unwrap()
        .clone();
    assert_eq!(b["partitions"], serde_json::json!({"missing": 1}), "{b}");
    p.run(&["build", "b/2020-01-01"]).expect_code(0);
    assert_eq!(
        std::fs::read_to_string(p.path().join("data/b/2020-01-01")).unwrap(),
        "y\n"
    );
}

/// A job still running keeps its log and staging folder, and `.tmp` files newer than it stay.
#[test]
fn gc_never_touches_a_running_job() {
    let p = Project::new(
        r#"
[graph]
name = "g"
[[job]]
name = "slow"
outputs = ["slow/{n:int}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/slow; echo started; touch started; echo partial > data/slow/1.tmp; sleep 5; echo done > $DATABUILD_OUTPUT_DIR/slow/1"]
"#,
    );
    std::fs::create_dir_all(p.path().join("data/slow")).unwrap();
    let mut build = p.command().args(["build", "slow/1"]).spawn().unwrap();
    let started = p.path().join("started");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !started.exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the job never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let run = current_run(&p, "slow/1");
    let out = p.run(&["--json", "gc", "--older-than", "0s"]);
    out.expect_code(0);
    let report = out.json();
    assert!(report["items"].as_array().unwrap().is_empty(), "{report}");
    assert!(exists(&log_of(&p, &run)));
    assert!(exists(&p.path().join("data/slow/1.tmp")));
    assert!(build.wait().unwrap().success());
    assert_eq!(
        std::fs::read_to_string(p.path().join("data/slow/1")).unwrap(),
        "done\n"
    );
}

/// The folder of a partition no job builds is kept while it holds another partition's data:
/// one the log knows, or a path the graph declares.
#[test]
fn gc_keeps_a_folder_that_holds_other_partitions() {
    let graph = |with_old: bool| {
        format!(
            r#"
[graph]
name = "g"
[[job]]
name = "inner"
outputs = ["old/{{d:date}}/inner"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/$(dirname $(echo $DATABUILD_OUTPUTS | tr -d '[]\"')) && echo i > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
[[dataset]]
name = "notes"
pattern = "old/{{d:date}}/notes"
{}"#,
            if with_old {
                r#"[[job]]
name = "old"
outputs = ["old/{d:date}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"') && echo o > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')/part"]"#
            } else {
                ""
            }
        )
    };
    let p = Project::new(&graph(true));
    p.run(&["build", "old/2020-01-01", "old/2020-01-02"])
        .expect_code(0);
    p.run(&["build", "old/2020-01-01/inner"]).expect_code(0);
    p.file("data/old/2020-01-02/notes", "an external file");
    std::fs::write(p.path().join("databuild.toml"), graph(false)).unwrap();
    let report = p.run(&["--json", "gc", "--older-than", "0s"]);
    report.expect_code(0);
    let report = report.json();
    assert!(report["totals"].get("partition_data").is_none(), "{report}");
    assert_eq!(
        report["kept"]["the folder of a partition no job builds that holds other partitions"], 2,
        "{report}"
    );
    assert!(p.path().join("data/old/2020-01-01/inner").exists());
    assert!(p.path().join("data/old/2020-01-02/notes").exists());
}
