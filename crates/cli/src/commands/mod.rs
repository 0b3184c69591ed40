//! One module per group of commands; `run` dispatches.

mod analyze;
mod build;
mod graph;
mod inspect;
mod query;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::context::Context;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ctx = Context::load(&cli.graph)?;
    let json = cli.json;
    if let Command::Graph { format } = cli.command {
        return graph::run(&ctx, format, json);
    }
    let engine = ctx.engine(cli.event_log.as_deref())?;
    match cli.command {
        Command::Graph { .. } => unreachable!("handled above"),
        Command::Analyze { refs, limit } => analyze::run(&engine, &refs, limit, json),
        Command::Build {
            refs,
            force,
            parallel,
            keep_going,
            allow_stale,
        } => build::run(
            &engine,
            &refs,
            build::Flags {
                force,
                parallel,
                keep_going,
                allow_stale,
            },
            json,
        ),
        Command::Cancel { id } => build::cancel(&engine, &id, json),
        Command::Status { refs } => inspect::status(&engine, &refs, json),
        Command::Explain { partition_ref } => inspect::explain(&engine, &partition_ref, json),
        Command::Taint { refs, reason } => inspect::taint(&engine, &refs, reason.as_deref(), json),
        Command::Partitions {
            pattern,
            status,
            limit,
            after,
        } => query::partitions(&engine, pattern, status, limit, after, json),
        Command::Builds { id, limit } => query::builds(&engine, id.as_deref(), limit, json),
        Command::Events {
            build_request_id,
            partition_ref,
            job,
            job_run_id,
            since,
            limit,
            follow,
        } => {
            let filter = databuild_log::EventFilter {
                since,
                limit,
                build_request_id,
                partition_ref,
                job,
                job_run_id,
                from: None,
                to: None,
            };
            query::events(&engine, filter, follow, json)
        }
        Command::Jobs { name } => query::jobs(&engine, name.as_deref(), json),
        Command::Runs { id } => query::run(&engine, &id, json),
        Command::Sql { query, max_rows } => query::sql(&engine, &query, max_rows, json),
        Command::Serve { bind } => serve(engine, bind),
    }
}

fn serve(engine: databuild_exec::Engine, bind: std::net::SocketAddr) -> anyhow::Result<ExitCode> {
    let token = std::env::var("DATABUILD_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(databuild_service::serve(engine, bind, token, |addr| {
        eprintln!("databuild service listening on http://{addr}");
    }))?;
    eprintln!("databuild service stopped");
    Ok(ExitCode::SUCCESS)
}
