//! Running one job run as a local process (contract section 3).
//!
//! The run's stdout and stderr go through one pipe into its log file, capped: a job that floods
//! its log past the cap is stopped. A run that outlives its timeout or is cancelled has its whole
//! process group terminated. After exit 0 every output must exist and have been written by the run.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use super::contract::{environment, missing_deps, RefsFileError};
use super::process::{describe_status, humanize};
use super::publish::{output_times, verify_outputs};
use super::spawn::{spawn, JobProcess, Launch, Spawned};
use super::watchdog::Guarded;
use super::{Began, Executor, Finished, RunOutcome, RunSpec};

/// How long a cancelled run gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

pub struct LocalExecutor;

impl Executor for LocalExecutor {
    fn run(&self, spec: &RunSpec, cancel: &AtomicBool, began: &dyn Fn(Began<'_>)) -> Finished {
        Process::start(spec)
            .and_then(|process| {
                began(Began::Running);
                process.follow(spec, cancel)
            })
            .unwrap_or_else(|e| RunOutcome::failed(e.to_string(), None).into())
    }
}

/// How often a running job is checked for cancellation and its timeout when it is quiet.
const POLL: Duration = Duration::from_millis(50);
/// How often a job is asked whether it has exited, on a kernel without pidfds (before 5.3) once
/// its output pipe has closed.
const EXIT_POLL: Duration = Duration::from_millis(5);

/// A run's log: the job's output up to the cap, in a file created with the first byte (a silent
/// job costs no file). Past the cap it keeps reading (so the job never blocks on a full pipe)
/// but stops writing, and raises `flooded` so the job is stopped.
struct LogSink {
    path: PathBuf,
    limit: u64,
    file: Option<std::fs::File>,
    written: u64,
    flooded: bool,
    buf: Box<[u8]>,
}

impl LogSink {
    fn new(path: PathBuf, limit: u64) -> LogSink {
        LogSink {
            path,
            limit,
            file: None,
            written: 0,
            flooded: false,
            buf: vec![0; 64 * 1024].into_boxed_slice(),
        }
    }

    /// Copies what the pipe holds; `false` once it is closed.
    fn copy(&mut self, pipe: &mut std::io::PipeReader) -> bool {
        match pipe.read(&mut self.buf) {
            Ok(0) => false,
            Ok(n) => {
                self.write(n);
                true
            }
            Err(e) => e.kind() == std::io::ErrorKind::Interrupted,
        }
    }

    fn write(&mut self, n: usize) {
        if self.written >= self.limit {
            return;
        }
        if self.file.is_none() {
            self.file = std::fs::File::create(&self.path).ok();
        }
        let Some(file) = self.file.as_mut() else {
            return;
        };
        let keep = (n as u64).min(self.limit - self.written) as usize;
        let _ = file.write_all(&self.buf[..keep]);
        self.written += keep as u64;
        if self.written >= self.limit {
            let _ = writeln!(
                file,
                "\n[databuild: log truncated at {} bytes; the job was stopped]",
                self.limit
            );
            self.flooded = true;
        }
    }
}

/// A started job process, until it is followed to its end.
struct Process {
    child: JobProcess,
    group: Pid,
    /// Its entry in the watchdog's registry, kept until its group is killed at the end.
    _guarded: Guarded,
    pipe: std::io::PipeReader,
    pidfd: Option<std::os::fd::OwnedFd>,
    /// Its outputs' modification times before it started.
    before: Vec<Option<SystemTime>>,
    start: Instant,
}

/// Why a job could not be started or followed: the run fails with this message. The cause is
/// part of each message (the run's message is all a user sees of it), so it is kept as a plain
/// field rather than a `source`, which `{:#}` would print twice.
#[derive(Debug, thiserror::Error)]
enum JobError {
    #[error("cannot create the log folder `{}`: {cause}", .path.display())]
    LogFolder {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot create the data dir `{}`: {cause}", .path.display())]
    DataDir {
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("cannot create a pipe: {0}")]
    Pipe(std::io::Error),
    #[error("cannot start `{program}`: no such program (the command of job `{job}`, run from `{}`)", .dir.display())]
    NoProgram {
        program: String,
        job: String,
        dir: PathBuf,
    },
    #[error("cannot start `{program}`: {cause} (the command of job `{job}`, run from `{}`)", .dir.display())]
    Spawn {
        program: String,
        cause: std::io::Error,
        job: String,
        dir: PathBuf,
    },
    #[error("waiting for the job failed: {0}")]
    Wait(std::io::Error),
    #[error("cannot follow the job: {0}")]
    Follow(nix::errno::Errno),
    #[error(transparent)]
    RefsFile(#[from] RefsFileError),
}

impl Process {
    fn start(spec: &RunSpec) -> Result<Process, JobError> {
        if let Some(parent) = spec.log_path.parent() {
            ensure_dir(parent).map_err(|cause| JobError::LogFolder {
                path: parent.to_path_buf(),
                cause,
            })?;
        }
        ensure_dir(&spec.data_dir).map_err(|cause| JobError::DataDir {
            path: spec.data_dir.clone(),
            cause,
        })?;
        let before = output_times(spec);
        let (reader, writer) = std::io::pipe().map_err(JobError::Pipe)?;
        let program = resolve_program(&spec.command[0], &spec.graph_dir).ok_or_else(|| {
            JobError::NoProgram {
                program: spec.command[0].clone(),
                job: spec.job.clone(),
                dir: spec.graph_dir.clone(),
            }
        })?;
        let spawn_error = |cause| JobError::Spawn {
            program: spec.command[0].clone(),
            cause,
            job: spec.job.clone(),
            dir: spec.graph_dir.clone(),
        };
        let args: Vec<&std::ffi::OsStr> = spec.command[1..]
            .iter()
            .chain(&spec.args)
            .map(std::ffi::OsStr::new)
            .collect();
        let launch = Launch::new(&program, &args, &environment(spec)?, &spec.graph_dir)
            .map_err(spawn_error)?;
        let start = Instant::now();
        let guarded = Guarded::starting();
        let Spawned {
            process: child,
            pidfd,
        } = spawn(&launch, writer.into()).map_err(spawn_error)?;
        let group = Pid::from_raw(child.id());
        guarded.started(group);
        Ok(Process {
            child,
            group,
            _guarded: guarded,
            pipe: reader,
            pidfd,
            before,
            start,
        })
    }

    /// Follows the job to its end: its output (copied into the log as it comes), its exit, and the
    /// reasons to stop it. It sleeps in one `poll` on the log pipe and a pidfd of the job, so it
    /// wakes once when the job ends, not on a timer or a process-wide SIGCHLD.
    fn follow(self, spec: &RunSpec, cancel: &AtomicBool) -> Result<Finished, JobError> {
        let Process {
            mut child,
            group,
            _guarded,
            pipe,
            pidfd,
            before,
            start,
        } = self;
        let mut log = LogSink::new(spec.log_path.clone(), spec.log_limit);
        let mut pipe = Some(pipe);
        let mut stop_reason: Option<RunOutcome> = None;
        let mut term_sent: Option<Instant> = None;
        let mut peak = super::resources::PeakSampler::new(child.id(), start);
        let status = loop {
            let ready = if pidfd.is_none() && pipe.is_none() {
                // No pidfd (a kernel before 5.3) and the pipe closed: wait for the exit itself.
                match child.try_wait().map_err(JobError::Wait)? {
                    Some(status) => break status,
                    None => {
                        std::thread::sleep(EXIT_POLL);
                        Ready::default()
                    }
                }
            } else {
                wait_ready(pipe.as_ref(), pidfd.as_ref(), POLL)?
            };
            if ready.output {
                if let Some(p) = &mut pipe {
                    if !log.copy(p) {
                        pipe = None; // every writer closed it: the job is ending
                    }
                }
            }
            if ready.exited {
                if let Some(status) = child.try_wait().map_err(JobError::Wait)? {
                    break status;
                }
            }
            peak.tick();
            if stop_reason.is_none() {
                if cancel.load(Ordering::SeqCst) {
                    stop_reason = Some(RunOutcome::Cancelled);
                } else if log.flooded {
                    stop_reason = Some(RunOutcome::failed(
                        format!(
                        "the job wrote more than {} of log; it was stopped and its log truncated",
                        bytes(spec.log_limit)
                    ),
                        None,
                    ));
                } else if let Some(limit) = spec.timeout.filter(|t| start.elapsed() > *t) {
                    stop_reason = Some(RunOutcome::failed(
                        format!("timed out after {}; the job was stopped", humanize(&limit)),
                        None,
                    ));
                }
                if stop_reason.is_some() {
                    let _ = killpg(group, Signal::SIGTERM);
                    term_sent = Some(Instant::now());
                }
            } else if term_sent.is_some_and(|t| t.elapsed() > GRACE) {
                let _ = killpg(group, Signal::SIGKILL);
            }
        };
        let wall = start.elapsed();
        // Anything the job left behind in its group goes with it, so the log pipe closes; what is
        // still in the pipe goes into the log. Only then is the job reaped: until then its pid,
        // and so its group's id, cannot be another process's.
        let _ = killpg(group, Signal::SIGKILL);
        child.reap().map_err(JobError::Wait)?;
        if let Some(mut p) = pipe {
            while wait_ready(Some(&p), None, Duration::from_secs(1))?.output && log.copy(&mut p) {}
        }
        Ok(Finished {
            outcome: outcome_of(spec, status, stop_reason, &before),
            resources: super::resources::of_process(child.usage(), peak.peak, wall),
        })
    }
}

/// How a followed job ended: stopped (`stop_reason`), failed by its exit, or succeeded with its
/// outputs written.
fn outcome_of(
    spec: &RunSpec,
    status: std::process::ExitStatus,
    stop_reason: Option<RunOutcome>,
    before: &[Option<SystemTime>],
) -> RunOutcome {
    if let Some(outcome) = stop_reason {
        return outcome;
    }
    if !status.success() {
        let missing_deps = missing_deps(&spec.log_path);
        let mut message = format!("the job ended with {}", describe_status(&status));
        if status.signal().is_some() {
            message = format!("the job was {}", describe_status(&status));
        }
        if !missing_deps.is_empty() {
            message = format!(
                "the job reported missing inputs: {}",
                missing_deps.join(", ")
            );
        }
        return RunOutcome::Failed {
            message,
            exit_code: status.code(),
            missing_deps,
        };
    }
    verify_outputs(spec, before)
}

/// Creates `dir` unless it is there: one `stat` for a folder that exists, as every run's log
/// and data folders do after the first (`create_dir_all` tries `mkdir` first, then `stat`s).
fn ensure_dir(dir: &Path) -> std::io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::create_dir_all(dir)
}

/// What woke a run's follower.
#[derive(Default)]
struct Ready {
    output: bool,
    exited: bool,
}

/// Waits up to `wait` for output on the pipe or the job's exit (its pidfd readable). Without a
/// pidfd, `exited` is true whenever the wait ends: the caller asks the process.
fn wait_ready(
    pipe: Option<&std::io::PipeReader>,
    pidfd: Option<&std::os::fd::OwnedFd>,
    wait: Duration,
) -> Result<Ready, JobError> {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use std::os::fd::AsFd;
    let timeout = PollTimeout::try_from(wait).unwrap_or(PollTimeout::MAX);
    let mut fds: Vec<PollFd<'_>> = Vec::with_capacity(2);
    if let Some(p) = pipe {
        fds.push(PollFd::new(p.as_fd(), PollFlags::POLLIN));
    }
    if let Some(fd) = pidfd {
        fds.push(PollFd::new(fd.as_fd(), PollFlags::POLLIN));
    }
    match poll(&mut fds, timeout) {
        Ok(_) | Err(nix::errno::Errno::EINTR) => {}
        Err(e) => return Err(JobError::Follow(e)),
    }
    let fired = |fd: &PollFd<'_>| fd.revents().is_some_and(|r| !r.is_empty());
    Ok(Ready {
        output: pipe.is_some() && fired(&fds[0]),
        exited: pidfd.is_none_or(|_| fired(fds.last().expect("the pidfd is polled"))),
    })
}

/// Finds a command's program as `exec` would: a path (relative to the graph's folder) or a name
/// on `PATH`. A name found on `PATH` is remembered: looking through `PATH` again for every run
/// cost a `stat` per folder before the program's.
fn resolve_program(program: &str, cwd: &Path) -> Option<PathBuf> {
    if program.contains('/') {
        let path = cwd.join(program);
        return path.exists().then_some(path);
    }
    static FOUND: OnceLock<Mutex<HashMap<String, PathBuf>>> = OnceLock::new();
    let found = FOUND.get_or_init(Default::default);
    if let Some(path) = found.lock().expect("programs lock").get(program) {
        return Some(path.clone());
    }
    let path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|dir| dir.join(program))
            .find(|p| p.is_file())
    })?;
    found
        .lock()
        .expect("programs lock")
        .insert(program.to_string(), path.clone());
    Some(path)
}

fn bytes(n: u64) -> String {
    if n >= 1024 * 1024 {
        format!("{} MiB", n / (1024 * 1024))
    } else {
        format!("{n} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::DEFAULT_LOG_LIMIT;
    use std::collections::BTreeMap;

    fn spec(dir: &Path, script: &str) -> RunSpec {
        RunSpec {
            job_run_id: "run-1".into(),
            build_request_id: "br-1".into(),
            job: "j".into(),
            command: vec!["sh".into(), "-c".into(), script.into()],
            args: vec![],
            env: BTreeMap::from([("MODE".to_string(), "fast".to_string())]),
            outputs: vec!["out/a".into()],
            inputs: vec!["in/a".into()],
            query_inputs: vec![],
            present_inputs: vec![],
            fields: vec![("name".into(), "a".into())],
            graph_dir: dir.to_path_buf(),
            data_dir: dir.join("data"),
            log_path: dir.join("logs/run-1.log"),
            timeout: Some(Duration::from_secs(10)),
            log_limit: DEFAULT_LOG_LIMIT,
            cpus: None,
            mem: None,
            check: false,
        }
    }

    fn run(spec: &RunSpec) -> RunOutcome {
        LocalExecutor
            .run(spec, &AtomicBool::new(false), &|_| {})
            .outcome
    }

    /// A local run is `running` once its process is spawned, not when it cannot be.
    #[test]
    fn a_spawned_process_says_it_started_and_one_that_cannot_start_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let runs = |s: &RunSpec| {
            let began = std::sync::Mutex::new(Vec::new());
            let outcome = LocalExecutor.run(s, &AtomicBool::new(false), &|b| {
                began.lock().unwrap().push(format!("{b:?}"));
            });
            (outcome.outcome, began.into_inner().unwrap())
        };
        let (outcome, began) = runs(&spec(dir.path(), "mkdir -p data/out && touch data/out/a"));
        assert_eq!(
            (outcome, began),
            (RunOutcome::Succeeded, vec!["Running".to_string()])
        );
        let mut missing = spec(dir.path(), "true");
        missing.command = vec!["/no/such/program".into()];
        let (outcome, began) = runs(&missing);
        assert!(matches!(outcome, RunOutcome::Failed { .. }), "{outcome:?}");
        assert!(began.is_empty(), "{began:?}");
    }

    #[test]
    fn runs_with_the_contract_environment() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(
            dir.path(),
            r#"mkdir -p "$DATABUILD_DATA_DIR/out" && echo "$DATABUILD_OUTPUTS $DATABUILD_INPUTS $DATABUILD_FIELD_NAME $MODE $DATABUILD_JOB_RUN_ID" > "$DATABUILD_DATA_DIR/out/a"; echo to-stderr >&2"#,
        );
        assert_eq!(run(&s), RunOutcome::Succeeded);
        let out = std::fs::read_to_string(dir.path().join("data/out/a")).unwrap();
        assert_eq!(out, "[\"out/a\"] [\"in/a\"] a fast run-1\n");
        let log = std::fs::read_to_string(&s.log_path).unwrap();
        assert!(log.contains("to-stderr"));
    }

    /// A fan-in's 30,000 inputs (~1 MB of JSON) are more than Linux lets a process be given in
    /// one variable: they come in a file named by `DATABUILD_INPUTS_FILE`, and
    /// `DATABUILD_INPUTS` is unset rather than cut.
    #[test]
    fn refs_too_long_for_the_environment_come_in_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = spec(
            dir.path(),
            r#"mkdir -p "$DATABUILD_DATA_DIR/out" && echo "${DATABUILD_INPUTS-unset} $DATABUILD_OUTPUTS" > "$DATABUILD_DATA_DIR/out/a" && cp "$DATABUILD_INPUTS_FILE" "$DATABUILD_DATA_DIR/inputs.json""#,
        );
        s.inputs = (0..30_000)
            .map(|i| format!("leaf/date={i:05}/part"))
            .collect();
        assert_eq!(run(&s), RunOutcome::Succeeded);
        let out = std::fs::read_to_string(dir.path().join("data/out/a")).unwrap();
        assert_eq!(out, "unset [\"out/a\"]\n");
        let inputs: Vec<String> = serde_json::from_str(
            &std::fs::read_to_string(dir.path().join("data/inputs.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(inputs, s.inputs);
    }

    #[test]
    fn failures_say_what_happened() {
        let dir = tempfile::tempdir().unwrap();
        let cases = [
            ("exit 3", "the job ended with exit status 3"),
            ("kill -9 $$", "the job was killed by signal 9 (SIGKILL)"),
            ("true", "did not produce `out/a`"),
        ];
        let mut missing = spec(dir.path(), "true");
        missing.command = vec!["no-such-program-here".into()];
        match run(&missing) {
            RunOutcome::Failed { message, .. } => assert!(
                message.starts_with("cannot start `no-such-program-here`: no such program"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
        for (script, needle) in cases {
            match run(&spec(dir.path(), script)) {
                RunOutcome::Failed { message, .. } => {
                    assert!(message.contains(needle), "{script}: {message}")
                }
                other => panic!("{script}: {other:?}"),
            }
        }
        let mut s = spec(dir.path(), "sleep 30");
        s.timeout = Some(Duration::from_millis(300));
        let started = Instant::now();
        match run(&s) {
            RunOutcome::Failed { message, .. } => {
                assert!(message.starts_with("timed out after 300 ms"), "{message}")
            }
            other => panic!("{other:?}"),
        }
        assert!(started.elapsed() < Duration::from_secs(5));
        let mut s = spec(dir.path(), "yes databuild");
        s.log_limit = 100_000;
        match run(&s) {
            RunOutcome::Failed { message, .. } => assert!(
                message.contains("more than 100000 bytes of log"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
        assert!(std::fs::metadata(&s.log_path).unwrap().len() < 100_200);
    }

    #[test]
    fn a_job_that_leaves_an_old_output_untouched_fails() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("data/out")).unwrap();
        std::fs::write(dir.path().join("data/out/a"), "old").unwrap();
        match run(&spec(dir.path(), "true")) {
            RunOutcome::Failed { message, .. } => assert!(
                message.contains("unchanged since before the run"),
                "{message}"
            ),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn missing_deps_are_reported_and_cancel_stops_the_group() {
        let dir = tempfile::tempdir().unwrap();
        let s = spec(
            dir.path(),
            r#"echo 'DATABUILD_MISSING_DEPS ["x/1", "x/2"]'; exit 1"#,
        );
        match run(&s) {
            RunOutcome::Failed { missing_deps, .. } => assert_eq!(missing_deps, ["x/1", "x/2"]),
            other => panic!("{other:?}"),
        }
        let s = spec(dir.path(), "sleep 30 & sleep 30");
        let cancel = AtomicBool::new(false);
        let started = Instant::now();
        let outcome = std::thread::scope(|scope| {
            scope.spawn(|| {
                std::thread::sleep(Duration::from_millis(200));
                cancel.store(true, Ordering::SeqCst);
            });
            LocalExecutor.run(&s, &cancel, &|_| {}).outcome
        });
        assert_eq!(outcome, RunOutcome::Cancelled);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
