//! The API document is what the service does (#57.12), over a real socket: a query parameter an
//! operation does not declare is refused with a 400 naming it (on routes with a query struct and
//! without one, GET and POST), a value past its declared range is refused, the dashboard's pages
//! still take extra parameters, and the event stream's events are what its schema says.

use serde_json::json;

use crate::util::{Project, Service};

const GRAPH: &str = r#"
[graph]
name = "apidoc"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["sh", "-c", "echo hello; mkdir -p \"$DATABUILD_DATA_DIR/a\" && echo x > \"$DATABUILD_DATA_DIR/a/2020-01-01\""]
"#;

/// A served project with one finished build: `(project, service, build id, run id)`.
fn served() -> (Project, Service, String, String) {
    let p = Project::new(GRAPH);
    p.partition("raw/2020-01-01");
    let s = Service::start(&p, &[]);
    let (status, v) = s.post("/api/v1/builds", &json!({ "partitions": ["a/2020-01-01"] }));
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap().to_string();
    let build = s.wait_for_build(&id);
    assert_eq!(build["status"], "completed", "{build}");
    let run = build["job_runs"][0]["job_run_id"]
        .as_str()
        .unwrap()
        .to_string();
    (p, s, id, run)
}

#[test]
fn an_undeclared_query_parameter_is_refused_naming_it() {
    let (_p, s, id, run) = served();
    let gets = [
        "/api/v1/builds".to_string(),
        format!("/api/v1/builds/{id}"),
        format!("/api/v1/builds/{id}/summary"),
        format!("/api/v1/builds/{id}/events/stream"),
        "/api/v1/partitions?status=live".to_string(),
        "/api/v1/partitions/a%2F2020-01-01/status".to_string(),
        "/api/v1/jobs".to_string(),
        format!("/api/v1/job-runs/{run}/log/chunk?offset=0"),
        format!("/api/v1/job-runs/{run}/log"),
        "/api/v1/wants".to_string(),
        "/api/v1/openapi.json".to_string(),
    ];
    for path in &gets {
        // Without the stray parameter, the request is answered.
        let (status, body) = s.call("GET", path, None, None);
        assert_eq!(status, 200, "GET {path}: {body}");
        let sep = if path.contains('?') { '&' } else { '?' };
        let (status, v) = s.get(&format!("{path}{sep}stage=dev"));
        assert_eq!(status, 400, "GET {path}{sep}stage=dev: {v}");
        assert_eq!(v["code"], "bad_query", "GET {path}: {v}");
        let error = v["error"].as_str().unwrap();
        assert!(
            error.contains("unknown query parameter `stage`"),
            "GET {path}: {error}"
        );
    }
    // What the operation takes is named, so the caller can fix the request.
    let (_, v) = s.get("/api/v1/builds?limt=5");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("`limt`") && error.contains("`limit`"),
        "{error}"
    );
    let (_, v) = s.get(&format!("/api/v1/builds/{id}?stage=dev&x=1"));
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("`stage`, `x`") && error.contains("takes only `env`"),
        "{error}"
    );
    // A name given twice, apart, is named once.
    let (_, v) = s.get("/api/v1/builds?stage=1&limit=2&stage=3");
    let error = v["error"].as_str().unwrap();
    assert!(
        error.contains("unknown query parameter `stage`:"),
        "{error}"
    );
    // A POST with a body, too.
    let (status, v) = s.post(
        "/api/v1/analyze?stage=dev",
        &json!({ "partitions": ["a/2020-01-01"] }),
    );
    assert_eq!(
        (status, v["code"].as_str()),
        (400, Some("bad_query")),
        "{v}"
    );
    // The dashboard's pages are not the API: a cache buster is no error there.
    let (status, _) = s.call("GET", "/?_=123", None, None);
    assert_eq!(status, 200);
}

#[test]
fn a_log_offset_past_its_declared_maximum_is_refused() {
    let (_p, s, _id, run) = served();
    let (_, doc) = s.get("/api/v1/openapi.json");
    let params = &doc["paths"]["/api/v1/job-runs/{id}/log/chunk"]["get"]["parameters"];
    let offset = params
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "offset")
        .unwrap();
    assert_eq!(offset["schema"]["maximum"], json!(i64::MAX), "{offset}");
    let (status, v) = s.get(&format!(
        "/api/v1/job-runs/{run}/log/chunk?offset={}",
        i64::MAX
    ));
    assert_eq!(status, 200, "{v}");
    assert_eq!(v["text"], "");
    let above = i64::MAX as u64 + 1;
    let (status, v) = s.get(&format!("/api/v1/job-runs/{run}/log/chunk?offset={above}"));
    assert_eq!(status, 400, "{v}");
    assert_eq!(v["code"], "bad_query");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains(&format!("`offset={above}`")),
        "{v}"
    );
}

#[test]
fn the_event_streams_events_are_what_its_schema_says() {
    let (_p, s, id, _run) = served();
    let (_, doc) = s.get("/api/v1/openapi.json");
    let stream = &doc["paths"]["/api/v1/builds/{id}/events/stream"]["get"]["responses"]["200"]
        ["content"]["text/event-stream"]["schema"];
    assert_eq!(
        stream["$ref"], "#/components/schemas/StreamedEvent",
        "{stream}"
    );
    let schema = &doc["components"]["schemas"]["StreamedEvent"];
    assert_eq!(schema["required"], json!(["event", "data"]), "{schema}");
    let (status, body) = s.call(
        "GET",
        &format!("/api/v1/builds/{id}/events/stream"),
        None,
        None,
    );
    assert_eq!(status, 200);
    let (_, events) = s.get(&format!("/api/v1/builds/{id}/events"));
    let events = events["events"].as_array().unwrap();
    // Each SSE event: an `event: event` line, then its data, one log event as JSON.
    let frames: Vec<&str> = body.split("\n\n").filter(|f| f.contains("data:")).collect();
    assert_eq!(frames.len(), events.len(), "{body}");
    for (frame, logged) in frames.iter().zip(events) {
        let mut name = None;
        let mut data = None;
        for line in frame.lines() {
            if let Some(n) = line.strip_prefix("event:") {
                name = Some(n.trim());
            }
            if let Some(d) = line.strip_prefix("data:") {
                data = Some(d.trim());
            }
        }
        assert_eq!(name, Some("event"), "{frame}");
        let data: serde_json::Value = serde_json::from_str(data.unwrap()).unwrap();
        assert_eq!(&data, logged);
    }
}

/// What the served document says, the service does: its request bodies' example ref is one the
/// graph builds and the service takes; an empty ref is out of the document as it is refused; a
/// check of a partition with no built instance, and a taint of one being built, are conflicts
/// (409), as a withdrawal of a want that ended is; `analyze`'s `parallel` is held to its range;
/// and a partition path whose ref's `/` is unencoded says how to write it (GET: 404; any other
/// method: 405 with `Allow`, as for an encoded ref).
#[test]
fn the_document_and_the_service_agree_on_refs_conflicts_and_paths() {
    let (_p, s, _id, _run) = served();
    let (status, doc) = s.get("/api/v1/openapi.json");
    assert_eq!(status, 200);
    let partitions = &doc["components"]["schemas"]["BuildBody"]["properties"]["partitions"];
    assert_eq!(
        partitions["example"],
        json!(["a/2024-01-01"]),
        "{partitions}"
    );
    assert_eq!(partitions["items"]["minLength"], 1, "{partitions}");
    let (status, v) = s.post(
        "/api/v1/analyze",
        &json!({ "partitions": ["a/2024-01-01"] }),
    );
    assert_eq!(status, 200, "the example is taken: {v}");
    let (status, v) = s.post(
        "/api/v1/analyze",
        &json!({ "partitions": ["a/2020-01-01"], "parallel": 0 }),
    );
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"]
            .as_str()
            .unwrap()
            .contains("parallel 0 (`--parallel`, or `parallel` in the API)"),
        "{v}"
    );
    let checked = Project::new(&format!(
        "{GRAPH}[[check]]\nname = \"written\"\napplies_to = \"a\"\ncommand = [\"true\"]\n"
    ));
    let c = Service::start(&checked, &[]);
    let (status, v) = c.post(
        "/api/v1/partitions/check",
        &json!({ "partitions": ["a/2024-01-01"] }),
    );
    assert_eq!(status, 409, "never built: {v}");
    assert_eq!(v["code"], "conflict", "{v}");
    let (status, v) = s.post("/api/v1/wants", &json!({ "partitions": ["a/2024-01-02"] }));
    assert_eq!(status, 201, "{v}");
    let want = v["want_id"].as_str().unwrap().to_string();
    let (status, _) = s.call("DELETE", &format!("/api/v1/wants/{want}"), None, None);
    assert_eq!(status, 200);
    let (status, body) = s.call("DELETE", &format!("/api/v1/wants/{want}"), None, None);
    assert_eq!(status, 409, "{body}");
    assert!(body.contains("already_ended"), "{body}");
    let (status, body) = s.call("GET", "/api/v1/partitions/a/2020-01-01/status", None, None);
    assert_eq!(status, 404, "{body}");
    assert!(body.contains("%2F"), "{body}");
    let refused = Service::agent()
        .post(&format!("{}/api/v1/partitions/a/2020-01-01/status", s.url))
        .send("")
        .expect("the service answers");
    assert_eq!(refused.status().as_u16(), 405);
    assert_eq!(
        refused.headers().get("allow").and_then(|v| v.to_str().ok()),
        Some("GET,HEAD")
    );
}
