//! The engine: one implementation of planning, analyze, status, explain, taint and builds,
//! shared by the CLI and the service. It ties the graph (core), the event log and this
//! machine's resolver together.
//!
//! This file is its facade: every public call of [`Engine`] is declared here, with its doc, and
//! delegates to the facet that carries it out (`planning`, `builds`, `status`, `listing`, ...).
//! The facets hold crate-internal functions and the helpers they share; none adds to the public
//! surface.

mod arrivals;
mod builds;
pub(crate) mod checks;
mod env_diff;
pub mod environments;
pub mod forecast;
pub mod freshness;
pub mod gc;
mod jobs;
pub mod lineage;
pub mod listing;
pub mod plan_cache;
mod planning;
mod progress;
mod promote;
mod status;
mod summary;
mod tables;
mod taint;
pub mod wants;

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use databuild_core::plan::MissingExternal;
use databuild_core::{Graph, PartitionRef, Plan, PlanRequest, Producer, Table};
use databuild_log::{
    BuildRequestRow, Event, EventStore, JobStats, PartitionQuery, PartitionRow, Status, WantRow,
};

pub use crate::error::{EngineError, Result};
use freshness::Freshness;
use gc::{GcOptions, GcReport};
use lineage::{InstanceDiff, Lineage, LineageQuery, TaintImpact};
use listing::{ListedStatus, PartitionPage};
pub use planning::{analyze_page, estimate_parallel, ESTIMATE_PARALLEL};
use wants::Decision;

use crate::answers::{
    BuildProgress, BuildSummary, DatasetView, DerivedStatus, Explanation, ForceKeepsLive,
    Maintenance, PlanCost, Promotion, SourceDetail, SourceView, StatusReport, WaitingPartition,
    WantBuild,
};
use crate::config::EngineConfig;
use crate::run::lease::Lease;
use crate::run::Executor;
use crate::scheduler::{BuildOptions, Observer};

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
    /// When this engine last closed dead builds, by any path (`builds.rs`): a read within a
    /// second of it does not sweep again.
    pub(crate) swept: std::sync::Mutex<Option<std::time::Instant>>,
    /// Run events out as OpenLineage, when configured; dropped with the engine, which flushes it.
    lineage: Option<crate::openlineage::LineageOut>,
    /// Which environment this engine is in, and where the others are.
    pub environments: environments::Environments,
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
        let lineage = config.openlineage.clone().map(|c| {
            crate::openlineage::LineageOut::new(c, graph_dir.join(".databuild/openlineage"))
        });
        Engine {
            environments: environments::Environments::prod_only(&data_dir),
            graph,
            graph_dir,
            data_dir,
            store,
            config,
            lease,
            graph_digest: None,
            swept: Default::default(),
            lineage,
        }
    }

    /// This engine for a caller no config executable may run for (contract section 6: a reader
    /// without a token, when writes need one): the same graph and log, but its resolver answers
    /// [`databuild_core::ConfigWithheld`] instead of running one, and answers say so.
    pub fn withholding_configs(&self) -> Engine {
        // It only reads: it drives no run, so it has no lineage to send.
        let config = EngineConfig {
            configs: crate::config::ConfigAccess::Withheld,
            openlineage: None,
            ..self.config.clone()
        };
        let mut engine = Engine::new(
            self.graph.clone(),
            self.graph_dir.clone(),
            self.data_dir.clone(),
            self.store.clone(),
            config,
        );
        engine.graph_digest = self.graph_digest.clone();
        engine.environments = self.environments.clone();
        engine
    }

    /// This engine in `environments.current`: its data dir is that environment's.
    pub fn with_environments(mut self, environments: environments::Environments) -> Engine {
        self.data_dir = environments.data_dir_of(&environments.current);
        self.environments = environments;
        self
    }

    /// Names the graph file's text the graph was parsed from, by its digest (`graph_digest` of
    /// the plan cache), so that builds may keep their no-op plans.
    pub fn with_graph_digest(mut self, digest: String) -> Engine {
        self.graph_digest = Some(digest);
        self
    }

    /// Hands events just appended to the OpenLineage output, if there is one; never waits.
    pub(crate) fn appended(&self, events: &[databuild_log::Event]) {
        if let Some(lineage) = &self.lineage {
            lineage.observe(&self.graph, events);
        }
    }

    /// Today's date, `YYYY-MM-DD`, by the engine's clock.
    pub fn today(&self) -> String {
        self.config.clock.today()
    }

    /// The time now, UTC, by the engine's clock.
    pub fn now(&self) -> chrono::NaiveDateTime {
        self.config.clock.now()
    }

    /// The executor the graph asks for (`[graph] executor`). On Slurm, a job that sets no
    /// `mem` asks for its history's p95 peak memory with headroom (`slurm::mem_of`).
    pub fn executor(&self) -> Box<dyn Executor> {
        match &self.graph.executor {
            databuild_core::ExecutorConfig::Local => Box::new(crate::run::LocalExecutor),
            databuild_core::ExecutorConfig::Slurm(config) => Box::new(
                crate::run::slurm::SlurmExecutor::new(config.clone())
                    .with_mem_defaults(jobs::learned_mem(self)),
            ),
        }
    }

    // Planning and analysis (`planning`).

    /// Plans without recording anything, against the log's partition states (with staleness, and
    /// live partitions of config jobs re-checked against their config).
    pub fn plan(&self, request: &PlanRequest) -> Result<Plan> {
        planning::plan(self, request)
    }

    /// What `plan` will cost at `parallel` runs at once, from its jobs' recorded durations (one
    /// read of the jobs' metrics).
    pub fn estimate(&self, plan: &Plan, parallel: usize) -> Result<PlanCost> {
        planning::estimate(self, plan, parallel)
    }

    /// How many of `plan`'s runs rebuild a partition stale because a job's code changed (its
    /// own job's or one up its inputs): what a script edit costs (`analyze`'s `stale_by_code`).
    pub fn stale_by_code(&self, plan: &Plan) -> usize {
        planning::stale_by_code(plan)
    }

    /// Requested alias refs become the version refs they read now: a build of `orders/date=D`
    /// builds (and reports) `orders/v2/date=D` when v2 is promoted.
    pub fn pin_aliases(
        &self,
        refs: &[PartitionRef],
        pins: &BTreeMap<String, u32>,
    ) -> Vec<PartitionRef> {
        planning::pin_aliases(self, refs, pins)
    }

    /// Plans and records the analysis as a build request that ends at `analysis_completed`
    /// (or `failed`, with the reason, when the refs cannot be planned).
    pub fn analyze(&self, request: &PlanRequest) -> Result<Analysis> {
        planning::analyze(self, request)
    }

    /// Why an external partition a plan needs is not there: a source partition's state
    /// (still open, expired: its raw data is gone, never received), or where its dataset looks.
    pub fn missing_reason(&self, m: &MissingExternal) -> Option<String> {
        planning::missing_reason(self, m)
    }

    /// Why each of the plan's missing external partitions is not there, for the first
    /// `MISSING_REASONS` (each is a read of the log or the disk).
    pub fn missing_reasons(&self, plan: &Plan) -> Vec<Option<String>> {
        planning::missing_reasons(self, plan)
    }

    // Builds (`builds`): received, planned and handed to the scheduler; closed; cancelled.

    /// Makes the requested refs live and fresh. Returns the summary even when the build failed;
    /// errors are for requests that could not be planned or a log that could not be written.
    pub fn build(
        &self,
        options: &BuildOptions,
        executor: &dyn Executor,
        observer: &mut dyn Observer,
        interrupt: &AtomicBool,
    ) -> Result<BuildSummary> {
        builds::build(self, options, executor, observer, interrupt)
    }

    /// Records a new build request (`received`), after closing builds whose process died, and
    /// returns its id. [`Engine::execute`] then carries it out.
    pub fn receive(&self, options: &BuildOptions) -> Result<String> {
        builds::receive(self, options)
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
        builds::execute(self, id, options, executor, observer, interrupt)
    }

    /// Closes, truthfully, builds whose driving process on this machine is gone: their unfinished
    /// runs and claims fail with the reason, so no partition stays `building` forever.
    pub fn close_abandoned_builds(&self) -> Result<usize> {
        builds::close_abandoned_builds(self)
    }

    /// [`Engine::close_abandoned_builds`] before an answer is read (`builds`, `status`,
    /// `partitions`, `explain`, `datasets` and the service's answers), so that no answer shows a
    /// build running whose driver is gone: a few indexed reads (the unfinished builds, each
    /// driver's life once), writing only to close one; at most once a second per engine.
    pub fn close_dead_builds_before_reading(&self) -> Result<usize> {
        builds::close_dead_builds_before_reading(self)
    }

    /// Ends a build request and everything it left unfinished, in one batch.
    pub fn close_build(&self, id: &str, status: Status, reason: &str) -> Result<()> {
        builds::close_build(self, id, status, reason)
    }

    /// Cancels a build request. Its process (if alive) sees it and stops its runs; if its process
    /// is gone, its runs are closed here. An unknown request ([`EngineError::NotFound`]) and an
    /// ended one ([`EngineError::AlreadyEnded`]) are told apart by type, so callers derive their
    /// answer (404, 409) from the kind; one that ends meanwhile is refused by the log.
    pub fn cancel(&self, id: &str) -> Result<()> {
        builds::cancel(self, id)
    }

    // A build read back from the log (`summary`, `progress`).

    /// What a build request did, read back from the log: the same answer for the process that ran
    /// it, for the service, and for anyone asking later.
    pub fn summary(&self, id: &str) -> Result<Option<BuildSummary>> {
        summary::summary(self, id)
    }

    /// [`Engine::summary`] of a build request already read.
    pub fn summary_of(&self, build: &BuildRequestRow) -> Result<BuildSummary> {
        summary::summary_of(self, build)
    }

    /// [`Engine::summary_of`] with each list cut to its first `cut` (the counts whole), and the
    /// plan's record read a few parts at a time: a backfill's refs that never ran (millions)
    /// are counted, not gathered.
    pub fn summary_cut(&self, build: &BuildRequestRow, cut: usize) -> Result<BuildSummary> {
        summary::summary_cut(self, build, cut)
    }

    /// The progress of build `id`; `None` if there is no such build or it has no plan (still
    /// planning, or refused before it had one). A few grouped reads, whatever the build's size.
    pub fn progress(&self, id: &str) -> Result<Option<BuildProgress>> {
        progress::progress(self, id)
    }

    /// [`Engine::progress`] of a build request already read.
    pub fn progress_of(&self, build: &BuildRequestRow) -> Result<Option<BuildProgress>> {
        progress::progress_of(self, build)
    }

    // Partitions: status and explain (`status`), listings (`listing`), freshness (`freshness`).

    /// The state of each ref, with reasons; a ref whose config fails fails the whole answer
    /// (what the engine's own readers need: such a ref is never taken for live).
    pub fn status(&self, refs: &[String]) -> Result<Vec<StatusReport>> {
        status::status(self, refs, status::OnConfigFailure::Fail)
    }

    /// [`Engine::status`] as a user is told it: a ref that is unknown, does not parse, or whose
    /// config fails carries that as its own `error`, and the other refs still answer; one not
    /// live says when an external partition it is, or waits for, is late.
    pub fn status_answers(&self, refs: &[String]) -> Result<Vec<StatusReport>> {
        status::told(self, refs)
    }

    /// [`Engine::status_answers`] but for lateness: what a forecast, which decides it itself,
    /// starts from.
    pub(crate) fn status_isolated(&self, refs: &[String]) -> Result<Vec<StatusReport>> {
        status::status(self, refs, status::OnConfigFailure::Isolate)
    }

    /// Why `r` is in its state: who built it from what, and what a build would run now.
    pub fn explain(&self, r: &str) -> Result<Explanation> {
        status::explain(self, r)
    }

    /// Probes the external partitions each dataset a job reads is expected to land next (by
    /// `interval` from now; with too little history, the key after its latest arrival) and
    /// records those found as arrivals. Returns how many refs it probed.
    pub fn watch_arrivals(&self, interval: Duration) -> Result<usize> {
        arrivals::watch(self, interval)
    }

    /// When each of `refs` not live is expected to be (at the medians, surely by the p90s),
    /// whether an external input it waits for is late, and the steps that decide it: its
    /// external inputs' cadences, runs under way, its jobs' durations, the queue wait and the
    /// critical path. Records the arrivals of the external partitions it finds.
    pub fn forecast(&self, refs: &[String]) -> Result<Vec<crate::answers::Forecast>> {
        forecast::forecast(self, refs)
    }

    /// One page of partitions. For `live` and `stale`, each available partition's freshness is
    /// derived as `status` does, and the page says why each stale one is.
    pub fn partition_page(
        &self,
        query: &PartitionQuery,
        listed: Option<ListedStatus>,
    ) -> Result<PartitionPage> {
        listing::partition_page(self, query, listed)
    }

    /// Every available partition of `producer`, checked for freshness.
    pub fn freshness(&self, producer: Producer) -> Result<Freshness> {
        freshness::freshness(self, producer)
    }

    /// Every dataset and job output with its partition counts; `exact` derives the freshness of
    /// every available partition however many there are (linear in them).
    pub fn datasets(&self, exact: bool) -> Result<Vec<DatasetView>> {
        freshness::datasets(self, exact)
    }

    /// What each of `rows` is now, as `status` and listings show it: available rows derived in
    /// one pass with one memo of versions (and a config job's re-checked against its config),
    /// so the cost is that of the rows given (a page of a picture), never of their dataset.
    pub fn shown_states(&self, rows: Vec<PartitionRow>) -> Result<Vec<DerivedStatus>> {
        freshness::shown_states(self, rows)
    }

    // Checks (`checks`) and taint (`taint`).

    /// `databuild check REF...`: runs every check of each partition's current instance now,
    /// on the graph's executor, against its data in place, and records the results; answers
    /// each partition's status after them. Refused (naming it) for a ref no check applies to,
    /// or that has no built instance.
    pub fn check(&self, refs: &[String], executor: &dyn Executor) -> Result<Vec<StatusReport>> {
        checks::check(self, refs, executor)
    }

    /// Marks partitions invalid. A partition being built cannot be tainted until its run ends.
    /// A job's output is rebuilt by the next build that needs it; an external partition stays
    /// tainted until its data changes, and what was built from it before the taint is stale.
    pub fn taint(&self, refs: &[String], reason: Option<&str>) -> Result<Vec<Event>> {
        taint::taint(self, refs, reason)
    }

    // Lineage (`lineage`): what an instance was built from and what read it.

    /// The lineage of a partition's instance (see [`lineage`]).
    pub fn lineage(&self, q: &LineageQuery) -> Result<Lineage> {
        lineage::lineage(self, q)
    }

    /// What `taint` of `refs` would make stale, and which wants would rebuild (see
    /// [`TaintImpact`]); nothing is written.
    pub fn taint_impact(&self, refs: &[String]) -> Result<TaintImpact> {
        lineage::taint_impact(self, refs)
    }

    /// What forced rebuilds of `refs` leave live: the live partitions built from their current
    /// instances (a rebuild from unchanged inputs records the same data version).
    pub fn force_keeps_live(&self, refs: &[PartitionRef]) -> Result<ForceKeepsLive> {
        lineage::force_keeps_live(self, refs)
    }

    /// What changed between the instance `to` (default: the current one) of `r` and `since`
    /// (default: the instance before `to`).
    pub fn diff(&self, r: &str, to: Option<&str>, since: Option<&str>) -> Result<InstanceDiff> {
        lineage::diff(self, r, to, since)
    }

    /// How a want's partitions came to be (or are coming): the builds and runs that made them,
    /// each run with the runs that made what it read, and what each partition not live waits for.
    pub fn fulfillment(
        &self,
        statuses: &[StatusReport],
    ) -> Result<(Vec<WantBuild>, Vec<WaitingPartition>)> {
        lineage::fulfillment(self, statuses)
    }

    // Jobs (`jobs`).

    /// Metrics of every job of the graph (those that never ran too), or of one.
    pub fn jobs(&self, name: Option<&str>) -> Result<Vec<JobStats>> {
        jobs::jobs(self, name)
    }

    /// The p50 and p95 of each resource and reported metric of `job` over its last runs.
    pub fn trends(&self, job: &str) -> Result<Vec<crate::answers::MetricTrend>> {
        jobs::trends(self, job)
    }

    /// The charts of a job's page: duration, peak memory and each reported metric per
    /// partition, with the band and the anomalies.
    pub fn charts(&self, job: &str) -> Result<Vec<crate::answers::MetricChart>> {
        jobs::charts(self, job)
    }

    /// A run's resources and metrics beside its job's p50.
    pub fn against_p50(&self, job: &str, run: &str) -> Result<Vec<crate::answers::AgainstP50>> {
        jobs::against_p50(self, job, run)
    }

    /// A page of one metric over the partitions of a job (its name or an output pattern), in
    /// key order after the ref `after`.
    pub fn metric_series(
        &self,
        pattern: &str,
        metric: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<crate::answers::MetricSeries> {
        jobs::metric_series(self, pattern, metric, after, limit)
    }

    /// The edges of the graph's dynamic jobs as the log recorded them, `(producer, job)`: what
    /// their latest runs read (a config chooses inputs at plan time; the graph file cannot say).
    pub fn recorded_edges(&self) -> Result<Vec<(Producer, usize)>> {
        jobs::recorded_edges(self)
    }

    // Sources and tables (`tables`).

    /// Every source of the graph, with its days and tables.
    pub fn sources(&self) -> Result<Vec<SourceView>> {
        tables::sources(self)
    }

    /// One source in detail: per date, the raw partition and every table version.
    pub fn source_detail(&self, name: &str) -> Result<SourceDetail> {
        tables::source_detail(self, name)
    }

    /// Seals (through `through`, else every ended day), ingests dropped files and expires, for
    /// one source or all.
    pub fn maintain_sources(
        &self,
        name: Option<&str>,
        through: Option<&str>,
    ) -> Result<Vec<Maintenance>> {
        tables::maintain_sources(self, name, through)
    }

    /// The version a table's alias reads now.
    pub fn promoted(&self, table: &Table) -> Result<u32> {
        tables::promoted(self, table)
    }

    /// Moves a table's alias to `version` (see `engine/tables.rs`).
    pub fn promote(
        &self,
        table_name: &str,
        version: u32,
        downstream: Option<(&BuildOptions, &dyn Executor, &mut dyn Observer, &AtomicBool)>,
    ) -> Result<Promotion> {
        tables::promote(self, table_name, version, downstream)
    }

    /// Makes sure each table's `current` link exists (pointing at the promoted version).
    pub fn link_tables(&self) -> Result<()> {
        tables::link_tables(self)
    }

    // Wants (`wants`).

    /// Records a want for `refs`.
    pub fn want(
        &self,
        refs: &[PartitionRef],
        ttl: Option<Duration>,
        sla: Option<Duration>,
        deadline: Option<i64>,
        recurring: Option<&str>,
    ) -> Result<WantRow> {
        wants::want(self, refs, ttl, sla, deadline, recurring)
    }

    /// Whether a want is on time: its forecast against its deadline (its `--by`, or its SLA's).
    pub fn want_risk(&self, want: &WantRow) -> crate::answers::WantRisk {
        wants::risk(self, want)
    }

    /// Wants whose `sla_at_risk` is already recorded.
    pub fn recorded_at_risk(&self) -> Result<BTreeSet<String>> {
        wants::recorded_at_risk(self)
    }

    /// Records a want's `sla_at_risk`, as `risk` says.
    pub fn note_at_risk(&self, want: &WantRow, risk: &crate::answers::WantRisk) -> Result<()> {
        wants::note_at_risk(self, want, risk)
    }

    /// A want, by its id ([`EngineError::NotFound`] if there is none).
    pub fn want_row(&self, id: &str) -> Result<WantRow> {
        wants::want_row(self, id)
    }

    /// Withdraws a want.
    pub fn unwant(&self, id: &str) -> Result<WantRow> {
        wants::unwant(self, id)
    }

    /// Records a want's new state, unless it is already in it for the same reason. `retry_at`
    /// (ns): its build failed, and the service tries again then.
    pub fn note_want(
        &self,
        want: &WantRow,
        status: Status,
        waiting_for: Option<&str>,
        message: Option<String>,
        started: Option<String>,
        retry_at: Option<i64>,
    ) -> Result<bool> {
        wants::note_want(self, want, status, waiting_for, message, started, retry_at)
    }

    /// The want's partitions that are not live and fresh, with the reason.
    pub fn unsatisfied(&self, want: &WantRow) -> Result<Vec<(String, String)>> {
        wants::unsatisfied(self, want)
    }

    /// What should happen to a want now.
    pub fn decide(&self, want: &WantRow, now_ns: i64) -> Result<Decision> {
        wants::decide(self, want, now_ns)
    }

    /// Partitions of a want that missed their deadline (`deadline`, or their SLA's) by `now_ns`
    /// and are not live, leaving out those `known` already (so a long-late want costs no status
    /// checks).
    pub fn sla_misses(
        &self,
        want: &WantRow,
        now_ns: i64,
        known: &BTreeSet<(String, String)>,
    ) -> Result<Vec<(String, i64)>> {
        wants::sla_misses(self, want, now_ns, known)
    }

    /// `(want, partition)` pairs whose SLA miss is already recorded.
    pub fn recorded_sla_misses(&self) -> Result<BTreeSet<(String, String)>> {
        wants::recorded_sla_misses(self)
    }

    /// Records that a partition missed its SLA.
    pub fn note_sla_miss(&self, want: &WantRow, r: &str, deadline_ns: i64) -> Result<()> {
        wants::note_sla_miss(self, want, r, deadline_ns)
    }

    /// Active wants that name `r`.
    pub fn wants_of(&self, r: &str) -> Result<Vec<WantRow>> {
        wants::wants_of(self, r)
    }

    // Garbage collection (`gc`).

    /// Where run logs (and configs' kept stderr) are written.
    pub fn logs_dir(&self) -> PathBuf {
        gc::logs_dir(self)
    }

    /// Removes what nothing reads any more (see [`gc`]), or with
    /// `dry_run` says what it would remove.
    pub fn gc(&self, options: GcOptions) -> Result<GcReport> {
        gc::gc(self, options)
    }
}
