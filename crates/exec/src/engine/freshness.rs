//! `datasets`: every dataset and job output with its partitions counted by status, and the exact
//! split of a job output's available partitions into live, stale and missing.
//!
//! The log records `available`; whether such a partition is live, stale or missing (its data
//! gone) is derived, as `status` and `partitions --status` derive it (`Engine::derive_rows`:
//! versions, taints, data present, a config job's live partitions against its config). Counting it
//! means deriving it for every available partition, so the pass goes one page of rows at a time,
//! with a fresh memo of versions per page: its memory is bounded by the page, never by the
//! dataset, and its time is linear in it.

use databuild_core::Producer;
use databuild_log::{PartitionQuery, PartitionRow, Status};

use super::status::producer_kind;
use crate::answers::{DatasetView, DerivedStatus};
use crate::engine::listing::FRESHNESS_SCAN;
use crate::engine::{Engine, Result};

/// How many rows one page of the pass reads and checks: as many as one page of a listing.
const PAGE: usize = FRESHNESS_SCAN;

/// A dataset's available partitions, split by what they are now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Freshness {
    pub live: u64,
    pub stale: u64,
    /// Recorded live, but the data is gone from the data dir.
    pub missing: u64,
    /// Held back by a failed blocking check (`check_failed`).
    pub check_failed: u64,
}

impl Engine {
    /// How the tainted partitions an external dataset records show now (as `status` says): still
    /// `tainted`, `live` again (its data changed since the taint) or `missing`. `None` past
    /// [`FRESHNESS_SCAN`] of them, unless `exact`: then what the log records stands.
    fn external_taints(
        &self,
        producer: Producer,
        exact: bool,
    ) -> Result<Option<std::collections::BTreeMap<DerivedStatus, u64>>> {
        let mut shown = std::collections::BTreeMap::new();
        let mut seen = 0;
        let whole = self.each_page(producer, Status::Tainted, |versions, own| {
            seen += own.len();
            for row in &own {
                *shown.entry(self.shown_status(versions, row)).or_default() += 1;
            }
            Ok(exact || seen <= FRESHNESS_SCAN)
        })?;
        Ok(whole.then_some(shown))
    }

    /// Hands `each` the rows of `producer` the log records with `status`, a page at a time, with
    /// a fresh memo of versions per page: what one page works out about shared inputs is worked
    /// out again by the next, which keeps memory flat. `each` answers whether to go on; the
    /// answer is whether every page was handed over.
    fn each_page(
        &self,
        producer: Producer,
        status: Status,
        mut each: impl FnMut(
            &crate::data::versions::VersionedStates<'_>,
            Vec<PartitionRow>,
        ) -> Result<bool>,
    ) -> Result<bool> {
        let glob = self.graph.pattern_of(producer).glob();
        let mut after = None;
        loop {
            let rows = self.store.partitions(&PartitionQuery {
                pattern: Some(glob.clone()),
                status: Some(status),
                limit: PAGE,
                after: after.take(),
            })?;
            let full = rows.len() == PAGE;
            after = rows.last().map(|r| r.partition_ref.clone());
            // A glob can match deeper refs of another producer: those are not this one's.
            let own: Vec<_> = rows
                .into_iter()
                .filter(|row| {
                    self.graph.producer_of(&row.partition_ref).map(|(p, _)| p) == Some(producer)
                })
                .collect();
            if !each(&self.versions(), own)? {
                return Ok(false);
            }
            if !full {
                return Ok(true);
            }
        }
    }
}

pub(crate) fn freshness(engine: &Engine, producer: Producer) -> Result<Freshness> {
    let mut counts = Freshness::default();
    let mut resolver = engine.resolver();
    engine.each_page(producer, Status::Available, |versions, own| {
        for (status, _) in engine.derive_rows(own, versions, &mut resolver)? {
            match status {
                DerivedStatus::Live => counts.live += 1,
                DerivedStatus::Stale => counts.stale += 1,
                DerivedStatus::CheckFailed => counts.check_failed += 1,
                _ => counts.missing += 1,
            }
        }
        Ok(true)
    })?;
    Ok(counts)
}

pub(crate) fn datasets(engine: &Engine, exact: bool) -> Result<Vec<DatasetView>> {
    engine
        .graph
        .producers()
        .map(|p| {
            let pattern = engine.graph.pattern_of(p);
            // A single-output job's partitions are counted by a projection; other patterns
            // by a glob over the partitions.
            let counts = match p {
                Producer::Job { job, .. } if engine.graph.jobs[job].outputs.len() == 1 => engine
                    .store
                    .job_partition_counts(&engine.graph.jobs[job].name)?,
                _ => engine.store.partition_counts(Some(&pattern.glob()))?,
            };
            let mut partitions = std::collections::BTreeMap::<String, u64>::new();
            for (s, n) in counts {
                *partitions
                    .entry(DerivedStatus::recorded(s).to_string())
                    .or_default() += n;
            }
            let live = DerivedStatus::Live.as_str();
            let available = partitions.get(live).copied().unwrap_or(0);
            let freshness_checked = exact || available as usize <= FRESHNESS_SCAN;
            if available > 0 && matches!(p, Producer::Job { .. }) {
                if freshness_checked {
                    let counts = engine.freshness(p)?;
                    partitions.insert(live.into(), counts.live);
                    for (status, n) in [
                        (DerivedStatus::Stale, counts.stale),
                        (DerivedStatus::Missing, counts.missing),
                        (DerivedStatus::CheckFailed, counts.check_failed),
                    ] {
                        if n > 0 {
                            *partitions.entry(status.to_string()).or_default() += n;
                        }
                    }
                } else {
                    // Recorded live, not checked: say only what the log says.
                    partitions.remove(live);
                    partitions.insert("available".into(), available);
                }
            }
            // A tainted external is live again once its data changed.
            let external =
                matches!(p, Producer::Dataset(d) if engine.graph.datasets[d].source.is_none());
            let tainted = DerivedStatus::Tainted.as_str();
            if external && partitions.contains_key(tainted) {
                if let Some(shown) = engine.external_taints(p, exact)? {
                    partitions.remove(tainted);
                    for (status, n) in shown {
                        *partitions.entry(status.to_string()).or_default() += n;
                    }
                }
            }
            Ok(DatasetView {
                name: engine.graph.producer_name(p).to_string(),
                kind: producer_kind(&engine.graph, p).to_string(),
                pattern: pattern.to_string(),
                partitions,
                freshness_checked,
            })
        })
        .collect()
}

pub(crate) fn shown_states(
    engine: &Engine,
    rows: Vec<databuild_log::PartitionRow>,
) -> Result<Vec<DerivedStatus>> {
    let shown = engine.derive_rows(rows, &engine.versions(), &mut engine.resolver())?;
    Ok(shown.into_iter().map(|(status, _)| status).collect())
}
