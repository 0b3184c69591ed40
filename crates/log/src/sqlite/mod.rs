//! The SQLite event log: the embedded default.
//!
//! One writer connection behind a mutex appends batches in `BEGIN IMMEDIATE` transactions, so two
//! processes on one file serialize their writes and each batch validates against the state the
//! other left. Readers use their own connections (WAL lets them read while the writer writes).
//! User SQL runs on a separate read-only connection with an authorizer, a row cap and a deadline.
//! The schema is documented in `docs/event-log.md`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::{
    params, Connection, OpenFlags, OptionalExtension, Transaction, TransactionBehavior,
};

mod wal_batch;

use crate::cache::{PartitionState, StateCache};
use crate::event::{Event, Status};
use crate::projection::*;
use crate::store::*;

/// Marks a SQLite file as a DataBuild event log (`PRAGMA application_id`): "DBLG".
const APPLICATION_ID: i64 = 0x4442_4C47;

/// The schema, as numbered migrations. Version N is reached by applying the first N steps.
/// Never edit a step that has shipped; add one.
const MIGRATIONS: &[&str] = &[
    include_str!("v1.sql"),
    include_str!("v2.sql"),
    include_str!("v3.sql"),
    include_str!("v4.sql"),
    include_str!("v5.sql"),
    include_str!("v6.sql"),
    include_str!("v7.sql"),
    include_str!("v8.sql"),
    include_str!("v9.sql"),
    include_str!("v10.sql"),
    include_str!("v11.sql"),
];

pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Page cache sizes. Appends touch several indexes at random keys; with SQLite's default 2 MiB
/// cache the writer spends most of its time re-reading and spilling pages. A build's commits are
/// small: 8 MiB holds what they touch, and a 24k-job build holds 27 MB less than with 32. A
/// larger cache also costs every commit that split a page: `balance_nonroot` swaps two pages
/// through a temporary page number past the database's end (the lock page's, 262,145), so the
/// `COMMIT` then truncates the cache by walking its whole hash table (`pcache1TruncateUnsafe`,
/// 10% of the scheduler thread's CPU with 32 MiB).
const WRITER_CACHE_KIB: i64 = 8 * 1024;
/// The writer's cache for a bulk batch (a backfill's plan record): with 8 MiB, `analyze` of a
/// million partitions takes 7.3 s instead of 5.2, re-reading index pages. Back to
/// [`WRITER_CACHE_KIB`] after it.
const BULK_CACHE_KIB: i64 = 32 * 1024;
/// Rows a batch writes past which it gets [`BULK_CACHE_KIB`]: a 24k-job build's plan record is
/// below it, a 100k-partition backfill's (302k runs) above.
const BULK_ROWS: usize = 100_000;
const READER_CACHE_KIB: i64 = 8 * 1024;
/// A user query's page cache: small, and its sorts and temporary tables spill to files, so one
/// query holds little of the log in memory however much it reads.
const SQL_CACHE_KIB: i64 = 2 * 1024;
/// The longest string or blob a user query may read or build on the way to its result (which
/// holds shorter ones, `SqlLimits::max_value_len`): a stored value of a run reading ~250,000
/// partitions, while a query building values out of nothing stays bounded per value.
const SQL_WORKING_VALUE_LEN: usize = 16 << 20;
/// The longest user query (SQLite's own limit is 1 GB of text to parse).
const SQL_MAX_QUERY_LEN: usize = 100_000;

/// Connection settings shared by the writer and readers. Reads go through `pread` and the page
/// cache above, not a memory map: every page a process maps stays in its resident memory, so a
/// read of the whole log (`datasets --exact` on 3M events) held 941 MB, the 24k no-op build 122
/// MB of mapped log beside its own 48; without the map they hold 52 and 12 MB, and take the same
/// time within 10% (BENCHMARKS.md, "Workload shapes beside make").
fn tune(conn: &Connection, cache_kib: i64) -> Result<()> {
    set_cache(conn, cache_kib)?;
    leave_wal_on_close(conn)?;
    conn.pragma_update(None, "mmap_size", 0).map_err(storage)?;
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(storage)?;
    Ok(())
}

/// A closing connection leaves the WAL as it is: the store decides at its drop
/// ([`CLOSE_TRUNCATE_BYTES`]). SQLite's last connection to close would copy the WAL into the
/// database, sync it and remove it every time: 20 ms at the end of a 24k no-op build (4 MB of
/// WAL), against ~1 ms per MB for the next command to read that WAL back at its first open.
fn leave_wal_on_close(conn: &Connection) -> Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .map(|_| ())
    .map_err(storage)
}

/// Sets a connection's page cache; a smaller one frees the pages it no longer holds at once.
fn set_cache(conn: &Connection, cache_kib: i64) -> Result<()> {
    conn.pragma_update(None, "cache_size", -cache_kib)
        .map_err(storage)
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
        leave_wal_on_close(&conn).ok()?;
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

/// A WAL file past this size is copied into the database and emptied when the store closes
/// (after a build, say), so the next command does not read it back; a smaller one is left for a
/// later command (a no-op build adds ~4 MB at 24k jobs). It bounds what a command's first open
/// reads, and what the log leaves on disk beside the database.
const CLOSE_TRUNCATE_BYTES: u64 = 16 << 20;

impl Drop for SqliteStore {
    fn drop(&mut self) {
        if let Ok(writer) = self.writer.get_mut() {
            empty_wal_past(&writer.conn, &self.path, CLOSE_TRUNCATE_BYTES);
        }
    }
}

/// Copies the WAL into the database and empties it if its file is larger than `limit`. Best
/// effort: what it cannot copy now (a reader elsewhere holds it), a later close does.
fn empty_wal_past(conn: &Connection, path: &Path, limit: u64) {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > limit) {
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
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
    /// The `idx` the next event takes, while nobody else wrote (like `cache`).
    next_idx: Option<i64>,
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

/// How many prepared statements the writing connection keeps.
const WRITER_STATEMENTS: usize = 64;

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
        // An append's statements (~30, six of them the events' inserts) outnumber the 16
        // rusqlite keeps by default: each one evicted would be parsed again at its next use.
        conn.set_prepared_statement_cache_capacity(WRITER_STATEMENTS);
        let store = SqliteStore {
            path: path.to_path_buf(),
            writer: Mutex::new(Writer {
                conn,
                cache: StateCache::default(),
                next_idx: None,
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

    /// The log's schema version; an error if the file is not an event log, or one newer than
    /// this build understands. A file with no tables is version 0.
    fn schema_version(&self, tx: &rusqlite::Transaction<'_>) -> Result<i64> {
        let location = self.location();
        let app_id: i64 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| self.classify(e))?;
        let tables: i64 = tx
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| self.classify(e))?;
        if tables == 0 {
            return Ok(0);
        }
        if app_id != APPLICATION_ID {
            return Err(LogError::Open {
                location,
                message: "the file is an SQLite database but not a DataBuild event log".into(),
            });
        }
        let version: i64 = tx
            .query_row(
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
            })?;
        if version > SCHEMA_VERSION {
            return Err(LogError::NewerSchema {
                location,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(version)
    }

    fn prepare_schema(&self) -> Result<()> {
        let mut writer = self.writer.lock().expect("writer lock");
        let conn = &mut writer.conn;
        // WAL lets readers proceed while a writer appends; NORMAL sync keeps every committed batch
        // across process crashes (power loss may drop the last few).
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| self.classify(e))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(storage)?;
        tune(conn, WRITER_CACHE_KIB)?;
        // Most opens find the schema current: they read it without the write lock, which
        // another process may hold for a while (a long batch, a `sqlite3` shell); in WAL mode a
        // reader never waits for it.
        {
            let tx = conn.transaction().map_err(|e| self.classify(e))?;
            if self.schema_version(&tx)? == SCHEMA_VERSION {
                return Ok(());
            }
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.classify(e))?;
        // Read again under the lock: another process may have migrated meanwhile.
        let version = self.schema_version(&tx)?;
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

    /// Appends `events` in one transaction of `writer`'s (see [`EventStore::append`]).
    fn append_in(&self, writer: &mut Writer, events: &mut [Event]) -> Result<()> {
        let tx = writer
            .conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.classify(e))?;
        let version: i64 = tx
            .query_row("PRAGMA data_version", [], |r| r.get(0))
            .map_err(storage)?;
        if writer.data_version != Some(version) {
            // Another connection wrote: what the writer kept of the log may be out of date.
            writer.next_idx = None;
            writer.cache = StateCache::default();
        } else if writer.cache.len() > StateCache::MAX_ENTRIES {
            writer.cache = StateCache::default();
        }
        let mut append = SqliteAppend {
            tx: &tx,
            first_idx: writer.next_idx,
        };
        let appended = append_batch(&mut append, &mut writer.cache, events);
        let next_idx = append.first_idx.map(|first| first + events.len() as i64);
        let result = appended.and_then(|()| tx.commit().map_err(|e| self.classify(e)));
        match result {
            Ok(()) => {
                writer.next_idx = next_idx;
                writer.data_version = Some(version);
                self.written();
                Ok(())
            }
            Err(e) => {
                // The cache holds states of a batch that was rolled back.
                writer.cache = StateCache::default();
                writer.next_idx = None;
                writer.data_version = None;
                Err(e)
            }
        }
    }

    /// The rows `sql` finds for each key (`?1`), in the keys' order: one read transaction for
    /// all, since SQLite otherwise takes and drops its file locks around every single query.
    fn lookup_each<T>(
        &self,
        sql: &str,
        keys: &[&str],
        row: impl Fn(&rusqlite::Row<'_>) -> rusqlite::Result<T>,
    ) -> Result<Vec<T>> {
        self.read(|c| {
            c.execute_batch("BEGIN")?;
            let result = (|| {
                let mut stmt = c.prepare_cached(sql)?;
                // Not sized by the keys: planning a backfill asks for millions never built.
                let mut found = Vec::new();
                for key in keys {
                    for found_row in stmt.query_map([key], &row)? {
                        found.push(found_row?);
                    }
                }
                Ok(found)
            })();
            c.execute_batch("COMMIT")?;
            result
        })
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
    ///
    /// The flag returned is raised whenever the authorizer refuses something: SQLite reports a
    /// refused function as a plain `SQLITE_ERROR`, with no code of its own, so the flag is how
    /// [`sql_refusal`] tells a refusal from any other failure.
    fn sql_connection(&self, limits: &SqlLimits) -> Result<(Connection, Arc<AtomicBool>)> {
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
        // What the query may read and build on the way is larger than what it may return: the
        // log holds values over 1 MiB (the inputs of a run reading 80,000 partitions), and
        // `length` or `substr` of one must work. Returned values are held to `max_value_len`
        // as they are read out.
        let value_len = limits.max_value_len.max(SQL_WORKING_VALUE_LEN);
        let value_len = i32::try_from(value_len).unwrap_or(i32::MAX);
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, value_len)
            .map_err(storage)?;
        conn.set_limit(Limit::SQLITE_LIMIT_SQL_LENGTH, SQL_MAX_QUERY_LEN as i32)
            .map_err(storage)?;
        conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)
            .map_err(storage)?;
        let denied = Arc::new(AtomicBool::new(false));
        let noted = denied.clone();
        let decide = |ctx: AuthContext<'_>| match ctx.action {
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
        };
        conn.authorizer(Some(move |ctx: AuthContext<'_>| {
            let answer = decide(ctx);
            if answer == Authorization::Deny {
                noted.store(true, Ordering::Relaxed);
            }
            answer
        }))
        .map_err(storage)?;
        Ok((conn, denied))
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
/// `denied`: the connection's authorizer refused something while the query was prepared.
fn sql_refusal(e: rusqlite::Error, limits: &SqlLimits, denied: bool) -> LogError {
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
        // A refused function fails its statement with a plain SQLITE_ERROR: the authorizer's
        // own note tells it apart.
        _ if denied => read_only(),
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

/// A status read by the append's validation.
fn status_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<String> {
    row.get(0)
}

fn parse_status(s: Option<String>) -> Result<Option<Status>> {
    s.map(|s| status_of(&s)).transpose()
}

impl Columns for rusqlite::Row<'_> {
    type Error = rusqlite::Error;

    fn text(&self, i: usize) -> rusqlite::Result<String> {
        self.get(i)
    }

    fn opt_text(&self, i: usize) -> rusqlite::Result<Option<String>> {
        self.get(i)
    }

    fn int(&self, i: usize) -> rusqlite::Result<i64> {
        self.get(i)
    }

    fn opt_int(&self, i: usize) -> rusqlite::Result<Option<i64>> {
        self.get(i)
    }

    fn flag(&self, i: usize) -> rusqlite::Result<bool> {
        self.get(i)
    }

    fn corrupt(&self, i: usize, what: String) -> rusqlite::Error {
        rusqlite::Error::FromSqlConversionFailure(i, rusqlite::types::Type::Text, what.into())
    }
}

/// The statements that insert events, by how many rows each inserts: a batch goes in as few
/// statements as its length's binary digits, each one prepared once per connection. Their
/// columns are the ones events are read back by, in that order ([`EVENT_COLUMNS`]).
static EVENT_INSERTS: std::sync::LazyLock<Vec<(usize, String)>> = std::sync::LazyLock::new(|| {
    let columns = EVENT_COLUMNS.split(',').count();
    let row = format!("({})", vec!["?"; columns].join(", "));
    [32, 16, 8, 4, 2, 1]
        .into_iter()
        .map(|rows| {
            let values = vec![row.as_str(); rows].join(", ");
            (
                rows,
                format!("INSERT INTO events ({EVENT_COLUMNS}) VALUES {values}"),
            )
        })
        .collect()
});

/// The append's statements on SQLite, each prepared once per connection (`prepare_cached`).
struct SqliteAppend<'a, 'c> {
    tx: &'a Transaction<'c>,
    /// The `idx` the batch's first event takes, once known.
    first_idx: Option<i64>,
}

impl SqliteAppend<'_, '_> {
    fn status(&self, sql: &str, keys: &[&str]) -> Result<Option<Status>> {
        let status = self
            .tx
            .prepare_cached(sql)
            .and_then(|mut s| {
                s.query_row(rusqlite::params_from_iter(keys), status_row)
                    .optional()
            })
            .map_err(storage)?;
        parse_status(status)
    }

    fn execute(&self, sql: &str, params: impl rusqlite::Params) -> Result<()> {
        self.tx
            .prepare_cached(sql)
            .and_then(|mut s| s.execute(params))
            .map(drop)
            .map_err(storage)
    }

    /// The reverse index of what a run read, as it started.
    fn insert_run_inputs(&self, start: &Event) -> Result<()> {
        let d = &start.data;
        for (input, version) in &d.input_versions {
            self.execute(
                "INSERT INTO run_inputs (input_ref, input_run_id, data_version, job_run_id)
                 VALUES (?1, ?2, ?3, ?4)",
                params![input, d.input_runs.get(input), version, start.job_run_id],
            )?;
        }
        Ok(())
    }

    /// A run's row from its first event, and from its start when the batch has both (the
    /// start's columns are `NULL` without one).
    fn insert_run_row(&self, first: &Event, start: Option<&Event>) -> Result<()> {
        let d = &first.data;
        let s = start.map(|s| &s.data);
        self.execute(
            "INSERT INTO job_runs (job_run_id, job, build_request_id, status, outputs, inputs,
                                   args, env, scheduled_at, message, relies_on, job_version,
                                   started_at, pid, host, owner, input_versions, log_path,
                                   input_runs)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,
                     ?13, ?14, ?15, ?16, ?17, ?18, ?19)",
            params![
                first.job_run_id,
                first.job,
                first.build_request_id,
                start.unwrap_or(first).status.as_str(),
                to_json(&d.outputs),
                to_json(&d.inputs),
                to_json(&d.args),
                to_json(&d.env),
                first.timestamp,
                first.message,
                d.relies_on,
                d.job_version,
                start.map(|s| s.timestamp),
                s.and_then(|s| s.pid),
                s.and_then(|s| s.host.as_deref()),
                s.and_then(|s| s.owner.as_deref()),
                s.map(|s| to_json(&s.input_versions)),
                s.and_then(|s| s.log_path.as_deref()),
                s.filter(|s| !s.input_runs.is_empty())
                    .map(|s| to_json(&s.input_runs)),
            ],
        )
    }

    /// Inserts `events` with one statement of `sql` (one of [`EVENT_INSERTS`], as many rows),
    /// binding each event's columns in [`EVENT_COLUMNS`]' order.
    fn insert_event_rows(&self, sql: &str, events: &[Event]) -> Result<()> {
        let mut stmt = self.tx.prepare_cached(sql).map_err(storage)?;
        let mut column = 0;
        let mut bind = |value: &dyn rusqlite::ToSql| {
            column += 1;
            stmt.raw_bind_parameter(column, value)
        };
        for e in events {
            let data = (!e.data.is_empty()).then(|| to_json(&e.data));
            bind(&e.idx)
                .and_then(|()| bind(&e.event_id))
                .and_then(|()| bind(&e.timestamp))
                .and_then(|()| bind(&e.build_request_id))
                .and_then(|()| bind(&e.kind.as_str()))
                .and_then(|()| bind(&e.status.as_str()))
                .and_then(|()| bind(&e.partition_ref))
                .and_then(|()| bind(&e.job))
                .and_then(|()| bind(&e.job_run_id))
                .and_then(|()| bind(&e.delegated_to))
                .and_then(|()| bind(&e.message))
                .and_then(|()| bind(&data))
                .map_err(storage)?;
        }
        stmt.raw_execute().map(drop).map_err(storage)
    }

    /// An update of a run's row that returns its job.
    fn update_run(&self, sql: &str, params: impl rusqlite::Params) -> Result<String> {
        self.tx
            .prepare_cached(sql)
            .and_then(|mut s| s.query_row(params, |r| r.get(0)))
            .map_err(storage)
    }
}

impl AppendTx for SqliteAppend<'_, '_> {
    fn build_request_status(&mut self, id: &str) -> Result<Option<Status>> {
        self.status(
            "SELECT status FROM build_requests WHERE build_request_id = ?1",
            &[id],
        )
    }

    fn job_run_status(&mut self, id: &str) -> Result<Option<Status>> {
        self.status("SELECT status FROM job_runs WHERE job_run_id = ?1", &[id])
    }

    fn want_status(&mut self, id: &str) -> Result<Option<Status>> {
        self.status("SELECT status FROM wants WHERE want_id = ?1", &[id])
    }

    fn request_partition_status(&mut self, br: &str, r: &str) -> Result<Option<Status>> {
        self.status(
            "SELECT status FROM request_partitions
             WHERE build_request_id = ?1 AND partition_ref = ?2",
            &[br, r],
        )
    }

    fn partition_state(&mut self, r: &str) -> Result<Option<PartitionState>> {
        let row = self
            .tx
            .prepare_cached(
                "SELECT status, job_run_id, coalesce(job, '') FROM partitions
                 WHERE partition_ref = ?1",
            )
            .and_then(|mut s| {
                s.query_row([r], |row| {
                    Ok((
                        row.get::<_, String>(0)?,
                        row.get::<_, Option<String>>(1)?,
                        row.get::<_, String>(2)?,
                    ))
                })
                .optional()
            })
            .map_err(storage)?;
        row.map(|(status, run, job)| {
            Ok(PartitionState {
                status: status_of(&status)?,
                run,
                job,
            })
        })
        .transpose()
    }

    fn first_idx(&mut self) -> Result<i64> {
        if let Some(idx) = self.first_idx {
            return Ok(idx);
        }
        // As `AUTOINCREMENT` would give it: past every `idx` the log ever gave.
        let idx = self
            .tx
            .prepare_cached(
                "SELECT max(coalesce((SELECT seq FROM sqlite_sequence WHERE name = 'events'), 0),
                            coalesce((SELECT max(idx) FROM events), 0)) + 1",
            )
            .and_then(|mut s| s.query_row([], |r| r.get(0)))
            .map_err(storage)?;
        self.first_idx = Some(idx);
        Ok(idx)
    }

    fn insert_events(&mut self, events: &[Event]) -> Result<()> {
        let mut rest = events;
        while !rest.is_empty() {
            let (rows, sql) = EVENT_INSERTS
                .iter()
                .find(|(rows, _)| *rows <= rest.len())
                .expect("one row is always there");
            let (chunk, tail) = rest.split_at(*rows);
            self.insert_event_rows(sql, chunk)?;
            rest = tail;
        }
        Ok(())
    }

    fn insert_build_request(&mut self, e: &Event) -> Result<()> {
        let (all, count, head) = requested_columns(&e.data.requested);
        self.execute(
            "INSERT INTO build_requests (build_request_id, status, requested, analyze_only,
                                         owner, message, created_at, updated_at,
                                         requested_count, requested_head)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7, ?8, ?9)",
            params![
                e.build_request_id,
                e.status.as_str(),
                all,
                e.data.analyze_only,
                e.data.owner,
                e.message,
                e.timestamp,
                count,
                head
            ],
        )
    }

    fn update_build_request(&mut self, e: &Event) -> Result<()> {
        self.execute(
            "UPDATE build_requests SET status = ?2, updated_at = ?3,
                    message = coalesce(?4, message)
             WHERE build_request_id = ?1",
            params![
                e.build_request_id,
                e.status.as_str(),
                e.timestamp,
                e.message
            ],
        )
    }

    fn insert_job_run(&mut self, e: &Event) -> Result<()> {
        self.insert_run_row(e, None)
    }

    fn start_job_run(&mut self, e: &Event) -> Result<String> {
        let d = &e.data;
        let job = self.update_run(
            "UPDATE job_runs SET status = ?2, started_at = ?3, pid = ?4, host = ?5,
                    owner = ?6, input_versions = ?7, log_path = ?8, input_runs = ?9
             WHERE job_run_id = ?1 RETURNING job",
            params![
                e.job_run_id,
                e.status.as_str(),
                e.timestamp,
                d.pid,
                d.host,
                d.owner,
                to_json(&d.input_versions),
                d.log_path,
                (!d.input_runs.is_empty()).then(|| to_json(&d.input_runs)),
            ],
        )?;
        self.insert_run_inputs(e)?;
        Ok(job)
    }

    fn insert_started_job_run(&mut self, first: &Event, start: &Event) -> Result<String> {
        self.insert_run_row(first, Some(start))?;
        self.insert_run_inputs(start)?;
        Ok(first.job.clone().unwrap_or_default())
    }

    fn end_job_run(&mut self, e: &Event) -> Result<String> {
        self.update_run(
            "UPDATE job_runs SET status = ?2, ended_at = ?3, exit_code = ?4,
                    message = coalesce(?5, message),
                    started_at = CASE WHEN ?6 THEN NULL ELSE coalesce(?7, started_at) END
             WHERE job_run_id = ?1 RETURNING job",
            params![
                e.job_run_id,
                e.status.as_str(),
                e.timestamp,
                e.data.exit_code,
                e.message,
                e.data.not_started,
                e.data.started_at
            ],
        )
    }

    fn upsert_request_partition(&mut self, br: &str, e: &Event) -> Result<()> {
        self.execute(
            "INSERT INTO request_partitions (build_request_id, partition_ref, status,
                                             job_run_id, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (build_request_id, partition_ref) DO UPDATE SET
                status = excluded.status,
                job_run_id = coalesce(excluded.job_run_id, job_run_id),
                updated_at = excluded.updated_at",
            params![
                br,
                e.partition_ref,
                e.status.as_str(),
                e.job_run_id,
                e.timestamp
            ],
        )
    }

    fn upsert_partition(&mut self, e: &Event, status: Status, run: Option<&str>) -> Result<()> {
        self.execute(
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
            params![
                e.partition_ref,
                status.as_str(),
                run,
                e.build_request_id,
                e.job,
                e.data.data_version,
                e.message,
                e.timestamp
            ],
        )
    }

    fn claimed_partition(&mut self, r: &str) -> Result<(Option<String>, String)> {
        self.tx
            .prepare_cached(
                "SELECT prev_status, coalesce(job, '') FROM partitions WHERE partition_ref = ?1",
            )
            .and_then(|mut s| s.query_row([r], |r| Ok((r.get(0)?, r.get(1)?))))
            .map_err(storage)
    }

    fn restore_partition(&mut self, r: &str) -> Result<()> {
        self.execute(
            "UPDATE partitions SET status = prev_status, job_run_id = prev_job_run_id,
                    build_request_id = prev_build_request_id, message = prev_message,
                    updated_at = prev_updated_at, prev_status = NULL, prev_job_run_id = NULL,
                    prev_build_request_id = NULL, prev_message = NULL, prev_updated_at = NULL
             WHERE partition_ref = ?1",
            [r],
        )
    }

    fn delete_partition(&mut self, r: &str) -> Result<()> {
        self.execute("DELETE FROM partitions WHERE partition_ref = ?1", [r])
    }

    fn insert_want(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        self.execute(
            "INSERT INTO wants (want_id, status, refs, created_at, expires_at, sla_seconds,
                                recurring, message, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?4)",
            params![
                d.want_id,
                e.status.as_str(),
                to_json(&d.requested),
                e.timestamp,
                d.expires_at,
                d.sla_seconds.map(|s| s as i64),
                d.recurring,
                e.message
            ],
        )
    }

    fn count_sla_miss(&mut self, e: &Event) -> Result<()> {
        self.execute(
            "UPDATE wants SET sla_missed = sla_missed + 1, updated_at = ?2 WHERE want_id = ?1",
            params![e.data.want_id, e.timestamp],
        )
    }

    fn upsert_check(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        self.execute(
            "INSERT INTO partition_checks (partition_ref, check_name, status, blocking, job_run_id,
                    job, build_request_id, check_version, command, inline, message, metrics,
                    event_idx, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)
             ON CONFLICT (partition_ref, check_name) DO UPDATE SET
                status = excluded.status, blocking = excluded.blocking,
                job_run_id = excluded.job_run_id, job = coalesce(excluded.job, job),
                build_request_id = excluded.build_request_id,
                check_version = excluded.check_version, command = excluded.command,
                inline = excluded.inline, message = excluded.message,
                metrics = excluded.metrics, event_idx = excluded.event_idx,
                updated_at = excluded.updated_at",
            params![
                e.partition_ref,
                d.check,
                e.status.as_str(),
                d.blocking.unwrap_or(true),
                e.job_run_id,
                e.job,
                e.build_request_id,
                d.check_version,
                check_command(e),
                d.inline,
                e.message,
                check_metrics(e),
                e.idx,
                e.timestamp
            ],
        )
    }

    fn update_want(&mut self, e: &Event) -> Result<()> {
        self.execute(
            "UPDATE wants SET status = ?2, waiting_for = ?3, message = ?4,
                    build_request_id = coalesce(?5, build_request_id), updated_at = ?6
             WHERE want_id = ?1",
            params![
                e.data.want_id,
                e.status.as_str(),
                e.partition_ref,
                e.message,
                e.data.upstream,
                e.timestamp
            ],
        )
    }

    fn add_run_counts(&mut self, changes: &[RunCount<'_>]) -> Result<()> {
        let mut stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO job_counts (job, status, n, last_scheduled_at) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (job, status) DO UPDATE SET n = n + excluded.n,
                    last_scheduled_at = CASE WHEN excluded.last_scheduled_at IS NULL
                        THEN last_scheduled_at
                        ELSE max(coalesce(last_scheduled_at, 0), excluded.last_scheduled_at) END",
            )
            .map_err(storage)?;
        for c in changes {
            stmt.execute(params![c.job, c.status.as_str(), c.n, c.last_scheduled_at])
                .map_err(storage)?;
        }
        Ok(())
    }

    fn add_partition_counts(&mut self, changes: &[PartitionCount<'_>]) -> Result<()> {
        let mut stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO partition_counts (job, status, n) VALUES (?1, ?2, ?3)
                 ON CONFLICT (job, status) DO UPDATE SET n = n + excluded.n",
            )
            .map_err(storage)?;
        for c in changes {
            stmt.execute(params![c.job, c.status.as_str(), c.n])
                .map_err(storage)?;
        }
        Ok(())
    }
}

/// A parameter of a query built by [`crate::projection`]'s builders.
fn text(s: String) -> rusqlite::types::Value {
    s.into()
}

fn int(n: i64) -> rusqlite::types::Value {
    n.into()
}

/// The status column of a count query (`status_of` for rusqlite's row callbacks).
fn row_status(s: String) -> rusqlite::Result<Status> {
    Status::parse(&s).ok_or_else(|| {
        rusqlite::Error::FromSqlConversionFailure(
            0,
            rusqlite::types::Type::Text,
            format!("unknown status `{s}`").into(),
        )
    })
}

impl EventStore for SqliteStore {
    fn append(&self, mut events: Vec<Event>) -> Result<Vec<Event>> {
        let mut guard = self.writer.lock().expect("writer lock");
        let writer = &mut *guard;
        self.start_checkpointer(&writer.conn);
        let rows: usize = events.iter().map(|e| 1 + e.data.plan.len()).sum();
        let bulk = rows > BULK_ROWS;
        if bulk {
            set_cache(&writer.conn, BULK_CACHE_KIB)?;
        }
        let result = self.append_in(writer, &mut events);
        if bulk {
            // Failing, it leaves a larger cache; the batch's outcome stands either way.
            let _ = set_cache(&writer.conn, WRITER_CACHE_KIB);
        }
        result.map(|()| events)
    }

    fn events(&self, f: &EventFilter) -> Result<Vec<Event>> {
        let q = events_query(f, '?', text, int);
        self.read(|c| {
            c.prepare_cached(&q.sql)?
                .query_map(rusqlite::params_from_iter(q.values), |r| event_from_row(r))?
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
            .query_row([r], |r| partition_from_row(r))
            .optional()
        })
    }

    fn partitions_by_ref(&self, refs: &[&str]) -> Result<Vec<PartitionRow>> {
        self.lookup_each(
            &format!("SELECT {PARTITION_COLUMNS} FROM partitions WHERE partition_ref = ?1"),
            refs,
            |r| partition_from_row(r),
        )
    }

    fn partitions(&self, q: &PartitionQuery) -> Result<Vec<PartitionRow>> {
        // Only the filters given go into the statement: `?1 IS NULL OR ...` would keep SQLite
        // from using the indexes behind them.
        let mut filters = Filters::<rusqlite::types::Value>::new('?');
        // The text every ref the glob matches starts with.
        let prefix = q.pattern.as_deref().map(|p| {
            let end = p.find(['*', '?', '[']).unwrap_or(p.len());
            &p[..end]
        });
        match (&q.pattern, prefix, &q.after) {
            // A glob and a cursor: SQLite would seek to the glob's range and test the cursor
            // row by row, so a deep page (or the next value of a field, as the dashboard's grid
            // looks for it) would cost every row before it. Seek to the cursor instead, within
            // the glob's range, and test the glob on the rows from there (`+` keeps the GLOB off
            // the index).
            (Some(p), Some(prefix), Some(a)) if !prefix.is_empty() => {
                filters.add("+partition_ref GLOB", p.clone().into());
                match a.as_str() >= prefix {
                    true => filters.add("partition_ref >", a.clone().into()),
                    false => filters.add("partition_ref >=", prefix.to_string().into()),
                }
                // Refs are ASCII: every one the glob matches sorts below this.
                filters.add("partition_ref <", format!("{prefix}\u{10FFFF}").into());
            }
            _ => {
                if let Some(p) = &q.pattern {
                    filters.add("partition_ref GLOB", p.clone().into());
                }
                if let Some(a) = &q.after {
                    filters.add("partition_ref >", a.clone().into());
                }
            }
        }
        if let Some(st) = q.status {
            // Most partitions of a pattern are available: reading its range of the table beats
            // seeking each row from the status index (half the time at 1M), which is kept for
            // the rarer statuses. SQLite has no statistics to tell the two apart by itself.
            let column = match (st, prefix) {
                (Status::Available, Some(prefix)) if !prefix.is_empty() => "+status =",
                _ => "status =",
            };
            filters.add(column, st.as_str().to_string().into());
        }
        let sql = format!(
            "SELECT {PARTITION_COLUMNS} FROM partitions{} ORDER BY partition_ref LIMIT {}",
            filters.clause, q.limit
        );
        self.read(|c| {
            c.prepare_cached(&sql)?
                .query_map(rusqlite::params_from_iter(filters.values), |r| {
                    partition_from_row(r)
                })?
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
                .map(|(s, n)| Ok((row_status(s)?, n as u64)))
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
                .map(|(s, n)| Ok((row_status(s)?, n as u64)))
                .collect()
        })
    }

    fn build_request(&self, id: &str) -> Result<Option<BuildRequestRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {BUILD_COLUMNS} FROM build_requests WHERE build_request_id = ?1"
            ))?
            .query_row([id], |r| build_from_row(r))
            .optional()
        })
    }

    fn build_requests(&self, q: &BuildQuery) -> Result<Vec<BuildRequestRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {LISTED_BUILD_COLUMNS} FROM build_requests
                 WHERE (?1 IS NULL OR status = ?1)
                   AND (NOT ?3 OR (status IN ('received', 'planning', 'analysis_completed', 'executing')
                                   AND NOT analyze_only))
                   AND (?4 OR NOT analyze_only)
                   AND (?5 IS NULL OR created_at >= ?5)
                   AND (?6 IS NULL OR created_at < ?6)
                   AND (?7 IS NULL OR created_at < ?7 OR (created_at = ?7 AND build_request_id > ?8))
                 ORDER BY created_at DESC, build_request_id LIMIT ?2"
            ))?
            .query_map(
                params![
                    q.status.map(|s| s.as_str()),
                    q.limit as i64,
                    q.unfinished,
                    q.analyses,
                    q.from,
                    q.to,
                    q.after.as_ref().map(|a| a.0),
                    q.after.as_ref().map(|a| a.1.as_str()),
                ],
                |r| build_from_row(r),
            )?
            .collect()
        })
    }

    fn request_partitions(&self, id: &str) -> Result<Vec<RequestPartitionRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {REQUEST_PARTITION_COLUMNS} FROM request_partitions
                 WHERE build_request_id = ?1 ORDER BY partition_ref"
            ))?
            .query_map([id], |r| request_partition_from_row(r))?
            .collect()
        })
    }

    fn request_partitions_page(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RequestPartitionRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {REQUEST_PARTITION_COLUMNS} FROM request_partitions
                 WHERE build_request_id = ?1 AND partition_ref > ?2
                 ORDER BY partition_ref LIMIT ?3"
            ))?
            .query_map(
                rusqlite::params![id, after.unwrap_or(""), limit as i64],
                |r| request_partition_from_row(r),
            )?
            .collect()
        })
    }

    fn job_run(&self, id: &str) -> Result<Option<JobRunRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {RUN_COLUMNS} FROM job_runs WHERE job_run_id = ?1"
            ))?
            .query_row([id], |r| run_from_row(r))
            .optional()
        })
    }

    fn job_runs_by_id(&self, ids: &[&str]) -> Result<Vec<JobRunRow>> {
        self.lookup_each(
            &format!("SELECT {RUN_COLUMNS} FROM job_runs WHERE job_run_id = ?1"),
            ids,
            |r| run_from_row(r),
        )
    }

    fn run_recipes(&self, ids: &[&str]) -> Result<Vec<RunRecipe>> {
        self.lookup_each(
            &format!("SELECT {RECIPE_COLUMNS} FROM job_runs WHERE job_run_id = ?1"),
            ids,
            |r| recipe_from_row(r),
        )
    }

    fn checks_of(&self, refs: &[&str]) -> Result<Vec<CheckRow>> {
        self.lookup_each(
            &format!("SELECT {CHECK_COLUMNS} FROM partition_checks WHERE partition_ref = ?1"),
            refs,
            |r| check_from_row(r),
        )
    }

    fn any_blocking_failure(&self) -> Result<bool> {
        self.read(|c| {
            c.query_row(
                "SELECT EXISTS (SELECT 1 FROM partition_checks
                                 WHERE status = 'failed' AND blocking = 1)",
                [],
                |r| r.get(0),
            )
        })
    }

    fn check_counts(&self) -> Result<Vec<CheckCount>> {
        self.read(|c| {
            c.prepare_cached(CHECK_COUNTS)?
                .query_map([], |r| {
                    Ok(CheckCount {
                        job: r.get(0)?,
                        check_name: r.get(1)?,
                        blocking: r.get::<_, i64>(2)? != 0,
                        passed: r.get::<_, i64>(3)? as u64,
                        failed: r.get::<_, i64>(4)? as u64,
                    })
                })?
                .collect()
        })
    }

    fn readers(
        &self,
        input_ref: &str,
        input_run: Option<&str>,
        data_version: Option<&str>,
        of: ReadersOf,
        limit: usize,
    ) -> Result<Vec<String>> {
        self.read(|c| {
            c.prepare_cached(READERS)?
                .query_map(
                    params![
                        input_ref,
                        input_run,
                        data_version,
                        limit as i64,
                        of == ReadersOf::Data
                    ],
                    |r| r.get(0),
                )?
                .collect()
        })
    }

    fn ids_matching(&self, kind: IdKind, text: &str, limit: usize) -> Result<Vec<String>> {
        let (table, id) = id_column(kind);
        let (from, to) = prefix_bounds(text);
        // The short form by its expression index (schema version 7); the prefix by the key.
        // Each part stops at `limit` (a `UNION` would gather every match to drop repeats).
        let sql = format!(
            "SELECT * FROM (SELECT {id} FROM {table} WHERE {id} >= ?1 AND {id} < ?2 LIMIT ?4)
             UNION ALL
             SELECT * FROM (SELECT {id} FROM {table} WHERE substr({id}, -{SHORT_ID}) = ?3 LIMIT ?4)"
        );
        let found: Vec<String> = self.read(|c| {
            c.prepare_cached(&sql)?
                .query_map(params![from, to, text, limit as i64], |r| r.get(0))?
                .collect()
        })?;
        Ok(distinct(found, limit))
    }

    fn want(&self, id: &str) -> Result<Option<WantRow>> {
        self.read(|c| {
            c.prepare_cached(&format!(
                "SELECT {WANT_COLUMNS} FROM wants WHERE want_id = ?1"
            ))?
            .query_row([id], |r| want_from_row(r))
            .optional()
        })
    }

    fn wants(&self, status: Option<Status>, active: bool, limit: usize) -> Result<Vec<WantRow>> {
        let q = wants_query(status, active, limit, '?', text);
        self.read(|c| {
            c.prepare_cached(&q.sql)?
                .query_map(rusqlite::params_from_iter(q.values), |r| want_from_row(r))?
                .collect()
        })
    }

    fn job_runs(&self, q: &RunQuery) -> Result<Vec<JobRunRow>> {
        let mut runs = Vec::new();
        self.each_job_run(q, &mut |run| runs.push(run))?;
        Ok(runs)
    }

    fn each_job_run(&self, q: &RunQuery, each: &mut dyn FnMut(JobRunRow)) -> Result<()> {
        let q = runs_query(q, '?', text);
        self.read(|c| {
            let mut stmt = c.prepare_cached(&q.sql)?;
            let mut rows = stmt.query(rusqlite::params_from_iter(q.values))?;
            while let Some(row) = rows.next()? {
                each(run_from_row(row)?);
            }
            Ok(())
        })
    }

    fn job_stats(&self, job: Option<&str>) -> Result<Vec<JobStats>> {
        self.read(|c| {
            // Counts come from the (job, status, scheduled_at) index alone; durations from the
            // most recent completed runs only.
            let sql = match job {
                Some(_) => "SELECT job, status, n, last_scheduled_at FROM job_counts WHERE job = ?1",
                None => "SELECT job, status, n, last_scheduled_at FROM job_counts WHERE ?1 IS NULL",
            };
            let rows = c
                .prepare_cached(sql)?
                .query_map([job], |r| {
                    Ok((r.get::<_, String>(0)?, row_status(r.get(1)?)?, r.get::<_, i64>(2)?, r.get::<_, Option<i64>>(3)?))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let per_job = job_counts_by_job(rows);
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

    fn build_run_counts(&self, build_request_id: &str) -> Result<BuildRunCounts> {
        self.read(|c| {
            let by_status = c
                .prepare_cached(
                    "SELECT job, status, count(*) FROM job_runs WHERE build_request_id = ?1
                     GROUP BY job, status",
                )?
                .query_map([build_request_id], |r| {
                    Ok(JobRunCount {
                        job: r.get(0)?,
                        status: row_status(r.get(1)?)?,
                        n: r.get::<_, i64>(2)? as u64,
                    })
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            let claimed = c
                .prepare_cached(
                    "SELECT job, count(DISTINCT outputs) FROM job_runs WHERE build_request_id = ?1
                     GROUP BY job",
                )?
                .query_map([build_request_id], |r| {
                    Ok((r.get(0)?, r.get::<_, i64>(1)? as u64))
                })?
                .collect::<rusqlite::Result<Vec<_>>>()?;
            Ok(BuildRunCounts { by_status, claimed })
        })
    }

    fn sql(&self, query: &str, limits: SqlLimits) -> Result<SqlResult> {
        if query.len() > SQL_MAX_QUERY_LEN {
            return Err(LogError::Sql(format!(
                "the query is {} bytes long; at most {SQL_MAX_QUERY_LEN} are allowed",
                query.len()
            )));
        }
        let (mut conn, denied) = self.sql_connection(&limits)?;
        let deadline = Instant::now() + limits.timeout;
        conn.progress_handler(10_000, Some(move || Instant::now() > deadline))
            .map_err(storage)?;
        let _disarm = arm_deadline(&conn, limits.timeout);
        let refused = |e: rusqlite::Error| sql_refusal(e, &limits, denied.load(Ordering::Relaxed));
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
                    ValueRef::Text(t) if t.len() > limits.max_value_len => {
                        return Err(limits.value_too_long())
                    }
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
        let renewed = guard
            .conn
            .execute(
                "INSERT INTO heartbeats (owner, at) VALUES (?1, ?2)
                 ON CONFLICT (owner) DO UPDATE SET at = excluded.at WHERE NOT heartbeats.revoked",
                params![owner, crate::event::now_ns()],
            )
            .map_err(|e| self.classify(e))?;
        self.written();
        if renewed == 0 {
            return Err(LogError::LeaseLost {
                owner: owner.to_string(),
            });
        }
        Ok(())
    }

    fn silent_for(&self, owner: &str) -> Result<Option<Duration>> {
        let at: Option<i64> = self.read(|c| {
            c.query_row("SELECT at FROM heartbeats WHERE owner = ?1", [owner], |r| {
                r.get(0)
            })
            .optional()
        })?;
        Ok(at.map(|at| silence(crate::event::now_ns() - at)))
    }

    fn rejoin(&self, owner: &str) -> Result<()> {
        let guard = self.writer.lock().expect("writer lock");
        guard
            .conn
            .execute(
                "UPDATE heartbeats SET revoked = 0, at = ?2 WHERE owner = ?1",
                params![owner, crate::event::now_ns()],
            )
            .map_err(|e| self.classify(e))?;
        self.written();
        Ok(())
    }

    fn revoke_lease(&self, owner: &str, timeout: Duration) -> Result<bool> {
        let guard = self.writer.lock().expect("writer lock");
        let before = crate::event::now_ns() - timeout.as_nanos() as i64;
        guard
            .conn
            .execute(
                "UPDATE heartbeats SET revoked = 1 WHERE owner = ?1 AND at <= ?2",
                params![owner, before],
            )
            .map_err(|e| self.classify(e))?;
        self.written();
        let revoked: Option<bool> = guard
            .conn
            .query_row(
                "SELECT revoked FROM heartbeats WHERE owner = ?1",
                [owner],
                |r| r.get(0),
            )
            .optional()
            .map_err(|e| self.classify(e))?;
        Ok(revoked == Some(true))
    }

    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    fn keeps_plans(&self) -> bool {
        true
    }

    fn kept_plan(&self, key: &str, id: &str) -> Result<Option<KeptPlan>> {
        // The body (a MiB at 24k refs) is read only once the events after it are found to be
        // the build's own.
        self.read(|c| {
            let Some(log_idx) = c
                .prepare_cached("SELECT log_idx FROM plan_cache WHERE key = ?1")?
                .query_row([key], |r| r.get(0))
                .optional()?
            else {
                return Ok(None);
            };
            if !only_noop_events_since(c, log_idx, id)? {
                return Ok(None);
            }
            c.prepare_cached("SELECT body FROM plan_cache WHERE key = ?1 AND log_idx = ?2")?
                .query_row(params![key, log_idx], |r| r.get(0))
                .optional()
                .map(|body| body.map(|body| KeptPlan { log_idx, body }))
        })
    }

    fn keep_plan(&self, key: &str, since: i64, id: &str, body: Option<&[u8]>) -> Result<bool> {
        let mut guard = self.writer.lock().expect("writer lock");
        // A plan is worth keeping, not waiting for: while another process writes, keep nothing
        // (its write moves the log past the plan anyway).
        let conn = &mut guard.conn;
        conn.busy_timeout(PLAN_CACHE_WAIT)
            .map_err(|e| self.classify(e))?;
        let kept = keep_plan_in(conn, key, since, id, body);
        conn.busy_timeout(BUSY_TIMEOUT)
            .map_err(|e| self.classify(e))?;
        let kept = match kept.map_err(|e| self.classify(e)) {
            Err(LogError::Locked { .. }) => false,
            kept => kept?,
        };
        self.written();
        Ok(kept)
    }
}

/// Keeps plan `key` in one write transaction if every event after `since` is build `id`'s own
/// no-op event: with the log's last index, evicting the least recently used past the limit.
fn keep_plan_in(
    conn: &mut Connection,
    key: &str,
    since: i64,
    id: &str,
    body: Option<&[u8]>,
) -> rusqlite::Result<bool> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if !only_noop_events_since(&tx, since, id)? {
        return Ok(false);
    }
    let end: i64 = tx.query_row("SELECT coalesce(max(idx), 0) FROM events", [], |r| r.get(0))?;
    let now = crate::event::now_ns();
    let written = match body {
        Some(body) => tx.execute(
            "INSERT INTO plan_cache (key, log_idx, body, used_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (key) DO UPDATE SET log_idx = excluded.log_idx,
                body = excluded.body, used_at = excluded.used_at",
            params![key, end, body, now],
        )?,
        None => tx.execute(
            "UPDATE plan_cache SET log_idx = ?2, used_at = ?3 WHERE key = ?1",
            params![key, end, now],
        )?,
    };
    tx.execute(
        "DELETE FROM plan_cache WHERE key NOT IN
           (SELECT key FROM plan_cache ORDER BY used_at DESC LIMIT ?1)",
        [PLAN_CACHE_ENTRIES],
    )?;
    tx.commit()?;
    Ok(written == 1)
}

/// The most no-op plans a log keeps (see `v10.sql`): the least recently used go.
const PLAN_CACHE_ENTRIES: i64 = 16;

/// How long keeping a plan waits for another process's write to end.
const PLAN_CACHE_WAIT: Duration = Duration::from_millis(50);

/// Whether every event after `since` is a no-op event of build request `id` (see
/// [`EventStore::kept_plan`]). The events after a kept plan are a build's few own: a range of
/// the primary key.
fn only_noop_events_since(c: &Connection, since: i64, id: &str) -> rusqlite::Result<bool> {
    c.prepare_cached(
        "SELECT NOT EXISTS (SELECT 1 FROM events WHERE idx > ?1 AND NOT (
             build_request_id IS ?2 AND (
                kind = 'build_request'
                OR (kind = 'job_run' AND status = 'skipped')
                OR (kind = 'partition' AND status = 'available' AND job_run_id IS NULL))))",
    )?
    .query_row(params![since, id], |r| r.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

    /// A plan is kept over its own build request's no-op events only: another's keeps nothing.
    #[test]
    fn a_plan_is_kept_only_over_its_own_builds_noop_events() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let since = store.last_idx().unwrap();
        store
            .append(vec![Event::build_request("b1", Status::Received)])
            .unwrap();
        assert!(store.keep_plan("k", since, "b1", Some(b"{}")).unwrap());
        let kept = store.kept_plan("k", "b1").unwrap().unwrap();
        assert_eq!(kept.log_idx, store.last_idx().unwrap());
        assert_eq!(kept.body, b"{}");
        store
            .append(vec![Event::build_request("b2", Status::Received)])
            .unwrap();
        assert_eq!(store.kept_plan("k", "b2").unwrap(), Some(kept.clone()));
        assert_eq!(store.kept_plan("k", "b3").unwrap(), None);
        assert!(!store.keep_plan("k", kept.log_idx, "b3", None).unwrap());
        assert_eq!(store.kept_plan("k", "b2").unwrap(), Some(kept.clone()));
        // The build's own skipped run and run-less `available` keep it.
        store
            .append(vec![
                Event::job_run("b2", "s1", "j", Status::Skipped),
                Event::partition(Some("b2"), "a/1", Status::Available),
            ])
            .unwrap();
        assert!(store.kept_plan("k", "b2").unwrap().is_some());
        assert!(store.keep_plan("k", kept.log_idx, "b2", None).unwrap());
        let moved = store.kept_plan("k", "b2").unwrap().unwrap();
        assert_eq!(moved.log_idx, store.last_idx().unwrap());
        assert_eq!(moved.body, b"{}", "the body kept stays");
        // Another build's skipped run does not.
        store
            .append(vec![Event::job_run("b9", "s9", "j", Status::Skipped)])
            .unwrap();
        assert_eq!(store.kept_plan("k", "b2").unwrap(), None);
        assert!(!store.keep_plan("k", moved.log_idx, "b2", None).unwrap());
    }

    /// The build's own events that change what a plan reads (a check, a run it schedules)
    /// end a kept plan as another build's would.
    #[test]
    fn a_builds_own_checks_and_built_outputs_end_its_kept_plan() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let since = store.last_idx().unwrap();
        assert!(store.keep_plan("k", since, "b1", Some(b"{}")).unwrap());
        for (i, event) in [
            Event::check(Some("b1"), "a/1", "r1", "rows", true),
            Event::job_run("b1", "r1", "j", Status::Scheduled),
        ]
        .into_iter()
        .enumerate()
        {
            let kept = store.kept_plan("k", "b1").unwrap().unwrap();
            assert!(store.keep_plan("k", kept.log_idx, "b1", None).unwrap());
            store.append(vec![event]).unwrap();
            assert_eq!(store.kept_plan("k", "b1").unwrap(), None, "event {i}");
            assert!(!store.keep_plan("k", kept.log_idx, "b1", None).unwrap());
            // The next no-op keeps its plan anew from where the log is.
            let since = store.last_idx().unwrap();
            assert!(store.keep_plan("k", since, "b1", Some(b"{}")).unwrap());
        }
    }

    /// At most `PLAN_CACHE_ENTRIES` plans are kept: the least recently kept go first.
    #[test]
    fn the_least_recently_kept_plans_go_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let since = store.last_idx().unwrap();
        for i in 0..=PLAN_CACHE_ENTRIES {
            assert!(store
                .keep_plan(&format!("k{i}"), since, "b", Some(b"{}"))
                .unwrap());
        }
        assert_eq!(store.kept_plan("k0", "b").unwrap(), None, "the oldest went");
        for i in 1..=PLAN_CACHE_ENTRIES {
            assert!(
                store.kept_plan(&format!("k{i}"), "b").unwrap().is_some(),
                "k{i}"
            );
        }
        // Keeping k1 again makes k2 the oldest.
        assert!(store.keep_plan("k1", since, "b", None).unwrap());
        assert!(store.keep_plan("k99", since, "b", Some(b"{}")).unwrap());
        assert!(store.kept_plan("k1", "b").unwrap().is_some());
        assert_eq!(store.kept_plan("k2", "b").unwrap(), None);
    }

    /// While another process holds the write lock, keeping a plan gives up at once instead of
    /// waiting out the busy timeout, and the writer waits as before afterwards.
    #[test]
    fn keeping_a_plan_does_not_wait_for_another_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let store = SqliteStore::open(&path).unwrap();
        let since = store.last_idx().unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let started = Instant::now();
        assert!(!store.keep_plan("k", since, "b", Some(b"{}")).unwrap());
        assert!(started.elapsed() < Duration::from_secs(1));
        other.execute_batch("COMMIT").unwrap();
        let timeout: i64 = store
            .writer
            .lock()
            .unwrap()
            .conn
            .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
            .unwrap();
        assert_eq!(timeout, BUSY_TIMEOUT.as_millis() as i64);
        assert!(store.keep_plan("k", since, "b", Some(b"{}")).unwrap());
    }

    /// The interrupt armed beside the progress handler stops a statement on its own.
    #[test]
    fn the_deadline_interrupts_a_user_query_by_itself() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let (conn, _denied) = store.sql_connection(&SqlLimits::default()).unwrap();
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

    /// A bulk batch (a backfill's plan record) is written with the larger cache, and the writer
    /// goes back to its own after it, whatever the batch's outcome.
    #[test]
    fn a_bulk_batch_gets_the_larger_cache_and_gives_it_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let cache = |store: &SqliteStore| -> i64 {
            let writer = store.writer.lock().unwrap();
            writer
                .conn
                .query_row("PRAGMA cache_size", [], |r| r.get(0))
                .unwrap()
        };
        assert_eq!(cache(&store), -WRITER_CACHE_KIB);
        let plan: Vec<(String, Vec<String>)> = (0..=BULK_ROWS)
            .map(|i| ("j".to_string(), vec![format!("out/{i}")]))
            .collect();
        let bulk = |id: &str| {
            vec![
                Event::build_request(id, Status::Received),
                Event::build_request(id, Status::Planning).with_data(|d| d.plan = plan.clone()),
            ]
        };
        store.append(bulk("b1")).unwrap();
        assert_eq!(cache(&store), -WRITER_CACHE_KIB);
        // Refused (b1 was received already): the cache goes back all the same.
        assert!(store.append(bulk("b1")).is_err());
        assert_eq!(cache(&store), -WRITER_CACHE_KIB);
    }

    /// Opening a log whose schema is current takes no write lock: while another process holds
    /// it (a long batch, a `sqlite3` shell), a command that only reads opens and reads at once.
    #[test]
    fn opening_a_current_log_does_not_wait_for_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let store = SqliteStore::open(&path).unwrap();
        store
            .append(vec![Event::build_request("b1", Status::Received)])
            .unwrap();
        let holder = Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let started = Instant::now();
        let reader = SqliteStore::open(&path).expect("opens while the write lock is held");
        assert!(reader.build_request("b1").unwrap().is_some());
        assert!(
            started.elapsed() < BUSY_TIMEOUT / 2,
            "{:?}",
            started.elapsed()
        );
        holder.execute_batch("COMMIT").unwrap();
    }

    /// A store closes leaving a small WAL for the next command to read, and empties a large one.
    #[test]
    fn a_closing_store_leaves_a_small_wal_and_empties_a_large_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let wal = dir.path().join("events.db-wal");
        let wal_size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        let store = SqliteStore::open(&path).unwrap();
        store
            .append(vec![Event::build_request("b1", Status::Received)])
            .unwrap();
        drop(store);
        let small = wal_size();
        assert!(small > 0 && small <= CLOSE_TRUNCATE_BYTES, "{small}");
        let store = SqliteStore::open(&path).unwrap();
        let writer = store.writer.lock().unwrap();
        empty_wal_past(&writer.conn, &path, small);
        assert_eq!(wal_size(), small, "not past the limit: left as it is");
        empty_wal_past(&writer.conn, &path, small - 1);
        assert_eq!(wal_size(), 0);
        drop(writer);
        // What the WAL held is in the database.
        let build = store.build_request("b1").unwrap();
        assert!(build.is_some());
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

    /// A build's delegations and checks are read through their own indexes, not by walking
    /// every event of the build (six a run: seconds for a million-run backfill's summary).
    #[test]
    fn a_builds_delegations_and_checks_are_read_by_their_own_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let conn = store.writer.lock().unwrap();
        for (kind, index) in [
            (Kind::Delegation, "events_of_delegations"),
            (Kind::Check, "events_of_checks"),
        ] {
            let filter = EventFilter {
                build_request_id: Some("b1".to_string()),
                kind: Some(kind),
                limit: Some(100),
                ..Default::default()
            };
            let q = events_query(&filter, '?', text, int);
            let plan: Vec<String> = conn
                .conn
                .prepare(&format!("EXPLAIN QUERY PLAN {}", q.sql))
                .unwrap()
                .query_map(rusqlite::params_from_iter(q.values), |r| r.get(3))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            assert!(
                plan.iter().any(|step| step.contains(index)),
                "{kind:?}: {plan:?}"
            );
        }
    }
}
