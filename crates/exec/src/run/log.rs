//! A run's log read back: its tail (a log can be large) and the last line that says something,
//! which a failed run's summary quotes.

/// The last `max` bytes of a file, as text (a run's log can be large).
pub fn read_tail(path: &std::path::Path, max: u64) -> std::io::Result<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path)?;
    let len = file.metadata()?.len();
    if len > max {
        file.seek(SeekFrom::Start(len - max))?;
    }
    let mut bytes = Vec::new();
    file.read_to_end(&mut bytes)?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// The last line of a log that says something, trimmed, at most 300 characters: what a failed
/// run's line quotes.
pub fn last_line(log: &str) -> Option<String> {
    let line = log.lines().rev().map(str::trim).find(|l| !l.is_empty())?;
    Some(line.chars().take(300).collect())
}

/// The last line that says something of the log at `path` (read from its last 4 KiB): what a
/// failed run's summary and status quote. None if the log cannot be read.
pub fn last_log_line(path: &str) -> Option<String> {
    last_line(&read_tail(std::path::Path::new(path), 4096).ok()?)
}
