//! The planner's view of the log: which partitions are live, failed, tainted or being built.

use databuild_core::{KnownState, StateView};

use crate::event::Status;
use crate::store::EventStore;

/// Answers [`StateView`] from a store. Lookups that fail count as missing, so a planning error
/// never hides behind a stale answer: the build re-checks claims when it writes them.
pub struct LogStates<'s> {
    pub store: &'s dyn EventStore,
}

impl StateView for LogStates<'_> {
    fn state(&self, r: &str) -> KnownState {
        match self.store.partition(r) {
            Ok(Some(row)) => match row.status {
                Status::Available => KnownState::Live,
                Status::Failed => KnownState::Failed,
                Status::Tainted => KnownState::Tainted,
                Status::Building => KnownState::Building {
                    build_request_id: row.build_request_id.unwrap_or_default(),
                },
                _ => KnownState::Missing,
            },
            _ => KnownState::Missing,
        }
    }
}
