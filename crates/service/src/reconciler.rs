//! The reconciler: makes wanted partitions live as soon as they can be.
//!
//! It follows the event log (new events since the last it saw, by index) instead of re-checking
//! every want on a timer: a new want, a partition becoming available, sealed, expired or tainted,
//! and a build ending mark the wants they concern for a look. Only external data that announces
//! nothing (files, probes) is polled, every `DATABUILD_WANT_PROBE_INTERVAL` (default 10 s), and
//! only for the wants waiting on it. A look decides (see [`databuild_exec::engine::wants::Decision`]):
//! satisfied, expired, wait (saying for what, and asking an upstream service to build it), or
//! start a build. Deadlines (TTL, SLA) and the graph's recurring `[[want]]`s are checked every
//! second, in memory.
//!
//! A want whose build failed gets no new event to wake it: it is held back until its `retry_at`
//! (recorded in its `waiting` event), kept in a queue of deadlines that each pass pops when due.
//! The first wait is `DATABUILD_WANT_RETRY_INTERVAL` (default 60 s), doubled after each failure
//! in a row up to an hour ([`databuild_core::wants::retry_delay`]). A change to a partition it
//! needs (its refs, or what its build reads) tries it at once and starts the doubling over, as
//! does its being satisfied or waiting for something else.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use databuild_exec::engine::wants::Decision;
use databuild_exec::Engine;
use databuild_log::{Event, EventFilter, Kind, Status, WantRow};

use crate::AppState;

/// How often the log is checked for new events.
const TICK: Duration = Duration::from_millis(200);

pub fn spawn(state: Arc<AppState>, stop: Arc<AtomicBool>) {
    let runtime = tokio::runtime::Handle::current();
    let (probe_every, retry_base) = (state.intervals.want_probes, state.intervals.want_retry);
    std::thread::Builder::new()
        .name("reconciler".into())
        .spawn(move || {
            let mut r = Reconciler::new(state, runtime, probe_every, retry_base);
            while !stop.load(Ordering::Relaxed) {
                if let Err(e) = r.pass() {
                    eprintln!("reconciler: {e}");
                    std::thread::sleep(Duration::from_secs(1));
                }
            }
        })
        .expect("a thread");
}

/// A want whose build failed, held back until `retry_at`.
struct Backoff {
    /// Failed builds in a row.
    failures: u32,
    /// When it is tried again (ns since the epoch), as its `waiting` event says.
    retry_at: i64,
    /// Its refs and what its build reads: a change to one tries it again at once.
    needs: HashSet<String>,
    /// What its `waiting` event says.
    message: String,
}

impl Backoff {
    /// Records that `want` waits, held back: why, and when it is tried again.
    fn note(&self, engine: &Engine, want: &WantRow) -> Result<()> {
        let message = Some(self.message.clone());
        engine.note_want(
            want,
            Status::Waiting,
            None,
            message,
            None,
            Some(self.retry_at),
        )?;
        Ok(())
    }
}

struct Reconciler {
    state: Arc<AppState>,
    runtime: tokio::runtime::Handle,
    probe_every: Duration,
    /// The first wait before a want whose build failed is tried again.
    retry_base: Duration,
    /// The last event index looked at.
    seen: i64,
    /// Wants to look at in this pass.
    dirty: BTreeSet<String>,
    /// Builds started for wants, by want.
    building: HashMap<String, String>,
    /// Wants whose build failed, by want.
    backoff: HashMap<String, Backoff>,
    /// When each of those is due, soonest first: `(retry_at, want)`. An entry whose want's
    /// backoff is gone or holds another time is stale, dropped when it comes due.
    retries: BTreeSet<(i64, String)>,
    /// Upstream builds asked for, by ref.
    asked: HashMap<String, String>,
    /// Upstream builds that ended (sent by their followers).
    ended: (mpsc::Sender<String>, mpsc::Receiver<String>),
    sla_recorded: BTreeSet<(String, String)>,
    /// Wants whose `sla_at_risk` is recorded: once per want.
    at_risk_recorded: BTreeSet<String>,
    recurring_done: HashSet<(String, Vec<String>)>,
    last_second: Instant,
    last_probe: Instant,
    started: bool,
}

type Result<T> = std::result::Result<T, databuild_exec::EngineError>;

impl Reconciler {
    fn new(
        state: Arc<AppState>,
        runtime: tokio::runtime::Handle,
        probe_every: Duration,
        retry_base: Duration,
    ) -> Self {
        Reconciler {
            state,
            runtime,
            probe_every,
            retry_base,
            seen: 0,
            dirty: BTreeSet::new(),
            building: HashMap::new(),
            backoff: HashMap::new(),
            retries: BTreeSet::new(),
            asked: HashMap::new(),
            ended: mpsc::channel(),
            sla_recorded: BTreeSet::new(),
            at_risk_recorded: BTreeSet::new(),
            recurring_done: HashSet::new(),
            last_second: Instant::now() - Duration::from_secs(2),
            last_probe: Instant::now(),
            started: false,
        }
    }

    fn engine(&self) -> &Engine {
        &self.state.engine
    }

    fn active(&self) -> Result<Vec<WantRow>> {
        Ok(self.engine().store.wants(None, true, 100_000)?)
    }

    /// One turn: wait a tick (or for an upstream build to end), then look at what changed.
    fn pass(&mut self) -> Result<()> {
        if !self.started {
            // Start from the log's end, looking once at every active want.
            self.seen = self.engine().store.last_idx()?;
            self.sla_recorded = self.engine().recorded_sla_misses()?;
            self.at_risk_recorded = self.engine().recorded_at_risk()?;
            for w in self.active()? {
                // A want held back before a restart stays held back until its recorded time.
                if let Some(retry_at) = w.retry_at {
                    let backoff = Backoff {
                        failures: 1,
                        retry_at,
                        needs: w.refs.iter().cloned().collect(),
                        message: w.message.clone().unwrap_or_default(),
                    };
                    self.hold_back(&w.want_id, backoff);
                }
                self.dirty.insert(w.want_id);
            }
            self.started = true;
        }
        if let Ok(r) = self.ended.1.recv_timeout(TICK) {
            self.asked.remove(&r);
            self.wake_waiting_on(&r)?;
        }
        self.follow_log()?;
        self.due_retries();
        if self.last_second.elapsed() >= Duration::from_secs(1) {
            self.last_second = Instant::now();
            self.recurring()?;
            self.deadlines()?;
        }
        if self.last_probe.elapsed() >= self.probe_every {
            self.last_probe = Instant::now();
            // One read of the active wants for both.
            let active = self.active()?;
            self.probe_externals(&active);
            self.risks(active)?;
        }
        for id in std::mem::take(&mut self.dirty) {
            match self.engine().store.want(&id)? {
                Some(want) if want.is_active() => self.look_at(&want)?,
                _ => self.forget_failures(&id),
            }
        }
        Ok(())
    }

    /// Marks the wants that new events concern.
    fn follow_log(&mut self) -> Result<()> {
        if self.engine().store.last_idx()? <= self.seen {
            return Ok(());
        }
        let events = self.engine().store.events(&EventFilter {
            since: Some(self.seen),
            limit: Some(10_000),
            ..Default::default()
        })?;
        let Some(last) = events.last() else {
            return Ok(());
        };
        self.seen = last.idx;
        let mut touched: HashSet<String> = HashSet::new();
        let mut ended_builds: HashSet<String> = HashSet::new();
        let mut everything = false;
        for e in &events {
            match (e.kind, e.status) {
                (Kind::Want, Status::Requested) => {
                    self.dirty.extend(e.data.want_id.clone());
                }
                // A taint concerns every active want; its ref still tries a held back want again.
                (Kind::Partition, Status::Tainted) => {
                    everything = true;
                    touched.extend(e.partition_ref.clone());
                }
                (Kind::Partition, Status::Available | Status::Sealed | Status::Expired)
                    if e.build_request_id.is_none() || e.job_run_id.is_some() =>
                {
                    touched.extend(e.partition_ref.clone());
                }
                // A check decides whether a partition is live.
                (Kind::Check, _) => touched.extend(e.partition_ref.clone()),
                (Kind::BuildRequest, s) if databuild_log::state::is_terminal(e.kind, s) => {
                    ended_builds.extend(e.build_request_id.clone());
                }
                _ => {}
            }
        }
        // A want held back after a failed build is tried at once when something it needs changes.
        let changed: Vec<String> = self
            .backoff
            .iter()
            .filter(|(id, b)| {
                !self.building.contains_key(*id) && b.needs.iter().any(|r| touched.contains(r))
            })
            .map(|(id, _)| id.clone())
            .collect();
        for id in changed {
            self.forget_failures(&id);
            self.dirty.insert(id);
        }
        if touched.is_empty() && ended_builds.is_empty() && !everything {
            return Ok(());
        }
        for w in self.active()? {
            let concerned = everything
                || w.waiting_for.as_ref().is_some_and(|r| touched.contains(r))
                || w.refs.iter().any(|r| touched.contains(r))
                || self
                    .building
                    .get(&w.want_id)
                    .is_some_and(|b| ended_builds.contains(b));
            if concerned {
                self.dirty.insert(w.want_id);
            }
        }
        Ok(())
    }

    /// Marks the wants whose time to be tried again has come.
    fn due_retries(&mut self) {
        let now = databuild_log::event::now_ns();
        while let Some((at, id)) = self.retries.first().cloned() {
            if at > now {
                break;
            }
            self.retries.pop_first();
            // Only if the entry is not stale.
            if self.backoff.get(&id).is_some_and(|b| b.retry_at == at) {
                self.dirty.insert(id);
            }
        }
    }

    /// Holds a want back until its backoff's `retry_at`.
    fn hold_back(&mut self, id: &str, backoff: Backoff) {
        self.retries.insert((backoff.retry_at, id.to_string()));
        self.backoff.insert(id.to_string(), backoff);
    }

    /// The want is satisfied, waits for something else, ended, or what it needs changed: its
    /// failed builds no longer hold it back.
    fn forget_failures(&mut self, id: &str) {
        self.backoff.remove(id);
    }

    /// Its build failed (`why`): holds the want back, a longer time for each failure in a row,
    /// or until something it `needs` changes.
    fn failed(&mut self, want: &WantRow, why: String, needs: HashSet<String>) -> &Backoff {
        let failures = self.backoff.get(&want.want_id).map_or(0, |b| b.failures) + 1;
        let delay = databuild_core::wants::retry_delay(self.retry_base, failures);
        let retry_at = databuild_log::event::now_ns()
            .saturating_add(delay.as_nanos().min(i64::MAX as u128) as i64);
        let message = format!(
            "{why} ({failures} time(s) in a row); trying again at {}, or as soon as something it \
             needs changes",
            databuild_exec::answers::rfc3339(retry_at)
        );
        let backoff = Backoff {
            failures,
            retry_at,
            needs,
            message,
        };
        self.hold_back(&want.want_id, backoff);
        &self.backoff[&want.want_id]
    }

    fn wake_waiting_on(&mut self, r: &str) -> Result<()> {
        for w in self.active()? {
            if w.waiting_for.as_deref() == Some(r) {
                self.dirty.insert(w.want_id);
            }
        }
        Ok(())
    }

    /// Wants waiting on external data that announces nothing: files, probes, upstream services.
    fn probe_externals(&mut self, active: &[WantRow]) {
        for w in active {
            let Some(r) = &w.waiting_for else { continue };
            let external = matches!(
                self.engine().graph.producer_of(r),
                Some((databuild_core::Producer::Dataset(d), _))
                    if self.engine().graph.datasets[d].source.is_none()
            );
            if external && w.status == Status::Waiting {
                self.dirty.insert(w.want_id.clone());
            }
        }
    }

    /// TTLs and SLAs, in memory but for the partitions overdue.
    fn deadlines(&mut self) -> Result<()> {
        let now = databuild_log::event::now_ns();
        for w in self.active()? {
            if w.expires_at.is_some_and(|t| now >= t) {
                self.dirty.insert(w.want_id.clone());
                continue;
            }
            if w.status == Status::Satisfied || !w.has_deadline() {
                continue;
            }
            for (r, deadline) in self.engine().sla_misses(&w, now, &self.sla_recorded)? {
                if self.sla_recorded.insert((w.want_id.clone(), r.clone())) {
                    self.engine().note_sla_miss(&w, &r, deadline)?;
                }
            }
        }
        Ok(())
    }

    /// Unsatisfied wants with a deadline whose forecast passes it before it comes: each
    /// recorded once as `sla_at_risk`. Checked every probe interval, as a forecast reads the log.
    fn risks(&mut self, active: Vec<WantRow>) -> Result<()> {
        let now = databuild_log::event::now_ns();
        for w in active {
            let unchecked = w.status != Status::Satisfied
                && w.has_deadline()
                && !self.at_risk_recorded.contains(&w.want_id);
            if !unchecked {
                continue;
            }
            let risk = self.engine().want_risk(&w);
            if risk.at_risk_deadline_ns.is_some_and(|due| now < due) {
                self.engine().note_at_risk(&w, &risk)?;
                self.at_risk_recorded.insert(w.want_id);
            }
        }
        Ok(())
    }

    /// This day's (or hour's, for refs naming `{now}`) instance of each `[[want]]` of the graph,
    /// made once.
    fn recurring(&mut self) -> Result<()> {
        if self.engine().graph.wants.is_empty() {
            return Ok(());
        }
        let now = self.engine().now();
        let recurring = self.engine().graph.wants.clone();
        // `by = "07:00"`: the instance made today is due today at 07:00 (the clock's day).
        let due = |t| databuild_core::wants::at_time_on(now.date(), t);
        for rw in &recurring {
            let mut refs = Vec::new();
            for t in &rw.refs {
                refs.extend(
                    databuild_core::wants::expand(t, now, &self.engine().graph.domains)
                        .map_err(|e| databuild_exec::EngineError::Invalid(e.to_string()))?,
                );
            }
            let key = (rw.name.clone(), refs.clone());
            if self.recurring_done.contains(&key) {
                continue;
            }
            let exists = self
                .engine()
                .store
                .wants(None, false, 1000)?
                .iter()
                .any(|w| w.recurring.as_deref() == Some(&rw.name) && w.refs == refs);
            if !exists {
                let deadline = rw.by.map(due);
                let parsed = refs
                    .iter()
                    .map(|r| databuild_core::PartitionRef::new(r.as_str()))
                    .collect::<std::result::Result<Vec<_>, _>>()
                    .map_err(|e| databuild_exec::EngineError::Invalid(e.to_string()))?;
                self.engine()
                    .want(&parsed, Some(rw.ttl), rw.sla, deadline, Some(&rw.name))?;
            }
            self.recurring_done.insert(key);
        }
        Ok(())
    }

    /// Decides about one want and acts.
    fn look_at(&mut self, want: &WantRow) -> Result<()> {
        let engine = self.state.engine.clone();
        let now = databuild_log::event::now_ns();
        let decision = engine.decide(want, now)?;
        if !matches!(decision, Decision::Build { .. }) {
            self.forget_failures(&want.want_id);
        }
        match decision {
            Decision::Satisfied => {
                self.building.remove(&want.want_id);
                let message = format!("all {} partition(s) live", want.refs.len());
                engine.note_want(want, Status::Satisfied, None, Some(message), None, None)?;
            }
            Decision::Expire => {
                engine
                    .store
                    .append(vec![Event::want(&want.want_id, Status::Expired)
                        .with_message("its time to live has passed")])?;
            }
            Decision::Wait {
                partition_ref,
                dataset,
                upstream: None,
                failed_check,
            } => {
                let message = match failed_check {
                    Some(why) => format!(
                        "waiting for `{partition_ref}`, which {why}: its data must be fixed and `databuild check` pass"
                    ),
                    None => format!("waiting for `{partition_ref}` (dataset `{dataset}`)"),
                };
                engine.note_want(
                    want,
                    Status::Waiting,
                    Some(&partition_ref),
                    Some(message),
                    None,
                    None,
                )?;
            }
            Decision::Wait {
                partition_ref,
                upstream: Some(upstream),
                ..
            } => self.ask_upstream(want, &partition_ref, &upstream)?,
            Decision::Build { refs, reads } => self.build(want, refs, reads)?,
        }
        Ok(())
    }

    fn ask_upstream(&mut self, want: &WantRow, r: &str, upstream: &str) -> Result<()> {
        let engine = self.state.engine.clone();
        if let Some(id) = self.asked.get(r) {
            let message = format!("waiting for `{r}` from {upstream} (its build request {id})");
            engine.note_want(want, Status::Waiting, Some(r), Some(message), None, None)?;
            return Ok(());
        }
        let token = engine.config.upstream_token.as_deref();
        match databuild_exec::data::upstream::request_build_with(upstream, &[r.to_string()], token)
        {
            Ok(id) => {
                self.asked.insert(r.to_string(), id.clone());
                let (tx, up, build, partition) = (
                    self.ended.0.clone(),
                    upstream.to_string(),
                    id.clone(),
                    r.to_string(),
                );
                std::thread::spawn(move || {
                    if let Err(e) = databuild_exec::data::upstream::follow(&up, &build) {
                        eprintln!("reconciler: {e}");
                        std::thread::sleep(Duration::from_secs(5));
                    }
                    let _ = tx.send(partition);
                });
                let message = format!("asked {upstream} to build `{r}` (its build request {id})");
                let link = format!("{upstream}/api/v1/builds/{id}");
                engine.note_want(
                    want,
                    Status::Waiting,
                    Some(r),
                    Some(message),
                    Some(link),
                    None,
                )?;
            }
            Err(e) => {
                let message = format!("waiting for `{r}` from {upstream}: {e}");
                engine.note_want(want, Status::Waiting, Some(r), Some(message), None, None)?;
            }
        }
        Ok(())
    }

    fn build(&mut self, want: &WantRow, refs: Vec<String>, reads: Vec<String>) -> Result<()> {
        let engine = self.state.engine.clone();
        let needs: HashSet<String> = refs.iter().chain(&reads).cloned().collect();
        if let Some(id) = self.building.get(&want.want_id).cloned() {
            let status = engine.store.build_request(&id)?.map(|b| b.status);
            let ended =
                status.is_none_or(|s| databuild_log::state::is_terminal(Kind::BuildRequest, s));
            if !ended {
                return Ok(());
            }
            self.building.remove(&want.want_id);
            if status != Some(Status::Completed) {
                let how = status.map_or("is gone".to_string(), |s| s.to_string());
                self.failed(want, format!("its build request {id} {how}"), needs.clone());
            }
        }
        if let Some(b) = self.backoff.get_mut(&want.want_id) {
            b.needs.clone_from(&needs);
            if databuild_log::event::now_ns() < b.retry_at {
                return b.note(&engine, want);
            }
        }
        // Wants are prod's: their builds run in prod.
        let started = self.runtime.block_on(crate::ops::start_build(
            &self.state,
            &crate::environment::Env::prod(&self.state),
            crate::ops::BuildRequest {
                partitions: refs.clone(),
                force: false,
                keep_going: false,
                allow_stale: false,
                parallel: None,
                max_runs: None,
            },
        ));
        match started {
            Ok(id) => {
                self.building.insert(want.want_id.clone(), id.clone());
                let message = format!("building {} partition(s) in build request {id}", refs.len());
                engine.note_want(want, Status::Waiting, None, Some(message), Some(id), None)?;
            }
            Err(e) => {
                let why = format!("cannot start a build: {}", e.message);
                self.failed(want, why, needs).note(&engine, want)?;
            }
        }
        Ok(())
    }
}
