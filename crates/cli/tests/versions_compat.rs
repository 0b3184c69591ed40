//! A log written by the release before versions followed the code and the bytes (databuild
//! 917ebb7, `tests/fixtures/log_917ebb7`) opens with this binary and answers as it did: what it
//! recorded live is live, and a build of it runs nothing (no mass rebuild on upgrade); the first
//! rebuild of one of its partitions with the same bytes leaves its readers fresh.

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use crate::util::Project;
use crate::versions_bytes::runs_of;

/// The partitions the fixture's build made live.
const BUILT: [&str; 6] = [
    "clean/2026-01-01",
    "clean/2026-01-02",
    "agg/2026-01-01",
    "agg/2026-01-02",
    "report/2026-01-01",
    "report/2026-01-02",
];

/// A copy of the fixture, its external files given back the modification time the old log
/// recorded for them (a copy gets a new one, which would be new external data).
pub(crate) fn old_project() -> Project {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/log_917ebb7");
    let p = Project::new("");
    copy_all(&fixture, p.path());
    let recorded = UNIX_EPOCH + Duration::from_secs(1_767_398_400); // 2026-01-03T00:00:00Z
    for day in ["2026-01-01", "2026-01-02"] {
        let file = std::fs::File::options()
            .write(true)
            .open(p.path().join("data/flights").join(day))
            .unwrap();
        file.set_modified(recorded).unwrap();
    }
    p
}

fn copy_all(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_all(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

#[test]
fn a_log_of_the_previous_release_answers_as_it_did() {
    all_live(&old_project());
}

#[test]
fn a_build_over_a_log_of_the_previous_release_runs_nothing() {
    let p = old_project();
    let out = p.run(&["--json", "build", "report/2026-01-01", "report/2026-01-02"]);
    out.expect_code(0);
    let summary = out.json();
    assert_eq!(summary["status"], "completed", "{summary}");
    assert_eq!(summary["counts"]["built"], 0, "{summary}");
    assert_eq!(
        std::fs::read_to_string(p.path().join("data/report/2026-01-02")).unwrap(),
        "flights on 2026-01-02: 1\n"
    );
}

fn all_live(p: &Project) {
    let mut args = vec!["--json", "status"];
    args.extend(BUILT);
    let out = p.run(&args);
    out.expect_code(0);
    for answer in out.json().as_array().unwrap() {
        assert_eq!(answer["status"], "live", "{answer}");
    }
}

/// The first rebuild after an upgrade of a partition whose old version is a recipe version: its
/// old data is hashed, found the same, and its readers stay fresh (no mass rebuild downstream).
#[test]
fn a_forced_rebuild_over_a_legacy_version_with_the_same_bytes_keeps_downstream() {
    let p = old_project();
    let out = p.run(&["--json", "build", "--force", "clean/2026-01-01"]);
    out.expect_code(0);
    let forced = out.json();
    assert_eq!(forced["counts"]["built"], 1, "{forced}");
    assert_eq!(forced["counts"]["unchanged"], 1, "{forced}");
    all_live(&p);
    let out = p.run(&["--json", "build", "report/2026-01-01", "report/2026-01-02"]);
    out.expect_code(0);
    let after = out.json();
    assert_eq!(after["counts"]["built"], 0, "{after}");
}

#[test]
fn a_taint_over_a_legacy_log_reruns_only_the_reader_whose_bytes_are_the_same() {
    let p = old_project();
    p.run(&["taint", "flights/2026-01-01", "--reason", "re-delivered"])
        .expect_code(0);
    let out = p.run(&["--json", "build", "report/2026-01-01"]);
    out.expect_code(0);
    let after = out.json();
    let id = after["build_request_id"].as_str().unwrap();
    assert_eq!(after["counts"]["built"], 1, "{after}");
    assert_eq!(after["counts"]["kept"], 2, "{after}");
    let run = |job: &str, status: &str, message: &str| {
        (job.to_string(), status.to_string(), message.to_string())
    };
    assert_eq!(
        runs_of(&p, id),
        [
            run("agg", "skipped", "its inputs came out unchanged"),
            run("clean", "completed", "rebuilt, unchanged"),
            run("report", "skipped", "its inputs came out unchanged"),
        ]
    );
    all_live(&p);
}
