//! `databuild env`: environments listed, made, dropped, compared, promoted and rolled back.

use std::process::ExitCode;

use databuild_exec::answers::{ChangeKind, EnvironmentChange, EnvironmentDiff, EnvironmentView};

use crate::backend::Backend;
use crate::cli::{EnvAction, EnvArgs};
use crate::output::{out, outln, print_json, table};

pub fn run(backend: &Backend, args: EnvArgs, json: bool) -> anyhow::Result<ExitCode> {
    match args.action {
        EnvAction::List => {
            let list = backend.environments()?;
            if json {
                print_json(&list)?;
            } else {
                print_list(&list.environments)?;
            }
        }
        EnvAction::Create { name, from } => {
            let made = backend.create_environment(&name, from.as_deref())?;
            if json {
                print_json(&made)?;
            } else {
                let from = made.from.as_deref().map_or(String::new(), |f| {
                    format!(" from `{f}` ({} live partitions linked)", made.available)
                });
                outln!(
                    "made environment `{}`{from}; its data is in {}",
                    made.name,
                    made.data_dir
                )?;
                outln!(
                    "build in it with: databuild --env {} build REF...",
                    made.name
                )?;
            }
        }
        EnvAction::Drop { name } => {
            let left = backend.drop_environment(&name)?;
            if json {
                print_json(&left)?;
            } else {
                outln!("dropped environment `{name}`")?;
            }
        }
        EnvAction::Diff { name, other, limit } => {
            let other = other
                .as_deref()
                .unwrap_or(databuild_log::environments::PROD);
            let diff = backend.environment_diff(&name, other, limit)?;
            if json {
                print_json(&diff)?;
            } else {
                print_diff(&diff)?;
            }
        }
        EnvAction::Promote { name, to } => {
            print_change(&backend.promote_environment(&name, &to)?, json)?;
        }
        EnvAction::Rollback { env } => {
            print_change(&backend.rollback_environment(&env)?, json)?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_list(environments: &[EnvironmentView]) -> anyhow::Result<()> {
    let rows: Vec<Vec<String>> = environments
        .iter()
        .map(|e| {
            vec![
                e.name.clone(),
                e.available.to_string(),
                e.from.clone().unwrap_or_else(|| "-".to_string()),
                e.last_change.as_deref().map_or("-".to_string(), |id| {
                    databuild_log::short_id(id).to_string()
                }),
                e.data_dir.clone(),
            ]
        })
        .collect();
    out!(
        "{}",
        table(&["ENV", "LIVE", "FROM", "LAST CHANGE", "DATA"], &rows)
    )?;
    Ok(())
}

fn print_change(change: &EnvironmentChange, json: bool) -> anyhow::Result<()> {
    if json {
        print_json(change)?;
        return Ok(());
    }
    let what = match change.kind {
        ChangeKind::Promote => "promoted",
        ChangeKind::Rollback => "rolled back",
    };
    let Some(build) = &change.build_request_id else {
        outln!(
            "nothing to change: `{}` already has all of it; nothing recorded",
            change.environment
        )?;
        return Ok(());
    };
    let removed = match change.removed {
        0 => String::new(),
        n => format!(", {n} removed (they did not exist before)"),
    };
    let aliases = match change.aliases {
        0 => String::new(),
        n => format!(", {n} table alias(es) moved"),
    };
    outln!(
        "{what} `{}`: {} partitions from {} runs, in one step ({} ms; build {}){removed}{aliases}; no job ran",
        change.environment,
        change.partitions,
        change.runs,
        change.elapsed_ms,
        databuild_log::short_id(build)
    )?;
    Ok(())
}

fn print_diff(diff: &EnvironmentDiff) -> anyhow::Result<()> {
    if diff.partitions_total == 0 && diff.aliases.is_empty() {
        outln!(
            "`{}` has nothing `{}` does not: a promotion would take nothing",
            diff.environment,
            diff.other
        )?;
        return Ok(());
    }
    if diff.partitions_total > 0 {
        outln!(
            "`{}` has {} partitions otherwise than `{}`:",
            diff.environment,
            diff.partitions_total,
            diff.other
        )?;
    }
    for p in &diff.partitions {
        let what = match (&p.content, p.same_bytes) {
            (_, true) => "same bytes, made otherwise".to_string(),
            (Some(c), false) => c.summary(),
            (None, false) => "its bytes could not be compared".to_string(),
        };
        outln!("  {} ({}): {what}", p.partition_ref, p.job)?;
        if let Some(unified) = p.content.as_ref().and_then(|c| c.unified.as_deref()) {
            for line in unified.lines() {
                outln!("      {line}")?;
            }
        }
    }
    let listed = diff.partitions.len() as u64;
    if listed < diff.partitions_total {
        outln!(
            "  ... and {} more (--limit 0 lists all)",
            diff.partitions_total - listed
        )?;
    }
    for a in &diff.aliases {
        outln!(
            "table `{}`: its alias reads v{} (v{} in `{}`)",
            a.table,
            a.version,
            a.other_version,
            diff.other
        )?;
    }
    if !diff.jobs.is_empty() {
        outln!("jobs made otherwise:")?;
        for job in &diff.jobs {
            outln!("  {}: {}", job.job, job.reasons.join("; "))?;
        }
    }
    outln!(
        "promote with: databuild env promote {} --to {}",
        diff.environment,
        diff.other
    )?;
    Ok(())
}
