//! The scheduler: runs a plan's job runs as their inputs become ready, claiming each partition
//! in the log first. [`crate::Engine::execute`] plans a build and hands the plan to it.
//!
//! - [`machine`]: the scheduler's decisions as a pure state machine (inputs in, effects out).
//! - [`driver`]: the thin I/O loop around it: slot threads, waiters, log appends, progress.
//! - [`spec`]: what a run is started with ([`crate::run::RunSpec`]) and the version it records.
//! - [`record`]: the events of the request, its plan and its runs.
//!
//! Claiming a partition (`building`) goes through the log, which refuses a second claim: when
//! another build got there first, this one waits for it instead (delegation). Runs whose driving
//! process died are found by their recorded owner and closed.
//!
//! The scheduler sits below the engine: what it needs of it (`Host`) is a trait the engine
//! implements, so nothing here names the engine.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use databuild_core::{Graph, PartitionRef, Plan, PlanRequest};
use databuild_log::EventStore;

use crate::error::Result;
use crate::run::lease::Lease;
use crate::run::RunOutcome;

pub(crate) mod driver;
mod machine;
pub(crate) mod record;
mod spec;

/// What the scheduler asks of the engine that hands it a plan: the graph and the log, the lease
/// this process holds, the folders runs use, and the planning and reads a running build needs.
/// [`crate::Engine`] is the one implementation; through it the scheduler depends on nothing
/// above it.
pub(crate) trait Host: Sync {
    fn graph(&self) -> &Graph;
    fn store(&self) -> &dyn EventStore;
    /// Events the driver just appended, for whoever follows runs from outside (OpenLineage).
    fn appended(&self, events: &[databuild_log::Event]);
    fn lease(&self) -> &Lease;
    fn graph_dir(&self) -> &Path;
    fn data_dir(&self) -> &Path;
    /// Where run logs are written.
    fn logs_dir(&self) -> PathBuf;
    /// Plans refs a running build adds: inputs a run reported missing, a partition taken over.
    fn plan(&self, request: &PlanRequest) -> Result<Plan>;
    /// The version an input has now, and for a job's output the run that built it.
    fn input_instance(&self, r: &str) -> Result<(Option<String>, Option<String>)>;
    /// A query input (`dep = "query"`) as a run starting now reads it: its version and, for a
    /// job's output, the run that built it; `None` when it is absent.
    fn query_instance(&self, r: &str) -> Result<Option<(String, Option<String>)>>;
    /// Closes builds whose driving process is gone (before a partition they held is taken
    /// over).
    fn close_abandoned_builds(&self) -> Result<usize>;
    /// Whether this engine's runs may take instances other environments made (it is not
    /// prod's).
    fn reuses(&self) -> bool;
    /// An instance of `outputs` made from `recipe` in another environment, live there now.
    fn find_instance(
        &self,
        outputs: &[String],
        recipe: &databuild_log::RunRecipe,
    ) -> Option<crate::run::reuse::Instance>;
    /// The states of `refs` derived now, as `status` derives them (one read for all), reading
    /// tables' aliases as the build's `pins` do and comparing runs with the build's `code`.
    fn states_now(
        &self,
        refs: &[&str],
        pins: &BTreeMap<String, u32>,
        code: &std::sync::Arc<crate::data::code::CodeCache>,
    ) -> Result<Vec<databuild_core::plan::KnownState>>;
}

#[derive(Debug, Clone)]
pub struct BuildOptions {
    pub refs: Vec<PartitionRef>,
    /// Rebuild the requested refs even if live and fresh.
    pub force: bool,
    /// Most runs at once.
    pub parallel: usize,
    /// Keep starting runs that do not depend on a failure.
    pub keep_going: bool,
    /// Accept stale partitions instead of rebuilding them.
    pub allow_stale: bool,
    /// Read these tables' aliases as these versions (see [`PlanRequest::pins`]).
    pub pins: BTreeMap<String, u32>,
    /// Refuse a plan of more job runs than this (`--max-runs`): nothing runs.
    pub max_runs: Option<usize>,
}

/// Runs at once when a request does not say: as many as this machine has cores.
pub fn default_parallelism() -> usize {
    std::thread::available_parallelism().map_or(1, |n| n.get())
}

impl Default for BuildOptions {
    /// Nothing requested yet; as many runs at once as this machine has cores.
    fn default() -> Self {
        BuildOptions {
            refs: Vec::new(),
            force: false,
            parallel: default_parallelism(),
            keep_going: false,
            allow_stale: false,
            pins: BTreeMap::new(),
            max_runs: None,
        }
    }
}

/// Progress reports, for a progress bar or a log. They carry no information the event log lacks.
#[derive(Debug)]
pub enum Progress<'a> {
    Planned {
        build_request_id: &'a str,
        runs: usize,
        skipped: usize,
        delegated: usize,
    },
    Started {
        job: &'a str,
        outputs: &'a [PartitionRef],
    },
    /// A run ended, and that is its outputs' outcome in this build.
    Finished {
        job: &'a str,
        /// The run's id (its last attempt's).
        run_id: &'a str,
        outputs: &'a [PartitionRef],
        outcome: &'a RunOutcome,
        took: Duration,
        /// It ran no job: it took this instance (a build in an environment).
        reused_from: Option<&'a databuild_log::ReusedFrom>,
    },
    /// A run failed, and another attempt follows.
    Retrying {
        job: &'a str,
        outputs: &'a [PartitionRef],
        message: &'a str,
        /// The attempt that follows (2 for the first retry), of `attempts`.
        attempt: u32,
        attempts: u32,
    },
    /// A run reported missing inputs: they are built first, then it runs again.
    FetchingInputs {
        job: &'a str,
        outputs: &'a [PartitionRef],
        missing: &'a [String],
    },
    /// A run planned for being stale is not run: the runs before it wrote the bytes it had
    /// read, so its outputs stand (early cutoff).
    Kept {
        job: &'a str,
        outputs: &'a [PartitionRef],
    },
    /// A run was added while building (a retry, missing dependencies, a takeover).
    Added,
    Note(String),
}

pub trait Observer {
    fn on(&mut self, progress: Progress<'_>);
}

/// An observer that ignores everything.
pub struct Quiet;

impl Observer for Quiet {
    fn on(&mut self, _: Progress<'_>) {}
}
