//! The router: every API route of [`databuild_exec::answers::route`] with its handler, the
//! dashboard's pages, and the layers every request passes (the guard, the body limit, the
//! security headers). Webhooks sit outside the guard and the service-wide body limit: each
//! source authenticates its senders and bounds its bodies itself.

use std::sync::Arc;

use axum::http::{header, Method, StatusCode, Uri};
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use databuild_exec::answers::route;
use tower_http::limit::RequestBodyLimitLayer;

use crate::error::AppError;
use crate::{api, environments, sources, wants, AppState};

pub fn router(state: Arc<AppState>) -> Router {
    let api = Router::new()
        .route(route::BUILDS, post(api::post_build).get(api::list_builds))
        .route(route::BUILD, get(api::get_build).delete(api::cancel_build))
        .route(route::BUILD_EVENTS, get(api::build_events))
        .route(route::BUILD_PARTITIONS, get(api::build_partitions))
        .route(route::BUILD_SUMMARY, get(api::build_summary))
        .route(route::BUILD_PROGRESS, get(api::build_progress))
        .route(route::BUILD_EVENT_STREAM, get(api::build_event_stream))
        .route(route::ANALYZE, post(api::analyze))
        .route(route::PARTITIONS, get(api::list_partitions))
        .route(route::PARTITION_STATUS, get(api::partition_status))
        .route(route::PARTITION_EVENTS, get(api::partition_events))
        .route(route::PARTITION_EXPLAIN, get(api::partition_explain))
        .route(route::PARTITION_FORECAST, get(api::partition_forecast))
        .route(route::TAINT, post(api::taint))
        .route(route::TAINT_IMPACT, post(api::taint_impact))
        .route(route::CHECK, post(api::check))
        .route(route::PARTITION_LINEAGE, get(api::partition_lineage))
        .route(route::PARTITION_DIFF, get(api::partition_diff))
        .route(route::GC, post(api::gc))
        .route(route::GRAPH, get(api::graph))
        .route(route::EVENTS, get(api::list_events))
        .route(route::JOBS, get(api::list_jobs))
        .route(route::JOB, get(api::get_job))
        .route(route::JOB_RUNS, get(api::job_runs))
        .route(route::METRICS, get(api::metric_series))
        .route(route::RUN, get(api::get_run))
        .route(route::RUN_LOG, get(api::run_log))
        .route(route::RUN_LOG_CHUNK, get(api::run_log_chunk))
        .route(route::DATASETS, get(api::list_datasets))
        .route(route::SQL, post(api::sql))
        .route(route::OPENAPI, get(crate::openapi::document))
        .route(route::SOURCES, get(sources::list_sources))
        .route(route::SOURCE, get(sources::get_source))
        .route(route::SEAL, post(sources::seal))
        .route(route::PROMOTE, post(sources::promote))
        .route(
            route::WANTS,
            post(wants::create_want).get(wants::list_wants),
        )
        .route(route::WANT, get(wants::get_want).delete(wants::delete_want))
        .route(
            route::ENVIRONMENTS,
            get(environments::list_environments).post(environments::create_environment),
        )
        .route(
            route::ENVIRONMENT,
            axum::routing::delete(environments::drop_environment),
        )
        .route(route::ENVIRONMENT_DIFF, get(environments::environment_diff))
        .route(
            route::ENVIRONMENT_PROMOTE,
            post(environments::promote_environment),
        )
        .route(
            route::ENVIRONMENT_ROLLBACK,
            post(environments::rollback_environment),
        )
        .route_layer(middleware::from_fn(crate::openapi::refuse_undeclared_query));
    let webhooks = Router::new().route(route::WEBHOOK, post(sources::webhook));
    api.merge(crate::dashboard::routes(state.clone()))
        .route("/healthz", get(|| async { "ok\n" }))
        .route("/metrics", get(crate::metrics::metrics))
        .fallback(no_route)
        .layer(RequestBodyLimitLayer::new(crate::BODY_LIMIT))
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::guard::check,
        ))
        .merge(webhooks)
        .layer(middleware::from_fn(crate::guard::headers))
        .with_state(state)
}

/// No route matched: a 404, but for a partition's path whose ref's `/` is unencoded (more
/// segments than any partition route has: its ref is one, `revenue%2Fdate%3D2024-01-01`). Every
/// partition route takes GET only, so another method there is a 405 saying so, as it is for an
/// encoded ref; a GET is a 404 saying how to write the ref.
async fn no_route(method: Method, uri: Uri) -> Response {
    if !uri.path().starts_with(PARTITION_PATHS) {
        return AppError::not_found("no such endpoint; see /api/v1/openapi.json").into_response();
    }
    if method == Method::GET || method == Method::HEAD {
        return AppError::not_found(
            "no such endpoint: a partition ref in a path is one segment, each `/` in it written \
             `%2F` (/api/v1/partitions/revenue%2Fdate%3D2024-01-01/status); see /api/v1/openapi.json",
        )
        .into_response();
    }
    let refused = AppError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        format!("{method} is not an operation of a partition; they take GET"),
    );
    ([(header::ALLOW, "GET,HEAD")], refused).into_response()
}

/// Where one partition's routes are (`/api/v1/partitions/{partition_ref}/...`).
const PARTITION_PATHS: &str = "/api/v1/partitions/";
