//! Drawings of the job graph: datasets and jobs as nodes, an edge from each pattern to the jobs
//! whose input templates read it. Jobs with a config executable have dynamic inputs: marked as
//! such, with dashed edges from what their latest runs read when the log is given
//! ([`render_with_recorded`]).

use serde::Serialize;

use crate::graph::{Deps, Graph, Producer};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Dot,
    Mermaid,
    Json,
}

#[derive(Serialize)]
struct JsonGraph<'g> {
    name: &'g str,
    /// What `{field=*}` expands over.
    domains: &'g crate::Domains,
    datasets: Vec<JsonDataset<'g>>,
    jobs: Vec<JsonJob<'g>>,
    edges: Vec<JsonEdge<'g>>,
}

#[derive(Serialize)]
struct JsonDataset<'g> {
    name: &'g str,
    pattern: &'g str,
}

#[derive(Serialize)]
struct JsonJob<'g> {
    name: &'g str,
    outputs: Vec<&'g str>,
    inputs: Vec<&'g str>,
    dynamic: bool,
    version: &'g str,
}

#[derive(Serialize)]
struct JsonEdge<'g> {
    from: &'g str,
    to: &'g str,
    via: &'g str,
    /// A dynamic job's input, as its latest runs read it (the graph file does not say).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    recorded: bool,
}

/// What a dynamic job's edges are labelled with.
const RECORDED: &str = "read by its latest runs";

/// Aliases are drawn as datasets: patterns that read as a table's promoted version.
fn aliases(graph: &Graph) -> impl Iterator<Item = (usize, String, &str)> {
    graph
        .tables
        .iter()
        .enumerate()
        .map(|(i, t)| (i, format!("{} (alias)", t.name), t.alias.as_str()))
}

pub fn render(graph: &Graph, format: Format) -> String {
    render_with_recorded(graph, format, &[])
}

/// The graph with the edges of its dynamic jobs that the log recorded, `(producer, job)`: what
/// their latest runs read (drawn dashed; a dynamic job with none says so).
pub fn render_with_recorded(
    graph: &Graph,
    format: Format,
    recorded: &[(Producer, usize)],
) -> String {
    match format {
        Format::Json => render_json(graph, recorded),
        Format::Dot => render_dot(graph, recorded),
        Format::Mermaid => render_mermaid(graph, recorded),
    }
}

fn render_json(graph: &Graph, recorded: &[(Producer, usize)]) -> String {
    let json = JsonGraph {
        name: &graph.name,
        domains: &graph.domains,
        datasets: graph
            .datasets
            .iter()
            .map(|d| JsonDataset {
                name: &d.name,
                pattern: d.pattern.as_str(),
            })
            .chain(graph.tables.iter().map(|t| JsonDataset {
                name: &t.name,
                pattern: t.alias.as_str(),
            }))
            .collect(),
        jobs: graph
            .jobs
            .iter()
            .map(|j| JsonJob {
                name: &j.name,
                outputs: j.outputs.iter().map(|o| o.as_str()).collect(),
                inputs: match &j.deps {
                    Deps::Static(t) => t.iter().map(|t| t.template.as_str()).collect(),
                    Deps::Dynamic { .. } | Deps::Table { .. } => Vec::new(),
                },
                dynamic: matches!(j.deps, Deps::Dynamic { .. }),
                version: &j.version,
            })
            .collect(),
        edges: graph
            .edges()
            .into_iter()
            .map(|(p, j, via)| JsonEdge {
                from: graph.producer_name(p),
                to: &graph.jobs[j].name,
                via,
                recorded: false,
            })
            .chain(recorded.iter().map(|&(p, j)| JsonEdge {
                from: graph.producer_name(p),
                to: &graph.jobs[j].name,
                via: RECORDED,
                recorded: true,
            }))
            .collect(),
    };
    serde_json::to_string_pretty(&json).expect("graph JSON serializes")
}

fn quote(s: &str) -> String {
    let escaped = s
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    format!("\"{escaped}\"")
}

/// How a job's box says its inputs are dynamic: chosen by its config at plan time.
fn dynamic_note(graph: &Graph, j: usize, recorded: &[(Producer, usize)]) -> &'static str {
    match graph.jobs[j].deps {
        Deps::Dynamic { .. } if recorded.iter().any(|&(_, r)| r == j) => {
            "(dynamic inputs: dashed, as its latest runs read them)"
        }
        Deps::Dynamic { .. } => "(dynamic inputs: none recorded yet)",
        _ => "",
    }
}

fn render_dot(graph: &Graph, recorded: &[(Producer, usize)]) -> String {
    let mut out = format!("digraph {} {{\n  rankdir=LR;\n", quote(&graph.name));
    for d in &graph.datasets {
        out.push_str(&format!(
            "  {} [shape=cylinder, label={}];\n",
            quote(&format!("dataset:{}", d.name)),
            quote(&format!("{}\n{}", d.name, d.pattern))
        ));
    }
    for (i, name, pattern) in aliases(graph) {
        out.push_str(&format!(
            "  {} [shape=cylinder, style=dashed, label={}];\n",
            quote(&node_id(graph, Producer::Alias(i))),
            quote(&format!("{name}\n{pattern}"))
        ));
    }
    for (i, j) in graph.jobs.iter().enumerate() {
        let outputs: Vec<&str> = j.outputs.iter().map(|o| o.as_str()).collect();
        let dynamic = match dynamic_note(graph, i, recorded) {
            "" => String::new(),
            note => format!("\n{note}"),
        };
        out.push_str(&format!(
            "  {} [shape=box, label={}];\n",
            quote(&format!("job:{}", j.name)),
            quote(&format!("{}\n{}{dynamic}", j.name, outputs.join("\n")))
        ));
    }
    for (p, j, via) in graph.edges() {
        out.push_str(&format!(
            "  {} -> {} [label={}];\n",
            quote(&node_id(graph, p)),
            quote(&format!("job:{}", graph.jobs[j].name)),
            quote(via)
        ));
    }
    for &(p, j) in recorded {
        out.push_str(&format!(
            "  {} -> {} [style=dashed, label={}];\n",
            quote(&node_id(graph, p)),
            quote(&format!("job:{}", graph.jobs[j].name)),
            quote(RECORDED)
        ));
    }
    out.push_str("}\n");
    out
}

fn node_id(graph: &Graph, p: Producer) -> String {
    match p {
        Producer::Dataset(d) => format!("dataset:{}", graph.datasets[d].name),
        Producer::Job { job, .. } => format!("job:{}", graph.jobs[job].name),
        Producer::Alias(t) => format!("alias:{}", graph.tables[t].name),
    }
}

fn render_mermaid(graph: &Graph, recorded: &[(Producer, usize)]) -> String {
    // Mermaid ids must be plain words; labels carry the real names.
    let id = |p: Producer| match p {
        Producer::Dataset(d) => format!("d{d}"),
        Producer::Job { job, .. } => format!("j{job}"),
        Producer::Alias(t) => format!("a{t}"),
    };
    let label = |s: &str| s.replace('"', "#quot;");
    let mut out = String::from("flowchart LR\n");
    for (i, d) in graph.datasets.iter().enumerate() {
        out.push_str(&format!(
            "  d{i}[(\"{}<br/>{}\")]\n",
            label(&d.name),
            label(d.pattern.as_str())
        ));
    }
    for (i, name, pattern) in aliases(graph) {
        out.push_str(&format!(
            "  a{i}[(\"{}<br/>{}\")]\n",
            label(&name),
            label(pattern)
        ));
    }
    for (i, j) in graph.jobs.iter().enumerate() {
        let outputs: Vec<String> = j.outputs.iter().map(|o| label(o.as_str())).collect();
        let dynamic = match dynamic_note(graph, i, recorded) {
            "" => String::new(),
            note => format!("<br/>{note}"),
        };
        out.push_str(&format!(
            "  j{i}[\"{}<br/>{}{dynamic}\"]\n",
            label(&j.name),
            outputs.join("<br/>")
        ));
    }
    for (p, j, _) in graph.edges() {
        out.push_str(&format!("  {} --> j{j}\n", id(p)));
    }
    for &(p, j) in recorded {
        out.push_str(&format!("  {} -.->|{RECORDED}| j{j}\n", id(p)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const G: &str = r#"
[graph]
name = "g"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["x"]
"#;

    #[test]
    fn renders_all_formats() {
        let g = Graph::parse(G, "g.toml").unwrap();
        let dot = render(&g, Format::Dot);
        assert!(
            dot.contains("\"dataset:raw\" -> \"job:a\" [label=\"raw/{d}\"]"),
            "{dot}"
        );
        let mermaid = render(&g, Format::Mermaid);
        assert!(mermaid.contains("d0 --> j0"), "{mermaid}");
        let json: serde_json::Value = serde_json::from_str(&render(&g, Format::Json)).unwrap();
        assert_eq!(json["edges"][0]["from"], "raw");
        assert_eq!(json["edges"][0]["to"], "a");
    }
}
