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

    fn table_version(&self) -> Result<TableVersion, String> {
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

fn env() -> Result<Env, String> {
    let var = |k: &str| {
        std::env::var(k).map_err(|_| {
            format!("`{k}` is not set: `databuild table-job` runs as a job of a build")
        })
    };
    let refs = |k: &str| -> Result<Vec<String>, String> {
        serde_json::from_str(&var(k)?)
            .map_err(|e| format!("`{k}` is not a JSON array of refs: {e}"))
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
        _ => {
            Err("a table run builds one day: a data and an errors partition from one input".into())
        }
    }
}

/// Runs the job as `databuild table-job ARGS...` does.
pub fn run(args: &[String]) -> Result<(), String> {
    let env = env()?;
    let schema = |s: &String| -> Result<Schema, String> {
        serde_json::from_str(s).map_err(|e| format!("a schema argument is not valid: {e}"))
    };
    let report = match args {
        [mode, s] if mode == "load" => load(&env, &schema(s)?.table_version()?)?,
        [mode, from, to] if mode == "carry" => carry(
            &env,
            &schema(from)?.table_version()?,
            &schema(to)?.table_version()?,
        )?,
        _ => {
            return Err(
                "usage: databuild table-job load SCHEMA | carry FROM_SCHEMA TO_SCHEMA".into(),
            )
        }
    };
    link_alias(&env.data_dir, &env.data_ref)
        .map_err(|e| format!("cannot link the alias of {}: {e}", env.data_ref))?;
    if let Some(path) = &env.report {
        fs::write(path, report.to_string()).map_err(|e| format!("cannot write the report: {e}"))?;
    }
    println!("{report}");
    Ok(())
}

fn load(env: &Env, to: &TableVersion) -> Result<Value, String> {
    let dir = env.data_dir.join(&env.input);
    let records = crate::sources::read_records(&dir)
        .map_err(|e| format!("cannot read {}: {e}", env.input))?;
    let mut rows = Rows::create(&env.data_dir, &env.data_ref)?;
    let mut errors = Rows::create(&env.data_dir, &env.errors_ref)?;
    for record in &records {
        match conform(record, to) {
            Ok(row) => rows.push(&Value::Object(row))?,
            Err(why) => errors.push(&json!({ "record": record, "error": why }))?,
        }
    }
    let (kept, quarantined) = (rows.finish()?, errors.finish()?);
    Ok(json!({
        "rows": kept,
        "quarantined": quarantined,
        "provenance": format!("loaded from {} ({} records)", env.input, records.len()),
    }))
}

fn carry(env: &Env, from: &TableVersion, to: &TableVersion) -> Result<Value, String> {
    let migration = Migration::between(from, to).map_err(|e| {
        format!(
            "cannot carry v{} forward to v{}: {e}",
            from.version, to.version
        )
    })?;
    let path = env.data_dir.join(&env.input);
    let file = File::open(&path).map_err(|e| format!("cannot read {}: {e}", env.input))?;
    let mut rows = Rows::create(&env.data_dir, &env.data_ref)?;
    let mut errors = Rows::create(&env.data_dir, &env.errors_ref)?;
    for line in BufReader::new(file).lines() {
        let line = line.map_err(|e| format!("cannot read {}: {e}", env.input))?;
        let Ok(Value::Object(row)) = serde_json::from_str::<Value>(&line) else {
            errors.push(&json!({ "record": line, "error": "not a JSON object" }))?;
            continue;
        };
        let carried: Map<String, Value> = migration.apply(row, to);
        // Defaults and casts are checked again: a carried row must fit the new schema too.
        match conform(&Value::Object(carried.clone()), to) {
            Ok(_) => rows.push(&Value::Object(carried))?,
            Err(why) => errors.push(&json!({ "record": carried, "error": why }))?,
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
    fn create(data_dir: &Path, r: &str) -> Result<Rows, String> {
        let path = data_dir.join(r);
        let fail = |e: std::io::Error| format!("cannot write {r}: {e}");
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

    fn push(&mut self, row: &Value) -> Result<(), String> {
        serde_json::to_writer(&mut self.out, row).map_err(|e| e.to_string())?;
        self.out.write_all(b"\n").map_err(|e| e.to_string())?;
        self.count += 1;
        Ok(())
    }

    fn finish(self) -> Result<u64, String> {
        let fail = |e: std::io::Error| format!("cannot write {}: {e}", self.path.display());
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
