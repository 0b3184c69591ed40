//! Truth at the exits (issue #57): a build's exit code and status say whether every requested
//! partition is live at its end, the same in-process, through a service and in `builds`.

use crate::util::{Project, Service};

/// `raw` is external; `clean` copies it (and fails while the file `fail` exists), `report`
/// copies `clean`.
const GRAPH: &str = r#"
[graph]
name = "exits"
[[dataset]]
name = "raw"
pattern = "raw/{date:date}"
[[job]]
name = "clean"
outputs = ["clean/{date:date}"]
inputs = ["raw/{date}"]
command = ["sh", "-c", "[ ! -e fail ] || { echo 'clean broke'; exit 3; }; mkdir -p data/clean; cat data/raw/$DATABUILD_FIELD_DATE > data/clean/$DATABUILD_FIELD_DATE"]
[[job]]
name = "report"
outputs = ["report/{date:date}"]
inputs = ["clean/{date}"]
command = ["sh", "-c", "mkdir -p data/report; cat data/clean/$DATABUILD_FIELD_DATE > data/report/$DATABUILD_FIELD_DATE"]
"#;

const REPORT: &str = "report/2026-01-01";

/// A project whose report was built, then made stale by new raw bytes, with `clean` broken.
fn stale_with_a_broken_upstream() -> Project {
    let p = Project::new(GRAPH);
    p.file("data/raw/2026-01-01", "one\n");
    p.run(&["build", REPORT]).expect_code(0);
    // A second later, so the file's mtime differs as well as its size.
    std::thread::sleep(std::time::Duration::from_millis(1100));
    p.file("data/raw/2026-01-01", "one and two\n");
    p.file("fail", "");
    let status = p.run(&["--json", "status", REPORT]).json();
    assert_eq!(status[0]["status"], "stale", "{status}");
    p
}

fn assert_failed_build(p: &Project, out: &crate::util::Run) {
    out.expect_code(1);
    let v = out.json();
    assert_eq!(v["status"], "failed", "{v}");
    assert_eq!(v["failed"], serde_json::json!([REPORT]), "{v}");
    let id = v["build_request_id"].as_str().unwrap();
    let listed = p.run(&["--json", "builds", id]).json();
    assert_eq!(listed["status"], "failed", "{listed}");
}

#[test]
fn a_stale_ref_whose_upstream_rebuild_failed_fails_the_build() {
    let p = stale_with_a_broken_upstream();
    let out = p.run(&["--json", "build", REPORT]);
    assert_failed_build(&p, &out);

    let p = stale_with_a_broken_upstream();
    let s = Service::start(&p, &[]);
    let out = p.run(&["--server", s.url.as_str(), "--json", "build", REPORT]);
    assert_failed_build(&p, &out);
    let id = out.json()["build_request_id"].as_str().unwrap().to_string();
    let (code, detail) = s.get(&format!("/api/v1/builds/{id}"));
    assert_eq!(
        (code, &detail["status"]),
        (200, &serde_json::json!("failed"))
    );
}
