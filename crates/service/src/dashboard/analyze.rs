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

pub(super) async fn analyze_page(State(state): Shared, Query(q): Query<RefsQuery>) -> Response {
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
    let plan = page(&state, move |engine| {
        let refs = refs_from_text(engine, &text, max_refs)?;
        let plan = engine.plan(&PlanRequest {
            refs,
            ..Default::default()
        })?;
        let cost = engine.estimate(&plan, databuild_exec::build::default_parallelism())?;
        Ok((plan, cost))
    })
    .await;
    let (plan, cost) = match plan {
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
        @if !plan.runs.is_empty() {
            p.estimate {
                "Estimated " strong { (span(cost.wall_p50_s)) } " at " (cost.parallel) " runs at once (p95 " (span(cost.wall_p95_s)) "), critical path " (span(cost.critical_path_p50_s)) ", job time " (span(cost.work_p50_s))
                @if cost.runs_without_history > 0 { " · " (cost.runs_without_history) " runs (" (cost.jobs_without_history.join(", ")) ") have no recorded duration and count as 0 s" }
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
