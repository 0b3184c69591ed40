//! A VFS that writes each transaction's WAL frames with one system call (per 128 KiB).
//!
//! SQLite writes a WAL frame as two `pwrite`s, its 24-byte header and then its page. A claim in a
//! build touches ~30 pages, so each claim cost ~60 system calls on the scheduler's thread (147,000
//! per 2,700-job build, measured with `strace -f`). This VFS wraps the default one and gathers a
//! WAL file's consecutive writes in memory, then writes them out at once:
//!
//! - when the commit frame's page arrives (its header carries the database size, non-zero only for
//!   commits), so a failure is reported to SQLite by the `xWrite` that caused it, as it would be
//!   without this VFS;
//! - before any other operation on the WAL file (read, sync, size, truncate, close), and before a
//!   write that does not follow the gathered bytes;
//! - as a safety net, before SQLite publishes a new WAL-index header: its `xShmBarrier` (and
//!   `xShmLock`) calls on the database file. Readers only read frames that header lists, so no
//!   reader, in this process or another, can look for a frame still in memory.
//!
//! Only the writing connection uses it; readers and the checkpointer keep the default VFS (the
//! locks are the same: every call but `xWrite` goes straight to the default VFS's file).
//!
//! A module allowed `unsafe` (with `databuild-exec`'s `spawn` and `exchange`, and the binary's
//! `main.rs`): a VFS
//! is a table of C callbacks over memory SQLite allocates.
#![allow(unsafe_code)]

use std::ffi::{c_int, c_void, CStr};
use std::ptr;
use std::sync::OnceLock;

use rusqlite::ffi;

/// The name connections open the VFS by.
pub const NAME: &CStr = c"databuild-wal-batch";

/// A transaction gathering more than this is written out early.
const MAX_GATHERED: usize = 1 << 20;

/// The most the default VFS writes in one call (it masks a write's length to 17 bits): a claim's
/// ~30 frames of 4 KiB fit in one.
const MAX_WRITE: usize = 0x1ffff;

/// Size of a WAL frame header; bytes 4..8 hold the database size after a commit, else 0.
const FRAME_HEADER: usize = 24;

/// Registers the VFS (once per process).
pub fn register() -> bool {
    static REGISTERED: OnceLock<bool> = OnceLock::new();
    *REGISTERED.get_or_init(|| unsafe {
        let base = ffi::sqlite3_vfs_find(ptr::null());
        if base.is_null() {
            return false;
        }
        let mut vfs = *base;
        vfs.zName = NAME.as_ptr();
        vfs.szOsFile = (std::mem::size_of::<File>() + (*base).szOsFile as usize) as c_int;
        vfs.pAppData = base.cast();
        vfs.xOpen = Some(open);
        vfs.pNext = ptr::null_mut();
        let vfs = Box::leak(Box::new(vfs));
        ffi::sqlite3_vfs_register(vfs, 0) == ffi::SQLITE_OK
    })
}

/// What SQLite allocates for each file of this VFS: this header, then the default VFS's file.
#[repr(C)]
struct File {
    /// What SQLite sees; must come first.
    base: ffi::sqlite3_file,
    /// The default VFS's file, stored right after this struct.
    real: *mut ffi::sqlite3_file,
    /// For a WAL file: the bytes gathered and not yet written. Null for other files.
    gathered: *mut Gathered,
    /// A WAL file's database file, and a database file's open WAL file (the two point at each
    /// other while both are open).
    peer: *mut File,
}

#[derive(Default)]
struct Gathered {
    offset: i64,
    bytes: Vec<u8>,
    /// The last write was a commit frame's header: its page ends the transaction.
    commit_next: bool,
    /// Writes made to the real file, for tests.
    #[cfg(test)]
    writes: usize,
}

unsafe fn real_methods(f: *mut ffi::sqlite3_file) -> &'static ffi::sqlite3_io_methods {
    let real = (*f.cast::<File>()).real;
    &*(*real).pMethods
}

unsafe fn real(f: *mut ffi::sqlite3_file) -> *mut ffi::sqlite3_file {
    (*f.cast::<File>()).real
}

unsafe extern "C" fn open(
    vfs: *mut ffi::sqlite3_vfs,
    name: ffi::sqlite3_filename,
    file: *mut ffi::sqlite3_file,
    flags: c_int,
    out_flags: *mut c_int,
) -> c_int {
    let base = (*vfs).pAppData.cast::<ffi::sqlite3_vfs>();
    let f = file.cast::<File>();
    let real = file
        .cast::<u8>()
        .add(std::mem::size_of::<File>())
        .cast::<ffi::sqlite3_file>();
    let rc =
        ((*base).xOpen.expect("the default VFS opens files"))(base, name, real, flags, out_flags);
    if rc != ffi::SQLITE_OK || (*real).pMethods.is_null() {
        // SQLite calls no method of a file whose open failed (and whose methods are null).
        (*f).base.pMethods = ptr::null();
        return rc;
    }
    let is_wal = flags & ffi::SQLITE_OPEN_WAL != 0 && !name.is_null();
    let peer = if is_wal {
        ffi::sqlite3_database_file_object(name).cast::<File>()
    } else {
        ptr::null_mut()
    };
    ptr::write(
        f,
        File {
            base: ffi::sqlite3_file { pMethods: &METHODS },
            real,
            gathered: if is_wal {
                Box::into_raw(Box::default())
            } else {
                ptr::null_mut()
            },
            peer,
        },
    );
    if !peer.is_null() {
        (*peer).peer = f;
    }
    ffi::SQLITE_OK
}

/// Writes a WAL file's gathered bytes.
unsafe fn write_out(f: *mut File) -> c_int {
    let Some(g) = (*f).gathered.as_mut() else {
        return ffi::SQLITE_OK;
    };
    g.commit_next = false;
    if g.bytes.is_empty() {
        return ffi::SQLITE_OK;
    }
    let real = (*f).real;
    let write = (*(*real).pMethods).xWrite.expect("files write");
    let mut rc = ffi::SQLITE_OK;
    let mut offset = g.offset;
    for piece in g.bytes.chunks(MAX_WRITE) {
        #[cfg(test)]
        {
            g.writes += 1;
        }
        rc = write(real, piece.as_ptr().cast(), piece.len() as c_int, offset);
        if rc != ffi::SQLITE_OK {
            break;
        }
        offset += piece.len() as i64;
    }
    g.bytes.clear();
    rc
}

/// Writes out the database file's WAL (its shared-memory calls come before SQLite tells readers
/// about new frames). The commit's own `xWrite` has written everything out already; this has never
/// been seen to find bytes left.
unsafe fn write_out_peer_wal(db: *mut ffi::sqlite3_file) -> c_int {
    match (*db.cast::<File>()).peer {
        wal if wal.is_null() => ffi::SQLITE_OK,
        wal => write_out(wal),
    }
}

/// Writes out what the file itself gathered (a WAL file; nothing for others).
unsafe fn write_out_own(file: *mut ffi::sqlite3_file) -> c_int {
    write_out(file.cast())
}

unsafe extern "C" fn x_write(
    file: *mut ffi::sqlite3_file,
    data: *const c_void,
    amount: c_int,
    offset: i64,
) -> c_int {
    let f = file.cast::<File>();
    let Some(g) = (*f).gathered.as_mut() else {
        return (real_methods(file).xWrite.expect("files write"))(real(file), data, amount, offset);
    };
    let bytes = std::slice::from_raw_parts(data.cast::<u8>(), amount as usize);
    if !g.bytes.is_empty() && g.offset + g.bytes.len() as i64 != offset {
        let rc = write_out(f);
        if rc != ffi::SQLITE_OK {
            return rc;
        }
    }
    let g = &mut *(*f).gathered;
    if g.bytes.is_empty() {
        g.offset = offset;
    }
    g.bytes.extend_from_slice(bytes);
    let ends_commit = std::mem::take(&mut g.commit_next);
    if bytes.len() == FRAME_HEADER && bytes[4..8] != [0; 4] {
        g.commit_next = true;
        return ffi::SQLITE_OK;
    }
    if ends_commit || g.bytes.len() >= MAX_GATHERED {
        return write_out(f);
    }
    ffi::SQLITE_OK
}

/// Forwards a method to the default VFS's file, after `$write_out` (the file's own gathered
/// bytes, or for a database file's shared-memory calls, its WAL's).
macro_rules! forward {
    ($write_out:ident, $name:ident, $method:ident, ($($arg:ident: $ty:ty),*), $missing:expr) => {
        unsafe extern "C" fn $name(file: *mut ffi::sqlite3_file $(, $arg: $ty)*) -> c_int {
            let rc = $write_out(file);
            if rc != ffi::SQLITE_OK {
                return rc;
            }
            match real_methods(file).$method {
                Some(m) => m(real(file) $(, $arg)*),
                None => $missing,
            }
        }
    };
}

forward!(write_out_own, x_read, xRead, (data: *mut c_void, amount: c_int, offset: i64), ffi::SQLITE_IOERR_READ);
forward!(write_out_own, x_truncate, xTruncate, (size: i64), ffi::SQLITE_IOERR_TRUNCATE);
forward!(write_out_own, x_sync, xSync, (flags: c_int), ffi::SQLITE_IOERR_FSYNC);
forward!(write_out_own, x_file_size, xFileSize, (size: *mut i64), ffi::SQLITE_IOERR_FSTAT);
forward!(write_out_own, x_lock, xLock, (level: c_int), ffi::SQLITE_IOERR_LOCK);
forward!(write_out_own, x_unlock, xUnlock, (level: c_int), ffi::SQLITE_IOERR_UNLOCK);
forward!(write_out_own, x_check_reserved_lock, xCheckReservedLock, (out: *mut c_int), ffi::SQLITE_IOERR_CHECKRESERVEDLOCK);
forward!(write_out_own, x_file_control, xFileControl, (op: c_int, arg: *mut c_void), ffi::SQLITE_NOTFOUND);
forward!(write_out_own, x_sector_size, xSectorSize, (), 4096);
forward!(
    write_out_own,
    x_device_characteristics,
    xDeviceCharacteristics,
    (),
    0
);
forward!(write_out_own, x_shm_map, xShmMap, (page: c_int, size: c_int, extend: c_int, out: *mut *mut c_void), ffi::SQLITE_IOERR_SHMMAP);
forward!(write_out_own, x_fetch, xFetch, (offset: i64, amount: c_int, out: *mut *mut c_void), {
    *out = ptr::null_mut();
    ffi::SQLITE_OK
});
forward!(write_out_own, x_unfetch, xUnfetch, (offset: i64, p: *mut c_void), ffi::SQLITE_OK);

forward!(write_out_peer_wal, x_shm_lock, xShmLock, (offset: c_int, n: c_int, flags: c_int), ffi::SQLITE_IOERR_SHMLOCK);
forward!(write_out_peer_wal, x_shm_unmap, xShmUnmap, (delete: c_int), ffi::SQLITE_OK);

unsafe extern "C" fn x_shm_barrier(file: *mut ffi::sqlite3_file) {
    // A failure cannot be reported here (`xShmBarrier` returns nothing), and going on would let
    // readers see frames that are not there: stop instead.
    if write_out_peer_wal(file) != ffi::SQLITE_OK {
        eprintln!(
            "databuild: writing the event log's WAL failed; stopping before the log could be read \
             inconsistently"
        );
        std::process::abort();
    }
    if let Some(m) = real_methods(file).xShmBarrier {
        m(real(file))
    }
}

unsafe extern "C" fn x_close(file: *mut ffi::sqlite3_file) -> c_int {
    let f = file.cast::<File>();
    let written = write_out(f);
    if !(*f).peer.is_null() {
        (*(*f).peer).peer = ptr::null_mut();
    }
    if !(*f).gathered.is_null() {
        drop(Box::from_raw((*f).gathered));
        (*f).gathered = ptr::null_mut();
    }
    let closed = (real_methods(file).xClose.expect("files close"))(real(file));
    if written != ffi::SQLITE_OK {
        written
    } else {
        closed
    }
}

static METHODS: ffi::sqlite3_io_methods = ffi::sqlite3_io_methods {
    iVersion: 3,
    xClose: Some(x_close),
    xRead: Some(x_read),
    xWrite: Some(x_write),
    xTruncate: Some(x_truncate),
    xSync: Some(x_sync),
    xFileSize: Some(x_file_size),
    xLock: Some(x_lock),
    xUnlock: Some(x_unlock),
    xCheckReservedLock: Some(x_check_reserved_lock),
    xFileControl: Some(x_file_control),
    xSectorSize: Some(x_sector_size),
    xDeviceCharacteristics: Some(x_device_characteristics),
    xShmMap: Some(x_shm_map),
    xShmLock: Some(x_shm_lock),
    xShmBarrier: Some(x_shm_barrier),
    xShmUnmap: Some(x_shm_unmap),
    xFetch: Some(x_fetch),
    xUnfetch: Some(x_unfetch),
};

#[cfg(test)]
mod tests {
    use super::*;
    use rusqlite::{Connection, OpenFlags};

    fn open(path: &std::path::Path, vfs: bool) -> Connection {
        let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
            | OpenFlags::SQLITE_OPEN_CREATE
            | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let c = if vfs {
            assert!(register());
            Connection::open_with_flags_and_vfs(path, flags, NAME).unwrap()
        } else {
            Connection::open_with_flags(path, flags).unwrap()
        };
        c.pragma_update(None, "journal_mode", "WAL").unwrap();
        c
    }

    /// The WAL file of the connection's main database, as this VFS sees it.
    fn gathered(c: &Connection) -> &Gathered {
        unsafe {
            let mut db: *mut ffi::sqlite3_file = ptr::null_mut();
            let rc = ffi::sqlite3_file_control(
                c.handle(),
                c"main".as_ptr(),
                ffi::SQLITE_FCNTL_FILE_POINTER,
                (&mut db as *mut *mut ffi::sqlite3_file).cast(),
            );
            assert_eq!(rc, ffi::SQLITE_OK);
            let wal = (*db.cast::<File>()).peer;
            assert!(!wal.is_null(), "the WAL is open");
            &*(*wal).gathered
        }
    }

    #[test]
    fn each_commit_is_one_write_and_other_connections_see_it_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        let writer = open(&path, true);
        writer
            .execute_batch(
                "CREATE TABLE t (k TEXT PRIMARY KEY, v TEXT);
                 CREATE INDEX t_by_v ON t (v);",
            )
            .unwrap();
        let reader = open(&path, false);
        let before = gathered(&writer).writes;
        for i in 0..50 {
            let tx = writer.unchecked_transaction().unwrap();
            for j in 0..40 {
                // Keys spread over the table and index, so each commit writes many pages.
                tx.execute(
                    "INSERT INTO t VALUES (?1, ?2)",
                    [
                        format!("{:08}", (j * 7919 + i * 31) % 100_000),
                        format!("{i}-{j}"),
                    ],
                )
                .unwrap();
            }
            tx.commit().unwrap();
            assert!(
                gathered(&writer).bytes.is_empty(),
                "nothing is left in memory after a commit"
            );
            let seen: i64 = reader
                .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
                .unwrap();
            assert_eq!(seen, (i + 1) * 40);
        }
        let writes = gathered(&writer).writes - before;
        assert!(writes <= 50, "{writes} writes for 50 commits");
        // The file is a valid database for any SQLite, from scratch.
        drop(writer);
        drop(reader);
        let fresh = Connection::open(&path).unwrap();
        let check: String = fresh
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok");
    }

    #[test]
    fn a_transaction_larger_than_the_limit_is_written_in_pieces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("log.db");
        let writer = open(&path, true);
        writer.execute_batch("CREATE TABLE t (v BLOB)").unwrap();
        let before = gathered(&writer).writes;
        writer
            .execute(
                "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 30000)
                 INSERT INTO t SELECT randomblob(1000) FROM n",
                [],
            )
            .unwrap();
        let writes = gathered(&writer).writes - before;
        // ~31 MB of frames: pieces of up to 128 KiB, not two writes per frame (15,000).
        assert!((200..=400).contains(&writes), "{writes} writes");
        let n: i64 = open(&path, false)
            .query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap();
        assert_eq!(n, 30000);
    }
}
