//! Where an environment's log lives, beside prod's: a SQLite log's environment is a file in the
//! folder `env/<name>/` next to it; a PostgreSQL log's is the schema `databuild_env_<name>` of
//! the same database. Each is a whole log of its own: its builds' claims, runs and answers never
//! touch prod's.

use std::path::{Path, PathBuf};

use crate::{LogError, Result};

/// The environment every command uses unless told otherwise: today's log and data dir.
pub const PROD: &str = "prod";

/// The longest environment name: it names a folder and a PostgreSQL schema.
const MAX_NAME: usize = 40;

/// A valid environment name: a lowercase letter, then lowercase letters, digits and `_`.
pub fn check_name(name: &str) -> std::result::Result<(), String> {
    let mut bytes = name.bytes();
    let starts_with_letter = bytes.next().is_some_and(|b| b.is_ascii_lowercase());
    if !starts_with_letter
        || name.len() > MAX_NAME
        || !bytes.all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!(
            "`{name}` is not an environment name: use a lowercase letter, then up to {} lowercase \
             letters, digits or `_` (e.g. `dev`, `try_new_agg`)",
            MAX_NAME - 1
        ));
    }
    Ok(())
}

/// Where environment `name`'s log is, given prod's log URI (relative paths against `base`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EnvLog {
    Sqlite(PathBuf),
    Postgres { url: String, schema: String },
}

impl EnvLog {
    pub fn of(uri: &str, base: &Path, name: &str) -> Result<EnvLog> {
        if let Some(path) = uri.strip_prefix("sqlite:") {
            let path = base.join(path.strip_prefix("//").unwrap_or(path));
            let file = path
                .file_name()
                .unwrap_or(std::ffi::OsStr::new("events.db"));
            let dir = path.parent().unwrap_or(Path::new("."));
            return Ok(EnvLog::Sqlite(envs_dir(dir).join(name).join(file)));
        }
        Ok(EnvLog::Postgres {
            url: uri.to_string(),
            schema: schema_of(name),
        })
    }

    /// Whether the environment's log was made (by `databuild env create`) and not dropped.
    pub fn exists(&self) -> Result<bool> {
        match self {
            EnvLog::Sqlite(path) => Ok(path.exists()),
            EnvLog::Postgres { url, schema } => {
                let found = crate::postgres::schemas_like(url, schema)?;
                Ok(found.iter().any(|s| s == schema))
            }
        }
    }

    /// Deletes the log: its file (and WAL), or its schema.
    pub fn remove(&self) -> Result<()> {
        match self {
            EnvLog::Sqlite(path) => {
                let dir = path.parent().unwrap_or(Path::new("."));
                std::fs::remove_dir_all(dir)
                    .or_else(ignore_missing)
                    .map_err(|e| LogError::Open {
                        location: dir.display().to_string(),
                        message: format!("cannot remove the environment's log: {e}"),
                    })
            }
            EnvLog::Postgres { url, schema } => crate::postgres::drop_schema(url, schema),
        }
    }
}

/// The environments whose logs exist beside prod's log `uri`, by name, sorted.
pub fn list(uri: &str, base: &Path) -> Result<Vec<String>> {
    let mut names = match EnvLog::of(uri, base, "x")? {
        EnvLog::Sqlite(path) => {
            // `<dir>/env/x/<file>`: the folder of every environment is `<dir>/env`.
            let envs = path
                .parent()
                .and_then(Path::parent)
                .unwrap_or(Path::new("."));
            let file = path
                .file_name()
                .map(|f| f.to_os_string())
                .unwrap_or_default();
            match std::fs::read_dir(envs) {
                Ok(entries) => entries
                    .filter_map(|e| e.ok())
                    .filter(|e| e.path().join(&file).exists())
                    .filter_map(|e| e.file_name().into_string().ok())
                    .filter(|n| check_name(n).is_ok())
                    .collect(),
                Err(_) => Vec::new(),
            }
        }
        EnvLog::Postgres { url, .. } => crate::postgres::schemas_like(&url, SCHEMA_PREFIX)?
            .into_iter()
            .filter_map(|s| s.strip_prefix(SCHEMA_PREFIX).map(str::to_string))
            .filter(|n| check_name(n).is_ok())
            .collect(),
    };
    names.sort();
    Ok(names)
}

const SCHEMA_PREFIX: &str = "databuild_env_";

fn schema_of(name: &str) -> String {
    format!("{SCHEMA_PREFIX}{name}")
}

fn envs_dir(log_dir: &Path) -> PathBuf {
    log_dir.join("env")
}

fn ignore_missing(e: std::io::Error) -> std::io::Result<()> {
    match e.kind() {
        std::io::ErrorKind::NotFound => Ok(()),
        _ => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowercase_words_that_fit_a_folder_and_a_schema() {
        for good in ["dev", "try_new_agg", "a1"] {
            assert_eq!(check_name(good), Ok(()), "{good}");
        }
        for bad in ["", "Dev", "1dev", "de-v", "dev/x", "d.v", &"a".repeat(41)] {
            assert!(check_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_sqlite_environment_lives_in_a_folder_beside_prods_log() {
        let base = Path::new("/g");
        assert_eq!(
            EnvLog::of("sqlite:.databuild/events.db", base, "dev").unwrap(),
            EnvLog::Sqlite(PathBuf::from("/g/.databuild/env/dev/events.db"))
        );
        assert_eq!(
            EnvLog::of("postgres://u@h/db", base, "dev").unwrap(),
            EnvLog::Postgres {
                url: "postgres://u@h/db".into(),
                schema: "databuild_env_dev".into()
            }
        );
    }

    #[test]
    fn listing_finds_the_environments_whose_logs_exist() {
        let dir = tempfile::tempdir().unwrap();
        let uri = "sqlite:.databuild/events.db";
        assert_eq!(list(uri, dir.path()).unwrap(), Vec::<String>::new());
        let options = crate::OpenOptions::default();
        for name in ["dev", "staging"] {
            crate::open_environment(uri, dir.path(), &options, name, true).unwrap();
        }
        let missing = crate::open_environment(uri, dir.path(), &options, "nope", false);
        let message = missing.err().expect("no such environment").to_string();
        assert!(message.contains("databuild env create nope"), "{message}");
        std::fs::create_dir_all(dir.path().join(".databuild/env/empty")).unwrap();
        assert_eq!(list(uri, dir.path()).unwrap(), ["dev", "staging"]);
        let dev = EnvLog::of(uri, dir.path(), "dev").unwrap();
        assert!(dev.exists().unwrap());
        dev.remove().unwrap();
        assert!(!dev.exists().unwrap());
        assert_eq!(list(uri, dir.path()).unwrap(), ["staging"]);
    }
}
