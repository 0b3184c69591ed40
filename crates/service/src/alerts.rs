//! Alerts (`[[alert]]`): the service follows its log and tells someone of the events the graph's
//! alerts are `on` (a want at risk or past its deadline, a partition late, a build failed).
//!
//! A follower thread matches each new event against the alerts and hands each delivery to a
//! sender thread through a bounded queue: a full queue drops the delivery (said on stderr) and
//! never blocks the log's follower, as OpenLineage's sender never blocks a build. The sender
//! runs a command (the JSON on stdin, a timeout, output capped) or POSTs to a URL (signed as
//! webhook sources verify: `X-DataBuild-Signature: sha256=<hex HMAC-SHA256>`), retried with
//! backoff when the endpoint does not answer or answers 429 or 5xx, and records each delivery
//! as an `alert` event: `completed` or `failed`, with its tries and why.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

use databuild_core::alert::{Alert, AlertOn, AlertTarget};
use databuild_exec::answers::rfc3339;
use databuild_exec::Engine;
use databuild_log::{Event, EventFilter, Kind, Status};
use serde::Serialize;

/// Deliveries waiting; past it, they are dropped, never waited for.
const QUEUE: usize = 1_000;
/// Tries of a delivery to an endpoint that does not answer or answers 429 or 5xx.
const TRIES: u32 = 3;
/// The first wait between tries, doubled after each.
const BACKOFF: Duration = Duration::from_millis(200);
/// How long a post or a command may take.
const TIMEOUT: Duration = Duration::from_secs(10);
/// How often the log is read for new events.
const TICK: Duration = Duration::from_millis(200);

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

/// One delivery to make.
struct Delivery {
    alert: Alert,
    body: String,
}

/// Starts following the log from its end, if the graph has alerts. `base_url` is the
/// service's own, for the dashboard links.
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

fn follow(engine: &Engine, base_url: &str, tx: &SyncSender<Delivery>, stop: &AtomicBool) {
    let mut seen = engine.store.last_idx().unwrap_or(0);
    while !stop.load(Ordering::Relaxed) {
        std::thread::sleep(TICK);
        let events = match engine.store.events(&EventFilter {
            since: Some(seen),
            limit: Some(10_000),
            ..Default::default()
        }) {
            Ok(events) => events,
            Err(e) => {
                eprintln!("alerts: cannot read the log: {e}");
                continue;
            }
        };
        for e in &events {
            seen = seen.max(e.idx);
            let Some(on) = fired(e) else { continue };
            for alert in engine.graph.alerts.iter().filter(|a| a.on.contains(&on)) {
                let body = body(alert, on, e, base_url);
                let delivery = Delivery {
                    alert: alert.clone(),
                    body: serde_json::to_string(&body).expect("a body serializes"),
                };
                if let Err(TrySendError::Full(_)) = tx.try_send(delivery) {
                    eprintln!(
                        "alerts: {QUEUE} deliveries waiting; `{}` dropped",
                        alert.name
                    );
                }
            }
        }
    }
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
        let e = Event::alert(&d.alert.name, status, attempts, message);
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
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(TIMEOUT))
        .build()
        .into();
    let mut request = agent.post(url).header("Content-Type", "application/json");
    if let Some(name) = secret_env {
        let secret = std::env::var(name).map_err(|_| Failure {
            why: format!("`secret_env` names `{name}`, which is not set: set it to the endpoint's signing secret"),
            retry: false,
        })?;
        request = request.header(
            "X-DataBuild-Signature",
            &crate::signature::sign(&secret, body.as_bytes()),
        );
    }
    let response = request.send(body).map_err(|e| Failure {
        why: format!("{url} does not answer: {e}"),
        retry: true,
    })?;
    match response.status().as_u16() {
        200..=299 => Ok(()),
        code => Err(Failure {
            why: format!("{url} answered HTTP {code}"),
            retry: code == 429 || code >= 500,
        }),
    }
}
