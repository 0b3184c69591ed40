//! The SQL page: one read-only query over the event log, with examples to start from.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use maud::html;
use serde::Deserialize;

use super::layout::{error_page, layout};
use super::widgets::{cell_text, enc};
use super::Shared;
use crate::environment::Env;

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

pub(super) async fn sql_page(
    State(state): Shared,
    env: Env,
    Query(q): Query<SqlQuery>,
) -> Response {
    let query = q.q.clone().unwrap_or_default();
    let result = if query.trim().is_empty() {
        None
    } else {
        Some(
            crate::ops::run_sql(&state, &env, query.clone(), 1000)
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

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::super::testing::{build, open_service, prod, text};
    use super::*;

    fn sql(
        service: &super::super::testing::Service,
        q: &str,
    ) -> impl std::future::Future<Output = Response> {
        let q = SqlQuery {
            q: Some(q.to_string()),
        };
        sql_page(State(service.state.clone()), prod(service), Query(q))
    }

    #[tokio::test]
    async fn every_example_runs() {
        let service = open_service();
        build(&service, &["daily/date=2026-01-02"]).await;
        for (name, example) in EXAMPLES {
            let response = sql(&service, example).await;
            assert_eq!(response.status(), StatusCode::OK, "{name}");
            assert!(
                text(response).await.contains(r#"<table id="results">"#),
                "{name}"
            );
        }
    }

    #[tokio::test]
    async fn a_result_is_a_table_of_its_cells_and_a_write_is_refused() {
        let service = open_service();
        let html = text(sql(&service, "SELECT 1 AS one, NULL AS empty, '<b>' AS tag").await).await;
        assert!(html.contains("<p class=\"muted\">1 rows</p>"));
        assert!(html.contains("<tr><th>one</th><th>empty</th><th>tag</th></tr><tr><td>1</td><td></td><td>&lt;b&gt;</td></tr>"));
        assert!(html.contains("<textarea name=\"q\" rows=\"4\">SELECT 1 AS one, NULL AS empty, '&lt;b&gt;' AS tag</textarea>"));

        let blank = text(sql(&service, "  ").await).await;
        assert!(!blank.contains("results"));
        assert!(blank.contains(&format!(
            "<a href=\"/sql?q={}\">Recent builds</a>",
            enc(EXAMPLES[2].1)
        )));

        let refused = sql(&service, "DELETE FROM events").await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    }
}
