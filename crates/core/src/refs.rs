//! Partition refs: the names of atomic units of data.
//!
//! A ref doubles as a path under the data dir, so validation is about safety first: a ref must never
//! be able to name a file outside the data dir.

use std::fmt;
use std::sync::Arc;

/// The longest a ref may be, in bytes: the path it names must fit in one (`PATH_MAX` is 4096,
/// and the data dir comes before it).
pub const MAX_REF_LEN: usize = 1024;

/// Why a string is not a valid partition ref.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RefError {
    #[error("a partition ref cannot be empty")]
    Empty,
    #[error("partition ref `{0}` is absolute; refs are relative to the data dir")]
    Absolute(String),
    #[error("partition ref `{0}` has a `.` or `..` path segment, which could escape the data dir")]
    DotSegment(String),
    #[error("partition ref `{}` contains a NUL or control character", .0.escape_debug())]
    ControlChar(String),
    #[error(
        "partition ref `{0}` contains `{1}`, which is reserved for patterns and brace expansion"
    )]
    Reserved(String, char),
    #[error("partition ref `{0}` starts or ends with whitespace")]
    Whitespace(String),
    #[error("partition ref `{0}` contains a backslash; use `/` to separate path segments")]
    Backslash(String),
    #[error("partition ref `{0}…` is {1} bytes long; refs may have at most {MAX_REF_LEN}")]
    TooLong(String, usize),
}

/// A validated partition ref such as `reviews/date=2020-01-01`.
///
/// Holding one proves the string is safe to join onto a data dir. Plans hold the same ref in many
/// places (a run's outputs, another run's inputs, the planner's memo), so the text is shared, and
/// cloning a ref costs a reference count, not an allocation.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PartitionRef(Arc<str>);

impl serde::Serialize for PartitionRef {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl PartitionRef {
    pub fn new(s: impl AsRef<str>) -> Result<Self, RefError> {
        let s = s.as_ref();
        validate_ref(s)?;
        Ok(PartitionRef(Arc::from(s)))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for PartitionRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl AsRef<str> for PartitionRef {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl std::borrow::Borrow<str> for PartitionRef {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl<'de> serde::Deserialize<'de> for PartitionRef {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = String::deserialize(d)?;
        PartitionRef::new(s).map_err(serde::de::Error::custom)
    }
}

impl std::str::FromStr for PartitionRef {
    type Err = RefError;
    fn from_str(s: &str) -> Result<Self, RefError> {
        PartitionRef::new(s)
    }
}

/// Checks the rules every ref obeys. Pattern literals obey the same rules (minus braces), so this is shared.
pub(crate) fn validate_ref(s: &str) -> Result<(), RefError> {
    // Planning validates every ref it derives, so the common case is one pass over the bytes;
    // the precise error comes from the slower checks below only when something looks wrong.
    let suspicious = s.is_empty()
        || s.len() > MAX_REF_LEN
        || s.starts_with('/')
        || s.starts_with(' ')
        || s.ends_with(' ')
        || s.as_bytes().iter().any(|&b| {
            b < 0x20 || b == 0x7f || b >= 0x80 || matches!(b, b'{' | b'}' | b'\\' | b'.')
        });
    if !suspicious {
        return Ok(());
    }
    validate_path_text(s)?;
    if let Some(c) = s.chars().find(|c| matches!(c, '{' | '}')) {
        return Err(RefError::Reserved(s.to_string(), c));
    }
    Ok(())
}

/// The path-safety rules, without the brace rule (patterns and templates contain braces).
pub(crate) fn validate_path_text(s: &str) -> Result<(), RefError> {
    if s.is_empty() {
        return Err(RefError::Empty);
    }
    if s.len() > MAX_REF_LEN {
        let shown: String = s.chars().take(60).collect();
        return Err(RefError::TooLong(shown, s.len()));
    }
    if s.chars().any(char::is_control) {
        return Err(RefError::ControlChar(s.to_string()));
    }
    if s.starts_with('/') {
        return Err(RefError::Absolute(s.to_string()));
    }
    if s.contains('\\') {
        return Err(RefError::Backslash(s.to_string()));
    }
    if s.trim() != s {
        return Err(RefError::Whitespace(s.to_string()));
    }
    if s.split('/').any(|seg| seg == "." || seg == "..") {
        return Err(RefError::DotSegment(s.to_string()));
    }
    Ok(())
}

/// A ref or query value as one URL path segment (`/` as `%2F`), as the service's API expects it.
pub fn encode_segment(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'=') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn accepts_usual_refs() {
        for ok in [
            "reviews/date=2020-01-01",
            "s3://bkt/clicks/region=eu/date=2020-01-01",
            "sum/pippin_salem_sadie",
            "a",
            "a..b/c", // dots inside a segment are harmless
        ] {
            assert!(PartitionRef::new(ok).is_ok(), "{ok}");
        }
    }

    #[test]
    fn rejects_escapes() {
        type Check = fn(&RefError) -> bool;
        let cases: &[(&str, Check)] = &[
            ("", |e| matches!(e, RefError::Empty)),
            ("/etc/passwd", |e| matches!(e, RefError::Absolute(_))),
            ("../x", |e| matches!(e, RefError::DotSegment(_))),
            ("a/../../x", |e| matches!(e, RefError::DotSegment(_))),
            ("a/./x", |e| matches!(e, RefError::DotSegment(_))),
            ("a/..", |e| matches!(e, RefError::DotSegment(_))),
            ("a\0b", |e| matches!(e, RefError::ControlChar(_))),
            ("a\nb", |e| matches!(e, RefError::ControlChar(_))),
            ("a/{x}", |e| matches!(e, RefError::Reserved(_, '{'))),
            (" a", |e| matches!(e, RefError::Whitespace(_))),
            ("a\\..\\b", |e| matches!(e, RefError::Backslash(_))),
        ];
        for (input, check) in cases {
            let err = PartitionRef::new(*input).unwrap_err();
            assert!(check(&err), "{input:?} gave {err:?}");
        }
    }

    proptest! {
        /// Whatever is accepted, joined under a data dir, stays under it.
        #[test]
        fn accepted_refs_never_escape(s in "[a-z./\\\\\\x00{}=-]{0,12}") {
            if let Ok(r) = PartitionRef::new(s) {
                let mut depth = 0i32;
                for seg in r.as_str().split('/') {
                    prop_assert!(seg != "..");
                    if !seg.is_empty() { depth += 1; }
                }
                prop_assert!(!r.as_str().starts_with('/'));
                prop_assert!(!r.as_str().contains('\0'));
                prop_assert!(depth >= 1);
            }
        }
    }
}
