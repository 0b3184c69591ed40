//! Charts over time: the durations of runs as bars with their p50 and p95, and a timeline of runs
//! with one lane per slot; with the round ticks and units of their axes.

use std::fmt::Write;

use super::{colour, escape, text_width};

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

/// Where a chart's plot area sits in its picture.
struct Plot {
    left: f64,
    top: f64,
    width: f64,
    height: f64,
}

impl Plot {
    /// A gridline and a label at each tick (`(y, label)`), the two axes, and `caption` under
    /// the x axis.
    fn grid_and_axes(
        &self,
        svg: &mut String,
        ticks: impl Iterator<Item = (f64, String)>,
        caption: &str,
    ) {
        let Plot {
            left,
            top,
            width,
            height,
        } = self;
        let (right, bottom) = (left + width, top + height);
        for (ty, label) in ticks {
            let _ = write!(
                svg,
                r##"<line x1="{left}" y1="{ty:.1}" x2="{right:.1}" y2="{ty:.1}" stroke="#e4e7eb"/><text class="tick" x="{:.1}" y="{:.1}" font-size="10" fill="#52606d" text-anchor="end">{}</text>"##,
                left - 4.0,
                ty + 3.0,
                escape(&label)
            );
        }
        let _ = write!(
            svg,
            r##"<line x1="{left}" y1="{top}" x2="{left}" y2="{bottom:.1}" stroke="#52606d"/><line x1="{left}" y1="{bottom:.1}" x2="{right:.1}" y2="{bottom:.1}" stroke="#52606d"/><text x="{left}" y="{:.1}" font-size="10" fill="#52606d">{}</text>"##,
            bottom + 24.0,
            escape(caption)
        );
    }
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
    let plot = Plot {
        left,
        top: top_pad,
        width: plot_w,
        height,
    };
    plot.grid_and_axes(
        &mut svg,
        marks
            .iter()
            .map(|m| (y(m * per), format!("{} {unit}", number(*m)))),
        &format!("{what}, oldest to newest ({} of them)", points.len()),
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

/// The unit of a metric's axis by its name and largest value: a duration for `_ms`, a size for
/// `_bytes`, none for a count.
pub fn metric_unit(metric: &str, max: f64) -> (&'static str, f64) {
    if metric.ends_with("_ms") {
        duration_unit(max)
    } else if metric.ends_with("_bytes") {
        [("GiB", 30), ("MiB", 20), ("KiB", 10)]
            .into_iter()
            .find(|(_, shift)| max >= 2.0 * (1u64 << shift) as f64)
            .map_or(("B", 1.0), |(u, shift)| (u, (1u64 << shift) as f64))
    } else {
        ("", 1.0)
    }
}

/// The frame of a chart of values over partitions in key order (a job's trend, a dataset's
/// landings): a value axis in `unit` (`per` base units each) with ticks, a slot of `dx` per
/// partition, wide enough for its caption under the x axis however long the refs, and `right`
/// to spare for the band's label.
struct KeyOrderFrame {
    unit: &'static str,
    per: f64,
    marks: Vec<f64>,
    /// The value at the top of the axis (base units).
    top: f64,
    left: f64,
    plot_w: f64,
    width: f64,
    total_h: f64,
    dx: f64,
    caption: String,
}

impl KeyOrderFrame {
    const TOP_PAD: f64 = 10.0;
    const HEIGHT: f64 = 140.0;
    const BOTTOM: f64 = 36.0;

    fn new(
        (unit, per): (&'static str, f64),
        max: f64,
        slots: usize,
        (dx, right): (f64, f64),
        caption: String,
    ) -> KeyOrderFrame {
        let (step, marks) = ticks(max / per, 4.0);
        let top = marks.last().copied().unwrap_or(step) * per;
        let label = |v: f64| format!("{} {unit}", number(v)).trim_end().to_string();
        let tick_w = marks
            .iter()
            .map(|m| text_width(label(*m).chars().count(), 10))
            .max()
            .unwrap_or(40) as f64;
        let left = tick_w + 10.0;
        let caption_w = text_width(caption.chars().count(), 10) as f64;
        let plot_w = (slots as f64 * dx).max(160.0).max(caption_w - right);
        KeyOrderFrame {
            unit,
            per,
            marks,
            top,
            left,
            plot_w,
            width: left + plot_w + right,
            total_h: Self::TOP_PAD + Self::HEIGHT + Self::BOTTOM,
            dx,
            caption,
        }
    }

    /// `v` (in `unit`s) with its unit.
    fn label(&self, v: f64) -> String {
        format!("{} {}", number(v), self.unit)
            .trim_end()
            .to_string()
    }

    /// Where value `v` (base units) is drawn.
    fn y(&self, v: f64) -> f64 {
        Self::TOP_PAD + Self::HEIGHT - v.max(0.0) / self.top * Self::HEIGHT
    }

    /// The middle of slot `i`.
    fn x(&self, i: usize) -> f64 {
        self.left + self.dx / 2.0 + i as f64 * self.dx
    }

    fn grid_and_axes(&self, svg: &mut String) {
        let plot = Plot {
            left: self.left,
            top: Self::TOP_PAD,
            width: self.plot_w,
            height: Self::HEIGHT,
        };
        let ticks = self
            .marks
            .iter()
            .map(|m| (self.y(m * self.per), self.label(*m)));
        plot.grid_and_axes(svg, ticks, &self.caption);
    }
}

/// One metric over partitions in key order (a job page's trend): a dot per partition, the
/// expected band shaded with its median dashed, and each partition that failed an anomaly check
/// marked (a red ring, named in its title).
pub fn trend_chart(chart: &databuild_exec::answers::MetricChart) -> String {
    let points = &chart.points;
    if points.is_empty() {
        return String::new();
    }
    let band_high = chart.band.map_or(0.0, |b| b.1);
    let max = points
        .iter()
        .map(|p| p.value)
        .fold(band_high, f64::max)
        .max(f64::MIN_POSITIVE);
    let (first, last) = (
        &points[0].partition_ref,
        &points[points.len() - 1].partition_ref,
    );
    let caption = format!(
        "partitions in key order, {first} to {last} ({} of them)",
        points.len()
    );
    let frame = KeyOrderFrame::new(
        metric_unit(&chart.metric, max),
        max,
        points.len(),
        (8.0, 110.0),
        caption,
    );
    let KeyOrderFrame {
        unit,
        per,
        left,
        plot_w,
        width,
        total_h,
        ..
    } = frame;
    let (label, y) = (|v: f64| frame.label(v), |v: f64| frame.y(v));
    let metric = escape(&chart.metric);
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="trend" data-metric="{metric}" width="{width:.0}" height="{total_h:.0}" viewBox="0 0 {width:.0} {total_h:.0}" role="img" aria-label="{metric} per partition">"#
    );
    if let (Some((low, high)), Some(median)) = (chart.band, chart.median) {
        let _ = write!(
            svg,
            r##"<rect class="band" x="{left}" y="{:.1}" width="{plot_w:.1}" height="{:.1}" fill="#d9e8f5"><title>expected {}–{} {unit}</title></rect><line class="p50" x1="{left}" y1="{:.1}" x2="{:.1}" y2="{:.1}" stroke="#1f2933" stroke-dasharray="4 3"/><text x="{:.1}" y="{:.1}" font-size="10" fill="#1f2933">median {}</text>"##,
            y(high),
            (y(low) - y(high)).max(1.0),
            number(low / per),
            number(high / per),
            y(median),
            left + plot_w,
            y(median),
            left + plot_w + 4.0,
            y(median) + 3.0,
            label(median / per)
        );
    }
    frame.grid_and_axes(&mut svg);
    for (i, p) in points.iter().enumerate() {
        let (cx, cy) = (frame.x(i), y(p.value));
        let value = format!(
            "{}: {} {unit}",
            escape(&p.partition_ref),
            number(p.value / per)
        );
        if p.anomaly {
            let _ = write!(
                svg,
                r##"<circle class="anomaly" cx="{cx:.1}" cy="{cy:.1}" r="5" fill="none" stroke="#d64545" stroke-width="2"><title>{value}: anomaly (failed its check)</title></circle>"##
            );
        }
        let _ = write!(
            svg,
            r##"<circle cx="{cx:.1}" cy="{cy:.1}" r="2.5" fill="{}"><title>{value}</title></circle>"##,
            if p.anomaly { "#d64545" } else { "#3e4c59" }
        );
    }
    svg.push_str("</svg>");
    svg
}

/// When an external dataset's latest partitions landed (its page's chart): a dot per partition
/// in key order at its time after its period's end (or the previous key's arrival), the
/// cadence's p50–p90 band shaded, and the next partition's expectation marked after the last
/// (a ring across the band; red when late).
pub fn landing_chart(l: &databuild_exec::answers::Landings) -> String {
    let points = &l.points;
    if points.is_empty() {
        return String::new();
    }
    const MS: f64 = 1e6;
    let band_high = l.band.map_or(0.0, |b| b.1 as f64 / MS);
    let max = points
        .iter()
        .map(|p| p.after_ns as f64 / MS)
        .fold(band_high, f64::max)
        .max(1.0);
    let caption = format!(
        "partitions in key order, {} to {} ({} of them); up: {}",
        points[0].partition_ref,
        points[points.len() - 1].partition_ref,
        points.len(),
        l.measure.says()
    );
    let slots = points.len() + usize::from(l.next.is_some());
    let frame = KeyOrderFrame::new(duration_unit(max), max, slots, (10.0, 140.0), caption);
    let KeyOrderFrame {
        per,
        left,
        plot_w,
        width,
        total_h,
        ..
    } = frame;
    let (label, y) = (|v: f64| frame.label(v), |ms: f64| frame.y(ms));
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="landings" width="{width:.0}" height="{total_h:.0}" viewBox="0 0 {width:.0} {total_h:.0}" role="img" aria-label="landing times">"#
    );
    if let Some((p50, p90)) = l.band {
        let (p50, p90) = (p50 as f64 / MS, p90 as f64 / MS);
        let _ = write!(
            svg,
            r##"<rect class="band" x="{left}" y="{:.1}" width="{plot_w:.1}" height="{:.1}" fill="#d9e8f5"><title>p50–p90: {}–{}</title></rect><text x="{:.1}" y="{:.1}" font-size="10" fill="#1f2933">p50–p90 {}–{}</text>"##,
            y(p90),
            (y(p50) - y(p90)).max(1.0),
            label(p50 / per),
            label(p90 / per),
            left + plot_w + 4.0,
            y(p50) + 3.0,
            number(p50 / per),
            label(p90 / per)
        );
    }
    frame.grid_and_axes(&mut svg);
    for (i, p) in points.iter().enumerate() {
        let ms = p.after_ns as f64 / MS;
        let _ = write!(
            svg,
            r##"<circle cx="{:.1}" cy="{:.1}" r="2.5" fill="#3e4c59"><title>{}: {}</title></circle>"##,
            frame.x(i),
            y(ms),
            escape(&p.partition_ref),
            label(ms / per)
        );
    }
    if let (Some((r, times, late)), Some((p50, p90))) = (&l.next, l.band) {
        let cx = frame.x(points.len());
        let colour = if *late { "#d64545" } else { "#2f80ed" };
        let _ = write!(
            svg,
            r##"<g class="next"><line x1="{cx:.1}" y1="{:.1}" x2="{cx:.1}" y2="{:.1}" stroke="{colour}" stroke-width="2"/><circle cx="{cx:.1}" cy="{:.1}" r="4" fill="none" stroke="{colour}" stroke-width="2"/><title>next: {} expected at {}, by {}{}</title></g>"##,
            y(p90 as f64 / MS),
            y(p50 as f64 / MS),
            y(p50 as f64 / MS),
            escape(r),
            databuild_exec::answers::rfc3339(times.at_ns),
            databuild_exec::answers::rfc3339(times.by_ns),
            if *late { " (late)" } else { "" }
        );
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Daily landings hours after their day: an axis in hours, the band, and the next day ringed
    /// on time (blue), then late (red); with no history, no picture.
    #[test]
    fn a_landing_chart_shades_the_band_and_marks_the_next_one() {
        use databuild_exec::answers::{ExpectedTimes, Landing, LandingMeasure, Landings};
        const H: i64 = 3_600_000_000_000;
        let landed = |day: u32, hours: i64| Landing {
            partition_ref: format!("raw/date=2026-01-{day:02}"),
            after_ns: hours * H,
        };
        let times = ExpectedTimes { at_ns: 0, by_ns: H };
        let mut l = Landings {
            measure: LandingMeasure::AfterPeriodEnd,
            points: vec![landed(1, 2), landed(2, 3), landed(3, 2)],
            band: Some((2 * H, 3 * H)),
            next: Some(("raw/date=2026-01-04".into(), times, false)),
        };
        let svg = landing_chart(&l);
        assert!(svg.contains(">2 h</text>"), "{svg}");
        assert!(svg.contains(r#"<rect class="band""#) && svg.contains(">p50–p90 2–3 h</text>"));
        assert!(svg.contains("up: time after its period ends"), "{svg}");
        assert!(svg.contains("<title>next: raw/date=2026-01-04 expected at "));
        assert!(svg.contains(r##"stroke="#2f80ed""##) && !svg.contains("(late)"));
        l.next = Some(("raw/date=2026-01-04".into(), times, true));
        assert!(landing_chart(&l).contains(r##"stroke="#d64545""##));
        l.points.clear();
        assert_eq!(landing_chart(&l), "");
    }

    /// A trend has a unit on its axis, its band shaded with the median, and its anomaly ringed.
    #[test]
    fn a_trend_chart_shades_the_band_and_rings_the_anomaly() {
        use databuild_exec::answers::{ChartPoint, MetricChart};
        let point = |i: u32, value: f64, anomaly: bool| ChartPoint {
            partition_ref: format!("t/{i:02}"),
            value,
            anomaly,
        };
        let chart = MetricChart {
            metric: "max_rss_bytes".into(),
            points: vec![
                point(1, 100.0 * 1048576.0, false),
                point(2, 5.0 * 1048576.0, true),
                point(3, 102.0 * 1048576.0, false),
            ],
            band: Some((90.0 * 1048576.0, 110.0 * 1048576.0)),
            median: Some(100.0 * 1048576.0),
        };
        let svg = trend_chart(&chart);
        if let Ok(dir) = std::env::var("DATABUILD_SVG_OUT") {
            std::fs::write(format!("{dir}/trend.svg"), &svg).unwrap();
        }
        assert!(svg.starts_with(
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="trend" data-metric="max_rss_bytes""#
        ));
        assert!(svg.contains(">100 MiB</text>"), "{svg}");
        assert!(svg.contains(r#"<rect class="band""#) && svg.contains("median 100 MiB"));
        assert_eq!(svg.matches(r#"class="anomaly""#).count(), 1);
        assert!(svg.contains("<title>t/02: 5 MiB: anomaly (failed its check)</title>"));
        assert!(svg.contains("partitions in key order, t/01 to t/03 (3 of them)"));
        let counts = MetricChart {
            metric: "rows".into(),
            band: None,
            median: None,
            ..chart
        };
        let svg = trend_chart(&counts);
        assert!(
            !svg.contains("class=\"band\"") && svg.contains(">0</text>"),
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
}
