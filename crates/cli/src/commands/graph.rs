use std::process::ExitCode;

use databuild_core::render::{render, Format};

use crate::cli::GraphFormat;
use crate::context::Context;

pub fn run(ctx: &Context, format: GraphFormat, json: bool) -> anyhow::Result<ExitCode> {
    let format = match format {
        _ if json => Format::Json,
        GraphFormat::Dot => Format::Dot,
        GraphFormat::Mermaid => Format::Mermaid,
        GraphFormat::Json => Format::Json,
    };
    print!("{}", render(&ctx.graph, format));
    if format == Format::Json {
        println!();
    }
    Ok(ExitCode::SUCCESS)
}
