//! Module cycles. A module depends on another when its production code names a path that lands
//! there (a `use` leaf, an expression, a type, a macro's `a::b`); each such dependency counts
//! between the two modules' ancestors that are siblings — the children of their nearest common
//! ancestor — so a crate's top-level modules and the modules of each folder are checked alike
//! (`scheduler::machine` naming `scheduler::driver::X` is an edge `machine → driver` inside
//! `scheduler`; `engine::lease` naming `build::Y` is an edge `engine → build` at the top).
//! A module naming its own ancestor or descendant makes no edge: a parent declares its children.

use std::collections::{BTreeMap, BTreeSet};

use crate::model::{display, Crate, ModPath, Target};

/// For each module with children: which child depends on which of its siblings, with the first
/// path found that makes it so (for the report).
type SiblingDeps = BTreeMap<ModPath, BTreeMap<String, BTreeMap<String, String>>>;

/// Every cycle among sibling modules of `krate`, one per folder that has one, as
/// `scheduler: machine → driver → machine` followed by the paths that make each step.
pub fn module_cycles(krate: &Crate) -> Vec<String> {
    let mut found = Vec::new();
    for (parent, deps) in sibling_deps(krate) {
        let graph: BTreeMap<String, BTreeSet<String>> = deps
            .iter()
            .map(|(from, to)| (from.clone(), to.keys().cloned().collect()))
            .collect();
        if let Some(path) = cycle(&graph) {
            let steps: Vec<String> = path
                .windows(2)
                .map(|pair| format!("    {}", deps[&pair[0]][&pair[1]]))
                .collect();
            found.push(format!(
                "{}: {}\n{}",
                display(&parent),
                path.join(" → "),
                steps.join("\n")
            ));
        }
    }
    found
}

/// The dependencies of production modules on one another, as edges between siblings.
fn sibling_deps(krate: &Crate) -> SiblingDeps {
    let mut deps = SiblingDeps::new();
    for module in krate.modules.values().filter(|m| !m.test_only) {
        for written in &module.paths {
            let Some(Target::Local { module: to, .. }) = krate.resolve(&module.path, written)
            else {
                continue;
            };
            if krate.module(&to).is_none_or(|m| m.test_only) {
                continue;
            }
            let shared = module
                .path
                .iter()
                .zip(&to)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from_child), Some(to_child)) = (module.path.get(shared), to.get(shared))
            else {
                continue; // one is the other's ancestor
            };
            deps.entry(module.path[..shared].to_vec())
                .or_default()
                .entry(from_child.clone())
                .or_default()
                .entry(to_child.clone())
                .or_insert_with(|| {
                    format!(
                        "{} names {} ({})",
                        module.name(),
                        written.join("::"),
                        module.file
                    )
                });
        }
    }
    deps
}

/// A node that reaches itself through others, with the path it takes.
fn cycle(deps: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    for start in deps.keys() {
        let mut stack = vec![vec![start.clone()]];
        let mut seen = BTreeSet::new();
        while let Some(path) = stack.pop() {
            let last = path.last().expect("a path starts with one node");
            for next in deps.get(last).into_iter().flatten() {
                if next == start {
                    let mut found = path.clone();
                    found.push(next.clone());
                    return Some(found);
                }
                if deps.contains_key(next) && seen.insert(next.clone()) {
                    let mut longer = path.clone();
                    longer.push(next.clone());
                    stack.push(longer);
                }
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::fixture;

    /// The cycles `files` have, as their first lines (`folder: a → b → a`).
    fn cycles_of(files: &[(&str, &str)]) -> Vec<String> {
        module_cycles(&fixture(files))
            .iter()
            .map(|c| c.lines().next().unwrap().to_string())
            .collect()
    }

    #[test]
    fn a_cycle_is_found() {
        let deps: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
            .into_iter()
            .map(|(m, d)| (m.to_string(), BTreeSet::from([d.to_string()])))
            .collect();
        assert_eq!(cycle(&deps).unwrap(), ["a", "b", "c", "a"]);
    }

    #[test]
    fn a_cycle_through_grouped_imports_is_found() {
        let cycles = cycles_of(&[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "use crate::{b::{Bee, other}, c};"),
            ("b.rs", "pub struct Bee; pub fn other() {}"),
            ("c.rs", "use crate::{a as alpha}; fn f() { alpha::g() }"),
        ]);
        assert_eq!(cycles, ["crate: a → c → a"]);
    }

    #[test]
    fn a_cycle_through_super_paths_between_siblings_is_found() {
        let cycles = cycles_of(&[
            ("lib.rs", "mod scheduler;"),
            ("scheduler/mod.rs", "mod driver; mod machine;"),
            (
                "scheduler/machine.rs",
                "pub struct Machine; fn f(_: super::driver::Handle) {}",
            ),
            (
                "scheduler/driver.rs",
                "use super::machine; pub struct Handle(machine::Machine);",
            ),
        ]);
        assert_eq!(cycles, ["scheduler: driver → machine → driver"]);
    }

    #[test]
    fn a_cycle_through_code_after_a_test_module_is_found() {
        let cycles = cycles_of(&[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "pub fn f() { crate::b::g() }"),
            (
                "b.rs",
                "pub fn g() {}\n#[cfg(test)]\nmod tests {}\n\npub fn later() { crate::a::f() }",
            ),
        ]);
        assert_eq!(cycles, ["crate: a → b → a"]);
    }

    #[test]
    fn a_cycle_through_a_re_export_or_a_macro_is_found() {
        let cycles = cycles_of(&[
            ("lib.rs", "mod a; mod b; pub use b::Bee;"),
            (
                "a.rs",
                "pub const NAME: &str = \"a\"; fn f(_: crate::Bee) {}",
            ),
            (
                "b.rs",
                "pub struct Bee; fn g() { println!(\"{}\", crate::a::NAME) }",
            ),
        ]);
        assert_eq!(cycles, ["crate: a → b → a"]);
    }

    #[test]
    fn dependencies_one_way_and_from_tests_make_no_cycle() {
        let cycles = cycles_of(&[
            ("lib.rs", "mod a; mod b; pub use a::Aye;"),
            (
                "a.rs",
                "pub struct Aye; use crate::b::Bee; fn f() { super::b::g() }",
            ),
            (
                "b.rs",
                "pub struct Bee; pub fn g() { let _ = crate::Thing; }
                 #[cfg(test)] fn t() -> crate::a::Aye { todo!() }
                 #[cfg(test)] mod tests { use crate::a::Aye; }",
            ),
        ]);
        assert_eq!(cycles, Vec::<String>::new());
    }
}
