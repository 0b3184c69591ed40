//! `gc`: housekeeping. Removes what nothing reads any more — old run logs, the staging folders
//! of ended runs, `.tmp` files that killed jobs left behind, and the data of partitions that no
//! job of the graph builds any more — and records what it removed in the log. It never removes a
//! live partition's data, the log of a partition's current run (`logs REF` reads it), or anything
//! of a run that has not ended.
//!
//! Deciding is separate from doing: [`Engine::gc`] first gathers every [`GcItem`] with the action
//! it takes, then (unless it is a dry run) records the removals of partitions' data in the log —
//! before deleting them, so the log never says a partition is there that gc took away — and
//! finally acts.

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use databuild_log::{Event, LogError, PartitionQuery, RunQuery, Status};
use serde::{Deserialize, Serialize};

use super::environments::ENV_DATA;
use crate::engine::{Engine, EngineError, Result};
use crate::run::publish::STAGING;

/// How many items a report lists one by one (its counts cover them all).
pub const LISTED_ITEMS: usize = 1_000;

/// What gc is asked to do.
#[derive(Debug, Clone, Copy)]
pub struct GcOptions {
    /// Only what was last written (or, for a partition, last recorded) before this long ago.
    pub older_than: Duration,
    /// Say what would be removed, remove nothing.
    pub dry_run: bool,
}

/// What gc removes (or moves).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, utoipa::ToSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum GcKind {
    /// A run's log (and its report) in `.databuild/logs`, or a config's kept stderr.
    RunLog,
    /// `<data_dir>/.databuild-staging/<run>` of a run that ended (or lost its claim): never
    /// published, or left behind by a kill.
    Staging,
    /// Outputs a completed run staged and the log records, never moved into place (its driver
    /// died between the two): moved into place now, not removed.
    Published,
    /// A `*.tmp` file in the data dir that a killed job left behind.
    TempFile,
    /// The data of a partition that no job or table of the graph builds any more.
    PartitionData,
    /// What a promotion replaced in an environment (`<data_dir>/.databuild-env/.replaced/`),
    /// kept for `env rollback`: freed past the retention, but never the environment's latest
    /// (the one its rollback takes back). Bytes another environment links stay.
    Replaced,
}

/// One thing gc removes (or, for [`GcKind::Published`], moves into place).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GcItem {
    pub kind: GcKind,
    pub path: String,
    pub bytes: u64,
    /// The partition whose data it is, or the run whose log or staging it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_ref: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_run_id: Option<String>,
}

/// How many of one kind, and their size.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GcCount {
    pub count: u64,
    pub bytes: u64,
}

/// The answer of `gc`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct GcReport {
    /// Nothing was removed: this is what would be.
    pub dry_run: bool,
    pub older_than_seconds: u64,
    /// Counts and bytes by kind (`run_log`, `staging`, `published`, `temp_file`, `partition_data`).
    pub totals: BTreeMap<GcKind, GcCount>,
    /// The first [`LISTED_ITEMS`] items, in the order they were found.
    pub items: Vec<GcItem>,
    /// More items than are listed.
    pub items_truncated: bool,
    /// What was found but kept, by why (`the log of a partition's current run`, ...).
    pub kept: BTreeMap<String, u64>,
    /// What could not be removed, one line each (a permission, a file gone meanwhile).
    pub errors: Vec<String>,
}

impl GcReport {
    fn new(options: GcOptions) -> Self {
        GcReport {
            dry_run: options.dry_run,
            older_than_seconds: options.older_than.as_secs(),
            totals: BTreeMap::new(),
            items: Vec::new(),
            items_truncated: false,
            kept: BTreeMap::new(),
            errors: Vec::new(),
        }
    }

    fn add(&mut self, item: GcItem) {
        let total = self.totals.entry(item.kind).or_default();
        total.count += 1;
        total.bytes += item.bytes;
        if self.items.len() < LISTED_ITEMS {
            self.items.push(item);
        } else {
            self.items_truncated = true;
        }
    }

    fn keep(&mut self, why: &str) {
        *self.kept.entry(why.to_string()).or_default() += 1;
    }

    /// Something was (or, in a dry run, would be) removed or moved.
    pub fn removed_anything(&self) -> bool {
        !self.totals.is_empty()
    }

    /// The bytes freed (or that would be), moved outputs aside.
    pub fn bytes_freed(&self) -> u64 {
        self.totals
            .iter()
            .filter(|(k, _)| **k != GcKind::Published)
            .map(|(_, c)| c.bytes)
            .sum()
    }
}

/// An item with where it is, kept apart from the report (which only lists the first ones).
struct Action {
    item: GcItem,
    path: PathBuf,
    /// For [`GcKind::Published`]: the outputs the log still credits to the run.
    publish: Vec<databuild_core::PartitionRef>,
}

impl Action {
    fn new(item: GcItem, path: PathBuf) -> Self {
        Action {
            item,
            path,
            publish: Vec::new(),
        }
    }
}

const RUN_BATCH: usize = 500;

/// How much older than the oldest unfinished run a `.tmp` file must be to be a leftover.
const RUNNING_CLOCK_MARGIN: Duration = Duration::from_secs(60);

impl Engine {
    /// When the oldest run that has not ended was scheduled: what a running job may be writing
    /// is newer than that.
    fn oldest_unfinished_run(&self) -> Result<Option<SystemTime>> {
        let rows = self.store.job_runs(&RunQuery {
            unfinished: true,
            limit: 100_000,
            ..Default::default()
        })?;
        Ok(rows
            .iter()
            .filter_map(|r| r.scheduled_at.or(r.started_at))
            .min()
            .map(|ns| SystemTime::UNIX_EPOCH + Duration::from_nanos(ns.max(0) as u64)))
    }

    /// Logs (`<run>.log`, `<run>.report.json`, and the lists of refs too long for a run's
    /// environment, `<run>.inputs.json`) of ended runs older than the cutoff, but not the
    /// log of a run that is still a partition's current run; configs' stderr older than it.
    fn old_run_logs(&self, cutoff: SystemTime, report: &mut GcReport) -> Result<Vec<Action>> {
        let mut by_run: BTreeMap<String, Vec<(PathBuf, u64)>> = BTreeMap::new();
        let mut found = Vec::new();
        for entry in read_dir(&self.logs_dir())? {
            let path = entry.path();
            let Some(name) = path.file_name().and_then(|n| n.to_str()) else {
                continue;
            };
            let Some(meta) = older_file(&path, cutoff) else {
                continue;
            };
            if name.starts_with("config-") && name.ends_with(".stderr") {
                found.push(Action::new(
                    GcItem {
                        kind: GcKind::RunLog,
                        path: path.display().to_string(),
                        bytes: meta.len(),
                        partition_ref: None,
                        job_run_id: None,
                    },
                    path,
                ));
                continue;
            }
            let run = name.split('.').next().unwrap_or_default();
            if [
                ".log",
                ".report.json",
                ".inputs.json",
                ".query_inputs.json",
                ".outputs.json",
            ]
            .iter()
            .any(|end| name.ends_with(end))
            {
                by_run
                    .entry(run.to_string())
                    .or_default()
                    .push((path.clone(), meta.len()));
            }
        }
        let ids: Vec<&str> = by_run.keys().map(String::as_str).collect();
        for batch in ids.chunks(RUN_BATCH) {
            let rows = self.store.job_runs_by_id(batch)?;
            let rows: BTreeMap<&str, _> = rows.iter().map(|r| (r.job_run_id.as_str(), r)).collect();
            for id in batch {
                let Some(row) = rows.get(id) else {
                    // A run another event log knows (or none does): not this log's to judge.
                    report.keep("the log of a run this event log does not know");
                    continue;
                };
                if row.status.run_unfinished() {
                    report.keep("the log of a run that has not ended");
                    continue;
                }
                if self.is_current_run(row)? {
                    report.keep("the log of a partition's current run");
                    continue;
                }
                for (path, bytes) in &by_run[*id] {
                    found.push(Action::new(
                        GcItem {
                            kind: GcKind::RunLog,
                            path: path.display().to_string(),
                            bytes: *bytes,
                            partition_ref: None,
                            job_run_id: Some(id.to_string()),
                        },
                        path.clone(),
                    ));
                }
            }
        }
        Ok(found)
    }

    /// The run still holds one of its outputs: the partition's row names it (built, failed or
    /// tainted since), so `logs REF` and `explain` read its log.
    fn is_current_run(&self, run: &databuild_log::JobRunRow) -> Result<bool> {
        let outputs: Vec<&str> = run.outputs.iter().map(String::as_str).collect();
        Ok(self
            .store
            .partitions_by_ref(&outputs)?
            .iter()
            .any(|p| p.job_run_id.as_deref() == Some(run.job_run_id.as_str())))
    }

    /// `<data_dir>/.databuild-staging/<run>` folders older than the cutoff: of an ended run (or
    /// one the log does not know), removed; but a completed run still credited with outputs that
    /// never moved into place has them moved now.
    fn leftover_staging(&self, cutoff: SystemTime, report: &mut GcReport) -> Result<Vec<Action>> {
        let dirs: Vec<PathBuf> = read_dir(&self.data_dir.join(STAGING))?
            .into_iter()
            .map(|e| e.path())
            .collect();
        let mut found = Vec::new();
        for batch in dirs.chunks(RUN_BATCH) {
            let ids: Vec<&str> = batch
                .iter()
                .filter_map(|p| p.file_name().and_then(|n| n.to_str()))
                .collect();
            let rows = self.store.job_runs_by_id(&ids)?;
            let rows: BTreeMap<&str, _> = rows.iter().map(|r| (r.job_run_id.as_str(), r)).collect();
            for path in batch {
                let id = path
                    .file_name()
                    .and_then(|n| n.to_str())
                    .unwrap_or_default();
                let item = |kind| GcItem {
                    kind,
                    path: path.display().to_string(),
                    bytes: size_of(path),
                    partition_ref: None,
                    job_run_id: Some(id.to_string()),
                };
                if older_file(path, cutoff).is_none() {
                    continue;
                }
                let Some(row) = rows.get(id) else {
                    if self.store.build_request(id)?.is_some() {
                        // A promotion's, cut short: the next `env promote` or `rollback` moves it.
                        report.keep("a promotion's data not yet moved into place");
                        continue;
                    }
                    found.push(Action::new(item(GcKind::Staging), path.clone()));
                    continue;
                };
                if row.status.run_unfinished() {
                    report.keep("the staging folder of a run that has not ended");
                    continue;
                }
                let publish = self.unpublished(row)?;
                if publish.is_empty() {
                    found.push(Action::new(item(GcKind::Staging), path.clone()));
                } else {
                    found.push(Action {
                        publish,
                        ..Action::new(item(GcKind::Published), path.clone())
                    });
                }
            }
        }
        Ok(found)
    }

    /// Of a completed run, the staged outputs the log still credits to it that are not in
    /// place: its driver died between recording the run and moving them.
    fn unpublished(
        &self,
        run: &databuild_log::JobRunRow,
    ) -> Result<Vec<databuild_core::PartitionRef>> {
        if run.status != Status::Completed {
            return Ok(Vec::new());
        }
        let staging = crate::run::publish::staging_dir(&self.data_dir, &run.job_run_id);
        let outputs: Vec<&str> = run.outputs.iter().map(String::as_str).collect();
        Ok(self
            .store
            .partitions_by_ref(&outputs)?
            .iter()
            .filter(|p| {
                p.status == Status::Available
                    && p.job_run_id.as_deref() == Some(run.job_run_id.as_str())
                    && staging.join(&p.partition_ref).symlink_metadata().is_ok()
                    && self
                        .data_dir
                        .join(&p.partition_ref)
                        .symlink_metadata()
                        .is_err()
            })
            .filter_map(|p| databuild_core::PartitionRef::new(&p.partition_ref).ok())
            .collect())
    }

    /// `*.tmp` files anywhere in the data dir (outside staging) older than the cutoff and than
    /// every run that has not ended, that are not themselves a partition.
    fn leftover_temp_files(
        &self,
        cutoff: SystemTime,
        oldest_running: Option<SystemTime>,
        report: &mut GcReport,
    ) -> Result<Vec<Action>> {
        // A file's mtime comes from the kernel's coarse clock and a job may run on a host whose
        // clock differs: a margin keeps a running job's fresh `.tmp` from looking older than it.
        let before = oldest_running.map_or(cutoff, |t| {
            t.checked_sub(RUNNING_CLOCK_MARGIN).unwrap_or(t).min(cutoff)
        });
        let mut found = Vec::new();
        let mut dirs = vec![self.data_dir.clone()];
        while let Some(dir) = dirs.pop() {
            for entry in read_dir(&dir)? {
                let path = entry.path();
                let Ok(kind) = entry.file_type() else {
                    continue;
                };
                if kind.is_dir() {
                    // Staging is gc'd on its own; other environments' data by their own gc.
                    let own = entry.file_name() != STAGING && entry.file_name() != ENV_DATA;
                    if dir != self.data_dir || own {
                        dirs.push(path);
                    }
                    continue;
                }
                let is_tmp = entry
                    .file_name()
                    .to_str()
                    .is_some_and(|n| n.ends_with(".tmp"));
                if !kind.is_file() || !is_tmp {
                    continue;
                }
                let Some(meta) = older_file(&path, before) else {
                    continue;
                };
                let rel = path.strip_prefix(&self.data_dir).unwrap_or(&path);
                let rel = rel.to_string_lossy();
                if self.store.partition(&rel)?.is_some() {
                    report.keep("a `.tmp` file that is a partition of its own");
                    continue;
                }
                found.push(Action::new(
                    GcItem {
                        kind: GcKind::TempFile,
                        path: path.display().to_string(),
                        bytes: meta.len(),
                        partition_ref: None,
                        job_run_id: None,
                    },
                    path,
                ));
            }
        }
        Ok(found)
    }

    /// Partitions a job run built whose ref no job or table of the graph builds any more (a job
    /// removed, a table version dropped), recorded before the cutoff, whose data is still there.
    /// External data (datasets, sources' raw days) is never gc's: DataBuild did not make it.
    fn orphaned_partitions(
        &self,
        cutoff: SystemTime,
        report: &mut GcReport,
    ) -> Result<Vec<Action>> {
        let cutoff_ns = cutoff
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i64);
        let mut found = Vec::new();
        let mut after = None;
        loop {
            let page = self.store.partitions(&PartitionQuery {
                limit: 1_000,
                after: after.clone(),
                ..Default::default()
            })?;
            let Some(last) = page.last() else { break };
            after = Some(last.partition_ref.clone());
            for row in &page {
                let r = row.partition_ref.as_str();
                let built_by_a_job = row.job.is_some() && row.job_run_id.is_some();
                if !built_by_a_job
                    || r.starts_with("source/")
                    || self.graph.producer_of(r).is_some()
                {
                    continue;
                }
                if row.status == Status::Building {
                    report.keep("a partition no job builds any more, being built now");
                    continue;
                }
                let path = self.data_dir.join(r);
                if path.symlink_metadata().is_err() {
                    continue;
                }
                if row.updated_at >= cutoff_ns {
                    report.keep("the data of a partition no job builds, recorded recently");
                    continue;
                }
                if self.holds_other_partitions(r)? {
                    report.keep(
                        "the folder of a partition no job builds that holds other partitions",
                    );
                    continue;
                }
                found.push(Action::new(
                    GcItem {
                        kind: GcKind::PartitionData,
                        path: path.display().to_string(),
                        bytes: size_of(&path),
                        partition_ref: Some(r.to_string()),
                        job_run_id: row.job_run_id.clone(),
                    },
                    path,
                ));
            }
        }
        Ok(found)
    }

    /// Some other partition's data lies under `r`'s folder (`r/...`): removing it would take
    /// theirs. One the log knows (refs under `r/` sort right after `r/`, so one row tells), or
    /// a path under it that the graph declares (an external dataset's file, say).
    fn holds_other_partitions(&self, r: &str) -> Result<bool> {
        let prefix = format!("{r}/");
        let next = self.store.partitions(&PartitionQuery {
            limit: 1,
            after: Some(prefix.clone()),
            ..Default::default()
        })?;
        if next
            .first()
            .is_some_and(|p| p.partition_ref.starts_with(&prefix))
        {
            return Ok(true);
        }
        let top = self.data_dir.join(r);
        let mut dirs = if top.symlink_metadata().is_ok_and(|m| m.is_dir()) {
            vec![top]
        } else {
            Vec::new()
        };
        while let Some(dir) = dirs.pop() {
            for entry in read_dir(&dir)? {
                let path = entry.path();
                let rel = path.strip_prefix(&self.data_dir).unwrap_or(&path);
                if self.graph.producer_of(&rel.to_string_lossy()).is_some() {
                    return Ok(true);
                }
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    dirs.push(path);
                }
            }
        }
        Ok(false)
    }

    /// The log hears of every partition whose data goes before it goes (a partition already
    /// recorded `removed` whose data a failed gc left is not recorded twice).
    fn record_removals(&self, actions: &[Action]) -> Result<()> {
        let refs: Vec<&str> = actions
            .iter()
            .filter(|a| a.item.kind == GcKind::PartitionData)
            .filter_map(|a| a.item.partition_ref.as_deref())
            .collect();
        for batch in refs.chunks(1_000) {
            let recorded: HashSet<String> = self
                .store
                .partitions_by_ref(batch)?
                .into_iter()
                .filter(|p| p.status == Status::Removed)
                .map(|p| p.partition_ref)
                .collect();
            let events: Vec<Event> = batch
                .iter()
                .filter(|r| !recorded.contains(**r))
                .map(|r| {
                    Event::partition(None, r, Status::Removed)
                        .with_message("removed by `databuild gc`: no job of the graph builds it")
                })
                .collect();
            if events.is_empty() {
                continue;
            }
            self.store.append(events).map_err(|e| match e {
                LogError::Refused { reason, .. } => EngineError::Invalid(format!(
                    "gc removed nothing: {reason}; run it again once that build has ended"
                )),
                other => other.into(),
            })?;
        }
        Ok(())
    }

    /// What promotions into each environment replaced, older than `cutoff`, but each
    /// environment's latest (named by its build id, which sorts by time).
    fn replaced_instances(&self, cutoff: SystemTime, report: &mut GcReport) -> Result<Vec<Action>> {
        if !self.environments.is_prod() {
            return Ok(Vec::new());
        }
        let kept = self
            .data_dir
            .join(ENV_DATA)
            .join(super::environments::REPLACED);
        let mut found = Vec::new();
        for env in read_dir(&kept)? {
            let mut changes: Vec<PathBuf> =
                read_dir(&env.path())?.iter().map(|e| e.path()).collect();
            changes.sort();
            if changes.pop().is_some() {
                report.keep("what an environment's last promotion replaced (its rollback)");
            }
            for path in changes {
                if older_file(&path, cutoff).is_none() {
                    continue;
                }
                let item = GcItem {
                    kind: GcKind::Replaced,
                    path: path.display().to_string(),
                    bytes: size_of(&path),
                    partition_ref: None,
                    job_run_id: path.file_name().map(|n| n.to_string_lossy().into_owned()),
                };
                found.push(Action::new(item, path));
            }
        }
        Ok(found)
    }

    fn carry_out(&self, action: &Action) -> std::io::Result<()> {
        match action.item.kind {
            GcKind::Published => {
                crate::run::publish::publish_outputs(&self.data_dir, &action.path, &action.publish)
            }
            _ => remove(&action.path),
        }
    }
}

pub(crate) fn logs_dir(engine: &Engine) -> PathBuf {
    engine.graph_dir.join(".databuild/logs")
}

pub(crate) fn gc(engine: &Engine, options: GcOptions) -> Result<GcReport> {
    let now = SystemTime::now();
    let cutoff = now
        .checked_sub(options.older_than)
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let oldest_running = engine.oldest_unfinished_run()?;
    let mut report = GcReport::new(options);
    let mut actions = engine.old_run_logs(cutoff, &mut report)?;
    actions.extend(engine.leftover_staging(cutoff, &mut report)?);
    actions.extend(engine.leftover_temp_files(cutoff, oldest_running, &mut report)?);
    actions.extend(engine.orphaned_partitions(cutoff, &mut report)?);
    actions.extend(engine.replaced_instances(cutoff, &mut report)?);
    for action in &actions {
        report.add(action.item.clone());
    }
    if options.dry_run || actions.is_empty() {
        return Ok(report);
    }
    engine.record_removals(&actions)?;
    for action in &actions {
        if let Err(e) = engine.carry_out(action) {
            report
                .errors
                .push(format!("cannot remove {}: {e}", action.path.display()));
        }
    }
    let summary = serde_json::to_value(GcSummary {
        older_than_seconds: report.older_than_seconds,
        totals: &report.totals,
        errors: report.errors.len(),
    })
    .expect("a gc summary serializes");
    engine
        .store
        .append(vec![Event::gc(
            format!(
                "removed {} item(s), {} bytes",
                actions.len(),
                report.bytes_freed()
            ),
            summary,
        )])
        .map_err(EngineError::from)?;
    Ok(report)
}

/// What the log's `gc` event holds: the counts, not every path.
#[derive(Serialize)]
struct GcSummary<'a> {
    older_than_seconds: u64,
    totals: &'a BTreeMap<GcKind, GcCount>,
    errors: usize,
}

/// The entries of a folder; none if it does not exist.
fn read_dir(dir: &Path) -> Result<Vec<std::fs::DirEntry>> {
    match std::fs::read_dir(dir) {
        Ok(entries) => Ok(entries.filter_map(|e| e.ok()).collect()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
        Err(e) => Err(EngineError::Invalid(format!(
            "cannot read {}: {e}",
            dir.display()
        ))),
    }
}

/// Its metadata, if it was last modified before `cutoff` (symlinks not followed).
fn older_file(path: &Path, cutoff: SystemTime) -> Option<std::fs::Metadata> {
    let meta = path.symlink_metadata().ok()?;
    (meta.modified().ok()? < cutoff).then_some(meta)
}

/// The bytes of a file, or of every file under a folder (symlinks not followed).
fn size_of(path: &Path) -> u64 {
    let Ok(meta) = path.symlink_metadata() else {
        return 0;
    };
    if !meta.is_dir() {
        return meta.len();
    }
    std::fs::read_dir(path)
        .map(|entries| {
            entries
                .filter_map(|e| e.ok())
                .map(|e| size_of(&e.path()))
                .sum()
        })
        .unwrap_or(0)
}

fn remove(path: &Path) -> std::io::Result<()> {
    let meta = path.symlink_metadata()?;
    if meta.is_dir() {
        std::fs::remove_dir_all(path)
    } else {
        std::fs::remove_file(path)
    }
}
