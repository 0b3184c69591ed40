//! The engine: one implementation of planning, analyze, status, explain, taint and builds,
//! shared by the CLI and the service. It ties the graph (core), the event log and this
//! machine's resolver together. This file holds the engine and planning; each other
//! responsibility has a file of its own (`status`, `taint`, `build`, `freshness`, `tables`).

pub(crate) mod checks;
pub mod freshness;
pub mod gc;
pub mod lineage;
pub mod listing;
pub mod plan_cache;
pub mod progress;
mod status;
pub mod summary;
pub mod tables;
mod taint;
pub mod wants;

use std::path::PathBuf;
use std::sync::Arc;

use databuild_core::{plan, Graph, PartitionRef, Plan, PlanError, PlanRequest, Producer};
use databuild_log::{Event, EventStore, LogError, Status};

pub use crate::answers::{
    parse_rfc3339, rfc3339, Explanation, PlannedStep, ProducerInfo, StatusReport,
};
use crate::config::EngineConfig;
use crate::data::rechecked::Rechecked;
use crate::data::resolver::LocalResolver;
use crate::data::versions::VersionedStates;
use crate::run::lease::Lease;

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot plan: {0}")]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Log(#[from] LogError),
    /// A build request, job, source, table or want that does not exist (the message names it).
    #[error("{0}")]
    NotFound(String),
    /// A build request that has already ended cannot be cancelled.
    #[error("build request {id} already ended ({status})")]
    AlreadyEnded { id: String, status: Status },
    #[error("{0}")]
    Invalid(String),
}

impl EngineError {
    /// Caused by the request (bad refs, unplannable graphs), not by the system.
    pub fn is_user_error(&self) -> bool {
        match self {
            EngineError::Plan(_)
            | EngineError::Invalid(_)
            | EngineError::NotFound(_)
            | EngineError::AlreadyEnded { .. } => true,
            EngineError::Log(e) => e.is_user_error(),
        }
    }
}

pub type Result<T> = std::result::Result<T, EngineError>;

pub struct Engine {
    pub graph: Graph,
    /// The graph file's folder: jobs and helpers run there.
    pub graph_dir: PathBuf,
    pub data_dir: PathBuf,
    pub store: Arc<dyn EventStore>,
    /// The clock and credentials the binary read at its edge.
    pub config: EngineConfig,
    /// This process's lease on the log, held while it drives builds.
    pub lease: Lease,
    /// The digest of the graph file's text, when known: no-op plans are kept under it (see
    /// `plan_cache.rs`).
    pub(crate) graph_digest: Option<String>,
}

/// The answer of `analyze`: the recorded build request and its plan.
#[derive(Debug)]
pub struct Analysis {
    pub build_request_id: String,
    pub plan: Plan,
    /// With `force`: the live partitions built from the current instances of the forced ones,
    /// which stay live (see [`crate::answers::ForceKeepsLive`]).
    pub force_keeps_live: Option<crate::answers::ForceKeepsLive>,
}

impl Engine {
    /// An engine over `store`, with the lease its builds will hold.
    pub fn new(
        graph: Graph,
        graph_dir: PathBuf,
        data_dir: PathBuf,
        store: Arc<dyn EventStore>,
        config: EngineConfig,
    ) -> Engine {
        let lease = Lease::new(store.clone(), config.lease_timeout);
        Engine {
            graph,
            graph_dir,
            data_dir,
            store,
            config,
            lease,
            graph_digest: None,
        }
    }

    /// Names the graph file's text the graph was parsed from, by its digest (`graph_digest` of
    /// the plan cache), so that builds may keep their no-op plans.
    pub fn with_graph_digest(mut self, digest: String) -> Engine {
        self.graph_digest = Some(digest);
        self
    }

    /// Today's date, `YYYY-MM-DD`, by the engine's clock.
    pub fn today(&self) -> String {
        self.config.clock.today()
    }

    /// The executor the graph asks for (`[graph] executor`).
    pub fn executor(&self) -> Box<dyn crate::run::Executor> {
        match &self.graph.executor {
            databuild_core::ExecutorConfig::Local => Box::new(crate::run::LocalExecutor),
            databuild_core::ExecutorConfig::Slurm(config) => {
                Box::new(crate::run::slurm::SlurmExecutor::new(config.clone()))
            }
        }
    }

    pub(crate) fn resolver(&self) -> LocalResolver<'_> {
        LocalResolver::new(&self.graph, &self.graph_dir, &self.data_dir, self.today())
    }

    pub(crate) fn versions(&self) -> VersionedStates<'_> {
        VersionedStates::new(
            &self.graph,
            self.store.as_ref(),
            &self.data_dir,
            self.today(),
        )
        .shown_from(&self.graph_dir)
    }

    /// Plans without recording anything, against the log's partition states (with staleness, and
    /// live partitions of config jobs re-checked against their config).
    pub fn plan(&self, request: &PlanRequest) -> Result<Plan> {
        if self.graph.tables.is_empty() {
            // No aliases to resolve: no copy of a possibly huge request.
            return self.plan_pinned(request);
        }
        self.plan_pinned(&PlanRequest {
            refs: self.pin_aliases(&request.refs, &request.pins),
            ..request.clone()
        })
    }

    /// [`Engine::plan`] of a request whose alias refs are already pinned to version refs.
    pub(crate) fn plan_pinned(&self, request: &PlanRequest) -> Result<Plan> {
        self.plan_witnessed(request, None)
    }

    /// [`Engine::plan_pinned`], noting the files it looks at in `witnesses`.
    pub(crate) fn plan_witnessed(
        &self,
        request: &PlanRequest,
        witnesses: Option<&crate::data::versions::Witnesses>,
    ) -> Result<Plan> {
        let states = Rechecked::new(
            self.versions()
                .with_pins(request.pins.clone())
                .witnessed_by(witnesses),
            &self.graph,
            self.store.as_ref(),
        );
        let mut resolver = self.resolver().witnessed_by(witnesses);
        let planned = plan(&self.graph, request, &states, &mut resolver);
        // A read that failed after the last states were asked (a config re-check) ends it too.
        if let Some(failure) = states.take_failure() {
            return Err(EngineError::Log(failure));
        }
        Ok(planned?)
    }

    /// What `plan` will cost at `parallel` runs at once, from its jobs' recorded durations (one
    /// read of the jobs' metrics).
    pub fn estimate(&self, plan: &Plan, parallel: usize) -> Result<crate::answers::PlanCost> {
        let stats = self.store.job_stats(None)?;
        let durations: Vec<Option<databuild_core::estimate::JobDurations>> = self
            .graph
            .jobs
            .iter()
            .map(|j| {
                let s = stats.iter().find(|s| s.job == j.name)?;
                Some(databuild_core::estimate::JobDurations {
                    p50_ms: s.p50_ms?,
                    p95_ms: s.p95_ms.or(s.p50_ms)?,
                })
            })
            .collect();
        Ok(databuild_core::estimate::estimate(plan, &durations, parallel).into())
    }

    /// Requested alias refs become the version refs they read now: a build of `orders/date=D`
    /// builds (and reports) `orders/v2/date=D` when v2 is promoted.
    pub fn pin_aliases(
        &self,
        refs: &[PartitionRef],
        pins: &std::collections::BTreeMap<String, u32>,
    ) -> Vec<PartitionRef> {
        let states = self.versions().with_pins(pins.clone());
        refs.iter()
            .map(|r| states.resolve(r.as_str()).unwrap_or_else(|| r.clone()))
            .collect()
    }

    /// Plans and records the analysis as a build request that ends at `analysis_completed`
    /// (or `failed`, with the reason, when the refs cannot be planned).
    pub fn analyze(&self, request: &PlanRequest) -> Result<Analysis> {
        let id = databuild_log::event::new_id();
        let requested: Vec<String> = request.refs.iter().map(|r| r.to_string()).collect();
        self.store.append(vec![
            Event::build_request(&id, Status::Received).with_data(|d| {
                d.requested = requested;
                d.analyze_only = true;
                d.force = request.force;
            }),
            Event::build_request(&id, Status::Planning),
        ])?;
        match self.plan(request) {
            Ok(plan) => {
                let mut done = Event::build_request(&id, Status::AnalysisCompleted)
                    .with_data(|d| d.planned_runs = Some(plan.runs.len() as u64));
                if let Some(m) = plan.missing.first() {
                    done = done.with_message(format!(
                        "{} external partition(s) missing, first `{}`",
                        plan.missing.len(),
                        m.partition_ref
                    ));
                }
                self.store.append(vec![done])?;
                let force_keeps_live = request
                    .force
                    .then(|| self.force_keeps_live(&request.refs))
                    .transpose()?;
                Ok(Analysis {
                    build_request_id: id,
                    plan,
                    force_keeps_live,
                })
            }
            Err(e) => {
                self.store.append(vec![
                    Event::build_request(&id, Status::Failed).with_message(e.to_string())
                ])?;
                Err(e)
            }
        }
    }
}

/// `job`, `dataset`, `source` (raw partitions of a [[source]]) or `alias` (a table's alias).
pub fn producer_kind(graph: &Graph, p: Producer) -> &'static str {
    match p {
        Producer::Job { .. } => "job",
        Producer::Dataset(d) if graph.datasets[d].source.is_some() => "source",
        Producer::Dataset(_) => "dataset",
        Producer::Alias(_) => "alias",
    }
}

/// How many of a dynamic job's latest runs say what it reads, for the graph's picture.
const RECORDED_RUNS: usize = 20;

impl Engine {
    /// The edges of the graph's dynamic jobs as the log recorded them, `(producer, job)`: what
    /// their latest runs read (a config chooses inputs at plan time; the graph file cannot say).
    pub fn recorded_edges(&self) -> Result<Vec<(databuild_core::Producer, usize)>> {
        let mut edges = std::collections::BTreeSet::new();
        for (j, job) in self.graph.jobs.iter().enumerate() {
            if !matches!(job.deps, databuild_core::Deps::Dynamic { .. }) {
                continue;
            }
            let runs = self.store.job_runs(&databuild_log::RunQuery {
                job: Some(job.name.clone()),
                limit: RECORDED_RUNS,
                ..Default::default()
            })?;
            for input in runs.iter().flat_map(|r| &r.inputs) {
                if let Some((p, _)) = self.graph.producer_of(input) {
                    edges.insert((p, j));
                }
            }
        }
        Ok(edges.into_iter().collect())
    }

    /// Metrics of every job of the graph (those that never ran too), or of one.
    pub fn jobs(&self, name: Option<&str>) -> Result<Vec<databuild_log::JobStats>> {
        if let Some(n) = name {
            if self.graph.job(n).is_none() {
                return Err(EngineError::NotFound(format!("no job `{n}` in the graph")));
            }
        }
        let mut stats = self.store.job_stats(name)?;
        Ok(self
            .graph
            .jobs
            .iter()
            .filter(|j| name.is_none_or(|n| n == j.name))
            .map(|j| match stats.iter().position(|s| s.job == j.name) {
                Some(i) => stats.swap_remove(i),
                None => databuild_log::JobStats::never_run(&j.name),
            })
            .collect())
    }
}
