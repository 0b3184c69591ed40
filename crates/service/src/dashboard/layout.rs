//! The page frame: style, nav, htmx and the copy script (all embedded), the error page, and
//! [`page`], which runs engine work off the async threads and turns its failure into an error
//! page.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{header, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use databuild_exec::Engine;
use maud::{html, Markup, PreEscaped, DOCTYPE};

use crate::environment::Env;
use crate::error::AppError;
use crate::AppState;

const HTMX: &str = include_str!("../../assets/htmx.min.js");

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1f2933; background: #f7f9fb; }
header { background: #1f2933; padding: 8px 20px; display: flex; gap: 18px; align-items: center; }
header a { color: #e4e7eb; text-decoration: none; } header a.brand { font-weight: 700; color: #fff; }
main { padding: 16px 20px; max-width: 1200px; }
h1 { font-size: 20px; margin: 4px 0 12px; } h2 { font-size: 16px; margin: 18px 0 8px; }
table { border-collapse: collapse; background: #fff; width: 100%; margin-bottom: 8px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e4e7eb; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; }
.badge { display: inline-block; padding: 1px 7px; border-radius: 9px; color: #fff; font-size: 12px; }
.muted { color: #7b8794; } .empty { color: #7b8794; font-style: italic; padding: 8px 0; }
.error { background: #fde8e8; border: 1px solid #d64545; padding: 10px; border-radius: 4px; }
form.inline { display: inline; } input[type=text], textarea { font: inherit; padding: 4px; }
textarea { width: 100%; } button { font: inherit; padding: 4px 12px; cursor: pointer; }
pre.log { background: #1f2933; color: #e4e7eb; padding: 10px; overflow: auto; max-height: 480px; }
.scroll { overflow: auto; background: #fff; border: 1px solid #e4e7eb; padding: 6px; }
code { font-size: 13px; }
button.copy { font-size: 11px; padding: 0 4px; margin-left: 3px; border: 1px solid #cbd2d9; background: #fff; border-radius: 3px; }
.id { white-space: nowrap; }
.legend .badge { margin-right: 4px; }
progress { width: 160px; }
h2.inline { display: inline-block; } summary { cursor: pointer; }
header form.env { margin-left: auto; color: #e4e7eb; } header form.env select { font: inherit; }
pre.diff { background: #fff; border: 1px solid #e4e7eb; padding: 6px; overflow: auto; max-height: 360px; }
"#;

/// The copy buttons beside ids: the full id to the clipboard (where the browser allows it).
const COPY: &str = r#"
document.addEventListener('click', function (e) {
  var b = e.target.closest && e.target.closest('button.copy');
  if (!b) return;
  e.preventDefault();
  var done = function () { b.textContent = 'copied'; setTimeout(function () { b.textContent = 'copy'; }, 1200); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(b.dataset.copy).then(done, function () {});
  } else {
    var t = document.createElement('textarea'); t.value = b.dataset.copy; document.body.appendChild(t);
    t.select(); try { document.execCommand('copy'); done(); } catch (_) {} t.remove();
  }
});
"#;

pub(super) async fn htmx() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        HTMX,
    )
}

pub(super) fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                link rel="icon" href="data:,";
                title { (title) " · DataBuild" }
                style { (PreEscaped(STYLE)) }
                script src="/assets/htmx.min.js" {}
            }
            body {
                header {
                    a.brand href="/" { "DataBuild" }
                    a href="/graph" { "Graph" }
                    a href="/builds" { "Builds" }
                    a href="/partitions" { "Partitions" }
                    a href="/datasets" { "Datasets" }
                    a href="/sources" { "Sources" }
                    a href="/wants" { "Wants" }
                    a href="/jobs" { "Jobs" }
                    a href="/analyze" { "Analyze" }
                    a href="/sql" { "SQL" }
                    a href="/environments" { "Environments" }
                    (selector())
                }
                main { (body) }
                script { (PreEscaped(COPY)) }
            }
        }
    }
}

/// A failure as a page, with the API's message.
pub(super) fn error_page(e: AppError) -> Response {
    let status = e.status;
    let page = layout(
        "Error",
        html! { h1 { "Something is wrong" } p.error { (e.message) } },
    );
    crate::error::busy_says_when((status, page).into_response())
}

/// Engine work off the async threads, on the full engine of the page's environment: for pages
/// that derive no status (those that do take the caller's role: [`page_as`]).
pub(super) async fn page<T: Send + 'static>(
    env: &Env,
    f: impl FnOnce(&Engine) -> Result<T, AppError> + Send + 'static,
) -> Result<T, Response> {
    page_as(env, crate::guard::Role::Writer, f).await
}

/// [`page`] on the engine `role` reads with ([`Env::engine_for`]): what every page that may
/// derive a status uses.
pub(super) async fn page_as<T: Send + 'static>(
    env: &Env,
    role: crate::guard::Role,
    f: impl FnOnce(&Engine) -> Result<T, AppError> + Send + 'static,
) -> Result<T, Response> {
    crate::ops::blocking_as(env, role, f)
        .await
        .map_err(error_page)
}

/// The cookie remembering the environment the dashboard was last switched to.
pub(super) const ENV_COOKIE: &str = "databuild_env";

/// How long the choice is remembered: a year.
const ENV_COOKIE_SECONDS: u64 = 365 * 24 * 3600;

tokio::task_local! {
    /// The page being drawn's environment and those to choose from, for [`layout`]'s selector.
    static CHOSEN: Chosen;
}

/// What the selector shows: the page's environment, every environment, and the page's own
/// address (the switch stays on it).
#[derive(Clone)]
struct Chosen {
    current: String,
    names: Vec<String>,
    path: String,
    /// The page's query but `env`, carried over as hidden fields.
    query: Vec<(String, String)>,
}

/// Every page's environment: `?env=` (then remembered in the [`ENV_COOKIE`]), else the header,
/// else the cookie, else prod. One named outright that does not exist is an error page; a
/// remembered one since dropped falls back to prod, and the cookie is cleared. The [`Env`] rides
/// in the request's extensions, where the pages' `Env` extractor finds it.
pub(super) async fn choose_environment(
    State(state): State<Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let asked = match crate::environment::requested(request.uri(), request.headers()) {
        Ok(asked) => asked,
        Err(e) => return error_page(e),
    };
    let remembered = crate::guard::cookie(request.headers(), ENV_COOKIE).map(str::to_string);
    let (env, cookie) = match (&asked, remembered) {
        (Some(name), _) => match Env::named(&state, name).await {
            Ok(env) => (env, Some(ENV_COOKIE_SECONDS)),
            Err(e) => return error_page(e),
        },
        (None, Some(name)) => match Env::named(&state, &name).await {
            Ok(env) => (env, None),
            Err(_) => (Env::prod(&state), Some(0)),
        },
        (None, None) => (Env::prod(&state), None),
    };
    let chosen = Chosen {
        current: env.name().to_string(),
        names: environment_names(&state).await,
        path: request.uri().path().to_string(),
        query: axum::extract::Query::<Vec<(String, String)>>::try_from_uri(request.uri())
            .map(|q| q.0)
            .unwrap_or_default()
            .into_iter()
            .filter(|(k, _)| k != crate::environment::ENV_PARAM)
            .collect(),
    };
    let name = env.name().to_string();
    request.extensions_mut().insert(env);
    let mut response = CHOSEN.scope(chosen, next.run(request)).await;
    if let Some(max_age) = cookie {
        let value = format!("{ENV_COOKIE}={name}; Path=/; SameSite=Lax; Max-Age={max_age}");
        if let Ok(v) = HeaderValue::from_str(&value) {
            response.headers_mut().append(header::SET_COOKIE, v);
        }
    }
    response
}

/// Every environment's name, prod first (prod alone if they cannot be listed: the selector is
/// no reason to fail a page).
async fn environment_names(state: &Arc<AppState>) -> Vec<String> {
    let engine = state.engine.clone();
    tokio::task::spawn_blocking(move || engine.environments.names())
        .await
        .ok()
        .and_then(Result::ok)
        .unwrap_or_else(|| vec![databuild_log::environments::PROD.to_string()])
}

/// The header's environment selector: a GET form back to the page, in the environment chosen.
fn selector() -> Markup {
    let Ok(chosen) = CHOSEN.try_with(Chosen::clone) else {
        return html! {};
    };
    html! {
        form.env method="get" action=(chosen.path) {
            @for (k, v) in &chosen.query { input type="hidden" name=(k) value=(v); }
            label { "env " select name="env" onchange="this.form.submit()" {
                @for n in &chosen.names { option value=(n) selected[*n == chosen.current] { (n) } }
            } }
            " " button type="submit" { "switch" }
        }
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;

    use super::super::testing::{open_service, text};
    use super::*;

    #[test]
    fn a_page_has_its_title_the_nav_and_its_body_escaped_in_main() {
        let html = layout("Jobs & runs", html! { p { "<b>" } }).into_string();
        assert!(html.starts_with("<!DOCTYPE html><html lang=\"en\"><head>"));
        assert!(html.contains("<title>Jobs &amp; runs · DataBuild</title>"));
        assert!(html.contains("<main><p>&lt;b&gt;</p></main>"));
        let nav: Vec<&str> = html
            .split("<a href=\"")
            .skip(1)
            .map(|a| &a[..a.find('"').unwrap()])
            .collect();
        assert_eq!(
            nav,
            [
                "/graph",
                "/builds",
                "/partitions",
                "/datasets",
                "/sources",
                "/wants",
                "/jobs",
                "/analyze",
                "/sql",
                "/environments"
            ]
        );
        assert!(html.contains("<a class=\"brand\" href=\"/\">DataBuild</a>"));
        // The embedded script and style are not escaped.
        assert!(html.contains("e.target.closest('button.copy')"));
        assert!(html.contains("header a { color: #e4e7eb;"));
    }

    #[tokio::test]
    async fn an_error_is_a_page_with_its_status_and_its_message_escaped() {
        let response = error_page(AppError::not_found("no build `<x>`"));
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        let html = text(response).await;
        assert!(html.contains("<title>Error · DataBuild</title>"));
        assert!(
            html.contains("<h1>Something is wrong</h1><p class=\"error\">no build `&lt;x&gt;`</p>")
        );
    }

    #[tokio::test]
    async fn engine_work_gives_its_value_or_the_page_of_its_error() {
        let service = open_service();
        let prod = Env::prod(&service.state);
        let name = page(&prod, |engine| Ok(engine.graph.name.clone())).await;
        assert_eq!(name.ok().as_deref(), Some("tiny"));
        let failed = page(&prod, |_| -> Result<(), _> {
            Err(AppError::bad_request("not a ref"))
        })
        .await;
        let Err(response) = failed else {
            panic!("the error is lost")
        };
        assert_eq!(response.status(), StatusCode::BAD_REQUEST);
        assert!(text(response).await.contains("not a ref"));
    }

    #[tokio::test]
    async fn htmx_is_served_as_javascript_cached_for_an_hour() {
        let response = htmx().await.into_response();
        let headers = response.headers();
        assert_eq!(headers[header::CONTENT_TYPE], "text/javascript");
        assert_eq!(headers[header::CACHE_CONTROL], "max-age=3600");
        assert_eq!(text(response).await, HTMX);
    }
}
