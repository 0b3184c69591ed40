//! The graph's jobs as the log knows them: their metrics, and the inputs dynamic jobs' runs
//! recorded reading.

use super::{Engine, EngineError, Result};

/// How many of a dynamic job's latest runs say what it reads, for the graph's picture.
const RECORDED_RUNS: usize = 20;

pub(crate) fn recorded_edges(engine: &Engine) -> Result<Vec<(databuild_core::Producer, usize)>> {
    let mut edges = std::collections::BTreeSet::new();
    for (j, job) in engine.graph.jobs.iter().enumerate() {
        if !matches!(job.deps, databuild_core::Deps::Dynamic { .. }) {
            continue;
        }
        let runs = engine.store.job_runs(&databuild_log::RunQuery {
            job: Some(job.name.clone()),
            limit: RECORDED_RUNS,
            ..Default::default()
        })?;
        for input in runs.iter().flat_map(|r| &r.inputs) {
            if let Some((p, _)) = engine.graph.producer_of(input) {
                edges.insert((p, j));
            }
        }
    }
    Ok(edges.into_iter().collect())
}

pub(crate) fn jobs(engine: &Engine, name: Option<&str>) -> Result<Vec<databuild_log::JobStats>> {
    if let Some(n) = name {
        if engine.graph.job(n).is_none() {
            return Err(EngineError::NotFound(format!("no job `{n}` in the graph")));
        }
    }
    let mut stats = engine.store.job_stats(name)?;
    Ok(engine
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
