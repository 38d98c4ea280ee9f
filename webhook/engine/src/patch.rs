//! RFC 6902 JSON Patch over `serde_json::Value`, with RFC 6901 pointers.
//!
//! A patch is compiled once (pointers parsed, required `from`/`value` checked) and applied many
//! times. Errors name the operation's index and the pointer. Application stops at the first
//! failing operation; callers apply to a copy they discard on error, so a failed patch never
//! leaves a half-patched object behind.

use dco_api::rules::{JsonPatchOp, PatchOp};
use serde_json::Value;

/// An RFC 6901 JSON Pointer, parsed into unescaped reference tokens.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Pointer {
    source: String,
    tokens: Vec<String>,
}

impl Pointer {
    pub fn parse(s: &str) -> Result<Pointer, String> {
        if s.is_empty() {
            return Ok(Pointer { source: String::new(), tokens: Vec::new() });
        }
        let Some(rest) = s.strip_prefix('/') else {
            return Err(format!("pointer {s:?} must be empty or start with '/' (e.g. /spec/size)"));
        };
        let mut tokens = Vec::new();
        for raw in rest.split('/') {
            let mut token = String::with_capacity(raw.len());
            let mut chars = raw.chars();
            while let Some(c) = chars.next() {
                if c == '~' {
                    match chars.next() {
                        Some('0') => token.push('~'),
                        Some('1') => token.push('/'),
                        _ => {
                            return Err(format!(
                                "pointer {s:?} has a '~' not followed by 0 or 1; write ~0 for '~' and ~1 for '/'"
                            ));
                        }
                    }
                } else {
                    token.push(c);
                }
            }
            tokens.push(token);
        }
        Ok(Pointer { source: s.to_string(), tokens })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    pub fn tokens(&self) -> &[String] {
        &self.tokens
    }

    /// Dotted form of the pointer's tokens (`/spec/size` → `spec.size`), for claims.
    pub fn dotted(&self) -> String {
        self.tokens.join(".")
    }

    fn is_proper_prefix_of(&self, other: &Pointer) -> bool {
        self.tokens.len() < other.tokens.len() && other.tokens.starts_with(&self.tokens)
    }
}

/// Why a patch does not compile or does not apply.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("JSON Patch op {index} ({op} {pointer}): {message}")]
pub struct PatchError {
    pub index: usize,
    pub op: &'static str,
    pub pointer: String,
    pub message: String,
}

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Add(Value),
    Remove,
    Replace(Value),
    Move(Pointer),
    Copy(Pointer),
    Test(Value),
}

#[derive(Clone, Debug, PartialEq)]
struct Step {
    op: Op,
    path: Pointer,
}

/// A compiled patch document.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Patch {
    steps: Vec<Step>,
}

pub(crate) fn op_name(op: PatchOp) -> &'static str {
    match op {
        PatchOp::Add => "add",
        PatchOp::Remove => "remove",
        PatchOp::Replace => "replace",
        PatchOp::Move => "move",
        PatchOp::Copy => "copy",
        PatchOp::Test => "test",
    }
}

impl Patch {
    /// Checks every operation: pointers parse, `from` is present for move/copy and `value` for
    /// add/replace/test, and a move does not move a value into itself.
    pub fn compile(ops: &[JsonPatchOp]) -> Result<Patch, PatchError> {
        let mut steps = Vec::with_capacity(ops.len());
        for (index, raw) in ops.iter().enumerate() {
            let name = op_name(raw.op);
            let err = |message: String| PatchError { index, op: name, pointer: raw.path.clone(), message };
            let path = Pointer::parse(&raw.path).map_err(err)?;
            let from = || -> Result<Pointer, PatchError> {
                let f = raw.from.as_deref().ok_or_else(|| {
                    err(format!("`{name}` needs `from`, the pointer to take the value from"))
                })?;
                Pointer::parse(f).map_err(err)
            };
            let value = || raw.value.clone().ok_or_else(|| err(format!("`{name}` needs `value`")));
            let op = match raw.op {
                PatchOp::Add => Op::Add(value()?),
                PatchOp::Remove => Op::Remove,
                PatchOp::Replace => Op::Replace(value()?),
                PatchOp::Move => {
                    let from = from()?;
                    if from.is_proper_prefix_of(&path) {
                        return Err(err(format!("cannot move {} into its own child", from.as_str())));
                    }
                    Op::Move(from)
                }
                PatchOp::Copy => Op::Copy(from()?),
                PatchOp::Test => Op::Test(value()?),
            };
            if path.tokens.is_empty() && matches!(op, Op::Remove) {
                return Err(err("cannot remove the whole document".into()));
            }
            steps.push(Step { op, path });
        }
        Ok(Patch { steps })
    }

    pub fn is_empty(&self) -> bool {
        self.steps.is_empty()
    }

    /// Every pointer the patch names (`path` and `from`), for claims.
    pub fn pointers(&self) -> Vec<&Pointer> {
        let mut out = Vec::new();
        for s in &self.steps {
            out.push(&s.path);
            if let Op::Move(f) | Op::Copy(f) = &s.op {
                out.push(f);
            }
        }
        out
    }

    /// Applies the patch to `doc` in place.
    pub fn apply(&self, doc: &mut Value) -> Result<(), PatchError> {
        for (index, step) in self.steps.iter().enumerate() {
            let (name, result) = match &step.op {
                Op::Add(v) => ("add", add(doc, &step.path, v.clone())),
                Op::Remove => ("remove", remove(doc, &step.path).map(drop)),
                Op::Replace(v) => ("replace", replace(doc, &step.path, v.clone())),
                Op::Move(from) => (
                    "move",
                    remove(doc, from)
                        .map_err(|e| format!("`from` {}: {e}", from.as_str()))
                        .and_then(|v| add(doc, &step.path, v)),
                ),
                Op::Copy(from) => (
                    "copy",
                    get(doc, from)
                        .cloned()
                        .ok_or_else(|| format!("`from` {} does not exist", from.as_str()))
                        .and_then(|v| add(doc, &step.path, v)),
                ),
                Op::Test(v) => (
                    "test",
                    match get(doc, &step.path) {
                        Some(actual) if json_equal(actual, v) => Ok(()),
                        Some(actual) => Err(format!("test failed: the value is {actual}, expected {v}")),
                        None => Err("test failed: the path does not exist".to_string()),
                    },
                ),
            };
            result.map_err(|message| PatchError {
                index,
                op: name,
                pointer: step.path.source.clone(),
                message,
            })?;
        }
        Ok(())
    }
}

/// Resolves an array index token: digits without leading zeros (RFC 6901).
fn array_index(token: &str, len: usize, allow_end: bool) -> Result<usize, String> {
    if allow_end && token == "-" {
        return Ok(len);
    }
    let valid = !token.is_empty()
        && token.bytes().all(|b| b.is_ascii_digit())
        && (token == "0" || !token.starts_with('0'));
    if !valid {
        return Err(format!("{token:?} is not an array index"));
    }
    let i: usize = token.parse().map_err(|_| format!("array index {token} is too large"))?;
    let max = if allow_end { len } else { len.saturating_sub(1) };
    if i > max || (!allow_end && len == 0) {
        return Err(format!("array index {i} is out of bounds (length {len})"));
    }
    Ok(i)
}

pub fn get<'a>(doc: &'a Value, ptr: &Pointer) -> Option<&'a Value> {
    let mut cur = doc;
    for t in &ptr.tokens {
        cur = match cur {
            Value::Object(m) => m.get(t)?,
            Value::Array(a) => a.get(array_index(t, a.len(), false).ok()?)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// The container holding the pointer's last token.
fn parent_mut<'a>(doc: &'a mut Value, ptr: &'a Pointer) -> Result<(&'a mut Value, &'a str), String> {
    let Some((last, init)) = ptr.tokens.split_last() else {
        return Err("the document root has no parent".into());
    };
    let mut cur = doc;
    for (depth, t) in init.iter().enumerate() {
        let here = || format!("/{}", ptr.tokens[..=depth].join("/"));
        cur = match cur {
            Value::Object(m) => m.get_mut(t).ok_or_else(|| format!("{} does not exist", here()))?,
            Value::Array(a) => {
                let i = array_index(t, a.len(), false)?;
                &mut a[i]
            }
            _ => return Err(format!("{} is not an object or array", here())),
        };
    }
    Ok((cur, last.as_str()))
}

fn add(doc: &mut Value, ptr: &Pointer, value: Value) -> Result<(), String> {
    if ptr.tokens.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_mut(doc, ptr)?;
    match parent {
        Value::Object(m) => {
            m.insert(last.to_string(), value);
            Ok(())
        }
        Value::Array(a) => {
            let i = array_index(last, a.len(), true)?;
            a.insert(i, value);
            Ok(())
        }
        _ => Err("the parent is not an object or array".into()),
    }
}

fn remove(doc: &mut Value, ptr: &Pointer) -> Result<Value, String> {
    if ptr.tokens.is_empty() {
        return Ok(std::mem::take(doc));
    }
    let (parent, last) = parent_mut(doc, ptr)?;
    match parent {
        Value::Object(m) => m.remove(last).ok_or_else(|| "the path does not exist".to_string()),
        Value::Array(a) => {
            let i = array_index(last, a.len(), false)?;
            Ok(a.remove(i))
        }
        _ => Err("the parent is not an object or array".into()),
    }
}

fn replace(doc: &mut Value, ptr: &Pointer, value: Value) -> Result<(), String> {
    if ptr.tokens.is_empty() {
        *doc = value;
        return Ok(());
    }
    let (parent, last) = parent_mut(doc, ptr)?;
    let slot = match parent {
        Value::Object(m) => {
            m.get_mut(last).ok_or_else(|| "the path does not exist; use add to create it".to_string())?
        }
        Value::Array(a) => {
            let i = array_index(last, a.len(), false)?;
            &mut a[i]
        }
        _ => return Err("the parent is not an object or array".into()),
    };
    *slot = value;
    Ok(())
}

/// JSON equality as RFC 6902 `test` defines it: numbers compare by value (1 equals 1.0),
/// objects regardless of member order.
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => numbers_equal(x, y),
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(p, q)| json_equal(p, q))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len() && x.iter().all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

fn numbers_equal(x: &serde_json::Number, y: &serde_json::Number) -> bool {
    if let (Some(a), Some(b)) = (x.as_i64(), y.as_i64()) {
        return a == b;
    }
    if let (Some(a), Some(b)) = (x.as_u64(), y.as_u64()) {
        return a == b;
    }
    // One side is a float: equal only if the float is integral and equals the integer exactly,
    // or both are floats with the same value.
    let as_exact = |n: &serde_json::Number| -> Option<i128> {
        if let Some(i) = n.as_i64() {
            return Some(i128::from(i));
        }
        if let Some(u) = n.as_u64() {
            return Some(i128::from(u));
        }
        let f = n.as_f64()?;
        (f.fract() == 0.0 && f.abs() < 1.7e38).then_some(f as i128)
    };
    match (x.is_f64(), y.is_f64()) {
        (true, true) => x.as_f64() == y.as_f64(),
        _ => match (as_exact(x), as_exact(y)) {
            (Some(a), Some(b)) => a == b,
            _ => false,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn ops(v: Value) -> Vec<JsonPatchOp> {
        serde_json::from_value(v).unwrap()
    }

    fn run(doc: Value, patch: Value) -> Result<Value, PatchError> {
        let p = Patch::compile(&ops(patch))?;
        let mut d = doc;
        p.apply(&mut d)?;
        Ok(d)
    }

    #[test]
    fn pointer_parsing() {
        let p = Pointer::parse("/a~1b/c~0d/0").unwrap();
        assert_eq!(p.tokens(), ["a/b", "c~d", "0"]);
        assert_eq!(Pointer::parse("").unwrap().tokens().len(), 0);
        assert_eq!(Pointer::parse("/").unwrap().tokens(), [""]);
        assert!(Pointer::parse("a/b").is_err());
        assert!(Pointer::parse("/a~2").is_err());
        assert!(Pointer::parse("/a~").is_err());
        assert_eq!(Pointer::parse("/spec/size").unwrap().dotted(), "spec.size");
    }

    /// RFC 6901 section 5 examples.
    #[test]
    fn rfc6901_examples() {
        let doc = json!({"foo": ["bar", "baz"], "": 0, "a/b": 1, "c%d": 2, "e^f": 3, "g|h": 4, "i\\j": 5, "k\"l": 6, " ": 7, "m~n": 8});
        for (ptr, want) in [
            ("", doc.clone()),
            ("/foo", json!(["bar", "baz"])),
            ("/foo/0", json!("bar")),
            ("/", json!(0)),
            ("/a~1b", json!(1)),
            ("/c%d", json!(2)),
            ("/e^f", json!(3)),
            ("/g|h", json!(4)),
            ("/i\\j", json!(5)),
            ("/k\"l", json!(6)),
            ("/ ", json!(7)),
            ("/m~0n", json!(8)),
        ] {
            assert_eq!(get(&doc, &Pointer::parse(ptr).unwrap()), Some(&want), "{ptr}");
        }
        assert_eq!(get(&doc, &Pointer::parse("/foo/01").unwrap()), None);
        assert_eq!(get(&doc, &Pointer::parse("/foo/-").unwrap()), None);
    }

    /// RFC 6902 appendix A examples.
    #[test]
    fn rfc6902_examples() {
        // A.1 add an object member
        assert_eq!(
            run(json!({"foo": "bar"}), json!([{"op": "add", "path": "/baz", "value": "qux"}])).unwrap(),
            json!({"baz": "qux", "foo": "bar"})
        );
        // A.2 add an array element
        assert_eq!(
            run(json!({"foo": ["bar", "baz"]}), json!([{"op": "add", "path": "/foo/1", "value": "qux"}]))
                .unwrap(),
            json!({"foo": ["bar", "qux", "baz"]})
        );
        // A.3 remove an object member
        assert_eq!(
            run(json!({"baz": "qux", "foo": "bar"}), json!([{"op": "remove", "path": "/baz"}])).unwrap(),
            json!({"foo": "bar"})
        );
        // A.4 remove an array element
        assert_eq!(
            run(json!({"foo": ["bar", "qux", "baz"]}), json!([{"op": "remove", "path": "/foo/1"}])).unwrap(),
            json!({"foo": ["bar", "baz"]})
        );
        // A.5 replace a value
        assert_eq!(
            run(
                json!({"baz": "qux", "foo": "bar"}),
                json!([{"op": "replace", "path": "/baz", "value": "boo"}])
            )
            .unwrap(),
            json!({"baz": "boo", "foo": "bar"})
        );
        // A.6 move a value
        assert_eq!(
            run(
                json!({"foo": {"bar": "baz", "waldo": "fred"}, "qux": {"corge": "grault"}}),
                json!([{"op": "move", "from": "/foo/waldo", "path": "/qux/thud"}])
            )
            .unwrap(),
            json!({"foo": {"bar": "baz"}, "qux": {"corge": "grault", "thud": "fred"}})
        );
        // A.7 move an array element
        assert_eq!(
            run(
                json!({"foo": ["all", "grass", "cows", "eat"]}),
                json!([{"op": "move", "from": "/foo/1", "path": "/foo/3"}])
            )
            .unwrap(),
            json!({"foo": ["all", "cows", "eat", "grass"]})
        );
        // A.8 test success
        assert!(run(
            json!({"baz": "qux", "foo": ["a", 2, "c"]}),
            json!([{"op": "test", "path": "/baz", "value": "qux"}, {"op": "test", "path": "/foo/1", "value": 2}])
        )
        .is_ok());
        // A.9 test failure
        let e =
            run(json!({"baz": "qux"}), json!([{"op": "test", "path": "/baz", "value": "bar"}])).unwrap_err();
        assert_eq!((e.index, e.op, e.pointer.as_str()), (0, "test", "/baz"));
        // A.10 add a nested member object
        assert_eq!(
            run(json!({"foo": "bar"}), json!([{"op": "add", "path": "/child", "value": {"grandchild": {}}}]))
                .unwrap(),
            json!({"foo": "bar", "child": {"grandchild": {}}})
        );
        // A.12 add to a nonexistent target
        let e = run(json!({"foo": "bar"}), json!([{"op": "add", "path": "/baz/bat", "value": "qux"}]))
            .unwrap_err();
        assert!(e.message.contains("/baz does not exist"), "{e}");
        // A.14 ~ escape ordering
        assert!(run(json!({"/": 9, "~1": 10}), json!([{"op": "test", "path": "/~01", "value": 10}])).is_ok());
        // A.15 comparing strings and numbers
        assert!(
            run(json!({"/": 9, "~1": 10}), json!([{"op": "test", "path": "/~01", "value": "10"}])).is_err()
        );
        // A.16 adding an array value
        assert_eq!(
            run(json!({"foo": ["bar"]}), json!([{"op": "add", "path": "/foo/-", "value": ["abc", "def"]}]))
                .unwrap(),
            json!({"foo": ["bar", ["abc", "def"]]})
        );
    }

    #[test]
    fn copy_and_root_operations() {
        assert_eq!(
            run(json!({"a": {"b": 1}}), json!([{"op": "copy", "from": "/a", "path": "/c"}])).unwrap(),
            json!({"a": {"b": 1}, "c": {"b": 1}})
        );
        assert_eq!(
            run(json!({"a": 1}), json!([{"op": "replace", "path": "", "value": [1]}])).unwrap(),
            json!([1])
        );
        assert_eq!(run(json!({"a": 1}), json!([{"op": "add", "path": "", "value": 2}])).unwrap(), json!(2));
    }

    #[test]
    fn numbers_compare_by_value() {
        assert!(json_equal(&json!(1), &json!(1.0)));
        assert!(json_equal(&json!({"a": [1, 2.0]}), &json!({"a": [1.0, 2]})));
        assert!(!json_equal(&json!(1), &json!(1.5)));
        assert!(!json_equal(&json!(u64::MAX), &json!(-1)));
        assert!(json_equal(&json!(u64::MAX), &json!(u64::MAX)));
    }

    #[test]
    fn compile_errors_name_op_and_pointer() {
        let cases = [
            (json!([{"op": "add", "path": "/a"}]), 0, "needs `value`"),
            (
                json!([{"op": "test", "path": "/a", "value": 1}, {"op": "move", "path": "/a"}]),
                1,
                "needs `from`",
            ),
            (json!([{"op": "copy", "path": "/a", "from": "b"}]), 0, "must be empty or start with '/'"),
            (json!([{"op": "remove", "path": "a"}]), 0, "must be empty"),
            (json!([{"op": "move", "from": "/a", "path": "/a/b"}]), 0, "into its own child"),
            (json!([{"op": "remove", "path": ""}]), 0, "whole document"),
        ];
        for (patch, index, needle) in cases {
            let e = Patch::compile(&ops(patch)).unwrap_err();
            assert_eq!(e.index, index);
            assert!(e.to_string().contains(needle), "{e}");
            assert!(e.to_string().starts_with(&format!("JSON Patch op {index} (")), "{e}");
        }
    }

    #[test]
    fn apply_errors() {
        for (doc, patch, needle) in [
            (json!({"a": [1]}), json!([{"op": "add", "path": "/a/5", "value": 1}]), "out of bounds"),
            (json!({"a": [1]}), json!([{"op": "remove", "path": "/a/01"}]), "not an array index"),
            (json!({"a": [1]}), json!([{"op": "remove", "path": "/a/-"}]), "not an array index"),
            (json!({"a": 1}), json!([{"op": "replace", "path": "/b", "value": 1}]), "use add"),
            (json!({"a": 1}), json!([{"op": "remove", "path": "/b"}]), "does not exist"),
            (json!({"a": 1}), json!([{"op": "add", "path": "/a/b", "value": 1}]), "not an object or array"),
            (
                json!({"a": 1}),
                json!([{"op": "copy", "from": "/x", "path": "/y"}]),
                "`from` /x does not exist",
            ),
            (json!({"a": 1}), json!([{"op": "move", "from": "/x", "path": "/y"}]), "does not exist"),
            (json!({"a": []}), json!([{"op": "replace", "path": "/a/0", "value": 1}]), "out of bounds"),
            (
                json!({"a": [1]}),
                json!([{"op": "add", "path": "/a/99999999999999999999999", "value": 1}]),
                "too large",
            ),
        ] {
            let e = run(doc, patch).unwrap_err();
            assert!(e.message.contains(needle), "{e}");
        }
    }

    #[test]
    fn pointers_listed_for_claims() {
        let p = Patch::compile(&ops(json!([{"op": "move", "from": "/spec/a", "path": "/spec/b"}, {"op": "remove", "path": "/spec/c"}]))).unwrap();
        let dotted: Vec<String> = p.pointers().iter().map(|p| p.dotted()).collect();
        assert_eq!(dotted, ["spec.b", "spec.a", "spec.c"]);
    }
}
