//! Every module says what it holds: a file module opens with a `//!` doc, an inline module has a
//! `///` or `//!` doc of its own. An inline `mod tests` is exempt (its name says it); a test
//! module in a file of its own is not, since a reader meets the file alone.

use crate::model::Crate;

/// The modules of `krate` without a doc, as `file (module)`.
pub fn undocumented(krate: &Crate) -> Vec<String> {
    krate
        .modules
        .values()
        .filter(|m| !m.documented)
        .filter(|m| !(m.inline && m.path.last().is_some_and(|name| name == "tests")))
        .map(|m| {
            let how = if m.inline {
                "inline module"
            } else {
                "no `//!`"
            };
            format!("{} ({}: {how})", m.file, m.name())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixture;

    #[test]
    fn a_file_or_inline_module_without_a_doc_is_found() {
        let krate = fixture(&[
            (
                "lib.rs",
                "//! The root.\nmod a; mod b; mod c { pub fn f() {} }",
            ),
            ("a.rs", "// A comment is not a doc.\npub fn f() {}"),
            ("b.rs", "//! Documented.\n#[cfg(test)]\nmod tests {}"),
        ]);
        assert_eq!(
            undocumented(&krate),
            [
                "a.rs (a: no `//!`)".to_string(),
                "lib.rs (c: inline module)".to_string()
            ]
        );
    }

    #[test]
    fn documented_modules_pass() {
        let krate = fixture(&[
            (
                "lib.rs",
                "//! The root.\nmod a;\n/// Inline, documented.\nmod c {}\nmod d { //! Inside.\n}",
            ),
            (
                "a.rs",
                "#![doc = \"As an attribute.\"]\n#[cfg(test)]\nmod tests;",
            ),
            ("a/tests.rs", "//! A test module in a file of its own."),
        ]);
        assert_eq!(undocumented(&krate), Vec::<String>::new());
    }
}
