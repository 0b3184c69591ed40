//! The `databuild` binary: parse the command line, run the command, map errors to exit codes.
//!
//! Exit codes: 0 success; 1 the work failed (a build failed, an I/O error); 2 the input is wrong
//! (a malformed graph file, an invalid or unknown ref, an unplannable request, refused SQL).

mod backend;
mod cli;
mod commands;
mod context;
mod output;
mod settings;

use std::process::ExitCode;

use clap::Parser;

use crate::output::errln;

/// Planning allocates millions of small strings and vectors; mimalloc handles that pattern several
/// times faster than glibc's allocator (see BENCHMARKS.md).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// An error caused by what the user asked for; exits with 2.
#[derive(Debug)]
pub struct UserError(pub String);

impl std::fmt::Display for UserError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for UserError {}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    match commands::run(cli) {
        Ok(code) => code,
        // Whoever read the output has all they wanted (`| head`): nothing to report.
        Err(err) if output::is_closed_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            errln!("error: {err:#}");
            // The request's fault (2) or the system's (1), by the error's kind: a service error
            // by its status, which `AppError` derives from the kind of failure.
            let user = err.downcast_ref::<UserError>().is_some()
                || err
                    .downcast_ref::<databuild_service::error::AppError>()
                    .is_some_and(|e| e.status.is_client_error());
            if user {
                ExitCode::from(2)
            } else {
                ExitCode::from(1)
            }
        }
    }
}
