//! The dashboard in a real browser: Debian's Chromium, driven by `tests/browser/dashboard.mjs`
//! (playwright-core, which the test command installs), against a real service with real builds.

use std::path::Path;

use crate::examples::example;
use crate::util::Service;

#[test]
fn every_page_works_in_chromium_and_a_build_runs_from_the_page() {
    let browser = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/browser");
    let ready = browser.join("node_modules/playwright-core").exists()
        && Path::new("/usr/bin/chromium").exists();
    if !ready {
        assert!(
            std::env::var("DATABUILD_REQUIRE_BROWSER").is_err(),
            "DATABUILD_REQUIRE_BROWSER is set but Chromium or playwright-core is missing"
        );
        eprintln!("no Chromium or playwright-core (run ./test.sh): skipped");
        return;
    }
    let p = example("podcast_reviews");
    let s = Service::start(&p, &[]);
    // Screenshots go where DATABUILD_SCREENSHOTS says (docs/screenshots when refreshing them).
    let mut cmd = std::process::Command::new("node");
    cmd.current_dir(&browser)
        .arg("dashboard.mjs")
        .arg(&s.url)
        .arg("daily_summaries/category=news/date=2020-01-02");
    if let Ok(dir) = std::env::var("DATABUILD_SCREENSHOTS") {
        cmd.arg(dir);
    }
    let out = cmd.output().expect("node runs");
    assert!(
        out.status.success(),
        "the browser test failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
