//! What a log writer remembers of entity states between appends, shared by every backend.
//!
//! Validating an event needs the current state of what it touches; reading it back from the
//! projections costs a lookup per event. The cache answers instead. Each backend trusts it only
//! while no other process has written since its last append, and drops it when a batch fails.

use rustc_hash::FxHashMap;

use crate::event::{Event, Kind, Status};
use crate::replay::{global_effect, is_release};
use crate::state::Current;

#[derive(Default)]
pub(crate) struct StateCache {
    pub build_requests: FxHashMap<String, Option<Status>>,
    pub job_runs: FxHashMap<String, Option<Status>>,
    pub request_partitions: FxHashMap<(String, String), Option<Status>>,
    pub partitions: FxHashMap<String, Option<PartitionState>>,
    pub wants: FxHashMap<String, Option<Status>>,
}

/// A partition's row as the writer needs it: its global state, and the job it holds (`''` for
/// none), which the count projection counts it under.
#[derive(Debug, Clone)]
pub(crate) struct PartitionState {
    pub status: Status,
    pub run: Option<String>,
    pub job: String,
}

impl StateCache {
    /// Bound on remembered entities; past it the cache starts over.
    pub const MAX_ENTRIES: usize = 500_000;

    pub fn len(&self) -> usize {
        self.build_requests.len()
            + self.job_runs.len()
            + self.request_partitions.len()
            + self.partitions.len()
            + self.wants.len()
    }

    /// Records the states after a (valid) event; `partition_job` is the job its partition's row
    /// held before it.
    pub fn remember(&mut self, e: &Event, before: &Current, partition_job: &str) {
        match e.kind {
            Kind::BuildRequest => {
                if let Some(br) = &e.build_request_id {
                    self.build_requests.insert(br.clone(), Some(e.status));
                }
            }
            Kind::JobRun => {
                if let Some(run) = &e.job_run_id {
                    self.job_runs.insert(run.clone(), Some(e.status));
                }
            }
            Kind::Partition => {
                let r = e.partition_ref.clone().expect("validated");
                if let Some(br) = &e.build_request_id {
                    self.request_partitions
                        .insert((br.clone(), r.clone()), Some(e.status));
                }
                if is_release(e) {
                    // The row went back to what the claim replaced, which only the row knows
                    // (`prev_*`): the next event on it reads it again. Keeping the claim here
                    // would refuse the next claim as one on a partition still being built.
                    self.partitions.remove(&r);
                } else if let Some((status, run)) = global_effect(e, before.partition.as_ref()) {
                    // The upsert keeps the row's job unless the event names one.
                    let job = e.job.as_deref().unwrap_or(partition_job).to_string();
                    self.partitions
                        .insert(r, Some(PartitionState { status, run, job }));
                }
            }
            Kind::Want if matches!(e.status, Status::SlaMissed | Status::SlaAtRisk) => {}
            Kind::Want => {
                if let Some(id) = &e.data.want_id {
                    self.wants.insert(id.clone(), Some(e.status));
                }
            }
            Kind::Delegation
            | Kind::Alias
            | Kind::Gc
            | Kind::Check
            | Kind::Environment
            | Kind::Arrival
            | Kind::Alert => {}
        }
    }
}

/// Looks `key` up in `cache`, or else with `query` (and remembers the answer).
pub(crate) fn cached<K, V, E>(
    cache: &mut FxHashMap<K, Option<V>>,
    key: K,
    query: impl FnOnce() -> Result<Option<V>, E>,
) -> Result<Option<V>, E>
where
    K: std::hash::Hash + Eq,
    V: Clone,
{
    if let Some(v) = cache.get(&key) {
        return Ok(v.clone());
    }
    let v = query()?;
    cache.insert(key, v.clone());
    Ok(v)
}
