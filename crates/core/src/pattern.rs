//! Partition patterns: refs with typed fields, such as `reviews/date={date:date}`.
//!
//! A [`Pattern`] is a sequence of literal text and fields. Matching a ref against it extracts the
//! field values; rendering fills the fields back in. Fields must be separated by literal text so
//! that a ref matches a pattern in at most one way.

use std::fmt;

use chrono::NaiveDate;

use crate::refs::{validate_path_text, RefError};

/// The type of a pattern field. It decides which text a field accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FieldType {
    /// Any non-empty text without `/`.
    Str,
    /// A calendar date written `YYYY-MM-DD`.
    Date,
    /// A canonical decimal integer (`-3`, `0`, `42`; no `+`, no leading zeros).
    Int,
    /// An hour of a day, UTC, written `YYYY-MM-DDTHH` (`00` to `23`).
    Hour,
}

impl fmt::Display for FieldType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            FieldType::Str => "str",
            FieldType::Date => "date",
            FieldType::Int => "int",
            FieldType::Hour => "hour",
        })
    }
}

impl FieldType {
    /// Does `value` belong to this type, exactly as it would appear in a ref?
    pub fn accepts(self, value: &str) -> bool {
        match self {
            FieldType::Str => !value.is_empty() && !value.contains('/'),
            FieldType::Date => parse_date(value).is_some(),
            FieldType::Int => is_canonical_int(value),
            FieldType::Hour => parse_hour(value).is_some(),
        }
    }
}

/// Days since 1970-01-01: how templates and ranges compute with dates.
pub fn days_since_epoch(d: NaiveDate) -> i64 {
    d.signed_duration_since(NaiveDate::default()).num_days()
}

/// The date `days` after 1970-01-01, if chrono can represent it.
pub fn date_from_days(days: i64) -> Option<NaiveDate> {
    NaiveDate::default().checked_add_signed(chrono::Duration::try_days(days)?)
}

/// Parses a `YYYY-MM-DDTHH` hour (UTC) into hours since 1970-01-01T00, refusing other spellings
/// so that one hour has one ref. Hours are integers inside the planner: offsets and ranges are
/// additions, whatever days, months or years they cross.
pub fn parse_hour(s: &str) -> Option<i64> {
    let b = s.as_bytes();
    if b.len() != 13 || b[10] != b'T' || !b[11].is_ascii_digit() || !b[12].is_ascii_digit() {
        return None;
    }
    let hour = i64::from(b[11] - b'0') * 10 + i64::from(b[12] - b'0');
    if hour > 23 {
        return None;
    }
    Some(days_since_epoch(parse_date(&s[..10])?) * 24 + hour)
}

/// `hours` since 1970-01-01T00 as `YYYY-MM-DDTHH`, if its date is representable.
pub fn format_hour(hours: i64) -> Option<String> {
    let mut s = String::with_capacity(13);
    push_hour(&mut s, hours)?;
    Some(s)
}

/// Appends `YYYY-MM-DDTHH` for `hours` since 1970-01-01T00; `None` (and nothing appended) if
/// its date is not representable.
pub fn push_hour(out: &mut String, hours: i64) -> Option<()> {
    let day = date_from_days(hours.div_euclid(24))?;
    let h = hours.rem_euclid(24) as u8;
    push_date(out, day);
    out.push('T');
    out.push(char::from(b'0' + h / 10));
    out.push(char::from(b'0' + h % 10));
    Some(())
}

/// Parses a `YYYY-MM-DD` date, refusing other spellings so that one date has one ref.
pub fn parse_date(s: &str) -> Option<NaiveDate> {
    let b = s.as_bytes();
    let shaped = b.len() == 10
        && b[4] == b'-'
        && b[7] == b'-'
        && b.iter()
            .enumerate()
            .all(|(i, c)| i == 4 || i == 7 || c.is_ascii_digit());
    if !shaped {
        return None;
    }
    let num = |r: std::ops::Range<usize>| s[r].parse::<u32>().ok();
    NaiveDate::from_ymd_opt(num(0..4)? as i32, num(5..7)?, num(8..10)?)
}

pub fn format_date(d: NaiveDate) -> String {
    let mut s = String::with_capacity(10);
    push_date(&mut s, d);
    s
}

/// Appends `YYYY-MM-DD`. Planning renders dates by the million; chrono's `format` re-parses its
/// format string on every call, which dominated planning profiles.
pub fn push_date(out: &mut String, d: NaiveDate) {
    use chrono::Datelike;
    use std::fmt::Write;
    let (y, m, day) = (d.year(), d.month(), d.day());
    if (0..=9999).contains(&y) {
        let digits = [
            b'0' + (y / 1000) as u8,
            b'0' + (y / 100 % 10) as u8,
            b'0' + (y / 10 % 10) as u8,
            b'0' + (y % 10) as u8,
            b'-',
            b'0' + (m / 10) as u8,
            b'0' + (m % 10) as u8,
            b'-',
            b'0' + (day / 10) as u8,
            b'0' + (day % 10) as u8,
        ];
        out.push_str(std::str::from_utf8(&digits).expect("ASCII digits"));
    } else {
        let _ = write!(out, "{y:04}-{m:02}-{day:02}");
    }
}

fn is_canonical_int(s: &str) -> bool {
    let digits = s.strip_prefix('-').unwrap_or(s);
    let canonical = !digits.is_empty()
        && digits.bytes().all(|c| c.is_ascii_digit())
        && (digits == "0" || !digits.starts_with('0'))
        && s != "-0";
    canonical && s.parse::<i64>().is_ok()
}

/// One piece of a pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Token {
    Literal(String),
    Field { name: String, ty: FieldType },
}

/// Why a pattern string is invalid.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatternError {
    #[error("pattern `{0}` has an unclosed `{{`")]
    Unclosed(String),
    #[error("pattern `{0}` has a `}}` without a matching `{{`")]
    StrayClose(String),
    #[error("pattern `{pattern}` has an invalid field `{{{field}}}`: {why}")]
    BadField {
        pattern: String,
        field: String,
        why: String,
    },
    #[error("pattern `{pattern}` declares field `{field}` twice")]
    DuplicateField { pattern: String, field: String },
    #[error("pattern `{0}` has two fields next to each other; separate them with literal text such as `/` or `_`")]
    AdjacentFields(String),
    #[error("invalid pattern: {0}")]
    Path(#[from] RefError),
}

/// A parsed, validated pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern {
    source: String,
    tokens: Vec<Token>,
}

/// Field names are identifiers so they can become environment variables (`DATABUILD_FIELD_DATE`).
pub(crate) fn is_identifier(s: &str) -> bool {
    let mut chars = s.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Splits `a/{x}/b{y:int}` into literal text and the insides of braces.
/// Shared by patterns and input templates, which use the same brace syntax.
pub(crate) fn split_braces(s: &str) -> Result<Vec<Piece<'_>>, BraceError> {
    let mut pieces = Vec::new();
    let mut rest = s;
    while !rest.is_empty() {
        match rest.find(['{', '}']) {
            None => {
                pieces.push(Piece::Text(rest));
                break;
            }
            Some(i) if rest.as_bytes()[i] == b'}' => return Err(BraceError::StrayClose),
            Some(i) => {
                if i > 0 {
                    pieces.push(Piece::Text(&rest[..i]));
                }
                let after = &rest[i + 1..];
                let close = after.find('}').ok_or(BraceError::Unclosed)?;
                if after[..close].contains('{') {
                    return Err(BraceError::Unclosed);
                }
                pieces.push(Piece::Braced(&after[..close]));
                rest = &after[close + 1..];
            }
        }
    }
    Ok(pieces)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Piece<'a> {
    Text(&'a str),
    Braced(&'a str),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BraceError {
    Unclosed,
    StrayClose,
}

impl Pattern {
    pub fn parse(source: &str) -> Result<Pattern, PatternError> {
        let pieces = split_braces(source).map_err(|e| match e {
            BraceError::Unclosed => PatternError::Unclosed(source.to_string()),
            BraceError::StrayClose => PatternError::StrayClose(source.to_string()),
        })?;
        let mut tokens = Vec::with_capacity(pieces.len());
        for piece in pieces {
            match piece {
                Piece::Text(t) => tokens.push(Token::Literal(t.to_string())),
                Piece::Braced(inner) => {
                    let (name, ty) = parse_field(source, inner)?;
                    if matches!(tokens.last(), Some(Token::Field { .. })) {
                        return Err(PatternError::AdjacentFields(source.to_string()));
                    }
                    let duplicate = tokens
                        .iter()
                        .any(|t| matches!(t, Token::Field { name: n, .. } if *n == name));
                    if duplicate {
                        return Err(PatternError::DuplicateField {
                            pattern: source.to_string(),
                            field: name,
                        });
                    }
                    tokens.push(Token::Field { name, ty });
                }
            }
        }
        // Validate the path shape with every field replaced by a harmless stand-in value.
        let example: String = tokens
            .iter()
            .map(|t| match t {
                Token::Literal(l) => l.as_str(),
                Token::Field { .. } => "x",
            })
            .collect();
        validate_path_text(&example)?;
        Ok(Pattern {
            source: source.to_string(),
            tokens,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn tokens(&self) -> &[Token] {
        &self.tokens
    }

    /// A glob (as the log's partition queries take: SQL `GLOB`) matching every ref of the
    /// pattern, and maybe more: fields become `*`, and literal glob characters are escaped.
    pub fn glob(&self) -> String {
        self.tokens
            .iter()
            .map(|t| match t {
                Token::Literal(l) => l
                    .replace('[', "[[]")
                    .replace('*', "[*]")
                    .replace('?', "[?]"),
                Token::Field { .. } => "*".to_string(),
            })
            .collect()
    }

    /// The fields in order of appearance.
    pub fn fields(&self) -> impl Iterator<Item = (&str, FieldType)> {
        self.tokens.iter().filter_map(|t| match t {
            Token::Field { name, ty } => Some((name.as_str(), *ty)),
            Token::Literal(_) => None,
        })
    }

    pub fn field_type(&self, name: &str) -> Option<FieldType> {
        self.fields().find(|(n, _)| *n == name).map(|(_, ty)| ty)
    }

    pub fn field_index(&self, name: &str) -> Option<usize> {
        self.fields().position(|(n, _)| n == name)
    }

    /// The text before the first field: every ref this pattern matches starts with it.
    pub fn literal_prefix(&self) -> &str {
        match self.tokens.first() {
            Some(Token::Literal(l)) => l,
            _ => "",
        }
    }

    /// Matches a ref, returning the field values in the order of [`Pattern::fields`].
    pub fn match_ref<'r>(&self, r: &'r str) -> Option<Vec<&'r str>> {
        let mut values = Vec::with_capacity(self.tokens.len());
        if match_tokens(&self.tokens, r, &mut values) {
            Some(values)
        } else {
            None
        }
    }

    /// Why `r` does not match although it has this pattern's literal shape: the first typed field
    /// whose text is not of its type (`2024-13-01` for a `date`). `None` if `r` matches, or if
    /// its literal text differs.
    pub fn field_mismatch(&self, r: &str) -> Option<FieldMismatch> {
        if self.match_ref(r).is_some() {
            return None;
        }
        let mut values = Vec::with_capacity(self.tokens.len());
        if !match_loose(&self.tokens, r, &mut values) {
            return None;
        }
        self.fields()
            .zip(values)
            .find(|((_, ty), value)| !ty.accepts(value))
            .map(|((field, ty), value)| FieldMismatch {
                value: value.to_string(),
                field: field.to_string(),
                ty,
            })
    }

    /// Fills the fields with `values` (in field order). The caller vouches that values fit their types.
    pub fn render(&self, values: &[&str]) -> String {
        let mut out = String::with_capacity(self.source.len() + 16);
        let mut next = values.iter();
        for t in &self.tokens {
            match t {
                Token::Literal(l) => out.push_str(l),
                Token::Field { .. } => out.push_str(next.next().expect("one value per field")),
            }
        }
        out
    }
}

impl fmt::Display for Pattern {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.source)
    }
}

fn parse_field(pattern: &str, inner: &str) -> Result<(String, FieldType), PatternError> {
    let bad = |why: &str| PatternError::BadField {
        pattern: pattern.to_string(),
        field: inner.to_string(),
        why: why.to_string(),
    };
    let (name, ty) = match inner.split_once(':') {
        None => (inner, FieldType::Str),
        Some((name, ty)) => {
            let ty = match ty.trim() {
                "str" => FieldType::Str,
                "date" => FieldType::Date,
                "int" => FieldType::Int,
                "hour" => FieldType::Hour,
                other => {
                    return Err(bad(&format!(
                        "unknown type `{other}`; the field types are str, date, hour and int"
                    )))
                }
            };
            (name, ty)
        }
    };
    let name = name.trim();
    if !is_identifier(name) {
        return Err(bad(
            "a field name is letters, digits and `_`, not starting with a digit",
        ));
    }
    Ok((name.to_string(), ty))
}

/// A ref's text where a typed field is expected, which is not of that type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FieldMismatch {
    pub value: String,
    pub field: String,
    pub ty: FieldType,
}

impl fmt::Display for FieldMismatch {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let what = match self.ty {
            FieldType::Date => "date",
            FieldType::Int => "integer",
            FieldType::Str => "value",
            FieldType::Hour => "hour (`YYYY-MM-DDTHH`, UTC, `00` to `23`)",
        };
        write!(
            f,
            "`{}` is not a valid {what} for field `{}`",
            self.value, self.field
        )
    }
}

/// Matches the literal shape only: every field takes any non-empty text without `/`, whatever
/// its type (to say which field's text is wrong when the typed match fails).
fn match_loose<'r>(tokens: &[Token], s: &'r str, out: &mut Vec<&'r str>) -> bool {
    let Some((first, rest)) = tokens.split_first() else {
        return s.is_empty();
    };
    match first {
        Token::Literal(l) => match s.strip_prefix(l.as_str()) {
            Some(after) => match_loose(rest, after, out),
            None => false,
        },
        Token::Field { .. } => {
            let longest = s.find('/').unwrap_or(s.len());
            for len in (1..=longest).rev() {
                if !s.is_char_boundary(len) {
                    continue;
                }
                out.push(&s[..len]);
                if match_loose(rest, &s[len..], out) {
                    return true;
                }
                out.pop();
            }
            false
        }
    }
}

/// Backtracking matcher. Patterns are short and fields are separated by literals, so the
/// backtracking is shallow; this is much cheaper than a regex engine per pattern.
fn match_tokens<'r>(tokens: &[Token], s: &'r str, out: &mut Vec<&'r str>) -> bool {
    let Some((first, rest)) = tokens.split_first() else {
        return s.is_empty();
    };
    match first {
        Token::Literal(l) => match s.strip_prefix(l.as_str()) {
            Some(after) => match_tokens(rest, after, out),
            None => false,
        },
        Token::Field { ty, .. } => {
            // The lengths this field could take here, tried longest first.
            let (shortest, longest) = match ty {
                FieldType::Date => (10, if s.len() >= 10 { 10 } else { 0 }),
                FieldType::Hour => (13, if s.len() >= 13 { 13 } else { 0 }),
                FieldType::Int => {
                    let sign = usize::from(s.starts_with('-'));
                    let digits = s[sign..].bytes().take_while(u8::is_ascii_digit).count();
                    (sign + 1, sign + digits)
                }
                FieldType::Str => (1, s.find('/').unwrap_or(s.len())),
            };
            for len in (shortest..=longest).rev() {
                if !s.is_char_boundary(len) {
                    continue;
                }
                let value = &s[..len];
                if !ty.accepts(value) {
                    continue;
                }
                out.push(value);
                if match_tokens(rest, &s[len..], out) {
                    return true;
                }
                out.pop();
            }
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn p(s: &str) -> Pattern {
        Pattern::parse(s).unwrap()
    }

    #[test]
    fn matches_and_extracts_fields() {
        let pat = p("categorized/category={category}/date={date:date}");
        assert_eq!(
            pat.match_ref("categorized/category=news/date=2020-01-31"),
            Some(vec!["news", "2020-01-31"])
        );
        assert_eq!(
            pat.match_ref("categorized/category=news/date=2020-02-30"),
            None
        );
        assert_eq!(
            pat.match_ref("categorized/category=a/b/date=2020-01-31"),
            None
        );
        assert_eq!(pat.match_ref("categorized/category=/date=2020-01-31"), None);
        assert_eq!(pat.literal_prefix(), "categorized/category=");
    }

    #[test]
    fn ints_are_canonical() {
        let pat = p("n/{n:int}");
        assert_eq!(pat.match_ref("n/42"), Some(vec!["42"]));
        assert_eq!(pat.match_ref("n/-3"), Some(vec!["-3"]));
        assert_eq!(pat.match_ref("n/0"), Some(vec!["0"]));
        assert_eq!(pat.match_ref("n/007"), None);
        assert_eq!(pat.match_ref("n/-0"), None);
        assert_eq!(pat.match_ref("n/+1"), None);
        assert_eq!(pat.match_ref("n/99999999999999999999"), None);
    }

    #[test]
    fn hours_are_utc_hours_of_a_day() {
        let pat = p("hourly/hour={hour:hour}/part={n:int}");
        assert_eq!(
            pat.match_ref("hourly/hour=2026-12-01T23/part=1"),
            Some(vec!["2026-12-01T23", "1"])
        );
        for bad in [
            "2026-12-01T24",
            "2026-12-01T9",
            "2026-12-01 09",
            "2026-12-01t09",
            "2026-02-29T00",
            "2026-12-01T09Z",
            "2026-12-01",
        ] {
            assert_eq!(
                pat.match_ref(&format!("hourly/hour={bad}/part=1")),
                None,
                "{bad}"
            );
        }
        assert_eq!(parse_hour("1970-01-01T00"), Some(0));
        assert_eq!(parse_hour("1969-12-31T23"), Some(-1));
        assert_eq!(format_hour(-1).unwrap(), "1969-12-31T23");
        assert_eq!(
            pat.field_mismatch("hourly/hour=2026-12-01T24/part=1")
                .unwrap()
                .to_string(),
            "`2026-12-01T24` is not a valid hour (`YYYY-MM-DDTHH`, UTC, `00` to `23`) for field `hour`"
        );
        // An hour and a date in one segment, told apart by the literal between them.
        let pat = p("x/{d:date}_{h:hour}");
        assert_eq!(
            pat.match_ref("x/2026-12-01_2026-12-01T05"),
            Some(vec!["2026-12-01", "2026-12-01T05"])
        );
    }

    #[test]
    fn str_fields_backtrack_to_the_literal() {
        let pat = p("sum/{a}_{b}");
        assert_eq!(pat.match_ref("sum/x_y_z"), Some(vec!["x_y", "z"]));
        let pat = p("x/{n:int}_{s}");
        assert_eq!(pat.match_ref("x/12_ab"), Some(vec!["12", "ab"]));
    }

    #[test]
    fn mismatches_name_the_field_whose_text_is_not_of_its_type() {
        let pat = p("reviews/category={category}/date={date:date}");
        let m = pat
            .field_mismatch("reviews/category=news/date=2024-13-01")
            .unwrap();
        assert_eq!(
            m.to_string(),
            "`2024-13-01` is not a valid date for field `date`"
        );
        assert_eq!(
            pat.field_mismatch("reviews/category=news/date=yesterday")
                .unwrap()
                .value,
            "yesterday"
        );
        // A match, another shape, an empty field: no mismatch to explain.
        assert_eq!(
            pat.field_mismatch("reviews/category=news/date=2024-12-01"),
            None
        );
        assert_eq!(pat.field_mismatch("other/category=news/date=x"), None);
        assert_eq!(
            pat.field_mismatch("reviews/category=/date=2024-12-01"),
            None
        );
        assert_eq!(
            pat.field_mismatch("reviews/category=news/date=2024-12-01/extra"),
            None
        );
        let pat = p("n/{n:int}_{s}");
        assert_eq!(
            pat.field_mismatch("n/007_x").unwrap().to_string(),
            "`007` is not a valid integer for field `n`"
        );
    }

    #[test]
    fn renders_back() {
        let pat = p("a/{x}/b={y:int}.csv");
        let r = pat.render(&["q", "7"]);
        assert_eq!(r, "a/q/b=7.csv");
        assert_eq!(pat.match_ref(&r), Some(vec!["q", "7"]));
    }

    #[test]
    fn rejects_bad_patterns() {
        let cases = [
            ("a/{x", "unclosed"),
            ("a/x}", "without a matching"),
            (
                "a/{x:float}",
                "unknown type `float`; the field types are str, date, hour and int",
            ),
            ("a/{1x}", "field name"),
            ("a/{x}{y}", "next to each other"),
            ("a/{x}/{x}", "twice"),
            ("../{x}", "escape"),
            ("/abs/{x}", "absolute"),
        ];
        for (input, needle) in cases {
            let err = Pattern::parse(input).unwrap_err().to_string();
            assert!(err.contains(needle), "{input}: {err}");
        }
    }

    proptest! {
        /// Rendering any typed values and matching the result gives the values back.
        #[test]
        fn render_then_match_roundtrips(
            s in "[a-z][a-z0-9_=.-]{0,8}",
            n in any::<i64>(),
            d in 0i64..200_000,
        ) {
            let pat = p("t/{s}/n={n:int}/d={d:date}");
            let date = format_date(NaiveDate::from_ymd_opt(1900, 1, 1).unwrap() + chrono::Duration::days(d));
            let n = n.to_string();
            let r = pat.render(&[&s, &n, &date]);
            prop_assert_eq!(pat.match_ref(&r), Some(vec![s.as_str(), n.as_str(), date.as_str()]));
        }

        /// Every hour renders to text that parses back to it, matched by an `hour` field, and
        /// says the same time as chrono's formatting.
        #[test]
        fn hours_roundtrip(h in -17_000_000i64..70_000_000) {
            let text = format_hour(h).unwrap();
            prop_assert_eq!(parse_hour(&text), Some(h));
            let chrono_text = (NaiveDate::default().and_hms_opt(0, 0, 0).unwrap()
                + chrono::Duration::hours(h))
            .format("%Y-%m-%dT%H")
            .to_string();
            prop_assert_eq!(&text, &chrono_text);
            let pat = p("h/{h:hour}");
            let r = format!("h/{text}");
            prop_assert_eq!(pat.match_ref(&r), Some(vec![text.as_str()]));
        }

        /// The parser never panics, whatever it is given.
        #[test]
        fn parse_never_panics(s in "\\PC{0,24}") {
            let _ = Pattern::parse(&s);
        }
    }
}
