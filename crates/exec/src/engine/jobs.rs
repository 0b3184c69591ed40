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

/// The p50 and p95 of each metric of `job` over its last [`TREND_RUNS`] runs. A resource is
/// recorded per output ref of a run (the same value each): it counts once per run.
///
/// [`TREND_RUNS`]: crate::answers::TREND_RUNS
pub(crate) fn trends(engine: &Engine, job: &str) -> Result<Vec<crate::answers::MetricTrend>> {
    use crate::answers::{MetricKind, MetricTrend};
    let rows = engine
        .store
        .recent_metrics(job, crate::answers::TREND_RUNS)?;
    Ok(values_by_name(&rows)
        .into_iter()
        .map(|(name, mut values)| MetricTrend {
            name: name.to_string(),
            kind: MetricKind::of(name),
            count: values.len() as u64,
            p50: crate::anomaly::quantile(&mut values, 0.5).unwrap_or_default(),
            p95: crate::anomaly::quantile(&mut values, 0.95).unwrap_or_default(),
        })
        .collect())
}

/// Each metric's values among `rows`: a resource once per run (it is recorded per output ref,
/// the same value each), a reported metric once per output ref.
fn values_by_name(
    rows: &[databuild_log::MetricValue],
) -> std::collections::BTreeMap<&str, Vec<f64>> {
    use crate::answers::MetricKind;
    let mut by_name: std::collections::BTreeMap<&str, Vec<f64>> = Default::default();
    let mut seen = rustc_hash::FxHashSet::default();
    for m in rows {
        let kind = MetricKind::of(&m.name);
        if kind == MetricKind::Resource && !seen.insert((&m.job_run_id, &m.name)) {
            continue;
        }
        by_name.entry(&m.name).or_default().push(m.value);
    }
    by_name
}

/// The median and 90th percentile of `job`'s run durations (`wall_ms`) over its last
/// [`TREND_RUNS`](crate::answers::TREND_RUNS) runs, and how many runs they are of; `None` for a
/// job with no run timed.
pub(crate) fn durations(engine: &Engine, job: &str) -> Result<Option<(f64, f64, u64)>> {
    let rows = engine
        .store
        .recent_metrics(job, crate::answers::TREND_RUNS)?;
    let Some(mut wall) = values_by_name(&rows).remove("wall_ms") else {
        return Ok(None);
    };
    let p50 = crate::anomaly::quantile(&mut wall, 0.5);
    let p90 = crate::anomaly::quantile(&mut wall, 0.9);
    Ok(p50.zip(p90).map(|(p50, p90)| (p50, p90, wall.len() as u64)))
}

/// A page of `metric` of the partitions of a job (`pattern`: its name or one of its output
/// patterns), in key order after the ref `after`.
pub(crate) fn metric_series(
    engine: &Engine,
    pattern: &str,
    metric: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<crate::answers::MetricSeries> {
    let graph = &engine.graph;
    let (job, output) = graph
        .jobs
        .iter()
        .find_map(|j| {
            if j.name == pattern {
                return Some((j, None));
            }
            let o = j.outputs.iter().find(|o| o.as_str() == pattern)?;
            Some((j, Some(o)))
        })
        .ok_or_else(|| {
            EngineError::NotFound(format!(
                "`{pattern}` is neither a job nor a job's output pattern; name a job (`databuild jobs` lists them) or one of its outputs, such as `{}`",
                graph.jobs.first().and_then(|j| j.outputs.first()).map_or("daily/{date:date}", |p| p.as_str())
            ))
        })?;
    // After every run of the ref `after` (a run id never holds `~`).
    let key = after.map(|r| databuild_log::MetricKey {
        partition_ref: r.to_string(),
        job_run_id: "~".into(),
    });
    // One row more than the page: whether the page's last ref goes on past it.
    let mut rows =
        engine
            .store
            .metric_values(&job.name, metric, key.as_ref(), limit.saturating_add(1))?;
    let next = whole_refs(&mut rows, limit);
    let values = rows
        .into_iter()
        .filter(|m| output.is_none_or(|o| o.match_ref(&m.partition_ref).is_some()))
        .map(|m| crate::answers::MetricPoint {
            recorded_at: crate::answers::rfc3339(m.recorded_at),
            recorded_at_ns: m.recorded_at,
            partition_ref: m.partition_ref,
            job_run_id: m.job_run_id,
            value: m.value,
        })
        .collect();
    Ok(crate::answers::MetricSeries {
        job: job.name.clone(),
        metric: metric.to_string(),
        values,
        next,
    })
}

/// Cuts `rows` (read one past the page) to a page of at most `limit` that holds every run of
/// each of its refs: the next page starts after a ref (`after`), so runs of the last ref that did
/// not fit would never be listed. They are left to the next page, unless they are the whole
/// page (one ref built `limit` times or more: its first `limit` runs are listed). Returns the
/// ref the next page starts after, `None` when this page ends the listing.
fn whole_refs(rows: &mut Vec<databuild_log::MetricValue>, limit: usize) -> Option<String> {
    if rows.len() <= limit {
        return None;
    }
    let beyond = rows.remove(limit).partition_ref;
    rows.truncate(limit);
    if rows.last()?.partition_ref == beyond {
        if let Some(i) = rows.iter().rposition(|m| m.partition_ref != beyond) {
            rows.truncate(i + 1);
        }
    }
    rows.last().map(|m| m.partition_ref.clone())
}

/// By job, the `--mem` a Slurm run of a job that sets no `mem` asks for: its p95 peak memory over
/// its last runs with headroom, once at least [`MIN_HISTORY`] runs recorded one. A log that
/// cannot be read leaves a job without (Slurm's default), as before there was any history.
///
/// [`MIN_HISTORY`]: crate::anomaly::MIN_HISTORY
pub(crate) fn learned_mem(engine: &Engine) -> std::collections::BTreeMap<String, String> {
    let mut out = std::collections::BTreeMap::new();
    for job in engine.graph.jobs.iter().filter(|j| j.mem.is_none()) {
        let Ok(trends) = trends(engine, &job.name) else {
            continue;
        };
        let peak = trends.iter().find(|t| t.name == "max_rss_bytes");
        if let Some(t) = peak.filter(|t| t.count as usize >= crate::anomaly::MIN_HISTORY) {
            out.insert(job.name.clone(), crate::run::slurm::mem_of(t.p95));
        }
    }
    out
}

/// The charts of a job's page: duration, peak memory, then each metric its runs reported.
pub(crate) fn charts(engine: &Engine, job: &str) -> Result<Vec<crate::answers::MetricChart>> {
    let trends = trends(engine, job)?;
    let reported = trends
        .iter()
        .filter(|t| t.kind == crate::answers::MetricKind::Reported)
        .map(|t| t.name.as_str());
    ["wall_ms", "max_rss_bytes"]
        .into_iter()
        .chain(reported)
        .map(|metric| chart(engine, job, metric))
        .collect()
}

/// One metric's chart: a bounded read in key order (the first pages of the job's history, then
/// the last [`CHART_PARTITIONS`] partitions of it), each partition's latest run, and the failed
/// anomaly checks of those partitions' current instances.
///
/// [`CHART_PARTITIONS`]: crate::answers::CHART_PARTITIONS
fn chart(engine: &Engine, job: &str, metric: &str) -> Result<crate::answers::MetricChart> {
    use crate::answers::{ChartPoint, MetricChart, CHART_PARTITIONS};
    let rows = engine
        .store
        .metric_values(job, metric, None, CHART_PARTITIONS * 20)?;
    // Runs of a partition are in run order: its last is its latest.
    let mut latest: Vec<databuild_log::MetricValue> = Vec::new();
    for m in rows {
        match latest.last_mut() {
            Some(last) if last.partition_ref == m.partition_ref => *last = m,
            _ => latest.push(m),
        }
    }
    let latest = &latest[latest.len().saturating_sub(CHART_PARTITIONS)..];
    let refs: Vec<&str> = latest.iter().map(|m| m.partition_ref.as_str()).collect();
    let failed: rustc_hash::FxHashSet<(String, String)> = engine
        .store
        .checks_of(&refs)?
        .into_iter()
        .filter(|c| !c.passed())
        .filter(|c| {
            engine
                .graph
                .check(&c.check_name)
                .and_then(|k| k.metric.as_ref())
                .is_some_and(|r| r.metric == metric)
        })
        .map(|c| (c.partition_ref, c.job_run_id))
        .collect();
    let points: Vec<ChartPoint> = latest
        .iter()
        .map(|m| ChartPoint {
            anomaly: failed.contains(&(m.partition_ref.clone(), m.job_run_id.clone())),
            partition_ref: m.partition_ref.clone(),
            value: m.value,
        })
        .collect();
    let normal: Vec<f64> = points
        .iter()
        .rev()
        .filter(|p| !p.anomaly)
        .map(|p| p.value)
        .take(databuild_core::MetricRule::DEFAULT_WINDOW as usize)
        .collect();
    let band = (normal.len() >= crate::anomaly::MIN_HISTORY)
        .then(|| crate::anomaly::Band::learn(&normal, databuild_core::MetricRule::DEFAULT_K))
        .flatten();
    Ok(MetricChart {
        metric: metric.to_string(),
        points,
        band: band.map(|b| (b.low, b.high)),
        median: band.map(|b| b.median),
    })
}

/// A run's values (each resource once, each reported metric per output) beside its job's p50.
pub(crate) fn against_p50(
    engine: &Engine,
    job: &str,
    run: &str,
) -> Result<Vec<crate::answers::AgainstP50>> {
    let trends = trends(engine, job)?;
    let mut seen = rustc_hash::FxHashSet::default();
    Ok(engine
        .store
        .run_metrics(run)?
        .into_iter()
        .filter(|m| {
            crate::answers::MetricKind::of(&m.name) == crate::answers::MetricKind::Reported
                || seen.insert(m.name.clone())
        })
        .map(|m| crate::answers::AgainstP50 {
            p50: trends.iter().find(|t| t.name == m.name).map(|t| t.p50),
            name: m.name,
            partition_ref: m.partition_ref,
            value: m.value,
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows(refs: &[&str]) -> Vec<databuild_log::MetricValue> {
        refs.iter()
            .enumerate()
            .map(|(i, r)| databuild_log::MetricValue {
                job: "j".into(),
                name: "rows".into(),
                partition_ref: r.to_string(),
                job_run_id: format!("run{i}"),
                value: 1.0,
                recorded_at: 0,
            })
            .collect()
    }

    #[test]
    fn a_full_page_leaves_its_last_refs_runs_to_the_next_whole() {
        let mut page = rows(&["o/1", "o/2", "o/2"]);
        assert_eq!(whole_refs(&mut page, 2).as_deref(), Some("o/1"));
        assert_eq!(page.len(), 1, "o/2's runs come whole on the next page");
        let mut ends = rows(&["o/1", "o/2", "o/3"]);
        assert_eq!(whole_refs(&mut ends, 2).as_deref(), Some("o/2"));
        assert_eq!(ends.len(), 2, "o/2 ends within the page");
        let mut one = rows(&["o/1", "o/1", "o/1"]);
        assert_eq!(whole_refs(&mut one, 2).as_deref(), Some("o/1"));
        assert_eq!(one.len(), 2, "a page of one ref keeps it");
        let mut last = rows(&["o/1", "o/2"]);
        assert_eq!(whole_refs(&mut last, 2), None);
        assert_eq!(last.len(), 2);
    }
}
