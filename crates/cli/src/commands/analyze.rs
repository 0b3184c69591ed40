use std::io::Write;
use std::process::ExitCode;

use databuild_core::{Plan, PlanRequest};
use databuild_exec::views::AnalyzeView;
use serde_json::{json, Value};

use crate::backend::Backend;
use crate::context::{engine_error, parse_refs};
use crate::output::{count, print_json, short_list, stdout, text};
use crate::UserError;

/// What the human output shows of a plan, from the plan itself or from its JSON.
struct PlanText {
    total_runs: usize,
    /// `(job, outputs, inputs)` of the first runs.
    runs: Vec<(String, Vec<String>, Vec<String>)>,
    skipped: usize,
    delegated: Vec<(String, String)>,
    /// `(ref, dataset, needed by)`.
    missing: Vec<(String, String, Option<String>)>,
}

impl PlanText {
    fn from_plan(plan: &Plan, limit: usize) -> PlanText {
        PlanText {
            total_runs: plan.runs.len(),
            runs: plan
                .runs
                .iter()
                .take(limit)
                .map(|r| {
                    (
                        r.job.to_string(),
                        r.outputs.iter().map(|o| o.to_string()).collect(),
                        r.inputs.iter().map(|o| o.to_string()).collect(),
                    )
                })
                .collect(),
            skipped: plan.skipped.len(),
            delegated: plan
                .delegated
                .iter()
                .map(|d| (d.partition_ref.to_string(), d.build_request_id.clone()))
                .collect(),
            missing: plan
                .missing
                .iter()
                .map(|m| {
                    (
                        m.partition_ref.to_string(),
                        m.dataset.clone(),
                        m.needed_by.clone(),
                    )
                })
                .collect(),
        }
    }

    fn from_json(v: &Value, limit: usize) -> PlanText {
        let list = |v: &Value| v.as_array().cloned().unwrap_or_default();
        let strings = |v: &Value| list(v).iter().map(text).collect::<Vec<_>>();
        let runs = list(&v["job_runs"]);
        PlanText {
            total_runs: runs.len(),
            runs: runs
                .iter()
                .take(limit)
                .map(|r| {
                    (
                        text(&r["job"]),
                        strings(&r["outputs"]),
                        strings(&r["inputs"]),
                    )
                })
                .collect(),
            skipped: list(&v["skipped"]).len(),
            delegated: list(&v["delegations"])
                .iter()
                .map(|d| (text(&d["ref"]), text(&d["build_request_id"])))
                .collect(),
            missing: list(&v["missing_details"])
                .iter()
                .map(|m| {
                    (
                        text(&m["ref"]),
                        text(&m["dataset"]),
                        m["needed_by"].as_str().map(str::to_string),
                    )
                })
                .collect(),
        }
    }

    fn print(&self, requested: usize, limit: usize) -> std::io::Result<()> {
        let mut out = stdout();
        writeln!(
            out,
            "{} for {}: {} skipped (live), {} delegated, {} missing",
            count(self.total_runs, "job run"),
            count(requested, "requested partition"),
            self.skipped,
            self.delegated.len(),
            self.missing.len(),
        )?;
        let width = self.runs.iter().map(|r| r.0.len()).max().unwrap_or(0);
        for (i, (job, outputs, inputs)) in self.runs.iter().enumerate() {
            writeln!(
                out,
                "  {:>4}  {job:width$}  {}{}",
                i + 1,
                short_list(outputs, 3),
                if inputs.is_empty() {
                    String::new()
                } else {
                    format!("  <- {}", short_list(inputs, 3))
                }
            )?;
        }
        if self.runs.len() < self.total_runs {
            writeln!(
                out,
                "  ... {} more (--limit 0 lists all, --json gives every detail)",
                count(self.total_runs - self.runs.len(), "job run")
            )?;
        }
        for (r, by) in self.delegated.iter().take(limit) {
            writeln!(out, "  delegated  {r}  (being built by {by})")?;
        }
        for (r, dataset, _) in self.missing.iter().take(limit) {
            writeln!(out, "  missing    {r}  (external dataset `{dataset}`)")?;
        }
        out.flush()
    }

    /// Not plannable to completion: an external input is missing (exit 2).
    fn missing_error(&self) -> Option<anyhow::Error> {
        let (r, dataset, needed_by) = self.missing.first()?;
        let who = needed_by
            .as_ref()
            .map(|n| format!(", needed by {n}"))
            .unwrap_or_default();
        let all = match self.missing.len() {
            1 => String::new(),
            n => format!(" ({n} missing in all)"),
        };
        Some(
            UserError(format!(
                "cannot build: external partition `{r}` of dataset `{dataset}` is not available{who}{all}"
            ))
            .into(),
        )
    }
}

pub fn run(
    backend: &Backend,
    args: &[String],
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let refs = parse_refs(args)?;
    let requested = refs.len();
    let limit = if limit == 0 { usize::MAX } else { limit };
    let text = match backend {
        Backend::Local(engine) => {
            let analysis = engine
                .analyze(&PlanRequest {
                    refs,
                    ..Default::default()
                })
                .map_err(engine_error)?;
            if json {
                print_json(&AnalyzeView::new(
                    &analysis.build_request_id,
                    &analysis.plan,
                ))?;
            }
            let text = PlanText::from_plan(&analysis.plan, limit);
            // The process ends right after printing: freeing a plan of millions of runs one
            // allocation at a time would take seconds for nothing.
            std::mem::forget(analysis);
            text
        }
        Backend::Remote(client) => {
            let refs: Vec<String> = refs.iter().map(|r| r.to_string()).collect();
            let v = client.post("/api/v1/analyze", &json!({ "partitions": refs }))?;
            if json {
                print_json(&v)?;
            }
            PlanText::from_json(&v, limit)
        }
    };
    if !json {
        text.print(requested, limit)?;
    }
    match text.missing_error() {
        Some(e) => Err(e),
        None => Ok(ExitCode::SUCCESS),
    }
}
