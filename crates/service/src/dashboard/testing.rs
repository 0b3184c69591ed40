//! What the dashboard's unit tests share: a service over a small graph and an empty event log in
//! a temporary directory, the body of a response as text, and answers built from JSON.

use std::sync::Arc;

use axum::response::Response;
use databuild_exec::{Engine, EngineConfig};

use crate::guard::Access;
use crate::{AppState, ServeConfig};

/// A graph of one dated job, so that dataset pages have a date field to draw.
const GRAPH: &str = r#"
[graph]
name = "tiny"

[[job]]
name = "daily"
outputs = ["daily/date={date:date}"]
command = ["true"]
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
