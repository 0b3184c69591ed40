//! Checks: data quality that decides what is live.
//!
//! A `[[check]]` of the graph runs like a job, on the build's executor, against each partition of
//! its job's outputs: after the run that built them succeeded (in the same slot, against the
//! staged outputs, before the run's completion is recorded) and on demand (`databuild check`).
//! A job may also report checks itself (`DATABUILD_REPORT`: `{"checks": [...]}`). Every result is
//! a `check` event, recorded with the run's completion: the log never shows a partition live
//! whose current instance failed a blocking check.
//!
//! What a recorded result means now ([`state`], [`blocking_failure`]) is decided here, purely,
//! from the graph's check and the log's row: a failed blocking check of the current instance
//! holds the partition back; a result of an earlier instance says nothing; one recorded under
//! another version or command of the check is stale (the check runs again, the data is not
//! rebuilt).
//!
//! This module is those decisions, and nothing else: which checks apply to a partition
//! ([`runs_for`]), what a recorded result says of its current instance ([`state`],
//! [`held_back_by`], [`results`]), whether a run's results hold its outputs back
//! ([`blocking_failure`]), and the checks a job reported inline ([`inline`]). No I/O:
//! `data::versions` decides liveness with these. Running one check is `run::check`; the engine's
//! side (`databuild check`, and a build's stale checks) is `engine::checks`.

use std::collections::BTreeMap;
use std::time::Duration;

use databuild_core::{Check, Graph, MetricRule, Producer};
use databuild_log::{CheckRow, Event};

/// One check to run against one partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CheckRun {
    pub name: String,
    pub version: String,
    pub command: Vec<String>,
    pub blocking: bool,
    pub timeout: Option<Duration>,
    pub partition_ref: String,
    /// The partition's field values and their types (`DATABUILD_FIELD_*`, `DATABUILD_TYPES`).
    pub fields: Vec<(String, String)>,
    pub types: serde_json::Map<String, serde_json::Value>,
    /// The check's code versions now (`data::code`), recorded with its result; empty until the
    /// caller, who may read files, fills them in.
    pub code_versions: BTreeMap<String, String>,
    /// An anomaly check's rule and where its history is (then `command` is empty).
    pub metric: Option<MetricCheck>,
}

/// An anomaly check of one partition: its rule, and the job and output pattern whose earlier
/// partitions it learns from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricCheck {
    pub rule: MetricRule,
    pub job: String,
    /// The output pattern's literal prefix: history is read from refs at or after it.
    pub from: String,
    pub pattern: databuild_core::Pattern,
}

impl MetricCheck {
    /// The history query of the partition `r`: the window's worth of refs before it, read with
    /// room for refs of the job's other outputs that share the prefix (filtered by [`Self::learn`]).
    pub fn query<'a>(&'a self, r: &'a str) -> databuild_log::HistoryQuery<'a> {
        databuild_log::HistoryQuery {
            job: &self.job,
            name: &self.rule.metric,
            from: &self.from,
            before: r,
            limit: self.rule.window as usize * 4,
        }
    }

    /// Of the rows the history query read, the values of this output's partitions, the window's
    /// worth nearest first.
    pub fn learn(&self, rows: &[(String, f64)]) -> Vec<f64> {
        rows.iter()
            .filter(|(r, _)| self.pattern.match_ref(r).is_some())
            .map(|(_, v)| *v)
            .take(self.rule.window as usize)
            .collect()
    }
}

/// An anomaly check's result: `value` (what the run recorded of the metric for the partition, if
/// anything) judged against the band of `history`.
pub fn judge(c: &CheckRun, m: &MetricCheck, value: Option<f64>, history: &[f64]) -> CheckOutcome {
    let verdict = crate::anomaly::Verdict::of(value, history, &m.rule);
    CheckOutcome {
        partition_ref: c.partition_ref.clone(),
        name: c.name.clone(),
        version: Some(c.version.clone()),
        command: Vec::new(),
        blocking: c.blocking,
        passed: verdict.passed(),
        message: verdict.message(&m.rule.metric, value),
        metrics: Some(verdict.detail(value)),
        inline: false,
        code_versions: c.code_versions.clone(),
    }
}

/// The value of metric `name` for output `r` in a job's report (`"metrics": {"<ref>": {...}}`).
pub fn reported(report: Option<&serde_json::Value>, r: &str, name: &str) -> Option<f64> {
    report?.get("metrics")?.get(r)?.get(name)?.as_f64()
}

/// The result of one check of one partition, as it is recorded.
#[derive(Debug, Clone, PartialEq)]
pub struct CheckOutcome {
    pub partition_ref: String,
    pub name: String,
    /// `None` for a check the job reported inline.
    pub version: Option<String>,
    pub command: Vec<String>,
    pub blocking: bool,
    pub passed: bool,
    pub message: String,
    pub metrics: Option<serde_json::Value>,
    pub inline: bool,
    /// The code the check ran (none for a check the job reported inline).
    pub code_versions: BTreeMap<String, String>,
}

impl CheckOutcome {
    /// Why this result keeps its partition from being live, if it does.
    pub fn blocks(&self) -> Option<String> {
        (self.blocking && !self.passed).then(|| failed_reason(&self.name, &self.message))
    }

    /// Its event: of `partition_ref`'s instance built by `run`, in build `build` (if any).
    pub fn event(&self, build: Option<&str>, run: &str, job: &str) -> Event {
        let mut e = Event::check(build, &self.partition_ref, run, &self.name, self.passed)
            .with_message(self.message.clone())
            .with_data(|d| {
                d.check_version = self.version.clone();
                d.check_command = self.command.clone();
                d.blocking = Some(self.blocking);
                d.metrics = self.metrics.clone();
                d.inline = self.inline;
                d.code_versions = self.code_versions.clone();
            });
        e.job = Some(job.to_string());
        e
    }
}

/// How status words and build failures name a failed check.
pub fn failed_reason(name: &str, message: &str) -> String {
    if message.is_empty() {
        format!("failed check `{name}`")
    } else {
        format!("failed check `{name}`: {message}")
    }
}

/// What a build says of a check that failed: the partition is not live (blocking), or a warning.
pub fn note(c: &CheckOutcome) -> Option<String> {
    match c.blocks() {
        _ if c.passed => None,
        Some(why) => Some(format!("`{}` {why}; it is not live", c.partition_ref)),
        None => Some(format!(
            "warning: `{}` {} (not blocking)",
            c.partition_ref,
            failed_reason(&c.name, &c.message)
        )),
    }
}

/// The first result that blocks its partition, as its reason.
pub fn blocking_failure(outcomes: &[CheckOutcome]) -> Option<String> {
    outcomes.iter().find_map(CheckOutcome::blocks)
}

/// What a partition's recorded result of a check means for its current instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CheckState {
    /// The check has no result for the current instance: it has not run on it.
    NotRun,
    Passed,
    Failed {
        message: String,
    },
    /// The result was recorded under another version or command of the check: it runs again
    /// (the data is not rebuilt). The result still stands until it has.
    Stale {
        passed: bool,
        why: String,
    },
}

/// The state of `check` for the partition whose current instance `current_run` built, from its
/// recorded result `row` (of any instance), with the check's code versions now (`code_now`; a
/// result recorded without any compares on version and command only).
pub fn state(
    check: &Check,
    row: Option<&CheckRow>,
    current_run: &str,
    code_now: &BTreeMap<String, String>,
) -> CheckState {
    let Some(row) = row.filter(|r| r.job_run_id == current_run) else {
        return CheckState::NotRun;
    };
    let version = row.check_version.as_deref().unwrap_or("");
    let why = if version != check.version {
        Some(format!(
            "check `{}` changed version from {version} to {}",
            check.name, check.version
        ))
    } else if row.command != check.command {
        Some(format!("check `{}` changed its command", check.name))
    } else if row.code_versions.is_empty() {
        None
    } else {
        crate::answers::CodeChange::reason(
            &format!("check `{}`", check.name),
            &crate::answers::CodeChange::between(&row.code_versions, code_now),
        )
    };
    match why {
        Some(why) => CheckState::Stale {
            passed: row.passed(),
            why,
        },
        None if row.passed() => CheckState::Passed,
        None => CheckState::Failed {
            message: row.message.clone().unwrap_or_default(),
        },
    }
}

/// Of a partition's recorded results (`rows`), the one that keeps it from being live: a failed
/// result of its current instance of a check the graph still has and that blocks (by the graph's
/// word, which may have changed since), or a failed blocking check its job reported inline.
pub fn held_back_by(
    graph: &Graph,
    partition_ref: &str,
    current_run: &str,
    rows: &[CheckRow],
) -> Option<String> {
    rows.iter()
        .filter(|r| r.partition_ref == partition_ref && r.job_run_id == current_run)
        .filter(|r| !r.passed())
        .find(|r| match graph.check(&r.check_name) {
            Some(c) => c.blocking && graph.checks_of(partition_ref).contains(&c),
            None => r.inline && r.blocking,
        })
        .map(|r| failed_reason(&r.check_name, r.message.as_deref().unwrap_or("")))
}

/// The checks of `r`'s current instance (built by `current_run`) as answers show them: every
/// check of the graph that applies to it (`not_run` without a result for this instance), then
/// those its job reported inline. `code_of` gives a check's code versions now.
pub fn results(
    graph: &Graph,
    r: &str,
    current_run: &str,
    rows: &[CheckRow],
    code_of: &dyn Fn(&Check) -> BTreeMap<String, String>,
) -> Vec<crate::answers::CheckResult> {
    let row_of = |name: &str| {
        rows.iter()
            .find(|row| row.partition_ref == r && row.check_name == name)
    };
    let answer = |row: Option<&CheckRow>, name: &str, blocking: bool| {
        let current = row.filter(|row| row.job_run_id == current_run);
        crate::answers::CheckResult {
            name: name.to_string(),
            result: match current {
                None => "not_run",
                Some(row) if row.passed() => "passed",
                Some(_) => "failed",
            }
            .to_string(),
            blocking,
            message: current
                .and_then(|row| row.message.clone())
                .filter(|m| !m.is_empty()),
            metrics: current.and_then(|row| row.metrics.clone()),
            stale: None,
            inline: current.is_some_and(|row| row.inline),
            version: current.and_then(|row| row.check_version.clone()),
            checked_at: current.map(|row| crate::answers::rfc3339(row.updated_at)),
            checked_at_ns: current.map(|row| row.updated_at),
        }
    };
    let mut out = Vec::new();
    for c in graph.checks_of(r) {
        let row = row_of(&c.name);
        let mut a = answer(row, &c.name, c.blocking);
        if let CheckState::Stale { why, .. } = state(c, row, current_run, &code_of(c)) {
            a.stale = Some(why);
        }
        out.push(a);
    }
    for row in rows {
        if row.partition_ref == r
            && row.inline
            && row.job_run_id == current_run
            && graph.check(&row.check_name).is_none()
        {
            out.push(answer(Some(row), &row.check_name, row.blocking));
        }
    }
    out
}

/// The checks of the graph that apply to `r`, ready to run.
pub fn runs_for(graph: &Graph, r: &str) -> Vec<CheckRun> {
    let checks = graph.checks_of(r);
    if checks.is_empty() {
        return Vec::new();
    }
    let mut fields = Vec::new();
    let mut types = serde_json::Map::new();
    let mut of = None;
    if let Some((p @ Producer::Job { job, .. }, values)) = graph.producer_of(r) {
        let pattern = graph.pattern_of(p);
        for ((name, ty), v) in pattern.fields().zip(values) {
            fields.push((name.to_string(), v.to_string()));
            types.insert(name.to_string(), ty.to_string().into());
        }
        of = Some((graph.jobs[job].name.clone(), pattern.clone()));
    }
    checks
        .into_iter()
        .map(|c| CheckRun {
            name: c.name.clone(),
            version: c.version.clone(),
            command: c.command.clone(),
            blocking: c.blocking,
            timeout: c.timeout,
            partition_ref: r.to_string(),
            fields: fields.clone(),
            types: types.clone(),
            code_versions: BTreeMap::new(),
            metric: c
                .metric
                .clone()
                .zip(of.clone())
                .map(|(rule, (job, pattern))| MetricCheck {
                    rule,
                    job,
                    from: pattern.literal_prefix().to_string(),
                    pattern,
                }),
        })
        .collect()
}

/// Why a job's inline checks (`DATABUILD_REPORT`'s `checks`) cannot be read: the run then fails.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum InlineCheckError {
    #[error("its report's `checks` is not a list of objects with `name` and `passed`")]
    NotAList,
    #[error("its report's check `{0}` names `{1}`, which is not an output of the run")]
    NotAnOutput(String, String),
}

/// The checks a job reported in its report: `{"checks": [{"name", "passed", "message",
/// "metrics", "blocking" (default true), "ref" (default: every output)}]}`.
pub fn inline(
    report: Option<&serde_json::Value>,
    outputs: &[String],
) -> Result<Vec<CheckOutcome>, InlineCheckError> {
    let Some(checks) = report.and_then(|r| r.get("checks")) else {
        return Ok(Vec::new());
    };
    let list = checks.as_array().ok_or(InlineCheckError::NotAList)?;
    let mut out = Vec::new();
    for c in list {
        let (Some(name), Some(passed)) = (
            c.get("name").and_then(|n| n.as_str()),
            c.get("passed").and_then(|p| p.as_bool()),
        ) else {
            return Err(InlineCheckError::NotAList);
        };
        let refs: Vec<String> = match c.get("ref").and_then(|r| r.as_str()) {
            Some(r) if outputs.iter().any(|o| o == r) => vec![r.to_string()],
            Some(r) => return Err(InlineCheckError::NotAnOutput(name.into(), r.into())),
            None => outputs.to_vec(),
        };
        for r in refs {
            out.push(CheckOutcome {
                partition_ref: r,
                name: name.to_string(),
                version: None,
                command: Vec::new(),
                blocking: c.get("blocking").and_then(|b| b.as_bool()).unwrap_or(true),
                passed,
                message: c
                    .get("message")
                    .and_then(|m| m.as_str())
                    .unwrap_or_default()
                    .to_string(),
                metrics: c.get("metrics").cloned(),
                inline: true,
                code_versions: BTreeMap::new(),
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use databuild_log::Status;

    const GRAPH: &str = r#"
[graph]
name = "g"
[[job]]
name = "a"
outputs = ["a/{n:int}"]
command = ["true"]
[[check]]
name = "rows"
applies_to = "a"
command = ["true"]
version = "2"
[[check]]
name = "soft"
applies_to = "a"
command = ["true"]
blocking = false
"#;

    fn row(check: &str, run: &str, passed: bool, version: &str) -> CheckRow {
        CheckRow {
            partition_ref: "a/1".into(),
            check_name: check.into(),
            status: if passed {
                Status::Completed
            } else {
                Status::Failed
            },
            blocking: true,
            job_run_id: run.into(),
            job: Some("a".into()),
            build_request_id: None,
            check_version: Some(version.into()),
            command: vec!["true".into()],
            inline: false,
            message: Some("no rows".into()),
            metrics: None,
            updated_at: 0,
            code_versions: BTreeMap::new(),
        }
    }

    #[test]
    fn a_result_counts_for_the_instance_it_checked_at_the_version_it_ran() {
        let g = Graph::parse(GRAPH, "g.toml").unwrap();
        let c = g.check("rows").unwrap();
        let cases: &[(Option<CheckRow>, CheckState)] = &[
            (None, CheckState::NotRun),
            (Some(row("rows", "r0", false, "2")), CheckState::NotRun),
            (Some(row("rows", "r1", true, "2")), CheckState::Passed),
            (
                Some(row("rows", "r1", false, "2")),
                CheckState::Failed {
                    message: "no rows".into(),
                },
            ),
            (
                Some(row("rows", "r1", false, "1")),
                CheckState::Stale {
                    passed: false,
                    why: "check `rows` changed version from 1 to 2".into(),
                },
            ),
            (
                Some(CheckRow {
                    command: vec!["false".into()],
                    ..row("rows", "r1", true, "2")
                }),
                CheckState::Stale {
                    passed: true,
                    why: "check `rows` changed its command".into(),
                },
            ),
            (
                Some(CheckRow {
                    code_versions: [("checks/rows.sh".to_string(), "1a2b3c4d5e".to_string())]
                        .into(),
                    ..row("rows", "r1", true, "2")
                }),
                CheckState::Stale {
                    passed: true,
                    why: "check `rows` changed code: checks/rows.sh (sha 1a2b3c4d… → ffffffff…)"
                        .into(),
                },
            ),
            // Recorded before code versions: compared on version and command only.
            (
                Some(CheckRow {
                    code_versions: BTreeMap::new(),
                    ..row("rows", "r1", true, "2")
                }),
                CheckState::Passed,
            ),
        ];
        let now: BTreeMap<String, String> =
            [("checks/rows.sh".to_string(), "ffffffffff".to_string())].into();
        for (recorded, expected) in cases {
            assert_eq!(
                &state(c, recorded.as_ref(), "r1", &now),
                expected,
                "{recorded:?}"
            );
        }
    }

    #[test]
    fn only_a_failed_blocking_check_of_the_current_instance_holds_a_partition_back() {
        let g = Graph::parse(GRAPH, "g.toml").unwrap();
        let held = |rows: &[CheckRow]| held_back_by(&g, "a/1", "r1", rows);
        assert_eq!(held(&[row("rows", "r1", true, "2")]), None);
        assert_eq!(
            held(&[row("rows", "r1", false, "2")]).as_deref(),
            Some("failed check `rows`: no rows")
        );
        // An earlier instance's failure, a non-blocking check, a check gone from the graph.
        assert_eq!(held(&[row("rows", "r0", false, "2")]), None);
        assert_eq!(held(&[row("soft", "r1", false, "0")]), None);
        assert_eq!(held(&[row("gone", "r1", false, "0")]), None);
        // A blocking check the job reported inline.
        let inline = CheckRow {
            inline: true,
            ..row("gone", "r1", false, "0")
        };
        assert!(held(&[inline]).is_some());
    }

    #[test]
    fn inline_checks_apply_to_every_output_or_the_one_they_name() {
        let outputs = ["a/1".to_string(), "a/2".to_string()];
        let report = serde_json::json!({"checks": [
            {"name": "x", "passed": false, "message": "bad", "metrics": {"n": 1}},
            {"name": "y", "passed": true, "ref": "a/2", "blocking": false},
        ]});
        let got = inline(Some(&report), &outputs).unwrap();
        assert_eq!(got.len(), 3);
        assert_eq!(
            blocking_failure(&got).as_deref(),
            Some("failed check `x`: bad")
        );
        assert!(!got[2].blocking && got[2].partition_ref == "a/2");
        let bad = serde_json::json!({"checks": [{"name": "y", "passed": true, "ref": "b/1"}]});
        assert_eq!(
            inline(Some(&bad), &outputs),
            Err(InlineCheckError::NotAnOutput("y".into(), "b/1".into()))
        );
        assert_eq!(
            inline(Some(&serde_json::json!({"checks": 3})), &outputs),
            Err(InlineCheckError::NotAList)
        );
        assert!(inline(None, &outputs).unwrap().is_empty());
    }

    #[test]
    fn an_anomaly_check_learns_from_its_outputs_partitions_before_it() {
        let g = Graph::parse(
            r#"
[graph]
name = "g"
[[job]]
name = "a"
outputs = ["a/{n:int}", "a/x/{n:int}"]
command = ["true"]
[[check]]
name = "band"
applies_to = "a/{n:int}"
metric = "rows"
window = 5
"#,
            "g.toml",
        )
        .unwrap();
        let runs = runs_for(&g, "a/9");
        let m = runs[0].metric.as_ref().expect("an anomaly check");
        assert!(runs[0].command.is_empty());
        assert_eq!((m.job.as_str(), m.from.as_str()), ("a", "a/"));
        let q = m.query("a/9");
        assert_eq!((q.before, q.name, q.limit), ("a/9", "rows", 20));
        // Refs of the job's other output share the prefix: they are not this output's history.
        let rows: Vec<(String, f64)> = [("a/x/8", 1.0), ("a/8", 250.0), ("a/7", 240.0)]
            .into_iter()
            .chain((1..=6).map(|i| ("a/6", i as f64)))
            .map(|(r, v)| (r.to_string(), v))
            .collect();
        assert_eq!(m.learn(&rows), [250.0, 240.0, 1.0, 2.0, 3.0]);
        let outcome = judge(&runs[0], m, Some(12.0), &[250.0; 5]);
        assert!(!outcome.passed && outcome.blocking);
        assert_eq!(
            outcome.message,
            "rows = 12 outside the expected 225–275 (median 250 of the last 5 partitions)"
        );
        assert_eq!(outcome.metrics.unwrap()["low"], 225.0);
        assert_eq!(
            reported(
                Some(&serde_json::json!({"metrics": {"a/9": {"rows": 3}}})),
                "a/9",
                "rows"
            ),
            Some(3.0)
        );
    }
}
