//! The events a build records: its request and plan (`received`, `requested`, skipped and
//! delegated partitions, scheduled runs) and each run's life (claim, end, not run). Plain
//! functions from what happened to events; the driver appends them.

use std::collections::BTreeMap;

use databuild_core::{Graph, PartitionRef, Plan, PlannedRun, Producer};
use databuild_log::{AfterFailure, Event, Status};
use rustc_hash::{FxHashMap, FxHashSet};

use super::{BuildOptions, Host};
use crate::error::Result;
use crate::run::contract::ReportedMetrics;
use crate::run::owner::this_owner;
use crate::run::RunResources;
use databuild_log::event::Cutoff;

/// A new build request, with what it asks for and who drives it.
pub(crate) fn received(id: &str, options: &BuildOptions) -> Event {
    let requested: Vec<String> = options.refs.iter().map(|r| r.to_string()).collect();
    Event::build_request(id, Status::Received).with_data(|d| {
        d.requested = requested;
        d.force = options.force;
        d.owner = Some(this_owner());
    })
}

/// Requested live refs whose rows one read asks for, to find the runs their skipped runs rely on.
const RELIES_ON_READ: usize = 10_000;

/// Planned runs per `planning` event: each event stays a few dozen KB.
const PLAN_PART: usize = 1_000;

/// The request's plan, recorded in parts, each run as its job and outputs. A run's own events
/// wait for its claim (`Record::scheduled`), and a requested ref's for what happens to it (its
/// request is in `received`): recording costs a few dozen bytes per run, not events.
pub(crate) fn planned(
    graph: &Graph,
    id: &str,
    requested: &FxHashSet<&str>,
    parallel: usize,
    plan: &Plan,
) -> Vec<Event> {
    let mut events = plan_parts(graph, id, Status::Planning, plan.runs.iter());
    // The build's runs by job: those to run, and the `skipped` ones of requested refs found
    // live (`skipped`), so that a build's progress counts both.
    let mut by_job = vec![0u64; graph.jobs.len()];
    let jobs = plan.runs.iter().map(|run| run.job_index).chain(
        requested_live(&plan.skipped, requested).filter_map(|r| {
            match graph.producer_of(r.as_str()) {
                Some((Producer::Job { job, .. }, _)) => Some(job),
                _ => None,
            }
        }),
    );
    for job in jobs {
        by_job[job] += 1;
    }
    let mut done = analysis_completed(id, plan.runs.len());
    done.data.planned_by_job = (graph.jobs.iter().zip(by_job))
        .filter(|(_, n)| *n > 0)
        .map(|(job, n)| (job.name.clone(), n))
        .collect();
    done.data.parallel = Some(parallel as u32);
    events.push(done);
    events
}

/// The requested refs the plan found live (of its `skipped`).
pub(super) fn requested_live<'p>(
    skipped: &'p [PartitionRef],
    requested: &'p FxHashSet<&str>,
) -> impl Iterator<Item = &'p PartitionRef> {
    skipped.iter().filter(|r| requested.contains(r.as_str()))
}

fn analysis_completed(id: &str, planned_runs: usize) -> Event {
    Event::build_request(id, Status::AnalysisCompleted)
        .with_data(|d| d.planned_runs = Some(planned_runs as u64))
}

/// Runs planned, in parts of [`PLAN_PART`]: `planning` events for the build's plan, `executing`
/// ones for runs a running build adds (inputs a run reported missing, a takeover).
pub(super) fn plan_parts<'r>(
    graph: &Graph,
    id: &str,
    status: Status,
    runs: impl Iterator<Item = &'r PlannedRun>,
) -> Vec<Event> {
    let mut parts = Vec::new();
    let mut entries = Vec::with_capacity(PLAN_PART);
    let mut runs = runs.peekable();
    while let Some(run) = runs.next() {
        // (Copied, not formatted: `to_string` goes through `Display`, a backfill's 3M times.)
        let outputs = run.outputs.iter().map(|o| o.as_str().to_owned()).collect();
        entries.push((graph.jobs[run.job_index].name.clone(), outputs));
        if entries.len() == PLAN_PART || runs.peek().is_none() {
            let part = std::mem::replace(&mut entries, Vec::with_capacity(PLAN_PART));
            parts.push(Event::build_request(id, status).with_data(|d| d.plan = part));
        }
    }
    parts
}

/// A plan that needs an external partition that is not there fails every requested ref.
pub(crate) fn missing(
    id: &str,
    requested: &[String],
    planned_runs: usize,
    message: &str,
) -> Vec<Event> {
    let mut events = vec![analysis_completed(id, planned_runs)];
    events.extend(
        requested
            .iter()
            .map(|r| Event::partition(Some(id), r, Status::Failed).with_message(message)),
    );
    events.push(Event::build_request(id, Status::Failed).with_message(message));
    events
}

/// The requested refs the plan found live: each is `available`, a job's output with a
/// `skipped` run relying on the run that built it. Returns those refs and the events.
pub(super) fn skipped(
    engine: &dyn Host,
    id: &str,
    requested: &FxHashSet<&str>,
    live: &[PartitionRef],
) -> Result<(Vec<String>, Vec<Event>)> {
    let mut skipped = Vec::new();
    let mut events = Vec::new();
    // Each requested live ref with the job that builds it (none for an external).
    let live: Vec<(&PartitionRef, Option<usize>)> = requested_live(live, requested)
        .map(|r| match engine.graph().producer_of(r.as_str()) {
            Some((Producer::Job { job, .. }, _)) => (r, Some(job)),
            _ => (r, None),
        })
        .collect();
    // The runs they rely on, read a batch at a time: on a server, one round trip per batch,
    // not per ref (1,560 of them made a no-op build twice as slow on PostgreSQL).
    for batch in live.chunks(RELIES_ON_READ) {
        let built: Vec<&str> = batch
            .iter()
            .filter(|(_, job)| job.is_some())
            .map(|(r, _)| r.as_str())
            .collect();
        let relies_on: FxHashMap<String, String> = engine
            .store()
            .partitions_by_ref(&built)?
            .into_iter()
            .filter_map(|p| Some((p.partition_ref, p.job_run_id?)))
            .collect();
        for &(r, job) in batch {
            skipped.push(r.to_string());
            if let Some(job) = job {
                let run = databuild_log::event::new_id();
                events.push(
                    Event::job_run(id, &run, &engine.graph().jobs[job].name, Status::Skipped)
                        .with_data(|d| {
                            d.outputs = vec![r.to_string()];
                            d.relies_on = relies_on.get(r.as_str()).cloned();
                        }),
                );
            }
            events.push(Event::partition(Some(id), r.as_str(), Status::Available));
        }
    }
    Ok((skipped, events))
}

/// A run's outputs, as its events name them.
fn outputs(run: &PlannedRun) -> Vec<String> {
    run.outputs.iter().map(|o| o.to_string()).collect()
}

/// How a run ended, as its `job_run` event records it.
pub(super) struct RunEnd<'a> {
    pub status: Status,
    pub message: &'a str,
    pub exit_code: Option<i32>,
    pub executor_id: Option<String>,
    pub then: Option<AfterFailure>,
    /// Claimed, but never started.
    pub not_started: bool,
    /// When its job started (ns), if it did.
    pub started_at: Option<i64>,
    pub attempt: u32,
    /// What it cost, of a run whose executor ran it (recorded if it failed).
    pub resources: Option<RunResources>,
}

/// The events of one build's runs.
pub(super) struct Record<'a> {
    pub graph: &'a Graph,
    pub build: &'a str,
}

impl Record<'_> {
    fn job(&self, run: &PlannedRun) -> &str {
        &self.graph.jobs[run.job_index].name
    }

    /// A partition another build is making, that this one waits for.
    pub fn delegated(&self, r: &str, other: &str, events: &mut Vec<Event>) {
        events.push(Event::partition(Some(self.build), r, Status::Delegated));
        events.push(Event::delegation(self.build, r, other));
    }

    /// A run is scheduled, and its outputs with it.
    pub fn scheduled(&self, run: &PlannedRun, id: &str, events: &mut Vec<Event>) {
        let job = &self.graph.jobs[run.job_index];
        events.push(
            Event::job_run(self.build, id, &job.name, Status::Scheduled).with_data(|d| {
                d.outputs = outputs(run);
                d.inputs = run.inputs.iter().map(|o| o.to_string()).collect();
                d.query_inputs = run.query_inputs().iter().map(|o| o.to_string()).collect();
                d.args = run.args().to_vec();
                // Env values often carry secrets: only those the graph marks safe are recorded.
                d.env = run
                    .env()
                    .shown()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect();
                d.job_version = Some(job.version.clone());
            }),
        );
        for o in &run.outputs {
            let mut e =
                Event::partition(Some(self.build), o.as_str(), Status::Scheduled).with_run(id);
            e.job = Some(job.name.clone());
            events.push(e);
        }
    }

    /// A claim: the run is `queued` for this build, holding its outputs, each claimed against
    /// the run that held it when `seen` (compare-and-swap in the log); it will read `read`. Its
    /// `pid` and `host` are the driving process's, which the run's liveness is judged by.
    pub fn claim(
        &self,
        run: &PlannedRun,
        id: &str,
        seen: Vec<String>,
        read: ReadInputs<'_>,
        log_path: String,
        events: &mut Vec<Event>,
    ) {
        let job = self.job(run);
        events.push(
            Event::job_run(self.build, id, job, Status::Queued).with_data(|d| {
                d.pid = Some(std::process::id());
                d.host = crate::run::owner::hostname();
                d.owner = Some(this_owner());
                d.input_versions = read.versions.clone();
                d.input_runs = read.runs;
                d.code_versions = read.code.clone();
                d.log_path = Some(log_path);
            }),
        );
        for (o, last) in run.outputs.iter().zip(seen) {
            let mut e = Event::partition(Some(self.build), o.as_str(), Status::Building)
                .with_run(id)
                .with_data(|d| d.claim_after = Some(last));
            e.job = Some(job.to_string());
            events.push(e);
        }
    }

    /// A claimed run's process started, at `at_ns`.
    pub fn started(&self, run: &PlannedRun, id: &str, at_ns: i64) -> Event {
        let mut e = Event::job_run(self.build, id, self.job(run), Status::Running);
        e.timestamp = at_ns;
        e
    }

    /// A run succeeded: each output is available at its version (its content's hash), marked
    /// [`Cutoff::RebuiltUnchanged`] if that is the version it had before. The run's completion keeps its
    /// recipe (see [`crate::data::versions::data_version`]), and says so when every output came
    /// out unchanged.
    pub fn built(&self, run: &PlannedRun, id: &str, built: Built<'_>) -> Vec<Event> {
        let job = self.job(run);
        let mut events = Vec::with_capacity(1 + run.outputs.len());
        let all_unchanged = !built.outputs.is_empty() && built.outputs.iter().all(|o| o.unchanged);
        let mut completed = Event::job_run(self.build, id, job, Status::Completed).with_data(|d| {
            d.reused_from = built.reused_from.clone();
            d.exit_code = Some(0);
            d.executor_id = built.executor_id;
            d.started_at = built.started_at;
            d.report = built.report.clone();
            d.data_version = Some(built.recipe.to_string());
            // Its outputs named again: its measures are kept per output (`run_metrics`).
            d.outputs = outputs(run);
            d.attempt = Some(built.attempt);
            d.resources = Some(built.resources);
            d.metrics = built
                .metrics
                .as_ref()
                .map(|m| serde_json::to_value(m).expect("numbers by name by ref serialize"));
        });
        // A reused run rebuilt nothing: it says whose instance it took instead.
        match &built.reused_from {
            Some(from) => completed = completed.with_message(from.message()),
            None if all_unchanged => completed = cut_off(completed, Cutoff::RebuiltUnchanged),
            None => {}
        }
        events.push(completed);
        for (o, made) in run.outputs.iter().zip(&built.outputs) {
            let mut e = Event::partition(Some(self.build), o.as_str(), Status::Available)
                .with_run(id)
                .with_data(|d| {
                    d.data_version = Some(made.version.clone());
                    d.report = built.report.clone();
                });
            if made.unchanged {
                e = cut_off(e, Cutoff::RebuiltUnchanged);
            }
            e.job = Some(job.to_string());
            events.push(e);
        }
        events
    }

    /// Runs not run because the runs of this build they waited on wrote the bytes they had read:
    /// each `skipped`, relying on the run that built its outputs (`relies_on`, by output), which
    /// are `available` to this build as they were.
    pub fn kept(
        &self,
        run: &PlannedRun,
        id: &str,
        relies_on: Option<String>,
        events: &mut Vec<Event>,
    ) {
        let skipped =
            Event::job_run(self.build, id, self.job(run), Status::Skipped).with_data(|d| {
                d.relies_on = relies_on;
                d.outputs = outputs(run);
            });
        events.push(cut_off(skipped, Cutoff::InputsUnchanged));
        for o in &run.outputs {
            events.push(Event::partition(
                Some(self.build),
                o.as_str(),
                Status::Available,
            ));
        }
    }

    /// A run's end other than success, and the release of its outputs: a run that failed
    /// fails them; one cancelled (or never started) gives them back to what they were.
    pub fn ended(&self, run: &PlannedRun, id: &str, end: RunEnd<'_>) -> Vec<Event> {
        let job = &self.graph.jobs[run.job_index];
        let status = end.status;
        let mut events = Vec::with_capacity(1 + run.outputs.len());
        events.push(
            Event::job_run(self.build, id, &job.name, status)
                .with_message(end.message)
                .with_data(|d| {
                    d.exit_code = end.exit_code;
                    d.executor_id = end.executor_id;
                    d.then = end.then;
                    d.not_started = end.not_started;
                    d.started_at = end.started_at;
                    if status == Status::Failed {
                        d.attempt = Some(end.attempt);
                        d.attempts = Some(job.retries + 1);
                        if end.resources.is_some() {
                            d.resources = end.resources;
                            d.outputs = outputs(run);
                        }
                    }
                }),
        );
        let partition_status = if status == Status::Cancelled {
            Status::Cancelled
        } else {
            Status::Failed
        };
        for o in &run.outputs {
            let mut e = Event::partition(Some(self.build), o.as_str(), partition_status)
                .with_run(id)
                .with_message(end.message);
            e.job = Some(job.name.clone());
            events.push(e);
        }
        events
    }

    /// A run that will not run because of `reason`, and its outputs that will not be built.
    pub fn not_run(&self, run: &PlannedRun, id: &str, reason: &str, events: &mut Vec<Event>) {
        events.push(
            Event::job_run(self.build, id, self.job(run), Status::Cancelled)
                .with_message(format!("not run: {reason}")),
        );
        for o in &run.outputs {
            events.push(
                Event::partition(Some(self.build), o.as_str(), Status::Cancelled)
                    .with_message(format!("not built: {reason}")),
            );
        }
    }

    /// Requested refs that will not be built because of `reason`, of a planned run that was
    /// never recorded (see `record::planned`).
    pub fn not_built<'r>(
        &self,
        refs: impl Iterator<Item = &'r PartitionRef>,
        reason: &str,
        events: &mut Vec<Event>,
    ) {
        for r in refs {
            events.push(
                Event::partition(Some(self.build), r.as_str(), Status::Cancelled)
                    .with_message(format!("not built: {reason}")),
            );
        }
    }

    /// The run gave up its claim before it started, to wait for the build that claimed first.
    /// `first`: nothing of the run is recorded yet (its first claim was the one refused), so
    /// this event names its outputs.
    pub fn lost_claim(&self, run: &PlannedRun, id: &str, first: bool) -> Event {
        Event::job_run(self.build, id, self.job(run), Status::Cancelled)
            .with_message(
                "another build started building its outputs first; waiting for it instead",
            )
            .with_data(|d| {
                if first {
                    d.outputs = outputs(run);
                    d.not_started = true;
                }
            })
    }

    /// Another build made the run's outputs meanwhile: this build relies on that run. `first`:
    /// as for [`Record::lost_claim`].
    pub fn adopted(
        &self,
        run: &PlannedRun,
        id: &str,
        relies_on: Option<String>,
        first: bool,
    ) -> Event {
        Event::job_run(self.build, id, self.job(run), Status::Skipped)
            .with_message("another build made its outputs meanwhile")
            .with_data(|d| {
                d.relies_on = relies_on;
                if first {
                    d.outputs = outputs(run);
                }
            })
    }
}

/// What a successful run made, for its completion's events.
pub struct Built<'a> {
    /// The run's recipe ([`crate::data::versions::data_version`]).
    pub recipe: &'a str,
    /// By output, in output order.
    pub outputs: Vec<MadeOutput>,
    pub executor_id: Option<String>,
    pub report: Option<serde_json::Value>,
    pub started_at: Option<i64>,
    pub resources: RunResources,
    /// Which attempt of its outputs it was (1 for the first).
    pub attempt: u32,
    /// What its job reported of its outputs (`metrics` of its report), checked.
    pub metrics: Option<ReportedMetrics>,
    /// It took this instance instead of running (an environment's build).
    pub reused_from: Option<databuild_log::ReusedFrom>,
}

/// One output of a successful run: its data version, and whether it is the one it had.
pub struct MadeOutput {
    pub version: String,
    pub unchanged: bool,
}

/// What a run reads, fixed as it is claimed: each input's data version (its required inputs',
/// and its query inputs' that are present), and of each input a job built, the run that built
/// the instance read (its lineage).
pub struct ReadInputs<'a> {
    pub versions: &'a BTreeMap<String, String>,
    pub runs: BTreeMap<String, String>,
    /// The code it runs: its job's code versions, computed once per build.
    pub code: &'a BTreeMap<String, String>,
}

/// `e` marked with what early cutoff did: typed for programs, its message for people.
fn cut_off(e: Event, cutoff: Cutoff) -> Event {
    e.with_message(cutoff.message())
        .with_data(|d| d.cutoff = Some(cutoff))
}
