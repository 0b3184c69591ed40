//! `BuildProgress`: how far a build has come and what is left, read from the log (its plan's
//! counts by job and its runs' counts by job and status), the same for every reader.

use databuild_core::estimate::{eta, JobLeft};
use databuild_log::{BuildRequestRow, Kind, Status};
use rustc_hash::FxHashMap;

use crate::answers::{BuildProgress, JobProgress};
use crate::engine::{Engine, Result};

/// Seconds, to the hundredth.
fn seconds(ms: f64) -> f64 {
    (ms / 10.0).round() / 100.0
}

fn job<'j>(jobs: &'j mut FxHashMap<String, JobProgress>, name: &str) -> &'j mut JobProgress {
    jobs.entry(name.to_string()).or_insert_with(|| JobProgress {
        job: name.to_string(),
        planned: 0,
        done: 0,
        queued: 0,
        running: 0,
        failed: 0,
        cancelled: 0,
        left: 0,
        unclaimed: 0,
        p50_s: None,
    })
}

pub(crate) fn progress(engine: &Engine, id: &str) -> Result<Option<BuildProgress>> {
    match engine.store.build_request(id)? {
        Some(build) => engine.progress_of(&build),
        None => Ok(None),
    }
}

pub(crate) fn progress_of(
    engine: &Engine,
    build: &BuildRequestRow,
) -> Result<Option<BuildProgress>> {
    let id = build.build_request_id.as_str();
    let Some(planned) = engine
        .build_request_events(id, Status::AnalysisCompleted, Some(1))?
        .pop()
    else {
        return Ok(None);
    };
    // `executing` events: the first says when the build began running; later ones hold
    // the runs it added to its plan.
    let executing = engine.build_request_events(id, Status::Executing, None)?;
    let mut jobs: FxHashMap<String, JobProgress> = FxHashMap::default();
    for (name, n) in &planned.data.planned_by_job {
        job(&mut jobs, name).planned += n;
    }
    for (name, _) in executing.iter().flat_map(|e| &e.data.plan) {
        job(&mut jobs, name).planned += 1;
    }
    let counts = engine.store.build_run_counts(id)?;
    let mut completed = 0;
    for c in &counts.by_status {
        let j = job(&mut jobs, &c.job);
        match c.status {
            Status::Completed | Status::Skipped => j.done += c.n,
            Status::Queued => j.queued += c.n,
            Status::Running => j.running += c.n,
            Status::Failed => j.failed += c.n,
            Status::Cancelled => j.cancelled += c.n,
            _ => {}
        }
        if c.status == Status::Completed {
            completed += c.n;
        }
    }
    // A failed attempt that was retried is not a failure of the build: failures counted as the
    // summary counts them, of each output's last run (the runs read only when some failed).
    if jobs.values().any(|j| j.failed > 0) {
        let mut runs = Vec::new();
        engine.store.each_job_run(
            &databuild_log::RunQuery {
                build_request_id: Some(id.to_string()),
                brief: true,
                limit: 10_000_000,
                ..Default::default()
            },
            &mut |run| runs.push((run.job.clone(), run.status, run.outputs.first().cloned())),
        )?;
        runs.reverse();
        for j in jobs.values_mut() {
            j.failed = 0;
        }
        for i in crate::engine::summary::last_attempts(&runs, |r| r.2.as_ref()).into_values() {
            if runs[i].1 == Status::Failed {
                job(&mut jobs, &runs[i].0).failed += 1;
            }
        }
    }
    // Logs from before plans were counted by job: every planned run has a run.
    let counted = !planned.data.planned_by_job.is_empty();
    for (name, claimed) in &counts.claimed {
        let j = job(&mut jobs, name);
        if !counted {
            j.planned = *claimed;
        }
        j.unclaimed = j.planned.saturating_sub(*claimed);
    }
    let stats = engine.store.job_stats(None)?;
    let p50 = |name: &str| stats.iter().find(|s| s.job == name).and_then(|s| s.p50_ms);
    let mut jobs: Vec<JobProgress> = jobs.into_values().collect();
    jobs.sort_by(|a, b| a.job.cmp(&b.job));
    for j in &mut jobs {
        j.left = j.planned.saturating_sub(j.done);
        if !counts.claimed.iter().any(|(name, _)| *name == j.job) {
            j.unclaimed = j.planned;
        }
        j.p50_s = p50(&j.job).map(seconds);
    }
    let parallel = planned.data.parallel.unwrap_or(1).max(1) as usize;
    let left: Vec<JobLeft> = engine
        .graph
        .jobs
        .iter()
        .map(|g| JobLeft {
            left: jobs.iter().find(|j| j.job == g.name).map_or(0, |j| j.left),
            p50_ms: p50(&g.name),
        })
        .collect();
    let eta = eta(&engine.graph.job_inputs(), &left, parallel);
    let sum = |f: fn(&JobProgress) -> u64| jobs.iter().map(f).sum::<u64>();
    let ended = databuild_log::state::is_terminal(Kind::BuildRequest, build.status);
    let until = if ended {
        build.updated_at
    } else {
        databuild_log::event::now_ns()
    };
    let rate_per_s = executing
        .first()
        .map(|e| (until - e.timestamp).max(1) as f64 / 1e9)
        .filter(|_| completed > 0)
        .map(|secs| (completed as f64 / secs * 100.0).round() / 100.0);
    Ok(Some(BuildProgress {
        planned: sum(|j| j.planned),
        done: sum(|j| j.done),
        queued: sum(|j| j.queued),
        running: sum(|j| j.running),
        failed: sum(|j| j.failed),
        cancelled: sum(|j| j.cancelled),
        left: sum(|j| j.left),
        unclaimed: sum(|j| j.unclaimed),
        rate_per_s,
        eta_s: (!ended).then(|| seconds(eta.ms)),
        work_left_s: seconds(eta.work_ms),
        critical_path_left_s: seconds(eta.critical_path_ms),
        runs_without_history: eta.runs_without_history,
        parallel,
        jobs,
    }))
}
