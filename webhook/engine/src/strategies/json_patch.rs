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
        // Each direction reads the input of its own side.
        let (hub_fs, spoke_fs) = (cx.hub_schema(), cx.spoke_schema());
        let hub_version = cx.hub_version().to_string();
        let spoke_version = cx.spoke_version().to_string();
        super::absent::check_patch(cx, "hubToSpoke", &p.hub_to_spoke, hub_fs, &hub_version);
        super::absent::check_patch(cx, "spokeToHub", &p.spoke_to_hub, spoke_fs, &spoke_version);
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

    /// The patches below read legacyFlag(V2): every object has it.
    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema_required(
                json!({"legacyFlag": {"type": "boolean"}, "name": {"type": "string"}}),
                &["legacyFlag"],
            ),
            obj_schema_required(
                json!({"legacyFlagV2": {"type": "boolean"}, "name": {"type": "string"}}),
                &["legacyFlagV2"],
            ),
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

    /// A pointer into annotations needs them present, which no schema can promise.
    #[test]
    fn annotation_pointers_need_the_annotations() {
        let hub =
            obj_schema_required(json!({"tier": {"type": "string"}, "name": {"type": "string"}}), &["tier"]);
        let spoke = obj_schema(json!({"name": {"type": "string"}}));
        let c = compile_rules(
            &hub,
            &spoke,
            json!([rule(
                json!([{"op": "copy", "from": "/spec/tier", "path": "/metadata/annotations/example.com~1tier"}, {"op": "remove", "path": "/spec/tier"}]),
                json!([{"op": "copy", "from": "/metadata/annotations/example.com~1tier", "path": "/spec/tier"}, {"op": "remove", "path": "/metadata/annotations/example.com~1tier"}]),
                true
            )]),
        );
        let m = all_errors(&c);
        assert!(m.contains("spoke v1, rule 0 (JSONPatch) metadata.annotations: jsonPatch.hubToSpoke[0] (copy): the parent /metadata/annotations of `path` /metadata/annotations/example.com~1tier may be absent"), "{m}");
        assert!(m.contains("jsonPatch.spokeToHub[0] (copy): `from` /metadata/annotations/example.com~1tier (the value it takes) may be absent"), "{m}");
        assert!(m.contains("use ToAnnotation/FromAnnotation"), "{m}");
        assert_eq!(c.report.errors().count(), 2, "{m}");
    }

    /// The widgets example's mistake: a move from an optional field fails on every object
    /// without it. The error names direction, op, pointer, version and the three fixes.
    #[test]
    fn move_from_an_optional_field_is_refused_with_the_fix() {
        let hub = obj_schema(json!({"legacyFlag": {"type": "boolean"}}));
        let spoke = obj_schema(json!({"legacyFlagV2": {"type": "boolean"}}));
        let both = rule(
            mv("/spec/legacyFlag", "/spec/legacyFlagV2"),
            mv("/spec/legacyFlagV2", "/spec/legacyFlag"),
            true,
        );
        let c = compile_rules(&hub, &spoke, json!([both]));
        let m = all_errors(&c);
        assert_eq!(c.report.errors().count(), 2, "{m}");
        assert!(m.contains("spoke v1, rule 0 (JSONPatch) spec.legacyFlag: jsonPatch.hubToSpoke[0] (move): `from` /spec/legacyFlag (the value it takes) may be absent — version v2 neither requires nor defaults spec.legacyFlag all the way up, so the patch fails on every object without it; guard the rule with `when` on the field, give the field a `default` (or make it required) in the schema"), "{m}");
        assert!(m.contains("jsonPatch.spokeToHub[0] (move): `from` /spec/legacyFlagV2 (the value it takes) may be absent — version v1 neither"), "{m}");
        // A default on the field, and on spec, is as good as required.
        let defaulted = |f: &str| {
            json!({"type": "object", "properties": {"spec": {"type": "object", "default": {},
                "properties": {f: {"type": "boolean", "default": false}}}}})
        };
        let plan = plan_for(&defaulted("legacyFlag"), &defaulted("legacyFlagV2"), json!([both]));
        let s = plan.convert(&hub_obj(json!({"legacyFlag": true})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"legacyFlagV2": true})));
        // Required in spec, but spec itself optional: still absent on some objects.
        let half = obj_schema_required(json!({"legacyFlag": {"type": "boolean"}}), &["legacyFlag"]);
        let half = {
            let mut h = half;
            h.as_object_mut().unwrap().remove("required");
            h
        };
        let c = compile_rules(&half, &defaulted("legacyFlagV2"), json!([both]));
        assert!(all_errors(&c).contains("hubToSpoke[0] (move)"), "{}", all_errors(&c));
        // A nullable ancestor can hold null instead of the field.
        let mut nullable = defaulted("legacyFlag");
        nullable["properties"]["spec"]["nullable"] = json!(true);
        let c = compile_rules(&nullable, &defaulted("legacyFlagV2"), json!([both]));
        assert!(all_errors(&c).contains("hubToSpoke[0] (move)"), "{}", all_errors(&c));
    }

    /// `when` on the field: the rule runs only on objects that have it.
    #[test]
    fn when_on_the_field_guards_the_patch() {
        let hub = obj_schema(json!({"legacyFlag": {"type": "boolean"}, "name": {"type": "string"}}));
        let spoke = obj_schema(json!({"legacyFlag": {"type": "boolean"}, "name": {"type": "string"}}));
        let mut r = rule(
            json!([{"op": "replace", "path": "/spec/name", "value": "legacy"}]),
            json!([{"op": "test", "path": "/spec/legacyFlag", "value": true}]),
            true,
        );
        let c = compile_rules(&hub, &spoke, json!([r.clone()]));
        assert!(
            all_errors(&c)
                .contains("jsonPatch.hubToSpoke[0] (replace): `path` /spec/name (its value) may be absent"),
            "{}",
            all_errors(&c)
        );
        r["when"] = json!({"path": "spec.legacyFlag", "equals": true});
        let c = compile_rules(&hub, &spoke, json!([r.clone()]));
        // The guard covers legacyFlag, not name.
        assert!(all_errors(&c).contains("(replace): `path` /spec/name"), "{}", all_errors(&c));
        assert!(!all_errors(&c).contains("(test)"), "{}", all_errors(&c));
        r["jsonPatch"]["hubToSpoke"] = json!([{"op": "replace", "path": "/spec/legacyFlag", "value": false}]);
        r["acknowledgeLossy"] = json!(true);
        r["reason"] = json!("a one-way flag");
        let plan = plan_for(&hub, &spoke, json!([r]));
        assert_eq!(
            plan.convert(&hub_obj(json!({"name": "a"})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"name": "a"}))
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"legacyFlag": true})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"legacyFlag": false}))
        );
    }

    /// What a patch writes or removes changes what the next op may rely on.
    #[test]
    fn ops_see_what_earlier_ops_did() {
        let (hub, spoke) = schemas();
        // add then replace: the replace finds the value the add wrote.
        let ok = rule(
            json!([{"op": "add", "path": "/spec/name", "value": "x"}, {"op": "replace", "path": "/spec/name", "value": "y"},
                   {"op": "move", "from": "/spec/legacyFlag", "path": "/spec/legacyFlagV2"}]),
            mv("/spec/legacyFlagV2", "/spec/legacyFlag"),
            true,
        );
        plan_for(&hub, &spoke, json!([ok]));
        // move then move again from the same place: the second finds nothing.
        let twice = rule(
            json!([{"op": "move", "from": "/spec/legacyFlag", "path": "/spec/legacyFlagV2"},
                   {"op": "copy", "from": "/spec/legacyFlag", "path": "/spec/name"}]),
            mv("/spec/legacyFlagV2", "/spec/legacyFlag"),
            true,
        );
        let c = compile_rules(&hub, &spoke, json!([twice]));
        assert!(
            all_errors(&c).contains("jsonPatch.hubToSpoke[1] (copy): `from` /spec/legacyFlag"),
            "{}",
            all_errors(&c)
        );
        assert_eq!(c.report.errors().count(), 1, "{}", all_errors(&c));
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
        let hub = obj_schema_required(
            json!({"disks": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}),
            &["disks"],
        );
        let spoke = hub.clone();
        let mut prepend = rule(
            json!([{"op": "add", "path": "/spec/disks/0", "value": {"name": "boot"}}]),
            json!([]),
            false,
        );
        prepend["acknowledgeLossy"] = json!(true);
        prepend["reason"] = json!("a boot disk first");
        let plan = plan_for(&hub, &spoke, json!([prepend.clone()]));
        let s = plan.convert(&hub_obj(json!({"disks": [{"name": "data"}]})), SPOKE_AV).unwrap();
        assert_eq!(s["spec"]["disks"], json!([{"name": "boot"}, {"name": "data"}]));
        let c = compile_rules(&hub, &spoke, json!([prepend]));
        assert_eq!(c.report.spokes[0].rule_results[0].hub_paths, vec!["spec.disks".to_string()]);
        // An item's field is there only when the array has that item.
        let c = compile_rules(
            &hub,
            &spoke,
            json!([rule(
                json!([{"op": "replace", "path": "/spec/disks/0/name", "value": "boot"}]),
                json!([]),
                true
            )]),
        );
        assert!(
            all_errors(&c).contains("spec.disks.0.name: jsonPatch.hubToSpoke[0] (replace): `path` /spec/disks/0/name (its value) may be absent"),
            "{}",
            all_errors(&c)
        );
    }
}
