//! [`Api`]: the answers of the service as one interface, with two implementations: [`InProcess`]
//! (the engine of this process, through [`crate::engine_api`]) and [`Http`] (a running
//! `databuild serve`, its answers deserialized into the same types). The CLI holds one or the
//! other, so `databuild X` and `databuild --server URL X` agree by type.

use std::io::{BufRead, BufReader};

use axum::http::StatusCode;
use databuild_exec::answers::{
    route, Analysis, AnalyzeView, BuildAccepted, BuildDetail, BuildList, BuildPartitionPage,
    BuildProgress, BuildSummary, Cancelled, DatasetList, ErrorBody, EventList, EventPage, Explain,
    JobDetail, JobList, JobRun, LogChunk, PartitionStatus, Sealed, SourceList, Want, WantDetail,
    WantList,
};
use databuild_exec::answers::{
    EnvironmentChange, EnvironmentDiff, EnvironmentList, EnvironmentView, Promotion, SourceDetail,
};
use databuild_exec::engine::gc::GcReport;
use databuild_exec::engine::lineage::{Direction, InstanceDiff, Lineage, TaintImpact};
use databuild_exec::engine::listing::{ListedStatus, PartitionPage};
use databuild_exec::Engine;
use databuild_log::{EventFilter, PartitionQuery, SqlResult};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::engine_api::{self, ApiResult};
use crate::error::AppError;

pub use crate::engine_api::WantTerms;

/// Everything a command asks of the service (or of the engine it runs on).
pub trait Api {
    fn status(&self, r: &str) -> ApiResult<PartitionStatus>;
    fn explain(&self, r: &str) -> ApiResult<Explain>;
    /// When `r` is expected live, and why (contract section 8).
    fn forecast(&self, r: &str) -> ApiResult<databuild_exec::answers::Forecast>;
    fn taint(&self, refs: &[String], reason: Option<&str>) -> ApiResult<EventList>;
    /// What `taint` of `refs` would make stale; nothing is written.
    fn taint_impact(&self, refs: &[String]) -> ApiResult<TaintImpact>;
    /// Runs every check of `refs`' current instances now and records the results.
    fn check(&self, refs: &[String]) -> ApiResult<databuild_exec::answers::CheckAnswer>;
    /// `status` is the name the user gave (`live`, `stale`...), `listed` its meaning.
    fn partitions(
        &self,
        q: &PartitionQuery,
        listed: Option<ListedStatus>,
        status: Option<&str>,
    ) -> ApiResult<PartitionPage>;
    /// `all`: analyses along with builds.
    fn builds(&self, all: bool, limit: usize) -> ApiResult<BuildList>;
    fn build(&self, id: &str) -> ApiResult<BuildDetail>;
    /// A page of a build's partitions, in ref order, after `after`.
    fn build_partitions(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ApiResult<BuildPartitionPage>;
    /// What a build did, every list whole.
    fn build_summary(&self, id: &str) -> ApiResult<BuildSummary>;
    fn progress(&self, id: &str) -> ApiResult<BuildProgress>;
    fn cancel(&self, id: &str) -> ApiResult<Cancelled>;
    fn events(&self, f: &EventFilter) -> ApiResult<EventPage>;
    /// `exact`: split every job output's available partitions by freshness, however many.
    fn datasets(&self, exact: bool) -> ApiResult<DatasetList>;
    fn jobs(&self) -> ApiResult<JobList>;
    fn job(&self, name: &str) -> ApiResult<JobDetail>;
    /// One metric over a job's partitions (`pattern`: the job or an output pattern), in key
    /// order after the ref `after`.
    fn metric_series(
        &self,
        pattern: &str,
        metric: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ApiResult<databuild_exec::answers::MetricSeries>;
    fn run(&self, id: &str) -> ApiResult<JobRun>;
    /// The tail of a run's log.
    fn run_log(&self, id: &str) -> ApiResult<String>;
    /// A run's log from byte `offset` on (a MiB at most).
    fn run_log_chunk(&self, id: &str, offset: u64) -> ApiResult<LogChunk>;
    fn sql(&self, query: &str, max_rows: usize) -> ApiResult<SqlResult>;
    fn sources(&self) -> ApiResult<SourceList>;
    fn source(&self, name: &str) -> ApiResult<SourceDetail>;
    fn seal(&self, name: Option<&str>, through: Option<&str>) -> ApiResult<Sealed>;
    fn want(&self, refs: &[String], terms: WantTerms<'_>) -> ApiResult<Want>;
    fn wants(&self, status: Option<&str>, all: bool, limit: usize) -> ApiResult<WantList>;
    fn unwant(&self, id: &str) -> ApiResult<Want>;
    /// One want, with how its partitions were made and what the others wait for.
    fn want_detail(&self, id: &str) -> ApiResult<WantDetail>;
    /// Housekeeping: what nothing reads any more, older than `older_than` (`30d`).
    fn gc(&self, older_than: &str, dry_run: bool) -> ApiResult<GcReport>;
    fn lineage(
        &self,
        r: &str,
        direction: Direction,
        depth: u32,
        instance: Option<&str>,
    ) -> ApiResult<Lineage>;
    fn diff(&self, r: &str, instance: Option<&str>, since: Option<&str>)
        -> ApiResult<InstanceDiff>;
    /// Every environment, prod first.
    fn environments(&self) -> ApiResult<EnvironmentList>;
    fn create_environment(&self, name: &str, from: Option<&str>) -> ApiResult<EnvironmentView>;
    /// Drops `name`; answers the environments left.
    fn drop_environment(&self, name: &str) -> ApiResult<EnvironmentList>;
    /// What `name` has that `other` does not (at most `limit` partitions listed; 0: all).
    fn environment_diff(&self, name: &str, other: &str, limit: usize)
        -> ApiResult<EnvironmentDiff>;
    fn promote_environment(&self, name: &str, to: &str) -> ApiResult<EnvironmentChange>;
    fn rollback_environment(&self, env: &str) -> ApiResult<EnvironmentChange>;
}

/// The engine of this process.
pub struct InProcess {
    pub engine: Box<Engine>,
    /// The cap on refs one request names, braces expanded (`DATABUILD_MAX_REFS`).
    pub max_refs: usize,
}

impl Api for InProcess {
    fn status(&self, r: &str) -> ApiResult<PartitionStatus> {
        engine_api::status(&self.engine, r)
    }
    fn explain(&self, r: &str) -> ApiResult<Explain> {
        engine_api::explain(&self.engine, r)
    }
    fn forecast(&self, r: &str) -> ApiResult<databuild_exec::answers::Forecast> {
        engine_api::forecast(&self.engine, r)
    }
    fn taint(&self, refs: &[String], reason: Option<&str>) -> ApiResult<EventList> {
        engine_api::taint(&self.engine, refs, reason, self.max_refs)
    }
    fn taint_impact(&self, refs: &[String]) -> ApiResult<TaintImpact> {
        engine_api::taint_impact(&self.engine, refs, self.max_refs)
    }
    fn check(&self, refs: &[String]) -> ApiResult<databuild_exec::answers::CheckAnswer> {
        engine_api::check(&self.engine, refs, self.max_refs)
    }
    fn gc(&self, older_than: &str, dry_run: bool) -> ApiResult<GcReport> {
        engine_api::gc(&self.engine, older_than, dry_run)
    }
    fn environments(&self) -> ApiResult<EnvironmentList> {
        engine_api::environments(&self.engine)
    }
    fn create_environment(&self, name: &str, from: Option<&str>) -> ApiResult<EnvironmentView> {
        engine_api::create_environment(&self.engine, name, from)
    }
    fn drop_environment(&self, name: &str) -> ApiResult<EnvironmentList> {
        engine_api::drop_environment(&self.engine, name)
    }
    fn environment_diff(
        &self,
        name: &str,
        other: &str,
        limit: usize,
    ) -> ApiResult<EnvironmentDiff> {
        engine_api::environment_diff(&self.engine, name, other, limit)
    }
    fn promote_environment(&self, name: &str, to: &str) -> ApiResult<EnvironmentChange> {
        engine_api::promote_environment(&self.engine, name, to)
    }
    fn rollback_environment(&self, env: &str) -> ApiResult<EnvironmentChange> {
        engine_api::rollback_environment(&self.engine, env)
    }
    fn lineage(
        &self,
        r: &str,
        direction: Direction,
        depth: u32,
        instance: Option<&str>,
    ) -> ApiResult<Lineage> {
        engine_api::lineage(&self.engine, r, direction, depth, instance)
    }
    fn diff(
        &self,
        r: &str,
        instance: Option<&str>,
        since: Option<&str>,
    ) -> ApiResult<InstanceDiff> {
        engine_api::diff(&self.engine, r, instance, since)
    }
    fn partitions(
        &self,
        q: &PartitionQuery,
        listed: Option<ListedStatus>,
        _status: Option<&str>,
    ) -> ApiResult<PartitionPage> {
        engine_api::partitions(&self.engine, q, listed)
    }
    fn builds(&self, all: bool, limit: usize) -> ApiResult<BuildList> {
        engine_api::builds(&self.engine, None, all, limit)
    }
    fn build(&self, id: &str) -> ApiResult<BuildDetail> {
        engine_api::build(&self.engine, id)
    }
    fn build_partitions(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ApiResult<BuildPartitionPage> {
        engine_api::build_partitions(&self.engine, id, after, limit)
    }
    fn build_summary(&self, id: &str) -> ApiResult<BuildSummary> {
        engine_api::build_summary(&self.engine, id)
    }
    fn progress(&self, id: &str) -> ApiResult<BuildProgress> {
        engine_api::progress(&self.engine, id)
    }
    fn cancel(&self, id: &str) -> ApiResult<Cancelled> {
        engine_api::cancel(&self.engine, id)
    }
    fn events(&self, f: &EventFilter) -> ApiResult<EventPage> {
        engine_api::events(&self.engine, f)
    }
    fn datasets(&self, exact: bool) -> ApiResult<DatasetList> {
        engine_api::datasets(&self.engine, exact)
    }
    fn jobs(&self) -> ApiResult<JobList> {
        engine_api::jobs(&self.engine)
    }
    fn job(&self, name: &str) -> ApiResult<JobDetail> {
        engine_api::job(&self.engine, name)
    }
    fn metric_series(
        &self,
        pattern: &str,
        metric: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ApiResult<databuild_exec::answers::MetricSeries> {
        engine_api::metric_series(&self.engine, pattern, metric, after, limit)
    }
    fn run(&self, id: &str) -> ApiResult<JobRun> {
        engine_api::run(&self.engine, id)
    }
    fn run_log(&self, id: &str) -> ApiResult<String> {
        engine_api::run_log(&self.engine, id)
    }
    fn run_log_chunk(&self, id: &str, offset: u64) -> ApiResult<LogChunk> {
        engine_api::run_log_chunk(&self.engine, id, offset)
    }
    fn sql(&self, query: &str, max_rows: usize) -> ApiResult<SqlResult> {
        engine_api::sql(&self.engine, query, max_rows)
    }
    fn sources(&self) -> ApiResult<SourceList> {
        engine_api::sources(&self.engine)
    }
    fn source(&self, name: &str) -> ApiResult<SourceDetail> {
        engine_api::source(&self.engine, name)
    }
    fn seal(&self, name: Option<&str>, through: Option<&str>) -> ApiResult<Sealed> {
        engine_api::seal(&self.engine, name, through)
    }
    fn want(&self, refs: &[String], terms: WantTerms<'_>) -> ApiResult<Want> {
        engine_api::want(&self.engine, refs, terms, self.max_refs)
    }
    fn wants(&self, status: Option<&str>, all: bool, limit: usize) -> ApiResult<WantList> {
        engine_api::wants(&self.engine, status, all, limit)
    }
    fn unwant(&self, id: &str) -> ApiResult<Want> {
        engine_api::unwant(&self.engine, id)
    }
    fn want_detail(&self, id: &str) -> ApiResult<WantDetail> {
        engine_api::want_detail(&self.engine, id)
    }
}

impl InProcess {
    /// `analyze` in this process: the plan itself, printed without copying it, whole (its
    /// memory is the caller's own, so no page is needed).
    pub fn analyze_view<T>(
        &self,
        request: &databuild_core::PlanRequest,
        parallel: usize,
        f: impl FnOnce(&AnalyzeView<'_>, &databuild_core::Plan) -> T,
    ) -> Result<T, databuild_exec::EngineError> {
        let analysis = self.engine.analyze(request)?;
        let out = f(
            &AnalyzeView::priced(
                &self.engine,
                &analysis,
                parallel,
                databuild_exec::answers::AnalyzePage::WHOLE,
            )?,
            &analysis.plan,
        );
        // The process ends soon after: freeing a plan of millions of runs one allocation at a
        // time would take seconds for nothing.
        std::mem::forget(analysis);
        Ok(out)
    }
}

/// A running `databuild serve`, over HTTP.
#[derive(Clone)]
pub struct Http {
    base: String,
    agent: ureq::Agent,
    token: Option<String>,
    /// The environment every request is about (`X-DataBuild-Env`), unless prod.
    environment: Option<String>,
}

/// A query string from optional pairs.
fn query(pairs: &[(&str, Option<String>)]) -> String {
    let parts: Vec<String> = pairs
        .iter()
        .filter_map(|(k, v)| {
            v.as_ref()
                .map(|v| format!("{k}={}", databuild_core::refs::encode_segment(v)))
        })
        .collect();
    if parts.is_empty() {
        String::new()
    } else {
        format!("?{}", parts.join("&"))
    }
}

impl Http {
    /// `token` goes on every request as `Authorization: Bearer`, reads included (a service may
    /// guard them).
    pub fn new(base: &str, token: Option<String>) -> Http {
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .timeout_global(None)
            .build();
        Http {
            base: base.trim_end_matches('/').to_string(),
            agent: config.into(),
            token,
            environment: None,
        }
    }

    /// This client's requests in environment `name` (header `X-DataBuild-Env`).
    pub fn in_environment(mut self, name: &str) -> Http {
        self.environment = (name != databuild_log::environments::PROD).then(|| name.to_string());
        self
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn unreachable(&self, e: ureq::Error) -> AppError {
        AppError::new(
            StatusCode::BAD_GATEWAY,
            "unreachable",
            format!("cannot reach the databuild service at {}: {e}", self.base),
        )
    }

    fn authorized<B>(&self, request: ureq::RequestBuilder<B>) -> ureq::RequestBuilder<B> {
        let request = match &self.environment {
            Some(env) => request.header(crate::ENVIRONMENT_HEADER, env),
            None => request,
        };
        match &self.token {
            Some(t) => request.header("Authorization", &format!("Bearer {t}")),
            None => request,
        }
    }

    /// An answer's body, or the service's error with its status (4xx: the request's fault).
    fn finish(&self, mut response: ureq::http::Response<ureq::Body>) -> ApiResult<String> {
        let status = response.status();
        let body = response.body_mut().read_to_string().map_err(|e| {
            AppError::new(
                StatusCode::BAD_GATEWAY,
                "unreadable",
                format!("reading the service's answer: {e}"),
            )
        })?;
        if status.is_success() {
            return Ok(body);
        }
        let status = StatusCode::from_u16(status.as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
        Err(match serde_json::from_str::<ErrorBody>(&body) {
            Ok(e) => AppError::new(status, known_code(&e.code), e.error),
            Err(_) => AppError::new(status, "remote", format!("the service answered {status}")),
        })
    }

    fn parse<T: DeserializeOwned>(&self, body: &str) -> ApiResult<T> {
        serde_json::from_str(body).map_err(|e| {
            AppError::new(
                StatusCode::BAD_GATEWAY,
                "bad_answer",
                format!("the service at {} answered what this databuild cannot read ({e}); are both the same version?", self.base),
            )
        })
    }

    pub fn get_text(&self, path: &str) -> ApiResult<String> {
        let response = self
            .authorized(self.agent.get(&self.url(path)))
            .call()
            .map_err(|e| self.unreachable(e))?;
        self.finish(response)
    }

    pub fn get<T: DeserializeOwned>(&self, path: &str) -> ApiResult<T> {
        self.parse(&self.get_text(path)?)
    }

    pub fn post<T: DeserializeOwned>(&self, path: &str, body: &impl Serialize) -> ApiResult<T> {
        let response = self
            .authorized(self.agent.post(&self.url(path)))
            .send_json(body)
            .map_err(|e| self.unreachable(e))?;
        self.parse(&self.finish(response)?)
    }

    pub fn delete<T: DeserializeOwned>(&self, path: &str) -> ApiResult<T> {
        let response = self
            .authorized(self.agent.delete(&self.url(path)))
            .call()
            .map_err(|e| self.unreachable(e))?;
        self.parse(&self.finish(response)?)
    }

    /// Requests a build (`POST /api/v1/builds`).
    pub fn start_build(&self, body: &crate::api::BuildBody) -> ApiResult<BuildAccepted> {
        self.post(route::BUILDS, body)
    }

    /// The service's graph's domains (what `{field=*}` expands over).
    pub fn domains(&self) -> ApiResult<databuild_core::Domains> {
        #[derive(serde::Deserialize)]
        struct Graph {
            #[serde(default)]
            domains: databuild_core::Domains,
        }
        let graph: Graph = self.get(&format!("{}?format=json", route::GRAPH))?;
        Ok(graph.domains)
    }

    /// `POST /api/v1/analyze`: one page of the plan's runs.
    pub fn analyze(&self, body: &crate::api::AnalyzeBody) -> ApiResult<Analysis> {
        self.post(route::ANALYZE, body)
    }

    /// `POST /api/v1/analyze` page after page (each plans again, and is recorded as an
    /// analysis) until the answer lists `wanted` runs or the whole plan: the first page's
    /// answer with the later pages' runs appended.
    pub fn analyze_runs(
        &self,
        body: &crate::api::AnalyzeBody,
        wanted: usize,
    ) -> ApiResult<Analysis> {
        let page = |after: Option<usize>, have: usize| crate::api::AnalyzeBody {
            after,
            limit: Some(
                wanted
                    .saturating_sub(have)
                    .clamp(1, databuild_exec::answers::ANALYZE_PAGE_MAX),
            ),
            ..body.clone()
        };
        let mut answer = self.analyze_when_free(&page(None, 0))?;
        while let Some(after) = answer.next_after.filter(|_| answer.job_runs.len() < wanted) {
            let next = self.analyze_when_free(&page(Some(after), answer.job_runs.len()))?;
            answer.job_runs.extend(next.job_runs);
            answer.next_after = next.next_after;
        }
        Ok(answer)
    }

    /// [`Self::analyze`], waited for while the service is analyzing for others (429, its
    /// `Retry-After` of a second) for up to a minute: a page of a long listing is not lost to
    /// someone else's analysis.
    fn analyze_when_free(&self, body: &crate::api::AnalyzeBody) -> ApiResult<Analysis> {
        const TRIES: usize = 60;
        let mut tries = 1;
        loop {
            match self.analyze(body) {
                Err(e) if e.status == StatusCode::TOO_MANY_REQUESTS && tries < TRIES => {
                    tries += 1;
                    std::thread::sleep(std::time::Duration::from_secs(1));
                }
                answer => return answer,
            }
        }
    }

    /// `POST /api/v1/tables/{name}/promote`.
    pub fn promote(&self, table: &str, body: &crate::sources::PromoteBody) -> ApiResult<Promotion> {
        self.post(&route::fill(route::PROMOTE, table), body)
    }

    /// Reads a build's Server-Sent Events, calling `on_event` with each (the log's events, as
    /// the log holds them), until the stream ends.
    pub fn stream(
        &self,
        id: &str,
        mut on_event: impl FnMut(databuild_log::Event),
    ) -> ApiResult<()> {
        let path = route::fill(route::BUILD_EVENT_STREAM, id);
        let response = self
            .authorized(self.agent.get(&self.url(&path)))
            .call()
            .map_err(|e| self.unreachable(e))?;
        if !response.status().is_success() {
            self.finish(response)?;
            return Ok(());
        }
        let reader = BufReader::new(response.into_body().into_reader());
        for line in reader.lines() {
            let line = line.map_err(|e| {
                AppError::new(
                    StatusCode::BAD_GATEWAY,
                    "unreadable",
                    format!("reading the event stream: {e}"),
                )
            })?;
            if let Some(data) = line.strip_prefix("data:") {
                if let Ok(e) = serde_json::from_str(data.trim_start()) {
                    on_event(e);
                }
            }
        }
        Ok(())
    }
}

/// The codes the service answers with, as the `&'static str` an [`AppError`] holds; an unknown
/// one (a newer service) reads as `remote`.
fn known_code(code: &str) -> &'static str {
    const KNOWN: &[&str] = &[
        "bad_request",
        "bad_json",
        "bad_query",
        "bad_path",
        "bad_host",
        "not_found",
        "unauthorized",
        "unplannable",
        "sql_refused",
        "sql_too_large",
        "already_ended",
        "refused",
        "too_large",
        "too_many_refs",
        "too_many_requests",
        "busy",
        "cross_origin",
        "csrf",
        "storage",
        "misconfigured",
        "internal",
    ];
    KNOWN
        .iter()
        .find(|k| **k == code)
        .copied()
        .unwrap_or("remote")
}

impl Api for Http {
    fn status(&self, r: &str) -> ApiResult<PartitionStatus> {
        self.get(&route::fill(route::PARTITION_STATUS, r))
    }
    fn explain(&self, r: &str) -> ApiResult<Explain> {
        self.get(&route::fill(route::PARTITION_EXPLAIN, r))
    }
    fn forecast(&self, r: &str) -> ApiResult<databuild_exec::answers::Forecast> {
        self.get(&route::fill(route::PARTITION_FORECAST, r))
    }
    fn taint(&self, refs: &[String], reason: Option<&str>) -> ApiResult<EventList> {
        self.post(
            route::TAINT,
            &crate::api::TaintBody {
                partitions: refs.to_vec(),
                reason: reason.map(str::to_string),
            },
        )
    }
    fn diff(
        &self,
        r: &str,
        instance: Option<&str>,
        since: Option<&str>,
    ) -> ApiResult<InstanceDiff> {
        self.get(&format!(
            "{}{}",
            route::fill(route::PARTITION_DIFF, r),
            query(&[
                ("instance", instance.map(str::to_string)),
                ("since", since.map(str::to_string)),
            ])
        ))
    }
    fn check(&self, refs: &[String]) -> ApiResult<databuild_exec::answers::CheckAnswer> {
        self.post(
            route::CHECK,
            &crate::api::CheckBody {
                partitions: refs.to_vec(),
            },
        )
    }
    fn taint_impact(&self, refs: &[String]) -> ApiResult<TaintImpact> {
        self.post(
            route::TAINT_IMPACT,
            &crate::api::TaintBody {
                partitions: refs.to_vec(),
                reason: None,
            },
        )
    }
    fn lineage(
        &self,
        r: &str,
        direction: Direction,
        depth: u32,
        instance: Option<&str>,
    ) -> ApiResult<Lineage> {
        let direction = match direction {
            Direction::Upstream => "upstream",
            Direction::Downstream => "downstream",
        };
        self.get(&format!(
            "{}{}",
            route::fill(route::PARTITION_LINEAGE, r),
            query(&[
                ("direction", Some(direction.to_string())),
                ("depth", Some(depth.to_string())),
                ("instance", instance.map(str::to_string)),
            ])
        ))
    }
    fn environments(&self) -> ApiResult<EnvironmentList> {
        self.get(route::ENVIRONMENTS)
    }
    fn create_environment(&self, name: &str, from: Option<&str>) -> ApiResult<EnvironmentView> {
        self.post(
            route::ENVIRONMENTS,
            &crate::environments::CreateEnvironmentBody {
                name: name.to_string(),
                from: from.map(str::to_string),
            },
        )
    }
    fn drop_environment(&self, name: &str) -> ApiResult<EnvironmentList> {
        self.delete(&route::fill(route::ENVIRONMENT, name))
    }
    fn environment_diff(
        &self,
        name: &str,
        other: &str,
        limit: usize,
    ) -> ApiResult<EnvironmentDiff> {
        let q = query(&[
            ("other", Some(other.to_string())),
            ("limit", Some(limit.to_string())),
        ]);
        self.get(&format!(
            "{}{q}",
            route::fill(route::ENVIRONMENT_DIFF, name)
        ))
    }
    fn promote_environment(&self, name: &str, to: &str) -> ApiResult<EnvironmentChange> {
        self.post(
            &route::fill(route::ENVIRONMENT_PROMOTE, name),
            &crate::environments::PromoteEnvironmentBody { to: to.to_string() },
        )
    }
    fn rollback_environment(&self, env: &str) -> ApiResult<EnvironmentChange> {
        self.post(
            &route::fill(route::ENVIRONMENT_ROLLBACK, env),
            &serde_json::json!({}),
        )
    }
    fn gc(&self, older_than: &str, dry_run: bool) -> ApiResult<GcReport> {
        self.post(
            route::GC,
            &crate::api::GcBody {
                older_than: older_than.to_string(),
                dry_run,
            },
        )
    }
    fn partitions(
        &self,
        q: &PartitionQuery,
        _listed: Option<ListedStatus>,
        status: Option<&str>,
    ) -> ApiResult<PartitionPage> {
        self.get(&format!(
            "{}{}",
            route::PARTITIONS,
            query(&[
                ("pattern", q.pattern.clone()),
                ("status", status.map(str::to_string)),
                ("limit", Some(q.limit.to_string())),
                ("after", q.after.clone()),
            ])
        ))
    }
    fn builds(&self, all: bool, limit: usize) -> ApiResult<BuildList> {
        self.get(&format!("{}?limit={limit}&all={all}", route::BUILDS))
    }
    fn build(&self, id: &str) -> ApiResult<BuildDetail> {
        self.get(&route::fill(route::BUILD, id))
    }
    fn build_partitions(
        &self,
        id: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ApiResult<BuildPartitionPage> {
        self.get(&format!(
            "{}{}",
            route::fill(route::BUILD_PARTITIONS, id),
            query(&[
                ("limit", Some(limit.to_string())),
                ("after", after.map(str::to_string)),
            ])
        ))
    }
    fn build_summary(&self, id: &str) -> ApiResult<BuildSummary> {
        self.get(&route::fill(route::BUILD_SUMMARY, id))
    }
    fn progress(&self, id: &str) -> ApiResult<BuildProgress> {
        self.get(&route::fill(route::BUILD_PROGRESS, id))
    }
    fn cancel(&self, id: &str) -> ApiResult<Cancelled> {
        self.delete(&route::fill(route::BUILD, id))
    }
    fn events(&self, f: &EventFilter) -> ApiResult<EventPage> {
        self.get(&format!(
            "{}{}",
            route::EVENTS,
            query(&[
                ("since", f.since.map(|s| s.to_string())),
                ("limit", f.limit.map(|l| l.to_string())),
                ("build", f.build_request_id.clone()),
                ("partition", f.partition_ref.clone()),
                ("job", f.job.clone()),
                ("run", f.job_run_id.clone()),
                // Exact to the ns, so the bounds select what they select in-process.
                ("from", f.from.map(databuild_exec::answers::rfc3339_ns)),
                ("to", f.to.map(databuild_exec::answers::rfc3339_ns)),
            ])
        ))
    }
    fn datasets(&self, exact: bool) -> ApiResult<DatasetList> {
        self.get(&format!("{}?exact={exact}", route::DATASETS))
    }
    fn jobs(&self) -> ApiResult<JobList> {
        self.get(route::JOBS)
    }
    fn job(&self, name: &str) -> ApiResult<JobDetail> {
        self.get(&route::fill(route::JOB, name))
    }
    fn metric_series(
        &self,
        pattern: &str,
        metric: &str,
        after: Option<&str>,
        limit: usize,
    ) -> ApiResult<databuild_exec::answers::MetricSeries> {
        self.get(&format!(
            "{}{}",
            route::METRICS,
            query(&[
                ("pattern", Some(pattern.to_string())),
                ("metric", Some(metric.to_string())),
                ("after", after.map(str::to_string)),
                ("limit", Some(limit.to_string())),
            ])
        ))
    }
    fn run(&self, id: &str) -> ApiResult<JobRun> {
        self.get(&route::fill(route::RUN, id))
    }
    fn run_log(&self, id: &str) -> ApiResult<String> {
        self.get_text(&route::fill(route::RUN_LOG, id))
    }
    fn run_log_chunk(&self, id: &str, offset: u64) -> ApiResult<LogChunk> {
        self.get(&format!(
            "{}?offset={offset}",
            route::fill(route::RUN_LOG_CHUNK, id)
        ))
    }
    fn sql(&self, query: &str, max_rows: usize) -> ApiResult<SqlResult> {
        self.post(
            route::SQL,
            &crate::api::SqlBody {
                query: query.to_string(),
                max_rows: Some(max_rows),
            },
        )
    }
    fn sources(&self) -> ApiResult<SourceList> {
        self.get(route::SOURCES)
    }
    fn source(&self, name: &str) -> ApiResult<SourceDetail> {
        self.get(&route::fill(route::SOURCE, name))
    }
    fn seal(&self, name: Option<&str>, through: Option<&str>) -> ApiResult<Sealed> {
        let Some(name) = name else {
            return Err(AppError::bad_request(
                "name the source to seal on a service (the service seals all sources every minute)",
            ));
        };
        self.post(
            &route::fill(route::SEAL, name),
            &crate::sources::SealBody {
                through: through.map(str::to_string),
            },
        )
    }
    fn want(&self, refs: &[String], terms: WantTerms<'_>) -> ApiResult<Want> {
        self.post(
            route::WANTS,
            &crate::wants::WantBody {
                partitions: refs.to_vec(),
                ttl: terms.ttl.map(str::to_string),
                sla: terms.sla.map(str::to_string),
                by: terms.by.map(str::to_string),
            },
        )
    }
    fn wants(&self, status: Option<&str>, all: bool, limit: usize) -> ApiResult<WantList> {
        self.get(&format!(
            "{}{}",
            route::WANTS,
            query(&[
                ("status", status.map(str::to_string)),
                ("all", all.then(|| "true".to_string())),
                ("limit", Some(limit.to_string())),
            ])
        ))
    }
    fn unwant(&self, id: &str) -> ApiResult<Want> {
        self.delete(&route::fill(route::WANT, id))
    }
    fn want_detail(&self, id: &str) -> ApiResult<WantDetail> {
        self.get(&route::fill(route::WANT, id))
    }
}

#[cfg(test)]
mod tests {
    /// The HTTP client's time bounds select exactly what the in-process ones do.
    #[test]
    fn time_bounds_cross_the_wire_to_the_nanosecond() {
        for ns in [0, 1, 1_764_583_389_123_456_789, -1_500_000_001] {
            let text = databuild_exec::answers::rfc3339_ns(ns);
            assert_eq!(
                databuild_exec::answers::parse_rfc3339(&text),
                Some(ns),
                "{text}"
            );
        }
    }
}
