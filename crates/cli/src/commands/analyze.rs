//! `databuild analyze` (and `build --dry-run`): the plan for some refs, and what it would cost,
//! printed for people or as JSON, without running anything.

use std::io::Write;
use std::process::ExitCode;

use databuild_core::{Plan, PlanRequest};
use databuild_exec::answers::AnalyzeView;
use databuild_exec::answers::{
    Analysis, ForceKeepsLive, MissingExternal, NotRebuildable, PlanCost,
};

use crate::backend::Backend;
use crate::cli::AnalyzeArgs;
use crate::context::{engine_error, parse_refs};
use crate::output::{count, head_of, print_json, short_list, stdout, unless_closed};
use crate::UserError;

/// A run as the human output shows it.
struct RunText {
    job: String,
    outputs: Vec<String>,
    inputs: Vec<String>,
    /// Read if present when it starts; never planned.
    query: Vec<String>,
}

/// What the human output shows of a plan, from the plan itself or from its JSON.
struct PlanText {
    total_runs: usize,
    /// The first runs.
    runs: Vec<RunText>,
    skipped: usize,
    /// Of `skipped`, the external inputs present.
    inputs_present: usize,
    /// The first delegated and missing refs (an answer holds the first 1,000), and how many.
    delegated: Vec<(String, String)>,
    delegated_count: usize,
    missing: Vec<MissingExternal>,
    missing_count: usize,
    /// How many partitions cannot be built until the missing inputs are there, and the first.
    cannot_build: (usize, Vec<String>),
    not_rebuildable: (usize, Vec<NotRebuildable>),
    /// Of the runs, those rebuilding what a job's code change made stale.
    stale_by_code: usize,
    estimate: PlanCost,
    force_keeps_live: Option<ForceKeepsLive>,
}

impl PlanText {
    fn from_plan(plan: &Plan, view: &AnalyzeView<'_>, limit: usize) -> PlanText {
        PlanText {
            estimate: view.estimate.clone(),
            cannot_build: (
                view.cannot_build_count,
                view.cannot_build.iter().map(|r| r.to_string()).collect(),
            ),
            not_rebuildable: (view.not_rebuildable_count, view.not_rebuildable.clone()),
            force_keeps_live: view.force_keeps_live.clone(),
            stale_by_code: view.stale_by_code,
            total_runs: plan.runs.len(),
            runs: plan
                .runs
                .iter()
                .take(limit)
                .map(|r| RunText {
                    job: r.job.to_string(),
                    outputs: r.outputs.iter().map(|o| o.to_string()).collect(),
                    inputs: r.inputs.iter().map(|o| o.to_string()).collect(),
                    query: r.query_inputs().iter().map(|o| o.to_string()).collect(),
                })
                .collect(),
            skipped: plan.skipped.len(),
            inputs_present: view.inputs_present,
            delegated: plan
                .delegated
                .iter()
                .map(|d| (d.partition_ref.to_string(), d.build_request_id.clone()))
                .collect(),
            missing: view.missing_details.clone(),
            delegated_count: view.delegated_count,
            missing_count: view.missing_count,
        }
    }

    fn from_answer(v: Analysis, limit: usize) -> PlanText {
        PlanText {
            delegated_count: v.delegated_count.max(v.delegations.len()),
            missing_count: v.missing_count.max(v.missing_details.len()),
            estimate: v.estimate,
            // A service from before pages answers every run and no counts.
            total_runs: v.job_runs_count.max(v.job_runs.len()),
            runs: v
                .job_runs
                .into_iter()
                .take(limit)
                .map(|r| RunText {
                    job: r.job,
                    outputs: r.outputs,
                    inputs: r.inputs,
                    query: r.query_inputs,
                })
                .collect(),
            skipped: v.skipped_count.max(v.skipped.len()),
            inputs_present: v.inputs_present,
            delegated: v
                .delegations
                .into_iter()
                .map(|d| (d.partition_ref, d.build_request_id))
                .collect(),
            missing: v.missing_details,
            cannot_build: (v.cannot_build_count, v.cannot_build),
            not_rebuildable: (v.not_rebuildable_count, v.not_rebuildable),
            stale_by_code: v.stale_by_code,
            force_keeps_live: v.force_keeps_live,
        }
    }

    fn print(&self, requested: usize, limit: usize) -> std::io::Result<()> {
        let mut out = stdout();
        writeln!(
            out,
            "{} for {}: {} skipped (live), {} present, {} delegated, {} missing",
            count(self.total_runs, "job run"),
            count(requested, "requested partition"),
            self.skipped - self.inputs_present,
            count(self.inputs_present, "external input"),
            self.delegated_count,
            self.missing_count,
        )?;
        if self.stale_by_code > 0 {
            writeln!(
                out,
                "{} because code changed (a job's script, its `code` files or its definition; `explain` says which)",
                count(self.stale_by_code, "job run")
            )?;
        }
        let width = self.runs.iter().map(|r| r.job.len()).max().unwrap_or(0);
        for (i, run) in self.runs.iter().enumerate() {
            let (job, outputs, inputs, query) = (&run.job, &run.outputs, &run.inputs, &run.query);
            writeln!(
                out,
                "  {:>4}  {job:width$}  {}{}{}",
                i + 1,
                short_list(outputs, 3),
                if inputs.is_empty() {
                    String::new()
                } else {
                    format!("  <- {}", short_list(inputs, 3))
                },
                // Read if present when the run starts; never planned.
                if query.is_empty() {
                    String::new()
                } else {
                    format!("  (query, if present: {})", short_list(query, 3))
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
        for m in self.missing.iter().take(limit) {
            let (r, dataset) = (&m.partition_ref, &m.dataset);
            let why = m
                .reason
                .as_ref()
                .map(|r| format!(": {r}"))
                .unwrap_or_default();
            let needed = m
                .needed_by
                .as_ref()
                .map(|n| format!(", needed by {n}"))
                .unwrap_or_default();
            writeln!(
                out,
                "  missing    {r}  (external dataset `{dataset}`{needed}){why}"
            )?;
        }
        let (kept, first_kept) = &self.not_rebuildable;
        if *kept > 0 {
            writeln!(
                out,
                "{} stale but kept as they are (they cannot be rebuilt):",
                count(*kept, "partition")
            )?;
            for k in first_kept.iter().take(limit) {
                writeln!(out, "  kept       {}  ({})", k.partition_ref, k.reason)?;
            }
        }
        let (n, first) = &self.cannot_build;
        if *n > 0 {
            writeln!(
                out,
                "{} cannot be built until {} there: {}",
                count(*n, "partition"),
                if self.missing_count == 1 {
                    "that input is"
                } else {
                    "those inputs are"
                },
                // `first` holds at most 100 of them: the rest counted from `n`.
                head_of(first, *n, 5)
            )?;
        }
        if let Some(kept) = self.force_keeps_live.as_ref().filter(|k| k.count > 0) {
            writeln!(
                out,
                "{}{} built from the forced partitions are rebuilt only if the forced rebuild writes other bytes, and stay live otherwise (`taint` them to rebuild them anyway): {}",
                count(kept.count, "live partition"),
                if kept.truncated { " (at least)" } else { "" },
                head_of(&kept.partitions, kept.count, 5)
            )?;
        }
        if self.total_runs > 0 {
            writeln!(out, "{}", price(&self.estimate))?;
        }
        out.flush()
    }

    /// Not plannable to completion: an external input is missing (exit 2).
    fn missing_error(&self) -> Option<anyhow::Error> {
        let m = self.missing.first()?;
        let (r, dataset) = (&m.partition_ref, &m.dataset);
        let who = m
            .needed_by
            .as_ref()
            .map(|n| format!(", needed by {n}"))
            .unwrap_or_default();
        let all = match self.missing_count {
            1 => String::new(),
            n => format!(" ({n} missing in all)"),
        };
        if let Some(why) = &m.failed_check {
            return Some(
                UserError(format!(
                    "cannot build: `{r}` {why}{who}{all}; fix its data and run `databuild check {r}`, or rebuild it with --force"
                ))
                .into(),
            );
        }
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
    let memory = e.peak_memory_bytes.map_or_else(
        || "peak memory unknown (no run recorded it)".to_string(),
        |b| {
            format!(
                "peak memory at most {}",
                databuild_exec::answers::metric_text("max_rss_bytes", b as f64)
            )
        },
    );
    let unpriced = match e.runs_without_resources {
        0 => String::new(),
        n => format!(
            " ({} without recorded resources count as none)",
            count(n, "run")
        ),
    };
    format!(
        "estimated: {} at --parallel {} (p95 {}), critical path {}, job time {}{unknown}\n{memory}, {} CPU-hours{unpriced}",
        s(e.wall_p50_s),
        e.parallel,
        s(e.wall_p95_s),
        s(e.critical_path_p50_s),
        s(e.work_p50_s),
        cpu_hours(e.cpu_hours),
    )
}

/// CPU-hours to three significant digits: a small plan's are a few thousandths.
fn cpu_hours(h: f64) -> String {
    match h {
        0.0 => "0".to_string(),
        h if h >= 100.0 => format!("{h:.0}"),
        h => {
            let decimals = (2 - h.log10().floor() as i32).clamp(0, 9) as usize;
            format!("{h:.decimals$}")
        }
    }
}

/// What the plan is for: `analyze`'s flags, or those of the build a `build --dry-run` previews.
#[derive(Default)]
pub struct Planned {
    pub force: bool,
    pub allow_stale: bool,
    /// The build's `--max-runs`: a larger plan is refused as the build would refuse it.
    pub max_runs: Option<usize>,
}

/// `databuild analyze`: the plan for its flags, printed.
pub fn run(backend: &Backend, args: &AnalyzeArgs, json: bool) -> anyhow::Result<ExitCode> {
    let planned = Planned {
        force: args.force,
        allow_stale: args.allow_stale,
        max_runs: None,
    };
    print_plan(
        backend,
        &args.refs,
        args.limit,
        args.parallel,
        planned,
        json,
    )
}

/// Plans `args` (refs) as `planned` says and prints the plan, its first `limit` runs in the
/// human output; fails as the build would if it cannot be built. `build --dry-run` runs this.
pub fn print_plan(
    backend: &Backend,
    args: &[String],
    limit: usize,
    parallel: Option<usize>,
    planned: Planned,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let parallel = databuild_exec::engine::estimate_parallel(parallel).map_err(engine_error)?;
    let refs = parse_refs(backend, args)?;
    let requested = refs.len();
    let limit = if limit == 0 { usize::MAX } else { limit };
    let text = match backend {
        Backend::Local(local) => local
            .analyze_view(
                &PlanRequest {
                    refs,
                    force: planned.force,
                    allow_stale: planned.allow_stale,
                    ..Default::default()
                },
                parallel,
                |view, plan| -> std::io::Result<PlanText> {
                    if json {
                        unless_closed(print_json(view))?;
                    }
                    Ok(PlanText::from_plan(plan, view, limit))
                },
            )
            .map_err(engine_error)??,
        Backend::Remote(client) => {
            // The service answers a page of runs: as many pages as the output shows (`--json`:
            // all, as in this process).
            let wanted = if json { usize::MAX } else { limit };
            let body = databuild_service::api::AnalyzeBody {
                partitions: refs.iter().map(|r| r.to_string()).collect(),
                force: planned.force,
                allow_stale: planned.allow_stale,
                parallel: Some(parallel),
                after: None,
                limit: None,
            };
            let v = client.analyze_runs(&body, wanted)?;
            if json {
                unless_closed(print_json(&v))?;
            }
            PlanText::from_answer(v, limit)
        }
    };
    // The exit code says whether it can be built, whatever became of the output.
    if !json {
        unless_closed(text.print(requested, limit))?;
    }
    if let Some(e) = text.missing_error() {
        return Err(e);
    }
    match planned.max_runs.filter(|max| text.total_runs > *max) {
        // As the build would refuse it (`Engine::execute`).
        Some(max) => Err(UserError(format!(
            "the plan has {} job runs, more than --max-runs {max} allows (raise --max-runs to \
             build it)",
            text.total_runs
        ))
        .into()),
        None => Ok(ExitCode::SUCCESS),
    }
}
