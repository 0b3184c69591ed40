//! Checks of the code itself, as rust-analyzer's tidy tests do: the modules of each crate depend
//! on one another without cycles (a cycle makes every module of it depend on all the others).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// Each top-level module of `src` and the modules of the same crate it names (`crate::x`),
/// outside comments and tests.
fn module_deps(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut deps: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files = vec![src.to_path_buf()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        if path.extension().is_none_or(|e| e != "rs") {
            continue;
        }
        let rel = path.strip_prefix(src).unwrap();
        let module = rel
            .iter()
            .next()
            .unwrap()
            .to_string_lossy()
            .replace(".rs", "");
        if module == "lib" || module == "main" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let code = text.split("#[cfg(test)]").next().unwrap();
        let entry = deps.entry(module.clone()).or_default();
        for line in code.lines().filter(|l| !l.trim_start().starts_with("//")) {
            for (i, _) in line.match_indices("crate::") {
                let name: String = line[i + 7..]
                    .chars()
                    .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                    .collect();
                if !name.is_empty() && name != module {
                    entry.insert(name);
                }
            }
        }
    }
    deps
}

/// A module that reaches itself through others, with the path it takes.
fn cycle(deps: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    for start in deps.keys() {
        let mut stack = vec![vec![start.clone()]];
        let mut seen = BTreeSet::new();
        while let Some(path) = stack.pop() {
            let last = path.last().unwrap();
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

#[test]
fn no_crate_has_a_module_cycle() {
    let crates = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    for name in ["core", "log", "exec", "service", "cli"] {
        let deps = module_deps(&crates.join(name).join("src"));
        assert!(deps.len() > 3, "{name}: no modules found");
        if let Some(path) = cycle(&deps) {
            panic!("crates/{name}: module cycle {}", path.join(" → "));
        }
    }
}

#[test]
fn a_cycle_is_found() {
    let deps: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a")]
        .into_iter()
        .map(|(m, d)| (m.to_string(), BTreeSet::from([d.to_string()])))
        .collect();
    assert_eq!(cycle(&deps).unwrap(), ["a", "b", "c", "a"]);
}
