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
        // Each page derives afresh, but the code there is now is read once for all.
        let code = self.code();
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
            if !each(&self.versions_with(&code), own)? {
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
            let (partitions, freshness_checked, listed) = match external_kind(engine, p) {
                Some(External::Files) => {
                    let (partitions, exact) = present_files(engine, p, exact)?;
                    (partitions, exact, true)
                }
                Some(External::Probed) => (external_recorded(engine, p, exact)?, true, false),
                None => {
                    let (partitions, checked) = recorded(engine, p, exact)?;
                    (partitions, checked, true)
                }
            };
            Ok(DatasetView {
                name: engine.graph.producer_name(p).to_string(),
                kind: producer_kind(&engine.graph, p).to_string(),
                pattern: engine.graph.pattern_of(p).to_string(),
                partitions,
                freshness_checked,
                listed,
            })
        })
        .collect()
}

/// How an external dataset (no job builds it, no source feeds it) can be counted.
enum External {
    /// Its partitions are files (or folders) of the data dir: listed.
    Files,
    /// Only a probe command or an upstream service knows whether a partition is there: asking
    /// about every possible ref is no listing, so none is made.
    Probed,
}

fn external_kind(engine: &Engine, p: Producer) -> Option<External> {
    let Producer::Dataset(d) = p else {
        return None;
    };
    let ds = &engine.graph.datasets[d];
    match (&ds.exists, &ds.upstream, ds.source) {
        (_, _, Some(_)) => None,
        (None, None, None) => Some(External::Files),
        _ => Some(External::Probed),
    }
}

/// A file-backed external's partitions: those present in the data dir, split into `present` and
/// `tainted` (a taint holds until its data changes), and whether the count is whole: past
/// [`FRESHNESS_SCAN`] of them the walk stops (unless `exact`) and `present` is at least that.
fn present_files(
    engine: &Engine,
    p: Producer,
    exact: bool,
) -> Result<(std::collections::BTreeMap<String, u64>, bool)> {
    let cap = (!exact).then_some(FRESHNESS_SCAN as u64);
    let found = crate::data::present::count_present(
        &engine.data_dir,
        engine.graph.pattern_of(p),
        cap,
        |r| {
            databuild_core::PartitionRef::new(r).is_ok()
                && engine.graph.producer_of(r).map(|(q, _)| q) == Some(p)
        },
    );
    let tainted = DerivedStatus::Tainted;
    let recorded = || -> Result<u64> {
        Ok(engine
            .store
            .partition_counts(Some(&engine.graph.pattern_of(p).glob()))?
            .into_iter()
            .filter(|(s, _)| *s == Status::Tainted)
            .map(|(_, n)| n)
            .sum())
    };
    // The taints that still hold; past a scan of them, what the log records stands.
    let (held, whole) = match engine.external_taints(p, exact)? {
        Some(shown) => (shown.get(&tainted).copied().unwrap_or(0), true),
        None => (recorded()?, false),
    };
    let mut partitions = std::collections::BTreeMap::new();
    for (name, n) in [
        // A capped walk saw `count` files, not which of them the taints hold: `present` stays
        // the "at least" it promises.
        (
            DatasetView::PRESENT,
            match found.capped {
                true => found.count,
                false => found.count.saturating_sub(held),
            },
        ),
        (tainted.as_str(), held),
    ] {
        if n > 0 {
            partitions.insert(name.to_string(), n);
        }
    }
    Ok((partitions, whole && !found.capped))
}

/// A probed external's partitions as the log records them: only its taints, shown as `status`
/// shows them (still `tainted`, `live` again once its data changed, or `missing`).
fn external_recorded(
    engine: &Engine,
    p: Producer,
    exact: bool,
) -> Result<std::collections::BTreeMap<String, u64>> {
    let (mut partitions, _) = recorded(engine, p, exact)?;
    let tainted = DerivedStatus::Tainted.as_str();
    if partitions.contains_key(tainted) {
        if let Some(shown) = engine.external_taints(p, exact)? {
            partitions.remove(tainted);
            for (status, n) in shown {
                *partitions.entry(status.to_string()).or_default() += n;
            }
        }
    }
    Ok(partitions)
}

/// A job output's or a source's partitions counted as the log records them, a job output's
/// available ones split into live, stale and missing unless there are more than
/// [`FRESHNESS_SCAN`] (and not `exact`); and whether they were split.
fn recorded(
    engine: &Engine,
    p: Producer,
    exact: bool,
) -> Result<(std::collections::BTreeMap<String, u64>, bool)> {
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
    Ok((partitions, freshness_checked))
}

pub(crate) fn shown_states(
    engine: &Engine,
    rows: Vec<databuild_log::PartitionRow>,
) -> Result<Vec<DerivedStatus>> {
    let shown = engine.derive_rows(rows, &engine.versions(), &mut engine.resolver())?;
    Ok(shown.into_iter().map(|(status, _)| status).collect())
}
