//! The PostgreSQL event log: one log shared by several DataBuild processes on several machines.
//!
//! It keeps the SQLite log's semantics exactly: the same tables, projections written in the
//! events' transaction, the same validation. Appends from all processes are serialized by a
//! transaction-scoped advisory lock, so each batch validates against everything committed before
//! it; a partition claim is therefore atomic across processes. User SQL runs in a read-only
//! transaction with a statement timeout (and, if configured, as a least-privilege role).

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls, Transaction};
use rustc_hash::FxHashMap;

use crate::cache::{PartitionState, StateCache};
use crate::event::{Event, Status};
use crate::projection::*;
use crate::store::*;

/// The schema, as numbered migrations (see the SQLite store).
const MIGRATIONS: &[&str] = &[
    include_str!("postgres/v1.sql"),
    include_str!("postgres/v2.sql"),
    include_str!("postgres/v3.sql"),
    include_str!("postgres/v4.sql"),
    include_str!("postgres/v5.sql"),
];
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// The database's clock in ns since the epoch: leases are timed by it, never by a host's clock.
const DB_NOW_NS: &str = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

/// The advisory lock key that serializes appends: "DBLG".
const APPEND_LOCK: i64 = 0x4442_4C47;

pub struct PostgresStore {
    /// The connection string, for new connections; shown redacted.
    url: String,
    writer: Mutex<Writer>,
    readers: Mutex<Vec<Client>>,
    /// A role to `SET LOCAL ROLE` to for user SQL.
    sql_role: Option<String>,
}

struct Writer {
    client: Client,
    caches: StateCache,
    statements: Statements,
    /// The append counter as of our last append; the caches hold only while nobody else appended.
    seen_appends: Option<i64>,
}

/// Statements prepared once per connection: each append otherwise pays a parse round trip for
/// every statement of every event.
#[derive(Default)]
struct Statements(FxHashMap<&'static str, postgres::Statement>);

type Params<'a> = &'a [&'a (dyn postgres::types::ToSql + Sync)];

impl Statements {
    fn get(
        &mut self,
        tx: &mut Transaction<'_>,
        sql: &'static str,
    ) -> std::result::Result<postgres::Statement, postgres::Error> {
        if let Some(s) = self.0.get(sql) {
            return Ok(s.clone());
        }
        let prepared = tx.prepare(sql)?;
        self.0.insert(sql, prepared.clone());
        Ok(prepared)
    }

    fn execute(
        &mut self,
        tx: &mut Transaction<'_>,
        sql: &'static str,
        params: Params<'_>,
    ) -> std::result::Result<u64, postgres::Error> {
        let s = self.get(tx, sql)?;
        tx.execute(&s, params)
    }

    fn query_one(
        &mut self,
        tx: &mut Transaction<'_>,
        sql: &'static str,
        params: Params<'_>,
    ) -> std::result::Result<postgres::Row, postgres::Error> {
        let s = self.get(tx, sql)?;
        tx.query_one(&s, params)
    }

    fn query_opt(
        &mut self,
        tx: &mut Transaction<'_>,
        sql: &'static str,
        params: Params<'_>,
    ) -> std::result::Result<Option<postgres::Row>, postgres::Error> {
        let s = self.get(tx, sql)?;
        tx.query_opt(&s, params)
    }
}

fn storage(e: postgres::Error) -> LogError {
    LogError::Storage(e.to_string())
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
        let mut client = Client::connect(url, NoTls).map_err(|e| LogError::Open {
            location: location.clone(),
            message: e.to_string(),
        })?;
        prepare_schema(&mut client, &location)?;
        let sql_role = sql_role.filter(|r| !r.is_empty());
        Ok(PostgresStore {
            url: url.to_string(),
            writer: Mutex::new(Writer {
                client,
                caches: StateCache::default(),
                statements: Statements::default(),
                seen_appends: None,
            }),
            readers: Mutex::new(Vec::new()),
            sql_role,
        })
    }

    fn read<T>(&self, f: impl FnOnce(&mut Client) -> Result<T>) -> Result<T> {
        let pooled = self.readers.lock().expect("reader pool").pop();
        let mut client = match pooled {
            Some(c) if !c.is_closed() => c,
            _ => Client::connect(&self.url, NoTls).map_err(storage)?,
        };
        let result = f(&mut client);
        self.readers.lock().expect("reader pool").push(client);
        result
    }
}

fn prepare_schema(client: &mut Client, location: &str) -> Result<()> {
    let mut tx = client.transaction().map_err(storage)?;
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

/// The append's statements on PostgreSQL, each prepared once per connection ([`Statements`]).
struct PgAppend<'a, 't> {
    tx: &'a mut Transaction<'t>,
    st: &'a mut Statements,
}

impl PgAppend<'_, '_> {
    fn execute(&mut self, sql: &'static str, params: Params<'_>) -> Result<()> {
        self.st
            .execute(self.tx, sql, params)
            .map(drop)
            .map_err(storage)
    }

    fn status(&mut self, sql: &'static str, params: Params<'_>) -> Result<Option<Status>> {
        let row = self.st.query_opt(self.tx, sql, params).map_err(storage)?;
        row.map(|r| status_of(&r.text(0)?)).transpose()
    }

    /// An update of a run's row that returns its job.
    fn update_run(&mut self, sql: &'static str, params: Params<'_>) -> Result<String> {
        self.st
            .query_one(self.tx, sql, params)
            .map_err(storage)?
            .text(0)
    }
}

impl AppendTx for PgAppend<'_, '_> {
    fn build_request_status(&mut self, id: &str) -> Result<Option<Status>> {
        self.status(
            "SELECT status FROM build_requests WHERE build_request_id = $1",
            &[&id],
        )
    }

    fn job_run_status(&mut self, id: &str) -> Result<Option<Status>> {
        self.status("SELECT status FROM job_runs WHERE job_run_id = $1", &[&id])
    }

    fn want_status(&mut self, id: &str) -> Result<Option<Status>> {
        self.status("SELECT status FROM wants WHERE want_id = $1", &[&id])
    }

    fn request_partition_status(&mut self, br: &str, r: &str) -> Result<Option<Status>> {
        self.status(
            "SELECT status FROM request_partitions WHERE build_request_id = $1 AND partition_ref = $2",
            &[&br, &r],
        )
    }

    fn partition_state(&mut self, r: &str) -> Result<Option<PartitionState>> {
        let row = self
            .st
            .query_opt(
                self.tx,
                "SELECT status, job_run_id, coalesce(job, '') FROM partitions WHERE partition_ref = $1",
                &[&r],
            )
            .map_err(storage)?;
        row.map(|row| {
            Ok(PartitionState {
                status: status_of(&row.text(0)?)?,
                run: row.opt_text(1)?,
                job: row.text(2)?,
            })
        })
        .transpose()
    }

    fn insert_event(&mut self, e: &Event) -> Result<i64> {
        let data = (!e.data.is_empty()).then(|| to_json(&e.data));
        self.st
            .query_one(
                self.tx,
                "INSERT INTO events (event_id, timestamp, build_request_id, kind, status, partition_ref,
                                     job, job_run_id, delegated_to, message, data)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING idx",
                &[
                    &e.event_id,
                    &e.timestamp,
                    &e.build_request_id,
                    &e.kind.as_str(),
                    &e.status.as_str(),
                    &e.partition_ref,
                    &e.job,
                    &e.job_run_id,
                    &e.delegated_to,
                    &e.message,
                    &data,
                ],
            )
            .map_err(storage)?
            .int(0)
    }

    fn insert_build_request(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        let (all, count, head) = requested_columns(&d.requested);
        self.execute(
            "INSERT INTO build_requests (build_request_id, status, requested, analyze_only,
                                         owner, message, created_at, updated_at,
                                         requested_count, requested_head)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $7, $8, $9)",
            &[
                &e.build_request_id,
                &e.status.as_str(),
                &all,
                &d.analyze_only,
                &d.owner,
                &e.message,
                &e.timestamp,
                &count,
                &head,
            ],
        )
    }

    fn update_build_request(&mut self, e: &Event) -> Result<()> {
        self.execute(
            "UPDATE build_requests SET status = $2, updated_at = $3, message = coalesce($4, message)
             WHERE build_request_id = $1",
            &[
                &e.build_request_id,
                &e.status.as_str(),
                &e.timestamp,
                &e.message,
            ],
        )
    }

    fn insert_job_run(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        self.execute(
            "INSERT INTO job_runs (job_run_id, job, build_request_id, status, outputs, inputs, args, env,
                                   scheduled_at, message, relies_on, job_version)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                &e.job_run_id,
                &e.job,
                &e.build_request_id,
                &e.status.as_str(),
                &to_json(&d.outputs),
                &to_json(&d.inputs),
                &to_json(&d.args),
                &to_json(&d.env),
                &e.timestamp,
                &e.message,
                &d.relies_on,
                &d.job_version,
            ],
        )
    }

    fn start_job_run(&mut self, e: &Event) -> Result<String> {
        let d = &e.data;
        self.update_run(
            "UPDATE job_runs SET status = $2, started_at = $3, pid = $4, host = $5, owner = $6,
                    input_versions = $7, log_path = $8
             WHERE job_run_id = $1 RETURNING job",
            &[
                &e.job_run_id,
                &e.status.as_str(),
                &e.timestamp,
                &d.pid.map(i64::from),
                &d.host,
                &d.owner,
                &to_json(&d.input_versions),
                &d.log_path,
            ],
        )
    }

    fn end_job_run(&mut self, e: &Event) -> Result<String> {
        let d = &e.data;
        self.update_run(
            "UPDATE job_runs SET status = $2, ended_at = $3, exit_code = $4, message = coalesce($5, message),
                    started_at = CASE WHEN $6 THEN NULL ELSE coalesce($7, started_at) END
             WHERE job_run_id = $1 RETURNING job",
            &[
                &e.job_run_id,
                &e.status.as_str(),
                &e.timestamp,
                &d.exit_code,
                &e.message,
                &d.not_started,
                &d.started_at,
            ],
        )
    }

    fn upsert_request_partition(&mut self, br: &str, e: &Event) -> Result<()> {
        self.execute(
            "INSERT INTO request_partitions (build_request_id, partition_ref, status, job_run_id, updated_at)
             VALUES ($1, $2, $3, $4, $5)
             ON CONFLICT (build_request_id, partition_ref) DO UPDATE SET
                status = excluded.status,
                job_run_id = coalesce(excluded.job_run_id, request_partitions.job_run_id),
                updated_at = excluded.updated_at",
            &[
                &br,
                &e.partition_ref,
                &e.status.as_str(),
                &e.job_run_id,
                &e.timestamp,
            ],
        )
    }

    fn upsert_partition(&mut self, e: &Event, status: Status, run: Option<&str>) -> Result<()> {
        self.execute(
            "INSERT INTO partitions (partition_ref, status, job_run_id, build_request_id, job,
                                     data_version, message, updated_at, prev_status)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, CASE WHEN $2 = 'building' THEN '' END)
             ON CONFLICT (partition_ref) DO UPDATE SET
                -- A claim keeps what it replaces, for a release (see v3.sql).
                prev_status = CASE WHEN excluded.status <> 'building' THEN NULL
                                   WHEN partitions.status = 'building' THEN partitions.prev_status
                                   ELSE partitions.status END,
                prev_job_run_id = CASE WHEN partitions.status = 'building' THEN partitions.prev_job_run_id
                                       ELSE partitions.job_run_id END,
                prev_build_request_id = CASE WHEN partitions.status = 'building' THEN partitions.prev_build_request_id
                                             ELSE partitions.build_request_id END,
                prev_message = CASE WHEN partitions.status = 'building' THEN partitions.prev_message
                                    ELSE partitions.message END,
                prev_updated_at = CASE WHEN partitions.status = 'building' THEN partitions.prev_updated_at
                                       ELSE partitions.updated_at END,
                status = excluded.status,
                job_run_id = excluded.job_run_id,
                build_request_id = coalesce(excluded.build_request_id, partitions.build_request_id),
                job = coalesce(excluded.job, partitions.job),
                data_version = CASE WHEN excluded.status IN ('available', 'sealed')
                                    THEN excluded.data_version ELSE partitions.data_version END,
                message = excluded.message,
                updated_at = excluded.updated_at",
            &[
                &e.partition_ref,
                &status.as_str(),
                &run,
                &e.build_request_id,
                &e.job,
                &e.data.data_version,
                &e.message,
                &e.timestamp,
            ],
        )
    }

    fn claimed_partition(&mut self, r: &str) -> Result<(Option<String>, String)> {
        let row = self
            .st
            .query_one(
                self.tx,
                "SELECT prev_status, coalesce(job, '') FROM partitions WHERE partition_ref = $1",
                &[&r],
            )
            .map_err(storage)?;
        Ok((row.opt_text(0)?, row.text(1)?))
    }

    fn restore_partition(&mut self, r: &str) -> Result<()> {
        self.execute(
            "UPDATE partitions SET status = prev_status, job_run_id = prev_job_run_id,
                    build_request_id = prev_build_request_id, message = prev_message,
                    updated_at = prev_updated_at, prev_status = NULL, prev_job_run_id = NULL,
                    prev_build_request_id = NULL, prev_message = NULL, prev_updated_at = NULL
             WHERE partition_ref = $1",
            &[&r],
        )
    }

    fn delete_partition(&mut self, r: &str) -> Result<()> {
        self.execute("DELETE FROM partitions WHERE partition_ref = $1", &[&r])
    }

    fn insert_want(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        self.execute(
            "INSERT INTO wants (want_id, status, refs, created_at, expires_at, sla_seconds,
                                recurring, message, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $4)",
            &[
                &d.want_id,
                &e.status.as_str(),
                &to_json(&d.requested),
                &e.timestamp,
                &d.expires_at,
                &d.sla_seconds.map(|s| s as i64),
                &d.recurring,
                &e.message,
            ],
        )
    }

    fn count_sla_miss(&mut self, e: &Event) -> Result<()> {
        self.execute(
            "UPDATE wants SET sla_missed = sla_missed + 1, updated_at = $2 WHERE want_id = $1",
            &[&e.data.want_id, &e.timestamp],
        )
    }

    fn update_want(&mut self, e: &Event) -> Result<()> {
        let d = &e.data;
        self.execute(
            "UPDATE wants SET status = $2, waiting_for = $3, message = $4,
                    build_request_id = coalesce($5, build_request_id), updated_at = $6
             WHERE want_id = $1",
            &[
                &d.want_id,
                &e.status.as_str(),
                &e.partition_ref,
                &e.message,
                &d.upstream,
                &e.timestamp,
            ],
        )
    }

    /// All of a batch's changes in one statement: each is a round trip otherwise.
    fn add_run_counts(&mut self, changes: &[RunCount<'_>]) -> Result<()> {
        let jobs: Vec<&str> = changes.iter().map(|c| c.job).collect();
        let statuses: Vec<&str> = changes.iter().map(|c| c.status.as_str()).collect();
        let ns: Vec<i64> = changes.iter().map(|c| c.n).collect();
        let lasts: Vec<Option<i64>> = changes.iter().map(|c| c.last_scheduled_at).collect();
        // `greatest` ignores NULLs: a change without a `scheduled_at` keeps the row's.
        self.execute(
            "INSERT INTO job_counts (job, status, n, last_scheduled_at)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
             ON CONFLICT (job, status) DO UPDATE SET n = job_counts.n + excluded.n,
                last_scheduled_at = greatest(job_counts.last_scheduled_at, excluded.last_scheduled_at)",
            &[&jobs, &statuses, &ns, &lasts],
        )
    }

    fn add_partition_counts(&mut self, changes: &[PartitionCount<'_>]) -> Result<()> {
        let jobs: Vec<&str> = changes.iter().map(|c| c.job).collect();
        let statuses: Vec<&str> = changes.iter().map(|c| c.status.as_str()).collect();
        let ns: Vec<i64> = changes.iter().map(|c| c.n).collect();
        self.execute(
            "INSERT INTO partition_counts (job, status, n)
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])
             ON CONFLICT (job, status) DO UPDATE SET n = partition_counts.n + excluded.n",
            &[&jobs, &statuses, &ns],
        )
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
        let mut guard = self.writer.lock().expect("writer lock");
        let Writer {
            client,
            caches,
            statements,
            seen_appends,
        } = &mut *guard;
        let result = (|| -> Result<i64> {
            let mut tx = client.transaction().map_err(storage)?;
            tx.execute("SELECT pg_advisory_xact_lock($1)", &[&APPEND_LOCK])
                .map_err(storage)?;
            let appends: i64 = tx
                .query_one(
                    "UPDATE meta SET value = (value::bigint + 1)::text WHERE key = 'appends'
                     RETURNING value::bigint - 1",
                    &[],
                )
                .map_err(storage)?
                .get(0);
            if *seen_appends != Some(appends) || caches.len() > StateCache::MAX_ENTRIES {
                *caches = StateCache::default();
            }
            append_batch(
                &mut PgAppend {
                    tx: &mut tx,
                    st: statements,
                },
                caches,
                &mut events,
            )?;
            tx.commit().map_err(storage)?;
            Ok(appends + 1)
        })();
        match result {
            Ok(appends) => {
                *seen_appends = Some(appends);
                Ok(events)
            }
            Err(e) => {
                // The cache holds states of a batch that was rolled back.
                *caches = StateCache::default();
                *seen_appends = None;
                Err(e)
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
        self.read(|c| {
            let rows = c
                .query(
                    &format!(
                        "SELECT {LISTED_BUILD_COLUMNS} FROM build_requests
                         WHERE ($1::text IS NULL OR status = $1)
                           AND (NOT $3 OR (status IN ('received', 'planning', 'analysis_completed', 'executing')
                                           AND NOT analyze_only))
                         ORDER BY created_at DESC, build_request_id LIMIT $2"
                    ),
                    &[&status, &(q.limit as i64), &q.unfinished],
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
        let q = runs_query(q, '$', text);
        self.read(|c| {
            collect(
                c.query(&q.sql, &params(&q.values)).map_err(storage)?,
                run_from_row,
            )
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
