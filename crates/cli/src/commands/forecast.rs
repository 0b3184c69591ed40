//! `forecast`: when partitions not live are expected to be, and the steps that decide it.

use std::process::ExitCode;

use crate::backend::Backend;
use crate::cli::ForecastArgs;
use crate::context::parse_refs;
use crate::output::{outln, print_json};

pub fn run(backend: &Backend, args: &ForecastArgs, json: bool) -> anyhow::Result<ExitCode> {
    let forecasts = parse_refs(backend, &args.refs)?
        .iter()
        .map(|r| backend.forecast(r.as_str()))
        .collect::<Result<Vec<_>, _>>()?;
    if json {
        print_json(&forecasts)?;
        return Ok(ExitCode::SUCCESS);
    }
    for f in &forecasts {
        outln!("{}", f.headline())?;
        for step in &f.basis {
            outln!("  {}", step.line())?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
