//! The error a [`Resolver`](crate::Resolver) answers with when it cannot answer.

/// A config executable not run because the caller may not run one: a reader without a token,
/// on a service whose writes need one, or a link followed from another site (contract section
/// 6). Its message says what it would take.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("computing this runs the config executable of job `{job}`, which runs only for callers with a token and pages opened from the service itself: pass a token (`Authorization: Bearer <token>`, or log in on the dashboard), or open this page from the dashboard or by typing its address, to see it")]
pub struct ConfigWithheld {
    pub job: String,
}

/// Why a resolver could not say whether an external partition is present, or what a dynamic
/// job's config chooses.
#[derive(Debug, thiserror::Error)]
pub enum ResolveError {
    /// The caller may not run config executables. Nothing ran.
    #[error(transparent)]
    ConfigWithheld(#[from] ConfigWithheld),
    /// The resolver's own typed error (its message is what the planner reports, in
    /// `PlanError::Probe` or `PlanError::Config`); the core cannot name the outer crates' error
    /// types, so it holds them as `dyn Error`.
    #[error(transparent)]
    Failed(Box<dyn std::error::Error + Send + Sync>),
}

impl ResolveError {
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        ResolveError::Failed(Box::new(e))
    }

    /// The resolver's own error, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        match self {
            ResolveError::Failed(e) => e.downcast_ref(),
            ResolveError::ConfigWithheld(_) => None,
        }
    }
}

/// A resolver whose failures are plain messages (test doubles, benchmarks).
impl From<String> for ResolveError {
    fn from(message: String) -> Self {
        ResolveError::Failed(message.into())
    }
}
