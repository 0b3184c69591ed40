//! One module per command; `run` dispatches.

mod analyze;
mod graph;

use std::process::ExitCode;

use crate::cli::{Cli, Command};
use crate::context::Context;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let ctx = Context::load(&cli.graph)?;
    match cli.command {
        Command::Analyze { refs } => analyze::run(&ctx, &refs, cli.json),
        Command::Graph { format } => graph::run(&ctx, format, cli.json),
    }
}
