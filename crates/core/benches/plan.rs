//! Planning throughput: a 4-level graph, 100,000 requested partitions at its bottom.
//!
//! `cargo bench -p databuild-core --bench plan`. Figures go to BENCHMARKS.md.

// A benchmark may unwrap: a panic only stops the benchmark. (`allow-unwrap-in-tests` in
// `clippy.toml` covers only `#[test]` functions and `#[cfg(test)]` modules, not benchmarks.)
#![allow(clippy::unwrap_used)]

/// The allocator the `databuild` binary uses, so the figures match what users run.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use criterion::{criterion_group, criterion_main, Criterion};
use databuild_core::{
    plan, Dataset, Graph, Job, JobConfig, NothingBuilt, PartitionRef, PlanRequest, ResolveError,
    Resolver,
};

/// Every external partition is present; there are no dynamic jobs.
struct AllPresent;

impl Resolver for AllPresent {
    fn external_available(&mut self, _: &Dataset, _: &PartitionRef) -> Result<bool, ResolveError> {
        Ok(true)
    }
    fn job_configs(&mut self, _: &Job, _: &[PartitionRef]) -> Result<Vec<JobConfig>, ResolveError> {
        unreachable!("no dynamic jobs in this graph")
    }
}

pub const GRAPH: &str = r#"
[graph]
name = "bench"
[[dataset]]
name = "raw"
pattern = "raw/date={date:date}"
[[job]]
name = "reviews"
outputs = ["reviews/date={date:date}"]
inputs = ["raw/date={date}"]
command = ["true"]
[[job]]
name = "categorized"
outputs = ["categorized/category={category}/date={date:date}"]
inputs = ["reviews/date={date}"]
command = ["true"]
[[job]]
name = "phrases"
outputs = ["phrases/category={category}/date={date:date}"]
inputs = ["categorized/category={category}/date={date-6d..date}"]
command = ["true"]
[[job]]
name = "summary"
outputs = ["summary/category={category}/date={date:date}"]
inputs = ["phrases/category={category}/date={date}", "reviews/date={date}"]
command = ["true"]
"#;

/// 100 categories x 1,000 dates of `summary`.
fn requested() -> Vec<PartitionRef> {
    let start = chrono::NaiveDate::from_ymd_opt(2020, 1, 1).unwrap();
    let mut refs = Vec::with_capacity(100_000);
    for c in 0..100 {
        for d in start.iter_days().take(1000) {
            refs.push(PartitionRef::new(format!("summary/category=c{c}/date={d}")).unwrap());
        }
    }
    refs
}

fn bench_plan(c: &mut Criterion) {
    let graph = Graph::parse(GRAPH, "bench.toml").unwrap();
    let request = PlanRequest {
        refs: requested(),
        ..Default::default()
    };
    let sample = plan(&graph, &request, &NothingBuilt, &mut AllPresent).unwrap();
    // The 7-day window reaches 6 days before the first date.
    assert_eq!(sample.runs.len(), 100_000 * 2 + 100 * 1006 + 1006);
    let mut group = c.benchmark_group("plan");
    group.sample_size(10);
    group.bench_function("4 levels, 100k requested, 302k runs", |b| {
        b.iter(|| plan(&graph, &request, &NothingBuilt, &mut AllPresent).unwrap())
    });
    group.finish();
}

criterion_group!(benches, bench_plan);
criterion_main!(benches);
