//! A dataset's partition health grid: its partitions by state, one cell per partition or per
//! period. Two fields (category × date) make a matrix, one date field a calendar (months by
//! days), one other field rows of cells in ref order. Large domains are shown in weeks or months
//! whose cells zoom in.
//!
//! A page costs its cells, never its dataset: at most [`ROWS`] rows and a window of columns,
//! read as exact refs in one read (`partitions_by_ref`); row values come from the graph's
//! domain or, failing that, one indexed seek per row (the first ref after the previous row's);
//! only the partitions shown have their freshness derived.

use std::collections::BTreeMap;

use chrono::{Datelike, Duration, NaiveDate};
use databuild_core::pattern::{format_date, parse_date, Token};
use databuild_core::{FieldType, Pattern, Producer};
use databuild_exec::answers::DerivedStatus;
use databuild_exec::Engine;
use databuild_log::PartitionQuery;

use crate::svg::Cell;

/// Rows of a page.
pub const ROWS: usize = 20;
/// Columns of a page of a field that is not a date (or of one-field rows).
pub const COLUMNS: usize = 40;

/// How much time a column of a date grid covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Zoom {
    Day,
    Week,
    Month,
}

impl Zoom {
    pub fn parse(s: &str) -> Result<Zoom, GridError> {
        match s {
            "day" => Ok(Zoom::Day),
            "week" => Ok(Zoom::Week),
            "month" => Ok(Zoom::Month),
            other => Err(GridError::Zoom(other.to_string())),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Zoom::Day => "day",
            Zoom::Week => "week",
            Zoom::Month => "month",
        }
    }

    /// How many columns a window has.
    fn columns(self) -> usize {
        match self {
            Zoom::Day => 42,
            Zoom::Week => 26,
            Zoom::Month => 12,
        }
    }
}

/// The states a filter may ask for.
pub const STATES: [DerivedStatus; 7] = [
    DerivedStatus::Live,
    DerivedStatus::Stale,
    DerivedStatus::CheckFailed,
    DerivedStatus::Missing,
    DerivedStatus::Building,
    DerivedStatus::Failed,
    DerivedStatus::Tainted,
];

#[derive(Debug, thiserror::Error)]
pub enum GridError {
    #[error("no dataset `{0}` in the graph")]
    NoDataset(String),
    #[error("`{0}` is not a zoom; use day, week or month")]
    Zoom(String),
    #[error(transparent)]
    State(#[from] databuild_exec::answers::UnknownStatus),
    #[error("`{0}` is not a date (YYYY-MM-DD)")]
    Date(String),
    #[error(transparent)]
    Engine(#[from] databuild_exec::EngineError),
    #[error(transparent)]
    Log(#[from] databuild_log::LogError),
}

impl From<GridError> for crate::error::AppError {
    fn from(e: GridError) -> Self {
        match e {
            GridError::NoDataset(_) => crate::error::AppError::not_found(e.to_string()),
            GridError::Engine(e) => e.into(),
            GridError::Log(e) => e.into(),
            other => crate::error::AppError::bad_request(other.to_string()),
        }
    }
}

/// What a page of the grid shows.
#[derive(Debug, Default)]
pub struct GridQuery {
    pub state: Option<DerivedStatus>,
    pub zoom: Option<Zoom>,
    /// The last date of a date window.
    pub end: Option<NaiveDate>,
    /// Rows after this value (keyset).
    pub rows_after: Option<String>,
    /// Columns after this value (keyset; a field that is not a date).
    pub cols_after: Option<String>,
}

/// How the grid is laid out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// Rows by one field, columns by dates.
    Matrix,
    /// Rows by one field, columns by another field's values.
    Table,
    /// One date field: months by days.
    Calendar,
    /// One field that is not a date: refs in order, a row of cells at a time.
    Strip,
    /// Three fields or more: no grid (the partitions listing filters them).
    None,
}

/// A page of the grid, ready to draw.
pub struct Grid {
    pub shape: Shape,
    pub pattern: String,
    pub row_field: Option<String>,
    pub column_field: Option<String>,
    pub rows: Vec<String>,
    pub columns: Vec<String>,
    pub cells: Vec<Vec<Cell>>,
    /// Partitions by state among the cells shown.
    pub counts: BTreeMap<DerivedStatus, u64>,
    pub zoom: Option<Zoom>,
    /// The window's last date (date grids).
    pub end: Option<NaiveDate>,
    /// The window's length in days (date grids), to page by.
    pub window_days: i64,
    /// The cursor of the next page of rows, if any.
    pub next_rows: Option<String>,
    /// The cursor of the next page of columns (or of a strip), if any.
    pub next_cols: Option<String>,
    /// How many partitions' states the page read.
    pub partitions_read: usize,
}

/// The producer a dataset page names: a dataset, a table alias, or a job's `output`.
pub fn producer(engine: &Engine, name: &str, output: usize) -> Result<Producer, GridError> {
    engine
        .graph
        .producers()
        .filter(|p| engine.graph.producer_name(*p) == name)
        .find(|p| !matches!(p, Producer::Job { output: o, .. } if *o != output))
        .ok_or_else(|| GridError::NoDataset(name.to_string()))
}

/// A state a filter asks for, by its name (one of [`STATES`]).
pub fn state(text: &str) -> Result<DerivedStatus, GridError> {
    Ok(DerivedStatus::parse_one_of(text, &STATES)?)
}

/// How bad a state is, for the cell of a period (and the day of a dataset's strip).
pub(crate) fn rank(state: DerivedStatus) -> u8 {
    match state {
        DerivedStatus::Failed => 7,
        DerivedStatus::CheckFailed => 6,
        DerivedStatus::Tainted => 5,
        DerivedStatus::Building => 4,
        DerivedStatus::Stale => 3,
        DerivedStatus::Missing | DerivedStatus::Expired => 2,
        DerivedStatus::Live => 1,
    }
}

/// The text after a field that ends its value in a ref: the next literal's first character.
fn terminator(pattern: &Pattern, field: usize) -> Option<char> {
    let mut seen = 0;
    let mut after = false;
    for t in pattern.tokens() {
        match t {
            Token::Field { .. } => {
                if after {
                    return None;
                }
                after = seen == field;
                seen += 1;
            }
            Token::Literal(l) if after => return l.chars().next(),
            Token::Literal(_) => {}
        }
    }
    None
}

/// The literal text before the first field.
fn prefix(pattern: &Pattern) -> &str {
    pattern.literal_prefix()
}

/// The escaped glob of a literal text (GLOB's special characters as `?`, which they match).
fn glob_literal(l: &str) -> String {
    l.replace(['[', '*', '?'], "?")
}

/// The glob of the pattern's refs whose field number `field` is `value`.
fn glob_with(pattern: &Pattern, field: usize, value: &str) -> String {
    let mut n = 0;
    pattern
        .tokens()
        .iter()
        .map(|t| match t {
            Token::Literal(l) => glob_literal(l),
            Token::Field { .. } => {
                n += 1;
                if n - 1 == field {
                    glob_literal(value)
                } else {
                    "*".to_string()
                }
            }
        })
        .collect()
}

/// Up to `n` values of the first field after `after`, each found by one seek: the first ref past
/// every ref of the previous value.
fn first_field_values(
    engine: &Engine,
    pattern: &Pattern,
    after: Option<&str>,
    n: usize,
) -> Result<(Vec<String>, bool), GridError> {
    let glob = pattern.glob();
    let end = terminator(pattern, 0).map(String::from).unwrap_or_default();
    let mut values = Vec::new();
    let mut cursor = after.map(|v| format!("{}{v}{end}\u{10FFFF}", prefix(pattern)));
    while values.len() <= n {
        let rows = engine.store.partitions(&PartitionQuery {
            pattern: Some(glob.clone()),
            limit: 1,
            after: cursor.clone(),
            ..Default::default()
        })?;
        let Some(row) = rows.into_iter().next() else {
            break;
        };
        let Some(found) = pattern.match_ref(&row.partition_ref) else {
            // A deeper ref matching the glob: step past it.
            cursor = Some(row.partition_ref);
            continue;
        };
        let value = found[0].to_string();
        cursor = Some(format!("{}{value}{end}\u{10FFFF}", prefix(pattern)));
        values.push(value);
    }
    let more = values.len() > n;
    values.truncate(n);
    Ok((values, more))
}

/// The values of a field to show after `after`: its domain when the graph declares one, else
/// (the first field only) found in the log.
fn field_values(
    engine: &Engine,
    pattern: &Pattern,
    field: usize,
    after: Option<&str>,
    n: usize,
) -> Result<Option<(Vec<String>, bool)>, GridError> {
    let name = pattern.fields().nth(field).map(|(n, _)| n).unwrap_or("");
    if let Some(domain) = engine.graph.domains.get(name) {
        let start = after
            .and_then(|a| domain.iter().position(|v| v == a).map(|i| i + 1))
            .unwrap_or(0);
        let values: Vec<String> = domain.iter().skip(start).take(n + 1).cloned().collect();
        let more = values.len() > n;
        return Ok(Some((values.into_iter().take(n).collect(), more)));
    }
    if field == 0 {
        return Ok(Some(first_field_values(engine, pattern, after, n)?));
    }
    Ok(None)
}

/// The text every ref of `pattern` starts with whose fields before number `field` are `values`.
fn text_before(pattern: &Pattern, field: usize, values: &[&str]) -> String {
    let mut text = String::new();
    let mut n = 0;
    for t in pattern.tokens() {
        match t {
            Token::Literal(l) => text.push_str(l),
            Token::Field { .. } if n == field => break,
            Token::Field { .. } => {
                text.push_str(values.get(n).copied().unwrap_or(""));
                n += 1;
            }
        }
    }
    text
}

/// The newest date of a ref starting with `prefix` followed by a date, if the log has one. Refs
/// sort by their text, so whether one has a date after `d` is one seek (the first ref after
/// `prefix` + `d`); the newest is found by bisection, at most 17 seeks.
fn newest_date(engine: &Engine, glob: &str, prefix: &str) -> Result<Option<NaiveDate>, GridError> {
    let after = |d: NaiveDate| -> Result<Option<NaiveDate>, GridError> {
        let rows = engine.store.partitions(&PartitionQuery {
            pattern: Some(glob.to_string()),
            limit: 1,
            after: Some(format!("{prefix}{}\u{10FFFF}", format_date(d))),
            ..Default::default()
        })?;
        Ok(rows
            .first()
            .and_then(|row| row.partition_ref.strip_prefix(prefix))
            .and_then(|rest| rest.get(..10))
            .and_then(parse_date)
            .filter(|found| *found > d))
    };
    let (mut lo, mut hi) = (
        NaiveDate::from_ymd_opt(1970, 1, 1).unwrap_or_default(),
        NaiveDate::from_ymd_opt(2199, 12, 31).unwrap_or_default(),
    );
    // The first ref with any date: none, none at all.
    let Some(first) = after(lo - Duration::days(1))? else {
        return Ok(None);
    };
    lo = first;
    // Invariant: a ref has date `lo`; none has a date after `hi`.
    while lo < hi {
        let mid = lo + Duration::days((hi - lo).num_days() / 2);
        match after(mid)? {
            Some(later) => lo = later,
            None => hi = mid,
        }
    }
    Ok(Some(lo))
}

/// Where a date window ends by default: the newest date a partition of the pattern has in the
/// log (of any of `rows`, the values of the field before the date, if there is one), so the
/// newest partition is always in the first window; else today.
fn default_end(
    engine: &Engine,
    pattern: &Pattern,
    date: usize,
    rows: &[String],
) -> Result<NaiveDate, GridError> {
    let glob = pattern.glob();
    let mut newest = None;
    if date == 0 {
        newest = newest_date(engine, &glob, &text_before(pattern, 0, &[]))?;
    } else {
        for row in rows {
            let found = newest_date(engine, &glob, &text_before(pattern, date, &[row]))?;
            newest = newest.max(found);
        }
    }
    Ok(newest
        .or_else(|| parse_date(&engine.today()))
        .unwrap_or_default())
}

/// The periods of a date window ending at `end`: each with its label and its dates.
fn periods(zoom: Zoom, end: NaiveDate) -> Vec<(String, Vec<NaiveDate>)> {
    let n = zoom.columns() as i64;
    match zoom {
        Zoom::Day => (0..n)
            .rev()
            .map(|i| end - Duration::days(i))
            .map(|d| (format_date(d), vec![d]))
            .collect(),
        Zoom::Week => {
            // Weeks from Monday, the last one holding `end`.
            let last_monday = end - Duration::days(end.weekday().num_days_from_monday() as i64);
            (0..n)
                .rev()
                .map(|i| {
                    let monday = last_monday - Duration::weeks(i);
                    let days = (0..7).map(|d| monday + Duration::days(d)).collect();
                    (format!("{} (week)", format_date(monday)), days)
                })
                .collect()
        }
        Zoom::Month => {
            let first = NaiveDate::from_ymd_opt(end.year(), end.month(), 1).unwrap_or(end);
            (0..n as u32)
                .rev()
                .filter_map(|i| {
                    let months = first.year() * 12 + first.month0() as i32 - i as i32;
                    let start = NaiveDate::from_ymd_opt(months / 12, months as u32 % 12 + 1, 1)?;
                    let days = start
                        .iter_days()
                        .take_while(|d| d.month() == start.month())
                        .collect();
                    Some((format!("{}", start.format("%Y-%m")), days))
                })
                .collect()
        }
    }
}

/// The last date of a period (what its cell zooms in to).
fn period_end(dates: &[NaiveDate]) -> NaiveDate {
    dates.last().copied().unwrap_or_default()
}

/// The states now of `refs` (absent ones `missing`), read at once.
fn states(engine: &Engine, refs: &[String]) -> Result<BTreeMap<String, DerivedStatus>, GridError> {
    let wanted: Vec<&str> = refs.iter().map(String::as_str).collect();
    let rows = engine.store.partitions_by_ref(&wanted)?;
    let keys: Vec<String> = rows.iter().map(|r| r.partition_ref.clone()).collect();
    let shown = engine.shown_states(rows)?;
    Ok(keys.into_iter().zip(shown).collect())
}

/// One cell: its partitions' states counted; coloured by the worst, or by the filter's state.
fn cell(
    counts: &BTreeMap<DerivedStatus, u64>,
    filter: Option<DerivedStatus>,
    title: String,
    href: String,
) -> Cell {
    // The worst state of the partitions there are; a period partly built is `partial`.
    let worst = match counts
        .keys()
        .copied()
        .filter(|s| *s != DerivedStatus::Missing)
        .max_by_key(|s| rank(*s))
    {
        None => DerivedStatus::Missing.as_str(),
        Some(DerivedStatus::Live) if counts.contains_key(&DerivedStatus::Missing) => "partial",
        Some(s) => s.as_str(),
    };
    let status = match filter {
        Some(f) if counts.contains_key(&f) => f.to_string(),
        Some(_) => "other".to_string(),
        None => worst.to_string(),
    };
    let said: Vec<String> = counts.iter().map(|(s, n)| format!("{n} {s}")).collect();
    Cell {
        status,
        title: format!("{title}: {}", said.join(", ")),
        href,
    }
}

fn partition_href(r: &str) -> String {
    format!("/partitions/{}", databuild_core::refs::encode_segment(r))
}

/// A page of the grid of `producer`'s partitions. `link(zoom, end)` makes a period's zoom link.
pub fn grid(
    engine: &Engine,
    producer: Producer,
    q: &GridQuery,
    link: &dyn Fn(Zoom, NaiveDate) -> String,
) -> Result<Grid, GridError> {
    let filter = q.state;
    let pattern = engine.graph.pattern_of(producer).clone();
    let fields: Vec<(String, FieldType)> =
        pattern.fields().map(|(n, t)| (n.to_string(), t)).collect();
    let date = fields.iter().position(|(_, t)| *t == FieldType::Date);
    let mut g = Grid {
        shape: Shape::None,
        pattern: pattern.to_string(),
        row_field: None,
        column_field: None,
        rows: Vec::new(),
        columns: Vec::new(),
        cells: Vec::new(),
        counts: BTreeMap::new(),
        zoom: None,
        end: None,
        window_days: 0,
        next_rows: None,
        next_cols: None,
        partitions_read: 0,
    };
    let add = |counts: &BTreeMap<DerivedStatus, u64>, g: &mut Grid| {
        for (s, n) in counts {
            *g.counts.entry(*s).or_default() += n;
        }
    };
    match (fields.len(), date) {
        (1, Some(_)) => {
            // A calendar: twelve months by their days.
            let end = q
                .end
                .map_or_else(|| default_end(engine, &pattern, 0, &[]), Ok)?;
            let months = periods(Zoom::Month, end);
            let refs: Vec<String> = months
                .iter()
                .flat_map(|(_, days)| days.iter().map(|d| pattern.render(&[&format_date(*d)])))
                .collect();
            let found = states(engine, &refs)?;
            g.partitions_read = found.len();
            g.shape = Shape::Calendar;
            g.columns = (1..=31).map(|d| d.to_string()).collect();
            for (label, days) in &months {
                g.rows.push(label.clone());
                let mut row = Vec::new();
                for d in days {
                    let r = pattern.render(&[&format_date(*d)]);
                    let state = found.get(&r).copied().unwrap_or(DerivedStatus::Missing);
                    let counts = BTreeMap::from([(state, 1)]);
                    add(&counts, &mut g);
                    row.push(cell(&counts, filter, r.clone(), partition_href(&r)));
                }
                g.cells.push(row);
            }
            g.end = Some(end);
            g.window_days = 365;
            g.column_field = Some(fields[0].0.clone());
        }
        (1, None) => {
            // Refs in order, a row of cells at a time, paged by keyset.
            let rows = engine.store.partitions(&PartitionQuery {
                pattern: Some(pattern.glob()),
                limit: ROWS * COLUMNS + 1,
                after: q.cols_after.clone(),
                ..Default::default()
            })?;
            let more = rows.len() > ROWS * COLUMNS;
            let rows: Vec<_> = rows.into_iter().take(ROWS * COLUMNS).collect();
            g.next_cols = more
                .then(|| rows.last().map(|r| r.partition_ref.clone()))
                .flatten();
            let refs: Vec<String> = rows.iter().map(|r| r.partition_ref.clone()).collect();
            let shown = engine.shown_states(rows)?;
            g.partitions_read = refs.len();
            g.shape = Shape::Strip;
            g.columns = (1..=COLUMNS).map(|c| c.to_string()).collect();
            for (chunk, states) in refs.chunks(COLUMNS).zip(shown.chunks(COLUMNS)) {
                let first = pattern.match_ref(&chunk[0]).map(|v| v[0].to_string());
                g.rows.push(first.unwrap_or_else(|| chunk[0].clone()));
                let mut row = Vec::new();
                for (r, state) in chunk.iter().zip(states) {
                    let counts = BTreeMap::from([(*state, 1)]);
                    add(&counts, &mut g);
                    row.push(cell(&counts, filter, r.clone(), partition_href(r)));
                }
                g.cells.push(row);
            }
            g.row_field = Some(fields[0].0.clone());
        }
        (2, _) => {
            let column = date.unwrap_or(1);
            let row_field = 1 - column;
            let Some((rows, more_rows)) =
                field_values(engine, &pattern, row_field, q.rows_after.as_deref(), ROWS)?
            else {
                return Ok(g);
            };
            g.row_field = Some(fields[row_field].0.clone());
            g.column_field = Some(fields[column].0.clone());
            g.next_rows = more_rows.then(|| rows.last().cloned()).flatten();
            let render = |row: &str, col: &str| {
                let mut values = [""; 2];
                values[row_field] = row;
                values[column] = col;
                pattern.render(&values)
            };
            if date.is_some() {
                let zoom = q.zoom.unwrap_or(Zoom::Day);
                let end = q
                    .end
                    .map_or_else(|| default_end(engine, &pattern, column, &rows), Ok)?;
                let periods = periods(zoom, end);
                let mut refs = Vec::new();
                for r in &rows {
                    for (_, days) in &periods {
                        refs.extend(days.iter().map(|d| render(r, &format_date(*d))));
                    }
                }
                let found = states(engine, &refs)?;
                g.partitions_read = found.len();
                g.shape = Shape::Matrix;
                g.columns = periods.iter().map(|(l, _)| l.clone()).collect();
                for r in &rows {
                    let mut row = Vec::new();
                    for (label, days) in &periods {
                        let mut counts = BTreeMap::new();
                        for d in days {
                            let state = found
                                .get(&render(r, &format_date(*d)))
                                .copied()
                                .unwrap_or(DerivedStatus::Missing);
                            *counts.entry(state).or_default() += 1;
                        }
                        add(&counts, &mut g);
                        let href = match zoom {
                            Zoom::Day => partition_href(&render(r, label)),
                            Zoom::Week => link(Zoom::Day, period_end(days)),
                            Zoom::Month => link(Zoom::Week, period_end(days)),
                        };
                        row.push(cell(&counts, filter, format!("{r} {label}"), href));
                    }
                    g.cells.push(row);
                }
                g.rows = rows;
                g.zoom = Some(zoom);
                g.end = Some(end);
                g.window_days = match zoom {
                    Zoom::Day => 42,
                    Zoom::Week => 26 * 7,
                    Zoom::Month => 365,
                };
            } else {
                // Columns: the column field's domain, or the values the first row has.
                let columns =
                    match field_values(engine, &pattern, column, q.cols_after.as_deref(), COLUMNS)?
                    {
                        Some(c) => c,
                        None => match rows.first() {
                            Some(first) => {
                                let after = q.cols_after.as_deref().map(|c| render(first, c));
                                let glob = glob_with(&pattern, row_field, first);
                                let found = engine.store.partitions(&PartitionQuery {
                                    pattern: Some(glob),
                                    limit: COLUMNS + 1,
                                    after,
                                    ..Default::default()
                                })?;
                                let values: Vec<String> = found
                                    .iter()
                                    .filter_map(|row| {
                                        pattern
                                            .match_ref(&row.partition_ref)
                                            .filter(|v| v[row_field] == first)
                                            .map(|v| v[column].to_string())
                                    })
                                    .collect();
                                let more = values.len() > COLUMNS;
                                (values.into_iter().take(COLUMNS).collect(), more)
                            }
                            None => (Vec::new(), false),
                        },
                    };
                let (columns, more_cols) = columns;
                g.next_cols = more_cols.then(|| columns.last().cloned()).flatten();
                let refs: Vec<String> = rows
                    .iter()
                    .flat_map(|r| columns.iter().map(|c| render(r, c)))
                    .collect();
                let found = states(engine, &refs)?;
                g.partitions_read = found.len();
                g.shape = Shape::Table;
                for r in &rows {
                    let mut row = Vec::new();
                    for c in &columns {
                        let rf = render(r, c);
                        let state = found.get(&rf).copied().unwrap_or(DerivedStatus::Missing);
                        let counts = BTreeMap::from([(state, 1)]);
                        add(&counts, &mut g);
                        row.push(cell(&counts, filter, rf.clone(), partition_href(&rf)));
                    }
                    g.cells.push(row);
                }
                g.rows = rows;
                g.columns = columns;
            }
        }
        _ => {}
    }
    Ok(g)
}

/// A date typed in a link or a form.
pub fn date(text: &str) -> Result<NaiveDate, GridError> {
    parse_date(text).ok_or_else(|| GridError::Date(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn periods_cover_their_window() {
        let end = NaiveDate::from_ymd_opt(2020, 3, 4).unwrap();
        let days = periods(Zoom::Day, end);
        assert_eq!(days.len(), 42);
        assert_eq!(days.last().unwrap().0, "2020-03-04");
        let weeks = periods(Zoom::Week, end);
        assert_eq!(weeks.len(), 26);
        assert!(weeks.last().unwrap().1.contains(&end));
        assert!(weeks.iter().all(|(_, d)| d.len() == 7));
        let months = periods(Zoom::Month, end);
        assert_eq!(months.len(), 12);
        assert_eq!(months[0].0, "2019-04");
        assert_eq!(months.last().unwrap().0, "2020-03");
        assert_eq!(months[10].1.len(), 29, "February 2020");
    }

    #[test]
    fn a_cell_is_its_worst_state_or_the_filters() {
        use DerivedStatus::{Failed, Live, Missing, Stale};
        let counts = BTreeMap::from([(Live, 5), (Stale, 1), (Missing, 1)]);
        let c = cell(&counts, None, "x".into(), String::new());
        assert_eq!(c.status, "stale");
        let partly = BTreeMap::from([(Live, 5), (Missing, 2)]);
        assert_eq!(
            cell(&partly, None, "x".into(), String::new()).status,
            "partial"
        );
        assert_eq!(c.title, "x: 5 live, 1 stale, 1 missing");
        assert_eq!(
            cell(&counts, Some(Missing), "x".into(), String::new()).status,
            "missing"
        );
        assert_eq!(
            cell(&counts, Some(Failed), "x".into(), String::new()).status,
            "other"
        );
    }

    #[test]
    fn a_fields_value_ends_at_the_next_literal() {
        let p = Pattern::parse("reviews/category={category}/date={date:date}").unwrap();
        assert_eq!(terminator(&p, 0), Some('/'));
        assert_eq!(terminator(&p, 1), None);
    }
}
