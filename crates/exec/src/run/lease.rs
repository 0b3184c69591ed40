//! This process's lease on the event log: the fence that keeps a host that lost touch with a
//! shared log from writing what another host took over.
//!
//! While it drives work, a process renews its lease (a heartbeat, timed by the log's clock) every
//! sixth of the lease timeout. Another process takes its work over only after revoking the lease,
//! which the log grants only once the holder has been silent for the whole timeout; a revoked
//! lease is never renewed ([`LogError::LeaseLost`]).
//!
//! The holder counts on its own clock (`CLOCK_BOOTTIME`, which no other host's clock affects): a
//! renewal sent at `t` makes the lease good until `t + timeout / 2`. On a shared log, past that
//! instant no job of this process may run: slots start none, and the lease watchdog
//! ([`crate::run::watchdog::fence_jobs_at`], a process of its own, so it acts even while this one is
//! stopped) kills those running. They are gone half a timeout before anyone may take over.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use databuild_log::{EventStore, LogError};

use crate::run::owner::this_owner;

/// The lease timeout when none is configured (`DATABUILD_LEASE_TIMEOUT`).
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);

/// How long a paused build waits between renewals while the log cannot be reached.
const RETRY: Duration = Duration::from_millis(500);

/// Nanoseconds of `CLOCK_BOOTTIME`: monotonic, and counting while the machine sleeps.
pub fn boottime_ns() -> u64 {
    nix::time::clock_gettime(nix::time::ClockId::CLOCK_BOOTTIME)
        .map(|t| t.tv_sec() as u64 * 1_000_000_000 + t.tv_nsec() as u64)
        .unwrap_or(0)
}

/// The lease of this process, shared by every build it drives.
pub struct Lease {
    store: Arc<dyn EventStore>,
    timeout: Duration,
    state: Arc<State>,
    renewer: OnceLock<()>,
}

#[derive(Default)]
struct State {
    /// `CLOCK_BOOTTIME` ns until which this process may run jobs (0: no renewal yet).
    good_until: AtomicU64,
    /// Another process revoked the lease and took this one's work over.
    lost: AtomicBool,
    /// Builds driving work now: the lease is renewed while there are any.
    holders: AtomicUsize,
    /// How many times this process rejoined: the answer to a renewal asked before the last
    /// rejoin is stale, and is ignored.
    generation: AtomicU64,
    /// Rejoins and the renewals around them happen one at a time.
    renewing: std::sync::Mutex<()>,
}

/// Keeps the lease renewed while it lives.
pub struct Held(Arc<State>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.holders.fetch_sub(1, Ordering::SeqCst);
    }
}

impl Lease {
    pub fn new(store: Arc<dyn EventStore>, timeout: Duration) -> Lease {
        Lease {
            store,
            timeout,
            state: Arc::default(),
            renewer: OnceLock::new(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Whether this process may run jobs now: on a log only this machine uses, always (its
    /// owners are told alive or dead by their processes, not by leases).
    pub fn good(&self) -> bool {
        !self.store.shared()
            || (!self.lost() && boottime_ns() < self.state.good_until.load(Ordering::SeqCst))
    }

    /// Whether another process took this one's work over.
    pub fn lost(&self) -> bool {
        self.state.lost.load(Ordering::SeqCst)
    }

    /// Renews the lease now, and keeps renewing it until the returned value is dropped. A
    /// process whose lease was revoked, once it drives no work any more, rejoins with a fresh
    /// one: everything it held was closed by the process that took it over.
    pub fn hold(&self) -> Result<Held, LogError> {
        let before = self.state.holders.fetch_add(1, Ordering::SeqCst);
        let held = Held(self.state.clone());
        if before == 0 && self.lost() {
            self.rejoin()?;
        }
        match renew(self.store.as_ref(), &self.state, self.timeout) {
            // Revoked while this process drove nothing (it learns it only now): it rejoins.
            Err(LogError::LeaseLost { .. }) if before == 0 => {
                self.rejoin()?;
                renew(self.store.as_ref(), &self.state, self.timeout)?;
            }
            answer => answer?,
        }
        self.renewer.get_or_init(|| self.spawn_renewer());
        Ok(held)
    }

    /// A fresh lease after a revoked one; answers to renewals asked before are ignored.
    fn rejoin(&self) -> Result<(), LogError> {
        let _one = self
            .state
            .renewing
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        self.store.rejoin(&this_owner())?;
        self.state.generation.fetch_add(1, Ordering::SeqCst);
        self.state.lost.store(false, Ordering::SeqCst);
        Ok(())
    }

    /// Returns once the lease is good, renewing it meanwhile: a build pauses here while the log
    /// cannot be reached. [`LogError::LeaseLost`] once another process took its work over; at
    /// once when `interrupt` is set, for the caller to stop.
    pub fn wait_good(&self, interrupt: &AtomicBool) -> Result<(), LogError> {
        loop {
            if interrupt.load(Ordering::SeqCst) {
                return Ok(());
            }
            if self.lost() {
                return Err(LogError::LeaseLost {
                    owner: this_owner(),
                });
            }
            if self.good() {
                return Ok(());
            }
            // A failed renewal (the log is still out of reach) is tried again.
            match renew(self.store.as_ref(), &self.state, self.timeout) {
                Err(e @ LogError::LeaseLost { .. }) => return Err(e),
                Ok(()) => {}
                Err(_) => std::thread::sleep(RETRY),
            }
        }
    }

    fn spawn_renewer(&self) {
        // Held weakly: the store must close when the command is done with it, and SQLite's
        // last connection to close is what copies the WAL into the database and removes it
        // (otherwise the next command reads the whole WAL back to rebuild its index).
        let store = Arc::downgrade(&self.store);
        let (state, timeout) = (self.state.clone(), self.timeout);
        std::thread::Builder::new()
            .name("databuild-lease".into())
            .spawn(move || loop {
                std::thread::sleep(timeout / 6);
                let Some(store) = store.upgrade() else {
                    return;
                };
                if state.holders.load(Ordering::SeqCst) > 0 {
                    // A failed renewal lets the lease run out; the next one may succeed.
                    let _ = renew(store.as_ref(), &state, timeout);
                }
            })
            .expect("a thread starts");
    }
}

/// One renewal: the lease is good for half the timeout from when it was asked for.
fn renew(store: &dyn EventStore, state: &State, timeout: Duration) -> Result<(), LogError> {
    let asked = boottime_ns();
    let generation = state.generation.load(Ordering::SeqCst);
    let answer = store.heartbeat(&this_owner());
    let _one = state.renewing.lock().unwrap_or_else(|e| e.into_inner());
    if generation != state.generation.load(Ordering::SeqCst) {
        // Asked before a rejoin: says nothing of the lease held now.
        return Ok(());
    }
    match answer {
        Ok(()) if state.lost.load(Ordering::SeqCst) => Err(LogError::LeaseLost {
            owner: this_owner(),
        }),
        Ok(()) => {
            let until = asked + (timeout / 2).as_nanos() as u64;
            state.good_until.fetch_max(until, Ordering::SeqCst);
            if store.shared() {
                crate::run::watchdog::fence_jobs_at(state.good_until.load(Ordering::SeqCst));
            }
            Ok(())
        }
        Err(e @ LogError::LeaseLost { .. }) => {
            state.lost.store(true, Ordering::SeqCst);
            state.good_until.store(0, Ordering::SeqCst);
            if store.shared() {
                crate::run::watchdog::fence_jobs_at(1);
            }
            Err(e)
        }
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A process revoked while it drove nothing learns it at its next build, and rejoins with a
    /// fresh lease instead of failing that build; one revoked while it holds builds loses them.
    #[test]
    fn a_revoked_process_rejoins_at_its_next_build() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn EventStore> =
            Arc::new(databuild_log::SqliteStore::open(&dir.path().join("events.db")).unwrap());
        let lease = Lease::new(store.clone(), Duration::from_secs(30));
        drop(lease.hold().unwrap());
        assert!(store.revoke_lease(&this_owner(), Duration::ZERO).unwrap());
        let held = lease.hold().expect("rejoined");
        assert!(!lease.lost());
        store.heartbeat(&this_owner()).unwrap();
        // Revoked while a build holds it: that build's lease is lost.
        assert!(store.revoke_lease(&this_owner(), Duration::ZERO).unwrap());
        let second = lease.hold();
        assert!(matches!(second, Err(LogError::LeaseLost { .. })));
        assert!(lease.lost());
        drop(held);
    }

    /// The renewing thread does not keep the log open: once its users are done, the store
    /// closes (and SQLite's WAL is left in order, `sqlite/checkpointer.rs` `CLOSE_TRUNCATE_BYTES`).
    #[test]
    fn the_renewer_lets_the_store_close() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn EventStore> =
            Arc::new(databuild_log::SqliteStore::open(&dir.path().join("events.db")).unwrap());
        let closed = Arc::downgrade(&store);
        let lease = Lease::new(store, Duration::from_secs(30));
        drop(lease.hold().unwrap());
        assert!(lease.renewer.get().is_some(), "the renewer started");
        drop(lease);
        assert!(closed.upgrade().is_none());
    }
}
