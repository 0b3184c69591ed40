//! Listings of partitions: a page of them by recorded status, or by derived freshness (`live`,
//! `stale`), each shown by the name `status` gives it (`Engine::derive_rows`). The CLI's
//! `partitions` and the API's `/partitions` share it.

use databuild_log::{PartitionQuery, PartitionRow, Status};
use serde::{Deserialize, Serialize};

use crate::answers::{DerivedStatus, UnknownStatus};
use crate::engine::{Engine, Result};

/// One partition in a listing (an answer: see [`crate::answers`] for its times).
#[derive(Debug, Clone, Serialize, Deserialize, utoipa::ToSchema)]
pub struct PartitionItem {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// As `status` says it.
    pub status: DerivedStatus,
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
            status: DerivedStatus::recorded(r.status),
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
    /// The statuses a listing takes (`available` is also taken, as `live`).
    pub const TAKEN: [DerivedStatus; 5] = [
        DerivedStatus::Live,
        DerivedStatus::Stale,
        DerivedStatus::Building,
        DerivedStatus::Failed,
        DerivedStatus::Tainted,
    ];

    /// A listing's status by its name; else an error naming those it takes.
    pub fn parse(s: &str) -> std::result::Result<ListedStatus, UnknownStatus> {
        let s = if s == "available" { "live" } else { s };
        DerivedStatus::parse_one_of(s, &Self::TAKEN)
            .map(|d| Self::of(d).expect("every status a listing takes is listed"))
    }

    /// How a listing asks for `status`, if it can.
    pub fn of(status: DerivedStatus) -> Option<ListedStatus> {
        match status {
            DerivedStatus::Live => Some(ListedStatus::Live),
            DerivedStatus::Stale => Some(ListedStatus::Stale),
            DerivedStatus::Building => Some(ListedStatus::Recorded(Status::Building)),
            DerivedStatus::Failed => Some(ListedStatus::Recorded(Status::Failed)),
            DerivedStatus::Tainted => Some(ListedStatus::Recorded(Status::Tainted)),
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

    /// The status each listed partition shows.
    pub fn shown(self) -> DerivedStatus {
        match self {
            ListedStatus::Live => DerivedStatus::Live,
            ListedStatus::Stale => DerivedStatus::Stale,
            ListedStatus::Recorded(s) => DerivedStatus::recorded(s),
        }
    }
}

/// The most partitions one page of a `live` or `stale` listing checks the freshness of. A page
/// may hold fewer matches than asked for, with a cursor to go on from: its cost is bounded by
/// this, not by how rare the matches are.
pub const FRESHNESS_SCAN: usize = 20_000;

impl Engine {
    /// A page by recorded status, each shown as `status` shows it (`derive_rows`). A filter by
    /// status is on what is shown (a page may then hold fewer rows; `next` still pages on).
    fn recorded_page(&self, query: &PartitionQuery) -> Result<PartitionPage> {
        let rows = self.store.partitions(query)?;
        let next = (rows.len() == query.limit && query.limit > 0)
            .then(|| rows.last().map(|r| r.partition_ref.clone()))
            .flatten();
        let versions = self.versions();
        let mut resolver = self.resolver();
        let shown = self.derive_rows(rows.clone(), &versions, &mut resolver)?;
        let partitions = rows
            .into_iter()
            .zip(shown)
            .map(|(row, (status, reason))| {
                let mut item = PartitionItem::from(row);
                item.status = status;
                item.reason = reason;
                item
            })
            .filter(|item| {
                query
                    .status
                    .is_none_or(|s| DerivedStatus::recorded(s) == item.status)
            })
            .collect();
        Ok(PartitionPage { partitions, next })
    }

    /// How a listing shows a row whose freshness it does not derive (not an available job
    /// output): as recorded, but that an external's taint holds only until its data changes.
    pub(crate) fn shown_status(
        &self,
        versions: &crate::data::versions::VersionedStates<'_>,
        row: &PartitionRow,
    ) -> DerivedStatus {
        use databuild_core::Producer;
        let producer = self.graph.producer_of(&row.partition_ref).map(|(p, _)| p);
        match (row.status, producer) {
            (Status::Tainted, Some(Producer::Dataset(d)))
                if self.graph.datasets[d].source.is_none() =>
            {
                let r = row.partition_ref.as_str();
                match versions.current_version(r) {
                    None => DerivedStatus::Missing,
                    Some(_) if versions.external_tainted(r).is_some() => DerivedStatus::Tainted,
                    Some(_) => DerivedStatus::Live,
                }
            }
            (status, _) => DerivedStatus::recorded(status),
        }
    }
}

pub(crate) fn partition_page(
    engine: &Engine,
    query: &PartitionQuery,
    listed: Option<ListedStatus>,
) -> Result<PartitionPage> {
    let want = match listed {
        Some(l @ (ListedStatus::Live | ListedStatus::Stale)) => l.shown(),
        _ => return engine.recorded_page(query),
    };
    let versions = engine.versions();
    let mut resolver = engine.resolver();
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
        let shown = engine.derive_rows(rows.clone(), &versions, &mut resolver)?;
        let mut taken = 0;
        for (row, (status, reason)) in rows.into_iter().zip(shown) {
            taken += 1;
            scanned += 1;
            cursor = Some(row.partition_ref.clone());
            // Available in the log, but live, stale, check_failed or missing (data gone).
            if status == want {
                let mut item = PartitionItem::from(row);
                item.status = status;
                item.reason = reason;
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
