//! What the engine's calls fail with: [`EngineError`], told apart by kind so that callers derive
//! their answer (a 404, a 409, a user error) from it.

use databuild_core::PlanError;
use databuild_log::{LogError, Status};

#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    #[error("cannot plan: {0}")]
    Plan(#[from] PlanError),
    #[error(transparent)]
    Log(#[from] LogError),
    /// A build request, job, source, table or want that does not exist (the message names it).
    #[error("{0}")]
    NotFound(String),
    /// A build request or a want that has already ended cannot be cancelled (`what` names
    /// which).
    #[error("{what} {id} already ended ({status})")]
    AlreadyEnded {
        what: &'static str,
        id: String,
        status: Status,
    },
    #[error("{0}")]
    Invalid(String),
    /// A valid request that the state it meets turns down for now (a taint of a partition a run
    /// is building): a conflict, not a bad request.
    #[error("{0}")]
    Conflict(String),
    /// A `code` glob of the graph that matches no file (`data::code`).
    #[error(transparent)]
    Code(#[from] crate::data::code::CodeError),
}

impl EngineError {
    /// Caused by the request (bad refs, unplannable graphs), not by the system.
    pub fn is_user_error(&self) -> bool {
        match self {
            EngineError::Plan(_)
            | EngineError::Invalid(_)
            | EngineError::Conflict(_)
            | EngineError::NotFound(_)
            | EngineError::AlreadyEnded { .. }
            | EngineError::Code(_) => true,
            EngineError::Log(e) => e.is_user_error(),
        }
    }
}

pub type Result<T> = std::result::Result<T, EngineError>;
