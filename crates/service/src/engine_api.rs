//! The API without HTTP: each of its operations (reads and writes alike) as a plain function of
//! the engine, returning a type of [`databuild_exec::answers`]. The handlers serve them, the
//! dashboard draws them, and the CLI calls them through [`crate::client::Api`] when it runs
//! in-process, so `databuild X` and `databuild --server URL X` show the same thing by type.

use databuild_core::{BraceExpansionError, PartitionRef, UserRefError};
use databuild_exec::answers::{
    self, Build, BuildDetail, BuildList, BuildPartitionPage, BuildProgress, BuildSummary,
    Cancelled, DatasetList, EventList, EventPage, Explain, JobDetail, JobList, JobRun, JobRunList,
    LogChunk, PartitionStatus, Sealed, SourceList, Want, WantDetail, WantList,
};
use databuild_exec::answers::{
    EnvironmentChange, EnvironmentDiff, EnvironmentList, EnvironmentView, Promotion, SourceDetail,
};
use databuild_exec::engine::gc::{GcOptions, GcReport};
use databuild_exec::engine::lineage::{
    Direction, InstanceDiff, Lineage, LineageQuery, TaintImpact,
};
use databuild_exec::engine::listing::{ListedStatus, PartitionPage};
use databuild_exec::Engine;
use databuild_log::{
    BuildQuery, EventFilter, IdKind, Kind, PartitionQuery, RunQuery, SqlLimits, SqlResult, Status,
};

use crate::error::AppError;

pub type ApiResult<T> = Result<T, AppError>;

fn valid_ref(r: &str) -> ApiResult<()> {
    PartitionRef::new(r)
        .map(|_| ())
        .map_err(|e| AppError::bad_request(e.to_string()))
}

/// The refs a user's words name, braces expanded within `max_refs` (core `parse_user_refs`, as
/// every entry point takes them); too many is a 413, anything else invalid a 400.
pub fn user_refs<S: AsRef<str>>(
    engine: &Engine,
    words: &[S],
    max_refs: usize,
) -> ApiResult<Vec<PartitionRef>> {
    if words.is_empty() {
        return Err(AppError::bad_request(
            "`partitions` is empty: name at least one ref",
        ));
    }
    let domains = &engine.graph.domains;
    databuild_core::parse_user_refs(words, max_refs, domains).map_err(|e| match e {
        UserRefError::Braces(
            BraceExpansionError::TooMany { .. } | BraceExpansionError::TooBig { .. },
        ) => AppError::new(
            axum::http::StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_refs",
            e.to_string(),
        ),
        other => AppError::bad_request(other.to_string()),
    })
}

/// [`user_refs`], and something in the graph must produce each.
pub fn parse_refs<S: AsRef<str>>(
    engine: &Engine,
    words: &[S],
    max_refs: usize,
) -> ApiResult<Vec<PartitionRef>> {
    let refs = user_refs(engine, words, max_refs)?;
    if let Some(r) = refs
        .iter()
        .find(|r| engine.graph.producer_of(r.as_str()).is_none())
    {
        return Err(AppError::bad_request(
            engine.graph.unmatched_reason(r.as_str()),
        ));
    }
    Ok(refs)
}

fn strings(refs: Vec<PartitionRef>) -> Vec<String> {
    refs.into_iter().map(|r| r.to_string()).collect()
}

fn not_found_build(id: &str) -> AppError {
    AppError::not_found(format!("no build request `{id}`"))
}

/// The whole id of what `text` names: the id itself, a prefix of it, its short form (as shown),
/// or (builds) `last`, the newest build. Several matches are refused, naming some of them.
fn resolve(engine: &Engine, kind: IdKind, text: &str) -> ApiResult<String> {
    let what = match kind {
        IdKind::BuildRequest => "build request",
        IdKind::JobRun => "job run",
        IdKind::Want => "want",
    };
    let store = &engine.store;
    let exists = match kind {
        IdKind::BuildRequest => store.build_request(text)?.is_some(),
        IdKind::JobRun => store.job_run(text)?.is_some(),
        IdKind::Want => store.want(text)?.is_some(),
    };
    if exists {
        return Ok(text.to_string());
    }
    if kind == IdKind::BuildRequest && text == "last" {
        let newest = engine.store.build_requests(&BuildQuery {
            limit: 1,
            ..Default::default()
        })?;
        return (newest.into_iter().next().map(|b| b.build_request_id))
            .ok_or_else(|| AppError::not_found("no build yet: `last` names the newest build"));
    }
    // The ids DataBuild mints are UUIDs: a part of one is hex digits and dashes.
    let typable = !text.is_empty() && text.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    let matches = match typable {
        // (The ids DataBuild mints are lower-case.)
        true => store.ids_matching(kind, &text.to_ascii_lowercase(), 6)?,
        false => Vec::new(),
    };
    match matches.as_slice() {
        [] => Err(AppError::not_found(format!("no {what} `{text}`"))),
        [id] => Ok(id.clone()),
        many => Err(AppError::bad_request(format!(
            "`{text}` names {} {what}s ({}{}): give more of the id",
            if many.len() > 5 {
                "more than 5".to_string()
            } else {
                many.len().to_string()
            },
            many.iter()
                .take(5)
                .map(String::as_str)
                .collect::<Vec<_>>()
                .join(", "),
            if many.len() > 5 { ", …" } else { "" },
        ))),
    }
}

/// Builds whose driving process is gone are closed before an answer about builds or
/// partitions is read, so that none shows a dead build running or its partitions `building`
/// (see [`Engine::close_dead_builds_before_reading`]). Not the read's failure when it cannot:
/// a log this process may not write (a read-only role) answers what it holds, and the next
/// process that can write (a build, `serve`'s sweep, a reader that may) closes them.
fn close_dead_builds(engine: &Engine) {
    let _ = engine.close_dead_builds_before_reading();
}

pub fn build_id(engine: &Engine, text: &str) -> ApiResult<String> {
    resolve(engine, IdKind::BuildRequest, text)
}

pub fn run_id(engine: &Engine, text: &str) -> ApiResult<String> {
    resolve(engine, IdKind::JobRun, text)
}

/// Build requests, newest first; `all`: analyses too.
pub fn builds(
    engine: &Engine,
    status: Option<Status>,
    all: bool,
    limit: usize,
) -> ApiResult<BuildList> {
    close_dead_builds(engine);
    let builds = engine.store.build_requests(&BuildQuery {
        status,
        analyses: all,
        limit,
        ..Default::default()
    })?;
    Ok(BuildList {
        builds: builds.iter().map(Build::from).collect(),
    })
}

fn runs(engine: &Engine, query: &RunQuery) -> ApiResult<Vec<JobRun>> {
    Ok(engine
        .store
        .job_runs(query)?
        .iter()
        .map(JobRun::from)
        .collect())
}

/// A build request with its partitions, job runs and summary.
pub fn build(engine: &Engine, id: &str) -> ApiResult<BuildDetail> {
    close_dead_builds(engine);
    let id = &build_id(engine, id)?;
    let build = engine
        .store
        .build_request(id)?
        .ok_or_else(|| not_found_build(id))?;
    let job_runs = runs(
        engine,
        &RunQuery {
            build_request_id: Some(id.to_string()),
            limit: answers::DETAIL_ROWS,
            ..Default::default()
        },
    )?;
    let job_runs_total = engine
        .store
        .build_run_counts(id)?
        .by_status
        .iter()
        .map(|c| c.n)
        .sum();
    Ok(BuildDetail::new(
        &build,
        engine
            .store
            .request_partitions_page(id, None, answers::DETAIL_ROWS + 1)?,
        (job_runs, job_runs_total),
        Some(engine.summary_cut(&build, answers::DETAIL_ROWS)?),
        engine.progress_of(&build)?,
    ))
}

/// The most rows one page of a build's partitions or events holds (a larger `limit` is cut to
/// it; `next` goes on from there).
pub const MAX_PAGE: usize = 10_000;

/// A page of a build's partitions, in ref order, after `after`.
pub fn build_partitions(
    engine: &Engine,
    id: &str,
    after: Option<&str>,
    limit: usize,
) -> ApiResult<BuildPartitionPage> {
    close_dead_builds(engine);
    let id = &build_id(engine, id)?;
    let mut partitions = engine.store.request_partitions_page(id, after, limit + 1)?;
    let next = (partitions.len() > limit).then(|| {
        partitions.truncate(limit);
        partitions[limit - 1].partition_ref.clone()
    });
    Ok(BuildPartitionPage { partitions, next })
}

/// What a build did, every list whole (a build's detail cuts them to a page).
pub fn build_summary(engine: &Engine, id: &str) -> ApiResult<BuildSummary> {
    close_dead_builds(engine);
    let id = &build_id(engine, id)?;
    let build = engine
        .store
        .build_request(id)?
        .ok_or_else(|| not_found_build(id))?;
    Ok(engine.summary_of(&build)?)
}

/// A build request's progress: 404 before it is planned.
pub fn progress(engine: &Engine, id: &str) -> ApiResult<BuildProgress> {
    close_dead_builds(engine);
    let id = &build_id(engine, id)?;
    engine.progress(id)?.ok_or_else(|| {
        AppError::not_found(format!(
            "no build request `{id}` with a plan (it may still be planning, or have been refused \
             before it had one)"
        ))
    })
}

/// A page of a build's events in log order, after the index `since`.
pub fn build_events(
    engine: &Engine,
    id: &str,
    since: Option<i64>,
    limit: usize,
) -> ApiResult<EventPage> {
    let id = &build_id(engine, id)?;
    let events = engine.store.events(&EventFilter {
        build_request_id: Some(id.to_string()),
        since,
        limit: Some(limit),
        ..Default::default()
    })?;
    let next = (events.len() >= limit)
        .then(|| events.last().map(|e| e.idx))
        .flatten();
    Ok(EventPage {
        events: answers::events(&events),
        next,
    })
}

pub fn cancel(engine: &Engine, id: &str) -> ApiResult<Cancelled> {
    let id = build_id(engine, id)?;
    engine.cancel(&id)?;
    Ok(Cancelled {
        build_request_id: id,
        cancelled: true,
    })
}

pub fn partitions(
    engine: &Engine,
    query: &PartitionQuery,
    listed: Option<ListedStatus>,
) -> ApiResult<PartitionPage> {
    close_dead_builds(engine);
    Ok(engine.partition_page(query, listed)?)
}

pub fn status(engine: &Engine, r: &str) -> ApiResult<PartitionStatus> {
    close_dead_builds(engine);
    valid_ref(r)?;
    Ok(PartitionStatus::from(
        &engine.status_answers(&[r.to_string()])?.remove(0),
    ))
}

pub fn explain(engine: &Engine, r: &str) -> ApiResult<Explain> {
    close_dead_builds(engine);
    valid_ref(r)?;
    Ok(Explain::from(&engine.explain(r)?))
}

pub fn forecast(engine: &Engine, r: &str) -> ApiResult<databuild_exec::answers::Forecast> {
    close_dead_builds(engine);
    valid_ref(r)?;
    Ok(engine.forecast(&[r.to_string()])?.remove(0))
}

/// The most levels a lineage answer goes.
pub const MAX_LINEAGE_DEPTH: u32 = 100;

/// The lineage of a partition's current instance, or of the one run `instance` (an id as people
/// type it) built.
pub fn lineage(
    engine: &Engine,
    r: &str,
    direction: Direction,
    depth: u32,
    instance: Option<&str>,
) -> ApiResult<Lineage> {
    valid_ref(r)?;
    if depth > MAX_LINEAGE_DEPTH {
        return Err(AppError::bad_request(format!(
            "depth {depth} is more than {MAX_LINEAGE_DEPTH}; an answer holds at most {} nodes anyway",
            databuild_exec::engine::lineage::MAX_NODES
        )));
    }
    let instance = instance.map(|id| run_id(engine, id)).transpose()?;
    Ok(engine.lineage(&LineageQuery {
        partition_ref: r.to_string(),
        direction,
        depth,
        instance,
    })?)
}

/// What changed between two instances of a partition (ids as people type them): by default its
/// current one and the one before.
pub fn diff(
    engine: &Engine,
    r: &str,
    instance: Option<&str>,
    since: Option<&str>,
) -> ApiResult<InstanceDiff> {
    valid_ref(r)?;
    let instance = instance.map(|id| run_id(engine, id)).transpose()?;
    let since = since.map(|id| run_id(engine, id)).transpose()?;
    Ok(engine.diff(r, instance.as_deref(), since.as_deref())?)
}

pub fn partition_events(engine: &Engine, r: &str) -> ApiResult<EventList> {
    valid_ref(r)?;
    let events = engine.store.events(&EventFilter {
        partition_ref: Some(r.to_string()),
        ..Default::default()
    })?;
    Ok(EventList {
        events: answers::events(&events),
    })
}

/// Events with `next`, the index to pass as `since` for the following page.
pub fn events(engine: &Engine, filter: &EventFilter) -> ApiResult<EventPage> {
    // A build or run named as listings show it (a prefix, a short form) is that one; an id
    // that names none, or several, is refused as `builds` and `runs` refuse it (an empty page
    // would read as a build or run without events). An empty one (a blank form field) filters
    // nothing.
    let named = |kind, text: &Option<String>| {
        text.as_ref()
            .filter(|t| !t.is_empty())
            .map(|t| resolve(engine, kind, t))
            .transpose()
    };
    let filter = &EventFilter {
        build_request_id: named(IdKind::BuildRequest, &filter.build_request_id)?,
        job_run_id: named(IdKind::JobRun, &filter.job_run_id)?,
        ..filter.clone()
    };
    let events = engine.store.events(filter)?;
    let next = events.last().map(|e| e.idx);
    Ok(EventPage {
        events: answers::events(&events),
        next,
    })
}

pub fn jobs(engine: &Engine) -> ApiResult<JobList> {
    Ok(JobList {
        jobs: engine
            .jobs(None)?
            .iter()
            .map(answers::JobStats::from)
            .collect(),
    })
}

pub fn job(engine: &Engine, name: &str) -> ApiResult<JobDetail> {
    let stats = engine.jobs(Some(name))?;
    let stats = stats
        .first()
        .ok_or_else(|| AppError::not_found(format!("no job `{name}` in the graph")))?;
    let runs = runs(
        engine,
        &RunQuery {
            job: Some(name.to_string()),
            limit: 20,
            ..Default::default()
        },
    )?;
    Ok(JobDetail {
        job: answers::JobStats::from(stats),
        runs,
        trends: engine.trends(name)?,
    })
}

/// The charts of a job's page.
pub fn charts(engine: &Engine, name: &str) -> ApiResult<Vec<answers::MetricChart>> {
    Ok(engine.charts(name)?)
}

/// A run's resources and metrics beside its job's p50 (its page).
pub fn against_p50(engine: &Engine, run: &answers::JobRun) -> ApiResult<Vec<answers::AgainstP50>> {
    Ok(engine.against_p50(&run.job, &run.job_run_id)?)
}

pub fn metric_series(
    engine: &Engine,
    pattern: &str,
    metric: &str,
    after: Option<&str>,
    limit: usize,
) -> ApiResult<answers::MetricSeries> {
    Ok(engine.metric_series(pattern, metric, after, limit)?)
}

pub fn job_runs(engine: &Engine, name: &str, limit: usize) -> ApiResult<JobRunList> {
    if engine.graph.job(name).is_none() {
        return Err(AppError::not_found(format!("no job `{name}` in the graph")));
    }
    let runs = runs(
        engine,
        &RunQuery {
            job: Some(name.to_string()),
            limit,
            ..Default::default()
        },
    )?;
    Ok(JobRunList { runs })
}

pub fn run(engine: &Engine, id: &str) -> ApiResult<JobRun> {
    let id = &run_id(engine, id)?;
    let run = engine
        .store
        .job_run(id)?
        .ok_or_else(|| AppError::not_found(format!("no job run `{id}`")))?;
    let answer = JobRun::from(&run);
    if !matches!(run.status, Status::Completed | Status::Failed) {
        return Ok(answer);
    }
    // Its end's event: what the run cost and reported (a run has a few events, by its index).
    let end = engine.store.events(&EventFilter {
        job_run_id: Some(id.clone()),
        kind: Some(Kind::JobRun),
        status: Some(run.status),
        ..EventFilter::default()
    })?;
    Ok(match end.last() {
        Some(end) => answer.with_end(end),
        None => answer,
    })
}

/// The most of a run's log returned (its tail).
pub const LOG_TAIL: u64 = 1024 * 1024;
/// The most of a run's log one chunk carries.
pub const LOG_CHUNK: usize = 1024 * 1024;

/// A log that is there but cannot be read: the service's fault, not the request's.
fn unreadable_log(id: &str, e: std::io::Error) -> AppError {
    AppError::new(
        axum::http::StatusCode::INTERNAL_SERVER_ERROR,
        "log_unreadable",
        format!("the log of job run `{id}` cannot be read: {e}"),
    )
}

/// The length of `bytes` without the UTF-8 character its end cuts short, if it does.
fn whole_chars(bytes: &[u8]) -> usize {
    for back in 1..=bytes.len().min(4) {
        let b = bytes[bytes.len() - back];
        if b & 0xC0 != 0x80 {
            // The last character's first byte says how long it is.
            let len = match b {
                0xF0..=0xF4 => 4,
                0xE0..=0xEF => 3,
                0xC2..=0xDF => 2,
                _ => 1, // ASCII, or a byte no character starts with: shown as U+FFFD
            };
            return if len > back {
                bytes.len() - back
            } else {
                bytes.len()
            };
        }
    }
    bytes.len()
}

/// The run's log from byte `offset` on, at most [`LOG_CHUNK`] of it.
pub fn run_log_chunk(engine: &Engine, id: &str, offset: u64) -> ApiResult<LogChunk> {
    use std::io::{Read, Seek, SeekFrom};
    let id = run_id(engine, id)?;
    let run = engine
        .store
        .job_run(&id)?
        .ok_or_else(|| AppError::not_found(format!("no job run `{id}`")))?;
    // Still running, unless the process driving it is known to be gone (on this machine; on
    // another, its takeover records the run's end).
    let driver = match &run.build_request_id {
        Some(b) => engine.store.build_request(b)?.and_then(|b| b.owner),
        None => None,
    };
    let running = run.status.run_unfinished()
        && databuild_exec::run::owner::owner_alive(driver.as_deref()) != Some(false);
    let empty = |size: u64| LogChunk {
        job_run_id: id.clone(),
        offset: offset.min(size),
        next_offset: offset.min(size),
        size,
        text: String::new(),
        running,
    };
    let Some(path) = &run.log_path else {
        return Ok(empty(0));
    };
    let mut file = match std::fs::File::open(path) {
        Ok(f) => f,
        // Created with the job's first output: a silent job has none (yet).
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(empty(0)),
        Err(e) => return Err(unreadable_log(&id, e)),
    };
    let read = |file: &mut std::fs::File| -> std::io::Result<(u64, Vec<u8>)> {
        let size = file.metadata()?.len();
        file.seek(SeekFrom::Start(offset.min(size)))?;
        let mut bytes = Vec::new();
        file.take(LOG_CHUNK as u64).read_to_end(&mut bytes)?;
        Ok((size, bytes))
    };
    let (size, mut bytes) = read(&mut file).map_err(|e| unreadable_log(&id, e))?;
    // A character cut by the chunk's end (or by a write in progress) starts the next chunk;
    // at the end of a log that no longer grows, it is what there is.
    if running || bytes.len() == LOG_CHUNK {
        bytes.truncate(whole_chars(&bytes));
    }
    Ok(LogChunk {
        next_offset: offset.min(size) + bytes.len() as u64,
        text: String::from_utf8_lossy(&bytes).into_owned(),
        ..empty(size)
    })
}

pub fn run_log(engine: &Engine, id: &str) -> ApiResult<String> {
    let id = &run_id(engine, id)?;
    let run = engine
        .store
        .job_run(id)?
        .ok_or_else(|| AppError::not_found(format!("no job run `{id}`")))?;
    let Some(path) = run.log_path else {
        return Err(AppError::not_found(format!(
            "job run `{id}` has no log (it never started)"
        )));
    };
    match databuild_exec::run::log::read_tail(std::path::Path::new(&path), LOG_TAIL) {
        Ok(text) => Ok(text),
        // The log file is created with the job's first output: a silent job has none.
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(String::new()),
        Err(e) => Err(AppError::not_found(format!(
            "the log of job run `{id}` cannot be read: {e}"
        ))),
    }
}

/// Taints the refs the words name (braces expanded, as for builds).
pub fn taint(
    engine: &Engine,
    words: &[String],
    reason: Option<&str>,
    max_refs: usize,
) -> ApiResult<EventList> {
    let refs = strings(user_refs(engine, words, max_refs)?);
    let events = engine.taint(&refs, reason)?;
    Ok(EventList {
        events: answers::events(&events),
    })
}

/// Runs the checks of the partitions the words name, on the graph's executor.
pub fn check(
    engine: &Engine,
    words: &[String],
    max_refs: usize,
) -> ApiResult<answers::CheckAnswer> {
    let refs = strings(user_refs(engine, words, max_refs)?);
    let executor = engine.executor();
    let reports = engine.check(&refs, executor.as_ref())?;
    Ok(answers::CheckAnswer {
        partitions: reports.iter().map(answers::PartitionStatus::from).collect(),
    })
}

/// What tainting the refs the words name would make stale; nothing is written.
pub fn taint_impact(engine: &Engine, words: &[String], max_refs: usize) -> ApiResult<TaintImpact> {
    let refs = strings(user_refs(engine, words, max_refs)?);
    Ok(engine.taint_impact(&refs)?)
}

pub fn sql(engine: &Engine, query: &str, max_rows: usize) -> ApiResult<SqlResult> {
    Ok(engine.store.sql(
        query,
        SqlLimits {
            max_rows,
            ..Default::default()
        },
    )?)
}

pub fn datasets(engine: &Engine, exact: bool) -> ApiResult<DatasetList> {
    close_dead_builds(engine);
    Ok(DatasetList {
        datasets: engine.datasets(exact)?,
    })
}

/// Every source with its days and tables.
pub fn sources(engine: &Engine) -> ApiResult<SourceList> {
    Ok(SourceList {
        sources: engine.sources()?,
    })
}

/// One source: coverage by date of its raw data and of every table version.
pub fn source(engine: &Engine, name: &str) -> ApiResult<SourceDetail> {
    if engine.graph.source(name).is_none() {
        return Err(AppError::not_found(format!(
            "no source `{name}` in the graph"
        )));
    }
    Ok(engine.source_detail(name)?)
}

/// Ingests, seals and expires one source (or all).
pub fn seal(engine: &Engine, name: Option<&str>, through: Option<&str>) -> ApiResult<Sealed> {
    Ok(Sealed {
        sources: engine.maintain_sources(name, through)?,
    })
}

/// Points a table's alias at a version.
pub fn promote(
    engine: &Engine,
    table: &str,
    version: u32,
    downstream: Option<(
        &databuild_exec::scheduler::BuildOptions,
        &dyn databuild_exec::run::Executor,
        &mut dyn databuild_exec::scheduler::Observer,
        &std::sync::atomic::AtomicBool,
    )>,
) -> ApiResult<Promotion> {
    Ok(engine.promote(table, version, downstream)?)
}

/// What a want asks beyond its refs, as the user typed it: how long it stands (`ttl`), its SLA
/// after each partition's day (`sla`) and its deadline (`by`).
#[derive(Debug, Clone, Copy, Default)]
pub struct WantTerms<'a> {
    pub ttl: Option<&'a str>,
    pub sla: Option<&'a str>,
    pub by: Option<&'a str>,
}

/// Records a want for the refs the words name (braces expanded, as for builds).
pub fn want(
    engine: &Engine,
    words: &[String],
    WantTerms { ttl, sla, by }: WantTerms<'_>,
    max_refs: usize,
) -> ApiResult<Want> {
    let duration = |name: &str, v: Option<&str>| v.map(|t| duration(name, t)).transpose();
    let refs = user_refs(engine, words, max_refs)?;
    let now = databuild_log::event::now_ns();
    let deadline = by
        .map(|t| databuild_core::wants::parse_deadline(t, now))
        .transpose()
        .map_err(|e| AppError::bad_request(format!("`by`: {e}")))?;
    let row = engine.want(
        &refs,
        duration("ttl", ttl)?,
        duration("sla", sla)?,
        deadline,
        None,
    )?;
    Ok(with_risk(engine, &row))
}

/// The want as answers show it, with whether it is on time.
fn with_risk(engine: &Engine, row: &databuild_log::WantRow) -> Want {
    Want::from(row).with_risk(engine.want_risk(row))
}

/// A duration the user typed (`6h`, `30d`), or an error naming the setting.
fn duration(name: &str, text: &str) -> ApiResult<std::time::Duration> {
    humantime::parse_duration(text).map_err(|e| {
        AppError::bad_request(format!(
            "`{name}` = `{text}` is not a duration ({e}); write it like \"6h\" or \"30d\""
        ))
    })
}

/// Housekeeping: what nothing reads any more, older than `older_than` (`30d`).
pub fn gc(engine: &Engine, older_than: &str, dry_run: bool) -> ApiResult<GcReport> {
    let older_than = duration("older_than", older_than)?;
    Ok(engine.gc(GcOptions {
        older_than,
        dry_run,
    })?)
}

/// A want status a listing may ask for.
pub fn want_status(s: &str) -> ApiResult<Status> {
    Status::parse(s)
        .filter(|s| {
            matches!(
                s,
                Status::Requested
                    | Status::Waiting
                    | Status::Satisfied
                    | Status::Expired
                    | Status::Cancelled
            )
        })
        .ok_or_else(|| {
            AppError::bad_request(format!(
                "unknown want status `{s}`; use requested, waiting, satisfied, expired or cancelled"
            ))
        })
}

pub fn wants(
    engine: &Engine,
    status: Option<&str>,
    all: bool,
    limit: usize,
) -> ApiResult<WantList> {
    let status = status.map(want_status).transpose()?;
    let rows = engine
        .store
        .wants(status, !all && status.is_none(), limit)?;
    let wants = rows.iter().map(|w| with_risk(engine, w)).collect();
    Ok(WantList { wants })
}

pub fn want_detail(engine: &Engine, id: &str) -> ApiResult<WantDetail> {
    let id = &resolve(engine, IdKind::Want, id)?;
    let row = engine
        .store
        .want(id)?
        .ok_or_else(|| AppError::not_found(format!("no want `{id}`")))?;
    let statuses = engine.status(&row.refs)?;
    let (fulfillment, waiting) = engine.fulfillment(&statuses)?;
    let partitions = statuses.iter().map(PartitionStatus::from).collect();
    let risk = engine.want_risk(&row);
    Ok(WantDetail::new(
        &row,
        partitions,
        fulfillment,
        waiting,
        risk,
    ))
}

pub fn unwant(engine: &Engine, id: &str) -> ApiResult<Want> {
    let id = resolve(engine, IdKind::Want, id)?;
    Ok(Want::from(&engine.unwant(&id)?))
}

/// Refuses a name no environment may have (400) or that none has (404, saying how to make it):
/// the engine would otherwise fail opening a log that is not there.
pub fn known_environment(engine: &Engine, name: &str) -> ApiResult<()> {
    databuild_log::environments::check_name(name).map_err(AppError::bad_request)?;
    if engine.environments.names()?.iter().any(|n| n == name) {
        return Ok(());
    }
    Err(AppError::not_found(format!(
        "there is no environment `{name}`; make it with `databuild env create {name}` \
         (`databuild env list` shows those there are)"
    )))
}

/// Every environment, prod first.
pub fn environments(engine: &Engine) -> ApiResult<EnvironmentList> {
    Ok(engine.environments()?)
}

/// Makes environment `name`, empty or (`from`) with `from`'s live partitions.
pub fn create_environment(
    engine: &Engine,
    name: &str,
    from: Option<&str>,
) -> ApiResult<EnvironmentView> {
    if let Some(from) = from {
        known_environment(engine, from)?;
    }
    Ok(engine.create_environment(name, from)?)
}

/// Drops `name`; answers the environments left.
pub fn drop_environment(engine: &Engine, name: &str) -> ApiResult<EnvironmentList> {
    if name != databuild_log::environments::PROD {
        known_environment(engine, name)?;
    }
    engine.drop_environment(name)?;
    environments(engine)
}

/// What `name` has that `other` does not (at most `limit` partitions listed; 0: all).
pub fn environment_diff(
    engine: &Engine,
    name: &str,
    other: &str,
    limit: usize,
) -> ApiResult<EnvironmentDiff> {
    known_environment(engine, name)?;
    known_environment(engine, other)?;
    Ok(engine.environment_diff(name, other, limit)?)
}

/// `to` takes every partition `name` has otherwise, in one recorded step.
pub fn promote_environment(engine: &Engine, name: &str, to: &str) -> ApiResult<EnvironmentChange> {
    known_environment(engine, name)?;
    known_environment(engine, to)?;
    Ok(engine.promote_environment(name, to)?)
}

/// Undoes `env`'s last promotion or rollback.
pub fn rollback_environment(engine: &Engine, env: &str) -> ApiResult<EnvironmentChange> {
    known_environment(engine, env)?;
    Ok(engine.rollback_environment(env)?)
}

#[cfg(test)]
mod tests {
    use super::whole_chars;

    #[test]
    fn a_chunk_keeps_whole_characters_only() {
        let text = "añ€😀".as_bytes(); // 1, 2, 3 and 4 bytes
        assert_eq!(whole_chars(text), text.len());
        for cut in 0..text.len() {
            let kept = whole_chars(&text[..cut]);
            assert!(std::str::from_utf8(&text[..kept]).is_ok(), "cut at {cut}");
            assert!(cut - kept < 4);
        }
        assert_eq!(
            whole_chars(b"ab\xff"),
            3,
            "an invalid byte is kept (shown as U+FFFD)"
        );
    }
}
