use crate::util::Project;

const DIAMOND: &str = r#"
[graph]
name = "diamond"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["true"]
[[job]]
name = "b"
outputs = ["b/{d:date}"]
inputs = ["a/{d}"]
command = ["true"]
[[job]]
name = "c"
outputs = ["c/{d:date}"]
inputs = ["a/{d}"]
command = ["true"]
[[job]]
name = "d"
outputs = ["d/{d:date}"]
inputs = ["b/{d}", "c/{d}"]
command = ["true"]
"#;

fn jobs_in_order(v: &serde_json::Value) -> Vec<String> {
    v["job_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            format!(
                "{}:{}",
                r["job"].as_str().unwrap(),
                r["outputs"][0].as_str().unwrap()
            )
        })
        .collect()
}

#[test]
fn diamond_runs_the_shared_input_once() {
    let p = Project::new(DIAMOND);
    p.partition("raw/2020-01-01");
    let out = p.run(&["--json", "analyze", "d/2020-01-01"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(
        jobs_in_order(&v),
        [
            "a:a/2020-01-01",
            "b:b/2020-01-01",
            "c:c/2020-01-01",
            "d:d/2020-01-01"
        ]
    );
    assert_eq!(v["skipped"], serde_json::json!(["raw/2020-01-01"]));
    assert!(v["build_request_id"].as_str().unwrap().len() >= 32);
}

#[test]
fn human_output_lists_runs() {
    let p = Project::new(DIAMOND);
    p.partition("raw/2020-01-01");
    let out = p.run(&["analyze", "b/2020-01-01"]);
    out.expect_code(0);
    assert!(
        out.stdout
            .starts_with("2 job runs for 1 requested partition"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("b  b/2020-01-01  <- a/2020-01-01"),
        "{}",
        out.stdout
    );
}

#[test]
fn an_estimate_at_no_or_too_many_runs_at_once_is_refused_as_the_api_refuses_it() {
    let p = Project::new(DIAMOND);
    for n in ["0", "100001"] {
        let out = p.run(&["analyze", "b/2020-01-01", "--parallel", n]);
        out.expect_code(2);
        assert!(
            out.stderr.contains(&format!("parallel {n} (`--parallel`"))
                && out.stderr.contains("1 to 100000 job runs at once"),
            "{n}: {}",
            out.stderr
        );
    }
    // Nothing was recorded: the refusal comes before the analysis.
    let builds = p.run(&["--json", "builds"]);
    builds.expect_code(0);
    assert!(!builds.stdout.contains("b/2020-01-01"), "{}", builds.stdout);
}

#[test]
fn missing_external_input_is_not_plannable() {
    let p = Project::new(DIAMOND);
    let out = p.run(&["--json", "analyze", "b/2020-01-01"]);
    out.expect_code(2);
    assert_eq!(out.json()["missing"], serde_json::json!(["raw/2020-01-01"]));
    assert!(
        out.stderr.contains("external partition `raw/2020-01-01` of dataset `raw` is not available, needed by job `a` for `a/2020-01-01`"),
        "{}",
        out.stderr
    );
}

#[test]
fn fan_in_over_a_domain_with_trailing_windows_and_brace_expansion() {
    let p = Project::new(
        r#"
[graph]
name = "fan"
[graph.domains]
category = ["comedy", "news", "technology"]
[[dataset]]
name = "raw"
pattern = "raw/date={date:date}"
exists = ["sh", "-c", "case \"$0\" in *2019*) exit 1;; esac; exit 0"]
[[job]]
name = "categorized"
outputs = ["categorized/category={category}/date={date:date}"]
inputs = ["raw/date={date}"]
command = ["true"]
[[job]]
name = "weekly"
outputs = ["weekly/category={category}/date={date:date}"]
inputs = ["categorized/category={category}/date={date-6d..date}"]
command = ["true"]
[[job]]
name = "all"
outputs = ["all/date={date:date}"]
inputs = ["weekly/category={category=*}/date={date}"]
command = ["true"]
"#,
    );
    let out = p.run(&["--json", "analyze", "all/date={2020-01-07..2020-01-08}"]);
    out.expect_code(0);
    let v = out.json();
    let runs = v["job_runs"].as_array().unwrap();
    // 8 days x 3 categories categorized, 2 days x 3 weekly, 2 all.
    assert_eq!(runs.len(), 24 + 6 + 2);
    assert_eq!(runs.last().unwrap()["inputs"].as_array().unwrap().len(), 3);
    // The probe says 2019 is not there.
    let out = p.run(&["--json", "analyze", "weekly/category=news/date=2020-01-03"]);
    out.expect_code(2);
    assert_eq!(
        out.json()["missing"].as_array().unwrap().len(),
        4,
        "2019-12-28..31"
    );
}

#[test]
fn dynamic_config_is_called_once_for_all_refs() {
    let p = Project::new(
        r#"
[graph]
name = "basic"
[[job]]
name = "generate_number"
outputs = ["generated_number/{name}"]
command = ["true"]
[[job]]
name = "sum"
outputs = ["sum/{names}"]
config = ["python3", "config.py"]
command = ["true"]
"#,
    );
    p.file(
        "config.py",
        r#"
import json, sys
with open("calls.log", "a") as f:
    f.write(" ".join(sys.argv[1:]) + "\n")
configs = []
for out in sys.argv[1:]:
    names = out.split("/", 1)[1].split("_")
    configs.append({"outputs": [out], "inputs": [{"ref": f"generated_number/{n}"} for n in names], "args": names})
print(json.dumps({"configs": configs}))
"#,
    );
    let out = p.run(&["--json", "analyze", "sum/{pippin_salem,salem_sadie}"]);
    out.expect_code(0);
    let v = out.json();
    assert_eq!(
        v["job_runs"].as_array().unwrap().len(),
        5,
        "3 numbers, 2 sums"
    );
    let calls = std::fs::read_to_string(p.path().join("calls.log")).unwrap();
    assert_eq!(calls, "sum/pippin_salem sum/salem_sadie\n");
}

#[test]
fn failing_configs_are_clear_errors() {
    let graph = r#"
[graph]
name = "basic"
[[job]]
name = "sum"
outputs = ["sum/{names}"]
config = ["python3", "config.py"]
config_timeout = "1s"
command = ["true"]
"#;
    let cases = [
        (
            "import sys; print('boom', file=sys.stderr); sys.exit(3)",
            "config of job `sum` failed: `python3 config.py` ended with exit status 3:\nboom",
        ),
        ("print('not json')", "its output is not the expected JSON"),
        // A log line before the JSON: quoted, with where logs belong.
        (
            "print('reading the graph'); print('{\"configs\": []}')",
            "it began `reading the graph\\n{\\\"configs\\\": []}\\n`: print log lines on stderr, and only the JSON on stdout",
        ),
        // A timeout names the script, not its interpreter.
        (
            "import time; time.sleep(30)",
            "`python3 config.py` did not finish within 1 s",
        ),
        // A traceback: its last line, and where the whole of it is.
        (
            "def f():\n    raise ValueError('no such city: atlantis')\nf()",
            "ended with exit status 1:\nValueError: no such city: atlantis\n(its whole standard error: ",
        ),
        (
            "print('{\"configs\": []}')",
            "no config covers the requested output `sum/a`",
        ),
    ];
    for (script, needle) in cases {
        let p = Project::new(graph);
        p.file("config.py", script);
        let out = p.run(&["analyze", "sum/a"]);
        out.expect_code(2);
        assert!(out.stderr.contains(needle), "{script}: {}", out.stderr);
        if let Some(kept) = out.stderr.split("(its whole standard error: ").nth(1) {
            let path = kept.split(')').next().unwrap();
            let whole = std::fs::read_to_string(path).unwrap();
            assert!(whole.starts_with("Traceback"), "{whole}");
        }
    }
}

#[test]
fn invalid_graphs_fail_with_one_clear_message() {
    let base = "[graph]\nname = \"g\"\n[[dataset]]\nname = \"raw\"\npattern = \"raw/{d:date}\"\n";
    let cases = [
        ("[[job]]\nname = \"j\"\noutputs = [\"o/{d:date}\"]\ninputs = [\"raw/{day}\"]\ncommand = [\"x\"]", "databuild.toml: job `j`: input template `raw/{day}` uses field `day`, which output `o/{d:date}` lacks"),
        ("[[job]]\nname = \"j\"\noutputs = [\"o/{d:date}\"]\ninputs = [\"raw/{d}\"]\n", "databuild.toml: job `j`: `command` is missing"),
        ("[[job]]\nname = \"j\"\noutputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\ntimeout = \"5 parsecs\"", "databuild.toml: job `j`: `timeout = \"5 parsecs\"` is not a duration"),
        ("[[job]]\nname = \"a\"\noutputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\n[[job]]\nname = \"b\"\noutputs = [\"o/{s}\"]\ncommand = [\"x\"]", "databuild.toml: job `a` (`o/{d:date}`) and job `b` (`o/{s}`) can match the same ref"),
        ("[[job]]\nname = \"j\"\noutputs = [\"o/{d:date}\"]\ninputs = [\"raw/{d-1d}\"\ncommand = [\"x\"]", "databuild.toml: TOML parse error at line"),
        ("[[job]]\nname = \"j\"\noutputs = [\"o/{d:datetime}\"]\ncommand = [\"x\"]", "unknown type `datetime`"),
    ];
    for (jobs, needle) in cases {
        let p = Project::new(&format!("{base}{jobs}"));
        let out = p.run(&["analyze", "o/2020-01-01"]);
        out.expect_code(2);
        assert!(out.stderr.starts_with("error: "), "{}", out.stderr);
        assert!(
            out.stderr.contains(needle),
            "expected {needle:?} in:\n{}",
            out.stderr
        );
        if !needle.contains("TOML") {
            assert_eq!(out.stderr.trim_end().lines().count(), 1, "{}", out.stderr);
        }
        assert!(!out.stderr.contains("panicked"));
    }
}

#[test]
fn bad_refs_unknown_refs_and_cycles_exit_2() {
    let p = Project::new(
        r#"
[graph]
name = "cycle"
[[job]]
name = "x"
outputs = ["x/{n:int}"]
inputs = ["y/{n}"]
command = ["true"]
[[job]]
name = "y"
outputs = ["y/{n:int}"]
inputs = ["x/{n}"]
command = ["true"]
"#,
    );
    let cases = [
        (
            "x/1",
            "dependency cycle: x/1 (job `x`) -> y/1 (job `y`) -> x/1 (job `x`)",
        ),
        ("z/1", "no job builds `z/1` and no dataset declares it"),
        ("../etc/passwd", "`.` or `..` path segment"),
        ("/etc/passwd", "is absolute"),
        ("x/{1..", "unclosed"),
        ("x/{3..1}", "runs backwards"),
    ];
    for (r, needle) in cases {
        let out = p.run(&["analyze", r]);
        out.expect_code(2);
        assert!(out.stderr.contains(needle), "{r}: {}", out.stderr);
    }
}

#[test]
fn missing_graph_file_points_at_the_fix() {
    let p = Project::new("");
    let out = p.run(&["--graph", "elsewhere.toml", "analyze", "a"]);
    out.expect_code(2);
    assert!(
        out.stderr
            .contains("cannot read graph file `elsewhere.toml`"),
        "{}",
        out.stderr
    );
    assert!(out.stderr.contains("--graph FILE"), "{}", out.stderr);
}

/// `analyze` prices a plan from the jobs' recorded durations: the wall time at `--parallel`, the
/// critical path and the job time, and what has no history; the build then takes what it said
/// (within 30%).
#[test]
fn analyze_prices_a_plan_and_the_build_takes_what_it_said() {
    let p = Project::new(
        r#"
[graph]
name = "priced"
[[job]]
name = "a"
outputs = ["a/{n:int}"]
command = ["sh", "-c", "sleep 0.4; mkdir -p data/a; touch data/a/$DATABUILD_FIELD_N"]
[[job]]
name = "b"
outputs = ["b/{n:int}"]
inputs = ["a/{n}"]
command = ["sh", "-c", "sleep 0.2; mkdir -p data/b; touch data/b/$DATABUILD_FIELD_N"]
"#,
    );
    // No history yet: said so, and counted as nothing.
    let fresh = p.run(&["--json", "analyze", "b/{1..4}", "--parallel", "2"]);
    fresh.expect_code(0);
    let e = &fresh.json()["estimate"];
    assert_eq!(e["runs_without_history"], 8, "{e}");
    assert_eq!(e["jobs_without_history"], serde_json::json!(["a", "b"]));
    p.run(&["build", "b/{1..4}", "--parallel", "2"])
        .expect_code(0);
    let text = p.run(&["analyze", "b/{5..10}", "--parallel", "2"]);
    text.expect_code(0);
    assert!(text.stdout.contains("estimated: "), "{}", text.stdout);
    assert!(text.stdout.contains("at --parallel 2"), "{}", text.stdout);
    let e = p
        .run(&["--json", "analyze", "b/{5..10}", "--parallel", "2"])
        .json()["estimate"]
        .clone();
    assert_eq!(e["runs_without_history"], 0, "{e}");
    let wall = e["wall_p50_s"].as_f64().unwrap();
    let work = e["work_p50_s"].as_f64().unwrap();
    let critical = e["critical_path_p50_s"].as_f64().unwrap();
    assert!(critical < wall && wall < work, "{e}");
    let build = p.run(&["--json", "build", "b/{5..10}", "--parallel", "2"]);
    build.expect_code(0);
    let id = build.json()["build_request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let b = p.run(&["--json", "builds", &id]).json();
    let took =
        (b["updated_at_ns"].as_i64().unwrap() - b["created_at_ns"].as_i64().unwrap()) as f64 / 1e9;
    assert!(
        (took - wall).abs() <= 0.3 * took,
        "estimated {wall} s, took {took} s ({e})"
    );
}

/// A missing external input is named with why it is missing, and with every partition that
/// cannot be built until it is there (the runs reading it and everything downstream).
#[test]
fn analyze_names_what_cannot_be_built_until_a_missing_input_arrives() {
    let p = Project::new(
        r#"
[graph]
name = "blocked"
[[dataset]]
name = "raw"
pattern = "raw/{n:int}"
[[job]]
name = "a"
outputs = ["a/{n:int}"]
inputs = ["raw/{n}"]
command = ["true"]
[[job]]
name = "b"
outputs = ["b/{n:int}"]
inputs = ["a/{n}"]
command = ["true"]
"#,
    );
    p.partition("raw/1");
    let out = p.run(&["--json", "analyze", "b/{1..2}"]);
    out.expect_code(2);
    let v = out.json();
    assert_eq!(v["missing"], serde_json::json!(["raw/2"]), "{v}");
    let reason = v["missing_details"][0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("nothing at ") && reason.ends_with("raw/2"),
        "{v}"
    );
    assert_eq!(v["cannot_build_count"], 2, "{v}");
    assert_eq!(v["cannot_build"], serde_json::json!(["a/2", "b/2"]), "{v}");
    let text = p.run(&["analyze", "b/{1..2}"]);
    assert!(
        text.stdout
            .contains("2 partitions cannot be built until that input is there: a/2, b/2"),
        "{}",
        text.stdout
    );
}

/// A big analyze through the service answers a bounded page: every count exact (runs in all and
/// per job, the lists' lengths, the estimate), the first runs, and a cursor that pages on to the
/// end. The command line over the service follows the pages and prints what it prints in its
/// own process. (One analyze of a million refs used to answer 100 MB and take the service from
/// 16 MB to 600 MB.)
#[test]
fn a_big_analysis_through_the_service_answers_pages_with_exact_counts() {
    let p = Project::new(DIAMOND);
    let s = crate::util::Service::start(&p, &[]);
    // 1,200 days, raw missing: 4,800 runs, 1,200 missing inputs.
    let refs = "d/{2020-01-01..2023-04-14}";
    let (status, first) = s.post(
        "/api/v1/analyze",
        &serde_json::json!({ "partitions": [refs] }),
    );
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["job_runs"].as_array().unwrap().len(), 1000);
    assert!(first.to_string().len() < 1_000_000, "a page, not the plan");
    assert_eq!(first["job_runs_count"], 4800);
    let per_job: Vec<_> = ["a", "b", "c", "d"]
        .iter()
        .map(|j| serde_json::json!({"job": j, "runs": 1200}))
        .collect();
    assert_eq!(first["jobs"], serde_json::json!(per_job));
    assert_eq!(first["next_after"], 1000);
    assert_eq!(first["missing_count"], 1200);
    assert_eq!(first["missing"].as_array().unwrap().len(), 1000);
    assert_eq!(first["cannot_build_count"], 4800);
    // Paged on, 2,000 at a time, to the end: every run once, in plan order.
    let mut runs = Vec::new();
    let mut after = serde_json::Value::Null;
    loop {
        let (status, page) = s.post(
            "/api/v1/analyze",
            &serde_json::json!({ "partitions": [refs], "after": after, "limit": 2000 }),
        );
        assert_eq!(status, 200, "{page}");
        assert_eq!(page["job_runs_count"], 4800);
        assert_eq!(page["estimate"], first["estimate"]);
        runs.extend(jobs_in_order(&page));
        after = page["next_after"].clone();
        if after.is_null() {
            break;
        }
    }
    assert_eq!(runs.len(), 4800);
    let distinct: std::collections::HashSet<_> = runs.iter().collect();
    assert_eq!(distinct.len(), 4800);
    // A page too large is refused, saying how to page.
    let (status, refused) = s.post(
        "/api/v1/analyze",
        &serde_json::json!({ "partitions": [refs], "limit": 100_001 }),
    );
    assert_eq!(status, 400, "{refused}");
    assert!(refused["error"].as_str().unwrap().contains("next_after"));
    // `analyze --json` over the service lists every run, as in this process.
    let remote = p.run(&["--server", &s.url, "--json", "analyze", refs]);
    let local = p.run(&["--json", "analyze", refs]);
    remote.expect_code(2);
    local.expect_code(2);
    assert_eq!(jobs_in_order(&remote.json()), runs);
    assert_eq!(jobs_in_order(&local.json()), runs);
    assert_eq!(local.json()["job_runs_count"], 4800);
    assert_eq!(local.json()["next_after"], serde_json::Value::Null);
    // The human output over the service counts what it does not list.
    let human = p.run(&["--server", &s.url, "analyze", "--limit", "3", refs]);
    assert!(
        human.stdout.starts_with(
            "4800 job runs for 1200 requested partitions: 0 skipped (live), 0 external inputs present, 0 delegated, 1200 missing"
        ),
        "{}",
        human.stdout
    );
}

/// An analysis of many refs records the first 1,000 and how many there are: its record, the
/// builds listing and its detail count them all, and analysing 50,000 refs again grows the log
/// by kilobytes, not by the request (each page of a paged analysis is one).
#[test]
fn an_analysis_records_its_first_refs_and_their_count() {
    let p = Project::new(DIAMOND);
    let refs = "d/{1900-01-01..2036-11-22}"; // 50,000 days
    p.run(&["analyze", "--limit", "1", refs]).expect_code(2);
    let listed = p.run(&["--json", "builds", "--all"]).json();
    let b = &listed["builds"][0];
    assert_eq!(b["analyze_only"], true);
    assert_eq!(b["requested_count"], 50_000);
    let id = b["build_request_id"].as_str().unwrap().to_string();
    let detail = p.run(&["--json", "builds", &id]).json();
    assert_eq!(detail["requested_count"], 50_000);
    assert_eq!(
        detail["requested_partitions"].as_array().unwrap().len(),
        1000
    );
    let received: serde_json::Value = p
        .run(&["--json", "events", "--build", &id])
        .stdout
        .lines()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .find(|e| e["status"] == "received")
        .expect("its received event");
    assert_eq!(
        received["data"]["requested"].as_array().unwrap().len(),
        1000
    );
    assert_eq!(received["data"]["requested"][999], "d/1902-09-27");
    assert_eq!(received["data"]["requested_count"], 50_000);
    let log_bytes = || -> u64 {
        std::fs::read_dir(p.path().join(".databuild"))
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len())
            .sum()
    };
    let before = log_bytes();
    for _ in 0..3 {
        p.run(&["analyze", "--limit", "1", refs]).expect_code(2);
    }
    let grown = log_bytes() - before;
    assert!(
        grown < 1_000_000,
        "three analyses grew the log {grown} bytes"
    );
    let report = p.run(&["check-log"]);
    report.expect_code(0);
}

/// An analysis builds nothing, so one whose planning fails fails none of its refs: its summary
/// counts none (its message says why it failed), whatever it asked for, and it records only its
/// first 1,000 of 1,500.
#[test]
fn a_failed_analysis_fails_none_of_its_refs() {
    let p = Project::new(
        r#"
[graph]
name = "failing"
[[job]]
name = "sum"
outputs = ["sum/{n:int}"]
config = ["sh", "-c", "echo boom >&2; exit 3"]
command = ["true"]
"#,
    );
    p.run(&["analyze", "sum/{1..1500}"]).expect_code(2);
    let listed = p.run(&["--json", "builds", "--all"]).json();
    let id = listed["builds"][0]["build_request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let detail = p.run(&["--json", "builds", &id]).json();
    assert_eq!(detail["status"], "failed");
    assert_eq!(detail["requested_count"], 1500);
    let summary = &detail["summary"];
    assert_eq!(summary["counts"]["failed"], 0, "{}", summary["counts"]);
    assert!(summary["failed"].as_array().unwrap().is_empty());
    assert!(
        detail["message"].as_str().unwrap().contains("boom"),
        "{detail}"
    );
}
