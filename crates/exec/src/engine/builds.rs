//! Builds, the engine's side: a request is received (recorded), planned (or its kept plan
//! reused), its stale checks run, and its plan handed to the scheduler; builds whose driving
//! process died are closed, and a request can be cancelled.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use databuild_core::{Graph, Plan, PlanRequest, Producer};
use databuild_log::{BuildQuery, Event, EventStore, LogError, RunQuery, Status};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::answers::BuildSummary;
use crate::engine::{Engine, EngineError, Result};
use crate::run::lease::Lease;
use crate::run::owner::owner_dead;
use crate::run::Executor;
use crate::scheduler::{driver, record, BuildOptions, Host, Observer, Progress};

impl Engine {
    /// The instance of an input a run starting now reads: its version and, for a job's output,
    /// the run that built it (its lineage).
    pub(crate) fn input_instance(&self, r: &str) -> Result<(Option<String>, Option<String>)> {
        let Some((producer, _)) = self.graph.producer_of(r) else {
            return Ok((None, None));
        };
        if let Producer::Job { .. } = producer {
            return Ok(self
                .store
                .partition(r)?
                .map_or((None, None), |p| (p.data_version, p.job_run_id)));
        }
        Ok((
            match producer {
                // Marked while a taint holds, so the run is not stale on the taint's account.
                Producer::Dataset(d) => crate::data::versions::external_input_version(
                    self.store.as_ref(),
                    &self.graph.datasets[d],
                    &self.data_dir,
                    r,
                )?,
                // Runs read aliases as version refs (the planner pins them); never asked.
                Producer::Alias(_) | Producer::Job { .. } => None,
            },
            None,
        ))
    }

    /// A query input as a run starting now reads it, if present: a job's output while the log
    /// says it is available (not while failed, tainted, removed or being rebuilt), an external
    /// partition while its data is there.
    pub(crate) fn query_instance(&self, r: &str) -> Result<Option<(String, Option<String>)>> {
        if let Some((Producer::Job { .. }, _)) = self.graph.producer_of(r) {
            return Ok(self
                .store
                .partition(r)?
                .filter(|p| p.status == Status::Available)
                .and_then(|p| Some((p.data_version?, p.job_run_id))));
        }
        let (version, built_by) = self.input_instance(r)?;
        Ok(version.map(|v| (v, built_by)))
    }

    /// Is the process driving some work gone? (See [`owner_dead`]: on another machine, its lease
    /// is revoked first.)
    fn owner_dead(&self, owner: Option<&str>) -> Result<bool> {
        Ok(owner_dead(
            self.store.as_ref(),
            owner,
            self.lease.timeout(),
        )?)
    }
}

pub(crate) fn build(
    engine: &Engine,
    options: &BuildOptions,
    executor: &dyn Executor,
    observer: &mut dyn Observer,
    interrupt: &AtomicBool,
) -> Result<BuildSummary> {
    let id = engine.receive(options)?;
    engine.execute(&id, options, executor, observer, interrupt)
}

pub(crate) fn receive(engine: &Engine, options: &BuildOptions) -> Result<String> {
    // Before the request is recorded: a ref nothing produces is the request's fault, and no
    // build comes of it (it would be a build that failed having done nothing).
    engine.known_refs(&options.refs)?;
    engine.close_abandoned_builds()?;
    // A fresh lease, so the request is not taken for abandoned before its build begins.
    drop(engine.lease.hold()?);
    let id = databuild_log::event::new_id();
    engine.store.append(vec![record::received(&id, options)])?;
    Ok(id)
}

pub(crate) fn execute(
    engine: &Engine,
    id: &str,
    options: &BuildOptions,
    executor: &dyn Executor,
    observer: &mut dyn Observer,
    interrupt: &AtomicBool,
) -> Result<BuildSummary> {
    let started_ns = databuild_log::event::now_ns();
    // Renewed while this build plans and runs: others then know it is alive.
    let _lease = engine.lease.hold()?;
    let pinned;
    let options = if engine.graph.tables.is_empty() {
        options
    } else {
        pinned = BuildOptions {
            refs: engine.pin_aliases(&options.refs, &options.pins),
            ..options.clone()
        };
        &pinned
    };
    let requested: Vec<String> = options.refs.iter().map(|r| r.to_string()).collect();
    if engine.store.build_request(id)?.map(|b| b.status) == Some(Status::Cancelled) {
        // Cancelled before it began.
        return Ok(BuildSummary::nothing_ran(
            id,
            Status::Cancelled,
            requested,
            "cancelled".to_string(),
        ));
    }
    engine
        .store
        .append(vec![Event::build_request(id, Status::Planning)])?;
    if !engine.graph.tables.is_empty() {
        engine.link_tables()?;
    }
    // Its refs were pinned above: planned as they are.
    let request = PlanRequest {
        refs: options.refs.clone(),
        force: options.force,
        allow_stale: options.allow_stale,
        pins: options.pins.clone(),
    };
    // The code versions of this build: read once for its plan, its re-derivations and its runs.
    let code = engine.code();
    let key = engine.plan_key(&request, &code);
    let (mut planned, mut keep) = engine.plan_or_reuse(&request, key.as_deref(), id, &code);
    // Checks that changed (or never ran) on what the plan found built run first, without
    // rebuilding the data; what they decide can change what is live: planned again then.
    if let Ok(plan) = &planned {
        if let Some(message) = over_max_runs(options, plan) {
            // Refused before even the checks run.
            return refuse(engine, id, requested, message);
        }
        if engine.run_stale_checks(id, plan, executor, options.parallel, interrupt)? {
            // Their events end any kept plan: planned from the log, noting what to keep.
            (planned, keep) = engine.plan_keeping(&request, key.as_deref(), &code);
        }
    }
    let plan = match planned {
        Ok(plan) => plan,
        Err(e) => {
            engine.store.append(vec![
                Event::build_request(id, Status::Failed).with_message(e.to_string())
            ])?;
            return Err(e);
        }
    };
    if let Some(message) = over_max_runs(options, &plan) {
        return refuse(engine, id, requested, message);
    }
    if let Some(m) = plan.missing.first() {
        // A plan that cannot run is not recorded run by run.
        let message = engine.missing_message(m);
        engine
            .store
            .append(record::missing(id, &requested, plan.runs.len(), &message))?;
        return Ok(BuildSummary::nothing_ran(
            id,
            Status::Failed,
            requested,
            message,
        ));
    }
    // The request's refs, as a set: what the plan found live of them, and what of a run's
    // outputs the request asked for.
    let requested_set: FxHashSet<&str> = options.refs.iter().map(|r| r.as_str()).collect();
    let plan_record = record::planned(&engine.graph, id, &requested_set, options.parallel, &plan);
    let build = driver::Build {
        engine,
        id,
        options,
        requested: &requested_set,
        executor,
        started_ns,
        code,
    };
    let planned_size = plan.runs.len() + plan.skipped.len();
    let ended = std::thread::scope(|scope| {
        // Written while the scheduler takes the plan in (a backfill's plan is millions of
        // runs on both sides); the driver waits for it before it writes anything itself.
        let recording = scope.spawn(|| engine.store.append(plan_record).map(drop));
        let recorded = || {
            let written = recording.join();
            written.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
        };
        driver::run(build, plan, recorded, observer, interrupt)
    });
    // Read once the driver is gone, its memory with it.
    let summary = ended.and_then(|status| {
        let summary = engine.summary(id)?.expect("the build request was recorded");
        if let (Status::Completed, Some(key)) = (status, key) {
            let kept = engine.keep_for_next_build(&request, &key, id, keep, planned_size);
            // Not the build's failure: the next build plans from the log.
            if let Err(e) = kept {
                observer.on(Progress::Note(format!(
                    "cannot keep the plan for the next build: {e}"
                )));
            }
        }
        Ok(summary)
    });
    summary.inspect_err(|e| {
        // Nothing of it may stay `building`: its runs and claims end with the reason. (When
        // the log itself failed this may fail too; the first error is the one to report.)
        // A build whose lease was lost was closed by the process that took it over; if
        // that process died before it could, this closes it (else the log refuses it).
        let _ = engine.close_build(id, Status::Failed, &format!("the build stopped: {e}"));
    })
}

/// Why `plan` is more than the request allows (`--max-runs`), if it is.
fn over_max_runs(options: &BuildOptions, plan: &Plan) -> Option<String> {
    let max = options.max_runs.filter(|max| plan.runs.len() > *max)?;
    Some(format!(
        "the plan has {} job runs, more than --max-runs {max} allows (see `databuild \
         analyze` of the same refs; raise --max-runs to build it)",
        plan.runs.len()
    ))
}

/// Ends build `id` refused, before anything of its plan is recorded or run: `refused`, not
/// `failed`, since the request asked for no more and nothing failed.
fn refuse(
    engine: &Engine,
    id: &str,
    requested: Vec<String>,
    message: String,
) -> Result<BuildSummary> {
    engine.store.append(vec![
        Event::build_request(id, Status::Refused).with_message(&message)
    ])?;
    Ok(BuildSummary::nothing_ran(
        id,
        Status::Refused,
        requested,
        message,
    ))
}

pub(crate) fn close_abandoned_builds(engine: &Engine) -> Result<usize> {
    // Any sweep starts the window reads skip theirs in (a service sweeping every 2 s, say).
    *engine.swept.lock().expect("not poisoned") = Some(std::time::Instant::now());
    sweep(engine)
}

/// Closes the builds whose driver is dead (see [`Engine::close_abandoned_builds`]).
fn sweep(engine: &Engine) -> Result<usize> {
    let unfinished = engine.store.build_requests(&BuildQuery {
        unfinished: true,
        limit: 10_000,
        ..Default::default()
    })?;
    let mut closed = 0;
    // Many builds of one driver: its life is looked at once.
    let mut dead_owners: FxHashMap<Option<String>, bool> = FxHashMap::default();
    for b in unfinished {
        let dead = match dead_owners.get(&b.owner) {
            Some(dead) => *dead,
            None => {
                let dead = engine.owner_dead(b.owner.as_deref())?;
                dead_owners.insert(b.owner.clone(), dead);
                dead
            }
        };
        if !dead {
            continue;
        }
        let reason = format!(
            "the databuild process driving it ({}) is gone",
            b.owner.as_deref().unwrap_or("?")
        );
        match engine.close_build(&b.build_request_id, Status::Failed, &reason) {
            Ok(()) => closed += 1,
            // Another process may have closed it first; anything else is a bug to report.
            Err(EngineError::Log(LogError::Refused { reason, .. })) => {
                let now = engine.store.build_request(&b.build_request_id)?;
                if now.is_none_or(|n| {
                    !databuild_log::state::is_terminal(databuild_log::Kind::BuildRequest, n.status)
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

/// How often an engine closes dead builds before it answers a read (see
/// [`Engine::close_dead_builds_before_reading`]), counting any sweep; a command of the CLI reads
/// once.
const SWEEP_EVERY: std::time::Duration = std::time::Duration::from_secs(1);

pub(crate) fn close_dead_builds_before_reading(engine: &Engine) -> Result<usize> {
    {
        let mut swept = engine.swept.lock().expect("not poisoned");
        if swept.is_some_and(|at| at.elapsed() < SWEEP_EVERY) {
            return Ok(0);
        }
        *swept = Some(std::time::Instant::now());
    }
    sweep(engine)
}

pub(crate) fn close_build(engine: &Engine, id: &str, status: Status, reason: &str) -> Result<()> {
    let runs = engine.store.job_runs(&RunQuery {
        build_request_id: Some(id.to_string()),
        unfinished: true,
        limit: 1_000_000,
        ..Default::default()
    })?;
    // Its driver is gone; what it left running here goes before its claims are released. A
    // queued run's process may have started too: its `running` waits for the driver's next
    // write, which never came.
    crate::run::reap::end_leftover_jobs(
        &runs
            .iter()
            .filter(|r| matches!(r.status, Status::Queued | Status::Running))
            .map(|r| r.job_run_id.as_str())
            .collect::<Vec<_>>(),
    );
    let mut events = Vec::new();
    for run in &runs {
        // A run that never started (claimed ahead, say) is given up, not failed: `failed`
        // means a job ran and failed.
        let end = if status == Status::Cancelled || run.status != Status::Running {
            Status::Cancelled
        } else {
            Status::Failed
        };
        events.push(Event::job_run(id, &run.job_run_id, &run.job, end).with_message(reason));
    }
    // Its partitions go back to what they were before its claims (no job of it finished
    // them), so whoever waits on them builds them.
    for p in engine.store.request_partitions(id)? {
        if matches!(
            p.status,
            Status::Available | Status::Failed | Status::Cancelled
        ) {
            continue;
        }
        let mut e =
            Event::partition(Some(id), &p.partition_ref, Status::Cancelled).with_message(reason);
        // A claim this build holds is released with it.
        if let Some(row) = engine.store.partition(&p.partition_ref)? {
            if row.status == Status::Building
                && row.job_run_id.is_some()
                && row.job_run_id == p.job_run_id
            {
                e = e.with_run(p.job_run_id.as_deref().unwrap_or_default());
            }
        }
        events.push(e);
    }
    if let Some(b) = engine.store.build_request(id)? {
        if !databuild_log::state::is_terminal(databuild_log::Kind::BuildRequest, b.status) {
            events.push(Event::build_request(id, status).with_message(reason));
        }
    }
    engine.store.append(events)?;
    // Never to be published, now that the log has ended their runs: what their jobs staged
    // goes (even if a fenced-off job still writes there).
    for run in &runs {
        crate::run::publish::discard_run(&engine.data_dir, &run.job_run_id);
    }
    Ok(())
}

pub(crate) fn cancel(engine: &Engine, id: &str) -> Result<()> {
    let Some(b) = engine.store.build_request(id)? else {
        return Err(EngineError::NotFound(format!(
            "no build request `{id}` in the event log"
        )));
    };
    let ended = |b: &databuild_log::BuildRequestRow| {
        databuild_log::state::is_terminal(databuild_log::Kind::BuildRequest, b.status)
            // An analysis ends with its plan: there is nothing left to cancel.
            || (b.analyze_only && b.status == Status::AnalysisCompleted)
    };
    let already_ended = |b: &databuild_log::BuildRequestRow| EngineError::AlreadyEnded {
        what: "build request",
        id: id.to_string(),
        status: b.status,
    };
    if ended(&b) {
        return Err(already_ended(&b));
    }
    if engine.owner_dead(b.owner.as_deref())? {
        return engine.close_build(id, Status::Cancelled, "cancelled");
    }
    let cancelled = engine.store.append(vec![
        Event::build_request(id, Status::Cancelled).with_message("cancelled")
    ]);
    match cancelled {
        Ok(_) => Ok(()),
        // It ended meanwhile (another cancel, or its own end): said as for one ended before.
        Err(e @ LogError::Refused { .. }) => match engine.store.build_request(id)? {
            Some(now) if ended(&now) => Err(already_ended(&now)),
            _ => Err(e.into()),
        },
        Err(e) => Err(e.into()),
    }
}

/// The engine as the scheduler sees it: each call is the engine's own.
impl Host for Engine {
    fn graph(&self) -> &Graph {
        &self.graph
    }

    fn store(&self) -> &dyn EventStore {
        self.store.as_ref()
    }

    fn appended(&self, events: &[databuild_log::Event]) {
        Engine::appended(self, events)
    }

    fn lease(&self) -> &Lease {
        &self.lease
    }

    fn graph_dir(&self) -> &Path {
        &self.graph_dir
    }

    fn data_dir(&self) -> &Path {
        &self.data_dir
    }

    fn logs_dir(&self) -> PathBuf {
        Engine::logs_dir(self)
    }

    fn plan(&self, request: &PlanRequest) -> Result<Plan> {
        Engine::plan(self, request)
    }

    fn input_instance(&self, r: &str) -> Result<(Option<String>, Option<String>)> {
        Engine::input_instance(self, r)
    }

    fn reuses(&self) -> bool {
        !self.environments.is_prod()
    }

    fn find_instance(
        &self,
        outputs: &[String],
        recipe: &databuild_log::RunRecipe,
    ) -> Option<crate::run::reuse::Instance> {
        Engine::find_instance(self, outputs, recipe)
    }

    fn query_instance(&self, r: &str) -> Result<Option<(String, Option<String>)>> {
        Engine::query_instance(self, r)
    }

    fn close_abandoned_builds(&self) -> Result<usize> {
        Engine::close_abandoned_builds(self)
    }

    fn states_now(
        &self,
        refs: &[&str],
        pins: &std::collections::BTreeMap<String, u32>,
        code: &std::sync::Arc<crate::data::code::CodeCache>,
    ) -> Result<Vec<databuild_core::plan::KnownState>> {
        let versions = self.versions_with(code).with_pins(pins.clone());
        Ok(versions.known_all(refs)?)
    }
}
