//! Recurring wants (`[[want]]`): refs relative to today, expanded each day; and how long a want
//! whose build failed waits before it is tried again. No clock here: the caller says what today
//! is.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::NaiveDate;

use crate::pattern::{format_date, parse_date};

/// A `[[want]]` of the graph file: every day, these refs (relative to that day) are wanted.
#[derive(Debug, Clone)]
pub struct RecurringWant {
    pub name: String,
    /// Templates such as `summary/category={category=*}/date={today-1d}`.
    pub refs: Vec<String>,
    /// How long after a partition's day ends it must be live.
    pub sla: Option<Duration>,
    /// How long each day's want stands.
    pub ttl: Duration,
}

/// Expands a want template for `today`: `{today}`, `{today-Nd}`, `{today+Nd}` become dates and
/// `{field=*}` every value of `domains[field]`.
pub fn expand(
    template: &str,
    today: NaiveDate,
    domains: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, String> {
    let mut out = vec![String::new()];
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close = rest[open..]
            .find('}')
            .map(|c| open + c)
            .ok_or_else(|| format!("`{template}` has a `{{` without its `}}`"))?;
        for o in &mut out {
            o.push_str(&rest[..open]);
        }
        let values = values_of(&rest[open + 1..close], today, domains)
            .map_err(|e| format!("`{template}`: {e}"))?;
        out = out
            .iter()
            .flat_map(|o| values.iter().map(move |v| format!("{o}{v}")))
            .collect();
        rest = &rest[close + 1..];
    }
    for o in &mut out {
        o.push_str(rest);
    }
    Ok(out)
}

fn values_of(
    expr: &str,
    today: NaiveDate,
    domains: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, String> {
    if let Some(field) = expr.strip_suffix("=*") {
        return domains
            .get(field)
            .cloned()
            .ok_or_else(|| format!("`{{{expr}}}` names no domain `{field}` in [graph.domains]"));
    }
    let Some(offset) = expr.strip_prefix("today") else {
        return Err(format!(
            "`{{{expr}}}` is neither `{{today}}`, `{{today-1d}}` nor `{{field=*}}`"
        ));
    };
    let days: i64 = match offset {
        "" => 0,
        o => {
            let (sign, n) = o.split_at(1);
            let n: i64 = n
                .strip_suffix('d')
                .and_then(|n| n.parse().ok())
                .ok_or_else(|| format!("`{{{expr}}}`: write offsets in days, like `today-1d`"))?;
            match sign {
                "-" => -n,
                "+" => n,
                _ => return Err(format!("`{{{expr}}}`: an offset starts with + or -")),
            }
        }
    };
    let date = today
        .checked_add_signed(chrono::TimeDelta::days(days))
        .ok_or_else(|| format!("`{{{expr}}}` is out of range"))?;
    Ok(vec![format_date(date)])
}

/// The longest a want whose builds keep failing waits between attempts (unless the base interval
/// is longer).
pub const MAX_RETRY_DELAY: Duration = Duration::from_secs(3600);

/// How long after its `failures`-th failed build in a row (1 for the first) a want is tried
/// again: `base`, doubled for each further failure, at most [`MAX_RETRY_DELAY`] (or `base`, if
/// that is longer).
pub fn retry_delay(base: Duration, failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(31);
    base.saturating_mul(1 << doublings)
        .min(MAX_RETRY_DELAY.max(base))
}

/// The end of a partition's day, in ns since the epoch: the date in its ref (the first
/// `date=YYYY-MM-DD`, or the first date-shaped path segment) plus one day.
pub fn day_end_ns(r: &str) -> Option<i64> {
    let date = r
        .split('/')
        .filter_map(|seg| seg.rsplit('=').next())
        .find_map(parse_date)?;
    let end = date.succ_opt()?.and_hms_opt(0, 0, 0)?;
    end.and_utc().timestamp_nanos_opt()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expands_dates_and_domains() {
        let domains = BTreeMap::from([("c".to_string(), vec!["a".to_string(), "b".to_string()])]);
        let today = parse_date("2026-03-01").unwrap();
        assert_eq!(
            expand("s/c={c=*}/date={today-1d}", today, &domains).unwrap(),
            ["s/c=a/date=2026-02-28", "s/c=b/date=2026-02-28"]
        );
        assert_eq!(
            expand("x/{today}", today, &domains).unwrap(),
            ["x/2026-03-01"]
        );
        assert_eq!(
            expand("x/{today+2d}", today, &domains).unwrap(),
            ["x/2026-03-03"]
        );
        for bad in ["x/{yesterday}", "x/{today-1w}", "x/{z=*}", "x/{today"] {
            assert!(expand(bad, today, &domains).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_failed_want_waits_the_base_then_twice_as_long_each_time_up_to_an_hour() {
        let minute = Duration::from_secs(60);
        let waits: Vec<u64> = (1..=8).map(|n| retry_delay(minute, n).as_secs()).collect();
        assert_eq!(waits, [60, 120, 240, 480, 960, 1920, 3600, 3600]);
        assert_eq!(retry_delay(minute, 0), minute);
        assert_eq!(retry_delay(minute, u32::MAX), MAX_RETRY_DELAY);
        let short = Duration::from_millis(500);
        assert_eq!(retry_delay(short, 3), Duration::from_secs(2));
        let long = Duration::from_secs(7200);
        assert_eq!(retry_delay(long, 5), long);
    }

    #[test]
    fn a_day_ends_at_midnight_after_it() {
        let end = day_end_ns("summary/c=a/date=2026-03-01").unwrap();
        assert_eq!(end, 1_772_409_600 * 1_000_000_000);
        assert_eq!(day_end_ns("x/2026-03-01"), Some(end));
        assert_eq!(day_end_ns("x/no-date"), None);
    }
}
