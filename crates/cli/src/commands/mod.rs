//! One module per command; `run` dispatches.

mod analyze;
mod graph;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::context::Context;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ctx = Context::load(&cli.graph)?;
    match cli.command {
        Command::Analyze { refs, limit } => analyze::run(&ctx, &refs, limit, cli.json),
        Command::Graph { format } => graph::run(&ctx, format, cli.json),
    }
}
