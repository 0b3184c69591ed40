//! The checks of a whole graph, once its sections are loaded: no two producers may claim the
//! same ref, and every input template must reach a producer (each is linked to those it reads).

use super::load::Loader;
use super::*;
use crate::shape::Shape;

impl Loader<'_> {
    /// Rejects two producers that could claim the same ref (contract section 1).
    pub(super) fn check_overlaps(&self, graph: &Graph) -> Result<(), GraphError> {
        let producers: Vec<Producer> = graph.producers().collect();
        let shapes: Vec<Shape> = producers
            .iter()
            .map(|&p| Shape::of_pattern(graph.pattern_of(p)))
            .collect();
        for i in 0..producers.len() {
            for k in i + 1..producers.len() {
                let (a, b) = (
                    graph.pattern_of(producers[i]),
                    graph.pattern_of(producers[k]),
                );
                if !prefixes_compatible(a.literal_prefix(), b.literal_prefix())
                    || !shapes[i].intersects(&shapes[k])
                {
                    continue;
                }
                let describe = |p: Producer| match p {
                    Producer::Job { job, .. } => format!("job `{}`", graph.jobs[job].name),
                    Producer::Dataset(d) => format!("dataset `{}`", graph.datasets[d].name),
                    Producer::Alias(t) => format!("table alias `{}`", graph.tables[t].name),
                };
                let (da, db) = (describe(producers[i]), describe(producers[k]));
                let message = if da == db {
                    format!("its outputs `{a}` and `{b}` can match the same ref")
                } else {
                    format!(
                        "{da} (`{a}`) and {db} (`{b}`) can match the same ref; every ref must have one producer, so make the patterns disjoint"
                    )
                };
                let context = (da == db).then_some(da);
                return Err(self.err(context, message));
            }
        }
        Ok(())
    }

    /// Links each input template to the producers it reads, refusing templates that reach none.
    pub(super) fn link_templates(&self, graph: &mut Graph) -> Result<(), GraphError> {
        let producers: Vec<(Producer, Shape, String)> = graph
            .producers()
            .map(|p| {
                let pattern = graph.pattern_of(p);
                (
                    p,
                    Shape::of_pattern(pattern),
                    pattern.literal_prefix().to_string(),
                )
            })
            .collect();
        for job in &mut graph.jobs {
            let Deps::Static(templates) = &mut job.deps else {
                continue;
            };
            for linked in templates {
                let shape = linked.template.shape(&graph.domains);
                let prefix = template_prefix(linked.template.as_str());
                linked.reads = producers
                    .iter()
                    .filter(|(_, s, p)| prefixes_compatible(p, prefix) && s.intersects(&shape))
                    .map(|(p, _, _)| *p)
                    .collect();
                if linked.reads.is_empty() {
                    return Err(self.err(
                        format!("job `{}`", job.name),
                        format!(
                            "input template `{}` matches no job output and no dataset; declare a [[dataset]] for external data or fix the template",
                            linked.template.as_str()
                        ),
                    ));
                }
            }
        }
        Ok(())
    }
}

/// Two literal prefixes can only belong to overlapping patterns if one extends the other.
fn prefixes_compatible(a: &str, b: &str) -> bool {
    a.starts_with(b) || b.starts_with(a)
}

fn template_prefix(t: &str) -> &str {
    &t[..t.find('{').unwrap_or(t.len())]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::graph::tests::{load, PODCAST};

    #[test]
    fn templates_link_to_what_they_read() {
        let g = load(PODCAST).unwrap();
        let Deps::Static(t) = &g.job("summary").unwrap().deps else {
            panic!("static")
        };
        assert_eq!(t[0].reads, [Producer::Job { job: 0, output: 0 }]);
    }
}
