//! The planner's I/O: is an external partition there, and what does a dynamic job need?

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use databuild_core::{
    ConfigInput, ConfigWithheld, Dataset, Deps, Graph, Job, JobConfig, PartitionRef, ResolveError,
    Resolver,
};

use crate::config::ConfigAccess;

use crate::data::table_job::Schema;

use crate::run::process::{describe_status, run_captured, tail_lines};

/// How long an `exists` probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Keeps one config call's arguments well under the kernel's limit (`ARG_MAX`, 2 MiB on Linux);
/// beyond it the refs are split over several calls.
const MAX_ARG_BYTES: usize = 1024 * 1024;

/// Why the local resolver could not answer; the planner reports the message as the probe's or the
/// config's failure. Causes shown in a message are plain fields, not a `source`, which `{:#}`
/// would print twice.
#[derive(Debug, thiserror::Error)]
pub enum ResolverError {
    #[error(transparent)]
    Run(#[from] crate::run::process::RunError),
    #[error("`{shown}` ended with {status}{}{}", colon_lines(.last_line), kept(.stderr_kept))]
    Failed {
        shown: String,
        status: String,
        /// The last line of its standard error (a traceback's says what went wrong).
        last_line: String,
        /// Where its whole standard error is kept, if it could be.
        stderr_kept: Option<PathBuf>,
    },
    #[error(
        "`{shown}` printed more than {} bytes",
        crate::run::process::OUTPUT_LIMIT
    )]
    TooMuchOutput { shown: String },
    #[error("`{shown}` printed output that is not UTF-8")]
    NotUtf8 { shown: String },
    #[error("`{shown}`: {source}")]
    Response {
        shown: String,
        source: databuild_core::ConfigResponseError,
    },
    #[error("cannot carry {from} forward to v{version} ({raw} expired): {cause}")]
    CannotCarry {
        from: String,
        version: u32,
        raw: String,
        cause: Box<databuild_core::tables::TableError>,
    },
    #[error(transparent)]
    Ref(#[from] databuild_core::RefError),
    #[error("job `{0}` has no config executable")]
    NoConfig(String),
    #[error(transparent)]
    Upstream(#[from] crate::data::upstream::UpstreamError),
}

/// Where a config's whole standard error is, for its error.
fn kept(path: &Option<PathBuf>) -> String {
    path.as_ref()
        .map(|p| format!("\n(its whole standard error: {})", p.display()))
        .unwrap_or_default()
}

/// `:` and the lines on lines of their own, or nothing for none.
fn colon_lines(lines: &str) -> String {
    if lines.is_empty() {
        String::new()
    } else {
        format!(":\n{lines}")
    }
}

/// Resolves external data and dynamic dependencies on this machine.
pub struct LocalResolver<'g> {
    graph: &'g Graph,
    /// The graph file's folder: helpers run there, as jobs do.
    graph_dir: PathBuf,
    data_dir: PathBuf,
    /// `YYYY-MM-DD`: which raw source partitions retention still keeps.
    today: String,
    /// Notes the external files found, for a plan to be kept.
    witnesses: Option<&'g crate::data::data_dir::Witnesses>,
    /// Whether config executables may run for the caller.
    configs: ConfigAccess,
    /// Notes the external partitions found available, for their arrivals to be recorded.
    sightings: Option<&'g crate::data::arrivals::Sightings>,
}

impl<'g> LocalResolver<'g> {
    pub fn new(
        graph: &'g Graph,
        graph_dir: impl Into<PathBuf>,
        data_dir: impl Into<PathBuf>,
        today: String,
        configs: ConfigAccess,
    ) -> Self {
        LocalResolver {
            graph,
            graph_dir: graph_dir.into(),
            data_dir: data_dir.into(),
            today,
            witnesses: None,
            configs,
            sightings: None,
        }
    }

    /// Notes the external files found in `witnesses`.
    pub(crate) fn witnessed_by(
        mut self,
        witnesses: Option<&'g crate::data::data_dir::Witnesses>,
    ) -> Self {
        self.witnesses = witnesses;
        self
    }

    /// Notes the external partitions found available in `sightings`.
    pub(crate) fn sighted_by(
        mut self,
        sightings: Option<&'g crate::data::arrivals::Sightings>,
    ) -> Self {
        self.sightings = sightings;
        self
    }

    /// A table version's day reads its raw source partition while retention keeps it; after
    /// that, the previous version's day, carried forward.
    fn table_configs(
        &self,
        table: usize,
        version: u32,
        outputs: &[PartitionRef],
    ) -> Result<Vec<JobConfig>, ResolverError> {
        let table = &self.graph.tables[table];
        let source = &self.graph.sources[table.source];
        let this = table.version(version).expect("a declared version");
        let mut dates: Vec<&str> = outputs
            .iter()
            .filter_map(|o| o.as_str().rsplit_once("date=").map(|(_, d)| d))
            .collect();
        dates.dedup();
        let mut configs = Vec::with_capacity(dates.len());
        for date in dates {
            let raw = source.partition_ref(date);
            let retained =
                self.data_dir.join(&raw).exists() || !source.is_expired(date, &self.today);
            let (input, args) = match table.previous(version) {
                Some(prev) if !retained => {
                    databuild_core::Migration::between(prev, this).map_err(|cause| {
                        ResolverError::CannotCarry {
                            from: table.data_ref(prev.version, date),
                            version,
                            raw: raw.clone(),
                            cause: Box::new(cause),
                        }
                    })?;
                    let args = vec![
                        "carry".to_string(),
                        Schema::of(prev).to_arg(),
                        Schema::of(this).to_arg(),
                    ];
                    (table.data_ref(prev.version, date), args)
                }
                _ => (raw, vec!["load".to_string(), Schema::of(this).to_arg()]),
            };
            let r = |s: String| PartitionRef::new(s).map_err(ResolverError::Ref);
            configs.push(JobConfig {
                outputs: vec![
                    r(table.data_ref(version, date))?,
                    r(table.errors_ref(version, date))?,
                ],
                inputs: vec![ConfigInput {
                    partition_ref: r(input)?,
                    dep: Default::default(),
                }],
                args,
                env: Default::default(),
            });
        }
        Ok(configs)
    }

    /// Whether external partition `r` of `dataset` is there: a source's day sealed, the
    /// upstream service's partition live, its file present, or its probe exiting 0.
    fn probe_external(&self, dataset: &Dataset, r: &PartitionRef) -> Result<bool, ResolveError> {
        if dataset.source.is_some() {
            return Ok(
                crate::data::sources::sealed_version(&self.data_dir.join(r.as_str())).is_some(),
            );
        }
        if let Some(upstream) = &dataset.upstream {
            return crate::data::upstream::status(upstream, r.as_str())
                .map(|(s, _)| s == crate::answers::DerivedStatus::Live)
                .map_err(ResolveError::new);
        }
        let Some(probe) = &dataset.exists else {
            let exists = self.data_dir.join(r.as_str()).exists();
            if let Some(w) = self.witnesses {
                w.exists(r.as_str(), exists);
            }
            return Ok(exists);
        };
        let mut cmd = self.command(probe);
        cmd.arg(r.as_str());
        let captured = run_captured(cmd, PROBE_TIMEOUT).map_err(ResolveError::new)?;
        Ok(captured.status.success())
    }

    fn command(&self, argv: &[String]) -> Command {
        let mut cmd = Command::new(&argv[0]);
        cmd.args(&argv[1..])
            .current_dir(&self.graph_dir)
            .env("DATABUILD_DATA_DIR", &self.data_dir);
        cmd
    }

    fn call_config(
        &self,
        job: &Job,
        config: &[String],
        refs: &[PartitionRef],
    ) -> Result<Vec<JobConfig>, ResolverError> {
        let shown = config.join(" ");
        let mut cmd = self.command(config);
        cmd.args(refs.iter().map(|r| r.as_str()));
        // Named by its whole command (`python3 jobs/x.py config`), not by its interpreter.
        let captured = run_captured(cmd, job.config_timeout).map_err(|e| e.named(&shown))?;
        if !captured.status.success() {
            return Err(ResolverError::Failed {
                stderr_kept: self.keep_stderr(job, &captured.stderr),
                shown,
                status: describe_status(&captured.status),
                last_line: tail_lines(&captured.stderr, 1),
            });
        }
        if captured.truncated {
            return Err(ResolverError::TooMuchOutput { shown });
        }
        let Ok(stdout) = String::from_utf8(captured.stdout) else {
            return Err(ResolverError::NotUtf8 { shown });
        };
        JobConfig::parse_response(&stdout)
            .map_err(|source| ResolverError::Response { shown, source })
    }

    /// Keeps a failed config's standard error beside the run logs, when it says more than
    /// its last line: `.databuild/logs/config-JOB-TIME.stderr`.
    fn keep_stderr(&self, job: &Job, stderr: &[u8]) -> Option<PathBuf> {
        // One line is all in the error already.
        String::from_utf8_lossy(stderr).trim().lines().nth(1)?;
        let dir = self.graph_dir.join(".databuild/logs");
        let at = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis());
        let path = dir.join(format!("config-{}-{at}.stderr", job.name));
        std::fs::create_dir_all(&dir)
            .and_then(|()| std::fs::write(&path, stderr))
            .ok()?;
        Some(path)
    }
}

impl Resolver for LocalResolver<'_> {
    fn external_available(
        &mut self,
        dataset: &Dataset,
        r: &PartitionRef,
    ) -> Result<bool, ResolveError> {
        let available = self.probe_external(dataset, r)?;
        if let (true, Some(sightings)) = (available, self.sightings) {
            sightings.note(dataset, r.as_str());
        }
        Ok(available)
    }

    fn job_configs(
        &mut self,
        job: &Job,
        outputs: &[PartitionRef],
    ) -> Result<Vec<JobConfig>, ResolveError> {
        let config = match &job.deps {
            Deps::Dynamic { .. } if self.configs == ConfigAccess::Withheld => {
                return Err(ConfigWithheld {
                    job: job.name.clone(),
                }
                .into())
            }
            Deps::Dynamic { config } => config,
            Deps::Table { table, version } => {
                return self
                    .table_configs(*table, *version, outputs)
                    .map_err(ResolveError::new)
            }
            Deps::Static(_) => {
                return Err(ResolveError::new(ResolverError::NoConfig(job.name.clone())))
            }
        };
        let mut configs = Vec::new();
        let mut start = 0;
        while start < outputs.len() {
            let mut bytes = 0;
            let mut end = start;
            while end < outputs.len()
                && (end == start || bytes + outputs[end].as_str().len() < MAX_ARG_BYTES)
            {
                bytes += outputs[end].as_str().len() + 1;
                end += 1;
            }
            configs.extend(
                self.call_config(job, config, &outputs[start..end])
                    .map_err(ResolveError::new)?,
            );
            start = end;
        }
        Ok(configs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A graph whose config job's config would leave a marker file where it runs.
    fn graph() -> Graph {
        Graph::parse(
            "[graph]\nname = \"g\"\n[[job]]\nname = \"dyn\"\noutputs = [\"o/{k}\"]\nconfig = [\"touch\", \"ran\"]\ncommand = [\"true\"]\n",
            "databuild.toml",
        )
        .unwrap()
    }

    #[test]
    fn a_withheld_config_is_not_run_and_says_whose_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let graph = graph();
        let job = graph.job("dyn").unwrap();
        let r = [PartitionRef::new("o/1").unwrap()];
        let mut resolver = LocalResolver::new(
            &graph,
            dir.path(),
            dir.path(),
            "2026-01-01".into(),
            ConfigAccess::Withheld,
        );
        match resolver.job_configs(job, &r) {
            Err(ResolveError::ConfigWithheld(w)) => assert_eq!(w.job, "dyn"),
            other => panic!("expected the config withheld, got {other:?}"),
        }
        assert!(!dir.path().join("ran").exists(), "the config ran");
        // Allowed, it runs (it prints no configs, which is an error of its own).
        let mut resolver = LocalResolver::new(
            &graph,
            dir.path(),
            dir.path(),
            "2026-01-01".into(),
            ConfigAccess::Run,
        );
        assert!(resolver.job_configs(job, &r).is_err());
        assert!(dir.path().join("ran").exists(), "the config did not run");
    }
}
