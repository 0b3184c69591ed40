//! Who may do what: tokens, dashboard sessions, CSRF tokens, and the checks every request
//! passes before a handler sees it (Host allow-list, cross-site requests, body size, roles).
//!
//! The model, in one place:
//! - No token configured: the service is open (meant for one person on loopback); everyone is a
//!   [`Role::Writer`].
//! - `DATABUILD_TOKEN`: writes need it (bearer header, or a dashboard session made from it);
//!   SQL needs a token; other reads are open, but anonymous readers never see where runs ran
//!   (hosts, pids, log paths: [`strip_private`]).
//! - `--guard-reads` (implied by `DATABUILD_READ_TOKEN`): every read needs a token too; the
//!   read token gives [`Role::Reader`], which reads, runs SQL and analyzes but never writes.
//!
//! Webhooks are outside all of this: each source authenticates its senders itself.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Redirect, Response};
use hmac::{Hmac, Mac};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::error::AppError;
use crate::AppState;

/// The name of the dashboard's session cookie.
pub const SESSION_COOKIE: &str = "databuild_session";

/// How long a dashboard session lasts.
const SESSION_SECONDS: u64 = 7 * 24 * 3600;

/// Who the caller is, from least to most trusted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    Anonymous,
    Reader,
    Writer,
}

impl Role {
    fn name(self) -> &'static str {
        match self {
            Role::Anonymous => "anonymous",
            Role::Reader => "reader",
            Role::Writer => "writer",
        }
    }

    fn parse(s: &str) -> Option<Role> {
        match s {
            "reader" => Some(Role::Reader),
            "writer" => Some(Role::Writer),
            _ => None,
        }
    }
}

/// The access settings of one service, read once at start.
#[derive(Debug, Clone, Default)]
pub struct Access {
    /// Gives every right (`DATABUILD_TOKEN`).
    pub token: Option<String>,
    /// Gives reads only (`DATABUILD_READ_TOKEN`); implies `guard_reads`.
    pub read_token: Option<String>,
    /// Every read needs a token too.
    pub guard_reads: bool,
    /// Host names, beyond loopback names and IP addresses, that requests may be addressed to.
    pub allowed_hosts: Vec<String>,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum AccessError {
    #[error("DATABUILD_READ_TOKEN is set but DATABUILD_TOKEN is not: without a write token anyone could write; set DATABUILD_TOKEN too")]
    ReadTokenWithoutToken,
    #[error("DATABUILD_READ_TOKEN and DATABUILD_TOKEN are the same: give the read token a value of its own")]
    SameTokens,
    #[error("--guard-reads needs DATABUILD_TOKEN (or DATABUILD_READ_TOKEN) to be set")]
    GuardWithoutToken,
}

impl Access {
    pub fn validate(&self) -> Result<(), AccessError> {
        match (&self.token, &self.read_token) {
            (None, Some(_)) => Err(AccessError::ReadTokenWithoutToken),
            (Some(t), Some(r)) if t == r => Err(AccessError::SameTokens),
            (None, None) if self.guard_reads => Err(AccessError::GuardWithoutToken),
            _ => Ok(()),
        }
    }

    fn reads_guarded(&self) -> bool {
        self.guard_reads || self.read_token.is_some()
    }
}

/// The access settings with this process's secret, which signs CSRF tokens.
pub struct Guard {
    access: Access,
    secret: [u8; 32],
}

impl Guard {
    pub fn new(access: Access) -> Guard {
        let mut secret = [0u8; 32];
        secret[..16].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        secret[16..].copy_from_slice(uuid::Uuid::new_v4().as_bytes());
        Guard { access, secret }
    }

    /// Whether any token is configured (the dashboard then asks for one).
    pub fn has_token(&self) -> bool {
        self.access.token.is_some()
    }

    /// Whether answers to `role` leave out where runs ran (see [`strip_private`]).
    pub fn hides_private(&self, role: Role) -> bool {
        role == Role::Anonymous && self.has_token()
    }

    /// The role an `Authorization: Bearer` header gives (no session cookie: for webhooks).
    pub fn bearer_role(&self, headers: &HeaderMap) -> Role {
        if self.access.token.is_none() {
            return Role::Writer;
        }
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .map_or(Role::Anonymous, |t| self.token_role(t))
    }

    /// The role a token gives, compared in constant time.
    pub fn token_role(&self, given: &str) -> Role {
        match (&self.access.token, &self.access.read_token) {
            (None, _) => Role::Writer,
            (Some(t), _) if same_secret(given, t) => Role::Writer,
            (_, Some(r)) if same_secret(given, r) => Role::Reader,
            _ => Role::Anonymous,
        }
    }

    /// The caller's role from its `Authorization` header or its session cookie.
    pub fn role(&self, headers: &HeaderMap) -> Role {
        let bearer = self.bearer_role(headers);
        if self.access.token.is_none() {
            return bearer;
        }
        let session = cookie(headers, SESSION_COOKIE)
            .map_or(Role::Anonymous, |c| self.session_role(c, now_seconds()));
        bearer.max(session)
    }

    /// A session cookie's value for `role`: the role, when it was issued, and a MAC keyed by
    /// the token that gives the role (so a new token ends every session made from the old one).
    pub fn session_value(&self, role: Role, issued: u64) -> Option<String> {
        let key = self.role_token(role)?;
        let payload = format!("{}.{issued}", role.name());
        Some(format!("{payload}.{}", hex(&mac(key.as_bytes(), &payload))))
    }

    fn session_role(&self, value: &str, now: u64) -> Role {
        let mut parts = value.splitn(3, '.');
        let (Some(role), Some(issued), Some(_mac)) = (parts.next(), parts.next(), parts.next())
        else {
            return Role::Anonymous;
        };
        let (Some(role), Ok(issued)) = (Role::parse(role), issued.parse::<u64>()) else {
            return Role::Anonymous;
        };
        if now.saturating_sub(issued) > SESSION_SECONDS || issued > now + 60 {
            return Role::Anonymous;
        }
        match self.session_value(role, issued) {
            Some(expected) if same_secret(&expected, value) => role,
            _ => Role::Anonymous,
        }
    }

    fn role_token(&self, role: Role) -> Option<&str> {
        match role {
            Role::Writer => self.access.token.as_deref(),
            Role::Reader => self.access.read_token.as_deref(),
            Role::Anonymous => None,
        }
    }

    /// The `Set-Cookie` value that starts a session.
    pub fn session_cookie(&self, role: Role) -> Option<String> {
        let value = self.session_value(role, now_seconds())?;
        Some(session_cookie_header(&value, SESSION_SECONDS))
    }

    /// The CSRF token every dashboard form carries. A page of another site cannot read it (the
    /// Host check keeps DNS rebinding out), so a form it forges lacks it.
    pub fn csrf_token(&self) -> String {
        hex(&mac(&self.secret, "csrf"))
    }

    pub fn csrf_ok(&self, given: Option<&str>) -> bool {
        given.is_some_and(|g| same_secret(g, &self.csrf_token()))
    }

    /// Loopback names and IP literals are always fine (a rebinding attack needs a name it
    /// controls); other names only when configured.
    pub fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host);
        name.eq_ignore_ascii_case("localhost")
            || name.parse::<IpAddr>().is_ok()
            || self
                .access
                .allowed_hosts
                .iter()
                .any(|h| h.eq_ignore_ascii_case(name))
    }

    /// The role a request needs, by method and path.
    fn required(&self, method: &Method, path: &str) -> Role {
        let public = matches!(path, "/healthz" | "/login" | "/logout")
            || path.starts_with("/assets/")
            // Dashboard forms authenticate with their own fields (see `form_role`).
            || path.starts_with("/ui/");
        // SQL and planning run the caller's queries and the graph's config executables: never
        // for strangers once a token is set. They only read, so a read token will do.
        let runs_code = matches!(
            path,
            "/sql" | "/api/v1/sql" | "/analyze" | "/api/v1/analyze"
        );
        if public {
            Role::Anonymous
        } else if is_mutating(method) && !runs_code {
            Role::Writer
        } else if runs_code || self.access.reads_guarded() {
            Role::Reader
        } else {
            Role::Anonymous
        }
    }
}

fn is_mutating(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// A `Set-Cookie` value of the session cookie: `value` for `max_age` seconds (0 ends it).
pub fn session_cookie_header(value: &str, max_age: u64) -> String {
    format!("{SESSION_COOKIE}={value}; Path=/; HttpOnly; SameSite=Strict; Max-Age={max_age}")
}

/// Equality of two secrets in time that depends on neither: both are hashed first, so neither
/// their length nor the first differing byte shows.
fn same_secret(a: &str, b: &str) -> bool {
    let (x, y) = (Sha256::digest(a.as_bytes()), Sha256::digest(b.as_bytes()));
    x.iter()
        .zip(y.iter())
        .fold(0u8, |acc, (p, q)| acc | (p ^ q))
        == 0
}

fn mac(key: &[u8], message: &str) -> Vec<u8> {
    let mut m = Hmac::<Sha256>::new_from_slice(key).expect("HMAC takes any key");
    m.update(message.as_bytes());
    m.finalize().into_bytes().to_vec()
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn now_seconds() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// `example.com` of `example.com:8080`, `::1` of `[::1]:8080`.
fn host_name(host: &str) -> &str {
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or(rest);
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    }
}

pub(crate) fn cookie<'h>(headers: &'h HeaderMap, name: &str) -> Option<&'h str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(k, _)| *k == name)
        .map(|(_, v)| v)
}

/// Where a browser's request came from, when not from a page of this service.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrossSite {
    /// Its `Origin`, another site's (or `null`).
    Page(String),
    /// No `Origin`, but `Sec-Fetch-Site: cross-site` (or `same-site`: another origin of the site).
    Site,
}

impl CrossSite {
    fn from(&self) -> String {
        match self {
            CrossSite::Page(origin) => format!("the page `{origin}`"),
            CrossSite::Site => "another site".to_string(),
        }
    }

    /// The refusal of a state-changing request.
    pub fn refuse_change(&self) -> AppError {
        AppError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            format!(
                "a request from {} cannot change this service: only its own pages can",
                self.from()
            ),
        )
    }

    /// The refusal of a read that computes (plans, runs config executables or SQL): any page
    /// could otherwise have browsers ask for heavy work over and over.
    fn refuse_compute(&self, path: &str) -> AppError {
        AppError::new(
            StatusCode::FORBIDDEN,
            "cross_origin",
            format!(
                "a request from {} cannot make this service compute `{path}`: open it from the service's own pages, or type its address",
                self.from()
            ),
        )
    }
}

/// Whether a browser's request comes from a page of this service: its `Origin` (or, without
/// one, its `Sec-Fetch-Site`) says so. Clients that are not browsers send neither and pass, as
/// do typed addresses and bookmarks (`Sec-Fetch-Site: none`). [`check`] asks it of every write
/// and every read that computes ([`computes`]); webhooks, outside it, ask it themselves.
pub fn same_origin(headers: &HeaderMap) -> Result<(), CrossSite> {
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if let Some(origin) = headers.get(header::ORIGIN) {
        let origin = origin.to_str().unwrap_or("null");
        let authority = origin
            .split_once("://")
            .map(|(_, rest)| rest.trim_end_matches('/'));
        return match (authority, host) {
            (Some(a), Some(h)) if a.eq_ignore_ascii_case(h) => Ok(()),
            _ => Err(CrossSite::Page(origin.to_string())),
        };
    }
    // `same-site` is another origin too (a sibling subdomain's page), whose requests carry
    // `SameSite=Strict` cookies: only the service's own pages and typed addresses pass.
    match headers.get("sec-fetch-site").and_then(|v| v.to_str().ok()) {
        Some("cross-site" | "same-site") => Err(CrossSite::Site),
        _ => Ok(()),
    }
}

/// The reads that compute rather than look up: planning (`analyze`, a partition's page and its
/// `explain`, a taint's preview), a partition's status (which may run config executables to
/// re-check it), and SQL. Another site may not have a browser ask for them.
fn computes(path: &str) -> bool {
    matches!(path, "/analyze" | "/sql" | "/taint" | "/api/v1/analyze")
        || path.starts_with("/partitions/")
        || (path.starts_with("/api/v1/partitions/")
            && (path.ends_with("/explain")
                || path.ends_with("/status")
                || path.ends_with("/forecast")))
}

/// Whether a cross-site read of a computing page is a person following a link to a partition's
/// page (a top-level navigation: `Sec-Fetch-Mode: navigate`, `Sec-Fetch-Dest: document`, no
/// `Origin`), as from a chat message or a mail. That page is served, with no config executable
/// run; anything else another site has a browser fetch (images, scripts, frames, `fetch`, form
/// posts) may not make this service compute.
fn followed_link(cross: &CrossSite, path: &str, headers: &HeaderMap) -> bool {
    let header = |name| headers.get(name).and_then(|v| v.to_str().ok());
    *cross == CrossSite::Site
        && path.starts_with("/partitions/")
        && header("sec-fetch-mode") == Some("navigate")
        && header("sec-fetch-dest") == Some("document")
}

/// Every request but webhooks passes here first.
pub async fn check(
    State(state): State<std::sync::Arc<AppState>>,
    mut request: Request,
    next: Next,
) -> Response {
    let guard = &state.guard;
    let headers = request.headers();
    // Browsers always send a Host; a request without a readable one is refused, not waved on.
    let Some(host) = headers.get(header::HOST).and_then(|v| v.to_str().ok()) else {
        return AppError::new(
            StatusCode::BAD_REQUEST,
            "bad_host",
            "the request has no readable Host header",
        )
        .into_response();
    };
    if !guard.host_allowed(host) {
        let name = host_name(host);
        return AppError::new(
            StatusCode::MISDIRECTED_REQUEST,
            "bad_host",
            format!(
                "this service does not answer to the host name `{name}`; if it is yours, start it with `--allow-host {name}`"
            ),
        )
        .into_response();
    }
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|n| *n > crate::BODY_LIMIT as u64) {
        return AppError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "too_large",
            format!(
                "the request body is {n} bytes; the limit is {} bytes",
                crate::BODY_LIMIT
            ),
        )
        .into_response();
    }
    let method = request.method().clone();
    let path = request.uri().path().to_string();
    let cross_site = same_origin(headers).err();
    if let Some(cross) = &cross_site {
        if is_mutating(&method) {
            return cross.refuse_change().into_response();
        }
        if computes(&path) && !followed_link(cross, &path, headers) {
            return cross.refuse_compute(&path).into_response();
        }
    }
    // Any read another site has a browser make (a followed link, an image, a script) reads as
    // a caller without a token would: what the log knows, no config executable run (see
    // `environment::Env::engine_for`), whatever the page's statuses would otherwise re-check.
    let role = match cross_site {
        Some(_) => Role::Anonymous,
        None => guard.role(headers),
    };
    let needed = guard.required(&method, &path);
    if role < needed {
        let html = headers
            .get(header::ACCEPT)
            .and_then(|v| v.to_str().ok())
            .is_some_and(|a| a.contains("text/html"));
        if html && method == Method::GET && !path.starts_with("/api/") {
            let next = request
                .uri()
                .path_and_query()
                .map_or("/", |p| p.as_str())
                .to_string();
            return Redirect::to(&format!("/login?next={}", crate::encode_segment(&next)))
                .into_response();
        }
        return AppError::unauthorized(needed == Role::Writer).into_response();
    }
    request.extensions_mut().insert(role);
    let response = next.run(request).await;
    if guard.hides_private(role) {
        return strip_private_response(response).await;
    }
    response
}

/// Headers every answer carries: no framing by other sites, no content sniffing.
pub async fn headers(request: Request, next: Next) -> Response {
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.insert("x-frame-options", HeaderValue::from_static("DENY"));
    h.insert(
        "content-security-policy",
        HeaderValue::from_static("frame-ancestors 'none'"),
    );
    h.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    h.insert("referrer-policy", HeaderValue::from_static("same-origin"));
    response
}

/// The fields that say where runs ran: hosts, process ids, paths on the service's machine.
const PRIVATE_FIELDS: &[&str] = &["owner", "host", "pid", "log_path"];

/// Removes [`PRIVATE_FIELDS`] at any depth of an answer for an anonymous reader.
pub fn strip_private(v: &mut Value) {
    match v {
        Value::Object(map) => {
            map.retain(|k, _| !PRIVATE_FIELDS.contains(&k.as_str()));
            map.values_mut().for_each(strip_private);
        }
        Value::Array(items) => items.iter_mut().for_each(strip_private),
        _ => {}
    }
}

/// The most of a JSON answer rewritten for an anonymous reader (larger ones are refused).
const STRIP_LIMIT: usize = 256 * 1024 * 1024;

async fn strip_private_response(response: Response) -> Response {
    let json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.to_ascii_lowercase().contains("json"));
    if !json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, STRIP_LIMIT).await else {
        return AppError::internal("an answer too large to redact").into_response();
    };
    // An answer that cannot be checked is not passed on unchecked.
    let Ok(mut value) = serde_json::from_slice::<Value>(&bytes) else {
        return AppError::internal("a JSON answer that does not parse").into_response();
    };
    strip_private(&mut value);
    let body = serde_json::to_vec(&value).expect("values serialize");
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, axum::body::Body::from(body))
}

/// The role a dashboard form acts with: the session's, or the one its `token` field gives.
pub fn form_role(guard: &Guard, session: Role, token: Option<&str>) -> Role {
    session.max(
        token
            .filter(|t| !t.is_empty())
            .map_or(Role::Anonymous, |t| guard.token_role(t)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn guard(token: Option<&str>, read: Option<&str>) -> Guard {
        Guard::new(Access {
            token: token.map(str::to_string),
            read_token: read.map(str::to_string),
            ..Default::default()
        })
    }

    #[test]
    fn tokens_give_their_roles_and_nothing_else_does() {
        let g = guard(Some("w-secret"), Some("r-secret"));
        assert_eq!(g.token_role("w-secret"), Role::Writer);
        assert_eq!(g.token_role("r-secret"), Role::Reader);
        for wrong in ["", "w-secre", "w-secret ", "W-SECRET", "r-secret\0"] {
            assert_eq!(g.token_role(wrong), Role::Anonymous, "{wrong:?}");
        }
        assert_eq!(guard(None, None).token_role("anything"), Role::Writer);
    }

    #[test]
    fn sessions_are_signed_by_their_token_and_expire() {
        let g = guard(Some("w"), Some("r"));
        let now = now_seconds();
        let writer = g.session_value(Role::Writer, now).unwrap();
        assert_eq!(g.session_role(&writer, now), Role::Writer);
        let reader = g.session_value(Role::Reader, now).unwrap();
        assert_eq!(g.session_role(&reader, now), Role::Reader);
        // A reader cannot promote its cookie, nor can a forged or old one pass.
        let promoted = reader.replacen("reader", "writer", 1);
        assert_eq!(g.session_role(&promoted, now), Role::Anonymous);
        assert_eq!(g.session_role("writer.1.00", now), Role::Anonymous);
        assert_eq!(
            g.session_role(&writer, now + SESSION_SECONDS + 1),
            Role::Anonymous
        );
        // A new token ends the old token's sessions.
        assert_eq!(
            guard(Some("w2"), Some("r")).session_role(&writer, now),
            Role::Anonymous
        );
    }

    #[test]
    fn hosts_are_loopback_ip_literals_or_configured_names() {
        let mut g = guard(None, None);
        for ok in [
            "localhost",
            "localhost:8080",
            "127.0.0.1:8080",
            "[::1]:8080",
            "10.1.2.3",
        ] {
            assert!(g.host_allowed(ok), "{ok}");
        }
        assert!(!g.host_allowed("rebind.attacker.example"));
        assert!(!g.host_allowed("localhost.attacker.example:8080"));
        g.access.allowed_hosts.push("databuild.internal".into());
        assert!(g.host_allowed("DataBuild.internal:443"));
    }

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(*k, HeaderValue::from_str(v).unwrap());
        }
        h
    }

    #[test]
    fn cross_site_changes_are_refused_and_other_clients_pass() {
        let with = |pairs: &[(&'static str, &str)]| same_origin(&headers(pairs));
        assert!(with(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://127.0.0.1:8080")
        ])
        .is_ok());
        assert!(with(&[
            ("host", "127.0.0.1:8080"),
            ("origin", "http://evil.example")
        ])
        .is_err());
        assert!(with(&[("host", "127.0.0.1:8080"), ("origin", "null")]).is_err());
        assert!(with(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "cross-site")]).is_err());
        assert!(with(&[("host", "127.0.0.1:8080")]).is_ok());
        assert!(with(&[("host", "127.0.0.1:8080"), ("sec-fetch-site", "none")]).is_ok());
        assert!(with(&[
            ("host", "127.0.0.1:8080"),
            ("sec-fetch-site", "same-origin")
        ])
        .is_ok());
    }

    #[test]
    fn reads_that_compute_are_planning_status_and_sql() {
        for path in [
            "/analyze",
            "/sql",
            "/taint",
            "/partitions/a%2F2020-01-01",
            "/api/v1/analyze",
            "/api/v1/partitions/a%2F2020-01-01/explain",
            "/api/v1/partitions/a%2F2020-01-01/status",
        ] {
            assert!(computes(path), "{path}");
        }
        for path in ["/", "/partitions", "/builds", "/api/v1/builds", "/healthz"] {
            assert!(!computes(path), "{path}");
        }
    }

    #[test]
    fn a_sibling_origin_of_the_site_is_another_origin() {
        let sibling = headers(&[("host", "db.corp.example"), ("sec-fetch-site", "same-site")]);
        assert_eq!(same_origin(&sibling), Err(CrossSite::Site));
    }

    #[test]
    fn only_a_person_following_a_link_to_a_partition_page_gets_it_from_another_site() {
        let link = headers(&[
            ("sec-fetch-site", "cross-site"),
            ("sec-fetch-mode", "navigate"),
            ("sec-fetch-dest", "document"),
        ]);
        let site = CrossSite::Site;
        assert!(followed_link(&site, "/partitions/a%2F1", &link));
        assert!(!followed_link(&site, "/analyze", &link), "planning never");
        let page = CrossSite::Page("http://evil.example".into());
        assert!(
            !followed_link(&page, "/partitions/a%2F1", &link),
            "a posted form"
        );
        for (mode, dest) in [
            ("no-cors", "image"),
            ("navigate", "iframe"),
            ("cors", "empty"),
        ] {
            let fetched = headers(&[
                ("sec-fetch-site", "cross-site"),
                ("sec-fetch-mode", mode),
                ("sec-fetch-dest", dest),
            ]);
            assert!(
                !followed_link(&site, "/partitions/a%2F1", &fetched),
                "{mode} {dest}"
            );
        }
    }

    #[test]
    fn what_each_request_needs() {
        let open_reads = guard(Some("w"), None);
        let get = Method::GET;
        let post = Method::POST;
        assert_eq!(open_reads.required(&get, "/api/v1/builds"), Role::Anonymous);
        assert_eq!(open_reads.required(&post, "/api/v1/builds"), Role::Writer);
        assert_eq!(open_reads.required(&post, "/api/v1/sql"), Role::Reader);
        assert_eq!(open_reads.required(&get, "/sql"), Role::Reader);
        assert_eq!(open_reads.required(&post, "/ui/build"), Role::Anonymous);
        let guarded = guard(Some("w"), Some("r"));
        assert_eq!(guarded.required(&get, "/api/v1/builds"), Role::Reader);
        assert_eq!(guarded.required(&get, "/"), Role::Reader);
        assert_eq!(guarded.required(&get, "/healthz"), Role::Anonymous);
        assert_eq!(guarded.required(&get, "/login"), Role::Anonymous);
        assert_eq!(guarded.required(&post, "/api/v1/analyze"), Role::Reader);
        assert_eq!(
            guarded.required(&Method::DELETE, "/api/v1/wants/x"),
            Role::Writer
        );
    }

    #[test]
    fn access_settings_that_make_no_sense_are_refused() {
        let access = |t: Option<&str>, r: Option<&str>, g: bool| Access {
            token: t.map(str::to_string),
            read_token: r.map(str::to_string),
            guard_reads: g,
            allowed_hosts: vec![],
        };
        assert_eq!(
            access(None, Some("r"), false).validate(),
            Err(AccessError::ReadTokenWithoutToken)
        );
        assert_eq!(
            access(Some("x"), Some("x"), false).validate(),
            Err(AccessError::SameTokens)
        );
        assert_eq!(
            access(None, None, true).validate(),
            Err(AccessError::GuardWithoutToken)
        );
        assert!(access(Some("w"), None, true).validate().is_ok());
    }

    #[test]
    fn private_fields_go_at_any_depth() {
        let mut v = serde_json::json!({"owner": "h/1/2", "runs": [{"job": "a", "host": "h", "pid": 3, "log_path": "/x", "data": {"pid": 4, "env": {}}}]});
        strip_private(&mut v);
        assert_eq!(
            v,
            serde_json::json!({"runs": [{"job": "a", "data": {"env": {}}}]})
        );
    }
}
