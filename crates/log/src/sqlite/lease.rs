//! Leases on the SQLite log: the heartbeats a process renews while it builds, and their
//! revocation once it falls silent.

use std::time::Duration;

use rusqlite::{params, OptionalExtension};

use super::SqliteStore;
use crate::store::*;

pub(super) fn heartbeat(store: &SqliteStore, owner: &str) -> Result<()> {
    let guard = store.writer.lock().expect("writer lock");
    store.start_checkpointer(&guard.conn);
    let renewed = guard
        .conn
        .execute(
            "INSERT INTO heartbeats (owner, at) VALUES (?1, ?2)
             ON CONFLICT (owner) DO UPDATE SET at = excluded.at WHERE NOT heartbeats.revoked",
            params![owner, crate::event::now_ns()],
        )
        .map_err(|e| store.classify(e))?;
    store.written();
    if renewed == 0 {
        return Err(LogError::LeaseLost {
            owner: owner.to_string(),
        });
    }
    Ok(())
}

pub(super) fn silent_for(store: &SqliteStore, owner: &str) -> Result<Option<Duration>> {
    let at: Option<i64> = store.read(|c| {
        c.query_row("SELECT at FROM heartbeats WHERE owner = ?1", [owner], |r| {
            r.get(0)
        })
        .optional()
    })?;
    Ok(at.map(|at| silence(crate::event::now_ns() - at)))
}

pub(super) fn rejoin(store: &SqliteStore, owner: &str) -> Result<()> {
    let guard = store.writer.lock().expect("writer lock");
    guard
        .conn
        .execute(
            "UPDATE heartbeats SET revoked = 0, at = ?2 WHERE owner = ?1",
            params![owner, crate::event::now_ns()],
        )
        .map_err(|e| store.classify(e))?;
    store.written();
    Ok(())
}

pub(super) fn revoke_lease(store: &SqliteStore, owner: &str, timeout: Duration) -> Result<bool> {
    let guard = store.writer.lock().expect("writer lock");
    let before = crate::event::now_ns() - timeout.as_nanos() as i64;
    guard
        .conn
        .execute(
            "UPDATE heartbeats SET revoked = 1 WHERE owner = ?1 AND at <= ?2",
            params![owner, before],
        )
        .map_err(|e| store.classify(e))?;
    store.written();
    let revoked: Option<bool> = guard
        .conn
        .query_row(
            "SELECT revoked FROM heartbeats WHERE owner = ?1",
            [owner],
            |r| r.get(0),
        )
        .optional()
        .map_err(|e| store.classify(e))?;
    Ok(revoked == Some(true))
}
