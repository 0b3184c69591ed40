//! Wants: the list, and one want's page: how its partitions came to be and what the others wait
//! for.

use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use databuild_exec::answers::rfc3339;
use databuild_log::Status;
use maud::{html, Markup, PreEscaped};

use super::layout::{layout, page, page_as};
use super::widgets::{build_link, id_link, partition_link, prod_only_note, run_link};
use super::Shared;
use crate::engine_api;
use crate::environment::Env;
use crate::guard::Role;
use crate::svg;

/// The state whose colour a want's status is drawn in: satisfied as live, still wanted as
/// building, anything else (cancelled, expired) as cancelled.
fn want_colour(status: Status) -> &'static str {
    match status {
        Status::Satisfied => "live",
        Status::Waiting | Status::Requested => "building",
        _ => "cancelled",
    }
}

/// Whole seconds from `now` to `at` (ns), rounded up; 0 once it has come.
fn seconds_until(at: i64, now: i64) -> i64 {
    (at.saturating_sub(now).max(0) + 999_999_999) / 1_000_000_000
}

/// When a want whose build failed is tried again (`retry_at`, ns): its time, and a countdown to
/// it from `now` that [`COUNTDOWN`] moves every second.
fn next_attempt(retry_at: i64, now: i64) -> Markup {
    let left = seconds_until(retry_at, now);
    html! {
        " " span.retry { "Next attempt "
            time datetime=(rfc3339(retry_at)) title=(rfc3339(retry_at)) data-retry-at-ms=(retry_at / 1_000_000) data-due=(left == 0) {
                @if left > 0 { "in " (left) " s" } @else { "now" }
            }
        }
    }
}

/// Moves each countdown to a next attempt every second, from the time it names; once one comes
/// (and had not when the page was drawn), the page is drawn again a few seconds later, to show
/// what the attempt did.
const COUNTDOWN: &str = r#"
(function () {
  var reload = null;
  function tick() {
    document.querySelectorAll('time[data-retry-at-ms]').forEach(function (t) {
      var left = Math.ceil((Number(t.dataset.retryAtMs) - Date.now()) / 1000);
      t.textContent = left > 0 ? 'in ' + left + ' s' : 'now';
      if (left <= 0 && t.dataset.due !== 'true' && !reload) {
        reload = setTimeout(function () { location.reload(); }, 3000);
      }
    });
  }
  tick();
  setInterval(tick, 1000);
})();
"#;

/// Wants: what is wanted, whether it is satisfied, and if not, what it waits for and since when.
pub(super) async fn wants_page(State(state): Shared, env: Env) -> Response {
    // Wants are prod's whatever the page's environment (see `Env::prod_only`).
    let wants = match page(&Env::prod(&state), |engine| {
        let rows = engine.store.wants(None, false, 200)?;
        // Each want with whether it is on time: its forecast against its deadline (#60).
        Ok(rows
            .into_iter()
            .map(|w| {
                let risk = engine.want_risk(&w);
                (w, risk)
            })
            .collect::<Vec<_>>())
    })
    .await
    {
        Ok(w) => w,
        Err(r) => return r,
    };
    let now = databuild_log::event::now_ns();
    layout("Wants", html! {
        h1 { "Wants" }
        (prod_only_note(&env, "Wants"))
        p.muted { "Partitions wanted with " code { "databuild want" } " or a " code { "[[want]]" } " of the graph file; the service builds them as soon as their inputs exist." }
        @if wants.is_empty() { p.muted { "No wants yet." } }
        @else {
            table.wants {
                tr { th { "Want" } th { "Status" } th { "Partitions" } th { "Why" } th { "Since" } th { "SLA" } th { "Deadline" } th { "Expires" } }
                @for (w, risk) in &wants { tr data-want=(w.want_id) {
                    td { (id_link("/wants/", &w.want_id)) @if let Some(r) = &w.recurring { br; span.muted { "recurring " (r) } } }
                    td { span.badge style={ "background:" (svg::colour(want_colour(w.status))) } { (w.status) } }
                    td { @for r in w.refs.iter().take(5) { (partition_link(r)) br; } @if w.refs.len() > 5 { span.muted { "+" (w.refs.len() - 5) " more" } } }
                    td.why { (w.message.clone().unwrap_or_default()) @if let Some(t) = w.retry_at { (next_attempt(t, now)) } }
                    td { (rfc3339(w.updated_at)) }
                    td { @if let Some(s) = w.sla_seconds { (humantime::format_duration(std::time::Duration::from_secs(s))) } @if w.sla_missed > 0 { " " span.badge style={ "background:" (svg::colour("failed")) } { (w.sla_missed) " missed" } } }
                    td.deadline {
                        (risk.deadline.clone().unwrap_or_default())
                        @if risk.at_risk {
                            " " span.badge.at-risk style={ "background:" (svg::colour("failed")) } title=(risk.at_risk_reason.clone().unwrap_or_default()) { "at risk" }
                            br; span.why { (risk.at_risk_reason.clone().unwrap_or_default()) }
                        } @else if let Some(at) = &risk.expected_satisfied_at {
                            br; span.muted { "expected " (at) }
                        }
                    }
                    td { (w.expires_at.map(rfc3339).unwrap_or_default()) }
                } }
            }
            @if wants.iter().any(|(w, _)| w.retry_at.is_some()) { script { (PreEscaped(COUNTDOWN)) } }
        }
    }).into_response()
}

/// One want: how its partitions came to be — the builds and runs that made them, each run with
/// the runs that made what it read — and what each partition not live waits for.
pub(super) async fn want_page(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(id): Path<String>,
) -> Response {
    let w = match page_as(&Env::prod(&state), role, move |engine| {
        engine_api::want_detail(engine, &id)
    })
    .await
    {
        Ok(w) => w,
        Err(r) => return r,
    };
    let now = databuild_log::event::now_ns();
    let build_link = |id: &Option<String>| match id {
        Some(id) => build_link(id),
        None => html! { span.muted { "no build" } },
    };
    layout(&format!("Want {}", w.want_id), html! {
        h1 { "Want " code { (w.want_id) } " " span.badge { (w.status) } }
        p.muted { (w.refs.len()) " partition(s) wanted; " (w.waiting.len()) " not live. " (w.message.clone().unwrap_or_default())
            @if let Some(t) = w.retry_at_ns { (next_attempt(t, now)) } }
        @if w.retry_at_ns.is_some() { script { (PreEscaped(COUNTDOWN)) } }
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
                @for p in &w.waiting { tr { td { (partition_link(&p.partition_ref)) } td { span.badge style={ "background:" (svg::colour(p.status.as_str())) } { (p.status) } } td.why { (p.waits_for) } } }
            }
        }
    }).into_response()
}

#[cfg(test)]
mod tests {
    use crate::client::WantTerms;
    use axum::http::StatusCode;

    use super::super::testing::{build, open_service, prod, text};
    use super::*;

    #[test]
    fn a_want_is_drawn_live_once_satisfied_building_while_wanted_and_grey_otherwise() {
        assert_eq!(want_colour(Status::Satisfied), "live");
        assert_eq!(want_colour(Status::Waiting), "building");
        assert_eq!(want_colour(Status::Requested), "building");
        assert_eq!(want_colour(Status::Cancelled), "cancelled");
        assert_eq!(want_colour(Status::Expired), "cancelled");
    }

    #[tokio::test]
    async fn the_list_shows_each_want_with_its_partitions_and_sla() {
        let service = open_service();
        let list = || wants_page(State(service.state.clone()), prod(&service));
        assert!(text(list().await).await.contains("No wants yet."));
        let words = ["daily/date={2026-01-02,2026-01-03}".to_string()];
        let want = engine_api::want(
            &service.state.engine,
            &words,
            WantTerms {
                sla: Some("2h"),
                ..Default::default()
            },
            10,
        )
        .unwrap();
        let html = text(list().await).await;
        assert!(html.contains(&format!(r#"<tr data-want="{}">"#, want.want_id)));
        assert!(html.contains(&partition_link("daily/date=2026-01-03").into_string()));
        assert!(html.contains("<td>2h</td>"));
        let badge = format!(
            r#"<span class="badge" style="background:{}">{}</span>"#,
            svg::colour("building"),
            want.status
        );
        assert!(html.contains(&badge), "{html}");
    }

    #[test]
    fn a_countdown_rounds_up_to_the_second_and_stops_at_zero() {
        let s = 1_000_000_000;
        assert_eq!(seconds_until(10 * s, 0), 10);
        assert_eq!(seconds_until(10 * s + 1, 0), 11);
        assert_eq!(seconds_until(10 * s - 1, 0), 10);
        assert_eq!(seconds_until(5 * s, 5 * s), 0);
        assert_eq!(seconds_until(0, 5 * s), 0);
    }

    #[tokio::test]
    async fn a_held_back_want_counts_down_to_its_recorded_retry_time() {
        let service = open_service();
        let engine = &service.state.engine;
        let now = databuild_log::event::now_ns();
        let mut ids = Vec::new();
        for (date, wait_s) in [("2026-01-02", 90), ("2026-01-03", 1000)] {
            let r = format!("daily/date={date}");
            let want = engine_api::want(engine, &[r], WantTerms::default(), 10).unwrap();
            let want = engine.want_row(&want.want_id).unwrap();
            let retry_at = now + wait_s * 1_000_000_000;
            engine
                .note_want(
                    &want,
                    Status::Waiting,
                    None,
                    Some("its build request b failed".into()),
                    None,
                    Some(retry_at),
                )
                .unwrap();
            ids.push((want.want_id, retry_at, wait_s));
        }
        let html = text(wants_page(State(service.state.clone()), prod(&service)).await).await;
        assert!(html.contains("setInterval(tick, 1000)"), "{html}");
        for (id, retry_at, wait_s) in &ids {
            let row = &html[html.find(&format!(r#"data-want="{id}""#)).unwrap()..];
            let row = &row[..row.find("</tr>").unwrap()];
            let time = format!(
                r#"<time datetime="{t}" title="{t}" data-retry-at-ms="{}" data-due="false">"#,
                retry_at / 1_000_000,
                t = rfc3339(*retry_at)
            );
            assert!(row.contains(&time), "{row}");
            // Drawn a moment after `now`: the count is the recorded wait, or a second less.
            let left: i64 = row[row.find(&time).unwrap() + time.len()..]
                .trim_start_matches("in ")
                .split(' ')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            assert!(
                (wait_s - 1..=*wait_s).contains(&left),
                "{left} for {wait_s}: {row}"
            );
        }
        let (id, retry_at, _) = &ids[0];
        let one = text(
            want_page(
                State(service.state.clone()),
                Extension(Role::Writer),
                Path(id.clone()),
            )
            .await,
        )
        .await;
        assert!(one.contains(&format!(r#"data-retry-at-ms="{}""#, retry_at / 1_000_000)));
        assert!(one.contains("setInterval(tick, 1000)"));
    }

    #[tokio::test]
    async fn a_wants_page_says_what_waits_and_then_which_runs_made_it() {
        let service = open_service();
        let r = "daily/date=2026-01-02";
        let want = engine_api::want(
            &service.state.engine,
            &[r.to_string()],
            WantTerms::default(),
            10,
        )
        .unwrap();
        let page = || {
            want_page(
                State(service.state.clone()),
                Extension(Role::Writer),
                Path(want.want_id.clone()),
            )
        };
        let html = text(page().await).await;
        assert!(html.contains("1 partition(s) wanted; 1 not live."));
        assert!(html.contains("No run has made any of its partitions yet."));
        assert!(html.contains("<h2>Waiting</h2>"));

        let id = build(&service, &[r]).await;
        let html = text(page().await).await;
        assert!(html.contains(&format!("build {}", build_link(&id).into_string())));
        assert!(html.contains("</span> of <code>daily</code>"));
        assert!(html.contains(&format!(" made {} ", partition_link(r).into_string())));
        assert!(!html.contains("<h2>Waiting</h2>"));

        let unknown = want_page(
            State(service.state.clone()),
            Extension(Role::Writer),
            Path("nope".into()),
        )
        .await;
        assert_eq!(unknown.status(), StatusCode::NOT_FOUND);
    }
}
