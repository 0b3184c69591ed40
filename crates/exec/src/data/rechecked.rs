//! Live partitions of config jobs, re-checked against what their config says now.
//!
//! A config executable chooses a run's inputs, args and env; the run records its choice
//! (`job_runs.inputs`, `args`, `env`). A live partition whose config now chooses differently is
//! stale: planning asks the config about live partitions too (in its one call per job and round)
//! and compares through [`config_change`]; `status` does the same with one call per job.

use databuild_core::graph::REDACTED;
use databuild_core::{BuiltWith, Graph, Job, JobConfig, KnownState, StateError, StateView};
use databuild_log::EventStore;

use crate::data::versions::{data_version, VersionedStates};

/// The planner's view of partition states ([`VersionedStates`]), comparing configs too.
pub struct Rechecked<'a> {
    versions: VersionedStates<'a>,
    graph: &'a Graph,
    store: &'a dyn EventStore,
}

impl<'a> Rechecked<'a> {
    /// The log's error, if a read failed while planning.
    pub fn take_failure(&self) -> Option<databuild_log::LogError> {
        self.versions.take_failure()
    }

    pub fn new(versions: VersionedStates<'a>, graph: &'a Graph, store: &'a dyn EventStore) -> Self {
        Rechecked {
            versions,
            graph,
            store,
        }
    }
}

impl StateView for Rechecked<'_> {
    fn state(&self, r: &str) -> Result<KnownState, StateError> {
        self.versions.state(r)
    }

    fn states(&self, refs: &[&str]) -> Result<Vec<KnownState>, StateError> {
        self.versions.states(refs)
    }

    fn promoted(&self, table: &str) -> Option<u32> {
        self.versions.promoted(table)
    }

    fn checks_configs(&self) -> bool {
        true
    }

    // A read that fails is remembered with the states' failure: planning then ends with it.
    fn config_change(&self, r: &str, job: &Job, config: &JobConfig) -> Option<String> {
        self.versions
            .noted(config_change(self.graph, self.store, r, job, config))
            .flatten()
    }
}

/// How `config` (what `job`'s config says about `r` now, aliases read as version refs) differs
/// from what the run that built `r` recorded; `None` if it does not, or if the log does not say
/// what built it. Inputs, args, env names and the env values the log shows are compared as
/// recorded; values it redacts only entered the run's recipe (recorded with its completion), so
/// that is recomputed with the config's values when there are any.
pub fn config_change(
    graph: &Graph,
    store: &dyn EventStore,
    r: &str,
    job: &Job,
    config: &JobConfig,
) -> databuild_log::Result<Option<String>> {
    let Some(row) = store.partition(r)? else {
        return Ok(None);
    };
    let Some(run) = (match row.job_run_id.as_deref() {
        Some(id) => store.job_run(id)?,
        None => None,
    }) else {
        return Ok(None);
    };
    let built = BuiltWith {
        inputs: run.inputs,
        args: run.args,
        env: run.env,
    };
    if let Some(why) = databuild_core::config_change(graph, &built, config) {
        return Ok(Some(why));
    }
    let hidden: Vec<String> = config
        .env
        .iter()
        .filter(|(k, v)| graph.recorded_env_value(k, v) == REDACTED)
        .map(|(k, _)| format!("`{k}`"))
        .collect();
    if hidden.is_empty() {
        return Ok(None);
    }
    let mut env = job.env.clone();
    env.extend(config.env.clone());
    let now = data_version(
        &job.name,
        &job.version,
        &config.args,
        &env,
        &run.input_versions,
    );
    // The recipe the run recorded with its completion; a log written before content versions
    // has it as the partition's data version.
    let completed = store.events(&databuild_log::EventFilter {
        job_run_id: Some(run.job_run_id.clone()),
        kind: Some(databuild_log::Kind::JobRun),
        status: Some(databuild_log::Status::Completed),
        ..Default::default()
    })?;
    let recipe = match completed.into_iter().find_map(|e| e.data.data_version) {
        Some(recipe) => Some(recipe),
        None => row.data_version,
    };
    Ok((Some(&now) != recipe.as_ref()).then(|| {
        format!(
            "the env its config gives now differs from the run that built it ({} not recorded: not in `show_env`)",
            hidden.join(", ")
        )
    }))
}
