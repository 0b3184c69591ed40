//! What every command needs: the loaded graph and where things live.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use databuild_core::{expand_braces, Graph, PartitionRef};

use crate::UserError;

pub struct Context {
    pub graph: Graph,
    /// The graph file's folder: jobs and helpers run there.
    pub graph_dir: PathBuf,
    pub data_dir: PathBuf,
}

impl Context {
    pub fn load(graph_file: &Path) -> anyhow::Result<Context> {
        let text = std::fs::read_to_string(graph_file).map_err(|e| {
            UserError(format!(
                "cannot read graph file `{}`: {e}; run databuild in the folder holding databuild.toml or pass --graph FILE",
                graph_file.display()
            ))
        })?;
        let graph = Graph::parse(&text, &graph_file.display().to_string())
            .map_err(|e| UserError(e.to_string()))?;
        let graph_dir = graph_file
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let graph_dir = graph_dir
            .canonicalize()
            .with_context(|| format!("cannot resolve the folder of `{}`", graph_file.display()))?;
        let data_dir = graph_dir.join(&graph.data_dir);
        Ok(Context {
            graph,
            graph_dir,
            data_dir,
        })
    }
}

/// Expands braces in each argument and validates the resulting refs, keeping their order and
/// dropping repeats.
pub fn parse_refs(args: &[String]) -> anyhow::Result<Vec<PartitionRef>> {
    let mut seen = std::collections::HashSet::new();
    let mut refs = Vec::new();
    for arg in args {
        for r in expand_braces(arg).map_err(|e| UserError(e.to_string()))? {
            let r = PartitionRef::new(r).map_err(|e| UserError(e.to_string()))?;
            if seen.insert(r.clone()) {
                refs.push(r);
            }
        }
    }
    Ok(refs)
}
