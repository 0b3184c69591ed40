//! What every run costs and what its job reports (#61): DataBuild measures each run without the
//! job's help (CPU, peak memory, I/O, wall time, output size, queue wait), keeps the metrics a job
//! reports per output ref, shows both in `runs ID` and keeps them in `run_metrics`; `/metrics`
//! has per-job histograms of duration and peak memory.

use crate::util::{current_run, Project, Service};

/// `heavy/self` allocates ~300 MB (touching every page) and spins ~1 s of CPU in all;
/// `heavy/child` has a child process of its own do the same and waits for it; `heavy/workers`
/// starts three workers of ~100 MB each at once. `counted` reports
/// metrics of its output, after long enough for its peak memory to be read while it runs (it
/// is below this process's, so the kernel's count at its end does not tell it); `lying` reports a metric of a ref it does not build, and `wordy` one
/// that is not a number.
const GRAPH: &str = r#"
[graph]
name = "t"
[[job]]
name = "heavy"
outputs = ["heavy/{mode}"]
command = ["python3", "heavy.py"]
[[job]]
name = "counted"
outputs = ["counted/{n}"]
command = ["sh", "-c", "sleep 0.4 && mkdir -p $DATABUILD_OUTPUT_DIR/counted && printf 0123456789 > $DATABUILD_OUTPUT_DIR/counted/$DATABUILD_FIELD_N && echo \"{\\\"metrics\\\": {\\\"counted/$DATABUILD_FIELD_N\\\": {\\\"rows\\\": 1234, \\\"nulls\\\": 3}}}\" > $DATABUILD_REPORT"]
[[job]]
name = "lying"
outputs = ["lying/{n}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/lying && echo x > $DATABUILD_OUTPUT_DIR/lying/$DATABUILD_FIELD_N && echo '{\"metrics\": {\"other/1\": {\"rows\": 1}}}' > $DATABUILD_REPORT"]
[[job]]
name = "wordy"
outputs = ["wordy/{n}"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/wordy && echo x > $DATABUILD_OUTPUT_DIR/wordy/$DATABUILD_FIELD_N && echo \"{\\\"metrics\\\": {\\\"wordy/$DATABUILD_FIELD_N\\\": {\\\"rows\\\": \\\"many\\\"}}}\" > $DATABUILD_REPORT"]
"#;

const HEAVY: &str = r#"
import json, os, subprocess, sys, time

def work():
    b = bytearray(300 << 20)
    for i in range(0, len(b), 4096):
        b[i] = 1
    # ~1 s of CPU in all, the pages' touching and Python's start included.
    while time.process_time() < 1.0:
        pass

WORKER = "import time\nb = bytearray(100 << 20)\nfor i in range(0, len(b), 4096):\n    b[i] = 1\ntime.sleep(1.5)\n"

mode = os.environ["DATABUILD_FIELD_MODE"]
if mode == "child":
    subprocess.run([sys.executable, __file__], env={**os.environ, "DATABUILD_FIELD_MODE": "self"}, check=True)
elif mode == "workers":
    workers = [subprocess.Popen([sys.executable, "-c", WORKER]) for _ in range(3)]
    for w in workers:
        assert w.wait() == 0
else:
    work()
ref = json.loads(os.environ["DATABUILD_OUTPUTS"])[0]
path = os.path.join(os.environ["DATABUILD_OUTPUT_DIR"], ref)
os.makedirs(os.path.dirname(path), exist_ok=True)
with open(path, "w") as f:
    f.write("x" * 1000)
"#;

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file("heavy.py", HEAVY);
    p
}

/// `runs ID --json` of the run that built `r`.
fn run_of(p: &Project, r: &str) -> serde_json::Value {
    let out = p.run(&["--json", "runs", &current_run(p, r)]);
    out.expect_code(0);
    out.json()
}

#[track_caller]
fn within_30_percent(what: &str, got: f64, expected: f64) {
    assert!(
        (got - expected).abs() <= 0.3 * expected,
        "{what}: {got} is not within 30% of {expected}"
    );
}

/// A job that uses ~300 MB and ~1 s of CPU is recorded so, within 30%, itself or through a
/// child process it waits for; its output's size, its wall time and its wait in the queue too.
#[test]
fn a_runs_cpu_and_peak_memory_are_recorded_within_30_percent() {
    let p = project();
    p.run(&["build", "heavy/self", "heavy/child"])
        .expect_code(0);
    for r in ["heavy/self", "heavy/child"] {
        let run = run_of(&p, r);
        let res = &run["resources"];
        let cpu = res["cpu_user_ms"].as_f64().unwrap() + res["cpu_system_ms"].as_f64().unwrap();
        within_30_percent(&format!("{r}: CPU ms"), cpu, 1000.0);
        let rss = res["max_rss_bytes"].as_f64().unwrap();
        within_30_percent(&format!("{r}: peak RSS"), rss, (300u64 << 20) as f64);
        assert!(res["wall_ms"].as_f64().unwrap() >= cpu * 0.9, "{run}");
        assert_eq!(res["output_bytes"], 1000, "{run}");
        assert!(res["queue_wait_ms"].is_u64(), "{run}");
        assert!(
            res["read_bytes"].is_u64() && res["write_bytes"].is_u64(),
            "{run}"
        );
        assert_eq!(run["attempt"], 1, "{run}");
    }
    // The same in the text, in units people read.
    let text = p.run(&["runs", &current_run(&p, "heavy/self")]);
    assert!(
        text.stdout.contains("  resources: wall_ms="),
        "{}",
        text.stdout
    );
    assert!(text.stdout.contains(" MiB"), "{}", text.stdout);
}

/// A job's peak memory is what it and its descendants held together: three workers of ~100 MB
/// each, alive at once, are ~300 MB (the largest single process, ~100 MB, would say a third).
#[test]
fn a_jobs_peak_memory_counts_its_workers_together() {
    let p = project();
    p.run(&["build", "heavy/workers"]).expect_code(0);
    let run = run_of(&p, "heavy/workers");
    let rss = run["resources"]["max_rss_bytes"].as_f64().unwrap();
    within_30_percent("three workers' peak RSS", rss, (300u64 << 20) as f64);
}

/// A job's reported metrics show in `runs ID` (text and JSON) and sit in `run_metrics` beside
/// the run's measures, per output ref, for SQL; `/metrics` counts its run in both histograms.
#[test]
fn reported_metrics_are_shown_and_kept_per_ref_beside_the_measures() {
    let p = project();
    p.run(&["build", "counted/1"]).expect_code(0);
    let run = run_of(&p, "counted/1");
    assert_eq!(
        run["metrics"],
        serde_json::json!({"counted/1": {"nulls": 3.0, "rows": 1234.0}})
    );
    assert_eq!(run["resources"]["output_bytes"], 10, "{run}");
    let text = p.run(&["runs", &current_run(&p, "counted/1")]);
    assert!(
        text.stdout
            .contains("  metrics of counted/1: nulls=3, rows=1234"),
        "{}",
        text.stdout
    );
    let kept = p
        .run(&[
            "--json",
            "sql",
            "SELECT name, value FROM run_metrics WHERE job = 'counted' AND partition_ref = 'counted/1' ORDER BY name",
        ])
        .json();
    let names: Vec<&str> = kept["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r[0].as_str().unwrap())
        .collect();
    for name in [
        "cpu_user_ms",
        "max_rss_bytes",
        "nulls",
        "output_bytes",
        "rows",
        "wall_ms",
    ] {
        assert!(names.contains(&name), "{name} not in {kept}");
    }

    let s = Service::start(&p, &[]);
    let (status, metrics) = s.call("GET", "/metrics", None, None);
    assert_eq!(status, 200);
    for line in [
        "# TYPE databuild_job_run_duration_seconds histogram",
        "databuild_job_run_duration_seconds_bucket{job=\"counted\",le=\"+Inf\"} 1",
        "databuild_job_run_duration_seconds_count{job=\"counted\"} 1",
        "# TYPE databuild_job_run_max_rss_bytes histogram",
        "databuild_job_run_max_rss_bytes_bucket{job=\"counted\",le=\"16777216\"} 1",
        "databuild_job_run_max_rss_bytes_count{job=\"counted\"} 1",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
    // A run that completes after the first scrape is counted by the next.
    p.run(&["build", "counted/2"]).expect_code(0);
    let (_, metrics) = s.call("GET", "/metrics", None, None);
    assert!(
        metrics.contains("databuild_job_run_duration_seconds_count{job=\"counted\"} 2"),
        "{metrics}"
    );
    let (status, api) = s.get(&format!(
        "/api/v1/job-runs/{}",
        current_run(&p, "counted/2")
    ));
    assert_eq!(status, 200);
    assert_eq!(api["metrics"]["counted/2"]["rows"], 1234.0, "{api}");
    assert!(api["resources"]["wall_ms"].is_u64(), "{api}");
}

/// A metric of a ref the run does not build, or one that is not a number, fails the run with
/// what is wrong; its resources are still recorded, and databuild's own memory is not taken for
/// the job's.
#[test]
fn a_bad_reported_metric_fails_the_run_saying_what_is_wrong() {
    let p = project();
    for (r, words) in [
        (
            "lying/1",
            "names `other/1`, which is not one of its outputs (lying/1)",
        ),
        (
            "wordy/1",
            "metric `rows` of `wordy/1` is \"many\", not a number",
        ),
    ] {
        p.run(&["build", r]).expect_code(1);
        let run = run_of(&p, r);
        assert_eq!(run["status"], "failed", "{run}");
        let message = run["message"].as_str().unwrap();
        assert!(message.contains(words), "{message}");
        assert!(run["resources"]["cpu_user_ms"].is_u64(), "{run}");
        assert!(run.get("metrics").is_none(), "{run}");
        // A job of a few ms is started on databuild's memory and inherits its peak: that is
        // not taken for the job's (its peak is then unknown, or read while it ran).
        let rss = run["resources"]["max_rss_bytes"].as_u64();
        assert!(rss.is_none_or(|b| b < 16 << 20), "{run}");
    }
}
