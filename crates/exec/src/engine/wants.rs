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

use crate::engine::{rfc3339, Engine, EngineError, Result};

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
    /// Everything needed is there: build these.
    Build { refs: Vec<String> },
}

impl Engine {
    /// Records a want for `refs`.
    pub fn want(
        &self,
        refs: &[PartitionRef],
        ttl: Option<Duration>,
        sla: Option<Duration>,
        recurring: Option<&str>,
    ) -> Result<WantRow> {
        if refs.is_empty() {
            return Err(EngineError::Invalid(
                "a want names at least one partition".into(),
            ));
        }
        for r in refs {
            if self.graph.producer_of(r.as_str()).is_none() {
                return Err(EngineError::Invalid(format!(
                    "cannot want `{r}`: {}",
                    self.graph.mismatch_reason(r.as_str()).unwrap_or_else(|| {
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
            d.recurring = recurring.map(str::to_string);
        });
        if let Some(name) = recurring {
            e = e.with_message(format!("recurring want `{name}`"));
        }
        self.store.append(vec![e])?;
        self.want_row(&id)
    }

    pub fn want_row(&self, id: &str) -> Result<WantRow> {
        self.store
            .want(id)?
            .ok_or_else(|| EngineError::NotFound(format!("no want `{id}`")))
    }

    /// Withdraws a want.
    pub fn unwant(&self, id: &str) -> Result<WantRow> {
        let want = self.want_row(id)?;
        if !want.is_active() {
            return Err(EngineError::Invalid(format!(
                "want {id} has already ended (`{}`)",
                want.status
            )));
        }
        self.store.append(vec![
            Event::want(id, Status::Cancelled).with_message("withdrawn")
        ])?;
        self.want_row(id)
    }

    /// Records a want's new state, unless it is already in it for the same reason.
    pub fn note_want(
        &self,
        want: &WantRow,
        status: Status,
        waiting_for: Option<&str>,
        message: Option<String>,
        started: Option<String>,
    ) -> Result<bool> {
        let same = want.status == status
            && want.waiting_for.as_deref() == waiting_for
            && (message.is_none() || want.message == message);
        if same && started.is_none() {
            return Ok(false);
        }
        let mut e = Event::want(&want.want_id, status).with_data(|d| d.upstream = started);
        e.partition_ref = waiting_for.map(str::to_string);
        e.message = message;
        self.store.append(vec![e])?;
        Ok(true)
    }

    /// The want's partitions that are not live and fresh, with the reason.
    pub fn unsatisfied(&self, want: &WantRow) -> Result<Vec<(String, String)>> {
        Ok(self
            .status(&want.refs)?
            .into_iter()
            .filter(|s| s.status != "live")
            .map(|s| (s.partition_ref, s.status.to_string()))
            .collect())
    }

    /// What should happen to a want now.
    pub fn decide(&self, want: &WantRow, now_ns: i64) -> Result<Decision> {
        if want.expires_at.is_some_and(|t| now_ns >= t) {
            return Ok(Decision::Expire);
        }
        let missing = self.unsatisfied(want)?;
        if missing.is_empty() {
            return Ok(Decision::Satisfied);
        }
        let refs = missing
            .iter()
            .map(|(r, _)| {
                PartitionRef::new(r.as_str()).map_err(|e| EngineError::Invalid(e.to_string()))
            })
            .collect::<Result<Vec<_>>>()?;
        let plan = self.plan(&PlanRequest {
            refs,
            ..Default::default()
        })?;
        if let Some(m) = plan.missing.first() {
            let upstream = match self.graph.producer_of(m.partition_ref.as_str()) {
                Some((Producer::Dataset(d), _)) => self.graph.datasets[d].upstream.clone(),
                _ => None,
            };
            return Ok(Decision::Wait {
                partition_ref: m.partition_ref.to_string(),
                dataset: m.dataset.clone(),
                upstream,
                failed_check: m.failed_check.clone(),
            });
        }
        Ok(Decision::Build {
            refs: missing.into_iter().map(|(r, _)| r).collect(),
        })
    }

    /// Partitions of a want that missed their SLA by `now_ns` and are not live, leaving out those
    /// `known` already (so a long-late want costs no status checks).
    pub fn sla_misses(
        &self,
        want: &WantRow,
        now_ns: i64,
        known: &BTreeSet<(String, String)>,
    ) -> Result<Vec<(String, i64)>> {
        let Some(sla) = want.sla_seconds else {
            return Ok(Vec::new());
        };
        let overdue: Vec<(String, i64)> = want
            .refs
            .iter()
            .filter_map(|r| {
                let deadline = databuild_core::wants::day_end_ns(r)? + (sla as i64) * 1_000_000_000;
                (now_ns > deadline && !known.contains(&(want.want_id.clone(), r.clone())))
                    .then(|| (r.clone(), deadline))
            })
            .collect();
        if overdue.is_empty() {
            return Ok(Vec::new());
        }
        let not_live: BTreeSet<String> = self
            .unsatisfied(want)?
            .into_iter()
            .map(|(r, _)| r)
            .collect();
        Ok(overdue
            .into_iter()
            .filter(|(r, _)| not_live.contains(r))
            .collect())
    }

    /// `(want, partition)` pairs whose SLA miss is already recorded.
    pub fn recorded_sla_misses(&self) -> Result<BTreeSet<(String, String)>> {
        Ok(self
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

    /// Records that a partition missed its SLA.
    pub fn note_sla_miss(&self, want: &WantRow, r: &str, deadline_ns: i64) -> Result<()> {
        let mut e = Event::want(&want.want_id, Status::SlaMissed).with_message(format!(
            "`{r}` was not live by its deadline {} ({}s after its day ended)",
            rfc3339(deadline_ns),
            want.sla_seconds.unwrap_or(0)
        ));
        e.partition_ref = Some(r.to_string());
        self.store.append(vec![e])?;
        Ok(())
    }

    /// Active wants that name `r`.
    pub fn wants_of(&self, r: &str) -> Result<Vec<WantRow>> {
        Ok(self
            .store
            .wants(None, true, 10_000)?
            .into_iter()
            .filter(|w| w.refs.iter().any(|x| x == r))
            .collect())
    }
}
