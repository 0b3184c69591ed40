//! A run's outputs on their way into place: staged under the data dir's staging folder, checked
//! after exit 0, then moved into place once the log has recorded the run's completion (or
//! discarded, if it never will be).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use super::{RunOutcome, RunSpec};

/// The folder of the data dir that holds runs' outputs until the log has recorded them.
pub const STAGING: &str = ".databuild-staging";

/// Where a run writes its outputs (`DATABUILD_OUTPUT_DIR`): `<data_dir>/.databuild-staging/<run>`.
pub fn staging_dir(data_dir: &Path, job_run_id: &str) -> PathBuf {
    data_dir.join(STAGING).join(job_run_id)
}

fn mtime(path: &Path) -> Option<SystemTime> {
    std::fs::metadata(path).and_then(|m| m.modified()).ok()
}

/// The modification times of a run's outputs before it starts.
pub(crate) fn output_times(spec: &RunSpec) -> Vec<Option<SystemTime>> {
    spec.outputs
        .iter()
        .map(|o| mtime(&spec.data_dir.join(o)))
        .collect()
}

/// After exit 0: every output exists and was written by the run, staged
/// (`DATABUILD_OUTPUT_DIR/<ref>`) or in place.
pub(crate) fn verify_outputs(spec: &RunSpec, before: &[Option<SystemTime>]) -> RunOutcome {
    if spec.check {
        return RunOutcome::Succeeded;
    }
    let staging = spec.staging_dir();
    let staged = staging.exists();
    for (output, before) in spec.outputs.iter().zip(before) {
        if staged && staging.join(output).symlink_metadata().is_ok() {
            continue;
        }
        let path = spec.data_dir.join(output);
        let message = match mtime(&path) {
            Some(now) if Some(now) != *before => continue,
            // The job made its output dir (the engine does not), yet this output is not in it:
            // it wrote there and never this output, or removed it before it ended; either way,
            // said so.
            found if staged => {
                let in_place = match found {
                    None => format!("nor at {}", path.display()),
                    Some(_) => "and the one in place is unchanged since before the run".to_string(),
                };
                format!(
                    "the job exited 0 but `{output}` is not in its output dir ({}) {in_place}: \
                     it never wrote it there, or removed it before it ended",
                    staging.join(output).display()
                )
            }
            None => format!(
                "the job exited 0 but did not produce `{output}` (expected at {})",
                path.display()
            ),
            Some(_) => format!(
                "the job exited 0 but did not write `{output}`: it is unchanged since before the run"
            ),
        };
        return RunOutcome::failed(message, Some(0));
    }
    RunOutcome::Succeeded
}

/// Moves a run's staged outputs (`<staging>/<ref>`) into place (`<data_dir>/<ref>`), once the
/// log has recorded the run's completion: a file in one rename, a folder by moving the old one
/// aside first. Outputs the job wrote in place are left as they are; the staging folder goes.
pub fn publish_outputs(
    data_dir: &Path,
    staging: &Path,
    outputs: &[databuild_core::PartitionRef],
) -> std::io::Result<()> {
    if !staging.exists() {
        return Ok(());
    }
    for output in outputs {
        let output = output.as_str();
        let (staged, target) = (staging.join(output), data_dir.join(output));
        if staged.symlink_metadata().is_err() {
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        if target.is_dir() && !target.is_symlink() {
            let aside = staging.join(".replaced").join(output);
            std::fs::create_dir_all(aside.parent().unwrap_or(staging))?;
            std::fs::rename(&target, &aside)?;
            if let Err(e) = std::fs::rename(&staged, &target) {
                // The old folder goes back: never neither of them.
                let _ = std::fs::rename(&aside, &target);
                return Err(e);
            }
        } else {
            std::fs::rename(&staged, &target)?;
        }
    }
    discard_staged(staging);
    Ok(())
}

/// Removes what a run staged that will never be published (it failed, or lost its claim).
pub fn discard_staged(staging: &Path) {
    // Nothing there, or left behind: it is never read.
    let _ = std::fs::remove_dir_all(staging);
}

/// [`discard_staged`] of run `job_run_id`.
pub fn discard_run(data_dir: &Path, job_run_id: &str) {
    discard_staged(&staging_dir(data_dir, job_run_id));
}
