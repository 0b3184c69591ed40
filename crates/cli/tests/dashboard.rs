//! The dashboard in a real browser: Debian's Chromium, driven by `tests/browser/dashboard.mjs`
//! (playwright-core, which the test command installs), against a real service with real builds.

use crate::examples::example;
use crate::util::Service;

#[test]
fn every_page_works_in_chromium_and_a_build_runs_from_the_page() {
    let p = example("podcast_reviews");
    let s = Service::start(&p, &[]);
    crate::util::browser(
        "dashboard.mjs",
        &[&s.url, "daily_summaries/category=news/date=2020-01-02"],
    );
}

#[test]
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
