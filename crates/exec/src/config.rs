//! What the engine is told about its surroundings: the clock and the credentials it passes on.
//! The binary reads them once, at its edge (`databuild`'s `settings`), and gives them to the
//! [`Engine`](crate::Engine) as an [`EngineConfig`]; nothing in this crate reads the environment
//! for configuration. (The environment a job run is given, `DATABUILD_OUTPUTS` and the rest, is
//! the engine's output, not its configuration.)

/// Which day it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// The system's clock (UTC).
    #[default]
    System,
    /// A fixed day (`DATABUILD_NOW`): to replay past days or to test retention.
    Fixed(chrono::NaiveDate),
}

impl Clock {
    /// A clock fixed at `text`: a date (`2026-02-01`) or an RFC 3339 time; `None` if it is
    /// neither.
    pub fn fixed(text: &str) -> Option<Clock> {
        databuild_core::pattern::parse_date(text)
            .or_else(|| {
                chrono::DateTime::parse_from_rfc3339(text)
                    .ok()
                    .map(|t| t.date_naive())
            })
            .map(Clock::Fixed)
    }

    /// Today's date, `YYYY-MM-DD`.
    pub fn today(&self) -> String {
        let day = match self {
            Clock::Fixed(day) => *day,
            Clock::System => {
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                chrono::DateTime::from_timestamp(secs, 0)
                    .expect("now is a valid time")
                    .date_naive()
            }
        };
        databuild_core::pattern::format_date(day)
    }
}

/// The engine's configuration.
#[derive(Clone)]
pub struct EngineConfig {
    pub clock: Clock,
    /// The bearer token to ask upstream services for builds with (`DATABUILD_UPSTREAM_TOKEN`).
    pub upstream_token: Option<String>,
    /// How long a process on another machine sharing the log may stay silent before its work
    /// is taken over (`DATABUILD_LEASE_TIMEOUT`; every instance on one log must agree on it).
    pub lease_timeout: std::time::Duration,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            clock: Clock::default(),
            upstream_token: None,
            lease_timeout: crate::run::lease::DEFAULT_TIMEOUT,
        }
    }
}

/// Redacts the token: configurations get logged.
impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("clock", &self.clock)
            .field("lease_timeout", &self.lease_timeout)
            .field(
                "upstream_token",
                &self.upstream_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}
