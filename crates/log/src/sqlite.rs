//! The SQLite event log: the embedded default.
//!
//! One writer connection behind a mutex appends batches in `BEGIN IMMEDIATE` transactions, so two
//! processes on one file serialize their writes and each batch validates against the state the
//! other left. Readers use their own connections (WAL lets them read while the writer writes).
//! User SQL runs on a separate read-only connection with an authorizer, a row cap and a deadline.
//! The schema is documented in `docs/event-log.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};
use rustc_hash::FxHashMap;

mod wal_batch;

use crate::cache::{cached, StateCache};
use crate::event::{Event, EventData, Kind, Status};
use crate::replay::global_effect;
use crate::state::{check, Current};
use crate::store::*;

/// Marks a SQLite file as a DataBuild event log (`PRAGMA application_id`): "DBLG".
const APPLICATION_ID: i64 = 0x4442_4C47;

/// The schema, as numbered migrations. Version N is reached by applying the first N steps.
/// Never edit a step that has shipped; add one.
const MIGRATIONS: &[&str] = &[
    include_str!("sqlite/v1.sql"),
    include_str!("sqlite/v2.sql"),
    include_str!("sqlite/v3.sql"),
    include_str!("sqlite/v4.sql"),
];

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Page cache sizes. Appends touch several indexes at random keys; with SQLite's default 2 MiB
/// cache the writer spends most of its time re-reading and spilling pages.
const WRITER_CACHE_KIB: i64 = 64 * 1024;
const READER_CACHE_KIB: i64 = 16 * 1024;
/// A user query's page cache: small, and its sorts and temporary tables spill to files, so one
/// query holds little of the log in memory however much it reads.
const SQL_CACHE_KIB: i64 = 2 * 1024;
/// The longest user query (SQLite's own limit is 1 GB of text to parse).
const SQL_MAX_QUERY_LEN: usize = 100_000;

/// Connection settings shared by the writer and readers. Memory-mapped reads avoid copying pages
/// through `pread`.
fn tune(conn: &Connection, cache_kib: i64) -> Result<()> {
    conn.pragma_update(None, "cache_size", -cache_kib)
        .map_err(storage)?;
    conn.pragma_update(None, "mmap_size", 1i64 << 30)
        .map_err(storage)?;
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(storage)?;
    Ok(())
}

pub struct SqliteStore {
    path: PathBuf,
    writer: Mutex<Writer>,
    readers: Mutex<Vec<Connection>>,
    /// Started by the first write: a store only read from needs none.
    checkpointer: std::sync::OnceLock<Option<Checkpointer>>,
}

/// How often the checkpointer looks for new writes to copy from the WAL into the database.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// WAL pages past which the writer checkpoints by itself: a backstop, should the checkpointer
/// fall behind (SQLite's default, 1,000 pages, is what the checkpointer replaces).
const WRITER_CHECKPOINT_PAGES: i64 = 16 * 1024;

/// Copies the WAL into the database on a thread of its own. A checkpoint syncs the WAL and the
/// database to disk, milliseconds each on a busy disk. Left to SQLite, it runs inside whichever
/// commit crosses 1,000 WAL pages, and whoever appends waits: in a build, the scheduler, while a
/// slot stays idle (0.5 s over a 2,700-job build, measured with `strace -T`).
struct Checkpointer {
    /// Raised by every write, lowered by the checkpoint that follows it.
    written: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Dropped to stop the thread.
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Option<Checkpointer> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .ok()?;
        let written = std::sync::Arc::new(AtomicBool::new(false));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let seen = written.clone();
        let thread = std::thread::Builder::new()
            .name("databuild-checkpoint".to_string())
            .spawn(move || {
                // Woken by the clock, not by each write: a wake-up per commit would cost the
                // writer more than the checkpoint saves it.
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_EVERY)
                {
                    if seen.swap(false, Ordering::Relaxed) {
                        // PASSIVE never waits for the writer or readers; what it cannot copy
                        // now, the next round does.
                        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    }
                }
            })
            .ok()?;
        Some(Checkpointer {
            written,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writing connection and what it remembers of entity states between batches.
///
/// Validating an event needs the current state of what it touches; reading it back from the
/// projections costs a B-tree seek per event. The cache answers instead, and is trusted only while
/// no other connection has committed (`PRAGMA data_version` unchanged) and no batch failed.
struct Writer {
    conn: Connection,
    cache: StateCache,
    data_version: Option<i64>,
}

/// The writing connection: through the VFS that writes each commit's WAL frames at once, when it
/// could be registered (it always can with the SQLite built in).
fn open_writer(path: &Path) -> rusqlite::Result<Connection> {
    if wal_batch::register() {
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), wal_batch::NAME)
    } else {
        Connection::open(path)
    }
}

fn storage(e: rusqlite::Error) -> LogError {
    LogError::Storage(e.to_string())
}

impl SqliteStore {
    /// Opens (creating if absent) the log at `path`, applying pending migrations.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        let location = path.display().to_string();
        let open_err = |message: String| LogError::Open {
            location: location.clone(),
            message,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                return Err(open_err(format!(
                    "the folder `{}` does not exist",
                    parent.display()
                )));
            }
        }
        let conn = open_writer(path).map_err(|e| open_err(e.to_string()))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(storage)?;
        let store = SqliteStore {
            path: path.to_path_buf(),
            writer: Mutex::new(Writer {
                conn,
                cache: StateCache::default(),
                data_version: None,
            }),
            readers: Mutex::new(Vec::new()),
            checkpointer: std::sync::OnceLock::new(),
        };
        // Two processes creating the same log at once can meet in the journal-mode switch, where
        // SQLite answers "busy" without waiting: retry for as long as any lock wait would last.
        let deadline = Instant::now() + BUSY_TIMEOUT;
        loop {
            match store.prepare_schema() {
                Err(LogError::Locked { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(25));
                }
                other => break other.map(|()| store),
            }
        }
    }

    /// Starts the checkpointer before the first write, and hands it the checkpoints of the
    /// `writer` connection but for a backstop. Without one, the writer keeps SQLite's own.
    fn start_checkpointer(&self, writer: &Connection) {
        self.checkpointer.get_or_init(|| {
            let checkpointer = Checkpointer::start(&self.path)?;
            writer
                .pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)
                .ok()?;
            Some(checkpointer)
        });
    }

    /// Tells the checkpointer there is something to copy.
    fn written(&self) {
        if let Some(Some(c)) = self.checkpointer.get() {
            c.written.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }

    fn classify(&self, e: rusqlite::Error) -> LogError {
        let location = self.location();
        match e.sqlite_error_code() {
            Some(rusqlite::ErrorCode::NotADatabase) => LogError::Open {
                location,
                message: "the file is not an SQLite database (corrupt, or not an event log)"
                    .to_string(),
            },
            Some(rusqlite::ErrorCode::DatabaseCorrupt) => LogError::Open {
                location,
                message: format!("the database is corrupt ({e}); restore it from a backup"),
            },
            Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked) => {
                LogError::Locked {
                    location,
                    waited_ms: BUSY_TIMEOUT.as_millis() as u64,
                    detail: e.to_string(),
                }
            }
            _ => storage(e),
        }
    }

    fn prepare_schema(&self) -> Result<()> {
        let mut writer = self.writer.lock().expect("writer lock");
        let conn = &mut writer.conn;
        let location = self.location();
        // WAL lets readers proceed while a writer appends; NORMAL sync keeps every committed batch
        // across process crashes (power loss may drop the last few).
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| self.classify(e))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(storage)?;
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.classify(e))?;
        let app_id: i64 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| self.classify(e))?;
        let tables: i64 = tx
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| self.classify(e))?;
        tune(&tx, WRITER_CACHE_KIB)?;
        if app_id != APPLICATION_ID && tables > 0 {
            return Err(LogError::Open {
                location,
                message: "the file is an SQLite database but not a DataBuild event log".into(),
            });
        }
        let version: i64 = if tables == 0 {
            0
        } else {
            tx.query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get::<_, String>(0),
            )
            .map_err(|e| LogError::Open {
                location: location.clone(),
                message: format!("its schema version cannot be read ({e})"),
            })?
            .parse()
            .map_err(|_| LogError::Open {
                location: location.clone(),
                message: "its schema version is not a number".into(),
            })?
        };
        if version > SCHEMA_VERSION {
            return Err(LogError::NewerSchema {
                location,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        for step in &MIGRATIONS[version as usize..] {
            tx.execute_batch(step).map_err(storage)?;
        }
        if version < SCHEMA_VERSION {
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(storage)?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [SCHEMA_VERSION.to_string()],
            )
            .map_err(storage)?;
        }
        tx.commit().map_err(storage)
    }

    /// Runs `f` on a pooled read connection.
    fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
        let conn = self.readers.lock().expect("reader pool").pop();
        let conn = match conn {
            Some(c) => c,
            None => {
                let c = Connection::open_with_flags(
                    &self.path,
                    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
                )
                .map_err(|e| self.classify(e))?;
                c.busy_timeout(BUSY_TIMEOUT).map_err(storage)?;
                tune(&c, READER_CACHE_KIB)?;
                c.pragma_update(None, "query_only", true).map_err(storage)?;
                c
            }
        };
        let result = f(&conn).map_err(|e| self.classify(e));
        self.readers.lock().expect("reader pool").push(conn);
        result
    }

    /// A connection for user SQL: read-only at the file level, `query_only`, and an authorizer
    /// that refuses anything reaching outside the log (ATTACH, PRAGMA, extension loading). No
    /// string or blob may grow past `max_value_len`: SQLite checks as it builds one, inside a
    /// function call, where neither the progress handler nor an interrupt can stop it.
    fn sql_connection(&self, limits: &SqlLimits) -> Result<Connection> {
        use rusqlite::limits::Limit;
        let mut conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| self.classify(e))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(storage)?;
        // Pragmas before the authorizer, which refuses them.
        conn.pragma_update(None, "query_only", true)
            .map_err(storage)?;
        conn.pragma_update(None, "cache_size", -SQL_CACHE_KIB)
            .map_err(storage)?;
        conn.pragma_update(None, "temp_store", "FILE")
            .map_err(storage)?;
        let value_len = i32::try_from(limits.max_value_len).unwrap_or(i32::MAX);
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, value_len)
            .map_err(storage)?;
        conn.set_limit(Limit::SQLITE_LIMIT_SQL_LENGTH, SQL_MAX_QUERY_LEN as i32)
            .map_err(storage)?;
        conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)
            .map_err(storage)?;
        conn.authorizer(Some(|ctx: AuthContext<'_>| match ctx.action {
            AuthAction::Attach { .. }
            | AuthAction::Detach { .. }
            | AuthAction::Pragma { .. }
            | AuthAction::Insert { .. }
            | AuthAction::Update { .. }
            | AuthAction::Delete { .. }
            | AuthAction::CreateTable { .. }
            | AuthAction::CreateTempTable { .. }
            | AuthAction::CreateView { .. }
            | AuthAction::CreateTempView { .. }
            | AuthAction::DropTable { .. }
            | AuthAction::AlterTable { .. }
            | AuthAction::Transaction { .. }
            | AuthAction::Savepoint { .. } => Authorization::Deny,
            AuthAction::Function { function_name }
                if function_name.eq_ignore_ascii_case("load_extension") =>
            {
                Authorization::Deny
            }
            _ => Authorization::Allow,
        }))
        .map_err(storage)?;
        Ok(conn)
    }
}

/// Interrupts `conn` once `timeout` has passed, unless the returned sender is dropped first: a
/// backstop to the progress handler, should a statement go long between two of its calls.
fn arm_deadline(conn: &Connection, timeout: Duration) -> Option<std::sync::mpsc::Sender<()>> {
    let handle = conn.get_interrupt_handle();
    let (disarm, armed) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("sql-deadline".into())
        .spawn(move || {
            if armed.recv_timeout(timeout) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                handle.interrupt();
            }
        })
        .ok()?;
    Some(disarm)
}

/// What a user query's failure tells its author.
fn sql_refusal(e: rusqlite::Error, limits: &SqlLimits) -> LogError {
    let read_only = || {
        LogError::Sql(
            "the query is refused: only reads are allowed (no writes, ATTACH, PRAGMA or extensions)"
                .to_string(),
        )
    };
    match e.sqlite_error_code() {
        _ if matches!(e, rusqlite::Error::MultipleStatement) => {
            LogError::Sql("only one statement per query is allowed".to_string())
        }
        // Denied functions come back as plain errors that say so.
        _ if e.to_string().contains("not authorized") => read_only(),
        Some(rusqlite::ErrorCode::AuthorizationForStatementDenied) => read_only(),
        Some(rusqlite::ErrorCode::OperationInterrupted) => LogError::Sql(format!(
            "the query ran longer than {} s and was stopped",
            limits.timeout.as_secs_f64()
        )),
        // The query is no longer than SQLITE_LIMIT_SQL_LENGTH (checked first): a string or
        // blob outgrew SQLITE_LIMIT_LENGTH.
        Some(rusqlite::ErrorCode::TooBig) => limits.value_too_long(),
        _ => LogError::Sql(format!("the query failed: {e}")),
    }
}

fn status_of(s: String) -> rusqlite::Result<Status> {
    Status::parse(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("unknown status `{s}`").into(),
        )
    })
}

fn json_list(s: Option<String>) -> Vec<String> {
    s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("serializes")
}

/// The states an event touches, from the cache or read inside the writing transaction.
fn current(tx: &Transaction<'_>, cache: &mut StateCache, e: &Event) -> rusqlite::Result<Current> {
    let mut c = Current::default();
    let br = e.build_request_id.as_deref();
    let status_query = |sql: &str, keys: &[&str]| -> rusqlite::Result<Option<Status>> {
        tx.prepare_cached(sql)?
            .query_row(rusqlite::params_from_iter(keys), |r| r.get(0))
            .optional()?
            .map(status_of)
            .transpose()
    };
    match (
        e.kind,
        br,
        e.job_run_id.as_deref(),
        e.partition_ref.as_deref(),
    ) {
        (Kind::BuildRequest, Some(br), _, _) => {
            c.build_request = cached(&mut cache.build_requests, br.to_string(), || {
                status_query(
                    "SELECT status FROM build_requests WHERE build_request_id = ?1",
                    &[br],
                )
            })?;
        }
        (Kind::JobRun, _, Some(run), _) => {
            c.job_run = cached(&mut cache.job_runs, run.to_string(), || {
                status_query("SELECT status FROM job_runs WHERE job_run_id = ?1", &[run])
            })?;
        }
        (Kind::Want, _, _, _) if e.data.want_id.is_some() => {
            let id = e.data.want_id.as_deref().expect("checked");
            c.want = cached(&mut cache.wants, id.to_string(), || {
                status_query("SELECT status FROM wants WHERE want_id = ?1", &[id])
            })?;
        }
        (Kind::Partition, br, _, Some(r)) => {
            if let Some(br) = br {
                let key = (br.to_string(), r.to_string());
                c.request_partition = cached(&mut cache.request_partitions, key, || {
                    status_query(
                        "SELECT status FROM request_partitions
                         WHERE build_request_id = ?1 AND partition_ref = ?2",
                        &[br, r],
                    )
                })?;
            }
            c.partition = cached(&mut cache.partitions, r.to_string(), || {
                tx.prepare_cached(
                    "SELECT status, job_run_id FROM partitions WHERE partition_ref = ?1",
                )?
                .query_row([r], |row| Ok((row.get::<_, String>(0)?, row.get(1)?)))
                .optional()?
                .map(|(s, run)| status_of(s).map(|s| (s, run)))
                .transpose()
            })?;
        }
        _ => {}
    }
    Ok(c)
}

fn insert_event(tx: &Transaction<'_>, e: &Event) -> rusqlite::Result<i64> {
    let data = (!e.data.is_empty()).then(|| to_json(&e.data));
    tx.prepare_cached(
        "INSERT INTO events (event_id, timestamp, build_request_id, kind, status, partition_ref,
                             job, job_run_id, delegated_to, message, data)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
    )?
    .execute(params![
        e.event_id,
        e.timestamp,
        e.build_request_id,
        e.kind.as_str(),
        e.status.as_str(),
        e.partition_ref,
        e.job,
        e.job_run_id,
        e.delegated_to,
        e.message,
        data,
    ])?;
    Ok(tx.last_insert_rowid())
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

    fn write(&self, tx: &Transaction<'_>) -> rusqlite::Result<()> {
        let mut runs = tx.prepare_cached(
            "INSERT INTO job_counts (job, status, n, last_scheduled_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (job, status) DO UPDATE SET n = n + excluded.n,
                last_scheduled_at = CASE WHEN excluded.last_scheduled_at IS NULL
                    THEN last_scheduled_at
                    ELSE max(coalesce(last_scheduled_at, 0), excluded.last_scheduled_at) END",
        )?;
        for ((job, status), (n, last)) in &self.runs {
            if *n != 0 || last.is_some() {
                runs.execute(params![job, status.as_str(), n, last])?;
            }
        }
        let mut partitions = tx.prepare_cached(
            "INSERT INTO partition_counts (job, status, n) VALUES (?1, ?2, ?3)
             ON CONFLICT (job, status) DO UPDATE SET n = n + excluded.n",
        )?;
        for ((job, status), n) in &self.partitions {
            if *n != 0 {
                partitions.execute(params![job, status.as_str(), n])?;
            }
        }
        Ok(())
    }
}

/// The job a partition's row holds (`''` for none, as `partition_counts` counts it).
fn job_of_partition(tx: &Transaction<'_>, r: Option<&str>) -> rusqlite::Result<String> {
    tx.prepare_cached("SELECT coalesce(job, '') FROM partitions WHERE partition_ref = ?1")?
        .query_row([r], |row| row.get(0))
}

/// Moves an updated run of `job` (the job its row holds) from its old status's count to its new
/// one's.
fn recount_run(e: &Event, before: &Current, job: &str, counts: &mut CountChanges) {
    if let Some(old) = before.job_run.filter(|old| *old != e.status) {
        counts.run(job, old, -1, None);
        counts.run(job, e.status, 1, None);
    }
}

/// Updates the projections for one (already validated) event, the count projections included
/// (written here rather than by triggers: see `sqlite/v3.sql`).
fn project(
    tx: &Transaction<'_>,
    e: &Event,
    before: &Current,
    counts: &mut CountChanges,
) -> rusqlite::Result<()> {
    let status = e.status.as_str();
    match e.kind {
        Kind::BuildRequest if e.status == Status::Received => {
            tx.prepare_cached(
                "INSERT INTO build_requests (build_request_id, status, requested, analyze_only,
                                             owner, message, created_at, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)",
            )?
            .execute(params![
                e.build_request_id,
                status,
                to_json(&e.data.requested),
                e.data.analyze_only,
                e.data.owner,
                e.message,
                e.timestamp
            ])?;
        }
        Kind::BuildRequest => {
            tx.prepare_cached(
                "UPDATE build_requests SET status = ?2, updated_at = ?3,
                        message = coalesce(?4, message)
                 WHERE build_request_id = ?1",
            )?
            .execute(params![e.build_request_id, status, e.timestamp, e.message])?;
        }
        Kind::JobRun if before.job_run.is_none() => {
            let d = &e.data;
            tx.prepare_cached(
                "INSERT INTO job_runs (job_run_id, job, build_request_id, status, outputs, inputs,
                                       args, env, scheduled_at, message, relies_on, job_version)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)",
            )?
            .execute(params![
                e.job_run_id,
                e.job,
                e.build_request_id,
                status,
                to_json(&d.outputs),
                to_json(&d.inputs),
                to_json(&d.args),
                to_json(&d.env),
                e.timestamp,
                e.message,
                d.relies_on,
                d.job_version,
            ])?;
            // `job` is required: the insert above refused an event without one.
            counts.run(
                e.job.as_deref().unwrap_or_default(),
                e.status,
                1,
                Some(e.timestamp),
            );
        }
        // The updates return the row's job, for its counts.
        Kind::JobRun if e.status == Status::Running => {
            let d = &e.data;
            let job: String = tx
                .prepare_cached(
                    "UPDATE job_runs SET status = ?2, started_at = ?3, pid = ?4, host = ?5,
                            owner = ?6, input_versions = ?7, log_path = ?8
                     WHERE job_run_id = ?1 RETURNING job",
                )?
                .query_row(
                    params![
                        e.job_run_id,
                        status,
                        e.timestamp,
                        d.pid,
                        d.host,
                        d.owner,
                        to_json(&d.input_versions),
                        d.log_path
                    ],
                    |r| r.get(0),
                )?;
            recount_run(e, before, &job, counts);
        }
        Kind::JobRun => {
            let job: String = tx
                .prepare_cached(
                    "UPDATE job_runs SET status = ?2, ended_at = ?3, exit_code = ?4,
                            message = coalesce(?5, message),
                            started_at = CASE WHEN ?6 THEN NULL ELSE started_at END
                     WHERE job_run_id = ?1 RETURNING job",
                )?
                .query_row(
                    params![
                        e.job_run_id,
                        status,
                        e.timestamp,
                        e.data.exit_code,
                        e.message,
                        e.data.not_started
                    ],
                    |r| r.get(0),
                )?;
            recount_run(e, before, &job, counts);
        }
        Kind::Partition => {
            if let Some(br) = &e.build_request_id {
                tx.prepare_cached(
                    "INSERT INTO request_partitions (build_request_id, partition_ref, status,
                                                     job_run_id, updated_at)
                     VALUES (?1, ?2, ?3, ?4, ?5)
                     ON CONFLICT (build_request_id, partition_ref) DO UPDATE SET
                        status = excluded.status,
                        job_run_id = coalesce(excluded.job_run_id, job_run_id),
                        updated_at = excluded.updated_at",
                )?
                .execute(params![
                    br,
                    e.partition_ref,
                    status,
                    e.job_run_id,
                    e.timestamp
                ])?;
            }
            if crate::replay::is_release(e) {
                release(tx, e, counts)?;
            } else if let Some((global, run)) = global_effect(e, before.partition.as_ref()) {
                // The row's job before and after the upsert below (`coalesce(excluded.job, job)`).
                let mut old_job = String::new();
                if let Some((old, _)) = &before.partition {
                    old_job = job_of_partition(tx, e.partition_ref.as_deref())?;
                    counts.partition(&old_job, *old, -1);
                }
                counts.partition(e.job.as_deref().unwrap_or(&old_job), global, 1);
                tx.prepare_cached(
                    "INSERT INTO partitions (partition_ref, status, job_run_id, build_request_id,
                                             job, data_version, message, updated_at, prev_status)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8,
                             CASE WHEN ?2 = 'building' THEN '' END)
                     ON CONFLICT (partition_ref) DO UPDATE SET
                        -- A claim keeps what it replaces, for a release (see v4.sql). A claim
                        -- never replaces a claim (the log refuses it), but a run may re-claim.
                        prev_status = CASE WHEN excluded.status <> 'building' THEN NULL
                                           WHEN partitions.status = 'building' THEN prev_status
                                           ELSE partitions.status END,
                        prev_job_run_id = CASE WHEN partitions.status = 'building' THEN prev_job_run_id
                                               ELSE partitions.job_run_id END,
                        prev_build_request_id = CASE WHEN partitions.status = 'building' THEN prev_build_request_id
                                                     ELSE partitions.build_request_id END,
                        prev_message = CASE WHEN partitions.status = 'building' THEN prev_message
                                            ELSE partitions.message END,
                        prev_updated_at = CASE WHEN partitions.status = 'building' THEN prev_updated_at
                                               ELSE partitions.updated_at END,
                        status = excluded.status,
                        job_run_id = excluded.job_run_id,
                        build_request_id = coalesce(excluded.build_request_id, build_request_id),
                        job = coalesce(excluded.job, job),
                        data_version = CASE WHEN excluded.status IN ('available', 'sealed')
                                            THEN excluded.data_version ELSE data_version END,
                        message = excluded.message,
                        updated_at = excluded.updated_at",
                )?
                .execute(params![
                    e.partition_ref,
                    global.as_str(),
                    run,
                    e.build_request_id,
                    e.job,
                    e.data.data_version,
                    e.message,
                    e.timestamp
                ])?;
            }
        }
        Kind::Want if e.status == Status::Requested => {
            let d = &e.data;
            tx.prepare_cached(
                "INSERT INTO wants (want_id, status, refs, created_at, expires_at, sla_seconds,
                                    recurring, message, updated_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?4)",
            )?
            .execute(params![
                d.want_id,
                status,
                to_json(&d.requested),
                e.timestamp,
                d.expires_at,
                d.sla_seconds.map(|s| s as i64),
                d.recurring,
                e.message
            ])?;
        }
        Kind::Want if e.status == Status::SlaMissed => {
            tx.prepare_cached(
                "UPDATE wants SET sla_missed = sla_missed + 1, updated_at = ?2 WHERE want_id = ?1",
            )?
            .execute(params![e.data.want_id, e.timestamp])?;
        }
        Kind::Want => {
            tx.prepare_cached(
                "UPDATE wants SET status = ?2, waiting_for = ?3, message = ?4,
                        build_request_id = coalesce(?5, build_request_id), updated_at = ?6
                 WHERE want_id = ?1",
            )?
            .execute(params![
                e.data.want_id,
                status,
                e.partition_ref,
                e.message,
                e.data.upstream,
                e.timestamp
            ])?;
        }
        Kind::Delegation | Kind::Alias => {}
    }
    Ok(())
}

/// A run gives up its claim without building: the partition's row goes back to what the claim
/// replaced, or away if the partition had none (see `sqlite/v4.sql`).
fn release(tx: &Transaction<'_>, e: &Event, counts: &mut CountChanges) -> rusqlite::Result<()> {
    let (prev, job): (Option<String>, Option<String>) = tx
        .prepare_cached("SELECT prev_status, job FROM partitions WHERE partition_ref = ?1")?
        .query_row([&e.partition_ref], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let job = job.unwrap_or_default();
    counts.partition(&job, Status::Building, -1);
    match prev.as_deref().and_then(Status::parse) {
        Some(restored) => {
            counts.partition(&job, restored, 1);
            tx.prepare_cached(
                "UPDATE partitions SET status = prev_status, job_run_id = prev_job_run_id,
                        build_request_id = prev_build_request_id, message = prev_message,
                        updated_at = prev_updated_at, prev_status = NULL, prev_job_run_id = NULL,
                        prev_build_request_id = NULL, prev_message = NULL, prev_updated_at = NULL
                 WHERE partition_ref = ?1",
            )?
            .execute([&e.partition_ref])?;
        }
        // No row before the claim (or a claim made before version 4): none after it.
        None => {
            tx.prepare_cached("DELETE FROM partitions WHERE partition_ref = ?1")?
                .execute([&e.partition_ref])?;
        }
    }
    Ok(())
}

/// A `WHERE` clause of the filters actually given, with their values in order.
#[derive(Default)]
struct Filters {
    clause: String,
    values: Vec<rusqlite::types::Value>,
}

impl Filters {
    fn raw(&mut self, condition: &str) {
        let joiner = if self.clause.is_empty() {
            " WHERE "
        } else {
            " AND "
        };
        self.clause.push_str(joiner);
        self.clause.push_str(condition);
    }

    fn add(&mut self, column_op: &str, value: rusqlite::types::Value) {
        self.values.push(value);
        let condition = format!("{column_op} ?{}", self.values.len());
        self.raw(&condition);
    }
}

const WANT_COLUMNS: &str = "want_id, status, refs, created_at, expires_at, sla_seconds, recurring,
                            waiting_for, message, build_request_id, sla_missed, updated_at";

fn want_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<WantRow> {
    Ok(WantRow {
        want_id: row.get(0)?,
        status: status_of(row.get(1)?)?,
        refs: serde_json::from_str(&row.get::<_, String>(2)?).unwrap_or_default(),
        created_at: row.get(3)?,
        expires_at: row.get(4)?,
        sla_seconds: row.get::<_, Option<i64>>(5)?.map(|s| s as u64),
        recurring: row.get(6)?,
        waiting_for: row.get(7)?,
        message: row.get(8)?,
        build_request_id: row.get(9)?,
        sla_missed: row.get::<_, i64>(10)? as u64,
        updated_at: row.get(11)?,
    })
}

const EVENT_COLUMNS: &str =
    "idx, event_id, timestamp, build_request_id, kind, status, partition_ref,
                             job, job_run_id, delegated_to, message, data";

fn event_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<Event> {
    let kind: String = row.get(4)?;
    let data: Option<String> = row.get(11)?;
    Ok(Event {
        idx: row.get(0)?,
        event_id: row.get(1)?,
        timestamp: row.get(2)?,
        build_request_id: row.get(3)?,
        kind: Kind::parse(&kind).ok_or_else(|| {
            rusqlite::Error::FromSqlConversionFailure(
                4,
                rusqlite::types::Type::Text,
                format!("unknown kind `{kind}`").into(),
            )
        })?,
        status: status_of(row.get(5)?)?,
        partition_ref: row.get(6)?,
        job: row.get(7)?,
        job_run_id: row.get(8)?,
        delegated_to: row.get(9)?,
        message: row.get(10)?,
        data: data
            .and_then(|d| serde_json::from_str::<EventData>(&d).ok())
            .unwrap_or_default(),
    })
}

const PARTITION_COLUMNS: &str =
    "partition_ref, status, job_run_id, build_request_id, job, data_version, message, updated_at";

fn partition_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<PartitionRow> {
    Ok(PartitionRow {
        partition_ref: row.get(0)?,
        status: status_of(row.get(1)?)?,
        job_run_id: row.get(2)?,
        build_request_id: row.get(3)?,
        job: row.get(4)?,
        data_version: row.get(5)?,
        message: row.get(6)?,
        updated_at: row.get(7)?,
    })
}

const BUILD_COLUMNS: &str =
    "build_request_id, status, requested, analyze_only, message, created_at, updated_at, owner";

fn build_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<BuildRequestRow> {
    Ok(BuildRequestRow {
        build_request_id: row.get(0)?,
        status: status_of(row.get(1)?)?,
        requested_partitions: json_list(row.get(2)?),
        analyze_only: row.get(3)?,
        message: row.get(4)?,
        created_at: row.get(5)?,
        updated_at: row.get(6)?,
        owner: row.get(7)?,
    })
}

const RUN_COLUMNS: &str = "job_run_id, job, build_request_id, status, outputs, inputs, args, env,
                           scheduled_at, started_at, ended_at, exit_code, message, relies_on, pid, host,
                           owner, job_version, input_versions, log_path";

fn run_from_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<JobRunRow> {
    let env: Option<String> = row.get(7)?;
    Ok(JobRunRow {
        job_run_id: row.get(0)?,
        job: row.get(1)?,
        build_request_id: row.get(2)?,
        status: status_of(row.get(3)?)?,
        outputs: json_list(row.get(4)?),
        inputs: json_list(row.get(5)?),
        args: json_list(row.get(6)?),
        env: env
            .and_then(|e| serde_json::from_str(&e).ok())
            .unwrap_or_default(),
        scheduled_at: row.get(8)?,
        started_at: row.get(9)?,
        ended_at: row.get(10)?,
        exit_code: row.get(11)?,
        message: row.get(12)?,
        relies_on: row.get(13)?,
        pid: row.get(14)?,
        host: row.get(15)?,
        owner: row.get(16)?,
        job_version: row.get(17)?,
        input_versions: row
            .get::<_, Option<String>>(18)?
            .and_then(|m| serde_json::from_str(&m).ok())
            .unwrap_or_default(),
        log_path: row.get(19)?,
    })
}

impl EventStore for SqliteStore {
    fn append(&self, mut events: Vec<Event>) -> Result<Vec<Event>> {
        let mut guard = self.writer.lock().expect("writer lock");
        let writer = &mut *guard;
        self.start_checkpointer(&writer.conn);
        let tx = writer
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.classify(e))?;
        let version: i64 = tx
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(storage)?;
        if writer.data_version != Some(version) || writer.cache.len() > StateCache::MAX_ENTRIES {
            writer.cache = StateCache::default();
        }
        let result = (|| {
            let mut counts = CountChanges::default();
            for (position, e) in events.iter_mut().enumerate() {
                let before = current(&tx, &mut writer.cache, e).map_err(storage)?;
                check(e, &before).map_err(|refusal| LogError::Refused {
                    position,
                    kind: e.kind.to_string(),
                    status: e.status.to_string(),
                    reason: refusal.0,
                    refusal: refusal.1,
                })?;
                e.idx = insert_event(&tx, e).map_err(storage)?;
                project(&tx, e, &before, &mut counts).map_err(storage)?;
                writer.cache.remember(e, &before);
            }
            counts.write(&tx).map_err(storage)
        })()
        .and_then(|()| tx.commit().map_err(|e| self.classify(e)));
        match result {
            Ok(()) => {
                writer.data_version = Some(version);
                self.written();
                Ok(events)
            }
            Err(e) => {
                // The cache holds states of a batch that was rolled back.
                writer.cache = StateCache::default();
                writer.data_version = None;
                Err(e)
            }
        }
    }

    fn events(&self, f: &EventFilter) -> Result<Vec<Event>> {
        let mut filters = Filters::default();
        filters.add("idx >", f.since.unwrap_or(0).into());
        let texts = [
            ("build_request_id =", &f.build_request_id),
            ("partition_ref =", &f.partition_ref),
            ("job =", &f.job),
            ("job_run_id =", &f.job_run_id),
        ];
        for (column_op, value) in texts {
            if let Some(v) = value {
                filters.add(column_op, v.clone().into());
            }
        }
        if let Some(k) = f.kind {
            // A literal (kinds are fixed names), so partial indexes on rare kinds serve it.
            filters.raw(&format!("kind = '{}'", k.as_str()));
        }
        if let Some(v) = f.from {
            filters.add("timestamp >=", v.into());
        }
        if let Some(v) = f.to {
            filters.add("timestamp <", v.into());
        }
        let limit = f.limit.map(|l| format!(" LIMIT {l}")).unwrap_or_default();
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events{} ORDER BY idx{limit}",
            filters.clause
        );
        self.read(|c| {
            c.prepare_cached(&sql)?
                .query_map(rusqlite::params_from_iter(filters.values), event_from_row)?
                .collect()
        })
    }

    fn last_idx(&self) -> Result<i64> {
        self.read(|c| c.query_row("SELECT coalesce(max(idx), 0) FROM events", [], |r| r.get(0)))
    }

    fn partition(&self, r: &str) -> Result<Option<PartitionRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {PARTITION_COLUMNS} FROM partitions WHERE partition_ref = ?1"
            ))?
            .query_row([r], partition_from_row)
            .optional()
        })
    }

    fn partitions_by_ref(&self, refs: &[&str]) -> Result<Vec<PartitionRow>> {
        self.read(|c| {
            // One read transaction for all lookups: SQLite otherwise takes and drops its file
            // locks around every single query.
            c.execute_batch("BEGIN")?;
            let result = (|| {
                let mut stmt = c.prepare_cached(&format!(
                    "SELECT {PARTITION_COLUMNS} FROM partitions WHERE partition_ref = ?1"
                ))?;
                let mut found = Vec::new();
                for r in refs {
                    if let Some(row) = stmt.query_row([r], partition_from_row).optional()? {
                        found.push(row);
                    }
                }
                Ok(found)
            })();
            c.execute_batch("COMMIT")?;
            result
        })
    }

    fn partitions(&self, q: &PartitionQuery) -> Result<Vec<PartitionRow>> {
        // Only the filters given go into the statement: `?1 IS NULL OR ...` would keep SQLite
        // from using the indexes behind them.
        let mut filters = Filters::default();
        if let Some(p) = &q.pattern {
            filters.add("partition_ref GLOB", p.clone().into());
        }
        if let Some(st) = q.status {
            filters.add("status =", st.as_str().to_string().into());
        }
        if let Some(a) = &q.after {
            filters.add("partition_ref >", a.clone().into());
        }
        let sql = format!(
            "SELECT {PARTITION_COLUMNS} FROM partitions{} ORDER BY partition_ref LIMIT {}",
            filters.clause, q.limit
        );
        self.read(|c| {
            c.prepare_cached(&sql)?
                .query_map(
                    rusqlite::params_from_iter(filters.values),
                    partition_from_row,
                )?
                .collect()
        })
    }

    fn partition_counts(&self, pattern: Option<&str>) -> Result<BTreeMap<Status, u64>> {
        self.read(|c| {
            let rows = c
                .prepare_cached(
                    "SELECT status, count(*) FROM partitions
                     WHERE (?1 IS NULL OR partition_ref GLOB ?1) GROUP BY status",
                )?
                .query_map([pattern], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.into_iter()
                .map(|(s, n)| Ok((status_of(s)?, n as u64)))
                .collect()
        })
    }

    fn job_partition_counts(&self, job: &str) -> Result<BTreeMap<Status, u64>> {
        self.read(|c| {
            let rows = c
                .prepare_cached("SELECT status, n FROM partition_counts WHERE job = ?1 AND n > 0")?
                .query_map([job], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            rows.into_iter()
                .map(|(s, n)| Ok((status_of(s)?, n as u64)))
                .collect()
        })
    }

    fn build_request(&self, id: &str) -> Result<Option<BuildRequestRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {BUILD_COLUMNS} FROM build_requests WHERE build_request_id = ?1"
            ))?
            .query_row([id], build_from_row)
            .optional()
        })
    }

    fn build_requests(&self, q: &BuildQuery) -> Result<Vec<BuildRequestRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {BUILD_COLUMNS} FROM build_requests
                 WHERE (?1 IS NULL OR status = ?1)
                   AND (NOT ?3 OR (status IN ('received', 'planning', 'analysis_completed', 'executing')
                                   AND NOT analyze_only))
                 ORDER BY created_at DESC, build_request_id LIMIT ?2"
            ))?
            .query_map(
                params![q.status.map(|s| s.as_str()), q.limit as i64, q.unfinished],
                build_from_row,
            )?
            .collect()
        })
    }

    fn request_partitions(&self, id: &str) -> Result<Vec<RequestPartitionRow>> {
        self.read(|c| {
            c.prepare_cached(
                "SELECT partition_ref, status, job_run_id FROM request_partitions
                 WHERE build_request_id = ?1 ORDER BY partition_ref",
            )?
            .query_map([id], |r| {
                Ok(RequestPartitionRow {
                    partition_ref: r.get(0)?,
                    status: status_of(r.get(1)?)?,
                    job_run_id: r.get(2)?,
                })
            })?
            .collect()
        })
    }

    fn job_run(&self, id: &str) -> Result<Option<JobRunRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM job_runs WHERE job_run_id = ?1"
            ))?
            .query_row([id], run_from_row)
            .optional()
        })
    }

    fn want(&self, id: &str) -> Result<Option<WantRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {WANT_COLUMNS} FROM wants WHERE want_id = ?1"
            ))?
            .query_row([id], want_from_row)
            .optional()
        })
    }

    fn wants(&self, status: Option<Status>, active: bool, limit: usize) -> Result<Vec<WantRow>> {
        let mut filters = Filters::default();
        if let Some(s) = status {
            filters.add("status =", s.as_str().to_string().into());
        }
        if active {
            filters.raw("status NOT IN ('expired', 'cancelled')");
        }
        let sql = format!(
            "SELECT {WANT_COLUMNS} FROM wants{} ORDER BY created_at DESC, want_id LIMIT {limit}",
            filters.clause
        );
        self.read(|c| {
            c.prepare_cached(&sql)?
                .query_map(rusqlite::params_from_iter(filters.values), want_from_row)?
                .collect()
        })
    }

    fn job_runs(&self, q: &RunQuery) -> Result<Vec<JobRunRow>> {
        let mut filters = Filters::default();
        if let Some(j) = &q.job {
            filters.add("job =", j.clone().into());
        }
        if let Some(b) = &q.build_request_id {
            filters.add("build_request_id =", b.clone().into());
        }
        if q.unfinished {
            filters.raw("status IN ('scheduled', 'running')");
        }
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM job_runs{} ORDER BY scheduled_at DESC, job_run_id LIMIT {}",
            filters.clause, q.limit
        );
        self.read(|c| {
            c.prepare_cached(&sql)?
                .query_map(rusqlite::params_from_iter(filters.values), run_from_row)?
                .collect()
        })
    }

    fn job_stats(&self, job: Option<&str>) -> Result<Vec<JobStats>> {
        self.read(|c| {
            // Counts come from the (job, status, scheduled_at) index alone; durations from the
            // most recent completed runs only.
            let mut per_job: BTreeMap<String, (BTreeMap<Status, u64>, Option<i64>)> = BTreeMap::new();
            let sql = match job {
                Some(_) => "SELECT job, status, n, last_scheduled_at FROM job_counts WHERE job = ?1",
                None => "SELECT job, status, n, last_scheduled_at FROM job_counts WHERE ?1 IS NULL",
            };
            let rows = c
                .prepare_cached(sql)?
                .query_map([job], |r| {
                    Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?, r.get::<_, i64>(2)?, r.get::<_, Option<i64>>(3)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            for (job, status, n, last) in rows {
                let entry = per_job.entry(job).or_default();
                if n > 0 {
                    entry.0.insert(status_of(status)?, n as u64);
                }
                entry.1 = entry.1.max(last);
            }
            let mut durations = c.prepare_cached(
                "SELECT (ended_at - started_at) / 1e6 FROM job_runs
                 WHERE job = ?1 AND status = 'completed' AND started_at IS NOT NULL AND ended_at IS NOT NULL
                 ORDER BY scheduled_at DESC LIMIT ?2",
            )?;
            per_job
                .into_iter()
                .map(|(job, (counts, last))| {
                    let ms = durations
                        .query_map(params![job, DURATION_SAMPLE as i64], |r| r.get::<_, f64>(0))?
                        .collect::<rusqlite::Result<Vec<_>>>()?;
                    Ok(JobStats::from_counts(&job, &counts, last, ms))
                })
                .collect()
        })
    }

    fn sql(&self, query: &str, limits: SqlLimits) -> Result<SqlResult> {
        if query.len() > SQL_MAX_QUERY_LEN {
            return Err(LogError::Sql(format!(
                "the query is {} bytes long; at most {SQL_MAX_QUERY_LEN} are allowed",
                query.len()
            )));
        }
        let mut conn = self.sql_connection(&limits)?;
        let deadline = Instant::now() + limits.timeout;
        conn.progress_handler(10_000, Some(move || Instant::now() > deadline))
            .map_err(storage)?;
        let _disarm = arm_deadline(&conn, limits.timeout);
        let refused = |e: rusqlite::Error| sql_refusal(e, &limits);
        // A batch prepares one statement at a time: a second one (even one the authorizer refuses)
        // means the query holds several.
        let mut batch = rusqlite::Batch::new(&conn, query);
        let mut stmt = match batch.next().map_err(refused)? {
            Some(stmt) => stmt,
            None => return Err(LogError::Sql("the query is empty".to_string())),
        };
        if !matches!(batch.next(), Ok(None)) {
            return Err(LogError::Sql(
                "only one statement per query is allowed".to_string(),
            ));
        }
        if !stmt.readonly() {
            return Err(LogError::Sql(
                "the query is refused: only reads are allowed on the event log".to_string(),
            ));
        }
        let columns: Vec<String> = stmt.column_names().map(|c| c.to_string()).collect();
        let width = columns.len();
        let mut size = ResultSize::new(&columns, &limits);
        let mut rows = Vec::new();
        let mut truncated = false;
        let mut cursor = stmt.query([]).map_err(refused)?;
        while let Some(row) = cursor.next().map_err(refused)? {
            if rows.len() == limits.max_rows {
                truncated = true;
                break;
            }
            let mut values = Vec::with_capacity(width);
            for i in 0..width {
                use rusqlite::types::ValueRef;
                let value = match row.get_ref(i).map_err(refused)? {
                    ValueRef::Null => serde_json::Value::Null,
                    ValueRef::Integer(n) => n.into(),
                    ValueRef::Real(f) => serde_json::Number::from_f64(f)
                        .map_or(serde_json::Value::Null, serde_json::Value::Number),
                    ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
                    ValueRef::Blob(b) => format!("<{} bytes>", b.len()).into(),
                };
                size.add(&value)?;
                values.push(value);
            }
            rows.push(values);
        }
        Ok(SqlResult {
            columns,
            rows,
            truncated,
        })
    }

    fn heartbeat(&self, owner: &str) -> Result<()> {
        let guard = self.writer.lock().expect("writer lock");
        self.start_checkpointer(&guard.conn);
        guard
            .conn
            .execute(
                "INSERT INTO heartbeats (owner, at) VALUES (?1, ?2)
                 ON CONFLICT (owner) DO UPDATE SET at = excluded.at",
                params![owner, crate::event::now_ns()],
            )
            .map_err(|e| self.classify(e))?;
        self.written();
        Ok(())
    }

    fn last_heartbeat(&self, owner: &str) -> Result<Option<i64>> {
        self.read(|c| {
            c.query_row("SELECT at FROM heartbeats WHERE owner = ?1", [owner], |r| {
                r.get(0)
            })
            .optional()
        })
    }

    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interrupt armed beside the progress handler stops a statement on its own.
    #[test]
    fn the_deadline_interrupts_a_user_query_by_itself() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let conn = store.sql_connection(&SqlLimits::default()).unwrap();
        let _disarm = arm_deadline(&conn, Duration::from_millis(200));
        let started = Instant::now();
        let endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
                       SELECT count(*) FROM n";
        let err = conn
            .query_row(endless, [], |r| r.get::<_, i64>(0))
            .unwrap_err();
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::OperationInterrupted)
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }

    /// The checkpointer copies the WAL into the database file on its own, well before the
    /// writer's backstop (`WRITER_CHECKPOINT_PAGES`) would.
    #[test]
    fn the_checkpointer_copies_writes_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let store = SqliteStore::open(&path).unwrap();
        let size = || std::fs::metadata(&path).unwrap().len();
        let before = size();
        for b in 0..20 {
            let br = format!("br-{b}");
            let mut events = vec![Event::build_request(&br, Status::Received)];
            for p in 0..100 {
                events.push(Event::partition(
                    Some(&br),
                    &format!("p/{b}/{p}"),
                    Status::Requested,
                ));
            }
            store.append(events).unwrap();
        }
        let wal = std::fs::metadata(path.with_extension("db-wal"))
            .unwrap()
            .len();
        assert!(wal > 100 * 4096, "the writes went to the WAL ({wal} bytes)");
        let deadline = Instant::now() + Duration::from_secs(5);
        while size() <= before {
            assert!(Instant::now() < deadline, "nothing was checkpointed");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(store);
        assert_eq!(SqliteStore::open(&path).unwrap().last_idx().unwrap(), 2020);
    }
}
