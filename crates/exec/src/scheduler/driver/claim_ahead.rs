//! Claim-ahead: what a run's first claim is made against, read before the claim so that the
//! claim itself costs no read. Who holds each output as the plan saw it is read a window of
//! nodes at a time; the versions of inputs from upstream services (a network call each) are
//! read off the loop before the claim.

use std::collections::BTreeMap;

use databuild_core::{Graph, PartitionRef, PlannedRun, Producer};
use databuild_log::{EventStore, Status};
use rustc_hash::FxHashMap;

use super::super::machine::Machine;
use crate::error::Result;

/// How many nodes past a first claim have their outputs' holders read with it.
const HOLDERS_AHEAD: usize = 4096;

/// What the driver read ahead of its claims.
pub(super) struct ClaimAhead {
    /// The run holding each output as the plan saw it (read ahead of first claims, a window of
    /// nodes per query): a first claim compares against it instead of reading the partition.
    holders: FxHashMap<String, String>,
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
                .extend(keys.iter().map(|r| (r.to_string(), String::new())));
            for p in store.partitions_by_ref(keys)? {
                // Only what the plan saw: a partition changed since the build started (another
                // build made or is making it) goes through the full check at claim time.
                if p.updated_at < started_ns && p.status != Status::Building {
                    let holder = p.job_run_id.unwrap_or_default();
                    self.holders.insert(p.partition_ref, holder);
                } else {
                    self.holders.remove(&p.partition_ref);
                }
            }
        }
        Ok(())
    }

    /// The holders the plan saw of every one of `outputs`, taken (a claim uses them once); `None`
    /// if any was not seen, and the run is then checked and claimed alone.
    pub(super) fn take_holders(&mut self, outputs: &[PartitionRef]) -> Option<Vec<String>> {
        outputs
            .iter()
            .map(|o| self.holders.remove(o.as_str()))
            .collect()
    }

    /// A run reading upstream partitions has their versions read off the loop before its claim
    /// (each is a call to the upstream service).
    pub(super) fn must_read_versions_first(
        &self,
        graph: &Graph,
        node: usize,
        run: &PlannedRun,
    ) -> bool {
        self.has_upstream
            && !self.read_versions.contains_key(&node)
            && run.inputs.iter().any(|i| is_upstream(graph, i.as_str()))
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

/// Whether `r` is a partition of a dataset an upstream service makes.
pub(super) fn is_upstream(graph: &Graph, r: &str) -> bool {
    matches!(graph.producer_of(r), Some((Producer::Dataset(d), _)) if graph.datasets[d].upstream.is_some())
}
