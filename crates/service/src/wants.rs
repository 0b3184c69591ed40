//! Wants under `/api/v1/wants`: record, list, show, withdraw. The reconciler acts on them.

use std::sync::Arc;

use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::Value;
use utoipa::ToSchema;

use crate::api::{blocking_with_state as blocking, ApiJson};
use crate::error::ErrorBody;
use crate::views::{self, ApiResult};
use crate::AppState;

type Shared = State<Arc<AppState>>;

#[derive(Deserialize, ToSchema)]
pub struct WantBody {
    pub partitions: Vec<String>,
    /// How long the want stands (default 30d).
    pub ttl: Option<String>,
    /// How long after each partition's day ends it must be live.
    pub sla: Option<String>,
}

#[derive(Deserialize)]
pub struct WantsQuery {
    status: Option<String>,
    all: Option<bool>,
    limit: Option<usize>,
}

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/wants", post(create_want).get(list_wants))
        .route("/wants/{id}", get(get_want).delete(delete_want))
}

#[utoipa::path(post, path = "/api/v1/wants", summary = "Want partitions: the service builds them as soon as their inputs exist", request_body = WantBody, responses((status = 201, description = "The want", body = Object), (status = 400, body = ErrorBody)))]
async fn create_want(
    State(state): Shared,
    ApiJson(body): ApiJson<WantBody>,
) -> ApiResult<Response> {
    let v = blocking(&state, move |s| {
        views::want(
            &s.engine,
            &body.partitions,
            body.ttl.as_deref(),
            body.sla.as_deref(),
        )
    })
    .await?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

#[utoipa::path(get, path = "/api/v1/wants", summary = "Wants: active ones, or with a status, or all", params(("status" = Option<String>, Query, description = "requested, waiting, satisfied, expired or cancelled"), ("all" = Option<bool>, Query, description = "Include ended wants"), ("limit" = Option<usize>, Query, description = "At most this many")), responses((status = 200, description = "`{\"wants\": [...]}`", body = Object)))]
async fn list_wants(State(state): Shared, Query(q): Query<WantsQuery>) -> ApiResult<Json<Value>> {
    blocking(&state, move |s| {
        views::wants(
            &s.engine,
            q.status.as_deref(),
            q.all.unwrap_or(false),
            q.limit.unwrap_or(100),
        )
        .map(Json)
    })
    .await
}

#[utoipa::path(get, path = "/api/v1/wants/{id}", summary = "One want, with the state of its partitions", params(("id" = String, Path, description = "The want")), responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
async fn get_want(State(state): Shared, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |s| {
        views::want_detail(&s.engine, &id).map(Json)
    })
    .await
}

#[utoipa::path(delete, path = "/api/v1/wants/{id}", summary = "Withdraw a want", params(("id" = String, Path, description = "The want")), responses((status = 200, body = Object), (status = 404, body = ErrorBody)))]
async fn delete_want(State(state): Shared, Path(id): Path<String>) -> ApiResult<Json<Value>> {
    blocking(&state, move |s| views::unwant(&s.engine, &id).map(Json)).await
}
