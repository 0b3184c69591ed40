//! The event schema (contract section 5): one flat record per event, with kind-specific extras in
//! [`EventData`]. Fields are only ever added; [`FORMAT_VERSION`] counts those additions.

use std::collections::BTreeMap;
use std::fmt;

use serde::{Deserialize, Serialize};

/// Version of the event format. Bump it when a field is added to [`Event`] or [`EventData`].
pub const FORMAT_VERSION: u32 = 10;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    BuildRequest,
    Partition,
    JobRun,
    Delegation,
    /// A table's alias moved to another version (`promoted`).
    Alias,
    /// A standing request for partitions: `requested`, `waiting`, `satisfied`; `sla_missed`,
    /// `sla_at_risk`;
    /// `expired` / `cancelled`.
    Want,
    /// A `databuild gc` that removed something (`completed`): what it removed, in `data.report`.
    Gc,
    /// A check of a partition's instance (`partition_ref`, built by `job_run_id`): `completed`
    /// (it passed) or `failed`; `data.check` names it (format version 4).
    Check,
    /// An environment (`data.environment`, format version 7): `created` (from
    /// `data.from_environment`) and `dropped` in prod's log; `promoted` (from
    /// `data.from_environment`) and `rolled_back` in the log of the environment they changed, by
    /// the build request that recorded the change.
    Environment,
    /// An external partition first seen available (format version 8): `available`, of no build
    /// request; `partition_ref`, its dataset in `data.dataset`, what was seen in
    /// `data.data_version`; the event's `timestamp` is when it was first seen. Forecasts learn
    /// each dataset's cadence from these.
    Arrival,
    /// The delivery of an `[[alert]]` (format version 9): `completed` or `failed`, of no build
    /// request; `data.alert` names it, `data.attempt` the last try (how many it took), `message` what
    /// it was sent for (and, failed, why).
    Alert,
}

/// Every status of every kind; which ones a kind may use is the business of [`crate::state`].
#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    // build_request
    Received,
    Planning,
    AnalysisCompleted,
    Executing,
    /// A build request turned down before anything of its plan ran (`--max-runs`): not a failure.
    Refused,
    // build_request and job_run
    Completed,
    Cancelled,
    // all kinds
    Failed,
    // partition
    Requested,
    Scheduled,
    Building,
    Available,
    Delegated,
    Tainted,
    /// Its data was deleted by `databuild gc` (no job of the graph builds it any more).
    Removed,
    // job_run
    /// Claimed for this build and host, its inputs fixed; its process has not started yet.
    Queued,
    Running,
    Skipped,
    // source partitions (no build request): closed to new data / its raw data deleted
    Sealed,
    Expired,
    // alias
    Promoted,
    // want
    Waiting,
    Satisfied,
    SlaMissed,
    SlaAtRisk,
    // environment
    Created,
    Dropped,
    RolledBack,
    // arrival: an expected external partition past its `expected_by`, not arrived
    Late,
}

macro_rules! names {
    ($ty:ident { $($variant:ident => $name:literal),* $(,)? }) => {
        impl $ty {
            pub const ALL: &'static [$ty] = &[$($ty::$variant),*];

            pub fn as_str(self) -> &'static str {
                match self { $($ty::$variant => $name),* }
            }

            pub fn parse(s: &str) -> Option<$ty> {
                match s { $($name => Some($ty::$variant),)* _ => None }
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

names!(Kind {
    BuildRequest => "build_request",
    Partition => "partition",
    JobRun => "job_run",
    Delegation => "delegation",
    Alias => "alias",
    Want => "want",
    Gc => "gc",
    Check => "check",
    Environment => "environment",
    Arrival => "arrival",
    Alert => "alert",
});

names!(Status {
    Received => "received",
    Planning => "planning",
    AnalysisCompleted => "analysis_completed",
    Executing => "executing",
    Refused => "refused",
    Completed => "completed",
    Cancelled => "cancelled",
    Failed => "failed",
    Requested => "requested",
    Scheduled => "scheduled",
    Building => "building",
    Available => "available",
    Delegated => "delegated",
    Tainted => "tainted",
    Removed => "removed",
    Queued => "queued",
    Running => "running",
    Skipped => "skipped",
    Sealed => "sealed",
    Expired => "expired",
    Promoted => "promoted",
    Waiting => "waiting",
    Satisfied => "satisfied",
    SlaMissed => "sla_missed",
    SlaAtRisk => "sla_at_risk",
    Created => "created",
    Dropped => "dropped",
    RolledBack => "rolled_back",
    Late => "late",
});

impl Status {
    /// A job run's status before it ends: scheduled, claimed (`queued`) or running.
    pub fn run_unfinished(self) -> bool {
        matches!(self, Status::Scheduled | Status::Queued | Status::Running)
    }
}

/// Kind-specific extras, stored as a JSON object. Every field is optional so that old events stay
/// readable as fields are added.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct EventData {
    /// build_request received: the refs asked for (of an analysis of more than 1,000, the
    /// first 1,000: see `requested_count`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub requested: Vec<String>,
    /// build_request received: how many refs were asked for, when `requested` lists only the
    /// first of them (an analysis, format version 10).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_count: Option<u64>,
    /// build_request received: planning only, nothing will run.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub analyze_only: bool,
    /// build_request received: rebuild the requested refs even if live.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub force: bool,
    /// job_run scheduled: what the run builds and reads.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub outputs: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub inputs: Vec<String>,
    /// job_run scheduled: the inputs its config named `dep = "query"`: read if present, never
    /// required nor built. The `running` event records the version of each present one in
    /// `input_versions`, with the required inputs'.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub query_inputs: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
    /// partition available: the data version it was built at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_version: Option<String>,
    /// job_run completed / failed: the process's exit code, if it exited.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    /// job_run running: where the run's process lives, to detect runs whose process died.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pid: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// job_run skipped: the earlier run whose result this one relies on.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub relies_on: Option<String>,
    /// build_request analysis_completed: how many runs the plan holds, and of which job; the
    /// build's `--parallel` (a build's progress and its ETA read these).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub planned_runs: Option<u64>,
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub planned_by_job: BTreeMap<String, u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub parallel: Option<u32>,
    /// build_request planning: a part of the plan, in order: each planned run as `[job,
    /// [outputs]]`. A run's own events (`job_run scheduled`, with its inputs, args and env) are
    /// written only once it is claimed, so recording a plan costs a few dozen bytes per run.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plan: Vec<(String, Vec<String>)>,
    /// job_run scheduled: the job's `version` in the graph file at the time.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_version: Option<String>,
    /// job_run running: the data version of each input as the run started.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub input_versions: BTreeMap<String, String>,
    /// job_run running: of each input a job built, the run that had built the instance read
    /// (its lineage; format version 3).
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub input_runs: BTreeMap<String, String>,
    /// job_run running and check: the code the job (or check) ran, as its fingerprints: each
    /// file of the project its command names or its `code` globs match (by path relative to the
    /// graph's folder) to the first 16 hex digits of its content's sha256, and `@definition` to
    /// that of its command, config command, env names and shown env values (format version 5). Empty in
    /// events written before: those runs compare on `job_version` only.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub code_versions: BTreeMap<String, String>,
    /// build_request received, job_run running: `host/pid/start-time` of the databuild process
    /// driving it, so that work whose driver died can be told from work still in progress.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub owner: Option<String>,
    /// partition building: the run that last held the partition when the claimer looked ("" for
    /// none). The log refuses the claim if that changed meanwhile (compare-and-swap), so a build
    /// never redoes what another just finished.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub claim_after: Option<String>,
    /// job_run ended: the run's id in the executor that ran it (`slurm:1234`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub executor_id: Option<String>,
    /// job_run running: where the run's log is kept.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub log_path: Option<String>,
    /// job_run completed, partition available: what the run reported through `DATABUILD_REPORT`
    /// (row counts, quarantined rows, provenance); gc completed: what it removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub report: Option<serde_json::Value>,
    /// partition sealed: how many records the source partition holds.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub records: Option<u64>,
    /// alias promoted: the table and the version its alias now points at.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub table: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub version: Option<u32>,
    /// want: which want (its refs are in `requested`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub want_id: Option<String>,
    /// want requested: when it expires (ns), and its SLA: how long after the end of a
    /// partition's day (the date in its ref) it must be live.
    /// (Answers show it as RFC 3339 text, its ns beside it as `expires_at_ns`.)
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub expires_at: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sla_seconds: Option<u64>,
    /// want requested: its deadline (ns), every partition live by then (`--by`, a recurring
    /// want's `by`); want sla_at_risk: the deadline the forecast passes (format version 9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deadline: Option<i64>,
    /// want sla_at_risk: by when the partition past its deadline is surely live (its p90
    /// forecast, ns; format version 9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_by: Option<i64>,
    /// want requested: the `[[want]]` of the graph file it was made from, if any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recurring: Option<String>,
    /// want waiting: the build request started for it, or the one on an upstream service.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<String>,
    /// want waiting: its build failed; when the service tries again (ns since the epoch; sooner
    /// if something it needs changes). Answers show it as RFC 3339 text, `retry_at`, with its ns
    /// beside it as `retry_at_ns`.
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(value_type = Option<String>)]
    pub retry_at: Option<i64>,
    /// job_run failed, and completed (format version 6): which attempt of its outputs this run
    /// is (1 for the first), and (failed) how many the job allows (`retries` + 1).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempts: Option<u32>,
    /// job_run cancelled: the run was claimed (`running` in the log) but its process never
    /// started, so it has no start time.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub not_started: bool,
    /// job_run completed, failed or cancelled: when its job really started (ns since the
    /// epoch). A run is claimed, and recorded `running`, ahead of its start (it waits in its
    /// build's queue for a slot); its duration counts from here.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub started_at: Option<i64>,
    /// job_run failed: what the build does about it next, when the failure is not final.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub then: Option<AfterFailure>,
    /// check: the check's name (a `[[check]]`, or one the job reported inline), its `version`
    /// and command as they were when it ran, whether it blocks, and the metrics it reported
    /// (format version 4).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub check_version: Option<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub check_command: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub blocking: Option<bool>,
    /// job_run completed: the metrics the job reported in `DATABUILD_REPORT`, by output ref
    /// then name (`{"<ref>": {"rows": 1234}}`, numbers only; format version 6).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub metrics: Option<serde_json::Value>,
    /// job_run completed and failed: what the run cost, measured by DataBuild (format version
    /// 6); its outputs are named in `outputs`, so each measure is kept per output ref.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub resources: Option<RunResources>,
    /// check: reported by the job itself in `DATABUILD_REPORT` (`checks`), not run by DataBuild.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub inline: bool,
    /// job_run completed, partition available, job_run skipped: what early cutoff did (its
    /// message says the same to people). None in events written before cutoff existed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cutoff: Option<Cutoff>,
    /// environment: the environment the event is about (format version 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub environment: Option<String>,
    /// environment `created` and `promoted`: the environment it was made or promoted from.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub from_environment: Option<String>,
    /// job_run completed: no process ran; the run's outputs are the instance this run of
    /// another (or the same) environment made, the same recipe, linked, not copied (format
    /// version 7).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reused_from: Option<ReusedFrom>,
    /// arrival: the `[[dataset]]` the partition belongs to (format version 8).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dataset: Option<String>,
    /// alert: the `[[alert]]` delivered (format version 9).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub alert: Option<String>,
    /// alert: the `idx` of the event it was sent for (format version 10), so a service that
    /// starts again resumes after it, and never sends an (alert, event) pair twice.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fired_by: Option<i64>,
}

/// The instance a reused run took: the run that made it, in its environment's log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ReusedFrom {
    pub environment: String,
    pub job_run_id: String,
}

impl ReusedFrom {
    const PREFIX: &'static str = "reused run ";

    /// What a reused run's `completed` event says to people.
    pub fn message(&self) -> String {
        format!(
            "{}{} of environment `{}`: no job ran",
            Self::PREFIX,
            self.job_run_id,
            self.environment
        )
    }

    /// The instance a projected run took, read back from its message (a row keeps its last
    /// event's message but not its data): the one place that message is read.
    pub fn of_message(message: Option<&str>) -> Option<ReusedFrom> {
        let rest = message?.strip_prefix(Self::PREFIX)?;
        let (run, rest) = rest.split_once(" of environment `")?;
        let environment = rest.strip_suffix("`: no job ran")?;
        Some(ReusedFrom {
            environment: environment.to_string(),
            job_run_id: run.to_string(),
        })
    }
}

/// What early cutoff did with a run or a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Cutoff {
    /// Rebuilt, and it wrote the bytes it had: its version, and all read from it, stand
    /// (a `completed` run all of whose outputs did so, or an `available` partition).
    RebuiltUnchanged,
    /// Not run (`skipped`): the runs before it wrote the bytes it had read.
    InputsUnchanged,
}

impl Cutoff {
    /// The event's message, for people.
    pub const fn message(self) -> &'static str {
        match self {
            Cutoff::RebuiltUnchanged => "rebuilt, unchanged",
            Cutoff::InputsUnchanged => "its inputs came out unchanged",
        }
    }

    /// The cutoff of a projected row (a run, a partition), which keeps its last event's message
    /// but not its data: the one place that message is read back.
    pub fn of_message(message: Option<&str>) -> Option<Cutoff> {
        [Cutoff::RebuiltUnchanged, Cutoff::InputsUnchanged]
            .into_iter()
            .find(|c| message == Some(c.message()))
    }
}

/// What a run cost, measured without the job's help: each `None` where its executor cannot know
/// it (a Slurm cluster without accounting has no CPU time or peak memory). Recorded on a run's
/// `completed` or `failed` event (`resources`) and kept per output ref in `run_metrics` under the
/// names of [`RunResources::values`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(default)]
pub struct RunResources {
    /// From its process's start to its end.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub wall_ms: Option<u64>,
    /// CPU time of the job and every descendant it waited for.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_user_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub cpu_system_ms: Option<u64>,
    /// The peak resident memory of its largest single process (the kernel's `ru_maxrss`, or
    /// Slurm's `MaxRSS`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_rss_bytes: Option<u64>,
    /// Block I/O: bytes read from and written to storage devices; reads the page cache served
    /// are not counted.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub read_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub write_bytes: Option<u64>,
    /// The size of its outputs, summed (of a run that succeeded).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_bytes: Option<u64>,
    /// From its claim (`queued`) to its process's start.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub queue_wait_ms: Option<u64>,
}

impl RunResources {
    /// The measures' names, in `run_metrics` and answers (the fields'), which a job's reported
    /// metrics may not take.
    pub const NAMES: [&'static str; 8] = [
        "wall_ms",
        "cpu_user_ms",
        "cpu_system_ms",
        "max_rss_bytes",
        "read_bytes",
        "write_bytes",
        "output_bytes",
        "queue_wait_ms",
    ];

    /// The measures known, by their names ([`RunResources::NAMES`]).
    pub fn values(&self) -> impl Iterator<Item = (&'static str, u64)> {
        let values = [
            self.wall_ms,
            self.cpu_user_ms,
            self.cpu_system_ms,
            self.max_rss_bytes,
            self.read_bytes,
            self.write_bytes,
            self.output_bytes,
            self.queue_wait_ms,
        ];
        Self::NAMES
            .into_iter()
            .zip(values)
            .filter_map(|(name, v)| v.map(|v| (name, v)))
    }
}

/// What a build does after a run failed, when that is not the end of its outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum AfterFailure {
    /// Another attempt is scheduled (the job's `retries`).
    Retry,
    /// The run reported missing inputs: they are built, then it runs again.
    FetchInputs,
}

impl EventData {
    pub fn is_empty(&self) -> bool {
        *self == EventData::default()
    }
}

/// One entry of the build event log.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// Position in the log, assigned when appended; 0 before.
    pub idx: i64,
    pub event_id: String,
    /// Nanoseconds since the Unix epoch.
    pub timestamp: i64,
    pub build_request_id: Option<String>,
    pub kind: Kind,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub partition_ref: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub job: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub job_run_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub delegated_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub message: Option<String>,
    #[serde(skip_serializing_if = "EventData::is_empty", default)]
    pub data: EventData,
}

/// Nanoseconds since the Unix epoch, now.
pub fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

pub fn new_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

impl Event {
    fn new(kind: Kind, status: Status, build_request_id: Option<&str>) -> Event {
        Event {
            idx: 0,
            event_id: new_id(),
            timestamp: now_ns(),
            build_request_id: build_request_id.map(str::to_string),
            kind,
            status,
            partition_ref: None,
            job: None,
            job_run_id: None,
            delegated_to: None,
            message: None,
            data: EventData::default(),
        }
    }

    pub fn build_request(build_request_id: &str, status: Status) -> Event {
        Event::new(Kind::BuildRequest, status, Some(build_request_id))
    }

    pub fn partition(build_request_id: Option<&str>, partition_ref: &str, status: Status) -> Event {
        let mut e = Event::new(Kind::Partition, status, build_request_id);
        e.partition_ref = Some(partition_ref.to_string());
        e
    }

    pub fn job_run(build_request_id: &str, job_run_id: &str, job: &str, status: Status) -> Event {
        let mut e = Event::new(Kind::JobRun, status, Some(build_request_id));
        e.job_run_id = Some(job_run_id.to_string());
        e.job = Some(job.to_string());
        e
    }

    pub fn delegation(build_request_id: &str, partition_ref: &str, delegated_to: &str) -> Event {
        let mut e = Event::new(Kind::Delegation, Status::Delegated, Some(build_request_id));
        e.partition_ref = Some(partition_ref.to_string());
        e.delegated_to = Some(delegated_to.to_string());
        e
    }

    /// An event of a want; `partition_ref` is what it waits for, or the partition that missed its SLA.
    pub fn want(want_id: &str, status: Status) -> Event {
        Event::new(Kind::Want, status, None).with_data(|d| d.want_id = Some(want_id.to_string()))
    }

    /// A table's alias now points at `version`.
    pub fn alias(table: &str, version: u32) -> Event {
        Event::new(Kind::Alias, Status::Promoted, None).with_data(|d| {
            d.table = Some(table.to_string());
            d.version = Some(version);
        })
    }

    pub fn with_message(mut self, message: impl Into<String>) -> Event {
        self.message = Some(message.into());
        self
    }

    pub fn with_run(mut self, job_run_id: &str) -> Event {
        self.job_run_id = Some(job_run_id.to_string());
        self
    }

    pub fn with_data(mut self, f: impl FnOnce(&mut EventData)) -> Event {
        f(&mut self.data);
        self
    }

    /// Environment `name` is `status` (`created`, `dropped`, `promoted`, `rolled_back`).
    pub fn environment(name: &str, status: Status) -> Event {
        Event::new(Kind::Environment, status, None)
            .with_data(|d| d.environment = Some(name.to_string()))
    }

    /// External partition `partition_ref` of `dataset` first seen available, at `data_version`.
    pub fn arrival(dataset: &str, partition_ref: &str, data_version: Option<String>) -> Event {
        let mut e = Event::new(Kind::Arrival, Status::Available, None);
        e.partition_ref = Some(partition_ref.to_string());
        e.data.dataset = Some(dataset.to_string());
        e.data.data_version = data_version;
        e
    }

    /// External partition `partition_ref` of `dataset`, seen not arrived past its expected time
    /// (`message` says when it was expected): `late`; its `available` arrival may follow.
    pub fn late_arrival(dataset: &str, partition_ref: &str, message: String) -> Event {
        let mut e = Event::arrival(dataset, partition_ref, None).with_message(message);
        e.status = Status::Late;
        e
    }

    /// The delivery of alert `name` (`completed` or `failed`) for the event at `fired_by`,
    /// after `attempts` tries.
    pub fn alert(
        name: &str,
        fired_by: i64,
        status: Status,
        attempts: u32,
        message: String,
    ) -> Event {
        Event::new(Kind::Alert, status, None)
            .with_data(|d| {
                d.alert = Some(name.to_string());
                d.fired_by = Some(fired_by);
                d.attempt = Some(attempts);
            })
            .with_message(message)
    }

    /// A `databuild gc` that removed something: `report` says what.
    pub fn gc(message: impl Into<String>, report: serde_json::Value) -> Event {
        Event::new(Kind::Gc, Status::Completed, None)
            .with_message(message)
            .with_data(|d| d.report = Some(report))
    }

    /// The result of check `name` of `partition_ref`'s instance built by `job_run_id`:
    /// `completed` when it passed, `failed` when not.
    pub fn check(
        build_request_id: Option<&str>,
        partition_ref: &str,
        job_run_id: &str,
        name: &str,
        passed: bool,
    ) -> Event {
        let status = if passed {
            Status::Completed
        } else {
            Status::Failed
        };
        let mut e = Event::new(Kind::Check, status, build_request_id);
        e.partition_ref = Some(partition_ref.to_string());
        e.job_run_id = Some(job_run_id.to_string());
        e.data.check = Some(name.to_string());
        e
    }

    /// The event as one line of JSON (for `events --json` and the API).
    pub fn to_json_line(&self) -> String {
        serde_json::to_string(self).expect("events serialize")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_roundtrip() {
        for s in Status::ALL {
            assert_eq!(Status::parse(s.as_str()), Some(*s));
            let json = serde_json::to_string(s).unwrap();
            assert_eq!(json, format!("\"{}\"", s.as_str()));
        }
        for k in Kind::ALL {
            assert_eq!(Kind::parse(k.as_str()), Some(*k));
        }
    }

    #[test]
    fn json_omits_what_is_absent() {
        let e = Event::partition(Some("br"), "a/1", Status::Requested);
        let v: serde_json::Value = serde_json::from_str(&e.to_json_line()).unwrap();
        assert_eq!(v["kind"], "partition");
        assert_eq!(v["status"], "requested");
        assert_eq!(v["partition_ref"], "a/1");
        assert!(v.get("job").is_none());
        assert!(v.get("data").is_none());
        let back: Event = serde_json::from_str(&e.to_json_line()).unwrap();
        assert_eq!(back, e);
    }
}
