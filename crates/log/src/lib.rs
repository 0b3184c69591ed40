//! DataBuild's build event log: the only source of truth.
//!
//! - [`Event`] is the schema of contract section 5; [`state`] holds the state machines every event
//!   is checked against; [`Replay`] applies events in memory (the reference for projections).
//! - [`EventStore`] is the storage interface; [`SqliteStore`] the embedded default,
//!   [`PostgresStore`] the shared one.
//! - [`open`] picks a backend from a log URI (`sqlite:PATH`).

mod cache;
pub mod environments;
pub mod event;
pub mod postgres;
mod projection;
pub mod replay;
pub mod sqlite;
pub mod state;
pub mod store;

use std::path::Path;

// Lets shared test code name this crate the same way inside and outside it.
extern crate self as databuild_log;

#[cfg(test)]
mod testing;

pub use event::{AfterFailure, Cutoff, Event, EventData, Kind, ReusedFrom, RunResources, Status};
pub use postgres::PostgresStore;
pub use replay::{check_store, CheckReport, Replay};
pub use sqlite::SqliteStore;
pub use state::RefusalKind;
pub use store::*;

/// The default log, relative to the graph file's folder.
pub const DEFAULT_LOG: &str = ".databuild/events.db";

/// How to open a log, beyond its URI: settings the binary reads once, at its edge.
#[derive(Debug, Clone, Default)]
pub struct OpenOptions {
    /// PostgreSQL: the role user SQL runs as (`DATABUILD_SQL_ROLE`); SQLite has no roles.
    pub sql_role: Option<String>,
}

/// Opens the event log named by `uri` (`sqlite:PATH`, relative paths against `base`, or
/// `postgres://...`) with the default [`OpenOptions`].
pub fn open(uri: &str, base: &Path) -> Result<Box<dyn EventStore>> {
    open_with(uri, base, &OpenOptions::default())
}

/// [`open`] with `options`.
pub fn open_with(uri: &str, base: &Path, options: &OpenOptions) -> Result<Box<dyn EventStore>> {
    if let Some(path) = uri.strip_prefix("sqlite:") {
        let path = base.join(path.strip_prefix("//").unwrap_or(path));
        return Ok(Box::new(SqliteStore::open(&path)?));
    }
    if uri.starts_with("postgres://") || uri.starts_with("postgresql://") {
        return Ok(Box::new(PostgresStore::open_with(
            uri,
            options.sql_role.clone(),
        )?));
    }
    let scheme = uri.split(':').next().unwrap_or(uri);
    Err(LogError::Open {
        location: redact(uri),
        message: format!(
            "unknown event log scheme `{scheme}`; use `sqlite:PATH` or `postgres://user@host:port/db`"
        ),
    })
}

/// Opens environment `name`'s log beside prod's log `uri` ([`environments`]): prod's own for
/// [`environments::PROD`]. `create`: make it if it does not exist (`databuild env create`);
/// otherwise an environment that does not exist is an error naming the command that makes it.
pub fn open_environment(
    uri: &str,
    base: &Path,
    options: &OpenOptions,
    name: &str,
    create: bool,
) -> Result<Box<dyn EventStore>> {
    if name == environments::PROD {
        return open_with(uri, base, options);
    }
    let no_such = |message: String| LogError::Open {
        location: redact(uri),
        message,
    };
    environments::check_name(name).map_err(no_such)?;
    let log = environments::EnvLog::of(uri, base, name)?;
    if !create && !log.exists()? {
        return Err(no_such(format!(
            "there is no environment `{name}`; make it with `databuild env create {name}` \
             (`databuild env list` shows those there are)"
        )));
    }
    match log {
        environments::EnvLog::Sqlite(path) => {
            let dir = path.parent().unwrap_or(Path::new("."));
            std::fs::create_dir_all(dir)
                .map_err(|e| no_such(format!("cannot create `{}`: {e}", dir.display())))?;
            Ok(Box::new(SqliteStore::open(&path)?))
        }
        environments::EnvLog::Postgres { url, schema } => Ok(Box::new(
            PostgresStore::open_in_schema(&url, options.sql_role.clone(), Some(&schema))?,
        )),
    }
}

/// Hides a password in a URI (`postgres://user:secret@host` → `postgres://user:***@host`).
pub fn redact(uri: &str) -> String {
    match (uri.find("://"), uri.find('@')) {
        (Some(s), Some(at)) if at > s => {
            let creds = &uri[s + 3..at];
            match creds.find(':') {
                Some(c) => format!("{}{}:***{}", &uri[..s + 3], &creds[..c], &uri[at..]),
                None => uri.to_string(),
            }
        }
        _ => uri.to_string(),
    }
}
