//! The planner's tests: plans of small graphs checked line by line, and property tests that
//! planning is deterministic and complete.

use std::collections::{HashMap, HashSet};

use super::walk::PIPELINED_RUNS;
use super::*;
use proptest::prelude::*;

type ConfigFn = fn(&[PartitionRef]) -> Result<Vec<JobConfig>, String>;

/// A resolver over fixed facts: which externals exist, and a config function for dynamic jobs.
#[derive(Default)]
struct Facts {
    present: HashSet<String>,
    all_present: bool,
    config: Option<ConfigFn>,
    config_calls: Vec<(String, usize)>,
}

impl Resolver for Facts {
    fn external_available(
        &mut self,
        _: &Dataset,
        r: &PartitionRef,
    ) -> Result<bool, crate::ResolveError> {
        Ok(self.all_present || self.present.contains(r.as_str()))
    }
    fn job_configs(
        &mut self,
        job: &Job,
        outputs: &[PartitionRef],
    ) -> Result<Vec<JobConfig>, crate::ResolveError> {
        self.config_calls.push((job.name.clone(), outputs.len()));
        Ok((self.config.expect("a config function"))(outputs)?)
    }
}

struct States(HashMap<&'static str, KnownState>);

impl StateView for States {
    fn state(&self, r: &str) -> Result<KnownState, StateError> {
        Ok(self.0.get(r).cloned().unwrap_or(KnownState::Missing))
    }
}

fn graph(text: &str) -> Graph {
    Graph::parse(text, "test.toml").unwrap()
}

fn refs(list: &[&str]) -> Vec<PartitionRef> {
    list.iter()
        .map(|r| PartitionRef::new(*r).unwrap())
        .collect()
}

fn plan_with(
    g: &Graph,
    wanted: &[&str],
    states: &dyn StateView,
    facts: &mut Facts,
) -> Result<Plan, PlanError> {
    let request = PlanRequest {
        refs: refs(wanted),
        ..Default::default()
    };
    plan(g, &request, states, facts)
}

fn simple_plan(g: &Graph, wanted: &[&str]) -> Result<Plan, PlanError> {
    plan_with(
        g,
        wanted,
        &NothingBuilt,
        &mut Facts {
            all_present: true,
            ..Default::default()
        },
    )
}

/// Compact rendering: one line per run, `job: outputs <- inputs`.
fn lines(p: &Plan) -> Vec<String> {
    p.runs
        .iter()
        .map(|r| {
            let outs: Vec<&str> = r.outputs.iter().map(|o| o.as_str()).collect();
            let ins: Vec<&str> = r.inputs.iter().map(|o| o.as_str()).collect();
            format!("{}: {} <- {}", r.job, outs.join(","), ins.join(","))
        })
        .collect()
}

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
command = ["x"]
[[job]]
name = "b"
outputs = ["b/{d:date}"]
inputs = ["a/{d}"]
command = ["x"]
[[job]]
name = "c"
outputs = ["c/{d:date}"]
inputs = ["a/{d}"]
command = ["x"]
[[job]]
name = "d"
outputs = ["d/{d:date}"]
inputs = ["b/{d}", "c/{d}"]
command = ["x"]
"#;

#[test]
fn diamond_plans_each_run_once_in_order() {
    let p = simple_plan(&graph(DIAMOND), &["d/2020-01-01"]).unwrap();
    assert_eq!(
        lines(&p),
        [
            "a: a/2020-01-01 <- raw/2020-01-01",
            "b: b/2020-01-01 <- a/2020-01-01",
            "c: c/2020-01-01 <- a/2020-01-01",
            "d: d/2020-01-01 <- b/2020-01-01,c/2020-01-01",
        ]
    );
    assert_eq!(p.runs[3].depends_on, [1, 2]);
    assert_eq!(p.skipped, refs(&["raw/2020-01-01"]));
}

/// A log that cannot be read.
struct Unreadable;

impl StateView for Unreadable {
    fn state(&self, _: &str) -> Result<KnownState, StateError> {
        Err(StateError("disk I/O error".into()))
    }
}

#[test]
fn a_state_that_cannot_be_read_stops_planning_instead_of_reading_as_missing() {
    let err = plan_with(
        &graph(DIAMOND),
        &["d/2020-01-01"],
        &Unreadable,
        &mut Facts {
            all_present: true,
            ..Default::default()
        },
    )
    .unwrap_err();
    assert_eq!(err, PlanError::State(StateError("disk I/O error".into())));
}

#[test]
fn fan_in_over_a_domain_and_trailing_window() {
    let g = graph(
        r#"
[graph]
name = "fan"
[graph.domains]
category = ["comedy", "news"]
[[dataset]]
name = "raw"
pattern = "raw/category={category}/date={date:date}"
[[job]]
name = "weekly"
outputs = ["weekly/category={category}/date={date:date}"]
inputs = ["raw/category={category}/date={date-6d..date}"]
command = ["x"]
[[job]]
name = "all"
outputs = ["all/date={date:date}"]
inputs = ["weekly/category={category=*}/date={date}"]
command = ["x"]
"#,
    );
    let p = simple_plan(&g, &["all/date=2020-01-07"]).unwrap();
    assert_eq!(p.runs.len(), 3);
    assert_eq!(&*p.runs[2].job, "all");
    assert_eq!(p.runs[2].inputs.len(), 2);
    assert_eq!(p.runs[0].inputs.len(), 7);
    assert_eq!(
        p.runs[0].inputs[0].as_str(),
        "raw/category=comedy/date=2020-01-01"
    );
    assert_eq!(p.skipped.len(), 14);
}

#[test]
fn missing_externals_are_listed_with_who_needs_them() {
    let g = graph(DIAMOND);
    let mut facts = Facts::default();
    let p = plan_with(&g, &["b/2020-01-01"], &NothingBuilt, &mut facts).unwrap();
    assert!(!p.is_complete());
    assert_eq!(p.missing[0].partition_ref.as_str(), "raw/2020-01-01");
    assert_eq!(
        p.missing[0].needed_by.as_deref(),
        Some("job `a` for `a/2020-01-01`")
    );
    // `a` reads it, and `b` reads `a`: neither can run until it is there.
    let blocked: Vec<&str> = p
        .blocked_runs()
        .into_iter()
        .map(|i| p.runs[i].outputs[0].as_str())
        .collect();
    assert_eq!(blocked.len(), p.runs.len(), "{blocked:?}");
    assert!(blocked.contains(&"b/2020-01-01"), "{blocked:?}");
    let mut all_there = Facts {
        all_present: true,
        ..Default::default()
    };
    let complete = plan_with(&g, &["b/2020-01-01"], &NothingBuilt, &mut all_there).unwrap();
    assert!(complete.blocked_runs().is_empty());
}

#[test]
fn live_refs_are_skipped_building_refs_delegated_and_force_rebuilds() {
    let g = graph(DIAMOND);
    let states = States(HashMap::from([
        ("b/2020-01-01", KnownState::Live),
        (
            "c/2020-01-01",
            KnownState::Building {
                build_request_id: "other".into(),
            },
        ),
    ]));
    let mut facts = Facts {
        all_present: true,
        ..Default::default()
    };
    let p = plan_with(&g, &["d/2020-01-01"], &states, &mut facts).unwrap();
    assert_eq!(lines(&p), ["d: d/2020-01-01 <- b/2020-01-01,c/2020-01-01"]);
    assert_eq!(p.skipped, refs(&["b/2020-01-01"]));
    assert_eq!(p.delegated[0].build_request_id, "other");

    let request = PlanRequest {
        refs: refs(&["b/2020-01-01"]),
        force: true,
        ..Default::default()
    };
    let p = plan(&g, &request, &states, &mut facts).unwrap();
    assert_eq!(p.runs.len(), 2, "forced b, and a which is missing");
    assert_eq!(p.runs[1].reasons, [BuildReason::Forced]);
}

#[test]
fn stale_refs_rebuild_unless_allowed() {
    let g = graph(DIAMOND);
    let states = States(HashMap::from([
        (
            "a/2020-01-01",
            KnownState::Stale {
                reason: "job version changed".into(),
                by_code: false,
            },
        ),
        ("b/2020-01-01", KnownState::Live),
    ]));
    let mut facts = Facts {
        all_present: true,
        ..Default::default()
    };
    let p = plan_with(&g, &["b/2020-01-01"], &states, &mut facts).unwrap();
    assert!(p.runs.is_empty(), "b is live: its inputs are not visited");
    let p = plan_with(&g, &["c/2020-01-01"], &states, &mut facts).unwrap();
    assert_eq!(
        p.runs[0].reasons,
        [BuildReason::Stale("job version changed".into())]
    );
    let request = PlanRequest {
        refs: refs(&["c/2020-01-01"]),
        allow_stale: true,
        ..Default::default()
    };
    let p = plan(&g, &request, &states, &mut facts).unwrap();
    assert_eq!(lines(&p), ["c: c/2020-01-01 <- a/2020-01-01"]);
}

#[test]
fn a_code_change_is_kept_on_the_stale_reason_and_shown_as_its_text() {
    let g = graph(DIAMOND);
    let states = States(HashMap::from([(
        "a/2020-01-01",
        KnownState::Stale {
            reason: "`run.sh` changed".into(),
            by_code: true,
        },
    )]));
    let mut facts = Facts {
        all_present: true,
        ..Default::default()
    };
    let p = plan_with(&g, &["c/2020-01-01"], &states, &mut facts).unwrap();
    let why = StaleReason {
        reason: "`run.sh` changed".into(),
        by_code: true,
    };
    assert_eq!(p.runs[0].reasons, [BuildReason::Stale(why)]);
    // The plan's JSON is as before: the flag is for counting, the text for people.
    assert_eq!(
        serde_json::to_value(&p.runs[0].reasons).unwrap(),
        serde_json::json!([{ "stale": "`run.sh` changed" }])
    );
}

#[test]
fn batches_group_outputs() {
    let g = graph(&DIAMOND.replace("name = \"a\"\n", "name = \"a\"\nbatch = 3\n"));
    let wanted: Vec<String> = (1..=7).map(|d| format!("a/2020-01-0{d}")).collect();
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let p = simple_plan(&g, &wanted).unwrap();
    let sizes: Vec<usize> = p.runs.iter().map(|r| r.outputs.len()).collect();
    assert_eq!(sizes, [3, 3, 1]);
    assert_eq!(p.runs[0].inputs.len(), 3);
}

/// A job of a huge batch that builds a few refs costs what the few refs do: a round's refs are
/// held in slices of `PIPELINED_RUNS` runs, grown as they fill, never reserved at that size.
#[test]
fn a_huge_batch_of_a_few_refs_plans_as_one_run() {
    let g = graph(&DIAMOND.replace("name = \"a\"\n", "name = \"a\"\nbatch = 4000000000\n"));
    let p = simple_plan(&g, &["a/2020-01-01", "a/2020-01-02"]).unwrap();
    let sizes: Vec<usize> = p.runs.iter().map(|r| r.outputs.len()).collect();
    assert_eq!(sizes, [2]);
}

#[test]
fn unknown_refs_name_who_needs_them() {
    let g = graph(DIAMOND);
    let err = simple_plan(&g, &["nope/1"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "no job builds `nope/1` and no dataset declares it"
    );
}

#[test]
fn cycles_print_the_cycle() {
    let g = graph(
        r#"
[graph]
name = "cycle"
[[job]]
name = "x"
outputs = ["x/{n:int}"]
inputs = ["y/{n}"]
command = ["x"]
[[job]]
name = "y"
outputs = ["y/{n:int}"]
inputs = ["x/{n}"]
command = ["x"]
"#,
    );
    let err = simple_plan(&g, &["x/1"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "dependency cycle: x/1 (job `x`) -> y/1 (job `y`) -> x/1 (job `x`)"
    );
}

#[test]
fn self_recursion_stops_at_a_live_base_or_says_why() {
    let text = r#"
[graph]
name = "cumulative"
[[job]]
name = "total"
outputs = ["total/{n:int}"]
inputs = ["total/{n-1}"]
command = ["x"]
"#;
    let g = graph(text);
    let states = States(HashMap::from([("total/0", KnownState::Live)]));
    let p = plan_with(&g, &["total/50"], &states, &mut Facts::default()).unwrap();
    assert_eq!(p.runs.len(), 50);
    assert_eq!(p.runs[0].outputs, refs(&["total/1"]));
    let err = simple_plan(&g, &["total/50"]).unwrap_err();
    assert!(err.to_string().contains("needs a base case"), "{err}");
}

const DYNAMIC: &str = r#"
[graph]
name = "basic"
[[job]]
name = "generate_number"
outputs = ["generated_number/{name}"]
command = ["gen"]
[[job]]
name = "sum"
outputs = ["sum/{names}"]
config = ["sum", "config"]
command = ["sum"]
"#;

fn sum_config(outputs: &[PartitionRef]) -> Result<Vec<JobConfig>, String> {
    Ok(outputs
        .iter()
        .map(|o| {
            let names = o.as_str().trim_start_matches("sum/");
            JobConfig {
                outputs: vec![o.clone()],
                inputs: names
                    .split('_')
                    .map(|n| ConfigInput {
                        partition_ref: PartitionRef::new(format!("generated_number/{n}")).unwrap(),
                        dep: DepKind::Materialize,
                    })
                    .collect(),
                args: vec![names.to_string()],
                env: BTreeMap::new(),
            }
        })
        .collect())
}

#[test]
fn dynamic_configs_are_asked_once_per_job_per_round() {
    let g = graph(DYNAMIC);
    let mut facts = Facts {
        config: Some(sum_config),
        ..Default::default()
    };
    let p = plan_with(
        &g,
        &["sum/a_b", "sum/b_c", "generated_number/z"],
        &NothingBuilt,
        &mut facts,
    )
    .unwrap();
    assert_eq!(facts.config_calls, [("sum".to_string(), 2)]);
    assert_eq!(p.runs.len(), 6);
    let sum = p
        .runs
        .iter()
        .find(|r| r.outputs[0].as_str() == "sum/a_b")
        .unwrap();
    assert_eq!(sum.args(), ["a_b"]);
    assert_eq!(sum.depends_on.len(), 2);
}

#[test]
fn bad_configs_are_clear_errors() {
    let g = graph(DYNAMIC);
    let cases: [(ConfigFn, &str); 4] = [
        (
            |_| Ok(vec![]),
            "no config covers the requested output `sum/a`",
        ),
        (
            |_| Err("exit status 3".into()),
            "config of job `sum` failed: exit status 3",
        ),
        (
            |_| {
                Ok(vec![JobConfig {
                    outputs: refs(&["sum/a", "generated_number/a"]),
                    inputs: vec![],
                    args: vec![],
                    env: BTreeMap::new(),
                }])
            },
            "lists output `generated_number/a`, which job `sum` does not build",
        ),
        (
            |o| {
                let mut c = sum_config(o)?;
                c.extend(sum_config(o)?);
                Ok(c)
            },
            "appears in two configs",
        ),
    ];
    for (config, needle) in cases {
        let mut facts = Facts {
            config: Some(config),
            ..Default::default()
        };
        let err = plan_with(&g, &["sum/a"], &NothingBuilt, &mut facts)
            .unwrap_err()
            .to_string();
        assert!(err.contains(needle), "{err}");
    }
}

#[test]
fn config_responses_parse_strictly() {
    let ok = JobConfig::parse_response(
        r#"{"configs": [{"outputs": ["sum/a"], "inputs": [{"ref": "x/a", "dep": "query"}], "args": ["a"], "env": {"K": "V"}}]}"#,
    )
    .unwrap();
    assert_eq!(ok[0].inputs[0].dep, DepKind::Query);
    for bad in [
        "not json",
        r#"{"configs": [{"outputs": ["../etc"]}]}"#,
        r#"{"configs": [{"outputs": ["a"], "inputs": [{"ref": "b", "dep": "maybe"}]}]}"#,
        r#"{"confs": []}"#,
    ] {
        assert!(JobConfig::parse_response(bad).is_err(), "{bad}");
    }
    // A log line before the JSON: quoted, with where logs belong.
    let err = JobConfig::parse_response("loading graph...\n{\"configs\": []}").unwrap_err();
    assert_eq!(
        err.began.as_deref(),
        Some("loading graph...\\n{\\\"configs\\\": []}")
    );
    assert!(
        err.to_string().contains("print log lines on stderr"),
        "{err}"
    );
    let err = JobConfig::parse_response(r#"{"confs": []}"#).unwrap_err();
    assert_eq!(err.began, None, "JSON of the wrong shape is not a log line");
}

proptest! {
    /// Planning is deterministic, covers every requested ref once, and orders runs after their deps.
    #[test]
    fn plans_are_deterministic_complete_and_ordered(
        days in proptest::collection::vec(0u32..60, 1..20),
        targets in proptest::collection::vec(0usize..4, 1..20),
    ) {
        let g = graph(DIAMOND);
        let wanted: Vec<String> = days
            .iter()
            .zip(targets.iter().cycle())
            .map(|(d, t)| {
                let date = chrono::NaiveDate::from_ymd_opt(2020, 1, 1).unwrap() + chrono::Duration::days(*d as i64);
                format!("{}/{}", ["a", "b", "c", "d"][*t], crate::pattern::format_date(date))
            })
            .collect();
        let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
        let first = simple_plan(&g, &wanted).unwrap();
        let second = simple_plan(&g, &wanted).unwrap();
        prop_assert_eq!(&first, &second);
        let mut built = HashMap::new();
        for (i, run) in first.runs.iter().enumerate() {
            for d in &run.depends_on {
                prop_assert!(*d < i);
            }
            for o in &run.outputs {
                prop_assert!(built.insert(o.clone(), i).is_none(), "built twice: {}", o);
            }
        }
        for w in &wanted {
            prop_assert!(built.contains_key(*w));
        }
    }
}

const TABLES: &str = r#"
[graph]
name = "t"
[[source]]
name = "o"
kind = "webhook"
retention = "7d"
[[table]]
name = "o"
source = "o"
version = 1
columns = { id = "int" }
[[table]]
name = "o"
source = "o"
version = 2
columns = { id = "int", note = "str?" }
[[job]]
name = "sum"
outputs = ["sum/date={date:date}"]
inputs = ["o/date={date}"]
command = ["x"]
migrate = ["m"]
"#;

/// Table versions resolve through the resolver; here every day loads from its raw partition.
fn load_from_raw(outputs: &[PartitionRef]) -> Result<Vec<JobConfig>, String> {
    Ok(outputs
        .iter()
        .filter(|o| !o.as_str().contains("/errors/"))
        .map(|o| {
            let (prefix, date) = o.as_str().rsplit_once("date=").unwrap();
            JobConfig {
                outputs: refs(&[o.as_str(), &format!("{prefix}errors/date={date}")]),
                inputs: vec![ConfigInput {
                    partition_ref: PartitionRef::new(format!("source/o/date={date}")).unwrap(),
                    dep: DepKind::Materialize,
                }],
                args: vec!["load".into()],
                env: BTreeMap::new(),
            }
        })
        .collect())
}

struct Promoted(u32);

impl StateView for Promoted {
    fn state(&self, _: &str) -> Result<KnownState, StateError> {
        Ok(KnownState::Missing)
    }
    fn promoted(&self, _: &str) -> Option<u32> {
        Some(self.0)
    }
}

#[test]
fn aliases_read_the_promoted_version_or_a_pinned_one() {
    let g = graph(TABLES);
    let mut facts = Facts {
        all_present: true,
        config: Some(load_from_raw),
        ..Default::default()
    };
    let p = plan_with(&g, &["sum/date=2026-01-01"], &NothingBuilt, &mut facts).unwrap();
    assert_eq!(
        lines(&p),
        [
            "o.v1: o/v1/date=2026-01-01,o/v1/errors/date=2026-01-01 <- source/o/date=2026-01-01",
            "sum: sum/date=2026-01-01 <- o/v1/date=2026-01-01",
        ]
    );
    assert_eq!(
        p.runs[1].aliased(),
        [(
            PartitionRef::new("o/date=2026-01-01").unwrap(),
            PartitionRef::new("o/v1/date=2026-01-01").unwrap()
        )]
    );
    let p = plan_with(&g, &["sum/date=2026-01-01"], &Promoted(2), &mut facts).unwrap();
    assert_eq!(p.runs[1].inputs, refs(&["o/v2/date=2026-01-01"]));
    let request = PlanRequest {
        refs: refs(&["sum/date=2026-01-01", "o/date=2026-01-02"]),
        pins: BTreeMap::from([("o".to_string(), 1)]),
        ..Default::default()
    };
    let p = plan(&g, &request, &Promoted(2), &mut facts).unwrap();
    assert_eq!(
        p.runs.iter().filter(|r| r.job.as_ref() == "o.v1").count(),
        2,
        "pins win: {:?}",
        lines(&p)
    );
}

#[test]
fn kept_partitions_are_carried_forward_by_migrate_or_left_alone() {
    let g = graph(TABLES);
    let states = States(HashMap::from([(
        "sum/date=2026-01-01",
        KnownState::Kept {
            reason: "not rebuildable".into(),
        },
    )]));
    let mut facts = Facts {
        all_present: true,
        config: Some(load_from_raw),
        ..Default::default()
    };
    let p = plan_with(&g, &["sum/date=2026-01-01"], &states, &mut facts).unwrap();
    assert_eq!(lines(&p), ["sum: sum/date=2026-01-01 <- "]);
    assert!(p.runs[0].is_carry_forward());
    let without = graph(&TABLES.replace("migrate = [\"m\"]\n", ""));
    let p = plan_with(&without, &["sum/date=2026-01-01"], &states, &mut facts).unwrap();
    assert!(p.runs.is_empty());
    assert_eq!(p.skipped, refs(&["sum/date=2026-01-01"]));
}

/// Rounds larger than a pipeline slice expand their templates on a second thread: the plan must
/// be the same as one made slice by slice, with inputs shared between the runs that read them.
#[test]
fn large_rounds_plan_like_small_ones() {
    let g = graph(DIAMOND);
    let start = chrono::NaiveDate::from_ymd_opt(2000, 1, 1).unwrap();
    let days: Vec<String> = (0..(PIPELINED_RUNS as i64 * 2 + 17))
        .map(|i| {
            format!(
                "d/{}",
                crate::pattern::format_date(start + chrono::Duration::days(i))
            )
        })
        .collect();
    let wanted: Vec<&str> = days.iter().map(String::as_str).collect();
    let whole = simple_plan(&g, &wanted).unwrap();
    assert_eq!(whole.runs.len(), wanted.len() * 4);
    let mut position = HashMap::new();
    for (i, run) in whole.runs.iter().enumerate() {
        assert!(run.depends_on.iter().all(|&d| d < i));
        position.insert(run.outputs[0].clone(), i);
    }
    // Day by day, the same runs with the same inputs and dependencies.
    for day in wanted.iter().step_by(997) {
        let alone = simple_plan(&g, &[day]).unwrap();
        for run in &alone.runs {
            let same = &whole.runs[position[&run.outputs[0]]];
            assert_eq!((&same.job, &same.inputs), (&run.job, &run.inputs));
            let deps: Vec<_> = same
                .depends_on
                .iter()
                .map(|&d| &whole.runs[d].outputs[0])
                .collect();
            let alone_deps: Vec<_> = run
                .depends_on
                .iter()
                .map(|&d| &alone.runs[d].outputs[0])
                .collect();
            assert_eq!(deps, alone_deps);
        }
    }
    // `b` and `c` read the same `a` partition: one shared ref, not two copies.
    let b = &whole.runs[position[&PartitionRef::new("b/2000-01-01").unwrap()]];
    let c = &whole.runs[position[&PartitionRef::new("c/2000-01-01").unwrap()]];
    assert!(std::ptr::eq(b.inputs[0].as_str(), c.inputs[0].as_str()));
}

#[test]
fn a_template_error_in_a_late_slice_stops_planning_with_it() {
    let g = graph(
        r#"
[graph]
name = "ranges"
[[dataset]]
name = "v"
pattern = "v/{n:int}"
[[job]]
name = "sum"
outputs = ["sum/lo={lo:int}/hi={hi:int}"]
inputs = ["v/{lo..hi}"]
command = ["x"]
"#,
    );
    let mut wanted: Vec<String> = (0..PIPELINED_RUNS * 3)
        .map(|i| format!("sum/lo={i}/hi={i}"))
        .collect();
    wanted.push("sum/lo=0/hi=99999999".into());
    let wanted: Vec<&str> = wanted.iter().map(String::as_str).collect();
    let err = simple_plan(&g, &wanted).unwrap_err();
    assert!(
        matches!(&err, PlanError::Template { job, message } if job == "sum" && message.contains("more than the limit")),
        "{err}"
    );
}

/// States where some `sum/` partitions are live, built by runs that recorded these configs.
struct BuiltSums(HashMap<&'static str, BuiltWith>);

impl StateView for BuiltSums {
    fn state(&self, r: &str) -> Result<KnownState, StateError> {
        Ok(
            if self.0.contains_key(r) || r.starts_with("generated_number/") {
                KnownState::Live
            } else {
                KnownState::Missing
            },
        )
    }
    fn checks_configs(&self) -> bool {
        true
    }
    fn config_change(&self, r: &str, job: &Job, config: &JobConfig) -> Option<String> {
        assert_eq!(job.name, "sum");
        let g = graph(DYNAMIC);
        config_change(&g, self.0.get(r)?, config)
    }
}

fn built_sum(inputs: &[&str]) -> BuiltWith {
    let names: Vec<&str> = inputs
        .iter()
        .map(|i| i.trim_start_matches("generated_number/"))
        .collect();
    BuiltWith {
        inputs: inputs.iter().map(|i| i.to_string()).collect(),
        args: vec![names.join("_")],
        env: BTreeMap::new(),
    }
}

#[test]
fn live_partitions_of_config_jobs_are_rebuilt_when_their_config_chooses_differently() {
    let g = graph(DYNAMIC);
    let states = BuiltSums(HashMap::from([
        // As its config says now.
        (
            "sum/a_b",
            built_sum(&["generated_number/a", "generated_number/b"]),
        ),
        // Built when it read `c` instead of `d`.
        (
            "sum/b_d",
            built_sum(&["generated_number/b", "generated_number/c"]),
        ),
    ]));
    let mut facts = Facts {
        config: Some(sum_config),
        ..Default::default()
    };
    let p = plan_with(&g, &["sum/a_b", "sum/b_d", "sum/e"], &states, &mut facts).unwrap();
    // One call for the round: the refs to build and the live ones to re-check.
    assert_eq!(facts.config_calls, [("sum".to_string(), 3)]);
    assert_eq!(
        p.skipped,
        refs(&[
            "sum/a_b",
            "generated_number/e",
            "generated_number/b",
            "generated_number/d"
        ])
    );
    let reasons: Vec<(String, BuildReason)> = p
        .runs
        .iter()
        .map(|r| (r.outputs[0].to_string(), r.reasons[0].clone()))
        .collect();
    assert_eq!(
        reasons,
        [
            ("sum/e".to_string(), BuildReason::Missing),
            (
                "sum/b_d".to_string(),
                BuildReason::Stale(
                    "its config now reads `generated_number/d` instead of `generated_number/c`"
                        .into()
                )
            ),
        ]
    );
    // Accepting stale partitions asks the config only about what must be built.
    let mut facts = Facts {
        config: Some(sum_config),
        ..Default::default()
    };
    let request = PlanRequest {
        refs: refs(&["sum/a_b", "sum/b_d"]),
        allow_stale: true,
        ..Default::default()
    };
    let p = plan(&g, &request, &states, &mut facts).unwrap();
    assert!(facts.config_calls.is_empty());
    assert!(p.runs.is_empty());
}

#[test]
fn config_changes_name_what_changed() {
    let g = graph("[graph]\nname = \"g\"\nshow_env = [\"MODE\"]\n[[job]]\nname = \"j\"\noutputs = [\"o/{x}\"]\nconfig = [\"c\"]\ncommand = [\"x\"]\n");
    let input = |r: &str, dep| ConfigInput {
        partition_ref: PartitionRef::new(r).unwrap(),
        dep,
    };
    let now = JobConfig {
        outputs: refs(&["o/1"]),
        inputs: vec![
            input("a/1", DepKind::Materialize),
            input("q/1", DepKind::Query),
        ],
        args: vec!["--fast".into()],
        env: BTreeMap::from([
            ("MODE".to_string(), "full".to_string()),
            ("TOKEN".to_string(), "s3cret".to_string()),
        ]),
    };
    let built = BuiltWith {
        inputs: vec!["a/1".into()],
        args: vec!["--fast".into()],
        env: BTreeMap::from([
            ("MODE".to_string(), "full".to_string()),
            ("TOKEN".to_string(), crate::graph::REDACTED.to_string()),
        ]),
    };
    // Query inputs are not recorded; a redacted value cannot be compared.
    assert_eq!(config_change(&g, &built, &now), None);
    let change = |f: &dyn Fn(&mut BuiltWith)| {
        let mut b = built.clone();
        f(&mut b);
        config_change(&g, &b, &now).unwrap()
    };
    assert_eq!(
        change(&|b| b.inputs = vec!["a/0".into()]),
        "its config now reads `a/1` instead of `a/0`"
    );
    assert_eq!(
        change(&|b| b.inputs.clear()),
        "its config now also reads `a/1`"
    );
    assert_eq!(
        change(&|b| b
            .inputs
            .extend(["a/2", "a/3", "a/4", "a/5"].map(String::from))),
        "its config no longer reads `a/2`, `a/3`, `a/4` and 1 more"
    );
    assert_eq!(
        change(&|b| b.args.clear()),
        "its config now passes args [\"--fast\"] instead of []"
    );
    assert_eq!(
        change(&|b| {
            b.env.insert("MODE".into(), "fast".into());
        }),
        "its config now sets env `MODE` to \"full\" instead of \"fast\""
    );
    assert_eq!(
        change(&|b| {
            b.env.remove("TOKEN");
        }),
        "its config now sets env `TOKEN`"
    );
    assert_eq!(
        change(&|b| {
            b.env.insert("OLD".into(), "1".into());
        }),
        "its config no longer sets env `OLD`"
    );
}

/// A config that reads the day before, back forever.
fn yesterday_config(outputs: &[PartitionRef]) -> Result<Vec<JobConfig>, String> {
    Ok(outputs
        .iter()
        .map(|o| {
            let day = crate::pattern::parse_date(o.as_str().trim_start_matches("x/")).unwrap();
            let before = crate::pattern::format_date(day.pred_opt().unwrap());
            JobConfig {
                outputs: vec![o.clone()],
                inputs: vec![ConfigInput {
                    partition_ref: PartitionRef::new(format!("x/{before}")).unwrap(),
                    dep: DepKind::Materialize,
                }],
                args: vec![],
                env: BTreeMap::new(),
            }
        })
        .collect())
}

#[test]
fn a_config_that_reads_its_own_past_without_a_base_case_stops_with_a_clear_error() {
    let g = graph("[graph]\nname = \"g\"\n[[job]]\nname = \"x\"\noutputs = [\"x/{date:date}\"]\nconfig = [\"c\"]\ncommand = [\"x\"]\n");
    let mut facts = Facts {
        config: Some(yesterday_config),
        ..Default::default()
    };
    let err = plan_with(&g, &["x/2024-01-01"], &NothingBuilt, &mut facts).unwrap_err();
    assert_eq!(facts.config_calls.len(), MAX_CONFIG_ROUNDS);
    assert_eq!(
        err.to_string(),
        "planning called config executables in 200 rounds without reaching live or external data (last: `x/2023-06-15`, asked of job `x`'s config); a job whose config reads its own earlier partitions needs a base case: a live partition or a dataset (to plan a longer chain, build its oldest partitions first)"
    );
    // With a live base within reach, it plans.
    let states = States(HashMap::from([("x/2023-12-01", KnownState::Live)]));
    let mut facts = Facts {
        config: Some(yesterday_config),
        ..Default::default()
    };
    let p = plan_with(&g, &["x/2024-01-01"], &states, &mut facts).unwrap();
    assert_eq!(p.runs.len(), 31);
}

#[test]
fn an_unbounded_static_chain_names_its_job_not_the_dataset_beside_it() {
    let g = graph("[graph]\nname = \"g\"\n[[dataset]]\nname = \"raw\"\npattern = \"raw/{n:int}\"\n[[job]]\nname = \"total\"\noutputs = [\"total/{n:int}\"]\ninputs = [\"raw/{n}\", \"total/{n-1}\"]\ncommand = [\"x\"]\n");
    let err = simple_plan(&g, &["total/0"]).unwrap_err().to_string();
    assert!(
        err.contains("(last: `total/-100000`, job `total`)"),
        "{err}"
    );
    assert!(!err.contains("job `raw`"), "{err}");
}

#[test]
fn refs_with_a_bad_typed_field_say_which() {
    let err = simple_plan(&graph(DIAMOND), &["d/2020-13-01"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "`2020-13-01` is not a valid date for field `d` in `d/2020-13-01` (job `d` builds `d/{d:date}`)"
    );
}
