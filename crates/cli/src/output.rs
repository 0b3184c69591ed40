//! Printing: JSON on stdout for scripts, short readable text for people.

use std::io::{BufWriter, Write};

use serde::Serialize;

/// `println!` that returns the write's error instead of panicking: a reader that went away
/// (`databuild sql … | head -1`) ends the command quietly (see `main`), as other Unix tools do.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use outln;

/// `print!` that returns the write's error (see [`outln`]).
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}
pub(crate) use out;

/// `eprintln!` that never panics: a closed stderr (`build 2>&1 | head -1`) loses the line,
/// not the build. The line goes out in one write (stderr is unbuffered, and `writeln!` writes
/// each piece): no other process's output lands inside it, and a build printing a line per run
/// makes one system call per line, not two.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let line = format!("{}\n", format_args!($($arg)*));
        let _ = std::io::stderr().lock().write_all(line.as_bytes());
    }};
}
pub(crate) use errln;

/// What printing gave, with a reader gone away taken as done: for commands whose exit code
/// carries their answer (`build`, `analyze`, `check-log`), which it must not change.
pub fn unless_closed(printed: std::io::Result<()>) -> std::io::Result<()> {
    match printed {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other,
    }
}

/// Whether the error is stdout's reader having gone away (a closed pipe).
pub fn is_closed_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

/// Writes pretty JSON to stdout through one buffer (a plan's JSON can be hundreds of megabytes).
pub fn print_json<T: Serialize>(value: &T) -> std::io::Result<()> {
    let mut out = stdout();
    serde_json::to_writer_pretty(&mut out, value)?;
    writeln!(out)?;
    out.flush()
}

/// Buffered stdout: `println!` flushes every line, one system call each.
pub fn stdout() -> BufWriter<std::io::StdoutLock<'static>> {
    BufWriter::with_capacity(64 * 1024, std::io::stdout().lock())
}

/// `1 run`, `2 runs`.
pub fn count(n: usize, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// A list shortened for a terminal: `a, b, c (+4 more)`.
pub fn short_list<T: AsRef<str>>(items: &[T], keep: usize) -> String {
    head_of(items, items.len(), keep)
}

/// The first `keep` of `total` items, and how many more there are: `a, b (+3 more)`.
pub fn head_of<T: AsRef<str>>(items: &[T], total: usize, keep: usize) -> String {
    let shown: Vec<&str> = items.iter().take(keep).map(|i| i.as_ref()).collect();
    let mut s = shown.join(", ");
    if total > shown.len() {
        s.push_str(&format!(" (+{} more)", total - shown.len()));
    }
    s
}

/// Left-aligned columns, two spaces apart; the last column is never padded.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = String::new();
    let mut line = |cells: Vec<&str>| {
        let last = cells.len().saturating_sub(1);
        for (i, cell) in cells.iter().enumerate() {
            if i == last {
                out.push_str(cell);
            } else {
                out.push_str(&format!("{cell:width$}  ", width = widths[i]));
            }
        }
        out.push('\n');
    };
    line(headers.to_vec());
    for row in rows {
        line(row.iter().map(String::as_str).collect());
    }
    out
}

/// `1.2 s`, `340 ms`, or `-` when unknown.
pub fn millis(ms: Option<f64>) -> String {
    match ms {
        None => "-".to_string(),
        Some(ms) if ms >= 1000.0 => format!("{:.1} s", ms / 1000.0),
        Some(ms) => format!("{ms:.0} ms"),
    }
}

pub use databuild_exec::answers::span;

pub fn time(ns: Option<i64>) -> String {
    ns.map(databuild_exec::answers::rfc3339)
        .unwrap_or_else(|| "-".to_string())
}

/// A JSON value as plain text: strings without quotes, null as empty.
pub fn text(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::String(s) => s.clone(),
        serde_json::Value::Null => String::new(),
        other => other.to_string(),
    }
}
