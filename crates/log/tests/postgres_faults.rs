//! The PostgreSQL log across faults: a server restarted in the middle of appends and reads, and a
//! `COMMIT` whose answer is lost. The store reconnects and retries by itself, and never writes a
//! batch twice. Needs the test command's throwaway server (`DATABUILD_TEST_POSTGRES`) and, to
//! restart it, its folder (`DATABUILD_TEST_POSTGRES_DIR`, for `scripts/postgres.sh restart`).

// Test code may unwrap: a panic is its failure. (`allow-unwrap-in-tests` in `clippy.toml`
// covers only `#[test]` functions and `#[cfg(test)]` modules, not this crate's helpers.)
#![allow(clippy::unwrap_used)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use databuild_log::*;

/// The tests here take turns: one restarts the server the other uses. This lock does so within
/// one process (`cargo test`); nextest runs each test in a process of its own, and
/// `.config/nextest.toml` runs these alone, as the restart would cut any other test's connection.
static SERVER: Mutex<()> = Mutex::new(());

/// The test server's admin URL. The tests here are ignored unless asked for (`./test.sh` runs
/// them, with the server started), so one that runs without it fails rather than passing.
fn admin_url() -> String {
    std::env::var("DATABUILD_TEST_POSTGRES")
        .expect("needs PostgreSQL: DATABUILD_TEST_POSTGRES is not set (./test.sh starts one)")
}

/// Creates an empty database on the test server and returns its URL.
fn fresh_database(admin: &str) -> String {
    let name = format!("t_{}", event::new_id().replace('-', ""));
    let mut client = ::postgres::Client::connect(admin, ::postgres::NoTls).unwrap();
    client
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .unwrap();
    let base = admin.rsplit_once('/').unwrap().0;
    format!("{base}/{name}")
}

/// The events of one successful single-run build of `p`, in the two commits a build makes.
fn build(n: usize) -> [Vec<Event>; 2] {
    let (br, run, p) = (format!("b{n}"), format!("r{n}"), format!("a/{n}"));
    let (br, run, p) = (br.as_str(), run.as_str(), p.as_str());
    [
        vec![
            Event::build_request(br, Status::Received).with_data(|d| d.requested = vec![p.into()]),
            Event::build_request(br, Status::Planning),
            Event::partition(Some(br), p, Status::Requested),
            Event::build_request(br, Status::AnalysisCompleted),
            Event::job_run(br, run, "job", Status::Scheduled)
                .with_data(|d| d.outputs = vec![p.into()]),
            Event::partition(Some(br), p, Status::Scheduled).with_run(run),
            Event::build_request(br, Status::Executing),
            Event::job_run(br, run, "job", Status::Running).with_data(|d| d.pid = Some(42)),
            Event::partition(Some(br), p, Status::Building).with_run(run),
        ],
        vec![
            Event::job_run(br, run, "job", Status::Completed).with_data(|d| d.exit_code = Some(0)),
            Event::partition(Some(br), p, Status::Available)
                .with_run(run)
                .with_data(|d| d.data_version = Some("v1".into())),
            Event::build_request(br, Status::Completed),
        ],
    ]
}

/// What the log holds: its events, and how many distinct event ids among them.
fn counts(url: &str) -> (i64, i64) {
    let mut client = ::postgres::Client::connect(url, ::postgres::NoTls).unwrap();
    let row = client
        .query_one("SELECT count(*), count(DISTINCT event_id) FROM events", &[])
        .unwrap();
    (row.get(0), row.get(1))
}

/// Every appended event is in the log once, with the `idx` the append returned, and the
/// projections agree with a replay of the events.
fn assert_log_holds(store: &PostgresStore, url: &str, appended: &[Event]) {
    let (events, distinct) = counts(url);
    assert_eq!(events, distinct, "an event was written twice");
    assert_eq!(
        events as usize,
        appended.len(),
        "the log holds what was appended"
    );
    let stored = store.events(&EventFilter::default()).unwrap();
    let ids: Vec<(i64, &str)> = stored
        .iter()
        .map(|e| (e.idx, e.event_id.as_str()))
        .collect();
    let returned: Vec<(i64, &str)> = appended
        .iter()
        .map(|e| (e.idx, e.event_id.as_str()))
        .collect();
    assert_eq!(ids, returned, "the appends returned the events as stored");
    let report = check_store(store).unwrap();
    assert!(report.ok(), "{:?}", report.problems);
}

#[test]
#[ignore = "needs PostgreSQL and its folder (DATABUILD_TEST_POSTGRES, _DIR); ./test.sh runs it"]
fn a_restarted_server_is_reconnected_to_and_nothing_is_written_twice() {
    let _turn = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let admin = admin_url();
    let dir = std::env::var("DATABUILD_TEST_POSTGRES_DIR").expect(
        "needs PostgreSQL's folder to restart it: DATABUILD_TEST_POSTGRES_DIR is not set \
         (./test.sh sets it)",
    );
    let url = fresh_database(&admin);
    let store = PostgresStore::open(&url).unwrap();
    let mut appended = Vec::new();
    for batch in build(0) {
        appended.extend(store.append(batch).unwrap());
    }

    // The server goes down (as a crash: no shutdown, clients cut) for two seconds, in the middle
    // of appends and reads that go on throughout.
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/../../scripts/postgres.sh");
    let restart = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let status = std::process::Command::new(script)
            .args(["restart", &dir, "2", "immediate"])
            .status()
            .unwrap();
        assert!(status.success(), "scripts/postgres.sh restart failed");
    });
    let mut n = 1;
    let mut after = 0;
    while !restart.is_finished() || after < 20 {
        if restart.is_finished() {
            after += 1;
        }
        for batch in build(n) {
            let started = Instant::now();
            let done = store.append(batch.clone());
            let done = done.unwrap_or_else(|e| panic!("append of build {n} failed: {e}"));
            assert!(started.elapsed() < Duration::from_secs(25));
            appended.extend(done);
        }
        let row = store.partition(&format!("a/{n}")).unwrap().unwrap();
        assert_eq!(row.status, Status::Available);
        assert_eq!(store.last_idx().unwrap(), appended.last().unwrap().idx);
        n += 1;
    }
    restart.join().unwrap();
    assert_log_holds(&store, &url, &appended);
}

/// A TCP proxy to the server that, once armed, cuts the connection that carries the answer to a
/// `COMMIT` (the server's `CommandComplete` with tag `COMMIT`) instead of passing it on: the
/// transaction is committed, and its client cannot know.
struct Proxy {
    port: u16,
    armed: Arc<AtomicBool>,
    cut: Arc<AtomicBool>,
}

impl Proxy {
    fn start(server: (String, u16)) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let armed = Arc::new(AtomicBool::new(false));
        let cut = Arc::new(AtomicBool::new(false));
        let (a, c) = (armed.clone(), cut.clone());
        std::thread::spawn(move || {
            for client in listener.incoming() {
                let Ok(client) = client else { continue };
                let Ok(upstream) = TcpStream::connect((server.0.as_str(), server.1)) else {
                    continue;
                };
                let (c1, u1) = (client.try_clone().unwrap(), upstream.try_clone().unwrap());
                std::thread::spawn(move || pump(c1, u1, None));
                let (a, c) = (a.clone(), c.clone());
                std::thread::spawn(move || pump(upstream, client, Some((a, c))));
            }
        });
        Proxy { port, armed, cut }
    }
}

/// Copies `from` to `to` until either closes; with `watch`, while armed, a chunk that holds a
/// `COMMIT`'s completion is dropped and both sockets are shut.
fn pump(mut from: TcpStream, mut to: TcpStream, watch: Option<(Arc<AtomicBool>, Arc<AtomicBool>)>) {
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some((armed, cut)) = &watch {
            let commit = buf[..n].windows(7).any(|w| w == b"COMMIT\0");
            if commit && armed.swap(false, Ordering::SeqCst) {
                cut.store(true, Ordering::SeqCst);
                break;
            }
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = from.shutdown(std::net::Shutdown::Both);
    let _ = to.shutdown(std::net::Shutdown::Both);
}

#[test]
#[ignore = "needs PostgreSQL (DATABUILD_TEST_POSTGRES); ./test.sh runs it"]
fn a_batch_whose_commit_went_unanswered_is_not_appended_again() {
    let _turn = SERVER.lock().unwrap_or_else(|e| e.into_inner());
    let admin = admin_url();
    let url = fresh_database(&admin);
    // postgres://user@host:port/db, through the proxy.
    let (head, db) = url.rsplit_once('/').unwrap();
    let (head, port) = head.rsplit_once(':').unwrap();
    let host = head.rsplit_once('@').map_or(head, |(_, h)| h).to_string();
    let proxy = Proxy::start((host, port.parse().unwrap()));
    let proxied = format!("{}:{}/{db}", head, proxy.port);

    let store = PostgresStore::open(&proxied).unwrap();
    let mut appended = Vec::new();
    for batch in build(0) {
        appended.extend(store.append(batch).unwrap());
    }
    for n in 1..4 {
        let [first, second] = build(n);
        appended.extend(store.append(first).unwrap());
        // This batch commits, but its client never hears so.
        proxy.armed.store(true, Ordering::SeqCst);
        let done = store.append(second.clone()).unwrap();
        assert!(
            proxy.cut.swap(false, Ordering::SeqCst),
            "the proxy cut the commit's answer"
        );
        assert_eq!(done.len(), second.len());
        assert!(done.iter().all(|e| e.idx > 0));
        appended.extend(done);
        // And the store goes on appending on a new connection.
        assert_eq!(store.last_idx().unwrap(), appended.last().unwrap().idx);
    }
    assert_log_holds(&store, &url, &appended);
}
