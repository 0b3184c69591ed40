//! The dashboard's writes: start a build, cancel one, taint a partition (after a page that says
//! what the taint would make stale). Every form passes [`super::forms`]'s checks first; a success
//! redirects to the page of what changed.

use axum::extract::{Form, Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use maud::html;
use serde::Deserialize;

use super::forms::{form_auth, form_refused, TextForm, TokenForm};
use super::layout::{error_page, layout, page};
use super::widgets::{enc, partition_link, run_link, short};
use super::Shared;
use crate::engine_api;
use crate::guard::Role;

#[derive(Deserialize)]
pub struct BuildForm {
    refs: String,
    force: Option<String>,
    token: Option<String>,
    csrf: Option<String>,
}

pub(super) async fn ui_build(
    State(state): Shared,
    Extension(role): Extension<Role>,
    TextForm(form): TextForm<BuildForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let words: Vec<String> = form.refs.split_whitespace().map(str::to_string).collect();
    match crate::ops::start_build(
        &state,
        crate::ops::BuildRequest {
            partitions: words,
            force: form.force.is_some(),
            keep_going: false,
            allow_stale: false,
            parallel: None,
            max_runs: None,
        },
    )
    .await
    {
        Ok(id) => Redirect::to(&format!("/builds/{id}")).into_response(),
        Err(e) => error_page(e),
    }
}

pub(super) async fn ui_cancel(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
    Form(form): Form<TokenForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let bid = id.clone();
    match page(&state, move |engine| engine_api::cancel(engine, &bid)).await {
        Ok(_) => Redirect::to(&format!("/builds/{id}")).into_response(),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
pub struct TaintForm {
    r#ref: String,
    reason: Option<String>,
    token: Option<String>,
    csrf: Option<String>,
}

#[derive(Deserialize)]
pub struct TaintPreview {
    r#ref: String,
    reason: Option<String>,
}

/// What a taint would do, before it is done: the partitions it would make stale and the wants
/// that would rebuild them, with the form that taints.
pub(super) async fn taint_preview(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Query(q): Query<TaintPreview>,
) -> Response {
    let (r, max_refs) = (q.r#ref.clone(), state.limits.max_refs);
    let impact = match page(&state, move |engine| {
        engine_api::taint_impact(engine, &[r], max_refs)
    })
    .await
    {
        Ok(i) => i,
        Err(resp) => return resp,
    };
    layout("Taint", html! {
        h1 { "Taint " code { (q.r#ref) } "?" }
        p { "It would be rebuilt by the next build that needs it"
            @if !impact.would_become_stale.is_empty() { ", and " b { (impact.would_become_stale.len()) } " live partition(s) built from it would become stale" } "." }
        @if !impact.would_become_stale.is_empty() {
            table { tr { th { "Would become stale" } th { "Built by run" } th { "From" } }
                @for i in &impact.would_become_stale { tr {
                    td { (partition_link(&i.partition_ref)) }
                    td { (run_link(&i.job_run_id)) }
                    td { code { (i.via) } }
                } }
            }
            @if impact.truncated { p.muted { "… and more." } }
        }
        @if impact.already_stale > 0 { p.muted { (impact.already_stale) " partition(s) built from it are stale or tainted already." } }
        @if impact.not_live > 0 { p.muted { (impact.not_live) " partition(s) built from it are not live (missing, failed or held back by a check)." } }
        @for w in &impact.wants { p.wanted { "Want " a href={ "/wants/" (w.want_id) } { code { (short(&w.want_id)) } } " would rebuild " (w.count) ": " @for r in &w.refs { (partition_link(r)) " " } } }
        form.inline method="post" action="/ui/taint" {
            input type="hidden" name="ref" value=(q.r#ref);
            input type="hidden" name="reason" value=(q.reason.clone().unwrap_or_default()); " " (form_auth(&state, role))
            button type="submit" { "Taint it" }
        }
        " " a href={ "/partitions/" (enc(&q.r#ref)) } { "Cancel" }
    }).into_response()
}

pub(super) async fn ui_taint(
    State(state): Shared,
    Extension(role): Extension<Role>,
    TextForm(form): TextForm<TaintForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let r = form.r#ref.clone();
    let reason = form.reason.clone().filter(|s| !s.is_empty());
    let max_refs = state.limits.max_refs;
    match page(&state, move |engine| {
        engine_api::taint(engine, &[r], reason.as_deref(), max_refs)
    })
    .await
    {
        Ok(_) => Redirect::to(&format!("/partitions/{}", enc(&form.r#ref))).into_response(),
        Err(resp) => resp,
    }
}
