//! JSONPatch: an RFC 6902 patch per direction, the escape hatch for moves no named strategy
//! expresses.
//!
//! Claims: every pointer either patch names (`path` and `from`) is claimed on each side whose
//! schema declares it (a pointer into an array, map or opaque unit claims that unit), so the
//! fields a patch touches are neither reported uncovered nor silently shared with another rule.
//! A pointer neither schema declares is an error; `metadata/annotations/<key>` and
//! `metadata/labels/<key>` are allowed.
//!
//! Convert: the patch runs on a copy of the rule's input; each claimed destination path is
//! then taken from the patched copy (or left absent if the patch removed it).
//!
//! Verdict (rules.md): lossless only with `losslessOverride: true`.

use dco_api::rules::{Params, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::patch::{Patch, Pointer};
use crate::schema::{FlatSchema, Resolved};
use crate::value::{self, Path, Value};

pub struct JsonPatch;

impl StrategyImpl for JsonPatch {
    fn strategy(&self) -> Strategy {
        Strategy::JsonPatch
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::JsonPatch(p)) = cx.rule().params() else { return None };
        let compile =
            |cx: &mut RuleCx<'_>, field: &str, ops: &[dco_api::rules::JsonPatchOp]| match Patch::compile(ops)
            {
                Ok(patch) => Some(patch),
                Err(e) => {
                    cx.error(&[&e.pointer], format!("jsonPatch.{field}: {e}"));
                    None
                }
            };
        let h2s = compile(cx, "hubToSpoke", &p.hub_to_spoke);
        let s2h = compile(cx, "spokeToHub", &p.spoke_to_hub);
        let (h2s, s2h) = (h2s?, s2h?);
        if h2s.is_empty() && s2h.is_empty() {
            cx.error(&[], "jsonPatch has no operations in either direction; add hubToSpoke/spokeToHub operations or remove the rule");
            return None;
        }

        let mut hub_claims: Vec<Path> = Vec::new();
        let mut spoke_claims: Vec<Path> = Vec::new();
        for (field, patch) in [("hubToSpoke", &h2s), ("spokeToHub", &s2h)] {
            for ptr in patch.pointers() {
                let Some((on_hub, on_spoke)) = claim_pointer(cx, field, ptr) else { continue };
                if on_hub.is_none() && on_spoke.is_none() {
                    cx.error(
                        &[ptr.as_str()],
                        format!(
                            "jsonPatch.{field}: pointer {} names no field the hub or the spoke schema declares; fix the pointer (JSON Patch paths look like /spec/size)",
                            ptr.as_str()
                        ),
                    );
                    continue;
                }
                for (claims, found) in [(&mut hub_claims, on_hub), (&mut spoke_claims, on_spoke)] {
                    if let Some(path) = found
                        && !claims.contains(&path)
                    {
                        claims.push(path);
                    }
                }
            }
        }
        if cx.has_errors() {
            return None;
        }
        let op = PatchOp { h2s, s2h, hub_paths: hub_claims.clone(), spoke_paths: spoke_claims.clone() };
        let mut compiled = CompiledRule::new(hub_claims, spoke_claims, LOSSLESS, Box::new(op));
        if !p.lossless_override {
            let why = "the engine cannot prove what a JSON Patch does; prove the two patches are inverses with convctl test and set losslessOverride: true";
            compiled = compiled.lossy(true, why).lossy(false, why);
        }
        Some(compiled)
    }
}

/// The hub and spoke paths a pointer claims; `None` after reporting an error.
fn claim_pointer(cx: &mut RuleCx<'_>, field: &str, ptr: &Pointer) -> Option<(Option<Path>, Option<Path>)> {
    let tokens = ptr.tokens();
    let Some(first) = tokens.first() else {
        cx.error(
            &[],
            format!("jsonPatch.{field}: a pointer names the whole object; patch fields such as /spec/size"),
        );
        return None;
    };
    match first.as_str() {
        "apiVersion" | "kind" => {
            cx.error(
                &[ptr.as_str()],
                format!(
                    "jsonPatch.{field}: {} is set by the conversion itself; remove this operation",
                    ptr.as_str()
                ),
            );
            None
        }
        "metadata" => match tokens {
            [_, bag, key] if bag == "annotations" || bag == "labels" => {
                let path = Path::from_segments(["metadata", bag.as_str(), key.as_str()]);
                Some((Some(path.clone()), Some(path)))
            }
            _ => {
                cx.error(
                    &[ptr.as_str()],
                    format!("jsonPatch.{field}: {} — JSON Patch may change single metadata annotations and labels only (/metadata/annotations/<key>)", ptr.as_str()),
                );
                None
            }
        },
        _ => Some((declared(cx.hub_schema(), tokens), declared(cx.spoke_schema(), tokens))),
    }
}

/// The declared node a pointer lands on or inside: the path itself, or the unit (array, map,
/// opaque value) it points into.
fn declared(fs: &FlatSchema, tokens: &[String]) -> Option<Path> {
    if tokens.iter().any(|t| t.contains('.') || t.is_empty()) {
        // Declared field names never contain dots; look up the longest clean prefix.
        let clean: Vec<String> =
            tokens.iter().take_while(|t| !t.contains('.') && !t.is_empty()).cloned().collect();
        return match fs.resolve(&clean.join(".")) {
            Resolved::Node(n) if n.is_leaf() && !clean.is_empty() => Some(Path::from_segments(clean)),
            Resolved::InsideLeaf { unit, .. } => Some(Path::from_segments(unit.split('.'))),
            _ => None,
        };
    }
    match fs.resolve(&tokens.join(".")) {
        Resolved::Node(_) => Some(Path::from_segments(tokens.iter().cloned())),
        Resolved::InsideLeaf { unit, .. } => Some(Path::from_segments(unit.split('.'))),
        Resolved::Missing { .. } => None,
    }
}

#[derive(Debug)]
struct PatchOp {
    h2s: Patch,
    s2h: Patch,
    hub_paths: Vec<Path>,
    spoke_paths: Vec<Path>,
}

fn run(patch: &Patch, field: &str, claims: &[Path], src: &Value, dst: &mut Value) -> Result<(), OpError> {
    crate::limits::admit_copy(src, "JSONPatch", crate::limits::CopyInto::Serde)
        .map_err(|why| OpError::new("", format!("jsonPatch.{field}: {why}")))?;
    let mut patched = value::to_serde(src);
    patch.apply(&mut patched).map_err(|e| OpError::new(&e.pointer, format!("jsonPatch.{field}: {e}")))?;
    let patched = value::from_serde(&patched);
    for path in claims {
        match value::get(&patched, path.segments()) {
            Some(v) => {
                value::set(dst, path.segments(), v.clone()).map_err(|e| OpError::new(path, e.to_string()))?
            }
            None => {
                value::remove(dst, path.segments());
            }
        }
    }
    Ok(())
}

impl RuleOp for PatchOp {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        run(&self.h2s, "hubToSpoke", &self.spoke_paths, src, dst)
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        run(&self.s2h, "spokeToHub", &self.hub_paths, src, dst)
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(json!({"legacyFlag": {"type": "boolean"}, "name": {"type": "string"}})),
            obj_schema(json!({"legacyFlagV2": {"type": "boolean"}, "name": {"type": "string"}})),
        )
    }

    fn rule(h2s: serde_json::Value, s2h: serde_json::Value, override_: bool) -> serde_json::Value {
        json!({"strategy": "JSONPatch", "jsonPatch": {"hubToSpoke": h2s, "spokeToHub": s2h, "losslessOverride": override_}})
    }

    fn mv(from: &str, to: &str) -> serde_json::Value {
        json!([{"op": "move", "from": from, "path": to}])
    }

    #[test]
    fn moves_both_ways() {
        let (hub, spoke) = schemas();
        let plan = plan_for(
            &hub,
            &spoke,
            json!([rule(
                mv("/spec/legacyFlag", "/spec/legacyFlagV2"),
                mv("/spec/legacyFlagV2", "/spec/legacyFlag"),
                true
            )]),
        );
        let h = hub_obj(json!({"legacyFlag": true, "name": "x"}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"legacyFlagV2": true, "name": "x"})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }

    #[test]
    fn annotations_and_values() {
        let hub = obj_schema(json!({"tier": {"type": "string"}, "name": {"type": "string"}}));
        let spoke = obj_schema(json!({"name": {"type": "string"}}));
        let plan = plan_for(
            &hub,
            &spoke,
            json!([rule(
                json!([{"op": "copy", "from": "/spec/tier", "path": "/metadata/annotations/example.com~1tier"}, {"op": "remove", "path": "/spec/tier"}]),
                json!([{"op": "copy", "from": "/metadata/annotations/example.com~1tier", "path": "/spec/tier"}, {"op": "remove", "path": "/metadata/annotations/example.com~1tier"}]),
                true
            )]),
        );
        let mut h = hub_obj(json!({"tier": "gold", "name": "db"}));
        h["metadata"]["annotations"] = json!({"keep": "1"});
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s["metadata"]["annotations"], json!({"keep": "1", "example.com/tier": "gold"}));
        assert_eq!(s["spec"], json!({"name": "db"}));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }

    #[test]
    fn failing_op_names_direction_index_and_pointer() {
        let (hub, spoke) = schemas();
        let plan = plan_for(
            &hub,
            &spoke,
            json!([rule(
                json!([{"op": "test", "path": "/spec/legacyFlag", "value": true}, {"op": "move", "from": "/spec/legacyFlag", "path": "/spec/legacyFlagV2"}]),
                mv("/spec/legacyFlagV2", "/spec/legacyFlag"),
                true
            )]),
        );
        let err = plan.convert(&hub_obj(json!({"legacyFlag": false})), SPOKE_AV).unwrap_err().to_string();
        assert!(
            err.contains("jsonPatch.hubToSpoke: JSON Patch op 0 (test /spec/legacyFlag)")
                && err.contains("(JSONPatch)"),
            "{err}"
        );
    }

    #[test]
    fn lossy_without_override() {
        let (hub, spoke) = schemas();
        let c = compile_rules(
            &hub,
            &spoke,
            json!([rule(
                mv("/spec/legacyFlag", "/spec/legacyFlagV2"),
                mv("/spec/legacyFlagV2", "/spec/legacyFlag"),
                false
            )]),
        );
        assert!(first_error(&c).contains("rule is lossy") && first_error(&c).contains("losslessOverride"));
    }

    #[test]
    fn compile_errors() {
        let (hub, spoke) = schemas();
        for (h2s, needle) in [
            (
                json!([{"op": "add", "path": "/spec/name"}]),
                "jsonPatch.hubToSpoke: JSON Patch op 0 (add /spec/name): `add` needs `value`",
            ),
            (json!([{"op": "remove", "path": "spec/name"}]), "must be empty or start with '/'"),
            (json!([{"op": "replace", "path": "/kind", "value": "X"}]), "set by the conversion itself"),
            (
                json!([{"op": "replace", "path": "/metadata/name", "value": "X"}]),
                "single metadata annotations and labels",
            ),
            (
                json!([{"op": "add", "path": "/spec/unknown", "value": 1}]),
                "names no field the hub or the spoke schema declares",
            ),
            (json!([{"op": "replace", "path": "", "value": {}}]), "names the whole object"),
        ] {
            let c = compile_rules(&hub, &spoke, json!([rule(h2s.clone(), json!([]), true)]));
            assert!(all_errors(&c).contains(needle), "{h2s}: {}", all_errors(&c));
        }
        let c = compile_rules(&hub, &spoke, json!([rule(json!([]), json!([]), true)]));
        assert!(first_error(&c).contains("no operations"));
    }

    #[test]
    fn pointer_into_array_claims_the_array() {
        let hub = obj_schema(
            json!({"disks": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}),
        );
        let spoke = hub.clone();
        let plan = plan_for(
            &hub,
            &spoke,
            json!([rule(
                json!([{"op": "replace", "path": "/spec/disks/0/name", "value": "boot"}]),
                json!([{"op": "replace", "path": "/spec/disks/0/name", "value": "root"}]),
                false
            )
            .as_object()
            .map(|o| {
                let mut o = o.clone();
                o.insert("acknowledgeLossy".into(), json!(true));
                o.insert("reason".into(), json!("rename the first disk"));
                serde_json::Value::Object(o)
            })
            .unwrap()]),
        );
        let s =
            plan.convert(&hub_obj(json!({"disks": [{"name": "root"}, {"name": "data"}]})), SPOKE_AV).unwrap();
        assert_eq!(s["spec"]["disks"], json!([{"name": "boot"}, {"name": "data"}]));
        let c = compile_rules(
            &hub,
            &spoke,
            json!([rule(json!([{"op": "remove", "path": "/spec/disks/0"}]), json!([]), true)]),
        );
        assert_eq!(c.report.spokes[0].rule_results[0].hub_paths, vec!["spec.disks".to_string()]);
    }
}
