//! The JSON answers of the API, as plain functions of the engine. The handlers serve them, and
//! the CLI prints them when it runs in-process, so `databuild X` and `databuild --server URL X`
//! show the same thing.

use databuild_core::PartitionRef;
use databuild_exec::Engine;
use databuild_log::{BuildQuery, EventFilter, PartitionQuery, RunQuery, SqlLimits, Status};
use serde_json::{json, Value};

use crate::error::AppError;

pub type ApiResult<T> = Result<T, AppError>;

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).expect("answers serialize")
}

fn valid_ref(r: &str) -> ApiResult<()> {
    PartitionRef::new(r)
        .map(|_| ())
        .map_err(|e| AppError::bad_request(e.to_string()))
}

pub fn builds(engine: &Engine, status: Option<Status>, limit: usize) -> ApiResult<Value> {
    let builds = engine.store.build_requests(&BuildQuery {
        status,
        limit,
        ..Default::default()
    })?;
    Ok(json!({ "builds": builds }))
}

/// A build request with its partitions, job runs and summary.
pub fn build(engine: &Engine, id: &str) -> ApiResult<Value> {
    let build = engine
        .store
        .build_request(id)?
        .ok_or_else(|| AppError::not_found(format!("no build request `{id}`")))?;
    let mut v = to_value(&build);
    v["partitions"] = to_value(engine.store.request_partitions(id)?);
    v["job_runs"] = to_value(engine.store.job_runs(&RunQuery {
        build_request_id: Some(id.to_string()),
        limit: 100_000,
        ..Default::default()
    })?);
    v["summary"] = to_value(engine.summary(id)?);
    Ok(v)
}

pub fn build_events(engine: &Engine, id: &str) -> ApiResult<Value> {
    if engine.store.build_request(id)?.is_none() {
        return Err(AppError::not_found(format!("no build request `{id}`")));
    }
    let events = engine.store.events(&EventFilter {
        build_request_id: Some(id.to_string()),
        ..Default::default()
    })?;
    Ok(json!({ "events": events }))
}

pub fn cancel(engine: &Engine, id: &str) -> ApiResult<Value> {
    engine.cancel(id)?;
    Ok(json!({ "build_request_id": id, "cancelled": true }))
}

pub fn partitions(engine: &Engine, query: &PartitionQuery) -> ApiResult<Value> {
    Ok(to_value(engine.partition_page(query)?))
}

pub fn status(engine: &Engine, r: &str) -> ApiResult<Value> {
    valid_ref(r)?;
    Ok(to_value(engine.status(&[r.to_string()])?.remove(0)))
}

pub fn explain(engine: &Engine, r: &str) -> ApiResult<Value> {
    valid_ref(r)?;
    Ok(to_value(engine.explain(r)?))
}

pub fn partition_events(engine: &Engine, r: &str) -> ApiResult<Value> {
    valid_ref(r)?;
    let events = engine.store.events(&EventFilter {
        partition_ref: Some(r.to_string()),
        ..Default::default()
    })?;
    Ok(json!({ "events": events }))
}

/// Events with `next`, the index to pass as `since` for the following page.
pub fn events(engine: &Engine, filter: &EventFilter) -> ApiResult<Value> {
    let events = engine.store.events(filter)?;
    let next = events.last().map(|e| e.idx);
    Ok(json!({ "events": events, "next": next }))
}

pub fn jobs(engine: &Engine) -> ApiResult<Value> {
    Ok(json!({ "jobs": engine.jobs(None)? }))
}

pub fn job(engine: &Engine, name: &str) -> ApiResult<Value> {
    let stats = engine
        .jobs(Some(name))
        .map_err(|_| AppError::not_found(format!("no job `{name}` in the graph")))?;
    let runs = engine.store.job_runs(&RunQuery {
        job: Some(name.to_string()),
        limit: 20,
        ..Default::default()
    })?;
    Ok(json!({ "job": stats.first(), "runs": runs }))
}

pub fn job_runs(engine: &Engine, name: &str, limit: usize) -> ApiResult<Value> {
    if engine.graph.job(name).is_none() {
        return Err(AppError::not_found(format!("no job `{name}` in the graph")));
    }
    let runs = engine.store.job_runs(&RunQuery {
        job: Some(name.to_string()),
        limit,
        ..Default::default()
    })?;
    Ok(json!({ "runs": runs }))
}

pub fn run(engine: &Engine, id: &str) -> ApiResult<Value> {
    let run = engine
        .store
        .job_run(id)?
        .ok_or_else(|| AppError::not_found(format!("no job run `{id}`")))?;
    Ok(to_value(run))
}

/// The most of a run's log returned (its tail).
pub const LOG_TAIL: u64 = 1024 * 1024;

pub fn run_log(engine: &Engine, id: &str) -> ApiResult<String> {
    let run = engine
        .store
        .job_run(id)?
        .ok_or_else(|| AppError::not_found(format!("no job run `{id}`")))?;
    let Some(path) = run.log_path else {
        return Err(AppError::not_found(format!(
            "job run `{id}` has no log (it never started)"
        )));
    };
    match databuild_exec::engine::read_tail(std::path::Path::new(&path), LOG_TAIL) {
        Ok(text) => Ok(text),
        // The log file is created with the job's first output: a silent job has none.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(AppError::not_found(format!(
            "the log of job run `{id}` cannot be read: {e}"
        ))),
    }
}

pub fn taint(engine: &Engine, refs: &[String], reason: Option<&str>) -> ApiResult<Value> {
    for r in refs {
        valid_ref(r)?;
    }
    let events = engine.taint(refs, reason)?;
    Ok(json!({ "events": events }))
}

pub fn sql(engine: &Engine, query: &str, max_rows: usize) -> ApiResult<Value> {
    let result = engine.store.sql(
        query,
        SqlLimits {
            max_rows,
            ..Default::default()
        },
    )?;
    Ok(to_value(result))
}

pub fn datasets(engine: &Engine) -> ApiResult<Value> {
    Ok(json!({ "datasets": engine.datasets()? }))
}

/// Every source with its days and tables.
pub fn sources(engine: &Engine) -> ApiResult<Value> {
    Ok(json!({ "sources": engine.sources()? }))
}

/// One source: coverage by date of its raw data and of every table version.
pub fn source(engine: &Engine, name: &str) -> ApiResult<Value> {
    if engine.graph.source(name).is_none() {
        return Err(AppError::not_found(format!(
            "no source `{name}` in the graph"
        )));
    }
    Ok(to_value(engine.source_detail(name)?))
}

/// Ingests, seals and expires one source (or all).
pub fn seal(engine: &Engine, name: Option<&str>, through: Option<&str>) -> ApiResult<Value> {
    Ok(json!({ "sources": engine.maintain_sources(name, through)? }))
}

/// Points a table's alias at a version.
pub fn promote(
    engine: &Engine,
    table: &str,
    version: u32,
    downstream: Option<(
        &databuild_exec::build::BuildOptions,
        &dyn databuild_exec::local::Executor,
        &mut dyn databuild_exec::build::Observer,
        &std::sync::atomic::AtomicBool,
    )>,
) -> ApiResult<Value> {
    Ok(to_value(engine.promote(table, version, downstream)?))
}

/// Records a want.
pub fn want(
    engine: &Engine,
    refs: &[String],
    ttl: Option<&str>,
    sla: Option<&str>,
) -> ApiResult<Value> {
    let duration = |name: &str, v: Option<&str>| -> ApiResult<Option<std::time::Duration>> {
        v.map(|t| {
            humantime::parse_duration(t).map_err(|e| {
                AppError::bad_request(format!(
                    "`{name}` = `{t}` is not a duration ({e}); write it like \"6h\" or \"30d\""
                ))
            })
        })
        .transpose()
    };
    let parsed = refs
        .iter()
        .map(|r| PartitionRef::new(r.as_str()).map_err(|e| AppError::bad_request(e.to_string())))
        .collect::<ApiResult<Vec<_>>>()?;
    let row = engine.want(&parsed, duration("ttl", ttl)?, duration("sla", sla)?, None)?;
    Ok(want_value(&row))
}

/// A want as the API shows it: its row, times in RFC 3339.
fn want_value(w: &databuild_log::WantRow) -> Value {
    let mut v = to_value(w);
    v["created_at"] = json!(databuild_exec::engine::rfc3339(w.created_at));
    v["updated_at"] = json!(databuild_exec::engine::rfc3339(w.updated_at));
    v["expires_at"] = json!(w.expires_at.map(databuild_exec::engine::rfc3339));
    v
}

pub fn wants(engine: &Engine, status: Option<&str>, all: bool, limit: usize) -> ApiResult<Value> {
    let status = status
        .map(|s| {
            Status::parse(s)
                .filter(|s| matches!(s, Status::Requested | Status::Waiting | Status::Satisfied | Status::Expired | Status::Cancelled))
                .ok_or_else(|| AppError::bad_request(format!("unknown want status `{s}`; use requested, waiting, satisfied, expired or cancelled")))
        })
        .transpose()?;
    let rows = engine
        .store
        .wants(status, !all && status.is_none(), limit)?;
    Ok(json!({ "wants": rows.iter().map(want_value).collect::<Vec<_>>() }))
}

pub fn want_detail(engine: &Engine, id: &str) -> ApiResult<Value> {
    let row = engine
        .store
        .want(id)?
        .ok_or_else(|| AppError::not_found(format!("no want `{id}`")))?;
    let mut v = want_value(&row);
    v["partitions"] = to_value(engine.status(&row.refs)?);
    Ok(v)
}

pub fn unwant(engine: &Engine, id: &str) -> ApiResult<Value> {
    if engine.store.want(id)?.is_none() {
        return Err(AppError::not_found(format!("no want `{id}`")));
    }
    Ok(want_value(&engine.unwant(id)?))
}
