//! Running one check: its run spec (the partition's data, staged or in place, and its fields in
//! the environment), on the build's executor, and its result read from its exit status and
//! report.

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;

use super::{Executor, RunOutcome, RunSpec, DEFAULT_LOG_LIMIT};
use crate::check::{CheckOutcome, CheckRun, MetricCheck};

/// Where a check runs: the instance it checks and the folders it sees.
pub struct CheckPlace<'a> {
    /// The run that built the instance (its outputs may still be staged under its id).
    pub job_run_id: &'a str,
    pub build_request_id: Option<&'a str>,
    pub graph_dir: &'a Path,
    pub data_dir: &'a Path,
    pub logs_dir: &'a Path,
    /// Where an anomaly check reads the earlier partitions' values.
    pub history: &'a dyn databuild_log::EventStore,
    /// What the run recorded of a metric (by partition ref and name): an anomaly check's value.
    pub measured: &'a dyn Fn(&str, &str) -> Option<f64>,
}

/// Where a check's log goes: beside its run's (`<run>.check-<name>.log`).
pub fn log_path(logs_dir: &Path, job_run_id: &str, name: &str) -> PathBuf {
    logs_dir.join(format!("{job_run_id}.check-{name}.log"))
}

/// The run spec of one check: its command from the graph's folder, with the partition in
/// `DATABUILD_OUTPUTS`, `DATABUILD_PARTITION` and the fields, and the path of its data (staged,
/// while the run's outputs wait for their completion to be recorded) in
/// `DATABUILD_PARTITION_PATH`.
pub fn spec(place: &CheckPlace<'_>, c: &CheckRun) -> RunSpec {
    let staged =
        crate::run::publish::staging_dir(place.data_dir, place.job_run_id).join(&c.partition_ref);
    let path = if staged.symlink_metadata().is_ok() {
        staged
    } else {
        place.data_dir.join(&c.partition_ref)
    };
    let mut env = std::collections::BTreeMap::new();
    env.insert("DATABUILD_CHECK".to_string(), c.name.clone());
    env.insert("DATABUILD_PARTITION".to_string(), c.partition_ref.clone());
    env.insert(
        "DATABUILD_PARTITION_PATH".to_string(),
        path.display().to_string(),
    );
    env.insert(
        "DATABUILD_TYPES".to_string(),
        serde_json::Value::Object(c.types.clone()).to_string(),
    );
    RunSpec {
        job_run_id: place.job_run_id.to_string(),
        build_request_id: place.build_request_id.unwrap_or_default().to_string(),
        job: format!("check-{}", c.name),
        command: c.command.clone(),
        args: Vec::new(),
        env,
        outputs: vec![c.partition_ref.clone()],
        inputs: Vec::new(),
        query_inputs: Vec::new(),
        present_inputs: Vec::new(),
        fields: c.fields.clone(),
        graph_dir: place.graph_dir.to_path_buf(),
        data_dir: place.data_dir.to_path_buf(),
        log_path: log_path(place.logs_dir, place.job_run_id, &c.name),
        timeout: c.timeout,
        log_limit: DEFAULT_LOG_LIMIT,
        cpus: None,
        mem: None,
        check: true,
    }
}

/// Runs `c` on `executor` and reads its result. `None` when it was cancelled.
pub fn run(
    executor: &dyn Executor,
    place: &CheckPlace<'_>,
    c: &CheckRun,
    cancel: &AtomicBool,
) -> Option<CheckOutcome> {
    if let Some(m) = &c.metric {
        return Some(judge_metric(place, c, m));
    }
    let spec = spec(place, c);
    if let Some(dir) = spec.log_path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    // What an earlier run of the check reported is not this one's.
    let _ = std::fs::remove_file(spec.report_path());
    let _ = std::fs::remove_file(&spec.log_path);
    let outcome = executor.run(&spec, cancel, &|_| {}).outcome;
    let report = crate::run::contract::read_report(&spec.report_path());
    let (passed, mut message) = match outcome {
        RunOutcome::Cancelled => return None,
        RunOutcome::Succeeded => (true, String::new()),
        RunOutcome::Failed { message, .. } => (false, message),
    };
    let mut metrics = None;
    match report {
        Ok(Some(r)) => {
            if let Some(m) = r.get("message").and_then(|m| m.as_str()) {
                message = m.to_string();
            }
            metrics = r.get("metrics").cloned();
        }
        Ok(None) => {}
        Err(e) if passed => return Some(outcome_of(c, false, e.to_string(), None)),
        Err(_) => {}
    }
    if !passed && message.starts_with("the job ") {
        // The executor words it for jobs: a check's exit status is its verdict.
        message = message.replacen("the job ", "the check ", 1);
    }
    Some(outcome_of(c, passed, message, metrics))
}

/// An anomaly check's result (`None` for a check that runs a command).
pub fn run_metric(place: &CheckPlace<'_>, c: &CheckRun) -> Option<CheckOutcome> {
    Some(judge_metric(place, c, c.metric.as_ref()?))
}

/// An anomaly check runs no process: the run's value against the band of the earlier
/// partitions'. A history that cannot be read fails it (the log is then unreachable, and the
/// run's completion could not be recorded either).
fn judge_metric(place: &CheckPlace<'_>, c: &CheckRun, m: &MetricCheck) -> CheckOutcome {
    let value = (place.measured)(&c.partition_ref, &m.rule.metric);
    match place.history.metric_history(&m.query(&c.partition_ref)) {
        Ok(rows) => crate::check::judge(c, m, value, &m.learn(&rows)),
        Err(e) => {
            let mut o = crate::check::judge(c, m, value, &[]);
            o.passed = false;
            o.message = format!("could not read `{}`'s history: {e}", m.rule.metric);
            o
        }
    }
}

fn outcome_of(
    c: &CheckRun,
    passed: bool,
    message: String,
    metrics: Option<serde_json::Value>,
) -> CheckOutcome {
    CheckOutcome {
        partition_ref: c.partition_ref.clone(),
        name: c.name.clone(),
        version: Some(c.version.clone()),
        command: c.command.clone(),
        blocking: c.blocking,
        passed,
        message,
        metrics,
        inline: false,
        code_versions: c.code_versions.clone(),
    }
}
