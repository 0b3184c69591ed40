//! Environments through the service (#59.4, contract section 9) over real sockets: every request
//! is in an environment (`env`, the header, the dashboard's cookie), the five routes with a
//! token, a build POSTed in `dev` runs in dev, the CLI with `--server` answers as in-process, an
//! unknown environment is a 404 naming the fix, and the dashboard's selector and its promotion,
//! which is refused until its box is ticked.

use serde_json::json;

use crate::environments::{project, ran, read, report, script, statuses, AGG_EDITED, DAY};
use crate::util::{Project, Service};

const TOKEN: &str = "s3cret";

/// A served project whose prod built the report, with `dev` made and agg's script edited.
fn served_with_dev(env: &[(&str, &str)]) -> (Project, Service) {
    let p = project();
    p.run(&["build", &report()]).expect_code(0);
    p.run(&["env", "create", "dev"]).expect_code(0);
    p.file("jobs/agg.sh", &script("agg", "clean", AGG_EDITED));
    ran(&p);
    let s = Service::start(&p, env);
    (p, s)
}

/// `(status, body)` of a JSON request with the write token.
fn with_token(
    s: &Service,
    method: &str,
    path: &str,
    body: Option<&str>,
) -> (u16, serde_json::Value) {
    let (status, text) = s.call(method, path, body, Some(TOKEN));
    let value = serde_json::from_str(&text).unwrap_or(serde_json::Value::String(text));
    (status, value)
}

/// Builds `report` in dev through the API; returns the build's details once it ended.
fn build_in_dev(s: &Service) -> serde_json::Value {
    let body = json!({ "partitions": [report()] }).to_string();
    let (status, v) = with_token(s, "POST", "/api/v1/builds?env=dev", Some(&body));
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    loop {
        let (status, v) = s.get(&format!("/api/v1/builds/{id}?env=dev"));
        assert_eq!(status, 200, "{v}");
        if matches!(
            v["status"].as_str(),
            Some("completed" | "failed" | "cancelled")
        ) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "build {id} never ended"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}

#[test]
fn a_build_posted_in_dev_runs_there_and_leaves_prods_bytes_and_answers() {
    let (p, s) = served_with_dev(&[("DATABUILD_TOKEN", TOKEN)]);
    let prod_report = read(&p, &format!("data/report/{DAY}"));
    let prod_before = statuses(&p, "prod");
    let built = build_in_dev(&s);
    assert_eq!(built["status"], "completed", "{built}");
    assert_eq!(ran(&p), ["agg", "report"], "clean was reused");
    // Its bytes are dev's; prod's are as they were.
    assert_eq!(
        read(&p, &format!("data/.databuild-env/dev/report/{DAY}")),
        "n=2\n"
    );
    assert_eq!(read(&p, &format!("data/report/{DAY}")), prod_report);
    assert_eq!(statuses(&p, "prod"), prod_before);
    // The build is dev's: prod's log has no such build, and the header says what `env` says.
    let id = built["build_request_id"].as_str().unwrap();
    let (status, _) = s.get(&format!("/api/v1/builds/{id}"));
    assert_eq!(status, 404);
    let response = Service::agent()
        .get(&format!(
            "{}/api/v1/partitions/{}/status",
            s.url,
            report().replace('/', "%2F")
        ))
        .header("X-DataBuild-Env", "dev")
        .call()
        .unwrap()
        .into_body()
        .read_to_string()
        .unwrap();
    let status: serde_json::Value = serde_json::from_str(&response).unwrap();
    assert!(
        status["path"]
            .as_str()
            .unwrap()
            .contains(".databuild-env/dev/"),
        "{status}"
    );
}

#[test]
fn environments_are_made_listed_diffed_promoted_and_rolled_back_over_http() {
    let (p, s) = served_with_dev(&[("DATABUILD_TOKEN", TOKEN)]);
    let prod_report = read(&p, &format!("data/report/{DAY}"));
    // Writes need the write token; reads do not.
    let make = json!({ "name": "try_it", "from": "prod" }).to_string();
    let (status, _) = s.call("POST", "/api/v1/environments", Some(&make), None);
    assert_eq!(status, 401);
    let (status, made) = with_token(&s, "POST", "/api/v1/environments", Some(&make));
    assert_eq!(
        (status, made["name"].as_str()),
        (201, Some("try_it")),
        "{made}"
    );
    assert_eq!(made["from"], "prod");
    let (status, again) = with_token(&s, "POST", "/api/v1/environments", Some(&make));
    assert_eq!(status, 409, "{again}");
    let (status, list) = s.get("/api/v1/environments");
    assert_eq!(status, 200);
    let names: Vec<&str> = (list["environments"].as_array().unwrap().iter())
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["prod", "dev", "try_it"]);

    build_in_dev(&s);
    assert_eq!(ran(&p), ["agg", "report"]);
    let (status, diff) = s.get("/api/v1/environments/dev/diff");
    assert_eq!(status, 200, "{diff}");
    assert_eq!(diff["other"], "prod");
    let changed: Vec<&str> = (diff["partitions"].as_array().unwrap().iter())
        .map(|d| d["ref"].as_str().unwrap())
        .collect();
    assert_eq!(changed, [format!("agg/{DAY}"), format!("report/{DAY}")]);
    assert_eq!(diff["jobs"][0]["job"], "agg", "{diff}");
    assert!(
        diff["partitions"][1]["content"]["unified"]
            .as_str()
            .unwrap()
            .contains("+n=2"),
        "{diff}"
    );

    let to_prod = json!({ "to": "prod" }).to_string();
    let (status, _) = s.call(
        "POST",
        "/api/v1/environments/dev/promote",
        Some(&to_prod),
        None,
    );
    assert_eq!(status, 401);
    let (status, promoted) = with_token(
        &s,
        "POST",
        "/api/v1/environments/dev/promote",
        Some(&to_prod),
    );
    assert_eq!(status, 200, "{promoted}");
    assert_eq!(
        (promoted["kind"].as_str(), promoted["partitions"].as_u64()),
        (Some("promote"), Some(2))
    );
    assert_eq!(read(&p, &format!("data/report/{DAY}")), "n=2\n");
    assert_eq!(ran(&p), Vec::<String>::new(), "no job ran");

    let (status, rolled) = with_token(&s, "POST", "/api/v1/environments/prod/rollback", Some("{}"));
    assert_eq!(status, 200, "{rolled}");
    assert_eq!(rolled["kind"], "rollback");
    assert_eq!(read(&p, &format!("data/report/{DAY}")), prod_report);

    let (status, left) = with_token(&s, "DELETE", "/api/v1/environments/try_it", None);
    assert_eq!(status, 200, "{left}");
    assert_eq!(left["environments"].as_array().unwrap().len(), 2);
    let (status, v) = s.get("/api/v1/partitions?env=try_it");
    assert_eq!(status, 404, "a dropped environment is gone: {v}");
}

#[test]
fn the_cli_with_a_server_and_env_answers_as_it_does_in_process() {
    let (p, s) = served_with_dev(&[]);
    let out = p.run(&["--server", &s.url, "--env", "dev", "build", &report()]);
    out.expect_code(0);
    assert_eq!(ran(&p), ["agg", "report"]);
    let refs: Vec<String> = ["clean", "agg", "report"]
        .iter()
        .map(|j| format!("{j}/{DAY}"))
        .collect();
    let status = |server: Option<&str>| {
        let mut args = vec!["--json", "--env", "dev"];
        if let Some(url) = server {
            args.extend(["--server", url]);
        }
        args.push("status");
        args.extend(refs.iter().map(String::as_str));
        let out = p.run(&args);
        out.expect_code(0);
        out.json()
    };
    let (remote, local) = (status(Some(&s.url)), status(None));
    assert_eq!(remote, local);
    assert!(
        remote[2]["path"]
            .as_str()
            .unwrap()
            .contains(".databuild-env/dev/report/"),
        "{remote}"
    );
    let diff = |server: Option<&str>| {
        let mut args = vec!["--json"];
        if let Some(url) = server {
            args.extend(["--server", url]);
        }
        args.extend(["env", "diff", "dev"]);
        let out = p.run(&args);
        out.expect_code(0);
        out.json()
    };
    assert_eq!(diff(Some(&s.url)), diff(None));
}

#[test]
fn an_unknown_environment_is_a_404_naming_the_fix_and_a_malformed_one_a_400() {
    let (_p, s) = served_with_dev(&[]);
    for path in [
        "/api/v1/partitions?env=nope",
        "/api/v1/jobs?env=nope",
        "/api/v1/environments/nope/diff",
    ] {
        let (status, v) = s.get(path);
        assert_eq!(
            (status, v["code"].as_str()),
            (404, Some("not_found")),
            "{path}: {v}"
        );
        assert!(
            v["error"]
                .as_str()
                .unwrap()
                .contains("databuild env create nope"),
            "{path}: {v}"
        );
    }
    let (status, v) = s.get("/api/v1/partitions?env=Not-A-Name");
    assert_eq!(
        (status, v["code"].as_str()),
        (400, Some("bad_request")),
        "{v}"
    );
    // The header says the same as the parameter; the parameter wins.
    let agent = Service::agent();
    let status = |url: &str| {
        let r = agent
            .get(&format!("{}{url}", s.url))
            .header("X-DataBuild-Env", "nope")
            .call();
        r.unwrap().status().as_u16()
    };
    assert_eq!(status("/api/v1/jobs"), 404);
    assert_eq!(status("/api/v1/jobs?env=dev"), 200);
    // Wants and sources are prod's: asked of another environment, they say so.
    let want = json!({ "partitions": [report()] });
    let (status, v) = s.post("/api/v1/wants?env=dev", &want);
    assert_eq!(status, 400, "{v}");
    assert!(
        v["error"].as_str().unwrap().contains("wants are prod's"),
        "{v}"
    );
    // A page names the fix too.
    let (status, page) = s.call("GET", "/partitions?env=nope", None, None);
    assert_eq!(status, 404);
    assert!(page.contains("databuild env create nope"), "{page}");
}

/// A GET of a page with `cookie`; `(status, Set-Cookie, body)`.
fn page(s: &Service, path: &str, cookie: Option<&str>) -> (u16, Option<String>, String) {
    let mut request = Service::agent().get(&format!("{}{path}", s.url));
    if let Some(c) = cookie {
        request = request.header("Cookie", c);
    }
    let mut response = request.call().unwrap();
    let set = (response.headers().get("set-cookie")).map(|v| v.to_str().unwrap().to_string());
    let body = response.body_mut().read_to_string().unwrap();
    (response.status().as_u16(), set, body)
}

#[test]
fn the_dashboards_selector_shows_devs_partitions_and_remembers_the_choice() {
    let p = project();
    p.run(&["env", "create", "dev"]).expect_code(0);
    p.run(&["--env", "dev", "build", &report()]).expect_code(0);
    let s = Service::start(&p, &[]);
    let listed = format!("report/{DAY}");
    let (status, set, html) = page(&s, "/partitions?env=dev&pattern=report%2F*", None);
    assert_eq!(status, 200);
    assert!(html.contains(&listed), "dev's partition is listed: {html}");
    assert!(
        html.contains(r#"<option value="dev" selected>dev</option>"#),
        "{html}"
    );
    // The switch stays on the page, its other parameters kept.
    assert!(
        html.contains(r#"<form class="env" method="get" action="/partitions">"#),
        "{html}"
    );
    assert!(
        html.contains(r#"<input type="hidden" name="pattern" value="report/*">"#),
        "{html}"
    );
    let set = set.expect("the choice is remembered");
    assert!(set.starts_with("databuild_env=dev;"), "{set}");
    // Prod has built nothing; the cookie brings dev back to a page asked without `env`.
    let (_, _, html) = page(&s, "/partitions", None);
    assert!(!html.contains(&listed), "prod has no report: {html}");
    assert!(html.contains(r#"<option value="prod" selected>prod</option>"#));
    let (_, _, html) = page(&s, "/partitions", Some("databuild_env=dev"));
    assert!(html.contains(&listed), "{html}");
    // A remembered environment since dropped falls back to prod, and is forgotten.
    let (status, set, _) = page(&s, "/partitions", Some("databuild_env=gone"));
    assert_eq!(status, 200);
    assert!(set.unwrap().contains("Max-Age=0"));
}

/// Posts a dashboard form (URL-encoded) to `path`; `(status, Location)`.
fn post_form(s: &Service, path: &str, form: &str) -> (u16, Option<String>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .max_redirects(0)
        .build()
        .into();
    let response = agent
        .post(&format!("{}{path}", s.url))
        .header("Content-Type", "application/x-www-form-urlencoded")
        .send(form)
        .unwrap();
    let location = (response.headers().get("location")).map(|v| v.to_str().unwrap().to_string());
    (response.status().as_u16(), location)
}

#[test]
fn the_dashboard_shows_the_diff_and_promotes_only_once_the_box_is_ticked() {
    let (p, s) = served_with_dev(&[]);
    build_in_dev(&s);
    ran(&p);
    let prod_report = read(&p, &format!("data/report/{DAY}"));
    let (status, _, html) = page(&s, "/environments/dev", None);
    assert_eq!(status, 200);
    assert!(
        html.contains("<h1>Environment dev against prod</h1>"),
        "{html}"
    );
    assert!(
        html.contains(&format!(r#"<a href="/partitions/report%2F{DAY}?env=dev">"#)),
        "{html}"
    );
    assert!(html.contains("+n=2"), "the unified diff: {html}");
    assert!(
        html.contains(r#"<input type="checkbox" name="confirm" value="yes" required>"#),
        "{html}"
    );
    let csrf = html
        .split(r#"name="csrf" value=""#)
        .nth(1)
        .unwrap()
        .split('"')
        .next()
        .unwrap()
        .to_string();
    // Without the box ticked, nothing changes.
    let (status, _) = post_form(
        &s,
        "/ui/environments/dev/promote",
        &format!("csrf={csrf}&to=prod"),
    );
    assert_eq!(status, 400);
    assert_eq!(read(&p, &format!("data/report/{DAY}")), prod_report);
    // Nor without the CSRF token.
    let (status, _) = post_form(&s, "/ui/environments/dev/promote", "to=prod&confirm=yes");
    assert_eq!(status, 403);
    assert_eq!(read(&p, &format!("data/report/{DAY}")), prod_report);
    let (status, to) = post_form(
        &s,
        "/ui/environments/dev/promote",
        &format!("csrf={csrf}&to=prod&confirm=yes"),
    );
    assert_eq!(
        (status, to.as_deref()),
        (303, Some("/environments/dev?other=prod"))
    );
    assert_eq!(read(&p, &format!("data/report/{DAY}")), "n=2\n");
    let (_, _, list) = page(&s, "/environments", None);
    assert!(
        list.contains(r#"<a href="/environments/dev">dev</a>"#),
        "{list}"
    );
    // Rolled back the same way.
    let (status, _) = post_form(
        &s,
        "/ui/environments/prod/rollback",
        &format!("csrf={csrf}&back_to=dev"),
    );
    assert_eq!(status, 400);
    // A `back_to` that names no environment is no address to go back to.
    let (status, to) = post_form(
        &s,
        "/ui/environments/prod/rollback",
        &format!("csrf={csrf}&back_to=%0Aevil&confirm=yes"),
    );
    assert_eq!((status, to.as_deref()), (303, Some("/environments")));
    assert_eq!(read(&p, &format!("data/report/{DAY}")), prod_report);
}

#[test]
#[ignore = "needs Chromium and playwright-core; ./test.sh installs them and runs it"]
fn in_chromium_the_selector_switches_to_dev_and_the_promotion_waits_for_its_box() {
    let p = project();
    p.run(&["env", "create", "dev"]).expect_code(0);
    p.run(&["--env", "dev", "build", &report()]).expect_code(0);
    let s = Service::start(&p, &[]);
    crate::util::browser("environments.mjs", &[&s.url, &report()]);
    assert_eq!(
        read(&p, &format!("data/report/{DAY}")),
        "2\n",
        "promoted to prod"
    );
}

/// Posts a build of `report` in dev and waits until its first run is running; returns its id.
fn running_in_dev(s: &Service) -> String {
    let (status, v) = s.post(
        "/api/v1/builds?env=dev",
        &json!({ "partitions": [report()] }),
    );
    assert_eq!(status, 202, "{v}");
    let id = v["build_request_id"].as_str().unwrap().to_string();
    crate::util::eventually(
        std::time::Duration::from_secs(20),
        "a run in dev runs",
        || {
            let (_, b) = s.get(&format!("/api/v1/builds/{id}?env=dev"));
            (b["job_runs"][0]["status"] == "running").then_some(())
        },
    );
    id
}

#[test]
fn a_build_in_dev_is_cancelled_by_its_delete_and_by_shutdown() {
    let (p, mut s) = served_with_dev(&[]);
    p.file(
        "jobs/agg.sh",
        &script("agg", "clean", &format!("sleep 60; {AGG_EDITED}")),
    );
    let id = running_in_dev(&s);
    let (status, v) = s.call(
        "DELETE",
        &format!("/api/v1/builds/{id}?env=dev"),
        None,
        None,
    );
    assert_eq!(status, 200, "{v}");
    let ended = crate::util::eventually(std::time::Duration::from_secs(20), "cancelled", || {
        let (_, b) = s.get(&format!("/api/v1/builds/{id}?env=dev"));
        // The build ends at once; its driver, in dev's engine, then ends its running run.
        (b["status"] == "cancelled" && b["job_runs"][0]["status"] == "cancelled").then_some(b)
    });
    assert_eq!(ended["job_runs"][0]["job"], "agg", "{ended}");

    let id = running_in_dev(&s);
    let took = s.stop();
    assert!(took < std::time::Duration::from_secs(10), "took {took:?}");
    let b = p.run(&["--json", "--env", "dev", "builds", &id]).json();
    assert_eq!(b["status"], "cancelled", "{b}");
    assert_eq!(b["job_runs"][0]["status"], "cancelled", "{b}");
}
