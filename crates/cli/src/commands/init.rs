//! `init` (a project to start from) and `completions` (shell completion scripts).

use std::io::Write;
use std::path::Path;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::CommandFactory;

use crate::cli::{Cli, CompletionsArgs};
use crate::output::{outln, print_json};
use crate::UserError;

const GRAPH: &str = r#"# Made by `databuild init`. Build a day:   databuild build 'word_counts/date=2024-01-01'
# A week (braces expand):                  databuild build 'word_counts/date={2024-01-01..2024-01-07}'
# What it would run, without running it:   databuild analyze 'word_counts/date=2024-01-02'
[graph]
name = "NAME"

# Text you put under data/raw_text/date=YYYY-MM-DD: DataBuild reads it and never builds it.
[[dataset]]
name = "raw_text"
pattern = "raw_text/date={date:date}"

# A day's word count, from that day's text. Change `version` when you change the script: the
# partitions it built become stale, and the next build rebuilds them.
[[job]]
name = "word_counts"
outputs = ["word_counts/date={date:date}"]
inputs = ["raw_text/date={date}"]
command = ["sh", "jobs/word_counts.sh"]
version = "1"
"#;

const JOB: &str = r#"#!/bin/sh
# One run builds one day: DataBuild passes the day in DATABUILD_FIELD_DATE, and the run writes
# its output under DATABUILD_OUTPUT_DIR (moved into place once the log records its success).
set -eu
day="date=$DATABUILD_FIELD_DATE"
out="$DATABUILD_OUTPUT_DIR/word_counts/$day"
mkdir -p "$(dirname "$out")"
wc -w < "$DATABUILD_DATA_DIR/raw_text/$day" > "$out"
echo "counted the words of $day" >&2
"#;

const SAMPLE: &str = "the quick brown fox jumps over the lazy dog\n";

/// Writes the graph file at `graph` (refusing to replace one), its job's script and a day of
/// sample data beside it.
pub fn run(graph: &Path, json: bool) -> anyhow::Result<ExitCode> {
    if graph.exists() {
        return Err(UserError(format!(
            "{} already exists; `init` starts a new project (pass --graph FILE to make it elsewhere)",
            graph.display()
        ))
        .into());
    }
    let dir = match graph.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    let name = std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .filter(|n| {
            n.chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
        })
        .unwrap_or_else(|| "my_graph".to_string());
    let files = [
        (graph.to_path_buf(), GRAPH.replace("NAME", &name)),
        (dir.join("jobs/word_counts.sh"), JOB.to_string()),
        (
            dir.join("data/raw_text/date=2024-01-01"),
            SAMPLE.to_string(),
        ),
    ];
    let mut written = Vec::new();
    for (path, text) in &files {
        if path.exists() {
            continue; // Data or a script of the user's own: kept as it is.
        }
        std::fs::create_dir_all(path.parent().unwrap_or(Path::new(".")))
            .and_then(|()| std::fs::write(path, text))
            .with_context(|| format!("cannot write {}", path.display()))?;
        written.push(path.display().to_string());
    }
    if json {
        print_json(&serde_json::json!({ "written": written }))?;
    } else {
        for path in &written {
            outln!("wrote {path}")?;
        }
        outln!("next: databuild build 'word_counts/date=2024-01-01'")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Prints the completion script for `shell`.
pub fn completions(&CompletionsArgs { shell }: &CompletionsArgs) -> anyhow::Result<ExitCode> {
    // Into memory first: `generate` panics when a write fails (a closed pipe).
    let mut script = Vec::new();
    clap_complete::generate(shell, &mut Cli::command(), "databuild", &mut script);
    std::io::stdout().lock().write_all(&script)?;
    Ok(ExitCode::SUCCESS)
}
