//! The service's accept loop: every connection is bounded in time and in number, so clients that
//! open connections and never finish a request cannot take the file descriptors the builds' jobs
//! need (a job that cannot get a pipe fails, and the log records it so).
//!
//! - A request's headers must arrive within [`HEADER_READ_TIMEOUT`]; an idle keep-alive
//!   connection waiting for its next request is held to the same. (`axum::serve` sets no timer,
//!   so hyper's timeout never ran: a half-open connection stayed open for good.)
//! - At most [`max_connections`] are open at once; one more is closed as soon as it is accepted,
//!   keeping three quarters of the process's descriptors for jobs, logs and the event log.
//! - A failed accept (out of descriptors) pauses the loop briefly instead of spinning.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;

/// How long a client may take to send a request's headers, or to start its next request on a
/// kept-alive connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The most connections served at once: a quarter of the descriptors the process may open, at
/// most 1,024 (a service with a few users holds a few dozen; event streams are capped at 64).
pub fn max_connections() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    (limit / 4).clamp(16, 1024) as usize
}

/// How long in-flight requests get to finish once the service is told to stop.
const DRAIN: Duration = Duration::from_secs(10);

/// Serves `app` on `listener` until `shutdown` completes, then lets requests in flight finish.
pub async fn serve(listener: TcpListener, app: Router, shutdown: impl Future<Output = ()>) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let permits = Arc::new(Semaphore::new(max_connections()));
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(_) => {
                    // Out of descriptors, most likely: the connections being served free some.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Over the cap: closed at once, its descriptor given back.
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let connection = builder
            .serve_connection_with_upgrades(TokioIo::new(stream), service)
            .into_owned();
        let connection = graceful.watch(connection);
        tokio::spawn(async move {
            let _ = connection.await;
            drop(permit);
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
}
