//! The small pieces every page draws: status badges, ids as short copyable links, partition
//! links, counts and times as people read them.

use databuild_exec::answers::JobRun;
use maud::{html, Markup};
use serde_json::Value;

use crate::svg;

/// A SQL result's cell as text: a string as it is, null as nothing, anything else as JSON.
pub(super) fn cell_text(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

/// A status as a coloured pill, in the colour the drawings give it.
pub(super) fn badge(status: &str) -> Markup {
    html! { span.badge style={ "background:" (svg::colour(status)) } { (status) } }
}

/// How long a run took, in seconds, or `-` while it has not ended.
pub(super) fn took(run: &JobRun) -> String {
    run.duration_ms()
        .map_or_else(|| "-".into(), |ms| format!("{:.2} s", ms / 1e3))
}

/// An answer's optional time, or `-`.
pub(super) fn at(t: &Option<String>) -> &str {
    t.as_deref().unwrap_or("-")
}

/// An optional text, or nothing.
pub(super) fn or_empty(t: &Option<String>) -> &str {
    t.as_deref().unwrap_or_default()
}

/// An id's short form (its last characters: those differ between runs of a build).
pub(super) fn short(id: &str) -> &str {
    databuild_log::short_id(id)
}

pub(super) use databuild_core::refs::encode_segment as enc;

/// An id as pages show it: its short form (the last characters, which differ between ids minted
/// together), linked, the full id on hover and a button copying it.
pub(super) fn id_link(path: &str, id: &str) -> Markup {
    html! {
        span.id { a href={ (path) (id) } title=(id) { code { (short(id)) } }
            button.copy type="button" data-copy=(id) title={ "copy " (id) } { "copy" } }
    }
}

pub(super) fn build_link(id: &str) -> Markup {
    id_link("/builds/", id)
}

pub(super) fn run_link(id: &str) -> Markup {
    id_link("/runs/", id)
}

pub(super) fn partition_link(r: &str) -> Markup {
    html! { a href={ "/partitions/" (enc(r)) } { code { (r) } } }
}

/// A count with thousands separated, as people read it.
pub(super) fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}
