//! An external dataset's partitions present in the data dir (`datasets`), counted by listing its
//! pattern's folders one level at a time: a folder is listed only where the level above matched,
//! the count grows as the walk goes and no ref is kept, so a dataset of a million files costs
//! their folders' reads, never a million names in memory.

use std::path::Path;

use databuild_core::Pattern;

/// What a walk found: how many refs, and whether it stopped at its cap with more to see.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Present {
    pub count: u64,
    pub capped: bool,
}

/// Counts the refs of `pattern` whose `<data_dir>/<ref>` exists and that `own` accepts (the
/// dataset's own: another pattern may claim some of the same shape), stopping once the count
/// passes `cap` when one is given. A folder that cannot be read holds nothing to count.
pub fn count_present(
    data_dir: &Path,
    pattern: &Pattern,
    cap: Option<u64>,
    own: impl Fn(&str) -> bool,
) -> Present {
    // A field never spans a `/`, so each of a ref's folders matches one part of the pattern.
    let Some(levels) = pattern
        .as_str()
        .split('/')
        .map(Pattern::parse)
        .collect::<Result<Vec<_>, _>>()
        .ok()
    else {
        return Present::default();
    };
    let mut walk = Walk {
        levels: &levels,
        cap,
        own: &own,
        found: Present::default(),
    };
    walk.level(data_dir, &mut String::new(), 0);
    walk.found
}

struct Walk<'a, F> {
    levels: &'a [Pattern],
    cap: Option<u64>,
    own: &'a F,
    found: Present,
}

impl<F: Fn(&str) -> bool> Walk<'_, F> {
    /// Counts under `dir` (the ref's text so far in `prefix`) what matches `levels[at..]`;
    /// false once the cap is passed.
    fn level(&mut self, dir: &Path, prefix: &mut String, at: usize) -> bool {
        let level = &self.levels[at];
        if level.fields().next().is_none() {
            // A literal folder or name: looked at, not listed.
            return self.entry(&dir.join(level.as_str()), level.as_str(), prefix, at);
        }
        let Ok(entries) = std::fs::read_dir(dir) else {
            return true;
        };
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|n| level.match_ref(n).is_some()) else {
                continue; // not a ref's name, or not this pattern's
            };
            if !self.entry(&entry.path(), name, prefix, at) {
                return false;
            }
        }
        true
    }

    /// `name` in its folder at level `at`: counted at the last level, walked into before it.
    fn entry(&mut self, path: &Path, name: &str, prefix: &mut String, at: usize) -> bool {
        let len = prefix.len();
        if at > 0 {
            prefix.push('/');
        }
        prefix.push_str(name);
        let go_on = if at + 1 == self.levels.len() {
            self.count(path, prefix)
        } else {
            // Following links, as a ref's existence does.
            !path.is_dir() || self.level(path, prefix, at + 1)
        };
        prefix.truncate(len);
        go_on
    }

    fn count(&mut self, path: &Path, r: &str) -> bool {
        if !(self.own)(r) || !path.exists() {
            return true;
        }
        if self.cap.is_some_and(|cap| self.found.count == cap) {
            self.found.capped = true;
            return false;
        }
        self.found.count += 1;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(root: &Path, r: &str) {
        let path = root.join(r);
        std::fs::create_dir_all(path.parent().expect("a folder")).expect("mkdir");
        std::fs::write(path, "x").expect("write");
    }

    #[test]
    fn a_walk_counts_the_refs_of_its_pattern_and_stops_past_its_cap() {
        let dir = tempfile::tempdir().expect("tempdir");
        let root = dir.path();
        for r in [
            "raw/2024-01-01/events.csv",
            "raw/2024-01-02/events.csv",
            "raw/2024-01-03/other.csv",
            "raw/not-a-date/events.csv",
            "raw/2024-01-04/events.csv/deeper",
            "elsewhere/2024-01-01/events.csv",
        ] {
            touch(root, r);
        }
        let pattern = Pattern::parse("raw/{date:date}/events.csv").expect("pattern");
        let all = count_present(root, &pattern, None, |_| true);
        assert_eq!(
            all,
            Present {
                count: 3,
                capped: false
            },
            "the folder 2024-01-04/events.csv counts, as a ref's folder exists"
        );
        let some = count_present(root, &pattern, Some(2), |_| true);
        assert_eq!(
            some,
            Present {
                count: 2,
                capped: true
            }
        );
        let exactly = count_present(root, &pattern, Some(3), |_| true);
        assert!(!exactly.capped, "a cap reached but not passed is exact");
        let own = count_present(root, &pattern, None, |r| r != "raw/2024-01-02/events.csv");
        assert_eq!(own.count, 2);
        let nothing = count_present(root, &Pattern::parse("none/{x}").expect("p"), None, |_| {
            true
        });
        assert_eq!(nothing, Present::default());
    }
}
