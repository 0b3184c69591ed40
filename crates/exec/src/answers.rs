//! Every answer of the API and of `--json`, as a type: the service serializes them, the CLI (in
//! this process or over HTTP) and the upstream client deserialize them, and `utoipa` documents
//! them in the OpenAPI document. A renamed field is a compile error, not a silent `null`.
//!
//! Times: the log keeps ns since the epoch; an answer shows each `*_at` as RFC 3339 text with the
//! exact ns beside it as `*_at_ns` (contract section 6). The `*_at_ns` fields come last in each
//! type so that the JSON is the same, key for key and in order, as the walk over JSON values it
//! replaces. An event's `timestamp` stays ns (contract section 5).
//!
//! The conversions from the log's rows (`From<&Row>`) are the only place that turns ns into
//! text.

use std::collections::BTreeMap;

use databuild_log::{
    BuildRequestRow, EventData, JobRunRow, Kind, RequestPartitionRow, RunResources, Status, WantRow,
};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

fn text(ns: i64) -> String {
    rfc3339(ns)
}

fn maybe(ns: Option<i64>) -> Option<String> {
    ns.map(rfc3339)
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct SourceView {
    pub name: String,
    /// `webhook` or `directory`.
    pub kind: String,
    pub retention_days: u32,
    pub body_format: String,
    pub signed: bool,
    pub days: DayCounts,
    pub tables: Vec<TableView>,
}

#[derive(Debug, Clone, Default, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct DayCounts {
    pub open: usize,
    pub sealed: usize,
    pub expired: usize,
    pub first: Option<String>,
    pub last: Option<String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct TableView {
    pub name: String,
    /// The version `<table>/date=...` reads.
    pub promoted: u32,
    pub versions: Vec<VersionView>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct VersionView {
    pub version: u32,
    /// `name: type` per column.
    pub columns: Vec<String>,
    /// Dates with a live partition of this version.
    pub live_dates: usize,
    /// Of those, how many were carried forward from the previous version.
    pub carried: usize,
}

/// One day of a source: open, sealed or expired.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct SourceDay {
    pub date: String,
    /// `open`, `sealed` or `expired`.
    pub state: String,
    pub records: Option<u64>,
}

/// What ingesting a source's dropped files did.
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct IngestReport {
    pub files: u64,
    pub records: u64,
    pub rejected: Vec<String>,
}

/// What one maintenance pass of a source did.
#[derive(Debug, Default, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Maintenance {
    pub source: String,
    pub ingested: IngestReport,
    /// `[date, records]` of each partition sealed.
    #[schema(value_type = Vec<Vec<serde_json::Value>>)]
    pub sealed: Vec<(String, u64)>,
    pub expired: Vec<String>,
}

/// One date of `source show`: the raw partition and each table version's partition.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct CoverageRow {
    pub date: String,
    pub raw: Option<SourceDay>,
    /// `table.vN` → `live (loaded)`, `live (carried)`, `stale`, `failed`...
    pub versions: BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct SourceDetail {
    #[serde(flatten)]
    pub source: SourceView,
    pub today: String,
    pub coverage: Vec<CoverageRow>,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct Promotion {
    pub table: String,
    pub from: u32,
    pub to: u32,
    /// The downstream build run first, if asked for.
    pub downstream: Option<BuildSummary>,
}

/// A named pattern of the graph and how many of its partitions are in each state.
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct DatasetView {
    pub name: String,
    /// `dataset` (external), `source` or `job` (a job's output).
    pub kind: String,
    pub pattern: String,
    /// Partition counts by status (`live`, `stale`, `missing` for data gone since it was recorded
    /// live, `building`, `failed`, `tainted`); partitions never built are not counted. Counted by
    /// a glob of the pattern, so nested patterns may overlap. A file-backed external's are the
    /// partitions in the data dir: `present`, and `tainted` while a taint holds.
    pub partitions: std::collections::BTreeMap<String, u64>,
    /// Whether the counts are whole. Unless asked for (`exact`), a job output with more available
    /// partitions than one freshness scan checks (`engine::listing::FRESHNESS_SCAN`) is counted as the log
    /// records it, `available`: the exact split costs a check of every one of them; and a
    /// file-backed external's walk stops past as many, `present` then being at least that.
    pub freshness_checked: bool,
    /// Whether its partitions could be listed: false for an external checked by a probe command
    /// or an upstream service (`probed`), which are asked about one ref at a time; only what the
    /// log records of them (taints) is counted.
    pub listed: bool,
}

impl DatasetView {
    /// What a file-backed external's partitions whose data is there, untainted, are counted as.
    pub const PRESENT: &'static str = "present";

    /// Whether the count under `status` is a floor: a walk of an external's files that stopped
    /// past [`crate::engine::listing::FRESHNESS_SCAN`] of them.
    pub fn at_least(&self, status: &str) -> bool {
        status == Self::PRESENT && !self.freshness_checked
    }
}

/// What a build did (contract section 4, `build --json`).
#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct BuildSummary {
    pub build_request_id: String,
    /// `completed`, `failed`, `refused` (its plan over `max_runs`: nothing ran) or `cancelled`.
    pub status: Status,
    pub built: Vec<String>,
    pub skipped: Vec<String>,
    pub delegated: Vec<String>,
    /// Requested refs that are not live at the end of the build (contract section 4).
    pub failed: Vec<String>,
    /// Runs that ran and failed for good (not retried), each with its last log line.
    pub failures: Vec<RunFailure>,
    /// Outputs of runs that started and were cancelled.
    pub cancelled: Vec<String>,
    /// Outputs of runs the build never started (it stopped, or an input failed).
    pub not_started: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// How many entries each list has in all: a build's detail shows at most
    /// [`DETAIL_ROWS`] of each (`GET /api/v1/builds/{id}/summary` has them all).
    #[serde(default)]
    pub counts: SummaryCounts,
}

/// The length of each of a [`BuildSummary`]'s lists, whether or not they are cut.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, serde::Deserialize, utoipa::ToSchema,
)]
pub struct SummaryCounts {
    pub built: u64,
    /// Of `built`: rebuilt with the bytes they had ("rebuilt, unchanged"), so what reads them
    /// was kept. Counted by run: outputs of runs every output of which came out unchanged.
    #[serde(default)]
    pub unchanged: u64,
    /// Of `built`: outputs of runs that ran no job, taking an instance another environment
    /// made from the same recipe (contract section 9).
    #[serde(default)]
    pub reused: u64,
    pub skipped: u64,
    /// Of `skipped`: outputs of runs planned for being stale and not run, because the runs
    /// before them came out unchanged ("its inputs came out unchanged").
    #[serde(default)]
    pub kept: u64,
    pub delegated: u64,
    pub failed: u64,
    pub failures: u64,
    pub cancelled: u64,
    pub not_started: u64,
}

/// How many rows a build's detail holds of each of its lists (partitions, runs, a summary's
/// refs): a build of a million partitions answers as fast as one of ten, and says how many more
/// there are and where to page through them.
pub const DETAIL_ROWS: usize = 1000;

impl BuildSummary {
    /// Sets `counts` from the lists as they are (whole).
    pub fn counted(mut self) -> Self {
        self.counts = SummaryCounts {
            built: self.built.len() as u64,
            skipped: self.skipped.len() as u64,
            // Not told by the lists: the summary counts them from the runs.
            unchanged: self.counts.unchanged,
            reused: self.counts.reused,
            kept: self.counts.kept,
            delegated: self.delegated.len() as u64,
            failed: self.failed.len() as u64,
            failures: self.failures.len() as u64,
            cancelled: self.cancelled.len() as u64,
            not_started: self.not_started.len() as u64,
        };
        self
    }

    /// Each list cut to its first `n`; `counts` still says how many there are.
    pub fn cut_to(mut self, n: usize) -> Self {
        self.built.truncate(n);
        self.skipped.truncate(n);
        self.delegated.truncate(n);
        self.failed.truncate(n);
        self.failures.truncate(n);
        self.cancelled.truncate(n);
        self.not_started.truncate(n);
        self
    }
}

/// A run that failed, as a summary names it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq, serde::Deserialize, utoipa::ToSchema)]
pub struct RunFailure {
    pub job: String,
    pub job_run_id: String,
    pub outputs: Vec<String>,
    /// Why, as the log records it (`the job ended with exit status 4`).
    pub message: Option<String>,
    /// The last non-empty line of the run's log, if it has one.
    pub log_tail: Option<String>,
}

/// A partition's status as every answer gives it (`status`, `partitions`, `datasets`, `explain`,
/// the dashboard): derived from the log, the data dir, taints and each config job's choice now,
/// in one place (`Engine::derive`). The JSON is the name in snake_case (`live`, `check_failed`).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum DerivedStatus {
    /// Built, and a rebuild would record the same data version.
    Live,
    /// Built, but a rebuild would record another data version (an input, the job, its config).
    Stale,
    /// Built, but a blocking check of its current instance failed.
    CheckFailed,
    /// Not built, or its data is gone (removed, or absent from the data dir).
    Missing,
    Building,
    Failed,
    Tainted,
    /// A source's raw day whose data expired (table versions carry it forward).
    Expired,
}

/// A status that is not one of [`DerivedStatus`]'s, or not one the caller takes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{given}` is not a partition status; use {allowed}")]
pub struct UnknownStatus {
    pub given: String,
    /// The statuses the caller takes, comma-separated.
    pub allowed: String,
}

impl DerivedStatus {
    pub const ALL: [DerivedStatus; 8] = [
        DerivedStatus::Live,
        DerivedStatus::Stale,
        DerivedStatus::CheckFailed,
        DerivedStatus::Missing,
        DerivedStatus::Building,
        DerivedStatus::Failed,
        DerivedStatus::Tainted,
        DerivedStatus::Expired,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            DerivedStatus::Live => "live",
            DerivedStatus::Stale => "stale",
            DerivedStatus::CheckFailed => "check_failed",
            DerivedStatus::Missing => "missing",
            DerivedStatus::Building => "building",
            DerivedStatus::Failed => "failed",
            DerivedStatus::Tainted => "tainted",
            DerivedStatus::Expired => "expired",
        }
    }

    /// What a recorded status shows as before anything is derived: `available` is `live`, a
    /// removal (gc) `missing`.
    pub fn recorded(status: Status) -> DerivedStatus {
        match status {
            Status::Available => DerivedStatus::Live,
            Status::Building => DerivedStatus::Building,
            Status::Failed => DerivedStatus::Failed,
            Status::Tainted => DerivedStatus::Tainted,
            Status::Expired => DerivedStatus::Expired,
            _ => DerivedStatus::Missing,
        }
    }

    /// One of `allowed`, by its name; else an error naming them.
    pub fn parse_one_of(
        s: &str,
        allowed: &[DerivedStatus],
    ) -> Result<DerivedStatus, UnknownStatus> {
        allowed
            .iter()
            .copied()
            .find(|a| a.as_str() == s)
            .ok_or_else(|| UnknownStatus {
                given: s.to_string(),
                allowed: allowed
                    .iter()
                    .map(|a| a.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }
}

impl std::fmt::Display for DerivedStatus {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

impl std::str::FromStr for DerivedStatus {
    type Err = UnknownStatus;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        DerivedStatus::parse_one_of(s, &DerivedStatus::ALL)
    }
}

/// What a user sees of a partition (contract section 4, `status`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct StatusReport {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub status: DerivedStatus,
    pub reasons: Vec<String>,
    /// The job run that built it (or is building it).
    pub built_by: Option<String>,
    pub job: Option<String>,
    pub build_request_id: Option<String>,
    /// ns since the epoch; answers show it as RFC 3339 (`updated_at`) and ns (`updated_at_ns`).
    pub updated_at: Option<i64>,
    /// Where its data is in the environment asked: `<data_dir>/<ref>` in prod (absent for a
    /// ref nothing produces).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its checks, as they stand for its current instance.
    pub checks: Vec<CheckResult>,
    /// Why no status could be derived for this ref (its answer alone: the other refs asked
    /// with it still answer); `status` and `explain` exit 2 when any ref asked has one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<RefError>,
    /// What the answer could not compute for a caller without a token: the config it would
    /// have run. The rest is as the log knows it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub withheld: Option<Withheld>,
    /// Not live, and an external partition it is (or waits for) is past its `expected_by`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub late: Option<Late>,
}

/// An external partition past its `expected_by` (its cadence's p90) and not arrived: the one a
/// partition is, or waits for (contract section 8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Late {
    /// The late external partition.
    #[serde(rename = "ref")]
    pub partition_ref: String,
    #[schema(format = DateTime)]
    pub expected_by: String,
    pub expected_by_ns: i64,
    /// Whole minutes past `expected_by` (0 in its first minute).
    pub minutes_late: u64,
}

impl Late {
    /// `r`, expected by `by_ns`, seen unarrived at `now_ns`.
    pub fn new(r: &str, by_ns: i64, now_ns: i64) -> Late {
        Late {
            partition_ref: r.to_string(),
            expected_by: text(by_ns),
            expected_by_ns: by_ns,
            minutes_late: (now_ns.saturating_sub(by_ns).max(0) / 60_000_000_000) as u64,
        }
    }

    /// The reason `status` gives: "raw/x expected by <time>, 42 min late".
    pub fn reason(&self) -> String {
        format!(
            "{} expected by {}, {} min late",
            self.partition_ref, self.expected_by, self.minutes_late
        )
    }
}

/// Part of an answer not computed for a caller without a token, on a service whose writes need
/// one (contract section 6): it would have run job `job`'s config executable.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct Withheld {
    pub job: String,
    /// What it would take, for people: a token.
    pub message: String,
}

impl From<&databuild_core::ConfigWithheld> for Withheld {
    fn from(w: &databuild_core::ConfigWithheld) -> Self {
        Withheld {
            job: w.job.clone(),
            message: w.to_string(),
        }
    }
}

/// Which way a ref asked about could not be answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum RefErrorKind {
    /// No job builds it and no dataset declares it.
    Unknown,
    /// It has a pattern's literal shape but a typed field's text is not of its type.
    InvalidField,
    /// Its job's config executable failed for it, or chose no config covering it.
    ConfigFailed,
}

/// A ref's own error in a `status` answer: what is wrong with it, as a sentence naming it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RefError {
    pub kind: RefErrorKind,
    pub message: String,
}

/// How one file of a job's (or check's) code differs between two instances, or between the
/// run that built a partition and the code now (`explain`, `diff`). `path` is relative to the
/// graph file's folder; `@definition` stands for the command, config and env as written.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum CodeChange {
    Added {
        path: String,
        sha: String,
    },
    Removed {
        path: String,
        sha: String,
    },
    Changed {
        path: String,
        from: String,
        to: String,
    },
}

/// The key of the hash of a job's (or check's) definition: command, config command and env.
pub const DEFINITION: &str = "@definition";

/// How many hex digits of a sha a reason shows.
const SHOWN_DIGITS: usize = 8;

impl CodeChange {
    /// How the code recorded (`then`, sorted by path) differs from `now`, by path, the definition
    /// last (a file names the change better than "the definition").
    pub fn between<'a>(
        then: impl IntoIterator<Item = (&'a String, &'a String)>,
        now: &BTreeMap<String, String>,
    ) -> Vec<CodeChange> {
        let then: BTreeMap<&String, &String> = then.into_iter().collect();
        let mut out = Vec::new();
        for (path, was) in &then {
            match now.get(*path) {
                None => out.push(CodeChange::Removed {
                    path: path.to_string(),
                    sha: was.to_string(),
                }),
                Some(is) if is != *was => out.push(CodeChange::Changed {
                    path: path.to_string(),
                    from: was.to_string(),
                    to: is.clone(),
                }),
                Some(_) => {}
            }
        }
        for (path, sha) in now {
            if !then.contains_key(path) {
                out.push(CodeChange::Added {
                    path: path.clone(),
                    sha: sha.clone(),
                });
            }
        }
        out.sort_by_key(|c| (c.path() == DEFINITION, c.path().to_string()));
        out
    }

    /// One change as a reason shows it: ``jobs/agg.sh (sha 1a2b3c4d… → 3c4d5e6f…)``.
    pub fn shown(&self) -> String {
        let short = |sha: &str| format!("{}…", sha.chars().take(SHOWN_DIGITS).collect::<String>());
        match self {
            CodeChange::Changed { path, from, to } => {
                format!("{path} (sha {} → {})", short(from), short(to))
            }
            CodeChange::Added { path, .. } => format!("{path} (added)"),
            CodeChange::Removed { path, .. } => format!("{path} (removed)"),
        }
    }

    /// Why a partition (or a check's result) is stale by its code, for `owner` (``job `agg` ``,
    /// ``check `rows` ``): ``job `agg` changed code: jobs/agg.sh (sha 1a2b3c4d… → 3c4d5e6f…) and 2
    /// more files``; ``job `agg` changed its definition (command, config or env)``. `None` when
    /// nothing changed.
    pub fn reason(owner: &str, changes: &[CodeChange]) -> Option<String> {
        let definition = changes.iter().any(|c| c.path() == DEFINITION);
        let files: Vec<&CodeChange> = changes.iter().filter(|c| c.path() != DEFINITION).collect();
        let Some(first) = files.first() else {
            return definition
                .then(|| format!("{owner} changed its definition (command, config or env)"));
        };
        let mut text = format!("{owner} changed code: {}", first.shown());
        match files.len() - 1 {
            0 => {}
            1 => text.push_str(" and 1 more file"),
            n => text.push_str(&format!(" and {n} more files")),
        }
        if definition {
            text.push_str(", and its definition");
        }
        Some(text)
    }

    pub fn path(&self) -> &str {
        match self {
            CodeChange::Added { path, .. }
            | CodeChange::Removed { path, .. }
            | CodeChange::Changed { path, .. } => path,
        }
    }
}

/// A check of a partition's current instance (`status`, `explain`, `check`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckResult {
    pub name: String,
    /// `passed`, `failed`, or `not_run` (not yet run on the current instance).
    pub result: String,
    pub blocking: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics: Option<serde_json::Value>,
    /// Why the result will not stand: the check changed (`version` or command) since it ran,
    /// so it runs again (the data is not rebuilt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stale: Option<String>,
    /// Reported by the job itself (`DATABUILD_REPORT`), not a `[[check]]`.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline: bool,
    /// The check's version when it ran.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub checked_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checked_at_ns: Option<i64>,
}

/// `POST /api/v1/partitions/check`: the partitions checked, each with its status and checks
/// after the checks ran.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct CheckAnswer {
    pub partitions: Vec<PartitionStatus>,
}

/// Why a partition is in its state (`explain`).
#[derive(Debug, Clone, Serialize)]
pub struct Explanation {
    #[serde(flatten)]
    pub status: StatusReport,
    /// `job` or `dataset`, its name and pattern; absent for refs nothing produces.
    pub producer: Option<ProducerInfo>,
    /// The run that built it, or is building it.
    pub run: Option<JobRunRow>,
    /// What that run reported (`DATABUILD_REPORT`): row counts, provenance.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<serde_json::Value>,
    /// The run's inputs and their state now.
    pub inputs: Vec<StatusReport>,
    /// The query inputs the run read (present as it started), at the version read.
    pub query_inputs: Vec<QueryInputRead>,
    /// For a partition that is not live: the job runs a build would start.
    pub to_build: Vec<PlannedStep>,
    /// The most recent events about it, oldest first.
    pub history: Vec<databuild_log::Event>,
    /// Active wants that name it, with what they wait for.
    pub wants: Vec<databuild_log::WantRow>,
    /// For a partition that is not live: the run that actually failed, upstream or its own.
    pub root_cause: Option<RootCause>,
    /// How its job's code now differs from the code its run recorded.
    pub code_changes: Vec<CodeChange>,
}

/// The run that actually failed, for a partition that is missing or failed (`explain`): the
/// partition itself, or the first failed one up its chain of inputs, however deep.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct RootCause {
    /// The partition whose run failed.
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub job_run_id: String,
    pub job: Option<String>,
    /// Why, as the log records it.
    pub message: Option<String>,
    /// The last non-empty line of the run's log, if it has one.
    pub log_tail: Option<String>,
    /// The input of the explained partition it is reached through (absent: the partition
    /// itself failed, or the failed one is its direct input).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub via: Option<String>,
}

/// A query input (`dep = "query"`: read if present, never required) a run read (`explain`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct QueryInputRead {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// The data version the run read (recorded as it started).
    pub data_version: String,
    /// The run that had built the instance read; none for external data.
    pub built_by: Option<String>,
    /// Its status now (`live`, `stale`, ...): a change of it does not make what read it stale.
    pub status: DerivedStatus,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct ProducerInfo {
    pub kind: String,
    pub name: String,
    pub pattern: String,
}

#[derive(Debug, Clone, Serialize, serde::Deserialize, utoipa::ToSchema)]
pub struct PlannedStep {
    pub job: String,
    pub outputs: Vec<String>,
}

/// A time as RFC 3339 text, to the millisecond: how answers show it.
pub fn rfc3339(ns: i64) -> String {
    rfc3339_to(ns, chrono::SecondsFormat::Millis)
}

/// A time as RFC 3339 text to the nanosecond: what a query's bounds are sent as, exactly.
pub fn rfc3339_ns(ns: i64) -> String {
    rfc3339_to(ns, chrono::SecondsFormat::Nanos)
}

fn rfc3339_to(ns: i64, precision: chrono::SecondsFormat) -> String {
    chrono::DateTime::from_timestamp(
        ns.div_euclid(1_000_000_000),
        ns.rem_euclid(1_000_000_000) as u32,
    )
    .map(|t| t.to_rfc3339_opts(precision, true))
    .unwrap_or_default()
}

/// Parses an RFC 3339 time into ns since the epoch.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let t = chrono::DateTime::parse_from_rfc3339(text).ok()?;
    // ns since the epoch span 1677 to 2262; a valid time outside them (`from=0018-...`) is
    // before or after every event, so it is clamped rather than refused.
    Some(t.timestamp_nanos_opt().unwrap_or(if t.timestamp() < 0 {
        i64::MIN
    } else {
        i64::MAX
    }))
}

/// `POST /api/v1/builds`: the id of the build request, recorded and started.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BuildAccepted {
    pub build_request_id: String,
}

/// A build request as listed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Build {
    pub build_request_id: String,
    pub status: Status,
    /// The first few requested refs (at most 10), of `requested_count`; `GET
    /// /api/v1/builds/{id}` lists all.
    pub requested_partitions: Vec<String>,
    pub requested_count: u64,
    pub analyze_only: bool,
    /// `host/pid/start-time` of the process driving it (left out for anonymous readers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub message: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    pub created_at_ns: i64,
    pub updated_at_ns: i64,
}

impl From<&BuildRequestRow> for Build {
    fn from(b: &BuildRequestRow) -> Self {
        Build {
            build_request_id: b.build_request_id.clone(),
            status: b.status,
            requested_partitions: b.requested_partitions.clone(),
            requested_count: b.requested_count,
            analyze_only: b.analyze_only,
            owner: b.owner.clone(),
            message: b.message.clone(),
            created_at: text(b.created_at),
            updated_at: text(b.updated_at),
            created_at_ns: b.created_at,
            updated_at_ns: b.updated_at,
        }
    }
}

/// `GET /api/v1/builds`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BuildList {
    pub builds: Vec<Build>,
}

/// `GET /api/v1/builds/{id}`: a build request with its partitions, job runs and summary.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BuildDetail {
    pub build_request_id: String,
    pub status: Status,
    /// The first [`DETAIL_ROWS`] refs of the request as typed; `requested_count` says how many
    /// there are.
    pub requested_partitions: Vec<String>,
    pub requested_count: u64,
    pub analyze_only: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub message: Option<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// The first [`DETAIL_ROWS`] of what the build did to each partition it touched, in ref
    /// order.
    pub partitions: Vec<RequestPartitionRow>,
    /// Where the next page of `partitions` starts (`GET /api/v1/builds/{id}/partitions?after=`),
    /// when there may be more; `null` when `partitions` holds them all.
    pub partitions_next: Option<String>,
    /// The newest [`DETAIL_ROWS`] of the build's runs, newest first.
    pub job_runs: Vec<JobRun>,
    /// How many runs the build has in all.
    pub job_runs_total: u64,
    /// What the build did; `null` while it has not ended. Each list holds at most
    /// [`DETAIL_ROWS`] refs; its `counts` say how many there are.
    pub summary: Option<BuildSummary>,
    /// How far it has come, and its ETA; `null` before it is planned.
    pub progress: Option<BuildProgress>,
    pub created_at_ns: i64,
    pub updated_at_ns: i64,
}

impl BuildDetail {
    /// `partitions` is a page of up to [`DETAIL_ROWS`] + 1 rows: the one past the page says
    /// that there are more. `summary` is cut to [`DETAIL_ROWS`].
    pub fn new(
        b: &BuildRequestRow,
        mut partitions: Vec<RequestPartitionRow>,
        (job_runs, job_runs_total): (Vec<JobRun>, u64),
        summary: Option<BuildSummary>,
        progress: Option<BuildProgress>,
    ) -> Self {
        let partitions_next = (partitions.len() > DETAIL_ROWS).then(|| {
            partitions.truncate(DETAIL_ROWS);
            partitions[DETAIL_ROWS - 1].partition_ref.clone()
        });
        BuildDetail {
            partitions_next,
            job_runs_total,
            summary: summary.map(|s| s.cut_to(DETAIL_ROWS)),
            build_request_id: b.build_request_id.clone(),
            status: b.status,
            requested_partitions: b.requested_partitions
                [..b.requested_partitions.len().min(DETAIL_ROWS)]
                .to_vec(),
            requested_count: b.requested_count,
            analyze_only: b.analyze_only,
            owner: b.owner.clone(),
            message: b.message.clone(),
            created_at: text(b.created_at),
            updated_at: text(b.updated_at),
            partitions,
            job_runs,
            progress,
            created_at_ns: b.created_at,
            updated_at_ns: b.updated_at,
        }
    }
}

/// `DELETE /api/v1/builds/{id}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Cancelled {
    pub build_request_id: String,
    pub cancelled: bool,
}

/// One job run.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobRun {
    pub job_run_id: String,
    pub job: String,
    pub build_request_id: Option<String>,
    pub status: Status,
    pub outputs: Vec<String>,
    pub inputs: Vec<String>,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    #[schema(format = DateTime)]
    pub scheduled_at: Option<String>,
    #[schema(format = DateTime)]
    pub started_at: Option<String>,
    #[schema(format = DateTime)]
    pub ended_at: Option<String>,
    pub exit_code: Option<i32>,
    pub message: Option<String>,
    pub relies_on: Option<String>,
    /// Where it ran: left out for anonymous readers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    pub job_version: Option<String>,
    pub input_versions: BTreeMap<String, String>,
    /// The code it ran: each file of the project by path to the first 16 hex digits of its
    /// sha256, and `@definition`; absent for a run recorded before code versions.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub code_versions: BTreeMap<String, String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub log_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduled_at_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub started_at_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ended_at_ns: Option<i64>,
    /// Which attempt of its outputs it was (1 for the first), of a run that failed, or
    /// completed since format version 6. Shown by `runs ID` and `GET /api/v1/job-runs/{id}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    /// What it cost, measured by DataBuild, of a run that completed or failed (format version
    /// 6). Shown by `runs ID` and `GET /api/v1/job-runs/{id}`, not in listings.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<RunResources>,
    /// What its job reported (`metrics` of its report), by output ref then name.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub metrics: BTreeMap<String, BTreeMap<String, f64>>,
}

impl JobRun {
    /// The run with what its end recorded: its attempt, resources and reported metrics.
    pub fn with_end(mut self, end: &databuild_log::Event) -> JobRun {
        let d = &end.data;
        self.attempt = d.attempt;
        self.resources = d.resources;
        if let Some(serde_json::Value::Object(by_ref)) = &d.metrics {
            self.metrics = by_ref
                .iter()
                .map(|(r, named)| {
                    let numbers = named.as_object().into_iter().flatten();
                    let numbers = numbers.filter_map(|(n, v)| Some((n.clone(), v.as_f64()?)));
                    (r.clone(), numbers.collect())
                })
                .collect();
        }
        self
    }
}

impl From<&JobRunRow> for JobRun {
    fn from(r: &JobRunRow) -> Self {
        JobRun {
            job_run_id: r.job_run_id.clone(),
            job: r.job.clone(),
            build_request_id: r.build_request_id.clone(),
            status: r.status,
            outputs: r.outputs.clone(),
            inputs: r.inputs.clone(),
            args: r.args.clone(),
            env: r.env.clone(),
            scheduled_at: maybe(r.scheduled_at),
            started_at: maybe(r.started_at),
            ended_at: maybe(r.ended_at),
            exit_code: r.exit_code,
            message: r.message.clone(),
            relies_on: r.relies_on.clone(),
            pid: r.pid,
            host: r.host.clone(),
            owner: r.owner.clone(),
            job_version: r.job_version.clone(),
            input_versions: r.input_versions.clone(),
            code_versions: r.code_versions.clone(),
            log_path: r.log_path.clone(),
            scheduled_at_ns: r.scheduled_at,
            started_at_ns: r.started_at,
            ended_at_ns: r.ended_at,
            attempt: None,
            resources: None,
            metrics: BTreeMap::new(),
        }
    }
}

impl JobRun {
    /// How long it ran, if it started and ended.
    pub fn duration_ms(&self) -> Option<f64> {
        Some((self.ended_at_ns? - self.started_at_ns?) as f64 / 1e6)
    }
}

/// `GET /api/v1/jobs/{name}/runs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobRunList {
    pub runs: Vec<JobRun>,
}

/// An event as answers show it: the log's event, its `data.expires_at` as RFC 3339.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Event {
    pub idx: i64,
    pub event_id: String,
    /// ns since the epoch (contract section 5).
    pub timestamp: i64,
    pub build_request_id: Option<String>,
    pub kind: Kind,
    pub status: Status,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delegated_to: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    #[serde(default, skip_serializing_if = "EventDataAnswer::is_empty")]
    pub data: EventDataAnswer,
}

/// An event's kind-specific extras, with its one time (`expires_at`) as text.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventDataAnswer {
    /// The log's extras, `expires_at` taken out (it follows as text).
    #[serde(flatten)]
    pub data: EventData,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ns: Option<i64>,
}

impl EventDataAnswer {
    fn is_empty(&self) -> bool {
        self.data.is_empty() && self.expires_at_ns.is_none()
    }
}

impl From<&databuild_log::Event> for Event {
    fn from(e: &databuild_log::Event) -> Self {
        let mut data = e.data.clone();
        let expires = data.expires_at.take();
        Event {
            idx: e.idx,
            event_id: e.event_id.clone(),
            timestamp: e.timestamp,
            build_request_id: e.build_request_id.clone(),
            kind: e.kind,
            status: e.status,
            partition_ref: e.partition_ref.clone(),
            job: e.job.clone(),
            job_run_id: e.job_run_id.clone(),
            delegated_to: e.delegated_to.clone(),
            message: e.message.clone(),
            data: EventDataAnswer {
                data,
                expires_at: maybe(expires),
                expires_at_ns: expires,
            },
        }
    }
}

pub fn events(events: &[databuild_log::Event]) -> Vec<Event> {
    events.iter().map(Event::from).collect()
}

/// `GET /api/v1/builds/{id}/events`, `.../partitions/{ref}/events`, `POST .../taint`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventList {
    pub events: Vec<Event>,
}

/// `GET /api/v1/builds/{id}/partitions`: a page of what a build did to each partition it
/// touched, in ref order.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BuildPartitionPage {
    pub partitions: Vec<RequestPartitionRow>,
    /// The `after` of the next page; `null` on the last.
    pub next: Option<String>,
}

/// `GET /api/v1/events`: a page, with the `since` of the next one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub events: Vec<Event>,
    pub next: Option<i64>,
}

/// `GET /api/v1/partitions/{ref}/status` (contract section 4, `status`).
/// A piece of a run's log, from a byte offset: read the whole log chunk by chunk (`next_offset`
/// until it reaches `size`), or follow it while the run is `running`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogChunk {
    pub job_run_id: String,
    /// Where the text starts (bytes into the log).
    pub offset: u64,
    /// Where the next chunk starts: `offset` plus the bytes of `text` as the log holds them.
    pub next_offset: u64,
    /// The log's size when read (0 before the run writes anything).
    pub size: u64,
    /// At most a MiB of the log, cut at a character boundary (invalid UTF-8 shown as U+FFFD).
    pub text: String,
    /// The run has not ended: its log may grow.
    pub running: bool,
}

/// One Server-Sent Event of `GET /api/v1/builds/{id}/events/stream`, as an SSE parser reads it
/// (the document's per-event schema for the `text/event-stream` answer).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct StreamedEvent {
    /// Every event of the stream is named `event`.
    pub event: StreamedEventName,
    /// The log event as JSON text: one `Event`, as `GET /api/v1/events` lists them.
    pub data: String,
}

/// The name of a [`StreamedEvent`]: the stream sends one kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum StreamedEventName {
    Event,
}

impl StreamedEventName {
    /// The name as the stream writes it.
    pub fn as_str(self) -> &'static str {
        match self {
            StreamedEventName::Event => "event",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct PartitionStatus {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub status: DerivedStatus,
    pub reasons: Vec<String>,
    pub built_by: Option<String>,
    pub job: Option<String>,
    pub build_request_id: Option<String>,
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at_ns: Option<i64>,
    /// Where its data is in the environment asked (`<data_dir>/<ref>` in prod; below
    /// `<data_dir>/.databuild-env/<name>/` in another); absent for a ref nothing produces.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Its checks, as they stand for its current instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
    /// Why no status could be derived for this ref (unknown ref, a typed field that does not
    /// parse, its config failed); absent when it has its status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<RefError>,
    /// (extension) What was not computed for a caller without a token (a config executable not
    /// run): its status is as the log knows it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<Withheld>,
    /// Not live, and an external partition it is (or waits for) is late (contract section 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<Late>,
}

impl From<&StatusReport> for PartitionStatus {
    fn from(r: &StatusReport) -> Self {
        PartitionStatus {
            partition_ref: r.partition_ref.clone(),
            status: r.status,
            reasons: r.reasons.clone(),
            built_by: r.built_by.clone(),
            job: r.job.clone(),
            build_request_id: r.build_request_id.clone(),
            updated_at: maybe(r.updated_at),
            updated_at_ns: r.updated_at,
            path: r.path.clone(),
            checks: r.checks.clone(),
            error: r.error.clone(),
            withheld: r.withheld.clone(),
            late: r.late.clone(),
        }
    }
}

/// `GET /api/v1/partitions/{ref}/explain`: why a partition is in its state.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Explain {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub status: DerivedStatus,
    pub reasons: Vec<String>,
    pub built_by: Option<String>,
    pub job: Option<String>,
    pub build_request_id: Option<String>,
    #[schema(format = DateTime)]
    pub updated_at: Option<String>,
    /// `job` or `dataset`, its name and pattern; `null` for refs nothing produces.
    pub producer: Option<ProducerInfo>,
    /// The run that built it, or is building it.
    pub run: Option<JobRun>,
    /// What that run reported (`DATABUILD_REPORT`): any JSON object the job wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub report: Option<serde_json::Value>,
    pub inputs: Vec<PartitionStatus>,
    /// The query inputs its run read (`dep = "query"`), each at the data version read.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_inputs: Vec<QueryInputRead>,
    pub to_build: Vec<PlannedStep>,
    pub history: Vec<Event>,
    pub wants: Vec<Want>,
    /// For a partition that is missing or failed: the run that actually failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_cause: Option<RootCause>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub updated_at_ns: Option<i64>,
    /// Its checks, as they stand for its current instance.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub checks: Vec<CheckResult>,
    /// How its job's code now differs from the code its run ran (`run.code_versions`), file by
    /// file; empty when it does not, or the run recorded none.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub code_changes: Vec<CodeChange>,
    /// (extension) What was not computed for a caller without a token (a config executable not
    /// run): its status and `to_build` are as far as the log knows.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub withheld: Option<Withheld>,
    /// Not live, and an external partition it is (or waits for) is late (contract section 8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late: Option<Late>,
}

impl From<&Explanation> for Explain {
    fn from(x: &Explanation) -> Self {
        let s = &x.status;
        Explain {
            partition_ref: s.partition_ref.clone(),
            status: s.status,
            reasons: s.reasons.clone(),
            built_by: s.built_by.clone(),
            job: s.job.clone(),
            build_request_id: s.build_request_id.clone(),
            updated_at: maybe(s.updated_at),
            producer: x.producer.clone(),
            run: x.run.as_ref().map(JobRun::from),
            report: x.report.clone(),
            inputs: x.inputs.iter().map(PartitionStatus::from).collect(),
            query_inputs: x.query_inputs.clone(),
            checks: s.checks.clone(),
            to_build: x.to_build.clone(),
            history: events(&x.history),
            wants: x.wants.iter().map(Want::from).collect(),
            root_cause: x.root_cause.clone(),
            updated_at_ns: s.updated_at,
            code_changes: x.code_changes.clone(),
            withheld: s.withheld.clone(),
            late: s.late.clone(),
        }
    }
}

/// A job's metrics.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobStats {
    pub job: String,
    pub runs: u64,
    pub completed: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub skipped: u64,
    /// Completed over finished (completed + failed), if any finished.
    pub success_rate: Option<f64>,
    pub mean_ms: Option<f64>,
    pub p50_ms: Option<f64>,
    pub p95_ms: Option<f64>,
    #[schema(format = DateTime)]
    pub last_run_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_run_at_ns: Option<i64>,
}

impl From<&databuild_log::JobStats> for JobStats {
    fn from(s: &databuild_log::JobStats) -> Self {
        JobStats {
            job: s.job.clone(),
            runs: s.runs,
            completed: s.completed,
            failed: s.failed,
            cancelled: s.cancelled,
            skipped: s.skipped,
            success_rate: s.success_rate,
            mean_ms: s.mean_ms,
            p50_ms: s.p50_ms,
            p95_ms: s.p95_ms,
            last_run_at: maybe(s.last_run_at),
            last_run_at_ns: s.last_run_at,
        }
    }
}

/// `GET /api/v1/jobs`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobList {
    pub jobs: Vec<JobStats>,
}

/// `GET /api/v1/jobs/{name}`: metrics and the most recent runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobDetail {
    pub job: JobStats,
    pub runs: Vec<JobRun>,
    /// The p50 and p95 of each resource and reported metric over its last runs
    /// ([`TREND_RUNS`] at most), by name.
    #[serde(default)]
    pub trends: Vec<MetricTrend>,
}

/// How many of a job's latest runs its trends (`jobs NAME`) and a plan's price are taken from.
pub const TREND_RUNS: usize = 1000;

/// One resource or reported metric of a job, over its last runs: a resource once per run, a
/// reported metric once per output ref.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MetricTrend {
    /// A resource (`wall_ms`, `max_rss_bytes`, ...) or a metric the job reports (`rows`).
    pub name: String,
    /// Whether DataBuild measured it (a resource) or the job reported it.
    pub kind: MetricKind,
    pub p50: f64,
    pub p95: f64,
    /// How many values they were taken from.
    pub count: u64,
}

/// Who recorded a metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum MetricKind {
    /// Measured by DataBuild for every run (contract section 4, `runs`).
    Resource,
    /// Reported by the job (`DATABUILD_REPORT`'s `metrics`).
    Reported,
}

impl MetricKind {
    pub fn of(name: &str) -> MetricKind {
        if databuild_core::RESOURCE_METRICS.contains(&name) {
            MetricKind::Resource
        } else {
            MetricKind::Reported
        }
    }
}

/// A metric's value with its unit, read from its name: `_ms` a duration, `_bytes` a size, any
/// other a plain number.
pub fn metric_text(name: &str, v: f64) -> String {
    if name.ends_with("_ms") {
        match v {
            v if v < 1000.0 => format!("{}ms", crate::anomaly::number(v.round())),
            v if v < 60_000.0 => format!("{:.1}s", v / 1000.0),
            v if v < 3_600_000.0 => format!("{:.1}m", v / 60_000.0),
            v => format!("{:.1}h", v / 3_600_000.0),
        }
    } else if name.ends_with("_bytes") {
        const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
        let mut x = v;
        let mut unit = 0;
        while x.abs() >= 1024.0 && unit + 1 < UNITS.len() {
            x /= 1024.0;
            unit += 1;
        }
        if unit == 0 {
            format!("{} B", crate::anomaly::number(x))
        } else {
            format!("{x:.1} {}", UNITS[unit])
        }
    } else {
        crate::anomaly::number(v)
    }
}

/// A job page's chart of one metric: each partition's latest value in key order (the last
/// [`CHART_PARTITIONS`]), the band learned as an anomaly check learns it, and which failed one.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MetricChart {
    pub metric: String,
    pub points: Vec<ChartPoint>,
    /// The band of the last values that failed no check, as [`crate::anomaly::Band`] learns it
    /// (k = 3); none below its minimum history.
    pub band: Option<(f64, f64)>,
    pub median: Option<f64>,
}

/// How many partitions a job page charts.
pub const CHART_PARTITIONS: usize = 100;

/// One partition of a [`MetricChart`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChartPoint {
    pub partition_ref: String,
    pub value: f64,
    /// Its current instance failed an anomaly check of this metric.
    pub anomaly: bool,
}

/// A run's resource or metric beside its job's p50 (the run page).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct AgainstP50 {
    pub name: String,
    pub partition_ref: String,
    pub value: f64,
    pub p50: Option<f64>,
}

/// `GET /api/v1/metrics`: one metric of a job's partitions, in key order (ref, then run).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MetricSeries {
    /// The job whose partitions these are.
    pub job: String,
    pub metric: String,
    pub values: Vec<MetricPoint>,
    /// The last ref of this page, to pass as `after` for the next; none on the last page.
    pub next: Option<String>,
}

/// One run's value of a metric for one partition.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct MetricPoint {
    pub partition_ref: String,
    pub job_run_id: String,
    pub value: f64,
    #[schema(format = DateTime)]
    pub recorded_at: String,
    pub recorded_at_ns: i64,
}

/// A want as the API shows it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Want {
    pub want_id: String,
    /// `requested`, `waiting`, `satisfied`, `expired` or `cancelled`.
    pub status: Status,
    pub refs: Vec<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    pub sla_seconds: Option<u64>,
    pub recurring: Option<String>,
    pub waiting_for: Option<String>,
    pub message: Option<String>,
    pub build_request_id: Option<String>,
    /// How many of its partitions missed their SLA.
    pub sla_missed: u64,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// Its build failed: when the service tries again (sooner if something it needs changes).
    #[serde(default)]
    #[schema(format = DateTime)]
    pub retry_at: Option<String>,
    pub created_at_ns: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ns: Option<i64>,
    pub updated_at_ns: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at_ns: Option<i64>,
    #[serde(flatten)]
    pub risk: WantRisk,
}

impl From<&WantRow> for Want {
    fn from(w: &WantRow) -> Self {
        Want {
            want_id: w.want_id.clone(),
            status: w.status,
            refs: w.refs.clone(),
            created_at: text(w.created_at),
            expires_at: maybe(w.expires_at),
            sla_seconds: w.sla_seconds,
            recurring: w.recurring.clone(),
            waiting_for: w.waiting_for.clone(),
            message: w.message.clone(),
            build_request_id: w.build_request_id.clone(),
            sla_missed: w.sla_missed,
            updated_at: text(w.updated_at),
            retry_at: maybe(w.retry_at),
            created_at_ns: w.created_at,
            expires_at_ns: w.expires_at,
            updated_at_ns: w.updated_at,
            retry_at_ns: w.retry_at,
            risk: WantRisk::default(),
        }
    }
}

impl Want {
    /// The want, with whether it is on time.
    pub fn with_risk(self, risk: WantRisk) -> Want {
        Want { risk, ..self }
    }
}

/// Whether a want is on time: when its partitions not live are expected (the forecast's), and
/// whether that is past its deadline.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WantRisk {
    /// Every partition is to be live by then (`--by`, a recurring want's `by`); null when it has
    /// none, or only an `sla` (each partition's own deadline).
    #[serde(default)]
    #[schema(format = DateTime)]
    pub deadline: Option<String>,
    /// When its last partition not live is expected live: the latest of their p50 forecasts.
    /// Null when satisfied, ended, or not known (`expected_unknown` says why).
    #[serde(default)]
    #[schema(format = DateTime)]
    pub expected_satisfied_at: Option<String>,
    /// Why `expected_satisfied_at` is null.
    #[serde(default)]
    pub expected_unknown: Option<String>,
    /// A partition's p90 forecast passes its deadline.
    #[serde(default)]
    pub at_risk: bool,
    /// Which partition, by when, and what holds it back.
    #[serde(default)]
    pub at_risk_reason: Option<String>,
    /// The partition holding it back: the external input expected last, or the partition
    /// itself.
    #[serde(default)]
    pub at_risk_partition: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline_ns: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_satisfied_at_ns: Option<i64>,
    /// The deadline the forecast passes (ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_risk_deadline_ns: Option<i64>,
    /// The p90 forecast that passes it (ns).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub at_risk_expected_by_ns: Option<i64>,
}

impl WantRisk {
    /// No times: `why`.
    pub fn unknown(deadline_ns: Option<i64>, why: String) -> WantRisk {
        WantRisk {
            deadline: maybe(deadline_ns),
            expected_unknown: Some(why),
            deadline_ns,
            ..Default::default()
        }
    }
}

/// `GET /api/v1/wants`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WantList {
    pub wants: Vec<Want>,
}

/// `GET /api/v1/wants/{id}`: the want, with the status of each of its partitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WantDetail {
    pub want_id: String,
    pub status: Status,
    pub refs: Vec<String>,
    #[schema(format = DateTime)]
    pub created_at: String,
    #[schema(format = DateTime)]
    pub expires_at: Option<String>,
    pub sla_seconds: Option<u64>,
    pub recurring: Option<String>,
    pub waiting_for: Option<String>,
    pub message: Option<String>,
    pub build_request_id: Option<String>,
    pub sla_missed: u64,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// Its build failed: when the service tries again (sooner if something it needs changes).
    #[serde(default)]
    #[schema(format = DateTime)]
    pub retry_at: Option<String>,
    pub partitions: Vec<PartitionStatus>,
    /// The builds and runs that made its partitions (or are making them), each run with the
    /// runs that made what it read.
    pub fulfillment: Vec<WantBuild>,
    /// Its partitions that are not live, and why: what each waits for.
    pub waiting: Vec<WaitingPartition>,
    #[serde(flatten)]
    pub risk: WantRisk,
    pub created_at_ns: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ns: Option<i64>,
    pub updated_at_ns: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_at_ns: Option<i64>,
}

/// A build that made (or is making) some of a want's partitions.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WantBuild {
    /// None for runs of no build request (none today; kept for older logs).
    pub build_request_id: Option<String>,
    pub status: Option<Status>,
    pub runs: Vec<WantRun>,
}

/// A run that made some of a want's partitions, and the runs that made what it read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct WantRun {
    pub job_run_id: String,
    pub job: String,
    pub status: Status,
    /// The want's partitions it made (or is making).
    pub partitions: Vec<String>,
    /// Of each input a job built: the run that built the instance it read, and its build.
    pub inputs: Vec<InputRun>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct InputRun {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub job_run_id: String,
    pub build_request_id: Option<String>,
}

/// A partition of a want that is not live, and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct WaitingPartition {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub status: DerivedStatus,
    pub waits_for: String,
}

impl WantDetail {
    pub fn new(
        w: &WantRow,
        partitions: Vec<PartitionStatus>,
        fulfillment: Vec<WantBuild>,
        waiting: Vec<WaitingPartition>,
        risk: WantRisk,
    ) -> Self {
        let want = Want::from(w);
        WantDetail {
            want_id: want.want_id,
            status: want.status,
            refs: want.refs,
            created_at: want.created_at,
            expires_at: want.expires_at,
            sla_seconds: want.sla_seconds,
            recurring: want.recurring,
            waiting_for: want.waiting_for,
            message: want.message,
            build_request_id: want.build_request_id,
            sla_missed: want.sla_missed,
            updated_at: want.updated_at,
            retry_at: want.retry_at,
            partitions,
            fulfillment,
            waiting,
            risk,
            created_at_ns: want.created_at_ns,
            expires_at_ns: want.expires_at_ns,
            updated_at_ns: want.updated_at_ns,
            retry_at_ns: want.retry_at_ns,
        }
    }
}

/// `GET /api/v1/datasets`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct DatasetList {
    pub datasets: Vec<DatasetView>,
}

/// `GET /api/v1/sources`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SourceList {
    pub sources: Vec<SourceView>,
}

/// `POST /api/v1/sources/{name}/seal`: what each source's maintenance did.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Sealed {
    pub sources: Vec<Maintenance>,
}

/// `POST /api/v1/webhooks/{source}`: the records are on disk.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Ingested {
    pub source: String,
    /// The day (UTC) they landed in.
    pub date: String,
    /// The records stored by this request.
    pub records: usize,
    /// The records not stored again: their idempotency key (or their delivery's) was stored
    /// within the source's window. A retried delivery is answered 200 with `records: 0`.
    #[serde(default)]
    pub duplicates: usize,
}

/// `analyze --json` (contract section 4). [`AnalyzeView::priced`] (beside `Engine::analyze`)
/// prices it with the engine.
#[derive(Debug, Serialize)]
pub struct AnalyzeView<'p> {
    pub build_request_id: &'p str,
    /// A page of the plan's runs, in plan order ([`AnalyzePage`]).
    pub job_runs: &'p [databuild_core::PlannedRun],
    /// All the plan's runs, and how many of each job: whatever the page.
    pub job_runs_count: usize,
    pub jobs: Vec<JobRunCount>,
    /// The `after` of the next page, `None` when this one ends the plan.
    pub next_after: Option<usize>,
    /// `skipped`, `delegated` and `missing` (and `delegations`, `missing_details`) hold the first
    /// [`AnalyzePage::lists`]; these are their whole lengths.
    pub skipped_count: usize,
    pub delegated_count: usize,
    pub missing_count: usize,
    pub skipped: Vec<&'p str>,
    /// Of `skipped`, how many are external inputs present (a dataset's or a source's
    /// partitions): inputs the plan found, not live partitions it skipped building.
    pub inputs_present: usize,
    pub delegated: Vec<&'p str>,
    pub missing: Vec<&'p str>,
    pub delegations: &'p [databuild_core::plan::Delegation],
    pub missing_details: Vec<MissingExternal>,
    /// The partitions the plan cannot build until its missing inputs are there (the outputs of
    /// the runs that read one, and of every run downstream): how many, and the first 100.
    pub cannot_build_count: usize,
    pub cannot_build: Vec<&'p str>,
    /// Stale partitions the plan keeps as they are because they cannot be rebuilt (an input
    /// expired), with why: how many, and the first 100.
    pub not_rebuildable_count: usize,
    pub not_rebuildable: Vec<NotRebuildable>,
    /// Of `job_runs`, how many rebuild a partition stale because a job's code changed (its own
    /// job's, or one up its inputs): what a script edit costs.
    pub stale_by_code: usize,
    pub estimate: PlanCost,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub force_keeps_live: Option<ForceKeepsLive>,
}

/// The runs an analyze answer lists unless asked for fewer or more (the API's `limit`).
pub const ANALYZE_PAGE: usize = 1_000;
/// The most runs one analyze answer lists (a page of them is about 100 bytes a run).
pub const ANALYZE_PAGE_MAX: usize = 100_000;
/// The most refs each of an analyze answer's other lists holds (their counts are whole).
pub const ANALYZE_LISTS: usize = 1_000;

/// Which of a plan's runs an analyze answer lists, and how much of its other lists: what bounds
/// the answer's size, and the memory its writing takes, whatever the plan's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AnalyzePage {
    /// Runs before this index are left out (the previous page's `next_after`).
    pub after: usize,
    /// The most runs listed.
    pub limit: usize,
    /// The most refs of `skipped`, `delegated` and `missing` listed.
    pub lists: usize,
}

impl AnalyzePage {
    /// Everything: the command line's answer in its own process.
    pub const WHOLE: AnalyzePage = AnalyzePage {
        after: 0,
        limit: usize::MAX,
        lists: usize::MAX,
    };

    /// At most `limit` runs from index `after`, lists cut at [`ANALYZE_LISTS`].
    pub fn of(after: usize, limit: usize) -> AnalyzePage {
        AnalyzePage {
            after,
            limit,
            lists: ANALYZE_LISTS,
        }
    }
}

/// How many of a plan's runs are a job's.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
pub struct JobRunCount {
    pub job: String,
    pub runs: usize,
}

/// The runs of each job with any in `runs`, by job name.
fn runs_per_job(runs: &[databuild_core::PlannedRun]) -> Vec<JobRunCount> {
    let mut counts = BTreeMap::<&str, usize>::new();
    for run in runs {
        *counts.entry(&run.job).or_default() += 1;
    }
    (counts.into_iter())
        .map(|(job, runs)| JobRunCount {
            job: job.to_string(),
            runs,
        })
        .collect()
}

impl<'p> AnalyzeView<'p> {
    /// `reasons`: why each of the plan's missing external partitions is missing
    /// ([`crate::Engine::missing_reasons`]); `page`: which runs and how much of each list.
    pub fn new(
        build_request_id: &'p str,
        plan: &'p databuild_core::Plan,
        estimate: PlanCost,
        reasons: Vec<Option<String>>,
        page: AnalyzePage,
    ) -> Self {
        let total = plan.runs.len();
        let start = page.after.min(total);
        let end = start.saturating_add(page.limit).min(total);
        let lists = page.lists;
        let blocked = plan.blocked_runs();
        let blocked_outputs = || {
            blocked
                .iter()
                .flat_map(|&i| plan.runs[i].outputs.iter().map(|o| o.as_str()))
        };
        AnalyzeView {
            cannot_build_count: blocked_outputs().count(),
            cannot_build: blocked_outputs().take(100).collect(),
            not_rebuildable_count: plan.not_rebuildable.len(),
            not_rebuildable: plan
                .not_rebuildable
                .iter()
                .take(100)
                .map(|(r, reason)| NotRebuildable {
                    partition_ref: r.to_string(),
                    reason: reason.clone(),
                })
                .collect(),
            build_request_id,
            job_runs: &plan.runs[start..end],
            job_runs_count: total,
            jobs: runs_per_job(&plan.runs),
            next_after: (end < total).then_some(end),
            skipped_count: plan.skipped.len(),
            delegated_count: plan.delegated.len(),
            missing_count: plan.missing.len(),
            skipped: plan
                .skipped
                .iter()
                .take(lists)
                .map(|r| r.as_str())
                .collect(),
            inputs_present: 0,
            stale_by_code: 0,
            delegated: plan
                .delegated
                .iter()
                .take(lists)
                .map(|d| d.partition_ref.as_str())
                .collect(),
            missing: plan
                .missing
                .iter()
                .take(lists)
                .map(|m| m.partition_ref.as_str())
                .collect(),
            delegations: &plan.delegated[..plan.delegated.len().min(lists)],
            missing_details: plan
                .missing
                .iter()
                .take(lists)
                .zip(reasons.into_iter().chain(std::iter::repeat(None)))
                .map(|(m, reason)| MissingExternal {
                    partition_ref: m.partition_ref.to_string(),
                    dataset: m.dataset.clone(),
                    needed_by: m.needed_by.clone(),
                    reason,
                    failed_check: m.failed_check.clone(),
                })
                .collect(),
            estimate,
            force_keeps_live: None,
        }
    }
}

/// `POST /api/v1/analyze` (contract section 4): the owned twin of
/// [`AnalyzeView`], which serializes a plan without copying it; a unit test keeps
/// the two the same.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Analysis {
    pub build_request_id: String,
    /// A page of the plan's runs, in plan order: at most the request's `limit` (default 1,000)
    /// from its `after`.
    pub job_runs: Vec<PlannedRun>,
    /// All the plan's runs, and how many of each job, whatever the page. (Absent from a
    /// service from before pages: then `job_runs` is every run.)
    #[serde(default)]
    pub job_runs_count: usize,
    #[serde(default)]
    pub jobs: Vec<JobRunCount>,
    /// The `after` of the next page; `null` when this page ends the plan.
    #[serde(default)]
    pub next_after: Option<usize>,
    /// The whole lengths of `skipped`, `delegated` and `missing`, which hold the first 1,000.
    #[serde(default)]
    pub skipped_count: usize,
    #[serde(default)]
    pub delegated_count: usize,
    #[serde(default)]
    pub missing_count: usize,
    pub skipped: Vec<String>,
    /// Of `skipped`, how many are external inputs present (not live partitions skipped).
    #[serde(default)]
    pub inputs_present: usize,
    pub delegated: Vec<String>,
    pub missing: Vec<String>,
    pub delegations: Vec<Delegation>,
    pub missing_details: Vec<MissingExternal>,
    /// The partitions the plan cannot build until its missing inputs are there: how many, and
    /// the first 100.
    pub cannot_build_count: usize,
    pub cannot_build: Vec<String>,
    /// Stale partitions kept as they are because they cannot be rebuilt (an input expired):
    /// how many, and the first 100 with why.
    pub not_rebuildable_count: usize,
    pub not_rebuildable: Vec<NotRebuildable>,
    /// Of `job_runs`, how many rebuild a partition stale because a job's code changed.
    #[serde(default)]
    pub stale_by_code: usize,
    pub estimate: PlanCost,
    /// With `force`: what the forced rebuilds leave live downstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub force_keeps_live: Option<ForceKeepsLive>,
}

/// What was built from the forced partitions, live: a forced rebuild's outputs record the hash
/// of the bytes it writes, so these partitions (the first 100 of `count`; of the first 1,000
/// forced refs) are rebuilt only if those bytes change, and stay live otherwise. `taint` them to
/// have them rebuilt whatever the bytes.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ForceKeepsLive {
    pub count: usize,
    pub partitions: Vec<String>,
    /// Not every forced ref was followed, or more were found than an answer holds.
    pub truncated: bool,
}

/// A stale partition that cannot be rebuilt, kept as it is.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct NotRebuildable {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub reason: String,
}

/// What a plan will cost, from its jobs' recorded run durations (the median and the 95th
/// percentile of each job's recent completed runs): the wall time at `parallel` runs at once (the
/// scheduler's order replayed), the critical path, and the total job time. Runs of jobs with no
/// completed run count as taking no time, so the figures are then lower bounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct PlanCost {
    pub parallel: usize,
    pub wall_p50_s: f64,
    pub wall_p95_s: f64,
    pub critical_path_p50_s: f64,
    /// The sum of every run's duration (job time, not CPU time: runs' CPU use is not recorded).
    pub work_p50_s: f64,
    pub work_p95_s: f64,
    pub runs_without_history: usize,
    pub jobs_without_history: Vec<String>,
    /// An upper bound of the memory the plan's runs hold at once at `parallel`: the sum of the
    /// `parallel` largest p95 peak memories (`max_rss_bytes`) among its runs' jobs. None when no
    /// job of the plan has a recorded peak. (Absent from a service from before it.)
    #[serde(default)]
    pub peak_memory_bytes: Option<u64>,
    /// The CPU time the plan will take: Σ runs × their job's median CPU time (user + system).
    #[serde(default)]
    pub cpu_hours: f64,
    /// Runs whose job has no recorded peak memory or CPU time, counted as none.
    #[serde(default)]
    pub runs_without_resources: usize,
}

impl PlanCost {
    /// With what the plan's runs will use besides time.
    pub fn with_resources(self, r: databuild_core::estimate::ResourceEstimate) -> PlanCost {
        PlanCost {
            peak_memory_bytes: r.peak_memory_bytes,
            cpu_hours: r.cpu_hours,
            runs_without_resources: r.runs_without_resources,
            ..self
        }
    }
}

impl From<databuild_core::estimate::Estimate> for PlanCost {
    fn from(e: databuild_core::estimate::Estimate) -> Self {
        let s = |ms: f64| (ms / 10.0).round() / 100.0;
        PlanCost {
            parallel: e.parallel,
            wall_p50_s: s(e.wall_p50_ms),
            wall_p95_s: s(e.wall_p95_ms),
            critical_path_p50_s: s(e.critical_path_p50_ms),
            work_p50_s: s(e.work_p50_ms),
            work_p95_s: s(e.work_p95_ms),
            runs_without_history: e.runs_without_history,
            jobs_without_history: e.jobs_without_history,
            peak_memory_bytes: None,
            cpu_hours: 0.0,
            runs_without_resources: 0,
        }
    }
}

/// How far a build has come, per job and in all, and what is left: read from the log (its
/// plan's counts and its runs'), the same for every reader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct BuildProgress {
    /// Runs planned (those the build added while running included), and of them: ended well
    /// (`completed`, or `skipped`: found live, or made by another build), `queued` (claimed,
    /// their process not started yet), `running` (their process started), and `failed` /
    /// `cancelled` runs (a retried run counts once per attempt that failed).
    pub planned: u64,
    pub done: u64,
    /// (Absent from a service from before `queued`.)
    #[serde(default)]
    pub queued: u64,
    pub running: u64,
    pub failed: u64,
    pub cancelled: u64,
    /// Planned runs not ended well (yet; once the build has ended, never).
    pub left: u64,
    /// Planned runs with no run of their own: not claimed yet (not started, once the build has
    /// ended).
    pub unclaimed: u64,
    pub jobs: Vec<JobProgress>,
    /// Runs completed per second since the build began executing (`null` before one did).
    pub rate_per_s: Option<f64>,
    /// What is left at the build's `parallel` and the jobs' median durations: the larger of the
    /// job time left spread over the slots and the longest chain of jobs left. `null` once the
    /// build has ended.
    pub eta_s: Option<f64>,
    pub work_left_s: f64,
    pub critical_path_left_s: f64,
    /// Runs left of jobs with no recorded duration (taken as no time: the ETA is then low).
    pub runs_without_history: u64,
    pub parallel: usize,
}

/// A span of seconds as people say it: `250 ms`, `4.2 s`, `12 min 5 s`, `3 h 20 min`.
pub fn span(s: f64) -> String {
    match s.max(0.0) {
        s if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        s if s < 60.0 => format!("{s:.1} s"),
        s if s < 3600.0 => format!("{} min {} s", (s / 60.0) as u64, (s % 60.0) as u64),
        s => format!(
            "{} h {} min",
            (s / 3600.0) as u64,
            ((s % 3600.0) / 60.0) as u64
        ),
    }
}

impl BuildProgress {
    /// The ETA as people say it, `≥` when runs with no history leave it a lower bound; `None`
    /// once the build has ended.
    pub fn eta_text(&self) -> Option<String> {
        let at_least = if self.runs_without_history > 0 {
            "≥ "
        } else {
            ""
        };
        Some(format!("{at_least}{}", span(self.eta_s?)))
    }
}

/// One job's part of a [`BuildProgress`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct JobProgress {
    pub job: String,
    pub planned: u64,
    pub done: u64,
    #[serde(default)]
    pub queued: u64,
    pub running: u64,
    pub failed: u64,
    pub cancelled: u64,
    pub left: u64,
    pub unclaimed: u64,
    /// The job's median recorded duration, if it has one.
    pub p50_s: Option<f64>,
}

/// One run of a plan.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PlannedRun {
    pub job: String,
    pub outputs: Vec<String>,
    /// Inputs that must be live first.
    pub inputs: Vec<String>,
    /// Inputs read only if present (config jobs).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub query_inputs: Vec<String>,
    /// What a config executable gave the run.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// Inputs given as a table's alias: `[alias ref, version ref]` each.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schema(value_type = Vec<Vec<String>>)]
    pub aliased: Vec<(String, String)>,
    /// Indices (in `job_runs`) of the runs that build this run's inputs.
    pub depends_on: Vec<usize>,
    /// One reason per output, in output order.
    pub reasons: Vec<serde_json::Value>,
}

/// A ref another build request is building now.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Delegation {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub build_request_id: String,
}

/// An external ref that is not available.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct MissingExternal {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub dataset: String,
    /// The run that needs it, if it is not itself requested.
    pub needed_by: Option<String>,
    /// Why it is not there (a source partition expired: its raw data is gone, still open,
    /// never received; nothing at its path): what the runs needing it wait on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// A job output whose current instance failed a blocking check (`dataset` is its job):
    /// ``failed check `name`: message``. It is neither rebuilt (the same inputs would make the
    /// same data) nor read until its data is fixed and `databuild check` passes, or `--force`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_check: Option<String>,
}

/// The body of every error answer.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct ErrorBody {
    /// What went wrong, in one sentence.
    pub error: String,
    /// A stable, machine-readable code: `bad_request`, `bad_json`, `not_found`, `unauthorized`,
    /// `unplannable`, `sql_refused`, `sql_too_large`, `already_ended`, `too_large`, `internal`...
    pub code: String,
}

/// `GET /api/v1/partitions/{ref}/forecast`, and each element of `forecast REF... --json`: when
/// a partition is expected to be live, and the steps that decide it (contract section 8). A
/// live one has no times and no basis; one with too little history has null times and `reason`
/// says why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct Forecast {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// As `status` derives it.
    pub status: DerivedStatus,
    /// When it is expected live (at the medians of its inputs' arrivals and its runs' durations).
    #[schema(format = DateTime)]
    pub expected_at: Option<String>,
    /// By when it surely is (at their 90th percentiles).
    #[schema(format = DateTime)]
    pub expected_by: Option<String>,
    /// An external partition it waits for (or it itself) is past its `expected_by`.
    pub late: bool,
    /// Why there are no times: too little history, a weekday its input never lands on.
    pub reason: Option<String>,
    pub basis: Vec<ForecastStep>,
    pub expected_at_ns: Option<i64>,
    pub expected_by_ns: Option<i64>,
}

/// When something is expected (ns since the epoch): at its median, surely by its p90.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ExpectedTimes {
    pub at_ns: i64,
    pub by_ns: i64,
}

impl Forecast {
    /// `REF: STATUS, expected at T (by T)`, `LATE` when an input is past its p90, or why not known.
    pub fn headline(&self) -> String {
        let f = self;
        let late = if f.late { " LATE" } else { "" };
        match (&f.expected_at, &f.expected_by, &f.reason) {
            (Some(at), Some(by), _) => {
                format!(
                    "{}: {}, expected at {at} (by {by}){late}",
                    f.partition_ref, f.status
                )
            }
            (_, _, Some(why)) => format!(
                "{}: {}, no forecast{late}: {why}",
                f.partition_ref, f.status
            ),
            _ => format!("{}: {}", f.partition_ref, f.status),
        }
    }

    /// No arrival awaited or none that can be forecast: `r` at `status`, with why (if anything
    /// needs saying), after no steps.
    pub fn without_times(r: &str, status: DerivedStatus, reason: Option<String>) -> Forecast {
        Forecast::new(r, status, None, false, reason, Vec::new())
    }

    /// The forecast of `r` at `status`, expected at `times` (`None`: not known, `reason` says
    /// why) after the steps of `basis`: the one place its times become text.
    pub fn new(
        r: &str,
        status: DerivedStatus,
        times: Option<ExpectedTimes>,
        late: bool,
        reason: Option<String>,
        basis: Vec<ForecastStep>,
    ) -> Forecast {
        Forecast {
            partition_ref: r.to_string(),
            status,
            expected_at: times.map(|t| text(t.at_ns)),
            expected_by: times.map(|t| text(t.by_ns)),
            late,
            reason,
            basis,
            expected_at_ns: times.map(|t| t.at_ns),
            expected_by_ns: times.map(|t| t.by_ns),
        }
    }
}

fn spoken_ms(v: f64) -> String {
    databuild_core::cadence::span((v * 1e6) as i64)
}

impl ForecastStep {
    /// The step in one line, as `forecast` prints it.
    pub fn line(&self) -> String {
        match self {
            ForecastStep::External {
                partition_ref,
                dataset,
                cadence,
                expected_at,
                expected_by,
                late,
                reason,
                ..
            } => {
                let when = match (expected_at, expected_by) {
                    (Some(at), Some(by)) => format!("expected at {at} (by {by})"),
                    _ => format!("not expected: {}", reason.as_deref().unwrap_or("unknown")),
                };
                let late = if *late { ", LATE" } else { "" };
                let cadence = cadence.as_ref().map_or(String::new(), |c| format!("; {c}"));
                format!("input {partition_ref} (dataset `{dataset}`): {when}{late}{cadence}")
            }
            ForecastStep::Running {
                job_run_id,
                job,
                status,
                expected_end_at,
                ..
            } => format!(
                "run {job_run_id} of job `{job}`, {status}: ends {}",
                expected_end_at
                    .as_deref()
                    .map_or("at a time not known".to_string(), |t| format!("at {t}"))
            ),
            ForecastStep::Job {
                job,
                runs,
                p50_ms,
                p90_ms,
                timed_runs,
            } => match (p50_ms, p90_ms) {
                (Some(p50), Some(p90)) => format!(
                    "job `{job}`: {runs} run(s) to go, p50 {}, p90 {} (of {timed_runs} runs)",
                    spoken_ms(*p50),
                    spoken_ms(*p90)
                ),
                _ => format!("job `{job}`: {runs} run(s) to go, never timed"),
            },
            ForecastStep::QueueWait { parallel, ms: wait } => {
                format!(
                    "queue wait at {parallel} runs at once: {}",
                    spoken_ms(*wait)
                )
            }
            ForecastStep::CriticalPath { ms: path } => {
                format!("critical path: {}", spoken_ms(*path))
            }
        }
    }
}

/// When an external dataset's latest partitions landed, for its dashboard chart: each one's
/// time after its period's end (a `date` or `hour` key) or after the previous key's arrival (an
/// `int` key), in key order; its cadence's band; and the next partition's expectation.
#[derive(Debug, Clone, PartialEq)]
pub struct Landings {
    pub measure: LandingMeasure,
    /// Key order, oldest first.
    pub points: Vec<Landing>,
    /// The cadence's median and p90 (ns); `None` with too little history.
    pub band: Option<(i64, i64)>,
    /// The next partition expected after the latest arrival, with its times.
    pub next: Option<(String, ExpectedTimes, bool)>,
}

/// What a landing's time is measured from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LandingMeasure {
    /// After the end of its key's period (its day or hour).
    AfterPeriodEnd,
    /// After the previous key's arrival.
    AfterPreviousKey,
}

impl LandingMeasure {
    /// The chart's caption of it.
    pub fn says(self) -> &'static str {
        match self {
            LandingMeasure::AfterPeriodEnd => "time after its period ends",
            LandingMeasure::AfterPreviousKey => "time after the previous key arrived",
        }
    }
}

/// One partition's landing: `after_ns` after what [`LandingMeasure`] measures from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Landing {
    pub partition_ref: String,
    pub after_ns: i64,
}

/// One step a forecast is made of, by `step`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum ForecastStep {
    /// An external input not there yet, expected by its dataset's cadence (`cadence`, in
    /// words), or with no times and `reason`.
    External {
        #[serde(rename = "ref")]
        partition_ref: String,
        dataset: String,
        cadence: Option<String>,
        #[schema(format = DateTime)]
        expected_at: Option<String>,
        #[schema(format = DateTime)]
        expected_by: Option<String>,
        late: bool,
        reason: Option<String>,
        expected_at_ns: Option<i64>,
        expected_by_ns: Option<i64>,
    },
    /// A run already queued or running that makes it (or what it reads), and when it is
    /// expected to end (its start, or now if it has not started, plus its job's durations).
    Running {
        job_run_id: String,
        job: String,
        status: Status,
        #[schema(format = DateTime)]
        expected_end_at: Option<String>,
        expected_end_at_ns: Option<i64>,
    },
    /// A job still to run `runs` times, with its durations over its last runs (null: it has
    /// none timed).
    Job {
        job: String,
        runs: u64,
        p50_ms: Option<f64>,
        p90_ms: Option<f64>,
        /// How many runs the durations are of.
        timed_runs: u64,
    },
    /// The wait for a free slot at `parallel` runs at once: the median wall time beyond the
    /// critical path.
    QueueWait { parallel: u64, ms: f64 },
    /// The longest chain of dependent runs still to go, at median durations.
    CriticalPath { ms: f64 },
}

impl ForecastStep {
    /// An external input's step, expected at `times` (`None`, with `reason`).
    pub fn external(
        r: &str,
        dataset: &str,
        cadence: Option<String>,
        times: Option<ExpectedTimes>,
        late: bool,
        reason: Option<String>,
    ) -> ForecastStep {
        ForecastStep::External {
            partition_ref: r.to_string(),
            dataset: dataset.to_string(),
            cadence,
            expected_at: times.map(|t| text(t.at_ns)),
            expected_by: times.map(|t| text(t.by_ns)),
            late,
            reason,
            expected_at_ns: times.map(|t| t.at_ns),
            expected_by_ns: times.map(|t| t.by_ns),
        }
    }

    /// A queued or running run's step, expected to end at `end_ns`.
    pub fn running(run: &str, job: &str, status: Status, end_ns: Option<i64>) -> ForecastStep {
        ForecastStep::Running {
            job_run_id: run.to_string(),
            job: job.to_string(),
            status,
            expected_end_at: maybe(end_ns),
            expected_end_at_ns: end_ns,
        }
    }
}

/// The one route table: every path of the API, used by the router, the OpenAPI annotations, the
/// CLI's HTTP client and the upstream client. `{...}` is one percent-encoded segment ([`fill`]).
pub mod route {
    pub const BUILDS: &str = "/api/v1/builds";
    pub const BUILD: &str = "/api/v1/builds/{id}";
    pub const BUILD_EVENTS: &str = "/api/v1/builds/{id}/events";
    pub const BUILD_PARTITIONS: &str = "/api/v1/builds/{id}/partitions";
    pub const BUILD_SUMMARY: &str = "/api/v1/builds/{id}/summary";
    pub const BUILD_PROGRESS: &str = "/api/v1/builds/{id}/progress";
    pub const BUILD_EVENT_STREAM: &str = "/api/v1/builds/{id}/events/stream";
    pub const ANALYZE: &str = "/api/v1/analyze";
    pub const PARTITIONS: &str = "/api/v1/partitions";
    pub const PARTITION_STATUS: &str = "/api/v1/partitions/{partition_ref}/status";
    pub const PARTITION_EVENTS: &str = "/api/v1/partitions/{partition_ref}/events";
    pub const PARTITION_EXPLAIN: &str = "/api/v1/partitions/{partition_ref}/explain";
    pub const PARTITION_LINEAGE: &str = "/api/v1/partitions/{partition_ref}/lineage";
    pub const PARTITION_DIFF: &str = "/api/v1/partitions/{partition_ref}/diff";
    pub const PARTITION_FORECAST: &str = "/api/v1/partitions/{partition_ref}/forecast";
    pub const TAINT: &str = "/api/v1/partitions/taint";
    pub const TAINT_IMPACT: &str = "/api/v1/partitions/taint/impact";
    pub const CHECK: &str = "/api/v1/partitions/check";
    pub const GC: &str = "/api/v1/gc";
    pub const GRAPH: &str = "/api/v1/graph";
    pub const EVENTS: &str = "/api/v1/events";
    pub const JOBS: &str = "/api/v1/jobs";
    pub const JOB: &str = "/api/v1/jobs/{name}";
    pub const JOB_RUNS: &str = "/api/v1/jobs/{name}/runs";
    pub const METRICS: &str = "/api/v1/metrics";
    pub const RUN: &str = "/api/v1/job-runs/{id}";
    pub const RUN_LOG: &str = "/api/v1/job-runs/{id}/log";
    pub const RUN_LOG_CHUNK: &str = "/api/v1/job-runs/{id}/log/chunk";
    pub const DATASETS: &str = "/api/v1/datasets";
    pub const SQL: &str = "/api/v1/sql";
    pub const OPENAPI: &str = "/api/v1/openapi.json";
    pub const SOURCES: &str = "/api/v1/sources";
    pub const SOURCE: &str = "/api/v1/sources/{name}";
    pub const SEAL: &str = "/api/v1/sources/{name}/seal";
    pub const PROMOTE: &str = "/api/v1/tables/{name}/promote";
    pub const WEBHOOK: &str = "/api/v1/webhooks/{source}";
    pub const WANTS: &str = "/api/v1/wants";
    pub const WANT: &str = "/api/v1/wants/{id}";
    pub const ENVIRONMENTS: &str = "/api/v1/environments";
    pub const ENVIRONMENT: &str = "/api/v1/environments/{name}";
    pub const ENVIRONMENT_DIFF: &str = "/api/v1/environments/{name}/diff";
    pub const ENVIRONMENT_PROMOTE: &str = "/api/v1/environments/{name}/promote";
    pub const ENVIRONMENT_ROLLBACK: &str = "/api/v1/environments/{name}/rollback";

    /// A route with its one parameter filled in, percent-encoded (a ref's `/` becomes `%2F`).
    pub fn fill(template: &str, value: &str) -> String {
        let (Some(open), Some(close)) = (template.find('{'), template.find('}')) else {
            return template.to_string();
        };
        format!(
            "{}{}{}",
            &template[..open],
            databuild_core::refs::encode_segment(value),
            &template[close + 1..]
        )
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn fills_the_one_parameter_encoded() {
            assert_eq!(
                super::fill(super::PARTITION_STATUS, "a/date=1"),
                "/api/v1/partitions/a%2Fdate=1/status"
            );
            assert_eq!(super::fill(super::BUILDS, "x"), super::BUILDS);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_with_their_exact_ns_last() {
        let row = BuildRequestRow {
            build_request_id: "b".into(),
            status: Status::Completed,
            requested_partitions: vec!["a".into()],
            requested_count: 1,
            analyze_only: false,
            owner: None,
            message: None,
            created_at: 1_700_000_000_123_456_789,
            updated_at: 0,
        };
        let v = serde_json::to_value(Build::from(&row)).unwrap();
        assert_eq!(v["created_at"], "2023-11-14T22:13:20.123Z");
        assert_eq!(v["created_at_ns"], 1_700_000_000_123_456_789i64);
        assert_eq!(v["updated_at"], "1970-01-01T00:00:00.000Z");
        let keys: Vec<&String> = v.as_object().unwrap().keys().collect();
        assert_eq!(keys[keys.len() - 2..], ["created_at_ns", "updated_at_ns"]);
        // And back: the CLI reads answers into the same types.
        let back: Build = serde_json::from_value(v).unwrap();
        assert_eq!(back, Build::from(&row));
    }

    #[test]
    fn an_event_shows_its_expiry_as_text_and_keeps_its_timestamp_in_ns() {
        let mut e = databuild_log::Event::build_request("b", Status::Received);
        e.data.expires_at = Some(0);
        e.timestamp = 5;
        let v = serde_json::to_value(Event::from(&e)).unwrap();
        assert_eq!(v["timestamp"], 5);
        assert_eq!(v["data"]["expires_at"], "1970-01-01T00:00:00.000Z");
        assert_eq!(v["data"]["expires_at_ns"], 0);
        let back: Event = serde_json::from_value(v).unwrap();
        assert_eq!(back, Event::from(&e));
    }

    #[test]
    fn the_plan_view_and_its_owned_twin_are_the_same_json() {
        let r = |s: &str| databuild_core::PartitionRef::new(s).unwrap();
        let plan = databuild_core::Plan {
            runs: vec![databuild_core::PlannedRun {
                job_index: 0,
                job: "j".into(),
                outputs: vec![r("o/1")],
                inputs: vec![r("i/1")],
                extras: Some(Box::new(databuild_core::plan::RunExtras {
                    args: vec!["--x".into()],
                    aliased: vec![(r("t/date=1"), r("t/v1/date=1"))],
                    ..Default::default()
                })),
                depends_on: vec![],
                reasons: vec![],
            }],
            skipped: vec![r("s/1")],
            delegated: vec![],
            missing: vec![],
            not_rebuildable: vec![(r("s/1"), "not rebuildable: input `x` expired".into())],
        };
        let cost = databuild_core::estimate::estimate(&plan, &[], 2).into();
        let view = serde_json::to_value(AnalyzeView::new(
            "b",
            &plan,
            cost,
            vec![],
            AnalyzePage::WHOLE,
        ))
        .unwrap();
        let owned: Analysis = serde_json::from_value(view.clone()).unwrap();
        assert_eq!(serde_json::to_value(owned).unwrap(), view);
    }

    #[test]
    fn a_page_lists_its_runs_and_counts_the_whole_plan() {
        let r = |s: &str| databuild_core::PartitionRef::new(s).unwrap();
        let run = |job: &str, i: usize| databuild_core::PlannedRun {
            job_index: 0,
            job: job.into(),
            outputs: vec![r(&format!("{job}/{i}"))],
            inputs: vec![],
            extras: None,
            depends_on: vec![],
            reasons: vec![],
        };
        let plan = databuild_core::Plan {
            runs: (0..5)
                .map(|i| run(if i < 3 { "x" } else { "y" }, i))
                .collect(),
            skipped: (0..3).map(|i| r(&format!("s/{i}"))).collect(),
            delegated: vec![],
            missing: vec![],
            not_rebuildable: vec![],
        };
        let cost: PlanCost = databuild_core::estimate::estimate(&plan, &[], 2).into();
        let page = |after, limit| {
            let page = AnalyzePage {
                lists: 2,
                ..AnalyzePage::of(after, limit)
            };
            AnalyzeView::new("b", &plan, cost.clone(), vec![], page)
        };
        let outputs = |v: &AnalyzeView| -> Vec<String> {
            v.job_runs
                .iter()
                .map(|r| r.outputs[0].to_string())
                .collect()
        };
        let first = page(0, 2);
        assert_eq!(outputs(&first), ["x/0", "x/1"]);
        assert_eq!((first.job_runs_count, first.next_after), (5, Some(2)));
        assert_eq!(
            first.jobs,
            [
                JobRunCount {
                    job: "x".into(),
                    runs: 3
                },
                JobRunCount {
                    job: "y".into(),
                    runs: 2
                }
            ]
        );
        assert_eq!((first.skipped.len(), first.skipped_count), (2, 3));
        let last = page(4, 2);
        assert_eq!(outputs(&last), ["y/4"]);
        assert_eq!(last.next_after, None);
        let beyond = page(9, 2);
        assert!(beyond.job_runs.is_empty());
        assert_eq!((beyond.job_runs_count, beyond.next_after), (5, None));
    }

    fn code_map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn changes_are_by_path_with_the_definition_last() {
        let then = code_map(&[
            (DEFINITION, "d1"),
            ("jobs/agg.sh", "1a2b3c4d5e6f7a8b"),
            ("jobs/lib/old.sh", "aa"),
        ]);
        let now = code_map(&[
            (DEFINITION, "d2"),
            ("jobs/agg.sh", "3c4d5e6f7a8b9c0d"),
            ("jobs/lib/new.sh", "bb"),
        ]);
        let found = CodeChange::between(&then, &now);
        let paths: Vec<&str> = found.iter().map(CodeChange::path).collect();
        assert_eq!(
            paths,
            [
                "jobs/agg.sh",
                "jobs/lib/new.sh",
                "jobs/lib/old.sh",
                DEFINITION
            ]
        );
        assert_eq!(
            CodeChange::reason("job `agg`", &found).unwrap(),
            "job `agg` changed code: jobs/agg.sh (sha 1a2b3c4d… → 3c4d5e6f…) and 2 more files, and its definition"
        );
        assert!(CodeChange::between(&then, &then).is_empty());
        assert_eq!(CodeChange::reason("job `agg`", &[]), None);
    }

    #[test]
    fn a_definition_alone_or_a_file_added_says_so() {
        let then = code_map(&[(DEFINITION, "d1")]);
        let now = code_map(&[(DEFINITION, "d2")]);
        assert_eq!(
            CodeChange::reason("check `rows`", &CodeChange::between(&then, &now)).unwrap(),
            "check `rows` changed its definition (command, config or env)"
        );
        let now = code_map(&[(DEFINITION, "d1"), ("jobs/x.sh", "ff")]);
        assert_eq!(
            CodeChange::reason("job `j`", &CodeChange::between(&then, &now)).unwrap(),
            "job `j` changed code: jobs/x.sh (added)"
        );
    }
}

/// Whether a change of an environment took another's partitions (`promote`) or undid the last
/// such change (`rollback`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ChangeKind {
    Promote,
    Rollback,
}

/// A promotion or rollback: recorded in one append of `environment`'s log (the build request
/// `build_request_id`, whose every run is reused: no job ran), then each partition swapped into
/// place on disk.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EnvironmentChange {
    pub kind: ChangeKind,
    /// `None` when there was nothing to take: nothing was recorded.
    pub build_request_id: Option<String>,
    /// The environment that changed.
    pub environment: String,
    /// Partitions it took.
    pub partitions: u64,
    /// Partitions a rollback removed: they did not exist before the promotion it undid.
    pub removed: u64,
    /// Runs recorded as reused (one per run that made the partitions taken).
    pub runs: u64,
    /// Tables whose alias moved with the partitions (`data.report.aliases` of the
    /// `environment` event says from which version to which).
    pub aliases: u64,
    pub elapsed_ms: u64,
}

/// An environment (`databuild env list`, `GET /api/v1/environments`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EnvironmentView {
    pub name: String,
    /// The environment it was made from (`env create --from`), if any.
    pub from: Option<String>,
    /// When it was made (ns since the epoch); `None` for prod.
    pub created_at: Option<i64>,
    /// Where its partitions are: `<data_dir>/<ref>` for prod, else below
    /// `<data_dir>/.databuild-env/<name>/`.
    pub data_dir: String,
    /// Its partitions that are live (available), as its log counts them.
    pub available: u64,
    /// Its last promotion or rollback: the build request that recorded it.
    pub last_change: Option<String>,
}

/// Every environment, prod first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EnvironmentList {
    pub environments: Vec<EnvironmentView>,
}

/// `databuild env diff NAME [OTHER]`: what `environment` has that `other` does not.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EnvironmentDiff {
    pub environment: String,
    pub other: String,
    /// Live partitions of `environment` that `other` does not have as it has them, by ref, at
    /// most the `limit` asked.
    pub partitions: Vec<PartitionDifference>,
    /// All of them (what a promotion of `environment` into `other` would take).
    pub partitions_total: u64,
    /// The jobs whose fingerprints differ, of those partitions, and why.
    pub jobs: Vec<JobDifference>,
    /// The tables whose alias reads another version there (a promotion moves it too).
    pub aliases: Vec<AliasDifference>,
}

/// A table whose alias `environment` reads at `version`, and `other` at `other_version`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct AliasDifference {
    pub table: String,
    pub version: u32,
    pub other_version: u32,
}

/// One partition `environment` has otherwise than `other`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct PartitionDifference {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub job: String,
    /// Its data version in `environment`, and in `other` (`None`: not live there).
    pub data_version: Option<String>,
    pub other_data_version: Option<String>,
    /// `true` when the bytes are the same and only how they were made differs (its job's code,
    /// say): a promotion takes it so `other`'s answers say fresh.
    pub same_bytes: bool,
    /// What changed in the bytes (from `other`'s to `environment`'s).
    pub content: Option<ContentDiff>,
}

/// A job whose runs were made differently in the two environments.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobDifference {
    pub job: String,
    /// For people: `jobs/agg.sh changed`, `version 1 → 2`, `env MODE fast → slow`.
    pub reasons: Vec<String>,
}

/// How a partition's data differs between two environments: its size, its files, the rows of its
/// table-like files and a unified diff of its small text files.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct ContentDiff {
    /// Whether the data was added, removed, changed or is byte for byte the same.
    pub change: ContentChange,
    /// The old data's total size in bytes (0 when absent).
    pub old_bytes: u64,
    /// The new data's total size in bytes (0 when absent).
    pub new_bytes: u64,
    /// Files only in the new data (by path relative to the partition's folder).
    pub files_added: u64,
    /// Files only in the old data.
    pub files_removed: u64,
    /// Files on both sides whose bytes differ.
    pub files_changed: u64,
    /// Rows of the table-like files (`.csv`, `.tsv`, `.jsonl`, `.ndjson`) summed over them; none
    /// when there is no such file or one was too large to count (`notes` says which).
    pub rows: Option<RowDiff>,
    /// A unified diff of the small UTF-8 text files that differ (3 lines of context, headers
    /// `--- old/<path>` and `+++ new/<path>`, `/dev/null` for a side without the file), cut at
    /// `max_diff_lines` with a last line saying how many were left out; none when no such file
    /// differs.
    pub unified: Option<String>,
    /// What the summary left out and why (a binary file, one too large, one not UTF-8, …).
    pub notes: Vec<String>,
}

/// How the data as a whole changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ContentChange {
    /// Only the new side has data.
    Added,
    /// Only the old side has data.
    Removed,
    /// Both sides have data, and some file differs.
    Changed,
    /// Both sides hold the same files with the same bytes (or neither has data).
    Identical,
}

/// Rows of table-like files, compared as multisets of lines (a csv's or tsv's header left out).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub struct RowDiff {
    /// Rows only in the new data, less those counted as changed.
    pub added: u64,
    /// Rows only in the old data, less those counted as changed.
    pub removed: u64,
    /// Pairs of an added and a removed row with the same key: the first column of a csv or tsv;
    /// a JSON line's `id`, else its `key`, else its first field.
    pub changed: u64,
}

impl std::ops::AddAssign for RowDiff {
    fn add_assign(&mut self, other: RowDiff) {
        self.added += other.added;
        self.removed += other.removed;
        self.changed += other.changed;
    }
}

impl ContentDiff {
    /// One line for the CLI: `+1.2 KiB (3.4 KiB → 4.6 KiB); rows +3 −1 ~2`, `added, 4.6 KiB`,
    /// `removed, 3.4 KiB` or `identical bytes`; files are counted when more than one differs.
    pub fn summary(&self) -> String {
        let head = match self.change {
            ContentChange::Identical => return "identical bytes".to_string(),
            ContentChange::Added => format!("added, {}", bytes(self.new_bytes)),
            ContentChange::Removed => format!("removed, {}", bytes(self.old_bytes)),
            ContentChange::Changed => {
                let (sign, delta) = match self.new_bytes.cmp(&self.old_bytes) {
                    std::cmp::Ordering::Greater => ("+", self.new_bytes - self.old_bytes),
                    std::cmp::Ordering::Less => ("−", self.old_bytes - self.new_bytes),
                    std::cmp::Ordering::Equal => ("±", 0),
                };
                let (old, new) = (bytes(self.old_bytes), bytes(self.new_bytes));
                format!("{sign}{} ({old} → {new})", bytes(delta))
            }
        };
        let mut parts = vec![head];
        if self.files_added + self.files_removed + self.files_changed > 1 {
            let (a, r, c) = (self.files_added, self.files_removed, self.files_changed);
            parts.push(format!("files +{a} −{r} ~{c}"));
        }
        if let Some(RowDiff {
            added,
            removed,
            changed,
        }) = self.rows
        {
            parts.push(format!("rows +{added} −{removed} ~{changed}"));
        }
        parts.join("; ")
    }
}

/// A size as every answer shows one (`512 B`, `3.4 KiB`).
pub(crate) fn bytes(n: u64) -> String {
    crate::answers::metric_text("size_bytes", n as f64)
}
