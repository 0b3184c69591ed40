//! A run's outputs on their way into place: staged under the data dir's staging folder, checked
//! after exit 0, hashed (their content is their data version, [`content_version`]), then moved
//! into place once the log has recorded the run's completion (or discarded, if it never will be).

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use databuild_core::PartitionRef;

use super::link::{self, exchange};
use super::{RunOutcome, RunSpec};
use crate::hashing;

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
/// log has recorded the run's completion: a file in one rename, a folder swapped with the old
/// one in one step ([`exchange`]), so a reader sees the old partition or the new one, never
/// none. Outputs the job wrote in place are left as they are; the staging folder goes, and with
/// it what was replaced.
pub fn publish_outputs(
    data_dir: &Path,
    staging: &Path,
    outputs: &[PartitionRef],
) -> std::io::Result<()> {
    publish(data_dir, staging, outputs, None, exchange).map(drop)
}

/// [`publish_outputs`], keeping what each output replaces at `keep/<ref>` (a file hard-linked
/// there before it is replaced, a folder moved there once swapped out) rather than discarding
/// it. `keep` should lie on the data dir's file system, where a folder moves in one rename; a
/// `keep/<ref>` that exists already is refused before anything moves. Says, for each output it
/// moved into place (in `outputs`' order; one the job wrote in place is not listed), where what
/// it replaced is kept, if it replaced anything.
pub fn publish_keeping(
    data_dir: &Path,
    staging: &Path,
    outputs: &[PartitionRef],
    keep: &Path,
) -> std::io::Result<Vec<Replaced>> {
    publish(data_dir, staging, outputs, Some(keep), exchange)
}

/// One output [`publish_keeping`] moved into place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Replaced {
    pub output: PartitionRef,
    /// Where the data it replaced is kept (`keep/<ref>`); `None`: nothing was there.
    pub kept: Option<PathBuf>,
}

/// How two paths are swapped in one step: [`exchange`], or a test's stand-in for a file system
/// without it.
type Swap = fn(&Path, &Path) -> std::io::Result<()>;

/// [`publish_outputs`] (`keep` none: what is replaced goes with the staging folder) and
/// [`publish_keeping`].
fn publish(
    data_dir: &Path,
    staging: &Path,
    outputs: &[PartitionRef],
    keep: Option<&Path>,
    swap: Swap,
) -> std::io::Result<Vec<Replaced>> {
    if !staging.exists() {
        return Ok(Vec::new());
    }
    let mut published = Vec::new();
    for output in outputs {
        let (staged, target) = (
            staging.join(output.as_str()),
            data_dir.join(output.as_str()),
        );
        if staged.symlink_metadata().is_err() {
            continue;
        }
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent)?;
        }
        let place = Place {
            staged: &staged,
            target: &target,
            kept: keep.map(|k| k.join(output.as_str())),
            aside: staging.join(REPLACED).join(output.as_str()),
        };
        let replaced = place.fill(swap)?;
        published.push(Replaced {
            output: output.clone(),
            kept: place.kept.filter(|_| replaced),
        });
    }
    discard_staged(staging);
    Ok(published)
}

/// The folder of a run's staging folder that what its outputs replaced is moved to, and
/// discarded with.
const REPLACED: &str = ".replaced";

/// Where one staged output goes, and what it replaces goes.
struct Place<'a> {
    staged: &'a Path,
    target: &'a Path,
    /// `keep/<ref>`, when what is replaced is kept.
    kept: Option<PathBuf>,
    /// `<staging>/.replaced/<ref>`, where what is replaced waits to be discarded otherwise.
    aside: PathBuf,
}

impl Place<'_> {
    /// Moves the staged output into place; whether it replaced something.
    fn fill(&self, swap: Swap) -> std::io::Result<bool> {
        let Ok(old) = self.target.symlink_metadata() else {
            std::fs::rename(self.staged, self.target)?;
            return Ok(false);
        };
        if let Some(kept) = &self.kept {
            link::make_room(kept)?;
        }
        // A file (or a link) over a file is one rename; a folder on either side cannot be.
        if !old.is_dir() && !self.staged.symlink_metadata()?.is_dir() {
            self.replace_file()?;
        } else {
            self.replace_folder(swap)?;
        }
        Ok(true)
    }

    /// rename(2) over the old file, which is atomic; a kept one is linked to `keep/<ref>` first.
    fn replace_file(&self) -> std::io::Result<()> {
        if let Some(kept) = &self.kept {
            link::link_as_is(self.target, kept)?;
        }
        std::fs::rename(self.staged, self.target).inspect_err(|_| {
            // The old one is still in place: nothing was replaced, so nothing is kept.
            if let Some(kept) = &self.kept {
                let _ = std::fs::remove_file(kept);
            }
        })
    }

    /// Swaps the staged output with the old folder in one step, then moves the old one (now at
    /// `staged`) to where it goes. A crash in between leaves the new output in place, and
    /// `gc` publishes a staged output only where nothing is in place: the old one is never put
    /// back. Without the swap, today's two renames: the old aside, the new in.
    fn replace_folder(&self, swap: Swap) -> std::io::Result<()> {
        let old_to = self.kept.as_deref().unwrap_or(&self.aside);
        if let Some(parent) = old_to.parent() {
            std::fs::create_dir_all(parent)?;
        }
        match swap(self.staged, self.target) {
            Ok(()) => std::fs::rename(self.staged, old_to).map_err(|e| {
                std::io::Error::new(
                    e.kind(),
                    format!(
                        "`{}` is in place, but what it replaced, at `{}`, cannot be moved to `{}`: {e}",
                        self.target.display(),
                        self.staged.display(),
                        old_to.display()
                    ),
                )
            }),
            Err(e) if link::cannot_exchange(&e) => {
                std::fs::rename(self.target, old_to)?;
                std::fs::rename(self.staged, self.target).inspect_err(|_| {
                    // The old one goes back: never neither of them for longer than this.
                    let _ = std::fs::rename(old_to, self.target);
                })
            }
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!(
                    "cannot swap `{}` into place at `{}`: {e}",
                    self.staged.display(),
                    self.target.display()
                ),
            )),
        }
    }
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

/// Why an output's content could not be hashed.
#[derive(Debug, thiserror::Error)]
#[error("cannot read `{}` to hash its content: {source}", path.display())]
pub struct HashError {
    pub path: PathBuf,
    pub source: std::io::Error,
}

/// What a content version starts with: it tells one from the recipe version (32 hex digits, no
/// prefix, [`data_version`](crate::data::versions::data_version)) a log written before content
/// versions recorded for a job's output.
pub const CONTENT_PREFIX: &str = "sha256:";

/// Whether a job output's recorded version is a recipe version of a log written before content
/// versions (see [`CONTENT_PREFIX`]).
pub fn is_legacy_version(version: &str) -> bool {
    version.len() == 32 && version.bytes().all(|b| b.is_ascii_hexdigit())
}

/// A job output's data version: `sha256:` and 32 hex digits of a hash of its content. A file:
/// the sha256 of its bytes. A folder: of its tree, each entry (sorted by relative path) with
/// its kind and its content's hash. The output itself, if a link, is followed (a job may link
/// its output into a store: its version is what the link points at); a link inside a folder is
/// hashed by its target's text (never followed: what it points at may lie outside the output).
/// Read once, in streaming [`READ`](hashing::READ) reads; an empty file costs one open and one
/// read, as the benchmarks' 24k tiny outputs need.
pub fn content_version(path: &Path) -> Result<String, HashError> {
    content_version_counted(path, &mut 0)
}

/// [`content_version`], adding the bytes of the files it read to `bytes`.
fn content_version_counted(path: &Path, bytes: &mut u64) -> Result<String, HashError> {
    // One buffer per thread (a build's slot threads live as long as it): a run's hashing then
    // allocates nothing, which a build of 24k tiny outputs would otherwise do 24k times.
    thread_local! {
        static BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
    }
    let digest = BUF.with_borrow_mut(|buf| {
        buf.resize(hashing::READ, 0);
        hash_output(path, buf, bytes)
    });
    let digest = digest.map_err(|source| HashError {
        path: path.to_path_buf(),
        source,
    })?;
    Ok(format!("{CONTENT_PREFIX}{}", hashing::hex(&digest[..16])))
}

/// An output's digest, a top-level link followed; a dangling one says where it points.
fn hash_output(path: &Path, buf: &mut [u8], bytes: &mut u64) -> std::io::Result<[u8; 32]> {
    let meta = std::fs::metadata(path).map_err(|e| match std::fs::read_link(path) {
        Ok(target) => std::io::Error::new(
            e.kind(),
            format!(
                "it is a link to `{}`, which cannot be read ({e}); link to an existing file or folder",
                target.display()
            ),
        ),
        Err(_) => e,
    })?;
    if meta.is_dir() {
        hash_tree(path, buf, bytes)
    } else {
        hashing::file_sha256_counted(path, buf, bytes)
    }
}

/// An entry of a folder's digest: a file's bytes, a link's target text, a folder's tree.
fn hash_entry(path: &Path, buf: &mut [u8], bytes: &mut u64) -> std::io::Result<[u8; 32]> {
    let kind = path.symlink_metadata()?.file_type();
    if kind.is_symlink() {
        let target = std::fs::read_link(path)?;
        let mut h = hashing::Fields::new();
        h.raw(b"link\0").raw(target.as_os_str().as_encoded_bytes());
        return Ok(h.finish());
    }
    if kind.is_dir() {
        return hash_tree(path, buf, bytes);
    }
    hashing::file_sha256_counted(path, buf, bytes)
}

/// A folder's digest: its entries sorted by name (each a length-prefixed name, its kind and its
/// digest), a subfolder's tree nested. Two folders with the same files at the same relative
/// paths hash the same wherever they lie and whenever they were written.
fn hash_tree(dir: &Path, buf: &mut [u8], bytes: &mut u64) -> std::io::Result<[u8; 32]> {
    let mut names: Vec<std::ffi::OsString> = std::fs::read_dir(dir)?
        .map(|e| e.map(|e| e.file_name()))
        .collect::<std::io::Result<_>>()?;
    names.sort_unstable();
    let mut h = hashing::Fields::new();
    h.raw(b"tree\0");
    for name in names {
        let path = dir.join(&name);
        let kind = match path.symlink_metadata()?.file_type() {
            k if k.is_symlink() => b'l',
            k if k.is_dir() => b'd',
            _ => b'f',
        };
        h.field(name.as_encoded_bytes())
            .raw([kind])
            .raw(hash_entry(&path, buf, bytes)?);
    }
    Ok(h.finish())
}

/// The data versions of a successful run's outputs, in output order: each hashed where the run
/// left it, staged (`<staging>/<ref>`) or written in place. Hashed just before the completion is
/// recorded, so what is published is what the log's version says (the staged copy is only ever
/// renamed into place).
///
/// `legacy`: by output, the version the partition had if it is a recipe version
/// ([`is_legacy_version`]). Such an output, staged while its old data is still in place, has that
/// old data hashed too (one extra read, while the partition keeps its recipe version): the same bytes keep the old
/// version, so its readers, which recorded that version, stay fresh.
pub(crate) fn output_versions(
    spec: &RunSpec,
    legacy: &[Option<String>],
) -> Result<OutputVersions, HashError> {
    let staging = spec.staging_dir();
    let mut bytes = 0;
    let versions = spec
        .outputs
        .iter()
        .enumerate()
        .map(|(i, o)| {
            let (staged, in_place) = (staging.join(o), spec.data_dir.join(o));
            if staged.symlink_metadata().is_err() {
                return content_version_counted(&in_place, &mut bytes);
            }
            let version = content_version_counted(&staged, &mut bytes)?;
            match legacy.get(i).and_then(Option::as_deref) {
                Some(old) if content_version(&in_place).is_ok_and(|v| v == version) => {
                    Ok(old.to_string())
                }
                _ => Ok(version),
            }
        })
        .collect::<Result<_, _>>()?;
    Ok(OutputVersions { versions, bytes })
}

/// What [`output_versions`] found: each output's version, and their files' bytes together
/// (the run's `output_bytes`: what the hashing read, links inside folders not followed).
pub(crate) struct OutputVersions {
    pub versions: Vec<String>,
    pub bytes: u64,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::MetadataExt;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_file_is_the_sha256_of_its_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        write(&f, "");
        // sha256("") = e3b0c442 98fc1c14 9afbf4c8 996fb924 …
        assert_eq!(
            content_version(&f).unwrap(),
            "sha256:e3b0c44298fc1c149afbf4c8996fb924"
        );
        write(&f, "a,b\n");
        let v = content_version(&f).unwrap();
        assert_eq!(v.len(), CONTENT_PREFIX.len() + 32);
        // A content version is never taken for a recipe version of an older log.
        assert!(!is_legacy_version(&v));
        assert!(is_legacy_version("0123456789abcdef0123456789abcdef"));
    }

    #[test]
    fn an_output_that_is_a_link_is_what_it_points_at() {
        let dir = tempfile::tempdir().unwrap();
        let (store, out) = (dir.path().join("store/x"), dir.path().join("out/ref"));
        write(&store, "1\n");
        std::fs::create_dir_all(out.parent().unwrap()).unwrap();
        std::os::unix::fs::symlink(&store, &out).unwrap();
        let before = content_version(&out).unwrap();
        assert_eq!(before, content_version(&store).unwrap());
        // The same link text, other bytes behind it: another version.
        write(&store, "2\n");
        assert_ne!(content_version(&out).unwrap(), before);
        // A linked folder: its tree.
        let (tree, linked) = (dir.path().join("store/tree"), dir.path().join("out/tree"));
        write(&tree.join("part-0.csv"), "1\n");
        std::os::unix::fs::symlink(&tree, &linked).unwrap();
        assert_eq!(
            content_version(&linked).unwrap(),
            content_version(&tree).unwrap()
        );
        // A dangling link names the output and where it points.
        std::fs::remove_file(&store).unwrap();
        let e = content_version(&out).unwrap_err().to_string();
        assert!(e.contains("out/ref") && e.contains("store/x"), "{e}");
    }

    #[test]
    fn a_legacy_version_is_kept_for_the_same_bytes_staged_over_it() {
        let dir = tempfile::tempdir().unwrap();
        let spec = RunSpec {
            data_dir: dir.path().to_path_buf(),
            outputs: vec!["a".into(), "b".into()],
            job_run_id: "r1".into(),
            ..RunSpec::default()
        };
        let staging = spec.staging_dir();
        for (name, old, new) in [("a", "1\n", "1\n"), ("b", "1\n", "2\n")] {
            write(&dir.path().join(name), old);
            write(&staging.join(name), new);
        }
        let legacy = "0123456789abcdef0123456789abcdef".to_string();
        let both = [Some(legacy.clone()), Some(legacy.clone())];
        let v = output_versions(&spec, &both).unwrap();
        assert_eq!(
            v.versions[0], legacy,
            "the same bytes keep the recipe version"
        );
        assert_eq!(v.versions[1], content_version(&staging.join("b")).unwrap());
        // Not a legacy version before: the content version, however the old bytes compare.
        let v = output_versions(&spec, &[]).unwrap();
        assert_eq!(v.versions[0], content_version(&staging.join("a")).unwrap());
        // The outputs' size: the staged bytes, not the old ones hashed beside them.
        assert_eq!(v.bytes, 4);
    }

    #[test]
    fn output_bytes_sum_every_file_of_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let spec = RunSpec {
            data_dir: dir.path().to_path_buf(),
            outputs: vec!["a".into(), "b".into()],
            job_run_id: "r1".into(),
            ..RunSpec::default()
        };
        write(&dir.path().join("a/part-0"), "12345");
        write(&dir.path().join("a/sub/part-1"), "123");
        write(&dir.path().join("b"), "12");
        assert_eq!(output_versions(&spec, &[]).unwrap().bytes, 10);
    }

    #[test]
    fn a_folder_is_its_tree_wherever_and_whenever_written() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (dir.path().join("a"), dir.path().join("b"));
        for root in [&a, &b] {
            write(&root.join("part-0.csv"), "1\n");
            write(&root.join("sub/part-1.csv"), "2\n");
        }
        let va = content_version(&a).unwrap();
        assert_eq!(va, content_version(&b).unwrap(), "same tree, same version");
        // A file changed, renamed, or a link instead: each another version.
        write(&b.join("sub/part-1.csv"), "3\n");
        let changed = content_version(&b).unwrap();
        assert_ne!(va, changed);
        write(&b.join("sub/part-1.csv"), "2\n");
        assert_eq!(va, content_version(&b).unwrap());
        std::fs::rename(b.join("sub/part-1.csv"), b.join("sub/part-2.csv")).unwrap();
        assert_ne!(va, content_version(&b).unwrap());
        std::fs::remove_file(b.join("sub/part-2.csv")).unwrap();
        std::os::unix::fs::symlink("../part-0.csv", b.join("sub/part-1.csv")).unwrap();
        assert_ne!(va, content_version(&b).unwrap());
        // A folder and a file of the same bytes differ.
        assert_ne!(content_version(&a.join("part-0.csv")).unwrap(), va);
    }

    /// A staging folder `<data_dir>/.databuild-staging/<run>` holding `files` (ref-relative).
    fn staged(data_dir: &Path, run: &str, files: &[(&str, &str)]) -> PathBuf {
        let staging = staging_dir(data_dir, run);
        for (path, text) in files {
            write(&staging.join(path), text);
        }
        staging
    }

    fn refs(names: &[&str]) -> Vec<PartitionRef> {
        names
            .iter()
            .map(|n| PartitionRef::new(n).unwrap())
            .collect()
    }

    fn read(path: &Path) -> String {
        std::fs::read_to_string(path).unwrap()
    }

    #[test]
    fn a_folder_replaced_is_swapped_and_its_old_tree_discarded() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        write(&data.join("t/old.csv"), "old\n");
        write(&data.join("f"), "old\n");
        let staging = staged(
            data,
            "r1",
            &[("t/part.csv", "new\n"), ("f/part.csv", "new\n")],
        );
        publish_outputs(data, &staging, &refs(&["t", "f"])).unwrap();
        assert_eq!(read(&data.join("t/part.csv")), "new\n");
        assert!(
            !data.join("t/old.csv").exists(),
            "the old tree is not merged in"
        );
        // A file replaced by a folder: swapped too (one rename cannot put a folder over a file).
        assert_eq!(read(&data.join("f/part.csv")), "new\n");
        assert!(
            !staging.exists(),
            "the staging folder and what was replaced are gone"
        );
    }

    #[test]
    fn without_the_swap_a_folder_is_replaced_by_two_renames() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        write(&data.join("t/old.csv"), "old\n");
        let staging = staged(data, "r1", &[("t/part.csv", "new\n")]);
        let keep = data.join("keep");
        let unsupported = |_: &Path, _: &Path| Err(std::io::Error::from_raw_os_error(libc::ENOSYS));
        let replaced = publish(data, &staging, &refs(&["t"]), Some(&keep), unsupported).unwrap();
        assert_eq!(read(&data.join("t/part.csv")), "new\n");
        assert_eq!(read(&keep.join("t/old.csv")), "old\n");
        assert_eq!(replaced[0].kept.as_deref(), Some(keep.join("t").as_path()));
        // Any other failure of the swap is an error, and nothing moved.
        let staging = staged(data, "r2", &[("t/part.csv", "newer\n")]);
        let broken = |_: &Path, _: &Path| Err(std::io::Error::from_raw_os_error(libc::EIO));
        let e = publish(data, &staging, &refs(&["t"]), None, broken).unwrap_err();
        assert!(e.to_string().contains("cannot swap"), "{e}");
        assert_eq!(read(&data.join("t/part.csv")), "new\n");
    }

    #[test]
    fn publish_keeping_keeps_what_it_replaced_and_says_what_replaced_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().join("data");
        write(&data.join("day/t/part.csv"), "old t\n");
        write(&data.join("day/f.csv"), "old f\n");
        let old_file = data.join("day/f.csv").metadata().unwrap().ino();
        let staging = staged(
            &data,
            "r1",
            &[
                ("day/t/part.csv", "new t\n"),
                ("day/f.csv", "new f\n"),
                ("day/n.csv", "n\n"),
            ],
        );
        let keep = dir.path().join("keep");
        let outputs = refs(&["day/t", "day/f.csv", "day/n.csv", "day/in-place.csv"]);
        let replaced = publish_keeping(&data, &staging, &outputs, &keep).unwrap();
        let kept: Vec<_> = replaced
            .iter()
            .map(|r| (r.output.as_str(), r.kept.clone()))
            .collect();
        assert_eq!(
            kept,
            [
                ("day/t", Some(keep.join("day/t"))),
                ("day/f.csv", Some(keep.join("day/f.csv"))),
                ("day/n.csv", None),
            ],
            "an output the job wrote in place is not listed"
        );
        assert_eq!(read(&keep.join("day/t/part.csv")), "old t\n");
        assert_eq!(read(&keep.join("day/f.csv")), "old f\n");
        assert_eq!(
            keep.join("day/f.csv").metadata().unwrap().ino(),
            old_file,
            "linked"
        );
        for (path, text) in [
            ("day/t/part.csv", "new t\n"),
            ("day/f.csv", "new f\n"),
            ("day/n.csv", "n\n"),
        ] {
            assert_eq!(read(&data.join(path)), text);
        }
        // A second publish would write over what is kept: refused before anything moves.
        let staging = staged(&data, "r2", &[("day/f.csv", "newer f\n")]);
        let e = publish_keeping(&data, &staging, &refs(&["day/f.csv"]), &keep).unwrap_err();
        assert!(e.to_string().contains("already exists"), "{e}");
        assert_eq!(read(&data.join("day/f.csv")), "new f\n");
        assert_eq!(read(&keep.join("day/f.csv")), "old f\n");
        // An output that was a link (into a store) is kept as that link, not what it points at.
        std::os::unix::fs::symlink("f.csv", data.join("day/l.csv")).unwrap();
        let staging = staged(&data, "r3", &[("day/l.csv", "l\n")]);
        publish_keeping(&data, &staging, &refs(&["day/l.csv"]), &keep).unwrap();
        let kept = keep.join("day/l.csv");
        assert_eq!(std::fs::read_link(kept).unwrap(), Path::new("f.csv"));
        assert_eq!(read(&data.join("day/l.csv")), "l\n");
    }

    #[test]
    fn a_reader_sees_the_old_or_the_new_partition_never_none() {
        use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
        const READS: usize = 2_000;
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path().to_path_buf();
        // Two contents of different lengths, so a torn read would match neither.
        let (a, b) = ("a\n".repeat(500), "bb\n".repeat(700));
        write(&data.join("t/part.csv"), &a);
        // Staged before the reads start, so what runs beside them is only publishing (a
        // publish takes ~3 ms on a slow disk: the reads end long before 200 have run).
        let stagings: Vec<PathBuf> = (0..200)
            .map(|i| {
                let text = if i % 2 == 0 { &b } else { &a };
                staged(&data, &format!("r{i}"), &[("t/part.csv", text)])
            })
            .collect();
        let (done, published) = (AtomicBool::new(false), AtomicUsize::new(0));
        let start = std::sync::Barrier::new(2);
        let part = data.join("t/part.csv");
        let reads: Vec<_> = std::thread::scope(|s| {
            s.spawn(|| {
                start.wait();
                for staging in stagings.iter().take_while(|_| !done.load(Relaxed)) {
                    publish_outputs(&data, staging, &refs(&["t"])).unwrap();
                    published.fetch_add(1, Relaxed);
                }
            });
            start.wait();
            // Each time a stat (is it there?) and a read (is it whole?).
            let reads = (0..READS).map(|_| (part.metadata(), std::fs::read_to_string(&part)));
            let reads = reads.collect();
            done.store(true, Relaxed);
            reads
        });
        for (i, (stat, read)) in reads.into_iter().enumerate() {
            let missing = |e: std::io::Error| format!("read {i} found no partition: {e}");
            stat.map_err(missing).unwrap();
            let text = read.map_err(missing).unwrap();
            assert!(text == a || text == b, "read {i} saw a torn partition");
        }
        let published = published.into_inner();
        assert!(
            published > 1,
            "published {published} times while it was read"
        );
    }

    #[test]
    fn a_linked_copy_keeps_its_bytes_when_the_partition_is_published_over() {
        let dir = tempfile::tempdir().unwrap();
        let data = dir.path();
        write(&data.join("t/part.csv"), "v1\n");
        let env = data.join(".databuild-env/dev/t");
        let linked = link::link_tree(&data.join("t"), &env).unwrap();
        assert_eq!(linked.linked, 1);
        let staging = staged(data, "r1", &[("t/part.csv", "v2\n")]);
        publish_outputs(data, &staging, &refs(&["t"])).unwrap();
        assert_eq!(read(&data.join("t/part.csv")), "v2\n");
        assert_eq!(read(&env.join("part.csv")), "v1\n");
    }

    #[test]
    fn an_unreadable_output_says_which() {
        let dir = tempfile::tempdir().unwrap();
        let e = content_version(&dir.path().join("nope")).unwrap_err();
        assert!(e.to_string().contains("nope"), "{e}");
    }
}
