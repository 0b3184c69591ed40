//! `status`, `explain`, `taint`: what the engine knows about partitions.

use std::process::ExitCode;

use databuild_exec::Engine;

use crate::context::{engine_error, parse_refs};
use crate::output::{print_json, table, time};

fn expand(args: &[String]) -> anyhow::Result<Vec<String>> {
    Ok(parse_refs(args)?
        .into_iter()
        .map(|r| r.to_string())
        .collect())
}

pub fn status(engine: &Engine, args: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let reports = engine.status(&expand(args)?).map_err(engine_error)?;
    if json {
        print_json(&reports)?;
    } else {
        let rows: Vec<Vec<String>> = reports
            .iter()
            .map(|r| {
                vec![
                    r.partition_ref.clone(),
                    r.status.to_string(),
                    r.reasons.join("; "),
                ]
            })
            .collect();
        print!("{}", table(&["REF", "STATUS", "WHY"], &rows));
    }
    Ok(ExitCode::SUCCESS)
}

pub fn explain(engine: &Engine, r: &str, json: bool) -> anyhow::Result<ExitCode> {
    let r = databuild_core::PartitionRef::new(r).map_err(|e| crate::UserError(e.to_string()))?;
    let x = engine.explain(r.as_str()).map_err(engine_error)?;
    if json {
        print_json(&x)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!("{}: {}", x.status.partition_ref, x.status.status);
    for reason in &x.status.reasons {
        println!("  because {reason}");
    }
    if let Some(p) = &x.producer {
        println!("  produced by {} `{}` ({})", p.kind, p.name, p.pattern);
    }
    if let Some(run) = &x.run {
        println!(
            "  run {}: job `{}`, {} (build request {}), started {}, ended {}{}",
            run.job_run_id,
            run.job,
            run.status,
            run.build_request_id.as_deref().unwrap_or("-"),
            time(run.started_at),
            time(run.ended_at),
            run.exit_code
                .map(|c| format!(", exit {c}"))
                .unwrap_or_default()
        );
        if !run.args.is_empty() {
            println!("  args: {}", run.args.join(" "));
        }
    }
    if !x.inputs.is_empty() {
        println!("  inputs now:");
        for i in &x.inputs {
            println!("    {}  {}", i.partition_ref, i.status);
        }
    }
    if !x.to_build.is_empty() {
        println!(
            "  to build it, a build would run {} job run(s):",
            x.to_build.len()
        );
        for step in x.to_build.iter().take(20) {
            println!("    {}  {}", step.job, step.outputs.join(", "));
        }
    }
    if !x.history.is_empty() {
        println!("  history:");
        for e in &x.history {
            println!(
                "    #{}  {}  {} {}{}",
                e.idx,
                time(Some(e.timestamp)),
                e.kind,
                e.status,
                e.message
                    .as_ref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            );
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn taint(
    engine: &Engine,
    args: &[String],
    reason: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let events = engine.taint(&expand(args)?, reason).map_err(engine_error)?;
    if json {
        for e in &events {
            println!("{}", e.to_json_line());
        }
    } else {
        for e in &events {
            println!("tainted {}", e.partition_ref.as_deref().unwrap_or_default());
        }
    }
    Ok(ExitCode::SUCCESS)
}
