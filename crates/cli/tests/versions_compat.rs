//! A log written by the release before versions followed the code and the bytes (databuild
//! 917ebb7, `tests/fixtures/log_917ebb7`) opens with this binary and answers as it did: what it
//! recorded live is live, and a build of it runs nothing (no mass rebuild on upgrade).

use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use crate::util::Project;

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
    let p = old_project();
    let mut args = vec!["--json", "status"];
    args.extend(BUILT);
    let out = p.run(&args);
    out.expect_code(0);
    for answer in out.json().as_array().unwrap() {
        assert_eq!(answer["status"], "live", "{answer}");
    }
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
