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

/// On a page of what only prod has (wants, sources), in another environment: says whose it shows.
pub(super) fn prod_only_note(env: &crate::environment::Env, what: &str) -> Markup {
    html! {
        @if !env.is_prod() {
            p.muted.env-note { (what) " are prod's: this page shows prod's, not " (env.name()) "'s." }
        }
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::super::testing::job_run;
    use super::*;

    #[test]
    fn a_cell_is_its_text_nothing_for_null_and_json_otherwise() {
        assert_eq!(cell_text(&json!("a \"b\"")), "a \"b\"");
        assert_eq!(cell_text(&Value::Null), "");
        assert_eq!(cell_text(&json!(42)), "42");
        assert_eq!(cell_text(&json!(1.5)), "1.5");
        assert_eq!(cell_text(&json!(true)), "true");
        assert_eq!(cell_text(&json!([1, "x"])), "[1,\"x\"]");
    }

    #[test]
    fn counts_are_grouped_by_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(1_000), "1,000");
        assert_eq!(thousands(12_345), "12,345");
        assert_eq!(thousands(1_234_567), "1,234,567");
        assert_eq!(thousands(u64::MAX), "18,446,744,073,709,551,615");
    }

    #[test]
    fn an_id_shows_its_short_form_and_carries_the_whole_id() {
        let id = "01a24d4b-d5d5-7336-a716-53d3a807ffe7";
        assert_eq!(
            build_link(id).into_string(),
            format!(
                "<span class=\"id\"><a href=\"/builds/{id}\" title=\"{id}\"><code>a807ffe7</code></a>\
                 <button class=\"copy\" type=\"button\" data-copy=\"{id}\" title=\"copy {id}\">copy</button></span>"
            )
        );
        assert!(run_link(id).into_string().contains("href=\"/runs/01a24d4b"));
        assert!(id_link("/wants/", "w1")
            .into_string()
            .contains("<code>w1</code>"));
    }

    #[test]
    fn a_partition_link_encodes_its_ref_as_one_path_segment() {
        assert_eq!(
            partition_link("reviews/date=2020-01-01 x").into_string(),
            "<a href=\"/partitions/reviews%2Fdate=2020-01-01%20x\"><code>reviews/date=2020-01-01 x</code></a>"
        );
    }

    #[test]
    fn a_badge_is_coloured_by_its_status() {
        assert_eq!(
            badge("failed").into_string(),
            "<span class=\"badge\" style=\"background:#d64545\">failed</span>"
        );
        assert!(badge("live").into_string().contains("#2e9e5b"));
    }

    #[test]
    fn a_run_took_its_seconds_once_it_has_ended() {
        let mut run = job_run("r1", "job", "running", &[], &[]);
        run.started_at_ns = Some(1_000_000_000);
        assert_eq!(took(&run), "-");
        run.ended_at_ns = Some(2_500_000_000);
        assert_eq!(took(&run), "1.50 s");
        assert_eq!(at(&None), "-");
        assert_eq!(
            at(&Some("2026-01-01T00:00:00Z".into())),
            "2026-01-01T00:00:00Z"
        );
        assert_eq!(or_empty(&None), "");
        assert_eq!(or_empty(&Some("why".into())), "why");
    }
}
