//! Where a command runs: in this process over the local event log, or on a service (`--server`).
//! Both are a `databuild_service::client::Api`, answering with the same types, which the
//! commands print; an error's exit code comes from its kind (a 4xx status: the user's input).

use databuild_service::client::{Api, Http, InProcess};

pub enum Backend {
    Local(InProcess),
    Remote(Http),
}

impl Backend {
    pub fn local(engine: databuild_exec::Engine) -> anyhow::Result<Backend> {
        Ok(Backend::Local(InProcess {
            engine: Box::new(engine),
            max_refs: crate::settings::max_refs()?,
        }))
    }

    pub fn remote(url: &str, environment: &str) -> Backend {
        // The write token when there is one, else the read token: a reader's CLI reads.
        let token = crate::settings::secret("DATABUILD_TOKEN")
            .or_else(|| crate::settings::secret("DATABUILD_READ_TOKEN"));
        Backend::Remote(Http::new(url, token).in_environment(environment))
    }
}

impl std::ops::Deref for Backend {
    type Target = dyn Api;

    fn deref(&self) -> &(dyn Api + 'static) {
        match self {
            Backend::Local(l) => l,
            Backend::Remote(r) => r,
        }
    }
}
