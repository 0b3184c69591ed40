//! Jobs and their runs: the list of jobs, one job's durations and recent runs, and one run's page
//! with its log, polled while the run goes on.

use axum::extract::Path;
use axum::response::{IntoResponse, Response};
use databuild_exec::answers::{metric_text, AgainstP50, JobRun};
use maud::{html, Markup, PreEscaped};

use super::layout::{layout, page};
use super::widgets::{at, badge, build_link, or_empty, partition_link, run_link, short, took};
use crate::engine_api;
use crate::environment::Env;
use crate::svg;

pub(super) async fn jobs_page(env: Env) -> Response {
    let jobs = match page(&env, engine_api::jobs).await {
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

pub(super) async fn job_page(env: Env, Path(name): Path<String>) -> Response {
    let n = name.clone();
    let data = page(&env, move |engine| {
        Ok((
            engine_api::job(engine, &n)?,
            engine_api::job_runs(engine, &n, 100)?.runs,
            engine_api::charts(engine, &n)?,
        ))
    })
    .await;
    let (job, runs, charts) = match data {
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
        @if !job.trends.is_empty() {
            h2 { "Resources and metrics" }
            table { tr { th { "Metric" } th { "p50" } th { "p95" } th { "Values" } }
                @for t in &job.trends { tr {
                    td { (t.name) } td { (metric_text(&t.name, t.p50)) } td { (metric_text(&t.name, t.p95)) } td { (t.count) }
                } }
            }
        }
        @for c in charts.iter().filter(|c| !c.points.is_empty()) {
            h2 { (chart_title(&c.metric)) " per partition" }
            div.scroll { (PreEscaped(svg::trend_chart(c))) }
            @let anomalies: Vec<&str> = c.points.iter().filter(|p| p.anomaly).map(|p| p.partition_ref.as_str()).collect();
            @if !anomalies.is_empty() { p { "Anomalies: " @for a in anomalies { (partition_link(a)) " " } } }
        }
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

/// A chart's title: what its metric measures.
fn chart_title(metric: &str) -> String {
    match metric {
        "wall_ms" => "Duration".to_string(),
        "max_rss_bytes" => "Peak memory".to_string(),
        m => format!("`{m}`"),
    }
}

fn run_body(run: &JobRun, log: &str, against: &[AgainstP50]) -> Markup {
    let running = run.status.run_unfinished();
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
                @if let Some(a) = run.attempt { tr { th { "Attempt" } td { (a) } } }
                @if let Some(r) = &run.resources {
                    tr { th { "Resources" } td { @for (name, v) in r.values() { code { (name) "=" (v) } " " } } }
                }
                @for (r, named) in &run.metrics {
                    tr { th { "Metrics of " (partition_link(r)) } td { @for (n, v) in named { code { (n) "=" (v) } " " } } }
                }
            }
            @if !against.is_empty() {
                h2 { "Resources and metrics" }
                table.against { tr { th { "Metric" } th { "Partition" } th { "This run" } th { "Job p50" } th { "vs p50" } }
                    @for a in against { tr {
                        td { (a.name) }
                        td { @if databuild_exec::answers::MetricKind::of(&a.name) == databuild_exec::answers::MetricKind::Reported { (partition_link(&a.partition_ref)) } }
                        td { (metric_text(&a.name, a.value)) }
                        td { @match a.p50 { Some(p) => (metric_text(&a.name, p)), None => "-" } }
                        td { @match a.p50.filter(|p| *p > 0.0) { Some(p) => (format!("{:.0}%", a.value / p * 100.0)), None => "-" } }
                    } }
                }
            }
            h2 { "Log" }
            @if log.is_empty() { p.empty { "No log (yet)." } } @else { pre.log { (log) } }
        }
    }
}

pub(super) async fn run_page(env: Env, Path(id): Path<String>) -> Response {
    let rid = id.clone();
    match page(&env, move |engine| {
        let run = engine_api::run(engine, &rid)?;
        let against = engine_api::against_p50(engine, &run)?;
        Ok((run, engine_api::run_log(engine, &rid).unwrap_or_default(), against))
    })
    .await
    {
        Ok((run, log, against)) => layout(
            &format!("Run {id}"),
            html! { h1 { "Job run " code title=(run.job_run_id) { (short(&run.job_run_id)) } " " button.copy type="button" data-copy=(run.job_run_id) { "copy" } } (run_body(&run, &log, &against)) },
        )
        .into_response(),
        Err(r) => r,
    }
}

pub(super) async fn run_live(env: Env, Path(id): Path<String>) -> Response {
    match page(&env, move |engine| {
        let run = engine_api::run(engine, &id)?;
        let against = engine_api::against_p50(engine, &run)?;
        Ok((
            run,
            engine_api::run_log(engine, &id).unwrap_or_default(),
            against,
        ))
    })
    .await
    {
        Ok((run, log, against)) => run_body(&run, &log, &against).into_response(),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use databuild_log::Status;

    use super::super::testing::{build, job_run, open_service, prod, text};
    use super::*;

    #[test]
    fn a_runs_page_shows_what_it_cost_and_reported() {
        let mut run = job_run("r1", "daily", "completed", &["daily/date=2026-01-02"], &[]);
        run.attempt = Some(2);
        run.resources = Some(databuild_log::RunResources {
            wall_ms: Some(1200),
            max_rss_bytes: Some(300 << 20),
            ..Default::default()
        });
        run.metrics
            .entry("daily/date=2026-01-02".into())
            .or_default()
            .insert("rows".into(), 1234.0);
        let html = run_body(&run, "", &[]).into_string();
        for shown in [
            "wall_ms=1200",
            "max_rss_bytes=314572800",
            "rows=1234",
            "Attempt",
        ] {
            assert!(html.contains(shown), "{shown}: {html}");
        }
    }

    #[test]
    fn a_runs_page_polls_while_it_runs_and_shows_its_log_escaped() {
        let mut run = job_run("r1", "daily", "running", &["daily/date=2026-01-02"], &[]);
        run.env.insert("TZ".into(), "UTC".into());
        run.args = vec!["--fast".into(), "x".into()];
        let html = run_body(&run, "", &[]).into_string();
        assert!(html.starts_with(
            r#"<div id="live" hx-get="/runs/r1/live" hx-trigger="every 1s" hx-swap="outerHTML">"#
        ));
        assert!(html.contains("<code>TZ=UTC</code>"));
        assert!(html.contains("<code>--fast x</code>"));
        assert!(html.contains("No log (yet)."));

        run.status = Status::Completed;
        let html = run_body(&run, "rows: 3 <ok>", &[]).into_string();
        assert!(html.starts_with(r#"<div id="live" hx-get="/runs/r1/live" hx-swap="outerHTML">"#));
        assert!(html.contains(r#"<pre class="log">rows: 3 &lt;ok&gt;</pre>"#));
    }

    #[tokio::test]
    async fn the_jobs_pages_show_the_runs_of_a_build() {
        let service = open_service();
        let state = || prod(&service);
        let html = text(jobs_page(state()).await).await;
        assert!(html.contains(r#"<td><a href="/jobs/daily">daily</a></td><td>0</td><td>-</td>"#));
        build(&service, &["daily/date=2026-01-02"]).await;
        let html = text(jobs_page(state()).await).await;
        assert!(html.contains(r#"<td><a href="/jobs/daily">daily</a></td><td>1</td><td>100%</td>"#));

        let html = text(job_page(state(), Path("daily".into())).await).await;
        assert!(html.contains("<p>1 runs · 1 completed · 0 failed</p>"));
        assert!(!html.contains("No finished runs yet."));
        let run = engine_api::job_runs(&service.state.engine, "daily", 1)
            .unwrap()
            .runs[0]
            .clone();
        let html = text(run_page(state(), Path(run.job_run_id.clone())).await).await;
        assert!(html.contains(&format!(
            r#"<h1>Job run <code title="{0}">{1}</code>"#,
            run.job_run_id,
            short(&run.job_run_id)
        )));
        let live = text(run_live(state(), Path(run.job_run_id.clone())).await).await;
        assert!(live.starts_with(r#"<div id="live""#), "only the live part");

        let unknown = run_page(state(), Path("nope".into())).await;
        assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    }
}
