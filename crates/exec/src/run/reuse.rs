//! A run in an environment that takes an instance instead of running (contract section 9): its
//! outputs' bytes, made from the same recipe in another environment, hard-linked into its
//! staging folder (no copy), checked against their recorded versions, then published as any
//! run's. If anything differs (the instance was replaced meanwhile), the run runs.

use std::io::Write as _;
use std::path::PathBuf;

use databuild_log::RunRecipe;

use super::RunSpec;

/// Finds an instance of a run's outputs made from a recipe (the engine's, over every other
/// environment's log).
pub(crate) type Instances<'a> = &'a (dyn Fn(&[String], &RunRecipe) -> Option<Instance> + Sync);

/// What a reused run took: the instance, and its outputs' versions and bytes as hashed here.
pub(crate) struct Taken {
    pub from: databuild_log::ReusedFrom,
    pub versions: Vec<String>,
    pub bytes: u64,
}

/// Takes an instance of `spec`'s outputs made from `recipe`, if one is live somewhere and its
/// bytes are still what its log says.
pub(crate) fn take(spec: &RunSpec, recipe: &RunRecipe, instances: Instances<'_>) -> Option<Taken> {
    let found = instances(&spec.outputs, recipe)?;
    let staging = spec.staging_dir();
    let linked = link_all(spec, &found);
    let versions = linked
        .ok()
        .and_then(|_| super::publish::output_versions(spec, &[]).ok());
    let taken = versions.filter(|v| same_versions(&v.versions, &found.versions));
    let Some(v) = taken else {
        // Replaced, removed or unreadable since its log said so: the run runs instead.
        super::publish::discard_staged(&staging);
        return None;
    };
    say(spec, &found, v.bytes);
    Some(Taken {
        from: found.from,
        versions: v.versions,
        bytes: v.bytes,
    })
}

fn link_all(spec: &RunSpec, found: &Instance) -> std::io::Result<()> {
    let staging = spec.staging_dir();
    for (output, path) in spec.outputs.iter().zip(&found.paths) {
        crate::run::link::link_tree(path, &staging.join(output))?;
    }
    Ok(())
}

/// Content versions must match; a recipe version (of a log from before content versions) says
/// nothing of the bytes, so the hash taken here stands.
fn same_versions(hashed: &[String], recorded: &[String]) -> bool {
    hashed.len() == recorded.len()
        && hashed
            .iter()
            .zip(recorded)
            .all(|(h, r)| crate::run::publish::is_legacy_version(r) || h == r)
}

/// The run's log says what it took, so `databuild logs` of it answers.
fn say(spec: &RunSpec, found: &Instance, bytes: u64) {
    if let Some(dir) = spec.log_path.parent() {
        let _ = std::fs::create_dir_all(dir);
    }
    if let Ok(mut log) = std::fs::File::create(&spec.log_path) {
        let _ = writeln!(
            log,
            "reused run {} of environment `{}`: its {} output(s), {bytes} bytes, linked, not copied; no job ran",
            found.from.job_run_id,
            found.from.environment,
            spec.outputs.len()
        );
    }
}

/// An instance a run can take instead of running: where its outputs' bytes are, and their
/// recorded versions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Instance {
    pub from: databuild_log::ReusedFrom,
    /// By output, in the run's output order.
    pub paths: Vec<PathBuf>,
    pub versions: Vec<String>,
}
