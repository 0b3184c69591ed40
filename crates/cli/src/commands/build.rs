//! `build` and `cancel`.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use databuild_exec::build::{BuildOptions, Observer, Progress};
use databuild_exec::local::{LocalExecutor, RunOutcome};
use databuild_exec::Engine;
use databuild_log::Status;
use indicatif::{ProgressBar, ProgressStyle};

use crate::context::{engine_error, parse_refs};
use crate::output::{count, print_json, short_list};

pub struct Flags {
    pub force: bool,
    pub parallel: Option<usize>,
    pub keep_going: bool,
    pub allow_stale: bool,
}

pub fn run(engine: &Engine, args: &[String], flags: Flags, json: bool) -> anyhow::Result<ExitCode> {
    let refs = parse_refs(args)?;
    let parallel = flags
        .parallel
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if parallel == 0 {
        return Err(crate::UserError("--parallel must be at least 1".to_string()).into());
    }
    let options = BuildOptions {
        refs,
        force: flags.force,
        parallel,
        keep_going: flags.keep_going,
        allow_stale: flags.allow_stale,
    };
    // Ctrl-C and SIGTERM stop the running jobs cleanly and record them as cancelled.
    let interrupt = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(signal, interrupt.clone())?;
    }
    let started = Instant::now();
    let mut observer = Reporter::new(!json && std::io::stderr().is_terminal());
    let summary = engine
        .build(&options, &LocalExecutor, &mut observer, &interrupt)
        .map_err(engine_error)?;
    observer.done();
    if json {
        print_json(&summary)?;
    } else {
        println!(
            "build {} {}: {} built, {} skipped, {} delegated, {} failed ({:.1} s)",
            summary.build_request_id,
            summary.status,
            summary.built.len(),
            summary.skipped.len(),
            summary.delegated.len(),
            summary.failed.len(),
            started.elapsed().as_secs_f64()
        );
        if !summary.failed.is_empty() {
            println!("not live: {}", short_list(&summary.failed, 5));
        }
        println!(
            "data in {}, events in {}, run logs in {}",
            engine.data_dir.display(),
            engine.store.location(),
            engine.graph_dir.join(".databuild/logs").display()
        );
        if let Some(m) = &summary.message {
            println!("reason: {m}");
        }
        if summary.status != Status::Completed {
            println!(
                "details: databuild builds {}  (and databuild runs RUN_ID for a run's log)",
                summary.build_request_id
            );
        }
    }
    Ok(if summary.status == Status::Completed {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

pub fn cancel(engine: &Engine, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    engine.cancel(id).map_err(engine_error)?;
    if json {
        print_json(&serde_json::json!({ "build_request_id": id, "cancelled": true }))?;
    } else {
        println!("cancelled build request {id}");
    }
    Ok(ExitCode::SUCCESS)
}

/// A progress bar on a terminal; otherwise one line per finished run, on stderr.
struct Reporter {
    bar: Option<ProgressBar>,
    running: usize,
    failed: usize,
}

impl Reporter {
    fn new(terminal: bool) -> Reporter {
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

    fn refresh(&self) {
        if let Some(bar) = &self.bar {
            bar.set_message(format!("{} running, {} failed", self.running, self.failed));
        }
    }

    fn done(&self) {
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
                self.running -= 1;
                if let Some(bar) = &self.bar {
                    bar.inc(1);
                }
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
