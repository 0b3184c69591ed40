//! The graph file as written: the sections of `databuild.toml` as serde reads them, unknown keys
//! refused. Private to the graph module: the rest of the code sees only the validated [`Graph`].
//!
//! [`Graph`]: super::Graph

use std::collections::BTreeMap;

use serde::Deserialize;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphFile {
    pub graph: GraphSection,
    #[serde(default)]
    pub dataset: Vec<DatasetSection>,
    #[serde(default)]
    pub job: Vec<JobSection>,
    #[serde(default)]
    pub source: Vec<SourceSection>,
    #[serde(default)]
    pub table: Vec<TableSection>,
    #[serde(default)]
    pub want: Vec<WantSection>,
    #[serde(default)]
    pub check: Vec<CheckSection>,
    #[serde(default)]
    pub alert: Vec<AlertSection>,
    pub openlineage: Option<OpenLineageSection>,
}

/// `[openlineage]`: where run events go as OpenLineage. The key itself never sits in the file:
/// `api_key_env` names the variable holding it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenLineageSection {
    pub url: Option<String>,
    pub namespace: Option<String>,
    pub api_key_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CheckSection {
    pub name: String,
    pub applies_to: Option<String>,
    pub command: Option<Vec<String>>,
    pub blocking: Option<bool>,
    pub timeout: Option<String>,
    pub version: Option<toml::Value>,
    #[serde(default)]
    pub code: Vec<String>,
    /// An anomaly check: the resource or reported metric it judges (instead of a `command`).
    pub metric: Option<String>,
    pub window: Option<u32>,
    pub k: Option<f64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WantSection {
    pub name: String,
    pub refs: Vec<String>,
    pub sla: Option<String>,
    pub ttl: Option<String>,
    /// `HH:MM`: each instance is due by that time (UTC) of the day it is made.
    pub by: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AlertSection {
    pub name: String,
    pub on: Vec<String>,
    pub command: Option<Vec<String>>,
    pub url: Option<String>,
    pub secret_env: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SourceSection {
    pub name: String,
    pub kind: String,
    pub retention: String,
    pub body_format: Option<String>,
    pub secret_env: Option<String>,
    pub max_body: Option<toml::Value>,
    pub rate_limit: Option<u32>,
    pub path: Option<String>,
    /// A scheme's name, or a table of a generic scheme's settings.
    pub signature: Option<toml::Value>,
    pub signature_tolerance: Option<String>,
    pub idempotency: Option<IdempotencySection>,
    pub include_headers: Option<Vec<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SignatureSection {
    pub header: Option<String>,
    pub prefix: Option<String>,
    pub algorithm: Option<String>,
    pub encoding: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdempotencySection {
    pub header: Option<String>,
    pub field: Option<String>,
    pub window: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TableSection {
    pub name: String,
    pub source: String,
    pub version: u32,
    pub columns: BTreeMap<String, String>,
    #[serde(default)]
    pub defaults: BTreeMap<String, toml::Value>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GraphSection {
    pub name: String,
    pub event_log: Option<String>,
    pub data_dir: Option<String>,
    pub executor: Option<String>,
    #[serde(default)]
    pub domains: BTreeMap<String, Vec<String>>,
    pub slurm: Option<SlurmSection>,
    #[serde(default)]
    pub show_env: Vec<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlurmSection {
    pub partition: Option<String>,
    pub account: Option<String>,
    #[serde(default)]
    pub sbatch_args: Vec<String>,
    pub pending_timeout: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetSection {
    pub name: String,
    pub pattern: String,
    pub exists: Option<Vec<String>>,
    pub upstream: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobSection {
    pub name: String,
    pub outputs: Option<Vec<String>>,
    pub inputs: Option<Vec<String>>,
    pub config: Option<Vec<String>>,
    pub command: Option<Vec<String>>,
    pub version: Option<toml::Value>,
    pub timeout: Option<String>,
    pub config_timeout: Option<String>,
    pub retries: Option<u32>,
    pub concurrency: Option<u32>,
    pub batch: Option<u32>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cpus: Option<u32>,
    pub mem: Option<String>,
    pub migrate: Option<Vec<String>>,
    #[serde(default)]
    pub code: Vec<String>,
}
