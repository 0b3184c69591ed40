//! The environments' pages (contract section 9): the list, and one environment's diff against
//! prod (or `?other=`) with what changed in each partition's bytes, the jobs made otherwise and
//! why, then the forms that promote it and roll the target back. Each form asks the user to tick
//! "I have read the diff", which the server checks: without JavaScript, a confirmation dialog
//! (`hx-confirm`) would not be there to ask. Like the API's, they run on prod's engine, which
//! finds every environment's log, whichever environment the page is in.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Redirect, Response};
use axum::Extension;
use databuild_exec::answers::{EnvironmentDiff, EnvironmentView};
use databuild_log::environments::{check_name, PROD};
use maud::{html, Markup};
use serde::Deserialize;

use super::forms::{form_auth, form_refused, TextForm};
use super::layout::{error_page, layout, page};
use super::widgets::{at, enc, short};
use super::Shared;
use crate::engine_api;
use crate::environment::Env;
use crate::error::AppError;
use crate::guard::Role;

/// Every environment: its live partitions, where it came from, its last change, its data.
pub(super) async fn environments_page(State(state): Shared) -> Response {
    let list = match page(&Env::prod(&state), |engine| {
        engine_api::environments(engine)
    })
    .await
    {
        Ok(list) => list.environments,
        Err(r) => return r,
    };
    layout("Environments", html! {
        h1 { "Environments" }
        p.muted { "Make one with " code { "databuild env create NAME [--from ENV]" } "; build in it with "
            code { "--env NAME" } " or the selector above." }
        table { tr { th { "Environment" } th { "Live partitions" } th { "From" } th { "Made" } th { "Last change" } th { "Data" } }
            @for e in &list { (environment_row(e)) }
        }
    })
    .into_response()
}

fn environment_row(e: &EnvironmentView) -> Markup {
    let made = e.created_at.map(databuild_exec::answers::rfc3339);
    html! { tr {
        td { a href={ "/environments/" (e.name) } { (e.name) } }
        td { (e.available) }
        td { @if let Some(from) = &e.from { (from) } @else { span.muted { "—" } } }
        td.muted { (at(&made)) }
        td { @match &e.last_change {
            // The change is a build request in that environment's log.
            Some(id) => a.id href={ "/builds/" (id) "?env=" (e.name) } { (short(id)) },
            None => span.muted { "none" },
        } }
        td { code { (e.data_dir) } }
    } }
}

#[derive(Deserialize)]
pub struct DiffQuery {
    other: Option<String>,
}

/// The most partitions the page lists (the count says how many there are in all).
const DIFF_ROWS: usize = 200;

/// One environment against another (prod): the diff, then the forms that act on it.
pub(super) async fn environment_page(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    Query(q): Query<DiffQuery>,
) -> Response {
    let other = q.other.unwrap_or_else(|| PROD.to_string());
    let (n, o) = (name.clone(), other.clone());
    let diff = match page(&Env::prod(&state), move |engine| {
        engine_api::environment_diff(engine, &n, &o, DIFF_ROWS)
    })
    .await
    {
        Ok(diff) => diff,
        Err(r) => return r,
    };
    let forms = html! { (form_auth(&state, role)) };
    layout(
        &format!("Environment {name}"),
        html! {
            h1 { "Environment " (name) " against " (other) }
            (diff_view(&diff))
            @if name != other { (change_forms(&diff, &forms)) }
        },
    )
    .into_response()
}

fn diff_view(diff: &EnvironmentDiff) -> Markup {
    html! {
        h2 { "Partitions" }
        @if diff.partitions_total == 0 {
            p.empty { (diff.environment) " has nothing " (diff.other) " does not have as it has it." }
        } @else {
            p { b { (diff.partitions_total) } " partition(s) differ"
                @if (diff.partitions.len() as u64) < diff.partitions_total { " (the first " (diff.partitions.len()) " shown)" } "." }
            table { tr { th { "Partition" } th { "Job" } th { "Bytes" } th { "What changed" } }
                @for p in &diff.partitions { tr {
                    // Its page in the environment that has it so (the page's may be another).
                    td { a href={ "/partitions/" (enc(&p.partition_ref)) "?env=" (diff.environment) } { code { (p.partition_ref) } } }
                    td { a href={ "/jobs/" (p.job) } { (p.job) } }
                    td { @if p.same_bytes { "same, made otherwise" } @else { "differ" } }
                    td {
                        @if let Some(c) = &p.content {
                            (c.summary())
                            @for note in &c.notes { br; span.muted { (note) } }
                            @if let Some(unified) = &c.unified {
                                details { summary { "diff" } pre.diff { (unified) } }
                            }
                        } @else { span.muted { "not compared" } }
                    }
                } }
            }
        }
        h2 { "Jobs made otherwise" }
        @if diff.jobs.is_empty() { p.empty { "None." } } @else {
            table { tr { th { "Job" } th { "Why" } }
                @for j in &diff.jobs { tr {
                    td { a href={ "/jobs/" (j.job) } { (j.job) } }
                    td { @for r in &j.reasons { (r) br; } }
                } }
            }
        }
        @if !diff.aliases.is_empty() {
            h2 { "Tables" }
            table { tr { th { "Table" } th { (diff.environment) } th { (diff.other) } }
                @for a in &diff.aliases { tr {
                    td { code { (a.table) } } td { "v" (a.version) } td { "v" (a.other_version) }
                } }
            }
        }
    }
}

/// The promote and rollback forms, each with the box the server wants ticked.
fn change_forms(diff: &EnvironmentDiff, auth: &Markup) -> Markup {
    let (name, other) = (&diff.environment, &diff.other);
    html! {
        h2 { "Promote" }
        form method="post" action={ "/ui/environments/" (name) "/promote" } {
            input type="hidden" name="to" value=(other);
            label { input type="checkbox" name="confirm" value="yes" required; " I have read the diff" }
            " " (auth)
            " " button type="submit" { "Promote to " (other) }
        }
        p.muted { (other) " then reads exactly what " (name) " has of these partitions, in one recorded step; no job runs." }
        h2 { "Roll back" }
        form method="post" action={ "/ui/environments/" (other) "/rollback" } {
            input type="hidden" name="back_to" value=(name);
            label { input type="checkbox" name="confirm" value="yes" required; " I know what " (other) "'s last change was" }
            " " (auth)
            " " button type="submit" { "Roll back " (other) }
        }
        p.muted { "Undoes " (other) "'s last promotion or rollback." }
    }
}

/// What the promote and rollback forms send.
#[derive(Deserialize)]
pub struct ChangeForm {
    /// Promote: the environment that changes.
    to: Option<String>,
    /// Rollback: the page to go back to.
    back_to: Option<String>,
    /// `yes` once the user ticked the box.
    confirm: Option<String>,
    token: Option<String>,
    csrf: Option<String>,
}

impl ChangeForm {
    /// The form's checks: CSRF and the right to write ([`form_refused`]), then the box ticked.
    fn refused(&self, state: &crate::AppState, role: Role) -> Option<Response> {
        if let Some(r) = form_refused(state, role, self.csrf.as_deref(), self.token.as_deref()) {
            return Some(r);
        }
        (self.confirm.as_deref() != Some("yes")).then(|| {
            error_page(AppError::bad_request(
                "nothing was changed: tick \"I have read the diff\" to confirm, then send the form again",
            ))
        })
    }
}

/// Promotes environment `name` into the form's `to` (prod), once confirmed.
pub(super) async fn ui_promote(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    TextForm(form): TextForm<ChangeForm>,
) -> Response {
    if let Some(r) = form.refused(&state, role) {
        return r;
    }
    let to = form.to.unwrap_or_else(|| PROD.to_string());
    let (n, t) = (name.clone(), to.clone());
    match page(&Env::prod(&state), move |engine| {
        engine_api::promote_environment(engine, &n, &t)
    })
    .await
    {
        Ok(_) => Redirect::to(&format!("/environments/{name}?other={to}")).into_response(),
        Err(r) => r,
    }
}

/// Rolls environment `name` back, once confirmed.
pub(super) async fn ui_rollback(
    State(state): Shared,
    Extension(role): Extension<Role>,
    Path(name): Path<String>,
    TextForm(form): TextForm<ChangeForm>,
) -> Response {
    if let Some(r) = form.refused(&state, role) {
        return r;
    }
    let n = name.clone();
    match page(&Env::prod(&state), move |engine| {
        engine_api::rollback_environment(engine, &n)
    })
    .await
    {
        // Back to the diff it was asked from, if the form names an environment (anything else
        // is no address to go to).
        Ok(_) => match form.back_to.filter(|b| check_name(b).is_ok()) {
            Some(from) => Redirect::to(&format!("/environments/{from}?other={name}")),
            None => Redirect::to("/environments"),
        }
        .into_response(),
        Err(r) => r,
    }
}

#[cfg(test)]
mod tests {
    use databuild_exec::answers::{ContentChange, ContentDiff, PartitionDifference};

    use super::*;

    #[test]
    fn a_diff_of_text_is_shown_escaped() {
        let content = ContentDiff {
            change: ContentChange::Changed,
            old_bytes: 3,
            new_bytes: 20,
            files_added: 0,
            files_removed: 0,
            files_changed: 1,
            rows: None,
            unified: Some("--- old/x\n+++ new/x\n-1\n+<script>alert(1)</script>\n".into()),
            notes: vec!["<b>big.bin</b> is binary".into()],
        };
        let diff = EnvironmentDiff {
            environment: "dev".into(),
            other: "prod".into(),
            partitions: vec![PartitionDifference {
                partition_ref: "report/2026-01-01".into(),
                job: "report".into(),
                data_version: Some("sha256:b".into()),
                other_data_version: Some("sha256:a".into()),
                same_bytes: false,
                content: Some(content),
            }],
            partitions_total: 1,
            jobs: vec![],
            aliases: vec![],
        };
        let html = diff_view(&diff).into_string();
        assert!(
            html.contains("+&lt;script&gt;alert(1)&lt;/script&gt;"),
            "{html}"
        );
        assert!(
            html.contains("&lt;b&gt;big.bin&lt;/b&gt; is binary"),
            "{html}"
        );
        assert!(!html.contains("<script>"), "{html}");
        assert!(
            html.contains(r#"<a href="/partitions/report%2F2026-01-01?env=dev">"#),
            "{html}"
        );
    }
}
