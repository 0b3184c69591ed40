//! Datasets: the list, each with its partitions by state and a strip of recent days, and one
//! dataset's partitions as a health grid.

use axum::extract::{Path, Query};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use databuild_exec::answers::{DatasetView, DerivedStatus};
use databuild_exec::Engine;
use databuild_log::PartitionQuery;
use maud::{html, Markup, PreEscaped};
use serde::Deserialize;

use super::layout::{error_page, layout, page_as};
use super::widgets::{badge, enc, thousands};
use crate::environment::Env;
use crate::error::AppError;
use crate::grid;
use crate::guard::Role;
use crate::svg;

#[derive(Deserialize)]
pub struct DatasetsPageQuery {
    /// Split every dataset's available partitions into live, stale and missing, however many.
    #[serde(default)]
    exact: bool,
}

pub(super) async fn datasets_page(
    env: Env,
    Extension(role): Extension<Role>,
    Query(q): Query<DatasetsPageQuery>,
) -> Response {
    let exact = q.exact;
    let data = page_as(&env, role, move |engine| {
        let datasets = engine.datasets(exact)?;
        let mut strips = Vec::new();
        for d in &datasets {
            strips.push(calendar_for(engine, &d.pattern)?);
        }
        // Pass rates of the latest check results, per job (a job's outputs are its dataset).
        let mut checks: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        for c in engine.store.check_counts()? {
            let e = checks.entry(c.job).or_default();
            e.0 += c.passed;
            e.1 += c.failed;
        }
        Ok((datasets, strips, checks))
    })
    .await;
    let (datasets, strips, checks) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    layout("Datasets", html! {
        h1 { "Datasets" }
        @if datasets.iter().any(|d| !d.freshness_checked) {
            p.muted { "A dataset with more than " (thousands(databuild_exec::engine::listing::FRESHNESS_SCAN as u64))
                " available partitions shows them as the log records them (available). "
                a href="/datasets?exact=true" { "Split every one into live, stale and missing" }
                " (this checks each partition's versions and data: seconds for a million)." }
        }
        table { tr { th { "Name" } th { "Kind" } th { "Pattern" } th { "Partitions" } th { "Checks passed" } th { "By date (last 60 days with data)" } }
            @for (d, strip) in datasets.iter().zip(&strips) { tr {
                td { a href={ "/datasets/" (enc(&d.name)) } { (d.name) } @if d.kind == "job" { " " a.muted href={ "/jobs/" (enc(&d.name)) } { "(job)" } } }
                td { (d.kind) } td { code { (d.pattern) } }
                td { (counts(d)) }
                td.checks { @match checks.get(&d.name).filter(|_| d.kind == "job") {
                    Some((passed, failed)) if passed + failed > 0 => {
                        (format!("{:.0}%", 100.0 * *passed as f64 / (passed + failed) as f64))
                        span.muted { " (" (passed) " of " (passed + failed) ")" }
                    }
                    _ => span.muted { "—" },
                } }
                td { (PreEscaped(strip.clone())) }
            } }
        }
    }).into_response()
}

/// A dataset's counts by state, as `datasets` says them: `probed` for an external no listing can
/// count, `none present` for one listed empty, `none built` for others; `N+` where a walk of an
/// external's files stopped early.
fn counts(d: &DatasetView) -> Markup {
    html! {
        @if !d.listed { span.muted { "probed" } " " }
        @if d.partitions.is_empty() && d.listed {
            span.muted { @if d.kind == "dataset" { "none present" } @else { "none built" } }
        }
        @for (st, n) in &d.partitions {
            (thousands(*n)) @if d.at_least(st) { "+" } " " (badge(st)) " "
        }
    }
}

/// A calendar strip for a pattern with a date field: each day from the first to the last date
/// with partitions (at most 60), coloured by its worst state ([`grid::rank`]), `missing` where
/// none exist.
fn calendar_for(engine: &Engine, pattern: &str) -> Result<String, AppError> {
    let Ok(p) = databuild_core::Pattern::parse(pattern) else {
        return Ok(String::new());
    };
    let Some(date_index) = p
        .fields()
        .position(|(_, t)| t == databuild_core::FieldType::Date)
    else {
        return Ok(String::new());
    };
    let rows = engine.store.partitions(&PartitionQuery {
        pattern: Some(p.glob()),
        limit: 5000,
        ..Default::default()
    })?;
    let mut by_date: std::collections::BTreeMap<String, DerivedStatus> = Default::default();
    let refs: Vec<String> = rows.iter().map(|r| r.partition_ref.clone()).collect();
    // As `status` says each (derived: stale, check_failed, data gone), not as recorded.
    let shown: Vec<DerivedStatus> = engine.shown_states(rows)?;
    for (r, shown) in refs.iter().zip(shown) {
        let Some(values) = p.match_ref(r) else {
            continue;
        };
        let e = by_date
            .entry(values[date_index].to_string())
            .or_insert(shown);
        if grid::rank(shown) > grid::rank(*e) {
            *e = shown;
        }
    }
    let (Some(first), Some(last)) = (
        by_date.keys().next().cloned(),
        by_date.keys().last().cloned(),
    ) else {
        return Ok(String::new());
    };
    let (Some(first), Some(last)) = (
        databuild_core::pattern::parse_date(&first),
        databuild_core::pattern::parse_date(&last),
    ) else {
        return Ok(String::new());
    };
    let start = std::cmp::max(first, last - chrono::Duration::days(59));
    let days: Vec<(String, String)> = start
        .iter_days()
        .take_while(|d| *d <= last)
        .map(|d| {
            let key = databuild_core::pattern::format_date(d);
            let status = by_date.get(&key).copied().unwrap_or(DerivedStatus::Missing);
            (key, status.to_string())
        })
        .collect();
    Ok(svg::calendar(&days))
}

#[derive(Deserialize, Default)]
pub struct DatasetQuery {
    output: Option<usize>,
    state: Option<String>,
    zoom: Option<String>,
    end: Option<String>,
    rows_after: Option<String>,
    cols_after: Option<String>,
}

/// One dataset: its counts, and its partitions as a health grid (a page of cells).
pub(super) async fn dataset_page(
    env: Env,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    Query(q): Query<DatasetQuery>,
) -> Response {
    let given = |v: &Option<String>| v.clone().filter(|t| !t.is_empty());
    let query = (|| -> Result<grid::GridQuery, grid::GridError> {
        Ok(grid::GridQuery {
            state: given(&q.state).map(|s| grid::state(&s)).transpose()?,
            zoom: given(&q.zoom).map(|z| grid::Zoom::parse(&z)).transpose()?,
            end: given(&q.end).map(|e| grid::date(&e)).transpose()?,
            rows_after: given(&q.rows_after),
            cols_after: given(&q.cols_after),
        })
    })();
    let query = match query {
        Ok(query) => query,
        Err(e) => return error_page(e.into()),
    };
    let output = q.output.unwrap_or(0);
    let base = format!(
        "/datasets/{}?output={output}&state={}",
        enc(&name),
        enc(&given(&q.state).unwrap_or_default())
    );
    let link_base = base.clone();
    let n = name.clone();
    let data = page_as(&env, role, move |engine| {
        let p = grid::producer(engine, &n, output)?;
        let link = |zoom: grid::Zoom, end: chrono::NaiveDate| {
            format!(
                "{link_base}&zoom={}&end={}",
                zoom.as_str(),
                databuild_core::pattern::format_date(end)
            )
        };
        let g = grid::grid(engine, p, &query, &link)?;
        let view = engine
            .datasets(false)?
            .into_iter()
            .zip(engine.graph.producers())
            .find(|(_, q)| *q == p)
            .map(|(d, _)| d);
        let landings = engine.landings(&n)?;
        Ok((g, view, landings))
    })
    .await;
    let (g, view, landings) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let zoom = g.zoom;
    let at = |zoom: Option<grid::Zoom>, end: Option<chrono::NaiveDate>| {
        let mut u = base.clone();
        if let Some(z) = zoom {
            u.push_str(&format!("&zoom={}", z.as_str()));
        }
        if let Some(e) = end {
            u.push_str(&format!("&end={}", databuild_core::pattern::format_date(e)));
        }
        u
    };
    let window = chrono::Duration::days(g.window_days);
    layout(&name, html! {
        h1 { "Dataset " (name) }
        p { code { (g.pattern) } @if let Some(v) = &view { " · " (v.kind) " · "
            (counts(v))
            @if !v.freshness_checked { span.muted { " (not every partition counted or split by freshness: too many to derive here)" } } } }
        form #grid-filters method="get" action={ "/datasets/" (enc(&name)) } {
            input type="hidden" name="output" value=(output);
            @if let Some(z) = zoom { input type="hidden" name="zoom" value=(z.as_str()); }
            @if let Some(e) = g.end { input type="hidden" name="end" value=(databuild_core::pattern::format_date(e)); }
            select name="state" { option value="" { "every state" }
                @for st in grid::STATES { option value=(st) selected[q.state.as_deref() == Some(st.as_str())] { (st) } } }
            " " button type="submit" { "Show" }
        }
        @match g.shape {
            grid::Shape::None => { p.empty { "A grid shows patterns of one or two fields; see " a href={ "/partitions?pattern=" (enc(&g.pattern)) } { "its partitions" } "." } }
            _ => {
                p.muted #grid-says {
                    @match g.shape {
                        grid::Shape::Matrix => { (g.row_field.clone().unwrap_or_default()) " × " (g.column_field.clone().unwrap_or_default()) ", by " (zoom.map_or("day", grid::Zoom::as_str)) }
                        grid::Shape::Table => { (g.row_field.clone().unwrap_or_default()) " × " (g.column_field.clone().unwrap_or_default()) }
                        grid::Shape::Calendar => { "by " (g.column_field.clone().unwrap_or_default()) ": twelve months by their days" }
                        _ => { "its partitions in order, " (grid::COLUMNS) " a row" }
                    }
                    " · " (g.partitions_read) " partitions read for this page"
                    @if zoom.is_some_and(|z| z != grid::Zoom::Day) { " · a cell is coloured by its worst state; click it to zoom in" }
                }
                p.nav {
                    @if g.shape == grid::Shape::Matrix {
                        "Zoom: " @for z in [grid::Zoom::Day, grid::Zoom::Week, grid::Zoom::Month] {
                            @if Some(z) == zoom { b { (z.as_str()) } } @else { a href=(at(Some(z), g.end)) { (z.as_str()) } } " "
                        }
                        " · "
                    }
                    @if let Some(end) = g.end {
                        a href=(at(zoom, Some(end - window))) { "← earlier" } " · "
                        a href=(at(zoom, Some(end + window))) { "later →" }
                    }
                    @if let Some(r) = &g.next_rows { " · " a #next-rows href={ (at(zoom, g.end)) "&rows_after=" (enc(r)) } { "next " (grid::ROWS) " rows →" } }
                    @if let Some(c) = &g.next_cols { " · " a #next-cols href={ (at(zoom, g.end)) "&rows_after=" (enc(q.rows_after.as_deref().unwrap_or(""))) "&cols_after=" (enc(c)) } { "more →" } }
                }
                div.scroll { (PreEscaped(svg::matrix(&g.rows, &g.columns, &g.cells))) }
                p.legend { @for (st, n) in &g.counts { (badge(st.as_str())) " " (thousands(*n)) " " } }
            }
        }
        @if let Some(l) = landings.as_ref().filter(|l| !l.points.is_empty()) {
            h2 { "Landing times" }
            div.scroll { (PreEscaped(svg::landing_chart(l))) }
        }
    }).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::super::testing::{build, open_service, prod, text};
    use super::*;

    fn days(states: &[(&str, &str)]) -> String {
        let days: Vec<(String, String)> = states
            .iter()
            .map(|(d, s)| (d.to_string(), s.to_string()))
            .collect();
        svg::calendar(&days)
    }

    #[tokio::test]
    async fn a_strip_runs_from_the_first_to_the_last_date_built_each_day_in_its_state() {
        let service = open_service();
        let engine = &service.state.engine;
        let pattern = "daily/date={date:date}";
        assert_eq!(calendar_for(engine, pattern).unwrap(), "", "nothing built");
        build(
            &service,
            &["daily/date=2026-01-02", "daily/date=2026-01-05"],
        )
        .await;
        crate::engine_api::taint(engine, &["daily/date=2026-01-05".into()], None, 10).unwrap();
        assert_eq!(
            calendar_for(engine, pattern).unwrap(),
            days(&[
                ("2026-01-02", "live"),
                ("2026-01-03", "missing"),
                ("2026-01-04", "missing"),
                ("2026-01-05", "tainted"),
            ])
        );
        // No strip for a pattern without a date field, or one that does not parse.
        assert_eq!(calendar_for(engine, "daily/{name}").unwrap(), "");
        assert_eq!(calendar_for(engine, "daily/{").unwrap(), "");
    }

    #[tokio::test]
    async fn the_list_shows_each_dataset_with_its_partitions_by_state() {
        let service = open_service();
        let list = || {
            datasets_page(
                prod(&service),
                Extension(Role::Writer),
                Query(DatasetsPageQuery { exact: false }),
            )
        };
        let html = text(list().await).await;
        assert!(html.contains(r#"<td><a href="/datasets/daily">daily</a> <a class="muted" href="/jobs/daily">(job)</a></td>"#));
        let none_built = r#"<span class="muted">none built</span>"#;
        assert_eq!(html.matches(none_built).count(), 3);
        build(&service, &["daily/date=2026-01-02"]).await;
        let html = text(list().await).await;
        assert!(
            html.contains(&format!("1 {} ", badge("live").into_string())),
            "{html}"
        );
        assert!(html.contains(&days(&[("2026-01-02", "live")])));
        assert_eq!(html.matches(none_built).count(), 2, "left and right");
    }

    #[tokio::test]
    async fn a_bad_zoom_or_an_unknown_dataset_is_an_error_page() {
        let service = open_service();
        let dataset = |name: &str, zoom: &str| {
            let q = DatasetQuery {
                output: None,
                state: None,
                zoom: Some(zoom.into()),
                end: None,
                rows_after: None,
                cols_after: None,
            };
            dataset_page(
                prod(&service),
                Extension(Role::Writer),
                Path(name.into()),
                Query(q),
            )
        };
        assert_eq!(
            dataset("daily", "decade").await.status(),
            StatusCode::BAD_REQUEST
        );
        assert_eq!(dataset("nope", "").await.status(), StatusCode::NOT_FOUND);
        let response = dataset("daily", "week").await;
        assert_eq!(response.status(), StatusCode::OK);
        let html = text(response).await;
        assert!(html.contains("<h1>Dataset daily</h1>"));
        // One date field: a calendar, whatever the zoom asked, paged by windows of its days.
        assert!(html.contains(r#"<p class="muted" id="grid-says">by date: twelve months by their days · 0 partitions read for this page</p>"#));
        assert!(html.contains(r#"<a href="/datasets/daily?output=0&amp;state=&amp;end="#));
    }
}
