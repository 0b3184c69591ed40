//! Another DataBuild service that builds a dataset of ours (`[[dataset]] upstream = "http://..."`):
//! its partition status is our availability, and we ask it to build what our wants need.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use crate::answers::{route, BuildAccepted, ErrorBody, PartitionStatus};

/// How long one call to an upstream service may take (SSE streams excepted).
const CALL_TIMEOUT: Duration = Duration::from_secs(10);

fn agent(timeout: Option<Duration>) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(timeout)
        .build()
        .into()
}

/// A failed call to an upstream service. Each message shows its cause (they end up in a want's
/// message and the reconciler's log), so the cause is a plain field rather than a `source`,
/// which `{:#}` would print twice.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    #[error("upstream {upstream} does not answer: {cause}")]
    NoAnswer {
        upstream: String,
        cause: Box<ureq::Error>,
    },
    #[error("upstream {upstream} answered {code} with no JSON: {cause}")]
    NotJson {
        upstream: String,
        code: u16,
        cause: Box<ureq::Error>,
    },
    /// `error`: the answer's `error`, or its body when it is not an error answer.
    #[error("upstream {upstream} answered {code}: {error}")]
    Answered {
        upstream: String,
        code: u16,
        error: String,
    },
    #[error("upstream {upstream} refused the build ({code}): {error}")]
    Refused {
        upstream: String,
        code: u16,
        error: String,
    },
    #[error("upstream {upstream} answered what this databuild cannot read: {cause}")]
    Unreadable {
        upstream: String,
        cause: serde_json::Error,
    },
    #[error("cannot follow upstream build {id}: {cause}")]
    Follow { id: String, cause: Box<ureq::Error> },
    #[error("upstream build {id}: {cause}")]
    Stream { id: String, cause: std::io::Error },
}

type Result<T> = std::result::Result<T, UpstreamError>;

/// What an error answer says: its `error`, else the body as it came.
fn error_of(body: String) -> String {
    serde_json::from_str::<ErrorBody>(&body).map_or(body, |e| e.error)
}

fn no_answer(upstream: &str) -> impl FnOnce(ureq::Error) -> UpstreamError + '_ {
    move |cause| UpstreamError::NoAnswer {
        upstream: upstream.to_string(),
        cause: Box::new(cause),
    }
}

/// The partition's status on the upstream service: `(status, built_by)`.
pub fn status(upstream: &str, r: &str) -> Result<(crate::answers::DerivedStatus, Option<String>)> {
    let url = format!("{upstream}{}", route::fill(route::PARTITION_STATUS, r));
    let mut response = agent(Some(CALL_TIMEOUT))
        .get(&url)
        .call()
        .map_err(no_answer(upstream))?;
    let code = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|cause| UpstreamError::NotJson {
            upstream: upstream.to_string(),
            code,
            cause: Box::new(cause),
        })?;
    if code != 200 {
        return Err(UpstreamError::Answered {
            upstream: upstream.to_string(),
            code,
            error: error_of(body),
        });
    }
    let answer: PartitionStatus =
        serde_json::from_str(&body).map_err(|cause| UpstreamError::Unreadable {
            upstream: upstream.to_string(),
            cause,
        })?;
    Ok((answer.status, answer.built_by))
}

/// Asks the upstream service to build `refs`, with `token` as its bearer token
/// (`DATABUILD_UPSTREAM_TOKEN`, read by the binary); returns its build request id.
pub fn request_build_with(upstream: &str, refs: &[String], token: Option<&str>) -> Result<String> {
    let mut request = agent(Some(CALL_TIMEOUT))
        .post(format!("{upstream}{}", route::BUILDS))
        .header("Content-Type", "application/json");
    if let Some(t) = token.filter(|t| !t.is_empty()) {
        request = request.header("Authorization", &format!("Bearer {t}"));
    }
    let body = serde_json::json!({ "partitions": refs }).to_string();
    let mut response = request.send(&body).map_err(no_answer(upstream))?;
    let code = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    match serde_json::from_str::<BuildAccepted>(&body) {
        Ok(a) if code == 202 => Ok(a.build_request_id),
        _ => Err(UpstreamError::Refused {
            upstream: upstream.to_string(),
            code,
            error: error_of(body),
        }),
    }
}

/// Follows an upstream build's event stream until it ends; returns its final status.
pub fn follow(upstream: &str, id: &str) -> Result<String> {
    let url = format!("{upstream}{}", route::fill(route::BUILD_EVENT_STREAM, id));
    let response = agent(None)
        .get(&url)
        .call()
        .map_err(|cause| UpstreamError::Follow {
            id: id.to_string(),
            cause: Box::new(cause),
        })?;
    let mut last = String::from("unknown");
    let reader = BufReader::new(response.into_body().into_reader());
    for line in reader.lines() {
        let line = line.map_err(|cause| UpstreamError::Stream {
            id: id.to_string(),
            cause,
        })?;
        let Some(data) = line.strip_prefix("data:") else {
            continue;
        };
        // The stream carries the log's events as the log holds them.
        if let Ok(e) = serde_json::from_str::<databuild_log::Event>(data.trim()) {
            if e.kind == databuild_log::Kind::BuildRequest {
                last = e.status.to_string();
            }
        }
    }
    Ok(last)
}
