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
//!
//! This module holds [`PostgresStore`], its errors and retries, and hands each call of its
//! [`EventStore`] implementation to the module of its concern, named as the SQLite log's are:
//! `open` (connections' settings, the schema's migrations), `append`, `read` (the projections'
//! queries), `sql` (user SQL) and `lease` (heartbeats).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::event::{Event, Status};
use crate::store::*;

mod append;
mod lease;
mod open;
pub(crate) use open::{drop_schema, schemas_like};
mod read;
mod sql;

pub use open::SCHEMA_VERSION;
use read::Reader;

/// The advisory lock key that serializes appends: "DBLG".
const APPEND_LOCK: i64 = 0x4442_4C47;

/// How long an operation keeps reconnecting and retrying across lost connections (a server
/// restart takes a few seconds) before it fails with [`LogError::Unavailable`].
const RETRY_FOR: Duration = Duration::from_secs(20);

/// The first pause between attempts; each next one doubles, up to `MAX_BACKOFF`.
const FIRST_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(2);

pub struct PostgresStore {
    /// The connection string, shown redacted.
    url: String,
    /// How every connection is made: the URL with the timeouts of `open`.
    config: tokio_postgres::Config,
    /// The writer's: [`WRITER_SETTINGS`](open::WRITER_SETTINGS) too.
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

impl PostgresStore {
    fn unavailable(&self, retries: &Retries, message: String) -> LogError {
        LogError::Unavailable {
            location: crate::redact(&self.url),
            waited_ms: retries.waited_ms(),
            message,
        }
    }
}

impl EventStore for PostgresStore {
    fn append(&self, events: Vec<Event>) -> Result<Vec<Event>> {
        append::append(self, events)
    }

    fn events(&self, f: &EventFilter) -> Result<Vec<Event>> {
        read::events(self, f)
    }

    fn last_idx(&self) -> Result<i64> {
        read::last_idx(self)
    }

    fn partition(&self, r: &str) -> Result<Option<PartitionRow>> {
        read::partition(self, r)
    }

    fn partitions_by_ref(&self, refs: &[&str]) -> Result<Vec<PartitionRow>> {
        read::partitions_by_ref(self, refs)
    }

    fn partitions(&self, q: &PartitionQuery) -> Result<Vec<PartitionRow>> {
        read::partitions(self, q)
    }

    fn partition_counts(&self, pattern: Option<&str>) -> Result<BTreeMap<Status, u64>> {
        read::partition_counts(self, pattern)
    }

    fn job_partition_counts(&self, job: &str) -> Result<BTreeMap<Status, u64>> {
        read::job_partition_counts(self, job)
    }

    fn build_request(&self, id: &str) -> Result<Option<BuildRequestRow>> {
        read::build_request(self, id)
    }

    fn build_requests(&self, q: &BuildQuery) -> Result<Vec<BuildRequestRow>> {
        read::build_requests(self, q)
    }

    fn request_partitions(&self, id: &str) -> Result<Vec<RequestPartitionRow>> {
        read::request_partitions(self, id)
    }

    fn request_partitions_page(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RequestPartitionRow>> {
        read::request_partitions_page(self, id, after, limit)
    }

    fn job_runs_by_id(&self, ids: &[&str]) -> Result<Vec<JobRunRow>> {
        read::job_runs_by_id(self, ids)
    }

    fn run_recipes(&self, ids: &[&str]) -> Result<Vec<RunRecipe>> {
        read::run_recipes(self, ids)
    }

    fn job_run(&self, id: &str) -> Result<Option<JobRunRow>> {
        read::job_run(self, id)
    }

    fn ids_matching(&self, kind: IdKind, text: &str, limit: usize) -> Result<Vec<String>> {
        read::ids_matching(self, kind, text, limit)
    }

    fn checks_of(&self, refs: &[&str]) -> Result<Vec<CheckRow>> {
        read::checks_of(self, refs)
    }

    fn any_blocking_failure(&self) -> Result<bool> {
        read::any_blocking_failure(self)
    }

    fn check_counts(&self) -> Result<Vec<CheckCount>> {
        read::check_counts(self)
    }

    fn arrivals_of(&self, refs: &[&str]) -> Result<Vec<ArrivalRow>> {
        read::arrivals_of(self, refs)
    }

    fn recent_arrivals(&self, dataset: &str, limit: usize) -> Result<Vec<ArrivalRow>> {
        read::recent_arrivals(self, dataset, limit)
    }

    fn late_refs(&self) -> Result<Vec<String>> {
        read::late_refs(self)
    }

    fn readers(
        &self,
        input_ref: &str,
        input_run: Option<&str>,
        data_version: Option<&str>,
        of: ReadersOf,
        limit: usize,
    ) -> Result<Vec<String>> {
        read::readers(self, input_ref, input_run, data_version, of, limit)
    }

    fn want(&self, id: &str) -> Result<Option<WantRow>> {
        read::want(self, id)
    }

    fn wants(&self, status: Option<Status>, active: bool, limit: usize) -> Result<Vec<WantRow>> {
        read::wants(self, status, active, limit)
    }

    fn job_runs(&self, q: &RunQuery) -> Result<Vec<JobRunRow>> {
        read::job_runs(self, q)
    }

    fn each_job_run(&self, q: &RunQuery, each: &mut dyn FnMut(JobRunRow)) -> Result<()> {
        read::each_job_run(self, q, each)
    }

    fn build_run_counts(&self, build_request_id: &str) -> Result<BuildRunCounts> {
        read::build_run_counts(self, build_request_id)
    }

    fn metric_values(
        &self,
        job: &str,
        name: &str,
        after: Option<&MetricKey>,
        limit: usize,
    ) -> Result<Vec<MetricValue>> {
        read::metric_values(self, job, name, after, limit)
    }

    fn run_metrics(&self, job_run_id: &str) -> Result<Vec<MetricValue>> {
        read::run_metrics(self, job_run_id)
    }

    fn metric_history(&self, q: &HistoryQuery<'_>) -> Result<Vec<(String, f64)>> {
        read::metric_history(self, q)
    }

    fn recent_metrics(&self, job: &str, runs: usize) -> Result<Vec<MetricValue>> {
        read::recent_metrics(self, job, runs)
    }

    fn job_stats(&self, job: Option<&str>) -> Result<Vec<JobStats>> {
        read::job_stats(self, job)
    }

    fn sql(&self, query: &str, limits: SqlLimits) -> Result<SqlResult> {
        sql::sql(self, query, limits)
    }

    fn heartbeat(&self, owner: &str) -> Result<()> {
        lease::heartbeat(self, owner)
    }

    fn silent_for(&self, owner: &str) -> Result<Option<Duration>> {
        lease::silent_for(self, owner)
    }

    fn rejoin(&self, owner: &str) -> Result<()> {
        lease::rejoin(self, owner)
    }

    fn revoke_lease(&self, owner: &str, timeout: Duration) -> Result<bool> {
        lease::revoke_lease(self, owner, timeout)
    }

    fn shared(&self) -> bool {
        true
    }

    fn location(&self) -> String {
        crate::redact(&self.url)
    }
}
