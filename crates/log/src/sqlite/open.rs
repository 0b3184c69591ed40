//! Opening an SQLite log: the file, the settings of its connections (journal, caches, what a
//! closing connection leaves), and the schema's numbered migrations up to [`SCHEMA_VERSION`].

use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use super::{storage, wal_batch, SqliteStore, Writer};
use crate::cache::StateCache;
use crate::store::*;

/// Marks a SQLite file as a DataBuild event log (`PRAGMA application_id`): "DBLG".
const APPLICATION_ID: i64 = 0x4442_4C47;

/// The schema, as numbered migrations. Version N is reached by applying the first N steps.
/// Never edit a step that has shipped; add one.
const MIGRATIONS: &[&str] = &[
    include_str!("v1.sql"),
    include_str!("v2.sql"),
    include_str!("v3.sql"),
    include_str!("v4.sql"),
    include_str!("v5.sql"),
    include_str!("v6.sql"),
    include_str!("v7.sql"),
    include_str!("v8.sql"),
    include_str!("v9.sql"),
    include_str!("v10.sql"),
    include_str!("v11.sql"),
    include_str!("v12.sql"),
    include_str!("v13.sql"),
    include_str!("v14.sql"),
    include_str!("v15.sql"),
    include_str!("v16.sql"),
    include_str!("v17.sql"),
    include_str!("v18.sql"),
];

/// The schema version this build writes, and the newest it opens.
pub const SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// Page cache sizes. Appends touch several indexes at random keys; with SQLite's default 2 MiB
/// cache the writer spends most of its time re-reading and spilling pages. A build's commits are
/// small: 8 MiB holds what they touch, and a 24k-job build holds 27 MB less than with 32. A
/// larger cache also costs every commit that split a page: `balance_nonroot` swaps two pages
/// through a temporary page number past the database's end (the lock page's, 262,145), so the
/// `COMMIT` then truncates the cache by walking its whole hash table (`pcache1TruncateUnsafe`,
/// 10% of the scheduler thread's CPU with 32 MiB).
pub(super) const WRITER_CACHE_KIB: i64 = 8 * 1024;

/// A reader's page cache (see [`WRITER_CACHE_KIB`]).
pub(super) const READER_CACHE_KIB: i64 = 8 * 1024;

/// Connection settings shared by the writer and readers. Reads go through `pread` and the page
/// cache above, not a memory map: every page a process maps stays in its resident memory, so a
/// read of the whole log (`datasets --exact` on 3M events) held 941 MB, the 24k no-op build 122
/// MB of mapped log beside its own 48; without the map they hold 52 and 12 MB, and take the same
/// time within 10% (BENCHMARKS.md, "Workload shapes beside make").
pub(super) fn tune(conn: &Connection, cache_kib: i64) -> Result<()> {
    set_cache(conn, cache_kib)?;
    leave_wal_on_close(conn)?;
    conn.pragma_update(None, "mmap_size", 0).map_err(storage)?;
    conn.pragma_update(None, "temp_store", "MEMORY")
        .map_err(storage)?;
    Ok(())
}

/// A closing connection leaves the WAL as it is: the store decides at its drop (`checkpointer`'s
/// `CLOSE_TRUNCATE_BYTES`). SQLite's last connection to close would copy the WAL into the
/// database, sync it and remove it every time: 20 ms at the end of a 24k no-op build (4 MB of
/// WAL), against ~1 ms per MB for the next command to read that WAL back at its first open.
pub(super) fn leave_wal_on_close(conn: &Connection) -> Result<()> {
    conn.set_db_config(
        rusqlite::config::DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE,
        true,
    )
    .map(|_| ())
    .map_err(storage)
}

/// Sets a connection's page cache; a smaller one frees the pages it no longer holds at once.
pub(super) fn set_cache(conn: &Connection, cache_kib: i64) -> Result<()> {
    conn.pragma_update(None, "cache_size", -cache_kib)
        .map_err(storage)
}

/// The writing connection: through the VFS that writes each commit's WAL frames at once, when it
/// could be registered (it always can with the SQLite built in).
fn open_writer(path: &Path) -> rusqlite::Result<Connection> {
    if wal_batch::register() {
        Connection::open_with_flags_and_vfs(path, OpenFlags::default(), wal_batch::NAME)
    } else {
        Connection::open(path)
    }
}

/// How many prepared statements the writing connection keeps.
const WRITER_STATEMENTS: usize = 64;

impl SqliteStore {
    /// Opens (creating if absent) the log at `path`, applying pending migrations.
    pub fn open(path: &Path) -> Result<SqliteStore> {
        let location = path.display().to_string();
        let open_err = |message: String| LogError::Open {
            location: location.clone(),
            message,
        };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            if !parent.is_dir() {
                return Err(open_err(format!(
                    "the folder `{}` does not exist",
                    parent.display()
                )));
            }
        }
        let conn = open_writer(path).map_err(|e| open_err(e.to_string()))?;
        conn.busy_timeout(BUSY_TIMEOUT).map_err(storage)?;
        // An append's statements (~30, six of them the events' inserts) outnumber the 16
        // rusqlite keeps by default: each one evicted would be parsed again at its next use.
        conn.set_prepared_statement_cache_capacity(WRITER_STATEMENTS);
        let store = SqliteStore {
            path: path.to_path_buf(),
            writer: Mutex::new(Writer {
                conn,
                cache: StateCache::default(),
                next_idx: None,
                data_version: None,
            }),
            readers: Mutex::new(Vec::new()),
            checkpointer: std::sync::OnceLock::new(),
        };
        // Two processes creating the same log at once can meet in the journal-mode switch, where
        // SQLite answers "busy" without waiting: retry for as long as any lock wait would last.
        let deadline = Instant::now() + BUSY_TIMEOUT;
        loop {
            match store.prepare_schema() {
                Err(LogError::Locked { .. }) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(25));
                }
                other => break other.map(|()| store),
            }
        }
    }

    /// The log's schema version; an error if the file is not an event log, or one newer than
    /// this build understands. A file with no tables is version 0.
    fn schema_version(&self, tx: &rusqlite::Transaction<'_>) -> Result<i64> {
        let location = self.location();
        let app_id: i64 = tx
            .query_row("PRAGMA application_id", [], |r| r.get(0))
            .map_err(|e| self.classify(e))?;
        let tables: i64 = tx
            .query_row("SELECT count(*) FROM sqlite_master", [], |r| r.get(0))
            .map_err(|e| self.classify(e))?;
        if tables == 0 {
            return Ok(0);
        }
        if app_id != APPLICATION_ID {
            return Err(LogError::Open {
                location,
                message: "the file is an SQLite database but not a DataBuild event log".into(),
            });
        }
        let version: i64 = tx
            .query_row(
                "SELECT value FROM meta WHERE key = 'schema_version'",
                [],
                |r| r.get::<_, String>(0),
            )
            .map_err(|e| LogError::Open {
                location: location.clone(),
                message: format!("its schema version cannot be read ({e})"),
            })?
            .parse()
            .map_err(|_| LogError::Open {
                location: location.clone(),
                message: "its schema version is not a number".into(),
            })?;
        if version > SCHEMA_VERSION {
            return Err(LogError::NewerSchema {
                location,
                found: version,
                supported: SCHEMA_VERSION,
            });
        }
        Ok(version)
    }

    fn prepare_schema(&self) -> Result<()> {
        let mut writer = self.writer.lock().expect("writer lock");
        let conn = &mut writer.conn;
        // WAL lets readers proceed while a writer appends; NORMAL sync keeps every committed batch
        // across process crashes (power loss may drop the last few).
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(|e| self.classify(e))?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(storage)?;
        tune(conn, WRITER_CACHE_KIB)?;
        // Most opens find the schema current: they read it without the write lock, which
        // another process may hold for a while (a long batch, a `sqlite3` shell); in WAL mode a
        // reader never waits for it.
        {
            let tx = conn.transaction().map_err(|e| self.classify(e))?;
            if self.schema_version(&tx)? == SCHEMA_VERSION {
                return Ok(());
            }
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(|e| self.classify(e))?;
        // Read again under the lock: another process may have migrated meanwhile.
        let version = self.schema_version(&tx)?;
        for step in &MIGRATIONS[version as usize..] {
            tx.execute_batch(step).map_err(storage)?;
        }
        if version < SCHEMA_VERSION {
            tx.pragma_update(None, "application_id", APPLICATION_ID)
                .map_err(storage)?;
            tx.execute(
                "INSERT INTO meta (key, value) VALUES ('schema_version', ?1)
                 ON CONFLICT (key) DO UPDATE SET value = excluded.value",
                [SCHEMA_VERSION.to_string()],
            )
            .map_err(storage)?;
        }
        tx.commit().map_err(storage)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::{Event, Status};

    /// Opening a log whose schema is current takes no write lock: while another process holds
    /// it (a long batch, a `sqlite3` shell), a command that only reads opens and reads at once.
    #[test]
    fn opening_a_current_log_does_not_wait_for_the_write_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let store = SqliteStore::open(&path).unwrap();
        store
            .append(vec![Event::build_request("b1", Status::Received)])
            .unwrap();
        let holder = Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        let started = Instant::now();
        let reader = SqliteStore::open(&path).expect("opens while the write lock is held");
        assert!(reader.build_request("b1").unwrap().is_some());
        assert!(
            started.elapsed() < BUSY_TIMEOUT / 2,
            "{:?}",
            started.elapsed()
        );
        holder.execute_batch("COMMIT").unwrap();
    }
}
