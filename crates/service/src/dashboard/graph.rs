//! The graph page: datasets, sources and jobs in one drawing, each dataset with its partitions by
//! state and each job with its runs.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::Extension;
use databuild_exec::answers::{span, DerivedStatus};
use databuild_exec::Engine;
use maud::{html, PreEscaped};

use super::layout::{layout, page_as};
use super::widgets::{badge, enc, thousands};
use super::Shared;
use crate::environment::Env;
use crate::guard::Role;
use crate::svg;

/// The order a bar stacks states in: `status`'s, with `available` (the count of a dataset too
/// large to split into live, stale and missing) after `live`.
fn bar_order() -> impl Iterator<Item = &'static str> {
    DerivedStatus::ALL.into_iter().flat_map(|s| {
        let also = (s == DerivedStatus::Live).then_some("available");
        std::iter::once(s.as_str()).chain(also)
    })
}

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
pub(super) async fn graph_page(
    State(state): Shared,
    env: Env,
    Extension(role): Extension<Role>,
) -> Response {
    use databuild_core::Producer;
    let data = page_as(&env, role, |engine| {
        let datasets = engine.datasets(false)?;
        let jobs = engine.store.job_stats(None)?;
        let recorded = engine.recorded_edges()?;
        let producers: Vec<Producer> = engine.graph.producers().collect();
        let mut nodes = Vec::new();
        let key = |p: Producer| format!("p{}", producers.iter().position(|q| *q == p).unwrap_or(0));
        let mut unchecked = false;
        for (p, d) in producers.iter().zip(&datasets) {
            let bar: Vec<(String, u64)> = bar_order()
                .filter_map(|s| d.partitions.get(s).map(|n| (s.to_string(), *n)))
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
        p.legend { @for k in ["source", "dataset", "job", "alias"] { (badge(k)) } " · " @for st in bar_order() { (badge(st)) } }
        @if unchecked { p.muted #unchecked { "available: recorded built; with more than " (thousands(databuild_exec::engine::listing::FRESHNESS_SCAN as u64)) " of them, a dataset's split into live, stale and missing is not derived here (" a href="/datasets?exact=true" { "count them exactly" } ", or " code { "databuild datasets --exact" } ")." } }
        div.scroll { (PreEscaped(picture)) }
    }).into_response()
}

#[cfg(test)]
mod tests {
    use databuild_core::Producer;

    use super::super::testing::{build, open_service, prod, text};
    use super::*;

    #[test]
    fn a_jobs_first_output_is_its_dataset_page_and_the_others_say_which_they_are() {
        let service = open_service();
        let engine = &service.state.engine;
        let href = |job, output| dataset_href(engine, Producer::Job { job, output });
        assert_eq!(href(0, 0), "/datasets/daily");
        assert_eq!(href(1, 0), "/datasets/pair");
        assert_eq!(href(1, 1), "/datasets/pair?output=1");
    }

    #[tokio::test]
    async fn the_graph_draws_every_dataset_and_job_with_what_was_built_and_run() {
        let service = open_service();
        let graph = || {
            graph_page(
                State(service.state.clone()),
                prod(&service),
                Extension(Role::Writer),
            )
        };
        let html = text(graph().await).await;
        assert!(html.contains("<h1>Graph tiny</h1>"));
        assert!(
            html.contains("5 nodes: datasets and sources"),
            "3 outputs, 2 jobs"
        );
        // Each node's note is its second line of text.
        let notes = |note: &str| html.matches(&format!(r##"fill="#fff">{note}"##)).count();
        assert_eq!(notes("no partition yet</text>"), 3);
        assert_eq!(notes("never ran</text>"), 2);
        assert!(html.contains("/datasets/pair?output=1"));
        assert!(!html.contains(r#"id="unchecked""#));

        build(&service, &["left/date=2026-01-02"]).await;
        let html = text(graph().await).await;
        let notes = |note: &str| html.matches(&format!(r##"fill="#fff">{note}"##)).count();
        assert_eq!(
            notes("1 live</text>"),
            2,
            "daily, and left (right was not asked for)"
        );
        assert_eq!(notes("no partition yet</text>"), 1);
        assert_eq!(notes("1 runs · 0 failed · p50 "), 2);
        assert!(!html.contains("never ran"));
    }
}
