//! The PostgreSQL append: a batch in two round trips.
//!
//! The first takes the append lock and reads, in one query, the state of every entity the batch
//! touches ([`prefetch`]); the batch is then validated in memory, in order, by the shared
//! [`append_batch`] (inside the same transaction, which still holds the lock: nobody can change
//! those states in between); its writes are kept ([`PgAppend`]) and go out in the second round
//! trip as set-based statements, one per kind of write and layer (below), pipelined with the
//! `COMMIT`.
//!
//! A kind of write becomes one statement over `unnest` of its rows' columns, the same per-row SQL
//! as a statement per event would run. A statement may touch a row only once, and a row's writes
//! must keep their order: the n-th write of a batch to one row (one partition, one run...) goes in
//! layer n, and the layers run in order. A batch of whole builds has a few layers (a partition is
//! requested, scheduled, building, then available); a build's claims have one or two. A run
//! inserted and started in one batch (a claim) is one row write (its [`RunRow::start`]): an
//! update of `job_runs` rewrites all its indexes, so the start is folded into the insert.
//!
//! [`append`] makes the attempts, each on a connection of its own should the last one be lost.

use futures_util::future::try_join_all;
use rustc_hash::{FxHashMap, FxHashSet};
use tokio_postgres::types::ToSql;
use tokio_postgres::{Client, NoTls, Row, Statement};

use crate::cache::{PartitionState, StateCache};
use crate::event::{Event, Status};
use crate::projection::*;
use crate::store::*;

use super::{describe, storage, PostgresStore, Retries, Writer, APPEND_LOCK};

/// [`EventStore::append`]: attempts ([`PostgresStore::try_append`]) across lost connections,
/// for up to [`RETRY_FOR`](super::RETRY_FOR).
pub(super) fn append(store: &PostgresStore, mut events: Vec<Event>) -> Result<Vec<Event>> {
    if events.is_empty() {
        return Ok(events);
    }
    let mut guard = store.writer.lock().expect("writer lock");
    let Writer { runtime, conn } = &mut *guard;
    let mut retries = Retries::new();
    // A `COMMIT` was sent but its answer lost: the batch may be in the log already.
    let mut unsure = false;
    loop {
        let lost = match store.try_append(runtime, conn, &mut events, unsure) {
            Ok(()) => return Ok(events),
            Err(Failure::Failed(e)) => return Err(store.located(e, &retries)),
            Err(Failure::Lost { error, sent }) => {
                unsure |= sent;
                error
            }
        };
        *conn = None;
        if !retries.pause() {
            let written = if unsure {
                "; whether the batch was written is not known"
            } else {
                "; the batch was not written"
            };
            return Err(store.unavailable(&retries, format!("{}{written}", describe(&lost))));
        }
    }
}

impl PostgresStore {
    /// One attempt at appending `events`: connects if need be, then [`begin`] and
    /// [`write()`]. `unsure`: an earlier attempt's `COMMIT` went unanswered, so the batch is
    /// looked for first, and returned as the log holds it if it is there.
    fn try_append(
        &self,
        runtime: &tokio::runtime::Runtime,
        conn: &mut Option<Conn>,
        events: &mut [Event],
        unsure: bool,
    ) -> Attempt<()> {
        if conn.is_none() {
            let (client, connection) = runtime
                .block_on(self.writer_config.connect(NoTls))
                .map_err(|e| Failure::of(e, false))?;
            runtime.spawn(connection);
            *conn = Some(Conn::new(client));
        }
        let c = conn.as_mut().expect("connected");
        let outcome = (|| {
            let started = runtime.block_on(begin(c, events, unsure))?;
            if let Some(first) = started.committed {
                runtime.block_on(read_back(c, events, first))?;
                // Nothing to write: the transaction only read.
                return runtime
                    .block_on(c.client.batch_execute("ROLLBACK"))
                    .map_err(|e| Failure::of(e, false));
            }
            write(runtime, c, started, events)
        })();
        let keep = match &outcome {
            Ok(()) => !c.client.is_closed(),
            // The server rolled the transaction back with the connection.
            Err(Failure::Lost { .. }) => false,
            // A transaction still open (refused, say) ends here; a connection that cannot end
            // it goes with it.
            Err(Failure::Failed(_)) => runtime.block_on(c.client.batch_execute("ROLLBACK")).is_ok(),
        };
        if !keep {
            *conn = None;
        }
        outcome
    }

    /// `e` with this log's location and the time the append waited, where it names them.
    fn located(&self, e: LogError, retries: &Retries) -> LogError {
        match e {
            LogError::Locked { detail, .. } => LogError::Locked {
                location: crate::redact(&self.url),
                waited_ms: retries.waited_ms(),
                detail,
            },
            e => e,
        }
    }
}

/// A connection of the writer, with its statements, each prepared once.
pub(super) struct Conn {
    pub client: Client,
    statements: FxHashMap<&'static str, Statement>,
}

type Param = Box<dyn ToSql + Sync + Send>;
type PgResult<T> = std::result::Result<T, tokio_postgres::Error>;
/// An attempt at an append: done, or why not.
type Attempt<T> = std::result::Result<T, Failure>;

impl Conn {
    pub fn new(client: Client) -> Conn {
        Conn {
            client,
            statements: FxHashMap::default(),
        }
    }

    /// The statements of `sqls`, preparing (at once, pipelined) those not prepared yet.
    async fn prepare(&mut self, sqls: &[&'static str]) -> PgResult<Vec<Statement>> {
        let missing: Vec<&'static str> = {
            let mut seen = FxHashSet::default();
            sqls.iter()
                .copied()
                .filter(|s| !self.statements.contains_key(s) && seen.insert(*s))
                .collect()
        };
        if !missing.is_empty() {
            let client = &self.client;
            let prepared = try_join_all(missing.iter().map(|s| client.prepare(s))).await?;
            self.statements.extend(missing.into_iter().zip(prepared));
        }
        Ok(sqls.iter().map(|s| self.statements[s].clone()).collect())
    }

    /// Runs `statements` pipelined: sent together, answered in order. The first failure is the
    /// result (a failed statement aborts the transaction, and the ones after it fail too).
    async fn pipeline(&mut self, statements: &[(&'static str, Vec<Param>)]) -> PgResult<Vec<u64>> {
        let sqls: Vec<&'static str> = statements.iter().map(|(s, _)| *s).collect();
        let prepared = self.prepare(&sqls).await?;
        let client = &self.client;
        try_join_all(prepared.iter().zip(statements).map(|(st, (_, params))| {
            let params: Vec<&(dyn ToSql + Sync)> = params
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            async move { client.execute(st, &params).await }
        }))
        .await
    }

    async fn query(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> PgResult<Vec<Row>> {
        let st = self.prepare(&[sql]).await?.remove(0);
        self.client.query(&st, params).await
    }
}

/// Why an attempt at an append failed.
enum Failure {
    /// The connection was lost (or the server is going away): the transaction is gone. `sent`:
    /// the `COMMIT` had been sent, so the batch may have been written.
    Lost {
        error: tokio_postgres::Error,
        sent: bool,
    },
    /// Anything else: the batch was not written, and retrying would not help.
    Failed(LogError),
}

impl Failure {
    pub fn of(e: tokio_postgres::Error, sent: bool) -> Failure {
        if super::connection_lost(&e) {
            Failure::Lost { error: e, sent }
        } else {
            Failure::Failed(storage(e))
        }
    }
}

const LOCK: &str = "SELECT pg_advisory_xact_lock($1)";
/// The append counter (other writers compare against it), raised by one.
const COUNT_APPEND: &str =
    "UPDATE meta SET value = (value::bigint + 1)::text WHERE key = 'appends'";
/// `idx` values for the batch's `$1` events, taken from the column's sequence under the append
/// lock: consecutive, and above every `idx` committed before.
const RESERVE_IDX: &str = "WITH s AS (SELECT pg_get_serial_sequence('events', 'idx') AS seq),
                           f AS (SELECT nextval(seq) AS first FROM s)
                      SELECT first, setval(seq, first + $1 - 1) FROM s, f";
/// Is the batch (its first event) in the log already?
const FIND_EVENT: &str = "SELECT idx FROM events WHERE timestamp = $1 AND event_id = $2";
const EVENTS_FROM: &str = "SELECT idx, event_id FROM events WHERE idx >= $1 ORDER BY idx LIMIT $2";

/// The current state of each entity a batch touches, in one query (see [`batch_keys`]): what
/// validation needs, the job each run's row holds and what each claimed partition's row replaced.
const PREFETCH: &str = "
SELECT 'b', build_request_id, NULL::text, status, NULL::text, NULL::text
  FROM build_requests WHERE build_request_id = ANY($1)
UNION ALL
SELECT 'r', job_run_id, NULL, status, NULL, job FROM job_runs WHERE job_run_id = ANY($2)
UNION ALL
SELECT 'w', want_id, NULL, status, NULL, NULL FROM wants WHERE want_id = ANY($3)
UNION ALL
SELECT 'q', q.build_request_id, q.partition_ref, q.status, NULL, NULL
  FROM unnest($4::text[], $5::text[]) AS k(b, r)
  JOIN request_partitions q ON q.build_request_id = k.b AND q.partition_ref = k.r
UNION ALL
SELECT 'p', partition_ref, prev_status, status, job_run_id, coalesce(job, '')
  FROM partitions WHERE partition_ref = ANY($6)";

/// What the first round trip found.
struct Started {
    /// The first reserved `idx`.
    first_idx: i64,
    /// The batch as already committed (a retry after a `COMMIT` whose answer was lost).
    pub committed: Option<i64>,
    rows: Vec<Row>,
}

/// Begins the batch's transaction: the lock, the append counter, its `idx` values and the states
/// of what it touches, in one round trip. `check` also asks whether the batch is committed already.
async fn begin(conn: &mut Conn, events: &[Event], check: bool) -> Attempt<Started> {
    let keys = batch_keys(events);
    let sqls = [LOCK, COUNT_APPEND, RESERVE_IDX, PREFETCH, FIND_EVENT];
    let st = conn
        .prepare(&sqls)
        .await
        .map_err(|e| Failure::of(e, false))?;
    let client = &conn.client;
    let n = events.len() as i64;
    let (rp_b, rp_r): (Vec<&str>, Vec<&str>) = keys.request_partitions.iter().copied().unzip();
    let first = &events[0];
    let lock_params: [&(dyn ToSql + Sync); 1] = [&APPEND_LOCK];
    let reserve_params: [&(dyn ToSql + Sync); 1] = [&n];
    let prefetch_params: [&(dyn ToSql + Sync); 6] = [
        &keys.build_requests,
        &keys.job_runs,
        &keys.wants,
        &rp_b,
        &rp_r,
        &keys.partitions,
    ];
    let (begin, lock, counted, reserved, rows, found) = futures_util::join!(
        client.batch_execute("BEGIN"),
        client.execute(&st[0], &lock_params),
        client.execute(&st[1], &[]),
        client.query_one(&st[2], &reserve_params),
        client.query(&st[3], &prefetch_params),
        async {
            if check {
                client
                    .query_opt(&st[4], &[&first.timestamp, &first.event_id])
                    .await
            } else {
                Ok(None)
            }
        },
    );
    let lost = |e| Failure::of(e, false);
    begin.map_err(lost)?;
    lock.map_err(|e| {
        if e.code() == Some(&tokio_postgres::error::SqlState::QUERY_CANCELED) {
            Failure::Failed(LogError::Locked {
                location: String::new(),
                waited_ms: 0,
                detail: "another writer held the append lock past the statement timeout".into(),
            })
        } else {
            lost(e)
        }
    })?;
    counted.map_err(lost)?;
    let reserved = reserved.map_err(lost)?;
    let rows = rows.map_err(lost)?;
    let found = found.map_err(lost)?;
    Ok(Started {
        first_idx: reserved.get(0),
        committed: found.map(|r| r.get(0)),
        rows,
    })
}

/// The batch as the log holds it, from its first event's `idx`: the events get their `idx`.
async fn read_back(conn: &mut Conn, events: &mut [Event], first: i64) -> Attempt<()> {
    let rows = conn
        .query(EVENTS_FROM, &[&first, &(events.len() as i64)])
        .await
        .map_err(|e| Failure::of(e, false))?;
    if rows.len() != events.len()
        || rows
            .iter()
            .zip(events.iter())
            .any(|(r, e)| r.get::<_, &str>(1) != e.event_id)
    {
        return Err(Failure::Failed(LogError::Storage(format!(
            "the batch starting at event {first} was committed, but the log does not hold it \
             as it was sent"
        ))));
    }
    for (r, e) in rows.iter().zip(events.iter_mut()) {
        e.idx = r.get(0);
    }
    Ok(())
}

/// Validates `events` (in memory, against the states [`begin`] read) and writes them with their
/// projections and the `COMMIT`, pipelined.
fn write(
    runtime: &tokio::runtime::Runtime,
    conn: &mut Conn,
    started: Started,
    events: &mut [Event],
) -> Attempt<()> {
    let mut cache = StateCache::default();
    let mut tx = PgAppend {
        runtime,
        conn,
        first_idx: started.first_idx,
        events: EventColumns::default(),
        writes: Vec::new(),
        request_partitions: FxHashMap::default(),
        run_inserts: FxHashMap::default(),
        touched: FxHashSet::default(),
        claims: FxHashMap::default(),
        run_jobs: FxHashMap::default(),
        lost: None,
    };
    tx.fill(events, &started.rows, &mut cache);
    let validated = append_batch(&mut tx, &mut cache, events);
    if let Some(error) = tx.lost.take() {
        return Err(Failure::Lost { error, sent: false });
    }
    validated.map_err(Failure::Failed)?;
    let mut statements = tx.statements();
    let PgAppend { conn, .. } = tx;
    statements.push((COMMIT, Vec::new()));
    runtime
        .block_on(conn.pipeline(&statements))
        .map(drop)
        .map_err(|e| Failure::of(e, true))
}

/// `COMMIT`, prepared like the writes so that it goes in their pipeline.
const COMMIT: &str = "COMMIT";

/// The keys of every entity `events` touch (as [`append_batch`] reads them), each once.
struct Keys<'a> {
    build_requests: Vec<&'a str>,
    job_runs: Vec<&'a str>,
    wants: Vec<&'a str>,
    request_partitions: Vec<(&'a str, &'a str)>,
    partitions: Vec<&'a str>,
}

fn batch_keys(events: &[Event]) -> Keys<'_> {
    fn add<K: Eq + std::hash::Hash + Copy>(v: &mut Vec<K>, seen: &mut FxHashSet<K>, k: K) {
        if seen.insert(k) {
            v.push(k);
        }
    }
    let mut keys = Keys {
        build_requests: Vec::new(),
        job_runs: Vec::new(),
        wants: Vec::new(),
        request_partitions: Vec::new(),
        partitions: Vec::new(),
    };
    let (mut b, mut r, mut w, mut p) = Default::default();
    let mut q = FxHashSet::default();
    for e in events {
        match state_keys(e) {
            StateKeys::BuildRequest(id) => add(&mut keys.build_requests, &mut b, id),
            StateKeys::JobRun(id) => add(&mut keys.job_runs, &mut r, id),
            StateKeys::Want(id) => add(&mut keys.wants, &mut w, id),
            StateKeys::Partition(br, r) => {
                if let Some(br) = br {
                    add(&mut keys.request_partitions, &mut q, (br, r));
                }
                add(&mut keys.partitions, &mut p, r);
            }
            StateKeys::None => {}
        }
        if let Some(br) = claim_build_request(e) {
            add(&mut keys.build_requests, &mut b, br);
        }
    }
    keys
}

/// The columns of the batch's event rows.
#[derive(Default)]
struct EventColumns {
    idx: Vec<i64>,
    event_id: Vec<String>,
    timestamp: Vec<i64>,
    build_request_id: Vec<Option<String>>,
    kind: Vec<&'static str>,
    status: Vec<&'static str>,
    partition_ref: Vec<Option<String>>,
    job: Vec<Option<String>>,
    job_run_id: Vec<Option<String>>,
    delegated_to: Vec<Option<String>>,
    message: Vec<Option<String>>,
    data: Vec<Option<String>>,
}

/// One projection write, with the values its statement takes.
enum Write {
    BuildInsert {
        id: Option<String>,
        status: &'static str,
        requested: String,
        requested_count: i64,
        requested_head: String,
        analyze_only: bool,
        owner: Option<String>,
        message: Option<String>,
        at: i64,
    },
    BuildUpdate {
        id: Option<String>,
        status: &'static str,
        at: i64,
        message: Option<String>,
    },
    RunInsert(Box<RunRow>),
    RunStart(Box<StartRow>),
    /// A queued run's process started.
    RunStarted {
        id: Option<String>,
        status: &'static str,
        at: i64,
    },
    RunEnd {
        id: Option<String>,
        status: &'static str,
        at: i64,
        exit_code: Option<i32>,
        message: Option<String>,
        not_started: bool,
        started_at: Option<i64>,
    },
    RequestPartition {
        br: String,
        r: Option<String>,
        status: &'static str,
        run: Option<String>,
        at: i64,
    },
    Partition {
        r: Option<String>,
        status: &'static str,
        run: Option<String>,
        br: Option<String>,
        job: Option<String>,
        data_version: Option<String>,
        message: Option<String>,
        at: i64,
    },
    Restore(String),
    Delete(String),
    WantInsert {
        id: Option<String>,
        status: &'static str,
        refs: String,
        at: i64,
        expires_at: Option<i64>,
        sla_seconds: Option<i64>,
        recurring: Option<String>,
        message: Option<String>,
        deadline: Option<i64>,
    },
    SlaMiss {
        id: Option<String>,
        at: i64,
    },
    WantUpdate {
        id: Option<String>,
        status: &'static str,
        waiting_for: Option<String>,
        message: Option<String>,
        upstream: Option<String>,
        at: i64,
        retry_at: Option<i64>,
    },
    RunCounts(Vec<(String, &'static str, i64, Option<i64>)>),
    PartitionCounts(Vec<(String, &'static str, i64)>),
    Check(Box<CheckWrite>),
    /// `run_metrics` rows, inserted once per batch (see `insert_metrics`).
    Metrics(Vec<MetricValue>),
    Arrival {
        r: Option<String>,
        dataset: Option<String>,
        at: i64,
        data_version: Option<String>,
    },
    Late {
        r: Option<String>,
        at: i64,
    },
}

struct CheckWrite {
    r: Option<String>,
    name: Option<String>,
    status: &'static str,
    blocking: bool,
    run: Option<String>,
    job: Option<String>,
    br: Option<String>,
    version: Option<String>,
    command: Option<String>,
    inline: bool,
    message: Option<String>,
    metrics: Option<String>,
    idx: i64,
    at: i64,
    code_versions: Option<String>,
}

/// What a run's claim sets on its row (`at`: when it started, for a claim of a log from before
/// `queued`).
struct StartRow {
    id: Option<String>,
    status: &'static str,
    at: Option<i64>,
    pid: Option<i64>,
    host: Option<String>,
    owner: Option<String>,
    input_versions: String,
    log_path: Option<String>,
    input_runs: String,
    /// `NULL` when empty: a run of a release before code versions, or one recording none.
    code_versions: Option<String>,
}

struct RunRow {
    /// Its start, when the batch starts it too (a claim): one row written, not a row and then
    /// its update (every update of `job_runs` writes all of its eight indexes again).
    start: Option<Box<StartRow>>,
    id: Option<String>,
    job: Option<String>,
    br: Option<String>,
    status: &'static str,
    outputs: String,
    inputs: String,
    args: String,
    env: String,
    at: i64,
    message: Option<String>,
    relies_on: Option<String>,
    job_version: Option<String>,
}

/// The row a write goes to (its table, and its key there), which orders it among the batch's
/// writes to that row; `None` for the count changes, written once per batch.
fn row_of(w: &Write) -> Option<(u8, String)> {
    let key = |k: &Option<String>| k.clone().unwrap_or_default();
    Some(match w {
        Write::BuildInsert { id, .. } | Write::BuildUpdate { id, .. } => (b'b', key(id)),
        Write::RunInsert(row) => (b'r', key(&row.id)),
        Write::RunStart(start) => (b'r', key(&start.id)),
        Write::RunStarted { id, .. } | Write::RunEnd { id, .. } => (b'r', key(id)),
        Write::RequestPartition { br, r, .. } => (b'q', format!("{br}\0{}", key(r))),
        Write::Partition { r, .. } => (b'p', key(r)),
        Write::Restore(r) | Write::Delete(r) => (b'p', r.clone()),
        Write::WantInsert { id, .. } | Write::SlaMiss { id, .. } | Write::WantUpdate { id, .. } => {
            (b'w', key(id))
        }
        Write::Check(c) => (b'c', format!("{}\0{}", key(&c.r), key(&c.name))),
        // A ref's arrival and its being late change one row of `late_partitions`, and a late
        // note reads `arrivals`: written in the events' order.
        Write::Arrival { r, .. } | Write::Late { r, .. } => (b'a', key(r)),
        Write::RunCounts(_) | Write::PartitionCounts(_) | Write::Metrics(_) => return None,
    })
}

/// The kind of a write, which picks its statement.
fn kind_of(w: &Write) -> usize {
    match w {
        Write::BuildInsert { .. } => 0,
        Write::BuildUpdate { .. } => 1,
        Write::RunInsert(_) => 2,
        Write::RunStart(_) => 3,
        Write::RunEnd { .. } => 4,
        Write::RequestPartition { .. } => 5,
        Write::Partition { .. } => 6,
        Write::Restore(_) => 7,
        Write::Delete(_) => 8,
        Write::WantInsert { .. } => 9,
        Write::SlaMiss { .. } => 10,
        Write::WantUpdate { .. } => 11,
        Write::RunCounts(_) => 12,
        Write::PartitionCounts(_) => 13,
        Write::Check(_) => 14,
        Write::RunStarted { .. } => 15,
        Write::Metrics(_) => 16,
        Write::Arrival { .. } => 17,
        Write::Late { .. } => 18,
    }
}

const INSERT_EVENTS: &str = "
INSERT INTO events (idx, event_id, timestamp, build_request_id, kind, status, partition_ref,
                    job, job_run_id, delegated_to, message, data)
SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[], $4::text[], $5::text[], $6::text[],
                     $7::text[], $8::text[], $9::text[], $10::text[], $11::text[], $12::text[])";

/// Each kind's statement, by [`kind_of`]: the per-row SQL of a statement per event, over the
/// `unnest` of the rows' columns.
const WRITES: [&str; 19] = [
    "INSERT INTO build_requests (build_request_id, status, requested, analyze_only, owner, message,
                                 created_at, updated_at, requested_count, requested_head)
     SELECT id, s, req, ao, o, m, t, t, rc, rh
       FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::text[], $6::text[],
                   $7::bigint[], $8::bigint[], $9::text[]) AS u(id, s, req, ao, o, m, t, rc, rh)",
    "UPDATE build_requests b SET status = u.s, updated_at = u.t, message = coalesce(u.m, b.message)
       FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[]) AS u(id, s, t, m)
      WHERE b.build_request_id = u.id",
    // A run started in its insert's batch has its start's columns (the start's statement, next,
    // for the others), with what it read (`run_inputs`, v8.sql); the others have none.
    "WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[],
                                     $6::text[], $7::text[], $8::text[], $9::bigint[],
                                     $10::text[], $11::text[], $12::text[], $13::bigint[],
                                     $14::bigint[], $15::text[], $16::text[], $17::text[],
                                     $18::text[], $19::text[], $20::text[])
                       AS u(id, job, br, s, outputs, inputs, args, env, sched, m, relies, jv,
                            t, pid, host, o, iv, lp, ir, cv)),
          read AS (INSERT INTO run_inputs (input_ref, input_run_id, data_version, job_run_id)
                   SELECT kv.key, u.ir::json ->> kv.key, kv.value, u.id
                     FROM u, json_each_text(u.iv::json) kv)
     INSERT INTO job_runs (job_run_id, job, build_request_id, status, outputs, inputs, args, env,
                           scheduled_at, message, relies_on, job_version, started_at, pid, host,
                           owner, input_versions, log_path, input_runs, code_versions)
     SELECT * FROM u",
    // With the reverse index of what each run read (`run_inputs`, v8.sql), from the same rows.
    "WITH u AS (SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[],
                                     $5::text[], $6::text[], $7::text[], $8::text[], $9::text[],
                                     $10::text[])
                       AS u(id, s, t, pid, host, o, iv, lp, ir, cv)),
          read AS (INSERT INTO run_inputs (input_ref, input_run_id, data_version, job_run_id)
                   SELECT kv.key, u.ir::json ->> kv.key, kv.value, u.id
                     FROM u, json_each_text(u.iv::json) kv)
     UPDATE job_runs j SET status = u.s, started_at = u.t, pid = u.pid, host = u.host,
            owner = u.o, input_versions = u.iv, log_path = u.lp, input_runs = u.ir,
            code_versions = u.cv
       FROM u WHERE j.job_run_id = u.id",
    "UPDATE job_runs j SET status = u.s, ended_at = u.t, exit_code = u.code,
            message = coalesce(u.m, j.message),
            started_at = CASE WHEN u.ns THEN NULL ELSE coalesce(u.st, j.started_at) END
       FROM unnest($1::text[], $2::text[], $3::bigint[], $4::int[], $5::text[], $6::bool[],
                   $7::bigint[])
            AS u(id, s, t, code, m, ns, st)
      WHERE j.job_run_id = u.id",
    "INSERT INTO request_partitions (build_request_id, partition_ref, status, job_run_id, updated_at)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::bigint[])
     ON CONFLICT (build_request_id, partition_ref) DO UPDATE SET
        status = excluded.status,
        job_run_id = coalesce(excluded.job_run_id, request_partitions.job_run_id),
        updated_at = excluded.updated_at",
    "INSERT INTO partitions (partition_ref, status, job_run_id, build_request_id, job,
                             data_version, message, updated_at, prev_status)
     SELECT r, s, run, br, j, dv, m, t, CASE WHEN s = 'building' THEN '' END
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::text[],
                   $7::text[], $8::bigint[]) AS u(r, s, run, br, j, dv, m, t)
     ON CONFLICT (partition_ref) DO UPDATE SET
        -- A claim keeps what it replaces, for a release (see v3.sql).
        prev_status = CASE WHEN excluded.status <> 'building' THEN NULL
                           WHEN partitions.status = 'building' THEN partitions.prev_status
                           ELSE partitions.status END,
        prev_job_run_id = CASE WHEN partitions.status = 'building' THEN partitions.prev_job_run_id
                               ELSE partitions.job_run_id END,
        prev_build_request_id = CASE WHEN partitions.status = 'building'
                                     THEN partitions.prev_build_request_id
                                     ELSE partitions.build_request_id END,
        prev_message = CASE WHEN partitions.status = 'building' THEN partitions.prev_message
                            ELSE partitions.message END,
        prev_updated_at = CASE WHEN partitions.status = 'building' THEN partitions.prev_updated_at
                               ELSE partitions.updated_at END,
        status = excluded.status,
        job_run_id = excluded.job_run_id,
        build_request_id = coalesce(excluded.build_request_id, partitions.build_request_id),
        job = coalesce(excluded.job, partitions.job),
        data_version = CASE WHEN excluded.status IN ('available', 'sealed')
                            THEN excluded.data_version ELSE partitions.data_version END,
        message = excluded.message,
        updated_at = excluded.updated_at",
    "UPDATE partitions SET status = prev_status, job_run_id = prev_job_run_id,
            build_request_id = prev_build_request_id, message = prev_message,
            updated_at = prev_updated_at, prev_status = NULL, prev_job_run_id = NULL,
            prev_build_request_id = NULL, prev_message = NULL, prev_updated_at = NULL
      WHERE partition_ref = ANY($1)",
    "DELETE FROM partitions WHERE partition_ref = ANY($1)",
    "INSERT INTO wants (want_id, status, refs, created_at, expires_at, sla_seconds, recurring,
                        message, updated_at, deadline)
     SELECT id, s, refs, t, e, sla, rec, m, t, d
       FROM unnest($1::text[], $2::text[], $3::text[], $4::bigint[], $5::bigint[], $6::bigint[],
                   $7::text[], $8::text[], $9::bigint[]) AS u(id, s, refs, t, e, sla, rec, m, d)",
    "UPDATE wants w SET sla_missed = w.sla_missed + 1, updated_at = u.t
       FROM unnest($1::text[], $2::bigint[]) AS u(id, t) WHERE w.want_id = u.id",
    "UPDATE wants w SET status = u.s, waiting_for = u.wf, message = u.m,
            build_request_id = coalesce(u.up, w.build_request_id), updated_at = u.t,
            retry_at = u.r
       FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::text[], $6::bigint[],
                   $7::bigint[])
            AS u(id, s, wf, m, up, t, r)
      WHERE w.want_id = u.id",
    // `greatest` ignores NULLs: a change without a `scheduled_at` keeps the row's.
    "INSERT INTO job_counts (job, status, n, last_scheduled_at)
     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
     ON CONFLICT (job, status) DO UPDATE SET n = job_counts.n + excluded.n,
        last_scheduled_at = greatest(job_counts.last_scheduled_at, excluded.last_scheduled_at)",
    "INSERT INTO partition_counts (job, status, n)
     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
     ON CONFLICT (job, status) DO UPDATE SET n = partition_counts.n + excluded.n",
    "INSERT INTO partition_checks (partition_ref, check_name, status, blocking, job_run_id, job,
                                   build_request_id, check_version, command, inline, message,
                                   metrics, event_idx, updated_at, code_versions)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::bool[], $5::text[], $6::text[],
                          $7::text[], $8::text[], $9::text[], $10::bool[], $11::text[],
                          $12::text[], $13::bigint[], $14::bigint[], $15::text[])
     ON CONFLICT (partition_ref, check_name) DO UPDATE SET
        status = excluded.status, blocking = excluded.blocking,
        job_run_id = excluded.job_run_id, job = coalesce(excluded.job, partition_checks.job),
        build_request_id = excluded.build_request_id, check_version = excluded.check_version,
        command = excluded.command, inline = excluded.inline, message = excluded.message,
        metrics = excluded.metrics, event_idx = excluded.event_idx,
        updated_at = excluded.updated_at, code_versions = excluded.code_versions",
    "UPDATE job_runs j SET status = u.s, started_at = u.t
       FROM unnest($1::text[], $2::text[], $3::bigint[]) AS u(id, s, t)
      WHERE j.job_run_id = u.id",
    // As SQLite's (`insert_metrics`): a name written twice keeps the last value.
    "INSERT INTO run_metrics (job, name, partition_ref, job_run_id, value, recorded_at)
     SELECT * FROM unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::float8[],
                          $6::bigint[])
     ON CONFLICT (job, name, partition_ref, job_run_id) DO UPDATE SET value = excluded.value",
    // The first sighting stands, as on SQLite; the ref is late no more.
    "WITH arrived AS (DELETE FROM late_partitions WHERE partition_ref = ANY($1))
     INSERT INTO arrivals (partition_ref, dataset, arrived_at, data_version)
     SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::text[])
     ON CONFLICT (partition_ref) DO NOTHING",
    "INSERT INTO late_partitions (partition_ref, recorded_at)
     SELECT r, t FROM unnest($1::text[], $2::bigint[]) AS u(r, t)
      WHERE NOT EXISTS (SELECT 1 FROM arrivals a WHERE a.partition_ref = u.r)
     ON CONFLICT (partition_ref) DO UPDATE SET recorded_at = excluded.recorded_at",
];

/// The parameters of one statement of `kind` for `writes` (all of that kind): a column each.
fn columns(kind: usize, writes: &[&Write]) -> Vec<Param> {
    macro_rules! col {
        ($variant:pat => $value:expr) => {
            Box::new(
                writes
                    .iter()
                    .map(|w| match w {
                        $variant => $value,
                        _ => unreachable!("grouped by kind"),
                    })
                    .collect::<Vec<_>>(),
            ) as Param
        };
    }
    match kind {
        0 => vec![
            col!(Write::BuildInsert { id, .. } => id.clone()),
            col!(Write::BuildInsert { status, .. } => *status),
            col!(Write::BuildInsert { requested, .. } => requested.clone()),
            col!(Write::BuildInsert { analyze_only, .. } => *analyze_only),
            col!(Write::BuildInsert { owner, .. } => owner.clone()),
            col!(Write::BuildInsert { message, .. } => message.clone()),
            col!(Write::BuildInsert { at, .. } => *at),
            col!(Write::BuildInsert { requested_count, .. } => *requested_count),
            col!(Write::BuildInsert { requested_head, .. } => requested_head.clone()),
        ],
        1 => vec![
            col!(Write::BuildUpdate { id, .. } => id.clone()),
            col!(Write::BuildUpdate { status, .. } => *status),
            col!(Write::BuildUpdate { at, .. } => *at),
            col!(Write::BuildUpdate { message, .. } => message.clone()),
        ],
        2 => vec![
            col!(Write::RunInsert(r) => r.id.clone()),
            col!(Write::RunInsert(r) => r.job.clone()),
            col!(Write::RunInsert(r) => r.br.clone()),
            col!(Write::RunInsert(r) => r.start.as_ref().map_or(r.status, |s| s.status)),
            col!(Write::RunInsert(r) => r.outputs.clone()),
            col!(Write::RunInsert(r) => r.inputs.clone()),
            col!(Write::RunInsert(r) => r.args.clone()),
            col!(Write::RunInsert(r) => r.env.clone()),
            col!(Write::RunInsert(r) => r.at),
            col!(Write::RunInsert(r) => r.message.clone()),
            col!(Write::RunInsert(r) => r.relies_on.clone()),
            col!(Write::RunInsert(r) => r.job_version.clone()),
            col!(Write::RunInsert(r) => r.start.as_ref().and_then(|s| s.at)),
            col!(Write::RunInsert(r) => r.start.as_ref().and_then(|s| s.pid)),
            col!(Write::RunInsert(r) => r.start.as_ref().and_then(|s| s.host.clone())),
            col!(Write::RunInsert(r) => r.start.as_ref().and_then(|s| s.owner.clone())),
            col!(Write::RunInsert(r) => r.start.as_ref().map(|s| s.input_versions.clone())),
            col!(Write::RunInsert(r) => r.start.as_ref().and_then(|s| s.log_path.clone())),
            col!(Write::RunInsert(r) => r.start.as_ref().map(|s| s.input_runs.clone())),
            col!(Write::RunInsert(r) => r.start.as_ref().and_then(|s| s.code_versions.clone())),
        ],
        3 => vec![
            col!(Write::RunStart(s) => s.id.clone()),
            col!(Write::RunStart(s) => s.status),
            col!(Write::RunStart(s) => s.at),
            col!(Write::RunStart(s) => s.pid),
            col!(Write::RunStart(s) => s.host.clone()),
            col!(Write::RunStart(s) => s.owner.clone()),
            col!(Write::RunStart(s) => s.input_versions.clone()),
            col!(Write::RunStart(s) => s.log_path.clone()),
            col!(Write::RunStart(s) => s.input_runs.clone()),
            col!(Write::RunStart(s) => s.code_versions.clone()),
        ],
        4 => vec![
            col!(Write::RunEnd { id, .. } => id.clone()),
            col!(Write::RunEnd { status, .. } => *status),
            col!(Write::RunEnd { at, .. } => *at),
            col!(Write::RunEnd { exit_code, .. } => *exit_code),
            col!(Write::RunEnd { message, .. } => message.clone()),
            col!(Write::RunEnd { not_started, .. } => *not_started),
            col!(Write::RunEnd { started_at, .. } => *started_at),
        ],
        5 => vec![
            col!(Write::RequestPartition { br, .. } => br.clone()),
            col!(Write::RequestPartition { r, .. } => r.clone()),
            col!(Write::RequestPartition { status, .. } => *status),
            col!(Write::RequestPartition { run, .. } => run.clone()),
            col!(Write::RequestPartition { at, .. } => *at),
        ],
        6 => vec![
            col!(Write::Partition { r, .. } => r.clone()),
            col!(Write::Partition { status, .. } => *status),
            col!(Write::Partition { run, .. } => run.clone()),
            col!(Write::Partition { br, .. } => br.clone()),
            col!(Write::Partition { job, .. } => job.clone()),
            col!(Write::Partition { data_version, .. } => data_version.clone()),
            col!(Write::Partition { message, .. } => message.clone()),
            col!(Write::Partition { at, .. } => *at),
        ],
        7 => vec![col!(Write::Restore(r) => r.clone())],
        8 => vec![col!(Write::Delete(r) => r.clone())],
        9 => vec![
            col!(Write::WantInsert { id, .. } => id.clone()),
            col!(Write::WantInsert { status, .. } => *status),
            col!(Write::WantInsert { refs, .. } => refs.clone()),
            col!(Write::WantInsert { at, .. } => *at),
            col!(Write::WantInsert { expires_at, .. } => *expires_at),
            col!(Write::WantInsert { sla_seconds, .. } => *sla_seconds),
            col!(Write::WantInsert { recurring, .. } => recurring.clone()),
            col!(Write::WantInsert { message, .. } => message.clone()),
            col!(Write::WantInsert { deadline, .. } => *deadline),
        ],
        10 => vec![
            col!(Write::SlaMiss { id, .. } => id.clone()),
            col!(Write::SlaMiss { at, .. } => *at),
        ],
        11 => vec![
            col!(Write::WantUpdate { id, .. } => id.clone()),
            col!(Write::WantUpdate { status, .. } => *status),
            col!(Write::WantUpdate { waiting_for, .. } => waiting_for.clone()),
            col!(Write::WantUpdate { message, .. } => message.clone()),
            col!(Write::WantUpdate { upstream, .. } => upstream.clone()),
            col!(Write::WantUpdate { at, .. } => *at),
            col!(Write::WantUpdate { retry_at, .. } => *retry_at),
        ],
        12 => {
            let all: Vec<&(String, &'static str, i64, Option<i64>)> = writes
                .iter()
                .flat_map(|w| match w {
                    Write::RunCounts(c) => c.iter(),
                    _ => unreachable!("grouped by kind"),
                })
                .collect();
            vec![
                Box::new(all.iter().map(|c| c.0.clone()).collect::<Vec<_>>()),
                Box::new(all.iter().map(|c| c.1).collect::<Vec<_>>()),
                Box::new(all.iter().map(|c| c.2).collect::<Vec<_>>()),
                Box::new(all.iter().map(|c| c.3).collect::<Vec<_>>()),
            ]
        }
        14 => vec![
            col!(Write::Check(c) => c.r.clone()),
            col!(Write::Check(c) => c.name.clone()),
            col!(Write::Check(c) => c.status),
            col!(Write::Check(c) => c.blocking),
            col!(Write::Check(c) => c.run.clone()),
            col!(Write::Check(c) => c.job.clone()),
            col!(Write::Check(c) => c.br.clone()),
            col!(Write::Check(c) => c.version.clone()),
            col!(Write::Check(c) => c.command.clone()),
            col!(Write::Check(c) => c.inline),
            col!(Write::Check(c) => c.message.clone()),
            col!(Write::Check(c) => c.metrics.clone()),
            col!(Write::Check(c) => c.idx),
            col!(Write::Check(c) => c.at),
            col!(Write::Check(c) => c.code_versions.clone()),
        ],
        15 => vec![
            col!(Write::RunStarted { id, .. } => id.clone()),
            col!(Write::RunStarted { status, .. } => *status),
            col!(Write::RunStarted { at, .. } => *at),
        ],
        16 => {
            let all: Vec<&MetricValue> = writes
                .iter()
                .flat_map(|w| match w {
                    Write::Metrics(m) => m.iter(),
                    _ => unreachable!("grouped by kind"),
                })
                .collect();
            vec![
                Box::new(all.iter().map(|m| m.job.clone()).collect::<Vec<_>>()),
                Box::new(all.iter().map(|m| m.name.clone()).collect::<Vec<_>>()),
                Box::new(
                    all.iter()
                        .map(|m| m.partition_ref.clone())
                        .collect::<Vec<_>>(),
                ),
                Box::new(all.iter().map(|m| m.job_run_id.clone()).collect::<Vec<_>>()),
                Box::new(all.iter().map(|m| m.value).collect::<Vec<_>>()),
                Box::new(all.iter().map(|m| m.recorded_at).collect::<Vec<_>>()),
            ]
        }
        17 => vec![
            col!(Write::Arrival { r, .. } => r.clone()),
            col!(Write::Arrival { dataset, .. } => dataset.clone()),
            col!(Write::Arrival { at, .. } => *at),
            col!(Write::Arrival { data_version, .. } => data_version.clone()),
        ],
        18 => vec![
            col!(Write::Late { r, .. } => r.clone()),
            col!(Write::Late { at, .. } => *at),
        ],
        _ => {
            let all: Vec<&(String, &'static str, i64)> = writes
                .iter()
                .flat_map(|w| match w {
                    Write::PartitionCounts(c) => c.iter(),
                    _ => unreachable!("grouped by kind"),
                })
                .collect();
            vec![
                Box::new(all.iter().map(|c| c.0.clone()).collect::<Vec<_>>()),
                Box::new(all.iter().map(|c| c.1).collect::<Vec<_>>()),
                Box::new(all.iter().map(|c| c.2).collect::<Vec<_>>()),
            ]
        }
    }
}

/// The append's statements on PostgreSQL: reads answered from what [`begin`] read, writes kept
/// for [`PgAppend::statements`]. A read of a row the batch wrote already (a partition read again
/// after its claim was released) first sends the writes kept so far.
struct PgAppend<'a> {
    runtime: &'a tokio::runtime::Runtime,
    conn: &'a mut Conn,
    /// The first `idx` the append reserved.
    first_idx: i64,
    events: EventColumns,
    writes: Vec<Write>,
    /// Per request partition row: its upsert among `writes`, which the next one folds into.
    request_partitions: FxHashMap<(String, String), usize>,
    /// Per run the batch inserts: its insert among `writes`, which its start folds into.
    run_inserts: FxHashMap<String, usize>,
    /// Partitions written by the batch so far: what [`begin`] read of them is out of date.
    touched: FxHashSet<String>,
    /// Per partition row read by [`begin`]: its `prev_status` and its job (`''` for none).
    claims: FxHashMap<String, (Option<String>, String)>,
    /// The job of each run the batch touches.
    run_jobs: FxHashMap<String, String>,
    /// The connection was lost sending or reading.
    lost: Option<tokio_postgres::Error>,
}

impl PgAppend<'_> {
    /// Puts what [`begin`] read into `cache` (`None` for what the log does not hold) and keeps
    /// what the writes need.
    fn fill(&mut self, events: &[Event], rows: &[Row], cache: &mut StateCache) {
        let keys = batch_keys(events);
        for id in keys.build_requests {
            cache.build_requests.insert(id.to_string(), None);
        }
        for id in keys.job_runs {
            cache.job_runs.insert(id.to_string(), None);
        }
        for id in keys.wants {
            cache.wants.insert(id.to_string(), None);
        }
        for (b, r) in keys.request_partitions {
            cache
                .request_partitions
                .insert((b.to_string(), r.to_string()), None);
        }
        for r in keys.partitions {
            cache.partitions.insert(r.to_string(), None);
        }
        for row in rows {
            let tag: &str = row.get(0);
            let k1: String = row.get(1);
            let k2: Option<String> = row.get(2);
            let Some(status) = Status::parse(row.get(3)) else {
                // Read again, and refused there as unknown, by the same code as ever.
                continue;
            };
            let run: Option<String> = row.get(4);
            let job: Option<String> = row.get(5);
            match tag {
                "b" => {
                    cache.build_requests.insert(k1, Some(status));
                }
                "r" => {
                    self.run_jobs.insert(k1.clone(), job.unwrap_or_default());
                    cache.job_runs.insert(k1, Some(status));
                }
                "w" => {
                    cache.wants.insert(k1, Some(status));
                }
                "q" => {
                    cache
                        .request_partitions
                        .insert((k1, k2.unwrap_or_default()), Some(status));
                }
                _ => {
                    let job = job.unwrap_or_default();
                    self.claims.insert(k1.clone(), (k2, job.clone()));
                    cache
                        .partitions
                        .insert(k1, Some(PartitionState { status, run, job }));
                }
            }
        }
    }

    fn keep(&mut self, w: Write) {
        if let Some(row) = row_of(&w) {
            match row.0 {
                b'p' => {
                    self.touched.insert(row.1);
                }
                // Another write to a run's row: a start after it no longer folds into the
                // insert (it would come before this write).
                b'r' if !matches!(w, Write::RunInsert(_)) => {
                    self.run_inserts.remove(&row.1);
                }
                _ => {}
            }
        }
        self.writes.push(w);
    }

    /// The kept writes as statements, in an order that keeps each row's writes in theirs; they
    /// are no longer kept.
    fn statements(&mut self) -> Vec<(&'static str, Vec<Param>)> {
        let mut out = Vec::new();
        let ev = std::mem::take(&mut self.events);
        if !ev.idx.is_empty() {
            out.push((
                INSERT_EVENTS,
                vec![
                    Box::new(ev.idx) as Param,
                    Box::new(ev.event_id),
                    Box::new(ev.timestamp),
                    Box::new(ev.build_request_id),
                    Box::new(ev.kind),
                    Box::new(ev.status),
                    Box::new(ev.partition_ref),
                    Box::new(ev.job),
                    Box::new(ev.job_run_id),
                    Box::new(ev.delegated_to),
                    Box::new(ev.message),
                    Box::new(ev.data),
                ],
            ));
        }
        let writes = std::mem::take(&mut self.writes);
        self.request_partitions.clear();
        self.run_inserts.clear();
        // Each write's layer: how many writes to its row came before it.
        let mut seen: FxHashMap<(u8, String), usize> = FxHashMap::default();
        let mut groups: std::collections::BTreeMap<(usize, usize), Vec<&Write>> =
            std::collections::BTreeMap::new();
        for w in &writes {
            let layer = match row_of(w) {
                Some(row) => {
                    let n = seen.entry(row).or_default();
                    *n += 1;
                    *n - 1
                }
                // The counts go last (they add up; one statement each).
                None => usize::MAX,
            };
            groups.entry((layer, kind_of(w))).or_default().push(w);
        }
        for ((_, kind), ws) in groups {
            out.push((WRITES[kind], columns(kind, &ws)));
        }
        out
    }

    /// Sends the writes kept so far (before a read of a row they change).
    fn flush(&mut self) -> Result<()> {
        let statements = self.statements();
        if statements.is_empty() {
            return Ok(());
        }
        let result = self.runtime.block_on(self.conn.pipeline(&statements));
        self.check(result).map(drop)
    }

    fn check<T>(&mut self, r: PgResult<T>) -> Result<T> {
        r.map_err(|e| {
            let out = LogError::Storage(super::describe(&e));
            if super::connection_lost(&e) {
                self.lost = Some(e);
            }
            out
        })
    }

    /// A read inside the transaction, after the kept writes.
    fn read(&mut self, sql: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<Vec<Row>> {
        self.flush()?;
        let result = self.runtime.block_on(self.conn.query(sql, params));
        self.check(result)
    }

    fn status(
        &mut self,
        sql: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Status>> {
        let rows = self.read(sql, params)?;
        rows.first()
            .map(|r| status_of(r.get::<_, &str>(0)))
            .transpose()
    }

    fn run_job(&self, e: &Event) -> Result<String> {
        let id = e.job_run_id.as_deref().unwrap_or_default();
        self.run_jobs.get(id).cloned().ok_or_else(|| {
            LogError::Storage(format!("job run `{id}` has no row in the log to update"))
        })
    }
}

impl AppendTx for PgAppend<'_> {
    fn build_request_status(&mut self, id: &str) -> Result<Option<Status>> {
        self.status(
            "SELECT status FROM build_requests WHERE build_request_id = $1",
            &[&id],
        )
    }

    fn job_run_status(&mut self, id: &str) -> Result<Option<Status>> {
        let rows = self.read(
            "SELECT status, job FROM job_runs WHERE job_run_id = $1",
            &[&id],
        )?;
        let Some(row) = rows.first() else {
            return Ok(None);
        };
        self.run_jobs.insert(id.to_string(), row.get(1));
        status_of(row.get::<_, &str>(0)).map(Some)
    }

    fn want_status(&mut self, id: &str) -> Result<Option<Status>> {
        self.status("SELECT status FROM wants WHERE want_id = $1", &[&id])
    }

    fn request_partition_status(&mut self, br: &str, r: &str) -> Result<Option<Status>> {
        self.status(
            "SELECT status FROM request_partitions WHERE build_request_id = $1 AND partition_ref = $2",
            &[&br, &r],
        )
    }

    fn partition_state(&mut self, r: &str) -> Result<Option<PartitionState>> {
        let rows = self.read(
            "SELECT status, job_run_id, coalesce(job, '') FROM partitions WHERE partition_ref = $1",
            &[&r],
        )?;
        rows.first()
            .map(|row| {
                Ok(PartitionState {
                    status: status_of(row.get::<_, &str>(0))?,
                    run: row.get(1),
                    job: row.get(2),
                })
            })
            .transpose()
    }

    fn first_idx(&mut self) -> Result<i64> {
        Ok(self.first_idx)
    }

    fn insert_events(&mut self, events: &[Event]) -> Result<()> {
        let c = &mut self.events;
        for e in events {
            c.idx.push(e.idx);
            c.event_id.push(e.event_id.clone());
            c.timestamp.push(e.timestamp);
            c.build_request_id.push(e.build_request_id.clone());
            c.kind.push(e.kind.as_str());
            c.status.push(e.status.as_str());
            c.partition_ref.push(e.partition_ref.clone());
            c.job.push(e.job.clone());
            c.job_run_id.push(e.job_run_id.clone());
            c.delegated_to.push(e.delegated_to.clone());
            c.message.push(e.message.clone());
            c.data.push((!e.data.is_empty()).then(|| to_json(&e.data)));
        }
        Ok(())
    }

    fn insert_build_request(&mut self, e: &Event) -> Result<()> {
        let (requested, requested_count, requested_head) = requested_columns(&e.data);
        self.keep(Write::BuildInsert {
            id: e.build_request_id.clone(),
            status: e.status.as_str(),
            requested,
            requested_count,
            requested_head,
            analyze_only: e.data.analyze_only,
            owner: e.data.owner.clone(),
            message: e.message.clone(),
            at: e.timestamp,
        });
        Ok(())
    }

    fn update_build_request(&mut self, e: &Event) -> Result<()> {
        self.keep(Write::BuildUpdate {
            id: e.build_request_id.clone(),
            status: e.status.as_str(),
            at: e.timestamp,
            message: e.message.clone(),
        });
        Ok(())
    }

    fn insert_job_run(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        if let (Some(id), Some(job)) = (&e.job_run_id, &e.job) {
            self.run_jobs.insert(id.clone(), job.clone());
        }
        if let Some(id) = &e.job_run_id {
            self.run_inserts.insert(id.clone(), self.writes.len());
        }
        self.keep(Write::RunInsert(Box::new(RunRow {
            start: None,
            id: e.job_run_id.clone(),
            job: e.job.clone(),
            br: e.build_request_id.clone(),
            status: e.status.as_str(),
            outputs: to_json(&d.outputs),
            inputs: to_json(&d.inputs),
            args: to_json(&d.args),
            env: to_json(&d.env),
            at: e.timestamp,
            message: e.message.clone(),
            relies_on: d.relies_on.clone(),
            job_version: d.job_version.clone(),
        })));
        Ok(())
    }

    fn start_job_run(&mut self, e: &Event) -> Result<String> {
        let job = self.run_job(e)?;
        let d = &e.data;
        let start = Box::new(StartRow {
            id: e.job_run_id.clone(),
            status: e.status.as_str(),
            at: started_at(e),
            pid: d.pid.map(i64::from),
            host: d.host.clone(),
            owner: d.owner.clone(),
            input_versions: to_json(&d.input_versions),
            log_path: d.log_path.clone(),
            input_runs: to_json(&d.input_runs),
            code_versions: (!d.code_versions.is_empty()).then(|| to_json(&d.code_versions)),
        });
        // Inserted by this batch, and not written since: the start goes into the insert.
        let id = e.job_run_id.clone().unwrap_or_default();
        match self.run_inserts.remove(&id).map(|i| &mut self.writes[i]) {
            Some(Write::RunInsert(row)) => row.start = Some(start),
            _ => self.keep(Write::RunStart(start)),
        }
        Ok(job)
    }

    fn run_started(&mut self, e: &Event) -> Result<String> {
        let job = self.run_job(e)?;
        self.keep(Write::RunStarted {
            id: e.job_run_id.clone(),
            status: e.status.as_str(),
            at: e.timestamp,
        });
        Ok(job)
    }

    fn end_job_run(&mut self, e: &Event) -> Result<String> {
        let job = self.run_job(e)?;
        self.keep(Write::RunEnd {
            id: e.job_run_id.clone(),
            status: e.status.as_str(),
            at: e.timestamp,
            exit_code: e.data.exit_code,
            message: e.message.clone(),
            not_started: e.data.not_started,
            started_at: e.data.started_at,
        });
        Ok(job)
    }

    fn upsert_request_partition(&mut self, br: &str, e: &Event) -> Result<()> {
        // Upserts of one row in a row fold into one: the last status and time, the last run
        // named (`coalesce(excluded.job_run_id, job_run_id)` at each).
        let key = (br.to_string(), e.partition_ref.clone().unwrap_or_default());
        if let Some(&at) = self.request_partitions.get(&key) {
            if let Some(Write::RequestPartition {
                status, run, at: t, ..
            }) = self.writes.get_mut(at)
            {
                *status = e.status.as_str();
                if e.job_run_id.is_some() {
                    run.clone_from(&e.job_run_id);
                }
                *t = e.timestamp;
                return Ok(());
            }
        }
        self.request_partitions.insert(key, self.writes.len());
        self.keep(Write::RequestPartition {
            br: br.to_string(),
            r: e.partition_ref.clone(),
            status: e.status.as_str(),
            run: e.job_run_id.clone(),
            at: e.timestamp,
        });
        Ok(())
    }

    fn upsert_partition(&mut self, e: &Event, status: Status, run: Option<&str>) -> Result<()> {
        self.keep(Write::Partition {
            r: e.partition_ref.clone(),
            status: status.as_str(),
            run: run.map(str::to_string),
            br: e.build_request_id.clone(),
            job: e.job.clone(),
            data_version: e.data.data_version.clone(),
            message: e.message.clone(),
            at: e.timestamp,
        });
        Ok(())
    }

    fn claimed_partition(&mut self, r: &str) -> Result<(Option<String>, String)> {
        if !self.touched.contains(r) {
            if let Some(claim) = self.claims.get(r) {
                return Ok(claim.clone());
            }
        }
        let rows = self.read(
            "SELECT prev_status, coalesce(job, '') FROM partitions WHERE partition_ref = $1",
            &[&r],
        )?;
        let row = rows.first().ok_or_else(|| {
            LogError::Storage(format!("the claimed partition `{r}` has no row in the log"))
        })?;
        Ok((row.get(0), row.get(1)))
    }

    fn restore_partition(&mut self, r: &str) -> Result<()> {
        self.keep(Write::Restore(r.to_string()));
        Ok(())
    }

    fn delete_partition(&mut self, r: &str) -> Result<()> {
        self.keep(Write::Delete(r.to_string()));
        Ok(())
    }

    fn insert_want(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        self.keep(Write::WantInsert {
            id: d.want_id.clone(),
            status: e.status.as_str(),
            refs: to_json(&d.requested),
            at: e.timestamp,
            expires_at: d.expires_at,
            sla_seconds: d.sla_seconds.map(|s| s as i64),
            recurring: d.recurring.clone(),
            message: e.message.clone(),
            deadline: d.deadline,
        });
        Ok(())
    }

    fn count_sla_miss(&mut self, e: &Event) -> Result<()> {
        self.keep(Write::SlaMiss {
            id: e.data.want_id.clone(),
            at: e.timestamp,
        });
        Ok(())
    }

    fn update_want(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        self.keep(Write::WantUpdate {
            id: d.want_id.clone(),
            status: e.status.as_str(),
            waiting_for: e.partition_ref.clone(),
            message: e.message.clone(),
            upstream: d.upstream.clone(),
            at: e.timestamp,
            retry_at: d.retry_at,
        });
        Ok(())
    }

    fn upsert_check(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        self.keep(Write::Check(Box::new(CheckWrite {
            r: e.partition_ref.clone(),
            name: d.check.clone(),
            status: e.status.as_str(),
            blocking: d.blocking.unwrap_or(true),
            run: e.job_run_id.clone(),
            job: e.job.clone(),
            br: e.build_request_id.clone(),
            version: d.check_version.clone(),
            command: check_command(e),
            inline: d.inline,
            message: e.message.clone(),
            metrics: check_metrics(e),
            idx: e.idx,
            at: e.timestamp,
            code_versions: (!d.code_versions.is_empty()).then(|| to_json(&d.code_versions)),
        })));
        Ok(())
    }

    fn insert_arrival(&mut self, e: &Event) -> Result<()> {
        self.keep(Write::Arrival {
            r: e.partition_ref.clone(),
            dataset: e.data.dataset.clone(),
            at: e.timestamp,
            data_version: e.data.data_version.clone(),
        });
        Ok(())
    }

    fn mark_late(&mut self, e: &Event) -> Result<()> {
        self.keep(Write::Late {
            r: e.partition_ref.clone(),
            at: e.timestamp,
        });
        Ok(())
    }

    fn insert_metrics(&mut self, rows: &[MetricValue]) -> Result<()> {
        self.keep(Write::Metrics(rows.to_vec()));
        Ok(())
    }

    fn add_run_counts(&mut self, changes: &[RunCount<'_>]) -> Result<()> {
        self.keep(Write::RunCounts(
            changes
                .iter()
                .map(|c| {
                    (
                        c.job.to_string(),
                        c.status.as_str(),
                        c.n,
                        c.last_scheduled_at,
                    )
                })
                .collect(),
        ));
        Ok(())
    }

    fn add_partition_counts(&mut self, changes: &[PartitionCount<'_>]) -> Result<()> {
        self.keep(Write::PartitionCounts(
            changes
                .iter()
                .map(|c| (c.job.to_string(), c.status.as_str(), c.n))
                .collect(),
        ));
        Ok(())
    }
}
