//! The service's accept loop: every connection is bounded in time and in number, so clients that
//! open connections and never finish a request cannot take the file descriptors the builds' jobs
//! need (a job that cannot get a pipe fails, and the log records it so), nor lock other clients
//! out.
//!
//! - A connection must send its first byte within [`ConnectionLimits::first_byte`] (5 s by
//!   default), or it is closed: an idle socket costs a descriptor and a slot for no request.
//! - A request's headers must then arrive within [`HEADER_READ_TIMEOUT`]; an idle keep-alive
//!   connection waiting for its next request is held to the same. (`axum::serve` sets no timer,
//!   so hyper's timeout never ran: a half-open connection stayed open for good.) Slow clients
//!   that do send get these 30 s; only silent ones are cut at the first-byte timeout.
//! - At most [`max_connections`] are open at once; one more is closed as soon as it is accepted,
//!   keeping three quarters of the process's descriptors for jobs, logs and the event log.
//! - At most [`ConnectionLimits::per_address`] of them come from one client address
//!   ([`PerAddress`]), so one address holding its share cannot reset everyone else's.
//! - A failed accept (out of descriptors) pauses the loop briefly instead of spinning.

use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;

/// How long a client may take to send a request's headers, or to start its next request on a
/// kept-alive connection.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The default of [`ConnectionLimits::first_byte`].
pub const FIRST_BYTE_TIMEOUT: Duration = Duration::from_secs(5);

/// The most connections served at once: a quarter of the descriptors the process may open, at
/// most 1,024 (a service with a few users holds a few dozen; event streams are capped at 64).
pub fn max_connections() -> usize {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .current
        .unwrap_or(u64::MAX);
    (limit / 4).clamp(16, 1024) as usize
}

/// The default of [`ConnectionLimits::per_address`] under a global cap of `max`: a quarter of
/// it, at least 8 (a browser opens about 6 to a host), never more than `max`.
pub fn default_per_address(max: usize) -> usize {
    (max / 4).max(8).min(max)
}

/// How the accept loop bounds connections beyond the global cap, given at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections open at once from one client address
    /// (`DATABUILD_MAX_CONNECTIONS_PER_ADDRESS`; by default [`default_per_address`]).
    pub per_address: usize,
    /// How long a new connection may stay silent before its first byte
    /// (`DATABUILD_FIRST_BYTE_TIMEOUT`).
    pub first_byte: Duration,
}

impl Default for ConnectionLimits {
    fn default() -> Self {
        ConnectionLimits {
            per_address: default_per_address(max_connections()),
            first_byte: FIRST_BYTE_TIMEOUT,
        }
    }
}

/// How many connections each client address has open, within a limit. A [`AddressSlot`] is one
/// of them; it gives its place back when dropped, and an address with none open is forgotten,
/// so the map holds only addresses connected now.
#[derive(Debug, Clone)]
pub struct PerAddress {
    limit: usize,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl PerAddress {
    pub fn new(limit: usize) -> PerAddress {
        PerAddress {
            limit,
            open: Arc::default(),
        }
    }

    /// A slot for one more connection from `ip`, or `None` if it has `limit` open already.
    /// An IPv4 address seen as IPv6 (`::ffff:a.b.c.d`) counts as itself.
    pub fn try_open(&self, ip: IpAddr) -> Option<AddressSlot> {
        let ip = client(ip);
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        let n = open.entry(ip).or_insert(0);
        if *n >= self.limit {
            return None;
        }
        *n += 1;
        Some(AddressSlot {
            ip,
            open: self.open.clone(),
        })
    }

    /// The connections `ip` has open now.
    #[cfg(test)]
    fn open(&self, ip: IpAddr) -> usize {
        let open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        open.get(&client(ip)).copied().unwrap_or(0)
    }
}

/// The client an address counts as: an IPv4 address as itself (also when seen as IPv6,
/// `::ffff:a.b.c.d`), an IPv6 address as its /64, the block one host is given: a client cycling
/// through its block's addresses is still one client.
fn client(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => IpAddr::V6((u128::from(v6) & !((1u128 << 64) - 1)).into()),
        v4 => v4,
    }
}

/// One open connection of an address, counted in [`PerAddress`] until dropped.
#[derive(Debug)]
pub struct AddressSlot {
    ip: IpAddr,
    open: Arc<Mutex<HashMap<IpAddr, usize>>>,
}

impl Drop for AddressSlot {
    fn drop(&mut self) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(n) = open.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// How long in-flight requests get to finish once the service is told to stop.
const DRAIN: Duration = Duration::from_secs(10);

/// Whether `stream` sends a byte within `timeout` (a peek: hyper reads it after). A client that
/// closes first, or stays silent, is not worth a connection.
async fn sends_in_time(stream: &TcpStream, timeout: Duration) -> bool {
    let mut byte = [0u8; 1];
    matches!(
        tokio::time::timeout(timeout, stream.peek(&mut byte)).await,
        Ok(Ok(1..))
    )
}

/// Serves `app` on `listener` until `shutdown` completes, then lets requests in flight finish.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: impl Future<Output = ()>,
) {
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let max = max_connections();
    let permits = Arc::new(Semaphore::new(max));
    let per_address = PerAddress::new(limits.per_address);
    let graceful = GracefulShutdown::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(_) => {
                    // Out of descriptors, most likely: the connections being served free some.
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Over either cap: closed at once, its descriptor given back.
        let Some(slot) = per_address.try_open(peer.ip()) else {
            drop(stream);
            continue;
        };
        let Ok(permit) = permits.clone().try_acquire_owned() else {
            drop(stream);
            continue;
        };
        let service = TowerToHyperService::new(app.clone());
        let builder = builder.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            // Both are held, silent or not, until the connection ends.
            let _held = (permit, slot);
            if !sends_in_time(&stream, limits.first_byte).await {
                return;
            }
            let connection = builder
                .serve_connection_with_upgrades(TokioIo::new(stream), service)
                .into_owned();
            let _ = watcher.watch(connection).await;
        });
    }
    drop(listener);
    let _ = tokio::time::timeout(DRAIN, graceful.shutdown()).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_address_gets_its_limit_and_others_theirs() {
        let counts = PerAddress::new(2);
        let a: IpAddr = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "127.0.0.2".parse().unwrap();
        let first = counts.try_open(a).unwrap();
        let second = counts.try_open(a).unwrap();
        assert!(counts.try_open(a).is_none(), "a third from one address");
        // As the same address seen over IPv6.
        assert!(counts
            .try_open("::ffff:127.0.0.1".parse().unwrap())
            .is_none());
        let other = counts.try_open(b).unwrap();
        assert_eq!((counts.open(a), counts.open(b)), (2, 1));
        drop(first);
        assert_eq!(counts.open(a), 1);
        let again = counts.try_open(a).unwrap();
        drop((second, again, other));
        assert!(
            counts.open.lock().unwrap().is_empty(),
            "closed addresses are forgotten"
        );
    }

    #[test]
    fn an_ipv6_host_is_its_64_block() {
        let counts = PerAddress::new(1);
        let _held = counts.try_open("2001:db8:1:2::1".parse().unwrap()).unwrap();
        assert!(counts
            .try_open("2001:db8:1:2:ffff::9".parse().unwrap())
            .is_none());
        assert!(counts
            .try_open("2001:db8:1:3::1".parse().unwrap())
            .is_some());
    }

    #[test]
    fn the_default_per_address_is_a_quarter_of_the_cap_and_at_least_8() {
        assert_eq!(default_per_address(1024), 256);
        assert_eq!(default_per_address(16), 8);
        assert_eq!(default_per_address(4), 4);
    }
}
