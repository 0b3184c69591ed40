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
    /// The event log: `sqlite:PATH` (default: the graph's `event_log`, else
    /// `sqlite:.databuild/events.db` beside the graph file).
    #[arg(long, global = true, env = "DATABUILD_EVENT_LOG")]
    pub event_log: Option<String>,
    /// Print machine-readable JSON on stdout.
    #[arg(long, global = true)]
    pub json: bool,
    /// Send the command to a running `databuild serve` at this URL instead of running it here
    /// (env `DATABUILD_SERVER`). `DATABUILD_TOKEN` is sent as a bearer token.
    #[arg(long, global = true, env = "DATABUILD_SERVER", value_name = "URL")]
    pub server: Option<String>,
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
        /// Estimate the wall time at N runs at once (default: the number of cores).
        #[arg(long, value_name = "N")]
        parallel: Option<usize>,
        /// Plan as `build --force` would: the requested refs rebuilt even if live and fresh.
        #[arg(long)]
        force: bool,
        /// Plan as `build --allow-stale` would: stale partitions used as they are.
        #[arg(long)]
        allow_stale: bool,
    },
    /// Make partitions live and fresh: run exactly the jobs needed, skip what is live, wait for
    /// what another build is making. Exits 0 iff every requested ref is live.
    Build {
        /// Partition refs; braces expand: `reviews/date={2020-01-01..2020-01-31}`, `x/cat={a,b}`.
        #[arg(required = true)]
        refs: Vec<String>,
        /// Rebuild the requested refs even if they are live and fresh.
        #[arg(long)]
        force: bool,
        /// Most job runs at once (default: the number of cores).
        #[arg(long, value_name = "N")]
        parallel: Option<usize>,
        /// Keep running what does not depend on a failure.
        #[arg(long)]
        keep_going: bool,
        /// Use stale partitions as they are instead of rebuilding them.
        #[arg(long)]
        allow_stale: bool,
        /// Refuse to start when the plan has more job runs than N (exit 2; nothing runs).
        #[arg(long, value_name = "N")]
        max_runs: Option<usize>,
        /// Run nothing: print the analysis of what this build would do (as `analyze` with the
        /// same flags), and exit as `analyze` does.
        #[arg(long)]
        dry_run: bool,
    },
    /// Cancel a build request: its running job runs are stopped and recorded as cancelled.
    Cancel {
        /// The build request's id: whole, a unique prefix, its short form, or `last`.
        id: String,
    },
    /// The state of partitions: live, stale, missing, building, failed or tainted, with reasons.
    Status {
        /// Partition refs; braces expand.
        #[arg(required = true)]
        refs: Vec<String>,
    },
    /// Why a partition is in its state: the run that built it, its inputs, what a build would run.
    Explain {
        /// The partition ref.
        #[arg(value_name = "REF")]
        partition_ref: String,
    },
    /// List the partitions the event log knows.
    Partitions {
        /// A glob over refs: `reviews/*`, `*/date=2020-01-0?`.
        #[arg(long)]
        pattern: Option<String>,
        /// Only partitions in this state.
        #[arg(long, value_enum)]
        status: Option<PartitionStatusArg>,
        /// At most N partitions (a page; `--after` goes on).
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
        /// Continue after this ref (keyset pagination).
        #[arg(long, value_name = "REF")]
        after: Option<String>,
    },
    /// List builds, or show one. Ids may be shortened: any unique prefix, the short form the
    /// listings show (its last 8 characters), or `last` for the newest build.
    Builds {
        /// Show this build request: its refs, progress, runs and partitions.
        id: Option<String>,
        /// List analyses (`analyze` is recorded as a build request too) along with builds.
        #[arg(long)]
        all: bool,
        /// List at most N, the newest first (with `--partitions`: N partitions a page).
        #[arg(long, value_name = "N", default_value_t = 20)]
        limit: usize,
        /// With an ID: list what the build did to each partition it touched, a page at a time
        /// in ref order (the build's detail shows the first 1,000).
        #[arg(long, requires = "id")]
        partitions: bool,
        /// With `--partitions`: the page after this ref (the `--after` a page ends with).
        #[arg(long, value_name = "REF", requires = "partitions")]
        after: Option<String>,
    },
    /// Print events of the log.
    Events {
        /// Only the events of this build request.
        #[arg(long = "build", value_name = "ID")]
        build_request_id: Option<String>,
        /// Only the events of this partition.
        #[arg(long = "partition", value_name = "REF")]
        partition_ref: Option<String>,
        /// Only the events of this job's runs.
        #[arg(long)]
        job: Option<String>,
        /// Only the events of this job run.
        #[arg(long = "run", value_name = "ID")]
        job_run_id: Option<String>,
        /// Only events after this index.
        #[arg(long, value_name = "IDX")]
        since: Option<i64>,
        /// At most N events.
        #[arg(long, value_name = "N")]
        limit: Option<usize>,
        /// Keep printing new events as they are appended (Ctrl-C to stop).
        #[arg(long)]
        follow: bool,
    },
    /// Every dataset and job output of the graph, with its partitions counted by status.
    Datasets {
        /// Split every job output's available partitions into live, stale and missing, however
        /// many (a check of each); without it, only those with at most 20,000.
        #[arg(long)]
        exact: bool,
    },
    /// Job metrics: runs, success rate, p50/p95 duration; with NAME, also its recent runs.
    Jobs {
        /// One job: its metrics and its recent runs.
        name: Option<String>,
    },
    /// One job run: config, environment, exit, timings.
    Runs {
        /// The job run's id: whole, a unique prefix, or its short form (as listings show it).
        id: String,
        /// Print the run's whole log instead of its details.
        #[arg(long)]
        log: bool,
        /// With --log: keep printing what the run writes until it ends.
        #[arg(long, requires = "log")]
        follow: bool,
    },
    /// The log of the run that built a partition, or that is building it or failed to.
    Logs {
        /// The partition ref.
        #[arg(value_name = "REF")]
        partition_ref: String,
        /// Keep printing what the run writes until it ends.
        #[arg(long)]
        follow: bool,
    },
    /// Run every check of partitions' current instances now, and record the results: a
    /// partition whose fixed data passes its blocking checks is live again, without a rebuild.
    Check {
        /// Partition refs; braces expand.
        #[arg(required = true)]
        refs: Vec<String>,
    },
    /// Mark partitions invalid, so that builds rebuild them.
    Taint {
        /// Partition refs; braces expand.
        #[arg(required = true)]
        refs: Vec<String>,
        /// Why, as `status` and `explain` will say.
        #[arg(long)]
        reason: Option<String>,
        /// Taint nothing: list the live partitions built from these that would become stale,
        /// and the wants that would rebuild them.
        #[arg(long)]
        dry_run: bool,
    },
    /// The exact lineage of a partition: the instances and runs its current (or a given)
    /// instance was built from, or everything built from it.
    Lineage {
        /// The partition ref.
        #[arg(value_name = "REF")]
        partition_ref: String,
        /// What it was built from (the default).
        #[arg(long, conflicts_with = "downstream")]
        upstream: bool,
        /// Everything built from it, and from that.
        #[arg(long)]
        downstream: bool,
        /// How many levels.
        #[arg(long, default_value_t = 3)]
        depth: u32,
        /// The run whose instance to start from (an id, a unique prefix or the short form);
        /// default: the partition's current instance.
        #[arg(long, value_name = "RUN_ID")]
        instance: Option<String>,
        /// The answer as a tree of text, JSON, or a DOT or Mermaid picture.
        #[arg(long, value_enum, default_value_t = LineageFormat::Text)]
        format: LineageFormat,
    },
    /// What changed between two instances of a partition: the inputs read at other versions,
    /// the job's version, its args, its env names.
    Diff {
        /// The partition ref.
        #[arg(value_name = "REF")]
        partition_ref: String,
        /// The later instance, by the run that built it (default: the current one).
        #[arg(long, value_name = "RUN_ID")]
        instance: Option<String>,
        /// The earlier instance, by the run that built it (default: the one before).
        #[arg(long, value_name = "RUN_ID")]
        since: Option<String>,
    },
    /// Housekeeping: remove old run logs, the staging folders of ended runs, `.tmp` files that
    /// killed jobs left, and the data of partitions no job of the graph builds any more.
    /// Never a live partition, the log of a partition's current run, or anything of a run still
    /// running; what it removes is recorded in the event log.
    Gc {
        /// Only what was last written (for a partition: last recorded) before this long ago:
        /// `30d`, `12h`, `0s` for everything.
        #[arg(long, default_value = "30d", value_name = "AGE")]
        older_than: String,
        /// List what would be removed, remove nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Read-only SQL over the event log (tables and views in docs/event-log.md).
    Sql {
        /// One SELECT (or WITH … SELECT) over the log's tables and views.
        query: String,
        /// Stop after this many rows.
        #[arg(long, default_value_t = 10_000)]
        max_rows: usize,
    },
    /// The build graph service (HTTP API) and dashboard. `DATABUILD_TOKEN`, when set, guards
    /// every write and SQL; `--guard-reads` (or `DATABUILD_READ_TOKEN`, a token for reads only)
    /// guards every read too. Limits: `DATABUILD_MAX_REFS` (refs per request, default 1000000),
    /// `DATABUILD_SQL_CONCURRENCY` (default 4), `DATABUILD_MAX_STREAMS` (default 64).
    Serve {
        /// The address to listen on (a non-loopback one needs `DATABUILD_TOKEN` or --allow-open).
        #[arg(long, default_value = "127.0.0.1:8080")]
        bind: std::net::SocketAddr,
        /// Every read needs a token too (the dashboard asks for it once, in a login form).
        #[arg(long, env = "DATABUILD_GUARD_READS")]
        guard_reads: bool,
        /// A host name requests may be addressed to, beyond loopback names and IP addresses
        /// (repeatable; env `DATABUILD_ALLOWED_HOSTS`, comma-separated).
        #[arg(
            long = "allow-host",
            value_name = "NAME",
            env = "DATABUILD_ALLOWED_HOSTS",
            value_delimiter = ','
        )]
        allowed_hosts: Vec<String>,
        /// Serve a non-loopback address without a token (anyone who reaches it can build).
        #[arg(long)]
        allow_open: bool,
    },
    /// Start a project here: a graph file with one dataset and one job that builds from it, the
    /// job's script and a day of sample data (refuses to overwrite a graph file).
    Init,
    /// Print a shell completion script: `databuild completions bash > ~/.local/share/bash-completion/completions/databuild`.
    Completions {
        /// The shell to complete for.
        shell: clap_complete::Shell,
    },
    /// Check the event log: every entity's history is a valid path of its state machine, and the
    /// projections match a replay of the events. Exits 1 if not.
    CheckLog,
    /// Copy an event log into an empty one (say, from SQLite to a shared Postgres), event by
    /// event, validating each on the way in.
    MigrateLog {
        /// The log to read: `sqlite:PATH` or `postgres://...`.
        #[arg(long)]
        from: String,
        /// The empty log to write.
        #[arg(long)]
        to: String,
    },
    /// Every source (webhook or directory): retention, days open/sealed/expired, and its tables
    /// with their versions and the version each alias reads.
    Sources,
    /// One source's details, or sealing it.
    Source {
        #[command(subcommand)]
        action: SourceAction,
    },
    /// Point a table's alias (`TABLE/date=...`) at another version, after checking that it covers
    /// every date the current one covers. Promoting an earlier version is a rollback.
    Promote {
        /// The table (a source's name).
        table: String,
        /// The version its alias points at from now on.
        #[arg(long)]
        version: u32,
        /// First rebuild the partitions built over the alias against the new version; promote
        /// only if that succeeds.
        #[arg(long)]
        build_downstream: bool,
    },
    /// Want partitions: `databuild serve` builds them as soon as their inputs exist, and records
    /// why they wait and when an SLA is missed.
    Want {
        /// Partition refs; braces expand.
        #[arg(required = true)]
        refs: Vec<String>,
        /// How long the want stands (default 30d).
        #[arg(long)]
        ttl: Option<String>,
        /// How long after each partition's day ends (the date in its ref) it must be live.
        #[arg(long)]
        sla: Option<String>,
    },
    /// List wants: the active ones, or those with a status.
    Wants {
        /// One want (an id, a unique prefix or the short form): the builds and runs that made
        /// its partitions, and what the others wait for.
        id: Option<String>,
        /// requested, waiting, satisfied, expired or cancelled.
        #[arg(long)]
        status: Option<String>,
        /// Include ended (expired, cancelled) wants.
        #[arg(long)]
        all: bool,
        /// At most N wants.
        #[arg(long, value_name = "N", default_value_t = 100)]
        limit: usize,
    },
    /// Withdraw a want.
    Unwant {
        /// The want's id.
        id: String,
    },
    /// Builds a table version's day (run by builds, not by hand).
    #[command(hide = true)]
    TableJob {
        /// What the build passes.
        #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
        args: Vec<String>,
    },
    /// Print the job graph.
    Graph {
        /// The picture's language (`--json`: the graph as JSON).
        #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
        format: GraphFormat,
    },
}

#[derive(Debug, Subcommand)]
pub enum SourceAction {
    /// Coverage by date: the raw partition (open, sealed, expired) and every table version
    /// (loaded from raw or carried forward), with retention.
    Show {
        /// The source's name.
        name: String,
    },
    /// Ingest dropped files, seal every day that has ended (or through `--through`, even today)
    /// and expire raw days past retention. The service does this every minute by itself.
    Seal {
        /// One source (default: all).
        name: Option<String>,
        /// Seal through this date (YYYY-MM-DD), today at the latest.
        #[arg(long, value_name = "DATE")]
        through: Option<String>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LineageFormat {
    Text,
    Json,
    Dot,
    Mermaid,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GraphFormat {
    Dot,
    Mermaid,
    Json,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PartitionStatusArg {
    Live,
    Stale,
    Building,
    Failed,
    Tainted,
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::Cli;

    /// Every command and every flag or argument says what it is for in `--help`.
    #[test]
    fn every_command_and_argument_has_help() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for arg in cmd.get_arguments() {
                let builtin = matches!(arg.get_id().as_str(), "help" | "version");
                if !builtin && arg.get_help().is_none() {
                    missing.push(format!("{path} {}", arg.get_id()));
                }
            }
            for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
                if sub.get_about().is_none() {
                    missing.push(format!("{path} {}", sub.get_name()));
                }
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "databuild", &mut missing);
        assert!(missing.is_empty(), "no help text: {missing:#?}");
    }
}
