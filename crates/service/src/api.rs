//! The handlers of contract section 6.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{FromRequest, Path, Query, State};
use axum::http::{header, StatusCode};
use axum::middleware;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Extension, Json, Router};
use databuild_core::{PartitionRef, PlanRequest};
use databuild_exec::build::{BuildOptions, Quiet};
use databuild_exec::views::{AnalyzeView, ListedStatus};
use databuild_exec::Engine;
use databuild_log::{EventFilter, PartitionQuery, Status};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use serde_json::{json, Value};
use tower_http::limit::RequestBodyLimitLayer;
use utoipa::ToSchema;

use crate::error::{AppError, ErrorBody};
use crate::guard::Role;
use crate::views::{self, ApiResult};
use crate::AppState;

type Shared = State<Arc<AppState>>;

/// A JSON body whose rejection is an [`AppError`].
#[derive(FromRequest)]
#[from_request(via(axum::Json), rejection(AppError))]
pub struct ApiJson<T>(pub T);

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route("/builds", post(post_build).get(list_builds))
        .route("/builds/{id}", get(get_build).delete(cancel_build))
        .route("/builds/{id}/events", get(build_events))
        .route("/builds/{id}/events/stream", get(build_event_stream))
        .route("/analyze", post(analyze))
        .route("/partitions", get(list_partitions))
        .route("/partitions/{partition_ref}/status", get(partition_status))
        .route("/partitions/{partition_ref}/events", get(partition_events))
        .route(
            "/partitions/{partition_ref}/explain",
            get(partition_explain),
        )
        .route("/partitions/taint", post(taint))
        .route("/graph", get(graph))
        .route("/events", get(list_events))
        .route("/jobs", get(list_jobs))
        .route("/jobs/{name}", get(get_job))
        .route("/jobs/{name}/runs", get(job_runs))
        .route("/job-runs/{id}", get(get_run))
        .route("/job-runs/{id}/log", get(run_log))
        .route("/datasets", get(list_datasets))
        .route("/sql", post(sql))
        .route("/openapi.json", get(crate::openapi::document))
        .merge(crate::sources::routes())
        .merge(crate::wants::routes());
    Router::new()
        .nest("/api/v1", api)
        .merge(crate::dashboard::routes())
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(crate::metrics::metrics))
        .fallback(|| async { AppError::not_found("no such endpoint; see /api/v1/openapi.json") })
        .layer(RequestBodyLimitLayer::new(crate::BODY_LIMIT))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::guard::check,
        ))
        .merge(crate::sources::webhook_routes())
        .layer(middleware::from_fn(crate::guard::headers))
        .with_state(state)
}

/// Runs engine work off the async threads.
async fn blocking<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&Engine) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    blocking_with_state(state, move |s| f(&s.engine)).await
}

/// Runs work that needs the whole state (engine and executor) off the async threads.
pub(crate) async fn blocking_with_state<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&AppState) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || f(&state)).await?
}

/// Expands braces (within the service's cap on refs per request), validates the refs and
/// checks that something produces each. Shared by the API and the dashboard.
pub(crate) fn parse_refs<S: AsRef<str>>(
    engine: &Engine,
    words: &[S],
    max_refs: usize,
) -> ApiResult<Vec<PartitionRef>> {
    if words.is_empty() {
        return Err(AppError::bad_request(
            "`partitions` is empty: name at least one ref",
        ));
    }
    use databuild_core::{BraceExpansionError, UserRefError};
    let refs = databuild_core::parse_user_refs(words, max_refs).map_err(|e| match e {
        UserRefError::Braces(
            BraceExpansionError::TooMany { .. } | BraceExpansionError::TooBig { .. },
        ) => AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_many_refs",
            e.to_string(),
        ),
        other => AppError::bad_request(other.to_string()),
    })?;
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

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildBody {
    /// Partition refs to make live.
    pub partitions: Vec<String>,
    /// Rebuild them even if live and fresh.
    #[serde(default)]
    pub force: bool,
    #[serde(default)]
    pub allow_stale: bool,
    #[serde(default)]
    pub keep_going: bool,
    /// Most job runs at once (default: the number of cores).
    pub parallel: Option<usize>,
}

#[utoipa::path(post, path = "/api/v1/builds", summary = "Request a build; answers at once with its id", request_body = BuildBody, responses((status = 202, description = "Accepted: `{\"build_request_id\"}`", body = Object), (status = 400, description = "Invalid or unknown refs", body = ErrorBody), (status = 401, description = "Token missing", body = ErrorBody)))]
async fn post_build(
    State(state): Shared,
    ApiJson(body): ApiJson<BuildBody>,
) -> ApiResult<Response> {
    let id = start_build(
        &state,
        body.partitions,
        body.force,
        body.keep_going,
        body.allow_stale,
        body.parallel,
    )
    .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(json!({ "build_request_id": id })),
    )
        .into_response())
}

/// Records a build request and runs it on its own thread; returns its id at once. Shared by the
/// API and the dashboard.
pub async fn start_build(
    state: &Arc<AppState>,
    partitions: Vec<String>,
    force: bool,
    keep_going: bool,
    allow_stale: bool,
    parallel: Option<usize>,
) -> ApiResult<String> {
    let max_refs = state.limits.max_refs;
    let (id, options) = blocking(state, move |engine| {
        let options = BuildOptions {
            refs: parse_refs(engine, &partitions, max_refs)?,
            force,
            parallel: parallel
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
                .max(1),
            keep_going,
            allow_stale,
            pins: Default::default(),
        };
        Ok((engine.receive(&options)?, options))
    })
    .await?;
    let interrupt = Arc::new(AtomicBool::new(false));
    let engine = state.engine.clone();
    let executor = state.executor.clone();
    let (thread_id, flag) = (id.clone(), interrupt.clone());
    let handle = std::thread::Builder::new()
        .name(format!("build-{id}"))
        .spawn(move || {
            if let Err(e) =
                engine.execute(&thread_id, &options, executor.as_ref(), &mut Quiet, &flag)
            {
                eprintln!("build {thread_id}: {e}");
            }
        })
        .map_err(|e| AppError::bad_request(format!("cannot start the build: {e}")))?;
    state.builds.add(id.clone(), interrupt, handle);
    Ok(id)
}

#[derive(Deserialize)]
pub struct ListQuery {
    limit: Option<usize>,
    status: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/builds", summary = "Recent build requests", params(("limit" = Option<usize>, Query, description = "At most this many"), ("status" = Option<String>, Query, description = "Only this status")), responses((status = 200, description = "`{\"builds\": [...]}`", body = Object)))]
async fn list_builds(State(state): Shared, Query(q): Query<ListQuery>) -> ApiResult<Json<Value>> {
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(
            Status::parse(s)
                .ok_or_else(|| AppError::bad_request(format!("unknown build status `{s}`")))?,
        ),
    };
    let limit = q.limit.unwrap_or(20).min(1000);
    blocking(&state, move |engine| {
        views::builds(engine, status, limit).map(Json)
    })
    .await
}

#[utoipa::path(get, path = "/api/v1/builds/{id}", summary = "One build request with its partitions and job runs", params(("id" = String, Path, description = "Build request id")), responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
async fn get_build(State(state): Shared, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| views::build(engine, &id).map(Json)).await
}

#[utoipa::path(delete, path = "/api/v1/builds/{id}", summary = "Cancel a build request", params(("id" = String, Path, description = "Build request id")), responses((status = 200, description = "`{\"cancelled\": true}`", body = Object), (status = 404, body = ErrorBody), (status = 409, description = "Already ended", body = ErrorBody)))]
async fn cancel_build(State(state): Shared, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| views::cancel(engine, &id).map(Json)).await
}

#[utoipa::path(get, path = "/api/v1/builds/{id}/events", summary = "The events of a build request", params(("id" = String, Path, description = "Build request id")), responses((status = 200, description = "`{\"events\": [...]}`", body = Object), (status = 404, body = ErrorBody)))]
async fn build_events(State(state): Shared, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| {
        views::build_events(engine, &id).map(Json)
    })
    .await
}

/// Server-Sent Events: every event of the build as it is appended, until the build ends.
#[utoipa::path(get, path = "/api/v1/builds/{id}/events/stream", summary = "Server-Sent Events of a build request until it ends", params(("id" = String, Path, description = "Build request id")), responses((status = 200, description = "text/event-stream, one `event` per log event"), (status = 404, body = ErrorBody)))]
async fn build_event_stream(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, std::convert::Infallible>>>> {
    // The permit rides in the stream's state: it is given back when the client goes away.
    let permit = state
        .stream_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| AppError::busy("event streams", state.limits.event_streams))?;
    let private = state.guard.hides_private(role);
    let exists = {
        let id = id.clone();
        blocking(&state, move |engine| {
            Ok(engine.store.build_request(&id)?.is_some())
        })
        .await?
    };
    if !exists {
        return Err(AppError::not_found(format!("no build request `{id}`")));
    }
    let engine = state.engine.clone();
    // State: (last idx sent, finished, pending events).
    let stream = stream::unfold(
        (0i64, false, std::collections::VecDeque::new(), permit),
        move |(mut since, mut finished, mut pending, permit)| {
            let engine = engine.clone();
            let id = id.clone();
            async move {
                loop {
                    if let Some(e) = pending.pop_front() {
                        let mut value = serde_json::to_value(&e).expect("events serialize");
                        if private {
                            crate::guard::strip_private(&mut value);
                        }
                        let event = SseEvent::default().event("event").data(value.to_string());
                        return Some((Ok(event), (since, finished, pending, permit)));
                    }
                    if finished {
                        return None;
                    }
                    let (events, ended) =
                        {
                            let (engine, id) = (engine.clone(), id.clone());
                            tokio::task::spawn_blocking(move || {
                                let events = engine
                                    .store
                                    .events(&EventFilter {
                                        build_request_id: Some(id.clone()),
                                        since: Some(since),
                                        ..Default::default()
                                    })
                                    .unwrap_or_default();
                                let ended =
                                    engine.store.build_request(&id).ok().flatten().is_some_and(
                                        |b| {
                                            databuild_log::state::is_terminal(
                                                databuild_log::Kind::BuildRequest,
                                                b.status,
                                            ) || (b.analyze_only
                                                && b.status == Status::AnalysisCompleted)
                                        },
                                    );
                                (events, ended)
                            })
                            .await
                            .unwrap_or_default()
                        };
                    if let Some(last) = events.last() {
                        since = last.idx;
                    }
                    // Events read before seeing the end are all the build will have.
                    finished = ended;
                    pending.extend(events);
                    if pending.is_empty() && !finished {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnalyzeBody {
    pub partitions: Vec<String>,
    #[serde(default)]
    pub force: bool,
}

#[utoipa::path(post, path = "/api/v1/analyze", summary = "Plan without running (recorded as an analysis)", request_body = AnalyzeBody, responses((status = 200, description = "The analyze JSON of contract section 4", body = Object), (status = 400, body = ErrorBody)))]
async fn analyze(
    State(state): Shared,
    ApiJson(body): ApiJson<AnalyzeBody>,
) -> ApiResult<Json<Value>> {
    let max_refs = state.limits.max_refs;
    blocking(&state, move |engine| {
        let refs = parse_refs(engine, &body.partitions, max_refs)?;
        let analysis = engine.analyze(&PlanRequest {
            refs,
            force: body.force,
            ..Default::default()
        })?;
        let view = AnalyzeView::new(&analysis.build_request_id, &analysis.plan);
        Ok(Json(serde_json::to_value(view).expect("plans serialize")))
    })
    .await
}

#[derive(Deserialize)]
pub struct PartitionsQuery {
    pattern: Option<String>,
    status: Option<String>,
    limit: Option<usize>,
    after: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/partitions", summary = "Partitions known to the log, paginated", params(("pattern" = Option<String>, Query, description = "Glob over refs"), ("status" = Option<String>, Query, description = "live, stale, building, failed or tainted"), ("limit" = Option<usize>, Query), ("after" = Option<String>, Query, description = "Cursor: the `next` of the previous page")), responses((status = 200, description = "`{\"partitions\": [...], \"next\": cursor}`", body = Object)))]
async fn list_partitions(
    State(state): Shared,
    Query(q): Query<PartitionsQuery>,
) -> ApiResult<Json<Value>> {
    let listed = match q.status.as_deref() {
        None => None,
        Some(s) => Some(ListedStatus::parse(s).ok_or_else(|| {
            AppError::bad_request(format!(
                "unknown partition status `{s}`; use {}",
                ListedStatus::NAMES
            ))
        })?),
    };
    let query = PartitionQuery {
        pattern: q.pattern,
        status: listed.map(ListedStatus::recorded),
        limit: q.limit.unwrap_or(100).min(10_000),
        after: q.after,
    };
    blocking(&state, move |engine| {
        views::partitions(engine, &query, listed).map(Json)
    })
    .await
}

#[utoipa::path(get, path = "/api/v1/partitions/{partition_ref}/status", summary = "Is this partition live and fresh, and why not", params(("partition_ref" = String, Path, description = "Percent-encoded ref")), responses((status = 200, body = Object), (status = 400, body = ErrorBody)))]
async fn partition_status(State(state): Shared, Path(r): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| views::status(engine, &r).map(Json)).await
}

#[utoipa::path(get, path = "/api/v1/partitions/{partition_ref}/events", summary = "The events of a partition", params(("partition_ref" = String, Path, description = "Percent-encoded ref")), responses((status = 200, body = Object)))]
async fn partition_events(State(state): Shared, Path(r): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| {
        views::partition_events(engine, &r).map(Json)
    })
    .await
}

#[utoipa::path(get, path = "/api/v1/partitions/{partition_ref}/explain", summary = "Why a partition is in its state: the run that built it, its inputs, what a build would run", params(("partition_ref" = String, Path, description = "Percent-encoded ref")), responses((status = 200, body = Object), (status = 400, body = ErrorBody)))]
async fn partition_explain(State(state): Shared, Path(r): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| views::explain(engine, &r).map(Json)).await
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaintBody {
    pub partitions: Vec<String>,
    pub reason: Option<String>,
}

#[utoipa::path(post, path = "/api/v1/partitions/taint", summary = "Mark partitions invalid", request_body = TaintBody, responses((status = 200, description = "`{\"events\": [...]}`", body = Object), (status = 400, body = ErrorBody)))]
async fn taint(State(state): Shared, ApiJson(body): ApiJson<TaintBody>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| {
        views::taint(engine, &body.partitions, body.reason.as_deref()).map(Json)
    })
    .await
}

#[derive(Deserialize)]
pub struct GraphQuery {
    format: Option<String>,
}

#[utoipa::path(get, path = "/api/v1/graph", summary = "The job graph as DOT, Mermaid or JSON", params(("format" = Option<String>, Query, description = "dot (default), mermaid or json")), responses((status = 200, description = "The drawing"), (status = 400, body = ErrorBody)))]
async fn graph(State(state): Shared, Query(q): Query<GraphQuery>) -> ApiResult<Response> {
    use databuild_core::render::{render, Format};
    let format = match q.format.as_deref().unwrap_or("dot") {
        "dot" => Format::Dot,
        "mermaid" => Format::Mermaid,
        "json" => Format::Json,
        other => {
            return Err(AppError::bad_request(format!(
                "unknown graph format `{other}`; use dot, mermaid or json"
            )))
        }
    };
    Ok(render(&state.engine.graph, format).into_response())
}

#[derive(Deserialize)]
pub struct EventsQuery {
    since: Option<i64>,
    limit: Option<usize>,
    from: Option<String>,
    to: Option<String>,
    build: Option<String>,
    partition: Option<String>,
    job: Option<String>,
    run: Option<String>,
}

fn parse_time(name: &str, value: Option<String>) -> ApiResult<Option<i64>> {
    value
        .map(|v| {
            chrono_ns(&v).ok_or_else(|| {
                AppError::bad_request(format!(
                    "`{name}={v}` is not an RFC 3339 time such as 2020-01-01T00:00:00Z"
                ))
            })
        })
        .transpose()
}

fn chrono_ns(text: &str) -> Option<i64> {
    databuild_exec::engine::parse_rfc3339(text)
}

#[utoipa::path(get, path = "/api/v1/events", summary = "Events, filtered and paginated", params(("since" = Option<i64>, Query), ("limit" = Option<usize>, Query), ("from" = Option<String>, Query, description = "RFC 3339"), ("to" = Option<String>, Query, description = "RFC 3339"), ("build" = Option<String>, Query), ("partition" = Option<String>, Query), ("job" = Option<String>, Query), ("run" = Option<String>, Query)), responses((status = 200, description = "`{\"events\": [...], \"next\": idx}`", body = Object), (status = 400, body = ErrorBody)))]
async fn list_events(State(state): Shared, Query(q): Query<EventsQuery>) -> ApiResult<Json<Value>> {
    let filter = EventFilter {
        since: q.since,
        limit: Some(q.limit.unwrap_or(1000).min(10_000)),
        build_request_id: q.build,
        partition_ref: q.partition,
        job: q.job,
        job_run_id: q.run,
        kind: None,
        from: parse_time("from", q.from)?,
        to: parse_time("to", q.to)?,
    };
    blocking(&state, move |engine| {
        views::events(engine, &filter).map(Json)
    })
    .await
}

#[utoipa::path(get, path = "/api/v1/jobs", summary = "Metrics of every job",  responses((status = 200, body = Object)))]
async fn list_jobs(State(state): Shared) -> ApiResult<Json<Value>> {
    blocking(&state, |engine| views::jobs(engine).map(Json)).await
}

#[utoipa::path(get, path = "/api/v1/jobs/{name}", summary = "One job: metrics and recent runs", params(("name" = String, Path)), responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
async fn get_job(State(state): Shared, Path(name): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| views::job(engine, &name).map(Json)).await
}

#[utoipa::path(get, path = "/api/v1/jobs/{name}/runs", summary = "A job's run history", params(("name" = String, Path), ("limit" = Option<usize>, Query)), responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
async fn job_runs(
    State(state): Shared,
    Path(name): Path<String>,
    Query(q): Query<ListQuery>,
) -> ApiResult<Json<Value>> {
    let limit = q.limit.unwrap_or(100).min(10_000);
    blocking(&state, move |engine| {
        views::job_runs(engine, &name, limit).map(Json)
    })
    .await
}

#[utoipa::path(get, path = "/api/v1/job-runs/{id}", summary = "One job run", params(("id" = String, Path)), responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
async fn get_run(State(state): Shared, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |engine| views::run(engine, &id).map(Json)).await
}

#[utoipa::path(get, path = "/api/v1/job-runs/{id}/log", summary = "A job run's log (its last MiB)", params(("id" = String, Path)), responses((status = 200, description = "text/plain"), (status = 404, body = ErrorBody)))]
async fn run_log(State(state): Shared, Path(id): Path<String>) -> ApiResult<Response> {
    let text = blocking(&state, move |engine| views::run_log(engine, &id)).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DatasetsQuery {
    exact: Option<bool>,
}

#[utoipa::path(get, path = "/api/v1/datasets", summary = "Every dataset and job output, with partition counts by status", params(("exact" = Option<bool>, Query, description = "Derive the freshness of every available partition, however many (linear in them); otherwise only datasets with at most 20,000 available partitions are split into live, stale and missing")), responses((status = 200, body = Object)))]
async fn list_datasets(
    State(state): Shared,
    Query(q): Query<DatasetsQuery>,
) -> ApiResult<Json<Value>> {
    let exact = q.exact.unwrap_or(false);
    blocking(&state, move |engine| {
        views::datasets(engine, exact).map(Json)
    })
    .await
}

#[derive(Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SqlBody {
    pub query: String,
    pub max_rows: Option<usize>,
}

#[utoipa::path(post, path = "/api/v1/sql", summary = "Read-only SQL over the event log", request_body = SqlBody, responses((status = 200, description = "`{\"columns\": [], \"rows\": [[]]}`", body = Object), (status = 400, description = "Refused or invalid", body = ErrorBody)))]
async fn sql(State(state): Shared, ApiJson(body): ApiJson<SqlBody>) -> ApiResult<Json<Value>> {
    let max_rows = body.max_rows.unwrap_or(10_000).min(100_000);
    run_sql(&state, body.query, max_rows).await.map(Json)
}

/// Runs user SQL if fewer than the service's limit of queries are running, else answers 429.
/// Shared by the API and the dashboard.
pub(crate) async fn run_sql(
    state: &Arc<AppState>,
    query: String,
    max_rows: usize,
) -> ApiResult<Value> {
    let permit = state
        .sql_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| AppError::busy("SQL queries", state.limits.sql_queries))?;
    // The permit goes with the query, not the request: a client that hangs up does not end the
    // query, so neither may it free the query's slot.
    blocking(state, move |engine| {
        let _permit = permit;
        views::sql(engine, &query, max_rows)
    })
    .await
}
