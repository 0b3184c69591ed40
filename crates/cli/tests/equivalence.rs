//! The same builds through the CLI and through `databuild serve`, each on its own fresh event log
//! and data dir, give the same events once ids and times are set aside.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::{json, Value};

use crate::examples::example;
use crate::util::{Project, Service};

/// Events of one build, normalized: times, indexes, event ids, process details and temp paths
/// dropped, and ids replaced by their order of first appearance (`run#1`, `build#1`).
pub fn normalized(p: &Project, build: &str) -> Vec<String> {
    let out = p.run(&["--json", "events", "--build", build]);
    out.expect_code(0);
    let dir = p.path().canonicalize().unwrap().display().to_string();
    let mut names: HashMap<String, String> = HashMap::new();
    let mut name = |kind: &str, id: &str| -> String {
        let n = names.len() + 1;
        names
            .entry(id.to_string())
            .or_insert_with(|| format!("{kind}#{n}"))
            .clone()
    };
    out.stdout
        .lines()
        .map(|line| {
            let mut e: Value = serde_json::from_str(line).unwrap();
            let obj = e.as_object_mut().unwrap();
            for key in ["idx", "event_id", "timestamp"] {
                obj.remove(key);
            }
            for (key, kind) in [
                ("build_request_id", "build"),
                ("job_run_id", "run"),
                ("delegated_to", "build"),
            ] {
                if let Some(id) = obj.get(key).and_then(Value::as_str).map(str::to_string) {
                    obj.insert(key.into(), json!(name(kind, &id)));
                }
            }
            if let Some(data) = obj.get_mut("data").and_then(Value::as_object_mut) {
                for key in [
                    "owner",
                    "pid",
                    "host",
                    "log_path",
                    "executor_id",
                    "started_at",
                ] {
                    data.remove(key);
                }
                // What a run cost is measured, never the same twice: that it was recorded is.
                if let Some(r) = data.get_mut("resources") {
                    *r = json!("measured");
                }
                // Fields in name order: executors fill a run's end in different orders.
                let sorted: std::collections::BTreeMap<String, Value> =
                    std::mem::take(data).into_iter().collect();
                data.extend(sorted);
                // The runs that built what a run read (lineage), by the same names.
                if let Some(runs) = data.get_mut("input_runs").and_then(Value::as_object_mut) {
                    for id in runs.values_mut() {
                        if let Some(named) = id.as_str().map(|id| name("run", id)) {
                            *id = json!(named);
                        }
                    }
                }
                // The runs a skipped run relies on and a claim was made against (of an
                // earlier build, when a partition is rebuilt), by the same names.
                for key in ["relies_on", "claim_after"] {
                    if let Some(id) = (data.get(key).and_then(Value::as_str))
                        .filter(|id| !id.is_empty())
                        .map(str::to_string)
                    {
                        data.insert(key.into(), json!(name("run", &id)));
                    }
                }
            }
            serde_json::to_string(&e).unwrap().replace(&dir, "<dir>")
        })
        .collect()
}

/// Fails with the first difference and its surroundings, side by side.
pub fn assert_same_events(cli: &[String], service: &[String]) {
    if cli == service {
        return;
    }
    let at = cli
        .iter()
        .zip(service)
        .position(|(a, b)| a != b)
        .unwrap_or(cli.len().min(service.len()));
    let show = |events: &[String]| {
        events[at.saturating_sub(2)..(at + 3).min(events.len())]
            .iter()
            .map(|e| format!("    {e}"))
            .collect::<Vec<_>>()
            .join("\n")
    };
    panic!(
        "the CLI and the service logged different events ({} vs {}), first at #{at}:\n  cli:\n{}\n  service:\n{}",
        cli.len(),
        service.len(),
        show(cli),
        show(service)
    );
}

fn cli_build(p: &Project, refs: &[&str]) -> (i32, String) {
    let mut args = vec!["--json", "build", "--parallel", "1"];
    args.extend_from_slice(refs);
    let out = p.run(&args);
    (
        out.code,
        out.json()["build_request_id"].as_str().unwrap().to_string(),
    )
}

fn service_build(s: &Service, refs: &[&str]) -> (i32, String) {
    let (status, v) = s.post(
        "/api/v1/builds",
        &json!({ "partitions": refs, "parallel": 1 }),
    );
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap().to_string();
    let done = s.wait_for_build(&id);
    (if done["status"] == "completed" { 0 } else { 1 }, id)
}

/// Checks the lifecycle every successful build must show.
fn check_lifecycle(events: &[String], built: usize) {
    let parsed: Vec<Value> = events
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let statuses = |kind: &str| -> Vec<String> {
        parsed
            .iter()
            .filter(|e| e["kind"] == kind)
            .map(|e| e["status"].as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(
        statuses("build_request"),
        [
            "received",
            "planning",
            // The plan, recorded in one part (at most 1,000 runs).
            "planning",
            "analysis_completed",
            "executing",
            "completed"
        ]
    );
    let completed_runs = statuses("job_run")
        .iter()
        .filter(|s| *s == "completed")
        .count();
    assert_eq!(completed_runs, built, "one job run per built partition");
    let mut per_partition: HashMap<String, Vec<String>> = HashMap::new();
    for e in parsed.iter().filter(|e| e["kind"] == "partition") {
        per_partition
            .entry(e["partition_ref"].as_str().unwrap().to_string())
            .or_default()
            .push(e["status"].as_str().unwrap().to_string());
    }
    for (r, path) in per_partition {
        let tail: Vec<&str> = path
            .iter()
            .map(String::as_str)
            .skip_while(|s| *s == "requested")
            .collect();
        assert!(
            tail == ["scheduled", "building", "available"]
                || tail.is_empty()
                || tail == ["available"],
            "{r}: {path:?}"
        );
    }
}

/// Builds `refs` twice in a fresh copy of an example, once per way, and compares.
fn same_both_ways(name: &str, refs: &[&str], built: usize) {
    let cli_project = example(name);
    let (code, cli_id) = cli_build(&cli_project, refs);
    assert_eq!(code, 0);
    let served_project = example(name);
    let s = Service::start(&served_project, &[]);
    let (code, served_id) = service_build(&s, refs);
    assert_eq!(code, 0);
    let (cli, served) = (
        normalized(&cli_project, &cli_id),
        normalized(&served_project, &served_id),
    );
    check_lifecycle(&cli, built);
    assert_same_events(&cli, &served);

    // A rebuild skips everything, the same way.
    let (_, cli_again) = cli_build(&cli_project, refs);
    let (_, served_again) = service_build(&s, refs);
    let (cli, served) = (
        normalized(&cli_project, &cli_again),
        normalized(&served_project, &served_again),
    );
    assert!(
        cli.iter().all(|e| !e.contains("\"status\":\"running\"")),
        "nothing ran again"
    );
    assert_same_events(&cli, &served);
}

#[test]
fn basic_graph_a_leaf_and_several_sums() {
    same_both_ways("basic_graph", &["generated_number/pippin"], 1);
    same_both_ways("basic_graph", &["sum/pippin_salem", "sum/salem_sadie"], 5);
}

#[test]
fn podcast_reviews_a_leaf_several_and_a_deep_week() {
    same_both_ways("podcast_reviews", &["raw_reviews/date=2020-01-01"], 1);
    same_both_ways(
        "podcast_reviews",
        &[
            "categorized_reviews/category=comedy/date=2020-01-01",
            "categorized_reviews/category=news/date=2020-01-01",
        ],
        4,
    );
    let week: Vec<String> = (1..=7)
        .map(|d| format!("daily_summaries/category=comedy/date=2020-01-0{d}"))
        .collect();
    let week: Vec<&str> = week.iter().map(String::as_str).collect();
    same_both_ways("podcast_reviews", &week, 60);
}

const SLOW: &str = r#"
[graph]
name = "slow"
[[job]]
name = "slow"
outputs = ["slow/{n:int}"]
command = ["sh", "-c", "sleep 1; mkdir -p data/slow; echo ok > data/slow/$DATABUILD_FIELD_N"]
[[job]]
name = "broken"
outputs = ["broken/{n:int}"]
command = ["sh", "-c", "echo 'no disk left' >&2; exit 4"]
[[job]]
name = "after"
outputs = ["after/{n:int}"]
inputs = ["broken/{n}"]
command = ["true"]
"#;

#[test]
fn a_failing_job_fails_the_same_way() {
    let cli_project = Project::new(SLOW);
    let (code, cli_id) = cli_build(&cli_project, &["after/1"]);
    assert_eq!(code, 1);
    let served_project = Project::new(SLOW);
    let s = Service::start(&served_project, &[]);
    let (code, served_id) = service_build(&s, &["after/1"]);
    assert_eq!(code, 1);
    let cli = normalized(&cli_project, &cli_id);
    assert!(
        cli.iter()
            .any(|e| e.contains("the job ended with exit status 4")),
        "{cli:#?}"
    );
    assert_same_events(&cli, &normalized(&served_project, &served_id));
}

/// Starts a build of `slow/1` the given way, and a second one as soon as the first runs.
fn concurrent_pair(project: &Project, service: Option<&Service>) -> (String, String) {
    let first = match service {
        Some(s) => {
            let (_, v) = s.post(
                "/api/v1/builds",
                &json!({ "partitions": ["slow/1"], "parallel": 1 }),
            );
            (None, v["build_request_id"].as_str().unwrap().to_string())
        }
        None => {
            let child = project
                .command()
                .args(["--json", "build", "--parallel", "1", "slow/1"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            (Some(child), String::new())
        }
    };
    // Wait until the first build's run is running.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let v = project.run(&[
            "--json",
            "sql",
            "SELECT build_request_id FROM job_runs WHERE status = 'running'",
        ]);
        if let Some(id) = v.json()["rows"][0][0].as_str() {
            let first_id = id.to_string();
            let second = match service {
                Some(s) => service_build(s, &["slow/1"]).1,
                None => cli_build(project, &["slow/1"]).1,
            };
            if let (Some(child), _) = first {
                let out = child.wait_with_output().unwrap();
                assert!(out.status.success());
            } else {
                service.unwrap().wait_for_build(&first_id);
            }
            return (first_id, second);
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the first build never ran"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_second_request_delegates_to_a_running_one_the_same_way() {
    let cli_project = Project::new(SLOW);
    let (cli_first, cli_second) = concurrent_pair(&cli_project, None);
    let served_project = Project::new(SLOW);
    let s = Service::start(&served_project, &[]);
    let (served_first, served_second) = concurrent_pair(&served_project, Some(&s));
    let cli = normalized(&cli_project, &cli_second);
    assert!(
        cli.iter().any(|e| e.contains("\"kind\":\"delegation\"")),
        "{cli:#?}"
    );
    assert!(
        cli.iter().all(|e| !e.contains("\"status\":\"running\"")),
        "the second build ran nothing"
    );
    assert_same_events(&cli, &normalized(&served_project, &served_second));
    assert_same_events(
        &normalized(&cli_project, &cli_first),
        &normalized(&served_project, &served_first),
    );
    let ran = cli_project
        .run(&[
            "--json",
            "sql",
            "SELECT count(*) FROM job_runs WHERE status = 'completed'",
        ])
        .json();
    assert_eq!(ran["rows"][0][0], 1, "slow/1 was built once");
}
