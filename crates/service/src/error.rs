//! One error type for every handler: a status, a machine-readable code and a message, sent as
//! `{"error": "...", "code": "..."}`. Internal failures are logged and answered generically.

use axum::extract::rejection::{JsonRejection, PathRejection, QueryRejection};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use databuild_exec::EngineError;
use databuild_log::LogError;

pub use databuild_exec::answers::ErrorBody;

#[derive(Debug)]
pub struct AppError {
    pub status: StatusCode,
    pub code: &'static str,
    pub message: String,
}

impl std::fmt::Display for AppError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

impl std::error::Error for AppError {}

impl AppError {
    pub fn new(status: StatusCode, code: &'static str, message: impl Into<String>) -> Self {
        AppError {
            status,
            code,
            message: message.into(),
        }
    }

    pub fn bad_request(message: impl Into<String>) -> Self {
        AppError {
            status: StatusCode::BAD_REQUEST,
            code: "bad_request",
            message: message.into(),
        }
    }

    pub fn not_found(message: impl Into<String>) -> Self {
        AppError {
            status: StatusCode::NOT_FOUND,
            code: "not_found",
            message: message.into(),
        }
    }

    /// A request without the token it needs: the write token, or any token.
    pub fn unauthorized(write: bool) -> Self {
        AppError {
            status: StatusCode::UNAUTHORIZED,
            code: "unauthorized",
            message: if write {
                "this request needs `Authorization: Bearer <DATABUILD_TOKEN>`".into()
            } else {
                "this request needs `Authorization: Bearer <token>` (DATABUILD_TOKEN or DATABUILD_READ_TOKEN)".into()
            },
        }
    }

    /// Too many requests of one kind at once; the caller should retry shortly.
    pub fn busy(what: &str, limit: usize) -> Self {
        AppError {
            status: StatusCode::TOO_MANY_REQUESTS,
            code: "busy",
            message: format!("{limit} {what} are already running; retry in a moment"),
        }
    }

    pub(crate) fn internal(detail: impl std::fmt::Display) -> Self {
        eprintln!("internal error: {detail}");
        AppError {
            status: StatusCode::INTERNAL_SERVER_ERROR,
            code: "internal",
            message: "internal error; see the service's log".into(),
        }
    }
}

impl IntoResponse for AppError {
    fn into_response(self) -> Response {
        let status = self.status;
        let body = ErrorBody {
            error: self.message,
            code: self.code.to_string(),
        };
        busy_says_when((status, Json(body)).into_response())
    }
}

/// A 429 says when to try again (`Retry-After: 1`), as an API answer or a page.
pub(crate) fn busy_says_when(mut response: Response) -> Response {
    if response.status() == StatusCode::TOO_MANY_REQUESTS {
        response.headers_mut().insert(
            axum::http::header::RETRY_AFTER,
            axum::http::HeaderValue::from_static("1"),
        );
    }
    response
}

impl From<JsonRejection> for AppError {
    fn from(r: JsonRejection) -> Self {
        let status = r.status();
        AppError {
            status: if status == StatusCode::PAYLOAD_TOO_LARGE {
                status
            } else {
                StatusCode::BAD_REQUEST
            },
            code: if status == StatusCode::PAYLOAD_TOO_LARGE {
                "too_large"
            } else {
                "bad_json"
            },
            message: r.body_text(),
        }
    }
}

impl From<QueryRejection> for AppError {
    fn from(r: QueryRejection) -> Self {
        AppError::new(StatusCode::BAD_REQUEST, "bad_query", r.body_text())
    }
}

impl From<PathRejection> for AppError {
    fn from(r: PathRejection) -> Self {
        AppError::new(StatusCode::BAD_REQUEST, "bad_path", r.body_text())
    }
}

impl From<LogError> for AppError {
    fn from(e: LogError) -> Self {
        match e {
            LogError::Sql(m) => AppError {
                status: StatusCode::BAD_REQUEST,
                code: "sql_refused",
                message: m,
            },
            LogError::SqlTooLarge(m) => AppError {
                status: StatusCode::BAD_REQUEST,
                code: "sql_too_large",
                message: m,
            },
            LogError::Refused { reason, .. } => AppError {
                status: StatusCode::CONFLICT,
                code: "refused",
                message: reason,
            },
            other => AppError::internal(other),
        }
    }
}

impl From<EngineError> for AppError {
    fn from(e: EngineError) -> Self {
        match e {
            EngineError::Log(l) => l.into(),
            EngineError::Plan(p) => AppError {
                status: StatusCode::BAD_REQUEST,
                code: "unplannable",
                message: format!("cannot plan: {p}"),
            },
            EngineError::NotFound(m) => AppError::not_found(m),
            e @ EngineError::AlreadyEnded { .. } => AppError {
                status: StatusCode::CONFLICT,
                code: "already_ended",
                message: e.to_string(),
            },
            EngineError::Invalid(m) => AppError::bad_request(m),
            EngineError::Conflict(m) => AppError {
                status: StatusCode::CONFLICT,
                code: "conflict",
                message: m,
            },
            e @ EngineError::Code(_) => AppError::bad_request(e.to_string()),
        }
    }
}

impl From<tokio::task::JoinError> for AppError {
    fn from(e: tokio::task::JoinError) -> Self {
        AppError::internal(e)
    }
}
