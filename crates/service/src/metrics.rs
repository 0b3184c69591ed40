//! `GET /metrics`: Prometheus text, read from the event log's projections, and per-job
//! histograms of completed runs' duration and peak memory ([`RunHistograms`]), fed from the
//! log's events as they come: a scrape reads only the runs that completed since the last one,
//! so its cost does not grow with the log, and every host serving one shared log counts alike.

use std::fmt::Write;
use std::sync::Arc;

use std::collections::BTreeMap;
use std::sync::Mutex;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use databuild_log::{Event, EventFilter, EventStore, Kind, SqlLimits, Status};

use crate::error::AppError;
use crate::AppState;

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

fn label(value: &serde_json::Value) -> String {
    value
        .as_str()
        .unwrap_or_default()
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
}

pub async fn metrics(State(state): State<Arc<AppState>>) -> Result<impl IntoResponse, AppError> {
    let engine = state.engine.clone();
    let text = tokio::task::spawn_blocking(move || -> Result<String, AppError> {
        let q = |sql: &str| engine.store.sql(sql, SqlLimits::internal());
        let mut out = String::new();
        family(
            &mut out,
            "databuild_build_requests",
            "gauge",
            "Build requests by status.",
        );
        for row in q("SELECT status, count(*) FROM build_requests GROUP BY status")?.rows {
            let _ = writeln!(
                out,
                "databuild_build_requests{{status=\"{}\"}} {}",
                label(&row[0]),
                row[1]
            );
        }
        family(
            &mut out,
            "databuild_job_runs",
            "gauge",
            "Job runs by job and status.",
        );
        for row in q("SELECT job, status, count(*) FROM job_runs GROUP BY job, status")?.rows {
            let _ = writeln!(
                out,
                "databuild_job_runs{{job=\"{}\",status=\"{}\"}} {}",
                label(&row[0]),
                label(&row[1]),
                row[2]
            );
        }
        state.run_histograms.feed(engine.store.as_ref())?;
        state.run_histograms.write(&mut out);
        family(
            &mut out,
            "databuild_partitions",
            "gauge",
            "Partitions known to the log, by status.",
        );
        for row in q("SELECT status, count(*) FROM partitions GROUP BY status")?.rows {
            let _ = writeln!(
                out,
                "databuild_partitions{{status=\"{}\"}} {}",
                label(&row[0]),
                row[1]
            );
        }
        family(
            &mut out,
            "databuild_check_results",
            "gauge",
            "Partitions by the latest result of each check (passed, failed), per job.",
        );
        for c in engine.store.check_counts()? {
            for (result, n) in [("passed", c.passed), ("failed", c.failed)] {
                let _ = writeln!(
                    out,
                    "databuild_check_results{{check=\"{}\",job=\"{}\",result=\"{result}\"}} {n}",
                    label(&c.check_name.clone().into()),
                    label(&c.job.clone().into()),
                );
            }
        }
        family(
            &mut out,
            "databuild_late_partitions",
            "gauge",
            "External partitions late now: recorded late, not arrived since.",
        );
        let late = engine.late_partitions()?.len();
        let _ = writeln!(out, "databuild_late_partitions {late}");
        family(
            &mut out,
            "databuild_events",
            "counter",
            "Events in the log (its last index).",
        );
        let _ = writeln!(out, "databuild_events {}", engine.store.last_idx()?);
        Ok(out)
    })
    .await??;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text))
}

/// Upper bounds of the duration buckets, in seconds: from a few-ms job to an hour.
const DURATION_BUCKETS: [f64; 12] = [
    0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0,
];
/// Upper bounds of the peak memory buckets, in bytes: 16 MiB to 64 GiB, each four times the last.
const RSS_BUCKETS: [f64; 7] = [
    (16u64 << 20) as f64,
    (64u64 << 20) as f64,
    (256u64 << 20) as f64,
    (1u64 << 30) as f64,
    (4u64 << 30) as f64,
    (16u64 << 30) as f64,
    (64u64 << 30) as f64,
];
/// How many events one read of the log brings in.
const FEED_PAGE: usize = 10_000;

/// One Prometheus histogram: how many observations fell in each bucket (not yet cumulative),
/// with their count and sum.
#[derive(Debug, Clone, Default, PartialEq)]
struct Histogram {
    buckets: Vec<u64>,
    count: u64,
    sum: f64,
}

impl Histogram {
    fn observe(&mut self, bounds: &[f64], value: f64) {
        self.buckets.resize(bounds.len(), 0);
        if let Some(i) = bounds.iter().position(|b| value <= *b) {
            self.buckets[i] += 1;
        }
        self.count += 1;
        self.sum += value;
    }

    fn write(&self, out: &mut String, name: &str, job: &str, bounds: &[f64]) {
        let mut cumulative = 0;
        for (i, bound) in bounds.iter().enumerate() {
            cumulative += self.buckets.get(i).copied().unwrap_or(0);
            let _ = writeln!(
                out,
                "{name}_bucket{{job=\"{job}\",le=\"{bound}\"}} {cumulative}"
            );
        }
        let _ = writeln!(
            out,
            "{name}_bucket{{job=\"{job}\",le=\"+Inf\"}} {}",
            self.count
        );
        let _ = writeln!(out, "{name}_sum{{job=\"{job}\"}} {}", self.sum);
        let _ = writeln!(out, "{name}_count{{job=\"{job}\"}} {}", self.count);
    }
}

/// Per job: the durations and the peak memory of its completed runs.
#[derive(Debug, Default)]
struct Fed {
    /// The last event read.
    after: i64,
    duration: BTreeMap<String, Histogram>,
    max_rss: BTreeMap<String, Histogram>,
}

/// The service's per-job histograms of completed runs (`databuild_job_run_duration_seconds`,
/// `databuild_job_run_max_rss_bytes`), kept between scrapes.
#[derive(Debug, Default)]
pub struct RunHistograms {
    fed: Mutex<Fed>,
}

impl RunHistograms {
    /// Reads the runs that completed since the last feed, a page at a time.
    fn feed(&self, store: &dyn EventStore) -> databuild_log::Result<()> {
        let mut fed = self.fed.lock().expect("histograms lock");
        loop {
            let events = store.events(&EventFilter {
                since: Some(fed.after),
                kind: Some(Kind::JobRun),
                status: Some(Status::Completed),
                limit: Some(FEED_PAGE),
                ..EventFilter::default()
            })?;
            for e in &events {
                fed.observe(e);
            }
            if events.len() < FEED_PAGE {
                return Ok(());
            }
        }
    }

    fn write(&self, out: &mut String) {
        let fed = self.fed.lock().expect("histograms lock");
        let families = [
            (
                "databuild_job_run_duration_seconds",
                "Durations of completed job runs, by job.",
                &fed.duration,
                &DURATION_BUCKETS[..],
            ),
            (
                "databuild_job_run_max_rss_bytes",
                "Peak resident memory of completed job runs (their largest process), by job.",
                &fed.max_rss,
                &RSS_BUCKETS[..],
            ),
        ];
        for (name, help, by_job, bounds) in families {
            family(out, name, "histogram", help);
            for (job, h) in by_job {
                h.write(out, name, &label(&job.clone().into()), bounds);
            }
        }
    }
}

impl Fed {
    /// A completed run: its wall time as measured (or, of a run recorded before measures, from
    /// its start to its end), and its peak memory when known.
    fn observe(&mut self, e: &Event) {
        self.after = self.after.max(e.idx);
        let Some(job) = e.job.as_deref() else {
            return;
        };
        let resources = e.data.resources.unwrap_or_default();
        let seconds = match (resources.wall_ms, e.data.started_at) {
            (Some(ms), _) => Some(ms as f64 / 1000.0),
            (None, Some(started)) => Some((e.timestamp - started) as f64 / 1e9),
            (None, None) => None,
        };
        if let Some(s) = seconds {
            let h = self.duration.entry(job.to_string()).or_default();
            h.observe(&DURATION_BUCKETS, s);
        }
        if let Some(bytes) = resources.max_rss_bytes {
            let h = self.max_rss.entry(job.to_string()).or_default();
            h.observe(&RSS_BUCKETS, bytes as f64);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_counts_each_value_in_its_bucket_and_writes_them_cumulated() {
        let mut h = Histogram::default();
        for v in [0.003, 0.07, 2.0, 7200.0] {
            h.observe(&DURATION_BUCKETS, v);
        }
        let mut out = String::new();
        h.write(&mut out, "d", "j", &DURATION_BUCKETS);
        assert!(out.contains("d_bucket{job=\"j\",le=\"0.01\"} 1\n"), "{out}");
        assert!(out.contains("d_bucket{job=\"j\",le=\"0.1\"} 2\n"), "{out}");
        assert!(out.contains("d_bucket{job=\"j\",le=\"5\"} 3\n"), "{out}");
        assert!(out.contains("d_bucket{job=\"j\",le=\"3600\"} 3\n"), "{out}");
        assert!(out.contains("d_bucket{job=\"j\",le=\"+Inf\"} 4\n"), "{out}");
        assert!(out.contains("d_count{job=\"j\"} 4\n"), "{out}");
    }
}
