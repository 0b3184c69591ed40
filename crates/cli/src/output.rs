//! Printing: JSON on stdout for scripts, short readable text for people.

use serde::Serialize;

use std::io::{BufWriter, Write};

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
    let shown: Vec<&str> = items.iter().take(keep).map(|i| i.as_ref()).collect();
    let mut s = shown.join(", ");
    if items.len() > keep {
        s.push_str(&format!(" (+{} more)", items.len() - keep));
    }
    s
}
