//! ARCHITECTURE.md's code map against the tree: every path it names exists, and every module of
//! every crate is on it.
//!
//! The map's convention is described on the test that checks it,
//! `the_code_map_names_what_exists_and_every_module` in `main.rs`; its rules are implemented here:
//! what a path is ([`is_path`]), how it resolves ([`map_paths`]), and what counts as on the map
//! ([`unmapped`]).

use std::collections::BTreeSet;

use crate::model::Crate;

/// A path the map names.
#[derive(Debug, PartialEq, Eq)]
pub struct MapPath {
    /// Its line in the map (1-based).
    pub line: usize,
    /// As written.
    pub written: String,
    /// Relative to the repository's root, without a trailing `/`.
    pub resolved: String,
}

/// Every path named in `markdown`, resolved by the map's convention.
pub fn map_paths(markdown: &str) -> Vec<MapPath> {
    let mut found = Vec::new();
    let mut section: Option<String> = None;
    for (span, line) in code_spans_and_headings(markdown) {
        match span {
            Span::Heading { level, first_code } => {
                if level <= 3 {
                    section = None;
                }
                if level == 3 {
                    section = first_code
                        .map(|code| code.trim_end_matches('/').to_string())
                        .filter(|code| is_crate_folder(code));
                }
            }
            Span::Code(code) if is_path(&code) => {
                let relative = code.trim_end_matches('/');
                let resolved = match &section {
                    Some(folder) if !code.starts_with("crates/") => {
                        format!("{folder}/src/{relative}")
                    }
                    _ => relative.to_string(),
                };
                found.push(MapPath {
                    line,
                    written: code,
                    resolved,
                });
            }
            Span::Code(_) => {}
        }
    }
    found
}

/// The map's paths that do not exist (by `exists`, given a path from the repository's root),
/// each as a line of the report, with its line in the map.
pub fn missing(paths: &[MapPath], exists: impl Fn(&str) -> bool) -> Vec<String> {
    paths
        .iter()
        .filter(|p| !exists(&p.resolved))
        .map(|p| {
            format!(
                "line {}: `{}` ({}) does not exist",
                p.line, p.written, p.resolved
            )
        })
        .collect()
}

/// The modules of `krate`, whose folder is `crate_folder` (`crates/exec`), that the map does not
/// name, as their file from the repository's root.
pub fn unmapped(paths: &[MapPath], crate_folder: &str, krate: &Crate) -> Vec<String> {
    let named: BTreeSet<&str> = paths.iter().map(|p| p.resolved.as_str()).collect();
    krate
        .modules
        .values()
        .filter(|m| !m.inline && !m.test_only && !m.path.is_empty())
        .map(|m| {
            let file = format!("{crate_folder}/src/{}", m.file);
            let folder = file
                .strip_suffix("/mod.rs")
                .or_else(|| file.strip_suffix(".rs"))
                .unwrap_or(&file)
                .to_string();
            (file, folder)
        })
        .filter(|(file, folder)| !named.contains(file.as_str()) && !named.contains(folder.as_str()))
        .map(|(file, _)| file)
        .collect()
}

/// `crates/<name>`, nothing deeper.
fn is_crate_folder(code: &str) -> bool {
    code.strip_prefix("crates/")
        .is_some_and(|name| !name.is_empty() && !name.contains('/'))
}

/// Whether a code span is a path: no whitespace or placeholders, and `crates/..`, `...rs` or
/// `.../`.
fn is_path(code: &str) -> bool {
    !code.is_empty()
        && !code.contains(|c: char| c.is_whitespace() || "*<>{}".contains(c))
        && (code.starts_with("crates/") || code.ends_with(".rs") || code.ends_with('/'))
}

enum Span {
    /// A heading, with its level and its first code span.
    Heading {
        level: usize,
        first_code: Option<String>,
    },
    Code(String),
}

/// The headings and code spans of `markdown`, in order, each with its line (1-based), leaving
/// out fenced code blocks. A code span may cross a line break (it then holds whitespace, so it
/// is no path).
fn code_spans_and_headings(markdown: &str) -> Vec<(Span, usize)> {
    let mut spans = Vec::new();
    let mut open: Option<(String, usize)> = None;
    let mut fenced = false;
    for (index, line) in markdown.lines().enumerate() {
        let number = index + 1;
        if open.is_none() && line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        if open.is_none() && line.starts_with('#') {
            let level = line.chars().take_while(|c| *c == '#').count();
            let first_code = line.split('`').nth(1).map(str::to_string);
            spans.push((Span::Heading { level, first_code }, number));
        }
        if let Some((text, _)) = &mut open {
            text.push('\n');
        }
        for (i, part) in line.split('`').enumerate() {
            if i > 0 {
                // A backtick: it opens or closes a span.
                match open.take() {
                    Some((text, start)) => spans.push((Span::Code(text), start)),
                    None => open = Some((String::new(), number)),
                }
            }
            if let Some((text, _)) = &mut open {
                text.push_str(part);
            }
        }
    }
    spans
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixture;

    const MAP: &str = "# Architecture

Prose naming `Engine` and `<data_dir>/.staging` and `src/v*.sql`.

### `crates/demo` (`demo`): a crate

`engine.rs` (the engine), `build/` (`build/machine.rs`, `build/driver.rs`),
`gone.rs`, and `crates/other/src/lib.rs`.

## Cross-cutting

`crates/demo/tests/tidy.rs` checks it; `stray.rs`, relative to the root, is not there.

```sh
# Not a heading, and `fenced.rs` is no path.
```
";

    fn demo() -> Crate {
        fixture(&[
            (
                "lib.rs",
                "mod engine; mod build; mod views; #[cfg(test)] mod testing;",
            ),
            ("engine.rs", ""),
            ("build/mod.rs", "mod machine; mod driver;"),
            ("build/machine.rs", ""),
            ("build/driver.rs", ""),
            ("views.rs", "mod inline_is_fine {}"),
            ("testing.rs", ""),
        ])
    }

    #[test]
    fn paths_are_read_by_the_convention() {
        let paths = map_paths(MAP);
        let resolved: Vec<(usize, &str, &str)> = paths
            .iter()
            .map(|p| (p.line, p.written.as_str(), p.resolved.as_str()))
            .collect();
        assert_eq!(
            resolved,
            [
                (5, "crates/demo", "crates/demo"),
                (7, "engine.rs", "crates/demo/src/engine.rs"),
                (7, "build/", "crates/demo/src/build"),
                (7, "build/machine.rs", "crates/demo/src/build/machine.rs"),
                (7, "build/driver.rs", "crates/demo/src/build/driver.rs"),
                (8, "gone.rs", "crates/demo/src/gone.rs"),
                (8, "crates/other/src/lib.rs", "crates/other/src/lib.rs"),
                (12, "crates/demo/tests/tidy.rs", "crates/demo/tests/tidy.rs"),
                (12, "stray.rs", "stray.rs"),
            ]
        );
    }

    #[test]
    fn a_path_that_does_not_exist_is_found() {
        let exists = |path: &str| !["crates/demo/src/gone.rs", "stray.rs"].contains(&path);
        assert_eq!(
            missing(&map_paths(MAP), exists),
            [
                "line 8: `gone.rs` (crates/demo/src/gone.rs) does not exist",
                "line 12: `stray.rs` (stray.rs) does not exist",
            ]
        );
    }

    #[test]
    fn a_module_missing_from_the_map_is_found() {
        assert_eq!(
            unmapped(&map_paths(MAP), "crates/demo", &demo()),
            ["crates/demo/src/views.rs"]
        );
    }

    #[test]
    fn a_complete_map_passes() {
        let map = "### `crates/demo`\n\n`engine.rs`, `build/` (`build/machine.rs`,\n\
                   `build/driver.rs`), `views.rs`.\n";
        let paths = map_paths(map);
        assert_eq!(missing(&paths, |_| true), Vec::<String>::new());
        assert_eq!(
            unmapped(&paths, "crates/demo", &demo()),
            Vec::<String>::new()
        );
    }
}
