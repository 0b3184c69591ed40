//! One build's page: its progress, its runs (a timeline, a graph, counts by job when it is big),
//! partitions, delegations and events. Its live part is re-rendered as the build's events arrive.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use databuild_exec::answers::{self, span, BuildDetail, JobRun};
use databuild_exec::Engine;
use databuild_log::{Kind, SqlLimits, Status};
use maud::{html, Markup, PreEscaped};
use serde::Deserialize;

use super::forms::form_auth;
use super::layout::{layout, page};
use super::widgets::{
    badge, build_link, enc, or_empty, partition_link, run_link, short, thousands, took,
};
use super::Shared;
use crate::engine_api;
use crate::environment::Env;
use crate::error::AppError;
use crate::guard::Role;
use crate::svg;
use crate::AppState;

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
            (p.done) " of " (p.planned) " runs done · " (p.queued) " queued · " (p.running) " running · " (p.failed) " failed · " (p.cancelled) " cancelled · " (p.unclaimed) " not claimed"
            @if let Some(rate) = p.rate_per_s { " · " (rate) " runs/s" }
            @if p.eta_s.is_some() {
                " · " strong { "ETA " (p.eta_text().unwrap_or_default()) }
                span.muted { " at --parallel " (p.parallel) ": the longer of the job time left over the slots (" (span(p.work_left_s))
                    " in all) and the longest chain of jobs left (" (span(p.critical_path_left_s)) ")"
                    @if p.runs_without_history > 0 { "; " (p.runs_without_history) " runs of jobs with no history count as 0 s" } }
            }
        }
        table #job-progress { tr { th { "Job" } th { "Done" } th { "" } th { "Queued" } th { "Running" } th { "Failed" } th { "Left" } th { "Median" } }
            @for j in &p.jobs { tr {
                td { (j.job) } td { (j.done) " / " (j.planned) }
                td { progress value=(j.done) max=(j.planned.max(1)) {} }
                td { (j.queued) } td { (j.running) } td { (j.failed) } td { (j.left) }
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
    let id = engine_api::build_id(engine, id)?;
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
        "queued",
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

/// What early cutoff did with a run, beside its status: rebuilt with the bytes it had, or not run
/// because its inputs came out unchanged.
fn cutoff_note(r: &JobRun) -> Markup {
    match databuild_log::Cutoff::of_message(r.message.as_deref()) {
        Some(c) => html! { " " span.muted.cutoff { (c.message()) } },
        None => html! {},
    }
}

fn build_body(v: &BuildView, state: &AppState, role: Role) -> Markup {
    let b = &v.detail;
    let id = &b.build_request_id;
    let status = b.status.as_str();
    let finished = databuild_log::state::is_terminal(databuild_log::Kind::BuildRequest, b.status)
        || b.analyze_only;
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
                            td { (r.job) } td { (badge(r.status.as_str())) (cutoff_note(r)) }
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

pub(super) async fn build_page(
    State(state): Shared,
    env: Env,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
    Query(q): Query<BuildPageQuery>,
) -> Response {
    let st = state.clone();
    let bid = id.clone();
    let graph = q.graph.is_some();
    match page(&env, move |engine| build_view(engine, &bid, graph)).await {
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

pub(super) async fn build_live(
    State(state): Shared,
    env: Env,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
    Query(q): Query<BuildPageQuery>,
) -> Response {
    let st = state.clone();
    let graph = q.graph.is_some();
    match page(&env, move |engine| build_view(engine, &id, graph)).await {
        Ok(v) => build_body(&v, &st, role).into_response(),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use databuild_log::{BuildRunCounts, JobRunCount};
    use serde_json::json;

    use super::super::testing::{answer, job_run, open_service, prod, text};
    use super::*;

    fn progress(jobs: serde_json::Value) -> answers::BuildProgress {
        answer(json!({
            "planned": 5, "done": 3, "queued": 2, "running": 1, "failed": 1, "cancelled": 0, "left": 2,
            "unclaimed": 0, "jobs": jobs, "rate_per_s": 0.5, "eta_s": 90.0,
            "work_left_s": 120.0, "critical_path_left_s": 90.0, "runs_without_history": 2,
            "parallel": 4,
        }))
    }

    fn job_progress(job: &str, planned: u64, done: u64, p50_s: Option<f64>) -> serde_json::Value {
        json!({ "job": job, "planned": planned, "done": done, "queued": 0, "running": 0, "failed": 0,
                "cancelled": 0, "left": planned - done, "unclaimed": 0, "p50_s": p50_s })
    }

    #[test]
    fn a_run_depends_on_the_runs_of_the_build_that_made_what_it_read() {
        // Newest first, as the log lists them; `c` was made by no run of this build.
        let runs = [
            job_run(
                "r3",
                "sum",
                "completed",
                &["sum/a_b"],
                &["n/a", "n/b", "n/c"],
            ),
            job_run("r2", "number", "completed", &["n/b"], &[]),
            job_run("r1", "number", "failed", &["n/a"], &[]),
        ];
        let node = |id: &str, label: &str, status: &str, depends_on: &[&str]| svg::GraphNode {
            id: id.into(),
            label: label.into(),
            status: status.into(),
            href: format!("/runs/{id}"),
            depends_on: depends_on.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        };
        let expected = svg::graph(&[
            node("r1", "number n/a", "failed", &[]),
            node("r2", "number n/b", "completed", &[]),
            node("r3", "sum sum/a_b", "completed", &["r1", "r2"]),
        ]);
        assert_eq!(runs_graph(&runs), expected);
    }

    #[test]
    fn the_timeline_draws_the_runs_that_started_from_start_to_end() {
        let mut started = job_run(
            "01a24d4b-0000-0000-0000-00000000run1",
            "sum",
            "completed",
            &["sum/a_b"],
            &[],
        );
        started.started_at_ns = Some(1_000_000_000);
        started.ended_at_ns = Some(3_000_000_000);
        let waiting = job_run("r2", "sum", "scheduled", &["sum/c_d"], &[]);
        assert_eq!(runs_timeline(std::slice::from_ref(&waiting)), "");
        // Claimed, its process not started: no bar until it starts.
        let queued = job_run("r3", "sum", "queued", &["sum/e_f"], &[]);
        assert_eq!(runs_timeline(std::slice::from_ref(&queued)), "");
        let expected = svg::timeline(&[svg::Span {
            label: "sum run 0000run1 sum/a_b".into(),
            href: "/runs/01a24d4b-0000-0000-0000-00000000run1".into(),
            status: "completed".into(),
            start: 1_000_000_000,
            end: 3_000_000_000,
        }]);
        assert_eq!(runs_timeline(&[started, waiting]), expected);
    }

    #[test]
    fn progress_says_what_is_done_and_what_the_eta_rests_on() {
        let p = progress(json!([
            job_progress("number", 4, 3, Some(1.25)),
            job_progress("never", 0, 0, None)
        ]));
        let html = progress_section(&p).into_string();
        assert!(html.contains(
            "3 of 5 runs done · 2 queued · 1 running · 1 failed · 0 cancelled · 0 not claimed · 0.5 runs/s"
        ));
        assert!(html.contains("<strong>ETA ≥ 1 min 30 s</strong>"));
        assert!(html.contains("at --parallel 4: the longer of the job time left over the slots (2 min 0 s in all) and the longest chain of jobs left (1 min 30 s); 2 runs of jobs with no history count as 0 s"));
        assert!(html.contains(
            r#"<td>number</td><td>3 / 4</td><td><progress value="3" max="4"></progress></td>"#
        ));
        assert!(html.contains(r#"<td class="muted">1.25 s</td>"#));
        // A job with nothing planned still draws a bar (of max 1), and says it has no history.
        assert!(html.contains(r#"<progress value="0" max="1"></progress>"#));
        assert!(html.contains(r#"<td class="muted">no history</td>"#));

        let ended = answers::BuildProgress { eta_s: None, ..p };
        assert!(!progress_section(&ended).into_string().contains("ETA"));
    }

    #[test]
    fn a_big_builds_runs_are_counted_by_job_and_state() {
        let count = |job: &str, status: Status, n| JobRunCount {
            job: job.into(),
            status,
            n,
        };
        let counts = BuildRunCounts {
            by_status: vec![
                count("load data", Status::Completed, 1_200),
                count("load data", Status::Failed, 3),
                count("sum", Status::Running, 2),
                count("sum", Status::Queued, 5),
            ],
            claimed: Vec::new(),
        };
        let p = progress(json!([job_progress("load data", 1_500, 1_200, None)]));
        let html = runs_by_job(&counts, Some(&p)).into_string();
        let row = |job: &str| {
            let start = html.find(&format!(r#"<tr data-job="{job}">"#)).unwrap();
            html[start..start + html[start..].find("</tr>").unwrap()].to_string()
        };
        let zero = r#"<td><span class="muted">0</span></td>"#;
        assert_eq!(
            row("load data"),
            format!(
                r#"<tr data-job="load data"><td><a href="/jobs/load%20data">load data</a></td><td>1,200</td>{zero}{zero}{zero}<td>3</td>{zero}{zero}<td><progress value="1200" max="1500"></progress> 1200 / 1500</td>"#
            )
        );
        assert!(row("sum").contains(&format!(
            r#"<td><a href="/jobs/sum">sum</a></td>{zero}<td>2</td><td>5</td>"#
        )));
        assert!(row("sum").ends_with("<td></td>"), "no progress, no bar");
    }

    fn view(status: &str, runs: Vec<JobRun>, total: u64, graph: bool) -> BuildView {
        let id = "01a24d4b-d5d5-7336-a716-53d3a807ffe7";
        BuildView {
            detail: answer(json!({
                "build_request_id": id, "status": status, "requested_partitions": ["sum/a_b"],
                "requested_count": 1, "analyze_only": false, "created_at": "2026-01-01T00:00:00Z",
                "updated_at": "2026-01-01T00:01:00Z", "partitions": [], "job_runs": runs,
                "job_runs_total": total, "created_at_ns": 0, "updated_at_ns": 60_000_000_000_i64,
            })),
            events: Vec::new(),
            delegations: Vec::new(),
            counts: BuildRunCounts {
                by_status: vec![JobRunCount {
                    job: "sum".into(),
                    status: Status::Completed,
                    n: total,
                }],
                claimed: Vec::new(),
            },
            graph,
        }
    }

    #[test]
    fn a_running_build_can_be_cancelled_and_an_ended_one_cannot() {
        let service = open_service();
        let runs = vec![job_run("r1", "sum", "running", &["sum/a_b"], &[])];
        let html = build_body(
            &view("executing", runs.clone(), 1, false),
            &service.state,
            Role::Writer,
        )
        .into_string();
        assert!(html.starts_with(r#"<div id="live" data-finished="false" data-graph="false">"#));
        assert!(html.contains(r#"<form class="inline" method="post" action="/ui/cancel/01a24d4b-d5d5-7336-a716-53d3a807ffe7">"#));
        let html = build_body(
            &view("completed", runs, 1, false),
            &service.state,
            Role::Writer,
        )
        .into_string();
        assert!(html.starts_with(r#"<div id="live" data-finished="true""#));
        assert!(!html.contains("/ui/cancel/"));
    }

    /// A claimed run whose process has not started is listed `queued`, with no time taken.
    #[test]
    fn a_queued_run_is_listed_queued() {
        let service = open_service();
        let runs = vec![
            job_run("r1", "sum", "running", &["sum/a_b"], &[]),
            job_run("r2", "sum", "queued", &["sum/c_d"], &[]),
        ];
        let html = build_body(
            &view("executing", runs, 2, false),
            &service.state,
            Role::Writer,
        )
        .into_string();
        let queued = format!(
            r#"<td>sum</td><td><span class="badge" style="background:{}">queued</span></td>"#,
            svg::colour("queued")
        );
        assert!(html.contains(&queued), "{html}");
        assert_ne!(svg::colour("queued"), svg::colour("running"));
    }

    #[test]
    fn a_big_build_draws_the_graph_of_its_runs_only_when_asked() {
        let service = open_service();
        let runs: Vec<JobRun> = (0..3)
            .map(|i| job_run(&format!("r{i}"), "sum", "completed", &[], &[]))
            .collect();
        let small = build_body(
            &view("completed", runs.clone(), 3, false),
            &service.state,
            Role::Writer,
        )
        .into_string();
        assert!(small.contains("<h2>Graph of runs</h2>"));
        assert!(!small.contains("runs-by-job"));
        assert!(small.contains(r#"<table id="runs">"#));

        let big_total = BIG_BUILD as u64 + 1;
        let big = build_body(
            &view("completed", runs.clone(), big_total, false),
            &service.state,
            Role::Writer,
        )
        .into_string();
        assert!(big.contains("51 runs, grouped by job."));
        assert!(big.contains(r#"<table id="runs-by-job">"#));
        assert!(big.contains(
            r#"<a id="show-graph" href="/builds/01a24d4b-d5d5-7336-a716-53d3a807ffe7?graph=runs">"#
        ));
        assert!(!big.contains("<h2>Graph of runs</h2>"));
        // Of a big build only the runs not completed are listed.
        assert!(big.contains("None: every run read completed."));

        let asked = build_body(
            &view("completed", runs, big_total, true),
            &service.state,
            Role::Writer,
        )
        .into_string();
        assert!(asked.contains("<h2>Graph of runs</h2>"));
        assert!(!asked.contains("show-graph"));
    }

    #[tokio::test]
    async fn an_unknown_build_is_a_not_found_page() {
        let service = open_service();
        let response = build_page(
            State(service.state.clone()),
            prod(&service),
            Extension(Role::Writer),
            Path("nope".into()),
            Query(BuildPageQuery::default()),
        )
        .await;
        assert_eq!(response.status(), StatusCode::NOT_FOUND);
        assert!(text(response).await.contains("Something is wrong"));
    }
}
