//! What the two stores share: validating a batch, deriving its projection writes (the count
//! projections included), and reading rows back. Each backend supplies only its SQL and its
//! connection: the statements of an append behind [`AppendTx`], the typed getters of its rows
//! behind [`Columns`].
//!
//! Deciding *what* an event writes lives here once, so the SQLite and PostgreSQL logs cannot
//! drift apart: which projection row an event inserts or updates, how a claim's release restores
//! the row it replaced, and how `job_counts` and `partition_counts` move. Both backends keep the
//! counts the same way, from Rust, in the events' transaction (`write::CountChanges`): SQLite
//! dropped its count triggers in schema version 3 (a trigger makes SQLite journal every statement
//! on its table), PostgreSQL in version 4, so that one piece of code decides every count.
//!
//! `write` holds the append's side, `read` the reads' (queries, column lists, rows).

mod read;
mod write;

pub(crate) use read::*;
pub(crate) use write::*;
