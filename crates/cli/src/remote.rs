//! `--server URL`: the commands as HTTP requests to a running `databuild serve`.

use std::io::{BufRead, BufReader};

use anyhow::Context as _;
use serde_json::Value;

use crate::UserError;

pub struct Remote {
    base: String,
    agent: ureq::Agent,
    token: Option<String>,
}

/// Percent-encodes one path segment (a ref's `/` becomes `%2F`), as the dashboard does.
pub use databuild_service::encode_segment as segment;

/// A query string from optional pairs.
pub fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| v.as_ref().map(|v| format!("{k}={}", segment(v))))
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

impl Remote {
    pub fn new(base: &str) -> Remote {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(None)
            .build();
        Remote {
            base: base.trim_end_matches('/').to_string(),
            agent: config.into(),
            // The write token when there is one, else the read token: a reader's CLI reads.
            token: crate::settings::secret("DATABUILD_TOKEN")
                .or_else(|| crate::settings::secret("DATABUILD_READ_TOKEN")),
        }
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// Turns an answer into its body, or into the service's error: 4xx are the request's fault
    /// (exit 2), the rest the system's.
    fn finish(&self, mut response: ureq::http::Response<ureq::Body>) -> anyhow::Result<String> {
        let status = response.status();
        let body = response
            .body_mut()
            .read_to_string()
            .context("reading the service's answer")?;
        if status.is_success() {
            return Ok(body);
        }
        let message = serde_json::from_str::<Value>(&body)
            .ok()
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_else(|| format!("the service answered {status}"));
        if status.is_client_error() {
            Err(UserError(message).into())
        } else {
            Err(anyhow::anyhow!("{message}"))
        }
    }

    fn unreachable(&self, e: ureq::Error) -> anyhow::Error {
        anyhow::anyhow!("cannot reach the databuild service at {}: {e}", self.base)
    }

    /// `Authorization: Bearer <token>` on every request, reads included (a service may guard
    /// them).
    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        match &self.token {
            Some(t) => request.header("Authorization", &format!("Bearer {t}")),
            None => request,
        }
    }

    pub fn get_text(&self, path: &str) -> anyhow::Result<String> {
        let response = self
            .authorized(self.agent.get(&self.url(path)))
            .call()
            .map_err(|e| self.unreachable(e))?;
        self.finish(response)
    }

    pub fn get(&self, path: &str) -> anyhow::Result<Value> {
        Ok(serde_json::from_str(&self.get_text(path)?)?)
    }

    pub fn post(&self, path: &str, body: &Value) -> anyhow::Result<Value> {
        let response = self
            .authorized(self.agent.post(&self.url(path)))
            .send_json(body)
            .map_err(|e| self.unreachable(e))?;
        Ok(serde_json::from_str(&self.finish(response)?)?)
    }

    pub fn delete(&self, path: &str) -> anyhow::Result<Value> {
        let response = self
            .authorized(self.agent.delete(&self.url(path)))
            .call()
            .map_err(|e| self.unreachable(e))?;
        Ok(serde_json::from_str(&self.finish(response)?)?)
    }

    /// Reads a Server-Sent Events stream, calling `on_event` with each event's data, until the
    /// stream ends.
    pub fn stream(&self, path: &str, mut on_event: impl FnMut(Value)) -> anyhow::Result<()> {
        let response = self
            .authorized(self.agent.get(&self.url(path)))
            .call()
            .map_err(|e| self.unreachable(e))?;
        if !response.status().is_success() {
            self.finish(response)?;
            return Ok(());
        }
        let reader = BufReader::new(response.into_body().into_reader());
        for line in reader.lines() {
            let line = line.context("reading the event stream")?;
            if let Some(data) = line.strip_prefix("data:") {
                if let Ok(v) = serde_json::from_str(data.trim_start()) {
                    on_event(v);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_refs_as_one_segment() {
        assert_eq!(
            segment("reviews/date=2020-01-01"),
            "reviews%2Fdate=2020-01-01"
        );
        assert_eq!(segment("a b?c"), "a%20b%3Fc");
    }
}
