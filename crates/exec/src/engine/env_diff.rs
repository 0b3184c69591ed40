//! `env diff`: the partitions one environment has otherwise than another (their data versions,
//! or how they were made), the jobs whose fingerprints differ and why, and what changed in the
//! bytes. The same gathering as a promotion's, so the diff lists what a promote would take.

use std::collections::BTreeMap;

use databuild_log::JobRunRow;

use super::Engine;
use crate::answers::{AliasDifference, EnvironmentDiff, JobDifference, PartitionDifference};
use crate::data::content_diff::{content_diff, DiffLimits};
use crate::error::Result;

impl Engine {
    /// What `name` has that `other` does not: at most `limit` partitions listed (0: all).
    pub fn environment_diff(
        &self,
        name: &str,
        other: &str,
        limit: usize,
    ) -> Result<EnvironmentDiff> {
        let (source, target) = (self.store_of(name)?, self.store_of(other)?);
        let change = self.differences(source.as_ref(), target.as_ref(), name, other)?;
        let (here, there) = (
            self.environments.data_dir_of(name),
            self.environments.data_dir_of(other),
        );
        let limit = if limit == 0 { usize::MAX } else { limit };
        let mut partitions = Vec::new();
        let mut jobs: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut total = 0;
        for take in &change.takes {
            for (r, _, version) in &take.outputs {
                total += 1;
                let theirs = target
                    .partition(r)?
                    .filter(|p| p.status == databuild_log::Status::Available);
                let their_run = match theirs.as_ref().and_then(|p| p.job_run_id.as_deref()) {
                    Some(run) => target.job_run(run)?,
                    None => None,
                };
                let reasons = jobs.entry(take.run.job.clone()).or_default();
                for reason in fingerprint_changes(&take.run, their_run.as_ref()) {
                    if !reasons.contains(&reason) {
                        reasons.push(reason);
                    }
                }
                if partitions.len() >= limit {
                    continue;
                }
                let other_version = theirs.and_then(|p| p.data_version);
                let (old, new) = (there.join(r), here.join(r));
                let content = content_diff(
                    Some(old.as_path()).filter(|p| p.exists()),
                    Some(new.as_path()).filter(|p| p.exists()),
                    &DiffLimits::default(),
                )
                .ok();
                partitions.push(PartitionDifference {
                    partition_ref: r.clone(),
                    job: take.run.job.clone(),
                    same_bytes: other_version.is_some() && other_version == *version,
                    data_version: version.clone(),
                    other_data_version: other_version,
                    content,
                });
            }
        }
        partitions.sort_by(|a, b| a.partition_ref.cmp(&b.partition_ref));
        Ok(EnvironmentDiff {
            environment: name.to_string(),
            other: other.to_string(),
            partitions,
            partitions_total: total,
            jobs: jobs
                .into_iter()
                .map(|(job, reasons)| JobDifference { job, reasons })
                .collect(),
            aliases: (change.aliases.into_iter())
                .map(|m| AliasDifference {
                    table: m.table,
                    version: m.to,
                    other_version: m.from,
                })
                .collect(),
        })
    }
}

/// Why a run in one environment was made otherwise than one in the other, for people.
fn fingerprint_changes(here: &JobRunRow, there: Option<&JobRunRow>) -> Vec<String> {
    let Some(there) = there else {
        return vec!["not built in the other environment".to_string()];
    };
    let mut reasons = Vec::new();
    if here.job_version != there.job_version {
        reasons.push(format!(
            "version {} → {}",
            there.job_version.as_deref().unwrap_or("?"),
            here.job_version.as_deref().unwrap_or("?")
        ));
    }
    for (path, version) in &here.code_versions {
        match there.code_versions.get(path) {
            None => reasons.push(format!("{path} added")),
            Some(v) if v != version => reasons.push(format!("{path} changed")),
            _ => {}
        }
    }
    for path in there.code_versions.keys() {
        if !here.code_versions.contains_key(path) {
            reasons.push(format!("{path} removed"));
        }
    }
    if here.args != there.args {
        reasons.push(format!("args {:?} → {:?}", there.args, here.args));
    }
    for (k, v) in &here.env {
        if there.env.get(k) != Some(v) {
            reasons.push(format!("env {k} changed"));
        }
    }
    if reasons.is_empty() && here.input_versions != there.input_versions {
        reasons.push("read other versions of its inputs".to_string());
    }
    reasons
}
