//! Log events into OpenLineage `RunEvent`s (spec 2-0-2), purely: a run's `running` is its
//! `START`, `completed` its `COMPLETE`, `failed` its `FAIL`, `cancelled` its `ABORT`. A run's
//! events arrive over several appends (what it builds and reads at `scheduled`, the versions it
//! read at `queued`, its outputs' versions beside its `completed`), so the [`Translator`] keeps
//! each run from its `scheduled` to its end.

use std::collections::{BTreeMap, HashMap};

use databuild_core::Graph;
use databuild_log::{Event, Kind, Status};
use serde::Serialize;
use serde_json::{Map, Value};

/// Who wrote the events: this program at its version (the spec asks for a URI).
pub const PRODUCER: &str = concat!(
    "https://github.com/databuild/databuild/tree/v",
    env!("CARGO_PKG_VERSION")
);
/// The version of the spec the events follow.
pub const SCHEMA_URL: &str = "https://openlineage.io/spec/2-0-2/OpenLineage.json#/$defs/RunEvent";
/// Where DataBuild's own facets are described (contract, "OpenLineage"); each facet's
/// `_schemaURL` is this with its name as the fragment.
const FACETS_URL: &str =
    "https://github.com/databuild/databuild/blob/main/docs/CONTRACT.md#openlineage-facets-";
const ERROR_FACET_URL: &str =
    "https://openlineage.io/spec/facets/1-0-1/ErrorMessageRunFacet.json#/$defs/ErrorMessageRunFacet";
const STATS_FACET_URL: &str = "https://openlineage.io/spec/facets/1-0-2/OutputStatisticsOutputDatasetFacet.json#/$defs/OutputStatisticsOutputDatasetFacet";

/// The spec's `eventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum EventType {
    Start,
    Complete,
    Fail,
    Abort,
}

/// One OpenLineage `RunEvent`.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunEvent {
    pub event_type: EventType,
    pub event_time: String,
    pub run: Run,
    pub job: JobId,
    pub inputs: Vec<InputDataset>,
    pub outputs: Vec<OutputDataset>,
    pub producer: &'static str,
    #[serde(rename = "schemaURL")]
    pub schema_url: &'static str,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Run {
    pub run_id: String,
    pub facets: RunFacets,
}

/// DataBuild's facets are named `databuild_*`; the spec's keep their camelCase names.
#[derive(Debug, Clone, Serialize)]
pub struct RunFacets {
    pub databuild_run: RunFacet,
    /// What the run used (`resources` of its end event), when it was measured.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub databuild_resources: Option<ValuesFacet>,
    /// What the run reported (`metrics` of its end event), by output ref.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub databuild_metrics: Option<ValuesFacet>,
    #[serde(rename = "errorMessage", skip_serializing_if = "Option::is_none")]
    pub error_message: Option<ErrorMessageFacet>,
}

/// Every facet's two required fields.
#[derive(Debug, Clone, Serialize)]
pub struct FacetBase {
    #[serde(rename = "_producer")]
    pub producer: &'static str,
    #[serde(rename = "_schemaURL")]
    pub schema_url: String,
}

impl FacetBase {
    fn ours(name: &str) -> FacetBase {
        FacetBase::at(format!("{FACETS_URL}{name}"))
    }

    fn at(schema_url: impl Into<String>) -> FacetBase {
        FacetBase {
            producer: PRODUCER,
            schema_url: schema_url.into(),
        }
    }
}

/// `databuild_run`: the run as DataBuild knows it (its id need not be a UUID, which `runId` is).
#[derive(Debug, Clone, Serialize)]
pub struct RunFacet {
    #[serde(flatten)]
    pub base: FacetBase,
    pub job_run_id: String,
    pub build_request_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// A facet whose fields are an object of the log event's, carried as they are.
#[derive(Debug, Clone, Serialize)]
pub struct ValuesFacet {
    #[serde(flatten)]
    pub base: FacetBase,
    #[serde(flatten)]
    pub values: Map<String, Value>,
}

/// The spec's `errorMessage` facet, which lineage tools show on a failed run.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ErrorMessageFacet {
    #[serde(flatten)]
    pub base: FacetBase,
    pub message: String,
    /// A job is any program: DataBuild does not know its language.
    pub programming_language: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct JobId {
    pub namespace: String,
    pub name: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct InputDataset {
    pub namespace: String,
    pub name: String,
    pub facets: DatasetFacets,
}

#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputDataset {
    pub namespace: String,
    pub name: String,
    pub facets: DatasetFacets,
    #[serde(skip_serializing_if = "OutputFacets::is_empty")]
    pub output_facets: OutputFacets,
}

#[derive(Debug, Clone, Serialize)]
pub struct DatasetFacets {
    pub databuild_partitions: PartitionsFacet,
}

/// `databuild_partitions`: the partitions of the dataset the run read or wrote, each with the
/// data version it had (an output's is known once the run completed).
#[derive(Debug, Clone, Serialize)]
pub struct PartitionsFacet {
    #[serde(flatten)]
    pub base: FacetBase,
    pub partitions: Vec<PartitionVersion>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PartitionVersion {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub data_version: Option<String>,
}

#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputFacets {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output_statistics: Option<OutputStatistics>,
}

impl OutputFacets {
    fn is_empty(&self) -> bool {
        self.output_statistics.is_none()
    }
}

/// The spec's `outputStatistics`: the rows the run reported writing to the dataset's partitions.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct OutputStatistics {
    #[serde(flatten)]
    pub base: FacetBase,
    pub row_count: u64,
}

/// A run from its `scheduled` to its end: what the events of its end do not repeat.
#[derive(Debug, Default)]
struct RunState {
    inputs: Vec<String>,
    outputs: Vec<String>,
    read: BTreeMap<String, String>,
    attempt: Option<u32>,
    started: bool,
}

/// Log events in, `RunEvent`s out, for runs this process drives (their `scheduled` went
/// through it). A run whose START it did not send gets no end either.
#[derive(Debug, Default)]
pub struct Translator {
    runs: HashMap<String, RunState>,
}

impl Translator {
    /// The `RunEvent`s of one appended batch, in order, for jobs and datasets of `namespace`.
    pub fn feed(&mut self, graph: &Graph, namespace: &str, events: &[Event]) -> Vec<RunEvent> {
        let built = built_versions(events);
        let mut out = Vec::new();
        for e in events.iter().filter(|e| e.kind == Kind::JobRun) {
            let Some(id) = e.job_run_id.as_deref() else {
                continue;
            };
            let event_type = match e.status {
                Status::Scheduled => {
                    self.runs.insert(id.to_string(), scheduled(e));
                    continue;
                }
                Status::Queued => {
                    if let Some(run) = self.runs.get_mut(id) {
                        run.read = e.data.input_versions.clone();
                    }
                    continue;
                }
                Status::Running => EventType::Start,
                Status::Completed => EventType::Complete,
                Status::Failed => EventType::Fail,
                Status::Cancelled => EventType::Abort,
                _ => {
                    self.runs.remove(id);
                    continue;
                }
            };
            let ended;
            let run: &RunState = if event_type == EventType::Start {
                let run = self.runs.entry(id.to_string()).or_default();
                run.started = true;
                run
            } else {
                match self.runs.remove(id) {
                    Some(run) if run.started => {
                        ended = run;
                        &ended
                    }
                    _ => continue,
                }
            };
            let of = Of {
                graph,
                namespace,
                event: e,
                built: built.get(id),
            };
            out.push(of.run_event(event_type, run));
        }
        out
    }
}

fn scheduled(e: &Event) -> RunState {
    RunState {
        inputs: e.data.inputs.clone(),
        outputs: e.data.outputs.clone(),
        attempt: e.data.attempt,
        ..RunState::default()
    }
}

/// Each run's outputs' data versions, from the `partition available` events beside its end.
fn built_versions(events: &[Event]) -> HashMap<&str, BTreeMap<&str, &str>> {
    let mut built: HashMap<&str, BTreeMap<&str, &str>> = HashMap::new();
    for e in events {
        if let (Kind::Partition, Status::Available, Some(run), Some(r), Some(v)) = (
            e.kind,
            e.status,
            e.job_run_id.as_deref(),
            e.partition_ref.as_deref(),
            e.data.data_version.as_deref(),
        ) {
            built.entry(run).or_default().insert(r, v);
        }
    }
    built
}

/// What one `RunEvent` is made of.
struct Of<'a> {
    graph: &'a Graph,
    namespace: &'a str,
    event: &'a Event,
    built: Option<&'a BTreeMap<&'a str, &'a str>>,
}

impl Of<'_> {
    fn run_event(&self, event_type: EventType, run: &RunState) -> RunEvent {
        let e = self.event;
        let id = e.job_run_id.clone().unwrap_or_default();
        // What the run cost and what it reported, as recorded on its end (`resources`,
        // `metrics`), carried as they are into run facets.
        let resources = e
            .data
            .resources
            .as_ref()
            .and_then(|r| serde_json::to_value(r).ok());
        let metrics = e.data.metrics.as_ref().and_then(non_empty);
        let inputs = if run.read.is_empty() {
            run.inputs.iter().map(|r| (r.clone(), None)).collect()
        } else {
            run.read
                .iter()
                .map(|(r, v)| (r.clone(), Some(v.clone())))
                .collect()
        };
        let outputs = run.outputs.iter().map(|r| {
            let version = self
                .built
                .and_then(|b| b.get(r.as_str()))
                .map(|v| v.to_string());
            (r.clone(), version)
        });
        RunEvent {
            event_type,
            event_time: crate::answers::rfc3339(e.timestamp),
            run: Run {
                run_id: run_uuid(&id),
                facets: RunFacets {
                    databuild_run: RunFacet {
                        base: FacetBase::ours("databuild_run"),
                        job_run_id: id,
                        build_request_id: e.build_request_id.clone(),
                        attempt: e.data.attempt.or(run.attempt),
                        exit_code: e.data.exit_code,
                        message: e.message.clone(),
                    },
                    databuild_resources: resources
                        .as_ref()
                        .and_then(non_empty)
                        .map(|v| values_facet(v, "databuild_resources")),
                    databuild_metrics: metrics.map(|v| values_facet(v, "databuild_metrics")),
                    error_message: (event_type == EventType::Fail).then(|| ErrorMessageFacet {
                        base: FacetBase::at(ERROR_FACET_URL),
                        message: e.message.clone().unwrap_or_else(|| "the run failed".into()),
                        programming_language: "unknown",
                    }),
                },
            },
            job: JobId {
                namespace: self.namespace.to_string(),
                name: e.job.clone().unwrap_or_default(),
            },
            inputs: self
                .datasets(inputs)
                .into_iter()
                .map(|(name, facets)| InputDataset {
                    namespace: self.namespace.to_string(),
                    name,
                    facets,
                })
                .collect(),
            outputs: self
                .datasets(outputs.collect())
                .into_iter()
                .map(|(name, facets)| OutputDataset {
                    output_facets: output_facets(&facets, metrics),
                    namespace: self.namespace.to_string(),
                    name,
                    facets,
                })
                .collect(),
            producer: PRODUCER,
            schema_url: SCHEMA_URL,
        }
    }

    /// Partitions grouped by dataset, in the order first met: lineage tools know a dataset by
    /// its namespace and name, so a run reading seven days of `clean` reads `clean` once.
    fn datasets(&self, partitions: Vec<(String, Option<String>)>) -> Vec<(String, DatasetFacets)> {
        let mut sets: Vec<(String, DatasetFacets)> = Vec::new();
        for (r, version) in partitions {
            let name = dataset_name(self.graph, &r);
            let partition = PartitionVersion {
                partition_ref: r,
                data_version: version,
            };
            match sets.iter_mut().find(|(n, _)| *n == name) {
                Some((_, facets)) => facets.databuild_partitions.partitions.push(partition),
                None => sets.push((
                    name,
                    DatasetFacets {
                        databuild_partitions: PartitionsFacet {
                            base: FacetBase::ours("databuild_partitions"),
                            partitions: vec![partition],
                        },
                    },
                )),
            }
        }
        sets
    }
}

/// `outputStatistics` of an output dataset: the sum of the `rows` metrics the run reported for
/// its partitions, when it reported any.
fn output_facets(facets: &DatasetFacets, metrics: Option<&Map<String, Value>>) -> OutputFacets {
    let rows = facets
        .databuild_partitions
        .partitions
        .iter()
        .filter_map(|p| metrics?.get(&p.partition_ref)?.get("rows")?.as_u64());
    let mut rows = rows.peekable();
    OutputFacets {
        output_statistics: rows.peek().is_some().then(|| OutputStatistics {
            base: FacetBase::at(STATS_FACET_URL),
            row_count: rows.sum(),
        }),
    }
}

fn non_empty(v: &Value) -> Option<&Map<String, Value>> {
    v.as_object().filter(|o| !o.is_empty())
}

fn values_facet(values: &Map<String, Value>, facet: &str) -> ValuesFacet {
    ValuesFacet {
        base: FacetBase::ours(facet),
        values: values.clone(),
    }
}

/// The dataset a ref belongs to, as lineage tools will name it: its pattern's literal start up
/// to its last `/` (`clean` of `clean/date={date:date}`), the whole pattern if it has no field,
/// else the name of its job or dataset.
pub fn dataset_name(graph: &Graph, r: &str) -> String {
    let Some((producer, _)) = graph.producer_of(r) else {
        return r.rsplit_once('/').map_or(r, |(dir, _)| dir).to_string();
    };
    let pattern = graph.pattern_of(producer);
    let prefix = pattern.literal_prefix();
    if prefix == pattern.as_str() {
        return prefix.to_string();
    }
    match prefix.rsplit_once('/') {
        Some((dir, _)) if !dir.is_empty() => dir.to_string(),
        _ => graph.producer_name(producer).to_string(),
    }
}

/// A run's OpenLineage `runId`, a UUID: DataBuild's id when it is one (they are UUIDv7s), else a
/// UUIDv8 of its SHA-256, stable for the id.
pub fn run_uuid(id: &str) -> String {
    if is_uuid(id) {
        return id.to_ascii_lowercase();
    }
    use sha2::Digest as _;
    let digest = sha2::Sha256::digest(format!("databuild job run {id}").as_bytes());
    let mut b = [0u8; 16];
    b.copy_from_slice(&digest[..16]);
    b[6] = (b[6] & 0x0f) | 0x80;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex = crate::hashing::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

fn is_uuid(id: &str) -> bool {
    id.len() == 36
        && id.char_indices().all(|(i, c)| match i {
            8 | 13 | 18 | 23 => c == '-',
            _ => c.is_ascii_hexdigit(),
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const GRAPH: &str = r#"
[graph]
name = "sales"

[[dataset]]
name = "raw"
pattern = "raw/date={date:date}"

[[job]]
name = "clean"
outputs = ["clean/date={date:date}"]
inputs = ["raw/date={date}"]
command = ["true"]

[[job]]
name = "weekly"
outputs = ["weekly/week={week}"]
inputs = ["clean/date=2024-01-01", "clean/date=2024-01-02"]
command = ["true"]
"#;

    const RUN: &str = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";

    fn graph() -> Graph {
        Graph::parse(GRAPH, "databuild.toml").unwrap()
    }

    fn run_event(status: Status) -> Event {
        let mut e = Event::job_run("b1", RUN, "weekly", status);
        e.timestamp = 1_700_000_000_123_000_000;
        e
    }

    /// A run of `weekly` scheduled, claimed, started, then ended as `end`.
    fn lived(end: Event) -> Vec<Value> {
        let scheduled = run_event(Status::Scheduled).with_data(|d| {
            d.inputs = vec![
                "clean/date=2024-01-01".into(),
                "clean/date=2024-01-02".into(),
            ];
            d.outputs = vec!["weekly/week=2024-01".into()];
        });
        let queued = run_event(Status::Queued).with_data(|d| {
            d.input_versions = [
                ("clean/date=2024-01-01".to_string(), "v1".to_string()),
                ("clean/date=2024-01-02".to_string(), "v2".to_string()),
            ]
            .into();
        });
        let available = Event::partition(Some("b1"), "weekly/week=2024-01", Status::Available)
            .with_run(RUN)
            .with_data(|d| d.data_version = Some("w1".into()));
        let (g, mut t) = (graph(), Translator::default());
        let mut out = t.feed(&g, "ns", &[scheduled, queued]);
        out.extend(t.feed(&g, "ns", &[run_event(Status::Running)]));
        out.extend(t.feed(&g, "ns", &[end, available]));
        out.iter()
            .map(|e| serde_json::to_value(e).unwrap())
            .collect()
    }

    #[test]
    fn a_run_is_a_start_then_a_complete_with_its_datasets_and_versions() {
        let events = lived(run_event(Status::Completed).with_data(|d| d.exit_code = Some(0)));
        assert_eq!(events.len(), 2);
        let (start, complete) = (&events[0], &events[1]);
        assert_eq!(start["eventType"], "START");
        assert_eq!(start["eventTime"], "2023-11-14T22:13:20.123Z");
        assert_eq!(start["run"]["runId"], RUN);
        assert_eq!(start["job"], json!({"namespace": "ns", "name": "weekly"}));
        // Two partitions of one dataset are one input, each partition at the version read.
        assert_eq!(start["inputs"].as_array().unwrap().len(), 1);
        assert_eq!(start["inputs"][0]["name"], "clean");
        assert_eq!(
            start["inputs"][0]["facets"]["databuild_partitions"]["partitions"],
            json!([{"ref": "clean/date=2024-01-01", "data_version": "v1"},
                   {"ref": "clean/date=2024-01-02", "data_version": "v2"}])
        );
        assert_eq!(start["outputs"][0]["name"], "weekly");
        assert_eq!(complete["eventType"], "COMPLETE");
        assert_eq!(
            complete["outputs"][0]["facets"]["databuild_partitions"]["partitions"],
            json!([{"ref": "weekly/week=2024-01", "data_version": "w1"}])
        );
        let run = &complete["run"]["facets"]["databuild_run"];
        assert_eq!(run["job_run_id"], RUN);
        assert_eq!(run["build_request_id"], "b1");
        assert_eq!(run["_producer"], PRODUCER);
        assert!(run["_schemaURL"].as_str().unwrap().starts_with("https://"));
    }

    #[test]
    fn a_failed_run_is_a_fail_with_its_message_and_a_cancelled_one_an_abort() {
        let failed = lived(run_event(Status::Failed).with_message("exit code 3"));
        assert_eq!(failed[1]["eventType"], "FAIL");
        assert_eq!(
            failed[1]["run"]["facets"]["errorMessage"]["message"],
            "exit code 3"
        );
        let cancelled = lived(run_event(Status::Cancelled));
        assert_eq!(cancelled[1]["eventType"], "ABORT");
        assert!(cancelled[1]["run"]["facets"].get("errorMessage").is_none());
    }

    #[test]
    fn a_run_that_never_started_sends_nothing() {
        let (g, mut t) = (graph(), Translator::default());
        let events = [
            run_event(Status::Scheduled),
            run_event(Status::Queued),
            run_event(Status::Cancelled),
        ];
        assert!(t.feed(&g, "ns", &events).is_empty());
        assert!(t.runs.is_empty(), "an ended run is forgotten");
    }

    #[test]
    fn resources_and_metrics_of_the_end_event_are_run_facets_and_rows_output_statistics() {
        let events = lived(run_event(Status::Completed).with_data(|d| {
            d.metrics = Some(json!({"weekly/week=2024-01": {"rows": 7}}));
            d.resources = Some(databuild_log::RunResources {
                wall_ms: Some(1200),
                max_rss_bytes: Some(4096),
                ..Default::default()
            });
        }));
        let complete = &events[1];
        let resources = &complete["run"]["facets"]["databuild_resources"];
        assert_eq!(resources["wall_ms"], 1200);
        assert_eq!(resources["max_rss_bytes"], 4096);
        assert_eq!(resources["_producer"], PRODUCER);
        assert_eq!(
            complete["run"]["facets"]["databuild_metrics"]["weekly/week=2024-01"]["rows"],
            7
        );
        assert_eq!(
            complete["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"],
            7
        );
        let bare = lived(run_event(Status::Completed));
        assert!(bare[1]["run"]["facets"]
            .get("databuild_resources")
            .is_none());
    }

    #[test]
    fn run_ids_that_are_not_uuids_get_a_stable_one() {
        assert_eq!(run_uuid(RUN), RUN);
        assert_eq!(run_uuid(&RUN.to_uppercase()), RUN);
        let derived = run_uuid("run-42");
        assert!(is_uuid(&derived), "{derived}");
        assert_eq!(&derived[14..15], "8", "a UUIDv8: {derived}");
        assert_eq!(derived, run_uuid("run-42"));
        assert_ne!(derived, run_uuid("run-43"));
    }

    #[test]
    fn a_ref_s_dataset_is_its_pattern_s_literal_folder() {
        let g = graph();
        assert_eq!(dataset_name(&g, "clean/date=2024-01-01"), "clean");
        assert_eq!(dataset_name(&g, "raw/date=2024-01-01"), "raw");
        assert_eq!(dataset_name(&g, "nowhere/x=1"), "nowhere");
    }
}
