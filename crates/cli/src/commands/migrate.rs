//! `migrate-log` (copy every event of one log into an empty one) and `check-log`.

use std::io::IsTerminal;
use std::process::ExitCode;

use databuild_log::EventFilter;
use indicatif::{ProgressBar, ProgressStyle};

use crate::backend::Backend;
use crate::cli::MigrateLogArgs;
use crate::context::log_error;
use crate::output::{outln, print_json, unless_closed};
use crate::UserError;

const PAGE: usize = 10_000;

pub fn run(MigrateLogArgs { from, to }: &MigrateLogArgs, json: bool) -> anyhow::Result<ExitCode> {
    let cwd = std::env::current_dir()?;
    let source = databuild_log::open(from, &cwd).map_err(log_error)?;
    let target = databuild_log::open(to, &cwd).map_err(log_error)?;
    if target.last_idx().map_err(log_error)? != 0 {
        return Err(UserError(format!(
            "`{}` already holds events; migrate-log only writes into an empty log",
            target.location()
        ))
        .into());
    }
    let total = source.last_idx().map_err(log_error)?;
    let bar = (!json && std::io::stderr().is_terminal()).then(|| {
        let bar = ProgressBar::new(total as u64);
        bar.set_style(
            ProgressStyle::with_template(
                "{elapsed_precise} [{bar:30}] {pos}/{len} events  ETA {eta}",
            )
            .expect("valid template"),
        );
        bar
    });
    let mut since = 0;
    let mut copied = 0usize;
    loop {
        let page = source
            .events(&EventFilter {
                since: Some(since),
                limit: Some(PAGE),
                ..Default::default()
            })
            .map_err(log_error)?;
        let Some(last) = page.last() else { break };
        since = last.idx;
        copied += page.len();
        target.append(page).map_err(log_error)?;
        if let Some(bar) = &bar {
            bar.set_position(since as u64);
        }
    }
    if let Some(bar) = bar {
        bar.finish_and_clear();
    }
    // Nothing lost: the target holds as many events as were read.
    let written = target
        .sql("SELECT count(*) FROM events", Default::default())
        .map_err(log_error)?;
    let written = written.rows[0][0].as_u64().unwrap_or(0) as usize;
    if written != copied {
        anyhow::bail!(
            "copied {copied} events but `{}` holds {written}",
            target.location()
        );
    }
    if json {
        print_json(
            &serde_json::json!({ "from": source.location(), "to": target.location(), "events": copied }),
        )?;
    } else {
        outln!(
            "copied {copied} events from {} to {}",
            source.location(),
            target.location()
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `check-log`: local only, as it reads the log itself.
pub fn check_log(backend: &Backend, json: bool) -> anyhow::Result<ExitCode> {
    match backend {
        Backend::Local(local) => check(&local.engine, json),
        Backend::Remote(_) => Err(UserError(
            "check-log reads the log directly; run it without --server".into(),
        )
        .into()),
    }
}

fn check(engine: &databuild_exec::Engine, json: bool) -> anyhow::Result<ExitCode> {
    let report = databuild_log::check_store(engine.store.as_ref()).map_err(log_error)?;
    // Its exit code is its answer, whatever became of its output.
    unless_closed(print_check(engine, &report, json))?;
    Ok(if report.ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_check(
    engine: &databuild_exec::Engine,
    report: &databuild_log::CheckReport,
    json: bool,
) -> std::io::Result<()> {
    if json {
        print_json(report)?;
    } else {
        outln!(
            "{}: {} events, {} build requests, {} job runs, {} partitions: {}",
            engine.store.location(),
            report.events,
            report.build_requests,
            report.job_runs,
            report.partitions,
            if report.ok() {
                "consistent"
            } else {
                "PROBLEMS"
            }
        )?;
        for p in &report.problems {
            outln!("  {p}")?;
        }
    }
    Ok(())
}
