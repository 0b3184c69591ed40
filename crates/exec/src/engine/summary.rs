//! `BuildSummary`: what a build did, read back from the log, the same for the process that ran
//! it, the service, and anyone asking later.

use databuild_log::{Cutoff, RunQuery, Status};
use rustc_hash::{FxHashMap, FxHashSet};

use crate::answers::{BuildSummary, RunFailure, SummaryCounts};
use crate::engine::{Engine, Result};

impl BuildSummary {
    /// A build that ended before any run: every requested ref is not live, except for a refused
    /// one, which asked for nothing to be made and failed nothing.
    pub(super) fn nothing_ran(
        id: &str,
        status: Status,
        requested: Vec<String>,
        message: String,
    ) -> Self {
        BuildSummary {
            build_request_id: id.to_string(),
            status,
            built: Vec::new(),
            skipped: Vec::new(),
            delegated: Vec::new(),
            failed: match status {
                Status::Refused => Vec::new(),
                _ => requested,
            },
            failures: Vec::new(),
            cancelled: Vec::new(),
            not_started: Vec::new(),
            message: Some(message),
            counts: Default::default(),
        }
        .counted()
    }
}

/// What a summary reads of each of the build's runs: a whole row each held 35 MB at the end of a
/// build of 24k runs.
struct RunOutcome {
    job_run_id: String,
    job: String,
    status: Status,
    outputs: Box<[String]>,
    scheduled_at: Option<i64>,
    started: bool,
    message: Option<String>,
    log_path: Option<String>,
}

impl From<databuild_log::JobRunRow> for RunOutcome {
    fn from(run: databuild_log::JobRunRow) -> Self {
        RunOutcome {
            job_run_id: run.job_run_id,
            job: run.job,
            status: run.status,
            outputs: run.outputs.into(),
            scheduled_at: run.scheduled_at,
            started: run.started_at.is_some(),
            message: run.message,
            log_path: run.log_path,
        }
    }
}

/// How many parts of a plan's record a summary reads at once (a part names up to a few
/// thousand runs).
const PLAN_PARTS_READ: usize = 16;

/// How many failures a summary quotes the logs of (each is a file read).
const QUOTED_FAILURES: usize = 1000;

impl Engine {
    /// A build request's own events of one status (its plan's parts among them), in log order.
    pub(super) fn build_request_events(
        &self,
        id: &str,
        status: Status,
        limit: Option<usize>,
    ) -> Result<Vec<databuild_log::Event>> {
        Ok(self.store.events(&databuild_log::EventFilter {
            build_request_id: Some(id.to_string()),
            kind: Some(databuild_log::Kind::BuildRequest),
            status: Some(status),
            limit,
            ..Default::default()
        })?)
    }
}

/// Of a build's runs (oldest first), the index of each that its outputs end with: the last run
/// that had them, by its first output (the keys: every first output a run of the build had). An
/// earlier failed attempt that was retried is not a failure of the build: the summary and the
/// progress both count failures by this.
pub(crate) fn last_attempts<T>(
    runs: &[T],
    first_output: impl Fn(&T) -> Option<&String>,
) -> FxHashMap<&str, usize> {
    let mut last_of: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, r) in runs.iter().enumerate() {
        if let Some(first) = first_output(r) {
            last_of.insert(first, i);
        }
    }
    last_of
}

pub(crate) fn summary(engine: &Engine, id: &str) -> Result<Option<BuildSummary>> {
    match engine.store.build_request(id)? {
        Some(build) => engine.summary_of(&build).map(Some),
        None => Ok(None),
    }
}

pub(crate) fn summary_of(
    engine: &Engine,
    build: &databuild_log::BuildRequestRow,
) -> Result<BuildSummary> {
    engine.summary_cut(build, usize::MAX)
}

pub(crate) fn summary_cut(
    engine: &Engine,
    build: &databuild_log::BuildRequestRow,
    cut: usize,
) -> Result<BuildSummary> {
    let id = build.build_request_id.as_str();
    let mut runs = Vec::new();
    engine.store.each_job_run(
        &RunQuery {
            build_request_id: Some(id.to_string()),
            brief: true,
            limit: 10_000_000,
            ..Default::default()
        },
        &mut |run| runs.push(RunOutcome::from(run)),
    )?;
    runs.reverse();
    let mut is_delegated = FxHashSet::default();
    let delegated: Vec<String> = engine
        .store
        .events(&databuild_log::EventFilter {
            build_request_id: Some(id.to_string()),
            kind: Some(databuild_log::Kind::Delegation),
            ..Default::default()
        })?
        .into_iter()
        .filter_map(|e| e.partition_ref)
        .filter(|r| is_delegated.insert(r.clone()))
        .collect();
    let outputs_of = |status: Status| -> Vec<String> {
        runs.iter()
            .filter(|r| r.status == status)
            .flat_map(|r| r.outputs.iter().cloned())
            .filter(|o| !is_delegated.contains(o))
            .collect()
    };
    // Of those, the outputs of runs early cutoff marked: rebuilt unchanged, or kept.
    let count_cut = |status: Status, cutoff: Cutoff| -> u64 {
        (runs.iter())
            .filter(|r| {
                r.status == status && Cutoff::of_message(r.message.as_deref()) == Some(cutoff)
            })
            .flat_map(|r| r.outputs.iter())
            .filter(|o| !is_delegated.contains(*o))
            .count() as u64
    };
    let unchanged = count_cut(Status::Completed, Cutoff::RebuiltUnchanged);
    let reused = (runs.iter())
        .filter(|r| {
            r.status == Status::Completed
                && databuild_log::ReusedFrom::of_message(r.message.as_deref()).is_some()
        })
        .flat_map(|r| r.outputs.iter())
        .filter(|o| !is_delegated.contains(*o))
        .count() as u64;
    let kept = count_cut(Status::Skipped, Cutoff::InputsUnchanged);
    let mut available: FxHashSet<String> = FxHashSet::default();
    let mut failed_now: FxHashSet<String> = FxHashSet::default();
    for p in engine.store.request_partitions(id)? {
        match p.status {
            Status::Available => available.insert(p.partition_ref),
            Status::Failed => failed_now.insert(p.partition_ref),
            _ => false,
        };
    }
    // A build still going has failed only the refs that did fail: the others (scheduled,
    // claimed, building, waited for) may yet be built.
    let over = databuild_log::state::is_terminal(databuild_log::Kind::BuildRequest, build.status);
    // Keyed by every first output a run of the build had: what the plan's record is read against.
    let last_of = last_attempts(&runs, |r| r.outputs.first());
    let mut last: Vec<&RunOutcome> = last_of.values().map(|&i| &runs[i]).collect();
    last.sort_by_key(|r| r.scheduled_at);
    // Not started: given up before its process started, or (while the build runs) queued.
    let ended_unbuilt = |started: bool| -> Vec<String> {
        last.iter()
            .filter(|r| match r.status {
                Status::Cancelled => r.started == started,
                Status::Queued => !started,
                _ => false,
            })
            .flat_map(|r| r.outputs.iter().cloned())
            .filter(|o| !is_delegated.contains(o))
            .collect()
    };
    // Planned runs that were never claimed have no run of their own: only the plan's
    // record names them (`record::planned`).
    let mut never_claimed = Vec::new();
    let mut never_claimed_count = 0u64;
    for status in [Status::Planning, Status::Executing] {
        let mut since = None;
        loop {
            let parts = engine.store.events(&databuild_log::EventFilter {
                build_request_id: Some(id.to_string()),
                kind: Some(databuild_log::Kind::BuildRequest),
                status: Some(status),
                since,
                limit: Some(PLAN_PARTS_READ),
                ..Default::default()
            })?;
            let Some(last) = parts.last() else { break };
            since = Some(last.idx);
            let full = parts.len() == PLAN_PARTS_READ;
            for part in parts {
                for (_, outputs) in part.data.plan {
                    let claimed = outputs
                        .first()
                        .is_some_and(|o| last_of.contains_key(o.as_str()));
                    if claimed {
                        continue;
                    }
                    for o in outputs.into_iter().filter(|o| !is_delegated.contains(o)) {
                        never_claimed_count += 1;
                        if never_claimed.len() < cut {
                            never_claimed.push(o);
                        }
                    }
                }
            }
            if !full {
                break;
            }
        }
    }
    // Outputs this build made that a blocking check of theirs failed: built, not live.
    let mut latest: FxHashMap<(String, String), Option<(String, String)>> = FxHashMap::default();
    for e in engine.store.events(&databuild_log::EventFilter {
        build_request_id: Some(id.to_string()),
        kind: Some(databuild_log::Kind::Check),
        ..Default::default()
    })? {
        let (Some(r), Some(run), Some(name)) = (e.partition_ref, e.job_run_id, e.data.check) else {
            continue;
        };
        let failed = e.status == Status::Failed && e.data.blocking.unwrap_or(true);
        let why = crate::check::failed_reason(&name, e.message.as_deref().unwrap_or(""));
        latest.insert((r, name), failed.then_some((run, why)));
    }
    let mut held_back: FxHashMap<String, (String, String)> = FxHashMap::default();
    for ((r, _), failure) in latest {
        if let Some(failure) = failure {
            held_back.entry(r).or_insert(failure);
        }
    }
    let mut failures: Vec<RunFailure> = last
        .iter()
        .filter(|r| r.status == Status::Failed)
        .enumerate()
        .map(|(i, r)| RunFailure {
            job: r.job.clone(),
            job_run_id: r.job_run_id.clone(),
            outputs: r.outputs.to_vec(),
            message: r.message.clone(),
            log_tail: (i < QUOTED_FAILURES)
                .then(|| {
                    r.log_path
                        .as_deref()
                        .and_then(crate::run::log::last_log_line)
                })
                .flatten(),
        })
        .collect();
    for r in last.iter().filter(|r| r.status == Status::Completed) {
        if let Some((_, why)) = r
            .outputs
            .iter()
            .find_map(|o| held_back.get(o).filter(|(run, _)| *run == r.job_run_id))
        {
            failures.push(RunFailure {
                job: r.job.clone(),
                job_run_id: r.job_run_id.clone(),
                outputs: r.outputs.to_vec(),
                message: Some(why.clone()),
                log_tail: None,
            });
        }
    }
    let mut not_started = ended_unbuilt(false);
    let started_count = not_started.len() as u64;
    not_started.extend(never_claimed);
    // A requested ref this build did not make (its run never started, or was cancelled) is as
    // the build found it: live if it was live and still is, as `status` derives it (a forced
    // rebuild interrupted leaves the live instance in place; a stale one stays not live). While
    // the build runs, only what already failed in it counts.
    // A refused build made nothing and failed nothing: its refs are not judged (nor derived,
    // which for the large request a refusal usually is would cost a derivation per ref). Nor
    // are an analysis's: it builds nothing, so it fails none of them (and it records only its
    // first refs, of `requested_count`).
    let judged = over && build.status != Status::Refused && !build.analyze_only;
    let live_as_found = match judged {
        true => live_as_found(engine, build, &available, &held_back)?,
        false => FxHashSet::default(),
    };
    let is_failed = |r: &&String| {
        held_back.contains_key(*r)
            || match judged {
                true => !available.contains(*r) && !live_as_found.contains(*r),
                false => failed_now.contains(*r),
            }
    };
    let failed_count = build.requested_partitions.iter().filter(is_failed).count() as u64;
    let failed = build
        .requested_partitions
        .iter()
        .filter(is_failed)
        .take(cut)
        .cloned()
        .collect();
    let summary = BuildSummary {
        build_request_id: id.to_string(),
        status: build.status,
        failures,
        cancelled: ended_unbuilt(true),
        not_started,
        built: outputs_of(Status::Completed),
        skipped: outputs_of(Status::Skipped),
        failed,
        delegated,
        message: build.message.clone(),
        counts: Default::default(),
    }
    .counted();
    let counts = SummaryCounts {
        not_started: started_count + never_claimed_count,
        failed: failed_count,
        unchanged,
        reused,
        kept,
        ..summary.counts
    };
    Ok(BuildSummary {
        counts,
        ..summary.cut_to(cut)
    })
}

/// The requested refs of `build` that it did not make available (nor hold back) but that the
/// log has live now, derived as `status` and listings derive it: a few rows, read by ref.
fn live_as_found(
    engine: &Engine,
    build: &databuild_log::BuildRequestRow,
    available: &FxHashSet<String>,
    held_back: &FxHashMap<String, (String, String)>,
) -> Result<FxHashSet<String>> {
    let candidates: Vec<&str> = build
        .requested_partitions
        .iter()
        .filter(|r| !available.contains(*r) && !held_back.contains_key(*r))
        .map(String::as_str)
        .collect();
    let mut live = FxHashSet::default();
    let code = engine.code();
    for chunk in candidates.chunks(10_000) {
        let states = engine.versions_with(&code).known_all(chunk)?;
        live.extend(
            (chunk.iter().zip(states))
                .filter(|(_, s)| *s == databuild_core::plan::KnownState::Live)
                .map(|(r, _)| r.to_string()),
        );
    }
    Ok(live)
}
