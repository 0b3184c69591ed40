//! What the reads share: the query builders both backends run (with their own parameter sigil and
//! values), the projections' column lists, and the decoding of their rows behind [`Columns`].

use std::collections::BTreeMap;

use crate::event::{Event, EventData, Kind, Status};
use crate::store::*;

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

/// The events of `f`, in log order (or its reverse: `newest_first`).
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
    let order = if f.newest_first { " DESC" } else { "" };
    Query {
        sql: format!(
            "SELECT {EVENT_COLUMNS} FROM events{} ORDER BY idx{order}{limit}",
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
        // The very terms of the partial index `job_runs_unfinished` (SQLite uses it only for a
        // WHERE that implies its own): gc's read of all unfinished runs is read by it.
        filters.raw("status IN ('scheduled', 'queued', 'running')");
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

/// The condition of `BuildQuery::unfinished`, written out (not behind a bound flag) so that
/// the planner reads the few unfinished builds by their partial index
/// (`build_requests_unfinished`) instead of scanning every build.
pub(crate) fn unfinished_builds(unfinished: bool) -> &'static str {
    if unfinished {
        "status IN ('received', 'planning', 'analysis_completed', 'executing') \
         AND NOT analyze_only AND "
    } else {
        ""
    }
}

/// A listing's columns: the first few requested refs instead of all of them.
pub(crate) const LISTED_BUILD_COLUMNS: &str = "build_request_id, status, requested_head, \
     analyze_only, message, created_at, updated_at, owner, requested_count";

/// How many requested refs a listing shows of each build request ([`BuildRequestRow`]).
pub const REQUESTED_HEAD: usize = 10;

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
                           owner, job_version, input_versions, log_path, input_runs, code_versions";

/// [`RUN_COLUMNS`] with what a run read and ran with (inputs, args, env, input versions and
/// runs) read as NULL, in place: each JSON parsed into lists and maps, those are most of a run
/// row's memory.
fn brief_run_columns() -> String {
    const LEFT_OUT: [&str; 6] = [
        "inputs",
        "args",
        "env",
        "input_versions",
        "input_runs",
        "code_versions",
    ];
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
        code_versions: json_map(row.opt_text(21)?),
    })
}

pub(crate) const RECIPE_COLUMNS: &str =
    "job_run_id, job, job_version, inputs, input_versions, args, env, code_versions";

pub(crate) fn recipe_from_row<R: Columns>(row: &R) -> RowResult<RunRecipe, R> {
    Ok(RunRecipe {
        job_run_id: row.text(0)?,
        job: row.text(1)?,
        job_version: row.opt_text(2)?,
        inputs: json_list(row.opt_text(3)?).into(),
        input_versions: json_pairs(row.opt_text(4)?).into(),
        args: json_list(row.opt_text(5)?).into(),
        env: json_pairs(row.opt_text(6)?).into(),
        code_versions: json_pairs(row.opt_text(7)?).into(),
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
     check_version, command, inline, message, metrics, updated_at, code_versions";

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
        code_versions: json_map(row.opt_text(13)?),
    })
}

pub(crate) const ARRIVAL_COLUMNS: &str = "partition_ref, dataset, arrived_at, data_version";

pub(crate) fn arrival_from_row<R: Columns>(row: &R) -> RowResult<ArrivalRow, R> {
    Ok(ArrivalRow {
        partition_ref: row.text(0)?,
        dataset: row.text(1)?,
        arrived_at: row.int(2)?,
        data_version: row.opt_text(3)?,
    })
}

/// [`crate::EventStore::check_counts`]: (job, check, blocking, passed, failed).
pub(crate) const CHECK_COUNTS: &str =
    "SELECT coalesce(job, ''), check_name, max(CAST(blocking AS INTEGER)),
        sum(CASE WHEN status = 'completed' THEN 1 ELSE 0 END),
        sum(CASE WHEN status = 'failed' THEN 1 ELSE 0 END)
   FROM partition_checks GROUP BY 1, 2 ORDER BY 1, 2";

pub(crate) const WANT_COLUMNS: &str =
    "want_id, status, refs, created_at, expires_at, sla_seconds, recurring,
                            waiting_for, message, build_request_id, sla_missed, updated_at, retry_at, deadline";

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
        retry_at: row.opt_int(12)?,
        deadline: row.opt_int(13)?,
    })
}

pub(crate) const METRIC_COLUMNS: &str = "job, name, partition_ref, job_run_id, value, recorded_at";

/// How a backend compares refs and run ids byte by byte, as key order is everywhere: SQLite's
/// default (`BINARY`) already does; PostgreSQL's database collation may not (under
/// `en_US.UTF-8`, `~` sorts before digits), so its comparisons say `COLLATE "C"`, which its
/// index `run_metrics_key_c` is built in.
pub(crate) const SQLITE_BYTES: &str = "";
pub(crate) const POSTGRES_BYTES: &str = " COLLATE \"C\"";

/// A page of one job's metric in key order (`MetricKey`'s ref and run after which it starts:
/// `('', '')` for the first page, which every row follows since a run id is never empty).
pub(crate) fn metric_values_sql(placeholders: [&str; 5], bytes: &str) -> String {
    let [job, name, after_ref, after_run, limit] = placeholders;
    format!(
        "SELECT {METRIC_COLUMNS} FROM run_metrics
          WHERE job = {job} AND name = {name}
            AND (partition_ref{bytes}, job_run_id{bytes}) > ({after_ref}, {after_run})
          ORDER BY partition_ref{bytes}, job_run_id{bytes} LIMIT {limit}"
    )
}

pub(crate) fn run_metrics_sql(run: &str) -> String {
    format!(
        "SELECT {METRIC_COLUMNS} FROM run_metrics WHERE job_run_id = {run}
          ORDER BY partition_ref, name"
    )
}

/// Where a page of metric values starts, as the two parameters of [`metric_values_sql`].
pub(crate) fn metric_after(after: Option<&MetricKey>) -> (&str, &str) {
    after.map_or(("", ""), |k| (&k.partition_ref, &k.job_run_id))
}

/// The history of an anomaly check ([`HistoryQuery`]): current, available instances that failed
/// no check, refs in `[from, before)`, nearest first.
pub(crate) fn metric_history_sql(placeholders: [&str; 5], bytes: &str) -> String {
    let [job, name, from, before, limit] = placeholders;
    format!(
        "SELECT m.partition_ref, m.value FROM run_metrics m
           JOIN partitions p ON p.partition_ref = m.partition_ref AND p.job_run_id = m.job_run_id
          WHERE m.job = {job} AND m.name = {name}
            AND m.partition_ref{bytes} >= {from} AND m.partition_ref{bytes} < {before}
            AND p.status = 'available'
            AND NOT EXISTS (SELECT 1 FROM partition_checks c
                             WHERE c.partition_ref = m.partition_ref
                               AND c.job_run_id = m.job_run_id AND c.status = 'failed')
          ORDER BY m.partition_ref{bytes} DESC LIMIT {limit}"
    )
}

/// The metrics of a job's last runs (`job_runs_by_job`, then `run_metrics_run`).
pub(crate) fn recent_metrics_sql(job: &str, runs: &str) -> String {
    format!(
        "SELECT {METRIC_COLUMNS} FROM run_metrics WHERE job_run_id IN
           (SELECT job_run_id FROM job_runs WHERE job = {job} ORDER BY scheduled_at DESC LIMIT {runs})"
    )
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
