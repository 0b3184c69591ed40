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
    assert!(dot.stdout.contains("(dynamic inputs)"), "{}", dot.stdout);
    let mermaid = p.run(&["graph", "--format", "mermaid"]);
    assert!(mermaid.stdout.contains("d0 --> j0"), "{}", mermaid.stdout);
    let json = p.run(&["--json", "graph"]).json();
    assert_eq!(json["jobs"][1]["dynamic"], true);
    assert_eq!(json["edges"][0]["via"], "raw/{d}");
}
