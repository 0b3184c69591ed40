//! Leases on the PostgreSQL log: the heartbeats a process renews while it builds, and their
//! revocation once it falls silent, all timed by the database's clock.

use std::time::Duration;

use super::{storage, PostgresStore};
use crate::store::*;

/// The database's clock in ns since the epoch: leases are timed by it, never by a host's clock.
const DB_NOW_NS: &str = "(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint";

pub(super) fn heartbeat(store: &PostgresStore, owner: &str) -> Result<()> {
    // The database's clock, on a reader connection: a long append holding the writer must
    // not keep the lease from being renewed.
    let renewed = store.read(|c| {
        c.execute(
            &format!(
                "INSERT INTO heartbeats (owner, at) VALUES ($1, {DB_NOW_NS})
                 ON CONFLICT (owner) DO UPDATE SET at = excluded.at WHERE NOT heartbeats.revoked"
            ),
            &[&owner],
        )
        .map_err(storage)
    })?;
    if renewed == 0 {
        return Err(LogError::LeaseLost {
            owner: owner.to_string(),
        });
    }
    Ok(())
}

pub(super) fn silent_for(store: &PostgresStore, owner: &str) -> Result<Option<Duration>> {
    store.read(|c| {
        Ok(c.query_opt(
            &format!("SELECT {DB_NOW_NS} - at FROM heartbeats WHERE owner = $1"),
            &[&owner],
        )
        .map_err(storage)?
        .map(|r| silence(r.get(0))))
    })
}

pub(super) fn rejoin(store: &PostgresStore, owner: &str) -> Result<()> {
    store.read(|c| {
        c.execute(
            &format!("UPDATE heartbeats SET revoked = false, at = {DB_NOW_NS} WHERE owner = $1"),
            &[&owner],
        )
        .map_err(storage)?;
        Ok(())
    })
}

pub(super) fn revoke_lease(store: &PostgresStore, owner: &str, timeout: Duration) -> Result<bool> {
    let timeout = timeout.as_nanos() as i64;
    // One statement: a renewal and a revocation of the same row are serialized by its lock,
    // so a holder either renewed in time or learns at its next renewal that it lost.
    store.read(|c| {
        c.execute(
            &format!(
                "UPDATE heartbeats SET revoked = true WHERE owner = $1 AND {DB_NOW_NS} - at >= $2"
            ),
            &[&owner, &timeout],
        )
        .map_err(storage)?;
        Ok(
            c.query_opt("SELECT revoked FROM heartbeats WHERE owner = $1", &[&owner])
                .map_err(storage)?
                .is_some_and(|r| r.get::<_, bool>(0)),
        )
    })
}
