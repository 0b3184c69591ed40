//! The command-line shape (contract section 4).

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

#[derive(Debug, Parser)]
#[command(
    name = "databuild",
    version,
    about = "A declarative, partition-aware data build system"
)]
pub struct Cli {
    /// The graph file.
    #[arg(
        long,
        global = true,
        env = "DATABUILD_GRAPH",
        default_value = "databuild.toml"
    )]
    pub graph: PathBuf,
    /// The event log: `sqlite:PATH` (default: `.databuild/events.db` beside the graph file).
    #[arg(long, global = true, env = "DATABUILD_EVENT_LOG")]
    pub event_log: Option<String>,
    /// Print machine-readable JSON on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Plan without running: the job runs that would make REFs live, in dependency order.
    Analyze {
        /// Partition refs; braces expand: `reviews/date={2020-01-01..2020-01-31}`, `x/cat={a,b}`.
        #[arg(required = true)]
        refs: Vec<String>,
        /// List at most N job runs in the human output (0: all). `--json` always lists all.
        #[arg(long, default_value_t = 200)]
        limit: usize,
    },
    /// Print the job graph.
    Graph {
        #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
        format: GraphFormat,
    },
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GraphFormat {
    Dot,
    Mermaid,
    Json,
}
