//! Converting one object from its raw JSON text, parsing only what the rules touch.
//!
//! Two paths share this entry point, both reading the object with the review's own
//! [`Scanner`] in the same single pass that validates it:
//! - the *stream* path (see `stream`), when every rule of the hop only moves or remaps
//!   values within their parent object: the object is rewritten as it is read;
//! - the *projection* path otherwise: the plan knows every path a spoke's rules can read or
//!   write ([`Touch`]); only those subtrees are parsed, into a projection that runs through
//!   the very same [`ScopePlan::run`](crate::plan::ScopePlan::run) as [`Plan::convert_value`], and everything else is
//!   written to the output as the raw bytes it arrived as. Untouched keys are by
//!   construction never cleared or written by a rule, so merging them back beside the
//!   projection's result gives the object the full path would give.
//!
//! Anything unusual (a plan that may read anywhere, spoke→spoke, any error) takes the full
//! path, so messages are identical too.

use std::borrow::Cow;

use crate::convert::{ConvertError, Direction};
use crate::plan::{Plan, SpokePlan, Touch};
use crate::scan::{ScanError, Scanner};
use crate::value::{JsonContainerTrait, JsonValueMutTrait, JsonValueTrait, Value};

/// The raw parts of one object level that no rule touches, and the split of touched
/// interior children.
#[derive(Default)]
struct Split<'a> {
    untouched: Vec<(Cow<'a, str>, &'a str)>,
    nested: Vec<(Cow<'a, str>, Split<'a>)>,
}

impl Split<'_> {
    fn is_empty(&self) -> bool {
        self.untouched.is_empty() && self.nested.iter().all(|(_, s)| s.is_empty())
    }
}

/// Why a fast path stopped.
pub(crate) enum Bail {
    /// The input is not JSON: the whole review is malformed.
    Scan(ScanError),
    /// Something the fast path does not handle (a value sonic-rs will not read, a rule
    /// error): rewind and take the full path.
    Full,
}

impl From<ScanError> for Bail {
    fn from(e: ScanError) -> Self {
        Bail::Scan(e)
    }
}

/// Reads the rest of the object the scanner is in (its opening brace consumed) into a
/// projection of the touched keys and a split of the untouched ones.
fn project<'a>(
    s: &mut Scanner<'a>,
    fields: &mut crate::scan::Fields,
    touch: &Touch,
) -> Result<(sonic_rs::Object, Split<'a>), Bail> {
    let mut proj = sonic_rs::Object::new();
    let mut split = Split::default();
    while let Some(k) = s.next_key(fields)? {
        match touch.children.get(k.as_ref()) {
            None => {
                let raw = s.value()?;
                split.untouched.push((k, raw));
            }
            Some(t) if !t.whole => match s.object()? {
                Some(mut inner) => {
                    let (pv, ps) = project(s, &mut inner, t)?;
                    proj.insert(&k, Value::from(pv));
                    split.nested.push((k, ps));
                }
                None => {
                    proj.insert(&k, parse(s.value()?)?);
                }
            },
            Some(_) => {
                proj.insert(&k, parse(s.value()?)?);
            }
        }
    }
    Ok((proj, split))
}

pub(crate) fn parse(raw: &str) -> Result<Value, Bail> {
    sonic_rs::from_str(raw).map_err(|_| Bail::Full)
}

pub(crate) fn write_key(out: &mut Vec<u8>, k: &str) -> Option<()> {
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

/// The one-hop route of a plain hub↔spoke conversion the fast paths can serve.
struct Route<'p> {
    spoke: &'p SpokePlan,
    touch: &'p Touch,
    dir: Direction,
}

impl Plan {
    /// Converts the object whose JSON text is `raw` and appends the result to `out`.
    #[cfg(test)]
    pub(crate) fn convert_raw(
        &self,
        raw: &str,
        desired: &str,
        out: &mut Vec<u8>,
    ) -> Result<(), ConvertError> {
        let scanned = Scanner::new(raw.as_bytes()).and_then(|mut s| {
            let result = self.convert_scanned(&mut s, desired, out)?;
            s.end().map(|_| result)
        });
        match scanned {
            Ok(result) => result,
            Err(e) => Err(ConvertError::object(&Value::new_null(), format!("is not JSON: {e}"))),
        }
    }

    /// Converts the value at the scanner (consuming it) and appends the result to `out`. The
    /// outer `Err` is malformed JSON; the inner one an object that does not convert.
    pub(crate) fn convert_scanned(
        &self,
        s: &mut Scanner<'_>,
        desired: &str,
        out: &mut Vec<u8>,
    ) -> Result<Result<(), ConvertError>, ScanError> {
        let mark = out.len();
        let mut probe = *s;
        // Objects from the apiserver have sorted keys, so `apiVersion` comes first and the
        // route is known before the rest of the object is read.
        if let Some(mut fields) = probe.object()? {
            let from = match probe.next_key(&mut fields)? {
                Some(k) if k == "apiVersion" && probe.peek() == Some(b'"') => Some(probe.string()?),
                _ => None,
            };
            if let Some((from, route)) = from.and_then(|f| self.route(&f, desired).map(|r| (f, r))) {
                let done = match route.spoke.stream(route.dir) {
                    Some(level) => crate::stream::rewrite(
                        level,
                        &route.spoke.scope,
                        route.dir,
                        &mut probe,
                        fields,
                        desired,
                        out,
                    ),
                    None => project(&mut probe, &mut fields, route.touch).and_then(|(mut proj, split)| {
                        proj.insert("apiVersion", Value::from(from.as_ref()));
                        run_projection(&route, Value::from(proj), split, desired, out).ok_or(Bail::Full)
                    }),
                };
                match done {
                    Ok(()) => {
                        *s = probe;
                        return Ok(Ok(()));
                    }
                    Err(Bail::Scan(e)) => return Err(e),
                    Err(Bail::Full) => out.truncate(mark),
                }
            }
        }
        // `s` has not moved: the fast paths read from `probe`.
        let raw = s.value()?;
        Ok(self.convert_full(raw, desired, out))
    }

    /// The route for an object at `from` going to `desired`, when a fast path serves it.
    fn route(&self, from: &str, desired: &str) -> Option<Route<'_>> {
        let (group, to) = desired.split_once('/')?;
        let (g, from) = from.split_once('/')?;
        if group != self.group || g != self.group || from == to {
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
        Some(Route { spoke: sp, touch: sp.touch.as_ref()?, dir })
    }

    /// The full path: parse the whole object, convert, serialise.
    fn convert_full(&self, raw: &str, desired: &str, out: &mut Vec<u8>) -> Result<(), ConvertError> {
        let obj: Value = match sonic_rs::from_str(raw) {
            Ok(v) => v,
            Err(e) => return Err(ConvertError::object(&Value::new_null(), format!("is not JSON: {e}"))),
        };
        let converted = self.convert_value(&obj, desired)?;
        sonic_rs::to_writer(&mut *out, &converted)
            .map_err(|e| ConvertError::object(&obj, format!("cannot serialise the result: {e}")))
    }
}

/// Runs the rules over the projection and writes the merged object; `None` means "take the
/// full path" (any rule error, so the message is the full path's).
fn run_projection(
    route: &Route<'_>,
    proj: Value,
    split: Split<'_>,
    desired: &str,
    out: &mut Vec<u8>,
) -> Option<()> {
    let mut dst = proj.clone();
    route.spoke.scope.run(route.dir, &proj, &mut dst).ok()?;
    dst.as_object_mut()?.insert("apiVersion", Value::from(desired));
    write_merged(out, Some(&dst), &split)
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
        let mut obj = hub_obj(json!({"a": 1, "x": "y"}));
        obj["status"] = json!({"n": "__N__"});
        // The untouched status keeps its exact bytes (the full path would print `2.5`).
        let raw = serde_json::to_string(&obj).unwrap().replace("\"__N__\"", "[1,  2.50]");
        let mut out = Vec::new();
        p.convert_raw(&raw, SPOKE_AV, &mut out).unwrap();
        assert!(String::from_utf8_lossy(&out).contains("[1,  2.50]"), "{}", String::from_utf8_lossy(&out));
        let mut want = spoke_obj(json!({"b": 1, "x": "y"}));
        want["status"] = json!({"n": [1, 2.5]});
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&out).unwrap(), want);
        // Keys in another order (apiVersion not first) take the full path, same result.
        let reordered = format!("{{\"kind\":\"DB\",{}", &raw[1..].replacen("\"kind\":\"DB\",", "", 1));
        let mut out2 = Vec::new();
        p.convert_raw(&reordered, SPOKE_AV, &mut out2).unwrap();
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&out2).unwrap(), want);
    }
}
