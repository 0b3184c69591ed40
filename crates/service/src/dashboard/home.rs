//! The home page: a box to analyze or build refs, the recent builds, the external partitions
//! late now, the recently failed partitions and the jobs.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use databuild_exec::answers::rfc3339;
use databuild_log::PartitionQuery;
use maud::html;

use super::forms::form_auth;
use super::layout::{layout, page_as};
use super::widgets::{badge, build_link, partition_link};
use super::Shared;
use crate::engine_api;
use crate::environment::Env;
use crate::guard::Role;

pub(super) async fn home(
    State(state): Shared,
    env: Env,
    Extension(role): Extension<Role>,
) -> Response {
    let st = state.clone();
    let data = page_as(&env, role, |engine| {
        let builds = engine_api::builds(engine, None, false, 10)?.builds;
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
        let late = engine.late_partitions()?;
        Ok((builds, failed, jobs, late))
    })
    .await;
    let (builds, failed, jobs, late) = match data {
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
        h2 { "Late partitions" }
        @if late.is_empty() { p.empty { "No partition is late." } } @else {
            table { tr { th { "Partition" } th { "Expected by" } th { "Late by" } }
                @for l in &late { tr {
                    td { (partition_link(&l.partition_ref)) }
                    td.muted { (l.expected_by) }
                    td { (l.minutes_late) " min" }
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

#[cfg(test)]
mod tests {
    use super::super::testing::{build, guarded_service, open_service, prod, text};
    use super::*;

    #[tokio::test]
    async fn home_says_what_there_is_not_yet_and_asks_a_reader_for_a_token_to_build() {
        let service = guarded_service();
        let html = text(
            home(
                State(service.state.clone()),
                prod(&service),
                Extension(Role::Reader),
            )
            .await,
        )
        .await;
        assert!(html.contains("<h1>Build graph tiny</h1>"));
        assert!(html.contains("No builds yet."));
        assert!(html.contains("No failed partitions."));
        assert!(html.contains("No partition is late."));
        assert!(html.contains("No job has run yet."));
        assert!(html.contains(
            r#"<button type="submit" formaction="/ui/build" formmethod="post">Build</button>"#
        ));
        assert!(html.contains(r#"<input type="password" name="token""#));
    }

    #[tokio::test]
    async fn home_lists_the_recent_builds_and_the_jobs_that_ran() {
        let service = open_service();
        let id = build(&service, &["daily/date=2026-01-02"]).await;
        let html = text(
            home(
                State(service.state.clone()),
                prod(&service),
                Extension(Role::Writer),
            )
            .await,
        )
        .await;
        assert!(html.contains(&build_link(&id).into_string()));
        assert!(html.contains(&partition_link("daily/date=2026-01-02").into_string()));
        assert!(html.contains(r#"<td><a href="/jobs/daily">daily</a></td><td>1</td><td>100%</td>"#));
        assert!(!html.contains("No builds yet."));
        assert!(
            !html.contains(r#"type="password""#),
            "no token asked of an open service"
        );
    }
}
