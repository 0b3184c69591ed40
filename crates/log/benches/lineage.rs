//! The lineage index's cost and its queries' speed on SQLite.
//!
//! `cargo bench -p databuild-log --bench lineage` (`LINEAGE_BENCH_EVENTS=10000000`;
//! `LINEAGE_BENCH_KEEP=PATH` keeps the log for `bench/lineage.sh`).
//! Appends builds of a four-level chain (`l0/p=N` reads the external `raw/p=N`, `l1` reads `l0`,
//! `l2` reads `l1`, `l3` reads `l2` and `l1`), 6 events a partition, in batches of ~10 builds,
//! each run's `running` event recording what it read (`input_versions`, `input_runs`: a
//! `run_inputs` row per input). The same number of events is then appended without the reads
//! recorded, into a log of its own, for the index's cost. Then times the store's reads a lineage
//! answer is made of: a run by id, and the readers of an instance.

// A benchmark may unwrap: a panic only stops the benchmark. (`allow-unwrap-in-tests` in
// `clippy.toml` covers only `#[test]` functions and `#[cfg(test)]` modules, not benchmarks.)
#![allow(clippy::unwrap_used)]

use std::time::{Duration, Instant};

use databuild_log::*;

/// Partitions of each level per build.
const PER_LEVEL: usize = 25;
const LEVELS: usize = 4;

fn run_id(level: usize, p: usize) -> String {
    format!("run-l{level}-{p}")
}

/// The events of build `b`: `PER_LEVEL` partitions of each level, each read by the next level.
fn build(b: usize, record_reads: bool) -> Vec<Event> {
    let br = format!("br-{b}");
    let mut events = vec![
        Event::build_request(&br, Status::Received),
        Event::build_request(&br, Status::Planning),
        Event::build_request(&br, Status::AnalysisCompleted),
        Event::build_request(&br, Status::Executing),
    ];
    for level in 0..LEVELS {
        for j in 0..PER_LEVEL {
            let p = b * PER_LEVEL + j;
            let r = format!("l{level}/p={p}");
            let run = run_id(level, p);
            let job = format!("l{level}");
            let inputs: Vec<(String, Option<String>)> = match level {
                0 => vec![(format!("raw/p={p}"), None)],
                3 => vec![
                    (format!("l2/p={p}"), Some(run_id(2, p))),
                    (format!("l1/p={p}"), Some(run_id(1, p))),
                ],
                _ => vec![(format!("l{}/p={p}", level - 1), Some(run_id(level - 1, p)))],
            };
            let partition = |status| {
                let mut e = Event::partition(Some(&br), &r, status);
                e.job = Some(job.clone());
                e
            };
            events.extend([
                Event::job_run(&br, &run, &job, Status::Scheduled).with_data(|d| {
                    d.outputs = vec![r.clone()];
                    d.inputs = inputs.iter().map(|(i, _)| i.clone()).collect();
                }),
                partition(Status::Scheduled).with_run(&run),
                Event::job_run(&br, &run, &job, Status::Running).with_data(|d| {
                    if record_reads {
                        for (i, by) in &inputs {
                            d.input_versions.insert(i.clone(), format!("v-{i}"));
                            if let Some(by) = by {
                                d.input_runs.insert(i.clone(), by.clone());
                            }
                        }
                    }
                }),
                partition(Status::Building).with_run(&run),
                Event::job_run(&br, &run, &job, Status::Completed),
                partition(Status::Available)
                    .with_run(&run)
                    .with_data(|d| d.data_version = Some(format!("v-{r}"))),
            ]);
        }
    }
    events.push(Event::build_request(&br, Status::Completed));
    events
}

/// Appends builds until `target` events; the time spent appending and the builds made.
fn fill(store: &dyn EventStore, target: usize, record_reads: bool) -> (Duration, usize, usize) {
    let (mut appended, mut builds, mut time) = (0, 0, Duration::ZERO);
    while appended < target {
        let batch: Vec<Event> = (builds..builds + 10)
            .flat_map(|b| build(b, record_reads))
            .collect();
        builds += 10;
        appended += batch.len();
        let start = Instant::now();
        store.append(batch).unwrap();
        time += start.elapsed();
    }
    (time, builds, appended)
}

fn percentile(sorted: &mut [Duration], p: f64) -> f64 {
    sorted.sort();
    sorted[((sorted.len() - 1) as f64 * p) as usize].as_secs_f64() * 1e3
}

fn main() {
    let target: usize = std::env::var("LINEAGE_BENCH_EVENTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1_000_000);
    let dir = tempfile::tempdir().unwrap();
    let path = std::env::var("LINEAGE_BENCH_KEEP")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|_| dir.path().join("lineage.db"));
    let store = SqliteStore::open(&path).unwrap();
    let (with, builds, events) = fill(&store, target, true);
    let bare = SqliteStore::open(&dir.path().join("bare.db")).unwrap();
    let (without, _, _) = fill(&bare, target, false);
    drop(bare);
    let runs = builds * PER_LEVEL * LEVELS;
    println!(
        "{events} events, {runs} runs: append {:.0} ev/s with the reads recorded, {:.0} ev/s without ({:+.1}% time, {:.1} µs a run)",
        events as f64 / with.as_secs_f64(),
        events as f64 / without.as_secs_f64(),
        (with.as_secs_f64() / without.as_secs_f64() - 1.0) * 100.0,
        (with.as_secs_f64() - without.as_secs_f64()) / runs as f64 * 1e6,
    );
    let (mut by_id, mut readers) = (Vec::new(), Vec::new());
    for i in 0..2_000usize {
        let p = (i * 7919) % (builds * PER_LEVEL);
        let start = Instant::now();
        assert!(store.job_run(&run_id(3, p)).unwrap().is_some());
        by_id.push(start.elapsed());
        let start = Instant::now();
        let found = store
            .readers(
                &format!("l1/p={p}"),
                Some(&run_id(1, p)),
                None,
                ReadersOf::Instance,
                1_000,
            )
            .unwrap();
        readers.push(start.elapsed());
        assert_eq!(found.len(), 2);
    }
    println!(
        "a run by id p50 {:.3} ms p99 {:.3} ms; the readers of an instance p50 {:.3} ms p99 {:.3} ms",
        percentile(&mut by_id, 0.5),
        percentile(&mut by_id, 0.99),
        percentile(&mut readers, 0.5),
        percentile(&mut readers, 0.99),
    );
    println!("partitions per level: {}", builds * PER_LEVEL);
}
