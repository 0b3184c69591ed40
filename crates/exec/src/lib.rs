//! DataBuild's execution layer: everything that starts processes or looks at the data dir.
//!
//! - [`process`] runs a command with a timeout and captured, capped output, and kills its whole
//!   process group when it overstays.
//! - [`Engine`] is the one implementation of analyze, status, explain and taint that the CLI and
//!   the service share.
//! - [`LocalResolver`] implements the planner's [`databuild_core::Resolver`]: external datasets are
//!   checked by file existence or by their probe command, and dynamic jobs' config executables are
//!   called once per job per planning round.
//! - [`EngineConfig`] is what the binary read at its edge (the [`Clock`], the upstream token);
//!   the engine is given it and reads no environment itself.

pub mod answers;
pub mod check;
pub mod config;
pub mod data;
pub mod engine;
pub mod run;
pub mod scheduler;

pub use config::{Clock, EngineConfig};
pub use data::resolver::LocalResolver;
pub use engine::{Engine, EngineError};
