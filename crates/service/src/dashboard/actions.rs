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
use crate::environment::Env;
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
    env: Env,
    Extension(role): Extension<Role>,
    TextForm(form): TextForm<BuildForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let words: Vec<String> = form.refs.split_whitespace().map(str::to_string).collect();
    match crate::ops::start_build(
        &state,
        &env,
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
    env: Env,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
    Form(form): Form<TokenForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let bid = id.clone();
    match page(&env, move |engine| engine_api::cancel(engine, &bid)).await {
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
    env: Env,
    Extension(role): Extension<Role>,
    Query(q): Query<TaintPreview>,
) -> Response {
    let (r, max_refs) = (q.r#ref.clone(), state.limits.max_refs);
    let impact = match page(&env, move |engine| {
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
    env: Env,
    Extension(role): Extension<Role>,
    TextForm(form): TextForm<TaintForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let r = form.r#ref.clone();
    let reason = form.reason.clone().filter(|s| !s.is_empty());
    let max_refs = state.limits.max_refs;
    match page(&env, move |engine| {
        engine_api::taint(engine, &[r], reason.as_deref(), max_refs)
    })
    .await
    {
        Ok(_) => Redirect::to(&format!("/partitions/{}", enc(&form.r#ref))).into_response(),
        Err(resp) => resp,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{header, StatusCode};

    use super::super::testing::{
        build, guarded_service, open_service, prod, text, wait_for_the_end,
    };
    use super::*;

    fn build_form(refs: &str, csrf: Option<String>, token: Option<&str>) -> TextForm<BuildForm> {
        TextForm(BuildForm {
            refs: refs.into(),
            force: None,
            token: token.map(str::to_string),
            csrf,
        })
    }

    fn location(response: &Response) -> &str {
        response.headers()[header::LOCATION].to_str().unwrap()
    }

    #[tokio::test]
    async fn the_build_form_starts_a_build_and_goes_to_its_page() {
        let service = open_service();
        let state = service.state.clone();
        let csrf = Some(state.guard.csrf_token());
        let form = build_form(" daily/date={2026-01-02,2026-01-03}\n", csrf, None);
        let response = ui_build(
            State(state.clone()),
            prod(&service),
            Extension(Role::Writer),
            form,
        )
        .await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        let id = location(&response)
            .strip_prefix("/builds/")
            .unwrap()
            .to_string();
        wait_for_the_end(&service, &id).await;
        let built = engine_api::build(&state.engine, &id).unwrap();
        assert_eq!(
            built.requested_partitions,
            ["daily/date=2026-01-02", "daily/date=2026-01-03"]
        );
        assert_eq!(built.status, databuild_log::Status::Completed);
    }

    #[tokio::test]
    async fn a_build_form_without_the_csrf_token_or_the_right_to_write_starts_nothing() {
        let service = guarded_service();
        let state = service.state.clone();
        let csrf = || Some(state.guard.csrf_token());
        let ask = |form| {
            ui_build(
                State(state.clone()),
                prod(&service),
                Extension(Role::Reader),
                form,
            )
        };
        let forged = ask(build_form("daily/date=2026-01-02", None, Some("secret"))).await;
        assert_eq!(forged.status(), StatusCode::FORBIDDEN);
        let reader = ask(build_form("daily/date=2026-01-02", csrf(), None)).await;
        assert_eq!(reader.status(), StatusCode::UNAUTHORIZED);
        let unknown = ask(build_form("weekly/x", csrf(), Some("secret"))).await;
        assert_eq!(unknown.status(), StatusCode::BAD_REQUEST);
        assert!(engine_api::builds(&state.engine, None, true, 10)
            .unwrap()
            .builds
            .is_empty());
    }

    #[tokio::test]
    async fn a_taint_says_what_it_would_make_stale_then_is_done_and_shows_the_partition() {
        let service = open_service();
        let state = service.state.clone();
        build(&service, &["left/date=2026-01-02"]).await;
        let r = "daily/date=2026-01-02";
        let preview = TaintPreview {
            r#ref: r.into(),
            reason: Some("bad rows".into()),
        };
        let html = text(
            taint_preview(
                State(state.clone()),
                prod(&service),
                Extension(Role::Writer),
                Query(preview),
            )
            .await,
        )
        .await;
        assert!(html.contains(&format!("<h1>Taint <code>{r}</code>?</h1>")));
        assert!(html.contains(", and <b>1</b> live partition(s) built from it would become stale."));
        assert!(html.contains(&partition_link("left/date=2026-01-02").into_string()));
        assert!(html.contains(r#"<input type="hidden" name="reason" value="bad rows">"#));
        assert!(html.contains(r#"<a href="/partitions/daily%2Fdate=2026-01-02">Cancel</a>"#));

        let form = TextForm(TaintForm {
            r#ref: r.into(),
            reason: Some("bad rows".into()),
            token: None,
            csrf: Some(state.guard.csrf_token()),
        });
        let response = ui_taint(
            State(state.clone()),
            prod(&service),
            Extension(Role::Writer),
            form,
        )
        .await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(location(&response), "/partitions/daily%2Fdate=2026-01-02");
        assert_eq!(
            engine_api::status(&state.engine, r).unwrap().status,
            databuild_exec::answers::DerivedStatus::Tainted
        );
    }

    #[tokio::test]
    async fn an_ended_build_cannot_be_cancelled() {
        let service = open_service();
        let state = service.state.clone();
        let id = build(&service, &["daily/date=2026-01-02"]).await;
        let cancel = |csrf| {
            let form = Form(TokenForm { token: None, csrf });
            ui_cancel(
                State(state.clone()),
                prod(&service),
                Extension(Role::Writer),
                Path(id.clone()),
                form,
            )
        };
        assert_eq!(cancel(None).await.status(), StatusCode::FORBIDDEN);
        let ended = cancel(Some(state.guard.csrf_token())).await;
        assert_eq!(ended.status(), StatusCode::CONFLICT);
    }
}
