//! Arrivals: recording the external partitions a call found available, and the service's watch
//! for the next ones. The watch probes, for each external dataset a job reads, only the
//! partitions its cadence expects next (from the lower edge of their band on), or the key after
//! its latest arrival when it has too little history: never the key space.

use databuild_core::cadence::Key;
use databuild_core::{Graph, PartitionRef, Producer, Resolver};
use rustc_hash::FxHashSet;

use super::forecast::{key_field, key_of, Cadences};
use super::{Engine, Result};
use crate::answers::Late;
use crate::data::arrivals::Sightings;
use databuild_log::{Event, EventFilter, Kind, Status};

/// At most this many next keys of one dataset (times each combination of its other fields) are
/// probed per turn: a dataset far behind its cadence is not probed back through its whole past.
const MAX_NEXT_KEYS: usize = 24;

impl Engine {
    /// The external partitions late now: recorded `late` by the watcher, not arrived since (the
    /// log's `late_partitions`, a few rows, not every late event ever), and still past their
    /// `expected_by` by their dataset's cadence; the earliest expected first.
    pub fn late_partitions(&self) -> Result<Vec<Late>> {
        let now = self.config.clock.now_ns();
        let mut cadences = Cadences::new(self);
        let mut late = Vec::new();
        for r in &self.store.late_refs()? {
            let Some((Producer::Dataset(d), _)) = self.graph.producer_of(r) else {
                continue;
            };
            late.extend(cadences.late(d, r, now)?);
        }
        late.sort_by_key(|l| l.expected_by_ns);
        Ok(late)
    }

    /// Records an arrival, at the engine's clock, of each external partition `sightings` noted
    /// that has none yet: one read, one append.
    pub(crate) fn record_arrivals(&self, sightings: &Sightings) -> Result<()> {
        let seen = sightings.take();
        if !seen.is_empty() {
            crate::data::arrivals::record(
                &self.graph,
                self.store.as_ref(),
                &self.data_dir,
                seen,
                self.config.clock.now_ns(),
            )?;
        }
        Ok(())
    }
}

/// Probes the partitions each watched dataset is expected to land next (those whose band
/// starts within `interval` of now) and records those found. Returns how many it probed.
pub(crate) fn watch(engine: &Engine, interval: std::time::Duration) -> Result<usize> {
    let now = engine.config.clock.now_ns();
    let soon = now.saturating_add(interval.as_nanos().min(i64::MAX as u128) as i64);
    let mut cadences = Cadences::new(engine);
    let mut due: Vec<(usize, PartitionRef)> = Vec::new();
    for d in watched(&engine.graph) {
        due.extend(
            next_due(engine, d, soon, &mut cadences)?
                .into_iter()
                .map(|r| (d, r)),
        );
    }
    let sightings = Sightings::default();
    let mut resolver = engine.resolver().sighted_by(Some(&sightings));
    let mut unarrived = Vec::new();
    for (d, r) in &due {
        // A probe that fails is a partition not seen this turn; the next turn asks again.
        if let Ok(false) = resolver.external_available(&engine.graph.datasets[*d], r) {
            unarrived.push((*d, r));
        }
    }
    engine.record_arrivals(&sightings)?;
    record_late(engine, &unarrived, now, &mut cadences)?;
    Ok(due.len())
}

/// Records a `late` arrival event for each of `unarrived` past its `expected_by` (its cadence
/// decides) that has none yet: once per partition, so that alerts and the gauge count it once.
fn record_late(
    engine: &Engine,
    unarrived: &[(usize, &PartitionRef)],
    now: i64,
    cadences: &mut Cadences<'_>,
) -> Result<()> {
    let mut events = Vec::new();
    for (d, r) in unarrived {
        let Some(late) = cadences.late(*d, r.as_str(), now)? else {
            continue;
        };
        let recorded = engine.store.events(&EventFilter {
            partition_ref: Some(r.to_string()),
            kind: Some(Kind::Arrival),
            status: Some(Status::Late),
            limit: Some(1),
            ..Default::default()
        })?;
        if recorded.is_empty() {
            let dataset = &engine.graph.datasets[*d].name;
            let mut event = Event::late_arrival(dataset, r.as_str(), late.reason());
            event.timestamp = now;
            events.push(event);
        }
    }
    if !events.is_empty() {
        engine.store.append(events)?;
    }
    Ok(())
}

/// The external datasets a job reads (all of them when a job's inputs come from a config,
/// which could name any), but those another service builds.
fn watched(graph: &Graph) -> Vec<usize> {
    let dynamic = graph
        .jobs
        .iter()
        .any(|j| !matches!(j.deps, databuild_core::Deps::Static(_)));
    let read: FxHashSet<usize> = graph
        .jobs
        .iter()
        .filter_map(|j| match &j.deps {
            databuild_core::Deps::Static(templates) => Some(templates),
            _ => None,
        })
        .flatten()
        .flat_map(|t| &t.reads)
        .filter_map(|p| match p {
            Producer::Dataset(d) => Some(*d),
            _ => None,
        })
        .collect();
    (0..graph.datasets.len())
        .filter(|d| graph.datasets[*d].upstream.is_none() && (dynamic || read.contains(d)))
        .collect()
}

/// The refs of dataset `d` due for a probe by `soon`: after its latest arrival, those its
/// cadence expects from the lower edge of their band (`expected_at` less the band's width) on;
/// with too little history, the next key only. One ref per key and combination of the other
/// fields its recent arrivals had.
fn next_due(
    engine: &Engine,
    d: usize,
    soon: i64,
    cadences: &mut Cadences<'_>,
) -> Result<Vec<PartitionRef>> {
    let dataset = &engine.graph.datasets[d];
    let Some(field) = key_field(&dataset.pattern) else {
        return Ok(Vec::new());
    };
    let mut others: Vec<Vec<String>> = Vec::new();
    let mut last: Option<Key> = None;
    for a in cadences.recent(d)? {
        let Some(values) = dataset.pattern.match_ref(&a.partition_ref) else {
            continue;
        };
        let mut rest: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        rest[field.0] = String::new();
        if !others.contains(&rest) {
            others.push(rest);
        }
        let key = key_of(&dataset.pattern, field, &a.partition_ref);
        last = last.max(key);
    }
    let Some(last) = last else {
        return Ok(Vec::new());
    };
    let keys: Vec<Key> = match cadences.of(d)? {
        Ok(c) => {
            let mut keys = Vec::new();
            let mut key = c.next_key(last);
            while keys.len() < MAX_NEXT_KEYS {
                match c.expect(key) {
                    Some(e) if e.at_ns - (e.by_ns - e.at_ns) <= soon => keys.push(key),
                    _ => break,
                }
                key = c.next_key(key);
            }
            keys
        }
        Err(_) => vec![Key {
            n: last.n + 1,
            ..last
        }],
    };
    let mut due = Vec::new();
    for key in keys {
        let Some(text) = key.render() else { continue };
        for rest in &others {
            let mut values: Vec<&str> = rest.iter().map(String::as_str).collect();
            values[field.0] = &text;
            if let Ok(r) = PartitionRef::new(dataset.pattern.render(&values)) {
                due.push(r);
            }
        }
    }
    Ok(due)
}
