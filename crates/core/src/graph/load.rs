//! Loading a graph file: [`Graph::parse`] reads `databuild.toml` and turns each section into the
//! validated [`Graph`]'s parts, refusing with a [`GraphError`] naming the file, the section and
//! the problem whatever a run would trip over later (patterns, templates, durations, commands).

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::file::*;
use super::*;
use crate::alert::{Alert, AlertOn, AlertTarget};
use crate::pattern::{FieldType, Pattern};
use crate::tables::{
    self, BodyFormat, Column, Idempotency, IdempotencyKey, SignatureScheme, Source, SourceKind,
    SourceSettingError, Table, TableVersion,
};
use crate::template::Template;

/// A problem with a graph file, naming the file and the part of it at fault.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{file}: {}{message}", .context.as_ref().map(|c| format!("{c}: ")).unwrap_or_default())]
pub struct GraphError {
    pub file: String,
    /// `job `x``, `dataset `y``, `graph.domains`...; absent for file-level problems.
    pub context: Option<String>,
    pub message: String,
}

impl Graph {
    /// Parses and validates a graph file's text. `file` names it in errors.
    pub fn parse(text: &str, file: &str) -> Result<Graph, GraphError> {
        let err = |context: Option<String>, message: String| GraphError {
            file: file.to_string(),
            context,
            message,
        };
        let parsed: GraphFile = toml::from_str(text).map_err(|e| {
            err(
                None,
                e.to_string().trim_end().replace('\n', "\n    ").to_string(),
            )
        })?;
        Loader { file }.load(parsed)
    }
}

/// Turns a file's sections into a [`Graph`], naming the file (`file`) in its errors.
pub(super) struct Loader<'f> {
    file: &'f str,
}

impl Loader<'_> {
    pub(super) fn err(
        &self,
        context: impl Into<Option<String>>,
        message: impl Into<String>,
    ) -> GraphError {
        GraphError {
            file: self.file.to_string(),
            context: context.into(),
            message: message.into(),
        }
    }

    fn load(&self, f: GraphFile) -> Result<Graph, GraphError> {
        if f.graph.name.trim().is_empty() {
            return Err(self.err("graph".to_string(), "`name` cannot be empty"));
        }
        self.check_domains(&f.graph.domains)?;
        let mut names: HashMap<&str, &str> = HashMap::new();
        let mut datasets = Vec::new();
        for d in &f.dataset {
            let ctx = format!("dataset `{}`", d.name);
            self.check_name(&d.name, "dataset", &mut names)?;
            let pattern =
                Pattern::parse(&d.pattern).map_err(|e| self.err(ctx.clone(), e.to_string()))?;
            if d.exists.is_some() && d.upstream.is_some() {
                return Err(self.err(
                    ctx,
                    "give `exists` (a probe) or `upstream` (a service), not both",
                ));
            }
            if let Some(u) = &d.upstream {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    return Err(self.err(ctx, format!("`upstream = \"{u}\"` is not an http:// or https:// URL of a DataBuild service")));
                }
            }
            if matches!(&d.exists, Some(cmd) if cmd.is_empty()) {
                return Err(self.err(ctx, "`exists` is an empty command; give a program and its arguments, or remove it to check for a file under the data dir"));
            }
            datasets.push(Dataset {
                name: d.name.clone(),
                pattern,
                exists: d.exists.clone(),
                source: None,
                upstream: d
                    .upstream
                    .as_ref()
                    .map(|u| u.trim_end_matches('/').to_string()),
            });
        }
        let mut jobs = Vec::new();
        for j in &f.job {
            self.check_name(&j.name, "job", &mut names)?;
            let job = self.load_job(j, &f.graph.domains)?;
            if let Some(p) = job
                .outputs
                .iter()
                .find(|p| p.as_str().starts_with("source/"))
            {
                return Err(self.err(
                    format!("job `{}`", j.name),
                    format!("output `{p}` is in `source/`, which belongs to [[source]] sections"),
                ));
            }
            jobs.push(job);
        }
        let mut sources = Vec::new();
        // Sources have names of their own: a table usually shares its source's name.
        let mut source_names = HashMap::new();
        for s in &f.source {
            self.check_name(&s.name, "source", &mut source_names)?;
            let source = self.load_source(s)?;
            datasets.push(Dataset {
                name: format!("source:{}", s.name),
                pattern: Pattern::parse(&source.pattern()).expect("a valid pattern"),
                exists: None,
                source: Some(sources.len()),
                upstream: None,
            });
            sources.push(source);
        }
        let tables = self.load_tables(&f.table, &sources, &mut jobs, &mut names)?;
        let executor = self.executor(f.graph.executor.as_deref(), f.graph.slurm)?;
        let mut graph = Graph {
            name: f.graph.name,
            event_log: f.graph.event_log,
            data_dir: f.graph.data_dir.unwrap_or_else(|| "data".to_string()),
            executor,
            domains: f.graph.domains,
            datasets,
            jobs,
            sources,
            tables,
            wants: Vec::new(),
            alerts: Vec::new(),
            checks: Vec::new(),
            show_env: f.graph.show_env,
            openlineage: self.openlineage(f.openlineage)?,
            index: PatternIndex::default(),
        };
        self.check_overlaps(&graph)?;
        self.link_templates(&mut graph)?;
        graph.index = PatternIndex::build(&graph);
        graph.wants = self.load_wants(&f.want, &graph)?;
        graph.alerts = self.load_alerts(&f.alert)?;
        graph.checks = self.load_checks(&f.check, &graph)?;
        Ok(graph)
    }

    /// Checks: each applies to a job (all its outputs) or one job output pattern.
    fn load_checks(
        &self,
        sections: &[CheckSection],
        graph: &Graph,
    ) -> Result<Vec<Check>, GraphError> {
        let mut names = HashMap::new();
        let mut checks = Vec::new();
        for c in sections {
            self.check_name(&c.name, "check", &mut names)?;
            let err = |m: String| self.err(format!("check `{}`", c.name), m);
            let Some(applies_to) = c.applies_to.as_deref().filter(|a| !a.is_empty()) else {
                return Err(err("`applies_to` is missing: name the job whose outputs it checks, or one of its output patterns, such as `applies_to = \"daily_summaries\"`".into()));
            };
            let mut targets = Vec::new();
            for (j, job) in graph.jobs.iter().enumerate() {
                for (o, pattern) in job.outputs.iter().enumerate() {
                    if job.name == applies_to || pattern.as_str() == applies_to {
                        targets.push((j, o));
                    }
                }
            }
            if targets.is_empty() {
                let why = if graph.datasets.iter().any(|d| d.name == applies_to) {
                    format!("`applies_to = \"{applies_to}\"` names an external dataset; checks apply to what jobs build (name a job or one of its output patterns)")
                } else {
                    let known: Vec<&str> = graph.jobs.iter().map(|j| j.name.as_str()).collect();
                    format!(
                        "`applies_to = \"{applies_to}\"` is neither a job nor a job's output pattern (jobs: {})",
                        if known.is_empty() { "none".to_string() } else { known.join(", ") }
                    )
                };
                return Err(err(why));
            }
            let (command, metric) = check_kind(c).map_err(err)?;
            let timeout = c
                .timeout
                .as_deref()
                .map(|t| {
                    humantime::parse_duration(t).map_err(|e| {
                        err(format!("`timeout = \"{t}\"` is not a duration ({e}); write it like \"90s\" or \"10m\""))
                    })
                })
                .transpose()?;
            if timeout == Some(Duration::ZERO) {
                return Err(err("`timeout` must be longer than zero".into()));
            }
            let version = match &c.version {
                None => "0".to_string(),
                Some(toml::Value::String(s)) => s.clone(),
                Some(toml::Value::Integer(i)) => i.to_string(),
                Some(other) => {
                    return Err(err(format!(
                        "`version` must be a string or an integer, not {}",
                        other.type_str()
                    )))
                }
            };
            checks.push(Check {
                name: c.name.clone(),
                applies_to: applies_to.to_string(),
                targets,
                command,
                metric,
                blocking: c.blocking.unwrap_or(true),
                timeout,
                version,
                code: code_globs(&c.code).map_err(|e| err(e.to_string()))?,
            });
        }
        Ok(checks)
    }

    /// `[openlineage]`: an http(s) URL, a namespace that is not blank, and the name of the
    /// variable holding the API key (never the key: graph files are committed).
    fn openlineage(
        &self,
        section: Option<OpenLineageSection>,
    ) -> Result<Option<OpenLineageGraphConfig>, GraphError> {
        let Some(s) = section else { return Ok(None) };
        let err = |m: String| self.err("openlineage".to_string(), m);
        if let Some(url) = &s.url {
            if !(url.starts_with("http://") || url.starts_with("https://")) {
                return Err(err(format!(
                    "`url = \"{url}\"` is not an http:// or https:// URL of an OpenLineage receiver (such as Marquez's `http://localhost:5000`)"
                )));
            }
        }
        if matches!(&s.namespace, Some(n) if n.trim().is_empty()) {
            return Err(err(
                "`namespace` cannot be empty; remove it to use the graph's name".into(),
            ));
        }
        if let Some(name) = &s.api_key_env {
            if !is_env_name(name) || name.contains(char::is_whitespace) {
                return Err(err(format!(
                    "`api_key_env = \"{name}\"` is not an environment variable's name; name the variable holding the key (such as `OPENLINEAGE_API_KEY`), never the key itself"
                )));
            }
        }
        Ok(Some(OpenLineageGraphConfig {
            url: s.url.map(|u| u.trim_end_matches('/').to_string()),
            namespace: s.namespace,
            api_key_env: s.api_key_env,
        }))
    }

    fn executor(
        &self,
        name: Option<&str>,
        slurm: Option<SlurmSection>,
    ) -> Result<ExecutorConfig, GraphError> {
        let ctx = || Some("graph".to_string());
        match name.unwrap_or("local") {
            "local" => Ok(ExecutorConfig::Local),
            "slurm" => {
                let s = slurm.unwrap_or(SlurmSection {
                    partition: None,
                    account: None,
                    sbatch_args: Vec::new(),
                    pending_timeout: None,
                });
                let pending_timeout = match s.pending_timeout.as_deref() {
                    None => Duration::from_secs(600),
                    Some(t) => humantime::parse_duration(t).map_err(|e| {
                        self.err(
                            ctx(),
                            format!("`slurm.pending_timeout = \"{t}\"` is not a duration ({e})"),
                        )
                    })?,
                };
                Ok(ExecutorConfig::Slurm(SlurmConfig {
                    partition: s.partition,
                    account: s.account,
                    sbatch_args: s.sbatch_args,
                    pending_timeout,
                }))
            }
            other => Err(self.err(
                ctx(),
                format!("unknown executor `{other}`; use \"local\" or \"slurm\""),
            )),
        }
    }

    fn check_name<'a>(
        &self,
        name: &'a str,
        kind: &'static str,
        seen: &mut HashMap<&'a str, &'static str>,
    ) -> Result<(), GraphError> {
        let valid = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.'));
        if !valid {
            return Err(self.err(
                format!("{kind} `{name}`"),
                "a name is letters, digits, `_`, `-` and `.`",
            ));
        }
        if let Some(other) = seen.insert(name, kind) {
            return Err(self.err(
                format!("{kind} `{name}`"),
                format!("the name is already used by a {other}"),
            ));
        }
        Ok(())
    }

    fn check_domains(&self, domains: &BTreeMap<String, Vec<String>>) -> Result<(), GraphError> {
        for (name, values) in domains {
            let ctx = format!("graph.domains.{name}");
            if !crate::pattern::is_identifier(name) {
                return Err(self.err(ctx, "a domain name is letters, digits and `_`"));
            }
            if values.is_empty() {
                return Err(self.err(ctx, "a domain needs at least one value"));
            }
            for v in values {
                if !FieldType::Str.accepts(v) || crate::refs::validate_ref(v).is_err() {
                    return Err(self.err(
                        ctx,
                        format!("value `{}` cannot be part of a ref (empty, `/`, braces, `..` or control characters)", v.escape_debug()),
                    ));
                }
            }
            let mut sorted: Vec<_> = values.iter().collect();
            sorted.sort();
            if let Some(w) = sorted.windows(2).find(|w| w[0] == w[1]) {
                return Err(self.err(ctx, format!("value `{}` is listed twice", w[0])));
            }
        }
        Ok(())
    }

    fn load_job(
        &self,
        j: &JobSection,
        domains: &BTreeMap<String, Vec<String>>,
    ) -> Result<Job, GraphError> {
        let ctx = format!("job `{}`", j.name);
        let err = |m: String| self.err(ctx.clone(), m);
        let outputs = match &j.outputs {
            Some(o) if !o.is_empty() => o
                .iter()
                .map(|p| Pattern::parse(p).map_err(|e| err(e.to_string())))
                .collect::<Result<Vec<_>, _>>()?,
            _ => return Err(err("`outputs` is missing or empty: list the output patterns this job builds, such as `outputs = [\"reviews/date={date:date}\"]`".into())),
        };
        let command = match &j.command {
            Some(c) if !c.is_empty() && !c[0].is_empty() => c.clone(),
            _ => return Err(err("`command` is missing or empty: give the program and its arguments, such as `command = [\"python3\", \"jobs/extract.py\"]`".into())),
        };
        let deps =
            match (&j.inputs, &j.config) {
                (Some(_), Some(_)) => return Err(err(
                    "give either `inputs` (templates) or `config` (dynamic dependencies), not both"
                        .into(),
                )),
                (_, Some(config)) if config.is_empty() => {
                    return Err(err("`config` is an empty command".into()))
                }
                (_, Some(config)) => Deps::Dynamic {
                    config: config.clone(),
                },
                (inputs, None) => Deps::Static(
                    inputs
                        .iter()
                        .flatten()
                        .map(|t| {
                            Template::parse(t, &outputs, domains)
                                .map(|template| LinkedTemplate {
                                    template,
                                    reads: Vec::new(),
                                })
                                .map_err(|e| err(e.to_string()))
                        })
                        .collect::<Result<_, _>>()?,
                ),
            };
        let duration = |key: &str, v: &Option<String>| -> Result<Option<Duration>, GraphError> {
            v.as_deref()
                .map(|text| {
                    humantime::parse_duration(text).map_err(|e| {
                        err(format!(
                            "`{key} = \"{text}\"` is not a duration ({e}); write it like \"90s\", \"10m\" or \"1h 30m\""
                        ))
                    })
                })
                .transpose()
        };
        let timeout = duration("timeout", &j.timeout)?;
        let config_timeout = duration("config_timeout", &j.config_timeout)?;
        if timeout == Some(Duration::ZERO) {
            return Err(err("`timeout` must be longer than zero".into()));
        }
        let version = match &j.version {
            None => "0".to_string(),
            Some(toml::Value::String(s)) => s.clone(),
            Some(toml::Value::Integer(i)) => i.to_string(),
            Some(other) => {
                return Err(err(format!(
                    "`version` must be a string or an integer, not {}",
                    other.type_str()
                )))
            }
        };
        if j.batch == Some(0) {
            return Err(err("`batch` must be at least 1".into()));
        }
        if j.concurrency == Some(0) {
            return Err(err("`concurrency` must be at least 1".into()));
        }
        if let Some(key) = j.env.keys().find(|k| !is_env_name(k)) {
            return Err(err(format!(
                "`env` has the name `{key}`, which no environment variable can have (empty, or \
                 with `=` or a NUL byte); name it with letters, digits and `_`"
            )));
        }
        if let Some(key) = j.env.keys().find(|k| k.starts_with("DATABUILD_")) {
            return Err(err(format!(
                "`env` sets `{key}`, but `DATABUILD_` variables are set by DataBuild itself"
            )));
        }
        Ok(Job {
            name: j.name.clone(),
            outputs,
            deps,
            command,
            version,
            timeout,
            config_timeout: config_timeout.unwrap_or(DEFAULT_CONFIG_TIMEOUT),
            retries: j.retries.unwrap_or(0),
            concurrency: j.concurrency,
            batch: j.batch.unwrap_or(1),
            env: j.env.clone(),
            cpus: j.cpus,
            mem: j.mem.clone(),
            migrate: match &j.migrate {
                Some(m) if m.is_empty() || m[0].is_empty() => {
                    return Err(err("`migrate` is an empty command".into()))
                }
                other => other.clone(),
            },
            code: code_globs(&j.code).map_err(|e| err(e.to_string()))?,
        })
    }

    /// Recurring wants: their templates must expand to refs the graph can build.
    fn load_wants(
        &self,
        sections: &[WantSection],
        graph: &Graph,
    ) -> Result<Vec<crate::wants::RecurringWant>, GraphError> {
        let mut names = HashMap::new();
        let mut wants = Vec::new();
        for w in sections {
            self.check_name(&w.name, "want", &mut names)?;
            let err = |m: String| self.err(format!("want `{}`", w.name), m);
            if w.refs.is_empty() {
                return Err(err("`refs` is empty".into()));
            }
            let sample = chrono::NaiveDate::from_ymd_opt(2000, 1, 1)
                .and_then(|d| d.and_hms_opt(0, 0, 0))
                .expect("a time");
            for t in &w.refs {
                for r in crate::wants::expand(t, sample, &graph.domains)
                    .map_err(|e| err(e.to_string()))?
                {
                    crate::refs::validate_ref(&r)
                        .map_err(|e| err(format!("`{t}` gives `{r}`: {e}")))?;
                    if graph.producer_of(&r).is_none() {
                        return Err(err(format!(
                            "`{t}` gives `{r}`, which no job builds and no dataset declares"
                        )));
                    }
                }
            }
            let duration = |key: &str,
                            v: &Option<String>|
             -> Result<Option<Duration>, GraphError> {
                v.as_deref()
                    .map(|t| {
                        humantime::parse_duration(t)
                            .map_err(|e| err(format!("`{key} = \"{t}\"` is not a duration ({e})")))
                    })
                    .transpose()
            };
            wants.push(crate::wants::RecurringWant {
                name: w.name.clone(),
                refs: w.refs.clone(),
                sla: duration("sla", &w.sla)?,
                ttl: duration("ttl", &w.ttl)?.unwrap_or(Duration::from_secs(7 * 86_400)),
                by: w
                    .by
                    .as_deref()
                    .map(crate::wants::time_of_day)
                    .transpose()
                    .map_err(|e| err(format!("`by`: {e}")))?,
            });
        }
        Ok(wants)
    }

    /// Alerts: what they are sent for, and either a command or a URL.
    fn load_alerts(&self, sections: &[AlertSection]) -> Result<Vec<Alert>, GraphError> {
        let mut names = HashMap::new();
        let mut alerts = Vec::new();
        for a in sections {
            self.check_name(&a.name, "alert", &mut names)?;
            let err = |m: String| self.err(format!("alert `{}`", a.name), m);
            if a.on.is_empty() {
                return Err(err(format!(
                    "`on` is empty; name some of {}",
                    AlertOn::NAMES
                )));
            }
            let on =
                a.on.iter()
                    .map(|o| {
                        AlertOn::parse(o)
                            .ok_or_else(|| err(format!("`on` names `{o}`; use {}", AlertOn::NAMES)))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
            let target =
                match (&a.command, &a.url) {
                    (Some(c), None) if !c.is_empty() && a.secret_env.is_none() => {
                        AlertTarget::Command(c.clone())
                    }
                    (None, Some(u)) if u.starts_with("http://") || u.starts_with("https://") => {
                        AlertTarget::Url {
                            url: u.clone(),
                            secret_env: a.secret_env.clone(),
                        }
                    }
                    _ => return Err(err(
                        "give either `command` (a non-empty list) or `url` (http:// or https://, \
                         with `secret_env` naming the variable holding its signing secret)"
                            .into(),
                    )),
                };
            alerts.push(Alert {
                name: a.name.clone(),
                on,
                target,
            });
        }
        Ok(alerts)
    }

    fn load_source(&self, s: &SourceSection) -> Result<Source, GraphError> {
        let err = |m: String| self.err(format!("source `{}`", s.name), m);
        let kind = match (s.kind.as_str(), &s.path) {
            ("webhook", None) => SourceKind::Webhook,
            ("webhook", Some(_)) => {
                return Err(err("`path` is for `kind = \"directory\"` sources".into()))
            }
            ("directory", path) => SourceKind::Directory {
                path: path
                    .clone()
                    .unwrap_or_else(|| format!("incoming/{}", s.name)),
            },
            (other, _) => {
                return Err(err(format!(
                    "`kind = \"{other}\"` is not a source kind; use \"webhook\" or \"directory\""
                )))
            }
        };
        let body_format = match s.body_format.as_deref() {
            None => BodyFormat::Json,
            Some(f) => BodyFormat::parse(f).ok_or_else(|| {
                err(format!(
                    "`body_format = \"{f}\"` is unknown; use \"json\", \"json_array\", \"jsonl\" or \"text\""
                ))
            })?,
        };
        let max_body = match &s.max_body {
            None => 1024 * 1024,
            Some(toml::Value::Integer(n)) if *n > 0 => *n as usize,
            Some(toml::Value::String(t)) => {
                tables::parse_size(t).map_err(|e| err(format!("`max_body`: {e}")))?
            }
            Some(other) => {
                return Err(err(format!(
                    "`max_body = {other}` is not a size; write it like \"1MiB\""
                )))
            }
        };
        if s.rate_limit == Some(0) {
            return Err(err(
                "`rate_limit` must be at least 1 (requests per second)".into()
            ));
        }
        let setting = |e: SourceSettingError| err(e.to_string());
        let signature = match &s.signature {
            None => SignatureScheme::DataBuild,
            Some(toml::Value::String(name)) => SignatureScheme::named(name).map_err(setting)?,
            Some(table @ toml::Value::Table(_)) => {
                let t: SignatureSection = table.clone().try_into().map_err(|e| {
                    err(format!(
                        "`signature = {{ ... }}`: {}; its keys are header, prefix, algorithm and encoding",
                        e.message()
                    ))
                })?;
                SignatureScheme::generic(
                    t.header.as_deref(),
                    t.prefix.as_deref(),
                    t.algorithm.as_deref(),
                    t.encoding.as_deref(),
                )
                .map_err(setting)?
            }
            Some(other) => {
                return Err(setting(SourceSettingError::UnknownScheme(
                    other.to_string(),
                )))
            }
        };
        if s.signature.is_some() && s.secret_env.is_none() {
            return Err(setting(SourceSettingError::SignatureWithoutSecret));
        }
        let mut source = Source::new(
            &s.name,
            kind,
            tables::parse_retention(&s.retention).map_err(|e| err(e.to_string()))?,
        );
        if let Some(t) = &s.signature_tolerance {
            source.signature_tolerance =
                tables::parse_duration_setting("signature_tolerance", t, "5m").map_err(setting)?;
        }
        if let Some(i) = &s.idempotency {
            if s.kind != "webhook" {
                return Err(setting(SourceSettingError::WebhookOnly("idempotency")));
            }
            let key = match (&i.header, &i.field) {
                (Some(h), None) if !h.trim().is_empty() => IdempotencyKey::Header(h.clone()),
                (None, Some(f)) if !f.trim().is_empty() => IdempotencyKey::Field(f.clone()),
                _ => return Err(setting(SourceSettingError::IdempotencyKey)),
            };
            let window = match &i.window {
                Some(w) => tables::parse_duration_setting("idempotency.window", w, "24h")
                    .map_err(setting)?,
                None => Duration::from_secs(86_400),
            };
            source.idempotency = Some(Idempotency { key, window });
        }
        for h in s.include_headers.iter().flatten() {
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if h.is_empty() || !h.chars().all(token) {
                return Err(setting(SourceSettingError::HeaderName(h.clone())));
            }
        }
        source.include_headers = s.include_headers.clone().unwrap_or_default();
        source.body_format = body_format;
        source.secret_env = s.secret_env.clone();
        source.max_body = max_body;
        source.rate_limit = s.rate_limit.unwrap_or(100);
        source.signature = signature;
        Ok(source)
    }

    /// Groups `[[table]]` sections by name into versioned tables, each version a built-in job.
    fn load_tables<'a>(
        &self,
        sections: &'a [TableSection],
        sources: &[Source],
        jobs: &mut Vec<Job>,
        names: &mut HashMap<&'a str, &'static str>,
    ) -> Result<Vec<Table>, GraphError> {
        let mut tables: Vec<Table> = Vec::new();
        for t in sections {
            let ctx = format!("table `{}` v{}", t.name, t.version);
            let err = |m: String| self.err(ctx.clone(), m);
            let source = sources
                .iter()
                .position(|s| s.name == t.source)
                .ok_or_else(|| err(format!("`source = \"{}\"` names no [[source]]", t.source)))?;
            let index = match tables.iter().position(|x| x.name == t.name) {
                Some(i) if tables[i].source != source => {
                    return Err(err("every version of a table reads the same source".into()))
                }
                Some(i) if tables[i].version(t.version).is_some() => {
                    return Err(err("this version is declared twice".into()))
                }
                Some(i) => i,
                None => {
                    self.check_name(&t.name, "table", names)?;
                    tables.push(Table {
                        name: t.name.clone(),
                        source,
                        versions: Vec::new(),
                        alias: Pattern::parse(&format!("{}/date={{date:date}}", t.name))
                            .map_err(|e| err(e.to_string()))?,
                    });
                    tables.len() - 1
                }
            };
            if t.columns.is_empty() {
                return Err(err("`columns` is empty; declare them like `columns = { id = \"int\", note = \"str?\" }`".into()));
            }
            let columns = t
                .columns
                .iter()
                .map(|(n, spec)| Column::parse(n, spec))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| err(e.to_string()))?;
            let mut defaults = BTreeMap::new();
            for (name, v) in &t.defaults {
                if !t.columns.contains_key(name) {
                    return Err(err(format!(
                        "`defaults` names `{name}`, which is not a column"
                    )));
                }
                let json = serde_json::to_value(v).map_err(|e| err(e.to_string()))?;
                let column = columns.iter().find(|c| &c.name == name).expect("checked");
                if !tables::fits(column, &json) {
                    return Err(err(format!(
                        "the default of `{name}` is not a {}",
                        column.spec()
                    )));
                }
                defaults.insert(name.clone(), json);
            }
            let job = self
                .table_job(&tables[index], index, t.version, &columns, &defaults)
                .map_err(|e| err(e.to_string()))?;
            if jobs.iter().any(|j| j.name == job.name) {
                return Err(err(format!(
                    "its job name `{}` is already used by a job",
                    job.name
                )));
            }
            tables[index].versions.push(TableVersion {
                version: t.version,
                columns,
                defaults,
                job: jobs.len(),
            });
            tables[index].versions.sort_by_key(|v| v.version);
            jobs.push(job);
        }
        Ok(tables)
    }

    fn table_job(
        &self,
        table: &Table,
        index: usize,
        version: u32,
        columns: &[Column],
        defaults: &BTreeMap<String, serde_json::Value>,
    ) -> Result<Job, crate::pattern::PatternError> {
        // Editing a version's schema in place makes its partitions stale: the job version hashes it.
        let schema: Vec<String> = columns
            .iter()
            .map(|c| format!("{}:{}", c.name, c.spec()))
            .collect();
        let signature = format!(
            "{}|{}",
            schema.join(","),
            serde_json::to_string(defaults).unwrap_or_default()
        );
        Ok(Job {
            name: format!("{}.v{version}", table.name),
            outputs: vec![
                Pattern::parse(&format!("{}/v{version}/date={{date:date}}", table.name))?,
                Pattern::parse(&format!(
                    "{}/v{version}/errors/date={{date:date}}",
                    table.name
                ))?,
            ],
            deps: Deps::Table {
                table: index,
                version,
            },
            command: TABLE_JOB_COMMAND.split(' ').map(str::to_string).collect(),
            version: format!("{version}-{:08x}", fnv1a(signature.as_bytes()) as u32),
            timeout: None,
            config_timeout: DEFAULT_CONFIG_TIMEOUT,
            retries: 0,
            concurrency: None,
            batch: 1,
            env: BTreeMap::new(),
            cpus: None,
            mem: None,
            migrate: None,
            code: Vec::new(),
        })
    }
}

fn code_globs(globs: &[String]) -> Result<Vec<CodeGlob>, crate::code::CodeGlobError> {
    globs.iter().map(|g| CodeGlob::parse(g)).collect()
}

/// A small stable hash (FNV-1a) for job versions derived from a schema.
fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf29ce484222325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x100000001b3)
    })
}

/// What a check does: run a command, or judge a metric (`metric`, with `window` and `k`), never
/// both: a check with a command and a metric would leave unclear which decides.
fn check_kind(c: &CheckSection) -> Result<(Vec<String>, Option<MetricRule>), String> {
    let rule_keys = c.window.is_some() || c.k.is_some();
    match (&c.command, &c.metric) {
        (Some(_), Some(_)) => Err("has both `command` and `metric`: a check either runs a command or judges a metric; remove one".into()),
        (Some(cmd), None) if !cmd.is_empty() && !cmd[0].is_empty() => {
            if rule_keys {
                return Err("`window` and `k` belong to a metric check (`metric = \"rows\"`); remove them or the `command`".into());
            }
            Ok((cmd.clone(), None))
        }
        (_, None) => Err("`command` is missing or empty: give the program and its arguments, such as `command = [\"python3\", \"checks/has_rows.py\"]`, or name a metric to judge, such as `metric = \"rows\"`".into()),
        (None, Some(metric)) => Ok((Vec::new(), Some(metric_rule(metric, c.window, c.k)?))),
    }
}

/// An anomaly check's rule, validated: a metric's name as jobs report it, a window of at least
/// `MIN_WINDOW` partitions (fewer cannot tell an outlier), and a finite positive `k`.
fn metric_rule(metric: &str, window: Option<u32>, k: Option<f64>) -> Result<MetricRule, String> {
    const MIN_WINDOW: u32 = 5;
    if !super::is_metric_name(metric) {
        return Err(format!(
            "`metric = \"{metric}\"` is not a metric's name: use letters, digits, `_`, `.` or `-` (up to 64), such as a resource ({}) or a metric the job reports, such as \"rows\"",
            RESOURCE_METRICS.join(", ")
        ));
    }
    if metric == "queue_wait_ms" {
        return Err("`metric = \"queue_wait_ms\"` is the scheduler's wait, not the run's: it is known only once the run's end is recorded, after its checks; judge another metric".into());
    }
    let window = window.unwrap_or(MetricRule::DEFAULT_WINDOW);
    if window < MIN_WINDOW {
        return Err(format!(
            "`window = {window}` is too small: the band is learned from at least {MIN_WINDOW} partitions"
        ));
    }
    let k = k.unwrap_or(MetricRule::DEFAULT_K);
    if !(k.is_finite() && k > 0.0) {
        return Err(format!(
            "`k = {k}` must be a positive number: the band's half-width in robust standard deviations (default 3)"
        ));
    }
    Ok(MetricRule {
        metric: metric.to_string(),
        window,
        k,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::{load, load_err, PODCAST};

    const ORDERS: &str = r#"
[graph]
name = "orders"
[[source]]
name = "orders"
kind = "webhook"
retention = "7d"
[[table]]
name = "orders"
source = "orders"
version = 1
columns = { id = "int", amount = "int" }
[[table]]
name = "orders"
source = "orders"
version = 2
columns = { id = "int", amount = "float", note = "str?" }
[[job]]
name = "revenue"
outputs = ["revenue/date={date:date}"]
inputs = ["orders/date={date}"]
command = ["x"]
"#;

    #[test]
    fn every_invalid_case_names_file_job_and_problem() {
        let job = |body: &str| {
            format!("[graph]\nname = \"g\"\n[[dataset]]\nname = \"raw\"\npattern = \"raw/{{d:date}}\"\n[[job]]\nname = \"j\"\n{body}")
        };
        let cases = [
            (job("outputs = [\"o/{d:date}\"]\ninputs = [\"raw/{day}\"]\ncommand = [\"x\"]"), "job `j`: input template `raw/{day}` uses field `day`, which output `o/{d:date}` lacks"),
            (job("outputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\ntimeout = \"ten minutes\""), "job `j`: `timeout = \"ten minutes\"` is not a duration"),
            (job("outputs = [\"o/{d:date}\"]"), "job `j`: `command` is missing"),
            (job("command = [\"x\"]"), "job `j`: `outputs` is missing"),
            (job("outputs = [\"raw/{x}\"]\ncommand = [\"x\"]"), "dataset `raw` (`raw/{d:date}`) and job `j` (`raw/{x}`) can match the same ref"),
            (job("outputs = [\"o/{d:date}\"]\ninputs = [\"elsewhere/{d}\"]\ncommand = [\"x\"]"), "matches no job output and no dataset"),
            (job("outputs = [\"o/{d:date}\"]\ninputs = [\"raw/{d}\"]\nconfig = [\"c\"]\ncommand = [\"x\"]"), "not both"),
            (job("outputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\nbatch = 0"), "`batch` must be at least 1"),
            (job("outputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\nenv = { DATABUILD_OUTPUTS = \"x\" }"), "are set by DataBuild itself"),
            (job("outputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\nenv = { \"A=B\" = \"x\" }"), "`env` has the name `A=B`, which no environment variable can have"),
            (job("outputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\nenv = { \"\" = \"x\" }"), "`env` has the name ``"),
            (job("outputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\ncolour = 1"), "unknown field `colour`"),
            (job("outputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\ncode = [\"jobs/{a\"]"), "job `j`: `code` glob `jobs/{a` is not a glob"),
            (job("outputs = [\"o/{d:date}\"]\ncommand = [\"x\"]\ncode = [\"../lib/*.py\"]"), "job `j`: `code` glob `../lib/*.py` leaves the graph file's folder"),
            (job("outputs = [\"o/{d:date}\", \"o/{e}\"]\ncommand = [\"x\"]"), "job `j`: its outputs `o/{d:date}` and `o/{e}` can match the same ref"),
            ("[graph]\nname = \"g\"\n[[job]]\nname = \"a\"\noutputs = [\"x/{n:int}\"]\ncommand = [\"x\"]\n[[job]]\nname = \"b\"\noutputs = [\"x/{s}\"]\ncommand = [\"x\"]\n".to_string(), "job `a` (`x/{n:int}`) and job `b` (`x/{s}`)"),
            ("[graph]\nname = \"g\"\n[[job]]\nname = \"a\"\noutputs = [\"x/{n:int}\"]\ncommand = [\"x\"]\n[[job]]\nname = \"a\"\noutputs = [\"y/{s}\"]\ncommand = [\"x\"]\n".to_string(), "already used"),
            ("[graph]\nname = \"g\"\n[graph.domains]\nc = [\"a/b\"]\n".to_string(), "graph.domains.c"),
            ("[graph\nname = \"g\"".to_string(), "databuild.toml: "),
            ("".to_string(), "missing field `graph`"),
        ];
        for (text, needle) in cases {
            let err = load_err(&text);
            assert!(err.starts_with("databuild.toml: "), "{err}");
            assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
        }
    }

    #[test]
    fn sources_and_tables_become_datasets_jobs_and_an_alias() {
        let g = load(ORDERS).unwrap();
        assert_eq!(g.sources[0].retention_days, 7);
        let t = g.table("orders").unwrap();
        assert_eq!(
            t.versions.iter().map(|v| v.version).collect::<Vec<_>>(),
            [1, 2]
        );
        let (p, _) = g.producer_of("orders/v2/date=2026-01-01").unwrap();
        assert_eq!(g.producer_name(p), "orders.v2");
        let (p, _) = g.producer_of("orders/v2/errors/date=2026-01-01").unwrap();
        assert_eq!(g.producer_name(p), "orders.v2");
        assert_eq!(
            g.producer_of("orders/date=2026-01-01").unwrap().0,
            Producer::Alias(0)
        );
        let (p, _) = g.producer_of("source/orders/date=2026-01-01").unwrap();
        assert_eq!(p, Producer::Dataset(0));
        let Deps::Static(t) = &g.job("revenue").unwrap().deps else {
            panic!("static")
        };
        assert_eq!(t[0].reads, [Producer::Alias(0)]);
    }

    #[test]
    fn bad_sources_and_tables_name_the_problem() {
        let base = "[graph]\nname = \"g\"\n[[source]]\nname = \"s\"\nkind = \"webhook\"\nretention = \"7d\"\n";
        let table = |body: &str| {
            format!("{base}[[table]]\nname = \"t\"\nsource = \"s\"\nversion = 1\n{body}")
        };
        let cases = [
            ("[graph]\nname = \"g\"\n[[source]]\nname = \"s\"\nkind = \"ftp\"\nretention = \"7d\"\n".to_string(), "source `s`: `kind = \"ftp\"` is not a source kind"),
            ("[graph]\nname = \"g\"\n[[source]]\nname = \"s\"\nkind = \"webhook\"\nretention = \"soon\"\n".to_string(), "source `s`: `retention = \"soon\"` is not a duration"),
            ("[graph]\nname = \"g\"\n[[source]]\nname = \"s\"\nkind = \"webhook\"\nretention = \"7d\"\nbody_format = \"xml\"\n".to_string(), "`body_format = \"xml\"` is unknown"),
            (format!("{base}[[table]]\nname = \"t\"\nsource = \"nope\"\nversion = 1\ncolumns = {{ a = \"int\" }}\n"), "table `t` v1: `source = \"nope\"` names no [[source]]"),
            (table("columns = { a = \"integer\" }"), "column `a` has type `integer`"),
            (table("columns = { a = \"int\" }\ndefaults = { b = 1 }"), "`defaults` names `b`, which is not a column"),
            (table("columns = { a = \"int\" }\ndefaults = { a = \"x\" }"), "the default of `a` is not a int"),
            (table("columns = {}"), "`columns` is empty"),
            (format!("{}\n[[table]]\nname = \"t\"\nsource = \"s\"\nversion = 1\ncolumns = {{ a = \"int\" }}\n", table("columns = { a = \"int\" }")), "this version is declared twice"),
            (format!("{base}[[job]]\nname = \"j\"\noutputs = [\"source/x/{{d}}\"]\ncommand = [\"x\"]\n"), "belongs to [[source]] sections"),
            (format!("{base}secret_env = \"K\"\nsignature = \"gitlab\"\n"), "source `s`: `signature = \"gitlab\"` is not a signature scheme; use \"databuild\" (the default), \"github\", \"stripe\", \"slack\", or a table"),
            (format!("{base}signature = \"github\"\n"), "`signature` is set but `secret_env` is not"),
            (format!("{base}secret_env = \"K\"\nsignature = {{ prefix = \"x=\" }}\n"), "`signature = { ... }` needs `header`"),
            (format!("{base}secret_env = \"K\"\nsignature = {{ header = \"X-S\", algorithm = \"md5\" }}\n"), "`signature.algorithm = \"md5\"` is not supported; use \"sha256\" or \"sha1\""),
            (format!("{base}secret_env = \"K\"\nsignature = {{ header = \"X-S\", encoding = \"b32\" }}\n"), "`signature.encoding = \"b32\"` is not supported"),
            (format!("{base}secret_env = \"K\"\nsignature = {{ header = \"X-S\", hash = \"sha1\" }}\n"), "its keys are header, prefix, algorithm and encoding"),
            (format!("{base}secret_env = \"K\"\nsignature = \"stripe\"\nsignature_tolerance = \"soon\"\n"), "`signature_tolerance = \"soon\"` is not a duration"),
            (format!("{base}idempotency = {{ window = \"1h\" }}\n"), "`idempotency` needs exactly one of `header`"),
            (format!("{base}idempotency = {{ header = \"K\", field = \"id\" }}\n"), "`idempotency` needs exactly one of `header`"),
            (format!("{base}idempotency = {{ field = \"id\", window = \"a while\" }}\n"), "`idempotency.window = \"a while\"` is not a duration"),
            ("[graph]\nname = \"g\"\n[[source]]\nname = \"s\"\nkind = \"directory\"\nretention = \"7d\"\nidempotency = { field = \"id\" }\n".to_string(), "`idempotency` is for webhook sources"),
            (format!("{base}include_headers = [\"X Request\"]\n"), "`include_headers` names `X Request`, which is not an HTTP header name"),
        ];
        for (text, needle) in cases {
            let err = load_err(&text);
            assert!(err.contains(needle), "expected {needle:?} in:\n{err}");
        }
    }

    #[test]
    fn a_check_of_nothing_or_a_duplicate_name_is_refused() {
        let with = |check: &str| load_err(&format!("{PODCAST}\n{check}"));
        assert_eq!(
            with("[[check]]\nname = \"c\"\napplies_to = \"nope\"\ncommand = [\"true\"]\n"),
            "databuild.toml: check `c`: `applies_to = \"nope\"` is neither a job nor a job's output pattern (jobs: extract_reviews, summary)"
        );
        assert!(with(
            "[[check]]\nname = \"c\"\napplies_to = \"raw_reviews\"\ncommand = [\"true\"]\n"
        )
        .contains("names an external dataset"));
        assert_eq!(
            with("[[check]]\nname = \"c\"\napplies_to = \"summary\"\ncommand = [\"true\"]\n[[check]]\nname = \"c\"\napplies_to = \"summary\"\ncommand = [\"true\"]\n"),
            "databuild.toml: check `c`: the name is already used by a check"
        );
        assert!(with("[[check]]\nname = \"c\"\napplies_to = \"summary\"\n")
            .contains("`command` is missing or empty"));
        assert!(with("[[check]]\nname = \"c\"\napplies_to = \"summary\"\ncommand = [\"true\"]\ntimeout = \"soon\"\n")
            .contains("is not a duration"));
    }

    #[test]
    fn a_metric_check_has_no_command_and_a_sound_rule() {
        let check = |body: &str| {
            format!("{PODCAST}\n[[check]]\nname = \"c\"\napplies_to = \"summary\"\n{body}\n")
        };
        let g = Graph::parse(&check("metric = \"rows\""), "databuild.toml").unwrap();
        let c = g.check("c").unwrap();
        assert!(c.command.is_empty());
        assert_eq!(
            c.metric,
            Some(MetricRule {
                metric: "rows".into(),
                window: 14,
                k: 3.0
            })
        );
        let g = Graph::parse(
            &check("metric = \"max_rss_bytes\"\nwindow = 30\nk = 4.5"),
            "databuild.toml",
        )
        .unwrap();
        assert_eq!(g.check("c").unwrap().metric.as_ref().unwrap().window, 30);
        let refused = [
            (
                "metric = \"rows\"\ncommand = [\"true\"]",
                "has both `command` and `metric`",
            ),
            (
                "command = [\"true\"]\nwindow = 7",
                "`window` and `k` belong to a metric check",
            ),
            ("metric = \"row count\"", "is not a metric's name"),
            ("metric = \"rows\"\nwindow = 2", "`window = 2` is too small"),
            (
                "metric = \"rows\"\nk = -1.0",
                "`k = -1` must be a positive number",
            ),
            ("window = 7", "or name a metric to judge"),
            ("metric = \"queue_wait_ms\"", "is the scheduler's wait"),
        ];
        for (body, says) in refused {
            let e = load_err(&check(body));
            assert!(e.contains(says), "{body}: {e}");
        }
    }
}
