//! Checks: data quality that decides what is live.
//!
//! A `[[check]]` of the graph runs like a job, on the build's executor, against each partition of
//! its job's outputs: after the run that built them succeeded (in the same slot, against the
//! staged outputs, before the run's completion is recorded) and on demand (`databuild check`).
//! A job may also report checks itself (`DATABUILD_REPORT`: `{"checks": [...]}`). Every result is
//! a `check` event, recorded with the run's completion: the log never shows a partition live
//! whose current instance failed a blocking check.
//!
//! What a recorded result means now ([`rules::state`], [`rules::blocking_failure`]) is decided here, purely,
//! from the graph's check and the log's row: a failed blocking check of the current instance
//! holds the partition back; a result of an earlier instance says nothing; one recorded under
//! another version or command of the check is stale (the check runs again, the data is not
//! rebuilt).
//!
//! - [`rules`]: what results mean, purely.
//! - [`run`]: running one check on an executor.
//!
//! The engine's side (`databuild check`, and a build's stale checks) is `engine::checks`.

pub mod rules;
pub mod run;
