//! `lineage`: the exact history of a partition, up and down the graph.
//!
//! A partition *instance* is one materialization: the output of a completed run (its id is the
//! run's), or, for an external partition or a source day, its data at one data version. Each
//! run records, when it starts, the instance of every input it reads (`input_versions`, and
//! `input_runs` for inputs a job built); `run_inputs` indexes that the other way round. So
//! upstream follows what a run *read*, not what it would read today, and an instance that was
//! superseded since still names the instances it was built from.

use databuild_core::KnownState;
use databuild_log::{EventFilter, JobRunRow, Kind, ReadersOf, Status};
use serde::{Deserialize, Serialize};

use crate::answers::rfc3339;
use crate::answers::{InputRun, WaitingPartition, WantBuild, WantRun};
use crate::engine::{Engine, EngineError, Result};

/// The most nodes one answer holds; past it, nodes say their children were left out.
pub const MAX_NODES: usize = 5_000;
/// The most readers of one instance followed.
const MAX_READERS: usize = 1_000;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// The instances and runs it was built from.
    #[default]
    Upstream,
    /// Every partition built from it, and from those.
    Downstream,
}

/// The answer of `lineage`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct Lineage {
    pub direction: Direction,
    pub depth: u32,
    pub root: LineageNode,
    /// How many nodes the tree holds.
    pub nodes: usize,
    /// The partition's instances over time, oldest first (the last [`HISTORY`]): each made by a
    /// run, then tainted, removed or superseded by the next.
    pub history: Vec<InstanceEvent>,
}

/// How many of a partition's instance events a lineage answer holds.
pub const HISTORY: usize = 100;

/// Something that happened to a partition's instance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InstanceEvent {
    /// `built` (a run made a new instance), `failed` (a run failed to), `tainted`, `removed`.
    pub what: String,
    pub job_run_id: Option<String>,
    pub data_version: Option<String>,
    pub message: Option<String>,
    pub at: String,
    pub at_ns: i64,
}

/// One instance of a partition in a lineage tree.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
#[schema(no_recursion)]
pub struct LineageNode {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// The run that built this instance; none for an external partition or a source day (its
    /// instance is its data version).
    pub job_run_id: Option<String>,
    pub job: Option<String>,
    pub build_request_id: Option<String>,
    /// The run's status.
    pub run_status: Option<Status>,
    pub data_version: Option<String>,
    /// When the run ended (RFC 3339), its ns beside it.
    pub built_at: Option<String>,
    pub built_at_ns: Option<i64>,
    /// The code its run ran, as a short fingerprint (12 hex digits of the sha256 of its
    /// recorded `code_versions`): two instances with the same ran the same code. Absent for an
    /// external partition and for a run recorded before code versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_version: Option<String>,
    /// This is the partition's current instance (the log names its run as the partition's);
    /// otherwise it was superseded (rebuilt, tainted and rebuilt, or removed).
    pub current: bool,
    /// Why the node has no children, or fewer than it could (depth reached, not recorded, ...).
    pub note: Option<String>,
    /// Read as a query input (`dep = "query"`: read if present, never required): upstream, its
    /// parent's run read it so; downstream, its run read its parent so. Such a read does not
    /// make what was built from it stale when it changes.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub query: bool,
    /// Upstream: the instances its run read. Downstream: the instances built from it.
    pub children: Vec<LineageNode>,
}

/// What to trace.
#[derive(Debug, Clone, Default)]
pub struct LineageQuery {
    pub partition_ref: String,
    pub direction: Direction,
    pub depth: u32,
    /// The run whose instance to start from; the partition's current one when none.
    pub instance: Option<String>,
}

/// One instance to expand: a partition and the run that built it, or its data version.
struct Instance {
    partition_ref: String,
    run: Option<String>,
    version: Option<String>,
    /// Read as a query input by the run on the other side of its edge.
    query: bool,
}

impl Engine {
    /// A partition's instances over time, from its events (indexed by partition): the runs that
    /// built it or failed to, its taints and removals.
    fn instance_history(&self, r: &str) -> Result<Vec<InstanceEvent>> {
        let events = self.store.events(&EventFilter {
            partition_ref: Some(r.to_string()),
            kind: Some(Kind::Partition),
            limit: Some(100_000),
            ..Default::default()
        })?;
        let mut history: Vec<InstanceEvent> = events
            .into_iter()
            .filter_map(|e| {
                let what = match (e.status, &e.job_run_id) {
                    (Status::Available, Some(_)) => "built",
                    (Status::Failed, Some(_)) => "failed",
                    (Status::Tainted, _) => "tainted",
                    (Status::Removed, _) => "removed",
                    _ => return None,
                };
                Some(InstanceEvent {
                    what: what.to_string(),
                    job_run_id: e.job_run_id,
                    data_version: e.data.data_version,
                    message: e.message,
                    at: rfc3339(e.timestamp),
                    at_ns: e.timestamp,
                })
            })
            .collect();
        let keep = history.len().saturating_sub(HISTORY);
        history.drain(..keep);
        Ok(history)
    }

    fn root_instance(&self, q: &LineageQuery) -> Result<Instance> {
        let r = q.partition_ref.as_str();
        if let Some(run) = &q.instance {
            let row = self.store.job_run(run)?.ok_or_else(|| {
                EngineError::NotFound(format!("no job run `{run}` in the event log"))
            })?;
            if !row.outputs.iter().any(|o| o == r) {
                return Err(EngineError::Invalid(format!(
                    "run {run} did not build `{r}` (it built {})",
                    row.outputs.join(", ")
                )));
            }
            return Ok(Instance {
                partition_ref: r.to_string(),
                run: Some(row.job_run_id),
                version: None,
                query: false,
            });
        }
        if let Some(row) = self.store.partition(r)?.filter(|p| p.job_run_id.is_some()) {
            return Ok(Instance {
                partition_ref: r.to_string(),
                run: row.job_run_id,
                version: row.data_version,
                query: false,
            });
        }
        let (version, _) = self.input_instance(r)?;
        if version.is_none() && self.graph.producer_of(r).is_none() {
            return Err(EngineError::Invalid(format!(
                "no lineage for `{r}`: {}",
                self.graph
                    .mismatch_reason(r)
                    .unwrap_or_else(|| "no job builds it and no dataset declares it".to_string())
            )));
        }
        match version {
            Some(version) => Ok(Instance {
                partition_ref: r.to_string(),
                run: None,
                version: Some(version),
                query: false,
            }),
            None => Err(EngineError::NotFound(format!(
                "`{r}` has no instance yet: no run has built it and no data of it is present"
            ))),
        }
    }

    fn node(
        &self,
        at: Instance,
        direction: Direction,
        depth: u32,
        budget: &mut usize,
    ) -> Result<LineageNode> {
        *budget = budget.saturating_sub(1);
        let row = match &at.run {
            Some(run) => self.store.job_run(run)?,
            None => None,
        };
        let mut node = self.describe(&at, row.as_ref())?;
        if depth == 0 {
            node.note = Some("depth reached".to_string());
            return Ok(node);
        }
        let next = match direction {
            Direction::Upstream => self.read_by(&at, row.as_ref(), &mut node),
            Direction::Downstream => {
                self.built_from(&at, node.data_version.as_deref(), ReadersOf::Instance)?
            }
        };
        for instance in next {
            if *budget == 0 {
                node.note = Some(format!("more left out: an answer holds {MAX_NODES} nodes"));
                break;
            }
            node.children
                .push(self.node(instance, direction, depth - 1, budget)?);
        }
        Ok(node)
    }

    /// The node of an instance, without its children.
    fn describe(&self, at: &Instance, run: Option<&JobRunRow>) -> Result<LineageNode> {
        let partition = self.store.partition(&at.partition_ref)?;
        let current = match (&at.run, &partition) {
            (Some(run), Some(p)) => p.job_run_id.as_deref() == Some(run.as_str()),
            // An external's instance is its data as it is now, or was when a run read it.
            (None, _) => at.version == self.input_instance(&at.partition_ref)?.0,
            (Some(_), None) => false,
        };
        let data_version = match (&at.version, &at.run, &partition) {
            (Some(v), _, _) => Some(v.clone()),
            (None, Some(_), Some(p)) if current => p.data_version.clone(),
            (None, Some(run), _) => self.version_built_by(&at.partition_ref, run)?,
            (None, None, _) => None,
        };
        let note = match (&at.run, run) {
            (None, _) => Some("external: its instance is its data version".to_string()),
            (Some(_), None) => Some("its run is not in this event log".to_string()),
            _ => None,
        };
        Ok(LineageNode {
            partition_ref: at.partition_ref.clone(),
            job_run_id: at.run.clone(),
            job: run.map(|r| r.job.clone()),
            build_request_id: run.and_then(|r| r.build_request_id.clone()),
            run_status: run.map(|r| r.status),
            data_version,
            built_at: run.and_then(|r| r.ended_at).map(rfc3339),
            built_at_ns: run.and_then(|r| r.ended_at),
            code_version: run.and_then(|r| crate::data::code::fingerprint(&r.code_versions)),
            current,
            note,
            query: at.query,
            children: Vec::new(),
        })
    }

    /// The data version run `run` recorded for `r` (its `available` event).
    fn version_built_by(&self, r: &str, run: &str) -> Result<Option<String>> {
        let events = self.store.events(&EventFilter {
            job_run_id: Some(run.to_string()),
            partition_ref: Some(r.to_string()),
            kind: Some(Kind::Partition),
            status: Some(Status::Available),
            limit: Some(1),
            ..Default::default()
        })?;
        Ok(events.into_iter().next().and_then(|e| e.data.data_version))
    }

    /// The instances a run read when it started.
    fn read_by(
        &self,
        at: &Instance,
        run: Option<&JobRunRow>,
        node: &mut LineageNode,
    ) -> Vec<Instance> {
        let Some(run) = run else { return Vec::new() };
        if run.input_versions.is_empty() && !run.inputs.is_empty() {
            node.note = Some(format!(
                "run {} never started: it read nothing",
                at.run.as_deref().unwrap_or("?")
            ));
        } else if run.input_runs.is_empty()
            && run.input_versions.keys().any(|i| {
                matches!(
                    self.graph.producer_of(i),
                    Some((databuild_core::Producer::Job { .. }, _))
                )
            })
        {
            node.note = Some(
                "recorded before lineage (log schema 8): the inputs' versions are known, not the runs that built them"
                    .to_string(),
            );
        }
        let query: std::collections::HashSet<&str> = crate::data::versions::query_reads(run)
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        run.input_versions
            .iter()
            .map(|(input, version)| Instance {
                partition_ref: input.clone(),
                run: run.input_runs.get(input).cloned(),
                version: Some(version.clone()),
                query: query.contains(input.as_str()),
            })
            .collect()
    }

    /// The instances runs built from this one (`of`: exactly, or from its data): every output of
    /// every run that read it.
    fn built_from(
        &self,
        at: &Instance,
        version: Option<&str>,
        of: ReadersOf,
    ) -> Result<Vec<Instance>> {
        let (r, run) = (&at.partition_ref, at.run.as_deref());
        let readers = self.store.readers(r, run, version, of, MAX_READERS)?;
        let ids: Vec<&str> = readers.iter().map(String::as_str).collect();
        let mut runs = self.store.job_runs_by_id(&ids)?;
        runs.sort_by_key(|r| r.scheduled_at);
        Ok(runs
            .into_iter()
            // A run that failed or never ran built nothing from it.
            .filter(|r| r.status == Status::Completed)
            .flat_map(|r| {
                let query = crate::data::versions::is_query_read(&r, &at.partition_ref);
                let id = r.job_run_id;
                r.outputs.into_iter().map(move |o| Instance {
                    partition_ref: o,
                    run: Some(id.clone()),
                    version: None,
                    query,
                })
            })
            .collect())
    }
}

pub(crate) fn lineage(engine: &Engine, q: &LineageQuery) -> Result<Lineage> {
    let root = engine.root_instance(q)?;
    let mut budget = MAX_NODES;
    let root = engine.node(root, q.direction, q.depth, &mut budget)?;
    Ok(Lineage {
        direction: q.direction,
        depth: q.depth,
        nodes: MAX_NODES - budget,
        history: engine.instance_history(&q.partition_ref)?,
        root,
    })
}

/// What a taint would do, before it is done: the live partitions built, directly or through
/// others, from the current instances of the tainted ones (they would become stale), and the
/// wants that would rebuild them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct TaintImpact {
    /// The partitions that would be tainted (a table's alias names the version it reads).
    pub tainted: Vec<String>,
    /// Live now, stale after the taint, nearest first.
    pub would_become_stale: Vec<ImpactItem>,
    /// Built from them but stale or tainted already (counted, not followed further).
    pub already_stale: u64,
    /// Built from them but not live for another reason: missing (its data gone), failed,
    /// building, or held back by a failed check (counted, not followed further).
    #[serde(default)]
    pub not_live: u64,
    /// Active wants naming a partition the taint makes tainted or stale: they would rebuild it.
    pub wants: Vec<WantImpact>,
    /// More partitions than an answer holds were found ([`MAX_NODES`]).
    pub truncated: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct ImpactItem {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// The run that built its current instance.
    pub job_run_id: String,
    /// The input it read that the taint reaches.
    pub via: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct WantImpact {
    pub want_id: String,
    /// Its partitions the taint reaches (the first 20).
    pub refs: Vec<String>,
    pub count: u64,
}

impl Engine {
    /// The active wants naming any of `refs`.
    fn wants_reached(&self, refs: &std::collections::HashSet<String>) -> Result<Vec<WantImpact>> {
        let wants = self.store.wants(None, true, 10_000)?;
        Ok(wants
            .into_iter()
            .filter_map(|w| {
                let reached: Vec<String> =
                    w.refs.into_iter().filter(|r| refs.contains(r)).collect();
                (!reached.is_empty()).then(|| WantImpact {
                    want_id: w.want_id,
                    count: reached.len() as u64,
                    refs: reached.into_iter().take(20).collect(),
                })
            })
            .collect())
    }
}

pub(crate) fn taint_impact(engine: &Engine, refs: &[String]) -> Result<TaintImpact> {
    let versions = engine.versions();
    let mut impact = TaintImpact {
        tainted: Vec::new(),
        would_become_stale: Vec::new(),
        already_stale: 0,
        not_live: 0,
        wants: Vec::new(),
        truncated: false,
    };
    let mut seen = std::collections::HashSet::new();
    let mut queue = std::collections::VecDeque::new();
    for e in engine.taint_events(refs, None)? {
        let r = e.partition_ref.unwrap_or_default();
        let root = engine.root_instance(&LineageQuery {
            partition_ref: r.clone(),
            ..Default::default()
        });
        if seen.insert(r.clone()) {
            impact.tainted.push(r);
        }
        match root {
            Ok(root) => queue.push_back(root),
            // Never built, no data: nothing was built from it.
            Err(EngineError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
    }
    while let Some(at) = queue.pop_front() {
        // By run and by version: a partition built from an earlier instance at the same data
        // version (a forced rebuild makes one) is live on this one's data, and the taint
        // makes it stale too.
        let version = match (&at.version, &at.run) {
            (Some(v), _) => Some(v.clone()),
            (None, Some(run)) => engine
                .store
                .partition(&at.partition_ref)?
                .filter(|p| p.job_run_id.as_deref() == Some(run))
                .and_then(|p| p.data_version),
            (None, None) => None,
        };
        for next in engine.built_from(&at, version.as_deref(), ReadersOf::Data)? {
            let current = engine
                .store
                .partition(&next.partition_ref)?
                .is_some_and(|p| p.job_run_id == next.run);
            // A query read does not make what was built from it stale (contract section 2).
            if next.query || !current || !seen.insert(next.partition_ref.clone()) {
                continue;
            }
            if impact.would_become_stale.len() >= MAX_NODES {
                impact.truncated = true;
                break;
            }
            match versions.known(&next.partition_ref)? {
                KnownState::Live => {
                    impact.would_become_stale.push(ImpactItem {
                        partition_ref: next.partition_ref.clone(),
                        job_run_id: next.run.clone().unwrap_or_default(),
                        via: at.partition_ref.clone(),
                    });
                    queue.push_back(next);
                }
                KnownState::Stale { .. } | KnownState::Kept { .. } | KnownState::Tainted => {
                    impact.already_stale += 1
                }
                _ => impact.not_live += 1,
            }
        }
    }
    impact.wants = engine.wants_reached(&seen)?;
    Ok(impact)
}

pub(crate) fn force_keeps_live(
    engine: &Engine,
    refs: &[databuild_core::PartitionRef],
) -> Result<crate::answers::ForceKeepsLive> {
    const FOLLOWED: usize = 1_000;
    let followed: Vec<String> = refs.iter().take(FOLLOWED).map(|r| r.to_string()).collect();
    let impact = match engine.taint_impact(&followed) {
        Ok(impact) => impact,
        // Refs a taint refuses (a source's raw day) are not forced by a build either.
        Err(EngineError::Invalid(_)) => return Ok(Default::default()),
        Err(e) => return Err(e),
    };
    let count = impact.would_become_stale.len();
    Ok(crate::answers::ForceKeepsLive {
        count,
        partitions: impact
            .would_become_stale
            .into_iter()
            .take(100)
            .map(|i| i.partition_ref)
            .collect(),
        truncated: impact.truncated || refs.len() > FOLLOWED,
    })
}

/// What changed between two instances of a partition (`databuild diff`): the inputs whose
/// instances differ, the job's version, its args and the names of its env.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InstanceDiff {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// The earlier instance.
    pub from: InstanceSummary,
    /// The later one (by default the current instance).
    pub to: InstanceSummary,
    /// Inputs read by one and not the other, or read at another instance.
    pub inputs: Vec<InputChange>,
    /// How many inputs both read at the same instance.
    pub unchanged_inputs: u64,
    pub job_version_changed: bool,
    pub args_changed: bool,
    /// Env names set by one and not the other, or set to another value (values are not shown:
    /// they may be secrets).
    pub env_changed: Vec<String>,
    /// The data versions differ: what was built from the earlier one is stale (as
    /// `data_changed`, which names it better; kept for the clients that read it).
    pub data_version_changed: bool,
    /// The bytes changed: the two instances' data versions (hashes of their content) differ. A
    /// rebuild that wrote the same bytes is unchanged. (Instances recorded before content
    /// versions carry recipe hashes: for them, whether what they were built from changed.)
    #[serde(default)]
    pub data_changed: bool,
    /// The files of the job's code (and `@definition`) that differ between the two runs, each
    /// with both shas; empty when they ran the same code, or either recorded none.
    #[serde(default)]
    pub code: Vec<crate::answers::CodeChange>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InstanceSummary {
    pub job_run_id: String,
    pub build_request_id: Option<String>,
    pub built_at: Option<String>,
    pub built_at_ns: Option<i64>,
    pub data_version: Option<String>,
    pub job_version: Option<String>,
    pub args: Vec<String>,
    /// The short fingerprint of the code its run ran (as `lineage`'s `code_version`); absent
    /// for a run recorded before code versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, utoipa::ToSchema)]
pub struct InputChange {
    #[serde(rename = "ref")]
    pub partition_ref: String,
    /// `added`, `removed` or `changed`.
    pub change: String,
    pub from_version: Option<String>,
    pub to_version: Option<String>,
    /// The runs that built the instances read (none for externals).
    pub from_run: Option<String>,
    pub to_run: Option<String>,
}

pub(crate) fn diff(
    engine: &Engine,
    r: &str,
    to: Option<&str>,
    since: Option<&str>,
) -> Result<InstanceDiff> {
    let built = engine.store.events(&EventFilter {
        partition_ref: Some(r.to_string()),
        kind: Some(Kind::Partition),
        status: Some(Status::Available),
        limit: Some(100_000),
        ..Default::default()
    })?;
    let runs: Vec<(&str, Option<&str>)> = built
        .iter()
        .filter_map(|e| Some((e.job_run_id.as_deref()?, e.data.data_version.as_deref())))
        .collect();
    let to_run = match to {
        Some(run) => run.to_string(),
        None => engine
            .store
            .partition(r)?
            .and_then(|p| p.job_run_id)
            .filter(|run| runs.iter().any(|(id, _)| id == run))
            .ok_or_else(|| {
                EngineError::NotFound(format!("`{r}` has no instance: no run has built it"))
            })?,
    };
    let at = runs
        .iter()
        .position(|(id, _)| *id == to_run)
        .ok_or_else(|| EngineError::Invalid(format!("run {to_run} did not build `{r}`")))?;
    let from_run = match since {
        Some(run) if runs.iter().any(|(id, _)| *id == run) => run.to_string(),
        Some(run) => {
            return Err(EngineError::Invalid(format!(
                "run {run} did not build `{r}`"
            )))
        }
        None => runs[..at]
            .iter()
            .rev()
            .find(|(id, _)| *id != to_run)
            .map(|(id, _)| id.to_string())
            .ok_or_else(|| {
                EngineError::NotFound(format!(
                    "`{r}` has one instance only (run {to_run}): nothing to compare it with"
                ))
            })?,
    };
    let version_of = |run: &str| {
        runs.iter()
            .rev()
            .find(|(id, _)| *id == run)
            .and_then(|(_, v)| v.map(str::to_string))
    };
    let row = |run: &str| -> Result<JobRunRow> {
        engine
            .store
            .job_run(run)?
            .ok_or_else(|| EngineError::NotFound(format!("no job run `{run}` in the event log")))
    };
    let (a, b) = (row(&from_run)?, row(&to_run)?);
    let summary = |run: &JobRunRow| InstanceSummary {
        job_run_id: run.job_run_id.clone(),
        build_request_id: run.build_request_id.clone(),
        built_at: run.ended_at.map(rfc3339),
        built_at_ns: run.ended_at,
        data_version: version_of(&run.job_run_id),
        job_version: run.job_version.clone(),
        args: run.args.clone(),
        code_version: crate::data::code::fingerprint(&run.code_versions),
    };
    let mut inputs = Vec::new();
    let mut unchanged = 0;
    let names: std::collections::BTreeSet<&String> = a
        .input_versions
        .keys()
        .chain(b.input_versions.keys())
        .collect();
    for input in names {
        let (va, vb) = (a.input_versions.get(input), b.input_versions.get(input));
        let (ra, rb) = (a.input_runs.get(input), b.input_runs.get(input));
        let change = match (va, vb) {
            (None, Some(_)) => "added",
            (Some(_), None) => "removed",
            _ if va != vb || ra != rb => "changed",
            _ => {
                unchanged += 1;
                continue;
            }
        };
        inputs.push(InputChange {
            partition_ref: input.clone(),
            change: change.to_string(),
            from_version: va.cloned(),
            to_version: vb.cloned(),
            from_run: ra.cloned(),
            to_run: rb.cloned(),
        });
    }
    let env_changed = a
        .env
        .keys()
        .chain(b.env.keys())
        .filter(|k| a.env.get(*k) != b.env.get(*k))
        .cloned()
        .collect::<std::collections::BTreeSet<_>>()
        .into_iter()
        .collect();
    let (from, to) = (summary(&a), summary(&b));
    Ok(InstanceDiff {
        partition_ref: r.to_string(),
        job_version_changed: a.job_version != b.job_version,
        args_changed: a.args != b.args,
        env_changed,
        data_version_changed: from.data_version != to.data_version,
        data_changed: from.data_version != to.data_version,
        // A run recorded before code versions has none to compare: not "every file added".
        code: match a.code_versions.is_empty() || b.code_versions.is_empty() {
            true => Vec::new(),
            false => crate::answers::CodeChange::between(&a.code_versions, &b.code_versions),
        },
        inputs,
        unchanged_inputs: unchanged,
        from,
        to,
    })
}

/// The most partitions of one want whose fulfillment is traced.
pub const WANT_TRACED: usize = 1_000;

impl Engine {
    /// The runs that built the instances `run` read (and their builds).
    fn input_runs_of(&self, run: &JobRunRow) -> Result<Vec<InputRun>> {
        let ids: Vec<&str> = run.input_runs.values().map(String::as_str).collect();
        let rows = self.store.job_runs_by_id(&ids)?;
        Ok(run
            .input_runs
            .iter()
            .map(|(input, by)| InputRun {
                partition_ref: input.clone(),
                job_run_id: by.clone(),
                build_request_id: rows
                    .iter()
                    .find(|r| r.job_run_id == *by)
                    .and_then(|r| r.build_request_id.clone()),
            })
            .collect())
    }
}

pub(crate) fn fulfillment(
    engine: &Engine,
    statuses: &[crate::answers::StatusReport],
) -> Result<(Vec<WantBuild>, Vec<WaitingPartition>)> {
    let mut waiting = Vec::new();
    let mut made_by: std::collections::BTreeMap<&str, Vec<String>> = Default::default();
    for s in statuses.iter().take(WANT_TRACED) {
        if s.status != crate::answers::DerivedStatus::Live {
            waiting.push(WaitingPartition {
                partition_ref: s.partition_ref.clone(),
                status: s.status,
                waits_for: s.reasons.join("; "),
            });
        }
        if let Some(run) = s.built_by.as_deref() {
            made_by
                .entry(run)
                .or_default()
                .push(s.partition_ref.clone());
        }
    }
    let ids: Vec<&str> = made_by.keys().copied().collect();
    let mut builds: Vec<WantBuild> = Vec::new();
    for run in engine.store.job_runs_by_id(&ids)? {
        let inputs = engine.input_runs_of(&run)?;
        let want_run = WantRun {
            partitions: made_by.remove(run.job_run_id.as_str()).unwrap_or_default(),
            job_run_id: run.job_run_id,
            job: run.job,
            status: run.status,
            inputs,
        };
        match builds
            .iter_mut()
            .find(|b| b.build_request_id == run.build_request_id)
        {
            Some(b) => b.runs.push(want_run),
            None => builds.push(WantBuild {
                status: match &run.build_request_id {
                    Some(id) => engine.store.build_request(id)?.map(|b| b.status),
                    None => None,
                },
                build_request_id: run.build_request_id,
                runs: vec![want_run],
            }),
        }
    }
    Ok((builds, waiting))
}
