//! The PostgreSQL event log: one log shared by several DataBuild processes on several machines.
//!
//! It keeps the SQLite log's semantics exactly: the same tables, projections written in the
//! events' transaction, the same validation. Appends from all processes are serialized by a
//! transaction-scoped advisory lock, so each batch validates against everything committed before
//! it; a partition claim is therefore atomic across processes. User SQL runs in a read-only
//! transaction with a statement timeout (and, if configured, as a least-privilege role).
//!
//! An append is two round trips whatever its size ([`append`]): its states read up front under
//! the lock, validated in memory, its writes sent as set-based statements pipelined with the
//! `COMMIT`. Reads prepare their statements once per pooled connection.
//!
//! Every connection has a connect timeout, TCP keepalives and a TCP user timeout (a cut network
//! is noticed in seconds) and a statement timeout. A lost connection (a server restart, a cut
//! network) is reopened on next use: a read runs again, an append is retried on the new
//! connection, for up to [`RETRY_FOR`], then fails as [`LogError::Unavailable`]. An append whose
//! `COMMIT` went unanswered may have been written: its retry first looks for the batch's first
//! event (by its `event_id`) and, when it is there, returns the batch as stored instead of
//! appending it twice.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls};
use rustc_hash::FxHashMap;

use crate::event::{Event, Status};
use crate::projection::*;
use crate::store::*;

mod append;

/// The schema, as numbered migrations (see the SQLite store).
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
];
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The database's clock in ns since the epoch: leases are timed by it, never by a host's clock.
const DB_NOW_NS: &str = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

/// The advisory lock key that serializes appends: "DBLG".
const APPEND_LOCK: i64 = 0x4442_4C47;

/// How long a connection attempt may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Data sent but not acknowledged for this long ends the connection (a cut network is noticed in
/// seconds, not at TCP's 15 minutes of retransmissions).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);
/// An idle connection is probed after this long, then every `KEEPALIVE_INTERVAL`, and dropped
/// after `KEEPALIVE_RETRIES` probes unanswered.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_RETRIES: u32 = 3;
/// Any one statement of the log's own (user SQL sets its own, shorter, limit; migrations none).
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long an operation keeps reconnecting and retrying across lost connections (a server
/// restart takes a few seconds) before it fails with [`LogError::Unavailable`].
const RETRY_FOR: Duration = Duration::from_secs(20);
/// The first pause between attempts; each next one doubles, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);
/// The writer's session: its statements are all lookups and writes by key, over a batch's keys
/// (`= ANY`, `unnest`). Each is planned once per connection (a custom plan of the batch's read
/// costs more than running it), and on the tables' keys: the planner would scan a table of a few
/// thousand rows rather than look its keys up, at a cost to every append of a young log.
const WRITER_SETTINGS: &str = "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off";
/// Prepared statements a reader keeps (queries built from filters vary); past it, it starts over.
const READER_STATEMENTS: usize = 128;

pub struct PostgresStore {
    /// The connection string, shown redacted.
    url: String,
    /// How every connection is made: the URL with the timeouts above.
    config: tokio_postgres::Config,
    /// The writer's: [`WRITER_SETTINGS`] too.
    writer_config: tokio_postgres::Config,
    writer: Mutex<Writer>,
    readers: Mutex<Vec<Reader>>,
    /// A role to `SET LOCAL ROLE` to for user SQL.
    sql_role: Option<String>,
}

/// The appending connection: its own runtime drives it (pipelined statements), on the calling
/// thread, like the blocking client's.
struct Writer {
    runtime: tokio::runtime::Runtime,
    /// `None` until first used, and again once lost.
    conn: Option<append::Conn>,
}

/// A pooled reading connection, with the statements it prepared (a read is then one round trip,
/// not a preparation and an execution).
struct Reader {
    client: Client,
    statements: FxHashMap<String, postgres::Statement>,
}

impl std::ops::Deref for Reader {
    type Target = Client;
    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for Reader {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

type Params<'a> = &'a [&'a (dyn postgres::types::ToSql + Sync)];

impl Reader {
    fn prepared(&mut self, sql: &str) -> std::result::Result<postgres::Statement, postgres::Error> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        if self.statements.len() >= READER_STATEMENTS {
            self.statements.clear();
        }
        let s = self.client.prepare(sql)?;
        self.statements.insert(sql.to_string(), s.clone());
        Ok(s)
    }

    fn query(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> std::result::Result<Vec<postgres::Row>, postgres::Error> {
        let s = self.prepared(sql)?;
        self.client.query(&s, params)
    }

    fn query_one(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> std::result::Result<postgres::Row, postgres::Error> {
        let s = self.prepared(sql)?;
        self.client.query_one(&s, params)
    }

    fn query_opt(
        &mut self,
        sql: &str,
        params: Params<'_>,
    ) -> std::result::Result<Option<postgres::Row>, postgres::Error> {
        let s = self.prepared(sql)?;
        self.client.query_opt(&s, params)
    }
}

/// An error as a message: the server's code and words when it answered, else the client's.
fn describe(e: &postgres::Error) -> String {
    match e.as_db_error() {
        Some(d) => format!("{} ({})", d.message(), d.code().code()),
        // The client's error says what it was doing; its source, what went wrong.
        None => match std::error::Error::source(e) {
            Some(cause) => format!("{e}: {cause}"),
            None => e.to_string(),
        },
    }
}

fn storage(e: postgres::Error) -> LogError {
    LogError::Storage(describe(&e))
}

/// A failure after which the connection is gone, or soon will be (the server shutting down,
/// restarting or not yet accepting connections), and a new one may succeed. Told apart by the
/// server's codes (class 08, and 57P01-57P03), the client's "closed" and I/O errors; never by
/// message text. A refused login or a missing database is not one of them.
fn connection_lost(e: &postgres::Error) -> bool {
    use postgres::error::SqlState;
    if e.is_closed() {
        return true;
    }
    if let Some(code) = e.code() {
        return code.code().starts_with("08")
            || *code == SqlState::ADMIN_SHUTDOWN
            || *code == SqlState::CRASH_SHUTDOWN
            || *code == SqlState::CANNOT_CONNECT_NOW;
    }
    std::error::Error::source(e).is_some_and(|s| s.is::<std::io::Error>())
}

/// The retries of one operation across lost connections: pauses doubling from
/// [`FIRST_BACKOFF`], for at most [`RETRY_FOR`].
struct Retries {
    start: Instant,
    pause: Duration,
}

impl Retries {
    fn new() -> Retries {
        Retries {
            start: Instant::now(),
            pause: FIRST_BACKOFF,
        }
    }

    /// Pauses before the next attempt, or says that the time for them is up.
    fn pause(&mut self) -> bool {
        if self.start.elapsed() + self.pause > RETRY_FOR {
            return false;
        }
        std::thread::sleep(self.pause);
        self.pause = (self.pause * 2).min(MAX_BACKOFF);
        true
    }

    fn waited_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

/// The URL's settings, with this log's timeouts where the URL sets none.
fn connection_config(url: &str) -> std::result::Result<tokio_postgres::Config, String> {
    let mut c: tokio_postgres::Config = url.parse().map_err(|e: postgres::Error| e.to_string())?;
    let given = |key: &str| url.contains(&format!("{key}="));
    if c.get_connect_timeout().is_none() {
        c.connect_timeout(CONNECT_TIMEOUT);
    }
    if c.get_tcp_user_timeout().is_none() {
        c.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    if !given("keepalives_idle") {
        c.keepalives_idle(KEEPALIVE_IDLE);
    }
    if c.get_keepalives_interval().is_none() {
        c.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if c.get_keepalives_retries().is_none() {
        c.keepalives_retries(KEEPALIVE_RETRIES);
    }
    let options = c.get_options().unwrap_or_default().to_string();
    if !options.contains("statement_timeout") {
        let timeout = format!("-c statement_timeout={}", STATEMENT_TIMEOUT.as_millis());
        c.options(format!("{options} {timeout}").trim());
    }
    Ok(c)
}

/// A glob (`*`, `?`, `[...]`) as an anchored POSIX regular expression.
fn glob_to_regex(glob: &str) -> String {
    let mut re = String::from("^");
    let mut in_class = false;
    for c in glob.chars() {
        match c {
            '[' if !in_class => {
                in_class = true;
                re.push('[');
            }
            ']' if in_class => {
                in_class = false;
                re.push(']');
            }
            '!' if in_class && re.ends_with('[') => re.push('^'),
            _ if in_class => re.push(c),
            '*' => re.push_str(".*"),
            '?' => re.push('.'),
            c if "\\.^$|()+{}".contains(c) => {
                re.push('\\');
                re.push(c);
            }
            c => re.push(c),
        }
    }
    re.push('$');
    re
}

impl PostgresStore {
    /// Opens the log at `url`; user SQL runs as the connection's own role.
    pub fn open(url: &str) -> Result<PostgresStore> {
        Self::open_with(url, None)
    }

    /// Opens the log at `url`; user SQL runs as `sql_role` when given (`DATABUILD_SQL_ROLE`,
    /// read by the binary), a least-privilege role for `databuild sql`.
    pub fn open_with(url: &str, sql_role: Option<String>) -> Result<PostgresStore> {
        let location = crate::redact(url);
        let open_error = |message: String| LogError::Open {
            location: location.clone(),
            message,
        };
        let config = connection_config(url).map_err(open_error)?;
        // The server's own refusal (a wrong password, no such database) is the request's to
        // fix; no answer at all (refused, unreachable, timed out) is the system's: exit 1.
        let mut client = postgres::Config::from(config.clone())
            .connect(NoTls)
            .map_err(|e| match e.as_db_error() {
                Some(_) => open_error(describe(&e)),
                None => LogError::Unavailable {
                    location: location.clone(),
                    waited_ms: 0,
                    message: describe(&e),
                },
            })?;
        prepare_schema(&mut client, &location)?;
        let mut writer_config = config.clone();
        let options = config.get_options().unwrap_or_default();
        writer_config.options(format!("{options} {WRITER_SETTINGS}"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| open_error(format!("cannot start its client's runtime: {e}")))?;
        Ok(PostgresStore {
            url: url.to_string(),
            config,
            writer_config,
            writer: Mutex::new(Writer {
                runtime,
                conn: None,
            }),
            readers: Mutex::new(vec![Reader {
                client,
                statements: FxHashMap::default(),
            }]),
            sql_role: sql_role.filter(|r| !r.is_empty()),
        })
    }

    fn unavailable(&self, retries: &Retries, message: String) -> LogError {
        LogError::Unavailable {
            location: crate::redact(&self.url),
            waited_ms: retries.waited_ms(),
            message,
        }
    }

    /// Runs `f` on a pooled connection (a new one if none is idle). When the connection turns out
    /// lost (the server restarted, the network was cut), `f` runs again on a new one, for at most
    /// [`RETRY_FOR`]: reads are safe to repeat.
    fn read<T>(&self, mut f: impl FnMut(&mut Reader) -> Result<T>) -> Result<T> {
        let mut retries = Retries::new();
        loop {
            let pooled = self.readers.lock().expect("reader pool").pop();
            let mut reader = match pooled {
                Some(r) if !r.client.is_closed() => r,
                _ => match postgres::Config::from(self.config.clone()).connect(NoTls) {
                    Ok(client) => Reader {
                        client,
                        statements: FxHashMap::default(),
                    },
                    Err(e) if connection_lost(&e) => {
                        if retries.pause() {
                            continue;
                        }
                        return Err(self.unavailable(&retries, describe(&e)));
                    }
                    Err(e) => return Err(storage(e)),
                },
            };
            let result = f(&mut reader);
            match result {
                Err(e) if reader.client.is_closed() => {
                    // The others were most likely lost with it: start over with new ones.
                    self.readers.lock().expect("reader pool").clear();
                    if !retries.pause() {
                        let message = match e {
                            LogError::Storage(m) => m,
                            e => e.to_string(),
                        };
                        return Err(self.unavailable(&retries, message));
                    }
                }
                result => {
                    self.readers.lock().expect("reader pool").push(reader);
                    return result;
                }
            }
        }
    }
}

impl PostgresStore {
    /// `columns` of the runs of these ids that exist, in any order: one round trip.
    fn runs_by_id<T>(
        &self,
        columns: &str,
        ids: &[&str],
        row: fn(&postgres::Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let wanted: Vec<String> = ids.iter().map(|r| r.to_string()).collect();
        let sql = format!("SELECT {columns} FROM job_runs WHERE job_run_id = ANY($1)");
        self.read(|c| collect(c.query(&sql, &[&wanted]).map_err(storage)?, row))
    }

    /// One attempt at appending `events`: connects if need be, then [`append::begin`] and
    /// [`append::write`]. `unsure`: an earlier attempt's `COMMIT` went unanswered, so the batch is
    /// looked for first, and returned as the log holds it if it is there.
    fn try_append(
        &self,
        runtime: &tokio::runtime::Runtime,
        conn: &mut Option<append::Conn>,
        events: &mut [Event],
        unsure: bool,
    ) -> append::Attempt<()> {
        if conn.is_none() {
            let (client, connection) = runtime
                .block_on(self.writer_config.connect(NoTls))
                .map_err(|e| append::Failure::of(e, false))?;
            runtime.spawn(connection);
            *conn = Some(append::Conn::new(client));
        }
        let c = conn.as_mut().expect("connected");
        let outcome = (|| {
            let started = runtime.block_on(append::begin(c, events, unsure))?;
            if let Some(first) = started.committed {
                runtime.block_on(append::read_back(c, events, first))?;
                // Nothing to write: the transaction only read.
                return runtime
                    .block_on(c.client.batch_execute("ROLLBACK"))
                    .map_err(|e| append::Failure::of(e, false));
            }
            append::write(runtime, c, started, events)
        })();
        let keep = match &outcome {
            Ok(()) => !c.client.is_closed(),
            // The server rolled the transaction back with the connection.
            Err(append::Failure::Lost { .. }) => false,
            // A transaction still open (refused, say) ends here; a connection that cannot end
            // it goes with it.
            Err(append::Failure::Failed(_)) => {
                runtime.block_on(c.client.batch_execute("ROLLBACK")).is_ok()
            }
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

fn prepare_schema(client: &mut Client, location: &str) -> Result<()> {
    let mut tx = client.transaction().map_err(storage)?;
    // A migration may take long on a large log: no statement timeout.
    tx.batch_execute("SET LOCAL statement_timeout = 0")
        .map_err(storage)?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK])
        .map_err(storage)?;
    let has_meta: bool = tx
        .query_one("SELECT to_regclass('meta') IS NOT NULL", &[])
        .map_err(storage)?
        .get(0);
    let version: i64 = if has_meta {
        let v: String = tx
            .query_one("SELECT value FROM meta WHERE key = 'schema_version'", &[])
            .map_err(|e| LogError::Open {
                location: location.to_string(),
                message: format!("its schema version cannot be read ({e})"),
            })?
            .get(0);
        v.parse().map_err(|_| LogError::Open {
            location: location.to_string(),
            message: "its schema version is not a number".into(),
        })?
    } else {
        let tables: i64 = tx
            .query_one(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()",
                &[],
            )
            .map_err(storage)?
            .get(0);
        if tables > 0 {
            return Err(LogError::Open {
                location: location.to_string(),
                message: "the database has tables but is not a DataBuild event log".into(),
            });
        }
        0
    };
    if version > SCHEMA_VERSION {
        return Err(LogError::NewerSchema {
            location: location.to_string(),
            found: version,
            supported: SCHEMA_VERSION,
        });
    }
    for step in &MIGRATIONS[version as usize..] {
        tx.batch_execute(step).map_err(storage)?;
    }
    if version < SCHEMA_VERSION {
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('schema_version', $1)
             ON CONFLICT (key) DO UPDATE SET value = excluded.value",
            &[&SCHEMA_VERSION.to_string()],
        )
        .map_err(storage)?;
        // The append counter survives upgrades: other instances compare against it.
        tx.execute(
            "INSERT INTO meta (key, value) VALUES ('appends', '0') ON CONFLICT (key) DO NOTHING",
            &[],
        )
        .map_err(storage)?;
    }
    tx.commit().map_err(storage)
}

impl Columns for postgres::Row {
    type Error = LogError;

    fn text(&self, i: usize) -> Result<String> {
        self.try_get(i).map_err(storage)
    }

    fn opt_text(&self, i: usize) -> Result<Option<String>> {
        self.try_get(i).map_err(storage)
    }

    fn int(&self, i: usize) -> Result<i64> {
        self.opt_int(i)?
            .ok_or_else(|| self.corrupt(i, "a NULL number".to_string()))
    }

    /// `exit_code` is an `INTEGER` (int4); every other number a `BIGINT`.
    fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        use postgres::types::Type;
        let ty = self.columns().get(i).map(|c| c.type_().clone());
        match ty {
            Some(Type::INT4) => self.try_get::<_, Option<i32>>(i).map(|v| v.map(i64::from)),
            Some(Type::INT2) => self.try_get::<_, Option<i16>>(i).map(|v| v.map(i64::from)),
            _ => self.try_get::<_, Option<i64>>(i),
        }
        .map_err(storage)
    }

    fn flag(&self, i: usize) -> Result<bool> {
        self.try_get(i).map_err(storage)
    }

    fn corrupt(&self, i: usize, what: String) -> LogError {
        let column = self.columns().get(i).map_or("?", |c| c.name());
        LogError::Storage(format!("{what} in column `{column}` of the log"))
    }
}

/// The parameters of a query built by [`crate::projection`]'s builders.
type Param = Box<dyn postgres::types::ToSql + Sync>;

fn text(s: String) -> Param {
    Box::new(s)
}

fn int(n: i64) -> Param {
    Box::new(n)
}

fn params(values: &[Param]) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
    values.iter().map(|v| v.as_ref()).collect()
}

fn collect<T>(rows: Vec<postgres::Row>, f: fn(&postgres::Row) -> Result<T>) -> Result<Vec<T>> {
    rows.iter().map(f).collect()
}

impl EventStore for PostgresStore {
    fn append(&self, mut events: Vec<Event>) -> Result<Vec<Event>> {
        if events.is_empty() {
            return Ok(events);
        }
        let mut guard = self.writer.lock().expect("writer lock");
        let Writer { runtime, conn } = &mut *guard;
        let mut retries = Retries::new();
        // A `COMMIT` was sent but its answer lost: the batch may be in the log already.
        let mut unsure = false;
        loop {
            let lost = match self.try_append(runtime, conn, &mut events, unsure) {
                Ok(()) => return Ok(events),
                Err(append::Failure::Failed(e)) => return Err(self.located(e, &retries)),
                Err(append::Failure::Lost { error, sent }) => {
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
                return Err(self.unavailable(&retries, format!("{}{written}", describe(&lost))));
            }
        }
    }

    fn events(&self, f: &EventFilter) -> Result<Vec<Event>> {
        let q = events_query(f, '$', text, int);
        self.read(|c| {
            collect(
                c.query(&q.sql, &params(&q.values)).map_err(storage)?,
                event_from_row,
            )
        })
    }

    fn last_idx(&self) -> Result<i64> {
        self.read(|c| {
            Ok(c.query_one("SELECT coalesce(max(idx), 0) FROM events", &[])
                .map_err(storage)?
                .get(0))
        })
    }

    fn partition(&self, r: &str) -> Result<Option<PartitionRow>> {
        self.read(|c| {
            c.query_opt(
                &format!("SELECT {PARTITION_COLUMNS} FROM partitions WHERE partition_ref = $1"),
                &[&r],
            )
            .map_err(storage)?
            .as_ref()
            .map(partition_from_row)
            .transpose()
        })
    }

    fn partitions_by_ref(&self, refs: &[&str]) -> Result<Vec<PartitionRow>> {
        let wanted: Vec<String> = refs.iter().map(|r| r.to_string()).collect();
        self.read(|c| {
            let rows = c
                .query(
                    &format!(
                        "SELECT {PARTITION_COLUMNS} FROM partitions WHERE partition_ref = ANY($1)"
                    ),
                    &[&wanted],
                )
                .map_err(storage)?;
            collect(rows, partition_from_row)
        })
    }

    fn partitions(&self, q: &PartitionQuery) -> Result<Vec<PartitionRow>> {
        let mut filters = Filters::<Param>::new('$');
        if let Some(p) = &q.pattern {
            filters.add("partition_ref ~", text(glob_to_regex(p)));
        }
        if let Some(st) = q.status {
            filters.add("status =", text(st.as_str().to_string()));
        }
        if let Some(a) = &q.after {
            filters.add("partition_ref COLLATE \"C\" >", text(a.clone()));
        }
        let sql = format!(
            "SELECT {PARTITION_COLUMNS} FROM partitions{} ORDER BY partition_ref COLLATE \"C\" LIMIT {}",
            filters.clause, q.limit
        );
        self.read(|c| {
            collect(
                c.query(&sql, &params(&filters.values)).map_err(storage)?,
                partition_from_row,
            )
        })
    }

    fn partition_counts(&self, pattern: Option<&str>) -> Result<BTreeMap<Status, u64>> {
        let regex = pattern.map(glob_to_regex);
        self.read(|c| {
            c.query(
                "SELECT status, count(*) FROM partitions WHERE ($1::text IS NULL OR partition_ref ~ $1) GROUP BY status",
                &[&regex],
            )
            .map_err(storage)?
            .iter()
            .map(|r| Ok((status_of(&r.text(0)?)?, r.int(1)? as u64)))
            .collect()
        })
    }

    fn job_partition_counts(&self, job: &str) -> Result<BTreeMap<Status, u64>> {
        self.read(|c| {
            c.query(
                "SELECT status, n FROM partition_counts WHERE job = $1 AND n > 0",
                &[&job],
            )
            .map_err(storage)?
            .iter()
            .map(|r| Ok((status_of(&r.text(0)?)?, r.int(1)? as u64)))
            .collect()
        })
    }

    fn build_request(&self, id: &str) -> Result<Option<BuildRequestRow>> {
        self.read(|c| {
            c.query_opt(
                &format!("SELECT {BUILD_COLUMNS} FROM build_requests WHERE build_request_id = $1"),
                &[&id],
            )
            .map_err(storage)?
            .as_ref()
            .map(build_from_row)
            .transpose()
        })
    }

    fn build_requests(&self, q: &BuildQuery) -> Result<Vec<BuildRequestRow>> {
        let status = q.status.map(|s| s.as_str());
        let after_at = q.after.as_ref().map(|a| a.0);
        let after_id = q.after.as_ref().map(|a| a.1.as_str());
        self.read(|c| {
            let rows = c
                .query(
                    &format!(
                        "SELECT {LISTED_BUILD_COLUMNS} FROM build_requests
                         WHERE ($1::text IS NULL OR status = $1)
                           AND (NOT $3 OR (status IN ('received', 'planning', 'analysis_completed', 'executing')
                                           AND NOT analyze_only))
                           AND ($4 OR NOT analyze_only)
                           AND ($5::bigint IS NULL OR created_at >= $5)
                           AND ($6::bigint IS NULL OR created_at < $6)
                           AND ($7::bigint IS NULL OR created_at < $7
                                OR (created_at = $7 AND build_request_id COLLATE \"C\" > $8))
                         ORDER BY created_at DESC, build_request_id COLLATE \"C\" LIMIT $2"
                    ),
                    &[
                        &status,
                        &(q.limit as i64),
                        &q.unfinished,
                        &q.analyses,
                        &q.from,
                        &q.to,
                        &after_at,
                        &after_id,
                    ],
                )
                .map_err(storage)?;
            collect(rows, build_from_row)
        })
    }

    fn request_partitions(&self, id: &str) -> Result<Vec<RequestPartitionRow>> {
        self.read(|c| {
            collect(
                c.query(
                    &format!(
                        "SELECT {REQUEST_PARTITION_COLUMNS} FROM request_partitions
                         WHERE build_request_id = $1 ORDER BY partition_ref COLLATE \"C\""
                    ),
                    &[&id],
                )
                .map_err(storage)?,
                request_partition_from_row,
            )
        })
    }

    fn request_partitions_page(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RequestPartitionRow>> {
        self.read(|c| {
            collect(
                c.query(
                    &format!(
                        // In the key's own order (the database's collation), so the page is
                        // a range of the primary key, not a sort of the build's every row.
                        "SELECT {REQUEST_PARTITION_COLUMNS} FROM request_partitions
                         WHERE build_request_id = $1 AND partition_ref > $2
                         ORDER BY partition_ref LIMIT $3"
                    ),
                    &[&id, &after.unwrap_or(""), &(limit as i64)],
                )
                .map_err(storage)?,
                request_partition_from_row,
            )
        })
    }

    fn job_runs_by_id(&self, ids: &[&str]) -> Result<Vec<JobRunRow>> {
        self.runs_by_id(RUN_COLUMNS, ids, run_from_row)
    }

    fn run_recipes(&self, ids: &[&str]) -> Result<Vec<RunRecipe>> {
        self.runs_by_id(RECIPE_COLUMNS, ids, recipe_from_row)
    }

    fn job_run(&self, id: &str) -> Result<Option<JobRunRow>> {
        self.read(|c| {
            c.query_opt(
                &format!("SELECT {RUN_COLUMNS} FROM job_runs WHERE job_run_id = $1"),
                &[&id],
            )
            .map_err(storage)?
            .as_ref()
            .map(run_from_row)
            .transpose()
        })
    }

    fn ids_matching(&self, kind: IdKind, text: &str, limit: usize) -> Result<Vec<String>> {
        let (table, id) = id_column(kind);
        let (from, to) = prefix_bounds(text);
        // Compared bytewise (`COLLATE "C"`, indexed by schema version 7), whatever the
        // database's collation; the short form by its expression index.
        // Each part stops at `limit` (a `UNION` would gather every match to drop repeats).
        let sql = format!(
            "(SELECT {id} FROM {table} WHERE {id} COLLATE \"C\" >= $1 AND {id} COLLATE \"C\" < $2 LIMIT $4)
             UNION ALL
             (SELECT {id} FROM {table} WHERE right({id}, {SHORT_ID}) = $3 LIMIT $4)"
        );
        let found = self.read(|c| {
            let rows = c
                .query(&sql, &[&from, &to, &text, &(limit as i64)])
                .map_err(storage)?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })?;
        Ok(distinct(found, limit))
    }

    fn checks_of(&self, refs: &[&str]) -> Result<Vec<CheckRow>> {
        let wanted: Vec<String> = refs.iter().map(|r| r.to_string()).collect();
        self.read(|c| {
            let rows = c
                .query(
                    &format!(
                        "SELECT {CHECK_COLUMNS} FROM partition_checks WHERE partition_ref = ANY($1)"
                    ),
                    &[&wanted],
                )
                .map_err(storage)?;
            collect(rows, check_from_row)
        })
    }

    fn any_blocking_failure(&self) -> Result<bool> {
        self.read(|c| {
            c.query_one(
                "SELECT EXISTS (SELECT 1 FROM partition_checks WHERE status = 'failed' AND blocking)",
                &[],
            )
            .map_err(storage)
            .map(|r| r.get(0))
        })
    }

    fn check_counts(&self) -> Result<Vec<CheckCount>> {
        self.read(|c| {
            let rows = c.query(CHECK_COUNTS, &[]).map_err(storage)?;
            Ok(rows
                .iter()
                .map(|r| CheckCount {
                    job: r.get(0),
                    check_name: r.get(1),
                    blocking: r.get::<_, i32>(2) != 0,
                    passed: r.get::<_, i64>(3) as u64,
                    failed: r.get::<_, i64>(4) as u64,
                })
                .collect())
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
        let sql = (1..=5).fold(READERS.to_string(), |sql, i| {
            sql.replace(&format!("?{i}"), &format!("${i}"))
        });
        let any_at_version = of == ReadersOf::Data;
        self.read(|c| {
            let rows = c
                .query(
                    &sql,
                    &[
                        &input_ref,
                        &input_run,
                        &data_version,
                        &(limit as i64),
                        &any_at_version,
                    ],
                )
                .map_err(storage)?;
            Ok(rows.iter().map(|r| r.get(0)).collect())
        })
    }

    fn want(&self, id: &str) -> Result<Option<WantRow>> {
        self.read(|c| {
            c.query_opt(
                &format!("SELECT {WANT_COLUMNS} FROM wants WHERE want_id = $1"),
                &[&id],
            )
            .map_err(storage)?
            .as_ref()
            .map(want_from_row)
            .transpose()
        })
    }

    fn wants(&self, status: Option<Status>, active: bool, limit: usize) -> Result<Vec<WantRow>> {
        let q = wants_query(status, active, limit, '$', text);
        self.read(|c| {
            collect(
                c.query(&q.sql, &params(&q.values)).map_err(storage)?,
                want_from_row,
            )
        })
    }

    fn job_runs(&self, q: &RunQuery) -> Result<Vec<JobRunRow>> {
        let mut runs = Vec::new();
        self.each_job_run(q, &mut |run| runs.push(run))?;
        Ok(runs)
    }

    fn each_job_run(&self, q: &RunQuery, each: &mut dyn FnMut(JobRunRow)) -> Result<()> {
        let q = runs_query(q, '$', text);
        // The rows as the server sent them, parsed one at a time: a read retried after a lost
        // connection starts over, so `each` sees no row until the read is done.
        let rows = self.read(|c| c.query(&q.sql, &params(&q.values)).map_err(storage))?;
        for row in &rows {
            each(run_from_row(row)?);
        }
        Ok(())
    }

    fn build_run_counts(&self, build_request_id: &str) -> Result<BuildRunCounts> {
        self.read(|c| {
            let by_status = c
                .query(
                    "SELECT job, status, count(*) FROM job_runs WHERE build_request_id = $1
                     GROUP BY job, status",
                    &[&build_request_id],
                )
                .map_err(storage)?
                .iter()
                .map(|r| {
                    Ok(JobRunCount {
                        job: r.text(0)?,
                        status: status_of(&r.text(1)?)?,
                        n: r.int(2)? as u64,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let claimed = c
                .query(
                    "SELECT job, count(DISTINCT outputs) FROM job_runs
                     WHERE build_request_id = $1 GROUP BY job",
                    &[&build_request_id],
                )
                .map_err(storage)?
                .iter()
                .map(|r| Ok((r.text(0)?, r.int(1)? as u64)))
                .collect::<Result<Vec<_>>>()?;
            Ok(BuildRunCounts { by_status, claimed })
        })
    }

    fn job_stats(&self, job: Option<&str>) -> Result<Vec<JobStats>> {
        self.read(|c| {
            let rows = c
                .query(
                    "SELECT job, status, n, last_scheduled_at FROM job_counts
                     WHERE ($1::text IS NULL OR job = $1)",
                    &[&job],
                )
                .map_err(storage)?
                .iter()
                .map(|r| {
                    Ok((
                        r.text(0)?,
                        status_of(&r.text(1)?)?,
                        r.int(2)?,
                        r.opt_int(3)?,
                    ))
                })
                .collect::<Result<Vec<_>>>()?;
            let per_job = job_counts_by_job(rows);
            per_job
                .into_iter()
                .map(|(job, (counts, last))| {
                    let ms: Vec<f64> = c
                        .query(
                            "SELECT (ended_at - started_at)::float8 / 1e6::float8 FROM job_runs
                             WHERE job = $1 AND status = 'completed' AND started_at IS NOT NULL
                               AND ended_at IS NOT NULL
                             ORDER BY scheduled_at DESC LIMIT $2",
                            &[&job, &(DURATION_SAMPLE as i64)],
                        )
                        .map_err(storage)?
                        .iter()
                        .map(|r| r.get(0))
                        .collect();
                    Ok(JobStats::from_counts(&job, &counts, last, ms))
                })
                .collect()
        })
    }

    fn sql(&self, query: &str, limits: SqlLimits) -> Result<SqlResult> {
        let deadline = std::time::Instant::now() + limits.timeout;
        self.read(|c| {
            let refused = |e: postgres::Error| sql_refusal(e, &limits);
            let mut tx = c
                .build_transaction()
                .read_only(true)
                .start()
                .map_err(storage)?;
            tx.batch_execute(&format!(
                "SET LOCAL statement_timeout = {}; SET LOCAL work_mem = '{SQL_WORK_MEM}'",
                limits.timeout.as_millis().max(1)
            ))
            .map_err(storage)?;
            if let Some(role) = &self.sql_role {
                tx.batch_execute(&format!("SET LOCAL ROLE \"{}\"", role.replace('"', "")))
                    .map_err(storage)?;
            }
            // Preparing (the extended protocol) refuses several statements in one query, and
            // tells the columns' names and types.
            let stmt = tx.prepare(query).map_err(refused)?;
            let columns: Vec<String> = stmt
                .columns()
                .iter()
                .map(|c| c.name().to_string())
                .collect();
            let types: Vec<postgres::types::Type> =
                stmt.columns().iter().map(|c| c.type_().clone()).collect();
            // A statement without columns ships no values (and a write is refused as it runs);
            // any other runs bounded.
            let run = if columns.is_empty() {
                stmt
            } else {
                let bounded = bounded_query(query, columns.len(), limits.max_value_len);
                tx.prepare(&bounded)
                    .map_err(|e| unbounded_refusal(e, &limits))?
            };
            let portal = tx.bind(&run, &[]).map_err(refused)?;
            let mut size = ResultSize::new(&columns, &limits);
            let mut rows = Vec::new();
            let mut truncated = false;
            'fetch: loop {
                // Each fetch is a statement of its own to the server's timeout: it gets what
                // is left of the query's.
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Err(refused_for_time(&limits));
                }
                tx.batch_execute(&format!(
                    "SET LOCAL statement_timeout = {}",
                    left.as_millis().max(1)
                ))
                .map_err(storage)?;
                let mut fetched = 0;
                // No further than the row past the cap, which says the result was cut.
                let past_cap = (limits.max_rows - rows.len()).saturating_add(1);
                let want =
                    i32::try_from(past_cap).map_or(SQL_FETCH_ROWS, |n| n.min(SQL_FETCH_ROWS));
                let mut batch = tx.query_portal_raw(&portal, want).map_err(refused)?;
                while let Some(row) = batch.next().map_err(refused)? {
                    fetched += 1;
                    if rows.len() == limits.max_rows {
                        truncated = true;
                        break 'fetch;
                    }
                    rows.push(bounded_row(&row, &types, &limits, &mut size)?);
                }
                if fetched < want {
                    break;
                }
            }
            let _ = tx.rollback();
            Ok(SqlResult {
                columns,
                rows,
                truncated,
            })
        })
    }

    fn heartbeat(&self, owner: &str) -> Result<()> {
        // The database's clock, on a reader connection: a long append holding the writer must
        // not keep the lease from being renewed.
        let renewed = self.read(|c| {
            c.execute(
                &format!(
                    "INSERT INTO heartbeats (owner, at) VALUES ($1, {DB_NOW_NS})
                     ON CONFLICT (owner) DO UPDATE SET at = excluded.at WHERE NOT heartbeats.revoked"
                ),
                &[&owner],
            )
            .map_err(storage)
        })?;
        if renewed == 0 {
            return Err(LogError::LeaseLost {
                owner: owner.to_string(),
            });
        }
        Ok(())
    }

    fn silent_for(&self, owner: &str) -> Result<Option<Duration>> {
        self.read(|c| {
            Ok(c.query_opt(
                &format!("SELECT {DB_NOW_NS} - at FROM heartbeats WHERE owner = $1"),
                &[&owner],
            )
            .map_err(storage)?
            .map(|r| silence(r.get(0))))
        })
    }

    fn rejoin(&self, owner: &str) -> Result<()> {
        self.read(|c| {
            c.execute(
                &format!(
                    "UPDATE heartbeats SET revoked = false, at = {DB_NOW_NS} WHERE owner = $1"
                ),
                &[&owner],
            )
            .map_err(storage)?;
            Ok(())
        })
    }

    fn revoke_lease(&self, owner: &str, timeout: Duration) -> Result<bool> {
        let timeout = timeout.as_nanos() as i64;
        // One statement: a renewal and a revocation of the same row are serialized by its lock,
        // so a holder either renewed in time or learns at its next renewal that it lost.
        self.read(|c| {
            c.execute(
                &format!(
                    "UPDATE heartbeats SET revoked = true WHERE owner = $1 AND {DB_NOW_NS} - at >= $2"
                ),
                &[&owner, &timeout],
            )
            .map_err(storage)?;
            Ok(c
                .query_opt("SELECT revoked FROM heartbeats WHERE owner = $1", &[&owner])
                .map_err(storage)?
                .is_some_and(|r| r.get::<_, bool>(0)))
        })
    }

    fn shared(&self) -> bool {
        true
    }

    fn location(&self) -> String {
        crate::redact(&self.url)
    }
}

/// `work_mem` of a user query, whatever the server's default: each sort or hash of the query
/// spills to disk past it.
const SQL_WORK_MEM: &str = "16MB";

/// Rows fetched at a time from a user query's portal. The client streams them (it reads a
/// message when asked for it), so a fetch holds a few rows in memory, not all of them.
const SQL_FETCH_ROWS: i32 = 1000;

/// The user's query as a subquery whose every column arrives as text, NULL when longer than
/// `max_value_len`, with the length of the row's longest value last: a value too long to ship
/// is found on the server and never crosses the wire. Columns are renamed by position (`c1`...),
/// since a query may repeat a name or leave one out; the newline ends a trailing `--` comment.
fn bounded_query(query: &str, width: usize, max_value_len: usize) -> String {
    let query = query.trim_end_matches(|c: char| c == ';' || c.is_whitespace());
    // No text value is longer than 1 GB on the server: a larger limit is none.
    let max_value_len = max_value_len.min(i32::MAX as usize);
    let names: Vec<String> = (1..=width).map(|i| format!("c{i}")).collect();
    let as_text: Vec<String> = names
        .iter()
        .map(|c| format!("q.{c}::text AS {c}"))
        .collect();
    let shipped: Vec<String> = names
        .iter()
        .map(|c| format!("CASE WHEN octet_length(t.{c}) <= {max_value_len} THEN t.{c} END"))
        .collect();
    let lengths: Vec<String> = names
        .iter()
        .map(|c| format!("octet_length(t.{c})"))
        .collect();
    // OFFSET 0 keeps `t` a subquery: each value is turned into text once, not at every use.
    format!(
        "SELECT {}, GREATEST({}) FROM (SELECT {} FROM ({query}\n) AS q({}) OFFSET 0) AS t",
        shipped.join(", "),
        lengths.join(", "),
        as_text.join(", "),
        names.join(", ")
    )
}

/// One row of [`bounded_query`] as JSON, refused when a value was too long or the result grew
/// too large.
fn bounded_row(
    row: &postgres::Row,
    types: &[postgres::types::Type],
    limits: &SqlLimits,
    size: &mut ResultSize,
) -> Result<Vec<serde_json::Value>> {
    let width = types.len();
    if row.len() > width {
        let longest: Option<i32> = row.get(width);
        if longest.is_some_and(|n| n as usize > limits.max_value_len) {
            return Err(limits.value_too_long());
        }
    }
    (0..width)
        .map(|i| {
            let value = text_to_json(row.get(i), types.get(i));
            size.add(&value)?;
            Ok(value)
        })
        .collect()
}

/// A query that parsed alone but not as [`bounded_query`]'s subquery (`SHOW`, `EXPLAIN`, a write
/// with `RETURNING`, a comment after a final `;`) is not run: it could not be bounded.
fn unbounded_refusal(e: postgres::Error, limits: &SqlLimits) -> LogError {
    match e.code() {
        Some(code) if *code == postgres::error::SqlState::SYNTAX_ERROR => LogError::Sql(
            "the query is refused: only a query that can stand as a subquery is run \
             (SELECT, VALUES, TABLE or WITH, with nothing after a final `;`)"
                .to_string(),
        ),
        _ => sql_refusal(e, limits),
    }
}

fn refused_for_time(limits: &SqlLimits) -> LogError {
    LogError::Sql(format!(
        "the query ran longer than {} s and was stopped",
        limits.timeout.as_secs_f64()
    ))
}

/// What a user query's failure tells its author.
fn sql_refusal(e: postgres::Error, limits: &SqlLimits) -> LogError {
    use postgres::error::SqlState;
    let message = e
        .as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_string());
    match e.code() {
        Some(code) if *code == SqlState::READ_ONLY_SQL_TRANSACTION => {
            LogError::Sql("the query is refused: only reads are allowed".to_string())
        }
        Some(code) if *code == SqlState::QUERY_CANCELED => refused_for_time(limits),
        Some(code) if *code == SqlState::INSUFFICIENT_PRIVILEGE => {
            LogError::Sql(format!("the query is refused: {message}"))
        }
        // Past one of the server's own limits (a string over 1 GB, a row too wide...).
        Some(code) if *code == SqlState::PROGRAM_LIMIT_EXCEEDED => {
            LogError::SqlTooLarge(format!("the query is too large for the server: {message}"))
        }
        // Several statements are refused with the code of any syntax error (42601) and a
        // message in the server's `lc_messages` language; what sets the refusal apart is the
        // routine raising it: the protocol's Parse handler itself, where a query's own syntax
        // errors come from the grammar's routines instead.
        Some(code)
            if *code == SqlState::SYNTAX_ERROR
                && e.as_db_error().and_then(|d| d.routine()) == Some("exec_parse_message") =>
        {
            LogError::Sql("only one statement per query is allowed".to_string())
        }
        _ => LogError::Sql(format!("the query failed: {message}")),
    }
}

/// A value as text (the simple protocol's, or a `::text` cast's) as JSON, typed by its column.
fn text_to_json(value: Option<&str>, ty: Option<&postgres::types::Type>) -> serde_json::Value {
    use postgres::types::Type;
    let Some(v) = value else {
        return serde_json::Value::Null;
    };
    match ty {
        Some(t) if [Type::INT2, Type::INT4, Type::INT8, Type::OID].contains(t) => v
            .parse::<i64>()
            .map_or_else(|_| v.into(), serde_json::Value::from),
        Some(t) if [Type::FLOAT4, Type::FLOAT8, Type::NUMERIC].contains(t) => v
            .parse::<f64>()
            .ok()
            .and_then(serde_json::Number::from_f64)
            .map_or_else(|| v.into(), serde_json::Value::Number),
        Some(t) if *t == Type::BOOL => serde_json::Value::Bool(v == "t" || v == "true"),
        _ => v.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::glob_to_regex;

    #[test]
    fn globs_become_anchored_regexes() {
        assert_eq!(glob_to_regex("a/*"), "^a/.*$");
        assert_eq!(glob_to_regex("x.y?[!/]"), "^x\\.y.[^/]$");
    }
}
