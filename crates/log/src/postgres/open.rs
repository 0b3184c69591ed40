//! Opening a PostgreSQL log: how every connection is made (timeouts, keepalives, the writer's
//! planner settings), and the schema's numbered migrations up to [`SCHEMA_VERSION`].

use std::sync::Mutex;
use std::time::Duration;

use postgres::{Client, NoTls};

use super::read::Reader;
use super::{describe, storage, PostgresStore, Writer, APPEND_LOCK};
use crate::store::*;

/// The schema, as numbered migrations (see the SQLite store).
const MIGRATIONS: &[&str] = &[
    include_str!("v1.sql"),
    include_str!("v2.sql"),
    include_str!("v3.sql"),
    include_str!("v4.sql"),
    include_str!("v5.sql"),
    include_str!("v6.sql"),
    include_str!("v7.sql"),
    include_str!("v8.sql"),
    include_str!("v9.sql"),
    include_str!("v10.sql"),
    include_str!("v11.sql"),
    include_str!("v12.sql"),
    include_str!("v13.sql"),
    include_str!("v14.sql"),
    include_str!("v15.sql"),
    include_str!("v16.sql"),
    include_str!("v17.sql"),
];

/// The schema version this build writes, and the newest it opens.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// How long a connection attempt may take before it counts as failed.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Data sent but not acknowledged for this long ends the connection (a cut network is noticed in
/// seconds, not at TCP's 15 minutes of retransmissions).
const TCP_USER_TIMEOUT: Duration = Duration::from_secs(10);

/// An idle connection is probed after this long, then every `KEEPALIVE_INTERVAL`, and dropped
/// after `KEEPALIVE_RETRIES` probes unanswered.
const KEEPALIVE_IDLE: Duration = Duration::from_secs(5);
const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(2);
const KEEPALIVE_RETRIES: u32 = 3;

/// Any one statement of the log's own (user SQL sets its own, shorter, limit; migrations none).
const STATEMENT_TIMEOUT: Duration = Duration::from_secs(60);

/// The writer's session: its statements are all lookups and writes by key, over a batch's keys
/// (`= ANY`, `unnest`). Each is planned once per connection (a custom plan of the batch's read
/// costs more than running it), and on the tables' keys: the planner would scan a table of a few
/// thousand rows rather than look its keys up, at a cost to every append of a young log.
pub(super) const WRITER_SETTINGS: &str =
    "-c plan_cache_mode=force_generic_plan -c enable_seqscan=off";

/// The URL's settings, with this log's timeouts where the URL sets none.
fn connection_config(url: &str) -> std::result::Result<tokio_postgres::Config, postgres::Error> {
    let mut c: tokio_postgres::Config = url.parse()?;
    let given = |key: &str| url.contains(&format!("{key}="));
    if c.get_connect_timeout().is_none() {
        c.connect_timeout(CONNECT_TIMEOUT);
    }
    if c.get_tcp_user_timeout().is_none() {
        c.tcp_user_timeout(TCP_USER_TIMEOUT);
    }
    if !given("keepalives_idle") {
        c.keepalives_idle(KEEPALIVE_IDLE);
    }
    if c.get_keepalives_interval().is_none() {
        c.keepalives_interval(KEEPALIVE_INTERVAL);
    }
    if c.get_keepalives_retries().is_none() {
        c.keepalives_retries(KEEPALIVE_RETRIES);
    }
    let options = c.get_options().unwrap_or_default().to_string();
    if !options.contains("statement_timeout") {
        let timeout = format!("-c statement_timeout={}", STATEMENT_TIMEOUT.as_millis());
        c.options(format!("{options} {timeout}").trim());
    }
    Ok(c)
}

impl PostgresStore {
    /// Opens the log at `url`; user SQL runs as the connection's own role.
    pub fn open(url: &str) -> Result<PostgresStore> {
        Self::open_with(url, None)
    }

    /// Opens the log at `url`; user SQL runs as `sql_role` when given (`DATABUILD_SQL_ROLE`,
    /// read by the binary), a least-privilege role for `databuild sql`.
    pub fn open_with(url: &str, sql_role: Option<String>) -> Result<PostgresStore> {
        Self::open_in_schema(url, sql_role, None)
    }

    /// [`PostgresStore::open_with`], the log's tables in `schema` (made if absent) rather than
    /// the connection's default: an environment's log ([`crate::environments`]).
    pub fn open_in_schema(
        url: &str,
        sql_role: Option<String>,
        schema: Option<&str>,
    ) -> Result<PostgresStore> {
        let location = crate::redact(url);
        let open_error = |message: String| LogError::Open {
            location: location.clone(),
            message,
        };
        let mut config = connection_config(url).map_err(|e| open_error(e.to_string()))?;
        if let Some(schema) = schema {
            // Names are checked (`environments::check_name`): letters, digits and `_` only.
            let options = config.get_options().unwrap_or_default();
            config.options(format!("{options} -c search_path={schema}").trim());
        }
        // The server's own refusal (a wrong password, no such database) is the request's to
        // fix; no answer at all (refused, unreachable, timed out) is the system's: exit 1.
        let mut client = postgres::Config::from(config.clone())
            .connect(NoTls)
            .map_err(|e| match e.as_db_error() {
                Some(_) => open_error(describe(&e)),
                None => LogError::Unavailable {
                    location: location.clone(),
                    waited_ms: 0,
                    message: describe(&e),
                },
            })?;
        if let Some(schema) = schema {
            client
                .batch_execute(&format!("CREATE SCHEMA IF NOT EXISTS {schema}"))
                .map_err(|e| open_error(describe(&e)))?;
        }
        prepare_schema(&mut client, &location)?;
        let mut writer_config = config.clone();
        let options = config.get_options().unwrap_or_default();
        writer_config.options(format!("{options} {WRITER_SETTINGS}"));
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| open_error(format!("cannot start its client's runtime: {e}")))?;
        Ok(PostgresStore {
            url: url.to_string(),
            config,
            writer_config,
            writer: Mutex::new(Writer {
                runtime,
                conn: None,
            }),
            readers: Mutex::new(vec![Reader::new(client)]),
            sql_role: sql_role.filter(|r| !r.is_empty()),
        })
    }
}

fn prepare_schema(client: &mut Client, location: &str) -> Result<()> {
    let mut tx = client.transaction().map_err(storage)?;
    // A migration may take long on a large log: no statement timeout.
    tx.batch_execute("SET LOCAL statement_timeout = 0")
        .map_err(storage)?;
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

/// The schemas of the database at `url` whose names start with `prefix` (`_` taken literally).
pub(crate) fn schemas_like(url: &str, prefix: &str) -> Result<Vec<String>> {
    let mut client = connect_once(url)?;
    let pattern = format!("{}%", prefix.replace('_', "\\_"));
    let rows = client
        .query(
            "SELECT schema_name::text FROM information_schema.schemata WHERE schema_name LIKE $1",
            &[&pattern],
        )
        .map_err(storage)?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

/// Drops `schema` and every table in it: an environment's log.
pub(crate) fn drop_schema(url: &str, schema: &str) -> Result<()> {
    connect_once(url)?
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .map_err(storage)
}

fn connect_once(url: &str) -> Result<Client> {
    let location = crate::redact(url);
    let config = connection_config(url).map_err(|e| LogError::Open {
        location: location.clone(),
        message: e.to_string(),
    })?;
    postgres::Config::from(config)
        .connect(NoTls)
        .map_err(|e| LogError::Unavailable {
            location,
            waited_ms: 0,
            message: describe(&e),
        })
}
