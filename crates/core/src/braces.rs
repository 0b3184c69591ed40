//! Brace expansion of command-line refs, as a shell would do it but aware of dates:
//! `x/cat={a,b}` gives 2 refs, `reviews/date={2020-01-01..2020-01-31}` 31, `n/{1..3}` 3.
//! Several braces give their cartesian product.

use crate::pattern::{format_date, parse_date};

/// The most refs one argument may expand to; more is almost certainly a typo in a range.
pub const MAX_EXPANSION: usize = 10_000_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BraceExpansionError {
    #[error("`{0}` has an unclosed `{{`")]
    Unclosed(String),
    #[error("`{0}` has a `}}` without a matching `{{`")]
    StrayClose(String),
    #[error("`{arg}`: `{{{inner}}}` is neither a list like `{{a,b}}` nor a range like `{{2020-01-01..2020-01-31}}` or `{{1..10}}`")]
    Unrecognized { arg: String, inner: String },
    #[error("`{arg}`: the range `{{{inner}}}` runs backwards")]
    Backwards { arg: String, inner: String },
    #[error("`{0}` expands to more than {MAX_EXPANSION} refs")]
    TooMany(String),
}

pub fn expand_braces(arg: &str) -> Result<Vec<String>, BraceExpansionError> {
    let pieces = crate::pattern::split_braces(arg).map_err(|e| match e {
        crate::pattern::BraceError::Unclosed => BraceExpansionError::Unclosed(arg.to_string()),
        crate::pattern::BraceError::StrayClose => BraceExpansionError::StrayClose(arg.to_string()),
    })?;
    let mut results = vec![String::new()];
    for piece in pieces {
        let options = match piece {
            crate::pattern::Piece::Text(t) => vec![t.to_string()],
            crate::pattern::Piece::Braced(inner) => alternatives(arg, inner)?,
        };
        if results.len().saturating_mul(options.len()) > MAX_EXPANSION {
            return Err(BraceExpansionError::TooMany(arg.to_string()));
        }
        results = results
            .iter()
            .flat_map(|r| options.iter().map(move |o| format!("{r}{o}")))
            .collect();
    }
    Ok(results)
}

fn alternatives(arg: &str, inner: &str) -> Result<Vec<String>, BraceExpansionError> {
    let unrecognized = || BraceExpansionError::Unrecognized {
        arg: arg.to_string(),
        inner: inner.to_string(),
    };
    let backwards = || BraceExpansionError::Backwards {
        arg: arg.to_string(),
        inner: inner.to_string(),
    };
    if let Some((a, b)) = inner.split_once("..") {
        if let (Some(start), Some(end)) = (parse_date(a), parse_date(b)) {
            if start > end {
                return Err(backwards());
            }
            let days = (end - start).num_days() as usize + 1;
            if days > MAX_EXPANSION {
                return Err(BraceExpansionError::TooMany(arg.to_string()));
            }
            return Ok(start.iter_days().take(days).map(format_date).collect());
        }
        if let (Ok(start), Ok(end)) = (a.parse::<i64>(), b.parse::<i64>()) {
            if start > end {
                return Err(backwards());
            }
            if (end - start) as u128 + 1 > MAX_EXPANSION as u128 {
                return Err(BraceExpansionError::TooMany(arg.to_string()));
            }
            // As in bash, `{01..10}` keeps the zero padding of its endpoints.
            let padded = [a, b].iter().any(|s| {
                s.trim_start_matches('-').len() > 1 && s.trim_start_matches('-').starts_with('0')
            });
            let width = if padded { a.len().max(b.len()) } else { 0 };
            return Ok((start..=end).map(|n| format!("{n:0width$}")).collect());
        }
        return Err(unrecognized());
    }
    if inner.contains(',') {
        return Ok(inner.split(',').map(str::to_string).collect());
    }
    Err(unrecognized())
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
            Err(BraceExpansionError::TooMany(_))
        ));
    }

    proptest! {
        #[test]
        fn int_ranges_are_complete(a in -1000i64..1000, len in 0i64..200) {
            let out = expand_braces(&format!("n/{{{}..{}}}", a, a + len)).unwrap();
            prop_assert_eq!(out.len() as i64, len + 1);
        }
    }
}
