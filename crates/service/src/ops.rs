//! What the API's handlers and the dashboard's pages both do: run engine work off the async
//! threads, take JSON bodies, paths and query strings (refused as JSON errors), bound listings,
//! start builds, run user SQL. It depends on no handler module, so
//! `api`, `dashboard`, `sources` and `wants` all stand on it without depending on one another.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use axum::extract::{FromRequest, FromRequestParts};
use databuild_exec::scheduler::{BuildOptions, Quiet};
use databuild_exec::Engine;
use databuild_log::SqlResult;
use serde::de::DeserializeOwned;
use serde::Deserialize;

use crate::engine_api::{self, parse_refs, ApiResult};
use crate::environment::Env;
use crate::error::AppError;
use crate::AppState;

/// A JSON body whose rejection is an [`AppError`]. Every body the API takes is an object: serde
/// would also fill a struct from an array (`[]` is a `GcBody` of defaults), which the OpenAPI
/// document does not allow, so anything but an object is refused.
pub struct ApiJson<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for ApiJson<T> {
    type Rejection = AppError;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, AppError> {
        let axum::Json(JsonObject(body)) = axum::Json::from_request(req, state).await?;
        Ok(ApiJson(body))
    }
}

/// A `T` read from a JSON object only.
struct JsonObject<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for JsonObject<T> {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct ObjectVisitor<T>(std::marker::PhantomData<T>);
        impl<'de, T: Deserialize<'de>> serde::de::Visitor<'de> for ObjectVisitor<T> {
            type Value = JsonObject<T>;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                map: A,
            ) -> Result<Self::Value, A::Error> {
                T::deserialize(serde::de::value::MapAccessDeserializer::new(map)).map(JsonObject)
            }
        }
        deserializer.deserialize_map(ObjectVisitor(std::marker::PhantomData))
    }
}

/// Path parameters whose rejection is an [`AppError`].
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Path), rejection(AppError))]
pub struct ApiPath<T>(pub T);

/// A query string whose rejection is an [`AppError`] (a JSON 400, as every other refusal).
#[derive(FromRequestParts)]
#[from_request(via(axum::extract::Query), rejection(AppError))]
pub struct ApiQuery<T>(pub T);

/// The largest `limit` a listing takes (each cuts it to its own cap); a larger one is refused,
/// as its schema says.
pub const MAX_LIMIT: usize = 1 << 32;

/// A listing's `limit`, or its default; refused past [`MAX_LIMIT`].
pub(crate) fn limit(given: Option<usize>, default: usize) -> ApiResult<usize> {
    match given {
        Some(n) if n > MAX_LIMIT => Err(AppError::bad_request(format!(
            "`limit={n}` is more than {MAX_LIMIT}"
        ))),
        // A page holds at least one row, so that its cursor always moves on: `limit=0` is 1 on
        // every listing (an empty page with no cursor would read as the end).
        Some(n) => Ok(n.max(1)),
        None => Ok(default),
    }
}

/// Runs engine work off the async threads, on the full engine of the request's environment:
/// for work that derives no status (work that does takes the caller's role: [`blocking_as`]).
pub(crate) async fn blocking<T: Send + 'static>(
    env: &Env,
    f: impl FnOnce(&Engine) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    blocking_as(env, crate::guard::Role::Writer, f).await
}

/// Runs engine work off the async threads, on the engine `role` reads with in the request's
/// environment ([`Env::engine_for`]): what every read that may derive a status uses.
pub(crate) async fn blocking_as<T: Send + 'static>(
    env: &Env,
    role: crate::guard::Role,
    f: impl FnOnce(&Engine) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let engine = env.engine_for(role).clone();
    tokio::task::spawn_blocking(move || f(&engine)).await?
}

/// Runs work that needs the whole state (engine and executor) off the async threads.
pub(crate) async fn blocking_with_state<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&AppState) -> ApiResult<T> + Send + 'static,
) -> ApiResult<T> {
    let state = state.clone();
    tokio::task::spawn_blocking(move || f(&state)).await?
}

/// How a build is asked for, from the API's body or the dashboard's form.
pub struct BuildRequest {
    pub partitions: Vec<String>,
    pub force: bool,
    pub keep_going: bool,
    pub allow_stale: bool,
    pub parallel: Option<usize>,
    pub max_runs: Option<usize>,
}

/// Records a build request in the request's environment and runs it there on its own thread
/// (which [`crate::Builds`] keeps, so shutdown cancels it); returns its id at once.
pub async fn start_build(
    state: &Arc<AppState>,
    env: &Env,
    request: BuildRequest,
) -> ApiResult<String> {
    let max_refs = state.limits.max_refs;
    let (id, options) = blocking(env, move |engine| {
        let options = BuildOptions {
            refs: parse_refs(engine, &request.partitions, max_refs)?,
            force: request.force,
            parallel: request
                .parallel
                .unwrap_or_else(databuild_exec::scheduler::default_parallelism)
                .max(1),
            keep_going: request.keep_going,
            allow_stale: request.allow_stale,
            pins: Default::default(),
            max_runs: request.max_runs,
        };
        Ok((engine.receive(&options)?, options))
    })
    .await?;
    let interrupt = Arc::new(AtomicBool::new(false));
    let engine = env.engine().clone();
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
        .map_err(|e| AppError::internal(format!("cannot start the build: {e}")))?;
    state.builds.add(id.clone(), interrupt, handle);
    Ok(id)
}

/// A slot for one analysis (a plan of up to the refs cap, held whole while planning), if fewer
/// than the service's limit are running, else a 429: planning is the heaviest read there is.
pub(crate) fn analysis_slot(
    state: &Arc<AppState>,
) -> Result<tokio::sync::OwnedSemaphorePermit, AppError> {
    (state.analysis_slots.clone().try_acquire_owned())
        .map_err(|_| AppError::busy("analyses", state.limits.analyses))
}

/// Runs user SQL if fewer than the service's limit of queries are running, else answers 429.
pub(crate) async fn run_sql(
    state: &Arc<AppState>,
    env: &Env,
    query: String,
    max_rows: usize,
) -> ApiResult<SqlResult> {
    let permit = state
        .sql_slots
        .clone()
        .try_acquire_owned()
        .map_err(|_| AppError::busy("SQL queries", state.limits.sql_queries))?;
    // The permit goes with the query, not the request: a client that hangs up does not end the
    // query, so neither may it free the query's slot.
    blocking(env, move |engine| {
        let _permit = permit;
        engine_api::sql(engine, &query, max_rows)
    })
    .await
}
