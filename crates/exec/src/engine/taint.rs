//! `taint`: marking partitions invalid, job outputs and external partitions alike.

use databuild_core::Producer;
use databuild_log::{Event, LogError, Status};

use crate::engine::{Engine, EngineError, Result};

impl Engine {
    /// The events of a taint, each ref checked: what `taint` appends and `taint --dry-run`
    /// looks downstream of.
    pub(crate) fn taint_events(&self, refs: &[String], reason: Option<&str>) -> Result<Vec<Event>> {
        let versions = self.versions();
        refs
            .iter()
            .map(|r| {
                // A table's alias names the version it reads: that is what is tainted.
                let read = versions.resolve(r).map(|v| v.to_string());
                let r = read.as_deref().unwrap_or(r);
                let mut e = Event::partition(None, r, Status::Tainted);
                match self.graph.producer_of(r).map(|(p, _)| p) {
                    None => {
                        return Err(EngineError::Invalid(format!(
                            "cannot taint `{r}`: {}",
                            self.graph.mismatch_reason(r).unwrap_or_else(|| {
                                "no job builds it and no dataset declares it".to_string()
                            })
                        )))
                    }
                    Some(Producer::Dataset(d)) if self.graph.datasets[d].source.is_some() => {
                        return Err(EngineError::Invalid(format!(
                            "cannot taint `{r}`: it is a raw partition of source `{}`, sealed and expired by DataBuild; taint the table partitions built from it instead",
                            self.graph.sources[self.graph.datasets[d].source.expect("a source")].name
                        )))
                    }
                    Some(Producer::Alias(_)) => {
                        return Err(EngineError::Invalid(format!(
                            "cannot taint `{r}`: the table version its alias reads is unknown"
                        )))
                    }
                    // The data it has now: the taint holds until that changes.
                    Some(Producer::Dataset(d)) => {
                        let ds = &self.graph.datasets[d];
                        e.data.data_version =
                            crate::data::versions::raw_external_version(ds, &self.data_dir, r);
                    }
                    Some(Producer::Job { .. }) => {}
                }
                Ok(match reason {
                    Some(m) => e.with_message(m),
                    None => e,
                })
            })
            .collect()
    }
}

pub(crate) fn taint(engine: &Engine, refs: &[String], reason: Option<&str>) -> Result<Vec<Event>> {
    let events = engine.taint_events(refs, reason)?;
    engine.store.append(events).map_err(|e| match e {
        // The partition's state refuses it (a run is building it): the request is sound.
        LogError::Refused { reason, .. } => {
            EngineError::Conflict(format!("cannot taint: {reason}"))
        }
        other => other.into(),
    })
}
