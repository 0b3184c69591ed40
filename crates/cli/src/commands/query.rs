//! Commands that read the event log: partitions, builds, events, jobs, runs, sql, cancel.

use std::io::Write;
use std::process::ExitCode;
use std::time::Duration;

use databuild_log::{EventFilter, PartitionQuery};
use serde_json::Value;

use crate::backend::Backend;
use crate::cli::PartitionStatusArg;
use crate::output::{
    count, millis_value, print_json, short_list, stdout, table, text, time_value, value,
};

fn list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

fn strings(v: &Value) -> Vec<String> {
    list(v).iter().map(text).collect()
}

pub fn partitions(
    backend: &Backend,
    pattern: Option<String>,
    status: Option<PartitionStatusArg>,
    limit: usize,
    after: Option<String>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let status_name = status.map(|s| match s {
        PartitionStatusArg::Live => "live",
        PartitionStatusArg::Stale => "stale",
        PartitionStatusArg::Building => "building",
        PartitionStatusArg::Failed => "failed",
        PartitionStatusArg::Tainted => "tainted",
    });
    let listed = status_name.and_then(databuild_exec::views::ListedStatus::parse);
    let query = PartitionQuery {
        pattern,
        status: listed.map(databuild_exec::views::ListedStatus::recorded),
        limit,
        after,
    };
    let page = value(&backend.partitions(&query, listed, status_name)?);
    if json {
        print_json(&page)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = list(&page["partitions"])
        .iter()
        .map(|r| {
            vec![
                text(&r["ref"]),
                text(&r["status"]),
                text(&r["job"]),
                text(&r["updated_at"]),
                text(&r["reason"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["REF", "STATUS", "JOB", "UPDATED", "WHY"], &rows)
    );
    if let Some(next) = page["next"].as_str() {
        println!("(more: --after '{next}')");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn builds(
    backend: &Backend,
    id: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let Some(id) = id else {
        let v = value(&backend.builds(limit)?);
        if json {
            print_json(&v)?;
            return Ok(ExitCode::SUCCESS);
        }
        let rows: Vec<Vec<String>> = list(&v["builds"])
            .iter()
            .map(|b| {
                vec![
                    text(&b["build_request_id"]),
                    text(&b["status"]),
                    time_value(&b["created_at"]),
                    short_list(&strings(&b["requested_partitions"]), 2),
                ]
            })
            .collect();
        print!(
            "{}",
            table(&["ID", "STATUS", "CREATED", "REQUESTED"], &rows)
        );
        return Ok(ExitCode::SUCCESS);
    };
    let b = value(&backend.build(id)?);
    if json {
        print_json(&b)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "build request {}: {}",
        text(&b["build_request_id"]),
        text(&b["status"])
    );
    println!(
        "  created {}, updated {}{}",
        time_value(&b["created_at"]),
        time_value(&b["updated_at"]),
        b["message"]
            .as_str()
            .map(|m| format!("; {m}"))
            .unwrap_or_default()
    );
    println!(
        "  requested: {}",
        strings(&b["requested_partitions"]).join(", ")
    );
    let partitions: Vec<Vec<String>> = list(&b["partitions"])
        .iter()
        .map(|p| vec![text(&p["ref"]), text(&p["status"])])
        .collect();
    if !partitions.is_empty() {
        print!("{}", indent(&table(&["PARTITION", "STATUS"], &partitions)));
    }
    let runs: Vec<Vec<String>> = list(&b["job_runs"])
        .iter()
        .map(|r| {
            vec![
                text(&r["job_run_id"]),
                text(&r["job"]),
                text(&r["status"]),
                duration(r),
            ]
        })
        .collect();
    if !runs.is_empty() {
        print!(
            "{}",
            indent(&table(&["RUN", "JOB", "STATUS", "TOOK"], &runs))
        );
    }
    Ok(ExitCode::SUCCESS)
}

fn duration(run: &Value) -> String {
    match (run["started_at_ns"].as_i64(), run["ended_at_ns"].as_i64()) {
        (Some(s), Some(e)) => crate::output::millis(Some((e - s) as f64 / 1e6)),
        _ => "-".to_string(),
    }
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn event_line(e: &Value) -> String {
    let subject: Vec<String> = [&e["partition_ref"], &e["job"]]
        .into_iter()
        .filter_map(|v| v.as_str().map(str::to_string))
        .collect();
    format!(
        "#{:<6} {}  {:<13} {:<18} {}{}{}",
        e["idx"],
        time_value(&e["timestamp"]),
        text(&e["kind"]),
        text(&e["status"]),
        subject.join(" "),
        e["delegated_to"]
            .as_str()
            .map(|d| format!(" -> {d}"))
            .unwrap_or_default(),
        e["message"]
            .as_str()
            .map(|m| format!("  ({m})"))
            .unwrap_or_default()
    )
}

pub fn events(
    backend: &Backend,
    mut filter: EventFilter,
    follow: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut out = stdout();
    let mut remaining = filter.limit;
    loop {
        // Pages of at most 1,000, as the service serves them.
        filter.limit = Some(remaining.unwrap_or(1000).min(1000));
        let page = value(&backend.events(&filter)?);
        let events = list(&page["events"]);
        for e in &events {
            if json {
                writeln!(out, "{}", serde_json::to_string(e)?)?;
            } else {
                writeln!(out, "{}", event_line(e))?;
            }
        }
        out.flush()?;
        if let Some(next) = page["next"].as_i64() {
            filter.since = Some(next);
        }
        if let Some(r) = remaining.as_mut() {
            *r = r.saturating_sub(events.len());
            if *r == 0 {
                return Ok(ExitCode::SUCCESS);
            }
        }
        if events.is_empty() {
            if !follow {
                return Ok(ExitCode::SUCCESS);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub fn jobs(backend: &Backend, name: Option<&str>, json: bool) -> anyhow::Result<ExitCode> {
    let v = match name {
        Some(n) => value(&backend.job(n)?),
        None => value(&backend.jobs()?),
    };
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let stats = match name {
        Some(_) => vec![v["job"].clone()],
        None => list(&v["jobs"]),
    };
    let rows: Vec<Vec<String>> = stats
        .iter()
        .map(|s| {
            vec![
                text(&s["job"]),
                s["runs"].to_string(),
                s["success_rate"]
                    .as_f64()
                    .map(|r| format!("{:.0}%", r * 100.0))
                    .unwrap_or_else(|| "-".to_string()),
                millis_value(&s["p50_ms"]),
                millis_value(&s["p95_ms"]),
                time_value(&s["last_run_at"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["JOB", "RUNS", "SUCCESS", "P50", "P95", "LAST RUN"], &rows)
    );
    let recent = list(&v["runs"]);
    if !recent.is_empty() {
        println!("\nrecent runs:");
        let rows: Vec<Vec<String>> = recent
            .iter()
            .map(|r| {
                vec![
                    text(&r["job_run_id"]),
                    text(&r["status"]),
                    duration(r),
                    short_list(&strings(&r["outputs"]), 2),
                ]
            })
            .collect();
        print!("{}", table(&["RUN", "STATUS", "TOOK", "OUTPUTS"], &rows));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn run(backend: &Backend, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let run = value(&backend.run(id)?);
    if json {
        print_json(&run)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "job run {}: job `{}`, {}",
        text(&run["job_run_id"]),
        text(&run["job"]),
        text(&run["status"])
    );
    println!("  build request: {}", text(&run["build_request_id"]));
    println!("  outputs: {}", strings(&run["outputs"]).join(", "));
    let inputs = strings(&run["inputs"]);
    println!(
        "  inputs: {}",
        if inputs.is_empty() {
            "-".to_string()
        } else {
            inputs.join(", ")
        }
    );
    let args = strings(&run["args"]);
    if !args.is_empty() {
        println!("  args: {}", args.join(" "));
    }
    if let Some(env) = run["env"].as_object() {
        for (k, v) in env {
            println!("  env: {k}={}", text(v));
        }
    }
    if run["started_at"].is_null() && !run["ended_at"].is_null() {
        println!(
            "  scheduled {}, never started, ended {}",
            time_value(&run["scheduled_at"]),
            time_value(&run["ended_at"])
        );
    } else {
        println!(
            "  scheduled {}, started {}, ended {}, took {}",
            time_value(&run["scheduled_at"]),
            time_value(&run["started_at"]),
            time_value(&run["ended_at"]),
            duration(&run)
        );
    }
    if let Some(code) = run["exit_code"].as_i64() {
        println!("  exit code: {code}");
    }
    if let Some(m) = run["message"].as_str() {
        println!("  message: {m}");
    }
    if let Some(r) = run["relies_on"].as_str() {
        println!("  skipped: relies on run {r}");
    }
    if let Some(log) = backend.run_log(id).ok().filter(|l| !l.is_empty()) {
        let lines: Vec<&str> = log.lines().collect();
        println!(
            "  log (last {} lines of {}):",
            lines.len().min(20),
            text(&run["log_path"])
        );
        for l in &lines[lines.len().saturating_sub(20)..] {
            println!("    {l}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn sql(
    backend: &Backend,
    query: &str,
    max_rows: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let result = value(&backend.sql(query, max_rows)?);
    if json {
        print_json(&result)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = list(&result["rows"])
        .iter()
        .map(|r| {
            list(r)
                .iter()
                .map(|v| match v {
                    Value::Null => "NULL".to_string(),
                    other => text(other),
                })
                .collect()
        })
        .collect();
    let headers = strings(&result["columns"]);
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    print!("{}", table(&headers, &rows));
    println!(
        "({}{})",
        count(rows.len(), "row"),
        if result["truncated"].as_bool() == Some(true) {
            ", cut at --max-rows"
        } else {
            ""
        }
    );
    Ok(ExitCode::SUCCESS)
}

pub fn cancel(backend: &Backend, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let v = backend.cancel(id)?;
    if json {
        print_json(&v)?;
    } else {
        println!("cancelled build request {id}");
    }
    Ok(ExitCode::SUCCESS)
}

pub fn datasets(backend: &Backend, json: bool) -> anyhow::Result<ExitCode> {
    let v = value(&backend.datasets()?);
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = list(&v["datasets"])
        .iter()
        .map(|d| {
            let counts = d["partitions"]
                .as_object()
                .map(|m| {
                    m.iter()
                        .map(|(k, n)| format!("{n} {k}"))
                        .collect::<Vec<_>>()
                        .join(", ")
                })
                .filter(|s| !s.is_empty())
                .unwrap_or_else(|| "-".to_string());
            vec![
                text(&d["name"]),
                text(&d["kind"]),
                text(&d["pattern"]),
                counts,
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["NAME", "KIND", "PATTERN", "PARTITIONS"], &rows)
    );
    Ok(ExitCode::SUCCESS)
}
