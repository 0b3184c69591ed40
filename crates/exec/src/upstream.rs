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

fn token_header() -> Option<String> {
    std::env::var("DATABUILD_UPSTREAM_TOKEN")
        .ok()
        .filter(|t| !t.is_empty())
        .map(|t| format!("Bearer {t}"))
}

/// The partition's status on the upstream service: `(status, built_by)`.
pub fn status(upstream: &str, r: &str) -> Result<(String, Option<String>), String> {
    let url = format!("{upstream}{}", route::fill(route::PARTITION_STATUS, r));
    let mut response = agent(Some(CALL_TIMEOUT))
        .get(&url)
        .call()
        .map_err(|e| format!("upstream {upstream} does not answer: {e}"))?;
    let code = response.status().as_u16();
    let body = response
        .body_mut()
        .read_to_string()
        .map_err(|e| format!("upstream {upstream} answered {code} unreadably: {e}"))?;
    if code != 200 {
        let why = serde_json::from_str::<ErrorBody>(&body).map_or(body, |e| e.error);
        return Err(format!("upstream {upstream} answered {code}: {why}"));
    }
    let answer: PartitionStatus = serde_json::from_str(&body).map_err(|e| {
        format!("upstream {upstream} answered what this databuild cannot read: {e}")
    })?;
    Ok((answer.status, answer.built_by))
}

/// Asks the upstream service to build `refs`; returns its build request id.
pub fn request_build(upstream: &str, refs: &[String]) -> Result<String, String> {
    let mut request = agent(Some(CALL_TIMEOUT))
        .post(format!("{upstream}{}", route::BUILDS))
        .header("Content-Type", "application/json");
    if let Some(auth) = token_header() {
        request = request.header("Authorization", &auth);
    }
    let body = serde_json::json!({ "partitions": refs }).to_string();
    let mut response = request
        .send(&body)
        .map_err(|e| format!("upstream {upstream} does not answer: {e}"))?;
    let code = response.status().as_u16();
    let body = response.body_mut().read_to_string().unwrap_or_default();
    match serde_json::from_str::<BuildAccepted>(&body) {
        Ok(a) if code == 202 => Ok(a.build_request_id),
        _ => Err(format!(
            "upstream {upstream} refused the build ({code}): {}",
            serde_json::from_str::<ErrorBody>(&body).map_or(body, |e| e.error)
        )),
    }
}

/// Follows an upstream build's event stream until it ends; returns its final status.
pub fn follow(upstream: &str, id: &str) -> Result<String, String> {
    let url = format!("{upstream}{}", route::fill(route::BUILD_EVENT_STREAM, id));
    let response = agent(None)
        .get(&url)
        .call()
        .map_err(|e| format!("cannot follow upstream build {id}: {e}"))?;
    let mut last = String::from("unknown");
    let reader = BufReader::new(response.into_body().into_reader());
    for line in reader.lines() {
        let line = line.map_err(|e| format!("upstream build {id}: {e}"))?;
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
