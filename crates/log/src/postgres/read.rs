//! The PostgreSQL log's reads: pooled connections, each keeping the statements it prepared, and
//! the queries of the projections behind [`EventStore`]'s lookups and listings.

use std::collections::BTreeMap;

use postgres::{Client, NoTls};
use rustc_hash::FxHashMap;

use super::{connection_lost, describe, storage, PostgresStore, Retries};
use crate::event::{Event, Status};
use crate::projection::*;
use crate::store::*;

/// Prepared statements a reader keeps (queries built from filters vary); past it, it starts over.
const READER_STATEMENTS: usize = 128;

/// A pooled reading connection, with the statements it prepared (a read is then one round trip,
/// not a preparation and an execution).
pub(super) struct Reader {
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
    pub(super) fn new(client: Client) -> Reader {
        Reader {
            client,
            statements: FxHashMap::default(),
        }
    }

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

impl PostgresStore {
    /// Runs `f` on a pooled connection (a new one if none is idle). When the connection turns out
    /// lost (the server restarted, the network was cut), `f` runs again on a new one, for at most
    /// [`RETRY_FOR`](super::RETRY_FOR): reads are safe to repeat.
    pub(super) fn read<T>(&self, mut f: impl FnMut(&mut Reader) -> Result<T>) -> Result<T> {
        let mut retries = Retries::new();
        loop {
            let pooled = self.readers.lock().expect("reader pool").pop();
            let mut reader = match pooled {
                Some(r) if !r.client.is_closed() => r,
                _ => match postgres::Config::from(self.config.clone()).connect(NoTls) {
                    Ok(client) => Reader::new(client),
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

    /// `columns` of the runs of these ids that exist, in any order: one round trip.
    fn runs_by_id<T>(
        &self,
        columns: &str,
        ids: &[&str],
        row: fn(&postgres::Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        self.rows_by_key(columns, "job_runs", "job_run_id", ids, row)
    }

    /// `columns` of the rows of `table` whose `key` is one of `keys`, in any order: one round
    /// trip.
    fn rows_by_key<T>(
        &self,
        columns: &str,
        table: &str,
        key: &str,
        keys: &[&str],
        row: fn(&postgres::Row) -> Result<T>,
    ) -> Result<Vec<T>> {
        let wanted: Vec<String> = keys.iter().map(|k| k.to_string()).collect();
        let sql = format!("SELECT {columns} FROM {table} WHERE {key} = ANY($1)");
        self.read(|c| collect(c.query(&sql, &[&wanted]).map_err(storage)?, row))
    }
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

pub(super) fn events(store: &PostgresStore, f: &EventFilter) -> Result<Vec<Event>> {
    let q = events_query(f, '$', text, int);
    store.read(|c| {
        collect(
            c.query(&q.sql, &params(&q.values)).map_err(storage)?,
            event_from_row,
        )
    })
}

pub(super) fn last_idx(store: &PostgresStore) -> Result<i64> {
    store.read(|c| {
        Ok(c.query_one("SELECT coalesce(max(idx), 0) FROM events", &[])
            .map_err(storage)?
            .get(0))
    })
}

pub(super) fn partition(store: &PostgresStore, r: &str) -> Result<Option<PartitionRow>> {
    store.read(|c| {
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

pub(super) fn partitions_by_ref(store: &PostgresStore, refs: &[&str]) -> Result<Vec<PartitionRow>> {
    store.rows_by_key(
        PARTITION_COLUMNS,
        "partitions",
        "partition_ref",
        refs,
        partition_from_row,
    )
}

pub(super) fn partitions(store: &PostgresStore, q: &PartitionQuery) -> Result<Vec<PartitionRow>> {
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
    store.read(|c| {
        collect(
            c.query(&sql, &params(&filters.values)).map_err(storage)?,
            partition_from_row,
        )
    })
}

pub(super) fn partition_counts(
    store: &PostgresStore,
    pattern: Option<&str>,
) -> Result<BTreeMap<Status, u64>> {
    let regex = pattern.map(glob_to_regex);
    store.read(|c| {
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

pub(super) fn job_partition_counts(
    store: &PostgresStore,
    job: &str,
) -> Result<BTreeMap<Status, u64>> {
    store.read(|c| {
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

pub(super) fn build_request(store: &PostgresStore, id: &str) -> Result<Option<BuildRequestRow>> {
    store.read(|c| {
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

pub(super) fn build_requests(
    store: &PostgresStore,
    q: &BuildQuery,
) -> Result<Vec<BuildRequestRow>> {
    let status = q.status.map(|s| s.as_str());
    let after_at = q.after.as_ref().map(|a| a.0);
    let after_id = q.after.as_ref().map(|a| a.1.as_str());
    let unfinished = crate::projection::unfinished_builds(q.unfinished);
    store.read(|c| {
        let rows = c
            .query(
                &format!(
                    "SELECT {LISTED_BUILD_COLUMNS} FROM build_requests
                     WHERE {unfinished}($1::text IS NULL OR status = $1)
                       AND ($3 OR NOT analyze_only)
                       AND ($4::bigint IS NULL OR created_at >= $4)
                       AND ($5::bigint IS NULL OR created_at < $5)
                       AND ($6::bigint IS NULL OR created_at < $6
                            OR (created_at = $6 AND build_request_id COLLATE \"C\" > $7))
                     ORDER BY created_at DESC, build_request_id COLLATE \"C\" LIMIT $2"
                ),
                &[
                    &status,
                    &(q.limit as i64),
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

pub(super) fn request_partitions(
    store: &PostgresStore,
    id: &str,
) -> Result<Vec<RequestPartitionRow>> {
    store.read(|c| {
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

pub(super) fn request_partitions_page(
    store: &PostgresStore,
    id: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<RequestPartitionRow>> {
    store.read(|c| {
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

pub(super) fn job_runs_by_id(store: &PostgresStore, ids: &[&str]) -> Result<Vec<JobRunRow>> {
    store.runs_by_id(RUN_COLUMNS, ids, run_from_row)
}

pub(super) fn run_recipes(store: &PostgresStore, ids: &[&str]) -> Result<Vec<RunRecipe>> {
    store.runs_by_id(RECIPE_COLUMNS, ids, recipe_from_row)
}

pub(super) fn job_run(store: &PostgresStore, id: &str) -> Result<Option<JobRunRow>> {
    store.read(|c| {
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

pub(super) fn ids_matching(
    store: &PostgresStore,
    kind: IdKind,
    text: &str,
    limit: usize,
) -> Result<Vec<String>> {
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
    let found = store.read(|c| {
        let rows = c
            .query(&sql, &[&from, &to, &text, &(limit as i64)])
            .map_err(storage)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    })?;
    Ok(distinct(found, limit))
}

pub(super) fn checks_of(store: &PostgresStore, refs: &[&str]) -> Result<Vec<CheckRow>> {
    store.rows_by_key(
        CHECK_COLUMNS,
        "partition_checks",
        "partition_ref",
        refs,
        check_from_row,
    )
}

pub(super) fn any_blocking_failure(store: &PostgresStore) -> Result<bool> {
    store.read(|c| {
        c.query_one(
            "SELECT EXISTS (SELECT 1 FROM partition_checks WHERE status = 'failed' AND blocking)",
            &[],
        )
        .map_err(storage)
        .map(|r| r.get(0))
    })
}

pub(super) fn check_counts(store: &PostgresStore) -> Result<Vec<CheckCount>> {
    store.read(|c| {
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

pub(super) fn readers(
    store: &PostgresStore,
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
    store.read(|c| {
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

pub(super) fn want(store: &PostgresStore, id: &str) -> Result<Option<WantRow>> {
    store.read(|c| {
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

pub(super) fn wants(
    store: &PostgresStore,
    status: Option<Status>,
    active: bool,
    limit: usize,
) -> Result<Vec<WantRow>> {
    let q = wants_query(status, active, limit, '$', text);
    store.read(|c| {
        collect(
            c.query(&q.sql, &params(&q.values)).map_err(storage)?,
            want_from_row,
        )
    })
}

pub(super) fn job_runs(store: &PostgresStore, q: &RunQuery) -> Result<Vec<JobRunRow>> {
    let mut runs = Vec::new();
    store.each_job_run(q, &mut |run| runs.push(run))?;
    Ok(runs)
}

pub(super) fn each_job_run(
    store: &PostgresStore,
    q: &RunQuery,
    each: &mut dyn FnMut(JobRunRow),
) -> Result<()> {
    let q = runs_query(q, '$', text);
    // The rows as the server sent them, parsed one at a time: a read retried after a lost
    // connection starts over, so `each` sees no row until the read is done.
    let rows = store.read(|c| c.query(&q.sql, &params(&q.values)).map_err(storage))?;
    for row in &rows {
        each(run_from_row(row)?);
    }
    Ok(())
}

pub(super) fn build_run_counts(
    store: &PostgresStore,
    build_request_id: &str,
) -> Result<BuildRunCounts> {
    store.read(|c| {
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

pub(super) fn job_stats(store: &PostgresStore, job: Option<&str>) -> Result<Vec<JobStats>> {
    store.read(|c| {
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

fn metric_from_row(r: &postgres::Row) -> Result<MetricValue> {
    Ok(MetricValue {
        job: r.text(0)?,
        name: r.text(1)?,
        partition_ref: r.text(2)?,
        job_run_id: r.text(3)?,
        value: r.try_get(4).map_err(storage)?,
        recorded_at: r.int(5)?,
    })
}

pub(super) fn metric_values(
    store: &PostgresStore,
    job: &str,
    name: &str,
    after: Option<&MetricKey>,
    limit: usize,
) -> Result<Vec<MetricValue>> {
    let (after_ref, after_run) = metric_after(after);
    let sql = metric_values_sql(["$1", "$2", "$3", "$4", "$5"], POSTGRES_BYTES);
    store.read(|c| {
        let rows = c
            .query(
                &sql,
                &[&job, &name, &after_ref, &after_run, &(limit as i64)],
            )
            .map_err(storage)?;
        collect(rows, metric_from_row)
    })
}

pub(super) fn run_metrics(store: &PostgresStore, run: &str) -> Result<Vec<MetricValue>> {
    let sql = run_metrics_sql("$1");
    store.read(|c| {
        let rows = c.query(&sql, &[&run]).map_err(storage)?;
        collect(rows, metric_from_row)
    })
}

pub(super) fn metric_history(
    store: &PostgresStore,
    q: &HistoryQuery<'_>,
) -> Result<Vec<(String, f64)>> {
    let sql = metric_history_sql(["$1", "$2", "$3", "$4", "$5"], POSTGRES_BYTES);
    store.read(|c| {
        let rows = c
            .query(
                &sql,
                &[&q.job, &q.name, &q.from, &q.before, &(q.limit as i64)],
            )
            .map_err(storage)?;
        collect(rows, |r| Ok((r.text(0)?, r.try_get(1).map_err(storage)?)))
    })
}

pub(super) fn recent_metrics(
    store: &PostgresStore,
    job: &str,
    runs: usize,
) -> Result<Vec<MetricValue>> {
    let sql = recent_metrics_sql("$1", "$2");
    store.read(|c| {
        let rows = c.query(&sql, &[&job, &(runs as i64)]).map_err(storage)?;
        collect(rows, metric_from_row)
    })
}

pub(super) fn arrivals_of(store: &PostgresStore, refs: &[&str]) -> Result<Vec<ArrivalRow>> {
    store.rows_by_key(
        ARRIVAL_COLUMNS,
        "arrivals",
        "partition_ref",
        refs,
        arrival_from_row,
    )
}

pub(super) fn late_refs(store: &PostgresStore) -> Result<Vec<String>> {
    store.read(|c| {
        let rows = c
            .query(
                "SELECT partition_ref FROM late_partitions ORDER BY partition_ref COLLATE \"C\"",
                &[],
            )
            .map_err(storage)?;
        Ok(rows.iter().map(|r| r.get(0)).collect())
    })
}

pub(super) fn recent_arrivals(
    store: &PostgresStore,
    dataset: &str,
    limit: usize,
) -> Result<Vec<ArrivalRow>> {
    store.read(|c| {
        let rows = c
            .query(
                &format!(
                    "SELECT {ARRIVAL_COLUMNS} FROM arrivals WHERE dataset = $1
                      ORDER BY arrived_at DESC LIMIT $2"
                ),
                &[&dataset, &(limit as i64)],
            )
            .map_err(storage)?;
        collect(rows, arrival_from_row)
    })
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
