//! The data and its versions: what a job's code is ([`code`]), what a partition's data version is
//! and whether it is stale ([`versions`], with configs re-checked in [`rechecked`]), the data dir
//! as planning sees it (`data_dir`), what two versions of a partition's data differ by as people
//! read it ([`content_diff`]), an external dataset's files counted ([`present`]), sources' raw
//! records ([`sources`]), the built-in job that loads table versions ([`table_job`]), other
//! DataBuild services a dataset comes from ([`upstream`]), and the planner's `LocalResolver` over
//! all of it (`resolver`), which notes the external partitions it finds for `arrivals` to record.

pub(crate) mod arrivals;
pub mod code;
pub mod content_diff;
pub(crate) mod data_dir;
pub mod present;
pub mod rechecked;
pub(crate) mod resolver;
pub mod sources;
pub mod table_job;
pub mod upstream;
pub mod versions;
