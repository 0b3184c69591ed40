//! `GET /api/v1/openapi.json`, generated from the handlers' annotations and body types.

use axum::Json;
use utoipa::OpenApi;

use crate::api::{AnalyzeBody, BuildBody, SqlBody, TaintBody};
use crate::error::ErrorBody;

#[derive(OpenApi)]
#[openapi(
    info(
        title = "DataBuild build graph service",
        description = "Contract section 6."
    ),
    paths(
        crate::api::post_build,
        crate::api::list_builds,
        crate::api::get_build,
        crate::api::cancel_build,
        crate::api::build_events,
        crate::api::build_event_stream,
        crate::api::analyze,
        crate::api::list_partitions,
        crate::api::partition_status,
        crate::api::partition_events,
        crate::api::partition_explain,
        crate::api::taint,
        crate::api::graph,
        crate::api::list_events,
        crate::api::list_jobs,
        crate::api::get_job,
        crate::api::job_runs,
        crate::api::get_run,
        crate::api::run_log,
        crate::api::list_datasets,
        crate::api::sql,
        crate::sources::webhook,
        crate::sources::list_sources,
        crate::sources::get_source,
        crate::sources::seal,
        crate::sources::promote,
        crate::wants::create_want,
        crate::wants::list_wants,
        crate::wants::get_want,
        crate::wants::delete_want,
    ),
    components(schemas(
        BuildBody,
        AnalyzeBody,
        SqlBody,
        TaintBody,
        ErrorBody,
        crate::sources::SealBody,
        crate::sources::PromoteBody,
        crate::wants::WantBody
    ))
)]
pub struct ApiDoc;

pub async fn document() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
