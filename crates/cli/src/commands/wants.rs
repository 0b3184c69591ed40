//! `want`, `wants`, `unwant`.

use std::process::ExitCode;

use serde_json::Value;

use crate::backend::Backend;
use crate::context::parse_refs;
use crate::output::{print_json, short_list, table, text, value};

pub fn want(
    backend: &Backend,
    args: &[String],
    ttl: Option<&str>,
    sla: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let refs: Vec<String> = parse_refs(args)?
        .into_iter()
        .map(|r| r.to_string())
        .collect();
    let v = value(&backend.want(&refs, ttl, sla)?);
    if json {
        print_json(&v)?;
    } else {
        println!(
            "want {} recorded: {} partition(s), expires {}{}; `databuild serve` builds them as soon as it can",
            text(&v["want_id"]),
            refs.len(),
            text(&v["expires_at"]),
            v["sla_seconds"]
                .as_u64()
                .map(|s| format!(", SLA {s}s after each day ends"))
                .unwrap_or_default()
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn list(
    backend: &Backend,
    status: Option<&str>,
    all: bool,
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let v = value(&backend.wants(status, all, limit)?);
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = v["wants"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|w: &Value| {
            let refs: Vec<String> = w["refs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            let misses = w["sla_missed"].as_u64().unwrap_or(0);
            vec![
                text(&w["want_id"]),
                text(&w["status"]),
                short_list(&refs, 2),
                format!(
                    "{}{}",
                    text(&w["message"]),
                    if misses > 0 {
                        format!(" ({misses} SLA miss(es))")
                    } else {
                        String::new()
                    }
                ),
                text(&w["updated_at"]),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["WANT", "STATUS", "PARTITIONS", "WHY", "SINCE"], &rows)
    );
    Ok(ExitCode::SUCCESS)
}

pub fn unwant(backend: &Backend, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let v = value(&backend.unwant(id)?);
    if json {
        print_json(&v)?;
    } else {
        println!("want {} withdrawn", text(&v["want_id"]));
    }
    Ok(ExitCode::SUCCESS)
}
