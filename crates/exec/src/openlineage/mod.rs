//! OpenLineage out (contract, section 6, "OpenLineage out"): every run this process drives is posted to an
//! OpenLineage receiver (Marquez, DataHub, OpenMetadata) as `RunEvent`s, so data teams see
//! DataBuild's lineage beside Airflow's, Dagster's and dbt's. Events are translated where the
//! driver appends them (`event.rs`, pure) and posted by a thread of their own (`send.rs`): a
//! receiver that is slow, down or refusing never blocks or fails a build.

pub mod event;
pub mod send;

use std::path::PathBuf;
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use databuild_core::Graph;
use databuild_log::{Event, Kind};

pub use event::{EventType, RunEvent, Translator};
pub use send::Delivery;

/// How long a process waits at its end for its events to be delivered (or recorded undelivered).
pub const FLUSH_BOUND: Duration = Duration::from_secs(5);

/// Where events go and as what, as the binary read it (`OPENLINEAGE_URL` and the rest, or the
/// graph's `[openlineage]`).
#[derive(Clone, PartialEq, Eq)]
pub struct OpenLineageConfig {
    /// The full URL events are posted to (`<url>/api/v1/lineage`).
    pub endpoint: String,
    /// The namespace of jobs and datasets.
    pub namespace: String,
    /// Sent as `Authorization: Bearer <key>`.
    pub api_key: Option<String>,
}

/// Redacts the key: configurations get logged.
impl std::fmt::Debug for OpenLineageConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpenLineageConfig")
            .field("endpoint", &self.endpoint)
            .field("namespace", &self.namespace)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .finish()
    }
}

/// An engine's OpenLineage output. Its thread starts with the first run event, so commands
/// that run nothing never touch the receiver; dropping it flushes, bounded by [`FLUSH_BOUND`].
pub struct LineageOut {
    config: OpenLineageConfig,
    /// Where undelivered events are recorded (`.databuild/openlineage/`).
    folder: PathBuf,
    translator: Mutex<Translator>,
    sender: OnceLock<send::Sender>,
}

impl LineageOut {
    pub fn new(config: OpenLineageConfig, folder: PathBuf) -> LineageOut {
        LineageOut {
            config,
            folder,
            translator: Mutex::default(),
            sender: OnceLock::new(),
        }
    }

    /// Hands the `RunEvent`s of appended log events to the sender; never waits on it.
    pub fn observe(&self, graph: &Graph, events: &[Event]) {
        // Most batches of a big build are partitions' and plans': nothing to lock for.
        if !events.iter().any(|e| e.kind == Kind::JobRun) {
            return;
        }
        let run_events = self
            .translator
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .feed(graph, &self.config.namespace, events);
        if run_events.is_empty() {
            return;
        }
        let sender = self
            .sender
            .get_or_init(|| send::Sender::start(self.config.clone(), self.folder.clone()));
        for e in run_events {
            match serde_json::to_string(&e) {
                Ok(body) => sender.send(body),
                Err(e) => eprintln!("databuild: openlineage: cannot write a run event: {e}"),
            }
        }
    }

    /// Waits at most `bound` for what was handed over, and says what became of it; `None` if
    /// nothing was.
    pub fn flush(&self, bound: Duration) -> Option<Delivery> {
        self.sender.get().map(|s| s.flush(bound))
    }
}

impl Drop for LineageOut {
    fn drop(&mut self) {
        let Some(delivery) = self.flush(FLUSH_BOUND) else {
            return;
        };
        let lost = delivery.undelivered + delivery.dropped + delivery.pending;
        if lost > 0 {
            let path = self.folder.join(send::UNDELIVERED);
            eprintln!(
                "databuild: openlineage: {lost} run event(s) not delivered to {} ({}); {} kept in {} \
                 and sent again by the next build{}",
                self.config.endpoint,
                delivery.last_error.as_deref().unwrap_or("no answer"),
                delivery.undelivered,
                path.display(),
                lost_ones(&delivery),
            );
        }
    }
}

/// What was lost beyond what was kept: dropped from a full queue, or still queued at the end.
fn lost_ones(d: &Delivery) -> String {
    let mut text = String::new();
    if d.dropped > 0 {
        text += &format!(", {} dropped (the queue was full)", d.dropped);
    }
    if d.pending > 0 {
        text += &format!(", {} still queued when the wait ended", d.pending);
    }
    text
}
