//! Where each value of a YAML file is: a map from a field path (`spec.spokes[0].rules[2]`) to
//! its line and column, so an error found on the parsed value is reported at its line. Built
//! from a YAML event parser's marks, which also finds what a value tree cannot show: a key
//! written twice in one mapping (the value tree keeps the last one without a word).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use granit_parser::{Event, Parser};

/// One step of a field path.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Seg {
    Key(String),
    Index(usize),
}

/// A field path inside one document, printed as `spec.spokes[0].rules[2].when`.
#[derive(Clone, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FieldPath(pub Vec<Seg>);

impl FieldPath {
    pub fn child(&self, key: &str) -> FieldPath {
        let mut p = self.0.clone();
        p.push(Seg::Key(key.to_string()));
        FieldPath(p)
    }

    pub fn item(&self, index: usize) -> FieldPath {
        let mut p = self.0.clone();
        p.push(Seg::Index(index));
        FieldPath(p)
    }

    pub fn parent(&self) -> Option<FieldPath> {
        let (_, rest) = self.0.split_last()?;
        Some(FieldPath(rest.to_vec()))
    }

    /// Parses serde_path_to_error's rendering (`spokes[0].rules[1].fieldRename`).
    pub fn parse(text: &str) -> FieldPath {
        let mut segs = Vec::new();
        for part in text.split('.').filter(|p| !p.is_empty() && *p != "?") {
            let (key, mut rest) = match part.find('[') {
                Some(i) => (&part[..i], &part[i..]),
                None => (part, ""),
            };
            if !key.is_empty() {
                segs.push(Seg::Key(key.to_string()));
            }
            while let Some(end) = rest.find(']') {
                if let Ok(i) = rest[1..end].parse() {
                    segs.push(Seg::Index(i));
                }
                rest = &rest[end + 1..];
            }
        }
        FieldPath(segs)
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.0.is_empty() {
            return f.write_str("(the document)");
        }
        for (i, s) in self.0.iter().enumerate() {
            match s {
                Seg::Key(k) if i == 0 => write!(f, "{k}")?,
                Seg::Key(k) => write!(f, ".{k}")?,
                Seg::Index(n) => write!(f, "[{n}]")?,
            }
        }
        Ok(())
    }
}

/// A 1-based line and column.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pos {
    pub line: usize,
    pub column: usize,
}

/// The positions of one document's fields: a mapping entry is at its key, a list item at its
/// first character.
#[derive(Clone, Debug, Default)]
pub struct Marks {
    at: HashMap<FieldPath, Pos>,
}

impl Marks {
    /// The position of `path`, or of its nearest ancestor that has one.
    pub fn find(&self, path: &FieldPath) -> Option<Pos> {
        let mut p = Some(path.clone());
        while let Some(cur) = p {
            if let Some(pos) = self.at.get(&cur) {
                return Some(*pos);
            }
            p = cur.parent();
        }
        None
    }
}

/// A key written twice in one mapping.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Duplicate {
    pub document: usize,
    pub path: FieldPath,
    pub first: Pos,
    pub second: Pos,
}

/// What the walk over the events found.
#[derive(Debug, Default)]
pub struct Located {
    /// One entry per document, in order.
    pub documents: Vec<Marks>,
    pub duplicates: Vec<Duplicate>,
}

enum Frame {
    Map { path: FieldPath, key: Option<String>, seen: BTreeMap<String, Pos> },
    Seq { path: FieldPath, next: usize },
}

fn pos(m: granit_parser::Marker) -> Pos {
    Pos { line: m.line(), column: m.col() + 1 }
}

/// Walks the YAML events of `text`. `None` when the event parser refuses the text (the value
/// parser's own error, with its line, is then what the user sees).
pub fn locate(text: &str) -> Option<Located> {
    let mut out = Located::default();
    let mut stack: Vec<Frame> = Vec::new();
    for next in Parser::new_from_str(text) {
        let (event, span) = next.ok()?;
        let at = pos(span.start);
        match event {
            Event::DocumentStart(..) => {
                out.documents.push(Marks::default());
                stack.clear();
            }
            Event::MappingEnd | Event::SequenceEnd => {
                stack.pop();
                end_of_value(&mut stack);
            }
            Event::Scalar(..) | Event::Alias(..) | Event::MappingStart(..) | Event::SequenceStart(..) => {
                let document = out.documents.len();
                let key_text = match &event {
                    Event::Scalar(v, ..) => Some(v.to_string()),
                    _ => None,
                };
                let Some(marks) = out.documents.last_mut() else { continue };
                // A scalar in key position is a key: record it, check it is new.
                if let Some(Frame::Map { path, key, seen }) = stack.last_mut()
                    && key.is_none()
                {
                    let k = key_text.unwrap_or_else(|| "?".to_string());
                    let field = path.child(&k);
                    if let Some(first) = seen.get(&k) {
                        out.duplicates.push(Duplicate {
                            document,
                            path: field.clone(),
                            first: *first,
                            second: at,
                        });
                    } else {
                        seen.insert(k.clone(), at);
                        marks.at.insert(field, at);
                    }
                    if matches!(event, Event::MappingStart(..) | Event::SequenceStart(..)) {
                        // A list or mapping as a key: no config has one, and no field path
                        // could name what follows; the value parser's errors stand alone.
                        return None;
                    }
                    *key = Some(k);
                    continue;
                }
                let path = match stack.last_mut() {
                    None => FieldPath::default(),
                    Some(Frame::Map { path, key, .. }) => path.child(key.as_deref().unwrap_or("?")),
                    Some(Frame::Seq { path, next }) => {
                        let p = path.item(*next);
                        *next += 1;
                        marks.at.entry(p.clone()).or_insert(at);
                        p
                    }
                };
                if path.0.is_empty() {
                    marks.at.insert(path.clone(), at);
                }
                match event {
                    Event::MappingStart(..) => {
                        stack.push(Frame::Map { path, key: None, seen: BTreeMap::new() })
                    }
                    Event::SequenceStart(..) => stack.push(Frame::Seq { path, next: 0 }),
                    _ => end_of_value(&mut stack),
                }
            }
            _ => {}
        }
    }
    Some(out)
}

/// A mapping's value is complete: the next scalar is a key again.
fn end_of_value(stack: &mut [Frame]) {
    if let Some(Frame::Map { key, .. }) = stack.last_mut() {
        *key = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(text: &str) -> FieldPath {
        FieldPath::parse(text)
    }

    const CONFIG: &str = "\
apiVersion: conversion.dco.rs/v1alpha1
kind: CRDConversionConfig
metadata:
  name: widgets
spec:
  hubVersion: v2
  spokes:
    - version: v1
      rules:
        - strategy: FieldRename
          fieldRename: {hubPath: spec.a, spokePath: spec.b}
        - strategy: ForEach
          forEach:
            rules:
              - strategy: Delete
                wehn: {path: a, equals: 1}
";

    #[test]
    fn every_field_has_its_line_and_column() {
        let l = locate(CONFIG).unwrap();
        assert_eq!(l.documents.len(), 1);
        let m = &l.documents[0];
        let at = |s: &str| m.find(&p(s)).map(|p| (p.line, p.column));
        assert_eq!(at("kind"), Some((2, 1)));
        assert_eq!(at("metadata.name"), Some((4, 3)));
        assert_eq!(at("spec.spokes[0]"), Some((8, 7)));
        assert_eq!(at("spec.spokes[0].version"), Some((8, 7)));
        assert_eq!(at("spec.spokes[0].rules[1]"), Some((12, 11)));
        assert_eq!(at("spec.spokes[0].rules[0].fieldRename.spokePath"), Some((11, 42)));
        assert_eq!(at("spec.spokes[0].rules[1].forEach.rules[0].wehn"), Some((16, 17)));
        // A path that is not in the file is placed at its nearest ancestor.
        assert_eq!(at("spec.spokes[0].rules[1].forEach.missing"), Some((13, 11)));
        assert!(l.duplicates.is_empty());
    }

    #[test]
    fn documents_are_counted_and_marked_apart() {
        let l = locate("a: 1\n---\nb:\n  c: 2\n---\n- x\n- y: 3\n").unwrap();
        assert_eq!(l.documents.len(), 3);
        assert_eq!(l.documents[1].find(&p("b.c")), Some(Pos { line: 4, column: 3 }));
        assert_eq!(l.documents[2].find(&p("[1].y")), Some(Pos { line: 7, column: 3 }));
        assert_eq!(l.documents[0].find(&p("b")), Some(Pos { line: 1, column: 1 }), "the document's start");
    }

    #[test]
    fn a_key_written_twice_is_found_with_both_lines() {
        let l =
            locate("spec:\n  hubVersion: v1\n  spokes: []\n  hubVersion: v2\nother:\n  spokes: 1\n").unwrap();
        assert_eq!(
            l.duplicates,
            vec![Duplicate {
                document: 1,
                path: p("spec.hubVersion"),
                first: Pos { line: 2, column: 3 },
                second: Pos { line: 4, column: 3 }
            }]
        );
        // The same key in two different mappings is no duplicate; nor is it in a flow mapping.
        assert!(locate("a: {x: 1, y: 2}\nb: {x: 1}\n").unwrap().duplicates.is_empty());
        assert_eq!(locate("a: {x: 1, x: 2}\n").unwrap().duplicates.len(), 1);
    }

    #[test]
    fn paths_print_and_parse_alike() {
        for s in ["spec.spokes[0].rules[2].wehn", "spokes[3]", "a.b.c"] {
            assert_eq!(p(s).to_string(), s);
        }
        assert_eq!(p("").to_string(), "(the document)");
        assert_eq!(p("spec").child("spokes").item(1).to_string(), "spec.spokes[1]");
    }

    #[test]
    fn text_the_event_parser_refuses_gives_none() {
        assert!(locate("a: [1, 2\n").is_none());
    }
}
