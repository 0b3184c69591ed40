//! The dashboard: server-rendered pages (maud), htmx for live parts, every asset embedded.
//! Every page reads the same answers as the API; reading works without JavaScript.
//!
//! This module holds the route table only. [`layout`] is the page frame (style, nav, error
//! page, engine work off the async threads), [`widgets`] the small pieces every page draws
//! (badges, id links, counts), [`forms`] what every form shares (CSRF, the token field,
//! UTF-8-only bodies) and [`auth`] logging in and out; each other module is one family of pages.

mod actions;
mod analyze;
mod auth;
mod build;
mod builds;
mod datasets;
mod environments;
mod forms;
mod graph;
mod home;
mod jobs;
mod layout;
mod partitions;
mod sources;
mod sql;
#[cfg(test)]
mod testing;
mod wants;
mod widgets;

use std::sync::Arc;

use axum::extract::State;
use axum::routing::{get, post};
use axum::Router;

use crate::AppState;

/// The state every handler takes.
type Shared = State<Arc<AppState>>;

/// The pages, each in the environment [`layout::choose_environment`] chose for it.
pub fn routes(state: Arc<AppState>) -> Router<Arc<AppState>> {
    Router::new()
        .route("/", get(home::home))
        .route("/assets/htmx.min.js", get(layout::htmx))
        .route("/builds", get(builds::builds_page))
        .route("/graph", get(graph::graph_page))
        .route("/datasets/{name}", get(datasets::dataset_page))
        .route("/builds/{id}", get(build::build_page))
        .route("/builds/{id}/live", get(build::build_live))
        .route("/partitions", get(partitions::partitions_page))
        .route(
            "/partitions/{partition_ref}",
            get(partitions::partition_page),
        )
        .route("/datasets", get(datasets::datasets_page))
        .route("/sources", get(sources::sources_page))
        .route("/wants", get(wants::wants_page))
        .route("/wants/{id}", get(wants::want_page))
        .route("/taint", get(actions::taint_preview))
        .route("/jobs", get(jobs::jobs_page))
        .route("/jobs/{name}", get(jobs::job_page))
        .route("/runs/{id}", get(jobs::run_page))
        .route("/runs/{id}/live", get(jobs::run_live))
        .route("/analyze", get(analyze::analyze_page))
        .route("/sql", get(sql::sql_page))
        .route("/ui/build", post(actions::ui_build))
        .route("/ui/taint", post(actions::ui_taint))
        .route("/ui/cancel/{id}", post(actions::ui_cancel))
        .route("/login", get(auth::login_page).post(auth::login))
        .route("/logout", post(auth::logout))
        .route("/environments", get(environments::environments_page))
        .route("/environments/{name}", get(environments::environment_page))
        .route(
            "/ui/environments/{name}/promote",
            post(environments::ui_promote),
        )
        .route(
            "/ui/environments/{name}/rollback",
            post(environments::ui_rollback),
        )
        .route_layer(axum::middleware::from_fn_with_state(
            state,
            layout::choose_environment,
        ))
}
