//! Schemathesis against a real `databuild serve` on a real socket: every operation of the served
//! OpenAPI document is called with generated requests (examples, coverage, fuzzing and stateful
//! sequences), and every answer must match its documented status, content type and schema, with
//! no 5xx; and a warning that the document and the service disagree (`missing_deserializer`,
//! `method_not_allowed`, ...) fails it too. `./test.sh` installs schemathesis into a venv, sets `DATABUILD_SCHEMATHESIS` to it and
//! runs this test, which is `#[ignore]`d (and fails without schemathesis when asked for).

use std::path::PathBuf;
use std::process::Command;

use crate::examples::example;
use crate::util::Service;

const TOKEN: &str = "schemathesis-write-token";

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

#[test]
#[ignore = "needs schemathesis (DATABUILD_SCHEMATHESIS); ./test.sh installs it and runs it"]
fn every_documented_endpoint_answers_as_its_schema_says() {
    let st = schemathesis();
    // A throwaway project (its own data dir and log) with sources, tables and jobs; one build and
    // one want so that listings have something in them.
    let p = example("orders");
    p.run(&["want", "revenue/date=2020-01-01", "--sla", "1h"])
        .expect_code(0);
    let s = Service::start(
        &p,
        &[
            ("DATABUILD_TOKEN", TOKEN),
            ("ORDERS_WEBHOOK_SECRET", "a-secret"),
        ],
    );
    // A warning that the document and the service disagree fails the run as a failure does (an
    // answer no deserializer reads, a method or regex the document gets wrong, ...). Not
    // `validation_mismatch` (every generated request refused) nor `missing_test_data` (every
    // generated id unknown): for the operations that take refs, SQL or ids, acceptance depends
    // on the graph, the statement's meaning or the log's contents, which no schema can say (the
    // reason `positive_data_acceptance` is excluded below); nor `missing_auth`: a webhook's
    // body must be signed with its source's secret, which schemathesis cannot do.
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
    let mut config = String::from(
        "[warnings]\nfail-on = [\"base_url_mismatch\", \"missing_deserializer\", \"unused_openapi_auth\", \"unsupported_regex\", \"method_not_allowed\", \"unresolvable_reference\", \"dictionary_mismatch\", \"timeout_units\"]\n",
    );
    for (path, id) in [
        ("/api/v1/builds/{id}/events/stream", &build),
        ("/api/v1/builds/{id}/summary", &build),
        ("/api/v1/job-runs/{id}/log/chunk", &run),
        ("/api/v1/job-runs/{id}", &run),
    ] {
        config.push_str(&format!(
            "\n[[operations]]\ninclude-path = \"{path}\"\nparameters = {{ \"path.id\" = \"{id}\" }}\n"
        ));
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
    assert!(
        out.status.success(),
        "schemathesis found failures:\n{report}"
    );
}
