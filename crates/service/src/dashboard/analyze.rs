//! The analyze page: what a build of the typed refs would run, drawn and costed, before anything
//! is built.

use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use databuild_core::{PartitionRef, PlanRequest};
use databuild_exec::answers::span;
use databuild_exec::Engine;
use maud::{html, PreEscaped};
use serde::Deserialize;

use super::layout::{layout, page};
use super::widgets::{enc, partition_link};
use super::Shared;
use crate::engine_api;
use crate::environment::Env;
use crate::error::AppError;
use crate::svg;

#[derive(Deserialize)]
pub struct RefsQuery {
    refs: Option<String>,
}

/// Refs from a text box: one or more per line, braces expanded, as the API takes them.
fn refs_from_text(
    engine: &Engine,
    text: &str,
    max_refs: usize,
) -> Result<Vec<PartitionRef>, AppError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    engine_api::parse_refs(engine, &words, max_refs)
}

pub(super) async fn analyze_page(
    State(state): Shared,
    env: Env,
    Query(q): Query<RefsQuery>,
) -> Response {
    let text = q.refs.clone().unwrap_or_default();
    let form = html! {
        form method="get" action="/analyze" {
            textarea name="refs" rows="2" placeholder="partition refs" { (text) }
            button type="submit" { "Analyze" }
        }
    };
    if text.trim().is_empty() {
        return layout("Analyze", html! { h1 { "Analyze" } (form) p.empty { "Name partitions to see what a build would run." } }).into_response();
    }
    let max_refs = state.limits.max_refs;
    let permit = match crate::ops::analysis_slot(&state) {
        Ok(permit) => permit,
        Err(busy) => return super::layout::error_page(busy),
    };
    // The slot goes with the plan: held while planning (a client gone does not end it) and
    // while the page is drawn from it.
    let plan = page(&env, move |engine| {
        let refs = refs_from_text(engine, &text, max_refs)?;
        let plan = engine.plan(&PlanRequest {
            refs,
            ..Default::default()
        })?;
        let cost = engine.estimate(&plan, databuild_exec::scheduler::default_parallelism())?;
        let by_code = engine.stale_by_code(&plan);
        Ok((plan, cost, by_code, permit))
    })
    .await;
    let (plan, cost, by_code, _permit) = match plan {
        Ok(p) => p,
        Err(r) => return r,
    };
    let nodes: Vec<svg::GraphNode> = plan
        .runs
        .iter()
        .enumerate()
        .take(300)
        .map(|(i, r)| svg::GraphNode {
            id: i.to_string(),
            label: format!("{} {}", r.job, r.outputs[0]),
            status: "scheduled".into(),
            href: format!("/partitions/{}", enc(r.outputs[0].as_str())),
            depends_on: r.depends_on.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        })
        .collect();
    layout("Analyze", html! {
        h1 { "Analyze" }
        (form)
        p { (plan.runs.len()) " job runs · " (plan.skipped.len()) " skipped (live) · " (plan.delegated.len()) " delegated · " (plan.missing.len()) " missing" }
        @if by_code > 0 { p #stale-by-code { (by_code) " of the runs because code changed (a job's script, its " code { "code" } " files or its definition)" } }
        @if !plan.runs.is_empty() {
            p.estimate {
                "Estimated " strong { (span(cost.wall_p50_s)) } " at " (cost.parallel) " runs at once (p95 " (span(cost.wall_p95_s)) "), critical path " (span(cost.critical_path_p50_s)) ", job time " (span(cost.work_p50_s))
                @if cost.runs_without_history > 0 { " · " (cost.runs_without_history) " runs (" (cost.jobs_without_history.join(", ")) ") have no recorded duration and count as 0 s" }
                br;
                @match cost.peak_memory_bytes { Some(b) => { "Peak memory at most " strong { (databuild_exec::answers::metric_text("max_rss_bytes", b as f64)) } }, None => { "Peak memory unknown (no run recorded it)" } }
                ", " (format!("{:.4}", cost.cpu_hours)) " CPU-hours"
                @if cost.runs_without_resources > 0 { " · " (cost.runs_without_resources) " runs without recorded resources count as none" }
            }
        }
        @if !plan.missing.is_empty() {
            @let blocked = plan.blocked_runs();
            p.error { "Cannot complete: " @for m in &plan.missing { code { (m.partition_ref) } " (dataset " (m.dataset) ") " }
                " · " (blocked.len()) " runs cannot run until " @if plan.missing.len() == 1 { "it is" } @else { "they are" } " there" }
        }
        @if !plan.not_rebuildable.is_empty() {
            p.muted #not-rebuildable { (plan.not_rebuildable.len()) " stale partitions are kept as they are, not rebuildable: "
                @for (r, why) in plan.not_rebuildable.iter().take(20) { (partition_link(r.as_str())) " (" (why) ") " } }
        }
        @if !nodes.is_empty() { div.scroll { (PreEscaped(svg::graph(&nodes))) } }
        @if plan.runs.len() > 300 { p.muted { "The drawing shows the first 300 runs." } }
        table { tr { th { "#" } th { "Job" } th { "Outputs" } th { "Inputs" } }
            @for (i, r) in plan.runs.iter().enumerate().take(1000) { tr {
                td { (i + 1) } td { (r.job) } td { @for o in &r.outputs { (partition_link(o.as_str())) " " } }
                td.muted { (r.inputs.iter().take(4).map(|i| i.as_str()).collect::<Vec<_>>().join(", ")) @if r.inputs.len() > 4 { " …" } }
            } }
        }
    }).into_response()
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::super::testing::{open_service, prod, text};
    use super::*;

    #[test]
    fn refs_are_the_words_of_the_box_braces_expanded() {
        let service = open_service();
        let engine = &service.state.engine;
        let refs = refs_from_text(
            engine,
            "daily/date=2026-01-01\n  left/date={2026-01-02,2026-01-03} ",
            10,
        )
        .unwrap();
        let refs: Vec<&str> = refs.iter().map(PartitionRef::as_str).collect();
        assert_eq!(
            refs,
            [
                "daily/date=2026-01-01",
                "left/date=2026-01-02",
                "left/date=2026-01-03"
            ]
        );
        let unknown = refs_from_text(engine, "weekly/x", 10).unwrap_err();
        assert_eq!(unknown.status, StatusCode::BAD_REQUEST);
        let too_many =
            refs_from_text(engine, "daily/date={2026-01-01..2026-01-31}", 10).unwrap_err();
        assert_eq!(too_many.status, StatusCode::PAYLOAD_TOO_LARGE);
    }

    #[tokio::test]
    async fn the_page_shows_the_plan_of_what_was_typed() {
        let service = open_service();
        let analyze = |refs: Option<&str>| {
            let q = RefsQuery {
                refs: refs.map(str::to_string),
            };
            analyze_page(State(service.state.clone()), prod(&service), Query(q))
        };
        let html = text(analyze(None).await).await;
        assert!(html.contains("Name partitions to see what a build would run."));

        let html = text(analyze(Some("left/date=2026-01-02")).await).await;
        assert!(html.contains(r#"<textarea name="refs" rows="2" placeholder="partition refs">left/date=2026-01-02</textarea>"#));
        assert!(html.contains("<p>2 job runs · 0 skipped (live) · 0 delegated · 0 missing</p>"));
        assert!(html.contains(&format!(
            "<td>1</td><td>daily</td><td>{} </td>",
            partition_link("daily/date=2026-01-02").into_string()
        )));
        assert!(html.contains("<td>2</td><td>pair</td>"));

        let refused = analyze(Some("weekly/x")).await;
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
    }
}
