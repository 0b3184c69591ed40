//! Environments (contract section 9): where each one's log and data are, the list of them, and
//! the instances a build in one reuses from any of them.
//!
//! An environment is a whole log of its own beside prod's ([`databuild_log::environments`]) and a
//! data dir of its own, `<data_dir>/.databuild-env/<name>/`, so its builds' claims, runs, bytes
//! and answers never touch prod's. It starts empty (or, `--from`, with another's partitions
//! linked), and a build in it links, rather than runs, every run some environment already made
//! from the same recipe: the same job, version, args, env, code and input versions.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use databuild_log::environments::PROD;
use databuild_log::{EventStore, OpenOptions, Status};

use databuild_log::RunRecipe;

use crate::run::reuse::Instance;

use super::Engine;
use crate::error::{EngineError, Result};

/// The folder of prod's data dir that holds every other environment's data.
pub const ENV_DATA: &str = ".databuild-env";

/// The folder of [`ENV_DATA`] that keeps what promotions replaced, by environment and build.
pub(crate) const REPLACED: &str = ".replaced";

/// Where environments are, for an engine in one of them.
#[derive(Clone)]
pub struct Environments {
    /// This engine's environment.
    pub current: String,
    /// Prod's log URI, and the folder its relative paths start from: every environment's log
    /// is found from it. `None`: an engine that knows no other environment (tests, tools).
    pub log: Option<(String, PathBuf, OpenOptions)>,
    /// Prod's data dir: every other environment's data is below it (hard links need one file
    /// system).
    pub prod_data_dir: PathBuf,
    /// Other environments' logs, opened once each.
    opened: Arc<Mutex<HashMap<String, Arc<dyn EventStore>>>>,
}

impl std::fmt::Debug for Environments {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Environments")
            .field("current", &self.current)
            .field("prod_data_dir", &self.prod_data_dir)
            .finish()
    }
}

impl Environments {
    /// Prod only: an engine built without knowing where other environments are.
    pub fn prod_only(data_dir: &Path) -> Environments {
        Environments {
            current: PROD.to_string(),
            log: None,
            prod_data_dir: data_dir.to_path_buf(),
            opened: Default::default(),
        }
    }

    /// Environment `current`, among those beside prod's log `uri`.
    pub fn new(
        current: &str,
        uri: &str,
        base: &Path,
        options: OpenOptions,
        prod_data_dir: &Path,
    ) -> Environments {
        Environments {
            current: current.to_string(),
            log: Some((uri.to_string(), base.to_path_buf(), options)),
            prod_data_dir: prod_data_dir.to_path_buf(),
            opened: Default::default(),
        }
    }

    pub fn is_prod(&self) -> bool {
        self.current == PROD
    }

    /// Where environment `name`'s partitions are.
    pub fn data_dir_of(&self, name: &str) -> PathBuf {
        if name == PROD {
            self.prod_data_dir.clone()
        } else {
            self.prod_data_dir.join(ENV_DATA).join(name)
        }
    }

    /// Every environment, prod first, then the others by name.
    pub fn names(&self) -> Result<Vec<String>> {
        let mut names = vec![PROD.to_string()];
        if let Some((uri, base, _)) = &self.log {
            names.extend(databuild_log::environments::list(uri, base)?);
        }
        Ok(names)
    }

    /// Environment `name`'s log (`create`: made if it does not exist).
    pub fn open(&self, name: &str, create: bool) -> Result<Arc<dyn EventStore>> {
        let mut opened = self.opened.lock().expect("environments lock");
        if let Some(store) = opened.get(name) {
            return Ok(store.clone());
        }
        let Some((uri, base, options)) = &self.log else {
            return Err(EngineError::Invalid(format!(
                "this engine knows no environment but `{}`",
                self.current
            )));
        };
        let store: Arc<dyn EventStore> =
            databuild_log::open_environment(uri, base, options, name, create)?.into();
        opened.insert(name.to_string(), store.clone());
        Ok(store)
    }

    /// Forgets an environment's opened log (it was dropped).
    pub(crate) fn forget(&self, name: &str) {
        self.opened.lock().expect("environments lock").remove(name);
    }
}

impl Engine {
    /// The instance of `outputs` some other environment made from `recipe`, if one is live
    /// there now: prod's first, then the others' by name.
    pub(crate) fn find_instance(&self, outputs: &[String], recipe: &RunRecipe) -> Option<Instance> {
        let envs = &self.environments;
        let names = envs.names().ok()?;
        names
            .iter()
            .filter(|name| **name != envs.current)
            .find_map(|name| {
                let store = envs.open(name, false).ok()?;
                instance_in(store.as_ref(), outputs, recipe).map(|(run, versions)| Instance {
                    from: databuild_log::ReusedFrom {
                        environment: name.clone(),
                        job_run_id: run,
                    },
                    paths: (outputs.iter())
                        .map(|o| envs.data_dir_of(name).join(o))
                        .collect(),
                    versions,
                })
            })
    }
}

/// In one log: the live instance of all of `outputs`, made by one run from `recipe`, with its
/// outputs' versions.
fn instance_in(
    store: &dyn EventStore,
    outputs: &[String],
    recipe: &RunRecipe,
) -> Option<(String, Vec<String>)> {
    let refs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    let rows = store.partitions_by_ref(&refs).ok()?;
    let run = rows.first()?.job_run_id.clone()?;
    let mut versions = Vec::with_capacity(outputs.len());
    for output in outputs {
        let row = rows.iter().find(|r| r.partition_ref == *output)?;
        if row.status != Status::Available || row.job_run_id.as_deref() != Some(run.as_str()) {
            return None;
        }
        versions.push(row.data_version.clone()?);
    }
    let made = store.run_recipes(&[run.as_str()]).ok()?;
    made.first().filter(|m| recipe.same_as(m))?;
    Some((run, versions))
}

impl Engine {
    /// Every environment, prod first.
    pub fn environments(&self) -> Result<crate::answers::EnvironmentList> {
        let made = self.environment_events()?;
        let mut environments = Vec::new();
        for name in self.environments.names()? {
            let store = self.store_of(&name)?;
            let created = made.iter().rev().find(|e| {
                e.status == Status::Created && e.data.environment.as_deref() == Some(&name)
            });
            let last_change = store
                .events(&databuild_log::EventFilter {
                    kind: Some(databuild_log::Kind::Environment),
                    ..Default::default()
                })?
                .into_iter()
                .rev()
                .find(|e| matches!(e.status, Status::Promoted | Status::RolledBack))
                .and_then(|e| e.build_request_id);
            environments.push(crate::answers::EnvironmentView {
                from: created.and_then(|e| e.data.from_environment.clone()),
                created_at: created.map(|e| e.timestamp),
                data_dir: self.environments.data_dir_of(&name).display().to_string(),
                available: store
                    .partition_counts(None)?
                    .get(&Status::Available)
                    .copied()
                    .unwrap_or(0),
                last_change,
                name,
            });
        }
        Ok(crate::answers::EnvironmentList { environments })
    }

    /// Makes environment `name`: empty, or (`from`) with every live partition of `from` linked.
    pub fn create_environment(
        &self,
        name: &str,
        from: Option<&str>,
    ) -> Result<crate::answers::EnvironmentView> {
        databuild_log::environments::check_name(name).map_err(EngineError::Invalid)?;
        if name == PROD || self.environments.names()?.iter().any(|n| n == name) {
            return Err(EngineError::Conflict(format!(
                "environment `{name}` already exists; `databuild env drop {name}` removes it"
            )));
        }
        if let Some(from) = from {
            self.store_of(from)?;
        }
        let store = self.environments.open(name, true)?;
        // It reads every table as its origin does (prod, unless `from`): aliases are pins.
        let origin = self.store_of(from.unwrap_or(PROD))?;
        let pins: Vec<databuild_log::Event> = (self.aliases_in(origin.as_ref())?.into_iter())
            .filter(|(table, v)| {
                self.graph
                    .table(table)
                    .is_some_and(|t| t.initial_version() != *v)
            })
            .map(|(table, v)| databuild_log::Event::alias(&table, v))
            .collect();
        if !pins.is_empty() {
            store.append(pins)?;
        }
        let data_dir = self.environments.data_dir_of(name);
        std::fs::create_dir_all(&data_dir).map_err(|e| {
            EngineError::Invalid(format!("cannot create `{}`: {e}", data_dir.display()))
        })?;
        let created = databuild_log::Event::environment(name, Status::Created)
            .with_data(|d| d.from_environment = from.map(str::to_string));
        self.prod_store()?.append(vec![created])?;
        if let Some(from) = from {
            self.promote_environment(from, name)?;
        }
        self.environments()?
            .environments
            .into_iter()
            .find(|e| e.name == name)
            .ok_or_else(|| EngineError::NotFound(format!("environment `{name}`")))
    }

    /// Drops environment `name`: its log and its links. Bytes another environment links stay.
    pub fn drop_environment(&self, name: &str) -> Result<()> {
        if name == PROD {
            return Err(EngineError::Invalid(
                "prod cannot be dropped; drop the environments made beside it".to_string(),
            ));
        }
        let store = self.store_of(name)?;
        let running = store.build_requests(&databuild_log::BuildQuery {
            unfinished: true,
            limit: 1,
            ..Default::default()
        })?;
        if let Some(build) = running.first() {
            return Err(EngineError::Conflict(format!(
                "environment `{name}` has a build running ({}); cancel it or wait for it to end",
                build.build_request_id
            )));
        }
        drop(store);
        let Some((uri, base, _)) = &self.environments.log else {
            return Err(EngineError::Invalid("no environments here".to_string()));
        };
        self.prod_store()?
            .append(vec![databuild_log::Event::environment(
                name,
                Status::Dropped,
            )])?;
        self.environments.forget(name);
        databuild_log::environments::EnvLog::of(uri, base, name)?.remove()?;
        let replaced = (self.environments.data_dir_of(PROD))
            .join(ENV_DATA)
            .join(REPLACED)
            .join(name);
        let _ = std::fs::remove_dir_all(replaced);
        let data_dir = self.environments.data_dir_of(name);
        match std::fs::remove_dir_all(&data_dir) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                Err(EngineError::Invalid(format!(
                    "dropped, but `{}` could not be removed: {e}",
                    data_dir.display()
                )))
            }
            _ => Ok(()),
        }
    }

    fn prod_store(&self) -> Result<Arc<dyn EventStore>> {
        self.store_of(PROD)
    }

    /// Prod's events about environments (`created`, `dropped`), oldest first.
    fn environment_events(&self) -> Result<Vec<databuild_log::Event>> {
        Ok(self.prod_store()?.events(&databuild_log::EventFilter {
            kind: Some(databuild_log::Kind::Environment),
            ..Default::default()
        })?)
    }
}

impl Engine {
    /// This engine's graph and settings in environment `name` (which must exist): its log, its
    /// data dir.
    pub fn in_environment(&self, name: &str) -> Result<Engine> {
        let store = self.store_of(name)?;
        let mut environments = self.environments.clone();
        environments.current = name.to_string();
        let mut engine = Engine::new(
            self.graph.clone(),
            self.graph_dir.clone(),
            environments.data_dir_of(name),
            store,
            self.config.clone(),
        )
        .with_environments(environments);
        engine.graph_digest = self.graph_digest.clone();
        engine.link_external_folders();
        Ok(engine)
    }

    /// In an environment other than prod: each external dataset's folder (files DataBuild does
    /// not make, read where they land) is a link to prod's, so planning finds them and jobs read
    /// them at `DATABUILD_DATA_DIR` as in prod. Not a folder some job also writes in: the link
    /// would take that job's outputs to prod.
    fn link_external_folders(&self) {
        if self.environments.is_prod() {
            return;
        }
        let job_prefixes: Vec<&str> = (self.graph.jobs.iter())
            .flat_map(|j| j.outputs.iter().map(|p| folder_of(p.literal_prefix())))
            .collect();
        for dataset in &self.graph.datasets {
            // Upstream datasets are another service's; the rest are files here (a probe, too,
            // says whether one is there: jobs still read it from the data dir).
            if dataset.upstream.is_some() {
                continue;
            }
            let folder = folder_of(dataset.pattern.literal_prefix());
            let shared = job_prefixes
                .iter()
                .any(|j| within(j, folder) || within(folder, j));
            if folder.is_empty() || shared {
                continue;
            }
            let (link, prod) = (
                self.data_dir.join(folder),
                self.environments.prod_data_dir.join(folder),
            );
            if link.symlink_metadata().is_ok() {
                continue;
            }
            if let Some(parent) = link.parent() {
                let _ = std::fs::create_dir_all(parent);
            }
            let _ = std::fs::create_dir_all(&prod);
            // A link already there, or a race with another process making it: either way one.
            let _ = std::os::unix::fs::symlink(&prod, &link);
        }
    }
}

/// Whether folder `inner` is `outer` or below it (`""` holds every folder).
fn within(inner: &str, outer: &str) -> bool {
    outer.is_empty()
        || inner == outer
        || inner
            .strip_prefix(outer)
            .is_some_and(|rest| rest.starts_with('/'))
}

/// The folder part of a pattern's literal prefix (`raw/reviews/date=` → `raw/reviews`).
fn folder_of(prefix: &str) -> &str {
    prefix.rfind('/').map_or("", |i| &prefix[..i])
}
