use std::io::Write;
use std::process::ExitCode;

use databuild_core::{Plan, PlanRequest, PlannedRun};
use databuild_exec::Engine;
use serde::Serialize;

use crate::context::{engine_error, parse_refs};
use crate::output::{count, print_json, short_list, stdout};
use crate::UserError;

/// The `--json` shape of contract section 4.
#[derive(Serialize)]
struct AnalyzeJson<'p> {
    build_request_id: &'p str,
    job_runs: &'p [PlannedRun],
    skipped: Vec<&'p str>,
    delegated: Vec<&'p str>,
    missing: Vec<&'p str>,
    delegations: &'p [databuild_core::plan::Delegation],
    missing_details: &'p [databuild_core::plan::MissingExternal],
}

pub fn run(engine: &Engine, args: &[String], limit: usize, json: bool) -> anyhow::Result<ExitCode> {
    let refs = parse_refs(args)?;
    let request = PlanRequest {
        refs,
        ..Default::default()
    };
    let analysis = engine.analyze(&request).map_err(engine_error)?;
    let plan = &analysis.plan;
    if json {
        print_json(&AnalyzeJson {
            build_request_id: &analysis.build_request_id,
            job_runs: &plan.runs,
            skipped: plan.skipped.iter().map(|r| r.as_str()).collect(),
            delegated: plan
                .delegated
                .iter()
                .map(|d| d.partition_ref.as_str())
                .collect(),
            missing: plan
                .missing
                .iter()
                .map(|m| m.partition_ref.as_str())
                .collect(),
            delegations: &plan.delegated,
            missing_details: &plan.missing,
        })?;
    } else {
        print_plan(plan, request.refs.len(), limit)?;
    }
    if let Some(first) = plan.missing.first() {
        let who = first
            .needed_by
            .as_ref()
            .map(|n| format!(", needed by {n}"))
            .unwrap_or_default();
        return Err(UserError(format!(
            "cannot build: external partition `{}` of dataset `{}` is not available{who}{}",
            first.partition_ref,
            first.dataset,
            match plan.missing.len() {
                1 => String::new(),
                n => format!(" ({n} missing in all)"),
            }
        ))
        .into());
    }
    Ok(ExitCode::SUCCESS)
}

fn print_plan(plan: &Plan, requested: usize, limit: usize) -> std::io::Result<()> {
    let mut out = stdout();
    writeln!(
        out,
        "{} for {}: {} skipped (live), {} delegated, {} missing",
        count(plan.runs.len(), "job run"),
        count(requested, "requested partition"),
        plan.skipped.len(),
        plan.delegated.len(),
        plan.missing.len(),
    )?;
    let limit = if limit == 0 { usize::MAX } else { limit };
    let shown = limit.min(plan.runs.len());
    let width = plan.runs[..shown]
        .iter()
        .map(|r| r.job.len())
        .max()
        .unwrap_or(0);
    for (i, run) in plan.runs[..shown].iter().enumerate() {
        let outputs: Vec<&str> = run.outputs.iter().map(|o| o.as_str()).collect();
        let inputs: Vec<&str> = run.inputs.iter().map(|o| o.as_str()).collect();
        writeln!(
            out,
            "  {:>4}  {:width$}  {}{}",
            i + 1,
            run.job,
            short_list(&outputs, 3),
            if inputs.is_empty() {
                String::new()
            } else {
                format!("  <- {}", short_list(&inputs, 3))
            }
        )?;
    }
    if shown < plan.runs.len() {
        writeln!(
            out,
            "  ... {} more (--limit 0 lists all, --json gives every detail)",
            count(plan.runs.len() - shown, "job run")
        )?;
    }
    for d in plan.delegated.iter().take(limit) {
        writeln!(
            out,
            "  delegated  {}  (being built by {})",
            d.partition_ref, d.build_request_id
        )?;
    }
    for m in plan.missing.iter().take(limit) {
        writeln!(
            out,
            "  missing    {}  (external dataset `{}`)",
            m.partition_ref, m.dataset
        )?;
    }
    out.flush()
}
