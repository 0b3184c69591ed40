//! The WAL's upkeep: a thread that copies new writes from the WAL into the database so that no
//! append waits for it, and the store's close, which empties a large WAL.

use std::path::Path;
use std::time::Duration;

use rusqlite::{Connection, OpenFlags};

use super::open::leave_wal_on_close;
use super::SqliteStore;

/// How often the checkpointer looks for new writes to copy from the WAL into the database.
const CHECKPOINT_EVERY: Duration = Duration::from_millis(250);

/// WAL pages past which the writer checkpoints by itself: a backstop, should the checkpointer
/// fall behind (SQLite's default, 1,000 pages, is what the checkpointer replaces).
const WRITER_CHECKPOINT_PAGES: i64 = 16 * 1024;

/// Copies the WAL into the database on a thread of its own. A checkpoint syncs the WAL and the
/// database to disk, milliseconds each on a busy disk. Left to SQLite, it runs inside whichever
/// commit crosses 1,000 WAL pages, and whoever appends waits: in a build, the scheduler, while a
/// slot stays idle (0.5 s over a 2,700-job build, measured with `strace -T`).
pub(super) struct Checkpointer {
    /// Raised by every write, lowered by the checkpoint that follows it.
    written: std::sync::Arc<std::sync::atomic::AtomicBool>,
    /// Dropped to stop the thread.
    stop: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Checkpointer {
    fn start(path: &Path) -> Option<Checkpointer> {
        use std::sync::atomic::{AtomicBool, Ordering};
        let conn = Connection::open_with_flags(
            path,
            OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .ok()?;
        leave_wal_on_close(&conn).ok()?;
        let written = std::sync::Arc::new(AtomicBool::new(false));
        let (stop, stopped) = std::sync::mpsc::channel::<()>();
        let seen = written.clone();
        let thread = std::thread::Builder::new()
            .name("databuild-checkpoint".to_string())
            .spawn(move || {
                // Woken by the clock, not by each write: a wake-up per commit would cost the
                // writer more than the checkpoint saves it.
                while let Err(std::sync::mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECKPOINT_EVERY)
                {
                    if seen.swap(false, Ordering::Relaxed) {
                        // PASSIVE never waits for the writer or readers; what it cannot copy
                        // now, the next round does.
                        let _ = conn.query_row("PRAGMA wal_checkpoint(PASSIVE)", [], |_| Ok(()));
                    }
                }
            })
            .ok()?;
        Some(Checkpointer {
            written,
            stop: Some(stop),
            thread: Some(thread),
        })
    }
}

impl Drop for Checkpointer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// A WAL file past this size is copied into the database and emptied when the store closes
/// (after a build, say), so the next command does not read it back; a smaller one is left for a
/// later command (a no-op build adds ~4 MB at 24k jobs). It bounds what a command's first open
/// reads, and what the log leaves on disk beside the database.
const CLOSE_TRUNCATE_BYTES: u64 = 16 << 20;

impl Drop for SqliteStore {
    fn drop(&mut self) {
        if let Ok(writer) = self.writer.get_mut() {
            empty_wal_past(&writer.conn, &self.path, CLOSE_TRUNCATE_BYTES);
        }
    }
}

/// Copies the WAL into the database and empties it if its file is larger than `limit`. Best
/// effort: what it cannot copy now (a reader elsewhere holds it), a later close does.
fn empty_wal_past(conn: &Connection, path: &Path, limit: u64) {
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    if std::fs::metadata(&wal).is_ok_and(|m| m.len() > limit) {
        let _ = conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()));
    }
}

impl SqliteStore {
    /// Starts the checkpointer before the first write, and hands it the checkpoints of the
    /// `writer` connection but for a backstop. Without one, the writer keeps SQLite's own.
    pub(super) fn start_checkpointer(&self, writer: &Connection) {
        self.checkpointer.get_or_init(|| {
            let checkpointer = Checkpointer::start(&self.path)?;
            writer
                .pragma_update(None, "wal_autocheckpoint", WRITER_CHECKPOINT_PAGES)
                .ok()?;
            Some(checkpointer)
        });
    }

    /// Tells the checkpointer there is something to copy.
    pub(super) fn written(&self) {
        if let Some(Some(c)) = self.checkpointer.get() {
            c.written.store(true, std::sync::atomic::Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    use crate::event::{Event, Status};
    use crate::store::EventStore;

    /// A store closes leaving a small WAL for the next command to read, and empties a large one.
    #[test]
    fn a_closing_store_leaves_a_small_wal_and_empties_a_large_one() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let wal = dir.path().join("events.db-wal");
        let wal_size = || std::fs::metadata(&wal).map(|m| m.len()).unwrap_or(0);
        let store = SqliteStore::open(&path).unwrap();
        store
            .append(vec![Event::build_request("b1", Status::Received)])
            .unwrap();
        drop(store);
        let small = wal_size();
        assert!(small > 0 && small <= CLOSE_TRUNCATE_BYTES, "{small}");
        let store = SqliteStore::open(&path).unwrap();
        let writer = store.writer.lock().unwrap();
        empty_wal_past(&writer.conn, &path, small);
        assert_eq!(wal_size(), small, "not past the limit: left as it is");
        empty_wal_past(&writer.conn, &path, small - 1);
        assert_eq!(wal_size(), 0);
        drop(writer);
        // What the WAL held is in the database.
        let build = store.build_request("b1").unwrap();
        assert!(build.is_some());
    }

    /// The checkpointer copies the WAL into the database file on its own, well before the
    /// writer's backstop (`WRITER_CHECKPOINT_PAGES`) would.
    #[test]
    fn the_checkpointer_copies_writes_into_the_database_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let store = SqliteStore::open(&path).unwrap();
        let size = || std::fs::metadata(&path).unwrap().len();
        let before = size();
        for b in 0..20 {
            let br = format!("br-{b}");
            let mut events = vec![Event::build_request(&br, Status::Received)];
            for p in 0..100 {
                events.push(Event::partition(
                    Some(&br),
                    &format!("p/{b}/{p}"),
                    Status::Requested,
                ));
            }
            store.append(events).unwrap();
        }
        let wal = std::fs::metadata(path.with_extension("db-wal"))
            .unwrap()
            .len();
        assert!(wal > 100 * 4096, "the writes went to the WAL ({wal} bytes)");
        let deadline = Instant::now() + Duration::from_secs(5);
        while size() <= before {
            assert!(Instant::now() < deadline, "nothing was checkpointed");
            std::thread::sleep(Duration::from_millis(50));
        }
        drop(store);
        assert_eq!(SqliteStore::open(&path).unwrap().last_idx().unwrap(), 2020);
    }
}
