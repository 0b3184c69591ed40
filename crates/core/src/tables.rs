//! Sources and versioned tables: the schema side, with no I/O.
//!
//! A source receives raw records from outside (webhooks, dropped files) into one partition per
//! arrival day, `source/{name}/date={date}`, kept for its retention. A table reads a source under a
//! schema version: each version builds `{table}/v{N}/date={date}` (the rows that fit) and
//! `{table}/v{N}/errors/date={date}` (the rows that don't, with why). When a day's raw data has
//! expired, a version is carried forward from the previous one through a [`Migration`], so no
//! history is lost. `{table}/date={date}` is the table's alias: it reads as the promoted version.

use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::{Map, Value};

use crate::pattern::{parse_date, Pattern};

/// Where a source's data comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SourceKind {
    /// `POST /api/v1/webhooks/{source}`.
    Webhook,
    /// Files dropped into this folder (relative to the graph file) are ingested and removed.
    Directory { path: String },
}

/// How a request body or a dropped file splits into records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyFormat {
    /// One JSON object.
    Json,
    /// A JSON array of objects.
    JsonArray,
    /// Lines of text; each non-empty line is the record `{"text": line}`.
    Text,
    /// JSON lines (NDJSON): each non-empty line is one JSON object.
    Jsonl,
}

impl BodyFormat {
    pub fn parse(s: &str) -> Option<BodyFormat> {
        match s {
            "json" => Some(BodyFormat::Json),
            "json_array" => Some(BodyFormat::JsonArray),
            "text" => Some(BodyFormat::Text),
            "jsonl" => Some(BodyFormat::Jsonl),
            _ => None,
        }
    }

    /// The name `body_format` takes in the graph file.
    pub fn name(self) -> &'static str {
        match self {
            BodyFormat::Json => "json",
            BodyFormat::JsonArray => "json_array",
            BodyFormat::Text => "text",
            BodyFormat::Jsonl => "jsonl",
        }
    }

    /// Splits a body into records, or says why it is not of this format.
    pub fn records(self, body: &[u8]) -> Result<Vec<Value>, RecordError> {
        let text = std::str::from_utf8(body).map_err(|_| RecordError::NotUtf8)?;
        match self {
            BodyFormat::Json => match serde_json::from_str::<Value>(text) {
                Ok(v @ Value::Object(_)) => Ok(vec![v]),
                Ok(_) => Err(RecordError::NotAnObject),
                Err(e) => Err(RecordError::NotJsonObject(e.to_string())),
            },
            BodyFormat::JsonArray => match serde_json::from_str::<Value>(text) {
                Ok(Value::Array(items)) => {
                    if let Some(i) = items.iter().position(|v| !v.is_object()) {
                        return Err(RecordError::ElementNotAnObject(i));
                    }
                    Ok(items)
                }
                Ok(_) => Err(RecordError::NotAnArray),
                Err(e) => Err(RecordError::NotJsonArray(e.to_string())),
            },
            BodyFormat::Text => Ok(text
                .lines()
                .filter(|l| !l.trim().is_empty())
                .map(|l| Value::Object(Map::from_iter([("text".into(), l.into())])))
                .collect()),
            // All or nothing: a body with one bad line is refused whole, naming the line, so a
            // sender that fixes and resends it stores each record once.
            BodyFormat::Jsonl => text
                .lines()
                .enumerate()
                .filter(|(_, l)| !l.trim().is_empty())
                .map(|(i, l)| match serde_json::from_str::<Value>(l) {
                    Ok(v @ Value::Object(_)) => Ok(v),
                    Ok(_) => Err(RecordError::LineNotAnObject { line: i + 1 }),
                    Err(e) => Err(RecordError::LineNotJson {
                        line: i + 1,
                        cause: e.to_string(),
                    }),
                })
                .collect(),
        }
    }
}

/// How a webhook sender signs its bodies: an HMAC of the body (and, for some schemes, a
/// timestamp) under the secret named by `secret_env`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SignatureScheme {
    /// `X-DataBuild-Signature: sha256=<hex HMAC-SHA256 of the body>` (the default).
    DataBuild,
    /// GitHub: `X-Hub-Signature-256: sha256=<hex HMAC-SHA256 of the body>`.
    GitHub,
    /// Stripe: `Stripe-Signature: t=<unix time>,v1=<hex HMAC-SHA256 of "t.body">`.
    Stripe,
    /// Slack: `X-Slack-Signature: v0=<hex HMAC-SHA256 of "v0:timestamp:body">`, the timestamp
    /// in `X-Slack-Request-Timestamp`.
    Slack,
    /// Any other sender that signs the body alone.
    Generic(GenericSignature),
}

/// `signature = { header = "X-Signature", prefix = "sha1=", algorithm = "sha1", encoding = "base64" }`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GenericSignature {
    pub header: String,
    /// What comes before the signature in the header's value (may be empty).
    pub prefix: String,
    pub algorithm: HashAlgorithm,
    pub encoding: SignatureEncoding,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HashAlgorithm {
    Sha256,
    Sha1,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureEncoding {
    Hex,
    Base64,
}

impl SignatureScheme {
    /// The scheme named by `signature = "..."`.
    pub fn named(name: &str) -> Result<SignatureScheme, SourceSettingError> {
        Ok(match name {
            "databuild" => SignatureScheme::DataBuild,
            "github" => SignatureScheme::GitHub,
            "stripe" => SignatureScheme::Stripe,
            "slack" => SignatureScheme::Slack,
            other => return Err(SourceSettingError::UnknownScheme(other.to_string())),
        })
    }

    /// A generic scheme from the keys of `signature = { ... }`.
    pub fn generic(
        header: Option<&str>,
        prefix: Option<&str>,
        algorithm: Option<&str>,
        encoding: Option<&str>,
    ) -> Result<SignatureScheme, SourceSettingError> {
        let header = header
            .filter(|h| !h.trim().is_empty())
            .ok_or(SourceSettingError::NoSignatureHeader)?;
        let algorithm = match algorithm.unwrap_or("sha256") {
            "sha256" => HashAlgorithm::Sha256,
            "sha1" => HashAlgorithm::Sha1,
            other => return Err(SourceSettingError::Algorithm(other.to_string())),
        };
        let encoding = match encoding.unwrap_or("hex") {
            "hex" => SignatureEncoding::Hex,
            "base64" => SignatureEncoding::Base64,
            other => return Err(SourceSettingError::Encoding(other.to_string())),
        };
        Ok(SignatureScheme::Generic(GenericSignature {
            header: header.to_string(),
            prefix: prefix.unwrap_or_default().to_string(),
            algorithm,
            encoding,
        }))
    }

    /// The scheme's name as `sources` shows it.
    pub fn name(&self) -> &'static str {
        match self {
            SignatureScheme::DataBuild => "databuild",
            SignatureScheme::GitHub => "github",
            SignatureScheme::Stripe => "stripe",
            SignatureScheme::Slack => "slack",
            SignatureScheme::Generic(_) => "generic",
        }
    }
}

/// Where a delivery's idempotency key is: a request header (one key for the whole delivery) or
/// a field of each record (one key a record).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdempotencyKey {
    Header(String),
    Field(String),
}

/// `idempotency = { header = "Idempotency-Key", window = "24h" }` (or `field = "id"`): a
/// delivery, or a record, whose key was stored within the window is acknowledged and not stored
/// again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idempotency {
    pub key: IdempotencyKey,
    pub window: Duration,
}

/// A source setting that cannot be used (messages name the setting and say what to write).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SourceSettingError {
    #[error("`signature = \"{0}\"` is not a signature scheme; use \"databuild\" (the default), \"github\", \"stripe\", \"slack\", or a table like {{ header = \"X-Signature\", prefix = \"sha256=\", algorithm = \"sha256\", encoding = \"hex\" }}")]
    UnknownScheme(String),
    #[error(
        "`signature = {{ ... }}` needs `header`, the request header that carries the signature"
    )]
    NoSignatureHeader,
    #[error("`signature.algorithm = \"{0}\"` is not supported; use \"sha256\" or \"sha1\"")]
    Algorithm(String),
    #[error("`signature.encoding = \"{0}\"` is not supported; use \"hex\" or \"base64\"")]
    Encoding(String),
    #[error("`signature` is set but `secret_env` is not; name the environment variable holding the signing secret (`secret_env = \"MY_SECRET\"`)")]
    SignatureWithoutSecret,
    #[error("`{setting} = \"{text}\"` is not a duration ({cause}); write it like \"{example}\"")]
    NotADuration {
        setting: &'static str,
        text: String,
        cause: humantime::DurationError,
        example: &'static str,
    },
    #[error("`idempotency` needs exactly one of `header` (a request header, like \"Idempotency-Key\") or `field` (a field of each record, like \"id\")")]
    IdempotencyKey,
    #[error(
        "`{0}` is for webhook sources; a dropped file is ingested once by its name and content"
    )]
    WebhookOnly(&'static str),
    #[error("`include_headers` names `{0}`, which is not an HTTP header name")]
    HeaderName(String),
}

/// Parses a duration setting such as `signature_tolerance = "5m"`.
pub fn parse_duration_setting(
    setting: &'static str,
    text: &str,
    example: &'static str,
) -> Result<Duration, SourceSettingError> {
    humantime::parse_duration(text).map_err(|cause| SourceSettingError::NotADuration {
        setting,
        text: text.to_string(),
        cause,
        example,
    })
}

#[derive(Debug, Clone)]
pub struct Source {
    pub name: String,
    pub kind: SourceKind,
    /// How many full days a raw partition stays available once sealed (see [`Source::is_expired`]).
    pub retention_days: u32,
    pub body_format: BodyFormat,
    /// The environment variable holding the HMAC-SHA256 key webhook bodies are signed with.
    pub secret_env: Option<String>,
    pub max_body: usize,
    /// Webhook requests accepted per second (a burst of twice as many); more get 429.
    pub rate_limit: u32,
    /// How signed bodies are signed (when `secret_env` is set).
    pub signature: SignatureScheme,
    /// How far a signed timestamp (Stripe, Slack) may be from the service's clock.
    pub signature_tolerance: Duration,
    pub idempotency: Option<Idempotency>,
    /// Request headers stored with each record, under `_headers`.
    pub include_headers: Vec<String>,
}

impl Source {
    /// A source with the default settings of everything but its name, kind and retention.
    pub fn new(name: &str, kind: SourceKind, retention_days: u32) -> Source {
        Source {
            name: name.to_string(),
            kind,
            retention_days,
            body_format: BodyFormat::Json,
            secret_env: None,
            max_body: 1024 * 1024,
            rate_limit: 100,
            signature: SignatureScheme::DataBuild,
            signature_tolerance: Duration::from_secs(300),
            idempotency: None,
            include_headers: Vec::new(),
        }
    }
}

impl Source {
    pub fn partition_ref(&self, date: &str) -> String {
        format!("source/{}/date={date}", self.name)
    }

    pub fn pattern(&self) -> String {
        format!("source/{}/date={{date:date}}", self.name)
    }

    /// Is the raw partition of `date` past retention on `today`?
    ///
    /// A day D ends at midnight and is sealed on D+1; `retention = "Nd"` then keeps it for N full
    /// days, D+1 through D+N, and it expires on D+N+1. So a day is never expired by the seal that
    /// seals it: with `1d`, 2025-03-01 is sealed and available all of 2025-03-02 and expires on
    /// 2025-03-03.
    pub fn is_expired(&self, date: &str, today: &str) -> bool {
        match (parse_date(date), parse_date(today)) {
            (Some(d), Some(t)) => (t - d).num_days() > i64::from(self.retention_days),
            _ => false,
        }
    }
}

/// A column type; `nullable` comes from a `?` suffix.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Int,
    Float,
    Str,
    Bool,
    Date,
}

impl ColumnType {
    fn parse(s: &str) -> Option<ColumnType> {
        Some(match s {
            "int" => ColumnType::Int,
            "float" => ColumnType::Float,
            "str" => ColumnType::Str,
            "bool" => ColumnType::Bool,
            "date" => ColumnType::Date,
            _ => return None,
        })
    }

    pub fn name(self) -> &'static str {
        match self {
            ColumnType::Int => "int",
            ColumnType::Float => "float",
            ColumnType::Str => "str",
            ColumnType::Bool => "bool",
            ColumnType::Date => "date",
        }
    }

    /// Does a JSON value have this type? (Integers count as floats.)
    fn accepts(self, v: &Value) -> bool {
        match self {
            ColumnType::Int => v.is_i64() || v.is_u64(),
            ColumnType::Float => v.is_number(),
            ColumnType::Str => v.is_string(),
            ColumnType::Bool => v.is_boolean(),
            ColumnType::Date => v.as_str().is_some_and(|s| parse_date(s).is_some()),
        }
    }

    /// Can every value of `self` be carried into `to` without loss?
    fn widens_to(self, to: ColumnType) -> bool {
        self == to
            || matches!((self, to), (ColumnType::Int, ColumnType::Float))
            || to == ColumnType::Str
    }

    fn cast(self, to: ColumnType, v: Value) -> Value {
        match (self, to) {
            (a, b) if a == b => v,
            (_, ColumnType::Float) => v.as_f64().map_or(v, Value::from),
            (_, ColumnType::Str) => match v {
                Value::String(_) => v,
                other => Value::String(other.to_string()),
            },
            _ => v,
        }
    }
}

/// A table's or a source's declaration that cannot be used. Messages name the column or the
/// setting; the graph file's checks prefix them with the table or source. A cause shown in a
/// message is a plain field, not a `source`, which `{:#}` would print twice.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TableError {
    #[error("column `{name}` has type `{spec}`; use int, float, str, bool or date, with `?` for nullable")]
    ColumnType { name: String, spec: String },
    #[error("column `{column}` changes from {from} to {to}, which is not a widening cast (int → float, anything → str)")]
    NotWidening {
        column: String,
        from: String,
        to: String,
    },
    #[error("column `{column}` becomes non-null ({from} → {to}); give it a default for the nulls of v{version}")]
    BecomesNonNull {
        column: String,
        from: String,
        to: String,
        /// The version whose nulls need the default.
        version: u32,
    },
    #[error("column `{column}` is new in v{version} and not nullable; give it a default (`defaults = {{ {column} = ... }}`) or make it `{ty}?`")]
    NewNotNullable {
        column: String,
        version: u32,
        ty: &'static str,
    },
    #[error("`retention = \"{text}\"` is not a duration ({cause}); write it like \"7d\"")]
    RetentionNotADuration {
        text: String,
        cause: humantime::DurationError,
    },
    #[error("`retention = \"{0}\"` must be at least a day")]
    RetentionUnderADay(String),
    #[error("`retention = \"{0}\"` is too long")]
    RetentionTooLong(String),
    #[error("`{0}` is not a size; write it like \"1MiB\" or \"64KiB\"")]
    NotASize(String),
    #[error("`{0}` is not a size unit; use B, KiB, MiB or GiB")]
    SizeUnit(String),
}

/// Why a body or a record does not fit: a webhook's answer, a dropped file's `.error`, or a
/// quarantined record's `error`.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum RecordError {
    #[error("the body is not UTF-8")]
    NotUtf8,
    #[error("the body is JSON but not an object")]
    NotAnObject,
    /// The parser's complaint.
    #[error("the body is not a JSON object: {0}")]
    NotJsonObject(String),
    #[error("element {0} of the array is not an object")]
    ElementNotAnObject(usize),
    #[error("the body is JSON but not an array")]
    NotAnArray,
    #[error("the body is not a JSON array: {0}")]
    NotJsonArray(String),
    #[error("line {line} is JSON but not an object")]
    LineNotAnObject { line: usize },
    #[error("line {line} is not a JSON object: {cause}")]
    LineNotJson { line: usize, cause: String },
    #[error("the record is not a JSON object")]
    RecordNotAnObject,
    #[error("column `{0}` is missing or null")]
    Missing(String),
    #[error("column `{column}` should be {ty}, not {value}")]
    WrongType {
        column: String,
        ty: &'static str,
        value: Value,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Column {
    pub name: String,
    pub ty: ColumnType,
    pub nullable: bool,
}

impl Column {
    /// Parses `int`, `str?`...
    pub fn parse(name: &str, spec: &str) -> Result<Column, TableError> {
        let (base, nullable) = match spec.strip_suffix('?') {
            Some(b) => (b, true),
            None => (spec, false),
        };
        let ty = ColumnType::parse(base).ok_or_else(|| TableError::ColumnType {
            name: name.to_string(),
            spec: spec.to_string(),
        })?;
        Ok(Column {
            name: name.to_string(),
            ty,
            nullable,
        })
    }

    pub fn spec(&self) -> String {
        format!("{}{}", self.ty.name(), if self.nullable { "?" } else { "" })
    }
}

/// One schema version of a table.
#[derive(Debug, Clone)]
pub struct TableVersion {
    pub version: u32,
    pub columns: Vec<Column>,
    /// Values for columns a carried-forward row lacks.
    pub defaults: BTreeMap<String, Value>,
    /// The job (index in `Graph::jobs`) that builds this version.
    pub job: usize,
}

#[derive(Debug, Clone)]
pub struct Table {
    pub name: String,
    /// Index in `Graph::sources`.
    pub source: usize,
    /// Ascending by version.
    pub versions: Vec<TableVersion>,
    /// `{table}/date={date:date}`.
    pub alias: Pattern,
}

impl Table {
    pub fn version(&self, v: u32) -> Option<&TableVersion> {
        self.versions.iter().find(|t| t.version == v)
    }

    /// The version the alias reads until one is promoted: the first.
    pub fn initial_version(&self) -> u32 {
        self.versions[0].version
    }

    pub fn previous(&self, v: u32) -> Option<&TableVersion> {
        self.versions.iter().rev().find(|t| t.version < v)
    }

    pub fn data_ref(&self, version: u32, date: &str) -> String {
        format!("{}/v{version}/date={date}", self.name)
    }

    pub fn errors_ref(&self, version: u32, date: &str) -> String {
        format!("{}/v{version}/errors/date={date}", self.name)
    }
}

/// Checks a record against a schema version: the row keeps the version's columns, each value
/// written in its column's type (an integer of a `float` column as a float); a missing or null
/// field takes the column's declared default, if it has one.
pub fn conform(record: &Value, version: &TableVersion) -> Result<Map<String, Value>, RecordError> {
    conform_columns(record, &version.columns, &version.defaults)
}

fn conform_columns(
    record: &Value,
    columns: &[Column],
    defaults: &BTreeMap<String, Value>,
) -> Result<Map<String, Value>, RecordError> {
    let Value::Object(fields) = record else {
        return Err(RecordError::RecordNotAnObject);
    };
    let mut row = Map::with_capacity(columns.len());
    for c in columns {
        let mut v = fields.get(&c.name).cloned().unwrap_or(Value::Null);
        if v.is_null() {
            v = defaults.get(&c.name).cloned().unwrap_or(Value::Null);
        }
        if v.is_null() {
            if !c.nullable {
                return Err(RecordError::Missing(c.name.clone()));
            }
        } else if !c.ty.accepts(&v) {
            return Err(RecordError::WrongType {
                column: c.name.clone(),
                ty: c.ty.name(),
                value: v,
            });
        } else if c.ty == ColumnType::Float && !v.is_f64() {
            // One column, one JSON type on every row: an integer in a float column is written
            // as a float (`-4` as `-4.0`), as a row carried forward through `int → float` is.
            v = v.as_f64().map_or(v, Value::from);
        }
        row.insert(c.name.clone(), v);
    }
    Ok(row)
}

/// How a row of one version becomes a row of the next.
#[derive(Debug, Clone, PartialEq)]
pub struct Migration {
    steps: Vec<(String, Step)>,
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Keep,
    Cast(ColumnType, ColumnType),
    Fill(Value),
}

impl Migration {
    /// The migration from `from` to `to`, or an error naming the column that cannot be carried.
    pub fn between(from: &TableVersion, to: &TableVersion) -> Result<Migration, TableError> {
        let mut steps = Vec::with_capacity(to.columns.len());
        for c in &to.columns {
            let default = to.defaults.get(&c.name);
            let step = match from.columns.iter().find(|o| o.name == c.name) {
                Some(old) if !old.ty.widens_to(c.ty) => {
                    return Err(TableError::NotWidening {
                        column: c.name.clone(),
                        from: old.spec(),
                        to: c.spec(),
                    })
                }
                Some(old) if old.nullable && !c.nullable && default.is_none() => {
                    return Err(TableError::BecomesNonNull {
                        column: c.name.clone(),
                        from: old.spec(),
                        to: c.spec(),
                        version: from.version,
                    })
                }
                Some(old) if old.ty == c.ty => Step::Keep,
                Some(old) => Step::Cast(old.ty, c.ty),
                None => match default {
                    Some(v) => Step::Fill(v.clone()),
                    None if c.nullable => Step::Fill(Value::Null),
                    None => {
                        return Err(TableError::NewNotNullable {
                            column: c.name.clone(),
                            version: to.version,
                            ty: c.ty.name(),
                        })
                    }
                },
            };
            steps.push((c.name.clone(), step));
        }
        Ok(Migration { steps })
    }

    /// Carries one row forward; nulls of a column that became non-null take its default.
    pub fn apply(&self, mut row: Map<String, Value>, to: &TableVersion) -> Map<String, Value> {
        let mut out = Map::with_capacity(self.steps.len());
        for (name, step) in &self.steps {
            let v = match step {
                Step::Keep => row.remove(name).unwrap_or(Value::Null),
                Step::Cast(a, b) => match row.remove(name).unwrap_or(Value::Null) {
                    Value::Null => Value::Null,
                    v => a.cast(*b, v),
                },
                Step::Fill(v) => v.clone(),
            };
            let v = match (v, to.defaults.get(name)) {
                (Value::Null, Some(d)) => d.clone(),
                (v, _) => v,
            };
            out.insert(name.clone(), v);
        }
        out
    }
}

/// Does a value fit a column? (For checking declared defaults.)
pub fn fits(column: &Column, v: &Value) -> bool {
    conform_columns(
        &Value::Object(Map::from_iter([(column.name.clone(), v.clone())])),
        std::slice::from_ref(column),
        &BTreeMap::new(),
    )
    .is_ok()
}

/// Parses a retention such as `7d` or `36h` into whole days (at least one).
pub fn parse_retention(s: &str) -> Result<u32, TableError> {
    let d: Duration =
        humantime::parse_duration(s).map_err(|cause| TableError::RetentionNotADuration {
            text: s.to_string(),
            cause,
        })?;
    let days = d.as_secs().div_ceil(86_400);
    if days == 0 {
        return Err(TableError::RetentionUnderADay(s.to_string()));
    }
    u32::try_from(days).map_err(|_| TableError::RetentionTooLong(s.to_string()))
}

/// Parses a size such as `1MiB`, `512KiB`, `2000` (bytes).
pub fn parse_size(s: &str) -> Result<usize, TableError> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: usize = num
        .parse()
        .map_err(|_| TableError::NotASize(s.to_string()))?;
    let factor = match unit.trim() {
        "" | "B" => 1,
        "KiB" | "KB" | "k" => 1024,
        "MiB" | "MB" | "M" => 1024 * 1024,
        "GiB" | "GB" | "G" => 1024 * 1024 * 1024,
        other => return Err(TableError::SizeUnit(other.to_string())),
    };
    Ok(n * factor)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn version(v: u32, cols: &[(&str, &str)], defaults: Value) -> TableVersion {
        TableVersion {
            version: v,
            columns: cols
                .iter()
                .map(|(n, s)| Column::parse(n, s).unwrap())
                .collect(),
            defaults: serde_json::from_value(defaults).unwrap(),
            job: 0,
        }
    }

    #[test]
    fn records_conform_or_say_why_not() {
        let v = version(
            1,
            &[
                ("id", "int"),
                ("amount", "float"),
                ("note", "str?"),
                ("day", "date"),
            ],
            json!({}),
        );
        let row = conform(
            &json!({"id": 1, "amount": 2, "day": "2026-01-02", "extra": true}),
            &v,
        )
        .unwrap();
        assert_eq!(
            Value::Object(row),
            json!({"id": 1, "amount": 2.0, "note": null, "day": "2026-01-02"})
        );
        assert!(row_amount_is_f64(
            &v,
            json!({"id": 1, "amount": -4, "day": "2026-01-02"})
        ));
        let bad = [
            (
                json!({"amount": 1.0, "day": "2026-01-02"}),
                "column `id` is missing or null",
            ),
            (
                json!({"id": "x", "amount": 1.0, "day": "2026-01-02"}),
                "column `id` should be int, not \"x\"",
            ),
            (
                json!({"id": 1, "amount": 1.0, "day": "2026-02-30"}),
                "column `day` should be date",
            ),
            (json!([1]), "not a JSON object"),
        ];
        for (record, why) in bad {
            let err = conform(&record, &v).unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
        }
    }

    /// Is the `amount` of a conformed row a JSON float (`-4.0`, not `-4`)?
    fn row_amount_is_f64(v: &TableVersion, record: Value) -> bool {
        let row = conform(&record, v).unwrap();
        row["amount"].is_f64() && serde_json::to_string(&row["amount"]).unwrap().contains('.')
    }

    #[test]
    fn migrations_add_drop_and_widen() {
        let v1 = version(
            1,
            &[("id", "int"), ("amount", "int"), ("gone", "str")],
            json!({}),
        );
        let v2 = version(
            2,
            &[
                ("id", "int"),
                ("amount", "float"),
                ("coupon", "str?"),
                ("channel", "str"),
            ],
            json!({"channel": "web"}),
        );
        let m = Migration::between(&v1, &v2).unwrap();
        let row = conform(&json!({"id": 7, "amount": 3, "gone": "x"}), &v1).unwrap();
        let carried = m.apply(row, &v2);
        assert_eq!(
            Value::Object(carried),
            json!({"id": 7, "amount": 3.0, "coupon": null, "channel": "web"})
        );
    }

    #[test]
    fn incompatible_changes_name_the_column() {
        let v1 = version(1, &[("amount", "float"), ("note", "str?")], json!({}));
        let cases = [
            (
                version(2, &[("amount", "int")], json!({})),
                "column `amount` changes from float to int",
            ),
            (
                version(2, &[("amount", "float"), ("note", "str")], json!({})),
                "column `note` becomes non-null",
            ),
            (
                version(2, &[("amount", "float"), ("region", "str")], json!({})),
                "column `region` is new in v2 and not nullable",
            ),
        ];
        for (v2, why) in cases {
            let err = Migration::between(&v1, &v2).unwrap_err();
            assert!(err.to_string().contains(why), "{err}");
        }
    }

    #[test]
    fn body_formats_split_records() {
        assert_eq!(BodyFormat::Json.records(br#"{"a":1}"#).unwrap().len(), 1);
        assert_eq!(
            BodyFormat::JsonArray
                .records(br#"[{"a":1},{"a":2}]"#)
                .unwrap()
                .len(),
            2
        );
        assert_eq!(
            BodyFormat::Text.records(b"x\n\ny\n").unwrap(),
            vec![json!({"text": "x"}), json!({"text": "y"})]
        );
        assert!(BodyFormat::Json
            .records(b"[1]")
            .unwrap_err()
            .to_string()
            .contains("not an object"));
        assert!(BodyFormat::JsonArray
            .records(b"[1]")
            .unwrap_err()
            .to_string()
            .contains("element 0"));
        assert_eq!(
            BodyFormat::Jsonl
                .records(b"{\"a\":1}\n\n  \n{\"a\":2}\r\n")
                .unwrap(),
            vec![json!({"a": 1}), json!({"a": 2})]
        );
        assert_eq!(
            BodyFormat::Jsonl.records(b"{\"a\":1}\n[2]\n").unwrap_err(),
            RecordError::LineNotAnObject { line: 2 }
        );
        assert!(BodyFormat::Jsonl
            .records(b"{\"a\":1}\n{\"a\":\n")
            .unwrap_err()
            .to_string()
            .starts_with("line 2 is not a JSON object: "));
        assert!(BodyFormat::Json.records(b"{").is_err());
        assert!(BodyFormat::Text.records(&[0xff]).is_err());
    }

    #[test]
    fn retention_counts_days() {
        let s = Source::new("o", SourceKind::Webhook, parse_retention("7d").unwrap());
        // 7 full days after each day ends: 2026-01-03 is available 01-04 through 01-10.
        assert!(!s.is_expired("2026-01-03", "2026-01-10"));
        assert!(s.is_expired("2026-01-02", "2026-01-10"));
        let one_day = Source {
            retention_days: 1,
            ..s.clone()
        };
        assert!(!one_day.is_expired("2025-03-01", "2025-03-02"));
        assert!(one_day.is_expired("2025-03-01", "2025-03-03"));
        assert_eq!(parse_size("1MiB").unwrap(), 1 << 20);
        assert!(parse_retention("0s").is_err());
    }
}
