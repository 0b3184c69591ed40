//! Environments under `/api/v1/environments` (contract section 9): list, make, drop, diff,
//! promote, roll back. They are about every environment at once, so they run on prod's engine,
//! which finds the others' logs, and take no `env` of their own (its header is not read here).

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;
use databuild_exec::answers::{route, EnvironmentChange, EnvironmentDiff, EnvironmentList};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::engine_api::{self, ApiResult};
use crate::error::ErrorBody;
use crate::ops::{blocking_with_state as blocking, ApiJson, ApiPath, ApiQuery};
use crate::AppState;

type Shared = State<Arc<AppState>>;

/// `POST /api/v1/environments`: make an environment.
#[derive(Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateEnvironmentBody {
    #[schema(pattern = r"^[a-z][a-z0-9_]{0,39}$")]
    pub name: String,
    /// Start with every live partition of this environment linked (default: empty).
    #[serde(default)]
    #[schema(pattern = r"^[a-z][a-z0-9_]{0,39}$")]
    pub from: Option<String>,
}

/// `POST /api/v1/environments/{name}/promote`: the environment `to` takes `name`'s partitions.
#[derive(Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PromoteEnvironmentBody {
    /// The environment that changes (default `prod`).
    #[serde(default = "default_promote_target")]
    #[schema(pattern = r"^[a-z][a-z0-9_]{0,39}$")]
    pub to: String,
}

pub fn default_promote_target() -> String {
    databuild_log::environments::PROD.to_string()
}

/// An environment's name in a path.
#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Path)]
pub struct NamePath {
    /// A lowercase letter, then lowercase letters, digits and `_` (at most 40).
    #[param(pattern = r"^[a-z][a-z0-9_]{0,39}$")]
    #[allow(dead_code)]
    name: String,
}

#[utoipa::path(get, path = route::ENVIRONMENTS, summary = "Every environment, prod first: its live partitions, where it came from, its last change, where its data is", responses((status = 200, body = EnvironmentList)))]
pub(crate) async fn list_environments(State(state): Shared) -> ApiResult<Json<EnvironmentList>> {
    blocking(&state, |s| engine_api::environments(&s.engine).map(Json)).await
}

#[utoipa::path(post, path = route::ENVIRONMENTS, summary = "Make an environment: empty, or with another's live partitions", request_body = CreateEnvironmentBody, responses((status = 201, description = "Made", body = databuild_exec::answers::EnvironmentView), (status = 400, description = "Not an environment's name", body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, description = "No environment `from`", body = ErrorBody), (status = 409, description = "It exists already", body = ErrorBody)))]
pub(crate) async fn create_environment(
    State(state): Shared,
    ApiJson(body): ApiJson<CreateEnvironmentBody>,
) -> ApiResult<Response> {
    let made = blocking(&state, move |s| {
        engine_api::create_environment(&s.engine, &body.name, body.from.as_deref())
    })
    .await?;
    Ok((StatusCode::CREATED, Json(made)).into_response())
}

#[utoipa::path(delete, path = route::ENVIRONMENT, summary = "Drop an environment: its log and its data dir; answers the environments left", params(NamePath), responses((status = 200, body = EnvironmentList), (status = 400, description = "Prod, or not an environment's name", body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "A build runs in it", body = ErrorBody)))]
pub(crate) async fn drop_environment(
    State(state): Shared,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<EnvironmentList>> {
    blocking(&state, move |s| {
        let left = engine_api::drop_environment(&s.engine, &name)?;
        s.environments.forget(&name);
        Ok(Json(left))
    })
    .await
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct DiffQuery {
    /// The environment to compare with (default `prod`).
    #[param(pattern = r"^[a-z][a-z0-9_]{0,39}$")]
    other: Option<String>,
    /// At most this many partitions listed (default 100; 0: all). `partitions_total` counts all.
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
}

#[utoipa::path(get, path = route::ENVIRONMENT_DIFF, summary = "What an environment has that another (prod) does not: partitions with what changed in their bytes, and the jobs made otherwise and why", params(NamePath, DiffQuery), responses((status = 200, body = EnvironmentDiff), (status = 400, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn environment_diff(
    State(state): Shared,
    ApiPath(name): ApiPath<String>,
    ApiQuery(q): ApiQuery<DiffQuery>,
) -> ApiResult<Json<EnvironmentDiff>> {
    let other = q.other.unwrap_or_else(default_promote_target);
    let limit = match q.limit {
        Some(0) => 0,
        given => crate::ops::limit(given, 100)?,
    };
    blocking(&state, move |s| {
        engine_api::environment_diff(&s.engine, &name, &other, limit).map(Json)
    })
    .await
}

#[utoipa::path(post, path = route::ENVIRONMENT_PROMOTE, summary = "The target (prod) takes every partition the environment has otherwise, in one recorded step; no job runs", params(NamePath), request_body = PromoteEnvironmentBody, responses((status = 200, body = EnvironmentChange), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "A partition is being built in the target", body = ErrorBody)))]
pub(crate) async fn promote_environment(
    State(state): Shared,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<PromoteEnvironmentBody>,
) -> ApiResult<Json<EnvironmentChange>> {
    blocking(&state, move |s| {
        engine_api::promote_environment(&s.engine, &name, &body.to).map(Json)
    })
    .await
}

#[utoipa::path(post, path = route::ENVIRONMENT_ROLLBACK, summary = "Undo the environment's last promotion or rollback", params(NamePath), responses((status = 200, body = EnvironmentChange), (status = 400, description = "Nothing to roll back", body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, body = ErrorBody)))]
pub(crate) async fn rollback_environment(
    State(state): Shared,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<EnvironmentChange>> {
    blocking(&state, move |s| {
        engine_api::rollback_environment(&s.engine, &name).map(Json)
    })
    .await
}
