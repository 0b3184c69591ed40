//! The SQLite log's reads: pooled read-only connections, and the queries of the projections
//! behind [`EventStore`]'s lookups and listings.

use std::collections::BTreeMap;

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use super::open::{tune, BUSY_TIMEOUT, READER_CACHE_KIB};
use super::{storage, SqliteStore};
use crate::event::{Event, Status};
use crate::projection::*;
use crate::store::*;

impl SqliteStore {
    /// Runs `f` on a pooled read connection.
    pub(super) fn read<T>(&self, f: impl FnOnce(&Connection) -> rusqlite::Result<T>) -> Result<T> {
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

    /// The rows `sql` finds for each key (`?1`), in the keys' order: one read transaction for
    /// all, since SQLite otherwise takes and drops its file locks around every single query.
    pub(super) fn lookup_each<T>(
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

pub(super) fn events(store: &SqliteStore, f: &EventFilter) -> Result<Vec<Event>> {
    let q = events_query(f, '?', text, int);
    store.read(|c| {
        c.prepare_cached(&q.sql)?
            .query_map(rusqlite::params_from_iter(q.values), |r| event_from_row(r))?
            .collect()
    })
}

pub(super) fn last_idx(store: &SqliteStore) -> Result<i64> {
    store.read(|c| c.query_row("SELECT coalesce(max(idx), 0) FROM events", [], |r| r.get(0)))
}

pub(super) fn partition(store: &SqliteStore, r: &str) -> Result<Option<PartitionRow>> {
    store.read(|c| {
        c.prepare_cached(&format!(
            "SELECT {PARTITION_COLUMNS} FROM partitions WHERE partition_ref = ?1"
        ))?
        .query_row([r], |r| partition_from_row(r))
        .optional()
    })
}

pub(super) fn partitions_by_ref(store: &SqliteStore, refs: &[&str]) -> Result<Vec<PartitionRow>> {
    store.lookup_each(
        &format!("SELECT {PARTITION_COLUMNS} FROM partitions WHERE partition_ref = ?1"),
        refs,
        |r| partition_from_row(r),
    )
}

pub(super) fn partitions(store: &SqliteStore, q: &PartitionQuery) -> Result<Vec<PartitionRow>> {
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
    store.read(|c| {
        c.prepare_cached(&sql)?
            .query_map(rusqlite::params_from_iter(filters.values), |r| {
                partition_from_row(r)
            })?
            .collect()
    })
}

pub(super) fn partition_counts(
    store: &SqliteStore,
    pattern: Option<&str>,
) -> Result<BTreeMap<Status, u64>> {
    store.read(|c| {
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

pub(super) fn job_partition_counts(
    store: &SqliteStore,
    job: &str,
) -> Result<BTreeMap<Status, u64>> {
    store.read(|c| {
        let rows = c
            .prepare_cached("SELECT status, n FROM partition_counts WHERE job = ?1 AND n > 0")?
            .query_map([job], |r| Ok((r.get::<_, String>(0)?, r.get::<_, i64>(1)?)))?
            .collect::<rusqlite::Result<Vec<_>>>()?;
        rows.into_iter()
            .map(|(s, n)| Ok((row_status(s)?, n as u64)))
            .collect()
    })
}

pub(super) fn build_request(store: &SqliteStore, id: &str) -> Result<Option<BuildRequestRow>> {
    store.read(|c| {
        c.prepare_cached(&format!(
            "SELECT {BUILD_COLUMNS} FROM build_requests WHERE build_request_id = ?1"
        ))?
        .query_row([id], |r| build_from_row(r))
        .optional()
    })
}

pub(super) fn build_requests(store: &SqliteStore, q: &BuildQuery) -> Result<Vec<BuildRequestRow>> {
    let unfinished = crate::projection::unfinished_builds(q.unfinished);
    store.read(|c| {
        c.prepare_cached(&format!(
            "SELECT {LISTED_BUILD_COLUMNS} FROM build_requests
             WHERE {unfinished}(?1 IS NULL OR status = ?1)
               AND (?3 OR NOT analyze_only)
               AND (?4 IS NULL OR created_at >= ?4)
               AND (?5 IS NULL OR created_at < ?5)
               AND (?6 IS NULL OR created_at < ?6 OR (created_at = ?6 AND build_request_id > ?7))
             ORDER BY created_at DESC, build_request_id LIMIT ?2"
        ))?
        .query_map(
            params![
                q.status.map(|s| s.as_str()),
                q.limit as i64,
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

pub(super) fn request_partitions(
    store: &SqliteStore,
    id: &str,
) -> Result<Vec<RequestPartitionRow>> {
    store.read(|c| {
        c.prepare_cached(&format!(
            "SELECT {REQUEST_PARTITION_COLUMNS} FROM request_partitions
             WHERE build_request_id = ?1 ORDER BY partition_ref"
        ))?
        .query_map([id], |r| request_partition_from_row(r))?
        .collect()
    })
}

pub(super) fn request_partitions_page(
    store: &SqliteStore,
    id: &str,
    after: Option<&str>,
    limit: usize,
) -> Result<Vec<RequestPartitionRow>> {
    store.read(|c| {
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

pub(super) fn job_run(store: &SqliteStore, id: &str) -> Result<Option<JobRunRow>> {
    store.read(|c| {
        c.prepare_cached(&format!(
            "SELECT {RUN_COLUMNS} FROM job_runs WHERE job_run_id = ?1"
        ))?
        .query_row([id], |r| run_from_row(r))
        .optional()
    })
}

pub(super) fn job_runs_by_id(store: &SqliteStore, ids: &[&str]) -> Result<Vec<JobRunRow>> {
    store.lookup_each(
        &format!("SELECT {RUN_COLUMNS} FROM job_runs WHERE job_run_id = ?1"),
        ids,
        |r| run_from_row(r),
    )
}

pub(super) fn run_recipes(store: &SqliteStore, ids: &[&str]) -> Result<Vec<RunRecipe>> {
    store.lookup_each(
        &format!("SELECT {RECIPE_COLUMNS} FROM job_runs WHERE job_run_id = ?1"),
        ids,
        |r| recipe_from_row(r),
    )
}

pub(super) fn checks_of(store: &SqliteStore, refs: &[&str]) -> Result<Vec<CheckRow>> {
    store.lookup_each(
        &format!("SELECT {CHECK_COLUMNS} FROM partition_checks WHERE partition_ref = ?1"),
        refs,
        |r| check_from_row(r),
    )
}

pub(super) fn any_blocking_failure(store: &SqliteStore) -> Result<bool> {
    store.read(|c| {
        c.query_row(
            "SELECT EXISTS (SELECT 1 FROM partition_checks
                             WHERE status = 'failed' AND blocking = 1)",
            [],
            |r| r.get(0),
        )
    })
}

pub(super) fn check_counts(store: &SqliteStore) -> Result<Vec<CheckCount>> {
    store.read(|c| {
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

pub(super) fn readers(
    store: &SqliteStore,
    input_ref: &str,
    input_run: Option<&str>,
    data_version: Option<&str>,
    of: ReadersOf,
    limit: usize,
) -> Result<Vec<String>> {
    store.read(|c| {
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

pub(super) fn ids_matching(
    store: &SqliteStore,
    kind: IdKind,
    text: &str,
    limit: usize,
) -> Result<Vec<String>> {
    let (table, id) = id_column(kind);
    let (from, to) = prefix_bounds(text);
    // The short form by its expression index (schema version 7); the prefix by the key.
    // Each part stops at `limit` (a `UNION` would gather every match to drop repeats).
    let sql = format!(
        "SELECT * FROM (SELECT {id} FROM {table} WHERE {id} >= ?1 AND {id} < ?2 LIMIT ?4)
         UNION ALL
         SELECT * FROM (SELECT {id} FROM {table} WHERE substr({id}, -{SHORT_ID}) = ?3 LIMIT ?4)"
    );
    let found: Vec<String> = store.read(|c| {
        c.prepare_cached(&sql)?
            .query_map(params![from, to, text, limit as i64], |r| r.get(0))?
            .collect()
    })?;
    Ok(distinct(found, limit))
}

pub(super) fn want(store: &SqliteStore, id: &str) -> Result<Option<WantRow>> {
    store.read(|c| {
        c.prepare_cached(&format!(
            "SELECT {WANT_COLUMNS} FROM wants WHERE want_id = ?1"
        ))?
        .query_row([id], |r| want_from_row(r))
        .optional()
    })
}

pub(super) fn wants(
    store: &SqliteStore,
    status: Option<Status>,
    active: bool,
    limit: usize,
) -> Result<Vec<WantRow>> {
    let q = wants_query(status, active, limit, '?', text);
    store.read(|c| {
        c.prepare_cached(&q.sql)?
            .query_map(rusqlite::params_from_iter(q.values), |r| want_from_row(r))?
            .collect()
    })
}

pub(super) fn job_runs(store: &SqliteStore, q: &RunQuery) -> Result<Vec<JobRunRow>> {
    let mut runs = Vec::new();
    store.each_job_run(q, &mut |run| runs.push(run))?;
    Ok(runs)
}

pub(super) fn each_job_run(
    store: &SqliteStore,
    q: &RunQuery,
    each: &mut dyn FnMut(JobRunRow),
) -> Result<()> {
    let q = runs_query(q, '?', text);
    store.read(|c| {
        let mut stmt = c.prepare_cached(&q.sql)?;
        let mut rows = stmt.query(rusqlite::params_from_iter(q.values))?;
        while let Some(row) = rows.next()? {
            each(run_from_row(row)?);
        }
        Ok(())
    })
}

pub(super) fn job_stats(store: &SqliteStore, job: Option<&str>) -> Result<Vec<JobStats>> {
    store.read(|c| {
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

pub(super) fn build_run_counts(
    store: &SqliteStore,
    build_request_id: &str,
) -> Result<BuildRunCounts> {
    store.read(|c| {
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

fn metric_from_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<MetricValue> {
    Ok(MetricValue {
        job: r.get(0)?,
        name: r.get(1)?,
        partition_ref: r.get(2)?,
        job_run_id: r.get(3)?,
        value: r.get(4)?,
        recorded_at: r.get(5)?,
    })
}

pub(super) fn metric_values(
    store: &SqliteStore,
    job: &str,
    name: &str,
    after: Option<&MetricKey>,
    limit: usize,
) -> Result<Vec<MetricValue>> {
    let (after_ref, after_run) = metric_after(after);
    store.read(|c| {
        c.prepare_cached(&metric_values_sql(
            ["?1", "?2", "?3", "?4", "?5"],
            SQLITE_BYTES,
        ))?
        .query_map(
            params![job, name, after_ref, after_run, limit as i64],
            metric_from_row,
        )?
        .collect()
    })
}

pub(super) fn run_metrics(store: &SqliteStore, run: &str) -> Result<Vec<MetricValue>> {
    store.read(|c| {
        c.prepare_cached(&run_metrics_sql("?1"))?
            .query_map([run], metric_from_row)?
            .collect()
    })
}

pub(super) fn metric_history(
    store: &SqliteStore,
    q: &HistoryQuery<'_>,
) -> Result<Vec<(String, f64)>> {
    store.read(|c| {
        c.prepare_cached(&metric_history_sql(
            ["?1", "?2", "?3", "?4", "?5"],
            SQLITE_BYTES,
        ))?
        .query_map(
            params![q.job, q.name, q.from, q.before, q.limit as i64],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?
        .collect()
    })
}

pub(super) fn recent_metrics(
    store: &SqliteStore,
    job: &str,
    runs: usize,
) -> Result<Vec<MetricValue>> {
    store.read(|c| {
        c.prepare_cached(&recent_metrics_sql("?1", "?2"))?
            .query_map(params![job, runs as i64], metric_from_row)?
            .collect()
    })
}

pub(super) fn arrivals_of(store: &SqliteStore, refs: &[&str]) -> Result<Vec<ArrivalRow>> {
    store.lookup_each(
        &format!("SELECT {ARRIVAL_COLUMNS} FROM arrivals WHERE partition_ref = ?1"),
        refs,
        |r| arrival_from_row(r),
    )
}

pub(super) fn late_refs(store: &SqliteStore) -> Result<Vec<String>> {
    store.read(|c| {
        c.prepare_cached("SELECT partition_ref FROM late_partitions ORDER BY partition_ref")?
            .query_map([], |r| r.get(0))?
            .collect()
    })
}

pub(super) fn recent_arrivals(
    store: &SqliteStore,
    dataset: &str,
    limit: usize,
) -> Result<Vec<ArrivalRow>> {
    store.read(|c| {
        c.prepare_cached(&format!(
            "SELECT {ARRIVAL_COLUMNS} FROM arrivals WHERE dataset = ?1
              ORDER BY arrived_at DESC LIMIT ?2"
        ))?
        .query_map(params![dataset, limit as i64], |r| arrival_from_row(r))?
        .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Kind;

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
            let plan = query_plan(&conn.conn, events_query(&filter, '?', text, int));
            assert!(
                plan.iter().any(|step| step.contains(index)),
                "{kind:?}: {plan:?}"
            );
        }
    }

    /// A starting service's read of the newest alert deliveries walks their own index from the
    /// log's end, never the log, however few deliveries there are.
    #[test]
    fn the_newest_alert_deliveries_are_read_by_their_own_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let conn = store.writer.lock().unwrap();
        let filter = EventFilter {
            kind: Some(Kind::Alert),
            newest_first: true,
            limit: Some(1000),
            ..Default::default()
        };
        let plan = query_plan(&conn.conn, events_query(&filter, '?', text, int));
        assert!(
            plan.iter().any(|step| step.contains("events_of_alerts")),
            "{plan:?}"
        );
        assert!(
            !plan.iter().any(|step| step.contains("TEMP B-TREE")),
            "{plan:?}"
        );
    }

    /// Every unfinished run (gc's read) is read through the partial index of unfinished runs,
    /// `queued` ones included, not by a scan of every run.
    #[test]
    fn unfinished_runs_are_read_by_their_partial_index() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let conn = store.writer.lock().unwrap();
        let q = RunQuery {
            unfinished: true,
            limit: 100,
            ..Default::default()
        };
        let plan = query_plan(&conn.conn, runs_query(&q, '?', text));
        assert!(
            plan.iter().any(|step| step.contains("job_runs_unfinished")),
            "{plan:?}"
        );
    }

    /// The steps of `EXPLAIN QUERY PLAN` of `q`.
    fn query_plan(conn: &Connection, q: Query<rusqlite::types::Value>) -> Vec<String> {
        conn.prepare(&format!("EXPLAIN QUERY PLAN {}", q.sql))
            .unwrap()
            .query_map(rusqlite::params_from_iter(q.values), |r| r.get(3))
            .unwrap()
            .collect::<rusqlite::Result<_>>()
            .unwrap()
    }
}
