//! The machine with plain values: a plan, a script of inputs, and the effects each must give
//! (table-driven, like cargo-nextest's dispatcher tests). No thread, process or log.

use super::*;
use databuild_core::plan::Delegation;
use databuild_core::PartitionRef;
use databuild_log::AfterFailure::{FetchInputs, Retry};
use Effect::{
    Added, Adopt, Check, Claim, ClaimFailed, FindHolders, Kept, NotRun, NotStarted, PlanInputs,
    Recheck, Rescheduled, Resolve, Scheduled, Stage, StopRuns, TakeOver, Unstage, WaitAvailable,
    WaitFailed, WaitInstead,
};

fn r(s: &str) -> PartitionRef {
    PartitionRef::new(s).unwrap()
}

/// A run of job 0 making `output` from `inputs`, after the plan's runs `deps`.
fn run(output: &str, inputs: &[&str], deps: &[usize]) -> PlannedRun {
    PlannedRun {
        job_index: 0,
        job: "j".into(),
        outputs: vec![r(output)],
        inputs: inputs.iter().map(|i| r(i)).collect(),
        extras: None,
        depends_on: deps.to_vec(),
        reasons: Vec::new(),
    }
}

/// A plan of `runs`, relying on other builds for `delegated` (ref, build).
fn plan(runs: Vec<PlannedRun>, delegated: &[(&str, &str)]) -> Plan {
    Plan {
        runs,
        skipped: Vec::new(),
        delegated: delegated
            .iter()
            .map(|(p, b)| Delegation {
                partition_ref: r(p),
                build_request_id: b.to_string(),
            })
            .collect(),
        ..Default::default()
    }
}

fn ok() -> Ended {
    ended(RunOutcome::Succeeded)
}

fn failed(message: &str) -> Ended {
    ended(RunOutcome::failed(message, Some(1)))
}

fn missing(refs: &[&str]) -> Ended {
    ended(RunOutcome::Failed {
        message: "missing".to_string(),
        exit_code: Some(1),
        missing_deps: refs.iter().map(|r| r.to_string()).collect(),
    })
}

fn ended(outcome: RunOutcome) -> Ended {
    Ended::of(outcome)
}

/// A run that succeeded and whose output failed a check.
fn checked(blocking: bool) -> Ended {
    Ended {
        checks: vec![crate::check::CheckOutcome {
            partition_ref: "a".into(),
            name: "rows".into(),
            version: Some("1".into()),
            command: vec!["false".into()],
            blocking,
            passed: false,
            message: "no rows".into(),
            metrics: None,
            inline: false,
            code_versions: Default::default(),
        }],
        ..ok()
    }
}

fn end(node: usize, attempt: u32, ended: Ended, then: Option<AfterFailure>) -> Effect {
    Effect::Ended {
        node,
        attempt,
        ended,
        then,
    }
}

fn not_run(nodes: &[usize], reason: &str) -> Effect {
    NotRun {
        nodes: nodes.to_vec(),
        reason: reason.to_string(),
    }
}

fn finished(node: usize, ended: Ended) -> Input {
    Input::Finished { node, ended }
}

/// How a case's build is set up.
struct Setup {
    slots: usize,
    ahead_per_slot: usize,
    keep_going: bool,
    retries: u32,
    concurrency: Option<u32>,
}

const ONE_SLOT: Setup = Setup {
    slots: 1,
    ahead_per_slot: CLAIM_AHEAD_PER_SLOT,
    keep_going: false,
    retries: 0,
    concurrency: None,
};

const TWO_SLOTS: Setup = Setup {
    slots: 2,
    ..ONE_SLOT
};

/// One case: its plan, the effects of starting it, and each input with the effects it gives.
struct Case {
    name: &'static str,
    setup: Setup,
    plan: Plan,
    start: Vec<Effect>,
    script: Vec<(Input, Vec<Effect>)>,
    /// Whether the build is over at the end of the script.
    over: bool,
    /// What [`Machine::finish`] gives then.
    finish: Vec<Effect>,
}

/// A machine set up as `setup`, given `plan` and asked for its first claims: it, and what it
/// said.
fn started(setup: Setup, plan: Plan) -> (Machine, VecDeque<Effect>) {
    let Setup {
        slots,
        ahead_per_slot,
        keep_going,
        retries,
        concurrency,
    } = setup;
    let jobs = vec![JobPolicy {
        retries,
        concurrency,
        cutoff: true,
    }];
    let mut machine = Machine::new(Policy {
        slots,
        ahead_per_slot,
        keep_going,
        jobs,
    });
    let mut out = VecDeque::new();
    machine.add_plan(plan, &mut out);
    machine.fill(&mut out);
    (machine, out)
}

fn check(case: Case) {
    let (mut machine, mut out) = started(case.setup, case.plan);
    let name = case.name;
    assert_eq!(
        Vec::from(std::mem::take(&mut out)),
        case.start,
        "{name}: start"
    );
    for (step, (input, expected)) in case.script.into_iter().enumerate() {
        let shown = format!("{input:?}");
        machine.handle(input, &mut out);
        let got = Vec::from(std::mem::take(&mut out));
        assert_eq!(got, expected, "{name}: step {step} ({shown})");
    }
    assert_eq!(machine.is_over(), case.over, "{name}: over");
    machine.finish(&mut out);
    assert_eq!(Vec::from(out), case.finish, "{name}: finish");
}

fn scheduled(nodes: Range<usize>, waits: Range<usize>) -> Effect {
    Scheduled { nodes, waits }
}

#[test]
fn retries_attempt_again_then_give_up() {
    let retry = |setup, name, last: Vec<Effect>, over| Case {
        name,
        setup,
        plan: plan(vec![run("a", &[], &[])], &[]),
        start: vec![scheduled(0..1, 0..0), Claim(vec![0])],
        script: vec![
            (Input::Claimed(vec![0]), vec![Stage(0)]),
            (Input::Started(0), vec![]),
            (
                finished(0, failed("boom")),
                vec![
                    end(0, 1, failed("boom"), Some(Retry)),
                    Added,
                    Rescheduled(0),
                    Claim(vec![0]),
                ],
            ),
            (Input::Claimed(vec![0]), vec![Stage(0)]),
            (Input::Started(0), vec![]),
            (finished(0, failed("boom")), last),
        ],
        over,
        finish: vec![],
    };
    let once = Setup {
        retries: 1,
        ..ONE_SLOT
    };
    check(retry(
        once,
        "one retry, then the run fails",
        vec![end(0, 2, failed("boom"), None)],
        true,
    ));
    let twice = Setup {
        retries: 2,
        ..ONE_SLOT
    };
    check(retry(
        twice,
        "two retries: the second failure is retried too",
        vec![
            end(0, 2, failed("boom"), Some(Retry)),
            Added,
            Rescheduled(0),
            Claim(vec![0]),
        ],
        false,
    ));
}

#[test]
fn missing_inputs_are_fetched_then_the_run_goes_again() {
    let planned = |plan| Input::InputsPlanned {
        node: 0,
        missing: vec!["b".to_string()],
        plan,
    };
    let started = || {
        vec![
            (Input::Claimed(vec![0]), vec![Stage(0)]),
            (Input::Started(0), vec![]),
            (
                finished(0, missing(&["b"])),
                vec![
                    end(0, 1, missing(&["b"]), Some(FetchInputs)),
                    PlanInputs {
                        node: 0,
                        missing: vec!["b".to_string()],
                    },
                ],
            ),
        ]
    };
    let mut fetched = started();
    fetched.extend([
        (
            planned(Ok(plan(vec![run("b", &[], &[])], &[]))),
            vec![scheduled(1..2, 0..0), Added, Rescheduled(0), Claim(vec![1])],
        ),
        (Input::Claimed(vec![1]), vec![Stage(1)]),
        (Input::Started(1), vec![]),
        (
            finished(1, ok()),
            vec![end(1, 1, ok(), None), Claim(vec![0])],
        ),
    ]);
    let mut unplannable = started();
    unplannable.push((planned(Err("no producer".to_string())), vec![]));
    let cases = [
        Case {
            name: "the missing input is built, then the run is claimed again",
            setup: ONE_SLOT,
            plan: plan(vec![run("a", &[], &[])], &[]),
            start: vec![scheduled(0..1, 0..0), Claim(vec![0])],
            script: fetched,
            over: false,
            finish: vec![],
        },
        Case {
            name: "missing inputs that cannot be planned fail the run",
            setup: ONE_SLOT,
            plan: plan(vec![run("a", &[], &[]), run("c", &["a"], &[0])], &[]),
            start: vec![scheduled(0..2, 0..0), Claim(vec![0])],
            script: unplannable
                .into_iter()
                .map(|(i, e)| match i {
                    Input::InputsPlanned { .. } => (
                        i,
                        vec![not_run(
                            &[1],
                            "`a` failed: its missing inputs cannot be planned: no producer",
                        )],
                    ),
                    _ => (i, e),
                })
                .collect(),
            over: true,
            finish: vec![],
        },
    ];
    cases.into_iter().for_each(check);
}

#[test]
fn missing_inputs_are_fetched_a_few_times_only() {
    let (mut machine, mut out) = started(ONE_SLOT, plan(vec![run("a", &[], &[])], &[]));
    for round in 1..=MAX_MISSING_DEP_ROUNDS + 1 {
        out.clear();
        machine.handle(Input::Claimed(vec![0]), &mut out);
        machine.handle(Input::Started(0), &mut out);
        out.clear();
        machine.handle(finished(0, missing(&["b"])), &mut out);
        let then = (round <= MAX_MISSING_DEP_ROUNDS).then_some(FetchInputs);
        assert_eq!(out[0], end(0, 1, missing(&["b"]), then), "round {round}");
        if then.is_some() {
            let nothing_to_build = Ok(plan(vec![], &[]));
            machine.handle(
                Input::InputsPlanned {
                    node: 0,
                    missing: vec!["b".to_string()],
                    plan: nothing_to_build,
                },
                &mut out,
            );
        }
    }
    assert!(machine.is_over());
    assert_eq!(machine.node(0).state, State::Failed);
}

#[test]
fn a_failure_stops_the_build_unless_keep_going() {
    // `a` fails; `b` needs it; `c` does not.
    let three = || {
        plan(
            vec![
                run("a", &[], &[]),
                run("b", &["a"], &[0]),
                run("c", &[], &[]),
            ],
            &[],
        )
    };
    let start = || vec![scheduled(0..3, 0..0), Claim(vec![0, 2])];
    let claimed = || {
        vec![
            (Input::Claimed(vec![0, 2]), vec![Stage(0), Stage(2)]),
            (Input::Started(0), vec![]),
        ]
    };
    let mut fail_fast = claimed();
    fail_fast.extend([
        (
            finished(0, failed("boom")),
            vec![
                end(0, 1, failed("boom"), None),
                not_run(&[1], "`a` failed"),
                Unstage,
            ],
        ),
        (
            Input::Unstaged(2),
            vec![NotStarted {
                node: 2,
                reason: "not started: `a` failed: boom".to_string(),
            }],
        ),
    ]);
    let mut keep_going = claimed();
    keep_going.extend([
        (
            finished(0, failed("boom")),
            vec![end(0, 1, failed("boom"), None), not_run(&[1], "`a` failed")],
        ),
        (Input::Started(2), vec![]),
        (finished(2, ok()), vec![end(2, 1, ok(), None)]),
    ]);
    let cases = [
        Case {
            name: "fail-fast: the claimed run that did not start is given back",
            setup: ONE_SLOT,
            plan: three(),
            start: start(),
            script: fail_fast,
            over: true,
            finish: vec![],
        },
        Case {
            name: "--keep-going: what does not need the failure still runs",
            setup: Setup {
                keep_going: true,
                ..ONE_SLOT
            },
            plan: three(),
            start: start(),
            script: keep_going,
            over: true,
            finish: vec![],
        },
        Case {
            name: "fail-fast: runs held back by concurrency end as not run",
            setup: Setup {
                concurrency: Some(1),
                ..ONE_SLOT
            },
            plan: plan(
                vec![run("a", &[], &[]), run("b", &[], &[]), run("c", &[], &[])],
                &[],
            ),
            start: vec![scheduled(0..3, 0..0), Claim(vec![0])],
            script: vec![
                (Input::Claimed(vec![0]), vec![Stage(0)]),
                (Input::Started(0), vec![]),
                (
                    finished(0, failed("boom")),
                    vec![end(0, 1, failed("boom"), None)],
                ),
            ],
            over: true,
            finish: vec![not_run(&[1, 2], "`a` failed: boom")],
        },
    ];
    cases.into_iter().for_each(check);
}

#[test]
fn a_failed_blocking_check_stops_what_reads_the_partition() {
    // `a` is built but fails a check; `b` reads it.
    let two = || plan(vec![run("a", &[], &[]), run("b", &["a"], &[0])], &[]);
    let start = || vec![scheduled(0..2, 0..0), Claim(vec![0])];
    let claimed = || {
        vec![
            (Input::Claimed(vec![0]), vec![Stage(0)]),
            (Input::Started(0), vec![]),
        ]
    };
    let mut blocking = claimed();
    blocking.push((
        finished(0, checked(true)),
        vec![
            end(0, 1, checked(true), None),
            not_run(&[1], "`a` failed check `rows`: no rows"),
        ],
    ));
    let mut warning = claimed();
    warning.extend([
        (
            finished(0, checked(false)),
            vec![end(0, 1, checked(false), None), Claim(vec![1])],
        ),
        (Input::Claimed(vec![1]), vec![Stage(1)]),
        (Input::Started(1), vec![]),
        (finished(1, ok()), vec![end(1, 1, ok(), None)]),
    ]);
    let cases = [
        Case {
            name: "blocking: no retry, and what reads it does not run",
            setup: Setup {
                retries: 2,
                ..ONE_SLOT
            },
            plan: two(),
            start: start(),
            script: blocking,
            over: true,
            finish: vec![],
        },
        Case {
            name: "not blocking: a warning, and the build goes on",
            setup: ONE_SLOT,
            plan: two(),
            start: start(),
            script: warning,
            over: true,
            finish: vec![],
        },
    ];
    cases.into_iter().for_each(check);
}

#[test]
fn keep_going_ends_failed_with_the_runs_that_failed() {
    let setup = Setup {
        slots: 2,
        keep_going: true,
        ..ONE_SLOT
    };
    let (mut machine, mut out) = started(
        setup,
        plan(vec![run("a", &[], &[]), run("b", &[], &[])], &[]),
    );
    machine.handle(Input::Claimed(vec![0, 1]), &mut out);
    for node in [0, 1] {
        machine.handle(Input::Started(node), &mut out);
        machine.handle(finished(node, failed("boom")), &mut out);
    }
    assert!(machine.is_over());
    assert_eq!(machine.stop_reason(), "2 job runs failed: `a`, `b`");
}

#[test]
fn cancel_stops_runs_and_gives_back_claims() {
    let chain = || plan(vec![run("a", &[], &[]), run("b", &["a"], &[0])], &[]);
    let cases = [
        Case {
            name: "a claimed run that never started ends not started, its claim released",
            setup: ONE_SLOT,
            plan: chain(),
            start: vec![scheduled(0..2, 0..0), Claim(vec![0])],
            script: vec![
                (Input::Claimed(vec![0]), vec![Stage(0)]),
                (
                    Input::Cancel("cancelled".to_string()),
                    vec![StopRuns, Unstage],
                ),
                (
                    Input::Unstaged(0),
                    vec![
                        NotStarted {
                            node: 0,
                            reason: "not started: cancelled".to_string(),
                        },
                        not_run(&[1], "`a` was not started"),
                    ],
                ),
            ],
            over: true,
            finish: vec![],
        },
        Case {
            name: "a running run is told to stop; a failure after cancel is not retried",
            setup: Setup {
                retries: 3,
                ..ONE_SLOT
            },
            plan: chain(),
            start: vec![scheduled(0..2, 0..0), Claim(vec![0])],
            script: vec![
                (Input::Claimed(vec![0]), vec![Stage(0)]),
                (Input::Started(0), vec![]),
                (Input::Cancel("interrupted".to_string()), vec![StopRuns]),
                (Input::Cancel("cancelled".to_string()), vec![]),
                (
                    finished(0, failed("killed")),
                    vec![
                        end(0, 1, failed("killed"), None),
                        not_run(&[1], "`a` failed"),
                    ],
                ),
            ],
            over: true,
            finish: vec![],
        },
        Case {
            name: "a run cancelled while running cancels what waits on it",
            setup: ONE_SLOT,
            plan: chain(),
            start: vec![scheduled(0..2, 0..0), Claim(vec![0])],
            script: vec![
                (Input::Claimed(vec![0]), vec![Stage(0)]),
                (Input::Started(0), vec![]),
                (Input::Cancel("cancelled".to_string()), vec![StopRuns]),
                (
                    finished(0, ended(RunOutcome::Cancelled)),
                    vec![
                        end(0, 1, ended(RunOutcome::Cancelled), None),
                        not_run(&[1], "`a` was cancelled"),
                    ],
                ),
            ],
            over: true,
            finish: vec![],
        },
    ];
    cases.into_iter().for_each(check);
}

#[test]
fn a_refused_claim_waits_for_the_other_builder_or_looks_again() {
    let chain = || plan(vec![run("a", &[], &[]), run("b", &["a"], &[0])], &[]);
    let start = || vec![scheduled(0..2, 0..0), Claim(vec![0])];
    let refused = |refusal| Input::Refused { node: 0, refusal };
    // The batch is refused, the run checked alone, and `a` found held by build `other`.
    let lose_claim = || {
        vec![
            (Input::BatchRefused(vec![0]), vec![Check(0)]),
            (
                refused(RefusalKind::AlreadyBeingBuilt),
                vec![FindHolders(0)],
            ),
            (
                Input::Held {
                    node: 0,
                    holders: vec![("a".to_string(), "other".to_string())],
                },
                vec![WaitInstead {
                    node: 0,
                    waits: 0..1,
                }],
            ),
        ]
    };
    let mut rechecks = vec![(Input::BatchRefused(vec![0]), vec![Check(0)])];
    for _ in 1..MAX_CLAIM_REFUSALS {
        rechecks.push((refused(RefusalKind::ChangedSinceChecked), vec![Check(0)]));
    }
    rechecks.push((
        refused(RefusalKind::ChangedSinceChecked),
        vec![ClaimFailed(0)],
    ));
    let cases = [
        Case {
            name: "already being built: wait for the build that holds it",
            setup: ONE_SLOT,
            plan: chain(),
            start: start(),
            script: lose_claim()
                .into_iter()
                .chain([(
                    Input::WaitEnded {
                        wait: 0,
                        outcome: WaitOutcome::Available,
                    },
                    vec![WaitAvailable(0), Claim(vec![1])],
                )])
                .collect(),
            over: false,
            finish: vec![],
        },
        Case {
            name: "the holder of a lost claim dies: it is built here, then what waited goes",
            setup: ONE_SLOT,
            plan: chain(),
            start: start(),
            script: lose_claim()
                .into_iter()
                .chain([
                    (
                        Input::WaitEnded {
                            wait: 0,
                            outcome: WaitOutcome::Abandoned,
                        },
                        vec![TakeOver(0)],
                    ),
                    (
                        Input::TakeOverPlanned {
                            wait: 0,
                            plan: plan(vec![run("a", &[], &[])], &[]),
                        },
                        vec![scheduled(2..3, 1..1), Added, Claim(vec![2])],
                    ),
                    (Input::Claimed(vec![2]), vec![Stage(2)]),
                    (Input::Started(2), vec![]),
                    (
                        finished(2, ok()),
                        vec![end(2, 1, ok(), None), Claim(vec![1])],
                    ),
                ])
                .collect(),
            over: false,
            finish: vec![],
        },
        Case {
            name: "the holder finished meanwhile: what waited goes on",
            setup: ONE_SLOT,
            plan: chain(),
            start: start(),
            script: vec![(
                Input::Held {
                    node: 0,
                    holders: vec![],
                },
                vec![
                    WaitInstead {
                        node: 0,
                        waits: 0..0,
                    },
                    Claim(vec![1]),
                ],
            )],
            over: false,
            finish: vec![],
        },
        Case {
            name: "changed since checked: checked again, up to the limit",
            setup: ONE_SLOT,
            plan: chain(),
            start: start(),
            script: rechecks,
            over: false,
            finish: vec![not_run(&[1], "the build stopped")],
        },
        Case {
            name: "any other refusal ends the claim at once",
            setup: ONE_SLOT,
            plan: chain(),
            start: start(),
            script: vec![(refused(RefusalKind::Invalid), vec![ClaimFailed(0)])],
            over: false,
            finish: vec![not_run(&[1], "the build stopped")],
        },
    ];
    cases.into_iter().for_each(check);
}

#[test]
fn delegated_partitions_end_as_their_builder_ends_them() {
    // `b` reads `x`, which another build is making.
    let delegated = || plan(vec![run("b", &["x"], &[])], &[("x", "other")]);
    let start = || vec![scheduled(0..1, 0..1)];
    let ended = |outcome| Input::WaitEnded { wait: 0, outcome };
    let cases = [
        Case {
            name: "available: the runs waiting on it go",
            setup: ONE_SLOT,
            plan: delegated(),
            start: start(),
            script: vec![(
                ended(WaitOutcome::Available),
                vec![WaitAvailable(0), Claim(vec![0])],
            )],
            over: false,
            finish: vec![],
        },
        Case {
            name: "failed: the runs waiting on it are not run, and the build stops",
            setup: ONE_SLOT,
            plan: delegated(),
            start: start(),
            script: vec![(
                ended(WaitOutcome::Failed("it failed there".to_string())),
                vec![
                    WaitFailed {
                        wait: 0,
                        message: "it failed there".to_string(),
                    },
                    not_run(&[0], "`x` failed in the build it was delegated to"),
                ],
            )],
            over: true,
            finish: vec![],
        },
        Case {
            name: "abandoned: it is built here, then what waited goes",
            setup: ONE_SLOT,
            plan: delegated(),
            start: start(),
            script: vec![
                (ended(WaitOutcome::Abandoned), vec![TakeOver(0)]),
                (
                    Input::TakeOverPlanned {
                        wait: 0,
                        plan: plan(vec![run("x", &[], &[])], &[]),
                    },
                    vec![scheduled(1..2, 1..1), Added, Claim(vec![1])],
                ),
                (Input::Claimed(vec![1]), vec![Stage(1)]),
                (Input::Started(1), vec![]),
                (
                    finished(1, ok()),
                    vec![end(1, 1, ok(), None), Claim(vec![0])],
                ),
            ],
            over: false,
            finish: vec![],
        },
        Case {
            name: "nothing to wait for: the build is not over until the wait ends",
            setup: ONE_SLOT,
            plan: delegated(),
            start: start(),
            script: vec![],
            over: false,
            finish: vec![not_run(&[0], "the build stopped")],
        },
    ];
    cases.into_iter().for_each(check);
}

#[test]
fn outputs_made_elsewhere_are_adopted() {
    check(Case {
        name: "another build made the outputs: rely on it, and go on",
        setup: ONE_SLOT,
        plan: plan(vec![run("a", &[], &[]), run("b", &["a"], &[0])], &[]),
        start: vec![scheduled(0..2, 0..0), Claim(vec![0])],
        script: vec![(Input::MadeElsewhere(0), vec![Adopt(0), Claim(vec![1])])],
        over: false,
        finish: vec![],
    });
}

#[test]
fn upstream_versions_are_read_before_the_claim() {
    check(Case {
        name: "the claim waits for the versions, read off the loop",
        setup: ONE_SLOT,
        plan: plan(vec![run("a", &["up/1"], &[])], &[]),
        start: vec![scheduled(0..1, 0..0), Claim(vec![0])],
        script: vec![
            (Input::ResolveFirst(0), vec![Resolve(0)]),
            (Input::Resolved(0), vec![Claim(vec![0])]),
            (Input::Claimed(vec![0]), vec![Stage(0)]),
        ],
        over: false,
        finish: vec![],
    });
}

#[test]
fn slots_are_fed_ahead_in_batches() {
    let runs = (0..20).map(|i| run(&format!("p/{i}"), &[], &[])).collect();
    let (mut machine, mut out) = started(TWO_SLOTS, plan(runs, &[]));
    // Two slots claim sixteen ahead: eighteen at first; more once half of those sixteen are
    // taken, as many as runs ended meanwhile.
    assert_eq!(out.pop_back(), Some(Claim((0..18).collect())));
    machine.handle(Input::Claimed((0..18).collect()), &mut out);
    out.clear();
    for node in 0..10 {
        machine.handle(Input::Started(node), &mut out);
    }
    machine.handle(finished(0, ok()), &mut out);
    assert_eq!(
        Vec::from(std::mem::take(&mut out)),
        vec![end(0, 1, ok(), None)]
    );
    // Fewer than half of the sixteen are staged now, but only two runs are ready (18, 19):
    // they gather while the slots have more staged than there are slots...
    for node in 10..15 {
        machine.handle(Input::Started(node), &mut out);
        assert_eq!(Vec::from(std::mem::take(&mut out)), vec![], "{node}");
    }
    // ...and are claimed together once a slot could otherwise go idle.
    // (As many as fit beside the sixteen "running" here: one.)
    machine.handle(Input::Started(15), &mut out);
    assert_eq!(Vec::from(out), vec![Claim(vec![18])]);
}

#[test]
fn long_jobs_are_claimed_only_as_slots_free() {
    let runs = (0..6).map(|i| run(&format!("p/{i}"), &[], &[])).collect();
    let setup = Setup {
        ahead_per_slot: 0,
        ..TWO_SLOTS
    };
    let (mut machine, mut out) = started(setup, plan(runs, &[]));
    assert_eq!(out.pop_back(), Some(Claim(vec![0, 1])));
    machine.handle(Input::Claimed(vec![0, 1]), &mut out);
    out.clear();
    // Claimed, not started: nothing more is claimed.
    machine.handle(Input::Started(0), &mut out);
    assert_eq!(Vec::from(std::mem::take(&mut out)), vec![]);
    machine.handle(Input::Started(1), &mut out);
    assert_eq!(Vec::from(std::mem::take(&mut out)), vec![]);
    // A slot frees: one run is claimed for it.
    machine.handle(finished(0, ok()), &mut out);
    assert_eq!(
        Vec::from(std::mem::take(&mut out)),
        vec![end(0, 1, ok(), None), Claim(vec![2])]
    );
}

#[test]
fn runs_ready_one_at_a_time_are_claimed_a_few_at_once() {
    // Nine chains of three: each run that ends makes the next of its chain ready.
    let mut runs = Vec::new();
    for chain in 0..9 {
        runs.push(run(&format!("a/{chain}"), &[], &[]));
    }
    for level in 1..3 {
        for chain in 0..9 {
            let before = (level - 1) * 9 + chain;
            let input = format!("{}/{chain}", ["a", "b"][level - 1]);
            let output = format!("{}/{chain}", ["b", "c"][level - 1]);
            runs.push(run(&output, &[input.as_str()], &[before]));
        }
    }
    let (mut machine, mut out) = started(TWO_SLOTS, plan(runs, &[]));
    assert_eq!(out.pop_back(), Some(Claim((0..9).collect())));
    machine.handle(Input::Claimed((0..9).collect()), &mut out);
    out.clear();
    // Two slots: each starts the next staged run, and the older of the two running ends.
    let mut claims = Vec::new();
    let mut staged: VecDeque<usize> = (0..9).collect();
    let mut running = VecDeque::new();
    while !staged.is_empty() || !running.is_empty() {
        while running.len() < 2 {
            let Some(node) = staged.pop_front() else {
                break;
            };
            machine.handle(Input::Started(node), &mut out);
            running.push_back(node);
        }
        let node = running.pop_front().expect("a run is running");
        machine.handle(finished(node, ok()), &mut out);
        while let Some(effect) = out.pop_front() {
            if let Claim(batch) = effect {
                machine.handle(Input::Claimed(batch.clone()), &mut out);
                staged.extend(batch.iter().copied());
                claims.push(batch);
            }
        }
        // Claims wait only while the slots have more staged than they can start: at most that
        // many staged, nothing ready is left unclaimed.
        assert!(
            staged.len() > 2 || machine.ready.is_empty(),
            "{:?} ready, unclaimed, with {} staged",
            machine.ready,
            staged.len()
        );
    }
    // 18 runs after the first claim, in writes of four or more, not one each.
    assert_eq!(claims.iter().map(Vec::len).sum::<usize>(), 18, "{claims:?}");
    assert!(claims.len() <= 5, "{claims:?}");
    assert!(machine.is_over());
}

#[test]
fn the_index_of_outputs_is_made_when_first_asked_then_kept() {
    let mut m = Machine::new(Policy {
        slots: 1,
        ahead_per_slot: CLAIM_AHEAD_PER_SLOT,
        keep_going: false,
        jobs: vec![JobPolicy::default()],
    });
    let mut out = VecDeque::new();
    m.add_plan(
        plan(vec![run("a", &[], &[]), run("b", &["a"], &[0])], &[]),
        &mut out,
    );
    // A first plan hashes none of its outputs...
    assert!(m.by_output.get().is_none());
    // ...until a question needs them.
    assert!(m.deals_with("b") && !m.deals_with("c"));
    assert!(m.by_output.get().is_some());
    // A later plan's run that makes `a` again is the node already there; `c` is indexed as it
    // comes.
    m.add_plan(
        plan(vec![run("a", &[], &[]), run("c", &["a"], &[0])], &[]),
        &mut out,
    );
    assert_eq!(m.nodes().len(), 3);
    assert!(m.deals_with("c"));
    assert_eq!(m.node(2).waiting_on, 1, "c waits on the first plan's a");
}

#[test]
fn the_outcomes_of_requested_refs_need_no_index() {
    let mut m = Machine::new(Policy {
        slots: 1,
        ahead_per_slot: CLAIM_AHEAD_PER_SLOT,
        keep_going: false,
        jobs: vec![JobPolicy::default()],
    });
    let mut out = VecDeque::new();
    m.add_plan(
        plan(vec![run("a", &[], &[]), run("b", &["a"], &[0])], &[]),
        &mut out,
    );
    let refs: FxHashSet<&str> = ["b", "c"].into_iter().collect();
    let (makers, ended) = m.outcomes_of(&refs);
    assert!(m.by_output.get().is_none(), "one pass, no index");
    assert_eq!(makers.get("b"), Some(&State::Waiting));
    assert!(!makers.contains_key("c") && ended.is_empty());
    // Once the index exists (as a lost claim makes it), the same answer from it.
    assert!(m.deals_with("b"));
    let (indexed, _) = m.outcomes_of(&refs);
    assert_eq!(indexed, makers);
}

/// A run planned for being stale (`why`), after the plan's runs `deps`.
fn stale_run(output: &str, inputs: &[&str], deps: &[usize]) -> PlannedRun {
    PlannedRun {
        reasons: vec![databuild_core::BuildReason::Stale("input is stale".into())],
        ..run(output, inputs, deps)
    }
}

#[test]
fn runs_behind_a_rebuild_that_changed_nothing_are_cut_off() {
    // clean (forced) → agg (stale) → report (stale); and a missing `side` beside agg.
    let forced = PlannedRun {
        reasons: vec![databuild_core::BuildReason::Forced],
        ..run("clean", &[], &[])
    };
    let missing_side = PlannedRun {
        reasons: vec![databuild_core::BuildReason::Missing],
        ..run("side", &["clean"], &[0])
    };
    let graph = || {
        plan(
            vec![
                forced.clone(),
                stale_run("agg", &["clean"], &[0]),
                stale_run("report", &["agg"], &[1]),
                missing_side.clone(),
            ],
            &[],
        )
    };
    let built = || {
        vec![
            (Input::Claimed(vec![0]), vec![Stage(0)]),
            (Input::Started(0), vec![]),
        ]
    };
    let mut unchanged = built();
    unchanged.extend([
        // clean came out: agg is re-derived, `side` (missing) is claimed as ever.
        (
            finished(0, ok()),
            vec![end(0, 1, ok(), None), Recheck(vec![1]), Claim(vec![3])],
        ),
        // agg is fresh: not run, and report is re-derived in its turn.
        (
            Input::Rechecked {
                fresh: vec![1],
                stale: vec![],
            },
            vec![Kept(vec![1]), Recheck(vec![2])],
        ),
        (
            Input::Rechecked {
                fresh: vec![2],
                stale: vec![],
            },
            vec![Kept(vec![2])],
        ),
        (Input::Claimed(vec![3]), vec![Stage(3)]),
        (Input::Started(3), vec![]),
        (finished(3, ok()), vec![end(3, 1, ok(), None)]),
    ]);
    check(Case {
        name: "identical bytes: the cascade stops at the rebuild",
        setup: ONE_SLOT,
        plan: graph(),
        start: vec![scheduled(0..4, 0..0), Claim(vec![0])],
        script: unchanged,
        over: true,
        finish: vec![],
    });
    let mut changed = built();
    changed.extend([
        (
            finished(0, ok()),
            vec![end(0, 1, ok(), None), Recheck(vec![1]), Claim(vec![3])],
        ),
        // agg is still stale: it runs, and report after it is re-derived again.
        (
            Input::Rechecked {
                fresh: vec![],
                stale: vec![1],
            },
            vec![Claim(vec![1])],
        ),
        (Input::Claimed(vec![3]), vec![Stage(3)]),
        (Input::Claimed(vec![1]), vec![Stage(1)]),
    ]);
    check(Case {
        name: "other bytes: the stale run runs",
        setup: ONE_SLOT,
        plan: graph(),
        start: vec![scheduled(0..4, 0..0), Claim(vec![0])],
        script: changed,
        over: false,
        finish: vec![not_run(&[2], "the build stopped")],
    });
    // A stale run with nothing of this build before it is claimed at once: nothing it reads
    // can change before it starts.
    check(Case {
        name: "a stale run waiting on nothing runs",
        setup: ONE_SLOT,
        plan: plan(vec![stale_run("agg", &["clean"], &[])], &[]),
        start: vec![scheduled(0..1, 0..0), Claim(vec![0])],
        script: vec![],
        over: false,
        finish: vec![],
    });
}
