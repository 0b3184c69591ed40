//! `build`: in this process, or on a service with the same progress and summary.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

use databuild_core::PartitionRef;
use databuild_exec::build::{BuildOptions, Observer, Progress};
use databuild_exec::local::RunOutcome;
use indicatif::{ProgressBar, ProgressStyle};
use rustc_hash::FxHashMap;
use serde_json::{json, Value};

use crate::backend::Backend;
use crate::context::{engine_error, parse_refs};
use crate::output::{count, print_json, short_list, text};
use crate::remote::{segment, Remote};

pub struct Flags {
    pub force: bool,
    pub parallel: Option<usize>,
    pub keep_going: bool,
    pub allow_stale: bool,
}

pub fn run(
    backend: &Backend,
    args: &[String],
    flags: Flags,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let refs = parse_refs(args)?;
    if flags.parallel == Some(0) {
        return Err(crate::UserError("--parallel must be at least 1".to_string()).into());
    }
    // Ctrl-C and SIGTERM stop the running jobs cleanly and record them as cancelled.
    let interrupt = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, interrupt.clone())?;
    }
    let started = Instant::now();
    let mut reporter = Reporter::new(!json && std::io::stderr().is_terminal());
    let (summary, whereabouts) = match backend {
        Backend::Local(engine) => {
            let options = BuildOptions {
                refs,
                force: flags.force,
                parallel: flags
                    .parallel
                    .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
                keep_going: flags.keep_going,
                allow_stale: flags.allow_stale,
                pins: Default::default(),
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
            (serde_json::to_value(summary)?, whereabouts)
        }
        Backend::Remote(client) => {
            let summary = remote_build(client, &refs, &flags, &mut reporter, &interrupt)?;
            let id = text(&summary["build_request_id"]);
            (
                summary,
                format!("events at {}/api/v1/builds/{id}/events", client.base()),
            )
        }
    };
    reporter.done();
    if json {
        print_json(&summary)?;
    } else {
        print_summary(&summary, started.elapsed(), &whereabouts);
    }
    Ok(if summary["status"] == "completed" {
        ExitCode::SUCCESS
    } else if refused_at_planning(&summary) {
        // The plan could not be carried out (an external input is missing): the request is at
        // fault, as `analyze` says of the same refs.
        eprintln!("error: {}", text(&summary["message"]));
        ExitCode::from(2)
    } else {
        ExitCode::from(1)
    })
}

/// A build that failed having done nothing at all: nothing ran, was skipped or waited for.
fn refused_at_planning(summary: &Value) -> bool {
    let none = |k: &str| summary[k].as_array().is_none_or(Vec::is_empty);
    summary["status"] == "failed"
        && [
            "built",
            "skipped",
            "delegated",
            "failures",
            "cancelled",
            "not_started",
        ]
        .into_iter()
        .all(none)
}

/// How many failed runs the text summary lists, one a line.
const SHOWN_FAILURES: usize = 10;

fn print_summary(summary: &Value, took: Duration, whereabouts: &str) {
    let len = |k: &str| summary[k].as_array().map_or(0, Vec::len);
    let id = text(&summary["build_request_id"]);
    println!(
        "build {id} {}: {} built, {} skipped, {} delegated, {} failed, {} cancelled, {} not started ({:.1} s)",
        text(&summary["status"]),
        len("built"),
        len("skipped"),
        len("delegated"),
        len("failures"),
        len("cancelled"),
        len("not_started"),
        took.as_secs_f64()
    );
    let failures = summary["failures"].as_array().cloned().unwrap_or_default();
    for f in failures.iter().take(SHOWN_FAILURES) {
        let outputs: Vec<String> = f["outputs"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        let run = text(&f["job_run_id"]);
        let mut line = format!(
            "failed: {} (job {}, run {}): {}",
            short_list(&outputs, 2),
            text(&f["job"]),
            &run[..run.len().min(8)],
            text(&f["message"])
        );
        if let Some(tail) = f["log_tail"].as_str() {
            line.push_str(&format!(" | log: {tail}"));
        }
        println!("{line}");
    }
    if failures.len() > SHOWN_FAILURES {
        println!(
            "... and {} more failed runs (databuild --json builds {id})",
            failures.len() - SHOWN_FAILURES
        );
    }
    let failed: Vec<String> = summary["failed"]
        .as_array()
        .into_iter()
        .flatten()
        .map(text)
        .collect();
    if !failed.is_empty() {
        println!("not live: {}", short_list(&failed, 5));
    }
    if let Some(m) = summary["message"].as_str() {
        println!("reason: {m}");
    }
    println!("{whereabouts}");
    if summary["status"] != "completed" {
        println!("details: databuild builds {id}  (and databuild runs RUN_ID for a run's log)");
    }
}

/// Requests the build, follows its events for the progress report (cancelling it on Ctrl-C),
/// and returns the summary the service gives once it has ended.
fn remote_build(
    client: &Remote,
    refs: &[PartitionRef],
    flags: &Flags,
    reporter: &mut Reporter,
    interrupt: &AtomicBool,
) -> anyhow::Result<Value> {
    let refs: Vec<String> = refs.iter().map(|r| r.to_string()).collect();
    let answer = client.post(
        "/api/v1/builds",
        &json!({
            "partitions": refs,
            "force": flags.force,
            "keep_going": flags.keep_going,
            "allow_stale": flags.allow_stale,
            "parallel": flags.parallel,
        }),
    )?;
    let id = text(&answer["build_request_id"]);
    let (tx, rx) = mpsc::channel();
    let stream_path = format!("/api/v1/builds/{}/events/stream", segment(&id));
    let stream_client = Remote::new(client.base());
    let reader = std::thread::spawn(move || {
        stream_client.stream(&stream_path, |event| {
            let _ = tx.send(event);
        })
    });
    let mut replay = EventReplay::default();
    let mut cancelled = false;
    loop {
        if interrupt.load(Ordering::SeqCst) && !cancelled {
            cancelled = true;
            let _ = client.delete(&format!("/api/v1/builds/{}", segment(&id)));
        }
        match rx.recv_timeout(Duration::from_millis(100)) {
            Ok(event) => replay.apply(&event, reporter),
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    reader.join().expect("the stream reader does not panic")?;
    let build = client.get(&format!("/api/v1/builds/{}", segment(&id)))?;
    Ok(build["summary"].clone())
}

/// Turns a build's events into the progress reports a local build makes.
#[derive(Default)]
struct EventReplay {
    /// Outputs and start time of each run.
    runs: FxHashMap<String, (Vec<PartitionRef>, Option<i64>)>,
}

impl EventReplay {
    fn apply(&mut self, e: &Value, reporter: &mut Reporter) {
        let (kind, status) = (text(&e["kind"]), text(&e["status"]));
        let run = text(&e["job_run_id"]);
        let job = text(&e["job"]);
        match (kind.as_str(), status.as_str()) {
            ("build_request", "analysis_completed") => reporter.on(Progress::Planned {
                build_request_id: &text(&e["build_request_id"]),
                runs: e["data"]["planned_runs"].as_u64().unwrap_or(0) as usize,
                skipped: 0,
                delegated: 0,
            }),
            ("job_run", "scheduled") => {
                let outputs = e["data"]["outputs"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter_map(|o| PartitionRef::new(text(o)).ok())
                    .collect();
                self.runs.insert(run, (outputs, None));
            }
            ("job_run", "running") => {
                let entry = self.runs.entry(run).or_default();
                entry.1 = e["timestamp"].as_i64();
                reporter.on(Progress::Started {
                    job: &job,
                    outputs: &entry.0,
                });
            }
            ("job_run", "completed" | "failed" | "cancelled") => {
                let Some((outputs, Some(start))) = self.runs.get(&run) else {
                    return; // never started: not a run the report counts
                };
                let took = Duration::from_nanos(
                    (e["timestamp"].as_i64().unwrap_or(*start) - start).max(0) as u64,
                );
                let message = text(&e["message"]);
                let outputs = outputs.clone();
                match e["data"]["then"].as_str() {
                    Some("retry") => {
                        let attempt = e["data"]["attempt"].as_u64().unwrap_or(1) as u32;
                        return reporter.on(Progress::Retrying {
                            job: &job,
                            outputs: &outputs,
                            message: &message,
                            attempt: attempt + 1,
                            attempts: e["data"]["attempts"].as_u64().unwrap_or(0) as u32,
                        });
                    }
                    Some("fetch_inputs") => {
                        return reporter.on(Progress::FetchingInputs {
                            job: &job,
                            outputs: &outputs,
                            missing: &[],
                        })
                    }
                    _ => {}
                }
                let outcome = match status.as_str() {
                    "completed" => RunOutcome::Succeeded,
                    "cancelled" => RunOutcome::Cancelled,
                    _ => RunOutcome::Failed {
                        message,
                        exit_code: None,
                        missing_deps: Vec::new(),
                    },
                };
                reporter.on(Progress::Finished {
                    job: &job,
                    outputs: &outputs,
                    outcome: &outcome,
                    took,
                });
            }
            _ => {}
        }
    }
}

/// A progress bar on a terminal; otherwise one line per finished run, on stderr.
pub(super) struct Reporter {
    bar: Option<ProgressBar>,
    running: usize,
    failed: usize,
}

impl Reporter {
    pub(super) fn new(terminal: bool) -> Reporter {
        let bar = terminal.then(|| {
            let bar = ProgressBar::new(0);
            bar.set_style(
                ProgressStyle::with_template(
                    "{elapsed_precise} [{bar:30.cyan/blue}] {pos}/{len} runs  {msg}  ETA {eta}",
                )
                .expect("valid template")
                .progress_chars("=> "),
            );
            bar.enable_steady_tick(Duration::from_millis(200));
            bar
        });
        Reporter {
            bar,
            running: 0,
            failed: 0,
        }
    }

    fn line(&self, text: String) {
        match &self.bar {
            Some(bar) => bar.println(text),
            None => eprintln!("{text}"),
        }
    }

    /// A run ended: one fewer running, one more done on the bar.
    fn run_ended(&mut self) {
        self.running = self.running.saturating_sub(1);
        if let Some(bar) = &self.bar {
            bar.inc(1);
        }
    }

    fn refresh(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{} running, {} failed", self.running, self.failed));
        }
    }

    pub(super) fn done(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

impl Observer for Reporter {
    fn on(&mut self, progress: Progress<'_>) {
        match progress {
            Progress::Planned {
                build_request_id,
                runs,
                skipped,
                delegated,
            } => {
                if let Some(bar) = &self.bar {
                    bar.set_length(runs as u64);
                }
                self.line(format!(
                    "build {build_request_id}: {} to run, {skipped} skipped (live), {delegated} delegated",
                    count(runs, "job run")
                ));
            }
            Progress::Started { .. } => self.running += 1,
            Progress::Finished {
                job,
                outputs,
                outcome,
                took,
            } => {
                self.run_ended();
                let outputs = short_list(outputs, 2);
                match outcome {
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
                        self.line(format!("FAILED  {job}  {outputs}: {message}"));
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
                self.run_ended();
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
                self.run_ended();
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
