//! Running jobs.

pub mod lease;
pub mod local;
pub mod owner;
pub mod process;
pub(crate) mod slots;
pub mod slurm;
pub(crate) mod spawn;
