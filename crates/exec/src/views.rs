//! JSON views shared by the CLI's `--json` output and the HTTP API, so both give the same answer.

use databuild_core::plan::{Delegation, MissingExternal};
use databuild_core::{Plan, PlannedRun};
use databuild_log::{PartitionQuery, PartitionRow, Status};
use serde::Serialize;

use crate::engine::{rfc3339, Engine, Result};

/// `analyze --json` (contract section 4).
#[derive(Debug, Serialize)]
pub struct AnalyzeView<'p> {
    pub build_request_id: &'p str,
    pub job_runs: &'p [PlannedRun],
    pub skipped: Vec<&'p str>,
    pub delegated: Vec<&'p str>,
    pub missing: Vec<&'p str>,
    pub delegations: &'p [Delegation],
    pub missing_details: &'p [MissingExternal],
}

impl<'p> AnalyzeView<'p> {
    pub fn new(build_request_id: &'p str, plan: &'p Plan) -> Self {
        AnalyzeView {
            build_request_id,
            job_runs: &plan.runs,
            skipped: plan.skipped.iter().map(|r| r.as_str()).collect(),
            delegated: plan
                .delegated
                .iter()
                .map(|d| d.partition_ref.as_str())
                .collect(),
            missing: plan
                .missing
                .iter()
                .map(|m| m.partition_ref.as_str())
                .collect(),
            delegations: &plan.delegated,
            missing_details: &plan.missing,
        }
    }
}

/// The user-facing name of a stored partition status.
pub fn shown_status(status: Status) -> &'static str {
    match status {
        Status::Available => "live",
        other => other.as_str(),
    }
}

/// One partition in a listing.
#[derive(Debug, Serialize)]
pub struct PartitionItem {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    pub status: &'static str,
    pub job: Option<String>,
    pub built_by: Option<String>,
    pub build_request_id: Option<String>,
    pub updated_at: String,
}

/// A page of partitions, with the cursor of the next page (`after`).
#[derive(Debug, Serialize)]
pub struct PartitionPage {
    pub partitions: Vec<PartitionItem>,
    pub next: Option<String>,
}

impl From<PartitionRow> for PartitionItem {
    fn from(r: PartitionRow) -> Self {
        PartitionItem {
            status: shown_status(r.status),
            updated_at: rfc3339(r.updated_at),
            partition_ref: r.partition_ref,
            job: r.job,
            built_by: r.job_run_id,
            build_request_id: r.build_request_id,
        }
    }
}

/// Parses a partition status filter as users write it (`live` for available).
pub fn parse_partition_status(s: &str) -> Option<Status> {
    match s {
        "live" | "available" => Some(Status::Available),
        "building" => Some(Status::Building),
        "failed" => Some(Status::Failed),
        "tainted" => Some(Status::Tainted),
        _ => None,
    }
}

impl Engine {
    pub fn partition_page(&self, query: &PartitionQuery) -> Result<PartitionPage> {
        let rows = self.store.partitions(query)?;
        let next = (rows.len() == query.limit && query.limit > 0)
            .then(|| rows.last().map(|r| r.partition_ref.clone()))
            .flatten();
        // What the log recorded, checked against the data: a job output whose data is gone is
        // missing; an external's taint holds only until its data changes. A filter by status is
        // on what is shown (a page may then hold fewer rows; `next` still pages on).
        let versions = self.versions();
        let partitions = rows
            .into_iter()
            .map(|row| {
                let shown = self.shown_status(&versions, &row);
                let mut item = PartitionItem::from(row);
                item.status = shown;
                item
            })
            .filter(|item| query.status.is_none_or(|s| shown_status(s) == item.status))
            .collect();
        Ok(PartitionPage { partitions, next })
    }

    fn shown_status(
        &self,
        versions: &crate::versions::VersionedStates<'_>,
        row: &PartitionRow,
    ) -> &'static str {
        use databuild_core::Producer;
        let producer = self.graph.producer_of(&row.partition_ref).map(|(p, _)| p);
        match (row.status, producer) {
            (Status::Available, Some(Producer::Job { .. }))
                if !self.data_dir.join(&row.partition_ref).exists() =>
            {
                "missing"
            }
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
