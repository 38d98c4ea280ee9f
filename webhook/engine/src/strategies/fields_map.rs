//! FieldsToMap (several hub fields ⇄ one spoke map) and MapToFields (a hub map ⇄ several
//! spoke fields). Gathering fields into the map loses nothing; splitting the map is
//! lossless only when unknown keys are an error (`on...Key: Error`), not dropped.

use std::collections::BTreeMap;

use dco_api::rules::{Params, Strategy, UnknownKeyPolicy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{Node, Shape, node_fits};
use crate::value::{self, JsonContainerTrait, Path, Value};

pub struct FieldsToMap;
pub struct MapToFields;

impl StrategyImpl for FieldsToMap {
    fn strategy(&self) -> Strategy {
        Strategy::FieldsToMap
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::FieldsToMap(p)) = cx.rule().params() else { return None };
        compile(
            cx,
            Spec {
                block: "fieldsToMap",
                fields: &p.hub_paths,
                map: &p.spoke_map_path,
                key_names: &p.key_names,
                policy: p.on_unknown_spoke_key,
                policy_field: "onUnknownSpokeKey",
                fields_on_hub: true,
            },
        )
    }
}

impl StrategyImpl for MapToFields {
    fn strategy(&self) -> Strategy {
        Strategy::MapToFields
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::MapToFields(p)) = cx.rule().params() else { return None };
        compile(
            cx,
            Spec {
                block: "mapToFields",
                fields: &p.spoke_paths,
                map: &p.hub_map_path,
                key_names: &p.key_names,
                policy: p.on_unknown_hub_key,
                policy_field: "onUnknownHubKey",
                fields_on_hub: false,
            },
        )
    }
}

struct Spec<'a> {
    block: &'a str,
    fields: &'a [String],
    map: &'a str,
    key_names: &'a BTreeMap<String, String>,
    policy: UnknownKeyPolicy,
    policy_field: &'a str,
    fields_on_hub: bool,
}

fn compile(cx: &mut RuleCx<'_>, s: Spec<'_>) -> Option<CompiledRule> {
    let (fields_field, map_field) =
        if s.fields_on_hub { ("hubPaths", "spokeMapPath") } else { ("spokePaths", "hubMapPath") };
    let (fields_side, map_side) = if s.fields_on_hub { ("hub", "spoke") } else { ("spoke", "hub") };
    let map = if s.fields_on_hub {
        cx.spoke_node(&format!("{}.{map_field}", s.block), s.map)
    } else {
        cx.hub_node(&format!("{}.{map_field}", s.block), s.map)
    };
    if s.fields.is_empty() {
        cx.error(
            &[],
            format!("{}.{fields_field} is empty; list the {fields_side} fields that form the map", s.block),
        );
    }
    let mut fields: Vec<(Path, &Node, String)> = Vec::new();
    for f in s.fields {
        let node = if s.fields_on_hub {
            cx.hub_node(&format!("{}.{fields_field}", s.block), f)
        } else {
            cx.spoke_node(&format!("{}.{fields_field}", s.block), f)
        };
        if let Some((path, node)) = node {
            let key = s
                .key_names
                .get(f)
                .cloned()
                .unwrap_or_else(|| path.segments().last().cloned().unwrap_or_default());
            if let Some(dup) = fields.iter().find(|(_, _, k)| *k == key) {
                cx.error(
                    &[f, &dup.0.dotted()],
                    format!("both fields map to key {key:?}; give them distinct keyNames"),
                );
            }
            fields.push((path, node, key));
        }
    }
    for k in s.key_names.keys() {
        if !s.fields.contains(k) {
            cx.error(&[k], format!("{}.keyNames names {k:?}, which is not in {fields_field}", s.block));
        }
    }
    let (map_path, map_node) = map?;
    let values = match &map_node.shape {
        Shape::Map { values } => Some(&values.root),
        _ if map_node.accepts_anything() => None,
        _ => {
            cx.error(
                &[s.map],
                format!(
                    "{map_side} field must be a map (additionalProperties), but it is a {}",
                    map_node.describe()
                ),
            );
            return None;
        }
    };
    if cx.has_errors() {
        return None;
    }
    let fields_claims: Vec<Path> = fields.iter().map(|(p, _, _)| p.clone()).collect();
    let (hub_claims, spoke_claims) = if s.fields_on_hub {
        (fields_claims, vec![map_path.clone()])
    } else {
        (vec![map_path.clone()], fields_claims)
    };
    let op = Op {
        fields: fields.iter().map(|(p, _, k)| (p.clone(), k.clone())).collect(),
        map: map_path.clone(),
        drop_unknown: s.policy == UnknownKeyPolicy::Drop,
        fields_on_hub: s.fields_on_hub,
    };
    let mut c = CompiledRule::new(hub_claims, spoke_claims, LOSSLESS, Box::new(op));
    // Gathering runs hub→spoke when the fields are on the hub.
    let gather_h2s = s.fields_on_hub;
    if let Some(values) = values {
        for (path, node, key) in &fields {
            if let Err(e) = node_fits(node, values) {
                c = c.lossy(gather_h2s, format!("{fields_side} {path} does not fit the map's values: {e}"));
            }
            if let Err(e) = node_fits(values, node) {
                c = c.lossy(!gather_h2s, format!("map key {key:?} does not fit {fields_side} {path}: {e}"));
            }
        }
    }
    if s.policy == UnknownKeyPolicy::Drop {
        c = c.lossy(!gather_h2s, format!("{}: Drop discards map keys that no field takes", s.policy_field));
    }
    Some(c)
}

#[derive(Debug)]
struct Op {
    fields: Vec<(Path, String)>,
    map: Path,
    drop_unknown: bool,
    fields_on_hub: bool,
}

impl Op {
    fn gather(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let mut m = sonic_rs::Object::new();
        for (path, key) in &self.fields {
            if let Some(v) = value::get(src, path.segments()) {
                m.insert(key, v.clone());
            }
        }
        if m.is_empty() {
            return Ok(());
        }
        value::set(dst, self.map.segments(), Value::from(m))
            .map_err(|e| OpError::new(&self.map, e.to_string()))
    }

    fn split(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let Some(v) = value::get(src, self.map.segments()) else { return Ok(()) };
        let Some(m) = v.as_object() else {
            return Err(OpError::new(&self.map, format!("expected a map, found {}", value::type_name(v))));
        };
        for (k, _) in m.iter() {
            if !self.drop_unknown && !self.fields.iter().any(|(_, key)| key == k) {
                return Err(OpError::new(
                    &self.map,
                    format!(
                        "key {k:?} has no field to go to (known: {}); add it to the rule or set the unknown-key policy to Drop",
                        self.fields.iter().map(|(_, k)| k.as_str()).collect::<Vec<_>>().join(", ")
                    ),
                ));
            }
        }
        for (path, key) in &self.fields {
            if let Some(x) = m.get(key) {
                value::set(dst, path.segments(), x.clone()).map_err(|e| OpError::new(path, e.to_string()))?;
            }
        }
        Ok(())
    }
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.fields_on_hub { self.gather(src, dst) } else { self.split(src, dst) }
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.fields_on_hub { self.split(src, dst) } else { self.gather(src, dst) }
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn fields() -> serde_json::Value {
        obj_schema(json!({"cpuLimit": {"type": "string"}, "memoryLimit": {"type": "string"}}))
    }

    fn map() -> serde_json::Value {
        obj_schema(json!({"limits": {"type": "object", "additionalProperties": {"type": "string"}}}))
    }

    #[test]
    fn fields_to_map_round_trips_and_rejects_unknown_keys() {
        let plan = plan_for(
            &fields(),
            &map(),
            json!([{"strategy": "FieldsToMap", "fieldsToMap": {"hubPaths": ["spec.cpuLimit", "spec.memoryLimit"],
                "spokeMapPath": "spec.limits", "keyNames": {"spec.cpuLimit": "cpu"}}}]),
        );
        let h = hub_obj(json!({"cpuLimit": "4", "memoryLimit": "16Gi"}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"limits": {"cpu": "4", "memoryLimit": "16Gi"}})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        let err = plan.convert(&spoke_obj(json!({"limits": {"gpu": "1"}})), HUB_AV).unwrap_err().to_string();
        assert!(err.contains("rule 0 (FieldsToMap) spec.limits: key \"gpu\" has no field to go to"), "{err}");
        assert_eq!(plan.convert(&hub_obj(json!({})), SPOKE_AV).unwrap(), spoke_obj(json!({})));
    }

    #[test]
    fn map_to_fields_with_drop_is_lossy_and_drops() {
        let rule = json!({"strategy": "MapToFields", "mapToFields": {"hubMapPath": "spec.limits",
            "spokePaths": ["spec.cpuLimit", "spec.memoryLimit"], "onUnknownHubKey": "Drop"}});
        let err = first_error(&compile_rules(&map(), &fields(), json!([rule.clone()])));
        assert!(err.contains("hub→spoke: onUnknownHubKey: Drop discards map keys"), "{err}");
        let mut acked = rule;
        acked["acknowledgeLossy"] = json!(true);
        acked["reason"] = json!("other keys are unused");
        let plan = plan_for(&map(), &fields(), json!([acked]));
        let s = plan.convert(&hub_obj(json!({"limits": {"cpuLimit": "1", "x": "y"}})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"cpuLimit": "1"})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"limits": {"cpuLimit": "1"}})));
    }

    #[test]
    fn compile_errors() {
        let r = |params: serde_json::Value| json!([{"strategy": "FieldsToMap", "fieldsToMap": params}]);
        let err = first_error(&compile_rules(
            &fields(),
            &map(),
            r(json!({"hubPaths": ["spec.cpuLimit", "spec.memoryLimit"], "spokeMapPath": "spec.limits",
            "keyNames": {"spec.cpuLimit": "x", "spec.memoryLimit": "x"}})),
        ));
        assert!(err.contains("both fields map to key \"x\""), "{err}");
        let err = first_error(&compile_rules(
            &fields(),
            &map(),
            r(json!({"hubPaths": [], "spokeMapPath": "spec.limits"})),
        ));
        assert!(err.contains("hubPaths is empty"), "{err}");
        let err = first_error(&compile_rules(
            &fields(),
            &fields(),
            r(json!({"hubPaths": ["spec.cpuLimit"], "spokeMapPath": "spec.memoryLimit"})),
        ));
        assert!(err.contains("spoke field must be a map"), "{err}");
        let err = first_error(&compile_rules(
            &fields(),
            &map(),
            r(
                json!({"hubPaths": ["spec.cpuLimit", "spec.memoryLimit"], "spokeMapPath": "spec.limits", "keyNames": {"spec.other": "o"}}),
            ),
        ));
        assert!(err.contains("keyNames names \"spec.other\""), "{err}");
    }
}
