//! What a log writer remembers of entity states between appends, shared by every backend.
//!
//! Validating an event needs the current state of what it touches; reading it back from the
//! projections costs a lookup per event. The cache answers instead. Each backend trusts it only
//! while no other process has written since its last append, and drops it when a batch fails.

use rustc_hash::FxHashMap;

use crate::event::{Event, Kind, Status};
use crate::replay::global_effect;
use crate::state::Current;

#[derive(Default)]
pub(crate) struct StateCache {
    pub build_requests: FxHashMap<String, Option<Status>>,
    pub job_runs: FxHashMap<String, Option<Status>>,
    pub request_partitions: FxHashMap<(String, String), Option<Status>>,
    pub partitions: FxHashMap<String, Option<(Status, Option<String>)>>,
    pub wants: FxHashMap<String, Option<Status>>,
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

    /// Records the states after a (valid) event.
    pub fn remember(&mut self, e: &Event, before: &Current) {
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
                if let Some(global) = global_effect(e, before.partition.as_ref()) {
                    self.partitions.insert(r, Some(global));
                }
            }
            Kind::Want if e.status == Status::SlaMissed => {}
            Kind::Want => {
                if let Some(id) = &e.data.want_id {
                    self.wants.insert(id.clone(), Some(e.status));
                }
            }
            Kind::Delegation | Kind::Alias => {}
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
