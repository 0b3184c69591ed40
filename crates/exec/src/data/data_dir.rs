//! The data dir as planning sees it: [`DataDir`] answers whether a ref's data exists, cheaply
//! (one `access` relative to the opened dir, or a folder read once), and [`Witnesses`] note
//! what a plan saw there, so that the plan cache can tell whether it still holds.

use std::cell::RefCell;
use std::path::{Path, PathBuf};

use rustc_hash::FxHashMap;
use rustix::fd::{AsFd, OwnedFd};
use rustix::fs::OFlags;

/// What planning found in the data dir, recorded as it looked (see [`Witnesses`]).
#[derive(Debug, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub(crate) struct Seen {
    /// Refs whose `<data_dir>/<ref>` exists.
    pub present: Vec<String>,
    /// Refs whose `<data_dir>/<ref>` does not.
    pub absent: Vec<String>,
    /// External refs and the version their data had (`None`: none there).
    pub versions: Vec<(String, Option<String>)>,
}

/// The files a plan looks at, noted while it is made (shared by the states and the resolver).
/// Past [`Witnesses::MAX`] files it stops noting, and the plan is not kept: a no-op over a
/// backfill's million partitions would otherwise hold a second copy of every ref.
#[derive(Debug, Default)]
pub(crate) struct Witnesses {
    seen: RefCell<Seen>,
    noted: std::cell::Cell<usize>,
}

impl Witnesses {
    pub(crate) const MAX: usize = 200_000;

    /// Whether one more file may be noted.
    fn room(&self) -> bool {
        let noted = self.noted.get() + 1;
        self.noted.set(noted);
        noted <= Self::MAX
    }

    pub(crate) fn exists(&self, r: &str, exists: bool) {
        if !self.room() {
            return;
        }
        let mut seen = self.seen.borrow_mut();
        match exists {
            true => seen.present.push(r.to_string()),
            false => seen.absent.push(r.to_string()),
        }
    }

    pub(crate) fn version(&self, r: &str, version: &Option<String>) {
        if !self.room() {
            return;
        }
        self.seen
            .borrow_mut()
            .versions
            .push((r.to_string(), version.clone()));
    }

    /// What was seen; `None` if there was more than could be noted.
    pub(crate) fn into_seen(self) -> Option<Seen> {
        (self.noted.get() <= Self::MAX).then(|| self.seen.into_inner())
    }
}

/// The data dir, opened once: whether a ref's data exists is one `access` relative to it (by
/// its whole path if the dir cannot be opened).
pub(crate) struct DataDir {
    path: PathBuf,
    root: Option<OwnedFd>,
    /// The refs' folders asked about, by their path in the data dir.
    folders: RefCell<FxHashMap<Box<str>, Folder>>,
}

/// A folder refs are asked about. Asking for each ref costs a system call (~1.5 µs on this
/// project's VMs: a third of a 24,000-output no-op); a folder asked about often is read once
/// instead, its names a few hundred per call.
#[derive(Default)]
struct Folder {
    asked: u32,
    /// Its names, once read: `true` for what exists as listed, `false` for a link (or an entry
    /// of unknown type), which is asked, since a link to nothing does not exist. A name not
    /// listed is asked too.
    names: Option<FxHashMap<Box<str>, bool>>,
}

impl DataDir {
    /// The most folders kept track of; refs in others are asked one by one.
    const MAX_FOLDERS: usize = 65_536;
    /// A folder is read once this many of its refs were asked about (then at each doubling),
    /// if reading it costs at most twice what asking did so far: a block of names, ~7 asks.
    const LIST_AFTER: u32 = 4;
    const ASKS_PER_BLOCK: u64 = 7;
    /// A folder with more names than this is never read whole.
    const MAX_LISTED: usize = 100_000;

    pub(crate) fn open(path: &Path) -> Self {
        DataDir {
            path: path.to_path_buf(),
            root: open_folder(rustix::fs::CWD, path, OFlags::PATH),
            folders: RefCell::default(),
        }
    }

    /// Whether `<data_dir>/<r>` exists (following links, as [`Path::exists`]).
    pub(crate) fn exists(&self, r: &str) -> bool {
        let Some(root) = &self.root else {
            return self.path.join(r).exists();
        };
        let Some((folder, name)) = r.rsplit_once('/').filter(|(_, name)| !name.is_empty()) else {
            return ask(root, r);
        };
        let mut folders = self.folders.borrow_mut();
        if folders.len() >= Self::MAX_FOLDERS && !folders.contains_key(folder) {
            return ask(root, r);
        }
        let entry = folders.entry(folder.into()).or_default();
        if entry.names.is_none() {
            entry.asked += 1;
            if entry.asked >= Self::LIST_AFTER && entry.asked.is_power_of_two() {
                entry.names = list(root, folder, u64::from(entry.asked));
            }
        }
        // Only what the listing shows as there is taken from it: a name it lacks may have come
        // since (another build publishing), or be spelled otherwise on a folder that folds case.
        let listed = entry.names.as_ref().and_then(|names| names.get(name));
        listed == Some(&true) || ask(root, r)
    }
}

/// Whether `path` (relative to `at`) exists, following links.
fn ask<Fd: AsFd>(at: Fd, path: &str) -> bool {
    use rustix::fs::{accessat, Access, AtFlags};
    accessat(at, path, Access::EXISTS, AtFlags::empty()).is_ok()
}

/// `path` (relative to `at`) opened as a folder, following links.
fn open_folder<Fd: AsFd>(at: Fd, path: impl rustix::path::Arg, how: OFlags) -> Option<OwnedFd> {
    let flags = how | OFlags::DIRECTORY | OFlags::CLOEXEC;
    rustix::fs::openat(at, path, flags, rustix::fs::Mode::empty()).ok()
}

/// The names in folder `path` (relative to `root`), each with whether it exists as listed (not
/// a link), if reading them is worth `asked` asks; `None` if it is too large for now, or is no
/// folder that can be read and searched.
fn list(root: &OwnedFd, path: &str, asked: u64) -> Option<FxHashMap<Box<str>, bool>> {
    use rustix::fs::{accessat, statat, Access, AtFlags, FileType};
    let st = statat(root, path, AtFlags::empty()).ok()?;
    let blocks = (st.st_size as u64).div_ceil(4096);
    if FileType::from_raw_mode(st.st_mode) != FileType::Directory
        || blocks * DataDir::ASKS_PER_BLOCK > 2 * asked
    {
        return None;
    }
    let dir = open_folder(root, path, OFlags::RDONLY)?;
    // A folder that can be read but not searched lists names `access` cannot reach.
    accessat(&dir, ".", Access::EXEC_OK, AtFlags::empty()).ok()?;
    let mut names = FxHashMap::default();
    for entry in rustix::fs::Dir::new(dir).ok()? {
        let entry = entry.ok()?;
        if names.len() == DataDir::MAX_LISTED {
            return None;
        }
        let Ok(name) = entry.file_name().to_str() else {
            continue; // not a ref's name
        };
        if name != "." && name != ".." {
            let plain = !matches!(entry.file_type(), FileType::Symlink | FileType::Unknown);
            names.insert(name.into(), plain);
        }
    }
    Some(names)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_data_dir_answers_whether_refs_exist_through_their_folders() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        std::fs::create_dir_all(root.join("a/x=1")).unwrap();
        std::fs::write(root.join("a/x=1/d=1"), "").unwrap();
        std::fs::write(root.join("top"), "").unwrap();
        std::fs::create_dir_all(root.join("real")).unwrap();
        std::fs::write(root.join("real/d=2"), "").unwrap();
        std::os::unix::fs::symlink(root.join("real"), root.join("linked")).unwrap();
        std::os::unix::fs::symlink(root.join("nowhere"), root.join("a/x=1/dangling")).unwrap();
        let data = DataDir::open(root);
        assert!(data.exists("a/x=1/d=1"));
        assert!(!data.exists("a/x=1/d=2"), "a name absent");
        for _ in 0..2 * DataDir::LIST_AFTER {
            assert!(!data.exists("a/x=2/d=1"), "no such folder");
        }
        assert!(
            data.exists("top") && !data.exists("bottom"),
            "no folder at all"
        );
        assert!(data.exists("linked/d=2"), "a folder through a link");
        assert!(
            !data.exists("a/x=1/dangling"),
            "a link to nothing does not exist"
        );
        assert!(data.exists("a/x=1"), "a folder is a ref too");
        // A folder asked about often is read once: the same answers, links still followed.
        std::os::unix::fs::symlink(root.join("a/x=1/d=1"), root.join("a/x=1/link")).unwrap();
        for _ in 0..DataDir::LIST_AFTER {
            assert!(data.exists("a/x=1/d=1"));
        }
        assert!(data.folders.borrow()["a/x=1"].names.is_some(), "read whole");
        assert!(data.exists("a/x=1/d=1") && !data.exists("a/x=1/d=9"));
        assert!(data.exists("a/x=1/link") && !data.exists("a/x=1/dangling"));
        // A folder that is a file holds nothing (it is never read as one).
        for _ in 0..DataDir::LIST_AFTER {
            assert!(!data.exists("top/x"));
        }
        // A folder reached through a link is read as any other.
        for _ in 0..DataDir::LIST_AFTER {
            assert!(data.exists("linked/d=2") && !data.exists("linked/d=3"));
        }
        assert!(data.folders.borrow()["linked"].names.is_some());
        // What came after the folder was read is found; a ref ending in `/` is asked as is.
        std::fs::write(root.join("a/x=1/later"), "").unwrap();
        assert!(data.exists("a/x=1/later"));
        assert!(data.exists("a/x=1/") && !data.exists("a/x=9/"));
        assert!(!DataDir::open(&root.join("missing")).exists("a"));
    }
}
