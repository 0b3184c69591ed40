//! `build`: in this process, or on a service with the same progress and summary.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use databuild_core::PartitionRef;
use databuild_exec::answers::BuildProgress;
use databuild_exec::answers::BuildSummary;
use databuild_exec::run::RunOutcome;
use databuild_exec::scheduler::{BuildOptions, Observer, Progress};
use databuild_log::{AfterFailure, Event, Kind, Status};
use databuild_service::client::Http;
use indicatif::{ProgressBar, ProgressStyle};
use rustc_hash::FxHashMap;

use crate::backend::Backend;
use crate::cli::BuildArgs;
use crate::context::{engine_error, parse_refs};
use crate::output::{count, errln, outln, print_json, short_list, unless_closed};

/// `databuild build`; with `--dry-run`, the analysis of what it would do.
pub fn run(backend: &Backend, args: &BuildArgs, json: bool) -> anyhow::Result<ExitCode> {
    if args.dry_run {
        let planned = super::analyze::Planned {
            force: args.force,
            allow_stale: args.allow_stale,
            max_runs: args.max_runs,
        };
        // All of analyze's output at its default `--limit`.
        return super::analyze::print_plan(backend, &args.refs, 200, args.parallel, planned, json);
    }
    build(backend, args, json)
}

fn build(backend: &Backend, flags: &BuildArgs, json: bool) -> anyhow::Result<ExitCode> {
    let refs = parse_refs(backend, &flags.refs)?;
    if flags.parallel == Some(0) {
        return Err(crate::UserError("--parallel must be at least 1".to_string()).into());
    }
    // Ctrl-C and SIGTERM stop the running jobs cleanly and record them as cancelled.
    let interrupt = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, interrupt.clone())?;
    }
    let started = Instant::now();
    let terminal = !json && std::io::stderr().is_terminal();
    // The bar's ETA is read from the log (or the service) on a thread of this scope.
    let (summary, whereabouts) = std::thread::scope(|scope| -> anyhow::Result<_> {
        let mut reporter = Reporter::new(terminal, |run| last_log_line(backend, run));
        if terminal {
            reporter = reporter.with_progress(polled(scope, |id| backend.progress(id).ok()));
        }
        let built = match backend {
            Backend::Local(local) => {
                let engine = &local.engine;
                let options = BuildOptions {
                    refs,
                    force: flags.force,
                    parallel: flags
                        .parallel
                        .unwrap_or_else(databuild_exec::scheduler::default_parallelism),
                    keep_going: flags.keep_going,
                    allow_stale: flags.allow_stale,
                    pins: Default::default(),
                    max_runs: flags.max_runs,
                };
                let executor = engine.executor();
                let summary = engine
                    .build(&options, executor.as_ref(), &mut reporter, &interrupt)
                    .map_err(engine_error)?;
                let whereabouts = format!(
                    "data in {}, events in {}, run logs in {}",
                    engine.data_dir.display(),
                    engine.store.location(),
                    engine.graph_dir.join(".databuild/logs").display()
                );
                (summary, whereabouts)
            }
            Backend::Remote(client) => {
                let summary = remote_build(client, &refs, flags, &mut reporter, &interrupt)?;
                let events = databuild_exec::answers::route::fill(
                    databuild_exec::answers::route::BUILD_EVENTS,
                    &summary.build_request_id,
                );
                (summary, format!("events at {}{events}", client.base()))
            }
        };
        reporter.done();
        Ok(built)
    })?;
    // The build's outcome is its exit code, whatever became of its output (`| head`).
    if json {
        unless_closed(print_json(&summary))?;
    } else {
        unless_closed(print_summary(&summary, started.elapsed(), &whereabouts))?;
    }
    Ok(if summary.status == Status::Completed {
        ExitCode::SUCCESS
    } else if refused_at_planning(&summary) {
        // The plan could not be carried out (an external input is missing): the request is at
        // fault, as `analyze` says of the same refs.
        errln!("error: {}", summary.message.as_deref().unwrap_or_default());
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    })
}

/// A build refused (its plan over `--max-runs`), or one that failed having done nothing at all:
/// nothing ran, was skipped or waited for.
fn refused_at_planning(s: &BuildSummary) -> bool {
    let nothing_done = s.built.is_empty()
        && s.skipped.is_empty()
        && s.delegated.is_empty()
        && s.failures.is_empty()
        && s.cancelled.is_empty()
        && s.not_started.is_empty();
    s.status == Status::Refused || (s.status == Status::Failed && nothing_done)
}

/// The last line of a run's log that says something (at most 300 characters), as the service
/// or this process reads it.
pub(super) fn last_log_line(backend: &Backend, run: &str) -> Option<String> {
    databuild_exec::run::log::last_line(&backend.run_log(run).ok()?)
}

/// How many failed runs the text summary lists, one a line.
const SHOWN_FAILURES: usize = 10;

fn print_summary(summary: &BuildSummary, took: Duration, whereabouts: &str) -> std::io::Result<()> {
    let id = &summary.build_request_id;
    // Partitions, each counted as `--json`'s `counts` counts it (its lists may be cut); failed
    // runs apart, since one run may fail several partitions.
    let c = &summary.counts;
    let runs = match c.failures {
        n if n == c.failed => String::new(),
        0 => " (no run failed)".to_string(),
        1 => " (1 failed run)".to_string(),
        n => format!(" ({n} failed runs)"),
    };
    // Of the built, those rebuilt with the bytes they had; of the skipped, runs not run because
    // of that (their inputs came out unchanged).
    let of = |n: u64, what: &str| match n {
        0 => String::new(),
        n => format!(" ({n} {what})"),
    };
    outln!(
        "build {id} {}: {} built{}{}, {} skipped{}, {} delegated, {} failed{runs}, {} cancelled, {} not started ({:.1} s)",
        summary.status,
        c.built,
        of(c.unchanged, "unchanged"),
        of(c.reused, "reused: linked from another environment, no job ran"),
        c.skipped,
        of(c.kept, "kept: inputs unchanged"),
        c.delegated,
        c.failed,
        c.cancelled,
        c.not_started,
        took.as_secs_f64()
    )?;
    let failures = &summary.failures;
    for f in failures.iter().take(SHOWN_FAILURES) {
        let run = &f.job_run_id;
        let mut line = format!(
            "failed: {} (job {}, run {}): {}",
            short_list(&f.outputs, 2),
            f.job,
            databuild_log::short_id(run),
            f.message.as_deref().unwrap_or_default()
        );
        if let Some(tail) = &f.log_tail {
            line.push_str(&format!(" | log: {tail}"));
        }
        outln!("{line}")?;
    }
    if failures.len() > SHOWN_FAILURES {
        outln!(
            "... and {} more failed runs (databuild --json builds {id})",
            failures.len() - SHOWN_FAILURES
        )?;
    }
    if !summary.failed.is_empty() {
        outln!("not live: {}", short_list(&summary.failed, 5))?;
    }
    if let Some(m) = &summary.message {
        outln!("reason: {m}")?;
    }
    outln!("{whereabouts}")?;
    if summary.status != Status::Completed {
        outln!("details: databuild builds {id}  (and databuild runs RUN_ID for a run's log)")?;
    }
    Ok(())
}

/// Requests the build, follows its events for the progress report (cancelling it on Ctrl-C),
/// and returns the summary the service gives once it has ended.
fn remote_build(
    client: &Http,
    refs: &[PartitionRef],
    flags: &BuildArgs,
    reporter: &mut Reporter,
    interrupt: &AtomicBool,
) -> anyhow::Result<BuildSummary> {
    let answer = client.start_build(&databuild_service::api::BuildBody {
        partitions: refs.iter().map(|r| r.to_string()).collect(),
        force: flags.force,
        keep_going: flags.keep_going,
        allow_stale: flags.allow_stale,
        parallel: flags.parallel,
        max_runs: flags.max_runs,
    })?;
    let id = answer.build_request_id;
    let (tx, rx) = mpsc::channel();
    // The same client (its token and agent), on the thread that follows the stream.
    let stream_client = client.clone();
    let stream_id = id.clone();
    let reader = std::thread::spawn(move || {
        stream_client.stream(&stream_id, |event| {
            let _ = tx.send(event);
        })
    });
    let mut replay = EventReplay::default();
    let mut cancelled = false;
    loop {
        if interrupt.load(Ordering::SeqCst) && !cancelled {
            cancelled = true;
            let _ = databuild_service::client::Api::cancel(client, &id);
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => replay.apply(&event, reporter),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    reader.join().expect("the stream reader does not panic")?;
    Ok(databuild_service::client::Api::build_summary(client, &id)?)
}

/// Turns a build's events into the progress reports a local build makes.
#[derive(Default)]
struct EventReplay {
    /// Outputs and start time of each run.
    runs: FxHashMap<String, (Vec<PartitionRef>, Option<i64>)>,
}

impl EventReplay {
    fn apply(&mut self, e: &Event, reporter: &mut Reporter) {
        let run = e.job_run_id.clone().unwrap_or_default();
        let job = e.job.clone().unwrap_or_default();
        match (e.kind, e.status) {
            (Kind::BuildRequest, Status::AnalysisCompleted) => reporter.on(Progress::Planned {
                build_request_id: e.build_request_id.as_deref().unwrap_or_default(),
                runs: e.data.planned_runs.unwrap_or(0) as usize,
                skipped: 0,
                delegated: 0,
            }),
            (Kind::JobRun, Status::Scheduled) => {
                let outputs = e
                    .data
                    .outputs
                    .iter()
                    .filter_map(|o| PartitionRef::new(o).ok())
                    .collect();
                self.runs.insert(run, (outputs, None));
            }
            (Kind::JobRun, Status::Running) => {
                let entry = self.runs.entry(run).or_default();
                entry.1 = Some(e.timestamp);
                reporter.on(Progress::Started {
                    job: &job,
                    outputs: &entry.0,
                });
            }
            // A run cut off: recorded `skipped`, naming its outputs.
            (Kind::JobRun, Status::Skipped)
                if e.data.cutoff == Some(databuild_log::Cutoff::InputsUnchanged) =>
            {
                let outputs: Vec<PartitionRef> = (e.data.outputs.iter())
                    .filter_map(|o| PartitionRef::new(o).ok())
                    .collect();
                reporter.on(Progress::Kept {
                    job: &job,
                    outputs: &outputs,
                });
            }
            (Kind::JobRun, Status::Completed | Status::Failed | Status::Cancelled) => {
                let Some((outputs, Some(start))) = self.runs.get(&run) else {
                    return; // never started: not a run the report counts
                };
                let took = Duration::from_nanos((e.timestamp - start).max(0) as u64);
                let message = e.message.clone().unwrap_or_default();
                let outputs = outputs.clone();
                match e.data.then {
                    Some(AfterFailure::Retry) => {
                        let attempt = e.data.attempt.unwrap_or(1);
                        return reporter.on(Progress::Retrying {
                            job: &job,
                            outputs: &outputs,
                            message: &message,
                            attempt: attempt + 1,
                            attempts: e.data.attempts.unwrap_or(0),
                        });
                    }
                    Some(AfterFailure::FetchInputs) => {
                        return reporter.on(Progress::FetchingInputs {
                            job: &job,
                            outputs: &outputs,
                            missing: &[],
                        })
                    }
                    None => {}
                }
                let outcome = match e.status {
                    Status::Completed => RunOutcome::Succeeded,
                    Status::Cancelled => RunOutcome::Cancelled,
                    _ => RunOutcome::Failed {
                        message,
                        exit_code: None,
                        missing_deps: Vec::new(),
                    },
                };
                reporter.on(Progress::Finished {
                    job: &job,
                    run_id: &run,
                    outputs: &outputs,
                    outcome: &outcome,
                    took,
                    reused_from: e.data.reused_from.as_ref(),
                });
            }
            _ => {}
        }
    }
}

/// A build's latest progress (its ETA) by id, as last read.
type ProgressOf<'a> = Box<dyn Fn(&str) -> Option<BuildProgress> + 'a>;
/// The last line of a run's log, by run id.
type LogLineOf<'a> = Box<dyn Fn(&str) -> Option<String> + 'a>;

/// How often the bar's ETA is read again from the log.
const ETA_EVERY: Duration = Duration::from_secs(2);

/// Reads a build's progress with `read` on a thread of its own every [`ETA_EVERY`], so that
/// counting a large build's runs never holds up its loop; the answer gives the last reading.
/// The thread ends once the answer is dropped.
fn polled<'s>(
    scope: &'s std::thread::Scope<'s, '_>,
    read: impl Fn(&str) -> Option<BuildProgress> + Send + 's,
) -> ProgressOf<'s> {
    type Reading = (Option<String>, Option<BuildProgress>);
    let reading: Arc<std::sync::Mutex<Reading>> = Arc::default();
    let shared = Arc::downgrade(&reading);
    scope.spawn(move || {
        let mut last: Option<Instant> = None;
        while let Some(reading) = shared.upgrade() {
            let id = reading.lock().expect("not poisoned").0.clone();
            if let Some(id) = id.filter(|_| last.is_none_or(|at| at.elapsed() > ETA_EVERY)) {
                let progress = read(&id);
                reading.lock().expect("not poisoned").1 = progress;
                last = Some(Instant::now());
            }
            drop(reading);
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    Box::new(move |id| {
        let mut r = reading.lock().expect("not poisoned");
        if r.0.as_deref() != Some(id) {
            r.0 = Some(id.to_string());
        }
        r.1.clone()
    })
}

/// A progress bar on a terminal; otherwise one line per finished run, on stderr.
pub(super) struct Reporter<'a> {
    bar: Option<ProgressBar>,
    /// The runs whose process started and has not ended, by first output: one that ends before
    /// its process started (cancelled while queued) was never running.
    running: std::collections::HashSet<String>,
    failed: usize,
    /// The build's ETA, from its jobs' durations and graph (not the bar's straight line).
    progress_of: Option<ProgressOf<'a>>,
    build_id: Option<String>,
    /// The last line of a run's log (by run id), for the line of a failed run.
    last_log_line: LogLineOf<'a>,
}

impl<'a> Reporter<'a> {
    pub(super) fn new(
        terminal: bool,
        last_log_line: impl Fn(&str) -> Option<String> + 'a,
    ) -> Reporter<'a> {
        let bar = terminal.then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} runs  {msg}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Reporter {
            bar,
            running: Default::default(),
            failed: 0,
            progress_of: None,
            build_id: None,
            last_log_line: Box::new(last_log_line),
        }
    }

    /// Shows the ETA `progress_of` reads, on the bar.
    fn with_progress(mut self, progress_of: ProgressOf<'a>) -> Self {
        self.progress_of = Some(progress_of);
        self
    }

    /// The ETA, as last read.
    fn eta(&self) -> Option<String> {
        let p = (self.progress_of.as_ref()?)(self.build_id.as_deref()?)?;
        Some(format!(
            "  ETA {} ({} runs/s)",
            p.eta_text()?,
            p.rate_per_s.unwrap_or(0.0)
        ))
    }

    fn line(&self, text: String) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => errln!("{text}"),
        }
    }

    /// A run ended: one fewer running (if it ran), one more done on the bar.
    fn run_ended(&mut self, outputs: &[PartitionRef]) {
        if let Some(first) = outputs.first() {
            self.running.remove(first.as_str());
        }
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn refresh(&self) {
        if let Some(bar) = &self.bar {
            let eta = self.eta().unwrap_or_default();
            bar.set_message(format!(
                "{} running, {} failed{eta}",
                self.running.len(),
                self.failed
            ));
        }
    }

    pub(super) fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Reporter<'_> {
    fn on(&mut self, progress: Progress<'_>) {
        match progress {
            Progress::Planned {
                build_request_id,
                runs,
                skipped,
                delegated,
            } => {
                self.build_id = Some(build_request_id.to_string());
                if let Some(bar) = &self.bar {
                    bar.set_length(runs as u64);
                }
                self.line(format!(
                    "build {build_request_id}: {} to run, {skipped} skipped (live), {delegated} delegated",
                    count(runs, "job run")
                ));
            }
            Progress::Started { outputs, .. } => {
                self.running
                    .extend(outputs.first().map(|o| o.as_str().to_string()));
            }
            Progress::Finished {
                job,
                run_id,
                outputs,
                outcome,
                took,
                reused_from,
            } => {
                self.run_ended(outputs);
                let outputs = short_list(outputs, 2);
                match outcome {
                    RunOutcome::Succeeded if reused_from.is_some() => {
                        if let (None, Some(from)) = (&self.bar, reused_from) {
                            self.line(format!(
                                "reused  {job}  {outputs}  (run {} of `{}`, linked: no job ran)",
                                databuild_log::short_id(&from.job_run_id),
                                from.environment
                            ));
                        }
                    }
                    RunOutcome::Succeeded => {
                        if self.bar.is_none() {
                            self.line(format!(
                                "done    {job}  {outputs}  ({:.2} s)",
                                took.as_secs_f64()
                            ));
                        }
                    }
                    RunOutcome::Failed { message, .. } => {
                        self.failed += 1;
                        let short = databuild_log::short_id(run_id);
                        let log = (self.last_log_line)(run_id)
                            .map(|l| format!(" | log: {l}"))
                            .unwrap_or_default();
                        self.line(format!(
                            "FAILED  {job}  {outputs} (run {short}): {message}{log}"
                        ));
                    }
                    RunOutcome::Cancelled => self.line(format!("cancelled  {job}  {outputs}")),
                }
            }
            Progress::Retrying {
                job,
                outputs,
                message,
                attempt,
                attempts,
            } => {
                self.run_ended(outputs);
                self.line(format!(
                    "retrying  {job}  {}: {message} (attempt {attempt} of {attempts})",
                    short_list(outputs, 2)
                ));
            }
            Progress::FetchingInputs {
                job,
                outputs,
                missing,
            } => {
                self.run_ended(outputs);
                let missing = if missing.is_empty() {
                    String::new()
                } else {
                    format!(" ({})", short_list(missing, 3))
                };
                self.line(format!(
                    "waiting   {job}  {}: building its missing inputs first{missing}",
                    short_list(outputs, 2)
                ));
            }
            Progress::Kept { job, outputs } => {
                // Planned, and done without running: the bar counts it.
                if let Some(bar) = &self.bar {
                    bar.inc(1);
                } else {
                    self.line(format!(
                        "kept    {job}  {}  (its inputs came out unchanged)",
                        short_list(outputs, 2)
                    ));
                }
            }
            Progress::Added => {
                if let Some(bar) = &self.bar {
                    bar.inc_length(1);
                }
            }
            Progress::Note(text) => self.line(text),
        }
        self.refresh();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run cancelled while queued ends without having run: the count of running runs keeps
    /// the one that did start.
    #[test]
    fn a_run_that_ends_before_its_process_started_was_never_running() {
        let mut reporter = Reporter::new(false, |_| None);
        let started = [PartitionRef::new("a/1").unwrap()];
        let queued = [PartitionRef::new("a/2").unwrap()];
        let finished = |outputs| Progress::Finished {
            job: "a",
            run_id: "r",
            outputs,
            outcome: &RunOutcome::Cancelled,
            took: Duration::ZERO,
            reused_from: None,
        };
        reporter.on(Progress::Started {
            job: "a",
            outputs: &started,
        });
        reporter.on(finished(&queued));
        assert_eq!(reporter.running.len(), 1);
        reporter.on(finished(&started));
        assert!(reporter.running.is_empty());
    }
}
