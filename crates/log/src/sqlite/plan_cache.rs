//! The plans of no-op builds the SQLite log keeps (`plan_cache`, see `v10.sql`): a kept plan
//! stands while every event after it is its own build's no-op event.

use std::time::Duration;

use rusqlite::{params, Connection, OptionalExtension, TransactionBehavior};

use super::open::BUSY_TIMEOUT;
use super::SqliteStore;
use crate::store::*;

pub(super) fn kept_plan(store: &SqliteStore, key: &str, id: &str) -> Result<Option<KeptPlan>> {
    // The body (a MiB at 24k refs) is read only once the events after it are found to be
    // the build's own.
    store.read(|c| {
        let Some(log_idx) = c
            .prepare_cached("SELECT log_idx FROM plan_cache WHERE key = ?1")?
            .query_row([key], |r| r.get(0))
            .optional()?
        else {
            return Ok(None);
        };
        if !only_noop_events_since(c, log_idx, id)? {
            return Ok(None);
        }
        c.prepare_cached("SELECT body FROM plan_cache WHERE key = ?1 AND log_idx = ?2")?
            .query_row(params![key, log_idx], |r| r.get(0))
            .optional()
            .map(|body| body.map(|body| KeptPlan { log_idx, body }))
    })
}

pub(super) fn keep_plan(
    store: &SqliteStore,
    key: &str,
    since: i64,
    id: &str,
    body: Option<&[u8]>,
) -> Result<bool> {
    let mut guard = store.writer.lock().expect("writer lock");
    // A plan is worth keeping, not waiting for: while another process writes, keep nothing
    // (its write moves the log past the plan anyway).
    let conn = &mut guard.conn;
    conn.busy_timeout(PLAN_CACHE_WAIT)
        .map_err(|e| store.classify(e))?;
    let kept = keep_plan_in(conn, key, since, id, body);
    conn.busy_timeout(BUSY_TIMEOUT)
        .map_err(|e| store.classify(e))?;
    let kept = match kept.map_err(|e| store.classify(e)) {
        Err(LogError::Locked { .. }) => false,
        kept => kept?,
    };
    store.written();
    Ok(kept)
}

/// Keeps plan `key` in one write transaction if every event after `since` is build `id`'s own
/// no-op event: with the log's last index, evicting the least recently used past the limit.
fn keep_plan_in(
    conn: &mut Connection,
    key: &str,
    since: i64,
    id: &str,
    body: Option<&[u8]>,
) -> rusqlite::Result<bool> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    if !only_noop_events_since(&tx, since, id)? {
        return Ok(false);
    }
    let end: i64 = tx.query_row("SELECT coalesce(max(idx), 0) FROM events", [], |r| r.get(0))?;
    let now = crate::event::now_ns();
    let written = match body {
        Some(body) => tx.execute(
            "INSERT INTO plan_cache (key, log_idx, body, used_at) VALUES (?1, ?2, ?3, ?4)
             ON CONFLICT (key) DO UPDATE SET log_idx = excluded.log_idx,
                body = excluded.body, used_at = excluded.used_at",
            params![key, end, body, now],
        )?,
        None => tx.execute(
            "UPDATE plan_cache SET log_idx = ?2, used_at = ?3 WHERE key = ?1",
            params![key, end, now],
        )?,
    };
    tx.execute(
        "DELETE FROM plan_cache WHERE key NOT IN
           (SELECT key FROM plan_cache ORDER BY used_at DESC LIMIT ?1)",
        [PLAN_CACHE_ENTRIES],
    )?;
    tx.commit()?;
    Ok(written == 1)
}

/// The most no-op plans a log keeps (see `v10.sql`): the least recently used go.
const PLAN_CACHE_ENTRIES: i64 = 16;

/// How long keeping a plan waits for another process's write to end.
const PLAN_CACHE_WAIT: Duration = Duration::from_millis(50);

/// Whether every event after `since` is a no-op event of build request `id` (see
/// [`EventStore::kept_plan`]). The events after a kept plan are a build's few own: a range of
/// the primary key.
fn only_noop_events_since(c: &Connection, since: i64, id: &str) -> rusqlite::Result<bool> {
    c.prepare_cached(
        "SELECT NOT EXISTS (SELECT 1 FROM events WHERE idx > ?1 AND NOT (
             build_request_id IS ?2 AND (
                kind = 'build_request'
                OR (kind = 'job_run' AND status = 'skipped')
                OR (kind = 'partition' AND status = 'available' AND job_run_id IS NULL))))",
    )?
    .query_row(params![since, id], |r| r.get(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    use crate::event::{Event, Status};

    /// A plan is kept over its own build request's no-op events only: another's keeps nothing.
    #[test]
    fn a_plan_is_kept_only_over_its_own_builds_noop_events() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let since = store.last_idx().unwrap();
        store
            .append(vec![Event::build_request("b1", Status::Received)])
            .unwrap();
        assert!(store.keep_plan("k", since, "b1", Some(b"{}")).unwrap());
        let kept = store.kept_plan("k", "b1").unwrap().unwrap();
        assert_eq!(kept.log_idx, store.last_idx().unwrap());
        assert_eq!(kept.body, b"{}");
        store
            .append(vec![Event::build_request("b2", Status::Received)])
            .unwrap();
        assert_eq!(store.kept_plan("k", "b2").unwrap(), Some(kept.clone()));
        assert_eq!(store.kept_plan("k", "b3").unwrap(), None);
        assert!(!store.keep_plan("k", kept.log_idx, "b3", None).unwrap());
        assert_eq!(store.kept_plan("k", "b2").unwrap(), Some(kept.clone()));
        // The build's own skipped run and run-less `available` keep it.
        store
            .append(vec![
                Event::job_run("b2", "s1", "j", Status::Skipped),
                Event::partition(Some("b2"), "a/1", Status::Available),
            ])
            .unwrap();
        assert!(store.kept_plan("k", "b2").unwrap().is_some());
        assert!(store.keep_plan("k", kept.log_idx, "b2", None).unwrap());
        let moved = store.kept_plan("k", "b2").unwrap().unwrap();
        assert_eq!(moved.log_idx, store.last_idx().unwrap());
        assert_eq!(moved.body, b"{}", "the body kept stays");
        // Another build's skipped run does not.
        store
            .append(vec![Event::job_run("b9", "s9", "j", Status::Skipped)])
            .unwrap();
        assert_eq!(store.kept_plan("k", "b2").unwrap(), None);
        assert!(!store.keep_plan("k", moved.log_idx, "b2", None).unwrap());
    }

    /// The build's own events that change what a plan reads (a check, a run it schedules)
    /// end a kept plan as another build's would.
    #[test]
    fn a_builds_own_checks_and_built_outputs_end_its_kept_plan() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let since = store.last_idx().unwrap();
        assert!(store.keep_plan("k", since, "b1", Some(b"{}")).unwrap());
        for (i, event) in [
            Event::check(Some("b1"), "a/1", "r1", "rows", true),
            Event::job_run("b1", "r1", "j", Status::Scheduled),
        ]
        .into_iter()
        .enumerate()
        {
            let kept = store.kept_plan("k", "b1").unwrap().unwrap();
            assert!(store.keep_plan("k", kept.log_idx, "b1", None).unwrap());
            store.append(vec![event]).unwrap();
            assert_eq!(store.kept_plan("k", "b1").unwrap(), None, "event {i}");
            assert!(!store.keep_plan("k", kept.log_idx, "b1", None).unwrap());
            // The next no-op keeps its plan anew from where the log is.
            let since = store.last_idx().unwrap();
            assert!(store.keep_plan("k", since, "b1", Some(b"{}")).unwrap());
        }
    }

    /// At most `PLAN_CACHE_ENTRIES` plans are kept: the least recently kept go first.
    #[test]
    fn the_least_recently_kept_plans_go_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store = SqliteStore::open(&dir.path().join("events.db")).unwrap();
        let since = store.last_idx().unwrap();
        for i in 0..=PLAN_CACHE_ENTRIES {
            assert!(store
                .keep_plan(&format!("k{i}"), since, "b", Some(b"{}"))
                .unwrap());
        }
        assert_eq!(store.kept_plan("k0", "b").unwrap(), None, "the oldest went");
        for i in 1..=PLAN_CACHE_ENTRIES {
            assert!(
                store.kept_plan(&format!("k{i}"), "b").unwrap().is_some(),
                "k{i}"
            );
        }
        // Keeping k1 again makes k2 the oldest.
        assert!(store.keep_plan("k1", since, "b", None).unwrap());
        assert!(store.keep_plan("k99", since, "b", Some(b"{}")).unwrap());
        assert!(store.kept_plan("k1", "b").unwrap().is_some());
        assert_eq!(store.kept_plan("k2", "b").unwrap(), None);
    }

    /// While another process holds the write lock, keeping a plan gives up at once instead of
    /// waiting out the busy timeout, and the writer waits as before afterwards.
    #[test]
    fn keeping_a_plan_does_not_wait_for_another_writer() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.db");
        let store = SqliteStore::open(&path).unwrap();
        let since = store.last_idx().unwrap();
        let other = Connection::open(&path).unwrap();
        other.execute_batch("BEGIN IMMEDIATE").unwrap();
        let started = Instant::now();
        assert!(!store.keep_plan("k", since, "b", Some(b"{}")).unwrap());
        assert!(started.elapsed() < Duration::from_secs(1));
        other.execute_batch("COMMIT").unwrap();
        let timeout: i64 = store
            .writer
            .lock()
            .unwrap()
            .conn
            .query_row("PRAGMA busy_timeout", [], |r| r.get(0))
            .unwrap();
        assert_eq!(timeout, BUSY_TIMEOUT.as_millis() as i64);
        assert!(store.keep_plan("k", since, "b", Some(b"{}")).unwrap());
    }
}
