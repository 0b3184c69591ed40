//! The SQLite append: a batch in one `BEGIN IMMEDIATE` transaction of the writer's, validated
//! by the shared [`append_batch`] against the entity states the writer keeps between batches.

use rusqlite::{params, OptionalExtension, Transaction, TransactionBehavior};

use super::open::{set_cache, WRITER_CACHE_KIB};
use super::{storage, SqliteStore, Writer};
use crate::cache::{PartitionState, StateCache};
use crate::event::{Event, Status};
use crate::projection::*;
use crate::store::*;

/// The writer's cache for a bulk batch (a backfill's plan record): with 8 MiB, `analyze` of a
/// million partitions takes 7.3 s instead of 5.2, re-reading index pages. Back to
/// [`WRITER_CACHE_KIB`] after it.
const BULK_CACHE_KIB: i64 = 32 * 1024;

/// Rows a batch writes past which it gets [`BULK_CACHE_KIB`]: a 24k-job build's plan record is
/// below it, a 100k-partition backfill's (302k runs) above.
const BULK_ROWS: usize = 100_000;

/// [`EventStore::append`]: the batch in one write transaction; a bulk one with a larger page
/// cache.
pub(super) fn append(store: &SqliteStore, mut events: Vec<Event>) -> Result<Vec<Event>> {
    let mut guard = store.writer.lock().expect("writer lock");
    let writer = &mut *guard;
    store.start_checkpointer(&writer.conn);
    let rows: usize = events.iter().map(|e| 1 + e.data.plan.len()).sum();
    let bulk = rows > BULK_ROWS;
    if bulk {
        set_cache(&writer.conn, BULK_CACHE_KIB)?;
    }
    let result = store.append_in(writer, &mut events);
    if bulk {
        // Failing, it leaves a larger cache; the batch's outcome stands either way.
        let _ = set_cache(&writer.conn, WRITER_CACHE_KIB);
    }
    result.map(|()| events)
}

impl SqliteStore {
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
}

/// A status read by the append's validation.
fn status_row(row: &rusqlite::Row<'_>) -> rusqlite::Result<String> {
    row.get(0)
}

fn parse_status(s: Option<String>) -> Result<Option<Status>> {
    s.map(|s| status_of(&s)).transpose()
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
                                   input_runs, code_versions)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12,
                     ?13, ?14, ?15, ?16, ?17, ?18, ?19, ?20)",
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
                start.and_then(started_at),
                s.and_then(|s| s.pid),
                s.and_then(|s| s.host.as_deref()),
                s.and_then(|s| s.owner.as_deref()),
                s.map(|s| to_json(&s.input_versions)),
                s.and_then(|s| s.log_path.as_deref()),
                s.filter(|s| !s.input_runs.is_empty())
                    .map(|s| to_json(&s.input_runs)),
                s.filter(|s| !s.code_versions.is_empty())
                    .map(|s| to_json(&s.code_versions)),
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
        let (all, count, head) = requested_columns(&e.data);
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
                    owner = ?6, input_versions = ?7, log_path = ?8, input_runs = ?9,
                    code_versions = ?10
             WHERE job_run_id = ?1 RETURNING job",
            params![
                e.job_run_id,
                e.status.as_str(),
                started_at(e),
                d.pid,
                d.host,
                d.owner,
                to_json(&d.input_versions),
                d.log_path,
                (!d.input_runs.is_empty()).then(|| to_json(&d.input_runs)),
                (!d.code_versions.is_empty()).then(|| to_json(&d.code_versions)),
            ],
        )?;
        self.insert_run_inputs(e)?;
        Ok(job)
    }

    fn run_started(&mut self, e: &Event) -> Result<String> {
        self.update_run(
            "UPDATE job_runs SET status = ?2, started_at = ?3 WHERE job_run_id = ?1 RETURNING job",
            params![e.job_run_id, e.status.as_str(), e.timestamp],
        )
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
                                recurring, message, updated_at, deadline)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?4, ?9)",
            params![
                d.want_id,
                e.status.as_str(),
                to_json(&d.requested),
                e.timestamp,
                d.expires_at,
                d.sla_seconds.map(|s| s as i64),
                d.recurring,
                e.message,
                d.deadline
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
                    event_idx, updated_at, code_versions)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15)
             ON CONFLICT (partition_ref, check_name) DO UPDATE SET
                status = excluded.status, blocking = excluded.blocking,
                job_run_id = excluded.job_run_id, job = coalesce(excluded.job, job),
                build_request_id = excluded.build_request_id,
                check_version = excluded.check_version, command = excluded.command,
                inline = excluded.inline, message = excluded.message,
                metrics = excluded.metrics, event_idx = excluded.event_idx,
                updated_at = excluded.updated_at, code_versions = excluded.code_versions",
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
                e.timestamp,
                (!d.code_versions.is_empty()).then(|| to_json(&d.code_versions)),
            ],
        )
    }

    fn insert_arrival(&mut self, e: &Event) -> Result<()> {
        self.execute(
            "INSERT INTO arrivals (partition_ref, dataset, arrived_at, data_version)
             VALUES (?1, ?2, ?3, ?4) ON CONFLICT (partition_ref) DO NOTHING",
            params![
                e.partition_ref,
                e.data.dataset,
                e.timestamp,
                e.data.data_version
            ],
        )?;
        self.execute(
            "DELETE FROM late_partitions WHERE partition_ref = ?1",
            params![e.partition_ref],
        )
    }

    fn mark_late(&mut self, e: &Event) -> Result<()> {
        self.execute(
            "INSERT INTO late_partitions (partition_ref, recorded_at)
             SELECT ?1, ?2 WHERE NOT EXISTS (SELECT 1 FROM arrivals WHERE partition_ref = ?1)
             ON CONFLICT (partition_ref) DO UPDATE SET recorded_at = excluded.recorded_at",
            params![e.partition_ref, e.timestamp],
        )
    }

    fn update_want(&mut self, e: &Event) -> Result<()> {
        self.execute(
            "UPDATE wants SET status = ?2, waiting_for = ?3, message = ?4,
                    build_request_id = coalesce(?5, build_request_id), updated_at = ?6,
                    retry_at = ?7
             WHERE want_id = ?1",
            params![
                e.data.want_id,
                e.status.as_str(),
                e.partition_ref,
                e.message,
                e.data.upstream,
                e.timestamp,
                e.data.retry_at
            ],
        )
    }

    fn insert_metrics(&mut self, rows: &[MetricValue]) -> Result<()> {
        // A reported metric cannot take a measure's name (the run is refused first); were one
        // written twice, the last value stands rather than the append failing.
        let mut stmt = self
            .tx
            .prepare_cached(
                "INSERT INTO run_metrics (job, name, partition_ref, job_run_id, value, recorded_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6)
                 ON CONFLICT (job, name, partition_ref, job_run_id) DO UPDATE
                    SET value = excluded.value",
            )
            .map_err(storage)?;
        for m in rows {
            stmt.execute(params![
                m.job,
                m.name,
                m.partition_ref,
                m.job_run_id,
                m.value,
                m.recorded_at
            ])
            .map_err(storage)?;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

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
}
