//! `GET /metrics`: Prometheus text, read from the event log's projections.

use std::fmt::Write;
use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use databuild_log::SqlLimits;

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
        family(&mut out, "databuild_build_requests", "gauge", "Build requests by status.");
        for row in q("SELECT status, count(*) FROM build_requests GROUP BY status")?.rows {
            let _ = writeln!(out, "databuild_build_requests{{status=\"{}\"}} {}", label(&row[0]), row[1]);
        }
        family(&mut out, "databuild_job_runs", "gauge", "Job runs by job and status.");
        for row in q("SELECT job, status, count(*) FROM job_runs GROUP BY job, status")?.rows {
            let _ = writeln!(
                out,
                "databuild_job_runs{{job=\"{}\",status=\"{}\"}} {}",
                label(&row[0]),
                label(&row[1]),
                row[2]
            );
        }
        family(&mut out, "databuild_job_run_duration_seconds", "summary", "Durations of completed job runs.");
        for row in q("SELECT job, count(*), coalesce(sum(ended_at - started_at), 0) / 1e9 FROM job_runs WHERE status = 'completed' AND started_at IS NOT NULL AND ended_at IS NOT NULL GROUP BY job")?.rows {
            let job = label(&row[0]);
            let _ = writeln!(out, "databuild_job_run_duration_seconds_count{{job=\"{job}\"}} {}", row[1]);
            let _ = writeln!(out, "databuild_job_run_duration_seconds_sum{{job=\"{job}\"}} {}", row[2]);
        }
        family(&mut out, "databuild_partitions", "gauge", "Partitions known to the log, by status.");
        for row in q("SELECT status, count(*) FROM partitions GROUP BY status")?.rows {
            let _ = writeln!(out, "databuild_partitions{{status=\"{}\"}} {}", label(&row[0]), row[1]);
        }
        family(&mut out, "databuild_check_results", "gauge", "Partitions by the latest result of each check (passed, failed), per job.");
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
        family(&mut out, "databuild_events", "counter", "Events in the log (its last index).");
        let _ = writeln!(out, "databuild_events {}", engine.store.last_idx()?);
        Ok(out)
    })
    .await??;
    Ok(([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], text))
}
