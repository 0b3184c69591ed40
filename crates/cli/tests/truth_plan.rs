//! What planning reports is true: a config job's live partition is stale once its config chooses
//! differently, planning through a config that walks back forever stops with a clear error, and a
//! ref whose typed field does not parse says so. In-process and through a service.

use std::time::{Duration, Instant};

use crate::util::{Project, Service};

/// `report/{date}` reads the newest snapshot of `snap` (its config lists the snapshots) and is
/// called with its number; each config call is noted in `calls.log`.
const SNAPSHOTS: &str = r#"
[graph]
name = "snapshots"
[[dataset]]
name = "snap"
pattern = "snap/{n:int}"
[[job]]
name = "report"
outputs = ["report/{date:date}"]
config = ["sh", "config.sh"]
command = ["sh", "-c", "mkdir -p data/report && echo \"$0\" > data/report/$DATABUILD_FIELD_DATE"]
"#;

const SNAPSHOT_CONFIG: &str = r#"
echo "$@" >> calls.log
latest=$(ls "$DATABUILD_DATA_DIR/snap" | sort -n | tail -1)
printf '{"configs": ['
sep=
for out in "$@"; do
  printf '%s{"outputs": ["%s"], "inputs": [{"ref": "snap/%s"}], "args": ["%s"]}' "$sep" "$out" "$latest" "$latest"
  sep=,
done
printf ']}\n'
"#;

fn calls(p: &Project) -> usize {
    std::fs::read_to_string(p.path().join("calls.log"))
        .unwrap_or_default()
        .lines()
        .count()
}

/// Runs `args` and returns what it printed as JSON, checking that it asked the config once.
fn once(p: &Project, args: &[&str]) -> serde_json::Value {
    let before = calls(p);
    let out = p.run(args);
    out.expect_code(0);
    assert_eq!(calls(p), before + 1, "one config call for {args:?}");
    out.json()
}

#[test]
fn a_config_that_now_picks_a_new_snapshot_makes_its_partition_stale_and_a_build_rebuilds_it() {
    let p = Project::new(SNAPSHOTS);
    p.file("config.sh", SNAPSHOT_CONFIG);
    p.partition("snap/1");
    let r = "report/2024-01-01";
    let v = once(&p, &["--json", "build", r]);
    assert_eq!(v["built"], serde_json::json!([r]));
    let v = once(&p, &["--json", "status", r]);
    assert_eq!(v[0]["status"], "live", "{v}");
    // The config chooses as before: nothing to build.
    let v = once(&p, &["--json", "build", r]);
    assert_eq!(v["built"], serde_json::json!([]), "{v}");
    assert_eq!(v["skipped"], serde_json::json!([r]), "{v}");

    // A new snapshot: the config would now read it.
    p.partition("snap/2");
    let stale = "its config now reads `snap/2` instead of `snap/1`";
    let v = once(&p, &["--json", "status", r]);
    assert_eq!(v[0]["status"], "stale", "{v}");
    assert_eq!(v[0]["reasons"], serde_json::json!([stale]), "{v}");
    let out = p.run(&["status", r]);
    assert!(out.stdout.contains(stale), "{}", out.stdout);
    {
        let s = Service::start(&p, &[]);
        let v = once(&p, &["--server", &s.url, "--json", "status", r]);
        assert_eq!(v[0]["status"], "stale", "{v}");
        assert_eq!(v[0]["reasons"], serde_json::json!([stale]), "{v}");
    }
    let v = once(&p, &["--json", "analyze", r]);
    assert_eq!(v["job_runs"].as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v["job_runs"][0]["inputs"], serde_json::json!(["snap/2"]));
    // `--allow-stale` accepts it as it is, without asking.
    let out = p.run(&["--json", "build", "--allow-stale", r]);
    out.expect_code(0);
    assert_eq!(out.json()["built"], serde_json::json!([]));

    let v = once(&p, &["--json", "build", r]);
    assert_eq!(v["built"], serde_json::json!([r]), "{v}");
    let data = std::fs::read_to_string(p.path().join("data").join(r)).unwrap();
    assert_eq!(data.trim(), "2");
    let v = once(&p, &["--json", "status", r]);
    assert_eq!(v[0]["status"], "live", "{v}");
}

#[test]
fn a_secret_the_config_passes_is_compared_through_the_data_version() {
    let p = Project::new(
        r#"
[graph]
name = "secret"
[[job]]
name = "pull"
outputs = ["pull/{date:date}"]
config = ["sh", "-c", "echo \"$1\" >> calls.log; printf '{\"configs\": [{\"outputs\": [\"%s\"], \"env\": {\"TOKEN\": \"%s\"}}]}' \"$1\" \"$(cat token.txt)\"", "config"]
command = ["sh", "-c", "mkdir -p data/pull && touch data/pull/$DATABUILD_FIELD_DATE"]
"#,
    );
    p.file("token.txt", "one");
    let r = "pull/2024-01-01";
    once(&p, &["--json", "build", r]);
    let v = once(&p, &["--json", "status", r]);
    assert_eq!(v[0]["status"], "live", "{v}");
    p.file("token.txt", "two");
    let v = once(&p, &["--json", "status", r]);
    assert_eq!(v[0]["status"], "stale", "{v}");
    assert_eq!(
        v[0]["reasons"][0],
        "the env its config gives now differs from the run that built it (`TOKEN` not recorded: not in `show_env`)"
    );
    let v = once(&p, &["--json", "build", r]);
    assert_eq!(v["built"], serde_json::json!([r]), "{v}");
    let v = once(&p, &["--json", "status", r]);
    assert_eq!(v[0]["status"], "live", "{v}");
}

#[test]
fn planning_through_a_config_that_reads_its_own_yesterday_stops_within_seconds() {
    let p = Project::new(
        r#"
[graph]
name = "chain"
[[dataset]]
name = "raw"
pattern = "raw/{date:date}"
[[job]]
name = "x"
outputs = ["x/{date:date}"]
config = ["sh", "config.sh"]
command = ["true"]
"#,
    );
    p.file(
        "config.sh",
        r#"
echo "$@" >> calls.log
printf '{"configs": ['
sep=
for out in "$@"; do
  d=${out#x/}
  prev=$(date -u -d "$d - 1 day" +%F)
  printf '%s{"outputs": ["%s"], "inputs": [{"ref": "raw/%s"}, {"ref": "x/%s"}]}' "$sep" "$out" "$d" "$prev"
  sep=,
done
printf ']}\n'
"#,
    );
    p.partition("raw/2024-01-01");
    let start = Instant::now();
    let out = p.run(&["analyze", "x/2024-01-01"]);
    let took = start.elapsed();
    out.expect_code(2);
    eprintln!("planning stopped after {took:?}");
    assert!(took < Duration::from_secs(20), "{took:?}");
    assert!(
        out.stderr.contains("planning called config executables in 200 rounds without reaching live or external data (last: `x/2023-06-15`, asked of job `x`'s config)"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("needs a base case"), "{}", out.stderr);
    assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
    assert_eq!(calls(&p), 200);
    let out = p.run(&["build", "x/2024-01-01"]);
    out.expect_code(2);
    assert!(out.stderr.contains("200 rounds"), "{}", out.stderr);
}

#[test]
fn an_unbounded_template_chain_names_its_job_not_the_dataset_beside_it() {
    let p = Project::new(
        r#"
[graph]
name = "chain"
[[dataset]]
name = "raw"
pattern = "raw/{n:int}"
[[job]]
name = "x"
outputs = ["x/{n:int}"]
inputs = ["raw/{n}", "x/{n-1}"]
command = ["true"]
"#,
    );
    let out = p.run(&["analyze", "x/0"]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("planning went 100000 levels deep without reaching live or external data (last: `x/-100000`, job `x`)"),
        "{}",
        out.stderr
    );
    assert!(!out.stderr.contains("job `raw`"), "{}", out.stderr);
}

const DATED: &str = r#"
[graph]
name = "dated"
[[dataset]]
name = "raw"
pattern = "raw/date={date:date}"
[[job]]
name = "clean"
outputs = ["clean/date={date:date}"]
inputs = ["raw/date={date}"]
command = ["true"]
"#;

#[test]
fn a_date_that_does_not_parse_is_named_as_such_in_the_cli_and_the_service() {
    let p = Project::new(DATED);
    let why = "`2024-13-01` is not a valid date for field `date` in `clean/date=2024-13-01` (job `clean` builds `clean/date={date:date}`)";
    for args in [
        &["analyze", "clean/date=2024-13-01"][..],
        &["build", "clean/date=2024-13-01"],
        &["analyze", "clean/date={2024-12-31,2024-13-01}"],
    ] {
        let out = p.run(args);
        out.expect_code(2);
        assert!(out.stderr.contains(why), "{args:?}: {}", out.stderr);
        assert!(!out.stderr.contains("no job builds"), "{}", out.stderr);
    }
    // The user's input to fix: exit 2, the ref's answer carrying its error (#57).
    let v = p
        .run(&["--json", "status", "raw/date=2024-02-30"])
        .expect_code(2)
        .json();
    assert_eq!(v[0]["status"], "missing");
    assert_eq!(v[0]["error"]["kind"], "invalid_field");
    assert_eq!(
        v[0]["reasons"][0],
        "`2024-02-30` is not a valid date for field `date` in `raw/date=2024-02-30` (dataset `raw` declares `raw/date={date:date}`)"
    );
    // Another shape is still nothing that any job builds.
    let out = p.run(&["analyze", "dirty/date=2024-13-01"]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("no job builds `dirty/date=2024-13-01` and no dataset declares it"),
        "{}",
        out.stderr
    );

    let s = Service::start(&p, &[]);
    for path in ["/api/v1/analyze", "/api/v1/builds"] {
        let (status, v) = s.post(
            path,
            &serde_json::json!({"partitions": ["clean/date=2024-13-01"]}),
        );
        assert_eq!(status, 400, "{path}: {v}");
        assert_eq!(v["error"], why, "{path}: {v}");
    }
    let out = p.run(&["--server", &s.url, "analyze", "clean/date=2024-13-01"]);
    out.expect_code(2);
    assert!(out.stderr.contains(why), "{}", out.stderr);
}

#[test]
fn a_missing_external_input_is_named_alike_by_analyze_and_build() {
    let p = Project::new(DATED);
    let missing = "external partition `raw/date=2024-01-01` of dataset `raw` is not available";
    let out = p.run(&["analyze", "clean/date=2024-01-01"]);
    // One cause, one exit code: not plannable, 2, for analyze and build alike.
    out.expect_code(2);
    assert!(out.stderr.contains(missing), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("needed by job `clean` for `clean/date=2024-01-01`"),
        "{}",
        out.stderr
    );
    // A build's summary (on stdout) gives the reason it failed, and so does its error.
    let out = p.run(&["build", "clean/date=2024-01-01"]);
    out.expect_code(2);
    assert!(out.stdout.contains(missing), "{}", out.stdout);
    assert!(out.stderr.contains(missing), "{}", out.stderr);
    // Through a service, the same.
    let s = crate::util::Service::start(&p, &[]);
    let out = p.run(&["--server", &s.url, "build", "clean/date=2024-01-01"]);
    out.expect_code(2);
    assert!(out.stderr.contains(missing), "{}", out.stderr);
    assert!(
        out.stdout
            .contains("needed by job `clean` for `clean/date=2024-01-01`"),
        "{}",
        out.stdout
    );
}

/// A read of the log that fails while planning stops the build with the log's error: it is
/// never taken for "missing", which would rebuild live partitions.
#[test]
fn a_log_that_cannot_be_read_while_planning_stops_the_build_instead_of_rebuilding() {
    let p = Project::new(
        r#"
[graph]
name = "unreadable"
[[job]]
name = "a"
outputs = ["a/{n:int}"]
command = ["sh", "-c", "echo run >> runs.log; mkdir -p data/a; touch data/a/$DATABUILD_FIELD_N"]
"#,
    );
    p.run(&["build", "a/{1..3}"]).expect_code(0);
    // The partitions' projection can no longer be read (as after a damaged page would be).
    rusqlite::Connection::open(p.path().join(".databuild/events.db"))
        .unwrap()
        .execute_batch("ALTER TABLE partitions RENAME TO partitions_elsewhere")
        .unwrap();
    for args in [&["analyze", "a/{1..3}"][..], &["build", "a/{1..3}"]] {
        let out = p.run(args);
        out.expect_code(1);
        assert!(
            out.stderr.contains("event log storage failed") && out.stderr.contains("partitions"),
            "{args:?}: {}",
            out.stderr
        );
    }
    let runs = std::fs::read_to_string(p.path().join("runs.log")).unwrap();
    assert_eq!(runs.lines().count(), 3, "nothing was rebuilt");
}
