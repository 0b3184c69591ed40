//! The job that builds a table version's day (`databuild table-job`), run as a process like any
//! other job: it reads `DATABUILD_INPUTS`, writes `DATABUILD_OUTPUTS`, and reports its counts and
//! provenance through `DATABUILD_REPORT`.
//!
//! - `load SCHEMA`: reads the raw source partition, keeps the records that fit the schema, and
//!   quarantines the rest (with why) in the errors partition.
//! - `carry FROM TO`: the raw partition has expired; carries the previous version's rows forward
//!   through the [`Migration`] between the two schemas.
//!
//! A table partition is a JSON-lines file, written to a temporary name and renamed, so a reader
//! never sees half of one.

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use databuild_core::tables::{conform, Column, Migration, TableVersion};
use serde::{Deserialize, Serialize};
use serde_json::{json, Map, Value};

/// Why a table run failed. The cause is part of each message (it is what the run's log shows),
/// so it is kept as a plain field rather than a `source`, which `{:#}` would print twice.
#[derive(Debug, thiserror::Error)]
pub enum TableJobError {
    #[error("`{0}` is not set: `databuild table-job` runs as a job of a build")]
    NotSet(&'static str),
    #[error("`{var}` is not a JSON array of refs: {cause}")]
    NotRefs {
        var: &'static str,
        cause: serde_json::Error,
    },
    #[error("`{var}_FILE` names `{}`, which cannot be read: {cause}", .path.display())]
    RefsFile {
        var: &'static str,
        path: PathBuf,
        cause: std::io::Error,
    },
    #[error("a table run builds one day: a data and an errors partition from one input")]
    NotOneDay,
    #[error("a schema argument is not valid: {0}")]
    Schema(serde_json::Error),
    #[error(transparent)]
    Table(#[from] databuild_core::tables::TableError),
    #[error("usage: databuild table-job load SCHEMA | carry FROM_SCHEMA TO_SCHEMA")]
    Usage,
    #[error("cannot carry v{from} forward to v{to}: {cause}")]
    Carry {
        from: u32,
        to: u32,
        cause: databuild_core::tables::TableError,
    },
    #[error("cannot read {input}: {cause}")]
    Read {
        input: String,
        cause: std::io::Error,
    },
    /// `what`: the partition's ref, or its file's path.
    #[error("cannot write {what}: {cause}")]
    Write { what: String, cause: std::io::Error },
    #[error("{0}")]
    Row(serde_json::Error),
    #[error("{0}")]
    RowIo(std::io::Error),
    #[error("cannot link the alias of {data_ref}: {cause}")]
    Alias {
        data_ref: String,
        cause: std::io::Error,
    },
    #[error("cannot write the report: {0}")]
    Report(std::io::Error),
}

type Result<T, E = TableJobError> = std::result::Result<T, E>;

/// A table version's schema as passed to the job on its command line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Schema {
    pub version: u32,
    pub columns: BTreeMap<String, String>,
    #[serde(default)]
    pub defaults: BTreeMap<String, Value>,
}

impl Schema {
    pub fn of(v: &TableVersion) -> Schema {
        Schema {
            version: v.version,
            columns: v
                .columns
                .iter()
                .map(|c| (c.name.clone(), c.spec()))
                .collect(),
            defaults: v.defaults.clone(),
        }
    }

    fn table_version(&self) -> Result<TableVersion> {
        Ok(TableVersion {
            version: self.version,
            columns: self
                .columns
                .iter()
                .map(|(n, s)| Column::parse(n, s))
                .collect::<Result<_, _>>()?,
            defaults: self.defaults.clone(),
            job: 0,
        })
    }

    pub fn to_arg(&self) -> String {
        serde_json::to_string(self).expect("schemas serialize")
    }
}

/// Where the job's inputs and outputs are, from its environment.
struct Env {
    data_dir: PathBuf,
    input: String,
    data_ref: String,
    errors_ref: String,
    report: Option<PathBuf>,
}

/// The job's inputs, from the environment every job run is given (`DATABUILD_OUTPUTS` and the
/// rest): this process is a job, and its environment is its interface, not configuration.
fn env() -> Result<Env> {
    let var = |k: &'static str| std::env::var(k).map_err(|_| TableJobError::NotSet(k));
    let refs = |k: &'static str| -> Result<Vec<String>> {
        // A list too long for the environment comes in a file (`VAR_FILE`, contract section 3).
        let text = match std::env::var_os(format!("{k}_FILE")) {
            Some(path) => {
                std::fs::read_to_string(&path).map_err(|cause| TableJobError::RefsFile {
                    var: k,
                    path: path.into(),
                    cause,
                })?
            }
            None => var(k)?,
        };
        serde_json::from_str(&text).map_err(|cause| TableJobError::NotRefs { var: k, cause })
    };
    let outputs = refs("DATABUILD_OUTPUTS")?;
    let inputs = refs("DATABUILD_INPUTS")?;
    let (errors, data): (Vec<String>, Vec<String>) = outputs
        .into_iter()
        .partition(|o| o.contains("/errors/date="));
    match (data.as_slice(), errors.as_slice(), inputs.as_slice()) {
        ([d], [e], [i]) => Ok(Env {
            data_dir: PathBuf::from(var("DATABUILD_DATA_DIR")?),
            input: i.clone(),
            data_ref: d.clone(),
            errors_ref: e.clone(),
            report: std::env::var_os("DATABUILD_REPORT").map(PathBuf::from),
        }),
        _ => Err(TableJobError::NotOneDay),
    }
}

/// Runs the job as `databuild table-job ARGS...` does.
pub fn run(args: &[String]) -> Result<()> {
    let env = env()?;
    let schema =
        |s: &String| -> Result<Schema> { serde_json::from_str(s).map_err(TableJobError::Schema) };
    let report = match args {
        [mode, s] if mode == "load" => load(&env, &schema(s)?.table_version()?)?,
        [mode, from, to] if mode == "carry" => carry(
            &env,
            &schema(from)?.table_version()?,
            &schema(to)?.table_version()?,
        )?,
        _ => return Err(TableJobError::Usage),
    };
    let report = with_metrics(&env, report);
    link_alias(&env.data_dir, &env.data_ref).map_err(|cause| TableJobError::Alias {
        data_ref: env.data_ref.clone(),
        cause,
    })?;
    if let Some(path) = &env.report {
        fs::write(path, report.to_string()).map_err(TableJobError::Report)?;
    }
    println!("{report}");
    Ok(())
}

/// The report with its counts as metrics of the day's outputs (kept per partition, contract
/// section 3): the table's `rows` and `error_rows`, and the errors table's `rows`.
fn with_metrics(env: &Env, mut report: Value) -> Value {
    let (rows, errors) = (report["rows"].clone(), report["quarantined"].clone());
    report["metrics"] = json!({
        env.data_ref.as_str(): { "rows": rows, "error_rows": errors },
        env.errors_ref.as_str(): { "rows": errors },
    });
    report
}

/// The failure to read the run's input.
fn unreadable(env: &Env) -> impl Fn(std::io::Error) -> TableJobError + '_ {
    |cause| TableJobError::Read {
        input: env.input.clone(),
        cause,
    }
}

fn load(env: &Env, to: &TableVersion) -> Result<Value> {
    let dir = env.data_dir.join(&env.input);
    let raw = crate::data::sources::read_records(&dir).map_err(unreadable(env))?;
    let records = raw.records;
    let mut rows = Rows::create(&env.data_dir, &env.data_ref)?;
    let mut errors = Rows::create(&env.data_dir, &env.errors_ref)?;
    for line in &raw.unreadable {
        errors.push(&json!({
            "record": line.text,
            "error": format!("line {} is not JSON: {}", line.at, line.cause),
        }))?;
    }
    for record in &records {
        match conform(record, to) {
            Ok(row) => rows.push(&Value::Object(row))?,
            Err(why) => errors.push(&json!({ "record": record, "error": why.to_string() }))?,
        }
    }
    let (kept, quarantined) = (rows.finish()?, errors.finish()?);
    Ok(json!({
        "rows": kept,
        "quarantined": quarantined,
        "provenance": format!(
            "loaded from {} ({} records)",
            env.input,
            records.len() + raw.unreadable.len()
        ),
    }))
}

fn carry(env: &Env, from: &TableVersion, to: &TableVersion) -> Result<Value> {
    let migration = Migration::between(from, to).map_err(|cause| TableJobError::Carry {
        from: from.version,
        to: to.version,
        cause,
    })?;
    let path = env.data_dir.join(&env.input);
    let file = File::open(&path).map_err(unreadable(env))?;
    let mut rows = Rows::create(&env.data_dir, &env.data_ref)?;
    let mut errors = Rows::create(&env.data_dir, &env.errors_ref)?;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(unreadable(env))?;
        let Ok(Value::Object(row)) = serde_json::from_str::<Value>(&line) else {
            errors.push(&json!({ "record": line, "error": "not a JSON object" }))?;
            continue;
        };
        let carried: Map<String, Value> = migration.apply(row, to);
        // Defaults and casts are checked again: a carried row must fit the new schema too, and
        // is written as `conform` writes a loaded one, each value in its column's type.
        match conform(&Value::Object(carried.clone()), to) {
            Ok(row) => rows.push(&Value::Object(row))?,
            Err(why) => errors.push(&json!({ "record": carried, "error": why.to_string() }))?,
        }
    }
    let (kept, quarantined) = (rows.finish()?, errors.finish()?);
    Ok(json!({
        "rows": kept,
        "quarantined": quarantined,
        "provenance": format!("carried forward from {} (its raw source partition expired)", env.input),
        "carried_from": env.input,
    }))
}

/// A partition file being written: rows go to a temporary file, renamed into place at the end.
struct Rows {
    tmp: PathBuf,
    path: PathBuf,
    out: BufWriter<File>,
    count: u64,
}

impl Rows {
    fn create(data_dir: &Path, r: &str) -> Result<Rows> {
        let path = data_dir.join(r);
        let fail = |cause| TableJobError::Write {
            what: r.to_string(),
            cause,
        };
        if let Some(parent) = path.parent() {
            fs::create_dir_all(parent).map_err(fail)?;
        }
        let tmp = path.with_extension(format!("tmp-{}", std::process::id()));
        let out = BufWriter::new(File::create(&tmp).map_err(fail)?);
        Ok(Rows {
            tmp,
            path,
            out,
            count: 0,
        })
    }

    fn push(&mut self, row: &Value) -> Result<()> {
        serde_json::to_writer(&mut self.out, row).map_err(TableJobError::Row)?;
        self.out.write_all(b"\n").map_err(TableJobError::RowIo)?;
        self.count += 1;
        Ok(())
    }

    fn finish(self) -> Result<u64> {
        let fail = |cause| TableJobError::Write {
            what: self.path.display().to_string(),
            cause,
        };
        let file = self.out.into_inner().map_err(|e| fail(e.into_error()))?;
        file.sync_all().map_err(fail)?;
        fs::rename(&self.tmp, &self.path).map_err(fail)?;
        Ok(self.count)
    }
}

/// Makes `<table>/date=D` (the alias path) point at `current/date=D`; `current` points at the
/// promoted version, so promotion switches every alias path at once.
pub fn link_alias(data_dir: &Path, data_ref: &str) -> std::io::Result<()> {
    let (Some((table, _)), Some(date)) = (data_ref.split_once('/'), data_ref.rsplit('/').next())
    else {
        return Ok(());
    };
    let alias = data_dir.join(table).join(date);
    if alias.symlink_metadata().is_ok() {
        return Ok(());
    }
    match std::os::unix::fs::symlink(Path::new("current").join(date), &alias) {
        Err(e) if e.kind() != std::io::ErrorKind::AlreadyExists => Err(e),
        _ => Ok(()),
    }
}

/// Points `<table>/current` at `v<version>` atomically (a new link renamed over the old).
pub fn point_current(data_dir: &Path, table: &str, version: u32) -> std::io::Result<()> {
    let dir = data_dir.join(table);
    fs::create_dir_all(&dir)?;
    let tmp = dir.join(format!(".current-{}", std::process::id()));
    let _ = fs::remove_file(&tmp);
    std::os::unix::fs::symlink(format!("v{version}"), &tmp)?;
    fs::rename(&tmp, dir.join("current"))?;
    File::open(&dir)?.sync_all()
}
