//! Commands that read the event log: partitions, builds, events, jobs, runs, sql, cancel.

use std::io::Write;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use databuild_exec::answers::{metric_text, Event, JobRun, JobStats};
use databuild_log::{short_id, EventFilter, PartitionQuery};
use serde_json::Value;

use crate::backend::Backend;
use crate::cli::{
    BuildsArgs, CancelArgs, DatasetsArgs, EventsArgs, JobsArgs, LogsArgs, MetricsArgs,
    PartitionStatusArg, PartitionsArgs, RunsArgs, SqlArgs,
};
use crate::output::{
    count, errln, millis, out, outln, print_json, short_list, stdout, table, text,
};

/// An optional text as a cell: empty when absent.
fn cell(v: &Option<String>) -> String {
    v.clone().unwrap_or_default()
}

/// An optional time as a cell: `-` when absent.
fn at(v: &Option<String>) -> String {
    v.clone().unwrap_or_else(|| "-".to_string())
}

pub fn partitions(
    backend: &Backend,
    PartitionsArgs {
        pattern,
        status,
        limit,
        after,
    }: PartitionsArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    use databuild_exec::answers::DerivedStatus;
    use databuild_exec::engine::listing::ListedStatus;
    let status = status.map(|s| match s {
        PartitionStatusArg::Live => DerivedStatus::Live,
        PartitionStatusArg::Stale => DerivedStatus::Stale,
        PartitionStatusArg::Building => DerivedStatus::Building,
        PartitionStatusArg::Failed => DerivedStatus::Failed,
        PartitionStatusArg::Tainted => DerivedStatus::Tainted,
    });
    let listed = status.and_then(ListedStatus::of);
    let status_name = status.map(DerivedStatus::as_str);
    let query = PartitionQuery {
        pattern,
        status: listed.map(ListedStatus::recorded),
        limit,
        after,
    };
    let page = backend.partitions(&query, listed, status_name)?;
    if json {
        print_json(&page)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = page
        .partitions
        .iter()
        .map(|r| {
            vec![
                r.partition_ref.clone(),
                r.status.to_string(),
                cell(&r.job),
                r.updated_at.clone(),
                cell(&r.reason),
            ]
        })
        .collect();
    out!(
        "{}",
        table(&["REF", "STATUS", "JOB", "UPDATED", "WHY"], &rows)
    )?;
    if let Some(next) = &page.next {
        outln!("(more: --after '{next}')")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `builds`: a page of builds, one build, or (`--partitions`) a page of its partitions.
pub fn builds(backend: &Backend, args: &BuildsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let id = args.id.as_deref();
    if args.partitions {
        // `--partitions` requires an ID (clap says so).
        let id = id.unwrap_or_default();
        build_partitions(backend, id, args.after.as_deref(), args.limit, json)
    } else {
        list_or_show_builds(backend, id, args.all, args.limit, json)
    }
}

fn list_or_show_builds(
    backend: &Backend,
    id: Option<&str>,
    all: bool,
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let Some(id) = id else {
        let v = backend.builds(all, limit)?;
        if json {
            print_json(&v)?;
            return Ok(ExitCode::SUCCESS);
        }
        let rows: Vec<Vec<String>> = v
            .builds
            .iter()
            .map(|b| {
                let status = match b.analyze_only {
                    true => format!("{} (analysis)", b.status),
                    false => b.status.to_string(),
                };
                vec![
                    short_id(&b.build_request_id).to_string(),
                    status,
                    b.created_at.clone(),
                    crate::output::head_of(&b.requested_partitions, b.requested_count as usize, 2),
                ]
            })
            .collect();
        out!(
            "{}",
            table(&["ID", "STATUS", "CREATED", "REQUESTED"], &rows)
        )?;
        return Ok(ExitCode::SUCCESS);
    };
    let b = backend.build(id)?;
    if json {
        print_json(&b)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!("build request {}: {}", b.build_request_id, b.status)?;
    outln!(
        "  created {}, updated {}{}",
        b.created_at,
        b.updated_at,
        b.message
            .as_deref()
            .map(|m| format!("; {m}"))
            .unwrap_or_default()
    )?;
    // All of them in --json; a screenful here.
    outln!(
        "  requested: {}",
        crate::output::head_of(&b.requested_partitions, b.requested_count as usize, 20)
    )?;
    if let Some(p) = &b.progress {
        out!("{}", indent(&progress_text(p)))?;
    }
    // `--limit` rows of each table (0: all the detail holds); `--json` holds all of it.
    let shown = if limit == 0 { usize::MAX } else { limit };
    let partitions: Vec<Vec<String>> = b
        .partitions
        .iter()
        .take(shown)
        .map(|p| vec![p.partition_ref.clone(), p.status.to_string()])
        .collect();
    if !partitions.is_empty() {
        out!("{}", indent(&table(&["PARTITION", "STATUS"], &partitions)))?;
    }
    if let Some(last) = b.partitions.get(partitions.len()).and(partitions.last()) {
        outln!(
            "  (the first {} partitions; more: databuild builds {id} --partitions --after '{}')",
            partitions.len(),
            last[0]
        )?;
    } else if let Some(next) = &b.partitions_next {
        outln!("  (more partitions: databuild builds {id} --partitions --after '{next}')")?;
    }
    let runs: Vec<Vec<String>> = b
        .job_runs
        .iter()
        .take(shown)
        .map(|r| {
            vec![
                short_id(&r.job_run_id).to_string(),
                r.job.clone(),
                r.status.to_string(),
                duration(r),
            ]
        })
        .collect();
    if !runs.is_empty() {
        out!(
            "{}",
            indent(&table(&["RUN", "JOB", "STATUS", "TOOK"], &runs))
        )?;
    }
    if b.job_runs_total > runs.len() as u64 {
        outln!(
            "  (the newest {} of {} runs; all: databuild sql \"SELECT * FROM job_runs WHERE build_request_id = '{}'\")",
            runs.len(),
            b.job_runs_total,
            b.build_request_id
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `builds ID --partitions`: a page of what a build did to each partition it touched.
fn build_partitions(
    backend: &Backend,
    id: &str,
    after: Option<&str>,
    limit: usize,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let page = backend.build_partitions(id, after, limit.max(1))?;
    if json {
        print_json(&page)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = page
        .partitions
        .iter()
        .map(|p| {
            vec![
                p.partition_ref.clone(),
                p.status.to_string(),
                p.job_run_id
                    .as_deref()
                    .map(short_id)
                    .unwrap_or("-")
                    .to_string(),
            ]
        })
        .collect();
    out!("{}", table(&["PARTITION", "STATUS", "RUN"], &rows))?;
    if let Some(next) = &page.next {
        outln!("(more: --after '{next}')")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A build's progress: a line in all, with its ETA, and a row per job.
fn progress_text(p: &databuild_exec::answers::BuildProgress) -> String {
    let mut text = format!(
        "progress: {} of {} runs done, {} queued, {} running, {} failed, {} cancelled, {} not claimed{}{}\n",
        p.done,
        p.planned,
        p.queued,
        p.running,
        p.failed,
        p.cancelled,
        p.unclaimed,
        p.rate_per_s
            .map(|r| format!(", {r} runs/s"))
            .unwrap_or_default(),
        p.eta_text()
            .map(|eta| {
                let unknown = match p.runs_without_history {
                    0 => String::new(),
                    n => format!(", {n} runs with no history counted as 0 s"),
                };
                format!(
                    "; ETA {eta} at --parallel {} (job time left {}, longest chain {}{unknown})",
                    p.parallel,
                    crate::output::span(p.work_left_s),
                    crate::output::span(p.critical_path_left_s),
                )
            })
            .unwrap_or_default()
    );
    let rows: Vec<Vec<String>> = p
        .jobs
        .iter()
        .map(|j| {
            vec![
                j.job.clone(),
                format!("{}/{}", j.done, j.planned),
                j.queued.to_string(),
                j.running.to_string(),
                j.failed.to_string(),
                j.left.to_string(),
                millis(j.p50_s.map(|s| s * 1000.0)),
            ]
        })
        .collect();
    text.push_str(&table(
        &["JOB", "DONE", "QUEUED", "RUNNING", "FAILED", "LEFT", "P50"],
        &rows,
    ));
    text
}

fn duration(run: &JobRun) -> String {
    millis(run.duration_ms())
}

fn indent(text: &str) -> String {
    text.lines().map(|l| format!("  {l}\n")).collect()
}

fn event_line(e: &Event) -> String {
    let subject: Vec<&str> = [&e.partition_ref, &e.job]
        .into_iter()
        .filter_map(|v| v.as_deref())
        .collect();
    format!(
        "#{:<6} {}  {:<13} {:<18} {}{}{}",
        e.idx,
        crate::output::time(Some(e.timestamp)),
        e.kind.as_str(),
        e.status.as_str(),
        subject.join(" "),
        e.delegated_to
            .as_deref()
            .map(|d| format!(" -> {d}"))
            .unwrap_or_default(),
        e.message
            .as_deref()
            .map(|m| format!("  ({m})"))
            .unwrap_or_default()
    )
}

/// `events`: the log's events that pass the filters, from the oldest; `--follow`: then those
/// appended, as they are.
pub fn events(backend: &Backend, args: EventsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let EventsArgs {
        build_request_id,
        partition_ref,
        job,
        job_run_id,
        since,
        limit,
        follow,
    } = args;
    let filter = EventFilter {
        since,
        limit,
        build_request_id,
        partition_ref,
        job,
        job_run_id,
        kind: None,
        status: None,
        newest_first: false,
        from: None,
        to: None,
    };
    print_events(backend, filter, follow, json)
}

fn print_events(
    backend: &Backend,
    mut filter: EventFilter,
    follow: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let mut out = stdout();
    let mut remaining = filter.limit;
    loop {
        // Pages of at most 1,000, as the service serves them.
        filter.limit = Some(remaining.unwrap_or(1000).min(1000));
        let page = backend.events(&filter)?;
        let events = page.events;
        for e in &events {
            if json {
                writeln!(out, "{}", serde_json::to_string(e)?)?;
            } else {
                writeln!(out, "{}", event_line(e))?;
            }
        }
        out.flush()?;
        if let Some(next) = page.next {
            filter.since = Some(next);
        }
        if let Some(r) = remaining.as_mut() {
            *r = r.saturating_sub(events.len());
            if *r == 0 {
                return Ok(ExitCode::SUCCESS);
            }
        }
        if events.is_empty() {
            if !follow {
                return Ok(ExitCode::SUCCESS);
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

pub fn jobs(backend: &Backend, args: &JobsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let (stats, recent, trends): (Vec<JobStats>, Vec<JobRun>, _) = match args.name.as_deref() {
        Some(n) => {
            let v = backend.job(n)?;
            if json {
                print_json(&v)?;
                return Ok(ExitCode::SUCCESS);
            }
            (vec![v.job], v.runs, v.trends)
        }
        None => {
            let v = backend.jobs()?;
            if json {
                print_json(&v)?;
                return Ok(ExitCode::SUCCESS);
            }
            (v.jobs, Vec::new(), Vec::new())
        }
    };
    let rows: Vec<Vec<String>> = stats
        .iter()
        .map(|s| {
            vec![
                s.job.clone(),
                s.runs.to_string(),
                s.success_rate
                    .map(|r| format!("{:.0}%", r * 100.0))
                    .unwrap_or_else(|| "-".to_string()),
                millis(s.p50_ms),
                millis(s.p95_ms),
                at(&s.last_run_at),
            ]
        })
        .collect();
    out!(
        "{}",
        table(&["JOB", "RUNS", "SUCCESS", "P50", "P95", "LAST RUN"], &rows)
    )?;
    if !recent.is_empty() {
        outln!("\nrecent runs:")?;
        let rows: Vec<Vec<String>> = recent
            .iter()
            .map(|r| {
                vec![
                    r.job_run_id.clone(),
                    r.status.to_string(),
                    duration(r),
                    short_list(&r.outputs, 2),
                ]
            })
            .collect();
        out!("{}", table(&["RUN", "STATUS", "TOOK", "OUTPUTS"], &rows))?;
    }
    if !trends.is_empty() {
        outln!(
            "\nresources and metrics (last {} runs at most):",
            databuild_exec::answers::TREND_RUNS
        )?;
        let rows: Vec<Vec<String>> = trends
            .iter()
            .map(|t| {
                vec![
                    t.name.clone(),
                    metric_text(&t.name, t.p50),
                    metric_text(&t.name, t.p95),
                    t.count.to_string(),
                ]
            })
            .collect();
        out!("{}", table(&["METRIC", "P50", "P95", "VALUES"], &rows))?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `metrics PATTERN --metric NAME`: one metric over a job's partitions, in key order.
pub fn metrics(backend: &Backend, args: &MetricsArgs, json: bool) -> anyhow::Result<ExitCode> {
    let page = backend.metric_series(
        &args.pattern,
        &args.metric,
        args.after.as_deref(),
        args.limit,
    )?;
    if json {
        print_json(&page)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = page
        .values
        .iter()
        .map(|v| {
            vec![
                v.partition_ref.clone(),
                metric_text(&page.metric, v.value),
                short_id(&v.job_run_id).to_string(),
                v.recorded_at.clone(),
            ]
        })
        .collect();
    if rows.is_empty() {
        outln!(
            "no `{}` recorded for job `{}`{}",
            page.metric,
            page.job,
            if args.after.is_some() {
                " after that ref"
            } else {
                ""
            }
        )?;
    } else {
        out!(
            "{}",
            table(
                &["PARTITION", &page.metric.to_uppercase(), "RUN", "RECORDED"],
                &rows
            )
        )?;
    }
    if let Some(next) = &page.next {
        outln!("more: --after {next}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `runs ID`: the run's details, or (`--log`) its log.
pub fn runs(backend: &Backend, args: &RunsArgs, json: bool) -> anyhow::Result<ExitCode> {
    if args.log {
        log(backend, &args.id, args.follow, json)
    } else {
        run(backend, &args.id, json)
    }
}

fn run(backend: &Backend, id: &str, json: bool) -> anyhow::Result<ExitCode> {
    let run = backend.run(id)?;
    if json {
        print_json(&run)?;
        return Ok(ExitCode::SUCCESS);
    }
    outln!(
        "job run {}: job `{}`, {}",
        run.job_run_id,
        run.job,
        run.status
    )?;
    outln!("  build request: {}", cell(&run.build_request_id))?;
    outln!("  outputs: {}", run.outputs.join(", "))?;
    let inputs = &run.inputs;
    outln!(
        "  inputs: {}",
        if inputs.is_empty() {
            "-".to_string()
        } else {
            inputs.join(", ")
        }
    )?;
    if !run.args.is_empty() {
        outln!("  args: {}", run.args.join(" "))?;
    }
    for (k, v) in &run.env {
        outln!("  env: {k}={v}")?;
    }
    if run.started_at.is_none() && run.ended_at.is_some() {
        outln!(
            "  scheduled {}, never started, ended {}",
            at(&run.scheduled_at),
            at(&run.ended_at)
        )?;
    } else {
        outln!(
            "  scheduled {}, started {}, ended {}, took {}",
            at(&run.scheduled_at),
            at(&run.started_at),
            at(&run.ended_at),
            duration(&run)
        )?;
    }
    if let Some(code) = run.exit_code {
        outln!("  exit code: {code}")?;
    }
    if let Some(attempt) = run.attempt {
        outln!("  attempt: {attempt}")?;
    }
    if let Some(r) = &run.resources {
        outln!("  resources: {}", resources_line(r))?;
    }
    for (r, named) in &run.metrics {
        let values: Vec<String> = named.iter().map(|(n, v)| format!("{n}={v}")).collect();
        outln!("  metrics of {r}: {}", values.join(", "))?;
    }
    if let Some(m) = &run.message {
        outln!("  message: {m}")?;
    }
    if let Some(r) = &run.relies_on {
        outln!("  skipped: relies on run {r}")?;
    }
    if let Some(log) = backend
        .run_log(&run.job_run_id)
        .ok()
        .filter(|l| !l.is_empty())
    {
        let lines: Vec<&str> = log.lines().collect();
        outln!(
            "  log (last {} lines of {}):",
            lines.len().min(20),
            cell(&run.log_path)
        )?;
        for l in &lines[lines.len().saturating_sub(20)..] {
            outln!("    {l}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

/// A run's resources in one line, each measure known by its name in `--json`, in units people
/// read: `wall_ms=1.2 s, cpu_user_ms=1.0 s, max_rss_bytes=301.0 MiB, ...`.
fn resources_line(r: &databuild_log::RunResources) -> String {
    let shown: Vec<String> = r
        .values()
        .map(|(name, v)| format!("{name}={}", metric_text(name, v as f64)))
        .collect();
    if shown.is_empty() {
        return "-".to_string();
    }
    shown.join(", ")
}

/// How often a followed log is read again.
const FOLLOW_EVERY: Duration = Duration::from_millis(300);
/// How long a followed partition's next attempt may take to start.
const RETRY_WAIT: Duration = Duration::from_secs(5);

/// A run's whole log, chunk by chunk; `follow`: until the run ends. `--json`: the chunks, one
/// JSON object a line.
fn log(backend: &Backend, id: &str, follow: bool, json: bool) -> anyhow::Result<ExitCode> {
    print_log(backend, id, follow, json)?;
    Ok(ExitCode::SUCCESS)
}

/// Prints the log (see [`log`]) and returns the run's whole id.
fn print_log(backend: &Backend, id: &str, follow: bool, json: bool) -> anyhow::Result<String> {
    let (mut id, mut offset) = (id.to_string(), 0);
    loop {
        let chunk = backend.run_log_chunk(&id, offset)?;
        // The whole id from now on: a prefix may name more runs as new ones start.
        id.clone_from(&chunk.job_run_id);
        let progressed = chunk.next_offset > offset;
        if json {
            if progressed || offset == 0 && !chunk.running {
                outln!("{}", serde_json::to_string(&chunk)?)?;
            }
        } else {
            out!("{}", chunk.text)?;
        }
        let read_all = chunk.next_offset >= chunk.size;
        // Without --follow, what is there now: a character still being written waits for it.
        if !(follow && chunk.running) && (read_all || !progressed) {
            if !json && chunk.size == 0 && !chunk.running {
                errln!("{}", no_log(backend, &id));
            }
            return Ok(id);
        }
        if read_all || !progressed {
            std::io::stdout().flush()?;
            std::thread::sleep(FOLLOW_EVERY);
        }
        offset = chunk.next_offset;
    }
}

/// Why an ended run shows no log: it never started, or its job wrote nothing (the file is made
/// with the first byte), or `gc` removed it; which of the last two, the log does not record.
fn no_log(backend: &Backend, id: &str) -> String {
    match backend.run(id) {
        Ok(run) if run.started_at.is_none() => format!("run {id} has no log: it never started"),
        Ok(_) => format!(
            "run {id} has no log: its job wrote nothing, or `databuild gc` removed the log since"
        ),
        Err(e) => format!("run {id} has no log (and its record cannot be read: {e})"),
    }
}

/// The log of the run that built, is building or failed to build `r`; `follow`: on through
/// its retries (each attempt is a run of its own) until the partition's run ends.
pub fn logs(
    backend: &Backend,
    &LogsArgs {
        partition_ref: ref r,
        follow,
    }: &LogsArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let status = backend.status(r)?;
    let Some(mut run) = status.built_by else {
        return Err(crate::UserError(format!(
            "no run has built `{r}` or tried to ({}: {})",
            status.status,
            status.reasons.join("; ")
        ))
        .into());
    };
    loop {
        let followed = print_log(backend, &run, follow, json)?;
        let mut next = backend.status(r)?;
        // A retry is claimed a moment after its attempt ends: the partition stays building.
        let retry_by = Instant::now() + RETRY_WAIT;
        while follow
            && next.status == databuild_exec::answers::DerivedStatus::Building
            && next.built_by.as_deref() == Some(&followed)
        {
            if Instant::now() > retry_by {
                break;
            }
            std::thread::sleep(FOLLOW_EVERY);
            next = backend.status(r)?;
        }
        match next.built_by {
            Some(n) if follow && n != followed => {
                if !json {
                    outln!("--- the next attempt: run {} ---", short_id(&n))?;
                }
                run = n;
            }
            _ => return Ok(ExitCode::SUCCESS),
        }
    }
}

pub fn sql(
    backend: &Backend,
    &SqlArgs {
        ref query,
        max_rows,
    }: &SqlArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let result = backend.sql(query, max_rows)?;
    if json {
        print_json(&result)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = result
        .rows
        .iter()
        .map(|r| {
            r.iter()
                .map(|v| match v {
                    Value::Null => "NULL".to_string(),
                    other => text(other),
                })
                .collect()
        })
        .collect();
    let headers: Vec<&str> = result.columns.iter().map(String::as_str).collect();
    out!("{}", table(&headers, &rows))?;
    outln!(
        "({}{})",
        count(rows.len(), "row"),
        if result.truncated {
            ", cut at --max-rows"
        } else {
            ""
        }
    )?;
    Ok(ExitCode::SUCCESS)
}

pub fn cancel(
    backend: &Backend,
    CancelArgs { id }: &CancelArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let v = backend.cancel(id)?;
    if json {
        print_json(&v)?;
    } else {
        outln!("cancelled build request {}", v.build_request_id)?;
    }
    Ok(ExitCode::SUCCESS)
}

pub fn datasets(
    backend: &Backend,
    &DatasetsArgs { exact }: &DatasetsArgs,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let v = backend.datasets(exact)?;
    if json {
        print_json(&v)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<Vec<String>> = v
        .datasets
        .iter()
        .map(|d| {
            vec![
                d.name.clone(),
                d.kind.clone(),
                d.pattern.clone(),
                dataset_counts(d),
            ]
        })
        .collect();
    out!(
        "{}",
        table(&["NAME", "KIND", "PATTERN", "PARTITIONS"], &rows)
    )?;
    if v.datasets.iter().any(|d| !d.freshness_checked) {
        outln!(
            "`available` is recorded live, its freshness not checked, and `N+ present` counts an \
             external's files up to where the count stopped (over {} partitions): `datasets \
             --exact` checks and counts each, `partitions --status stale` pages through the stale",
            databuild_exec::engine::listing::FRESHNESS_SCAN
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// A dataset's counts as one cell: `probed` for an external that cannot be listed, `none
/// present` for one listed empty, `-` for nothing built; `N+` where a walk stopped early.
fn dataset_counts(d: &databuild_exec::answers::DatasetView) -> String {
    let counts = d
        .partitions
        .iter()
        .map(|(k, n)| {
            let floor = if d.at_least(k) { "+" } else { "" };
            format!("{n}{floor} {k}")
        })
        .collect::<Vec<_>>();
    let external = d.kind == "dataset";
    match (d.listed, counts.is_empty()) {
        (false, true) => "probed".to_string(),
        (false, false) => format!("probed; {}", counts.join(", ")),
        (true, true) if external => "none present".to_string(),
        (true, true) => "-".to_string(),
        (true, false) => counts.join(", "),
    }
}
