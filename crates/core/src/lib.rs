//! DataBuild's pure core: what to build, never how.
//!
//! - [`PartitionRef`] names one unit of data and is safe to map onto a data dir.
//! - [`Pattern`] is a ref with typed fields; [`Template`] derives input refs from an output's fields.
//! - [`Graph`] is a validated `databuild.toml`: datasets, jobs, and an index from refs to producers.
//! - [`plan()`] turns requested refs into [`PlannedRun`]s in dependency order.
//! - [`expand_braces`] expands `{a,b}` and `{2020-01-01..2020-01-31}` in command-line refs.
//! - [`render`] draws the job graph as DOT, Mermaid or JSON.
//!
//! Nothing here touches the file system, processes, the network or the clock: the event log's
//! knowledge arrives through [`StateView`], and external probes and config executables through
//! [`Resolver`], both implemented by the outer crates. `clippy.toml` beside this crate's
//! manifest lists what that excludes (files, processes, the network, the clock, the environment,
//! standard streams) and the lints below make any use of them an error.

#![deny(
    clippy::disallowed_methods,
    clippy::disallowed_types,
    clippy::disallowed_macros
)]

pub mod alert;
pub mod braces;
pub mod cadence;
pub mod code;
pub mod env;
pub mod estimate;
pub mod graph;
pub mod pattern;
pub mod plan;
pub mod refs;
pub mod render;
pub mod resolve;
pub mod shape;
pub mod tables;
pub mod template;
pub mod wants;

pub use braces::{
    expand_all, expand_braces, names_a_domain, parse_user_refs, BraceExpansionError, Domains,
    UserRefError, DEFAULT_MAX_REFS, NO_DOMAINS,
};
pub use code::{CodeGlob, CodeGlobError};
pub use env::RunEnv;
pub use graph::{
    is_metric_name, Check, Dataset, Deps, ExecutorConfig, Graph, GraphError, Job, MetricRule,
    OpenLineageGraphConfig, Producer, SlurmConfig, RESOURCE_METRICS, TABLE_JOB_COMMAND,
};
pub use pattern::{FieldType, Pattern, PatternError};
pub use plan::{
    config_change, plan, resolve_alias, BuildReason, BuiltWith, ConfigInput, ConfigResponseError,
    DepKind, JobConfig, KnownState, NothingBuilt, Plan, PlanError, PlanRequest, PlannedRun,
    Resolver, StaleReason, StateError, StateView,
};
pub use refs::{PartitionRef, RefError};
pub use resolve::{ConfigWithheld, ResolveError};
pub use tables::{
    BodyFormat, Column, GenericSignature, HashAlgorithm, Idempotency, IdempotencyKey, Migration,
    RecordError, SignatureEncoding, SignatureScheme, Source, SourceKind, SourceSettingError, Table,
    TableError, TableVersion,
};
pub use template::{Template, TemplateError};
