//! `status`, `explain`, `taint`: what is known about partitions.

use std::process::ExitCode;

use serde_json::Value;

use crate::backend::Backend;
use crate::context::parse_refs;
use crate::output::{print_json, table, text, time_value, value};

fn expand(args: &[String]) -> anyhow::Result<Vec<String>> {
    Ok(parse_refs(args)?
        .into_iter()
        .map(|r| r.to_string())
        .collect())
}

fn reasons(v: &Value) -> String {
    v["reasons"]
        .as_array()
        .map(|r| r.iter().map(text).collect::<Vec<_>>().join("; "))
        .unwrap_or_default()
}

pub fn status(backend: &Backend, args: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let reports = expand(args)?
        .iter()
        .map(|r| backend.status(r))
        .collect::<Result<Vec<_>, _>>()?;
    let reports = value(&reports);
    if json {
        print_json(&reports)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = reports
        .as_array()
        .into_iter()
        .flatten()
        .map(|r| vec![text(&r["ref"]), text(&r["status"]), reasons(r)])
        .collect();
    print!("{}", table(&["REF", "STATUS", "WHY"], &rows));
    if rows.len() > 1 {
        println!("{}", status_summary(rows.iter().map(|r| r[1].as_str())));
    }
    Ok(ExitCode::SUCCESS)
}

/// `3 refs: 1 live, 2 stale`, in the order statuses first appear.
fn status_summary<'a>(statuses: impl Iterator<Item = &'a str>) -> String {
    let mut counts: Vec<(&str, usize)> = Vec::new();
    let mut total = 0;
    for s in statuses {
        total += 1;
        match counts.iter_mut().find(|(name, _)| *name == s) {
            Some((_, n)) => *n += 1,
            None => counts.push((s, 1)),
        }
    }
    let parts: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    format!("{total} refs: {}", parts.join(", "))
}

pub fn explain(backend: &Backend, r: &str, json: bool) -> anyhow::Result<ExitCode> {
    databuild_core::PartitionRef::new(r).map_err(|e| crate::UserError(e.to_string()))?;
    let x = value(&backend.explain(r)?);
    if json {
        print_json(&x)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}: {}", text(&x["ref"]), text(&x["status"]));
    for reason in x["reasons"].as_array().into_iter().flatten() {
        println!("  because {}", text(reason));
    }
    if x["producer"].is_object() {
        let p = &x["producer"];
        println!(
            "  produced by {} `{}` ({})",
            text(&p["kind"]),
            text(&p["name"]),
            text(&p["pattern"])
        );
    }
    let run = &x["run"];
    if run.is_object() {
        println!(
            "  run {}: job `{}`, {} (build request {}), started {}, ended {}{}",
            text(&run["job_run_id"]),
            text(&run["job"]),
            text(&run["status"]),
            text(&run["build_request_id"]),
            time_value(&run["started_at"]),
            time_value(&run["ended_at"]),
            run["exit_code"]
                .as_i64()
                .map(|c| format!(", exit {c}"))
                .unwrap_or_default()
        );
        let args: Vec<String> = run["args"]
            .as_array()
            .into_iter()
            .flatten()
            .map(text)
            .collect();
        if !args.is_empty() {
            println!("  args: {}", args.join(" "));
        }
    }
    for w in x["wants"].as_array().into_iter().flatten() {
        println!(
            "  wanted by want {} ({}{}): {} since {}",
            text(&w["want_id"]),
            text(&w["status"]),
            w["sla_seconds"]
                .as_u64()
                .map(|s| format!(", SLA {s}s"))
                .unwrap_or_default(),
            text(&w["message"]),
            time_value(&w["updated_at"])
        );
    }
    let report = &x["report"];
    if let Some(provenance) = report["provenance"].as_str() {
        println!("  provenance: {provenance}");
    }
    if let Some(fields) = report.as_object() {
        let counts: Vec<String> = fields
            .iter()
            .filter(|(k, v)| v.is_number() && k.as_str() != "provenance")
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        if !counts.is_empty() {
            println!("  reported: {}", counts.join(", "));
        }
    }
    let inputs = x["inputs"].as_array().cloned().unwrap_or_default();
    if !inputs.is_empty() {
        println!("  inputs now:");
        for i in &inputs {
            println!("    {}  {}", text(&i["ref"]), text(&i["status"]));
        }
    }
    let steps = x["to_build"].as_array().cloned().unwrap_or_default();
    if !steps.is_empty() {
        println!(
            "  to build it, a build would run {} job run(s):",
            steps.len()
        );
        for step in steps.iter().take(20) {
            let outputs: Vec<String> = step["outputs"]
                .as_array()
                .into_iter()
                .flatten()
                .map(text)
                .collect();
            println!("    {}  {}", text(&step["job"]), outputs.join(", "));
        }
    }
    let history = x["history"].as_array().cloned().unwrap_or_default();
    if !history.is_empty() {
        println!("  history:");
        for e in &history {
            println!(
                "    #{}  {}  {} {}{}",
                e["idx"],
                time_value(&e["timestamp"]),
                text(&e["kind"]),
                text(&e["status"]),
                e["message"]
                    .as_str()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn taint(
    backend: &Backend,
    args: &[String],
    reason: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let answer = value(&backend.taint(&expand(args)?, reason)?);
    let events = answer["events"].as_array().cloned().unwrap_or_default();
    for e in &events {
        if json {
            println!("{}", serde_json::to_string(e)?);
        } else {
            println!("tainted {}", text(&e["partition_ref"]));
        }
    }
    Ok(ExitCode::SUCCESS)
}
