//! The state machines every event is checked against before it is appended.
//!
//! Four entities carry state:
//! - a build request (by id): `received → planning → analysis_completed → executing → completed | failed | cancelled`,
//!   or `planning → refused` (its plan is more than it allows: nothing of it ran);
//! - a job run (by id): `scheduled → queued → running → completed | failed | cancelled`, or
//!   `skipped` outright (`scheduled → running`: a log written before runs were `queued`);
//! - a partition within one build request (by request and ref): what that request did about it;
//! - a partition globally (by ref): who is building it now and whether it is available, failed or
//!   tainted. Only events that carry the job run building the partition (or a taint) move it, and a
//!   partition being built by one run cannot be claimed by another: this is how the log guarantees
//!   that no partition is ever built twice at once.
//!
//! This module is pure: the store looks up the current states, asks [`check`], and applies.

use crate::event::{Event, Kind, Status};

/// The state of the entities an event touches, as the store found them just before it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Current {
    pub build_request: Option<Status>,
    pub job_run: Option<Status>,
    /// The partition as the event's build request knows it.
    pub request_partition: Option<Status>,
    /// The partition globally, with the run that holds it.
    pub partition: Option<(Status, Option<String>)>,
    pub want: Option<Status>,
}

/// Why an event was refused: the message, and which kind of refusal it is, for callers that act
/// on it (a claimer that lost a race waits or looks again) without reading the message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct Refusal(pub String, pub RefusalKind);

/// The refusals a caller may act on; every other one is `Invalid`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RefusalKind {
    /// The event is not a valid next state of its entity (a bug, or a race on an ended entity).
    #[default]
    Invalid,
    /// A claim of a partition that another run is building.
    AlreadyBeingBuilt,
    /// A claim whose compare-and-swap failed: the partition changed since the claimer read it.
    ChangedSinceChecked,
}

impl Refusal {
    fn invalid(message: String) -> Self {
        Refusal(message, RefusalKind::Invalid)
    }
}

type Transitions = &'static [(Option<Status>, &'static [Status])];

use Status::*;

pub const BUILD_REQUEST: Transitions = &[
    (None, &[Received]),
    (Some(Received), &[Planning, Failed, Cancelled]),
    // `planning → planning`: the plan is recorded in parts (`data.plan`).
    // `planning → refused`: a plan over the request's `max_runs`, turned down before it runs.
    (
        Some(Planning),
        &[Planning, AnalysisCompleted, Refused, Failed, Cancelled],
    ),
    (
        Some(AnalysisCompleted),
        &[Executing, Completed, Failed, Cancelled],
    ),
    // `executing → executing`: runs added to the plan while it runs (`data.plan`).
    (Some(Executing), &[Executing, Completed, Failed, Cancelled]),
];

/// `scheduled → skipped`: another build made the run's outputs while this one waited to start it.
/// `cancelled` first: a planned run given up before its first claim (another build claimed its
/// outputs first), recorded with its outputs. `queued`: claimed (the claim fixes what it reads),
/// its process not started; `running` once it starts, or `failed` / `cancelled` before (a cancel,
/// a closed build). `scheduled → running` is the claim of logs written before `queued`.
pub const JOB_RUN: Transitions = &[
    (None, &[Scheduled, Skipped, Cancelled]),
    (
        Some(Scheduled),
        &[Queued, Running, Failed, Cancelled, Skipped],
    ),
    (Some(Queued), &[Running, Failed, Cancelled]),
    (Some(Running), &[Completed, Failed, Cancelled]),
];

/// A partition as one build request sees it. `available` first (or straight from `requested`)
/// means the request found it live already; a delegated partition ends with the delegate's outcome.
/// `failed → scheduled` is a retry (a new run); `delegated → scheduled` takes over from a delegate
/// whose process died; `delegated → delegated` waits on another build that claimed it first
/// after the delegate gave it back. `cancelled`: the request gave it up without a job failing (it stopped, or
/// was cancelled, before or while building it); a claim it held is released. `available →
/// scheduled` / `delegated`: a partition the request had (found live, or made by a delegate)
/// whose data is gone when one of its runs is about to read it (a delegate cut off from the log
/// before it moved its outputs into place): made again here, or waited for again.
pub const REQUEST_PARTITION: Transitions = &[
    // A request's refs are recorded in its `received`; a partition's own events start with
    // what first happens to it (`requested` is what older logs wrote first).
    (
        None,
        &[
            Requested, Scheduled, Delegated, Available, Failed, Cancelled,
        ],
    ),
    (
        Some(Requested),
        &[Scheduled, Delegated, Available, Failed, Cancelled],
    ),
    (Some(Scheduled), &[Building, Delegated, Failed, Cancelled]),
    (Some(Building), &[Available, Failed, Cancelled]),
    (Some(Available), &[Scheduled, Delegated]),
    (
        Some(Delegated),
        &[Available, Failed, Scheduled, Cancelled, Delegated],
    ),
    (Some(Failed), &[Scheduled]),
    (Some(Cancelled), &[Scheduled, Delegated]),
];

/// A want is checked again and again: `waiting` and `satisfied` follow each other as its
/// partitions come and go. `sla_missed` notes a miss, and `sla_at_risk` a forecast past its
/// deadline, without changing its state.
pub const WANT: Transitions = &[
    (None, &[Requested]),
    (
        Some(Requested),
        &[Waiting, Satisfied, SlaMissed, SlaAtRisk, Expired, Cancelled],
    ),
    (
        Some(Waiting),
        &[Waiting, Satisfied, SlaMissed, SlaAtRisk, Expired, Cancelled],
    ),
    (
        Some(Satisfied),
        &[Waiting, Satisfied, SlaMissed, SlaAtRisk, Expired, Cancelled],
    ),
];

/// Statuses that end an entity's life: nothing may follow them.
pub fn is_terminal(kind: Kind, status: Status) -> bool {
    let table = match kind {
        Kind::BuildRequest => BUILD_REQUEST,
        Kind::JobRun => JOB_RUN,
        Kind::Want => WANT,
        // A partition can always be rebuilt by a later request; within one request, `failed`
        // allows a retry. Only `available` ends a request's dealings with it.
        Kind::Partition => return status == Available,
        Kind::Delegation
        | Kind::Alias
        | Kind::Gc
        | Kind::Check
        | Kind::Environment
        | Kind::Arrival
        | Kind::Alert => return true,
    };
    !table.iter().any(|(from, _)| *from == Some(status))
}

fn allowed(table: Transitions, from: Option<Status>, to: Status) -> bool {
    table.iter().any(|(f, tos)| *f == from && tos.contains(&to))
}

fn describe(from: Option<Status>) -> String {
    from.map_or("nothing (it is new)".to_string(), |s| format!("`{s}`"))
}

fn require<'a>(field: &'a Option<String>, name: &str, e: &Event) -> Result<&'a str, Refusal> {
    field
        .as_deref()
        .filter(|v| !v.is_empty())
        .ok_or_else(|| Refusal::invalid(format!("a {} event needs `{name}`", e.kind)))
}

/// A claim: a run scheduled or claimed (`queued`; `running` in logs from before `queued`), or a
/// partition taken to build. A queued run's start is not one: its claim was checked.
pub fn is_claim(e: &Event) -> bool {
    matches!(
        (e.kind, e.status),
        (Kind::JobRun, Scheduled | Queued | Running) | (Kind::Partition, Building)
    )
}

/// A claim, knowing the run's state before it: the `running` of a `queued` run is its start.
fn claims(e: &Event, current: &Current) -> bool {
    is_claim(e) && !(e.status == Running && current.job_run == Some(Queued))
}

/// Checks one event against the states it would move. A claim under a build request that has
/// ended is refused: that build was closed (by a process that took its work over, say), and its
/// driver, if it still runs, must claim nothing more for it — the fence of a shared log.
pub fn check(e: &Event, current: &Current) -> Result<(), Refusal> {
    if let (Some(br), Some(status)) = (e.build_request_id.as_deref(), current.build_request) {
        if claims(e, current) && is_terminal(Kind::BuildRequest, status) {
            return Err(Refusal::invalid(format!(
                "build request {br} has ended (`{status}`): nothing more is claimed for it"
            )));
        }
    }
    match e.kind {
        Kind::BuildRequest => {
            let id = require(&e.build_request_id, "build_request_id", e)?;
            if !allowed(BUILD_REQUEST, current.build_request, e.status) {
                return Err(Refusal::invalid(format!(
                    "build request {id} cannot go to `{}` from {}",
                    e.status,
                    describe(current.build_request)
                )));
            }
            check_requested_count(id, e)?;
        }
        Kind::JobRun => {
            let id = require(&e.job_run_id, "job_run_id", e)?;
            require(&e.job, "job", e)?;
            if !allowed(JOB_RUN, current.job_run, e.status) {
                return Err(Refusal::invalid(format!(
                    "job run {id} cannot go to `{}` from {}",
                    e.status,
                    describe(current.job_run)
                )));
            }
        }
        Kind::Delegation => {
            require(&e.build_request_id, "build_request_id", e)?;
            require(&e.partition_ref, "partition_ref", e)?;
            require(&e.delegated_to, "delegated_to", e)?;
            if e.status != Delegated {
                return Err(Refusal::invalid(format!(
                    "a delegation event has status `delegated`, not `{}`",
                    e.status
                )));
            }
        }
        Kind::Partition => check_partition(e, current)?,
        Kind::Want => {
            let id = require(&e.data.want_id, "want_id", e)?;
            if !allowed(WANT, current.want, e.status) {
                return Err(Refusal::invalid(format!(
                    "want {id} cannot go to `{}` from {}",
                    e.status,
                    describe(current.want)
                )));
            }
            if e.status == Requested && e.data.requested.is_empty() {
                return Err(Refusal::invalid(format!("want {id} names no partitions")));
            }
        }
        Kind::Environment => {
            require(&e.data.environment, "environment", e)?;
            if !matches!(e.status, Created | Dropped | Promoted | RolledBack) {
                return Err(Refusal::invalid(format!(
                    "an environment event is `created`, `dropped`, `promoted` or `rolled_back`, not `{}`",
                    e.status
                )));
            }
        }
        Kind::Arrival => {
            require(&e.partition_ref, "partition_ref", e)?;
            require(&e.data.dataset, "dataset", e)?;
            if !matches!(e.status, Available | Late) || e.build_request_id.is_some() {
                return Err(Refusal::invalid(
                    "an arrival event is `available` or `late`, of no build request".to_string(),
                ));
            }
        }
        Kind::Alert => {
            require(&e.data.alert, "alert", e)?;
            if !matches!(e.status, Completed | Failed) || e.build_request_id.is_some() {
                return Err(Refusal::invalid(
                    "an alert event is `completed` or `failed`, of no build request".to_string(),
                ));
            }
        }
        Kind::Gc => {
            if e.status != Completed || e.build_request_id.is_some() {
                return Err(Refusal::invalid(
                    "a gc event is `completed`, of no build request".to_string(),
                ));
            }
        }
        Kind::Check => {
            require(&e.partition_ref, "partition_ref", e)?;
            require(&e.job_run_id, "job_run_id", e)?;
            require(&e.data.check, "check", e)?;
            if !matches!(e.status, Completed | Failed) {
                return Err(Refusal::invalid(format!(
                    "a check event is `completed` (passed) or `failed`, not `{}`",
                    e.status
                )));
            }
        }
        Kind::Alias => {
            if e.status != Promoted || e.data.table.is_none() || e.data.version.is_none() {
                return Err(Refusal::invalid(
                    "an alias event is `promoted`, with `table` and `version`".to_string(),
                ));
            }
        }
    }
    Ok(())
}

fn check_partition(e: &Event, current: &Current) -> Result<(), Refusal> {
    let r = require(&e.partition_ref, "partition_ref", e)?;
    // A taint, or gc removing the data: of no build request or run, never while it is built.
    if matches!(e.status, Tainted | Removed) {
        let what = if e.status == Tainted {
            "a taint"
        } else {
            "a removal"
        };
        if e.build_request_id.is_some() || e.job_run_id.is_some() {
            return Err(Refusal::invalid(format!(
                "{what} belongs to no build request or run"
            )));
        }
        if let Some((Building, run)) = &current.partition {
            return Err(Refusal::invalid(format!(
                "partition {r} is being built by run {}; {what} waits until the run ends",
                run.as_deref().unwrap_or("?")
            )));
        }
        return Ok(());
    }
    if matches!(e.status, Sealed | Expired) {
        return check_source_partition(r, e, current);
    }
    let Some(br) = e.build_request_id.as_deref() else {
        return Err(Refusal::invalid(format!(
            "a partition `{}` event needs `build_request_id`",
            e.status
        )));
    };
    if !allowed(REQUEST_PARTITION, current.request_partition, e.status) {
        return Err(Refusal::invalid(format!(
            "partition {r} cannot go to `{}` from {} in build request {br}",
            e.status,
            describe(current.request_partition)
        )));
    }
    // Events naming the run that builds the partition also move its global state.
    let Some(run) = e.job_run_id.as_deref() else {
        if e.status == Building {
            return Err(Refusal::invalid(format!(
                "partition {r} `building` needs the `job_run_id` building it"
            )));
        }
        return Ok(());
    };
    match (e.status, &current.partition) {
        (Building, Some((Building, Some(holder)))) if holder != run => Err(Refusal(
            format!("partition {r} is already being built by run {holder}"),
            RefusalKind::AlreadyBeingBuilt,
        )),
        (Building, now) if e.data.claim_after.is_some() => {
            let last = now
                .as_ref()
                .and_then(|(_, run)| run.clone())
                .unwrap_or_default();
            if Some(&last) == e.data.claim_after.as_ref() {
                Ok(())
            } else {
                Err(Refusal(
                    format!(
                        "partition {r} changed since it was checked (now {} by run {last})",
                        now.as_ref()
                            .map_or("unknown".to_string(), |(s, _)| format!("`{s}`"))
                    ),
                    RefusalKind::ChangedSinceChecked,
                ))
            }
        }
        (Available | Failed | Cancelled, Some((Building, Some(holder)))) if holder == run => Ok(()),
        (Available | Failed | Cancelled, other) => Err(Refusal::invalid(format!(
            "run {run} cannot finish partition {r}: it is not building it (the partition is {})",
            other
                .as_ref()
                .map_or("unknown".to_string(), |(s, _)| format!("`{s}`"))
        ))),
        _ => Ok(()),
    }
}

/// Source partitions (`source/...`, a namespace no job may build) are sealed when their day ends
/// (again if late data arrived) and expire once: after that their raw data is gone.
fn check_source_partition(r: &str, e: &Event, current: &Current) -> Result<(), Refusal> {
    if !r.starts_with("source/") {
        return Err(Refusal::invalid(format!(
            "only source partitions (`source/...`) are `{}`, not {r}",
            e.status
        )));
    }
    if e.build_request_id.is_some() || e.job_run_id.is_some() {
        return Err(Refusal::invalid(format!(
            "a `{}` partition event belongs to no build request or run",
            e.status
        )));
    }
    let now = current.partition.as_ref().map(|(s, _)| *s);
    let allowed = match e.status {
        Sealed => matches!(now, None | Some(Sealed)),
        _ => now == Some(Sealed),
    };
    if !allowed {
        return Err(Refusal::invalid(format!(
            "partition {r} cannot go to `{}` from {}",
            e.status,
            describe(now)
        )));
    }
    Ok(())
}

/// Only an analysis records part of its request (`requested_count` of them, at least as many
/// as it lists): a build's every requested ref is what its summary judges.
fn check_requested_count(id: &str, e: &Event) -> Result<(), Refusal> {
    match e.data.requested_count {
        Some(n) if !e.data.analyze_only || (n as usize) < e.data.requested.len() => {
            Err(Refusal::invalid(format!(
                "build request {id}: `requested_count` {n} is for an analysis that lists fewer refs \
                 than it asked for (this lists {}{})",
                e.data.requested.len(),
                if e.data.analyze_only { "" } else { ", and is a build" }
            )))
        }
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn terminal_states_have_no_successors() {
        for s in [Completed, Refused, Failed, Cancelled] {
            assert!(is_terminal(Kind::BuildRequest, s));
        }
        for s in [Completed, Failed, Cancelled, Skipped] {
            assert!(is_terminal(Kind::JobRun, s));
        }
        assert!(!is_terminal(Kind::BuildRequest, Executing));
    }

    #[test]
    fn nothing_is_claimed_for_an_ended_build() {
        let ended = Current {
            build_request: Some(Failed),
            ..Default::default()
        };
        let claim = Event::partition(Some("b"), "p", Building).with_run("r");
        assert!(check(&claim, &ended).unwrap_err().0.contains("has ended"));
        let start = Event::job_run("b", "r", "j", Running);
        assert!(check(&start, &ended).is_err());
        // What a closed build's runs end with still goes in (a cancel that stops its runs).
        let end = Event::job_run("b", "r", "j", Cancelled);
        let running = Current {
            job_run: Some(Running),
            ..ended
        };
        assert!(check(&end, &running).is_ok());
    }

    /// A run is claimed `queued` (refused under an ended build, as any claim); its start, once
    /// its process runs, is no claim: it goes in under a build cancelled meanwhile.
    #[test]
    fn a_queued_run_starts_even_under_an_ended_build() {
        let ended = Current {
            build_request: Some(Cancelled),
            job_run: Some(Scheduled),
            ..Default::default()
        };
        let queued = Event::job_run("b", "r", "j", Queued);
        assert!(check(&queued, &ended).unwrap_err().0.contains("has ended"));
        let start = Event::job_run("b", "r", "j", Running);
        let was_queued = Current {
            job_run: Some(Queued),
            ..ended.clone()
        };
        assert!(check(&start, &was_queued).is_ok());
        // Cancelled before it started, or failed (its build closed): both end it.
        for end in [Cancelled, Failed] {
            assert!(check(&Event::job_run("b", "r", "j", end), &was_queued).is_ok());
        }
        let done = Event::job_run("b", "r", "j", Completed);
        assert!(
            check(&done, &was_queued).is_err(),
            "a run completes once it ran"
        );
        assert!(!is_terminal(Kind::JobRun, Queued));
    }

    proptest::proptest! {
        /// A run's `running` goes in exactly when its machine allows it and it is no claim
        /// under an ended build: the start of a queued run always, a claim of an older log only
        /// while its build lives.
        #[test]
        fn a_start_goes_in_when_its_machine_and_its_build_allow(
            run in proptest::option::of(proptest::sample::select(Status::ALL.to_vec())),
            build in proptest::option::of(proptest::sample::select(
                BUILD_REQUEST.iter().filter_map(|(from, _)| *from).chain([Completed, Failed, Cancelled]).collect::<Vec<_>>()
            )),
        ) {
            let current = Current { build_request: build, job_run: run, ..Default::default() };
            let ended = build.is_some_and(|b| is_terminal(Kind::BuildRequest, b));
            let expected = allowed(JOB_RUN, run, Running) && (run == Some(Queued) || !ended);
            let start = Event::job_run("b", "r", "j", Running);
            proptest::prop_assert_eq!(check(&start, &current).is_ok(), expected);
        }
    }

    /// An input the request had, whose data is gone, is made again or waited for again; what
    /// it made itself is not taken back by a late `failed`.
    #[test]
    fn a_partition_whose_data_is_gone_is_made_or_awaited_again() {
        let had = Current {
            build_request: Some(Executing),
            request_partition: Some(Available),
            partition: Some((Available, Some("r1".into()))),
            ..Default::default()
        };
        let waits = Event::partition(Some("b"), "p", Delegated);
        assert!(check(&waits, &had).is_ok(), "{:?}", check(&waits, &had));
        let makes = Event::partition(Some("b"), "p", Scheduled).with_run("r2");
        assert!(check(&makes, &had).is_ok(), "{:?}", check(&makes, &had));
        let failed = Event::partition(Some("b"), "p", Failed).with_run("r2");
        assert!(check(&failed, &had).is_err());
    }

    /// gc removes a partition's data on its own, never under a build or while a run holds it.
    #[test]
    fn a_removal_is_nobodys_and_waits_for_the_builder() {
        let removed = Event::partition(None, "p", Removed);
        assert!(check(&removed, &Current::default()).is_ok());
        let held = Current {
            partition: Some((Building, Some("r1".into()))),
            ..Default::default()
        };
        assert!(check(&removed, &held)
            .unwrap_err()
            .0
            .contains("being built by run r1"));
        let under_a_build = Event::partition(Some("b"), "p", Removed);
        assert!(check(&under_a_build, &Current::default()).is_err());
        // After it, a build claims the partition as any other.
        let gone = Current {
            request_partition: Some(Scheduled),
            partition: Some((Removed, Some("r1".into()))),
            ..Default::default()
        };
        let claim = Event::partition(Some("b"), "p", Building).with_run("r2");
        assert!(check(&claim, &gone).is_ok());
    }

    #[test]
    fn claims_are_exclusive() {
        let building = |run: &str| Event::partition(Some("b2"), "p", Building).with_run(run);
        let held = Current {
            request_partition: Some(Scheduled),
            partition: Some((Building, Some("r1".into()))),
            ..Default::default()
        };
        let err = check(&building("r2"), &held).unwrap_err();
        assert_eq!(err.0, "partition p is already being built by run r1");
        let done = Event::partition(Some("b2"), "p", Available).with_run("r2");
        let held = Current {
            request_partition: Some(Building),
            ..held
        };
        assert!(check(&done, &held)
            .unwrap_err()
            .0
            .contains("not building it"));
    }

    #[test]
    fn a_lost_claim_says_which_race_it_lost() {
        let claim = |after: Option<&str>| {
            Event::partition(Some("b2"), "p", Building)
                .with_run("r2")
                .with_data(|d| d.claim_after = after.map(str::to_string))
        };
        let held = Current {
            request_partition: Some(Scheduled),
            partition: Some((Building, Some("r1".into()))),
            ..Default::default()
        };
        assert_eq!(
            check(&claim(None), &held).unwrap_err().1,
            RefusalKind::AlreadyBeingBuilt
        );
        let made = Current {
            partition: Some((Available, Some("r1".into()))),
            ..held
        };
        assert_eq!(
            check(&claim(Some("")), &made).unwrap_err().1,
            RefusalKind::ChangedSinceChecked
        );
        let ended = Event::build_request("b", Executing);
        assert_eq!(
            check(&ended, &Current::default()).unwrap_err().1,
            RefusalKind::Invalid
        );
    }

    #[test]
    fn refuses_skipping_steps_and_missing_fields() {
        let e = Event::build_request("b", Executing);
        let err = check(&e, &Current::default()).unwrap_err();
        assert_eq!(
            err.0,
            "build request b cannot go to `executing` from nothing (it is new)"
        );
        let mut e = Event::job_run("b", "r", "j", Scheduled);
        e.job = None;
        assert_eq!(
            check(&e, &Current::default()).unwrap_err().0,
            "a job_run event needs `job`"
        );
    }

    #[test]
    fn only_an_analysis_records_part_of_its_request() {
        let received = |analyze_only: bool, listed: usize, count: u64| {
            Event::build_request("b", Received).with_data(|d| {
                d.requested = (0..listed).map(|i| format!("a/{i}")).collect();
                d.analyze_only = analyze_only;
                d.requested_count = Some(count);
            })
        };
        assert!(check(&received(true, 3, 5), &Current::default()).is_ok());
        for (analyze_only, listed, count) in [(false, 3, 5), (true, 3, 2)] {
            let err = check(&received(analyze_only, listed, count), &Current::default());
            assert!(err.unwrap_err().0.contains("`requested_count`"));
        }
    }
}
