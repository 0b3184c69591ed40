//! What the two stores share: validating a batch, deriving its projection writes (the count
//! projections included), and reading rows back. Each backend supplies only its SQL and its
//! connection: the statements of an append behind [`AppendTx`], the typed getters of its rows
//! behind [`Columns`].
//!
//! Deciding *what* an event writes lives here once, so the SQLite and PostgreSQL logs cannot
//! drift apart: which projection row an event inserts or updates, how a claim's release restores
//! the row it replaced, and how `job_counts` and `partition_counts` move. Both backends keep the
//! counts the same way, from Rust, in the events' transaction ([`CountChanges`]): SQLite dropped
//! its count triggers in schema version 3 (a trigger makes SQLite journal every statement on its
//! table), PostgreSQL in version 4, so that one piece of code decides every count.

use std::collections::BTreeMap;

use rustc_hash::{FxHashMap, FxHashSet};

use crate::cache::{cached, PartitionState, StateCache};
use crate::event::{Event, EventData, Kind, Status};
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
    /// A run's `running`; returns the job its row holds.
    fn start_job_run(&mut self, e: &Event) -> Result<String>;
    /// A run's end (or skip after scheduling); returns the job its row holds.
    fn end_job_run(&mut self, e: &Event) -> Result<String>;
    /// A run's first event and then its `running`, in one batch: the row as after both.
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
    batch.counts.write(tx)
}

/// What [`project`] carries from one event of a batch to the next.
struct Batch {
    rewritten: Rewritten,
    counts: CountChanges,
    /// Runs whose row is inserted with their start, later in the batch: by the start's
    /// position, the position of the run's first event.
    held_inserts: FxHashMap<usize, usize>,
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
    /// A run's first event, when the run's next event in the batch is its `running`: the
    /// position of that start.
    run_start: FxHashMap<usize, usize>,
}

/// Finds a batch's rewritten writes, in one pass from its end. Only events that name a run are
/// kept track of, so a plan's record (a million `requested` partitions) costs no memory here.
fn rewritten(events: &[Event]) -> Rewritten {
    let mut out = Rewritten {
        request_partition: FxHashSet::default(),
        run_start: FxHashMap::default(),
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
                if let Some(start) = next.filter(|&n| events[n].status == Status::Running) {
                    out.run_start.insert(i, start);
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
            let job = match (e.status, batch.held_inserts.remove(&position)) {
                (Status::Running, Some(first)) => tx.insert_started_job_run(&earlier[first], e)?,
                (Status::Running, None) => tx.start_job_run(e)?,
                _ => tx.end_job_run(e)?,
            };
            if let Some(old) = before.current.job_run.filter(|old| *old != e.status) {
                counts.run(&job, old, -1, None);
                counts.run(&job, e.status, 1, None);
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
        Kind::Want => tx.update_want(e),
        Kind::Check => tx.upsert_check(e),
        Kind::Delegation | Kind::Alias | Kind::Gc => Ok(()),
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

/// Serializes a projection's list or map column.
pub(crate) fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("serializes")
}

/// A list column; a missing or unreadable one is empty.
fn json_list(s: Option<String>) -> Vec<String> {
    s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// A map column as pairs sorted by key; a missing or unreadable one is empty. Straight into a
/// list: no map is built on the way.
fn json_pairs(s: Option<String>) -> Vec<(String, String)> {
    struct Pairs(Vec<(String, String)>);
    impl<'de> serde::Deserialize<'de> for Pairs {
        fn deserialize<D: serde::Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
            struct Visit;
            impl<'de> serde::de::Visitor<'de> for Visit {
                type Value = Pairs;
                fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                    f.write_str("a map of strings")
                }
                fn visit_map<A: serde::de::MapAccess<'de>>(
                    self,
                    mut map: A,
                ) -> std::result::Result<Pairs, A::Error> {
                    let mut pairs = Vec::with_capacity(map.size_hint().unwrap_or(0));
                    while let Some(pair) = map.next_entry()? {
                        pairs.push(pair);
                    }
                    Ok(Pairs(pairs))
                }
            }
            d.deserialize_map(Visit)
        }
    }
    let mut pairs = s
        .and_then(|s| serde_json::from_str::<Pairs>(&s).ok())
        .map_or_else(Vec::new, |p| p.0);
    // Written from sorted maps, so already in order: checked, not assumed.
    if !pairs.is_sorted_by(|a, b| a.0 < b.0) {
        pairs = pairs
            .into_iter()
            .collect::<BTreeMap<_, _>>()
            .into_iter()
            .collect();
    }
    pairs
}

/// A map column; a missing or unreadable one is empty.
fn json_map<T: serde::de::DeserializeOwned + Default>(s: Option<String>) -> T {
    s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

/// A status stored in the log.
pub(crate) fn status_of(s: &str) -> Result<Status> {
    Status::parse(s).ok_or_else(|| LogError::Storage(format!("unknown status `{s}` in the log")))
}

/// A `WHERE` clause of the filters actually given, with their values in order. Conditions on
/// absent parameters (`?1 IS NULL OR ...`) would keep either database from the indexes behind
/// them. `sigil` starts a numbered parameter: `?` on SQLite, `$` on PostgreSQL.
pub(crate) struct Filters<V> {
    pub clause: String,
    pub values: Vec<V>,
    sigil: char,
}

impl<V> Filters<V> {
    pub fn new(sigil: char) -> Self {
        Filters {
            clause: String::new(),
            values: Vec::new(),
            sigil,
        }
    }

    pub fn raw(&mut self, condition: &str) {
        let joiner = if self.clause.is_empty() {
            " WHERE "
        } else {
            " AND "
        };
        self.clause.push_str(joiner);
        self.clause.push_str(condition);
    }

    pub fn add(&mut self, column_op: &str, value: V) {
        self.values.push(value);
        let condition = format!("{column_op} {}{}", self.sigil, self.values.len());
        self.raw(&condition);
    }
}

/// A query's SQL and its parameters, made by the builders below for either backend: `text` and
/// `int` turn values into the backend's parameters.
pub(crate) struct Query<V> {
    pub sql: String,
    pub values: Vec<V>,
}

/// The events of `f`, in log order.
pub(crate) fn events_query<V>(
    f: &EventFilter,
    sigil: char,
    text: impl Fn(String) -> V,
    int: impl Fn(i64) -> V,
) -> Query<V> {
    let mut filters = Filters::new(sigil);
    filters.add("idx >", int(f.since.unwrap_or(0)));
    for (column_op, value) in [
        ("build_request_id =", &f.build_request_id),
        ("partition_ref =", &f.partition_ref),
        ("job =", &f.job),
        ("job_run_id =", &f.job_run_id),
    ] {
        if let Some(v) = value {
            filters.add(column_op, text(v.clone()));
        }
    }
    if let Some(k) = f.kind {
        // A literal (kinds are fixed names), so partial indexes on rare kinds serve it.
        filters.raw(&format!("kind = '{}'", k.as_str()));
    }
    if let Some(st) = f.status {
        filters.raw(&format!("status = '{}'", st.as_str()));
    }
    if let Some(v) = f.from {
        filters.add("timestamp >=", int(v));
    }
    if let Some(v) = f.to {
        filters.add("timestamp <", int(v));
    }
    let limit = f.limit.map(|l| format!(" LIMIT {l}")).unwrap_or_default();
    Query {
        sql: format!(
            "SELECT {EVENT_COLUMNS} FROM events{} ORDER BY idx{limit}",
            filters.clause
        ),
        values: filters.values,
    }
}

/// Wants, newest first.
pub(crate) fn wants_query<V>(
    status: Option<Status>,
    active: bool,
    limit: usize,
    sigil: char,
    text: impl Fn(String) -> V,
) -> Query<V> {
    let mut filters = Filters::new(sigil);
    if let Some(s) = status {
        filters.add("status =", text(s.as_str().to_string()));
    }
    if active {
        filters.raw("status NOT IN ('expired', 'cancelled')");
    }
    Query {
        sql: format!(
            "SELECT {WANT_COLUMNS} FROM wants{} ORDER BY created_at DESC, want_id LIMIT {limit}",
            filters.clause
        ),
        values: filters.values,
    }
}

/// Job runs, the latest scheduled first.
pub(crate) fn runs_query<V>(q: &RunQuery, sigil: char, text: impl Fn(String) -> V) -> Query<V> {
    let mut filters = Filters::new(sigil);
    if let Some(j) = &q.job {
        filters.add("job =", text(j.clone()));
    }
    if let Some(b) = &q.build_request_id {
        filters.add("build_request_id =", text(b.clone()));
    }
    if q.unfinished {
        filters.raw("status IN ('scheduled', 'running')");
    }
    let columns = if q.brief {
        brief_run_columns()
    } else {
        RUN_COLUMNS.to_string()
    };
    Query {
        sql: format!(
            "SELECT {columns} FROM job_runs{} ORDER BY scheduled_at DESC, job_run_id LIMIT {}",
            filters.clause, q.limit
        ),
        values: filters.values,
    }
}

/// Per job: its runs by status, and its latest `scheduled_at`.
pub(crate) type JobCounts = BTreeMap<String, (BTreeMap<Status, u64>, Option<i64>)>;

/// Per job: its run counts by status (non-zero ones) and its latest `scheduled_at`, from
/// `job_counts` rows (job, status, n, last_scheduled_at).
pub(crate) fn job_counts_by_job(
    rows: impl IntoIterator<Item = (String, Status, i64, Option<i64>)>,
) -> JobCounts {
    let mut per_job = JobCounts::new();
    for (job, status, n, last) in rows {
        let entry = per_job.entry(job).or_default();
        if n > 0 {
            entry.0.insert(status, n as u64);
        }
        entry.1 = entry.1.max(last);
    }
    per_job
}

/// The typed getters of one backend's result rows, by column position, for the row mappers
/// below. `Error` is the backend's own, so that the mappers fit its row callbacks.
pub(crate) trait Columns {
    type Error;
    fn text(&self, i: usize) -> std::result::Result<String, Self::Error>;
    fn opt_text(&self, i: usize) -> std::result::Result<Option<String>, Self::Error>;
    fn int(&self, i: usize) -> std::result::Result<i64, Self::Error>;
    fn opt_int(&self, i: usize) -> std::result::Result<Option<i64>, Self::Error>;
    fn flag(&self, i: usize) -> std::result::Result<bool, Self::Error>;
    /// A value the column holds but the log never writes.
    fn corrupt(&self, i: usize, what: String) -> Self::Error;
}

type RowResult<T, R> = std::result::Result<T, <R as Columns>::Error>;

fn status_at<R: Columns>(row: &R, i: usize) -> RowResult<Status, R> {
    let s = row.text(i)?;
    Status::parse(&s).ok_or_else(|| row.corrupt(i, format!("unknown status `{s}`")))
}

fn opt_int_as<R: Columns, T: TryFrom<i64>>(row: &R, i: usize) -> RowResult<Option<T>, R> {
    row.opt_int(i)?
        .map(|v| {
            T::try_from(v).map_err(|_| row.corrupt(i, format!("{v} is out of the column's range")))
        })
        .transpose()
}

pub(crate) const EVENT_COLUMNS: &str =
    "idx, event_id, timestamp, build_request_id, kind, status, partition_ref,
                             job, job_run_id, delegated_to, message, data";

pub(crate) fn event_from_row<R: Columns>(row: &R) -> RowResult<Event, R> {
    let kind = row.text(4)?;
    Ok(Event {
        idx: row.int(0)?,
        event_id: row.text(1)?,
        timestamp: row.int(2)?,
        build_request_id: row.opt_text(3)?,
        kind: Kind::parse(&kind).ok_or_else(|| row.corrupt(4, format!("unknown kind `{kind}`")))?,
        status: status_at(row, 5)?,
        partition_ref: row.opt_text(6)?,
        job: row.opt_text(7)?,
        job_run_id: row.opt_text(8)?,
        delegated_to: row.opt_text(9)?,
        message: row.opt_text(10)?,
        data: json_map::<EventData>(row.opt_text(11)?),
    })
}

pub(crate) const PARTITION_COLUMNS: &str =
    "partition_ref, status, job_run_id, build_request_id, job, data_version, message, updated_at";

pub(crate) fn partition_from_row<R: Columns>(row: &R) -> RowResult<PartitionRow, R> {
    Ok(PartitionRow {
        partition_ref: row.text(0)?,
        status: status_at(row, 1)?,
        job_run_id: row.opt_text(2)?,
        build_request_id: row.opt_text(3)?,
        job: row.opt_text(4)?,
        data_version: row.opt_text(5)?,
        message: row.opt_text(6)?,
        updated_at: row.int(7)?,
    })
}

pub(crate) const BUILD_COLUMNS: &str =
    "build_request_id, status, requested, analyze_only, message, \
     created_at, updated_at, owner, requested_count";

/// A listing's columns: the first few requested refs instead of all of them.
pub(crate) const LISTED_BUILD_COLUMNS: &str = "build_request_id, status, requested_head, \
     analyze_only, message, created_at, updated_at, owner, requested_count";

/// How many requested refs a listing shows of each build request ([`BuildRequestRow`]).
pub const REQUESTED_HEAD: usize = 10;

/// The requested refs as the projection keeps them: all, their count, and the first few.
pub(crate) fn requested_columns(refs: &[String]) -> (String, i64, String) {
    let head = &refs[..refs.len().min(REQUESTED_HEAD)];
    (to_json(&refs), refs.len() as i64, to_json(&head))
}

pub(crate) fn build_from_row<R: Columns>(row: &R) -> RowResult<BuildRequestRow, R> {
    Ok(BuildRequestRow {
        build_request_id: row.text(0)?,
        status: status_at(row, 1)?,
        requested_partitions: json_list(row.opt_text(2)?),
        analyze_only: row.flag(3)?,
        message: row.opt_text(4)?,
        created_at: row.int(5)?,
        updated_at: row.int(6)?,
        owner: row.opt_text(7)?,
        requested_count: row.int(8)? as u64,
    })
}

pub(crate) const REQUEST_PARTITION_COLUMNS: &str = "partition_ref, status, job_run_id";

pub(crate) fn request_partition_from_row<R: Columns>(row: &R) -> RowResult<RequestPartitionRow, R> {
    Ok(RequestPartitionRow {
        partition_ref: row.text(0)?,
        status: status_at(row, 1)?,
        job_run_id: row.opt_text(2)?,
    })
}

pub(crate) const RUN_COLUMNS: &str =
    "job_run_id, job, build_request_id, status, outputs, inputs, args, env,
                           scheduled_at, started_at, ended_at, exit_code, message, relies_on, pid, host,
                           owner, job_version, input_versions, log_path, input_runs";

/// [`RUN_COLUMNS`] with what a run read and ran with (inputs, args, env, input versions and
/// runs) read as NULL, in place: each JSON parsed into lists and maps, those are most of a run
/// row's memory.
fn brief_run_columns() -> String {
    const LEFT_OUT: [&str; 5] = ["inputs", "args", "env", "input_versions", "input_runs"];
    RUN_COLUMNS
        .split(',')
        .map(|c| match LEFT_OUT.contains(&c.trim()) {
            true => "CAST(NULL AS TEXT)",
            false => c.trim(),
        })
        .collect::<Vec<_>>()
        .join(", ")
}

pub(crate) fn run_from_row<R: Columns>(row: &R) -> RowResult<JobRunRow, R> {
    Ok(JobRunRow {
        job_run_id: row.text(0)?,
        job: row.text(1)?,
        build_request_id: row.opt_text(2)?,
        status: status_at(row, 3)?,
        outputs: json_list(row.opt_text(4)?),
        inputs: json_list(row.opt_text(5)?),
        args: json_list(row.opt_text(6)?),
        env: json_map(row.opt_text(7)?),
        scheduled_at: row.opt_int(8)?,
        started_at: row.opt_int(9)?,
        ended_at: row.opt_int(10)?,
        exit_code: opt_int_as(row, 11)?,
        message: row.opt_text(12)?,
        relies_on: row.opt_text(13)?,
        pid: opt_int_as(row, 14)?,
        host: row.opt_text(15)?,
        owner: row.opt_text(16)?,
        job_version: row.opt_text(17)?,
        input_versions: json_map(row.opt_text(18)?),
        log_path: row.opt_text(19)?,
        input_runs: json_map(row.opt_text(20)?),
    })
}

pub(crate) const RECIPE_COLUMNS: &str =
    "job_run_id, job, job_version, inputs, input_versions, args, env";

pub(crate) fn recipe_from_row<R: Columns>(row: &R) -> RowResult<RunRecipe, R> {
    Ok(RunRecipe {
        job_run_id: row.text(0)?,
        job: row.text(1)?,
        job_version: row.opt_text(2)?,
        inputs: json_list(row.opt_text(3)?).into(),
        input_versions: json_pairs(row.opt_text(4)?).into(),
        args: json_list(row.opt_text(5)?).into(),
        env: json_pairs(row.opt_text(6)?).into(),
    })
}

/// [`crate::EventStore::readers`]: `?1` the input, `?2` its run, `?3` its data version, `?4`
/// the limit; `?5` true for [`crate::ReadersOf::Data`] (any reader at the version), false for
/// [`crate::ReadersOf::Instance`] (by version only the readers that recorded no run).
pub(crate) const READERS: &str = "SELECT DISTINCT job_run_id FROM run_inputs
 WHERE input_ref = ?1
   AND (input_run_id = ?2
        OR (CAST(?3 AS TEXT) IS NOT NULL AND data_version = ?3
            AND (CAST(?5 AS BOOLEAN) OR input_run_id IS NULL)))
 LIMIT ?4";

pub(crate) const CHECK_COLUMNS: &str =
    "partition_ref, check_name, status, blocking, job_run_id, job, build_request_id,
     check_version, command, inline, message, metrics, updated_at";

pub(crate) fn check_from_row<R: Columns>(row: &R) -> RowResult<CheckRow, R> {
    Ok(CheckRow {
        partition_ref: row.text(0)?,
        check_name: row.text(1)?,
        status: status_at(row, 2)?,
        blocking: row.flag(3)?,
        job_run_id: row.text(4)?,
        job: row.opt_text(5)?,
        build_request_id: row.opt_text(6)?,
        check_version: row.opt_text(7)?,
        command: json_list(row.opt_text(8)?),
        inline: row.flag(9)?,
        message: row.opt_text(10)?,
        metrics: row
            .opt_text(11)?
            .and_then(|m| serde_json::from_str(&m).ok()),
        updated_at: row.int(12)?,
    })
}

/// [`crate::EventStore::check_counts`]: (job, check, blocking, passed, failed).
pub(crate) const CHECK_COUNTS: &str =
    "SELECT coalesce(job, ''), check_name, max(CAST(blocking AS INTEGER)),
        sum(CASE WHEN status = 'completed' THEN 1 ELSE 0 END),
        sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END)
   FROM partition_checks GROUP BY 1, 2 ORDER BY 1, 2";

/// A check event's columns in `partition_checks`, as its upsert takes them.
pub(crate) fn check_command(e: &Event) -> Option<String> {
    (!e.data.inline).then(|| to_json(&e.data.check_command))
}

pub(crate) fn check_metrics(e: &Event) -> Option<String> {
    e.data.metrics.as_ref().map(to_json)
}

pub(crate) const WANT_COLUMNS: &str =
    "want_id, status, refs, created_at, expires_at, sla_seconds, recurring,
                            waiting_for, message, build_request_id, sla_missed, updated_at";

pub(crate) fn want_from_row<R: Columns>(row: &R) -> RowResult<WantRow, R> {
    Ok(WantRow {
        want_id: row.text(0)?,
        status: status_at(row, 1)?,
        refs: json_list(row.opt_text(2)?),
        created_at: row.int(3)?,
        expires_at: row.opt_int(4)?,
        sla_seconds: opt_int_as(row, 5)?,
        recurring: row.opt_text(6)?,
        waiting_for: row.opt_text(7)?,
        message: row.opt_text(8)?,
        build_request_id: row.opt_text(9)?,
        sla_missed: opt_int_as(row, 10)?.unwrap_or(0),
        updated_at: row.int(11)?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(json: &str) -> Vec<(String, String)> {
        json_pairs(Some(json.to_string()))
    }

    #[test]
    fn a_map_column_reads_as_pairs_sorted_by_key() {
        assert_eq!(
            pairs(r#"{"a":"1","b":"2"}"#),
            [("a".into(), "1".into()), ("b".into(), "2".into())]
        );
        // Out of order, or a key twice (the last value stands, as in a map).
        assert_eq!(
            pairs(r#"{"b":"2","a":"1","b":"3"}"#),
            [("a".into(), "1".into()), ("b".into(), "3".into())]
        );
        assert_eq!(pairs("{}"), []);
        assert_eq!(pairs("not json"), []);
        assert_eq!(pairs(r#"["a","b"]"#), []);
        assert_eq!(json_pairs(None), []);
    }
}
