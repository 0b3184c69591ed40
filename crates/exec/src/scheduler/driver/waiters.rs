//! Waiters: a partition another build is making (delegated to it) is followed by a thread of its
//! own, until it is available, failed, or its builder is gone; the outcome comes back to the
//! loop as a message. Every waiter stops when the build ends.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread;
use std::time::Duration;

use databuild_log::{EventStore, Status};

use super::super::machine::{Wait, WaitOutcome};
use super::Message;
use crate::run::owner::owner_dead;

/// The threads following partitions other builds make.
#[derive(Default)]
pub(super) struct Waiters {
    /// Tells waiter threads to stop when the build ends before their partitions resolve.
    shutdown: Arc<AtomicBool>,
}

impl Waiters {
    /// Follows `wait` (number `w`) on a thread of its own, until it is available, failed, or its
    /// builder is gone (dead past `timeout`); then sends [`Message::Resolved`].
    pub(super) fn follow<'s, 'e>(
        &self,
        scope: &'s thread::Scope<'s, 'e>,
        store: &'e dyn EventStore,
        w: usize,
        wait: &Wait,
        timeout: Duration,
        tx: mpsc::Sender<Message>,
    ) {
        let (r, by) = (wait.partition_ref.clone(), wait.delegated_to.clone());
        let shutdown = self.shutdown.clone();
        scope.spawn(move || {
            let outcome = loop {
                if shutdown.load(Ordering::SeqCst) {
                    return;
                }
                if let Some(outcome) = wait_outcome(store, &r, &by, timeout) {
                    break outcome;
                }
                thread::sleep(Duration::from_millis(50));
            };
            let _ = tx.send(Message::Resolved { wait: w, outcome });
        });
    }

    /// Stops every waiter (each at its next look).
    pub(super) fn stop(&self) {
        self.shutdown.store(true, Ordering::SeqCst);
    }
}

/// Where a partition another build (`by`) is making stands: `None` while it is still being built
/// by a live process (or the log could not be read: nothing is known yet). One its builder gave
/// back unbuilt (the builder died and was closed, or was cancelled) is this build's to make.
fn wait_outcome(
    store: &dyn EventStore,
    r: &str,
    by: &str,
    timeout: Duration,
) -> Option<WaitOutcome> {
    match store.partition(r) {
        Ok(Some(p)) if p.status == Status::Building => {
            let owner = p
                .job_run_id
                .as_deref()
                .and_then(|id| store.job_run(id).ok().flatten())
                .and_then(|run| run.owner);
            // A read that failed is asked again on the next poll.
            let dead = owner_dead(store, owner.as_deref(), timeout).ok()?;
            dead.then_some(WaitOutcome::Abandoned)
        }
        Ok(Some(p)) if p.status == Status::Available => Some(WaitOutcome::Available),
        Ok(Some(p)) if p.build_request_id.as_deref() == Some(by) => {
            Some(WaitOutcome::Failed(format!(
                "the build it was delegated to ended it `{}`{}",
                p.status,
                p.message.map(|m| format!(": {m}")).unwrap_or_default()
            )))
        }
        // Given back as it was before that build claimed it.
        Ok(_) => Some(WaitOutcome::Abandoned),
        // A read that failed says nothing about the partition: look again on the next poll.
        Err(_) => None,
    }
}
