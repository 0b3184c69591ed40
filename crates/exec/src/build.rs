//! `build`: plan, then run the plan's job runs as their inputs become ready.
//!
//! The scheduler is event-driven: a ready queue fed by completions, each run on its own thread
//! reporting back over a channel; nothing rescans the plan. Every state change is appended to the
//! event log by this one loop, and claiming a partition (`building`) goes through the log, which
//! refuses a second claim: when another build got there first, this one waits for it instead
//! (delegation). Runs whose driving process died are found by their recorded owner and closed.

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use databuild_core::{PartitionRef, Plan, PlanRequest, PlannedRun, Producer};
use databuild_log::{
    AfterFailure, BuildQuery, Event, EventStore, LogError, RefusalKind, RunQuery, Status,
};
use rustc_hash::{FxHashMap, FxHashSet};
use serde::Serialize;

use crate::engine::{Engine, EngineError, Result};
use crate::local::{Executor, RunOutcome, RunSpec, DEFAULT_LOG_LIMIT};
use crate::owner::{owner_dead, this_owner, HEARTBEAT_EVERY};
use crate::slots::{Ended, Launch, Launches};
use crate::versions::data_version;

/// How many times a run may come back with `DATABUILD_MISSING_DEPS` before it fails.
const MAX_MISSING_DEP_ROUNDS: u32 = 3;
/// The most runs a build claims beyond its slots, for slots to start the moment they free.
/// Claimed runs show as running in the log; a few of them cut the log writes per run by as much.
const MAX_CLAIM_AHEAD: usize = 8;
/// How long a completion may wait for a claim to carry it into the log.
const MAX_DEFER: Duration = Duration::from_millis(100);
/// The scheduler's loop wakes at least this often, to check for cancellation and heartbeats.
const IDLE_WAKE: Duration = Duration::from_millis(100);

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub refs: Vec<PartitionRef>,
    /// Rebuild the requested refs even if live and fresh.
    pub force: bool,
    /// Most runs at once.
    pub parallel: usize,
    /// Keep starting runs that do not depend on a failure.
    pub keep_going: bool,
    /// Accept stale partitions instead of rebuilding them.
    pub allow_stale: bool,
    /// Read these tables' aliases as these versions (see [`PlanRequest::pins`]).
    pub pins: BTreeMap<String, u32>,
}

impl Default for BuildOptions {
    /// Nothing requested yet; as many runs at once as this machine has cores.
    fn default() -> Self {
        BuildOptions {
            refs: Vec::new(),
            force: false,
            parallel: std::thread::available_parallelism().map_or(1, |n| n.get()),
            keep_going: false,
            allow_stale: false,
            pins: BTreeMap::new(),
        }
    }
}

/// What a build did (contract section 4, `build --json`).
#[derive(Debug, Clone, Serialize)]
pub struct BuildSummary {
    pub build_request_id: String,
    /// `completed`, `failed` or `cancelled`.
    pub status: Status,
    pub built: Vec<String>,
    pub skipped: Vec<String>,
    pub delegated: Vec<String>,
    /// Requested refs that are not live at the end of the build (contract section 4).
    pub failed: Vec<String>,
    /// Runs that ran and failed for good (not retried), each with its last log line.
    pub failures: Vec<RunFailure>,
    /// Outputs of runs that started and were cancelled.
    pub cancelled: Vec<String>,
    /// Outputs of runs the build never started (it stopped, or an input failed).
    pub not_started: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

impl BuildSummary {
    /// A build that ended before any run: every requested ref is not live.
    fn nothing_ran(id: &str, status: Status, requested: Vec<String>, message: String) -> Self {
        BuildSummary {
            build_request_id: id.to_string(),
            status,
            built: Vec::new(),
            skipped: Vec::new(),
            delegated: Vec::new(),
            failed: requested,
            failures: Vec::new(),
            cancelled: Vec::new(),
            not_started: Vec::new(),
            message: Some(message),
        }
    }
}

/// A run that failed, as a summary names it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct RunFailure {
    pub job: String,
    pub job_run_id: String,
    pub outputs: Vec<String>,
    /// Why, as the log records it (`the job ended with exit status 4`).
    pub message: Option<String>,
    /// The last non-empty line of the run's log, if it has one.
    pub log_tail: Option<String>,
}

/// How many failures a summary quotes the logs of (each is a file read).
const QUOTED_FAILURES: usize = 1000;

/// Progress reports, for a progress bar or a log. They carry no information the event log lacks.
#[derive(Debug)]
pub enum Progress<'a> {
    Planned {
        build_request_id: &'a str,
        runs: usize,
        skipped: usize,
        delegated: usize,
    },
    Started {
        job: &'a str,
        outputs: &'a [PartitionRef],
    },
    /// A run ended, and that is its outputs' outcome in this build.
    Finished {
        job: &'a str,
        outputs: &'a [PartitionRef],
        outcome: &'a RunOutcome,
        took: Duration,
    },
    /// A run failed, and another attempt follows.
    Retrying {
        job: &'a str,
        outputs: &'a [PartitionRef],
        message: &'a str,
        /// The attempt that follows (2 for the first retry), of `attempts`.
        attempt: u32,
        attempts: u32,
    },
    /// A run reported missing inputs: they are built first, then it runs again.
    FetchingInputs {
        job: &'a str,
        outputs: &'a [PartitionRef],
        missing: &'a [String],
    },
    /// A run was added while building (a retry, missing dependencies, a takeover).
    Added,
    Note(String),
}

pub trait Observer {
    fn on(&mut self, progress: Progress<'_>);
}

/// An observer that ignores everything.
pub struct Quiet;

impl Observer for Quiet {
    fn on(&mut self, _: Progress<'_>) {}
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    Waiting,
    Ready,
    /// Claimed in the log, waiting for a slot (see `Scheduler::staged`).
    Staged,
    Running,
    Done,
    Failed,
    Cancelled,
}

/// One run of the build (retries reuse the node with a new run id).
struct Node {
    run: PlannedRun,
    id: String,
    attempt: u32,
    missing_rounds: u32,
    state: State,
    /// Unfinished dependencies (runs and delegations).
    waiting_on: usize,
    dependents: Vec<usize>,
    input_versions: BTreeMap<String, String>,
    started: Option<Instant>,
    cancel: Arc<AtomicBool>,
}

/// A partition another build is making, that runs of this build wait for.
struct Wait {
    partition_ref: String,
    dependents: Vec<usize>,
    done: bool,
}

enum Message {
    /// A slot started a claimed run.
    Started {
        node: usize,
        at: Instant,
    },
    Finished {
        node: usize,
        ended: Ended,
    },
    Resolved {
        wait: usize,
        outcome: WaitOutcome,
    },
}

#[derive(Debug)]
enum WaitOutcome {
    Available,
    Failed(String),
    /// The process building it is gone.
    Abandoned,
}

impl Engine {
    /// Makes the requested refs live and fresh. Returns the summary even when the build failed;
    /// errors are for requests that could not be planned or a log that could not be written.
    pub fn build(
        &self,
        options: &BuildOptions,
        executor: &dyn Executor,
        observer: &mut dyn Observer,
        interrupt: &AtomicBool,
    ) -> Result<BuildSummary> {
        let id = self.receive(options)?;
        self.execute(&id, options, executor, observer, interrupt)
    }

    /// Records a new build request (`received`), after closing builds whose process died, and
    /// returns its id. [`Engine::execute`] then carries it out.
    pub fn receive(&self, options: &BuildOptions) -> Result<String> {
        self.close_abandoned_builds()?;
        self.store.heartbeat(&this_owner())?;
        let id = databuild_log::event::new_id();
        let requested: Vec<String> = options.refs.iter().map(|r| r.to_string()).collect();
        self.store
            .append(vec![Event::build_request(&id, Status::Received).with_data(
                |d| {
                    d.requested = requested;
                    d.force = options.force;
                    d.owner = Some(this_owner());
                },
            )])?;
        Ok(id)
    }

    /// Plans and runs a received build request.
    pub fn execute(
        &self,
        id: &str,
        options: &BuildOptions,
        executor: &dyn Executor,
        observer: &mut dyn Observer,
        interrupt: &AtomicBool,
    ) -> Result<BuildSummary> {
        let started_ns = databuild_log::event::now_ns();
        let pinned;
        let options = if self.graph.tables.is_empty() {
            options
        } else {
            pinned = BuildOptions {
                refs: self.pin_aliases(&options.refs, &options.pins),
                ..options.clone()
            };
            &pinned
        };
        let requested: Vec<String> = options.refs.iter().map(|r| r.to_string()).collect();
        if self.store.build_request(id)?.map(|b| b.status) == Some(Status::Cancelled) {
            // Cancelled before it began.
            return Ok(BuildSummary::nothing_ran(
                id,
                Status::Cancelled,
                requested,
                "cancelled".to_string(),
            ));
        }
        self.store
            .append(vec![Event::build_request(id, Status::Planning)])?;
        if !self.graph.tables.is_empty() {
            self.link_tables()?;
        }
        let plan = match self.plan(&PlanRequest {
            refs: options.refs.clone(),
            force: options.force,
            allow_stale: options.allow_stale,
            pins: options.pins.clone(),
        }) {
            Ok(plan) => plan,
            Err(e) => {
                self.store.append(vec![
                    Event::build_request(id, Status::Failed).with_message(e.to_string())
                ])?;
                return Err(e);
            }
        };
        let mut events: Vec<Event> = requested
            .iter()
            .map(|r| Event::partition(Some(id), r, Status::Requested))
            .collect();
        events.push(
            Event::build_request(id, Status::AnalysisCompleted)
                .with_data(|d| d.planned_runs = Some(plan.runs.len() as u64)),
        );
        self.store.append(events)?;
        if let Some(m) = plan.missing.first() {
            // A source partition says why: still open, expired, or never received.
            let why = match self.graph.producer_of(m.partition_ref.as_str()) {
                Some((Producer::Dataset(d), _)) if self.graph.datasets[d].source.is_some() => self
                    .status(&[m.partition_ref.to_string()])
                    .ok()
                    .and_then(|mut s| s.pop())
                    .and_then(|s| s.reasons.into_iter().next())
                    .map(|r| format!(": {r}"))
                    .unwrap_or_default(),
                _ => String::new(),
            };
            let message = format!(
                "external partition `{}` of dataset `{}` is not available{}{why}",
                m.partition_ref,
                m.dataset,
                m.needed_by
                    .as_ref()
                    .map(|n| format!(", needed by {n}"))
                    .unwrap_or_default()
            );
            let mut events: Vec<Event> = requested
                .iter()
                .map(|r| {
                    Event::partition(Some(id), r, Status::Failed).with_message(message.clone())
                })
                .collect();
            events.push(Event::build_request(id, Status::Failed).with_message(message.clone()));
            self.store.append(events)?;
            return Ok(BuildSummary::nothing_ran(
                id,
                Status::Failed,
                requested,
                message,
            ));
        }
        let mut scheduler = Scheduler::new(self, id, options, executor, started_ns);
        scheduler.start(plan, observer)?;
        thread::scope(|scope| scheduler.run(scope, observer, interrupt))
    }

    /// The version an input has now, for the record of a run starting from it.
    fn input_version(&self, r: &str) -> Option<String> {
        match self.graph.producer_of(r)?.0 {
            // Marked while a taint holds, so the run is not stale on the taint's account.
            Producer::Dataset(d) => crate::versions::external_input_version(
                self.store.as_ref(),
                &self.graph.datasets[d],
                &self.data_dir,
                r,
            ),
            Producer::Job { .. } => self.store.partition(r).ok()??.data_version,
            // Runs read aliases as version refs (the planner pins them); never asked.
            Producer::Alias(_) => None,
        }
    }

    /// Closes, truthfully, builds whose driving process on this machine is gone: their unfinished
    /// runs and claims fail with the reason, so no partition stays `building` forever.
    pub fn close_abandoned_builds(&self) -> Result<usize> {
        let unfinished = self.store.build_requests(&BuildQuery {
            unfinished: true,
            limit: 10_000,
            ..Default::default()
        })?;
        let mut closed = 0;
        for b in unfinished {
            if !owner_dead(self.store.as_ref(), b.owner.as_deref()) {
                continue;
            }
            let reason = format!(
                "the databuild process driving it ({}) is gone",
                b.owner.as_deref().unwrap_or("?")
            );
            match self.close_build(&b.build_request_id, Status::Failed, &reason) {
                Ok(()) => closed += 1,
                // Another process may have closed it first; anything else is a bug to report.
                Err(EngineError::Log(LogError::Refused { reason, .. })) => {
                    let now = self.store.build_request(&b.build_request_id)?;
                    if now.is_none_or(|n| {
                        !databuild_log::state::is_terminal(
                            databuild_log::Kind::BuildRequest,
                            n.status,
                        )
                    }) {
                        return Err(EngineError::Invalid(format!(
                            "cannot close abandoned build request {}: {reason}",
                            b.build_request_id
                        )));
                    }
                }
                Err(e) => return Err(e),
            }
        }
        Ok(closed)
    }

    /// Ends a build request and everything it left unfinished, in one batch.
    pub fn close_build(&self, id: &str, status: Status, reason: &str) -> Result<()> {
        let runs = self.store.job_runs(&RunQuery {
            build_request_id: Some(id.to_string()),
            unfinished: true,
            limit: 1_000_000,
            ..Default::default()
        })?;
        // Its driver is gone; what it left running here goes before its claims are released.
        crate::local::end_leftover_jobs(
            &runs
                .iter()
                .filter(|r| r.status == Status::Running)
                .map(|r| r.job_run_id.as_str())
                .collect::<Vec<_>>(),
        );
        let mut events = Vec::new();
        let run_end = if status == Status::Cancelled {
            Status::Cancelled
        } else {
            Status::Failed
        };
        for run in &runs {
            events
                .push(Event::job_run(id, &run.job_run_id, &run.job, run_end).with_message(reason));
        }
        // Cancelled, its partitions go back to what they were; failed (its driver died with
        // jobs running), they are failed.
        for p in self.store.request_partitions(id)? {
            if matches!(
                p.status,
                Status::Available | Status::Failed | Status::Cancelled
            ) {
                continue;
            }
            let mut e = Event::partition(Some(id), &p.partition_ref, run_end).with_message(reason);
            // A claim this build holds is released with it.
            if let Some(row) = self.store.partition(&p.partition_ref)? {
                if row.status == Status::Building
                    && row.job_run_id.is_some()
                    && row.job_run_id == p.job_run_id
                {
                    e = e.with_run(p.job_run_id.as_deref().unwrap_or_default());
                }
            }
            events.push(e);
        }
        if let Some(b) = self.store.build_request(id)? {
            if !databuild_log::state::is_terminal(databuild_log::Kind::BuildRequest, b.status) {
                events.push(Event::build_request(id, status).with_message(reason));
            }
        }
        self.store.append(events)?;
        Ok(())
    }

    /// Cancels a build request. Its process (if alive) sees it and stops its runs; if its process
    /// is gone, its runs are closed here.
    pub fn cancel(&self, id: &str) -> Result<()> {
        let Some(b) = self.store.build_request(id)? else {
            return Err(EngineError::Invalid(format!(
                "no build request `{id}` in the event log"
            )));
        };
        if databuild_log::state::is_terminal(databuild_log::Kind::BuildRequest, b.status) {
            return Err(EngineError::Invalid(format!(
                "build request {id} already ended ({})",
                b.status
            )));
        }
        if owner_dead(self.store.as_ref(), b.owner.as_deref()) {
            return self.close_build(id, Status::Cancelled, "cancelled");
        }
        self.store.append(vec![
            Event::build_request(id, Status::Cancelled).with_message("cancelled")
        ])?;
        Ok(())
    }
}

struct Scheduler<'e> {
    engine: &'e Engine,
    id: String,
    options: &'e BuildOptions,
    executor: &'e dyn Executor,
    nodes: Vec<Node>,
    /// Which node builds each output of this build.
    by_output: FxHashMap<String, usize>,
    waits: Vec<Wait>,
    waiting_for: FxHashMap<String, usize>,
    ready: VecDeque<usize>,
    /// Runs held back by their job's `concurrency`, by job index.
    held: FxHashMap<usize, VecDeque<usize>>,
    /// Runs claimed or running, by job index (what `concurrency` caps).
    running_per_job: FxHashMap<usize, u32>,
    running: usize,
    /// Claimed runs no slot has started yet (in `launches`, or started and not yet reported).
    staged: usize,
    /// Claimed runs, for the slots' threads to take; a slot whose job ends starts the next at
    /// once, with no log write or thread hand-over in between.
    launches: Arc<Launches>,
    /// Slot threads started so far (at most `--parallel`, started as runs need them).
    slot_threads: usize,
    open_waits: usize,
    /// Set after a failure without `--keep-going`: no new runs start.
    stopped: Option<String>,
    cancelled: bool,
    /// The build request was cancelled through the log (by `cancel`), which already recorded it.
    cancelled_outside: bool,
    skipped: Vec<String>,
    /// Tells waiter threads to stop when the build ends before their partitions resolve.
    shutdown: Arc<AtomicBool>,
    /// When the build started (ns): partitions made by others after it were not seen by its plan.
    started_ns: i64,
    tx: mpsc::Sender<Message>,
    rx: mpsc::Receiver<Message>,
    /// Completions not yet written: they go into the log with the next claim (one transaction
    /// instead of two), or when the loop waits with nothing staged, or after `MAX_DEFER`.
    pending: std::cell::RefCell<Vec<Event>>,
    /// When the oldest of `pending` was deferred.
    deferred_at: std::cell::Cell<Option<Instant>>,
    /// Data versions of the partitions this build made, for the runs that read them.
    made: FxHashMap<String, String>,
    /// The run holding each output when the plan was recorded (read in one query): a first
    /// claim compares against it instead of reading the partition again.
    holders: FxHashMap<String, String>,
}

impl Drop for Scheduler<'_> {
    /// However the build ends, the slots' threads end with their current runs.
    fn drop(&mut self) {
        self.launches.close();
    }
}

impl<'e> Scheduler<'e> {
    fn new(
        engine: &'e Engine,
        id: &str,
        options: &'e BuildOptions,
        executor: &'e dyn Executor,
        started_ns: i64,
    ) -> Self {
        let (tx, rx) = mpsc::channel();
        Scheduler {
            pending: Default::default(),
            deferred_at: Default::default(),
            made: FxHashMap::default(),
            holders: FxHashMap::default(),
            engine,
            id: id.to_string(),
            options,
            executor,
            nodes: Vec::new(),
            by_output: FxHashMap::default(),
            waits: Vec::new(),
            waiting_for: FxHashMap::default(),
            ready: VecDeque::new(),
            held: FxHashMap::default(),
            running_per_job: FxHashMap::default(),
            running: 0,
            staged: 0,
            launches: Arc::default(),
            slot_threads: 0,
            open_waits: 0,
            stopped: None,
            cancelled: false,
            cancelled_outside: false,
            skipped: Vec::new(),
            shutdown: Arc::new(AtomicBool::new(false)),
            started_ns,
            tx,
            rx,
        }
    }

    fn store(&self) -> &'e dyn EventStore {
        self.engine.store.as_ref()
    }

    /// Appends events, after any deferred completions.
    fn append(&self, events: Vec<Event>) -> Result<()> {
        let mut all = self.take_pending();
        if all.is_empty() {
            // The plan's thousands of events are not copied into an empty vector.
            all = events;
        } else {
            all.extend(events);
        }
        if !all.is_empty() {
            self.store().append(all)?;
        }
        Ok(())
    }

    /// Writes deferred completions now.
    fn flush(&self) -> Result<()> {
        self.append(Vec::new())
    }

    /// Holds events back to ride along with the next write.
    fn defer(&self, events: Vec<Event>) {
        if self.deferred_at.get().is_none() {
            self.deferred_at.set(Some(Instant::now()));
        }
        self.pending.borrow_mut().extend(events);
    }

    fn take_pending(&self) -> Vec<Event> {
        self.deferred_at.set(None);
        self.pending.take()
    }

    /// How long the loop may wait for a message before deferred events must be written. While
    /// runs are staged, a claim to carry them comes as slots take those; otherwise they go now.
    fn flush_due(&self) -> Result<Duration> {
        let Some(at) = self.deferred_at.get() else {
            return Ok(IDLE_WAKE);
        };
        let left = MAX_DEFER.saturating_sub(at.elapsed());
        if self.staged == 0 || left.is_zero() {
            self.flush()?;
            return Ok(IDLE_WAKE);
        }
        Ok(left.min(IDLE_WAKE))
    }

    /// Records the plan (skipped, delegated, scheduled) and moves the build to `executing`.
    fn start(&mut self, plan: Plan, observer: &mut dyn Observer) -> Result<()> {
        let requested: FxHashSet<&str> = self.options.refs.iter().map(|r| r.as_str()).collect();
        let mut events = Vec::new();
        for r in &plan.skipped {
            if !requested.contains(r.as_str()) {
                continue;
            }
            self.skipped.push(r.to_string());
            if let Some((Producer::Job { job, .. }, _)) = self.engine.graph.producer_of(r.as_str())
            {
                let relies_on = self
                    .store()
                    .partition(r.as_str())?
                    .and_then(|p| p.job_run_id);
                let run = databuild_log::event::new_id();
                events.push(
                    Event::job_run(
                        &self.id,
                        &run,
                        &self.engine.graph.jobs[job].name,
                        Status::Skipped,
                    )
                    .with_data(|d| {
                        d.outputs = vec![r.to_string()];
                        d.relies_on = relies_on;
                    }),
                );
            }
            events.push(Event::partition(
                Some(&self.id),
                r.as_str(),
                Status::Available,
            ));
        }
        self.append(events)?;
        observer.on(Progress::Planned {
            build_request_id: &self.id,
            runs: plan.runs.len(),
            skipped: self.skipped.len(),
            delegated: plan.delegated.len(),
        });
        self.add_plan(plan)?;
        self.append(vec![Event::build_request(&self.id, Status::Executing)])
    }

    /// Adds a plan's runs and delegations to the build, recording them as scheduled. Runs whose
    /// outputs this build already makes are not added twice.
    fn add_plan(&mut self, plan: Plan) -> Result<Vec<usize>> {
        // Sized up front: growing these by doubling copied every event and node already added
        // (a fifth of recording a 2,700-run plan, in `perf`).
        let outputs: usize = plan.runs.iter().map(|r| r.outputs.len()).sum();
        let mut events = Vec::with_capacity(plan.runs.len() + outputs + 2 * plan.delegated.len());
        self.nodes.reserve(plan.runs.len());
        self.by_output.reserve(outputs);
        for d in &plan.delegated {
            self.wait_for(d.partition_ref.as_str(), &d.build_request_id, &mut events);
        }
        let mut local: Vec<Option<usize>> = Vec::with_capacity(plan.runs.len());
        let mut added = Vec::new();
        for run in plan.runs {
            if let Some(&existing) = run
                .outputs
                .iter()
                .find_map(|o| self.by_output.get(o.as_str()))
            {
                local.push(Some(existing));
                continue;
            }
            let index = self.nodes.len();
            let id = databuild_log::event::new_id();
            events.extend(self.scheduled_events(&run, &id));
            let mut waiting_on = 0;
            for dep in run.depends_on.iter().filter_map(|&d| local[d]) {
                if self.nodes[dep].state != State::Done {
                    self.nodes[dep].dependents.push(index);
                    waiting_on += 1;
                }
            }
            for input in &run.inputs {
                if let Some(&w) = self.waiting_for.get(input.as_str()) {
                    if !self.waits[w].done {
                        self.waits[w].dependents.push(index);
                        waiting_on += 1;
                    }
                }
            }
            for o in &run.outputs {
                self.by_output.insert(o.to_string(), index);
            }
            self.nodes.push(Node {
                run,
                id,
                attempt: 1,
                missing_rounds: 0,
                state: State::Waiting,
                waiting_on,
                dependents: Vec::new(),
                input_versions: BTreeMap::new(),
                started: None,
                cancel: Arc::new(AtomicBool::new(false)),
            });
            if waiting_on == 0 {
                self.make_ready(index);
            }
            local.push(Some(index));
            added.push(index);
        }
        self.append(events)?;
        let store = self.store();
        let outputs: Vec<&str> = added
            .iter()
            .flat_map(|&i| self.nodes[i].run.outputs.iter().map(|o| o.as_str()))
            .collect();
        for keys in outputs.chunks(10_000) {
            // Absent from the log: nobody holds it.
            self.holders
                .extend(keys.iter().map(|r| (r.to_string(), String::new())));
            for p in store.partitions_by_ref(keys)? {
                // Only what the plan saw: a partition changed since the build started (another
                // build made or is making it) goes through the full check at launch.
                if p.updated_at < self.started_ns && p.status != Status::Building {
                    let holder = p.job_run_id.unwrap_or_default();
                    self.holders.insert(p.partition_ref, holder);
                } else {
                    self.holders.remove(&p.partition_ref);
                }
            }
        }
        Ok(added)
    }

    fn scheduled_events(&self, run: &PlannedRun, id: &str) -> Vec<Event> {
        let job = &self.engine.graph.jobs[run.job_index];
        let mut events = vec![Event::job_run(&self.id, id, &job.name, Status::Scheduled)
            .with_data(|d| {
                d.outputs = run.outputs.iter().map(|o| o.to_string()).collect();
                d.inputs = run.inputs.iter().map(|o| o.to_string()).collect();
                d.args = run.args().to_vec();
                // Env values often carry secrets: only those the graph marks safe are recorded.
                d.env = run
                    .env()
                    .map(|(k, v)| {
                        let graph = &self.engine.graph;
                        (k.clone(), graph.recorded_env_value(k, v).to_string())
                    })
                    .collect();
                d.job_version = Some(job.version.clone());
            })];
        for o in &run.outputs {
            let mut e =
                Event::partition(Some(&self.id), o.as_str(), Status::Scheduled).with_run(id);
            e.job = Some(job.name.clone());
            events.push(e);
        }
        events
    }

    /// Starts waiting for a partition another build is making.
    fn wait_for(&mut self, r: &str, other: &str, events: &mut Vec<Event>) -> usize {
        if let Some(&w) = self.waiting_for.get(r) {
            return w;
        }
        events.push(Event::partition(Some(&self.id), r, Status::Delegated));
        events.push(Event::delegation(&self.id, r, other));
        let w = self.waits.len();
        self.waits.push(Wait {
            partition_ref: r.to_string(),
            dependents: Vec::new(),
            done: false,
        });
        self.waiting_for.insert(r.to_string(), w);
        self.open_waits += 1;
        w
    }

    fn make_ready(&mut self, node: usize) {
        self.nodes[node].state = State::Ready;
        self.ready.push_back(node);
    }

    fn run<'s>(
        mut self,
        scope: &'s thread::Scope<'s, 'e>,
        observer: &mut dyn Observer,
        interrupt: &AtomicBool,
    ) -> Result<BuildSummary> {
        for w in 0..self.waits.len() {
            self.spawn_waiter(scope, w);
        }
        let mut last_cancel_check = Instant::now();
        let mut last_heartbeat = Instant::now();
        loop {
            if last_heartbeat.elapsed() > HEARTBEAT_EVERY {
                last_heartbeat = Instant::now();
                self.store().heartbeat(&this_owner())?;
            }
            if !self.cancelled {
                if interrupt.load(Ordering::SeqCst) {
                    self.cancel_all("interrupted");
                } else if last_cancel_check.elapsed() > Duration::from_millis(500) {
                    last_cancel_check = Instant::now();
                    if self.store().build_request(&self.id)?.map(|b| b.status)
                        == Some(Status::Cancelled)
                    {
                        self.cancelled_outside = true;
                        self.cancel_all("cancelled");
                    }
                }
            }
            self.start_ready(scope)?;
            // Once stopped, only running runs are waited for.
            let nothing_left = self.open_waits == 0 && self.ready.is_empty() && self.staged == 0;
            // A run a slot took just before the build stopped is reported still: waited for.
            if self.running == 0 && self.staged == 0 && (nothing_left || self.stopped.is_some()) {
                break;
            }
            let wait = self.flush_due()?;
            match self.rx.recv_timeout(wait) {
                Ok(Message::Started { node, at }) => self.started(node, at, observer),
                Ok(Message::Finished { node, ended }) => {
                    self.finished(scope, node, ended, observer)?;
                    if self.stopped.is_none() {
                        self.launches.resume();
                    }
                }
                Ok(Message::Resolved { wait, outcome }) => {
                    self.resolved(scope, wait, outcome, observer)?
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    unreachable!("the scheduler holds a sender")
                }
            }
        }
        self.shutdown.store(true, Ordering::SeqCst);
        self.flush()?;
        self.finish()
    }

    fn cancel_all(&mut self, why: &str) {
        self.cancelled = true;
        self.stopped.get_or_insert_with(|| why.to_string());
        for n in &self.nodes {
            n.cancel.store(true, Ordering::SeqCst);
        }
    }

    /// Keeps the slots fed: it claims runs ahead of them, twice as many as there are slots (at
    /// most `MAX_CLAIM_AHEAD`), refilling in one log write once half are taken. A slot that frees
    /// finds a run waiting, and the log takes one write per few runs.
    fn start_ready<'s>(&mut self, scope: &'s thread::Scope<'s, 'e>) -> Result<()> {
        if let Some(reason) = self.stopped.clone() {
            for launch in self.launches.drain() {
                self.staged -= 1;
                self.unstage(launch.node, &reason)?;
            }
            return Ok(());
        }
        let slots = self.options.parallel.max(1);
        let ahead = (2 * slots).min(MAX_CLAIM_AHEAD);
        while self.staged < ahead / 2 {
            let want = (slots + ahead).saturating_sub(self.running + self.staged);
            if !self.claim_next(scope, want)? {
                break;
            }
        }
        Ok(())
    }

    /// Claims up to `want` ready runs in one log write, with the completions waiting to be
    /// written, and stages them. `false` when no run was ready.
    fn claim_next<'s>(&mut self, scope: &'s thread::Scope<'s, 'e>, want: usize) -> Result<bool> {
        let mut batch = Vec::new();
        let mut events = Vec::new();
        let mut took_any = false;
        while batch.len() < want {
            let Some(node) = self.next_ready() else {
                break;
            };
            took_any = true;
            // Against the holders the plan saw; a run whose outputs it did not see is claimed
            // alone, reading its partitions first.
            let known: Option<Vec<String>> = self.nodes[node]
                .run
                .outputs
                .iter()
                .map(|o| self.holders.remove(o.as_str()))
                .collect();
            match known {
                Some(seen) => {
                    events.extend(self.claim_events(node, seen));
                    self.take_job_slot(node);
                    batch.push(node);
                }
                None => {
                    if self.claim(scope, node)? {
                        self.stage(scope, node);
                    }
                }
            }
        }
        if batch.is_empty() {
            return Ok(took_any);
        }
        match self.append_claims(events)? {
            None => batch.into_iter().for_each(|node| self.stage(scope, node)),
            // Another build changed one of the partitions since the plan: each run is claimed
            // on its own, reading its partitions.
            Some(_) => {
                for node in batch {
                    self.free_job_slot(self.nodes[node].run.job_index);
                    if self.claim(scope, node)? {
                        self.stage(scope, node);
                    }
                }
            }
        }
        Ok(true)
    }

    /// Appends claims with the deferred completions riding along. If the log refuses the claims,
    /// the completions go in alone and the refusal is returned.
    fn append_claims(&self, claims: Vec<Event>) -> Result<Option<LogError>> {
        let deferred = self.take_pending();
        let mut all = deferred.clone();
        all.extend(claims);
        match self.store().append(all) {
            Ok(_) => Ok(None),
            Err(refusal @ LogError::Refused { .. }) => {
                if !deferred.is_empty() {
                    self.store().append(deferred)?;
                }
                Ok(Some(refusal))
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Hands a claimed run to the slots, starting a slot thread if every one is busy.
    fn stage<'s>(&mut self, scope: &'s thread::Scope<'s, 'e>, node: usize) {
        self.nodes[node].state = State::Staged;
        self.staged += 1;
        let spec = self.spec(node, self.log_path(node));
        let cancel = self.nodes[node].cancel.clone();
        self.launches.push(Launch { node, spec, cancel });
        if self.slot_threads < self.options.parallel.max(1)
            && self.slot_threads < self.running + self.staged
        {
            self.slot_threads += 1;
            let (launches, tx, executor) = (self.launches.clone(), self.tx.clone(), self.executor);
            scope.spawn(move || {
                while let Some(launch) = launches.next() {
                    let node = launch.node;
                    let _ = tx.send(Message::Started {
                        node,
                        at: Instant::now(),
                    });
                    let ended = crate::slots::run(executor, &launch);
                    if ended.outcome != RunOutcome::Succeeded {
                        // Whether the build goes on is the scheduler's call (it may stop).
                        launches.pause();
                    }
                    let _ = tx.send(Message::Finished { node, ended });
                }
            });
        }
    }

    /// A slot started a claimed run.
    fn started(&mut self, index: usize, at: Instant, observer: &mut dyn Observer) {
        self.staged -= 1;
        self.running += 1;
        let node = &mut self.nodes[index];
        node.state = State::Running;
        node.started = Some(at);
        observer.on(Progress::Started {
            job: &self.engine.graph.jobs[node.run.job_index].name,
            outputs: &node.run.outputs,
        });
    }

    /// The next ready run its job's `concurrency` lets start; others are held.
    fn next_ready(&mut self) -> Option<usize> {
        while let Some(node) = self.ready.pop_front() {
            let job_index = self.nodes[node].run.job_index;
            let cap = self.engine.graph.jobs[job_index].concurrency;
            let running = self.running_per_job.get(&job_index).copied().unwrap_or(0);
            if cap.is_some_and(|c| running >= c) {
                self.held.entry(job_index).or_default().push_back(node);
                continue;
            }
            return Some(node);
        }
        None
    }

    /// A staged run the build will not start after all (it stopped): released in the log.
    fn unstage(&mut self, index: usize, reason: &str) -> Result<()> {
        self.free_job_slot(self.nodes[index].run.job_index);
        self.end_run(
            index,
            Status::Cancelled,
            &format!("not started: {reason}"),
            None,
            None,
            None,
        )?;
        self.nodes[index].state = State::Cancelled;
        let reason = format!("`{}` was not started", self.nodes[index].run.outputs[0]);
        for d in self.nodes[index].dependents.clone() {
            self.cancel_downstream(d, &reason)?;
        }
        Ok(())
    }

    /// A claimed or running run of the job is over: one more may start, and the runs its
    /// `concurrency` held back go back to the front of the queue.
    fn free_job_slot(&mut self, job_index: usize) {
        if let Some(c) = self.running_per_job.get_mut(&job_index) {
            *c -= 1;
        }
        if let Some(mut held) = self.held.remove(&job_index) {
            while let Some(n) = held.pop_back() {
                self.ready.push_front(n);
            }
        }
    }

    fn log_path(&self, index: usize) -> PathBuf {
        self.engine
            .graph_dir
            .join(".databuild/logs")
            .join(format!("{}.log", self.nodes[index].id))
    }

    /// Claims the node's outputs in the log after reading them: `true` when claimed; `false`
    /// when another build made or is making them meanwhile, and this build relies on that build
    /// instead. (Runs whose holders the plan saw are claimed in batches by `claim_next`.)
    fn claim<'s>(&mut self, scope: &'s thread::Scope<'s, 'e>, index: usize) -> Result<bool> {
        // Check, then claim with compare-and-swap on what was seen: if the partitions changed in
        // between, the log refuses the claim and we look again.
        let mut attempts = 0;
        loop {
            attempts += 1;
            let mut seen = Vec::new();
            let mut made_by_others = 0;
            for o in &self.nodes[index].run.outputs {
                let row = self.store().partition(o.as_str())?;
                if let Some(p) = &row {
                    if p.status == Status::Building
                        && p.build_request_id.as_deref() != Some(&self.id)
                    {
                        return self.lost_claim(scope, index).map(|()| false);
                    }
                    if p.status == Status::Available
                        && p.build_request_id.as_deref() != Some(&self.id)
                        && p.updated_at >= self.started_ns
                    {
                        made_by_others += 1;
                    }
                }
                seen.push(row.and_then(|p| p.job_run_id).unwrap_or_default());
            }
            if made_by_others == seen.len() {
                return self.adopt(index).map(|()| false);
            }
            let events = self.claim_events(index, seen);
            let Some(refusal) = self.append_claims(events)? else {
                break;
            };
            let LogError::Refused { refusal: kind, .. } = &refusal else {
                unreachable!("matched above")
            };
            match kind {
                RefusalKind::AlreadyBeingBuilt => {
                    return self.lost_claim(scope, index).map(|()| false)
                }
                RefusalKind::ChangedSinceChecked if attempts < 5 => {}
                _ => return Err(refusal.into()),
            }
        }
        self.take_job_slot(index);
        Ok(true)
    }

    /// A claim's events: the run starts, holding its outputs, each claimed against the run that
    /// held it when `seen` (compare-and-swap in the log). Fixes the versions of the run's inputs.
    fn claim_events(&mut self, index: usize, seen: Vec<String>) -> Vec<Event> {
        let log_path = self.log_path(index);
        let job = &self.engine.graph.jobs[self.nodes[index].run.job_index];
        let input_versions = self.nodes[index]
            .run
            .inputs
            .iter()
            .filter_map(|i| {
                let made = self.made.get(i.as_str()).cloned();
                Some((
                    i.to_string(),
                    made.or_else(|| self.engine.input_version(i.as_str()))?,
                ))
            })
            .chain(self.nodes[index].run.aliased().iter().map(|(alias, read)| {
                (
                    alias.to_string(),
                    format!("{}{read}", crate::versions::ALIAS_PREFIX),
                )
            }))
            .collect();
        let node = &mut self.nodes[index];
        node.input_versions = input_versions;
        let mut events = vec![
            Event::job_run(&self.id, &node.id, &job.name, Status::Running).with_data(|d| {
                d.pid = Some(std::process::id());
                d.host = crate::owner::hostname();
                d.owner = Some(this_owner());
                d.input_versions = node.input_versions.clone();
                d.log_path = Some(log_path.display().to_string());
            }),
        ];
        for (o, last) in node.run.outputs.iter().zip(seen) {
            let mut e = Event::partition(Some(&self.id), o.as_str(), Status::Building)
                .with_run(&node.id)
                .with_data(|d| d.claim_after = Some(last));
            e.job = Some(job.name.clone());
            events.push(e);
        }
        events
    }

    /// A claimed run counts against its job's `concurrency` until it ends.
    fn take_job_slot(&mut self, index: usize) {
        *self
            .running_per_job
            .entry(self.nodes[index].run.job_index)
            .or_default() += 1;
    }

    fn spec(&self, index: usize, log_path: PathBuf) -> RunSpec {
        let engine = self.engine;
        let node = &self.nodes[index];
        let job = &engine.graph.jobs[node.run.job_index];
        let mut env = job.env.clone();
        env.extend(node.run.env().map(|(k, v)| (k.clone(), v.clone())));
        // Not part of the data version: which attempt made a partition does not change it.
        env.insert("DATABUILD_ATTEMPT".to_string(), node.attempt.to_string());
        let fields = match node.run.outputs.as_slice() {
            [single] => engine
                .graph
                .producer_of(single.as_str())
                .map(|(p, values)| {
                    engine
                        .graph
                        .pattern_of(p)
                        .fields()
                        .zip(values)
                        .map(|((name, _), v)| (name.to_string(), v.to_string()))
                        .collect()
                })
                .unwrap_or_default(),
            _ => Vec::new(),
        };
        if node.run.is_carry_forward() {
            // Which version the partition is carried forward from, for the migrate command.
            let from = node.run.outputs.first().and_then(|o| {
                let events = engine
                    .store
                    .events(&databuild_log::EventFilter {
                        partition_ref: Some(o.to_string()),
                        ..Default::default()
                    })
                    .ok()?;
                // The last run that wrote it (skipped runs only relied on it).
                events
                    .iter()
                    .rev()
                    .filter(|e| e.status == Status::Available)
                    .filter_map(|e| engine.store.job_run(e.job_run_id.as_deref()?).ok()?)
                    .find(|run| run.status == Status::Completed && run.job_run_id != node.id)?
                    .job_version
            });
            env.insert(
                "DATABUILD_MIGRATE_FROM_VERSION".to_string(),
                from.unwrap_or_default(),
            );
        }
        let command = match job.deps {
            _ if node.run.is_carry_forward() => job.migrate.clone().unwrap_or_default(),
            // Table versions are built by this very binary (`databuild table-job`).
            databuild_core::Deps::Table { .. } => std::env::current_exe()
                .map(|exe| vec![exe.display().to_string(), "table-job".to_string()])
                .unwrap_or_else(|_| job.command.clone()),
            _ => job.command.clone(),
        };
        RunSpec {
            job_run_id: node.id.clone(),
            build_request_id: self.id.clone(),
            job: job.name.clone(),
            command,
            args: node.run.args().to_vec(),
            env,
            outputs: node.run.outputs.iter().map(|o| o.to_string()).collect(),
            inputs: node.run.inputs.iter().map(|o| o.to_string()).collect(),
            present_inputs: node
                .run
                .inputs
                .iter()
                .filter(|i| match engine.graph.producer_of(i.as_str()) {
                    Some((Producer::Job { .. }, _)) => true,
                    Some((Producer::Dataset(d), _)) => {
                        let ds = &engine.graph.datasets[d];
                        ds.exists.is_none() && ds.source.is_none() && ds.upstream.is_none()
                    }
                    _ => false,
                })
                .map(|i| i.to_string())
                .collect(),
            fields,
            graph_dir: engine.graph_dir.clone(),
            data_dir: engine.data_dir.clone(),
            log_path,
            timeout: job.timeout,
            log_limit: DEFAULT_LOG_LIMIT,
            cpus: job.cpus,
            mem: job.mem.clone(),
        }
    }

    /// Another build made all of this run's outputs while it waited to start: rely on its result.
    fn adopt(&mut self, index: usize) -> Result<()> {
        let node = &self.nodes[index];
        let job = &self.engine.graph.jobs[node.run.job_index].name;
        let mut events = Vec::new();
        let mut relies_on = None;
        for o in &node.run.outputs {
            let row = self
                .store()
                .partition(o.as_str())?
                .expect("checked just before");
            relies_on = row.job_run_id.clone();
            events.push(Event::partition(
                Some(&self.id),
                o.as_str(),
                Status::Delegated,
            ));
            events.push(Event::delegation(
                &self.id,
                o.as_str(),
                row.build_request_id.as_deref().unwrap_or_default(),
            ));
            events.push(Event::partition(
                Some(&self.id),
                o.as_str(),
                Status::Available,
            ));
        }
        events.insert(
            0,
            Event::job_run(&self.id, &node.id, job, Status::Skipped)
                .with_message("another build made its outputs meanwhile")
                .with_data(|d| d.relies_on = relies_on),
        );
        self.append(events)?;
        self.nodes[index].state = State::Done;
        for d in self.nodes[index].dependents.clone() {
            self.dependency_done(d);
        }
        Ok(())
    }

    /// Another build claimed an output between planning and starting: wait for it instead.
    fn lost_claim<'s>(&mut self, scope: &'s thread::Scope<'s, 'e>, index: usize) -> Result<()> {
        let job = self.engine.graph.jobs[self.nodes[index].run.job_index]
            .name
            .clone();
        let outputs: Vec<String> = self.nodes[index]
            .run
            .outputs
            .iter()
            .map(|o| o.to_string())
            .collect();
        let mut events = Vec::new();
        let mut waits = Vec::new();
        for o in &outputs {
            let holder = self
                .store()
                .partition(o)?
                .filter(|p| p.status == Status::Building);
            if let Some(p) = holder {
                let other = p.build_request_id.unwrap_or_default();
                let w = self.wait_for(o, &other, &mut events);
                waits.push(w);
            }
        }
        events.insert(
            0,
            Event::job_run(&self.id, &self.nodes[index].id, &job, Status::Cancelled).with_message(
                "another build started building its outputs first; waiting for it instead",
            ),
        );
        self.append(events)?;
        let dependents = std::mem::take(&mut self.nodes[index].dependents);
        self.nodes[index].state = State::Cancelled;
        for &d in &dependents {
            self.nodes[d].waiting_on += waits.len().saturating_sub(1);
        }
        if waits.is_empty() {
            // Nobody holds it any more: release the dependents as if built elsewhere.
            for d in dependents {
                self.dependency_done(d);
            }
            return Ok(());
        }
        for &w in &waits {
            self.waits[w].dependents.extend(dependents.iter().copied());
            self.spawn_waiter(scope, w);
        }
        Ok(())
    }

    fn spawn_waiter<'s>(&self, scope: &'s thread::Scope<'s, 'e>, w: usize) {
        let store = self.store();
        let r = self.waits[w].partition_ref.clone();
        let tx = self.tx.clone();
        let shutdown = self.shutdown.clone();
        scope.spawn(move || {
            let outcome = loop {
                if shutdown.load(Ordering::SeqCst) {
                    return;
                }
                match store.partition(&r) {
                    Ok(Some(p)) if p.status == Status::Building => {
                        let owner = p
                            .job_run_id
                            .as_deref()
                            .and_then(|id| store.job_run(id).ok().flatten())
                            .and_then(|run| run.owner);
                        if owner_dead(store, owner.as_deref()) {
                            break WaitOutcome::Abandoned;
                        }
                    }
                    Ok(Some(p)) if p.status == Status::Available => break WaitOutcome::Available,
                    Ok(Some(p)) => {
                        break WaitOutcome::Failed(format!(
                            "the build it was delegated to ended it `{}`{}",
                            p.status,
                            p.message.map(|m| format!(": {m}")).unwrap_or_default()
                        ))
                    }
                    Ok(None) => {
                        break WaitOutcome::Failed(
                            "the build it was delegated to never built it".into(),
                        )
                    }
                    Err(e) => break WaitOutcome::Failed(e.to_string()),
                }
                thread::sleep(Duration::from_millis(50));
            };
            let _ = tx.send(Message::Resolved { wait: w, outcome });
        });
    }

    fn resolved<'s>(
        &mut self,
        scope: &'s thread::Scope<'s, 'e>,
        w: usize,
        outcome: WaitOutcome,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        let r = self.waits[w].partition_ref.clone();
        match outcome {
            WaitOutcome::Available => {
                self.append(vec![Event::partition(
                    Some(&self.id),
                    &r,
                    Status::Available,
                )])?;
                self.close_wait(w);
                for d in std::mem::take(&mut self.waits[w].dependents) {
                    self.dependency_done(d);
                }
            }
            WaitOutcome::Failed(message) => {
                self.append(vec![Event::partition(Some(&self.id), &r, Status::Failed)
                    .with_message(message.clone())])?;
                self.close_wait(w);
                let reason = format!("`{r}` failed in the build it was delegated to");
                for d in std::mem::take(&mut self.waits[w].dependents) {
                    self.cancel_downstream(d, &reason)?;
                }
                self.stop_unless_keep_going(&reason);
            }
            WaitOutcome::Abandoned => {
                // Close the dead build, then build the partition here.
                self.engine.close_abandoned_builds()?;
                observer.on(Progress::Note(format!(
                    "the build making `{r}` is gone; building it here"
                )));
                self.waiting_for.remove(&r);
                self.close_wait(w);
                let dependents = std::mem::take(&mut self.waits[w].dependents);
                let plan = self.engine.plan(&PlanRequest {
                    refs: vec![
                        PartitionRef::new(&r).map_err(|e| EngineError::Invalid(e.to_string()))?
                    ],
                    ..Default::default()
                })?;
                let before = self.waits.len();
                self.add_plan(plan)?;
                for w in before..self.waits.len() {
                    self.spawn_waiter(scope, w);
                }
                observer.on(Progress::Added);
                match self.by_output.get(&r).copied() {
                    Some(n) if self.nodes[n].state != State::Done => {
                        self.nodes[n].dependents.extend(dependents)
                    }
                    _ => {
                        for d in dependents {
                            self.dependency_done(d);
                        }
                    }
                }
            }
        }
        Ok(())
    }

    fn close_wait(&mut self, w: usize) {
        if !self.waits[w].done {
            self.waits[w].done = true;
            self.open_waits -= 1;
        }
    }

    fn dependency_done(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.waiting_on = n.waiting_on.saturating_sub(1);
        if n.waiting_on == 0 && n.state == State::Waiting {
            self.make_ready(node);
        }
    }

    fn finished<'s>(
        &mut self,
        scope: &'s thread::Scope<'s, 'e>,
        index: usize,
        Ended {
            outcome,
            executor_id,
            report,
        }: Ended,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        let job_index = self.nodes[index].run.job_index;
        let job = &self.engine.graph.jobs[job_index];
        self.running -= 1;
        self.free_job_slot(job_index);
        let took = self.nodes[index]
            .started
            .map(|s| s.elapsed())
            .unwrap_or_default();
        let node = &self.nodes[index];
        // A failure that is retried, or whose missing inputs are fetched, is not the outcome of
        // its outputs: it is reported (and recorded) as what happens next.
        let then = match &outcome {
            RunOutcome::Failed { missing_deps, .. } if !self.cancelled => {
                if !missing_deps.is_empty() && node.missing_rounds < MAX_MISSING_DEP_ROUNDS {
                    Some(AfterFailure::FetchInputs)
                } else if node.attempt <= job.retries {
                    Some(AfterFailure::Retry)
                } else {
                    None
                }
            }
            _ => None,
        };
        match (&outcome, then) {
            (RunOutcome::Failed { message, .. }, Some(AfterFailure::Retry)) => {
                observer.on(Progress::Retrying {
                    job: &job.name,
                    outputs: &node.run.outputs,
                    message,
                    attempt: node.attempt + 1,
                    attempts: job.retries + 1,
                })
            }
            (RunOutcome::Failed { missing_deps, .. }, Some(AfterFailure::FetchInputs)) => observer
                .on(Progress::FetchingInputs {
                    job: &job.name,
                    outputs: &node.run.outputs,
                    missing: missing_deps,
                }),
            _ => observer.on(Progress::Finished {
                job: &job.name,
                outputs: &node.run.outputs,
                outcome: &outcome,
                took,
            }),
        }
        let outputs: Vec<String> = node.run.outputs.iter().map(|o| o.to_string()).collect();
        let report = match (node.run.reasons.first(), report) {
            (Some(databuild_core::BuildReason::CarryForward(why)), report) => {
                let mut r = report.unwrap_or_else(|| serde_json::json!({}));
                if r.get("provenance").is_none() {
                    r["provenance"] = format!(
                        "carried forward by `migrate` to version {}: {why}",
                        job.version
                    )
                    .into();
                }
                Some(r)
            }
            (_, report) => report,
        };
        match outcome {
            RunOutcome::Succeeded => {
                let mut env = job.env.clone();
                env.extend(node.run.env().map(|(k, v)| (k.clone(), v.clone())));
                let version = data_version(
                    &job.name,
                    &job.version,
                    node.run.args(),
                    &env,
                    &node.input_versions,
                );
                let mut events =
                    vec![
                        Event::job_run(&self.id, &node.id, &job.name, Status::Completed).with_data(
                            |d| {
                                d.exit_code = Some(0);
                                d.executor_id = executor_id.clone();
                                d.report = report.clone();
                            },
                        ),
                    ];
                for o in &outputs {
                    let mut e = Event::partition(Some(&self.id), o, Status::Available)
                        .with_run(&node.id)
                        .with_data(|d| {
                            d.data_version = Some(version.clone());
                            d.report = report.clone();
                        });
                    e.job = Some(job.name.clone());
                    events.push(e);
                }
                // Deferred: it goes into the log with the next claim, or before the loop waits.
                for o in &outputs {
                    self.made.insert(o.clone(), version.clone());
                }
                self.defer(events);
                self.nodes[index].state = State::Done;
                for d in self.nodes[index].dependents.clone() {
                    self.dependency_done(d);
                }
            }
            RunOutcome::Cancelled => {
                self.end_run(
                    index,
                    Status::Cancelled,
                    "cancelled",
                    None,
                    executor_id,
                    None,
                )?;
                self.nodes[index].state = State::Cancelled;
                let reason = format!("`{}` was cancelled", outputs[0]);
                for d in self.nodes[index].dependents.clone() {
                    self.cancel_downstream(d, &reason)?;
                }
            }
            RunOutcome::Failed {
                message,
                exit_code,
                missing_deps,
            } => {
                self.end_run(
                    index,
                    Status::Failed,
                    &message,
                    exit_code,
                    executor_id,
                    then,
                )?;
                match then {
                    Some(AfterFailure::FetchInputs) => {
                        return self.fetch_missing(scope, index, missing_deps, observer)
                    }
                    Some(AfterFailure::Retry) => {
                        observer.on(Progress::Added);
                        return self.reschedule(index, 0, true);
                    }
                    None => {}
                }
                self.nodes[index].state = State::Failed;
                let reason = format!("`{}` failed", outputs[0]);
                for d in self.nodes[index].dependents.clone() {
                    self.cancel_downstream(d, &reason)?;
                }
                self.stop_unless_keep_going(&format!("{reason}: {message}"));
            }
        }
        Ok(())
    }

    fn stop_unless_keep_going(&mut self, reason: &str) {
        if !self.options.keep_going {
            self.stopped.get_or_insert_with(|| reason.to_string());
        }
    }

    /// Records a run's end and the release of its outputs (`then`: what follows a failure). A
    /// run still staged ends without its process having started (`not_started`).
    fn end_run(
        &self,
        index: usize,
        status: Status,
        message: &str,
        exit_code: Option<i32>,
        executor_id: Option<String>,
        then: Option<AfterFailure>,
    ) -> Result<()> {
        let node = &self.nodes[index];
        let job = &self.engine.graph.jobs[node.run.job_index];
        let mut events = vec![Event::job_run(&self.id, &node.id, &job.name, status)
            .with_message(message)
            .with_data(|d| {
                d.exit_code = exit_code;
                d.executor_id = executor_id;
                d.then = then;
                d.not_started = node.state == State::Staged;
                if status == Status::Failed {
                    d.attempt = Some(node.attempt);
                    d.attempts = Some(job.retries + 1);
                }
            })];
        let job = &job.name;
        // A run that failed fails its outputs; one cancelled (or never started) releases them:
        // they go back to what they were before the claim.
        let partition_status = if status == Status::Cancelled {
            Status::Cancelled
        } else {
            Status::Failed
        };
        for o in &node.run.outputs {
            let mut e = Event::partition(Some(&self.id), o.as_str(), partition_status)
                .with_run(&node.id)
                .with_message(message);
            e.job = Some(job.clone());
            events.push(e);
        }
        self.append(events)
    }

    /// A new attempt of a run: a new id, scheduled again, waiting on `waiting_on` dependencies.
    fn reschedule(&mut self, index: usize, waiting_on: usize, retry: bool) -> Result<()> {
        let id = databuild_log::event::new_id();
        let events = self.scheduled_events(&self.nodes[index].run, &id);
        self.append(events)?;
        let node = &mut self.nodes[index];
        node.id = id;
        if retry {
            node.attempt += 1;
        }
        node.waiting_on = waiting_on;
        node.state = State::Waiting;
        if waiting_on == 0 {
            self.make_ready(index);
        }
        Ok(())
    }

    /// The run said some inputs are missing: build them, then run it again.
    fn fetch_missing<'s>(
        &mut self,
        scope: &'s thread::Scope<'s, 'e>,
        index: usize,
        missing: Vec<String>,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        self.nodes[index].missing_rounds += 1;
        let refs = missing
            .iter()
            .map(PartitionRef::new)
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| {
                EngineError::Invalid(format!(
                    "a job reported a missing input that is not a valid ref: {e}"
                ))
            });
        let plan = refs.and_then(|refs| {
            self.engine.plan(&PlanRequest {
                refs,
                ..Default::default()
            })
        });
        let plan = match plan {
            Ok(plan) if plan.missing.is_empty() => plan,
            Ok(plan) => {
                return self.give_up(
                    index,
                    format!(
                        "its missing input needs external `{}`, which is not available",
                        plan.missing[0].partition_ref
                    ),
                )
            }
            Err(e) => {
                return self.give_up(index, format!("its missing inputs cannot be planned: {e}"))
            }
        };
        let before = self.waits.len();
        let added = self.add_plan(plan)?;
        for w in before..self.waits.len() {
            self.spawn_waiter(scope, w);
        }
        observer.on(Progress::Added);
        // Wait on whatever of this build makes the missing refs and is not done.
        let mut waiting_on = 0;
        for r in &missing {
            if let Some(&n) = self.by_output.get(r.as_str()) {
                if n != index && self.nodes[n].state != State::Done {
                    self.nodes[n].dependents.push(index);
                    waiting_on += 1;
                }
            } else if let Some(&w) = self.waiting_for.get(r.as_str()) {
                if !self.waits[w].done {
                    self.waits[w].dependents.push(index);
                    waiting_on += 1;
                }
            }
        }
        let _ = added;
        self.reschedule(index, waiting_on, false)
    }

    fn give_up(&mut self, index: usize, message: String) -> Result<()> {
        self.nodes[index].state = State::Failed;
        let outputs = self.nodes[index].run.outputs[0].to_string();
        let reason = format!("`{outputs}` failed: {message}");
        for d in self.nodes[index].dependents.clone() {
            self.cancel_downstream(d, &reason)?;
        }
        self.stop_unless_keep_going(&reason);
        Ok(())
    }

    /// Why a build that did not stop at its first failure (`--keep-going`) ends failed: the runs
    /// that failed, by their first output.
    fn failed_runs_reason(&self) -> String {
        let failed: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.state == State::Failed)
            .map(|n| n.run.outputs[0].as_str())
            .collect();
        match failed.len() {
            0 => "the build stopped".to_string(),
            1 => format!("`{}` failed", failed[0]),
            n => {
                let shown: Vec<String> = failed.iter().take(5).map(|r| format!("`{r}`")).collect();
                let more = if n > 5 {
                    format!(" and {} more", n - 5)
                } else {
                    String::new()
                };
                format!("{n} job runs failed: {}{more}", shown.join(", "))
            }
        }
    }

    /// Marks a run, and everything waiting on it, as not run because of an upstream failure.
    fn cancel_downstream(&mut self, start: usize, reason: &str) -> Result<()> {
        let mut stack = vec![start];
        let mut events = Vec::new();
        while let Some(i) = stack.pop() {
            if !matches!(self.nodes[i].state, State::Waiting | State::Ready) {
                continue;
            }
            self.nodes[i].state = State::Cancelled;
            let node = &self.nodes[i];
            let job = &self.engine.graph.jobs[node.run.job_index].name;
            events.push(
                Event::job_run(&self.id, &node.id, job, Status::Cancelled)
                    .with_message(format!("not run: {reason}")),
            );
            for o in &node.run.outputs {
                events.push(
                    Event::partition(Some(&self.id), o.as_str(), Status::Cancelled)
                        .with_message(format!("not built: {reason}")),
                );
            }
            stack.extend(node.dependents.iter().copied());
        }
        self.append(events)
    }

    /// Records what never started, decides the outcome, and ends the build request.
    fn finish(mut self) -> Result<BuildSummary> {
        let reason = self
            .stopped
            .clone()
            .unwrap_or_else(|| self.failed_runs_reason());
        for i in 0..self.nodes.len() {
            if matches!(self.nodes[i].state, State::Waiting | State::Ready) {
                self.cancel_downstream(i, &reason)?;
            }
        }
        let mut failed_outputs = FxHashSet::default();
        for n in &self.nodes {
            if matches!(n.state, State::Failed | State::Cancelled) {
                failed_outputs.extend(n.run.outputs.iter().map(|o| o.to_string()));
            }
        }
        let mut failed = false;
        let mut events = Vec::new();
        for w in &self.waits {
            if !w.done {
                events.push(
                    Event::partition(Some(&self.id), &w.partition_ref, Status::Cancelled)
                        .with_message(format!("not waited for: {reason}")),
                );
            }
        }
        for r in &self.options.refs {
            let live = self
                .store()
                .partition(r.as_str())?
                .is_some_and(|p| p.status == Status::Available)
                || self.skipped.iter().any(|s| s == r.as_str());
            if !live {
                failed = true;
                // Requested refs that no run of ours ended (a failed delegation, say) end here.
                let ended = failed_outputs.contains(r.as_str())
                    || self.by_output.contains_key(r.as_str())
                    || self.waiting_for.contains_key(r.as_str());
                if !ended {
                    events.push(
                        Event::partition(Some(&self.id), r.as_str(), Status::Failed)
                            .with_message(reason.clone()),
                    );
                }
            }
        }
        let status = if self.cancelled {
            Status::Cancelled
        } else if failed {
            Status::Failed
        } else {
            Status::Completed
        };
        if !self.cancelled_outside {
            let mut e = Event::build_request(&self.id, status);
            if status != Status::Completed {
                e = e.with_message(reason);
            }
            events.push(e);
        }
        self.append(events)?;
        Ok(self
            .engine
            .summary(&self.id)?
            .expect("the build request was recorded"))
    }
}

impl Engine {
    /// What a build request did, read back from the log: the same answer for the process that ran
    /// it, for the service, and for anyone asking later.
    pub fn summary(&self, id: &str) -> Result<Option<BuildSummary>> {
        let Some(build) = self.store.build_request(id)? else {
            return Ok(None);
        };
        let mut runs = self.store.job_runs(&RunQuery {
            build_request_id: Some(id.to_string()),
            limit: 10_000_000,
            ..Default::default()
        })?;
        runs.reverse();
        let mut is_delegated = FxHashSet::default();
        let delegated: Vec<String> = self
            .store
            .events(&databuild_log::EventFilter {
                build_request_id: Some(id.to_string()),
                kind: Some(databuild_log::Kind::Delegation),
                ..Default::default()
            })?
            .into_iter()
            .filter_map(|e| e.partition_ref)
            .filter(|r| is_delegated.insert(r.clone()))
            .collect();
        let outputs_of = |status: Status| -> Vec<String> {
            runs.iter()
                .filter(|r| r.status == status)
                .flat_map(|r| r.outputs.iter().cloned())
                .filter(|o| !is_delegated.contains(o))
                .collect()
        };
        let available: FxHashSet<String> = self
            .store
            .request_partitions(id)?
            .into_iter()
            .filter(|p| p.status == Status::Available)
            .map(|p| p.partition_ref)
            .collect();
        // A run's outputs end with the last run that had them: an earlier failed attempt that
        // was retried is not a failure of the build.
        let mut last_of: FxHashMap<&str, usize> = FxHashMap::default();
        for (i, r) in runs.iter().enumerate() {
            if let Some(first) = r.outputs.first() {
                last_of.insert(first, i);
            }
        }
        let mut last: Vec<&databuild_log::JobRunRow> =
            last_of.values().map(|&i| &runs[i]).collect();
        last.sort_by_key(|r| r.scheduled_at);
        let ended_unbuilt = |started: bool| -> Vec<String> {
            last.iter()
                .filter(|r| r.status == Status::Cancelled && r.started_at.is_some() == started)
                .flat_map(|r| r.outputs.iter().cloned())
                .filter(|o| !is_delegated.contains(o))
                .collect()
        };
        let failures = last
            .iter()
            .filter(|r| r.status == Status::Failed)
            .enumerate()
            .map(|(i, r)| RunFailure {
                job: r.job.clone(),
                job_run_id: r.job_run_id.clone(),
                outputs: r.outputs.clone(),
                message: r.message.clone(),
                log_tail: (i < QUOTED_FAILURES)
                    .then(|| r.log_path.as_deref().and_then(last_log_line))
                    .flatten(),
            })
            .collect();
        Ok(Some(BuildSummary {
            build_request_id: id.to_string(),
            status: build.status,
            failures,
            cancelled: ended_unbuilt(true),
            not_started: ended_unbuilt(false),
            built: outputs_of(Status::Completed),
            skipped: outputs_of(Status::Skipped),
            failed: build
                .requested_partitions
                .iter()
                .filter(|r| !available.contains(*r))
                .cloned()
                .collect(),
            delegated,
            message: build.message,
        }))
    }
}

/// The last non-empty line of a run's log (read from its last 4 KiB).
fn last_log_line(path: &str) -> Option<String> {
    let tail = crate::engine::read_tail(std::path::Path::new(path), 4096).ok()?;
    tail.lines()
        .rev()
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map(|l| l.chars().take(300).collect())
}
