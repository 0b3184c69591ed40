//! Sources and tables as users see them (`databuild sources`, `source show`), and promotion.
//!
//! Promotion moves a table's alias to another version with one `alias promoted` event, after
//! checking that the version covers every date the current one covers; the `current` link under
//! the table's folder is switched at the same time, so readers of `<table>/date=D` paths move
//! together. With `build_downstream`, the partitions built over the alias are first rebuilt
//! against the new version (the build reads the alias as that version), and nothing is promoted
//! unless that build succeeds.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::AtomicBool;

use databuild_core::{Deps, PartitionRef, Producer, Table};
use databuild_log::{Event, PartitionQuery, Status};

use crate::answers::SourceDay;
use crate::answers::{
    CoverageRow, DayCounts, Promotion, SourceDetail, SourceView, TableView, VersionView,
};
use crate::data::sources::source_days;
use crate::data::versions::promotions;
use crate::engine::{Engine, EngineError, Result};
use crate::run::Executor;
use crate::scheduler::{BuildOptions, Observer};

/// A table version's partitions: date → (status, provenance), read page by page.
fn version_partitions(
    engine: &Engine,
    table: &Table,
    version: u32,
) -> Result<BTreeMap<String, (Status, &'static str)>> {
    let prefix = format!("{}/v{version}/date=", table.name);
    let mut out = BTreeMap::new();
    let mut after = None;
    loop {
        let page = engine.store.partitions(&PartitionQuery {
            pattern: Some(format!("{prefix}*")),
            after: after.clone(),
            limit: 1000,
            ..Default::default()
        })?;
        for row in &page {
            let provenance = match row.job_run_id.as_deref() {
                Some(id) if row.status == Status::Available => match engine.store.job_run(id)? {
                    Some(run) if run.args.first().map(String::as_str) == Some("carry") => "carried",
                    _ => "loaded",
                },
                _ => "",
            };
            out.insert(
                row.partition_ref[prefix.len()..].to_string(),
                (row.status, provenance),
            );
        }
        match page.last() {
            Some(last) if page.len() == 1000 => after = Some(last.partition_ref.clone()),
            _ => break,
        }
    }
    Ok(out)
}

fn live_dates(engine: &Engine, table: &Table, version: u32) -> Result<BTreeSet<String>> {
    Ok(version_partitions(engine, table, version)?
        .into_iter()
        .filter(|(_, (s, _))| *s == Status::Available)
        .map(|(d, _)| d)
        .collect())
}

impl Engine {
    fn promoted_versions(&self) -> Result<BTreeMap<String, u32>> {
        Ok(promotions(self.store.as_ref())?)
    }

    fn table_view(&self, table: &Table) -> Result<TableView> {
        let versions = table
            .versions
            .iter()
            .map(|v| {
                let parts = version_partitions(self, table, v.version)?;
                let live: Vec<_> = parts
                    .values()
                    .filter(|(s, _)| *s == Status::Available)
                    .collect();
                Ok(VersionView {
                    version: v.version,
                    columns: v
                        .columns
                        .iter()
                        .map(|c| format!("{}: {}", c.name, c.spec()))
                        .collect(),
                    live_dates: live.len(),
                    carried: live.iter().filter(|(_, p)| *p == "carried").count(),
                })
            })
            .collect::<Result<_>>()?;
        Ok(TableView {
            name: table.name.clone(),
            promoted: self.promoted(table)?,
            versions,
        })
    }

    fn source_view(&self, index: usize, days: &[SourceDay]) -> Result<SourceView> {
        let source = &self.graph.sources[index];
        let mut counts = DayCounts {
            first: days.first().map(|d| d.date.clone()),
            last: days.last().map(|d| d.date.clone()),
            ..Default::default()
        };
        for d in days {
            match d.state.as_str() {
                "open" => counts.open += 1,
                "sealed" => counts.sealed += 1,
                _ => counts.expired += 1,
            }
        }
        Ok(SourceView {
            name: source.name.clone(),
            kind: match source.kind {
                databuild_core::SourceKind::Webhook => "webhook",
                databuild_core::SourceKind::Directory { .. } => "directory",
            }
            .to_string(),
            retention_days: source.retention_days,
            body_format: source.body_format.name().to_string(),
            signed: source.secret_env.is_some(),
            days: counts,
            tables: self
                .graph
                .tables
                .iter()
                .filter(|t| t.source == index)
                .map(|t| self.table_view(t))
                .collect::<Result<_>>()?,
        })
    }

    fn source_index(&self, name: &str) -> Result<usize> {
        self.graph
            .sources
            .iter()
            .position(|s| s.name == name)
            .ok_or_else(|| {
                let known: Vec<&str> = self.graph.sources.iter().map(|s| s.name.as_str()).collect();
                EngineError::NotFound(format!(
                    "no source `{name}` in the graph (sources: {})",
                    if known.is_empty() {
                        "none".to_string()
                    } else {
                        known.join(", ")
                    }
                ))
            })
    }

    /// Live partitions of jobs that read a table through its alias.
    fn downstream_of(&self, table: &Table) -> Result<Vec<PartitionRef>> {
        let t = self
            .graph
            .tables
            .iter()
            .position(|x| x.name == table.name)
            .expect("a table");
        let mut refs = Vec::new();
        for job in &self.graph.jobs {
            let Deps::Static(templates) = &job.deps else {
                continue;
            };
            if !templates
                .iter()
                .any(|l| l.reads.contains(&Producer::Alias(t)))
            {
                continue;
            }
            for output in &job.outputs {
                let mut after = None;
                loop {
                    let page = self.store.partitions(&PartitionQuery {
                        pattern: Some(output.glob()),
                        status: Some(Status::Available),
                        after: after.clone(),
                        limit: 1000,
                    })?;
                    for row in &page {
                        if output.match_ref(&row.partition_ref).is_some() {
                            refs.push(
                                PartitionRef::new(row.partition_ref.as_str())
                                    .map_err(|e| EngineError::Invalid(e.to_string()))?,
                            );
                        }
                    }
                    match page.last() {
                        Some(last) if page.len() == 1000 => {
                            after = Some(last.partition_ref.clone())
                        }
                        _ => break,
                    }
                }
            }
        }
        Ok(refs)
    }
}

pub(crate) fn promoted(engine: &Engine, table: &Table) -> Result<u32> {
    Ok(engine
        .promoted_versions()?
        .get(&table.name)
        .copied()
        .unwrap_or_else(|| table.initial_version()))
}

pub(crate) fn sources(engine: &Engine) -> Result<Vec<SourceView>> {
    (0..engine.graph.sources.len())
        .map(|i| {
            let days = source_days(
                &engine.data_dir,
                engine.store.as_ref(),
                &engine.graph.sources[i],
            )
            .map_err(source_error)?;
            engine.source_view(i, &days)
        })
        .collect()
}

pub(crate) fn source_detail(engine: &Engine, name: &str) -> Result<SourceDetail> {
    let index = engine.source_index(name)?;
    let source = &engine.graph.sources[index];
    let days =
        source_days(&engine.data_dir, engine.store.as_ref(), source).map_err(source_error)?;
    let mut rows: BTreeMap<String, CoverageRow> = days
        .iter()
        .map(|d| {
            (
                d.date.clone(),
                CoverageRow {
                    date: d.date.clone(),
                    raw: Some(d.clone()),
                    versions: BTreeMap::new(),
                },
            )
        })
        .collect();
    for table in engine.graph.tables.iter().filter(|t| t.source == index) {
        for v in &table.versions {
            for (date, (status, provenance)) in version_partitions(engine, table, v.version)? {
                let shown = match status {
                    Status::Available => format!("live ({provenance})"),
                    other => crate::answers::DerivedStatus::recorded(other).to_string(),
                };
                rows.entry(date.clone())
                    .or_insert_with(|| CoverageRow {
                        date,
                        raw: None,
                        versions: BTreeMap::new(),
                    })
                    .versions
                    .insert(format!("{}.v{}", table.name, v.version), shown);
            }
        }
    }
    Ok(SourceDetail {
        source: engine.source_view(index, &days)?,
        today: engine.today(),
        coverage: rows.into_values().collect(),
    })
}

pub(crate) fn maintain_sources(
    engine: &Engine,
    name: Option<&str>,
    through: Option<&str>,
) -> Result<Vec<crate::answers::Maintenance>> {
    let indices: Vec<usize> = match name {
        Some(n) => vec![engine.source_index(n)?],
        None => (0..engine.graph.sources.len()).collect(),
    };
    let today = engine.today();
    if let Some(d) = through {
        check_seal_date(d, &today)?;
    }
    indices
        .into_iter()
        .map(|i| {
            crate::data::sources::maintain(
                &engine.graph_dir,
                &engine.data_dir,
                engine.store.as_ref(),
                &engine.graph.sources[i],
                &today,
                through,
            )
            .map_err(source_error)
        })
        .collect()
}

pub(crate) fn promote(
    engine: &Engine,
    table_name: &str,
    version: u32,
    downstream: Option<(&BuildOptions, &dyn Executor, &mut dyn Observer, &AtomicBool)>,
) -> Result<Promotion> {
    let table = engine
        .graph
        .table(table_name)
        .ok_or_else(|| EngineError::NotFound(format!("no table `{table_name}` in the graph")))?;
    if table.version(version).is_none() {
        let known: Vec<String> = table
            .versions
            .iter()
            .map(|v| format!("v{}", v.version))
            .collect();
        return Err(EngineError::Invalid(format!(
            "table `{table_name}` has no version {version} (it has {})",
            known.join(", ")
        )));
    }
    let from = engine.promoted(table)?;
    let have = live_dates(engine, table, version)?;
    let missing: Vec<String> = live_dates(engine, table, from)?
        .difference(&have)
        .cloned()
        .collect();
    if !missing.is_empty() && from != version {
        // A form ref arguments accept: the date itself, a list of the dates, or (past 20 of
        // them) their range (a build skips what is live of it). A brace of one value is not one.
        let shown = match missing.len() {
            1 => missing[0].clone(),
            2..=20 => format!("{{{}}}", missing.join(",")),
            n => format!("{{{}..{}}}", missing[0], missing[n - 1]),
        };
        return Err(EngineError::Invalid(format!(
            "cannot promote `{table_name}` to v{version}: it lacks {} date(s) that v{from} covers ({}); build them first: databuild build '{}'",
            missing.len(),
            missing.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            table.data_ref(version, &shown),
        )));
    }
    let mut summary = None;
    if let Some((options, executor, observer, interrupt)) = downstream {
        let refs = engine.downstream_of(table)?;
        if !refs.is_empty() {
            let mut pins = options.pins.clone();
            pins.insert(table.name.clone(), version);
            let options = BuildOptions {
                refs,
                pins,
                ..options.clone()
            };
            let built = engine.build(&options, executor, observer, interrupt)?;
            if built.status != Status::Completed {
                return Err(EngineError::Invalid(format!(
                    "not promoted: rebuilding the downstream of `{table_name}` on v{version} failed (build request {}, {} failed); `{table_name}` still reads v{from}",
                    built.build_request_id,
                    built.failed.len()
                )));
            }
            summary = Some(built);
        }
    }
    engine
        .store
        .append(vec![Event::alias(&table.name, version).with_message(
            format!(
                "`{}/date=...` now reads v{version} (was v{from})",
                table.name
            ),
        )])?;
    crate::data::table_job::point_current(&engine.data_dir, &table.name, version)
        .map_err(|e| EngineError::Invalid(format!("promoted in the log, but the `current` link of `{table_name}` could not be switched: {e}")))?;
    Ok(Promotion {
        table: table.name.clone(),
        from,
        to: version,
        downstream: summary,
    })
}

pub(crate) fn link_tables(engine: &Engine) -> Result<()> {
    let promoted = engine.promoted_versions()?;
    for t in &engine.graph.tables {
        let link = engine.data_dir.join(&t.name).join("current");
        if link.symlink_metadata().is_err() {
            let v = promoted
                .get(&t.name)
                .copied()
                .unwrap_or_else(|| t.initial_version());
            crate::data::table_job::point_current(&engine.data_dir, &t.name, v).map_err(|e| {
                EngineError::Invalid(format!("cannot link `{}/current`: {e}", t.name))
            })?;
        }
    }
    Ok(())
}

fn source_error(e: crate::data::sources::SourceError) -> EngineError {
    match e {
        crate::data::sources::SourceError::Log(l) => EngineError::Log(l),
        other => EngineError::Invalid(other.to_string()),
    }
}

/// A day can be sealed once it has begun: a future day sealed now would be live with no
/// records, and builds downstream would read it as a day that had none.
fn check_seal_date(through: &str, today: &str) -> Result<()> {
    let parse = databuild_core::pattern::parse_date;
    let Some(day) = parse(through) else {
        return Err(EngineError::Invalid(format!(
            "`{through}` is not a date (YYYY-MM-DD)"
        )));
    };
    if parse(today).is_some_and(|today| day > today) {
        return Err(EngineError::Invalid(format!(
            "`--through {through}` is in the future: only days up to today ({today}) can be sealed"
        )));
    }
    Ok(())
}
