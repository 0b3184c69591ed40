//! The graph file (`databuild.toml`) and the validated [`Graph`] it describes.
//!
//! Loading checks everything a run would trip over later: patterns, templates, overlapping outputs,
//! durations, commands. A loaded graph answers "who builds this ref?" through a literal-prefix
//! index instead of trying every pattern.
//!
//! This module holds the graph's parts, its queries and that index. `file` holds the sections as
//! written, `load` turns them into a graph ([`Graph::parse`]), `validate` checks the whole of it.

use std::collections::BTreeMap;
use std::time::Duration;

use rustc_hash::FxHashMap;

use crate::code::CodeGlob;
use crate::pattern::{FieldMismatch, Pattern};
use crate::tables::{Source, Table};
use crate::template::Template;

mod file;
mod load;
mod validate;

pub use load::GraphError;

/// An external dataset: partitions that no job builds.
#[derive(Debug, Clone)]
pub struct Dataset {
    pub name: String,
    pub pattern: Pattern,
    /// A probe command, called with the ref as its last argument; exit 0 means available.
    /// Without one, a partition is available when `<data_dir>/<ref>` exists.
    pub exists: Option<Vec<String>>,
    /// The source (index in [`Graph::sources`]) whose raw partitions this dataset names.
    pub source: Option<usize>,
    /// Another DataBuild service that builds this dataset (`http://host:port`): availability is
    /// its partition status, and wanted partitions are asked of it.
    pub upstream: Option<String>,
}

/// How a job finds its inputs.
#[derive(Debug, Clone)]
pub enum Deps {
    /// Input templates over the output's fields, each linked to the producers it can reach.
    Static(Vec<LinkedTemplate>),
    /// A config executable called with the requested outputs (contract section 2).
    Dynamic { config: Vec<String> },
    /// A table version, built by DataBuild itself: from the raw source partition while it is
    /// retained, else carried forward from the previous version. Resolved like a config.
    Table { table: usize, version: u32 },
}

#[derive(Debug, Clone)]
pub struct LinkedTemplate {
    pub template: Template,
    pub reads: Vec<Producer>,
}

#[derive(Debug, Clone)]
pub struct Job {
    pub name: String,
    pub outputs: Vec<Pattern>,
    pub deps: Deps,
    pub command: Vec<String>,
    pub version: String,
    pub timeout: Option<Duration>,
    pub config_timeout: Duration,
    pub retries: u32,
    pub concurrency: Option<u32>,
    pub batch: u32,
    pub env: BTreeMap<String, String>,
    /// Resources asked of a cluster executor (Slurm `--cpus-per-task`, `--mem`).
    pub cpus: Option<u32>,
    pub mem: Option<String>,
    /// Carries a partition forward to a new job version when its inputs have expired: run with
    /// the partition as its only output, it rewrites it in place.
    pub migrate: Option<Vec<String>>,
    /// `code`: the files besides those its command (or config command) names whose content is
    /// part of its code version (see `databuild_exec::data::code`).
    pub code: Vec<CodeGlob>,
}

/// A data-quality check of the partitions a job builds (`[[check]]`): run like a job after a
/// run builds them, and on demand (`databuild check`). Exit 0 passes. A blocking check that
/// fails keeps the partition from being live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    /// `applies_to` as written: a job's name or one of its output patterns.
    pub applies_to: String,
    /// The job outputs it checks, as `(job, output)` indices.
    pub targets: Vec<(usize, usize)>,
    /// What it runs; empty for an anomaly check (`metric`), which runs nothing.
    pub command: Vec<String>,
    /// An anomaly check's rule: set exactly when `command` is empty.
    pub metric: Option<MetricRule>,
    pub blocking: bool,
    pub timeout: Option<Duration>,
    /// Changing it (or the command) makes the recorded results stale: the check runs again,
    /// the data is not rebuilt.
    pub version: String,
    /// `code`, as a job's: what its code version covers besides its command's files.
    pub code: Vec<CodeGlob>,
}

/// The resources every run records (by the executor, with no job code), by the names a metric
/// check and `databuild metrics` use; any other name is a metric jobs report.
pub const RESOURCE_METRICS: [&str; 8] = [
    "wall_ms",
    "cpu_user_ms",
    "cpu_system_ms",
    "max_rss_bytes",
    "read_bytes",
    "write_bytes",
    "output_bytes",
    "queue_wait_ms",
];

/// Whether `name` may name a metric: letters, digits, `_`, `.` and `-`, up to 64 (what a job
/// reports and a `[[check]]`'s `metric` names alike, so every reported metric can be checked).
pub fn is_metric_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_' || ch == '.' || ch == '-')
}

/// An anomaly check (`[[check]] metric = "rows"`): a partition fails when its value of `metric`
/// falls outside the band learned from the last `window` partitions of its output.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricRule {
    /// A resource ([`RESOURCE_METRICS`]) or a metric the job reports.
    pub metric: String,
    /// How many earlier partitions the band is learned from (`window`, default 14).
    pub window: u32,
    /// The band's half-width in robust standard deviations (`k`, default 3).
    pub k: f64,
}

/// `k` is a finite positive number (validated at load), so equality is total.
impl Eq for MetricRule {}

impl MetricRule {
    pub const DEFAULT_WINDOW: u32 = 14;
    pub const DEFAULT_K: f64 = 3.0;
}

impl Check {
    pub fn applies(&self, p: Producer) -> bool {
        matches!(p, Producer::Job { job, output } if self.targets.contains(&(job, output)))
    }
}

/// Where job runs execute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ExecutorConfig {
    Local,
    Slurm(SlurmConfig),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SlurmConfig {
    pub partition: Option<String>,
    pub account: Option<String>,
    /// More `sbatch` arguments, passed as given.
    pub sbatch_args: Vec<String>,
    /// A run still pending after this long fails (with Slurm's reason).
    pub pending_timeout: Duration,
}

/// What makes a ref exist: the output pattern of a job, or an external dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Producer {
    Job {
        job: usize,
        output: usize,
    },
    Dataset(usize),
    /// A table's alias (index in [`Graph::tables`]): reads as the promoted version.
    Alias(usize),
}

/// The default time a config executable may take before planning gives up on it.
pub const DEFAULT_CONFIG_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
pub struct Graph {
    pub name: String,
    pub event_log: Option<String>,
    pub data_dir: String,
    pub executor: ExecutorConfig,
    pub domains: BTreeMap<String, Vec<String>>,
    pub datasets: Vec<Dataset>,
    pub jobs: Vec<Job>,
    pub sources: Vec<Source>,
    pub tables: Vec<Table>,
    pub wants: Vec<crate::wants::RecurringWant>,
    /// Who is told of risks, misses, lateness and failures (`[[alert]]`), in file order.
    pub alerts: Vec<crate::alert::Alert>,
    /// Data-quality checks of job outputs (`[[check]]`), in file order.
    pub checks: Vec<Check>,
    /// The env names (from config executables) whose values the log records and shows; every
    /// other value is recorded as [`REDACTED`], since env often carries secrets.
    pub show_env: Vec<String>,
    /// `[openlineage]`, if the file has one (the environment's `OPENLINEAGE_*` may override it).
    pub openlineage: Option<OpenLineageGraphConfig>,
    index: PatternIndex,
}

/// Where the graph file says run events go as OpenLineage (`[openlineage]`). Every part is
/// optional: the binary fills what is missing from `OPENLINEAGE_URL` and the rest.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenLineageGraphConfig {
    /// The receiver's base URL (events go to `<url>/api/v1/lineage`), without a trailing `/`.
    pub url: Option<String>,
    /// The namespace of jobs and datasets; the graph's name when unset.
    pub namespace: Option<String>,
    /// The environment variable holding the API key (`OPENLINEAGE_API_KEY` when unset).
    pub api_key_env: Option<String>,
}

/// What the log records instead of an env value the graph does not mark safe to show.
pub const REDACTED: &str = "<redacted>";

/// The program a table version's runs execute: the `databuild` binary itself (`table-job`).
pub const TABLE_JOB_COMMAND: &str = "databuild table-job";

/// Whether `name` can name an environment variable: not empty, no `=` (which ends the name in
/// `NAME=value`) and no NUL byte. Checked when the graph loads, and again when a job starts (names
/// a config executable gives arrive only then).
pub fn is_env_name(name: &str) -> bool {
    !name.is_empty() && !name.contains(['=', '\0'])
}

impl Graph {
    /// An env value as the log may record it: itself for names in `show_env`, else [`REDACTED`].
    pub fn recorded_env_value<'v>(&self, name: &str, value: &'v str) -> &'v str {
        if self.show_env.iter().any(|n| n == name) {
            value
        } else {
            REDACTED
        }
    }

    /// Every input edge: (the producer of the data, the consuming job's index, the input
    /// template). A config job's inputs are known only per run: it has none here.
    pub fn edges(&self) -> Vec<(Producer, usize, &str)> {
        let mut out = Vec::new();
        for (j, job) in self.jobs.iter().enumerate() {
            match &job.deps {
                Deps::Static(templates) => {
                    for t in templates {
                        for &p in &t.reads {
                            out.push((p, j, t.template.as_str()));
                        }
                    }
                }
                Deps::Table { table, version } => {
                    let t = &self.tables[*table];
                    let raw = self
                        .datasets
                        .iter()
                        .position(|d| d.source == Some(t.source))
                        .expect("every source has a dataset");
                    out.push((
                        Producer::Dataset(raw),
                        j,
                        self.datasets[raw].pattern.as_str(),
                    ));
                    if let Some(prev) = t.previous(*version) {
                        out.push((
                            Producer::Job {
                                job: prev.job,
                                output: 0,
                            },
                            j,
                            "carry forward",
                        ));
                    }
                }
                Deps::Dynamic { .. } => {}
            }
        }
        out
    }

    /// The jobs each job reads the outputs of, by index (aliases and datasets left out).
    pub fn job_inputs(&self) -> Vec<Vec<usize>> {
        let mut inputs = vec![Vec::new(); self.jobs.len()];
        for (producer, consumer, _) in self.edges() {
            if let Producer::Job { job, .. } = producer {
                if !inputs[consumer].contains(&job) {
                    inputs[consumer].push(job);
                }
            }
        }
        inputs
    }

    pub fn job(&self, name: &str) -> Option<&Job> {
        self.jobs.iter().find(|j| j.name == name)
    }

    /// The checks of `r` (a job output), in file order.
    pub fn checks_of(&self, r: &str) -> Vec<&Check> {
        if self.checks.is_empty() {
            return Vec::new();
        }
        match self.producer_of(r) {
            Some((p, _)) => self.checks.iter().filter(|c| c.applies(p)).collect(),
            None => Vec::new(),
        }
    }

    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().find(|c| c.name == name)
    }

    pub fn pattern_of(&self, producer: Producer) -> &Pattern {
        match producer {
            Producer::Job { job, output } => &self.jobs[job].outputs[output],
            Producer::Dataset(d) => &self.datasets[d].pattern,
            Producer::Alias(t) => &self.tables[t].alias,
        }
    }

    pub fn table(&self, name: &str) -> Option<&Table> {
        self.tables.iter().find(|t| t.name == name)
    }

    pub fn source(&self, name: &str) -> Option<&Source> {
        self.sources.iter().find(|s| s.name == name)
    }

    /// Who produces `r`, with the field values the ref carries.
    pub fn producer_of<'r>(&self, r: &'r str) -> Option<(Producer, Vec<&'r str>)> {
        self.index.lookup(r, self)
    }

    /// Every named pattern: datasets, then job outputs.
    pub fn producers(&self) -> impl Iterator<Item = Producer> + '_ {
        let datasets = (0..self.datasets.len()).map(Producer::Dataset);
        let jobs = self.jobs.iter().enumerate().flat_map(|(j, job)| {
            (0..job.outputs.len()).map(move |o| Producer::Job { job: j, output: o })
        });
        let aliases = (0..self.tables.len()).map(Producer::Alias);
        datasets.chain(jobs).chain(aliases)
    }

    /// Why no producer matches `r`, as a sentence naming it: a typed field's text that is not of
    /// its type when `r` has a pattern's literal shape ([`Graph::mismatch_reason`]), else that
    /// nothing builds or declares it, and the closest pattern if one is ([`Graph::closest_pattern`]).
    pub fn unmatched_reason(&self, r: &str) -> String {
        self.mismatch_reason(r)
            .unwrap_or_else(|| match self.closest_pattern(r) {
                Some(pattern) => format!(
                    "no job builds `{r}` and no dataset declares it (closest pattern: `{pattern}`)"
                ),
                None => format!("no job builds `{r}` and no dataset declares it"),
            })
    }

    /// The pattern whose name (its first segment) is close to `r`'s, as a typo is (`clen/…` for
    /// `clean/…`): within two edits, or a third of the name's length; the nearest, then the first
    /// in order.
    pub fn closest_pattern(&self, r: &str) -> Option<String> {
        let head = |s: &str| s.split('/').next().unwrap_or_default().to_string();
        let asked = head(r);
        self.producers()
            .map(|p| self.pattern_of(p).to_string())
            .map(|pattern| (edit_distance(&asked, &head(&pattern)), pattern))
            .filter(|(d, _)| *d <= 2.max(asked.chars().count() / 3))
            .min_by(|a, b| a.0.cmp(&b.0).then_with(|| a.1.cmp(&b.1)))
            .map(|(_, pattern)| pattern)
    }

    /// When `r` has a pattern's literal shape but a typed field's text is not of its type
    /// (`2024-13-01` for a `date`): a sentence saying so, naming the field, the ref and the pattern.
    pub fn mismatch_reason(&self, r: &str) -> Option<String> {
        let (p, m) = self.index.mismatch(r, self)?;
        let verb = if matches!(p, Producer::Job { .. }) {
            "builds"
        } else {
            "declares"
        };
        Some(format!(
            "{m} in `{r}` ({} {verb} `{}`)",
            self.describe_producer(p),
            self.pattern_of(p)
        ))
    }

    /// A producer as a sentence names it: ``job `x` ``, ``dataset `raw` ``, ``table `orders` ``.
    pub fn describe_producer(&self, p: Producer) -> String {
        let kind = match p {
            Producer::Job { .. } => "job",
            Producer::Dataset(_) => "dataset",
            Producer::Alias(_) => "table",
        };
        format!("{kind} `{}`", self.producer_name(p))
    }

    /// A human name for a producer: the dataset or the job.
    pub fn producer_name(&self, p: Producer) -> &str {
        match p {
            Producer::Job { job, .. } => &self.jobs[job].name,
            Producer::Dataset(d) => &self.datasets[d].name,
            Producer::Alias(t) => &self.tables[t].name,
        }
    }
}

/// Levenshtein distance of two short names, in characters.
fn edit_distance(a: &str, b: &str) -> usize {
    let b: Vec<char> = b.chars().collect();
    let mut row: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.chars().enumerate() {
        let mut prev = row[0];
        row[0] = i + 1;
        for (j, cb) in b.iter().enumerate() {
            let cur = row[j + 1];
            row[j + 1] = (prev + usize::from(ca != *cb)).min(row[j] + 1).min(cur + 1);
            prev = cur;
        }
    }
    row[b.len()]
}

/// Finds candidate patterns by their literal prefix: only patterns whose prefix starts the ref can
/// match it, and graphs have few distinct prefix lengths, so a lookup is a handful of hash probes.
#[derive(Debug, Clone, Default)]
struct PatternIndex {
    by_prefix: FxHashMap<String, Vec<Producer>>,
    prefix_lengths: Vec<usize>,
}

impl PatternIndex {
    fn build(graph: &Graph) -> PatternIndex {
        let mut index = PatternIndex::default();
        for p in graph.producers() {
            let prefix = graph.pattern_of(p).literal_prefix().to_string();
            index.prefix_lengths.push(prefix.len());
            index.by_prefix.entry(prefix).or_default().push(p);
        }
        index.prefix_lengths.sort_unstable();
        index.prefix_lengths.dedup();
        index
    }

    fn candidates<'a>(&'a self, r: &'a str) -> impl Iterator<Item = Producer> + 'a {
        self.prefix_lengths
            .iter()
            .take_while(move |&&len| len <= r.len())
            .filter(move |&&len| r.is_char_boundary(len))
            .filter_map(move |&len| self.by_prefix.get(&r[..len]))
            .flatten()
            .copied()
    }

    fn lookup<'r>(&self, r: &'r str, graph: &Graph) -> Option<(Producer, Vec<&'r str>)> {
        self.candidates(r)
            .find_map(|p| graph.pattern_of(p).match_ref(r).map(|values| (p, values)))
    }

    /// The first pattern whose literal shape `r` has, and the field whose text is not of its type.
    fn mismatch(&self, r: &str, graph: &Graph) -> Option<(Producer, FieldMismatch)> {
        self.candidates(r)
            .find_map(|p| graph.pattern_of(p).field_mismatch(r).map(|m| (p, m)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const PODCAST: &str = r#"
[graph]
name = "podcast_reviews"

[graph.domains]
category = ["comedy", "news"]

[[dataset]]
name = "raw_reviews"
pattern = "raw/reviews/date={date:date}"

[[job]]
name = "extract_reviews"
outputs = ["reviews/date={date:date}"]
inputs = ["raw/reviews/date={date}"]
command = ["python3", "jobs/extract_reviews.py"]
version = 2
timeout = "10m"
retries = 1
concurrency = 2
batch = 4
env = { MODE = "fast" }

[[job]]
name = "summary"
outputs = ["summary/category={category}/date={date:date}"]
inputs = ["reviews/date={date-6d..date}"]
command = ["python3", "jobs/summary.py"]
"#;

    pub(crate) fn load(text: &str) -> Result<Graph, GraphError> {
        Graph::parse(text, "databuild.toml")
    }

    pub(crate) fn load_err(text: &str) -> String {
        load(text).unwrap_err().to_string()
    }

    #[test]
    fn loads_the_contract_example() {
        let g = load(PODCAST).unwrap();
        assert_eq!(g.name, "podcast_reviews");
        assert_eq!(g.data_dir, "data");
        let job = g.job("extract_reviews").unwrap();
        assert_eq!(job.version, "2");
        assert_eq!(job.timeout, Some(Duration::from_secs(600)));
        assert_eq!((job.retries, job.concurrency, job.batch), (1, Some(2), 4));
        let (p, values) = g
            .producer_of("summary/category=news/date=2020-01-01")
            .unwrap();
        assert_eq!(p, Producer::Job { job: 1, output: 0 });
        assert_eq!(values, ["news", "2020-01-01"]);
        assert_eq!(
            g.producer_of("raw/reviews/date=2020-01-01").unwrap().0,
            Producer::Dataset(0)
        );
        assert!(g.producer_of("raw/reviews/date=2020-13-01").is_none());
        assert!(g.producer_of("nothing").is_none());
    }

    #[test]
    fn unmatched_refs_say_which_field_is_wrong_or_that_nothing_makes_them() {
        let g = load(PODCAST).unwrap();
        assert_eq!(
            g.unmatched_reason("raw/reviews/date=2020-13-01"),
            "`2020-13-01` is not a valid date for field `date` in `raw/reviews/date=2020-13-01` (dataset `raw_reviews` declares `raw/reviews/date={date:date}`)"
        );
        assert_eq!(
            g.unmatched_reason("summary/category=news/date=2020-02-30"),
            "`2020-02-30` is not a valid date for field `date` in `summary/category=news/date=2020-02-30` (job `summary` builds `summary/category={category}/date={date:date}`)"
        );
        assert_eq!(
            g.unmatched_reason("nothing/date=2020-13-01"),
            "no job builds `nothing/date=2020-13-01` and no dataset declares it"
        );
        assert_eq!(
            g.unmatched_reason("sumary/category=news/date=2020-02-01"),
            "no job builds `sumary/category=news/date=2020-02-01` and no dataset declares it (closest pattern: `summary/category={category}/date={date:date}`)"
        );
        assert_eq!(
            g.describe_producer(Producer::Dataset(0)),
            "dataset `raw_reviews`"
        );
    }

    #[test]
    fn index_finds_the_one_producer_among_many() {
        let mut text = String::from("[graph]\nname = \"big\"\n");
        for i in 0..500 {
            text.push_str(&format!(
                "[[job]]\nname = \"j{i}\"\noutputs = [\"t{i}/date={{date:date}}\", \"t{i}/n={{n:int}}\"]\ncommand = [\"x\"]\n"
            ));
        }
        let g = load(&text).unwrap();
        let (p, values) = g.producer_of("t377/n=5").unwrap();
        assert_eq!(
            p,
            Producer::Job {
                job: 377,
                output: 1
            }
        );
        assert_eq!(values, ["5"]);
    }

    #[test]
    fn checks_apply_to_a_job_or_one_of_its_output_patterns() {
        let text = format!(
            "{PODCAST}\n[[check]]\nname = \"has_rows\"\napplies_to = \"summary\"\ncommand = [\"true\"]\nversion = 2\n\n[[check]]\nname = \"soft\"\napplies_to = \"reviews/date={{date:date}}\"\ncommand = [\"true\"]\nblocking = false\ntimeout = \"1m\"\n"
        );
        let g = load(&text).unwrap();
        let names =
            |r: &str| -> Vec<String> { g.checks_of(r).iter().map(|c| c.name.clone()).collect() };
        assert_eq!(names("summary/category=news/date=2020-01-01"), ["has_rows"]);
        assert_eq!(names("reviews/date=2020-01-01"), ["soft"]);
        assert!(names("raw/reviews/date=2020-01-01").is_empty());
        let soft = g.check("soft").unwrap();
        assert!(!soft.blocking);
        assert_eq!(soft.timeout, Some(Duration::from_secs(60)));
        assert_eq!(g.check("has_rows").unwrap().version, "2");
        assert!(g.check("has_rows").unwrap().blocking);
    }

    #[test]
    fn openlineage_names_a_url_a_namespace_and_the_key_s_variable() {
        let g = load(&format!(
            "{PODCAST}\n[openlineage]\nurl = \"http://marquez:5000/\"\nnamespace = \"sales\"\napi_key_env = \"MARQUEZ_KEY\"\n"
        ))
        .unwrap();
        let ol = g.openlineage.unwrap();
        assert_eq!(ol.url.as_deref(), Some("http://marquez:5000"));
        assert_eq!(ol.namespace.as_deref(), Some("sales"));
        assert_eq!(ol.api_key_env.as_deref(), Some("MARQUEZ_KEY"));
        assert_eq!(load(PODCAST).unwrap().openlineage, None);
        let refused = |section: &str| {
            load(&format!("{PODCAST}\n[openlineage]\n{section}\n"))
                .unwrap_err()
                .to_string()
        };
        assert!(refused("url = \"marquez:5000\"").contains("not an http:// or https:// URL"));
        assert!(refused("namespace = \" \"").contains("`namespace` cannot be empty"));
        assert!(refused("api_key_env = \"my secret\"").contains("never the key itself"));
        assert!(refused("api_key = \"k\"").contains("unknown field"));
    }
}
