//! Wants: the list, and one want's page: how its partitions came to be and what the others wait
//! for.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use databuild_exec::engine::rfc3339;
use databuild_log::Status;
use maud::html;

use super::layout::{layout, page};
use super::widgets::{build_link, id_link, partition_link, run_link};
use super::Shared;
use crate::engine_api;
use crate::svg;

/// Wants: what is wanted, whether it is satisfied, and if not, what it waits for and since when.
pub(super) async fn wants_page(State(state): Shared) -> Response {
    let wants = match page(&state, |engine| Ok(engine.store.wants(None, false, 200)?)).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let colour = |s: Status| match s {
        Status::Satisfied => "live",
        Status::Waiting | Status::Requested => "building",
        _ => "cancelled",
    };
    layout("Wants", html! {
        h1 { "Wants" }
        p.muted { "Partitions wanted with " code { "databuild want" } " or a " code { "[[want]]" } " of the graph file; the service builds them as soon as their inputs exist." }
        @if wants.is_empty() { p.muted { "No wants yet." } }
        @else {
            table.wants {
                tr { th { "Want" } th { "Status" } th { "Partitions" } th { "Why" } th { "Since" } th { "SLA" } th { "Expires" } }
                @for w in &wants { tr data-want=(w.want_id) {
                    td { (id_link("/wants/", &w.want_id)) @if let Some(r) = &w.recurring { br; span.muted { "recurring " (r) } } }
                    td { span.badge style={ "background:" (svg::colour(colour(w.status))) } { (w.status) } }
                    td { @for r in w.refs.iter().take(5) { (partition_link(r)) br; } @if w.refs.len() > 5 { span.muted { "+" (w.refs.len() - 5) " more" } } }
                    td.why { (w.message.clone().unwrap_or_default()) }
                    td { (rfc3339(w.updated_at)) }
                    td { @if let Some(s) = w.sla_seconds { (humantime::format_duration(std::time::Duration::from_secs(s))) } @if w.sla_missed > 0 { " " span.badge style={ "background:" (svg::colour("failed")) } { (w.sla_missed) " missed" } } }
                    td { (w.expires_at.map(rfc3339).unwrap_or_default()) }
                } }
            }
        }
    }).into_response()
}

/// One want: how its partitions came to be — the builds and runs that made them, each run with
/// the runs that made what it read — and what each partition not live waits for.
pub(super) async fn want_page(State(state): Shared, Path(id): Path<String>) -> Response {
    let w = match page(&state, move |engine| engine_api::want_detail(engine, &id)).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let build_link = |id: &Option<String>| match id {
        Some(id) => build_link(id),
        None => html! { span.muted { "no build" } },
    };
    layout(&format!("Want {}", w.want_id), html! {
        h1 { "Want " code { (w.want_id) } " " span.badge { (w.status) } }
        p.muted { (w.refs.len()) " partition(s) wanted; " (w.waiting.len()) " not live. " (w.message.clone().unwrap_or_default()) }
        h2 { "How it was fulfilled" }
        @if w.fulfillment.is_empty() { p.muted { "No run has made any of its partitions yet." } }
        ul.tree {
            @for b in &w.fulfillment { li {
                "build " (build_link(&b.build_request_id)) " " @if let Some(s) = b.status { span.badge style={ "background:" (svg::colour(s.as_str())) } { (s) } }
                ul { @for r in &b.runs { li {
                    "run " (run_link(&r.job_run_id)) " of " code { (r.job) } " " span.badge style={ "background:" (svg::colour(r.status.as_str())) } { (r.status) } " made "
                    @for p in &r.partitions { (partition_link(p)) " " }
                    @if !r.inputs.is_empty() { ul { @for i in &r.inputs { li {
                        "read " (partition_link(&i.partition_ref)) " as built by run " (run_link(&i.job_run_id)) " of build " (build_link(&i.build_request_id))
                    } } } }
                } } }
            } }
        }
        @if !w.waiting.is_empty() {
            h2 { "Waiting" }
            table { tr { th { "Partition" } th { "Status" } th { "Waits for" } }
                @for p in &w.waiting { tr { td { (partition_link(&p.partition_ref)) } td { span.badge style={ "background:" (svg::colour(&p.status)) } { (p.status) } } td.why { (p.waits_for) } } }
            }
        }
    }).into_response()
}
