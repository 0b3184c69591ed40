//! `serve`: the build graph service (HTTP API and dashboard) over this graph and its event log,
//! with its access rules and limits read from flags and the environment.

use std::process::ExitCode;

use crate::backend::Backend;
use crate::cli::ServeArgs;
use crate::context::Target;
use crate::output::errln;

/// `databuild serve`: here only; a service cannot be sent to another one.
pub fn run(target: &Target, args: ServeArgs) -> anyhow::Result<ExitCode> {
    if let Some(url) = &target.server {
        return Err(crate::UserError(format!(
            "`serve` runs a service; it cannot be sent to one (--server {url})"
        ))
        .into());
    }
    let Backend::Local(local) = target.backend()? else {
        unreachable!("no --server, so a local backend")
    };
    let ServeArgs {
        bind,
        guard_reads,
        allowed_hosts,
        allow_open,
    } = args;
    let access = databuild_service::guard::Access {
        token: crate::settings::secret("DATABUILD_TOKEN"),
        read_token: crate::settings::secret("DATABUILD_READ_TOKEN"),
        guard_reads,
        allowed_hosts,
    };
    serve(*local.engine, bind, access, allow_open)
}

fn serve(
    engine: databuild_exec::Engine,
    bind: std::net::SocketAddr,
    access: databuild_service::guard::Access,
    allow_open: bool,
) -> anyhow::Result<ExitCode> {
    access
        .validate()
        .map_err(|e| crate::UserError(e.to_string()))?;
    if !bind.ip().is_loopback() && access.token.is_none() && !allow_open {
        return Err(crate::UserError(format!(
            "refusing to serve {bind} without DATABUILD_TOKEN: anyone who can reach it could run builds and read the log; set DATABUILD_TOKEN (and --guard-reads to guard reads too), or pass --allow-open on a network you trust"
        ))
        .into());
    }
    if !bind.ip().is_loopback()
        && access.token.is_some()
        && !access.guard_reads
        && access.read_token.is_none()
    {
        errln!("note: reads are open to anyone who can reach {bind} (answers leave out the fields naming hosts, pids and paths of runs, but run logs and messages stay readable); pass --guard-reads to guard them");
    }
    let config = databuild_service::ServeConfig {
        access,
        limits: {
            let default = databuild_service::Limits::default();
            databuild_service::Limits {
                max_refs: crate::settings::max_refs()?,
                sql_queries: crate::settings::count(
                    "DATABUILD_SQL_CONCURRENCY",
                    default.sql_queries,
                )?,
                analyses: crate::settings::count(
                    "DATABUILD_ANALYZE_CONCURRENCY",
                    default.analyses,
                )?,
                event_streams: crate::settings::count(
                    "DATABUILD_MAX_STREAMS",
                    default.event_streams,
                )?,
                connections: databuild_service::ConnectionLimits {
                    per_address: crate::settings::count(
                        "DATABUILD_MAX_CONNECTIONS_PER_ADDRESS",
                        default.connections.per_address,
                    )?,
                    first_byte: crate::settings::interval(
                        "DATABUILD_FIRST_BYTE_TIMEOUT",
                        default.connections.first_byte,
                    )?,
                },
            }
        },
        intervals: {
            let default = databuild_service::Intervals::default();
            databuild_service::Intervals {
                sources: crate::settings::interval("DATABUILD_SOURCE_INTERVAL", default.sources)?,
                want_probes: crate::settings::interval(
                    "DATABUILD_WANT_PROBE_INTERVAL",
                    default.want_probes,
                )?,
                want_retry: crate::settings::interval(
                    "DATABUILD_WANT_RETRY_INTERVAL",
                    default.want_retry,
                )?,
                dead_builds: crate::settings::interval(
                    "DATABUILD_DEAD_BUILD_INTERVAL",
                    default.dead_builds,
                )?,
                arrival_probes: crate::settings::interval(
                    "DATABUILD_ARRIVAL_PROBE_INTERVAL",
                    default.arrival_probes,
                )?,
            }
        },
    };
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(databuild_service::serve(engine, bind, config, |addr| {
        errln!("databuild service listening on http://{addr}");
    }))?;
    errln!("databuild service stopped");
    Ok(ExitCode::SUCCESS)
}
