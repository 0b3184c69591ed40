//! The thin I/O driver around [`Machine`]: it owns the threads (slots, waiters, the planners and
//! readers that must not block its loop), the log appends and their batching, and progress
//! reports. It turns what happens into [`Input`]s and carries out the [`Effect`]s that come back;
//! it decides nothing itself.
//!
//! Only this loop writes events for its build. Completions, and runs' starts, are deferred to ride
//! along with the next claim (one log write instead of two), or go in within `MAX_DEFER`. Blocking calls that
//! may go over the network (planning, which asks configs and upstream services, and the versions
//! of upstream inputs and query inputs) run on threads of their own and come back as inputs.
//!
//! Three of its concerns keep their state and methods apart: [`claim_ahead`] (what first claims
//! are made against, read before them), [`deferred`] (completions waiting for the next write)
//! and [`waiters`] (threads following partitions other builds make).

mod claim_ahead;
mod deferred;
mod waiters;

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use databuild_core::{PartitionRef, Plan, PlanRequest};
use databuild_log::{Event, EventStore, LogError, Status};
use rustc_hash::{FxHashMap, FxHashSet};

use claim_ahead::{read_query_inputs, upstream_reads, ClaimAhead, QueryReads, Seen};
use deferred::Deferred;
use waiters::Waiters;

use super::machine::{Effect, Input, JobPolicy, Machine, Policy, WaitOutcome};
use super::record::{Built, MadeOutput, Record, RunEnd};
use super::spec::{self, SpecOf};
use super::{BuildOptions, Host, Observer, Progress};
use crate::error::{EngineError, Result};
use crate::run::outcome::Ended;
use crate::run::resources::ms;
use crate::run::slots::{Launch, Launches, Report, Stamp};
use crate::run::{Executor, RunOutcome};

/// The loop wakes at least this often, to check for cancellation and the lease.
const IDLE_WAKE: Duration = Duration::from_millis(100);
/// How often the loop looks in the log for a cancel of its build request.
const CANCEL_CHECK_EVERY: Duration = Duration::from_millis(500);

/// What the driver's threads report to its loop.
enum Message {
    /// The slots have reports the loop must read now (`Launches::ended`).
    SlotsReported,
    Resolved {
        wait: usize,
        outcome: WaitOutcome,
    },
    InputsPlanned {
        node: usize,
        missing: Vec<String>,
        plan: std::result::Result<Plan, String>,
    },
    TakeOverPlanned {
        wait: usize,
        plan: Result<Plan>,
    },
    /// The versions of a run's upstream inputs and query inputs (none: not available there).
    VersionsRead {
        node: usize,
        versions: BTreeMap<String, Option<String>>,
    },
}

/// What the driver keeps of one node: the I/O side of a run.
struct RunIo {
    /// The current attempt's run id (given at its first claim).
    id: String,
    /// The versions of its inputs its claim fixed.
    input_versions: BTreeMap<String, String>,
    /// Its outputs' data versions as its claim found them, by output: a rebuild that writes
    /// the same content is "rebuilt, unchanged".
    replaced: Vec<Option<String>>,
    /// When its job started, and ended: for how long it took and the record of its end.
    started: Option<Stamp>,
    ended: Option<Stamp>,
    /// When its current attempt was claimed: its wait in the queue runs from here to `started`.
    claimed: Option<Instant>,
    cancel: Arc<AtomicBool>,
    /// Its `job_run scheduled` is in the log. A planned run is recorded with its claim, so a
    /// plan costs the log a few bytes per run until the run comes up (see `record::planned`).
    recorded: bool,
}

impl RunIo {
    /// Gives the run its id, at the first event that names it (a planned run has none before).
    fn give_id(&mut self) {
        if self.id.is_empty() {
            self.id = databuild_log::event::new_id();
        }
    }
}

/// What a planned build runs with.
pub(crate) struct Build<'a> {
    pub engine: &'a dyn Host,
    pub id: &'a str,
    pub options: &'a BuildOptions,
    /// The request's refs, as a set.
    pub requested: &'a FxHashSet<&'a str>,
    pub executor: &'a dyn Executor,
    /// When the build started (ns since the epoch).
    pub started_ns: i64,
    /// The code versions the build was planned with: its runs record them, and its
    /// re-derivations compare with them.
    pub code: Arc<crate::data::code::CodeCache>,
}

/// Runs a planned build to its end, and returns the status it ended with.
/// `recorded` waits for the plan's record (`record::planned`), written meanwhile.
pub(crate) fn run(
    build: Build<'_>,
    plan: Plan,
    recorded: impl FnOnce() -> std::result::Result<(), LogError>,
    observer: &mut dyn Observer,
    interrupt: &AtomicBool,
) -> Result<Status> {
    let ahead_per_slot = claim_ahead::per_slot(build.engine.store(), build.engine.graph(), &plan)?;
    thread::scope(|scope| {
        let mut driver = Driver::new(build, ahead_per_slot, scope);
        driver.start(plan, recorded, observer)?;
        driver.run(observer, interrupt)
    })
}

struct Driver<'s, 'e> {
    engine: &'e dyn Host,
    id: String,
    options: &'e BuildOptions,
    executor: &'e dyn Executor,
    scope: &'s thread::Scope<'s, 'e>,
    machine: Machine,
    /// Effects not yet carried out, in order.
    effects: VecDeque<Effect>,
    /// By node, as the machine numbers them.
    runs: Vec<RunIo>,
    /// Claimed runs, for the slots' threads to take; a slot whose job ends starts the next at
    /// once, with no log write or thread hand-over in between.
    launches: Arc<Launches>,
    /// Slot threads started so far (at most `--parallel`, started as runs need them).
    slot_threads: usize,
    /// The build request was cancelled through the log (by `cancel`), which already recorded it.
    cancelled_outside: bool,
    skipped: Vec<String>,
    /// The threads following partitions other builds make.
    waiters: Waiters,
    /// When the build started (ns): partitions made by others after it were not seen by its plan.
    started_ns: i64,
    tx: mpsc::Sender<Message>,
    rx: mpsc::Receiver<Message>,
    /// Completions waiting to ride along with the next write.
    deferred: Deferred,
    /// Data versions of the partitions this build made, and the runs that made them, for the
    /// runs that read them.
    made: FxHashMap<String, (String, String)>,
    /// Of `made`, those rebuilt with the bytes they had: a run reading any other output of this
    /// build is stale for sure, and its re-derivation reads nothing (see `recheck`).
    unchanged: FxHashSet<String>,
    /// Outputs this build made that a blocking check failed: built, but not live.
    held_back: FxHashSet<String>,
    /// What first claims are made against, read ahead of them.
    claim_ahead: ClaimAhead,
    /// The refs the request asked for.
    requested: &'e FxHashSet<&'e str>,
    /// The first plan is recorded (`record::planned`); plans added later are recorded here.
    plan_recorded: bool,
    /// The log's last refusal of a claim, returned if the machine gives up on it.
    last_refusal: Option<LogError>,
    /// The code versions of the jobs and checks this build runs, each computed once for it.
    code: Arc<crate::data::code::CodeCache>,
}

impl Drop for Driver<'_, '_> {
    /// However the build ends, the slots' threads end with their current runs, and waiters stop.
    fn drop(&mut self) {
        self.launches.close();
        self.waiters.stop();
    }
}

impl<'s, 'e> Driver<'s, 'e> {
    fn new(build: Build<'e>, ahead_per_slot: usize, scope: &'s thread::Scope<'s, 'e>) -> Self {
        let Build {
            engine,
            id,
            options,
            requested,
            executor,
            started_ns,
            code,
        } = build;
        let (tx, rx) = mpsc::channel();
        let policy = Policy {
            slots: options.parallel,
            ahead_per_slot,
            keep_going: options.keep_going,
            jobs: engine
                .graph()
                .jobs
                .iter()
                .map(|j| JobPolicy {
                    retries: j.retries,
                    concurrency: j.concurrency,
                    cutoff: matches!(j.deps, databuild_core::Deps::Static(_)),
                })
                .collect(),
        };
        let machine = Machine::new(policy);
        let launches = Arc::new(Launches::new(machine.refill_below()));
        Driver {
            engine,
            id: id.to_string(),
            options,
            executor,
            scope,
            machine,
            effects: VecDeque::new(),
            runs: Vec::new(),
            launches,
            slot_threads: 0,
            cancelled_outside: false,
            skipped: Vec::new(),
            waiters: Waiters::default(),
            started_ns,
            tx,
            rx,
            deferred: Deferred::default(),
            made: FxHashMap::default(),
            unchanged: FxHashSet::default(),
            held_back: FxHashSet::default(),
            claim_ahead: ClaimAhead::new(engine.graph()),
            code,
            requested,
            plan_recorded: false,
            last_refusal: None,
        }
    }

    fn store(&self) -> &'e dyn EventStore {
        self.engine.store()
    }

    fn record(&self) -> Record<'_> {
        Record {
            graph: self.engine.graph(),
            build: &self.id,
        }
    }

    /// Takes the plan in, then (once its record is written) records what it skips, delegates
    /// and schedules, and moves the build to `executing`.
    fn start(
        &mut self,
        mut plan: Plan,
        recorded: impl FnOnce() -> std::result::Result<(), LogError>,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        let live = std::mem::take(&mut plan.skipped);
        observer.on(Progress::Planned {
            build_request_id: &self.id,
            runs: plan.runs.len(),
            skipped: super::record::requested_live(&live, self.requested).count(),
            delegated: plan.delegated.len(),
        });
        self.machine.add_plan(plan, &mut self.effects);
        // The plan's record comes first in the log.
        recorded()?;
        let (skipped, events) =
            super::record::skipped(self.engine, &self.id, self.requested, &live)?;
        self.skipped = skipped;
        self.append(events)?;
        self.carry_out(observer)?;
        self.append(vec![Event::build_request(&self.id, Status::Executing)])?;
        self.machine.fill(&mut self.effects);
        self.carry_out(observer)
    }

    fn run(mut self, observer: &mut dyn Observer, interrupt: &AtomicBool) -> Result<Status> {
        let mut last_cancel_check = Instant::now();
        loop {
            // Nothing happens while this process's lease has run out (the log cannot be
            // reached): the build pauses, and resumes once the lease is renewed.
            if let Err(lost) = self.engine.lease().wait_good(interrupt) {
                // Another process took this build over: its jobs are killed (the lease watchdog
                // does it too) and nothing more of it is written.
                for run in &self.runs {
                    run.cancel.store(true, Ordering::SeqCst);
                }
                let publishing = self.deferred.abandon();
                self.discard(&publishing);
                return Err(lost.into());
            }
            if !self.machine.cancelled() {
                if interrupt.load(Ordering::SeqCst) {
                    self.feed(Input::Cancel("interrupted".to_string()), observer)?;
                } else if last_cancel_check.elapsed() > CANCEL_CHECK_EVERY {
                    last_cancel_check = Instant::now();
                    if self.store().build_request(&self.id)?.map(|b| b.status)
                        == Some(Status::Cancelled)
                    {
                        self.cancelled_outside = true;
                        self.feed(Input::Cancel("cancelled".to_string()), observer)?;
                    }
                }
            }
            if self.machine.is_over() {
                break;
            }
            let wait = self.flush_due()?;
            let message = self.rx.recv_timeout(wait);
            // The slots' reports first, whatever woke the loop: they may have come without a
            // message.
            self.read_reports(observer)?;
            match message {
                Ok(message) => self.received(message, observer)?,
                Err(mpsc::RecvTimeoutError::Timeout) => {}
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    unreachable!("the driver holds a sender")
                }
            }
        }
        self.waiters.stop();
        self.flush()?;
        self.finish(observer)
    }

    /// The slots' reports since the loop last woke, in order, as the machine's inputs.
    fn read_reports(&mut self, observer: &mut dyn Observer) -> Result<()> {
        for report in self.launches.take_reports() {
            match report {
                Report::Started { node, .. } => self.feed(Input::Started(node), observer)?,
                // Its process started: `running` rides along with the next write.
                Report::Running { node, at } => {
                    self.runs[node].started = Some(at);
                    let run = &self.machine.node(node).run;
                    observer.on(Progress::Started {
                        job: &self.engine.graph().jobs[run.job_index].name,
                        outputs: &run.outputs,
                    });
                    let started = self.record().started(run, &self.runs[node].id, at.at_ns);
                    self.deferred.defer_start(started);
                }
                Report::Ended { node, at, ended } => {
                    self.runs[node].ended = Some(at);
                    self.feed(
                        Input::Finished {
                            node,
                            ended: *ended,
                        },
                        observer,
                    )?;
                    if !self.machine.stopped() {
                        self.launches.resume();
                    }
                }
            }
        }
        Ok(())
    }

    /// A thread's report, as the machine's input.
    fn received(&mut self, message: Message, observer: &mut dyn Observer) -> Result<()> {
        match message {
            Message::SlotsReported => Ok(()), // read before any message
            Message::Resolved { wait, outcome } => {
                self.feed(Input::WaitEnded { wait, outcome }, observer)
            }
            Message::InputsPlanned {
                node,
                missing,
                plan,
            } => self.feed(
                Input::InputsPlanned {
                    node,
                    missing,
                    plan,
                },
                observer,
            ),
            Message::TakeOverPlanned { wait, plan } => {
                self.feed(Input::TakeOverPlanned { wait, plan: plan? }, observer)
            }
            Message::VersionsRead { node, versions } => {
                self.claim_ahead.versions_read(node, versions);
                self.feed(Input::Resolved(node), observer)
            }
        }
    }

    /// Hands the machine an input and carries out what it decides.
    fn feed(&mut self, input: Input, observer: &mut dyn Observer) -> Result<()> {
        self.machine.handle(input, &mut self.effects);
        self.carry_out(observer)
    }

    /// Carries out the effects in order; those that answer with an input queue its effects.
    fn carry_out(&mut self, observer: &mut dyn Observer) -> Result<()> {
        while let Some(effect) = self.effects.pop_front() {
            self.apply(effect, observer)?;
        }
        Ok(())
    }

    /// The machine's answer to an input the driver found while carrying out an effect.
    fn answer(&mut self, input: Input) {
        self.machine.handle(input, &mut self.effects);
    }

    fn apply(&mut self, effect: Effect, observer: &mut dyn Observer) -> Result<()> {
        match effect {
            Effect::Scheduled { nodes, waits } => self.scheduled(nodes, waits)?,
            Effect::Claim(nodes) => self.claim(nodes)?,
            Effect::Check(node) => self.check(node)?,
            Effect::FindHolders(node) => {
                let holders = self.holders_of(node)?;
                self.answer(Input::Held { node, holders });
            }
            Effect::Resolve(node) => self.resolve(node),
            Effect::ClaimFailed(node) => {
                return Err(self.last_refusal.take().map_or_else(
                    || EngineError::Invalid(format!("cannot claim run {}", self.runs[node].id)),
                    EngineError::from,
                ))
            }
            Effect::Stage(node) => self.stage(node),
            Effect::Unstage => {
                for launch in self.launches.drain() {
                    self.answer(Input::Unstaged(launch.node));
                }
            }
            Effect::StopRuns => {
                for run in &self.runs {
                    run.cancel.store(true, Ordering::SeqCst);
                }
            }
            Effect::WaitInstead { node, waits } => self.wait_instead(node, waits)?,
            Effect::Adopt(node) => self.adopt(node)?,
            Effect::Recheck(nodes) => self.recheck(nodes)?,
            Effect::Kept(nodes) => self.kept(nodes, observer)?,
            Effect::Ended {
                node,
                attempt,
                ended,
                then,
            } => self.ended(node, attempt, ended, then, observer)?,
            Effect::NotStarted { node, reason } => {
                let end = RunEnd {
                    status: Status::Cancelled,
                    message: &reason,
                    exit_code: None,
                    executor_id: None,
                    then: None,
                    not_started: true,
                    started_at: None,
                    attempt: self.machine.node(node).attempt,
                    resources: None,
                };
                let events =
                    self.record()
                        .ended(&self.machine.node(node).run, &self.runs[node].id, end);
                self.append(events)?;
            }
            Effect::Rescheduled(node) => {
                let id = databuild_log::event::new_id();
                let mut events = Vec::new();
                self.record()
                    .scheduled(&self.machine.node(node).run, &id, &mut events);
                self.append(events)?;
                self.runs[node].id = id;
            }
            Effect::NotRun { nodes, reason } => {
                let mut events = Vec::new();
                let record = self.record();
                for n in nodes {
                    let run = &self.machine.node(n).run;
                    if self.runs[n].recorded {
                        record.not_run(run, &self.runs[n].id, &reason, &mut events);
                    } else {
                        // Only the plan names it: of its outputs, the requested ones say so.
                        let requested = run
                            .outputs
                            .iter()
                            .filter(|o| self.requested.contains(o.as_str()));
                        record.not_built(requested, &reason, &mut events);
                    }
                }
                self.append(events)?;
            }
            Effect::WaitAvailable(w) => {
                let r = &self.machine.wait(w).partition_ref;
                let e = Event::partition(Some(&self.id), r, Status::Available);
                self.append(vec![e])?;
            }
            Effect::WaitFailed { wait, message } => {
                let r = &self.machine.wait(wait).partition_ref;
                let e = Event::partition(Some(&self.id), r, Status::Failed).with_message(message);
                self.append(vec![e])?;
            }
            Effect::PlanInputs { node, missing } => self.plan_inputs(node, missing),
            Effect::TakeOver(wait) => self.take_over(wait, observer)?,
            Effect::Added => observer.on(Progress::Added),
        }
        Ok(())
    }

    /// New runs are scheduled and new waits delegated, in one write; their outputs' holders
    /// are read for their claims, and the waits followed.
    fn scheduled(
        &mut self,
        nodes: std::ops::Range<usize>,
        waits: std::ops::Range<usize>,
    ) -> Result<()> {
        let mut events = Vec::with_capacity(2 * waits.len());
        if self.plan_recorded {
            // Runs added to a running build join its plan's record.
            events.extend(super::record::plan_parts(
                self.engine.graph(),
                &self.id,
                Status::Executing,
                nodes.clone().map(|n| &self.machine.node(n).run),
            ));
        }
        self.plan_recorded = true;
        let record = self.record();
        for w in waits.clone() {
            let wait = self.machine.wait(w);
            record.delegated(&wait.partition_ref, &wait.delegated_to, &mut events);
        }
        self.runs.reserve(nodes.len());
        self.claim_ahead.grow(nodes.end);
        for _ in nodes {
            self.runs.push(RunIo {
                id: String::new(),
                input_versions: BTreeMap::new(),
                replaced: Vec::new(),
                started: None,
                ended: None,
                claimed: None,
                cancel: Arc::default(),
                recorded: false,
            });
        }
        self.append(events)?;
        for w in waits {
            self.spawn_waiter(w);
        }
        Ok(())
    }

    /// Claims runs in one log write, with the completions waiting to be written, against the
    /// holders the plan saw; a run whose outputs it did not see is checked and claimed alone.
    fn claim(&mut self, nodes: Vec<usize>) -> Result<()> {
        let mut batch = Vec::with_capacity(nodes.len());
        let mut events = Vec::new();
        let runs = &self.runs;
        self.claim_ahead.read_holders(
            self.engine.store(),
            &self.machine,
            |m| runs[m].recorded,
            self.started_ns,
            &nodes,
        )?;
        // The batch's query inputs, read at once; again after a claim alone wrote to the log.
        let mut query = None;
        for (at, &node) in nodes.iter().enumerate() {
            let run = &self.machine.node(node).run;
            if self
                .claim_ahead
                .must_read_versions_first(self.engine.graph(), node, run)
            {
                self.answer(Input::ResolveFirst(node));
                continue;
            }
            let seen = self.claim_ahead.take_holders(&run.outputs);
            match seen {
                Some(seen) => {
                    let query = match &mut query {
                        Some(query) => query,
                        None => query.insert(self.read_query_inputs(&nodes[at..])?),
                    };
                    self.claim_events(node, seen, query, &mut events)?;
                    batch.push(node);
                }
                None => {
                    self.check(node)?;
                    query = None;
                }
            }
        }
        if batch.is_empty() {
            return Ok(());
        }
        match self.append_claims(events)? {
            None => {
                for &node in &batch {
                    self.runs[node].recorded = true;
                }
                self.answer(Input::Claimed(batch));
            }
            // Another build changed one of the partitions since the plan.
            Some(_) => self.answer(Input::BatchRefused(batch)),
        }
        Ok(())
    }

    /// Reads the run's outputs, then claims them against what it read: refused if they changed
    /// in between (compare-and-swap). Outputs another build builds, or made meanwhile, are
    /// the machine's to decide about.
    fn check(&mut self, node: usize) -> Result<()> {
        let mut seen: Vec<Seen> = Vec::new();
        let mut holders = Vec::new();
        let mut made_by_others = 0;
        for o in &self.machine.node(node).run.outputs {
            let row = self.store().partition(o.as_str())?;
            if let Some(p) = &row {
                let other = p.build_request_id.as_deref() != Some(&self.id);
                if p.status == Status::Building && other {
                    let by = p.build_request_id.clone().unwrap_or_default();
                    holders.push((o.to_string(), by));
                }
                if p.status == Status::Available && other && p.updated_at >= self.started_ns {
                    made_by_others += 1;
                }
            }
            seen.push(row.map_or_else(Seen::default, |p| Seen {
                run: p.job_run_id.unwrap_or_default(),
                version: p.data_version,
            }));
        }
        if !holders.is_empty() {
            self.answer(Input::Held { node, holders });
            return Ok(());
        }
        if made_by_others == seen.len() {
            self.answer(Input::MadeElsewhere(node));
            return Ok(());
        }
        let mut events = Vec::new();
        let query = self.read_query_inputs(&[node])?;
        self.claim_events(node, seen, &query, &mut events)?;
        match self.append_claims(events)? {
            None => {
                self.runs[node].recorded = true;
                self.answer(Input::Claimed(vec![node]));
            }
            Some(refusal) => {
                let LogError::Refused { refusal: kind, .. } = &refusal else {
                    unreachable!("append_claims returns refusals only")
                };
                let kind = *kind;
                self.last_refusal = Some(refusal);
                self.answer(Input::Refused {
                    node,
                    refusal: kind,
                });
            }
        }
        Ok(())
    }

    /// The outputs of the run another build is building, with that build's id.
    fn holders_of(&self, node: usize) -> Result<Vec<(String, String)>> {
        let mut holders = Vec::new();
        for o in &self.machine.node(node).run.outputs {
            let row = self.store().partition(o.as_str())?;
            if let Some(p) = row.filter(|p| p.status == Status::Building) {
                holders.push((o.to_string(), p.build_request_id.unwrap_or_default()));
            }
        }
        Ok(holders)
    }

    /// Reads the versions of the run's upstream inputs and query inputs on a thread of its own.
    fn resolve(&mut self, node: usize) {
        let run = &self.machine.node(node).run;
        let upstream: Vec<String> = upstream_reads(self.engine.graph(), run)
            .map(|i| i.to_string())
            .collect();
        let (engine, tx) = (self.engine, self.tx.clone());
        self.scope.spawn(move || {
            let versions = upstream
                .into_iter()
                .map(|i| {
                    // A log that fails here fails at the claim's append too.
                    let v = engine.input_instance(&i).ok().and_then(|(v, _)| v);
                    (i, v)
                })
                .collect();
            let _ = tx.send(Message::VersionsRead { node, versions });
        });
    }

    /// The query inputs of these nodes' runs that are jobs' outputs, read at once, but for those
    /// this build made and are live (the claim reads them from `made`).
    fn read_query_inputs(&self, nodes: &[usize]) -> Result<QueryReads> {
        let runs = nodes.iter().map(|&n| &self.machine.node(n).run);
        let known = |q: &str| self.made.contains_key(q) && !self.held_back.contains(q);
        read_query_inputs(self.store(), self.engine.graph(), runs, known)
    }

    /// A claim's events (after the run's `scheduled`, the first time); fixes the versions of
    /// the run's inputs, and of its query inputs present (those that are jobs' outputs read in
    /// `query`).
    fn claim_events(
        &mut self,
        node: usize,
        seen: Vec<Seen>,
        query: &QueryReads,
        events: &mut Vec<Event>,
    ) -> Result<()> {
        let run = &self.machine.node(node).run;
        let upstream = self.claim_ahead.take_versions(node);
        let mut read = Vec::with_capacity(run.inputs.len());
        let mut input_runs = BTreeMap::new();
        for i in &run.inputs {
            // Read off the loop (an upstream's), made by this build, or read from the log now.
            let (version, built_by) = match (upstream.get(i.as_str()), self.made.get(i.as_str())) {
                (Some(read), _) => (read.clone(), None),
                (None, Some((version, by))) => (Some(version.clone()), Some(by.clone())),
                (None, None) => self.engine.input_instance(i.as_str())?,
            };
            if let (Some(by), Some(_)) = (built_by, &version) {
                input_runs.insert(i.to_string(), by);
            }
            read.extend(version.map(|v| (i.to_string(), v)));
        }
        // Query inputs: read if present (made by this build and live, or present now), never
        // waited for; an absent one is not read, so not recorded. An upstream's was read off
        // the loop, a job's output with the claim batch's.
        for q in run.query_inputs() {
            let present = match (upstream.get(q.as_str()), self.made.get(q.as_str())) {
                (Some(read), _) => read.clone().map(|v| (v, None)),
                (None, Some((version, by))) if !self.held_back.contains(q.as_str()) => {
                    Some((version.clone(), Some(by.clone())))
                }
                _ => match query.get(q.as_str()) {
                    Some(present) => present.clone(),
                    None => self.engine.query_instance(q.as_str())?,
                },
            };
            if let Some((version, built_by)) = present {
                input_runs.extend(built_by.map(|by| (q.to_string(), by)));
                read.push((q.to_string(), version));
            }
        }
        let input_versions: BTreeMap<String, String> = read
            .into_iter()
            .chain(run.aliased().iter().map(|(alias, read)| {
                (
                    alias.to_string(),
                    format!("{}{read}", crate::data::versions::ALIAS_PREFIX),
                )
            }))
            .collect();
        self.runs[node].give_id();
        // A retry's claim: what the last attempt's process did is not this one's.
        (self.runs[node].started, self.runs[node].ended) = (None, None);
        self.runs[node].claimed = Some(Instant::now());
        let id = &self.runs[node].id;
        let log_path = spec::log_path(self.engine, id).display().to_string();
        let record = Record {
            graph: self.engine.graph(),
            build: &self.id,
        };
        if !self.runs[node].recorded {
            record.scheduled(run, id, events);
        }
        let graph = self.engine.graph();
        let code = self.code.job(graph, &graph.jobs[run.job_index]);
        let read = super::record::ReadInputs {
            versions: &input_versions,
            runs: input_runs,
            code: code.map(),
        };
        let (runs, replaced) = seen.into_iter().map(|s| (s.run, s.version)).unzip();
        record.claim(run, id, runs, read, log_path, events);
        self.runs[node].input_versions = input_versions;
        self.runs[node].replaced = replaced;
        Ok(())
    }

    /// Appends claims with the deferred completions riding along. If the log refuses the claims,
    /// the completions go in alone and the refusal is returned.
    fn append_claims(&mut self, claims: Vec<Event>) -> Result<Option<LogError>> {
        let (deferred, publishing) = self.deferred.take();
        let mut all = deferred.clone();
        all.extend(claims);
        match self.store().append(all) {
            Ok(appended) => {
                self.engine.appended(&appended);
                self.publish(publishing);
                Ok(None)
            }
            Err(refusal @ LogError::Refused { .. }) => {
                if !deferred.is_empty() {
                    match self.store().append(deferred) {
                        Ok(appended) => self.engine.appended(&appended),
                        Err(e) => {
                            self.drop_publishing(publishing, &e);
                            return Err(e.into());
                        }
                    }
                }
                self.publish(publishing);
                Ok(Some(refusal))
            }
            Err(e) => {
                self.drop_publishing(publishing, &e);
                Err(e.into())
            }
        }
    }

    /// Hands a claimed run to the slots, starting a slot thread if every one is busy.
    fn stage(&mut self, node: usize) {
        let n = self.machine.node(node);
        let of = SpecOf {
            run: &n.run,
            run_id: &self.runs[node].id,
            attempt: n.attempt,
            read: &self.runs[node].input_versions,
        };
        let spec = spec::run_spec(self.engine, &self.id, &of);
        let cancel = self.runs[node].cancel.clone();
        let graph = self.engine.graph();
        let checks = n
            .run
            .outputs
            .iter()
            .flat_map(|o| {
                self.code
                    .with_checks_code(graph, crate::check::runs_for(graph, o.as_str()))
            })
            .collect();
        let legacy = legacy_versions(&self.runs[node].replaced);
        let recipe = self.engine.reuses().then(|| {
            let code = self.code.job(graph, &graph.jobs[n.run.job_index]);
            Box::new(spec::recipe(
                graph,
                &n.run,
                code.map(),
                &self.runs[node].input_versions,
            ))
        });
        self.launches.push(Launch {
            node,
            spec,
            cancel,
            checks,
            legacy,
            recipe,
        });
        let busy = self.machine.running() + self.machine.staged();
        if self.slot_threads < self.options.parallel.max(1) && self.slot_threads < busy {
            self.slot_threads += 1;
            self.spawn_slot();
        }
    }

    fn spawn_slot(&self) {
        let (launches, tx, executor) = (self.launches.clone(), self.tx.clone(), self.executor);
        let (lease, store, engine) = (self.engine.lease(), self.engine.store(), self.engine);
        self.scope.spawn(move || {
            let instances = |outputs: &[String], recipe: &_| engine.find_instance(outputs, recipe);
            while let Some(launch) = launches.next() {
                // No job starts while the lease has run out (the log cannot be reached): the
                // slot waits for a renewal; a lost lease or a cancel, `run` then sees.
                let _ = lease.wait_good(&launch.cancel);
                let node = launch.node;
                launches.started(node);
                let running = || launches.running(node);
                let ended =
                    crate::run::slots::run(executor, store, &launch, lease, &running, &instances);
                if launches.ended(node, ended) {
                    let _ = tx.send(Message::SlotsReported);
                }
            }
        });
    }

    /// The run gave its claim up for the build that claimed first: recorded, with the new
    /// delegations, which are then followed.
    fn wait_instead(&mut self, node: usize, waits: std::ops::Range<usize>) -> Result<()> {
        // A run whose first claim was refused was never recorded: it is, as given up.
        let first = !self.runs[node].recorded;
        self.runs[node].give_id();
        self.runs[node].recorded = true;
        let record = self.record();
        let run = &self.machine.node(node).run;
        let mut events = vec![record.lost_claim(run, &self.runs[node].id, first)];
        for w in waits.clone() {
            let wait = self.machine.wait(w);
            record.delegated(&wait.partition_ref, &wait.delegated_to, &mut events);
        }
        self.append(events)?;
        for w in waits {
            self.spawn_waiter(w);
        }
        Ok(())
    }

    /// Another build made all of the run's outputs: recorded as delegated to it, and available.
    fn adopt(&mut self, node: usize) -> Result<()> {
        let run = &self.machine.node(node).run;
        let mut events = Vec::with_capacity(1 + 3 * run.outputs.len());
        let mut relies_on = None;
        for o in &run.outputs {
            let row = self
                .store()
                .partition(o.as_str())?
                .expect("checked just before");
            relies_on = row.job_run_id.clone();
            let made_by = row.build_request_id.as_deref().unwrap_or_default();
            self.record().delegated(o.as_str(), made_by, &mut events);
            events.push(Event::partition(
                Some(&self.id),
                o.as_str(),
                Status::Available,
            ));
        }
        self.runs[node].give_id();
        let first = !self.runs[node].recorded;
        let skipped = self
            .record()
            .adopted(run, &self.runs[node].id, relies_on, first);
        events.insert(0, skipped);
        self.append(events)?;
        self.runs[node].recorded = true;
        Ok(())
    }

    /// Derives the outputs of runs whose inputs this build just built, in one read, once the
    /// completions waiting to be written are in the log (and their outputs in place): a run
    /// whose outputs are all live now is fresh, its inputs came out as it had read them.
    fn recheck(&mut self, nodes: Vec<usize>) -> Result<()> {
        // A run reading an output this build rebuilt with other bytes is stale for sure: only
        // the others cost a write (the completions they read) and a read.
        let (nodes, mut stale): (Vec<usize>, Vec<usize>) = nodes.into_iter().partition(|&n| {
            !(self.machine.node(n).run.inputs.iter())
                .any(|i| self.made.contains_key(i.as_str()) && !self.unchanged.contains(i.as_str()))
        });
        if nodes.is_empty() {
            self.answer(Input::Rechecked {
                fresh: Vec::new(),
                stale,
            });
            return Ok(());
        }
        self.flush()?;
        let refs: Vec<&str> = (nodes.iter())
            .flat_map(|&n| self.machine.node(n).run.outputs.iter().map(|o| o.as_str()))
            .collect();
        let pins = &self.options.pins;
        let states = self.engine.states_now(&refs, pins, &self.code)?;
        let mut states = states.into_iter();
        let mut fresh = Vec::new();
        for node in nodes {
            let outputs = self.machine.node(node).run.outputs.len();
            let live = (states.by_ref().take(outputs))
                .all(|s| s == databuild_core::plan::KnownState::Live);
            match live {
                true => fresh.push(node),
                false => stale.push(node),
            }
        }
        self.answer(Input::Rechecked { fresh, stale });
        Ok(())
    }

    /// Runs cut off: recorded `skipped`, each relying on the run that built its outputs (read
    /// for all of them at once), their outputs available to this build as they are.
    fn kept(&mut self, nodes: Vec<usize>, observer: &mut dyn Observer) -> Result<()> {
        let refs: Vec<&str> = (nodes.iter())
            .filter_map(|&n| self.machine.node(n).run.outputs.first())
            .map(|o| o.as_str())
            .collect();
        let built_by: FxHashMap<String, String> = (self.store().partitions_by_ref(&refs)?)
            .into_iter()
            .filter_map(|p| Some((p.partition_ref, p.job_run_id?)))
            .collect();
        let mut events = Vec::with_capacity(nodes.len() * 2);
        for node in nodes {
            self.runs[node].give_id();
            self.runs[node].recorded = true;
            let run = &self.machine.node(node).run;
            observer.on(Progress::Kept {
                job: &self.engine.graph().jobs[run.job_index].name,
                outputs: &run.outputs,
            });
            let relies_on = (run.outputs.first()).and_then(|o| built_by.get(o.as_str()).cloned());
            self.record()
                .kept(run, &self.runs[node].id, relies_on, &mut events);
        }
        self.append(events)
    }

    /// A run ended: reported, and recorded (a success deferred, to ride along with the next
    /// claim).
    fn ended(
        &mut self,
        node: usize,
        attempt: u32,
        ended: Ended,
        then: Option<databuild_log::AfterFailure>,
        observer: &mut dyn Observer,
    ) -> Result<()> {
        let run = &self.machine.node(node).run;
        let job = &self.engine.graph().jobs[run.job_index];
        // By the slot's clock: the scheduler may read the end up to 100 ms after it.
        let (started, ended_at) = (self.runs[node].started, self.runs[node].ended);
        let took = match (started, ended_at) {
            (Some(s), Some(e)) => e.at.saturating_duration_since(s.at),
            _ => Duration::ZERO,
        };
        // What the run read is last used for its outputs' version (a retry reads anew): a build
        // of 24k runs kept 13 MB of these to its end.
        let (read, replaced) = match ended.outcome {
            RunOutcome::Succeeded => (
                std::mem::take(&mut self.runs[node].input_versions),
                std::mem::take(&mut self.runs[node].replaced),
            ),
            _ => (BTreeMap::new(), Vec::new()),
        };
        let mut resources = *ended.resources;
        resources.queue_wait_ms = match (self.runs[node].claimed, started) {
            (Some(claimed), Some(s)) => Some(ms(s.at.saturating_duration_since(claimed))),
            _ => None,
        };
        let id = &self.runs[node].id;
        report_end(
            observer,
            job,
            run,
            id,
            attempt,
            &ended.outcome,
            then,
            took,
            ended.reused_from.as_deref(),
        );
        let held_back = ended.held_back().is_some();
        let report = spec::with_provenance(job, run, ended.report);
        let (status, message, exit_code) = match ended.outcome {
            RunOutcome::Succeeded => {
                let recipe = spec::output_version(job, run, &read);
                let outputs = made_outputs(&ended.versions, &replaced, &recipe, run.outputs.len());
                for (o, made) in run.outputs.iter().zip(&outputs) {
                    self.made
                        .insert(o.to_string(), (made.version.clone(), id.to_string()));
                    if made.unchanged {
                        self.unchanged.insert(o.to_string());
                    }
                }
                let built = Built {
                    recipe: &recipe,
                    outputs,
                    executor_id: ended.executor_id,
                    report,
                    started_at: started.map(|s| s.at_ns),
                    resources,
                    attempt,
                    metrics: ended.metrics.map(|m| *m),
                    reused_from: ended.reused_from.map(|r| *r),
                };
                let mut events = self.record().built(run, id, built);
                if held_back {
                    self.held_back
                        .extend(run.outputs.iter().map(|o| o.to_string()));
                }
                // In the completion's own write: the log never shows the partitions live
                // before their blocking checks are known.
                for c in &ended.checks {
                    if let Some(note) = crate::check::note(c) {
                        observer.on(Progress::Note(note));
                    }
                    events.push(c.event(Some(&self.id), id, &job.name));
                }
                stamp_end(&mut events, ended_at);
                self.deferred.defer(node, events);
                return Ok(());
            }
            RunOutcome::Cancelled => (Status::Cancelled, "cancelled".to_string(), None),
            RunOutcome::Failed {
                message, exit_code, ..
            } => (Status::Failed, message, exit_code),
        };
        let end = RunEnd {
            status,
            message: &message,
            exit_code,
            executor_id: ended.executor_id,
            then,
            not_started: false,
            started_at: started.map(|s| s.at_ns),
            attempt,
            resources: Some(resources),
        };
        let mut events = self.record().ended(run, id, end);
        stamp_end(&mut events, ended_at);
        crate::run::publish::discard_run(self.engine.data_dir(), id);
        self.append(events)
    }

    /// Plans the refs a run reported missing, on a thread of its own (configs and upstream
    /// services may be asked).
    fn plan_inputs(&mut self, node: usize, missing: Vec<String>) {
        let (engine, tx) = (self.engine, self.tx.clone());
        self.scope.spawn(move || {
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
                engine.plan(&PlanRequest {
                    refs,
                    ..Default::default()
                })
            });
            let plan = plan.map_err(|e| e.to_string());
            let _ = tx.send(Message::InputsPlanned {
                node,
                missing,
                plan,
            });
        });
    }

    /// The builder of a waited-for partition died, or gave the partition back unbuilt: its
    /// build is closed if it died, and the partition planned here, on a thread of its own.
    fn take_over(&mut self, wait: usize, observer: &mut dyn Observer) -> Result<()> {
        self.engine.close_abandoned_builds()?;
        let r = self.machine.wait(wait).partition_ref.clone();
        // Either way round (`wait_outcome` cannot tell a release by a dead builder's closing
        // from one by a cancel, or a taint right after it was built): both are said.
        observer.on(Progress::Note(format!(
            "`{r}` is no longer being built by the build it was delegated to (its process is \
             gone, or it gave the partition back); building it here"
        )));
        let r = PartitionRef::new(&r).map_err(|e| EngineError::Invalid(e.to_string()))?;
        let (engine, tx) = (self.engine, self.tx.clone());
        self.scope.spawn(move || {
            let plan = engine.plan(&PlanRequest {
                refs: vec![r],
                ..Default::default()
            });
            let _ = tx.send(Message::TakeOverPlanned { wait, plan });
        });
        Ok(())
    }

    /// Follows a partition another build is making, until it is available, failed, or its
    /// builder is gone.
    fn spawn_waiter(&self, w: usize) {
        let (store, wait) = (self.store(), self.machine.wait(w));
        let timeout = self.engine.lease().timeout();
        let tx = self.tx.clone();
        self.waiters.follow(self.scope, store, w, wait, timeout, tx);
    }

    /// Appends events, after any deferred completions.
    fn append(&mut self, events: Vec<Event>) -> Result<()> {
        let (mut all, publishing) = self.deferred.take();
        if all.is_empty() {
            // The plan's thousands of events are not copied into an empty vector.
            all = events;
        } else {
            all.extend(events);
        }
        if !all.is_empty() {
            match self.store().append(all) {
                Ok(appended) => self.engine.appended(&appended),
                Err(e) => {
                    self.drop_publishing(publishing, &e);
                    return Err(e.into());
                }
            }
        }
        self.publish(publishing);
        Ok(())
    }

    /// Moves the outputs of runs whose completions the log now holds into place. Only then:
    /// a run fenced off by a takeover never overwrites what another host built.
    fn publish(&self, nodes: Vec<usize>) {
        let data_dir = self.engine.data_dir();
        for node in nodes {
            let id = &self.runs[node].id;
            let staging = crate::run::publish::staging_dir(data_dir, id);
            let outputs = &self.machine.node(node).run.outputs;
            if let Err(e) = crate::run::publish::publish_outputs(data_dir, &staging, outputs) {
                // Recorded live, but not in place: `status` says `missing`, and a build
                // rebuilds it.
                eprintln!(
                    "databuild: cannot move the outputs of run {id} from {} into place: {e}",
                    staging.display()
                );
            }
        }
    }

    /// The completions of `nodes` did not go in: refused, what they staged goes; any other
    /// failure may have committed them (a connection lost at `COMMIT`), so their staging stays
    /// for `close_build` to judge once the log answers again.
    fn drop_publishing(&self, nodes: Vec<usize>, e: &LogError) {
        if matches!(e, LogError::Refused { .. }) {
            self.discard(&nodes);
        }
    }

    /// Drops what these nodes' runs staged.
    fn discard(&self, nodes: &[usize]) {
        for &node in nodes {
            crate::run::publish::discard_run(self.engine.data_dir(), &self.runs[node].id);
        }
    }

    /// Writes deferred completions now.
    fn flush(&mut self) -> Result<()> {
        self.append(Vec::new())
    }

    /// How long the loop may wait for a message before deferred events must be written. While
    /// runs are staged, a claim to carry them comes as slots take those; otherwise they go now.
    fn flush_due(&mut self) -> Result<Duration> {
        let Some(left) = self.deferred.time_left() else {
            return Ok(IDLE_WAKE);
        };
        if self.machine.staged() == 0 || left.is_zero() {
            self.flush()?;
            return Ok(IDLE_WAKE);
        }
        Ok(left.min(IDLE_WAKE))
    }

    /// Records what never started, decides the outcome, and ends the build request. Returns that
    /// end's status (the caller reads the summary from the log, once the slots have stopped).
    fn finish(mut self, observer: &mut dyn Observer) -> Result<Status> {
        let reason = self.machine.stop_reason();
        self.machine.finish(&mut self.effects);
        self.carry_out(observer)?;
        let (makers, failed_outputs) = self.machine.outcomes_of(self.requested);
        let mut failed = false;
        let mut events = Vec::new();
        for w in self.machine.waits().iter().filter(|w| !w.done) {
            events.push(
                Event::partition(Some(&self.id), &w.partition_ref, Status::Cancelled)
                    .with_message(format!("not waited for: {reason}")),
            );
        }
        let skipped: FxHashSet<&str> = self.skipped.iter().map(String::as_str).collect();
        for r in &self.options.refs {
            // A ref a run of this build makes is live only if that run succeeded, whatever an
            // older instance in the log says (a stale ref whose rebuild never started is still
            // `available` there); one it skipped or waited for, if the log has it available.
            // (A run held back by a failed blocking check built its outputs, not live ones: its
            // node ends `Failed`.)
            let live = match makers.get(r.as_str()) {
                Some(&state) => state == super::machine::State::Done,
                None => {
                    !self.held_back.contains(r.as_str())
                        && (skipped.contains(r.as_str())
                            || self
                                .store()
                                .partition(r.as_str())?
                                .is_some_and(|p| p.status == Status::Available))
                }
            };
            if !live {
                failed = true;
                // Requested refs that no run of ours ended (a failed delegation, say) end here.
                let ended = failed_outputs.contains(r.as_str())
                    || makers.contains_key(r.as_str())
                    || self.machine.waits_for(r.as_str());
                if !ended {
                    events.push(
                        Event::partition(Some(&self.id), r.as_str(), Status::Failed)
                            .with_message(reason.clone()),
                    );
                }
            }
        }
        let status = if self.machine.cancelled() {
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
        Ok(status)
    }
}

/// A successful run's outputs as its completion records them: each at the version its slot
/// hashed (the recipe where none was, as for a run that wrote nothing to hash), unchanged if
/// its claim found that version already.
fn made_outputs(
    hashed: &[String],
    replaced: &[Option<String>],
    recipe: &str,
    outputs: usize,
) -> Vec<MadeOutput> {
    (0..outputs)
        .map(|i| {
            let version = hashed.get(i).map_or(recipe, String::as_str).to_string();
            let unchanged = replaced.get(i).and_then(Option::as_deref) == Some(version.as_str());
            MadeOutput { version, unchanged }
        })
        .collect()
}

/// The versions a run's outputs replace that are recipe versions of a log written before content
/// versions, by output; empty when none is (a log written since content versions: no allocation
/// per run).
fn legacy_versions(replaced: &[Option<String>]) -> Vec<Option<String>> {
    use crate::run::publish::is_legacy_version;
    let legacy = |v: &Option<String>| v.as_deref().is_some_and(is_legacy_version);
    if !replaced.iter().any(legacy) {
        return Vec::new();
    }
    replaced
        .iter()
        .map(|v| v.clone().filter(|_| legacy(v)))
        .collect()
}

/// Dates a run's end events when its slot saw it end, not when the scheduler read it.
fn stamp_end(events: &mut [Event], ended: Option<Stamp>) {
    if let Some(ended) = ended {
        for e in events {
            e.timestamp = ended.at_ns;
        }
    }
}

/// Reports a run's end: as retried, as fetching its inputs, or as its outputs' outcome.
#[allow(clippy::too_many_arguments)] // (what a run's end is, as the observer hears it)
fn report_end(
    observer: &mut dyn Observer,
    job: &databuild_core::Job,
    run: &databuild_core::PlannedRun,
    run_id: &str,
    attempt: u32,
    outcome: &RunOutcome,
    then: Option<databuild_log::AfterFailure>,
    took: Duration,
    reused_from: Option<&databuild_log::ReusedFrom>,
) {
    use databuild_log::AfterFailure;
    match (outcome, then) {
        (RunOutcome::Failed { message, .. }, Some(AfterFailure::Retry)) => {
            observer.on(Progress::Retrying {
                job: &job.name,
                outputs: &run.outputs,
                message,
                attempt: attempt + 1,
                attempts: job.retries + 1,
            })
        }
        (RunOutcome::Failed { missing_deps, .. }, Some(AfterFailure::FetchInputs)) => {
            observer.on(Progress::FetchingInputs {
                job: &job.name,
                outputs: &run.outputs,
                missing: missing_deps,
            })
        }
        _ => observer.on(Progress::Finished {
            job: &job.name,
            run_id,
            outputs: &run.outputs,
            outcome,
            took,
            reused_from,
        }),
    }
}
