//! Every status, summary and exit code says exactly what the log says: retries and missing
//! inputs are not failures, and summaries name what failed. In-process and through a service.

use crate::util::{Project, Service};

/// `flaky` fails its first two attempts, noting each attempt it saw; `needs` asks for `dep/N`
/// at run time; `bad` always fails, after a last log line naming itself.
const GRAPH: &str = r#"
[graph]
name = "truth"
[[job]]
name = "flaky"
outputs = ["flaky/{n:int}"]
command = ["sh", "-c", "echo \"$DATABUILD_ATTEMPT\" >> attempts.log; [ \"$DATABUILD_ATTEMPT\" -ge 3 ] || { echo 'not yet'; exit 1; }; mkdir -p data/flaky; touch data/flaky/$DATABUILD_FIELD_N"]
retries = 2
[[job]]
name = "dep"
outputs = ["dep/{n:int}"]
command = ["sh", "-c", "mkdir -p data/dep; touch data/dep/$DATABUILD_FIELD_N"]
[[job]]
name = "needs"
outputs = ["needs/{n:int}"]
command = ["sh", "-c", "if [ -e data/dep/$DATABUILD_FIELD_N ]; then mkdir -p data/needs; touch data/needs/$DATABUILD_FIELD_N; else echo \"DATABUILD_MISSING_DEPS [\\\"dep/$DATABUILD_FIELD_N\\\"]\"; exit 1; fi"]
[[job]]
name = "bad"
outputs = ["bad/{n:int}"]
command = ["sh", "-c", "echo starting; echo \"bad $DATABUILD_FIELD_N gave up\"; exit 4"]
[[job]]
name = "after"
outputs = ["after/{n:int}"]
inputs = ["bad/{n}"]
command = ["sh", "-c", "mkdir -p data/after; touch data/after/$DATABUILD_FIELD_N"]
"#;

fn attempts(p: &Project) -> String {
    std::fs::read_to_string(p.path().join("attempts.log")).unwrap_or_default()
}

/// `build ARGS` in-process, then the same in a fresh project through a service.
fn both_ways(args: &[&str], check: impl Fn(&Project, &crate::util::Run)) {
    let p = Project::new(GRAPH);
    check(&p, &p.run(args));
    let p = Project::new(GRAPH);
    let s = Service::start(&p, &[]);
    let mut remote = vec!["--server", s.url.as_str()];
    remote.extend_from_slice(args);
    check(&p, &p.run(&remote));
}

#[test]
fn a_retried_run_says_so_and_knows_its_attempt() {
    both_ways(&["build", "flaky/1"], |p, out| {
        out.expect_code(0);
        assert!(!out.stderr.contains("FAILED"), "{}", out.stderr);
        assert!(
            out.stderr.contains("(attempt 2 of 3)") && out.stderr.contains("(attempt 3 of 3)"),
            "{}",
            out.stderr
        );
        assert!(
            out.stderr.contains("retrying  flaky  flaky/1"),
            "{}",
            out.stderr
        );
        assert_eq!(attempts(p), "1\n2\n3\n");
    });
    // Each failed attempt says in the log what followed it.
    let p = Project::new(GRAPH);
    p.run(&["build", "flaky/1"]).expect_code(0);
    let out = p.run(&[
        "--json",
        "sql",
        "SELECT json_extract(data, '$.attempt'), json_extract(data, '$.then') FROM events WHERE kind = 'job_run' AND status = 'failed' ORDER BY idx",
    ]);
    assert_eq!(
        out.json()["rows"],
        serde_json::json!([[1, "retry"], [2, "retry"]])
    );
}

#[test]
fn a_run_missing_inputs_waits_for_them_and_is_not_a_failure() {
    both_ways(&["build", "needs/7"], |p, out| {
        out.expect_code(0);
        assert!(!out.stderr.contains("FAILED"), "{}", out.stderr);
        assert!(
            out.stderr.contains("building its missing inputs first"),
            "{}",
            out.stderr
        );
        assert!(p.path().join("data/needs/7").exists());
    });
}

#[test]
fn a_run_that_fails_for_good_still_says_failed() {
    both_ways(&["build", "bad/1"], |_, out| {
        out.expect_code(1);
        assert!(out.stderr.contains("FAILED  bad  bad/1"), "{}", out.stderr);
    });
}

#[test]
fn a_keep_going_summary_names_every_failure_with_its_run_and_log() {
    both_ways(
        &[
            "build",
            "--keep-going",
            "--parallel",
            "2",
            "after/{1..3}",
            "flaky/5",
        ],
        |p, out| {
            out.expect_code(1);
            assert!(
                out.stdout.contains(
                    "1 built, 0 skipped, 0 delegated, 3 failed, 0 cancelled, 3 not started"
                ),
                "{}",
                out.stdout
            );
            for n in 1..=3 {
                assert!(
                    out.stdout
                        .contains(&format!("failed: bad/{n} (job bad, run ")),
                    "{}",
                    out.stdout
                );
                assert!(
                    out.stdout.contains(&format!("| log: bad {n} gave up")),
                    "{}",
                    out.stdout
                );
            }
            assert!(
                out.stdout
                    .contains("reason: 3 job runs failed: `bad/1`, `bad/2`, `bad/3`")
                    || out.stdout.contains("reason: 3 job runs failed:"),
                "{}",
                out.stdout
            );
            assert!(!out.stdout.contains("the build stopped"), "{}", out.stdout);
            let _ = p;
        },
    );
    // The same in --json, in-process and through a service.
    let json_of = |p: &Project, args: &[&str]| {
        let out = p.run(args);
        out.expect_code(1);
        out.json()
    };
    let args = ["--json", "build", "--keep-going", "after/{1..3}", "flaky/5"];
    let local = json_of(&Project::new(GRAPH), &args);
    let p = Project::new(GRAPH);
    let s = Service::start(&p, &[]);
    let mut remote_args = vec!["--server", s.url.as_str()];
    remote_args.extend_from_slice(&args);
    let remote = json_of(&p, &remote_args);
    for v in [&local, &remote] {
        assert_eq!(v["failures"].as_array().unwrap().len(), 3, "{v}");
        let f = &v["failures"][0];
        assert_eq!(f["job"], "bad");
        assert!(f["job_run_id"].as_str().unwrap().len() >= 32, "{f}");
        assert_eq!(f["message"], "the job ended with exit status 4");
        assert!(f["log_tail"].as_str().unwrap().ends_with("gave up"), "{f}");
        let mut not_started: Vec<&str> = v["not_started"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap())
            .collect();
        not_started.sort();
        assert_eq!(not_started, ["after/1", "after/2", "after/3"]);
        assert_eq!(
            v["built"],
            serde_json::json!(["flaky/5"]),
            "retried, then built"
        );
        assert_eq!(v["cancelled"], serde_json::json!([]));
    }
}

#[test]
fn a_fail_fast_stop_counts_what_never_started_apart_from_what_failed() {
    let p = Project::new(GRAPH);
    let out = p.run(&["--json", "build", "--parallel", "1", "bad/1", "dep/{1..4}"]);
    out.expect_code(1);
    let v = out.json();
    assert_eq!(v["failures"].as_array().unwrap().len(), 1, "{v}");
    let not_started = v["not_started"].as_array().unwrap().len();
    let built = v["built"].as_array().unwrap().len();
    assert_eq!(
        built + not_started,
        4,
        "each dep run was built or not started: {v}"
    );
    assert!(
        v["message"].as_str().unwrap().contains("`bad/1` failed"),
        "{v}"
    );
    // A run claimed ahead but never started has no start time, and `runs` says so.
    let rows = p.run(&[
        "--json",
        "sql",
        "SELECT job_run_id, started_at FROM job_runs WHERE status = 'cancelled' AND message LIKE 'not started%'",
    ]);
    let rows = rows.json()["rows"].as_array().unwrap().clone();
    assert!(
        !rows.is_empty(),
        "--parallel 1 claims runs ahead of its slot"
    );
    assert_eq!(
        v["cancelled"],
        serde_json::json!([]),
        "nothing ran to be cancelled: {v}"
    );
    for row in &rows {
        assert!(row[1].is_null(), "{row}");
        let shown = p.run(&["runs", row[0].as_str().unwrap()]);
        assert!(shown.stdout.contains("never started"), "{}", shown.stdout);
        assert!(!shown.stdout.contains("took"), "{}", shown.stdout);
    }
}

/// `w/N` sleeps `$SLEEP` then writes its partition; its version comes from `$VERSION` in the
/// graph file; `bad/N` fails at once.
fn versioned(version: &str) -> String {
    format!(
        r#"
[graph]
name = "versioned"
[[job]]
name = "w"
outputs = ["w/{{n:int}}"]
version = "{version}"
command = ["sh", "-c", "sleep ${{SLEEP:-0}}; mkdir -p data/w; echo $DATABUILD_JOB_RUN_ID > data/w/$DATABUILD_FIELD_N"]
[[job]]
name = "bad"
outputs = ["bad/{{n:int}}"]
command = ["sh", "-c", "exit 3"]
"#
    )
}

/// The `datasets` answer's entry for the job `w`.
fn dataset_w(datasets: &serde_json::Value) -> serde_json::Value {
    datasets["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "w")
        .unwrap()
        .clone()
}

fn statuses(p: &Project, refs: &str) -> Vec<String> {
    let out = p.run(&["--json", "status", refs]);
    out.expect_code(0);
    out.json()
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap().to_string())
        .collect()
}

fn failed_count(p: &Project, dataset: &str) -> u64 {
    let out = p.run(&["--json", "datasets"]);
    out.expect_code(0);
    let v = out.json();
    let d = v["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == dataset)
        .unwrap_or_else(|| panic!("no dataset {dataset}: {v}"))
        .clone();
    assert!(d["partitions"].is_object(), "{d}");
    d["partitions"]["failed"].as_u64().unwrap_or(0)
}

#[test]
fn runs_a_stopped_build_never_started_leave_their_partitions_as_they_were() {
    let p = Project::new(&versioned("1"));
    p.run(&["build", "w/{1..3}"]).expect_code(0);
    // Version 2 makes w/1..3 stale; w/4..6 were never built.
    std::fs::write(p.path().join("databuild.toml"), versioned("2")).unwrap();
    assert_eq!(
        statuses(&p, "w/{1..6}"),
        ["stale", "stale", "stale", "missing", "missing", "missing"]
    );
    // One slot: bad/1 runs first and fails; the runs claimed ahead of the slot never start.
    let out = p.run(&["--json", "build", "--parallel", "1", "bad/1", "w/{1..6}"]);
    out.expect_code(1);
    let v = out.json();
    assert!(!v["not_started"].as_array().unwrap().is_empty(), "{v}");
    let after = statuses(&p, "w/{1..6}");
    for (i, s) in after.iter().enumerate() {
        let expected = if i < 3 { "stale" } else { "missing" };
        assert!(s == expected || s == "live", "w/{}: {s} ({after:?})", i + 1);
    }
    assert_eq!(failed_count(&p, "w"), 0);
    let listed = p.run(&["--json", "partitions", "--status", "failed"]);
    assert!(!listed.stdout.contains("w/"), "{}", listed.stdout);
    p.run(&["check-log"]).expect_code(0);
    // A rerun finishes what was left, building each once.
    std::fs::write(
        p.path().join("databuild.toml"),
        versioned("2").replace(
            "exit 3",
            "mkdir -p data/bad; touch data/bad/$DATABUILD_FIELD_N",
        ),
    )
    .unwrap();
    p.run(&["build", "bad/1", "w/{1..6}"]).expect_code(0);
    assert_eq!(statuses(&p, "w/{1..6}"), ["live"; 6]);
}

#[test]
fn ctrl_c_leaves_stale_partitions_stale_not_failed() {
    let p = Project::new(&versioned("1"));
    p.run(&["build", "w/{1..4}"]).expect_code(0);
    std::fs::write(p.path().join("databuild.toml"), versioned("2")).unwrap();
    let build = p
        .command()
        .args(["--json", "build", "--parallel", "2", "w/{1..4}"])
        .env("SLEEP", "5")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    crate::util::eventually(std::time::Duration::from_secs(10), "a run started", || {
        let v = p.run(&[
            "--json",
            "sql",
            "SELECT count(*) FROM job_runs WHERE status = 'running'",
        ]);
        (v.code == 0 && v.json()["rows"][0][0].as_i64() > Some(0)).then_some(())
    });
    std::thread::sleep(std::time::Duration::from_millis(300));
    let ok = std::process::Command::new("kill")
        .args(["-INT", &build.id().to_string()])
        .status()
        .unwrap()
        .success();
    assert!(ok);
    let out = build.wait_with_output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["status"], "cancelled", "{v}");
    assert!(
        v["failures"].as_array().unwrap().is_empty(),
        "nothing failed: {v}"
    );
    assert!(!v["cancelled"].as_array().unwrap().is_empty(), "{v}");
    assert_eq!(statuses(&p, "w/{1..4}"), ["stale"; 4]);
    assert_eq!(failed_count(&p, "w"), 0);
    p.run(&["check-log"]).expect_code(0);
}

#[test]
fn every_answer_gives_times_in_rfc3339_with_the_exact_ns_beside() {
    let p = Project::new(GRAPH);
    p.run(&["build", "dep/1"]).expect_code(0);
    p.run(&["want", "dep/2", "--sla", "1h"]).expect_code(0);
    let s = Service::start(&p, &[]);
    let is_time = |v: &serde_json::Value, key: &str| {
        let text = v[key].as_str().unwrap_or_else(|| panic!("{key}: {v}"));
        assert!(
            text.len() >= 20 && text.ends_with('Z') && text.as_bytes()[10] == b'T',
            "{key}: {text}"
        );
        assert!(
            v[format!("{key}_ns")].as_i64().unwrap() > 1_600_000_000_000_000_000,
            "{v}"
        );
    };
    let (_, builds) = s.get("/api/v1/builds");
    let build = &builds["builds"][0];
    is_time(build, "created_at");
    is_time(build, "updated_at");
    let local = p.run(&["--json", "builds"]).json();
    is_time(&local["builds"][0], "created_at");
    let id = build["build_request_id"].as_str().unwrap();
    let (_, detail) = s.get(&format!("/api/v1/builds/{id}"));
    for key in ["scheduled_at", "started_at", "ended_at"] {
        is_time(&detail["job_runs"][0], key);
    }
    let (_, wants) = s.get("/api/v1/wants");
    is_time(&wants["wants"][0], "created_at");
    let (_, partitions) = s.get("/api/v1/partitions");
    is_time(&partitions["partitions"][0], "updated_at");
    // The text output reads them too.
    let run = detail["job_runs"][0]["job_run_id"].as_str().unwrap();
    let shown = p.run(&["runs", run]);
    assert!(shown.stdout.contains("took "), "{}", shown.stdout);
    assert!(!shown.stdout.contains("took -"), "{}", shown.stdout);
}

#[test]
fn stale_partitions_are_listed_counted_and_summed_up_everywhere() {
    let p = Project::new(&versioned("1"));
    p.run(&["build", "w/{1..5}"]).expect_code(0);
    std::fs::write(p.path().join("databuild.toml"), versioned("2")).unwrap();
    p.run(&["build", "w/{4..5}"]).expect_code(0);
    let refs_of = |v: &serde_json::Value| -> Vec<String> {
        v["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["ref"].as_str().unwrap().to_string())
            .collect()
    };
    // The CLI lists stale and live apart, with the reason, in pages.
    let stale = p.run(&["--json", "partitions", "--status", "stale"]);
    stale.expect_code(0);
    let v = stale.json();
    assert_eq!(refs_of(&v), ["w/1", "w/2", "w/3"]);
    assert!(
        v["partitions"][0]["reason"]
            .as_str()
            .unwrap()
            .contains("version"),
        "{v}"
    );
    assert_eq!(v["partitions"][0]["status"], "stale");
    let live = p.run(&["--json", "partitions", "--status", "live"]).json();
    assert_eq!(refs_of(&live), ["w/4", "w/5"]);
    // Listed without a status, each shows as `status` says it, stale ones with why.
    let all = p.run(&["--json", "partitions", "--pattern", "w/*"]).json();
    let shown: Vec<(&str, &str)> = all["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["ref"].as_str().unwrap(), p["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        shown,
        [
            ("w/1", "stale"),
            ("w/2", "stale"),
            ("w/3", "stale"),
            ("w/4", "live"),
            ("w/5", "live")
        ],
        "{all}"
    );
    assert_eq!(all["partitions"][0]["reason"], v["partitions"][0]["reason"]);
    let first = p
        .run(&["--json", "partitions", "--status", "stale", "--limit", "2"])
        .json();
    assert_eq!(refs_of(&first), ["w/1", "w/2"]);
    let next = first["next"].as_str().unwrap();
    let second = p
        .run(&[
            "--json",
            "partitions",
            "--status",
            "stale",
            "--limit",
            "2",
            "--after",
            next,
        ])
        .json();
    assert_eq!(refs_of(&second), ["w/3"]);
    // datasets counts them apart; status sums a set up.
    let datasets = p.run(&["--json", "datasets"]).json();
    let w = dataset_w(&datasets);
    assert_eq!(
        w["partitions"],
        serde_json::json!({"live": 2, "stale": 3}),
        "{w}"
    );
    assert_eq!(w["freshness_checked"], true);
    let status = p.run(&["status", "w/{1..6}"]);
    assert!(
        status.stdout.contains("6 refs: 3 stale, 2 live, 1 missing"),
        "{}",
        status.stdout
    );
    // The API and the dashboard, the same.
    let s = Service::start(&p, &[]);
    let (code, api) = s.get("/api/v1/partitions?status=stale");
    assert_eq!(code, 200, "{api}");
    assert_eq!(refs_of(&api), ["w/1", "w/2", "w/3"]);
    let (_, page) = s.get("/partitions?status=stale");
    let page = page.as_str().unwrap().to_string();
    assert!(page.contains("w/3") && !page.contains(">w/4<"), "{page}");
    let (code, bad) = s.get("/api/v1/partitions?status=fresh");
    assert_eq!(code, 400);
    assert!(
        bad["error"]
            .as_str()
            .unwrap()
            .contains("live, stale, building"),
        "{bad}"
    );
    // Asked to check every partition, the same counts, on both sides.
    assert_eq!(p.run(&["--json", "datasets", "--exact"]).json(), datasets);
    let (code, api) = s.get("/api/v1/datasets?exact=true");
    assert_eq!((code, api), (200, datasets.clone()));
    let (code, page) = s.get("/datasets?exact=true");
    let page = page.as_str().unwrap().to_string();
    assert_eq!(code, 200);
    assert!(
        page.contains("3 <span class=\"badge\"") && page.contains(">stale</span>"),
        "{page}"
    );
    // A live partition whose data is gone is counted missing, not live.
    std::fs::remove_file(p.path().join("data/w/5")).unwrap();
    let datasets = p.run(&["--json", "datasets"]).json();
    let w = dataset_w(&datasets);
    assert_eq!(
        w["partitions"],
        serde_json::json!({"live": 1, "stale": 3, "missing": 1}),
        "{w}"
    );
    assert_eq!(w["freshness_checked"], true);
}

/// The text summary counts partitions as `--json`'s `counts` does; the failed runs it names apart
/// (one batch run fails all of its partitions).
#[test]
fn the_text_summary_counts_what_the_json_counts() {
    let p = Project::new(
        r#"
[graph]
name = "g"
[[job]]
name = "a"
outputs = ["a/{k}"]
batch = 3
command = ["sh", "-c", "exit 4"]
"#,
    );
    let text = p.run(&["build", "a/{k1,k2,k3}"]);
    text.expect_code(1);
    assert!(
        text.stdout
            .contains("0 built, 0 skipped, 0 delegated, 3 failed (1 failed run)"),
        "{}",
        text.stdout
    );
    let json = p.run(&["--json", "build", "a/{k1,k2,k3}"]).json();
    assert_eq!(
        (&json["counts"]["failed"], &json["counts"]["failures"]),
        (&3.into(), &1.into()),
        "{json}"
    );
}

/// An external dataset's row in `datasets` says what is there: a file-backed one counts the
/// files matching its pattern in the data dir (`present`, `tainted` while a taint holds, which
/// ends when the data changes); a probed one cannot be listed, and says so (`probed`,
/// `listed: false`). Text, JSON and the dashboard alike.
#[test]
fn datasets_counts_an_externals_files_and_says_probed_for_a_probe() {
    let p = Project::new(
        r#"
[graph]
name = "externals"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}/events.csv"
[[dataset]]
name = "checked"
pattern = "checked/{n:int}"
exists = ["sh", "-c", "exit 0"]
[[dataset]]
name = "empty"
pattern = "empty/{n:int}"
"#,
    );
    for d in 1..=3 {
        p.partition(&format!("raw/2020-01-0{d}/events.csv"));
    }
    // Not the pattern's: another name, a field that does not parse, another folder.
    p.partition("raw/2020-01-04/other.csv");
    p.partition("raw/not-a-date/events.csv");
    p.partition("elsewhere/2020-01-01/events.csv");
    p.run(&["taint", "raw/2020-01-02/events.csv", "--reason", "bad rows"])
        .expect_code(0);
    let row = |name: &str| {
        let v = p.run(&["--json", "datasets"]).json();
        v["datasets"]
            .as_array()
            .unwrap()
            .iter()
            .find(|d| d["name"] == name)
            .unwrap_or_else(|| panic!("no dataset {name}: {v}"))
            .clone()
    };
    let raw = row("raw");
    assert_eq!(
        raw["partitions"],
        serde_json::json!({"present": 2, "tainted": 1})
    );
    assert_eq!(
        (raw["listed"].as_bool(), raw["freshness_checked"].as_bool()),
        (Some(true), Some(true))
    );
    let checked = row("checked");
    assert_eq!(checked["partitions"], serde_json::json!({}));
    assert_eq!(checked["listed"], false);
    assert_eq!(row("empty")["listed"], true);
    let text = p.run(&["datasets"]);
    text.expect_code(0);
    let line = |name: &str| {
        text.stdout
            .lines()
            .find(|l| l.starts_with(name))
            .unwrap_or_else(|| panic!("no row {name}: {}", text.stdout))
            .to_string()
    };
    assert!(
        line("raw").ends_with("2 present, 1 tainted"),
        "{}",
        text.stdout
    );
    assert!(line("checked").ends_with("probed"), "{}", text.stdout);
    assert!(line("empty").ends_with("none present"), "{}", text.stdout);
    // New data ends the taint: all three are present.
    p.file("data/raw/2020-01-02/events.csv", "fixed rows\n");
    assert_eq!(row("raw")["partitions"], serde_json::json!({"present": 3}));
    let s = Service::start(&p, &[]);
    let page = Service::agent()
        .get(&format!("{}/datasets", s.url))
        .call()
        .expect("the page")
        .into_body()
        .read_to_string()
        .expect("text");
    assert!(page.contains("probed"), "{page}");
    assert!(page.contains("none present"), "{page}");
    assert!(page.contains(">present<"), "{page}");
}
