//! One module per group of commands; `run` dispatches to the local engine or a service.

mod analyze;
mod build;
mod graph;
mod init;
mod inspect;
mod lineage;
mod migrate;
mod query;
mod sources;
mod wants;

use std::process::ExitCode;

use crate::backend::Backend;
use crate::cli::{Cli, Command};
use crate::context::Context;
use crate::output::errln;

pub fn run(cli: Cli) -> anyhow::Result<ExitCode> {
    let json = cli.json;
    match &cli.command {
        Command::MigrateLog { from, to } => return migrate::run(from, to, json),
        Command::TableJob { args } => return sources::table_job(args),
        Command::Init => return init::run(&cli.graph, json),
        Command::Completions { shell } => return init::completions(*shell),
        _ => {}
    }
    let backend = match (&cli.server, &cli.command) {
        (Some(url), Command::Serve { .. }) => {
            return Err(crate::UserError(format!(
                "`serve` runs a service; it cannot be sent to one (--server {url})"
            ))
            .into())
        }
        (Some(url), _) => Backend::remote(url),
        (None, Command::Graph { format }) => {
            return graph::local(
                Context::load(&cli.graph)?,
                cli.event_log.as_deref(),
                *format,
                json,
            )
        }
        (None, _) => Backend::local(Context::load(&cli.graph)?.engine(cli.event_log.as_deref())?)?,
    };
    match cli.command {
        Command::Graph { format } => graph::remote(&backend, format, json),
        Command::Analyze {
            refs,
            limit,
            parallel,
            force,
            allow_stale,
        } => {
            let planned = analyze::Planned {
                force,
                allow_stale,
                max_runs: None,
            };
            analyze::run(&backend, &refs, limit, parallel, planned, json)
        }
        Command::Build {
            refs,
            force,
            parallel,
            allow_stale,
            max_runs,
            dry_run: true,
            ..
        } => {
            let planned = analyze::Planned {
                force,
                allow_stale,
                max_runs,
            };
            analyze::run(&backend, &refs, 200, parallel, planned, json)
        }
        Command::Build {
            refs,
            force,
            parallel,
            keep_going,
            allow_stale,
            max_runs,
            dry_run: false,
        } => build::run(
            &backend,
            &refs,
            build::Flags {
                force,
                parallel,
                keep_going,
                allow_stale,
                max_runs,
            },
            json,
        ),
        Command::Cancel { id } => query::cancel(&backend, &id, json),
        Command::Status { refs } => inspect::status(&backend, &refs, json),
        Command::Explain { partition_ref } => inspect::explain(&backend, &partition_ref, json),
        Command::Check { refs } => inspect::check(&backend, &refs, json),
        Command::Taint {
            refs,
            dry_run: true,
            ..
        } => inspect::taint_impact(&backend, &refs, json),
        Command::Taint { refs, reason, .. } => {
            inspect::taint(&backend, &refs, reason.as_deref(), json)
        }
        Command::Lineage {
            partition_ref,
            downstream,
            depth,
            instance,
            format,
            ..
        } => lineage::run(
            &backend,
            &partition_ref,
            downstream,
            depth,
            instance.as_deref(),
            if json {
                crate::cli::LineageFormat::Json
            } else {
                format
            },
        ),
        Command::Diff {
            partition_ref,
            instance,
            since,
        } => lineage::diff(
            &backend,
            &partition_ref,
            instance.as_deref(),
            since.as_deref(),
            json,
        ),
        Command::Gc {
            older_than,
            dry_run,
        } => inspect::gc(&backend, &older_than, dry_run, json),
        Command::Partitions {
            pattern,
            status,
            limit,
            after,
        } => query::partitions(&backend, pattern, status, limit, after, json),
        Command::Builds {
            id,
            partitions: true,
            after,
            limit,
            ..
        } => query::build_partitions(
            &backend,
            id.as_deref().unwrap_or_default(),
            after.as_deref(),
            limit,
            json,
        ),
        Command::Builds { id, all, limit, .. } => {
            query::builds(&backend, id.as_deref(), all, limit, json)
        }
        Command::Events {
            build_request_id,
            partition_ref,
            job,
            job_run_id,
            since,
            limit,
            follow,
        } => {
            let filter = databuild_log::EventFilter {
                since,
                limit,
                build_request_id,
                partition_ref,
                job,
                job_run_id,
                kind: None,
                status: None,
                from: None,
                to: None,
            };
            query::events(&backend, filter, follow, json)
        }
        Command::Datasets { exact } => query::datasets(&backend, exact, json),
        Command::Jobs { name } => query::jobs(&backend, name.as_deref(), json),
        Command::Runs { id, log: false, .. } => query::run(&backend, &id, json),
        Command::Runs { id, follow, .. } => query::log(&backend, &id, follow, json),
        Command::Logs {
            partition_ref,
            follow,
        } => query::partition_log(&backend, &partition_ref, follow, json),
        Command::Sql { query, max_rows } => query::sql(&backend, &query, max_rows, json),
        Command::Sources => sources::list_sources(&backend, json),
        Command::Source { action } => match action {
            crate::cli::SourceAction::Show { name } => sources::show(&backend, &name, json),
            crate::cli::SourceAction::Seal { name, through } => {
                sources::seal(&backend, name.as_deref(), through.as_deref(), json)
            }
        },
        Command::Promote {
            table,
            version,
            build_downstream,
        } => sources::promote(&backend, &table, version, build_downstream, json),
        Command::Want { refs, ttl, sla } => {
            wants::want(&backend, &refs, ttl.as_deref(), sla.as_deref(), json)
        }
        Command::Wants { id: Some(id), .. } => wants::show(&backend, &id, json),
        Command::Wants {
            id: None,
            status,
            all,
            limit,
        } => wants::list(&backend, status.as_deref(), all, limit, json),
        Command::Unwant { id } => wants::unwant(&backend, &id, json),
        Command::MigrateLog { .. }
        | Command::TableJob { .. }
        | Command::Init
        | Command::Completions { .. } => unreachable!("handled above"),
        Command::CheckLog => match &backend {
            Backend::Local(local) => migrate::check(&local.engine, json),
            Backend::Remote(_) => Err(crate::UserError(
                "check-log reads the log directly; run it without --server".into(),
            )
            .into()),
        },
        Command::Serve {
            bind,
            guard_reads,
            allowed_hosts,
            allow_open,
        } => match backend {
            Backend::Local(local) => {
                let access = databuild_service::guard::Access {
                    token: crate::settings::secret("DATABUILD_TOKEN"),
                    read_token: crate::settings::secret("DATABUILD_READ_TOKEN"),
                    guard_reads,
                    allowed_hosts,
                };
                serve(*local.engine, bind, access, allow_open)
            }
            Backend::Remote(_) => unreachable!("refused above"),
        },
    }
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
        limits: databuild_service::Limits {
            max_refs: crate::settings::max_refs()?,
            sql_queries: crate::settings::count("DATABUILD_SQL_CONCURRENCY", 4)?,
            event_streams: crate::settings::count("DATABUILD_MAX_STREAMS", 64)?,
        },
        intervals: {
            let default = databuild_service::Intervals::default();
            databuild_service::Intervals {
                sources: crate::settings::interval("DATABUILD_SOURCE_INTERVAL", default.sources)?,
                want_probes: crate::settings::interval(
                    "DATABUILD_WANT_PROBE_INTERVAL",
                    default.want_probes,
                )?,
                dead_builds: crate::settings::interval(
                    "DATABUILD_DEAD_BUILD_INTERVAL",
                    default.dead_builds,
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
