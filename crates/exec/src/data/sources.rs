//! Raw source partitions on disk: durable ingest, sealing, expiry and coverage.
//!
//! A source partition is a folder `<data_dir>/source/{name}/date={date}` of JSON-lines chunks:
//! `webhook.jsonl` (appended by webhook requests) and one `file-*.jsonl` per ingested file. A
//! `_SEALED` file closes the day and holds its version (record count and a hash of the chunks);
//! the planner treats a source partition as available once it is sealed. Expiry deletes the
//! folder. Every seal and expiry is recorded in the event log by [`maintain`].
//!
//! Durability: an append is acknowledged only after `fsync` of the chunk (and of the folders it
//! created). An append that fails (a full disk) is cut back off before the error is answered. A
//! crash can leave a torn last line of an unacknowledged request; every append checks the tail
//! first and cuts it off, and readers skip it. A complete line that is still not JSON is handed
//! to the table run, which quarantines it.

use std::collections::{BTreeMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use databuild_core::pattern::{format_date, parse_date};
use databuild_core::{Source, SourceKind};
use databuild_log::{Event, EventStore, PartitionQuery, Status};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::answers::{IngestReport, Maintenance, SourceDay};

const SEALED: &str = "_SEALED";

/// A source operation failed on the disk or in the log.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("source data: {0}")]
    Io(#[from] io::Error),
    #[error(transparent)]
    Log(#[from] databuild_log::LogError),
}

pub type Result<T> = std::result::Result<T, SourceError>;
const WEBHOOK_CHUNK: &str = "webhook.jsonl";

/// The folder of a source partition.
pub fn partition_dir(data_dir: &Path, source: &Source, date: &str) -> PathBuf {
    data_dir.join(source.partition_ref(date))
}

/// A sealed partition's version, or `None` while it is open (or gone).
pub fn sealed_version(dir: &Path) -> Option<String> {
    fs::read_to_string(dir.join(SEALED))
        .ok()
        .map(|s| s.trim().to_string())
}

/// The file, beside a source's days, that remembers the idempotency keys it stored.
const KEYS_FILE: &str = "_idempotency.jsonl";

/// A source's state in this process, behind its lock: appends to one chunk never interleave,
/// and the idempotency keys it remembers (read from [`KEYS_FILE`] at its first append).
#[derive(Default)]
struct SourceState {
    keys: Option<KeyMemory>,
}

/// One lock per source folder (`<data_dir>/source/<name>`) for this process.
fn source_lock(root: &Path) -> &'static Mutex<SourceState> {
    static LOCKS: OnceLock<Mutex<BTreeMap<PathBuf, &'static Mutex<SourceState>>>> = OnceLock::new();
    let mut all = LOCKS
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    all.entry(root.to_path_buf())
        .or_insert_with(|| Box::leak(Box::default()))
}

/// The idempotency keys of a delivery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// The source keeps no keys, or the delivery carried none.
    None,
    /// One key for the whole delivery (a header).
    Delivery(String),
    /// A key per record (a field); `None` for a record without one.
    Records(Vec<Option<String>>),
}

/// What an append stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Appended {
    pub stored: usize,
    /// Records not stored again: their key (or their delivery's) was stored within the window.
    pub duplicates: usize,
}

/// One line of [`KEYS_FILE`]: keys stored at `at` (Unix seconds) with records that end at byte
/// `end` of `chunk` (relative to the source's folder). The keys are written before the records,
/// so a crash between the two is seen at the next load: the last line's chunk is shorter than
/// its `end`, and its keys are dropped (their records were never acknowledged).
#[derive(Debug, Serialize, serde::Deserialize)]
struct KeyLine {
    keys: Vec<String>,
    at: i64,
    chunk: String,
    end: u64,
}

/// The keys a source stored within its window.
struct KeyMemory {
    path: PathBuf,
    window: i64,
    at: std::collections::HashMap<String, i64>,
    /// Keys in the order they were stored, to forget them when their window has passed.
    order: std::collections::VecDeque<(i64, String)>,
    /// Lines in the file, to compact it once most are forgotten.
    lines: usize,
}

impl KeyMemory {
    fn load(root: &Path, window: std::time::Duration, now: i64) -> io::Result<KeyMemory> {
        let path = root.join(KEYS_FILE);
        let mut lines: Vec<KeyLine> = match fs::read(&path) {
            Ok(bytes) => bytes
                .split(|&b| b == b'\n')
                .filter_map(|l| serde_json::from_slice(l).ok())
                .collect(),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Vec::new(),
            Err(e) => return Err(e),
        };
        if let Some(last) = lines.last() {
            let len = fs::metadata(root.join(&last.chunk)).map_or(0, |m| m.len());
            if len < last.end {
                lines.pop();
            }
        }
        let mut memory = KeyMemory {
            path,
            window: i64::try_from(window.as_secs()).unwrap_or(i64::MAX),
            at: Default::default(),
            order: Default::default(),
            lines: 0,
        };
        for line in lines {
            for key in line.keys {
                memory.remember(key, line.at);
            }
        }
        memory.forget(now);
        memory.compact(root)?;
        Ok(memory)
    }

    fn remember(&mut self, key: String, at: i64) {
        self.at.insert(key.clone(), at);
        self.order.push_back((at, key));
    }

    fn forget(&mut self, now: i64) {
        while let Some((at, _)) = self.order.front() {
            if now.saturating_sub(*at) < self.window {
                break;
            }
            let (at, key) = self.order.pop_front().expect("a front");
            if self.at.get(&key) == Some(&at) {
                self.at.remove(&key);
            }
        }
    }

    fn seen(&self, key: &str) -> bool {
        self.at.contains_key(key)
    }

    /// Rewrites the file with the keys still remembered, one line each (atomically).
    fn compact(&mut self, root: &Path) -> io::Result<()> {
        if !root.is_dir() {
            self.lines = 0;
            return Ok(());
        }
        let tmp = root.join(format!(".{KEYS_FILE}.tmp"));
        let mut out = Vec::new();
        for (at, key) in &self.order {
            if self.at.get(key) == Some(at) {
                let line = KeyLine {
                    keys: vec![key.clone()],
                    at: *at,
                    chunk: String::new(),
                    end: 0,
                };
                serde_json::to_writer(&mut out, &line).expect("key lines serialize");
                out.push(b'\n');
            }
        }
        let mut f = File::create(&tmp)?;
        f.write_all(&out)?;
        f.sync_all()?;
        fs::rename(&tmp, &self.path)?;
        File::open(root)?.sync_all()?;
        self.lines = self.at.len();
        Ok(())
    }
}

/// Appends records to the partition of `date`, durably. Late data for a sealed day reopens it:
/// it is sealed again (with a new version) by the next [`maintain`].
///
/// All or nothing: the chunk's tail is checked first (a torn line cut off), and an append that
/// fails (a full disk) is undone, the chunk cut back to the length it had, before the error is
/// returned; so "nothing was kept" is true when the caller says it.
pub fn append(data_dir: &Path, source: &Source, date: &str, records: &[Value]) -> io::Result<()> {
    append_once(data_dir, source, date, records.to_vec(), Keys::None, 0).map(|_| ())
}

/// [`append`], storing only what the source's idempotency keys have not stored within its
/// window (`now`: Unix seconds). The keys are remembered in [`KEYS_FILE`], written before the
/// records and undone with them, so a restart remembers exactly the keys whose records are on
/// disk.
pub fn append_once(
    data_dir: &Path,
    source: &Source,
    date: &str,
    records: Vec<Value>,
    keys: Keys,
    now: i64,
) -> io::Result<Appended> {
    let root = data_dir.join("source").join(&source.name);
    let mut state = source_lock(&root).lock().unwrap_or_else(|e| e.into_inner());
    let total = records.len();
    let (records, new_keys) = match (&source.idempotency, keys) {
        (Some(idem), keys) if keys != Keys::None => {
            if state.keys.is_none() {
                state.keys = Some(KeyMemory::load(&root, idem.window, now)?);
            }
            let memory = state.keys.as_mut().expect("loaded");
            memory.forget(now);
            match keys {
                Keys::Delivery(k) if memory.seen(&k) => {
                    return Ok(Appended {
                        stored: 0,
                        duplicates: total,
                    })
                }
                Keys::Delivery(k) => (records, vec![k]),
                Keys::Records(per) => {
                    let mut fresh = std::collections::HashSet::new();
                    let mut kept = Vec::with_capacity(records.len());
                    let mut new_keys = Vec::new();
                    for (r, k) in records.into_iter().zip(per) {
                        match k {
                            Some(k) if memory.seen(&k) || !fresh.insert(k.clone()) => {}
                            Some(k) => {
                                new_keys.push(k);
                                kept.push(r);
                            }
                            None => kept.push(r),
                        }
                    }
                    (kept, new_keys)
                }
                Keys::None => unreachable!("matched above"),
            }
        }
        _ => (records, Vec::new()),
    };
    let appended = Appended {
        stored: records.len(),
        duplicates: total - records.len(),
    };
    if records.is_empty() {
        return Ok(appended);
    }
    let mut buf = Vec::with_capacity(records.len() * 64);
    for r in &records {
        serde_json::to_writer(&mut buf, r).expect("JSON values serialize");
        buf.push(b'\n');
    }
    let dir = partition_dir(data_dir, source, date);
    let new_dir = !dir.is_dir();
    let path = dir.join(WEBHOOK_CHUNK);
    let key_line = |end: u64| KeyLine {
        keys: new_keys.clone(),
        at: now,
        chunk: format!("date={date}/{WEBHOOK_CHUNK}"),
        end,
    };
    let memory = state.keys.as_mut().filter(|_| !new_keys.is_empty());
    let result = create_dir_durably(&dir).and_then(|()| match memory {
        None => append_chunk(&path, &buf, |_| Ok(Undo::None)),
        Some(memory) => append_chunk(&path, &buf, |end| {
            let line = key_line(end);
            append_key_line(&memory.path, &line)
        }),
    });
    if let Err(e) = result {
        if new_dir {
            // Nothing of this day was there before: leave no empty day behind either.
            let _ = fs::remove_dir_all(&dir);
        }
        return Err(e);
    }
    if let Some(memory) = state.keys.as_mut() {
        if !new_keys.is_empty() {
            for k in new_keys {
                memory.remember(k, now);
            }
            memory.lines += 1;
            if memory.lines > 2 * memory.at.len() + 1000 {
                memory.compact(&root)?;
            }
        }
    }
    match fs::remove_file(dir.join(SEALED)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(appended)
}

/// What to cut back if the records' append fails after the keys were written.
enum Undo {
    None,
    /// The keys file, to this length.
    Keys(File, u64),
}

/// Appends one line to the keys file (durably) and returns how to undo it.
fn append_key_line(path: &Path, line: &KeyLine) -> io::Result<Undo> {
    let mut text = serde_json::to_vec(line).expect("key lines serialize");
    text.push(b'\n');
    let existed = path.exists();
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    let before = cut_torn_tail(&file)?;
    if let Err(e) = file.write_all(&text).and_then(|()| file.sync_data()) {
        file.set_len(before)?;
        file.sync_all()?;
        return Err(e);
    }
    if !existed {
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
    }
    Ok(Undo::Keys(file, before))
}

/// Appends `buf` to a chunk after checking its tail, once `before_records` (given the end the
/// records will have) has succeeded; on failure cuts both back to where they were.
fn append_chunk(
    path: &Path,
    buf: &[u8],
    before_records: impl FnOnce(u64) -> io::Result<Undo>,
) -> io::Result<()> {
    let existed = path.exists();
    let mut file = OpenOptions::new()
        .create(true)
        .read(true)
        .append(true)
        .open(path)?;
    let before = cut_torn_tail(&file)?;
    let undo = before_records(before + buf.len() as u64)?;
    let written = file.write_all(buf).and_then(|()| file.sync_data());
    if let Err(e) = written {
        // Undo: a sender told 503 retries, and what it sent must then be on disk once.
        file.set_len(before)?;
        file.sync_all()?;
        if let Undo::Keys(keys, len) = undo {
            keys.set_len(len)?;
            keys.sync_all()?;
        }
        return Err(e);
    }
    if !existed {
        if let Some(dir) = path.parent() {
            File::open(dir)?.sync_all()?;
        }
    }
    Ok(())
}

/// Creates a folder and its missing parents, syncing each parent so the new entries survive a crash.
fn create_dir_durably(dir: &Path) -> io::Result<()> {
    if dir.is_dir() {
        return Ok(());
    }
    if let Some(parent) = dir.parent() {
        create_dir_durably(parent)?;
    }
    match fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    if let Some(parent) = dir.parent() {
        File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// Cuts a chunk back to its last complete line (what a crash mid-append, or an undo that could
/// not finish, leaves) and returns its length. Costs one 1-byte read when the tail is whole.
fn cut_torn_tail(file: &File) -> io::Result<u64> {
    use std::os::unix::fs::FileExt;
    let len = file.metadata()?.len();
    let mut last = [0u8];
    if len == 0 || (file.read_exact_at(&mut last, len - 1).is_ok() && last[0] == b'\n') {
        return Ok(len);
    }
    // Scan back a block at a time for the last newline.
    let mut end = len;
    let mut block = vec![0u8; 64 * 1024];
    let keep = loop {
        if end == 0 {
            break 0;
        }
        let start = end.saturating_sub(block.len() as u64);
        let part = &mut block[..(end - start) as usize];
        file.read_exact_at(part, start)?;
        if let Some(i) = part.iter().rposition(|&b| b == b'\n') {
            break start + i as u64 + 1;
        }
        end = start;
    };
    file.set_len(keep)?;
    file.sync_all()?;
    Ok(keep)
}

/// A complete line of a raw chunk that is not JSON (a torn write glued to the next one, or a
/// file edited by hand): a table run quarantines it like any record that does not fit.
#[derive(Debug, Clone, PartialEq)]
pub struct UnreadableLine {
    /// `webhook.jsonl:12`.
    pub at: String,
    pub text: String,
    pub cause: String,
}

/// The records of a raw day, in chunk order, and the lines that are not JSON.
#[derive(Debug, Default)]
pub struct RawRecords {
    pub records: Vec<Value>,
    pub unreadable: Vec<UnreadableLine>,
}

/// The records of a source partition, in chunk order. An unterminated last line of a chunk (an
/// append that never finished, so was never acknowledged) is skipped; any other line that is not
/// JSON is returned as unreadable.
pub fn read_records(dir: &Path) -> io::Result<RawRecords> {
    let mut raw = RawRecords::default();
    for chunk in chunks(dir)? {
        let name = chunk
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let mut reader = BufReader::new(File::open(&chunk)?);
        let mut line = Vec::new();
        let mut number = 0;
        loop {
            line.clear();
            if reader.read_until(b'\n', &mut line)? == 0 || !line.ends_with(b"\n") {
                break;
            }
            number += 1;
            let text = &line[..line.len() - 1];
            if text.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            match serde_json::from_slice(text) {
                Ok(v) => raw.records.push(v),
                Err(e) => raw.unreadable.push(UnreadableLine {
                    at: format!("{name}:{number}"),
                    text: String::from_utf8_lossy(text).into_owned(),
                    cause: e.to_string(),
                }),
            }
        }
    }
    Ok(raw)
}

fn chunks(dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut chunks: Vec<PathBuf> = fs::read_dir(dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    chunks.sort();
    Ok(chunks)
}

/// The dates of a source's partitions on disk, ascending.
fn dates_on_disk(data_dir: &Path, source: &Source) -> Vec<String> {
    let root = data_dir.join("source").join(&source.name);
    let mut dates: Vec<String> = fs::read_dir(root)
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let name = e.ok()?.file_name().into_string().ok()?;
            let date = name.strip_prefix("date=")?;
            parse_date(date).map(|_| date.to_string())
        })
        .collect();
    dates.sort();
    dates
}

/// Ingests the files waiting in a directory source's folder: each becomes a chunk of today's
/// partition, then is removed. A file that is not of the source's format moves to `rejected/`
/// with a `.error` note. A file seen before (same name and content) is not ingested twice.
pub fn ingest_directory(
    graph_dir: &Path,
    data_dir: &Path,
    source: &Source,
    today: &str,
) -> io::Result<IngestReport> {
    let SourceKind::Directory { path } = &source.kind else {
        return Ok(IngestReport::default());
    };
    let folder = graph_dir.join(path);
    let mut report = IngestReport::default();
    let Ok(entries) = fs::read_dir(&folder) else {
        return Ok(report);
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.is_file())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or(".");
            !name.starts_with('.') && !name.ends_with(".tmp")
        })
        .collect();
    files.sort();
    // The chunk names already ingested, listed once for all the files.
    let mut ingested: HashSet<String> = HashSet::new();
    if !files.is_empty() {
        for d in dates_on_disk(data_dir, source) {
            let chunks = fs::read_dir(partition_dir(data_dir, source, &d))?;
            ingested.extend(chunks.filter_map(|e| e.ok()?.file_name().into_string().ok()));
        }
    }
    for file in files {
        let body = fs::read(&file)?;
        let name = file.file_name().and_then(|n| n.to_str()).unwrap_or("file");
        let records = match source.body_format.records(&body) {
            Ok(r) => r,
            Err(why) => {
                let rejected = folder.join("rejected");
                fs::create_dir_all(&rejected)?;
                fs::write(rejected.join(format!("{name}.error")), format!("{why}\n"))?;
                fs::rename(&file, rejected.join(name))?;
                report.rejected.push(format!("{name}: {why}"));
                continue;
            }
        };
        let digest = Sha256::digest(&body);
        let stem: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                    c
                } else {
                    '_'
                }
            })
            .collect();
        let chunk_name = format!("file-{stem}-{}.jsonl", crate::hashing::hex(&digest[..4]));
        if ingested.insert(chunk_name.clone()) {
            let dir = partition_dir(data_dir, source, today);
            create_dir_durably(&dir)?;
            let tmp = dir.join(format!(".{chunk_name}.tmp"));
            let mut out = File::create(&tmp)?;
            for r in &records {
                serde_json::to_writer(&mut out, r).expect("JSON values serialize");
                out.write_all(b"\n")?;
            }
            out.sync_all()?;
            fs::rename(&tmp, dir.join(&chunk_name))?;
            File::open(&dir)?.sync_all()?;
            let _ = fs::remove_file(dir.join(SEALED));
            report.records += records.len() as u64;
            report.files += 1;
        }
        fs::remove_file(&file)?;
    }
    Ok(report)
}

/// Ingests dropped files, seals every day that has ended (and `through`, if given, even today),
/// and expires what retention no longer keeps; records every seal and expiry in the log. A day
/// with no data between the first and the last is sealed empty: no data is an answer too.
pub fn maintain(
    graph_dir: &Path,
    data_dir: &Path,
    store: &dyn EventStore,
    source: &Source,
    today: &str,
    through: Option<&str>,
) -> Result<Maintenance> {
    let mut done = Maintenance {
        source: source.name.clone(),
        ingested: ingest_directory(graph_dir, data_dir, source, today)?,
        ..Default::default()
    };
    let last = match through {
        Some(d) => d.to_string(),
        None => format_date(parse_date(today).expect("today is a date") - chrono::Days::new(1)),
    };
    let on_disk = dates_on_disk(data_dir, source);
    // What the log says of each day on disk, in one query: a crash between writing a `_SEALED`
    // file and its event, or between an expiry event and the deletion, is finished here.
    let keys: Vec<String> = on_disk.iter().map(|d| source.partition_ref(d)).collect();
    let key_refs: Vec<&str> = keys.iter().map(String::as_str).collect();
    let by_ref: BTreeMap<String, Status> = store
        .partitions_by_ref(&key_refs)?
        .into_iter()
        .map(|row| (row.partition_ref, row.status))
        .collect();
    let logged = |date: &str| by_ref.get(&source.partition_ref(date)).copied();
    // A day the log calls expired is expired, whatever the retention says now: the deletion is
    // all that is left to do (a crash came between the two, or the retention grew since).
    let expired =
        |date: &str| source.is_expired(date, today) || logged(date) == Some(Status::Expired);
    let mut events = Vec::new();
    if let Some(first) = on_disk.first() {
        let mut day = parse_date(first).expect("listed dates parse");
        let end = parse_date(&last).expect("a date");
        while day <= end {
            let date = format_date(day);
            day = day + chrono::Days::new(1);
            if expired(&date) {
                continue; // handled below
            }
            let dir = partition_dir(data_dir, source, &date);
            let recorded = logged(&date) == Some(Status::Sealed);
            if sealed_version(&dir).is_some() && recorded {
                continue;
            }
            let (records, event) = seal(&dir, source, &date)?;
            events.push(event);
            done.sealed.push((date, records));
        }
    }
    for date in on_disk.iter().filter(|d| expired(d)) {
        match logged(date) {
            Some(Status::Expired) => {} // recorded; only the deletion was left to do
            Some(Status::Sealed) => events.push(expired_event(source, date)),
            _ => {
                let dir = partition_dir(data_dir, source, date);
                events.push(seal(&dir, source, date)?.1);
                events.push(expired_event(source, date));
            }
        }
        done.expired.push(date.clone());
    }
    // Record first, then delete: a crash in between leaves data the log calls expired, which
    // the next pass deletes; never data deleted without a record.
    if !events.is_empty() {
        store.append(events)?;
    }
    for date in &done.expired {
        fs::remove_dir_all(partition_dir(data_dir, source, date))?;
    }
    Ok(done)
}

fn expired_event(source: &Source, date: &str) -> Event {
    Event::partition(None, &source.partition_ref(date), Status::Expired).with_message(format!(
        "raw data kept {} full day(s) after its day ended was deleted (retention)",
        source.retention_days
    ))
}

/// Closes a partition: counts its records, writes its version into `_SEALED`, and returns the
/// record count and the event that says so.
fn seal(dir: &Path, source: &Source, date: &str) -> io::Result<(u64, Event)> {
    create_dir_durably(dir)?;
    let mut hash = Sha256::new();
    let mut records = 0u64;
    for chunk in chunks(dir)? {
        let bytes = fs::read(&chunk)?;
        let complete = bytes.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
        records += bytes[..complete].iter().filter(|&&b| b == b'\n').count() as u64;
        hash.update(chunk.file_name().unwrap_or_default().as_encoded_bytes());
        hash.update(&bytes[..complete]);
    }
    let digest = hash.finalize();
    let version = format!("sealed:{records}:{}", crate::hashing::hex(&digest[..8]));
    let tmp = dir.join(".sealed.tmp");
    let mut f = File::create(&tmp)?;
    f.write_all(version.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, dir.join(SEALED))?;
    File::open(dir)?.sync_all()?;
    let event =
        Event::partition(None, &source.partition_ref(date), Status::Sealed).with_data(|d| {
            d.records = Some(records);
            d.data_version = Some(version);
        });
    Ok((records, event))
}

/// The days of a source, from the log (sealed, expired) and the disk (open), ascending.
pub fn source_days(
    data_dir: &Path,
    store: &dyn EventStore,
    source: &Source,
) -> Result<Vec<SourceDay>> {
    let prefix = format!("source/{}/date=", source.name);
    let mut days: BTreeMap<String, SourceDay> = BTreeMap::new();
    let mut after = None;
    loop {
        let page = store.partitions(&PartitionQuery {
            pattern: Some(format!("{prefix}*")),
            after: after.clone(),
            limit: 1000,
            ..Default::default()
        })?;
        let Some(last) = page.last() else { break };
        after = Some(last.partition_ref.clone());
        for row in &page {
            let date = row.partition_ref[prefix.len()..].to_string();
            let state = if row.status == Status::Expired {
                "expired"
            } else {
                "sealed"
            };
            let records = row
                .data_version
                .as_deref()
                .and_then(|v| v.split(':').nth(1))
                .and_then(|n| n.parse().ok());
            days.insert(
                date.clone(),
                SourceDay {
                    date,
                    state: state.to_string(),
                    records,
                },
            );
        }
        if page.len() < 1000 {
            break;
        }
    }
    for date in dates_on_disk(data_dir, source) {
        let dir = partition_dir(data_dir, source, &date);
        if sealed_version(&dir).is_none() {
            days.insert(
                date.clone(),
                SourceDay {
                    date,
                    state: "open".to_string(),
                    records: None,
                },
            );
        }
    }
    Ok(days.into_values().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use databuild_core::SourceKind;
    use databuild_log::SqliteStore;

    fn source() -> Source {
        Source::new("s", SourceKind::Webhook, 3)
    }

    /// A crash can leave a `_SEALED` file without its event, or an `expired` event with the data
    /// still on disk; the next pass finishes the job instead of failing on the log's refusal.
    #[test]
    fn maintenance_finishes_what_a_crash_interrupted() {
        let dir = tempfile::tempdir().unwrap();
        let (data, store) = (
            dir.path().join("data"),
            SqliteStore::open(&dir.path().join("e.db")).unwrap(),
        );
        let s = source();
        append(&data, &s, "2026-01-01", &[serde_json::json!({"a": 1})]).unwrap();
        // Sealed on disk, but the event was never written.
        let unlogged = partition_dir(&data, &s, "2026-01-02");
        fs::create_dir_all(&unlogged).unwrap();
        fs::write(unlogged.join(SEALED), "sealed:0:x").unwrap();
        let done = maintain(dir.path(), &data, &store, &s, "2026-01-03", None).unwrap();
        assert_eq!(
            done.sealed
                .iter()
                .map(|(d, _)| d.as_str())
                .collect::<Vec<_>>(),
            ["2026-01-01", "2026-01-02"]
        );
        assert_eq!(done.sealed[0].1, 1);
        // Expired in the log, but the deletion never happened.
        store.append(vec![expired_event(&s, "2026-01-01")]).unwrap();
        let done = maintain(dir.path(), &data, &store, &s, "2026-01-04", None).unwrap();
        assert_eq!(done.expired, ["2026-01-01"]);
        assert!(!partition_dir(&data, &s, "2026-01-01").exists());
        let row = store
            .partition("source/s/date=2026-01-01")
            .unwrap()
            .unwrap();
        assert_eq!(row.status, Status::Expired);
    }

    /// A crash after the keys were written but before the records were: the keys file's last
    /// line says the records end past the chunk's end, so its keys are not remembered and the
    /// sender's retry is stored. Keys whose records are there stay remembered.
    #[test]
    fn keys_whose_records_never_landed_are_forgotten_at_load() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = Source::new("keys", SourceKind::Webhook, 3);
        s.idempotency = Some(databuild_core::Idempotency {
            key: databuild_core::IdempotencyKey::Header("Idempotency-Key".into()),
            window: std::time::Duration::from_secs(3600),
        });
        let rec = |n: i64| vec![serde_json::json!({ "n": n })];
        let once = |n: i64, key: &str| {
            append_once(
                dir.path(),
                &s,
                "2026-01-01",
                rec(n),
                Keys::Delivery(key.into()),
                100,
            )
            .unwrap()
        };
        assert_eq!(once(1, "a").stored, 1);
        // What the crashed append left: its key line, and half of its records.
        let root = dir.path().join("source/keys");
        let chunk_len = fs::metadata(root.join("date=2026-01-01/webhook.jsonl"))
            .unwrap()
            .len();
        let line = KeyLine {
            keys: vec!["b".into()],
            at: 100,
            chunk: "date=2026-01-01/webhook.jsonl".into(),
            end: chunk_len + 8,
        };
        let mut keys = OpenOptions::new()
            .append(true)
            .open(root.join(KEYS_FILE))
            .unwrap();
        keys.write_all(&serde_json::to_vec(&line).unwrap()).unwrap();
        keys.write_all(b"\n").unwrap();
        // A new process: forget this one's memory.
        source_lock(&root).lock().unwrap().keys = None;
        assert_eq!(
            once(2, "b").stored,
            1,
            "the crashed delivery is stored on retry"
        );
        assert_eq!(once(1, "a").duplicates, 1, "a landed and is remembered");
        assert_eq!(once(2, "b").duplicates, 1);
    }

    #[test]
    fn a_torn_tail_is_cut_before_the_next_append() {
        let dir = tempfile::tempdir().unwrap();
        let s = Source {
            name: "torn".into(),
            ..source()
        };
        let day = partition_dir(dir.path(), &s, "2026-01-01");
        fs::create_dir_all(&day).unwrap();
        fs::write(day.join(WEBHOOK_CHUNK), "{\"a\":1}\n{\"a\":").unwrap();
        append(dir.path(), &s, "2026-01-01", &[serde_json::json!({"a": 2})]).unwrap();
        let raw = read_records(&day).unwrap();
        assert_eq!(
            raw.records,
            [serde_json::json!({"a": 1}), serde_json::json!({"a": 2})]
        );
        assert!(raw.unreadable.is_empty());
        // Torn again after an append of this process: cut again.
        let chunk = day.join(WEBHOOK_CHUNK);
        let mut f = OpenOptions::new().append(true).open(&chunk).unwrap();
        f.write_all(b"{\"a\":").unwrap();
        append(dir.path(), &s, "2026-01-01", &[serde_json::json!({"a": 3})]).unwrap();
        assert_eq!(
            fs::read_to_string(&chunk).unwrap(),
            "{\"a\":1}\n{\"a\":2}\n{\"a\":3}\n"
        );
        // A complete line that is not JSON is returned, not dropped.
        f.write_all(b"{\"a\":4,{\"a\":5}\n").unwrap();
        let raw = read_records(&day).unwrap();
        assert_eq!(raw.records.len(), 3);
        assert_eq!(raw.unreadable.len(), 1);
        assert_eq!(raw.unreadable[0].at, "webhook.jsonl:4");
    }
}
