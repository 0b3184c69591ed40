//! Shapes: the set of strings a pattern or an input template can produce, as a small automaton.
//!
//! The graph must reject two jobs whose output patterns could match the same ref, and link each
//! input template to the patterns it can reach. Both questions are "do these two languages
//! intersect?", answered exactly (up to calendar validity of dates) by a product walk of two
//! automata over character classes.

use std::collections::HashSet;

use crate::pattern::{FieldType, Pattern, Token};

/// The characters one transition accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Char(char),
    /// Any character but `/` (the alphabet of `str` fields).
    NotSlash,
    Digit,
}

impl Class {
    fn intersects(self, other: Class) -> bool {
        use Class::*;
        match (self, other) {
            (Char(a), Char(b)) => a == b,
            (Char(c), NotSlash) | (NotSlash, Char(c)) => c != '/',
            (Char(c), Digit) | (Digit, Char(c)) => c.is_ascii_digit(),
            (NotSlash | Digit, NotSlash | Digit) => true,
        }
    }
}

/// One piece of a shape, before it is turned into an automaton.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Part {
    Literal(String),
    Typed(FieldType),
    /// One of a fixed list of strings (a `{field=*}` domain).
    OneOf(Vec<String>),
}

/// An automaton without epsilon moves. State 0 is the start.
#[derive(Debug, Clone)]
pub struct Shape {
    edges: Vec<Vec<(Class, usize)>>,
    accepting: Vec<bool>,
}

impl Shape {
    pub fn of_pattern(pattern: &Pattern) -> Shape {
        let parts: Vec<Part> = pattern
            .tokens()
            .iter()
            .map(|t| match t {
                Token::Literal(l) => Part::Literal(l.clone()),
                Token::Field { ty, .. } => Part::Typed(*ty),
            })
            .collect();
        Shape::of_parts(&parts)
    }

    pub(crate) fn of_parts(parts: &[Part]) -> Shape {
        let mut b = Builder {
            edges: vec![Vec::new()],
        };
        let mut frontier = vec![0];
        for part in parts {
            frontier = match part {
                Part::Literal(l) => b.literal(&frontier, l),
                Part::Typed(FieldType::Str) => b.plus(&frontier, Class::NotSlash),
                Part::Typed(FieldType::Int) => {
                    let signed = b.literal(&frontier, "-");
                    let mut starts = frontier.clone();
                    starts.extend(signed);
                    b.plus(&starts, Class::Digit)
                }
                Part::Typed(ty @ (FieldType::Date | FieldType::Hour)) => {
                    let shape = if *ty == FieldType::Date {
                        "dddd-dd-dd"
                    } else {
                        "dddd-dd-ddTdd"
                    };
                    let mut f = frontier;
                    for c in shape.chars() {
                        let class = if c == 'd' {
                            Class::Digit
                        } else {
                            Class::Char(c)
                        };
                        f = vec![b.step(&f, class)];
                    }
                    f
                }
                Part::OneOf(options) => {
                    let mut ends = Vec::new();
                    for o in options {
                        ends.extend(b.literal(&frontier, o));
                    }
                    ends
                }
            };
        }
        let mut accepting = vec![false; b.edges.len()];
        for s in frontier {
            accepting[s] = true;
        }
        Shape {
            edges: b.edges,
            accepting,
        }
    }

    /// Is there a string both shapes accept?
    pub fn intersects(&self, other: &Shape) -> bool {
        let mut seen = HashSet::new();
        let mut stack = vec![(0usize, 0usize)];
        while let Some((a, b)) = stack.pop() {
            if !seen.insert((a, b)) {
                continue;
            }
            if self.accepting[a] && other.accepting[b] {
                return true;
            }
            for &(ca, ta) in &self.edges[a] {
                for &(cb, tb) in &other.edges[b] {
                    if ca.intersects(cb) {
                        stack.push((ta, tb));
                    }
                }
            }
        }
        false
    }
}

struct Builder {
    edges: Vec<Vec<(Class, usize)>>,
}

impl Builder {
    fn new_state(&mut self) -> usize {
        self.edges.push(Vec::new());
        self.edges.len() - 1
    }

    /// A transition on `class` from every state of `from` into one new state.
    fn step(&mut self, from: &[usize], class: Class) -> usize {
        let to = self.new_state();
        for &f in from {
            self.edges[f].push((class, to));
        }
        to
    }

    fn literal(&mut self, from: &[usize], text: &str) -> Vec<usize> {
        let mut f = from.to_vec();
        for c in text.chars() {
            f = vec![self.step(&f, Class::Char(c))];
        }
        f
    }

    /// One or more characters of `class`.
    fn plus(&mut self, from: &[usize], class: Class) -> Vec<usize> {
        let s = self.step(from, class);
        self.edges[s].push((class, s));
        vec![s]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlap(a: &str, b: &str) -> bool {
        let sa = Shape::of_pattern(&Pattern::parse(a).unwrap());
        let sb = Shape::of_pattern(&Pattern::parse(b).unwrap());
        let ab = sa.intersects(&sb);
        assert_eq!(ab, sb.intersects(&sa), "intersection must be symmetric");
        ab
    }

    #[test]
    fn detects_overlaps() {
        assert!(overlap("reviews/date={d:date}", "reviews/date={x}"));
        assert!(overlap("a/{x}", "a/b"));
        assert!(overlap("a/{x}_{y}", "a/{z}"));
        assert!(overlap("a/{n:int}", "a/{d}"));
        assert!(overlap("{bucket}/x", "logs/{y}"));
        assert!(overlap("a/{n:int}", "a/-5"));
    }

    #[test]
    fn tells_disjoint_patterns_apart() {
        assert!(!overlap("reviews/date={d:date}", "reviews/date=latest"));
        assert!(!overlap("a/{x}", "a/{x}/b"));
        assert!(!overlap("a/{n:int}", "a/{d:date}"));
        assert!(!overlap("a/{n:int}", "a/x{s}"));
        assert!(!overlap("reviews/{d:date}", "categorized/{d:date}"));
    }

    #[test]
    fn domains_are_exact() {
        let t = Shape::of_parts(&[
            Part::Literal("c=".into()),
            Part::OneOf(vec!["news".into(), "comedy".into()]),
        ]);
        let news = Shape::of_pattern(&Pattern::parse("c=news").unwrap());
        let other = Shape::of_pattern(&Pattern::parse("c=tech").unwrap());
        assert!(t.intersects(&news));
        assert!(!t.intersects(&other));
    }
}
