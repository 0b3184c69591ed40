//! Wants under `/api/v1/wants`: record, list, show, withdraw. The reconciler acts on them.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use databuild_exec::answers::{route, Want, WantDetail, WantList};
use serde::Deserialize;
use utoipa::{IntoParams, ToSchema};

use crate::engine_api::{self, ApiResult};
use crate::environment::Env;
use crate::error::ErrorBody;
use crate::guard::Role;
use crate::ops::{blocking_with_state as blocking, ApiJson, ApiPath, ApiQuery};
use crate::AppState;

type Shared = State<Arc<AppState>>;

#[derive(Deserialize, serde::Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct WantBody {
    /// Refs (braces expanded, as for builds).
    #[schema(min_items = 1)]
    pub partitions: Vec<String>,
    /// How long the want stands (default 30d), as `humantime` reads it: `30d`, `6h 30m`.
    pub ttl: Option<String>,
    /// How long after each partition's day ends it must be live (same form as `ttl`).
    pub sla: Option<String>,
    /// When every partition must be live: RFC 3339, or `HH:MM`, the next such time (UTC).
    pub by: Option<String>,
}

/// The statuses a want may have.
#[derive(ToSchema)]
#[schema(rename_all = "snake_case")]
#[allow(dead_code)]
pub(crate) enum WantStatusName {
    Requested,
    Waiting,
    Satisfied,
    Expired,
    Cancelled,
}

#[derive(Deserialize, IntoParams)]
#[into_params(parameter_in = Query)]
pub struct WantsQuery {
    /// Only wants with this status.
    #[param(value_type = Option<WantStatusName>)]
    status: Option<String>,
    /// Include ended wants.
    all: Option<bool>,
    /// At most this many.
    #[param(minimum = 0, maximum = 4294967296_u64)]
    limit: Option<usize>,
}

impl WantsQuery {
    fn limit(&self) -> ApiResult<usize> {
        crate::ops::limit(self.limit, 100)
    }
}

#[utoipa::path(post, path = route::WANTS, summary = "Want partitions: the service builds them as soon as their inputs exist", request_body = WantBody, responses((status = 201, description = "The want", body = Want, links(("get_want" = (operation_id = "get_want", parameters(("id" = "$response.body#/want_id")))), ("delete_want" = (operation_id = "delete_want", parameters(("id" = "$response.body#/want_id")))))), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 413, description = "Too many refs", body = ErrorBody)))]
pub(crate) async fn create_want(
    State(state): Shared,
    env: Env,
    ApiJson(body): ApiJson<WantBody>,
) -> ApiResult<Response> {
    env.prod_only("wants")?;
    let v = blocking(&state, move |s| {
        engine_api::want(
            &s.engine,
            &body.partitions,
            engine_api::WantTerms {
                ttl: body.ttl.as_deref(),
                sla: body.sla.as_deref(),
                by: body.by.as_deref(),
            },
            s.limits.max_refs,
        )
    })
    .await?;
    Ok((StatusCode::CREATED, Json(v)).into_response())
}

#[utoipa::path(get, path = route::WANTS, summary = "Wants: active ones, or with a status, or all", params(WantsQuery), responses((status = 200, body = WantList), (status = 400, body = ErrorBody)))]
pub(crate) async fn list_wants(
    env: Env,
    Extension(role): Extension<Role>,
    ApiQuery(q): ApiQuery<WantsQuery>,
) -> ApiResult<Json<WantList>> {
    env.prod_only("wants")?;
    crate::ops::blocking_as(&env, role, move |engine| {
        engine_api::wants(
            engine,
            q.status.as_deref(),
            q.all.unwrap_or(false),
            q.limit()?,
        )
        .map(Json)
    })
    .await
}

#[utoipa::path(get, path = route::WANT, summary = "One want, with the state of its partitions", params(("id" = String, Path, description = "The want")), responses((status = 200, body = WantDetail), (status = 404, body = ErrorBody)))]
pub(crate) async fn get_want(
    env: Env,
    Extension(role): Extension<Role>,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<WantDetail>> {
    env.prod_only("wants")?;
    crate::ops::blocking_as(&env, role, move |engine| {
        engine_api::want_detail(engine, &id).map(Json)
    })
    .await
}

#[utoipa::path(delete, path = route::WANT, summary = "Withdraw a want", params(("id" = String, Path, description = "The want")), responses((status = 200, description = "The withdrawn want", body = Want), (status = 400, description = "The id is a prefix of more than one", body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody), (status = 409, description = "The want has already ended (expired or withdrawn)", body = ErrorBody)))]
pub(crate) async fn delete_want(
    State(state): Shared,
    env: Env,
    ApiPath(id): ApiPath<String>,
) -> ApiResult<Json<Want>> {
    env.prod_only("wants")?;
    blocking(&state, move |s| {
        engine_api::unwant(&s.engine, &id).map(Json)
    })
    .await
}
