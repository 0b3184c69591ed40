//! Exact counts of how fresh a dataset's available partitions are, at any size.
//!
//! The log records `available`; whether such a partition is live, stale or missing (its data
//! gone) is derived, as `partitions --status` derives it (versions, taints, data present; the
//! re-check of a config job's live partitions against its config is `status`'s). Counting it means deriving it for every available
//! partition, so the pass goes one page of rows at a time, with a fresh memo of versions per
//! page: its memory is bounded by the page, never by the dataset, and its time is linear in it.

use databuild_core::{KnownState, Producer};
use databuild_log::{PartitionQuery, Status};

use crate::engine::{pattern_glob, Engine, Result};

/// How many rows one page of the pass reads and checks.
const PAGE: usize = 20_000;

/// A dataset's available partitions, split by what they are now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freshness {
    pub live: u64,
    pub stale: u64,
    /// Recorded live, but the data is gone from the data dir.
    pub missing: u64,
}

impl Engine {
    /// Every available partition of `producer`, checked for freshness.
    pub fn freshness(&self, producer: Producer) -> Result<Freshness> {
        let glob = pattern_glob(self.graph.pattern_of(producer));
        let mut counts = Freshness::default();
        let mut after = None;
        loop {
            let rows = self.store.partitions(&PartitionQuery {
                pattern: Some(glob.clone()),
                status: Some(Status::Available),
                limit: PAGE,
                after: after.take(),
            })?;
            // A fresh memo per page: what one page works out about shared inputs is worked
            // out again by the next, which keeps memory flat.
            let versions = self.versions();
            // A glob can match deeper refs of another producer: those are not this one's.
            let own: Vec<_> = rows
                .iter()
                .filter(|row| {
                    self.graph.producer_of(&row.partition_ref).map(|(p, _)| p) == Some(producer)
                })
                .cloned()
                .collect();
            for state in versions.states_of_rows(&own)? {
                match state {
                    KnownState::Live => counts.live += 1,
                    KnownState::Stale { .. } | KnownState::Kept { .. } => counts.stale += 1,
                    _ => counts.missing += 1,
                }
            }
            if rows.len() < PAGE {
                return Ok(counts);
            }
            after = rows.last().map(|r| r.partition_ref.clone());
        }
    }
}
