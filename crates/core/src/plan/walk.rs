//! The walk itself: rounds upstream from the requested refs, every ref numbered once and decided
//! once, each round's refs grouped by job (a dynamic job's config is asked once a round), then a
//! topological sort of the runs.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::hash::BuildHasher;
use std::sync::Arc;

use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};

use super::*;
use crate::graph::{Deps, LinkedTemplate};

/// Runs per slice when a round's template expansion runs on a second thread.
pub(super) const PIPELINED_RUNS: usize = 8192;

/// Refs whose states are read at once (one [`StateView::states`] call).
const STATES_AT_ONCE: usize = 65_536;

/// A ref to build: its number, the index of the output pattern it matched, and why it is built.
struct Wanted {
    r: PartitionRef,
    id: u32,
    output: usize,
    reason: BuildReason,
}

/// What a round decided to build: refs grouped by job in order of first appearance (each with
/// the index of the output pattern it matched and why it is built), with the live refs of config
/// jobs to ask their config about in the same call; carry-forward runs; and the refs reached next.
#[derive(Default)]
struct Round {
    to_build: Vec<ToBuild>,
    job_slot: HashMap<usize, usize>,
    carried: Vec<(usize, PartitionRef, BuildReason)>,
    next: Vec<u32>,
}

/// A job's refs to build in a round, and its live refs to ask its config about.
struct ToBuild {
    job: usize,
    /// In slices of [`PIPELINED_RUNS`] runs of a static job (`PIPELINED_RUNS` × its batch refs),
    /// each freed once its runs are added; another job's in one.
    slices: Vec<Vec<Wanted>>,
    live: Vec<Wanted>,
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

pub(super) struct Planner<'a> {
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
    /// The runs in creation order (reordered at the end, where they lie).
    runs: Vec<PlannedRun>,
    /// The round in which each run (by creation index) was planned: deeper rounds run first.
    run_round: Vec<u32>,
    rounds: usize,
    /// Rounds that called a config executable (see [`MAX_CONFIG_ROUNDS`]).
    config_rounds: usize,
    /// Ask configs about live partitions too ([`StateView::checks_configs`]).
    recheck: bool,
    plan: Plan,
}

impl<'a> Planner<'a> {
    /// A planner of `request`, before its first round.
    pub(super) fn new(
        graph: &'a Graph,
        request: &'a PlanRequest,
        states: &'a dyn StateView,
        resolver: &'a mut dyn Resolver,
    ) -> Planner<'a> {
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
            runs: Vec::new(),
            run_round: Vec::new(),
            rounds: 0,
            config_rounds: 0,
            recheck: states.checks_configs() && !request.allow_stale,
            plan: Plan::default(),
        }
    }
}

impl Planner<'_> {
    pub(super) fn run(mut self) -> Result<Plan, PlanError> {
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
            let r = &self.runs[i];
            format!("job `{}` for `{}`", r.job, r.outputs[0])
        })
    }

    /// Decides every ref of the frontier and returns the refs the new runs read.
    fn round(&mut self, frontier: Vec<u32>) -> Result<Vec<u32>, PlanError> {
        let mut round = Round::default();
        // States are read a slice at a time, so a round of a million refs never holds a
        // million of them at once.
        for slice in frontier.chunks(STATES_AT_ONCE) {
            let known = {
                let keys: Vec<&str> = slice
                    .iter()
                    .map(|&id| self.refs[id as usize].as_str())
                    .collect();
                self.states.states(&keys)?
            };
            for (&id, known) in slice.iter().zip(known) {
                self.decide(id, known, &mut round)?;
            }
        }
        let Round {
            to_build,
            carried,
            mut next,
            ..
        } = round;
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
        for ToBuild { job, slices, live } in to_build {
            if let Deps::Static(templates) = &self.graph.jobs[job].deps {
                self.add_static_runs(job, templates, slices, &mut next)?;
                continue;
            }
            // A job asked of its config has its refs in one slice (none: only live refs).
            let refs: Vec<Wanted> = slices.into_iter().next().unwrap_or_default();
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

    /// Decides one ref of the frontier: settled (live, external, delegated), or to build (in
    /// `round`, grouped by job), or an alias's (its version ref reached next).
    fn decide(&mut self, id: u32, known: KnownState, round: &mut Round) -> Result<(), PlanError> {
        let Node::Pending(pending) = self.nodes[id as usize] else {
            return Ok(()); // Already built as a sibling output of a run planned this round.
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
                let pinned = resolve_alias(self.graph, self.states, &self.request.pins, r.as_str())
                    .expect("an alias ref resolves");
                let (pinned, new) = self.intern(pinned, Node::Pending(pending));
                if new {
                    round.next.push(pinned);
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
                        return Ok(());
                    };
                    if let BuildReason::CarryForward(_) = reason {
                        round.carried.push((job, r, reason));
                        return Ok(());
                    }
                    Some(reason)
                };
                let slot = *round.job_slot.entry(job).or_insert_with(|| {
                    round.to_build.push(ToBuild {
                        job,
                        slices: Vec::new(),
                        live: Vec::new(),
                    });
                    round.to_build.len() - 1
                });
                let ToBuild { slices, live, .. } = &mut round.to_build[slot];
                match reason {
                    Some(reason) => {
                        let slice = match self.graph.jobs[job].deps {
                            Deps::Static(_) => {
                                PIPELINED_RUNS.saturating_mul(self.graph.jobs[job].batch as usize)
                            }
                            // Asked of its config (or its table) in one call.
                            Deps::Dynamic { .. } | Deps::Table { .. } => usize::MAX,
                        };
                        if slices.last().is_none_or(|last| last.len() == slice) {
                            // Grown as it fills: a job of a large batch may build a few refs.
                            slices.push(Vec::new());
                        }
                        slices.last_mut().expect("a slice").push(Wanted {
                            r,
                            id,
                            output,
                            reason,
                        });
                    }
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
        Ok(())
    }

    /// Adds the runs of a job with static input templates. A round of several slices expands
    /// its templates on a second thread, a slice ahead of the runs being added, so the two
    /// overlap; each slice is freed once its runs are added.
    fn add_static_runs(
        &mut self,
        job_index: usize,
        templates: &[LinkedTemplate],
        slices: Vec<Vec<Wanted>>,
        next: &mut Vec<u32>,
    ) -> Result<(), PlanError> {
        let graph = self.graph;
        let job = &graph.jobs[job_index];
        // Room for the round's runs at once: a first round of a million runs is one allocation,
        // not twenty doublings each copying the runs so far.
        let refs: usize = slices.iter().map(Vec::len).sum();
        self.runs.reserve(refs.div_ceil(job.batch as usize));
        if slices.len() <= 1 {
            for slice in slices {
                let configs = static_configs(graph, job, templates, &slice)?;
                self.add_static_configs(job_index, &slice, configs, next);
            }
            return Ok(());
        }
        std::thread::scope(|scope| {
            let (expanded, configs) = std::sync::mpsc::sync_channel(2);
            scope.spawn(move || {
                for slice in slices {
                    let result = static_configs(graph, job, templates, &slice);
                    let failed = result.is_err();
                    // Stops when planning stopped listening (it failed) or at the first error.
                    if expanded.send((result, slice)).is_err() || failed {
                        break;
                    }
                }
            });
            for (result, slice) in configs {
                self.add_static_configs(job_index, &slice, result?, next);
            }
            Ok(())
        })
    }

    /// Adds the runs of the static configs of `slice`, which list their outputs in its order.
    fn add_static_configs(
        &mut self,
        job_index: usize,
        slice: &[Wanted],
        configs: Vec<(JobConfig, Vec<BuildReason>)>,
        next: &mut Vec<u32>,
    ) {
        let mut unbuilt = slice;
        for (config, reasons) in configs {
            let (outputs, rest) = unbuilt.split_at(config.outputs.len());
            unbuilt = rest;
            self.add_run(job_index, config, reasons, Some(outputs), next);
        }
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
            KnownState::Stale { reason, by_code } if !self.request.allow_stale => {
                BuildReason::Stale(StaleReason { reason, by_code })
            }
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
            .map_err(|e| match e {
                crate::ResolveError::ConfigWithheld(w) => PlanError::ConfigWithheld(w),
                e => PlanError::Config {
                    job: job.name.clone(),
                    message: e.to_string(),
                },
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
                        *reason = BuildReason::Stale(why.into());
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
        let index = self.runs.len() as u32;
        self.run_round.push(self.rounds as u32);
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
                    env: crate::RunEnv::new(self.graph, config.env),
                    aliased,
                })
            }),
            depends_on: Vec::new(),
            reasons,
        });
    }

    /// Orders runs so each follows the runs building its inputs (Kahn's algorithm, stable in
    /// creation order), or reports a cycle. A million-run plan is the largest thing planning
    /// holds, so the runs are reordered where they lie and every index list is flat and `u32`.
    fn order_runs(&mut self) -> Result<(), PlanError> {
        let n = self.runs.len();
        let deps = self.run_dependencies();
        // The runs waiting on each run, flat as `deps` is.
        let dependents = Flat::grouped(
            n,
            (0..n).flat_map(|run| deps.of(run).iter().map(move |&dep| (dep, run as u32))),
        );
        let mut waiting: Vec<u32> = (0..n).map(|r| deps.of(r).len() as u32).collect();
        // Start from the deepest rounds so the order reads upstream to downstream, and keep creation
        // order within a round so batches and requests stay in the order they were given.
        let mut roots: Vec<u32> = (0..n as u32)
            .filter(|&r| waiting[r as usize] == 0)
            .collect();
        roots.sort_by_key(|&r| (std::cmp::Reverse(self.run_round[r as usize]), r));
        let mut ready: VecDeque<u32> = roots.into();
        // Each run's place in the order, by creation index.
        let mut position = vec![u32::MAX; n];
        let mut placed = 0;
        while let Some(r) = ready.pop_front() {
            position[r as usize] = placed;
            placed += 1;
            for &d in dependents.of(r as usize) {
                let d = d as usize;
                waiting[d] -= 1;
                if waiting[d] == 0 {
                    ready.push_back(d as u32);
                }
            }
        }
        if (placed as usize) < n {
            return Err(PlanError::Cycle(self.find_cycle(&deps, &waiting)));
        }
        drop((dependents, waiting, ready));
        for r in 0..n {
            let mut d: Vec<usize> = deps
                .of(r)
                .iter()
                .map(|&dep| position[dep as usize] as usize)
                .collect();
            d.sort_unstable();
            self.runs[r].depends_on = d;
        }
        drop(deps);
        permute(&mut self.runs, &mut position);
        self.plan.runs = std::mem::take(&mut self.runs);
        Ok(())
    }

    /// The runs each run depends on (creation indices, each once, ascending).
    fn run_dependencies(&self) -> Flat {
        let n = self.runs.len();
        let mut deps = Flat {
            starts: Vec::with_capacity(n + 1),
            items: Vec::new(),
        };
        deps.starts.push(0);
        for run in 0..n {
            let from = deps.items.len();
            let inputs =
                &self.run_inputs[self.run_input_starts[run]..self.run_input_starts[run + 1]];
            for i in inputs {
                let i = self.aliases.get(i).unwrap_or(i);
                if let Node::Planned(p) = self.nodes[*i as usize] {
                    deps.items.push(p);
                }
            }
            deps.items[from..].sort_unstable();
            let mut kept = from;
            for k in from..deps.items.len() {
                if kept == from || deps.items[k] != deps.items[kept - 1] {
                    deps.items[kept] = deps.items[k];
                    kept += 1;
                }
            }
            deps.items.truncate(kept);
            deps.starts
                .push(u32::try_from(kept).expect("under 2^32 dependencies"));
        }
        deps
    }

    /// Walks dependencies among the runs Kahn's algorithm could not place until a run repeats.
    fn find_cycle(&self, deps: &Flat, waiting: &[u32]) -> Vec<String> {
        let start = (0..self.runs.len())
            .find(|&r| waiting[r] > 0)
            .expect("a run is left");
        let mut path = vec![start];
        let mut seen_at = HashMap::from([(start, 0)]);
        let mut current = start;
        loop {
            let next = *deps
                .of(current)
                .iter()
                .find(|&&d| waiting[d as usize] > 0)
                .expect("a blocked run waits on a blocked run") as usize;
            if let Some(&at) = seen_at.get(&next) {
                let mut cycle: Vec<String> = path[at..]
                    .iter()
                    .map(|&r| {
                        let run = &self.runs[r];
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

/// Moves each item `i` to `to[i]` in place (`to` is a permutation, left as the identity), by
/// following each of its cycles: no second copy of a million runs.
fn permute<T>(items: &mut [T], to: &mut [u32]) {
    for i in 0..to.len() {
        while to[i] as usize != i {
            let j = to[i] as usize;
            items.swap(i, j);
            to.swap(i, j);
        }
    }
}

/// A list of lists in two allocations: list `i` is `items[starts[i]..starts[i + 1]]`. A million
/// runs' dependencies as `Vec<Vec<_>>` would be a million allocations and 24 MB of headers.
struct Flat {
    starts: Vec<u32>,
    items: Vec<u32>,
}

impl Flat {
    /// The lists of `lists` owners from `(owner, item)` pairs, each list in the pairs' order.
    fn grouped(lists: usize, pairs: impl Iterator<Item = (u32, u32)> + Clone) -> Flat {
        let mut starts = vec![0u32; lists + 1];
        for (owner, _) in pairs.clone() {
            starts[owner as usize + 1] += 1;
        }
        for i in 0..lists {
            starts[i + 1] = (starts[i + 1].checked_add(starts[i])).expect("under 2^32 items");
        }
        let mut next = starts.clone();
        let mut items = vec![0; starts[lists] as usize];
        for (owner, item) in pairs {
            let at = &mut next[owner as usize];
            items[*at as usize] = item;
            *at += 1;
        }
        Flat { starts, items }
    }

    fn of(&self, list: usize) -> &[u32] {
        &self.items[self.starts[list] as usize..self.starts[list + 1] as usize]
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Every item lands where the permutation sends it.
        #[test]
        fn permute_moves_each_item_to_its_place(shuffle in Just((0..300u32).collect::<Vec<_>>()).prop_shuffle()) {
            let items: Vec<u32> = (0..shuffle.len() as u32).map(|i| i * 10).collect();
            let mut moved = items.clone();
            let mut to = shuffle.clone();
            permute(&mut moved, &mut to);
            for (i, &place) in shuffle.iter().enumerate() {
                prop_assert_eq!(moved[place as usize], items[i]);
            }
        }

        /// Each owner's list holds its items, in the pairs' order.
        #[test]
        fn grouped_lists_keep_each_owners_items_in_order(pairs in prop::collection::vec((0..20u32, any::<u32>()), 0..200)) {
            let flat = Flat::grouped(20, pairs.iter().copied());
            for owner in 0..20u32 {
                let expected: Vec<u32> =
                    pairs.iter().filter(|(o, _)| *o == owner).map(|&(_, i)| i).collect();
                prop_assert_eq!(flat.of(owner as usize), &expected[..]);
            }
        }
    }
}
