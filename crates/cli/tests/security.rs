//! A service safe to leave running, attacked over real sockets: guarded reads and sessions,
//! cross-site and rebinding requests, CSRF, secrets in env, bounded requests, SQL and streams.
//! Requests are written byte for byte on a TCP connection, so every header is the attacker's.

use std::io::{Read, Write};
use std::time::{Duration, Instant};

use crate::util::{Project, Service};

const GRAPH: &str = r#"
[graph]
name = "guarded"
show_env = ["REGION"]
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["sh", "job.sh"]
[[job]]
name = "dyn"
outputs = ["dyn/{k}"]
config = ["python3", "config.py"]
command = ["sh", "job.sh"]
"#;

const JOB: &str = r#"set -e
sleep "${SLEEP:-0}"
for out in $(echo "$DATABUILD_OUTPUTS" | tr -d '[]"' | tr ',' ' '); do
  mkdir -p "$(dirname "$DATABUILD_DATA_DIR/$out")"
  echo "$DATABUILD_JOB_RUN_ID" > "$DATABUILD_DATA_DIR/$out"
done
"#;

/// Records every call's arguments, and hands each run a secret and a region through env.
const CONFIG: &str = r#"
import json, sys
with open("config-calls.log", "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\n")
print(json.dumps({"configs": [
    {"outputs": [out], "inputs": [], "env": {"DYN_TOKEN": "ghp_s3cretvalue", "REGION": "eu-west"}}
    for out in sys.argv[1:]
]}))
"#;

fn project() -> Project {
    let p = Project::new(GRAPH);
    p.file("job.sh", JOB);
    p.file("config.py", CONFIG);
    for d in 1..=3 {
        p.partition(&format!("raw/2020-01-0{d}"));
    }
    p
}

/// An answer read off the socket.
struct Answer {
    status: u16,
    head: String,
    body: String,
}

impl Answer {
    fn header(&self, name: &str) -> Option<String> {
        self.head.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            k.eq_ignore_ascii_case(name).then(|| v.trim().to_string())
        })
    }

    fn json(&self) -> serde_json::Value {
        serde_json::from_str(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.body))
    }
}

/// One request on a connection of its own. `headers` may replace `Host`.
fn send(s: &Service, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let addr = s.url.trim_start_matches("http://");
    let mut text = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        text.push_str(&format!("Host: {addr}\r\n"));
    }
    for (k, v) in headers {
        text.push_str(&format!("{k}: {v}\r\n"));
    }
    if !headers
        .iter()
        .any(|(k, _)| k.eq_ignore_ascii_case("content-length"))
    {
        text.push_str(&format!("Content-Length: {}\r\n", body.len()));
    }
    text.push_str("\r\n");
    text.push_str(body);
    let mut stream = std::net::TcpStream::connect(addr).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(text.as_bytes()).expect("send");
    let mut raw = Vec::new();
    let _ = stream.read_to_end(&mut raw);
    let raw = String::from_utf8_lossy(&raw).into_owned();
    let (head, body) = raw.split_once("\r\n\r\n").unwrap_or((&raw, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    Answer {
        status,
        head: head.to_string(),
        body: if chunked {
            dechunk(body)
        } else {
            body.to_string()
        },
    }
}

fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let n = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if n == 0 || rest.len() < n {
            break;
        }
        out.push_str(&rest[..n]);
        body = rest[n..].trim_start_matches("\r\n");
    }
    out
}

fn get(s: &Service, path: &str, headers: &[(&str, &str)]) -> Answer {
    send(s, "GET", path, headers, "")
}

fn post_json(s: &Service, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut h = vec![("Content-Type", "application/json")];
    h.extend_from_slice(headers);
    send(s, "POST", path, &h, body)
}

fn post_form(s: &Service, path: &str, headers: &[(&str, &str)], body: &str) -> Answer {
    let mut h = vec![("Content-Type", "application/x-www-form-urlencoded")];
    h.extend_from_slice(headers);
    send(s, "POST", path, &h, body)
}

/// The CSRF token of the dashboard's forms, read off a page as a browser would: the login
/// page of a service with a token, the home page of one without.
fn csrf(s: &Service, page: &str) -> String {
    let page = get(s, page, &[]);
    let at = page
        .body
        .find("name=\"csrf\" value=\"")
        .expect("a CSRF field")
        + 19;
    page.body[at..at + 64].to_string()
}

fn build_count(p: &Project) -> usize {
    let out = p.run(&["--json", "builds"]);
    out.expect_code(0);
    out.json()["builds"].as_array().unwrap().len()
}

const BEARER: (&str, &str) = ("Authorization", "Bearer w-s3cret");
const READER: (&str, &str) = ("Authorization", "Bearer r-s3cret");

fn guarded(p: &Project) -> Service {
    Service::start(
        p,
        &[
            ("DATABUILD_TOKEN", "w-s3cret"),
            ("DATABUILD_READ_TOKEN", "r-s3cret"),
        ],
    )
}

#[test]
fn guarded_reads_need_a_token_and_the_read_token_only_reads() {
    let p = project();
    let s = guarded(&p);
    for path in [
        "/api/v1/builds",
        "/api/v1/events",
        "/api/v1/datasets",
        "/metrics",
        "/builds",
        "/graph",
        "/datasets/a",
    ] {
        let a = get(&s, path, &[]);
        assert_eq!(a.status, 401, "{path}: {}", a.body);
        assert_eq!(a.json()["code"], "unauthorized");
        assert_eq!(get(&s, path, &[READER]).status, 200, "{path}");
        assert_eq!(get(&s, path, &[BEARER]).status, 200, "{path}");
    }
    // SQL through the dashboard's GET, the hole that was seen.
    let sql = "/sql?q=SELECT%20count(*)%20FROM%20events";
    assert_eq!(get(&s, sql, &[]).status, 401);
    assert_eq!(get(&s, sql, &[READER]).status, 200);
    // The health check stays open for load balancers.
    assert_eq!(get(&s, "/healthz", &[]).status, 200);
    // A reader reads and runs SQL but never writes.
    let body = r#"{"partitions": ["a/2020-01-01"]}"#;
    assert_eq!(post_json(&s, "/api/v1/builds", &[READER], body).status, 401);
    let sql = post_json(
        &s,
        "/api/v1/sql",
        &[READER],
        r#"{"query": "SELECT 1 AS one"}"#,
    );
    assert_eq!(sql.status, 200, "{}", sql.body);
    assert_eq!(post_json(&s, "/api/v1/builds", &[BEARER], body).status, 202);
    // A wrong token of the right length is no token.
    let wrong = ("Authorization", "Bearer w-s3creT");
    assert_eq!(get(&s, "/api/v1/builds", &[wrong]).status, 401);
    // The CLI sends the read token on reads.
    let out = p
        .command()
        .args(["--server", &s.url, "--json", "builds"])
        .env_remove("DATABUILD_TOKEN")
        .env("DATABUILD_READ_TOKEN", "r-s3cret")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn the_dashboard_asks_for_a_login_and_keeps_a_safe_session() {
    let p = project();
    let s = guarded(&p);
    let html = ("Accept", "text/html");
    let home = get(&s, "/builds/x?y=1", &[html]);
    assert_eq!(home.status, 303);
    assert_eq!(
        home.header("location").as_deref(),
        Some("/login?next=%2Fbuilds%2Fx%3Fy=1")
    );
    let token = csrf(&s, "/login");
    let started = Instant::now();
    let wrong = post_form(
        &s,
        "/login",
        &[],
        &format!("token=guess&next=%2F&csrf={token}"),
    );
    assert_eq!(wrong.status, 401);
    assert!(wrong.header("set-cookie").is_none());
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "wrong guesses are slowed"
    );
    let login = post_form(
        &s,
        "/login",
        &[],
        &format!("token=w-s3cret&next=%2Fjobs&csrf={token}"),
    );
    assert_eq!(login.status, 303, "{}", login.body);
    assert_eq!(login.header("location").as_deref(), Some("/jobs"));
    let cookie = login.header("set-cookie").expect("a session cookie");
    for attribute in ["HttpOnly", "SameSite=Strict", "Path=/"] {
        assert!(cookie.contains(attribute), "{cookie}");
    }
    assert!(
        !cookie.contains("w-s3cret"),
        "the cookie is not the token: {cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_string();
    let page = get(&s, "/", &[html, ("Cookie", &session)]);
    assert_eq!(page.status, 200);
    // Logged in as a writer, forms need no token field, and they work.
    assert!(!page.body.contains("name=\"token\""), "{}", page.body);
    let build = post_form(
        &s,
        "/ui/build",
        &[("Cookie", &session)],
        &format!("refs=a%2F2020-01-0%7B1..2%7D&csrf={token}"),
    );
    assert_eq!(build.status, 303, "{}", build.body);
    // A login never sends the browser to another site.
    let away = post_form(
        &s,
        "/login",
        &[],
        &format!("token=w-s3cret&next=%2F%2Fevil.example&csrf={token}"),
    );
    assert_eq!(away.header("location").as_deref(), Some("/"));
    // A forged or a reader's cookie does not write.
    let forged = session.replace("writer.", "writer.1");
    assert_eq!(
        get(&s, "/api/v1/builds", &[("Cookie", &forged)]).status,
        401
    );
    let reader = post_form(
        &s,
        "/login",
        &[],
        &format!("token=r-s3cret&next=%2F&csrf={token}"),
    );
    let reader = reader.header("set-cookie").unwrap();
    let reader = reader.split(';').next().unwrap();
    assert_eq!(get(&s, "/api/v1/builds", &[("Cookie", reader)]).status, 200);
    let refused = post_form(
        &s,
        "/ui/build",
        &[("Cookie", reader)],
        &format!("refs=a%2F2020-01-03&csrf={token}"),
    );
    assert_eq!(refused.status, 401, "{}", refused.body);
}

#[test]
fn dashboard_forms_work_with_a_token_and_refuse_forgeries() {
    let p = project();
    let s = Service::start(&p, &[("DATABUILD_TOKEN", "w-s3cret")]);
    let token = csrf(&s, "/login");
    let before = build_count(&p);
    // The form's token field (no session) is enough: the header check no longer runs first.
    let ok = post_form(
        &s,
        "/ui/build",
        &[],
        &format!("refs=a%2F2020-01-01&token=w-s3cret&csrf={token}"),
    );
    assert_eq!(ok.status, 303, "{}", ok.body);
    assert_eq!(build_count(&p), before + 1);
    // Without the CSRF token, or from another site, nothing happens.
    let no_csrf = post_form(&s, "/ui/build", &[], "refs=a%2F2020-01-02&token=w-s3cret");
    assert_eq!(no_csrf.status, 403, "{}", no_csrf.body);
    let evil = ("Origin", "http://evil.example");
    for path in ["/ui/build", "/ui/taint", "/ui/cancel/x", "/login"] {
        let a = post_form(
            &s,
            path,
            &[evil],
            &format!("refs=a%2F2020-01-02&ref=a%2F2020-01-01&token=w-s3cret&csrf={token}"),
        );
        assert_eq!(a.status, 403, "{path}: {}", a.body);
        assert_eq!(a.json()["code"], "cross_origin");
    }
    let fetch = ("Sec-Fetch-Site", "cross-site");
    assert_eq!(
        post_form(
            &s,
            "/ui/build",
            &[fetch],
            &format!("refs=a%2F2020-01-02&token=w-s3cret&csrf={token}")
        )
        .status,
        403
    );
    // The API, too, refuses a browser's cross-site write even with a token.
    let api = post_json(
        &s,
        "/api/v1/builds",
        &[evil, BEARER],
        r#"{"partitions": ["a/2020-01-02"]}"#,
    );
    assert_eq!(api.status, 403);
    assert_eq!(
        build_count(&p),
        before + 1,
        "no forged request built anything"
    );
    // Reads without the token are open, but never say where runs ran; SQL needs the token.
    let id = ok
        .header("location")
        .unwrap()
        .trim_start_matches("/builds/")
        .to_string();
    let b = s.wait_for_build(&id);
    let run = b["job_runs"][0]["job_run_id"].as_str().unwrap().to_string();
    let anonymous = get(&s, &format!("/api/v1/job-runs/{run}"), &[]).json();
    let private = get(&s, &format!("/api/v1/job-runs/{run}"), &[BEARER]).json();
    for field in ["owner", "host", "pid", "log_path"] {
        assert!(anonymous.get(field).is_none(), "{field}: {anonymous}");
    }
    assert!(private["log_path"].is_string(), "{private}");
    let events = get(&s, &format!("/api/v1/events?run={run}"), &[]);
    assert!(
        !events.body.contains("\"pid\"") && !events.body.contains("\"host\""),
        "{}",
        events.body
    );
    assert_eq!(get(&s, "/sql?q=SELECT%201", &[]).status, 401);
    assert_eq!(
        post_json(
            &s,
            "/api/v1/sql",
            &[],
            r#"{"query": "SELECT owner FROM job_runs"}"#
        )
        .status,
        401
    );
}

#[test]
fn rebinding_hosts_are_refused_and_pages_cannot_be_framed() {
    let p = project();
    let s = Service::start(&p, &[]);
    for path in ["/", "/api/v1/builds", "/sql?q=SELECT%201"] {
        let a = get(&s, path, &[("Host", "rebind.attacker.example")]);
        assert_eq!(a.status, 421, "{path}: {}", a.body);
        assert_eq!(a.json()["code"], "bad_host");
        assert!(
            a.body.contains("--allow-host rebind.attacker.example"),
            "{}",
            a.body
        );
    }
    for host in ["localhost:1", "127.0.0.1", "[::1]:80"] {
        assert_eq!(get(&s, "/healthz", &[("Host", host)]).status, 200, "{host}");
    }
    let page = get(&s, "/", &[]);
    assert_eq!(page.header("x-frame-options").as_deref(), Some("DENY"));
    assert_eq!(
        page.header("content-security-policy").as_deref(),
        Some("frame-ancestors 'none'")
    );
    assert_eq!(
        page.header("x-content-type-options").as_deref(),
        Some("nosniff")
    );
    // A configured name is answered.
    let named = Service::start(&p, &[("DATABUILD_ALLOWED_HOSTS", "databuild.internal")]);
    assert_eq!(
        get(&named, "/healthz", &[("Host", "databuild.internal:8080")]).status,
        200
    );
    // Without a token, an open service still refuses forms another site posts.
    let token = csrf(&s, "/");
    let evil = post_form(
        &s,
        "/ui/build",
        &[("Origin", "http://evil.example")],
        &format!("refs=a%2F2020-01-01&csrf={token}"),
    );
    assert_eq!(evil.status, 403);
}

#[test]
fn env_values_are_never_recorded_unless_the_graph_shows_them() {
    let p = project();
    p.run(&["build", "dyn/k=one"]).expect_code(0);
    let sql = p.run(&[
        "--json",
        "sql",
        "SELECT job_run_id, env FROM job_runs WHERE job = 'dyn'",
    ]);
    sql.expect_code(0);
    assert!(sql.stdout.contains("<redacted>"), "{}", sql.stdout);
    assert!(
        sql.stdout.contains("eu-west"),
        "REGION is marked safe: {}",
        sql.stdout
    );
    assert!(!sql.stdout.contains("ghp_s3cretvalue"), "{}", sql.stdout);
    let run = sql.json()["rows"][0][0].as_str().unwrap().to_string();
    let shown = p.run(&["runs", &run]);
    shown.expect_code(0);
    assert!(
        shown.stdout.contains("DYN_TOKEN=<redacted>"),
        "{}",
        shown.stdout
    );
    assert!(
        !shown.stdout.contains("ghp_s3cretvalue"),
        "{}",
        shown.stdout
    );
    // Not in any byte of the log either.
    for file in ["events.db", "events.db-wal"] {
        let bytes = std::fs::read(p.path().join(".databuild").join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(15).any(|w| w == b"ghp_s3cretvalue"),
            "{file} holds the secret"
        );
    }
    // The job itself got the real value.
    let s = Service::start(&p, &[]);
    let events = get(&s, "/api/v1/events?job=dyn", &[]);
    assert!(!events.body.contains("ghp_s3cretvalue"));
    assert!(events.body.contains("<redacted>"), "{}", events.body);
}

/// The secret `CONFIG` hands every run, which no answer, page, event or table may hold.
const SECRET: &str = "ghp_s3cretvalue";

/// Asserts that `text`, what `path` answered, holds no secret.
fn no_secret(path: &str, text: &str) {
    assert!(!text.contains(SECRET), "{path} shows the secret: {text}");
}

#[test]
fn a_secret_env_value_shows_on_no_path_and_a_shown_one_shows() {
    let p = project();
    let r = "dyn/k=one";
    // Planned, not run: analyze and a dry run, as text and JSON.
    for args in [
        &["analyze", r][..],
        &["build", "--dry-run", r],
        &["--json", "analyze", r],
        &["--json", "build", "--dry-run", r],
    ] {
        let out = p.run(args);
        out.expect_code(0);
        no_secret(&args.join(" "), &out.stdout);
        no_secret(&args.join(" "), &out.stderr);
    }
    let plan = p.run(&["--json", "analyze", r]).json();
    let env = &plan["job_runs"][0]["env"];
    assert_eq!(env["DYN_TOKEN"], "<redacted>", "{plan}");
    assert_eq!(env["REGION"], "eu-west", "REGION is in show_env: {plan}");
    // Run: the job got the real value, which it writes into its output (data, not an answer).
    p.file(
        "job.sh",
        &format!("{JOB}\necho \"$DYN_TOKEN\" > \"$DATABUILD_DATA_DIR/../token-seen\"\n"),
    );
    let built = p.run(&["--json", "build", r]);
    built.expect_code(0);
    no_secret("build", &built.stdout);
    let seen = std::fs::read_to_string(p.path().join("token-seen")).unwrap();
    assert_eq!(seen.trim(), SECRET, "the run's process gets the real value");
    let run = crate::util::current_run(&p, r);
    for args in [
        &["explain", r][..],
        &["--json", "explain", r],
        &["runs", &run],
        &["--json", "runs", &run],
        &["--json", "events"],
        &["--json", "builds", "last"],
        &["status", r],
    ] {
        let out = p.run(args);
        out.expect_code(0);
        no_secret(&args.join(" "), &out.stdout);
    }
    // Every table and view of the log, whole.
    let tables = p.run(&[
        "--json",
        "sql",
        "SELECT name FROM sqlite_master WHERE type IN ('table', 'view')",
    ]);
    tables.expect_code(0);
    let names = tables.json()["rows"].as_array().unwrap().clone();
    assert!(names.len() > 5, "{}", tables.stdout);
    for name in names {
        let query = format!("SELECT * FROM \"{}\"", name[0].as_str().unwrap());
        let out = p.run(&["--json", "sql", &query]);
        no_secret(&query, &out.stdout);
    }
    for file in ["events.db", "events.db-wal"] {
        let bytes = std::fs::read(p.path().join(".databuild").join(file)).unwrap_or_default();
        assert!(
            !bytes.windows(SECRET.len()).any(|w| w == SECRET.as_bytes()),
            "{file} holds the secret"
        );
    }
    // The service, open on loopback: the API, the event stream and the dashboard's pages.
    let s = Service::start(&p, &[]);
    let build = p.run(&["--json", "builds", "last"]).json()["build_request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let encoded = databuild_service::encode_segment(r);
    let analyzed = post_json(
        &s,
        "/api/v1/analyze",
        &[],
        &format!(r#"{{"partitions": ["{r}"], "force": true}}"#),
    );
    assert_eq!(analyzed.status, 200, "{}", analyzed.body);
    no_secret("POST /api/v1/analyze", &analyzed.body);
    assert_eq!(analyzed.json()["job_runs"][0]["env"]["REGION"], "eu-west");
    for path in [
        format!("/api/v1/partitions/{encoded}/explain"),
        format!("/api/v1/partitions/{encoded}/status"),
        format!("/api/v1/partitions/{encoded}/events"),
        format!("/api/v1/job-runs/{run}"),
        "/api/v1/jobs/dyn/runs".to_string(),
        format!("/api/v1/builds/{build}"),
        format!("/api/v1/builds/{build}/events"),
        format!("/api/v1/builds/{build}/events/stream"),
        "/api/v1/events".to_string(),
        format!("/analyze?refs={encoded}"),
        format!("/analyze?refs={encoded}&force=true"),
        format!("/partitions/{encoded}"),
        format!("/runs/{run}"),
        format!("/builds/{build}"),
        "/jobs/dyn".to_string(),
    ] {
        let answer = get(&s, &path, &[]);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        no_secret(&path, &answer.body);
    }
    let page = get(&s, &format!("/runs/{run}"), &[]);
    assert!(page.body.contains("eu-west"), "{}", page.body);
}

#[test]
fn config_executables_get_refs_as_arguments_and_run_for_authenticated_readers_only() {
    let p = project();
    let s = guarded(&p);
    let hostile = "dyn/k=$(id>pwned);`id>pwned2`";
    let query = format!(
        "/analyze?refs={}",
        databuild_service::encode_segment(hostile)
    );
    let anonymous = get(&s, &query, &[]);
    assert_eq!(anonymous.status, 401);
    assert!(
        !p.path().join("config-calls.log").exists(),
        "the config ran for a stranger"
    );
    let page = get(&s, &query, &[READER]);
    assert_eq!(page.status, 200, "{}", page.body);
    let calls = std::fs::read_to_string(p.path().join("config-calls.log")).unwrap();
    let argv: Vec<String> = serde_json::from_str(calls.lines().next().unwrap()).unwrap();
    assert_eq!(argv, [hostile], "the ref is one argument, as typed");
    assert!(!p.path().join("pwned").exists() && !p.path().join("pwned2").exists());
}

#[test]
fn reads_without_a_token_run_no_config_and_say_what_a_token_would_show() {
    let p = project();
    p.run(&["build", "dyn/k=one"]).expect_code(0);
    let calls = || {
        std::fs::read_to_string(p.path().join("config-calls.log"))
            .unwrap_or_default()
            .lines()
            .count()
    };
    let before = calls();
    assert!(before > 0, "the build asked the config");
    // Writes need a token; reads are open.
    let s = Service::start(&p, &[("DATABUILD_TOKEN", "w-s3cret")]);
    let live = databuild_service::encode_segment("dyn/k=one");
    let missing = databuild_service::encode_segment("dyn/k=two");
    let status = get(&s, &format!("/api/v1/partitions/{live}/status"), &[]);
    assert_eq!(status.status, 200, "{}", status.body);
    let v = status.json();
    assert_eq!(v["status"], "live", "as the log knows it: {v}");
    assert_eq!(v["withheld"]["job"], "dyn", "{v}");
    let said = v["reasons"].to_string();
    assert!(
        said.contains("config executable of job `dyn`") && said.contains("Authorization: Bearer"),
        "{said}"
    );
    let explain = get(&s, &format!("/api/v1/partitions/{missing}/explain"), &[]);
    assert_eq!(explain.status, 200, "{}", explain.body);
    let v = explain.json();
    assert_eq!(v["status"], "missing", "{v}");
    assert_eq!(v["withheld"]["job"], "dyn", "{v}");
    assert_eq!(v["to_build"], serde_json::json!([]), "{v}");
    assert!(v["reasons"].to_string().contains("not planned"), "{v}");
    for path in [
        format!("/api/v1/partitions/{live}/explain"),
        format!("/api/v1/partitions/{missing}/status"),
        "/api/v1/partitions".to_string(),
        "/api/v1/partitions?status=live".to_string(),
        "/api/v1/partitions?status=stale".to_string(),
        "/api/v1/datasets".to_string(),
        "/api/v1/datasets?exact=true".to_string(),
        format!("/partitions/{live}"),
        format!("/partitions/{missing}"),
        "/partitions".to_string(),
        "/partitions?status=live".to_string(),
        "/datasets".to_string(),
        "/datasets/dyn".to_string(),
        "/graph".to_string(),
        "/".to_string(),
    ] {
        let answer = get(&s, &path, &[]);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(calls(), before, "{path} ran the config for a stranger");
    }
    let page = get(&s, &format!("/partitions/{live}"), &[]);
    assert!(page.body.contains("Authorization: Bearer"), "{}", page.body);
    drop(s);
    // An open service (no token) serves a link followed from another site (a chat message, a
    // mail) as it would a stranger: the page, and no config run; what another site's page
    // fetches on its own (an image, a frame, a `fetch`) is refused.
    let s = Service::start(&p, &[]);
    let link = [
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Mode", "navigate"),
        ("Sec-Fetch-Dest", "document"),
    ];
    let page = get(&s, &format!("/partitions/{live}"), &link);
    assert_eq!(page.status, 200, "{}", page.body);
    assert!(
        page.body.contains("config executable of job `dyn`"),
        "{}",
        page.body
    );
    assert_eq!(calls(), before, "a followed link ran the config");
    let fetched = [
        ("Sec-Fetch-Site", "cross-site"),
        ("Sec-Fetch-Mode", "no-cors"),
        ("Sec-Fetch-Dest", "image"),
    ];
    let answer = get(&s, &format!("/partitions/{live}"), &fetched);
    assert_eq!(answer.status, 403, "{}", answer.body);
    let analyze = get(&s, &format!("/analyze?refs={live}"), &link);
    assert_eq!(
        analyze.status, 403,
        "a link may not make it plan: {}",
        analyze.body
    );
    assert_eq!(calls(), before);
    // Lookups another site's page fetches are answered as to a stranger: no config run.
    for path in [
        "/api/v1/partitions?status=stale",
        "/api/v1/datasets?exact=true",
        "/datasets/dyn",
        "/partitions?status=live",
    ] {
        let answer = get(&s, path, &fetched);
        assert_eq!(answer.status, 200, "{path}: {}", answer.body);
        assert_eq!(calls(), before, "{path} ran the config for another site");
    }
    // The same page opened from the dashboard asks the config.
    let page = get(
        &s,
        &format!("/partitions/{live}"),
        &[("Sec-Fetch-Site", "same-origin")],
    );
    assert_eq!(page.status, 200, "{}", page.body);
    assert_eq!(calls(), before + 1);
    drop(s);
    let s = Service::start(&p, &[("DATABUILD_TOKEN", "w-s3cret")]);
    let before = calls();
    // With the token, the same read asks the config: the test above can fail.
    let status = get(&s, &format!("/api/v1/partitions/{live}/status"), &[BEARER]);
    assert_eq!(status.status, 200, "{}", status.body);
    assert!(status.json().get("withheld").is_none(), "{}", status.body);
    assert_eq!(calls(), before + 1);
    let explain = get(
        &s,
        &format!("/api/v1/partitions/{missing}/explain"),
        &[BEARER],
    );
    assert_eq!(
        explain.json()["to_build"][0]["job"],
        "dyn",
        "{}",
        explain.body
    );
}

#[test]
fn requests_are_bounded_before_any_work() {
    let p = project();
    let s = Service::start(&p, &[("DATABUILD_MAX_REFS", "1000")]);
    let before = build_count(&p);
    // A range of ten million, and thirty two-way lists, are refused from their count alone.
    for refs in ["a/{1..9999999}", &format!("a/{}", "{x,y}".repeat(30))] {
        let started = Instant::now();
        let body = serde_json::json!({ "partitions": [refs] }).to_string();
        for path in ["/api/v1/analyze", "/api/v1/builds"] {
            let a = post_json(&s, path, &[], &body);
            assert_eq!(a.status, 413, "{path}: {}", a.body);
            assert_eq!(a.json()["code"], "too_many_refs");
            assert!(a.body.contains("DATABUILD_MAX_REFS"), "{}", a.body);
        }
        let page = get(
            &s,
            &format!("/analyze?refs={}", databuild_service::encode_segment(refs)),
            &[],
        );
        assert_eq!(page.status, 413);
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
    }
    assert_eq!(
        build_count(&p),
        before,
        "nothing recorded for a refused request"
    );
    // Under the cap, braces work in the API as in the CLI.
    let ok = post_json(
        &s,
        "/api/v1/analyze",
        &[],
        r#"{"partitions": ["a/2020-01-0{1..3}"]}"#,
    );
    assert_eq!(ok.status, 200, "{}", ok.body);
    assert_eq!(ok.json()["job_runs"].as_array().unwrap().len(), 3);
    // The CLI has the same cap and says how to raise it.
    let out = p
        .command()
        .args(["analyze", "a/2020-01-{01..30}"])
        .env("DATABUILD_MAX_REFS", "10")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("would name 30 refs, more than the 10") && err.contains("DATABUILD_MAX_REFS"),
        "{err}"
    );
    // A body declared larger than the limit is refused as JSON before it is read.
    let big = send(
        &s,
        "POST",
        "/api/v1/builds",
        &[
            ("Content-Type", "application/json"),
            ("Content-Length", "2000000"),
        ],
        "{}",
    );
    assert_eq!(big.status, 413);
    assert_eq!(big.json()["code"], "too_large");
}

#[test]
fn sql_and_event_streams_are_limited_in_number() {
    let p = project();
    let s = Service::start(
        &p,
        &[
            ("DATABUILD_SQL_CONCURRENCY", "1"),
            ("DATABUILD_MAX_STREAMS", "1"),
        ],
    );
    let slow = r#"{"query": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000) SELECT count(*) FROM c"}"#;
    let busy = std::thread::scope(|scope| {
        let first = scope.spawn(|| post_json(&s, "/api/v1/sql", &[], slow));
        let second =
            crate::util::eventually(Duration::from_secs(5), "a second query refused", || {
                std::thread::sleep(Duration::from_millis(50));
                let a = post_json(&s, "/api/v1/sql", &[], r#"{"query": "SELECT 1"}"#);
                (a.status == 429).then_some(a)
            });
        // The service itself stays responsive meanwhile.
        let started = Instant::now();
        assert_eq!(get(&s, "/healthz", &[]).status, 200);
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(first.join().unwrap().status, 200);
        second
    });
    assert_eq!(busy.json()["code"], "busy");
    assert_eq!(busy.header("retry-after").as_deref(), Some("1"));
    // Once the first is done, queries run again.
    assert_eq!(
        post_json(&s, "/api/v1/sql", &[], r#"{"query": "SELECT 1"}"#).status,
        200
    );
    // One event stream at a time: a slow build's stream holds the only permit.
    let started = post_json(
        &s,
        "/api/v1/builds",
        &[],
        r#"{"partitions": ["a/2020-01-03"], "force": true}"#,
    );
    assert_eq!(started.status, 202, "{}", started.body);
    let id = started.json()["build_request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let addr = s.url.trim_start_matches("http://").to_string();
    let mut held = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        held,
        "GET /api/v1/builds/{id}/events/stream HTTP/1.1\r\nHost: {addr}\r\n\r\n"
    )
    .unwrap();
    let mut first_bytes = [0u8; 12];
    held.read_exact(&mut first_bytes).unwrap();
    assert_eq!(&first_bytes, b"HTTP/1.1 200");
    let second = get(&s, &format!("/api/v1/builds/{id}/events/stream"), &[]);
    assert_eq!(second.status, 429, "{}", second.body);
    drop(held);
    crate::util::eventually(Duration::from_secs(5), "the permit returned", || {
        let id = id.clone();
        let s = &s;
        std::thread::sleep(Duration::from_millis(50));
        (get(s, &format!("/api/v1/builds/{id}/events/stream"), &[]).status == 200).then_some(())
    });
}

#[test]
fn a_public_address_needs_a_token_or_an_explicit_flag() {
    let p = project();
    let out = p
        .command()
        .args(["serve", "--bind", "0.0.0.0:0"])
        .env_remove("DATABUILD_TOKEN")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("refusing to serve 0.0.0.0:0 without DATABUILD_TOKEN")
            && err.contains("--allow-open"),
        "{err}"
    );
    let bad = p
        .command()
        .args(["serve", "--bind", "127.0.0.1:0"])
        .env_remove("DATABUILD_TOKEN")
        .env("DATABUILD_READ_TOKEN", "r")
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr)
        .contains("DATABUILD_READ_TOKEN is set but DATABUILD_TOKEN is not"));
    let open = Service::start_with_args(&p, &["--bind", "0.0.0.0:0", "--allow-open"], &[]);
    assert_eq!(get(&open, "/healthz", &[]).status, 200);
}

#[test]
fn what_a_review_found_stays_fixed() {
    let p = project();
    let s = Service::start(&p, &[("DATABUILD_TOKEN", "w-s3cret")]);
    // Browsers drop a tab from a URL: `/\t/evil.example` would be `//evil.example`.
    let token = csrf(&s, "/login");
    for next in [
        "%2F%09%2Fevil.example",
        "%2F%5Cevil.example",
        "%2F%2Fevil.example",
    ] {
        let a = post_form(
            &s,
            "/login",
            &[],
            &format!("token=w-s3cret&next={next}&csrf={token}"),
        );
        assert_eq!(a.header("location").as_deref(), Some("/"), "{next}");
    }
    // Planning runs config executables: not for strangers once a token is set.
    let body = r#"{"partitions": ["dyn/k=x"]}"#;
    assert_eq!(post_json(&s, "/api/v1/analyze", &[], body).status, 401);
    assert_eq!(get(&s, "/analyze?refs=dyn%2Fk%3Dx", &[]).status, 401);
    assert!(!p.path().join("config-calls.log").exists());
    assert_eq!(
        post_json(&s, "/api/v1/analyze", &[BEARER], body).status,
        200
    );
    // A ref text of half a megabyte around a million-way range: refused from its size.
    let huge = format!(
        r#"{{"partitions": ["a/{}{{1..1000000}}"]}}"#,
        "A".repeat(500_000)
    );
    let started = Instant::now();
    let a = post_json(&s, "/api/v1/analyze", &[BEARER], &huge);
    assert_eq!(a.status, 400, "{}", &a.body[..a.body.len().min(300)]);
    assert!(a.body.len() < 1000, "the error quotes a little");
    assert!(started.elapsed() < Duration::from_secs(2));
    // No Host header at all.
    let addr = s.url.trim_start_matches("http://");
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.write_all(b"GET /healthz HTTP/1.0\r\n\r\n").unwrap();
    let mut answer = String::new();
    let _ = stream.read_to_string(&mut answer);
    assert!(
        answer.starts_with("HTTP/1.0 400") || answer.starts_with("HTTP/1.1 400"),
        "{answer}"
    );
}

#[test]
fn a_query_whose_client_hung_up_keeps_its_slot_until_it_ends() {
    let p = project();
    let s = Service::start(&p, &[("DATABUILD_SQL_CONCURRENCY", "1")]);
    let slow = r#"{"query": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 5000000) SELECT count(*) FROM c"}"#;
    let addr = s.url.trim_start_matches("http://").to_string();
    let mut hung_up = std::net::TcpStream::connect(&addr).unwrap();
    write!(
        hung_up,
        "POST /api/v1/sql HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{slow}",
        slow.len()
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(200));
    drop(hung_up);
    std::thread::sleep(Duration::from_millis(100));
    let next = post_json(&s, "/api/v1/sql", &[], r#"{"query": "SELECT 1"}"#);
    assert_eq!(
        next.status, 429,
        "the hung-up query still runs: {}",
        next.body
    );
    crate::util::eventually(Duration::from_secs(20), "the slot back", || {
        std::thread::sleep(Duration::from_millis(100));
        (post_json(&s, "/api/v1/sql", &[], r#"{"query": "SELECT 1"}"#).status == 200).then_some(())
    });
}

#[test]
fn webhooks_take_the_token_only_as_a_bearer_header_and_never_from_a_web_page() {
    let p = Project::new(
        r#"
[graph]
name = "hooks"
[[source]]
name = "orders"
kind = "webhook"
retention = "7d"
body_format = "json"
"#,
    );
    let s = Service::start(&p, &[("DATABUILD_TOKEN", "w-s3cret")]);
    let token = csrf(&s, "/login");
    let login = post_form(
        &s,
        "/login",
        &[],
        &format!("token=w-s3cret&next=%2F&csrf={token}"),
    );
    let cookie = login.header("set-cookie").unwrap();
    let session = cookie.split(';').next().unwrap();
    let record = r#"{"order_id": 1}"#;
    let by_cookie = post_json(
        &s,
        "/api/v1/webhooks/orders",
        &[("Cookie", session)],
        record,
    );
    assert_eq!(by_cookie.status, 401, "{}", by_cookie.body);
    let from_page = post_json(
        &s,
        "/api/v1/webhooks/orders",
        &[BEARER, ("Origin", "http://evil.example")],
        record,
    );
    assert_eq!(from_page.status, 403, "{}", from_page.body);
    let sender = post_json(&s, "/api/v1/webhooks/orders", &[BEARER], record);
    assert_eq!(sender.status, 200, "{}", sender.body);
}

/// A client that opens a connection and never finishes its request's headers (slowloris) is
/// cut off after 30 s, trickling header lines or not; meanwhile others are served. Connections
/// that stayed open for good used up the descriptors the builds' jobs need.
#[test]
fn a_request_whose_headers_never_end_is_cut_off() {
    let p = project();
    let s = Service::start(&p, &[]);
    let addr = s.url.trim_start_matches("http://").to_string();
    let mut idle = std::net::TcpStream::connect(&addr).unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let mut trickle = std::net::TcpStream::connect(&addr).unwrap();
    trickle.write_all(b"GET /healthz HTTP/1.1\r\n").unwrap();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(25) {
        std::thread::sleep(Duration::from_secs(4));
        let _ = trickle.write_all(b"X-Slow: 1\r\n");
        assert_eq!(get(&s, "/healthz", &[]).status, 200, "others are served");
    }
    for mut stream in [idle, trickle] {
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        let mut buf = [0u8; 64];
        // Closed by the service: end of file, or a reset if a write crossed the close.
        let read = stream.read(&mut buf);
        assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
        assert!(
            !matches!(&read, Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::TimedOut),
            "still open after {:?}",
            started.elapsed()
        );
    }
    assert!(started.elapsed() < Duration::from_secs(45));
}

/// A dashboard form whose ref is not UTF-8 is refused, as the API refuses it, not built as
/// another ref (with U+FFFD in its place).
#[test]
fn a_form_field_that_is_not_text_is_refused() {
    let p = project();
    let s = Service::start(&p, &[]);
    let token = csrf(&s, "/");
    let before = build_count(&p);
    let bad = post_form(
        &s,
        "/ui/build",
        &[],
        &format!("refs=a%2F2020-01-0%FF&csrf={token}"),
    );
    assert_eq!(bad.status, 400, "{}", bad.body);
    assert!(bad.body.contains("`refs` is not UTF-8"), "{}", bad.body);
    assert_eq!(build_count(&p), before, "nothing was built");
}

/// A connection to `addr` from the local address `from` (all of 127/8 is loopback on Linux).
fn connect_from(from: &str, addr: std::net::SocketAddr) -> std::net::TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    let local: std::net::SocketAddr = format!("{from}:0").parse().unwrap();
    socket
        .bind(&local.into())
        .expect("bind the client's address");
    socket.connect(&addr.into()).expect("connect");
    socket.into()
}

/// Whether the service closed `stream` (end of file, or a reset) within `wait`.
fn closed_within(stream: &mut std::net::TcpStream, wait: Duration) -> bool {
    stream.set_read_timeout(Some(wait)).unwrap();
    let mut buf = [0u8; 64];
    match stream.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) => !matches!(
            e.kind(),
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
        ),
    }
}

/// One address holding all its connections, silent, locks no one else out: its next connection
/// is closed at once, another address is answered at once, and the silent ones are closed
/// after the first-byte timeout (then the address is served again). About 1,024 idle sockets
/// from one client used to reset everyone's connections for 30 s, before any authentication.
#[test]
fn idle_connections_from_one_address_lock_no_one_else_out() {
    let p = project();
    let s = Service::start(
        &p,
        &[
            ("DATABUILD_MAX_CONNECTIONS_PER_ADDRESS", "8"),
            ("DATABUILD_FIRST_BYTE_TIMEOUT", "2s"),
        ],
    );
    let addr: std::net::SocketAddr = s.url.trim_start_matches("http://").parse().unwrap();
    let started = Instant::now();
    let mut held: Vec<_> = (0..8).map(|_| connect_from("127.0.0.1", addr)).collect();
    let mut ninth = connect_from("127.0.0.1", addr);
    assert!(
        closed_within(&mut ninth, Duration::from_millis(1500)),
        "a ninth connection from the same address is closed at once"
    );
    let mut other = connect_from("127.0.0.2", addr);
    let asked = Instant::now();
    write!(
        other,
        "GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut answer = String::new();
    other.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        asked.elapsed() < Duration::from_millis(500),
        "{:?}",
        asked.elapsed()
    );
    for stream in &mut held {
        assert!(
            closed_within(stream, Duration::from_secs(5)),
            "a silent connection is closed after the first-byte timeout"
        );
    }
    let closed_after = started.elapsed();
    assert!(
        (Duration::from_millis(1500)..Duration::from_secs(5)).contains(&closed_after),
        "{closed_after:?}"
    );
    // Its slots given back, the address is served again.
    assert_eq!(get(&s, "/healthz", &[]).status, 200);
}

/// A config executable that takes its time: each analysis of `dyn/…` waits on it.
const SLOW_CONFIG: &str = r#"
import json, sys, time
time.sleep(3)
print(json.dumps({"configs": [{"outputs": [out], "inputs": []} for out in sys.argv[1:]]}))
"#;

/// Analyses plan at most `DATABUILD_ANALYZE_CONCURRENCY` (default 2) at once: a third, from the
/// API or the dashboard, is answered 429 `busy` with `Retry-After`, and the service stays
/// responsive meanwhile. (Three analyses of a million refs at once took 2.7 GB.)
#[test]
fn analyses_are_limited_in_number() {
    let p = project();
    p.file("config.py", SLOW_CONFIG);
    let s = Service::start(&p, &[]);
    let slow = |k: &str| format!(r#"{{"partitions": ["dyn/k={k}"]}}"#);
    std::thread::scope(|scope| {
        let first = scope.spawn(|| post_json(&s, "/api/v1/analyze", &[], &slow("x")));
        let second = scope.spawn(|| post_json(&s, "/api/v1/analyze", &[], &slow("y")));
        let third = crate::util::eventually(Duration::from_secs(3), "a third refused", || {
            std::thread::sleep(Duration::from_millis(50));
            let a = post_json(&s, "/api/v1/analyze", &[], &slow("z"));
            (a.status == 429).then_some(a)
        });
        assert_eq!(third.json()["code"], "busy");
        assert!(third.json()["error"]
            .as_str()
            .unwrap()
            .contains("2 analyses"));
        assert_eq!(third.header("retry-after").as_deref(), Some("1"));
        let page = get(&s, "/analyze?refs=dyn%2Fk%3Dz", &[]);
        assert_eq!(page.status, 429, "{}", page.body);
        assert_eq!(page.header("retry-after").as_deref(), Some("1"));
        let started = Instant::now();
        assert_eq!(get(&s, "/healthz", &[]).status, 200);
        assert!(started.elapsed() < Duration::from_millis(500));
        assert_eq!(first.join().unwrap().status, 200);
        assert_eq!(second.join().unwrap().status, 200);
    });
    // Their slots given back, analyses run again.
    assert_eq!(
        post_json(
            &s,
            "/api/v1/analyze",
            &[],
            r#"{"partitions": ["a/2020-01-01"]}"#
        )
        .status,
        200
    );
}

/// Reads that compute (planning, status re-checked by config executables, SQL) are refused to
/// another site's pages, as writes are, so no web page can have its visitors' browsers make the
/// service plan a million refs; the service's own pages, typed addresses and clients that are
/// not browsers still get them, and reads that only look up stay open to links.
#[test]
fn cross_site_reads_that_compute_are_refused() {
    let p = project();
    let s = Service::start(&p, &[]);
    let computing = [
        "/analyze?refs=a%2F2020-01-01",
        "/partitions/a%2F2020-01-01",
        "/taint?ref=a%2F2020-01-01",
        "/sql?q=SELECT%201",
        "/api/v1/partitions/a%2F2020-01-01/explain",
        "/api/v1/partitions/a%2F2020-01-01/status",
    ];
    for path in computing {
        for cross in [
            ("Sec-Fetch-Site", "cross-site"),
            ("Origin", "http://evil.example"),
        ] {
            let a = get(&s, path, &[cross]);
            assert_eq!(a.status, 403, "{path} {cross:?}: {}", a.body);
            assert_eq!(a.json()["code"], "cross_origin", "{path}");
            assert!(a.body.contains("type its address"), "{}", a.body);
        }
        for same in [
            &[("Sec-Fetch-Site", "same-origin")][..],
            &[("Sec-Fetch-Site", "none")],
            &[],
        ] {
            let a = get(&s, path, same);
            assert_eq!(a.status, 200, "{path} {same:?}: {}", a.body);
        }
    }
    let a = post_json(
        &s,
        "/api/v1/analyze",
        &[("Sec-Fetch-Site", "cross-site")],
        r#"{"partitions": ["a/2020-01-01"]}"#,
    );
    assert_eq!(a.status, 403, "{}", a.body);
    for looks_up in ["/builds", "/partitions", "/api/v1/builds"] {
        let a = get(&s, looks_up, &[("Sec-Fetch-Site", "cross-site")]);
        assert_eq!(a.status, 200, "{looks_up}: {}", a.body);
    }
}
