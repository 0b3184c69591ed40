//! The build graph service: the HTTP API of contract section 6 over the same [`Engine`] the CLI
//! uses, so a build requested here gives the same events as one run by `databuild build`.
//!
//! - [`app`] builds the router (testable without a socket); [`serve`] binds it and handles
//!   shutdown: stop taking requests, cancel running builds (recorded), exit.
//! - `routes` is the router over the one route table (`databuild_exec::answers::route`); [`api`],
//!   [`sources`] and `wants` hold the handlers, which answer with the types of
//!   `databuild_exec::answers`; [`engine_api`] computes those answers from the engine, for the
//!   handlers, the dashboard and the CLI alike; [`ops`] is what handlers and dashboard share.
//! - [`client::Api`] is the one interface to the answers: in-process over an engine, or over HTTP.
//! - [`error::AppError`] turns every failure into a JSON error, its status from the error's kind.
//! - [`environment::Env`] is the environment a request is about (contract section 9), with its
//!   engines; handlers and pages reach an engine only through one. [`environments`] holds the
//!   environments' own endpoints.
//! - [`AppState`] is what every handler shares; builds run on their own threads ([`Builds`]); the
//!   engine is synchronous, so handlers reach it through `spawn_blocking`.
//! - [`ServeConfig`] is what the service is told at start (limits, intervals, access).

/// The header naming the environment a request is about (`?env=` says the same); none: prod.
pub const ENVIRONMENT_HEADER: &str = "X-DataBuild-Env";

mod alerts;
pub mod api;
pub mod client;
mod config;
mod connections;
mod dashboard;
pub mod engine_api;
pub mod environment;
pub mod environments;
pub mod error;
mod grid;
pub mod guard;
mod metrics;
mod openapi;
pub mod ops;
mod reconciler;
mod routes;
mod running_builds;
pub mod signature;
pub mod sources;
mod svg;
pub mod wants;

pub use config::{parse_interval, Intervals, Limits, ServeConfig};
pub use connections::{ConnectionLimits, FIRST_BYTE_TIMEOUT};
pub use running_builds::Builds;

/// A path segment as links and redirects write it (what `/partitions/{ref}` takes).
pub use databuild_core::refs::encode_segment;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use databuild_exec::Engine;

/// Requests larger than this are refused (413).
pub const BODY_LIMIT: usize = 1024 * 1024;

/// How long shutdown waits for running builds to record their cancellation.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(9);

/// What every handler shares. It stays at the crate's root: it holds parts of `guard` and
/// `sources`, which take it in turn, so in a module of its own it would make a cycle.
pub struct AppState {
    /// Prod's engine: the reconciler, source maintenance and `/metrics` use it, and environments'
    /// engines are made from it.
    pub engine: Arc<Engine>,
    /// Every environment's engines opened so far, prod's included (see [`environment::Env`]).
    pub environments: environment::Opened,
    /// One executor for all builds, so a cluster executor follows all runs together.
    pub executor: Arc<dyn databuild_exec::run::Executor>,
    /// Tokens, sessions and CSRF tokens.
    pub guard: guard::Guard,
    pub limits: Limits,
    pub intervals: Intervals,
    /// Permits for SQL queries, analyses and event streams: what is running now.
    pub sql_slots: Arc<tokio::sync::Semaphore>,
    pub analysis_slots: Arc<tokio::sync::Semaphore>,
    pub stream_slots: Arc<tokio::sync::Semaphore>,
    pub builds: Builds,
    /// Per-source webhook rate limits.
    pub flood_guard: sources::FloodGuard,
    /// `/metrics`' per-job histograms, fed from the log at each scrape.
    pub run_histograms: metrics::RunHistograms,
}

impl AppState {
    pub fn new(
        engine: Arc<Engine>,
        executor: Arc<dyn databuild_exec::run::Executor>,
        config: ServeConfig,
    ) -> AppState {
        AppState {
            environments: environment::Opened::new(engine.clone()),
            engine,
            executor,
            guard: guard::Guard::new(config.access),
            sql_slots: Arc::new(tokio::sync::Semaphore::new(config.limits.sql_queries)),
            analysis_slots: Arc::new(tokio::sync::Semaphore::new(config.limits.analyses)),
            stream_slots: Arc::new(tokio::sync::Semaphore::new(config.limits.event_streams)),
            limits: config.limits,
            intervals: config.intervals,
            builds: Builds::default(),
            flood_guard: Default::default(),
            run_histograms: Default::default(),
        }
    }
}

/// The router of the API and the dashboard over `state`: testable without a socket.
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
    tokio::spawn(close_dead_builds(state.clone()));
    tokio::spawn(watch_arrivals(state.clone()));
    let stop_reconciler = Arc::new(AtomicBool::new(false));
    reconciler::spawn(state.clone(), stop_reconciler.clone());
    let listener = tokio::net::TcpListener::bind(bind)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {bind}: {e}"))?;
    let addr = listener.local_addr()?;
    alerts::spawn(
        state.engine.clone(),
        format!("http://{addr}"),
        stop_reconciler.clone(),
    );
    on_ready(addr);
    let connections = state.limits.connections;
    connections::serve(listener, app(state.clone()), connections, shutdown_signal()).await;
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
    let engine = state.engine.clone();
    every(state.intervals.sources, "source maintenance", move || {
        engine.maintain_sources(None, None).map(drop)
    })
    .await
}

/// Closes builds whose driving process is gone (on this host: its pid and start time; on
/// another: its lease), every [`Intervals::dead_builds`], whether or not anyone asks: their
/// runs end, their partitions go back to what they were, and waiters build them.
async fn close_dead_builds(state: Arc<AppState>) {
    let engine = state.engine.clone();
    every(
        state.intervals.dead_builds,
        "closing builds whose driving process is gone",
        move || {
            engine.close_abandoned_builds().map(|closed| {
                if closed > 0 {
                    eprintln!("closed {closed} build request(s) whose driving process is gone");
                }
            })
        },
    )
    .await
}

/// Probes the external partitions each dataset a job reads is expected to land next, and
/// records those found, every [`Intervals::arrival_probes`].
async fn watch_arrivals(state: Arc<AppState>) {
    let engine = state.engine.clone();
    let interval = state.intervals.arrival_probes;
    every(interval, "watching for arrivals", move || {
        engine.watch_arrivals(interval).map(drop)
    })
    .await
}

/// Runs `f` on a blocking thread every `interval`, forever; a failure (or a panic) is said on
/// stderr, naming `what` failed, and the next turn comes as usual.
async fn every<E: std::fmt::Display + Send + 'static>(
    interval: Duration,
    what: &str,
    f: impl Fn() -> Result<(), E> + Send + Sync + 'static,
) {
    let f = Arc::new(f);
    loop {
        tokio::time::sleep(interval).await;
        let f = f.clone();
        match tokio::task::spawn_blocking(move || f()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("{what} failed: {e}"),
            Err(e) => eprintln!("{what} failed: {e}"),
        }
    }
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
