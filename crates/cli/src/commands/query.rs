//! Commands that read the event log directly: partitions, builds, events, jobs, runs, sql.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use databuild_exec::Engine;
use databuild_log::{BuildQuery, Event, EventFilter, PartitionQuery, RunQuery, SqlLimits, Status};
use serde::Serialize;

use crate::cli::PartitionStatusArg;
use crate::context::log_error;
use crate::output::{count, millis, print_json, stdout, table, time};
use crate::UserError;

/// The user-facing name of a stored partition status.
fn shown(status: Status) -> &'static str {
    match status {
        Status::Available => "live",
        other => other.as_str(),
    }
}

pub fn partitions(
    engine: &Engine,
    pattern: Option<String>,
    status: Option<PartitionStatusArg>,
    limit: usize,
    after: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let status = status.map(|s| match s {
        PartitionStatusArg::Live => Status::Available,
        PartitionStatusArg::Building => Status::Building,
        PartitionStatusArg::Failed => Status::Failed,
        PartitionStatusArg::Tainted => Status::Tainted,
    });
    let rows = engine
        .store
        .partitions(&PartitionQuery {
            pattern,
            status,
            limit,
            after,
        })
        .map_err(log_error)?;
    if json {
        #[derive(Serialize)]
        struct Row<'a> {
            #[serde(rename = "ref")]
            partition_ref: &'a str,
            status: &'static str,
            job: Option<&'a str>,
            built_by: Option<&'a str>,
            build_request_id: Option<&'a str>,
            updated_at: String,
        }
        #[derive(Serialize)]
        struct Page<'a> {
            partitions: Vec<Row<'a>>,
            next: Option<&'a str>,
        }
        let next = (rows.len() == limit)
            .then(|| rows.last().map(|r| r.partition_ref.as_str()))
            .flatten();
        print_json(&Page {
            partitions: rows
                .iter()
                .map(|r| Row {
                    partition_ref: &r.partition_ref,
                    status: shown(r.status),
                    job: r.job.as_deref(),
                    built_by: r.job_run_id.as_deref(),
                    build_request_id: r.build_request_id.as_deref(),
                    updated_at: time(Some(r.updated_at)),
                })
                .collect(),
            next,
        })?;
        return Ok(ExitCode::SUCCESS);
    }
    let table_rows: Vec<Vec<String>> = rows
        .iter()
        .map(|r| {
            vec![
                r.partition_ref.clone(),
                shown(r.status).to_string(),
                r.job.clone().unwrap_or_default(),
                time(Some(r.updated_at)),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["REF", "STATUS", "JOB", "UPDATED"], &table_rows)
    );
    if rows.len() == limit {
        if let Some(last) = rows.last() {
            println!("(more: --after '{}')", last.partition_ref);
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn builds(
    engine: &Engine,
    id: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let store = &engine.store;
    let Some(id) = id else {
        let rows = store
            .build_requests(&BuildQuery {
                limit,
                ..Default::default()
            })
            .map_err(log_error)?;
        if json {
            print_json(&serde_json::json!({ "builds": rows }))?;
        } else {
            let t: Vec<Vec<String>> = rows
                .iter()
                .map(|b| {
                    vec![
                        b.build_request_id.clone(),
                        b.status.to_string(),
                        time(Some(b.created_at)),
                        crate::output::short_list(&b.requested_partitions, 2),
                    ]
                })
                .collect();
            print!("{}", table(&["ID", "STATUS", "CREATED", "REQUESTED"], &t));
        }
        return Ok(ExitCode::SUCCESS);
    };
    let build = store
        .build_request(id)
        .map_err(log_error)?
        .ok_or_else(|| UserError(format!("no build request `{id}` in the event log")))?;
    let partitions = store.request_partitions(id).map_err(log_error)?;
    let runs = store
        .job_runs(&RunQuery {
            build_request_id: Some(id.to_string()),
            limit: 100_000,
            ..Default::default()
        })
        .map_err(log_error)?;
    if json {
        let mut v = serde_json::to_value(&build)?;
        v["partitions"] = serde_json::to_value(&partitions)?;
        v["job_runs"] = serde_json::to_value(&runs)?;
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("build request {}: {}", build.build_request_id, build.status);
    println!(
        "  created {}, updated {}{}",
        time(Some(build.created_at)),
        time(Some(build.updated_at)),
        build
            .message
            .as_ref()
            .map(|m| format!("; {m}"))
            .unwrap_or_default()
    );
    println!("  requested: {}", build.requested_partitions.join(", "));
    if !partitions.is_empty() {
        let t: Vec<Vec<String>> = partitions
            .iter()
            .map(|p| vec![p.partition_ref.clone(), p.status.to_string()])
            .collect();
        print!("{}", indent(&table(&["PARTITION", "STATUS"], &t)));
    }
    if !runs.is_empty() {
        let t: Vec<Vec<String>> = runs
            .iter()
            .map(|r| {
                vec![
                    r.job_run_id.clone(),
                    r.job.clone(),
                    r.status.to_string(),
                    millis(r.duration_ms()),
                ]
            })
            .collect();
        print!("{}", indent(&table(&["RUN", "JOB", "STATUS", "TOOK"], &t)));
    }
    Ok(ExitCode::SUCCESS)
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn event_line(e: &Event) -> String {
    let subject = [
        e.partition_ref.as_deref(),
        e.job.as_deref(),
        e.job_run_id.as_deref().map(|_| ""),
    ]
    .into_iter()
    .flatten()
    .filter(|s| !s.is_empty())
    .collect::<Vec<_>>()
    .join(" ");
    format!(
        "#{:<6} {}  {:<13} {:<18} {}{}{}",
        e.idx,
        time(Some(e.timestamp)),
        e.kind.as_str(),
        e.status.as_str(),
        subject,
        e.delegated_to
            .as_ref()
            .map(|d| format!(" -> {d}"))
            .unwrap_or_default(),
        e.message
            .as_ref()
            .map(|m| format!("  ({m})"))
            .unwrap_or_default()
    )
}

pub fn events(
    engine: &Engine,
    mut filter: EventFilter,
    follow: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut out = stdout();
    loop {
        let events = engine.store.events(&filter).map_err(log_error)?;
        for e in &events {
            if json {
                writeln!(out, "{}", e.to_json_line())?;
            } else {
                writeln!(out, "{}", event_line(e))?;
            }
        }
        out.flush()?;
        if let Some(last) = events.last() {
            filter.since = Some(last.idx);
        }
        if !follow {
            return Ok(ExitCode::SUCCESS);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

pub fn jobs(engine: &Engine, name: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    if let Some(name) = name {
        if engine.graph.job(name).is_none() {
            return Err(UserError(format!("no job `{name}` in the graph")).into());
        }
    }
    let stats = engine.store.job_stats(name).map_err(log_error)?;
    let recent = match name {
        Some(job) => engine
            .store
            .job_runs(&RunQuery {
                job: Some(job.to_string()),
                limit: 20,
                ..Default::default()
            })
            .map_err(log_error)?,
        None => Vec::new(),
    };
    if json {
        match name {
            Some(_) => print_json(&serde_json::json!({
                "job": stats.first(),
                "runs": recent,
            }))?,
            None => print_json(&serde_json::json!({ "jobs": stats }))?,
        }
        return Ok(ExitCode::SUCCESS);
    }
    // Every job of the graph appears, even those that never ran.
    let names: Vec<&str> = match name {
        Some(n) => vec![n],
        None => engine.graph.jobs.iter().map(|j| j.name.as_str()).collect(),
    };
    let rows: Vec<Vec<String>> = names
        .iter()
        .map(|n| match stats.iter().find(|s| s.job == *n) {
            Some(s) => vec![
                n.to_string(),
                s.runs.to_string(),
                s.success_rate
                    .map(|r| format!("{:.0}%", r * 100.0))
                    .unwrap_or_else(|| "-".to_string()),
                millis(s.p50_ms),
                millis(s.p95_ms),
                time(s.last_run_at),
            ],
            None => vec![
                n.to_string(),
                "0".into(),
                "-".into(),
                "-".into(),
                "-".into(),
                "-".into(),
            ],
        })
        .collect();
    print!(
        "{}",
        table(&["JOB", "RUNS", "SUCCESS", "P50", "P95", "LAST RUN"], &rows)
    );
    if !recent.is_empty() {
        println!("\nrecent runs:");
        let t: Vec<Vec<String>> = recent
            .iter()
            .map(|r| {
                vec![
                    r.job_run_id.clone(),
                    r.status.to_string(),
                    millis(r.duration_ms()),
                    crate::output::short_list(&r.outputs, 2),
                ]
            })
            .collect();
        print!("{}", table(&["RUN", "STATUS", "TOOK", "OUTPUTS"], &t));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(engine: &Engine, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let run = engine
        .store
        .job_run(id)
        .map_err(log_error)?
        .ok_or_else(|| UserError(format!("no job run `{id}` in the event log")))?;
    if json {
        print_json(&run)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "job run {}: job `{}`, {}",
        run.job_run_id, run.job, run.status
    );
    println!(
        "  build request: {}",
        run.build_request_id.as_deref().unwrap_or("-")
    );
    println!("  outputs: {}", run.outputs.join(", "));
    println!(
        "  inputs: {}",
        if run.inputs.is_empty() {
            "-".to_string()
        } else {
            run.inputs.join(", ")
        }
    );
    if !run.args.is_empty() {
        println!("  args: {}", run.args.join(" "));
    }
    for (k, v) in &run.env {
        println!("  env: {k}={v}");
    }
    println!(
        "  scheduled {}, started {}, ended {}, took {}",
        time(run.scheduled_at),
        time(run.started_at),
        time(run.ended_at),
        millis(run.duration_ms())
    );
    if let Some(code) = run.exit_code {
        println!("  exit code: {code}");
    }
    if let Some(m) = &run.message {
        println!("  message: {m}");
    }
    if let Some(r) = &run.relies_on {
        println!("  skipped: relies on run {r}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn sql(engine: &Engine, query: &str, max_rows: usize, json: bool) -> anyhow::Result<ExitCode> {
    let result = engine
        .store
        .sql(
            query,
            SqlLimits {
                max_rows,
                ..Default::default()
            },
        )
        .map_err(log_error)?;
    if json {
        print_json(&result)?;
    } else {
        let rows: Vec<Vec<String>> = result
            .rows
            .iter()
            .map(|r| {
                r.iter()
                    .map(|v| match v {
                        serde_json::Value::String(s) => s.clone(),
                        serde_json::Value::Null => "NULL".to_string(),
                        other => other.to_string(),
                    })
                    .collect()
            })
            .collect();
        let headers: Vec<&str> = result.columns.iter().map(String::as_str).collect();
        print!("{}", table(&headers, &rows));
        println!(
            "({}{})",
            count(result.rows.len(), "row"),
            if result.truncated {
                ", cut at --max-rows"
            } else {
                ""
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}
