//! Sources and tables: `sources`, `source show|seal`, `promote`, and the table job itself.

use std::io::IsTerminal;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;

use databuild_exec::build::BuildOptions;
use serde_json::Value;

use super::build::Reporter;
use crate::backend::Backend;
use crate::output::{print_json, table, text, value};

fn list(v: &Value) -> Vec<Value> {
    v.as_array().cloned().unwrap_or_default()
}

pub fn list_sources(backend: &Backend, json: bool) -> anyhow::Result<ExitCode> {
    let v = value(&backend.sources()?);
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows = Vec::new();
    for s in list(&v["sources"]) {
        let d = &s["days"];
        let tables: Vec<String> = list(&s["tables"])
            .iter()
            .map(|t| {
                let versions: Vec<String> = list(&t["versions"])
                    .iter()
                    .map(|v| {
                        let mark = if v["version"] == t["promoted"] {
                            "*"
                        } else {
                            ""
                        };
                        format!("v{}{mark} {} days", v["version"], v["live_dates"])
                    })
                    .collect();
                format!("{} ({})", text(&t["name"]), versions.join(", "))
            })
            .collect();
        rows.push(vec![
            text(&s["name"]),
            text(&s["kind"]),
            format!("{}d", s["retention_days"]),
            format!(
                "{} open, {} sealed, {} expired",
                d["open"], d["sealed"], d["expired"]
            ),
            match (d["first"].as_str(), d["last"].as_str()) {
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
    print!(
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
    );
    Ok(ExitCode::SUCCESS)
}

pub fn show(backend: &Backend, name: &str, json: bool) -> anyhow::Result<ExitCode> {
    let v = value(&backend.source(name)?);
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    println!(
        "source {} ({}, keeps {} days; today is {})",
        text(&v["name"]),
        text(&v["kind"]),
        v["retention_days"],
        text(&v["today"])
    );
    let mut columns: Vec<String> = Vec::new();
    for t in list(&v["tables"]) {
        for ver in list(&t["versions"]) {
            let promoted = if ver["version"] == t["promoted"] {
                " *"
            } else {
                ""
            };
            println!(
                "  {}.v{}{promoted}: {}",
                text(&t["name"]),
                ver["version"],
                list(&ver["columns"])
                    .iter()
                    .map(text)
                    .collect::<Vec<_>>()
                    .join(", ")
            );
            columns.push(format!("{}.v{}", text(&t["name"]), ver["version"]));
        }
    }
    let mut headers = vec!["DATE".to_string(), "RAW".to_string()];
    headers.extend(columns.iter().map(|c| c.to_uppercase()));
    let rows: Vec<Vec<String>> = list(&v["coverage"])
        .iter()
        .map(|row| {
            let raw = &row["raw"];
            let mut cells = vec![
                text(&row["date"]),
                match (raw["state"].as_str(), raw["records"].as_u64()) {
                    (Some(s), Some(n)) if s != "expired" => format!("{s} ({n} records)"),
                    (Some(s), _) => s.to_string(),
                    (None, _) => "-".to_string(),
                },
            ];
            cells.extend(columns.iter().map(|c| {
                row["versions"][c.as_str()]
                    .as_str()
                    .unwrap_or("-")
                    .to_string()
            }));
            cells
        })
        .collect();
    let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
    print!("{}", table(&headers, &rows));
    Ok(ExitCode::SUCCESS)
}

pub fn seal(
    backend: &Backend,
    name: Option<&str>,
    through: Option<&str>,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let v = value(&backend.seal(name, through)?);
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    for s in list(&v["sources"]) {
        let sealed = list(&s["sealed"]);
        let expired = list(&s["expired"]);
        let ingested = &s["ingested"];
        println!(
            "{}: sealed {} day(s){}, expired {} day(s){}",
            text(&s["source"]),
            sealed.len(),
            match (sealed.first(), sealed.last()) {
                (Some(a), Some(b)) => format!(" ({}..{})", text(&a[0]), text(&b[0])),
                _ => String::new(),
            },
            expired.len(),
            if ingested["files"].as_u64().unwrap_or(0) > 0 {
                format!(
                    ", ingested {} file(s), {} records",
                    ingested["files"], ingested["records"]
                )
            } else {
                String::new()
            }
        );
        for r in list(&ingested["rejected"]) {
            eprintln!("rejected {}", text(&r));
        }
    }
    Ok(ExitCode::SUCCESS)
}

pub fn promote(
    backend: &Backend,
    table_name: &str,
    version: u32,
    build_downstream: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let v = match backend {
        Backend::Local(local) => {
            let engine = &local.engine;
            let options = BuildOptions::default();
            let executor = engine.executor();
            let interrupt = AtomicBool::new(false);
            let mut reporter = Reporter::new(!json && std::io::stderr().is_terminal());
            let downstream = build_downstream.then_some((
                &options,
                executor.as_ref(),
                &mut reporter as &mut dyn databuild_exec::build::Observer,
                &interrupt,
            ));
            let answer = databuild_service::views::promote(engine, table_name, version, downstream);
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
    let v = value(&v);
    if json {
        print_json(&v)?;
    } else {
        let rebuilt = v["downstream"]["built"].as_array().map_or(0, Vec::len);
        println!(
            "{}/date=... now reads v{} (was v{}){}",
            text(&v["table"]),
            v["to"],
            v["from"],
            if v["downstream"].is_null() {
                String::new()
            } else {
                format!(
                    "; {rebuilt} downstream partition(s) rebuilt on v{} first",
                    v["to"]
                )
            }
        );
    }
    Ok(ExitCode::SUCCESS)
}

/// `databuild table-job`: the process that builds a table version's day.
pub fn table_job(args: &[String]) -> anyhow::Result<ExitCode> {
    match databuild_exec::table_job::run(args) {
        Ok(()) => Ok(ExitCode::SUCCESS),
        Err(message) => {
            eprintln!("table-job: {message}");
            Ok(ExitCode::from(1))
        }
    }
}
