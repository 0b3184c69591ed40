//! `want`, `wants`, `unwant`.

use std::process::ExitCode;

use databuild_service::client::WantTerms;

use crate::backend::Backend;
use crate::cli::{UnwantArgs, WantArgs, WantsArgs};
use crate::context::parse_refs;
use crate::output::{out, outln, print_json, short_list, table};

pub fn want(
    backend: &Backend,
    WantArgs {
        refs: args,
        ttl,
        sla,
        by,
    }: &WantArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let refs: Vec<String> = parse_refs(backend, args)?
        .into_iter()
        .map(|r| r.to_string())
        .collect();
    let terms = WantTerms {
        ttl: ttl.as_deref(),
        sla: sla.as_deref(),
        by: by.as_deref(),
    };
    let v = backend.want(&refs, terms)?;
    if json {
        print_json(&v)?;
    } else {
        outln!(
            "want {} recorded: {} partition(s), expires {}{}{}; `databuild serve` builds them as soon as it can",
            v.want_id,
            refs.len(),
            v.expires_at.as_deref().unwrap_or_default(),
            v.sla_seconds
                .map(|s| format!(", SLA {s}s after each day ends"))
                .unwrap_or_default(),
            v.risk
                .deadline
                .as_deref()
                .map(|d| format!(", due by {d}"))
                .unwrap_or_default()
        )?;
        if let Some(why) = &v.risk.at_risk_reason {
            outln!("at risk: {why}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `wants`: a list, or (with an ID) one want.
pub fn wants(backend: &Backend, args: &WantsArgs, json: bool) -> anyhow::Result<ExitCode> {
    match &args.id {
        Some(id) => show(backend, id, json),
        None => list(backend, args.status.as_deref(), args.all, args.limit, json),
    }
}

fn list(
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
                ) + &w
                    .risk
                    .at_risk_reason
                    .as_deref()
                    .map(|r| format!(" (at risk: {r})"))
                    .unwrap_or_default(),
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

/// One want: the tree of builds and runs that made its partitions, and what the others wait for.
fn show(backend: &Backend, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let w = backend.want_detail(id)?;
    if json {
        print_json(&w)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "want {} {}: {} partition(s), {} not live{}",
        w.want_id,
        w.status,
        w.refs.len(),
        w.waiting.len(),
        w.message
            .as_deref()
            .map(|m| format!(" ({m})"))
            .unwrap_or_default()
    )?;
    match (&w.risk.expected_satisfied_at, &w.risk.expected_unknown) {
        (Some(at), _) => outln!("expected satisfied at {at}")?,
        (None, Some(why)) => outln!("expected satisfied: not known ({why})")?,
        (None, None) => {}
    }
    if let Some(why) = &w.risk.at_risk_reason {
        outln!("at risk: {why}")?;
    }
    let short = databuild_log::short_id;
    for b in &w.fulfillment {
        outln!(
            "build {} {}",
            b.build_request_id.as_deref().map_or("(none)", short),
            b.status.map(|s| s.to_string()).unwrap_or_default()
        )?;
        for (i, r) in b.runs.iter().enumerate() {
            let last = i + 1 == b.runs.len();
            outln!(
                "{}run {} of `{}` {}: {}",
                if last { "└── " } else { "├── " },
                short(&r.job_run_id),
                r.job,
                r.status,
                r.partitions.join(", ")
            )?;
            for input in &r.inputs {
                outln!(
                    "{}    read {} built by run {} (build {})",
                    if last { " " } else { "│" },
                    input.partition_ref,
                    short(&input.job_run_id),
                    input.build_request_id.as_deref().map_or("?", short)
                )?;
            }
        }
    }
    for p in &w.waiting {
        outln!(
            "waiting {} ({}): {}",
            p.partition_ref,
            p.status,
            p.waits_for
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn unwant(
    backend: &Backend,
    UnwantArgs { id }: &UnwantArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let v = backend.unwant(id)?;
    if json {
        print_json(&v)?;
    } else {
        outln!("want {} withdrawn", v.want_id)?;
    }
    Ok(ExitCode::SUCCESS)
}
