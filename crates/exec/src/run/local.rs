//! Running one job run as a local process (contract section 3).
//!
//! The run's stdout and stderr go through one pipe into its log file, capped: a job that floods
//! its log past the cap is stopped. A run that outlives its timeout or is cancelled has its whole
//! process group terminated. After exit 0 every output must exist and have been written by the run.

use std::collections::{BTreeMap, HashMap};
use std::io::{Read, Write};
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant, SystemTime};

use nix::sys::signal::{killpg, Signal};
use nix::unistd::Pid;

use crate::run::process::{describe_status, humanize};
use crate::run::spawn::{spawn, JobProcess, Launch, Spawned};

/// Default cap on a run's log.
pub const DEFAULT_LOG_LIMIT: u64 = 10 * 1024 * 1024;

/// How long a cancelled run gets between SIGTERM and SIGKILL.
const GRACE: Duration = Duration::from_secs(5);

/// Everything needed to start one run.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    pub job_run_id: String,
    pub build_request_id: String,
    pub job: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// The job's env and the config's, merged.
    pub env: BTreeMap<String, String>,
    pub outputs: Vec<String>,
    pub inputs: Vec<String>,
    /// The inputs whose data must be `<data_dir>/<ref>` when the run starts (job outputs and
    /// file datasets): a slot checks them before it starts the job.
    pub present_inputs: Vec<String>,
    /// Field values of a single-output run, by field name.
    pub fields: Vec<(String, String)>,
    pub graph_dir: PathBuf,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    pub timeout: Option<Duration>,
    pub log_limit: u64,
    /// Resources for a cluster executor.
    pub cpus: Option<u32>,
    pub mem: Option<String>,
    /// A check of `outputs` (`crate::check::rules`), not a job building them: its exit status is its
    /// verdict, and it is not expected to write them.
    pub check: bool,
}

/// The most a run's report may hold.
pub const REPORT_LIMIT: u64 = 64 * 1024;

/// The folder of the data dir that holds runs' outputs until the log has recorded them.
pub const STAGING: &str = ".databuild-staging";

/// Where a run writes its outputs (`DATABUILD_OUTPUT_DIR`): `<data_dir>/.databuild-staging/<run>`.
pub fn staging_dir(data_dir: &Path, job_run_id: &str) -> PathBuf {
    data_dir.join(STAGING).join(job_run_id)
}

impl RunSpec {
    /// Where the run writes its outputs before they are moved into place.
    pub fn staging_dir(&self) -> PathBuf {
        staging_dir(&self.data_dir, &self.job_run_id)
    }

    /// Where the run may write its report (a JSON object; `DATABUILD_REPORT`), next to its log.
    pub fn report_path(&self) -> PathBuf {
        self.log_path.with_extension("report.json")
    }
}

/// Why what a run reported (`DATABUILD_REPORT`) is refused: the run then fails with this message.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("its report (DATABUILD_REPORT) is larger than {REPORT_LIMIT} bytes")]
    TooLarge,
    /// The cause is part of the message, so not also a `source` (`{:#}` would print it twice).
    #[error("its report cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("its report (DATABUILD_REPORT) is not a JSON object")]
    NotAnObject,
}

/// A run's message: the scheduler fails a run with it (`RunOutcome::failed` takes the text).
impl From<ReportError> for String {
    fn from(e: ReportError) -> String {
        e.to_string()
    }
}

/// Reads what a run reported: `Ok(None)` if it wrote nothing, an error naming the problem if it
/// wrote something that is not a small JSON object.
pub fn read_report(path: &std::path::Path) -> Result<Option<serde_json::Value>, ReportError> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if meta.len() > REPORT_LIMIT {
        return Err(ReportError::TooLarge);
    }
    let text = std::fs::read_to_string(path).map_err(ReportError::Unreadable)?;
    match serde_json::from_str(&text) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(Some(v)),
        _ => Err(ReportError::NotAnObject),
    }
}

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    Succeeded,
    Failed {
        message: String,
        exit_code: Option<i32>,
        /// Refs the job reported missing with `DATABUILD_MISSING_DEPS`.
        missing_deps: Vec<String>,
    },
    Cancelled,
}

impl RunOutcome {
    pub(crate) fn failed(message: impl Into<String>, exit_code: Option<i32>) -> RunOutcome {
        RunOutcome::Failed {
            message: message.into(),
            exit_code,
            missing_deps: Vec::new(),
        }
    }
}

/// A way to run job runs: local processes here, Slurm jobs elsewhere. `run` blocks until the run
/// ends; `cancel` going true asks it to stop. `started` receives the run's id in the executor
/// (`slurm:1234`) when it has one worth recording.
pub trait Executor: Send + Sync {
    fn run(&self, spec: &RunSpec, cancel: &AtomicBool, started: &dyn Fn(&str)) -> RunOutcome;
}

pub struct LocalExecutor;

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

impl Executor for LocalExecutor {
    fn run(&self, spec: &RunSpec, cancel: &AtomicBool, _started: &dyn Fn(&str)) -> RunOutcome {
        Process::start(spec)
            .and_then(|process| process.follow(spec, cancel))
            .unwrap_or_else(|e| RunOutcome::failed(e.to_string(), None))
    }
}

/// The longest list of refs DataBuild puts in one environment variable. Linux refuses to start
/// a process given any string over 128 KiB (`MAX_ARG_STRLEN`: "Argument list too long"), and
/// all of them together count against `ARG_MAX`; a fan-in job reading 24,000 partitions has a
/// list of ~700 KB.
const ENV_REFS_MAX: usize = 64 * 1024;

/// Why a run's environment could not be made: the run fails with this message.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the run's `{var}` to `{}` (too long for the environment): {cause}", .path.display())]
pub(crate) struct RefsFileError {
    var: &'static str,
    path: PathBuf,
    cause: std::io::Error,
}

/// A run's list of refs as `VAR` (JSON), or, when too long for the environment, written to a
/// file next to the run's log and named by `VAR_FILE` (`VAR` is then unset, so a job that reads
/// only `VAR` fails at once instead of reading nothing).
fn refs_var(
    spec: &RunSpec,
    var: &'static str,
    refs: &[String],
) -> Result<(String, String), RefsFileError> {
    let json = serde_json::to_string(refs).expect("refs serialize");
    if json.len() <= ENV_REFS_MAX {
        return Ok((var.to_string(), json));
    }
    let path = spec.log_path.with_extension(format!(
        "{}.json",
        var.trim_start_matches("DATABUILD_").to_ascii_lowercase()
    ));
    std::fs::write(&path, json).map_err(|cause| RefsFileError {
        var,
        path: path.clone(),
        cause,
    })?;
    Ok((format!("{var}_FILE"), path.display().to_string()))
}

pub(crate) fn environment(spec: &RunSpec) -> Result<Vec<(String, String)>, RefsFileError> {
    let mut env: Vec<(String, String)> = spec.env.clone().into_iter().collect();
    env.extend([
        refs_var(spec, "DATABUILD_OUTPUTS", &spec.outputs)?,
        refs_var(spec, "DATABUILD_INPUTS", &spec.inputs)?,
        (
            "DATABUILD_DATA_DIR".to_string(),
            spec.data_dir.display().to_string(),
        ),
        (
            "DATABUILD_OUTPUT_DIR".to_string(),
            spec.staging_dir().display().to_string(),
        ),
        ("DATABUILD_JOB_RUN_ID".to_string(), spec.job_run_id.clone()),
        ("DATABUILD_WATCH".to_string(), watch_token().to_string()),
        (
            "DATABUILD_REPORT".to_string(),
            spec.report_path().display().to_string(),
        ),
        (
            "DATABUILD_BUILD_REQUEST_ID".to_string(),
            spec.build_request_id.clone(),
        ),
    ]);
    for (name, value) in &spec.fields {
        env.push((
            format!("DATABUILD_FIELD_{}", name.to_ascii_uppercase()),
            value.clone(),
        ));
    }
    Ok(env)
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
    fn follow(self, spec: &RunSpec, cancel: &AtomicBool) -> Result<RunOutcome, JobError> {
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
        // Anything the job left behind in its group goes with it, so the log pipe closes; what is
        // still in the pipe goes into the log. Only then is the job reaped: until then its pid,
        // and so its group's id, cannot be another process's.
        let _ = killpg(group, Signal::SIGKILL);
        child.reap().map_err(JobError::Wait)?;
        if let Some(mut p) = pipe {
            while wait_ready(Some(&p), None, Duration::from_secs(1))?.output && log.copy(&mut p) {}
        }
        if let Some(outcome) = stop_reason {
            return Ok(outcome);
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
            return Ok(RunOutcome::Failed {
                message,
                exit_code: status.code(),
                missing_deps,
            });
        }
        Ok(verify_outputs(spec, &before))
    }
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

/// The modification times of a run's outputs before it starts.
pub(crate) fn output_times(spec: &RunSpec) -> Vec<Option<SystemTime>> {
    spec.outputs
        .iter()
        .map(|o| mtime(&spec.data_dir.join(o)))
        .collect()
}

/// After exit 0: every output exists and was written by the run, staged
/// (`DATABUILD_OUTPUT_DIR/<ref>`) or in place.
pub(crate) fn verify_outputs(spec: &RunSpec, before: &[Option<SystemTime>]) -> RunOutcome {
    if spec.check {
        return RunOutcome::Succeeded;
    }
    let staging = spec.staging_dir();
    let staged = staging.exists();
    for (output, before) in spec.outputs.iter().zip(before) {
        if staged && staging.join(output).symlink_metadata().is_ok() {
            continue;
        }
        let path = spec.data_dir.join(output);
        match mtime(&path) {
            None => {
                return RunOutcome::failed(
                    format!(
                        "the job exited 0 but did not produce `{output}` (expected at {})",
                        path.display()
                    ),
                    Some(0),
                )
            }
            Some(now) if Some(now) == *before => {
                return RunOutcome::failed(
                    format!("the job exited 0 but did not write `{output}`: it is unchanged since before the run"),
                    Some(0),
                )
            }
            Some(_) => {}
        }
    }
    RunOutcome::Succeeded
}

/// Moves a run's staged outputs (`<staging>/<ref>`) into place (`<data_dir>/<ref>`), once the
/// log has recorded the run's completion: a file in one rename, a folder by moving the old one
/// aside first. Outputs the job wrote in place are left as they are; the staging folder goes.
pub fn publish_outputs(
    data_dir: &Path,
    staging: &Path,
    outputs: &[databuild_core::PartitionRef],
) -> std::io::Result<()> {
    if !staging.exists() {
        return Ok(());
    }
    for output in outputs {
        let output = output.as_str();
        let (staged, target) = (staging.join(output), data_dir.join(output));
        if staged.symlink_metadata().is_err() {
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if target.is_dir() && !target.is_symlink() {
            let aside = staging.join(".replaced").join(output);
            std::fs::create_dir_all(aside.parent().unwrap_or(staging))?;
            std::fs::rename(&target, &aside)?;
            if let Err(e) = std::fs::rename(&staged, &target) {
                // The old folder goes back: never neither of them.
                let _ = std::fs::rename(&aside, &target);
                return Err(e);
            }
        } else {
            std::fs::rename(&staged, &target)?;
        }
    }
    discard_staged(staging);
    Ok(())
}

/// Removes what a run staged that will never be published (it failed, or lost its claim).
pub fn discard_staged(staging: &Path) {
    // Nothing there, or left behind: it is never read.
    let _ = std::fs::remove_dir_all(staging);
}

/// [`discard_staged`] of run `job_run_id`.
pub fn discard_run(data_dir: &Path, job_run_id: &str) {
    discard_staged(&staging_dir(data_dir, job_run_id));
}

/// Kills the process groups of running jobs when this process dies, however it dies: a watchdog
/// `sh` waits for end-of-file on a pipe whose only writer is this process (the kernel closes it
/// when this process is gone, SIGKILL included), then kills every process group left in the
/// registry. A whole group goes, so a job's own subprocesses go too.
///
/// This replaces a parent-death signal set between `fork` and `exec`: such a hook forces a full
/// `fork` of this large, multi-threaded process for every job (page tables copied, copy-on-write
/// faults after), which cost more than the jobs themselves; without it jobs start with
/// `posix_spawn`. One watchdog serves the whole process.
///
/// The registry is a memory file shared with the watchdog (its stdout), in fixed-width slots
/// written with one `pwrite` each. The watchdog reads it only once this process is gone, so a
/// job costs it no wake-up: telling it about each job through its pipe woke it four times per
/// job, and on this kind of VM a wake-up across CPUs costs ~40 µs.
struct Watchdog {
    /// Never written: it stays open for as long as this process lives.
    _alive: ChildStdin,
    registry: std::fs::File,
    /// Which slots of the registry are taken.
    taken: Mutex<Vec<bool>>,
}

/// Bytes per registry slot: an entry (a process group, or `p`), padded with spaces, and a newline.
/// The first slot is the lease's: `d` and the deadline ([`fence_jobs_at`]).
const SLOT: usize = 16;

/// The lease watchdog, for a shared log: while this process (`$1`) lives, it compares the lease's
/// deadline (the registry's first line, `d` and centiseconds of `/proc/uptime`, which counts
/// `CLOCK_BOOTTIME`) with the clock five times a second, and once the deadline has passed it
/// kills every registered process group. A process of its own, it acts while this one is stopped
/// (`SIGSTOP`) or stuck on a log it cannot reach.
const LEASE_WATCHDOG_SCRIPT: &str = r#"trap '' INT TERM HUP
while [ -d "/proc/$1" ]; do
  read -r up _ < /proc/uptime
  now=${up%.*}${up#*.}
  read -r first < /proc/self/fd/1
  deadline=${first#d}
  if [ "${deadline:-0}" -gt 0 ] && [ "$now" -gt "$deadline" ]; then
    while read -r pg; do
      case $pg in ''|p|d*) ;; *) kill -9 "-$pg" 2>/dev/null ;; esac
    done < /proc/self/fd/1
  fi
  sleep 0.2
done"#;

/// Jobs of this process may run until `deadline` (`CLOCK_BOOTTIME` ns), when the lease
/// watchdog kills them (see [`crate::run::lease`]); started at the first call.
pub fn fence_jobs_at(deadline: u64) {
    let Some(w) = watchdog() else { return };
    w.write(0, &format!("d{}", deadline.div_ceil(10_000_000)));
    static LEASE_WATCHDOG: OnceLock<()> = OnceLock::new();
    LEASE_WATCHDOG.get_or_init(|| {
        let Ok(registry) = w.registry.try_clone() else {
            return;
        };
        let started = Command::new("sh")
            .args([
                "-c",
                LEASE_WATCHDOG_SCRIPT,
                "databuild-lease-watchdog",
                &std::process::id().to_string(),
            ])
            .stdin(Stdio::null())
            .stdout(Stdio::from(registry))
            .stderr(Stdio::null())
            .process_group(0)
            .spawn();
        // Reaped by nobody: it ends with this process.
        if let Ok(child) = started {
            std::mem::forget(child);
        }
    });
}

/// `$1` is this process's watch token: at the end, if anything was still registered (groups, or
/// `p`: a job being started), every process whose environment carries the token goes too (a job
/// started a moment before its group was registered, or a subprocess that left its group). A
/// process that ended normally has nothing registered, and costs no sweep.
const WATCHDOG_SCRIPT: &str = r#"trap '' INT TERM HUP
while read -r _; do :; done
registered=
while read -r pg; do
  case $pg in
    ''|d*) ;;
    p) registered=1 ;;
    *) registered=1; kill -9 "-$pg" 2>/dev/null ;;
  esac
done < /proc/self/fd/1
[ -z "$registered" ] && exit 0
for d in /proc/[0-9]*; do
  [ "${d#/proc/}" = "$$" ] && continue
  grep -qsxz "DATABUILD_WATCH=$1" "$d/environ" && kill -9 "${d#/proc/}" 2>/dev/null
done"#;

/// Marks the jobs of this process (`DATABUILD_WATCH` in their environment) for the watchdog.
fn watch_token() -> &'static str {
    static TOKEN: OnceLock<String> = OnceLock::new();
    TOKEN.get_or_init(|| format!("{}-{}", std::process::id(), databuild_log::event::now_ns()))
}

fn watchdog() -> Option<&'static Watchdog> {
    static WATCHDOG: OnceLock<Option<Watchdog>> = OnceLock::new();
    WATCHDOG
        .get_or_init(|| {
            use nix::sys::memfd::{memfd_create, MemFdCreateFlag};
            let registry = std::fs::File::from(
                memfd_create(c"databuild-watchdog", MemFdCreateFlag::MFD_CLOEXEC).ok()?,
            );
            let mut child = Command::new("sh")
                .args(["-c", WATCHDOG_SCRIPT, "databuild-watchdog", watch_token()])
                .stdin(Stdio::piped())
                .stdout(Stdio::from(registry.try_clone().ok()?))
                .stderr(Stdio::null())
                .process_group(0) // terminal signals aimed at us do not reach it
                .spawn()
                .ok()?;
            let alive = child.stdin.take()?;
            // Reaped by nobody until we exit: it must outlive us, and it is one process.
            std::mem::forget(child);
            Some(Watchdog {
                _alive: alive,
                registry,
                // The first slot is the lease's deadline.
                taken: Mutex::new(vec![true]),
            })
        })
        .as_ref()
}

impl Watchdog {
    fn take_slot(&self, entry: &str) -> usize {
        let mut taken = self.taken.lock().unwrap_or_else(|e| e.into_inner());
        let slot = taken.iter().position(|t| !t).unwrap_or(taken.len());
        if slot == taken.len() {
            taken.push(true);
        } else {
            taken[slot] = true;
        }
        drop(taken);
        self.write(slot, entry);
        slot
    }

    /// One `pwrite`: the watchdog sees the slot's old entry or its new one, never a mix.
    fn write(&self, slot: usize, entry: &str) {
        use std::os::unix::fs::FileExt;
        let mut line = [b' '; SLOT];
        line[SLOT - 1] = b'\n';
        line[..entry.len()].copy_from_slice(entry.as_bytes());
        let _ = self.registry.write_all_at(&line, (slot * SLOT) as u64);
    }

    fn free_slot(&self, slot: usize) {
        // Blanked before it is freed: a job taking the slot next must not have its entry erased.
        self.write(slot, "");
        self.taken.lock().unwrap_or_else(|e| e.into_inner())[slot] = false;
    }
}

/// A job's slot in the watchdog's registry for as long as this value lives: `p` while the job
/// is being started and its group is not known yet, then its process group.
struct Guarded(Option<usize>);

impl Guarded {
    /// Taken before a job starts, so that the watchdog, were this process to die before the job's
    /// group is registered, still finds something registered and sweeps by token.
    fn starting() -> Guarded {
        Guarded(watchdog().map(|w| w.take_slot("p")))
    }

    fn started(&self, group: Pid) {
        if let (Some(w), Some(slot)) = (watchdog(), self.0) {
            w.write(slot, &group.to_string());
        }
    }
}

impl Drop for Guarded {
    fn drop(&mut self) {
        if let (Some(w), Some(slot)) = (watchdog(), self.0) {
            w.free_slot(slot);
        }
    }
}

/// Ends what is left on this machine of the given runs' jobs: every process whose environment
/// carries one of their `DATABUILD_JOB_RUN_ID`s is killed, and this waits (up to 5 s) until none
/// is left. A driver killed with SIGKILL leaves its jobs to its watchdog, which takes a moment (and
/// cannot find a job that left both its process group and the watch token); a build closing the
/// driver's runs must not release their partitions to another run while they are still written.
pub fn end_leftover_jobs(run_ids: &[&str]) {
    if run_ids.is_empty() {
        return;
    }
    let marks: std::collections::HashSet<Vec<u8>> = run_ids
        .iter()
        .map(|id| format!("DATABUILD_JOB_RUN_ID={id}").into_bytes())
        .collect();
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        let left = processes_marked(&marks);
        if left.is_empty() {
            return;
        }
        for pid in left {
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Live processes (not zombies: those hold no files) whose environment holds one of `marks`.
fn processes_marked(marks: &std::collections::HashSet<Vec<u8>>) -> Vec<Pid> {
    let Ok(proc) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    proc.flatten()
        .filter_map(|entry| entry.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid as u32 != std::process::id())
        .filter(|pid| {
            std::fs::read(format!("/proc/{pid}/environ"))
                .is_ok_and(|env| env.split(|b| *b == 0).any(|var| marks.contains(var)))
        })
        .filter(|pid| {
            // The state follows the command name's closing parenthesis.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .is_some_and(|(_, rest)| !rest.trim_start().starts_with('Z'))
            })
        })
        .map(Pid::from_raw)
        .collect()
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

/// The refs of the last `DATABUILD_MISSING_DEPS [...]` line in a log, if any.
pub fn missing_deps(log: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read(log) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("DATABUILD_MISSING_DEPS"))
        .and_then(|json| serde_json::from_str::<Vec<String>>(json.trim()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        LocalExecutor.run(spec, &AtomicBool::new(false), &|_| {})
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
            LocalExecutor.run(&s, &cancel, &|_| {})
        });
        assert_eq!(outcome, RunOutcome::Cancelled);
        assert!(started.elapsed() < Duration::from_secs(5));
    }
}
