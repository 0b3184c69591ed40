//! Listings of partitions: a page of them by recorded status, or by derived freshness (`live`,
//! `stale`), each shown by the name `status` gives it. The CLI's `partitions` and the API's
//! `/partitions` share it.

use databuild_core::plan::KnownState;
use databuild_log::{PartitionQuery, PartitionRow, Status};
use serde::{Deserialize, Serialize};

use crate::engine::{Engine, Result};

/// The user-facing name of a stored partition status.
pub fn shown_status(status: Status) -> &'static str {
    match status {
        Status::Available => "live",
        // Its data was removed by gc: missing until a build makes it again.
        Status::Removed => "missing",
        other => other.as_str(),
    }
}

/// One partition in a listing (an answer: see [`crate::answers`] for its times).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PartitionItem {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// `live`, `stale`, `check_failed`, `missing`, `building`, `failed` or `tainted`, as
    /// `status` says it.
    pub status: String,
    pub job: Option<String>,
    pub built_by: Option<String>,
    pub build_request_id: Option<String>,
    #[schema(format = DateTime)]
    pub updated_at: String,
    /// Why a partition is stale, check_failed or missing (its data gone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub updated_at_ns: i64,
}

/// A page of partitions, with the cursor of the next page (`after`).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PartitionPage {
    pub partitions: Vec<PartitionItem>,
    pub next: Option<String>,
}

impl From<PartitionRow> for PartitionItem {
    fn from(r: PartitionRow) -> Self {
        PartitionItem {
            status: shown_status(r.status).to_string(),
            updated_at: crate::answers::rfc3339(r.updated_at),
            updated_at_ns: r.updated_at,
            partition_ref: r.partition_ref,
            job: r.job,
            built_by: r.job_run_id,
            build_request_id: r.build_request_id,
            reason: None,
        }
    }
}

/// A status a listing can ask for: one the log records, or `live` / `stale`, which split the
/// log's `available` by freshness (derived, as `status` derives it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListedStatus {
    Live,
    Stale,
    Recorded(Status),
}

impl ListedStatus {
    pub const NAMES: &'static str = "live, stale, building, failed or tainted";

    pub fn parse(s: &str) -> Option<ListedStatus> {
        match s {
            "live" | "available" => Some(ListedStatus::Live),
            "stale" => Some(ListedStatus::Stale),
            "building" => Some(ListedStatus::Recorded(Status::Building)),
            "failed" => Some(ListedStatus::Recorded(Status::Failed)),
            "tainted" => Some(ListedStatus::Recorded(Status::Tainted)),
            _ => None,
        }
    }

    /// What the log is asked for.
    pub fn recorded(self) -> Status {
        match self {
            ListedStatus::Live | ListedStatus::Stale => Status::Available,
            ListedStatus::Recorded(s) => s,
        }
    }
}

/// The most partitions one page of a `live` or `stale` listing checks the freshness of. A page
/// may hold fewer matches than asked for, with a cursor to go on from: its cost is bounded by
/// this, not by how rare the matches are.
pub const FRESHNESS_SCAN: usize = 20_000;

/// The name a listing shows a derived state by.
pub(crate) fn state_name(state: &KnownState) -> &'static str {
    match state {
        KnownState::Live => "live",
        KnownState::Stale { .. } | KnownState::Kept { .. } => "stale",
        KnownState::CheckFailed { .. } => "check_failed",
        KnownState::Missing => "missing",
        KnownState::Building { .. } => "building",
        KnownState::Failed => "failed",
        KnownState::Tainted => "tainted",
    }
}

/// How a listing shows an available job output whose state was derived, and why (as `status`
/// says it).
fn derived_status(
    state: KnownState,
    versions: &crate::data::versions::VersionedStates<'_>,
    r: &str,
) -> (&'static str, Option<String>) {
    let name = state_name(&state);
    let reason = match state {
        KnownState::Stale { reason }
        | KnownState::Kept { reason }
        | KnownState::CheckFailed { reason } => Some(reason),
        KnownState::Missing => Some(
            versions
                .gone(r)
                .unwrap_or_else(|| "its data is gone".to_string()),
        ),
        _ => None,
    };
    (name, reason)
}

impl Engine {
    /// A page by recorded status, each shown as it is: an available job output as `status`
    /// derives it (live, stale with why, check_failed, or missing when its data is gone); an
    /// external's taint holds only until its data changes. A filter by status is on what is
    /// shown (a page may then hold fewer rows; `next` still pages on).
    fn recorded_page(&self, query: &PartitionQuery) -> Result<PartitionPage> {
        let rows = self.store.partitions(query)?;
        let next = (rows.len() == query.limit && query.limit > 0)
            .then(|| rows.last().map(|r| r.partition_ref.clone()))
            .flatten();
        let versions = self.versions();
        // The page's available job outputs, derived in one batch, in the page's order.
        let derived =
            |row: &PartitionRow| row.status == Status::Available && self.is_job_output(row);
        let refs: Vec<&str> = rows
            .iter()
            .filter(|row| derived(row))
            .map(|row| row.partition_ref.as_str())
            .collect();
        let mut states = versions.known_all(&refs)?.into_iter();
        let partitions = rows
            .into_iter()
            .map(|row| {
                let (status, reason) = match derived(&row).then(|| states.next()).flatten() {
                    Some(state) => derived_status(state, &versions, &row.partition_ref),
                    None => (self.shown_status(&versions, &row), None),
                };
                let mut item = PartitionItem::from(row);
                item.status = status.to_string();
                item.reason = reason;
                item
            })
            .filter(|item| query.status.is_none_or(|s| shown_status(s) == item.status))
            .collect();
        Ok(PartitionPage { partitions, next })
    }

    fn is_job_output(&self, row: &PartitionRow) -> bool {
        matches!(
            self.graph.producer_of(&row.partition_ref),
            Some((databuild_core::Producer::Job { .. }, _))
        )
    }

    /// How a listing shows a row whose freshness it does not derive (not an available job
    /// output): as recorded, but that an external's taint holds only until its data changes.
    pub(crate) fn shown_status(
        &self,
        versions: &crate::data::versions::VersionedStates<'_>,
        row: &PartitionRow,
    ) -> &'static str {
        use databuild_core::Producer;
        let producer = self.graph.producer_of(&row.partition_ref).map(|(p, _)| p);
        match (row.status, producer) {
            (Status::Tainted, Some(Producer::Dataset(d)))
                if self.graph.datasets[d].source.is_none() =>
            {
                let r = row.partition_ref.as_str();
                match versions.current_version(r) {
                    None => "missing",
                    Some(_) if versions.external_tainted(r).is_some() => "tainted",
                    Some(_) => "live",
                }
            }
            (status, _) => shown_status(status),
        }
    }
}

pub(crate) fn partition_page(
    engine: &Engine,
    query: &PartitionQuery,
    listed: Option<ListedStatus>,
) -> Result<PartitionPage> {
    let want_fresh = match listed {
        Some(ListedStatus::Live) => true,
        Some(ListedStatus::Stale) => false,
        _ => return engine.recorded_page(query),
    };
    let versions = engine.versions();
    let mut page = PartitionPage {
        partitions: Vec::new(),
        next: None,
    };
    let mut cursor = query.after.clone();
    let mut scanned = 0;
    let batch = query.limit.clamp(100, 2_000);
    while page.partitions.len() < query.limit && scanned < FRESHNESS_SCAN {
        let rows = engine.store.partitions(&PartitionQuery {
            pattern: query.pattern.clone(),
            status: Some(Status::Available),
            limit: batch,
            after: cursor.clone(),
        })?;
        let (fetched, full) = (rows.len(), rows.len() == batch);
        let refs: Vec<&str> = rows.iter().map(|r| r.partition_ref.as_str()).collect();
        let states = versions.known_all(&refs)?;
        let mut taken = 0;
        for (row, state) in rows.into_iter().zip(states) {
            taken += 1;
            scanned += 1;
            cursor = Some(row.partition_ref.clone());
            // Available in the log, but live, stale, or missing (its data is gone).
            let (fresh, reason) = match state {
                KnownState::Stale { reason } | KnownState::Kept { reason } => (false, Some(reason)),
                KnownState::Live => (true, None),
                _ => continue,
            };
            if fresh == want_fresh {
                let mut item = PartitionItem::from(row);
                if let Some(reason) = reason {
                    item.status = "stale".to_string();
                    item.reason = Some(reason);
                }
                page.partitions.push(item);
                if page.partitions.len() == query.limit {
                    break;
                }
            }
        }
        // The log has nothing after this batch, and all of it was looked at: the end.
        if !full && taken == fetched {
            cursor = None;
            break;
        }
    }
    page.next = cursor;
    Ok(page)
}
