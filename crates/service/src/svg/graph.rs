//! The graph picture: nodes in layers (each after its deepest dependency), ordered to cross as
//! few edges as they can, drawn left to right or top to bottom, each node a linked box with its
//! label, state and optional counts.

use std::collections::HashMap;
use std::fmt::Write;

use super::{colour, escape, text_width};

/// A node of a graph: its label, state, a link, and the nodes it depends on; optionally counts
/// drawn as a stacked bar under the label, with a line of text saying them.
#[derive(Default)]
pub struct GraphNode {
    pub id: String,
    pub label: String,
    pub status: String,
    pub href: String,
    pub depends_on: Vec<String>,
    /// Counts by state, drawn in this order as one stacked bar.
    pub bar: Vec<(String, u64)>,
    /// A second line of text under the label (the counts, said in words).
    pub note: Option<String>,
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

/// How many barycentric sweeps (down and up) the ordering of a layered drawing makes.
const SWEEPS: usize = 4;

/// A layered layout: each node in the layer after its deepest dependency (longest path), then
/// the nodes of each layer ordered to reduce edge crossings (barycentric ordering, sweeping down
/// by dependencies and up by dependents, keeping the best order seen). `deps[i]`: the nodes `i`
/// depends on. Returns the nodes of each layer, top to bottom.
pub fn layout(deps: &[Vec<usize>]) -> Vec<Vec<usize>> {
    let n = deps.len();
    // Longest-path layering in topological order (Kahn); a node on a cycle stays in layer 0.
    let mut dependents = vec![Vec::new(); n];
    let mut waiting = vec![0usize; n];
    for (i, ds) in deps.iter().enumerate() {
        for &d in ds {
            if d != i {
                dependents[d].push(i);
                waiting[i] += 1;
            }
        }
    }
    let mut layer = vec![0usize; n];
    let mut ready: Vec<usize> = (0..n).filter(|&i| waiting[i] == 0).collect();
    while let Some(i) = ready.pop() {
        for &k in &dependents[i] {
            layer[k] = layer[k].max(layer[i] + 1);
            waiting[k] -= 1;
            if waiting[k] == 0 {
                ready.push(k);
            }
        }
    }
    let layers = layer.iter().max().map_or(0, |m| m + 1);
    let mut order: Vec<Vec<usize>> = vec![Vec::new(); layers];
    for (i, &l) in layer.iter().enumerate() {
        order[l].push(i);
    }
    let edges: Vec<(usize, usize)> = deps
        .iter()
        .enumerate()
        .flat_map(|(i, ds)| ds.iter().filter(move |&&d| d != i).map(move |&d| (d, i)))
        .collect();
    let mut best = order.clone();
    let mut fewest = crossings(&order, &edges);
    for sweep in 0..2 * SWEEPS {
        if fewest == 0 {
            break;
        }
        let down = sweep % 2 == 0;
        let place = positions(&order, n);
        let range: Vec<usize> = if down {
            (1..layers).collect()
        } else {
            (0..layers.saturating_sub(1)).rev().collect()
        };
        let mut place = place;
        for l in range {
            let neighbours = |v: usize| -> Vec<usize> {
                if down {
                    deps[v].iter().copied().filter(|&d| d != v).collect()
                } else {
                    dependents[v].clone()
                }
            };
            // A node's key: the mean position of its neighbours (relative to their layer's
            // size, as long edges reach layers of other sizes); a node with none keeps its own.
            let size = |v: usize| order[layer[v]].len().max(1) as f64;
            let mut keyed: Vec<(f64, usize)> = order[l]
                .iter()
                .map(|&v| {
                    let ns = neighbours(v);
                    let key = if ns.is_empty() {
                        place[v] as f64 / size(v)
                    } else {
                        ns.iter().map(|&u| place[u] as f64 / size(u)).sum::<f64>() / ns.len() as f64
                    };
                    (key, v)
                })
                .collect();
            keyed.sort_by(|a, b| a.0.total_cmp(&b.0));
            order[l] = keyed.into_iter().map(|(_, v)| v).collect();
            for (p, &v) in order[l].iter().enumerate() {
                place[v] = p;
            }
        }
        let c = crossings(&order, &edges);
        if c < fewest {
            fewest = c;
            best = order.clone();
        }
    }
    best
}

/// Each node's position within its layer.
fn positions(order: &[Vec<usize>], n: usize) -> Vec<usize> {
    let mut place = vec![0; n];
    for layer in order {
        for (p, &v) in layer.iter().enumerate() {
            place[v] = p;
        }
    }
    place
}

/// How many pairs of edges cross, among edges between the same two layers (`(from, to)` pairs).
pub fn crossings(order: &[Vec<usize>], edges: &[(usize, usize)]) -> usize {
    let n = order
        .iter()
        .map(|l| l.iter().max().map_or(0, |m| m + 1))
        .max()
        .unwrap_or(0);
    let place = positions(order, n);
    let mut layer = vec![0; n];
    for (l, vs) in order.iter().enumerate() {
        for &v in vs {
            layer[v] = l;
        }
    }
    let mut by_layers: HashMap<(usize, usize), Vec<(usize, usize)>> = HashMap::new();
    for &(a, b) in edges {
        by_layers
            .entry((layer[a], layer[b]))
            .or_default()
            .push((place[a], place[b]));
    }
    let mut count = 0;
    for es in by_layers.values() {
        for (i, &(a1, b1)) in es.iter().enumerate() {
            for &(a2, b2) in &es[i + 1..] {
                if (a1 < a2 && b1 > b2) || (a1 > a2 && b1 < b2) {
                    count += 1;
                }
            }
        }
    }
    count
}

/// A layered drawing, left to right: each node in the column after its deepest dependency,
/// the nodes of a column ordered to reduce crossings, boxes as wide as their labels.
pub fn graph(nodes: &[GraphNode]) -> String {
    draw_graph(nodes, false)
}

/// [`graph`] top to bottom: each node in the row below its deepest dependency (a long chain of
/// wide boxes stays as wide as a box).
pub fn graph_down(nodes: &[GraphNode]) -> String {
    draw_graph(nodes, true)
}

fn draw_graph(nodes: &[GraphNode], down: bool) -> String {
    if nodes.is_empty() {
        return String::new();
    }
    let index: HashMap<&str, usize> = nodes
        .iter()
        .enumerate()
        .map(|(i, n)| (n.id.as_str(), i))
        .collect();
    let deps: Vec<Vec<usize>> = nodes
        .iter()
        .map(|n| {
            n.depends_on
                .iter()
                .filter_map(|d| index.get(d.as_str()).copied())
                .collect()
        })
        .collect();
    let order = layout(&deps);
    // Boxes as wide as the longest label (up to `LABEL_CHARS` characters): a label is never cut
    // where it tells nodes apart, usually its end (a date).
    let longest = nodes
        .iter()
        .map(|n| {
            let note = n
                .note
                .as_ref()
                .map_or(0, |t| text_width(t.chars().count(), 10));
            text_width(n.label.chars().count().min(LABEL_CHARS), 11).max(note)
        })
        .max()
        .unwrap_or(0);
    let w = (longest + 16).max(120);
    let barred = nodes.iter().any(|n| !n.bar.is_empty() || n.note.is_some());
    let (h, gap_x, gap_y) = (if barred { 52 } else { 34 }, 60, 14);
    let (gap_x, gap_y) = if down { (24, 36) } else { (gap_x, gap_y) };
    let mut pos = vec![(0, 0); nodes.len()];
    for (l, layer) in order.iter().enumerate() {
        for (row, &i) in layer.iter().enumerate() {
            pos[i] = match down {
                false => (10 + l * (w + gap_x), 10 + row * (h + gap_y)),
                true => (10 + row * (w + gap_x), 10 + l * (h + gap_y)),
            };
        }
    }
    let widest = order.iter().map(Vec::len).max().unwrap_or(1);
    let (across, along) = match down {
        false => (order.len(), widest),
        true => (widest, order.len()),
    };
    // Room on the right for the bends of long edges (top to bottom).
    let bends = if down {
        w / 2 + 30 + 8 * order.len()
    } else {
        0
    };
    let width = 20 + across * (w + gap_x) - gap_x + bends;
    let height = 20 + along * (h + gap_y) - gap_y;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="graph">"#
    );
    for (i, ds) in deps.iter().enumerate() {
        for &j in ds {
            if down {
                let (x1, y1) = (pos[j].0 + w / 2, pos[j].1 + h);
                let (x2, y2) = (pos[i].0 + w / 2, pos[i].1);
                // An edge past a layer bends out beside the boxes it would cross (a cubic's
                // bulge is 3/4 of its control points' offset), further the longer it is.
                let span = (y2.saturating_sub(y1)) / (h + gap_y);
                let out = if span >= 1 && x1 == x2 {
                    ((w / 2 + 10 + 8 * span) * 4).div_ceil(3)
                } else {
                    0
                };
                let _ = write!(
                    svg,
                    r##"<path d="M{x1},{y1} C{},{} {},{} {x2},{y2}" fill="none" stroke="#9aa5b1"/>"##,
                    x1 + out,
                    y1 + 20,
                    x2 + out,
                    y2.saturating_sub(20)
                );
                continue;
            }
            let (x1, y1) = (pos[j].0 + w, pos[j].1 + h / 2);
            let (x2, y2) = (pos[i].0, pos[i].1 + h / 2);
            let _ = write!(
                svg,
                r##"<path d="M{x1},{y1} C{},{y1} {},{y2} {x2},{y2}" fill="none" stroke="#9aa5b1"/>"##,
                x1 + 30,
                x2.saturating_sub(30)
            );
        }
    }
    for (i, n) in nodes.iter().enumerate() {
        let (x, y) = pos[i];
        let label = middle_cut(&n.label, LABEL_CHARS);
        let _ = write!(
            svg,
            r##"<a href="{}"><g class="node" data-status="{}"><rect x="{x}" y="{y}" width="{w}" height="{h}" rx="5" fill="{}"/><text x="{}" y="{}" font-size="11" fill="#fff">{}</text>"##,
            escape(&n.href),
            escape(&n.status),
            colour(&n.status),
            x + 8,
            y + if barred { 16 } else { 21 },
            escape(&label),
        );
        let total: u64 = n.bar.iter().map(|b| b.1).sum();
        if total > 0 {
            let (bx, by, bw) = (x + 8, y + 22, (w - 16) as f64);
            let mut at = 0.0;
            let _ = write!(
                svg,
                r##"<rect x="{bx}" y="{by}" width="{bw}" height="8" fill="#fff"/>"##
            );
            for (state, count) in &n.bar {
                let part = bw * *count as f64 / total as f64;
                let _ = write!(
                    svg,
                    r##"<rect class="bar" x="{:.1}" y="{by}" width="{part:.1}" height="8" fill="{}" data-status="{}"/>"##,
                    bx as f64 + at,
                    colour(state),
                    escape(state)
                );
                at += part;
            }
        }
        if let Some(note) = &n.note {
            let _ = write!(
                svg,
                r##"<text x="{}" y="{}" font-size="10" fill="#fff">{}</text>"##,
                x + 8,
                y + 44,
                escape(note)
            );
        }
        let _ = write!(
            svg,
            r##"</g><title>{} ({}){}</title></a>"##,
            escape(&n.label),
            escape(&n.status),
            n.note
                .as_ref()
                .map_or(String::new(), |t| format!(": {}", escape(t)))
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
            ..Default::default()
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

    fn edges(deps: &[Vec<usize>]) -> Vec<(usize, usize)> {
        deps.iter()
            .enumerate()
            .flat_map(|(i, ds)| ds.iter().map(move |&d| (d, i)))
            .collect()
    }

    /// Each node sits one layer after its deepest dependency.
    #[test]
    fn layers_follow_the_longest_path() {
        // 0 → 1 → 2, and 0 → 2 directly: 2 is in layer 2, not 1.
        let order = layout(&[vec![], vec![0], vec![0, 1]]);
        assert_eq!(order, vec![vec![0], vec![1], vec![2]]);
        // A cycle does not hang the layout; its nodes are drawn somewhere.
        let order = layout(&[vec![1], vec![0]]);
        assert_eq!(order.iter().map(Vec::len).sum::<usize>(), 2);
    }

    /// Two sources whose readers are listed in the crossed order: the sweeps untangle them.
    #[test]
    fn barycentric_sweeps_remove_crossings() {
        // Layer 0: a(0), b(1). Layer 1: listed as reader-of-b (2), reader-of-a (3).
        let deps = vec![vec![], vec![], vec![1], vec![0]];
        let naive = vec![vec![0, 1], vec![2, 3]];
        assert_eq!(crossings(&naive, &edges(&deps)), 1);
        let order = layout(&deps);
        assert_eq!(crossings(&order, &edges(&deps)), 0, "{order:?}");
        // A wider case: 4 sources, each read by one node listed in reverse, and a third layer.
        let deps = vec![
            vec![],
            vec![],
            vec![],
            vec![],
            vec![3],
            vec![2],
            vec![1],
            vec![0],
            vec![7],
            vec![4],
        ];
        let listed = vec![vec![0, 1, 2, 3], vec![4, 5, 6, 7], vec![8, 9]];
        assert!(crossings(&listed, &edges(&deps)) > 0);
        let order = layout(&deps);
        assert_eq!(crossings(&order, &edges(&deps)), 0, "{order:?}");
    }

    /// Top to bottom, a chain is one box wide and a layer deep per node.
    #[test]
    fn a_chain_drawn_down_is_one_box_wide() {
        let node = |id: &str, deps: &[&str]| GraphNode {
            id: id.to_string(),
            label: id.to_string(),
            status: "job".to_string(),
            href: "/".to_string(),
            depends_on: deps.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        };
        let svg = graph_down(&[node("a", &[]), node("b", &["a"]), node("c", &["b"])]);
        assert!(
            svg.contains(r#"<svg xmlns="http://www.w3.org/2000/svg" class="graph" width="254""#),
            "{svg}"
        );
        assert!(
            svg.contains(r#"<rect x="10" y="10""#) && svg.contains(r#"<rect x="10" y="150""#),
            "{svg}"
        );
    }
}
