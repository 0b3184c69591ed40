//! The example graphs, built end to end through the real binary in a copy of their folder.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::util::Project;

pub fn example(name: &str) -> Project {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(name);
    let p = Project::new("");
    copy_dir(&src, p.path());
    p
}

fn copy_dir(from: &Path, to: &Path) {
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        if name == "data" || name == ".databuild" || name == "__pycache__" {
            continue;
        }
        let target = to.join(&name);
        if entry.file_type().unwrap().is_dir() {
            std::fs::create_dir_all(&target).unwrap();
            copy_dir(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), target).unwrap();
        }
    }
}

fn read(p: &Project, r: &str) -> String {
    std::fs::read_to_string(p.path().join("data").join(r)).unwrap()
}

fn json(p: &Project, r: &str) -> serde_json::Value {
    serde_json::from_str(&read(p, r)).unwrap()
}

fn jsonl(p: &Project, r: &str) -> Vec<serde_json::Value> {
    read(p, r)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn completed_runs(p: &Project) -> u64 {
    let v = p
        .run(&[
            "--json",
            "sql",
            "SELECT count(*) FROM job_runs WHERE status = 'completed'",
        ])
        .json();
    v["rows"][0][0].as_u64().unwrap()
}

#[test]
fn basic_graph_sums_generated_numbers() {
    let p = example("basic_graph");
    let out = p.run(&[
        "--json",
        "build",
        "sum/pippin_salem_sadie",
        "sum/salem_sadie",
    ]);
    out.expect_code(0);
    // sha256(name) mod 100, as generate_number.py defines it.
    assert_eq!(read(&p, "generated_number/pippin"), "20\n");
    assert_eq!(read(&p, "generated_number/salem"), "76\n");
    assert_eq!(read(&p, "generated_number/sadie"), "24\n");
    assert_eq!(read(&p, "sum/pippin_salem_sadie"), "120\n");
    assert_eq!(read(&p, "sum/salem_sadie"), "100\n");
    assert_eq!(
        completed_runs(&p),
        5,
        "each number generated once for both sums"
    );
    p.run(&["build", "sum/pippin_salem_sadie", "sum/salem_sadie"])
        .expect_code(0);
    assert_eq!(completed_runs(&p), 5, "a second build runs nothing");
}

#[test]
fn podcast_reviews_builds_a_week_of_summaries() {
    let p = example("podcast_reviews");
    let week = "daily_summaries/category=comedy/date={2020-01-01..2020-01-07}";
    let out = p.run(&["--json", "build", week]);
    out.expect_code(0);
    let v = out.json();
    // 13 days of raw, reviews and categorized (7 + the 6-day window), 7 of each later stage.
    assert_eq!(v["built"].as_array().unwrap().len(), 13 * 3 + 7 * 3);

    let raw = jsonl(&p, "raw_reviews/date=2020-01-07");
    assert!(
        (250..=350).contains(&raw.len()),
        "a few hundred reviews a day: {}",
        raw.len()
    );
    let reviews = jsonl(&p, "reviews/date=2020-01-07");
    assert!(reviews.len() < raw.len(), "dirty rows are dropped");
    assert!(reviews
        .iter()
        .all(|r| (1..=5).contains(&r["rating"].as_i64().unwrap())));
    let comedy = jsonl(&p, "categorized_reviews/category=comedy/date=2020-01-07");
    assert_eq!(
        comedy.len(),
        reviews.iter().filter(|r| r["category"] == "comedy").count()
    );

    let summary = json(&p, "daily_summaries/category=comedy/date=2020-01-07");
    assert_eq!(summary["category"], "comedy");
    assert_eq!(summary["date"], "2020-01-07");
    assert_eq!(
        summary["review_count"].as_u64().unwrap() as usize,
        comedy.len()
    );
    let mean = comedy
        .iter()
        .map(|r| r["rating"].as_f64().unwrap())
        .sum::<f64>()
        / comedy.len() as f64;
    assert!((summary["mean_rating"].as_f64().unwrap() - mean).abs() < 0.001);
    let model = json(&p, "phrase_models/category=comedy/date=2020-01-07");
    assert_eq!(model["window_days"], 7);
    let model_phrases: Vec<&str> = model["top_phrases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["phrase"].as_str().unwrap())
        .collect();
    let top = summary["top_phrases"].as_array().unwrap();
    assert!(!top.is_empty());
    assert!(
        top.iter()
            .all(|t| model_phrases.contains(&t.as_str().unwrap())),
        "{summary} vs {model_phrases:?}"
    );

    let runs = completed_runs(&p);
    p.run(&["build", week]).expect_code(0);
    assert_eq!(completed_runs(&p), runs, "a second build runs nothing");

    // A new version of phrase_models rebuilds it, nothing upstream; it writes the bytes it wrote,
    // so what reads it, planned behind it, is kept (early cutoff).
    let graph = std::fs::read_to_string(p.path().join("databuild.toml")).unwrap();
    let bumped = graph.replacen(
        "command = [\"python3\", \"jobs/phrase_models.py\"]\nversion = \"1\"",
        "command = [\"python3\", \"jobs/phrase_models.py\"]\nversion = \"2\"",
        1,
    );
    assert_ne!(graph, bumped);
    std::fs::write(p.path().join("databuild.toml"), bumped).unwrap();
    let out = p.run(&["--json", "build", week]);
    out.expect_code(0);
    let summary = out.json();
    let mut rebuilt: Vec<String> = summary["built"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r.as_str().unwrap().split('/').next().unwrap().to_string())
        .collect();
    rebuilt.sort();
    rebuilt.dedup_by(|a, b| a == b);
    assert_eq!(rebuilt, ["phrase_models"], "{summary}");
    let counts = &summary["counts"];
    assert_eq!(counts["unchanged"], counts["built"], "{summary}");
    assert!(counts["kept"].as_u64().unwrap() > 0, "{summary}");
    let built = counts["built"].as_u64().unwrap();
    assert_eq!(completed_runs(&p), runs + built);
}

#[test]
fn podcast_reviews_checks_its_daily_summaries() {
    let p = example("podcast_reviews");
    let r = "daily_summaries/category=news/date=2020-01-07";
    p.run(&["build", r]).expect_code(0);
    let status = |p: &Project| p.run(&["--json", "status", r]).json()[0].clone();
    let s = status(&p);
    assert_eq!(s["status"], "live");
    let results: Vec<(String, String)> = s["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["name"].as_str().unwrap().to_string(),
                c["result"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    assert_eq!(results.len(), 2, "{s}");
    assert!(results
        .iter()
        .any(|(n, r)| n == "summary_is_consistent" && r == "passed"));
    // A summary that names no phrase fails its blocking check: it is not live.
    let mut summary = json(&p, r);
    let good = summary.clone();
    summary["top_phrases"] = serde_json::json!([]);
    p.file(&format!("data/{r}"), &summary.to_string());
    p.run(&["check", r]).expect_code(1);
    let s = status(&p);
    assert_eq!(s["status"], "check_failed", "{s}");
    assert!(s["reasons"][0]
        .as_str()
        .unwrap()
        .starts_with("failed check `summary_is_consistent`: no phrases"));
    p.file(&format!("data/{r}"), &good.to_string());
    p.run(&["check", r]).expect_code(0);
    assert_eq!(status(&p)["status"], "live");
}

/// The `bin` of a venv with DuckDB, made once for the tests; `None`, saying why, when pip cannot
/// install it (no network to PyPI).
fn duckdb_venv() -> Option<PathBuf> {
    let venv = Path::new(env!("CARGO_TARGET_TMPDIR")).join("duckdb-venv");
    let python = venv.join("bin/python");
    let has_duckdb = || {
        Command::new(&python)
            .args(["-c", "import duckdb"])
            .status()
            .is_ok_and(|s| s.success())
    };
    if !has_duckdb() {
        let made = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status();
        let pip = Command::new(&python)
            .args(["-m", "pip", "install", "-q", "duckdb"])
            .output();
        if !made.is_ok_and(|s| s.success()) || !has_duckdb() {
            eprintln!(
                "skipped: duckdb cannot be installed in {} ({})",
                venv.display(),
                pip.map(|o| String::from_utf8_lossy(&o.stderr).into_owned())
                    .unwrap_or_else(|e| e.to_string())
            );
            return None;
        }
    }
    Some(venv.join("bin"))
}

#[test]
fn duckdb_trips_builds_a_checked_week_of_parquet_with_row_metrics_and_lineage() {
    let Some(bin) = duckdb_venv() else { return };
    let receiver = crate::openlineage::Receiver::start();
    let p = example("duckdb_trips");
    let python_src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../python/src");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap());
    let out = p
        .command()
        .args(["build", "weekly/zones/week=2024-01-01"])
        .env("PATH", &path)
        .env("PYTHONPATH", &python_src)
        .env("OPENLINEAGE_URL", &receiver.url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(
        completed_runs(&p),
        15,
        "7 days generated, 7 cleaned, 1 week"
    );
    let sql = |q: &str| p.run(&["--json", "sql", q]).json()["rows"].clone();

    // Every clean day passed its two checks (no negative fare; a usual row count, learning
    // the first five days); each run reported its rows.
    let checks = sql("SELECT status, count(*) FROM events WHERE kind = 'check' GROUP BY status");
    assert_eq!(checks, serde_json::json!([["completed", 14]]));
    let clean_rows =
        sql("SELECT sum(value) FROM run_metrics WHERE job = 'clean_trips' AND name = 'rows'")[0][0]
            .as_f64()
            .unwrap() as u64;
    assert!(clean_rows > 7 * 2000, "{clean_rows}");

    // The week sums every clean trip, over the 40 zones.
    let week = p.path().join("data/weekly/zones/week=2024-01-01");
    let read = Command::new(bin.join("python"))
        .args([
            "-c",
            "import duckdb, sys; print(*duckdb.connect().execute(f\"SELECT sum(trips), count(*) FROM read_parquet('{sys.argv[1]}')\").fetchone())",
        ])
        .arg(&week)
        .output()
        .unwrap();
    let read = String::from_utf8_lossy(&read.stdout);
    assert_eq!(read.trim(), format!("{clean_rows} 40"));

    // Lineage: each run a START and a COMPLETE; the week read `clean/trips`, 7 partitions.
    let events = receiver.events();
    assert_eq!(events.len(), 30);
    crate::openlineage::assert_valid(&events);
    let week = events
        .iter()
        .find(|e| e["eventType"] == "COMPLETE" && e["job"]["name"] == "weekly_zones")
        .unwrap();
    assert_eq!(week["inputs"][0]["name"], "clean/trips");
    let read = &week["inputs"][0]["facets"]["databuild_partitions"]["partitions"];
    assert_eq!(read.as_array().unwrap().len(), 7);
    assert_eq!(
        week["outputs"][0]["outputFacets"]["outputStatistics"]["rowCount"],
        40
    );
}
