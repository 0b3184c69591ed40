//! Checks: data quality that decides what is live.

pub mod rules;
