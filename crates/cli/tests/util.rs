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

/// Writes the events of one finished single-run build into the project's default event log, as
/// a build would (used to test the read commands before and apart from `build`).
pub fn seed_build(project: &Project, br: &str, run: &str, job: &str, r: &str, ok: bool) {
    use databuild_log::{Event, EventStore, SqliteStore, Status};
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
                let raw = databuild_exec::versions::external_version(
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
