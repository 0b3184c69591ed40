//! The planner: from requested refs to the job runs that make them live, in dependency order.
//!
//! Planning walks upstream from the requested refs in rounds. Each round groups the refs it reached by
//! job, so a dynamic job's config executable is asked once per round for all of them; the refs their
//! runs read form the next round. Every ref is visited once (a hash map remembers it), so diamonds and
//! fan-ins cost nothing extra and cycles end the walk; a topological sort then orders the runs and,
//! if runs remain, prints the cycle they form.
//!
//! The planner does no I/O: what the log knows comes in through [`StateView`], and external checks
//! and config executables through [`Resolver`].
//!
//! This module holds what planning takes and gives ([`PlanRequest`], [`StateView`], [`Resolver`],
//! [`Plan`], [`PlanError`]) and [`plan()`] itself; `walk` is the walk, `config` a job's run
//! configs (what a config executable answers, and how it differs from what built a partition).

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Serialize;

use crate::env::RunEnv;
use crate::graph::{Dataset, Graph, Job, Producer};
use crate::refs::PartitionRef;

mod config;
mod walk;

pub use config::{config_change, BuiltWith, ConfigInput, ConfigResponseError, DepKind, JobConfig};

/// Planning stops after this many rounds: a job that depends on its own earlier partitions
/// (`total/{date}` reading `total/{date-1d}`) needs a base case, and without one would walk back forever.
pub const MAX_ROUNDS: usize = 100_000;

/// Planning stops after this many rounds that called a config executable: each is a process
/// (milliseconds, not the microseconds of a template's round), so a config that reads its own job's
/// earlier partitions without a base case would otherwise take hours to reach [`MAX_ROUNDS`]. 200
/// rounds stop such a chain within seconds for a shell config (about a minute for one that takes
/// 300 ms to start); a longer legitimate chain is built oldest first.
pub const MAX_CONFIG_ROUNDS: usize = 200;

/// What the event log knows about a ref that a job builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnownState {
    Missing,
    Live,
    /// Live, but built from inputs or a job version that changed since; `by_code` when the
    /// change is a job's code (its own, or one up its inputs).
    Stale {
        reason: String,
        by_code: bool,
    },
    /// Another build request is building it now.
    Building {
        build_request_id: String,
    },
    Failed,
    Tainted,
    /// Stale, but an input it was built from has expired: it cannot be rebuilt, so it is kept
    /// as it is (or carried forward by the job's `migrate` command, if it has one).
    Kept {
        reason: String,
    },
    /// Built, but its current instance failed a blocking check: not live. Rebuilding it from
    /// the same inputs would make the same data, so planning neither rebuilds it (unless
    /// forced) nor starts what reads it: it stops there as an input that cannot be had.
    /// `reason` reads ``failed check `name`: message``.
    CheckFailed {
        reason: String,
    },
}

/// The partition states could not be read (the event log failed). Planning stops on it: a state
/// that was not read is never taken for `Missing`, which would rebuild what is live.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("reading the partitions' states failed: {0}")]
pub struct StateError(pub String);

/// Read access to the current partition states.
pub trait StateView {
    fn state(&self, r: &str) -> Result<KnownState, StateError>;

    /// The states of a planning round's refs, in order: the planner asks a slice of a round at
    /// a time (at most 65,536 refs), so neither side holds a million-ref round's states at once.
    /// An implementation backed by a database reads them in one go rather than one query each.
    fn states(&self, refs: &[&str]) -> Result<Vec<KnownState>, StateError> {
        refs.iter().map(|r| self.state(r)).collect()
    }

    /// The version a table's alias points at, if one was promoted (else its first version).
    fn promoted(&self, _table: &str) -> Option<u32> {
        None
    }

    /// Does [`StateView::config_change`] know what built partitions were built with? Then planning
    /// asks a job's config about its live partitions too (in the same call as the rest), to rebuild
    /// those whose config now chooses differently.
    fn checks_configs(&self) -> bool {
        false
    }

    /// How `config` (what `r`'s job's config executable says about `r` now, its materialize inputs
    /// read as the version refs aliases point at) differs from the run that built `r`, if it does:
    /// a reason such as "its config now reads `a/2` instead of `a/1`".
    fn config_change(&self, _r: &str, _job: &Job, _config: &JobConfig) -> Option<String> {
        None
    }
}

/// The ref an alias ref (`orders/date=D`) reads now: the promoted version's (`orders/v2/date=D`),
/// or the version `pins` names for its table.
pub fn resolve_alias(
    graph: &Graph,
    states: &dyn StateView,
    pins: &BTreeMap<String, u32>,
    r: &str,
) -> Option<PartitionRef> {
    let (Producer::Alias(t), values) = graph.producer_of(r)? else {
        return None;
    };
    let table = &graph.tables[t];
    let version = pins
        .get(&table.name)
        .copied()
        .or_else(|| states.promoted(&table.name))
        .unwrap_or_else(|| table.initial_version());
    PartitionRef::new(table.data_ref(version, values[0])).ok()
}

/// A state view for a world where no job has built anything yet.
pub struct NothingBuilt;

impl StateView for NothingBuilt {
    fn state(&self, _: &str) -> Result<KnownState, StateError> {
        Ok(KnownState::Missing)
    }
}

/// The I/O the planner needs, done by the caller.
pub trait Resolver {
    /// Is this external partition present?
    fn external_available(
        &mut self,
        dataset: &Dataset,
        r: &PartitionRef,
    ) -> Result<bool, crate::ResolveError>;
    /// Runs the job's config executable for all these outputs at once.
    fn job_configs(
        &mut self,
        job: &Job,
        outputs: &[PartitionRef],
    ) -> Result<Vec<JobConfig>, crate::ResolveError>;
}

/// Why a planned run builds an output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildReason {
    Missing,
    Failed,
    Tainted,
    Stale(StaleReason),
    /// Requested with `force`.
    Forced,
    /// Not needed itself, but the job's config builds it together with a needed output.
    Sibling,
    /// Its job changed and its inputs expired: the job's `migrate` command carries it forward.
    CarryForward(String),
}

/// Why an output is stale: its reason, for people (all a plan's JSON shows), and whether a job's
/// code changed (what `analyze` counts as `stale_by_code`, from the plan, without deriving again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaleReason {
    pub reason: String,
    pub by_code: bool,
}

impl Serialize for StaleReason {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.reason)
    }
}

/// A reason that is not a code change (a config's, a job version's, an input's).
impl From<String> for StaleReason {
    fn from(reason: String) -> Self {
        StaleReason {
            reason,
            by_code: false,
        }
    }
}

impl From<&str> for StaleReason {
    fn from(reason: &str) -> Self {
        reason.to_string().into()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlannedRun {
    /// Index of the job in [`Graph::jobs`].
    #[serde(skip)]
    pub job_index: usize,
    /// The job's name, shared by all its runs.
    pub job: Arc<str>,
    pub outputs: Vec<PartitionRef>,
    /// Inputs that must be live first.
    pub inputs: Vec<PartitionRef>,
    /// What only a config executable gives a run. Boxed: plans hold hundreds of thousands of runs,
    /// and most have none of it.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub extras: Option<Box<RunExtras>>,
    /// Indices (in [`Plan::runs`]) of the runs that build this run's inputs.
    pub depends_on: Vec<usize>,
    /// One reason per output, in output order.
    pub reasons: Vec<BuildReason>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RunExtras {
    /// Inputs read only if present; never built.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub query_inputs: Vec<PartitionRef>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub args: Vec<String>,
    /// Shown as `show_env` allows: a plan's JSON never holds a secret.
    #[serde(skip_serializing_if = "RunEnv::is_empty")]
    pub env: RunEnv,
    /// Inputs given as a table's alias, and the version ref each was read as.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub aliased: Vec<(PartitionRef, PartitionRef)>,
}

impl PlannedRun {
    /// A carry-forward run: the job's `migrate` command rewrites the existing partition.
    pub fn is_carry_forward(&self) -> bool {
        matches!(self.reasons.first(), Some(BuildReason::CarryForward(_)))
    }

    pub fn aliased(&self) -> &[(PartitionRef, PartitionRef)] {
        self.extras.as_ref().map_or(&[], |e| &e.aliased)
    }

    pub fn args(&self) -> &[String] {
        self.extras.as_ref().map_or(&[], |e| &e.args)
    }

    pub fn query_inputs(&self) -> &[PartitionRef] {
        self.extras.as_ref().map_or(&[], |e| &e.query_inputs)
    }

    /// Environment variables the config asked for, on top of the job's own.
    pub fn env(&self) -> &RunEnv {
        static NONE: RunEnv = RunEnv::EMPTY;
        self.extras.as_ref().map_or(&NONE, |e| &e.env)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Delegation {
    #[serde(rename = "ref")]
    pub partition_ref: PartitionRef,
    pub build_request_id: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MissingExternal {
    #[serde(rename = "ref")]
    pub partition_ref: PartitionRef,
    pub dataset: String,
    /// The run that needs it, if it is not itself requested.
    pub needed_by: Option<String>,
    /// For a job output whose current instance failed a blocking check (`dataset` is then its
    /// job): ``failed check `name`: message``.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failed_check: Option<String>,
}

/// The result of planning.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Plan {
    /// Job runs in dependency order: every run comes after the runs it depends on.
    pub runs: Vec<PlannedRun>,
    /// Refs already live and fresh (job outputs), or present (external).
    pub skipped: Vec<PartitionRef>,
    /// Refs another build request is building now.
    pub delegated: Vec<Delegation>,
    /// External refs that are not available: the plan cannot complete until they are.
    pub missing: Vec<MissingExternal>,
    /// Of `skipped`, the stale partitions that cannot be rebuilt (an input they were built from
    /// has expired, and their job has no `migrate`): kept as they are, with why.
    pub not_rebuildable: Vec<(PartitionRef, String)>,
}

impl Plan {
    /// Can the plan run to completion as it stands?
    pub fn is_complete(&self) -> bool {
        self.missing.is_empty()
    }

    /// The runs that cannot run until the missing external partitions are there: those that
    /// read one, and every run downstream of them (indexes into `runs`, in plan order).
    pub fn blocked_runs(&self) -> Vec<usize> {
        if self.missing.is_empty() {
            return Vec::new();
        }
        let missing: std::collections::HashSet<&str> = self
            .missing
            .iter()
            .map(|m| m.partition_ref.as_str())
            .collect();
        let mut blocked = vec![false; self.runs.len()];
        // Runs come after the runs they depend on: one pass in order sees every cause first.
        for (i, run) in self.runs.iter().enumerate() {
            blocked[i] = run.inputs.iter().any(|r| missing.contains(r.as_str()))
                || run.depends_on.iter().any(|&d| blocked[d]);
        }
        (0..self.runs.len()).filter(|&i| blocked[i]).collect()
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlanError {
    /// No producer matches the ref; `reason` says why ([`Graph::unmatched_reason`]): nothing
    /// builds or declares it, or a typed field's text is not of its type.
    #[error("{reason}{}", needed_by_suffix(.needed_by))]
    UnknownRef {
        partition_ref: String,
        reason: String,
        needed_by: Option<String>,
    },
    #[error("job `{job}`: {message}")]
    Template { job: String, message: String },
    #[error("config of job `{job}` failed: {message}")]
    Config { job: String, message: String },
    /// The caller may not run config executables: planning stopped before asking one.
    #[error(transparent)]
    ConfigWithheld(#[from] crate::resolve::ConfigWithheld),
    #[error("checking external `{partition_ref}` of dataset `{dataset}` failed: {message}")]
    Probe {
        dataset: String,
        partition_ref: String,
        message: String,
    },
    #[error("dependency cycle: {}", .0.join(" -> "))]
    Cycle(Vec<String>),
    #[error(transparent)]
    State(#[from] StateError),
    /// `producer` as [`Graph::describe_producer`] names it (``job `x` ``).
    #[error("planning went {MAX_ROUNDS} levels deep without reaching live or external data (last: `{last}`, {producer}); a job that reads its own earlier partitions needs a base case: a live partition or a dataset")]
    Unbounded { last: String, producer: String },
    #[error("planning called config executables in {MAX_CONFIG_ROUNDS} rounds without reaching live or external data (last: `{last}`, asked of job `{job}`'s config); a job whose config reads its own earlier partitions needs a base case: a live partition or a dataset (to plan a longer chain, build its oldest partitions first)")]
    UnboundedConfig { last: String, job: String },
}

fn needed_by_suffix(needed_by: &Option<String>) -> String {
    needed_by
        .as_ref()
        .map(|n| format!(" (needed by {n})"))
        .unwrap_or_default()
}

/// What to plan, and how.
#[derive(Debug, Clone, Default)]
pub struct PlanRequest {
    pub refs: Vec<PartitionRef>,
    /// Rebuild the requested refs even if live and fresh.
    pub force: bool,
    /// Accept stale partitions as they are instead of rebuilding them.
    pub allow_stale: bool,
    /// Read these tables' aliases as these versions instead of the promoted ones (to build
    /// downstream against a version before promoting it).
    pub pins: BTreeMap<String, u32>,
}

/// Plans `request`: the runs that make the requested refs live, in dependency order, and what
/// needs no run (skipped, delegated, missing). See the module's documentation for how.
pub fn plan(
    graph: &Graph,
    request: &PlanRequest,
    states: &dyn StateView,
    resolver: &mut dyn Resolver,
) -> Result<Plan, PlanError> {
    walk::Planner::new(graph, request, states, resolver).run()
}

#[cfg(test)]
mod tests;
