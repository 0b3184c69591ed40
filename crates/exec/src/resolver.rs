//! The planner's I/O: is an external partition there, and what does a dynamic job need?

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use databuild_core::{Dataset, Job, JobConfig, PartitionRef, Resolver};

use crate::process::{describe_status, run_captured, tail_lines};

/// How long an `exists` probe may take.
pub const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// Keeps one config call's arguments well under the kernel's limit (`ARG_MAX`, 2 MiB on Linux);
/// beyond it the refs are split over several calls.
const MAX_ARG_BYTES: usize = 1024 * 1024;

/// Resolves external data and dynamic dependencies on this machine.
pub struct LocalResolver {
    /// The graph file's folder: helpers run there, as jobs do.
    graph_dir: PathBuf,
    data_dir: PathBuf,
}

impl LocalResolver {
    pub fn new(graph_dir: impl Into<PathBuf>, data_dir: impl Into<PathBuf>) -> Self {
        LocalResolver {
            graph_dir: graph_dir.into(),
            data_dir: data_dir.into(),
        }
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

impl Resolver for LocalResolver {
    fn external_available(&mut self, dataset: &Dataset, r: &PartitionRef) -> Result<bool, String> {
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
        let databuild_core::Deps::Dynamic { config } = &job.deps else {
            return Err(format!("job `{}` has no config executable", job.name));
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
