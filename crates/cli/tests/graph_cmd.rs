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
command = ["true"]
[[job]]
name = "b"
outputs = ["b/{d:date}"]
config = ["true"]
command = ["true"]
"#;

#[test]
fn prints_dot_mermaid_and_json() {
    let p = Project::new(GRAPH);
    let dot = p.run(&["graph"]);
    dot.expect_code(0);
    assert!(dot.stdout.starts_with("digraph \"g\" {"), "{}", dot.stdout);
    assert!(
        dot.stdout.contains("\"dataset:raw\" -> \"job:a\""),
        "{}",
        dot.stdout
    );
    assert!(
        dot.stdout.contains("(dynamic inputs: none recorded yet)"),
        "{}",
        dot.stdout
    );
    let mermaid = p.run(&["graph", "--format", "mermaid"]);
    assert!(mermaid.stdout.contains("d0 --> j0"), "{}", mermaid.stdout);
    let json = p.run(&["--json", "graph"]).json();
    assert_eq!(json["jobs"][1]["dynamic"], true);
    assert_eq!(json["edges"][0]["via"], "raw/{d}");
}

/// A config job's edges, drawn dashed from what its latest runs read (the graph file cannot
/// say), in every format, here and through a service.
#[test]
fn dynamic_jobs_are_drawn_with_the_inputs_their_runs_read() {
    let p = Project::new(
        r#"
[graph]
name = "g"
[[dataset]]
name = "raw"
pattern = "raw/{d:date}"
[[job]]
name = "b"
outputs = ["b/{d:date}"]
config = ["sh", "-c", "echo '{\"configs\": [{\"outputs\": [\"b/2020-01-01\"], \"inputs\": [{\"ref\": \"raw/2020-01-01\", \"dep\": \"materialize\"}]}]}'"]
command = ["sh", "-c", "mkdir -p $DATABUILD_OUTPUT_DIR/b && touch $DATABUILD_OUTPUT_DIR/b/2020-01-01"]
"#,
    );
    p.partition("raw/2020-01-01");
    p.run(&["build", "b/2020-01-01"]).expect_code(0);
    let service = crate::util::Service::start(&p, &[]);
    for global in [vec![], vec!["--server", service.url.as_str()]] {
        let run = |args: &[&str]| p.run(&[global.as_slice(), args].concat()).stdout;
        let dot = run(&["graph"]);
        assert!(
            dot.contains(
                "\"dataset:raw\" -> \"job:b\" [style=dashed, label=\"read by its latest runs\"]"
            ),
            "{dot}"
        );
        assert!(dot.contains("dynamic inputs: dashed"), "{dot}");
        let mermaid = run(&["graph", "--format", "mermaid"]);
        assert!(
            mermaid.contains("d0 -.->|read by its latest runs| j0"),
            "{mermaid}"
        );
        let json: serde_json::Value = serde_json::from_str(&run(&["--json", "graph"])).unwrap();
        assert_eq!(json["edges"][0]["from"], "raw");
        assert_eq!(json["edges"][0]["recorded"], true);
    }
}
