//! The dashboard in a real browser: Debian's Chromium, driven by `tests/browser/dashboard.mjs`
//! (playwright-core, which the test command installs), against a real service with real builds.
//! The browser tests are `#[ignore]`d: `./test.sh` runs them.

use crate::examples::example;
use crate::util::Service;

#[test]
#[ignore = "needs Chromium and playwright-core; ./test.sh installs them and runs it"]
fn every_page_works_in_chromium_and_a_build_runs_from_the_page() {
    let p = example("podcast_reviews");
    let s = Service::start(&p, &[]);
    crate::util::browser(
        "dashboard.mjs",
        &[
            &s.url,
            // More than 50 runs: the build page of a big build.
            "daily_summaries/category={news,comedy}/date={2020-01-01..2020-01-05}",
        ],
    );
}

#[test]
#[ignore = "needs Chromium and playwright-core; ./test.sh installs them and runs it"]
fn with_a_token_the_dashboard_asks_for_a_login_then_every_page_and_button_works() {
    let p = example("podcast_reviews");
    let s = Service::start(
        &p,
        &[
            ("DATABUILD_TOKEN", "dash-s3cret"),
            ("DATABUILD_GUARD_READS", "true"),
        ],
    );
    crate::util::browser(
        "dashboard.mjs",
        &[
            &s.url,
            "daily_summaries/category=news/date=2020-01-03",
            "dash-s3cret",
        ],
    );
}

const GRAPH: &str = r#"
[graph]
name = "g"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
command = ["true"]
"#;

/// The builds an HTML page of `/builds` lists, in order, and the link to its next page.
fn listed(s: &Service, path: &str) -> (u16, Vec<String>, Option<String>) {
    let (status, html) = s.call("GET", path, None, None);
    let builds = html
        .split("data-build=\"")
        .skip(1)
        .map(|rest| rest.split('"').next().unwrap().to_string())
        .collect();
    let next = html
        .split("id=\"next-page\" href=\"")
        .nth(1)
        .map(|rest| rest.split('"').next().unwrap().replace("&amp;", "&"));
    (status, builds, next)
}

#[test]
fn the_builds_page_filters_by_status_and_time_and_pages_by_keyset() {
    use crate::util::{seed_build, Project};
    let p = Project::new(GRAPH);
    for i in 0..7 {
        let ok = i % 3 != 0;
        seed_build(
            &p,
            &format!("br-{i}"),
            &format!("run-{i}"),
            "a",
            &format!("a/2020-01-0{}", i + 1),
            ok,
        );
    }
    let s = Service::start(&p, &[]);
    let (status, all, next) = listed(&s, "/builds");
    assert_eq!(status, 200);
    assert_eq!(next, None, "one page holds 7 builds");
    assert_eq!(all.len(), 7);
    // Newest first.
    assert_eq!(all.first().map(String::as_str), Some("br-6"));
    // Pages of 3 by keyset: every build once, in the same order.
    let mut paged = Vec::new();
    let mut path = Some("/builds?limit=3".to_string());
    let mut pages = 0;
    while let Some(p) = path.take() {
        let (status, builds, next) = listed(&s, &p);
        assert_eq!(status, 200, "{p}");
        assert!(builds.len() <= 3);
        paged.extend(builds);
        path = next;
        pages += 1;
    }
    assert_eq!(paged, all);
    assert_eq!(pages, 3);
    // By status.
    let (_, failed, _) = listed(&s, "/builds?status=failed");
    assert_eq!(failed, ["br-6", "br-3", "br-0"]);
    let (_, completed, _) = listed(&s, "/builds?status=completed&limit=2");
    assert_eq!(completed.len(), 2);
    // By time: all of them were created after 2000 and before 2100.
    assert_eq!(
        listed(&s, "/builds?from=2000-01-01&to=2100-01-01T00:00").1,
        all
    );
    assert!(listed(&s, "/builds?to=2000-01-01").1.is_empty());
    assert!(listed(&s, "/builds?from=2100-01-01T00:00:00Z").1.is_empty());
    // Filters that do not parse are the request's fault, said on the page.
    for bad in [
        "/builds?status=sideways",
        "/builds?from=yesterday",
        "/builds?after=nonsense",
        "/builds?limit=0",
    ] {
        let (status, html) = s.call("GET", bad, None, None);
        assert_eq!(status, 400, "{bad}: {html}");
    }
    // The dataset page's grid and its errors: what it echoes is escaped.
    let (status, html) = s.call("GET", "/datasets/a", None, None);
    assert_eq!(status, 200, "{html}");
    assert!(
        // The seeded runs recorded another job version than the graph's: stale, and derived.
        html.contains("<svg")
            && html.contains("data-status=\"stale\"")
            && html.contains("data-status=\"failed\""),
        "{html}"
    );
    let (status, html) = s.call("GET", "/datasets/a?state=%3Cscript%3Ex", None, None);
    assert_eq!(status, 400);
    assert!(!html.contains("<script>x"), "{html}");
    assert_eq!(s.call("GET", "/datasets/nothing", None, None).0, 404);
    // The page escapes what it echoes.
    let (_, html) = s.call("GET", "/builds?from=%3Cscript%3E", None, None);
    assert!(!html.contains("<script>x"), "{html}");
    assert!(!html.contains("value=\"<script>"), "{html}");
}

/// A dataset of two fields neither of which is a date nor has a domain: rows are the first
/// field's values found in the log (one seek each), columns the values the first row has, a page
/// of 20 rows at a time.
#[test]
fn a_dataset_grid_finds_its_rows_and_columns_in_the_log_a_page_at_a_time() {
    use crate::util::{seed_build, Project};
    let p = Project::new(
        r#"
[graph]
name = "g"
[[job]]
name = "t"
outputs = ["t/k={k}/v={v}"]
command = ["true"]
"#,
    );
    for i in 0..22 {
        for j in 0..2 {
            let r = format!("t/k=r{i:02}/v=x{j}");
            seed_build(
                &p,
                &format!("b-{i}-{j}"),
                &format!("run-{i}-{j}"),
                "t",
                &r,
                j == 0,
            );
        }
    }
    let s = Service::start(&p, &[]);
    let (status, html) = s.call("GET", "/datasets/t", None, None);
    assert_eq!(status, 200, "{html}");
    assert!(html.contains("k × v"), "{html}");
    let rows = |html: &str| -> Vec<String> {
        html.split("font-size=\"11\" fill=\"#1f2933\">")
            .skip(1)
            .map(|rest| rest.split('<').next().unwrap().to_string())
            .collect()
    };
    let first = rows(&html);
    assert_eq!(first.len(), 20, "{first:?}");
    assert_eq!(first[0], "r00");
    assert_eq!(first[19], "r19");
    // Each row: x0 built, x1 failed.
    assert_eq!(html.matches("data-status=\"failed\"").count(), 20);
    let next = html
        .split("id=\"next-rows\" href=\"")
        .nth(1)
        .map(|rest| rest.split('"').next().unwrap().replace("&amp;", "&"))
        .expect("a next page of rows");
    let (status, html) = s.call("GET", &next, None, None);
    assert_eq!(status, 200, "{html}");
    assert_eq!(rows(&html), ["r20", "r21"]);
    assert!(!html.contains("id=\"next-rows\""));
}
