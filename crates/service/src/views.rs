//! The JSON answers of the API, as plain functions of the engine. The handlers serve them, and
//! the CLI prints them when it runs in-process, so `databuild X` and `databuild --server URL X`
//! show the same thing.

use databuild_core::PartitionRef;
use databuild_exec::views::ListedStatus;
use databuild_exec::Engine;
use databuild_log::{BuildQuery, EventFilter, PartitionQuery, RunQuery, SqlLimits, Status};
use serde_json::{json, Value};

use crate::error::AppError;

pub type ApiResult<T> = Result<T, AppError>;

fn to_value<T: serde::Serialize>(v: T) -> Value {
    serde_json::to_value(v).expect("answers serialize")
}

/// Every answer leaves here: its times as RFC 3339 (see [`rfc3339_times`]).
fn answer(mut v: Value) -> ApiResult<Value> {
    rfc3339_times(&mut v);
    Ok(v)
}

/// One time format in every answer: each `*_at` time (ns since the epoch in the log) becomes
/// RFC 3339 text, its exact value kept beside it as `*_at_ns`. (An event's `timestamp` stays ns,
/// as contract section 5 defines it.)
pub fn rfc3339_times(v: &mut Value) {
    match v {
        Value::Object(map) => {
            let mut exact = Vec::new();
            for (k, value) in map.iter_mut() {
                match value.as_i64() {
                    Some(ns) if k.ends_with("_at") => {
                        *value = Value::String(databuild_exec::engine::rfc3339(ns));
                        exact.push((format!("{k}_ns"), ns));
                    }
                    _ => rfc3339_times(value),
                }
            }
            for (k, ns) in exact {
                map.insert(k, Value::from(ns));
            }
        }
        Value::Array(items) => items.iter_mut().for_each(rfc3339_times),
        _ => {}
    }
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
    answer(json!({ "builds": builds }))
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
    answer(v)
}

pub fn build_events(engine: &Engine, id: &str) -> ApiResult<Value> {
    if engine.store.build_request(id)?.is_none() {
        return Err(AppError::not_found(format!("no build request `{id}`")));
    }
    let events = engine.store.events(&EventFilter {
        build_request_id: Some(id.to_string()),
        ..Default::default()
    })?;
    answer(json!({ "events": events }))
}

pub fn cancel(engine: &Engine, id: &str) -> ApiResult<Value> {
    engine.cancel(id)?;
    answer(json!({ "build_request_id": id, "cancelled": true }))
}

pub fn partitions(
    engine: &Engine,
    query: &PartitionQuery,
    listed: Option<ListedStatus>,
) -> ApiResult<Value> {
    answer(to_value(engine.partition_page(query, listed)?))
}

pub fn status(engine: &Engine, r: &str) -> ApiResult<Value> {
    valid_ref(r)?;
    answer(to_value(engine.status(&[r.to_string()])?.remove(0)))
}

pub fn explain(engine: &Engine, r: &str) -> ApiResult<Value> {
    valid_ref(r)?;
    answer(to_value(engine.explain(r)?))
}

pub fn partition_events(engine: &Engine, r: &str) -> ApiResult<Value> {
    valid_ref(r)?;
    let events = engine.store.events(&EventFilter {
        partition_ref: Some(r.to_string()),
        ..Default::default()
    })?;
    answer(json!({ "events": events }))
}

/// Events with `next`, the index to pass as `since` for the following page.
pub fn events(engine: &Engine, filter: &EventFilter) -> ApiResult<Value> {
    let events = engine.store.events(filter)?;
    let next = events.last().map(|e| e.idx);
    answer(json!({ "events": events, "next": next }))
}

pub fn jobs(engine: &Engine) -> ApiResult<Value> {
    answer(json!({ "jobs": engine.jobs(None)? }))
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
    answer(json!({ "job": stats.first(), "runs": runs }))
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
    answer(json!({ "runs": runs }))
}

pub fn run(engine: &Engine, id: &str) -> ApiResult<Value> {
    let run = engine
        .store
        .job_run(id)?
        .ok_or_else(|| AppError::not_found(format!("no job run `{id}`")))?;
    answer(to_value(run))
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
    answer(json!({ "events": events }))
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

pub fn datasets(engine: &Engine, exact: bool) -> ApiResult<Value> {
    answer(json!({ "datasets": engine.datasets(exact)? }))
}

/// Every source with its days and tables.
pub fn sources(engine: &Engine) -> ApiResult<Value> {
    answer(json!({ "sources": engine.sources()? }))
}

/// One source: coverage by date of its raw data and of every table version.
pub fn source(engine: &Engine, name: &str) -> ApiResult<Value> {
    if engine.graph.source(name).is_none() {
        return Err(AppError::not_found(format!(
            "no source `{name}` in the graph"
        )));
    }
    answer(to_value(engine.source_detail(name)?))
}

/// Ingests, seals and expires one source (or all).
pub fn seal(engine: &Engine, name: Option<&str>, through: Option<&str>) -> ApiResult<Value> {
    answer(json!({ "sources": engine.maintain_sources(name, through)? }))
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
    answer(to_value(engine.promote(table, version, downstream)?))
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
    answer(want_value(&row))
}

/// A want as the API shows it: its row (its times made RFC 3339 by [`answer`]).
fn want_value(w: &databuild_log::WantRow) -> Value {
    to_value(w)
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
    answer(json!({ "wants": rows.iter().map(want_value).collect::<Vec<_>>() }))
}

pub fn want_detail(engine: &Engine, id: &str) -> ApiResult<Value> {
    let row = engine
        .store
        .want(id)?
        .ok_or_else(|| AppError::not_found(format!("no want `{id}`")))?;
    let mut v = want_value(&row);
    v["partitions"] = to_value(engine.status(&row.refs)?);
    answer(v)
}

pub fn unwant(engine: &Engine, id: &str) -> ApiResult<Value> {
    if engine.store.want(id)?.is_none() {
        return Err(AppError::not_found(format!("no want `{id}`")));
    }
    answer(want_value(&engine.unwant(id)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_are_rfc3339_with_their_exact_ns_beside_them() {
        let mut v = json!({"builds": [{"created_at": 1_700_000_000_123_456_789i64, "updated_at": null, "n": 3,
                            "events": [{"timestamp": 5, "data": {"expires_at": 0}}]}]});
        rfc3339_times(&mut v);
        let b = &v["builds"][0];
        assert_eq!(b["created_at"], "2023-11-14T22:13:20.123Z");
        assert_eq!(b["created_at_ns"], 1_700_000_000_123_456_789i64);
        assert_eq!(b["updated_at"], Value::Null);
        assert!(b.get("updated_at_ns").is_none());
        assert_eq!(b["n"], 3);
        assert_eq!(b["events"][0]["timestamp"], 5, "events keep ns");
        assert_eq!(
            b["events"][0]["data"]["expires_at"],
            "1970-01-01T00:00:00.000Z"
        );
    }
}
