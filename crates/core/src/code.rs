//! The `code = ["jobs/lib/*.py", ...]` globs of a job or a check: the files whose content is part
//! of what it runs, besides those its command names. Here they are only parsed and checked; the
//! files they match are found (and hashed) by the executor's side, which reads the project.
//!
//! A glob is relative to the graph file's folder, `/`-separated: `*` and `?` stay within one path
//! component, `**` crosses any number of them, `[ab]` and `{a,b}` as in shells.

use std::fmt;

use globset::{GlobBuilder, GlobMatcher};

/// One validated `code` glob.
#[derive(Debug, Clone)]
pub struct CodeGlob {
    text: String,
    matcher: GlobMatcher,
}

/// Why a `code` glob is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CodeGlobError {
    #[error("`code` has an empty glob; give a path relative to the graph file's folder, such as \"jobs/lib/*.py\"")]
    Empty,
    #[error("`code` glob `{0}` is not relative to the graph file's folder (it starts with `/`); code outside the project is not followed")]
    Absolute(String),
    #[error("`code` glob `{0}` leaves the graph file's folder (`..`); code outside the project is not followed")]
    Escapes(String),
    #[error("`code` glob `{glob}` is not a glob: {why}")]
    Syntax { glob: String, why: String },
}

impl CodeGlob {
    pub fn parse(text: &str) -> Result<Self, CodeGlobError> {
        if text.is_empty() {
            return Err(CodeGlobError::Empty);
        }
        if text.starts_with('/') {
            return Err(CodeGlobError::Absolute(text.to_string()));
        }
        if text.split('/').any(|c| c == "..") {
            return Err(CodeGlobError::Escapes(text.to_string()));
        }
        let glob = GlobBuilder::new(text)
            .literal_separator(true)
            .backslash_escape(true)
            .build()
            .map_err(|e| CodeGlobError::Syntax {
                glob: text.to_string(),
                why: e.kind().to_string(),
            })?;
        Ok(CodeGlob {
            text: text.to_string(),
            matcher: glob.compile_matcher(),
        })
    }

    /// The glob as written.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether `path` (relative to the graph's folder, `/`-separated) is matched.
    pub fn matches(&self, path: &str) -> bool {
        self.matcher.is_match(path)
    }

    /// The folder every match lies in: the glob's components before the first with a special
    /// character (`""` for the graph's folder), so finding the matches walks only that folder.
    pub fn base(&self) -> String {
        let special = |c: &str| c.contains(['*', '?', '[', ']', '{', '}', '\\']);
        let components: Vec<&str> = self.text.split('/').collect();
        // The last component names files, not the folder to walk, even when it is literal.
        let literal = components[..components.len() - 1]
            .iter()
            .take_while(|c| !special(c))
            .copied()
            .collect::<Vec<_>>();
        literal.join("/")
    }
}

impl PartialEq for CodeGlob {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for CodeGlob {}

impl fmt::Display for CodeGlob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_match_within_and_across_folders() {
        let g = CodeGlob::parse("jobs/lib/*.sh").unwrap();
        assert!(g.matches("jobs/lib/x.sh"));
        assert!(!g.matches("jobs/lib/deep/x.sh"), "`*` stays in its folder");
        assert!(!g.matches("jobs/x.sh"));
        assert_eq!(g.base(), "jobs/lib");
        let deep = CodeGlob::parse("jobs/**/*.py").unwrap();
        assert!(deep.matches("jobs/a/b/c.py") && deep.matches("jobs/c.py"));
        assert_eq!(deep.base(), "jobs");
        assert_eq!(CodeGlob::parse("*.py").unwrap().base(), "");
        assert_eq!(CodeGlob::parse("lib/util.py").unwrap().base(), "lib");
    }

    #[test]
    fn bad_globs_say_why() {
        assert_eq!(CodeGlob::parse(""), Err(CodeGlobError::Empty));
        assert!(matches!(
            CodeGlob::parse("/etc/*.py"),
            Err(CodeGlobError::Absolute(_))
        ));
        assert!(matches!(
            CodeGlob::parse("../lib/*.py"),
            Err(CodeGlobError::Escapes(_))
        ));
        let e = CodeGlob::parse("jobs/[a.py").unwrap_err();
        assert!(e.to_string().contains("`jobs/[a.py` is not a glob"), "{e}");
    }
}
