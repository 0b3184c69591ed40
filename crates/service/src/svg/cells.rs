//! Cells coloured by state: a matrix of rows by columns (a dataset's health grid) and a strip of
//! days (a calendar).

use std::fmt::Write;

use super::{colour, escape, text_width};

/// A cell of a matrix: its state, what its tooltip says, where it links.
pub struct Cell {
    pub status: String,
    pub title: String,
    pub href: String,
}

/// A matrix of cells coloured by state: one row per `rows` label, one column per `columns`
/// label (labels spaced so none overlaps another).
pub fn matrix(rows: &[String], columns: &[String], cells: &[Vec<Cell>]) -> String {
    if rows.is_empty() || columns.is_empty() {
        return String::new();
    }
    let (size, gap) = (14usize, 2usize);
    let pitch = size + gap;
    let left = rows
        .iter()
        .map(|r| text_width(r.chars().count(), 11))
        .max()
        .unwrap_or(0)
        + 8;
    let col_w = columns
        .iter()
        .map(|c| text_width(c.chars().count(), 10))
        .max()
        .unwrap_or(0);
    // Every `every`-th column is labelled, so labels never overlap.
    let every = (col_w + 6).div_ceil(pitch).max(1);
    let top = 18;
    let width = left + columns.len() * pitch + col_w + 4;
    let height = top + rows.len() * pitch + 4;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="matrix" width="{width}" height="{height}" viewBox="0 0 {width} {height}" role="img" aria-label="partitions by state">"#
    );
    for (c, label) in columns.iter().enumerate().step_by(every) {
        let _ = write!(
            svg,
            r##"<text x="{}" y="12" font-size="10" fill="#52606d">{}</text>"##,
            left + c * pitch,
            escape(label)
        );
    }
    for (r, label) in rows.iter().enumerate() {
        let y = top + r * pitch;
        let _ = write!(
            svg,
            r##"<text x="2" y="{}" font-size="11" fill="#1f2933">{}</text>"##,
            y + 11,
            escape(label)
        );
        for (c, cell) in cells.get(r).into_iter().flatten().enumerate() {
            let rect = format!(
                r#"<rect x="{}" y="{y}" width="{size}" height="{size}" rx="2" fill="{}" data-status="{}"><title>{}</title></rect>"#,
                left + c * pitch,
                colour(&cell.status),
                escape(&cell.status),
                escape(&cell.title)
            );
            if cell.href.is_empty() {
                svg.push_str(&rect);
            } else {
                let _ = write!(svg, r#"<a href="{}">{rect}</a>"#, escape(&cell.href));
            }
        }
    }
    svg.push_str("</svg>");
    svg
}

/// One cell per date, coloured by the worst state of that date's partitions.
pub fn calendar(days: &[(String, String)]) -> String {
    let size = 14;
    let width = days.len() * (size + 2) + 4;
    let mut svg = format!(
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="calendar" width="{width}" height="{}" role="img" aria-label="dates by state">"#,
        size + 4
    );
    for (i, (date, status)) in days.iter().enumerate() {
        let _ = write!(
            svg,
            r#"<rect x="{}" y="2" width="{size}" height="{size}" rx="2" fill="{}" data-date="{}" data-status="{}"><title>{}: {}</title></rect>"#,
            2 + i * (size + 2),
            colour(status),
            escape(date),
            escape(status),
            escape(date),
            escape(status)
        );
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cell(status: &str, href: &str) -> Cell {
        Cell {
            status: status.into(),
            title: format!("a {status} cell"),
            href: href.into(),
        }
    }

    #[test]
    fn a_calendar_is_one_cell_a_day_in_order() {
        let days = [("2026-01-01", "live"), ("2026-01-02", "missing")]
            .map(|(d, s)| (d.to_string(), s.to_string()));
        let svg = calendar(&days);
        assert!(svg.starts_with(
            r#"<svg xmlns="http://www.w3.org/2000/svg" class="calendar" width="36" height="18""#
        ));
        assert!(svg.contains(r##"<rect x="2" y="2" width="14" height="14" rx="2" fill="#2e9e5b" data-date="2026-01-01" data-status="live"><title>2026-01-01: live</title></rect>"##));
        assert!(svg.contains(r#"<rect x="18" y="2""#));
        assert!(svg.contains(r#"data-date="2026-01-02" data-status="missing""#));
        assert_eq!(calendar(&[]).matches("<rect").count(), 0);
    }

    #[test]
    fn a_matrix_links_the_cells_that_have_a_page() {
        let rows = ["comedy".to_string(), "news".to_string()];
        let columns = ["2026-01-01".to_string(), "2026-01-02".to_string()];
        let cells = vec![
            vec![cell("live", "/partitions/a"), cell("failed", "")],
            vec![cell("stale", "/partitions/c")],
        ];
        let svg = matrix(&rows, &columns, &cells);
        assert_eq!(svg.matches("<rect").count(), 3, "a row may be short");
        assert_eq!(
            svg.matches("<a href=").count(),
            2,
            "a cell without a page is no link"
        );
        assert!(svg.contains(r#"<a href="/partitions/a"><rect"#));
        assert!(svg.contains(r#"data-status="failed"><title>a failed cell</title></rect>"#));
        assert!(svg.contains(">comedy</text>") && svg.contains(">news</text>"));
        assert_eq!(matrix(&[], &columns, &[]), "");
        assert_eq!(matrix(&rows, &[], &[]), "");
    }

    #[test]
    fn column_labels_are_spaced_so_none_overlaps_the_next() {
        let rows = ["r".to_string()];
        let columns: Vec<String> = (1..=10).map(|d| format!("2026-01-{d:02}")).collect();
        let svg = matrix(&rows, &columns, &[]);
        // A date label is wider than a cell: only every few columns are labelled.
        let labelled = columns
            .iter()
            .filter(|c| svg.contains(&format!(">{c}</text>")))
            .count();
        assert!(labelled > 1 && labelled < columns.len(), "{labelled}");
        assert!(svg.contains(">2026-01-01</text>"));
    }
}
