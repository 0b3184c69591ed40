//! Where a command runs: in this process over the local event log, or on a service (`--server`).
//! Both answer with the same JSON (`databuild_service::views`), which the commands print.

use databuild_exec::Engine;
use databuild_log::{EventFilter, PartitionQuery};
use databuild_service::error::AppError;
use databuild_service::views;
use serde_json::{json, Value};

use crate::remote::{query, segment, Remote};
use crate::UserError;

pub enum Backend {
    Local(Box<Engine>),
    Remote(Remote),
}

/// A service error as the CLI reports it: the request's fault exits 2.
pub fn app_error(e: AppError) -> anyhow::Error {
    if e.status.is_client_error() {
        UserError(e.message).into()
    } else {
        anyhow::anyhow!(e.message)
    }
}

impl Backend {
    pub fn status(&self, refs: &[String]) -> anyhow::Result<Value> {
        let answers = refs
            .iter()
            .map(|r| match self {
                Backend::Local(e) => views::status(e, r).map_err(app_error),
                Backend::Remote(c) => c.get(&format!("/api/v1/partitions/{}/status", segment(r))),
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        Ok(Value::Array(answers))
    }

    pub fn explain(&self, r: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::explain(e, r).map_err(app_error),
            Backend::Remote(c) => c.get(&format!("/api/v1/partitions/{}/explain", segment(r))),
        }
    }

    pub fn taint(&self, refs: &[String], reason: Option<&str>) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::taint(e, refs, reason).map_err(app_error),
            Backend::Remote(c) => c.post(
                "/api/v1/partitions/taint",
                &json!({ "partitions": refs, "reason": reason }),
            ),
        }
    }

    pub fn partitions(
        &self,
        q: &PartitionQuery,
        listed: Option<databuild_exec::views::ListedStatus>,
        status: Option<&str>,
    ) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::partitions(e, q, listed).map_err(app_error),
            Backend::Remote(c) => c.get(&format!(
                "/api/v1/partitions{}",
                query(&[
                    ("pattern", q.pattern.clone()),
                    ("status", status.map(str::to_string)),
                    ("limit", Some(q.limit.to_string())),
                    ("after", q.after.clone()),
                ])
            )),
        }
    }

    pub fn builds(&self, limit: usize) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::builds(e, None, limit).map_err(app_error),
            Backend::Remote(c) => c.get(&format!("/api/v1/builds?limit={limit}")),
        }
    }

    pub fn build(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::build(e, id).map_err(app_error),
            Backend::Remote(c) => c.get(&format!("/api/v1/builds/{}", segment(id))),
        }
    }

    pub fn cancel(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::cancel(e, id).map_err(app_error),
            Backend::Remote(c) => c.delete(&format!("/api/v1/builds/{}", segment(id))),
        }
    }

    /// One page of events: `{"events": [...], "next": idx}`.
    pub fn events(&self, f: &EventFilter) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::events(e, f).map_err(app_error),
            Backend::Remote(c) => c.get(&format!(
                "/api/v1/events{}",
                query(&[
                    ("since", f.since.map(|s| s.to_string())),
                    ("limit", f.limit.map(|l| l.to_string())),
                    ("build", f.build_request_id.clone()),
                    ("partition", f.partition_ref.clone()),
                    ("job", f.job.clone()),
                    ("run", f.job_run_id.clone()),
                ])
            )),
        }
    }

    pub fn datasets(&self, exact: bool) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::datasets(e, exact).map_err(app_error),
            Backend::Remote(c) => c.get(&format!("/api/v1/datasets?exact={exact}")),
        }
    }

    pub fn jobs(&self, name: Option<&str>) -> anyhow::Result<Value> {
        match (self, name) {
            (Backend::Local(e), None) => views::jobs(e).map_err(app_error),
            (Backend::Local(e), Some(n)) => views::job(e, n).map_err(app_error),
            (Backend::Remote(c), None) => c.get("/api/v1/jobs"),
            (Backend::Remote(c), Some(n)) => c.get(&format!("/api/v1/jobs/{}", segment(n))),
        }
    }

    pub fn run(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::run(e, id).map_err(app_error),
            Backend::Remote(c) => c.get(&format!("/api/v1/job-runs/{}", segment(id))),
        }
    }

    /// The tail of a run's log, if it has one.
    pub fn run_log(&self, id: &str) -> Option<String> {
        match self {
            Backend::Local(e) => views::run_log(e, id).ok(),
            Backend::Remote(c) => c
                .get_text(&format!("/api/v1/job-runs/{}/log", segment(id)))
                .ok(),
        }
    }

    pub fn sql(&self, q: &str, max_rows: usize) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::sql(e, q, max_rows).map_err(app_error),
            Backend::Remote(c) => {
                c.post("/api/v1/sql", &json!({ "query": q, "max_rows": max_rows }))
            }
        }
    }

    pub fn sources(&self) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::sources(e).map_err(app_error),
            Backend::Remote(c) => c.get("/api/v1/sources"),
        }
    }

    pub fn source(&self, name: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::source(e, name).map_err(app_error),
            Backend::Remote(c) => c.get(&format!("/api/v1/sources/{}", segment(name))),
        }
    }

    pub fn seal(&self, name: Option<&str>, through: Option<&str>) -> anyhow::Result<Value> {
        match (self, name) {
            (Backend::Local(e), _) => views::seal(e, name, through).map_err(app_error),
            (Backend::Remote(c), Some(n)) => c.post(
                &format!("/api/v1/sources/{}/seal", segment(n)),
                &json!({ "through": through }),
            ),
            (Backend::Remote(_), None) => Err(UserError(
                "name the source to seal on a service (the service seals all sources every minute)"
                    .into(),
            )
            .into()),
        }
    }

    pub fn want(
        &self,
        refs: &[String],
        ttl: Option<&str>,
        sla: Option<&str>,
    ) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::want(e, refs, ttl, sla).map_err(app_error),
            Backend::Remote(c) => c.post(
                "/api/v1/wants",
                &json!({ "partitions": refs, "ttl": ttl, "sla": sla }),
            ),
        }
    }

    pub fn wants(&self, status: Option<&str>, all: bool, limit: usize) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::wants(e, status, all, limit).map_err(app_error),
            Backend::Remote(c) => c.get(&format!(
                "/api/v1/wants{}",
                query(&[
                    ("status", status.map(str::to_string)),
                    ("all", all.then(|| "true".to_string())),
                    ("limit", Some(limit.to_string())),
                ])
            )),
        }
    }

    pub fn unwant(&self, id: &str) -> anyhow::Result<Value> {
        match self {
            Backend::Local(e) => views::unwant(e, id).map_err(app_error),
            Backend::Remote(c) => c.delete(&format!("/api/v1/wants/{}", segment(id))),
        }
    }
}
