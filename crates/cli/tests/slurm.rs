//! The executor suite, on the local executor and on a real single-node Slurm that the test
//! command starts (`DATABUILD_TEST_SLURM` is its slurm.conf). The Slurm tests are `#[ignore]`d,
//! and `./test.sh` runs them.

use std::time::{Duration, Instant};

use crate::equivalence::{assert_same_events, normalized};
use crate::examples::example;
use crate::util::Project;

/// The test command's Slurm configuration.
pub(crate) fn slurm() -> String {
    crate::util::service_env("DATABUILD_TEST_SLURM", "Slurm")
}

/// Switches a graph file to the Slurm executor.
pub(crate) fn on_slurm(graph: &str, slurm_section: &str) -> String {
    let (head, rest) = graph.split_once("[graph]\n").expect("a [graph] section");
    let (name_line, rest) = rest.split_once('\n').unwrap();
    format!("{head}[graph]\n{name_line}\nexecutor = \"slurm\"\n{rest}\n[graph.slurm]\n{slurm_section}\n")
}

pub(crate) fn build(p: &Project, conf: Option<&str>, args: &[&str]) -> crate::util::Run {
    let mut cmd = p.command();
    if let Some(c) = conf {
        cmd.env("SLURM_CONF", c);
    }
    let out = cmd.args(args).output().unwrap();
    crate::util::Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

#[test]
#[ignore = "needs Slurm (DATABUILD_TEST_SLURM); ./test.sh runs it"]
fn the_examples_build_through_slurm_with_the_same_events_as_locally() {
    let conf = slurm();
    for (name, refs) in [
        ("basic_graph", vec!["sum/pippin_salem", "sum/salem_sadie"]),
        (
            "podcast_reviews",
            vec!["categorized_reviews/category={comedy,news}/date=2020-01-01"],
        ),
    ] {
        let local = example(name);
        let mut args = vec!["--json", "build", "--parallel", "1"];
        args.extend(refs.iter());
        let out = build(&local, None, &args);
        out.expect_code(0);
        let local_id = out.json()["build_request_id"].as_str().unwrap().to_string();

        let cluster = example(name);
        let graph = std::fs::read_to_string(cluster.path().join("databuild.toml")).unwrap();
        std::fs::write(cluster.path().join("databuild.toml"), on_slurm(&graph, "")).unwrap();
        let out = build(&cluster, Some(&conf), &args);
        out.expect_code(0);
        let cluster_id = out.json()["build_request_id"].as_str().unwrap().to_string();
        assert_same_events(
            &normalized(&local, &local_id),
            &normalized(&cluster, &cluster_id),
        );
        // Each run records its Slurm job id.
        let ids = cluster
            .run(&[
                "--json",
                "sql",
                "SELECT count(*) FROM events WHERE data LIKE '%\"executor_id\":\"slurm:%'",
            ])
            .json();
        assert!(
            ids["rows"][0][0].as_u64().unwrap() > 0,
            "{name}: no Slurm ids recorded"
        );
        assert_eq!(
            files(&local.path().join("data")),
            files(&cluster.path().join("data")),
            "{name}: the same outputs"
        );
    }
}

/// Every file under `dir`, with its content.
fn files(dir: &std::path::Path) -> std::collections::BTreeMap<String, String> {
    let mut all = std::collections::BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().display().to_string();
                all.insert(rel, std::fs::read_to_string(&path).unwrap_or_default());
            }
        }
    }
    all
}

const FAILING: &str = r#"
[graph]
name = "x"
[[job]]
name = "exits"
outputs = ["exits/{n:int}"]
command = ["sh", "-c", "echo about to fail; exit 3"]
[[job]]
name = "hangs"
outputs = ["hangs/{n:int}"]
command = ["sleep", "300"]
timeout = "2s"
[[job]]
name = "sleeps"
outputs = ["sleeps/{n:int}"]
command = ["sleep", "300"]
"#;

/// Makes a case two tests: `NAME::local`, which always runs, and `NAME::slurm`, which needs the
/// test command's Slurm and so is ignored unless asked for. The case takes the executor's name
/// and, on Slurm, its configuration.
macro_rules! on_every_executor {
    ($case:ident) => {
        mod $case {
            #[test]
            fn local() {
                super::$case("local", None)
            }

            #[test]
            #[ignore = "needs Slurm (DATABUILD_TEST_SLURM); ./test.sh runs it"]
            fn slurm() {
                super::$case("slurm", Some(super::slurm()))
            }
        }
    };
}

fn project_for(executor: &str, extra: &str) -> Project {
    match executor {
        "local" => Project::new(FAILING),
        _ => Project::new(&on_slurm(FAILING, extra)),
    }
}

fn failures_and_timeouts_are_truthful_on_every_executor(executor: &str, conf: Option<String>) {
    let p = project_for(executor, "");
    let out = build(&p, conf.as_deref(), &["--json", "build", "exits/1"]);
    out.expect_code(1);
    let run = &p.run(&["--json", "jobs", "exits"]).json()["runs"][0];
    assert!(
        run["message"]
            .as_str()
            .unwrap()
            .contains("the job ended with exit status 3"),
        "{executor}: {run}"
    );
    let log = p.run(&["runs", run["job_run_id"].as_str().unwrap()]).stdout;
    assert!(
        log.contains("about to fail"),
        "{executor}: the log was gathered: {log}"
    );

    let started = Instant::now();
    let out = build(&p, conf.as_deref(), &["--json", "build", "hangs/1"]);
    out.expect_code(1);
    assert!(started.elapsed() < Duration::from_secs(60), "{executor}");
    let run = &p.run(&["--json", "jobs", "hangs"]).json()["runs"][0];
    assert!(
        run["message"]
            .as_str()
            .unwrap()
            .contains("timed out after 2 s"),
        "{executor}: {run}"
    );
}
on_every_executor!(failures_and_timeouts_are_truthful_on_every_executor);

fn cancellation_stops_the_run_on_every_executor(executor: &str, conf: Option<String>) {
    let p = project_for(executor, "");
    let mut cmd = p.command();
    if let Some(c) = &conf {
        cmd.env("SLURM_CONF", c);
    }
    let child = cmd
        .args(["--json", "build", "sleeps/1"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(30);
    let id = loop {
        let v = p.run(&[
            "--json",
            "sql",
            "SELECT build_request_id FROM job_runs WHERE status = 'running'",
        ]);
        if let Some(id) = v.json()["rows"][0][0].as_str() {
            break id.to_string();
        }
        assert!(Instant::now() < deadline, "{executor}: never ran");
        std::thread::sleep(Duration::from_millis(100));
    };
    p.run(&["cancel", &id]).expect_code(0);
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(1), "{executor}");
    let b = p.run(&["--json", "builds", &id]).json();
    assert_eq!(b["status"], "cancelled", "{executor}");
    assert_eq!(b["job_runs"][0]["status"], "cancelled", "{executor}");
    if let Some(c) = &conf {
        // Nothing of ours is left in the queue.
        let queue = std::process::Command::new("squeue")
            .args(["-h", "-n", "databuild-sleeps"])
            .env("SLURM_CONF", c)
            .output()
            .unwrap();
        assert!(
            String::from_utf8_lossy(&queue.stdout).trim().is_empty(),
            "{}",
            String::from_utf8_lossy(&queue.stdout)
        );
    }
}
on_every_executor!(cancellation_stops_the_run_on_every_executor);

#[test]
#[ignore = "needs Slurm (DATABUILD_TEST_SLURM); ./test.sh runs it"]
fn a_job_stuck_pending_fails_with_slurms_reason() {
    let conf = slurm();
    let p = project_for(
        "slurm",
        "sbatch_args = [\"--begin=now+3600\"]\npending_timeout = \"2s\"",
    );
    let out = build(&p, Some(&conf), &["--json", "build", "exits/1"]);
    out.expect_code(1);
    let run = &p.run(&["--json", "jobs", "exits"]).json()["runs"][0];
    let message = run["message"].as_str().unwrap();
    assert!(
        message.contains("was still pending after 2 s (Reason=BeginTime)"),
        "{message}"
    );
    // Its Slurm job never left `PENDING`: the run went from `queued` to `failed`, never running.
    assert!(run["started_at"].is_null(), "{run}");
    let id = run["job_run_id"].as_str().unwrap();
    let statuses = p.run(&[
        "--json",
        "sql",
        &format!(
            "SELECT status FROM events WHERE job_run_id = '{id}' AND kind = 'job_run' ORDER BY idx"
        ),
    ]);
    assert_eq!(
        statuses.json()["rows"],
        serde_json::json!([["scheduled"], ["queued"], ["failed"]]),
        "{}",
        statuses.stdout
    );
}
