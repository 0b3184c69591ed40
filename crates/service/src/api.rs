//! The handlers of contract section 6. Each answers with a type of [`databuild_exec::answers`],
//! named in its OpenAPI annotation; the routes are [`databuild_exec::answers::route`].

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use databuild_core::PlanRequest;
use databuild_exec::answers::{self, route, Analysis, AnalyzeView, BuildAccepted};
use databuild_exec::engine::gc::GcReport;
use databuild_exec::engine::lineage::{Direction, InstanceDiff, Lineage, TaintImpact};
use databuild_exec::engine::listing::{ListedStatus, PartitionPage};
use databuild_log::{EventFilter, PartitionQuery, SqlResult, Status};
use futures_util::stream::{self, Stream};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::engine_api::{self, parse_refs, ApiResult};
use crate::environment::Env;
use crate::error::{AppError, ErrorBody};
use crate::guard::Role;
use crate::ops::{
    blocking, blocking_as, limit, run_sql, start_build, ApiJson, ApiPath, ApiQuery, BuildRequest,
};
use crate::AppState;

type Shared = State<Arc<AppState>>;

#[derive(Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct BuildBody {
    /// Partition refs to make live (braces expanded, within the service's cap).
    #[schema(min_items = 1)]
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
    /// Refuse a plan of more job runs than this: the build ends `refused` with the reason,
    /// having run nothing.
    #[serde(default)]
    pub max_runs: Option<usize>,
}

#[utoipa::path(post, path = route::BUILDS, summary = "Request a build; answers at once with its id", request_body = BuildBody, responses((status = 202, description = "Accepted", body = BuildAccepted, links(("get_build" = (operation_id = "get_build", parameters(("id" = "$response.body#/build_request_id")))), ("build_events" = (operation_id = "build_events", parameters(("id" = "$response.body#/build_request_id")))), ("build_event_stream" = (operation_id = "build_event_stream", parameters(("id" = "$response.body#/build_request_id")))), ("cancel_build" = (operation_id = "cancel_build", parameters(("id" = "$response.body#/build_request_id")))))), (status = 400, description = "Invalid or unknown refs", body = ErrorBody), (status = 401, description = "Token missing", body = ErrorBody), (status = 413, description = "Too many refs", body = ErrorBody)))]
pub(crate) async fn post_build(
    State(state): Shared,
    env: Env,
    ApiJson(body): ApiJson<BuildBody>,
) -> ApiResult<Response> {
    let build_request_id = start_build(
        &state,
        &env,
        BuildRequest {
            partitions: body.partitions,
            force: body.force,
            keep_going: body.keep_going,
            allow_stale: body.allow_stale,
            parallel: body.parallel,
            max_runs: body.max_runs,
        },
    )
    .await?;
    Ok((
        StatusCode::ACCEPTED,
        Json(BuildAccepted { build_request_id }),
    )
        .into_response())
}

#[utoipa::path(get, path = route::PARTITION_FORECAST, summary = "When a partition not live is expected to be (median, p90), whether an input is late, and the steps that decide it", params(RefPath), responses((status = 200, body = answers::Forecast), (status = 400, body = ErrorBody), (status = 404, description = "No such path: a ref's `/` is written `%2F` in it", body = ErrorBody)))]
pub(crate) async fn partition_forecast(
    env: Env,
    Extension(role): Extension<Role>,
    ApiPath(r): ApiPath<String>,
) -> ApiResult<Json<answers::Forecast>> {
    blocking_as(&env, role, move |engine| {
        engine_api::forecast(engine, &r).map(Json)
    })
    .await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct ListQuery {
    /// At most this many.
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
    /// Only this status.
    #[param(value_type = Option<Status>)]
    status: Option<String>,
    /// Analyses (`analyze`, recorded as build requests too) along with builds.
    all: Option<bool>,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LimitQuery {
    /// At most this many.
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
}

/// A ref in a path, percent-encoded (`/` as `%2F`). Its pattern is `PartitionRef`'s rules: no
/// control character, backslash, `{` or `}`; no leading `/`; no leading or trailing whitespace;
/// no `.` or `..` segment; at most 1024 bytes (documented as 256 characters, which never exceed
/// them). The service takes exactly the refs the pattern describes.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct RefPath {
    #[param(
        pattern = r"^(?!/)(?!\s)(?!.*\s$)(?!(?:.*/)?\.\.?(?:/|$))[^\x00-\x1f\x7f-\x9f\\{}]{1,256}$"
    )]
    #[allow(dead_code)]
    partition_ref: String,
}

#[utoipa::path(get, path = route::BUILDS, summary = "Recent build requests", params(ListQuery), responses((status = 200, body = answers::BuildList, links(("get_build" = (operation_id = "get_build", parameters(("id" = "$response.body#/builds/0/build_request_id")))), ("build_events" = (operation_id = "build_events", parameters(("id" = "$response.body#/builds/0/build_request_id")))))), (status = 400, body = ErrorBody)))]
pub(crate) async fn list_builds(
    env: Env,
    ApiQuery(q): ApiQuery<ListQuery>,
) -> ApiResult<Json<answers::BuildList>> {
    let status = match q.status.as_deref() {
        None => None,
        Some(s) => Some(
            Status::parse(s)
                .ok_or_else(|| AppError::bad_request(format!("unknown build status `{s}`")))?,
        ),
    };
    let limit = limit(q.limit, 20)?.min(1000);
    blocking(&env, move |engine| {
        engine_api::builds(engine, status, q.all.unwrap_or(false), limit).map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::BUILD, summary = "One build request with its partitions and job runs", params(("id" = String, Path, description = "Build request id")), responses((status = 200, body = answers::BuildDetail, links(("get_run" = (operation_id = "get_run", parameters(("id" = "$response.body#/job_runs/0/job_run_id")))), ("run_log" = (operation_id = "run_log", parameters(("id" = "$response.body#/job_runs/0/job_run_id")))))), (status = 400, description = "The id is a prefix of more than one", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn get_build(
    env: Env,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<answers::BuildDetail>> {
    blocking(&env, move |engine| engine_api::build(engine, &id).map(Json)).await
}

#[utoipa::path(delete, path = route::BUILD, summary = "Cancel a build request", params(("id" = String, Path, description = "Build request id")), responses((status = 200, body = answers::Cancelled), (status = 400, description = "Ended while being cancelled", body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "Already ended", body = ErrorBody)))]
pub(crate) async fn cancel_build(
    env: Env,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<answers::Cancelled>> {
    blocking(&env, move |engine| {
        engine_api::cancel(engine, &id).map(Json)
    })
    .await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BuildEventsQuery {
    /// Events after this index (the `next` of the previous page).
    since: Option<i64>,
    /// At most this many (10,000 at most a page; `next` goes on).
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
}

#[utoipa::path(get, path = route::BUILD_EVENTS, summary = "The events of a build request, a page at a time", params(("id" = String, Path, description = "Build request id"), BuildEventsQuery), responses((status = 200, body = answers::EventPage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn build_events(
    env: Env,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<BuildEventsQuery>,
) -> ApiResult<Json<answers::EventPage>> {
    let limit = limit(q.limit, engine_api::MAX_PAGE)?.clamp(1, engine_api::MAX_PAGE);
    blocking(&env, move |engine| {
        engine_api::build_events(engine, &id, q.since, limit).map(Json)
    })
    .await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct BuildPartitionsQuery {
    /// Partitions after this ref (the `next` of the previous page).
    after: Option<String>,
    /// At most this many (10,000 at most a page; `next` goes on).
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
}

#[utoipa::path(get, path = route::BUILD_PARTITIONS, summary = "What a build request did to each partition it touched, a page at a time in ref order", params(("id" = String, Path, description = "Build request id"), BuildPartitionsQuery), responses((status = 200, body = answers::BuildPartitionPage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn build_partitions(
    env: Env,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<BuildPartitionsQuery>,
) -> ApiResult<Json<answers::BuildPartitionPage>> {
    let limit = limit(q.limit, answers::DETAIL_ROWS)?.clamp(1, engine_api::MAX_PAGE);
    blocking(&env, move |engine| {
        engine_api::build_partitions(engine, &id, q.after.as_deref(), limit).map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::BUILD_SUMMARY, summary = "What a build request did (so far), every list whole", params(("id" = String, Path, description = "Build request id")), responses((status = 200, body = answers::BuildSummary), (status = 400, description = "The id is a prefix of more than one", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn build_summary(
    env: Env,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<answers::BuildSummary>> {
    blocking(&env, move |engine| {
        engine_api::build_summary(engine, &id).map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::BUILD_PROGRESS, summary = "How far a build request has come, per job, and its ETA", params(("id" = String, Path, description = "Build request id")), responses((status = 200, body = answers::BuildProgress), (status = 400, description = "The id is a prefix of more than one", body = ErrorBody), (status = 404, description = "No such build request, or not planned yet", body = ErrorBody)))]
pub(crate) async fn build_progress(
    env: Env,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<answers::BuildProgress>> {
    blocking(&env, move |engine| {
        engine_api::progress(engine, &id).map(Json)
    })
    .await
}

/// Server-Sent Events: every event of the build as it is appended, until the build ends.
#[utoipa::path(get, path = route::BUILD_EVENT_STREAM, summary = "Server-Sent Events of a build request until it ends", params(("id" = String, Path, description = "Build request id")), responses((status = 200, description = "One `event` per log event, its data the event as the log holds it", content_type = "text/event-stream", body = answers::StreamedEvent), (status = 400, description = "The id is a prefix of more than one", body = ErrorBody), (status = 404, body = ErrorBody), (status = 429, description = "Too many streams open", body = ErrorBody)))]
pub(crate) async fn build_event_stream(
    State(state): Shared,
    env: Env,
    Extension(role): Extension<Role>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Sse<impl Stream<Item = Result<SseEvent, std::convert::Infallible>>>> {
    // The permit rides in the stream's state: it is given back when the client goes away.
    let permit = state
        .stream_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| AppError::busy("event streams", state.limits.event_streams))?;
    let private = state.guard.hides_private(role);
    // The whole id of what was named (a prefix, a short form, `last`), or 404.
    let id = blocking(&env, move |engine| engine_api::build_id(engine, &id)).await?;
    let engine = env.engine().clone();
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
                        let event = SseEvent::default()
                            .event(answers::StreamedEventName::Event.as_str())
                            .data(value.to_string());
                        return Some((Ok(event), (since, finished, pending, permit)));
                    }
                    if finished {
                        return None;
                    }
                    let (events, ended) =
                        {
                            let (engine, id) = (engine.clone(), id.clone());
                            tokio::task::spawn_blocking(move || {
                                // The end is read first: the events read after it then hold
                                // everything up to it, the build's last batch included.
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
                                let events = engine
                                    .store
                                    .events(&EventFilter {
                                        build_request_id: Some(id.clone()),
                                        since: Some(since),
                                        ..Default::default()
                                    })
                                    .unwrap_or_default();
                                (events, ended)
                            })
                            .await
                            .unwrap_or_default()
                        };
                    if let Some(last) = events.last() {
                        since = last.idx;
                    }
                    // Seen ended before these were read: nothing comes after them.
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

#[derive(Clone, Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct AnalyzeBody {
    /// Partition refs to plan (braces expanded, within the service's cap).
    #[schema(min_items = 1)]
    pub partitions: Vec<String>,
    /// Plan as `build --force` would: the requested refs are rebuilt even if live and fresh.
    #[serde(default)]
    pub force: bool,
    /// Plan as `build --allow-stale` would: stale partitions are used as they are.
    #[serde(default)]
    pub allow_stale: bool,
    /// The parallelism the estimate is for (default: the number of cores).
    #[schema(minimum = 1, maximum = 100000)]
    pub parallel: Option<usize>,
    /// The page's first run: the previous answer's `next_after` (default 0). Each page plans
    /// again, so pages line up while the log does not change between them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub after: Option<usize>,
    /// The most runs the answer lists (default 1000).
    #[schema(minimum = 1, maximum = 100000)]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<usize>,
}

#[utoipa::path(post, path = route::ANALYZE, summary = "Plan without running (recorded as an analysis)", request_body = AnalyzeBody, responses((status = 200, description = "The analyze JSON of contract section 4: a page of the plan's runs", body = Analysis), (status = 400, body = ErrorBody), (status = 413, description = "Too many refs", body = ErrorBody), (status = 429, description = "As many analyses as `DATABUILD_ANALYZE_CONCURRENCY` allows are running", body = ErrorBody)))]
pub(crate) async fn analyze(
    State(state): Shared,
    env: Env,
    ApiJson(body): ApiJson<AnalyzeBody>,
) -> ApiResult<Response> {
    let max_refs = state.limits.max_refs;
    // As the document says (`minimum`, `maximum`), and as the command line refuses it.
    let parallel = databuild_exec::engine::estimate_parallel(body.parallel)?;
    let page = databuild_exec::engine::analyze_page(body.after, body.limit)?;
    let permit = crate::ops::analysis_slot(&state)?;
    let body = blocking(&env, move |engine| {
        // Held until the plan is answered (and freed), whether or not the client waits.
        let _permit = permit;
        let refs = parse_refs(engine, &body.partitions, max_refs)?;
        let analysis = engine.analyze(&PlanRequest {
            refs,
            force: body.force,
            allow_stale: body.allow_stale,
            ..Default::default()
        })?;
        // The borrowed view serializes the plan without copying it; `Analysis` is its owned twin.
        let view = AnalyzeView::priced(engine, &analysis, parallel, page)?;
        Ok(serde_json::to_vec(&view).expect("plans serialize"))
    })
    .await?;
    Ok(([(header::CONTENT_TYPE, "application/json")], body).into_response())
}

/// The statuses a listing of partitions takes.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum ListedStatusName {
    Live,
    Available,
    Stale,
    Building,
    Failed,
    Tainted,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct PartitionsQuery {
    /// Glob over refs.
    pattern: Option<String>,
    #[param(value_type = Option<ListedStatusName>)]
    status: Option<String>,
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
    /// Cursor: the `next` of the previous page.
    after: Option<String>,
}

#[utoipa::path(get, path = route::PARTITIONS, summary = "Partitions known to the log, paginated", params(PartitionsQuery), responses((status = 200, body = PartitionPage), (status = 400, body = ErrorBody)))]
pub(crate) async fn list_partitions(
    env: Env,
    Extension(role): Extension<Role>,
    ApiQuery(q): ApiQuery<PartitionsQuery>,
) -> ApiResult<Json<PartitionPage>> {
    let listed = match q.status.as_deref() {
        None => None,
        Some(s) => Some(ListedStatus::parse(s).map_err(|e| AppError::bad_request(e.to_string()))?),
    };
    let query = PartitionQuery {
        pattern: q.pattern,
        status: listed.map(ListedStatus::recorded),
        limit: limit(q.limit, 100)?.min(10_000),
        after: q.after,
    };
    blocking_as(&env, role, move |engine| {
        engine_api::partitions(engine, &query, listed).map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::PARTITION_STATUS, summary = "Is this partition live and fresh, and why not", params(RefPath), responses((status = 200, body = answers::PartitionStatus), (status = 400, body = ErrorBody), (status = 404, description = "No such path: a ref's `/` is written `%2F` in it", body = ErrorBody)))]
pub(crate) async fn partition_status(
    env: Env,
    Extension(role): Extension<Role>,
    ApiPath(r): ApiPath<String>,
) -> ApiResult<Json<answers::PartitionStatus>> {
    blocking_as(&env, role, move |engine| {
        engine_api::status(engine, &r).map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::PARTITION_EVENTS, summary = "The events of a partition", params(RefPath), responses((status = 200, body = answers::EventList), (status = 400, body = ErrorBody), (status = 404, description = "No such path: a ref's `/` is written `%2F` in it", body = ErrorBody)))]
pub(crate) async fn partition_events(
    env: Env,
    ApiPath(r): ApiPath<String>,
) -> ApiResult<Json<answers::EventList>> {
    blocking(&env, move |engine| {
        engine_api::partition_events(engine, &r).map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::PARTITION_EXPLAIN, summary = "Why a partition is in its state: the run that built it, its inputs, what a build would run", params(RefPath), responses((status = 200, body = answers::Explain), (status = 400, body = ErrorBody), (status = 404, description = "No such path: a ref's `/` is written `%2F` in it", body = ErrorBody)))]
pub(crate) async fn partition_explain(
    env: Env,
    Extension(role): Extension<Role>,
    ApiPath(r): ApiPath<String>,
) -> ApiResult<Json<answers::Explain>> {
    blocking_as(&env, role, move |engine| {
        engine_api::explain(engine, &r).map(Json)
    })
    .await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LineageParams {
    /// `upstream` (what it was built from; the default) or `downstream` (what was built from it).
    #[param(value_type = Option<Direction>)]
    direction: Option<Direction>,
    /// How many levels (default 3, at most 100).
    #[param(minimum = 0, maximum = 100)]
    depth: Option<u32>,
    /// The run whose instance of the partition to start from (an id, a unique prefix or its
    /// short form); default: the partition's current instance.
    instance: Option<String>,
}

#[utoipa::path(get, path = route::PARTITION_LINEAGE, summary = "The exact lineage of a partition's instance: the instances and runs it was built from, or everything built from it", params(RefPath, LineageParams), responses((status = 200, body = Lineage), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn partition_lineage(
    env: Env,
    ApiPath(r): ApiPath<String>,
    ApiQuery(q): ApiQuery<LineageParams>,
) -> ApiResult<Json<Lineage>> {
    blocking(&env, move |engine| {
        engine_api::lineage(
            engine,
            &r,
            q.direction.unwrap_or_default(),
            q.depth.unwrap_or(3),
            q.instance.as_deref(),
        )
        .map(Json)
    })
    .await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DiffParams {
    /// The later instance: the run that built it (default: the current instance).
    instance: Option<String>,
    /// The earlier instance: the run that built it (default: the one before `instance`).
    since: Option<String>,
}

#[utoipa::path(get, path = route::PARTITION_DIFF, summary = "What changed between two instances of a partition: inputs, job version, args, env names, code", params(RefPath, DiffParams), responses((status = 200, body = InstanceDiff), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn partition_diff(
    env: Env,
    ApiPath(r): ApiPath<String>,
    ApiQuery(q): ApiQuery<DiffParams>,
) -> ApiResult<Json<InstanceDiff>> {
    blocking(&env, move |engine| {
        engine_api::diff(engine, &r, q.instance.as_deref(), q.since.as_deref()).map(Json)
    })
    .await
}

#[derive(Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct TaintBody {
    /// Partition refs to taint (braces expanded, within the service's cap).
    #[schema(min_items = 1)]
    pub partitions: Vec<String>,
    pub reason: Option<String>,
}

#[derive(Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckBody {
    /// Partition refs to check (braces expanded, within the service's cap).
    #[schema(min_items = 1)]
    pub partitions: Vec<String>,
}

#[utoipa::path(post, path = route::CHECK, summary = "Run every check of these partitions' current instances now, on the graph's executor, and record the results: a partition whose fixed data passes its blocking checks is live again, without a rebuild", request_body = CheckBody, responses((status = 200, body = answers::CheckAnswer), (status = 400, description = "A ref no check applies to", body = ErrorBody), (status = 401, body = ErrorBody), (status = 409, description = "A ref with no built instance to check now (never built, building, failed or tainted)", body = ErrorBody), (status = 413, description = "Too many refs", body = ErrorBody)))]
pub(crate) async fn check(
    State(state): Shared,
    env: Env,
    ApiJson(body): ApiJson<CheckBody>,
) -> ApiResult<Json<answers::CheckAnswer>> {
    let max_refs = state.limits.max_refs;
    blocking(&env, move |engine| {
        engine_api::check(engine, &body.partitions, max_refs).map(Json)
    })
    .await
}

#[utoipa::path(post, path = route::TAINT, summary = "Mark partitions invalid", request_body = TaintBody, responses((status = 200, body = answers::EventList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 409, description = "A partition named is being built: a taint waits until its run ends", body = ErrorBody), (status = 413, description = "Too many refs", body = ErrorBody)))]
pub(crate) async fn taint(
    State(state): Shared,
    env: Env,
    ApiJson(body): ApiJson<TaintBody>,
) -> ApiResult<Json<answers::EventList>> {
    let max_refs = state.limits.max_refs;
    blocking(&env, move |engine| {
        engine_api::taint(engine, &body.partitions, body.reason.as_deref(), max_refs).map(Json)
    })
    .await
}

#[derive(Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct GcBody {
    /// Only what was last written before this long ago (`30d`, `12h`); default 30 days.
    #[serde(default = "default_gc_age")]
    pub older_than: String,
    /// Say what would be removed, remove nothing.
    #[serde(default)]
    pub dry_run: bool,
}

pub fn default_gc_age() -> String {
    "30d".to_string()
}

#[utoipa::path(post, path = route::GC, summary = "Housekeeping: remove old run logs, staging folders of ended runs, leftover .tmp files and the data of partitions no job builds any more (recorded in the log); never a live partition", request_body = GcBody, responses((status = 200, body = GcReport), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody)))]
pub(crate) async fn gc(env: Env, ApiJson(body): ApiJson<GcBody>) -> ApiResult<Json<GcReport>> {
    blocking(&env, move |engine| {
        engine_api::gc(engine, &body.older_than, body.dry_run).map(Json)
    })
    .await
}

#[utoipa::path(post, path = route::TAINT_IMPACT, summary = "What a taint would do, nothing written: the live partitions built from the current instances of these that would become stale, and the wants that would rebuild them", request_body = TaintBody, responses((status = 200, body = TaintImpact), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 413, description = "Too many refs", body = ErrorBody)))]
pub(crate) async fn taint_impact(
    State(state): Shared,
    env: Env,
    ApiJson(body): ApiJson<TaintBody>,
) -> ApiResult<Json<TaintImpact>> {
    let max_refs = state.limits.max_refs;
    blocking(&env, move |engine| {
        engine_api::taint_impact(engine, &body.partitions, max_refs).map(Json)
    })
    .await
}

/// The drawings `GET /api/v1/graph` makes.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum GraphFormat {
    Dot,
    Mermaid,
    Json,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct GraphQuery {
    /// `dot` (default), `mermaid` or `json`.
    #[param(value_type = Option<GraphFormat>)]
    format: Option<String>,
}

#[utoipa::path(get, path = route::GRAPH, summary = "The job graph as DOT, Mermaid or JSON", params(GraphQuery), responses((status = 200, description = "The drawing (JSON for `format=json`)", content_type = "text/plain", body = String), (status = 400, body = ErrorBody)))]
pub(crate) async fn graph(env: Env, ApiQuery(q): ApiQuery<GraphQuery>) -> ApiResult<Response> {
    use databuild_core::render::{render_with_recorded, Format};
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
    let text = blocking(&env, move |engine| {
        let recorded = engine.recorded_edges()?;
        Ok(render_with_recorded(&engine.graph, format, &recorded))
    })
    .await?;
    Ok(text.into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventsQuery {
    /// Events after this index (the `next` of the previous page).
    since: Option<i64>,
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
    /// RFC 3339.
    #[param(format = DateTime)]
    from: Option<String>,
    /// RFC 3339.
    #[param(format = DateTime)]
    to: Option<String>,
    /// A build request, as listings show its id (a prefix, the short form, `last`); one that
    /// names none is 404.
    build: Option<String>,
    partition: Option<String>,
    job: Option<String>,
    /// A job run, as listings show its id; one that names none is 404.
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
    databuild_exec::answers::parse_rfc3339(text)
}

#[utoipa::path(get, path = route::EVENTS, summary = "Events, filtered and paginated", params(EventsQuery), responses((status = 200, body = answers::EventPage), (status = 400, body = ErrorBody), (status = 404, description = "`build` or `run` names no build or run", body = ErrorBody)))]
pub(crate) async fn list_events(
    env: Env,
    ApiQuery(q): ApiQuery<EventsQuery>,
) -> ApiResult<Json<answers::EventPage>> {
    let filter = EventFilter {
        since: q.since,
        limit: Some(limit(q.limit, 1000)?.min(10_000)),
        build_request_id: q.build,
        partition_ref: q.partition,
        job: q.job,
        job_run_id: q.run,
        kind: None,
        status: None,
        newest_first: false,
        from: parse_time("from", q.from)?,
        to: parse_time("to", q.to)?,
    };
    blocking(&env, move |engine| {
        engine_api::events(engine, &filter).map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::JOBS, summary = "Metrics of every job", responses((status = 200, body = answers::JobList, links(("get_job" = (operation_id = "get_job", parameters(("name" = "$response.body#/jobs/0/job")))), ("job_runs" = (operation_id = "job_runs", parameters(("name" = "$response.body#/jobs/0/job"))))))))]
pub(crate) async fn list_jobs(env: Env) -> ApiResult<Json<answers::JobList>> {
    blocking(&env, |engine| engine_api::jobs(engine).map(Json)).await
}

#[utoipa::path(get, path = route::JOB, summary = "One job: metrics and recent runs", params(("name" = String, Path)), responses((status = 200, body = answers::JobDetail), (status = 404, body = ErrorBody)))]
pub(crate) async fn get_job(
    env: Env,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<answers::JobDetail>> {
    blocking(&env, move |engine| engine_api::job(engine, &name).map(Json)).await
}

#[utoipa::path(get, path = route::JOB_RUNS, summary = "A job's run history", params(("name" = String, Path), LimitQuery), responses((status = 200, body = answers::JobRunList), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn job_runs(
    env: Env,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<LimitQuery>,
) -> ApiResult<Json<answers::JobRunList>> {
    let limit = limit(q.limit, 100)?.min(10_000);
    blocking(&env, move |engine| {
        engine_api::job_runs(engine, &name, limit).map(Json)
    })
    .await
}

/// The query of `GET /api/v1/metrics`.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct MetricsQuery {
    /// A job's name or one of its output patterns.
    pattern: String,
    /// A resource (`wall_ms`, `max_rss_bytes`, ...) or a metric the job reports (`rows`).
    metric: String,
    /// Values of refs after this one (the `next` of the previous page).
    after: Option<String>,
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
}

#[utoipa::path(get, path = route::METRICS, summary = "One metric over a job's partitions, in key order", params(MetricsQuery), responses((status = 200, body = answers::MetricSeries), (status = 400, body = ErrorBody), (status = 404, description = "No such job or output pattern", body = ErrorBody)))]
pub(crate) async fn metric_series(
    env: Env,
    ApiQuery(q): ApiQuery<MetricsQuery>,
) -> ApiResult<Json<answers::MetricSeries>> {
    let limit = limit(q.limit, 1000)?.min(10_000);
    blocking(&env, move |engine| {
        engine_api::metric_series(engine, &q.pattern, &q.metric, q.after.as_deref(), limit)
            .map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::RUN, summary = "One job run", params(("id" = String, Path)), responses((status = 200, body = answers::JobRun), (status = 400, description = "The id is a prefix of more than one", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn get_run(
    env: Env,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<answers::JobRun>> {
    blocking(&env, move |engine| engine_api::run(engine, &id).map(Json)).await
}

#[utoipa::path(get, path = route::RUN_LOG, summary = "A job run's log (its last MiB)", params(("id" = String, Path)), responses((status = 200, description = "The log", content_type = "text/plain", body = String), (status = 400, description = "The id is a prefix of more than one", body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn run_log(env: Env, ApiPath(id): ApiPath<String>) -> ApiResult<Response> {
    let text = blocking(&env, move |engine| engine_api::run_log(engine, &id)).await?;
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response())
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct LogChunkQuery {
    /// Where to start, in bytes into the log (default 0; at most 2^63-1, the largest `int64`).
    #[param(minimum = 0, maximum = 9223372036854775807_u64)]
    offset: Option<u64>,
}

#[utoipa::path(get, path = route::RUN_LOG_CHUNK, summary = "A piece of a job run's log, from a byte offset (read it whole, or follow it)", params(("id" = String, Path), LogChunkQuery), responses((status = 200, body = answers::LogChunk), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn run_log_chunk(
    env: Env,
    ApiPath(id): ApiPath<String>,
    ApiQuery(q): ApiQuery<LogChunkQuery>,
) -> ApiResult<Json<answers::LogChunk>> {
    let offset = q.offset.unwrap_or(0);
    if offset > i64::MAX as u64 {
        return Err(AppError::new(
            StatusCode::BAD_REQUEST,
            "bad_query",
            format!("`offset={offset}` is more than {} (an int64)", i64::MAX),
        ));
    }
    blocking(&env, move |engine| {
        engine_api::run_log_chunk(engine, &id, offset).map(Json)
    })
    .await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DatasetsQuery {
    /// Derive the freshness of every available partition, however many (linear in them);
    /// otherwise only job outputs with at most 20,000 available partitions are split into
    /// live, stale and missing.
    exact: Option<bool>,
}

#[utoipa::path(get, path = route::DATASETS, summary = "Every dataset and job output, with partition counts by status", params(DatasetsQuery), responses((status = 200, body = answers::DatasetList), (status = 400, body = ErrorBody)))]
pub(crate) async fn list_datasets(
    env: Env,
    Extension(role): Extension<Role>,
    ApiQuery(q): ApiQuery<DatasetsQuery>,
) -> ApiResult<Json<answers::DatasetList>> {
    let exact = q.exact.unwrap_or(false);
    blocking_as(&env, role, move |engine| {
        engine_api::datasets(engine, exact).map(Json)
    })
    .await
}

#[derive(Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct SqlBody {
    /// One read-only statement.
    #[schema(min_length = 1, example = "SELECT count(*) FROM events")]
    pub query: String,
    pub max_rows: Option<usize>,
}

#[utoipa::path(post, path = route::SQL, summary = "Read-only SQL over the event log", request_body = SqlBody, responses((status = 200, body = SqlResult), (status = 400, description = "Refused or invalid", body = ErrorBody), (status = 401, body = ErrorBody), (status = 429, description = "Too many queries running", body = ErrorBody)))]
pub(crate) async fn sql(
    State(state): Shared,
    env: Env,
    ApiJson(body): ApiJson<SqlBody>,
) -> ApiResult<Json<SqlResult>> {
    let max_rows = body.max_rows.unwrap_or(10_000).min(100_000);
    run_sql(&state, &env, body.query, max_rows).await.map(Json)
}
