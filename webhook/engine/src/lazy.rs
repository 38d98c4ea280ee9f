//! Converting one object from its raw JSON text, parsing only what the rules touch.
//!
//! The plan knows every path a spoke's rules can read or write ([`Touch`]). Of an incoming
//! object only those subtrees are parsed, into a *projection* that runs through the very same
//! [`ScopePlan::run`] as [`Plan::convert_value`]; everything else is written to the output as
//! the raw bytes it arrived as. Untouched keys are by construction never cleared or written by
//! a rule, so merging them back beside the projection's result gives the object the full path
//! would give. Anything unusual (a plan that may read anywhere, spoke→spoke, an error) takes
//! the full path, so messages are identical too.

use std::borrow::Cow;

use sonic_rs::{JsonContainerTrait, JsonType, JsonValueMutTrait, JsonValueTrait};

use crate::convert::{ConvertError, Direction};
use crate::plan::{Plan, Touch};
use crate::value::Value;

/// The raw parts of one object level that no rule touches, and the split of touched
/// interior children.
#[derive(Default)]
struct Split<'a> {
    untouched: Vec<(Cow<'a, str>, &'a str)>,
    nested: Vec<(String, Split<'a>)>,
}

impl Split<'_> {
    fn is_empty(&self) -> bool {
        self.untouched.is_empty() && self.nested.iter().all(|(_, s)| s.is_empty())
    }
}

/// Parses the touched part of the object `raw` into a projection. `raw` must be
/// well-formed JSON (see [`Plan::convert_raw`]).
fn project<'a>(raw: &'a str, touch: &Touch) -> Option<(Value, Split<'a>)> {
    let mut proj = sonic_rs::Object::new();
    let mut split = Split::default();
    // SAFETY: `raw` is a slice of a document sonic-rs has already validated strictly (the
    // review's top-level iteration skips `request` in strict mode), and every slice handed
    // down here is a complete value inside it; the unchecked iterator only skips structure.
    let iter = unsafe { sonic_rs::to_object_iter_unchecked(raw) };
    for entry in iter {
        let (k, lv) = entry.ok()?;
        match touch.children.get(k.as_ref()) {
            None => split.untouched.push((k, borrowed(&lv)?)),
            Some(t) if !t.whole && lv.get_type() == JsonType::Object => {
                let (pv, ps) = project(borrowed(&lv)?, t)?;
                proj.insert(&k, pv);
                split.nested.push((k.into_owned(), ps));
            }
            Some(_) => {
                let v: Value = sonic_rs::from_str(lv.as_raw_str()).ok()?;
                proj.insert(&k, v);
            }
        }
    }
    Some((Value::from(proj), split))
}

/// The raw text of a lazy value as a slice of the input (None if the parser had to copy).
pub(crate) fn borrowed<'a>(lv: &sonic_rs::LazyValue<'a>) -> Option<&'a str> {
    match lv.as_raw_cow() {
        Cow::Borrowed(s) => Some(s),
        Cow::Owned(_) => None,
    }
}

fn write_key(out: &mut Vec<u8>, k: &str) -> Option<()> {
    sonic_rs::to_writer(&mut *out, k).ok()?;
    out.push(b':');
    Some(())
}

/// Writes `dst` (the converted projection at this level) merged with the untouched raw parts.
fn write_merged(out: &mut Vec<u8>, dst: Option<&Value>, split: &Split<'_>) -> Option<()> {
    out.push(b'{');
    let mut first = true;
    let mut sep = |out: &mut Vec<u8>| {
        if !first {
            out.push(b',');
        }
        first = false;
    };
    for (k, raw) in &split.untouched {
        sep(out);
        write_key(out, k)?;
        out.extend_from_slice(raw.as_bytes());
    }
    let obj = dst.and_then(|d| d.as_object());
    if let Some(obj) = obj {
        for (k, v) in obj.iter() {
            sep(out);
            write_key(out, k)?;
            match split.nested.iter().find(|(n, _)| n == k) {
                Some((_, child)) if v.is_object() => write_merged(out, Some(v), child)?,
                _ => sonic_rs::to_writer(&mut *out, v).ok()?,
            }
        }
    }
    // A touched parent the rules emptied (and so pruned) still holds its untouched keys.
    for (k, child) in &split.nested {
        if obj.is_some_and(|o| o.contains_key(k)) || child.is_empty() {
            continue;
        }
        sep(out);
        write_key(out, k)?;
        write_merged(out, None, child)?;
    }
    out.push(b'}');
    Some(())
}

impl Plan {
    /// Converts the object whose JSON text is `raw` and appends the result to `out`.
    ///
    /// `raw` must be well-formed JSON: a value inside a document sonic-rs validated in strict
    /// mode (the review path), or text a serialiser produced (tests).
    pub(crate) fn convert_raw(
        &self,
        raw: &str,
        desired: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), ConvertError> {
        let mark = out.len();
        if self.convert_raw_fast(raw, desired, out).is_some() {
            return Ok(());
        }
        out.truncate(mark);
        let obj: Value = match sonic_rs::from_str(raw) {
            Ok(v) => v,
            Err(e) => return Err(ConvertError::object(&Value::new_null(), format!("is not JSON: {e}"))),
        };
        let converted = self.convert_value(&obj, desired)?;
        sonic_rs::to_writer(&mut *out, &converted)
            .map_err(|e| ConvertError::object(&obj, format!("cannot serialise the result: {e}")))
    }

    /// The projection path; `None` means "take the full path" (including on any error).
    fn convert_raw_fast(&self, raw: &str, desired: &str, out: &mut Vec<u8>) -> Option<()> {
        let (group, to) = desired.split_once('/')?;
        if group != self.group {
            return None;
        }
        let api_version: String =
            sonic_rs::get(raw, &["apiVersion"]).ok().and_then(|v| v.as_str().map(str::to_string))?;
        let (g, from) = api_version.split_once('/')?;
        if g != self.group || from == to {
            return None;
        }
        let (spoke, dir) = if from == self.hub_version {
            (to, Direction::HubToSpoke)
        } else if to == self.hub_version {
            (from, Direction::SpokeToHub)
        } else {
            return None;
        };
        let sp = self.spoke(spoke)?;
        let touch = sp.touch.as_ref()?;
        let (proj, split) = project(raw, touch)?;
        let mut dst = proj.clone();
        sp.scope.run(dir, &proj, &mut dst).ok()?;
        dst.as_object_mut()?.insert("apiVersion", Value::from(desired));
        write_merged(out, Some(&dst), &split)
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn plan() -> std::sync::Arc<crate::Plan> {
        plan_for(
            &obj_schema(
                json!({"a": {"type": "object", "properties": {"b": {"type": "integer"}, "keep": {"type": "string"}}},
                "x": {"type": "string"}, "big": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}),
            ),
            &obj_schema(
                json!({"c": {"type": "integer"}, "a": {"type": "object", "properties": {"keep": {"type": "string"}}},
                "x": {"type": "string"}, "big": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}),
            ),
            json!([{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a.b", "spokePath": "spec.c"}}]),
        )
    }

    fn both(obj: serde_json::Value, to: &str) -> (serde_json::Value, serde_json::Value) {
        let p = plan();
        let raw = serde_json::to_string(&obj).unwrap();
        let mut out = Vec::new();
        p.convert_raw(&raw, to, &mut out).unwrap();
        (serde_json::from_slice(&out).unwrap(), p.convert(&obj, to).unwrap())
    }

    #[test]
    fn raw_path_equals_full_path() {
        for (obj, to) in [
            (
                hub_obj(json!({"a": {"b": 1, "keep": "k"}, "x": "y", "big": {"deep": [1, {"z": null}]}})),
                SPOKE_AV,
            ),
            (hub_obj(json!({"a": {"b": 1}, "x": "y"})), SPOKE_AV),
            (hub_obj(json!({"a": {}, "x": "y"})), SPOKE_AV),
            (hub_obj(json!({"a": "not an object"})), SPOKE_AV),
            (spoke_obj(json!({"c": 5, "a": {"keep": "k"}, "big": {"q": "\u{e9}\"\\"}})), HUB_AV),
            (spoke_obj(json!({"c": 5})), HUB_AV),
            (spoke_obj(json!({})), SPOKE_AV),
        ] {
            let (fast, full) = both(obj.clone(), to);
            assert_eq!(fast, full, "input {obj}");
        }
    }

    #[test]
    fn errors_come_from_the_full_path() {
        let p = plan();
        let mut out = Vec::new();
        let raw = serde_json::to_string(&hub_obj(json!({"a": {"b": 1}}))).unwrap();
        let err = p.convert_raw(&raw, "example.org/v9", &mut out).unwrap_err();
        assert!(err.to_string().starts_with("DB default/db1: desiredAPIVersion"), "{err}");
        assert!(p.convert_raw("{not json", SPOKE_AV, &mut out).is_err());
    }
}

#[cfg(test)]
mod fast_path_tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    #[test]
    fn the_fast_path_is_taken_for_plain_hops() {
        let p = plan_for(
            &obj_schema(json!({"a": {"type": "integer"}, "x": {"type": "string"}})),
            &obj_schema(json!({"b": {"type": "integer"}, "x": {"type": "string"}})),
            json!([{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}}]),
        );
        let raw = serde_json::to_string(&hub_obj(json!({"a": 1, "x": "y"}))).unwrap();
        let mut out = Vec::new();
        assert!(p.convert_raw_fast(&raw, SPOKE_AV, &mut out).is_some());
        let v: serde_json::Value = serde_json::from_slice(&out).unwrap();
        assert_eq!(v, spoke_obj(json!({"b": 1, "x": "y"})));
    }
}
