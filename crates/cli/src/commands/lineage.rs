//! `lineage`: a partition's instances up or down the graph, as a tree of text, JSON, DOT or
//! Mermaid (the answer is the same in-process and through a service).

use std::process::ExitCode;

use databuild_exec::engine::lineage::{Direction, InstanceSummary, Lineage, LineageNode};
use databuild_log::short_id;

use crate::backend::Backend;
use crate::cli::{DiffArgs, LineageArgs, LineageFormat};
use crate::output::outln;

/// `databuild lineage`: `--json` prints the answer as JSON whatever `--format` says.
pub fn run(backend: &Backend, args: &LineageArgs, json: bool) -> anyhow::Result<ExitCode> {
    let direction = if args.downstream {
        Direction::Downstream
    } else {
        Direction::Upstream
    };
    let format = if json {
        LineageFormat::Json
    } else {
        args.format
    };
    let answer = backend.lineage(
        &args.partition_ref,
        direction,
        args.depth,
        args.instance.as_deref(),
    )?;
    match format {
        LineageFormat::Json => outln!("{}", serde_json::to_string_pretty(&answer)?)?,
        LineageFormat::Text => print_tree(&answer)?,
        LineageFormat::Dot => outln!("{}", dot(&answer))?,
        LineageFormat::Mermaid => outln!("{}", mermaid(&answer))?,
    }
    Ok(ExitCode::SUCCESS)
}

/// `diff`: what changed between two instances of a partition.
pub fn diff(
    backend: &Backend,
    DiffArgs {
        partition_ref,
        instance,
        since,
    }: &DiffArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let d = backend.diff(partition_ref, instance.as_deref(), since.as_deref())?;
    if json {
        outln!("{}", serde_json::to_string_pretty(&d)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let when = |s: &InstanceSummary| s.built_at.clone().unwrap_or_else(|| "?".to_string());
    outln!("{}", d.partition_ref)?;
    outln!(
        "  from run {} ({})",
        short_id(&d.from.job_run_id),
        when(&d.from)
    )?;
    outln!(
        "  to   run {} ({})",
        short_id(&d.to.job_run_id),
        when(&d.to)
    )?;
    let or_none = |v: &Option<String>| v.clone().unwrap_or_else(|| "none".to_string());
    for i in &d.inputs {
        let by = |run: &Option<String>| {
            run.as_deref()
                .map(|r| format!(" (run {})", short_id(r)))
                .unwrap_or_default()
        };
        outln!(
            "  input {} {}: {}{} -> {}{}",
            i.partition_ref,
            i.change,
            or_none(&i.from_version),
            by(&i.from_run),
            or_none(&i.to_version),
            by(&i.to_run)
        )?;
    }
    outln!("  {} input(s) unchanged", d.unchanged_inputs)?;
    if d.job_version_changed {
        outln!(
            "  job version: {} -> {}",
            or_none(&d.from.job_version),
            or_none(&d.to.job_version)
        )?;
    }
    if d.args_changed {
        outln!("  args: {:?} -> {:?}", d.from.args, d.to.args)?;
    }
    if !d.env_changed.is_empty() {
        outln!("  env changed: {}", d.env_changed.join(", "))?;
    }
    for c in &d.code {
        outln!("  code changed: {}", c.shown())?;
    }
    outln!(
        "  data {}",
        if d.data_changed {
            "changed: its bytes differ, what was built from the earlier instance is stale"
        } else {
            "unchanged: the same bytes, what was built from the earlier instance is still fresh"
        }
    )?;
    Ok(ExitCode::SUCCESS)
}

/// One line about a node: its ref, and the run that built it or its data version.
fn label(n: &LineageNode) -> String {
    let what = match (&n.job_run_id, &n.job) {
        (Some(run), Some(job)) => format!(
            "run {} of `{job}`, {}{}{}",
            databuild_log::short_id(run),
            n.run_status.map_or("?".to_string(), |s| s.to_string()),
            n.built_at
                .as_deref()
                .map(|t| format!(" {t}"))
                .unwrap_or_default(),
            n.code_version
                .as_deref()
                .map(|c| format!(", code {c}"))
                .unwrap_or_default()
        ),
        (Some(run), None) => format!("run {}", databuild_log::short_id(run)),
        (None, _) => format!(
            "data version {}",
            n.data_version.as_deref().unwrap_or("unknown")
        ),
    };
    let state = match (n.current, n.query) {
        (true, false) => "current",
        (false, false) => "superseded",
        (true, true) => "current; read as a query input",
        (false, true) => "superseded; read as a query input",
    };
    let note = n
        .note
        .as_deref()
        .map(|t| format!(" — {t}"))
        .unwrap_or_default();
    format!("{}  ({what}; {state}){note}", n.partition_ref)
}

fn print_tree(answer: &Lineage) -> anyhow::Result<()> {
    outln!("{}", label(&answer.root))?;
    print_children(&answer.root, "")?;
    if answer.history.len() > 1 {
        outln!("instances of {}:", answer.root.partition_ref)?;
        for e in &answer.history {
            outln!(
                "  {}  {}{}{}",
                e.at,
                e.what,
                e.job_run_id
                    .as_deref()
                    .map(|r| format!(" by run {}", short_id(r)))
                    .unwrap_or_default(),
                e.message
                    .as_deref()
                    .map(|m| format!(": {m}"))
                    .unwrap_or_default()
            )?;
        }
    }
    Ok(())
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

/// A lineage as a picture: every instance once (its label), and every edge from what was read
/// to what was built from it once, by the instances' numbers.
struct Picture {
    ids: Vec<String>,
    labels: Vec<String>,
    edges: Vec<(usize, usize)>,
}

impl Picture {
    fn of(answer: &Lineage) -> Picture {
        let mut picture = Picture {
            ids: Vec::new(),
            labels: Vec::new(),
            edges: Vec::new(),
        };
        picture.visit(&answer.root, answer.direction == Direction::Upstream);
        picture
    }

    /// The number of a node's instance, added the first time it is seen.
    fn number(&mut self, n: &LineageNode) -> usize {
        let instance = n.job_run_id.as_deref().or(n.data_version.as_deref());
        let id = format!("{}@{}", n.partition_ref, instance.unwrap_or(""));
        if let Some(i) = self.ids.iter().position(|k| *k == id) {
            return i;
        }
        let shown = n.job_run_id.as_deref().map_or_else(
            || n.data_version.clone().unwrap_or_default(),
            |r| format!("run {}", databuild_log::short_id(r)),
        );
        let state = if n.current { "" } else { " (superseded)" };
        self.ids.push(id);
        self.labels
            .push(format!("{}\\n{shown}{state}", n.partition_ref));
        self.ids.len() - 1
    }

    fn visit(&mut self, n: &LineageNode, upstream: bool) {
        let me = self.number(n);
        for child in &n.children {
            let other = self.number(child);
            let edge = if upstream { (other, me) } else { (me, other) };
            if !self.edges.contains(&edge) {
                self.edges.push(edge);
            }
            self.visit(child, upstream);
        }
    }
}

fn dot(answer: &Lineage) -> String {
    let picture = Picture::of(answer);
    let mut out = String::from("digraph lineage {\n  rankdir=LR;\n  node [shape=box];\n");
    for (i, label) in picture.labels.iter().enumerate() {
        out.push_str(&format!(
            "  n{i} [label=\"{}\"];\n",
            label.replace('"', "\\\"")
        ));
    }
    for (from, to) in &picture.edges {
        out.push_str(&format!("  n{from} -> n{to};\n"));
    }
    out.push('}');
    out
}

fn mermaid(answer: &Lineage) -> String {
    let picture = Picture::of(answer);
    let mut out = String::from("graph LR\n");
    for (i, label) in picture.labels.iter().enumerate() {
        let label = label.replace("\\n", "<br/>").replace('"', "#quot;");
        out.push_str(&format!("  n{i}[\"{label}\"]\n"));
    }
    for (from, to) in &picture.edges {
        out.push_str(&format!("  n{from} --> n{to}\n"));
    }
    out.trim_end().to_string()
}
