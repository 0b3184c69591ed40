//! Plans of no-op builds, kept in the log (SQLite's `plan_cache`) and reused by the next build of
//! the same request while the log holds nothing new.
//!
//! A plan is a function of the graph, the request, the date, the binary, the log and the files
//! it looked at in the data dir. A build that found everything live and fresh keeps its plan with
//! what it found of each file (which outputs exist, the size and mtime of each external file) and
//! the log's position. The next build of the same request, on the same graph text, date and
//! binary, takes the plan back only if every event since is one it records itself as a no-op
//! (none of which changes what a plan reads: see [`databuild_log::EventStore::kept_plan`]) and
//! every file is as it was. Anything else plans from the log, as always. The key covers the
//! jobs' and checks' code versions (`data::code`), so an edited script is planned for.
//!
//! Only plans that read nothing else are kept: not those of graphs with config jobs, probed or
//! upstream datasets, sources or tables (their plans ask executables, services or retention).

use databuild_core::{Deps, Graph, PartitionRef, Plan, PlanRequest, Producer};
use databuild_log::KeptPlan;
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use std::sync::Arc;

use crate::data::code::CodeCache;
use crate::data::data_dir::{DataDir, Seen, Witnesses};
use crate::engine::{Engine, Result};
use crate::hashing::{hex, Fields};

/// The largest build (runs and live refs planned) that plans its request again at its end to
/// keep the plan for the next build: ~0.15 s at 24k; a backfill of a million would take seconds.
const REPLAN_MAX: usize = 100_000;

/// Bumped when the kept body or what the key covers changes.
const FORMAT: &str = "databuild plan cache 1";

/// A kept plan, as stored: a no-op's live refs, and what planning found in the data dir. (A
/// plan with stale partitions kept as not rebuildable is not kept: only a source's expiry makes
/// one, and graphs with sources keep no plan.)
#[derive(Debug, Serialize, Deserialize, PartialEq)]
struct Body {
    skipped: Vec<PartitionRef>,
    seen: Seen,
}

/// A no-op plan to keep once its build has recorded it: where it held, and its body (`None`:
/// the one kept already, reused).
pub(crate) struct Keep {
    since: i64,
    body: Option<Vec<u8>>,
}

/// Whether a graph's plans read only the log and the data dir's files (see the module's doc).
fn keepable(graph: &Graph) -> bool {
    graph.tables.is_empty()
        && graph.sources.is_empty()
        && graph.jobs.iter().all(|j| matches!(j.deps, Deps::Static(_)))
        && graph
            .datasets
            .iter()
            .all(|d| d.exists.is_none() && d.upstream.is_none() && d.source.is_none())
}

/// The digest of a graph file's text, which the plan key covers.
pub fn graph_digest(text: &str) -> String {
    hex(&Sha256::digest(text.as_bytes()))
}

/// This binary, by its path, size and modification time: a new build of DataBuild may plan
/// otherwise. (Builds that fix mtimes, as reproducible ones do, install to paths of their own.)
/// The size and time are the running binary's own (`/proc/self/exe` is the file this process
/// started from, even once a new install replaced it), so a service left running while DataBuild
/// is upgraded keeps its plans under its own binary, not the new one. Taken once per process.
fn this_binary() -> Option<&'static str> {
    static BINARY: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    BINARY
        .get_or_init(|| {
            let path = std::env::current_exe().ok()?;
            // A binary replaced since this process started reads as "PATH (deleted)".
            let path = path.to_string_lossy();
            let path = path.strip_suffix(" (deleted)").unwrap_or(&path);
            let meta = std::fs::metadata("/proc/self/exe")
                .or_else(|_| std::fs::metadata(path))
                .ok()?;
            let mtime = meta
                .modified()
                .ok()?
                .duration_since(std::time::UNIX_EPOCH)
                .ok()?;
            Some(format!("{path}:{}:{}", meta.len(), mtime.as_nanos()))
        })
        .as_deref()
}

/// `DATABUILD_NO_PLAN_CACHE` set to anything but `""` or `0`: every build plans.
fn switched_off() -> bool {
    std::env::var("DATABUILD_NO_PLAN_CACHE").is_ok_and(|v| !v.is_empty() && v != "0")
}

impl Engine {
    /// The key `request`'s plan is kept under, when it can be (see the module's doc).
    pub(crate) fn plan_key(&self, request: &PlanRequest, code: &CodeCache) -> Option<String> {
        if switched_off() || !self.store.keeps_plans() || !keepable(&self.graph) {
            return None;
        }
        let graph = self.graph_digest.as_deref()?;
        let binary = this_binary()?;
        let mut h = Fields::new();
        let mut field = |s: &str| {
            h.field(s);
        };
        field(FORMAT);
        field(env!("CARGO_PKG_VERSION"));
        field(binary);
        field(graph);
        field(&self.graph_dir.display().to_string());
        field(&self.data_dir.display().to_string());
        field(&self.today());
        field(if request.force { "force" } else { "" });
        field(if request.allow_stale {
            "allow-stale"
        } else {
            ""
        });
        for (table, version) in &request.pins {
            field(table);
            field(&version.to_string());
        }
        for r in &request.refs {
            field(r.as_str());
        }
        // The code of every job and check: a script edited since makes its partitions stale,
        // which a plan kept before the edit would not see.
        for job in &self.graph.jobs {
            field(
                &crate::data::code::fingerprint(code.job(&self.graph, job).map())
                    .unwrap_or_default(),
            );
        }
        for check in &self.graph.checks {
            field(&crate::data::code::fingerprint(code.check(check).map()).unwrap_or_default());
        }
        Some(hex(&h.finish()))
    }

    /// The plan of `request`: the one kept under `key` if it still holds, else made (noting what
    /// it looks at, to be kept if it is a no-op). With it, what to keep once the build has
    /// recorded it. A cache never fails a build: a failed read of it plans anew.
    pub(crate) fn plan_or_reuse(
        &self,
        request: &PlanRequest,
        key: Option<&str>,
        id: &str,
        code: &Arc<CodeCache>,
    ) -> (Result<Plan>, Option<Keep>) {
        match key.map(|key| self.reuse_plan(request, key, id)) {
            Some(Ok(Some((plan, keep)))) => (Ok(plan), Some(keep)),
            _ => self.plan_keeping(request, key, code),
        }
    }

    /// Plans `request` from the log; when it has a `key`, noting what it looks at to be kept.
    pub(crate) fn plan_keeping(
        &self,
        request: &PlanRequest,
        key: Option<&str>,
        code: &Arc<CodeCache>,
    ) -> (Result<Plan>, Option<Keep>) {
        match key {
            Some(_) => self.plan_noting(request, code),
            None => (self.plan_witnessed(request, None, code), None),
        }
    }

    /// Plans `request`, noting what it looks at in the data dir: a no-op plan comes with its
    /// body to keep.
    fn plan_noting(
        &self,
        request: &PlanRequest,
        code: &Arc<CodeCache>,
    ) -> (Result<Plan>, Option<Keep>) {
        let Ok(since) = self.store.last_idx() else {
            return (self.plan_witnessed(request, None, code), None);
        };
        let witnesses = Witnesses::default();
        let planned = self.plan_witnessed(request, Some(&witnesses), code);
        let keep = planned
            .as_ref()
            .ok()
            .and_then(|plan| plan_body(plan, witnesses))
            .map(|body| Keep {
                since,
                body: Some(body),
            });
        (planned, keep)
    }

    /// The plan kept under `key`, if it holds for build request `id`: no event since but `id`'s
    /// own, every requested ref among its live ones, and every file as the plan found it.
    fn reuse_plan(
        &self,
        request: &PlanRequest,
        key: &str,
        id: &str,
    ) -> Result<Option<(Plan, Keep)>> {
        let Some(KeptPlan { log_idx, body }) = self.store.kept_plan(key, id)? else {
            return Ok(None);
        };
        // A body this binary cannot read is a plan it did not keep: planned anew.
        let Ok(body) = serde_json::from_slice::<Body>(&body) else {
            return Ok(None);
        };
        // A kept body is only trusted as far as it answers the request (a row edited or torn
        // behind DataBuild's back plans anew).
        if !answers(&body, request) || !self.still_seen(&body.seen) {
            return Ok(None);
        }
        let plan = Plan {
            runs: Vec::new(),
            skipped: body.skipped,
            delegated: Vec::new(),
            missing: Vec::new(),
            not_rebuildable: Vec::new(),
        };
        let keep = Keep {
            since: log_idx,
            body: None,
        };
        Ok(Some((plan, keep)))
    }

    /// Whether every file is as planning found it.
    fn still_seen(&self, seen: &Seen) -> bool {
        let data = DataDir::open(&self.data_dir);
        seen.present.iter().all(|r| data.exists(r))
            && seen.absent.iter().all(|r| !data.exists(r))
            && seen
                .versions
                .iter()
                .all(|(r, version)| match self.graph.producer_of(r) {
                    Some((Producer::Dataset(d), _)) => {
                        let ds = &self.graph.datasets[d];
                        crate::data::versions::raw_external_version(ds, &self.data_dir, r)
                            == *version
                    }
                    _ => false,
                })
    }

    /// After build `id` made its request live, keeps the plan its next build reuses at once
    /// instead of reading every row this one wrote: `keep`, the plan the build reused or found to
    /// be a no-op, as it is; otherwise the request planned again (a no-op, unless something
    /// changed meanwhile), unless the build planned more than `REPLAN_MAX` runs and live refs.
    pub(crate) fn keep_for_next_build(
        &self,
        request: &PlanRequest,
        key: &str,
        id: &str,
        keep: Option<Keep>,
        planned_size: usize,
    ) -> Result<()> {
        match keep {
            Some(keep) => self.keep_plan(key, id, keep),
            // After the build: the code there is now.
            None if planned_size <= REPLAN_MAX => match self.plan_noting(request, &self.code()) {
                (Ok(_), Some(keep)) => self.keep_plan(key, id, keep),
                _ => Ok(()),
            },
            None => Ok(()),
        }
    }

    /// Keeps (or moves forward) a no-op plan once build `id` recorded it; a log that changed
    /// meanwhile keeps nothing.
    fn keep_plan(&self, key: &str, id: &str, keep: Keep) -> Result<()> {
        self.store
            .keep_plan(key, keep.since, id, keep.body.as_deref())?;
        Ok(())
    }
}

/// Whether every requested ref is among `body`'s live ones: one pass over them, against the
/// request's (fewer) refs.
fn answers(body: &Body, request: &PlanRequest) -> bool {
    let mut requested: rustc_hash::FxHashSet<&str> =
        request.refs.iter().map(PartitionRef::as_str).collect();
    for r in &body.skipped {
        requested.remove(r.as_str());
    }
    requested.is_empty()
}

/// The body to keep of a no-op plan made with `witnesses`; `None` for a plan that runs,
/// waits, misses something or keeps a stale partition, or that looked at more files than are
/// noted.
fn plan_body(plan: &Plan, witnesses: Witnesses) -> Option<Vec<u8>> {
    if !plan.runs.is_empty()
        || !plan.delegated.is_empty()
        || !plan.missing.is_empty()
        || !plan.not_rebuildable.is_empty()
    {
        return None;
    }
    let body = Body {
        skipped: plan.skipped.clone(),
        seen: witnesses.into_seen()?,
    };
    Some(serde_json::to_vec(&body).expect("a plan body serializes"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn no_op() -> Plan {
        Plan {
            runs: Vec::new(),
            skipped: vec![PartitionRef::new("a/1").unwrap()],
            delegated: Vec::new(),
            missing: Vec::new(),
            not_rebuildable: Vec::new(),
        }
    }

    #[test]
    fn a_no_op_plan_is_kept_with_what_it_saw() {
        let witnesses = Witnesses::default();
        witnesses.exists("a/1", true);
        witnesses.version("raw/1", &Some("file:4:1".to_string()));
        let body: Body = serde_json::from_slice(&plan_body(&no_op(), witnesses).unwrap()).unwrap();
        assert_eq!(body.skipped, [PartitionRef::new("a/1").unwrap()]);
        assert_eq!(body.seen.present, ["a/1"]);
        assert_eq!(
            body.seen.versions,
            [("raw/1".to_string(), Some("file:4:1".to_string()))]
        );
    }

    #[test]
    fn a_plan_that_saw_too_many_files_is_not_kept() {
        let witnesses = Witnesses::default();
        for i in 0..=Witnesses::MAX {
            witnesses.exists(&format!("a/{i}"), true);
        }
        assert!(plan_body(&no_op(), witnesses).is_none());
    }
}
