//! What the engine is told about its surroundings: the clock and the credentials it passes on.
//! The binary reads them once, at its edge (`databuild`'s `settings`), and gives them to the
//! [`Engine`](crate::Engine) as an [`EngineConfig`]; nothing in this crate reads the environment
//! for configuration. (The environment a job run is given, `DATABUILD_OUTPUTS` and the rest, is
//! the engine's output, not its configuration.)

/// Which day and hour it is.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Clock {
    /// The system's clock (UTC).
    #[default]
    System,
    /// A fixed time, UTC (`DATABUILD_NOW`): to replay past days or to test retention.
    Fixed(chrono::NaiveDateTime),
}

impl Clock {
    /// A clock fixed at `text`: a date (`2026-02-01`, its midnight) or an RFC 3339 time (in
    /// UTC); `None` if it is neither.
    pub fn fixed(text: &str) -> Option<Clock> {
        databuild_core::pattern::parse_date(text)
            .and_then(|d| d.and_hms_opt(0, 0, 0))
            .or_else(|| {
                chrono::DateTime::parse_from_rfc3339(text)
                    .ok()
                    .map(|t| t.naive_utc())
            })
            .map(Clock::Fixed)
    }

    /// The time now, UTC.
    pub fn now(&self) -> chrono::NaiveDateTime {
        match self {
            Clock::Fixed(now) => *now,
            Clock::System => {
                let secs = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_secs() as i64);
                chrono::DateTime::from_timestamp(secs, 0)
                    .expect("now is a valid time")
                    .naive_utc()
            }
        }
    }

    /// The time now, ns since the epoch (the system's to the ns, not only the second).
    pub fn now_ns(&self) -> i64 {
        match self {
            Clock::Fixed(now) => now.and_utc().timestamp_nanos_opt().unwrap_or(i64::MAX),
            Clock::System => databuild_log::event::now_ns(),
        }
    }

    /// Today's date, `YYYY-MM-DD`.
    pub fn today(&self) -> String {
        databuild_core::pattern::format_date(self.now().date())
    }
}

/// Whether the engine's caller may have config executables run (contract section 6: they run
/// only for callers that passed the service's checks). Answers that would need one run say so
/// instead, with as much as the log knows.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum ConfigAccess {
    /// The CLI, and a service's callers with a token (or any caller of one without a token).
    #[default]
    Run,
    /// A service's caller without a token, when writes need one: no config executable runs for
    /// it; a table's in-process config still does, as nothing of the caller's runs.
    Withheld,
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
    /// Whether config executables run for this engine's callers.
    pub configs: ConfigAccess,
    /// Where run events go as OpenLineage (`OPENLINEAGE_URL`, or the graph's `[openlineage]`).
    pub openlineage: Option<crate::openlineage::OpenLineageConfig>,
}

impl Default for EngineConfig {
    fn default() -> Self {
        EngineConfig {
            clock: Clock::default(),
            upstream_token: None,
            lease_timeout: crate::run::lease::DEFAULT_TIMEOUT,
            configs: ConfigAccess::Run,
            openlineage: None,
        }
    }
}

/// Redacts the token: configurations get logged.
impl std::fmt::Debug for EngineConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngineConfig")
            .field("clock", &self.clock)
            .field("lease_timeout", &self.lease_timeout)
            .field("configs", &self.configs)
            .field("openlineage", &self.openlineage)
            .field(
                "upstream_token",
                &self.upstream_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}
