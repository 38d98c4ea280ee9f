//! The operator's modules form layers (docs/operator.md, "Layers"): no import cycle at any
//! folder level, and no function longer than a screenful or two.
//!
//! A reference from module `a::b` to `c::d` (through `crate::`, `super::` or `self::` paths,
//! `use` trees included) is an edge between the two children of their lowest common ancestor
//! on those paths: here `a -> c` at the crate root. Every such sibling graph must be acyclic.
//! A child naming its ancestor (`super::Item`) or a parent naming its child is not an edge:
//! that is how a folder wires its parts.
//!
//! `cargo test -p dco-operator --test layers -- --nocapture` prints the graph and the longest
//! functions.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// The longest a function of the operator may be, in lines from `fn` to its closing brace.
const MAX_FUNCTION_LINES: usize = 120;

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Path, // `::`
    Open, // `{`
    Close,
    Comma,
    Star,
    Semi,
    ParenOpen,
    ParenClose,
    Other,
}

/// Tokens with their line numbers; comments, strings and char literals dropped.
fn lex(src: &str) -> Vec<(Tok, usize)> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b'/' if b.get(i + 1) == Some(&b'/') => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'/' if b.get(i + 1) == Some(&b'*') => {
                let mut depth = 0;
                while i < b.len() {
                    if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
                        depth += 1;
                        i += 2;
                    } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
                        depth -= 1;
                        i += 2;
                        if depth == 0 {
                            break;
                        }
                    } else {
                        if b[i] == b'\n' {
                            line += 1;
                        }
                        i += 1;
                    }
                }
            }
            b'r' if matches!(b.get(i + 1), Some(b'"') | Some(b'#')) && raw_string_start(b, i).is_some() => {
                let (hashes, body) = raw_string_start(b, i).expect("checked");
                i = body;
                loop {
                    if i >= b.len() {
                        break;
                    }
                    if b[i] == b'"'
                        && b[i + 1..].iter().take(hashes).filter(|&&h| h == b'#').count() == hashes
                    {
                        i += 1 + hashes;
                        break;
                    }
                    if b[i] == b'\n' {
                        line += 1;
                    }
                    i += 1;
                }
            }
            b'"' => {
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\\' {
                        i += 1;
                    }
                    if b.get(i) == Some(&b'\n') {
                        line += 1;
                    }
                    i += 1;
                }
                i += 1;
            }
            // A char literal ('x', '\n', '\u{1F}') rather than a lifetime ('a).
            b'\'' if b.get(i + 1) == Some(&b'\\') => {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            }
            b'\'' if b.get(i + 2) == Some(&b'\'') => i += 3,
            b'\'' if char_literal_len(&src[i + 1..]).is_some() => {
                i += 1 + char_literal_len(&src[i + 1..]).expect("checked") + 1;
            }
            _ if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                out.push((Tok::Ident(src[start..i].to_string()), line));
            }
            b':' if b.get(i + 1) == Some(&b':') => {
                out.push((Tok::Path, line));
                i += 2;
            }
            _ => {
                let tok = match c {
                    b'{' => Tok::Open,
                    b'}' => Tok::Close,
                    b',' => Tok::Comma,
                    b'*' => Tok::Star,
                    b';' => Tok::Semi,
                    b'(' => Tok::ParenOpen,
                    b')' => Tok::ParenClose,
                    _ => Tok::Other,
                };
                if !c.is_ascii_whitespace() {
                    out.push((tok, line));
                }
                i += 1;
            }
        }
    }
    out
}

/// `r"…"` or `r#"…"#`: the number of `#`s and where the body starts.
fn raw_string_start(b: &[u8], i: usize) -> Option<(usize, usize)> {
    if i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_') {
        return None; // the end of an identifier such as `for`
    }
    let mut j = i + 1;
    while b.get(j) == Some(&b'#') {
        j += 1;
    }
    (b.get(j) == Some(&b'"')).then_some((j - i - 1, j + 1))
}

/// The byte length of one non-ASCII char followed by `'`, as in `'é'`.
fn char_literal_len(rest: &str) -> Option<usize> {
    let c = rest.chars().next()?;
    (c.len_utf8() > 1 && rest[c.len_utf8()..].starts_with('\'')).then_some(c.len_utf8())
}

/// Every path a `use` tree or an expression names after `crate::`/`super::`/`self::`,
/// resolved to absolute segments, with the line it is on.
fn paths(module: &[String], toks: &[(Tok, usize)]) -> Vec<(Vec<String>, usize)> {
    let mut out = Vec::new();
    // Inline modules (`mod tests { … }`) shift what `super` and `self` mean.
    let mut scope: Vec<(String, usize)> = Vec::new();
    let mut depth = 0usize;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Open => depth += 1,
            Tok::Close => {
                depth = depth.saturating_sub(1);
                if scope.last().is_some_and(|(_, d)| *d == depth) {
                    scope.pop();
                }
            }
            Tok::Ident(m) if m == "mod" => {
                if let (Some((Tok::Ident(name), _)), Some((Tok::Open, _))) =
                    (toks.get(i + 1), toks.get(i + 2))
                {
                    scope.push((name.clone(), depth));
                    depth += 1;
                    i += 3;
                    continue;
                }
            }
            Tok::Ident(start)
                if matches!(start.as_str(), "crate" | "super" | "self")
                    && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path)
                    && !(i > 0 && toks[i - 1].0 == Tok::Path) =>
            {
                let mut here: Vec<String> = module.to_vec();
                here.extend(scope.iter().map(|(n, _)| n.clone()));
                let mut base = match start.as_str() {
                    "crate" => Vec::new(),
                    "self" => here.clone(),
                    _ => {
                        here.pop();
                        here
                    }
                };
                let mut j = i + 2;
                while let (Some((Tok::Ident(s), _)), Some((Tok::Path, _))) = (toks.get(j), toks.get(j + 1)) {
                    if s != "super" {
                        break;
                    }
                    base.pop();
                    j += 2;
                }
                let line = toks[i].1;
                let mut found = Vec::new();
                i = tree(toks, j, base, &mut found);
                out.extend(found.into_iter().map(|p| (p, line)));
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// One use tree from `toks[i]` under `prefix`; returns the index after it.
fn tree(toks: &[(Tok, usize)], mut i: usize, mut prefix: Vec<String>, out: &mut Vec<Vec<String>>) -> usize {
    loop {
        match toks.get(i).map(|t| &t.0) {
            Some(Tok::Ident(s)) => {
                if s != "self" {
                    prefix.push(s.clone());
                }
                if toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path) {
                    i += 2;
                    continue;
                }
                out.push(prefix);
                return i + 1;
            }
            Some(Tok::Open) => {
                i += 1;
                loop {
                    match toks.get(i).map(|t| &t.0) {
                        Some(Tok::Close) => return i + 1,
                        Some(Tok::Comma) => i += 1,
                        None => return i,
                        _ => i = tree(toks, i, prefix.clone(), out),
                    }
                }
            }
            _ => {
                out.push(prefix);
                return i + 1;
            }
        }
    }
}

/// Module path of a source file under `src/` (`None` for the binary's `main.rs`).
fn module_of(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel.iter().map(|p| p.to_string_lossy().into_owned()).collect();
    let file = parts.pop()?;
    let stem = file.strip_suffix(".rs")?;
    match (parts.is_empty(), stem) {
        (true, "main") => None,
        (true, "lib") => Some(Vec::new()),
        (_, "mod") => Some(parts),
        _ => {
            parts.push(stem.to_string());
            Some(parts)
        }
    }
}

fn sources(src: &Path) -> BTreeMap<Vec<String>, (String, String)> {
    fn walk(dir: &Path, root: &Path, out: &mut BTreeMap<Vec<String>, (String, String)>) {
        let mut entries: Vec<_> = std::fs::read_dir(dir).expect("read src").flatten().collect();
        entries.sort_by_key(|e| e.path());
        for e in entries {
            let path = e.path();
            if path.is_dir() {
                walk(&path, root, out);
            } else if let Some(module) = path.strip_prefix(root).ok().and_then(module_of) {
                let text = std::fs::read_to_string(&path).expect("read source");
                out.insert(module, (path.strip_prefix(root).unwrap().display().to_string(), text));
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(src, src, &mut out);
    out
}

/// An edge between siblings: (parent folder, from child, to child) → where it is made.
type Edges = BTreeMap<(Vec<String>, String, String), Vec<String>>;

fn edges(files: &BTreeMap<Vec<String>, (String, String)>) -> Edges {
    let modules: BTreeSet<&Vec<String>> = files.keys().collect();
    let mut edges = Edges::new();
    for (from, (file, text)) in files {
        for (path, line) in paths(from, &lex(text)) {
            // The longest prefix that is a module of its own file.
            let to = (0..=path.len()).rev().map(|n| path[..n].to_vec()).find(|p| modules.contains(p));
            let Some(to) = to else { continue };
            let common = from.iter().zip(&to).take_while(|(a, b)| a == b).count();
            if common == from.len() || common == to.len() {
                continue; // parent and child
            }
            edges
                .entry((from[..common].to_vec(), from[common].clone(), to[common].clone()))
                .or_default()
                .push(format!("{file}:{line} {}", path.join("::")));
        }
    }
    edges
}

/// The cycles of every sibling graph, each as its members (Tarjan's strongly connected
/// components of more than one module).
fn cycles(edges: &Edges) -> Vec<(Vec<String>, Vec<String>)> {
    let mut graphs: BTreeMap<&Vec<String>, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for (parent, a, b) in edges.keys() {
        let g = graphs.entry(parent).or_default();
        g.entry(a).or_default().push(b);
        g.entry(b).or_default();
    }
    let mut out = Vec::new();
    for (parent, g) in graphs {
        for scc in strongly_connected(&g) {
            if scc.len() > 1 {
                out.push((parent.clone(), scc.into_iter().map(str::to_string).collect()));
            }
        }
    }
    out
}

fn strongly_connected<'a>(g: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct T<'a, 'g> {
        g: &'g BTreeMap<&'a str, Vec<&'a str>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    impl<'a> T<'a, '_> {
        fn visit(&mut self, v: &'a str) {
            let n = self.index.len();
            self.index.insert(v, n);
            self.low.insert(v, n);
            self.stack.push(v);
            self.on.insert(v);
            for &w in &self.g[v] {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let low = self.low[v].min(self.low[w]);
                    self.low.insert(v, low);
                } else if self.on.contains(w) {
                    let low = self.low[v].min(self.index[w]);
                    self.low.insert(v, low);
                }
            }
            if self.low[v] == self.index[v] {
                let mut scc = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on.remove(w);
                    scc.push(w);
                    if w == v {
                        break;
                    }
                }
                scc.sort();
                self.out.push(scc);
            }
        }
    }
    let mut t = T {
        g,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        out: Vec::new(),
    };
    for &v in g.keys() {
        if !t.index.contains_key(v) {
            t.visit(v);
        }
    }
    t.out
}

/// `(lines, file:line, name)` of every function with a body.
fn functions(files: &BTreeMap<Vec<String>, (String, String)>) -> Vec<(usize, String, String)> {
    let mut out = Vec::new();
    for (file, text) in files.values() {
        let toks = lex(text);
        for (i, (tok, line)) in toks.iter().enumerate() {
            let (Tok::Ident(kw), Some((Tok::Ident(name), _))) = (tok, toks.get(i + 1)) else { continue };
            if kw != "fn" {
                continue;
            }
            // The body is the first `{` outside the signature's parentheses; `;` ends a
            // declaration without one.
            let mut parens = 0i32;
            let mut j = i + 2;
            let body = loop {
                match toks.get(j).map(|t| &t.0) {
                    Some(Tok::ParenOpen) => parens += 1,
                    Some(Tok::ParenClose) => parens -= 1,
                    Some(Tok::Open) if parens == 0 => break Some(j),
                    Some(Tok::Semi) if parens == 0 => break None,
                    None => break None,
                    _ => {}
                }
                j += 1;
            };
            let Some(body) = body else { continue };
            let mut depth = 0;
            for (tok, end) in &toks[body..] {
                match tok {
                    Tok::Open => depth += 1,
                    Tok::Close => {
                        depth -= 1;
                        if depth == 0 {
                            out.push((end - line + 1, format!("{file}:{line}"), name.clone()));
                            break;
                        }
                    }
                    _ => {}
                }
            }
        }
    }
    out.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    out
}

fn operator_sources() -> BTreeMap<Vec<String>, (String, String)> {
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"))
}

fn show(parent: &[String]) -> String {
    if parent.is_empty() { "crate".to_string() } else { format!("crate::{}", parent.join("::")) }
}

#[test]
fn no_import_cycle_between_operator_modules() {
    let edges = edges(&operator_sources());
    let mut by_level: BTreeMap<&Vec<String>, BTreeMap<&str, Vec<&str>>> = BTreeMap::new();
    for (parent, a, b) in edges.keys() {
        by_level.entry(parent).or_default().entry(a).or_default().push(b);
    }
    println!("module graph (sibling edges per folder):");
    for (parent, g) in &by_level {
        println!("  {}:", show(parent));
        for (a, bs) in g {
            println!("    {a} -> {}", bs.join(", "));
        }
    }
    let cycles = cycles(&edges);
    let mut report = String::new();
    for (parent, members) in &cycles {
        report += &format!("\nin {}: a cycle joins {}; its edges:\n", show(parent), members.join(", "));
        for ((p, a, b), at) in &edges {
            if p == parent && members.contains(a) && members.contains(b) {
                report += &format!("  {a} -> {b}: {}\n", at.join("; "));
            }
        }
    }
    assert!(
        cycles.is_empty(),
        "import cycles among the operator's modules: move what both sides need into a module both can import (see docs/operator.md, \"Layers\"){report}"
    );
}

#[test]
fn no_long_operator_function() {
    let functions = functions(&operator_sources());
    println!("longest functions:");
    for (lines, at, name) in functions.iter().take(10) {
        println!("  {lines:4} {name} ({at})");
    }
    let long: Vec<_> = functions.iter().filter(|f| f.0 > MAX_FUNCTION_LINES).collect();
    assert!(long.is_empty(), "functions over {MAX_FUNCTION_LINES} lines: split them by step: {long:?}");
}

fn synthetic(files: &[(&str, &str)]) -> BTreeMap<Vec<String>, (String, String)> {
    files
        .iter()
        .map(|(path, text)| {
            (module_of(Path::new(path)).expect("a module"), (path.to_string(), text.to_string()))
        })
        .collect()
}

#[test]
fn a_back_edge_is_a_cycle() {
    let layered = synthetic(&[
        ("lib.rs", "mod names; mod wing;"),
        ("names.rs", "pub const M: &str = \"crate::wing\"; // crate::wing"),
        ("wing/mod.rs", "mod a; use crate::names::M; use self::a::X;"),
        ("wing/a.rs", "use super::super::names; pub struct X; fn f() { super::Y; }"),
    ]);
    assert!(cycles(&edges(&layered)).is_empty(), "{:?}", edges(&layered));
    // The same tree with the leaf reaching back into the wing, through a `use` group.
    let mut cyclic = layered.clone();
    cyclic
        .insert(vec!["names".into()], ("names.rs".into(), "use crate::{wing::{a::X, Other}, names};".into()));
    let found = cycles(&edges(&cyclic));
    assert_eq!(found, vec![(Vec::new(), vec!["names".to_string(), "wing".to_string()])]);
    // Inside a folder too, and through an inline module's `super`.
    let mut inner = layered;
    inner.insert(
        vec!["wing".into(), "b".into()],
        ("wing/b.rs".into(), "mod tests { use super::super::a::X; }".into()),
    );
    inner.insert(
        vec!["wing".into(), "a".into()],
        ("wing/a.rs".into(), "fn f() { crate::wing::b::g() }".into()),
    );
    let found = cycles(&edges(&inner));
    assert_eq!(found, vec![(vec!["wing".to_string()], vec!["a".to_string(), "b".to_string()])]);
}

#[test]
fn function_lengths_count_from_fn_to_its_closing_brace() {
    let files = synthetic(&[(
        "lib.rs",
        "trait T { fn decl(&self); }\nfn f(x: (u8, u8)) -> u8 where u8: Copy {\n let s = \"}\";\n let c = '}';\n x.0\n}\n",
    )]);
    assert_eq!(functions(&files), vec![(5, "lib.rs:2".to_string(), "f".to_string())]);
}
