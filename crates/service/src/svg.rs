//! Pictures drawn on the server as SVG: a graph of runs and partitions, a duration chart, and a
//! calendar strip. No JavaScript is needed to see them.

use std::collections::HashMap;
use std::fmt::Write;

/// The colour of a state, shared by every picture and badge.
pub fn colour(status: &str) -> &'static str {
    match status {
        "live" | "available" | "completed" | "passed" => "#2e9e5b",
        "building" | "running" | "executing" => "#2f74c0",
        "scheduled" | "requested" | "planning" | "received" | "analysis_completed" => "#9aa5b1",
        "failed" | "check_failed" => "#d64545",
        "stale" => "#e0a526",
        "tainted" => "#8e44ad",
        "cancelled" | "skipped" | "delegated" => "#6c7a89",
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

/// A node of a graph: its label, state, a link, and the nodes it depends on.
pub struct GraphNode {
    pub id: String,
    pub label: String,
    pub status: String,
    pub href: String,
    pub depends_on: Vec<String>,
}

/// The most characters a node's label shows; a longer one loses its middle.
const LABEL_CHARS: usize = 64;

/// `text`, or its start and end around an ellipsis when it has more than `max` characters.
fn middle_cut(text: &str, max: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    if chars.len() <= max {
        return text.to_string();
    }
    let head = (max - 1) / 2;
    let tail = max - 1 - head;
    let mut cut: String = chars[..head].iter().collect();
    cut.push('…');
    cut.extend(&chars[chars.len() - tail..]);
    cut
}

/// A layered drawing: each node in the column after its deepest dependency.
pub fn graph(nodes: &[GraphNode]) -> String {
    if nodes.is_empty() {
        return String::new();
    }
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let mut layer = vec![0usize; nodes.len()];
    // Longest-path layering; nodes arrive in dependency order, and a few passes settle any rest.
    for _ in 0..nodes.len().min(50) {
        let mut changed = false;
        for (i, n) in nodes.iter().enumerate() {
            for d in &n.depends_on {
                if let Some(&j) = index.get(d.as_str()) {
                    if layer[i] <= layer[j] {
                        layer[i] = layer[j] + 1;
                        changed = true;
                    }
                }
            }
        }
        if !changed {
            break;
        }
    }
    // Boxes as wide as the longest label (up to `LABEL_CHARS` characters, ~6.6 px each at 11 px):
    // a label is never cut where it tells nodes apart, usually its end (a date).
    let longest = nodes
        .iter()
        .map(|n| n.label.chars().count().min(LABEL_CHARS))
        .max()
        .unwrap_or(0);
    let w = (longest * 66 / 10 + 16).max(120);
    let (h, gap_x, gap_y) = (34, 60, 14);
    let mut rows = vec![0usize; layer.iter().max().unwrap_or(&0) + 1];
    let mut pos = vec![(0, 0); nodes.len()];
    for i in 0..nodes.len() {
        let l = layer[i];
        pos[i] = (10 + l * (w + gap_x), 10 + rows[l] * (h + gap_y));
        rows[l] += 1;
    }
    let width = 20 + rows.len() * (w + gap_x);
    let height = 20 + rows.iter().max().unwrap_or(&1) * (h + gap_y);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="graph of job runs">"#
    );
    for (i, n) in nodes.iter().enumerate() {
        for d in &n.depends_on {
            if let Some(&j) = index.get(d.as_str()) {
                let (x1, y1) = (pos[j].0 + w, pos[j].1 + h / 2);
                let (x2, y2) = (pos[i].0, pos[i].1 + h / 2);
                let _ = write!(
                    svg,
                    r##"<path d="M{x1},{y1} C{},{y1} {},{y2} {x2},{y2}" fill="none" stroke="#9aa5b1"/>"##,
                    x1 + 30,
                    x2 - 30
                );
            }
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        let (x, y) = pos[i];
        let label = middle_cut(&n.label, LABEL_CHARS);
        let _ = write!(
            svg,
            r##"<a href="{}"><g class="node" data-status="{}"><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="5" fill="{}"/><text x="{}" y="{}" font-size="11" fill="#fff">{}</text></g><title>{} ({})</title></a>"##,
            escape(&n.href),
            escape(&n.status),
            colour(&n.status),
            x + 8,
            y + 21,
            escape(&label),
            escape(&n.label),
            escape(&n.status)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// Durations (ms) of runs in time order, as a bar chart.
pub fn duration_chart(points: &[(String, f64, String)]) -> String {
    if points.is_empty() {
        return String::new();
    }
    let max = points.iter().map(|p| p.1).fold(1.0, f64::max);
    let (bar, gap, height) = (10.0, 3.0, 120.0);
    let width = points.len() as f64 * (bar + gap) + 60.0;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width}" height="{}" role="img" aria-label="run durations">"#,
        height + 30.0
    );
    let _ = write!(
        svg,
        r##"<text x="0" y="12" font-size="10" fill="#555">{:.0} ms</text>"##,
        max
    );
    for (i, (label, ms, status)) in points.iter().enumerate() {
        let h = (ms / max * height).max(1.0);
        let x = 50.0 + i as f64 * (bar + gap);
        let _ = write!(
            svg,
            r#"<rect x="{x}" y="{}" width="{bar}" height="{h}" fill="{}"><title>{}: {:.0} ms</title></rect>"#,
            height - h + 15.0,
            colour(status),
            escape(label),
            ms
        );
    }
    svg.push_str("</svg>");
    svg
}

/// One cell per date, coloured by the worst state of that date's partitions.
pub fn calendar(days: &[(String, String)]) -> String {
    let size = 14;
    let width = days.len() * (size + 2) + 4;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="calendar" width="{width}" height="{}" role="img" aria-label="dates by state">"#,
        size + 4
    );
    for (i, (date, status)) in days.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<rect x="{}" y="2" width="{size}" height="{size}" rx="2" fill="{}" data-date="{}" data-status="{}"><title>{}: {}</title></rect>"#,
            2 + i * (size + 2),
            colour(status),
            escape(date),
            escape(status),
            escape(date),
            escape(status)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_long_label_keeps_its_start_and_end() {
        assert_eq!(middle_cut("short", 10), "short");
        let cut = middle_cut("categorized_reviews/category=comedy/date=2020-01-02", 24);
        assert_eq!(cut.chars().count(), 24);
        assert!(
            cut.starts_with("categorized") && cut.ends_with("2020-01-02"),
            "{cut}"
        );
    }

    /// Every label is drawn whole when it fits, and the boxes grow to hold it.
    #[test]
    fn boxes_are_as_wide_as_their_labels() {
        let node = |id: &str, deps: &[&str]| GraphNode {
            id: id.to_string(),
            label: id.to_string(),
            status: "live".to_string(),
            href: "/".to_string(),
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
        };
        let long = "categorized_reviews/category=comedy/date=2020-01-02";
        let svg = graph(&[node("raw", &[]), node(long, &["raw"])]);
        assert!(svg.contains(&format!(">{long}</text>")), "{svg}");
        let width: usize = svg
            .split("rect x=")
            .nth(1)
            .unwrap()
            .split("width=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .parse()
            .unwrap();
        assert!(width >= long.len() * 6, "{width}");
    }
}
