//! Partitions: the list (by glob and status, a page at a time) and one partition's page: why it
//! has its status, its checks, lineage, builds and history, with the forms to build or taint it.

use axum::extract::{Path, Query, State};
use axum::response::{IntoResponse, Response};
use axum::Extension;
use databuild_exec::answers::{rfc3339, DerivedStatus};
use databuild_exec::engine::lineage::{Direction, Lineage, LineageNode};
use databuild_exec::engine::listing::ListedStatus;
use databuild_log::{PartitionQuery, SqlLimits, Status};
use maud::{html, PreEscaped};
use serde::Deserialize;
use serde_json::Value;

use super::forms::form_auth;
use super::layout::{error_page, layout, page_as};
use super::widgets::{badge, build_link, cell_text, enc, or_empty, partition_link, run_link};
use super::Shared;
use crate::engine_api;
use crate::environment::Env;
use crate::guard::Role;
use crate::svg;

#[derive(Deserialize)]
pub struct PartitionsQuery {
    pattern: Option<String>,
    status: Option<String>,
    after: Option<String>,
}

pub(super) async fn partitions_page(
    env: Env,
    Extension(role): Extension<Role>,
    Query(q): Query<PartitionsQuery>,
) -> Response {
    let status = q.status.clone().filter(|s| !s.is_empty());
    let pattern = q.pattern.clone().filter(|s| !s.is_empty());
    let listed = match status.as_deref().map(ListedStatus::parse).transpose() {
        Ok(listed) => listed,
        Err(e) => return error_page(crate::error::AppError::bad_request(e.to_string())),
    };
    let query = PartitionQuery {
        pattern: pattern.clone(),
        status: listed.map(ListedStatus::recorded),
        limit: 100,
        after: q.after.clone(),
    };
    let page_data = match page_as(&env, role, move |engine| {
        engine_api::partitions(engine, &query, listed)
    })
    .await
    {
        Ok(p) => p,
        Err(r) => return r,
    };
    let rows = &page_data.partitions;
    layout("Partitions", html! {
        h1 { "Partitions" }
        form method="get" action="/partitions" {
            input type="text" name="pattern" placeholder="glob, e.g. reviews/*" value=[pattern.as_deref()];
            " " select name="status" { option value="" { "any status" }
                @for st in ListedStatus::TAKEN { option value=(st) selected[status.as_deref() == Some(st.as_str())] { (st) } } }
            " " button type="submit" { "Search" }
        }
        @if rows.is_empty() { p.empty { "No partition matches. Partitions appear here once a run has touched them." } } @else {
            table { tr { th { "Partition" } th { "Status" } th { "Job" } th { "Updated" } }
                @for p in rows { tr { td { (partition_link(&p.partition_ref)) } td { (badge(p.status.as_str()))
                    @if let Some(why) = &p.reason { " " span.muted { (why) } } } td { (or_empty(&p.job)) } td.muted { (p.updated_at) } } }
            }
            @if rows.len() < 100 && page_data.next.is_some() { p.muted { "Freshness is checked for a bounded number of partitions per page; more may follow." } }
            @if let Some(next) = &page_data.next {
                a href={ "/partitions?after=" (enc(next)) "&pattern=" (enc(pattern.as_deref().unwrap_or(""))) "&status=" (status.as_deref().unwrap_or("")) } { "Next page →" }
            }
        }
    }).into_response()
}

pub(super) async fn partition_page(
    State(state): Shared,
    env: Env,
    Extension(role): Extension<Role>,
    Path(r): Path<String>,
) -> Response {
    let st = state.clone();
    let pr = r.clone();
    let data = page_as(&env, role, move |engine| {
        let x = engine_api::explain(engine, &pr)?;
        // Its current instance's lineage, two levels each way (none before it is built).
        let up = engine_api::lineage(engine, &pr, Direction::Upstream, 2, None).ok();
        let down = engine_api::lineage(engine, &pr, Direction::Downstream, 2, None).ok();
        let builds = engine.store.sql(
            // Through the partition's events (indexed by partition), not `request_partitions`,
            // whose key starts with the build.
            &format!("SELECT DISTINCT build_request_id FROM events WHERE partition_ref = '{}' AND build_request_id IS NOT NULL LIMIT 20", pr.replace('\'', "''")),
            SqlLimits::internal(),
        )?;
        // Not live: when it is expected, and why (none when it has no producer to forecast).
        let forecast = (x.status != DerivedStatus::Live)
            .then(|| engine_api::forecast(engine, &pr).ok())
            .flatten();
        Ok((x, up, down, builds, forecast))
    })
    .await;
    let (x, up, down, builds, forecast) = match data {
        Ok(d) => d,
        Err(r) => return r,
    };
    let below: Vec<&LineageNode> = down.iter().flat_map(|d| &d.root.children).collect();
    let picture = lineage_graph(up.as_ref(), down.as_ref());
    layout(&r, html! {
        h1 { code { (r) } " " (badge(x.status.as_str())) }
        ul { @for reason in &x.reasons { li { (reason) } } }
        @if let Some(f) = &forecast {
            h2 { "Forecast" }
            p.forecast { (f.headline()) }
            @if !f.basis.is_empty() { ul.basis { @for step in &f.basis { li { (step.line()) } } } }
        }
        @if !x.code_changes.is_empty() {
            h2 { "Code changed since its run" }
            ul.code { @for c in &x.code_changes { li { code { (c.shown()) } } } }
        }
        @if !x.checks.is_empty() {
            h2 { "Checks" }
            table.checks { tr { th { "Check" } th { "Result" } th { "Blocking" } th { "Message" } th { "Metrics" } }
                @for c in &x.checks { tr {
                    td { (c.name) @if c.inline { span.muted { " (reported by the job)" } } }
                    td { (badge(&c.result)) @if let Some(why) = &c.stale { " " span.muted { "stale: " (why) } } }
                    td { @if c.blocking { "yes" } @else { "no (a warning)" } }
                    td { (or_empty(&c.message)) }
                    td { @if let Some(m) = &c.metrics { code { (m.to_string()) } } }
                } }
            }
        }
        @if let Some(p) = &x.producer { p { "Produced by " (p.kind) " " b { (p.name) } " " code { (p.pattern) } } }
        @if let Some(run) = &x.run { p { "Built by run " (run_link(&run.job_run_id))
            " of build " (build_link(or_empty(&run.build_request_id))) } }
        @if let Some(p) = x.report.as_ref().and_then(|r| r.get("provenance")).and_then(Value::as_str) { p.provenance { "Provenance: " (p) } }
        @for w in &x.wants {
            p.wanted { "Wanted (" (w.status.as_str()) "): " (or_empty(&w.message)) " since " (w.updated_at)
                " · " a href="/wants" { "wants" } }
        }
        form.inline method="post" action="/ui/build" {
            input type="hidden" name="refs" value=(r);
            label { input type="checkbox" name="force" value="true"; " force" } " " (form_auth(&st, role))
            button type="submit" { "Build" }
        }
        " "
        // A taint is confirmed on a page that first says what it would make stale.
        form.inline method="get" action="/taint" {
            input type="hidden" name="ref" value=(r);
            input type="text" name="reason" placeholder="reason"; " "
            button type="submit" { "Taint…" }
        }
        h2 { "Upstream (the inputs of its run)" }
        @if x.inputs.is_empty() { p.empty { "None recorded." } } @else {
            table { @for i in &x.inputs { tr { td { (partition_link(&i.partition_ref)) } td { (badge(i.status.as_str())) } } } }
        }
        @if !x.query_inputs.is_empty() {
            h2 { "Query inputs read (if present; a change of one does not make it stale)" }
            table { @for q in &x.query_inputs { tr {
                td { (partition_link(&q.partition_ref)) }
                td { "read at " code { (q.data_version) } }
                td { (badge(q.status.as_str())) " now" }
            } } }
        }
        h2 { "Downstream (built from its current instance)" }
        @if below.is_empty() { p.empty { "Nothing was built from it yet." } } @else { ul { @for d in &below { li {
            (partition_link(&d.partition_ref)) " by run " (run_link(or_empty(&d.job_run_id)))
            @if !d.current { " " span.muted { "(rebuilt since)" } }
        } } } }
        @if !picture.is_empty() {
            h2 { "Lineage" }
            p.muted { "Its current instance, what it was built from and what was built from it, two levels each way (" code { "databuild lineage" } " goes further); grey: instances rebuilt since." }
            div.graph { (PreEscaped(picture)) }
        }
        @if !x.to_build.is_empty() {
            h2 { "To build it" }
            table { tr { th { "Job" } th { "Outputs" } } @for st in &x.to_build { tr { td { (st.job) } td { @for o in &st.outputs { (partition_link(o)) " " } } } } }
        }
        h2 { "Builds that touched it" }
        ul { @for b in &builds.rows { li { (build_link(&cell_text(&b[0]))) } } }
        h2 { "History" }
        table { tr { th { "#" } th { "Status" } th { "Time" } th { "Message" } }
            @for e in &x.history { tr { td { (e.idx) } td { (badge(e.status.as_str())) } td.muted { (rfc3339(e.timestamp)) } td { (or_empty(&e.message)) } } } }
    }).into_response()
}

/// The lineage of a partition's instance, two trees (upstream, downstream) drawn as one graph:
/// each instance once, edges from what was read to what was built from it.
fn lineage_graph(up: Option<&Lineage>, down: Option<&Lineage>) -> String {
    fn id(n: &LineageNode) -> String {
        let instance = n.job_run_id.as_deref().or(n.data_version.as_deref());
        format!("{}@{}", n.partition_ref, instance.unwrap_or(""))
    }
    fn add(nodes: &mut Vec<svg::GraphNode>, n: &LineageNode) -> usize {
        let key = id(n);
        if let Some(i) = nodes.iter().position(|g| g.id == key) {
            return i;
        }
        let status = match (n.current, n.run_status) {
            (false, _) => "superseded",
            (true, Some(Status::Completed) | None) => "live",
            (true, Some(s)) => s.as_str(),
        };
        nodes.push(svg::GraphNode {
            id: key,
            label: n.partition_ref.clone(),
            status: status.to_string(),
            href: format!("/partitions/{}", enc(&n.partition_ref)),
            depends_on: Vec::new(),
            ..Default::default()
        });
        nodes.len() - 1
    }
    fn walk(nodes: &mut Vec<svg::GraphNode>, n: &LineageNode, upstream: bool) {
        let me = add(nodes, n);
        for c in &n.children {
            let other = add(nodes, c);
            let (reader, read) = if upstream { (me, other) } else { (other, me) };
            let dependency = nodes[read].id.clone();
            if !nodes[reader].depends_on.contains(&dependency) {
                nodes[reader].depends_on.push(dependency);
            }
            walk(nodes, c, upstream);
        }
    }
    let mut nodes = Vec::new();
    for (tree, upstream) in [(up, true), (down, false)] {
        if let Some(t) = tree {
            walk(&mut nodes, &t.root, upstream);
        }
    }
    if nodes.len() < 2 {
        return String::new();
    }
    svg::graph(&nodes)
}

#[cfg(test)]
mod tests {
    use axum::http::StatusCode;
    use serde_json::json;

    use super::super::testing::{answer, open_service, prod, text};
    use super::*;

    fn node(
        r: &str,
        run: Option<&str>,
        version: Option<&str>,
        current: bool,
        children: Vec<Value>,
    ) -> Value {
        json!({ "ref": r, "job_run_id": run, "data_version": version, "current": current,
                "run_status": run.map(|_| "completed"), "children": children })
    }

    fn lineage(direction: &str, root: Value) -> Lineage {
        answer(
            json!({ "direction": direction, "depth": 2, "root": root, "nodes": 0, "history": [] }),
        )
    }

    fn graph_node(id: &str, r: &str, status: &str, depends_on: &[&str]) -> svg::GraphNode {
        svg::GraphNode {
            id: id.into(),
            label: r.into(),
            status: status.into(),
            href: format!("/partitions/{}", enc(r)),
            depends_on: depends_on.iter().map(|d| d.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn the_lineage_is_one_graph_each_instance_once_edges_from_what_was_read() {
        let up = lineage(
            "upstream",
            node(
                "sum/a_b",
                Some("r3"),
                None,
                true,
                vec![
                    node("n/a", Some("r1"), None, true, vec![]),
                    // A source day: its instance is its data version.
                    node("raw/a", None, Some("v7"), true, vec![]),
                ],
            ),
        );
        let down = lineage(
            "downstream",
            node(
                "sum/a_b",
                Some("r3"),
                None,
                true,
                vec![node("report", Some("r4"), None, false, vec![])],
            ),
        );
        let expected = svg::graph(&[
            graph_node("sum/a_b@r3", "sum/a_b", "live", &["n/a@r1", "raw/a@v7"]),
            graph_node("n/a@r1", "n/a", "live", &[]),
            graph_node("raw/a@v7", "raw/a", "live", &[]),
            // Rebuilt since: that instance is superseded.
            graph_node("report@r4", "report", "superseded", &["sum/a_b@r3"]),
        ]);
        assert_eq!(lineage_graph(Some(&up), Some(&down)), expected);
    }

    #[test]
    fn a_partition_read_from_nothing_and_read_by_nothing_draws_no_lineage() {
        let alone = lineage("upstream", node("n/a", Some("r1"), None, true, vec![]));
        assert_eq!(lineage_graph(Some(&alone), None), "");
        assert_eq!(lineage_graph(None, None), "");
    }

    #[test]
    fn a_current_instance_whose_run_did_not_complete_shows_the_runs_status() {
        let mut root = node(
            "sum/a_b",
            Some("r3"),
            None,
            true,
            vec![node("n/a", Some("r1"), None, true, vec![])],
        );
        root["run_status"] = json!("failed");
        let picture = lineage_graph(Some(&lineage("upstream", root)), None);
        let failed = svg::graph(&[
            graph_node("sum/a_b@r3", "sum/a_b", "failed", &["n/a@r1"]),
            graph_node("n/a@r1", "n/a", "live", &[]),
        ]);
        assert_eq!(picture, failed);
    }

    #[tokio::test]
    async fn an_empty_log_lists_no_partition_and_keeps_the_filters_in_the_form() {
        let service = open_service();
        let query = PartitionsQuery {
            pattern: Some("daily/*".into()),
            status: Some("stale".into()),
            after: None,
        };
        let response = partitions_page(prod(&service), Extension(Role::Writer), Query(query)).await;
        assert_eq!(response.status(), StatusCode::OK);
        let html = text(response).await;
        assert!(html.contains("No partition matches."));
        assert!(
            html.contains(r#"name="pattern" placeholder="glob, e.g. reviews/*" value="daily/*""#)
        );
        assert!(html.contains(r#"<option value="stale" selected>stale</option>"#));
        assert!(!html.contains("Next page"));
    }

    #[tokio::test]
    async fn a_partition_never_built_says_so_and_offers_to_build_and_taint_it() {
        let service = open_service();
        let r = "daily/date=2026-01-02";
        let response = partition_page(
            State(service.state.clone()),
            prod(&service),
            Extension(Role::Writer),
            Path(r.into()),
        )
        .await;
        assert_eq!(response.status(), StatusCode::OK);
        let html = text(response).await;
        assert!(
            html.contains(&format!(
                "<h1><code>{r}</code> {}",
                super::super::widgets::badge("missing").into_string()
            )),
            "{html}"
        );
        assert!(html.contains(&format!(r#"<input type="hidden" name="refs" value="{r}">"#)));
        assert!(html.contains(r#"<form class="inline" method="get" action="/taint">"#));
        assert!(html.contains("Nothing was built from it yet."));
        // No lineage is drawn for an instance that does not exist.
        assert!(!html.contains("<h2>Lineage</h2>"));
    }
}
