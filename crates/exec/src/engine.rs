//! The engine: one implementation of analyze, status, explain and taint, shared by the CLI and
//! the service. It ties the graph (core), the event log and this machine's resolver together.

use std::path::PathBuf;
use std::sync::Arc;

use std::collections::HashMap;

use databuild_core::{
    plan, Deps, Graph, JobConfig, KnownState, PartitionRef, Plan, PlanError, PlanRequest, Producer,
};
use databuild_log::{Event, EventFilter, EventStore, JobRunRow, LogError, Status};
use serde::Serialize;

use crate::config::EngineConfig;
use crate::lease::Lease;
use crate::rechecked::Rechecked;
use crate::resolver::LocalResolver;
use crate::versions::VersionedStates;

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
}

/// The answer of `analyze`: the recorded build request and its plan.
#[derive(Debug)]
pub struct Analysis {
    pub build_request_id: String,
    pub plan: Plan,
}

/// What a user sees of a partition (contract section 4, `status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusReport {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// `live`, `stale`, `missing`, `building`, `failed` or `tainted`.
    pub status: &'static str,
    pub reasons: Vec<String>,
    /// The job run that built it (or is building it).
    pub built_by: Option<String>,
    pub job: Option<String>,
    pub build_request_id: Option<String>,
    /// ns since the epoch; answers show it as RFC 3339 (`updated_at`) and ns (`updated_at_ns`).
    pub updated_at: Option<i64>,
}

/// Why a partition is in its state (`explain`).
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    #[serde(flatten)]
    pub status: StatusReport,
    /// `job` or `dataset`, its name and pattern; absent for refs nothing produces.
    pub producer: Option<ProducerInfo>,
    /// The run that built it, or is building it.
    pub run: Option<JobRunRow>,
    /// What that run reported (`DATABUILD_REPORT`): row counts, provenance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<serde_json::Value>,
    /// The run's inputs and their state now.
    pub inputs: Vec<StatusReport>,
    /// For a partition that is not live: the job runs a build would start.
    pub to_build: Vec<PlannedStep>,
    /// The most recent events about it, oldest first.
    pub history: Vec<Event>,
    /// Active wants that name it, with what they wait for.
    pub wants: Vec<databuild_log::WantRow>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ProducerInfo {
    pub kind: String,
    pub name: String,
    pub pattern: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlannedStep {
    pub job: String,
    pub outputs: Vec<String>,
}

pub fn rfc3339(ns: i64) -> String {
    chrono::DateTime::from_timestamp(
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000) as u32,
    )
    .map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true))
    .unwrap_or_default()
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
        }
    }

    /// Today's date, `YYYY-MM-DD`, by the engine's clock.
    pub fn today(&self) -> String {
        self.config.clock.today()
    }

    /// The executor the graph asks for (`[graph] executor`).
    pub fn executor(&self) -> Box<dyn crate::local::Executor> {
        match &self.graph.executor {
            databuild_core::ExecutorConfig::Local => Box::new(crate::local::LocalExecutor),
            databuild_core::ExecutorConfig::Slurm(config) => {
                Box::new(crate::slurm::SlurmExecutor::new(config.clone()))
            }
        }
    }

    fn resolver(&self) -> LocalResolver<'_> {
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
        let states = Rechecked::new(
            self.versions().with_pins(request.pins.clone()),
            &self.graph,
            self.store.as_ref(),
        );
        let planned = plan(&self.graph, request, &states, &mut self.resolver());
        // A read that failed after the last states were asked (a config re-check) ends it too.
        if let Some(failure) = states.take_failure() {
            return Err(EngineError::Log(failure));
        }
        Ok(planned?)
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
                Ok(Analysis {
                    build_request_id: id,
                    plan,
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

    /// The state of each ref, with reasons.
    pub fn status(&self, refs: &[String]) -> Result<Vec<StatusReport>> {
        let mut resolver = self.resolver();
        let versions = self.versions();
        let mut reports = refs
            .iter()
            .map(|r| self.status_of(r, &mut resolver, &versions))
            .collect::<Result<Vec<_>>>()?;
        self.recheck_configs(&mut reports, &mut resolver, &versions)?;
        Ok(reports)
    }

    /// Live partitions of config jobs are stale when their config now chooses differently from
    /// the run that built them: one config call per job for all of them.
    fn recheck_configs(
        &self,
        reports: &mut [StatusReport],
        resolver: &mut LocalResolver,
        versions: &VersionedStates<'_>,
    ) -> Result<()> {
        let mut by_job: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, report) in reports.iter().enumerate() {
            if report.status != "live" {
                continue;
            }
            let Some((Producer::Job { job, .. }, _)) =
                self.graph.producer_of(&report.partition_ref)
            else {
                continue;
            };
            if !matches!(self.graph.jobs[job].deps, Deps::Dynamic { .. }) {
                continue;
            }
            match by_job.iter_mut().find(|(j, _)| *j == job) {
                Some((_, reports)) => reports.push(i),
                None => by_job.push((job, vec![i])),
            }
        }
        for (job, indices) in by_job {
            let job = &self.graph.jobs[job];
            let failed = |e: &dyn std::fmt::Display| {
                EngineError::Invalid(format!(
                    "cannot re-check live partitions of job `{}`: its config failed: {e}",
                    job.name
                ))
            };
            let mut seen = rustc_hash::FxHashSet::default();
            let mut refs: Vec<PartitionRef> = Vec::with_capacity(indices.len());
            for &i in &indices {
                let r = PartitionRef::new(&reports[i].partition_ref)
                    .map_err(|e| EngineError::Invalid(e.to_string()))?;
                if seen.insert(r.clone()) {
                    refs.push(r);
                }
            }
            let configs = databuild_core::Resolver::job_configs(resolver, job, &refs)
                .map_err(|e| failed(&e))?;
            let by_output: HashMap<&str, &JobConfig> = configs
                .iter()
                .flat_map(|c| c.outputs.iter().map(move |o| (o.as_str(), c)))
                .collect();
            for &i in &indices {
                let r = &reports[i].partition_ref;
                let Some(&config) = by_output.get(r.as_str()) else {
                    return Err(failed(&format!("no config covers `{r}`")));
                };
                let mut now = config.clone();
                for input in &mut now.inputs {
                    if let Some(read) = versions.resolve(input.partition_ref.as_str()) {
                        input.partition_ref = read;
                    }
                }
                let change = crate::rechecked::config_change(
                    &self.graph,
                    self.store.as_ref(),
                    r,
                    job,
                    &now,
                )?;
                if let Some(why) = change {
                    reports[i].status = "stale";
                    reports[i].reasons = vec![why];
                }
            }
        }
        Ok(())
    }

    fn status_of(
        &self,
        r: &str,
        resolver: &mut LocalResolver,
        versions: &VersionedStates<'_>,
    ) -> Result<StatusReport> {
        let mut report = StatusReport {
            partition_ref: r.to_string(),
            status: "missing",
            reasons: Vec::new(),
            built_by: None,
            job: None,
            build_request_id: None,
            updated_at: None,
        };
        let producer = self.graph.producer_of(r).map(|(p, _)| p);
        match producer {
            None => {
                report.reasons.push(
                    self.graph.mismatch_reason(r).unwrap_or_else(|| {
                        "no job builds it and no dataset declares it".to_string()
                    }),
                );
                return Ok(report);
            }
            Some(Producer::Alias(_)) => {
                let read = versions.resolve(r).expect("an alias resolves");
                let mut inner = self.status_of(read.as_str(), resolver, versions)?;
                inner.partition_ref = r.to_string();
                inner.reasons.insert(0, format!("alias: reads {read}"));
                return Ok(inner);
            }
            Some(Producer::Dataset(d)) if self.graph.datasets[d].source.is_some() => {
                return self.source_status(report, d);
            }
            Some(Producer::Dataset(d)) => {
                let ds = &self.graph.datasets[d];
                let valid = databuild_core::PartitionRef::new(r)
                    .map_err(|e| EngineError::Invalid(e.to_string()))?;
                let available = databuild_core::Resolver::external_available(resolver, ds, &valid)
                    .map_err(|e| EngineError::Invalid(format!("checking `{r}`: {e}")))?;
                let tainted = available.then(|| versions.external_tainted(r)).flatten();
                report.status = match (available, &tainted) {
                    (true, Some(_)) => "tainted",
                    (true, None) => "live",
                    (false, _) => "missing",
                };
                if let Some(why) = tainted {
                    report.reasons.push(why);
                    report.reasons.push(format!(
                        "external partition of dataset `{}`, present; live again once its data changes{}",
                        ds.name,
                        if ds.exists.is_none() && ds.upstream.is_none() {
                            " (its size or modification time)"
                        } else {
                            ""
                        }
                    ));
                    return Ok(report);
                }
                report.reasons.push(if available {
                    format!("external partition of dataset `{}`, present", ds.name)
                } else {
                    format!(
                        "external partition of dataset `{}`, not present yet",
                        ds.name
                    )
                });
                return Ok(report);
            }
            Some(Producer::Job { .. }) => {}
        }
        let Some(row) = self.store.partition(r)? else {
            report.reasons.push("no run has built it yet".to_string());
            return Ok(report);
        };
        report.built_by = row.job_run_id.clone();
        report.job = row.job.clone();
        report.build_request_id = row.build_request_id.clone();
        report.updated_at = Some(row.updated_at);
        let run = row.job_run_id.as_deref().unwrap_or("?");
        let (status, reason) = match row.status {
            Status::Available => match versions.known(r)? {
                KnownState::Stale { reason } | KnownState::Kept { reason } => ("stale", reason),
                KnownState::Missing => (
                    "missing",
                    versions
                        .gone(r)
                        .unwrap_or_else(|| "its data is gone".to_string()),
                ),
                _ => ("live", format!("built by run {run}")),
            },
            Status::Building => (
                "building",
                format!(
                    "being built by run {run} of build request {}",
                    row.build_request_id.as_deref().unwrap_or("?")
                ),
            ),
            Status::Failed => (
                "failed",
                format!(
                    "run {run} failed{}",
                    row.message.map(|m| format!(": {m}")).unwrap_or_default()
                ),
            ),
            Status::Tainted => (
                "tainted",
                format!(
                    "tainted{}",
                    row.message.map(|m| format!(": {m}")).unwrap_or_default()
                ),
            ),
            other => ("missing", format!("last recorded as `{other}`")),
        };
        report.status = status;
        report.reasons.push(reason);
        Ok(report)
    }

    fn source_status(&self, mut report: StatusReport, dataset: usize) -> Result<StatusReport> {
        let source = &self.graph.sources[self.graph.datasets[dataset].source.expect("a source")];
        let r = report.partition_ref.clone();
        let row = self.store.partition(&r)?;
        if let Some(row) = &row {
            report.updated_at = Some(row.updated_at);
        }
        let dir = self.data_dir.join(&r);
        let (status, reason) = match crate::sources::sealed_version(&dir) {
            Some(version) => ("live", format!(
                "source partition of `{}`, sealed with {} records",
                source.name,
                version.split(':').nth(1).unwrap_or("?")
            )),
            None if row.as_ref().is_some_and(|p| p.status == Status::Expired) => ("expired", format!(
                "its raw data expired (source `{}` keeps {} days); table versions carry it forward from their previous version",
                source.name, source.retention_days
            )),
            None if dir.exists() => ("missing", format!(
                "open: source `{}` still receives data for this day; it is sealed when the day ends (or by `databuild source seal {}`)",
                source.name, source.name
            )),
            None => ("missing", format!("no data of source `{}` has arrived for this day", source.name)),
        };
        report.status = status;
        report.reasons.push(reason);
        Ok(report)
    }

    /// Why `r` is in its state: who built it from what, and what a build would run now.
    pub fn explain(&self, r: &str) -> Result<Explanation> {
        let status = self.status(&[r.to_string()])?.remove(0);
        let producer = self.graph.producer_of(r).map(|(p, _)| ProducerInfo {
            kind: producer_kind(&self.graph, p).to_string(),
            name: self.graph.producer_name(p).to_string(),
            pattern: self.graph.pattern_of(p).to_string(),
        });
        let run = match &status.built_by {
            Some(id) => self.store.job_run(id)?,
            None => None,
        };
        let inputs = match &run {
            Some(run) => self.status(&run.inputs)?,
            None => Vec::new(),
        };
        let to_build = match (status.status, producer.as_ref().map(|p| p.kind.as_str())) {
            ("live" | "building", _) | (_, Some("dataset" | "source") | None) => Vec::new(),
            _ => {
                let refs = vec![databuild_core::PartitionRef::new(r)
                    .map_err(|e| EngineError::Invalid(e.to_string()))?];
                let plan = self.plan(&PlanRequest {
                    refs,
                    ..Default::default()
                })?;
                plan.runs
                    .iter()
                    .map(|run| PlannedStep {
                        job: run.job.to_string(),
                        outputs: run.outputs.iter().map(|o| o.to_string()).collect(),
                    })
                    .collect()
            }
        };
        let mut history = self.store.events(&EventFilter {
            partition_ref: Some(r.to_string()),
            ..Default::default()
        })?;
        let report = history
            .iter()
            .rev()
            .find(|e| e.status == Status::Available)
            .and_then(|e| e.data.report.clone());
        let keep = history.len().saturating_sub(20);
        history.drain(..keep);
        Ok(Explanation {
            status,
            producer,
            run,
            report,
            inputs,
            to_build,
            history,
            wants: self.wants_of(r)?,
        })
    }

    /// Marks partitions invalid. A partition being built cannot be tainted until its run ends.
    /// A job's output is rebuilt by the next build that needs it; an external partition stays
    /// tainted until its data changes, and what was built from it before the taint is stale.
    pub fn taint(&self, refs: &[String], reason: Option<&str>) -> Result<Vec<Event>> {
        let versions = self.versions();
        let events = refs
            .iter()
            .map(|r| {
                // A table's alias names the version it reads: that is what is tainted.
                let read = versions.resolve(r).map(|v| v.to_string());
                let r = read.as_deref().unwrap_or(r);
                let mut e = Event::partition(None, r, Status::Tainted);
                match self.graph.producer_of(r).map(|(p, _)| p) {
                    None => {
                        return Err(EngineError::Invalid(format!(
                            "cannot taint `{r}`: {}",
                            self.graph.mismatch_reason(r).unwrap_or_else(|| {
                                "no job builds it and no dataset declares it".to_string()
                            })
                        )))
                    }
                    Some(Producer::Dataset(d)) if self.graph.datasets[d].source.is_some() => {
                        return Err(EngineError::Invalid(format!(
                            "cannot taint `{r}`: it is a raw partition of source `{}`, sealed and expired by DataBuild; taint the table partitions built from it instead",
                            self.graph.sources[self.graph.datasets[d].source.expect("a source")].name
                        )))
                    }
                    Some(Producer::Alias(_)) => {
                        return Err(EngineError::Invalid(format!(
                            "cannot taint `{r}`: the table version its alias reads is unknown"
                        )))
                    }
                    // The data it has now: the taint holds until that changes.
                    Some(Producer::Dataset(d)) => {
                        let ds = &self.graph.datasets[d];
                        e.data.data_version =
                            crate::versions::raw_external_version(ds, &self.data_dir, r);
                    }
                    Some(Producer::Job { .. }) => {}
                }
                Ok(match reason {
                    Some(m) => e.with_message(m),
                    None => e,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        self.store.append(events).map_err(|e| match e {
            LogError::Refused { reason, .. } => {
                EngineError::Invalid(format!("cannot taint: {reason}"))
            }
            other => other.into(),
        })
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

/// Parses an RFC 3339 time into ns since the epoch.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    // ns since the epoch span 1677 to 2262; a valid time outside them (`from=0018-...`) is
    // before or after every event, so it is clamped rather than refused.
    Some(t.timestamp_nanos_opt().unwrap_or(if t.timestamp() < 0 {
        i64::MIN
    } else {
        i64::MAX
    }))
}

/// The last `max` bytes of a file, as text (a run's log can be large).
pub fn read_tail(path: &std::path::Path, max: u64) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > max {
        file.seek(SeekFrom::Start(len - max))?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

impl Engine {
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
