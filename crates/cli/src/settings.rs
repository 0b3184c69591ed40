//! Settings the binary reads from the environment, each read once, at the edge, into plain
//! values the engine and the service are given.

use std::sync::OnceLock;

use crate::UserError;

/// A secret from the environment; empty means unset.
pub fn secret(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|t| !t.is_empty())
}

/// The largest count a setting takes (more would be no limit at all, and overflow semaphores).
const MAX_COUNT: usize = 100_000_000;

/// A count from 1 to [`MAX_COUNT`] from the environment, or `default` when unset.
pub fn count(var: &str, default: usize) -> anyhow::Result<usize> {
    match std::env::var(var) {
        Err(_) => Ok(default),
        Ok(v) => v
            .trim()
            .replace('_', "")
            .parse::<usize>()
            .ok()
            .filter(|n| (1..=MAX_COUNT).contains(n))
            .ok_or_else(|| {
                UserError(format!(
                    "{var}={v} is not a whole number from 1 to {MAX_COUNT} (unset it for {default})"
                ))
                .into()
            }),
    }
}

/// An interval from the environment (seconds, `0.2`, or a duration, `90s`, `5m`), or `default`
/// when unset.
pub fn interval(var: &str, default: std::time::Duration) -> anyhow::Result<std::time::Duration> {
    match std::env::var(var) {
        Err(_) => Ok(default),
        Ok(v) => databuild_service::parse_interval(v.trim()).ok_or_else(|| {
            UserError(format!(
                "{var}={v} is not a positive interval: seconds (`0.5`) or a duration (`90s`, \
                 `5m`); unset it for {}",
                humantime::format_duration(default)
            ))
            .into()
        }),
    }
}

/// The most refs one request may name, braces expanded (`DATABUILD_MAX_REFS`).
pub fn max_refs() -> anyhow::Result<usize> {
    static MAX_REFS: OnceLock<Result<usize, String>> = OnceLock::new();
    MAX_REFS
        .get_or_init(|| {
            count("DATABUILD_MAX_REFS", databuild_core::DEFAULT_MAX_REFS).map_err(|e| e.to_string())
        })
        .clone()
        .map_err(|e| UserError(e).into())
}

/// The engine's configuration (`DATABUILD_NOW`, `DATABUILD_UPSTREAM_TOKEN`,
/// `DATABUILD_LEASE_TIMEOUT`). A `DATABUILD_NOW` that is neither a date nor an RFC 3339 time
/// leaves the system clock; a lease timeout that does not parse is an error naming it.
pub fn engine_config(
    graph: &databuild_core::Graph,
) -> anyhow::Result<databuild_exec::EngineConfig> {
    Ok(databuild_exec::EngineConfig {
        openlineage: openlineage(graph)?,
        clock: std::env::var("DATABUILD_NOW")
            .ok()
            .and_then(|v| databuild_exec::Clock::fixed(&v))
            .unwrap_or_default(),
        upstream_token: secret("DATABUILD_UPSTREAM_TOKEN"),
        lease_timeout: lease_timeout()?,
        configs: databuild_exec::ConfigAccess::Run,
    })
}

/// Where run events go as OpenLineage, read as every OpenLineage client reads it: the
/// environment's `OPENLINEAGE_URL`, `OPENLINEAGE_ENDPOINT` (default `api/v1/lineage`),
/// `OPENLINEAGE_NAMESPACE` and `OPENLINEAGE_API_KEY` over the graph's `[openlineage]` (whose
/// `api_key_env` names the key's variable instead); off without a URL or with
/// `OPENLINEAGE_DISABLED=true`.
fn openlineage(
    graph: &databuild_core::Graph,
) -> anyhow::Result<Option<databuild_exec::openlineage::OpenLineageConfig>> {
    let disabled = std::env::var("OPENLINEAGE_DISABLED").unwrap_or_default();
    if disabled.eq_ignore_ascii_case("true") || disabled == "1" {
        return Ok(None);
    }
    let file = graph.openlineage.clone().unwrap_or_default();
    let Some(url) = secret("OPENLINEAGE_URL").or(file.url) else {
        return Ok(None);
    };
    if !(url.starts_with("http://") || url.starts_with("https://")) {
        return Err(UserError(format!(
            "OPENLINEAGE_URL={url} is not an http:// or https:// URL of an OpenLineage receiver \
             (such as Marquez's `http://localhost:5000`); unset it to send no lineage"
        ))
        .into());
    }
    let endpoint = secret("OPENLINEAGE_ENDPOINT").unwrap_or_else(|| "api/v1/lineage".into());
    let key_var = file.api_key_env.as_deref().unwrap_or("OPENLINEAGE_API_KEY");
    Ok(Some(databuild_exec::openlineage::OpenLineageConfig {
        endpoint: format!(
            "{}/{}",
            url.trim_end_matches('/'),
            endpoint.trim_start_matches('/')
        ),
        namespace: secret("OPENLINEAGE_NAMESPACE")
            .or(file.namespace)
            .unwrap_or_else(|| graph.name.clone()),
        api_key: secret(key_var),
    }))
}

/// `DATABUILD_LEASE_TIMEOUT`, between 2 s (renewals every third of a second) and a day.
fn lease_timeout() -> anyhow::Result<std::time::Duration> {
    use std::time::Duration;
    let timeout = interval(
        "DATABUILD_LEASE_TIMEOUT",
        databuild_exec::run::lease::DEFAULT_TIMEOUT,
    )?;
    if !(Duration::from_secs(2)..=Duration::from_secs(86_400)).contains(&timeout) {
        return Err(UserError(format!(
            "DATABUILD_LEASE_TIMEOUT={timeout:?} is out of range: give 2 s to 1 day (`30s`, the default)"
        ))
        .into());
    }
    Ok(timeout)
}

/// How the event log is opened (`DATABUILD_SQL_ROLE`: the role user SQL runs as on PostgreSQL).
pub fn log_options() -> databuild_log::OpenOptions {
    databuild_log::OpenOptions {
        sql_role: secret("DATABUILD_SQL_ROLE"),
    }
}
