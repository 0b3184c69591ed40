//! The PostgreSQL event log: one log shared by several DataBuild processes on several machines.
//!
//! It keeps the SQLite log's semantics exactly: the same tables, projections written in the
//! events' transaction, the same validation. Appends from all processes are serialized by a
//! transaction-scoped advisory lock, so each batch validates against everything committed before
//! it; a partition claim is therefore atomic across processes. User SQL runs in a read-only
//! transaction with a statement timeout (and, if configured, as a least-privilege role).

use std::collections::BTreeMap;
use std::sync::Mutex;

use postgres::fallible_iterator::FallibleIterator;
use postgres::{Client, NoTls, Transaction};
use rustc_hash::FxHashMap;

use crate::cache::{cached, StateCache};
use crate::event::{Event, EventData, Kind, Status};
use crate::replay::global_effect;
use crate::state::{check, Current};
use crate::store::*;

/// The schema, as numbered migrations (see the SQLite store).
const MIGRATIONS: &[&str] = &[
    include_str!("postgres/v1.sql"),
    include_str!("postgres/v2.sql"),
    include_str!("postgres/v3.sql"),
];
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

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

fn status_of(s: &str) -> Result<Status> {
    Status::parse(s).ok_or_else(|| LogError::Storage(format!("unknown status `{s}` in the log")))
}

fn to_json<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_string(v).expect("serializes")
}

fn json_list(s: Option<String>) -> Vec<String> {
    s.and_then(|s| serde_json::from_str(&s).ok())
        .unwrap_or_default()
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
    pub fn open(url: &str) -> Result<PostgresStore> {
        let location = crate::redact(url);
        let mut client = Client::connect(url, NoTls).map_err(|e| LogError::Open {
            location: location.clone(),
            message: e.to_string(),
        })?;
        prepare_schema(&mut client, &location)?;
        let sql_role = std::env::var("DATABUILD_SQL_ROLE")
            .ok()
            .filter(|r| !r.is_empty());
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

fn opt_status(
    tx: &mut Transaction<'_>,
    st: &mut Statements,
    sql: &'static str,
    keys: &[&str],
) -> Result<Option<Status>> {
    let params: Vec<&(dyn postgres::types::ToSql + Sync)> = keys
        .iter()
        .map(|k| k as &(dyn postgres::types::ToSql + Sync))
        .collect();
    let row = st.query_opt(tx, sql, &params).map_err(storage)?;
    row.map(|r| status_of(r.get::<_, &str>(0))).transpose()
}

fn current(
    tx: &mut Transaction<'_>,
    st: &mut Statements,
    w: &mut StateCache,
    e: &Event,
) -> Result<Current> {
    let mut c = Current::default();
    let br = e.build_request_id.as_deref();
    match (
        e.kind,
        br,
        e.job_run_id.as_deref(),
        e.partition_ref.as_deref(),
    ) {
        (Kind::BuildRequest, Some(br), _, _) => {
            c.build_request = cached(&mut w.build_requests, br.to_string(), || {
                opt_status(
                    tx,
                    st,
                    "SELECT status FROM build_requests WHERE build_request_id = $1",
                    &[br],
                )
            })?;
        }
        (Kind::JobRun, _, Some(run), _) => {
            c.job_run = cached(&mut w.job_runs, run.to_string(), || {
                opt_status(
                    tx,
                    st,
                    "SELECT status FROM job_runs WHERE job_run_id = $1",
                    &[run],
                )
            })?;
        }
        (Kind::Want, _, _, _) if e.data.want_id.is_some() => {
            let id = e.data.want_id.as_deref().expect("checked");
            c.want = cached(&mut w.wants, id.to_string(), || {
                opt_status(tx, st, "SELECT status FROM wants WHERE want_id = $1", &[id])
            })?;
        }
        (Kind::Partition, br, _, Some(r)) => {
            if let Some(br) = br {
                let key = (br.to_string(), r.to_string());
                c.request_partition = cached(&mut w.request_partitions, key, || {
                    opt_status(
                        tx,
                        st,
                        "SELECT status FROM request_partitions WHERE build_request_id = $1 AND partition_ref = $2",
                        &[br, r],
                    )
                })?;
            }
            c.partition = cached(&mut w.partitions, r.to_string(), || {
                st.query_opt(
                    tx,
                    "SELECT status, job_run_id FROM partitions WHERE partition_ref = $1",
                    &[&r],
                )
                .map_err(storage)?
                .map(|row| Ok::<_, LogError>((status_of(row.get::<_, &str>(0))?, row.get(1))))
                .transpose()
            })?;
        }
        _ => {}
    }
    Ok(c)
}

fn insert_event(tx: &mut Transaction<'_>, st: &mut Statements, e: &Event) -> Result<i64> {
    let data = (!e.data.is_empty()).then(|| to_json(&e.data));
    let row = st
        .query_one(
            tx,
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
        .map_err(storage)?;
    Ok(row.get(0))
}

fn project(
    tx: &mut Transaction<'_>,
    st: &mut Statements,
    e: &Event,
    before: &Current,
) -> Result<()> {
    let status = e.status.as_str();
    let d = &e.data;
    let pid = d.pid.map(i64::from);
    match e.kind {
        Kind::BuildRequest if e.status == Status::Received => {
            st.execute(tx,
                "INSERT INTO build_requests (build_request_id, status, requested, analyze_only,
                                             owner, message, created_at, updated_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7, $7)",
                &[&e.build_request_id, &status, &to_json(&d.requested), &d.analyze_only, &d.owner, &e.message, &e.timestamp],
            )
        }
        Kind::BuildRequest => st.execute(tx,
            "UPDATE build_requests SET status = $2, updated_at = $3, message = coalesce($4, message)
             WHERE build_request_id = $1",
            &[&e.build_request_id, &status, &e.timestamp, &e.message],
        ),
        Kind::JobRun if before.job_run.is_none() => st.execute(tx,
            "INSERT INTO job_runs (job_run_id, job, build_request_id, status, outputs, inputs, args, env,
                                   scheduled_at, message, relies_on, job_version)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)",
            &[
                &e.job_run_id,
                &e.job,
                &e.build_request_id,
                &status,
                &to_json(&d.outputs),
                &to_json(&d.inputs),
                &to_json(&d.args),
                &to_json(&d.env),
                &e.timestamp,
                &e.message,
                &d.relies_on,
                &d.job_version,
            ],
        ),
        Kind::JobRun if e.status == Status::Running => st.execute(tx,
            "UPDATE job_runs SET status = $2, started_at = $3, pid = $4, host = $5, owner = $6,
                    input_versions = $7, log_path = $8
             WHERE job_run_id = $1",
            &[&e.job_run_id, &status, &e.timestamp, &pid, &d.host, &d.owner, &to_json(&d.input_versions), &d.log_path],
        ),
        Kind::JobRun => st.execute(tx,
            "UPDATE job_runs SET status = $2, ended_at = $3, exit_code = $4, message = coalesce($5, message),
                    started_at = CASE WHEN $6 THEN NULL ELSE started_at END
             WHERE job_run_id = $1",
            &[&e.job_run_id, &status, &e.timestamp, &d.exit_code, &e.message, &d.not_started],
        ),
        Kind::Partition => {
            if let Some(br) = &e.build_request_id {
                st.execute(tx,
                    "INSERT INTO request_partitions (build_request_id, partition_ref, status, job_run_id, updated_at)
                     VALUES ($1, $2, $3, $4, $5)
                     ON CONFLICT (build_request_id, partition_ref) DO UPDATE SET
                        status = excluded.status,
                        job_run_id = coalesce(excluded.job_run_id, request_partitions.job_run_id),
                        updated_at = excluded.updated_at",
                    &[br, &e.partition_ref, &status, &e.job_run_id, &e.timestamp],
                )
                .map_err(storage)?;
            }
            if crate::replay::is_release(e) {
                // Back to what the claim replaced (see v3.sql), or away if it replaced nothing.
                st.execute(tx,
                    "DELETE FROM partitions WHERE partition_ref = $1 AND coalesce(prev_status, '') = ''",
                    &[&e.partition_ref],
                )
                .map_err(storage)?;
                st.execute(tx,
                    "UPDATE partitions SET status = prev_status, job_run_id = prev_job_run_id,
                            build_request_id = prev_build_request_id, message = prev_message,
                            updated_at = prev_updated_at, prev_status = NULL, prev_job_run_id = NULL,
                            prev_build_request_id = NULL, prev_message = NULL, prev_updated_at = NULL
                     WHERE partition_ref = $1",
                    &[&e.partition_ref],
                )
                .map_err(storage)?;
                return Ok(());
            }
            match global_effect(e, before.partition.as_ref()) {
                Some((global, run)) => st.execute(tx,
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
                    &[&e.partition_ref, &global.as_str(), &run, &e.build_request_id, &e.job, &d.data_version, &e.message, &e.timestamp],
                ),
                None => Ok(0),
            }
        }
        Kind::Want if e.status == Status::Requested => st.execute(tx,
            "INSERT INTO wants (want_id, status, refs, created_at, expires_at, sla_seconds,
                                recurring, message, updated_at)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $4)",
            &[&d.want_id, &status, &to_json(&d.requested), &e.timestamp, &d.expires_at,
              &d.sla_seconds.map(|s| s as i64), &d.recurring, &e.message],
        ),
        Kind::Want if e.status == Status::SlaMissed => st.execute(tx,
            "UPDATE wants SET sla_missed = sla_missed + 1, updated_at = $2 WHERE want_id = $1",
            &[&d.want_id, &e.timestamp],
        ),
        Kind::Want => st.execute(tx,
            "UPDATE wants SET status = $2, waiting_for = $3, message = $4,
                    build_request_id = coalesce($5, build_request_id), updated_at = $6
             WHERE want_id = $1",
            &[&d.want_id, &status, &e.partition_ref, &e.message, &d.upstream, &e.timestamp],
        ),
        Kind::Delegation | Kind::Alias => Ok(0),
    }
    .map_err(storage)?;
    Ok(())
}

/// A `WHERE` clause of the filters actually given (as in the SQLite store): conditions on absent
/// parameters would keep the planner from the indexes behind them.
#[derive(Default)]
struct Filters {
    clause: String,
    values: Vec<Box<dyn postgres::types::ToSql + Sync>>,
}

impl Filters {
    fn raw(&mut self, condition: &str) {
        let joiner = if self.clause.is_empty() {
            " WHERE "
        } else {
            " AND "
        };
        self.clause.push_str(joiner);
        self.clause.push_str(condition);
    }

    fn add(&mut self, column_op: &str, value: impl postgres::types::ToSql + Sync + 'static) {
        self.values.push(Box::new(value));
        let condition = format!("{column_op} ${}", self.values.len());
        self.raw(&condition);
    }

    fn params(&self) -> Vec<&(dyn postgres::types::ToSql + Sync)> {
        self.values.iter().map(|v| v.as_ref()).collect()
    }
}

const EVENT_COLUMNS: &str =
    "idx, event_id, timestamp, build_request_id, kind, status, partition_ref,
                             job, job_run_id, delegated_to, message, data";

fn event_from_row(row: &postgres::Row) -> Result<Event> {
    let kind: &str = row.get(4);
    let data: Option<String> = row.get(11);
    Ok(Event {
        idx: row.get(0),
        event_id: row.get(1),
        timestamp: row.get(2),
        build_request_id: row.get(3),
        kind: Kind::parse(kind)
            .ok_or_else(|| LogError::Storage(format!("unknown kind `{kind}`")))?,
        status: status_of(row.get(5))?,
        partition_ref: row.get(6),
        job: row.get(7),
        job_run_id: row.get(8),
        delegated_to: row.get(9),
        message: row.get(10),
        data: data
            .and_then(|d| serde_json::from_str::<EventData>(&d).ok())
            .unwrap_or_default(),
    })
}

const PARTITION_COLUMNS: &str =
    "partition_ref, status, job_run_id, build_request_id, job, data_version, message, updated_at";

fn partition_from_row(row: &postgres::Row) -> Result<PartitionRow> {
    Ok(PartitionRow {
        partition_ref: row.get(0),
        status: status_of(row.get(1))?,
        job_run_id: row.get(2),
        build_request_id: row.get(3),
        job: row.get(4),
        data_version: row.get(5),
        message: row.get(6),
        updated_at: row.get(7),
    })
}

const BUILD_COLUMNS: &str =
    "build_request_id, status, requested, analyze_only, message, created_at, updated_at, owner";

fn build_from_row(row: &postgres::Row) -> Result<BuildRequestRow> {
    Ok(BuildRequestRow {
        build_request_id: row.get(0),
        status: status_of(row.get(1))?,
        requested_partitions: json_list(row.get(2)),
        analyze_only: row.get(3),
        message: row.get(4),
        created_at: row.get(5),
        updated_at: row.get(6),
        owner: row.get(7),
    })
}

const RUN_COLUMNS: &str = "job_run_id, job, build_request_id, status, outputs, inputs, args, env,
                           scheduled_at, started_at, ended_at, exit_code, message, relies_on, pid, host,
                           owner, job_version, input_versions, log_path";

const WANT_COLUMNS: &str = "want_id, status, refs, created_at, expires_at, sla_seconds, recurring,
                            waiting_for, message, build_request_id, sla_missed, updated_at";

fn want_from_row(row: &postgres::Row) -> Result<WantRow> {
    Ok(WantRow {
        want_id: row.get(0),
        status: status_of(row.get(1))?,
        refs: json_list(row.get(2)),
        created_at: row.get(3),
        expires_at: row.get(4),
        sla_seconds: row.get::<_, Option<i64>>(5).map(|s| s as u64),
        recurring: row.get(6),
        waiting_for: row.get(7),
        message: row.get(8),
        build_request_id: row.get(9),
        sla_missed: row.get::<_, i64>(10) as u64,
        updated_at: row.get(11),
    })
}

fn run_from_row(row: &postgres::Row) -> Result<JobRunRow> {
    let env: Option<String> = row.get(7);
    let input_versions: Option<String> = row.get(18);
    Ok(JobRunRow {
        job_run_id: row.get(0),
        job: row.get(1),
        build_request_id: row.get(2),
        status: status_of(row.get(3))?,
        outputs: json_list(row.get(4)),
        inputs: json_list(row.get(5)),
        args: json_list(row.get(6)),
        env: env
            .and_then(|e| serde_json::from_str(&e).ok())
            .unwrap_or_default(),
        scheduled_at: row.get(8),
        started_at: row.get(9),
        ended_at: row.get(10),
        exit_code: row.get(11),
        message: row.get(12),
        relies_on: row.get(13),
        pid: row.get::<_, Option<i64>>(14).map(|p| p as u32),
        host: row.get(15),
        owner: row.get(16),
        job_version: row.get(17),
        input_versions: input_versions
            .and_then(|m| serde_json::from_str(&m).ok())
            .unwrap_or_default(),
        log_path: row.get(19),
    })
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
            for (position, e) in events.iter_mut().enumerate() {
                let before = current(&mut tx, statements, caches, e)?;
                check(e, &before).map_err(|refusal| LogError::Refused {
                    position,
                    kind: e.kind.to_string(),
                    status: e.status.to_string(),
                    reason: refusal.0,
                    refusal: refusal.1,
                })?;
                e.idx = insert_event(&mut tx, statements, e)?;
                project(&mut tx, statements, e, &before)?;
                caches.remember(e, &before);
            }
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
        let mut filters = Filters::default();
        filters.add("idx >", f.since.unwrap_or(0));
        for (column_op, value) in [
            ("build_request_id =", &f.build_request_id),
            ("partition_ref =", &f.partition_ref),
            ("job =", &f.job),
            ("job_run_id =", &f.job_run_id),
        ] {
            if let Some(v) = value {
                filters.add(column_op, v.clone());
            }
        }
        if let Some(k) = f.kind {
            // A literal (kinds are fixed names), so partial indexes on rare kinds serve it.
            filters.raw(&format!("kind = '{}'", k.as_str()));
        }
        if let Some(v) = f.from {
            filters.add("timestamp >=", v);
        }
        if let Some(v) = f.to {
            filters.add("timestamp <", v);
        }
        let limit = f.limit.map(|l| format!(" LIMIT {l}")).unwrap_or_default();
        let sql = format!(
            "SELECT {EVENT_COLUMNS} FROM events{} ORDER BY idx{limit}",
            filters.clause
        );
        self.read(|c| {
            collect(
                c.query(&sql, &filters.params()).map_err(storage)?,
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
        let mut filters = Filters::default();
        if let Some(p) = &q.pattern {
            filters.add("partition_ref ~", glob_to_regex(p));
        }
        if let Some(st) = q.status {
            filters.add("status =", st.as_str().to_string());
        }
        if let Some(a) = &q.after {
            filters.add("partition_ref COLLATE \"C\" >", a.clone());
        }
        let sql = format!(
            "SELECT {PARTITION_COLUMNS} FROM partitions{} ORDER BY partition_ref COLLATE \"C\" LIMIT {}",
            filters.clause, q.limit
        );
        self.read(|c| {
            collect(
                c.query(&sql, &filters.params()).map_err(storage)?,
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
            .map(|r| Ok((status_of(r.get(0))?, r.get::<_, i64>(1) as u64)))
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
            .map(|r| Ok((status_of(r.get(0))?, r.get::<_, i64>(1) as u64)))
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
                        "SELECT {BUILD_COLUMNS} FROM build_requests
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
            c.query(
                "SELECT partition_ref, status, job_run_id FROM request_partitions
                 WHERE build_request_id = $1 ORDER BY partition_ref COLLATE \"C\"",
                &[&id],
            )
            .map_err(storage)?
            .iter()
            .map(|r| {
                Ok(RequestPartitionRow {
                    partition_ref: r.get(0),
                    status: status_of(r.get(1))?,
                    job_run_id: r.get(2),
                })
            })
            .collect()
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
        let mut filters = Filters::default();
        if let Some(s) = status {
            filters.add("status =", s.as_str().to_string());
        }
        if active {
            filters.raw("status NOT IN ('expired', 'cancelled')");
        }
        let sql = format!(
            "SELECT {WANT_COLUMNS} FROM wants{} ORDER BY created_at DESC, want_id LIMIT {limit}",
            filters.clause
        );
        self.read(|c| {
            collect(
                c.query(&sql, &filters.params()).map_err(storage)?,
                want_from_row,
            )
        })
    }

    fn job_runs(&self, q: &RunQuery) -> Result<Vec<JobRunRow>> {
        let mut filters = Filters::default();
        if let Some(j) = &q.job {
            filters.add("job =", j.clone());
        }
        if let Some(b) = &q.build_request_id {
            filters.add("build_request_id =", b.clone());
        }
        if q.unfinished {
            filters.raw("status IN ('scheduled', 'running')");
        }
        let sql = format!(
            "SELECT {RUN_COLUMNS} FROM job_runs{} ORDER BY scheduled_at DESC, job_run_id LIMIT {}",
            filters.clause, q.limit
        );
        self.read(|c| {
            collect(
                c.query(&sql, &filters.params()).map_err(storage)?,
                run_from_row,
            )
        })
    }

    fn job_stats(&self, job: Option<&str>) -> Result<Vec<JobStats>> {
        self.read(|c| {
            let mut per_job: BTreeMap<String, (BTreeMap<Status, u64>, Option<i64>)> =
                BTreeMap::new();
            for r in c
                .query(
                    "SELECT job, status, n, last_scheduled_at FROM job_counts
                     WHERE ($1::text IS NULL OR job = $1)",
                    &[&job],
                )
                .map_err(storage)?
            {
                let entry = per_job.entry(r.get(0)).or_default();
                let n = r.get::<_, i64>(2);
                if n > 0 {
                    entry.0.insert(status_of(r.get(1))?, n as u64);
                }
                entry.1 = entry.1.max(r.get(3));
            }
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
        let now = crate::event::now_ns();
        self.read(|c| {
            c.execute(
                "INSERT INTO heartbeats (owner, at) VALUES ($1, $2) ON CONFLICT (owner) DO UPDATE SET at = excluded.at",
                &[&owner, &now],
            )
            .map_err(storage)?;
            Ok(())
        })
    }

    fn last_heartbeat(&self, owner: &str) -> Result<Option<i64>> {
        self.read(|c| {
            Ok(
                c.query_opt("SELECT at FROM heartbeats WHERE owner = $1", &[&owner])
                    .map_err(storage)?
                    .map(|r| r.get(0)),
            )
        })
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
        _ if message.contains("cannot insert multiple commands") => {
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
