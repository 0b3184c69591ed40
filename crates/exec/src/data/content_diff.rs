//! What two versions of a partition's data differ by, as a reviewer reads it: sizes, files added,
//! removed and changed, rows of table-like files (csv, tsv, jsonl), and a unified diff of small
//! text. `env diff` shows one for each partition whose data versions differ between two
//! environments (issue #59); it knows nothing of the log or the engine: two paths in, a summary
//! out.
//!
//! Everything is bounded: files are compared and rows counted streaming, line by line, and a file
//! over a limit is left out of what it would cost too much to show, with a note saying so, rather
//! than read whole.

use std::collections::BTreeMap;
use std::fmt;
use std::fs::{self, File};
use std::io::{self, BufRead, BufReader, Read};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use crate::answers::bytes;
pub use crate::answers::{ContentChange, ContentDiff, RowDiff};

use rustc_hash::FxHashMap;

/// How much of two partitions' data a [`ContentDiff`] may read and show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiffLimits {
    /// A table-like file larger than this is not row-diffed (its rows are held in memory).
    pub max_row_bytes: u64,
    /// A text file larger than this is left out of the unified diff.
    pub max_text_bytes: u64,
    /// The unified diff's lines beyond this many are counted, not shown.
    pub max_diff_lines: usize,
}

impl Default for DiffLimits {
    fn default() -> Self {
        DiffLimits {
            max_row_bytes: 256 << 20,
            max_text_bytes: 64 << 10,
            max_diff_lines: 200,
        }
    }
}

/// Compares a partition's old data with its new: each a file or a folder (links followed), `None`
/// where that side has none. An error is a file or folder that could not be read, named.
pub fn content_diff(
    old: Option<&Path>,
    new: Option<&Path>,
    limits: &DiffLimits,
) -> io::Result<ContentDiff> {
    let mut notes = Vec::new();
    let old_files = old.map(|p| Listing::of(p, &mut notes)).transpose()?;
    let new_files = new.map(|p| Listing::of(p, &mut notes)).transpose()?;
    let pairs = pair(old_files.as_ref(), new_files.as_ref());
    let mut diff = ContentDiff {
        change: ContentChange::Identical,
        old_bytes: old_files.as_ref().map_or(0, Listing::bytes),
        new_bytes: new_files.as_ref().map_or(0, Listing::bytes),
        files_added: 0,
        files_removed: 0,
        files_changed: 0,
        rows: None,
        unified: None,
        notes: Vec::new(),
    };
    let mut rows = Rows::default();
    let mut text = Text::default();
    for (rel, old, new) in pairs {
        let same = diff.count_file(old, new)?;
        rows.add(rel, old, new, same, limits, &mut notes)?;
        if !same {
            text.add(rel, old, new, limits, &mut notes)?;
        }
    }
    diff.change = match (old_files, new_files) {
        (None, Some(_)) => ContentChange::Added,
        (Some(_), None) => ContentChange::Removed,
        _ if diff.files_added + diff.files_removed + diff.files_changed > 0 => {
            ContentChange::Changed
        }
        _ => ContentChange::Identical,
    };
    diff.rows = rows.total();
    diff.unified = text.finish(limits.max_diff_lines, &mut notes);
    diff.notes = notes.iter().map(Note::to_string).collect();
    Ok(diff)
}

/// Something a [`ContentDiff`] left out, and why; shown as one of its `notes`.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Note {
    Binary { rel: String },
    NotUtf8 { rel: String },
    TooLargeForText { rel: String, size: u64, limit: u64 },
    TooLargeForRows { rel: String, size: u64, limit: u64 },
    HeaderChanged { rel: String },
    NotJsonObjects { rel: String, lines: u64 },
    DiffCut { lines: usize },
    BrokenLink { rel: String },
    NotAFile { rel: String },
    LinkLoop { rel: String },
}

impl fmt::Display for Note {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Note::Binary { rel } => write!(f, "{rel}: binary, no text diff"),
            Note::NotUtf8 { rel } => write!(f, "{rel}: not UTF-8 text, no text diff"),
            Note::TooLargeForText { rel, size, limit } => write!(
                f,
                "{rel}: {} is over the text diff's limit of {} (max_text_bytes), no text diff",
                bytes(*size),
                bytes(*limit)
            ),
            Note::TooLargeForRows { rel, size, limit } => write!(
                f,
                "{rel}: {} is over the row diff's limit of {} (max_row_bytes), rows not counted",
                bytes(*size),
                bytes(*limit)
            ),
            Note::HeaderChanged { rel } => {
                write!(
                    f,
                    "{rel}: its header changed; rows compared as lines all the same"
                )
            }
            Note::NotJsonObjects { rel, lines } => write!(
                f,
                "{rel}: {lines} of its differing rows are not JSON objects, each keyed by its whole line"
            ),
            Note::DiffCut { lines } => write!(
                f,
                "unified diff: {lines} more lines left out (max_diff_lines)"
            ),
            Note::BrokenLink { rel } => write!(f, "{rel}: a link to nothing, left out"),
            Note::NotAFile { rel } => write!(f, "{rel}: not a regular file, left out"),
            Note::LinkLoop { rel } => {
                write!(f, "{rel}: a link to a folder above it, not followed")
            }
        }
    }
}

/// An io error naming the path it happened on, so the caller's message says which file.
fn at(path: &Path) -> impl FnOnce(io::Error) -> io::Error + '_ {
    move |e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))
}

/// One regular file of a side, links followed.
#[derive(Debug)]
struct FileAt {
    path: PathBuf,
    size: u64,
    /// Device and inode: a hard link or a link to the same file is the same bytes, unread.
    id: (u64, u64),
}

impl FileAt {
    fn new(path: PathBuf, meta: &fs::Metadata) -> FileAt {
        FileAt {
            path,
            size: meta.len(),
            id: (meta.dev(), meta.ino()),
        }
    }
}

/// A side's files by path relative to its folder (a lone file by its name).
#[derive(Debug)]
struct Listing {
    files: BTreeMap<String, FileAt>,
    /// The side is one file, not a folder: two such are compared whatever their names.
    single: bool,
}

impl Listing {
    fn of(root: &Path, notes: &mut Vec<Note>) -> io::Result<Listing> {
        let meta = fs::metadata(root).map_err(at(root))?;
        let mut files = BTreeMap::new();
        if meta.is_dir() {
            walk(
                root,
                "",
                &mut vec![(meta.dev(), meta.ino())],
                &mut files,
                notes,
            )?;
            return Ok(Listing {
                files,
                single: false,
            });
        }
        let name = root
            .file_name()
            .map_or_else(|| "data".to_string(), |n| n.to_string_lossy().into_owned());
        files.insert(name, FileAt::new(root.to_path_buf(), &meta));
        Ok(Listing {
            files,
            single: true,
        })
    }

    fn bytes(&self) -> u64 {
        self.files.values().map(|f| f.size).sum()
    }
}

/// Adds the regular files under `dir` to `files`; `above` holds the folders it is in, so a link
/// back to one of them is not followed forever.
fn walk(
    dir: &Path,
    prefix: &str,
    above: &mut Vec<(u64, u64)>,
    files: &mut BTreeMap<String, FileAt>,
    notes: &mut Vec<Note>,
) -> io::Result<()> {
    for entry in fs::read_dir(dir).map_err(at(dir))? {
        let entry = entry.map_err(at(dir))?;
        let path = entry.path();
        let rel = format!("{prefix}{}", entry.file_name().to_string_lossy());
        let meta = match fs::metadata(&path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                notes.push(Note::BrokenLink { rel });
                continue;
            }
            Err(e) => return Err(at(&path)(e)),
        };
        if meta.is_dir() {
            let id = (meta.dev(), meta.ino());
            if above.contains(&id) {
                notes.push(Note::LinkLoop { rel });
                continue;
            }
            above.push(id);
            walk(&path, &format!("{rel}/"), above, files, notes)?;
            above.pop();
        } else if meta.is_file() {
            files.insert(rel, FileAt::new(path, &meta));
        } else {
            notes.push(Note::NotAFile { rel });
        }
    }
    Ok(())
}

/// The two sides' files paired by relative path, in path order.
fn pair<'a>(
    old: Option<&'a Listing>,
    new: Option<&'a Listing>,
) -> Vec<(&'a str, Option<&'a FileAt>, Option<&'a FileAt>)> {
    if let (Some(o), Some(n)) = (old, new) {
        if o.single && n.single {
            // Two lone files are the partition's data either way, even if renamed.
            let (rel, new_file) = n.files.iter().next().expect("a lone file's listing has it");
            return vec![(rel.as_str(), o.files.values().next(), Some(new_file))];
        }
    }
    let mut pairs: BTreeMap<&str, (Option<&FileAt>, Option<&FileAt>)> = BTreeMap::new();
    for (rel, f) in old.iter().flat_map(|l| &l.files) {
        pairs.entry(rel).or_default().0 = Some(f);
    }
    for (rel, f) in new.iter().flat_map(|l| &l.files) {
        pairs.entry(rel).or_default().1 = Some(f);
    }
    pairs.into_iter().map(|(rel, (o, n))| (rel, o, n)).collect()
}

/// Whether two files hold the same bytes: sizes first, then the same inode, then read in step.
fn same_bytes(a: &FileAt, b: &FileAt) -> io::Result<bool> {
    if a.size != b.size {
        return Ok(false);
    }
    if a.id == b.id {
        return Ok(true);
    }
    let mut x = File::open(&a.path).map_err(at(&a.path))?;
    let mut y = File::open(&b.path).map_err(at(&b.path))?;
    let (mut bx, mut by) = (vec![0; 64 << 10], vec![0; 64 << 10]);
    loop {
        let n = fill(&mut x, &mut bx).map_err(at(&a.path))?;
        let m = fill(&mut y, &mut by).map_err(at(&b.path))?;
        if bx[..n] != by[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

/// Reads until `buf` is full or the file ends, so two files read in step compare chunk by chunk.
fn fill(file: &mut File, buf: &mut [u8]) -> io::Result<usize> {
    let mut got = 0;
    while got < buf.len() {
        match file.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(got)
}

/// The kinds of file whose lines are rows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Table {
    /// Delimited by this byte, its first line a header.
    Delimited(u8),
    /// One JSON object per line.
    JsonLines,
}

impl Table {
    fn of(rel: &str) -> Option<Table> {
        let ext = Path::new(rel).extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "csv" => Some(Table::Delimited(b',')),
            "tsv" => Some(Table::Delimited(b'\t')),
            "jsonl" | "ndjson" => Some(Table::JsonLines),
            _ => None,
        }
    }

    /// The row's key, which an added and a removed row share when the row changed.
    fn key(self, row: &[u8]) -> Key {
        match self {
            Table::Delimited(delimiter) => Key::Field(first_field(row, delimiter)),
            Table::JsonLines => {
                let object =
                    serde_json::from_slice::<serde_json::Map<String, serde_json::Value>>(row);
                let key = object.ok().and_then(|o| {
                    let value = o
                        .get("id")
                        .or_else(|| o.get("key"))
                        .or_else(|| o.values().next())?;
                    Some(Key::Field(value.to_string().into_bytes()))
                });
                key.unwrap_or_else(|| Key::Line(row.to_vec()))
            }
        }
    }
}

/// What an added and a removed row share when the row changed.
#[derive(Debug, PartialEq, Eq, Hash)]
enum Key {
    /// A field's value: a csv's first column, a JSON object's `id`, `key` or first field.
    Field(Vec<u8>),
    /// A JSON line that is no object is its own key, so it is only ever added or removed.
    Line(Vec<u8>),
}

/// A delimited row's first field, its quotes taken off (`"a,b"` is `a,b`, `""` inside one `"`).
fn first_field(row: &[u8], delimiter: u8) -> Vec<u8> {
    let Some(quoted) = row.strip_prefix(b"\"") else {
        let end = row
            .iter()
            .position(|&b| b == delimiter)
            .unwrap_or(row.len());
        return row[..end].to_vec();
    };
    let mut field = Vec::new();
    let mut bytes = quoted.iter().copied().peekable();
    while let Some(b) = bytes.next() {
        if b == b'"' {
            if bytes.peek() != Some(&b'"') {
                break;
            }
            bytes.next();
        }
        field.push(b);
    }
    field
}

/// Calls `row` with each non-empty line of `path` (line endings off), streaming; returns the
/// header (a delimited file's first non-empty line), which is not a row.
fn each_row(path: &Path, table: Table, mut row: impl FnMut(&[u8])) -> io::Result<Option<Vec<u8>>> {
    let mut reader = BufReader::with_capacity(64 << 10, File::open(path).map_err(at(path))?);
    let mut header = None;
    let mut line = Vec::new();
    loop {
        line.clear();
        if reader.read_until(b'\n', &mut line).map_err(at(path))? == 0 {
            return Ok(header);
        }
        let text = line.strip_suffix(b"\n").unwrap_or(&line);
        let text = text.strip_suffix(b"\r").unwrap_or(text);
        if text.is_empty() {
            continue;
        }
        if header.is_none() && matches!(table, Table::Delimited(_)) {
            header = Some(text.to_vec());
        } else {
            row(text);
        }
    }
}

/// The rows of one pair of table-like files, compared as multisets of lines: the old file's lines
/// are counted, the new file's taken off them, and only the rows left over are keyed.
fn row_diff(
    rel: &str,
    table: Table,
    old: Option<&Path>,
    new: Option<&Path>,
    notes: &mut Vec<Note>,
) -> io::Result<RowDiff> {
    let mut old_rows: FxHashMap<Vec<u8>, u64> = FxHashMap::default();
    let old_header = match old {
        Some(p) => each_row(p, table, |r| *old_rows.entry(r.to_vec()).or_default() += 1)?,
        None => None,
    };
    let mut keys: FxHashMap<Key, (u64, u64)> = FxHashMap::default();
    let mut diff = RowDiff::default();
    let mut unkeyed = 0;
    // Each left-over row's key, with how many rows of it were added and removed.
    let mut keyed = |r: &[u8], added: bool, n: u64| {
        let key = table.key(r);
        if matches!(key, Key::Line(_)) {
            unkeyed += n;
        }
        let counts = keys.entry(key).or_default();
        if added {
            counts.0 += n;
        } else {
            counts.1 += n;
        }
    };
    let new_header = match new {
        Some(p) => each_row(p, table, |r| match old_rows.get_mut(r) {
            Some(n) if *n > 0 => *n -= 1,
            _ => {
                diff.added += 1;
                keyed(r, true, 1);
            }
        })?,
        None => None,
    };
    for (r, n) in old_rows.iter().filter(|(_, n)| **n > 0) {
        diff.removed += n;
        keyed(r, false, *n);
    }
    diff.changed = keys.values().map(|&(a, r)| a.min(r)).sum();
    diff.added -= diff.changed;
    diff.removed -= diff.changed;
    if old_header.is_some() && new_header.is_some() && old_header != new_header {
        notes.push(Note::HeaderChanged {
            rel: rel.to_string(),
        });
    }
    if unkeyed > 0 {
        notes.push(Note::NotJsonObjects {
            rel: rel.to_string(),
            lines: unkeyed,
        });
    }
    Ok(diff)
}

/// The rows summed over a diff's table-like files, or why there are none.
#[derive(Debug, Default)]
struct Rows {
    total: Option<RowDiff>,
    /// A file was too large to count, so any total would be short.
    uncounted: bool,
}

impl Rows {
    fn add(
        &mut self,
        rel: &str,
        old: Option<&FileAt>,
        new: Option<&FileAt>,
        same: bool,
        limits: &DiffLimits,
        notes: &mut Vec<Note>,
    ) -> io::Result<()> {
        let Some(table) = Table::of(rel) else {
            return Ok(());
        };
        let total = self.total.get_or_insert_with(RowDiff::default);
        if same {
            return Ok(());
        }
        if let Some(big) = [old, new]
            .into_iter()
            .flatten()
            .find(|f| f.size > limits.max_row_bytes)
        {
            notes.push(Note::TooLargeForRows {
                rel: rel.to_string(),
                size: big.size,
                limit: limits.max_row_bytes,
            });
            self.uncounted = true;
            return Ok(());
        }
        let path = |f: Option<&FileAt>| f.map(|f| f.path.clone());
        *total += row_diff(
            rel,
            table,
            path(old).as_deref(),
            path(new).as_deref(),
            notes,
        )?;
        Ok(())
    }

    fn total(&self) -> Option<RowDiff> {
        self.total.filter(|_| !self.uncounted)
    }
}

/// The unified diff of a diff's small text files, built file by file.
#[derive(Debug, Default)]
struct Text {
    diff: String,
}

impl Text {
    fn add(
        &mut self,
        rel: &str,
        old: Option<&FileAt>,
        new: Option<&FileAt>,
        limits: &DiffLimits,
        notes: &mut Vec<Note>,
    ) -> io::Result<()> {
        // One note a file: the new side is not read when the old one is left out.
        let Some(old_text) = text_of(rel, old, limits, notes)? else {
            return Ok(());
        };
        let Some(new_text) = text_of(rel, new, limits, notes)? else {
            return Ok(());
        };
        let side = |f: Option<&FileAt>, name: &str| match f {
            Some(_) => format!("{name}/{rel}"),
            None => "/dev/null".to_string(),
        };
        // Myers' time grows with the product of size and changes: bounded, it approximates.
        let diff = similar::TextDiffConfig::default()
            .timeout(std::time::Duration::from_secs(1))
            .diff_lines(&old_text, &new_text);
        let unified = diff
            .unified_diff()
            .context_radius(3)
            .header(&side(old, "old"), &side(new, "new"))
            .to_string();
        self.diff.push_str(&unified);
        Ok(())
    }

    /// The diff, its lines past `max_lines` replaced by one saying how many they were.
    fn finish(self, max_lines: usize, notes: &mut Vec<Note>) -> Option<String> {
        if self.diff.is_empty() {
            return None;
        }
        let total = self.diff.lines().count();
        if total <= max_lines {
            return Some(self.diff);
        }
        let mut kept: String = self.diff.split_inclusive('\n').take(max_lines).collect();
        let left = total - max_lines;
        kept.push_str(&format!("… {left} more lines left out\n"));
        notes.push(Note::DiffCut { lines: left });
        Some(kept)
    }
}

/// A side's file as text for the unified diff: empty when the side has none, `None` (with a note)
/// when it is too large, binary or not UTF-8.
fn text_of(
    rel: &str,
    file: Option<&FileAt>,
    limits: &DiffLimits,
    notes: &mut Vec<Note>,
) -> io::Result<Option<String>> {
    let Some(file) = file else {
        return Ok(Some(String::new()));
    };
    let rel = rel.to_string();
    if file.size > limits.max_text_bytes {
        notes.push(Note::TooLargeForText {
            rel,
            size: file.size,
            limit: limits.max_text_bytes,
        });
        return Ok(None);
    }
    let mut bytes = Vec::new();
    File::open(&file.path)
        .and_then(|f| f.take(limits.max_text_bytes).read_to_end(&mut bytes))
        .map_err(at(&file.path))?;
    if bytes.contains(&0) {
        notes.push(Note::Binary { rel });
        return Ok(None);
    }
    match String::from_utf8(bytes) {
        Ok(text) => Ok(Some(text)),
        Err(_) => {
            notes.push(Note::NotUtf8 { rel });
            Ok(None)
        }
    }
}

impl ContentDiff {
    /// Counts a pair of files (one side at least) as added, removed or changed; true when both
    /// hold the same bytes.
    fn count_file(&mut self, old: Option<&FileAt>, new: Option<&FileAt>) -> io::Result<bool> {
        match (old, new) {
            (Some(a), Some(b)) => {
                let same = same_bytes(a, b)?;
                self.files_changed += u64::from(!same);
                Ok(same)
            }
            (None, _) => {
                self.files_added += 1;
                Ok(false)
            }
            (_, None) => {
                self.files_removed += 1;
                Ok(false)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Writes `content` at `rel` under `dir`, making its folders; returns its path.
    fn write(dir: &Path, rel: &str, content: impl AsRef<[u8]>) -> PathBuf {
        let path = dir.join(rel);
        fs::create_dir_all(path.parent().expect("a file has a folder")).unwrap();
        fs::write(&path, content).unwrap();
        path
    }

    fn diff(old: Option<&Path>, new: Option<&Path>) -> ContentDiff {
        content_diff(old, new, &DiffLimits::default()).unwrap()
    }

    fn rows(added: u64, removed: u64, changed: u64) -> Option<RowDiff> {
        Some(RowDiff {
            added,
            removed,
            changed,
        })
    }

    #[test]
    fn csv_files_count_rows_added_removed_and_changed_by_first_column_without_the_header() {
        let dir = tempfile::tempdir().unwrap();
        let old = write(dir.path(), "old/day.csv", "id,name\n1,a\n2,b\n3,c\n3,c\n");
        let new = write(
            dir.path(),
            "new/day.csv",
            "id,label\n1,a\n2,B\n3,c\n4,d\n5,e\n",
        );
        let d = diff(Some(&old), Some(&new));
        assert_eq!(d.change, ContentChange::Changed);
        assert_eq!((d.old_bytes, d.new_bytes), (24, 29));
        assert_eq!((d.files_added, d.files_removed, d.files_changed), (0, 0, 1));
        // 2 changed; one of the two `3,c` removed; 4 and 5 added; the header is no row.
        assert_eq!(d.rows, rows(2, 1, 1));
        assert_eq!(
            d.notes,
            ["day.csv: its header changed; rows compared as lines all the same"]
        );
        let unified = d.unified.clone().unwrap();
        assert!(
            unified.starts_with("--- old/day.csv\n+++ new/day.csv\n@@"),
            "{unified}"
        );
        assert!(
            unified.contains("\n-2,b\n") && unified.contains("\n+2,B\n"),
            "{unified}"
        );
        assert_eq!(d.summary(), "+5 B (24 B → 29 B); rows +2 −1 ~1");
    }

    #[test]
    fn a_quoted_first_column_is_the_key_without_its_quotes() {
        assert_eq!(first_field(b"\"a,\"\"b\",1", b','), b"a,\"b");
        assert_eq!(first_field(b"x\t1", b'\t'), b"x");
        assert_eq!(first_field(b"alone", b','), b"alone");
        let dir = tempfile::tempdir().unwrap();
        let old = write(dir.path(), "old/t.tsv", "k\tv\r\n\"a\tb\"\t1\r\n\r\n");
        let new = write(dir.path(), "new/t.tsv", "k\tv\r\n\"a\tb\"\t2\r\n");
        assert_eq!(diff(Some(&old), Some(&new)).rows, rows(0, 0, 1));
    }

    #[test]
    fn json_lines_are_keyed_by_id_then_key_then_their_first_field() {
        let dir = tempfile::tempdir().unwrap();
        let old = write(
            dir.path(),
            "old/x.jsonl",
            "{\"id\":1,\"v\":\"a\"}\n{\"id\":2}\n{\"key\":\"k\",\"v\":1}\n{\"name\":\"n\",\"v\":1}\n",
        );
        let new = write(
            dir.path(),
            "new/x.ndjson",
            "{\"v\":\"A\",\"id\":1}\n{\"id\":2}\n{\"v\":2,\"key\":\"k\"}\n{\"name\":\"m\",\"v\":1}\n[1]\n",
        );
        let d = diff(Some(&old), Some(&new));
        // id 1 and key k changed; name n removed and m added (the first field is the key); the
        // array is a row added, keyed by itself.
        assert_eq!(d.rows, rows(2, 1, 2));
        assert_eq!(
            d.notes,
            ["x.ndjson: 1 of its differing rows are not JSON objects, each keyed by its whole line"]
        );
        // Two lone files are compared whatever their names, the new one's in the headers.
        assert!(d
            .unified
            .unwrap()
            .starts_with("--- old/x.ndjson\n+++ new/x.ndjson\n"));
    }

    #[test]
    fn folders_compare_files_by_relative_path_and_sum_their_rows() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        write(&old, "same.txt", "same\n");
        write(&new, "same.txt", "same\n");
        write(&old, "gone.txt", "bye\n");
        write(&old, "sub/rows.csv", "id,v\n1,a\n2,b\n");
        write(&new, "sub/rows.csv", "id,v\n1,a\n2,c\n3,d\n");
        write(&new, "more.csv", "id\n9\n");
        let d = diff(Some(&old), Some(&new));
        assert_eq!(d.change, ContentChange::Changed);
        assert_eq!((d.files_added, d.files_removed, d.files_changed), (1, 1, 1));
        assert_eq!((d.old_bytes, d.new_bytes), (5 + 4 + 13, 5 + 17 + 5));
        // sub/rows.csv: 2 changed, 3 added; more.csv: 9 added.
        assert_eq!(d.rows, rows(2, 0, 1));
        let unified = d.unified.clone().unwrap();
        let headers: Vec<&str> = unified
            .lines()
            .filter(|l| l.starts_with("---") || l.starts_with("+++"))
            .collect();
        assert_eq!(
            headers,
            [
                "--- old/gone.txt",
                "+++ /dev/null",
                "--- /dev/null",
                "+++ new/more.csv",
                "--- old/sub/rows.csv",
                "+++ new/sub/rows.csv"
            ]
        );
        assert!(d.notes.is_empty(), "{:?}", d.notes);
        assert_eq!(
            d.summary(),
            "+5 B (22 B → 27 B); files +1 −1 ~1; rows +2 −0 ~1"
        );
    }

    #[test]
    fn an_absent_side_is_all_added_or_all_removed() {
        let dir = tempfile::tempdir().unwrap();
        let data = write(dir.path(), "p/data.csv", "id\n1\n2\n3\n");
        let added = diff(None, Some(&data));
        assert_eq!(added.change, ContentChange::Added);
        assert_eq!(
            (added.old_bytes, added.new_bytes, added.files_added),
            (0, 9, 1)
        );
        assert_eq!(added.rows, rows(3, 0, 0));
        assert!(added
            .unified
            .as_deref()
            .unwrap()
            .starts_with("--- /dev/null\n+++ new/data.csv\n"));
        assert_eq!(added.summary(), "added, 9 B; rows +3 −0 ~0");
        let removed = diff(Some(&data), None);
        assert_eq!(removed.change, ContentChange::Removed);
        assert_eq!(
            (removed.old_bytes, removed.new_bytes, removed.files_removed),
            (9, 0, 1)
        );
        assert_eq!(removed.rows, rows(0, 3, 0));
        assert_eq!(removed.summary(), "removed, 9 B; rows +0 −3 ~0");
        assert_eq!(diff(None, None).summary(), "identical bytes");
    }

    #[test]
    fn links_are_followed_and_the_same_bytes_are_identical() {
        let dir = tempfile::tempdir().unwrap();
        let old = write(dir.path(), "old/part/a.txt", "a\n");
        let new = dir.path().join("new/part");
        fs::create_dir_all(&new).unwrap();
        std::os::unix::fs::symlink(&old, new.join("a.txt")).unwrap();
        // A link back up is noted, not walked forever.
        std::os::unix::fs::symlink(&new, new.join("loop")).unwrap();
        // The old side named through a link to its folder, as an environment may hold it.
        let old_link = dir.path().join("old-link");
        std::os::unix::fs::symlink(old.parent().unwrap(), &old_link).unwrap();
        let d = diff(Some(&old_link), Some(&new));
        assert_eq!(d.change, ContentChange::Identical);
        assert_eq!((d.old_bytes, d.new_bytes), (2, 2));
        assert_eq!(d.unified, None);
        assert_eq!(d.notes, ["loop: a link to a folder above it, not followed"]);
        assert_eq!(d.summary(), "identical bytes");
        // A copy with the same bytes is as identical as a link.
        let copy = write(dir.path(), "copy/a.txt", "a\n");
        assert_eq!(
            diff(Some(&old), Some(&copy)).change,
            ContentChange::Identical
        );
    }

    #[test]
    fn a_missing_path_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nowhere");
        let e = content_diff(Some(&missing), None, &DiffLimits::default()).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert!(e.to_string().contains("nowhere"), "{e}");
    }

    #[test]
    fn binary_and_non_utf8_files_have_no_text_diff_but_a_note() {
        let dir = tempfile::tempdir().unwrap();
        let old = write(dir.path(), "old/x.bin", b"\x00\x01\x02");
        let new = write(dir.path(), "new/x.bin", b"\x00\x01\x03");
        let d = diff(Some(&old), Some(&new));
        assert_eq!((d.files_changed, d.unified, d.rows), (1, None, None));
        assert_eq!(d.notes, ["x.bin: binary, no text diff"]);
        let latin = write(dir.path(), "new/l.txt", b"caf\xe9\n");
        let d = diff(None, Some(&latin));
        assert_eq!(d.unified, None);
        assert_eq!(d.notes, ["l.txt: not UTF-8 text, no text diff"]);
    }

    #[test]
    fn files_over_the_limits_are_neither_row_diffed_nor_shown() {
        let dir = tempfile::tempdir().unwrap();
        let (old, new) = (dir.path().join("old"), dir.path().join("new"));
        write(&old, "big.csv", "id\n1\n2\n3\n");
        write(&new, "big.csv", "id\n1\n2\n3\n4\n");
        write(&new, "small.csv", "id\n1\n");
        let limits = DiffLimits {
            max_row_bytes: 10,
            max_text_bytes: 8,
            max_diff_lines: 200,
        };
        let d = content_diff(Some(&old), Some(&new), &limits).unwrap();
        // One file too large to count leaves no honest total.
        assert_eq!(d.rows, None);
        assert_eq!(
            d.notes,
            [
                "big.csv: 11 B is over the row diff's limit of 10 B (max_row_bytes), rows not counted",
                "big.csv: 9 B is over the text diff's limit of 8 B (max_text_bytes), no text diff",
            ]
        );
        // The small file is still shown.
        assert!(d
            .unified
            .unwrap()
            .starts_with("--- /dev/null\n+++ new/small.csv\n"));
    }

    #[test]
    fn a_long_unified_diff_is_cut_with_a_line_saying_how_much() {
        let dir = tempfile::tempdir().unwrap();
        let lines = |tag: &str| (0..50).map(|i| format!("{tag}{i}\n")).collect::<String>();
        let old = write(dir.path(), "old/t.txt", lines("a"));
        let new = write(dir.path(), "new/t.txt", lines("b"));
        let limits = DiffLimits {
            max_diff_lines: 10,
            ..DiffLimits::default()
        };
        let whole = diff(Some(&old), Some(&new)).unified.unwrap();
        // Two headers, a hunk header, 50 removed and 50 added.
        assert_eq!(whole.lines().count(), 103);
        let d = content_diff(Some(&old), Some(&new), &limits).unwrap();
        let cut = d.unified.unwrap();
        let cut_lines: Vec<&str> = cut.lines().collect();
        assert_eq!(cut_lines.len(), 11);
        assert_eq!(
            cut_lines[..10],
            whole.lines().take(10).collect::<Vec<_>>()[..]
        );
        assert_eq!(cut_lines[10], "… 93 more lines left out");
        assert_eq!(
            d.notes,
            ["unified diff: 93 more lines left out (max_diff_lines)"]
        );
    }

    #[test]
    fn the_summary_reads_sizes_as_every_answer_does() {
        let d = ContentDiff {
            change: ContentChange::Changed,
            old_bytes: 3482,
            new_bytes: 4710,
            files_added: 0,
            files_removed: 0,
            files_changed: 1,
            rows: rows(3, 1, 2),
            unified: None,
            notes: Vec::new(),
        };
        assert_eq!(d.summary(), "+1.2 KiB (3.4 KiB → 4.6 KiB); rows +3 −1 ~2");
        let shrunk = ContentDiff {
            old_bytes: 4710,
            new_bytes: 3482,
            rows: None,
            ..d.clone()
        };
        assert_eq!(shrunk.summary(), "−1.2 KiB (4.6 KiB → 3.4 KiB)");
        let same_size = ContentDiff {
            new_bytes: 3482,
            ..d.clone()
        };
        assert!(same_size.summary().starts_with("±0 B (3.4 KiB → 3.4 KiB)"));
    }

    #[test]
    fn its_json_names_fields_and_changes_in_snake_case() {
        let d = ContentDiff {
            change: ContentChange::Added,
            old_bytes: 0,
            new_bytes: 1,
            files_added: 1,
            files_removed: 0,
            files_changed: 0,
            rows: rows(1, 0, 0),
            unified: None,
            notes: vec!["n".into()],
        };
        let json = serde_json::to_value(&d).unwrap();
        assert_eq!(json["change"], "added");
        assert_eq!(json["files_added"], 1);
        assert_eq!(json["rows"]["changed"], 0);
        assert_eq!(serde_json::from_value::<ContentDiff>(json).unwrap(), d);
    }

    /// A csv's data rows from generated values: a few keys and values, so rows repeat and share
    /// keys.
    fn csv(rows: &[(u8, u8)]) -> String {
        let body: String = rows.iter().map(|(k, v)| format!("{k},{v}\n")).collect();
        format!("key,value\n{body}")
    }

    proptest! {
        #[test]
        fn added_less_removed_is_the_change_in_rows_and_a_file_against_itself_is_all_zeros(
            a in proptest::collection::vec((0u8..6, 0u8..4), 0..40),
            b in proptest::collection::vec((0u8..6, 0u8..4), 0..40),
        ) {
            let dir = tempfile::tempdir().unwrap();
            let old = write(dir.path(), "old/t.csv", csv(&a));
            let new = write(dir.path(), "new/t.csv", csv(&b));
            let d = diff(Some(&old), Some(&new));
            let r = d.rows.unwrap();
            prop_assert_eq!(r.added as i64 - r.removed as i64, b.len() as i64 - a.len() as i64);
            prop_assert!(r.added + r.changed <= b.len() as u64);
            prop_assert!(r.removed + r.changed <= a.len() as u64);
            // A reordered copy has the same rows: a multiset, not a sequence.
            let mut shuffled = a.clone();
            shuffled.reverse();
            let copy = write(dir.path(), "copy/t.csv", csv(&shuffled));
            let same = diff(Some(&old), Some(&copy));
            prop_assert_eq!(same.rows, Some(RowDiff::default()));
            let itself = diff(Some(&old), Some(&old));
            prop_assert_eq!(itself.change, ContentChange::Identical);
            prop_assert_eq!(
                (itself.files_added, itself.files_removed, itself.files_changed),
                (0, 0, 0)
            );
            prop_assert_eq!(itself.rows, Some(RowDiff::default()));
            prop_assert_eq!(itself.unified, None);
        }
    }
}
