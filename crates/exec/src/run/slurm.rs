//! Running job runs on a Slurm cluster: each run is one `sbatch` job.
//!
//! The job gets the run's environment and args, its working directory and a `--time` from the
//! job's timeout; Slurm writes its output straight into the run's log. One poller thread follows
//! every submitted job with a single `squeue` call per round, and asks `scontrol show job` only for
//! jobs that left the queue. Cancellation is `scancel`. Ends that are Slurm's doing (node failure,
//! preemption, out of memory, time limit, a job stuck pending) fail the run with Slurm's reason.

use std::collections::HashMap;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use databuild_core::SlurmConfig;

use super::contract::{environment, missing_deps};
use super::publish::{output_times, verify_outputs};
use super::resources::{of_sacct, RunResources, SACCT_FORMAT};
use super::{Began, Executor, Finished, RunOutcome, RunSpec};

/// How often the poller asks Slurm about the jobs it follows.
const POLL_EVERY: Duration = Duration::from_millis(300);

/// What the poller knows of one job.
#[derive(Debug, Clone, Default)]
struct JobState {
    /// `PENDING`, `RUNNING`, ... while queued; the final `JobState` once it left the queue.
    state: String,
    reason: String,
    exit_code: Option<i32>,
    signal: Option<i32>,
    finished: bool,
    pending_since: Option<Instant>,
}

#[derive(Default)]
struct Shared {
    jobs: Mutex<HashMap<String, JobState>>,
    changed: Condvar,
    poller_running: AtomicBool,
}

pub struct SlurmExecutor {
    config: SlurmConfig,
    shared: Arc<Shared>,
    /// By job, the `--mem` asked for a job that sets no `mem`: from its history ([`mem_of`]).
    mem_defaults: std::collections::BTreeMap<String, String>,
}

/// The headroom over a job's p95 peak memory that a learned `--mem` asks for: a run a little
/// above the p95 still fits, where Slurm would kill it at the limit.
pub const MEM_HEADROOM: f64 = 1.25;

/// The least a learned `--mem` asks for, in MiB: a tiny job's peak says little of its next run.
pub const MEM_FLOOR_MIB: u64 = 64;

/// The `--mem` of a job whose runs' p95 peak memory is `p95_bytes`: with [`MEM_HEADROOM`],
/// rounded up to a whole MiB, at least [`MEM_FLOOR_MIB`].
pub fn mem_of(p95_bytes: f64) -> String {
    let mib = (p95_bytes * MEM_HEADROOM / (1024.0 * 1024.0)).ceil() as u64;
    format!("{}M", mib.max(MEM_FLOOR_MIB))
}

impl SlurmExecutor {
    pub fn new(config: SlurmConfig) -> SlurmExecutor {
        SlurmExecutor {
            config,
            shared: Arc::default(),
            mem_defaults: Default::default(),
        }
    }

    /// With `--mem` for the jobs that set none, by job name.
    pub fn with_mem_defaults(
        self,
        mem_defaults: std::collections::BTreeMap<String, String>,
    ) -> SlurmExecutor {
        SlurmExecutor {
            mem_defaults,
            ..self
        }
    }

    fn ensure_poller(&self) {
        if self.shared.poller_running.swap(true, Ordering::SeqCst) {
            return;
        }
        let shared = self.shared.clone();
        std::thread::Builder::new()
            .name("slurm-poller".into())
            .spawn(move || poll(&shared))
            .expect("spawn the Slurm poller");
    }

    fn submit(&self, spec: &RunSpec) -> Result<String, SubmitError> {
        let mut cmd = Command::new("sbatch");
        cmd.arg("--parsable")
            .arg(format!("--job-name=databuild-{}", spec.job))
            .arg(format!("--chdir={}", spec.graph_dir.display()))
            .arg(format!("--output={}", spec.log_path.display()))
            .arg("--export=ALL")
            .envs(environment(spec)?);
        if let Some(p) = &self.config.partition {
            cmd.arg(format!("--partition={p}"));
        }
        if let Some(a) = &self.config.account {
            cmd.arg(format!("--account={a}"));
        }
        if let Some(t) = spec.timeout {
            // Slurm counts whole minutes; our own timer enforces the exact limit.
            cmd.arg(format!("--time={}", t.as_secs().div_ceil(60).max(1)));
        }
        if let Some(c) = spec.cpus {
            cmd.arg(format!("--cpus-per-task={c}"));
        }
        if let Some(m) = spec.mem.as_ref().or(self.mem_defaults.get(&spec.job)) {
            cmd.arg(format!("--mem={m}"));
        }
        cmd.args(&self.config.sbatch_args);
        let script: Vec<String> = spec
            .command
            .iter()
            .chain(&spec.args)
            .map(|a| shell_quote(a))
            .collect();
        cmd.arg("--wrap").arg(format!("exec {}", script.join(" ")));
        let out = cmd.output().map_err(|cause| SubmitError::Run {
            job: spec.job.clone(),
            cause,
        })?;
        if !out.status.success() {
            return Err(SubmitError::Refused {
                job: spec.job.clone(),
                stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
            });
        }
        let id = String::from_utf8_lossy(&out.stdout)
            .trim()
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string();
        if id.is_empty() {
            return Err(SubmitError::NoJobId);
        }
        Ok(id)
    }
}

/// Why `sbatch` did not take a run: the run fails with this message. The cause is part of the
/// message, so it is a plain field rather than a `source` (which `{:#}` would print twice).
#[derive(Debug, thiserror::Error)]
enum SubmitError {
    #[error("cannot run `sbatch` to submit job `{job}`: {cause}")]
    Run { job: String, cause: std::io::Error },
    #[error("sbatch refused job `{job}`: {stderr}")]
    Refused { job: String, stderr: String },
    #[error("sbatch answered without a job id")]
    NoJobId,
    #[error(transparent)]
    RefsFile(#[from] crate::run::contract::RefsFileError),
}

fn shell_quote(s: &str) -> String {
    if !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c))
    {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

fn scancel(id: &str) {
    let _ = Command::new("scancel").arg(id).output();
}

/// `Key=Value` pairs of `scontrol show job` output.
fn scontrol_fields(id: &str) -> HashMap<String, String> {
    let out = Command::new("scontrol").args(["show", "job", id]).output();
    let text = out
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    text.split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// The poller: one `squeue` for every followed job per round.
fn poll(shared: &Shared) {
    loop {
        std::thread::sleep(POLL_EVERY);
        let ids: Vec<String> = {
            let jobs = shared.jobs.lock().expect("jobs lock");
            jobs.iter()
                .filter(|(_, s)| !s.finished)
                .map(|(id, _)| id.clone())
                .collect()
        };
        if ids.is_empty() {
            continue;
        }
        let out = Command::new("squeue")
            .args(["-h", "-o", "%i|%T|%r", "-j", &ids.join(",")])
            .output();
        let Ok(out) = out else { continue };
        let queued: HashMap<String, (String, String)> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| {
                let mut parts = l.splitn(3, '|');
                Some((
                    parts.next()?.trim().to_string(),
                    (
                        parts.next()?.to_string(),
                        parts.next().unwrap_or("").to_string(),
                    ),
                ))
            })
            .collect();
        let mut updates = Vec::new();
        for id in &ids {
            match queued.get(id) {
                Some((state, reason)) if !is_final(state) => {
                    updates.push((id.clone(), state.clone(), reason.clone(), None))
                }
                // Gone from the queue, or shown in a final state: ask for its end.
                _ => {
                    let f = scontrol_fields(id);
                    let state = f
                        .get("JobState")
                        .cloned()
                        .unwrap_or_else(|| "UNKNOWN".into());
                    let reason = f.get("Reason").cloned().unwrap_or_default();
                    updates.push((id.clone(), state, reason, f.get("ExitCode").cloned()));
                }
            }
        }
        let mut jobs = shared.jobs.lock().expect("jobs lock");
        for (id, state, reason, exit) in updates {
            let Some(job) = jobs.get_mut(&id) else {
                continue;
            };
            if state == "PENDING" && job.pending_since.is_none() {
                job.pending_since = Some(Instant::now());
            }
            if state != "PENDING" {
                job.pending_since = None;
            }
            job.finished = is_final(&state) || exit.is_some();
            if let Some((code, signal)) = exit.as_deref().and_then(|e| e.split_once(':')) {
                job.exit_code = code.parse().ok();
                job.signal = signal.parse().ok().filter(|s| *s != 0);
            }
            job.state = state;
            job.reason = reason;
        }
        shared.changed.notify_all();
    }
}

fn is_final(state: &str) -> bool {
    !matches!(
        state,
        "PENDING"
            | "RUNNING"
            | "CONFIGURING"
            | "COMPLETING"
            | "SUSPENDED"
            | "REQUEUED"
            | "RESIZING"
            | "SIGNALING"
            | "STAGE_OUT"
    )
}

/// Slurm's accounting of an ended job (`sacct`), read once it left the queue: `None` where the
/// cluster keeps none (`AccountingStorageType=accounting_storage/none` leaves it empty).
fn sacct(id: &str) -> RunResources {
    let out = Command::new("sacct")
        .args(["-j", id, "-P", "-n", &format!("--format={SACCT_FORMAT}")])
        .output();
    match out {
        Ok(o) if o.status.success() => of_sacct(&String::from_utf8_lossy(&o.stdout)),
        _ => RunResources::default(),
    }
}

/// What a Slurm run cost: `sacct`'s accounting, its wall time when that has none from when the
/// poller saw it leave `PENDING` to when it saw it end (to a poll's precision).
fn measured(id: &str, running_since: Option<Instant>) -> RunResources {
    let mut r = sacct(id);
    if r.wall_ms.is_none() {
        r.wall_ms = running_since.map(|t| super::resources::ms(t.elapsed()));
    }
    r
}

impl Executor for SlurmExecutor {
    fn run(&self, spec: &RunSpec, cancel: &AtomicBool, began: &dyn Fn(Began<'_>)) -> Finished {
        let mut submitted = None;
        let outcome = self.follow(spec, cancel, began, &mut submitted);
        let resources = match submitted {
            Some((id, running_since)) => measured(&id, running_since),
            None => RunResources::default(),
        };
        Finished { outcome, resources }
    }
}

impl SlurmExecutor {
    /// Submits the run and follows it to its end; `submitted` is given its Slurm job's id and
    /// when it left `PENDING`, to be measured.
    fn follow(
        &self,
        spec: &RunSpec,
        cancel: &AtomicBool,
        began: &dyn Fn(Began<'_>),
        submitted_as: &mut Option<(String, Option<Instant>)>,
    ) -> RunOutcome {
        if let Some(parent) = spec.log_path.parent() {
            if let Err(e) = std::fs::create_dir_all(parent) {
                return RunOutcome::failed(format!("cannot create the log folder: {e}"), None);
            }
        }
        let _ = std::fs::create_dir_all(&spec.data_dir);
        let before = output_times(spec);
        self.ensure_poller();
        let id = match self.submit(spec) {
            Ok(id) => id,
            Err(e) => return RunOutcome::failed(e.to_string(), None),
        };
        began(Began::Submitted(&format!("slurm:{id}")));
        *submitted_as = Some((id.clone(), None));
        self.shared
            .jobs
            .lock()
            .expect("jobs lock")
            .insert(id.clone(), JobState::default());
        let submitted = Instant::now();
        let mut stop: Option<RunOutcome> = None;
        let mut running = false;
        let state = loop {
            let jobs = self.shared.jobs.lock().expect("jobs lock");
            let (jobs, _) = self
                .shared
                .changed
                .wait_timeout(jobs, Duration::from_millis(200))
                .expect("jobs lock");
            let state = jobs.get(&id).cloned().unwrap_or_default();
            drop(jobs);
            // Out of `PENDING` (known once the poller has seen it): its process runs, or ran.
            if !running && stop.is_none() && !state.state.is_empty() && state.state != "PENDING" {
                running = true;
                began(Began::Running);
                *submitted_as = Some((id.clone(), Some(Instant::now())));
            }
            if state.finished {
                break state;
            }
            if stop.is_some() {
                continue;
            }
            if cancel.load(Ordering::SeqCst) {
                stop = Some(RunOutcome::Cancelled);
            } else if state
                .pending_since
                .is_some_and(|p| p.elapsed() > self.config.pending_timeout)
            {
                stop = Some(RunOutcome::failed(
                    format!(
                        "Slurm job {id} was still pending after {} (Reason={}); it was cancelled",
                        crate::run::process::humanize(&self.config.pending_timeout),
                        state.reason
                    ),
                    None,
                ));
            } else if let Some(limit) = spec
                .timeout
                .filter(|t| submitted.elapsed() > *t + POLL_EVERY * 4 && state.state == "RUNNING")
            {
                stop = Some(RunOutcome::failed(
                    format!(
                        "timed out after {}; Slurm job {id} was cancelled",
                        crate::run::process::humanize(&limit)
                    ),
                    None,
                ));
            }
            if stop.is_some() {
                scancel(&id);
            }
        };
        self.shared.jobs.lock().expect("jobs lock").remove(&id);
        if let Some(outcome) = stop {
            return outcome;
        }
        match state.state.as_str() {
            "COMPLETED" if state.exit_code == Some(0) => verify_outputs(spec, &before),
            "FAILED" | "COMPLETED" => {
                let missing = missing_deps(&spec.log_path);
                let message = match (state.signal, state.exit_code, missing.is_empty()) {
                    (_, _, false) => {
                        format!("the job reported missing inputs: {}", missing.join(", "))
                    }
                    (Some(sig), _, _) => {
                        format!("the job was killed by signal {sig} (Slurm job {id})")
                    }
                    (None, code, _) => format!(
                        "the job ended with exit status {} (Slurm job {id})",
                        code.map_or("?".to_string(), |c| c.to_string())
                    ),
                };
                RunOutcome::Failed {
                    message,
                    exit_code: state.exit_code,
                    missing_deps: missing,
                }
            }
            "TIMEOUT" => RunOutcome::failed(
                format!("Slurm job {id} reached its time limit (TIMEOUT)"),
                None,
            ),
            other => RunOutcome::failed(
                format!("Slurm ended job {id} as {other} (Reason={})", state.reason),
                state.exit_code,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::shell_quote;

    #[test]
    fn a_learned_mem_has_headroom_whole_mib_and_a_floor() {
        assert_eq!(super::mem_of(400.0 * 1024.0 * 1024.0), "500M");
        assert_eq!(super::mem_of(1.0), "64M");
        assert_eq!(super::mem_of(100.0 * 1024.0 * 1024.0 + 1.0), "126M");
    }

    #[test]
    fn quotes_for_the_wrap_script() {
        assert_eq!(shell_quote("jobs/x.py"), "jobs/x.py");
        assert_eq!(shell_quote("a b"), "'a b'");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
        assert_eq!(shell_quote(""), "''");
    }
}
