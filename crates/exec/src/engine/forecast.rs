//! Forecasts: when a partition not live is expected to be, and why. An external partition is
//! expected by its dataset's cadence (core `cadence`, learned from the log's arrivals); a job's
//! output when the last external input its plan misses lands, plus the plan's wall time at the
//! machine's parallelism (core `estimate`, at each job's median and p90 run durations), or when
//! the runs already making it end.
//!
//! [`ExternalExpectation`] is the one place an external partition's expected times and
//! lateness are decided.

use databuild_core::cadence::{self, Cadence, Key, KeyKind};
use databuild_core::estimate::JobDurations;
use databuild_core::{Pattern, Plan, PlanRequest, Producer};
use rustc_hash::FxHashMap;

use super::{jobs, Engine, Result};
use crate::answers::{
    DerivedStatus, ExpectedTimes, Forecast, ForecastStep, Landing, LandingMeasure, Landings, Late,
    StatusReport,
};

const NS_PER_MS: f64 = 1e6;

/// What a dataset's arrivals say of one of its partitions: its cadence in words, when it is
/// expected and whether it is late (past its p90), or why that is not known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExternalExpectation {
    pub cadence: Option<String>,
    pub times: Option<ExpectedTimes>,
    pub late: bool,
    pub reason: Option<String>,
}

impl ExternalExpectation {
    fn unknown(cadence: Option<String>, reason: String) -> Self {
        ExternalExpectation {
            cadence,
            times: None,
            late: false,
            reason: Some(reason),
        }
    }
}

/// The typed field a dataset's partitions are ordered by: its pattern's last `date`, `hour` or
/// `int` field (a `str` field has no order), by index and kind.
pub(crate) fn key_field(pattern: &Pattern) -> Option<(usize, KeyKind)> {
    pattern
        .fields()
        .enumerate()
        .filter_map(|(i, (_, ty))| KeyKind::of(ty).map(|k| (i, k)))
        .last()
}

/// Can any external partition of `graph` be forecast (and so be late)? Only a dataset no other
/// service builds, with a date, hour or int field to order its partitions by, has a cadence.
pub(crate) fn any_forecastable(graph: &databuild_core::Graph) -> bool {
    (graph.datasets.iter()).any(|d| d.upstream.is_none() && key_field(&d.pattern).is_some())
}

/// `r`'s key in `pattern`'s field `field`.
pub(crate) fn key_of(pattern: &Pattern, (field, kind): (usize, KeyKind), r: &str) -> Option<Key> {
    kind.parse(pattern.match_ref(r)?.get(field)?)
}

/// Datasets' cadences, each learned once per call (one bounded read of its latest arrivals).
pub(crate) struct Cadences<'e> {
    engine: &'e Engine,
    learned: FxHashMap<usize, std::result::Result<Cadence, String>>,
    /// Each dataset's latest arrivals read so far: read once, for its cadence and its caller.
    recent: FxHashMap<usize, Vec<databuild_log::ArrivalRow>>,
}

impl<'e> Cadences<'e> {
    pub(crate) fn new(engine: &'e Engine) -> Self {
        Cadences {
            engine,
            learned: FxHashMap::default(),
            recent: FxHashMap::default(),
        }
    }

    /// Dataset `d`'s latest arrivals (its cadence's window), latest first.
    pub(crate) fn recent(&mut self, d: usize) -> Result<&[databuild_log::ArrivalRow]> {
        if !self.recent.contains_key(&d) {
            let name = &self.engine.graph.datasets[d].name;
            let rows = self.engine.store.recent_arrivals(name, cadence::WINDOW)?;
            self.recent.insert(d, rows);
        }
        Ok(&self.recent[&d])
    }

    /// Dataset `d`'s cadence, or why it has none.
    pub(crate) fn of(&mut self, d: usize) -> Result<&std::result::Result<Cadence, String>> {
        if !self.learned.contains_key(&d) {
            let learned = self.learn(d)?;
            self.learned.insert(d, learned);
        }
        Ok(&self.learned[&d])
    }

    /// Dataset `d`'s cadence from its latest arrivals, or why there is none.
    fn learn(&mut self, d: usize) -> Result<std::result::Result<Cadence, String>> {
        let dataset = &self.engine.graph.datasets[d];
        if dataset.upstream.is_some() {
            return Ok(Err(
                "another service builds it: ask its own forecast".to_string()
            ));
        }
        let Some(field) = key_field(&dataset.pattern) else {
            return Ok(Err(format!(
                "its pattern `{}` has no date, hour or int field to order its partitions by",
                dataset.pattern.as_str()
            )));
        };
        let pattern = &dataset.pattern;
        let arrivals: Vec<cadence::Arrival> = (self.recent(d)?.iter())
            .filter_map(|a| {
                Some(cadence::Arrival {
                    key: key_of(pattern, field, &a.partition_ref)?,
                    at_ns: a.arrived_at,
                })
            })
            .collect();
        Ok(cadence::learn(&arrivals).map_err(|e| e.to_string()))
    }

    /// Partition `r` of dataset `d`, if it is late at `now_ns`: past the p90 of its cadence.
    pub(crate) fn late(&mut self, d: usize, r: &str, now_ns: i64) -> Result<Option<Late>> {
        let e = self.expect(d, r, now_ns)?;
        Ok(e.times
            .filter(|_| e.late)
            .map(|t| Late::new(r, t.by_ns, now_ns)))
    }

    /// When partition `r` of dataset `d` is expected, and whether it is late at `now_ns`.
    pub(crate) fn expect(&mut self, d: usize, r: &str, now_ns: i64) -> Result<ExternalExpectation> {
        let dataset = &self.engine.graph.datasets[d];
        let field = key_field(&dataset.pattern);
        let cadence = match self.of(d)? {
            Ok(c) => c,
            Err(why) => {
                return Ok(ExternalExpectation::unknown(
                    None,
                    format!("dataset `{}`: {why}", dataset.name),
                ))
            }
        };
        let explained = Some(cadence.explain());
        let Some(key) = field.and_then(|f| key_of(&dataset.pattern, f, r)) else {
            return Ok(ExternalExpectation::unknown(
                explained,
                format!("`{r}` has no key of dataset `{}` to expect", dataset.name),
            ));
        };
        let Some(e) = cadence.expect(key) else {
            let day = key.weekday().map_or(String::new(), |d| format!(" on {d}"));
            return Ok(ExternalExpectation::unknown(
                explained,
                format!(
                    "dataset `{}` never lands{day}: `{r}` is not expected",
                    dataset.name
                ),
            ));
        };
        Ok(ExternalExpectation {
            cadence: explained,
            times: Some(ExpectedTimes {
                at_ns: e.at_ns,
                by_ns: e.by_ns,
            }),
            late: now_ns > e.by_ns,
            reason: None,
        })
    }
}

impl Engine {
    /// When external dataset `name`'s latest partitions (its cadence's window) landed, its
    /// cadence's band and the next one's expectation; `None` for a dataset it does not know or
    /// whose partitions have no key to order them by.
    pub fn landings(&self, name: &str) -> Result<Option<Landings>> {
        let Some(d) = self.graph.datasets.iter().position(|x| x.name == name) else {
            return Ok(None);
        };
        let pattern = &self.graph.datasets[d].pattern;
        let Some(field) = key_field(pattern) else {
            return Ok(None);
        };
        let mut cadences = Cadences::new(self);
        let mut arrived: Vec<(Key, String, i64)> = (cadences.recent(d)?.iter())
            .filter_map(|a| {
                Some((
                    key_of(pattern, field, &a.partition_ref)?,
                    a.partition_ref.clone(),
                    a.arrived_at,
                ))
            })
            .collect();
        arrived.sort();
        let measure = match field.1 {
            KeyKind::Int => LandingMeasure::AfterPreviousKey,
            KeyKind::Date | KeyKind::Hour => LandingMeasure::AfterPeriodEnd,
        };
        let points = arrived
            .iter()
            .enumerate()
            .filter_map(|(i, (key, r, at))| {
                let from = match key.period_end_ns() {
                    Some(end) => end,
                    // An int key: per key since the previous one's arrival.
                    None => {
                        let (before, _, before_at) = arrived.get(i.checked_sub(1)?)?;
                        let steps = (key.n - before.n).max(1);
                        return Some(Landing {
                            partition_ref: r.clone(),
                            after_ns: (at - before_at) / steps,
                        });
                    }
                };
                Some(Landing {
                    partition_ref: r.clone(),
                    after_ns: at - from,
                })
            })
            .collect();
        let band = cadences
            .of(d)?
            .as_ref()
            .ok()
            .map(|c| (c.median_ns, c.p90_ns));
        let next = match (cadences.of(d)?.as_ref().ok(), arrived.last()) {
            (Some(c), Some((last, r, _))) => {
                let next_key = c.next_key(*last);
                next_ref(pattern, field.0, r, next_key)
            }
            _ => None,
        };
        let next = match next {
            Some(r) => {
                let e = cadences.expect(d, &r, self.config.clock.now_ns())?;
                e.times.map(|t| (r, t, e.late))
            }
            None => None,
        };
        Ok(Some(Landings {
            measure,
            points,
            band,
            next,
        }))
    }
}

/// `r` with its key field (`field`) set to `key`.
fn next_ref(pattern: &Pattern, field: usize, r: &str, key: Key) -> Option<String> {
    let text = key.render()?;
    let mut values: Vec<String> = pattern
        .match_ref(r)?
        .iter()
        .map(|v| v.to_string())
        .collect();
    *values.get_mut(field)? = text;
    let values: Vec<&str> = values.iter().map(String::as_str).collect();
    Some(pattern.render(&values))
}

/// The forecast of each of `refs`, in order.
pub(crate) fn forecast(engine: &Engine, refs: &[String]) -> Result<Vec<Forecast>> {
    // Their statuses as told, but for lateness, which the forecast decides itself.
    let statuses = engine.status_isolated(refs)?;
    let now = engine.config.clock.now_ns();
    let mut cadences = Cadences::new(engine);
    statuses
        .iter()
        .map(|s| forecast_one(engine, s, now, &mut cadences))
        .collect()
}

fn forecast_one(
    engine: &Engine,
    status: &StatusReport,
    now: i64,
    cadences: &mut Cadences<'_>,
) -> Result<Forecast> {
    let r = status.partition_ref.as_str();
    if let Some(error) = &status.error {
        return Err(super::EngineError::Invalid(error.message.clone()));
    }
    if status.status == DerivedStatus::Live {
        return Ok(Forecast::without_times(r, status.status, None));
    }
    if let Some((Producer::Dataset(d), _)) = engine.graph.producer_of(r) {
        if status.status != DerivedStatus::Missing {
            // There, but not live (tainted): no arrival is awaited; its status says what is.
            let why = status.reasons.join("; ");
            return Ok(Forecast::without_times(r, status.status, Some(why)));
        }
        let e = cadences.expect(d, r, now)?;
        let step = external_step(engine, d, r, &e);
        return Ok(Forecast::new(
            r,
            status.status,
            e.times,
            e.late,
            e.reason,
            vec![step],
        ));
    }
    job_output(engine, status, now, cadences)
}

fn external_step(engine: &Engine, d: usize, r: &str, e: &ExternalExpectation) -> ForecastStep {
    ForecastStep::external(
        r,
        &engine.graph.datasets[d].name,
        e.cadence.clone(),
        e.times,
        e.late,
        e.reason.clone(),
    )
}

/// What a forecast of a job's output gathers: its steps, what is not known, when the runs can
/// start (at the medians, and at the p90s), and whether an input is late.
struct Gathered {
    basis: Vec<ForecastStep>,
    unknown: Vec<String>,
    start: ExpectedTimes,
    late: bool,
}

impl Gathered {
    /// Nothing can start before `t`.
    fn after(&mut self, t: ExpectedTimes) {
        self.start.at_ns = self.start.at_ns.max(t.at_ns);
        self.start.by_ns = self.start.by_ns.max(t.by_ns);
    }
}

/// A job's output: its plan's missing externals, the runs already making what it needs, then
/// its runs still to go. As if every run waited for the last external input: a forecast errs
/// late rather than early.
fn job_output(
    engine: &Engine,
    status: &StatusReport,
    now: i64,
    cadences: &mut Cadences<'_>,
) -> Result<Forecast> {
    let r = status.partition_ref.as_str();
    let request = PlanRequest {
        refs: vec![databuild_core::PartitionRef::new(r)
            .map_err(|e| super::EngineError::Invalid(e.to_string()))?],
        ..Default::default()
    };
    let plan = match super::planning::plan(engine, &request) {
        Ok(plan) => plan,
        Err(e) => {
            let why = format!("it cannot be planned: {e}");
            return Ok(Forecast::without_times(r, status.status, Some(why)));
        }
    };
    let mut g = Gathered {
        basis: Vec::new(),
        unknown: Vec::new(),
        start: ExpectedTimes {
            at_ns: now,
            by_ns: now,
        },
        late: false,
    };
    missing_inputs(engine, &plan, now, cadences, &mut g)?;
    runs_under_way(engine, &plan, now, &mut g)?;
    let wall = runs_to_go(engine, &plan, &mut g)?;
    if !g.unknown.is_empty() {
        return Ok(Forecast::new(
            r,
            status.status,
            None,
            g.late,
            Some(g.unknown.join("; ")),
            g.basis,
        ));
    }
    let times = ExpectedTimes {
        at_ns: g.start.at_ns.saturating_add((wall.0 * NS_PER_MS) as i64),
        by_ns: g.start.by_ns.saturating_add((wall.1 * NS_PER_MS) as i64),
    };
    Ok(Forecast::new(
        r,
        status.status,
        Some(times),
        g.late,
        None,
        g.basis,
    ))
}

/// Each external input the plan misses, expected by its dataset's cadence.
fn missing_inputs(
    engine: &Engine,
    plan: &Plan,
    now: i64,
    cadences: &mut Cadences<'_>,
    g: &mut Gathered,
) -> Result<()> {
    for m in &plan.missing {
        let r = m.partition_ref.as_str();
        if let Some(check) = &m.failed_check {
            g.unknown.push(format!(
                "`{r}` is held back ({check}): it needs a rebuild or a fix"
            ));
            continue;
        }
        let Some((Producer::Dataset(d), _)) = engine.graph.producer_of(r) else {
            continue;
        };
        let e = cadences.expect(d, r, now)?;
        g.late |= e.late;
        match (e.times, &e.reason) {
            (Some(t), _) => g.after(t),
            (None, Some(why)) => g.unknown.push(why.clone()),
            (None, None) => {}
        }
        g.basis.push(external_step(engine, d, r, &e));
    }
    Ok(())
}

/// The runs other builds are making the plan's delegated refs with: each expected to end its
/// job's durations after it started (or now, if it waits for a slot).
fn runs_under_way(engine: &Engine, plan: &Plan, now: i64, g: &mut Gathered) -> Result<()> {
    if plan.delegated.is_empty() {
        return Ok(());
    }
    let refs: Vec<&str> = plan
        .delegated
        .iter()
        .map(|d| d.partition_ref.as_str())
        .collect();
    let mut ids: Vec<String> = engine
        .store
        .partitions_by_ref(&refs)?
        .into_iter()
        .filter_map(|p| p.job_run_id)
        .collect();
    ids.sort();
    ids.dedup();
    let ids: Vec<&str> = ids.iter().map(String::as_str).collect();
    for run in engine.store.job_runs_by_id(&ids)? {
        if !run.status.run_unfinished() {
            continue;
        }
        let started = run.started_at.unwrap_or(now);
        let end = match jobs::durations(engine, &run.job)? {
            Some((p50, p90, _)) => {
                let t = ExpectedTimes {
                    at_ns: (started + (p50 * NS_PER_MS) as i64).max(now),
                    by_ns: (started + (p90 * NS_PER_MS) as i64).max(now),
                };
                g.after(t);
                Some(t.at_ns)
            }
            None => {
                g.unknown.push(no_timed_run(&run.job));
                None
            }
        };
        g.basis.push(ForecastStep::running(
            &run.job_run_id,
            &run.job,
            run.status,
            end,
        ));
    }
    Ok(())
}

fn no_timed_run(job: &str) -> String {
    format!("job `{job}` has no timed run yet: its duration is not known")
}

/// The plan's runs by job with their durations, the queue wait and the critical path; returns
/// the plan's wall time at the median and at the p90 durations (ms).
fn runs_to_go(engine: &Engine, plan: &Plan, g: &mut Gathered) -> Result<(f64, f64)> {
    if plan.runs.is_empty() {
        return Ok((0.0, 0.0));
    }
    let mut runs_of: std::collections::BTreeMap<usize, u64> = Default::default();
    for run in &plan.runs {
        *runs_of.entry(run.job_index).or_default() += 1;
    }
    let mut durations: Vec<Option<JobDurations>> = vec![None; engine.graph.jobs.len()];
    for (&j, &runs) in &runs_of {
        let job = &engine.graph.jobs[j].name;
        let timed = jobs::durations(engine, job)?;
        if timed.is_none() {
            g.unknown.push(no_timed_run(job));
        }
        // The estimate's upper figure is taken at the p90 here.
        durations[j] = timed.map(|(p50, p90, _)| JobDurations {
            p50_ms: p50,
            p95_ms: p90,
        });
        g.basis.push(ForecastStep::Job {
            job: job.clone(),
            runs,
            p50_ms: timed.map(|t| t.0),
            p90_ms: timed.map(|t| t.1),
            timed_runs: timed.map_or(0, |t| t.2),
        });
    }
    let parallel = crate::scheduler::default_parallelism();
    let estimate = databuild_core::estimate::estimate(plan, &durations, parallel);
    g.basis.push(ForecastStep::QueueWait {
        parallel: parallel as u64,
        ms: (estimate.wall_p50_ms - estimate.critical_path_p50_ms).max(0.0),
    });
    g.basis.push(ForecastStep::CriticalPath {
        ms: estimate.critical_path_p50_ms,
    });
    Ok((estimate.wall_p50_ms, estimate.wall_p95_ms))
}
