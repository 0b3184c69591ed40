//! The command-line shape (contract section 4): the global flags, the commands, and each
//! command's arguments as a struct that `commands` hands whole to the function that runs it.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

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
    /// The environment the command reads and builds in (`databuild env list`): its own log and
    /// data, beside prod's (env `DATABUILD_ENV`).
    #[arg(
        long = "env",
        global = true,
        env = "DATABUILD_ENV",
        default_value = "prod",
        value_name = "NAME"
    )]
    pub environment: String,
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Plan without running: the job runs that would make REFs live, in dependency order.
    Analyze(AnalyzeArgs),
    /// Make partitions live and fresh: run exactly the jobs needed, skip what is live, wait for
    /// what another build is making. Exits 0 iff every requested ref is live.
    Build(BuildArgs),
    /// Cancel a build request: its running job runs are stopped and recorded as cancelled.
    Cancel(CancelArgs),
    /// The state of partitions: live, stale, missing, building, failed or tainted, with reasons.
    Status(StatusArgs),
    /// Why a partition is in its state: the run that built it, its inputs, what a build would run.
    Explain(ExplainArgs),
    /// When partitions not live are expected to be (median, and p90), whether an input is late,
    /// and why: inputs' arrival cadences, runs under way, jobs' durations, the critical path.
    Forecast(ForecastArgs),
    /// List the partitions the event log knows.
    Partitions(PartitionsArgs),
    /// List builds, or show one. Ids may be shortened: any unique prefix, the short form the
    /// listings show (its last 8 characters), or `last` for the newest build.
    Builds(BuildsArgs),
    /// Print events of the log.
    Events(EventsArgs),
    /// Every dataset and job output of the graph, with its partitions counted by status.
    Datasets(DatasetsArgs),
    /// Job metrics: runs, success rate, p50/p95 duration; with NAME, also its recent runs.
    Jobs(JobsArgs),
    /// One metric (a resource or one a job reports) over a job's partitions, in key order.
    Metrics(MetricsArgs),
    /// One job run: config, environment, exit, timings.
    Runs(RunsArgs),
    /// The log of the run that built a partition, or that is building it or failed to.
    Logs(LogsArgs),
    /// Run every check of partitions' current instances now, and record the results: a
    /// partition whose fixed data passes its blocking checks is live again, without a rebuild.
    Check(CheckArgs),
    /// Mark partitions invalid, so that builds rebuild them.
    Taint(TaintArgs),
    /// The exact lineage of a partition: the instances and runs its current (or a given)
    /// instance was built from, or everything built from it.
    Lineage(LineageArgs),
    /// What changed between two instances of a partition: the inputs read at other versions,
    /// the job's version, its args, its env names.
    Diff(DiffArgs),
    /// Housekeeping: remove old run logs, the staging folders of ended runs, `.tmp` files that
    /// killed jobs left, and the data of partitions no job of the graph builds any more.
    /// Never a live partition, the log of a partition's current run, or anything of a run still
    /// running; what it removes is recorded in the event log.
    Gc(GcArgs),
    /// Read-only SQL over the event log (tables and views in docs/event-log.md).
    Sql(SqlArgs),
    /// The build graph service (HTTP API) and dashboard. `DATABUILD_TOKEN`, when set, guards
    /// every write and SQL; `--guard-reads` (or `DATABUILD_READ_TOKEN`, a token for reads only)
    /// guards every read too. Limits: `DATABUILD_MAX_REFS` (refs per request, default 1000000),
    /// `DATABUILD_SQL_CONCURRENCY` (default 4), `DATABUILD_ANALYZE_CONCURRENCY` (default 2),
    /// `DATABUILD_MAX_STREAMS` (default 64),
    /// `DATABUILD_MAX_CONNECTIONS_PER_ADDRESS` (default a quarter of the connection cap, at least
    /// 8), `DATABUILD_FIRST_BYTE_TIMEOUT` (default 5s).
    Serve(ServeArgs),
    /// Start a project here: a graph file with one dataset and one job that builds from it, the
    /// job's script and a day of sample data (refuses to overwrite a graph file).
    Init,
    /// Print a shell completion script: `databuild completions bash > ~/.local/share/bash-completion/completions/databuild`.
    Completions(CompletionsArgs),
    /// Check the event log: every entity's history is a valid path of its state machine, and the
    /// projections match a replay of the events. Exits 1 if not.
    CheckLog,
    /// Copy an event log into an empty one (say, from SQLite to a shared Postgres), event by
    /// event, validating each on the way in.
    MigrateLog(MigrateLogArgs),
    /// Every source (webhook or directory): retention, days open/sealed/expired, and its tables
    /// with their versions and the version each alias reads.
    Sources,
    /// One source's details, or sealing it.
    Source(SourceArgs),
    /// Point a table's alias (`TABLE/date=...`) at another version, after checking that it covers
    /// every date the current one covers. Promoting an earlier version is a rollback.
    Promote(PromoteArgs),
    /// Want partitions: `databuild serve` builds them as soon as their inputs exist, and records
    /// why they wait and when an SLA is missed.
    Want(WantArgs),
    /// List wants: the active ones, or those with a status.
    Wants(WantsArgs),
    /// Withdraw a want.
    Unwant(UnwantArgs),
    /// Builds a table version's day (run by builds, not by hand).
    #[command(hide = true)]
    TableJob(TableJobArgs),
    /// Print the job graph.
    Graph(GraphArgs),
    /// Environments: try a change on real data beside prod, see what it changes, promote it in
    /// one step, roll it back.
    Env(EnvArgs),
}

/// The arguments of `databuild env`.
#[derive(Debug, Args)]
pub struct EnvArgs {
    #[command(subcommand)]
    pub action: EnvAction,
}

#[derive(Debug, Subcommand)]
pub enum EnvAction {
    /// Every environment: where its data is, its live partitions, its last promotion.
    List,
    /// Make an environment: empty (its builds link whatever any environment already made the
    /// same way), or `--from ENV` with every live partition of ENV linked, not copied.
    Create {
        /// Its name: a lowercase letter, then lowercase letters, digits or `_`.
        name: String,
        /// Start with every live partition of this environment linked (default: empty).
        #[arg(long, value_name = "ENV")]
        from: Option<String>,
    },
    /// Drop an environment: its log and its links (bytes another environment links stay).
    Drop {
        /// The environment to drop (not prod).
        name: String,
    },
    /// What NAME has that OTHER (default prod) does not: partitions whose data versions differ,
    /// jobs whose code differs, and what changed in the bytes.
    Diff {
        /// The environment to compare.
        name: String,
        /// The one to compare it with (default: prod).
        other: Option<String>,
        /// List at most N partitions (0: all).
        #[arg(long, default_value_t = 100)]
        limit: usize,
    },
    /// Make `--to` (default prod) read exactly what NAME reads of its partitions, in one recorded
    /// step: no job runs.
    Promote {
        /// The environment whose partitions are taken.
        name: String,
        /// The environment that takes them.
        #[arg(long, default_value = "prod", value_name = "ENV")]
        to: String,
    },
    /// Undo the last promotion (or rollback) of ENV (default prod).
    Rollback {
        /// The environment whose last promotion (or rollback) is undone.
        #[arg(default_value = "prod")]
        env: String,
    },
}

/// The arguments of `databuild analyze`.
#[derive(Debug, Args)]
pub struct AnalyzeArgs {
    /// Partition refs; braces expand: `reviews/date={2020-01-01..2020-01-31}`, `x/cat={a,b}`.
    #[arg(required = true)]
    pub refs: Vec<String>,
    /// List at most N job runs in the human output (0: all). `--json` always lists all.
    #[arg(long, default_value_t = 200)]
    pub limit: usize,
    /// Estimate the wall time at N runs at once (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,
    /// Plan as `build --force` would: the requested refs rebuilt even if live and fresh.
    #[arg(long)]
    pub force: bool,
    /// Plan as `build --allow-stale` would: stale partitions used as they are.
    #[arg(long)]
    pub allow_stale: bool,
}

/// The arguments of `databuild build`.
#[derive(Debug, Args)]
pub struct BuildArgs {
    /// Partition refs; braces expand: `reviews/date={2020-01-01..2020-01-31}`, `x/cat={a,b}`.
    #[arg(required = true)]
    pub refs: Vec<String>,
    /// Rebuild the requested refs even if they are live and fresh.
    #[arg(long)]
    pub force: bool,
    /// Most job runs at once (default: the number of cores).
    #[arg(long, value_name = "N")]
    pub parallel: Option<usize>,
    /// Keep running what does not depend on a failure.
    #[arg(long)]
    pub keep_going: bool,
    /// Use stale partitions as they are instead of rebuilding them.
    #[arg(long)]
    pub allow_stale: bool,
    /// Refuse to start when the plan has more job runs than N (exit 2; nothing runs).
    #[arg(long, value_name = "N")]
    pub max_runs: Option<usize>,
    /// Run nothing: print the analysis of what this build would do (as `analyze` with the
    /// same flags), and exit as `analyze` does.
    #[arg(long)]
    pub dry_run: bool,
}

/// The arguments of `databuild cancel`.
#[derive(Debug, Args)]
pub struct CancelArgs {
    /// The build request's id: whole, a unique prefix, its short form, or `last`.
    pub id: String,
}

/// The arguments of `databuild status`.
#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Partition refs; braces expand.
    #[arg(required = true)]
    pub refs: Vec<String>,
}

/// The arguments of `databuild explain`.
#[derive(Debug, Args)]
pub struct ExplainArgs {
    /// The partition ref.
    #[arg(value_name = "REF")]
    pub partition_ref: String,
}

/// The arguments of `databuild forecast`.
#[derive(Debug, Args)]
pub struct ForecastArgs {
    /// Partition refs; braces expand.
    #[arg(required = true)]
    pub refs: Vec<String>,
}

/// The arguments of `databuild partitions`.
#[derive(Debug, Args)]
pub struct PartitionsArgs {
    /// A glob over refs: `reviews/*`, `*/date=2020-01-0?`.
    #[arg(long)]
    pub pattern: Option<String>,
    /// Only partitions in this state.
    #[arg(long, value_enum)]
    pub status: Option<PartitionStatusArg>,
    /// At most N partitions (a page; `--after` goes on).
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: usize,
    /// Continue after this ref (keyset pagination).
    #[arg(long, value_name = "REF")]
    pub after: Option<String>,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum PartitionStatusArg {
    Live,
    Stale,
    Building,
    Failed,
    Tainted,
}

/// The arguments of `databuild builds`.
#[derive(Debug, Args)]
pub struct BuildsArgs {
    /// Show this build request: its refs, progress, runs and partitions.
    pub id: Option<String>,
    /// List analyses (`analyze` is recorded as a build request too) along with builds.
    #[arg(long)]
    pub all: bool,
    /// List at most N, the newest first (with an ID: its first N partitions and newest N runs;
    /// 0: all its detail holds; with `--partitions`: N partitions a page).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
    /// With an ID: list what the build did to each partition it touched, a page at a time
    /// in ref order (the build's detail shows the first 1,000).
    #[arg(long, requires = "id")]
    pub partitions: bool,
    /// With `--partitions`: the page after this ref (the `--after` a page ends with).
    #[arg(long, value_name = "REF", requires = "partitions")]
    pub after: Option<String>,
}

/// The arguments of `databuild events`.
#[derive(Debug, Args)]
pub struct EventsArgs {
    /// Only the events of this build request.
    #[arg(long = "build", value_name = "ID")]
    pub build_request_id: Option<String>,
    /// Only the events of this partition.
    #[arg(long = "partition", value_name = "REF")]
    pub partition_ref: Option<String>,
    /// Only the events of this job's runs.
    #[arg(long)]
    pub job: Option<String>,
    /// Only the events of this job run.
    #[arg(long = "run", value_name = "ID")]
    pub job_run_id: Option<String>,
    /// Only events after this index.
    #[arg(long, value_name = "IDX")]
    pub since: Option<i64>,
    /// At most N events.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    /// Keep printing new events as they are appended (Ctrl-C to stop).
    #[arg(long)]
    pub follow: bool,
}

/// The arguments of `databuild datasets`.
#[derive(Debug, Args)]
pub struct DatasetsArgs {
    /// Split every job output's available partitions into live, stale and missing, however
    /// many (a check of each); without it, only those with at most 20,000.
    #[arg(long)]
    pub exact: bool,
}

/// The arguments of `databuild jobs`.
#[derive(Debug, Args)]
pub struct JobsArgs {
    /// One job: its metrics and its recent runs.
    pub name: Option<String>,
}

/// The arguments of `databuild metrics`.
#[derive(Debug, Args)]
pub struct MetricsArgs {
    /// A job's name or one of its output patterns (`daily/{date:date}`).
    pub pattern: String,
    /// A resource (`wall_ms`, `max_rss_bytes`, ...) or a metric the job reports (`rows`).
    #[arg(long)]
    pub metric: String,
    /// Continue after this ref (keyset pagination).
    #[arg(long, value_name = "REF")]
    pub after: Option<String>,
    /// At most N values (a page; `--after` goes on).
    #[arg(long, value_name = "N", default_value_t = 1000)]
    pub limit: usize,
}

/// The arguments of `databuild runs`.
#[derive(Debug, Args)]
pub struct RunsArgs {
    /// The job run's id: whole, a unique prefix, or its short form (as listings show it).
    pub id: String,
    /// Print the run's whole log instead of its details.
    #[arg(long)]
    pub log: bool,
    /// With --log: keep printing what the run writes until it ends.
    #[arg(long, requires = "log")]
    pub follow: bool,
}

/// The arguments of `databuild logs`.
#[derive(Debug, Args)]
pub struct LogsArgs {
    /// The partition ref.
    #[arg(value_name = "REF")]
    pub partition_ref: String,
    /// Keep printing what the run writes until it ends.
    #[arg(long)]
    pub follow: bool,
}

/// The arguments of `databuild check`.
#[derive(Debug, Args)]
pub struct CheckArgs {
    /// Partition refs; braces expand.
    #[arg(required = true)]
    pub refs: Vec<String>,
}

/// The arguments of `databuild taint`.
#[derive(Debug, Args)]
pub struct TaintArgs {
    /// Partition refs; braces expand.
    #[arg(required = true)]
    pub refs: Vec<String>,
    /// Why, as `status` and `explain` will say.
    #[arg(long)]
    pub reason: Option<String>,
    /// Taint nothing: list the live partitions built from these that would become stale,
    /// and the wants that would rebuild them.
    #[arg(long)]
    pub dry_run: bool,
}

/// The arguments of `databuild lineage`.
#[derive(Debug, Args)]
pub struct LineageArgs {
    /// The partition ref.
    #[arg(value_name = "REF")]
    pub partition_ref: String,
    /// What it was built from (the default).
    #[arg(long, conflicts_with = "downstream")]
    pub upstream: bool,
    /// Everything built from it, and from that.
    #[arg(long)]
    pub downstream: bool,
    /// How many levels.
    #[arg(long, default_value_t = 3)]
    pub depth: u32,
    /// The run whose instance to start from (an id, a unique prefix or the short form);
    /// default: the partition's current instance.
    #[arg(long, value_name = "RUN_ID")]
    pub instance: Option<String>,
    /// The answer as a tree of text, JSON, or a DOT or Mermaid picture.
    #[arg(long, value_enum, default_value_t = LineageFormat::Text)]
    pub format: LineageFormat,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LineageFormat {
    Text,
    Json,
    Dot,
    Mermaid,
}

/// The arguments of `databuild diff`.
#[derive(Debug, Args)]
pub struct DiffArgs {
    /// The partition ref.
    #[arg(value_name = "REF")]
    pub partition_ref: String,
    /// The later instance, by the run that built it (default: the current one).
    #[arg(long, value_name = "RUN_ID")]
    pub instance: Option<String>,
    /// The earlier instance, by the run that built it (default: the one before).
    #[arg(long, value_name = "RUN_ID")]
    pub since: Option<String>,
}

/// The arguments of `databuild gc`.
#[derive(Debug, Args)]
pub struct GcArgs {
    /// Only what was last written (for a partition: last recorded) before this long ago:
    /// `30d`, `12h`, `0s` for everything.
    #[arg(long, default_value = "30d", value_name = "AGE")]
    pub older_than: String,
    /// List what would be removed, remove nothing.
    #[arg(long)]
    pub dry_run: bool,
}

/// The arguments of `databuild sql`.
#[derive(Debug, Args)]
pub struct SqlArgs {
    /// One SELECT (or WITH … SELECT) over the log's tables and views.
    pub query: String,
    /// Stop after this many rows.
    #[arg(long, default_value_t = 10_000)]
    pub max_rows: usize,
}

/// The arguments of `databuild serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// The address to listen on (a non-loopback one needs `DATABUILD_TOKEN` or --allow-open).
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub bind: std::net::SocketAddr,
    /// Every read needs a token too (the dashboard asks for it once, in a login form).
    #[arg(long, env = "DATABUILD_GUARD_READS")]
    pub guard_reads: bool,
    /// A host name requests may be addressed to, beyond loopback names and IP addresses
    /// (repeatable; env `DATABUILD_ALLOWED_HOSTS`, comma-separated).
    #[arg(
        long = "allow-host",
        value_name = "NAME",
        env = "DATABUILD_ALLOWED_HOSTS",
        value_delimiter = ','
    )]
    pub allowed_hosts: Vec<String>,
    /// Serve a non-loopback address without a token (anyone who reaches it can build).
    #[arg(long)]
    pub allow_open: bool,
}

/// The arguments of `databuild completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell to complete for.
    pub shell: clap_complete::Shell,
}

/// The arguments of `databuild migrate-log`.
#[derive(Debug, Args)]
pub struct MigrateLogArgs {
    /// The log to read: `sqlite:PATH` or `postgres://...`.
    #[arg(long)]
    pub from: String,
    /// The empty log to write.
    #[arg(long)]
    pub to: String,
}

/// The arguments of `databuild source`.
#[derive(Debug, Args)]
pub struct SourceArgs {
    #[command(subcommand)]
    pub action: SourceAction,
}

#[derive(Debug, Subcommand)]
pub enum SourceAction {
    /// Coverage by date: the raw partition (open, sealed, expired) and every table version
    /// (loaded from raw or carried forward), with retention.
    Show(ShowArgs),
    /// Ingest dropped files, seal every day that has ended (or through `--through`, even today)
    /// and expire raw days past retention. The service does this every minute by itself.
    Seal(SealArgs),
}

/// The arguments of `databuild source show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The source's name.
    pub name: String,
}

/// The arguments of `databuild source seal`.
#[derive(Debug, Args)]
pub struct SealArgs {
    /// One source (default: all).
    pub name: Option<String>,
    /// Seal through this date (YYYY-MM-DD), today at the latest.
    #[arg(long, value_name = "DATE")]
    pub through: Option<String>,
}

/// The arguments of `databuild promote`.
#[derive(Debug, Args)]
pub struct PromoteArgs {
    /// The table (a source's name).
    pub table: String,
    /// The version its alias points at from now on.
    #[arg(long)]
    pub version: u32,
    /// First rebuild the partitions built over the alias against the new version; promote
    /// only if that succeeds.
    #[arg(long)]
    pub build_downstream: bool,
}

/// The arguments of `databuild want`.
#[derive(Debug, Args)]
pub struct WantArgs {
    /// Partition refs; braces expand.
    #[arg(required = true)]
    pub refs: Vec<String>,
    /// How long the want stands (default 30d).
    #[arg(long)]
    pub ttl: Option<String>,
    /// How long after each partition's day ends (the date in its ref) it must be live.
    #[arg(long)]
    pub sla: Option<String>,
    /// When every partition must be live: an RFC 3339 time, or HH:MM, the next such UTC time.
    #[arg(long)]
    pub by: Option<String>,
}

/// The arguments of `databuild wants`.
#[derive(Debug, Args)]
pub struct WantsArgs {
    /// One want (an id, a unique prefix or the short form): the builds and runs that made
    /// its partitions, and what the others wait for.
    pub id: Option<String>,
    /// requested, waiting, satisfied, expired or cancelled.
    #[arg(long)]
    pub status: Option<String>,
    /// Include ended (expired, cancelled) wants.
    #[arg(long)]
    pub all: bool,
    /// At most N wants.
    #[arg(long, value_name = "N", default_value_t = 100)]
    pub limit: usize,
}

/// The arguments of `databuild unwant`.
#[derive(Debug, Args)]
pub struct UnwantArgs {
    /// The want's id.
    pub id: String,
}

/// The arguments of `databuild table-job`.
#[derive(Debug, Args)]
pub struct TableJobArgs {
    /// What the build passes.
    #[arg(trailing_var_arg = true, allow_hyphen_values = true)]
    pub args: Vec<String>,
}

/// The arguments of `databuild graph`.
#[derive(Debug, Args)]
pub struct GraphArgs {
    /// The picture's language (`--json`: the graph as JSON).
    #[arg(long, value_enum, default_value_t = GraphFormat::Dot)]
    pub format: GraphFormat,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
pub enum GraphFormat {
    Dot,
    Mermaid,
    Json,
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
