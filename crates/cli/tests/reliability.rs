//! Crashes and crowds: builds killed with SIGKILL at random points (the CLI, the service, a job)
//! and rerun; many clients on overlapping refs at once. After each, the log must pass
//! `check-log`, and no partition may ever have been built by two processes at once: every job
//! holds an OS lock on its partition (released by the kernel even on SIGKILL) and reports any
//! overlap it sees.

use std::process::Stdio;
use std::time::Duration;

use serde_json::json;

use crate::util::{Project, Service};

/// Each run locks its partition with flock(1); a second run finding the lock taken has caught
/// two builds of one partition at once.
const JOB: &str = r#"set -u
name=$(echo "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr '/=' '__')
mkdir -p locks 9>&-
exec 9>"locks/$name"
if ! flock -n 9; then echo "$DATABUILD_OUTPUTS" >> violations.log; exit 1; fi
# Children must not inherit the lock: only this shell, which writes the outputs, holds it.
sleep "0.0$(( $$ % 9 + 1 ))" 9>&-
for out in $(echo "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr ',' ' '); do
  mkdir -p "$(dirname "$DATABUILD_DATA_DIR/$out")" 9>&-
  echo "$DATABUILD_JOB_RUN_ID" > "$DATABUILD_DATA_DIR/$out"
done
"#;

const GRAPH: &str = r#"
[graph]
name = "crash"
[graph.domains]
c = ["x", "y", "z"]
[[job]]
name = "raw"
outputs = ["raw/{d:date}"]
command = ["sh", "job.sh"]
[[job]]
name = "cat"
outputs = ["cat/c={c}/{d:date}"]
inputs = ["raw/{d}"]
command = ["sh", "job.sh"]
[[job]]
name = "window"
outputs = ["window/c={c}/{d:date}"]
inputs = ["cat/c={c}/{d-2d..d}"]
command = ["sh", "job.sh"]
[[job]]
name = "all"
outputs = ["all/{d:date}"]
inputs = ["window/c={c=*}/{d}"]
command = ["sh", "job.sh"]
"#;

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file("job.sh", JOB);
    p
}

/// A small deterministic generator (64-bit LCG), so a failing seed can be replayed.
struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn kill9(pid: u32) {
    let _ = std::process::Command::new("kill")
        .args(["-KILL", &pid.to_string()])
        .status();
}

/// The pids of this project's running jobs.
fn job_pids(p: &Project) -> Vec<u32> {
    let out = std::process::Command::new("pgrep")
        .args(["-f", "sh job.sh"])
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| l.trim().parse().ok())
        .filter(|pid: &u32| {
            std::fs::read_link(format!("/proc/{pid}/cwd"))
                .is_ok_and(|cwd| cwd == p.path().canonicalize().unwrap())
        })
        .collect()
}

fn assert_consistent(p: &Project, context: &str) {
    let check = p.run(&["check-log"]);
    assert_eq!(check.code, 0, "{context}: {}", check.stdout);
    let violations = std::fs::read_to_string(p.path().join("violations.log")).unwrap_or_default();
    assert!(
        violations.is_empty(),
        "{context}: built twice at once: {violations}"
    );
}

#[test]
fn builds_killed_at_random_points_recover_with_nothing_built_twice() {
    let seed: u64 = std::env::var("DATABUILD_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| std::process::id() as u64);
    let iterations: u64 = std::env::var("DATABUILD_CRASH_ITERATIONS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(9);
    eprintln!("crash suite: seed {seed}, {iterations} iterations (DATABUILD_CRASH_SEED to replay)");
    let mut rng = Rng(seed);
    let p = project();
    for i in 0..iterations {
        let day = 1 + rng.below(20);
        let target = format!("all/2020-02-{day:02}");
        let context = format!("seed {seed}, iteration {i}, {target}");
        let delay = Duration::from_millis(100 + rng.below(700));
        match i % 3 {
            // Kill the CLI driving the build.
            0 => {
                let mut child = p
                    .command()
                    .args(["build", "--parallel", "2", &target])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                std::thread::sleep(delay);
                kill9(child.id());
                child.wait().unwrap();
            }
            // Kill one of its jobs.
            1 => {
                let mut child = p
                    .command()
                    .args(["build", "--parallel", "2", &target])
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                std::thread::sleep(delay);
                let pids = job_pids(&p);
                if !pids.is_empty() {
                    kill9(pids[rng.below(pids.len() as u64) as usize]);
                }
                child.wait().unwrap();
            }
            // Kill the service running it.
            _ => {
                let s = Service::start(&p, &[]);
                let (status, _) = s.post(
                    "/api/v1/builds",
                    &json!({ "partitions": [target], "parallel": 2 }),
                );
                assert_eq!(status, 202, "{context}");
                std::thread::sleep(delay);
                drop(s);
            }
        }
        let rerun = p.run(&["build", &target]);
        assert_eq!(
            rerun.code, 0,
            "{context}: the rerun failed:\n{}\n{}",
            rerun.stdout, rerun.stderr
        );
        assert_consistent(&p, &context);
    }
}

#[test]
fn many_clients_on_overlapping_refs_build_each_partition_once() {
    let p = project();
    let s = Service::start(&p, &[]);
    let targets = [
        "all/2020-03-{01..04}",
        "all/2020-03-{03..06}",
        "window/c=x/2020-03-{01..06}",
    ];
    std::thread::scope(|scope| {
        for i in 0..6 {
            let p = &p;
            let target = targets[i % targets.len()];
            scope.spawn(move || {
                let out = p.run(&["build", "--parallel", "2", target]);
                assert_eq!(out.code, 0, "{}", out.stderr);
            });
        }
        for i in 0..4 {
            let s = &s;
            scope.spawn(move || {
                let refs: Vec<String> = (1..=4)
                    .map(|d| format!("all/2020-03-0{}", d + i % 3))
                    .collect();
                let (status, v) = s.post("/api/v1/builds", &json!({ "partitions": refs }));
                assert_eq!(status, 202);
                let done = s.wait_for_build(v["build_request_id"].as_str().unwrap());
                assert_eq!(done["status"], "completed", "{done}");
            });
        }
    });
    assert_consistent(&p, "10 concurrent clients");
    // One completed run per partition made.
    let v = p
        .run(&[
            "--json",
            "sql",
            "SELECT count(*), count(DISTINCT outputs) FROM job_runs WHERE status = 'completed'",
        ])
        .json();
    assert_eq!(
        v["rows"][0][0], v["rows"][0][1],
        "a partition was built twice"
    );
}

/// A `databuild` killed with SIGKILL takes its running jobs with it, their own subprocesses
/// included: nothing keeps writing outputs behind the back of the next build. Each job starts one
/// subprocess with an empty environment (only its process group finds it) and one in a session
/// of its own (only the watch token in its environment finds it).
#[test]
fn a_killed_build_leaves_no_job_or_job_subprocess_running() {
    let job = "env -i sleep 60 & echo $! > pids/grouped-$DATABUILD_FIELD_N; \
               setsid sleep 60 & echo $! > pids/left-$DATABUILD_FIELD_N; \
               echo $$ > pids/job-$DATABUILD_FIELD_N; wait";
    let p = Project::new(&format!(
        "[graph]\nname = \"tree\"\n[[job]]\nname = \"slow\"\noutputs = [\"slow/{{n:int}}\"]\ncommand = [\"sh\", \"-c\", {job:?}]\n"
    ));
    std::fs::create_dir_all(p.path().join("pids")).unwrap();
    let mut build = p
        .command()
        .args(["build", "--parallel", "2", "slow/{1,2}"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let pids_dir = p.path().join("pids");
    let read_pids = || -> Vec<u32> {
        std::fs::read_dir(&pids_dir)
            .unwrap()
            .filter_map(|e| std::fs::read_to_string(e.unwrap().path()).ok())
            .filter_map(|s| s.trim().parse().ok())
            .collect()
    };
    let pids = crate::util::eventually(Duration::from_secs(20), "the jobs start", || {
        Some(read_pids()).filter(|p| p.len() == 6)
    });
    kill9(build.id());
    let _ = build.wait();
    let alive = |pid: &u32| {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|s| !s.contains(") Z "))
    };
    crate::util::eventually(
        Duration::from_secs(5),
        "the jobs and their subprocesses die with the build",
        || (!pids.iter().any(alive)).then_some(()),
    );
}

/// A build's plan is recorded in one write (the requested refs, then the plan in parts of 1,000
/// runs): a build killed with SIGKILL while it plans or records leaves either none of its plan
/// or all of it, a log `check-log` accepts, and a rerun that builds everything.
#[test]
fn a_build_killed_while_recording_its_plan_reruns_to_completion() {
    const RUNS: usize = 2_500;
    let p = Project::new(
        r#"
[graph]
name = "plan_kill"
[[job]]
name = "n"
outputs = ["n/{i:int}"]
command = ["sh", "-c", "mkdir -p \"$DATABUILD_DATA_DIR/n\" && : > \"$DATABUILD_DATA_DIR/$(echo \"$DATABUILD_OUTPUTS\" | tr -d '[]\"')\""]
"#,
    );
    let refs = format!("n/{{1..{RUNS}}}");
    let mut child = p
        .command()
        .args(["build", "--parallel", "2", &refs])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed as soon as the log shows the build planning, or at the latest a few runs in.
    let db = p.path().join(".databuild/events.db");
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let planning =
            rusqlite::Connection::open_with_flags(&db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
                .and_then(|c| {
                    c.query_row(
                "SELECT count(*) FROM events WHERE kind = 'build_request' AND status = 'planning'",
                [],
                |r| r.get::<_, i64>(0),
            )
                })
                .unwrap_or(0);
        if planning > 0 || std::time::Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    kill9(child.id());
    child.wait().unwrap();
    assert_consistent(&p, "after a SIGKILL while planning");
    let planned = p
        .run(&["--json", "sql", "SELECT count(*) FROM planned_runs"])
        .json();
    let planned = planned["rows"][0][0].as_i64().unwrap();
    assert!(
        planned == 0 || planned == RUNS as i64,
        "the plan is all there or not at all: {planned} of {RUNS} runs"
    );
    let rerun = p.run(&["--json", "build", "--parallel", "2", &refs]);
    rerun.expect_code(0);
    let status = p
        .run(&[
            "--json",
            "sql",
            "SELECT count(*) FROM partitions WHERE status = 'available'",
        ])
        .json();
    assert_eq!(status["rows"][0][0], json!(RUNS), "{status}");
    assert_consistent(&p, "after the rerun");
}
