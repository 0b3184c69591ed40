//! Partitions shared by reference, and swapped in one step.
//!
//! An environment reuses another's partition as a hard-link copy ([`link_tree`]): folders
//! recreated, files hard-linked, so the copy costs no bytes and keeps the instance's bytes
//! however the other environment later replaces its partition (publishing renames a new tree
//! into place; it never writes into the old files). Where a file cannot be linked (another file
//! system, a file system that refuses, a file at its link limit) it is copied, and [`Linked`]
//! says so.
//!
//! [`exchange`] swaps two paths atomically (`renameat2(RENAME_EXCHANGE)`), so a folder replaced
//! in place is, to every reader, the old one or the new one, never missing. It is the one
//! function here allowed `unsafe`: std offers no `renameat2`.

use std::ffi::CString;
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// What [`link_tree`] made: its regular files (`files = linked + copied`; folders and symbolic
/// links are not counted) and their size together.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Linked {
    pub files: u64,
    pub linked: u64,
    pub copied: u64,
    pub bytes: u64,
    /// Why the first copied file could not be linked; `None` when every file was linked.
    pub copied_because: Option<CopyReason>,
}

/// Why a file was copied rather than hard-linked: the link's `errno`, as a caller says it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyReason {
    /// `EXDEV`: the source lies on another file system.
    OtherFileSystem,
    /// `EPERM`: the file system refuses hard links (or the source may not be linked).
    NotPermitted,
    /// `EMLINK`: the source file has as many links as its file system allows.
    TooManyLinks,
}

impl CopyReason {
    /// The reason for a failed hard link's error, if copying is the answer to it.
    fn of(e: &io::Error) -> Option<CopyReason> {
        match e.raw_os_error()? {
            libc::EXDEV => Some(CopyReason::OtherFileSystem),
            libc::EPERM => Some(CopyReason::NotPermitted),
            libc::EMLINK => Some(CopyReason::TooManyLinks),
            _ => None,
        }
    }
}

impl std::fmt::Display for CopyReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            CopyReason::OtherFileSystem => "another file system",
            CopyReason::NotPermitted => "the file system does not permit hard links",
            CopyReason::TooManyLinks => "a file has as many hard links as its file system allows",
        })
    }
}

/// Makes `dst` a hard-link copy of `src`, a file or a folder (a symbolic link at `src` itself is
/// followed: the copy is of what it points at). `dst` must not exist; its parent is created.
/// Inside a folder, folders are recreated (with their permissions), regular files hard-linked
/// (copied, permissions kept, where [`CopyReason`] says linking cannot work) and symbolic links
/// recreated with the same target. On an error nothing is left at `dst`.
pub fn link_tree(src: &Path, dst: &Path) -> io::Result<Linked> {
    link_tree_with(src, dst, &|s, d| std::fs::hard_link(s, d))
}

/// [`link_tree`] of `src` as it is: a symbolic link at `src` is recreated, not followed (a
/// replaced output that is a link is kept as that link).
pub(crate) fn link_as_is(src: &Path, dst: &Path) -> io::Result<Linked> {
    make_room(dst)?;
    let mut linked = Linked::default();
    let made = link_entry(src, dst, &mut linked, &|s, d| std::fs::hard_link(s, d));
    finish(made, dst, linked)
}

/// How a file is hard-linked: [`std::fs::hard_link`], or a test's failing stand-in.
type LinkFn = dyn Fn(&Path, &Path) -> io::Result<()>;

fn link_tree_with(src: &Path, dst: &Path, link: &LinkFn) -> io::Result<Linked> {
    // Resolved here, so the walk below never follows a link it meets.
    let src = std::fs::canonicalize(src).map_err(|e| with_path(e, "cannot read", src))?;
    make_room(dst)?;
    refuse_inside(&src, dst)?;
    let mut linked = Linked::default();
    let made = link_entry(&src, dst, &mut linked, link);
    finish(made, dst, linked)
}

/// Refuses an existing `dst` (it is never merged into) and makes its parent.
pub(crate) fn make_room(dst: &Path) -> io::Result<()> {
    if dst.symlink_metadata().is_ok() {
        return Err(io::Error::new(
            io::ErrorKind::AlreadyExists,
            format!(
                "`{}` already exists, and is never written over or merged into; remove it first",
                dst.display()
            ),
        ));
    }
    match dst.parent() {
        Some(parent) => {
            std::fs::create_dir_all(parent).map_err(|e| with_path(e, "cannot create", parent))
        }
        None => Ok(()),
    }
}

/// Refuses a `dst` inside `src` (resolved): the walk would meet the copy it is making and copy
/// it into itself without end.
fn refuse_inside(src: &Path, dst: &Path) -> io::Result<()> {
    let parent = match dst.parent() {
        Some(p) if !p.as_os_str().is_empty() => std::fs::canonicalize(p)?,
        _ => std::env::current_dir()?,
    };
    if parent.starts_with(src) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "cannot make a linked copy of `{}` inside itself, at `{}`: give a place outside it",
                src.display(),
                dst.display()
            ),
        ));
    }
    Ok(())
}

/// The walk's result, or, if it failed, the error once what it made at `dst` is gone.
fn finish(made: io::Result<()>, dst: &Path, linked: Linked) -> io::Result<Linked> {
    if let Err(e) = made {
        // `dst` did not exist before: whatever is there now is this walk's half tree.
        remove_made(dst);
        return Err(e);
    }
    Ok(linked)
}

/// Removes what a failed walk made at `dst`. A folder it copied a read-only mode onto cannot be
/// emptied by its owner: such folders are made writable and the removal tried again.
fn remove_made(dst: &Path) {
    use std::os::unix::fs::PermissionsExt;
    let Ok(meta) = dst.symlink_metadata() else {
        return;
    };
    if !meta.is_dir() {
        let _ = std::fs::remove_file(dst);
        return;
    }
    if std::fs::remove_dir_all(dst).is_ok() {
        return;
    }
    let mut dirs = vec![dst.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        let entries = std::fs::read_dir(&dir).into_iter().flatten().flatten();
        dirs.extend(
            entries
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path()),
        );
    }
    let _ = std::fs::remove_dir_all(dst);
}

/// Links `src` (never followed) at `dst`, counting into `linked`.
fn link_entry(src: &Path, dst: &Path, linked: &mut Linked, link: &LinkFn) -> io::Result<()> {
    let meta = src
        .symlink_metadata()
        .map_err(|e| with_path(e, "cannot read", src))?;
    let kind = meta.file_type();
    if kind.is_dir() {
        return link_folder(src, dst, meta.permissions(), linked, link);
    }
    if kind.is_symlink() {
        let target = std::fs::read_link(src).map_err(|e| with_path(e, "cannot read", src))?;
        return std::os::unix::fs::symlink(target, dst)
            .map_err(|e| with_path(e, "cannot create", dst));
    }
    if !kind.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "`{}` is neither a file, a folder nor a symbolic link (a partition holds only those)",
                src.display()
            ),
        ));
    }
    link_file(src, dst, meta.len(), linked, link)
}

fn link_folder(
    src: &Path,
    dst: &Path,
    mode: std::fs::Permissions,
    linked: &mut Linked,
    link: &LinkFn,
) -> io::Result<()> {
    std::fs::create_dir(dst).map_err(|e| with_path(e, "cannot create", dst))?;
    let mut names = std::fs::read_dir(src)
        .and_then(|entries| {
            entries
                .map(|e| e.map(|e| e.file_name()))
                .collect::<io::Result<Vec<_>>>()
        })
        .map_err(|e| with_path(e, "cannot read the folder", src))?;
    // In name order: the same tree is walked the same way every time.
    names.sort_unstable();
    for name in names {
        link_entry(&src.join(&name), &dst.join(&name), linked, link)?;
    }
    // Set last: a read-only folder is still filled first.
    std::fs::set_permissions(dst, mode).map_err(|e| with_path(e, "cannot set the mode of", dst))
}

fn link_file(
    src: &Path,
    dst: &Path,
    len: u64,
    linked: &mut Linked,
    link: &LinkFn,
) -> io::Result<()> {
    match link(src, dst) {
        Ok(()) => linked.linked += 1,
        Err(e) => {
            let Some(reason) = CopyReason::of(&e) else {
                return Err(io::Error::new(
                    e.kind(),
                    format!(
                        "cannot link `{}` to `{}`: {e}",
                        src.display(),
                        dst.display()
                    ),
                ));
            };
            // `fs::copy` keeps the permissions.
            std::fs::copy(src, dst).map_err(|e| {
                io::Error::new(
                    e.kind(),
                    format!(
                        "cannot copy `{}` to `{}` ({reason}: it cannot be linked): {e}",
                        src.display(),
                        dst.display()
                    ),
                )
            })?;
            linked.copied += 1;
            linked.copied_because.get_or_insert(reason);
        }
    }
    linked.files += 1;
    linked.bytes += len;
    Ok(())
}

/// An io error that names the path it is about, its kind kept.
fn with_path(e: io::Error, what: &str, path: &Path) -> io::Error {
    io::Error::new(e.kind(), format!("{what} `{}`: {e}", path.display()))
}

/// Swaps `a` and `b` in one step (`renameat2` with `RENAME_EXCHANGE`): both must exist, and may
/// be of different kinds (a file and a folder). A file system or kernel without the exchange
/// answers `EINVAL` or `ENOSYS` (see [`cannot_exchange`]); the caller falls back to renames.
#[allow(unsafe_code)]
pub fn exchange(a: &Path, b: &Path) -> io::Result<()> {
    let a = CString::new(a.as_os_str().as_bytes())?;
    let b = CString::new(b.as_os_str().as_bytes())?;
    // SAFETY: both pointers are to NUL-terminated strings that outlive the call, which only
    // reads them; `renameat2` touches no memory of ours otherwise.
    let r = unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            a.as_ptr(),
            libc::AT_FDCWD,
            b.as_ptr(),
            libc::RENAME_EXCHANGE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Whether [`exchange`]'s error says the file system (or kernel) cannot exchange at all, rather
/// than that these paths cannot be.
pub fn cannot_exchange(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EINVAL | libc::ENOSYS | libc::EOPNOTSUPP)
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn ino(path: &Path) -> u64 {
        path.metadata().unwrap().ino()
    }

    /// `src/a.csv`, `src/sub/b.csv` (mode 0640), `src/sub/deeper/`, `src/sub/link -> ../a.csv`.
    fn tree(root: &Path) -> std::path::PathBuf {
        let src = root.join("src");
        write(&src.join("a.csv"), "1,2\n");
        write(&src.join("sub/b.csv"), "3\n");
        std::fs::set_permissions(src.join("sub/b.csv"), PermissionsExt::from_mode(0o640)).unwrap();
        std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
        std::os::unix::fs::symlink("../a.csv", src.join("sub/link")).unwrap();
        src
    }

    #[test]
    fn a_file_is_linked_sharing_its_inode() {
        let dir = tempfile::tempdir().unwrap();
        let (src, dst) = (dir.path().join("f.csv"), dir.path().join("env/x/f.csv"));
        write(&src, "12345");
        let linked = link_tree(&src, &dst).unwrap();
        assert_eq!(
            linked,
            Linked {
                files: 1,
                linked: 1,
                bytes: 5,
                ..Linked::default()
            }
        );
        assert_eq!(ino(&src), ino(&dst));
        // A link at `src` itself is followed: the copy is of the file.
        let via = dir.path().join("via");
        std::os::unix::fs::symlink(&src, &via).unwrap();
        let dst2 = dir.path().join("env/y");
        link_tree(&via, &dst2).unwrap();
        assert!(!dst2.symlink_metadata().unwrap().is_symlink());
        assert_eq!(ino(&src), ino(&dst2));
    }

    #[test]
    fn a_tree_is_recreated_its_files_linked_and_links_kept() {
        let dir = tempfile::tempdir().unwrap();
        let src = tree(dir.path());
        let dst = dir.path().join("env/part");
        let linked = link_tree(&src, &dst).unwrap();
        assert_eq!((linked.files, linked.linked, linked.copied), (2, 2, 0));
        assert_eq!(linked.bytes, 6);
        for f in ["a.csv", "sub/b.csv"] {
            assert_eq!(
                ino(&src.join(f)),
                ino(&dst.join(f)),
                "{f} is the same inode"
            );
        }
        assert!(dst.join("sub/deeper").is_dir());
        assert_ne!(
            ino(&src.join("sub")),
            ino(&dst.join("sub")),
            "folders are new"
        );
        let link = dst.join("sub/link");
        assert!(link.symlink_metadata().unwrap().is_symlink());
        assert_eq!(std::fs::read_link(&link).unwrap(), Path::new("../a.csv"));
        assert_eq!(std::fs::read_to_string(link).unwrap(), "1,2\n");
    }

    #[test]
    fn an_existing_dst_is_refused_and_left_as_is() {
        let dir = tempfile::tempdir().unwrap();
        let src = tree(dir.path());
        let dst = dir.path().join("dst");
        write(&dst.join("mine.csv"), "mine\n");
        let e = link_tree(&src, &dst).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AlreadyExists);
        assert!(e.to_string().contains("dst` already exists"), "{e}");
        let left: Vec<_> = std::fs::read_dir(&dst).unwrap().collect();
        assert_eq!(left.len(), 1);
        assert_eq!(
            std::fs::read_to_string(dst.join("mine.csv")).unwrap(),
            "mine\n"
        );
    }

    #[test]
    fn a_file_that_cannot_be_linked_is_copied_with_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let src = tree(dir.path());
        let dst = dir.path().join("dst");
        let exdev = |_: &Path, _: &Path| Err(io::Error::from_raw_os_error(libc::EXDEV));
        let linked = link_tree_with(&src, &dst, &exdev).unwrap();
        assert_eq!((linked.files, linked.linked, linked.copied), (2, 0, 2));
        assert_eq!(linked.copied_because, Some(CopyReason::OtherFileSystem));
        assert_eq!(
            linked.copied_because.unwrap().to_string(),
            "another file system"
        );
        assert_ne!(ino(&src.join("a.csv")), ino(&dst.join("a.csv")));
        assert_eq!(
            std::fs::read_to_string(dst.join("sub/b.csv")).unwrap(),
            "3\n"
        );
        let mode = dst
            .join("sub/b.csv")
            .metadata()
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o640);
    }

    #[test]
    fn another_file_system_is_copied() {
        // /dev/shm is a tmpfs on Linux; the temp dir is usually not.
        let Ok(other) = tempfile::tempdir_in("/dev/shm") else {
            eprintln!("skipped: no /dev/shm to be another file system");
            return;
        };
        let dir = tempfile::tempdir().unwrap();
        if other.path().metadata().unwrap().dev() == dir.path().metadata().unwrap().dev() {
            eprintln!("skipped: /dev/shm and the temp dir are one file system");
            return;
        }
        let src = tree(other.path());
        let linked = link_tree(&src, &dir.path().join("dst")).unwrap();
        assert_eq!((linked.files, linked.copied), (2, 2));
        assert_eq!(linked.copied_because, Some(CopyReason::OtherFileSystem));
    }

    #[test]
    fn a_failure_midway_leaves_no_half_tree() {
        let dir = tempfile::tempdir().unwrap();
        let src = tree(dir.path());
        let dst = dir.path().join("env/dst");
        // `a.csv` links (it comes first by name), `sub/b.csv` fails as a disk might.
        let second_fails = |s: &Path, d: &Path| match s.ends_with("b.csv") {
            true => Err(io::Error::from_raw_os_error(libc::EIO)),
            false => std::fs::hard_link(s, d),
        };
        let e = link_tree_with(&src, &dst, &second_fails).unwrap_err();
        assert!(e.to_string().contains("sub/b.csv"), "{e}");
        assert!(dst.symlink_metadata().is_err(), "the half tree is gone");
        assert!(dir.path().join("env").is_dir(), "the parent stays");
        assert_eq!(src.join("a.csv").metadata().unwrap().nlink(), 1);
    }

    #[test]
    fn a_failure_after_a_read_only_folder_leaves_no_half_tree() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("src");
        write(&src.join("a/x.csv"), "1\n");
        write(&src.join("b/y.csv"), "2\n");
        std::fs::set_permissions(src.join("a"), PermissionsExt::from_mode(0o555)).unwrap();
        let dst = dir.path().join("dst");
        let b_fails = |s: &Path, d: &Path| match s.ends_with("b/y.csv") {
            true => Err(io::Error::from_raw_os_error(libc::EIO)),
            false => std::fs::hard_link(s, d),
        };
        link_tree_with(&src, &dst, &b_fails).unwrap_err();
        std::fs::set_permissions(src.join("a"), PermissionsExt::from_mode(0o755)).unwrap();
        assert!(
            dst.symlink_metadata().is_err(),
            "dst/a, read-only, went too"
        );
    }

    #[test]
    fn a_copy_inside_its_source_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let src = tree(dir.path());
        let e = link_tree(&src, &src.join("sub/copy")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("inside itself"), "{e}");
        assert!(!src.join("sub/copy").exists());
        // Through a link to it, too.
        std::os::unix::fs::symlink(&src, dir.path().join("via")).unwrap();
        link_tree(&dir.path().join("via"), &src.join("copy")).unwrap_err();
        assert!(!src.join("copy").exists());
    }

    #[test]
    fn an_unreadable_folder_leaves_no_half_tree() {
        let dir = tempfile::tempdir().unwrap();
        let src = tree(dir.path());
        let locked = src.join("sub");
        std::fs::set_permissions(&locked, PermissionsExt::from_mode(0o000)).unwrap();
        if std::fs::read_dir(&locked).is_ok() {
            std::fs::set_permissions(&locked, PermissionsExt::from_mode(0o755)).unwrap();
            eprintln!("skipped: running as root, a folder of mode 000 is still readable");
            return;
        }
        let dst = dir.path().join("dst");
        let e = link_tree(&src, &dst).unwrap_err();
        std::fs::set_permissions(&locked, PermissionsExt::from_mode(0o755)).unwrap();
        assert_eq!(e.kind(), io::ErrorKind::PermissionDenied);
        assert!(e.to_string().contains("src/sub"), "{e}");
        assert!(dst.symlink_metadata().is_err(), "the half tree is gone");
    }

    #[test]
    fn exchange_swaps_two_folders_and_a_file_with_a_folder() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b, f) = (
            dir.path().join("a"),
            dir.path().join("b"),
            dir.path().join("f"),
        );
        write(&a.join("x"), "a\n");
        write(&b.join("x"), "b\n");
        write(&f, "file\n");
        exchange(&a, &b).unwrap();
        assert_eq!(std::fs::read_to_string(a.join("x")).unwrap(), "b\n");
        assert_eq!(std::fs::read_to_string(b.join("x")).unwrap(), "a\n");
        exchange(&f, &a).unwrap();
        assert_eq!(std::fs::read_to_string(&a).unwrap(), "file\n");
        assert_eq!(std::fs::read_to_string(f.join("x")).unwrap(), "b\n");
        // Both must exist: nothing moves.
        let e = exchange(&a, &dir.path().join("none")).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(!cannot_exchange(&e));
        assert!(a.is_file());
    }
}
