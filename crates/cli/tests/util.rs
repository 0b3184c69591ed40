//! A temp project folder and a way to run `databuild` in it.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

pub struct Project {
    dir: tempfile::TempDir,
}

pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout))
    }

    /// Asserts the exit code, showing both streams when it is not what was expected.
    #[track_caller]
    pub fn expect_code(&self, code: i32) -> &Self {
        assert_eq!(
            self.code, code,
            "unexpected exit code\nstdout:\n{}\nstderr:\n{}",
            self.stdout, self.stderr
        );
        self
    }
}

impl Project {
    /// A project whose `databuild.toml` holds `graph`.
    pub fn new(graph: &str) -> Project {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("databuild.toml"), graph).expect("write graph");
        Project { dir }
    }

    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Writes a file relative to the project, creating folders.
    pub fn file(&self, rel: &str, contents: &str) -> PathBuf {
        let path = self.dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, contents).unwrap();
        path
    }

    /// Makes a partition present under the data dir.
    pub fn partition(&self, r: &str) {
        self.file(&format!("data/{r}"), "");
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_databuild"));
        cmd.current_dir(self.path())
            .env_remove("DATABUILD_GRAPH")
            .env_remove("DATABUILD_EVENT_LOG");
        cmd
    }

    pub fn run(&self, args: &[&str]) -> Run {
        let out: Output = self.command().args(args).output().expect("run databuild");
        Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// The run that last built (or failed to build) partition `r`, as the log's row says.
pub fn current_run(project: &Project, r: &str) -> String {
    let out = project.run(&[
        "--json",
        "sql",
        &format!("SELECT job_run_id FROM partitions WHERE partition_ref = '{r}'"),
    ]);
    out.json()["rows"][0][0]
        .as_str()
        .unwrap_or_else(|| panic!("no run holds {r}: {}", out.stdout))
        .to_string()
}

/// Writes the events of one finished single-run build into the project's default event log, as
/// a build would (used to test the read commands before and apart from `build`); a successful
/// one leaves its partition's data too, as the job would have.
pub fn seed_build(project: &Project, br: &str, run: &str, job: &str, r: &str, ok: bool) {
    use databuild_log::{Event, EventStore, SqliteStore, Status};
    if ok {
        project.partition(r);
    }
    let dir = project.path().join(".databuild");
    std::fs::create_dir_all(&dir).unwrap();
    let store = SqliteStore::open(&dir.join("events.db")).unwrap();
    let (end, run_end) = if ok {
        (Status::Available, Status::Completed)
    } else {
        (Status::Failed, Status::Failed)
    };
    store
        .append(vec![
            Event::build_request(br, Status::Received).with_data(|d| d.requested = vec![r.into()]),
            Event::build_request(br, Status::Planning),
            Event::partition(Some(br), r, Status::Requested),
            Event::build_request(br, Status::AnalysisCompleted),
            Event::job_run(br, run, job, Status::Scheduled).with_data(|d| {
                d.outputs = vec![r.into()];
                d.inputs = vec!["raw/2020-01-01".into()];
                d.job_version = Some("0".into());
            }),
            Event::partition(Some(br), r, Status::Scheduled).with_run(run),
            Event::build_request(br, Status::Executing),
            Event::job_run(br, run, job, Status::Running).with_data(|d| {
                let raw = databuild_exec::data::versions::external_version(
                    &project.path().join("data"),
                    "raw/2020-01-01",
                );
                d.input_versions = raw
                    .map(|v| ("raw/2020-01-01".to_string(), v))
                    .into_iter()
                    .collect();
            }),
            Event::partition(Some(br), r, Status::Building).with_run(run),
            Event::job_run(br, run, job, run_end)
                .with_data(|d| d.exit_code = Some(if ok { 0 } else { 3 })),
            {
                let e = Event::partition(Some(br), r, end).with_run(run);
                let mut e = if ok {
                    e
                } else {
                    e.with_message("exit status 3")
                };
                e.job = Some(job.to_string());
                e
            },
            Event::build_request(
                br,
                if ok {
                    Status::Completed
                } else {
                    Status::Failed
                },
            ),
        ])
        .unwrap();
}

/// A `databuild serve` of a project, on a free port; stopped with SIGTERM when dropped.
pub struct Service {
    pub child: std::process::Child,
    pub url: String,
}

impl Service {
    pub fn start(project: &Project, env: &[(&str, &str)]) -> Service {
        Service::start_with_args(project, &["--bind", "127.0.0.1:0"], env)
    }

    /// `databuild serve ARGS`, with `env`.
    pub fn start_with_args(project: &Project, args: &[&str], env: &[(&str, &str)]) -> Service {
        Service::spawn(project.command(), args, env)
    }

    /// A service that sees itself on another machine: in a UTS namespace of its own named `host`
    /// (its owner string then names that host, so others judge it by its lease). Needs root: a
    /// test that calls this is `#[ignore]`d, and fails without it.
    pub fn start_on_host(project: &Project, host: &str, env: &[(&str, &str)]) -> Service {
        use std::os::unix::fs::MetadataExt;
        assert!(
            std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0),
            "needs root for a UTS namespace for `{host}` (./test.sh runs as root)"
        );
        let inner = project.command();
        let mut cmd = std::process::Command::new("unshare");
        cmd.args([
            "--uts",
            "sh",
            "-c",
            r#"hostname "$1" && shift && exec "$@""#,
            "sh",
            host,
        ])
        .arg(inner.get_program())
        .args(inner.get_args());
        if let Some(dir) = inner.get_current_dir() {
            cmd.current_dir(dir);
        }
        for (k, v) in inner.get_envs() {
            match v {
                Some(v) => cmd.env(k, v),
                None => cmd.env_remove(k),
            };
        }
        Service::spawn(cmd, &["--bind", "127.0.0.1:0"], env)
    }

    fn spawn(mut cmd: std::process::Command, args: &[&str], env: &[(&str, &str)]) -> Service {
        use std::io::BufRead;
        cmd.arg("serve")
            .args(args)
            .env_remove("DATABUILD_TOKEN")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped());
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.spawn().expect("start databuild serve");
        let stderr = child.stderr.take().unwrap();
        let mut lines = std::io::BufReader::new(stderr).lines();
        let url = loop {
            let line = lines.next().expect("serve prints its address").unwrap();
            if let Some(addr) = line.strip_prefix("databuild service listening on ") {
                break addr.to_string();
            }
        };
        // Keep draining stderr so the service never blocks on it.
        std::thread::spawn(move || for _ in lines {});
        Service { child, url }
    }

    /// SIGTERM, then waits; returns how long the service took to exit.
    pub fn stop(&mut self) -> std::time::Duration {
        let start = std::time::Instant::now();
        let _ = std::process::Command::new("kill")
            .arg("-TERM")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
        start.elapsed()
    }

    pub fn agent() -> ureq::Agent {
        ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into()
    }

    /// `(status, body)` of a request.
    pub fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<&str>,
        token: Option<&str>,
    ) -> (u16, String) {
        let agent = Service::agent();
        let url = format!("{}{path}", self.url);
        let auth = token.map(|t| format!("Bearer {t}"));
        let response = match (method, body) {
            ("GET", _) => {
                let mut r = agent.get(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            ("DELETE", _) => {
                let mut r = agent.delete(&url);
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.call()
            }
            (_, body) => {
                let mut r = agent.post(&url).header("Content-Type", "application/json");
                if let Some(a) = &auth {
                    r = r.header("Authorization", a);
                }
                r.send(body.unwrap_or(""))
            }
        };
        let mut response = response.expect("the service answers");
        let status = response.status().as_u16();
        let text = response.body_mut().read_to_string().unwrap_or_default();
        (status, text)
    }

    pub fn get(&self, path: &str) -> (u16, serde_json::Value) {
        let (status, body) = self.call("GET", path, None, None);
        (
            status,
            serde_json::from_str(&body).unwrap_or(serde_json::Value::String(body)),
        )
    }

    pub fn post(&self, path: &str, body: &serde_json::Value) -> (u16, serde_json::Value) {
        let (status, text) = self.call("POST", path, Some(&body.to_string()), None);
        (
            status,
            serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text)),
        )
    }

    /// Polls a build until it ends; returns its details.
    pub fn wait_for_build(&self, id: &str) -> serde_json::Value {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let (status, v) = self.get(&format!("/api/v1/builds/{id}"));
            assert_eq!(status, 200, "{v}");
            if matches!(
                v["status"].as_str(),
                Some("completed" | "failed" | "cancelled")
            ) {
                return v;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "build {id} never ended"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }
}

impl Drop for Service {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of `var`, which the test command (`./test.sh`) sets once it has started `service`.
/// The tests that need a service are `#[ignore]`d, so that a plain `cargo test` lists them as
/// not run; asked for (`--run-ignored`), one fails without its service rather than passing.
pub fn service_env(var: &str, service: &str) -> String {
    std::env::var(var)
        .unwrap_or_else(|_| panic!("needs {service}: {var} is not set (./test.sh sets it)"))
}

/// Whether a test that also shows its state in the dashboard checks those pages in a browser:
/// its `#[ignore]`d variant does (it needs Chromium), the one that always runs does not.
#[derive(Clone, Copy)]
pub enum Pages {
    Unchecked,
    InChromium,
}

impl Pages {
    /// [`browser`] when the pages are checked, else nothing.
    pub fn browser(self, script: &str, args: &[&str]) {
        if let Pages::InChromium = self {
            browser(script, args);
        }
    }
}

/// Runs a script of `tests/browser` in Debian's Chromium, which the test command installs (with
/// playwright-core); the tests that call it are `#[ignore]`d, and fail without it. Screenshots go
/// where `DATABUILD_SCREENSHOTS` says.
pub fn browser(script: &str, args: &[&str]) {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser");
    let ready = dir.join("node_modules/playwright-core").exists()
        && Path::new("/usr/bin/chromium").exists();
    assert!(
        ready,
        "needs Chromium and playwright-core for {script} (./test.sh installs them)"
    );
    let mut cmd = Command::new("node");
    cmd.current_dir(&dir).arg(script).args(args);
    if let Ok(shots) = std::env::var("DATABUILD_SCREENSHOTS") {
        cmd.env("SHOTS", shots);
    }
    let out = cmd.output().expect("node runs");
    assert!(
        out.status.success(),
        "{script} failed in the browser:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// Polls until `check` holds, or fails after `within`, saying what it waited for.
pub fn eventually<T>(
    within: std::time::Duration,
    what: &str,
    mut check: impl FnMut() -> Option<T>,
) -> T {
    let start = std::time::Instant::now();
    loop {
        if let Some(v) = check() {
            return v;
        }
        assert!(start.elapsed() < within, "not within {within:?}: {what}");
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
