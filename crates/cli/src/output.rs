//! Printing: JSON on stdout for scripts, short readable text for people.

use serde::Serialize;

pub fn print_json<T: Serialize>(value: &T) {
    println!(
        "{}",
        serde_json::to_string_pretty(value).expect("output serializes")
    );
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
