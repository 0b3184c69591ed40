//! Running job runs. [`Executor`] is the interface: a [`RunSpec`] in, a [`RunOutcome`] out;
//! [`local`] runs a run as a process here, [`slurm`] as a Slurm job. Around it: what a job is
//! given and gives back ([`contract`]), its outputs' way into place ([`publish`], with partitions
//! shared by hard links and swapped in one step in [`link`]), the
//! `slots` a build runs them in, and the machinery that keeps jobs from outliving the process
//! driving them ([`watchdog`], [`reap`], [`lease`], [`owner`]).

pub mod check;
pub mod contract;
pub mod lease;
pub mod link;
pub mod local;
pub mod log;
pub mod outcome;
pub mod owner;
pub mod process;
pub mod publish;
pub mod reap;
pub mod resources;
pub(crate) mod reuse;
pub(crate) mod slots;
pub mod slurm;
pub(crate) mod spawn;
pub mod watchdog;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

pub use local::LocalExecutor;
pub use outcome::{Finished, RunOutcome};
pub use resources::RunResources;

/// Default cap on a run's log.
pub const DEFAULT_LOG_LIMIT: u64 = 10 * 1024 * 1024;

/// Everything needed to start one run.
#[derive(Debug, Clone, Default)]
pub struct RunSpec {
    pub job_run_id: String,
    pub build_request_id: String,
    pub job: String,
    pub command: Vec<String>,
    pub args: Vec<String>,
    /// The job's env and the config's, merged.
    pub env: BTreeMap<String, String>,
    pub outputs: Vec<String>,
    pub inputs: Vec<String>,
    /// The query inputs (`dep = "query"`) present when the run was claimed: it may read them
    /// (`DATABUILD_QUERY_INPUTS`); absent ones are not given.
    pub query_inputs: Vec<String>,
    /// The inputs whose data must be `<data_dir>/<ref>` when the run starts (job outputs and
    /// file datasets): a slot checks them before it starts the job.
    pub present_inputs: Vec<String>,
    /// Field values of a single-output run, by field name.
    pub fields: Vec<(String, String)>,
    pub graph_dir: PathBuf,
    pub data_dir: PathBuf,
    pub log_path: PathBuf,
    pub timeout: Option<Duration>,
    pub log_limit: u64,
    /// Resources for a cluster executor.
    pub cpus: Option<u32>,
    pub mem: Option<String>,
    /// A check of `outputs` (`crate::check`), not a job building them: its exit status is its verdict,
    /// and it is not expected to write them.
    pub check: bool,
}

impl RunSpec {
    /// Where the run writes its outputs before they are moved into place.
    pub fn staging_dir(&self) -> PathBuf {
        publish::staging_dir(&self.data_dir, &self.job_run_id)
    }

    /// Where the run may write its report (a JSON object; `DATABUILD_REPORT`), next to its log.
    pub fn report_path(&self) -> PathBuf {
        self.log_path.with_extension("report.json")
    }
}

/// A way to run job runs: local processes here, Slurm jobs elsewhere. `run` blocks until the run
/// ends, and says how, with what it measured of it; `cancel` going true asks it to stop. `began`
/// hears how far the run got: its id in the executor, and when its process started (the run's
/// `running`; until then it is `queued`).
pub trait Executor: Send + Sync {
    fn run(&self, spec: &RunSpec, cancel: &AtomicBool, began: &dyn Fn(Began<'_>)) -> Finished;
}

/// What an executor says of a run before it ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Began<'a> {
    /// The run's id in the executor (`slurm:1234`), when it has one worth recording.
    Submitted(&'a str),
    /// Its process started: spawned here, or its Slurm job left `PENDING`.
    Running,
}
