//! [`RunEnv`]: the env a config executable gave a run. Env values often carry secrets, so the
//! value of a name the graph's `show_env` does not list is kept apart from every way of showing
//! it: serializing, debugging and [`RunEnv::shown`] give [`REDACTED`] in its place, and only
//! [`RunEnv::for_process`], which hands it to the run's own process, gives the value. Whether a
//! name is shown is decided once, when the value enters, by [`Graph::recorded_env_value`].

use std::collections::BTreeMap;

use serde::{Serialize, Serializer};

use crate::graph::{Graph, REDACTED};

/// One value: one the graph shows, or a secret only the run's process is given.
#[derive(Clone, PartialEq, Eq)]
enum EnvValue {
    Shown(String),
    Secret(String),
}

impl EnvValue {
    fn shown(&self) -> &str {
        match self {
            EnvValue::Shown(v) => v,
            EnvValue::Secret(_) => REDACTED,
        }
    }

    fn real(&self) -> &str {
        match self {
            EnvValue::Shown(v) | EnvValue::Secret(v) => v,
        }
    }
}

/// The env a config gave a run, by name. It can only be built through [`RunEnv::new`], which
/// asks the graph which values may be shown, so no answer, event or plan that shows a run's env
/// can show a secret.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct RunEnv(BTreeMap<String, EnvValue>);

impl RunEnv {
    /// No env: what a run without a config's env has.
    pub const EMPTY: RunEnv = RunEnv(BTreeMap::new());

    /// `env` as a config gave it, each value shown or secret as `graph`'s `show_env` says.
    pub fn new(graph: &Graph, env: BTreeMap<String, String>) -> RunEnv {
        RunEnv(
            env.into_iter()
                .map(|(name, value)| {
                    let kept = if graph.recorded_env_value(&name, &value) == REDACTED {
                        EnvValue::Secret(value)
                    } else {
                        EnvValue::Shown(value)
                    };
                    (name, kept)
                })
                .collect(),
        )
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Each name with its value as answers and the log show it: [`REDACTED`] for a secret.
    pub fn shown(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.shown()))
    }

    /// Each name with its real value: only for the environment of the run's own process (and
    /// the data version, a hash, that it enters).
    pub fn for_process(&self) -> impl Iterator<Item = (&str, &str)> {
        self.0.iter().map(|(k, v)| (k.as_str(), v.real()))
    }
}

/// As [`RunEnv::shown`]: a plan's JSON (`analyze`, a dry run) shows secrets redacted.
impl Serialize for RunEnv {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.shown())
    }
}

/// As [`RunEnv::shown`]: debug output gets logged.
impl std::fmt::Debug for RunEnv {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_map().entries(self.shown()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn graph() -> Graph {
        Graph::parse(
            "[graph]\nname = \"g\"\nshow_env = [\"REGION\"]\n[[job]]\nname = \"j\"\noutputs = [\"o/{x}\"]\nconfig = [\"c\"]\ncommand = [\"x\"]\n",
            "test.toml",
        )
        .unwrap()
    }

    #[test]
    fn a_secret_is_shown_nowhere_but_to_the_process() {
        let env = RunEnv::new(
            &graph(),
            BTreeMap::from([
                ("API_KEY".to_string(), "s3cr3t".to_string()),
                ("REGION".to_string(), "eu".to_string()),
            ]),
        );
        let json = serde_json::to_string(&env).unwrap();
        assert_eq!(json, r#"{"API_KEY":"<redacted>","REGION":"eu"}"#);
        assert!(!format!("{env:?}").contains("s3cr3t"));
        let shown: Vec<_> = env.shown().collect();
        assert_eq!(shown, [("API_KEY", REDACTED), ("REGION", "eu")]);
        let real: Vec<_> = env.for_process().collect();
        assert_eq!(real, [("API_KEY", "s3cr3t"), ("REGION", "eu")]);
    }
}
