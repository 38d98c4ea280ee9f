//! SingletonArrayToObject (hub array of at most one item, spoke the item itself) and
//! ObjectToSingletonArray (the mirror). Lossless only when the array's `maxItems <= 1`;
//! otherwise items after the first are dropped. An empty array converts to an absent field.

use dco_api::rules::{Params, PathPair, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{FlatSchema, Shape, schema_fits};
use crate::value::{self, JsonContainerTrait, Path, Value};

pub struct SingletonArrayToObject;
pub struct ObjectToSingletonArray;

impl StrategyImpl for SingletonArrayToObject {
    fn strategy(&self) -> Strategy {
        Strategy::SingletonArrayToObject
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::SingletonArrayToObject(p)) = cx.rule().params() else { return None };
        compile(cx, p, "singletonArrayToObject", true)
    }
}

impl StrategyImpl for ObjectToSingletonArray {
    fn strategy(&self) -> Strategy {
        Strategy::ObjectToSingletonArray
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ObjectToSingletonArray(p)) = cx.rule().params() else { return None };
        compile(cx, p, "objectToSingletonArray", false)
    }
}

fn compile(cx: &mut RuleCx<'_>, p: &PathPair, block: &str, hub_is_array: bool) -> Option<CompiledRule> {
    let hub = cx.hub_node(&format!("{block}.hubPath"), &p.hub_path);
    let spoke = cx.spoke_node(&format!("{block}.spokePath"), &p.spoke_path);
    let ((hp, hn), (sp, sn)) = (hub?, spoke?);
    let (array_side, object_side) = if hub_is_array { ("hub", "spoke") } else { ("spoke", "hub") };
    let (array_path, array_node, object_path, object_fs) =
        if hub_is_array { (&hp, hn, &sp, cx.spoke_schema()) } else { (&sp, sn, &hp, cx.hub_schema()) };
    let Shape::Array { items, max_items } = &array_node.shape else {
        cx.error(
            &[&array_path.dotted()],
            format!("{array_side} field must be an array, but it is a {}", array_node.describe()),
        );
        return None;
    };
    let object: FlatSchema = match object_fs.subtree(&object_path.dotted()) {
        Some(o) if matches!(o.root.shape, Shape::Object { .. }) => o,
        _ => {
            let what = object_fs.get(&object_path.dotted()).map(|n| n.describe()).unwrap_or_default();
            cx.error(
                &[&object_path.dotted()],
                format!("{object_side} field must be an object, but it is a {what}"),
            );
            return None;
        }
    };
    let mut c = CompiledRule::new(
        vec![hp.clone()],
        vec![sp.clone()],
        LOSSLESS,
        Box::new(Op { array: array_path.clone(), object: object_path.clone(), hub_is_array }),
    );
    if let Err(e) = schema_fits(items, &object) {
        c = c.lossy(hub_is_array, format!("the array item does not fit {object_side} {object_path}: {e}"));
    }
    if let Err(e) = schema_fits(&object, items) {
        c = c.lossy(!hub_is_array, format!("{object_side} {object_path} does not fit the array item: {e}"));
    }
    if max_items.is_none_or(|m| m > 1) {
        let limit = max_items.map(|m| format!("maxItems {m}")).unwrap_or_else(|| "no maxItems".into());
        c = c.lossy(
            hub_is_array,
            format!(
                "{array_side} {array_path} has {limit}: items after the first are dropped (set maxItems: 1)"
            ),
        );
    }
    Some(c)
}

#[derive(Debug)]
struct Op {
    array: Path,
    object: Path,
    hub_is_array: bool,
}

impl Op {
    fn to_object(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.array, &self.object, |v| {
            let Some(a) = v.as_array() else {
                return Err(OpError::new(
                    &self.array,
                    format!("expected an array, found {}", value::type_name(v)),
                ));
            };
            Ok(a.first().cloned())
        })
    }

    fn to_array(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.object, &self.array, |v| {
            let mut a = sonic_rs::Array::with_capacity(1);
            a.push(v.clone());
            Ok(Some(Value::from(a)))
        })
    }
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.hub_is_array { self.to_object(src, dst) } else { self.to_array(src, dst) }
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.hub_is_array { self.to_array(src, dst) } else { self.to_object(src, dst) }
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn item() -> serde_json::Value {
        json!({"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}}})
    }

    #[test]
    fn singleton_array_round_trips() {
        let hub = obj_schema(json!({"endpoints": {"type": "array", "maxItems": 1, "items": item()}}));
        let spoke = obj_schema(json!({"endpoint": item()}));
        let plan = plan_for(
            &hub,
            &spoke,
            json!([{"strategy": "SingletonArrayToObject", "singletonArrayToObject": {"hubPath": "spec.endpoints", "spokePath": "spec.endpoint"}}]),
        );
        let h = hub_obj(json!({"endpoints": [{"host": "a", "port": 1}]}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"endpoint": {"host": "a", "port": 1}})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        assert_eq!(
            plan.convert(&hub_obj(json!({"endpoints": [], "x": 1})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"x": 1}))
        );
    }

    #[test]
    fn object_to_singleton_array_and_unbounded_arrays_are_lossy() {
        let hub = obj_schema(json!({"endpoint": item()}));
        let spoke = obj_schema(json!({"endpoints": {"type": "array", "items": item()}}));
        let rule = json!({"strategy": "ObjectToSingletonArray", "objectToSingletonArray": {"hubPath": "spec.endpoint", "spokePath": "spec.endpoints"}});
        let err = first_error(&compile_rules(&hub, &spoke, json!([rule.clone()])));
        assert!(err.contains("spoke→hub: spoke spec.endpoints has no maxItems"), "{err}");
        let mut acked = rule;
        acked["acknowledgeLossy"] = json!(true);
        acked["reason"] = json!("only one endpoint is used");
        let plan = plan_for(&hub, &spoke, json!([acked]));
        let h = hub_obj(json!({"endpoint": {"host": "a"}}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"endpoints": [{"host": "a"}]})));
        let two = spoke_obj(json!({"endpoints": [{"host": "a"}, {"host": "b"}]}));
        assert_eq!(plan.convert(&two, HUB_AV).unwrap(), h);
        let err =
            plan.convert(&spoke_obj(json!({"endpoints": {"host": "a"}})), HUB_AV).unwrap_err().to_string();
        assert!(err.contains("spec.endpoints: expected an array, found object"), "{err}");
    }

    #[test]
    fn compile_errors() {
        let hub = obj_schema(json!({"endpoint": item(), "name": {"type": "string"}}));
        let spoke = obj_schema(
            json!({"endpoints": {"type": "array", "maxItems": 1, "items": item()}, "name": {"type": "string"}}),
        );
        let r = |h: &str, s: &str| json!([{"strategy": "ObjectToSingletonArray", "objectToSingletonArray": {"hubPath": h, "spokePath": s}}]);
        assert!(
            first_error(&compile_rules(&hub, &spoke, r("spec.endpoint", "spec.name")))
                .contains("spoke field must be an array")
        );
        assert!(
            first_error(&compile_rules(&hub, &spoke, r("spec.name", "spec.endpoints")))
                .contains("hub field must be an object")
        );
    }
}
