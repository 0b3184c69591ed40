//! `forecast`: when partitions not live are expected to be, and the steps that decide it.

use std::process::ExitCode;

use databuild_core::cadence::span;
use databuild_exec::answers::{Forecast, ForecastStep};

use crate::backend::Backend;
use crate::cli::ForecastArgs;
use crate::context::parse_refs;
use crate::output::{outln, print_json};

pub fn run(backend: &Backend, args: &ForecastArgs, json: bool) -> anyhow::Result<ExitCode> {
    let forecasts = parse_refs(backend, &args.refs)?
        .iter()
        .map(|r| backend.forecast(r.as_str()))
        .collect::<Result<Vec<_>, _>>()?;
    if json {
        print_json(&forecasts)?;
        return Ok(ExitCode::SUCCESS);
    }
    for f in &forecasts {
        outln!("{}", headline(f))?;
        for step in &f.basis {
            outln!("  {}", step_line(step))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `REF: STATUS, expected at T (by T)`, `LATE` when an input is past its p90, or why not known.
fn headline(f: &Forecast) -> String {
    let late = if f.late { " LATE" } else { "" };
    match (&f.expected_at, &f.expected_by, &f.reason) {
        (Some(at), Some(by), _) => {
            format!(
                "{}: {}, expected at {at} (by {by}){late}",
                f.partition_ref, f.status
            )
        }
        (_, _, Some(why)) => format!(
            "{}: {}, no forecast{late}: {why}",
            f.partition_ref, f.status
        ),
        _ => format!("{}: {}", f.partition_ref, f.status),
    }
}

fn ms(v: f64) -> String {
    span((v * 1e6) as i64)
}

fn step_line(step: &ForecastStep) -> String {
    match step {
        ForecastStep::External {
            partition_ref,
            dataset,
            cadence,
            expected_at,
            expected_by,
            late,
            reason,
            ..
        } => {
            let when = match (expected_at, expected_by) {
                (Some(at), Some(by)) => format!("expected at {at} (by {by})"),
                _ => format!("not expected: {}", reason.as_deref().unwrap_or("unknown")),
            };
            let late = if *late { ", LATE" } else { "" };
            let cadence = cadence.as_ref().map_or(String::new(), |c| format!("; {c}"));
            format!("input {partition_ref} (dataset `{dataset}`): {when}{late}{cadence}")
        }
        ForecastStep::Running {
            job_run_id,
            job,
            status,
            expected_end_at,
            ..
        } => format!(
            "run {job_run_id} of job `{job}`, {status}: ends {}",
            expected_end_at
                .as_deref()
                .map_or("at a time not known".to_string(), |t| format!("at {t}"))
        ),
        ForecastStep::Job {
            job,
            runs,
            p50_ms,
            p90_ms,
            timed_runs,
        } => match (p50_ms, p90_ms) {
            (Some(p50), Some(p90)) => format!(
                "job `{job}`: {runs} run(s) to go, p50 {}, p90 {} (of {timed_runs} runs)",
                ms(*p50),
                ms(*p90)
            ),
            _ => format!("job `{job}`: {runs} run(s) to go, never timed"),
        },
        ForecastStep::QueueWait { parallel, ms: wait } => {
            format!("queue wait at {parallel} runs at once: {}", ms(*wait))
        }
        ForecastStep::CriticalPath { ms: path } => format!("critical path: {}", ms(*path)),
    }
}
