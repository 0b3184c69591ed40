//! The storage interface every backend implements, and the rows its queries return.
//!
//! Callers see only [`EventStore`]; [`crate::open`] picks the backend from the log's URI.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use crate::event::{Event, Status};

#[derive(Debug, thiserror::Error)]
pub enum LogError {
    #[error("cannot open event log `{location}`: {message}")]
    Open { location: String, message: String },
    #[error("event log `{location}` has schema version {found}, newer than this databuild understands ({supported}); upgrade databuild")]
    NewerSchema {
        location: String,
        found: i64,
        supported: i64,
    },
    #[error(
        "event log `{location}` is locked by another process (waited {waited_ms} ms: {detail})"
    )]
    Locked {
        location: String,
        waited_ms: u64,
        detail: String,
    },
    /// An appended event is not a valid next state; nothing of its batch was written.
    #[error("event refused: {reason} (event {position} of its batch: {kind} `{status}`)")]
    Refused {
        position: usize,
        kind: String,
        status: String,
        reason: String,
        /// Which refusal, for a caller that acts on it (never match on `reason`).
        refusal: crate::state::RefusalKind,
    },
    /// A user's SQL query was refused or failed.
    #[error("{0}")]
    Sql(String),
    /// A user's SQL query would build a value, or a result, larger than its limits allow.
    #[error("{0}")]
    SqlTooLarge(String),
    #[error("event log storage failed: {0}")]
    Storage(String),
    /// This process's lease on the log was revoked: another process took its work over.
    #[error("this process (`{owner}`) lost its lease on the event log: another process took its work over after it was silent too long")]
    LeaseLost { owner: String },
    /// The log's server could not be reached (a lost connection, a server restarting) for as
    /// long as the operation kept retrying.
    #[error("event log `{location}` is unreachable (retried for {waited_ms} ms): {message}")]
    Unavailable {
        location: String,
        waited_ms: u64,
        message: String,
    },
}

impl LogError {
    /// Errors caused by the caller's input rather than the system.
    pub fn is_user_error(&self) -> bool {
        matches!(
            self,
            LogError::Sql(_)
                | LogError::SqlTooLarge(_)
                | LogError::NewerSchema { .. }
                | LogError::Open { .. }
        )
    }
}

pub type Result<T> = std::result::Result<T, LogError>;

/// A silence computed from two clock readings, never negative.
pub(crate) fn silence(ns: i64) -> std::time::Duration {
    std::time::Duration::from_nanos(ns.max(0) as u64)
}

/// A partition as the log knows it. Partitions never mentioned by a run are absent: missing.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionRow {
    pub partition_ref: String,
    /// `building`, `available`, `failed` or `tainted`.
    pub status: Status,
    pub job_run_id: Option<String>,
    pub build_request_id: Option<String>,
    pub job: Option<String>,
    pub data_version: Option<String>,
    pub message: Option<String>,
    pub updated_at: i64,
}

/// The latest result of one check of one partition (`partition_checks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckRow {
    pub partition_ref: String,
    pub check_name: String,
    /// `completed` (it passed) or `failed`.
    pub status: Status,
    pub blocking: bool,
    /// The instance checked: the run that built the partition.
    pub job_run_id: String,
    pub job: Option<String>,
    pub build_request_id: Option<String>,
    pub check_version: Option<String>,
    /// The command it ran (empty for a check its job reported inline).
    pub command: Vec<String>,
    pub inline: bool,
    pub message: Option<String>,
    pub metrics: Option<serde_json::Value>,
    pub updated_at: i64,
    /// The code the check ran (`data.code_versions` of its event); empty for a result recorded
    /// before code versions, which compares on its version and command only.
    pub code_versions: BTreeMap<String, String>,
}

impl CheckRow {
    pub fn passed(&self) -> bool {
        self.status == Status::Completed
    }
}

/// When an external partition was first seen available (`arrivals`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ArrivalRow {
    pub partition_ref: String,
    pub dataset: String,
    /// ns since the epoch.
    pub arrived_at: i64,
    pub data_version: Option<String>,
}

/// How many partitions' latest results of a check passed and failed, per job.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CheckCount {
    pub job: String,
    pub check_name: String,
    pub blocking: bool,
    pub passed: u64,
    pub failed: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BuildRequestRow {
    pub build_request_id: String,
    pub status: Status,
    /// Every requested ref (of an analysis of more than 1,000, the first 1,000 it recorded); in
    /// listings ([`EventStore::build_requests`]) only the first
    /// [`crate::projection::REQUESTED_HEAD`] of the `requested_count`.
    pub requested_partitions: Vec<String>,
    pub requested_count: u64,
    pub analyze_only: bool,
    pub owner: Option<String>,
    pub message: Option<String>,
    pub created_at: i64,
    pub updated_at: i64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct RequestPartitionRow {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub status: Status,
    pub job_run_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct JobRunRow {
    pub job_run_id: String,
    pub job: String,
    pub build_request_id: Option<String>,
    pub status: Status,
    pub outputs: Vec<String>,
    pub inputs: Vec<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub scheduled_at: Option<i64>,
    pub started_at: Option<i64>,
    pub ended_at: Option<i64>,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    pub relies_on: Option<String>,
    pub pid: Option<u32>,
    pub host: Option<String>,
    pub owner: Option<String>,
    pub job_version: Option<String>,
    pub input_versions: BTreeMap<String, String>,
    pub log_path: Option<String>,
    /// Of each input a job built, the run that had built the instance this run read.
    pub input_runs: BTreeMap<String, String>,
    /// The code it ran, as its `running` event recorded it; empty for a run before code versions.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub code_versions: BTreeMap<String, String>,
}

/// What a run was built from: its job and version, the inputs it read at their versions, its args
/// and env. Whether its outputs are stale is decided from these alone, so planning reads only
/// them ([`EventStore::run_recipes`]): a whole [`JobRunRow`] also parses its outputs, log and the
/// runs of its inputs, and keeps its maps as `BTreeMap`s (~540 bytes each, however few entries).
/// Lists, not vectors: a no-op build of 24k jobs holds every recipe of its closure at once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunRecipe {
    pub job_run_id: String,
    pub job: String,
    pub job_version: Option<String>,
    pub inputs: Box<[String]>,
    /// By input ref (and alias), sorted.
    pub input_versions: Box<[(String, String)]>,
    pub args: Box<[String]>,
    /// By name, sorted.
    pub env: Box<[(String, String)]>,
    /// The code it ran, by path, sorted; empty for a run made before code versions.
    pub code_versions: Box<[(String, String)]>,
}

impl RunRecipe {
    /// Whether `other` (of this log or another) was made the same way: the same job, version,
    /// args, env, code and input versions; which run it was does not matter.
    pub fn same_as(&self, other: &RunRecipe) -> bool {
        self.job == other.job
            && self.job_version == other.job_version
            && self.args == other.args
            && self.env == other.env
            && self.code_versions == other.code_versions
            && self.input_versions == other.input_versions
    }

    /// The version of `input` the run read.
    pub fn read(&self, input: &str) -> Option<&String> {
        self.input_versions
            .binary_search_by(|(r, _)| r.as_str().cmp(input))
            .ok()
            .map(|i| &self.input_versions[i].1)
    }
}

impl From<JobRunRow> for RunRecipe {
    fn from(run: JobRunRow) -> Self {
        RunRecipe {
            job_run_id: run.job_run_id,
            job: run.job,
            job_version: run.job_version,
            inputs: run.inputs.into(),
            input_versions: run.input_versions.into_iter().collect(),
            args: run.args.into(),
            env: run.env.into_iter().collect(),
            code_versions: run.code_versions.into_iter().collect(),
        }
    }
}

/// A want as its projection holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WantRow {
    pub want_id: String,
    /// `requested`, `waiting`, `satisfied`, `expired` or `cancelled`.
    pub status: Status,
    pub refs: Vec<String>,
    pub created_at: i64,
    pub expires_at: Option<i64>,
    pub sla_seconds: Option<u64>,
    pub recurring: Option<String>,
    pub waiting_for: Option<String>,
    pub message: Option<String>,
    pub build_request_id: Option<String>,
    /// How many of its partitions missed their SLA.
    pub sla_missed: u64,
    pub updated_at: i64,
    /// Its build failed: when the service tries again (ns), as its latest event says.
    pub retry_at: Option<i64>,
    /// When it is to be met (`--by`, ns), as its `requested` event says.
    pub deadline: Option<i64>,
}

impl WantRow {
    /// Still asking: neither expired nor cancelled.
    pub fn is_active(&self) -> bool {
        !matches!(self.status, Status::Expired | Status::Cancelled)
    }

    /// It is due by a time: its own (`--by`), or its SLA's after each partition's period.
    pub fn has_deadline(&self) -> bool {
        self.deadline.is_some() || self.sla_seconds.is_some()
    }
}

impl JobRunRow {
    pub fn duration_ms(&self) -> Option<f64> {
        Some((self.ended_at? - self.started_at?) as f64 / 1e6)
    }
}

/// Milliseconds rounded to the microsecond, so that backends summing in different orders agree.
pub fn round_ms(ms: Option<f64>) -> Option<f64> {
    ms.map(|m| (m * 1000.0).round() / 1000.0)
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobStats {
    pub job: String,
    pub runs: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub skipped: u64,
    /// Completed over finished (completed + failed), if any finished.
    pub success_rate: Option<f64>,
    /// Mean and percentiles over the most recent [`DURATION_SAMPLE`] completed runs.
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    pub last_run_at: Option<i64>,
}

/// How many runs of one job, in one build, are in one status.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRunCount {
    pub job: String,
    pub status: Status,
    pub n: u64,
}

/// One build's runs, counted ([`EventStore::build_run_counts`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuildRunCounts {
    pub by_status: Vec<JobRunCount>,
    /// Per job, its distinct outputs among the build's runs: the planned runs that were
    /// claimed (or ended) at least once, retries counted once.
    pub claimed: Vec<(String, u64)>,
}

/// How many of a job's most recent completed runs its duration figures describe: the figures stay
/// cheap at millions of runs and follow the job's current behaviour.
pub const DURATION_SAMPLE: usize = 1000;

impl JobStats {
    /// Figures from run counts by status, the last run's time, and the durations (ms) of the most
    /// recent completed runs. Percentiles are Postgres's `percentile_disc`: the first value whose
    /// cumulative share reaches p.
    pub fn from_counts(
        job: &str,
        counts: &BTreeMap<Status, u64>,
        last_run_at: Option<i64>,
        mut durations: Vec<f64>,
    ) -> JobStats {
        let count = |s: Status| counts.get(&s).copied().unwrap_or(0);
        let (completed, failed) = (count(Status::Completed), count(Status::Failed));
        durations.sort_by(f64::total_cmp);
        let percentile = |p: f64| {
            (!durations.is_empty()).then(|| {
                let i = ((p * durations.len() as f64).ceil() as usize).max(1) - 1;
                durations[i]
            })
        };
        JobStats {
            job: job.to_string(),
            runs: counts.values().sum(),
            completed,
            failed,
            cancelled: count(Status::Cancelled),
            skipped: count(Status::Skipped),
            success_rate: (completed + failed > 0)
                .then(|| completed as f64 / (completed + failed) as f64),
            mean_ms: round_ms(
                (!durations.is_empty())
                    .then(|| durations.iter().sum::<f64>() / durations.len() as f64),
            ),
            p50_ms: round_ms(percentile(0.5)),
            p95_ms: round_ms(percentile(0.95)),
            last_run_at,
        }
    }

    /// The figures of a job with no runs.
    pub fn never_run(job: &str) -> JobStats {
        JobStats {
            job: job.to_string(),
            runs: 0,
            completed: 0,
            failed: 0,
            cancelled: 0,
            skipped: 0,
            success_rate: None,
            mean_ms: None,
            p50_ms: None,
            p95_ms: None,
            last_run_at: None,
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// Only events with `idx` greater than this.
    pub since: Option<i64>,
    pub limit: Option<usize>,
    /// The newest first (by `idx`): with `limit`, the last events of the filter, read from the
    /// log's end (by a partial index for rare kinds), never a scan from its start.
    pub newest_first: bool,
    pub build_request_id: Option<String>,
    pub partition_ref: Option<String>,
    pub job: Option<String>,
    pub job_run_id: Option<String>,
    pub kind: Option<crate::event::Kind>,
    pub status: Option<Status>,
    /// Time bounds, in ns since the epoch (`from` inclusive, `to` exclusive).
    pub from: Option<i64>,
    pub to: Option<i64>,
}

#[derive(Debug, Clone, Default)]
pub struct PartitionQuery {
    /// A glob over refs (`*`, `?`, `[...]`), as in SQLite's GLOB.
    pub pattern: Option<String>,
    pub status: Option<Status>,
    pub limit: usize,
    /// Keyset pagination: only refs sorting after this one.
    pub after: Option<String>,
}

#[derive(Debug, Clone, Default)]
pub struct BuildQuery {
    pub status: Option<Status>,
    /// Only builds (not analyses) that have not ended.
    pub unfinished: bool,
    /// Analyses (`analyze`, recorded as build requests too) along with builds.
    pub analyses: bool,
    pub limit: usize,
    /// Created at or after this time (ns since the epoch).
    pub from: Option<i64>,
    /// Created before this time (ns since the epoch).
    pub to: Option<i64>,
    /// Keyset pagination: only builds listed after this one (`created_at`, `build_request_id`)
    /// in the listing's order (newest first, then by id), so a page costs its rows whatever
    /// its depth.
    pub after: Option<(i64, String)>,
}

/// Which readers of a partition [`EventStore::readers`] finds besides those of its run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadersOf {
    /// The instance, exactly: by version only the readers that recorded no run (of an external,
    /// a source day, or recorded before lineage).
    Instance,
    /// The data: every reader of the version, whichever run built it (a rebuild from unchanged
    /// inputs makes the same version; staleness sees them as one).
    Data,
}

/// What kind of entity an id names, for [`EventStore::ids_matching`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdKind {
    BuildRequest,
    JobRun,
    Want,
}

/// How many characters an id's short form has: its last ones (the random part of a UUID v7, so
/// the short forms of runs minted in the same millisecond differ; their first ones do not).
pub const SHORT_ID: usize = 8;

/// An id's short form, as the CLI and the dashboard show it.
pub fn short_id(id: &str) -> &str {
    id.get(id.len().saturating_sub(SHORT_ID)..).unwrap_or(id)
}

/// The table and id column of an id kind.
pub(crate) fn id_column(kind: IdKind) -> (&'static str, &'static str) {
    match kind {
        IdKind::BuildRequest => ("build_requests", "build_request_id"),
        IdKind::JobRun => ("job_runs", "job_run_id"),
        IdKind::Want => ("wants", "want_id"),
    }
}

/// `ids` without repeats (an id may be both a prefix's and a short form's match), at most
/// `limit` of them.
pub(crate) fn distinct(mut ids: Vec<String>, limit: usize) -> Vec<String> {
    ids.sort();
    ids.dedup();
    ids.truncate(limit);
    ids
}

/// The bounds of the ids that start with `prefix` (ids are ASCII hex digits and dashes, all
/// below `~`): `prefix <= id < prefix~`.
pub(crate) fn prefix_bounds(prefix: &str) -> (String, String) {
    (prefix.to_string(), format!("{prefix}~"))
}

#[derive(Debug, Clone, Default)]
pub struct RunQuery {
    pub job: Option<String>,
    pub build_request_id: Option<String>,
    /// Only runs still `scheduled`, `queued` or `running`.
    pub unfinished: bool,
    /// Without what each run read and ran with: `inputs`, `args`, `env`, `input_versions` and
    /// `input_runs` come empty (a build's summary reads all of its runs, and needs none of it).
    pub brief: bool,
    pub limit: usize,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct SqlResult {
    pub columns: Vec<String>,
    pub rows: Vec<Vec<serde_json::Value>>,
    /// True when the row cap cut the result.
    pub truncated: bool,
}

/// Limits on a user's SQL query. Rows past `max_rows` are cut (`truncated`); a value or a result
/// past its byte limit is refused ([`LogError::SqlTooLarge`]): a cut value or a result missing
/// rows for their size would read as an answer.
#[derive(Debug, Clone, Copy)]
pub struct SqlLimits {
    pub max_rows: usize,
    pub timeout: std::time::Duration,
    /// The result's size: the bytes of every value's text (8 per number) and of the column
    /// names.
    pub max_bytes: usize,
    /// The longest string or blob the query may build, in the result or on the way to it.
    pub max_value_len: usize,
}

impl Default for SqlLimits {
    fn default() -> Self {
        SqlLimits {
            max_rows: 10_000,
            timeout: std::time::Duration::from_secs(10),
            max_bytes: 16 << 20,
            max_value_len: 1 << 20,
        }
    }
}

impl SqlLimits {
    /// For the service's own queries (the dashboard, metrics): no caps on sizes, since their
    /// values are the log's own (a run's outputs may be megabytes) and their shape is known.
    pub fn internal() -> Self {
        SqlLimits {
            max_bytes: usize::MAX,
            max_value_len: i32::MAX as usize,
            ..Default::default()
        }
    }

    /// The refusal of a value longer than `max_value_len`.
    pub fn value_too_long(&self) -> LogError {
        LogError::SqlTooLarge(format!(
            "a value in the result would be longer than {} (the limit on one value); \
             select a part of it (substr, length) instead",
            human_bytes(self.max_value_len)
        ))
    }

    /// The refusal of a result larger than `max_bytes`.
    pub fn result_too_large(&self) -> LogError {
        LogError::SqlTooLarge(format!(
            "the result would be larger than {} (the limit on one result); \
             narrow the query: fewer rows (LIMIT, WHERE) or fewer columns",
            human_bytes(self.max_bytes)
        ))
    }
}

/// The running size of a user query's result, refused once past `max_bytes`.
pub(crate) struct ResultSize {
    bytes: usize,
    limits: SqlLimits,
}

impl ResultSize {
    pub(crate) fn new(columns: &[String], limits: &SqlLimits) -> Self {
        ResultSize {
            bytes: columns.iter().map(String::len).sum(),
            limits: *limits,
        }
    }

    pub(crate) fn add(&mut self, value: &serde_json::Value) -> Result<()> {
        self.bytes += match value {
            serde_json::Value::String(s) => s.len(),
            serde_json::Value::Number(_) => 8,
            serde_json::Value::Bool(_) => 1,
            _ => 0,
        };
        if self.bytes > self.limits.max_bytes {
            return Err(self.limits.result_too_large());
        }
        Ok(())
    }
}

/// `n` bytes for a message: in MiB or KiB when a whole number of them, else in bytes.
fn human_bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} bytes"),
    }
}

/// One row of `run_metrics`: a measure DataBuild took of a run (the names of
/// [`crate::RunResources::values`]) or a metric its job reported, for one of its output refs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct MetricValue {
    pub job: String,
    pub name: String,
    pub partition_ref: String,
    pub job_run_id: String,
    pub value: f64,
    /// When the run ended (ns since the epoch).
    pub recorded_at: i64,
}

/// Where a page of [`EventStore::metric_values`] starts: after this partition ref and run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricKey {
    pub partition_ref: String,
    pub job_run_id: String,
}

/// Which earlier values an anomaly check learns from ([`EventStore::metric_history`]): `job`'s
/// metric `name` of the partitions with refs in `from..before`, nearest `before` first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryQuery<'a> {
    pub job: &'a str,
    pub name: &'a str,
    /// The lowest ref (inclusive): the output pattern's literal prefix.
    pub from: &'a str,
    /// The partition judged: only refs before it (in key order) are read.
    pub before: &'a str,
    pub limit: usize,
}

/// The build event log. Implementations validate every event against [`crate::state`] and keep
/// their projections in the same transaction as the events they derive from.
pub trait EventStore: Send + Sync {
    /// Appends a batch atomically: all events are valid and written, or none is. Returns them
    /// with their `idx`.
    fn append(&self, events: Vec<Event>) -> Result<Vec<Event>>;

    fn events(&self, filter: &EventFilter) -> Result<Vec<Event>>;
    fn last_idx(&self) -> Result<i64>;

    fn partition(&self, partition_ref: &str) -> Result<Option<PartitionRow>>;
    /// The rows of those of `refs` that exist, read at once (one read transaction), in no particular
    /// order. Absent refs give nothing: planning asks for millions, most of them never built.
    fn partitions_by_ref(&self, refs: &[&str]) -> Result<Vec<PartitionRow>>;
    fn partitions(&self, query: &PartitionQuery) -> Result<Vec<PartitionRow>>;
    /// The latest check results of these partitions (every check of each), in any order.
    fn checks_of(&self, refs: &[&str]) -> Result<Vec<CheckRow>>;
    /// Has any blocking check failed, of any instance? (When not, no partition is held back
    /// by one, and planning reads no check.)
    fn any_blocking_failure(&self) -> Result<bool>;
    /// The latest results counted per job and check (for `/metrics` and the datasets page).
    fn check_counts(&self) -> Result<Vec<CheckCount>>;
    /// The arrivals of those of `refs` that have one, read at once, in any order.
    fn arrivals_of(&self, refs: &[&str]) -> Result<Vec<ArrivalRow>>;
    /// `dataset`'s `limit` latest arrivals (by when they were seen), latest first.
    fn recent_arrivals(&self, dataset: &str, limit: usize) -> Result<Vec<ArrivalRow>>;
    /// The external partitions recorded late that have not arrived since, by ref.
    fn late_refs(&self) -> Result<Vec<String>>;
    /// Counts of partitions by status among refs matching `pattern` (all when `None`).
    fn partition_counts(&self, pattern: Option<&str>) -> Result<BTreeMap<Status, u64>>;
    /// Counts of the partitions a job built, by status (from a projection: a few rows read).
    fn job_partition_counts(&self, job: &str) -> Result<BTreeMap<Status, u64>>;

    fn build_request(&self, id: &str) -> Result<Option<BuildRequestRow>>;
    fn build_requests(&self, query: &BuildQuery) -> Result<Vec<BuildRequestRow>>;
    fn request_partitions(&self, id: &str) -> Result<Vec<RequestPartitionRow>>;
    /// A page of [`EventStore::request_partitions`]: up to `limit` rows after the ref `after`,
    /// in the order of the table's key (bytes on SQLite, the database's collation on
    /// PostgreSQL): an index range, as cheap for a build of a million partitions as of ten.
    fn request_partitions_page(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> Result<Vec<RequestPartitionRow>>;

    fn job_run(&self, id: &str) -> Result<Option<JobRunRow>>;
    /// The runs of these ids that exist, in any order: one round trip on a server.
    fn job_runs_by_id(&self, ids: &[&str]) -> Result<Vec<JobRunRow>> {
        ids.iter()
            .filter_map(|id| self.job_run(id).transpose())
            .collect()
    }
    /// What the runs of these ids that exist were built from, in any order: one round trip on a
    /// server.
    fn run_recipes(&self, ids: &[&str]) -> Result<Vec<RunRecipe>> {
        Ok(self
            .job_runs_by_id(ids)?
            .into_iter()
            .map(RunRecipe::from)
            .collect())
    }
    fn want(&self, id: &str) -> Result<Option<WantRow>>;
    /// Up to `limit` runs that read `input_ref` (the reverse index `run_inputs`): the instance
    /// `input_run` built, and by `data_version` as `of` says.
    fn readers(
        &self,
        input_ref: &str,
        input_run: Option<&str>,
        data_version: Option<&str>,
        of: ReadersOf,
        limit: usize,
    ) -> Result<Vec<String>>;
    /// Up to `limit` ids of `kind` that `text` names: ids it begins (a prefix, or a whole id),
    /// or whose short form ([`short_id`]) it is. Served by indexes: no scan of the runs.
    fn ids_matching(&self, kind: IdKind, text: &str, limit: usize) -> Result<Vec<String>>;
    /// Wants, newest first; `active` keeps those neither expired nor cancelled.
    fn wants(&self, status: Option<Status>, active: bool, limit: usize) -> Result<Vec<WantRow>>;
    fn job_runs(&self, query: &RunQuery) -> Result<Vec<JobRunRow>>;
    /// [`EventStore::job_runs`] handed to `each` one at a time, so that the caller keeps what it
    /// needs of each, not every whole row at once (a summary of a build of 24k runs held 35 MB of
    /// rows).
    fn each_job_run(&self, query: &RunQuery, each: &mut dyn FnMut(JobRunRow)) -> Result<()> {
        self.job_runs(query)?.into_iter().for_each(each);
        Ok(())
    }
    /// Up to `limit` values of metric `name` of `job`'s runs, in key order: by partition ref,
    /// then by run (run ids are time-ordered), after `after`. An index range: one job's history
    /// of one metric, partition by partition, for trends.
    fn metric_values(
        &self,
        job: &str,
        name: &str,
        after: Option<&MetricKey>,
        limit: usize,
    ) -> Result<Vec<MetricValue>>;
    /// Every value of `run_metrics` of one run, by partition ref then name.
    fn run_metrics(&self, job_run_id: &str) -> Result<Vec<MetricValue>>;
    /// The values an anomaly check learns from, as `(partition ref, value)`: of each partition's
    /// current instance only, while it is available and failed no check (a partition that failed
    /// one would teach the band its own anomaly). An index range read backwards, so bounded by
    /// `limit` but for the failed ones it skips.
    fn metric_history(&self, q: &HistoryQuery<'_>) -> Result<Vec<(String, f64)>>;
    /// Every value of `run_metrics` of `job`'s last `runs` runs (by when they were scheduled):
    /// a bounded sample its percentiles are taken from.
    fn recent_metrics(&self, job: &str, runs: usize) -> Result<Vec<MetricValue>>;
    /// Metrics per job (one job when `job` is given).
    fn job_stats(&self, job: Option<&str>) -> Result<Vec<JobStats>>;
    /// How many of one build's runs each job has in each status, and how many distinct planned
    /// runs (outputs) of each job have a run at all (two grouped reads).
    fn build_run_counts(&self, build_request_id: &str) -> Result<BuildRunCounts>;

    /// A read-only query; anything that could write or reach outside the log is refused.
    fn sql(&self, query: &str, limits: SqlLimits) -> Result<SqlResult>;

    /// Renews the lease of `owner` (a driving process): it is alive now, by the log's clock.
    /// [`LogError::LeaseLost`] once another process revoked it to take its work over.
    fn heartbeat(&self, owner: &str) -> Result<()>;
    /// How long `owner` has been silent, by the log's clock; `None` if it never renewed a lease.
    fn silent_for(&self, owner: &str) -> Result<Option<std::time::Duration>>;
    /// Revokes the lease of `owner` if it has been silent for `timeout` or longer, so that its
    /// heartbeats are refused from then on. True if its lease is revoked (now or before): only
    /// then may its work be taken over.
    fn revoke_lease(&self, owner: &str, timeout: std::time::Duration) -> Result<bool>;
    /// Gives `owner` a fresh lease after its last one was revoked: it dropped every piece of work
    /// it held (the process that revoked it closed them) and drives new work from now on.
    fn rejoin(&self, owner: &str) -> Result<()>;
    /// Whether processes on other machines may share this log; their leases then fence them.
    fn shared(&self) -> bool {
        false
    }

    /// Where the log lives, for messages (credentials redacted).
    fn location(&self) -> String;

    /// Whether this store keeps no-op plans ([`EventStore::keep_plan`]). PostgreSQL does not:
    /// its hosts write at once and its `idx` may commit out of order, so every build plans.
    fn keeps_plans(&self) -> bool {
        false
    }

    /// The no-op plan kept under `key` (see [`EventStore::keep_plan`]), if it still holds for
    /// build request `id`: every event after it is one `id` records as a no-op, none of which
    /// changes what a plan reads (its `build_request` events, its `skipped` runs, and the
    /// `available` of its requested refs without a run, which leaves a partition's row as it
    /// was). `None` otherwise, and from a store that keeps none.
    fn kept_plan(&self, _key: &str, _id: &str) -> Result<Option<KeptPlan>> {
        Ok(None)
    }

    /// Keeps a no-op plan under `key` as holding at the log's end, if every event after `since`
    /// (where the plan was made, or last found to hold) is a no-op event of build request `id`
    /// (as [`EventStore::kept_plan`] asks), checked in the write's own transaction.
    /// `body` `None` keeps the body kept already. Returns whether it was kept.
    fn keep_plan(&self, _key: &str, _since: i64, _id: &str, _body: Option<&[u8]>) -> Result<bool> {
        Ok(false)
    }
}

/// A no-op plan kept by [`EventStore::keep_plan`].
#[derive(Debug, Clone, PartialEq)]
pub struct KeptPlan {
    /// The log as planned: the plan holds while no other event follows.
    pub log_idx: i64,
    pub body: Vec<u8>,
}
