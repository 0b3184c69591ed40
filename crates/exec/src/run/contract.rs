//! What a job is given and may give back (contract section 3): its environment (`DATABUILD_*`,
//! long lists of refs in files), its report (`DATABUILD_REPORT`) and the missing inputs it names
//! in its log (`DATABUILD_MISSING_DEPS`). Shared by every executor.

use std::path::{Path, PathBuf};

use super::watchdog::watch_token;
use super::RunSpec;

/// The most a run's report may hold.
pub const REPORT_LIMIT: u64 = 64 * 1024;

/// Why what a run reported (`DATABUILD_REPORT`) is refused: the run then fails with this message.
#[derive(Debug, thiserror::Error)]
pub enum ReportError {
    #[error("its report (DATABUILD_REPORT) is larger than {REPORT_LIMIT} bytes")]
    TooLarge,
    /// The cause is part of the message, so not also a `source` (`{:#}` would print it twice).
    #[error("its report cannot be read: {0}")]
    Unreadable(std::io::Error),
    #[error("its report (DATABUILD_REPORT) is not a JSON object")]
    NotAnObject,
}

/// A run's message: the scheduler fails a run with it (`RunOutcome::failed` takes the text).
impl From<ReportError> for String {
    fn from(e: ReportError) -> String {
        e.to_string()
    }
}

/// Reads what a run reported: `Ok(None)` if it wrote nothing, an error naming the problem if it
/// wrote something that is not a small JSON object.
pub fn read_report(path: &std::path::Path) -> Result<Option<serde_json::Value>, ReportError> {
    let Ok(meta) = std::fs::metadata(path) else {
        return Ok(None);
    };
    if meta.len() > REPORT_LIMIT {
        return Err(ReportError::TooLarge);
    }
    let text = std::fs::read_to_string(path).map_err(ReportError::Unreadable)?;
    match serde_json::from_str(&text) {
        Ok(v @ serde_json::Value::Object(_)) => Ok(Some(v)),
        _ => Err(ReportError::NotAnObject),
    }
}

pub use super::outcome::ReportedMetrics;

/// Why the `metrics` of a run's report are refused: the run then fails with this message (a
/// job that reports what cannot be kept is not passed over in silence).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetricsError {
    #[error("its report's `metrics` is not an object of output refs, each an object of numbers: write {{\"metrics\": {{\"<output ref>\": {{\"rows\": 1234}}}}}}")]
    NotAnObject,
    #[error("its report's `metrics` names `{name}`, which is not one of its outputs ({}): report metrics of the refs in DATABUILD_OUTPUTS", .outputs.join(", "))]
    NotAnOutput { name: String, outputs: Vec<String> },
    #[error("its report's metric `{name}` of `{output}` is {value}, not a number: metrics are numbers only")]
    NotANumber {
        output: String,
        name: String,
        value: String,
    },
    #[error("its report's metric `{name}` of `{output}` takes the name of a measure DataBuild records itself: name it otherwise")]
    Reserved { output: String, name: String },
    #[error("its report names a metric `{name}` of `{output}`, which is not a metric's name: use letters, digits, `_`, `.` or `-` (up to 64), as a `[[check]]`'s `metric` must")]
    BadName { output: String, name: String },
    #[error("its report gives {count} metrics of `{output}`; at most {MAX_METRICS} an output are kept: report fewer")]
    TooMany { output: String, count: usize },
}

/// The most metrics a run may report of one output: each is a row of the log.
pub const MAX_METRICS: usize = 100;

/// The `metrics` of a run's report, checked: each names one of the run's `outputs`, each value a
/// number, no name one of DataBuild's own measures. `None` when it reported none.
pub fn reported_metrics(
    report: Option<&serde_json::Value>,
    outputs: &[String],
) -> Result<Option<ReportedMetrics>, MetricsError> {
    let Some(metrics) = report.and_then(|r| r.get("metrics")) else {
        return Ok(None);
    };
    let serde_json::Value::Object(by_ref) = metrics else {
        return Err(MetricsError::NotAnObject);
    };
    let mut out = ReportedMetrics::new();
    for (r, named) in by_ref {
        if !outputs.contains(r) {
            return Err(MetricsError::NotAnOutput {
                name: r.clone(),
                outputs: outputs.to_vec(),
            });
        }
        let serde_json::Value::Object(named) = named else {
            return Err(MetricsError::NotAnObject);
        };
        if named.len() > MAX_METRICS {
            return Err(MetricsError::TooMany {
                output: r.clone(),
                count: named.len(),
            });
        }
        let kept = out.entry(r.clone()).or_default();
        for (name, value) in named {
            if !databuild_core::is_metric_name(name) {
                return Err(MetricsError::BadName {
                    output: r.clone(),
                    name: name.clone(),
                });
            }
            if databuild_log::RunResources::NAMES.contains(&name.as_str()) {
                return Err(MetricsError::Reserved {
                    output: r.clone(),
                    name: name.clone(),
                });
            }
            let serde_json::Value::Number(n) = value else {
                return Err(MetricsError::NotANumber {
                    output: r.clone(),
                    name: name.clone(),
                    value: value.to_string(),
                });
            };
            kept.insert(name.clone(), n.clone());
        }
    }
    Ok(Some(out))
}

/// The longest list of refs DataBuild puts in one environment variable. Linux refuses to start
/// a process given any string over 128 KiB (`MAX_ARG_STRLEN`: "Argument list too long"), and
/// all of them together count against `ARG_MAX`; a fan-in job reading 24,000 partitions has a
/// list of ~700 KB.
const ENV_REFS_MAX: usize = 64 * 1024;

/// Why a run's environment could not be made: the run fails with this message.
#[derive(Debug, thiserror::Error)]
#[error("cannot write the run's `{var}` to `{}` (too long for the environment): {cause}", .path.display())]
pub(crate) struct RefsFileError {
    var: &'static str,
    path: PathBuf,
    cause: std::io::Error,
}

/// A run's list of refs as `VAR` (JSON), or, when too long for the environment, written to a
/// file next to the run's log and named by `VAR_FILE` (`VAR` is then unset, so a job that reads
/// only `VAR` fails at once instead of reading nothing).
fn refs_var(
    spec: &RunSpec,
    var: &'static str,
    refs: &[String],
) -> Result<(String, String), RefsFileError> {
    let json = serde_json::to_string(refs).expect("refs serialize");
    if json.len() <= ENV_REFS_MAX {
        return Ok((var.to_string(), json));
    }
    let path = spec.log_path.with_extension(format!(
        "{}.json",
        var.trim_start_matches("DATABUILD_").to_ascii_lowercase()
    ));
    std::fs::write(&path, json).map_err(|cause| RefsFileError {
        var,
        path: path.clone(),
        cause,
    })?;
    Ok((format!("{var}_FILE"), path.display().to_string()))
}

pub(crate) fn environment(spec: &RunSpec) -> Result<Vec<(String, String)>, RefsFileError> {
    let mut env: Vec<(String, String)> = spec.env.clone().into_iter().collect();
    env.extend([
        refs_var(spec, "DATABUILD_OUTPUTS", &spec.outputs)?,
        refs_var(spec, "DATABUILD_INPUTS", &spec.inputs)?,
        refs_var(spec, "DATABUILD_QUERY_INPUTS", &spec.query_inputs)?,
        (
            "DATABUILD_DATA_DIR".to_string(),
            spec.data_dir.display().to_string(),
        ),
        (
            "DATABUILD_OUTPUT_DIR".to_string(),
            spec.staging_dir().display().to_string(),
        ),
        ("DATABUILD_JOB_RUN_ID".to_string(), spec.job_run_id.clone()),
        ("DATABUILD_WATCH".to_string(), watch_token().to_string()),
        (
            "DATABUILD_REPORT".to_string(),
            spec.report_path().display().to_string(),
        ),
        (
            "DATABUILD_BUILD_REQUEST_ID".to_string(),
            spec.build_request_id.clone(),
        ),
    ]);
    for (name, value) in &spec.fields {
        env.push((
            format!("DATABUILD_FIELD_{}", name.to_ascii_uppercase()),
            value.clone(),
        ));
    }
    Ok(env)
}

/// The refs of the last `DATABUILD_MISSING_DEPS [...]` line in a log, if any.
pub fn missing_deps(log: &Path) -> Vec<String> {
    let Ok(text) = std::fs::read(log) else {
        return Vec::new();
    };
    String::from_utf8_lossy(&text)
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("DATABUILD_MISSING_DEPS"))
        .and_then(|json| serde_json::from_str::<Vec<String>>(json.trim()).ok())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn check(report: serde_json::Value) -> Result<Option<ReportedMetrics>, MetricsError> {
        reported_metrics(Some(&report), &["a/1".to_string(), "b/1".to_string()])
    }

    #[test]
    fn the_graphs_resource_names_are_the_ones_runs_record() {
        assert_eq!(
            databuild_core::RESOURCE_METRICS,
            databuild_log::RunResources::NAMES
        );
    }

    #[test]
    fn reported_metrics_are_numbers_of_the_runs_outputs() {
        let m = check(json!({"metrics": {"a/1": {"rows": 1234, "nulls": 0.5}}}))
            .unwrap()
            .unwrap();
        assert_eq!(m["a/1"]["rows"], serde_json::Number::from(1234));
        assert_eq!(check(json!({"rows": 1})).unwrap(), None);
        assert_eq!(
            check(json!({"metrics": {"c/1": {"rows": 1}}})),
            Err(MetricsError::NotAnOutput {
                name: "c/1".into(),
                outputs: vec!["a/1".into(), "b/1".into()]
            })
        );
        assert_eq!(
            check(json!({"metrics": {"a/1": {"row count": 1}}})),
            Err(MetricsError::BadName {
                output: "a/1".into(),
                name: "row count".into()
            })
        );
        let many: serde_json::Map<String, serde_json::Value> = (0..=MAX_METRICS)
            .map(|i| (format!("m{i}"), json!(i)))
            .collect();
        assert!(matches!(
            check(json!({"metrics": {"a/1": many}})),
            Err(MetricsError::TooMany { count: 101, .. })
        ));
        let e = check(json!({"metrics": {"a/1": {"rows": "12"}}})).unwrap_err();
        assert_eq!(
            e.to_string(),
            "its report's metric `rows` of `a/1` is \"12\", not a number: metrics are numbers only"
        );
        assert!(matches!(
            check(json!({"metrics": {"a/1": {"wall_ms": 1}}})),
            Err(MetricsError::Reserved { .. })
        ));
        assert_eq!(
            check(json!({"metrics": [1]})),
            Err(MetricsError::NotAnObject)
        );
    }
}
