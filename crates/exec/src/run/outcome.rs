//! How a run ended, as plain values: [`RunOutcome`] and [`Finished`] (an executor's answer) and
//! `Ended` (a slot's, with the run's report, checks and measures). No I/O here: the scheduler's
//! pure machine reads them.

use databuild_log::RunResources;

use crate::check::CheckOutcome;

/// What a run's job reported of its outputs (`metrics` of its report, checked by
/// `contract::reported_metrics`): by output ref, by name, a number each.
pub type ReportedMetrics =
    std::collections::BTreeMap<String, std::collections::BTreeMap<String, serde_json::Number>>;

/// An executor's answer: how the run ended, and what it measured of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub outcome: RunOutcome,
    pub resources: RunResources,
}

/// A run that ended before anything of it could be measured.
impl From<RunOutcome> for Finished {
    fn from(outcome: RunOutcome) -> Finished {
        Finished {
            outcome,
            resources: RunResources::default(),
        }
    }
}

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
    /// What it cost, as its executor measured it (with its outputs' size, of a success); the
    /// scheduler adds its wait in the queue. Boxed, as are the metrics: an `Ended` rides in the
    /// scheduler's inputs and effects, which stay small.
    pub resources: Box<RunResources>,
    /// Of a successful run: the metrics its job reported, checked against its outputs.
    pub metrics: Option<Box<ReportedMetrics>>,
    /// Of a run that took an instance instead of running (`crate::run::reuse`): whose.
    pub reused_from: Option<Box<databuild_log::ReusedFrom>>,
}

impl Ended {
    pub fn of(outcome: RunOutcome) -> Ended {
        Ended {
            outcome,
            executor_id: None,
            report: None,
            checks: Vec::new(),
            versions: Vec::new(),
            resources: Box::default(),
            metrics: None,
            reused_from: None,
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
