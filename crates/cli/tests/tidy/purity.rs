//! Pure modules stay pure: they name no I/O of the standard library (a path that lands under
//! `std::fs`, `std::process` and the like, however imported), and a pure module names only
//! modules of its crate that are pure too.

use crate::model::{display, Crate, ModPath, Target};

/// Every path in the production code of `modules` (and their descendants) that lands under one
/// of `forbidden` (`std::fs`, `std::io::stdout`), as `file: module names path`.
pub fn forbidden_std(krate: &Crate, modules: &[ModPath], forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for module in production_modules_under(krate, modules) {
        for written in &module.paths {
            let Some(Target::External(outside)) = krate.resolve(&module.path, written) else {
                continue;
            };
            let outside = outside.join("::");
            let is_forbidden = forbidden
                .iter()
                .any(|f| outside == *f || outside.starts_with(&format!("{f}::")));
            if is_forbidden {
                found.push(format!(
                    "{}: {} names {outside} (written {})",
                    module.file,
                    module.name(),
                    written.join("::")
                ));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Every path in the production code of `modules` (and their descendants) that lands in a module
/// of the crate that is neither on `pure` (nor under a module on it) nor one of `tolerated`
/// (`module::Item`, an item of an impure module let through by name).
pub fn impure_imports(
    krate: &Crate,
    modules: &[ModPath],
    pure: &[ModPath],
    tolerated: &[&str],
) -> Vec<String> {
    let is_pure = |path: &[String]| pure.iter().any(|p| path.starts_with(p));
    let mut found = Vec::new();
    for module in production_modules_under(krate, modules) {
        for written in &module.paths {
            let Some(Target::Local { module: to, item }) = krate.resolve(&module.path, written)
            else {
                continue;
            };
            let named = match &item {
                Some(item) if to.is_empty() => item.clone(),
                Some(item) => format!("{}::{item}", display(&to)),
                None => display(&to),
            };
            if !is_pure(&to) && !tolerated.contains(&named.as_str()) {
                found.push(format!(
                    "{}: {} names {named}, of an impure module (written {})",
                    module.file,
                    module.name(),
                    written.join("::")
                ));
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

fn production_modules_under<'a>(
    krate: &'a Crate,
    modules: &'a [ModPath],
) -> impl Iterator<Item = &'a crate::model::Module> {
    krate
        .modules
        .values()
        .filter(|m| !m.test_only)
        .filter(move |m| modules.iter().any(|top| m.path.starts_with(top)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixture;
    use crate::IO_PATHS;

    fn path(name: &str) -> ModPath {
        name.split("::").map(str::to_string).collect()
    }

    #[test]
    fn io_in_a_pure_module_is_found_however_it_is_named() {
        let krate = fixture(&[
            ("lib.rs", "mod plan;"),
            (
                "plan.rs",
                "use std::{fs, io::{self, Write}};
                 use std::process::Command as Cmd;
                 fn f() { let _ = std::net::TcpStream::connect(\"x\"); io::stdout(); }
                 fn g() { writeln!(::std::io::stderr(), \"x\"); let _ = Cmd::new(\"x\"); }
                 fn h(w: &mut dyn Write) { let _ = std::env::var(\"X\"); }",
            ),
        ]);
        let found = forbidden_std(&krate, &[path("plan")], IO_PATHS);
        let names: Vec<&str> = found
            .iter()
            .map(|f| {
                f.split(" names ")
                    .nth(1)
                    .unwrap()
                    .split(' ')
                    .next()
                    .unwrap()
            })
            .collect();
        assert_eq!(
            names,
            [
                "std::env::var",
                "std::fs",
                "std::io::stderr",
                "std::io::stdout",
                "std::net::TcpStream::connect",
                "std::process::Command",
                "std::process::Command::new",
            ]
        );
    }

    #[test]
    fn test_code_and_pure_std_pass() {
        let krate = fixture(&[
            ("lib.rs", "mod plan;"),
            (
                "plan.rs",
                "use std::io::Write; use std::collections::BTreeMap;
                 fn f(w: &mut dyn Write, m: BTreeMap<u8, u8>) { let _ = std::mem::take(&mut 1); }
                 #[cfg(test)] mod tests { fn t() { std::fs::read(\"x\"); } }
                 #[cfg(test)] fn t() { std::process::exit(1) }",
            ),
        ]);
        assert_eq!(
            forbidden_std(&krate, &[path("plan")], IO_PATHS),
            Vec::<String>::new()
        );
    }

    #[test]
    fn a_pure_module_naming_an_impure_one_is_found() {
        let krate = fixture(&[
            (
                "lib.rs",
                "mod local; mod outcome; mod scheduler; pub type Result = ();",
            ),
            ("local.rs", "pub struct Spec; pub fn run() {}"),
            ("outcome.rs", "pub enum RunOutcome { Done }"),
            ("scheduler/mod.rs", "mod machine; pub struct Progress;"),
            (
                "scheduler/machine.rs",
                "use crate::outcome::RunOutcome; use crate::local::Spec;
                 fn f(_: super::Progress) { crate::local::run() }
                 #[cfg(test)] mod tests { use crate::local::run; }",
            ),
        ]);
        let machine = [path("scheduler::machine")];
        let pure = [path("scheduler::machine"), path("outcome")];
        assert_eq!(
            impure_imports(&krate, &machine, &pure, &["local::Spec"]),
            [
                "scheduler/machine.rs: scheduler::machine names local::run, of an impure \
                 module (written crate::local::run)",
                "scheduler/machine.rs: scheduler::machine names scheduler::Progress, of an \
                 impure module (written super::Progress)",
            ]
        );
        let pure = [path("scheduler"), path("outcome"), path("local")];
        assert_eq!(
            impure_imports(&krate, &machine, &pure, &[]),
            Vec::<String>::new()
        );
    }
}
