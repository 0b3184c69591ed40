//! Schemathesis against a real `databuild serve` on a real socket: every operation of the served
//! OpenAPI document is called with generated requests (examples, coverage, fuzzing and stateful
//! sequences), and every answer must match its documented status, content type and schema, with
//! no 5xx; and any warning fails it too: that the document and the service disagree
//! (`missing_deserializer`, `method_not_allowed`, ...), or that valid requests were all refused
//! (`validation_mismatch`) or all unknown (`missing_test_data`). `./test.sh` installs
//! schemathesis into a venv, sets `DATABUILD_SCHEMATHESIS` to it and runs this test, which is
//! `#[ignore]`d (and fails without schemathesis when asked for).

use std::path::PathBuf;
use std::process::Command;

use crate::examples::example;
use crate::util::Service;

const TOKEN: &str = "schemathesis-write-token";

/// Added to the orders example: a source that takes unsigned text, so that webhook calls reach
/// its ingest (schemathesis cannot sign a body with the orders source's secret), and a check of
/// daily revenue, so that `POST /partitions/check` has something to run.
const MORE_GRAPH: &str = r#"
[[source]]
name = "notes"
kind = "webhook"
retention = "7d"
body_format = "text"
[[check]]
name = "revenue_written"
applies_to = "daily_revenue"
command = ["sh", "-c", "test -e \"$DATABUILD_PARTITION_PATH\""]
"#;

/// `DATABUILD_SCHEMATHESIS`, else a `schemathesis` on the PATH.
fn schemathesis() -> PathBuf {
    let given = std::env::var_os("DATABUILD_SCHEMATHESIS").map(PathBuf::from);
    let found = given.or_else(|| {
        Command::new("schemathesis")
            .arg("--version")
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|_| PathBuf::from("schemathesis"))
    });
    found.expect("needs schemathesis: DATABUILD_SCHEMATHESIS is not set and none is on the PATH (./test.sh installs it)")
}

/// The builds, runs, wants and partitions given to the operations that read them are prod's: in
/// another environment (the document lists `dev`) they are unknown, a 404 before anything else.
const PROD: &str = r#""query.env" = "prod""#;

#[test]
#[ignore = "needs schemathesis (DATABUILD_SCHEMATHESIS); ./test.sh installs it and runs it"]
fn every_documented_endpoint_answers_as_its_schema_says() {
    let st = schemathesis();
    // A throwaway project (its own data dir and log) with sources, tables and jobs; one build and
    // one want so that listings have something in them.
    let p = example("orders");
    let graph = std::fs::read_to_string(p.path().join("databuild.toml")).unwrap();
    p.file("databuild.toml", &format!("{graph}{MORE_GRAPH}"));
    let want = p
        .run(&["--json", "want", "revenue/date=2020-01-01", "--sla", "1h"])
        .expect_code(0)
        .json();
    let want = want["want_id"]
        .as_str()
        .unwrap_or_else(|| panic!("a want's id: {want}"))
        .to_string();
    // An environment beside prod, which the document lists for every `env` and environment path,
    // made from prod (a promotion into dev), and promoted back: each has a change to roll back.
    p.run(&["env", "create", "dev", "--from", "prod"])
        .expect_code(0);
    p.run(&["env", "promote", "dev"]).expect_code(0);
    let s = Service::start(
        &p,
        &[
            ("DATABUILD_TOKEN", TOKEN),
            ("ORDERS_WEBHOOK_SECRET", "a-secret"),
        ],
    );
    // One build, whose id (and its first run's) the operations that read a build or a run are
    // given: generated ids are all unknown (a 404 before anything else is looked at), and the
    // answers past that (the event stream's events, a log chunk at any offset) go unchecked.
    // One order today, the day sealed, so that its revenue can be built.
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let today = chrono::DateTime::from_timestamp(secs as i64, 0)
        .unwrap()
        .date_naive()
        .to_string();
    let order =
        format!(r#"[{{"order_id": 1, "customer": "a", "amount": 3, "placed": "{today}"}}]"#);
    let status = Service::agent()
        .post(&format!("{}/api/v1/webhooks/orders", s.url))
        .header(
            "X-DataBuild-Signature",
            databuild_service::sources::sign("a-secret", order.as_bytes()),
        )
        .send(&order)
        .expect("the service answers")
        .status()
        .as_u16();
    assert_eq!(status, 200);
    let (status, body) = s.call(
        "POST",
        "/api/v1/sources/orders/seal",
        Some(&format!(r#"{{"through": "{today}"}}"#)),
        Some(TOKEN),
    );
    assert_eq!(status, 200, "{body}");
    let (status, body) = s.call(
        "POST",
        "/api/v1/builds",
        Some(&format!(r#"{{"partitions": ["revenue/date={today}"]}}"#)),
        Some(TOKEN),
    );
    assert_eq!(status, 202, "{body}");
    let build: serde_json::Value = serde_json::from_str(&body).unwrap();
    let build = build["build_request_id"].as_str().unwrap().to_string();
    let detail = s.wait_for_build(&build);
    let run = detail["job_runs"][0]["job_run_id"]
        .as_str()
        .unwrap_or_else(|| panic!("the build ran a job: {detail}"))
        .to_string();
    // Any warning fails the run as a failure does: an answer no deserializer reads, a method
    // or regex the document gets wrong, and every generated request refused
    // (`validation_mismatch`) or unknown (`missing_test_data`). Which refs, ids, tables and SQL
    // exist depends on the graph and the log, which no schema can say: the operations that take
    // them are given real ones below, so that valid requests reach what they ask for.
    let mut config = String::from("[warnings]\nfail-on = true\n");
    let built = format!("revenue/date={today}");
    let refs = format!(r#""body.partitions" = ["{built}"]"#);
    // By the path's template (a regex: every operation under it), the values its requests take.
    let overrides = [
        (
            r"^/api/v1/builds/\\{id\\}",
            format!(r#""path.id" = "{build}", {PROD}"#),
        ),
        (
            r"^/api/v1/job-runs/\\{id\\}",
            format!(r#""path.id" = "{run}", {PROD}"#),
        ),
        (
            r"^/api/v1/wants/\\{id\\}$",
            format!(r#""path.id" = "{want}", {PROD}"#),
        ),
        (
            r"^/api/v1/partitions/\\{partition_ref\\}/",
            format!(r#""path.partition_ref" = "{built}", {PROD}"#),
        ),
        (
            r"^/api/v1/jobs/\\{name\\}",
            r#""path.name" = "daily_revenue""#.to_string(),
        ),
        (
            r"^/api/v1/sources/\\{name\\}",
            r#""path.name" = "orders""#.to_string(),
        ),
        // A metric over a job the graph has (any other pattern is a 404).
        (
            r"^/api/v1/metrics$",
            format!(r#""query.pattern" = "daily_revenue", {PROD}"#),
        ),
        (r"^/api/v1/analyze$", refs.clone()),
        (r"^/api/v1/builds$", refs.clone()),
        (r"^/api/v1/partitions/check$", refs.clone()),
        (r"^/api/v1/partitions/taint", refs.clone()),
        (r"^/api/v1/wants$", refs),
        (
            r"^/api/v1/sql$",
            r#""body.query" = "SELECT count(*) FROM events""#.to_string(),
        ),
        (
            r"^/api/v1/tables/\\{name\\}/promote$",
            r#""path.name" = "orders", "body.version" = 1"#.to_string(),
        ),
        (
            r"^/api/v1/webhooks/\\{source\\}$",
            r#""path.source" = "notes""#.to_string(),
        ),
    ];
    // Dropping an environment happens once: fuzzed, every later drop is a 404
    // (`environments_service` tests it).
    config.push_str(
        "\n[[operations]]\ninclude-path-regex = \"^/api/v1/environments/\\\\{name\\\\}$\"\nenabled = false\n",
    );
    for (path, parameters) in overrides {
        config.push_str(&format!(
            "\n[[operations]]\ninclude-path-regex = \"{path}\"\nparameters = {{ {parameters} }}\n"
        ));
        // Not the check's coverage phase, which takes a body's values from the document, never
        // from here: the document's example ref is never built in this project, so a check of
        // it is refused (409), as are the coverage's made-up refs (400); fuzzing checks `built`.
        if path.contains("check") {
            config.push_str("phases = { coverage = { enabled = false } }\n");
        }
    }
    let config = p.file("schemathesis.toml", &config);
    let out = Command::new(&st)
        .current_dir(p.path())
        .arg("--config-file")
        .arg(&config)
        .args([
            "run",
            &format!("{}/api/v1/openapi.json", s.url),
            "--header",
            &format!("Authorization: Bearer {TOKEN}"),
            "--max-examples",
            "10",
            // One worker: hypothesis describes its strategies through `ast`, which is not
            // thread-safe on Python 3.11 (a "recursion depth mismatch" error with two).
            "--workers",
            "1",
            "--request-timeout",
            "20",
            // Whether a ref is valid depends on the graph (something must produce it) and on its
            // jobs' config executables, which no schema can say: a request the schema allows
            // may rightly be refused with a 400. Every other check runs.
            "--exclude-checks",
            "positive_data_acceptance",
            "--generation-database",
            "none",
        ])
        .env("NO_COLOR", "1")
        .output()
        .expect("schemathesis runs");
    let report = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    // Seen with --no-capture.
    eprintln!("{report}");
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{report}"
    );
    // Whatever a later schemathesis makes of `fail-on`: a warnings section is a failure here.
    assert!(
        !report.contains("= WARNINGS ="),
        "schemathesis warned:\n{report}"
    );
}
