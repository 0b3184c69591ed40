//! What every command needs: the loaded graph, where things live, and the event log.

use std::path::{Path, PathBuf};

use anyhow::Context as _;
use databuild_core::{names_a_domain, parse_user_refs, Domains, Graph, PartitionRef};
use databuild_exec::{Engine, EngineError};
use databuild_log::LogError;

use crate::backend::Backend;
use crate::UserError;

/// Where the global flags say a command runs: the graph file and event log here, or the
/// service at `--server`.
pub struct Target {
    pub graph: PathBuf,
    pub event_log: Option<String>,
    pub server: Option<String>,
    /// The environment (`--env`): `prod` unless told.
    pub environment: String,
}

impl Target {
    /// The service at `--server`, else this process over the graph file and its event log.
    pub fn backend(&self) -> anyhow::Result<Backend> {
        match &self.server {
            Some(url) => Ok(Backend::remote(url, &self.environment)),
            None => {
                let prod = Context::load(&self.graph)?.engine(self.event_log.as_deref())?;
                Backend::local(match self.environment.as_str() {
                    databuild_log::environments::PROD => prod,
                    name => prod.in_environment(name).map_err(engine_error)?,
                })
            }
        }
    }
}

pub struct Context {
    pub graph: Graph,
    /// The graph file's folder: jobs and helpers run there.
    pub graph_dir: PathBuf,
    pub data_dir: PathBuf,
    /// The digest of the graph file's text: builds keep their no-op plans under it.
    graph_digest: String,
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
            graph_digest: databuild_exec::engine::plan_cache::graph_digest(&text),
        })
    }

    /// Opens the event log (flag, else graph file, else the default beside the graph file).
    pub fn engine(self, event_log: Option<&str>) -> anyhow::Result<Engine> {
        let uri = match event_log.or(self.graph.event_log.as_deref()) {
            Some(uri) => uri.to_string(),
            None => {
                let dir = self.graph_dir.join(".databuild");
                std::fs::create_dir_all(&dir)
                    .with_context(|| format!("cannot create `{}`", dir.display()))?;
                format!("sqlite:{}", databuild_log::DEFAULT_LOG)
            }
        };
        let options = crate::settings::log_options();
        let store = databuild_log::open_with(&uri, &self.graph_dir, &options).map_err(log_error)?;
        let config = crate::settings::engine_config(&self.graph)?;
        let environments = databuild_exec::engine::environments::Environments::new(
            databuild_log::environments::PROD,
            &uri,
            &self.graph_dir,
            options,
            &self.data_dir,
        );
        Ok(Engine::new(
            self.graph,
            self.graph_dir,
            self.data_dir,
            store.into(),
            config,
        )
        .with_environments(environments)
        .with_graph_digest(self.graph_digest))
    }
}

/// Routes an event log error to the right exit code.
pub fn log_error(e: LogError) -> anyhow::Error {
    if e.is_user_error() {
        UserError(e.to_string()).into()
    } else {
        e.into()
    }
}

pub fn engine_error(e: EngineError) -> anyhow::Error {
    if e.is_user_error() {
        UserError(e.to_string()).into()
    } else {
        e.into()
    }
}

/// Expands braces in each argument (within `DATABUILD_MAX_REFS`) and validates the resulting
/// refs, keeping their order and dropping repeats.
pub fn parse_refs(backend: &Backend, args: &[String]) -> anyhow::Result<Vec<PartitionRef>> {
    let domains = match backend {
        Backend::Local(local) => std::borrow::Cow::Borrowed(&local.engine.graph.domains),
        // The service's graph says what `{field=*}` stands for (read only when asked).
        Backend::Remote(client) if args.iter().any(|a| names_a_domain(a)) => {
            std::borrow::Cow::Owned(client.domains()?)
        }
        Backend::Remote(_) => std::borrow::Cow::Owned(Domains::new()),
    };
    Ok(
        parse_user_refs(args, crate::settings::max_refs()?, &domains)
            .map_err(|e| UserError(e.to_string()))?,
    )
}
