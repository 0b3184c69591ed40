//! The environment a request is about (contract section 9): its `env` query parameter, else its
//! `X-DataBuild-Env` header, else prod (the dashboard's pages also read the `databuild_env`
//! cookie, see `dashboard::layout`). [`Env`] is an extractor holding that environment's engines,
//! and the engine work of handlers and pages takes one (`ops::blocking`, `dashboard::layout::page`),
//! so no handler can read prod's log for a request about another environment.
//!
//! [`Opened`] keeps one pair of engines per environment, opened on first use: the full engine and
//! its twin for strangers, which runs no config executable (`Engine::withholding_configs`).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, Uri};
use databuild_exec::Engine;
use databuild_log::environments::PROD;

use crate::engine_api::{self, ApiResult};
use crate::error::AppError;
use crate::guard::Role;
use crate::AppState;

/// The query parameter naming a request's environment.
pub const ENV_PARAM: &str = "env";

/// One environment's engines: the full one, and the one callers without a token read with.
pub struct Engines {
    full: Arc<Engine>,
    strangers: Arc<Engine>,
}

impl Engines {
    pub fn of(engine: Arc<Engine>) -> Engines {
        Engines {
            strangers: Arc::new(engine.withholding_configs()),
            full: engine,
        }
    }
}

/// Every environment's engines this service has opened; prod's from the start.
pub struct Opened {
    prod: Arc<Engines>,
    others: Mutex<HashMap<String, Arc<Engines>>>,
}

impl Opened {
    pub fn new(prod: Arc<Engine>) -> Opened {
        Opened {
            prod: Arc::new(Engines::of(prod)),
            others: Mutex::default(),
        }
    }

    fn cached(&self, name: &str) -> Option<Arc<Engines>> {
        if name == PROD {
            return Some(self.prod.clone());
        }
        self.others
            .lock()
            .expect("environments lock")
            .get(name)
            .cloned()
    }

    /// Environment `name`'s engines, opened now if they were not (blocking: it reads which
    /// environments exist and opens the log). Unknown: a 404 saying how to make it.
    fn open(&self, name: &str) -> ApiResult<Arc<Engines>> {
        if let Some(engines) = self.cached(name) {
            return Ok(engines);
        }
        engine_api::known_environment(&self.prod.full, name)?;
        let engines = Arc::new(Engines::of(Arc::new(self.prod.full.in_environment(name)?)));
        let mut others = self.others.lock().expect("environments lock");
        Ok(others.entry(name.to_string()).or_insert(engines).clone())
    }

    /// Forgets a dropped environment's engines (a build still running keeps its own).
    pub fn forget(&self, name: &str) {
        self.others.lock().expect("environments lock").remove(name);
    }
}

/// The environment a request is about, with its engines.
#[derive(Clone)]
pub struct Env {
    name: String,
    engines: Arc<Engines>,
}

impl Env {
    /// Prod, which every service has.
    pub fn prod(state: &AppState) -> Env {
        Env {
            name: PROD.to_string(),
            engines: state.environments.prod.clone(),
        }
    }

    /// Environment `name`: a 400 if it is no environment's name, a 404 if there is none so named.
    pub async fn named(state: &Arc<AppState>, name: &str) -> ApiResult<Env> {
        databuild_log::environments::check_name(name).map_err(AppError::bad_request)?;
        let engines = match state.environments.cached(name) {
            Some(engines) => engines,
            None => {
                let (state, name) = (state.clone(), name.to_string());
                tokio::task::spawn_blocking(move || state.environments.open(&name)).await??
            }
        };
        Ok(Env {
            name: name.to_string(),
            engines,
        })
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn is_prod(&self) -> bool {
        self.name == PROD
    }

    /// The full engine: for writes and reads that derive no status.
    pub fn engine(&self) -> &Arc<Engine> {
        &self.engines.full
    }

    /// The engine a caller's reads use: for a caller without a token, on a service whose writes
    /// need one, or a link followed from another site, one that never runs a config executable
    /// (contract section 6). (Without a token every caller is a writer: the guard makes a
    /// request anonymous only for those cases.)
    pub fn engine_for(&self, role: Role) -> &Arc<Engine> {
        if role == Role::Anonymous {
            &self.engines.strangers
        } else {
            &self.engines.full
        }
    }

    /// Refuses a request about another environment than prod for what only prod has: wants
    /// (the service's reconciler acts on prod's) and sources (sealed and ingested into prod).
    pub fn prod_only(&self, what: &str) -> ApiResult<()> {
        if self.is_prod() {
            return Ok(());
        }
        Err(AppError::bad_request(format!(
            "{what} are prod's: this service ingests, seals and acts on prod's only; ask without \
             `env={}` (or the {} header)",
            self.name,
            crate::ENVIRONMENT_HEADER
        )))
    }
}

/// The environment a request names: its `env` query parameter, else its header; `None`: neither.
pub fn requested(uri: &Uri, headers: &HeaderMap) -> ApiResult<Option<String>> {
    let axum::extract::Query(pairs): axum::extract::Query<Vec<(String, String)>> =
        axum::extract::Query::try_from_uri(uri)?;
    if let Some((_, name)) = pairs.into_iter().find(|(k, _)| k == ENV_PARAM) {
        return Ok(Some(name));
    }
    match headers.get(crate::ENVIRONMENT_HEADER) {
        None => Ok(None),
        Some(v) => v.to_str().map(|s| Some(s.trim().to_string())).map_err(|_| {
            AppError::bad_request(format!(
                "the {} header is not text",
                crate::ENVIRONMENT_HEADER
            ))
        }),
    }
}

impl FromRequestParts<Arc<AppState>> for Env {
    type Rejection = AppError;

    async fn from_request_parts(parts: &mut Parts, state: &Arc<AppState>) -> ApiResult<Env> {
        // The dashboard chose one already (with its cookie): see `dashboard::layout`.
        if let Some(env) = parts.extensions.get::<Env>() {
            return Ok(env.clone());
        }
        match requested(&parts.uri, &parts.headers)? {
            Some(name) => Env::named(state, &name).await,
            None => Ok(Env::prod(state)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn asked(uri: &str, header: Option<&[u8]>) -> ApiResult<Option<String>> {
        let mut headers = HeaderMap::new();
        if let Some(h) = header {
            let value = axum::http::HeaderValue::from_bytes(h).unwrap();
            headers.insert(crate::ENVIRONMENT_HEADER, value);
        }
        requested(&uri.parse().unwrap(), &headers)
    }

    #[test]
    fn the_parameter_wins_over_the_header_and_neither_is_prod() {
        assert_eq!(asked("/api/v1/jobs", None).unwrap(), None);
        assert_eq!(
            asked("/api/v1/jobs", Some(b"dev")).unwrap().as_deref(),
            Some("dev")
        );
        let both = asked("/api/v1/jobs?limit=1&env=qa", Some(b"dev")).unwrap();
        assert_eq!(both.as_deref(), Some("qa"));
        let refused = asked("/api/v1/jobs", Some(b"d\xe9v")).unwrap_err();
        assert_eq!(refused.status, axum::http::StatusCode::BAD_REQUEST);
    }
}
