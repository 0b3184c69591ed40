//! Another DataBuild service that builds a dataset of ours (`[[dataset]] upstream = "http://..."`):
//! its partition status is our availability, and we ask it to build what our wants need.

use std::io::{BufRead, BufReader};
use std::time::Duration;

use databuild_core::refs::encode_segment;
use serde_json::Value;

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
    let url = format!("{upstream}/api/v1/partitions/{}/status", encode_segment(r));
    let mut response = agent(Some(CALL_TIMEOUT))
        .get(&url)
        .call()
        .map_err(|e| format!("upstream {upstream} does not answer: {e}"))?;
    let code = response.status().as_u16();
    let body: Value = response
        .body_mut()
        .read_json()
        .map_err(|e| format!("upstream {upstream} answered {code} with no JSON: {e}"))?;
    if code != 200 {
        return Err(format!(
            "upstream {upstream} answered {code}: {}",
            body["error"]
        ));
    }
    Ok((
        body["status"].as_str().unwrap_or("missing").to_string(),
        body["built_by"].as_str().map(str::to_string),
    ))
}

/// Asks the upstream service to build `refs`; returns its build request id.
pub fn request_build(upstream: &str, refs: &[String]) -> Result<String, String> {
    let mut request = agent(Some(CALL_TIMEOUT))
        .post(format!("{upstream}/api/v1/builds"))
        .header("Content-Type", "application/json");
    if let Some(auth) = token_header() {
        request = request.header("Authorization", &auth);
    }
    let body = serde_json::json!({ "partitions": refs }).to_string();
    let mut response = request
        .send(&body)
        .map_err(|e| format!("upstream {upstream} does not answer: {e}"))?;
    let code = response.status().as_u16();
    let v: Value = response.body_mut().read_json().unwrap_or(Value::Null);
    match v["build_request_id"].as_str() {
        Some(id) if code == 202 => Ok(id.to_string()),
        _ => Err(format!(
            "upstream {upstream} refused the build ({code}): {}",
            v["error"]
        )),
    }
}

/// Follows an upstream build's event stream until it ends; returns its final status.
pub fn follow(upstream: &str, id: &str) -> Result<String, String> {
    let url = format!(
        "{upstream}/api/v1/builds/{}/events/stream",
        encode_segment(id)
    );
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
        if let Ok(e) = serde_json::from_str::<Value>(data.trim()) {
            if e["kind"] == "build_request" {
                last = e["status"].as_str().unwrap_or("unknown").to_string();
            }
        }
    }
    Ok(last)
}
