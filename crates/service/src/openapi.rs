//! `GET /api/v1/openapi.json`, generated from the handlers' annotations: every request body and
//! every answer is named by its type (`databuild_exec::answers`), whose schema `utoipa` derives
//! (and collects, with the types they hold).

use std::collections::{BTreeSet, HashMap};
use std::sync::OnceLock;

use axum::extract::{MatchedPath, Request};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::OpenApi;

use crate::error::AppError;

use crate::api::{AnalyzeBody, BuildBody, CheckBody, GcBody, SqlBody, TaintBody};
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
        crate::api::build_partitions,
        crate::api::build_summary,
        crate::api::build_progress,
        crate::api::build_event_stream,
        crate::api::analyze,
        crate::api::list_partitions,
        crate::api::partition_status,
        crate::api::partition_events,
        crate::api::partition_explain,
        crate::api::partition_lineage,
        crate::api::partition_diff,
        crate::api::taint,
        crate::api::taint_impact,
        crate::api::check,
        crate::api::gc,
        crate::api::graph,
        crate::api::list_events,
        crate::api::list_jobs,
        crate::api::get_job,
        crate::api::job_runs,
        crate::api::get_run,
        crate::api::run_log,
        crate::api::run_log_chunk,
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
        CheckBody,
        GcBody,
        ErrorBody,
        crate::sources::SealBody,
        crate::sources::PromoteBody,
        crate::wants::WantBody,
        crate::wants::WantStatusName,
        crate::api::ListedStatusName,
        crate::api::GraphFormat
    ))
)]
pub struct ApiDoc;

/// The document, built once.
fn cached() -> &'static serde_json::Value {
    static DOCUMENT: OnceLock<serde_json::Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
        camel_case_links(&mut doc);
        doc
    })
}

/// `GET /api/v1/openapi.json`: the document.
pub async fn document() -> Json<&'static serde_json::Value> {
    Json(cached())
}

/// Path template -> method (upper case) -> the names of the query parameters it declares.
type Declared = HashMap<String, HashMap<String, BTreeSet<String>>>;

/// The query parameters each operation declares, by path template and method, read from the
/// document itself: what the document says a request takes is what the service accepts.
fn declared_query_params() -> &'static Declared {
    static DECLARED: OnceLock<Declared> = OnceLock::new();
    DECLARED.get_or_init(|| {
        let mut out = Declared::new();
        for (path, ops) in cached()["paths"].as_object().into_iter().flatten() {
            let methods = out.entry(path.clone()).or_default();
            for (method, op) in ops.as_object().into_iter().flatten() {
                let names = op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .filter(|p| p["in"] == "query")
                    .filter_map(|p| p["name"].as_str().map(str::to_string))
                    .collect();
                methods.insert(method.to_ascii_uppercase(), names);
            }
        }
        out
    })
}

/// Refuses an API request whose query string holds a parameter its operation does not declare
/// (a 400 `bad_query` naming it and what the operation takes): a misspelt or unsupported
/// parameter is never silently ignored. An operation the document does not list (the document
/// itself) declares none. Only the API's routes pass through this; the dashboard's pages do not.
pub async fn refuse_undeclared_query(
    matched: MatchedPath,
    request: Request,
    next: Next,
) -> Response {
    if request.uri().query().is_some_and(|q| !q.is_empty()) {
        let method = match request.method() {
            &Method::HEAD => "GET",
            m => m.as_str(),
        };
        let empty = BTreeSet::new();
        let declared = match declared_query_params().get(matched.as_str()) {
            Some(methods) => match methods.get(method) {
                Some(names) => names,
                // A method the path does not take: the router's 405 says so, not this.
                None => return next.run(request).await,
            },
            None => &empty,
        };
        let given: Vec<(String, String)> = match axum::extract::Query::try_from_uri(request.uri()) {
            Ok(axum::extract::Query(given)) => given,
            Err(r) => return AppError::from(r).into_response(),
        };
        let unknown: BTreeSet<&str> = given
            .iter()
            .map(|(name, _)| name.as_str())
            .filter(|name| !declared.contains(*name))
            .collect();
        if !unknown.is_empty() {
            let takes = if declared.is_empty() {
                "takes no query parameters".to_string()
            } else {
                let names: Vec<String> = declared.iter().map(|n| format!("`{n}`")).collect();
                format!("takes only {}", names.join(", "))
            };
            let names: Vec<String> = unknown.iter().map(|n| format!("`{n}`")).collect();
            return AppError::new(
                StatusCode::BAD_REQUEST,
                "bad_query",
                format!(
                    "unknown query parameter{} {}: {method} {} {takes} (see /api/v1/openapi.json)",
                    if unknown.len() == 1 { "" } else { "s" },
                    names.join(", "),
                    matched.as_str()
                ),
            )
            .into_response();
        }
    }
    next.run(request).await
}

/// utoipa 5.5 writes a Link object's fields in snake case (`operation_id`), which no OpenAPI
/// tool reads as the spec's `operationId`: the links that tell clients (and schemathesis's
/// stateful tests) how an answer's ids feed the next request would be lost.
fn camel_case_links(v: &mut serde_json::Value) {
    use serde_json::Value;
    match v {
        Value::Object(map) => {
            if let Some(Value::Object(links)) = map.get_mut("links") {
                for link in links.values_mut() {
                    if let Value::Object(link) = link {
                        for (from, to) in [
                            ("operation_id", "operationId"),
                            ("operation_ref", "operationRef"),
                            ("request_body", "requestBody"),
                        ] {
                            if let Some(x) = link.remove(from) {
                                link.insert(to.to_string(), x);
                            }
                        }
                    }
                }
            }
            map.values_mut().for_each(camel_case_links);
        }
        Value::Array(items) => items.iter_mut().for_each(camel_case_links),
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn every_answer_and_body_names_its_schema_and_links_are_camel_case() {
        let mut doc = serde_json::to_value(<super::ApiDoc as utoipa::OpenApi>::openapi()).unwrap();
        super::camel_case_links(&mut doc);
        let text = doc.to_string();
        assert!(!text.contains("operation_id"), "links are camel case");
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for (method, op) in ops.as_object().unwrap() {
                for (status, answer) in op["responses"].as_object().unwrap() {
                    for (kind, content) in answer["content"].as_object().into_iter().flatten() {
                        let schema = &content["schema"];
                        assert!(
                            schema.get("$ref").is_some() || kind != "application/json",
                            "{method} {path} {status}: {schema}"
                        );
                    }
                }
                if let Some(body) = op.get("requestBody") {
                    let schema = &body["content"]["application/json"]["schema"];
                    assert!(
                        schema.get("$ref").is_some() || body["content"].get("text/plain").is_some(),
                        "{method} {path}: request body {schema}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_partitions_status_is_an_enum_of_the_same_strings() {
        let doc = serde_json::to_value(<super::ApiDoc as utoipa::OpenApi>::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        assert_eq!(
            schemas["DerivedStatus"]["enum"],
            serde_json::json!([
                "live",
                "stale",
                "check_failed",
                "missing",
                "building",
                "failed",
                "tainted",
                "expired"
            ])
        );
        for answer in [
            "PartitionStatus",
            "PartitionItem",
            "Explain",
            "WaitingPartition",
        ] {
            assert_eq!(
                schemas[answer]["properties"]["status"]["$ref"],
                "#/components/schemas/DerivedStatus",
                "{answer}"
            );
        }
    }
}
