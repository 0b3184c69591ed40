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
