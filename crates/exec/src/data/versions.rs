//! Data versions and staleness.
//!
//! A job's output records a data version: the hash of its content ([`content_version`], taken as
//! its run is published), so a rebuild that writes the same bytes records the same version. An
//! external file's version is its size and modification time; a source partition's, what sealing
//! recorded. A partition is stale when its job's version or code changed (`data::code`; a run
//! recorded before code versions compares on its job's version only), or an input's current
//! version differs from the one its instance read (an input rebuilt with other bytes, an external
//! file re-delivered), or an input is tainted or no longer live; and, transitively, through a
//! stale input. Logs written before content versions hold recipe hashes ([`data_version`], no
//! `sha256:` prefix): they are compared the same way, so such a log answers as it did; the first
//! rebuild over one that writes the same bytes keeps it (`run::publish::output_versions`).
//!
//! [`content_version`]: crate::run::publish::content_version

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;

use databuild_core::{
    resolve_alias, Graph, KnownState, PartitionRef, Producer, StateError, StateView,
};
use databuild_log::{EventFilter, EventStore, Kind, LogError, PartitionRow, RunRecipe, Status};
use rustc_hash::FxHashMap;

use super::code::CodeCache;
use super::data_dir::{DataDir, Witnesses};
use crate::answers::CodeChange;
use crate::hashing::{hex, Fields};

/// The recipe of a run's outputs: a hash of its job, args, env and inputs' versions. The data
/// version a log written before content versions recorded; now what a run's completion records
/// beside its outputs' content versions, for a config's hidden env to be compared against.
pub fn data_version(
    job: &str,
    job_version: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    input_versions: &BTreeMap<String, String>,
) -> String {
    let mut h = Fields::new();
    h.field(job).field(job_version);
    for a in args {
        h.field(a);
    }
    for (k, v) in env.iter().chain(input_versions) {
        h.field(k).field(v);
    }
    hex(&h.finish()[..16])
}

/// The version of an external partition stored as a file: its size and modification time, so a
/// re-delivered file makes its readers stale. Probe-checked datasets have no such metadata.
pub fn external_version(data_dir: &Path, r: &str) -> Option<String> {
    let meta = std::fs::metadata(data_dir.join(r)).ok()?;
    let mtime = meta
        .modified()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| d.as_nanos());
    Some(format!("file:{}:{mtime}", meta.len()))
}

/// How a run records an input it was given as a table's alias: `alias:<the version ref read>`.
pub const ALIAS_PREFIX: &str = "alias:";

/// The query inputs (`dep = "query"`) a run read, with the version of each it recorded as it
/// started: what its `running` event recorded a version of that is neither one of its required
/// `inputs` nor a table's alias. An absent query input was not read, so is not among them.
pub fn query_reads(run: &databuild_log::JobRunRow) -> Vec<(&str, &str)> {
    let required: rustc_hash::FxHashSet<&str> = run.inputs.iter().map(String::as_str).collect();
    run.input_versions
        .iter()
        .filter(|(r, v)| !required.contains(r.as_str()) && !v.starts_with(ALIAS_PREFIX))
        .map(|(r, v)| (r.as_str(), v.as_str()))
        .collect()
}

/// Whether the run read `r` as a query input (one of [`query_reads`]), for one ref: no set of
/// the run's inputs is made.
pub fn is_query_read(run: &databuild_log::JobRunRow, r: &str) -> bool {
    run.input_versions
        .get(r)
        .is_some_and(|v| !v.starts_with(ALIAS_PREFIX))
        && !run.inputs.iter().any(|i| i == r)
}

/// The version each table's alias was last promoted to, from the log.
pub fn promotions(store: &dyn EventStore) -> databuild_log::Result<BTreeMap<String, u32>> {
    let events = store.events(&EventFilter {
        kind: Some(Kind::Alias),
        ..Default::default()
    })?;
    Ok(events
        .into_iter()
        .filter_map(|e| Some((e.data.table?, e.data.version?)))
        .collect())
}

/// The version of a source partition: what sealing it recorded; none while it is open.
pub fn source_version(data_dir: &Path, r: &str) -> Option<String> {
    crate::data::sources::sealed_version(&data_dir.join(r))
}

/// The version of a partition an upstream service builds: the run that built it there.
pub fn upstream_version(ds: &databuild_core::Dataset, r: &str) -> Option<String> {
    let (status, built_by) = crate::data::upstream::status(ds.upstream.as_deref()?, r).ok()?;
    (status == crate::answers::DerivedStatus::Live)
        .then(|| format!("upstream:{}", built_by.unwrap_or_default()))
}

/// The version an external partition's data has now (its file's size and mtime, what sealing
/// recorded, the upstream run, or `probe`), as its readers record it before any taint.
pub fn raw_external_version(
    ds: &databuild_core::Dataset,
    data_dir: &Path,
    r: &str,
) -> Option<String> {
    match (&ds.exists, ds.source) {
        _ if ds.upstream.is_some() => upstream_version(ds, r),
        (_, Some(_)) => source_version(data_dir, r),
        (None, None) => external_version(data_dir, r),
        (Some(_), None) => Some("probe".to_string()),
    }
}

/// A taint of an external partition that still holds: the data is what it was when tainted.
#[derive(Debug, Clone)]
pub struct ExternalTaint {
    /// The taint event's position in the log: a second taint is a change of its own.
    pub idx: i64,
    /// `tainted`, with the reason given.
    pub reason: String,
}

impl ExternalTaint {
    /// The version readers record while the taint holds, so what was read before it is stale.
    fn version(&self, data: &str) -> String {
        format!("tainted:{}:{data}", self.idx)
    }
}

/// The taint on external `r` if its row says tainted and its data (`now`) is still what the
/// taint recorded. A taint recorded while the data was absent ends when data arrives.
fn external_taint(
    store: &dyn EventStore,
    row: Option<&PartitionRow>,
    r: &str,
    now: &str,
) -> databuild_log::Result<Option<ExternalTaint>> {
    if row.is_none_or(|row| row.status != Status::Tainted) {
        return Ok(None);
    }
    let events = store.events(&EventFilter {
        partition_ref: Some(r.to_string()),
        kind: Some(Kind::Partition),
        ..Default::default()
    })?;
    let Some(taint) = events.iter().rev().find(|e| e.status == Status::Tainted) else {
        return Ok(None);
    };
    Ok(
        (taint.data.data_version.as_deref() == Some(now)).then(|| ExternalTaint {
            idx: taint.idx,
            reason: match &taint.message {
                Some(m) => format!("tainted: {m}"),
                None => "tainted".to_string(),
            },
        }),
    )
}

/// The version of external `r` as a run starting now records it: its data's version, marked
/// while a taint holds. `None` when it is not present.
pub fn external_input_version(
    store: &dyn EventStore,
    ds: &databuild_core::Dataset,
    data_dir: &Path,
    r: &str,
) -> databuild_log::Result<Option<String>> {
    let Some(data) = raw_external_version(ds, data_dir, r) else {
        return Ok(None);
    };
    let row = store.partition(r)?;
    Ok(Some(match external_taint(store, row.as_ref(), r, &data)? {
        Some(t) => t.version(&data),
        None => data,
    }))
}

/// How a job output's path is shown: relative to the graph's folder when it lies inside it.
fn shown_path(base: Option<&Path>, path: &Path) -> String {
    base.and_then(|b| path.strip_prefix(b).ok())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// What a partition's version is now, and why it differs from the recorded one if it does.
#[derive(Debug, Clone)]
struct Effective {
    version: String,
    /// Boxed, as `tainted` and `gone`: rare, and a no-op build keeps one `Effective` for each
    /// partition of its closure.
    stale: Option<Box<Staleness>>,
    /// Stale but not rebuildable (an input expired): kept as it is, so readers built from it
    /// are not stale on its account.
    kept: bool,
    /// An external partition tainted since its data last changed: why.
    tainted: Option<Box<str>>,
    /// A job output recorded live whose data is gone from the data dir: why it is missing. Its
    /// version stands (a rebuild writing the same bytes records the same one), so its readers
    /// are not stale on its account until a rebuild writes other bytes.
    gone: Option<Box<str>>,
}

/// Why a partition is stale: the cause found first, and the inputs it came through (the
/// nearest first), so that a monthly report says which job changed, not four nested inputs.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Staleness {
    cause: String,
    via: Vec<String>,
    /// The cause is a job's code (`data::code`): what `analyze` counts as planned for code.
    by_code: bool,
}

impl Staleness {
    fn here(cause: String) -> Self {
        Staleness {
            cause,
            via: Vec::new(),
            by_code: false,
        }
    }

    /// Stale because `input` is, for `inner`'s cause.
    fn through(input: &str, inner: &Staleness) -> Self {
        let mut via = vec![input.to_string()];
        via.extend(inner.via.iter().cloned());
        Staleness {
            cause: inner.cause.clone(),
            via,
            by_code: inner.by_code,
        }
    }

    /// The cause first: ``job `m` changed version from 1 to 2, 3 inputs away (via `a` ← `b` ←
    /// `c`)`` (for a cause one input away, ``input `a` is stale: …``).
    fn readable(&self) -> String {
        match self.via.as_slice() {
            [] => self.cause.clone(),
            [input] => format!("input `{input}` is stale: {}", self.cause),
            via => {
                let chain: Vec<String> = via.iter().map(|i| format!("`{i}`")).collect();
                format!(
                    "{}, {} inputs away (via {})",
                    self.cause,
                    via.len(),
                    chain.join(" ← ")
                )
            }
        }
    }
}

impl Effective {
    fn new(version: String, stale: Option<String>) -> Self {
        Effective {
            version,
            stale: stale.map(|cause| Box::new(Staleness::here(cause))),
            kept: false,
            tainted: None,
            gone: None,
        }
    }
}

/// How many runs or rows one read-ahead query asks for.
const READ_AHEAD: usize = 10_000;
/// How many runs one read-ahead query asks for: fewer than rows, each is a larger row.
const RUNS_READ_AHEAD: usize = 1_000;

/// The most rows of one `states` call (a slice of a planning round) whose runs and inputs are
/// read ahead.
const READ_AHEAD_ROUND: usize = 50_000;

/// The planner's view of partition states, with staleness. One instance per planning: it
/// remembers every version it works out.
pub struct VersionedStates<'a> {
    graph: &'a Graph,
    store: &'a dyn EventStore,
    data_dir: PathBuf,
    /// The data dir, opened at the first existence asked of a job output: each is asked
    /// relative to it, so the kernel walks only the ref's own folders, not the data dir's path
    /// again every time.
    data_root: std::cell::OnceCell<DataDir>,
    /// Notes what planning found in the data dir, for a plan to be kept (see `plan_cache.rs`).
    witnesses: Option<&'a Witnesses>,
    /// The graph's folder, to show data paths from.
    base: Option<PathBuf>,
    /// The jobs' code versions now, each computed at its first use by this instance (see
    /// [`Self::with_code`]); without, runs compare on their job's version only.
    code: Option<Arc<CodeCache>>,
    memo: RefCell<FxHashMap<String, Option<Rc<Effective>>>>,
    /// The rows found of the refs being decided (see [`StateView::states`]), and
    /// those of their inputs, read ahead.
    rows: RefCell<FxHashMap<String, Rc<PartitionRow>>>,
    /// The runs that built those rows, read ahead in batches ([`Self::read_ahead`]).
    runs: RefCell<FxHashMap<String, Rc<RunRecipe>>>,
    promotions: BTreeMap<String, u32>,
    /// The datasets with a tainted partition in the log (found at the first external asked
    /// about): only their partitions' rows are read, so a no-op build reads no row per external.
    tainted_datasets: std::cell::OnceCell<rustc_hash::FxHashSet<usize>>,
    pins: BTreeMap<String, u32>,
    /// Whether any blocking check failed in the log (asked once): if none did, no partition is
    /// held back by one and no check is read.
    blocking_failures: std::cell::OnceCell<bool>,
    /// The check results of the rows kept, read with them (only when some blocking check failed).
    checks: RefCell<FxHashMap<String, Vec<databuild_log::CheckRow>>>,
    today: String,
    /// The first read of the log that failed: what was worked out since is not to be trusted,
    /// so the states asked for are an error (never `Missing`, which would rebuild live data).
    failure: RefCell<Option<LogError>>,
}

impl<'a> VersionedStates<'a> {
    /// `today`: the engine's date, which decides what retention has expired.
    pub fn new(
        graph: &'a Graph,
        store: &'a dyn EventStore,
        data_dir: &Path,
        today: String,
    ) -> Self {
        let mut states = VersionedStates {
            graph,
            store,
            data_dir: data_dir.to_path_buf(),
            data_root: std::cell::OnceCell::new(),
            witnesses: None,
            base: None,
            code: None,
            memo: RefCell::default(),
            rows: RefCell::default(),
            runs: RefCell::default(),
            promotions: BTreeMap::new(),
            tainted_datasets: Default::default(),
            pins: BTreeMap::new(),
            blocking_failures: Default::default(),
            checks: RefCell::default(),
            today,
            failure: RefCell::default(),
        };
        if !graph.tables.is_empty() {
            states.promotions = states.noted(promotions(store)).unwrap_or_default();
        }
        states
    }

    /// The value of a read of the log; a failed one is remembered (see `failure`).
    pub(crate) fn noted<T>(&self, read: databuild_log::Result<T>) -> Option<T> {
        match read {
            Ok(value) => Some(value),
            Err(e) => {
                self.failure.borrow_mut().get_or_insert(e);
                None
            }
        }
    }

    fn failed(&self) -> Option<StateError> {
        let failure = self.failure.borrow();
        failure.as_ref().map(|e| StateError(e.to_string()))
    }

    /// The log's failure, if a read failed since the last time it was taken.
    pub fn take_failure(&self) -> Option<LogError> {
        self.failure.borrow_mut().take()
    }

    /// `r`'s state; an error if the log could not be read to work it out.
    pub fn known(&self, r: &str) -> Result<KnownState, LogError> {
        let state = self.derive(r);
        self.take_failure().map_or(Ok(state), Err)
    }

    /// The states of many refs, as the planner asks for a round.
    pub fn known_all(&self, refs: &[&str]) -> Result<Vec<KnownState>, LogError> {
        let states = self.derive_all(refs);
        self.take_failure().map_or(Ok(states), Err)
    }

    /// Is `r` a raw source partition that retention has deleted?
    fn expired(&self, r: &str) -> bool {
        let Some((Producer::Dataset(d), values)) = self.graph.producer_of(r) else {
            return false;
        };
        let Some(source) = self.graph.datasets[d].source else {
            return false;
        };
        !self.data_dir.join(r).exists()
            && (self.graph.sources[source].is_expired(values[0], &self.today)
                || self.row(r).is_some_and(|p| p.status == Status::Expired))
    }

    /// Compares the code each run recorded with its job's code now (`cache`, kept for the call).
    pub fn with_code(mut self, cache: Arc<CodeCache>) -> Self {
        self.code = Some(cache);
        self
    }

    /// The code versions this instance computed (or computes) for the call.
    pub fn code(&self) -> Option<&CodeCache> {
        self.code.as_deref()
    }

    /// Shows data paths relative to the graph's folder.
    pub fn shown_from(mut self, graph_dir: &Path) -> Self {
        self.base = Some(graph_dir.to_path_buf());
        self
    }

    fn tainted_datasets(&self) -> &rustc_hash::FxHashSet<usize> {
        self.tainted_datasets.get_or_init(|| {
            (0..self.graph.datasets.len())
                .filter(|&d| {
                    let glob = self.graph.pattern_of(Producer::Dataset(d)).glob();
                    // Unknown (the log failed): look at the rows.
                    self.store
                        .partitions(&databuild_log::PartitionQuery {
                            pattern: Some(glob),
                            status: Some(Status::Tainted),
                            limit: 1,
                            after: None,
                        })
                        .map_or(true, |rows| !rows.is_empty())
                })
                .collect()
        })
    }

    /// Notes the files the states look at in `witnesses`.
    pub(crate) fn witnessed_by(mut self, witnesses: Option<&'a Witnesses>) -> Self {
        self.witnesses = witnesses;
        self
    }

    /// Reads these tables' aliases as these versions (see [`databuild_core::PlanRequest::pins`]).
    pub fn with_pins(mut self, pins: BTreeMap<String, u32>) -> Self {
        self.pins = pins;
        self
    }

    /// The version ref an alias ref reads now.
    pub fn resolve(&self, r: &str) -> Option<PartitionRef> {
        resolve_alias(self.graph, self, &self.pins, r)
    }

    // Rows and runs are shared, not copied: deciding a state looks at each several times.
    fn row(&self, r: &str) -> Option<Rc<PartitionRow>> {
        if let Some(row) = self.rows.borrow().get(r) {
            return Some(row.clone());
        }
        self.noted(self.store.partition(r)).flatten().map(Rc::new)
    }

    /// Keeps `rows` (just read) for the states asked next, with what deciding them reads.
    fn keep_rows(&self, rows: impl IntoIterator<Item = PartitionRow>) {
        *self.rows.borrow_mut() = rows
            .into_iter()
            .map(|row| (row.partition_ref.clone(), Rc::new(row)))
            .collect();
        self.runs.borrow_mut().clear();
        self.checks.borrow_mut().clear();
        if self.any_blocking_failure() {
            let available: Vec<String> = self
                .rows
                .borrow()
                .values()
                .filter(|row| row.status == Status::Available)
                .map(|row| row.partition_ref.clone())
                .collect();
            for chunk in available.chunks(READ_AHEAD) {
                let keys: Vec<&str> = chunk.iter().map(String::as_str).collect();
                let Some(rows) = self.noted(self.store.checks_of(&keys)) else {
                    break;
                };
                let mut checks = self.checks.borrow_mut();
                for r in chunk {
                    checks.entry(r.clone()).or_default();
                }
                for row in rows {
                    checks
                        .entry(row.partition_ref.clone())
                        .or_default()
                        .push(row);
                }
            }
        }
        // A call with more rows is decided reading as it goes: its runs held at once would cost more
        // memory than the round trips they save.
        if self.rows.borrow().len() <= READ_AHEAD_ROUND {
            let kept: Vec<String> = self.rows.borrow().keys().cloned().collect();
            self.read_ahead(kept);
        }
    }

    /// Reads, a batch per level of the graph, what deciding the states of `refs` (whose rows are
    /// kept) reads: the runs that built them and the rows of those runs' inputs, down to what
    /// is already known. One query per batch instead of one per partition and input: on a
    /// server, each is a round trip.
    fn read_ahead(&self, mut refs: Vec<String>) {
        while !refs.is_empty() {
            let mut ids: Vec<String> = {
                let rows = self.rows.borrow();
                let memo = self.memo.borrow();
                refs.iter()
                    .filter(|r| !memo.contains_key(*r))
                    .filter_map(|r| rows.get(r))
                    .filter(|row| row.status == Status::Available)
                    .filter_map(|row| row.job_run_id.clone())
                    .collect()
            };
            // In key order, each lookup lands near the last one (run ids grow with time).
            ids.sort_unstable();
            ids.dedup();
            let mut inputs = Vec::new();
            for chunk in ids.chunks(RUNS_READ_AHEAD) {
                let keys: Vec<&str> = chunk.iter().map(String::as_str).collect();
                let Some(runs) = self.noted(self.store.run_recipes(&keys)) else {
                    return;
                };
                let rows = self.rows.borrow();
                for mut run in runs {
                    inputs.extend(
                        run.inputs
                            .iter()
                            .filter(|i| !rows.contains_key(*i))
                            .filter(|i| {
                                matches!(self.graph.producer_of(i), Some((Producer::Job { .. }, _)))
                            })
                            .cloned(),
                    );
                    let id = std::mem::take(&mut run.job_run_id);
                    self.runs.borrow_mut().insert(id, Rc::new(run));
                }
            }
            inputs.sort_unstable();
            inputs.dedup();
            let mut found = Vec::new();
            for chunk in inputs.chunks(READ_AHEAD) {
                let keys: Vec<&str> = chunk.iter().map(String::as_str).collect();
                let Some(rows) = self.noted(self.store.partitions_by_ref(&keys)) else {
                    return;
                };
                found.extend(rows);
            }
            refs = found.iter().map(|row| row.partition_ref.clone()).collect();
            self.rows.borrow_mut().extend(
                found
                    .into_iter()
                    .map(|row| (row.partition_ref.clone(), Rc::new(row))),
            );
        }
    }

    /// The run that built a row: read ahead, or read now.
    fn run(&self, id: &str) -> Option<Rc<RunRecipe>> {
        if let Some(run) = self.runs.borrow().get(id) {
            return Some(run.clone());
        }
        self.noted(self.store.run_recipes(&[id]))?
            .pop()
            .map(Rc::new)
    }

    /// The version `r` has now (as recorded, stale or not); `None` if it is not live.
    fn effective(&self, r: &str) -> Option<Rc<Effective>> {
        if let Some(known) = self.memo.borrow().get(r) {
            return known.clone();
        }
        let result = self.compute(r).map(Rc::new);
        self.memo.borrow_mut().insert(r.to_string(), result.clone());
        result
    }

    fn compute(&self, r: &str) -> Option<Effective> {
        let (producer, _) = self.graph.producer_of(r)?;
        match producer {
            Producer::Dataset(d) => {
                let ds = &self.graph.datasets[d];
                let data = raw_external_version(ds, &self.data_dir, r);
                if let Some(w) = self.witnesses {
                    w.version(r, &data);
                }
                let data = data?;
                if !self.tainted_datasets().contains(&d) {
                    return Some(Effective::new(data, None));
                }
                let row = self.row(r);
                return Some(
                    match self
                        .noted(external_taint(self.store, row.as_deref(), r, &data))
                        .flatten()
                    {
                        Some(t) => Effective {
                            tainted: Some(t.reason.as_str().into()),
                            ..Effective::new(t.version(&data), None)
                        },
                        None => Effective::new(data, None),
                    },
                );
            }
            Producer::Alias(_) => {
                return self
                    .effective(self.resolve(r)?.as_str())
                    .map(|e| (*e).clone())
            }
            Producer::Job { .. } => {}
        }
        let row = self.row(r)?;
        if row.status != Status::Available {
            return None;
        }
        // Every job output is `<data_dir>/<ref>` once its run exits 0 (contract section 3): one
        // `access` tells whether its data is still there.
        let gone = (!self.data_exists(r)).then(|| {
            let path = self.data_dir.join(r);
            format!(
                "recorded live by run {}, but its data `{}` is gone",
                row.job_run_id.as_deref().unwrap_or("?"),
                shown_path(self.base.as_deref(), &path)
            )
        });
        let mut effective = self.compute_built(&row);
        effective.gone = gone.map(String::into_boxed_str);
        Some(effective)
    }

    /// Whether `<data_dir>/<r>` exists (following links, as [`Path::exists`]).
    fn data_exists(&self, r: &str) -> bool {
        let exists = self
            .data_root
            .get_or_init(|| DataDir::open(&self.data_dir))
            .exists(r);
        if let Some(w) = self.witnesses {
            w.exists(r, exists);
        }
        exists
    }

    /// The version of a job output recorded available, and whether it is stale.
    fn compute_built(&self, row: &PartitionRow) -> Effective {
        let recorded = row.data_version.clone().unwrap_or_default();
        let Some(run) = row.job_run_id.as_deref().and_then(|id| self.run(id)) else {
            return Effective::new(recorded, None);
        };
        let Some(job) = self.graph.job(&run.job) else {
            return Effective::new(
                recorded,
                Some(format!("job `{}` is no longer in the graph", run.job)),
            );
        };
        let mut stale = None;
        if run.job_version.as_deref() != Some(job.version.as_str()) {
            stale = Some(format!(
                "job `{}` changed version from {} to {}",
                job.name,
                run.job_version.as_deref().unwrap_or("?"),
                job.version
            ));
        }
        // A run recorded before code versions has none: it compares on its job's version only.
        let mut by_code = false;
        if let (None, Some(code), false) = (&stale, &self.code, run.code_versions.is_empty()) {
            let now = code.job(self.graph, job);
            // Most runs ran the code there is now: compared in place, both sorted by path.
            let same = run
                .code_versions
                .iter()
                .map(|(k, v)| (k, v))
                .eq(now.map().iter());
            if !same {
                stale = CodeChange::reason(
                    &format!("job `{}`", job.name),
                    &CodeChange::between(run.code_versions.iter().map(|(k, v)| (k, v)), now.map()),
                );
            }
            by_code = stale.is_some();
        }
        for (alias, then) in run.input_versions.iter() {
            let Some(read) = then.strip_prefix(ALIAS_PREFIX) else {
                continue;
            };
            match self.resolve(alias) {
                Some(now) if now.as_str() != read => {
                    stale.get_or_insert_with(|| {
                        format!("`{alias}` now reads {now} (it was built from {read})")
                    });
                }
                _ => {}
            }
        }
        let mut expired = None;
        // Stale through a stale input (when nothing closer is found first).
        let mut through: Option<Staleness> = None;
        for input in run.inputs.iter() {
            let then = run.read(input);
            match self.effective(input) {
                // Expired raw data did not change: what was built from it stands.
                None if self.expired(input) => {
                    expired.get_or_insert(input);
                }
                None => {
                    let row = self.row(input);
                    let tainted = row.as_ref().filter(|p| p.status == Status::Tainted);
                    stale.get_or_insert_with(|| match tainted {
                        // With the taint's reason, as for a tainted external.
                        Some(p) => match p.message.as_deref().filter(|m| !m.is_empty()) {
                            Some(why) => format!("input `{input}` is tainted: {why}"),
                            None => format!("input `{input}` is tainted"),
                        },
                        None => format!("input `{input}` is no longer live"),
                    });
                }
                Some(e) if e.kept => {
                    if then != Some(&e.version) {
                        stale.get_or_insert_with(|| {
                            format!("input `{input}` changed since it was built")
                        });
                    }
                }
                Some(e) => {
                    if let Some(why) = &e.stale {
                        through.get_or_insert_with(|| Staleness::through(input, why));
                    } else if let (Some(why), true) = (&e.tainted, then != Some(&e.version)) {
                        stale.get_or_insert_with(|| format!("input `{input}` is {why}"));
                    } else if then != Some(&e.version) {
                        stale.get_or_insert_with(|| {
                            format!("input `{input}` changed since it was built")
                        });
                    }
                }
            }
        }
        // A cause of its own (its job, an alias, an input that changed) before one that comes
        // through a stale input.
        let stale = match (stale, through) {
            (Some(here), _) => Some(Staleness {
                by_code,
                ..Staleness::here(here)
            }),
            (None, through) => through,
        };
        if let (Some(why), Some(input)) = (&stale, expired) {
            let why = why.readable();
            return Effective {
                kept: true,
                ..Effective::new(
                    recorded,
                    Some(format!("not rebuildable: input `{input}` expired ({why})")),
                )
            };
        }
        // A stale partition's version is its recorded one, its bytes as they are: what a rebuild
        // would write cannot be known before it runs. Its readers are stale through it (`via`)
        // until the rebuild, whose content then decides (early cutoff, `scheduler/machine.rs`).
        Effective {
            stale: stale.map(Box::new),
            ..Effective::new(recorded, None)
        }
    }

    /// The version of `r` as recorded now (for the input versions a run starts from).
    pub fn current_version(&self, r: &str) -> Option<String> {
        self.effective(r).map(|e| e.version.clone())
    }

    fn any_blocking_failure(&self) -> bool {
        *self.blocking_failures.get_or_init(|| {
            // Unknown (the log failed): read the checks.
            self.noted(self.store.any_blocking_failure())
                .unwrap_or(true)
        })
    }

    /// Why `r` (recorded available, built by `run`) is not live: a failed blocking check of that
    /// instance (``failed check `name`: message``).
    pub fn held_back(&self, r: &str, run: &str) -> Option<String> {
        if !self.any_blocking_failure() {
            return None;
        }
        let kept = self.checks.borrow().get(r).cloned();
        let rows = match kept {
            Some(rows) => rows,
            None => self.noted(self.store.checks_of(&[r]))?,
        };
        crate::check::held_back_by(self.graph, r, run, &rows)
    }

    /// Why job output `r`, recorded live, is missing: its data is gone from the data dir.
    pub fn gone(&self, r: &str) -> Option<String> {
        self.effective(r)?.gone.as_deref().map(String::from)
    }

    /// The taint of external `r` if it still holds (its data has not changed since).
    pub fn external_tainted(&self, r: &str) -> Option<String> {
        self.effective(r)?.tainted.as_deref().map(String::from)
    }

    /// The states of a round's refs, their rows read at once.
    fn derive_all(&self, refs: &[&str]) -> Vec<KnownState> {
        let Some(found) = self.noted(self.store.partitions_by_ref(refs)) else {
            return Vec::new();
        };
        // Only the refs found need a closer look (and keep their rows for it); planning a
        // backfill asks for millions that were never built.
        self.keep_rows(found);
        refs.iter()
            .map(|r| {
                let found = self.rows.borrow().contains_key(*r);
                if found {
                    self.derive(r)
                } else {
                    KnownState::Missing
                }
            })
            .collect()
    }

    /// `r`'s state as far as the log could be read (see `failure`).
    fn derive(&self, r: &str) -> KnownState {
        let Some(row) = self.row(r) else {
            return KnownState::Missing;
        };
        match row.status {
            Status::Available => match self.effective(r) {
                // Recorded live, but its data is gone: built again like any missing partition.
                Some(e) if e.gone.is_some() => KnownState::Missing,
                Some(e) if e.kept => KnownState::Kept {
                    reason: e
                        .stale
                        .as_ref()
                        .map(|why| why.readable())
                        .unwrap_or_default(),
                },
                Some(e) => match &e.stale {
                    Some(why) => KnownState::Stale {
                        reason: why.readable(),
                        by_code: why.by_code,
                    },
                    None => self.live_unless_held_back(r, &row),
                },
                None => self.live_unless_held_back(r, &row),
            },
            Status::Building => KnownState::Building {
                build_request_id: row.build_request_id.clone().unwrap_or_default(),
            },
            Status::Failed => KnownState::Failed,
            Status::Tainted => KnownState::Tainted,
            _ => KnownState::Missing,
        }
    }

    fn live_unless_held_back(&self, r: &str, row: &PartitionRow) -> KnownState {
        match row
            .job_run_id
            .as_deref()
            .and_then(|run| self.held_back(r, run))
        {
            Some(reason) => KnownState::CheckFailed { reason },
            None => KnownState::Live,
        }
    }

    /// The states of partitions whose rows were just read (as [`StateView::states`] of their
    /// refs, without reading the rows again).
    pub fn states_of_rows(&self, rows: Vec<PartitionRow>) -> Result<Vec<KnownState>, LogError> {
        let refs: Vec<String> = rows.iter().map(|row| row.partition_ref.clone()).collect();
        self.keep_rows(rows);
        let states = refs.iter().map(|r| self.derive(r)).collect();
        self.take_failure().map_or(Ok(states), Err)
    }
}

impl StateView for VersionedStates<'_> {
    fn promoted(&self, table: &str) -> Option<u32> {
        self.promotions.get(table).copied()
    }

    // The log's own error stays behind for the caller to take (`take_failure`): the planner
    // only needs to know that it must stop.
    fn states(&self, refs: &[&str]) -> Result<Vec<KnownState>, StateError> {
        let states = self.derive_all(refs);
        self.failed().map_or(Ok(states), Err)
    }

    fn state(&self, r: &str) -> Result<KnownState, StateError> {
        let state = self.derive(r);
        self.failed().map_or(Ok(state), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_depend_on_every_ingredient() {
        let env = BTreeMap::new();
        let inputs = BTreeMap::from([("a".to_string(), "1".to_string())]);
        let base = data_version("j", "1", &[], &env, &inputs);
        assert_eq!(base, data_version("j", "1", &[], &env, &inputs));
        assert_ne!(base, data_version("j", "2", &[], &env, &inputs));
        assert_ne!(base, data_version("k", "1", &[], &env, &inputs));
        assert_ne!(base, data_version("j", "1", &["x".into()], &env, &inputs));
        let other = BTreeMap::from([("a".to_string(), "2".to_string())]);
        assert_ne!(base, data_version("j", "1", &[], &env, &other));
        // Field boundaries matter: ("ab", "") differs from ("a", "b").
        assert_ne!(
            data_version("ab", "", &[], &env, &inputs),
            data_version("a", "b", &[], &env, &inputs)
        );
    }
}
