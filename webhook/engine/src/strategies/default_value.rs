//! Fields that exist on one side only (`existsOn`):
//! - DefaultValue / Constant: converting into that side writes the default / constant;
//!   converting away drops the real value (always lossy that way).
//! - Delete: converting away drops it; nothing is written back (always needs acknowledgement).

use dco_api::rules::{Params, Side, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{Node, Resolved, ScalarType, Shape};
use crate::value::{self, Path, Value};

pub struct DefaultValue;
pub struct Constant;
pub struct Delete;

impl StrategyImpl for DefaultValue {
    fn strategy(&self) -> Strategy {
        Strategy::DefaultValue
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::DefaultValue(p)) = cx.rule().params() else { return None };
        compile(cx, "defaultValue", &p.path, p.exists_on, Some(&p.default))
    }
}

impl StrategyImpl for Constant {
    fn strategy(&self) -> Strategy {
        Strategy::Constant
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::Constant(p)) = cx.rule().params() else { return None };
        compile(cx, "constant", &p.path, p.exists_on, Some(&p.value))
    }
}

impl StrategyImpl for Delete {
    fn strategy(&self) -> Strategy {
        Strategy::Delete
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::Delete(p)) = cx.rule().params() else { return None };
        compile(cx, "delete", &p.path, p.exists_on, None)
    }
}

fn compile(
    cx: &mut RuleCx<'_>,
    block: &str,
    dotted: &str,
    exists_on: Side,
    fill: Option<&serde_json::Value>,
) -> Option<CompiledRule> {
    let field = format!("{block}.path");
    let (path, node) = match exists_on {
        Side::Hub => cx.hub_node(&field, dotted)?,
        Side::Spoke => cx.spoke_node(&field, dotted)?,
    };
    let (here, other, other_fs) = match exists_on {
        Side::Hub => ("hub", "spoke", cx.spoke_schema()),
        Side::Spoke => ("spoke", "hub", cx.hub_schema()),
    };
    if matches!(other_fs.resolve(dotted), Resolved::Node(_)) {
        cx.error(
            &[dotted],
            format!(
                "the field exists on the {other} side too; {} is for a field on one side only (existsOn: {here}) — use FieldRename, or leave it to the identity copy",
                cx.rule().strategy
            ),
        );
        return None;
    }
    if let Some(v) = fill
        && let Err(e) = value_fits(v, node)
    {
        cx.error(
            &[dotted],
            format!("{block} value {v} does not fit the {here} field ({}): {e}", node.describe()),
        );
        return None;
    }
    let fill = fill.map(value::from_serde);
    let into_h2s = exists_on == Side::Spoke;
    let op = Op { path: path.clone(), fill, into_h2s };
    let (hub_claims, spoke_claims) = match exists_on {
        Side::Hub => (vec![path], vec![]),
        Side::Spoke => (vec![], vec![path]),
    };
    // Converting away from the side that has the field drops its value.
    Some(CompiledRule::new(hub_claims, spoke_claims, LOSSLESS, Box::new(op)).lossy(
        exists_on == Side::Hub,
        format!("the {here} value of {dotted} has nowhere to go on the {other} side and is dropped"),
    ))
}

/// A light check that a literal matches the field's declared type.
fn value_fits(v: &serde_json::Value, node: &Node) -> Result<(), String> {
    if v.is_null() {
        return if node.nullable { Ok(()) } else { Err("the field is not nullable".into()) };
    }
    let ok = match &node.shape {
        Shape::Scalar(s) => {
            let type_ok = match s.ty {
                ScalarType::String => v.is_string(),
                ScalarType::Integer => v.is_i64() || v.is_u64(),
                ScalarType::Number => v.is_number(),
                ScalarType::Boolean => v.is_boolean(),
                ScalarType::IntOrString => v.is_string() || v.is_i64() || v.is_u64(),
            };
            if type_ok
                && let Some(e) = &s.enumeration
                && !e.contains(v)
            {
                return Err("not one of the enum values".into());
            }
            type_ok
        }
        Shape::Array { .. } => v.is_array(),
        Shape::Map { .. } | Shape::Object { .. } => v.is_object(),
        Shape::Opaque { .. } => true,
    };
    if ok { Ok(()) } else { Err("wrong type".into()) }
}

#[derive(Debug)]
struct Op {
    path: Path,
    /// What to write when converting into the side that has the field (None: Delete).
    fill: Option<Value>,
    /// True when that side is the spoke (so hub→spoke fills).
    into_h2s: bool,
}

impl Op {
    fn fill(&self, dst: &mut Value) -> Result<(), OpError> {
        match &self.fill {
            Some(v) => value::set(dst, self.path.segments(), v.clone())
                .map_err(|e| OpError::new(&self.path, e.to_string())),
            None => Ok(()),
        }
    }
}

impl RuleOp for Op {
    // Converting away needs no write: the executor already cleared the claimed field.
    fn hub_to_spoke(&self, _src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.into_h2s { self.fill(dst) } else { Ok(()) }
    }

    fn spoke_to_hub(&self, _src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.into_h2s { Ok(()) } else { self.fill(dst) }
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn hub() -> serde_json::Value {
        obj_schema(json!({"storageGB": {"type": "string"}}))
    }

    fn spoke() -> serde_json::Value {
        obj_schema(json!({"storageGB": {"type": "string"}, "computeUnits": {"type": "integer"}}))
    }

    #[test]
    fn default_value_fills_one_way_and_drops_the_other() {
        let r = json!({"strategy": "DefaultValue", "defaultValue": {"path": "spec.computeUnits", "existsOn": "Spoke", "default": 1}});
        let err = first_error(&compile_rules(&hub(), &spoke(), json!([r.clone()])));
        assert!(err.contains("spoke→hub: the spoke value of spec.computeUnits has nowhere to go"), "{err}");
        let mut acked = r;
        acked["acknowledgeLossy"] = json!(true);
        acked["reason"] = json!("new in v1");
        let plan = plan_for(&hub(), &spoke(), json!([acked]));
        let s = plan.convert(&hub_obj(json!({"storageGB": "500"})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"storageGB": "500", "computeUnits": 1})));
        let h = plan.convert(&spoke_obj(json!({"storageGB": "500", "computeUnits": 7})), HUB_AV).unwrap();
        assert_eq!(h, hub_obj(json!({"storageGB": "500"})));
    }

    #[test]
    fn constant_on_hub_and_delete() {
        let plan = plan_for(
            &spoke(),
            &hub(),
            json!([{"strategy": "Constant", "constant": {"path": "spec.computeUnits", "existsOn": "Hub", "value": 4},
            "acknowledgeLossy": true, "reason": "v1 has no compute units"}]),
        );
        assert_eq!(plan.convert(&spoke_obj(json!({})), HUB_AV).unwrap(), hub_obj(json!({"computeUnits": 4})));
        // The emptied spec goes too: removal prunes the parents it empties.
        assert_eq!(
            plan.convert(&hub_obj(json!({"computeUnits": 9})), SPOKE_AV).unwrap()["spec"],
            json!(null)
        );

        let plan = plan_for(
            &spoke(),
            &hub(),
            json!([{"strategy": "Delete", "delete": {"path": "spec.computeUnits", "existsOn": "Hub"},
            "acknowledgeLossy": true, "reason": "gone"}]),
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"computeUnits": 9, "storageGB": "1"})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"storageGB": "1"}))
        );
        assert_eq!(
            plan.convert(&spoke_obj(json!({"storageGB": "1"})), HUB_AV).unwrap(),
            hub_obj(json!({"storageGB": "1"}))
        );
        let err = first_error(&compile_rules(
            &spoke(),
            &hub(),
            json!([{"strategy": "Delete", "delete": {"path": "spec.computeUnits", "existsOn": "Hub"}}]),
        ));
        assert!(err.contains("rule 0 (Delete) spec.computeUnits: rule is lossy"), "{err}");
    }

    #[test]
    fn compile_errors() {
        let one = |r: serde_json::Value| first_error(&compile_rules(&hub(), &spoke(), json!([r])));
        let err = one(
            json!({"strategy": "DefaultValue", "defaultValue": {"path": "spec.storageGB", "existsOn": "Spoke", "default": "1"}, "acknowledgeLossy": true}),
        );
        assert!(err.contains("exists on the hub side too"), "{err}");
        let err = one(
            json!({"strategy": "DefaultValue", "defaultValue": {"path": "spec.computeUnits", "existsOn": "Spoke", "default": "one"}, "acknowledgeLossy": true}),
        );
        assert!(
            err.contains("defaultValue value \"one\" does not fit the spoke field (integer): wrong type"),
            "{err}"
        );
        let err = one(
            json!({"strategy": "Constant", "constant": {"path": "spec.computeUnits", "existsOn": "Hub", "value": 1}, "acknowledgeLossy": true}),
        );
        assert!(err.contains("constant.path: not in the schema of hub version v2"), "{err}");
    }
}
