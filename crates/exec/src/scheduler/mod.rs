//! `build`: plan, then run the plan's job runs as their inputs become ready.
//!
//! - [`machine`]: the scheduler's decisions as a pure state machine (inputs in, effects out).
//! - [`driver`]: the thin I/O loop around it: slot threads, waiters, log appends, progress.
//! - [`spec`]: what a run is started with ([`crate::run::RunSpec`]) and the version it records.
//! - [`record`]: the events of the request, its plan and its runs.
//! - [`summary`]: [`BuildSummary`], read back from the log.
//!
//! Claiming a partition (`building`) goes through the log, which refuses a second claim: when
//! another build got there first, this one waits for it instead (delegation). Runs whose driving
//! process died are found by their recorded owner and closed.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use databuild_core::{PartitionRef, PlanRequest, Producer};
use databuild_log::{BuildQuery, Event, LogError, RunQuery, Status};
use rustc_hash::FxHashSet;

use crate::engine::{Engine, EngineError, Result};
use crate::run::owner::owner_dead;
use crate::run::{Executor, RunOutcome};

mod driver;
mod machine;
mod record;
mod spec;

use crate::answers::BuildSummary;

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
    /// Refuse a plan of more job runs than this (`--max-runs`): nothing runs.
    pub max_runs: Option<usize>,
}

/// Runs at once when a request does not say: as many as this machine has cores.
pub fn default_parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for BuildOptions {
    /// Nothing requested yet; as many runs at once as this machine has cores.
    fn default() -> Self {
        BuildOptions {
            refs: Vec::new(),
            force: false,
            parallel: default_parallelism(),
            keep_going: false,
            allow_stale: false,
            pins: BTreeMap::new(),
            max_runs: None,
        }
    }
}

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
        /// The run's id (its last attempt's).
        run_id: &'a str,
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
        // A fresh lease, so the request is not taken for abandoned before its build begins.
        drop(self.lease.hold()?);
        let id = databuild_log::event::new_id();
        self.store.append(vec![record::received(&id, options)])?;
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
        // Renewed while this build plans and runs: others then know it is alive.
        let _lease = self.lease.hold()?;
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
        // Its refs were pinned above: planned as they are.
        let request = PlanRequest {
            refs: options.refs.clone(),
            force: options.force,
            allow_stale: options.allow_stale,
            pins: options.pins.clone(),
        };
        let key = self.plan_key(&request);
        let (mut planned, mut keep) = self.plan_or_reuse(&request, key.as_deref(), id);
        // Checks that changed (or never ran) on what the plan found built run first, without
        // rebuilding the data; what they decide can change what is live: planned again then.
        if let Ok(plan) = &planned {
            if self.run_stale_checks(id, plan, executor, options.parallel, interrupt)? {
                // Their events end any kept plan: planned from the log, noting what to keep.
                (planned, keep) = self.plan_keeping(&request, key.as_deref());
            }
        }
        let plan = match planned {
            Ok(plan) => plan,
            Err(e) => {
                self.store.append(vec![
                    Event::build_request(id, Status::Failed).with_message(e.to_string())
                ])?;
                return Err(e);
            }
        };
        if let Some(max) = options.max_runs.filter(|max| plan.runs.len() > *max) {
            // Refused before anything of the plan is recorded or run.
            let message = format!(
                "the plan has {} job runs, more than --max-runs {max} allows (see `databuild \
                 analyze` of the same refs; raise --max-runs to build it)",
                plan.runs.len()
            );
            self.store.append(vec![
                Event::build_request(id, Status::Failed).with_message(&message)
            ])?;
            return Ok(BuildSummary::nothing_ran(
                id,
                Status::Failed,
                requested,
                message,
            ));
        }
        if let Some(m) = plan.missing.first() {
            // A plan that cannot run is not recorded run by run.
            let message = self.missing_message(m);
            self.store
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
        let plan_record = record::planned(&self.graph, id, &requested_set, options.parallel, &plan);
        let build = driver::Build {
            engine: self,
            id,
            options,
            requested: &requested_set,
            executor,
            started_ns,
        };
        let planned_size = plan.runs.len() + plan.skipped.len();
        let ended = std::thread::scope(|scope| {
            // Written while the scheduler takes the plan in (a backfill's plan is millions of
            // runs on both sides); the driver waits for it before it writes anything itself.
            let recording = scope.spawn(|| self.store.append(plan_record).map(drop));
            let recorded = || {
                let written = recording.join();
                written.unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            };
            driver::run(build, plan, recorded, observer, interrupt)
        });
        // Read once the driver is gone, its memory with it.
        let summary = ended.and_then(|status| {
            let summary = self.summary(id)?.expect("the build request was recorded");
            if let (Status::Completed, Some(key)) = (status, key) {
                let kept = self.keep_for_next_build(&request, &key, id, keep, planned_size);
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
            let _ = self.close_build(id, Status::Failed, &format!("the build stopped: {e}"));
        })
    }

    /// The version an input has now, for the record of a run starting from it. A failed read
    /// of the log is an error: a version left out would enter the run's data version for good.
    pub(crate) fn input_version(&self, r: &str) -> Result<Option<String>> {
        Ok(self.input_instance(r)?.0)
    }

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
            if !self.owner_dead(b.owner.as_deref())? {
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

    /// Is the process driving some work gone? (See [`owner_dead`]: on another machine, its lease
    /// is revoked first.)
    fn owner_dead(&self, owner: Option<&str>) -> Result<bool> {
        Ok(owner_dead(
            self.store.as_ref(),
            owner,
            self.lease.timeout(),
        )?)
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
        crate::run::reap::end_leftover_jobs(
            &runs
                .iter()
                .filter(|r| r.status == Status::Running)
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
        for p in self.store.request_partitions(id)? {
            if matches!(
                p.status,
                Status::Available | Status::Failed | Status::Cancelled
            ) {
                continue;
            }
            let mut e = Event::partition(Some(id), &p.partition_ref, Status::Cancelled)
                .with_message(reason);
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
        // Never to be published, now that the log has ended their runs: what their jobs staged
        // goes (even if a fenced-off job still writes there).
        for run in &runs {
            crate::run::publish::discard_run(&self.data_dir, &run.job_run_id);
        }
        Ok(())
    }

    /// Cancels a build request. Its process (if alive) sees it and stops its runs; if its process
    /// is gone, its runs are closed here. An unknown request ([`EngineError::NotFound`]) and an
    /// ended one ([`EngineError::AlreadyEnded`]) are told apart by type, so callers derive their
    /// answer (404, 409) from the kind; one that ends meanwhile is refused by the log.
    pub fn cancel(&self, id: &str) -> Result<()> {
        let Some(b) = self.store.build_request(id)? else {
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
            id: id.to_string(),
            status: b.status,
        };
        if ended(&b) {
            return Err(already_ended(&b));
        }
        if self.owner_dead(b.owner.as_deref())? {
            return self.close_build(id, Status::Cancelled, "cancelled");
        }
        let cancelled = self.store.append(vec![
            Event::build_request(id, Status::Cancelled).with_message("cancelled")
        ]);
        match cancelled {
            Ok(_) => Ok(()),
            // It ended meanwhile (another cancel, or its own end): said as for one ended before.
            Err(e @ LogError::Refused { .. }) => match self.store.build_request(id)? {
                Some(now) if ended(&now) => Err(already_ended(&now)),
                _ => Err(e.into()),
            },
            Err(e) => Err(e.into()),
        }
    }
}
