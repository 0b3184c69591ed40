//! The error a [`Resolver`](crate::Resolver) answers with when it cannot answer.

/// Why a resolver could not say whether an external partition is present, or what a dynamic
/// job's config chooses. The resolver's own typed error is kept inside (its message is what the
/// planner reports, in `PlanError::Probe` or `PlanError::Config`); the core cannot name the
/// outer crates' error types, so it holds them as `dyn Error`.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ResolveError(Box<dyn std::error::Error + Send + Sync>);

impl ResolveError {
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        ResolveError(Box::new(e))
    }

    /// The resolver's own error, if it is a `T`.
    pub fn downcast_ref<T: std::error::Error + 'static>(&self) -> Option<&T> {
        self.0.downcast_ref()
    }
}

/// A resolver whose failures are plain messages (test doubles, benchmarks).
impl From<String> for ResolveError {
    fn from(message: String) -> Self {
        ResolveError(message.into())
    }
}
