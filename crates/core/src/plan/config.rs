//! A job's run configs: what a config executable answers (contract section 2), parsed, and how an
//! answer differs from the config the log recorded for a built partition ([`config_change`]).

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Serialize};

use crate::graph::Graph;
use crate::refs::PartitionRef;

/// Whether an input must be live before the run (`materialize`), or is read only if present (`query`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum DepKind {
    #[default]
    Materialize,
    Query,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigInput {
    #[serde(rename = "ref")]
    pub partition_ref: PartitionRef,
    #[serde(default)]
    pub dep: DepKind,
}

/// One run as a config executable describes it (contract section 2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobConfig {
    pub outputs: Vec<PartitionRef>,
    #[serde(default)]
    pub inputs: Vec<ConfigInput>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigResponse {
    configs: Vec<JobConfig>,
}

impl JobConfig {
    /// Parses what a config executable printed.
    pub fn parse_response(stdout: &str) -> Result<Vec<JobConfig>, ConfigResponseError> {
        serde_json::from_str::<ConfigResponse>(stdout)
            .map(|r| r.configs)
            .map_err(|e| ConfigResponseError {
                error: e.to_string(),
                // Output that does not even start as the JSON does: most often a log line.
                began: (!stdout.trim_start().starts_with('{')).then(|| {
                    let first: String = stdout.chars().take(60).collect();
                    let more = if stdout.chars().nth(60).is_some() {
                        "…"
                    } else {
                        ""
                    };
                    format!("{}{more}", first.escape_debug())
                }),
            })
    }
}

/// A config executable's output that is not its JSON answer.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "its output is not the expected JSON `{{\"configs\": [{{\"outputs\": [...], \"inputs\": [...], \"args\": [...], \"env\": {{}}}}]}}`: {error}{}",
    .began.as_ref().map(|b| format!("; it began `{b}`: print log lines on stderr, and only the JSON on stdout")).unwrap_or_default()
)]
pub struct ConfigResponseError {
    /// What the JSON parser said.
    pub error: String,
    /// The first characters, when the output does not start as JSON does.
    pub began: Option<String>,
}

/// What the log recorded of a run's config: what it read and how it was called.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BuiltWith {
    /// The inputs that had to be live (the version refs, for aliases).
    pub inputs: Vec<String>,
    pub args: Vec<String>,
    /// As the log records them: [`crate::graph::REDACTED`] for names not in `show_env`.
    pub env: BTreeMap<String, String>,
}

/// How a config's answer now differs from what the run that built a partition recorded, in
/// inputs (as a set), args, and env (names, and the values the log shows), or `None` if it does not
/// as far as the log can tell (a redacted value's change shows only in the data version).
pub fn config_change(graph: &Graph, built: &BuiltWith, now: &JobConfig) -> Option<String> {
    let then: BTreeSet<&str> = built.inputs.iter().map(String::as_str).collect();
    let reads: BTreeSet<&str> = now
        .inputs
        .iter()
        .filter(|i| i.dep == DepKind::Materialize)
        .map(|i| i.partition_ref.as_str())
        .collect();
    if reads != then {
        let added: Vec<&str> = reads.difference(&then).copied().collect();
        let dropped: Vec<&str> = then.difference(&reads).copied().collect();
        return Some(match (added.is_empty(), dropped.is_empty()) {
            (false, false) => format!(
                "its config now reads {} instead of {}",
                some_refs(&added),
                some_refs(&dropped)
            ),
            (false, true) => format!("its config now also reads {}", some_refs(&added)),
            _ => format!("its config no longer reads {}", some_refs(&dropped)),
        });
    }
    if now.args != built.args {
        return Some(format!(
            "its config now passes args {:?} instead of {:?}",
            now.args, built.args
        ));
    }
    let shown = |k: &str, v: &str| graph.recorded_env_value(k, v).to_string();
    for (k, v) in &now.env {
        match built.env.get(k) {
            None => return Some(format!("its config now sets env `{k}`")),
            Some(was) if *was != shown(k, v) => {
                return Some(format!(
                    "its config now sets env `{k}` to {:?} instead of {was:?}",
                    shown(k, v)
                ))
            }
            Some(_) => {}
        }
    }
    if let Some(k) = built.env.keys().find(|k| !now.env.contains_key(*k)) {
        return Some(format!("its config no longer sets env `{k}`"));
    }
    None
}

/// Up to three refs, quoted, and how many more.
fn some_refs(refs: &[&str]) -> String {
    let shown: Vec<String> = refs.iter().take(3).map(|r| format!("`{r}`")).collect();
    match refs.len() {
        n if n > 3 => format!("{} and {} more", shown.join(", "), n - 3),
        _ => shown.join(", "),
    }
}
