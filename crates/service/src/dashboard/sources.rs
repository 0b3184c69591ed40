//! The sources page: per source, a strip of days for its raw data and one per table version.

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use maud::{html, PreEscaped};

use super::layout::{layout, page};
use super::widgets::{badge, prod_only_note};
use super::Shared;
use crate::environment::Env;
use crate::error::AppError;
use crate::svg;

/// Sources and their tables: per source, one strip of days for the raw data (open, sealed,
/// expired) and one per table version (loaded from raw, carried forward, stale, missing), the
/// promoted version marked.
pub(super) async fn sources_page(State(state): Shared, env: Env) -> Response {
    // Sources are prod's whatever the page's environment (see `Env::prod_only`).
    let data = page(&Env::prod(&state), |engine| {
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
        (prod_only_note(&env, "Sources and tables"))
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

/// The colour key of a table version's day: `live (carried)` → `carried`, `live (loaded)` → `live`.
fn coverage_state(shown: Option<&String>) -> String {
    match shown.map(String::as_str) {
        None => "missing".to_string(),
        Some("live (carried)") => "carried".to_string(),
        Some(s) => s.split(' ').next().unwrap_or(s).to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::super::testing::{open_service, prod, text};
    use super::*;

    #[test]
    fn a_table_versions_day_is_coloured_by_the_first_word_of_its_state() {
        let state = |s: &str| coverage_state(Some(&s.to_string()));
        assert_eq!(coverage_state(None), "missing");
        assert_eq!(state("live (carried)"), "carried");
        assert_eq!(state("live (loaded)"), "live");
        assert_eq!(state("stale (raw data changed)"), "stale");
        assert_eq!(state("missing"), "missing");
    }

    #[tokio::test]
    async fn a_graph_without_sources_says_so() {
        let service = open_service();
        let html = text(sources_page(State(service.state.clone()), prod(&service)).await).await;
        assert!(html.contains("This graph declares no [[source]]."));
        assert!(!html.contains("<section"));
    }
}
