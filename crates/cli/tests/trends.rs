//! Trends, anomaly checks and priced plans (#61): a job reports `rows` per partition; `metrics`
//! lists it in key order, `jobs NAME` gives its p50/p95; a partition with 5% of the usual rows
//! fails its anomaly check and is not live, the next normal one is; the dashboard charts it;
//! `analyze` prices memory and CPU-hours from the history.

use crate::util::{Project, Service};

/// `count` writes the number in `rows/<date>` and reports it as its output's `rows`; the
/// anomaly check `rows_band` judges it against the last 14 days.
const GRAPH: &str = r#"
[graph]
name = "g"
[[job]]
name = "count"
outputs = ["t/{d:date}"]
command = ["sh", "-c", "n=$(cat rows/$DATABUILD_FIELD_D); mkdir -p $DATABUILD_OUTPUT_DIR/t && echo $n > $DATABUILD_OUTPUT_DIR/t/$DATABUILD_FIELD_D && echo \"{\\\"metrics\\\": {\\\"t/$DATABUILD_FIELD_D\\\": {\\\"rows\\\": $n}}}\" > $DATABUILD_REPORT"]
[[check]]
name = "rows_band"
applies_to = "count"
metric = "rows"
"#;

/// 20 days of about 250 rows each; the 19th has 12 (5% of the usual).
fn rows(day: u32) -> u32 {
    if day == 19 {
        12
    } else {
        240 + (day * 7) % 21
    }
}

fn day(d: u32) -> String {
    format!("t/2026-01-{d:02}")
}

/// The project with days 1..=18 built (normal), then 19 (the anomaly) and 20 (normal again).
fn built() -> Project {
    let p = Project::new(GRAPH);
    for d in 1..=20 {
        p.file(&format!("rows/2026-01-{d:02}"), &rows(d).to_string());
    }
    p.run(&["build", "t/2026-01-{01..18}", "--parallel", "2"])
        .expect_code(0);
    p
}

fn status(p: &Project, r: &str) -> serde_json::Value {
    let out = p.run(&["--json", "status", r]);
    out.expect_code(0);
    out.json()[0].clone()
}

#[test]
fn an_anomaly_fails_its_check_and_is_not_live_and_the_next_normal_partition_is() {
    let p = built();
    let out = p.run(&["build", &day(19)]);
    out.expect_code(1);
    let said = format!("{}{}", out.stdout, out.stderr);
    assert!(
        said.contains("failed check `rows_band`: rows = 12 outside the expected"),
        "{said}"
    );
    let s = status(&p, &day(19));
    assert_ne!(s["status"], "live", "{s}");
    let explain = p.run(&["explain", &day(19)]);
    let why = format!("{}{}", explain.stdout, explain.stderr);
    assert!(
        why.contains("rows = 12 outside the expected") && why.contains("(median 2"),
        "{why}"
    );
    assert!(why.contains("of the last 14 partitions"), "{why}");
    // `databuild check` judges it again from what its run recorded: the same verdict.
    let again = p.run(&["check", &day(19)]);
    again.expect_code(1);
    assert!(
        format!("{}{}", again.stdout, again.stderr).contains("rows = 12 outside the expected"),
        "{}{}",
        again.stdout,
        again.stderr
    );
    p.run(&["build", &day(20)]).expect_code(0);
    assert_eq!(status(&p, &day(20))["status"], "live");
    // The anomaly taught the band nothing: day 20 learned from the 14 days before 19.
    let checks = p.run(&[
        "--json",
        "sql",
        "SELECT message FROM partition_checks WHERE partition_ref = 't/2026-01-20'",
    ]);
    let message = checks.json()["rows"][0][0].as_str().unwrap().to_string();
    assert!(message.contains("inside the expected"), "{message}");
    assert!(message.contains("of the last 14 partitions"), "{message}");
}

#[test]
fn the_first_partitions_pass_while_the_band_is_learning() {
    let p = Project::new(GRAPH);
    p.file("rows/2026-01-01", "250");
    p.file("rows/2026-01-02", "3");
    p.run(&["build", &day(1)]).expect_code(0);
    p.run(&["build", &day(2)]).expect_code(0);
    let checks = p.run(&[
        "--json",
        "sql",
        "SELECT message FROM partition_checks WHERE partition_ref = 't/2026-01-02'",
    ]);
    assert_eq!(
        checks.json()["rows"][0][0],
        "rows = 3; learning: 1 of 5 partitions"
    );
}

#[test]
fn metrics_lists_a_metric_in_key_order_and_jobs_gives_its_percentiles() {
    let p = built();
    let out = p.run(&["--json", "metrics", "count", "--metric", "rows"]);
    out.expect_code(0);
    let page = out.json();
    let listed: Vec<(String, f64)> = page["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| {
            (
                v["partition_ref"].as_str().unwrap().to_string(),
                v["value"].as_f64().unwrap(),
            )
        })
        .collect();
    let want: Vec<(String, f64)> = (1..=18).map(|d| (day(d), rows(d) as f64)).collect();
    assert_eq!(listed, want);
    assert_eq!(page["next"], serde_json::Value::Null);
    // A page, then the next after it; by output pattern too.
    let first = p.run(&[
        "--json",
        "metrics",
        "t/{d:date}",
        "--metric",
        "rows",
        "--limit",
        "2",
    ]);
    assert_eq!(first.json()["next"], day(2));
    let next = p.run(&[
        "--json",
        "metrics",
        "count",
        "--metric",
        "rows",
        "--after",
        &day(2),
        "--limit",
        "1",
    ]);
    assert_eq!(next.json()["values"][0]["partition_ref"], day(3));
    let text = p.run(&["metrics", "count", "--metric", "rows"]);
    text.expect_code(0);
    let lines: Vec<&str> = text.stdout.lines().collect();
    assert!(
        lines[0].starts_with("PARTITION") && lines[0].contains("ROWS"),
        "{}",
        text.stdout
    );
    assert!(lines[1].starts_with("t/2026-01-01") && lines[1].contains(&rows(1).to_string()));
    let missing = p.run(&["metrics", "nope", "--metric", "rows"]);
    missing.expect_code(2);
    assert!(missing
        .stderr
        .contains("`nope` is neither a job nor a job's output pattern"));

    let job = p.run(&["--json", "jobs", "count"]);
    job.expect_code(0);
    let trends = job.json()["trends"].clone();
    let rows_trend = trends
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["name"] == "rows")
        .unwrap_or_else(|| panic!("{trends}"))
        .clone();
    assert_eq!(rows_trend["kind"], "reported");
    assert_eq!(rows_trend["count"], 18);
    let p50 = rows_trend["p50"].as_f64().unwrap();
    assert!((240.0..=260.0).contains(&p50), "{rows_trend}");
    assert!(trends
        .as_array()
        .unwrap()
        .iter()
        .any(|t| t["name"] == "wall_ms" && t["kind"] == "resource" && t["count"] == 18));
    let text = p.run(&["jobs", "count"]);
    assert!(
        text.stdout.contains("METRIC") && text.stdout.contains("cpu_user_ms"),
        "{}",
        text.stdout
    );
}

#[test]
fn the_dashboard_charts_a_metric_with_its_band_and_the_anomaly_marked() {
    let p = built();
    p.run(&["build", &day(19)]).expect_code(1);
    let service = Service::start(&p, &[]);
    let (code, page) = service.call("GET", "/jobs/count", None, None);
    assert_eq!(code, 200);
    assert!(
        page.contains("<svg") && page.contains("class=\"trend\""),
        "{page}"
    );
    for chart in ["wall_ms", "rows"] {
        assert!(
            page.contains(&format!("data-metric=\"{chart}\"")),
            "{chart}"
        );
    }
    assert!(
        page.contains("class=\"band\""),
        "the expected band is shaded"
    );
    assert!(page.contains("class=\"anomaly\""), "the anomaly is marked");
    assert!(page.contains("t/2026-01-19"), "the anomaly is named");
    let run = crate::util::current_run(&p, &day(20 - 2));
    let (code, page) = service.call("GET", &format!("/runs/{run}"), None, None);
    assert_eq!(code, 200);
    assert!(
        page.contains("Job p50") && page.contains("<td>cpu_user_ms</td>"),
        "{page}"
    );
    let (code, api) = service.get("/api/v1/metrics?pattern=count&metric=rows&limit=3");
    assert_eq!(code, 200);
    assert_eq!(api["values"].as_array().unwrap().len(), 3);
}

/// `heavy` holds about 100 MiB for 0.4 s: long enough for its peak memory to be read.
const HEAVY: &str = r#"
[graph]
name = "g"
[[job]]
name = "heavy"
outputs = ["h/{n:int}"]
command = ["python3", "-c", "import os, time; b = bytearray(100 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.4); d = os.environ['DATABUILD_OUTPUT_DIR'] + '/h'; os.makedirs(d, exist_ok=True); open(d + '/' + os.environ['DATABUILD_FIELD_N'], 'w').write('ok')"]
"#;

#[test]
fn analyze_prices_peak_memory_and_cpu_hours_from_the_history() {
    let p = Project::new(HEAVY);
    p.run(&["build", "h/{1..5}", "--parallel", "2"])
        .expect_code(0);
    let out = p.run(&["--json", "analyze", "h/{6..9}", "--parallel", "2"]);
    out.expect_code(0);
    let e = out.json()["estimate"].clone();
    let peak = e["peak_memory_bytes"]
        .as_u64()
        .unwrap_or_else(|| panic!("{e}"));
    // Two runs at once, each at its job's p95 of about 100 MiB (and Python's own).
    assert!(peak > 2 * (100 << 20) && peak < 2 * (300 << 20), "{e}");
    let one = p.run(&["--json", "analyze", "h/{6..9}", "--parallel", "1"]);
    let single = one.json()["estimate"]["peak_memory_bytes"]
        .as_u64()
        .unwrap();
    assert!(
        (single * 2).abs_diff(peak) <= 2,
        "one run's bound is half of two's: {single} vs {peak}"
    );
    assert!(e["cpu_hours"].as_f64().unwrap() > 0.0, "{e}");
    assert_eq!(e["runs_without_resources"], 0, "{e}");
    let text = p.run(&["analyze", "h/{6..9}", "--parallel", "2"]);
    text.expect_code(0);
    assert!(
        text.stdout.contains("peak memory at most") && text.stdout.contains("CPU-hours"),
        "{}",
        text.stdout
    );
    // The dashboard charts its peak memory with an axis in MiB.
    let service = Service::start(&p, &[]);
    let (_, page) = service.call("GET", "/jobs/heavy", None, None);
    assert!(page.contains(r#"data-metric="max_rss_bytes""#), "{page}");
    assert!(page.contains(" MiB</text>"), "{page}");
}
