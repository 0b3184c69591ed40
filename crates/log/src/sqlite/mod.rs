//! The SQLite event log: the embedded default.
//!
//! One writer connection behind a mutex appends batches in `BEGIN IMMEDIATE` transactions, so two
//! processes on one file serialize their writes and each batch validates against the state the
//! other left. Readers use their own connections (WAL lets them read while the writer writes).
//! User SQL runs on a separate read-only connection with an authorizer, a row cap and a deadline.
//! The schema is documented in `docs/event-log.md`.
//!
//! This module holds [`SqliteStore`] and hands each call of its [`EventStore`] implementation to
//! the module of its concern: `open` (the file, its connections' settings, the schema's
//! migrations), `append` (the writer's transaction), `read` (the projections' queries), `sql`
//! (user SQL), `lease` (heartbeats), `plan_cache` (the plans of no-op builds) and `checkpointer`
//! (the WAL's upkeep). `wal_batch` is the VFS the writer writes through.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use rusqlite::Connection;

use crate::cache::StateCache;
use crate::event::{Event, Status};
use crate::store::*;

mod append;
mod checkpointer;
mod lease;
mod open;
mod plan_cache;
mod read;
mod sql;
mod wal_batch;

use checkpointer::Checkpointer;
use open::BUSY_TIMEOUT;
pub use open::SCHEMA_VERSION;

pub struct SqliteStore {
    path: PathBuf,
    writer: Mutex<Writer>,
    readers: Mutex<Vec<Connection>>,
    /// Started by the first write: a store only read from needs none.
    checkpointer: std::sync::OnceLock<Option<Checkpointer>>,
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

fn storage(e: rusqlite::Error) -> LogError {
    LogError::Storage(e.to_string())
}

impl SqliteStore {
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
}

impl EventStore for SqliteStore {
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

    fn job_run(&self, id: &str) -> Result<Option<JobRunRow>> {
        read::job_run(self, id)
    }

    fn job_runs_by_id(&self, ids: &[&str]) -> Result<Vec<JobRunRow>> {
        read::job_runs_by_id(self, ids)
    }

    fn run_recipes(&self, ids: &[&str]) -> Result<Vec<RunRecipe>> {
        read::run_recipes(self, ids)
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

    fn ids_matching(&self, kind: IdKind, text: &str, limit: usize) -> Result<Vec<String>> {
        read::ids_matching(self, kind, text, limit)
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

    fn build_run_counts(&self, build_request_id: &str) -> Result<BuildRunCounts> {
        read::build_run_counts(self, build_request_id)
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

    fn location(&self) -> String {
        format!("sqlite:{}", self.path.display())
    }

    fn keeps_plans(&self) -> bool {
        true
    }

    fn kept_plan(&self, key: &str, id: &str) -> Result<Option<KeptPlan>> {
        plan_cache::kept_plan(self, key, id)
    }

    fn keep_plan(&self, key: &str, since: i64, id: &str, body: Option<&[u8]>) -> Result<bool> {
        plan_cache::keep_plan(self, key, since, id, body)
    }
}
