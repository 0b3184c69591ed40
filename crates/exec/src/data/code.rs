//! Code versions: what a job (or a check) runs, as fingerprints, so that editing a job's script
//! makes its partitions stale (contract section 2, "Code versions").
//!
//! A job's [`CodeVersions`] map each file of the project that its command (or its config
//! command) names, and each file its `code` globs match, by path relative to the graph's folder,
//! to the first 16 hex digits of the sha256 of its content; and [`DEFINITION`] to the hash of its
//! command, config command, env names and the env values the graph shows (`show_env`: the others
//! may be secrets, so their values are never hashed). A run records them as it starts; the
//! partition it built is stale once they differ
//! ([`CodeChange::reason`](crate::answers::CodeChange::reason)). Strings given to a shell
//! (`sh -c "..."`) are not parsed, and files outside the graph's folder are not followed.
//!
//! [`CodeCache`] computes each job's once per call that asks (planning, status, a build), never
//! per run; [`validate`] refuses a `code` glob that matches nothing.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use databuild_core::{Check, CodeGlob, Deps, Graph, Job};
use rustc_hash::FxHashMap;
use sha2::{Digest, Sha256};

use crate::check::CheckRun;
use crate::hashing::field;

pub use crate::answers::DEFINITION;

/// How many hex digits of a sha256 a file's version keeps.
const SHA_DIGITS: usize = 16;
/// How many hex digits a short fingerprint (`lineage`'s `code_version`) keeps.
const SHORT_DIGITS: usize = 12;

/// The code a job or check runs: path (or [`DEFINITION`]) → content hash, sorted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CodeVersions(BTreeMap<String, String>);

impl CodeVersions {
    pub fn map(&self) -> &BTreeMap<String, String> {
        &self.0
    }
}

/// A short fingerprint of a whole recorded map: the first 12 hex digits of the sha256 of its
/// entries in order; `None` for an empty one (a run recorded before code versions).
pub fn fingerprint<'a>(
    versions: impl IntoIterator<Item = (&'a String, &'a String)>,
) -> Option<String> {
    let mut h = Sha256::new();
    let mut any = false;
    for (k, v) in versions {
        any = true;
        field(&mut h, k);
        field(&mut h, v);
    }
    any.then(|| hex(&h.finalize(), SHORT_DIGITS))
}

/// The first `digits` hex digits of a digest (an even count: two a byte).
fn hex(digest: &[u8], digits: usize) -> String {
    crate::hashing::hex(&digest[..digits / 2])
}

/// A `code` glob that matches no file: a typo would otherwise leave the files it meant out of
/// the job's code version without a word.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{owner}: `code` glob `{glob}` matches no file (its paths are relative to the graph file's folder, `{dir}`); fix the glob, or remove it")]
pub struct CodeError {
    /// ``job `agg` `` or ``check `rows` ``.
    pub owner: String,
    pub glob: String,
    pub dir: String,
}

/// Every `code` glob of the graph matches at least one file. The folders walked stay in `cache`:
/// the code versions computed from it next read them from there.
fn validate(cache: &CodeCache, graph: &Graph) -> Result<(), CodeError> {
    let owners = graph
        .jobs
        .iter()
        .map(|j| (format!("job `{}`", j.name), &j.code))
        .chain(
            graph
                .checks
                .iter()
                .map(|c| (format!("check `{}`", c.name), &c.code)),
        );
    for (owner, globs) in owners {
        for glob in globs {
            if cache.matching(glob).is_empty() {
                return Err(CodeError {
                    owner,
                    glob: glob.to_string(),
                    dir: cache.graph_dir.display().to_string(),
                });
            }
        }
    }
    Ok(())
}

/// The code versions of jobs and checks, each computed at its first use and kept for the call
/// that made the cache (a planning, a status, a build): a build's runs of one job all record
/// what was computed once.
pub struct CodeCache {
    graph_dir: PathBuf,
    /// Folders never walked for globs: the data dir (which may lie in the project).
    data_dir: PathBuf,
    jobs: Mutex<FxHashMap<String, Arc<CodeVersions>>>,
    checks: Mutex<FxHashMap<String, Arc<CodeVersions>>>,
    /// The files under each glob's base folder, walked once.
    walked: Mutex<FxHashMap<String, Arc<Vec<String>>>>,
    /// Each file's sha, read once: jobs often share a script.
    shas: Mutex<FxHashMap<String, Option<String>>>,
    /// What each command element names in the project, looked up once: thousands of jobs may
    /// share `python3` and a script.
    named: Mutex<FxHashMap<String, Option<String>>>,
    /// The graph's folder, its links resolved (found at the first command's file).
    root: std::sync::OnceLock<Option<PathBuf>>,
    /// Whether every `code` glob matches a file, found once (see [`CodeCache::validated`]).
    validated: std::sync::OnceLock<Result<(), CodeError>>,
}

impl CodeCache {
    pub fn new(graph_dir: &Path, data_dir: &Path) -> Self {
        CodeCache {
            graph_dir: graph_dir.to_path_buf(),
            data_dir: data_dir.canonicalize().unwrap_or(data_dir.to_path_buf()),
            jobs: Mutex::default(),
            checks: Mutex::default(),
            walked: Mutex::default(),
            shas: Mutex::default(),
            named: Mutex::default(),
            root: std::sync::OnceLock::new(),
            validated: std::sync::OnceLock::new(),
        }
    }

    /// This cache, once every `code` glob of `graph` is known to match a file: walked once, by
    /// the first caller, and the walk kept for the code versions computed after.
    pub fn validated(&self, graph: &Graph) -> Result<&Self, CodeError> {
        match self.validated.get_or_init(|| validate(self, graph)) {
            Ok(()) => Ok(self),
            Err(e) => Err(e.clone()),
        }
    }

    /// `job`'s code versions now (`graph` decides which env values may be hashed).
    pub fn job(&self, graph: &Graph, job: &Job) -> Arc<CodeVersions> {
        memo(&self.jobs, &job.name, || {
            Arc::new(self.compute_job(graph, job))
        })
    }

    fn compute_job(&self, graph: &Graph, job: &Job) -> CodeVersions {
        let config: &[String] = match &job.deps {
            Deps::Dynamic { config } => config,
            _ => &[],
        };
        let mut h = Sha256::new();
        // A marker between the two commands: moving an element from one to the other is a change.
        for part in [&job.command[..], &["\0config".to_string()], config] {
            for a in part {
                field(&mut h, a);
            }
        }
        for (k, v) in &job.env {
            field(&mut h, k);
            field(&mut h, graph.recorded_env_value(k, v));
        }
        self.compute(job.command.iter().chain(config), &job.code, h)
    }

    /// `check`'s code versions now.
    pub fn check(&self, check: &Check) -> Arc<CodeVersions> {
        memo(&self.checks, &check.name, || {
            let mut h = Sha256::new();
            for a in &check.command {
                field(&mut h, a);
            }
            Arc::new(self.compute(check.command.iter(), &check.code, h))
        })
    }

    /// `runs` (of `graph`'s checks) with their checks' code versions now.
    pub fn with_checks_code(&self, graph: &Graph, mut runs: Vec<CheckRun>) -> Vec<CheckRun> {
        for run in &mut runs {
            if let Some(check) = graph.check(&run.name) {
                run.code_versions = self.check(check).map().clone();
            }
        }
        runs
    }

    fn compute<'a>(
        &self,
        named: impl Iterator<Item = &'a String>,
        globs: &[CodeGlob],
        definition: Sha256,
    ) -> CodeVersions {
        let mut files: Vec<String> = named.filter_map(|a| self.in_project(a)).collect();
        for glob in globs {
            files.extend(self.matching(glob).iter().cloned());
        }
        let mut map: BTreeMap<String, String> = files
            .into_iter()
            .filter_map(|path| {
                let sha = self.sha(&path)?;
                Some((path, sha))
            })
            .collect();
        map.insert(
            DEFINITION.to_string(),
            hex(&definition.finalize(), SHA_DIGITS),
        );
        CodeVersions(map)
    }

    /// The path of `arg` relative to the graph's folder, `/`-separated, when it names a regular
    /// file inside it (`python3` and `-c` do not; `jobs/agg.py` does).
    fn in_project(&self, arg: &str) -> Option<String> {
        memo(&self.named, arg, || self.look_up(arg))
    }

    fn look_up(&self, arg: &str) -> Option<String> {
        if arg.is_empty() || arg.contains('\0') {
            return None;
        }
        let path = self.graph_dir.join(arg);
        if !path.is_file() {
            return None;
        }
        let root = self
            .root
            .get_or_init(|| self.graph_dir.canonicalize().ok())
            .as_ref()?;
        let real = path.canonicalize().ok()?;
        let rel = real.strip_prefix(root).ok()?;
        let parts: Vec<&str> = rel.iter().filter_map(|c| c.to_str()).collect();
        Some(parts.join("/"))
    }

    /// The sha of the file at `path` (relative to the graph's folder), read once per cache.
    fn sha(&self, path: &str) -> Option<String> {
        memo(&self.shas, path, || file_sha(&self.graph_dir.join(path)))
    }

    /// The files `glob` matches, sorted.
    fn matching(&self, glob: &CodeGlob) -> Vec<String> {
        let base = glob.base();
        let walked = memo(&self.walked, &base, || {
            let mut files = Vec::new();
            self.walk(&self.graph_dir.join(&base), &base, &mut files);
            Arc::new(files)
        });
        let mut out: Vec<String> = walked.iter().filter(|f| glob.matches(f)).cloned().collect();
        out.sort();
        out
    }

    /// The files under `dir` (`rel` from the graph's folder), leaving out hidden entries
    /// (`.databuild`, `.git`, virtualenvs) and the data dir; links to folders are not followed.
    fn walk(&self, dir: &Path, rel: &str, out: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str() else { continue };
            if name.starts_with('.') {
                continue;
            }
            let path = entry.path();
            let child = if rel.is_empty() {
                name.to_string()
            } else {
                format!("{rel}/{name}")
            };
            match entry.file_type() {
                Ok(t)
                    if t.is_dir()
                        && path.canonicalize().ok().as_deref() != Some(self.data_dir.as_path()) =>
                {
                    self.walk(&path, &child, out);
                }
                Ok(_) if path.is_file() => out.push(child),
                _ => {}
            }
        }
    }
}

/// `map`'s value for `key`, computed by `compute` the first time (outside the lock: a
/// computation may ask the cache again).
fn memo<V: Clone>(map: &Mutex<FxHashMap<String, V>>, key: &str, compute: impl FnOnce() -> V) -> V {
    if let Some(known) = map.lock().expect("code lock").get(key) {
        return known.clone();
    }
    let value = compute();
    map.lock()
        .expect("code lock")
        .insert(key.to_string(), value.clone());
    value
}

/// The first 16 hex digits of the sha256 of the file's content; `None` if it cannot be read.
fn file_sha(path: &Path) -> Option<String> {
    let mut buf = vec![0; crate::hashing::READ];
    let digest = crate::hashing::file_sha256(path, &mut buf).ok()?;
    Some(hex(&digest, SHA_DIGITS))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn fingerprints_are_short_and_absent_for_old_runs() {
        let a = map(&[("jobs/a.sh", "1")]);
        let b = map(&[("jobs/a.sh", "2")]);
        let fa = fingerprint(&a).unwrap();
        assert_eq!(fa.len(), SHORT_DIGITS);
        assert_ne!(Some(fa), fingerprint(&b));
        assert_eq!(fingerprint(&BTreeMap::new()), None);
    }

    #[test]
    fn a_job_hashes_the_files_its_command_names_and_its_globs_match() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("jobs/lib")).unwrap();
        std::fs::create_dir_all(root.join("data/jobs/lib")).unwrap();
        std::fs::write(root.join("jobs/agg.sh"), "echo 1").unwrap();
        std::fs::write(root.join("jobs/lib/x.sh"), "x").unwrap();
        std::fs::write(root.join("data/jobs/lib/y.sh"), "y").unwrap();
        let graph = databuild_core::Graph::parse(
            "[graph]\nname = \"g\"\n[[job]]\nname = \"j\"\noutputs = [\"o/{x}\"]\n\
             command = [\"sh\", \"jobs/agg.sh\", \"-c\", \"jobs/nope.sh\"]\n\
             code = [\"**/lib/*.sh\"]\nenv = { SECRET = \"s1\" }\n",
            "databuild.toml",
        )
        .unwrap();
        let cache = CodeCache::new(root, &root.join("data"));
        let v = cache.job(&graph, &graph.jobs[0]);
        let paths: Vec<&str> = v.map().keys().map(String::as_str).collect();
        // The data dir is not the project's code, and `sh` names no file of it.
        assert_eq!(paths, [DEFINITION, "jobs/agg.sh", "jobs/lib/x.sh"]);
        // A secret's value is never hashed: changing it changes nothing.
        let mut other = graph.jobs[0].clone();
        other.env.insert("SECRET".into(), "s2".into());
        other.name = "k".into();
        let w = CodeCache::new(root, &root.join("data")).job(&graph, &other);
        assert_eq!(v.map()[DEFINITION], w.map()[DEFINITION]);
        assert!(cache.validated(&graph).is_ok());
    }
}
