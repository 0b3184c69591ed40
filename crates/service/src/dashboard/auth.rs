//! Logging in and out: the token form, the session cookie it sets (and the expired one that logs
//! out), and where to go after logging in: a path of this service only.

use axum::extract::{Form, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;

use super::forms::{csrf_refused, TokenForm};
use super::layout::{error_page, layout};
use super::Shared;
use crate::error::AppError;

#[derive(Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// Where to go after logging in: a path of this service only (never `//other.site`).
fn local_path(next: Option<&str>) -> String {
    // Browsers drop tabs and newlines from a URL, so `/\t/evil` would be `//evil`: only visible
    // ASCII, a single leading `/` and no backslash make a local path.
    match next {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && p.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') =>
        {
            p.to_string()
        }
        _ => "/".to_string(),
    }
}

pub(super) async fn login_page(State(state): Shared, Query(q): Query<LoginQuery>) -> Response {
    let next = local_path(q.next.as_deref());
    layout("Log in", html! {
        h1 { "Log in" }
        @if state.guard.has_token() {
            p.muted { "This service is guarded: enter DATABUILD_TOKEN to read and write, or DATABUILD_READ_TOKEN to read." }
            form method="post" action="/login" {
                input type="hidden" name="next" value=(next);
                input type="hidden" name="csrf" value=(state.guard.csrf_token());
                input type="password" name="token" placeholder="token" required autofocus;
                " " button type="submit" { "Log in" }
            }
        } @else {
            p { "This service has no token: everything is open. " a href="/" { "Home" } }
        }
    })
    .into_response()
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
    csrf: Option<String>,
}

pub(super) async fn login(State(state): Shared, Form(form): Form<LoginForm>) -> Response {
    if !state.guard.csrf_ok(form.csrf.as_deref()) {
        return csrf_refused();
    }
    let role = state.guard.token_role(&form.token);
    let Some(cookie) = state.guard.session_cookie(role) else {
        let mut page = error_page(AppError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "unauthorized",
            "that token is neither DATABUILD_TOKEN nor DATABUILD_READ_TOKEN",
        ));
        // Every wrong guess costs its sender a moment.
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        page.headers_mut()
            .insert(header::CACHE_CONTROL, "no-store".parse().expect("a header"));
        return page;
    };
    let mut response = Redirect::to(&local_path(form.next.as_deref())).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie.parse().expect("a cookie header"));
    response
}

pub(super) async fn logout(State(state): Shared, Form(form): Form<TokenForm>) -> Response {
    if !state.guard.csrf_ok(form.csrf.as_deref()) {
        return csrf_refused();
    }
    let mut response = Redirect::to("/login").into_response();
    let expired = crate::guard::session_cookie_header("", 0);
    response.headers_mut().insert(
        header::SET_COOKIE,
        expired.parse().expect("a cookie header"),
    );
    response
}
