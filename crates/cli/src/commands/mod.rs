//! One module per group of commands; `run` hands each command its arguments (`cli`) whole, and
//! where it runs: the local engine or a service.

mod analyze;
mod build;
mod env;
mod forecast;
mod graph;
mod init;
mod inspect;
mod lineage;
mod migrate;
mod query;
mod serve;
mod sources;
mod wants;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::context::Target;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let Cli {
        graph,
        event_log,
        json,
        server,
        environment,
        command,
    } = cli;
    let target = Target {
        graph,
        event_log,
        server,
        environment,
    };
    // Opened by the commands that read the graph and the log, after their arguments parsed.
    let backend = || target.backend();
    match command {
        // These need no graph file, log or service.
        Command::Init => init::run(&target.graph, json),
        Command::Completions(args) => init::completions(&args),
        Command::MigrateLog(args) => migrate::run(&args, json),
        Command::TableJob(args) => sources::table_job(&args),
        // These pick their own way to the graph.
        Command::Graph(args) => graph::run(&target, &args, json),
        Command::Serve(args) => serve::run(&target, args),
        Command::Analyze(args) => analyze::run(&backend()?, &args, json),
        Command::Build(args) => build::run(&backend()?, &args, json),
        Command::Cancel(args) => query::cancel(&backend()?, &args, json),
        Command::Status(args) => inspect::status(&backend()?, &args, json),
        Command::Explain(args) => inspect::explain(&backend()?, &args, json),
        Command::Forecast(args) => forecast::run(&backend()?, &args, json),
        Command::Partitions(args) => query::partitions(&backend()?, args, json),
        Command::Builds(args) => query::builds(&backend()?, &args, json),
        Command::Events(args) => query::events(&backend()?, args, json),
        Command::Datasets(args) => query::datasets(&backend()?, &args, json),
        Command::Jobs(args) => query::jobs(&backend()?, &args, json),
        Command::Metrics(args) => query::metrics(&backend()?, &args, json),
        Command::Runs(args) => query::runs(&backend()?, &args, json),
        Command::Logs(args) => query::logs(&backend()?, &args, json),
        Command::Check(args) => inspect::check(&backend()?, &args, json),
        Command::Taint(args) => inspect::taint(&backend()?, &args, json),
        Command::Lineage(args) => lineage::run(&backend()?, &args, json),
        Command::Diff(args) => lineage::diff(&backend()?, &args, json),
        Command::Gc(args) => inspect::gc(&backend()?, &args, json),
        Command::Sql(args) => query::sql(&backend()?, &args, json),
        Command::CheckLog => migrate::check_log(&backend()?, json),
        Command::Sources => sources::list_sources(&backend()?, json),
        Command::Source(args) => sources::source(&backend()?, &args, json),
        Command::Promote(args) => sources::promote(&backend()?, &args, json),
        Command::Want(args) => wants::want(&backend()?, &args, json),
        Command::Wants(args) => wants::wants(&backend()?, &args, json),
        Command::Unwant(args) => wants::unwant(&backend()?, &args, json),
        Command::Env(args) => env::run(&backend()?, args, json),
    }
}
