//! `databuild graph`: the job graph drawn as DOT, Mermaid or JSON, from the graph file (with the
//! edges dynamic jobs last read, from the log) or from a service.

use std::io::Write;
use std::process::ExitCode;

use databuild_core::render::{render, render_with_recorded, Format};
use databuild_core::Deps;

use crate::backend::Backend;
use crate::cli::{GraphArgs, GraphFormat};
use crate::context::{engine_error, Context, Target};

/// `databuild graph`.
pub fn run(target: &Target, args: &GraphArgs, json: bool) -> anyhow::Result<ExitCode> {
    match &target.server {
        Some(url) => remote(
            &Backend::remote(url, &target.environment),
            args.format,
            json,
        ),
        None => local(
            Context::load(&target.graph)?,
            target.event_log.as_deref(),
            args.format,
            json,
        ),
    }
}

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

/// The graph file's graph; with the edges its dynamic jobs' latest runs read, from the log,
/// when it has dynamic jobs (and a log to read).
fn local(
    ctx: Context,
    event_log: Option<&str>,
    f: GraphFormat,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let dynamic = (ctx.graph.jobs.iter()).any(|j| matches!(j.deps, Deps::Dynamic { .. }));
    let text = if dynamic {
        let engine = ctx.engine(event_log)?;
        let recorded = engine.recorded_edges().map_err(engine_error)?;
        render_with_recorded(&engine.graph, format(f, json), &recorded)
    } else {
        render(&ctx.graph, format(f, json))
    };
    print(&text)?;
    Ok(ExitCode::SUCCESS)
}

fn remote(backend: &Backend, f: GraphFormat, json: bool) -> anyhow::Result<ExitCode> {
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
