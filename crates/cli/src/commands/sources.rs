//! Sources and tables: `sources`, `source show|seal`, `promote`, and the table job itself.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use databuild_exec::scheduler::BuildOptions;

use super::build::Reporter;
use crate::backend::Backend;
use crate::cli::{PromoteArgs, SealArgs, ShowArgs, SourceAction, SourceArgs, TableJobArgs};
use crate::output::{errln, out, outln, print_json, table};

pub fn list_sources(backend: &Backend, json: bool) -> anyhow::Result<ExitCode> {
    let v = backend.sources()?;
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    for s in &v.sources {
        let d = &s.days;
        let tables: Vec<String> = s
            .tables
            .iter()
            .map(|t| {
                let versions: Vec<String> = t
                    .versions
                    .iter()
                    .map(|v| {
                        let mark = if v.version == t.promoted { "*" } else { "" };
                        format!("v{}{mark} {} days", v.version, v.live_dates)
                    })
                    .collect();
                format!("{} ({})", t.name, versions.join(", "))
            })
            .collect();
        rows.push(vec![
            s.name.clone(),
            s.kind.clone(),
            format!("{}d", s.retention_days),
            format!(
                "{} open, {} sealed, {} expired",
                d.open, d.sealed, d.expired
            ),
            match (&d.first, &d.last) {
                (Some(a), Some(b)) => format!("{a}..{b}"),
                _ => "-".to_string(),
            },
            if tables.is_empty() {
                "-".to_string()
            } else {
                tables.join("; ")
            },
        ]);
    }
    out!(
        "{}",
        table(
            &[
                "SOURCE",
                "KIND",
                "RETENTION",
                "DAYS",
                "RANGE",
                "TABLES (* = promoted)"
            ],
            &rows
        )
    )?;
    Ok(ExitCode::SUCCESS)
}

/// `source show|seal`.
pub fn source(backend: &Backend, args: &SourceArgs, json: bool) -> anyhow::Result<ExitCode> {
    match &args.action {
        SourceAction::Show(args) => show(backend, args, json),
        SourceAction::Seal(args) => seal(backend, args, json),
    }
}

fn show(backend: &Backend, ShowArgs { name }: &ShowArgs, json: bool) -> anyhow::Result<ExitCode> {
    let v = backend.source(name)?;
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let s = &v.source;
    outln!(
        "source {} ({}, keeps {} days; today is {})",
        s.name,
        s.kind,
        s.retention_days,
        v.today
    )?;
    let mut columns: Vec<String> = Vec::new();
    for t in &s.tables {
        for ver in &t.versions {
            let promoted = if ver.version == t.promoted { " *" } else { "" };
            outln!(
                "  {}.v{}{promoted}: {}",
                t.name,
                ver.version,
                ver.columns.join(", ")
            )?;
            columns.push(format!("{}.v{}", t.name, ver.version));
        }
    }
    let mut headers = vec!["DATE".to_string(), "RAW".to_string()];
    headers.extend(columns.iter().map(|c| c.to_uppercase()));
    let rows: Vec<Vec<String>> = v
        .coverage
        .iter()
        .map(|row| {
            let mut cells = vec![
                row.date.clone(),
                match &row.raw {
                    Some(raw) => match raw.records {
                        Some(n) if raw.state != "expired" => format!("{} ({n} records)", raw.state),
                        _ => raw.state.clone(),
                    },
                    None => "-".to_string(),
                },
            ];
            cells.extend(
                columns
                    .iter()
                    .map(|c| row.versions.get(c).cloned().unwrap_or_else(|| "-".into())),
            );
            cells
        })
        .collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    out!("{}", table(&headers, &rows))?;
    Ok(ExitCode::SUCCESS)
}

fn seal(
    backend: &Backend,
    SealArgs { name, through }: &SealArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let v = backend.seal(name.as_deref(), through.as_deref())?;
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    for s in &v.sources {
        let (sealed, expired, ingested) = (&s.sealed, &s.expired, &s.ingested);
        outln!(
            "{}: sealed {} day(s){}, expired {} day(s){}",
            s.source,
            sealed.len(),
            match (sealed.first(), sealed.last()) {
                (Some(a), Some(b)) => format!(" ({}..{})", a.0, b.0),
                _ => String::new(),
            },
            expired.len(),
            if ingested.files > 0 {
                format!(
                    ", ingested {} file(s), {} records",
                    ingested.files, ingested.records
                )
            } else {
                String::new()
            }
        )?;
        for r in &ingested.rejected {
            errln!("rejected {r}");
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn promote(
    backend: &Backend,
    &PromoteArgs {
        table: ref table_name,
        version,
        build_downstream,
    }: &PromoteArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let v = match backend {
        Backend::Local(local) => {
            let engine = &local.engine;
            let options = BuildOptions::default();
            let executor = engine.executor();
            let interrupt = AtomicBool::new(false);
            let terminal = !json && std::io::stderr().is_terminal();
            let mut reporter =
                Reporter::new(terminal, |run| super::build::last_log_line(backend, run));
            let downstream = build_downstream.then_some((
                &options,
                executor.as_ref(),
                &mut reporter as &mut dyn databuild_exec::scheduler::Observer,
                &interrupt,
            ));
            let answer =
                databuild_service::engine_api::promote(engine, table_name, version, downstream);
            reporter.done();
            answer?
        }
        Backend::Remote(c) => c.promote(
            table_name,
            &databuild_service::sources::PromoteBody {
                version,
                build_downstream,
            },
        )?,
    };
    if json {
        print_json(&v)?;
    } else {
        outln!(
            "{}/date=... now reads v{} (was v{}){}",
            v.table,
            v.to,
            v.from,
            match &v.downstream {
                None => String::new(),
                Some(d) => format!(
                    "; {} downstream partition(s) rebuilt on v{} first",
                    d.built.len(),
                    v.to
                ),
            }
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `databuild table-job`: the process that builds a table version's day.
pub fn table_job(TableJobArgs { args }: &TableJobArgs) -> anyhow::Result<ExitCode> {
    match databuild_exec::data::table_job::run(args) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(message) => {
            errln!("table-job: {message}");
            Ok(ExitCode::from(1))
        }
    }
}
