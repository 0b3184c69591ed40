//! The list of builds: its filters (status, time range, a keyset cursor) checked into a store
//! query, a page of builds and a chart of their durations.

use axum::extract::Query;
use axum::response::{IntoResponse, Response};
use databuild_exec::answers::{self, span};
use databuild_log::{Kind, Status};
use maud::{html, PreEscaped};
use serde::Deserialize;

use super::layout::{error_page, layout, page};
use super::widgets::{badge, build_link, enc, partition_link, short};
use crate::environment::Env;
use crate::error::AppError;
use crate::svg;

#[derive(Deserialize, Default)]
pub struct BuildsQuery {
    status: Option<String>,
    from: Option<String>,
    to: Option<String>,
    /// The cursor of the page: `created_at_ns.build_request_id` of the last build before it.
    after: Option<String>,
    limit: Option<usize>,
    all: Option<String>,
}

/// Why a builds page's filters cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BuildsFilterError {
    #[error("unknown build status `{0}`; use received, planning, executing, completed, failed, refused or cancelled")]
    Status(String),
    #[error("`{field}` = `{text}` is not a time: write 2026-12-01, 2026-12-01T10:00 or RFC 3339")]
    Time { field: &'static str, text: String },
    #[error("`after` = `{0}` is not a page cursor (follow the page's links)")]
    Cursor(String),
    #[error("`limit` = {0} is not between 1 and {max}", max = BUILDS_PAGE_MAX)]
    Limit(usize),
}

impl From<BuildsFilterError> for AppError {
    fn from(e: BuildsFilterError) -> Self {
        AppError::bad_request(e.to_string())
    }
}

/// Builds a page shows by default, and at most.
const BUILDS_PAGE: usize = 50;
const BUILDS_PAGE_MAX: usize = 500;

/// A time a user typed, as ns since the epoch: a date (its midnight, UTC), a `datetime-local`
/// value (UTC) or RFC 3339.
fn typed_time(field: &'static str, text: &str) -> Result<i64, BuildsFilterError> {
    use chrono::{NaiveDate, NaiveDateTime};
    let bad = || BuildsFilterError::Time {
        field,
        text: text.to_string(),
    };
    let at = if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        t.with_timezone(&chrono::Utc)
    } else if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M") {
        t.and_utc()
    } else if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
        t.and_utc()
    } else if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        d.and_hms_opt(0, 0, 0).ok_or_else(bad)?.and_utc()
    } else {
        return Err(bad());
    };
    at.timestamp_nanos_opt().ok_or_else(bad)
}

/// The store's query of a builds page's filters.
fn builds_query(q: &BuildsQuery) -> Result<databuild_log::BuildQuery, BuildsFilterError> {
    let given = |v: &Option<String>| v.clone().filter(|t| !t.trim().is_empty());
    let status = given(&q.status)
        .map(|t| {
            Status::parse(&t)
                .filter(|s| {
                    matches!(
                        s,
                        Status::Received
                            | Status::Planning
                            | Status::AnalysisCompleted
                            | Status::Executing
                            | Status::Completed
                            | Status::Refused
                            | Status::Failed
                            | Status::Cancelled
                    )
                })
                .ok_or(BuildsFilterError::Status(t))
        })
        .transpose()?;
    let limit = q.limit.unwrap_or(BUILDS_PAGE);
    if limit == 0 || limit > BUILDS_PAGE_MAX {
        return Err(BuildsFilterError::Limit(limit));
    }
    let after = given(&q.after)
        .map(|c| {
            c.split_once('.')
                .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_string())))
                .ok_or(BuildsFilterError::Cursor(c.clone()))
        })
        .transpose()?;
    Ok(databuild_log::BuildQuery {
        status,
        analyses: q.all.is_some(),
        // One more than shown: whether a next page exists.
        limit: limit + 1,
        from: given(&q.from).map(|t| typed_time("from", &t)).transpose()?,
        to: given(&q.to).map(|t| typed_time("to", &t)).transpose()?,
        after,
        ..Default::default()
    })
}

/// Every build, newest first, by status and time range, a page at a time (keyset: a page costs
/// its rows however deep it is); with the durations of the page's builds as a chart.
pub(super) async fn builds_page(env: Env, Query(q): Query<BuildsQuery>) -> Response {
    let query = match builds_query(&q) {
        Ok(query) => query,
        Err(e) => return error_page(e.into()),
    };
    let limit = query.limit - 1;
    let mut rows = match page(&env, move |engine| {
        Ok(engine.store.build_requests(&query)?)
    })
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let more = rows.len() > limit;
    rows.truncate(limit);
    let builds: Vec<answers::Build> = rows.iter().map(answers::Build::from).collect();
    let next = more
        .then(|| {
            rows.last()
                .map(|b| format!("{}.{}", b.created_at, b.build_request_id))
        })
        .flatten();
    let ended =
        |b: &answers::Build| databuild_log::state::is_terminal(Kind::BuildRequest, b.status);
    let points: Vec<(String, f64, String)> = builds
        .iter()
        .rev()
        .filter(|b| ended(b))
        .map(|b| {
            (
                format!("build {}", short(&b.build_request_id)),
                (b.updated_at_ns - b.created_at_ns) as f64 / 1e6,
                b.status.to_string(),
            )
        })
        .collect();
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let status = value(&q.status);
    let keep = |after: &str| {
        format!(
            "/builds?status={}&from={}&to={}&limit={limit}{}&after={}",
            enc(&status),
            enc(&value(&q.from)),
            enc(&value(&q.to)),
            if q.all.is_some() { "&all=true" } else { "" },
            enc(after)
        )
    };
    layout("Builds", html! {
        h1 { "Builds" }
        form #build-filters method="get" action="/builds" {
            select name="status" { option value="" { "any status" }
                @for st in ["executing", "completed", "failed", "refused", "cancelled", "planning", "received"] { option value=(st) selected[status == st] { (st) } } }
            " from " input type="datetime-local" name="from" value=(value(&q.from));
            " to " input type="datetime-local" name="to" value=(value(&q.to));
            " " label { input type="checkbox" name="all" value="true" checked[q.all.is_some()]; " analyses too" }
            " " button type="submit" { "Filter" }
            span.muted { " times in UTC" }
        }
        @if builds.is_empty() { p.empty { "No build matches." } } @else {
            @if !points.is_empty() {
                h2 { "Durations of this page's builds" }
                div.scroll { (PreEscaped(svg::duration_chart(&points, "builds"))) }
            }
            table #builds { tr { th { "Build" } th { "Status" } th { "Requested" } th { "Created" } th { "Took" } }
                @for b in &builds { tr data-build=(b.build_request_id) {
                    td { (build_link(&b.build_request_id)) }
                    td { (badge(b.status.as_str())) }
                    td { @for r in b.requested_partitions.iter().take(3) { (partition_link(r)) " " }
                        @if b.requested_count > 3 { span.muted { "+" (b.requested_count - 3) " more" } } }
                    td.muted { (b.created_at) }
                    td { @if ended(b) { (span((b.updated_at_ns - b.created_at_ns) as f64 / 1e9)) } @else { "-" } }
                } }
            }
            p { @if q.after.as_deref().is_some_and(|a| !a.is_empty()) { a href=(keep("")) { "← Newest" } " " }
                @if let Some(n) = &next { a #next-page href=(keep(n)) { "Next page →" } } }
        }
    }).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::super::testing::{open_service, prod, text};
    use super::*;

    fn query(pairs: &[(&str, &str)]) -> BuildsQuery {
        let mut q = BuildsQuery::default();
        for (k, v) in pairs {
            let text = Some(v.to_string());
            match *k {
                "status" => q.status = text,
                "from" => q.from = text,
                "to" => q.to = text,
                "after" => q.after = text,
                "all" => q.all = text,
                "limit" => q.limit = Some(v.parse().unwrap()),
                _ => unreachable!("{k}"),
            }
        }
        q
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        builds_query(&query(pairs)).unwrap_err().to_string()
    }

    #[test]
    fn no_filter_is_every_build_a_default_page_and_one_more_row_to_see_a_next_page() {
        let q = builds_query(&query(&[])).unwrap();
        assert_eq!(q.status, None);
        assert!(!q.analyses && !q.unfinished);
        assert_eq!(q.limit, BUILDS_PAGE + 1);
        assert_eq!((q.from, q.to, q.after), (None, None, None));
        // Blank fields, as an empty form sends them, are no filter either.
        let q = builds_query(&query(&[("status", " "), ("from", ""), ("after", "")])).unwrap();
        assert_eq!((q.status, q.from, q.after), (None, None, None));
        assert!(builds_query(&query(&[("all", "true")])).unwrap().analyses);
    }

    #[test]
    fn only_a_status_a_build_can_have_filters() {
        let q = builds_query(&query(&[("status", "failed")])).unwrap();
        assert_eq!(q.status, Some(Status::Failed));
        for status in ["running", "live", "nope"] {
            assert_eq!(
                refused(&[("status", status)]),
                format!("unknown build status `{status}`; use received, planning, executing, completed, failed, refused or cancelled")
            );
        }
    }

    #[test]
    fn a_page_has_between_one_and_the_most_builds() {
        let q = builds_query(&query(&[("limit", "500")])).unwrap();
        assert_eq!(q.limit, 501);
        assert_eq!(
            refused(&[("limit", "0")]),
            "`limit` = 0 is not between 1 and 500"
        );
        assert_eq!(
            refused(&[("limit", "501")]),
            "`limit` = 501 is not between 1 and 500"
        );
    }

    #[test]
    fn a_cursor_is_a_time_and_an_id() {
        let q = builds_query(&query(&[("after", "1700000000000000000.b.1")])).unwrap();
        assert_eq!(
            q.after,
            Some((1_700_000_000_000_000_000, "b.1".to_string()))
        );
        for cursor in ["x", "later.b1", "-"] {
            assert_eq!(
                refused(&[("after", cursor)]),
                format!("`after` = `{cursor}` is not a page cursor (follow the page's links)")
            );
        }
    }

    #[test]
    fn a_typed_time_is_a_date_a_datetime_local_value_or_rfc_3339_in_utc() {
        let midnight = 1_764_547_200_000_000_000; // 2025-12-01T00:00:00Z
        let hour = 3_600_000_000_000;
        assert_eq!(typed_time("from", "2025-12-01").unwrap(), midnight);
        assert_eq!(
            typed_time("from", "2025-12-01T10:00").unwrap(),
            midnight + 10 * hour
        );
        assert_eq!(
            typed_time("from", "2025-12-01T10:00:30").unwrap(),
            midnight + 10 * hour + 30_000_000_000
        );
        assert_eq!(
            typed_time("from", "2025-12-01T10:00:00+02:00").unwrap(),
            midnight + 8 * hour
        );
        let q = builds_query(&query(&[("from", "2025-12-01"), ("to", "2025-12-02")])).unwrap();
        assert_eq!((q.from, q.to), (Some(midnight), Some(midnight + 24 * hour)));
        assert_eq!(
            refused(&[("to", "yesterday")]),
            "`to` = `yesterday` is not a time: write 2026-12-01, 2026-12-01T10:00 or RFC 3339"
        );
        // Beyond what ns since the epoch can hold.
        assert!(typed_time("from", "3000-01-01").is_err());
    }

    #[tokio::test]
    async fn the_page_says_when_no_build_matches_and_shows_a_bad_filter_as_an_error() {
        let service = open_service();
        let response = builds_page(prod(&service), Query(query(&[]))).await;
        assert_eq!(response.status(), StatusCode::OK);
        let html = text(response).await;
        assert!(html.contains("<title>Builds · DataBuild</title>"));
        assert!(html.contains(r#"<form id="build-filters" method="get" action="/builds">"#));
        assert!(html.contains("No build matches."));
        assert!(!html.contains("Next page"));

        let response = builds_page(prod(&service), Query(query(&[("status", "nope")]))).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(text(response).await.contains("unknown build status `nope`"));
    }
}
