//! Brace expansion of user refs, as a shell would do it but aware of dates and of the graph:
//! `x/cat={a,b}` gives 2 refs, `reviews/date={2020-01-01..2020-01-31}` 31, `n/{1..3}` 3,
//! `m/month={2022-01..2022-03}` 3 months, `w/week={2022-W01..2022-W04}` 4 ISO weeks, and
//! `h/hour={2026-12-01T22..2026-12-02T01}` 4 hours (UTC, across midnight),
//! `x/cat={category=*}` every value of the graph's domain `category` (as in input templates).
//! Several braces give their cartesian product.
//!
//! Every entry point (the CLI, the API, the dashboard) expands a request's words with
//! [`expand_all`], which counts what the words would give before it allocates anything, and
//! refuses a request that would name more refs than its cap.

use std::collections::BTreeMap;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use chrono::{Datelike, NaiveDate};

use crate::pattern::{format_date, format_hour, parse_date, parse_hour};

/// How many refs one request may name unless the operator raises it (`DATABUILD_MAX_REFS`).
pub const DEFAULT_MAX_REFS: usize = 1_000_000;

/// The most bytes the refs of one request may take once expanded: with the cap on their number,
/// this bounds what an expansion allocates however long the text around a brace is.
pub const MAX_EXPANDED_BYTES: u128 = 256 << 20;

/// The value lists `{field=*}` expands over: a graph's `[graph.domains]`.
pub type Domains = BTreeMap<String, Vec<String>>;

/// No domains (expansion outside a graph).
pub static NO_DOMAINS: Domains = BTreeMap::new();

/// How much of a word an error quotes.
const QUOTED: usize = 200;

/// A word as an error quotes it: cut after [`QUOTED`] characters.
fn quoted(word: &str) -> String {
    match word.char_indices().nth(QUOTED) {
        Some((at, _)) => format!("{}…", &word[..at]),
        None => word.to_string(),
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BraceExpansionError {
    #[error("`{0}` has an unclosed `{{`")]
    Unclosed(String),
    #[error("`{0}` has a `}}` without a matching `{{`")]
    StrayClose(String),
    #[error("`{arg}`: `{{{inner}}}` is neither a list like `{{a,b}}`, a range like `{{2020-01-01..2020-01-31}}`, `{{2022-01..2022-03}}`, `{{2022-W01..2022-W04}}`, `{{2026-12-01T00..2026-12-01T23}}` or `{{1..10}}`, nor a domain like `{{category=*}}`")]
    Unrecognized { arg: String, inner: String },
    #[error("`{arg}`: the graph declares no domain `{field}` for `{{{field}=*}}` ({known}); declare its values under [graph.domains]")]
    UnknownDomain {
        arg: String,
        field: String,
        /// The domains it declares, for the message.
        known: String,
    },
    #[error("`{arg}`: the range `{{{inner}}}` runs backwards")]
    Backwards { arg: String, inner: String },
    #[error("`{word}` would expand to refs of {len} bytes, longer than the {max} a ref may have")]
    TooLong { word: String, len: u128, max: usize },
    #[error("the request would expand to {bytes} bytes of refs, more than the {max} one request may take; narrow the ranges")]
    TooBig { bytes: u128, max: u128 },
    #[error("{what} would name {count} refs, more than the {max} one request may name; narrow the ranges, or raise the cap with DATABUILD_MAX_REFS")]
    TooMany {
        /// The word that went over, or "the request" when only the words together did.
        what: String,
        /// How many refs it would have named (saturating).
        count: u128,
        max: usize,
    },
}

/// Expands every word of one request, refusing the request before expanding anything when the
/// words together would name more than `max` refs.
pub fn expand_all<S: AsRef<str>>(
    words: &[S],
    max: usize,
    domains: &Domains,
) -> Result<Vec<String>, BraceExpansionError> {
    let mut refs = Vec::with_capacity(bounded_count(words, max, domains)?);
    for word in words {
        expand_each(word.as_ref(), domains, |r| {
            refs.push(r.to_string());
            Ok::<_, BraceExpansionError>(())
        })?;
    }
    Ok(refs)
}

/// How many refs `words` name, refused past `max` refs, [`MAX_EXPANDED_BYTES`] or a ref's
/// longest length: checked before any is built.
fn bounded_count<S: AsRef<str>>(
    words: &[S],
    max: usize,
    domains: &Domains,
) -> Result<usize, BraceExpansionError> {
    let (mut total, mut bytes): (u128, u128) = (0, 0);
    for word in words {
        let word = word.as_ref();
        let (count, longest) = count_braces(word, max, domains)?;
        if longest > crate::refs::MAX_REF_LEN as u128 {
            return Err(BraceExpansionError::TooLong {
                word: quoted(word),
                len: longest,
                max: crate::refs::MAX_REF_LEN,
            });
        }
        total = total.saturating_add(count);
        bytes = bytes.saturating_add(count.saturating_mul(longest));
        if total > max as u128 {
            let what = if count > max as u128 {
                format!("`{}`", quoted(word))
            } else {
                "the request".to_string()
            };
            return Err(BraceExpansionError::TooMany {
                what,
                count: total,
                max,
            });
        }
        if bytes > MAX_EXPANDED_BYTES {
            return Err(BraceExpansionError::TooBig {
                bytes,
                max: MAX_EXPANDED_BYTES,
            });
        }
    }
    Ok(total as usize)
}

/// Why the words of a request are not refs: their braces, or a ref they give.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum UserRefError {
    #[error(transparent)]
    Braces(#[from] BraceExpansionError),
    #[error(transparent)]
    Ref(#[from] crate::refs::RefError),
}

/// The refs a user's words name, as every entry point takes them (the CLI, the API, the
/// dashboard): braces expanded within `max` refs, each validated, in order, repeats dropped.
pub fn parse_user_refs<S: AsRef<str>>(
    words: &[S],
    max: usize,
    domains: &Domains,
) -> Result<Vec<crate::PartitionRef>, UserRefError> {
    let count = bounded_count(words, max, domains)?;
    let mut refs: Vec<crate::PartitionRef> = Vec::with_capacity(count);
    // Each ref is built once, straight from the expansion, and looked up by its number in
    // `refs`: a million refs cost their text and 20 bytes each, not copies of them.
    let mut seen: HashTable<u32> = HashTable::with_capacity(count);
    let hash = |r: &str| rustc_hash::FxBuildHasher.hash_one(r);
    for word in words {
        expand_each(word.as_ref(), domains, |r| {
            let h = hash(r);
            if seen.find(h, |&i| refs[i as usize].as_str() == r).is_none() {
                seen.insert_unique(h, refs.len() as u32, |&i| hash(refs[i as usize].as_str()));
                refs.push(crate::PartitionRef::new(r)?);
            }
            Ok::<_, UserRefError>(())
        })?;
    }
    Ok(refs)
}

/// Expands one word, with the default cap.
pub fn expand_braces(arg: &str) -> Result<Vec<String>, BraceExpansionError> {
    expand_all(&[arg], DEFAULT_MAX_REFS, &NO_DOMAINS)
}

/// Whether a word names a domain (`{field=*}`): expanding it needs the graph's domains.
pub fn names_a_domain(word: &str) -> bool {
    pieces(word).is_ok_and(|pieces| {
        pieces.iter().any(
            |p| matches!(p, crate::pattern::Piece::Braced(inner) if domain_field(inner).is_some()),
        )
    })
}

/// The field of `field=*`.
fn domain_field(inner: &str) -> Option<&str> {
    let field = inner.strip_suffix("=*")?;
    let ident = !field.is_empty() && field.chars().all(|c| c.is_ascii_alphanumeric() || c == '_');
    ident.then_some(field)
}

/// How many refs `arg` names and how long the longest is, without building them (saturating).
fn count_braces(
    arg: &str,
    max: usize,
    domains: &Domains,
) -> Result<(u128, u128), BraceExpansionError> {
    let (mut count, mut longest): (u128, u128) = (1, 0);
    for piece in pieces(arg)? {
        match piece {
            crate::pattern::Piece::Text(t) => longest += t.len() as u128,
            crate::pattern::Piece::Braced(inner) => {
                let alternatives = Alternatives::parse(arg, inner, domains)?;
                count = count.saturating_mul(alternatives.len());
                longest = longest.saturating_add(alternatives.longest());
            }
        }
    }
    if count > max as u128 {
        return Err(BraceExpansionError::TooMany {
            what: format!("`{}`", quoted(arg)),
            count,
            max,
        });
    }
    Ok((count, longest))
}

/// Calls `emit` with each ref `arg` names, in order, each built in the same buffer: expanding a
/// million refs holds one at a time. Only called once [`bounded_count`] has bounded their number.
fn expand_each<E: From<BraceExpansionError>>(
    arg: &str,
    domains: &Domains,
    mut emit: impl FnMut(&str) -> Result<(), E>,
) -> Result<(), E> {
    let parts = pieces(arg)?
        .into_iter()
        .map(|piece| match piece {
            crate::pattern::Piece::Text(t) => Ok(Part::Text(t)),
            crate::pattern::Piece::Braced(inner) => {
                Alternatives::parse(arg, inner, domains).map(Part::Choice)
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    if parts
        .iter()
        .any(|p| matches!(p, Part::Choice(a) if a.len() == 0))
    {
        return Ok(()); // An empty domain names nothing.
    }
    // Which value of each choice the current ref takes; the last choice turns fastest, so refs
    // come in the order `{a,b}/{1,2}` reads: a/1, a/2, b/1, b/2.
    let mut at = vec![0u128; parts.len()];
    let mut r = String::new();
    loop {
        r.clear();
        for (part, &k) in parts.iter().zip(&at) {
            match part {
                Part::Text(t) => r.push_str(t),
                Part::Choice(a) => a.write(k, &mut r),
            }
        }
        emit(&r)?;
        let mut i = parts.len();
        loop {
            let Some(previous) = i.checked_sub(1) else {
                return Ok(()); // Every choice turned over: that was the last ref.
            };
            i = previous;
            if let Part::Choice(a) = &parts[i] {
                at[i] += 1;
                if at[i] < a.len() {
                    break;
                }
                at[i] = 0;
            }
        }
    }
}

/// A piece of a word: its text, or a `{...}`'s values.
enum Part<'a> {
    Text(&'a str),
    Choice(Alternatives<'a>),
}

fn pieces(arg: &str) -> Result<Vec<crate::pattern::Piece<'_>>, BraceExpansionError> {
    crate::pattern::split_braces(arg).map_err(|e| match e {
        crate::pattern::BraceError::Unclosed => BraceExpansionError::Unclosed(quoted(arg)),
        crate::pattern::BraceError::StrayClose => BraceExpansionError::StrayClose(quoted(arg)),
    })
}

/// What one `{...}` stands for, parsed without building its values.
enum Alternatives<'a> {
    /// `{a,b,c}`'s values, split once.
    List(Vec<&'a str>),
    Dates {
        start: NaiveDate,
        days: i64,
    },
    /// `YYYY-MM-DDTHH` hours, as hours since 1970-01-01T00.
    Hours {
        start: i64,
        count: i64,
    },
    /// `YYYY-MM` months, counted from year 0's January.
    Months {
        start: i64,
        count: i64,
    },
    /// ISO weeks (`YYYY-Www`), by the Monday each starts on.
    Weeks {
        start: NaiveDate,
        count: i64,
    },
    Ints {
        start: i64,
        end: i64,
        width: usize,
    },
    Domain(&'a [String]),
}

/// `YYYY-MM` as months since year 0's January.
fn parse_month(s: &str) -> Option<i64> {
    let (y, m) = s.split_once('-')?;
    let digits = |t: &str, n| t.len() == n && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(y, 4) || !digits(m, 2) {
        return None;
    }
    let (y, m): (i64, i64) = (y.parse().ok()?, m.parse().ok()?);
    (1..=12).contains(&m).then_some(y * 12 + m - 1)
}

/// `YYYY-Www` (ISO 8601) as the Monday it starts on.
fn parse_week(s: &str) -> Option<NaiveDate> {
    let (y, w) = s.split_once("-W")?;
    let digits = |t: &str, n| t.len() == n && t.bytes().all(|b| b.is_ascii_digit());
    if !digits(y, 4) || !digits(w, 2) {
        return None;
    }
    NaiveDate::from_isoywd_opt(y.parse().ok()?, w.parse().ok()?, chrono::Weekday::Mon)
}

fn format_week(monday: NaiveDate) -> String {
    let week = monday.iso_week();
    format!("{:04}-W{:02}", week.year(), week.week())
}

impl<'a> Alternatives<'a> {
    fn parse(arg: &str, inner: &'a str, domains: &'a Domains) -> Result<Self, BraceExpansionError> {
        let unrecognized = || BraceExpansionError::Unrecognized {
            arg: quoted(arg),
            inner: quoted(inner),
        };
        let backwards = || BraceExpansionError::Backwards {
            arg: quoted(arg),
            inner: quoted(inner),
        };
        if let Some(field) = domain_field(inner) {
            return match domains.get(field) {
                Some(values) => Ok(Alternatives::Domain(values)),
                None => Err(BraceExpansionError::UnknownDomain {
                    arg: quoted(arg),
                    field: field.to_string(),
                    known: match domains.is_empty() {
                        true => "it declares none".to_string(),
                        false => {
                            let names: Vec<&str> = domains.keys().map(String::as_str).collect();
                            format!("it declares {}", names.join(", "))
                        }
                    },
                }),
            };
        }
        if let Some((a, b)) = inner.split_once("..") {
            if let (Some(start), Some(end)) = (parse_date(a), parse_date(b)) {
                if start > end {
                    return Err(backwards());
                }
                let days = (end - start).num_days() + 1;
                return Ok(Alternatives::Dates { start, days });
            }
            if let (Some(start), Some(end)) = (parse_hour(a), parse_hour(b)) {
                if start > end {
                    return Err(backwards());
                }
                let count = end - start + 1;
                return Ok(Alternatives::Hours { start, count });
            }
            if let (Some(start), Some(end)) = (parse_month(a), parse_month(b)) {
                if start > end {
                    return Err(backwards());
                }
                let count = end - start + 1;
                return Ok(Alternatives::Months { start, count });
            }
            if let (Some(start), Some(end)) = (parse_week(a), parse_week(b)) {
                if start > end {
                    return Err(backwards());
                }
                let count = (end - start).num_days() / 7 + 1;
                return Ok(Alternatives::Weeks { start, count });
            }
            if let (Ok(start), Ok(end)) = (a.parse::<i64>(), b.parse::<i64>()) {
                if start > end {
                    return Err(backwards());
                }
                // As in bash, `{01..10}` keeps the zero padding of its endpoints.
                let padded = [a, b].iter().any(|s| {
                    s.trim_start_matches('-').len() > 1
                        && s.trim_start_matches('-').starts_with('0')
                });
                let width = if padded { a.len().max(b.len()) } else { 0 };
                return Ok(Alternatives::Ints { start, end, width });
            }
            return Err(unrecognized());
        }
        if inner.contains(',') {
            return Ok(Alternatives::List(inner.split(',').collect()));
        }
        Err(unrecognized())
    }

    fn len(&self) -> u128 {
        match self {
            Alternatives::List(values) => values.len() as u128,
            Alternatives::Dates { days, .. } => *days as u128,
            Alternatives::Months { count, .. }
            | Alternatives::Weeks { count, .. }
            | Alternatives::Hours { count, .. } => *count as u128,
            Alternatives::Ints { start, end, .. } => (*end as i128 - *start as i128 + 1) as u128,
            Alternatives::Domain(values) => values.len() as u128,
        }
    }

    /// The length of the longest value.
    fn longest(&self) -> u128 {
        let digits = |n: i64| n.to_string().len();
        match self {
            Alternatives::List(values) => values.iter().map(|v| v.len()).max().unwrap_or(0) as u128,
            Alternatives::Dates { .. } => 10,
            Alternatives::Hours { .. } => 13,
            Alternatives::Months { .. } => 7,
            Alternatives::Weeks { .. } => 8,
            Alternatives::Domain(values) => {
                values.iter().map(String::len).max().unwrap_or(0) as u128
            }
            Alternatives::Ints { start, end, width } => {
                (*width).max(digits(*start)).max(digits(*end)) as u128
            }
        }
    }

    /// Appends value `k` (counted from 0, below [`Alternatives::len`]) to `out`.
    fn write(&self, k: u128, out: &mut String) {
        use std::fmt::Write;
        let k = k as i64;
        let written = match self {
            Alternatives::List(values) => out.write_str(values[k as usize]),
            Alternatives::Dates { start, .. } => {
                out.write_str(&format_date(*start + chrono::Duration::days(k)))
            }
            Alternatives::Hours { start, .. } => {
                out.write_str(&format_hour(start + k).expect("parsed hours are representable"))
            }
            Alternatives::Months { start, .. } => {
                let m = start + k;
                write!(out, "{:04}-{:02}", m / 12, m % 12 + 1)
            }
            Alternatives::Weeks { start, .. } => {
                out.write_str(&format_week(*start + chrono::Duration::weeks(k)))
            }
            Alternatives::Domain(values) => out.write_str(&values[k as usize]),
            Alternatives::Ints { start, width, .. } => {
                let width = *width;
                write!(out, "{:0width$}", start + k)
            }
        };
        written.expect("a String takes any text");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn expands_lists_dates_and_ints() {
        assert_eq!(
            expand_braces("x/cat={a,b}").unwrap(),
            ["x/cat=a", "x/cat=b"]
        );
        let month = expand_braces("reviews/date={2020-01-01..2020-01-31}").unwrap();
        assert_eq!(month.len(), 31);
        assert_eq!(month[30], "reviews/date=2020-01-31");
        assert_eq!(expand_braces("n/{-1..1}").unwrap(), ["n/-1", "n/0", "n/1"]);
        assert_eq!(
            expand_braces("d/2020-03-{08..11}").unwrap(),
            [
                "d/2020-03-08",
                "d/2020-03-09",
                "d/2020-03-10",
                "d/2020-03-11"
            ]
        );
        assert_eq!(
            expand_braces("c={a,b}/d={2020-02-28..2020-03-01}")
                .unwrap()
                .len(),
            6
        );
        assert_eq!(expand_braces("plain/ref").unwrap(), ["plain/ref"]);
    }

    #[test]
    fn expands_months_weeks_and_domains() {
        assert_eq!(
            expand_braces("m/month={2021-11..2022-02}").unwrap(),
            [
                "m/month=2021-11",
                "m/month=2021-12",
                "m/month=2022-01",
                "m/month=2022-02"
            ]
        );
        // ISO weeks: 2020 has 53, and 2021-W01 starts on 2021-01-04.
        assert_eq!(
            expand_braces("w/{2020-W52..2021-W02}").unwrap(),
            ["w/2020-W52", "w/2020-W53", "w/2021-W01", "w/2021-W02"]
        );
        let domains: Domains = [("city".to_string(), vec!["nyc".into(), "sf".into()])].into();
        assert_eq!(
            expand_all(
                &["trips/city={city=*}/date={2020-01-01..2020-01-02}"],
                10,
                &domains
            )
            .unwrap(),
            [
                "trips/city=nyc/date=2020-01-01",
                "trips/city=nyc/date=2020-01-02",
                "trips/city=sf/date=2020-01-01",
                "trips/city=sf/date=2020-01-02"
            ]
        );
        assert!(names_a_domain("x/{city=*}") && !names_a_domain("x/{a,b}"));
        let err = expand_all(&["x/{region=*}"], 10, &domains).unwrap_err();
        assert_eq!(
            err.to_string(),
            "`x/{region=*}`: the graph declares no domain `region` for `{region=*}` (it declares city); declare its values under [graph.domains]"
        );
        assert!(matches!(
            expand_braces("m/{2022-03..2022-01}"),
            Err(BraceExpansionError::Backwards { .. })
        ));
        assert!(matches!(
            expand_braces("m/{2022-13..2023-01}"),
            Err(BraceExpansionError::Unrecognized { .. })
        ));
        assert!(matches!(
            expand_braces("w/{2021-W53..2021-W54}"),
            Err(BraceExpansionError::Unrecognized { .. })
        ));
    }

    #[test]
    fn expands_hours_across_midnight() {
        assert_eq!(
            expand_braces("h/hour={2026-12-01T22..2026-12-02T01}").unwrap(),
            [
                "h/hour=2026-12-01T22",
                "h/hour=2026-12-01T23",
                "h/hour=2026-12-02T00",
                "h/hour=2026-12-02T01"
            ]
        );
        let day = expand_braces("h/{2026-12-01T00..2026-12-01T23}").unwrap();
        assert_eq!(day.len(), 24);
        // A leap day and a new year.
        assert_eq!(
            expand_braces("h/{2024-02-28T23..2024-03-01T00}")
                .unwrap()
                .len(),
            26
        );
        assert_eq!(
            expand_braces("h/{2026-12-31T23..2027-01-01T00}").unwrap(),
            ["h/2026-12-31T23", "h/2027-01-01T00"]
        );
        assert!(matches!(
            expand_braces("h/{2026-12-02T00..2026-12-01T23}"),
            Err(BraceExpansionError::Backwards { .. })
        ));
        let err = expand_braces("h/{2026-12-01T00..2026-12-01T24}").unwrap_err();
        assert!(
            matches!(err, BraceExpansionError::Unrecognized { .. }),
            "{err}"
        );
        assert!(
            err.to_string().contains("2026-12-01T00..2026-12-01T23"),
            "{err}"
        );
    }

    #[test]
    fn rejects_malformed_braces() {
        assert!(matches!(
            expand_braces("x/{a,b"),
            Err(BraceExpansionError::Unclosed(_))
        ));
        assert!(matches!(
            expand_braces("x/{a}"),
            Err(BraceExpansionError::Unrecognized { .. })
        ));
        assert!(matches!(
            expand_braces("x/{3..1}"),
            Err(BraceExpansionError::Backwards { .. })
        ));
        assert!(matches!(
            expand_braces("x/{0..99999999999}"),
            Err(BraceExpansionError::TooMany { .. })
        ));
    }

    // The test times the core from outside, as a caller would: the clock is the test's, not
    // the core's.
    #[allow(clippy::disallowed_methods)]
    #[test]
    fn a_request_is_counted_before_anything_is_built() {
        // 2^30 refs from 30 two-way lists: refused from the count alone, at once.
        let word = "x/".to_string() + &"{a,b}".repeat(30);
        let start = std::time::Instant::now();
        let err = expand_all(&[&word], DEFAULT_MAX_REFS, &NO_DOMAINS).unwrap_err();
        assert!(start.elapsed() < std::time::Duration::from_millis(50));
        assert_eq!(
            err,
            BraceExpansionError::TooMany {
                what: format!("`{word}`"),
                count: 1 << 30,
                max: DEFAULT_MAX_REFS
            }
        );
        assert!(err.to_string().contains("DATABUILD_MAX_REFS"), "{err}");
        // Products past u128 saturate instead of wrapping round to a small count.
        let huge = "x/".to_string() + &"{0..9999999999999999}".repeat(12);
        assert!(matches!(
            expand_all(&[&huge], usize::MAX, &NO_DOMAINS),
            Err(BraceExpansionError::TooMany {
                count: u128::MAX,
                ..
            })
        ));
    }

    #[test]
    fn long_text_around_a_brace_is_refused_before_it_is_copied() {
        // A 1M-ref request whose every ref would be a megabyte long: refused from its sizes.
        let word = format!("x/{}{{1..1000000}}", "A".repeat(1_000_000));
        let err = expand_all(&[&word], DEFAULT_MAX_REFS, &NO_DOMAINS).unwrap_err();
        assert!(matches!(err, BraceExpansionError::TooLong { .. }), "{err}");
        assert!(
            err.to_string().len() < 400,
            "the error quotes a little: {err}"
        );
        // Zero padding counts too.
        let padded = format!("x/{{0..{}1}}", "0".repeat(5000));
        assert!(matches!(
            expand_all(&[&padded], DEFAULT_MAX_REFS, &NO_DOMAINS),
            Err(BraceExpansionError::TooLong { .. })
        ));
        // Refs under the length cap, but too many bytes in all.
        let wide = format!("x/{}{{1..1000000}}", "A".repeat(900));
        assert!(matches!(
            expand_all(&[&wide], DEFAULT_MAX_REFS, &NO_DOMAINS),
            Err(BraceExpansionError::TooBig { .. })
        ));
    }

    #[test]
    fn the_cap_is_on_the_whole_request() {
        let words = ["n/{1..6}", "m/{1..5}"];
        assert_eq!(expand_all(&words, 11, &NO_DOMAINS).unwrap().len(), 11);
        let err = expand_all(&words, 10, &NO_DOMAINS).unwrap_err();
        assert_eq!(
            err,
            BraceExpansionError::TooMany {
                what: "the request".into(),
                count: 11,
                max: 10
            }
        );
        assert!(
            err.to_string()
                .starts_with("the request would name 11 refs, more than the 10"),
            "{err}"
        );
    }

    /// One brace of the property below: its text and its values, as a shell would give them.
    fn brace() -> impl Strategy<Value = (String, Vec<String>)> {
        prop_oneof![
            prop::collection::vec("[a-z]{1,3}", 2..5).prop_map(|vs| (vs.join(","), vs)),
            (-3i64..3, 0i64..4).prop_map(|(a, n)| {
                let values = (a..=a + n).map(|v| v.to_string()).collect();
                (format!("{a}..{}", a + n), values)
            }),
            (0i64..5, 0i64..4).prop_map(|(a, n)| {
                let values = (a..=a + n + 8).map(|v| format!("{v:02}")).collect();
                (format!("{a:02}..{:02}", a + n + 8), values)
            }),
        ]
    }

    proptest! {
        /// A word of braces and text names the cartesian product of the braces' values, the
        /// first brace turning slowest, in order, each ref once per combination.
        #[test]
        fn expansion_is_the_cartesian_product_in_order(
            parts in prop::collection::vec(("[a-z]{0,2}/?", brace()), 1..4)
        ) {
            let word: String = parts.iter().map(|(text, (b, _))| format!("{text}{{{b}}}")).collect();
            let mut expected = vec![String::new()];
            for (text, (_, values)) in &parts {
                expected = expected
                    .iter()
                    .flat_map(|prefix| values.iter().map(move |v| format!("{prefix}{text}{v}")))
                    .collect();
            }
            prop_assert_eq!(expand_braces(&word).unwrap(), expected);
        }

        #[test]
        fn month_and_week_ranges_are_complete_and_in_order(y in 1990i32..2100, m in 1u32..=12, n in 0i64..40) {
            let start = format!("{y:04}-{m:02}");
            let end_m = (y as i64) * 12 + (m as i64 - 1) + n;
            let end = format!("{:04}-{:02}", end_m / 12, end_m % 12 + 1);
            let months = expand_braces(&format!("m/{{{start}..{end}}}")).unwrap();
            prop_assert_eq!(months.len() as i64, n + 1);
            prop_assert!(months.windows(2).all(|w| w[0] < w[1]));
            let monday = NaiveDate::from_ymd_opt(y, m, 1).unwrap().week(chrono::Weekday::Mon).first_day();
            let last = monday + chrono::Duration::weeks(n);
            let weeks = expand_braces(&format!("w/{{{}..{}}}", format_week(monday), format_week(last))).unwrap();
            prop_assert_eq!(weeks.len() as i64, n + 1);
            prop_assert!(weeks.windows(2).all(|w| w[0] < w[1]));
        }

        /// An hour range has one ref per hour, in order, each the start plus that many hours
        /// as chrono counts them.
        #[test]
        fn hour_ranges_agree_with_chrono(start in 0i64..1_000_000, len in 0i64..100) {
            let epoch = NaiveDate::default().and_hms_opt(0, 0, 0).unwrap();
            let at = |h: i64| (epoch + chrono::Duration::hours(h)).format("%Y-%m-%dT%H").to_string();
            let hours = expand_braces(&format!("h/{{{}..{}}}", at(start), at(start + len))).unwrap();
            prop_assert_eq!(hours.len() as i64, len + 1);
            for (i, h) in hours.iter().enumerate() {
                prop_assert_eq!(h, &format!("h/{}", at(start + i as i64)));
            }
        }

        #[test]
        fn int_ranges_are_complete(a in -1000i64..1000, len in 0i64..200) {
            let out = expand_braces(&format!("n/{{{}..{}}}", a, a + len)).unwrap();
            prop_assert_eq!(out.len() as i64, len + 1);
        }
    }
}
