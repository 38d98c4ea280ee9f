//! The engine's value representation and the path operations every strategy uses.
//!
//! Conversion runs on `sonic_rs::Value`: parsing a review with it is several times faster than
//! serde_json, and cloning a parsed subtree only bumps a reference count, so "copy the input,
//! then rewrite the claimed paths" costs little more than the parse itself. `Plan::convert`
//! (serde_json in, serde_json out) converts at the edges and runs the very same code.

use std::fmt;

pub use sonic_rs::{JsonContainerTrait, JsonType, JsonValueMutTrait, JsonValueTrait};

/// A JSON value as the engine converts it.
pub type Value = sonic_rs::Value;

/// A dotted field path split into segments (`spec.a.b` → `["spec","a","b"]`).
///
/// Segments may contain dots when built programmatically (annotation keys do); such a path
/// displays with the segment quoted.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Path(Vec<String>);

/// Why a dotted path is not usable.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PathError {
    #[error("the path is empty; write a dotted field path such as spec.size")]
    Empty,
    #[error("path `{0}` has an empty segment; remove the doubled, leading or trailing dot")]
    EmptySegment(String),
    #[error("path `{0}` has an array index; paths have no indices, use ForEach for per-item rules")]
    Indexed(String),
}

impl Path {
    /// Parses a dotted path as written in rules.
    pub fn parse(dotted: &str) -> Result<Path, PathError> {
        if dotted.is_empty() {
            return Err(PathError::Empty);
        }
        let mut segs = Vec::new();
        for seg in dotted.split('.') {
            if seg.is_empty() {
                return Err(PathError::EmptySegment(dotted.to_string()));
            }
            if seg.contains('[') || seg.contains(']') {
                return Err(PathError::Indexed(dotted.to_string()));
            }
            segs.push(seg.to_string());
        }
        Ok(Path(segs))
    }

    /// A path from raw segments (which may contain dots).
    pub fn from_segments<I, S>(segs: I) -> Path
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        Path(segs.into_iter().map(Into::into).collect())
    }

    pub fn segments(&self) -> &[String] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// This path with `seg` appended.
    pub fn child(&self, seg: &str) -> Path {
        let mut p = self.0.clone();
        p.push(seg.to_string());
        Path(p)
    }

    /// True when `self` equals `other` or lies below it.
    pub fn starts_with(&self, other: &Path) -> bool {
        self.0.starts_with(&other.0)
    }

    /// The dotted form used in diagnostics and status.
    pub fn dotted(&self) -> String {
        self.to_string()
    }
}

impl fmt::Display for Path {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, seg) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            if seg.contains('.') {
                write!(f, "[{seg:?}]")?;
            } else {
                f.write_str(seg)?;
            }
        }
        Ok(())
    }
}

/// Why a value could not be written at a path.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot write {path}: {found} is a {kind}, not an object")]
pub struct SetError {
    /// The full path being written.
    pub path: String,
    /// The prefix that holds a non-object.
    pub found: String,
    pub kind: &'static str,
}

/// The value at `path`, if every step is an object that has the key.
pub fn get<'a>(root: &'a Value, path: &[String]) -> Option<&'a Value> {
    let mut cur = root;
    for seg in path {
        cur = cur.as_object()?.get(seg)?;
    }
    Some(cur)
}

/// Removes the value at `path` and returns it. Parents that the removal leaves empty are
/// removed too (never `root` itself), so a moved field leaves no `{}` behind that would
/// break an exact round trip.
pub fn remove(root: &mut Value, path: &[String]) -> Option<Value> {
    let (last, parents) = path.split_last()?;
    if parents.is_empty() {
        return root.as_object_mut()?.remove(last);
    }
    // Only touch (and so un-share) the parents when the key is really there.
    get(root, path)?;
    let parent = get_mut(root, parents)?;
    let taken = parent.as_object_mut()?.remove(last);
    if taken.is_some() && parent.as_object().is_some_and(|o| o.is_empty()) {
        remove(root, parents);
    }
    taken
}

fn get_mut<'a>(root: &'a mut Value, path: &[String]) -> Option<&'a mut Value> {
    let mut cur = root;
    for seg in path {
        cur = cur.as_object_mut()?.get_mut(seg)?;
    }
    Some(cur)
}

/// Writes `value` at `path`, creating missing parent objects.
pub fn set(root: &mut Value, path: &[String], value: Value) -> Result<(), SetError> {
    let Some((last, parents)) = path.split_last() else {
        *root = value;
        return Ok(());
    };
    let mut cur = root;
    for (i, seg) in parents.iter().enumerate() {
        let kind = type_name(cur);
        let Some(obj) = cur.as_object_mut() else {
            return Err(SetError {
                path: Path::from_segments(path.iter().cloned()).dotted(),
                found: Path::from_segments(path[..i].iter().cloned()).dotted(),
                kind,
            });
        };
        cur = obj.entry(seg.as_str()).or_insert_with(Value::new_object);
    }
    let kind = type_name(cur);
    match cur.as_object_mut() {
        Some(obj) => {
            obj.insert(last, value);
            Ok(())
        }
        None => Err(SetError {
            path: Path::from_segments(path.iter().cloned()).dotted(),
            found: Path::from_segments(parents.iter().cloned()).dotted(),
            kind,
        }),
    }
}

/// The JSON type name of a value, for messages.
pub fn type_name(v: &Value) -> &'static str {
    match v.get_type() {
        JsonType::Null => "null",
        JsonType::Boolean => "boolean",
        JsonType::Number => {
            if v.is_f64() {
                "number"
            } else {
                "integer"
            }
        }
        JsonType::String => "string",
        JsonType::Array => "array",
        JsonType::Object => "object",
    }
}

/// Parses JSON text the way every path of the review does: numbers are kept as their text
/// (sonic-rs raw numbers), so a value no rule transforms is written back with the digits it
/// came with (`1E+2`, `-0`, `18446744073709551617`, a 100 000-digit integer), and reading one
/// (`as_i64`, `as_f64`, comparing) parses the text on demand.
pub fn parse_json(text: &str) -> sonic_rs::Result<Value> {
    use serde::Deserialize;
    let mut de = sonic_rs::Deserializer::from_str(text).use_rawnumber();
    let v = Value::deserialize(&mut de)?;
    de.end()?;
    Ok(v)
}

/// The canonical text of a JSON text, for comparing what the review's paths write: no
/// whitespace, members sorted by key (a repeated key stays repeated), strings re-encoded, and
/// numbers exactly as written (`1E+2` stays `1E+2`, not `100.0`). `None` when it is not JSON.
/// Iterative, so it reads the 10 000 levels the scanner accepts.
#[doc(hidden)]
pub fn canonical(text: &str) -> Option<String> {
    enum Step<'v> {
        Value(&'v Value),
        Text(&'static str),
        Key(&'v str),
    }
    let root = parse_json(text).ok()?;
    let mut out = String::with_capacity(text.len());
    let mut todo = vec![Step::Value(&root)];
    while let Some(step) = todo.pop() {
        match step {
            Step::Text(t) => out.push_str(t),
            Step::Key(k) => {
                out.push_str(&sonic_rs::to_string(k).ok()?);
                out.push(':');
            }
            Step::Value(v) => {
                if let Some(raw) = v.as_raw_number() {
                    out.push_str(raw.as_str());
                } else if let Some(items) = v.as_array() {
                    out.push('[');
                    todo.push(Step::Text("]"));
                    for (i, item) in items.iter().enumerate().rev() {
                        todo.push(Step::Value(item));
                        if i > 0 {
                            todo.push(Step::Text(","));
                        }
                    }
                } else if let Some(obj) = v.as_object() {
                    let mut members: Vec<(&str, &Value)> = obj.iter().collect();
                    members.sort_by(|a, b| a.0.cmp(b.0));
                    out.push('{');
                    todo.push(Step::Text("}"));
                    for (i, (k, v)) in members.into_iter().enumerate().rev() {
                        todo.push(Step::Value(v));
                        todo.push(Step::Key(k));
                        if i > 0 {
                            todo.push(Step::Text(","));
                        }
                    }
                } else {
                    out.push_str(&sonic_rs::to_string(v).ok()?);
                }
            }
        }
    }
    Some(out)
}

/// Converts to serde_json (for callers that hold serde values, and for strategies built on
/// serde_json libraries). A raw number becomes serde_json's reading of its text (an `f64`
/// beyond `i64`/`u64`; null beyond the `f64` range, where serde_json has no number at all).
pub fn to_serde(v: &Value) -> serde_json::Value {
    if let Some(raw) = v.as_raw_number() {
        return serde_json::from_str::<serde_json::Number>(raw.as_str())
            .map_or(serde_json::Value::Null, serde_json::Value::Number);
    }
    if let Some(items) = v.as_array() {
        return serde_json::Value::Array(items.iter().map(to_serde).collect());
    }
    if let Some(obj) = v.as_object() {
        return serde_json::Value::Object(obj.iter().map(|(k, v)| (k.to_string(), to_serde(v))).collect());
    }
    serde_json::to_value(v).unwrap_or(serde_json::Value::Null)
}

/// Converts from serde_json.
pub fn from_serde(v: &serde_json::Value) -> Value {
    sonic_rs::to_value(v).unwrap_or_default()
}

/// A short rendering of a value for error messages (cut at 80 characters).
pub fn preview(v: &Value) -> String {
    let s = sonic_rs::to_string(v).unwrap_or_else(|_| "<unprintable>".to_string());
    if s.chars().count() > 80 {
        let cut: String = s.chars().take(77).collect();
        format!("{cut}...")
    } else {
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Value {
        sonic_rs::from_str(s).unwrap()
    }

    fn p(s: &str) -> Vec<String> {
        Path::parse(s).unwrap().segments().to_vec()
    }

    #[test]
    fn parse_rejects_bad_paths() {
        assert_eq!(Path::parse(""), Err(PathError::Empty));
        assert!(matches!(Path::parse("spec..a"), Err(PathError::EmptySegment(_))));
        assert!(matches!(Path::parse(".spec"), Err(PathError::EmptySegment(_))));
        assert!(matches!(Path::parse("spec.a[0]"), Err(PathError::Indexed(_))));
        assert_eq!(Path::parse("spec.a").unwrap().dotted(), "spec.a");
    }

    #[test]
    fn dotted_quotes_segments_with_dots() {
        let path = Path::from_segments(["metadata", "annotations", "example.com/x"]);
        assert_eq!(path.dotted(), "metadata.annotations.[\"example.com/x\"]");
    }

    #[test]
    fn set_creates_parents_and_refuses_scalars() {
        let mut root = v(r#"{"spec":{"a":1}}"#);
        set(&mut root, &p("spec.b.c"), Value::from(2)).unwrap();
        assert_eq!(root, v(r#"{"spec":{"a":1,"b":{"c":2}}}"#));
        let err = set(&mut root, &p("spec.a.x"), Value::from(3)).unwrap_err();
        assert_eq!(err.found, "spec.a");
        assert_eq!(err.kind, "integer");
    }

    #[test]
    fn remove_prunes_emptied_parents_but_not_root() {
        let mut root = v(r#"{"spec":{"a":{"b":1},"c":2}}"#);
        assert_eq!(remove(&mut root, &p("spec.a.b")), Some(Value::from(1)));
        assert_eq!(root, v(r#"{"spec":{"c":2}}"#));
        assert_eq!(remove(&mut root, &p("spec.c")), Some(Value::from(2)));
        assert_eq!(root, v(r#"{}"#));
        assert_eq!(remove(&mut root, &p("spec.zzz")), None);
    }

    #[test]
    fn remove_keeps_explicit_empty_objects_it_did_not_empty() {
        let mut root = v(r#"{"spec":{"a":{}}}"#);
        assert_eq!(remove(&mut root, &p("spec.a.b")), None);
        assert_eq!(root, v(r#"{"spec":{"a":{}}}"#));
    }

    #[test]
    fn serde_round_trip_keeps_number_kinds() {
        let s: serde_json::Value = serde_json::json!({"i": -3, "u": 18446744073709551615u64, "f": 1.5});
        assert_eq!(to_serde(&from_serde(&s)), s);
    }
}
