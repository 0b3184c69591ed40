//! Promotion and rollback: an environment takes another's partitions, in one append (its
//! answers flip together), then one atomic swap per partition on disk (readers see the old or the
//! new partition, never neither). No job runs: each partition is taken by a run recorded as
//! reused from the run that made it. What a promotion replaced is kept, so that `rollback`
//! takes it back the same way.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use databuild_log::{
    Event, EventFilter, EventStore, JobRunRow, Kind, PartitionQuery, ReusedFrom, RunRecipe, Status,
};

use super::environments::{ENV_DATA, REPLACED};
use super::Engine;
use crate::answers::{ChangeKind, EnvironmentChange};
use crate::error::{EngineError, Result};
use crate::run::owner::this_owner;

/// Live partitions of the source read per page while gathering what differs.
const PAGE: usize = 5_000;

/// One partition-making run the target takes: the source run, its outputs to take, and where
/// their bytes are now.
pub(super) struct Take {
    pub from: ReusedFrom,
    pub run: JobRunRow,
    /// (output ref, the source's bytes, its data version when known)
    pub outputs: Vec<(String, PathBuf, Option<String>)>,
}

impl Take {
    /// Run `run` of environment `env`, none of its outputs taken yet.
    fn of(env: &str, run: JobRunRow) -> Take {
        let from = ReusedFrom {
            environment: env.to_string(),
            job_run_id: run.job_run_id.clone(),
        };
        Take {
            from,
            run,
            outputs: Vec::new(),
        }
    }
}

/// What a promotion or rollback changes in the target.
#[derive(Default)]
pub(super) struct Change {
    pub takes: Vec<Take>,
    /// Partitions that go: they did not exist before the promotion a rollback undoes.
    removes: Vec<String>,
    /// Tables whose alias moves, from one version to another: what the target reads of a
    /// table moves with the partitions it takes.
    pub aliases: Vec<AliasMove>,
}

/// A table's alias moved by a promotion or rollback.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(super) struct AliasMove {
    pub table: String,
    pub from: u32,
    pub to: u32,
}

impl Change {
    fn is_empty(&self) -> bool {
        self.takes.is_empty() && self.removes.is_empty() && self.aliases.is_empty()
    }
}

impl Engine {
    /// Environment `name`'s log: this engine's own, or another's.
    pub(crate) fn store_of(&self, name: &str) -> Result<Arc<dyn EventStore>> {
        if name == self.environments.current {
            return Ok(self.store.clone());
        }
        self.environments.open(name, false)
    }

    /// `to` takes every live partition of `from` that it does not have as `from` has it (its
    /// data version, or the recipe that made it): one recorded step, no job run.
    pub fn promote_environment(&self, from: &str, to: &str) -> Result<EnvironmentChange> {
        if from == to {
            return Err(EngineError::Invalid(format!(
                "cannot promote environment `{from}` to itself; name another with --to"
            )));
        }
        let (source, target) = (self.store_of(from)?, self.store_of(to)?);
        self.finish_last_change(to, target.as_ref())?;
        let change = self.differences(source.as_ref(), target.as_ref(), from, to)?;
        let event = Event::environment(to, Status::Promoted)
            .with_data(|d| d.from_environment = Some(from.to_string()));
        self.apply(to, target.as_ref(), change, event, ChangeKind::Promote)
    }

    /// Undoes `env`'s last promotion (or rollback): each partition it changed goes back to the
    /// instance it replaced, kept since, or goes if it had none.
    pub fn rollback_environment(&self, env: &str) -> Result<EnvironmentChange> {
        let target = self.store_of(env)?;
        self.finish_last_change(env, target.as_ref())?;
        let last = last_change(target.as_ref())?.ok_or_else(|| {
            EngineError::Invalid(format!(
                "environment `{env}` has no promotion to roll back; `databuild env promote NAME --to {env}` makes one"
            ))
        })?;
        let change = self.replaced_by(env, target.as_ref(), &last)?;
        let event = Event::environment(env, Status::RolledBack)
            .with_data(|d| d.from_environment = Some(env.to_string()))
            .with_message(format!("rolled back {}", last.build));
        self.apply(env, target.as_ref(), change, event, ChangeKind::Rollback)
    }

    /// Where a promotion into `env` keeps what it replaced.
    fn kept_dir(&self, env: &str, promotion: &str) -> PathBuf {
        let prod = &self.environments.prod_data_dir;
        prod.join(ENV_DATA).join(REPLACED).join(env).join(promotion)
    }

    /// The live partitions of `source` that `target` does not have as `source` has them.
    ///
    /// Not what `source` took from `target` itself (reused from it): `target` may have moved on
    /// since, and a promotion never takes `target` back to its own older data. Not a partition
    /// tainted in `target` whose bytes `source` has too: a promotion does not lift a taint.
    pub(super) fn differences(
        &self,
        source: &dyn EventStore,
        target: &dyn EventStore,
        from: &str,
        to: &str,
    ) -> Result<Change> {
        let from_dir = self.environments.data_dir_of(from);
        let mut runs: BTreeMap<String, Take> = BTreeMap::new();
        let mut after = None;
        loop {
            let page = source.partitions(&PartitionQuery {
                status: Some(Status::Available),
                limit: PAGE,
                after: after.clone(),
                ..Default::default()
            })?;
            let Some(last) = page.last() else { break };
            after = Some(last.partition_ref.clone());
            let refs: Vec<&str> = page.iter().map(|p| p.partition_ref.as_str()).collect();
            let theirs: HashMap<String, _> = target
                .partitions_by_ref(&refs)?
                .into_iter()
                .map(|p| (p.partition_ref.clone(), p))
                .collect();
            // How the runs of both sides were made, read once per page, not per partition.
            let (ours, their_runs): (Vec<&str>, Vec<&str>) = (page.iter())
                .filter_map(|p| {
                    let t = theirs.get(&p.partition_ref)?;
                    Some((p.job_run_id.as_deref()?, t.job_run_id.as_deref()?))
                })
                .unzip();
            let (ours, their_runs) = (recipes(source, &ours)?, recipes(target, &their_runs)?);
            let same_recipe = |a: &str, b: Option<&str>| {
                let (Some(a), Some(b)) = (ours.get(a), b.and_then(|b| their_runs.get(b))) else {
                    return false;
                };
                a.same_as(b)
            };
            for p in &page {
                let Some(run_id) = &p.job_run_id else {
                    continue;
                };
                let same = theirs.get(&p.partition_ref).is_some_and(|t| {
                    let same_bytes = t.data_version == p.data_version;
                    (t.status == Status::Tainted && same_bytes)
                        || (t.status == Status::Available
                            && same_bytes
                            && same_recipe(run_id, t.job_run_id.as_deref()))
                });
                if same {
                    continue;
                }
                if !runs.contains_key(run_id) {
                    let Some(run) = source.job_run(run_id)? else {
                        continue;
                    };
                    let taken = ReusedFrom::of_message(run.message.as_deref());
                    if taken.is_some_and(|t| t.environment == to) {
                        continue;
                    }
                    runs.insert(run_id.clone(), Take::of(from, run));
                }
                let take = runs.get_mut(run_id).expect("inserted");
                take.outputs.push((
                    p.partition_ref.clone(),
                    from_dir.join(&p.partition_ref),
                    p.data_version.clone(),
                ));
            }
            if page.len() < PAGE {
                break;
            }
        }
        Ok(Change {
            takes: runs.into_values().collect(),
            removes: Vec::new(),
            aliases: self.alias_moves(source, target)?,
        })
    }

    /// Every table's alias as `store` has it: its promoted version, or the table's first.
    pub(super) fn aliases_in(&self, store: &dyn EventStore) -> Result<BTreeMap<String, u32>> {
        let promoted = crate::data::versions::promotions(store)?;
        Ok((self.graph.tables.iter())
            .map(|t| {
                let version = promoted.get(&t.name).copied();
                (
                    t.name.clone(),
                    version.unwrap_or_else(|| t.initial_version()),
                )
            })
            .collect())
    }

    /// The aliases `target` reads otherwise than `source`, moved to `source`'s.
    fn alias_moves(
        &self,
        source: &dyn EventStore,
        target: &dyn EventStore,
    ) -> Result<Vec<AliasMove>> {
        let theirs = self.aliases_in(target)?;
        Ok((self.aliases_in(source)?.into_iter())
            .filter_map(|(table, to)| {
                let from = *theirs.get(&table)?;
                (from != to).then_some(AliasMove { table, from, to })
            })
            .collect())
    }

    /// What promotion (or rollback) `build` into `env` replaced: each partition's instance
    /// before it, read from its claims (`claim_after`), with the bytes kept since.
    fn replaced_by(&self, env: &str, target: &dyn EventStore, last: &LastChange) -> Result<Change> {
        let build = last.build.as_str();
        let kept = self.kept_dir(env, build);
        let claims = target.events(&EventFilter {
            build_request_id: Some(build.to_string()),
            kind: Some(Kind::Partition),
            status: Some(Status::Building),
            ..Default::default()
        })?;
        // What it claimed, with the run each held before; what it removed (a rollback of
        // partitions the promotion it undid had added), with the run that held it then.
        let mut before: Vec<(String, Option<String>)> = (claims.into_iter())
            .filter_map(|c| Some((c.partition_ref?, c.data.claim_after)))
            .collect();
        let removed = target
            .partitions_by_ref(&last.removed.iter().map(String::as_str).collect::<Vec<_>>())?;
        before.extend(removed.into_iter().map(|p| (p.partition_ref, p.job_run_id)));
        let mut change = Change::default();
        let mut runs: BTreeMap<String, Take> = BTreeMap::new();
        for (r, held) in before {
            // Nothing held it, or nothing of it was kept (it had failed): it goes.
            let held =
                held.filter(|run| !run.is_empty() && kept.join(&r).symlink_metadata().is_ok());
            match held {
                None => change.removes.push(r),
                Some(run_id) => {
                    if !runs.contains_key(&run_id) {
                        let run = target.job_run(&run_id)?.ok_or_else(|| {
                            EngineError::Invalid(format!(
                                "cannot roll back {build}: the run {run_id} it replaced is not in the log"
                            ))
                        })?;
                        runs.insert(run_id.clone(), Take::of(env, run));
                    }
                    let bytes = kept.join(&r);
                    runs.get_mut(&run_id)
                        .expect("inserted")
                        .outputs
                        .push((r, bytes, None));
                }
            }
        }
        change.takes = runs.into_values().collect();
        change.aliases = (last.aliases.iter())
            .map(|m| AliasMove {
                table: m.table.clone(),
                from: m.to,
                to: m.from,
            })
            .collect();
        Ok(change)
    }

    /// Records `change` in `env`'s log in one append, then moves the bytes into place.
    fn apply(
        &self,
        env: &str,
        target: &dyn EventStore,
        change: Change,
        event: Event,
        kind: ChangeKind,
    ) -> Result<EnvironmentChange> {
        let started = std::time::Instant::now();
        if change.is_empty() {
            // Nothing to take: nothing recorded, so `rollback` still undoes the last real change.
            return Ok(EnvironmentChange {
                aliases: 0,
                kind,
                build_request_id: None,
                environment: env.to_string(),
                partitions: 0,
                removed: 0,
                runs: 0,
                elapsed_ms: started.elapsed().as_millis() as u64,
            });
        }
        let id = databuild_log::event::new_id();
        let data_dir = self.environments.data_dir_of(env);
        let staging = crate::run::publish::staging_dir(&data_dir, &id);
        let mut event = event;
        event.data.requested = change.removes.clone();
        let logs = self.logs_dir();
        let outcome = self.stage(&change, &staging).and_then(|versions| {
            let events = promotion_events(target, &id, &change, versions, event, &logs)?;
            write_run_logs(&events);
            target.append(events)?;
            Ok(())
        });
        if let Err(e) = outcome {
            crate::run::publish::discard_staged(&staging);
            return Err(e);
        }
        let outputs: Vec<String> = (change.takes.iter())
            .flat_map(|t| t.outputs.iter().map(|(r, _, _)| r.clone()))
            .collect();
        self.move_into_place(env, &id, &outputs, &change.removes)?;
        Ok(EnvironmentChange {
            aliases: change.aliases.len() as u64,
            kind,
            build_request_id: Some(id),
            environment: env.to_string(),
            partitions: outputs.len() as u64,
            removed: change.removes.len() as u64,
            runs: change.takes.len() as u64,
            elapsed_ms: started.elapsed().as_millis() as u64,
        })
    }

    /// Moves a recorded change's staged partitions into place in `env`'s data dir (what they
    /// replace kept for its rollback) and what it removes aside. Done again, it finishes what
    /// is left: moved outputs are no longer staged.
    fn move_into_place(
        &self,
        env: &str,
        id: &str,
        outputs: &[String],
        removes: &[String],
    ) -> Result<()> {
        let data_dir = self.environments.data_dir_of(env);
        let (staging, kept) = (
            crate::run::publish::staging_dir(&data_dir, id),
            self.kept_dir(env, id),
        );
        let io = |e: std::io::Error| {
            EngineError::Invalid(format!(
                "change {id} of environment `{env}` is recorded, but its data could not all be moved into `{}`: {e}; once that is fixed, `databuild env promote` or `env rollback` of `{env}` finishes it first",
                data_dir.display()
            ))
        };
        let outputs: Vec<databuild_core::PartitionRef> = (outputs.iter())
            .filter_map(|r| databuild_core::PartitionRef::new(r).ok())
            .collect();
        crate::run::publish::publish_keeping(&data_dir, &staging, &outputs, &kept).map_err(io)?;
        for r in removes {
            if kept.join(r).symlink_metadata().is_err() {
                move_aside(&data_dir.join(r), &kept.join(r)).map_err(io)?;
            }
        }
        Ok(())
    }

    /// Finishes moving `env`'s last recorded change into place, if it was cut short.
    fn finish_last_change(&self, env: &str, target: &dyn EventStore) -> Result<()> {
        let Some(last) = last_change(target)? else {
            return Ok(());
        };
        let data_dir = self.environments.data_dir_of(env);
        if !crate::run::publish::staging_dir(&data_dir, &last.build).exists() {
            return Ok(());
        }
        let outputs: Vec<String> = (target.events(&EventFilter {
            build_request_id: Some(last.build.clone()),
            kind: Some(Kind::Partition),
            status: Some(Status::Available),
            ..Default::default()
        })?)
        .into_iter()
        .filter_map(|e| e.partition_ref)
        .collect();
        self.move_into_place(env, &last.build, &outputs, &last.removed)
    }

    /// Links every partition a change takes into `staging`, and gives each one's version: the
    /// one recorded, or (bytes kept by a promotion) the hash of its content.
    fn stage(&self, change: &Change, staging: &Path) -> Result<Vec<Vec<String>>> {
        let mut versions = Vec::with_capacity(change.takes.len());
        for take in &change.takes {
            let mut of_run = Vec::with_capacity(take.outputs.len());
            for (r, bytes, version) in &take.outputs {
                if bytes.symlink_metadata().is_err() {
                    return Err(EngineError::Invalid(format!(
                        "cannot take `{r}` from environment `{}`: its data is gone from `{}`",
                        take.from.environment,
                        bytes.display()
                    )));
                }
                crate::run::link::link_tree(bytes, &staging.join(r)).map_err(|e| {
                    EngineError::Invalid(format!("cannot link `{}`: {e}", bytes.display()))
                })?;
                of_run.push(match version {
                    Some(v) => v.clone(),
                    None => crate::run::publish::content_version(&staging.join(r))
                        .map_err(|e| EngineError::Invalid(format!("cannot hash `{r}`: {e}")))?,
                });
            }
            versions.push(of_run);
        }
        Ok(versions)
    }
}

/// The recipes of `runs` in `store`, by run.
fn recipes(store: &dyn EventStore, runs: &[&str]) -> Result<HashMap<String, RunRecipe>> {
    Ok(store
        .run_recipes(runs)?
        .into_iter()
        .map(|r| (r.job_run_id.clone(), r))
        .collect())
}

/// The events of a promotion: a build request whose every run is reused, in one append.
fn promotion_events(
    target: &dyn EventStore,
    id: &str,
    change: &Change,
    versions: Vec<Vec<String>>,
    environment: Event,
    logs: &Path,
) -> Result<Vec<Event>> {
    let refs: Vec<&str> = change
        .takes
        .iter()
        .flat_map(|t| t.outputs.iter().map(|(r, _, _)| r.as_str()))
        .chain(change.removes.iter().map(String::as_str))
        .collect();
    let rows = target.partitions_by_ref(&refs)?;
    if let Some(p) = rows.iter().find(|p| p.status == Status::Building) {
        return Err(EngineError::Conflict(format!(
            "`{}` is being built there; promote once its build ends",
            p.partition_ref
        )));
    }
    // Each claim is made against the run that holds the partition now (compare-and-swap).
    let held: HashMap<String, String> = (rows.into_iter())
        .map(|p| (p.partition_ref, p.job_run_id.unwrap_or_default()))
        .collect();
    let owner = this_owner();
    let mut events = vec![
        Event::build_request(id, Status::Received).with_data(|d| {
            d.requested = refs.iter().map(|r| r.to_string()).collect();
            d.owner = Some(owner.clone());
        }),
        Event::build_request(id, Status::Planning),
        Event::build_request(id, Status::AnalysisCompleted)
            .with_data(|d| d.planned_runs = Some(change.takes.len() as u64)),
        Event::build_request(id, Status::Executing),
    ];
    for (take, versions) in change.takes.iter().zip(versions) {
        let run_id = databuild_log::event::new_id();
        let source = &take.run;
        let outputs: Vec<String> = take.outputs.iter().map(|(r, _, _)| r.clone()).collect();
        events.push(
            Event::job_run(id, &run_id, &source.job, Status::Scheduled).with_data(|d| {
                d.outputs = outputs.clone();
                d.inputs = source.inputs.clone();
                d.args = source.args.clone();
                d.env = source.env.clone();
                d.job_version = source.job_version.clone();
            }),
        );
        events.push(
            Event::job_run(id, &run_id, &source.job, Status::Queued).with_data(|d| {
                d.owner = Some(owner.clone());
                d.pid = Some(std::process::id());
                d.host = crate::run::owner::hostname();
                d.input_versions = source.input_versions.clone();
                d.code_versions = source.code_versions.clone();
                d.log_path = Some(logs.join(format!("{run_id}.log")).display().to_string());
            }),
        );
        for r in &outputs {
            let claim = held.get(r).cloned().unwrap_or_default();
            events.push(with_job(
                Event::partition(Some(id), r, Status::Scheduled).with_run(&run_id),
                &source.job,
            ));
            events.push(with_job(
                Event::partition(Some(id), r, Status::Building)
                    .with_run(&run_id)
                    .with_data(|d| d.claim_after = Some(claim)),
                &source.job,
            ));
        }
        events.push(Event::job_run(id, &run_id, &source.job, Status::Running));
        let message = take.from.message();
        events.push(
            Event::job_run(id, &run_id, &source.job, Status::Completed)
                .with_message(&message)
                .with_data(|d| {
                    d.exit_code = Some(0);
                    d.outputs = outputs.clone();
                    d.reused_from = Some(take.from.clone());
                }),
        );
        for (r, version) in outputs.iter().zip(versions) {
            events.push(with_job(
                Event::partition(Some(id), r, Status::Available)
                    .with_run(&run_id)
                    .with_message(&message)
                    .with_data(|d| d.data_version = Some(version)),
                &source.job,
            ));
        }
    }
    for r in &change.removes {
        events.push(
            Event::partition(None, r, Status::Removed)
                .with_message(format!("rolled back by {id}: it did not exist before")),
        );
    }
    for m in &change.aliases {
        events.push(
            Event::alias(&m.table, m.to)
                .with_message(format!("moved by {id} with the partitions it took")),
        );
    }
    events.push(Event::build_request(id, Status::Completed));
    let mut environment = environment;
    environment.build_request_id = Some(id.to_string());
    environment.data.report = Some(serde_json::json!({
        "partitions": refs.len() - change.removes.len(),
        "removed": change.removes.len(),
        "runs": change.takes.len(),
        "aliases": change.aliases,
    }));
    events.push(environment);
    Ok(events)
}

/// Each reused run's log says whose instance it took (so `logs REF` answers), from its claim's
/// `log_path` and its completion's message.
fn write_run_logs(events: &[Event]) {
    let mut paths: HashMap<&str, &str> = HashMap::new();
    for e in events.iter().filter(|e| e.kind == Kind::JobRun) {
        match (e.status, e.job_run_id.as_deref()) {
            (Status::Queued, Some(run)) => {
                if let Some(path) = e.data.log_path.as_deref() {
                    paths.insert(run, path);
                }
            }
            (Status::Completed, Some(run)) => {
                if let (Some(path), Some(message)) = (paths.get(run), e.message.as_deref()) {
                    let path = Path::new(path);
                    if let Some(dir) = path.parent() {
                        let _ = std::fs::create_dir_all(dir);
                    }
                    // A log is for people; a run whose log could not be written still took.
                    let _ = std::fs::write(path, format!("{message}\n"));
                }
            }
            _ => {}
        }
    }
}

fn with_job(mut e: Event, job: &str) -> Event {
    e.job = Some(job.to_string());
    e
}

/// An environment's last promotion or rollback: the build that recorded it, and the partitions
/// it removed.
struct LastChange {
    build: String,
    removed: Vec<String>,
    aliases: Vec<AliasMove>,
}

fn last_change(target: &dyn EventStore) -> Result<Option<LastChange>> {
    let events = target.events(&EventFilter {
        kind: Some(Kind::Environment),
        ..Default::default()
    })?;
    Ok(events
        .into_iter()
        .rev()
        .find(|e| matches!(e.status, Status::Promoted | Status::RolledBack))
        .and_then(|e| {
            let aliases = (e.data.report.as_ref())
                .and_then(|r| serde_json::from_value(r.get("aliases")?.clone()).ok())
                .unwrap_or_default();
            Some(LastChange {
                build: e.build_request_id?,
                removed: e.data.requested,
                aliases,
            })
        }))
}

/// Moves `path` (a partition a rollback removes) to `kept`, if it is there.
fn move_aside(path: &Path, kept: &Path) -> std::io::Result<()> {
    if path.symlink_metadata().is_err() {
        return Ok(());
    }
    if let Some(parent) = kept.parent() {
        std::fs::create_dir_all(parent)?;
    }
    std::fs::rename(path, kept)
}
