//! A run's `RunSpec`: the command, env, inputs and paths a slot starts it with, and the data
//! version its outputs record.

use std::collections::BTreeMap;
use std::path::PathBuf;

use databuild_core::{Job, PlannedRun, Producer};
use databuild_log::Status;

use super::Host;
use crate::run::{RunSpec, DEFAULT_LOG_LIMIT};

/// What a spec is made of: one attempt of a run.
pub(super) struct SpecOf<'a> {
    pub run: &'a PlannedRun,
    pub run_id: &'a str,
    pub attempt: u32,
    /// The versions of the inputs it reads, fixed by its claim: which query inputs are present.
    pub read: &'a BTreeMap<String, String>,
}

/// Where a run's log goes.
pub(super) fn log_path(engine: &dyn Host, run_id: &str) -> PathBuf {
    engine.logs_dir().join(format!("{run_id}.log"))
}

/// The env a run gets from its job and its config (not `DATABUILD_*`).
pub(super) fn env_of(job: &Job, run: &PlannedRun) -> BTreeMap<String, String> {
    let mut env = job.env.clone();
    // The real values: this env is the run's process's (and its data version's, a hash).
    env.extend(
        run.env()
            .for_process()
            .map(|(k, v)| (k.to_string(), v.to_string())),
    );
    env
}

/// The data version a run's outputs record: its job, args, env and inputs' versions.
pub(super) fn output_version(
    job: &Job,
    run: &PlannedRun,
    input_versions: &BTreeMap<String, String>,
) -> String {
    let env = env_of(job, run);
    crate::data::versions::data_version(&job.name, &job.version, run.args(), &env, input_versions)
}

/// A run's recipe as its claim records it (`run_id` and its inputs aside): what an instance
/// made the same way has (`RunRecipe::same_as`).
pub(super) fn recipe(
    graph: &databuild_core::Graph,
    run: &PlannedRun,
    code: &BTreeMap<String, String>,
    read: &BTreeMap<String, String>,
) -> databuild_log::RunRecipe {
    let job = &graph.jobs[run.job_index];
    let mut env: Vec<(String, String)> = (run.env().shown())
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    env.sort();
    let pairs =
        |m: &BTreeMap<String, String>| m.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    databuild_log::RunRecipe {
        job_run_id: String::new(),
        job: job.name.clone(),
        job_version: Some(job.version.clone()),
        inputs: Box::default(),
        input_versions: pairs(read),
        args: run.args().into(),
        env: env.into(),
        code_versions: pairs(code),
    }
}

/// A carried-forward run's report says where its partition came from, unless the run said.
pub(super) fn with_provenance(
    job: &Job,
    run: &PlannedRun,
    report: Option<serde_json::Value>,
) -> Option<serde_json::Value> {
    let Some(databuild_core::BuildReason::CarryForward(why)) = run.reasons.first() else {
        return report;
    };
    let mut r = report.unwrap_or_else(|| serde_json::json!({}));
    if r.get("provenance").is_none() {
        r["provenance"] = format!(
            "carried forward by `migrate` to version {}: {why}",
            job.version
        )
        .into();
    }
    Some(r)
}

pub(super) fn run_spec(engine: &dyn Host, build: &str, launch: &SpecOf<'_>) -> RunSpec {
    let (run, run_id) = (launch.run, launch.run_id);
    let job = &engine.graph().jobs[run.job_index];
    let mut env = env_of(job, run);
    // Not part of the data version: which attempt made a partition does not change it.
    env.insert("DATABUILD_ATTEMPT".to_string(), launch.attempt.to_string());
    let mut fields = Vec::new();
    if let [single] = run.outputs.as_slice() {
        if let Some((p, values)) = engine.graph().producer_of(single.as_str()) {
            let mut types = serde_json::Map::new();
            for ((name, ty), v) in engine.graph().pattern_of(p).fields().zip(values) {
                fields.push((name.to_string(), v.to_string()));
                types.insert(name.to_string(), ty.to_string().into());
            }
            // The fields' types, so a job can read `{date:date}` as a date (contract section 3).
            env.insert(
                "DATABUILD_TYPES".to_string(),
                serde_json::Value::Object(types).to_string(),
            );
        }
    }
    if run.is_carry_forward() {
        // Which version the partition is carried forward from, for the migrate command.
        let from = run.outputs.first().and_then(|o| {
            let events = engine
                .store()
                .events(&databuild_log::EventFilter {
                    partition_ref: Some(o.to_string()),
                    ..Default::default()
                })
                .ok()?;
            // The last run that wrote it (skipped runs only relied on it).
            events
                .iter()
                .rev()
                .filter(|e| e.status == Status::Available)
                .filter_map(|e| engine.store().job_run(e.job_run_id.as_deref()?).ok()?)
                .find(|run| run.status == Status::Completed && run.job_run_id != run_id)?
                .job_version
        });
        env.insert(
            "DATABUILD_MIGRATE_FROM_VERSION".to_string(),
            from.unwrap_or_default(),
        );
    }
    let command = match job.deps {
        _ if run.is_carry_forward() => job.migrate.clone().unwrap_or_default(),
        // Table versions are built by this very binary (`databuild table-job`).
        databuild_core::Deps::Table { .. } => std::env::current_exe()
            .map(|exe| vec![exe.display().to_string(), "table-job".to_string()])
            .unwrap_or_else(|_| job.command.clone()),
        _ => job.command.clone(),
    };
    RunSpec {
        job_run_id: run_id.to_string(),
        build_request_id: build.to_string(),
        job: job.name.clone(),
        command,
        args: run.args().to_vec(),
        env,
        outputs: run.outputs.iter().map(|o| o.to_string()).collect(),
        inputs: run.inputs.iter().map(|o| o.to_string()).collect(),
        query_inputs: run
            .query_inputs()
            .iter()
            .filter(|q| launch.read.contains_key(q.as_str()))
            .map(|q| q.to_string())
            .collect(),
        present_inputs: run
            .inputs
            .iter()
            .filter(|i| match engine.graph().producer_of(i.as_str()) {
                Some((Producer::Job { .. }, _)) => true,
                Some((Producer::Dataset(d), _)) => {
                    let ds = &engine.graph().datasets[d];
                    ds.exists.is_none() && ds.source.is_none() && ds.upstream.is_none()
                }
                _ => false,
            })
            .map(|i| i.to_string())
            .collect(),
        fields,
        graph_dir: engine.graph_dir().to_path_buf(),
        data_dir: engine.data_dir().to_path_buf(),
        log_path: log_path(engine, run_id),
        timeout: job.timeout,
        log_limit: DEFAULT_LOG_LIMIT,
        cpus: job.cpus,
        mem: job.mem.clone(),
        check: false,
    }
}
