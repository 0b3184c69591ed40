//! Arrivals: external partitions found available, noted as the resolver finds them
//! ([`Sightings`]) and recorded once each as an `arrival` event ([`record`]): one read of which
//! already have one, one append of the others. Planning, `status` and the service's watcher
//! record them so; forecasts learn each dataset's cadence from them.

use std::cell::RefCell;
use std::path::Path;

use databuild_core::Graph;
use databuild_log::{Event, EventStore};
use rustc_hash::FxHashSet;

/// The external partitions found available while answering one call: (dataset, ref).
#[derive(Debug, Default)]
pub(crate) struct Sightings {
    seen: RefCell<Vec<(String, String)>>,
}

impl Sightings {
    /// `r` of `dataset` is there. A dataset another service builds is not noted: its arrival
    /// is that service's to record.
    pub(crate) fn note(&self, dataset: &databuild_core::Dataset, r: &str) {
        if dataset.upstream.is_none() {
            self.seen
                .borrow_mut()
                .push((dataset.name.clone(), r.to_string()));
        }
    }

    /// What was noted so far; noted again from none.
    pub(crate) fn take(&self) -> Vec<(String, String)> {
        std::mem::take(&mut *self.seen.borrow_mut())
    }
}

/// Records an arrival, seen at `now_ns`, for each of `seen` (dataset, ref) the log has none of:
/// one read, one append. Returns the events appended.
pub(crate) fn record(
    graph: &Graph,
    store: &dyn EventStore,
    data_dir: &Path,
    seen: Vec<(String, String)>,
    now_ns: i64,
) -> databuild_log::Result<Vec<Event>> {
    let mut unique = FxHashSet::default();
    let seen: Vec<(String, String)> = seen
        .into_iter()
        .filter(|(_, r)| unique.insert(r.clone()))
        .collect();
    if seen.is_empty() {
        return Ok(Vec::new());
    }
    let refs: Vec<&str> = seen.iter().map(|(_, r)| r.as_str()).collect();
    let known: FxHashSet<String> = store
        .arrivals_of(&refs)?
        .into_iter()
        .map(|a| a.partition_ref)
        .collect();
    let events: Vec<Event> = seen
        .iter()
        .filter(|(_, r)| !known.contains(r))
        .map(|(dataset, r)| {
            let version = graph
                .datasets
                .iter()
                .find(|d| d.name == *dataset)
                .and_then(|d| crate::data::versions::raw_external_version(d, data_dir, r));
            let mut e = Event::arrival(dataset, r, version);
            e.timestamp = now_ns;
            e
        })
        .collect();
    if events.is_empty() {
        return Ok(events);
    }
    store.append(events)
}
