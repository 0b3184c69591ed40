//! User SQL on the SQLite log: one read-only statement on a connection of its own, with an
//! authorizer, a row cap, bounded values and a deadline.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use rusqlite::{Connection, OpenFlags};

use super::open::BUSY_TIMEOUT;
use super::{storage, SqliteStore};
use crate::store::*;

/// A user query's page cache: small, and its sorts and temporary tables spill to files, so one
/// query holds little of the log in memory however much it reads.
const SQL_CACHE_KIB: i64 = 2 * 1024;

/// The longest string or blob a user query may read or build on the way to its result (which
/// holds shorter ones, `SqlLimits::max_value_len`): a stored value of a run reading ~250,000
/// partitions, while a query building values out of nothing stays bounded per value.
const SQL_WORKING_VALUE_LEN: usize = 16 << 20;

/// The longest user query (SQLite's own limit is 1 GB of text to parse).
const SQL_MAX_QUERY_LEN: usize = 100_000;

pub(super) fn sql(store: &SqliteStore, query: &str, limits: SqlLimits) -> Result<SqlResult> {
    if query.len() > SQL_MAX_QUERY_LEN {
        return Err(LogError::Sql(format!(
            "the query is {} bytes long; at most {SQL_MAX_QUERY_LEN} are allowed",
            query.len()
        )));
    }
    let (mut conn, denied) = store.sql_connection(&limits)?;
    let deadline = Instant::now() + limits.timeout;
    conn.progress_handler(10_000, Some(move || Instant::now() > deadline))
        .map_err(storage)?;
    let _disarm = arm_deadline(&conn, limits.timeout);
    let refused = |e: rusqlite::Error| sql_refusal(e, &limits, denied.load(Ordering::Relaxed));
    // A batch prepares one statement at a time: a second one (even one the authorizer refuses)
    // means the query holds several.
    let mut batch = rusqlite::Batch::new(&conn, query);
    let mut stmt = match batch.next().map_err(refused)? {
        Some(stmt) => stmt,
        None => return Err(LogError::Sql("the query is empty".to_string())),
    };
    if !matches!(batch.next(), Ok(None)) {
        return Err(LogError::Sql(
            "only one statement per query is allowed".to_string(),
        ));
    }
    if !stmt.readonly() {
        return Err(LogError::Sql(
            "the query is refused: only reads are allowed on the event log".to_string(),
        ));
    }
    let columns: Vec<String> = stmt.column_names().map(|c| c.to_string()).collect();
    let width = columns.len();
    let mut size = ResultSize::new(&columns, &limits);
    let mut rows = Vec::new();
    let mut truncated = false;
    let mut cursor = stmt.query([]).map_err(refused)?;
    while let Some(row) = cursor.next().map_err(refused)? {
        if rows.len() == limits.max_rows {
            truncated = true;
            break;
        }
        let mut values = Vec::with_capacity(width);
        for i in 0..width {
            use rusqlite::types::ValueRef;
            let value = match row.get_ref(i).map_err(refused)? {
                ValueRef::Null => serde_json::Value::Null,
                ValueRef::Integer(n) => n.into(),
                ValueRef::Real(f) => serde_json::Number::from_f64(f)
                    .map_or(serde_json::Value::Null, serde_json::Value::Number),
                ValueRef::Text(t) if t.len() > limits.max_value_len => {
                    return Err(limits.value_too_long())
                }
                ValueRef::Text(t) => String::from_utf8_lossy(t).into_owned().into(),
                ValueRef::Blob(b) => format!("<{} bytes>", b.len()).into(),
            };
            size.add(&value)?;
            values.push(value);
        }
        rows.push(values);
    }
    Ok(SqlResult {
        columns,
        rows,
        truncated,
    })
}

impl SqliteStore {
    /// A connection for user SQL: read-only at the file level, `query_only`, and an authorizer
    /// that refuses anything reaching outside the log (ATTACH, PRAGMA, extension loading). No
    /// string or blob may grow past `max_value_len`: SQLite checks as it builds one, inside a
    /// function call, where neither the progress handler nor an interrupt can stop it.
    ///
    /// The flag returned is raised whenever the authorizer refuses something: SQLite reports a
    /// refused function as a plain `SQLITE_ERROR`, with no code of its own, so the flag is how
    /// [`sql_refusal`] tells a refusal from any other failure.
    fn sql_connection(&self, limits: &SqlLimits) -> Result<(Connection, Arc<AtomicBool>)> {
        use rusqlite::limits::Limit;
        let mut conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(|e| self.classify(e))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(storage)?;
        // Pragmas before the authorizer, which refuses them.
        conn.pragma_update(None, "query_only", true)
            .map_err(storage)?;
        conn.pragma_update(None, "cache_size", -SQL_CACHE_KIB)
            .map_err(storage)?;
        conn.pragma_update(None, "temp_store", "FILE")
            .map_err(storage)?;
        // What the query may read and build on the way is larger than what it may return: the
        // log holds values over 1 MiB (the inputs of a run reading 80,000 partitions), and
        // `length` or `substr` of one must work. Returned values are held to `max_value_len`
        // as they are read out.
        let value_len = limits.max_value_len.max(SQL_WORKING_VALUE_LEN);
        let value_len = i32::try_from(value_len).unwrap_or(i32::MAX);
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, value_len)
            .map_err(storage)?;
        conn.set_limit(Limit::SQLITE_LIMIT_SQL_LENGTH, SQL_MAX_QUERY_LEN as i32)
            .map_err(storage)?;
        conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)
            .map_err(storage)?;
        let denied = Arc::new(AtomicBool::new(false));
        let noted = denied.clone();
        let decide = |ctx: AuthContext<'_>| match ctx.action {
            AuthAction::Attach { .. }
            | AuthAction::Detach { .. }
            | AuthAction::Pragma { .. }
            | AuthAction::Insert { .. }
            | AuthAction::Update { .. }
            | AuthAction::Delete { .. }
            | AuthAction::CreateTable { .. }
            | AuthAction::CreateTempTable { .. }
            | AuthAction::CreateView { .. }
            | AuthAction::CreateTempView { .. }
            | AuthAction::DropTable { .. }
            | AuthAction::AlterTable { .. }
            | AuthAction::Transaction { .. }
            | AuthAction::Savepoint { .. } => Authorization::Deny,
            AuthAction::Function { function_name }
                if function_name.eq_ignore_ascii_case("load_extension") =>
            {
                Authorization::Deny
            }
            _ => Authorization::Allow,
        };
        conn.authorizer(Some(move |ctx: AuthContext<'_>| {
            let answer = decide(ctx);
            if answer == Authorization::Deny {
                noted.store(true, Ordering::Relaxed);
            }
            answer
        }))
        .map_err(storage)?;
        Ok((conn, denied))
    }
}

/// Interrupts `conn` once `timeout` has passed, unless the returned sender is dropped first: a
/// backstop to the progress handler, should a statement go long between two of its calls.
fn arm_deadline(conn: &Connection, timeout: Duration) -> Option<std::sync::mpsc::Sender<()>> {
    let handle = conn.get_interrupt_handle();
    let (disarm, armed) = std::sync::mpsc::channel::<()>();
    std::thread::Builder::new()
        .name("sql-deadline".into())
        .spawn(move || {
            if armed.recv_timeout(timeout) == Err(std::sync::mpsc::RecvTimeoutError::Timeout) {
                handle.interrupt();
            }
        })
        .ok()?;
    Some(disarm)
}

/// What a user query's failure tells its author.
/// `denied`: the connection's authorizer refused something while the query was prepared.
fn sql_refusal(e: rusqlite::Error, limits: &SqlLimits, denied: bool) -> LogError {
    let read_only = || {
        LogError::Sql(
            "the query is refused: only reads are allowed (no writes, ATTACH, PRAGMA or extensions)"
                .to_string(),
        )
    };
    match e.sqlite_error_code() {
        _ if matches!(e, rusqlite::Error::MultipleStatement) => {
            LogError::Sql("only one statement per query is allowed".to_string())
        }
        // A refused function fails its statement with a plain SQLITE_ERROR: the authorizer's
        // own note tells it apart.
        _ if denied => read_only(),
        Some(rusqlite::ErrorCode::AuthorizationForStatementDenied) => read_only(),
        Some(rusqlite::ErrorCode::OperationInterrupted) => LogError::Sql(format!(
            "the query ran longer than {} s and was stopped",
            limits.timeout.as_secs_f64()
        )),
        // The query is no longer than SQLITE_LIMIT_SQL_LENGTH (checked first): a string or
        // blob outgrew SQLITE_LIMIT_LENGTH.
        Some(rusqlite::ErrorCode::TooBig) => limits.value_too_long(),
        _ => LogError::Sql(format!("the query failed: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The interrupt armed beside the progress handler stops a statement on its own.
    #[test]
    fn the_deadline_interrupts_a_user_query_by_itself() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let (conn, _denied) = store.sql_connection(&SqlLimits::default()).unwrap();
        let _disarm = arm_deadline(&conn, Duration::from_millis(200));
        let started = Instant::now();
        let endless = "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) \
                       SELECT count(*) FROM n";
        let err = conn
            .query_row(endless, [], |r| r.get::<_, i64>(0))
            .unwrap_err();
        assert_eq!(
            err.sqlite_error_code(),
            Some(rusqlite::ErrorCode::OperationInterrupted)
        );
        assert!(started.elapsed() < Duration::from_secs(2));
    }
}
