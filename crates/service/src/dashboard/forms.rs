//! What every dashboard form shares: the CSRF token and token field it carries, the checks it
//! passes before anything is written, and [`TextForm`], which refuses a field that is not UTF-8.

use axum::extract::Form;
use axum::response::{IntoResponse, Response};
use maud::{html, Markup};
use serde::Deserialize;

use super::layout::error_page;
use crate::error::AppError;
use crate::guard::Role;
use crate::AppState;

/// What every state-changing form carries: the CSRF token, and a token field unless the
/// session already may write.
pub(super) fn form_auth(state: &AppState, role: Role) -> Markup {
    html! {
        input type="hidden" name="csrf" value=(state.guard.csrf_token());
        @if state.guard.has_token() && role < Role::Writer { input type="password" name="token" placeholder="token" required; }
    }
}

/// A form whose every field is text as sent: a field that is not UTF-8 once decoded is refused
/// (400, as the JSON API refuses it), where `Form` would put U+FFFD in its place and act on
/// another ref than the one typed.
pub struct TextForm<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for TextForm<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        // The body limit layer bounds what is read here.
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|e| error_page(AppError::bad_request(format!("cannot read the form: {e}"))))?;
        if let Some(field) = not_text_field(&bytes) {
            return Err(error_page(AppError::bad_request(format!(
                "the form's field `{field}` is not UTF-8 text"
            ))));
        }
        let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
        Form::<T>::from_request(req, state)
            .await
            .map(|Form(form)| TextForm(form))
            .map_err(IntoResponse::into_response)
    }
}

/// The name of the first field of a URL-encoded form whose name or value is not UTF-8 once
/// decoded (`+` a space, `%XX` a byte).
pub(super) fn not_text_field(body: &[u8]) -> Option<String> {
    fn decode(part: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(part.len());
        let mut i = 0;
        while i < part.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            match part[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < part.len() => match (hex(part[i + 1]), hex(part[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                },
                b => out.push(b),
            }
            i += 1;
        }
        out
    }
    body.split(|&b| b == b'&').find_map(|pair| {
        let mut halves = pair.splitn(2, |&b| b == b'=');
        let name = decode(halves.next().unwrap_or_default());
        let value = decode(halves.next().unwrap_or_default());
        let ok = std::str::from_utf8(&name).is_ok() && std::str::from_utf8(&value).is_ok();
        (!ok).then(|| String::from_utf8_lossy(&name).into_owned())
    })
}

pub(super) fn csrf_refused() -> Response {
    error_page(AppError::new(
        axum::http::StatusCode::FORBIDDEN,
        "csrf",
        "this form is out of date or was not sent by this dashboard; reload the page and try again",
    ))
}

/// The checks of every form: its CSRF token, then the right to write (the session's, or the
/// form's token field). `Some(error page)` when one fails.
pub(super) fn form_refused(
    state: &AppState,
    session: Role,
    csrf: Option<&str>,
    token: Option<&str>,
) -> Option<Response> {
    if !state.guard.csrf_ok(csrf) {
        return Some(csrf_refused());
    }
    if crate::guard::form_role(&state.guard, session, token) < Role::Writer {
        return Some(error_page(AppError::unauthorized(true)));
    }
    None
}

#[derive(Deserialize)]
pub struct TokenForm {
    pub(super) token: Option<String>,
    pub(super) csrf: Option<String>,
}

#[cfg(test)]
mod tests {
    use axum::extract::FromRequest;
    use axum::http::StatusCode;

    use super::super::testing::{guarded_service, open_service, text};
    use super::*;

    #[derive(Debug, Deserialize)]
    struct RefsForm {
        refs: String,
    }

    async fn read_form(body: &'static [u8]) -> Result<TextForm<RefsForm>, Response> {
        let request = axum::http::Request::post("/ui/build")
            .header("content-type", "application/x-www-form-urlencoded")
            .body(axum::body::Body::from(body))
            .unwrap();
        TextForm::<RefsForm>::from_request(request, &()).await
    }

    #[tokio::test]
    async fn a_text_form_reads_what_was_typed_and_refuses_what_is_not_text() {
        let TextForm(form) = read_form(b"refs=reviews%2Fdate%3D2020-01-01+caf%C3%A9")
            .await
            .unwrap();
        assert_eq!(form.refs, "reviews/date=2020-01-01 café");
        let Err(refused) = read_form(b"csrf=x&refs=slow/%FFQ").await else {
            panic!("a field that is not UTF-8 is read");
        };
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert!(text(refused)
            .await
            .contains("the form's field `refs` is not UTF-8 text"));
    }

    #[test]
    fn every_form_carries_the_csrf_token_and_asks_for_a_token_only_when_the_session_cannot_write() {
        let open = open_service();
        let csrf = open.state.guard.csrf_token();
        let html = form_auth(&open.state, Role::Anonymous).into_string();
        assert_eq!(
            html,
            format!(r#"<input type="hidden" name="csrf" value="{csrf}">"#)
        );
        let guarded = guarded_service();
        for role in [Role::Anonymous, Role::Reader] {
            let html = form_auth(&guarded.state, role).into_string();
            assert!(
                html.contains(r#"<input type="password" name="token""#),
                "{role:?}"
            );
        }
        let html = form_auth(&guarded.state, Role::Writer).into_string();
        assert!(!html.contains("password"));
    }

    #[tokio::test]
    async fn a_form_is_refused_without_the_csrf_token_then_without_the_right_to_write() {
        let guarded = guarded_service();
        let state = &guarded.state;
        let csrf = state.guard.csrf_token();
        let refused = |session, csrf: Option<&str>, token| {
            form_refused(state, session, csrf, token).map(|r| r.status())
        };
        // The CSRF token comes first: even a writer's form without it is refused.
        assert_eq!(
            refused(Role::Writer, Some("forged"), None),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            refused(Role::Writer, None, Some("secret")),
            Some(StatusCode::FORBIDDEN)
        );
        assert_eq!(
            refused(Role::Reader, Some(&csrf), None),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(
            refused(Role::Anonymous, Some(&csrf), Some("wrong")),
            Some(StatusCode::UNAUTHORIZED)
        );
        assert_eq!(refused(Role::Anonymous, Some(&csrf), Some("secret")), None);
        assert_eq!(refused(Role::Writer, Some(&csrf), None), None);
        let page = text(csrf_refused()).await;
        assert!(page.contains("this form is out of date"));
        assert!(page.starts_with("<!DOCTYPE html>"));
    }

    #[test]
    fn a_form_field_that_is_not_utf8_once_decoded_is_named() {
        assert_eq!(not_text_field(b"refs=a%2Fb+c&csrf=x"), None);
        assert_eq!(not_text_field("refs=caf%C3%A9&x=é".as_bytes()), None);
        assert_eq!(
            not_text_field(b"csrf=x&refs=slow/%FFQ"),
            Some("refs".into())
        );
        assert_eq!(not_text_field(b"refs=slow/\xffQ"), Some("refs".into()));
        // A `%` that starts no escape stays as it is.
        assert_eq!(not_text_field(b"refs=100%&x=%zz%4"), None);
        assert_eq!(not_text_field(b""), None);
    }
}
