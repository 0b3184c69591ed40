//! A dataset's cadence, learned from when its partitions arrived: when the next one is expected
//! (its median) and by when it surely is (its 90th percentile), and why, in words.
//!
//! Time-keyed partitions (a `date` or `hour` field) are judged by their lag after the end of
//! their period (a date's ends at the next midnight UTC, an hour's at the next hour), so a late
//! backfill of old days does not read as a fast cadence. Int keys have no period: the gap
//! between successive keys' arrivals is what repeats. Robust on purpose: medians and quantiles,
//! never means, so one outlier moves nothing much; and when the latest arrivals have clearly
//! left the window's typical lag (a job upstream moved), only they are used.
//!
//! Pure: arrivals and times come in as values (ns since the epoch).

use chrono::{Datelike, Weekday};

use crate::pattern::{
    date_from_days, days_since_epoch, format_date, format_hour, parse_date, parse_hour, FieldType,
};

/// How many of the latest arrivals (by key) the model learns from.
pub const WINDOW: usize = 30;
/// Fewer arrivals than this predict nothing.
pub const MIN_ARRIVALS: usize = 3;
/// How many of the latest lags are compared with the window, to see a change of cadence.
pub const RECENT: usize = 5;
/// A change of cadence smaller than this is jitter, whatever the spread.
const MIN_CHANGE_NS: i64 = 10 * 60 * NS_PER_S;

const NS_PER_S: i64 = 1_000_000_000;
const NS_PER_HOUR: i64 = 3600 * NS_PER_S;
const NS_PER_DAY: i64 = 24 * NS_PER_HOUR;

/// The kind of key a dataset's partitions are told apart by: its pattern's typed field.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum KeyKind {
    Date,
    Hour,
    Int,
}

impl KeyKind {
    /// The kind of a typed field; `str` fields have no order, so no cadence.
    pub fn of(field: FieldType) -> Option<KeyKind> {
        match field {
            FieldType::Date => Some(KeyKind::Date),
            FieldType::Hour => Some(KeyKind::Hour),
            FieldType::Int => Some(KeyKind::Int),
            FieldType::Str => None,
        }
    }

    /// A field's text as a key: days or hours since 1970-01-01, or the integer.
    pub fn parse(self, value: &str) -> Option<Key> {
        let n = match self {
            KeyKind::Date => days_since_epoch(parse_date(value)?),
            KeyKind::Hour => parse_hour(value)?,
            KeyKind::Int => value.parse().ok()?,
        };
        Some(Key { kind: self, n })
    }

    /// How long one period of a time key lasts; `None` for int keys.
    fn period_ns(self) -> Option<i64> {
        match self {
            KeyKind::Date => Some(NS_PER_DAY),
            KeyKind::Hour => Some(NS_PER_HOUR),
            KeyKind::Int => None,
        }
    }
}

/// One partition's key, as its field's type orders it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key {
    pub kind: KeyKind,
    /// Days or hours since 1970-01-01, or the int itself.
    pub n: i64,
}

impl Key {
    /// When the key's period ends (ns since the epoch); `None` for int keys.
    pub fn period_end_ns(self) -> Option<i64> {
        let period = self.kind.period_ns()?;
        self.n.checked_add(1)?.checked_mul(period)
    }

    /// The weekday of a time key's period (an hour's day); `None` for int keys.
    pub fn weekday(self) -> Option<Weekday> {
        let days = match self.kind {
            KeyKind::Date => self.n,
            KeyKind::Hour => self.n.div_euclid(24),
            KeyKind::Int => return None,
        };
        date_from_days(days).map(|d| d.weekday())
    }

    /// The key as its field writes it in a ref; `None` past the dates chrono knows.
    pub fn render(self) -> Option<String> {
        match self.kind {
            KeyKind::Date => date_from_days(self.n).map(format_date),
            KeyKind::Hour => format_hour(self.n),
            KeyKind::Int => Some(self.n.to_string()),
        }
    }

    fn offset(self, by: i64) -> Key {
        Key {
            kind: self.kind,
            n: self.n.saturating_add(by),
        }
    }
}

/// One partition's arrival: its key, and when it was first seen (ns since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Arrival {
    pub key: Key,
    pub at_ns: i64,
}

/// What the model measures: the lag after a period's end, or the gap between successive keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measure {
    /// A time key: how long after the end of its period (`Date`: its day, `Hour`: its hour)
    /// a partition arrives.
    LagAfterPeriod(KeyKind),
    /// An int key: the time between one key's arrival and the next key's, and where the
    /// history ended (the last key, and when it arrived).
    GapBetweenKeys { last: Key, last_at_ns: i64 },
}

/// A dataset's cadence: the median and 90th percentile of what [`Measure`] measures, over the
/// arrivals it learned from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cadence {
    pub measure: Measure,
    /// How many arrivals it learned from (at most [`WINDOW`]; [`RECENT`] after a change).
    pub arrivals: usize,
    pub median_ns: i64,
    pub p90_ns: i64,
    /// Weekdays on which a time-keyed dataset's partitions do not land (none in a history that
    /// lands on every other weekday at least twice): not expected then. In week order.
    pub never_on: Vec<Weekday>,
    /// The latest arrivals left the window's cadence: only they were used.
    pub changed: bool,
    /// The latest key it learned from.
    pub last_key: Key,
}

/// When one partition is expected: at `at_ns` (the median), surely by `by_ns` (the p90).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Expected {
    pub at_ns: i64,
    pub by_ns: i64,
}

/// Why no cadence could be learned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NoCadence {
    #[error("{have} arrival{s} recorded, {MIN_ARRIVALS} needed to predict", s = if *have == 1 { "" } else { "s" })]
    TooFewArrivals { have: usize },
}

/// Learns a cadence from `arrivals` (in any order; all of one [`KeyKind`]): the latest
/// [`WINDOW`] by key.
pub fn learn(arrivals: &[Arrival]) -> Result<Cadence, NoCadence> {
    let mut sorted: Vec<Arrival> = arrivals.to_vec();
    // By key, then time: any order of the same history gives the same cadence.
    sorted.sort_by_key(|a| (a.key, a.at_ns));
    sorted.dedup_by_key(|a| a.key);
    if sorted.len() < MIN_ARRIVALS {
        return Err(NoCadence::TooFewArrivals { have: sorted.len() });
    }
    let window = &sorted[sorted.len().saturating_sub(WINDOW)..];
    let last = *window.last().expect("at least MIN_ARRIVALS");
    let (measure, values) = match last.key.kind.period_ns() {
        Some(_) => (
            Measure::LagAfterPeriod(last.key.kind),
            window
                .iter()
                .map(|a| a.at_ns - a.key.period_end_ns().unwrap_or(a.at_ns))
                .collect::<Vec<i64>>(),
        ),
        None => (
            Measure::GapBetweenKeys {
                last: last.key,
                last_at_ns: last.at_ns,
            },
            window
                .windows(2)
                .map(|w| (w[1].at_ns - w[0].at_ns) / (w[1].key.n - w[0].key.n).max(1))
                .collect(),
        ),
    };
    let (values, changed) = recent_if_changed(&values);
    Ok(Cadence {
        measure,
        arrivals: if changed { values.len() } else { window.len() },
        median_ns: quantile(values, 0.5),
        p90_ns: quantile(values, 0.9),
        never_on: never_on(window),
        changed,
        last_key: last.key,
    })
}

/// The latest [`RECENT`] values when their median left the whole series' by more than twice its
/// median absolute deviation and more than ten minutes; else the whole series.
fn recent_if_changed(values: &[i64]) -> (&[i64], bool) {
    if values.len() < RECENT * 2 {
        return (values, false);
    }
    let recent = &values[values.len() - RECENT..];
    let whole = quantile(values, 0.5);
    let deviations: Vec<i64> = values.iter().map(|v| (v - whole).abs()).collect();
    let mad = quantile(&deviations, 0.5);
    let moved = (quantile(recent, 0.5) - whole).abs();
    if moved > 2 * mad && moved > MIN_CHANGE_NS {
        (recent, true)
    } else {
        (values, false)
    }
}

/// The weekdays a time-keyed history never lands on while it lands on every other at least
/// twice, and spans at least two weeks (so an hourly window of a day says nothing of weekdays).
fn never_on(window: &[Arrival]) -> Vec<Weekday> {
    let (Some(first), Some(last)) = (window.first(), window.last()) else {
        return Vec::new();
    };
    let days = |k: Key| match k.kind {
        KeyKind::Hour => k.n.div_euclid(24),
        _ => k.n,
    };
    if first.key.kind == KeyKind::Int || days(last.key) - days(first.key) < 14 {
        return Vec::new();
    }
    let mut count = [0usize; 7];
    for a in window {
        if let Some(d) = a.key.weekday() {
            count[d.num_days_from_monday() as usize] += 1;
        }
    }
    if count.contains(&1) {
        return Vec::new();
    }
    WEEK.iter()
        .zip(count)
        .filter(|(_, n)| *n == 0)
        .map(|(d, _)| *d)
        .collect()
}

const WEEK: [Weekday; 7] = [
    Weekday::Mon,
    Weekday::Tue,
    Weekday::Wed,
    Weekday::Thu,
    Weekday::Fri,
    Weekday::Sat,
    Weekday::Sun,
];

/// The `q` quantile of `values` (linear between ranks); 0 of none.
fn quantile(values: &[i64], q: f64) -> i64 {
    let mut sorted = values.to_vec();
    sorted.sort_unstable();
    if sorted.is_empty() {
        return 0;
    }
    let rank = q * (sorted.len() - 1) as f64;
    let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
    let (a, b) = (sorted[lo], sorted[hi]);
    if a == b {
        return a;
    }
    a + ((b - a) as f64 * (rank - lo as f64)).round() as i64
}

impl Cadence {
    /// When partition `key` is expected; `None` on a weekday it does not land on.
    pub fn expect(&self, key: Key) -> Option<Expected> {
        if key.weekday().is_some_and(|d| self.never_on.contains(&d)) {
            return None;
        }
        match self.measure {
            Measure::LagAfterPeriod(_) => {
                let end = key.period_end_ns()?;
                Some(Expected {
                    at_ns: end.saturating_add(self.median_ns),
                    by_ns: end.saturating_add(self.p90_ns),
                })
            }
            Measure::GapBetweenKeys { last, last_at_ns } => {
                let steps = (key.n - last.n).max(1);
                Some(Expected {
                    at_ns: last_at_ns.saturating_add(self.median_ns.saturating_mul(steps)),
                    by_ns: last_at_ns.saturating_add(self.p90_ns.saturating_mul(steps)),
                })
            }
        }
    }

    /// The first key after `key` that is expected at all (a time key skips the weekdays it
    /// never lands on).
    pub fn next_key(&self, key: Key) -> Key {
        let mut next = key.offset(1);
        for _ in 0..7 * 24 {
            if !next.weekday().is_some_and(|d| self.never_on.contains(&d)) {
                break;
            }
            next = next.offset(1);
        }
        next
    }

    /// The cadence in words: "12 arrivals, median lag 2 h 10 m after its day, p90 2 h 40 m;
    /// never on Sat, Sun".
    pub fn explain(&self) -> String {
        let mut out = format!("{} arrivals, ", self.arrivals);
        match self.measure {
            Measure::LagAfterPeriod(kind) => {
                let period = if kind == KeyKind::Hour { "hour" } else { "day" };
                out.push_str(&format!(
                    "median lag {} its {period}, p90 {}",
                    relative(self.median_ns),
                    span(self.p90_ns)
                ));
            }
            Measure::GapBetweenKeys { .. } => out.push_str(&format!(
                "one key every {} (median), p90 {}",
                span(self.median_ns),
                span(self.p90_ns)
            )),
        }
        if !self.never_on.is_empty() {
            let days: Vec<String> = self.never_on.iter().map(|d| d.to_string()).collect();
            out.push_str(&format!("; never on {}", days.join(", ")));
        }
        if self.changed {
            out.push_str(&format!(
                "; its cadence changed: only the latest {} used",
                self.arrivals
            ));
        }
        out
    }
}

/// "2 h 10 m after", or "5 m before" the end of a period.
fn relative(ns: i64) -> String {
    if ns < 0 {
        format!("{} before the end of", span(-ns))
    } else {
        format!("{} after", span(ns))
    }
}

/// A duration in words, to the two largest units: "3 d 2 h", "2 h 10 m", "4 m 5 s", "800 ms".
pub fn span(ns: i64) -> String {
    let ns = ns.unsigned_abs();
    let ms = ns / 1_000_000;
    if ms < 1000 {
        return format!("{ms} ms");
    }
    let s = ms / 1000;
    let units = [(86_400, "d"), (3600, "h"), (60, "m"), (1, "s")];
    let Some(i) = units.iter().position(|(n, _)| s >= *n) else {
        return format!("{s} s");
    };
    let (big, big_name) = units[i];
    let mut out = format!("{} {big_name}", s / big);
    if let Some((small, small_name)) = units.get(i + 1) {
        let rest = (s % big) / small;
        if rest > 0 {
            out.push_str(&format!(" {rest} {small_name}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn day(d: &str) -> Key {
        KeyKind::Date.parse(d).unwrap()
    }

    /// Daily arrivals of `days` days from 2026-01-05 (a Monday), each `lag` after its day.
    fn daily(days: i64, lag: i64, skip: &[Weekday]) -> Vec<Arrival> {
        (0..days)
            .map(|i| day("2026-01-05").offset(i))
            .filter(|k| !skip.contains(&k.weekday().unwrap()))
            .map(|key| Arrival {
                key,
                at_ns: key.period_end_ns().unwrap() + lag,
            })
            .collect()
    }

    #[test]
    fn a_weekday_history_is_not_expected_at_weekends_and_says_so() {
        let lag = 2 * NS_PER_HOUR + 10 * 60 * NS_PER_S;
        let c = learn(&daily(28, lag, &[Weekday::Sat, Weekday::Sun])).unwrap();
        assert_eq!(c.never_on, [Weekday::Sat, Weekday::Sun]);
        assert_eq!(
            c.explain(),
            "20 arrivals, median lag 2 h 10 m after its day, p90 2 h 10 m; never on Sat, Sun"
        );
        let saturday = day("2026-02-07");
        assert_eq!(c.expect(saturday), None);
        assert_eq!(c.next_key(day("2026-02-06")), day("2026-02-09"));
        let monday = c.expect(day("2026-02-09")).unwrap();
        assert_eq!(
            monday.at_ns,
            day("2026-02-09").period_end_ns().unwrap() + lag
        );
    }

    #[test]
    fn keys_render_as_they_parse() {
        for (kind, text) in [
            (KeyKind::Date, "2026-02-09"),
            (KeyKind::Hour, "2026-02-09T07"),
            (KeyKind::Int, "-42"),
        ] {
            assert_eq!(kind.parse(text).unwrap().render().as_deref(), Some(text));
        }
    }

    #[test]
    fn too_little_history_says_how_much() {
        let err = learn(&daily(2, 0, &[])).unwrap_err();
        assert_eq!(err.to_string(), "2 arrivals recorded, 3 needed to predict");
    }

    #[test]
    fn int_keys_expect_the_next_key_one_gap_after_the_last() {
        let arrivals: Vec<Arrival> = (1..=4)
            .map(|i| Arrival {
                key: KeyKind::Int.parse(&i.to_string()).unwrap(),
                at_ns: i * 3 * NS_PER_S,
            })
            .collect();
        let c = learn(&arrivals).unwrap();
        let next = c.next_key(c.last_key);
        assert_eq!(next.n, 5);
        assert_eq!(c.expect(next).unwrap().at_ns, 15 * NS_PER_S);
        assert_eq!(
            c.explain(),
            "4 arrivals, one key every 3 s (median), p90 3 s"
        );
    }

    #[test]
    fn a_recent_change_of_cadence_uses_only_the_latest() {
        let mut history = daily(20, NS_PER_HOUR, &[]);
        for a in history.iter_mut().skip(15) {
            a.at_ns += 3 * NS_PER_HOUR;
        }
        let c = learn(&history).unwrap();
        assert!(c.changed);
        assert_eq!(c.median_ns, 4 * NS_PER_HOUR);
        assert!(c
            .explain()
            .ends_with("its cadence changed: only the latest 5 used"));
    }

    #[test]
    fn one_outlier_moves_neither_the_median_nor_the_change() {
        let mut history = daily(20, NS_PER_HOUR, &[]);
        history[19].at_ns += 10 * NS_PER_HOUR;
        let c = learn(&history).unwrap();
        assert!(!c.changed);
        assert_eq!(c.median_ns, NS_PER_HOUR);
    }

    #[test]
    fn spans_read_as_people_write_them() {
        assert_eq!(span(800_000_000), "800 ms");
        assert_eq!(span(65 * NS_PER_S), "1 m 5 s");
        assert_eq!(span(2 * NS_PER_HOUR), "2 h");
        assert_eq!(span(NS_PER_DAY + 2 * NS_PER_HOUR), "1 d 2 h");
    }

    fn history() -> impl Strategy<Value = Vec<Arrival>> {
        proptest::collection::vec((0i64..60, -NS_PER_HOUR..6 * NS_PER_HOUR), 3..40).prop_map(
            |days| {
                days.into_iter()
                    .map(|(d, lag)| {
                        let key = day("2026-01-01").offset(d);
                        Arrival {
                            key,
                            at_ns: key.period_end_ns().unwrap() + lag,
                        }
                    })
                    .collect()
            },
        )
    }

    proptest! {
        #[test]
        fn p90_is_never_before_the_median(arrivals in history()) {
            if let Ok(c) = learn(&arrivals) {
                prop_assert!(c.p90_ns >= c.median_ns);
            }
        }

        #[test]
        fn a_constant_lag_is_predicted_exactly(lag in -NS_PER_HOUR..NS_PER_DAY, n in 3i64..40) {
            let c = learn(&daily(n, lag, &[])).unwrap();
            prop_assert_eq!((c.median_ns, c.p90_ns), (lag, lag));
            let next = c.next_key(c.last_key);
            let e = c.expect(next).unwrap();
            prop_assert_eq!(e.at_ns, next.period_end_ns().unwrap() + lag);
        }

        #[test]
        fn the_order_of_the_history_changes_nothing(
            arrivals in history(),
            seed in any::<u64>(),
        ) {
            let mut shuffled = arrivals.clone();
            // A deterministic shuffle from the seed (the core has no randomness of its own).
            let mut state = seed | 1;
            for i in (1..shuffled.len()).rev() {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                shuffled.swap(i, (state % (i as u64 + 1)) as usize);
            }
            prop_assert_eq!(learn(&arrivals), learn(&shuffled));
        }
    }
}
