//! Checks of the code itself, as rust-analyzer's tidy tests do, over every crate's sources parsed
//! with `syn` (all of each file, code after a `#[cfg(test)]` module included; `#[cfg(test)]` items
//! left out):
//! - no crate's modules depend on one another in a cycle, at the top of the crate or among the
//!   modules of any folder (`cycles`);
//! - every module has a doc (`docs`);
//! - the pure modules name no I/O: the core none of the standard library's, and the scheduler's
//!   machine only pure modules of its crate (`purity`);
//! - ARCHITECTURE.md's code map names what exists and every module (`code_map`, which describes
//!   the map's convention).
//!
//! `model` reads a crate into the module tree these checks ask about.

mod code_map;
mod cycles;
mod docs;
mod model;
mod purity;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use model::{Crate, ModPath};

/// The crates checked, by folder under `crates/`.
const CRATES: &[&str] = &["core", "log", "exec", "service", "cli"];

/// The standard library's I/O: files, processes, sockets, the environment, the standard streams.
/// A pure module names none of it, however imported. (The core's `clippy.toml` forbids the calls
/// themselves; this forbids naming the modules and the streams.)
const IO_PATHS: &[&str] = &[
    "std::fs",
    "std::process",
    "std::net",
    "std::env",
    "std::io::stdin",
    "std::io::stdout",
    "std::io::stderr",
    "std::io::Stdin",
    "std::io::Stdout",
    "std::io::Stderr",
    "std::os::unix::fs",
    "std::os::unix::net",
    "std::os::unix::process",
];

/// What the scheduler's machine does without besides I/O (its doc: "no threads, clock"); its
/// driver brings the time in as an input.
const NOT_IN_THE_MACHINE: &[&str] = &[
    "std::thread",
    "std::sync::mpsc",
    "std::time::Instant",
    "std::time::SystemTime",
];

/// The scheduler's pure state machine in `databuild-exec`.
const EXEC_MACHINE: &str = "scheduler::machine";

/// The pure modules of `databuild-exec`: no threads, clock, processes, files or log, and naming
/// no other module of the crate but these (and the modules under them). The machine is one, and
/// may name only these. Add a module here when the machine needs it and it is pure: the test
/// checks it as it checks the machine.
const PURE_EXEC_MODULES: &[&str] = &[
    "scheduler::machine",
    "run::outcome",
    "check",
    "answers",
    "anomaly",
];

/// The repository's root.
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .ancestors()
        .nth(2)
        .expect("the cli crate is at crates/cli")
        .to_path_buf()
}

/// The crate in `crates/<name>`, one of `CRATES`. All are read once, for every test.
fn load(name: &str) -> &'static Crate {
    static LOADED: OnceLock<BTreeMap<&str, Crate>> = OnceLock::new();
    let loaded = LOADED.get_or_init(|| {
        let read = |name: &&'static str| {
            let krate = Crate::load(&root().join("crates").join(name).join("src"));
            assert!(krate.modules.len() > 3, "crates/{name}: no modules found");
            (*name, krate)
        };
        CRATES.iter().map(read).collect()
    });
    &loaded[name]
}

fn module_path(name: &str) -> ModPath {
    name.split("::").map(str::to_string).collect()
}

/// Panics with every problem found, one per line, if there is any.
fn assert_none(what: &str, problems: Vec<String>) {
    assert!(problems.is_empty(), "{what}:\n{}", problems.join("\n"));
}

#[test]
fn no_crate_has_a_module_cycle() {
    let cycles: Vec<String> = CRATES
        .iter()
        .flat_map(|name| {
            cycles::module_cycles(load(name))
                .into_iter()
                .map(move |c| format!("crates/{name}: {c}"))
        })
        .collect();
    assert_none("module cycles", cycles);
}

#[test]
fn every_module_has_a_doc() {
    let undocumented: Vec<String> = CRATES
        .iter()
        .flat_map(|name| {
            docs::undocumented(load(name))
                .into_iter()
                .map(move |m| format!("crates/{name}/src/{m}"))
        })
        .collect();
    assert_none("modules without a doc", undocumented);
}

#[test]
fn the_core_names_no_io() {
    let core = load("core");
    assert_none(
        "I/O in crates/core",
        purity::forbidden_std(core, &[Vec::new()], IO_PATHS),
    );
}

#[test]
fn the_scheduler_machine_names_only_pure_modules() {
    let exec = load("exec");
    let machine = module_path(EXEC_MACHINE);
    assert!(
        exec.module(&machine).is_some(),
        "crates/exec: the machine is not at {EXEC_MACHINE}"
    );
    let pure: Vec<ModPath> = PURE_EXEC_MODULES
        .iter()
        .map(|name| module_path(name))
        .collect();
    for (name, path) in PURE_EXEC_MODULES.iter().zip(&pure) {
        assert!(
            exec.module(path).is_some(),
            "crates/exec has no module {name}"
        );
    }
    assert!(
        pure.contains(&machine),
        "the machine is on PURE_EXEC_MODULES"
    );
    let avoided: Vec<&str> = IO_PATHS.iter().chain(NOT_IN_THE_MACHINE).copied().collect();
    let mut problems = purity::forbidden_std(exec, &pure, &avoided);
    problems.extend(purity::impure_imports(exec, &pure, &pure, &[]));
    assert_none("impure names in crates/exec's pure modules", problems);
}

/// ARCHITECTURE.md's code map names only paths that exist, and every module of every crate.
///
/// The convention the map follows:
/// - A crate's section is a level-3 heading whose first code span is the crate's folder, e.g.
///   ``### `crates/exec` (`databuild-exec`): doing it on this machine``; it runs to the next
///   heading of level 3 or less. (Fenced code blocks are skipped.)
/// - A *path* is a code span (single backticks, no whitespace) that starts with `crates/`, or
///   ends with `.rs` or `/`, and holds none of `*`, `<`, `>`, `{`, `}` (so `v*.sql`,
///   `<data_dir>/..` and routes are prose, not paths).
/// - In a crate's section, a path is relative to that crate's `src/` (`engine/status.rs` in
///   `crates/exec`'s section is `crates/exec/src/engine/status.rs`), except one starting with
///   `crates/`, relative to the repository's root like every path outside the crates' sections
///   (`fuzz/`). So a crate's file outside `src/` is written in full: `crates/service/assets/`.
/// - Every path exists (a file or a folder).
/// - Every module of every crate that has a file of its own — but the crate root (`lib.rs`,
///   `main.rs`) and `#[cfg(test)]` modules — is on the map: its file is named
///   (`build/machine.rs`), or, for a module with a folder (`build/mod.rs`, or `build.rs` beside
///   `build/`), its folder (`build/`). Inline modules are part of their file. A folder does not
///   stand for the modules inside it: each is named.
#[test]
fn the_code_map_names_what_exists_and_every_module() {
    let root = root();
    let map = std::fs::read_to_string(root.join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let paths = code_map::map_paths(&map);
    let mut problems = code_map::missing(&paths, |path| root.join(path).exists());
    for name in CRATES {
        let folder = format!("crates/{name}");
        for module in code_map::unmapped(&paths, &folder, load(name)) {
            problems.push(format!("{module} is not on the map"));
        }
    }
    assert_none("ARCHITECTURE.md's code map", problems);
}
