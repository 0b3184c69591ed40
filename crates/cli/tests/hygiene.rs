//! Checks of the workspace's manifests: every crate inherits the workspace's `rust-version`, and
//! that version, the oldest Rust the workspace builds with, is true.
//!
//! The honest check of a minimum Rust version is to build with that toolchain, but the machines
//! the test command runs on cannot fetch another toolchain. The version is decided by two things
//! that can be read instead: the Rust versions the locked dependencies declare (cargo refuses to
//! build one with an older toolchain, and `cargo metadata` reports them exactly), and the newest
//! standard-library APIs our own code calls. For the second, [`STABILISED`] lists the recent APIs
//! with the release that stabilised each (as the standard library's documentation says), and the
//! test looks for each in the sources: the ones used today, which set the code's minimum, and the
//! ones stabilised after the declared version, so that the first use of one fails here rather
//! than on an older toolchain. An API missing from the table goes unseen: when the compiler is
//! upgraded, add what its release stabilised.

use std::path::{Path, PathBuf};
use std::process::Command;

/// A Rust release, as `major.minor[.patch]`.
type Version = (u32, u32, u32);

fn version(text: &str) -> Version {
    let mut parts = text.split('.').map(|p| p.parse::<u32>().expect(text));
    let major = parts.next().unwrap_or(0);
    let minor = parts.next().unwrap_or(0);
    (major, minor, parts.next().unwrap_or(0))
}

fn shown((major, minor, _): Version) -> String {
    format!("{major}.{minor}")
}

/// What to look for in the sources, what it is, and the release that stabilised it.
const STABILISED: &[(&str, &str, &str)] = &[
    // Used today; the newest of these is the code's minimum.
    ("LazyLock", "std::sync::LazyLock", "1.80"),
    (".is_none_or(", "Option::is_none_or", "1.82"),
    (".is_sorted_by(", "slice::is_sorted_by", "1.82"),
    ("repeat_n(", "std::iter::repeat_n", "1.82"),
    ("io::pipe(", "std::io::pipe", "1.87"),
    (".is_multiple_of(", "{integer}::is_multiple_of", "1.87"),
    // Stabilised since, and unused: here to catch the first use.
    (".extract_if(", "Vec::extract_if", "1.87"),
    (".as_chunks(", "slice::as_chunks", "1.88"),
    ("Cell::update(", "Cell::update", "1.88"),
    (".lock_shared(", "File::lock_shared", "1.89"),
    (
        ".checked_sub_signed(",
        "{integer}::checked_sub_signed",
        "1.90",
    ),
    (
        ".saturating_sub_signed(",
        "{integer}::saturating_sub_signed",
        "1.90",
    ),
    (".floor_char_boundary(", "str::floor_char_boundary", "1.91"),
    (".ceil_char_boundary(", "str::ceil_char_boundary", "1.91"),
    ("Duration::from_mins(", "Duration::from_mins", "1.91"),
    ("Duration::from_hours(", "Duration::from_hours", "1.91"),
    (".file_prefix(", "Path::file_prefix", "1.91"),
    (".add_extension(", "PathBuf::add_extension", "1.91"),
    (
        ".with_added_extension(",
        "Path::with_added_extension",
        "1.91",
    ),
    (".strict_add(", "{integer}::strict_add", "1.91"),
    (".strict_sub(", "{integer}::strict_sub", "1.91"),
    (".strict_mul(", "{integer}::strict_mul", "1.91"),
    ("::from_octets(", "Ipv4Addr::from_octets", "1.91"),
    ("::new_zeroed(", "Box::new_zeroed", "1.92"),
    (".pop_front_if(", "VecDeque::pop_front_if", "1.93"),
    (".pop_back_if(", "VecDeque::pop_back_if", "1.93"),
    (
        "Duration::from_nanos_u128(",
        "Duration::from_nanos_u128",
        "1.93",
    ),
    (".into_raw_parts(", "Vec::into_raw_parts", "1.93"),
    (".array_windows(", "slice::array_windows", "1.94"),
    (".next_if_map(", "Peekable::next_if_map", "1.94"),
    ("cfg_select!", "cfg_select!", "1.95"),
    (".push_mut(", "Vec::push_mut", "1.95"),
];

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .unwrap()
}

/// The workspace's members, from the root manifest's `members` list.
fn members() -> Vec<String> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let list = manifest
        .lines()
        .find_map(|l| l.strip_prefix("members = ["))
        .expect("a `members = [...]` line in the root Cargo.toml");
    list.trim_end_matches(']')
        .split(',')
        .map(|m| m.trim().trim_matches('"').to_string())
        .filter(|m| !m.is_empty())
        .collect()
}

/// The `rust-version` of `[workspace.package]`.
fn declared() -> Version {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let value = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("a `rust-version` in [workspace.package]");
    version(value.trim_matches('"'))
}

/// The `.rs` files under `dir`, but for build output and this file (whose table names every API
/// it looks for).
fn sources(dir: &Path, found: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.ends_with("target") {
            sources(&path, found);
        } else if path.extension().is_some_and(|e| e == "rs") && !path.ends_with(file!()) {
            found.push(path);
        }
    }
}

/// Each API of [`STABILISED`] the code uses, with a file that uses it.
fn used_apis() -> Vec<(&'static str, Version, PathBuf)> {
    let mut files = Vec::new();
    sources(&root().join("crates"), &mut files);
    assert!(files.len() > 20, "no sources found under crates/");
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| (f.clone(), std::fs::read_to_string(&f).unwrap()))
        .collect();
    STABILISED
        .iter()
        .filter_map(|&(pattern, what, since)| {
            let (file, _) = texts.iter().find(|(_, text)| text.contains(pattern))?;
            let file = file.strip_prefix(root()).unwrap_or(file).to_path_buf();
            Some((what, version(since), file))
        })
        .collect()
}

/// The Rust version each locked dependency (but the workspace's own crates) declares, for this
/// platform: what cargo checks before it builds them.
fn dependency_versions() -> Vec<(String, Version)> {
    let host = Command::new(env!("CARGO")).arg("-vV").output().unwrap();
    let host = String::from_utf8(host.stdout).unwrap();
    let host = host
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("cargo -vV names the host");
    let out = Command::new(env!("CARGO"))
        .current_dir(root())
        .args(["metadata", "--format-version", "1", "--offline", "--locked"])
        .args(["--filter-platform", host])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cargo metadata failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let metadata: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let in_build: Vec<&str> = metadata["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| n["id"].as_str().unwrap())
        .collect();
    let ours = metadata["workspace_members"].as_array().unwrap();
    metadata["packages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| in_build.contains(&p["id"].as_str().unwrap()) && !ours.contains(&p["id"]))
        .filter_map(|p| {
            let name = format!("{} {}", p["name"].as_str()?, p["version"].as_str()?);
            Some((name, version(p["rust_version"].as_str()?)))
        })
        .collect()
}

#[test]
fn every_crate_inherits_the_workspace_rust_version() {
    let members = members();
    assert!(members.len() >= 5, "members: {members:?}");
    for member in members {
        let manifest = std::fs::read_to_string(root().join(&member).join("Cargo.toml")).unwrap();
        assert!(
            manifest
                .lines()
                .any(|l| l == "rust-version.workspace = true"),
            "{member}/Cargo.toml does not inherit the workspace's rust-version \
             (`rust-version.workspace = true` under [package])"
        );
    }
}

#[test]
fn the_code_uses_no_api_newer_than_the_declared_rust_version() {
    let declared = declared();
    for (what, since, file) in used_apis() {
        assert!(
            since <= declared,
            "{} uses {what}, stable since Rust {}, but the workspace declares rust-version {}: \
             raise it, or do without",
            file.display(),
            shown(since),
            shown(declared)
        );
    }
}

#[test]
fn every_locked_dependency_builds_with_the_declared_rust_version() {
    let declared = declared();
    for (name, needs) in dependency_versions() {
        assert!(
            needs <= declared,
            "{name} needs Rust {}, but the workspace declares rust-version {}: raise it",
            shown(needs),
            shown(declared)
        );
    }
}

/// The declared version is the least that covers both, so that it says what is true rather than
/// what was once true: a lower toolchain that would do is not turned away.
#[test]
fn the_declared_rust_version_is_the_least_that_builds() {
    let code = used_apis().into_iter().map(|(_, since, _)| since).max();
    let dependencies = dependency_versions().into_iter().map(|(_, v)| v).max();
    let needed = code.max(dependencies).expect("something sets a minimum");
    assert_eq!(
        shown(declared()),
        shown(needed),
        "the workspace's rust-version is not what the code and its locked dependencies need \
         (the code: {}, the dependencies: {})",
        code.map(shown).unwrap_or_default(),
        dependencies.map(shown).unwrap_or_default()
    );
}
