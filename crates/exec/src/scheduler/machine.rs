//! The scheduler's decisions, as a pure state machine: plain inputs in (a claim accepted or
//! refused, a run started or ended, a delegated partition resolved, a plan made, cancel), plain
//! effects out (claim these runs, stage this one, record that one's end, plan these refs, stop).
//!
//! No threads, clock, processes or log in here: [`super::driver`] carries inputs in and effects
//! out. Nothing rescans the plan: runs wait on counters, a finished run decrements its
//! dependents', and runs at zero enter the ready queue (a run planned only for being stale is
//! first derived again, and not run if its inputs came out unchanged: early cutoff). Nodes and waits are vectors indexed by
//! their number; refs are looked up in hash maps.

use std::cell::OnceCell;
use std::collections::VecDeque;
use std::ops::Range;

use std::hash::BuildHasher;

use databuild_core::{Plan, PlannedRun};
use databuild_log::{AfterFailure, RefusalKind};
use hashbrown::HashTable;
use rustc_hash::{FxBuildHasher, FxHashMap, FxHashSet};

use crate::run::outcome::Ended;
use crate::run::RunOutcome;

/// How many times a run may come back with `DATABUILD_MISSING_DEPS` before it fails.
pub(crate) const MAX_MISSING_DEP_ROUNDS: u32 = 3;
/// The most runs a build claims beyond its slots, for slots to start the moment they free.
/// Claimed runs hold their outputs in the log; a few of them cut the log writes per run by as much.
pub(crate) const MAX_CLAIM_AHEAD: usize = 16;
/// Runs claimed ahead per slot when the build's jobs are short (or have no history): a slot that
/// frees finds one waiting, and the log takes one write per several runs.
pub(crate) const CLAIM_AHEAD_PER_SLOT: usize = 8;
/// How many times one run's claim may be refused because its outputs changed since they were
/// read, before the build gives up (each refusal means another build moved them meanwhile).
pub(crate) const MAX_CLAIM_REFUSALS: u32 = 5;

/// What a build decides from: its slots, `--keep-going`, and each job's retries and
/// concurrency (by job index).
#[derive(Debug, Clone)]
pub(crate) struct Policy {
    pub slots: usize,
    /// Runs claimed ahead per slot (see [`Machine::fill`]), decided once at the build's start
    /// (`driver::claim_ahead::per_slot`).
    pub ahead_per_slot: usize,
    pub keep_going: bool,
    pub jobs: Vec<JobPolicy>,
}

#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct JobPolicy {
    pub retries: u32,
    pub concurrency: Option<u32>,
    /// Whether a stale run of the job may be cut off (see [`Machine::recheck_when_ready`]):
    /// whether the log alone says if it is still stale. Not for jobs whose config or table
    /// chooses their inputs, which only asking it again would tell.
    pub cutoff: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum State {
    Waiting,
    /// Its inputs are built: whether it is still stale is being read (early cutoff).
    Rechecking,
    Ready,
    /// Its claim is being written (or its outputs read first).
    Claiming,
    /// Its inputs' versions are being read elsewhere (an upstream service) before its claim.
    Resolving,
    /// Claimed in the log, waiting for a slot.
    Staged,
    Running,
    /// It reported missing inputs, which are being planned.
    Fetching,
    Done,
    Failed,
    Cancelled,
}

/// One run of the build (retries reuse the node; the driver gives each attempt a new run id).
#[derive(Debug)]
pub(crate) struct Node {
    pub run: PlannedRun,
    pub state: State,
    /// 1 for the first attempt.
    pub attempt: u32,
    missing_rounds: u32,
    claim_refusals: u32,
    /// Unfinished dependencies (runs and waits).
    waiting_on: usize,
    dependents: Vec<usize>,
    /// Planned only because it was stale, behind runs of this build: once they are done, it is
    /// derived again before it is claimed, and not run if their outputs came out unchanged.
    recheck: bool,
}

/// A partition another build is making, that runs of this build wait for.
#[derive(Debug)]
pub(crate) struct Wait {
    pub partition_ref: String,
    /// The build request it was delegated to.
    pub delegated_to: String,
    dependents: Vec<usize>,
    pub done: bool,
}

/// How a partition another build was making ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum WaitOutcome {
    Available,
    Failed(String),
    /// The process building it is gone.
    Abandoned,
}

#[derive(Debug)]
pub(crate) enum Input {
    /// The log took these runs' claims.
    Claimed(Vec<usize>),
    /// The log refused a batch of claims made against the holders the plan saw: another build
    /// changed one of the partitions since. Each run is then checked and claimed alone.
    BatchRefused(Vec<usize>),
    /// The log refused one run's claim.
    Refused {
        node: usize,
        refusal: RefusalKind,
    },
    /// Another build is building outputs of the run: each output's ref and that build's id
    /// (none left: whoever held them is done).
    Held {
        node: usize,
        holders: Vec<(String, String)>,
    },
    /// Another build made every output of the run since this build started.
    MadeElsewhere(usize),
    /// The run reads inputs whose versions only a blocking call can tell (an upstream service):
    /// they are read off the loop before it is claimed.
    ResolveFirst(usize),
    /// Its inputs' versions were read.
    Resolved(usize),
    /// A slot started a claimed run.
    Started(usize),
    Finished {
        node: usize,
        ended: Ended,
    },
    /// A claimed run taken back from the slots before one started it.
    Unstaged(usize),
    /// Runs re-derived once their inputs were built ([`Effect::Recheck`]): those `fresh` now
    /// (every output live, not stale) are not run; the others are.
    Rechecked {
        fresh: Vec<usize>,
        stale: Vec<usize>,
    },
    /// A partition another build was making is resolved.
    WaitEnded {
        wait: usize,
        outcome: WaitOutcome,
    },
    /// The plan of a run's missing inputs, or why there is none.
    InputsPlanned {
        node: usize,
        missing: Vec<String>,
        plan: Result<Plan, String>,
    },
    /// The plan that takes over a partition whose builder died.
    TakeOverPlanned {
        wait: usize,
        plan: Plan,
    },
    /// Stop: no run starts any more, running runs are told to stop.
    Cancel(String),
}

#[derive(Debug, PartialEq)]
pub(crate) enum Effect {
    /// Record these new runs as scheduled and these new waits as delegated, and follow the waits.
    Scheduled {
        nodes: Range<usize>,
        waits: Range<usize>,
    },
    /// Claim these runs in one write, against the holders the plan saw; a run whose holders it
    /// did not see is checked and claimed alone.
    Claim(Vec<usize>),
    /// Read the run's outputs, then claim them against what was read (compare-and-swap).
    Check(usize),
    /// Another build holds the run's outputs: find out which, for [`Input::Held`].
    FindHolders(usize),
    /// Read the versions of the run's inputs off the loop, for [`Input::Resolved`].
    Resolve(usize),
    /// The log refused the run's claim for good: the build cannot go on.
    ClaimFailed(usize),
    /// Hand a claimed run to the slots.
    Stage(usize),
    /// Take back the claimed runs no slot has started, for [`Input::Unstaged`].
    Unstage,
    /// Tell every running run to stop.
    StopRuns,
    /// The run gave up its claim to wait for another build; `waits` are new.
    WaitInstead {
        node: usize,
        waits: Range<usize>,
    },
    /// Another build made the run's outputs: record that this build relies on them.
    Adopt(usize),
    /// Derive these runs' outputs' states again, in one read, for [`Input::Rechecked`]: the
    /// runs they waited on are done.
    Recheck(Vec<usize>),
    /// Record these runs as not run: the runs they waited on wrote what they had read, so
    /// their outputs stand.
    Kept(Vec<usize>),
    /// Record a run's end; `then` is what follows a failure that does not end its outputs.
    Ended {
        node: usize,
        /// The attempt that ended (1 for the first).
        attempt: u32,
        ended: Ended,
        then: Option<AfterFailure>,
    },
    /// Record that a claimed run never started, releasing its claims.
    NotStarted {
        node: usize,
        reason: String,
    },
    /// A new attempt of the run, to record as scheduled under a new run id.
    Rescheduled(usize),
    /// Record these runs as not run and their outputs as not built.
    NotRun {
        nodes: Vec<usize>,
        reason: String,
    },
    /// A partition another build made is available to this one.
    WaitAvailable(usize),
    WaitFailed {
        wait: usize,
        message: String,
    },
    /// Plan the refs a run reported missing, off the loop, for [`Input::InputsPlanned`].
    PlanInputs {
        node: usize,
        missing: Vec<String>,
    },
    /// The builder of a waited-for partition died: plan it here, for [`Input::TakeOverPlanned`].
    TakeOver(usize),
    /// Runs were added while building (a retry, missing inputs, a takeover).
    Added,
}

/// Which node builds each output: a node's number and its output's, hashed by the output's
/// text. The text stays in the node: a backfill's millions of outputs are neither copied nor
/// allocated a second time (as keys of a map by text would be).
#[derive(Default)]
struct OutputIndex(HashTable<(u32, u32)>);

impl OutputIndex {
    fn hash(r: &str) -> u64 {
        FxBuildHasher.hash_one(r)
    }

    fn output(nodes: &[Node], (node, output): (u32, u32)) -> &str {
        nodes[node as usize].run.outputs[output as usize].as_str()
    }

    /// The index of every output of `nodes`, whose outputs are distinct.
    fn of(nodes: &[Node]) -> Self {
        let mut index = OutputIndex::default();
        let outputs = nodes.iter().map(|n| n.run.outputs.len()).sum();
        index
            .0
            .reserve(outputs, |&e| Self::hash(Self::output(nodes, e)));
        for (node, n) in nodes.iter().enumerate() {
            for output in 0..n.run.outputs.len() {
                index.insert_new(nodes, node, output);
            }
        }
        index
    }

    fn get(&self, nodes: &[Node], r: &str) -> Option<usize> {
        self.0
            .find(Self::hash(r), |&e| Self::output(nodes, e) == r)
            .map(|&(node, _)| node as usize)
    }

    /// Adds output `output` of node `node`, which no node of the index makes.
    fn insert_new(&mut self, nodes: &[Node], node: usize, output: usize) {
        let entry = (node as u32, output as u32);
        self.0
            .insert_unique(Self::hash(Self::output(nodes, entry)), entry, |&e| {
                Self::hash(Self::output(nodes, e))
            });
    }

    fn remove(&mut self, nodes: &[Node], r: &str) {
        if let Ok(entry) = self
            .0
            .find_entry(Self::hash(r), |&e| Self::output(nodes, e) == r)
        {
            entry.remove();
        }
    }
}

pub(crate) struct Machine {
    policy: Policy,
    nodes: Vec<Node>,
    /// Which node builds each output of this build: made the first time it is asked, which a
    /// build that goes as planned never does (a backfill's first plan then hashes none of its
    /// millions of outputs before its first job).
    by_output: OnceCell<OutputIndex>,
    waits: Vec<Wait>,
    waiting_for: FxHashMap<String, usize>,
    ready: VecDeque<usize>,
    /// Runs held back by their job's `concurrency`, by job index.
    held: FxHashMap<usize, VecDeque<usize>>,
    /// Runs claiming, claimed or running, by job index (what `concurrency` caps).
    per_job: FxHashMap<usize, u32>,
    claiming: usize,
    staged: usize,
    running: usize,
    /// Runs whose inputs' versions or missing inputs are being found off the loop, and waits
    /// being taken over: the build is not over while any is.
    elsewhere: usize,
    open_waits: usize,
    /// Runs whose inputs were just built, to be re-derived ([`Effect::Recheck`]) as one batch.
    to_recheck: Vec<usize>,
    /// Why no new run starts (a failure without `--keep-going`, or cancel).
    stopped: Option<String>,
    cancelled: bool,
}

impl Machine {
    pub fn new(policy: Policy) -> Self {
        Machine {
            policy,
            nodes: Vec::new(),
            by_output: OnceCell::new(),
            waits: Vec::new(),
            waiting_for: FxHashMap::default(),
            ready: VecDeque::new(),
            held: FxHashMap::default(),
            per_job: FxHashMap::default(),
            claiming: 0,
            staged: 0,
            running: 0,
            elsewhere: 0,
            open_waits: 0,
            to_recheck: Vec::new(),
            stopped: None,
            cancelled: false,
        }
    }

    pub fn node(&self, node: usize) -> &Node {
        &self.nodes[node]
    }

    #[cfg(test)]
    pub fn nodes(&self) -> &[Node] {
        &self.nodes
    }

    pub fn wait(&self, wait: usize) -> &Wait {
        &self.waits[wait]
    }

    pub fn waits(&self) -> &[Wait] {
        &self.waits
    }

    /// Whether a run of this build makes `r`, or it waits for another build to.
    #[cfg(test)]
    pub fn deals_with(&self, r: &str) -> bool {
        self.maker_of(r).is_some() || self.waits_for(r)
    }

    /// Whether this build waits for another build to make `r`.
    pub fn waits_for(&self, r: &str) -> bool {
        self.waiting_for.contains_key(r)
    }

    /// The state of the run that makes output `r` in this build, if one does (a run whose claim
    /// was lost to another build no longer does: the build waits for `r` instead).
    pub fn maker_state(&self, r: &str) -> Option<State> {
        self.maker_of(r).map(|node| self.nodes[node].state)
    }

    /// For each of `refs` a run of this build makes, that run's state (as [`Self::maker_state`]),
    /// and which of `refs` a failed or cancelled run had among its outputs (one whose claim was
    /// lost included). One pass over the nodes, which builds no index: only a lost claim makes
    /// one, and a build without one has distinct outputs, so the pass finds each maker.
    pub fn outcomes_of<'r>(
        &self,
        refs: &FxHashSet<&'r str>,
    ) -> (FxHashMap<&'r str, State>, FxHashSet<&'r str>) {
        let indexed = self.by_output.get().is_some();
        let mut makers = FxHashMap::default();
        let mut ended = FxHashSet::default();
        for n in &self.nodes {
            for &r in n.run.outputs.iter().filter_map(|o| refs.get(o.as_str())) {
                if matches!(n.state, State::Failed | State::Cancelled) {
                    ended.insert(r);
                }
                if !indexed {
                    makers.insert(r, n.state);
                }
            }
        }
        if indexed {
            makers = (refs.iter())
                .filter_map(|&r| Some((r, self.maker_state(r)?)))
                .collect();
        }
        (makers, ended)
    }

    /// The node that makes output `r` in this build.
    fn maker_of(&self, r: &str) -> Option<usize> {
        self.by_output
            .get_or_init(|| OutputIndex::of(&self.nodes))
            .get(&self.nodes, r)
    }

    pub fn running(&self) -> usize {
        self.running
    }

    /// Claimed runs no slot has reported started.
    pub fn staged(&self) -> usize {
        self.staged
    }

    /// How many runs the build claims ahead of its slots.
    fn ahead(&self) -> usize {
        (self.policy.ahead_per_slot * self.policy.slots.max(1)).min(MAX_CLAIM_AHEAD)
    }

    /// While at least this many claimed runs wait for a slot, the machine claims no more: a run
    /// that ends then, and built, need not be reported at once (see `Launches::ended`). At
    /// least one: a build that claims nothing ahead claims as its slots free.
    pub fn refill_below(&self) -> usize {
        (self.ahead() / 2).max(1)
    }

    pub fn stopped(&self) -> bool {
        self.stopped.is_some()
    }

    pub fn cancelled(&self) -> bool {
        self.cancelled
    }

    /// Nothing runs or will: every run and wait is over, or the build stopped and its running
    /// runs (and what is being found off the loop) are over.
    pub fn is_over(&self) -> bool {
        let busy = self.running + self.staged + self.claiming + self.elsewhere;
        let nothing_left = self.open_waits == 0 && self.ready.is_empty();
        busy == 0 && (nothing_left || self.stopped.is_some())
    }

    /// Adds a plan's runs and delegations, without claiming any yet ([`Machine::fill`] does).
    /// Runs whose outputs this build already makes are not added twice.
    pub fn add_plan(&mut self, plan: Plan, out: &mut VecDeque<Effect>) {
        let (first_node, first_wait) = (self.nodes.len(), self.waits.len());
        self.nodes.reserve(plan.runs.len());
        for d in &plan.delegated {
            self.wait_for(d.partition_ref.as_str(), &d.build_request_id);
        }
        let mut local: Vec<usize> = Vec::with_capacity(plan.runs.len());
        // A plan's runs have distinct outputs: only a later plan can repeat a node's.
        let first = first_node == 0;
        for run in plan.runs {
            let existing = match first {
                true => None,
                false => (run.outputs.iter()).find_map(|o| self.maker_of(o.as_str())),
            };
            if let Some(existing) = existing {
                local.push(existing);
                continue;
            }
            let index = self.nodes.len();
            local.push(index);
            self.add_node(index, run, &local);
        }
        out.push_back(Effect::Scheduled {
            nodes: first_node..self.nodes.len(),
            waits: first_wait..self.waits.len(),
        });
    }

    /// Adds one run, waiting on its unfinished dependencies (`local`: the plan's runs' nodes).
    fn add_node(&mut self, index: usize, run: PlannedRun, local: &[usize]) {
        let mut waiting_on = 0;
        for &dep in run.depends_on.iter().map(|&d| &local[d]) {
            if self.nodes[dep].state != State::Done {
                self.nodes[dep].dependents.push(index);
                waiting_on += 1;
            }
        }
        // (No lookups while the build waits on no other build: the common case, and a
        // backfill's millions of inputs.)
        for input in run.inputs.iter().filter(|_| !self.waiting_for.is_empty()) {
            if let Some(&w) = self.waiting_for.get(input.as_str()) {
                if !self.waits[w].done {
                    self.waits[w].dependents.push(index);
                    waiting_on += 1;
                }
            }
        }
        let outputs = run.outputs.len();
        let recheck = waiting_on > 0 && self.may_cut_off(&run);
        self.nodes.push(Node {
            run,
            state: State::Waiting,
            attempt: 1,
            missing_rounds: 0,
            claim_refusals: 0,
            waiting_on,
            dependents: Vec::new(),
            recheck,
        });
        // Once the index is made, it is kept up to date.
        if let Some(by_output) = self.by_output.get_mut() {
            for output in 0..outputs {
                by_output.insert_new(&self.nodes, index, output);
            }
        }
        if waiting_on == 0 {
            self.make_ready(index);
        }
    }

    /// Whether a run may be cut off once what it waits on is done: each of its outputs was
    /// planned only for being stale (not missing, failed, tainted or forced), and its job's
    /// staleness is the log's to say ([`JobPolicy::cutoff`]).
    fn may_cut_off(&self, run: &PlannedRun) -> bool {
        let cutoff = self
            .policy
            .jobs
            .get(run.job_index)
            .is_some_and(|j| j.cutoff);
        cutoff
            && !run.reasons.is_empty()
            && (run.reasons.iter()).all(|r| matches!(r, databuild_core::BuildReason::Stale(_)))
    }

    /// Starts waiting for a partition another build is making (once per ref).
    fn wait_for(&mut self, r: &str, other: &str) -> usize {
        if let Some(&w) = self.waiting_for.get(r) {
            return w;
        }
        let w = self.waits.len();
        self.waits.push(Wait {
            partition_ref: r.to_string(),
            delegated_to: other.to_string(),
            dependents: Vec::new(),
            done: false,
        });
        self.waiting_for.insert(r.to_string(), w);
        self.open_waits += 1;
        w
    }

    pub fn handle(&mut self, input: Input, out: &mut VecDeque<Effect>) {
        match input {
            Input::Claimed(nodes) => nodes.into_iter().for_each(|n| self.stage(n, out)),
            Input::BatchRefused(nodes) => out.extend(nodes.into_iter().map(Effect::Check)),
            Input::Refused { node, refusal } => self.refused(node, refusal, out),
            Input::Held { node, holders } => self.lost_claim(node, holders, out),
            Input::MadeElsewhere(node) => self.adopt(node, out),
            Input::ResolveFirst(node) => {
                self.unclaim(node, State::Resolving);
                self.elsewhere += 1;
                out.push_back(Effect::Resolve(node));
            }
            Input::Resolved(node) => {
                self.elsewhere -= 1;
                self.nodes[node].state = State::Ready;
                self.ready.push_front(node);
            }
            Input::Started(node) => {
                self.staged -= 1;
                self.running += 1;
                self.nodes[node].state = State::Running;
            }
            Input::Finished { node, ended } => self.finished(node, ended, out),
            Input::Unstaged(node) => self.unstaged(node, out),
            Input::WaitEnded { wait, outcome } => self.wait_ended(wait, outcome, out),
            Input::InputsPlanned {
                node,
                missing,
                plan,
            } => self.inputs_planned(node, &missing, plan, out),
            Input::TakeOverPlanned { wait, plan } => self.taken_over(wait, plan, out),
            Input::Rechecked { fresh, stale } => self.rechecked(fresh, stale, out),
            Input::Cancel(reason) => {
                if !self.cancelled {
                    self.cancelled = true;
                    self.stopped.get_or_insert(reason);
                    out.push_back(Effect::StopRuns);
                }
            }
        }
        self.fill(out);
    }

    /// Keeps the slots fed: it claims runs ahead of them, `ahead_per_slot` (eight for short jobs,
    /// none for long ones) times as many as there are slots (at most `MAX_CLAIM_AHEAD`), refilling in one log write once half are taken. A slot that
    /// frees finds a run waiting, and the log takes one write per several runs. Why so many: a
    /// write to a PostgreSQL log takes ~2 ms on a busy host, as long as a short job; with a
    /// quarter as many ahead, slots sat idle waiting for claims (0.45 s over a 2.7k-job build).
    /// And each write costs the scheduler's thread ~120 µs however few runs it claims (its commit,
    /// and the index pages it touches): at two slots, nine runs per write instead of five cut its
    /// CPU per run by 20 µs (14%). While more runs are staged than there are slots, a claim
    /// waits until a quarter of `ahead` is ready: where runs become ready one at a time (chains
    /// of jobs, each run unlocking the next), claiming each alone took one write per run.
    /// Once the build stopped, the claimed runs no slot took are taken back instead.
    pub fn fill(&mut self, out: &mut VecDeque<Effect>) {
        // Runs to re-derive go first, in one batch: one read of the log for all of them.
        if !self.to_recheck.is_empty() {
            let batch = std::mem::take(&mut self.to_recheck);
            self.elsewhere += batch.len();
            out.push_back(Effect::Recheck(batch));
        }
        if self.stopped.is_some() {
            if self.staged > 0 {
                out.push_back(Effect::Unstage);
            }
            return;
        }
        let slots = self.policy.slots.max(1);
        let ahead = self.ahead();
        let batch = (ahead / 4).max(1);
        while self.staged + self.claiming < self.refill_below() {
            if self.staged + self.claiming > slots && self.ready.len() < batch {
                break; // the slots are fed: let the ready runs gather into one write
            }
            let want = (slots + ahead).saturating_sub(self.running + self.staged + self.claiming);
            let mut batch = Vec::new();
            while batch.len() < want {
                let Some(node) = self.next_ready() else { break };
                self.nodes[node].state = State::Claiming;
                self.claiming += 1;
                *self
                    .per_job
                    .entry(self.nodes[node].run.job_index)
                    .or_default() += 1;
                batch.push(node);
            }
            if batch.is_empty() {
                break;
            }
            out.push_back(Effect::Claim(batch));
        }
    }

    /// The next ready run its job's `concurrency` lets start; others are held.
    fn next_ready(&mut self) -> Option<usize> {
        while let Some(node) = self.ready.pop_front() {
            let job = self.nodes[node].run.job_index;
            let cap = self.policy.jobs.get(job).and_then(|j| j.concurrency);
            let running = self.per_job.get(&job).copied().unwrap_or(0);
            if cap.is_some_and(|c| running >= c) {
                self.held.entry(job).or_default().push_back(node);
                continue;
            }
            return Some(node);
        }
        None
    }

    fn make_ready(&mut self, node: usize) {
        self.nodes[node].state = State::Ready;
        self.ready.push_back(node);
    }

    fn stage(&mut self, node: usize, out: &mut VecDeque<Effect>) {
        self.claiming -= 1;
        self.staged += 1;
        self.nodes[node].state = State::Staged;
        out.push_back(Effect::Stage(node));
    }

    /// A claiming run that will not be claimed now: its job may start another.
    fn unclaim(&mut self, node: usize, state: State) {
        self.claiming -= 1;
        self.nodes[node].state = state;
        self.free_job_slot(self.nodes[node].run.job_index);
    }

    /// A run of the job is over: one more may start, and the runs its `concurrency` held back
    /// go back to the front of the queue.
    fn free_job_slot(&mut self, job: usize) {
        if let Some(c) = self.per_job.get_mut(&job) {
            *c -= 1;
        }
        if let Some(mut held) = self.held.remove(&job) {
            while let Some(n) = held.pop_back() {
                self.ready.push_front(n);
            }
        }
    }

    /// Another build claimed an output first: wait for it. The outputs changed since they were
    /// read: read them again, a few times.
    fn refused(&mut self, node: usize, refusal: RefusalKind, out: &mut VecDeque<Effect>) {
        match refusal {
            RefusalKind::AlreadyBeingBuilt => out.push_back(Effect::FindHolders(node)),
            RefusalKind::ChangedSinceChecked => {
                let n = &mut self.nodes[node];
                n.claim_refusals += 1;
                if n.claim_refusals < MAX_CLAIM_REFUSALS {
                    out.push_back(Effect::Check(node));
                } else {
                    out.push_back(Effect::ClaimFailed(node));
                }
            }
            RefusalKind::Invalid => out.push_back(Effect::ClaimFailed(node)),
        }
    }

    /// Another build claimed outputs between planning and starting: wait for it instead.
    fn lost_claim(
        &mut self,
        node: usize,
        holders: Vec<(String, String)>,
        out: &mut VecDeque<Effect>,
    ) {
        self.unclaim(node, State::Cancelled);
        // Its outputs are no longer this build's to make: if their holder dies, the takeover
        // plans them again (a cancelled node left here would swallow that plan).
        self.by_output.get_or_init(|| OutputIndex::of(&self.nodes));
        let by_output = self.by_output.get_mut().expect("made just above");
        for o in &self.nodes[node].run.outputs {
            by_output.remove(&self.nodes, o.as_str());
        }
        let first_new = self.waits.len();
        let mut waits = Vec::with_capacity(holders.len());
        for (r, other) in &holders {
            let w = self.wait_for(r, other);
            // One that already ended has nothing left to wait for.
            if !self.waits[w].done {
                waits.push(w);
            }
        }
        out.push_back(Effect::WaitInstead {
            node,
            waits: first_new..self.waits.len(),
        });
        let dependents = std::mem::take(&mut self.nodes[node].dependents);
        if waits.is_empty() {
            // Nobody holds them any more: release the dependents as if built elsewhere.
            dependents.into_iter().for_each(|d| self.dependency_done(d));
            return;
        }
        for &d in &dependents {
            self.nodes[d].waiting_on += waits.len() - 1;
        }
        for &w in &waits {
            self.waits[w].dependents.extend(dependents.iter().copied());
        }
    }

    /// Another build made all of this run's outputs while it waited to start: rely on it.
    fn adopt(&mut self, node: usize, out: &mut VecDeque<Effect>) {
        self.unclaim(node, State::Done);
        out.push_back(Effect::Adopt(node));
        self.release_dependents(node);
    }

    fn release_dependents(&mut self, node: usize) {
        for i in 0..self.nodes[node].dependents.len() {
            let d = self.nodes[node].dependents[i];
            self.dependency_done(d);
        }
    }

    fn dependency_done(&mut self, node: usize) {
        let n = &mut self.nodes[node];
        n.waiting_on = n.waiting_on.saturating_sub(1);
        if n.waiting_on == 0 && n.state == State::Waiting {
            self.recheck_when_ready(node);
        }
    }

    /// Early cutoff: a run planned only for being stale, whose inputs this build has just built,
    /// is derived again before it is claimed (the rebuilt inputs may have come out with the very
    /// bytes it read); any other run is ready.
    fn recheck_when_ready(&mut self, node: usize) {
        if !self.nodes[node].recheck || self.stopped.is_some() {
            return self.make_ready(node);
        }
        self.nodes[node].state = State::Rechecking;
        self.to_recheck.push(node);
    }

    /// Runs fresh again are not run, and their dependents are re-derived in turn (the cascade
    /// stops where the bytes stop changing); stale ones are ready.
    fn rechecked(&mut self, fresh: Vec<usize>, stale: Vec<usize>, out: &mut VecDeque<Effect>) {
        self.elsewhere -= fresh.len() + stale.len();
        for node in stale {
            self.make_ready(node);
        }
        if fresh.is_empty() {
            return;
        }
        for &node in &fresh {
            self.nodes[node].state = State::Done;
        }
        out.push_back(Effect::Kept(fresh.clone()));
        for node in fresh {
            self.release_dependents(node);
        }
    }

    /// What follows a failure that does not end its outputs: fetching its missing inputs, or
    /// another attempt. Nothing follows once the build was cancelled.
    fn after_failure(&self, node: usize, outcome: &RunOutcome) -> Option<AfterFailure> {
        let RunOutcome::Failed { missing_deps, .. } = outcome else {
            return None;
        };
        let n = &self.nodes[node];
        let retries = self
            .policy
            .jobs
            .get(n.run.job_index)
            .map_or(0, |j| j.retries);
        if self.cancelled {
            None
        } else if !missing_deps.is_empty() && n.missing_rounds < MAX_MISSING_DEP_ROUNDS {
            Some(AfterFailure::FetchInputs)
        } else if n.attempt <= retries {
            Some(AfterFailure::Retry)
        } else {
            None
        }
    }

    fn finished(&mut self, node: usize, ended: Ended, out: &mut VecDeque<Effect>) {
        self.running -= 1;
        // It ran: another attempt runs whatever its inputs came out as.
        self.nodes[node].recheck = false;
        self.free_job_slot(self.nodes[node].run.job_index);
        let then = self.after_failure(node, &ended.outcome);
        let outcome = match (&ended.outcome, then) {
            (RunOutcome::Failed { missing_deps, .. }, Some(AfterFailure::FetchInputs)) => {
                Finish::Fetch(missing_deps.clone())
            }
            (RunOutcome::Failed { .. }, Some(AfterFailure::Retry)) => Finish::Retry,
            (RunOutcome::Failed { message, .. }, None) => Finish::Failed(message.clone()),
            // Built, but not live: what reads it cannot run, and a retry would make the same
            // data from the same inputs.
            (RunOutcome::Succeeded, _) => match ended.held_back() {
                Some(why) => Finish::HeldBack(why),
                None => Finish::Built,
            },
            (RunOutcome::Cancelled, _) => Finish::Cancelled,
        };
        let attempt = self.nodes[node].attempt;
        out.push_back(Effect::Ended {
            node,
            attempt,
            ended,
            then,
        });
        match outcome {
            Finish::Built => {
                self.nodes[node].state = State::Done;
                self.release_dependents(node);
            }
            Finish::Cancelled => {
                self.nodes[node].state = State::Cancelled;
                let first = self.first_output(node);
                self.cancel_dependents(node, format!("`{first}` was cancelled"), out);
            }
            Finish::Fetch(missing) => {
                let n = &mut self.nodes[node];
                n.missing_rounds += 1;
                n.state = State::Fetching;
                self.elsewhere += 1;
                out.push_back(Effect::PlanInputs { node, missing });
            }
            Finish::Retry => {
                out.push_back(Effect::Added);
                self.nodes[node].attempt += 1;
                self.reschedule(node, 0, out);
            }
            Finish::HeldBack(why) => {
                self.nodes[node].state = State::Failed;
                let reason = format!("`{}` {why}", self.first_output(node));
                self.cancel_dependents(node, reason.clone(), out);
                self.stop_unless_keep_going(&reason);
            }
            Finish::Failed(message) => {
                self.nodes[node].state = State::Failed;
                let reason = format!("`{}` failed", self.first_output(node));
                self.cancel_dependents(node, reason.clone(), out);
                self.stop_unless_keep_going(&format!("{reason}: {message}"));
            }
        }
    }

    fn first_output(&self, node: usize) -> String {
        self.nodes[node].run.outputs[0].to_string()
    }

    /// A new attempt, waiting on `waiting_on` dependencies.
    fn reschedule(&mut self, node: usize, waiting_on: usize, out: &mut VecDeque<Effect>) {
        out.push_back(Effect::Rescheduled(node));
        let n = &mut self.nodes[node];
        n.waiting_on = waiting_on;
        n.state = State::Waiting;
        if waiting_on == 0 {
            self.make_ready(node);
        }
    }

    /// A staged run the build will not start after all (it stopped): its claims are released.
    fn unstaged(&mut self, node: usize, out: &mut VecDeque<Effect>) {
        self.staged -= 1;
        self.free_job_slot(self.nodes[node].run.job_index);
        let reason = self.stopped.clone().unwrap_or_default();
        out.push_back(Effect::NotStarted {
            node,
            reason: format!("not started: {reason}"),
        });
        self.nodes[node].state = State::Cancelled;
        let first = self.first_output(node);
        self.cancel_dependents(node, format!("`{first}` was not started"), out);
    }

    fn wait_ended(&mut self, wait: usize, outcome: WaitOutcome, out: &mut VecDeque<Effect>) {
        if self.waits[wait].done {
            return;
        }
        self.waits[wait].done = true;
        self.open_waits -= 1;
        match outcome {
            WaitOutcome::Available => {
                out.push_back(Effect::WaitAvailable(wait));
                for d in std::mem::take(&mut self.waits[wait].dependents) {
                    self.dependency_done(d);
                }
            }
            WaitOutcome::Failed(message) => {
                out.push_back(Effect::WaitFailed { wait, message });
                let r = &self.waits[wait].partition_ref;
                let reason = format!("`{r}` failed in the build it was delegated to");
                let dependents = std::mem::take(&mut self.waits[wait].dependents);
                self.cancel_downstream(&dependents, reason.clone(), out);
                self.stop_unless_keep_going(&reason);
            }
            WaitOutcome::Abandoned => {
                // Built here instead; its dependents stay with the wait until that is planned.
                let r = self.waits[wait].partition_ref.clone();
                self.waiting_for.remove(&r);
                self.elsewhere += 1;
                out.push_back(Effect::TakeOver(wait));
            }
        }
    }

    fn taken_over(&mut self, wait: usize, plan: Plan, out: &mut VecDeque<Effect>) {
        self.elsewhere -= 1;
        self.add_plan(plan, out);
        out.push_back(Effect::Added);
        let dependents = std::mem::take(&mut self.waits[wait].dependents);
        match self.maker_of(&self.waits[wait].partition_ref) {
            Some(n) if self.nodes[n].state != State::Done => {
                self.nodes[n].dependents.extend(dependents)
            }
            _ => dependents.into_iter().for_each(|d| self.dependency_done(d)),
        }
    }

    /// The run's missing inputs are planned: they are built, then it runs again.
    fn inputs_planned(
        &mut self,
        node: usize,
        missing: &[String],
        plan: Result<Plan, String>,
        out: &mut VecDeque<Effect>,
    ) {
        self.elsewhere -= 1;
        let plan = match plan {
            Ok(plan) if plan.missing.is_empty() => plan,
            Ok(plan) => {
                let m = &plan.missing[0].partition_ref;
                let why = format!("its missing input needs external `{m}`, which is not available");
                return self.give_up(node, why, out);
            }
            Err(e) => {
                return self.give_up(
                    node,
                    format!("its missing inputs cannot be planned: {e}"),
                    out,
                )
            }
        };
        self.add_plan(plan, out);
        out.push_back(Effect::Added);
        // A missing ref built from the run's own outputs can never come first.
        for r in missing {
            let Some(cycle) = self
                .maker_of(r)
                .and_then(|n| self.path_of_dependents(node, n))
            else {
                continue;
            };
            let path: Vec<String> = cycle.iter().map(|&n| self.first_output(n)).collect();
            let why = format!(
                "it reported missing input `{r}`, which is built from `{own}` itself: a cycle \
                 ({} → {own}); the job must not ask for what is built from its own outputs",
                path.join(" → "),
                own = path[0],
            );
            return self.give_up(node, why, out);
        }
        // Wait on whatever of this build makes the missing refs and is not done.
        let mut waiting_on = 0;
        for r in missing {
            if let Some(n) = self.maker_of(r.as_str()) {
                if n != node && self.nodes[n].state != State::Done {
                    self.nodes[n].dependents.push(node);
                    waiting_on += 1;
                }
            } else if let Some(&w) = self.waiting_for.get(r.as_str()) {
                if !self.waits[w].done {
                    self.waits[w].dependents.push(node);
                    waiting_on += 1;
                }
            }
        }
        self.reschedule(node, waiting_on, out);
    }

    /// The nodes from `from` to `to` along `dependents` (what waits on what), both included, if
    /// `to` waits on `from` at all. Breadth-first: the shortest such path. Asked only when a run
    /// reports missing inputs, so its cost (up to every node) is paid rarely.
    fn path_of_dependents(&self, from: usize, to: usize) -> Option<Vec<usize>> {
        let mut came_from = FxHashMap::default();
        came_from.insert(from, from);
        let mut queue = VecDeque::from([from]);
        while let Some(at) = queue.pop_front() {
            if at == to {
                let mut path = vec![to];
                while *path.last()? != from {
                    path.push(came_from[path.last()?]);
                }
                path.reverse();
                return Some(path);
            }
            for &next in &self.nodes[at].dependents {
                if let std::collections::hash_map::Entry::Vacant(e) = came_from.entry(next) {
                    e.insert(at);
                    queue.push_back(next);
                }
            }
        }
        None
    }

    fn give_up(&mut self, node: usize, message: String, out: &mut VecDeque<Effect>) {
        self.nodes[node].state = State::Failed;
        let reason = format!("`{}` failed: {message}", self.first_output(node));
        self.cancel_dependents(node, reason.clone(), out);
        self.stop_unless_keep_going(&reason);
    }

    fn stop_unless_keep_going(&mut self, reason: &str) {
        if !self.policy.keep_going {
            self.stopped.get_or_insert_with(|| reason.to_string());
        }
    }

    fn cancel_dependents(&mut self, node: usize, reason: String, out: &mut VecDeque<Effect>) {
        let dependents = std::mem::take(&mut self.nodes[node].dependents);
        self.cancel_downstream(&dependents, reason, out);
        self.nodes[node].dependents = dependents;
    }

    /// Marks runs, and everything waiting on them, as not run because of `reason`.
    fn cancel_downstream(&mut self, starts: &[usize], reason: String, out: &mut VecDeque<Effect>) {
        let mut cancelled = Vec::new();
        for &start in starts {
            let mut stack = vec![start];
            while let Some(i) = stack.pop() {
                if !matches!(self.nodes[i].state, State::Waiting | State::Ready) {
                    continue;
                }
                self.nodes[i].state = State::Cancelled;
                cancelled.push(i);
                stack.extend(self.nodes[i].dependents.iter().copied());
            }
        }
        if !cancelled.is_empty() {
            out.push_back(Effect::NotRun {
                nodes: cancelled,
                reason,
            });
        }
    }

    /// Why the build ends short: why it stopped, or (`--keep-going`) the runs that failed.
    pub fn stop_reason(&self) -> String {
        if let Some(reason) = &self.stopped {
            return reason.clone();
        }
        let failed: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.state == State::Failed)
            .map(|n| n.run.outputs[0].as_str())
            .collect();
        match failed.len() {
            0 => "the build stopped".to_string(),
            1 => format!("`{}` failed", failed[0]),
            n => {
                let shown: Vec<String> = failed.iter().take(5).map(|r| format!("`{r}`")).collect();
                let more = if n > 5 {
                    format!(" and {} more", n - 5)
                } else {
                    String::new()
                };
                format!("{n} job runs failed: {}{more}", shown.join(", "))
            }
        }
    }

    /// Ends what never started, once the build is over: [`Effect::NotRun`].
    pub fn finish(&mut self, out: &mut VecDeque<Effect>) {
        let reason = self.stop_reason();
        let unstarted: Vec<usize> = (0..self.nodes.len())
            .filter(|&i| matches!(self.nodes[i].state, State::Waiting | State::Ready))
            .collect();
        self.cancel_downstream(&unstarted, reason, out);
    }
}

/// What a run's end means for its node.
enum Finish {
    Built,
    Cancelled,
    Fetch(Vec<String>),
    Retry,
    Failed(String),
    /// Built, but a blocking check failed (why).
    HeldBack(String),
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
