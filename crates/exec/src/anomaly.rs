//! Anomaly checks' arithmetic, purely: the band a metric is expected in, learned from the values
//! of earlier partitions, and the verdict on a new value.
//!
//! The band is robust: its centre is the median of the last `window` values and its half-width
//! `k` robust standard deviations, estimated as 1.4826 × the median absolute deviation (MAD), so
//! one earlier outlier moves it little. A band is never narrower than ±[`FLOOR`] of the median:
//! a metric that never varied (MAD 0, a table of exactly 250 rows each day) would otherwise fail
//! on any change at all. Below [`MIN_HISTORY`] values nothing is judged: the check passes, saying
//! it is still learning. Which values train it (the last `window` partitions of the output, none
//! that failed a check) is the caller's query; this module only counts.

use databuild_core::MetricRule;

/// How many earlier values a band needs before it judges.
pub const MIN_HISTORY: usize = 5;

/// The narrowest band, as a fraction of the median either side.
pub const FLOOR: f64 = 0.1;

/// 1 / Φ⁻¹(3/4): the MAD of a normal distribution times this is its standard deviation.
const MAD_TO_SIGMA: f64 = 1.4826;

/// The range a metric's value is expected in.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Band {
    pub median: f64,
    pub low: f64,
    pub high: f64,
    /// How many values it was learned from.
    pub from: usize,
}

impl Band {
    /// The band of `values` (at least one) at `k` robust standard deviations.
    pub fn learn(values: &[f64], k: f64) -> Option<Band> {
        let centre = median(values.to_vec())?;
        let mad = median(values.iter().map(|v| (v - centre).abs()).collect())?;
        let half = (k * MAD_TO_SIGMA * mad).max(FLOOR * centre.abs());
        Some(Band {
            median: centre,
            low: centre - half,
            high: centre + half,
            from: values.len(),
        })
    }

    pub fn contains(&self, value: f64) -> bool {
        self.low <= value && value <= self.high
    }
}

/// What an anomaly check says of one value.
#[derive(Debug, Clone, PartialEq)]
pub enum Verdict {
    /// Too few earlier values to judge: passes.
    Learning {
        have: usize,
    },
    Inside(Band),
    Outside(Band),
    /// The run recorded no such metric: fails, since a check that cannot see its metric would
    /// pass anything.
    Missing,
}

impl Verdict {
    /// The verdict on `value` (`None`: the run has no such metric), given the earlier values
    /// `history` (the caller passes at most the rule's window of them).
    pub fn of(value: Option<f64>, history: &[f64], rule: &MetricRule) -> Verdict {
        let Some(value) = value else {
            return Verdict::Missing;
        };
        if history.len() < MIN_HISTORY {
            return Verdict::Learning {
                have: history.len(),
            };
        }
        let band = Band::learn(history, rule.k).expect("a non-empty history");
        if band.contains(value) {
            Verdict::Inside(band)
        } else {
            Verdict::Outside(band)
        }
    }

    pub fn passed(&self) -> bool {
        matches!(self, Verdict::Learning { .. } | Verdict::Inside(_))
    }

    /// What the check's result says: the value and the band, or why there is none.
    pub fn message(&self, metric: &str, value: Option<f64>) -> String {
        let v = value.map_or_else(String::new, number);
        match self {
            Verdict::Missing => format!(
                "the run recorded no `{metric}` for this partition: report it (`\"metrics\": {{\"<ref>\": {{\"{metric}\": …}}}}`) or name a resource"
            ),
            Verdict::Learning { have } => format!(
                "{metric} = {v}; learning: {have} of {MIN_HISTORY} partitions"
            ),
            Verdict::Inside(b) | Verdict::Outside(b) => format!(
                "{metric} = {v} {} the expected {}–{} (median {} of the last {} partitions)",
                if self.passed() { "inside" } else { "outside" },
                number(b.low),
                number(b.high),
                number(b.median),
                b.from
            ),
        }
    }

    /// What the check's result records beside its message (`metrics` of the check event), so
    /// charts can draw the band and mark the anomaly without recomputing it.
    pub fn detail(&self, value: Option<f64>) -> serde_json::Value {
        let mut d = serde_json::Map::new();
        if let Some(v) = value {
            d.insert("value".into(), v.into());
        }
        if let Verdict::Inside(b) | Verdict::Outside(b) = self {
            d.insert("median".into(), b.median.into());
            d.insert("low".into(), b.low.into());
            d.insert("high".into(), b.high.into());
            d.insert("from".into(), b.from.into());
        }
        serde_json::Value::Object(d)
    }
}

/// The median of `values`; `None` when there are none.
pub fn median(mut values: Vec<f64>) -> Option<f64> {
    quantile(&mut values, 0.5)
}

/// The `q` quantile (0..=1) of `values`, interpolated between the two nearest ranks.
pub fn quantile(values: &mut [f64], q: f64) -> Option<f64> {
    if values.is_empty() {
        return None;
    }
    values.sort_by(f64::total_cmp);
    let at = q.clamp(0.0, 1.0) * (values.len() - 1) as f64;
    let (lo, hi) = (at.floor() as usize, at.ceil() as usize);
    Some(values[lo] + (values[hi] - values[lo]) * (at - lo as f64))
}

/// A number as people read it: whole numbers without decimals, others to three significant
/// decimals at most.
pub fn number(v: f64) -> String {
    if v.fract() == 0.0 && v.abs() < 1e15 {
        format!("{v:.0}")
    } else {
        let s = format!("{v:.3}");
        s.trim_end_matches('0').trim_end_matches('.').to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn rule() -> MetricRule {
        MetricRule {
            metric: "rows".into(),
            window: 14,
            k: 3.0,
        }
    }

    #[test]
    fn a_value_far_from_the_usual_fails_with_the_band_in_its_message() {
        let history = [250.0, 240.0, 260.0, 255.0, 245.0, 250.0, 248.0];
        let v = Verdict::of(Some(12.0), &history, &rule());
        assert!(!v.passed());
        assert_eq!(
            v.message("rows", Some(12.0)),
            "rows = 12 outside the expected 225–275 (median 250 of the last 7 partitions)"
        );
        let v = Verdict::of(Some(262.0), &history, &rule());
        assert!(v.passed(), "{v:?}");
    }

    #[test]
    fn too_little_history_passes_while_learning_and_a_missing_value_fails() {
        let v = Verdict::of(Some(1.0), &[250.0, 250.0, 250.0], &rule());
        assert!(v.passed());
        assert_eq!(
            v.message("rows", Some(1.0)),
            "rows = 1; learning: 3 of 5 partitions"
        );
        let v = Verdict::of(None, &[250.0; 10], &rule());
        assert!(!v.passed());
        assert!(v.message("rows", None).contains("recorded no `rows`"));
    }

    #[test]
    fn a_constant_metric_keeps_a_floor_of_ten_percent() {
        let b = Band::learn(&[250.0; 14], 3.0).unwrap();
        assert_eq!((b.low, b.high), (225.0, 275.0));
        assert!(Verdict::of(Some(270.0), &[250.0; 14], &rule()).passed());
        assert!(!Verdict::of(Some(280.0), &[250.0; 14], &rule()).passed());
    }

    #[test]
    fn one_outlier_in_the_history_hardly_moves_the_band() {
        let mut history = vec![100.0, 102.0, 98.0, 101.0, 99.0, 100.0, 103.0, 97.0];
        let before = Band::learn(&history, 3.0).unwrap();
        history.push(1e9);
        let after = Band::learn(&history, 3.0).unwrap();
        assert!((after.median - before.median).abs() <= 1.0);
        assert!(after.high < 120.0, "{after:?}");
    }

    #[test]
    fn quantiles_interpolate_and_numbers_read_plainly() {
        assert_eq!(quantile(&mut [1.0, 2.0, 3.0, 4.0], 0.5), Some(2.5));
        assert_eq!(quantile(&mut [5.0], 0.95), Some(5.0));
        assert_eq!(quantile(&mut [], 0.5), None);
        assert_eq!(number(250.0), "250");
        assert_eq!(number(0.12345), "0.123");
        assert_eq!(number(2.5), "2.5");
    }

    proptest! {
        #[test]
        fn the_band_holds_the_median_and_every_history_value_is_judged_in_range_of_it(
            values in prop::collection::vec(-1e6f64..1e6, 1..40),
            k in 0.5f64..6.0,
        ) {
            let b = Band::learn(&values, k).unwrap();
            prop_assert!(b.low <= b.median && b.median <= b.high);
            prop_assert!(b.contains(b.median));
            let (min, max) = values.iter().fold((f64::MAX, f64::MIN), |(a, z), v| (a.min(*v), z.max(*v)));
            prop_assert!(min <= b.median && b.median <= max);
            prop_assert_eq!(b.from, values.len());
        }

        #[test]
        fn a_wider_k_never_fails_what_a_narrower_one_passes(
            values in prop::collection::vec(0f64..1e4, MIN_HISTORY..30),
            value in 0f64..2e4,
            k in 0.5f64..5.0,
        ) {
            let narrow = MetricRule { k, ..rule() };
            let wide = MetricRule { k: k * 2.0, ..rule() };
            if Verdict::of(Some(value), &values, &narrow).passed() {
                prop_assert!(Verdict::of(Some(value), &values, &wide).passed());
            }
        }

        #[test]
        fn the_order_of_the_history_does_not_matter(
            mut values in prop::collection::vec(0f64..1e4, 1..30),
        ) {
            let a = Band::learn(&values, 3.0).unwrap();
            values.reverse();
            prop_assert_eq!(a, Band::learn(&values, 3.0).unwrap());
        }
    }
}
