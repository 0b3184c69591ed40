//! Delivery of `RunEvent`s: one thread per process posts them in order, retried with backoff,
//! behind a bounded queue that never blocks whoever hands it an event (a full queue drops it
//! and counts). What could not be delivered goes, with why, to `undelivered.jsonl`, which the
//! next process that sends events tries again first.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::OpenLineageConfig;

/// Events waiting to be posted; past it, events are dropped (and counted), never waited for.
const QUEUE: usize = 10_000;
/// Tries per event while the receiver answers; once one event could not be delivered, later
/// ones get one try each until one goes through, so a receiver that is down costs no backoff.
const TRIES: u32 = 4;
/// The first wait between tries, doubled after each.
const BACKOFF: Duration = Duration::from_millis(200);
/// How long one post may take.
const POST_TIMEOUT: Duration = Duration::from_secs(5);
/// The file of events not delivered, in the sender's folder.
pub const UNDELIVERED: &str = "undelivered.jsonl";

enum Message {
    Event(String),
    /// Answer once every event before this one is delivered or recorded.
    Flush(SyncSender<()>),
}

/// What became of the events handed over, so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Delivery {
    pub delivered: u64,
    /// Recorded in `undelivered.jsonl` (or, if that could not be written, lost).
    pub undelivered: u64,
    /// Dropped because the queue was full.
    pub dropped: u64,
    /// Still queued when a flush's bound passed: lost with the process.
    pub pending: u64,
    pub last_error: Option<String>,
}

/// Shared between the sender thread and those handing it events.
#[derive(Default)]
struct Shared {
    delivery: Mutex<Delivery>,
    /// Set by a flush: past it, nothing more is tried, only recorded.
    deadline: Mutex<Option<Instant>>,
    /// Events of earlier processes taken to be sent again (delivered or recorded like the rest).
    resent: std::sync::atomic::AtomicU64,
}

impl Shared {
    fn note(&self, f: impl FnOnce(&mut Delivery)) {
        f(&mut self.delivery.lock().unwrap_or_else(|e| e.into_inner()));
    }

    fn past_deadline(&self) -> bool {
        let deadline = *self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        deadline.is_some_and(|d| Instant::now() >= d)
    }

    fn remaining(&self) -> Option<Duration> {
        let deadline = *self.deadline.lock().unwrap_or_else(|e| e.into_inner());
        deadline.map(|d| d.saturating_duration_since(Instant::now()))
    }
}

/// The handle of the sender thread.
pub struct Sender {
    tx: SyncSender<Message>,
    shared: Arc<Shared>,
    /// Events queued so far (those of earlier processes resent apart).
    queued: std::sync::atomic::AtomicU64,
}

impl Sender {
    /// Starts the thread, which first sends again what earlier processes recorded undelivered
    /// in `folder`.
    pub fn start(config: OpenLineageConfig, folder: PathBuf) -> Sender {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        let shared = Arc::new(Shared::default());
        let mut poster = Poster {
            config,
            shared: shared.clone(),
            folder,
            down: false,
        };
        let spawned = std::thread::Builder::new()
            .name("openlineage".into())
            .spawn(move || poster.serve(rx));
        if let Err(e) = spawned {
            shared.note(|d| d.last_error = Some(format!("cannot start its thread: {e}")));
        }
        Sender {
            tx,
            shared,
            queued: Default::default(),
        }
    }

    /// Queues one event's JSON, never waiting.
    pub fn send(&self, body: String) {
        match self.tx.try_send(Message::Event(body)) {
            Ok(()) => {
                self.queued
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                self.shared.note(|d| d.dropped += 1)
            }
        }
    }

    /// Waits at most `bound` for the queued events to be delivered or recorded, then says what
    /// became of them.
    pub fn flush(&self, bound: Duration) -> Delivery {
        let deadline = Instant::now() + bound;
        *self
            .shared
            .deadline
            .lock()
            .unwrap_or_else(|e| e.into_inner()) = Some(deadline);
        let (done, wait) = mpsc::sync_channel(1);
        if send_until(&self.tx, Message::Flush(done), deadline) {
            // A little past the deadline: the thread records what is left once it passes.
            let _ = wait.recv_timeout(bound + Duration::from_millis(500));
        }
        let mut delivery = self
            .shared
            .delivery
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        let queued = self.queued.load(std::sync::atomic::Ordering::Relaxed);
        let resent = self
            .shared
            .resent
            .load(std::sync::atomic::Ordering::Relaxed);
        delivery.pending =
            (queued + resent).saturating_sub(delivery.delivered + delivery.undelivered);
        delivery
    }
}

/// `send` with a deadline, which `SyncSender` lacks: tries until the queue has room.
fn send_until(tx: &SyncSender<Message>, mut m: Message, deadline: Instant) -> bool {
    loop {
        match tx.try_send(m) {
            Ok(()) => return true,
            Err(TrySendError::Full(back)) if Instant::now() < deadline => {
                m = back;
                std::thread::sleep(Duration::from_millis(10));
            }
            Err(_) => return false,
        }
    }
}

/// The sender thread's side.
struct Poster {
    config: OpenLineageConfig,
    shared: Arc<Shared>,
    folder: PathBuf,
    /// The last event could not be delivered: try the next ones once each.
    down: bool,
}

impl Poster {
    fn serve(&mut self, rx: Receiver<Message>) {
        self.resend_recorded();
        // Ends when every handle is gone: nothing more can come.
        while let Ok(message) = rx.recv() {
            match message {
                Message::Event(body) => self.deliver(&body),
                Message::Flush(done) => {
                    let _ = done.send(());
                }
            }
        }
    }

    /// Events earlier processes could not deliver, sent before this one's (those failing again
    /// are recorded again). The file is first renamed to one naming this process, so two
    /// processes never send the same lines; one a dead process had taken is taken over. It is
    /// removed only once every line was sent or recorded again: a process killed while resending
    /// leaves it to the next (which may send some events twice, never none).
    fn resend_recorded(&mut self) {
        let mut files = orphaned(&self.folder);
        let taken = self
            .folder
            .join(retry_name(&crate::run::owner::this_owner()));
        if std::fs::rename(self.folder.join(UNDELIVERED), &taken).is_ok() {
            files.push(taken);
        }
        for file in files {
            let text = std::fs::read_to_string(&file).unwrap_or_default();
            for line in text.lines() {
                let event = serde_json::from_str::<serde_json::Value>(line)
                    .ok()
                    .and_then(|v| v.get("event").map(|e| e.to_string()));
                if let Some(body) = event {
                    self.shared
                        .resent
                        .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    self.deliver(&body);
                }
            }
            let _ = std::fs::remove_file(&file);
        }
    }

    fn deliver(&mut self, body: &str) {
        let tries = if self.down { 1 } else { TRIES };
        let mut wait = BACKOFF;
        let mut error = String::from("not tried: the flush's bound had passed");
        // A receiver that refused this event (4xx) is up: only one that did not answer is down.
        let mut unanswered = true;
        for attempt in 1..=tries {
            if self.shared.past_deadline() {
                break;
            }
            match self.post(body) {
                Ok(()) => {
                    self.down = false;
                    self.shared.note(|d| d.delivered += 1);
                    return;
                }
                Err(Failure { message, retry }) => {
                    error = message;
                    unanswered = retry;
                    if !retry || attempt == tries {
                        break;
                    }
                }
            }
            let pause = self.shared.remaining().map_or(wait, |r| r.min(wait));
            std::thread::sleep(pause);
            wait *= 2;
        }
        self.down = unanswered;
        self.record(body, &error);
    }

    fn post(&self, body: &str) -> Result<(), Failure> {
        let timeout = self
            .shared
            .remaining()
            .map_or(POST_TIMEOUT, |r| r.min(POST_TIMEOUT));
        let auth =
            (self.config.api_key.as_ref()).map(|key| ("Authorization", format!("Bearer {key}")));
        post_json(&self.config.endpoint, auth.as_slice(), body, timeout)
    }

    /// Appends the event, with why it was not delivered, to `undelivered.jsonl`.
    fn record(&self, body: &str, error: &str) {
        let line = format!(
            "{{\"recorded_at\":{},\"url\":{},\"error\":{},\"event\":{body}}}\n",
            serde_json::Value::from(crate::answers::rfc3339(databuild_log::event::now_ns())),
            serde_json::Value::from(self.config.endpoint.as_str()),
            serde_json::Value::from(error),
        );
        let written = append_line(&self.folder, &line);
        self.shared.note(|d| {
            d.undelivered += 1;
            d.last_error = Some(match written {
                Ok(()) => error.to_string(),
                Err(e) => format!("{error} (and it could not be recorded: {e})"),
            });
        });
    }
}

pub struct Failure {
    pub message: String,
    /// Another try may do better: the endpoint did not answer, or answered 429 or 5xx.
    pub retry: bool,
}

/// POSTs the JSON `body` to `url` with `headers`, within `timeout`: OpenLineage's events and
/// alerts' deliveries. Only a receiver that does not answer, is busy (429) or fails (5xx) may
/// take it later; any other answer refused it.
pub fn post_json(
    url: &str,
    headers: &[(&str, String)],
    body: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .build()
        .into();
    let mut request = agent.post(url).header("Content-Type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let response = request.send(body).map_err(|e| Failure {
        message: format!("{url} does not answer: {e}"),
        retry: true,
    })?;
    match response.status().as_u16() {
        200..=299 => Ok(()),
        code => Err(Failure {
            message: format!("{url} answered HTTP {code}"),
            retry: code == 429 || code >= 500,
        }),
    }
}

/// The name of the file `owner` (`host/pid/start-time`) resends undelivered events from.
fn retry_name(owner: &str) -> String {
    format!("{UNDELIVERED}.{}.retry", owner.replace('/', "~"))
}

/// Files of undelivered events taken by processes of this machine that are gone.
fn orphaned(folder: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(folder) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            let owner = name
                .strip_prefix(&format!("{UNDELIVERED}."))
                .and_then(|n| n.strip_suffix(".retry"))
                .map(|o| o.replace('~', "/"));
            owner.is_some_and(|o| crate::run::owner::owner_alive(Some(&o)) == Some(false))
        })
        .map(|e| e.path())
        .collect()
}

/// One whole line appended (`O_APPEND`: lines of processes sharing the folder never interleave).
fn append_line(folder: &Path, line: &str) -> std::io::Result<()> {
    std::fs::create_dir_all(folder)?;
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(folder.join(UNDELIVERED))?
        .write_all(line.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run::owner::{hostname, this_owner};
    use std::io::{BufRead, BufReader, Read};

    /// A receiver answering each request with the next of `codes`; returns its URL and the
    /// number of requests it got.
    fn answering(codes: Vec<u16>) -> (String, Arc<Mutex<usize>>) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/api/v1/lineage", listener.local_addr().unwrap());
        let (got, count) = (
            Arc::new(Mutex::new(0)),
            Arc::new(Mutex::new(codes.into_iter())),
        );
        let seen = got.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                loop {
                    let (mut line, mut length) = (String::new(), 0);
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        break;
                    }
                    while reader.read_line(&mut line).unwrap() > 2 {
                        let header = line.lines().last().unwrap().to_ascii_lowercase();
                        if let Some(n) = header.strip_prefix("content-length:") {
                            length = n.trim().parse().unwrap();
                        }
                    }
                    reader.read_exact(&mut vec![0; length]).unwrap();
                    *seen.lock().unwrap() += 1;
                    let code = count.lock().unwrap().next().unwrap_or(200);
                    let answer = format!("HTTP/1.1 {code} X\r\ncontent-length: 0\r\n\r\n");
                    if stream.write_all(answer.as_bytes()).is_err() {
                        break;
                    }
                }
            }
        });
        (url, got)
    }

    #[test]
    fn a_failing_receiver_is_tried_again_and_a_refusal_is_kept_at_once() {
        let (endpoint, requests) = answering(vec![503, 503, 200, 400]);
        let dir = tempfile::tempdir().unwrap();
        let config = OpenLineageConfig {
            endpoint,
            namespace: "ns".into(),
            api_key: None,
        };
        let sender = Sender::start(config, dir.path().to_path_buf());
        sender.send(r#"{"n":1}"#.into());
        sender.send(r#"{"n":2}"#.into());
        let delivery = sender.flush(Duration::from_secs(5));
        assert_eq!((delivery.delivered, delivery.undelivered), (1, 1));
        assert_eq!(
            *requests.lock().unwrap(),
            4,
            "503, 503, 200; then 400, not tried again"
        );
        let kept = std::fs::read_to_string(dir.path().join(UNDELIVERED)).unwrap();
        let kept: serde_json::Value = serde_json::from_str(kept.trim()).unwrap();
        assert_eq!(kept["event"]["n"], 2);
        assert!(kept["error"]
            .as_str()
            .unwrap()
            .ends_with("answered HTTP 400"));
    }

    #[test]
    fn what_a_dead_process_had_taken_is_taken_over_and_a_live_one_s_is_not() {
        let dir = tempfile::tempdir().unwrap();
        let dead = format!("{}/4194304/1", hostname().unwrap());
        let elsewhere = "another-host/12/34";
        for owner in [dead.as_str(), &this_owner(), elsewhere] {
            std::fs::write(dir.path().join(retry_name(owner)), "").unwrap();
        }
        let found = orphaned(dir.path());
        assert_eq!(found, [dir.path().join(retry_name(&dead))]);
    }
}
