//! One status, asked five ways: `status`, `partitions --status`, `datasets`, the dashboard's
//! grid and the SQL view agree about the same live, stale, tainted, failed and missing
//! partitions (the SQL view says what the log records: documented as such). The grid's default
//! window holds the newest partition.

use std::collections::BTreeMap;

use serde_json::json;

use crate::util::{Project, Service};

/// `day/{date}` reads `raw/{date}`, with the args its config gives (`choice-DATE`, else `a`);
/// its run fails when `fail-DATE` exists.
const GRAPH: &str = r#"
[graph]
name = "agree"
[[dataset]]
name = "raw"
pattern = "raw/{date:date}"
[[job]]
name = "day"
outputs = ["day/{date:date}"]
config = ["sh", "config.sh"]
command = ["sh", "-c", "echo \"building $DATABUILD_FIELD_DATE\"; if [ -e fail-$DATABUILD_FIELD_DATE ]; then echo \"day $DATABUILD_FIELD_DATE broke\"; exit 3; fi; mkdir -p data/day && touch data/day/$DATABUILD_FIELD_DATE"]
"#;

const CONFIG: &str = r#"
printf '{"configs": ['
sep=
for out in "$@"; do
  d=${out#day/}
  arg=$(cat "choice-$d" 2>/dev/null || echo a)
  printf '%s{"outputs": ["%s"], "inputs": [{"ref": "raw/%s"}], "args": ["%s"]}' "$sep" "$out" "$d" "$arg"
  sep=,
done
printf ']}\n'
"#;

const LIVE: &str = "day/2024-01-01";
const STALE: &str = "day/2024-01-02";
const TAINTED: &str = "day/2024-01-03";
const FAILED: &str = "day/2024-01-04";
const MISSING: &str = "day/2024-01-05";
/// Built first, so that the newest run built an older date.
const NEWEST: &str = "day/2025-06-01";

/// A project whose partitions are each in one state: `NEWEST` and `LIVE` live, `STALE` stale
/// (its config now gives other args), `TAINTED` tainted, `FAILED` failed, `MISSING` built but
/// its data gone.
fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file("config.sh", CONFIG);
    for r in [NEWEST, LIVE, STALE, TAINTED, FAILED, MISSING] {
        p.partition(&r.replace("day/", "raw/"));
    }
    p.run(&["build", NEWEST]).expect_code(0);
    p.run(&["build", LIVE, STALE, TAINTED, MISSING])
        .expect_code(0);
    p.file(&format!("fail-{}", &FAILED[4..]), "");
    p.run(&["build", FAILED]).expect_code(1);
    p.file(&format!("choice-{}", &STALE[4..]), "b");
    p.run(&["taint", TAINTED, "--reason", "bad rows"])
        .expect_code(0);
    std::fs::remove_file(p.path().join("data").join(MISSING)).unwrap();
    p
}

fn expected() -> BTreeMap<&'static str, &'static str> {
    BTreeMap::from([
        (NEWEST, "live"),
        (LIVE, "live"),
        (STALE, "stale"),
        (TAINTED, "tainted"),
        (FAILED, "failed"),
        (MISSING, "missing"),
    ])
}

/// Each cell of a grid page: its ref (its title's first words) and its state.
fn grid_cells(html: &str) -> BTreeMap<String, String> {
    let mut cells = BTreeMap::new();
    for part in html.split("data-status=\"").skip(1) {
        let Some((status, rest)) = part.split_once('"') else {
            continue;
        };
        let Some(title) = rest.strip_prefix("><title>") else {
            continue;
        };
        let Some((r, _)) = title.split_once(':') else {
            continue;
        };
        cells.insert(r.to_string(), status.to_string());
    }
    cells
}

/// Asks all five, through `global` (`--server URL` or nothing) and the service `s`.
fn ask_all(p: &Project, global: &[&str], s: &Service) {
    let run = |args: &[&str]| {
        let mut all: Vec<&str> = global.to_vec();
        all.push("--json");
        all.extend_from_slice(args);
        let out = p.run(&all);
        out.expect_code(0);
        out.json()
    };
    let expected = expected();
    let refs: Vec<&str> = expected.keys().copied().collect();

    // 1. status
    let mut args = vec!["status"];
    args.extend(&refs);
    let said: BTreeMap<String, String> = run(&args)
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["ref"].as_str().unwrap().into(),
                s["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    let want: BTreeMap<String, String> = expected
        .iter()
        .map(|(r, s)| (r.to_string(), s.to_string()))
        .collect();
    assert_eq!(said, want, "status");

    // 2. partitions --status S lists exactly the partitions `status` says are S.
    for status in ["live", "stale", "tainted", "failed", "building"] {
        let listed: Vec<String> = run(&["partitions", "--pattern", "day/*", "--status", status])
            ["partitions"]
            .as_array()
            .unwrap()
            .iter()
            .map(|i| {
                assert_eq!(i["status"], status, "{i}");
                i["ref"].as_str().unwrap().to_string()
            })
            .collect();
        let want: Vec<String> = expected
            .iter()
            .filter(|(_, s)| **s == status)
            .map(|(r, _)| r.to_string())
            .collect();
        assert_eq!(listed, want, "partitions --status {status}");
    }
    // Unfiltered, each as `status` says it.
    let all: BTreeMap<String, String> = run(&["partitions", "--pattern", "day/*"])["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["ref"].as_str().unwrap().into(),
                i["status"].as_str().unwrap().into(),
            )
        })
        .collect();
    assert_eq!(all, want, "partitions");

    // 3. datasets counts them so.
    let datasets = run(&["datasets"]);
    let day = datasets["datasets"]
        .as_array()
        .unwrap()
        .iter()
        .find(|d| d["name"] == "day")
        .unwrap();
    assert_eq!(
        day["partitions"],
        json!({"live": 2, "stale": 1, "tainted": 1, "failed": 1, "missing": 1}),
        "datasets"
    );

    // 4. The dashboard's grid, its window on January 2024.
    let (code, html) = s.call("GET", "/datasets/day?end=2024-01-31", None, None);
    assert_eq!(code, 200, "{html}");
    let cells = grid_cells(&html);
    for (r, status) in &expected {
        if *r != NEWEST {
            assert_eq!(
                cells.get(*r).map(String::as_str),
                Some(*status),
                "grid cell {r}"
            );
        }
    }
    // Its default window holds the newest partition, though the newest run built older ones.
    let (code, html) = s.call("GET", "/datasets/day", None, None);
    assert_eq!(code, 200, "{html}");
    assert_eq!(
        grid_cells(&html).get(NEWEST).map(String::as_str),
        Some("live"),
        "the default window shows the newest partition"
    );
    // A state the grid does not know is the request's fault, naming those it knows.
    let (code, html) = s.call("GET", "/datasets/day?state=fresh", None, None);
    assert_eq!(code, 400);
    assert!(
        html.contains("`fresh` is not a partition status; use live, stale, check_failed, missing, building, failed, tainted"),
        "{html}"
    );
    // And the listing's (API and dashboard).
    let (code, body) = s.get("/api/v1/partitions?status=fresh");
    assert_eq!(code, 400);
    assert_eq!(
        body["error"],
        "`fresh` is not a partition status; use live, stale, building, failed, tainted"
    );
    assert_eq!(s.call("GET", "/partitions?status=fresh", None, None).0, 400);

    // 5. SQL: `partition_status` is what the log records (contract section 4): every partition
    // `status` derives from its record alone agrees; a stale one, or one whose data is gone, is
    // recorded `live` (`status` and the listings derive the rest).
    let rows = run(&["sql", "SELECT partition_ref, status FROM partition_status WHERE partition_ref GLOB 'day/*' ORDER BY partition_ref"]);
    let recorded: BTreeMap<String, String> = rows["rows"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r[0].as_str().unwrap().into(), r[1].as_str().unwrap().into()))
        .collect();
    let derived_from_record: BTreeMap<String, String> = expected
        .iter()
        .map(|(r, s)| {
            let recorded = match *s {
                "stale" | "missing" => "live",
                other => other,
            };
            (r.to_string(), recorded.to_string())
        })
        .collect();
    assert_eq!(recorded, derived_from_record, "partition_status");
}

#[test]
fn status_partitions_datasets_grid_and_sql_agree() {
    let p = project();
    let s = Service::start(&p, &[]);
    ask_all(&p, &[], &s);
    let url = s.url.clone();
    ask_all(&p, &["--server", &url], &s);
}

/// `bad` fails after a last log line naming itself; `mid` reads it, `top` reads `mid`.
const CHAIN: &str = r#"
[graph]
name = "chain"
[[job]]
name = "bad"
outputs = ["bad/{n:int}"]
command = ["sh", "-c", "echo starting; echo \"bad $DATABUILD_FIELD_N gave up\"; exit 4"]
[[job]]
name = "mid"
outputs = ["mid/{n:int}"]
inputs = ["bad/{n}"]
command = ["sh", "-c", "mkdir -p data/mid; touch data/mid/$DATABUILD_FIELD_N"]
[[job]]
name = "top"
outputs = ["top/{n:int}"]
inputs = ["mid/{n}"]
command = ["sh", "-c", "mkdir -p data/top; touch data/top/$DATABUILD_FIELD_N"]
"#;

#[test]
fn explain_names_the_run_that_failed_up_the_inputs() {
    let p = Project::new(CHAIN);
    p.run(&["build", "top/1"]).expect_code(1);
    let run = crate::util::current_run(&p, "bad/1");
    let s = Service::start(&p, &[]);
    let url = s.url.clone();
    for global in [vec![], vec!["--server", url.as_str()]] {
        let ask = |args: &[&str]| {
            let mut all = global.clone();
            all.extend_from_slice(args);
            let out = p.run(&all);
            out.expect_code(0);
            out
        };
        let mut args = vec!["--json", "explain", "top/1"];
        let v = ask(&args).json();
        assert_eq!(v["status"], "missing", "{v}");
        assert_eq!(
            v["reasons"][0],
            format!(
                "its input mid/1 cannot be built: bad/1 failed in run {run} (last log line: bad 1 gave up)"
            ),
            "{v}"
        );
        assert!(
            !v["reasons"].to_string().contains("no run has built it yet"),
            "{v}"
        );
        assert_eq!(v["root_cause"]["ref"], "bad/1", "{v}");
        assert_eq!(v["root_cause"]["job_run_id"], run.as_str(), "{v}");
        assert_eq!(v["root_cause"]["log_tail"], "bad 1 gave up", "{v}");
        assert_eq!(v["root_cause"]["via"], "mid/1", "{v}");
        // A direct input: no `via`.
        args[2] = "mid/1";
        let v = ask(&args).json();
        assert_eq!(
            v["reasons"][0],
            format!("its input bad/1 failed in run {run} (last log line: bad 1 gave up)"),
            "{v}"
        );
        assert!(v["root_cause"].get("via").is_none(), "{v}");
        // The failed partition itself: its own run.
        args[2] = "bad/1";
        let v = ask(&args).json();
        assert_eq!(v["status"], "failed", "{v}");
        assert_eq!(v["root_cause"]["job_run_id"], run.as_str(), "{v}");
        // In words too.
        let out = ask(&["explain", "top/1"]);
        assert!(
            out.stdout.contains(&format!(
                "root cause: bad/1 failed in run {run} (last log line: bad 1 gave up)"
            )),
            "{}",
            out.stdout
        );
    }
}
