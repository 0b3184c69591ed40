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

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};

use serde::{Deserialize, Serialize};

use crate::graph::{Dataset, Deps, Graph, Job, LinkedTemplate, Producer};
use crate::refs::PartitionRef;

/// Planning stops after this many rounds: a job that depends on its own earlier partitions
/// (`total/{date}` reading `total/{date-1d}`) needs a base case, and without one would walk back forever.
pub const MAX_ROUNDS: usize = 100_000;

/// Planning stops after this many rounds that called a config executable: each is a process
/// (milliseconds, not the microseconds of a template's round), so a config that reads its own job's
/// earlier partitions without a base case would otherwise take hours to reach [`MAX_ROUNDS`]. 200
/// rounds stop such a chain within seconds for a shell config (about a minute for one that takes
/// 300 ms to start); a longer legitimate chain is built oldest first.
pub const MAX_CONFIG_ROUNDS: usize = 200;

/// Runs per slice when a round's template expansion runs on a second thread.
const PIPELINED_RUNS: usize = 8192;

/// What the event log knows about a ref that a job builds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KnownState {
    Missing,
    Live,
    /// Live, but built from inputs or a job version that changed since.
    Stale {
        reason: String,
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

    /// The states of a whole planning round, in order. An implementation backed by a database
    /// reads them in one go rather than one query each.
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

/// What the log recorded of a run's config: what it read and how it was called.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuiltWith {
    /// The inputs that had to be live (the version refs, for aliases).
    pub inputs: Vec<String>,
    pub args: Vec<String>,
    /// As the log records them: [`crate::graph::REDACTED`] for names not in `show_env`.
    pub env: BTreeMap<String, String>,
}

/// How a config's answer now differs from what the run that built a partition recorded, in
/// inputs (as a set), args, and env (names, and the values the log shows), or `None` if it does not
/// as far as the log can tell (a redacted value's change shows only in the data version).
pub fn config_change(graph: &Graph, built: &BuiltWith, now: &JobConfig) -> Option<String> {
    let then: BTreeSet<&str> = built.inputs.iter().map(String::as_str).collect();
    let reads: BTreeSet<&str> = now
        .inputs
        .iter()
        .filter(|i| i.dep == DepKind::Materialize)
        .map(|i| i.partition_ref.as_str())
        .collect();
    if reads != then {
        let added: Vec<&str> = reads.difference(&then).copied().collect();
        let dropped: Vec<&str> = then.difference(&reads).copied().collect();
        return Some(match (added.is_empty(), dropped.is_empty()) {
            (false, false) => format!(
                "its config now reads {} instead of {}",
                some_refs(&added),
                some_refs(&dropped)
            ),
            (false, true) => format!("its config now also reads {}", some_refs(&added)),
            _ => format!("its config no longer reads {}", some_refs(&dropped)),
        });
    }
    if now.args != built.args {
        return Some(format!(
            "its config now passes args {:?} instead of {:?}",
            now.args, built.args
        ));
    }
    let shown = |k: &str, v: &str| graph.recorded_env_value(k, v).to_string();
    for (k, v) in &now.env {
        match built.env.get(k) {
            None => return Some(format!("its config now sets env `{k}`")),
            Some(was) if *was != shown(k, v) => {
                return Some(format!(
                    "its config now sets env `{k}` to {:?} instead of {was:?}",
                    shown(k, v)
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(k) = built.env.keys().find(|k| !now.env.contains_key(*k)) {
        return Some(format!("its config no longer sets env `{k}`"));
    }
    None
}

/// Up to three refs, quoted, and how many more.
fn some_refs(refs: &[&str]) -> String {
    let shown: Vec<String> = refs.iter().take(3).map(|r| format!("`{r}`")).collect();
    match refs.len() {
        n if n > 3 => format!("{} and {} more", shown.join(", "), n - 3),
        _ => shown.join(", "),
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

/// Whether an input must be live before the run (`materialize`), or is read only if present (`query`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DepKind {
    #[default]
    Materialize,
    Query,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigInput {
    #[serde(rename = "ref")]
    pub partition_ref: PartitionRef,
    #[serde(default)]
    pub dep: DepKind,
}

/// One run as a config executable describes it (contract section 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    pub outputs: Vec<PartitionRef>,
    #[serde(default)]
    pub inputs: Vec<ConfigInput>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigResponse {
    configs: Vec<JobConfig>,
}

impl JobConfig {
    /// Parses what a config executable printed.
    pub fn parse_response(stdout: &str) -> Result<Vec<JobConfig>, ConfigResponseError> {
        serde_json::from_str::<ConfigResponse>(stdout)
            .map(|r| r.configs)
            .map_err(|e| ConfigResponseError {
                error: e.to_string(),
                // Output that does not even start as the JSON does: most often a log line.
                began: (!stdout.trim_start().starts_with('{')).then(|| {
                    let first: String = stdout.chars().take(60).collect();
                    let more = if stdout.chars().nth(60).is_some() {
                        "…"
                    } else {
                        ""
                    };
                    format!("{}{more}", first.escape_debug())
                }),
            })
    }
}

/// A config executable's output that is not its JSON answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its output is not the expected JSON `{{\"configs\": [{{\"outputs\": [...], \"inputs\": [...], \"args\": [...], \"env\": {{}}}}]}}`: {error}{}",
    .began.as_ref().map(|b| format!("; it began `{b}`: print log lines on stderr, and only the JSON on stdout")).unwrap_or_default()
)]
pub struct ConfigResponseError {
    /// What the JSON parser said.
    pub error: String,
    /// The first characters, when the output does not start as JSON does.
    pub began: Option<String>,
}

/// Why a planned run builds an output.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BuildReason {
    Missing,
    Failed,
    Tainted,
    Stale(String),
    /// Requested with `force`.
    Forced,
    /// Not needed itself, but the job's config builds it together with a needed output.
    Sibling,
    /// Its job changed and its inputs expired: the job's `migrate` command carries it forward.
    CarryForward(String),
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
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub env: BTreeMap<String, String>,
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
    pub fn env(&self) -> impl Iterator<Item = (&String, &String)> {
        self.extras.iter().flat_map(|e| e.env.iter())
    }
}

/// Runs in creation order, stored in fixed-size chunks: a plan of hundreds of thousands of runs
/// never reallocates (and copies) one huge vector while it grows.
#[derive(Default)]
struct RunStore {
    chunks: Vec<Vec<PlannedRun>>,
    len: usize,
}

impl RunStore {
    const CHUNK: usize = 4096;

    fn push(&mut self, run: PlannedRun) {
        if self.len.is_multiple_of(Self::CHUNK) {
            self.chunks.push(Vec::with_capacity(Self::CHUNK));
        }
        self.chunks.last_mut().expect("a chunk").push(run);
        self.len += 1;
    }

    fn get(&self, i: usize) -> &PlannedRun {
        &self.chunks[i / Self::CHUNK][i % Self::CHUNK]
    }

    fn get_mut(&mut self, i: usize) -> &mut PlannedRun {
        &mut self.chunks[i / Self::CHUNK][i % Self::CHUNK]
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

/// A ref to build: its number, the index of the output pattern it matched, and why it is built.
struct Wanted {
    r: PartitionRef,
    id: u32,
    output: usize,
    reason: BuildReason,
}

/// What planning has decided about one ref. Eight bytes: a large plan holds millions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Node {
    /// Reached; to be decided in the next round. Holds the run that needs it, or [`REQUESTED`].
    Pending(u32),
    /// Built by the run with this index (in creation order).
    Planned(u32),
    /// Live, present, delegated or missing: no run of this plan builds it.
    Settled,
}

/// A pending ref that no run needs: it was requested.
const REQUESTED: u32 = u32::MAX;

/// The run a pending ref was reached from, if any.
fn needer(pending: u32) -> Option<usize> {
    (pending != REQUESTED).then_some(pending as usize)
}

pub fn plan(
    graph: &Graph,
    request: &PlanRequest,
    states: &dyn StateView,
    resolver: &mut dyn Resolver,
) -> Result<Plan, PlanError> {
    Planner {
        graph,
        request,
        states,
        resolver,
        // Only `force` asks whether a ref was requested.
        requested: if request.force {
            request.refs.iter().map(|r| r.as_str()).collect()
        } else {
            FxHashSet::default()
        },
        job_names: graph
            .jobs
            .iter()
            .map(|j| Arc::from(j.name.as_str()))
            .collect(),
        ids: HashTable::with_capacity(request.refs.len() * 2),
        refs: Vec::with_capacity(request.refs.len() * 4),
        nodes: Vec::with_capacity(request.refs.len() * 4),
        aliases: FxHashMap::default(),
        run_inputs: Vec::new(),
        run_input_starts: vec![0],
        runs: RunStore::default(),
        run_round: Vec::new(),
        rounds: 0,
        config_rounds: 0,
        recheck: states.checks_configs() && !request.allow_stale,
        plan: Plan::default(),
    }
    .run()
}

struct Planner<'a> {
    graph: &'a Graph,
    request: &'a PlanRequest,
    states: &'a dyn StateView,
    resolver: &'a mut dyn Resolver,
    /// The requested refs, when the request forces them (else empty).
    requested: FxHashSet<&'a str>,
    job_names: Vec<Arc<str>>,
    /// Every ref planning reached, numbered in the order reached: past this table, planning works
    /// with the numbers (`refs` and `nodes` are indexed by them), not by hashing text. It holds
    /// the numbers, hashed by their ref's text, so each ref is held once, in `refs`.
    ids: HashTable<u32>,
    refs: Vec<PartitionRef>,
    nodes: Vec<Node>,
    /// Alias refs reached, and the version refs they read.
    aliases: FxHashMap<u32, u32>,
    /// The numbers of each run's inputs: run `i`'s are
    /// `run_inputs[run_input_starts[i]..run_input_starts[i + 1]]`.
    run_inputs: Vec<u32>,
    run_input_starts: Vec<usize>,
    runs: RunStore,
    /// The round in which each run (by creation index) was planned: deeper rounds run first.
    run_round: Vec<usize>,
    rounds: usize,
    /// Rounds that called a config executable (see [`MAX_CONFIG_ROUNDS`]).
    config_rounds: usize,
    /// Ask configs about live partitions too ([`StateView::checks_configs`]).
    recheck: bool,
    plan: Plan,
}

impl Planner<'_> {
    fn run(mut self) -> Result<Plan, PlanError> {
        let mut frontier = Vec::with_capacity(self.request.refs.len());
        for r in &self.request.refs {
            let (id, new) = self.intern(r.clone(), Node::Pending(REQUESTED));
            if new {
                frontier.push(id);
            }
        }
        while !frontier.is_empty() {
            self.rounds += 1;
            if self.rounds > MAX_ROUNDS {
                // The walk back is a job's: name the first ref a job builds (a dataset's refs
                // end their branch), as what it is.
                let found = frontier
                    .iter()
                    .map(|&id| self.refs[id as usize].as_str())
                    .filter_map(|r| Some((r, self.graph.producer_of(r)?.0)))
                    .find(|(_, p)| matches!(p, Producer::Job { .. }));
                let (last, producer) = match found {
                    Some((r, p)) => (r.to_string(), self.graph.describe_producer(p)),
                    None => (
                        self.refs[frontier[0] as usize].to_string(),
                        "no job".to_string(),
                    ),
                };
                return Err(PlanError::Unbounded { last, producer });
            }
            frontier = self.round(frontier)?;
        }
        self.order_runs()?;
        Ok(self.plan)
    }

    /// The number of `r`, and whether it is new (then its node starts as `node`).
    fn intern(&mut self, r: PartitionRef, node: Node) -> (u32, bool) {
        let hash = FxBuildHasher.hash_one(r.as_str());
        let refs = &self.refs;
        if let Some(&id) = self.ids.find(hash, |&id| refs[id as usize] == r) {
            return (id, false);
        }
        let id = self.refs.len() as u32;
        self.ids.insert_unique(hash, id, |&id| {
            FxBuildHasher.hash_one(refs[id as usize].as_str())
        });
        self.refs.push(r);
        self.nodes.push(node);
        (id, true)
    }

    /// The number of an input of run `run`, numbering it (and reaching it: `next`) if it is new.
    /// Many runs read the same input (a week's window, the day's reviews), and neighbours share
    /// most of theirs: the previous run's inputs (from `previous` in `run_inputs`) are looked at
    /// before the table.
    fn input_id(&mut self, r: PartitionRef, run: u32, previous: usize, next: &mut Vec<u32>) -> u32 {
        let neighbours = &self.run_inputs[previous..];
        if neighbours.len() <= 16 {
            if let Some(&id) = neighbours.iter().find(|&&id| self.refs[id as usize] == r) {
                return id;
            }
        }
        let (id, new) = self.intern(r, Node::Pending(run));
        if new {
            next.push(id);
        }
        id
    }

    fn needed_by(&self, run: Option<usize>) -> Option<String> {
        run.map(|i| {
            let r = self.runs.get(i);
            format!("job `{}` for `{}`", r.job, r.outputs[0])
        })
    }

    /// Decides every ref of the frontier and returns the refs the new runs read.
    fn round(&mut self, frontier: Vec<u32>) -> Result<Vec<u32>, PlanError> {
        // Refs to build, grouped by job in order of first appearance, with the index of the output
        // pattern each matched and the reason it is built; and the live refs of config jobs, to
        // ask their config about in the same call.
        let mut to_build: Vec<(usize, Vec<Wanted>, Vec<Wanted>)> = Vec::new();
        let mut job_slot: HashMap<usize, usize> = HashMap::new();
        let mut next = Vec::new();
        let mut carried = Vec::new();
        let keys: Vec<&str> = frontier
            .iter()
            .map(|&id| self.refs[id as usize].as_str())
            .collect();
        let known = self.states.states(&keys)?;
        for (id, known) in frontier.into_iter().zip(known) {
            let Node::Pending(pending) = self.nodes[id as usize] else {
                continue; // Already built as a sibling output of a run planned this round.
            };
            let r = self.refs[id as usize].clone();
            let needed_by = needer(pending);
            let Some((producer, _)) = self.graph.producer_of(r.as_str()) else {
                return Err(PlanError::UnknownRef {
                    partition_ref: r.to_string(),
                    reason: self.graph.unmatched_reason(r.as_str()),
                    needed_by: self.needed_by(needed_by),
                });
            };
            match producer {
                Producer::Dataset(d) => self.settle_external(d, id, needed_by)?,
                Producer::Alias(_) => {
                    let pinned =
                        resolve_alias(self.graph, self.states, &self.request.pins, r.as_str())
                            .expect("an alias ref resolves");
                    let (pinned, new) = self.intern(pinned, Node::Pending(pending));
                    if new {
                        next.push(pinned);
                    }
                    self.nodes[id as usize] = Node::Settled;
                    self.aliases.insert(id, pinned);
                }
                Producer::Job { job, output } => {
                    let recheck = self.recheck
                        && known == KnownState::Live
                        && matches!(self.graph.jobs[job].deps, Deps::Dynamic { .. })
                        && !(self.request.force && self.requested.contains(r.as_str()));
                    let reason = if recheck {
                        None
                    } else {
                        let Some(reason) = self.build_reason(id, known, needed_by) else {
                            continue;
                        };
                        if let BuildReason::CarryForward(_) = reason {
                            carried.push((job, r, reason));
                            continue;
                        }
                        Some(reason)
                    };
                    let slot = *job_slot.entry(job).or_insert_with(|| {
                        to_build.push((job, Vec::new(), Vec::new()));
                        to_build.len() - 1
                    });
                    let (_, wanted, live) = &mut to_build[slot];
                    match reason {
                        Some(reason) => wanted.push(Wanted {
                            r,
                            id,
                            output,
                            reason,
                        }),
                        // The reason is decided by what the config says.
                        None => live.push(Wanted {
                            r,
                            id,
                            output,
                            reason: BuildReason::Sibling,
                        }),
                    }
                }
            }
        }
        for (job, r, reason) in carried {
            let config = JobConfig {
                outputs: vec![r],
                inputs: Vec::new(),
                args: Vec::new(),
                env: BTreeMap::new(),
            };
            self.add_run(job, config, vec![reason], None, &mut next);
        }
        let mut called = false;
        for (job, refs, live) in to_build {
            if let Deps::Static(templates) = &self.graph.jobs[job].deps {
                self.add_static_runs(job, templates, &refs, &mut next)?;
                continue;
            }
            if let Deps::Dynamic { .. } = self.graph.jobs[job].deps {
                if !called {
                    called = true;
                    self.config_rounds += 1;
                }
                if self.config_rounds > MAX_CONFIG_ROUNDS {
                    return Err(PlanError::UnboundedConfig {
                        last: refs.first().or(live.first()).expect("a ref").r.to_string(),
                        job: self.graph.jobs[job].name.clone(),
                    });
                }
            }
            let configs = self.resolved_configs(job, &refs, &live)?;
            let live_ids: FxHashMap<&str, u32> =
                live.iter().map(|w| (w.r.as_str(), w.id)).collect();
            for (config, reasons) in configs {
                match reasons {
                    Some(reasons) => self.add_run(job, config, reasons, None, &mut next),
                    // Every output was live and its config chose as it did: nothing to build.
                    None => self.settle_live(&live_ids, &config),
                }
            }
        }
        Ok(next)
    }

    /// Adds the runs of a job with static input templates. A large round expands its templates on
    /// a second thread, a slice ahead of the runs being added, so the two overlap.
    fn add_static_runs(
        &mut self,
        job_index: usize,
        templates: &[LinkedTemplate],
        refs: &[Wanted],
        next: &mut Vec<u32>,
    ) -> Result<(), PlanError> {
        let graph = self.graph;
        let job = &graph.jobs[job_index];
        let slice = PIPELINED_RUNS * job.batch as usize;
        // Static configs list their outputs in the order of `refs`: each takes the next ones.
        let mut unbuilt = refs;
        let mut add = |planner: &mut Self, configs: Vec<(JobConfig, Vec<BuildReason>)>| {
            for (config, reasons) in configs {
                let (outputs, rest) = unbuilt.split_at(config.outputs.len());
                unbuilt = rest;
                planner.add_run(job_index, config, reasons, Some(outputs), next);
            }
        };
        if refs.len() <= slice {
            add(self, static_configs(graph, job, templates, refs)?);
            return Ok(());
        }
        std::thread::scope(|scope| {
            let (expanded, configs) = std::sync::mpsc::sync_channel(2);
            scope.spawn(move || {
                for chunk in refs.chunks(slice) {
                    let result = static_configs(graph, job, templates, chunk);
                    let failed = result.is_err();
                    // Stops when planning stopped listening (it failed) or at the first error.
                    if expanded.send(result).is_err() || failed {
                        break;
                    }
                }
            });
            for result in configs {
                add(self, result?);
            }
            Ok(())
        })
    }

    fn settle_external(
        &mut self,
        dataset: usize,
        id: u32,
        needed_by: Option<usize>,
    ) -> Result<(), PlanError> {
        let ds = &self.graph.datasets[dataset];
        let r = self.refs[id as usize].clone();
        let available = self
            .resolver
            .external_available(ds, &r)
            .map_err(|e| PlanError::Probe {
                dataset: ds.name.clone(),
                partition_ref: r.to_string(),
                message: e.to_string(),
            })?;
        self.nodes[id as usize] = Node::Settled;
        if available {
            self.plan.skipped.push(r);
        } else {
            self.plan.missing.push(MissingExternal {
                partition_ref: r,
                dataset: ds.name.clone(),
                needed_by: self.needed_by(needed_by),
                failed_check: None,
            });
        }
        Ok(())
    }

    /// Why this job output must be built, or `None` (after settling it) when it must not.
    fn build_reason(
        &mut self,
        id: u32,
        known: KnownState,
        needed_by: Option<usize>,
    ) -> Option<BuildReason> {
        let r = &self.refs[id as usize];
        let forced = self.request.force && self.requested.contains(r.as_str());
        let reason = match known {
            _ if forced => BuildReason::Forced,
            KnownState::CheckFailed { reason } => {
                let job = match self.graph.producer_of(r.as_str()) {
                    Some((p, _)) => self.graph.producer_name(p).to_string(),
                    None => String::new(),
                };
                self.plan.missing.push(MissingExternal {
                    partition_ref: r.clone(),
                    dataset: job,
                    needed_by: self.needed_by(needed_by),
                    failed_check: Some(reason),
                });
                self.nodes[id as usize] = Node::Settled;
                return None;
            }
            KnownState::Missing => BuildReason::Missing,
            KnownState::Failed => BuildReason::Failed,
            KnownState::Tainted => BuildReason::Tainted,
            KnownState::Stale { reason } if !self.request.allow_stale => BuildReason::Stale(reason),
            KnownState::Kept { reason } if self.carries_forward(r) && !self.request.allow_stale => {
                BuildReason::CarryForward(reason)
            }
            KnownState::Live | KnownState::Stale { .. } | KnownState::Kept { .. } => {
                if let KnownState::Kept { reason } = known {
                    self.plan.not_rebuildable.push((r.clone(), reason));
                }
                self.plan.skipped.push(r.clone());
                self.nodes[id as usize] = Node::Settled;
                return None;
            }
            KnownState::Building { build_request_id } => {
                self.plan.delegated.push(Delegation {
                    partition_ref: r.clone(),
                    build_request_id,
                });
                self.nodes[id as usize] = Node::Settled;
                return None;
            }
        };
        Some(reason)
    }

    /// Does the job building `r` declare a `migrate` command?
    fn carries_forward(&self, r: &PartitionRef) -> bool {
        matches!(self.graph.producer_of(r.as_str()), Some((Producer::Job { job, .. }, _)) if self.graph.jobs[job].migrate.is_some())
    }

    /// Asks the resolver (the config executable, or the table loader) for the run configs of one
    /// job's refs of this round, to build (`refs`) and live (`live`, to re-check): one call per job
    /// and round. A config with nothing to build (`None` for its reasons) builds only live refs
    /// whose config chose as before.
    #[allow(clippy::type_complexity)]
    fn resolved_configs(
        &mut self,
        job_index: usize,
        refs: &[Wanted],
        live: &[Wanted],
    ) -> Result<Vec<(JobConfig, Option<Vec<BuildReason>>)>, PlanError> {
        let job = &self.graph.jobs[job_index];
        let asked: Vec<PartitionRef> = refs.iter().chain(live).map(|w| w.r.clone()).collect();
        let configs = self
            .resolver
            .job_configs(job, &asked)
            .map_err(|e| PlanError::Config {
                job: job.name.clone(),
                message: e.to_string(),
            })?;
        let checked = self.check_configs(job_index, refs, live, configs)?;
        if live.is_empty() {
            return Ok(checked.into_iter().map(|(c, r)| (c, Some(r))).collect());
        }
        let live_refs: HashSet<&str> = live.iter().map(|w| w.r.as_str()).collect();
        let wanted_refs: HashSet<&str> = refs.iter().map(|w| w.r.as_str()).collect();
        let mut decided = Vec::with_capacity(checked.len());
        for (config, mut reasons) in checked {
            let mut build = false;
            for (out, reason) in config.outputs.iter().zip(&mut reasons) {
                if wanted_refs.contains(out.as_str()) {
                    build = true;
                } else if live_refs.contains(out.as_str()) {
                    if let Some(why) = self.config_changed(job, out, &config) {
                        *reason = BuildReason::Stale(why);
                        build = true;
                    }
                }
            }
            decided.push((config, build.then_some(reasons)));
        }
        Ok(decided)
    }

    /// The version ref a table alias reads in this request (`None`: not an alias).
    fn pinned(&self, r: &PartitionRef) -> Option<PartitionRef> {
        resolve_alias(self.graph, self.states, &self.request.pins, r.as_str())
    }

    /// How the config's answer for live `r` differs from what built it (aliases read as the
    /// version refs they point at, as a run would record them).
    fn config_changed(&self, job: &Job, r: &PartitionRef, config: &JobConfig) -> Option<String> {
        let mut now = config.clone();
        if !self.graph.tables.is_empty() {
            for input in &mut now.inputs {
                if let Some(pinned) = self.pinned(&input.partition_ref) {
                    input.partition_ref = pinned;
                }
            }
        }
        self.states.config_change(r.as_str(), job, &now)
    }

    /// Live refs whose config did not change: skipped, as any live ref.
    fn settle_live(&mut self, live: &FxHashMap<&str, u32>, config: &JobConfig) {
        for out in &config.outputs {
            if let Some(&id) = live.get(out.as_str()) {
                if matches!(self.nodes[id as usize], Node::Pending(_)) {
                    self.nodes[id as usize] = Node::Settled;
                    self.plan.skipped.push(out.clone());
                }
            }
        }
    }

    /// A config executable's answer must cover every requested output exactly once, with outputs of
    /// this job only.
    fn check_configs(
        &self,
        job_index: usize,
        refs: &[Wanted],
        live: &[Wanted],
        configs: Vec<JobConfig>,
    ) -> Result<Vec<(JobConfig, Vec<BuildReason>)>, PlanError> {
        let job = &self.graph.jobs[job_index];
        let fail = |message: String| PlanError::Config {
            job: job.name.clone(),
            message,
        };
        let reasons: HashMap<&str, &BuildReason> =
            refs.iter().map(|w| (w.r.as_str(), &w.reason)).collect();
        let mut covered: HashSet<&str> = HashSet::new();
        let mut checked = Vec::with_capacity(configs.len());
        for config in &configs {
            if config.outputs.is_empty() {
                return Err(fail("a config lists no outputs".into()));
            }
            if let Some(key) = config.env.keys().find(|k| k.starts_with("DATABUILD_")) {
                return Err(fail(format!(
                    "a config sets `{key}`, but `DATABUILD_` variables are set by DataBuild itself"
                )));
            }
            for out in &config.outputs {
                match self.graph.producer_of(out.as_str()) {
                    Some((Producer::Job { job, .. }, _)) if job == job_index => {}
                    _ => {
                        return Err(fail(format!(
                            "a config lists output `{out}`, which job `{}` does not build",
                            job.name
                        )))
                    }
                }
                if !covered.insert(out.as_str()) {
                    return Err(fail(format!("output `{out}` appears in two configs")));
                }
            }
        }
        if let Some(w) = refs
            .iter()
            .chain(live)
            .find(|w| !covered.contains(w.r.as_str()))
        {
            return Err(fail(format!(
                "no config covers the requested output `{}`",
                w.r
            )));
        }
        for config in configs {
            let why = config
                .outputs
                .iter()
                .map(|o| {
                    reasons
                        .get(o.as_str())
                        .map_or(BuildReason::Sibling, |w| (*w).clone())
                })
                .collect();
            checked.push((config, why));
        }
        Ok(checked)
    }

    fn add_run(
        &mut self,
        job: usize,
        config: JobConfig,
        reasons: Vec<BuildReason>,
        outputs: Option<&[Wanted]>,
        next: &mut Vec<u32>,
    ) {
        let index = self.runs.len as u32;
        self.run_round.push(self.rounds);
        for (i, out) in config.outputs.iter().enumerate() {
            // The refs of static configs are numbered already (and in order).
            let id = match outputs {
                Some(wanted) => wanted[i].id,
                None => self.intern(out.clone(), Node::Planned(index)).0,
            };
            // A sibling output may already be planned by another run; the first run keeps it.
            let node = &mut self.nodes[id as usize];
            if !matches!(node, Node::Planned(_)) {
                *node = Node::Planned(index);
            }
        }
        let mut inputs = Vec::with_capacity(config.inputs.len());
        let mut query_inputs = Vec::new();
        let mut aliased = Vec::new();
        // Where the previous run's inputs start.
        let starts = &self.run_input_starts;
        let previous = starts.len().checked_sub(2).map_or(0, |i| starts[i]);
        for mut input in config.inputs {
            // A run reads the version an alias points at, so it can be built against a version
            // before promotion, and its record says which version it read.
            if !self.graph.tables.is_empty() {
                if let Some(pinned) = self.pinned(&input.partition_ref) {
                    aliased.push((input.partition_ref, pinned.clone()));
                    input.partition_ref = pinned;
                }
            }
            match input.dep {
                DepKind::Query => query_inputs.push(input.partition_ref),
                DepKind::Materialize => {
                    let id = self.input_id(input.partition_ref, index, previous, next);
                    self.run_inputs.push(id);
                    inputs.push(self.refs[id as usize].clone());
                }
            }
        }
        self.run_input_starts.push(self.run_inputs.len());
        self.runs.push(PlannedRun {
            job_index: job,
            job: self.job_names[job].clone(),
            outputs: config.outputs,
            inputs,
            extras: (!query_inputs.is_empty()
                || !config.args.is_empty()
                || !config.env.is_empty()
                || !aliased.is_empty())
            .then(|| {
                Box::new(RunExtras {
                    query_inputs,
                    args: config.args,
                    env: config.env,
                    aliased,
                })
            }),
            depends_on: Vec::new(),
            reasons,
        });
    }

    /// Orders runs so each follows the runs building its inputs (Kahn's algorithm, stable in
    /// creation order), or reports a cycle.
    fn order_runs(&mut self) -> Result<(), PlanError> {
        let n = self.runs.len;
        let mut deps: Vec<Vec<usize>> = Vec::with_capacity(n);
        for run in 0..n {
            let inputs =
                &self.run_inputs[self.run_input_starts[run]..self.run_input_starts[run + 1]];
            let mut d: Vec<usize> = inputs
                .iter()
                .filter_map(|i| {
                    let i = self.aliases.get(i).unwrap_or(i);
                    match self.nodes[*i as usize] {
                        Node::Planned(p) => Some(p as usize),
                        _ => None,
                    }
                })
                .collect();
            d.sort_unstable();
            d.dedup();
            deps.push(d);
        }
        // The runs waiting on each run, flat: run `i`'s are `dependents[starts[i]..starts[i + 1]]`
        // (one allocation instead of one per run).
        let mut starts = vec![0usize; n + 1];
        for &dep in deps.iter().flatten() {
            starts[dep + 1] += 1;
        }
        for i in 0..n {
            starts[i + 1] += starts[i];
        }
        let mut dependents = vec![0u32; starts[n]];
        let mut filled = starts.clone();
        let mut waiting: Vec<usize> = vec![0; n];
        for (run, d) in deps.iter().enumerate() {
            waiting[run] = d.len();
            for &dep in d {
                dependents[filled[dep]] = run as u32;
                filled[dep] += 1;
            }
        }
        drop(filled);
        // Start from the deepest rounds so the order reads upstream to downstream, and keep creation
        // order within a round so batches and requests stay in the order they were given.
        let mut roots: Vec<usize> = (0..n).filter(|&r| waiting[r] == 0).collect();
        roots.sort_by_key(|&r| (std::cmp::Reverse(self.run_round[r]), r));
        let mut ready: VecDeque<usize> = roots.into();
        let mut order = Vec::with_capacity(n);
        while let Some(r) = ready.pop_front() {
            order.push(r);
            for &d in &dependents[starts[r]..starts[r + 1]] {
                let d = d as usize;
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    ready.push_back(d);
                }
            }
        }
        if order.len() < n {
            return Err(PlanError::Cycle(self.find_cycle(&deps, &waiting)));
        }
        let mut position = vec![0; n];
        for (pos, &r) in order.iter().enumerate() {
            position[r] = pos;
        }
        drop((dependents, starts));
        for (r, mut d) in deps.into_iter().enumerate() {
            d.iter_mut().for_each(|dep| *dep = position[*dep]);
            d.sort_unstable();
            self.runs.get_mut(r).depends_on = d;
        }
        // Each run goes straight to its place, chunk by chunk, each chunk freed once emptied.
        // (`Option<PlannedRun>` is as large as a run, so the last step reuses the same memory.)
        let mut placed: Vec<Option<PlannedRun>> = Vec::new();
        placed.resize_with(n, || None);
        let mut r = 0;
        for chunk in std::mem::take(&mut self.runs).chunks {
            for run in chunk {
                placed[position[r]] = Some(run);
                r += 1;
            }
        }
        self.plan.runs = placed
            .into_iter()
            .map(|run| run.expect("positions are a permutation"))
            .collect();
        Ok(())
    }

    /// Walks dependencies among the runs Kahn's algorithm could not place until a run repeats.
    fn find_cycle(&self, deps: &[Vec<usize>], waiting: &[usize]) -> Vec<String> {
        let start = (0..deps.len())
            .find(|&r| waiting[r] > 0)
            .expect("a run is left");
        let mut path = vec![start];
        let mut seen_at = HashMap::from([(start, 0)]);
        let mut current = start;
        loop {
            let next = *deps[current]
                .iter()
                .find(|&&d| waiting[d] > 0)
                .expect("a blocked run waits on a blocked run");
            if let Some(&at) = seen_at.get(&next) {
                let mut cycle: Vec<String> = path[at..]
                    .iter()
                    .map(|&r| {
                        let run = self.runs.get(r);
                        format!("{} (job `{}`)", run.outputs[0], run.job)
                    })
                    .collect();
                cycle.push(cycle[0].clone());
                return cycle;
            }
            seen_at.insert(next, path.len());
            path.push(next);
            current = next;
        }
    }
}

/// Run configs of a job with static input templates, for some of its refs to build.
fn static_configs(
    graph: &Graph,
    job: &Job,
    templates: &[LinkedTemplate],
    refs: &[Wanted],
) -> Result<Vec<(JobConfig, Vec<BuildReason>)>, PlanError> {
    let mut configs = Vec::with_capacity(refs.len() / job.batch as usize + 1);
    for chunk in refs.chunks(job.batch as usize) {
        let mut inputs: Vec<ConfigInput> = Vec::new();
        let mut seen: FxHashSet<String> = FxHashSet::default();
        let mut expanded = Vec::new();
        for Wanted { r, output, .. } in chunk {
            let values = job.outputs[*output]
                .match_ref(r.as_str())
                .expect("the index matched this ref to this output");
            for t in templates {
                expanded.clear();
                t.template
                    .expand(*output, &values, &graph.domains, &mut expanded)
                    .map_err(|e| PlanError::Template {
                        job: job.name.clone(),
                        message: e.to_string(),
                    })?;
                for s in expanded.drain(..) {
                    // Small runs dedup by scanning; large fan-ins use a set.
                    let repeat = if inputs.len() < 32 {
                        inputs.iter().any(|i| i.partition_ref.as_str() == s)
                    } else {
                        if seen.is_empty() {
                            seen.extend(inputs.iter().map(|i| i.partition_ref.to_string()));
                        }
                        !seen.insert(s.clone())
                    };
                    if repeat {
                        continue;
                    }
                    let input = PartitionRef::new(s).map_err(|e| PlanError::Template {
                        job: job.name.clone(),
                        message: format!(
                            "input template `{}` gives an invalid ref for `{r}`: {e}",
                            t.template.as_str()
                        ),
                    })?;
                    inputs.push(ConfigInput {
                        partition_ref: input,
                        dep: DepKind::Materialize,
                    });
                }
            }
        }
        let config = JobConfig {
            outputs: chunk.iter().map(|w| w.r.clone()).collect(),
            inputs,
            args: Vec::new(),
            env: BTreeMap::new(),
        };
        let reasons = chunk.iter().map(|w| w.reason.clone()).collect();
        configs.push((config, reasons));
    }
    Ok(configs)
}

#[cfg(test)]
mod tests;
