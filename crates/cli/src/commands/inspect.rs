//! `status`, `explain`, `taint`: what is known about partitions; `gc`: what nothing reads.

use std::process::ExitCode;

use databuild_exec::engine::gc::GcKind;

use crate::backend::Backend;
use crate::cli::{CheckArgs, ExplainArgs, GcArgs, StatusArgs, TaintArgs};
use crate::context::parse_refs;
use crate::output::{errln, out, outln, print_json, table};

fn expand(backend: &Backend, args: &[String]) -> anyhow::Result<Vec<String>> {
    Ok(parse_refs(backend, args)?
        .into_iter()
        .map(|r| r.to_string())
        .collect())
}

/// An optional text, or nothing.
fn or_empty(v: &Option<String>) -> &str {
    v.as_deref().unwrap_or_default()
}

pub fn status(
    backend: &Backend,
    StatusArgs { refs: args }: &StatusArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let reports = expand(backend, args)?
        .iter()
        .map(|r| backend.status(r))
        .collect::<Result<Vec<_>, _>>()?;
    // A ref with its own error (unknown, a field that does not parse, its config failed) is
    // the user's input to fix: every ref still answers, and the command exits 2.
    let code = if reports.iter().any(|r| r.error.is_some()) {
        ExitCode::from(2)
    } else {
        ExitCode::SUCCESS
    };
    if json {
        print_json(&reports)?;
        return Ok(code);
    }
    let rows: Vec<Vec<String>> = reports
        .iter()
        .map(|r| {
            vec![
                r.partition_ref.clone(),
                match r.error {
                    Some(_) => "error".to_string(),
                    None => r.status.to_string(),
                },
                r.reasons.join("; "),
            ]
        })
        .collect();
    out!("{}", table(&["REF", "STATUS", "WHY"], &rows))?;
    if rows.len() > 1 {
        outln!("{}", status_summary(rows.iter().map(|r| r[1].as_str())))?;
    }
    for e in reports.iter().filter_map(|r| r.error.as_ref()) {
        errln!("error: {}", e.message);
    }
    Ok(code)
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

pub fn explain(
    backend: &Backend,
    ExplainArgs { partition_ref: r }: &ExplainArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    databuild_core::PartitionRef::new(r).map_err(|e| crate::UserError(e.to_string()))?;
    let x = backend.explain(r)?;
    if json {
        print_json(&x)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("{}: {}", x.partition_ref, x.status)?;
    for reason in &x.reasons {
        outln!("  because {reason}")?;
    }
    if let Some(p) = &x.producer {
        outln!("  produced by {} `{}` ({})", p.kind, p.name, p.pattern)?;
    }
    if let Some(c) = &x.root_cause {
        outln!(
            "  root cause: {} failed in run {}{}",
            c.partition_ref,
            c.job_run_id,
            c.log_tail
                .as_ref()
                .map(|t| format!(" (last log line: {t})"))
                .unwrap_or_default()
        )?;
    }
    let at = |t: &Option<String>| t.clone().unwrap_or_else(|| "-".to_string());
    if let Some(run) = &x.run {
        outln!(
            "  run {}: job `{}`, {} (build request {}), started {}, ended {}{}",
            run.job_run_id,
            run.job,
            run.status,
            or_empty(&run.build_request_id),
            at(&run.started_at),
            at(&run.ended_at),
            run.exit_code
                .map(|c| format!(", exit {c}"))
                .unwrap_or_default()
        )?;
        if !run.args.is_empty() {
            outln!("  args: {}", run.args.join(" "))?;
        }
        if !run.code_versions.is_empty() {
            outln!("  code it ran:")?;
            for (path, sha) in &run.code_versions {
                outln!("    {path}  sha {sha}")?;
            }
        }
    }
    for c in &x.code_changes {
        outln!("  code changed since: {}", c.shown())?;
    }
    for w in &x.wants {
        outln!(
            "  wanted by want {} ({}{}): {} since {}",
            w.want_id,
            w.status,
            w.sla_seconds
                .map(|s| format!(", SLA {s}s"))
                .unwrap_or_default(),
            or_empty(&w.message),
            w.updated_at
        )?;
    }
    // A report is whatever JSON object the job wrote: read by name, as the job named it.
    let report = x.report.clone().unwrap_or_default();
    if let Some(provenance) = report.get("provenance").and_then(|p| p.as_str()) {
        outln!("  provenance: {provenance}")?;
    }
    if let Some(fields) = report.as_object() {
        let counts: Vec<String> = fields
            .iter()
            .filter(|(k, v)| v.is_number() && k.as_str() != "provenance")
            .map(|(k, v)| format!("{k} {v}"))
            .collect();
        if !counts.is_empty() {
            outln!("  reported: {}", counts.join(", "))?;
        }
    }
    if !x.inputs.is_empty() {
        outln!("  inputs now:")?;
        for i in &x.inputs {
            outln!("    {}  {}", i.partition_ref, i.status)?;
        }
    }
    if !x.query_inputs.is_empty() {
        outln!("  query inputs read (if present; not required):")?;
        for q in &x.query_inputs {
            outln!(
                "    {}  read at data version {}, {} now",
                q.partition_ref,
                q.data_version,
                q.status
            )?;
        }
    }
    if !x.to_build.is_empty() {
        outln!(
            "  to build it, a build would run {} job run(s):",
            x.to_build.len()
        )?;
        for step in x.to_build.iter().take(20) {
            outln!("    {}  {}", step.job, step.outputs.join(", "))?;
        }
    }
    if !x.history.is_empty() {
        outln!("  history:")?;
        for e in &x.history {
            outln!(
                "    #{}  {}  {} {}{}",
                e.idx,
                crate::output::time(Some(e.timestamp)),
                e.kind,
                e.status,
                e.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `taint REF...`; with `--dry-run`, what tainting them would make stale.
pub fn taint(backend: &Backend, args: &TaintArgs, json: bool) -> anyhow::Result<ExitCode> {
    if args.dry_run {
        taint_impact(backend, &args.refs, json)
    } else {
        taint_refs(backend, &args.refs, args.reason.as_deref(), json)
    }
}

fn taint_refs(
    backend: &Backend,
    args: &[String],
    reason: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let answer = backend.taint(&expand(backend, args)?, reason)?;
    for e in &answer.events {
        if json {
            outln!("{}", serde_json::to_string(e)?)?;
        } else {
            outln!("tainted {}", or_empty(&e.partition_ref))?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// `check REF...`: each partition's checks, run now, and its status after them. Exit 1 when a
/// blocking check failed (the partition is not live).
pub fn check(
    backend: &Backend,
    CheckArgs { refs: args }: &CheckArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let answer = backend.check(&expand(backend, args)?)?;
    let held_back = answer
        .partitions
        .iter()
        .any(|p| p.status == databuild_exec::answers::DerivedStatus::CheckFailed);
    if json {
        outln!("{}", serde_json::to_string_pretty(&answer)?)?;
    } else {
        let mut rows = Vec::new();
        for p in &answer.partitions {
            for c in &p.checks {
                rows.push(vec![
                    p.partition_ref.clone(),
                    c.name.clone(),
                    c.result.clone(),
                    if c.blocking { "yes" } else { "no" }.to_string(),
                    c.message.clone().unwrap_or_default(),
                ]);
            }
        }
        out!(
            "{}",
            table(&["REF", "CHECK", "RESULT", "BLOCKING", "MESSAGE"], &rows)
        )?;
        for p in &answer.partitions {
            outln!("{}: {}", p.partition_ref, p.status)?;
        }
    }
    Ok(if held_back {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    })
}

fn taint_impact(backend: &Backend, args: &[String], json: bool) -> anyhow::Result<ExitCode> {
    let impact = backend.taint_impact(&expand(backend, args)?)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&impact)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    for r in &impact.tainted {
        outln!("would taint {r}")?;
    }
    for item in &impact.would_become_stale {
        outln!(
            "would make stale {} (built by run {} from {})",
            item.partition_ref,
            databuild_log::short_id(&item.job_run_id),
            item.via
        )?;
    }
    if impact.truncated {
        outln!(
            "... and more: an answer holds {} partitions",
            impact.would_become_stale.len()
        )?;
    }
    for w in &impact.wants {
        outln!(
            "want {} would rebuild {} partition(s): {}",
            databuild_log::short_id(&w.want_id),
            w.count,
            w.refs.join(", ")
        )?;
    }
    outln!(
        "{} tainted, {} would become stale{}; nothing was written (without --dry-run it is)",
        impact.tainted.len(),
        impact.would_become_stale.len(),
        [
            (impact.already_stale, "already stale"),
            (
                impact.not_live,
                "not live (missing, failed or held back by a check)"
            )
        ]
        .iter()
        .filter(|(n, _)| *n > 0)
        .map(|(n, what)| format!(", {n} built from them {what}"))
        .collect::<String>()
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn gc(
    backend: &Backend,
    &GcArgs {
        ref older_than,
        dry_run,
    }: &GcArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let report = backend.gc(older_than, dry_run)?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if dry_run { "would remove" } else { "removed" };
    for item in &report.items {
        let what = match item.kind {
            GcKind::Published if dry_run => "would move into place",
            GcKind::Published => "moved into place",
            _ => verb,
        };
        let about = match (&item.partition_ref, &item.job_run_id) {
            (Some(r), _) => format!(" (partition {r})"),
            (None, Some(run)) => format!(" (run {})", databuild_log::short_id(run)),
            _ => String::new(),
        };
        outln!("{what} {} {}{about}", gc_kind(item.kind, false), item.path)?;
    }
    if report.items_truncated {
        outln!(
            "... and more (the totals below count them all; --json lists the first {})",
            report.items.len()
        )?;
    }
    let totals: Vec<String> = report
        .totals
        .iter()
        .map(|(kind, c)| format!("{} {}", c.count, gc_kind(*kind, c.count != 1)))
        .collect();
    if totals.is_empty() {
        outln!("nothing to remove older than {older_than}")?;
    } else {
        outln!(
            "{verb} {}: {}",
            totals.join(", "),
            human_bytes(report.bytes_freed())
        )?;
    }
    for (why, n) in &report.kept {
        outln!("kept {n}: {why}")?;
    }
    for e in &report.errors {
        errln!("databuild: {e}");
    }
    Ok(if report.errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn gc_kind(kind: GcKind, plural: bool) -> &'static str {
    match (kind, plural) {
        (GcKind::RunLog, false) => "run log",
        (GcKind::RunLog, true) => "run logs",
        (GcKind::Staging, false) => "staging folder",
        (GcKind::Staging, true) => "staging folders",
        (GcKind::Published, _) => "staged outputs",
        (GcKind::TempFile, false) => "leftover .tmp file",
        (GcKind::TempFile, true) => "leftover .tmp files",
        (GcKind::PartitionData, false) => "the data of a partition no job builds",
        (GcKind::PartitionData, true) => "partitions' data no job builds",
        (GcKind::Replaced, false) => "promotion's replaced partitions (kept for rollback)",
        (GcKind::Replaced, true) => "promotions' replaced partitions (kept for rollback)",
    }
}

pub(super) fn human_bytes(n: u64) -> String {
    match n {
        n if n >= 1 << 30 => format!("{:.1} GiB", n as f64 / (1u64 << 30) as f64),
        n if n >= 1 << 20 => format!("{:.1} MiB", n as f64 / (1u64 << 20) as f64),
        n if n >= 1 << 10 => format!("{:.1} KiB", n as f64 / 1024.0),
        n => format!("{n} bytes"),
    }
}
