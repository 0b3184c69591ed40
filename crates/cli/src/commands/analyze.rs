use std::io::Write;
use std::process::ExitCode;

use databuild_core::Plan;
use databuild_exec::answers::{Analysis, PlanCost};

use crate::backend::Backend;
use crate::context::{engine_error, parse_refs};
use crate::output::{count, print_json, short_list, stdout};
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
    estimate: PlanCost,
}

impl PlanText {
    fn from_plan(plan: &Plan, estimate: PlanCost, limit: usize) -> PlanText {
        PlanText {
            estimate,
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

    fn from_answer(v: Analysis, limit: usize) -> PlanText {
        PlanText {
            estimate: v.estimate,
            total_runs: v.job_runs.len(),
            runs: v
                .job_runs
                .into_iter()
                .take(limit)
                .map(|r| (r.job, r.outputs, r.inputs))
                .collect(),
            skipped: v.skipped.len(),
            delegated: v
                .delegations
                .into_iter()
                .map(|d| (d.partition_ref, d.build_request_id))
                .collect(),
            missing: v
                .missing_details
                .into_iter()
                .map(|m| (m.partition_ref, m.dataset, m.needed_by))
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
        if self.total_runs > 0 {
            writeln!(out, "{}", price(&self.estimate))?;
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

/// The estimate in a line: what the build will take, and what that leaves out.
fn price(e: &PlanCost) -> String {
    let s = databuild_exec::answers::span;
    let unknown = match e.runs_without_history {
        0 => String::new(),
        n => format!(
            "; {} of {} ({}) have no recorded duration and count as 0 s",
            count(n, "run"),
            count(e.jobs_without_history.len(), "job"),
            short_list(&e.jobs_without_history, 3)
        ),
    };
    format!(
        "estimated: {} at --parallel {} (p95 {}), critical path {}, job time {}{unknown}",
        s(e.wall_p50_s),
        e.parallel,
        s(e.wall_p95_s),
        s(e.critical_path_p50_s),
        s(e.work_p50_s),
    )
}

pub fn run(
    backend: &Backend,
    args: &[String],
    limit: usize,
    parallel: Option<usize>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let parallel = parallel
        .unwrap_or_else(databuild_exec::build::default_parallelism)
        .max(1);
    let refs = parse_refs(args)?;
    let requested = refs.len();
    let limit = if limit == 0 { usize::MAX } else { limit };
    let text = match backend {
        Backend::Local(local) => local
            .analyze_view(refs, parallel, |view, plan| -> std::io::Result<PlanText> {
                if json {
                    print_json(view)?;
                }
                Ok(PlanText::from_plan(plan, view.estimate.clone(), limit))
            })
            .map_err(engine_error)??,
        Backend::Remote(client) => {
            let v = client.analyze(&databuild_service::api::AnalyzeBody {
                partitions: refs.iter().map(|r| r.to_string()).collect(),
                force: false,
                parallel: Some(parallel),
            })?;
            if json {
                print_json(&v)?;
            }
            PlanText::from_answer(v, limit)
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
