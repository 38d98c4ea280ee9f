//! Flattening an openAPIV3Schema into leaf paths with the facts the compiler needs.
//!
//! A *leaf* is the unit rules claim and leftovers copy: a scalar, an array (its items are a
//! nested flattened schema that ForEach works on), a map (`additionalProperties`), an empty
//! object, or an opaque unit (`oneOf`/`anyOf`/`allOf`/`$ref`/`not`, free-form and
//! preserve-unknown nodes without properties). Objects with properties are interior nodes.
//! Fields a schema never declares are not leaves: convert copies them through untouched.

use std::collections::{HashMap, HashSet};

use serde_json::Value;

use crate::target::canonical_json;

/// Deeper schemas are treated as opaque below this depth: user input must not be able to
/// exhaust the stack.
const MAX_DEPTH: usize = 48;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ScalarType {
    String,
    Integer,
    Number,
    Boolean,
    /// `x-kubernetes-int-or-string: true`
    IntOrString,
}

impl ScalarType {
    pub fn name(self) -> &'static str {
        match self {
            ScalarType::String => "string",
            ScalarType::Integer => "integer",
            ScalarType::Number => "number",
            ScalarType::Boolean => "boolean",
            ScalarType::IntOrString => "int-or-string",
        }
    }
}

#[derive(Clone, Debug, PartialEq)]
pub struct Scalar {
    pub ty: ScalarType,
    pub format: Option<String>,
    /// The `enum` values, if the schema restricts them.
    pub enumeration: Option<Vec<Value>>,
}

/// Why a node is an opaque unit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpaqueKind {
    /// `oneOf`/`anyOf`/`allOf`/`not`/`$ref`: copied or mapped whole.
    Composite,
    /// `x-kubernetes-preserve-unknown-fields` without properties, `additionalProperties: true`,
    /// or no type at all: holds any JSON.
    FreeForm,
    /// Nesting deeper than the engine inspects.
    TooDeep,
}

#[derive(Clone, Debug, PartialEq)]
pub enum Shape {
    /// An object. With properties it is an interior node; without, an (empty) leaf.
    Object {
        has_properties: bool,
        preserve_unknown: bool,
        /// The properties a `oneOf`/`anyOf` made only of `required` alternatives names (a
        /// union: which of its declared properties may be set), sorted; empty without one.
        /// Such a constraint leaves the object an interior node, so rules reach its other
        /// properties; the apiserver checks the constraint on writes.
        union: Vec<String>,
    },
    Scalar(Scalar),
    Array {
        items: Box<FlatSchema>,
        max_items: Option<u64>,
    },
    Map {
        values: Box<FlatSchema>,
    },
    Opaque {
        kind: OpaqueKind,
        canonical: String,
    },
}

#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub shape: Shape,
    pub nullable: bool,
}

impl Node {
    pub fn is_leaf(&self) -> bool {
        !matches!(self.shape, Shape::Object { has_properties: true, .. })
    }

    /// A short description for messages: "string", "array of objects", "map", ...
    pub fn describe(&self) -> String {
        match &self.shape {
            Shape::Object { .. } => "object".into(),
            Shape::Scalar(s) => match &s.enumeration {
                Some(e) => format!("{} enum of {}", s.ty.name(), e.len()),
                None => s.ty.name().to_string(),
            },
            Shape::Array { items, .. } => format!("array of {}", plural(&items.root)),
            Shape::Map { values } => format!("map of {}", plural(&values.root)),
            Shape::Opaque { kind: OpaqueKind::Composite, .. } => "opaque oneOf/anyOf/allOf/$ref unit".into(),
            Shape::Opaque { kind: OpaqueKind::FreeForm, .. } => "free-form value".into(),
            Shape::Opaque { kind: OpaqueKind::TooDeep, .. } => "deeply nested value".into(),
        }
    }

    pub fn scalar(&self) -> Option<&Scalar> {
        match &self.shape {
            Shape::Scalar(s) => Some(s),
            _ => None,
        }
    }

    /// True for values that can hold any JSON (free-form / preserve-unknown).
    pub fn accepts_anything(&self) -> bool {
        matches!(self.shape, Shape::Opaque { kind: OpaqueKind::FreeForm | OpaqueKind::TooDeep, .. })
    }
}

fn plural(n: &Node) -> String {
    match &n.shape {
        Shape::Object { .. } => "objects".into(),
        Shape::Scalar(s) => format!("{}s", s.ty.name()),
        Shape::Array { .. } => "arrays".into(),
        Shape::Map { .. } => "maps".into(),
        Shape::Opaque { .. } => "opaque values".into(),
    }
}

/// A schema flattened to dotted paths below its root.
///
/// Paths are kept in depth-first order, so a node's descendants follow it contiguously
/// (sorting would not give that: `a-x` sorts between `a` and `a.b`), with a hash index for
/// lookups — compile does a few thousand of them.
#[derive(Clone, Debug)]
pub struct FlatSchema {
    pub root: Node,
    /// Every declared path below the root, interior nodes included, depth-first.
    entries: Vec<(String, Node)>,
    index: HashMap<String, usize>,
    /// Paths an object has whenever their parent is there: `required` by the parent, or
    /// given a `default` (the apiserver defaults an object at its own version before it is
    /// converted). Compile-time only: [`FlatSchema::always_present`].
    present: HashSet<String>,
}

/// Two schemas are equal when they declare the same nodes; which of them are required is a
/// fact about objects, not about the shape a value may take, so it does not count.
impl PartialEq for FlatSchema {
    fn eq(&self, other: &Self) -> bool {
        self.root == other.root && self.entries == other.entries
    }
}

/// What a rule path resolves to.
#[derive(Debug)]
pub enum Resolved<'a> {
    Node(&'a Node),
    /// The path does not exist; `parent` is the deepest declared prefix (empty: the root).
    Missing {
        parent: String,
    },
    /// The path goes inside a leaf (an array, map, opaque unit or scalar) at `unit`.
    InsideLeaf {
        unit: String,
        node: &'a Node,
    },
}

impl FlatSchema {
    fn empty(root: Node) -> FlatSchema {
        FlatSchema { root, entries: Vec::new(), index: HashMap::new(), present: HashSet::new() }
    }

    /// Flattens a whole object's schema; `apiVersion`, `kind` and `metadata` are left out
    /// (the router and the metadata strategies own them).
    pub fn object(schema: &Value) -> FlatSchema {
        let mut fs = FlatSchema::empty(Node {
            shape: Shape::Object {
                has_properties: true,
                preserve_unknown: flag(schema, "x-kubernetes-preserve-unknown-fields"),
                union: Vec::new(),
            },
            nullable: false,
        });
        if let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                if matches!(k.as_str(), "apiVersion" | "kind" | "metadata") {
                    continue;
                }
                fs.mark_present(schema, k, v, k);
                fs.add(k.clone(), v, 1);
            }
        }
        fs.build_index();
        fs
    }

    /// Flattens any schema node as a root (array items, map values).
    pub fn node(schema: &Value) -> FlatSchema {
        Self::node_at(schema, 0)
    }

    fn node_at(schema: &Value, depth: usize) -> FlatSchema {
        let root = classify(schema, depth);
        let interior = matches!(root.shape, Shape::Object { has_properties: true, .. });
        let mut fs = FlatSchema::empty(root);
        if interior && let Some(props) = schema.get("properties").and_then(Value::as_object) {
            for (k, v) in props {
                fs.mark_present(schema, k, v, k);
                fs.add(k.clone(), v, depth + 1);
            }
        }
        fs.build_index();
        fs
    }

    fn add(&mut self, path: String, schema: &Value, depth: usize) {
        let node = classify(schema, depth);
        let interior = matches!(node.shape, Shape::Object { has_properties: true, .. });
        self.entries.push((path, node));
        if interior && let Some(props) = schema.get("properties").and_then(Value::as_object) {
            let at = self.entries.len() - 1;
            for (k, v) in props {
                let child = format!("{}.{k}", self.entries[at].0);
                self.mark_present(schema, k, v, &child);
                self.add(child, v, depth + 1);
            }
        }
    }

    /// Records `path` (property `key` of `parent`, schema `schema`) as present whenever its
    /// parent is: named in the parent's `required`, or defaulted.
    fn mark_present(&mut self, parent: &Value, key: &str, schema: &Value, path: &str) {
        let required = parent
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| r.iter().any(|k| k.as_str() == Some(key)));
        if required || schema.get("default").is_some() {
            self.present.insert(path.to_string());
        }
    }

    /// Whether every object valid under this schema has `path` (dotted, below the root):
    /// each segment is required or defaulted, and no ancestor may be null. A path inside a
    /// leaf (an array item, a map key) is never guaranteed.
    pub fn always_present(&self, path: &str) -> bool {
        self.present_below(path, 0)
    }

    /// Like [`FlatSchema::always_present`], for an object known to have the first `known`
    /// segments of `path` (a sibling below them is set): only the segments after them count.
    pub fn present_below(&self, path: &str, known: usize) -> bool {
        if path.is_empty() {
            return true;
        }
        let segments = path.split('.').count();
        let mut end = 0;
        for (i, seg) in path.split('.').enumerate() {
            end += seg.len() + usize::from(i > 0);
            let prefix = &path[..end];
            let Some(node) = self.get(prefix) else { return false };
            if i + 1 < segments && (node.nullable || node.is_leaf()) {
                return false;
            }
            if i >= known && !self.present.contains(prefix) {
                return false;
            }
        }
        true
    }

    fn build_index(&mut self) {
        self.index = self.entries.iter().enumerate().map(|(i, (k, _))| (k.clone(), i)).collect();
    }

    pub fn get(&self, path: &str) -> Option<&Node> {
        if path.is_empty() {
            return Some(&self.root);
        }
        self.index.get(path).and_then(|i| self.entries.get(*i)).map(|(_, n)| n)
    }

    /// Leaf paths, depth-first in schema order.
    pub fn leaves(&self) -> impl Iterator<Item = (&str, &Node)> {
        self.entries.iter().filter(|(_, n)| n.is_leaf()).map(|(k, n)| (k.as_str(), n))
    }

    pub fn leaf_count(&self) -> usize {
        self.entries.iter().filter(|(_, n)| n.is_leaf()).count()
    }

    /// The entries at and below `path` (contiguous in depth-first order).
    fn block<'a>(&'a self, path: &str) -> &'a [(String, Node)] {
        let Some(&start) = self.index.get(path) else { return &[] };
        let prefix_len = path.len();
        let end = self.entries[start + 1..]
            .iter()
            .position(|(k, _)| {
                !(k.len() > prefix_len && k.starts_with(path) && k.as_bytes()[prefix_len] == b'.')
            })
            .map_or(self.entries.len(), |p| start + 1 + p);
        &self.entries[start..end]
    }

    /// Leaves at or below `path` (just `path` when it is a leaf).
    pub fn leaves_under<'a>(&'a self, path: &'a str) -> impl Iterator<Item = (&'a str, &'a Node)> + 'a {
        self.block(path).iter().filter(|(_, n)| n.is_leaf()).map(|(k, n)| (k.as_str(), n))
    }

    /// Direct children of an interior path (names only, sorted).
    pub fn children(&self, path: &str) -> Vec<&str> {
        let prefix = if path.is_empty() { String::new() } else { format!("{path}.") };
        let mut out: Vec<&str> = self
            .entries
            .iter()
            .filter_map(|(k, _)| k.strip_prefix(prefix.as_str()))
            .filter(|rest| !rest.contains('.'))
            .collect();
        out.sort_unstable();
        out
    }

    pub fn resolve(&self, path: &str) -> Resolved<'_> {
        if let Some(n) = self.get(path) {
            return Resolved::Node(n);
        }
        let mut parent = String::new();
        let mut cur = String::new();
        for seg in path.split('.') {
            if !cur.is_empty() {
                cur.push('.');
            }
            cur.push_str(seg);
            match self.get(&cur) {
                Some(n) if n.is_leaf() => return Resolved::InsideLeaf { unit: cur, node: n },
                Some(_) => parent = cur.clone(),
                None => break,
            }
        }
        Resolved::Missing { parent }
    }

    /// The subtree at an interior path, re-rooted (for comparing whole objects).
    pub fn subtree(&self, path: &str) -> Option<FlatSchema> {
        if path.is_empty() {
            return Some(self.clone());
        }
        let block = self.block(path);
        let (_, root) = block.first()?;
        let skip = path.len() + 1;
        let mut fs = FlatSchema::empty(root.clone());
        fs.entries = block[1..].iter().map(|(k, n)| (k[skip..].to_string(), n.clone())).collect();
        fs.present = fs
            .entries
            .iter()
            .filter(|(k, _)| self.present.contains(&format!("{path}.{k}")))
            .map(|(k, _)| k.clone())
            .collect();
        fs.build_index();
        Some(fs)
    }
}

fn flag(schema: &Value, name: &str) -> bool {
    schema.get(name).and_then(Value::as_bool).unwrap_or(false)
}

fn canonical_without_docs(schema: &Value) -> String {
    fn strip(v: &Value) -> Value {
        match v {
            Value::Object(m) => Value::Object(
                m.iter()
                    .filter(|(k, _)| {
                        !matches!(k.as_str(), "description" | "example" | "externalDocs" | "title")
                    })
                    .map(|(k, v)| (k.clone(), strip(v)))
                    .collect(),
            ),
            Value::Array(a) => Value::Array(a.iter().map(strip).collect()),
            other => other.clone(),
        }
    }
    let mut s = String::new();
    canonical_json(&strip(schema), &mut s);
    s
}

/// The keywords of one schema node, read in a single pass over its keys (compile speed
/// matters: a 1000-leaf pair must compile in well under a millisecond).
#[derive(Default)]
struct Facts<'a> {
    ty: Option<&'a str>,
    composite: bool,
    int_or_string: bool,
    preserve: bool,
    nullable: bool,
    has_props: bool,
    additional: Option<&'a Value>,
    items: Option<&'a Value>,
    max_items: Option<u64>,
    format: Option<&'a str>,
    enumeration: Option<&'a Vec<Value>>,
    /// Names of a required-only `oneOf`/`anyOf` ([`presence_union`]).
    union: Option<Vec<String>>,
}

/// The property names of a `oneOf`/`anyOf` whose every alternative is only `{required: [..]}`
/// (the usual way to say "exactly one of these"); `None` for anything else.
fn presence_union(alternatives: &Value) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for alt in alternatives.as_array()? {
        let alt = alt.as_object()?;
        if alt.len() != 1 {
            return None;
        }
        for n in alt.get("required")?.as_array()? {
            names.push(n.as_str()?.to_string());
        }
    }
    names.sort();
    names.dedup();
    (!names.is_empty()).then_some(names)
}

fn facts(schema: &Value) -> Facts<'_> {
    let mut f = Facts::default();
    let Some(m) = schema.as_object() else { return f };
    for (k, v) in m {
        match k.as_str() {
            "type" => f.ty = v.as_str(),
            "oneOf" | "anyOf" => match presence_union(v) {
                Some(names) if f.union.is_none() => f.union = Some(names),
                _ => f.composite = true,
            },
            "allOf" | "not" | "$ref" => f.composite = true,
            "x-kubernetes-int-or-string" => f.int_or_string = v.as_bool().unwrap_or(false),
            "x-kubernetes-preserve-unknown-fields" => f.preserve = v.as_bool().unwrap_or(false),
            "nullable" => f.nullable = v.as_bool().unwrap_or(false),
            "properties" => f.has_props = v.as_object().is_some_and(|p| !p.is_empty()),
            "additionalProperties" => f.additional = Some(v),
            "items" => f.items = Some(v),
            "maxItems" => f.max_items = v.as_u64(),
            "format" => f.format = v.as_str(),
            "enum" => f.enumeration = v.as_array(),
            _ => {}
        }
    }
    // A union over properties the object does not declare is not one rules can reach.
    if let Some(names) = &f.union {
        let props = m.get("properties").and_then(Value::as_object);
        if !names.iter().all(|n| props.is_some_and(|p| p.contains_key(n))) {
            f.composite = true;
        }
    }
    f
}

fn classify(schema: &Value, depth: usize) -> Node {
    let f = facts(schema);
    let nullable = f.nullable;
    let opaque =
        |kind| Node { shape: Shape::Opaque { kind, canonical: canonical_without_docs(schema) }, nullable };
    if depth > MAX_DEPTH {
        return opaque(OpaqueKind::TooDeep);
    }
    if f.composite {
        return opaque(OpaqueKind::Composite);
    }
    let scalar =
        |ty| Scalar { ty, format: f.format.map(str::to_string), enumeration: f.enumeration.cloned() };
    if f.int_or_string {
        return Node { shape: Shape::Scalar(scalar(ScalarType::IntOrString)), nullable };
    }
    match f.ty {
        Some("string") => Node { shape: Shape::Scalar(scalar(ScalarType::String)), nullable },
        Some("integer") => Node { shape: Shape::Scalar(scalar(ScalarType::Integer)), nullable },
        Some("number") => Node { shape: Shape::Scalar(scalar(ScalarType::Number)), nullable },
        Some("boolean") => Node { shape: Shape::Scalar(scalar(ScalarType::Boolean)), nullable },
        Some("array") => match f.items {
            Some(items) if items.is_object() => Node {
                shape: Shape::Array {
                    items: Box::new(FlatSchema::node_at(items, depth + 1)),
                    max_items: f.max_items,
                },
                nullable,
            },
            _ => opaque(OpaqueKind::FreeForm),
        },
        Some("object") | None if f.has_props => Node {
            shape: Shape::Object {
                has_properties: true,
                preserve_unknown: f.preserve,
                union: f.union.clone().unwrap_or_default(),
            },
            nullable,
        },
        Some("object") => match f.additional {
            Some(v @ Value::Object(_)) => {
                Node { shape: Shape::Map { values: Box::new(FlatSchema::node_at(v, depth + 1)) }, nullable }
            }
            Some(Value::Bool(true)) => opaque(OpaqueKind::FreeForm),
            _ if f.preserve => opaque(OpaqueKind::FreeForm),
            _ => Node {
                shape: Shape::Object { has_properties: false, preserve_unknown: false, union: Vec::new() },
                nullable,
            },
        },
        _ => opaque(OpaqueKind::FreeForm),
    }
}

/// Whether every value valid under `a` is valid, unchanged, under `b`. `Err` says why not.
pub fn node_fits(a: &Node, b: &Node) -> Result<(), String> {
    if b.accepts_anything() {
        return Ok(());
    }
    if a.nullable && !b.nullable {
        return Err("null is allowed on one side only".into());
    }
    match (&a.shape, &b.shape) {
        (Shape::Opaque { canonical: ca, .. }, Shape::Opaque { canonical: cb, .. }) => {
            if ca == cb {
                Ok(())
            } else {
                Err("the opaque units' schemas differ".into())
            }
        }
        (Shape::Scalar(x), Shape::Scalar(y)) => scalar_fits(x, y),
        (Shape::Array { items: ia, max_items: ma }, Shape::Array { items: ib, max_items: mb }) => {
            if let Some(mb) = mb
                && ma.is_none_or(|ma| ma > *mb)
            {
                return Err(format!("the destination allows at most {mb} items"));
            }
            schema_fits(ia, ib).map_err(|e| format!("items: {e}"))
        }
        (Shape::Map { values: va }, Shape::Map { values: vb }) => {
            schema_fits(va, vb).map_err(|e| format!("map values: {e}"))
        }
        (Shape::Object { .. }, Shape::Object { .. }) => Ok(()),
        _ => Err(format!("{} vs {}", a.describe(), b.describe())),
    }
}

fn scalar_fits(a: &Scalar, b: &Scalar) -> Result<(), String> {
    use ScalarType::*;
    let ty_ok = matches!(
        (a.ty, b.ty),
        (String, String)
            | (Integer, Integer)
            | (Integer, Number)
            | (Number, Number)
            | (Boolean, Boolean)
            | (IntOrString, IntOrString)
            | (Integer, IntOrString)
            | (String, IntOrString)
    );
    if !ty_ok {
        return Err(format!("{} vs {}", a.ty.name(), b.ty.name()));
    }
    if let Some(fb) = &b.format
        && a.format.as_ref() != Some(fb)
    {
        return Err(format!("format {:?} vs {fb:?}", a.format.as_deref().unwrap_or("none")));
    }
    if let Some(eb) = &b.enumeration {
        match &a.enumeration {
            None => return Err("the destination restricts values to an enum".into()),
            Some(ea) => {
                if let Some(missing) = ea.iter().find(|v| !eb.contains(v)) {
                    return Err(format!("enum value {missing} is not allowed on the other side"));
                }
            }
        }
    }
    Ok(())
}

/// Whether every value valid under schema `a` fits schema `b` unchanged (recursively).
pub fn schema_fits(a: &FlatSchema, b: &FlatSchema) -> Result<(), String> {
    node_fits(&a.root, &b.root)?;
    if b.root.accepts_anything() {
        return Ok(());
    }
    for (path, na) in a.leaves() {
        match b.resolve(path) {
            Resolved::Node(nb) => node_fits(na, nb).map_err(|e| format!("{path}: {e}"))?,
            Resolved::InsideLeaf { node, .. } if node.accepts_anything() => {}
            _ => return Err(format!("{path} has no counterpart")),
        }
    }
    Ok(())
}

/// Same type and shape: fits both ways. This is what a leftover identity copy needs.
pub fn same_shape(a: &Node, b: &Node) -> Result<(), String> {
    node_fits(a, b)?;
    node_fits(b, a)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Value {
        json!({
            "type": "object",
            "properties": {
                "apiVersion": {"type": "string"},
                "metadata": {"type": "object"},
                "spec": {
                    "type": "object",
                    "properties": {
                        "size": {"type": "string", "enum": ["S", "L"]},
                        "replicas": {"type": "integer", "format": "int32"},
                        "ratio": {"type": "number"},
                        "port": {"x-kubernetes-int-or-string": true},
                        "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                        "values": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "source": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}], "properties": {"a": {"type": "string"}}},
                        "disks": {"type": "array", "maxItems": 4, "items": {
                            "type": "object", "properties": {"name": {"type": "string"}, "gb": {"type": "integer"}}}},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "empty": {"type": "object"},
                        "nested": {"type": "object", "x-kubernetes-preserve-unknown-fields": true,
                            "properties": {"x": {"type": "boolean"}}}
                    }
                },
                "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}}
            }
        })
    }

    #[test]
    fn always_present_needs_required_or_default_all_the_way_up() {
        let fs = FlatSchema::object(&json!({"type": "object", "required": ["spec"], "properties": {
            "spec": {"type": "object", "required": ["a", "n"], "properties": {
                "a": {"type": "object", "properties": {"x": {"type": "string", "default": "d"}, "y": {"type": "string"}}},
                "n": {"type": "object", "nullable": true, "required": ["z"], "properties": {"z": {"type": "string"}}},
                "list": {"type": "array", "items": {"type": "object", "required": ["k"], "properties": {"k": {"type": "string"}}}},
                "opt": {"type": "string"}}}}}));
        for (path, present) in [
            ("spec", true),
            ("spec.a", true),
            ("spec.a.x", true),
            ("spec.a.y", false),
            ("spec.n", true),
            ("spec.n.z", false),
            ("spec.opt", false),
            ("spec.list", false),
            ("spec.list.0.k", false),
            ("spec.undeclared", false),
        ] {
            assert_eq!(fs.always_present(path), present, "{path}");
        }
        // Below a known sibling: only the segments after the shared prefix count.
        assert!(!fs.always_present("spec.a.x") || fs.present_below("spec.a.x", 2));
        assert!(!fs.present_below("spec.a.y", 2));
        // Array items keep their own required list.
        let Shape::Array { items, .. } = &fs.get("spec.list").unwrap().shape else { panic!("array") };
        assert!(items.always_present("k"));
        // Requiredness does not make two schemas of the same shape differ.
        let loose = FlatSchema::object(
            &json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {"s": {"type": "string"}}}}}),
        );
        let strict = FlatSchema::object(
            &json!({"type": "object", "required": ["spec"], "properties": {"spec": {"type": "object", "required": ["s"], "properties": {"s": {"type": "string"}}}}}),
        );
        assert_eq!(loose, strict);
        assert!(strict.subtree("spec").unwrap().always_present("s"));
        assert!(!loose.subtree("spec").unwrap().always_present("s"));
    }

    #[test]
    fn flattens_every_shape() {
        let fs = FlatSchema::object(&sample());
        let mut leaves: Vec<&str> = fs.leaves().map(|(p, _)| p).collect();
        leaves.sort_unstable();
        assert_eq!(
            leaves,
            vec![
                "spec.disks",
                "spec.empty",
                "spec.labels",
                "spec.nested.x",
                "spec.port",
                "spec.ratio",
                "spec.replicas",
                "spec.size",
                "spec.source",
                "spec.tags",
                "spec.values",
                "status.ready"
            ]
        );
        assert!(fs.get("metadata").is_none());
        assert!(matches!(
            fs.get("spec.nested").unwrap().shape,
            Shape::Object { has_properties: true, preserve_unknown: true, .. }
        ));
        assert!(matches!(
            fs.get("spec.source").unwrap().shape,
            Shape::Opaque { kind: OpaqueKind::Composite, .. }
        ));
        assert!(fs.get("spec.values").unwrap().accepts_anything());
        match &fs.get("spec.disks").unwrap().shape {
            Shape::Array { items, max_items } => {
                assert_eq!(*max_items, Some(4));
                let mut item_leaves: Vec<&str> = items.leaves().map(|(p, _)| p).collect();
                item_leaves.sort_unstable();
                assert_eq!(item_leaves, vec!["gb", "name"]);
            }
            other => panic!("unexpected {other:?}"),
        }
        assert!(matches!(fs.get("spec.labels").unwrap().shape, Shape::Map { .. }));
        assert_eq!(fs.get("spec.port").unwrap().scalar().unwrap().ty, ScalarType::IntOrString);
        assert_eq!(fs.get("spec.replicas").unwrap().scalar().unwrap().format.as_deref(), Some("int32"));
    }

    #[test]
    fn resolve_distinguishes_missing_and_inside_leaf() {
        let fs = FlatSchema::object(&sample());
        assert!(matches!(fs.resolve("spec.size"), Resolved::Node(_)));
        assert!(matches!(fs.resolve("spec.nope.x"), Resolved::Missing { parent } if parent == "spec"));
        assert!(
            matches!(fs.resolve("spec.values.foo"), Resolved::InsideLeaf { unit, .. } if unit == "spec.values")
        );
        assert_eq!(fs.leaves_under("spec.nested").count(), 1);
        assert_eq!(fs.leaves_under("spec").count(), 11);
        assert_eq!(fs.children("status"), vec!["ready"]);
    }

    #[test]
    fn subtrees_stay_contiguous_with_dashed_names() {
        // "a-x" sorts between "a" and "a.b": depth-first order keeps a's subtree together.
        let fs = FlatSchema::object(&json!({"type": "object", "properties": {
            "a": {"type": "object", "properties": {"b": {"type": "string"}, "c": {"type": "string"}}},
            "a-x": {"type": "string"}}}));
        let under: Vec<&str> = fs.leaves_under("a").map(|(p, _)| p).collect();
        assert_eq!(under, vec!["a.b", "a.c"]);
        let sub = fs.subtree("a").unwrap();
        assert_eq!(sub.leaf_count(), 2);
        assert!(sub.get("b").is_some());
        assert_eq!(fs.leaves_under("a-x").count(), 1);
    }

    #[test]
    fn deep_schemas_become_opaque_instead_of_overflowing() {
        let mut s = json!({"type": "string"});
        for _ in 0..500 {
            s = json!({"type": "object", "properties": {"a": s}});
        }
        let fs = FlatSchema::object(&json!({"type": "object", "properties": {"spec": s}}));
        assert!(fs.leaves().any(|(_, n)| matches!(n.shape, Shape::Opaque { kind: OpaqueKind::TooDeep, .. })));
    }

    #[test]
    fn fits_rules() {
        let s = |v: Value| classify(&v, 0);
        assert!(node_fits(&s(json!({"type": "integer"})), &s(json!({"type": "number"}))).is_ok());
        assert!(node_fits(&s(json!({"type": "number"})), &s(json!({"type": "integer"}))).is_err());
        let small = s(json!({"type": "string", "enum": ["a"]}));
        let big = s(json!({"type": "string", "enum": ["a", "b"]}));
        assert!(node_fits(&small, &big).is_ok());
        assert!(node_fits(&big, &small).is_err());
        assert!(same_shape(&small, &big).is_err());
        let one = s(json!({"type": "array", "maxItems": 1, "items": {"type": "string"}}));
        let many = s(json!({"type": "array", "items": {"type": "string"}}));
        assert!(node_fits(&one, &many).is_ok());
        assert!(node_fits(&many, &one).is_err());
        let free = s(json!({"x-kubernetes-preserve-unknown-fields": true}));
        assert!(node_fits(&many, &free).is_ok());
        assert!(node_fits(&free, &many).is_err());
        let doc_only = s(json!({"oneOf": [{"type": "string"}], "description": "x"}));
        let doc_other = s(json!({"oneOf": [{"type": "string"}], "description": "y"}));
        assert!(same_shape(&doc_only, &doc_other).is_ok());
    }
}
