//! `GET /api/v1/openapi.json`, generated from the handlers' annotations: every request body and
//! every answer is named by its type (`databuild_exec::answers`), whose schema `utoipa` derives
//! (and collects, with the types they hold).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, OnceLock};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::Json;
use utoipa::OpenApi;

use crate::error::AppError;
use crate::AppState;

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
        crate::api::partition_forecast,
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
        crate::api::metric_series,
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
        crate::environments::list_environments,
        crate::environments::create_environment,
        crate::environments::drop_environment,
        crate::environments::environment_diff,
        crate::environments::promote_environment,
        crate::environments::rollback_environment,
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
        databuild_exec::answers::WantRisk,
        crate::api::ListedStatusName,
        crate::api::GraphFormat,
        crate::environments::CreateEnvironmentBody,
        crate::environments::PromoteEnvironmentBody,
        databuild_exec::answers::EnvironmentList,
        databuild_exec::answers::Late,
        databuild_exec::answers::EnvironmentView,
        databuild_exec::answers::EnvironmentChange,
        databuild_exec::answers::ChangeKind,
        databuild_exec::answers::EnvironmentDiff,
        databuild_exec::answers::PartitionDifference,
        databuild_exec::answers::JobDifference,
        databuild_exec::answers::ContentDiff,
        databuild_exec::answers::ContentChange,
        databuild_exec::answers::RowDiff
    ))
)]
pub struct ApiDoc;

/// The document, built once.
fn cached() -> &'static serde_json::Value {
    static DOCUMENT: OnceLock<serde_json::Value> = OnceLock::new();
    DOCUMENT.get_or_init(|| {
        let mut doc = serde_json::to_value(ApiDoc::openapi()).expect("the document serializes");
        camel_case_links(&mut doc);
        refs_are_never_empty(&mut doc);
        every_operation_takes_an_environment(&mut doc);
        doc
    })
}

/// `GET /api/v1/openapi.json`: the document, its request bodies' refs exemplified by a ref of
/// this service's graph: an example that the service accepts, as a client (or a generator of
/// requests) can try it; the environments a request may name, those there are now.
pub async fn document(State(state): State<Arc<AppState>>) -> Json<serde_json::Value> {
    let mut doc = cached().clone();
    if let Some(r) = example_ref(&state.engine.graph) {
        exemplify_refs(&mut doc, &r);
    }
    let engine = state.engine.clone();
    if let Ok(Ok(names)) = tokio::task::spawn_blocking(move || engine.environments.names()).await {
        enumerate_environments(&mut doc, &names);
    }
    Json(doc)
}

/// Says which environments there are wherever a request names one that must exist: the `env`
/// parameter, an environment's path, and the environment a diff compares with or a promotion
/// changes. Any other name is a 404 (a 400 if it is no environment's name).
fn enumerate_environments(doc: &mut serde_json::Value, names: &[String]) {
    let named = serde_json::json!(names);
    for (path, ops) in doc["paths"].as_object_mut().into_iter().flatten() {
        let in_path = path.starts_with(databuild_exec::answers::route::ENVIRONMENTS)
            && path.contains("{name}");
        for op in ops.as_object_mut().into_iter().flatten().map(|(_, op)| op) {
            // (`get_mut`: indexing would give an operation without parameters a `null` list.)
            let params = op.get_mut("parameters").and_then(|p| p.as_array_mut());
            for param in params.into_iter().flatten() {
                let names_one = param["name"] == crate::environment::ENV_PARAM
                    || param["name"] == "other"
                    || (in_path && param["name"] == "name" && param["in"] == "path");
                if names_one {
                    param["schema"]["enum"] = named.clone();
                }
            }
        }
    }
    let schemas = &mut doc["components"]["schemas"];
    for (body, field) in [
        ("PromoteEnvironmentBody", "to"),
        ("CreateEnvironmentBody", "from"),
    ] {
        if let Some(schema) = schemas[body]["properties"][field].as_object_mut() {
            schema.insert("enum".into(), named.clone());
        }
    }
}

/// The request bodies that name refs in `partitions`.
const REF_BODIES: [&str; 5] = [
    "BuildBody",
    "AnalyzeBody",
    "TaintBody",
    "CheckBody",
    "WantBody",
];

/// Sets `example` of each [`REF_BODIES`]' `partitions` to `[r]`.
fn exemplify_refs(doc: &mut serde_json::Value, r: &str) {
    for body in REF_BODIES {
        if let Some(schema) = ref_list(doc, body).as_object_mut() {
            schema.insert("example".into(), serde_json::json!([r]));
        }
    }
}

/// Says of each [`REF_BODIES`]' refs what the service holds them to: an empty one is refused
/// (utoipa has no attribute for a list's items).
fn refs_are_never_empty(doc: &mut serde_json::Value) {
    for body in REF_BODIES {
        if let Some(items) = ref_list(doc, body)["items"].as_object_mut() {
            items.insert("minLength".into(), 1.into());
        }
    }
}

/// The schema of `body`'s `partitions`.
fn ref_list<'d>(doc: &'d mut serde_json::Value, body: &str) -> &'d mut serde_json::Value {
    &mut doc["components"]["schemas"][body]["properties"]["partitions"]
}

/// A ref the graph's first job builds (else its first dataset declares), its fields filled with
/// values of their types (a `str` field with its domain's first value, if it has one).
fn example_ref(graph: &databuild_core::Graph) -> Option<String> {
    use databuild_core::pattern::FieldType;
    let pattern = match graph.jobs.first() {
        Some(job) => job.outputs.first()?,
        None => &graph.datasets.first()?.pattern,
    };
    let values: Vec<&str> = pattern
        .fields()
        .map(|(name, ty)| match ty {
            FieldType::Date => "2024-01-01",
            FieldType::Hour => "2024-01-01T00",
            FieldType::Int => "1",
            FieldType::Str => graph
                .domains
                .get(name)
                .and_then(|d| d.first())
                .map_or("example", String::as_str),
        })
        .collect();
    Some(pattern.render(&values))
}

/// The paths whose operations are about no one environment: the environments themselves (run
/// on prod's engine, which finds every one), webhooks (prod's sources) and this document.
fn in_no_environment(path: &str) -> bool {
    use databuild_exec::answers::route;
    path.starts_with(route::ENVIRONMENTS) || path == route::WEBHOOK || path == route::OPENAPI
}

/// Declares the `env` query parameter on every operation about one environment (contract
/// section 9), once here rather than on each handler, with the 404 an unknown one answers. Its
/// `X-DataBuild-Env` header twin is not declared: a generated header would only say the same.
fn every_operation_takes_an_environment(doc: &mut serde_json::Value) {
    let param = serde_json::json!({
        "name": crate::environment::ENV_PARAM,
        "in": "query",
        "required": false,
        "description": "The environment the request is about (default `prod`; the `X-DataBuild-Env` header says the same, this wins). An unknown one is a 404 saying how to make it.",
        "schema": { "type": "string", "pattern": "^[a-z][a-z0-9_]{0,39}$", "example": "prod" }
    });
    let error = |description: &str| {
        serde_json::json!({
            "description": description,
            "content": { "application/json": { "schema": { "$ref": "#/components/schemas/ErrorBody" } } }
        })
    };
    let (not_found, bad) = (
        error("No such environment (or no such thing in it)"),
        error("Not an environment's name (or another bad request)"),
    );
    for (path, ops) in doc["paths"].as_object_mut().into_iter().flatten() {
        if in_no_environment(path) {
            continue;
        }
        for op in ops.as_object_mut().into_iter().flatten().map(|(_, op)| op) {
            match op["parameters"].as_array_mut() {
                Some(params) => params.push(param.clone()),
                None => op["parameters"] = serde_json::json!([param.clone()]),
            }
            if let Some(responses) = op["responses"].as_object_mut() {
                responses.entry("404").or_insert_with(|| not_found.clone());
                responses.entry("400").or_insert_with(|| bad.clone());
            }
        }
    }
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
    fn every_operation_in_an_environment_declares_env_and_its_404() {
        let doc = super::cached();
        let mut declared = 0;
        for (path, ops) in doc["paths"].as_object().unwrap() {
            for (method, op) in ops.as_object().unwrap() {
                let takes_env = (op["parameters"].as_array().into_iter().flatten())
                    .any(|p| p["name"] == "env" && p["in"] == "query");
                assert_eq!(
                    takes_env,
                    !super::in_no_environment(path),
                    "{method} {path}"
                );
                if takes_env {
                    declared += 1;
                    assert!(op["responses"].get("404").is_some(), "{method} {path}");
                    assert!(op["responses"].get("400").is_some(), "{method} {path}");
                }
            }
        }
        assert!(declared > 30, "{declared}");
        let schemas = doc["components"]["schemas"].as_object().unwrap();
        for name in [
            "EnvironmentList",
            "EnvironmentDiff",
            "ContentDiff",
            "CreateEnvironmentBody",
        ] {
            assert!(schemas.contains_key(name), "{name}");
        }
    }

    #[test]
    fn the_environments_there_are_are_listed_where_a_request_names_one() {
        let mut doc = super::cached().clone();
        let names = ["prod".to_string(), "dev".to_string()];
        super::enumerate_environments(&mut doc, &names);
        let env = (doc["paths"]["/api/v1/jobs"]["get"]["parameters"]
            .as_array()
            .unwrap()
            .iter())
        .find(|p| p["name"] == "env")
        .unwrap();
        assert_eq!(env["schema"]["enum"], serde_json::json!(["prod", "dev"]));
        let diff = &doc["paths"]["/api/v1/environments/{name}/diff"]["get"]["parameters"];
        assert!(
            diff.to_string().contains(r#""enum":["prod","dev"]"#),
            "{diff}"
        );
        let to = &doc["components"]["schemas"]["PromoteEnvironmentBody"]["properties"]["to"];
        assert_eq!(to["enum"], serde_json::json!(["prod", "dev"]));
        // An operation without parameters is left without them (not `null`).
        let list = &doc["paths"]["/api/v1/environments"]["get"];
        assert!(list.get("parameters").is_none(), "{list}");
    }

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
    fn a_job_runs_resources_are_named_run_resources() {
        let doc = serde_json::to_value(<super::ApiDoc as utoipa::OpenApi>::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        let resources = &schemas["JobRun"]["properties"]["resources"];
        assert!(
            resources
                .to_string()
                .contains("#/components/schemas/RunResources"),
            "{resources}"
        );
        let fields = schemas["RunResources"]["properties"].as_object().unwrap();
        let names: Vec<&str> = fields.keys().map(String::as_str).collect();
        let mut expected = databuild_log::RunResources::NAMES.to_vec();
        expected.sort_unstable();
        let mut names = names;
        names.sort_unstable();
        assert_eq!(names, expected);
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

    #[test]
    fn a_wants_risk_is_named_and_both_want_answers_hold_it() {
        let doc = serde_json::to_value(<super::ApiDoc as utoipa::OpenApi>::openapi()).unwrap();
        let schemas = &doc["components"]["schemas"];
        assert!(
            schemas["WantRisk"]["properties"]["at_risk"].is_object(),
            "{}",
            schemas["WantRisk"]
        );
        for answer in ["Want", "WantDetail"] {
            assert!(
                schemas[answer]
                    .to_string()
                    .contains("#/components/schemas/WantRisk"),
                "{answer}: {}",
                schemas[answer]
            );
        }
    }
}
