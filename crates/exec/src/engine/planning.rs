//! Planning: a plan of the requested refs against the log's states (aliases pinned, configs
//! re-checked), its cost, the recorded analysis of `analyze`, and why the external inputs a plan
//! misses are not there.

use databuild_core::plan::MissingExternal;
use databuild_core::{PartitionRef, Plan, PlanError, PlanRequest, Producer};
use databuild_log::{Event, Status};

use super::{Analysis, Engine, EngineError, Result};
use crate::answers::AnalyzePage;
use std::sync::Arc;

use crate::data::code::CodeCache;
use crate::data::rechecked::Rechecked;
use crate::data::resolver::LocalResolver;
use crate::data::versions::VersionedStates;

impl Engine {
    pub(crate) fn resolver(&self) -> LocalResolver<'_> {
        LocalResolver::new(
            &self.graph,
            &self.graph_dir,
            &self.data_dir,
            self.today(),
            self.config.configs,
        )
    }

    /// The states as derived now, with code versions of their own: for a call that derives
    /// once. A call that derives again (by page, by chunk, by batch) shares one cache
    /// ([`Engine::versions_with`]).
    pub(crate) fn versions(&self) -> VersionedStates<'_> {
        self.versions_with(&self.code())
    }

    /// The states as derived now, comparing runs with the code versions of `code`: one cache
    /// for a command's step or a request, so that each job's code is read once in it.
    pub(crate) fn versions_with(&self, code: &Arc<CodeCache>) -> VersionedStates<'_> {
        VersionedStates::new(
            &self.graph,
            self.store.as_ref(),
            &self.data_dir,
            self.today(),
        )
        .shown_from(&self.graph_dir)
        .with_code(code.clone())
    }

    /// The jobs' and checks' code versions, computed as a call needs them, once each.
    pub(crate) fn code(&self) -> Arc<CodeCache> {
        Arc::new(CodeCache::new(&self.graph_dir, &self.data_dir))
    }

    /// The plan of a request whose alias refs are already pinned to version refs, noting the
    /// files it looks at in `witnesses`, with the code versions of `code` (the step's). A `code`
    /// glob that matches no file is refused first (it would leave the files it meant out of
    /// every code version); the walk that found them stays in `code`.
    pub(crate) fn plan_witnessed(
        &self,
        request: &PlanRequest,
        witnesses: Option<&crate::data::data_dir::Witnesses>,
        code: &Arc<CodeCache>,
    ) -> Result<Plan> {
        code.validated(&self.graph)?;
        let states = Rechecked::new(
            self.versions_with(code)
                .with_pins(request.pins.clone())
                .witnessed_by(witnesses),
            &self.graph,
            self.store.as_ref(),
        );
        let sightings = crate::data::arrivals::Sightings::default();
        let mut resolver = self
            .resolver()
            .witnessed_by(witnesses)
            .sighted_by(Some(&sightings));
        let planned = databuild_core::plan(&self.graph, request, &states, &mut resolver);
        self.record_arrivals(&sightings)?;
        // A read that failed after the last states were asked (a config re-check) ends it too.
        if let Some(failure) = states.take_failure() {
            return Err(EngineError::Log(failure));
        }
        Ok(planned?)
    }
}

pub(crate) fn plan(engine: &Engine, request: &PlanRequest) -> Result<Plan> {
    plan_with(engine, request, &engine.code())
}

/// [`plan`] with the code versions of `code`, the step's.
pub(crate) fn plan_with(
    engine: &Engine,
    request: &PlanRequest,
    code: &Arc<CodeCache>,
) -> Result<Plan> {
    if engine.graph.tables.is_empty() {
        // No aliases to resolve: no copy of a possibly huge request.
        return engine.plan_witnessed(request, None, code);
    }
    let request = PlanRequest {
        refs: engine.pin_aliases(&request.refs, &request.pins),
        ..request.clone()
    };
    engine.plan_witnessed(&request, None, code)
}

/// The most runs at once an estimate is priced at (`analyze --parallel`, the API's `parallel`).
pub const ESTIMATE_PARALLEL: std::ops::RangeInclusive<usize> = 1..=100_000;

/// The runs at once an estimate is priced at: `asked` (default: as many as this machine has
/// cores), refused outside [`ESTIMATE_PARALLEL`] (an estimate for no slots means nothing), as
/// the command line and the API both refuse it.
pub fn estimate_parallel(asked: Option<usize>) -> Result<usize> {
    match asked {
        None => Ok(crate::scheduler::default_parallelism()),
        Some(p) if ESTIMATE_PARALLEL.contains(&p) => Ok(p),
        Some(p) => Err(EngineError::Invalid(format!(
            "parallel {p} (`--parallel`, or `parallel` in the API): an estimate is for {} to {} job runs at once; give a number in that range",
            ESTIMATE_PARALLEL.start(),
            ESTIMATE_PARALLEL.end()
        ))),
    }
}

/// The page of runs an analyze answer lists: at most `limit` (default
/// [`ANALYZE_PAGE`](crate::answers::ANALYZE_PAGE), refused above
/// [`ANALYZE_PAGE_MAX`](crate::answers::ANALYZE_PAGE_MAX) or at 0) from index `after` (the
/// previous page's `next_after`).
pub fn analyze_page(after: Option<usize>, limit: Option<usize>) -> Result<AnalyzePage> {
    let max = crate::answers::ANALYZE_PAGE_MAX;
    match limit.unwrap_or(crate::answers::ANALYZE_PAGE) {
        limit @ 1.. if limit <= max => Ok(AnalyzePage::of(after.unwrap_or(0), limit)),
        limit => Err(EngineError::Invalid(format!(
            "limit {limit}: an analyze answer lists 1 to {max} job runs; page on with `after` (the answer's `next_after`) for more"
        ))),
    }
}

pub(crate) fn estimate(
    engine: &Engine,
    plan: &Plan,
    parallel: usize,
) -> Result<crate::answers::PlanCost> {
    let stats = engine.store.job_stats(None)?;
    let durations: Vec<Option<databuild_core::estimate::JobDurations>> = engine
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
    let cost: crate::answers::PlanCost =
        databuild_core::estimate::estimate(plan, &durations, parallel).into();
    let resources =
        databuild_core::estimate::resources(plan, &job_resources(engine, plan)?, parallel);
    Ok(cost.with_resources(resources))
}

/// Each of the plan's jobs' p95 peak memory and median CPU time over its last runs (by job
/// index; `None` for jobs the plan does not run): one bounded read per job.
fn job_resources(
    engine: &Engine,
    plan: &Plan,
) -> Result<Vec<Option<databuild_core::estimate::JobResources>>> {
    let mut out = vec![None; engine.graph.jobs.len()];
    let jobs: std::collections::BTreeSet<usize> = plan.runs.iter().map(|r| r.job_index).collect();
    for j in jobs {
        let trends = engine.trends(&engine.graph.jobs[j].name)?;
        let of = |name: &str| trends.iter().find(|t| t.name == name);
        let cpu = match (of("cpu_user_ms"), of("cpu_system_ms")) {
            (Some(u), Some(s)) => Some(u.p50 + s.p50),
            (u, s) => u.or(s).map(|t| t.p50),
        };
        out[j] = Some(databuild_core::estimate::JobResources {
            max_rss_p95_bytes: of("max_rss_bytes").map(|t| t.p95),
            cpu_p50_ms: cpu,
        });
    }
    Ok(out)
}

pub(crate) fn pin_aliases(
    engine: &Engine,
    refs: &[PartitionRef],
    pins: &std::collections::BTreeMap<String, u32>,
) -> Vec<PartitionRef> {
    let states = engine.versions().with_pins(pins.clone());
    refs.iter()
        .map(|r| states.resolve(r.as_str()).unwrap_or_else(|| r.clone()))
        .collect()
}

/// How many of its requested refs an analysis records (with how many there are): as many as a
/// build's detail shows. Each page of a million-ref analysis plans again and is recorded; with
/// every ref, each would write 48 MB to the log (and rewrite it at its every status), so that
/// paging through one, or a reader asking in a loop, would fill the disk.
pub const ANALYSIS_RECORDED_REFS: usize = crate::answers::DETAIL_ROWS;

pub(crate) fn analyze(engine: &Engine, request: &PlanRequest) -> Result<Analysis> {
    engine.known_refs(&request.refs)?;
    let id = databuild_log::event::new_id();
    let requested: Vec<String> = (request.refs.iter())
        .take(ANALYSIS_RECORDED_REFS)
        .map(|r| r.to_string())
        .collect();
    let count = request.refs.len();
    engine.store.append(vec![
        Event::build_request(&id, Status::Received).with_data(|d| {
            d.requested = requested;
            d.requested_count = (count > ANALYSIS_RECORDED_REFS).then_some(count as u64);
            d.analyze_only = true;
            d.force = request.force;
        }),
        Event::build_request(&id, Status::Planning),
    ])?;
    match engine.plan(request) {
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
            engine.store.append(vec![done])?;
            let force_keeps_live = request
                .force
                .then(|| engine.force_keeps_live(&request.refs))
                .transpose()?;
            Ok(Analysis {
                build_request_id: id,
                plan,
                force_keeps_live,
            })
        }
        Err(e) => {
            engine.store.append(vec![
                Event::build_request(&id, Status::Failed).with_message(e.to_string())
            ])?;
            Err(e)
        }
    }
}

impl Engine {
    /// Refuses refs nothing in the graph produces (as planning would: [`PlanError::UnknownRef`]),
    /// before a request of them is recorded.
    pub(super) fn known_refs(&self, refs: &[PartitionRef]) -> Result<()> {
        match refs
            .iter()
            .find(|r| self.graph.producer_of(r.as_str()).is_none())
        {
            Some(r) => Err(PlanError::UnknownRef {
                partition_ref: r.to_string(),
                reason: self.graph.unmatched_reason(r.as_str()),
                needed_by: None,
            }
            .into()),
            None => Ok(()),
        }
    }

    /// Why a plan cannot complete without `m`; a source partition says why it is not there:
    /// still open, expired, or never received.
    pub(super) fn missing_message(&self, m: &MissingExternal) -> String {
        if let Some(why) = &m.failed_check {
            return format!(
                "`{}` {why}{}; fix its data and run `databuild check {}`, or rebuild it with --force",
                m.partition_ref,
                m.needed_by
                    .as_ref()
                    .map(|n| format!(" (needed by {n})"))
                    .unwrap_or_default(),
                m.partition_ref,
            );
        }
        let why = match self.graph.producer_of(m.partition_ref.as_str()) {
            Some((Producer::Dataset(d), _)) if self.graph.datasets[d].source.is_some() => self
                .missing_reason(m)
                .map(|r| format!(": {r}"))
                .unwrap_or_default(),
            _ => String::new(),
        };
        format!(
            "external partition `{}` of dataset `{}` is not available{}{why}",
            m.partition_ref,
            m.dataset,
            m.needed_by
                .as_ref()
                .map(|n| format!(", needed by {n}"))
                .unwrap_or_default()
        )
    }
}

pub(crate) fn missing_reason(engine: &Engine, m: &MissingExternal) -> Option<String> {
    if m.failed_check.is_some() {
        return m.failed_check.clone();
    }
    let Some((Producer::Dataset(d), _)) = engine.graph.producer_of(m.partition_ref.as_str()) else {
        return None;
    };
    let dataset = &engine.graph.datasets[d];
    if dataset.source.is_some() || dataset.upstream.is_some() {
        return engine
            .status(&[m.partition_ref.to_string()])
            .ok()
            .and_then(|mut s| s.pop())
            .and_then(|s| s.reasons.into_iter().next());
    }
    Some(match &dataset.exists {
        Some(probe) => format!(
            "its `exists` probe (`{}`) says it is not there",
            probe.join(" ")
        ),
        None => format!(
            "nothing at {}",
            engine.data_dir.join(m.partition_ref.as_str()).display()
        ),
    })
}

pub(crate) fn missing_reasons(engine: &Engine, plan: &Plan) -> Vec<Option<String>> {
    const MISSING_REASONS: usize = 100;
    plan.missing
        .iter()
        .enumerate()
        .map(|(i, m)| {
            (i < MISSING_REASONS)
                .then(|| engine.missing_reason(m))
                .flatten()
        })
        .collect()
}

/// How many of `plan`'s runs rebuild a partition that is stale because a job's code changed
/// (its own, or one up its inputs): what an edit of a script will rebuild. The planner noted it
/// on each stale reason as it derived it.
pub(crate) fn stale_by_code(plan: &Plan) -> usize {
    (plan.runs.iter())
        .filter(|run| {
            (run.reasons.iter())
                .any(|why| matches!(why, databuild_core::BuildReason::Stale(s) if s.by_code))
        })
        .count()
}

impl<'p> crate::answers::AnalyzeView<'p> {
    /// The view of `analysis`, priced at `parallel` and with why each missing input is missing
    /// (one read of the jobs' metrics, and one of each of the first missing inputs), listing
    /// the runs of `page`.
    pub fn priced(
        engine: &Engine,
        analysis: &'p crate::engine::Analysis,
        parallel: usize,
        page: AnalyzePage,
    ) -> Result<Self> {
        let estimate = engine.estimate(&analysis.plan, parallel)?;
        let reasons = engine.missing_reasons(&analysis.plan);
        let inputs_present = analysis
            .plan
            .skipped
            .iter()
            .filter(|r| {
                matches!(
                    engine.graph.producer_of(r.as_str()),
                    Some((databuild_core::Producer::Dataset(_), _))
                )
            })
            .count();
        Ok(Self {
            force_keeps_live: analysis.force_keeps_live.clone(),
            inputs_present,
            stale_by_code: engine.stale_by_code(&analysis.plan),
            ..Self::new(
                &analysis.build_request_id,
                &analysis.plan,
                estimate,
                reasons,
                page,
            )
        })
    }
}
