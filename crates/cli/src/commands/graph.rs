use std::io::Write;
use std::process::ExitCode;

use databuild_core::render::{render, Format};

use crate::backend::Backend;
use crate::cli::GraphFormat;
use crate::context::Context;

fn format(format: GraphFormat, json: bool) -> Format {
    match format {
        _ if json => Format::Json,
        GraphFormat::Dot => Format::Dot,
        GraphFormat::Mermaid => Format::Mermaid,
        GraphFormat::Json => Format::Json,
    }
}

fn print(text: &str) -> std::io::Result<()> {
    let mut out = std::io::stdout().lock();
    out.write_all(text.as_bytes())?;
    if !text.ends_with('\n') {
        writeln!(out)?;
    }
    Ok(())
}

pub fn local(ctx: &Context, f: GraphFormat, json: bool) -> anyhow::Result<ExitCode> {
    print(&render(&ctx.graph, format(f, json)))?;
    Ok(ExitCode::SUCCESS)
}

pub fn remote(backend: &Backend, f: GraphFormat, json: bool) -> anyhow::Result<ExitCode> {
    let Backend::Remote(client) = backend else {
        unreachable!("the local graph is drawn without opening the log")
    };
    let name = match format(f, json) {
        Format::Dot => "dot",
        Format::Mermaid => "mermaid",
        Format::Json => "json",
    };
    print(&client.get_text(&format!(
        "{}?format={name}",
        databuild_exec::answers::route::GRAPH
    ))?)?;
    Ok(ExitCode::SUCCESS)
}
