//! Checks as the engine runs them (see [`crate::check`] for what a result means): on demand
//! (`databuild check`, [`Engine::check`]) and, in a build, those of its closure that changed or
//! never ran ([`Engine::run_stale_checks`]). Apart from `check` so that liveness
//! (`data::versions`, which reads `check`) depends on no module that depends on the
//! engine.

use std::sync::atomic::AtomicBool;

use databuild_core::Producer;

use crate::check::{runs_for, state, CheckOutcome, CheckRun, CheckState};
use crate::engine::Engine;
use crate::run::check::{run, CheckPlace};
use crate::run::Executor;

/// The checks to run of partitions planning found live (or held back), and of the instances
/// they were built from, transitively (their closure): those without a result for their current
/// instance, or with one of another version or command of the check. Each with the run that
/// built the instance it checks. Read a level at a time, in batches.
fn stale_runs(
    engine: &Engine,
    refs: &[&str],
) -> crate::engine::Result<Vec<(CheckRun, String, String)>> {
    const BATCH: usize = 1000;
    let graph = &engine.graph;
    let mut seen: rustc_hash::FxHashSet<String> = refs.iter().map(|r| r.to_string()).collect();
    let mut level: Vec<String> = seen.iter().cloned().collect();
    let mut partitions = Vec::new();
    while !level.is_empty() {
        let mut next = Vec::new();
        for chunk in level.chunks(BATCH) {
            let keys: Vec<&str> = chunk.iter().map(String::as_str).collect();
            let rows = engine.store.partitions_by_ref(&keys)?;
            let ids: Vec<&str> = rows
                .iter()
                .filter(|p| p.status == databuild_log::Status::Available)
                .filter_map(|p| p.job_run_id.as_deref())
                .collect();
            for run in engine.store.job_runs_by_id(&ids)? {
                for input in run.inputs {
                    let built =
                        matches!(graph.producer_of(&input), Some((Producer::Job { .. }, _)));
                    if built && seen.insert(input.clone()) {
                        next.push(input);
                    }
                }
            }
            partitions.extend(rows);
        }
        level = next;
    }
    partitions.retain(|p| !graph.checks_of(&p.partition_ref).is_empty());
    let mut out = Vec::new();
    let code = engine.code();
    for chunk in partitions.chunks(BATCH) {
        let keys: Vec<&str> = chunk.iter().map(|p| p.partition_ref.as_str()).collect();
        let rows = engine.store.checks_of(&keys)?;
        for p in chunk {
            let (Some(run), Some(job)) = (p.job_run_id.as_deref(), p.job.as_deref()) else {
                continue;
            };
            if p.status != databuild_log::Status::Available {
                continue;
            }
            for c in code.with_checks_code(graph, runs_for(graph, &p.partition_ref)) {
                let check = graph.check(&c.name).expect("a check of the graph");
                let row = rows
                    .iter()
                    .find(|row| row.partition_ref == p.partition_ref && row.check_name == c.name);
                if matches!(
                    state(check, row, run, &c.code_versions),
                    CheckState::NotRun | CheckState::Stale { .. }
                ) {
                    out.push((c, run.to_string(), job.to_string()));
                }
            }
        }
    }
    Ok(out)
}

/// Runs `runs` (each with the run and job of the instance it checks), up to `parallel` at once,
/// on `executor`, and records their results in one write. `None` if cancelled.
fn run_all(
    engine: &Engine,
    build: Option<&str>,
    runs: Vec<(CheckRun, String, String)>,
    executor: &dyn Executor,
    parallel: usize,
    cancel: &AtomicBool,
) -> crate::engine::Result<Option<Vec<CheckOutcome>>> {
    let logs_dir = engine.logs_dir();
    let recorded = recorded_metrics(engine, &runs)?;
    let next = std::sync::Mutex::new(runs.iter().enumerate());
    let results = std::sync::Mutex::new(vec![None; runs.len()]);
    std::thread::scope(|s| {
        for _ in 0..parallel.clamp(1, runs.len().max(1)) {
            s.spawn(|| loop {
                let Some((i, (c, instance, _))) = next.lock().expect("queue lock").next() else {
                    break;
                };
                let recorded = recorded
                    .get(instance.as_str())
                    .map_or(&[][..], Vec::as_slice);
                let place = CheckPlace {
                    job_run_id: instance,
                    build_request_id: build,
                    graph_dir: &engine.graph_dir,
                    data_dir: &engine.data_dir,
                    logs_dir: &logs_dir,
                    history: &*engine.store,
                    measured: &|r, name| {
                        recorded
                            .iter()
                            .find(|m| m.partition_ref == r && m.name == name)
                            .map(|m| m.value)
                    },
                };
                let outcome = run(executor, &place, c, cancel);
                results.lock().expect("results lock")[i] = Some(outcome);
            });
        }
    });
    let mut outcomes = Vec::new();
    let mut events = Vec::new();
    for ((_, run, job), outcome) in runs.iter().zip(results.into_inner().expect("results lock")) {
        let Some(Some(outcome)) = outcome else {
            return Ok(None);
        };
        events.push(outcome.event(build, run, job));
        outcomes.push(outcome);
    }
    if !events.is_empty() {
        engine.store.append(events)?;
    }
    Ok(Some(outcomes))
}

/// What the instances anomaly checks judge after their runs (`databuild check`, a changed
/// check) recorded of their metrics, by run: read once per instance, none for command checks.
fn recorded_metrics<'r>(
    engine: &Engine,
    runs: &'r [(CheckRun, String, String)],
) -> crate::engine::Result<rustc_hash::FxHashMap<&'r str, Vec<databuild_log::MetricValue>>> {
    let mut out = rustc_hash::FxHashMap::default();
    for (_, instance, _) in runs.iter().filter(|(c, ..)| c.metric.is_some()) {
        if !out.contains_key(instance.as_str()) {
            out.insert(instance.as_str(), engine.store.run_metrics(instance)?);
        }
    }
    Ok(out)
}

impl Engine {
    /// In a build, before its runs: the checks of the partitions its plan found live (or held
    /// back) that are stale or never ran on their current instance run now, without rebuilding
    /// the data. Returns whether any ran (the plan is then made again: what they decided may
    /// change what is live).
    pub(crate) fn run_stale_checks(
        &self,
        build: &str,
        plan: &databuild_core::Plan,
        executor: &dyn Executor,
        parallel: usize,
        cancel: &AtomicBool,
    ) -> crate::engine::Result<bool> {
        if self.graph.checks.is_empty() {
            return Ok(false);
        }
        let refs: Vec<&str> = plan
            .skipped
            .iter()
            .map(|r| r.as_str())
            .chain(
                plan.missing
                    .iter()
                    .filter(|m| m.failed_check.is_some())
                    .map(|m| m.partition_ref.as_str()),
            )
            .collect();
        let runs = stale_runs(self, &refs)?;
        if runs.is_empty() {
            return Ok(false);
        }
        Ok(run_all(self, Some(build), runs, executor, parallel, cancel)?.is_some())
    }
}

pub(crate) fn check(
    engine: &Engine,
    refs: &[String],
    executor: &dyn Executor,
) -> crate::engine::Result<Vec<crate::answers::StatusReport>> {
    use crate::engine::EngineError;
    let mut runs = Vec::new();
    let code = engine.code();
    for r in refs {
        let checks = code.with_checks_code(&engine.graph, runs_for(&engine.graph, r));
        if checks.is_empty() {
            let what = match engine.graph.producer_of(r) {
                Some((p, _)) => engine.graph.describe_producer(p),
                None => return Err(EngineError::Invalid(engine.graph.unmatched_reason(r))),
            };
            return Err(EngineError::Invalid(format!(
                "no check applies to `{r}` ({what}); add a [[check]] with `applies_to` naming it"
            )));
        }
        let row = engine.store.partition(r)?;
        let built = row
            .as_ref()
            .filter(|p| p.status == databuild_log::Status::Available);
        let Some((run, job)) = built.and_then(|p| p.job_run_id.clone().zip(p.job.clone())) else {
            // A sound request the partition's state turns down until it is built: a conflict.
            return Err(EngineError::Conflict(format!(
                "`{r}` has no built instance to check ({}); build it first",
                row.map_or("never built".to_string(), |p| format!(
                    "it is `{}`",
                    p.status
                ))
            )));
        };
        for c in checks {
            runs.push((c, run.clone(), job.clone()));
        }
    }
    let parallel = std::thread::available_parallelism().map_or(1, |n| n.get());
    run_all(
        engine,
        None,
        runs,
        executor,
        parallel,
        &AtomicBool::new(false),
    )?;
    engine.status(refs)
}
