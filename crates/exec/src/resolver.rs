//! The planner's I/O: is an external partition there, and what does a dynamic job need?

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use databuild_core::{ConfigInput, Dataset, Deps, Graph, Job, JobConfig, PartitionRef, Resolver};

use crate::table_job::Schema;

use crate::process::{describe_status, run_captured, tail_lines};

/// How long an `exists` probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Keeps one config call's arguments well under the kernel's limit (`ARG_MAX`, 2 MiB on Linux);
/// beyond it the refs are split over several calls.
const MAX_ARG_BYTES: usize = 1024 * 1024;

/// Resolves external data and dynamic dependencies on this machine.
pub struct LocalResolver<'g> {
    graph: &'g Graph,
    /// The graph file's folder: helpers run there, as jobs do.
    graph_dir: PathBuf,
    data_dir: PathBuf,
    /// `YYYY-MM-DD`: which raw source partitions retention still keeps.
    today: String,
}

impl<'g> LocalResolver<'g> {
    pub fn new(
        graph: &'g Graph,
        graph_dir: impl Into<PathBuf>,
        data_dir: impl Into<PathBuf>,
        today: String,
    ) -> Self {
        LocalResolver {
            graph,
            graph_dir: graph_dir.into(),
            data_dir: data_dir.into(),
            today,
        }
    }

    /// A table version's day reads its raw source partition while retention keeps it; after
    /// that, the previous version's day, carried forward.
    fn table_configs(
        &self,
        table: usize,
        version: u32,
        outputs: &[PartitionRef],
    ) -> Result<Vec<JobConfig>, String> {
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
                    databuild_core::Migration::between(prev, this).map_err(|e| {
                        format!(
                            "cannot carry {} forward to v{version} ({raw} expired): {e}",
                            table.data_ref(prev.version, date)
                        )
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
            let r = |s: String| PartitionRef::new(s).map_err(|e| e.to_string());
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
    ) -> Result<Vec<JobConfig>, String> {
        let shown = config.join(" ");
        let mut cmd = self.command(config);
        cmd.args(refs.iter().map(|r| r.as_str()));
        let captured = run_captured(cmd, job.config_timeout).map_err(|e| e.to_string())?;
        if !captured.status.success() {
            let stderr = tail_lines(&captured.stderr, 5);
            return Err(format!(
                "`{shown}` ended with {}{}",
                describe_status(&captured.status),
                if stderr.is_empty() {
                    String::new()
                } else {
                    format!(":\n{stderr}")
                }
            ));
        }
        if captured.truncated {
            return Err(format!(
                "`{shown}` printed more than {} bytes",
                crate::process::OUTPUT_LIMIT
            ));
        }
        let stdout = String::from_utf8(captured.stdout)
            .map_err(|_| format!("`{shown}` printed output that is not UTF-8"))?;
        JobConfig::parse_response(&stdout).map_err(|e| format!("`{shown}`: {e}"))
    }
}

impl Resolver for LocalResolver<'_> {
    fn external_available(&mut self, dataset: &Dataset, r: &PartitionRef) -> Result<bool, String> {
        if dataset.source.is_some() {
            return Ok(crate::sources::sealed_version(&self.data_dir.join(r.as_str())).is_some());
        }
        if let Some(upstream) = &dataset.upstream {
            return crate::upstream::status(upstream, r.as_str()).map(|(s, _)| s == "live");
        }
        let Some(probe) = &dataset.exists else {
            return Ok(self.data_dir.join(r.as_str()).exists());
        };
        let mut cmd = self.command(probe);
        cmd.arg(r.as_str());
        let captured = run_captured(cmd, PROBE_TIMEOUT).map_err(|e| e.to_string())?;
        Ok(captured.status.success())
    }

    fn job_configs(
        &mut self,
        job: &Job,
        outputs: &[PartitionRef],
    ) -> Result<Vec<JobConfig>, String> {
        let config = match &job.deps {
            Deps::Dynamic { config } => config,
            Deps::Table { table, version } => return self.table_configs(*table, *version, outputs),
            Deps::Static(_) => return Err(format!("job `{}` has no config executable", job.name)),
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
            configs.extend(self.call_config(job, config, &outputs[start..end])?);
            start = end;
        }
        Ok(configs)
    }
}
