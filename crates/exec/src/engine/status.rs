//! `status` and `explain`: what a user is told of a partition (contract section 4), derived from
//! the log's states, the data dir, taints, and each config job's choice as it reads now.

use std::collections::HashMap;
use std::sync::Arc;

use databuild_core::{
    ConfigWithheld, Deps, JobConfig, KnownState, PartitionRef, Plan, PlanError, PlanRequest,
    Producer, ResolveError,
};
use databuild_log::{EventFilter, Status};

use databuild_log::{JobRunRow, PartitionRow};

use crate::answers::{
    DerivedStatus, Explanation, Late, PlannedStep, ProducerInfo, QueryInputRead, RefError,
    RefErrorKind, RootCause, StatusReport,
};
use crate::data::code::CodeCache;
use crate::data::resolver::LocalResolver;
use crate::data::versions::VersionedStates;
use crate::engine::forecast::Cadences;
use crate::engine::{Engine, EngineError, Result};
use databuild_log::Cutoff;

/// What re-checking a live partition against its config's choice now found.
enum Recheck {
    /// It chooses differently from the run that built it: stale, why.
    Stale(String),
    /// Its config failed for it (the config's message): its answer is this error alone.
    ConfigFailed(String),
    /// Its config may not run for this caller: it stays as the log knows it, saying so.
    Withheld(ConfigWithheld),
}

/// What a config failing for a re-checked live partition does to the answer.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnConfigFailure {
    /// The whole answer fails with the config's message, from the one call per job: a listing,
    /// and the engine's own readers of status (wants, checks, fulfillment, explain), which must
    /// never take a ref whose config fails for live.
    Fail,
    /// The call is retried one ref at a time, and each ref whose config fails answers that error
    /// alone, the others still answering: what `status` tells a user.
    Isolate,
}

impl Engine {
    /// Live partitions of config jobs are stale when their config now chooses differently from
    /// the run that built them: one config call per job for all of them (and, when that call
    /// fails and `on_failure` isolates, one per ref, so that one bad ref fails alone). `shown`
    /// holds each ref with its status so far; the answer is the index of each that is stale, and
    /// why, or (isolating) whose config failed, with the config's message.
    fn recheck_configs(
        &self,
        shown: &[(&str, DerivedStatus)],
        resolver: &mut LocalResolver,
        versions: &VersionedStates<'_>,
        on_failure: OnConfigFailure,
    ) -> Result<Vec<(usize, Recheck)>> {
        let mut by_job: Vec<(usize, Vec<usize>)> = Vec::new();
        for (i, (r, status)) in shown.iter().enumerate() {
            if *status != DerivedStatus::Live {
                continue;
            }
            let Some((Producer::Job { job, .. }, _)) = self.graph.producer_of(r) else {
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
        let mut stale = Vec::new();
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
                let r = PartitionRef::new(shown[i].0)
                    .map_err(|e| EngineError::Invalid(e.to_string()))?;
                if seen.insert(r.clone()) {
                    refs.push(r);
                }
            }
            // One call for all; if it fails, the answer fails, or one call per ref, each failing
            // (or not) alone.
            let mut configs: Vec<JobConfig> = Vec::new();
            let mut refused: HashMap<String, String> = HashMap::new();
            match databuild_core::Resolver::job_configs(resolver, job, &refs) {
                Ok(all) => configs = all,
                Err(ResolveError::ConfigWithheld(w)) => {
                    stale.extend(indices.iter().map(|&i| (i, Recheck::Withheld(w.clone()))));
                    continue;
                }
                Err(e) if on_failure == OnConfigFailure::Fail => return Err(failed(&e)),
                Err(e) if refs.len() == 1 => {
                    refused.insert(refs[0].to_string(), failed(&e).to_string());
                }
                Err(_) => {
                    for r in &refs {
                        match databuild_core::Resolver::job_configs(
                            resolver,
                            job,
                            std::slice::from_ref(r),
                        ) {
                            Ok(one) => configs.extend(one),
                            Err(e) => {
                                refused.insert(r.to_string(), failed(&e).to_string());
                            }
                        }
                    }
                }
            }
            let by_output: HashMap<&str, &JobConfig> = configs
                .iter()
                .flat_map(|c| c.outputs.iter().map(move |o| (o.as_str(), c)))
                .collect();
            for &i in &indices {
                let r = shown[i].0;
                if let Some(why) = refused.get(r) {
                    stale.push((i, Recheck::ConfigFailed(why.clone())));
                    continue;
                }
                let Some(&config) = by_output.get(r) else {
                    let why = failed(&format!("no config covers `{r}`"));
                    if on_failure == OnConfigFailure::Fail {
                        return Err(why);
                    }
                    stale.push((i, Recheck::ConfigFailed(why.to_string())));
                    continue;
                };
                let mut now = config.clone();
                for input in &mut now.inputs {
                    if let Some(read) = versions.resolve(input.partition_ref.as_str()) {
                        input.partition_ref = read;
                    }
                }
                let change = crate::data::rechecked::config_change(
                    &self.graph,
                    self.store.as_ref(),
                    r,
                    job,
                    &now,
                )?;
                if let Some(why) = change {
                    stale.push((i, Recheck::Stale(why)));
                }
            }
        }
        Ok(stale)
    }

    /// What each of these rows (read just now) is, and why when it is not what the log records:
    /// the one derivation every listing, count and grid shows, as `status` says it. An available
    /// job output is derived (live, stale with why, check_failed, or missing when its data is
    /// gone) and, a config job's, re-checked against its config; an external's taint holds only
    /// until its data changes; anything else is as recorded.
    pub(crate) fn derive_rows(
        &self,
        rows: Vec<PartitionRow>,
        versions: &VersionedStates<'_>,
        resolver: &mut LocalResolver,
    ) -> Result<Vec<(DerivedStatus, Option<String>)>> {
        let job_output = |row: &PartitionRow| {
            row.status == Status::Available
                && matches!(
                    self.graph.producer_of(&row.partition_ref),
                    Some((Producer::Job { .. }, _))
                )
        };
        let refs: Vec<String> = rows.iter().map(|r| r.partition_ref.clone()).collect();
        let mut shown: Vec<(DerivedStatus, Option<String>)> = rows
            .iter()
            .map(|row| (self.shown_status(versions, row), None))
            .collect();
        let (at, derived): (Vec<usize>, Vec<PartitionRow>) = rows
            .into_iter()
            .enumerate()
            .filter(|(_, row)| job_output(row))
            .unzip();
        for (i, state) in at.into_iter().zip(versions.states_of_rows(derived)?) {
            shown[i] = shown_state(state, versions, &refs[i]);
        }
        let now: Vec<(&str, DerivedStatus)> = refs
            .iter()
            .zip(&shown)
            .map(|(r, (s, _))| (r.as_str(), *s))
            .collect();
        // A listing has no per-row error: it fails saying which config failed, from the one
        // call per job (a page holds up to 20,000 refs: no call per ref).
        for (i, recheck) in self.recheck_configs(&now, resolver, versions, OnConfigFailure::Fail)? {
            match recheck {
                Recheck::Stale(why) => shown[i] = (DerivedStatus::Stale, Some(why)),
                Recheck::ConfigFailed(why) => return Err(EngineError::Invalid(why)),
                Recheck::Withheld(w) => shown[i].1 = Some(not_rechecked(&w)),
            }
        }
        Ok(shown)
    }

    fn status_of(
        &self,
        r: &str,
        resolver: &mut LocalResolver,
        versions: &VersionedStates<'_>,
    ) -> Result<StatusReport> {
        let mut report = StatusReport {
            partition_ref: r.to_string(),
            status: DerivedStatus::Missing,
            reasons: Vec::new(),
            built_by: None,
            job: None,
            build_request_id: None,
            updated_at: None,
            path: None,
            checks: Vec::new(),
            error: None,
            withheld: None,
            late: None,
        };
        let producer = self.graph.producer_of(r).map(|(p, _)| p);
        if producer.is_some() {
            report.path = Some(self.data_dir.join(r).display().to_string());
        }
        match producer {
            None => {
                let error = match self.graph.mismatch_reason(r) {
                    Some(why) => RefError {
                        kind: RefErrorKind::InvalidField,
                        message: why,
                    },
                    None => RefError {
                        kind: RefErrorKind::Unknown,
                        message: self.graph.unmatched_reason(r),
                    },
                };
                report.reasons.push(error.message.clone());
                report.error = Some(error);
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
                    (true, Some(_)) => DerivedStatus::Tainted,
                    (true, None) => DerivedStatus::Live,
                    (false, _) => DerivedStatus::Missing,
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
            report.reasons.push(NEVER_BUILT.to_string());
            return Ok(report);
        };
        report.built_by = row.job_run_id.clone();
        report.job = row.job.clone();
        report.build_request_id = row.build_request_id.clone();
        report.updated_at = Some(row.updated_at);
        let run = row.job_run_id.as_deref().unwrap_or("?");
        let (status, reason) = match row.status {
            Status::Available => match versions.known(r)? {
                KnownState::Stale { reason, .. } | KnownState::Kept { reason } => {
                    (DerivedStatus::Stale, reason)
                }
                KnownState::CheckFailed { reason } => (DerivedStatus::CheckFailed, format!(
                    "{reason} (run {run}); fix its data and run `databuild check {r}`, or rebuild it with `--force`"
                )),
                KnownState::Missing => (
                    DerivedStatus::Missing,
                    versions
                        .gone(r)
                        .unwrap_or_else(|| "its data is gone".to_string()),
                ),
                // Its last rebuild wrote the bytes it had: what was read from it stands.
                _ if Cutoff::of_message(row.message.as_deref()) == Some(Cutoff::RebuiltUnchanged) => (
                    DerivedStatus::Live,
                    format!("rebuilt by run {run}, unchanged: downstream kept"),
                ),
                _ => (DerivedStatus::Live, format!("built by run {run}")),
            },
            Status::Building => (
                DerivedStatus::Building,
                format!(
                    "being built by run {run} of build request {}",
                    row.build_request_id.as_deref().unwrap_or("?")
                ),
            ),
            Status::Failed => (
                DerivedStatus::Failed,
                format!(
                    "run {run} failed{}",
                    row.message.map(|m| format!(": {m}")).unwrap_or_default()
                ),
            ),
            Status::Tainted => (
                DerivedStatus::Tainted,
                format!(
                    "tainted{}",
                    row.message.map(|m| format!(": {m}")).unwrap_or_default()
                ),
            ),
            Status::Removed => (
                DerivedStatus::Missing,
                format!(
                    "its data was removed{}; a build makes it again",
                    row.message.map(|m| format!(" ({m})")).unwrap_or_default()
                ),
            ),
            other => (DerivedStatus::Missing, format!("last recorded as `{other}`")),
        };
        report.status = status;
        report.reasons.push(reason);
        if row.status == Status::Available {
            let rows = self.store.checks_of(&[r])?;
            report.checks = crate::check::results(&self.graph, r, run, &rows, &|c| {
                versions
                    .code()
                    .map(|code| code.check(c).map().clone())
                    .unwrap_or_default()
            });
            for c in &report.checks {
                if c.result == "failed" && !c.blocking {
                    report.reasons.push(format!(
                        "warning: {} (not blocking)",
                        crate::check::failed_reason(&c.name, c.message.as_deref().unwrap_or(""))
                    ));
                }
                if let Some(why) = &c.stale {
                    report.reasons.push(format!(
                        "{why}: it runs again with the next build or `databuild check`"
                    ));
                }
            }
        }
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
        let (status, reason) = match crate::data::sources::sealed_version(&dir) {
            Some(version) => (DerivedStatus::Live, format!(
                "source partition of `{}`, sealed with {} records",
                source.name,
                version.split(':').nth(1).unwrap_or("?")
            )),
            None if row.as_ref().is_some_and(|p| p.status == Status::Expired) => (DerivedStatus::Expired, format!(
                "its raw data expired (source `{}` keeps {} days); table versions carry it forward from their previous version",
                source.name, source.retention_days
            )),
            None if dir.exists() => (DerivedStatus::Missing, format!(
                "open: source `{}` still receives data for this day; it is sealed when the day ends (or by `databuild source seal {}`)",
                source.name, source.name
            )),
            None => (DerivedStatus::Missing, format!("no data of source `{}` has arrived for this day", source.name)),
        };
        report.status = status;
        report.reasons.push(reason);
        Ok(report)
    }
}

/// Each ref's report; a ref whose config fails fails the whole answer, or (isolating) is that
/// ref's own error.
pub(crate) fn status(
    engine: &Engine,
    refs: &[String],
    on_failure: OnConfigFailure,
) -> Result<Vec<StatusReport>> {
    status_with(engine, refs, on_failure, &engine.code())
}

/// [`status`] as a user is told it: each ref whose config fails is that ref's own error, and
/// each not live says when an external partition it is, or waits for, is late.
pub(crate) fn told(engine: &Engine, refs: &[String]) -> Result<Vec<StatusReport>> {
    let code = engine.code();
    let mut reports = status_with(engine, refs, OnConfigFailure::Isolate, &code)?;
    mark_late(engine, &mut reports, &code)?;
    Ok(reports)
}

/// At most this many job outputs not live are planned per answer to find a late input they
/// wait for: a `status` of a whole range stays cheap; the ones beyond say nothing of lateness.
const MAX_PLANNED_FOR_LATE: usize = 100;

/// Marks each report not live whose external partition (its own ref, or a missing input its
/// plan needs) is past its `expected_by`, with a reason and `late`. Only refs not live are
/// looked at, and only the cadences of the datasets involved are learned.
fn mark_late(engine: &Engine, reports: &mut [StatusReport], code: &Arc<CodeCache>) -> Result<()> {
    // Nothing can be late: no job output is planned to find out.
    if !super::forecast::any_forecastable(&engine.graph) {
        return Ok(());
    }
    let now = engine.config.clock.now_ns();
    let mut cadences = Cadences::new(engine);
    let mut planned = 0;
    for report in reports
        .iter_mut()
        .filter(|r| r.status != DerivedStatus::Live && r.error.is_none())
    {
        let r = report.partition_ref.as_str();
        let late = match engine.graph.producer_of(r) {
            Some((Producer::Dataset(d), _))
                if report.status == DerivedStatus::Missing
                    && engine.graph.datasets[d].source.is_none() =>
            {
                cadences.late(d, r, now)?
            }
            // Planned only when missing, and never for a job whose inputs a config gives: the
            // status already asked its config once, and a second call would be a second run.
            Some((Producer::Job { job, .. }, _))
                if report.status == DerivedStatus::Missing
                    && !matches!(
                        engine.graph.jobs[job].deps,
                        databuild_core::Deps::Dynamic { .. }
                    )
                    && planned < MAX_PLANNED_FOR_LATE =>
            {
                planned += 1;
                late_input(engine, r, code, now, &mut cadences)?
            }
            _ => None,
        };
        if let Some(late) = late {
            report.reasons.push(if late.partition_ref == r {
                late.reason()
            } else {
                format!("waits for {}", late.reason())
            });
            report.late = Some(late);
        }
    }
    Ok(())
}

/// The most late of the external inputs `r`'s plan misses (none when it cannot be planned:
/// its status says why).
fn late_input(
    engine: &Engine,
    r: &str,
    code: &Arc<CodeCache>,
    now: i64,
    cadences: &mut Cadences<'_>,
) -> Result<Option<Late>> {
    let Ok(valid) = PartitionRef::new(r) else {
        return Ok(None);
    };
    let request = PlanRequest {
        refs: vec![valid],
        ..Default::default()
    };
    let Ok(plan) = super::planning::plan_with(engine, &request, code) else {
        return Ok(None);
    };
    let mut most: Option<Late> = None;
    for m in plan.missing.iter().filter(|m| m.failed_check.is_none()) {
        let input = m.partition_ref.as_str();
        let Some((Producer::Dataset(d), _)) = engine.graph.producer_of(input) else {
            continue;
        };
        if let Some(late) = cadences.late(d, input, now)? {
            if most
                .as_ref()
                .is_none_or(|l| late.expected_by_ns < l.expected_by_ns)
            {
                most = Some(late);
            }
        }
    }
    Ok(most)
}

/// [`status`] with the code versions of `code`, the request's (validated once, read once).
fn status_with(
    engine: &Engine,
    refs: &[String],
    on_failure: OnConfigFailure,
    code: &Arc<CodeCache>,
) -> Result<Vec<StatusReport>> {
    code.validated(&engine.graph)?;
    let sightings = crate::data::arrivals::Sightings::default();
    let mut resolver = engine.resolver().sighted_by(Some(&sightings));
    let versions = engine.versions_with(code);
    let mut reports = refs
        .iter()
        .map(|r| engine.status_of(r, &mut resolver, &versions))
        .collect::<Result<Vec<_>>>()?;
    engine.record_arrivals(&sightings)?;
    let shown: Vec<(&str, DerivedStatus)> = reports
        .iter()
        .map(|r| (r.partition_ref.as_str(), r.status))
        .collect();
    for (i, recheck) in engine.recheck_configs(&shown, &mut resolver, &versions, on_failure)? {
        match recheck {
            Recheck::Stale(why) => {
                reports[i].status = DerivedStatus::Stale;
                reports[i].reasons = vec![why];
            }
            Recheck::ConfigFailed(why) => {
                reports[i].reasons = vec![why.clone()];
                reports[i].error = Some(RefError {
                    kind: RefErrorKind::ConfigFailed,
                    message: why,
                });
            }
            Recheck::Withheld(w) => {
                reports[i].reasons.push(not_rechecked(&w));
                reports[i].withheld = Some((&w).into());
            }
        }
    }
    Ok(reports)
}

pub(crate) fn explain(engine: &Engine, r: &str) -> Result<Explanation> {
    // One reading of the code for all the explanation derives: its status, its inputs', its
    // plan, and how its code changed.
    let code = engine.code();
    let mut status = status_with(engine, &[r.to_string()], OnConfigFailure::Fail, &code)?.remove(0);
    if let Some(e) = status.error {
        return Err(EngineError::Invalid(e.message));
    }
    mark_late(engine, std::slice::from_mut(&mut status), &code)?;
    let producer = engine.graph.producer_of(r).map(|(p, _)| ProducerInfo {
        kind: producer_kind(&engine.graph, p).to_string(),
        name: engine.graph.producer_name(p).to_string(),
        pattern: engine.graph.pattern_of(p).to_string(),
    });
    let run = match &status.built_by {
        Some(id) => engine.store.job_run(id)?,
        None => None,
    };
    // The inputs and the query inputs the run read, as they are now: one answer for both.
    let (inputs, query_inputs) = match &run {
        Some(run) => {
            let read = crate::data::versions::query_reads(run);
            let refs: Vec<String> = run
                .inputs
                .iter()
                .cloned()
                .chain(read.iter().map(|(r, _)| r.to_string()))
                .collect();
            let mut inputs = status_with(engine, &refs, OnConfigFailure::Fail, &code)?;
            let now = inputs.split_off(run.inputs.len());
            let query_inputs = read
                .iter()
                .zip(now)
                .map(|((r, version), now)| QueryInputRead {
                    partition_ref: r.to_string(),
                    data_version: version.to_string(),
                    built_by: run.input_runs.get(*r).cloned(),
                    status: now.status,
                })
                .collect();
            (inputs, query_inputs)
        }
        None => (Vec::new(), Vec::new()),
    };
    let mut plan_runs = Vec::new();
    let to_build = match (status.status, producer.as_ref().map(|p| p.kind.as_str())) {
        (DerivedStatus::Live | DerivedStatus::Building | DerivedStatus::CheckFailed, _)
        | (_, Some("dataset" | "source") | None) => Vec::new(),
        _ => {
            let refs = vec![databuild_core::PartitionRef::new(r)
                .map_err(|e| EngineError::Invalid(e.to_string()))?];
            let planned = super::planning::plan_with(
                engine,
                &PlanRequest {
                    refs,
                    ..Default::default()
                },
                &code,
            );
            let plan = match planned {
                // What would build it is not planned for this caller: the rest still answers.
                Err(EngineError::Plan(PlanError::ConfigWithheld(w))) => {
                    status.reasons.push(format!("not planned: {w}"));
                    status.withheld = Some((&w).into());
                    Plan::default()
                }
                planned => planned?,
            };
            let steps = plan
                .runs
                .iter()
                .map(|run| PlannedStep {
                    job: run.job.to_string(),
                    outputs: run.outputs.iter().map(|o| o.to_string()).collect(),
                })
                .collect();
            plan_runs = plan.runs;
            steps
        }
    };
    let root_cause = root_cause(engine, r, &status, run.as_ref(), &plan_runs)?;
    if let Some(cause) = root_cause
        .as_ref()
        .filter(|_| status.status == DerivedStatus::Missing)
    {
        // Not "no run has built it yet": what stops it being built.
        let tail = cause
            .log_tail
            .as_ref()
            .map(|t| format!(" (last log line: {t})"))
            .unwrap_or_default();
        let said = match &cause.via {
            Some(via) => format!(
                "its input {via} cannot be built: {} failed in run {}{tail}",
                cause.partition_ref, cause.job_run_id
            ),
            None => format!(
                "its input {} failed in run {}{tail}",
                cause.partition_ref, cause.job_run_id
            ),
        };
        status.reasons.retain(|why| why != NEVER_BUILT);
        status.reasons.insert(0, said);
    }
    let mut history = engine.store.events(&EventFilter {
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
    let code_changes = run
        .as_ref()
        .map(|run| code_changes(engine, run, &code))
        .unwrap_or_default();
    Ok(Explanation {
        status,
        producer,
        run,
        report,
        inputs,
        query_inputs,
        to_build,
        history,
        wants: engine.wants_of(r)?,
        root_cause,
        code_changes,
    })
}

/// How the code of `run`'s job now differs from what `run` recorded (nothing for a run
/// recorded before code versions, or of a job no longer in the graph).
fn code_changes(
    engine: &Engine,
    run: &JobRunRow,
    code: &CodeCache,
) -> Vec<crate::answers::CodeChange> {
    match engine.graph.job(&run.job) {
        Some(job) if !run.code_versions.is_empty() => crate::answers::CodeChange::between(
            &run.code_versions,
            code.job(&engine.graph, job).map(),
        ),
        _ => Vec::new(),
    }
}

/// What `status` says of a live partition of a config job whose config may not run for the
/// caller.
fn not_rechecked(w: &ConfigWithheld) -> String {
    format!("not re-checked against what its config chooses now: {w}")
}

/// What `status` says of a job output no run has built.
const NEVER_BUILT: &str = "no run has built it yet";

/// The run that actually failed, for a partition that is failed (its own run: `run`, which
/// explain read) or missing (the first planned run, in dependency order, whose output the log
/// records failed: the deepest failure up its inputs), and the input of `r` it is reached through.
fn root_cause(
    engine: &Engine,
    r: &str,
    status: &StatusReport,
    run: Option<&JobRunRow>,
    plan: &[databuild_core::PlannedRun],
) -> Result<Option<RootCause>> {
    let (row, run) = match status.status {
        // Its run is the one explain read; its row is read for its message (the fallback of its
        // run's), which `status` does not keep.
        DerivedStatus::Failed => (
            engine
                .store
                .partition(r)?
                .filter(|row| row.status == Status::Failed),
            run.cloned(),
        ),
        DerivedStatus::Missing => {
            let outputs: Vec<&str> = plan
                .iter()
                .flat_map(|run| run.outputs.iter().map(|o| o.as_str()))
                .filter(|o| *o != r)
                .collect();
            let mut failed: HashMap<String, PartitionRow> = engine
                .store
                .partitions_by_ref(&outputs)?
                .into_iter()
                .filter(|row| row.status == Status::Failed)
                .map(|row| (row.partition_ref.clone(), row))
                .collect();
            let row = outputs.iter().find_map(|o| failed.remove(*o));
            let run = match row.as_ref().and_then(|row| row.job_run_id.as_deref()) {
                Some(id) => engine.store.job_run(id)?,
                None => None,
            };
            (row, run)
        }
        _ => return Ok(None),
    };
    let Some(row) = row else {
        return Ok(None);
    };
    let Some(run_id) = row.job_run_id.clone() else {
        return Ok(None);
    };
    let log_tail = run
        .as_ref()
        .and_then(|run| run.log_path.as_deref())
        .and_then(crate::run::log::last_log_line);
    // Which of `r`'s inputs the failure is reached through: everything planned downstream of it.
    let mut reach: rustc_hash::FxHashSet<&str> =
        std::iter::once(row.partition_ref.as_str()).collect();
    for run in plan {
        if run.inputs.iter().any(|i| reach.contains(i.as_str())) {
            reach.extend(run.outputs.iter().map(|o| o.as_str()));
        }
    }
    let via = plan
        .iter()
        .find(|run| run.outputs.iter().any(|o| o.as_str() == r))
        .and_then(|run| run.inputs.iter().find(|i| reach.contains(i.as_str())))
        .map(|i| i.to_string())
        .filter(|i| *i != row.partition_ref);
    Ok(Some(RootCause {
        partition_ref: row.partition_ref.clone(),
        job_run_id: run_id,
        job: row.job.clone(),
        message: run.and_then(|run| run.message).or(row.message),
        log_tail,
        via,
    }))
}

/// How a derived state shows, and why (as `status` says it): the reason of a stale, kept or
/// check_failed partition, or of one whose data is gone.
pub(crate) fn shown_state(
    state: KnownState,
    versions: &VersionedStates<'_>,
    r: &str,
) -> (DerivedStatus, Option<String>) {
    match state {
        KnownState::Live => (DerivedStatus::Live, None),
        KnownState::Stale { reason, .. } | KnownState::Kept { reason } => {
            (DerivedStatus::Stale, Some(reason))
        }
        KnownState::CheckFailed { reason } => (DerivedStatus::CheckFailed, Some(reason)),
        KnownState::Missing => (
            DerivedStatus::Missing,
            Some(
                versions
                    .gone(r)
                    .unwrap_or_else(|| "its data is gone".to_string()),
            ),
        ),
        KnownState::Building { .. } => (DerivedStatus::Building, None),
        KnownState::Failed => (DerivedStatus::Failed, None),
        KnownState::Tainted => (DerivedStatus::Tainted, None),
    }
}

/// `job`, `dataset`, `source` (raw partitions of a [[source]]) or `alias` (a table's alias).
pub(crate) fn producer_kind(graph: &databuild_core::Graph, p: Producer) -> &'static str {
    match p {
        Producer::Job { .. } => "job",
        Producer::Dataset(d) if graph.datasets[d].source.is_some() => "source",
        Producer::Dataset(_) => "dataset",
        Producer::Alias(_) => "alias",
    }
}
