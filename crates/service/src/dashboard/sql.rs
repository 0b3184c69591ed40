//! The SQL page: one read-only query over the event log, with examples to start from.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::layout::{error_page, layout};
use super::widgets::{cell_text, enc};
use super::Shared;

#[derive(Deserialize)]
pub struct SqlQuery {
    q: Option<String>,
}

const EXAMPLES: &[(&str, &str)] = &[
    ("Partitions by status", "SELECT status, count(*) AS partitions FROM partition_status GROUP BY status"),
    ("Slowest jobs", "SELECT job, count(*) AS runs, avg(duration_ms) AS mean_ms FROM job_run_durations WHERE status = 'completed' GROUP BY job ORDER BY mean_ms DESC"),
    ("Recent builds", "SELECT * FROM build_request_summary ORDER BY created DESC LIMIT 20"),
    ("Events per hour", "SELECT * FROM events_per_hour ORDER BY hour DESC LIMIT 48"),
];

pub(super) async fn sql_page(State(state): Shared, Query(q): Query<SqlQuery>) -> Response {
    let query = q.q.clone().unwrap_or_default();
    let result = if query.trim().is_empty() {
        None
    } else {
        Some(
            crate::ops::run_sql(&state, query.clone(), 1000)
                .await
                .map_err(error_page),
        )
    };
    let outcome = match result {
        None => html! {},
        Some(Ok(v)) => html! {
            p.muted { (v.rows.len()) " rows" @if v.truncated { " (cut at 1,000)" } }
            div.scroll { table #results {
                tr { @for c in &v.columns { th { (c) } } }
                @for row in &v.rows { tr { @for cell in row { td { (cell_text(cell)) } } } }
            } }
        },
        Some(Err(r)) => return r,
    };
    layout("SQL", html! {
        h1 { "SQL over the event log" }
        p.muted { "Read-only; one statement; stopped after 10 s; 1,000 rows at most. Tables and views: events, partitions, build_requests, request_partitions, job_runs, partition_status, job_run_durations, build_request_summary, events_per_hour, planned_runs." }
        form method="get" action="/sql" {
            textarea name="q" rows="4" { (query) }
            button type="submit" { "Run" }
        }
        p { "Examples: " @for (name, example) in EXAMPLES { a href={ "/sql?q=" (enc(example)) } { (name) } " · " } }
        (outcome)
    }).into_response()
}
