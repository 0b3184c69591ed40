//! Event log throughput and lookup latency on SQLite.
//!
//! `cargo bench -p databuild-log --bench log` (sizes: `LOG_BENCH_EVENTS=1000000,10000000`;
//! `LOG_BENCH_POSTGRES=URL` for a Postgres log).
//! Appends whole builds in batches (each build: 100 partitions, 7 events each, 1 in 20 failing);
//! then 30 more builds with each run's 7 events in a commit of its own, as a build writes them;
//! then times single-partition status lookups and `partitions --status failed --limit 50`.

// A benchmark may unwrap: a panic only stops the benchmark. (`allow-unwrap-in-tests` in
// `clippy.toml` covers only `#[test]` functions and `#[cfg(test)]` modules, not benchmarks.)
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use databuild_log::*;

const PARTITIONS_PER_BUILD: usize = 100;

/// Builds appended one run at a time after the batches, for the rate of small commits.
const COMMIT_BUILDS: usize = 30;

/// The events of one build request of 100 partitions.
fn build(b: usize) -> Vec<Event> {
    let br = format!("br-{b}");
    let mut events = vec![
        Event::build_request(&br, Status::Received),
        Event::build_request(&br, Status::Planning),
        Event::build_request(&br, Status::AnalysisCompleted),
        Event::build_request(&br, Status::Executing),
    ];
    for p in 0..PARTITIONS_PER_BUILD {
        let r = format!("reviews/category=c{}/date=d{b}", p);
        let run = format!("run-{b}-{p}");
        let ok = !(b * PARTITIONS_PER_BUILD + p).is_multiple_of(20);
        let end = if ok {
            Status::Available
        } else {
            Status::Failed
        };
        // Partition events name their job, as a build's do (so per-job counts see them).
        let partition = |status| {
            let mut e = Event::partition(Some(&br), &r, status);
            e.job = Some("reviews".to_string());
            e
        };
        events.extend([
            partition(Status::Requested),
            Event::job_run(&br, &run, "reviews", Status::Scheduled)
                .with_data(|d| d.outputs = vec![r.clone()]),
            partition(Status::Scheduled).with_run(&run),
            Event::job_run(&br, &run, "reviews", Status::Running),
            partition(Status::Building).with_run(&run),
            Event::job_run(
                &br,
                &run,
                "reviews",
                if ok {
                    Status::Completed
                } else {
                    Status::Failed
                },
            ),
            partition(end).with_run(&run),
        ]);
    }
    events.push(Event::build_request(&br, Status::Completed));
    events
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() - 1) as f64 * p) as usize]
}

fn run(target_events: usize) {
    let dir = tempfile::tempdir().unwrap();
    // `LOG_BENCH_KEEP=PATH` keeps the log there (for the service load benchmark).
    let path = match std::env::var("LOG_BENCH_KEEP") {
        Ok(p) => std::path::PathBuf::from(p),
        Err(_) => dir.path().join("events.db"),
    };
    // `LOG_BENCH_POSTGRES=URL` measures a Postgres log (an empty database) instead.
    let store: Box<dyn EventStore> = match std::env::var("LOG_BENCH_POSTGRES") {
        Ok(url) => Box::new(PostgresStore::open(&url).unwrap()),
        Err(_) => Box::new(SqliteStore::open(&path).unwrap()),
    };
    let mut appended = 0usize;
    let mut builds = 0usize;
    let mut append_time = Duration::ZERO;
    while appended < target_events {
        // Batches of ~10 builds (~7,000 events), as a busy service would group them.
        let batch: Vec<Event> = (builds..builds + 10).flat_map(build).collect();
        builds += 10;
        appended += batch.len();
        let start = Instant::now();
        store.append(batch).unwrap();
        append_time += start.elapsed();
    }
    let rate = appended as f64 / append_time.as_secs_f64();

    // A build's pattern: each run's events in a commit of their own (~7 events).
    let mut commits = 0usize;
    let mut commit_time = Duration::ZERO;
    for b in builds..builds + COMMIT_BUILDS {
        let events = build(b);
        let (head, rest) = events.split_at(4);
        store.append(head.to_vec()).unwrap();
        for chunk in rest.chunks(7) {
            let start = Instant::now();
            store.append(chunk.to_vec()).unwrap();
            commit_time += start.elapsed();
            commits += 1;
        }
    }
    builds += COMMIT_BUILDS;
    let commit_rate = commits as f64 / commit_time.as_secs_f64();

    let mut lookups = Vec::with_capacity(10_000);
    for i in 0..10_000usize {
        let b = (i * 7919) % builds;
        let r = format!("reviews/category=c{}/date=d{b}", i % PARTITIONS_PER_BUILD);
        let start = Instant::now();
        let row = store.partition(&r).unwrap();
        lookups.push(start.elapsed());
        assert!(row.is_some());
    }
    lookups.sort();

    let mut listing = Vec::new();
    for _ in 0..50 {
        let start = Instant::now();
        let rows = store
            .partitions(&PartitionQuery {
                status: Some(Status::Failed),
                limit: 50,
                ..Default::default()
            })
            .unwrap();
        listing.push(start.elapsed());
        assert_eq!(rows.len(), 50);
    }
    listing.sort();
    let size = std::fs::metadata(dir.path().join("events.db"))
        .map(|m| m.len())
        .unwrap_or(0)
        + std::fs::metadata(dir.path().join("events.db-wal"))
            .map(|m| m.len())
            .unwrap_or(0);
    println!(
        "| {:>10} | {:>9.0} ev/s | {:>7.0} /s | {:>7.1} µs / {:>7.1} µs | {:>7.2} ms / {:>7.2} ms | {:>6} MB |",
        appended,
        rate,
        commit_rate,
        percentile(&lookups, 0.5).as_secs_f64() * 1e6,
        percentile(&lookups, 0.99).as_secs_f64() * 1e6,
        percentile(&listing, 0.5).as_secs_f64() * 1e3,
        percentile(&listing, 0.99).as_secs_f64() * 1e3,
        size / 1_000_000,
    );
}

fn main() {
    let sizes = std::env::var("LOG_BENCH_EVENTS").unwrap_or_else(|_| "1000000".to_string());
    println!("| events     | append (batched) | commits of one run's events | status lookup p50 / p99 | failed --limit 50 p50 / p99 | file size |");
    println!("|-----------:|-----------------:|-----------:|------------------------:|----------------------------:|----------:|");
    for n in sizes.split(',') {
        run(n.trim().parse().expect("a number of events"));
    }
}
