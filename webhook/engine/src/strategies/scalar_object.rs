//! ScalarToObject (hub scalar, spoke object holding it under `key`) and ObjectToScalar (hub
//! object, spoke scalar). Collapsing the object to the scalar is lossy when the object has
//! other properties; `defaultsForOtherKeys` fills them when the object is rebuilt.

use dco_api::rules::{Params, ScalarObjectParams, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{Node, node_fits};
use crate::value::{self, JsonContainerTrait, Path, Value};

pub struct ScalarToObject;
pub struct ObjectToScalar;

impl StrategyImpl for ScalarToObject {
    fn strategy(&self) -> Strategy {
        Strategy::ScalarToObject
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ScalarToObject(p)) = cx.rule().params() else { return None };
        compile(cx, p, "scalarToObject", true)
    }
}

impl StrategyImpl for ObjectToScalar {
    fn strategy(&self) -> Strategy {
        Strategy::ObjectToScalar
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ObjectToScalar(p)) = cx.rule().params() else { return None };
        compile(cx, p, "objectToScalar", false)
    }
}

fn compile(
    cx: &mut RuleCx<'_>,
    p: &ScalarObjectParams,
    block: &str,
    hub_is_scalar: bool,
) -> Option<CompiledRule> {
    let hub = cx.hub_node(&format!("{block}.hubPath"), &p.hub_path);
    let spoke = cx.spoke_node(&format!("{block}.spokePath"), &p.spoke_path);
    let ((hp, hn), (sp, sn)) = (hub?, spoke?);
    let (scalar_side, object_side) = if hub_is_scalar { ("hub", "spoke") } else { ("spoke", "hub") };
    let ((scalar_path, scalar_node), (object_path, object_node), object_fs) = if hub_is_scalar {
        ((&hp, hn), (&sp, sn), cx.spoke_schema())
    } else {
        ((&sp, sn), (&hp, hn), cx.hub_schema())
    };
    if scalar_node.scalar().is_none() {
        cx.error(
            &[&scalar_path.dotted()],
            format!("{scalar_side} field must be a scalar, but it is a {}", scalar_node.describe()),
        );
    }
    if object_node.is_leaf() {
        cx.error(
            &[&object_path.dotted()],
            format!(
                "{object_side} field must be an object with properties, but it is a {}",
                object_node.describe()
            ),
        );
        return None;
    }
    if p.key.is_empty() || p.key.contains('.') {
        cx.error(&[], format!("{block}.key must be one property name, got {:?}", p.key));
        return None;
    }
    let key_path = format!("{object_path}.{}", p.key);
    let Some(key_node) = object_fs.get(&key_path) else {
        cx.error(
            &[&key_path],
            format!(
                "{block}.key {:?} is not a property of {object_side} {object_path} (it has: {})",
                p.key,
                object_fs.children(&object_path.dotted()).join(", ")
            ),
        );
        return None;
    };
    let others: Vec<String> = object_fs
        .children(&object_path.dotted())
        .into_iter()
        .filter(|c| *c != p.key)
        .map(str::to_string)
        .collect();
    for k in p.defaults_for_other_keys.keys() {
        if *k == p.key {
            cx.error(&[], format!("{block}.defaultsForOtherKeys must not set the key {k:?} itself"));
        } else if !others.contains(k) {
            cx.error(&[], format!("{block}.defaultsForOtherKeys sets {k:?}, which {object_side} {object_path} does not declare"));
        }
    }
    if cx.has_errors() {
        return None;
    }
    let to_object = fits(scalar_node, key_node);
    let to_scalar = fits(key_node, scalar_node);
    let op = Op {
        scalar: scalar_path.clone(),
        object: object_path.clone(),
        key: p.key.clone(),
        defaults: p.defaults_for_other_keys.iter().map(|(k, v)| (k.clone(), value::from_serde(v))).collect(),
    };
    let mut c = CompiledRule::new(
        vec![hp.clone()],
        vec![sp.clone()],
        LOSSLESS,
        Box::new(WithDir { op, hub_is_scalar }),
    );
    // hub→spoke builds the object when the hub is the scalar.
    let (toward_object_is_h2s, toward_scalar_is_h2s) = (hub_is_scalar, !hub_is_scalar);
    if let Err(e) = to_object {
        c = c.lossy(toward_object_is_h2s, format!("the scalar does not fit {key_path}: {e}"));
    }
    if let Err(e) = to_scalar {
        c = c.lossy(toward_scalar_is_h2s, format!("{key_path} does not fit the scalar: {e}"));
    }
    if !others.is_empty() {
        c = c.lossy(
            toward_scalar_is_h2s,
            format!(
                "{object_side} {object_path} has other properties ({}) the scalar cannot hold",
                others.join(", ")
            ),
        );
    }
    Some(c)
}

fn fits(a: &Node, b: &Node) -> Result<(), String> {
    node_fits(a, b)
}

#[derive(Debug)]
struct Op {
    scalar: Path,
    object: Path,
    key: String,
    defaults: Vec<(String, Value)>,
}

impl Op {
    fn to_object(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.scalar, &self.object, |v| {
            let mut o = sonic_rs::Object::new();
            for (k, d) in &self.defaults {
                o.insert(k, d.clone());
            }
            o.insert(&self.key, v.clone());
            Ok(Some(Value::from(o)))
        })
    }

    fn to_scalar(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.object, &self.scalar, |v| {
            let Some(o) = v.as_object() else {
                return Err(OpError::new(
                    &self.object,
                    format!("expected an object, found {} {}", value::type_name(v), value::preview(v)),
                ));
            };
            Ok(o.get(&self.key).cloned())
        })
    }
}

#[derive(Debug)]
struct WithDir {
    op: Op,
    hub_is_scalar: bool,
}

impl RuleOp for WithDir {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.hub_is_scalar { self.op.to_object(src, dst) } else { self.op.to_scalar(src, dst) }
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.hub_is_scalar { self.op.to_scalar(src, dst) } else { self.op.to_object(src, dst) }
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    #[test]
    fn scalar_to_object_round_trips() {
        let hub = obj_schema(json!({"replicaCount": {"type": "integer"}}));
        let spoke =
            obj_schema(json!({"replicas": {"type": "object", "properties": {"count": {"type": "integer"}}}}));
        let plan = plan_for(
            &hub,
            &spoke,
            json!([{"strategy": "ScalarToObject", "scalarToObject": {"hubPath": "spec.replicaCount", "spokePath": "spec.replicas", "key": "count"}}]),
        );
        let h = hub_obj(json!({"replicaCount": 3}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"replicas": {"count": 3}})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }

    #[test]
    fn object_to_scalar_with_other_keys_is_lossy_and_uses_defaults() {
        let hub = obj_schema(json!({"network": {"type": "object", "properties": {
            "cidr": {"type": "string"}, "mode": {"type": "string"}}}}));
        let spoke = obj_schema(json!({"networkCIDR": {"type": "string"}}));
        let rule = json!({"strategy": "ObjectToScalar", "objectToScalar": {"hubPath": "spec.network", "spokePath": "spec.networkCIDR", "key": "cidr", "defaultsForOtherKeys": {"mode": "auto"}}});
        let c = compile_rules(&hub, &spoke, json!([rule.clone()]));
        let err = first_error(&c);
        assert!(err.contains("hub→spoke: hub spec.network has other properties (mode)"), "{err}");
        let mut acked = rule;
        acked["acknowledgeLossy"] = json!(true);
        acked["reason"] = json!("mode is always auto");
        let plan = plan_for(&hub, &spoke, json!([acked]));
        let s = plan
            .convert(&hub_obj(json!({"network": {"cidr": "10.0.0.0/8", "mode": "x"}})), SPOKE_AV)
            .unwrap();
        assert_eq!(s, spoke_obj(json!({"networkCIDR": "10.0.0.0/8"})));
        let h = plan.convert(&s, HUB_AV).unwrap();
        assert_eq!(h, hub_obj(json!({"network": {"cidr": "10.0.0.0/8", "mode": "auto"}})));
        let err = plan.convert(&hub_obj(json!({"network": "oops"})), SPOKE_AV).unwrap_err().to_string();
        assert!(
            err.contains("rule 0 (ObjectToScalar) spec.network: expected an object, found string"),
            "{err}"
        );
    }

    #[test]
    fn compile_errors() {
        let hub = obj_schema(
            json!({"n": {"type": "object", "properties": {"a": {"type": "string"}}}, "s": {"type": "string"}}),
        );
        let spoke = obj_schema(
            json!({"s": {"type": "string"}, "o": {"type": "object", "properties": {"a": {"type": "string"}}}}),
        );
        let r = |block: &str, h: &str, s: &str, key: &str, extra: serde_json::Value| {
            let mut params = json!({"hubPath": h, "spokePath": s, "key": key});
            if let Some(o) = extra.as_object() {
                for (k, v) in o {
                    params[k] = v.clone();
                }
            }
            let strategy = if block == "objectToScalar" { "ObjectToScalar" } else { "ScalarToObject" };
            json!([{ "strategy": strategy, block: params }])
        };
        let c = compile_rules(&hub, &spoke, r("objectToScalar", "spec.n", "spec.s", "b", json!({})));
        assert!(
            first_error(&c).contains("key \"b\" is not a property of hub spec.n (it has: a)"),
            "{}",
            first_error(&c)
        );
        let c = compile_rules(&hub, &spoke, r("objectToScalar", "spec.s", "spec.s", "a", json!({})));
        assert!(first_error(&c).contains("hub field must be an object with properties"));
        let c = compile_rules(&hub, &spoke, r("scalarToObject", "spec.n", "spec.o", "a", json!({})));
        assert!(first_error(&c).contains("hub field must be a scalar"));
        let c = compile_rules(
            &hub,
            &spoke,
            r("objectToScalar", "spec.n", "spec.s", "a", json!({"defaultsForOtherKeys": {"zz": 1}})),
        );
        assert!(first_error(&c).contains("defaultsForOtherKeys sets \"zz\""));
        let c = compile_rules(&hub, &spoke, r("objectToScalar", "spec.n", "spec.s", "a.b", json!({})));
        assert!(first_error(&c).contains("key must be one property name"));
    }
}
