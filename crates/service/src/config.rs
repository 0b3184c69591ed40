//! What a service is told once, at start: its limits ([`Limits`]), how often its background work
//! runs ([`Intervals`]) and who may do what ([`crate::guard::Access`]), together a
//! [`ServeConfig`]. The binary reads them from its flags and environment; nothing here does.

use std::time::Duration;

use crate::guard;

/// How much one service takes on at once, read once at start.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The most refs one request may name, braces expanded (`DATABUILD_MAX_REFS`).
    pub max_refs: usize,
    /// SQL queries running at once (`DATABUILD_SQL_CONCURRENCY`); more are answered 429.
    pub sql_queries: usize,
    /// Analyses planning at once (`DATABUILD_ANALYZE_CONCURRENCY`, the API's and the
    /// dashboard's); more are answered 429.
    pub analyses: usize,
    /// Event streams open at once (`DATABUILD_MAX_STREAMS`); more are answered 429.
    pub event_streams: usize,
    /// Connections per client address and the first byte's timeout (see `connections`).
    pub connections: crate::connections::ConnectionLimits,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_refs: databuild_core::DEFAULT_MAX_REFS,
            sql_queries: 4,
            analyses: 2,
            event_streams: 64,
            connections: Default::default(),
        }
    }
}

/// How often the service's background work runs.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    /// Sealing ended days, ingesting dropped files, expiring raw data
    /// (`DATABUILD_SOURCE_INTERVAL`).
    pub sources: Duration,
    /// Probing what wants wait for (`DATABUILD_WANT_PROBE_INTERVAL`).
    pub want_probes: Duration,
    /// Trying again a want whose build failed, the first time (`DATABUILD_WANT_RETRY_INTERVAL`);
    /// doubled after each further failure, up to an hour (see
    /// [`databuild_core::wants::retry_delay`]).
    pub want_retry: Duration,
    /// Closing builds whose driving process is gone (`DATABUILD_DEAD_BUILD_INTERVAL`).
    pub dead_builds: Duration,
    /// Probing the external partitions expected next (`DATABUILD_ARRIVAL_PROBE_INTERVAL`).
    pub arrival_probes: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals {
            sources: Duration::from_secs(60),
            want_probes: Duration::from_secs(10),
            want_retry: Duration::from_secs(60),
            dead_builds: Duration::from_secs(2),
            arrival_probes: Duration::from_secs(60),
        }
    }
}

/// Everything `serve` is told at start.
#[derive(Debug, Clone, Default)]
pub struct ServeConfig {
    pub access: guard::Access,
    pub limits: Limits,
    pub intervals: Intervals,
}

/// An interval as written: seconds (`0.2`, `60`) or a duration (`90s`, `5m`).
pub fn parse_interval(v: &str) -> Option<Duration> {
    v.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .or_else(|| humantime::parse_duration(v).ok())
        .filter(|d| !d.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_seconds_or_durations_and_nonsense_is_refused() {
        assert_eq!(parse_interval("0.2"), Some(Duration::from_millis(200)));
        assert_eq!(parse_interval("60"), Some(Duration::from_secs(60)));
        assert_eq!(parse_interval("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_interval("5m"), Some(Duration::from_secs(300)));
        for bad in ["0", "-1", "inf", "NaN", "1e30", "soon", ""] {
            assert_eq!(parse_interval(bad), None, "{bad}");
        }
    }
}
