//! Wants: standing requests for partitions (`databuild want`), and what the service's reconciler
//! decides about each. Recording is here; acting (starting builds, asking upstream services)
//! is the reconciler's, in the service.
//!
//! A want is satisfied when every partition it names is live and fresh. Until then it waits, and
//! says for what: an external partition not there yet, an upstream service building it, or a
//! build of ours. Its SLA counts from the end of each partition's day (the date in its ref); a
//! partition not live by then is recorded once as `sla_missed`. After its TTL it expires.

use std::collections::BTreeSet;
use std::time::Duration;

use databuild_core::{PartitionRef, PlanRequest, Producer};
use databuild_log::{Event, EventFilter, Kind, Status, WantRow};
use serde::Serialize;

use crate::answers::{rfc3339, Forecast, ForecastStep, WantRisk};
use crate::engine::{Engine, EngineError, Result};

/// How long a want stands unless told otherwise.
pub const DEFAULT_TTL: Duration = Duration::from_secs(30 * 86_400);

/// What the reconciler should do about a want now.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Decision {
    /// Every partition is live and fresh.
    Satisfied,
    /// Its TTL has passed.
    Expire,
    /// An external partition is missing; `upstream` is the service that builds it, if any.
    Wait {
        partition_ref: String,
        dataset: String,
        upstream: Option<String>,
        /// It is a job output that failed a blocking check: ``failed check `name`: message``.
        failed_check: Option<String>,
    },
    /// Everything needed is there: build these. `reads` are the partitions the build would
    /// read (every planned run's inputs): a change to one of them, or to a ref, is a change to
    /// what the want needs (a want whose build failed is then tried again at once).
    Build {
        refs: Vec<String>,
        reads: Vec<String>,
    },
}

pub(crate) fn want(
    engine: &Engine,
    refs: &[PartitionRef],
    ttl: Option<Duration>,
    sla: Option<Duration>,
    deadline: Option<i64>,
    recurring: Option<&str>,
) -> Result<WantRow> {
    if refs.is_empty() {
        return Err(EngineError::Invalid(
            "a want names at least one partition".into(),
        ));
    }
    for r in refs {
        if engine.graph.producer_of(r.as_str()).is_none() {
            return Err(EngineError::Invalid(format!(
                "cannot want `{r}`: {}",
                engine.graph.mismatch_reason(r.as_str()).unwrap_or_else(|| {
                    "no job builds it and no dataset declares it".to_string()
                })
            )));
        }
    }
    let id = databuild_log::event::new_id();
    let now = databuild_log::event::now_ns();
    let ttl = ttl.unwrap_or(DEFAULT_TTL);
    let mut e = Event::want(&id, Status::Requested).with_data(|d| {
        d.requested = refs.iter().map(|r| r.to_string()).collect();
        d.expires_at = Some(now.saturating_add(ttl.as_nanos().min(i64::MAX as u128) as i64));
        d.sla_seconds = sla.map(|s| s.as_secs());
        d.deadline = deadline;
        d.recurring = recurring.map(str::to_string);
    });
    if let Some(name) = recurring {
        e = e.with_message(format!("recurring want `{name}`"));
    }
    engine.store.append(vec![e])?;
    engine.want_row(&id)
}

pub(crate) fn want_row(engine: &Engine, id: &str) -> Result<WantRow> {
    engine
        .store
        .want(id)?
        .ok_or_else(|| EngineError::NotFound(format!("no want `{id}`")))
}

pub(crate) fn unwant(engine: &Engine, id: &str) -> Result<WantRow> {
    let want = engine.want_row(id)?;
    if !want.is_active() {
        // A conflict with the want's state, not a bad request: as for a build's cancel.
        return Err(EngineError::AlreadyEnded {
            what: "want",
            id: id.to_string(),
            status: want.status,
        });
    }
    engine.store.append(vec![
        Event::want(id, Status::Cancelled).with_message("withdrawn")
    ])?;
    engine.want_row(id)
}

pub(crate) fn note_want(
    engine: &Engine,
    want: &WantRow,
    status: Status,
    waiting_for: Option<&str>,
    message: Option<String>,
    started: Option<String>,
    retry_at: Option<i64>,
) -> Result<bool> {
    let same = want.status == status
        && want.waiting_for.as_deref() == waiting_for
        && (message.is_none() || want.message == message)
        && want.retry_at == retry_at;
    if same && started.is_none() {
        return Ok(false);
    }
    let mut e = Event::want(&want.want_id, status).with_data(|d| {
        d.upstream = started;
        d.retry_at = retry_at;
    });
    e.partition_ref = waiting_for.map(str::to_string);
    e.message = message;
    engine.store.append(vec![e])?;
    Ok(true)
}

pub(crate) fn unsatisfied(engine: &Engine, want: &WantRow) -> Result<Vec<(String, String)>> {
    Ok(engine
        .status(&want.refs)?
        .into_iter()
        .filter(|s| s.status != crate::answers::DerivedStatus::Live)
        .map(|s| (s.partition_ref, s.status.to_string()))
        .collect())
}

pub(crate) fn decide(engine: &Engine, want: &WantRow, now_ns: i64) -> Result<Decision> {
    if want.expires_at.is_some_and(|t| now_ns >= t) {
        return Ok(Decision::Expire);
    }
    let missing = engine.unsatisfied(want)?;
    if missing.is_empty() {
        return Ok(Decision::Satisfied);
    }
    let refs = missing
        .iter()
        .map(|(r, _)| {
            PartitionRef::new(r.as_str()).map_err(|e| EngineError::Invalid(e.to_string()))
        })
        .collect::<Result<Vec<_>>>()?;
    let plan = engine.plan(&PlanRequest {
        refs,
        ..Default::default()
    })?;
    if let Some(m) = plan.missing.first() {
        let upstream = match engine.graph.producer_of(m.partition_ref.as_str()) {
            Some((Producer::Dataset(d), _)) => engine.graph.datasets[d].upstream.clone(),
            _ => None,
        };
        return Ok(Decision::Wait {
            partition_ref: m.partition_ref.to_string(),
            dataset: m.dataset.clone(),
            upstream,
            failed_check: m.failed_check.clone(),
        });
    }
    let reads: BTreeSet<String> = plan
        .runs
        .iter()
        .flat_map(|run| run.inputs.iter().map(|r| r.to_string()))
        .collect();
    Ok(Decision::Build {
        refs: missing.into_iter().map(|(r, _)| r).collect(),
        reads: reads.into_iter().collect(),
    })
}

pub(crate) fn sla_misses(
    engine: &Engine,
    want: &WantRow,
    now_ns: i64,
    known: &BTreeSet<(String, String)>,
) -> Result<Vec<(String, i64)>> {
    let overdue: Vec<(String, i64)> = want
        .refs
        .iter()
        .filter_map(|r| {
            let deadline = deadline_of(want, r)?;
            (now_ns > deadline && !known.contains(&(want.want_id.clone(), r.clone())))
                .then(|| (r.clone(), deadline))
        })
        .collect();
    if overdue.is_empty() {
        return Ok(Vec::new());
    }
    let not_live: BTreeSet<String> = engine
        .unsatisfied(want)?
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    Ok(overdue
        .into_iter()
        .filter(|(r, _)| not_live.contains(r))
        .collect())
}

pub(crate) fn recorded_sla_misses(engine: &Engine) -> Result<BTreeSet<(String, String)>> {
    Ok(engine
        .store
        .events(&EventFilter {
            kind: Some(Kind::Want),
            ..Default::default()
        })?
        .into_iter()
        .filter(|e| e.status == Status::SlaMissed)
        .filter_map(|e| Some((e.data.want_id?, e.partition_ref?)))
        .collect())
}

pub(crate) fn note_sla_miss(
    engine: &Engine,
    want: &WantRow,
    r: &str,
    deadline_ns: i64,
) -> Result<()> {
    let mut e = Event::want(&want.want_id, Status::SlaMissed).with_message(format!(
        "`{r}` was not live by its deadline {}{}",
        rfc3339(deadline_ns),
        match want.sla_seconds {
            Some(s) => format!(" ({s}s after its day ended)"),
            None => String::new(),
        }
    ));
    e.partition_ref = Some(r.to_string());
    engine.store.append(vec![e])?;
    Ok(())
}

pub(crate) fn wants_of(engine: &Engine, r: &str) -> Result<Vec<WantRow>> {
    Ok(engine
        .store
        .wants(None, true, 10_000)?
        .into_iter()
        .filter(|w| w.refs.iter().any(|x| x == r))
        .collect())
}

/// When `r` of `want` is to be live: the want's deadline, or its SLA after `r`'s day (or hour).
fn deadline_of(want: &WantRow, r: &str) -> Option<i64> {
    want.deadline.or_else(|| {
        let sla = want.sla_seconds? as i64;
        Some(databuild_core::wants::period_end_ns(r)? + sla * 1_000_000_000)
    })
}

/// Whether `want` is on time: the forecasts of its partitions not live, against each one's
/// deadline (its `--by`, or its SLA's). The forecast decides the times; this only compares.
pub(crate) fn risk(engine: &Engine, want: &WantRow) -> WantRisk {
    // A want whose forecast cannot be made (its config fails) is not known to be at risk; it is
    // still answered, and its status says what failed.
    risk_of(engine, want)
        .unwrap_or_else(|e| WantRisk::unknown(want.deadline, format!("no forecast: {e}")))
}

fn risk_of(engine: &Engine, want: &WantRow) -> Result<WantRisk> {
    let deadline = want.deadline;
    if !want.is_active() {
        return Ok(WantRisk::unknown(
            deadline,
            format!("the want is {}", want.status),
        ));
    }
    let missing: Vec<String> = unsatisfied(engine, want)?
        .into_iter()
        .map(|(r, _)| r)
        .collect();
    if missing.is_empty() {
        return Ok(WantRisk::unknown(
            deadline,
            "every partition is live".into(),
        ));
    }
    let forecasts = engine.forecast(&missing)?;
    let mut risk = match forecasts.iter().find(|f| f.expected_at_ns.is_none()) {
        Some(f) => WantRisk::unknown(
            deadline,
            format!(
                "{}: {}",
                f.partition_ref,
                f.reason.as_deref().unwrap_or("no forecast")
            ),
        ),
        None => {
            let at = forecasts.iter().filter_map(|f| f.expected_at_ns).max();
            WantRisk {
                deadline: deadline.map(rfc3339),
                deadline_ns: deadline,
                expected_satisfied_at: at.map(rfc3339),
                expected_satisfied_at_ns: at,
                ..Default::default()
            }
        }
    };
    // The partition past its deadline by the most.
    let worst = forecasts
        .iter()
        .filter_map(|f| Some((f, f.expected_by_ns?, deadline_of(want, &f.partition_ref)?)))
        .filter(|(_, by, due)| by > due)
        .max_by_key(|(_, by, due)| by - due);
    if let Some((f, by, due)) = worst {
        let (holder, held) = holding_back(f);
        risk.at_risk = true;
        risk.at_risk_reason = Some(format!(
            "{} expected by {}, after the {} deadline{held}",
            f.partition_ref,
            rfc3339(by),
            rfc3339(due)
        ));
        risk.at_risk_partition = Some(holder);
        risk.at_risk_deadline_ns = Some(due);
        risk.at_risk_expected_by_ns = Some(by);
    }
    Ok(risk)
}

/// What holds a late forecast back: its external input expected last (and words saying so), or
/// the partition itself.
fn holding_back(f: &Forecast) -> (String, String) {
    let last_input = f
        .basis
        .iter()
        .filter_map(|s| match s {
            ForecastStep::External {
                partition_ref,
                expected_by_ns,
                expected_by,
                ..
            } if partition_ref != &f.partition_ref => Some((
                expected_by_ns.unwrap_or(i64::MAX),
                partition_ref,
                expected_by,
            )),
            _ => None,
        })
        .max_by_key(|(by, _, _)| *by);
    match last_input {
        Some((_, r, by)) => (
            r.clone(),
            format!(
                ": {r} expected by {}",
                by.as_deref().unwrap_or("an unknown time")
            ),
        ),
        None => (f.partition_ref.clone(), String::new()),
    }
}

/// Wants whose `sla_at_risk` is already recorded.
pub(crate) fn recorded_at_risk(engine: &Engine) -> Result<BTreeSet<String>> {
    Ok(engine
        .store
        .events(&EventFilter {
            kind: Some(Kind::Want),
            status: Some(Status::SlaAtRisk),
            ..Default::default()
        })?
        .into_iter()
        .filter_map(|e| e.data.want_id)
        .collect())
}

/// Records that `want`'s forecast passes its deadline, naming what holds it back.
pub(crate) fn note_at_risk(engine: &Engine, want: &WantRow, risk: &WantRisk) -> Result<()> {
    let mut e = Event::want(&want.want_id, Status::SlaAtRisk).with_data(|d| {
        d.deadline = risk.at_risk_deadline_ns;
        d.expected_by = risk.at_risk_expected_by_ns;
    });
    e.partition_ref = risk.at_risk_partition.clone();
    e.message = risk.at_risk_reason.clone();
    engine.store.append(vec![e])?;
    Ok(())
}
