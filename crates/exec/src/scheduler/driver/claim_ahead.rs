//! Claim-ahead: what a run's first claim is made against, read before the claim so that the
//! claim itself costs no read. Who holds each output as the plan saw it is read a window of
//! nodes at a time; the versions of inputs and query inputs from upstream services (a network
//! call each) are read off the loop before the claim; query inputs that are jobs' outputs are
//! read a claim batch at a time ([`read_query_inputs`]). And how many runs a build claims ahead
//! of its slots, decided once at its start ([`per_slot`]).

use std::collections::BTreeMap;

use databuild_core::{Graph, PartitionRef, PlannedRun, Producer};
use databuild_log::{EventStore, Status};
use rustc_hash::FxHashMap;

use super::super::machine::{Machine, CLAIM_AHEAD_PER_SLOT};
use crate::error::Result;

/// How many nodes past a first claim have their outputs' holders read with it.
const HOLDERS_AHEAD: usize = 4096;

/// Jobs this long (their median recorded duration) are long: a run claimed ahead of them would
/// wait a job's length or more, holding its outputs, before a slot started it.
const LONG_JOB_MS: f64 = 1000.0;

/// How many runs per slot the build claims ahead of its slots: [`CLAIM_AHEAD_PER_SLOT`] unless
/// most of the plan's runs are of long jobs (the median, over the plan's runs, of their job's
/// recorded median duration is [`LONG_JOB_MS`] or more), then none: each is claimed as a slot
/// frees for it, and a claimed run starts at once. A job with no recorded duration counts as
/// short. Decided once, from the log, before the first claim: the same for every executor on
/// the same log (a fresh log has no history: every build there claims as many ahead).
pub(super) fn per_slot(
    store: &dyn EventStore,
    graph: &Graph,
    plan: &databuild_core::Plan,
) -> Result<usize> {
    let mut runs_by_job = vec![0usize; graph.jobs.len()];
    for run in &plan.runs {
        runs_by_job[run.job_index] += 1;
    }
    if plan.runs.is_empty() {
        return Ok(CLAIM_AHEAD_PER_SLOT);
    }
    // Only the planned jobs' stats: the log's other jobs would each cost a read of durations.
    let jobs = graph.jobs.iter().zip(runs_by_job).filter(|(_, n)| *n > 0);
    let by_job = jobs.map(|(job, n)| {
        let stats = store.job_stats(Some(&job.name))?;
        let p50 = stats
            .iter()
            .find(|s| s.job == job.name)
            .and_then(|s| s.p50_ms);
        Ok((p50, n))
    });
    Ok(per_slot_of(by_job.collect::<Result<_>>()?))
}

/// [`per_slot`] from each planned job's median duration (if recorded) and its number of runs.
fn per_slot_of(mut by_job: Vec<(Option<f64>, usize)>) -> usize {
    // Unknown first: a job with no history counts as short.
    by_job.sort_by(|a, b| a.0.unwrap_or(0.0).total_cmp(&b.0.unwrap_or(0.0)));
    let half = by_job.iter().map(|(_, n)| n).sum::<usize>().div_ceil(2);
    let mut seen = 0;
    for (p50, n) in by_job {
        seen += n;
        if seen >= half {
            return match p50 {
                Some(ms) if ms >= LONG_JOB_MS => 0,
                _ => CLAIM_AHEAD_PER_SLOT,
            };
        }
    }
    CLAIM_AHEAD_PER_SLOT
}

/// What the driver read ahead of its claims.
pub(super) struct ClaimAhead {
    /// The run holding each output as the plan saw it (read ahead of first claims, a window of
    /// nodes per query): a first claim compares against it instead of reading the partition.
    holders: FxHashMap<String, Seen>,
    /// By node: its outputs' holders have been read into `holders`.
    holders_read: Vec<bool>,
    /// Whether any dataset comes from an upstream service (whose versions take a network call).
    has_upstream: bool,
    /// Versions of upstream inputs read off the loop, by node, for its next claim.
    read_versions: FxHashMap<usize, BTreeMap<String, Option<String>>>,
}

impl ClaimAhead {
    pub(super) fn new(graph: &Graph) -> Self {
        ClaimAhead {
            holders: FxHashMap::default(),
            holders_read: Vec::new(),
            has_upstream: graph.datasets.iter().any(|d| d.upstream.is_some()),
            read_versions: FxHashMap::default(),
        }
    }

    /// Makes room for the nodes the machine numbers up to `nodes` (new runs were scheduled).
    pub(super) fn grow(&mut self, nodes: usize) {
        self.holders_read.resize(nodes, false);
    }

    /// Reads who holds the outputs of runs about to be claimed for the first time, and of the
    /// [`HOLDERS_AHEAD`] nodes after each (runs are claimed roughly in plan order): one query per
    /// window, not one per claim. Nodes already `recorded` (claimed once) are left out; only
    /// rows the plan saw (updated before `started_ns`, not `building`) are kept.
    pub(super) fn read_holders(
        &mut self,
        store: &dyn EventStore,
        machine: &Machine,
        recorded: impl Fn(usize) -> bool,
        started_ns: i64,
        nodes: &[usize],
    ) -> Result<()> {
        let mut window = Vec::new();
        for &n in nodes {
            if self.holders_read[n] {
                continue;
            }
            let end = (n + HOLDERS_AHEAD).min(self.holders_read.len());
            for m in n..end {
                if !self.holders_read[m] && !recorded(m) {
                    self.holders_read[m] = true;
                    window.push(m);
                }
            }
        }
        if window.is_empty() {
            return Ok(());
        }
        let outputs: Vec<&str> = window
            .iter()
            .flat_map(|&n| machine.node(n).run.outputs.iter().map(|o| o.as_str()))
            .collect();
        for keys in outputs.chunks(10_000) {
            // Absent from the log: nobody holds it.
            self.holders
                .extend(keys.iter().map(|r| (r.to_string(), Seen::default())));
            for p in store.partitions_by_ref(keys)? {
                // Only what the plan saw: a partition changed since the build started (another
                // build made or is making it) goes through the full check at claim time.
                if p.updated_at < started_ns && p.status != Status::Building {
                    let seen = Seen {
                        run: p.job_run_id.unwrap_or_default(),
                        version: p.data_version,
                    };
                    self.holders.insert(p.partition_ref, seen);
                } else {
                    self.holders.remove(&p.partition_ref);
                }
            }
        }
        Ok(())
    }

    /// The holders the plan saw of every one of `outputs`, taken (a claim uses them once); `None`
    /// if any was not seen, and the run is then checked and claimed alone.
    pub(super) fn take_holders(&mut self, outputs: &[PartitionRef]) -> Option<Vec<Seen>> {
        outputs
            .iter()
            .map(|o| self.holders.remove(o.as_str()))
            .collect()
    }

    /// A run reading upstream partitions (as inputs or query inputs) has their versions read
    /// off the loop before its claim (each is a call to the upstream service).
    pub(super) fn must_read_versions_first(
        &self,
        graph: &Graph,
        node: usize,
        run: &PlannedRun,
    ) -> bool {
        self.has_upstream
            && !self.read_versions.contains_key(&node)
            && upstream_reads(graph, run).next().is_some()
    }

    /// Keeps the versions read off the loop for the node's claim.
    pub(super) fn versions_read(
        &mut self,
        node: usize,
        versions: BTreeMap<String, Option<String>>,
    ) {
        self.read_versions.insert(node, versions);
    }

    /// The versions read off the loop for the node's claim (none if none were read), taken.
    pub(super) fn take_versions(&mut self, node: usize) -> BTreeMap<String, Option<String>> {
        self.read_versions.remove(&node).unwrap_or_default()
    }
}

/// An output as a claim finds it: the run holding it (empty if none) and its data version then,
/// which a rebuild compares its own against ("rebuilt, unchanged").
#[derive(Debug, Clone, Default)]
pub(super) struct Seen {
    pub run: String,
    pub version: Option<String>,
}

/// Whether `r` is a partition of a dataset an upstream service makes.
fn is_upstream(graph: &Graph, r: &str) -> bool {
    matches!(graph.producer_of(r), Some((Producer::Dataset(d), _)) if graph.datasets[d].upstream.is_some())
}

/// The run's inputs and query inputs an upstream service makes: their versions are read off
/// the loop.
pub(super) fn upstream_reads<'a>(
    graph: &'a Graph,
    run: &'a PlannedRun,
) -> impl Iterator<Item = &'a PartitionRef> + 'a {
    (run.inputs.iter())
        .chain(run.query_inputs())
        .filter(move |i| is_upstream(graph, i.as_str()))
}

/// The query inputs of `runs` that are jobs' outputs, as a run starting now reads them (as
/// [`crate::Engine::query_instance`] does, read at once): its version and the run that built
/// it while the log says it is available, `None` otherwise. Refs `skip` says are known are
/// left out, and so are query inputs that are no job's outputs.
pub(super) fn read_query_inputs<'a>(
    store: &dyn EventStore,
    graph: &Graph,
    runs: impl Iterator<Item = &'a PlannedRun>,
    skip: impl Fn(&str) -> bool,
) -> Result<QueryReads> {
    let mut read = QueryReads::default();
    let mut refs = Vec::new();
    for q in runs.flat_map(|r| r.query_inputs()) {
        let q = q.as_str();
        if skip(q) || read.contains_key(q) {
            continue;
        }
        if let Some((Producer::Job { .. }, _)) = graph.producer_of(q) {
            // Absent from the log: not read.
            read.insert(q.to_string(), None);
            refs.push(q);
        }
    }
    for keys in refs.chunks(10_000) {
        for p in store.partitions_by_ref(keys)? {
            let present = match p.status {
                Status::Available => p.data_version.map(|v| (v, p.job_run_id)),
                _ => None,
            };
            read.insert(p.partition_ref, present);
        }
    }
    Ok(read)
}

/// Query inputs that are jobs' outputs, read from the log: their version and the run that built
/// them when present (see [`read_query_inputs`]).
pub(super) type QueryReads = FxHashMap<String, Option<(String, Option<String>)>>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_or_unknown_jobs_are_claimed_ahead_long_ones_not() {
        assert_eq!(per_slot_of(vec![]), CLAIM_AHEAD_PER_SLOT);
        assert_eq!(per_slot_of(vec![(None, 10)]), CLAIM_AHEAD_PER_SLOT);
        assert_eq!(per_slot_of(vec![(Some(5.0), 10)]), CLAIM_AHEAD_PER_SLOT);
        assert_eq!(per_slot_of(vec![(Some(2000.0), 10)]), 0);
        // Most runs decide: many short runs and a few long ones are claimed ahead...
        let mixed = vec![(Some(2000.0), 3), (Some(5.0), 10)];
        assert_eq!(per_slot_of(mixed), CLAIM_AHEAD_PER_SLOT);
        // ...and the other way round not; a job without history counts as short.
        assert_eq!(per_slot_of(vec![(Some(2000.0), 10), (None, 3)]), 0);
        assert_eq!(per_slot_of(vec![(Some(2000.0), 3), (None, 10)]), 8);
    }
}
