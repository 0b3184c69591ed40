//! End-to-end tests: each drives the real `databuild` binary in a temp dir of its own.

mod util;

mod analyze;
mod build;
mod checks;
mod daily_use;
mod dashboard;
mod equivalence;
mod examples;
mod gc;
mod graph_cmd;
mod hygiene;
mod lineage;
mod log_cmds;
mod plan_cache;
mod postgres;
mod reliability;
mod schemathesis;
mod security;
mod service;
mod slurm;
mod sources;
mod tidy;
mod truth;
mod truth_data;
mod truth_plan;
mod wants;
