//! What an append writes, decided once for both backends: a batch validated event by event
//! against the current states ([`append_batch`]), each event's projection rows ([`project`]),
//! a claim's release, and the moves of the count projections ([`CountChanges`]).

use rustc_hash::{FxHashMap, FxHashSet};

use super::read::REQUESTED_HEAD;
use crate::cache::{cached, PartitionState, StateCache};
use crate::event::{Event, Kind, Status};
use crate::replay::{global_effect, is_release};
use crate::state::{check, Current};
use crate::store::*;

/// The statements of an append, inside the backend's write transaction. The reads give the
/// current state of what an event touches (for validation); the writes are the projection rows
/// [`project`] decides on.
pub(crate) trait AppendTx {
    fn build_request_status(&mut self, id: &str) -> Result<Option<Status>>;
    fn job_run_status(&mut self, id: &str) -> Result<Option<Status>>;
    fn want_status(&mut self, id: &str) -> Result<Option<Status>>;
    fn request_partition_status(&mut self, br: &str, r: &str) -> Result<Option<Status>>;
    /// The partition's row: its status, its run and its job (`''` for none).
    fn partition_state(&mut self, r: &str) -> Result<Option<PartitionState>>;

    /// The `idx` the batch's first event takes; the others follow it one by one.
    fn first_idx(&mut self) -> Result<i64>;
    /// Inserts the batch's events, each with the `idx` it was given.
    fn insert_events(&mut self, events: &[Event]) -> Result<()>;
    /// A build request's `received`.
    fn insert_build_request(&mut self, e: &Event) -> Result<()>;
    fn update_build_request(&mut self, e: &Event) -> Result<()>;
    /// A run's first event.
    fn insert_job_run(&mut self, e: &Event) -> Result<()>;
    /// A run's claim (`queued`, or `running` in logs from before `queued`): what it reads, where
    /// it is driven from, and (`running`) when it started. Returns the job its row holds.
    fn start_job_run(&mut self, e: &Event) -> Result<String>;
    /// A queued run's `running`: its process started at the event's time. Returns the job its
    /// row holds.
    fn run_started(&mut self, e: &Event) -> Result<String>;
    /// A run's end (or skip after scheduling); returns the job its row holds.
    fn end_job_run(&mut self, e: &Event) -> Result<String>;
    /// A run's first event and then its claim, in one batch: the row as after both.
    /// Returns the job its row holds.
    fn insert_started_job_run(&mut self, first: &Event, start: &Event) -> Result<String> {
        self.insert_job_run(first)?;
        self.start_job_run(start)
    }
    fn upsert_request_partition(&mut self, br: &str, e: &Event) -> Result<()>;
    /// The partition's row takes its new global state (`status`, held or last built by `run`),
    /// keeping what a claim replaces in its `prev_*` columns.
    fn upsert_partition(&mut self, e: &Event, status: Status, run: Option<&str>) -> Result<()>;
    /// The claim's `prev_status` (`''` or `NULL`: there was no row before it) and the row's job
    /// (`''` for none).
    fn claimed_partition(&mut self, r: &str) -> Result<(Option<String>, String)>;
    /// The partition's row goes back to what its claim replaced.
    fn restore_partition(&mut self, r: &str) -> Result<()>;
    fn delete_partition(&mut self, r: &str) -> Result<()>;
    fn insert_want(&mut self, e: &Event) -> Result<()>;
    fn count_sla_miss(&mut self, e: &Event) -> Result<()>;
    fn update_want(&mut self, e: &Event) -> Result<()>;
    /// A check's result: the latest of its (partition, check) in `partition_checks`.
    fn upsert_check(&mut self, e: &Event) -> Result<()>;
    /// An arrival's row in `arrivals`, unless its ref has one: the first sighting stands. Its
    /// ref is late no more: its `late_partitions` row goes.
    fn insert_arrival(&mut self, e: &Event) -> Result<()>;
    /// A `late` arrival's row in `late_partitions`, unless its ref has arrived.
    fn mark_late(&mut self, e: &Event) -> Result<()>;

    /// Inserts a batch's `run_metrics` rows (a run's values once: a run ends once).
    fn insert_metrics(&mut self, rows: &[MetricValue]) -> Result<()>;
    /// Adds each change to `job_counts` (`n`, and `last_scheduled_at` raised when given).
    fn add_run_counts(&mut self, changes: &[RunCount<'_>]) -> Result<()>;
    /// Adds each change to `partition_counts`.
    fn add_partition_counts(&mut self, changes: &[PartitionCount<'_>]) -> Result<()>;
}

/// One (job, status) change of `job_counts`.
pub(crate) struct RunCount<'a> {
    pub job: &'a str,
    pub status: Status,
    pub n: i64,
    pub last_scheduled_at: Option<i64>,
}

/// One (job, status) change of `partition_counts` (job `''` for partitions no job built).
pub(crate) struct PartitionCount<'a> {
    pub job: &'a str,
    pub status: Status,
    pub n: i64,
}

/// Validates and appends `events` in order through `tx`, writing their projections and, once at
/// the end, the batch's count changes. The first refused event stops the batch: the caller rolls
/// the transaction back and drops `cache`.
pub(crate) fn append_batch<T: AppendTx>(
    tx: &mut T,
    cache: &mut StateCache,
    events: &mut [Event],
) -> Result<()> {
    let mut batch = Batch {
        rewritten: rewritten(events),
        counts: CountChanges::default(),
        held_inserts: FxHashMap::default(),
        metrics: Vec::new(),
    };
    let first_idx = tx.first_idx()?;
    for position in 0..events.len() {
        let (earlier, rest) = events.split_at_mut(position);
        let e = &mut rest[0];
        let before = current(tx, cache, e)?;
        check(e, &before.current).map_err(|refusal| LogError::Refused {
            position,
            kind: e.kind.to_string(),
            status: e.status.to_string(),
            reason: refusal.0,
            refusal: refusal.1,
        })?;
        e.idx = first_idx + position as i64;
        project(tx, e, position, earlier, &before, &mut batch)?;
        cache.remember(e, &before.current, &before.partition_job);
    }
    // The events go in together once every one is valid: a few statements for the batch, not
    // one per event.
    tx.insert_events(events)?;
    if !batch.metrics.is_empty() {
        tx.insert_metrics(&batch.metrics)?;
    }
    batch.counts.write(tx)
}

/// What [`project`] carries from one event of a batch to the next.
struct Batch {
    rewritten: Rewritten,
    counts: CountChanges,
    /// Runs whose row is inserted with their start, later in the batch: by the start's
    /// position, the position of the run's first event.
    held_inserts: FxHashMap<usize, usize>,
    /// The `run_metrics` rows of the runs the batch ends, written once at its end.
    metrics: Vec<MetricValue>,
}

/// Projection writes of a batch that a later event of the same batch makes redundant, by the
/// event's position. A build claims a run with its `scheduled` and its `running` in one batch: its
/// row is inserted once with both, and its partition's row for the request written once (as
/// PostgreSQL's append does by its own means). Only writes whose every column a later write
/// sets again are left out, so the rows end as they would one event at a time (`store.rs`,
/// `a_batch_projects_as_its_events_one_at_a_time`).
struct Rewritten {
    /// A later write to the same `request_partitions` row names a run: it sets the status and
    /// the time again, and the run (`coalesce(excluded.job_run_id, job_run_id)`).
    request_partition: FxHashSet<usize>,
    /// A run's first event, when the run's next event in the batch is its claim: the
    /// position of that claim.
    run_start: FxHashMap<usize, usize>,
    /// A queued run's `running`, when the run's next event in the batch ends it with the same
    /// `started_at` (a short job's start rides with its completion): that end sets it again.
    start_ended: FxHashSet<usize>,
}

/// Finds a batch's rewritten writes, in one pass from its end. Only events that name a run are
/// kept track of, so a plan's record (a million `requested` partitions) costs no memory here.
fn rewritten(events: &[Event]) -> Rewritten {
    let mut out = Rewritten {
        request_partition: FxHashSet::default(),
        run_start: FxHashMap::default(),
        start_ended: FxHashSet::default(),
    };
    let mut named_later: FxHashSet<(&str, &str)> = FxHashSet::default();
    let mut next_of_run: FxHashMap<&str, usize> = FxHashMap::default();
    for (i, e) in events.iter().enumerate().rev() {
        let Some(run) = e.job_run_id.as_deref() else {
            continue;
        };
        match (
            e.kind,
            e.build_request_id.as_deref(),
            e.partition_ref.as_deref(),
        ) {
            (Kind::Partition, Some(br), Some(r)) => {
                let named_again = !named_later.insert((br, r));
                if named_again {
                    out.request_partition.insert(i);
                }
            }
            (Kind::JobRun, _, _) => {
                let next = next_of_run.insert(run, i);
                let claim =
                    |n: &usize| matches!(events[*n].status, Status::Queued | Status::Running);
                if let (Status::Scheduled, Some(start)) = (e.status, next.filter(claim)) {
                    out.run_start.insert(i, start);
                }
                let ends_started = |n: &usize| {
                    let end = &events[*n];
                    matches!(
                        end.status,
                        Status::Completed | Status::Failed | Status::Cancelled
                    ) && !end.data.not_started
                        && end.data.started_at == Some(e.timestamp)
                };
                if e.status == Status::Running && next.is_some_and(|n| ends_started(&n)) {
                    out.start_ended.insert(i);
                }
            }
            _ => {}
        }
    }
    out
}

/// The states an event touches, and the job its partition's row holds.
pub(crate) struct Before {
    pub current: Current,
    /// `''` when the row holds none, or there is no row.
    pub partition_job: String,
}

/// The entity whose state validating an event reads: its build request, run or want, or its
/// partition (and, when the event names its build request, that request's row for it).
pub(crate) enum StateKeys<'a> {
    BuildRequest(&'a str),
    JobRun(&'a str),
    Want(&'a str),
    Partition(Option<&'a str>, &'a str),
    None,
}

/// What [`append_batch`] reads for `e`, for a backend that reads a batch's states up front.
pub(crate) fn state_keys(e: &Event) -> StateKeys<'_> {
    match (
        e.kind,
        e.build_request_id.as_deref(),
        e.job_run_id.as_deref(),
        e.partition_ref.as_deref(),
    ) {
        (Kind::BuildRequest, Some(br), _, _) => StateKeys::BuildRequest(br),
        (Kind::JobRun, _, Some(run), _) => StateKeys::JobRun(run),
        (Kind::Want, _, _, _) if e.data.want_id.is_some() => {
            StateKeys::Want(e.data.want_id.as_deref().expect("checked"))
        }
        (Kind::Partition, br, _, Some(r)) => StateKeys::Partition(br, r),
        _ => StateKeys::None,
    }
}

/// The build request a claim is made under: its state is read too, since nothing is claimed
/// for an ended one (`state::check`).
pub(crate) fn claim_build_request(e: &Event) -> Option<&str> {
    e.build_request_id
        .as_deref()
        .filter(|_| crate::state::is_claim(e))
}

/// The states an event touches, from the cache or read inside the writing transaction.
fn current<T: AppendTx>(tx: &mut T, cache: &mut StateCache, e: &Event) -> Result<Before> {
    let mut c = Current::default();
    let mut partition_job = String::new();
    match state_keys(e) {
        StateKeys::BuildRequest(br) => {
            c.build_request = cached(&mut cache.build_requests, br.to_string(), || {
                tx.build_request_status(br)
            })?;
        }
        StateKeys::JobRun(run) => {
            c.job_run = cached(&mut cache.job_runs, run.to_string(), || {
                tx.job_run_status(run)
            })?;
        }
        StateKeys::Want(id) => {
            c.want = cached(&mut cache.wants, id.to_string(), || tx.want_status(id))?;
        }
        StateKeys::Partition(br, r) => {
            if let Some(br) = br {
                let key = (br.to_string(), r.to_string());
                c.request_partition = cached(&mut cache.request_partitions, key, || {
                    tx.request_partition_status(br, r)
                })?;
            }
            if let Some(p) = cached(&mut cache.partitions, r.to_string(), || {
                tx.partition_state(r)
            })? {
                c.partition = Some((p.status, p.run));
                partition_job = p.job;
            }
        }
        StateKeys::None => {}
    }
    // A claim needs its build request alive (`state::check`).
    if let Some(br) = claim_build_request(e) {
        c.build_request = cached(&mut cache.build_requests, br.to_string(), || {
            tx.build_request_status(br)
        })?;
    }
    Ok(Before {
        current: c,
        partition_job,
    })
}

/// Writes the projections of one (already validated) event, and adds what it changes in the
/// count projections to `counts`.
fn project<T: AppendTx>(
    tx: &mut T,
    e: &Event,
    position: usize,
    earlier: &[Event],
    before: &Before,
    batch: &mut Batch,
) -> Result<()> {
    let counts = &mut batch.counts;
    match e.kind {
        Kind::BuildRequest if e.status == Status::Received => tx.insert_build_request(e),
        // A part of the plan changes nothing of the request's row, which can be large (its
        // requested refs): not rewritten once per part.
        Kind::BuildRequest if !e.data.plan.is_empty() => Ok(()),
        Kind::BuildRequest => tx.update_build_request(e),
        Kind::JobRun if before.current.job_run.is_none() => {
            match batch.rewritten.run_start.get(&position) {
                Some(&start) => {
                    batch.held_inserts.insert(start, position);
                }
                None => tx.insert_job_run(e)?,
            }
            // `job` is required: the insert refuses an event without one.
            counts.run(
                e.job.as_deref().unwrap_or_default(),
                e.status,
                1,
                Some(e.timestamp),
            );
            Ok(())
        }
        Kind::JobRun => {
            // The updates return the row's job, for its counts.
            let claim = matches!(e.status, Status::Queued | Status::Running)
                && before.current.job_run == Some(Status::Scheduled);
            let job = match (claim, batch.held_inserts.remove(&position)) {
                (true, Some(first)) => tx.insert_started_job_run(&earlier[first], e)?,
                (true, None) => tx.start_job_run(e)?,
                // (`job` is required of a run's events.)
                (false, _) if batch.rewritten.start_ended.contains(&position) => {
                    e.job.clone().unwrap_or_default()
                }
                (false, _) if e.status == Status::Running => tx.run_started(e)?,
                (false, _) => tx.end_job_run(e)?,
            };
            if let Some(old) = before.current.job_run.filter(|old| *old != e.status) {
                counts.run(&job, old, -1, None);
                counts.run(&job, e.status, 1, None);
            }
            if matches!(e.status, Status::Completed | Status::Failed) {
                metric_rows(e, &job, &mut batch.metrics);
            }
            Ok(())
        }
        Kind::Partition => {
            if let Some(br) = &e.build_request_id {
                if !batch.rewritten.request_partition.contains(&position) {
                    tx.upsert_request_partition(br, e)?;
                }
            }
            let r = e.partition_ref.as_deref().expect("validated");
            if is_release(e) {
                release(tx, r, counts)
            } else if let Some((global, run)) = global_effect(e, before.current.partition.as_ref())
            {
                // The row's job before and after the upsert (`coalesce(excluded.job, job)`).
                if let Some((old, _)) = &before.current.partition {
                    counts.partition(&before.partition_job, *old, -1);
                }
                counts.partition(e.job.as_deref().unwrap_or(&before.partition_job), global, 1);
                tx.upsert_partition(e, global, run.as_deref())
            } else {
                Ok(())
            }
        }
        Kind::Want if e.status == Status::Requested => tx.insert_want(e),
        Kind::Want if e.status == Status::SlaMissed => tx.count_sla_miss(e),
        // A note of a forecast: the want's row keeps its state.
        Kind::Want if e.status == Status::SlaAtRisk => Ok(()),
        Kind::Want => tx.update_want(e),
        Kind::Check => tx.upsert_check(e),
        Kind::Arrival if e.status == Status::Late => tx.mark_late(e),
        Kind::Arrival => tx.insert_arrival(e),
        Kind::Delegation | Kind::Alias | Kind::Gc | Kind::Environment | Kind::Alert => Ok(()),
    }
}

/// The `run_metrics` rows of a run's end: its measures (`resources`) for each output it names
/// (under `''` when it names none), then what its job reported (`metrics`, by ref; anything
/// but a number was refused before it was recorded, and is passed over here).
pub(crate) fn metric_rows(e: &Event, job: &str, rows: &mut Vec<MetricValue>) {
    let run = e.job_run_id.as_deref().unwrap_or_default();
    let mut row = |r: &str, name: &str, value: f64| {
        rows.push(MetricValue {
            job: job.to_string(),
            name: name.to_string(),
            partition_ref: r.to_string(),
            job_run_id: run.to_string(),
            value,
            recorded_at: e.timestamp,
        })
    };
    if let Some(resources) = &e.data.resources {
        let unnamed = [String::new()];
        let refs = match e.data.outputs.as_slice() {
            [] => &unnamed[..],
            outputs => outputs,
        };
        for r in refs {
            for (name, value) in resources.values() {
                row(r, name, value as f64);
            }
        }
    }
    let Some(serde_json::Value::Object(by_ref)) = &e.data.metrics else {
        return;
    };
    for (r, named) in by_ref {
        let serde_json::Value::Object(named) = named else {
            continue;
        };
        for (name, value) in named {
            if let Some(value) = value.as_f64() {
                row(r, name, value);
            }
        }
    }
}

/// A run gives up its claim without building: the partition's row goes back to what the claim
/// replaced, or away if the partition had none (`prev_status` `''`, or `NULL` for a claim made
/// before the `prev_*` columns existed).
fn release<T: AppendTx>(tx: &mut T, r: &str, counts: &mut CountChanges) -> Result<()> {
    let (prev, job) = tx.claimed_partition(r)?;
    counts.partition(&job, Status::Building, -1);
    match prev.as_deref().and_then(Status::parse) {
        Some(restored) => {
            counts.partition(&job, restored, 1);
            tx.restore_partition(r)
        }
        None => tx.delete_partition(r),
    }
}

/// What a batch changes in the count projections, written once when the batch ends: a claim moves
/// a run and a partition between statuses, and a batch of whole runs mostly cancels out.
#[derive(Default)]
struct CountChanges {
    /// Per (job, status): the change in runs, and the latest `scheduled_at` among runs counted in.
    runs: FxHashMap<(String, Status), (i64, Option<i64>)>,
    /// Per (job, or `''` for none; status): the change in partitions.
    partitions: FxHashMap<(String, Status), i64>,
}

impl CountChanges {
    fn run(&mut self, job: &str, status: Status, by: i64, scheduled_at: Option<i64>) {
        let (n, last) = self.runs.entry((job.to_string(), status)).or_default();
        *n += by;
        *last = (*last).max(scheduled_at);
    }

    fn partition(&mut self, job: &str, status: Status, by: i64) {
        *self
            .partitions
            .entry((job.to_string(), status))
            .or_default() += by;
    }

    /// Writes the changes that change something: a zero change with a `scheduled_at` still
    /// raises `last_scheduled_at` (a run scheduled and finished in one batch).
    fn write<T: AppendTx>(&self, tx: &mut T) -> Result<()> {
        let runs: Vec<RunCount<'_>> = self
            .runs
            .iter()
            .filter(|(_, (n, last))| *n != 0 || last.is_some())
            .map(|((job, status), (n, last))| RunCount {
                job,
                status: *status,
                n: *n,
                last_scheduled_at: *last,
            })
            .collect();
        if !runs.is_empty() {
            tx.add_run_counts(&runs)?;
        }
        let partitions: Vec<PartitionCount<'_>> = self
            .partitions
            .iter()
            .filter(|(_, n)| **n != 0)
            .map(|((job, status), n)| PartitionCount {
                job,
                status: *status,
                n: *n,
            })
            .collect();
        if !partitions.is_empty() {
            tx.add_partition_counts(&partitions)?;
        }
        Ok(())
    }
}

/// When a claim's run started: at the claim of a log from before `queued` (`running`), not yet
/// at a `queued` one.
pub(crate) fn started_at(claim: &Event) -> Option<i64> {
    (claim.status == Status::Running).then_some(claim.timestamp)
}

/// Serializes a projection's list or map column.
pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("serializes")
}

/// The requested refs as the projection keeps them: those recorded, how many were asked for,
/// and the first few.
pub(crate) fn requested_columns(data: &crate::event::EventData) -> (String, i64, String) {
    let refs = &data.requested;
    let head = &refs[..refs.len().min(REQUESTED_HEAD)];
    let count = data.requested_count.unwrap_or(refs.len() as u64);
    (to_json(&refs), count as i64, to_json(&head))
}

/// A check event's columns in `partition_checks`, as its upsert takes them.
pub(crate) fn check_command(e: &Event) -> Option<String> {
    (!e.data.inline).then(|| to_json(&e.data.check_command))
}

pub(crate) fn check_metrics(e: &Event) -> Option<String> {
    e.data.metrics.as_ref().map(to_json)
}
