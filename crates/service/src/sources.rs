//! Webhook ingest and the sources/tables endpoints.
//!
//! `POST /api/v1/webhooks/{source}` answers only once the records are on disk (fsync). Checks, in
//! order: the source exists and takes webhooks (404/400), the size (413, and again once a gzip
//! body is decompressed), the signature (401), the flood limit (429: charged only to requests
//! that passed the signature), the body format (400). A source with `secret_env` is authenticated
//! by its signature (`crate::signature`: DataBuild's own `X-DataBuild-Signature`, GitHub's,
//! Stripe's, Slack's or a generic one), since the systems that call webhooks sign rather than
//! hold our token; one without needs the bearer token when the service has one, like every
//! mutating request.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::State;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use databuild_core::{IdempotencyKey, Source, SourceKind};
use databuild_exec::answers::{route, Ingested, Sealed, SourceList};
use databuild_exec::answers::{Promotion, SourceDetail};
use databuild_exec::data::sources::Keys;
use databuild_exec::scheduler::{BuildOptions, Quiet};
use serde::Deserialize;
use utoipa::ToSchema;

use crate::engine_api::{self, ApiResult};
use crate::environment::Env;
use crate::error::{AppError, ErrorBody};
use crate::ops::{blocking_with_state as blocking, ApiJson, ApiPath};
use crate::AppState;

type Shared = State<Arc<AppState>>;

/// Per-source token buckets: `rate_limit` requests a second, bursts of twice that.
#[derive(Default)]
pub struct FloodGuard {
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl FloodGuard {
    /// Takes one request's token, or says how long to wait for one.
    fn admit(&self, source: &Source) -> Result<(), Duration> {
        let rate = f64::from(source.rate_limit);
        let burst = rate * 2.0;
        let mut buckets = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
        let now = Instant::now();
        let (tokens, last) = buckets.entry(source.name.clone()).or_insert((burst, now));
        *tokens = (*tokens + now.duration_since(*last).as_secs_f64() * rate).min(burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            Ok(())
        } else {
            Err(Duration::from_secs_f64((1.0 - *tokens) / rate))
        }
    }
}

fn error(status: StatusCode, code: &'static str, message: String) -> AppError {
    AppError {
        status,
        code,
        message,
    }
}

#[utoipa::path(post, path = route::WEBHOOK, summary = "Ingest records into a webhook source",
    description = "Appends the body's records to today's raw partition of the source and answers once they are on disk. Bodies are `body_format` of the source: a JSON object, a JSON array of objects, JSON lines (one object a line), or lines of text.",
    params(("source" = String, Path, description = "The source's name")),
    request_body(content = Option<String>, content_type = "text/plain", description = "The records; none (an empty body) is a delivery of no records"),
    responses((status = 200, description = "The records are on disk", body = Ingested),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody), (status = 415, description = "A `Content-Encoding` other than gzip", body = ErrorBody), (status = 429, body = ErrorBody), (status = 503, description = "The records could not be stored, or the source's secret is not set", body = ErrorBody)))]
pub(crate) async fn webhook(
    State(state): Shared,
    ApiPath(name): ApiPath<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // Senders are servers, which send no Origin; a web page posting here is refused.
    if let Err(cross) = crate::guard::same_origin(&headers) {
        return cross.refuse_change().into_response();
    }
    match ingest(&state, &name, &headers, body).await {
        Ok(answer) => Json(answer).into_response(),
        Err((e, retry_after)) => {
            let mut response = e.into_response();
            if let Some(wait) = retry_after {
                let secs = wait.as_secs().max(1).to_string();
                response.headers_mut().insert(
                    header::RETRY_AFTER,
                    HeaderValue::from_str(&secs).expect("digits"),
                );
            }
            response
        }
    }
}

type IngestError = (AppError, Option<Duration>);

async fn ingest(
    state: &Arc<AppState>,
    name: &str,
    headers: &HeaderMap,
    body: Body,
) -> Result<Ingested, IngestError> {
    let plain = |e: AppError| (e, None);
    let source = state
        .engine
        .graph
        .source(name)
        .ok_or_else(|| {
            plain(AppError::not_found(format!(
                "no source `{name}` in the graph"
            )))
        })?
        .clone();
    if let SourceKind::Directory { path } = &source.kind {
        return Err(plain(AppError::bad_request(format!(
            "source `{name}` reads files dropped into `{path}`; it takes no webhooks"
        ))));
    }
    let too_large = |what: &str| {
        plain(error(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "the body {what} larger than source `{name}`'s max_body of {} bytes",
                source.max_body
            ),
        ))
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > source.max_body) {
        return Err(too_large("is"));
    }
    let bytes = axum::body::to_bytes(body, source.max_body)
        .await
        .map_err(|_| too_large("is"))?;
    let bytes = decode(headers, bytes, source.max_body).map_err(|e| match e {
        Decoded::TooLarge => too_large("decompresses to"),
        Decoded::Refused(e) => plain(e),
    })?;
    // The flood limit is charged only to requests that prove who sent them: a flood of
    // garbage is refused by the signature check and cannot use up a real sender's share.
    authenticate(state, &source, headers, &bytes).map_err(plain)?;
    state.flood_guard.admit(&source).map_err(|wait| {
        let e = error(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_requests",
            format!(
                "source `{name}` takes at most {} requests a second; retry after {} ms",
                source.rate_limit,
                wait.as_millis()
            ),
        );
        (e, Some(wait))
    })?;
    let mut records = source
        .body_format
        .records(&bytes)
        .map_err(|why| plain(AppError::bad_request(format!("source `{name}`: {why}"))))?;
    if !source.include_headers.is_empty() {
        let included: serde_json::Map<String, serde_json::Value> = source
            .include_headers
            .iter()
            .map(|h| {
                let v = headers.get(h.as_str()).and_then(|v| v.to_str().ok());
                (h.clone(), v.map_or(serde_json::Value::Null, Into::into))
            })
            .collect();
        for r in &mut records {
            if let serde_json::Value::Object(fields) = r {
                fields.insert(HEADERS_FIELD.to_string(), included.clone().into());
            }
        }
    }
    let keys = delivery_keys(&source, headers, &records);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let engine = state.engine.clone();
    let date = state.engine.today();
    let day = date.clone();
    let appended = tokio::task::spawn_blocking(move || {
        databuild_exec::data::sources::append_once(
            &engine.data_dir,
            &source,
            &day,
            records,
            keys,
            now,
        )
    })
    .await
    .map_err(|e| plain(AppError::from(e)))?
    .map_err(|e| {
        eprintln!("webhook {name}: cannot store records: {e}");
        plain(error(
            StatusCode::SERVICE_UNAVAILABLE,
            "storage",
            format!("the records could not be stored ({e}); nothing was kept, retry"),
        ))
    })?;
    Ok(Ingested {
        source: name.to_string(),
        date,
        records: appended.stored,
        duplicates: appended.duplicates,
    })
}

/// The idempotency keys a delivery carries: its header's value, or each record's field (a
/// string, or a number as written); none when the source keeps none or the delivery has none.
fn delivery_keys(source: &Source, headers: &HeaderMap, records: &[serde_json::Value]) -> Keys {
    match source.idempotency.as_ref().map(|i| &i.key) {
        None => Keys::None,
        Some(IdempotencyKey::Header(h)) => headers
            .get(h.as_str())
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
            .filter(|k| !k.is_empty())
            .map_or(Keys::None, |k| Keys::Delivery(k.to_string())),
        Some(IdempotencyKey::Field(f)) => Keys::Records(
            records
                .iter()
                .map(|r| match r.get(f) {
                    Some(serde_json::Value::String(k)) => Some(k.clone()),
                    Some(n @ serde_json::Value::Number(_)) => Some(n.to_string()),
                    _ => None,
                })
                .collect(),
        ),
    }
}

/// The field of each record that holds the request headers named by `include_headers`.
pub const HEADERS_FIELD: &str = "_headers";

/// Why a body could not be decoded.
enum Decoded {
    /// Past `max_body` once decompressed (a gzip bomb stops here, at `max_body` + 1 bytes).
    TooLarge,
    Refused(AppError),
}

/// The body as the sender meant it: gunzipped when it says `Content-Encoding: gzip`, with
/// `max_body` applied to what it decompresses to.
fn decode(
    headers: &HeaderMap,
    bytes: axum::body::Bytes,
    max_body: usize,
) -> Result<axum::body::Bytes, Decoded> {
    use std::io::Read;
    let encoding = headers
        .get(header::CONTENT_ENCODING)
        .map(|v| v.to_str().unwrap_or("?").trim().to_ascii_lowercase());
    match encoding.as_deref() {
        None | Some("identity") | Some("") => Ok(bytes),
        Some("gzip") | Some("x-gzip") => {
            let mut out = Vec::new();
            flate2::read::MultiGzDecoder::new(&bytes[..])
                .take(max_body as u64 + 1)
                .read_to_end(&mut out)
                .map_err(|e| {
                    Decoded::Refused(AppError::bad_request(format!(
                        "the body says `Content-Encoding: gzip` but is not gzip ({e})"
                    )))
                })?;
            if out.len() > max_body {
                return Err(Decoded::TooLarge);
            }
            Ok(out.into())
        }
        Some(other) => Err(Decoded::Refused(error(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_encoding",
            format!("`Content-Encoding: {other}` is not supported; send the body as is or gzip"),
        ))),
    }
}

fn authenticate(
    state: &AppState,
    source: &Source,
    headers: &HeaderMap,
    body: &[u8],
) -> Result<(), AppError> {
    let Some(var) = &source.secret_env else {
        // Without a secret of its own, a source takes the service's token (when one is set).
        // The bearer header only: a browser's session cookie must not post records.
        return if state.guard.bearer_role(headers) == crate::guard::Role::Writer {
            Ok(())
        } else {
            Err(AppError::unauthorized(true))
        };
    };
    let secret = std::env::var(var)
        .ok()
        .filter(|s| !s.is_empty())
        .ok_or_else(|| {
            error(
                StatusCode::SERVICE_UNAVAILABLE,
                "misconfigured",
                format!(
            "source `{}` needs signed bodies but `{var}` is not set in the service's environment",
            source.name
        ),
            )
        })?;
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    crate::signature::verify(
        &source.signature,
        source.signature_tolerance,
        secret.as_bytes(),
        headers,
        body,
        now,
    )
    .map_err(|e| {
        error(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            format!(
                "source `{}` ({} signatures): {e}",
                source.name,
                source.signature.name()
            ),
        )
    })
}

/// The signature a DataBuild sender computes: `sha256=<hex HMAC-SHA256(secret, body)>`.
pub fn sign(secret: &str, body: &[u8]) -> String {
    crate::signature::sign(secret, body)
}

#[utoipa::path(get, path = route::SOURCES, summary = "Every source, its days and its tables", responses((status = 200, body = SourceList, links(("get_source" = (operation_id = "get_source", parameters(("name" = "$response.body#/sources/0/name")))), ("seal" = (operation_id = "seal", parameters(("name" = "$response.body#/sources/0/name")))), ("promote" = (operation_id = "promote", parameters(("name" = "$response.body#/sources/0/tables/0/name"))))))))]
pub(crate) async fn list_sources(State(state): Shared, env: Env) -> ApiResult<Json<SourceList>> {
    env.prod_only("sources and tables")?;
    blocking(&state, |s| engine_api::sources(&s.engine).map(Json)).await
}

#[utoipa::path(get, path = route::SOURCE, summary = "One source: coverage by date of the raw data and of every table version", params(("name" = String, Path, description = "The source")), responses((status = 200, body = SourceDetail), (status = 404, body = ErrorBody)))]
pub(crate) async fn get_source(
    State(state): Shared,
    env: Env,
    ApiPath(name): ApiPath<String>,
) -> ApiResult<Json<SourceDetail>> {
    env.prod_only("sources and tables")?;
    blocking(&state, move |s| {
        engine_api::source(&s.engine, &name).map(Json)
    })
    .await
}

#[derive(Deserialize, serde::Serialize, ToSchema, Default)]
pub struct SealBody {
    /// Seal through this date (`YYYY-MM-DD`), even today but no later; default: every day that has
    /// ended.
    #[schema(format = Date)]
    pub through: Option<String>,
}

#[utoipa::path(post, path = route::SEAL, summary = "Ingest dropped files, seal ended days (or through a date) and expire what retention drops", params(("name" = String, Path, description = "The source")), request_body = SealBody, responses((status = 200, body = Sealed), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn seal(
    State(state): Shared,
    env: Env,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<SealBody>,
) -> ApiResult<Json<Sealed>> {
    env.prod_only("sources and tables")?;
    blocking(&state, move |s| {
        engine_api::seal(&s.engine, Some(&name), body.through.as_deref()).map(Json)
    })
    .await
}

#[derive(Deserialize, serde::Serialize, ToSchema)]
pub struct PromoteBody {
    /// A version of the table (they count from 1).
    #[schema(minimum = 1, example = 1)]
    pub version: u32,
    /// Rebuild the partitions built over the alias against the version first.
    #[serde(default)]
    pub build_downstream: bool,
}

#[utoipa::path(post, path = route::PROMOTE, summary = "Point a table's alias at a version (a rollback when it is an earlier one)", params(("name" = String, Path, description = "The table")), request_body = PromoteBody, responses((status = 200, body = Promotion), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 404, body = ErrorBody)))]
pub(crate) async fn promote(
    State(state): Shared,
    env: Env,
    ApiPath(name): ApiPath<String>,
    ApiJson(body): ApiJson<PromoteBody>,
) -> ApiResult<Json<Promotion>> {
    env.prod_only("sources and tables")?;
    blocking(&state, move |s| {
        let options = BuildOptions::default();
        let interrupt = AtomicBool::new(false);
        let mut quiet = Quiet;
        let downstream = body.build_downstream.then_some((
            &options,
            s.executor.as_ref(),
            &mut quiet as &mut dyn databuild_exec::scheduler::Observer,
            &interrupt,
        ));
        engine_api::promote(&s.engine, &name, body.version, downstream).map(Json)
    })
    .await
}
