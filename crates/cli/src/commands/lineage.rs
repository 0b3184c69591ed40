//! `lineage`: a partition's instances up or down the graph, as a tree of text, JSON, DOT or
//! Mermaid (the answer is the same in-process and through a service).

use std::process::ExitCode;

use databuild_exec::lineage::{Direction, Lineage, LineageNode};

use crate::backend::Backend;
use crate::cli::LineageFormat;
use crate::output::outln;

pub fn run(
    backend: &Backend,
    partition_ref: &str,
    downstream: bool,
    depth: u32,
    instance: Option<&str>,
    format: LineageFormat,
) -> anyhow::Result<ExitCode> {
    let direction = if downstream {
        Direction::Downstream
    } else {
        Direction::Upstream
    };
    let answer = backend.lineage(partition_ref, direction, depth, instance)?;
    match format {
        LineageFormat::Json => outln!("{}", serde_json::to_string_pretty(&answer)?)?,
        LineageFormat::Text => print_tree(&answer)?,
        LineageFormat::Dot => outln!("{}", dot(&answer))?,
        LineageFormat::Mermaid => outln!("{}", mermaid(&answer))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// One line about a node: its ref, and the run that built it or its data version.
fn label(n: &LineageNode) -> String {
    let what = match (&n.job_run_id, &n.job) {
        (Some(run), Some(job)) => format!(
            "run {} of `{job}`, {}{}",
            databuild_log::short_id(run),
            n.run_status.map_or("?".to_string(), |s| s.to_string()),
            n.built_at
                .as_deref()
                .map(|t| format!(" {t}"))
                .unwrap_or_default()
        ),
        (Some(run), None) => format!("run {}", databuild_log::short_id(run)),
        (None, _) => format!(
            "data version {}",
            n.data_version.as_deref().unwrap_or("unknown")
        ),
    };
    let state = if n.current { "current" } else { "superseded" };
    let note = n
        .note
        .as_deref()
        .map(|t| format!(" — {t}"))
        .unwrap_or_default();
    format!("{}  ({what}; {state}){note}", n.partition_ref)
}

fn print_tree(answer: &Lineage) -> anyhow::Result<()> {
    outln!("{}", label(&answer.root))?;
    print_children(&answer.root, "")
}

fn print_children(node: &LineageNode, prefix: &str) -> anyhow::Result<()> {
    for (i, child) in node.children.iter().enumerate() {
        let last = i + 1 == node.children.len();
        outln!(
            "{prefix}{}{}",
            if last { "└── " } else { "├── " },
            label(child)
        )?;
        print_children(
            child,
            &format!("{prefix}{}", if last { "    " } else { "│   " }),
        )?;
    }
    Ok(())
}

/// Every node with an id of its own (a partition's instance), and every edge from what was
/// read to what was built from it, each once.
fn walk(answer: &Lineage) -> (Vec<(String, String)>, Vec<(String, String)>) {
    fn id(n: &LineageNode) -> String {
        let instance = n
            .job_run_id
            .as_deref()
            .or(n.data_version.as_deref())
            .unwrap_or("");
        format!("{}@{instance}", n.partition_ref)
    }
    fn visit(
        n: &LineageNode,
        upstream: bool,
        nodes: &mut Vec<(String, String)>,
        edges: &mut Vec<(String, String)>,
    ) {
        let me = id(n);
        if !nodes.iter().any(|(k, _)| *k == me) {
            let instance = n.job_run_id.as_deref().map_or_else(
                || n.data_version.clone().unwrap_or_default(),
                |r| format!("run {}", databuild_log::short_id(r)),
            );
            let state = if n.current { "" } else { " (superseded)" };
            nodes.push((
                me.clone(),
                format!("{}\\n{instance}{state}", n.partition_ref),
            ));
        }
        for child in &n.children {
            let edge = if upstream {
                (id(child), me.clone())
            } else {
                (me.clone(), id(child))
            };
            if !edges.contains(&edge) {
                edges.push(edge);
            }
            visit(child, upstream, nodes, edges);
        }
    }
    let (mut nodes, mut edges) = (Vec::new(), Vec::new());
    visit(
        &answer.root,
        answer.direction == Direction::Upstream,
        &mut nodes,
        &mut edges,
    );
    (nodes, edges)
}

fn dot(answer: &Lineage) -> String {
    let (nodes, edges) = walk(answer);
    let number = |k: &str| nodes.iter().position(|(n, _)| n == k).unwrap_or(0);
    let mut out = String::from("digraph lineage {\n  rankdir=LR;\n  node [shape=box];\n");
    for (i, (_, label)) in nodes.iter().enumerate() {
        out.push_str(&format!(
            "  n{i} [label=\"{}\"];\n",
            label.replace('"', "\\\"")
        ));
    }
    for (from, to) in &edges {
        out.push_str(&format!("  n{} -> n{};\n", number(from), number(to)));
    }
    out.push('}');
    out
}

fn mermaid(answer: &Lineage) -> String {
    let (nodes, edges) = walk(answer);
    let number = |k: &str| nodes.iter().position(|(n, _)| n == k).unwrap_or(0);
    let mut out = String::from("graph LR\n");
    for (i, (_, label)) in nodes.iter().enumerate() {
        let label = label.replace("\\n", "<br/>").replace('"', "#quot;");
        out.push_str(&format!("  n{i}[\"{label}\"]\n"));
    }
    for (from, to) in &edges {
        out.push_str(&format!("  n{} --> n{}\n", number(from), number(to)));
    }
    out.trim_end().to_string()
}
