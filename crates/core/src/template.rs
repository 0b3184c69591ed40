//! Input templates: how a job's input refs follow from its output ref.
//!
//! `raw/reviews/date={date-1d}` reads the output's `date` field, moves it one day back and renders the
//! result. Expressions inside braces:
//! - `{f}` the output's field; `{f-1d}`, `{f+2w}` date offsets; `{h-1h}`, `{h-1d}` hour offsets;
//!   `{n-1}` int offsets;
//! - `{h:date}` an hour's day, `{d:hour}` a date's first hour (`T00`), offsets after them in the
//!   new type's units (`{h:date-1d}`, `{d:hour+23h}`);
//! - `{a..b}` an inclusive range between two such terms (`{date-6d..date}` is 7 refs,
//!   `{date:hour..date:hour+23h}` the 24 hours of a day);
//! - `{f=*}` every value of the graph domain `f`.
//!
//! Several multi-valued expressions in one template give their cartesian product.

use std::collections::BTreeMap;

use crate::pattern::{
    date_from_days, days_since_epoch, parse_date, parse_hour, push_date, push_hour, split_braces,
    BraceError, FieldType, Pattern, Piece,
};
use crate::refs::validate_path_text;
use crate::shape::{Part, Shape};

/// The most refs one range may produce; a larger range is almost certainly a typo.
pub const MAX_RANGE: i64 = 100_000;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("input template `{template}` is malformed: {why}")]
    Syntax { template: String, why: String },
    #[error("input template `{template}` uses field `{field}`, which output `{output}` lacks")]
    UnknownField {
        template: String,
        field: String,
        output: String,
    },
    #[error(
        "input template `{template}` uses field `{field}` as {a} in one output and {b} in another"
    )]
    TypeMismatch {
        template: String,
        field: String,
        a: FieldType,
        b: FieldType,
    },
    #[error("input template `{template}`: {why}")]
    BadOffset { template: String, why: String },
    #[error("input template `{template}` expands `{field}=*` but graph.domains has no `{field}`")]
    UnknownDomain { template: String, field: String },
    #[error("input template `{template}` leaves the representable range of {field} values")]
    Overflow { template: String, field: String },
    #[error("input template `{template}` gives a range of {size} refs, more than the limit of {MAX_RANGE}")]
    RangeTooLarge { template: String, size: i64 },
}

/// One side of an offset or range: a field of the output, maybe converted (`hour:date`), and an
/// offset in the units of the term's type: days (dates), hours (hours) or units (ints).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Term {
    field: String,
    offset: i64,
    /// The output field's type.
    from: FieldType,
    /// The term's type: `from`, or the type `:type` converts it to.
    ty: FieldType,
    /// The field's position in each output pattern of the job, in output order.
    positions: Vec<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Expr {
    Term(Term),
    Range(Term, Term),
    Domain(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum TPart {
    Literal(String),
    Expr(Expr),
}

/// A validated input template, bound to the outputs of one job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    source: String,
    parts: Vec<TPart>,
}

impl Template {
    /// Parses `source` and checks it against the job's output patterns and the graph's domains.
    pub fn parse(
        source: &str,
        outputs: &[Pattern],
        domains: &BTreeMap<String, Vec<String>>,
    ) -> Result<Template, TemplateError> {
        let syntax = |why: &str| TemplateError::Syntax {
            template: source.to_string(),
            why: why.to_string(),
        };
        let pieces = split_braces(source).map_err(|e| match e {
            BraceError::Unclosed => syntax("a `{` is never closed"),
            BraceError::StrayClose => syntax("a `}` has no matching `{`"),
        })?;
        let mut parts = Vec::with_capacity(pieces.len());
        for piece in pieces {
            parts.push(match piece {
                Piece::Text(t) => TPart::Literal(t.to_string()),
                Piece::Braced(inner) => TPart::Expr(parse_expr(source, inner, outputs, domains)?),
            });
        }
        let example: String = parts
            .iter()
            .map(|p| match p {
                TPart::Literal(l) => l.as_str(),
                TPart::Expr(_) => "x",
            })
            .collect();
        validate_path_text(&example).map_err(|e| syntax(&e.to_string()))?;
        Ok(Template {
            source: source.to_string(),
            parts,
        })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// The set of refs this template can produce, for linking it to the patterns it reads.
    pub fn shape(&self, domains: &BTreeMap<String, Vec<String>>) -> Shape {
        let parts: Vec<Part> = self
            .parts
            .iter()
            .map(|p| match p {
                TPart::Literal(l) => Part::Literal(l.clone()),
                TPart::Expr(Expr::Term(t) | Expr::Range(t, _)) => Part::Typed(t.ty),
                TPart::Expr(Expr::Domain(d)) => Part::OneOf(domains[d].clone()),
            })
            .collect();
        Shape::of_parts(&parts)
    }

    /// Appends the input refs for one output to `out`. `output` is the index of the output pattern the
    /// ref matched, `values` the field values it extracted.
    pub fn expand(
        &self,
        output: usize,
        values: &[&str],
        domains: &BTreeMap<String, Vec<String>>,
        out: &mut Vec<String>,
    ) -> Result<(), TemplateError> {
        // Most templates have only single-valued expressions: render them directly.
        let mut combos: Vec<String> = vec![String::with_capacity(self.source.len() + 8)];
        for part in &self.parts {
            match part {
                TPart::Literal(l) => combos.iter_mut().for_each(|c| c.push_str(l)),
                TPart::Expr(Expr::Term(t)) if combos.len() == 1 => {
                    self.push_term(&mut combos[0], t, output, values)?;
                }
                TPart::Expr(Expr::Term(t)) => {
                    let v = self.term_value(t, output, values)?;
                    combos.iter_mut().for_each(|c| c.push_str(&v));
                }
                TPart::Expr(expr) => {
                    let options = self.expr_values(expr, output, values, domains)?;
                    combos = combos
                        .iter()
                        .flat_map(|c| options.iter().map(move |o| format!("{c}{o}")))
                        .collect();
                }
            }
        }
        out.extend(combos);
        Ok(())
    }

    fn expr_values(
        &self,
        expr: &Expr,
        output: usize,
        values: &[&str],
        domains: &BTreeMap<String, Vec<String>>,
    ) -> Result<Vec<String>, TemplateError> {
        match expr {
            Expr::Term(t) => Ok(vec![self.term_value(t, output, values)?]),
            Expr::Domain(d) => Ok(domains[d].clone()),
            Expr::Range(a, b) => {
                let (start, end) = (
                    self.term_number(a, output, values)?,
                    self.term_number(b, output, values)?,
                );
                let size = end - start + 1;
                if size > MAX_RANGE {
                    return Err(TemplateError::RangeTooLarge {
                        template: self.source.clone(),
                        size,
                    });
                }
                // Each step is rendered from its number: the ends are parsed once.
                (start..=end)
                    .map(|n| {
                        let mut out = String::with_capacity(16);
                        self.push_number(&mut out, a, n)?;
                        Ok(out)
                    })
                    .collect()
            }
        }
    }

    /// The term's value as a number: days since the epoch for dates, hours since the epoch for
    /// hours, the int itself for ints; converted to the term's type and moved by its offset.
    fn term_number(&self, t: &Term, output: usize, values: &[&str]) -> Result<i64, TemplateError> {
        let raw = values[t.positions[output]];
        let base = match t.from {
            FieldType::Date => {
                days_since_epoch(parse_date(raw).expect("matched refs hold valid dates"))
            }
            FieldType::Hour => parse_hour(raw).expect("matched refs hold valid hours"),
            _ => raw.parse::<i64>().expect("matched refs hold valid ints"),
        };
        let converted = match (t.from, t.ty) {
            (FieldType::Date, FieldType::Hour) => base.checked_mul(24),
            (FieldType::Hour, FieldType::Date) => Some(base.div_euclid(24)),
            _ => Some(base),
        };
        converted
            .and_then(|n| n.checked_add(t.offset))
            .ok_or_else(|| self.overflow(t))
    }

    /// Appends the rendering of `n` (a [`Template::term_number`]) in the term's type.
    fn push_number(&self, out: &mut String, t: &Term, n: i64) -> Result<(), TemplateError> {
        let done = match t.ty {
            FieldType::Date => date_from_days(n).map(|d| push_date(out, d)),
            FieldType::Hour => push_hour(out, n),
            _ => {
                use std::fmt::Write;
                let _ = write!(out, "{n}");
                Some(())
            }
        };
        done.ok_or_else(|| self.overflow(t))
    }

    /// The term's rendered value.
    fn term_value(
        &self,
        t: &Term,
        output: usize,
        values: &[&str],
    ) -> Result<String, TemplateError> {
        let mut out = String::with_capacity(16);
        if t.ty == FieldType::Str {
            out.push_str(values[t.positions[output]]);
            return Ok(out);
        }
        let n = self.term_number(t, output, values)?;
        self.push_number(&mut out, t, n)?;
        Ok(out)
    }

    /// Appends the term's value to `out` without an intermediate string (the common case).
    fn push_term(
        &self,
        out: &mut String,
        t: &Term,
        output: usize,
        values: &[&str],
    ) -> Result<(), TemplateError> {
        if (t.offset == 0 && t.from == t.ty) || t.ty == FieldType::Str {
            out.push_str(values[t.positions[output]]);
            return Ok(());
        }
        let n = self.term_number(t, output, values)?;
        self.push_number(out, t, n)
    }

    fn overflow(&self, t: &Term) -> TemplateError {
        TemplateError::Overflow {
            template: self.source.clone(),
            field: t.field.clone(),
        }
    }
}

fn parse_expr(
    source: &str,
    inner: &str,
    outputs: &[Pattern],
    domains: &BTreeMap<String, Vec<String>>,
) -> Result<Expr, TemplateError> {
    let inner = inner.trim();
    if let Some(field) = inner.strip_suffix("=*") {
        let field = field.trim();
        if !domains.contains_key(field) {
            return Err(TemplateError::UnknownDomain {
                template: source.to_string(),
                field: field.to_string(),
            });
        }
        return Ok(Expr::Domain(field.to_string()));
    }
    if let Some((a, b)) = inner.split_once("..") {
        let a = parse_term(source, a, outputs)?;
        let b = parse_term(source, b, outputs)?;
        let bad = |why: String| TemplateError::BadOffset {
            template: source.to_string(),
            why,
        };
        if a.ty != b.ty || a.ty == FieldType::Str {
            return Err(bad(format!(
                "a range needs two date, two hour or two int terms, not {} and {}",
                a.ty, b.ty
            )));
        }
        if a.field == b.field && a.offset > b.offset {
            return Err(bad(format!(
                "the range `{inner}` is empty: its start comes after its end"
            )));
        }
        return Ok(Expr::Range(a, b));
    }
    Ok(Expr::Term(parse_term(source, inner, outputs)?))
}

fn parse_term(source: &str, text: &str, outputs: &[Pattern]) -> Result<Term, TemplateError> {
    let text = text.trim();
    let field_end = text.find([':', '+', '-']).unwrap_or(text.len());
    let field = &text[..field_end];
    let (convert, offset_text) = match text[field_end..].strip_prefix(':') {
        Some(rest) => {
            let end = rest.find(['+', '-']).unwrap_or(rest.len());
            (
                Some(&rest[..end]),
                Some(&rest[end..]).filter(|o| !o.is_empty()),
            )
        }
        None => (None, Some(&text[field_end..]).filter(|o| !o.is_empty())),
    };
    if !crate::pattern::is_identifier(field) {
        return Err(TemplateError::Syntax {
            template: source.to_string(),
            why: format!("`{text}` is not a field, an offset like `date-1d` or `hour-1h`, a conversion like `hour:date` or `date:hour+23h`, a range like `date-6d..date`, or a domain like `category=*`"),
        });
    }
    let mut from = None;
    let mut positions = Vec::with_capacity(outputs.len());
    for output in outputs {
        let (pos, t) = output
            .field_index(field)
            .zip(output.field_type(field))
            .ok_or_else(|| TemplateError::UnknownField {
                template: source.to_string(),
                field: field.to_string(),
                output: output.to_string(),
            })?;
        match from {
            Some(prev) if prev != t => {
                return Err(TemplateError::TypeMismatch {
                    template: source.to_string(),
                    field: field.to_string(),
                    a: prev,
                    b: t,
                })
            }
            _ => from = Some(t),
        }
        positions.push(pos);
    }
    let from = from.expect("a job has at least one output");
    let bad = |why: String| TemplateError::BadOffset {
        template: source.to_string(),
        why: format!("`{text}`: {why}"),
    };
    let ty = match convert.map(str::trim) {
        None => from,
        Some(to) => match (from, to) {
            (FieldType::Date, "date") | (FieldType::Hour, "date") => FieldType::Date,
            (FieldType::Date, "hour") | (FieldType::Hour, "hour") => FieldType::Hour,
            (_, "date" | "hour") => {
                return Err(bad(format!(
                    "a {from} field cannot be read as {to}s; `:hour` reads a date as its first hour (00), `:date` an hour as its day"
                )))
            }
            (_, other) => {
                return Err(bad(format!(
                    "unknown conversion `:{other}`; use `:date` (an hour's day) or `:hour` (a date's first hour)"
                )))
            }
        },
    };
    let offset = match offset_text {
        None => 0,
        Some(o) => parse_offset(o, ty).map_err(|why| bad(why.to_string()))?,
    };
    Ok(Term {
        field: field.to_string(),
        offset,
        from,
        ty,
        positions,
    })
}

/// Why an offset's text (`-1d`, `+2`) is not one; [`TemplateError::BadOffset`] shows it after
/// the offset.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
enum OffsetError {
    #[error("an offset needs a number after the sign")]
    NoNumber,
    #[error("a date offset needs a unit: `d` (days) or `w` (weeks)")]
    NoDateUnit,
    #[error("unknown date unit `{0}`; use `d` or `w`")]
    DateUnit(String),
    #[error("an hour offset needs a unit: `h` (hours), `d` (24 hours) or `w` (168 hours)")]
    NoHourUnit,
    #[error("unknown hour unit `{0}`; use `h`, `d` or `w`")]
    HourUnit(String),
    #[error("an int offset takes no unit, found `{0}`")]
    IntUnit(String),
    #[error("a str field cannot be offset")]
    Str,
    #[error("the offset is too large")]
    TooLarge,
}

/// `-1d`, `+2w` for dates (in days), `-1h`, `+1d` for hours (in hours), `-1`, `+10` for ints.
fn parse_offset(text: &str, ty: FieldType) -> Result<i64, OffsetError> {
    let (sign, rest) = text.split_at(1);
    let sign = if sign == "-" { -1 } else { 1 };
    let digits_end = rest
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(rest.len());
    let (digits, unit) = rest.split_at(digits_end);
    let n: i64 = digits.parse().map_err(|_| OffsetError::NoNumber)?;
    let scale = match (ty, unit) {
        (FieldType::Date, "d") => 1,
        (FieldType::Date, "w") => 7,
        (FieldType::Date, "") => return Err(OffsetError::NoDateUnit),
        (FieldType::Date, u) => return Err(OffsetError::DateUnit(u.to_string())),
        (FieldType::Hour, "h") => 1,
        (FieldType::Hour, "d") => 24,
        (FieldType::Hour, "w") => 168,
        (FieldType::Hour, "") => return Err(OffsetError::NoHourUnit),
        (FieldType::Hour, u) => return Err(OffsetError::HourUnit(u.to_string())),
        (FieldType::Int, "") => 1,
        (FieldType::Int, u) => return Err(OffsetError::IntUnit(u.to_string())),
        (FieldType::Str, _) => return Err(OffsetError::Str),
    };
    n.checked_mul(scale)
        .map(|v| v * sign)
        .ok_or(OffsetError::TooLarge)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pattern::format_date;
    use chrono::Duration;
    use proptest::prelude::*;

    fn domains() -> BTreeMap<String, Vec<String>> {
        BTreeMap::from([(
            "category".to_string(),
            vec!["comedy".to_string(), "news".to_string()],
        )])
    }

    fn expand(template: &str, output: &str, r: &str) -> Result<Vec<String>, TemplateError> {
        let out = Pattern::parse(output).unwrap();
        let t = Template::parse(template, std::slice::from_ref(&out), &domains())?;
        let values = out.match_ref(r).expect("test ref matches");
        let mut refs = Vec::new();
        t.expand(0, &values, &domains(), &mut refs)?;
        Ok(refs)
    }

    #[test]
    fn offsets_ranges_and_domains() {
        let out = "s/category={category}/date={date:date}";
        let r = "s/category=news/date=2020-03-01";
        assert_eq!(
            expand("raw/date={date-1d}", out, r).unwrap(),
            ["raw/date=2020-02-29"]
        );
        assert_eq!(
            expand("raw/date={date+1w}", out, r).unwrap(),
            ["raw/date=2020-03-08"]
        );
        let window = expand("c/{category}/{date-6d..date}", out, r).unwrap();
        assert_eq!(window.len(), 7);
        assert_eq!(window[0], "c/news/2020-02-24");
        assert_eq!(window[6], "c/news/2020-03-01");
        assert_eq!(
            expand("c/category={category=*}/date={date}", out, r).unwrap(),
            [
                "c/category=comedy/date=2020-03-01",
                "c/category=news/date=2020-03-01"
            ]
        );
        assert_eq!(
            expand("x/{category=*}/{date-1d..date}", out, r)
                .unwrap()
                .len(),
            4
        );
        assert_eq!(expand("n/{n-1}", "n/{n:int}", "n/0").unwrap(), ["n/-1"]);
        assert_eq!(
            expand("n/{n..n+2}", "n/{n:int}", "n/5").unwrap(),
            ["n/5", "n/6", "n/7"]
        );
        assert_eq!(expand("fixed/ref", out, r).unwrap(), ["fixed/ref"]);
    }

    #[test]
    fn rejects_bad_templates() {
        let out = "s/{category}/{date:date}/{n:int}";
        let r = "s/news/2020-01-01/1";
        let cases = [
            ("raw/{day}", "lacks"),
            ("raw/{date-1}", "needs a unit"),
            ("raw/{date-1x}", "unknown date unit"),
            ("raw/{n-1d}", "takes no unit"),
            ("raw/{category-1d}", "cannot be offset"),
            ("raw/{region=*}", "graph.domains has no `region`"),
            ("raw/{date..date-1d}", "empty"),
            ("raw/{date..n}", "two date, two hour or two int"),
            ("raw/{date", "never closed"),
            ("raw/{date-}", "number after the sign"),
            ("../{date}", "escape"),
            ("raw/{1date}", "not a field"),
        ];
        for (template, needle) in cases {
            let err = expand(template, out, r).unwrap_err().to_string();
            assert!(err.contains(needle), "{template}: {err}");
        }
        let err = expand("r/{n-1000000..n}", "r/{n:int}", "r/1").unwrap_err();
        assert!(matches!(err, TemplateError::RangeTooLarge { .. }), "{err}");
    }

    #[test]
    fn hours_offset_across_days_and_convert_to_and_from_dates() {
        let out = "hourly/hour={hour:hour}";
        let r = "hourly/hour=2026-12-01T00";
        assert_eq!(
            expand("hourly/hour={hour-1h}", out, r).unwrap(),
            ["hourly/hour=2026-11-30T23"]
        );
        assert_eq!(expand("h/{hour-24h}", out, r).unwrap(), ["h/2026-11-30T00"]);
        assert_eq!(expand("h/{hour-1d}", out, r).unwrap(), ["h/2026-11-30T00"]);
        assert_eq!(
            expand("h/{hour+1h}", out, "hourly/hour=2026-12-31T23").unwrap(),
            ["h/2027-01-01T00"]
        );
        assert_eq!(
            expand("h/{hour-2h..hour}", out, "hourly/hour=2024-03-01T01").unwrap(),
            ["h/2024-02-29T23", "h/2024-03-01T00", "h/2024-03-01T01"]
        );
        // An hourly job reads its day, and the day before.
        assert_eq!(
            expand("daily/{hour:date}", out, "hourly/hour=2026-12-01T23").unwrap(),
            ["daily/2026-12-01"]
        );
        assert_eq!(
            expand("daily/{hour:date-1d}", out, "hourly/hour=2026-12-01T00").unwrap(),
            ["daily/2026-11-30"]
        );
        // A daily job reads its 24 hours.
        let hours = expand(
            "hourly/hour={date:hour..date:hour+23h}",
            "daily/{date:date}",
            "daily/2026-12-01",
        )
        .unwrap();
        assert_eq!(hours.len(), 24);
        assert_eq!(hours[0], "hourly/hour=2026-12-01T00");
        assert_eq!(hours[23], "hourly/hour=2026-12-01T23");
        assert_eq!(
            expand("h/{date:hour-1h}", "d/{date:date}", "d/2026-12-01").unwrap(),
            ["h/2026-11-30T23"]
        );
        // Before 1970 too.
        assert_eq!(
            expand("d/{hour:date}", out, "hourly/hour=1969-12-31T05").unwrap(),
            ["d/1969-12-31"]
        );
        // The shape of a converted term is the new type's: it links to hourly patterns.
        let outs = [Pattern::parse("daily/{date:date}").unwrap()];
        let t =
            Template::parse("hourly/hour={date:hour..date:hour+23h}", &outs, &domains()).unwrap();
        let hourly = crate::shape::Shape::of_pattern(&Pattern::parse(out).unwrap());
        assert!(t.shape(&domains()).intersects(&hourly));
        let daily =
            crate::shape::Shape::of_pattern(&Pattern::parse("hourly/hour={d:date}").unwrap());
        assert!(!t.shape(&domains()).intersects(&daily));
    }

    #[test]
    fn rejects_bad_hour_terms() {
        let out = "s/{category}/{date:date}/{hour:hour}/{n:int}";
        let r = "s/news/2020-01-01/2020-01-01T05/1";
        let cases = [
            ("raw/{hour-1}", "an hour offset needs a unit"),
            ("raw/{hour-1m}", "unknown hour unit `m`"),
            ("raw/{date-1h}", "unknown date unit `h`"),
            ("raw/{n:date}", "a int field cannot be read as dates"),
            ("raw/{category:hour}", "cannot be read as hours"),
            ("raw/{hour:week}", "unknown conversion `:week`"),
            ("raw/{hour..date}", "two date, two hour or two int"),
            ("raw/{hour..hour-1h}", "empty"),
            ("raw/{hour:}", "unknown conversion"),
        ];
        for (template, needle) in cases {
            let err = expand(template, out, r).unwrap_err().to_string();
            assert!(err.contains(needle), "{template}: {err}");
        }
    }

    #[test]
    fn field_types_must_agree_across_outputs() {
        let outs = [
            Pattern::parse("a/{x:int}").unwrap(),
            Pattern::parse("b/{x:date}").unwrap(),
        ];
        let err = Template::parse("c/{x}", &outs, &domains()).unwrap_err();
        assert!(matches!(err, TemplateError::TypeMismatch { .. }), "{err}");
        let outs = [
            Pattern::parse("a/{x:int}").unwrap(),
            Pattern::parse("b/{y:int}").unwrap(),
        ];
        let err = Template::parse("c/{x}", &outs, &domains()).unwrap_err();
        assert!(matches!(err, TemplateError::UnknownField { .. }), "{err}");
    }

    proptest! {
        /// A date window yields exactly its width in distinct, consecutive dates, whatever the anchor.
        #[test]
        fn windows_are_complete_and_distinct(days in 0i64..100_000, lo in 0i64..40, width in 0i64..40) {
            let date = format_date(chrono::NaiveDate::from_ymd_opt(1800, 1, 1).unwrap() + Duration::days(days));
            let template = format!("w/{{d-{}d..d-{}d}}", lo + width, lo);
            let refs = expand(&template, "o/{d:date}", &format!("o/{date}")).unwrap();
            prop_assert_eq!(refs.len() as i64, width + 1);
            let unique: std::collections::HashSet<_> = refs.iter().collect();
            prop_assert_eq!(unique.len(), refs.len());
            let mut sorted = refs.clone();
            sorted.sort();
            prop_assert_eq!(sorted, refs);
        }

        /// An hour moved by any offset, across days, months, years and leap days, is the hour
        /// chrono's arithmetic gives; and its day is chrono's date of that time.
        #[test]
        fn hour_offsets_agree_with_chrono(h in -2_000_000i64..2_000_000, off in -100_000i64..100_000) {
            let epoch = chrono::NaiveDate::default().and_hms_opt(0, 0, 0).unwrap();
            let at = |h: i64| epoch + Duration::hours(h);
            let text = |t: chrono::NaiveDateTime| t.format("%Y-%m-%dT%H").to_string();
            let r = format!("o/{}", text(at(h)));
            let template = if off < 0 { format!("w/{{h{off}h}}") } else { format!("w/{{h+{off}h}}") };
            prop_assert_eq!(
                expand(&template, "o/{h:hour}", &r).unwrap(),
                vec![format!("w/{}", text(at(h + off)))]
            );
            let days = off % 1000;
            let day = if days < 0 { format!("w/{{h:date{days}d}}") } else { format!("w/{{h:date+{days}d}}") };
            prop_assert_eq!(
                expand(&day, "o/{h:hour}", &r).unwrap(),
                vec![format!("w/{}", format_date(at(h).date() + Duration::days(days)))]
            );
        }

        #[test]
        fn parse_never_panics(s in "\\PC{0,24}") {
            let outs = [Pattern::parse("o/{d:date}/{n:int}").unwrap()];
            let _ = Template::parse(&s, &outs, &domains());
        }
    }
}
