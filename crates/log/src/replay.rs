//! Replaying events in memory: the reference model of what the store's projections must hold.
//!
//! Property tests check the store against it, and `check-log` replays a whole log through it to
//! prove every entity's history is a valid path of its state machine.

use rustc_hash::FxHashMap;

use crate::event::{Event, Kind, Status};
use crate::state::{check, Current, Refusal};

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Replay {
    pub build_requests: FxHashMap<String, Status>,
    pub job_runs: FxHashMap<String, Status>,
    pub request_partitions: FxHashMap<(String, String), Status>,
    /// Global partition state and the run that holds or last built it.
    pub partitions: FxHashMap<String, (Status, Option<String>)>,
    /// Of each partition being built: its state before the claim (`None`: it had none), which
    /// a release (`cancelled` by the holding run) restores.
    pub before_claim: FxHashMap<String, Option<(Status, Option<String>)>>,
    pub wants: FxHashMap<String, Status>,
    /// Each want's deadline (`--by`), as its `requested` event says.
    pub want_deadlines: FxHashMap<String, Option<i64>>,
    /// The latest result of each (partition, check): its status and the instance (run) checked.
    pub checks: FxHashMap<(String, String), (Status, String)>,
    /// When each external partition was first seen available: (dataset, time).
    pub arrivals: FxHashMap<String, (String, i64)>,
    /// The external partitions recorded late and not arrived since: when last recorded late.
    pub late: FxHashMap<String, i64>,
}

impl Replay {
    pub fn current(&self, e: &Event) -> Current {
        let br = e.build_request_id.as_deref();
        let r = e.partition_ref.as_deref();
        Current {
            build_request: br.and_then(|b| self.build_requests.get(b).copied()),
            job_run: e
                .job_run_id
                .as_deref()
                .filter(|_| e.kind == Kind::JobRun)
                .and_then(|id| self.job_runs.get(id).copied()),
            request_partition: match (br, r, e.kind) {
                (Some(b), Some(r), Kind::Partition) => self
                    .request_partitions
                    .get(&(b.to_string(), r.to_string()))
                    .copied(),
                _ => None,
            },
            partition: r.and_then(|r| self.partitions.get(r).cloned()),
            want: e
                .data
                .want_id
                .as_deref()
                .filter(|_| e.kind == Kind::Want)
                .and_then(|id| self.wants.get(id).copied()),
        }
    }

    /// Checks the event and, if it is valid, applies it.
    pub fn apply(&mut self, e: &Event) -> Result<(), Refusal> {
        check(e, &self.current(e))?;
        let br = e.build_request_id.clone();
        match e.kind {
            Kind::BuildRequest => {
                self.build_requests.insert(br.expect("checked"), e.status);
            }
            Kind::JobRun => {
                self.job_runs
                    .insert(e.job_run_id.clone().expect("checked"), e.status);
            }
            Kind::Delegation | Kind::Alias | Kind::Gc | Kind::Environment | Kind::Alert => {}
            Kind::Check => {
                let key = (
                    e.partition_ref.clone().expect("checked"),
                    e.data.check.clone().expect("checked"),
                );
                self.checks
                    .insert(key, (e.status, e.job_run_id.clone().expect("checked")));
            }
            Kind::Arrival if e.status == Status::Late => {
                let r = e.partition_ref.clone().expect("checked");
                if !self.arrivals.contains_key(&r) {
                    self.late.insert(r, e.timestamp);
                }
            }
            Kind::Arrival => {
                let dataset = e.data.dataset.clone().expect("checked");
                let r = e.partition_ref.clone().expect("checked");
                self.late.remove(&r);
                self.arrivals.entry(r).or_insert((dataset, e.timestamp));
            }
            Kind::Want if matches!(e.status, Status::SlaMissed | Status::SlaAtRisk) => {}
            Kind::Want => {
                let id = e.data.want_id.clone().expect("checked");
                if e.status == Status::Requested {
                    self.want_deadlines.insert(id.clone(), e.data.deadline);
                }
                self.wants.insert(id, e.status);
            }
            Kind::Partition => {
                let r = e.partition_ref.clone().expect("checked");
                if let Some(b) = br {
                    self.request_partitions.insert((b, r.clone()), e.status);
                }
                if is_release(e) {
                    match self.before_claim.remove(&r).flatten() {
                        Some(before) => self.partitions.insert(r, before),
                        None => self.partitions.remove(&r),
                    };
                } else if let Some(global) = global_effect(e, self.partitions.get(&r)) {
                    let before = self.partitions.get(&r);
                    if global.0 == Status::Building
                        && before.is_none_or(|(s, _)| *s != Status::Building)
                    {
                        self.before_claim.insert(r.clone(), before.cloned());
                    }
                    self.partitions.insert(r, global);
                }
            }
        }
        Ok(())
    }
}

/// A run that held a partition gives it up without building it: the partition goes back to
/// what it was before the claim (the log keeps that state beside the claim).
pub fn is_release(e: &Event) -> bool {
    e.kind == Kind::Partition && e.status == Status::Cancelled && e.job_run_id.is_some()
}

/// How a (valid) partition event changes the partition's global state, if it does (a release
/// aside: see [`is_release`]).
pub fn global_effect(
    e: &Event,
    before: Option<&(Status, Option<String>)>,
) -> Option<(Status, Option<String>)> {
    match (e.status, e.job_run_id.as_ref()) {
        (Status::Tainted | Status::Removed, _) => {
            Some((e.status, before.and_then(|(_, run)| run.clone())))
        }
        (Status::Sealed | Status::Expired, _) => Some((e.status, None)),
        (Status::Building | Status::Available | Status::Failed, Some(run)) => {
            Some((e.status, Some(run.clone())))
        }
        _ => None,
    }
}

/// What `check-log` found.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct CheckReport {
    pub events: u64,
    pub build_requests: usize,
    pub job_runs: usize,
    pub partitions: usize,
    /// Each impossible transition or projection that disagrees with the replay, in words.
    pub problems: Vec<String>,
}

impl CheckReport {
    pub fn ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Replays the whole log: every event must be a valid next state of its entity, and every
/// projection row must match what the replay derives.
pub fn check_store(store: &dyn crate::store::EventStore) -> crate::store::Result<CheckReport> {
    use crate::store::{EventFilter, SqlLimits};
    const PAGE: usize = 10_000;
    const MAX_PROBLEMS: usize = 100;
    let mut replay = Replay::default();
    let mut report = CheckReport::default();
    let mut since = 0;
    loop {
        let page = store.events(&EventFilter {
            since: Some(since),
            limit: Some(PAGE),
            ..Default::default()
        })?;
        let Some(last) = page.last() else { break };
        since = last.idx;
        for e in &page {
            report.events += 1;
            if let Err(refusal) = replay.apply(e) {
                if report.problems.len() < MAX_PROBLEMS {
                    report.problems.push(format!("event #{}: {refusal}", e.idx));
                }
            }
        }
    }
    // The check's own recounts: no cap but a generous deadline.
    let everything = SqlLimits {
        max_rows: usize::MAX,
        timeout: std::time::Duration::from_secs(3600),
        max_bytes: usize::MAX,
        max_value_len: usize::MAX,
    };
    let rows = |sql: &str| -> crate::store::Result<Vec<Vec<String>>> {
        Ok(store
            .sql(sql, everything)?
            .rows
            .into_iter()
            .map(|r| {
                r.into_iter()
                    .map(|v| match v {
                        serde_json::Value::String(s) => s,
                        serde_json::Value::Null => String::new(),
                        other => other.to_string(),
                    })
                    .collect()
            })
            .collect())
    };
    let mut disagree = |what: String| {
        if report.problems.len() < MAX_PROBLEMS {
            report.problems.push(what);
        }
    };
    let builds = rows("SELECT build_request_id, status FROM build_requests")?;
    for r in &builds {
        let replayed = replay.build_requests.get(&r[0]).map(|s| s.as_str());
        if replayed != Some(r[1].as_str()) {
            disagree(format!(
                "build request {} is `{}` in its projection but `{}` in the events",
                r[0],
                r[1],
                replayed.unwrap_or("absent")
            ));
        }
    }
    // Each count projection against a recount of what it counts, both ways: a count that drifted
    // and a (job, status) the projection lacks.
    for (projection, counted) in [
        ("job_counts", "job_runs"),
        ("partition_counts", "partitions"),
    ] {
        let drifted = rows(&format!(
            "SELECT coalesce(c.job, t.job), coalesce(c.status, t.status), coalesce(c.n, 0), coalesce(t.n, 0)
             FROM {projection} c
             FULL JOIN (SELECT coalesce(job, '') AS job, status, count(*) AS n FROM {counted} GROUP BY 1, 2) t
               ON t.job = c.job AND t.status = c.status
             WHERE coalesce(c.n, 0) <> coalesce(t.n, 0)"
        ))?;
        for r in &drifted {
            disagree(format!(
                "{projection} says {} `{}` of job `{}`, but {counted} holds {}",
                r[2], r[1], r[0], r[3]
            ));
        }
    }
    let wants = rows("SELECT want_id, status FROM wants")?;
    for r in &wants {
        let replayed = replay.wants.get(&r[0]).map(|s| s.as_str());
        if replayed != Some(r[1].as_str()) {
            disagree(format!(
                "want {} is `{}` in its projection but `{}` in the events",
                r[0],
                r[1],
                replayed.unwrap_or("absent")
            ));
        }
    }
    let runs = rows("SELECT job_run_id, status FROM job_runs")?;
    for r in &runs {
        let replayed = replay.job_runs.get(&r[0]).map(|s| s.as_str());
        if replayed != Some(r[1].as_str()) {
            disagree(format!(
                "job run {} is `{}` in its projection but `{}` in the events",
                r[0],
                r[1],
                replayed.unwrap_or("absent")
            ));
        }
    }
    let partitions = rows("SELECT partition_ref, status, job_run_id FROM partitions")?;
    for r in &partitions {
        match replay.partitions.get(&r[0]) {
            Some((status, run))
                if status.as_str() == r[1] && run.as_deref().unwrap_or("") == r[2] => {}
            other => disagree(format!(
                "partition {} is `{}` (run {}) in its projection but {} in the events",
                r[0],
                r[1],
                r[2],
                other.map_or("absent".to_string(), |(s, run)| format!(
                    "`{s}` (run {})",
                    run.as_deref().unwrap_or("-")
                ))
            )),
        }
    }
    let checks =
        rows("SELECT partition_ref, check_name, status, job_run_id FROM partition_checks")?;
    for r in &checks {
        match replay.checks.get(&(r[0].clone(), r[1].clone())) {
            Some((status, run)) if status.as_str() == r[2] && *run == r[3] => {}
            other => disagree(format!(
                "check `{}` of partition {} is `{}` (run {}) in its projection but {} in the events",
                r[1],
                r[0],
                r[2],
                r[3],
                other.map_or("absent".to_string(), |(s, run)| format!("`{s}` (run {run})"))
            )),
        }
    }
    let arrivals = rows("SELECT partition_ref, dataset, arrived_at FROM arrivals")?;
    for r in &arrivals {
        match replay.arrivals.get(&r[0]) {
            Some((dataset, at)) if *dataset == r[1] && at.to_string() == r[2] => {}
            other => {
                disagree(format!(
                "partition {} arrived at {} (dataset {}) in its projection but {} in the events",
                r[0],
                r[2],
                r[1],
                other.map_or("never".to_string(), |(d, at)| format!("at {at} (dataset {d})"))
            ))
            }
        }
    }
    let late = rows("SELECT partition_ref, recorded_at FROM late_partitions")?;
    for r in &late {
        match replay.late.get(&r[0]) {
            Some(at) if at.to_string() == r[1] => {}
            other => disagree(format!(
                "partition {} is late since {} in its projection but {} in the events",
                r[0],
                r[1],
                other.map_or("not late".to_string(), |at| format!("late since {at}"))
            )),
        }
    }
    for r in &rows("SELECT want_id, deadline FROM wants")? {
        let replayed = replay.want_deadlines.get(&r[0]).copied().flatten();
        if replayed.map(|d| d.to_string()).unwrap_or_default() != r[1] {
            disagree(format!(
                "want {} is due by `{}` in its projection but `{}` in the events",
                r[0],
                r[1],
                replayed.map(|d| d.to_string()).unwrap_or_default()
            ));
        }
    }
    let request_partitions =
        rows("SELECT build_request_id, partition_ref, status FROM request_partitions")?;
    for r in &request_partitions {
        let replayed = replay
            .request_partitions
            .get(&(r[0].clone(), r[1].clone()))
            .map(|s| s.as_str());
        if replayed != Some(r[2].as_str()) {
            disagree(format!(
                "partition {} of build request {} is `{}` in its projection but `{}` in the events",
                r[1],
                r[0],
                r[2],
                replayed.unwrap_or("absent")
            ));
        }
    }
    for (what, projected, replayed) in [
        ("build requests", builds.len(), replay.build_requests.len()),
        ("job runs", runs.len(), replay.job_runs.len()),
        ("partitions", partitions.len(), replay.partitions.len()),
        (
            "request partitions",
            request_partitions.len(),
            replay.request_partitions.len(),
        ),
        ("check results", checks.len(), replay.checks.len()),
        ("arrivals", arrivals.len(), replay.arrivals.len()),
        ("late partitions", late.len(), replay.late.len()),
    ] {
        if projected != replayed {
            disagree(format!(
                "{projected} {what} in the projections but {replayed} in the events"
            ));
        }
    }
    report.build_requests = builds.len();
    report.job_runs = runs.len();
    report.partitions = partitions.len();
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::{BUILD_REQUEST, JOB_RUN, REQUEST_PARTITION};
    use crate::testing::arb_event;
    use proptest::prelude::*;

    fn path_is_valid(table: &[(Option<Status>, &[Status])], path: &[Status]) -> bool {
        let mut from = None;
        for &to in path {
            if !table.iter().any(|(f, tos)| *f == from && tos.contains(&to)) {
                return false;
            }
            from = Some(to);
        }
        true
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        /// Whatever arrives, the accepted history of every entity is a path of its state machine,
        /// and no partition is ever claimed by two runs at once.
        #[test]
        fn accepted_histories_are_valid_paths(events in proptest::collection::vec(arb_event(), 0..60)) {
            let mut replay = Replay::default();
            let mut brs: FxHashMap<String, Vec<Status>> = FxHashMap::default();
            let mut runs: FxHashMap<String, Vec<Status>> = FxHashMap::default();
            let mut req: FxHashMap<(String, String), Vec<Status>> = FxHashMap::default();
            for e in &events {
                let holder_before = e.partition_ref.as_ref().and_then(|r| replay.partitions.get(r).cloned());
                if replay.apply(e).is_err() {
                    continue;
                }
                match e.kind {
                    Kind::BuildRequest => brs.entry(e.build_request_id.clone().unwrap()).or_default().push(e.status),
                    Kind::JobRun => runs.entry(e.job_run_id.clone().unwrap()).or_default().push(e.status),
                    Kind::Partition => {
                        if let Some(b) = &e.build_request_id {
                            req.entry((b.clone(), e.partition_ref.clone().unwrap())).or_default().push(e.status);
                        }
                        if e.status == Status::Building && e.job_run_id.is_some() {
                            if let Some((Status::Building, Some(h))) = holder_before {
                                prop_assert_eq!(Some(h), e.job_run_id.clone(), "claimed twice");
                            }
                        }
                    }
                    Kind::Delegation | Kind::Alias | Kind::Want | Kind::Gc | Kind::Check | Kind::Environment | Kind::Arrival | Kind::Alert => {}
                }
            }
            for path in brs.values() { prop_assert!(path_is_valid(BUILD_REQUEST, path), "{:?}", path); }
            for path in runs.values() { prop_assert!(path_is_valid(JOB_RUN, path), "{:?}", path); }
            for path in req.values() { prop_assert!(path_is_valid(REQUEST_PARTITION, path), "{:?}", path); }
        }
    }

    #[test]
    fn a_full_build_replays() {
        let mut r = Replay::default();
        let events = [
            Event::build_request("b", Status::Received),
            Event::build_request("b", Status::Planning),
            Event::partition(Some("b"), "p", Status::Requested),
            Event::build_request("b", Status::AnalysisCompleted),
            Event::job_run("b", "r", "j", Status::Scheduled),
            Event::partition(Some("b"), "p", Status::Scheduled).with_run("r"),
            Event::build_request("b", Status::Executing),
            Event::job_run("b", "r", "j", Status::Running),
            Event::partition(Some("b"), "p", Status::Building).with_run("r"),
            Event::job_run("b", "r", "j", Status::Completed),
            Event::partition(Some("b"), "p", Status::Available).with_run("r"),
            Event::build_request("b", Status::Completed),
            Event::partition(None, "p", Status::Tainted),
        ];
        for e in &events {
            r.apply(e).unwrap();
        }
        assert_eq!(r.partitions["p"], (Status::Tainted, Some("r".to_string())));
    }
}
