//! How well a cadence forecasts: synthetic arrival histories replayed through the model, each
//! partition predicted from the ones before it, as the service would have. Prints one JSON
//! object per history: the median absolute error of `expected_at` (minutes) and the share of
//! actual arrivals inside [expected_at − (expected_by − expected_at), expected_by].
//!
//! `cargo bench -p databuild-core --bench forecast` (`bench/forecast.sh` records the figures).
//!
//! - `daily`: 180 days, weekdays only, landing 2 h after the day's end, ± about 20 min.
//! - `hourly`: 20 days of hours, 10 min after the hour's end ± 5 min, 5% of them 1–3 h late.
//! - `change`: 120 days landing 1 h after the day, then 4 h from day 60 on.

// A benchmark may unwrap, and its output is the point: the core's I/O lints are for the library.
#![allow(clippy::unwrap_used, clippy::disallowed_macros)]

use databuild_core::cadence::{learn, Arrival, KeyKind};

const MIN: i64 = 60 * 1_000_000_000;
const HOUR: i64 = 60 * MIN;

/// xorshift64: the same histories on every run, no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Roughly normal, mean 0 and deviation `sd` (the sum of 4 uniforms).
    fn jitter(&mut self, sd: f64) -> i64 {
        let sum: f64 = (0..4).map(|_| self.unit() - 0.5).sum();
        (sum * sd * (12.0f64 / 4.0).sqrt()) as i64
    }
}

/// A history's arrivals, in key order.
fn history(
    kind: KeyKind,
    first: &str,
    n: i64,
    lag: impl Fn(i64, &mut Rng) -> Option<i64>,
) -> Vec<Arrival> {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let start = kind.parse(first).unwrap();
    (0..n)
        .filter_map(|i| {
            let key = databuild_core::cadence::Key {
                kind,
                n: start.n + i,
            };
            let lag = lag(i, &mut rng)?;
            Some(Arrival {
                key,
                at_ns: key.period_end_ns().unwrap() + lag,
            })
        })
        .collect()
}

/// Each arrival predicted from those before it (once they are enough): the median absolute
/// error (minutes) and the share inside the band.
fn replay(arrivals: &[Arrival]) -> (f64, f64) {
    let mut errors = Vec::new();
    let mut inside = 0;
    for i in 3..arrivals.len() {
        let Ok(cadence) = learn(&arrivals[..i]) else {
            continue;
        };
        let Some(e) = cadence.expect(arrivals[i].key) else {
            continue;
        };
        let actual = arrivals[i].at_ns;
        errors.push((actual - e.at_ns).abs() as f64 / MIN as f64);
        let band = e.by_ns - e.at_ns;
        if actual >= e.at_ns - band && actual <= e.by_ns {
            inside += 1;
        }
    }
    errors.sort_by(f64::total_cmp);
    let median = errors[errors.len() / 2];
    (median, inside as f64 / errors.len() as f64)
}

fn main() {
    let weekdays = history(KeyKind::Date, "2026-01-05", 180, |i, rng| {
        (i % 7 < 5).then(|| 2 * HOUR + rng.jitter(20.0 * MIN as f64))
    });
    let hourly = history(KeyKind::Hour, "2026-01-05T00", 24 * 20, |_, rng| {
        let late = rng.unit() < 0.05;
        let base = 10 * MIN + ((rng.unit() - 0.5) * 10.0 * MIN as f64) as i64;
        Some(if late {
            base + HOUR + (rng.unit() * 2.0 * HOUR as f64) as i64
        } else {
            base
        })
    });
    let change = history(KeyKind::Date, "2026-01-05", 120, |i, rng| {
        let lag = if i < 60 { HOUR } else { 4 * HOUR };
        Some(lag + rng.jitter(10.0 * MIN as f64))
    });
    for (name, arrivals) in [("daily", weekdays), ("hourly", hourly), ("change", change)] {
        let (error, coverage) = replay(&arrivals);
        println!(
            "{{\"history\": \"{name}\", \"predicted\": {}, \"error_min\": {error:.2}, \"coverage\": {coverage:.3}}}",
            arrivals.len() - 3
        );
    }
}
