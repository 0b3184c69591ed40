//! Data versions and staleness.
//!
//! A built partition records a data version: a hash of its job's name and version, the run's args
//! and env, and the data versions of its inputs. An external file's version is its size and
//! modification time. A partition is stale when the version it would get now differs from the one
//! it recorded: its job's version changed, or an input (at any depth) was rebuilt or changed.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use databuild_core::{resolve_alias, Graph, KnownState, PartitionRef, Producer, StateView};
use databuild_log::{EventFilter, EventStore, Kind, PartitionRow, Status};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

/// The data version of a run's outputs.
pub fn data_version(
    job: &str,
    job_version: &str,
    args: &[String],
    env: &BTreeMap<String, String>,
    input_versions: &BTreeMap<String, String>,
) -> String {
    let mut h = Sha256::new();
    let mut field = |s: &str| {
        h.update((s.len() as u64).to_le_bytes());
        h.update(s.as_bytes());
    };
    field(job);
    field(job_version);
    for a in args {
        field(a);
    }
    for (k, v) in env.iter().chain(input_versions) {
        field(k);
        field(v);
    }
    let digest = h.finalize();
    digest[..16].iter().map(|b| format!("{b:02x}")).collect()
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
    crate::sources::sealed_version(&data_dir.join(r))
}

/// The version of a partition an upstream service builds: the run that built it there.
pub fn upstream_version(ds: &databuild_core::Dataset, r: &str) -> Option<String> {
    let (status, built_by) = crate::upstream::status(ds.upstream.as_deref()?, r).ok()?;
    (status == "live").then(|| format!("upstream:{}", built_by.unwrap_or_default()))
}

/// What a partition's version is now, and why it differs from the recorded one if it does.
#[derive(Debug, Clone)]
struct Effective {
    version: String,
    stale: Option<String>,
    /// Stale but not rebuildable (an input expired): kept as it is, so readers built from it
    /// are not stale on its account.
    kept: bool,
}

/// The planner's view of partition states, with staleness. One instance per planning: it
/// remembers every version it works out.
pub struct VersionedStates<'a> {
    graph: &'a Graph,
    store: &'a dyn EventStore,
    data_dir: PathBuf,
    memo: RefCell<FxHashMap<String, Option<Rc<Effective>>>>,
    /// The rows found of the planning round being decided (see [`StateView::states`]).
    rows: RefCell<FxHashMap<String, PartitionRow>>,
    promotions: BTreeMap<String, u32>,
    pins: BTreeMap<String, u32>,
    today: String,
}

impl<'a> VersionedStates<'a> {
    pub fn new(graph: &'a Graph, store: &'a dyn EventStore, data_dir: &Path) -> Self {
        VersionedStates {
            graph,
            store,
            data_dir: data_dir.to_path_buf(),
            memo: RefCell::default(),
            rows: RefCell::default(),
            promotions: if graph.tables.is_empty() {
                BTreeMap::new()
            } else {
                promotions(store).unwrap_or_default()
            },
            pins: BTreeMap::new(),
            today: crate::engine::today(),
        }
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

    /// Reads these tables' aliases as these versions (see [`databuild_core::PlanRequest::pins`]).
    pub fn with_pins(mut self, pins: BTreeMap<String, u32>) -> Self {
        self.pins = pins;
        self
    }

    /// The version ref an alias ref reads now.
    pub fn resolve(&self, r: &str) -> Option<PartitionRef> {
        resolve_alias(self.graph, self, &self.pins, r)
    }

    fn row(&self, r: &str) -> Option<PartitionRow> {
        if let Some(row) = self.rows.borrow().get(r) {
            return Some(row.clone());
        }
        self.store.partition(r).ok().flatten()
    }

    /// The version `r` has now (as recorded, or as a rebuild would record it if stale); `None` if
    /// it is not live.
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
                let version = match (&ds.exists, ds.source) {
                    _ if ds.upstream.is_some() => upstream_version(ds, r)?,
                    (_, Some(_)) => source_version(&self.data_dir, r)?,
                    (None, None) => external_version(&self.data_dir, r)?,
                    (Some(_), None) => "probe".to_string(),
                };
                return Some(Effective {
                    version,
                    stale: None,
                    kept: false,
                });
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
        let recorded = row.data_version.clone().unwrap_or_default();
        let Some(run) = row
            .job_run_id
            .as_deref()
            .and_then(|id| self.store.job_run(id).ok().flatten())
        else {
            return Some(Effective {
                version: recorded,
                stale: None,
                kept: false,
            });
        };
        let Some(job) = self.graph.job(&run.job) else {
            return Some(Effective {
                version: recorded,
                stale: Some(format!("job `{}` is no longer in the graph", run.job)),
                kept: false,
            });
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
        for (alias, then) in &run.input_versions {
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
        let mut now = BTreeMap::new();
        let mut expired = None;
        for input in &run.inputs {
            let then = run.input_versions.get(input);
            match self.effective(input) {
                // Expired raw data did not change: what was built from it stands.
                None if self.expired(input) => {
                    expired.get_or_insert(input);
                    if let Some(v) = then {
                        now.insert(input.clone(), v.clone());
                    }
                }
                None => {
                    stale.get_or_insert_with(|| format!("input `{input}` is no longer live"));
                }
                Some(e) if e.kept => {
                    if then != Some(&e.version) {
                        stale.get_or_insert_with(|| {
                            format!("input `{input}` changed since it was built")
                        });
                    }
                    now.insert(input.clone(), e.version.clone());
                }
                Some(e) => {
                    if let Some(why) = &e.stale {
                        stale.get_or_insert_with(|| format!("input `{input}` is stale ({why})"));
                    } else if then != Some(&e.version) {
                        stale.get_or_insert_with(|| {
                            format!("input `{input}` changed since it was built")
                        });
                    }
                    now.insert(input.clone(), e.version.clone());
                }
            }
        }
        if let (Some(why), Some(input)) = (&stale, expired) {
            return Some(Effective {
                version: recorded,
                stale: Some(format!("not rebuildable: input `{input}` expired ({why})")),
                kept: true,
            });
        }
        let version = match stale {
            None => recorded,
            Some(_) => data_version(&job.name, &job.version, &run.args, &run.env, &now),
        };
        Some(Effective {
            version,
            stale,
            kept: false,
        })
    }

    /// The version of `r` as recorded now (for the input versions a run starts from).
    pub fn current_version(&self, r: &str) -> Option<String> {
        self.effective(r).map(|e| e.version.clone())
    }
}

impl StateView for VersionedStates<'_> {
    fn promoted(&self, table: &str) -> Option<u32> {
        self.promotions.get(table).copied()
    }

    fn states(&self, refs: &[&str]) -> Vec<KnownState> {
        let Ok(found) = self.store.partitions_by_ref(refs) else {
            return refs.iter().map(|r| self.state(r)).collect();
        };
        // Only the refs found need a closer look (and keep their rows for it); planning a
        // backfill asks for millions that were never built.
        *self.rows.borrow_mut() = found
            .into_iter()
            .map(|row| (row.partition_ref.clone(), row))
            .collect();
        refs.iter()
            .map(|r| {
                let found = self.rows.borrow().contains_key(*r);
                if found {
                    self.state(r)
                } else {
                    KnownState::Missing
                }
            })
            .collect()
    }

    fn state(&self, r: &str) -> KnownState {
        let Some(row) = self.row(r) else {
            return KnownState::Missing;
        };
        match row.status {
            Status::Available => match self.effective(r) {
                Some(e) if e.kept => KnownState::Kept {
                    reason: e.stale.clone().unwrap_or_default(),
                },
                Some(e) => match &e.stale {
                    Some(reason) => KnownState::Stale {
                        reason: reason.clone(),
                    },
                    None => KnownState::Live,
                },
                None => KnownState::Live,
            },
            Status::Building => KnownState::Building {
                build_request_id: row.build_request_id.unwrap_or_default(),
            },
            Status::Failed => KnownState::Failed,
            Status::Tainted => KnownState::Tainted,
            _ => KnownState::Missing,
        }
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
