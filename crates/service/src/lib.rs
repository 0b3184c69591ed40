//! The build graph service: the HTTP API of contract section 6 over the same [`Engine`] the CLI
//! uses, so a build requested here gives the same events as one run by `databuild build`.
//!
//! - [`app`] builds the router (testable without a socket); [`serve`] binds it and handles
//!   shutdown: stop taking requests, cancel running builds (recorded), exit.
//! - `routes` is the router over the one route table (`databuild_exec::answers::route`); [`api`],
//!   [`sources`] and `wants` hold the handlers, which answer with the types of
//!   `databuild_exec::answers`; [`views`] computes those answers from the engine, for the
//!   handlers, the dashboard and the CLI alike; [`ops`] is what handlers and dashboard share.
//! - [`client::Api`] is the one interface to the answers: in-process over an engine, or over HTTP.
//! - [`error::AppError`] turns every failure into a JSON error, its status from the error's kind.
//! - Builds run on their own threads ([`Builds`]); the engine is synchronous, so handlers reach it
//!   through `spawn_blocking`.

pub mod api;
pub mod client;
mod connections;
mod dashboard;

pub use dashboard::enc as encode_segment;
pub mod error;
mod grid;
pub mod guard;
mod metrics;
mod openapi;
pub mod ops;
mod reconciler;
mod routes;
pub mod signature;
pub mod sources;
mod svg;
pub mod views;
pub mod wants;

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use axum::Router;
use databuild_exec::Engine;

/// Requests larger than this are refused (413).
pub const BODY_LIMIT: usize = 1024 * 1024;

/// How long shutdown waits for running builds to record their cancellation.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(9);

/// A build running on its own thread, and the flag that interrupts it.
type RunningBuild = (Arc<AtomicBool>, JoinHandle<()>);

/// Builds this process is running, by id.
#[derive(Default)]
pub struct Builds {
    running: Mutex<HashMap<String, RunningBuild>>,
}

impl Builds {
    pub(crate) fn add(&self, id: String, interrupt: Arc<AtomicBool>, handle: JoinHandle<()>) {
        let mut running = self.running.lock().expect("builds lock");
        running.retain(|_, (_, h)| !h.is_finished());
        running.insert(id, (interrupt, handle));
    }

    /// Interrupts every running build and waits (up to `grace`) for them to record it.
    pub fn cancel_all(&self, grace: Duration) {
        let running: Vec<_> = self.running.lock().expect("builds lock").drain().collect();
        for (_, (flag, _)) in &running {
            flag.store(true, Ordering::SeqCst);
        }
        let deadline = Instant::now() + grace;
        for (_, (_, handle)) in running {
            while !handle.is_finished() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// How much one service takes on at once, read once at start.
#[derive(Debug, Clone)]
pub struct Limits {
    /// The most refs one request may name, braces expanded (`DATABUILD_MAX_REFS`).
    pub max_refs: usize,
    /// SQL queries running at once (`DATABUILD_SQL_CONCURRENCY`); more are answered 429.
    pub sql_queries: usize,
    /// Event streams open at once (`DATABUILD_MAX_STREAMS`); more are answered 429.
    pub event_streams: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_refs: databuild_core::DEFAULT_MAX_REFS,
            sql_queries: 4,
            event_streams: 64,
        }
    }
}

/// How often the service's background work runs.
#[derive(Debug, Clone, Copy)]
pub struct Intervals {
    /// Sealing ended days, ingesting dropped files, expiring raw data
    /// (`DATABUILD_SOURCE_INTERVAL`).
    pub sources: Duration,
    /// Probing what wants wait for (`DATABUILD_WANT_PROBE_INTERVAL`).
    pub want_probes: Duration,
}

impl Default for Intervals {
    fn default() -> Self {
        Intervals {
            sources: Duration::from_secs(60),
            want_probes: Duration::from_secs(10),
        }
    }
}

/// Everything `serve` is told at start.
#[derive(Debug, Clone, Default)]
pub struct ServeConfig {
    pub access: guard::Access,
    pub limits: Limits,
    pub intervals: Intervals,
}

pub struct AppState {
    pub engine: Arc<Engine>,
    /// One executor for all builds, so a cluster executor follows all runs together.
    pub executor: Arc<dyn databuild_exec::run::Executor>,
    /// Tokens, sessions and CSRF tokens.
    pub guard: guard::Guard,
    pub limits: Limits,
    pub intervals: Intervals,
    /// Permits for SQL queries and event streams: what is running now.
    pub sql_slots: Arc<tokio::sync::Semaphore>,
    pub stream_slots: Arc<tokio::sync::Semaphore>,
    pub builds: Builds,
    /// Per-source webhook rate limits.
    pub flood_guard: sources::FloodGuard,
}

impl AppState {
    pub fn new(
        engine: Arc<Engine>,
        executor: Arc<dyn databuild_exec::run::Executor>,
        config: ServeConfig,
    ) -> AppState {
        AppState {
            engine,
            executor,
            guard: guard::Guard::new(config.access),
            sql_slots: Arc::new(tokio::sync::Semaphore::new(config.limits.sql_queries)),
            stream_slots: Arc::new(tokio::sync::Semaphore::new(config.limits.event_streams)),
            limits: config.limits,
            intervals: config.intervals,
            builds: Builds::default(),
            flood_guard: Default::default(),
        }
    }
}

pub fn app(state: Arc<AppState>) -> Router {
    routes::router(state)
}

/// Serves until SIGTERM or SIGINT, then cancels running builds and returns.
pub async fn serve(
    engine: Engine,
    bind: SocketAddr,
    config: ServeConfig,
    on_ready: impl FnOnce(SocketAddr),
) -> anyhow::Result<()> {
    let engine = Arc::new(engine);
    // Builds left unfinished by a crashed process are closed before new ones start.
    let closed = {
        let engine = engine.clone();
        tokio::task::spawn_blocking(move || engine.close_abandoned_builds()).await??
    };
    if closed > 0 {
        eprintln!("closed {closed} build request(s) left unfinished by a process that is gone");
    }
    // Sources are sealed, ingested and expired before the first request, then every interval.
    if !engine.graph.sources.is_empty() {
        let engine = engine.clone();
        tokio::task::spawn_blocking(move || engine.maintain_sources(None, None)).await??;
    }
    let executor: Arc<dyn databuild_exec::run::Executor> = Arc::from(engine.executor());
    let state = Arc::new(AppState::new(engine, executor, config));
    tokio::spawn(maintain_sources(state.clone()));
    let stop_reconciler = Arc::new(AtomicBool::new(false));
    reconciler::spawn(state.clone(), stop_reconciler.clone());
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {bind}: {e}"))?;
    on_ready(listener.local_addr()?);
    connections::serve(listener, app(state.clone()), shutdown_signal()).await;
    stop_reconciler.store(true, Ordering::Relaxed);
    let state2 = state.clone();
    tokio::task::spawn_blocking(move || state2.builds.cancel_all(SHUTDOWN_GRACE)).await?;
    Ok(())
}

/// Seals ended days, ingests dropped files and expires old raw data, every
/// [`Intervals::sources`].
async fn maintain_sources(state: Arc<AppState>) {
    if state.engine.graph.sources.is_empty() {
        return;
    }
    let every = state.intervals.sources;
    loop {
        tokio::time::sleep(every).await;
        let engine = state.engine.clone();
        match tokio::task::spawn_blocking(move || engine.maintain_sources(None, None)).await {
            Ok(Err(e)) => eprintln!("source maintenance failed: {e}"),
            Err(e) => eprintln!("source maintenance failed: {e}"),
            Ok(Ok(_)) => {}
        }
    }
}

/// An interval as written: seconds (`0.2`, `60`) or a duration (`90s`, `5m`).
pub fn parse_interval(v: &str) -> Option<Duration> {
    v.parse::<f64>()
        .ok()
        .and_then(|s| Duration::try_from_secs_f64(s).ok())
        .or_else(|| humantime::parse_duration(v).ok())
        .filter(|d| !d.is_zero())
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    tokio::select! {
        _ = term.recv() => {}
        _ = int.recv() => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn intervals_are_seconds_or_durations_and_nonsense_is_refused() {
        assert_eq!(parse_interval("0.2"), Some(Duration::from_millis(200)));
        assert_eq!(parse_interval("60"), Some(Duration::from_secs(60)));
        assert_eq!(parse_interval("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_interval("5m"), Some(Duration::from_secs(300)));
        for bad in ["0", "-1", "inf", "NaN", "1e30", "soon", ""] {
            assert_eq!(parse_interval(bad), None, "{bad}");
        }
    }
}
