//! Alerts (`[[alert]]`): the service follows its log and tells someone of the events the graph's
//! alerts are `on` (a want at risk or past its deadline, a partition late, a build failed).
//!
//! A follower thread matches each new event against the alerts and hands each delivery to a
//! sender thread through a bounded queue: a full queue stops the follower where it is (it
//! tries again next tick) and never blocks it, as OpenLineage's sender never blocks a build.
//! The sender runs a command (the JSON on stdin, a timeout, output capped) or POSTs to a URL
//! (signed as webhook sources verify: `X-DataBuild-Signature: sha256=<hex HMAC-SHA256>`),
//! retried with backoff when the endpoint does not answer or answers 429 or 5xx, and records
//! each delivery as an `alert` event: `completed` or `failed`, with its tries, why, and the
//! `idx` of the event it was sent for (`fired_by`).
//!
//! Those records are the follower's cursor: a starting service reads the newest of them and
//! resumes on the newest event they name, sending only the (alert, event) pairs not recorded
//! yet (at least once: a stop between delivering and recording sends that one again), and
//! catches up on what fired while no service followed the log, within bounds.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use databuild_core::alert::{Alert, AlertOn, AlertTarget};
use databuild_exec::answers::rfc3339;
use databuild_exec::Engine;
use databuild_log::{Event, EventFilter, Kind, Status};
use serde::Serialize;

/// Deliveries waiting; past it, the follower waits for the sender, never blocking.
const QUEUE: usize = 1_000;
/// Tries of a delivery to an endpoint that does not answer or answers 429 or 5xx.
const TRIES: u32 = 3;
/// The first wait between tries, doubled after each.
const BACKOFF: Duration = Duration::from_millis(200);
/// How long a post or a command may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How often the log is read for new events.
const TICK: Duration = Duration::from_millis(200);
/// Events read at once.
const PAGE: usize = 10_000;
/// The newest `alert` events a starting service reads to know where to resume.
const RESUME: usize = 1_000;
/// A starting service catches up on at most the log's last this many events...
const CATCH_UP_EVENTS: i64 = 100_000;
/// ...and of those alerts only the ones recorded in the last 24 h: a service down for a month
/// does not page anyone for a month of stale events.
const CATCH_UP_AGE: Duration = Duration::from_secs(24 * 3600);

/// What an alert's command reads and its URL receives.
#[derive(Debug, Clone, Serialize)]
pub struct AlertBody {
    /// What it is sent for: `sla_at_risk`, `sla_missed`, `late`, `build_failed`.
    pub event: &'static str,
    pub alert: String,
    pub want_id: Option<String>,
    pub partition_ref: Option<String>,
    pub build_request_id: Option<String>,
    pub deadline: Option<String>,
    pub expected_by: Option<String>,
    pub message: Option<String>,
    pub dashboard_url: String,
}

/// One delivery to make: `alert` for the event at `fired_by`.
struct Delivery {
    alert: Alert,
    fired_by: i64,
    body: String,
}

/// Starts following the log from where the last service's deliveries left it, if the graph
/// has alerts. `base_url` is the service's own, for the dashboard links.
pub fn spawn(engine: Arc<Engine>, base_url: String, stop: Arc<AtomicBool>) {
    if engine.graph.alerts.is_empty() {
        return;
    }
    let (tx, rx) = mpsc::sync_channel(QUEUE);
    let sender = engine.clone();
    let spawned = std::thread::Builder::new()
        .name("alerts".into())
        .spawn(move || send_all(&sender, rx))
        .and_then(|_| {
            std::thread::Builder::new()
                .name("alert-follower".into())
                .spawn(move || follow(&engine, &base_url, &tx, &stop))
        });
    if let Err(e) = spawned {
        eprintln!("alerts: cannot start their threads: {e}");
    }
}

/// What `e` is, for alerts: which `on` it fires.
fn fired(e: &Event) -> Option<AlertOn> {
    match (e.kind, e.status) {
        (Kind::Want, Status::SlaAtRisk) => Some(AlertOn::SlaAtRisk),
        (Kind::Want, Status::SlaMissed) => Some(AlertOn::SlaMissed),
        (Kind::BuildRequest, Status::Failed) => Some(AlertOn::BuildFailed),
        (Kind::Arrival, Status::Late) => Some(AlertOn::Late),
        _ => None,
    }
}

/// Where the follower is in the log.
#[derive(Debug, PartialEq)]
struct Cursor {
    /// Every delivery of the events up to this `idx` is handed to the sender or recorded.
    after: i64,
    /// Of the events after `after`: the (alert, event `idx`) pairs handed over or recorded.
    handed: HashSet<(String, i64)>,
}

/// Where a starting follower resumes, and the events before it that it will not look at.
#[derive(Debug, PartialEq)]
struct Resume {
    cursor: Cursor,
    /// Events after the newest one alerted that are too many to catch up on: the first `idx`
    /// looked at is past them.
    cut: Option<i64>,
}

/// What the follower did with one event.
#[derive(Debug, PartialEq)]
enum Offered {
    /// Each of its deliveries is handed over (or it fires none): the cursor is past it.
    Passed,
    /// It fired longer ago than the catch-up goes back: passed without a delivery.
    TooOld,
    /// The queue is full: the cursor stays before it, with those of its deliveries handed.
    Stalled,
    /// The sender is gone (it panicked): nothing more can be sent.
    SenderGone,
}

/// What became of a delivery handed to the sender's queue.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Handed {
    Queued,
    Full,
    SenderGone,
}

impl Cursor {
    /// Where a starting follower resumes, from the newest `alert` events (`recorded`) and the
    /// log's last `idx`: on the newest event they name (another of its alerts may not have
    /// been sent), but never further back than the log's last [`CATCH_UP_EVENTS`].
    fn resume(recorded: &[Event], last_idx: i64) -> Resume {
        let pairs: Vec<(String, i64)> = recorded
            .iter()
            .filter_map(|e| Some((e.data.alert.clone()?, e.data.fired_by?)))
            .collect();
        // A delivery recorded before `fired_by` (format 10) names no event, but the one it was
        // sent for came before it: resuming after it sends nothing an older service sent.
        let before_fired_by = recorded.iter().filter(|e| e.data.fired_by.is_none());
        let resumed = (pairs.iter().map(|(_, idx)| idx - 1))
            .chain(before_fired_by.map(|e| e.idx))
            .max()
            .unwrap_or(0);
        let floor = (last_idx - CATCH_UP_EVENTS).max(0);
        let after = resumed.max(floor);
        Resume {
            cut: (floor > resumed).then_some(after + 1),
            cursor: Cursor {
                after,
                handed: pairs.into_iter().filter(|(_, idx)| *idx > after).collect(),
            },
        }
    }

    /// Hands each delivery of `e` not handed yet to `hand`, unless `e` fired before
    /// `oldest_ns`; moves past `e` once all are queued.
    fn offer(
        &mut self,
        e: &Event,
        alerts: &[Alert],
        oldest_ns: i64,
        mut hand: impl FnMut(&Alert, AlertOn) -> Handed,
    ) -> Offered {
        let Some(on) = fired(e) else {
            self.pass(e.idx);
            return Offered::Passed;
        };
        if e.timestamp < oldest_ns {
            self.pass(e.idx);
            return Offered::TooOld;
        }
        for alert in alerts.iter().filter(|a| a.on.contains(&on)) {
            let pair = (alert.name.clone(), e.idx);
            if self.handed.contains(&pair) {
                continue;
            }
            match hand(alert, on) {
                Handed::Queued => self.handed.insert(pair),
                Handed::Full => return Offered::Stalled,
                Handed::SenderGone => return Offered::SenderGone,
            };
        }
        self.pass(e.idx);
        Offered::Passed
    }

    fn pass(&mut self, idx: i64) {
        self.after = self.after.max(idx);
        let after = self.after;
        self.handed.retain(|(_, i)| *i > after);
    }
}

/// Reads where to resume, trying again each tick until the log answers.
fn resume(engine: &Engine, stop: &AtomicBool) -> Option<Cursor> {
    while !stop.load(Ordering::Relaxed) {
        let read = engine
            .store
            .events(&EventFilter {
                kind: Some(Kind::Alert),
                newest_first: true,
                limit: Some(RESUME),
                ..Default::default()
            })
            .and_then(|recorded| Ok(Cursor::resume(&recorded, engine.store.last_idx()?)));
        match read {
            Ok(Resume { cursor, cut }) => {
                if let Some(first) = cut {
                    eprintln!(
                        "alerts: catching up from event {first}, the log's last {CATCH_UP_EVENTS} events; what fired before it is not alerted"
                    );
                }
                return Some(cursor);
            }
            Err(e) => eprintln!("alerts: cannot read where the last deliveries left off: {e}"),
        }
        std::thread::sleep(TICK);
    }
    None
}

fn follow(engine: &Engine, base_url: &str, tx: &SyncSender<Delivery>, stop: &AtomicBool) {
    let Some(mut cursor) = resume(engine, stop) else {
        return;
    };
    let mut stalled = false;
    while !stop.load(Ordering::Relaxed) {
        let read = engine.store.events(&EventFilter {
            since: Some(cursor.after),
            limit: Some(PAGE),
            ..Default::default()
        });
        let events = match read {
            Ok(events) => events,
            Err(e) => {
                eprintln!("alerts: cannot read the log: {e}");
                std::thread::sleep(TICK);
                continue;
            }
        };
        let offered = offer_all(engine, base_url, tx, &mut cursor, &events);
        if offered == Offered::SenderGone {
            eprintln!(
                "alerts: the sender stopped; no more alerts are sent until the service restarts"
            );
            return;
        }
        if offered == Offered::Stalled && !stalled {
            eprintln!(
                "alerts: {QUEUE} deliveries waiting; the rest wait in the log until they are sent"
            );
        }
        stalled = offered == Offered::Stalled;
        // A full page may have more behind it (a catch-up): read on at once.
        if stalled || events.len() < PAGE {
            std::thread::sleep(TICK);
        }
    }
}

/// Offers `events` in order, up to the first that stalls, and says how many were too old to
/// alert. Returns how the last offered went.
fn offer_all(
    engine: &Engine,
    base_url: &str,
    tx: &SyncSender<Delivery>,
    cursor: &mut Cursor,
    events: &[Event],
) -> Offered {
    let oldest_ns = databuild_log::event::now_ns() - CATCH_UP_AGE.as_nanos() as i64;
    let mut too_old = 0;
    let mut last = Offered::Passed;
    for e in events {
        last = cursor.offer(e, &engine.graph.alerts, oldest_ns, |alert, on| {
            let delivery = Delivery {
                alert: alert.clone(),
                fired_by: e.idx,
                body: serde_json::to_string(&body(alert, on, e, base_url))
                    .expect("a body serializes"),
            };
            match tx.try_send(delivery) {
                Ok(()) => Handed::Queued,
                Err(TrySendError::Full(_)) => Handed::Full,
                Err(TrySendError::Disconnected(_)) => Handed::SenderGone,
            }
        });
        match last {
            Offered::Stalled | Offered::SenderGone => break,
            Offered::TooOld => too_old += 1,
            Offered::Passed => {}
        }
    }
    if too_old > 0 {
        eprintln!(
            "alerts: {too_old} events fired more than {} h ago, while no service followed the log; they are not alerted",
            CATCH_UP_AGE.as_secs() / 3600
        );
    }
    last
}

fn body(alert: &Alert, on: AlertOn, e: &Event, base_url: &str) -> AlertBody {
    let dashboard_url = match (&e.data.want_id, &e.build_request_id) {
        (Some(_), _) => format!("{base_url}/wants"),
        (None, Some(br)) => format!("{base_url}/builds/{br}"),
        (None, None) => base_url.to_string(),
    };
    AlertBody {
        event: on.name(),
        alert: alert.name.clone(),
        want_id: e.data.want_id.clone(),
        partition_ref: e.partition_ref.clone(),
        build_request_id: e.build_request_id.clone(),
        deadline: e.data.deadline.map(rfc3339),
        expected_by: e.data.expected_by.map(rfc3339),
        message: e.message.clone(),
        dashboard_url,
    }
}

fn send_all(engine: &Engine, rx: Receiver<Delivery>) {
    while let Ok(d) = rx.recv() {
        let (status, attempts, message) = match deliver(&d) {
            Ok(attempts) => (Status::Completed, attempts, "delivered".to_string()),
            Err((attempts, why)) => (Status::Failed, attempts, why),
        };
        let e = Event::alert(&d.alert.name, d.fired_by, status, attempts, message);
        if let Err(e) = engine.store.append(vec![e]) {
            eprintln!(
                "alerts: cannot record the delivery of `{}`: {e}",
                d.alert.name
            );
        }
    }
}

/// Why one try failed, and whether another may do better.
struct Failure {
    why: String,
    retry: bool,
}

/// Delivers `d`: the tries it took, or those and why it failed.
fn deliver(d: &Delivery) -> Result<u32, (u32, String)> {
    let mut wait = BACKOFF;
    let mut attempt = 1;
    loop {
        let tried = match &d.alert.target {
            AlertTarget::Command(argv) => run(argv, &d.body),
            AlertTarget::Url { url, secret_env } => post(url, secret_env.as_deref(), &d.body),
        };
        match tried {
            Ok(()) => return Ok(attempt),
            Err(f) if !f.retry || attempt == TRIES => return Err((attempt, f.why)),
            Err(_) => {
                std::thread::sleep(wait);
                wait *= 2;
                attempt += 1;
            }
        }
    }
}

/// Runs the alert's command with the body on stdin; it is not tried again.
fn run(argv: &[String], body: &str) -> Result<(), Failure> {
    let mut cmd = std::process::Command::new(&argv[0]);
    cmd.args(&argv[1..]);
    let shown = argv.join(" ");
    let fail = |why: String| Failure { why, retry: false };
    let done = databuild_exec::run::process::run_fed(cmd, Some(body.as_bytes().to_vec()), TIMEOUT)
        .map_err(|e| fail(e.named(&shown).to_string()))?;
    if done.status.success() {
        return Ok(());
    }
    Err(fail(format!(
        "`{shown}` ended with {}: {}",
        databuild_exec::run::process::describe_status(&done.status),
        databuild_exec::run::process::tail_lines(&done.stderr, 5)
    )))
}

/// POSTs the body, signed under the secret `secret_env` names (if any).
fn post(url: &str, secret_env: Option<&str>, body: &str) -> Result<(), Failure> {
    let mut headers = Vec::new();
    if let Some(name) = secret_env {
        let secret = std::env::var(name).map_err(|_| Failure {
            why: format!("`secret_env` names `{name}`, which is not set: set it to the endpoint's signing secret"),
            retry: false,
        })?;
        let signature = crate::signature::sign(&secret, body.as_bytes());
        headers.push(("X-DataBuild-Signature", signature));
    }
    databuild_exec::openlineage::send::post_json(url, &headers, body, TIMEOUT).map_err(|f| {
        Failure {
            why: f.message,
            retry: f.retry,
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn alert(name: &str, on: &[AlertOn]) -> Alert {
        Alert {
            name: name.to_string(),
            on: on.to_vec(),
            target: AlertTarget::Command(vec!["true".into()]),
        }
    }

    /// The `alert` event of `name`'s delivery for the event at `fired_by`.
    fn recorded(name: &str, fired_by: i64) -> Event {
        Event::alert(name, fired_by, Status::Completed, 1, "delivered".into())
    }

    fn failed_build(idx: i64) -> Event {
        let mut e = Event::build_request("b", Status::Failed);
        e.idx = idx;
        e
    }

    fn pairs(of: &[(&str, i64)]) -> HashSet<(String, i64)> {
        of.iter().map(|(a, i)| (a.to_string(), *i)).collect()
    }

    #[test]
    fn a_start_resumes_on_the_newest_event_alerted_knowing_which_of_its_alerts_were_sent() {
        // Newest first, as read; an event from before `fired_by` existed names nothing.
        let mut legacy = recorded("pager", 0);
        legacy.data.fired_by = None;
        let newest = [
            recorded("hook", 7),
            recorded("pager", 7),
            recorded("pager", 5),
            legacy,
        ];
        let resumed = Cursor::resume(&newest, 20);
        assert_eq!(
            resumed,
            Resume {
                cursor: Cursor {
                    after: 6,
                    handed: pairs(&[("hook", 7), ("pager", 7)]),
                },
                cut: None,
            }
        );
    }

    #[test]
    fn a_log_alerted_before_fired_by_resumes_after_its_newest_delivery() {
        let mut legacy = recorded("pager", 0);
        legacy.data.fired_by = None;
        legacy.idx = 12;
        let resumed = Cursor::resume(&[legacy], 20);
        assert_eq!((resumed.cursor.after, resumed.cut), (12, None));
        assert!(resumed.cursor.handed.is_empty());
    }

    #[test]
    fn a_start_catches_up_on_the_log_s_last_events_only_and_says_where_it_cut() {
        assert_eq!(
            Cursor::resume(&[], 500).cursor.after,
            0,
            "a small log: all of it"
        );
        let big = 10 * CATCH_UP_EVENTS;
        let first = Cursor::resume(&[], big);
        assert_eq!(first.cursor.after, big - CATCH_UP_EVENTS);
        assert_eq!(first.cut, Some(big - CATCH_UP_EVENTS + 1));
        let long_down = Cursor::resume(&[recorded("pager", 3)], big);
        assert_eq!(long_down.cursor.after, big - CATCH_UP_EVENTS);
        assert!(long_down.cursor.handed.is_empty());
        let recent = Cursor::resume(&[recorded("pager", big - 3)], big);
        assert_eq!((recent.cursor.after, recent.cut), (big - 4, None));
    }

    #[test]
    fn a_full_queue_keeps_the_cursor_and_the_next_tick_sends_only_what_was_not_handed() {
        let alerts = [
            alert("pager", &[AlertOn::BuildFailed]),
            alert("hook", &[AlertOn::BuildFailed, AlertOn::Late]),
        ];
        let mut cursor = Cursor::resume(&[], 0).cursor;
        let mut sent = Vec::new();
        // Room for one: `pager` goes, `hook` waits, the cursor stays before the event.
        let offered = cursor.offer(&failed_build(4), &alerts, 0, |a, _| {
            sent.push(a.name.clone());
            if sent.len() < 2 {
                Handed::Queued
            } else {
                Handed::Full
            }
        });
        assert_eq!(offered, Offered::Stalled);
        assert_eq!(cursor.after, 0);
        let offered = cursor.offer(&failed_build(4), &alerts, 0, |a, on| {
            assert_eq!(on, AlertOn::BuildFailed);
            sent.push(a.name.clone());
            Handed::Queued
        });
        assert_eq!(offered, Offered::Passed);
        assert_eq!(
            sent,
            ["pager", "hook", "hook"],
            "hook's first try found the queue full"
        );
        assert_eq!(cursor.after, 4);
        assert!(
            cursor.handed.is_empty(),
            "pairs behind the cursor are forgotten"
        );
        let gone = cursor.offer(&failed_build(5), &alerts, 0, |_, _| Handed::SenderGone);
        assert_eq!((gone, cursor.after), (Offered::SenderGone, 4));
    }

    #[test]
    fn an_event_recorded_already_or_fired_too_long_ago_is_passed_without_a_delivery() {
        let alerts = [alert("pager", &[AlertOn::BuildFailed])];
        let never = |_: &Alert, _| -> Handed { panic!("nothing is sent") };
        let mut cursor = Cursor::resume(&[recorded("pager", 4)], 10).cursor;
        assert_eq!(
            cursor.offer(&failed_build(4), &alerts, 0, never),
            Offered::Passed
        );
        let old = failed_build(5);
        let cutoff = old.timestamp + 1;
        assert_eq!(cursor.offer(&old, &alerts, cutoff, never), Offered::TooOld);
        let mut running = Event::build_request("b", Status::Running);
        running.idx = 6;
        assert_eq!(cursor.offer(&running, &alerts, 0, never), Offered::Passed);
        assert_eq!(cursor.after, 6);
    }
}
