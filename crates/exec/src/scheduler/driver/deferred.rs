//! Deferred completions: a run's successful end is not written at once but rides along with the
//! next write (usually the next claim: one transaction instead of two), or goes in within
//! [`MAX_DEFER`]. Its outputs are moved into place only once the log holds it. A run's start
//! (`running`, once its process started) waits the same way.

use std::time::{Duration, Instant};

use databuild_log::Event;

/// How long a completion may wait for a claim to carry it into the log.
const MAX_DEFER: Duration = Duration::from_millis(100);

/// Completions not yet written, and the nodes whose outputs wait for them.
#[derive(Default)]
pub(super) struct Deferred {
    /// Completions not yet written: they go into the log with the next claim (one transaction
    /// instead of two), or when the loop waits with nothing staged, or after `MAX_DEFER`.
    pending: Vec<Event>,
    /// When the oldest of `pending` was deferred.
    deferred_at: Option<Instant>,
    /// Nodes whose completions are in `pending`: their outputs are moved into place from their
    /// staging folders once the log has them.
    publishing: Vec<usize>,
}

impl Deferred {
    /// Holds `node`'s completion back to ride along with the next write; its outputs are
    /// published once that write is in.
    pub(super) fn defer(&mut self, node: usize, events: Vec<Event>) {
        self.publishing.push(node);
        self.deferred_at.get_or_insert_with(Instant::now);
        self.pending.extend(events);
    }

    /// Holds a run's start (`running`) back to ride along with the next write.
    pub(super) fn defer_start(&mut self, event: Event) {
        self.deferred_at.get_or_insert_with(Instant::now);
        self.pending.push(event);
    }

    /// The deferred completions, and the nodes to publish once they are in.
    pub(super) fn take(&mut self) -> (Vec<Event>, Vec<usize>) {
        self.deferred_at = None;
        (
            std::mem::take(&mut self.pending),
            std::mem::take(&mut self.publishing),
        )
    }

    /// Drops the deferred completions unwritten (the build was taken over), and returns the nodes
    /// whose staged outputs are then never to be published.
    pub(super) fn abandon(&mut self) -> Vec<usize> {
        self.pending.clear();
        std::mem::take(&mut self.publishing)
    }

    /// How long the deferred completions may still wait; `None` if there are none.
    pub(super) fn time_left(&self) -> Option<Duration> {
        let at = self.deferred_at?;
        Some(MAX_DEFER.saturating_sub(at.elapsed()))
    }
}
