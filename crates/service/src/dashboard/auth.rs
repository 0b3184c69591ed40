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

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, StatusCode};

    use super::super::testing::{guarded_service, open_service, text};
    use super::*;
    use crate::guard::Role;

    #[test]
    fn only_a_path_of_this_service_is_where_a_login_goes_next() {
        for kept in [
            "/",
            "/jobs",
            "/builds?status=failed&limit=5",
            "/partitions/a%2Fb",
        ] {
            assert_eq!(local_path(Some(kept)), kept);
        }
        for refused in [
            "",
            "jobs",
            "//evil.example",
            "/\t/evil.example",
            "/\n/evil.example",
            "/\\evil.example",
            "https://evil.example/",
            "/caf\u{e9}",
            "/a b",
        ] {
            assert_eq!(local_path(Some(refused)), "/", "{refused:?}");
        }
        assert_eq!(local_path(None), "/");
    }

    #[tokio::test]
    async fn the_login_page_asks_for_a_token_only_when_there_is_one() {
        let open = open_service();
        let query = |next: &str| {
            Query(LoginQuery {
                next: Some(next.into()),
            })
        };
        let html = text(login_page(State(open.state.clone()), query("/jobs")).await).await;
        assert!(html.contains("This service has no token: everything is open."));
        assert!(!html.contains("<form"));

        let guarded = guarded_service();
        let html = text(login_page(State(guarded.state.clone()), query("//evil")).await).await;
        assert!(html.contains(r#"<form method="post" action="/login">"#));
        assert!(html.contains(r#"<input type="hidden" name="next" value="/">"#));
        assert!(html.contains(&format!(
            r#"<input type="hidden" name="csrf" value="{}">"#,
            guarded.state.guard.csrf_token()
        )));
        assert!(html.contains(
            r#"<input type="password" name="token" placeholder="token" required autofocus>"#
        ));
    }

    fn login_form(token: &str, csrf: Option<String>) -> Form<LoginForm> {
        Form(LoginForm {
            token: token.into(),
            next: Some("/jobs".into()),
            csrf,
        })
    }

    #[tokio::test]
    async fn the_right_token_gives_a_session_cookie_that_gives_its_role_back() {
        let guarded = guarded_service();
        let state = guarded.state.clone();
        let csrf = Some(state.guard.csrf_token());
        let response = login(State(state.clone()), login_form("secret", csrf)).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(response.headers()[header::LOCATION], "/jobs");
        let cookie = response.headers()[header::SET_COOKIE].to_str().unwrap();
        assert!(cookie.starts_with("databuild_session="), "{cookie}");
        assert!(cookie.ends_with("; Path=/; HttpOnly; SameSite=Strict; Max-Age=604800"));
        let mut headers = HeaderMap::new();
        let value = cookie.split(';').next().unwrap();
        headers.insert(header::COOKIE, value.parse().unwrap());
        assert_eq!(state.guard.role(&headers), Role::Writer);
    }

    #[tokio::test]
    async fn a_wrong_token_or_a_missing_csrf_token_gives_no_cookie() {
        let guarded = guarded_service();
        let state = guarded.state.clone();
        let csrf = Some(state.guard.csrf_token());
        let wrong = login(State(state.clone()), login_form("guess", csrf)).await;
        assert_eq!(wrong.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(wrong.headers()[header::CACHE_CONTROL], "no-store");
        assert!(wrong.headers().get(header::SET_COOKIE).is_none());
        assert!(text(wrong)
            .await
            .contains("that token is neither DATABUILD_TOKEN"));

        let forged = login(State(state), login_form("secret", None)).await;
        assert_eq!(forged.status(), StatusCode::FORBIDDEN);
        assert!(forged.headers().get(header::SET_COOKIE).is_none());
    }

    #[tokio::test]
    async fn logging_out_expires_the_cookie_and_needs_the_csrf_token() {
        let guarded = guarded_service();
        let state = guarded.state.clone();
        let form = |csrf: Option<String>| Form(TokenForm { token: None, csrf });
        let refused = logout(State(state.clone()), form(None)).await;
        assert_eq!(refused.status(), StatusCode::FORBIDDEN);
        assert!(refused.headers().get(header::SET_COOKIE).is_none());

        let response = logout(State(state.clone()), form(Some(state.guard.csrf_token()))).await;
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        assert_eq!(response.headers()[header::LOCATION], "/login");
        assert_eq!(
            response.headers()[header::SET_COOKIE],
            "databuild_session=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
        );
    }
}
