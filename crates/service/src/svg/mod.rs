//! Pictures drawn on the server as SVG: a graph of runs and partitions (`graph`), charts of
//! durations and a timeline of runs (`charts`), and cells by state: a matrix and a calendar strip
//! (`cells`). No JavaScript is needed to see them. This module holds what they share: the colour
//! of each state, escaping, and the width of a text.

mod cells;
mod charts;
mod graph;

pub use cells::{calendar, matrix, Cell};
pub use charts::{duration_chart, landing_chart, timeline, trend_chart, Span};
pub use graph::{graph, graph_down, GraphNode};

/// The colour of a state, shared by every picture and badge.
pub fn colour(status: &str) -> &'static str {
    match status {
        // an external's files there (`present`) are as good as live
        "live" | "present" | "completed" | "passed" => "#2e9e5b",
        "building" | "running" | "executing" => "#2f74c0",
        // claimed, its process not started yet
        "queued" => "#8fb3de",
        "scheduled" | "requested" | "planning" | "received" | "analysis_completed" => "#9aa5b1",
        "failed" | "check_failed" => "#d64545",
        "stale" => "#e0a526",
        "tainted" => "#8e44ad",
        // ended without failing: given up, not needed, or (a build) refused before it ran
        "cancelled" | "skipped" | "delegated" | "refused" => "#6c7a89",
        // recorded built, not checked for freshness
        "available" => "#7cc49a",
        "missing" => "#cfd6dd",
        // a period partly built
        "partial" => "#a8dbb9",
        // cells a filter leaves out
        "other" => "#eef1f4",
        "superseded" => "#9aa5b1",
        // the graph's nodes, by kind
        "job" => "#3e4c59",
        "dataset" => "#52606d",
        "source" => "#0f609b",
        "alias" => "#486581",
        // sources and table versions
        "sealed" => "#2e9e5b",
        "open" => "#2f74c0",
        "expired" => "#4b4f56",
        "carried" => "#17a2b8",
        _ => "#cfd6dd",
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// The width, in pixels, a text of `chars` characters takes at `font` px: a generous average
/// for a sans-serif font, so a box or a margin sized by it holds its label whole.
pub fn text_width(chars: usize, font: usize) -> usize {
    (chars * font * 62).div_ceil(100) + 2
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Hostile labels are escaped in every picture.
    #[test]
    fn labels_are_escaped() {
        let hostile = r#"x/"><script>alert(1)</script>"#;
        let cell = Cell {
            status: "live".into(),
            title: hostile.into(),
            href: format!("/partitions/{hostile}"),
        };
        let svg = matrix(
            &[hostile.to_string()],
            &[hostile.to_string()],
            &[vec![cell]],
        );
        assert!(!svg.contains("<script>"), "{svg}");
        let node = GraphNode {
            id: "a".into(),
            label: hostile.into(),
            status: hostile.into(),
            href: hostile.into(),
            note: Some(hostile.into()),
            bar: vec![(hostile.into(), 1)],
            ..Default::default()
        };
        assert!(!graph(&[node]).contains("<script>"));
        let chart = duration_chart(&[(hostile.into(), 1.0, hostile.into())], "runs");
        assert!(!chart.contains("<script>"));
    }
}
