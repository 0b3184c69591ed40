//! End-to-end tests: each drives the real `databuild` binary in a temp dir of its own.

// Test code may unwrap: a panic is its failure. (`allow-unwrap-in-tests` in `clippy.toml`
// covers only `#[test]` functions and `#[cfg(test)]` modules, not this crate's helpers.)
#![allow(clippy::unwrap_used)]

mod util;

mod analyze;
mod api_doc;
mod build;
mod checks;
mod claim_ahead;
mod daily_use;
mod dashboard;
mod environments;
mod environments_service;
mod equivalence;
mod examples;
mod exits;
mod exits_input;
mod forecast;
mod gc;
mod graph_cmd;
mod hours;
mod hygiene;
mod late;
mod lineage;
mod log_cmds;
mod openlineage;
mod plan_cache;
mod postgres;
mod query_inputs;
mod queued;
mod reliability;
mod schemathesis;
mod security;
mod service;
mod slurm;
mod sources;
mod status_agree;
mod telemetry;
mod trends;
mod truth;
mod truth_data;
mod truth_plan;
mod versions_bytes;
mod versions_code;
mod versions_compat;
mod wants;
