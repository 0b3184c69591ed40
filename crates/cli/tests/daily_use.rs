//! The command line in daily use (#29): pipes, getting started, completions.

use std::io::BufRead;
use std::process::Stdio;
use std::time::Duration;

use crate::util::{Project, Service};

const GRAPH: &str = r#"
[graph]
name = "g"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["sh", "-c", "for o in $(echo $DATABUILD_OUTPUTS | tr -d '[]\"' | tr ',' ' '); do mkdir -p $(dirname $DATABUILD_OUTPUT_DIR/$o); touch $DATABUILD_OUTPUT_DIR/$o; done"]
"#;

/// A reader that goes away (`| head -1`) ends any command quietly: exit 0, nothing on stderr.
#[test]
fn a_closed_pipe_ends_a_command_quietly() {
    let p = Project::new(GRAPH);
    for d in 1..=3 {
        p.partition(&format!("raw/2020-01-0{d}"));
    }
    p.run(&["build", "a/{2020-01-01..2020-01-03}"])
        .expect_code(0);
    let build = p.run(&["--json", "builds"]).json()["builds"][0]["build_request_id"]
        .as_str()
        .unwrap()
        .to_string();
    let commands: [&[&str]; 10] = [
        &["sql", "SELECT * FROM events"],
        &["--json", "sql", "SELECT * FROM events"],
        &["events"],
        &["--json", "events"],
        &["builds"],
        &["builds", &build],
        &["explain", "a/2020-01-01"],
        &["status", "a/{2020-01-01..2020-01-03}"],
        &["graph"],
        &["completions", "bash"],
    ];
    for args in commands {
        // The reader is gone before the command writes anything: every write fails.
        let mut child = p
            .command()
            .args(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(stderr.is_empty(), "{args:?} printed: {stderr}");
    }
    // A build still runs to its end and says how it went by its exit code.
    p.partition("raw/2020-01-04");
    let mut child = p
        .command()
        .args(["build", "a/2020-01-04"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take());
    assert_eq!(child.wait().unwrap().code(), Some(0));
    p.run(&["status", "a/2020-01-04"]).expect_code(0);
    assert!(p.path().join("data/a/2020-01-04").exists());
}

/// `init` makes a project that builds at once, and never overwrites one.
#[test]
fn init_scaffolds_a_graph_that_builds() {
    let dir = tempfile::tempdir().unwrap();
    let run = |args: &[&str]| {
        std::process::Command::new(env!("CARGO_BIN_EXE_databuild"))
            .current_dir(dir.path())
            .env_remove("DATABUILD_GRAPH")
            .env_remove("DATABUILD_EVENT_LOG")
            .args(args)
            .output()
            .unwrap()
    };
    let init = run(&["init"]);
    assert!(init.status.success(), "{init:?}");
    let said = String::from_utf8_lossy(&init.stdout);
    assert!(said.contains("wrote databuild.toml"), "{said}");
    assert!(said.contains("next: databuild build"), "{said}");
    let build = run(&["build", "word_counts/date=2024-01-01"]);
    assert!(build.status.success(), "{build:?}");
    let count = std::fs::read_to_string(dir.path().join("data/word_counts/date=2024-01-01"));
    assert_eq!(count.unwrap().trim(), "9");
    // A day without text is missing, and the build says so.
    let missing = run(&["build", "word_counts/date=2024-01-02"]);
    assert_eq!(missing.status.code(), Some(2), "{missing:?}");
    assert!(String::from_utf8_lossy(&missing.stderr).contains("raw_text/date=2024-01-02"));
    // A second init refuses, and keeps the graph as it was.
    let graph = std::fs::read_to_string(dir.path().join("databuild.toml")).unwrap();
    let again = run(&["init"]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("already exists"));
    assert_eq!(
        std::fs::read_to_string(dir.path().join("databuild.toml")).unwrap(),
        graph
    );
}

/// Completion scripts for the shells clap_complete knows, naming the commands.
#[test]
fn completions_cover_every_shell() {
    let p = Project::new(GRAPH);
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = p.run(&["completions", shell]);
        out.expect_code(0);
        for command in ["build", "analyze", "partitions", "completions"] {
            assert!(out.stdout.contains(command), "{shell} lacks {command}");
        }
    }
    let bash = p.run(&["completions", "bash"]).stdout;
    let script = p.file("complete.bash", &bash);
    // bash itself accepts the script, and it completes `databuild bu` to `build`/`builds`.
    let probe = format!(
        "source {}; COMP_WORDS=(databuild bu); COMP_CWORD=1; _databuild databuild bu databuild; echo \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let out = std::process::Command::new("bash")
        .args(["-c", &probe])
        .output()
        .unwrap();
    let words = String::from_utf8_lossy(&out.stdout);
    assert!(
        words.contains("build") && words.contains("builds"),
        "{words} {out:?}"
    );
    p.run(&["completions", "tcsh"]).expect_code(2);
}

/// Ids people can type: `last`, a unique prefix, or the short form the listings show (the last
/// 8 characters, which differ between runs of one build); the same through a service.
/// Analyses are listed only with `--all`.
#[test]
fn builds_and_runs_take_short_ids_and_last() {
    let p = Project::new(GRAPH);
    for d in 1..=3 {
        p.partition(&format!("raw/2020-01-0{d}"));
    }
    p.run(&["build", "a/{2020-01-01..2020-01-02}"])
        .expect_code(0);
    p.run(&["build", "a/2020-01-03"]).expect_code(0);
    p.run(&["analyze", "a/2020-01-03"]).expect_code(0);
    let listed = p.run(&["--json", "builds"]).json();
    let builds = listed["builds"].as_array().unwrap();
    assert_eq!(builds.len(), 2, "analyses are not listed: {listed}");
    let all = p.run(&["--json", "builds", "--all"]).json();
    assert_eq!(all["builds"].as_array().unwrap().len(), 3);
    assert_eq!(all["builds"][0]["analyze_only"], true);
    let text = p.run(&["builds", "--all"]).stdout;
    assert!(text.contains("(analysis)"), "{text}");

    let newest = builds[0]["build_request_id"].as_str().unwrap();
    let older = builds[1]["build_request_id"].as_str().unwrap();
    let id_of = |args: &[&str]| p.run(args).json()["build_request_id"].clone();
    assert_eq!(id_of(&["--json", "builds", "last"]), newest);
    let short = &newest[newest.len() - 8..];
    assert!(
        p.run(&["builds"]).stdout.contains(short),
        "the listing shows the short form"
    );
    assert_eq!(id_of(&["--json", "builds", short]), newest);
    assert_eq!(id_of(&["--json", "builds", &older[..30]]), older);

    // The runs of one build: short forms that differ, each naming its run.
    let detail = p.run(&["--json", "builds", older]).json();
    let runs: Vec<&str> = detail["job_runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["job_run_id"].as_str().unwrap())
        .collect();
    assert_eq!(runs.len(), 2);
    let shorts: Vec<&str> = runs.iter().map(|r| &r[r.len() - 8..]).collect();
    assert_ne!(shorts[0], shorts[1]);
    let shown = p.run(&["builds", older]).stdout;
    for (run, short) in runs.iter().zip(&shorts) {
        assert!(shown.contains(short), "{shown}");
        let found = p.run(&["--json", "runs", short]).json();
        assert_eq!(found["job_run_id"], *run);
    }

    // Two matches: refused, naming them and what to do.
    let ambiguous = p.run(&["builds", "0"]);
    ambiguous.expect_code(2);
    assert!(
        ambiguous.stderr.contains("give more of the id"),
        "{}",
        ambiguous.stderr
    );
    assert!(ambiguous.stderr.contains(newest), "{}", ambiguous.stderr);
    let unknown = p.run(&["runs", "ffffffff"]);
    unknown.expect_code(2);
    assert!(
        unknown.stderr.contains("no job run `ffffffff`"),
        "{}",
        unknown.stderr
    );
    p.run(&["builds", "no-such-id!"]).expect_code(2);
    assert_eq!(id_of(&["--json", "builds", &short.to_uppercase()]), newest);
    // Events of a build or a run named as listings show them.
    let events = |args: &[&str]| -> Vec<serde_json::Value> {
        let out = p.run(&[&["--json", "events"], args].concat()).stdout;
        out.lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect()
    };
    let listed = events(&["--build", short]);
    assert!(!listed.is_empty());
    assert!(listed.iter().all(|e| e["build_request_id"] == newest));
    let listed = events(&["--run", shorts[0]]);
    assert!(!listed.is_empty());
    assert!(listed.iter().all(|e| e["job_run_id"] == runs[0]));

    // The same answers through a service.
    let service = Service::start(&p, &[]);
    let remote = |args: &[&str]| {
        let mut all = vec!["--server", service.url.as_str()];
        all.extend_from_slice(args);
        p.run(&all)
    };
    assert_eq!(
        remote(&["--json", "builds", "last"]).json()["build_request_id"],
        newest
    );
    assert_eq!(
        remote(&["--json", "builds", short]).json()["build_request_id"],
        newest
    );
    assert_eq!(
        remote(&["--json", "runs", shorts[0]]).json()["job_run_id"],
        runs[0]
    );
    assert_eq!(
        remote(&["--json", "builds"]).json()["builds"]
            .as_array()
            .unwrap()
            .len(),
        2
    );
    assert_eq!(
        remote(&["--json", "builds", "--all"]).json()["builds"]
            .as_array()
            .unwrap()
            .len(),
        3
    );
    remote(&["builds", "0"]).expect_code(2);
}

/// Previews: `analyze --force` / `--allow-stale` plan as the build with those flags would, and
/// `build --dry-run` prints that analysis and runs nothing (in-process and through a service).
#[test]
fn analyze_force_and_build_dry_run_preview_the_build() {
    let p = Project::new(GRAPH);
    for d in 1..=2 {
        p.partition(&format!("raw/2020-01-0{d}"));
    }
    p.run(&["build", "a/2020-01-01"]).expect_code(0);
    let service = Service::start(&p, &[]);
    let runs = |args: &[&str]| -> Vec<String> {
        let here = p.run(&[&["--json"], args].concat());
        here.expect_code(0);
        let remote = p.run(&[&["--json", "--server", &service.url], args].concat());
        remote.expect_code(0);
        let outputs = |v: serde_json::Value| -> Vec<String> {
            let runs = v["job_runs"].as_array().unwrap().iter();
            runs.map(|r| r["outputs"][0].as_str().unwrap().to_string())
                .collect()
        };
        let (here, remote) = (outputs(here.json()), outputs(remote.json()));
        assert_eq!(here, remote, "{args:?}: the same through the service");
        here
    };
    assert!(
        runs(&["analyze", "a/2020-01-01"]).is_empty(),
        "live: skipped"
    );
    assert_eq!(
        runs(&["analyze", "--force", "a/2020-01-01"]),
        ["a/2020-01-01"]
    );
    assert_eq!(
        runs(&["build", "--dry-run", "a/{2020-01-01..2020-01-02}"]),
        ["a/2020-01-02"]
    );
    assert_eq!(
        runs(&[
            "build",
            "--dry-run",
            "--force",
            "a/{2020-01-01..2020-01-02}"
        ])
        .len(),
        2
    );
    // Nothing ran: the partition a dry run would build is still missing, and no build is listed.
    let status = p.run(&["--json", "status", "a/2020-01-02"]).json();
    assert_eq!(status[0]["status"], "missing", "{status}");
    assert!(!p.path().join("data/a/2020-01-02").exists());
    assert_eq!(
        p.run(&["--json", "builds"]).json()["builds"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    // The build's --max-runs refusal, without running anything.
    let refused = p.run(&[
        "build",
        "--dry-run",
        "--force",
        "--max-runs",
        "1",
        "a/{2020-01-01..2020-01-02}",
    ]);
    refused.expect_code(2);
    assert!(
        refused.stderr.contains("more than --max-runs 1"),
        "{}",
        refused.stderr
    );
    // A stale partition: rebuilt, unless the build would take it as it is.
    p.run(&["taint", "raw/2020-01-01", "--reason", "bad rows"])
        .expect_code(0);
    assert_eq!(runs(&["analyze", "a/2020-01-01"]), ["a/2020-01-01"]);
    assert!(runs(&["analyze", "--allow-stale", "a/2020-01-01"]).is_empty());
    assert!(runs(&["build", "--dry-run", "--allow-stale", "a/2020-01-01"]).is_empty());
    // A preview of a build that cannot run says why, as the build would (exit 2).
    let missing = p.run(&["build", "--dry-run", "a/2020-01-05"]);
    missing.expect_code(2);
    assert!(
        missing.stderr.contains("raw/2020-01-05"),
        "{}",
        missing.stderr
    );
    let text = p.run(&["build", "--dry-run", "a/2020-01-02"]).stdout;
    assert!(text.contains("a/2020-01-02"), "{text}");
}

const LOGGING: &str = r#"
[graph]
name = "logs"
[[job]]
name = "noisy"
outputs = ["noisy/{n:int}"]
command = ["sh", "-c", "i=0; while [ $i -lt 60000 ]; do echo \"line $i: déjà vu ✓\"; i=$((i+1)); done; mkdir -p $DATABUILD_OUTPUT_DIR/noisy; touch $DATABUILD_OUTPUT_DIR/noisy/$DATABUILD_FIELD_N"]
[[job]]
name = "broken"
outputs = ["broken/{n:int}"]
command = ["sh", "-c", "echo working; echo 'boom: the input is bad' >&2; exit 1"]
[[job]]
name = "slow"
outputs = ["slow/{n:int}"]
command = ["sh", "-c", "echo started; while [ ! -e go ]; do sleep 0.05; done; echo finished; mkdir -p $DATABUILD_OUTPUT_DIR/slow; touch $DATABUILD_OUTPUT_DIR/slow/$DATABUILD_FIELD_N"]
"#;

/// `runs ID --log` prints the whole log (here 1.5 MB, read in chunks, multi-byte characters
/// whole), `logs REF` that of the run that built or failed a partition, `--follow` until the
/// run ends; a failed run's line in the build's output names the run and its log's last line.
#[test]
fn whole_logs_of_runs_and_partitions() {
    let p = Project::new(LOGGING);
    p.run(&["build", "noisy/1"]).expect_code(0);
    let run = p.run(&["--json", "status", "noisy/1"]).json()[0]["built_by"]
        .as_str()
        .unwrap()
        .to_string();
    let path = p.run(&["--json", "runs", &run]).json()["log_path"]
        .as_str()
        .unwrap()
        .to_string();
    let file = std::fs::read_to_string(&path).unwrap();
    assert!(file.len() > 1_100_000, "over a MiB: {} bytes", file.len());
    let whole = p.run(&["runs", &run, "--log"]);
    whole.expect_code(0);
    assert!(whole.stdout == file, "the log, whole and unchanged");
    assert_eq!(p.run(&["logs", "noisy/1"]).stdout, file);
    let service = Service::start(&p, &[]);
    let remote = p.run(&[
        "--server",
        &service.url,
        "runs",
        &run[run.len() - 8..],
        "--log",
    ]);
    assert!(remote.stdout == file, "the same through the service");
    let chunks = p.run(&["--json", "runs", &run, "--log"]).stdout;
    let chunks: Vec<serde_json::Value> = chunks
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert!(chunks.len() >= 2, "read in chunks of a MiB");
    assert_eq!(chunks.last().unwrap()["next_offset"], file.len());

    // A failure: its line names the run and the log's last line.
    let failed = p.run(&["build", "broken/1"]);
    failed.expect_code(1);
    let broken = p.run(&["--json", "status", "broken/1"]).json()[0]["built_by"]
        .as_str()
        .unwrap()
        .to_string();
    let line = format!("(run {}): ", &broken[broken.len() - 8..]);
    assert!(failed.stderr.contains(&line), "{}", failed.stderr);
    assert!(
        failed.stderr.contains("| log: boom: the input is bad"),
        "{}",
        failed.stderr
    );
    assert_eq!(
        p.run(&["logs", "broken/1"]).stdout,
        "working\nboom: the input is bad\n"
    );
    let never = p.run(&["logs", "broken/2"]);
    never.expect_code(2);
    assert!(
        never.stderr.contains("no run has built `broken/2`"),
        "{}",
        never.stderr
    );

    // Following a run while it runs, until it ends.
    let mut build = p.command().args(["build", "slow/1"]).spawn().unwrap();
    let slow = crate::util::eventually(Duration::from_secs(20), "the run starts", || {
        let v = p.run(&["--json", "status", "slow/1"]).json();
        v[0]["built_by"].as_str().map(str::to_string)
    });
    let mut follow = p
        .command()
        .args(["runs", &slow, "--log", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(follow.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "started");
    // Without --follow: what is there now, at once, though the run goes on.
    let now = std::time::Instant::now();
    assert_eq!(p.run(&["runs", &slow, "--log"]).stdout, "started\n");
    assert!(
        now.elapsed() < Duration::from_secs(2),
        "{:?}",
        now.elapsed()
    );
    std::fs::write(p.path().join("go"), "").unwrap();
    assert_eq!(lines.next().unwrap().unwrap(), "finished");
    assert!(lines.next().is_none(), "follow ends with the run");
    assert!(follow.wait().unwrap().success());
    assert!(build.wait().unwrap().success());

    // The process driving a run is killed: following its log ends all the same.
    std::fs::remove_file(p.path().join("go")).unwrap();
    let mut build = p.command().args(["build", "slow/2"]).spawn().unwrap();
    let orphan = crate::util::eventually(Duration::from_secs(20), "the run starts", || {
        let v = p.run(&["--json", "status", "slow/2"]).json();
        v[0]["built_by"].as_str().map(str::to_string)
    });
    build.kill().unwrap();
    build.wait().unwrap();
    let now = std::time::Instant::now();
    let followed = p.run(&["runs", &orphan, "--log", "--follow"]);
    followed.expect_code(0);
    assert!(
        now.elapsed() < Duration::from_secs(5),
        "{:?}",
        now.elapsed()
    );
    std::fs::write(p.path().join("go"), "").unwrap();
}

/// Braces as in templates: `{field=*}` (every value of a domain, from the graph the command
/// runs against), month and ISO week ranges; an unknown domain names the graph's.
#[test]
fn braces_expand_domains_months_and_weeks() {
    let p = Project::new(
        r#"
[graph]
name = "g"
[graph.domains]
city = ["nyc", "sf", "tokyo"]
[[job]]
name = "trips"
outputs = ["trips/city={city}/month={month}"]
command = ["true"]
[[job]]
name = "weekly"
outputs = ["weekly/week={week}"]
command = ["true"]
"#,
    );
    let service = Service::start(&p, &[]);
    let outputs = |args: &[&str]| -> Vec<Vec<String>> {
        [vec!["--json"], vec!["--json", "--server", &service.url]]
            .iter()
            .map(|global| {
                let out = p.run(&[global.as_slice(), args].concat());
                out.expect_code(0);
                let runs = out.json()["job_runs"].as_array().unwrap().clone();
                runs.iter()
                    .map(|r| r["outputs"][0].as_str().unwrap().to_string())
                    .collect()
            })
            .collect()
    };
    let trips = outputs(&["analyze", "trips/city={city=*}/month={2021-12..2022-01}"]);
    assert_eq!(trips[0], trips[1], "the same through the service");
    assert_eq!(
        trips[0],
        [
            "trips/city=nyc/month=2021-12",
            "trips/city=nyc/month=2022-01",
            "trips/city=sf/month=2021-12",
            "trips/city=sf/month=2022-01",
            "trips/city=tokyo/month=2021-12",
            "trips/city=tokyo/month=2022-01"
        ]
    );
    let weeks = outputs(&["analyze", "weekly/week={2020-W53..2021-W01}"]);
    assert_eq!(weeks[0], ["weekly/week=2020-W53", "weekly/week=2021-W01"]);
    let unknown = p.run(&["analyze", "trips/city={town=*}/month=2022-01"]);
    unknown.expect_code(2);
    assert!(
        unknown.stderr.contains("no domain `town`") && unknown.stderr.contains("it declares city"),
        "{}",
        unknown.stderr
    );
}

const TOUCH: &str = "mkdir -p $(dirname $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')); touch $DATABUILD_OUTPUT_DIR/$(echo $DATABUILD_OUTPUTS | tr -d '[]\"')";

/// A stale reason leads with its root cause and says how far away it is, the inputs it came
/// through named in order (not nested four levels deep).
#[test]
fn stale_reasons_lead_with_the_root_cause() {
    let graph = |version: &str| {
        let job = |name: &str, input: Option<&str>, v: &str| {
            let inputs = input
                .map(|i| format!("inputs = [\"{i}/{{d}}\"]\n"))
                .unwrap_or_default();
            format!(
                "[[job]]\nname = \"{name}\"\noutputs = [\"{name}/{{d:date}}\"]\n{inputs}command = [\"sh\", \"-c\", \"{}\"]\nversion = \"{v}\"\n",
                TOUCH.replace('"', "\\\"")
            )
        };
        format!(
            "[graph]\nname = \"g\"\n{}{}{}{}",
            job("daily_metrics", None, version),
            job("weekly", Some("daily_metrics"), "1"),
            job("monthly", Some("weekly"), "1"),
            job("report", Some("monthly"), "1"),
        )
    };
    let p = Project::new(&graph("1"));
    p.run(&["build", "report/2020-01-31"]).expect_code(0);
    p.file("databuild.toml", &graph("2"));
    let reason = |r: &str| {
        let v = p.run(&["--json", "status", r]).json();
        assert_eq!(v[0]["status"], "stale", "{v}");
        v[0]["reasons"][0].as_str().unwrap().to_string()
    };
    assert_eq!(
        reason("daily_metrics/2020-01-31"),
        "job `daily_metrics` changed version from 1 to 2"
    );
    assert_eq!(
        reason("weekly/2020-01-31"),
        "input `daily_metrics/2020-01-31` is stale: job `daily_metrics` changed version from 1 to 2"
    );
    assert_eq!(
        reason("report/2020-01-31"),
        "job `daily_metrics` changed version from 1 to 2, 3 inputs away (via \
         `monthly/2020-01-31` ← `weekly/2020-01-31` ← `daily_metrics/2020-01-31`)"
    );
    let text = p.run(&["status", "report/2020-01-31"]).stdout;
    assert!(text.contains("3 inputs away"), "{text}");
}

/// A closed stderr loses lines, not the build; a closed stdout never changes an exit code that
/// carries the answer (a failed build, a plan over --max-runs, a missing input).
#[test]
fn closed_pipes_keep_exit_codes_and_builds() {
    let p = Project::new(
        r#"
[graph]
name = "g"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "bad"
outputs = ["bad/{n:int}"]
command = ["sh", "-c", "echo no >&2; exit 3"]
[[job]]
name = "a"
outputs = ["a/{d:date}"]
inputs = ["raw/{d}"]
command = ["true"]
"#,
    );
    let closed = |args: &[&str], stdout: bool| {
        let mut cmd = p.command();
        cmd.args(args);
        if stdout {
            cmd.stdout(Stdio::piped()).stderr(Stdio::null());
        } else {
            cmd.stdout(Stdio::null()).stderr(Stdio::piped());
        }
        let mut child = cmd.spawn().unwrap();
        drop(child.stdout.take());
        drop(child.stderr.take());
        child.wait().unwrap().code()
    };
    assert_eq!(
        closed(&["--json", "build", "--keep-going", "bad/{1..4}"], true),
        Some(1)
    );
    assert_eq!(closed(&["build", "bad/{1..4}"], true), Some(1));
    assert_eq!(
        closed(
            &["build", "--dry-run", "--max-runs", "1", "bad/{1..4}"],
            true
        ),
        Some(2)
    );
    assert_eq!(closed(&["analyze", "a/2020-01-01"], true), Some(2));
    assert_eq!(
        closed(&["--json", "analyze", "a/2020-01-01"], true),
        Some(2)
    );
    assert_eq!(closed(&["check-log"], true), Some(0));
    // Its progress lines (stderr) have nowhere to go: the build still runs to its end.
    assert_eq!(
        closed(&["build", "--keep-going", "bad/{5..8}"], false),
        Some(1)
    );
    let builds = p.run(&["--json", "builds"]).json();
    let statuses: Vec<&str> = builds["builds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["status"].as_str().unwrap())
        .collect();
    assert!(
        statuses.iter().all(|s| *s == "failed"),
        "every build ended: {statuses:?}"
    );
    p.run(&["check-log"]).expect_code(0);
}

/// `logs REF --follow` goes on through a retry (each attempt is a run of its own) to the run
/// that ends the partition's build; a chunk asked for past a log's end is empty and says where
/// the log ends.
#[test]
fn following_a_partition_goes_through_its_retries() {
    let p = Project::new(
        r#"
[graph]
name = "g"
[[job]]
name = "flaky"
outputs = ["flaky/{n:int}"]
retries = 1
command = ["sh", "-c", "if [ $DATABUILD_ATTEMPT = 1 ]; then echo first fails; while [ ! -e go ]; do sleep 0.05; done; exit 1; fi; echo second works; mkdir -p $DATABUILD_OUTPUT_DIR/flaky && touch $DATABUILD_OUTPUT_DIR/flaky/1"]
"#,
    );
    let mut build = p.command().args(["build", "flaky/1"]).spawn().unwrap();
    let first = crate::util::eventually(Duration::from_secs(20), "the first attempt runs", || {
        let v = p.run(&["--json", "status", "flaky/1"]).json();
        v[0]["built_by"].as_str().map(str::to_string)
    });
    let follow = p
        .command()
        .args(["logs", "flaky/1", "--follow"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(500));
    std::fs::write(p.path().join("go"), "").unwrap();
    let out = follow.wait_with_output().unwrap();
    assert!(out.status.success());
    assert!(build.wait().unwrap().success());
    let text = String::from_utf8(out.stdout).unwrap();
    let second = p.run(&["--json", "status", "flaky/1"]).json()[0]["built_by"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(first, second);
    assert_eq!(
        text,
        format!(
            "first fails\n--- the next attempt: run {} ---\nsecond works\n",
            &second[second.len() - 8..]
        )
    );

    let service = Service::start(&p, &[]);
    let (code, chunk) = service.get(&format!(
        "/api/v1/job-runs/{second}/log/chunk?offset=999999"
    ));
    assert_eq!(code, 200);
    let size = "second works\n".len();
    assert_eq!(
        (chunk["offset"].clone(), chunk["next_offset"].clone()),
        (size.into(), size.into())
    );
    assert_eq!(
        (chunk["size"].clone(), chunk["text"].clone()),
        (size.into(), "".into())
    );
    assert_eq!(chunk["running"], false);
}

/// A run whose log has nothing to show says why on stderr, instead of printing nothing.
#[test]
fn a_run_without_a_log_says_why() {
    let p = Project::new(
        r#"
[graph]
name = "silent"
[[job]]
name = "quiet"
outputs = ["quiet/{n:int}"]
command = ["sh", "-c", "mkdir -p data/quiet; touch data/quiet/$DATABUILD_FIELD_N"]
"#,
    );
    p.run(&["build", "quiet/1"]).expect_code(0);
    let run = p.run(&["--json", "status", "quiet/1"]).json()[0]["built_by"]
        .as_str()
        .unwrap()
        .to_string();
    let log = p.run(&["runs", &run, "--log"]);
    log.expect_code(0);
    assert_eq!(log.stdout, "");
    assert!(
        log.stderr
            .contains("has no log: its job wrote nothing, or `databuild gc` removed the log"),
        "{}",
        log.stderr
    );
    // `--json` answers the chunk as ever, and nothing else.
    let json = p.run(&["--json", "runs", &run, "--log"]);
    assert_eq!(json.stderr, "");
    assert_eq!(json.json()["size"], 0);
}
