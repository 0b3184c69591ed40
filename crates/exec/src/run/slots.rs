//! A build's slots: one thread per slot runs claimed runs one after another, taken from a queue
//! the scheduler keeps filled. A slot whose job ends starts the next run at once, instead of
//! waiting for the scheduler's thread to wake up and start a new thread for it: that hand-over
//! was most of the time a slot sat idle between two short jobs.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Instant;

use super::contract::ReportedMetrics;
use super::lease::Lease;
use super::outcome::{Ended, Finished, RunOutcome};
use super::{Began, Executor, RunSpec};
use crate::check::{CheckOutcome, CheckRun};
use crate::run::check::CheckPlace;

/// A claimed run, with what a slot needs to start it.
pub(crate) struct Launch {
    pub node: usize,
    pub spec: RunSpec,
    pub cancel: Arc<AtomicBool>,
    /// The graph's checks of the run's outputs, run once it succeeded.
    pub checks: Vec<CheckRun>,
    /// By output, the version it replaces if that is a recipe version of an older log (empty
    /// when none is): see [`output_versions`](crate::run::publish::output_versions).
    pub legacy: Vec<Option<String>>,
    /// In an environment other than prod: the run's recipe, to take an instance made from it
    /// instead of running ([`crate::run::reuse`]).
    pub recipe: Option<Box<databuild_log::RunRecipe>>,
}

/// When a slot started or ended a run: by the monotonic clock (for how long it took) and the wall
/// clock (ns since the epoch, for its events).
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Stamp {
    pub at: Instant,
    pub at_ns: i64,
}

impl Stamp {
    pub fn now() -> Stamp {
        Stamp {
            at: Instant::now(),
            at_ns: databuild_log::event::now_ns(),
        }
    }
}

/// What a slot reports to the scheduler, in the order it happened, with when it happened: the
/// scheduler may read it up to 100 ms later.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Report {
    /// A slot took the run.
    Started { node: usize, at: Stamp },
    /// Its process started (the executor said so).
    Running { node: usize, at: Stamp },
    /// (Boxed: the reports wait in a queue, most of them starts.)
    Ended {
        node: usize,
        at: Stamp,
        ended: Box<Ended>,
    },
}

/// Claimed runs waiting for a slot, and what the slots report back.
#[derive(Default)]
pub(crate) struct Launches {
    queue: Mutex<Queue>,
    added: Condvar,
    /// While at least this many runs wait, a run that built need not wake the scheduler.
    quiet_while: usize,
}

#[derive(Default)]
struct Queue {
    runs: VecDeque<Launch>,
    /// Set by a slot whose run did not build (`ended`), until the scheduler has decided whether the
    /// build goes on: no slot starts a run meanwhile.
    paused: bool,
    closed: bool,
    /// The slots' reports the scheduler has not read, in the order they were made: one list, so
    /// the scheduler sees the same sequence however its wake-ups fall, and a build makes the
    /// same events each time (CONTRACT §5).
    reports: Vec<Report>,
}

impl Launches {
    /// A queue whose slots report a built run at once only when fewer than `quiet_while` runs
    /// wait: the point below which the scheduler claims more.
    pub fn new(quiet_while: usize) -> Launches {
        Launches {
            quiet_while,
            ..Launches::default()
        }
    }

    pub fn push(&self, launch: Launch) {
        self.lock().runs.push_back(launch);
        self.added.notify_one();
    }

    /// Takes back the runs no slot has taken yet.
    pub fn drain(&self) -> Vec<Launch> {
        self.lock().runs.drain(..).collect()
    }

    /// Lets the slots take runs again after a run that did not build paused them.
    pub fn resume(&self) {
        let mut queue = self.lock();
        if queue.paused {
            queue.paused = false;
            drop(queue);
            self.added.notify_all();
        }
    }

    /// Lets the slots' threads end, each once its current run does.
    pub fn close(&self) {
        self.lock().closed = true;
        self.added.notify_all();
    }

    /// The next run, waiting for one (and while paused); `None` once closed.
    pub fn next(&self) -> Option<Launch> {
        let mut queue = self.lock();
        loop {
            if !queue.paused {
                if let Some(launch) = queue.runs.pop_front() {
                    return Some(launch);
                }
            }
            if queue.closed {
                return None;
            }
            queue = self.added.wait(queue).expect("launch queue lock");
        }
    }

    /// Notes that a slot starts a run, now. A start decides nothing, so it wakes no one: the
    /// scheduler reads it when it next wakes, before the run's end. Each wake-up of its thread
    /// costs CPU and, where the cores run jobs, preempts one of them.
    pub fn started(&self, node: usize) {
        let at = Stamp::now();
        self.lock().reports.push(Report::Started { node, at });
    }

    /// Notes that a run's process started, now (its slot took it at `started`).
    pub fn running(&self, node: usize) {
        let at = Stamp::now();
        self.lock().reports.push(Report::Running { node, at });
    }

    /// Notes that a run ended, now, and says whether the scheduler must wake for it at once:
    /// when it did not build, or when fewer than `quiet_while` runs wait (the scheduler claims
    /// more). Otherwise it waits for the next wake-up: the build defers completions to its next
    /// claim anyway, and the scheduler wakes at least every 100 ms. A run that did not build also
    /// pauses the queue, in the same step: whether the build goes on is the scheduler's call (it
    /// may stop), and no report it reads before this one may resume the queue first.
    pub fn ended(&self, node: usize, ended: Ended) -> bool {
        let at = Stamp::now();
        let urgent = ended.outcome != RunOutcome::Succeeded || ended.held_back().is_some();
        let mut queue = self.lock();
        queue.paused |= urgent;
        let wake = urgent || queue.runs.len() < self.quiet_while.max(1);
        queue.reports.push(Report::Ended {
            node,
            at,
            ended: Box::new(ended),
        });
        wake
    }

    /// The reports made since the last call, in order.
    pub fn take_reports(&self) -> Vec<Report> {
        std::mem::take(&mut self.lock().reports)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().expect("launch queue lock")
    }
}

/// Runs a launch to its end. One cancelled while it waited in the queue does not start, nor one
/// whose process lost its lease.
/// `running` hears when the run's process starts.
pub(crate) fn run(
    executor: &dyn Executor,
    store: &dyn databuild_log::EventStore,
    launch: &Launch,
    lease: &Lease,
    running: &dyn Fn(),
    instances: crate::run::reuse::Instances<'_>,
) -> Ended {
    if launch.cancel.load(Ordering::SeqCst) || !lease.good() {
        return Ended::of(RunOutcome::Cancelled);
    }
    if let Some(outcome) = inputs_gone(&launch.spec) {
        return Ended::of(outcome);
    }
    let taken = (launch.recipe.as_deref())
        .and_then(|recipe| crate::run::reuse::take(&launch.spec, recipe, instances));
    let executor_id = Mutex::new(None);
    let Finished {
        mut outcome,
        mut resources,
    } = match &taken {
        Some(_) => {
            running();
            Finished::from(RunOutcome::Succeeded)
        }
        None => executor.run(&launch.spec, &launch.cancel, &|began| match began {
            Began::Submitted(id) => *executor_id.lock().expect("id lock") = Some(id.to_string()),
            Began::Running => running(),
        }),
    };
    let mut report = None;
    let mut metrics = None;
    if outcome == RunOutcome::Succeeded && taken.is_none() {
        match read_report(&launch.spec) {
            Ok((r, m)) => (report, metrics) = (r, m),
            Err(message) => outcome = RunOutcome::failed(message, Some(0)),
        }
    }
    let mut checks = Vec::new();
    if outcome == RunOutcome::Succeeded {
        match run_checks(executor, store, launch, report.as_ref()) {
            Ok(Some(results)) => checks = results,
            Ok(None) => outcome = RunOutcome::Cancelled,
            Err(e) => outcome = RunOutcome::failed(e.to_string(), Some(0)),
        }
    }
    // Hashed after the checks, which read the staged outputs too (the page cache then serves
    // this read), and before the completion is recorded with the versions.
    let mut versions = Vec::new();
    if let (Some(taken), RunOutcome::Succeeded) = (&taken, &outcome) {
        versions = taken.versions.clone();
        resources.output_bytes = Some(taken.bytes);
    } else if outcome == RunOutcome::Succeeded && !launch.spec.check {
        match crate::run::publish::output_versions(&launch.spec, &launch.legacy) {
            Ok(v) => {
                versions = v.versions;
                resources.output_bytes = Some(v.bytes);
            }
            Err(e) => outcome = RunOutcome::failed(e.to_string(), Some(0)),
        }
    }
    // Anomaly checks last: they judge what the run measured, its outputs' size too.
    if outcome == RunOutcome::Succeeded {
        checks.extend(judge_metrics(store, launch, report.as_ref(), &resources));
    }
    Ended {
        outcome,
        executor_id: executor_id.into_inner().expect("id lock"),
        report,
        checks,
        versions,
        resources: Box::new(resources),
        metrics: metrics.map(Box::new),
        reused_from: taken.map(|t| Box::new(t.from)),
    }
}

/// A successful run's report (`DATABUILD_REPORT`) and the metrics it reported, checked against
/// its outputs: a report that cannot be kept fails the run, with what is wrong.
fn read_report(
    spec: &RunSpec,
) -> Result<(Option<serde_json::Value>, Option<ReportedMetrics>), String> {
    let report = crate::run::contract::read_report(&spec.report_path())?;
    let metrics = crate::run::contract::reported_metrics(report.as_ref(), &spec.outputs)
        .map_err(|e| e.to_string())?;
    Ok((report, metrics))
}

/// The checks of a run that succeeded: those its job reported, then the graph's, each run on the
/// same executor against the run's staged outputs. `None` if the build was cancelled meanwhile.
fn run_checks(
    executor: &dyn Executor,
    store: &dyn databuild_log::EventStore,
    launch: &Launch,
    report: Option<&serde_json::Value>,
) -> Result<Option<Vec<CheckOutcome>>, crate::check::InlineCheckError> {
    let spec = &launch.spec;
    let mut results = crate::check::inline(report, &spec.outputs)?;
    let logs_dir = logs_dir(spec);
    let place = CheckPlace {
        job_run_id: &spec.job_run_id,
        build_request_id: Some(&spec.build_request_id),
        graph_dir: &spec.graph_dir,
        data_dir: &spec.data_dir,
        logs_dir: &logs_dir,
        history: store,
        measured: &|_, _| None,
    };
    for c in launch.checks.iter().filter(|c| c.metric.is_none()) {
        match crate::run::check::run(executor, &place, c, &launch.cancel) {
            Some(result) => results.push(result),
            None => return Ok(None),
        }
    }
    Ok(Some(results))
}

/// The anomaly checks of a run that succeeded: each output's value (reported by the job, or a
/// resource measured of the run) against the history of its output. No process runs.
fn judge_metrics(
    store: &dyn databuild_log::EventStore,
    launch: &Launch,
    report: Option<&serde_json::Value>,
    resources: &super::RunResources,
) -> Vec<CheckOutcome> {
    let spec = &launch.spec;
    let logs_dir = logs_dir(spec);
    let measured = |r: &str, name: &str| {
        crate::check::reported(report, r, name).or_else(|| {
            resources
                .values()
                .find(|(n, _)| *n == name)
                .map(|(_, v)| v as f64)
        })
    };
    let place = CheckPlace {
        job_run_id: &spec.job_run_id,
        build_request_id: Some(&spec.build_request_id),
        graph_dir: &spec.graph_dir,
        data_dir: &spec.data_dir,
        logs_dir: &logs_dir,
        history: store,
        measured: &measured,
    };
    launch
        .checks
        .iter()
        .filter(|c| c.metric.is_some())
        .filter_map(|c| crate::run::check::run_metric(&place, c))
        .collect()
}

fn logs_dir(spec: &RunSpec) -> std::path::PathBuf {
    spec.log_path
        .parent()
        .unwrap_or(std::path::Path::new("."))
        .to_path_buf()
}

/// A run whose inputs' data is gone (deleted since planning, or by another job) is not started:
/// it fails as missing those inputs, and the build makes them again before it runs it.
fn inputs_gone(spec: &RunSpec) -> Option<RunOutcome> {
    let gone: Vec<String> = spec
        .present_inputs
        .iter()
        .filter(|i| !spec.data_dir.join(i).exists())
        .cloned()
        .collect();
    let first = gone.first()?;
    Some(RunOutcome::Failed {
        message: format!(
            "not started: the data of its input `{first}` (`{}`) is gone{}",
            spec.data_dir.join(first).display(),
            match gone.len() {
                1 => String::new(),
                n => format!(" ({} more inputs too)", n - 1),
            }
        ),
        exit_code: None,
        missing_deps: gone,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(node: usize) -> Launch {
        Launch {
            node,
            spec: RunSpec::default(),
            cancel: Arc::default(),
            checks: Vec::new(),
            legacy: Vec::new(),
            recipe: None,
        }
    }

    #[test]
    fn slots_take_runs_in_order_until_closed() {
        let launches = Launches::default();
        launches.push(launch(1));
        launches.push(launch(2));
        assert_eq!(launches.next().map(|l| l.node), Some(1));
        std::thread::scope(|s| {
            let waiting = s.spawn(|| {
                let mut taken = Vec::new();
                while let Some(l) = launches.next() {
                    taken.push(l.node);
                }
                taken
            });
            launches.push(launch(3));
            std::thread::sleep(std::time::Duration::from_millis(50));
            launches.close();
            assert_eq!(waiting.join().unwrap(), [2, 3]);
        });
        assert!(launches.drain().is_empty());
    }

    #[test]
    fn a_paused_queue_holds_its_runs_until_resumed() {
        let launches = Launches::default();
        launches.push(launch(1));
        // A run that did not build pauses the queue.
        launches.ended(0, Ended::of(RunOutcome::Cancelled));
        std::thread::scope(|s| {
            let waiting = s.spawn(|| launches.next().map(|l| l.node));
            std::thread::sleep(std::time::Duration::from_millis(50));
            assert!(!waiting.is_finished(), "took a run while paused");
            launches.resume();
            assert_eq!(waiting.join().unwrap(), Some(1));
        });
    }

    /// An executor that says its process started (or not), then ends as told.
    struct Fake {
        starts: bool,
        outcome: RunOutcome,
    }

    impl Executor for Fake {
        fn run(&self, _: &RunSpec, _: &AtomicBool, began: &dyn Fn(Began<'_>)) -> Finished {
            began(Began::Submitted("fake:1"));
            if self.starts {
                began(Began::Running);
            }
            self.outcome.clone().into()
        }
    }

    /// A run is `running` only once its executor says its process started: not one cancelled
    /// in the queue, nor one whose process could not start; its executor id is kept either way.
    #[test]
    fn a_run_is_running_only_once_its_executor_says_its_process_started() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn databuild_log::EventStore> =
            Arc::new(databuild_log::SqliteStore::open(&dir.path().join("events.db")).unwrap());
        let lease = Lease::new(store.clone(), std::time::Duration::from_secs(30));
        let runs = |executor: &Fake, launch: &Launch| {
            let started = std::sync::atomic::AtomicUsize::new(0);
            let running = || {
                started.fetch_add(1, Ordering::SeqCst);
            };
            let ended = run(executor, &*store, launch, &lease, &running, &|_, _| None);
            (started.into_inner(), ended)
        };
        let starts = Fake {
            starts: true,
            outcome: RunOutcome::Succeeded,
        };
        let (started, ended) = runs(&starts, &launch(1));
        assert_eq!((started, &ended.outcome), (1, &RunOutcome::Succeeded));
        assert_eq!(ended.executor_id.as_deref(), Some("fake:1"));
        let cannot = Fake {
            starts: false,
            outcome: RunOutcome::failed("cannot spawn".to_string(), None),
        };
        let (started, ended) = runs(&cannot, &launch(2));
        assert_eq!(started, 0);
        assert_eq!(ended.executor_id.as_deref(), Some("fake:1"));
        let cancelled = launch(3);
        cancelled.cancel.store(true, Ordering::SeqCst);
        let (started, ended) = runs(&starts, &cancelled);
        assert_eq!((started, ended.outcome), (0, RunOutcome::Cancelled));
    }

    /// What a report says, its times aside.
    fn said(report: &Report) -> (&'static str, usize, Option<&Ended>) {
        match report {
            Report::Started { node, .. } => ("started", *node, None),
            Report::Running { node, .. } => ("running", *node, None),
            Report::Ended { node, ended, .. } => ("ended", *node, Some(&**ended)),
        }
    }

    #[test]
    fn a_built_run_wakes_the_scheduler_only_when_few_runs_wait() {
        let launches = Launches::new(2);
        let built = Ended::of(RunOutcome::Succeeded);
        let failed = Ended::of(RunOutcome::failed("exit 1".to_string(), Some(1)));
        let before = Stamp::now();
        launches.started(7);
        // Fewer than two wait: the scheduler is to claim more.
        launches.push(launch(1));
        assert!(launches.ended(7, built.clone()));
        // Two wait: a run that built waits for the next wake-up; one that failed does not, and
        // holds the queue back until the scheduler has read it.
        launches.push(launch(2));
        assert!(!launches.ended(8, built.clone()));
        assert!(!launches.lock().paused);
        assert!(launches.ended(9, failed.clone()));
        assert!(launches.lock().paused);
        // Every report is kept, in order, whether it woke the scheduler or not, with when it
        // was made.
        let reports = launches.take_reports();
        assert_eq!(
            reports.iter().map(said).collect::<Vec<_>>(),
            [
                ("started", 7, None),
                ("ended", 7, Some(&built)),
                ("ended", 8, Some(&built)),
                ("ended", 9, Some(&failed)),
            ]
        );
        let stamps: Vec<Stamp> = reports
            .iter()
            .map(|r| match r {
                Report::Started { at, .. }
                | Report::Running { at, .. }
                | Report::Ended { at, .. } => *at,
            })
            .collect();
        assert!(stamps[0].at >= before.at && stamps[0].at_ns >= before.at_ns);
        assert!(stamps.windows(2).all(|w| w[0].at <= w[1].at));
        assert!(launches.take_reports().is_empty());
    }

    #[test]
    fn a_run_held_back_by_a_check_wakes_the_scheduler() {
        let launches = Launches::new(1);
        launches.push(launch(1));
        let mut held = Ended::of(RunOutcome::Succeeded);
        held.checks.push(CheckOutcome {
            partition_ref: "a".to_string(),
            name: "rows".to_string(),
            version: None,
            command: Vec::new(),
            blocking: true,
            passed: false,
            message: "no rows".to_string(),
            metrics: None,
            inline: true,
            code_versions: Default::default(),
        });
        assert!(held.held_back().is_some());
        assert!(launches.ended(3, held));
    }

    #[test]
    fn drained_runs_are_not_taken() {
        let launches = Launches::default();
        launches.push(launch(1));
        assert_eq!(launches.drain().len(), 1);
        launches.close();
        assert!(launches.next().is_none());
    }
}
