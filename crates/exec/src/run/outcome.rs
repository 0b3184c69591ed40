//! How a run ended, as plain values: [`RunOutcome`] (an executor's answer) and `Ended` (a
//! slot's, with the run's report and checks). No I/O here: the scheduler's pure machine reads
//! them.

use crate::check::CheckOutcome;

/// How a run ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunOutcome {
    Succeeded,
    Failed {
        message: String,
        exit_code: Option<i32>,
        /// Refs the job reported missing with `DATABUILD_MISSING_DEPS`.
        missing_deps: Vec<String>,
    },
    Cancelled,
}

impl RunOutcome {
    pub(crate) fn failed(message: impl Into<String>, exit_code: Option<i32>) -> RunOutcome {
        RunOutcome::Failed {
            message: message.into(),
            exit_code,
            missing_deps: Vec::new(),
        }
    }
}

/// How a run ended, for the scheduler.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Ended {
    pub outcome: RunOutcome,
    pub executor_id: Option<String>,
    /// What a successful run reported through `DATABUILD_REPORT`.
    pub report: Option<serde_json::Value>,
    /// Of a successful run: the results of its outputs' checks (the job's own, reported
    /// inline, then the graph's).
    pub checks: Vec<CheckOutcome>,
    /// Of a successful run: each output's data version, the hash of its content (in output
    /// order), taken in the slot so the scheduler's loop never reads data.
    pub versions: Vec<String>,
}

impl Ended {
    pub fn of(outcome: RunOutcome) -> Ended {
        Ended {
            outcome,
            executor_id: None,
            report: None,
            checks: Vec::new(),
            versions: Vec::new(),
        }
    }

    /// Succeeded, but a blocking check failed: why, then.
    pub fn held_back(&self) -> Option<String> {
        if self.outcome != RunOutcome::Succeeded {
            return None;
        }
        crate::check::blocking_failure(&self.checks)
    }
}
