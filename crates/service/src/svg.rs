//! Pictures drawn on the server as SVG: a graph of runs and partitions, a duration chart, and a
//! calendar strip. No JavaScript is needed to see them.

use std::collections::HashMap;
use std::fmt::Write;

/// The colour of a state, shared by every picture and badge.
pub fn colour(status: &str) -> &'static str {
    match status {
        "live" | "completed" | "passed" => "#2e9e5b",
        "building" | "running" | "executing" => "#2f74c0",
        "scheduled" | "requested" | "planning" | "received" | "analysis_completed" => "#9aa5b1",
        "failed" | "check_failed" => "#d64545",
        "stale" => "#e0a526",
        "tainted" => "#8e44ad",
        "cancelled" | "skipped" | "delegated" => "#6c7a89",
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

/// The width, in pixels, a text of `chars` characters takes at `font` px: a generous average
/// for a sans-serif font, so a box or a margin sized by it holds its label whole.
pub fn text_width(chars: usize, font: usize) -> usize {
    (chars * font * 62).div_ceil(100) + 2
}

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

/// A round step for an axis reaching `max` in about `ticks` steps: 1, 2 or 5 times a power of
/// ten.
fn nice_step(max: f64, ticks: f64) -> f64 {
    let raw = (max / ticks).max(f64::MIN_POSITIVE);
    let power = 10f64.powf(raw.log10().floor());
    let unit = raw / power;
    power
        * if unit <= 1.0 {
            1.0
        } else if unit <= 2.0 {
            2.0
        } else if unit <= 5.0 {
            5.0
        } else {
            10.0
        }
}

/// The ticks of an axis from 0 past `max`: its step and the values.
pub fn ticks(max: f64, wanted: f64) -> (f64, Vec<f64>) {
    let step = nice_step(max.max(0.0), wanted);
    let count = (max / step).ceil().max(1.0) as usize;
    (step, (0..=count).map(|i| i as f64 * step).collect())
}

/// A duration in the unit that suits `scale_ms` (the axis's largest value): ms, s, min or h.
pub fn duration_unit(scale_ms: f64) -> (&'static str, f64) {
    if scale_ms >= 2.0 * 3_600_000.0 {
        ("h", 3_600_000.0)
    } else if scale_ms >= 2.0 * 60_000.0 {
        ("min", 60_000.0)
    } else if scale_ms >= 2_000.0 {
        ("s", 1_000.0)
    } else {
        ("ms", 1.0)
    }
}

/// A value of an axis, without needless decimals.
fn number(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round() as i64)
    } else if v >= 10.0 {
        format!("{v:.0}")
    } else {
        let t = format!("{v:.2}");
        t.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

/// The value at percentile `p` (0..1) of `values`, as the log computes it (`percentile_disc`).
pub fn percentile(values: &[f64], p: f64) -> Option<f64> {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    (!v.is_empty()).then(|| v[((p * v.len() as f64).ceil() as usize).max(1) - 1])
}

/// Durations (ms) of runs in time order, as a bar chart with a duration axis (its unit chosen by
/// the longest run), the runs' order on the other axis, and the p50 and p95 as dashed lines.
pub fn duration_chart(points: &[(String, f64, String)], what: &str) -> String {
    if points.is_empty() {
        return String::new();
    }
    let values: Vec<f64> = points.iter().map(|p| p.1).collect();
    let max = values.iter().copied().fold(0.0, f64::max).max(0.001);
    let (unit, per) = duration_unit(max);
    let (step, marks) = ticks(max / per, 4.0);
    let top = marks.last().copied().unwrap_or(step) * per;
    let (bar, gap, height) = (10.0, 3.0, 140.0);
    let tick_w = marks
        .iter()
        .map(|m| text_width(format!("{} {unit}", number(*m)).chars().count(), 10))
        .max()
        .unwrap_or(40) as f64;
    let (left, right, top_pad, bottom) = (tick_w + 10.0, 110.0, 10.0, 36.0);
    let plot_w = (points.len() as f64 * (bar + gap)).max(160.0);
    let width = left + plot_w + right;
    let total_h = top_pad + height + bottom;
    let y = |ms: f64| top_pad + height - ms / top * height;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{width:.0}" height="{total_h:.0}" viewBox="0 0 {width:.0} {total_h:.0}" role="img" aria-label="run durations">"#
    );
    for m in &marks {
        let ty = y(m * per);
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{ty:.1}" x2="{:.1}" y2="{ty:.1}" stroke="#e4e7eb"/><text class="tick" x="{:.1}" y="{:.1}" font-size="10" fill="#52606d" text-anchor="end">{} {unit}</text>"##,
            left + plot_w,
            left - 4.0,
            ty + 3.0,
            number(*m)
        );
    }
    let _ = write!(
        svg,
        r##"<line x1="{left}" y1="{top_pad}" x2="{left}" y2="{:.1}" stroke="#52606d"/><line x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#52606d"/><text x="{left}" y="{:.1}" font-size="10" fill="#52606d">{what}, oldest to newest ({} of them)</text>"##,
        top_pad + height,
        top_pad + height,
        left + plot_w,
        top_pad + height,
        top_pad + height + 24.0,
        points.len()
    );
    for (i, (label, ms, status)) in points.iter().enumerate() {
        let h = (ms / top * height).max(1.0);
        let x = left + 2.0 + i as f64 * (bar + gap);
        let _ = write!(
            svg,
            r#"<rect x="{x:.1}" y="{:.1}" width="{bar}" height="{h:.1}" fill="{}"><title>{}: {} {unit}</title></rect>"#,
            top_pad + height - h,
            colour(status),
            escape(label),
            number(ms / per)
        );
    }
    // The p95's label above the p50's when their lines are too close for two labels.
    let p50_y = percentile(&values, 0.5).map(y);
    for (name, p, colour) in [("p50", 0.5, "#1f2933"), ("p95", 0.95, "#d64545")] {
        if let Some(v) = percentile(&values, p) {
            let ly = y(v);
            let label_y = match (name, p50_y) {
                ("p95", Some(p50)) if p50 - ly < 12.0 && p50 - 12.0 >= 8.0 => p50 - 12.0,
                ("p95", Some(p50)) if p50 - ly < 12.0 => p50 + 12.0,
                _ => ly,
            };
            let _ = write!(
                svg,
                r##"<line class="{name}" x1="{left}" y1="{ly:.1}" x2="{:.1}" y2="{ly:.1}" stroke="{colour}" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" font-size="10" fill="{colour}">{name} {} {unit}</text>"##,
                left + plot_w,
                left + plot_w + 4.0,
                label_y + 3.0,
                number(v / per)
            );
        }
    }
    svg.push_str("</svg>");
    svg
}

/// One bar of a timeline: a run from `start` to `end` (ns; `end` now for a running one).
pub struct Span {
    pub label: String,
    pub href: String,
    pub status: String,
    pub start: i64,
    pub end: i64,
}

/// The lane of each span: the first lane free when it starts (spans by start time), so runs that
/// overlap are on different lanes and a lane is one slot's succession of runs.
pub fn lanes(spans: &[Span]) -> (Vec<usize>, usize) {
    let mut by_start: Vec<usize> = (0..spans.len()).collect();
    by_start.sort_by_key(|&i| (spans[i].start, spans[i].end));
    let mut free_at: Vec<i64> = Vec::new();
    let mut lane = vec![0; spans.len()];
    for i in by_start {
        let l = match free_at.iter().position(|&f| f <= spans[i].start) {
            Some(l) => l,
            None => {
                free_at.push(i64::MIN);
                free_at.len() - 1
            }
        };
        free_at[l] = spans[i].end.max(spans[i].start);
        lane[i] = l;
    }
    (lane, free_at.len())
}

/// A time axis's label: seconds since the start as `s`, `m:ss` or `h:mm:ss`.
fn clock(seconds: f64) -> String {
    let s = seconds.round() as i64;
    match s {
        s if s < 60 => format!("{} s", number(seconds)),
        s if s < 3600 => format!("{}:{:02}", s / 60, s % 60),
        s => format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60),
    }
}

/// A timeline (Gantt chart) of runs, one lane per slot, with a time axis from the first start.
pub fn timeline(spans: &[Span]) -> String {
    if spans.is_empty() {
        return String::new();
    }
    let (lane, lanes_n) = lanes(spans);
    let start = spans.iter().map(|s| s.start).min().unwrap_or(0);
    let end = spans
        .iter()
        .map(|s| s.end.max(s.start))
        .max()
        .unwrap_or(start);
    let total_s = ((end - start) as f64 / 1e9).max(0.001);
    let (step, marks) = ticks(total_s, 8.0);
    let axis_end = marks.last().copied().unwrap_or(step);
    let lane_h = 14.0;
    let left = text_width(format!("slot {lanes_n}").len(), 10) as f64 + 8.0;
    let plot_w = 1000.0;
    let x = |ns: i64| left + (ns - start) as f64 / 1e9 / axis_end * plot_w;
    let height = 8.0 + lanes_n as f64 * lane_h + 30.0;
    let width = left + plot_w + 40.0;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="timeline" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" role="img" aria-label="timeline of runs by slot">"#
    );
    let axis_y = 8.0 + lanes_n as f64 * lane_h;
    for m in &marks {
        let tx = left + m / axis_end * plot_w;
        let _ = write!(
            svg,
            r##"<line x1="{tx:.1}" y1="4" x2="{tx:.1}" y2="{axis_y:.1}" stroke="#e4e7eb"/><text class="tick" x="{tx:.1}" y="{:.1}" font-size="10" fill="#52606d" text-anchor="middle">{}</text>"##,
            axis_y + 14.0,
            clock(*m)
        );
    }
    let _ = write!(
        svg,
        r##"<text x="{left}" y="{:.1}" font-size="10" fill="#52606d">time since the first run started ({})</text>"##,
        axis_y + 27.0,
        if step >= 60.0 { "m:ss" } else { "seconds" }
    );
    for l in 0..lanes_n {
        let _ = write!(
            svg,
            r##"<text x="2" y="{:.1}" font-size="10" fill="#52606d">slot {}</text>"##,
            8.0 + l as f64 * lane_h + 10.0,
            l + 1
        );
    }
    for (i, s) in spans.iter().enumerate() {
        let (x1, x2) = (x(s.start), x(s.end.max(s.start)));
        let _ = write!(
            svg,
            r#"<a href="{}"><rect x="{x1:.1}" y="{:.1}" width="{:.1}" height="{:.0}" fill="{}" data-status="{}"><title>{} ({}, {})</title></rect></a>"#,
            escape(&s.href),
            8.0 + lane[i] as f64 * lane_h + 1.0,
            (x2 - x1).max(1.0),
            lane_h - 2.0,
            colour(&s.status),
            escape(&s.status),
            escape(&s.label),
            escape(&s.status),
            clock((s.end.max(s.start) - s.start) as f64 / 1e9)
        );
    }
    svg.push_str("</svg>");
    svg
}

/// A cell of a matrix: its state, what its tooltip says, where it links.
pub struct Cell {
    pub status: String,
    pub title: String,
    pub href: String,
}

/// A matrix of cells coloured by state: one row per `rows` label, one column per `columns`
/// label (labels spaced so none overlaps another).
pub fn matrix(rows: &[String], columns: &[String], cells: &[Vec<Cell>]) -> String {
    if rows.is_empty() || columns.is_empty() {
        return String::new();
    }
    let (size, gap) = (14usize, 2usize);
    let pitch = size + gap;
    let left = rows
        .iter()
        .map(|r| text_width(r.chars().count(), 11))
        .max()
        .unwrap_or(0)
        + 8;
    let col_w = columns
        .iter()
        .map(|c| text_width(c.chars().count(), 10))
        .max()
        .unwrap_or(0);
    // Every `every`-th column is labelled, so labels never overlap.
    let every = (col_w + 6).div_ceil(pitch).max(1);
    let top = 18;
    let width = left + columns.len() * pitch + col_w + 4;
    let height = top + rows.len() * pitch + 4;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="matrix" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="partitions by state">"#
    );
    for (c, label) in columns.iter().enumerate().step_by(every) {
        let _ = write!(
            svg,
            r##"<text x="{}" y="12" font-size="10" fill="#52606d">{}</text>"##,
            left + c * pitch,
            escape(label)
        );
    }
    for (r, label) in rows.iter().enumerate() {
        let y = top + r * pitch;
        let _ = write!(
            svg,
            r##"<text x="2" y="{}" font-size="11" fill="#1f2933">{}</text>"##,
            y + 11,
            escape(label)
        );
        for (c, cell) in cells.get(r).into_iter().flatten().enumerate() {
            let rect = format!(
                r#"<rect x="{}" y="{y}" width="{size}" height="{size}" rx="2" fill="{}" data-status="{}"><title>{}</title></rect>"#,
                left + c * pitch,
                colour(&cell.status),
                escape(&cell.status),
                escape(&cell.title)
            );
            if cell.href.is_empty() {
                svg.push_str(&rect);
            } else {
                let _ = write!(svg, r#"<a href="{}">{rect}</a>"#, escape(&cell.href));
            }
        }
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

    /// Ticks are round numbers covering the largest value; durations take a readable unit.
    #[test]
    fn axes_have_round_ticks_and_units() {
        let (step, marks) = ticks(1730.0, 4.0);
        assert_eq!(step, 500.0);
        assert_eq!(marks, vec![0.0, 500.0, 1000.0, 1500.0, 2000.0]);
        assert_eq!(ticks(0.37, 4.0).0, 0.1);
        assert_eq!(duration_unit(850.0), ("ms", 1.0));
        assert_eq!(duration_unit(12_000.0), ("s", 1_000.0));
        assert_eq!(duration_unit(600_000.0), ("min", 60_000.0));
        assert_eq!(percentile(&[5.0, 1.0, 3.0, 2.0, 4.0], 0.5), Some(3.0));
        assert_eq!(percentile(&[5.0, 1.0, 3.0, 2.0, 4.0], 0.95), Some(5.0));
        let points: Vec<(String, f64, String)> = (1..=20)
            .map(|i| {
                (
                    format!("run {i}"),
                    i as f64 * 300.0,
                    "completed".to_string(),
                )
            })
            .collect();
        let chart = duration_chart(&points, "runs");
        // 6 s at most: an axis in seconds, to 6 s, with the p50 and p95 drawn and said.
        assert!(chart.contains(">6 s</text>"), "{chart}");
        assert!(chart.contains(">p50 3 s</text>"), "{chart}");
        assert!(chart.contains(">p95 5.7 s</text>"), "{chart}");
        assert!(chart.contains("runs, oldest to newest (20 of them)"));
    }

    /// Runs that overlap are on different lanes; a lane is reused once its run ended.
    #[test]
    fn a_timeline_puts_overlapping_runs_on_different_slots() {
        let span = |start: i64, end: i64| Span {
            label: "<job> & co".into(),
            href: "/runs/x".into(),
            status: "completed".into(),
            start,
            end,
        };
        let spans = [span(0, 10), span(5, 15), span(10, 20), span(16, 30)];
        let (lane, n) = lanes(&spans);
        assert_eq!(n, 2);
        assert_eq!(lane, vec![0, 1, 0, 1]);
        let svg = timeline(&spans);
        assert!(svg.contains("&lt;job&gt; &amp; co") && !svg.contains("<job>"));
        assert!(svg.contains(">slot 2</text>"));
    }

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
