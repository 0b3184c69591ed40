//! DataBuild's execution layer: everything that starts processes or looks at the data dir.
//!
//! Its modules are layers; each depends only on those below it (the `tidy` test refuses a
//! cycle between them):
//!
//! - [`engine`]: the [`Engine`], the one implementation of planning, analyze, builds, status,
//!   explain, taint, lineage, gc, sources and wants that the CLI and the service share. Its
//!   public calls are all declared in `engine/mod.rs` and carried out by one facet each.
//! - [`scheduler`]: a build's plan run to its end: a pure state machine deciding, a thin driver
//!   doing (claims and completions in the log, slots, waiters). It asks the engine for what it
//!   needs through [`scheduler`]'s `Host` trait, so it depends on nothing above it.
//! - [`run`]: running job runs: the [`run::Executor`] interface with its local and Slurm
//!   executors, what a job is given and gives back, its outputs' publication, the slots a build
//!   runs them in, and the watchdog, lease and owner that keep jobs from outliving their driver.
//! - [`data`]: the data and its versions: data versions and staleness ([`data::versions`]), the
//!   data dir, sources' raw records, table jobs, configs re-checked, the planner's
//!   [`LocalResolver`], and other DataBuild services upstream.
//! - [`check`]: what a check's result means, purely (running one is [`run::check`]);
//!   [`anomaly`]: the band an anomaly check learns and its verdict.
//! - [`answers`]: every answer of the API and of `--json`, as a type; [`EngineError`] is what
//!   the engine's calls fail with.
//!
//! [`EngineConfig`] is what the binary read at its edge (the [`Clock`], the upstream token); the
//! engine is given it and reads no environment itself.

pub mod anomaly;
pub mod answers;
pub mod check;
pub mod config;
pub mod data;
pub mod engine;
mod error;
pub mod hashing;
pub mod openlineage;
pub mod run;
pub mod scheduler;

pub use config::{Clock, ConfigAccess, EngineConfig};
pub use data::resolver::LocalResolver;
pub use engine::{Engine, EngineError};
