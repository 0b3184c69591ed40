//! OpenLineage out (#61): a receiver in the test gets a START and a COMPLETE (or FAIL) for every
//! run, from a CLI build and from the service, each valid against the published spec (the
//! vendored schemas in `fixtures/openlineage/`, checked by `validate.py`); a receiver that is
//! down costs a build nothing beyond the flush bound, and what it missed is kept and sent again.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::util::{eventually, Project, Service};

const GRAPH: &str = r#"
[graph]
name = "shop"

[[job]]
name = "orders"
outputs = ["orders/date={date:date}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/orders && date > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]

[[job]]
name = "clean"
outputs = ["clean/date={date:date}"]
inputs = ["orders/date={date}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/clean && echo ok > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]

[[job]]
name = "broken"
outputs = ["broken/date={date:date}"]
inputs = ["orders/date={date}"]
command = ["sh", "-c", "echo 'no such table: returns' >&2; exit 3"]
"#;

/// One request the receiver got.
#[derive(Debug, Clone)]
pub(crate) struct Received {
    path: String,
    authorization: Option<String>,
    body: Value,
}

/// An OpenLineage receiver: answers 200 to every POST and keeps what it got.
pub(crate) struct Receiver {
    pub(crate) url: String,
    got: Arc<Mutex<Vec<Received>>>,
}

impl Receiver {
    pub(crate) fn start() -> Receiver {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let got = Arc::new(Mutex::new(Vec::new()));
        let keep = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let keep = keep.clone();
                std::thread::spawn(move || serve(stream, &keep));
            }
        });
        Receiver { url, got }
    }

    pub(crate) fn events(&self) -> Vec<Value> {
        self.got
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.body.clone())
            .collect()
    }

    /// Waits until `n` events came.
    fn wait_for(&self, n: usize) -> Vec<Value> {
        eventually(
            Duration::from_secs(20),
            "the receiver got the events",
            || {
                let events = self.events();
                (events.len() >= n).then_some(events)
            },
        )
    }
}

/// Requests of one connection (clients keep it alive), each answered 200.
fn serve(stream: TcpStream, got: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return;
        }
        let path = line.split_whitespace().nth(1).unwrap_or("").to_string();
        let (mut length, mut authorization) = (0, None);
        loop {
            let mut header = String::new();
            reader.read_line(&mut header).unwrap();
            let header = header.trim_end();
            if header.is_empty() {
                break;
            }
            let (name, value) = header.split_once(':').unwrap();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap(),
                "authorization" => authorization = Some(value.trim().to_string()),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        got.lock().unwrap().push(Received {
            path,
            authorization,
            body: serde_json::from_slice(&body).unwrap(),
        });
        let answer = "HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n";
        if stream.write_all(answer.as_bytes()).is_err() {
            return;
        }
    }
}

/// A python3 with `jsonschema`: this machine's, or a venv made once for the tests.
fn python_with_jsonschema() -> PathBuf {
    let has = |python: &Path| {
        Command::new(python)
            .args(["-c", "import jsonschema, referencing"])
            .status()
            .is_ok_and(|s| s.success())
    };
    let system = PathBuf::from("python3");
    if has(&system) {
        return system;
    }
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("openlineage-venv");
    let python = venv.join("bin/python");
    if !has(&python) {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .unwrap();
        assert!(made.success(), "cannot make a venv at {}", venv.display());
        let pip = Command::new(&python)
            .args(["-m", "pip", "install", "-q", "jsonschema>=4.18"])
            .status()
            .unwrap();
        assert!(
            pip.success(),
            "pip cannot install jsonschema (PyPI unreachable?)"
        );
    }
    python
}

/// Checks every event against the OpenLineage spec's schemas, failing with what is wrong.
pub(crate) fn assert_valid(events: &[Value]) {
    let script =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/openlineage/validate.py");
    let mut child = Command::new(python_with_jsonschema())
        .arg(script)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let input = serde_json::to_vec(events).unwrap();
    child.stdin.take().unwrap().write_all(&input).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "events not valid OpenLineage:\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Each run's event types in order, by job and DataBuild run id.
fn lives(events: &[Value]) -> Vec<(String, Vec<String>)> {
    let mut by_run: Vec<(String, String, Vec<String>)> = Vec::new();
    for e in events {
        let run = e["run"]["runId"].as_str().unwrap().to_string();
        let kind = e["eventType"].as_str().unwrap().to_string();
        match by_run.iter_mut().find(|(r, _, _)| *r == run) {
            Some((_, _, kinds)) => kinds.push(kind),
            None => by_run.push((run, e["job"]["name"].as_str().unwrap().into(), vec![kind])),
        }
    }
    let mut lives: Vec<_> = by_run.into_iter().map(|(_, job, k)| (job, k)).collect();
    lives.sort();
    lives
}

fn strings(v: &[&str]) -> Vec<String> {
    v.iter().map(|s| s.to_string()).collect()
}

#[test]
fn a_build_sends_a_start_and_a_complete_or_fail_for_every_run_each_valid_openlineage() {
    let receiver = Receiver::start();
    let p = Project::new(GRAPH);
    let out = p
        .command()
        .args([
            "build",
            "--keep-going",
            "clean/date={2024-01-01..2024-01-02}",
            "broken/date=2024-01-01",
        ])
        .env("OPENLINEAGE_URL", &receiver.url)
        .env("OPENLINEAGE_API_KEY", "k-123")
        .env("OPENLINEAGE_NAMESPACE", "retail")
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The build waited for its events: all are there when it exits.
    let got = receiver.got.lock().unwrap().clone();
    let events: Vec<Value> = got.iter().map(|r| r.body.clone()).collect();
    assert_valid(&events);
    let (start, done) = (strings(&["START", "COMPLETE"]), strings(&["START", "FAIL"]));
    assert_eq!(
        lives(&events),
        [
            ("broken".to_string(), done),
            ("clean".to_string(), start.clone()),
            ("clean".to_string(), start.clone()),
            ("orders".to_string(), start.clone()),
            ("orders".to_string(), start),
        ]
    );
    for r in &got {
        assert_eq!(r.path, "/api/v1/lineage");
        assert_eq!(r.authorization.as_deref(), Some("Bearer k-123"));
        assert_eq!(r.body["job"]["namespace"], "retail");
    }

    // A COMPLETE names what the run read and wrote, at the versions the log holds.
    let complete = events
        .iter()
        .find(|e| e["eventType"] == "COMPLETE" && e["job"]["name"] == "clean")
        .unwrap();
    let output = &complete["outputs"][0];
    assert_eq!(output["name"], "clean");
    let written = &output["facets"]["databuild_partitions"]["partitions"][0];
    let r = written["ref"].as_str().unwrap();
    let sql =
        format!("SELECT data_version, job_run_id FROM partitions WHERE partition_ref = '{r}'");
    let row = &p.run(&["--json", "sql", &sql]).json()["rows"][0];
    assert_eq!(written["data_version"], row[0]);
    let run = &complete["run"]["facets"]["databuild_run"];
    assert_eq!(run["job_run_id"], row[1]);
    let input = &complete["inputs"][0];
    assert_eq!(input["name"], "orders");
    assert!(input["facets"]["databuild_partitions"]["partitions"][0]["data_version"].is_string());
    assert_eq!(run["exit_code"], 0);
    assert!(run["build_request_id"].is_string());

    let fail = events.iter().find(|e| e["eventType"] == "FAIL").unwrap();
    assert!(
        fail["run"]["facets"]["errorMessage"]["message"]
            .as_str()
            .unwrap()
            .contains("3"),
        "{fail}"
    );
}

#[test]
fn a_receiver_that_is_down_costs_a_build_nothing_and_what_it_missed_is_sent_by_the_next() {
    // A port nothing listens on: every post is refused.
    let down = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    let p = Project::new(GRAPH);
    let timed = |r: &str, env: &[(&str, &str)]| {
        let started = Instant::now();
        let out = p
            .command()
            .args(["build", r])
            .envs(env.iter().copied())
            .output()
            .unwrap();
        (out, started.elapsed())
    };
    let (_, alone) = timed("clean/date=2023-12-31", &[]);
    let (out, took) = timed("clean/date=2024-01-01", &[("OPENLINEAGE_URL", &down)]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    // At most the flush bound (5 s) more than the same build without lineage.
    assert!(
        took < alone + Duration::from_secs(5),
        "{took:?}, {alone:?} without lineage"
    );
    assert!(stderr.contains("4 run event(s) not delivered"), "{stderr}");
    let kept = p.path().join(".databuild/openlineage/undelivered.jsonl");
    let lines: Vec<Value> = std::fs::read_to_string(&kept)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert!(
        lines[0]["error"]
            .as_str()
            .unwrap()
            .contains("does not answer"),
        "{}",
        lines[0]
    );
    assert_eq!(lines[0]["event"]["eventType"], "START");

    // The next build, with the receiver up, sends what was kept, then its own.
    let receiver = Receiver::start();
    p.command()
        .args(["build", "clean/date=2024-01-02"])
        .env("OPENLINEAGE_URL", &receiver.url)
        .output()
        .unwrap();
    let events = receiver.events();
    assert_eq!(events.len(), 8);
    assert_eq!(
        events[..4],
        lines.iter().map(|l| l["event"].clone()).collect::<Vec<_>>()[..]
    );
    assert!(!kept.exists(), "what was sent is no longer kept");
}

#[test]
fn the_service_sends_its_builds_runs_as_the_cli_does_with_the_graph_s_settings() {
    let receiver = Receiver::start();
    let graph = format!(
        "{GRAPH}\n[openlineage]\nurl = \"{}\"\nnamespace = \"from-the-graph\"\napi_key_env = \"SHOP_LINEAGE_KEY\"\n",
        receiver.url
    );
    let p = Project::new(&graph);
    let service = Service::start(&p, &[("SHOP_LINEAGE_KEY", "s-456")]);
    let (code, accepted) = service.post(
        "/api/v1/builds",
        &serde_json::json!({"partitions": ["clean/date=2024-01-01"]}),
    );
    assert_eq!(code, 202, "{accepted}");
    service.wait_for_build(accepted["build_request_id"].as_str().unwrap());
    let events = receiver.wait_for(4);
    assert_valid(&events);
    let start = strings(&["START", "COMPLETE"]);
    assert_eq!(
        lives(&events),
        [
            ("clean".to_string(), start.clone()),
            ("orders".to_string(), start)
        ]
    );
    let got = receiver.got.lock().unwrap().clone();
    assert!(got
        .iter()
        .all(|r| r.authorization.as_deref() == Some("Bearer s-456")));
    assert!(got
        .iter()
        .all(|r| r.body["job"]["namespace"] == "from-the-graph"));
}

#[test]
fn a_url_that_is_not_http_is_refused_and_openlineage_disabled_sends_nothing() {
    let p = Project::new(GRAPH);
    let out = p
        .command()
        .args(["build", "orders/date=2024-01-01"])
        .env("OPENLINEAGE_URL", "marquez:5000")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("OPENLINEAGE_URL=marquez:5000 is not an http:// or https:// URL"),
        "{stderr}"
    );

    let receiver = Receiver::start();
    let out = p
        .command()
        .args(["build", "orders/date=2024-01-01"])
        .env("OPENLINEAGE_URL", &receiver.url)
        .env("OPENLINEAGE_DISABLED", "true")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0));
    assert!(receiver.events().is_empty());
}

#[test]
fn a_cancelled_run_is_an_abort() {
    let receiver = Receiver::start();
    let p = Project::new(&format!(
        "{GRAPH}\n[[job]]\nname = \"slow\"\noutputs = [\"slow/date={{date:date}}\"]\ncommand = [\"sleep\", \"30\"]\n"
    ));
    let mut build = p
        .command()
        .args(["build", "slow/date=2024-01-01"])
        .env("OPENLINEAGE_URL", &receiver.url)
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    receiver.wait_for(1);
    let interrupted = Command::new("kill")
        .args(["-INT", &build.id().to_string()])
        .status()
        .unwrap();
    assert!(interrupted.success());
    build.wait().unwrap();
    let events = receiver.events();
    assert_valid(&events);
    assert_eq!(
        lives(&events),
        [("slow".to_string(), strings(&["START", "ABORT"]))]
    );
}
