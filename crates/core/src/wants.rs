//! Recurring wants (`[[want]]`): refs relative to now, expanded each day (each hour when a ref
//! names `{now}`); and how long a want whose build failed waits before it is tried again. No
//! clock here: the caller says what time it is.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::NaiveDateTime;

use crate::pattern::{days_since_epoch, format_date, parse_date, parse_hour, push_hour};

/// A `[[want]]` of the graph file: every day (or hour), these refs (relative to then) are wanted.
#[derive(Debug, Clone)]
pub struct RecurringWant {
    pub name: String,
    /// Templates such as `summary/category={category=*}/date={today-1d}`.
    pub refs: Vec<String>,
    /// How long after a partition's day ends it must be live.
    pub sla: Option<Duration>,
    /// How long each day's want stands.
    pub ttl: Duration,
    /// Each instance is due by this time (UTC) of the day it is made.
    pub by: Option<chrono::NaiveTime>,
}

/// Why a want template does not expand.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("`{template}` has a `{{` without its `}}`")]
    Unclosed { template: String },
    #[error("`{template}`: {problem}")]
    Placeholder {
        template: String,
        problem: PlaceholderError,
    },
}

/// Why one `{...}` of a want template does not expand (`expr` is what the braces hold).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceholderError {
    #[error("`{{{expr}}}` names no domain `{field}` in [graph.domains]")]
    NoSuchDomain { expr: String, field: String },
    #[error("`{{{expr}}}` is neither `{{today}}`, `{{today-1d}}`, `{{now}}`, `{{now-1h}}` nor `{{field=*}}`")]
    Unknown { expr: String },
    #[error("`{{{expr}}}`: write offsets in hours or days, like `now-1h` or `now-1d`")]
    BadHourOffset { expr: String },
    #[error("`{{{expr}}}`: write offsets in days, like `today-1d`")]
    BadDayOffset { expr: String },
    #[error("`{{{expr}}}`: an offset starts with + or -")]
    NoSign { expr: String },
    #[error("`{{{expr}}}` is out of range")]
    OutOfRange { expr: String },
}

/// Expands a want template at `now` (UTC): `{today}`, `{today-Nd}`, `{today+Nd}` become dates,
/// `{now}`, `{now-Nh}`, `{now+Nh}`, `{now-Nd}` hours (`YYYY-MM-DDTHH`, the hour `now` is in),
/// and `{field=*}` every value of `domains[field]`.
pub fn expand(
    template: &str,
    now: NaiveDateTime,
    domains: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, TemplateError> {
    let mut out = vec![String::new()];
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        let close =
            rest[open..]
                .find('}')
                .map(|c| open + c)
                .ok_or_else(|| TemplateError::Unclosed {
                    template: template.to_string(),
                })?;
        for o in &mut out {
            o.push_str(&rest[..open]);
        }
        let values = values_of(&rest[open + 1..close], now, domains).map_err(|problem| {
            TemplateError::Placeholder {
                template: template.to_string(),
                problem,
            }
        })?;
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
    now: NaiveDateTime,
    domains: &BTreeMap<String, Vec<String>>,
) -> Result<Vec<String>, PlaceholderError> {
    use chrono::Timelike;
    if let Some(field) = expr.strip_suffix("=*") {
        return domains
            .get(field)
            .cloned()
            .ok_or_else(|| PlaceholderError::NoSuchDomain {
                expr: expr.to_string(),
                field: field.to_string(),
            });
    }
    let (hours, offset) = match (expr.strip_prefix("today"), expr.strip_prefix("now")) {
        (Some(offset), _) => (false, offset),
        (_, Some(offset)) => (true, offset),
        _ => {
            return Err(PlaceholderError::Unknown {
                expr: expr.to_string(),
            })
        }
    };
    let steps: i64 = match offset {
        "" => 0,
        o => {
            let (sign, n) = o.split_at(1);
            let units: &[(char, i64)] = if hours {
                &[('h', 1), ('d', 24)]
            } else {
                &[('d', 1)]
            };
            let n: i64 = units
                .iter()
                .find_map(|(unit, scale)| {
                    n.strip_suffix(*unit)?
                        .parse::<i64>()
                        .ok()?
                        .checked_mul(*scale)
                })
                .ok_or_else(|| match hours {
                    true => PlaceholderError::BadHourOffset {
                        expr: expr.to_string(),
                    },
                    false => PlaceholderError::BadDayOffset {
                        expr: expr.to_string(),
                    },
                })?;
            match sign {
                "-" => -n,
                "+" => n,
                _ => {
                    return Err(PlaceholderError::NoSign {
                        expr: expr.to_string(),
                    })
                }
            }
        }
    };
    let out_of_range = || PlaceholderError::OutOfRange {
        expr: expr.to_string(),
    };
    let day = days_since_epoch(now.date());
    let value = if hours {
        let hour = (day * 24 + i64::from(now.hour()))
            .checked_add(steps)
            .ok_or_else(out_of_range)?;
        let mut s = String::with_capacity(13);
        push_hour(&mut s, hour).ok_or_else(out_of_range)?;
        s
    } else {
        let date = crate::pattern::date_from_days(day.checked_add(steps).ok_or_else(out_of_range)?)
            .ok_or_else(out_of_range)?;
        format_date(date)
    };
    Ok(vec![value])
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

/// The end of a partition's period, in ns since the epoch: of the first path segment (or
/// `key=value`'s value) that is a date or an hour, the next midnight or the next hour.
pub fn period_end_ns(r: &str) -> Option<i64> {
    const HOUR_NS: i64 = 3_600 * 1_000_000_000;
    let hours = r
        .split('/')
        .filter_map(|seg| seg.rsplit('=').next())
        .find_map(|v| match parse_date(v) {
            Some(d) => Some(days_since_epoch(d) * 24 + 24),
            None => Some(parse_hour(v)? + 1),
        })?;
    hours.checked_mul(HOUR_NS)
}

/// A want's deadline the user typed that is not one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{0}` is not a deadline: write an RFC 3339 time (2026-03-01T07:00:00Z) or a time of day (07:00, UTC: the next one)")]
pub struct DeadlineError(pub String);

/// `HH:MM`, a time of day (UTC).
pub fn time_of_day(text: &str) -> Result<chrono::NaiveTime, DeadlineError> {
    chrono::NaiveTime::parse_from_str(text, "%H:%M").map_err(|_| DeadlineError(text.to_string()))
}

/// `day` at `t` (UTC), in ns since the epoch.
pub fn at_time_on(day: chrono::NaiveDate, t: chrono::NaiveTime) -> i64 {
    day.and_time(t)
        .and_utc()
        .timestamp_nanos_opt()
        .unwrap_or(i64::MAX)
}

/// A deadline (ns since the epoch): an RFC 3339 time, or `HH:MM`, the next such UTC time after
/// `now_ns`.
pub fn parse_deadline(text: &str, now_ns: i64) -> Result<i64, DeadlineError> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(text) {
        return t
            .timestamp_nanos_opt()
            .ok_or_else(|| DeadlineError(text.to_string()));
    }
    let t = time_of_day(text)?;
    let now = chrono::DateTime::from_timestamp_nanos(now_ns);
    let today = at_time_on(now.date_naive(), t);
    Ok(if today > now_ns {
        today
    } else {
        today + 86_400 * 1_000_000_000
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_deadline_is_rfc3339_or_the_next_time_of_day() {
        let at =
            |t: &str| parse_deadline(t, 1_772_409_600 * 1_000_000_000 + 8 * 3_600 * 1_000_000_000);
        // 2026-03-02T08:00Z: 07:00 is tomorrow's, 09:30 today's.
        assert_eq!(
            at("07:00").unwrap(),
            (1_772_409_600 + 86_400 + 7 * 3_600) * 1_000_000_000
        );
        assert_eq!(
            at("09:30").unwrap(),
            (1_772_409_600 + 9 * 3_600 + 1_800) * 1_000_000_000
        );
        assert_eq!(
            at("2026-03-02T07:00:00Z").unwrap(),
            (1_772_409_600 + 7 * 3_600) * 1_000_000_000
        );
        assert!(at("7am").unwrap_err().to_string().contains("RFC 3339"));
    }

    #[test]
    fn expands_dates_and_domains() {
        let domains = BTreeMap::from([("c".to_string(), vec!["a".to_string(), "b".to_string()])]);
        let today = parse_date("2026-03-01")
            .unwrap()
            .and_hms_opt(0, 30, 0)
            .unwrap();
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
        for bad in [
            "x/{yesterday}",
            "x/{today-1w}",
            "x/{today-1h}",
            "x/{now-1}",
            "x/{now-1m}",
            "x/{z=*}",
            "x/{today",
        ] {
            assert!(expand(bad, today, &domains).is_err(), "{bad}");
        }
    }

    #[test]
    fn now_is_the_current_hour_and_offsets_cross_midnight() {
        let domains = BTreeMap::new();
        let now = parse_date("2026-12-02")
            .unwrap()
            .and_hms_opt(0, 59, 59)
            .unwrap();
        let one = |t: &str| expand(t, now, &domains).unwrap();
        assert_eq!(one("h/{now}"), ["h/2026-12-02T00"]);
        assert_eq!(one("h/{now-1h}"), ["h/2026-12-01T23"]);
        assert_eq!(one("h/{now-24h}"), ["h/2026-12-01T00"]);
        assert_eq!(one("h/{now-1d}"), ["h/2026-12-01T00"]);
        assert_eq!(one("h/{now+1h}"), ["h/2026-12-02T01"]);
        assert_eq!(
            one("d/{today}/h/{now-1h}"),
            ["d/2026-12-02/h/2026-12-01T23"]
        );
        let new_year = parse_date("2027-01-01")
            .unwrap()
            .and_hms_opt(0, 0, 0)
            .unwrap();
        assert_eq!(
            expand("h/{now-1h}", new_year, &domains).unwrap(),
            ["h/2026-12-31T23"]
        );
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
    fn a_day_ends_at_midnight_after_it_and_an_hour_at_the_next_hour() {
        let end = period_end_ns("summary/c=a/date=2026-03-01").unwrap();
        assert_eq!(end, 1_772_409_600 * 1_000_000_000);
        assert_eq!(period_end_ns("x/2026-03-01"), Some(end));
        assert_eq!(period_end_ns("x/no-date"), None);
        assert_eq!(period_end_ns("h/hour=2026-03-01T23"), Some(end));
        assert_eq!(
            period_end_ns("h/2026-03-02T00"),
            Some(end + 3_600 * 1_000_000_000)
        );
    }
}
