//! The command line in daily use (#29): pipes, getting started, completions.

use std::process::Stdio;

use crate::util::Project;

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
