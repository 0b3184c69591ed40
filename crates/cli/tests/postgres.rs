//! A Postgres event log shared by several processes: migration from SQLite, two services on one
//! log, and one of them killed mid-build. Needs the test command's throwaway Postgres: the tests
//! are `#[ignore]`d, and `./test.sh` runs them.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::examples::example;
use crate::util::{Project, Service};

/// A fresh database on the test command's server.
pub(crate) fn fresh_database() -> String {
    let admin = crate::util::service_env("DATABUILD_TEST_POSTGRES", "PostgreSQL");
    let name = format!("t_{}", databuild_log::event::new_id().replace('-', ""));
    let ok = std::process::Command::new("psql")
        .args([
            admin.as_str(),
            "-q",
            "-c",
            &format!("CREATE DATABASE {name}"),
        ])
        .status()
        .unwrap()
        .success();
    assert!(ok, "cannot create a test database");
    format!("{}/{name}", admin.rsplit_once('/').unwrap().0)
}

#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
fn migrate_log_copies_a_sqlite_log_without_loss() {
    let pg = fresh_database();
    let p = example("basic_graph");
    p.run(&["build", "sum/pippin_salem", "sum/salem_sadie"])
        .expect_code(0);
    p.run(&["taint", "generated_number/sadie"]).expect_code(0);
    let out = p.run(&[
        "--json",
        "migrate-log",
        "--from",
        "sqlite:.databuild/events.db",
        "--to",
        &pg,
    ]);
    out.expect_code(0);
    let copied = out.json()["events"].as_u64().unwrap();
    assert!(copied > 20);
    let on = |log: &str, args: &[&str]| {
        let mut all = vec!["--event-log", log];
        all.extend_from_slice(args);
        let out = p.run(&all);
        out.expect_code(0);
        out.stdout
    };
    let sqlite = "sqlite:.databuild/events.db";
    let strip_idx = |s: String| -> Vec<serde_json::Value> {
        s.lines()
            .map(|l| {
                let mut v: serde_json::Value = serde_json::from_str(l).unwrap();
                v.as_object_mut().unwrap().remove("idx");
                v
            })
            .collect()
    };
    assert_eq!(
        strip_idx(on(sqlite, &["--json", "events"])),
        strip_idx(on(&pg, &["--json", "events"]))
    );
    for args in [
        vec!["status", "sum/pippin_salem", "generated_number/sadie"],
        vec!["--json", "jobs"],
        vec!["partitions"],
        vec![
            "--json",
            "sql",
            "SELECT job, status FROM job_runs ORDER BY job_run_id",
        ],
    ] {
        assert_eq!(on(sqlite, &args), on(&pg, &args), "{args:?}");
    }
    // The target must be empty.
    let again = p.run(&["migrate-log", "--from", sqlite, "--to", &pg]);
    again.expect_code(2);
    assert!(
        again.stderr.contains("already holds events"),
        "{}",
        again.stderr
    );
}

const GRAPH: &str = r#"
[graph]
name = "shared"
[[job]]
name = "slow"
outputs = ["slow/{n:int}"]
command = ["sh", "-c", "sleep ${SLEEP:-0.5}; mkdir -p data/slow; echo $DATABUILD_JOB_RUN_ID > data/slow/$DATABUILD_FIELD_N; echo slow/$DATABUILD_FIELD_N >> built.log"]
[[job]]
name = "top"
outputs = ["top/{n:int}"]
inputs = ["slow/{n}"]
command = ["sh", "-c", "mkdir -p data/top; echo ok > data/top/$DATABUILD_FIELD_N; echo top/$DATABUILD_FIELD_N >> built.log"]
"#;

fn built(p: &Project) -> Vec<String> {
    let mut lines: Vec<String> = std::fs::read_to_string(p.path().join("built.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
fn two_services_on_one_postgres_run_each_job_once() {
    let pg = fresh_database();
    let p = Project::new(GRAPH);
    let env = [("DATABUILD_EVENT_LOG", pg.as_str())];
    let a = Service::start(&p, &env);
    let b = Service::start(&p, &env);
    let request = json!({ "partitions": ["top/1", "top/2", "top/3"] });
    let ids: Vec<(usize, String)> = std::thread::scope(|scope| {
        let handles: Vec<_> = [&a, &b, &a, &b]
            .into_iter()
            .enumerate()
            .map(|(i, s)| {
                let request = request.clone();
                scope.spawn(move || {
                    let (status, v) = s.post("/api/v1/builds", &request);
                    assert_eq!(status, 202, "{v}");
                    (i, v["build_request_id"].as_str().unwrap().to_string())
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for (i, id) in &ids {
        let s = if i % 2 == 0 { &a } else { &b };
        assert_eq!(s.wait_for_build(id)["status"], "completed", "{id}");
    }
    assert_eq!(
        built(&p),
        ["slow/1", "slow/2", "slow/3", "top/1", "top/2", "top/3"]
    );
}

#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
fn killing_one_instance_mid_build_lets_the_other_finish() {
    let pg = fresh_database();
    let p = Project::new(GRAPH);
    let env = [("DATABUILD_EVENT_LOG", pg.as_str()), ("SLEEP", "30")];
    let a = Service::start(&p, &env);
    let b = Service::start(
        &p,
        &[("DATABUILD_EVENT_LOG", pg.as_str()), ("SLEEP", "0.2")],
    );
    let (_, v) = a.post("/api/v1/builds", &json!({ "partitions": ["top/1"] }));
    let first = v["build_request_id"].as_str().unwrap().to_string();
    // Once a's run of slow/1 is running, b gets the same request and waits for a.
    let deadline = Instant::now() + Duration::from_secs(10);
    let running = |s: &Service, id: &str| {
        s.get(&format!("/api/v1/builds/{id}")).1["job_runs"]
            .as_array()
            .is_some_and(|runs| runs.iter().any(|r| r["status"] == "running"))
    };
    while !running(&a, &first) {
        assert!(Instant::now() < deadline, "a never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, v) = b.post("/api/v1/builds", &json!({ "partitions": ["top/1"] }));
    let second = v["build_request_id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(500));
    drop(a); // SIGKILL mid-build
    let done = b.wait_for_build(&second);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(built(&p), ["slow/1", "top/1"]);
    let (_, old) = b.get(&format!("/api/v1/builds/{first}"));
    assert_eq!(old["status"], "failed");
    assert!(
        old["message"].as_str().unwrap().contains("is gone"),
        "{old}"
    );
}

/// On a shared log, a build that cannot renew its lease (here: stopped with SIGSTOP) has its
/// jobs killed by its lease watchdog at half the lease timeout, before another host could take
/// its work over; resumed, it starts nothing more, and a rerun completes.
#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
fn a_stopped_build_loses_its_jobs_before_its_lease_could_be_taken_over() {
    let pg = fresh_database();
    let p = Project::new(
        r#"
[graph]
name = "fenced"
[[job]]
name = "slow"
outputs = ["slow/{n:int}"]
command = ["sh", "-c", "echo $$ > job.pid; i=0; while [ $i -lt $((SLEEP * 5)) ]; do echo line >> ledger; sleep 0.2; i=$((i+1)); done; mkdir -p data/slow; echo ok > data/slow/$DATABUILD_FIELD_N"]
"#,
    );
    let build = p
        .command()
        .args(["build", "slow/1"])
        .env("DATABUILD_EVENT_LOG", &pg)
        .env("DATABUILD_LEASE_TIMEOUT", "4")
        .env("SLEEP", "60")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    let job = loop {
        if let Ok(pid) = std::fs::read_to_string(p.path().join("job.pid")) {
            if p.path().join("ledger").exists() {
                break pid.trim().to_string();
            }
        }
        assert!(Instant::now() < deadline, "the job never started");
        std::thread::sleep(Duration::from_millis(50));
    };
    let signal = |sig: &str| {
        let ok = std::process::Command::new("kill")
            .args([sig, &build.id().to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill {sig}");
    };
    signal("-STOP");
    let stopped = Instant::now();
    // Dead once gone or a zombie (its stopped parent cannot reap it).
    let alive = |pid: &str| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
            !stat
                .rsplit_once(')')
                .unwrap()
                .1
                .trim_start()
                .starts_with('Z')
        })
    };
    while alive(&job) {
        assert!(
            stopped.elapsed() < Duration::from_secs(4),
            "the job of a stopped build still runs after the whole lease timeout"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let lines = std::fs::read_to_string(p.path().join("ledger"))
        .unwrap()
        .len();
    std::thread::sleep(Duration::from_secs(1));
    signal("-CONT");
    let mut build = build;
    let status = build.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(1),
        "its job was killed: the build failed"
    );
    assert_eq!(
        std::fs::read_to_string(p.path().join("ledger"))
            .unwrap()
            .len(),
        lines,
        "nothing ran after the kill"
    );
    let rerun = p
        .command()
        .args(["build", "slow/1"])
        .env("DATABUILD_EVENT_LOG", &pg)
        .env("SLEEP", "0")
        .output()
        .unwrap();
    assert!(rerun.status.success(), "{rerun:?}");
}

/// Two services that see each other as other machines (judged by their leases, not their
/// processes): one is killed with its request's runs running and claimed ahead; the other, given
/// the same request, takes them over once the lease lapses and finishes it, each partition built
/// once. The dead one's claimed runs end `failed`, those only scheduled `cancelled`.
#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES) and root; ./test.sh runs it"]
fn a_survivor_on_another_host_takes_over_and_finishes_the_work() {
    let pg = fresh_database();
    let p = Project::new(GRAPH);
    let common = [
        ("DATABUILD_EVENT_LOG", pg.as_str()),
        ("DATABUILD_LEASE_TIMEOUT", "3"),
    ];
    let with = |sleep: &'static str| {
        let mut env = common.to_vec();
        env.push(("SLEEP", sleep));
        env
    };
    let a = Service::start_on_host(&p, "host-a", &with("30"));
    let b = Service::start_on_host(&p, "host-b", &with("0.2"));
    let request = json!({ "partitions": ["top/1", "top/2", "top/3"] });
    let (_, v) = a.post("/api/v1/builds", &request);
    let first = v["build_request_id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !a.get(&format!("/api/v1/builds/{first}")).1["job_runs"]
        .as_array()
        .is_some_and(|runs| runs.iter().any(|r| r["status"] == "running"))
    {
        assert!(Instant::now() < deadline, "a never started");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (_, v) = b.post("/api/v1/builds", &request);
    let second = v["build_request_id"].as_str().unwrap().to_string();
    std::thread::sleep(Duration::from_millis(500));
    drop(a); // SIGKILL
    let done = b.wait_for_build(&second);
    assert_eq!(done["status"], "completed", "{done}");
    assert_eq!(
        built(&p),
        ["slow/1", "slow/2", "slow/3", "top/1", "top/2", "top/3"]
    );
    let (_, old) = b.get(&format!("/api/v1/builds/{first}"));
    assert_eq!(old["status"], "failed", "{old}");
    assert!(
        old["message"].as_str().unwrap().contains("is gone"),
        "{old}"
    );
    let runs = old["job_runs"].as_array().unwrap();
    let count = |s: &str| runs.iter().filter(|r| r["status"] == s).count();
    assert!(count("failed") >= 1, "{old}");
    assert_eq!(count("failed") + count("cancelled"), runs.len(), "{old}");
    // The runs it planned but never claimed have no run of their own: its plan names them,
    // not run (the build has ended).
    let planned = p
        .run(&[
            "--event-log",
            &pg,
            "--json",
            "sql",
            &format!(
                "SELECT status, count(*) FROM planned_runs WHERE build_request_id = '{first}' \
                 GROUP BY status ORDER BY status"
            ),
        ])
        .json();
    let planned: Vec<(String, i64)> = planned["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap().to_string(), r[1].as_i64().unwrap()))
        .collect();
    let total: i64 = planned.iter().map(|(_, n)| n).sum();
    assert_eq!(total, 6, "{planned:?}");
    assert!(
        planned.iter().any(|(s, n)| s == "not_run" && *n >= 1),
        "the fan-in was never claimed: {planned:?}"
    );
    let check = p.run(&["--event-log", &pg, "check-log"]);
    check.expect_code(0);
}
