//! Wrong input exits 2 and one bad entry stays local (issue #57, point 8): `status` of a ref no
//! job or dataset produces, or whose typed field does not parse, names it (and the closest
//! pattern) and exits 2, the other refs still answering; a config that fails for one ref makes
//! that ref's answer an error with the config's message, and the others still answer.

use crate::util::{Project, Service};

/// `c` is a config job whose config fails for the ref named in the file `bad`.
const GRAPH: &str = r#"
[graph]
name = "exits_input"
[[dataset]]
name = "raw"
pattern = "raw/{date:date}"
[[job]]
name = "clean"
outputs = ["clean/{date:date}"]
inputs = ["raw/{date}"]
command = ["sh", "-c", "mkdir -p data/clean; cat data/raw/$DATABUILD_FIELD_DATE > data/clean/$DATABUILD_FIELD_DATE"]
[[job]]
name = "c"
outputs = ["c/{n:int}"]
config = ["sh", "config.sh"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/c && echo x > $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')"]
"#;

const CONFIG: &str = r#"out=""
for r in "$@"; do
  if [ -e bad ] && [ "$r" = "$(cat bad)" ]; then echo "config cannot read $r" >&2; exit 1; fi
  out="$out${out:+,}{\"outputs\": [\"$r\"], \"inputs\": []}"
done
printf '{"configs": [%s]}' "$out"
"#;

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file("config.sh", CONFIG);
    p.file("data/raw/2026-01-01", "one\n");
    p
}

#[test]
fn status_of_an_unknown_ref_exits_2_naming_it_and_the_closest_pattern() {
    let p = project();
    p.run(&["build", "clean/2026-01-01"]).expect_code(0);

    let out = p.run(&["status", "clean/2026-01-01", "clen/2026-01-01"]);
    out.expect_code(2);
    assert!(out.stdout.contains("clean/2026-01-01"), "{}", out.stdout);
    assert!(
        out.stdout.contains("live"),
        "the good ref answers: {}",
        out.stdout
    );
    assert!(
        out.stderr.contains("`clen/2026-01-01`")
            && out.stderr.contains("closest pattern: `clean/{date:date}`"),
        "{}",
        out.stderr
    );

    let v = p
        .run(&["--json", "status", "clean/2026-01-01", "clen/2026-01-01"])
        .expect_code(2)
        .json();
    assert_eq!(v[0]["status"], "live", "{v}");
    assert!(v[0].get("error").is_none(), "{v}");
    assert_eq!(v[1]["error"]["kind"], "unknown", "{v}");

    let out = p.run(&["status", "clean/2026-13-01"]);
    out.expect_code(2);
    assert!(out.stderr.contains("not a valid date"), "{}", out.stderr);

    let out = p.run(&["explain", "clen/2026-01-01"]);
    out.expect_code(2);
    assert!(out.stderr.contains("clen/2026-01-01"), "{}", out.stderr);
}

#[test]
fn a_config_failing_for_one_ref_fails_that_ref_alone() {
    let p = project();
    p.run(&["build", "c/1", "c/2"]).expect_code(0);
    p.file("bad", "c/2");

    let check = |server: Option<&str>| {
        let mut args = match server {
            Some(url) => vec!["--server", url],
            None => vec![],
        };
        args.extend(["--json", "status", "c/1", "c/2"]);
        let out = p.run(&args);
        out.expect_code(2);
        let v = out.json();
        assert_eq!(v[0]["status"], "live", "{v}");
        assert!(v[0].get("error").is_none(), "{v}");
        assert_eq!(v[1]["error"]["kind"], "config_failed", "{v}");
        let message = v[1]["error"]["message"].as_str().unwrap();
        assert!(message.contains("config cannot read c/2"), "{v}");

        let mut args = match server {
            Some(url) => vec!["--server", url],
            None => vec![],
        };
        args.extend(["explain", "c/1"]);
        p.run(&args).expect_code(0);
        args.pop();
        args.push("c/2");
        let out = p.run(&args);
        out.expect_code(2);
        assert!(
            out.stderr.contains("config cannot read c/2"),
            "{}",
            out.stderr
        );
    };
    check(None);
    let s = Service::start(&p, &[]);
    check(Some(s.url.as_str()));
}

/// The per-ref error is what `status` tells a user; the engine's own readers never take a ref
/// whose config fails for live: a want of it is not satisfied.
#[test]
fn a_want_whose_config_fails_is_not_satisfied() {
    let p = project();
    p.run(&["build", "c/1", "c/2"]).expect_code(0);
    p.file("bad", "c/2");
    let s = Service::start(&p, &[("DATABUILD_WANT_PROBE_INTERVAL", "0.2")]);
    let want = |r: &str| {
        let (code, v) = s.post("/api/v1/wants", &serde_json::json!({ "partitions": [r] }));
        assert_eq!(code, 201, "{v}");
        v["want_id"].as_str().unwrap().to_string()
    };
    // From the list, which reads the log alone (a want's detail re-reads its refs' status).
    let state = |id: &str| {
        let (code, v) = s.get("/api/v1/wants?all=true");
        assert_eq!(code, 200, "{v}");
        let wants = v["wants"].as_array().unwrap().clone();
        wants.into_iter().find(|w| w["want_id"] == id).unwrap()["status"].clone()
    };
    let good = want("c/1");
    crate::util::eventually(
        std::time::Duration::from_secs(10),
        "the want of c/1 is satisfied",
        || (state(&good) == "satisfied").then_some(()),
    );
    let bad = want("c/2");
    std::thread::sleep(std::time::Duration::from_millis(1500));
    let status = state(&bad);
    assert!(status.is_string(), "{status}");
    assert_ne!(status, "satisfied");
}

/// `builds ID` shows `--limit` rows of its partitions and of its runs (default 20), saying how to
/// see the rest (#57.10a).
#[test]
fn builds_id_obeys_its_limit() {
    let p = project();
    for d in 1..=30 {
        p.file(&format!("data/raw/2026-01-{d:02}"), "x\n");
    }
    p.run(&["build", "clean/{2026-01-01..2026-01-30}"])
        .expect_code(0);
    let rows = |out: &crate::util::Run, prefix: &str| {
        out.stdout
            .lines()
            .filter(|l| l.trim_start().starts_with(prefix))
            .count()
    };
    let out = p.run(&["builds", "last"]);
    out.expect_code(0);
    assert_eq!(rows(&out, "clean/"), 20, "{}", out.stdout);
    assert!(
        out.stdout.contains("the newest 20 of 30 runs"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout
            .contains("--partitions --after 'clean/2026-01-20'"),
        "{}",
        out.stdout
    );
    let out = p.run(&["builds", "last", "--limit", "5"]);
    assert_eq!(rows(&out, "clean/"), 5, "{}", out.stdout);
    assert!(
        out.stdout.contains("the newest 5 of 30 runs"),
        "{}",
        out.stdout
    );
    let out = p.run(&["builds", "last", "--limit", "0"]);
    assert_eq!(rows(&out, "clean/"), 30, "{}", out.stdout);
}

/// "(+N more)" is the true remainder, also past the 100 refs an answer lists (#57.10c).
#[test]
fn more_counts_the_true_remainder() {
    let p = project();
    let out = p.run(&["analyze", "clean/{2026-02-01..2026-05-31}"]);
    out.expect_code(2);
    assert!(
        out.stdout.contains("120 partitions cannot be built until")
            && out.stdout.contains("(+115 more)"),
        "{}",
        out.stdout
    );
}

/// `analyze` counts an external input present as present, not as a live partition it skipped
/// (#57.10b); the same through a service.
#[test]
fn analyze_counts_external_inputs_as_present_not_skipped() {
    let p = project();
    let s = Service::start(&p, &[]);
    for server in [None, Some(s.url.as_str())] {
        let mut args: Vec<&str> = server.map(|u| vec!["--server", u]).unwrap_or_default();
        args.extend(["analyze", "clean/2026-01-01"]);
        let out = p.run(&args);
        out.expect_code(0);
        assert!(
            out.stdout.contains(
                "1 job run for 1 requested partition: 0 skipped (live), 1 external input present,"
            ),
            "{}",
            out.stdout
        );
        let mut args: Vec<&str> = server.map(|u| vec!["--server", u]).unwrap_or_default();
        args.extend(["--json", "analyze", "clean/2026-01-01"]);
        let v = p.run(&args).json();
        assert_eq!(v["inputs_present"], 1, "{v}");
        assert_eq!(v["skipped"], serde_json::json!(["raw/2026-01-01"]), "{v}");
    }
}

/// A failed attempt that was retried and then succeeded is not a failure of the build: `builds
/// ID`'s progress counts what the build's summary counts (#57.10f); one failing every attempt
/// counts once.
#[test]
fn a_retried_attempt_is_not_a_failed_run_of_the_build() {
    let p = Project::new(
        r#"
[graph]
name = "retried"
[[job]]
name = "flaky"
outputs = ["flaky/{n:int}"]
retries = 1
command = ["sh", "-c", "if [ ! -e tried-$DATABUILD_FIELD_N ]; then touch tried-$DATABUILD_FIELD_N; echo first; exit 1; fi; [ ! -e always ] || exit 1; mkdir -p data/flaky; echo x > data/flaky/$DATABUILD_FIELD_N"]
"#,
    );
    let out = p.run(&["--json", "build", "flaky/1"]);
    out.expect_code(0);
    let v = p.run(&["--json", "builds", "last"]).json();
    assert_eq!(v["progress"]["failed"], 0, "{v}");
    assert_eq!(v["progress"]["jobs"][0]["failed"], 0, "{v}");
    let text = p.run(&["builds", "last"]).stdout;
    assert!(text.contains(" 0 failed,"), "{text}");

    p.file("always", "");
    p.run(&["--json", "build", "flaky/2"]).expect_code(1);
    let v = p.run(&["--json", "builds", "last"]).json();
    assert_eq!(
        v["progress"]["failed"], 1,
        "two attempts, one failed run: {v}"
    );
}

/// A job that wrote its output and removed it before it ended is told so truly, not that it
/// "did not write" it (#57.10g).
#[test]
fn an_output_written_then_removed_is_said_so() {
    let p = Project::new(
        r#"
[graph]
name = "removed"
[[job]]
name = "w"
outputs = ["w/{n:int}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/w; echo x > $DATABUILD_OUTPUT_DIR/w/$DATABUILD_FIELD_N; [ ! -e remove ] || rm $DATABUILD_OUTPUT_DIR/w/$DATABUILD_FIELD_N"]
"#,
    );
    p.run(&["build", "w/1"]).expect_code(0);
    p.file("remove", "");
    for args in [
        vec!["--json", "build", "w/1", "--force"],
        vec!["--json", "build", "w/2"],
    ] {
        let out = p.run(&args);
        out.expect_code(1);
        let v = out.json();
        let message = v["failures"][0]["message"].as_str().unwrap_or_default();
        assert!(
            message.contains("is not in its output dir")
                && message.contains("removed it before it ended")
                && !message.contains("did not write"),
            "{v}"
        );
    }
}
