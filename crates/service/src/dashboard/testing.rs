//! What the dashboard's unit tests share: a service over a small graph and an empty event log in
//! a temporary directory, the body of a response as text, and answers built from JSON.

use std::sync::Arc;

use axum::response::Response;
use databuild_exec::{Engine, EngineConfig};

use crate::guard::Access;
use crate::{AppState, ServeConfig};

/// A graph of a dated job, so that dataset pages have a date field to draw, and a job of two
/// outputs reading it. Each job writes a line into each of its outputs (`DATABUILD_OUTPUTS` is a
/// JSON list of refs).
const GRAPH: &str = r#"
[graph]
name = "tiny"

[[job]]
name = "daily"
outputs = ["daily/date={date:date}"]
command = ["sh", "-c", '''
for r in $(printf %s "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr , ' '); do
  mkdir -p "$DATABUILD_DATA_DIR/${r%/*}" && echo 1 > "$DATABUILD_DATA_DIR/$r"
done''']
version = "1"

[[job]]
name = "pair"
outputs = ["left/date={date:date}", "right/date={date:date}"]
inputs = ["daily/date={date}"]
command = ["sh", "-c", '''
for r in $(printf %s "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr , ' '); do
  mkdir -p "$DATABUILD_DATA_DIR/${r%/*}" && echo 1 > "$DATABUILD_DATA_DIR/$r"
done''']
version = "1"
"#;

/// A service's state, and the directory its event log is in (removed when dropped).
pub(super) struct Service {
    pub(super) state: Arc<AppState>,
    _dir: tempfile::TempDir,
}

/// A service over [`GRAPH`] and an empty log, guarded as `access` says.
pub(super) fn service(access: Access) -> Service {
    let dir = tempfile::tempdir().expect("a temporary directory");
    let graph = databuild_core::Graph::parse(GRAPH, "databuild.toml").expect("the graph parses");
    let store = databuild_log::open("sqlite:events.db", dir.path()).expect("the log opens");
    let engine = Engine::new(
        graph,
        dir.path().to_path_buf(),
        dir.path().join("data"),
        store.into(),
        EngineConfig::default(),
    );
    let executor = Arc::from(engine.executor());
    let config = ServeConfig {
        access,
        ..Default::default()
    };
    Service {
        state: Arc::new(AppState::new(Arc::new(engine), executor, config)),
        _dir: dir,
    }
}

/// Prod's environment of `service`: what a page is in when none is chosen.
pub(super) fn prod(service: &Service) -> crate::environment::Env {
    crate::environment::Env::prod(&service.state)
}

/// A service open to all: no token.
pub(super) fn open_service() -> Service {
    service(Access::default())
}

/// A service guarded by the write token `secret`.
pub(super) fn guarded_service() -> Service {
    service(Access {
        token: Some("secret".into()),
        ..Default::default()
    })
}

/// Builds `refs` as the dashboard's build form does, and waits (up to a minute) for the build to
/// end; returns its id.
pub(super) async fn build(service: &Service, refs: &[&str]) -> String {
    let request = crate::ops::BuildRequest {
        partitions: refs.iter().map(|r| r.to_string()).collect(),
        force: false,
        keep_going: false,
        allow_stale: false,
        parallel: None,
        max_runs: None,
    };
    let id = crate::ops::start_build(&service.state, &prod(service), request)
        .await
        .expect("the build starts");
    wait_for_the_end(service, &id).await;
    id
}

/// Waits (up to a minute) for build `id` to end.
pub(super) async fn wait_for_the_end(service: &Service, id: &str) {
    use databuild_log::{state::is_terminal, Kind};
    for _ in 0..600 {
        let build = crate::engine_api::build(&service.state.engine, id).expect("the build");
        if is_terminal(Kind::BuildRequest, build.status) {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    panic!("build {id} did not end within a minute");
}

/// A response's body, as text.
pub(super) async fn text(response: Response) -> String {
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("a body");
    String::from_utf8(bytes.to_vec()).expect("UTF-8")
}

/// An answer from its JSON: the answers derive no `Default`, and JSON names only what a test
/// needs (absent options are `None`).
pub(super) fn answer<T: serde::de::DeserializeOwned>(json: serde_json::Value) -> T {
    serde_json::from_value(json).expect("the answer's JSON")
}

/// A job run with its id, job, status, outputs and inputs; nothing else recorded.
pub(super) fn job_run(
    id: &str,
    job: &str,
    status: &str,
    outputs: &[&str],
    inputs: &[&str],
) -> databuild_exec::answers::JobRun {
    answer(serde_json::json!({
        "job_run_id": id, "job": job, "status": status, "outputs": outputs, "inputs": inputs,
        "args": [], "env": {}, "input_versions": {},
    }))
}
