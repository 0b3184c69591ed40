//! The dashboard: server-rendered pages (maud), htmx for live parts, every asset embedded.
//! Every page reads the same views as the API; reading works without JavaScript.

use std::sync::Arc;

use axum::extract::{Form, Path, Query, State};
use axum::http::header;
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::{Extension, Router};
use databuild_core::{PartitionRef, PlanRequest};
use databuild_exec::answers::rfc3339;
use databuild_exec::answers::{self, span, BuildDetail, JobRun};
use databuild_exec::engine::lineage::{Direction, Lineage, LineageNode};
use databuild_exec::engine::listing::ListedStatus;
use databuild_exec::Engine;
use databuild_log::{Kind, PartitionQuery, SqlLimits, Status};
use maud::{html, Markup, PreEscaped, DOCTYPE};
use serde::Deserialize;
use serde_json::Value;

use crate::error::AppError;
use crate::grid;
use crate::guard::Role;
use crate::svg;
use crate::views;
use crate::AppState;

type Shared = State<Arc<AppState>>;

const HTMX: &str = include_str!("../assets/htmx.min.js");

const STYLE: &str = r#"
body { font: 14px/1.45 system-ui, sans-serif; margin: 0; color: #1f2933; background: #f7f9fb; }
header { background: #1f2933; padding: 8px 20px; display: flex; gap: 18px; align-items: center; }
header a { color: #e4e7eb; text-decoration: none; } header a.brand { font-weight: 700; color: #fff; }
main { padding: 16px 20px; max-width: 1200px; }
h1 { font-size: 20px; margin: 4px 0 12px; } h2 { font-size: 16px; margin: 18px 0 8px; }
table { border-collapse: collapse; background: #fff; width: 100%; margin-bottom: 8px; }
th, td { text-align: left; padding: 4px 8px; border-bottom: 1px solid #e4e7eb; vertical-align: top; }
th { background: #eef1f4; font-weight: 600; }
.badge { display: inline-block; padding: 1px 7px; border-radius: 9px; color: #fff; font-size: 12px; }
.muted { color: #7b8794; } .empty { color: #7b8794; font-style: italic; padding: 8px 0; }
.error { background: #fde8e8; border: 1px solid #d64545; padding: 10px; border-radius: 4px; }
form.inline { display: inline; } input[type=text], textarea { font: inherit; padding: 4px; }
textarea { width: 100%; } button { font: inherit; padding: 4px 12px; cursor: pointer; }
pre.log { background: #1f2933; color: #e4e7eb; padding: 10px; overflow: auto; max-height: 480px; }
.scroll { overflow: auto; background: #fff; border: 1px solid #e4e7eb; padding: 6px; }
code { font-size: 13px; }
button.copy { font-size: 11px; padding: 0 4px; margin-left: 3px; border: 1px solid #cbd2d9; background: #fff; border-radius: 3px; }
.id { white-space: nowrap; }
.legend .badge { margin-right: 4px; }
progress { width: 160px; }
h2.inline { display: inline-block; } summary { cursor: pointer; }
"#;

/// The copy buttons beside ids: the full id to the clipboard (where the browser allows it).
const COPY: &str = r#"
document.addEventListener('click', function (e) {
  var b = e.target.closest && e.target.closest('button.copy');
  if (!b) return;
  e.preventDefault();
  var done = function () { b.textContent = 'copied'; setTimeout(function () { b.textContent = 'copy'; }, 1200); };
  if (navigator.clipboard && window.isSecureContext) {
    navigator.clipboard.writeText(b.dataset.copy).then(done, function () {});
  } else {
    var t = document.createElement('textarea'); t.value = b.dataset.copy; document.body.appendChild(t);
    t.select(); try { document.execCommand('copy'); done(); } catch (_) {} t.remove();
  }
});
"#;

pub fn routes() -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(home))
        .route("/assets/htmx.min.js", get(htmx))
        .route("/builds", get(builds_page))
        .route("/graph", get(graph_page))
        .route("/datasets/{name}", get(dataset_page))
        .route("/builds/{id}", get(build_page))
        .route("/builds/{id}/live", get(build_live))
        .route("/partitions", get(partitions_page))
        .route("/partitions/{partition_ref}", get(partition_page))
        .route("/datasets", get(datasets_page))
        .route("/sources", get(sources_page))
        .route("/wants", get(wants_page))
        .route("/wants/{id}", get(want_page))
        .route("/taint", get(taint_preview))
        .route("/jobs", get(jobs_page))
        .route("/jobs/{name}", get(job_page))
        .route("/runs/{id}", get(run_page))
        .route("/runs/{id}/live", get(run_live))
        .route("/analyze", get(analyze_page))
        .route("/sql", get(sql_page))
        .route("/ui/build", post(ui_build))
        .route("/ui/taint", post(ui_taint))
        .route("/ui/cancel/{id}", post(ui_cancel))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
}

async fn htmx() -> impl IntoResponse {
    (
        [
            (header::CONTENT_TYPE, "text/javascript"),
            (header::CACHE_CONTROL, "max-age=3600"),
        ],
        HTMX,
    )
}

fn layout(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                link rel="icon" href="data:,";
                title { (title) " · DataBuild" }
                style { (PreEscaped(STYLE)) }
                script src="/assets/htmx.min.js" {}
            }
            body {
                header {
                    a.brand href="/" { "DataBuild" }
                    a href="/graph" { "Graph" }
                    a href="/builds" { "Builds" }
                    a href="/partitions" { "Partitions" }
                    a href="/datasets" { "Datasets" }
                    a href="/sources" { "Sources" }
                    a href="/wants" { "Wants" }
                    a href="/jobs" { "Jobs" }
                    a href="/analyze" { "Analyze" }
                    a href="/sql" { "SQL" }
                }
                main { (body) }
                script { (PreEscaped(COPY)) }
            }
        }
    }
}

/// A failure as a page, with the API's message.
fn error_page(e: AppError) -> Response {
    let status = e.status;
    let page = layout(
        "Error",
        html! { h1 { "Something is wrong" } p.error { (e.message) } },
    );
    (status, page).into_response()
}

async fn page<T: Send + 'static>(
    state: &Arc<AppState>,
    f: impl FnOnce(&Engine) -> Result<T, AppError> + Send + 'static,
) -> Result<T, Response> {
    let engine = state.engine.clone();
    tokio::task::spawn_blocking(move || f(&engine))
        .await
        .map_err(|e| error_page(e.into()))?
        .map_err(error_page)
}

fn s(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn badge(status: &str) -> Markup {
    html! { span.badge style={ "background:" (svg::colour(status)) } { (status) } }
}

fn took(run: &JobRun) -> String {
    run.duration_ms()
        .map_or_else(|| "-".into(), |ms| format!("{:.2} s", ms / 1e3))
}

/// An answer's optional time, or `-`.
fn at(t: &Option<String>) -> &str {
    t.as_deref().unwrap_or("-")
}

/// An optional text, or nothing.
fn or_empty(t: &Option<String>) -> &str {
    t.as_deref().unwrap_or_default()
}

/// An id's short form (its last characters: those differ between runs of a build).
fn short(id: &str) -> &str {
    databuild_log::short_id(id)
}

pub use databuild_core::refs::encode_segment as enc;

/// An id as pages show it: its short form (the last characters, which differ between ids minted
/// together), linked, the full id on hover and a button copying it.
fn id_link(path: &str, id: &str) -> Markup {
    html! {
        span.id { a href={ (path) (id) } title=(id) { code { (short(id)) } }
            button.copy type="button" data-copy=(id) title={ "copy " (id) } { "copy" } }
    }
}

fn build_link(id: &str) -> Markup {
    id_link("/builds/", id)
}

fn run_link(id: &str) -> Markup {
    id_link("/runs/", id)
}

fn partition_link(r: &str) -> Markup {
    html! { a href={ "/partitions/" (enc(r)) } { code { (r) } } }
}

/// What every state-changing form carries: the CSRF token, and a token field unless the
/// session already may write.
fn form_auth(state: &AppState, role: Role) -> Markup {
    html! {
        input type="hidden" name="csrf" value=(state.guard.csrf_token());
        @if state.guard.has_token() && role < Role::Writer { input type="password" name="token" placeholder="token" required; }
    }
}

async fn home(State(state): Shared, Extension(role): Extension<Role>) -> Response {
    let st = state.clone();
    let data = page(&state, |engine| {
        let builds = views::builds(engine, None, false, 10)?.builds;
        let failed = engine.partition_page(
            &PartitionQuery {
                status: Some(databuild_log::Status::Failed),
                limit: 10,
                ..Default::default()
            },
            None,
        )?;
        // Run counts come from a projection: a few rows, whatever the log's size.
        let jobs = engine.store.job_stats(None)?;
        Ok((builds, failed, jobs))
    })
    .await;
    let (builds, failed, jobs) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    layout("Home", html! {
        h1 { "Build graph " (st.engine.graph.name) }
        form method="get" action="/analyze" {
            textarea name="refs" rows="2" placeholder="partition refs, one per line; braces expand: reviews/date={2020-01-01..2020-01-07}" {}
            button type="submit" { "Analyze" }
            " "
            button type="submit" formaction="/ui/build" formmethod="post" { "Build" }
            " " label { input type="checkbox" name="force" value="true"; " force" }
            " " (form_auth(&st, role))
        }
        h2 { "Recent builds" }
        @if builds.is_empty() { p.empty { "No builds yet." } } @else {
            p { a href="/builds" { "All builds →" } }
            table { tr { th { "Build" } th { "Status" } th { "Requested" } th { "Created" } }
                @for b in &builds { tr {
                    td { (build_link(&b.build_request_id)) }
                    td { (badge(b.status.as_str())) }
                    td { @for r in b.requested_partitions.iter().take(3) { (partition_link(r)) " " }
                        @if b.requested_count > 3 { span.muted { "+" (b.requested_count - 3) " more" } } }
                    td.muted { (b.created_at) }
                } }
            }
        }
        h2 { "Recently failed partitions" }
        @if failed.partitions.is_empty() { p.empty { "No failed partitions." } } @else {
            table { tr { th { "Partition" } th { "Job" } th { "Updated" } }
                @for p in &failed.partitions { tr { td { (partition_link(&p.partition_ref)) } td { (p.job.clone().unwrap_or_default()) } td.muted { (p.updated_at) } } }
            }
        }
        h2 { "Jobs" }
        @if jobs.is_empty() { p.empty { "No job has run yet." } } @else {
            table { tr { th { "Job" } th { "Runs" } th { "Success" } th { "Last run" } }
                @for j in &jobs {
                    tr { td { a href={ "/jobs/" (j.job) } { (j.job) } } td { (j.runs) }
                         td { @if let Some(r) = j.success_rate { (format!("{:.0}%", 100.0 * r)) } @else { "-" } }
                         td.muted { (j.last_run_at.map(rfc3339).unwrap_or_default()) } }
                }
            }
        }
    }).into_response()
}

#[derive(Deserialize, Default)]
pub struct BuildsQuery {
    status: Option<String>,
    from: Option<String>,
    to: Option<String>,
    /// The cursor of the page: `created_at_ns.build_request_id` of the last build before it.
    after: Option<String>,
    limit: Option<usize>,
    all: Option<String>,
}

/// Why a builds page's filters cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum BuildsFilterError {
    #[error("unknown build status `{0}`; use received, planning, executing, completed, failed or cancelled")]
    Status(String),
    #[error("`{field}` = `{text}` is not a time: write 2026-12-01, 2026-12-01T10:00 or RFC 3339")]
    Time { field: &'static str, text: String },
    #[error("`after` = `{0}` is not a page cursor (follow the page's links)")]
    Cursor(String),
    #[error("`limit` = {0} is not between 1 and {max}", max = BUILDS_PAGE_MAX)]
    Limit(usize),
}

impl From<BuildsFilterError> for AppError {
    fn from(e: BuildsFilterError) -> Self {
        AppError::bad_request(e.to_string())
    }
}

/// Builds a page shows by default, and at most.
const BUILDS_PAGE: usize = 50;
const BUILDS_PAGE_MAX: usize = 500;

/// A time a user typed, as ns since the epoch: a date (its midnight, UTC), a `datetime-local`
/// value (UTC) or RFC 3339.
fn typed_time(field: &'static str, text: &str) -> Result<i64, BuildsFilterError> {
    use chrono::{NaiveDate, NaiveDateTime};
    let bad = || BuildsFilterError::Time {
        field,
        text: text.to_string(),
    };
    let at = if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        t.with_timezone(&chrono::Utc)
    } else if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M") {
        t.and_utc()
    } else if let Ok(t) = NaiveDateTime::parse_from_str(text, "%Y-%m-%dT%H:%M:%S") {
        t.and_utc()
    } else if let Ok(d) = NaiveDate::parse_from_str(text, "%Y-%m-%d") {
        d.and_hms_opt(0, 0, 0).ok_or_else(bad)?.and_utc()
    } else {
        return Err(bad());
    };
    at.timestamp_nanos_opt().ok_or_else(bad)
}

/// The store's query of a builds page's filters.
fn builds_query(q: &BuildsQuery) -> Result<databuild_log::BuildQuery, BuildsFilterError> {
    let given = |v: &Option<String>| v.clone().filter(|t| !t.trim().is_empty());
    let status = given(&q.status)
        .map(|t| {
            Status::parse(&t)
                .filter(|s| {
                    matches!(
                        s,
                        Status::Received
                            | Status::Planning
                            | Status::AnalysisCompleted
                            | Status::Executing
                            | Status::Completed
                            | Status::Failed
                            | Status::Cancelled
                    )
                })
                .ok_or(BuildsFilterError::Status(t))
        })
        .transpose()?;
    let limit = q.limit.unwrap_or(BUILDS_PAGE);
    if limit == 0 || limit > BUILDS_PAGE_MAX {
        return Err(BuildsFilterError::Limit(limit));
    }
    let after = given(&q.after)
        .map(|c| {
            c.split_once('.')
                .and_then(|(at, id)| Some((at.parse::<i64>().ok()?, id.to_string())))
                .ok_or(BuildsFilterError::Cursor(c.clone()))
        })
        .transpose()?;
    Ok(databuild_log::BuildQuery {
        status,
        analyses: q.all.is_some(),
        // One more than shown: whether a next page exists.
        limit: limit + 1,
        from: given(&q.from).map(|t| typed_time("from", &t)).transpose()?,
        to: given(&q.to).map(|t| typed_time("to", &t)).transpose()?,
        after,
        ..Default::default()
    })
}

/// Every build, newest first, by status and time range, a page at a time (keyset: a page costs
/// its rows however deep it is); with the durations of the page's builds as a chart.
async fn builds_page(State(state): Shared, Query(q): Query<BuildsQuery>) -> Response {
    let query = match builds_query(&q) {
        Ok(query) => query,
        Err(e) => return error_page(e.into()),
    };
    let limit = query.limit - 1;
    let mut rows = match page(&state, move |engine| {
        Ok(engine.store.build_requests(&query)?)
    })
    .await
    {
        Ok(r) => r,
        Err(r) => return r,
    };
    let more = rows.len() > limit;
    rows.truncate(limit);
    let builds: Vec<answers::Build> = rows.iter().map(answers::Build::from).collect();
    let next = more
        .then(|| {
            rows.last()
                .map(|b| format!("{}.{}", b.created_at, b.build_request_id))
        })
        .flatten();
    let ended = |b: &answers::Build| {
        matches!(
            b.status,
            Status::Completed | Status::Failed | Status::Cancelled
        )
    };
    let points: Vec<(String, f64, String)> = builds
        .iter()
        .rev()
        .filter(|b| ended(b))
        .map(|b| {
            (
                format!("build {}", short(&b.build_request_id)),
                (b.updated_at_ns - b.created_at_ns) as f64 / 1e6,
                b.status.to_string(),
            )
        })
        .collect();
    let value = |v: &Option<String>| v.clone().unwrap_or_default();
    let status = value(&q.status);
    let keep = |after: &str| {
        format!(
            "/builds?status={}&from={}&to={}&limit={limit}{}&after={}",
            enc(&status),
            enc(&value(&q.from)),
            enc(&value(&q.to)),
            if q.all.is_some() { "&all=true" } else { "" },
            enc(after)
        )
    };
    layout("Builds", html! {
        h1 { "Builds" }
        form #build-filters method="get" action="/builds" {
            select name="status" { option value="" { "any status" }
                @for st in ["executing", "completed", "failed", "cancelled", "planning", "received"] { option value=(st) selected[status == st] { (st) } } }
            " from " input type="datetime-local" name="from" value=(value(&q.from));
            " to " input type="datetime-local" name="to" value=(value(&q.to));
            " " label { input type="checkbox" name="all" value="true" checked[q.all.is_some()]; " analyses too" }
            " " button type="submit" { "Filter" }
            span.muted { " times in UTC" }
        }
        @if builds.is_empty() { p.empty { "No build matches." } } @else {
            @if !points.is_empty() {
                h2 { "Durations of this page's builds" }
                div.scroll { (PreEscaped(svg::duration_chart(&points, "builds"))) }
            }
            table #builds { tr { th { "Build" } th { "Status" } th { "Requested" } th { "Created" } th { "Took" } }
                @for b in &builds { tr data-build=(b.build_request_id) {
                    td { (build_link(&b.build_request_id)) }
                    td { (badge(b.status.as_str())) }
                    td { @for r in b.requested_partitions.iter().take(3) { (partition_link(r)) " " }
                        @if b.requested_count > 3 { span.muted { "+" (b.requested_count - 3) " more" } } }
                    td.muted { (b.created_at) }
                    td { @if ended(b) { (span((b.updated_at_ns - b.created_at_ns) as f64 / 1e9)) } @else { "-" } }
                } }
            }
            p { @if q.after.as_deref().is_some_and(|a| !a.is_empty()) { a href=(keep("")) { "← Newest" } " " }
                @if let Some(n) = &next { a #next-page href=(keep(n)) { "Next page →" } } }
        }
    }).into_response()
}

/// The graph of a build's runs: an edge where a run reads what another run of the build makes.
fn runs_graph(runs: &[JobRun]) -> String {
    let mut producer = std::collections::HashMap::new();
    for r in runs {
        for o in &r.outputs {
            producer.insert(o.as_str(), r.job_run_id.as_str());
        }
    }
    let nodes: Vec<svg::GraphNode> = runs
        .iter()
        .rev()
        .map(|r| svg::GraphNode {
            id: r.job_run_id.clone(),
            label: format!("{} {}", r.job, r.outputs.first().map_or("", String::as_str)),
            status: r.status.to_string(),
            href: format!("/runs/{}", r.job_run_id),
            depends_on: r
                .inputs
                .iter()
                .filter_map(|i| producer.get(i.as_str()).map(|p| p.to_string()))
                .collect(),
            ..Default::default()
        })
        .collect();
    svg::graph(&nodes)
}

/// A build's progress: done of planned per job, as bars, and the ETA with what it rests on.
fn progress_section(p: &answers::BuildProgress) -> Markup {
    html! {
        h2 { "Progress" }
        p #progress {
            (p.done) " of " (p.planned) " runs done · " (p.running) " running · " (p.failed) " failed · " (p.cancelled) " cancelled · " (p.unclaimed) " not claimed"
            @if let Some(rate) = p.rate_per_s { " · " (rate) " runs/s" }
            @if p.eta_s.is_some() {
                " · " strong { "ETA " (p.eta_text().unwrap_or_default()) }
                span.muted { " at --parallel " (p.parallel) ": the longer of the job time left over the slots (" (span(p.work_left_s))
                    " in all) and the longest chain of jobs left (" (span(p.critical_path_left_s)) ")"
                    @if p.runs_without_history > 0 { "; " (p.runs_without_history) " runs of jobs with no history count as 0 s" } }
            }
        }
        table #job-progress { tr { th { "Job" } th { "Done" } th { "" } th { "Running" } th { "Failed" } th { "Left" } th { "Median" } }
            @for j in &p.jobs { tr {
                td { (j.job) } td { (j.done) " / " (j.planned) }
                td { progress value=(j.done) max=(j.planned.max(1)) {} }
                td { (j.running) } td { (j.failed) } td { (j.left) }
                td.muted { @if let Some(s) = j.p50_s { (format!("{s:.2} s")) } @else { "no history" } }
            } }
        }
    }
}

/// Above this many runs, a build's page groups its runs by job and draws the run-level graph
/// only when asked.
const BIG_BUILD: usize = 50;
/// The most runs a build's page reads (the newest); counts and progress cover every run.
const RUNS_READ: usize = 2_000;
/// The most events a build's page lists (its newest).
const EVENTS_SHOWN: usize = 200;

/// What a build's page shows, read in bounded pieces: the newest runs and events, counts by job
/// and state and the progress from grouped reads.
struct BuildView {
    detail: BuildDetail,
    events: Vec<answers::Event>,
    delegations: Vec<answers::Event>,
    counts: databuild_log::BuildRunCounts,
    /// The run-level graph is drawn.
    graph: bool,
}

fn build_view(engine: &Engine, id: &str, graph: bool) -> Result<BuildView, AppError> {
    use databuild_log::{EventFilter, RunQuery};
    let id = views::build_id(engine, id)?;
    let build = engine
        .store
        .build_request(&id)?
        .ok_or_else(|| AppError::not_found(format!("no build request `{id}`")))?;
    let runs = engine.store.job_runs(&RunQuery {
        build_request_id: Some(id.clone()),
        limit: RUNS_READ,
        ..Default::default()
    })?;
    let runs: Vec<JobRun> = runs.iter().map(JobRun::from).collect();
    // The newest events: from the index of the build's 200th newest (an index walk of 200).
    let nth = engine.store.sql(
        &format!(
            "SELECT idx FROM events WHERE build_request_id = '{}' ORDER BY idx DESC LIMIT 1 OFFSET {}",
            id.replace('\'', "''"),
            EVENTS_SHOWN - 1
        ),
        SqlLimits::internal(),
    )?;
    let since = nth.rows.first().and_then(|r| r[0].as_i64()).map(|i| i - 1);
    let events = engine.store.events(&EventFilter {
        build_request_id: Some(id.clone()),
        since,
        ..Default::default()
    })?;
    let delegations = engine.store.events(&EventFilter {
        build_request_id: Some(id.clone()),
        kind: Some(Kind::Delegation),
        limit: Some(100),
        ..Default::default()
    })?;
    let counts = engine.store.build_run_counts(&id)?;
    let runs_total = counts.by_status.iter().map(|c| c.n).sum();
    let detail = BuildDetail::new(
        &build,
        engine
            .store
            .request_partitions_page(&id, None, answers::DETAIL_ROWS + 1)?,
        (runs, runs_total),
        None,
        engine.progress_of(&build)?,
    );
    Ok(BuildView {
        detail,
        events: answers::events(&events),
        delegations: answers::events(&delegations),
        counts,
        graph,
    })
}

/// The runs of a build as a timeline: a lane per slot, from each run's start to its end (now,
/// while it runs).
fn runs_timeline(runs: &[JobRun]) -> String {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i64);
    let spans: Vec<svg::Span> = runs
        .iter()
        .filter_map(|r| {
            let start = r.started_at_ns?;
            Some(svg::Span {
                label: format!(
                    "{} run {} {}",
                    r.job,
                    short(&r.job_run_id),
                    r.outputs.first().map_or("", String::as_str)
                ),
                href: format!("/runs/{}", r.job_run_id),
                status: r.status.to_string(),
                start,
                end: r.ended_at_ns.unwrap_or(now),
            })
        })
        .collect();
    svg::timeline(&spans)
}

/// A big build's runs by job: how many are in each state.
fn runs_by_job(
    counts: &databuild_log::BuildRunCounts,
    p: Option<&answers::BuildProgress>,
) -> Markup {
    let mut jobs: std::collections::BTreeMap<&str, std::collections::BTreeMap<&str, u64>> =
        Default::default();
    for c in &counts.by_status {
        *jobs
            .entry(&c.job)
            .or_default()
            .entry(c.status.as_str())
            .or_default() += c.n;
    }
    let states = [
        "completed",
        "running",
        "scheduled",
        "failed",
        "cancelled",
        "skipped",
    ];
    html! {
        table #runs-by-job { tr { th { "Job" } @for s in states { th { (s) } } th { "Done of planned" } }
            @for (job, by) in &jobs { tr data-job=(job) {
                td { a href={ "/jobs/" (enc(job)) } { (job) } }
                @for s in states { td { @if let Some(n) = by.get(s) { (thousands(*n)) } @else { span.muted { "0" } } } }
                td { @if let Some(j) = p.and_then(|p| p.jobs.iter().find(|j| j.job == *job)) {
                    progress value=(j.done) max=(j.planned.max(1)) {} " " (j.done) " / " (j.planned) } }
            } }
        }
    }
}

fn build_body(v: &BuildView, state: &AppState, role: Role) -> Markup {
    let b = &v.detail;
    let id = &b.build_request_id;
    let status = b.status.as_str();
    let finished = matches!(status, "completed" | "failed" | "cancelled") || b.analyze_only;
    let runs = &b.job_runs;
    let total: u64 = v.counts.by_status.iter().map(|c| c.n).sum();
    let big = total as usize > BIG_BUILD;
    let events = &v.events;
    html! {
        div #live data-finished=(finished) data-graph=(v.graph) {
            p { "Status " span #build-status { (badge(status)) } " · created " (b.created_at) " · updated " (b.updated_at)
                @if let Some(m) = &b.message { " · " span.muted { (m) } } }
            @if !finished {
                form.inline method="post" action={ "/ui/cancel/" (id) } { (form_auth(state, role)) button type="submit" { "Cancel build" } }
            }
            @if let Some(progress) = &b.progress { (progress_section(progress)) }
            h2 { "Job runs" }
            @if runs.is_empty() { p.empty { "No job runs (yet)." } } @else {
                @if big {
                    p.muted { (thousands(total)) " runs, grouped by job." }
                    (runs_by_job(&v.counts, b.progress.as_ref()))
                }
                @let timeline = runs_timeline(runs);
                @if !timeline.is_empty() {
                    h2 { "Timeline" }
                    p.muted { "Each run from its start to its end, one lane per slot" @if runs.len() < total as usize { " (the newest " (runs.len()) " runs)" } "." }
                    div.scroll { (PreEscaped(timeline)) }
                }
                @if !big || v.graph {
                    h2 { "Graph of runs" }
                    @if runs.len() > 300 { p.muted { "The newest 300 runs." } }
                    div.scroll { (PreEscaped(runs_graph(&runs[..runs.len().min(300)]))) }
                } @else {
                    p { a #show-graph href={ "/builds/" (id) "?graph=runs" } { "Show the graph of runs" } }
                }
                @let listed: Vec<&JobRun> = if big {
                    runs.iter().filter(|r| r.status != Status::Completed).take(BIG_BUILD).collect()
                } else { runs.iter().collect() };
                @if big { h2 { "Runs not completed" @if listed.len() == BIG_BUILD { span.muted { " (the newest " (BIG_BUILD) ")" } } }
                    @if listed.is_empty() { p.empty { "None: every run read completed." } } }
                @if !listed.is_empty() {
                    table #runs { tr { th { "Run" } th { "Job" } th { "Status" } th { "Outputs" } th { "Took" } }
                        @for r in listed.iter().rev() { tr {
                            td { (run_link(&r.job_run_id)) }
                            td { (r.job) } td { (badge(r.status.as_str())) }
                            td { @for o in r.outputs.iter().take(3) { (partition_link(o)) " " } }
                            td { (took(r)) }
                        } }
                    }
                }
            }
            details open[!big] {
                summary { h2.inline { "Partitions (" (b.partitions.len()) @if b.partitions_next.is_some() { "+" } ")" } }
                @if b.partitions.len() > 500 || b.partitions_next.is_some() { p.muted { "The first 500 in ref order; every one: "
                    code { "databuild builds " (short(&b.build_request_id)) " --partitions" } " or "
                    a href=(answers::route::fill(answers::route::BUILD_PARTITIONS, &b.build_request_id)) { "the API" } "." } }
                table { tr { th { "Partition" } th { "In this build" } }
                    @for p in b.partitions.iter().take(500) { tr { td { (partition_link(&p.partition_ref)) } td { (badge(p.status.as_str())) } } }
                }
            }
            @if !v.delegations.is_empty() {
                h2 { "Delegations" }
                ul { @for d in &v.delegations { li { (partition_link(or_empty(&d.partition_ref))) " is built by build "
                    (build_link(or_empty(&d.delegated_to))) } } }
            }
            details open[!big] {
                summary { h2.inline { "Events" @if events.len() >= EVENTS_SHOWN { span.muted { " (the newest " (EVENTS_SHOWN) ")" } } } }
                table #events { tr { th { "#" } th { "Kind" } th { "Status" } th { "Subject" } th { "Message" } }
                    @for e in events { tr { td { (e.idx) } td { (e.kind.as_str()) } td { (badge(e.status.as_str())) }
                        td { code { (or_empty(&e.partition_ref)) " " (or_empty(&e.job)) } } td.muted { (or_empty(&e.message)) } } }
                }
            }
        }
    }
}

#[derive(Deserialize, Default)]
pub struct BuildPageQuery {
    graph: Option<String>,
}

async fn build_page(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
    Query(q): Query<BuildPageQuery>,
) -> Response {
    let st = state.clone();
    let bid = id.clone();
    let graph = q.graph.is_some();
    match page(&state, move |engine| build_view(engine, &bid, graph)).await {
        Ok(v) => {
            let b = &v.detail;
            let id = b.build_request_id.clone();
            let live = format!(
                "/builds/{id}/live{}",
                if graph { "?graph=runs" } else { "" }
            );
            layout(&format!("Build {id}"), html! {
            h1 { "Build " code title=(b.build_request_id) { (short(&b.build_request_id)) } " " button.copy type="button" data-copy=(b.build_request_id) { "copy" } }
            p { "Requested: " @for r in b.requested_partitions.iter().take(50) { (partition_link(r)) " " }
                @if b.requested_count > 50 { span.muted { "+" (b.requested_count - 50) " more" } } }
            (build_body(&v, &st, role))
            // Live updates: the build's Server-Sent Events stream; each event re-renders the live
            // part of the page (at most every 300 ms), until the stream ends with the build.
            script { (PreEscaped(format!(r#"
(function () {{
  if (document.getElementById('live').dataset.finished === 'true' || !window.EventSource) return;
  var pending = false, source = new EventSource('/api/v1/builds/{id}/events/stream');
  function refresh() {{
    pending = false;
    htmx.ajax('GET', '{live}', {{ target: '#live', swap: 'outerHTML' }});
  }}
  source.addEventListener('event', function () {{ if (!pending) {{ pending = true; setTimeout(refresh, 300); }} }});
  source.onerror = function () {{ source.close(); refresh(); }};
}})();
"#))) }
        })
        .into_response()
        }
        Err(r) => r,
    }
}

async fn build_live(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
    Query(q): Query<BuildPageQuery>,
) -> Response {
    let st = state.clone();
    let graph = q.graph.is_some();
    match page(&state, move |engine| build_view(engine, &id, graph)).await {
        Ok(v) => build_body(&v, &st, role).into_response(),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
pub struct PartitionsQuery {
    pattern: Option<String>,
    status: Option<String>,
    after: Option<String>,
}

async fn partitions_page(State(state): Shared, Query(q): Query<PartitionsQuery>) -> Response {
    let status = q.status.clone().filter(|s| !s.is_empty());
    let pattern = q.pattern.clone().filter(|s| !s.is_empty());
    let listed = status.as_deref().and_then(ListedStatus::parse);
    let query = PartitionQuery {
        pattern: pattern.clone(),
        status: listed.map(ListedStatus::recorded),
        limit: 100,
        after: q.after.clone(),
    };
    let page_data = match page(&state, move |engine| {
        views::partitions(engine, &query, listed)
    })
    .await
    {
        Ok(p) => p,
        Err(r) => return r,
    };
    let rows = &page_data.partitions;
    layout("Partitions", html! {
        h1 { "Partitions" }
        form method="get" action="/partitions" {
            input type="text" name="pattern" placeholder="glob, e.g. reviews/*" value=[pattern.as_deref()];
            " " select name="status" { option value="" { "any status" }
                @for st in ["live", "stale", "building", "failed", "tainted"] { option value=(st) selected[status.as_deref() == Some(st)] { (st) } } }
            " " button type="submit" { "Search" }
        }
        @if rows.is_empty() { p.empty { "No partition matches. Partitions appear here once a run has touched them." } } @else {
            table { tr { th { "Partition" } th { "Status" } th { "Job" } th { "Updated" } }
                @for p in rows { tr { td { (partition_link(&p.partition_ref)) } td { (badge(&p.status))
                    @if let Some(why) = &p.reason { " " span.muted { (why) } } } td { (or_empty(&p.job)) } td.muted { (p.updated_at) } } }
            }
            @if rows.len() < 100 && page_data.next.is_some() { p.muted { "Freshness is checked for a bounded number of partitions per page; more may follow." } }
            @if let Some(next) = &page_data.next {
                a href={ "/partitions?after=" (enc(next)) "&pattern=" (enc(pattern.as_deref().unwrap_or(""))) "&status=" (status.as_deref().unwrap_or("")) } { "Next page →" }
            }
        }
    }).into_response()
}

#[derive(Deserialize)]
struct DatasetsPageQuery {
    /// Split every dataset's available partitions into live, stale and missing, however many.
    #[serde(default)]
    exact: bool,
}

async fn datasets_page(State(state): Shared, Query(q): Query<DatasetsPageQuery>) -> Response {
    let exact = q.exact;
    let data = page(&state, move |engine| {
        let datasets = engine.datasets(exact)?;
        let mut strips = Vec::new();
        for d in &datasets {
            strips.push(calendar_for(engine, &d.pattern)?);
        }
        // Pass rates of the latest check results, per job (a job's outputs are its dataset).
        let mut checks: std::collections::BTreeMap<String, (u64, u64)> = Default::default();
        for c in engine.store.check_counts()? {
            let e = checks.entry(c.job).or_default();
            e.0 += c.passed;
            e.1 += c.failed;
        }
        Ok((datasets, strips, checks))
    })
    .await;
    let (datasets, strips, checks) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    layout("Datasets", html! {
        h1 { "Datasets" }
        @if datasets.iter().any(|d| !d.freshness_checked) {
            p.muted { "A dataset with more than " (thousands(databuild_exec::engine::listing::FRESHNESS_SCAN as u64))
                " available partitions shows them as the log records them (available). "
                a href="/datasets?exact=true" { "Split every one into live, stale and missing" }
                " (this checks each partition's versions and data: seconds for a million)." }
        }
        table { tr { th { "Name" } th { "Kind" } th { "Pattern" } th { "Partitions" } th { "Checks passed" } th { "By date (last 60 days with data)" } }
            @for (d, strip) in datasets.iter().zip(&strips) { tr {
                td { a href={ "/datasets/" (enc(&d.name)) } { (d.name) } @if d.kind == "job" { " " a.muted href={ "/jobs/" (enc(&d.name)) } { "(job)" } } }
                td { (d.kind) } td { code { (d.pattern) } }
                td { @if d.partitions.is_empty() { span.muted { "none built" } } @for (st, n) in &d.partitions { (n) " " (badge(st)) " " } }
                td.checks { @match checks.get(&d.name).filter(|_| d.kind == "job") {
                    Some((passed, failed)) if passed + failed > 0 => {
                        (format!("{:.0}%", 100.0 * *passed as f64 / (passed + failed) as f64))
                        span.muted { " (" (passed) " of " (passed + failed) ")" }
                    }
                    _ => span.muted { "—" },
                } }
                td { (PreEscaped(strip.clone())) }
            } }
        }
    }).into_response()
}

/// A count with thousands separated, as people read it.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

/// The order a bar stacks states in.
const BAR_ORDER: [&str; 8] = [
    "live",
    "available",
    "stale",
    "missing",
    "building",
    "failed",
    "tainted",
    "removed",
];

/// Where a producer's dataset page is.
fn dataset_href(engine: &Engine, p: databuild_core::Producer) -> String {
    let name = enc(engine.graph.producer_name(p));
    match p {
        databuild_core::Producer::Job { output, .. } if output > 0 => {
            format!("/datasets/{name}?output={output}")
        }
        _ => format!("/datasets/{name}"),
    }
}

/// The graph: datasets, sources and jobs, each dataset with its partitions by state from the
/// count projections (a few rows each, whatever the number of partitions), jobs with their runs.
async fn graph_page(State(state): Shared) -> Response {
    use databuild_core::Producer;
    let data = page(&state, |engine| {
        let datasets = engine.datasets(false)?;
        let jobs = engine.store.job_stats(None)?;
        let recorded = engine.recorded_edges()?;
        let producers: Vec<Producer> = engine.graph.producers().collect();
        let mut nodes = Vec::new();
        let key = |p: Producer| format!("p{}", producers.iter().position(|q| *q == p).unwrap_or(0));
        let mut unchecked = false;
        for (p, d) in producers.iter().zip(&datasets) {
            let bar: Vec<(String, u64)> = BAR_ORDER
                .iter()
                .filter_map(|s| d.partitions.get(*s).map(|n| (s.to_string(), *n)))
                .collect();
            unchecked |= d.partitions.contains_key("available");
            let note = if bar.is_empty() {
                "no partition yet".to_string()
            } else {
                bar.iter()
                    .map(|(s, n)| format!("{} {s}", thousands(*n)))
                    .collect::<Vec<_>>()
                    .join(" · ")
            };
            let label = d.pattern.clone();
            let depends_on = match p {
                Producer::Job { job, .. } => vec![format!("j{job}")],
                _ => Vec::new(),
            };
            nodes.push(svg::GraphNode {
                id: key(*p),
                label,
                status: d.kind.clone(),
                href: dataset_href(engine, *p),
                depends_on,
                bar,
                note: Some(note),
            });
        }
        let mut reads: Vec<Vec<String>> = vec![Vec::new(); engine.graph.jobs.len()];
        for (p, j, _) in engine.graph.edges() {
            reads[j].push(key(p));
        }
        for &(p, j) in &recorded {
            reads[j].push(key(p));
        }
        for (j, job) in engine.graph.jobs.iter().enumerate() {
            let stats = jobs.iter().find(|s| s.job == job.name);
            let note = match stats {
                Some(s) if s.runs > 0 => format!(
                    "{} runs · {} failed{}",
                    thousands(s.runs),
                    thousands(s.failed),
                    s.p50_ms
                        .map_or(String::new(), |ms| format!(" · p50 {}", span(ms / 1e3)))
                ),
                _ => "never ran".to_string(),
            };
            let mut depends_on = std::mem::take(&mut reads[j]);
            depends_on.sort();
            depends_on.dedup();
            nodes.push(svg::GraphNode {
                id: format!("j{j}"),
                label: job.name.clone(),
                status: "job".into(),
                href: format!("/jobs/{}", enc(&job.name)),
                depends_on,
                bar: Vec::new(),
                note: Some(note),
            });
        }
        Ok((svg::graph_down(&nodes), unchecked, nodes.len()))
    })
    .await;
    let (picture, unchecked, n) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    layout("Graph", html! {
        h1 { "Graph " (state.engine.graph.name) }
        p.muted { (n) " nodes: datasets and sources (their partitions by state, from the count projections) and the jobs between them. Click a dataset for its partitions, a job for its runs." }
        p.legend { @for k in ["source", "dataset", "job", "alias"] { (badge(k)) } " · " @for st in BAR_ORDER { @if st != "removed" { (badge(st)) } } }
        @if unchecked { p.muted #unchecked { "available: recorded built; with more than " (thousands(databuild_exec::engine::listing::FRESHNESS_SCAN as u64)) " of them, a dataset's split into live, stale and missing is not derived here (" a href="/datasets?exact=true" { "count them exactly" } ", or " code { "databuild datasets --exact" } ")." } }
        div.scroll { (PreEscaped(picture)) }
    }).into_response()
}

#[derive(Deserialize, Default)]
pub struct DatasetQuery {
    output: Option<usize>,
    state: Option<String>,
    zoom: Option<String>,
    end: Option<String>,
    rows_after: Option<String>,
    cols_after: Option<String>,
}

/// One dataset: its counts, and its partitions as a health grid (a page of cells).
async fn dataset_page(
    State(state): Shared,
    Path(name): Path<String>,
    Query(q): Query<DatasetQuery>,
) -> Response {
    let given = |v: &Option<String>| v.clone().filter(|t| !t.is_empty());
    let query = (|| -> Result<grid::GridQuery, grid::GridError> {
        Ok(grid::GridQuery {
            state: given(&q.state),
            zoom: given(&q.zoom).map(|z| grid::Zoom::parse(&z)).transpose()?,
            end: given(&q.end).map(|e| grid::date(&e)).transpose()?,
            rows_after: given(&q.rows_after),
            cols_after: given(&q.cols_after),
        })
    })();
    let query = match query {
        Ok(query) => query,
        Err(e) => return error_page(e.into()),
    };
    let output = q.output.unwrap_or(0);
    let base = format!(
        "/datasets/{}?output={output}&state={}",
        enc(&name),
        enc(&given(&q.state).unwrap_or_default())
    );
    let link_base = base.clone();
    let n = name.clone();
    let data = page(&state, move |engine| {
        let p = grid::producer(engine, &n, output)?;
        let link = |zoom: grid::Zoom, end: chrono::NaiveDate| {
            format!(
                "{link_base}&zoom={}&end={}",
                zoom.as_str(),
                databuild_core::pattern::format_date(end)
            )
        };
        let g = grid::grid(engine, p, &query, &link)?;
        let view = engine
            .datasets(false)?
            .into_iter()
            .zip(engine.graph.producers())
            .find(|(_, q)| *q == p)
            .map(|(d, _)| d);
        Ok((g, view))
    })
    .await;
    let (g, view) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let zoom = g.zoom;
    let at = |zoom: Option<grid::Zoom>, end: Option<chrono::NaiveDate>| {
        let mut u = base.clone();
        if let Some(z) = zoom {
            u.push_str(&format!("&zoom={}", z.as_str()));
        }
        if let Some(e) = end {
            u.push_str(&format!("&end={}", databuild_core::pattern::format_date(e)));
        }
        u
    };
    let window = chrono::Duration::days(g.window_days);
    layout(&name, html! {
        h1 { "Dataset " (name) }
        p { code { (g.pattern) } @if let Some(v) = &view { " · " (v.kind) " · "
            @for (st, n) in &v.partitions { (thousands(*n)) " " (badge(st)) " " }
            @if !v.freshness_checked { span.muted { " (available: not split by freshness; too many to derive here)" } } } }
        form #grid-filters method="get" action={ "/datasets/" (enc(&name)) } {
            input type="hidden" name="output" value=(output);
            @if let Some(z) = zoom { input type="hidden" name="zoom" value=(z.as_str()); }
            @if let Some(e) = g.end { input type="hidden" name="end" value=(databuild_core::pattern::format_date(e)); }
            select name="state" { option value="" { "every state" }
                @for st in grid::STATES { option value=(st) selected[q.state.as_deref() == Some(st)] { (st) } } }
            " " button type="submit" { "Show" }
        }
        @match g.shape {
            grid::Shape::None => { p.empty { "A grid shows patterns of one or two fields; see " a href={ "/partitions?pattern=" (enc(&g.pattern)) } { "its partitions" } "." } }
            _ => {
                p.muted #grid-says {
                    @match g.shape {
                        grid::Shape::Matrix => { (g.row_field.clone().unwrap_or_default()) " × " (g.column_field.clone().unwrap_or_default()) ", by " (zoom.map_or("day", grid::Zoom::as_str)) }
                        grid::Shape::Table => { (g.row_field.clone().unwrap_or_default()) " × " (g.column_field.clone().unwrap_or_default()) }
                        grid::Shape::Calendar => { "by " (g.column_field.clone().unwrap_or_default()) ": twelve months by their days" }
                        _ => { "its partitions in order, " (grid::COLUMNS) " a row" }
                    }
                    " · " (g.partitions_read) " partitions read for this page"
                    @if zoom.is_some_and(|z| z != grid::Zoom::Day) { " · a cell is coloured by its worst state; click it to zoom in" }
                }
                p.nav {
                    @if g.shape == grid::Shape::Matrix {
                        "Zoom: " @for z in [grid::Zoom::Day, grid::Zoom::Week, grid::Zoom::Month] {
                            @if Some(z) == zoom { b { (z.as_str()) } } @else { a href=(at(Some(z), g.end)) { (z.as_str()) } } " "
                        }
                        " · "
                    }
                    @if let Some(end) = g.end {
                        a href=(at(zoom, Some(end - window))) { "← earlier" } " · "
                        a href=(at(zoom, Some(end + window))) { "later →" }
                    }
                    @if let Some(r) = &g.next_rows { " · " a #next-rows href={ (at(zoom, g.end)) "&rows_after=" (enc(r)) } { "next " (grid::ROWS) " rows →" } }
                    @if let Some(c) = &g.next_cols { " · " a #next-cols href={ (at(zoom, g.end)) "&rows_after=" (enc(q.rows_after.as_deref().unwrap_or(""))) "&cols_after=" (enc(c)) } { "more →" } }
                }
                div.scroll { (PreEscaped(svg::matrix(&g.rows, &g.columns, &g.cells))) }
                p.legend { @for (st, n) in &g.counts { (badge(st)) " " (thousands(*n)) " " } }
            }
        }
    }).into_response()
}

/// Sources and their tables: per source, one strip of days for the raw data (open, sealed,
/// expired) and one per table version (loaded from raw, carried forward, stale, missing), the
/// promoted version marked.
async fn sources_page(State(state): Shared) -> Response {
    let data = page(&state, |engine| {
        engine
            .graph
            .sources
            .iter()
            .map(|s| Ok(engine.source_detail(&s.name)?))
            .collect::<Result<Vec<_>, AppError>>()
    })
    .await;
    let details = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    const DAYS: usize = 90;
    layout("Sources", html! {
        h1 { "Sources" }
        @if details.is_empty() { p.muted { "This graph declares no [[source]]." } }
        @for d in &details {
            @let src = &d.source;
            @let days: Vec<_> = d.coverage.iter().rev().take(DAYS).rev().collect();
            section.source data-source=(src.name) {
                h2 { (src.name) }
                p { (src.kind) " source · keeps " (src.retention_days) " days · " (src.body_format)
                    @if src.signed { " · signed" }
                    " · " (src.days.open) " open, " (src.days.sealed) " sealed, " (src.days.expired) " expired · today " (d.today) }
                table.coverage {
                    tr { th { "" } th { @if let (Some(a), Some(b)) = (days.first(), days.last()) { (a.date) " → " (b.date) } } th { "Columns" } }
                    tr {
                        td { "raw" }
                        td { (PreEscaped(svg::calendar(&days.iter().map(|c| (c.date.clone(), c.raw.as_ref().map_or("missing", |r| r.state.as_str()).to_string())).collect::<Vec<_>>()))) }
                        td { span.muted { "source/" (src.name) "/date=…" } }
                    }
                    @for t in &src.tables { @for v in &t.versions {
                        @let key = format!("{}.v{}", t.name, v.version);
                        tr data-version=(key) {
                            td { a href={ "/jobs/" (key) } { (key) } @if v.version == t.promoted { " " span.badge style="background:#2f74c0" { "promoted" } } }
                            td { (PreEscaped(svg::calendar(&days.iter().map(|c| (c.date.clone(), coverage_state(c.versions.get(&key)))).collect::<Vec<_>>()))) }
                            td { code { (v.columns.join(", ")) } " · " (v.live_dates) " days, " (v.carried) " carried forward" }
                        }
                    } }
                }
            }
        }
        p.muted { "Colours: " (badge("sealed")) " " (badge("open")) " " (badge("expired")) " raw · "
            (badge("live")) " loaded from raw " (badge("carried")) " carried forward " (badge("stale")) " " (badge("missing")) }
    }).into_response()
}

/// Wants: what is wanted, whether it is satisfied, and if not, what it waits for and since when.
async fn wants_page(State(state): Shared) -> Response {
    let wants = match page(&state, |engine| Ok(engine.store.wants(None, false, 200)?)).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let colour = |s: Status| match s {
        Status::Satisfied => "live",
        Status::Waiting | Status::Requested => "building",
        _ => "cancelled",
    };
    layout("Wants", html! {
        h1 { "Wants" }
        p.muted { "Partitions wanted with " code { "databuild want" } " or a " code { "[[want]]" } " of the graph file; the service builds them as soon as their inputs exist." }
        @if wants.is_empty() { p.muted { "No wants yet." } }
        @else {
            table.wants {
                tr { th { "Want" } th { "Status" } th { "Partitions" } th { "Why" } th { "Since" } th { "SLA" } th { "Expires" } }
                @for w in &wants { tr data-want=(w.want_id) {
                    td { (id_link("/wants/", &w.want_id)) @if let Some(r) = &w.recurring { br; span.muted { "recurring " (r) } } }
                    td { span.badge style={ "background:" (svg::colour(colour(w.status))) } { (w.status) } }
                    td { @for r in w.refs.iter().take(5) { (partition_link(r)) br; } @if w.refs.len() > 5 { span.muted { "+" (w.refs.len() - 5) " more" } } }
                    td.why { (w.message.clone().unwrap_or_default()) }
                    td { (rfc3339(w.updated_at)) }
                    td { @if let Some(s) = w.sla_seconds { (humantime::format_duration(std::time::Duration::from_secs(s))) } @if w.sla_missed > 0 { " " span.badge style={ "background:" (svg::colour("failed")) } { (w.sla_missed) " missed" } } }
                    td { (w.expires_at.map(rfc3339).unwrap_or_default()) }
                } }
            }
        }
    }).into_response()
}

/// One want: how its partitions came to be — the builds and runs that made them, each run with
/// the runs that made what it read — and what each partition not live waits for.
async fn want_page(State(state): Shared, Path(id): Path<String>) -> Response {
    let w = match page(&state, move |engine| views::want_detail(engine, &id)).await {
        Ok(w) => w,
        Err(r) => return r,
    };
    let build_link = |id: &Option<String>| match id {
        Some(id) => build_link(id),
        None => html! { span.muted { "no build" } },
    };
    layout(&format!("Want {}", w.want_id), html! {
        h1 { "Want " code { (w.want_id) } " " span.badge { (w.status) } }
        p.muted { (w.refs.len()) " partition(s) wanted; " (w.waiting.len()) " not live. " (w.message.clone().unwrap_or_default()) }
        h2 { "How it was fulfilled" }
        @if w.fulfillment.is_empty() { p.muted { "No run has made any of its partitions yet." } }
        ul.tree {
            @for b in &w.fulfillment { li {
                "build " (build_link(&b.build_request_id)) " " @if let Some(s) = b.status { span.badge style={ "background:" (svg::colour(s.as_str())) } { (s) } }
                ul { @for r in &b.runs { li {
                    "run " (run_link(&r.job_run_id)) " of " code { (r.job) } " " span.badge style={ "background:" (svg::colour(r.status.as_str())) } { (r.status) } " made "
                    @for p in &r.partitions { (partition_link(p)) " " }
                    @if !r.inputs.is_empty() { ul { @for i in &r.inputs { li {
                        "read " (partition_link(&i.partition_ref)) " as built by run " (run_link(&i.job_run_id)) " of build " (build_link(&i.build_request_id))
                    } } } }
                } } }
            } }
        }
        @if !w.waiting.is_empty() {
            h2 { "Waiting" }
            table { tr { th { "Partition" } th { "Status" } th { "Waits for" } }
                @for p in &w.waiting { tr { td { (partition_link(&p.partition_ref)) } td { span.badge style={ "background:" (svg::colour(&p.status)) } { (p.status) } } td.why { (p.waits_for) } } }
            }
        }
    }).into_response()
}

/// The lineage of a partition's instance, two trees (upstream, downstream) drawn as one graph:
/// each instance once, edges from what was read to what was built from it.
fn lineage_graph(up: Option<&Lineage>, down: Option<&Lineage>) -> String {
    fn id(n: &LineageNode) -> String {
        let instance = n.job_run_id.as_deref().or(n.data_version.as_deref());
        format!("{}@{}", n.partition_ref, instance.unwrap_or(""))
    }
    fn add(nodes: &mut Vec<svg::GraphNode>, n: &LineageNode) -> usize {
        let key = id(n);
        if let Some(i) = nodes.iter().position(|g| g.id == key) {
            return i;
        }
        let status = match (n.current, n.run_status) {
            (false, _) => "superseded",
            (true, Some(Status::Completed) | None) => "live",
            (true, Some(s)) => s.as_str(),
        };
        nodes.push(svg::GraphNode {
            id: key,
            label: n.partition_ref.clone(),
            status: status.to_string(),
            href: format!("/partitions/{}", enc(&n.partition_ref)),
            depends_on: Vec::new(),
            ..Default::default()
        });
        nodes.len() - 1
    }
    fn walk(nodes: &mut Vec<svg::GraphNode>, n: &LineageNode, upstream: bool) {
        let me = add(nodes, n);
        for c in &n.children {
            let other = add(nodes, c);
            let (reader, read) = if upstream { (me, other) } else { (other, me) };
            let dependency = nodes[read].id.clone();
            if !nodes[reader].depends_on.contains(&dependency) {
                nodes[reader].depends_on.push(dependency);
            }
            walk(nodes, c, upstream);
        }
    }
    let mut nodes = Vec::new();
    for (tree, upstream) in [(up, true), (down, false)] {
        if let Some(t) = tree {
            walk(&mut nodes, &t.root, upstream);
        }
    }
    if nodes.len() < 2 {
        return String::new();
    }
    svg::graph(&nodes)
}

/// The colour key of a table version's day: `live (carried)` → `carried`, `live (loaded)` → `live`.
fn coverage_state(shown: Option<&String>) -> String {
    match shown.map(String::as_str) {
        None => "missing".to_string(),
        Some("live (carried)") => "carried".to_string(),
        Some(s) => s.split(' ').next().unwrap_or(s).to_string(),
    }
}

/// A calendar strip for a pattern with a date field: each day from the first to the last date
/// with partitions (at most 60), coloured by its worst state, `missing` where none exist.
fn calendar_for(engine: &Engine, pattern: &str) -> Result<String, AppError> {
    let Ok(p) = databuild_core::Pattern::parse(pattern) else {
        return Ok(String::new());
    };
    let Some(date_index) = p
        .fields()
        .position(|(_, t)| t == databuild_core::FieldType::Date)
    else {
        return Ok(String::new());
    };
    let glob: String = p
        .tokens()
        .iter()
        .map(|t| match t {
            databuild_core::pattern::Token::Literal(l) => l.replace(['[', '*', '?'], "?"),
            databuild_core::pattern::Token::Field { .. } => "*".to_string(),
        })
        .collect();
    let rows = engine.store.partitions(&PartitionQuery {
        pattern: Some(glob),
        limit: 5000,
        ..Default::default()
    })?;
    let rank = |s: &str| match s {
        "failed" => 4,
        "tainted" => 3,
        "building" => 2,
        "stale" => 1,
        _ => 0,
    };
    let mut by_date: std::collections::BTreeMap<String, String> = Default::default();
    for r in rows {
        let Some(values) = p.match_ref(&r.partition_ref) else {
            continue;
        };
        let status = databuild_exec::engine::listing::shown_status(r.status).to_string();
        let e = by_date
            .entry(values[date_index].to_string())
            .or_insert_with(|| status.clone());
        if rank(&status) > rank(e) {
            *e = status;
        }
    }
    let (Some(first), Some(last)) = (
        by_date.keys().next().cloned(),
        by_date.keys().last().cloned(),
    ) else {
        return Ok(String::new());
    };
    let (Some(first), Some(last)) = (
        databuild_core::pattern::parse_date(&first),
        databuild_core::pattern::parse_date(&last),
    ) else {
        return Ok(String::new());
    };
    let start = std::cmp::max(first, last - chrono::Duration::days(59));
    let days: Vec<(String, String)> = start
        .iter_days()
        .take_while(|d| *d <= last)
        .map(|d| {
            let key = databuild_core::pattern::format_date(d);
            let status = by_date
                .get(&key)
                .cloned()
                .unwrap_or_else(|| "missing".into());
            (key, status)
        })
        .collect();
    Ok(svg::calendar(&days))
}

async fn partition_page(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(r): Path<String>,
) -> Response {
    let st = state.clone();
    let pr = r.clone();
    let data = page(&state, move |engine| {
        let x = views::explain(engine, &pr)?;
        // Its current instance's lineage, two levels each way (none before it is built).
        let up = views::lineage(engine, &pr, Direction::Upstream, 2, None).ok();
        let down = views::lineage(engine, &pr, Direction::Downstream, 2, None).ok();
        let builds = engine.store.sql(
            // Through the partition's events (indexed by partition), not `request_partitions`,
            // whose key starts with the build.
            &format!("SELECT DISTINCT build_request_id FROM events WHERE partition_ref = '{}' AND build_request_id IS NOT NULL LIMIT 20", pr.replace('\'', "''")),
            SqlLimits::internal(),
        )?;
        Ok((x, up, down, builds))
    })
    .await;
    let (x, up, down, builds) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let below: Vec<&LineageNode> = down.iter().flat_map(|d| &d.root.children).collect();
    let picture = lineage_graph(up.as_ref(), down.as_ref());
    layout(&r, html! {
        h1 { code { (r) } " " (badge(&x.status)) }
        ul { @for reason in &x.reasons { li { (reason) } } }
        @if !x.checks.is_empty() {
            h2 { "Checks" }
            table.checks { tr { th { "Check" } th { "Result" } th { "Blocking" } th { "Message" } th { "Metrics" } }
                @for c in &x.checks { tr {
                    td { (c.name) @if c.inline { span.muted { " (reported by the job)" } } }
                    td { (badge(&c.result)) @if let Some(why) = &c.stale { " " span.muted { "stale: " (why) } } }
                    td { @if c.blocking { "yes" } @else { "no (a warning)" } }
                    td { (or_empty(&c.message)) }
                    td { @if let Some(m) = &c.metrics { code { (m.to_string()) } } }
                } }
            }
        }
        @if let Some(p) = &x.producer { p { "Produced by " (p.kind) " " b { (p.name) } " " code { (p.pattern) } } }
        @if let Some(run) = &x.run { p { "Built by run " (run_link(&run.job_run_id))
            " of build " (build_link(or_empty(&run.build_request_id))) } }
        @if let Some(p) = x.report.as_ref().and_then(|r| r.get("provenance")).and_then(Value::as_str) { p.provenance { "Provenance: " (p) } }
        @for w in &x.wants {
            p.wanted { "Wanted (" (w.status.as_str()) "): " (or_empty(&w.message)) " since " (w.updated_at)
                " · " a href="/wants" { "wants" } }
        }
        form.inline method="post" action="/ui/build" {
            input type="hidden" name="refs" value=(r);
            label { input type="checkbox" name="force" value="true"; " force" } " " (form_auth(&st, role))
            button type="submit" { "Build" }
        }
        " "
        // A taint is confirmed on a page that first says what it would make stale.
        form.inline method="get" action="/taint" {
            input type="hidden" name="ref" value=(r);
            input type="text" name="reason" placeholder="reason"; " "
            button type="submit" { "Taint…" }
        }
        h2 { "Upstream (the inputs of its run)" }
        @if x.inputs.is_empty() { p.empty { "None recorded." } } @else {
            table { @for i in &x.inputs { tr { td { (partition_link(&i.partition_ref)) } td { (badge(&i.status)) } } } }
        }
        h2 { "Downstream (built from its current instance)" }
        @if below.is_empty() { p.empty { "Nothing was built from it yet." } } @else { ul { @for d in &below { li {
            (partition_link(&d.partition_ref)) " by run " (run_link(or_empty(&d.job_run_id)))
            @if !d.current { " " span.muted { "(rebuilt since)" } }
        } } } }
        @if !picture.is_empty() {
            h2 { "Lineage" }
            p.muted { "Its current instance, what it was built from and what was built from it, two levels each way (" code { "databuild lineage" } " goes further); grey: instances rebuilt since." }
            div.graph { (PreEscaped(picture)) }
        }
        @if !x.to_build.is_empty() {
            h2 { "To build it" }
            table { tr { th { "Job" } th { "Outputs" } } @for st in &x.to_build { tr { td { (st.job) } td { @for o in &st.outputs { (partition_link(o)) " " } } } } }
        }
        h2 { "Builds that touched it" }
        ul { @for b in &builds.rows { li { (build_link(&s(&b[0]))) } } }
        h2 { "History" }
        table { tr { th { "#" } th { "Status" } th { "Time" } th { "Message" } }
            @for e in &x.history { tr { td { (e.idx) } td { (badge(e.status.as_str())) } td.muted { (rfc3339(e.timestamp)) } td { (or_empty(&e.message)) } } } }
    }).into_response()
}

async fn jobs_page(State(state): Shared) -> Response {
    let jobs = match page(&state, views::jobs).await {
        Ok(j) => j,
        Err(r) => return r,
    };
    layout("Jobs", html! {
        h1 { "Jobs" }
        table { tr { th { "Job" } th { "Runs" } th { "Success" } th { "Mean" } th { "p95" } th { "Last run" } }
            @for j in &jobs.jobs { tr {
                td { a href={ "/jobs/" (j.job) } { (j.job) } } td { (j.runs) }
                td { @match j.success_rate { Some(r) => (format!("{:.0}%", r * 100.0)), None => "-" } }
                td { @match j.mean_ms { Some(m) => (format!("{m:.0} ms")), None => "-" } }
                td { @match j.p95_ms { Some(m) => (format!("{m:.0} ms")), None => "-" } }
                td.muted { (at(&j.last_run_at)) }
            } }
        }
    }).into_response()
}

async fn job_page(State(state): Shared, Path(name): Path<String>) -> Response {
    let n = name.clone();
    let data = page(&state, move |engine| {
        Ok((
            views::job(engine, &n)?,
            views::job_runs(engine, &n, 100)?.runs,
        ))
    })
    .await;
    let (job, runs) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let points: Vec<(String, f64, String)> = runs
        .iter()
        .rev()
        .filter_map(|r| Some((r.job_run_id.clone(), r.duration_ms()?, r.status.to_string())))
        .collect();
    layout(&name, html! {
        h1 { "Job " (name) }
        p { (job.job.runs) " runs · " (job.job.completed) " completed · " (job.job.failed) " failed" }
        h2 { "Durations" }
        @if points.is_empty() { p.empty { "No finished runs yet." } } @else { div.scroll { (PreEscaped(svg::duration_chart(&points, "runs"))) } }
        h2 { "Recent runs" }
        table { tr { th { "Run" } th { "Status" } th { "Outputs" } th { "Took" } th { "Scheduled" } }
            @for r in &runs { tr {
                td { (run_link(&r.job_run_id)) }
                td { (badge(r.status.as_str())) } td { @for o in r.outputs.iter().take(2) { (partition_link(o)) " " } }
                td { (took(r)) } td.muted { (at(&r.scheduled_at)) }
            } }
        }
    }).into_response()
}

fn run_body(run: &JobRun, log: &str) -> Markup {
    let running = matches!(run.status, Status::Scheduled | Status::Running);
    let id = &run.job_run_id;
    html! {
        div #live hx-get={ "/runs/" (id) "/live" } hx-trigger=[running.then_some("every 1s")] hx-swap="outerHTML" {
            p { (badge(run.status.as_str())) " job " a href={ "/jobs/" (run.job) } { (run.job) }
                " · build " (build_link(or_empty(&run.build_request_id))) }
            table {
                tr { th { "Outputs" } td { @for o in &run.outputs { (partition_link(o)) " " } } }
                tr { th { "Inputs" } td { @for i in &run.inputs { (partition_link(i)) " " } } }
                tr { th { "Args" } td { code { (run.args.join(" ")) } } }
                tr { th { "Env" } td { @for (k, v) in &run.env { code { (k) "=" (v) } " " } } }
                tr { th { "Exit" } td { (run.exit_code.map(|c| c.to_string()).unwrap_or_default()) " " span.muted { (or_empty(&run.message)) } } }
                tr { th { "Timings" } td { "scheduled " (at(&run.scheduled_at)) ", started " (at(&run.started_at)) ", ended " (at(&run.ended_at)) " (" (took(run)) ")" } }
            }
            h2 { "Log" }
            @if log.is_empty() { p.empty { "No log (yet)." } } @else { pre.log { (log) } }
        }
    }
}

async fn run_page(State(state): Shared, Path(id): Path<String>) -> Response {
    let rid = id.clone();
    match page(&state, move |engine| {
        Ok((
            views::run(engine, &rid)?,
            views::run_log(engine, &rid).unwrap_or_default(),
        ))
    })
    .await
    {
        Ok((run, log)) => layout(
            &format!("Run {id}"),
            html! { h1 { "Job run " code title=(run.job_run_id) { (short(&run.job_run_id)) } " " button.copy type="button" data-copy=(run.job_run_id) { "copy" } } (run_body(&run, &log)) },
        )
        .into_response(),
        Err(r) => r,
    }
}

async fn run_live(State(state): Shared, Path(id): Path<String>) -> Response {
    match page(&state, move |engine| {
        Ok((
            views::run(engine, &id)?,
            views::run_log(engine, &id).unwrap_or_default(),
        ))
    })
    .await
    {
        Ok((run, log)) => run_body(&run, &log).into_response(),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
pub struct RefsQuery {
    refs: Option<String>,
}

/// Refs from a text box: one or more per line, braces expanded, as the API takes them.
fn refs_from_text(
    engine: &Engine,
    text: &str,
    max_refs: usize,
) -> Result<Vec<PartitionRef>, AppError> {
    let words: Vec<&str> = text.split_whitespace().collect();
    views::parse_refs(engine, &words, max_refs)
}

async fn analyze_page(State(state): Shared, Query(q): Query<RefsQuery>) -> Response {
    let text = q.refs.clone().unwrap_or_default();
    let form = html! {
        form method="get" action="/analyze" {
            textarea name="refs" rows="2" placeholder="partition refs" { (text) }
            button type="submit" { "Analyze" }
        }
    };
    if text.trim().is_empty() {
        return layout("Analyze", html! { h1 { "Analyze" } (form) p.empty { "Name partitions to see what a build would run." } }).into_response();
    }
    let max_refs = state.limits.max_refs;
    let plan = page(&state, move |engine| {
        let refs = refs_from_text(engine, &text, max_refs)?;
        let plan = engine.plan(&PlanRequest {
            refs,
            ..Default::default()
        })?;
        let cost = engine.estimate(&plan, databuild_exec::scheduler::default_parallelism())?;
        Ok((plan, cost))
    })
    .await;
    let (plan, cost) = match plan {
        Ok(p) => p,
        Err(r) => return r,
    };
    let nodes: Vec<svg::GraphNode> = plan
        .runs
        .iter()
        .enumerate()
        .take(300)
        .map(|(i, r)| svg::GraphNode {
            id: i.to_string(),
            label: format!("{} {}", r.job, r.outputs[0]),
            status: "scheduled".into(),
            href: format!("/partitions/{}", enc(r.outputs[0].as_str())),
            depends_on: r.depends_on.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        })
        .collect();
    layout("Analyze", html! {
        h1 { "Analyze" }
        (form)
        p { (plan.runs.len()) " job runs · " (plan.skipped.len()) " skipped (live) · " (plan.delegated.len()) " delegated · " (plan.missing.len()) " missing" }
        @if !plan.runs.is_empty() {
            p.estimate {
                "Estimated " strong { (span(cost.wall_p50_s)) } " at " (cost.parallel) " runs at once (p95 " (span(cost.wall_p95_s)) "), critical path " (span(cost.critical_path_p50_s)) ", job time " (span(cost.work_p50_s))
                @if cost.runs_without_history > 0 { " · " (cost.runs_without_history) " runs (" (cost.jobs_without_history.join(", ")) ") have no recorded duration and count as 0 s" }
            }
        }
        @if !plan.missing.is_empty() {
            @let blocked = plan.blocked_runs();
            p.error { "Cannot complete: " @for m in &plan.missing { code { (m.partition_ref) } " (dataset " (m.dataset) ") " }
                " · " (blocked.len()) " runs cannot run until " @if plan.missing.len() == 1 { "it is" } @else { "they are" } " there" }
        }
        @if !plan.not_rebuildable.is_empty() {
            p.muted #not-rebuildable { (plan.not_rebuildable.len()) " stale partitions are kept as they are, not rebuildable: "
                @for (r, why) in plan.not_rebuildable.iter().take(20) { (partition_link(r.as_str())) " (" (why) ") " } }
        }
        @if !nodes.is_empty() { div.scroll { (PreEscaped(svg::graph(&nodes))) } }
        @if plan.runs.len() > 300 { p.muted { "The drawing shows the first 300 runs." } }
        table { tr { th { "#" } th { "Job" } th { "Outputs" } th { "Inputs" } }
            @for (i, r) in plan.runs.iter().enumerate().take(1000) { tr {
                td { (i + 1) } td { (r.job) } td { @for o in &r.outputs { (partition_link(o.as_str())) " " } }
                td.muted { (r.inputs.iter().take(4).map(|i| i.as_str()).collect::<Vec<_>>().join(", ")) @if r.inputs.len() > 4 { " …" } }
            } }
        }
    }).into_response()
}

#[derive(Deserialize)]
pub struct SqlQuery {
    q: Option<String>,
}

const EXAMPLES: &[(&str, &str)] = &[
    ("Partitions by status", "SELECT status, count(*) AS partitions FROM partition_status GROUP BY status"),
    ("Slowest jobs", "SELECT job, count(*) AS runs, avg(duration_ms) AS mean_ms FROM job_run_durations WHERE status = 'completed' GROUP BY job ORDER BY mean_ms DESC"),
    ("Recent builds", "SELECT * FROM build_request_summary ORDER BY created DESC LIMIT 20"),
    ("Events per hour", "SELECT * FROM events_per_hour ORDER BY hour DESC LIMIT 48"),
];

async fn sql_page(State(state): Shared, Query(q): Query<SqlQuery>) -> Response {
    let query = q.q.clone().unwrap_or_default();
    let result = if query.trim().is_empty() {
        None
    } else {
        Some(
            crate::ops::run_sql(&state, query.clone(), 1000)
                .await
                .map_err(error_page),
        )
    };
    let outcome = match result {
        None => html! {},
        Some(Ok(v)) => html! {
            p.muted { (v.rows.len()) " rows" @if v.truncated { " (cut at 1,000)" } }
            div.scroll { table #results {
                tr { @for c in &v.columns { th { (c) } } }
                @for row in &v.rows { tr { @for cell in row { td { (s(cell)) } } } }
            } }
        },
        Some(Err(r)) => return r,
    };
    layout("SQL", html! {
        h1 { "SQL over the event log" }
        p.muted { "Read-only; one statement; stopped after 10 s; 1,000 rows at most. Tables and views: events, partitions, build_requests, request_partitions, job_runs, partition_status, job_run_durations, build_request_summary, events_per_hour, planned_runs." }
        form method="get" action="/sql" {
            textarea name="q" rows="4" { (query) }
            button type="submit" { "Run" }
        }
        p { "Examples: " @for (name, example) in EXAMPLES { a href={ "/sql?q=" (enc(example)) } { (name) } " · " } }
        (outcome)
    }).into_response()
}

/// A form whose every field is text as sent: a field that is not UTF-8 once decoded is refused
/// (400, as the JSON API refuses it), where `Form` would put U+FFFD in its place and act on
/// another ref than the one typed.
pub struct TextForm<T>(pub T);

impl<T, S> axum::extract::FromRequest<S> for TextForm<T>
where
    T: serde::de::DeserializeOwned,
    S: Send + Sync,
{
    type Rejection = Response;

    async fn from_request(req: axum::extract::Request, state: &S) -> Result<Self, Response> {
        let (parts, body) = req.into_parts();
        // The body limit layer bounds what is read here.
        let bytes = axum::body::to_bytes(body, usize::MAX)
            .await
            .map_err(|e| error_page(AppError::bad_request(format!("cannot read the form: {e}"))))?;
        if let Some(field) = not_text_field(&bytes) {
            return Err(error_page(AppError::bad_request(format!(
                "the form's field `{field}` is not UTF-8 text"
            ))));
        }
        let req = axum::extract::Request::from_parts(parts, axum::body::Body::from(bytes));
        Form::<T>::from_request(req, state)
            .await
            .map(|Form(form)| TextForm(form))
            .map_err(IntoResponse::into_response)
    }
}

/// The name of the first field of a URL-encoded form whose name or value is not UTF-8 once
/// decoded (`+` a space, `%XX` a byte).
fn not_text_field(body: &[u8]) -> Option<String> {
    fn decode(part: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(part.len());
        let mut i = 0;
        while i < part.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            match part[i] {
                b'+' => out.push(b' '),
                b'%' if i + 2 < part.len() => match (hex(part[i + 1]), hex(part[i + 2])) {
                    (Some(h), Some(l)) => {
                        out.push((h * 16 + l) as u8);
                        i += 2;
                    }
                    _ => out.push(b'%'),
                },
                b => out.push(b),
            }
            i += 1;
        }
        out
    }
    body.split(|&b| b == b'&').find_map(|pair| {
        let mut halves = pair.splitn(2, |&b| b == b'=');
        let name = decode(halves.next().unwrap_or_default());
        let value = decode(halves.next().unwrap_or_default());
        let ok = std::str::from_utf8(&name).is_ok() && std::str::from_utf8(&value).is_ok();
        (!ok).then(|| String::from_utf8_lossy(&name).into_owned())
    })
}

#[derive(Deserialize)]
pub struct BuildForm {
    refs: String,
    force: Option<String>,
    token: Option<String>,
    csrf: Option<String>,
}

fn csrf_refused() -> Response {
    error_page(AppError::new(
        axum::http::StatusCode::FORBIDDEN,
        "csrf",
        "this form is out of date or was not sent by this dashboard; reload the page and try again",
    ))
}

/// The checks of every form: its CSRF token, then the right to write (the session's, or the
/// form's token field). `Some(error page)` when one fails.
fn form_refused(
    state: &AppState,
    session: Role,
    csrf: Option<&str>,
    token: Option<&str>,
) -> Option<Response> {
    if !state.guard.csrf_ok(csrf) {
        return Some(csrf_refused());
    }
    if crate::guard::form_role(&state.guard, session, token) < Role::Writer {
        return Some(error_page(AppError::unauthorized(true)));
    }
    None
}

async fn ui_build(
    State(state): Shared,
    Extension(role): Extension<Role>,
    TextForm(form): TextForm<BuildForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let words: Vec<String> = form.refs.split_whitespace().map(str::to_string).collect();
    match crate::ops::start_build(
        &state,
        crate::ops::BuildRequest {
            partitions: words,
            force: form.force.is_some(),
            keep_going: false,
            allow_stale: false,
            parallel: None,
            max_runs: None,
        },
    )
    .await
    {
        Ok(id) => Redirect::to(&format!("/builds/{id}")).into_response(),
        Err(e) => error_page(e),
    }
}

#[derive(Deserialize)]
pub struct TaintForm {
    r#ref: String,
    reason: Option<String>,
    token: Option<String>,
    csrf: Option<String>,
}

#[derive(Deserialize)]
pub struct TaintPreview {
    r#ref: String,
    reason: Option<String>,
}

/// What a taint would do, before it is done: the partitions it would make stale and the wants
/// that would rebuild them, with the form that taints.
async fn taint_preview(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Query(q): Query<TaintPreview>,
) -> Response {
    let (r, max_refs) = (q.r#ref.clone(), state.limits.max_refs);
    let impact = match page(&state, move |engine| {
        views::taint_impact(engine, &[r], max_refs)
    })
    .await
    {
        Ok(i) => i,
        Err(resp) => return resp,
    };
    layout("Taint", html! {
        h1 { "Taint " code { (q.r#ref) } "?" }
        p { "It would be rebuilt by the next build that needs it"
            @if !impact.would_become_stale.is_empty() { ", and " b { (impact.would_become_stale.len()) } " live partition(s) built from it would become stale" } "." }
        @if !impact.would_become_stale.is_empty() {
            table { tr { th { "Would become stale" } th { "Built by run" } th { "From" } }
                @for i in &impact.would_become_stale { tr {
                    td { (partition_link(&i.partition_ref)) }
                    td { (run_link(&i.job_run_id)) }
                    td { code { (i.via) } }
                } }
            }
            @if impact.truncated { p.muted { "… and more." } }
        }
        @if impact.already_stale > 0 { p.muted { (impact.already_stale) " partition(s) built from it are stale or tainted already." } }
        @if impact.not_live > 0 { p.muted { (impact.not_live) " partition(s) built from it are not live (missing, failed or held back by a check)." } }
        @for w in &impact.wants { p.wanted { "Want " a href={ "/wants/" (w.want_id) } { code { (short(&w.want_id)) } } " would rebuild " (w.count) ": " @for r in &w.refs { (partition_link(r)) " " } } }
        form.inline method="post" action="/ui/taint" {
            input type="hidden" name="ref" value=(q.r#ref);
            input type="hidden" name="reason" value=(q.reason.clone().unwrap_or_default()); " " (form_auth(&state, role))
            button type="submit" { "Taint it" }
        }
        " " a href={ "/partitions/" (enc(&q.r#ref)) } { "Cancel" }
    }).into_response()
}

async fn ui_taint(
    State(state): Shared,
    Extension(role): Extension<Role>,
    TextForm(form): TextForm<TaintForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let r = form.r#ref.clone();
    let reason = form.reason.clone().filter(|s| !s.is_empty());
    let max_refs = state.limits.max_refs;
    match page(&state, move |engine| {
        views::taint(engine, &[r], reason.as_deref(), max_refs)
    })
    .await
    {
        Ok(_) => Redirect::to(&format!("/partitions/{}", enc(&form.r#ref))).into_response(),
        Err(resp) => resp,
    }
}

#[derive(Deserialize)]
pub struct TokenForm {
    token: Option<String>,
    csrf: Option<String>,
}

async fn ui_cancel(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
    Form(form): Form<TokenForm>,
) -> Response {
    if let Some(r) = form_refused(&state, role, form.csrf.as_deref(), form.token.as_deref()) {
        return r;
    }
    let bid = id.clone();
    match page(&state, move |engine| views::cancel(engine, &bid)).await {
        Ok(_) => Redirect::to(&format!("/builds/{id}")).into_response(),
        Err(r) => r,
    }
}

#[derive(Deserialize)]
pub struct LoginQuery {
    next: Option<String>,
}

/// Where to go after logging in: a path of this service only (never `//other.site`).
fn local_path(next: Option<&str>) -> String {
    // Browsers drop tabs and newlines from a URL, so `/\t/evil` would be `//evil`: only visible
    // ASCII, a single leading `/` and no backslash make a local path.
    match next {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && p.bytes().all(|b| b.is_ascii_graphic() && b != b'\\') =>
        {
            p.to_string()
        }
        _ => "/".to_string(),
    }
}

async fn login_page(State(state): Shared, Query(q): Query<LoginQuery>) -> Response {
    let next = local_path(q.next.as_deref());
    layout("Log in", html! {
        h1 { "Log in" }
        @if state.guard.has_token() {
            p.muted { "This service is guarded: enter DATABUILD_TOKEN to read and write, or DATABUILD_READ_TOKEN to read." }
            form method="post" action="/login" {
                input type="hidden" name="next" value=(next);
                input type="hidden" name="csrf" value=(state.guard.csrf_token());
                input type="password" name="token" placeholder="token" required autofocus;
                " " button type="submit" { "Log in" }
            }
        } @else {
            p { "This service has no token: everything is open. " a href="/" { "Home" } }
        }
    })
    .into_response()
}

#[derive(Deserialize)]
pub struct LoginForm {
    token: String,
    next: Option<String>,
    csrf: Option<String>,
}

async fn login(State(state): Shared, Form(form): Form<LoginForm>) -> Response {
    if !state.guard.csrf_ok(form.csrf.as_deref()) {
        return csrf_refused();
    }
    let role = state.guard.token_role(&form.token);
    let Some(cookie) = state.guard.session_cookie(role) else {
        let mut page = error_page(AppError::new(
            axum::http::StatusCode::UNAUTHORIZED,
            "unauthorized",
            "that token is neither DATABUILD_TOKEN nor DATABUILD_READ_TOKEN",
        ));
        // Every wrong guess costs its sender a moment.
        tokio::time::sleep(std::time::Duration::from_millis(250)).await;
        page.headers_mut()
            .insert(header::CACHE_CONTROL, "no-store".parse().expect("a header"));
        return page;
    };
    let mut response = Redirect::to(&local_path(form.next.as_deref())).into_response();
    response
        .headers_mut()
        .insert(header::SET_COOKIE, cookie.parse().expect("a cookie header"));
    response
}

async fn logout(State(state): Shared, Form(form): Form<TokenForm>) -> Response {
    if !state.guard.csrf_ok(form.csrf.as_deref()) {
        return csrf_refused();
    }
    let mut response = Redirect::to("/login").into_response();
    let expired = crate::guard::session_cookie_header("", 0);
    response.headers_mut().insert(
        header::SET_COOKIE,
        expired.parse().expect("a cookie header"),
    );
    response
}

#[cfg(test)]
mod tests {
    use super::not_text_field;

    #[test]
    fn a_form_field_that_is_not_utf8_once_decoded_is_named() {
        assert_eq!(not_text_field(b"refs=a%2Fb+c&csrf=x"), None);
        assert_eq!(not_text_field("refs=caf%C3%A9&x=é".as_bytes()), None);
        assert_eq!(
            not_text_field(b"csrf=x&refs=slow/%FFQ"),
            Some("refs".into())
        );
        assert_eq!(not_text_field(b"refs=slow/\xffQ"), Some("refs".into()));
        // A `%` that starts no escape stays as it is.
        assert_eq!(not_text_field(b"refs=100%&x=%zz%4"), None);
        assert_eq!(not_text_field(b""), None);
    }
}
