//! The data and its versions.

pub(crate) mod data_dir;
pub mod rechecked;
pub(crate) mod resolver;
pub mod sources;
pub mod table_job;
pub mod upstream;
pub mod versions;
