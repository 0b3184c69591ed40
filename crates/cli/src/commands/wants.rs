//! `want`, `wants`, `unwant`.

use std::process::ExitCode;

use crate::backend::Backend;
use crate::context::parse_refs;
use crate::output::{out, outln, print_json, short_list, table};

pub fn want(
    backend: &Backend,
    args: &[String],
    ttl: Option<&str>,
    sla: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let refs: Vec<String> = parse_refs(backend, args)?
        .into_iter()
        .map(|r| r.to_string())
        .collect();
    let v = backend.want(&refs, ttl, sla)?;
    if json {
        print_json(&v)?;
    } else {
        outln!(
            "want {} recorded: {} partition(s), expires {}{}; `databuild serve` builds them as soon as it can",
            v.want_id,
            refs.len(),
            v.expires_at.as_deref().unwrap_or_default(),
            v.sla_seconds
                .map(|s| format!(", SLA {s}s after each day ends"))
                .unwrap_or_default()
        )?;
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
    let v = backend.wants(status, all, limit)?;
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = v
        .wants
        .iter()
        .map(|w| {
            let misses = w.sla_missed;
            vec![
                w.want_id.clone(),
                w.status.to_string(),
                short_list(&w.refs, 2),
                format!(
                    "{}{}",
                    w.message.as_deref().unwrap_or_default(),
                    if misses > 0 {
                        format!(" ({misses} SLA miss(es))")
                    } else {
                        String::new()
                    }
                ),
                w.updated_at.clone(),
            ]
        })
        .collect();
    out!(
        "{}",
        table(&["WANT", "STATUS", "PARTITIONS", "WHY", "SINCE"], &rows)
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn unwant(backend: &Backend, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let v = backend.unwant(id)?;
    if json {
        print_json(&v)?;
    } else {
        outln!("want {} withdrawn", v.want_id)?;
    }
    Ok(ExitCode::SUCCESS)
}
