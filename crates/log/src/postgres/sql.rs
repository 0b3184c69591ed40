//! User SQL on the PostgreSQL log: one statement in a read-only transaction, with a deadline,
//! as the configured role, its values bounded on the server and its rows fetched a few at a time.

use postgres::fallible_iterator::FallibleIterator;

use super::{storage, PostgresStore};
use crate::store::*;

pub(super) fn sql(store: &PostgresStore, query: &str, limits: SqlLimits) -> Result<SqlResult> {
    let deadline = std::time::Instant::now() + limits.timeout;
    store.read(|c| {
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
        if let Some(role) = &store.sql_role {
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
            let want = i32::try_from(past_cap).map_or(SQL_FETCH_ROWS, |n| n.min(SQL_FETCH_ROWS));
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
