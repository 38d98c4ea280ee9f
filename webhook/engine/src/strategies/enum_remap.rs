//! EnumRemap: the same field names its values differently on each side. Lossless hub→spoke
//! when unmapped hub values are an error; spoke→hub also needs an injective mapping.

use dco_api::rules::{Params, Strategy, UnknownKeyPolicy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::value::{self, Path, Value};

pub struct EnumRemap;

impl StrategyImpl for EnumRemap {
    fn strategy(&self) -> Strategy {
        Strategy::EnumRemap
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::EnumRemap(p)) = cx.rule().params() else { return None };
        let hub = cx.hub_node("enumRemap.path", &p.path);
        let spoke = cx.spoke_node("enumRemap.path", &p.path);
        let ((path, hn), (_, sn)) = (hub?, spoke?);
        for (side, n) in [("hub", hn), ("spoke", sn)] {
            if n.scalar().is_none() {
                cx.error(
                    &[&p.path],
                    format!("{side} field must be a scalar enum, but it is a {}", n.describe()),
                );
            }
        }
        if p.mapping.is_empty() {
            cx.error(&[&p.path], "enumRemap.mapping is empty; list {hub, spoke} value pairs");
        }
        let mut injective = true;
        for (i, m) in p.mapping.iter().enumerate() {
            for (side, v) in [("hub", &m.hub), ("spoke", &m.spoke)] {
                if !(v.is_string() || v.is_i64() || v.is_u64() || v.is_boolean()) {
                    cx.error(
                        &[&p.path],
                        format!("mapping[{i}].{side} is {v}; values must be strings, integers or booleans"),
                    );
                }
            }
            if p.mapping[..i].iter().any(|o| o.hub == m.hub) {
                cx.error(
                    &[&p.path],
                    format!("mapping[{i}]: hub value {} is mapped twice; keep one entry", m.hub),
                );
            }
            if p.mapping[..i].iter().any(|o| o.spoke == m.spoke) {
                injective = false;
            }
        }
        let enum_of = |n: &crate::schema::Node| n.scalar().and_then(|s| s.enumeration.clone());
        if p.on_unmapped_hub_value == UnknownKeyPolicy::Error
            && let Some(e) = enum_of(hn)
        {
            let missing: Vec<String> =
                e.iter().filter(|v| !p.mapping.iter().any(|m| &m.hub == *v)).map(|v| v.to_string()).collect();
            if !missing.is_empty() {
                cx.error(
                    &[&p.path],
                    format!(
                        "hub enum values {} have no mapping; map them or set onUnmappedHubValue: Drop",
                        missing.join(", ")
                    ),
                );
            }
        }
        if p.on_unmapped_spoke_value == UnknownKeyPolicy::Error
            && let Some(e) = enum_of(sn)
        {
            let missing: Vec<String> = e
                .iter()
                .filter(|v| !p.mapping.iter().any(|m| &m.spoke == *v))
                .map(|v| v.to_string())
                .collect();
            if !missing.is_empty() {
                cx.error(
                    &[&p.path],
                    format!(
                        "spoke enum values {} have no mapping; map them or set onUnmappedSpokeValue: Drop",
                        missing.join(", ")
                    ),
                );
            }
        }
        if cx.has_errors() {
            return None;
        }
        let pairs: Vec<(Value, Value)> =
            p.mapping.iter().map(|m| (value::from_serde(&m.hub), value::from_serde(&m.spoke))).collect();
        let op = Op {
            path: path.clone(),
            pairs,
            drop_hub: p.on_unmapped_hub_value == UnknownKeyPolicy::Drop,
            drop_spoke: p.on_unmapped_spoke_value == UnknownKeyPolicy::Drop,
        };
        let mut c = CompiledRule::new(vec![path.clone()], vec![path], LOSSLESS, Box::new(op));
        if p.on_unmapped_hub_value == UnknownKeyPolicy::Drop {
            c = c.lossy(true, "onUnmappedHubValue: Drop discards unmapped hub values");
        }
        if p.on_unmapped_spoke_value == UnknownKeyPolicy::Drop {
            c = c.lossy(false, "onUnmappedSpokeValue: Drop discards unmapped spoke values");
        }
        if !injective {
            c = c.lossy(false, "two hub values map to the same spoke value, so the way back is ambiguous");
        }
        Some(c)
    }
}

#[derive(Debug)]
struct Op {
    path: Path,
    pairs: Vec<(Value, Value)>,
    drop_hub: bool,
    drop_spoke: bool,
}

impl Op {
    fn map(&self, src: &Value, dst: &mut Value, h2s: bool) -> Result<(), OpError> {
        super::move_value(src, dst, &self.path, &self.path, |v| self.remap(v, h2s))
    }

    fn remap(&self, v: &Value, h2s: bool) -> Result<Option<Value>, OpError> {
        // First match wins, so a non-injective mapping goes back to its first hub value.
        let found = self.pairs.iter().find_map(|(h, s)| {
            let (from, to) = if h2s { (h, s) } else { (s, h) };
            (from == v).then(|| to.clone())
        });
        match found {
            Some(out) => Ok(Some(out)),
            None if (h2s && self.drop_hub) || (!h2s && self.drop_spoke) => Ok(None),
            None => Err(OpError::new(
                &self.path,
                format!(
                    "{} value {} has no mapping; add it to the rule's mapping",
                    if h2s { "hub" } else { "spoke" },
                    value::preview(v)
                ),
            )),
        }
    }
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.map(src, dst, true)
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.map(src, dst, false)
    }

    fn stream(&self) -> Option<super::Stream<'_>> {
        Some(super::Stream::Move { hub: &self.path, spoke: &self.path, mapped: true })
    }

    fn map_value(&self, v: &Value, dir: crate::convert::Direction) -> Result<Option<Value>, OpError> {
        self.remap(v, dir == crate::convert::Direction::HubToSpoke)
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(json!({"size": {"type": "string", "enum": ["Small", "Large"]}})),
            obj_schema(json!({"size": {"type": "string", "enum": ["S", "L"]}})),
        )
    }

    fn mapping() -> serde_json::Value {
        json!([{"hub": "Small", "spoke": "S"}, {"hub": "Large", "spoke": "L"}])
    }

    #[test]
    fn remaps_both_ways_and_fails_on_unmapped_values() {
        let (hub, spoke) = schemas();
        let plan = plan_for(
            &hub,
            &spoke,
            json!([{"strategy": "EnumRemap", "enumRemap": {"path": "spec.size", "mapping": mapping()}}]),
        );
        let h = hub_obj(json!({"size": "Large"}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"size": "L"})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        let err = plan.convert(&hub_obj(json!({"size": "Huge"})), SPOKE_AV).unwrap_err().to_string();
        assert_eq!(
            err,
            "DB default/db1: spoke v1, rule 0 (EnumRemap) spec.size: hub value \"Huge\" has no mapping; add it to the rule's mapping"
        );
    }

    #[test]
    fn non_injective_and_drop_are_lossy() {
        let hub = obj_schema(json!({"size": {"type": "string"}}));
        let spoke = obj_schema(json!({"size": {"type": "string"}}));
        let m = json!([{"hub": "Small", "spoke": "S"}, {"hub": "Tiny", "spoke": "S"}]);
        let err = first_error(&compile_rules(
            &hub,
            &spoke,
            json!([{"strategy": "EnumRemap", "enumRemap": {"path": "spec.size", "mapping": m}}]),
        ));
        assert!(err.contains("spoke→hub: two hub values map to the same spoke value"), "{err}");
        let plan = plan_for(
            &hub,
            &spoke,
            json!([{"strategy": "EnumRemap", "enumRemap": {"path": "spec.size", "mapping": m,
            "onUnmappedHubValue": "Drop"}, "acknowledgeLossy": true, "reason": "tiny is small"}]),
        );
        assert_eq!(
            plan.convert(&spoke_obj(json!({"size": "S"})), HUB_AV).unwrap(),
            hub_obj(json!({"size": "Small"}))
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"size": "Other", "x": 1})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"x": 1}))
        );
    }

    #[test]
    fn maps_integers_and_booleans() {
        let hub = obj_schema(json!({"level": {"type": "integer"}}));
        let spoke = obj_schema(json!({"level": {"type": "boolean"}}));
        let plan = plan_for(
            &hub,
            &spoke,
            json!([{"strategy": "EnumRemap", "enumRemap": {"path": "spec.level",
            "mapping": [{"hub": 1, "spoke": true}, {"hub": 0, "spoke": false}]}}]),
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"level": 0})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"level": false}))
        );
    }

    #[test]
    fn compile_errors() {
        let (hub, spoke) = schemas();
        let one = |params: serde_json::Value| {
            first_error(&compile_rules(&hub, &spoke, json!([{"strategy": "EnumRemap", "enumRemap": params}])))
        };
        let err = one(json!({"path": "spec.size", "mapping": [{"hub": "Small", "spoke": "S"}]}));
        assert!(err.contains("hub enum values \"Large\" have no mapping"), "{err}");
        let err = one(
            json!({"path": "spec.size", "mapping": [{"hub": "Small", "spoke": "S"}, {"hub": "Large", "spoke": "S"}],
            "onUnmappedSpokeValue": "Drop"}),
        );
        assert!(err.contains("rule is lossy"), "{err}");
        let err = one(
            json!({"path": "spec.size", "mapping": [{"hub": "Small", "spoke": "S"}, {"hub": "Small", "spoke": "L"}, {"hub": "Large", "spoke": "L"}]}),
        );
        assert!(err.contains("hub value \"Small\" is mapped twice"), "{err}");
        let err = one(json!({"path": "spec.size", "mapping": [{"hub": {"a": 1}, "spoke": "S"}]}));
        assert!(err.contains("values must be strings, integers or booleans"), "{err}");
        let err = one(json!({"path": "spec.size", "mapping": []}));
        assert!(err.contains("mapping is empty"), "{err}");
    }
}
