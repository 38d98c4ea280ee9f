//! ForEach: item-relative rules applied to every element of a hub array and the spoke array
//! at the same position. Item scopes get their own claims and leftover scan; ForEach may
//! nest once (depth 2). The output array has the input's length and order.

use dco_api::rules::{Params, Strategy};

use super::{CompiledRule, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::convert::Direction;
use crate::plan::ScopePlan;
use crate::schema::Shape;
use crate::value::{self, JsonContainerTrait, JsonValueTrait, Path, Value};

pub struct ForEach;

impl StrategyImpl for ForEach {
    fn strategy(&self) -> Strategy {
        Strategy::ForEach
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ForEach(p)) = cx.rule().params() else { return None };
        let hub = cx.hub_node("forEach.hubItemsPath", &p.hub_items_path);
        let spoke = cx.spoke_node("forEach.spokeItemsPath", &p.spoke_items_path);
        let ((hp, hn), (sp, sn)) = (hub?, spoke?);
        let mut items = Vec::new();
        for (side, path, node) in [("hub", &hp, hn), ("spoke", &sp, sn)] {
            match &node.shape {
                Shape::Array { items: it, max_items } if matches!(it.root.shape, Shape::Object { .. }) => {
                    items.push((it.as_ref(), *max_items))
                }
                _ => cx.error(
                    &[&path.dotted()],
                    format!("{side} field must be an array of objects, but it is a {}", node.describe()),
                ),
            }
        }
        let [(hub_items, hub_max), (spoke_items, spoke_max)] = items[..] else { return None };
        if p.rules.is_empty() {
            cx.warn(&[], "forEach.rules is empty: items are only identity-copied; a FieldRename of the array does the same");
        }
        let nested = cx.compile_nested(&p.rules, hub_items, spoke_items)?;
        let mut c = CompiledRule::new(
            vec![hp.clone()],
            vec![sp.clone()],
            nested.verdict,
            Box::new(Op { hub: hp.clone(), spoke: sp.clone(), scope: nested.plan }),
        );
        if !nested.verdict.hub_to_spoke {
            c.lossy_because.push("hub→spoke: a nested rule or uncovered item field is lossy".into());
        }
        if !nested.verdict.spoke_to_hub {
            c.lossy_because.push("spoke→hub: a nested rule or uncovered item field is lossy".into());
        }
        if let Some(m) = spoke_max
            && hub_max.is_none_or(|h| h > m)
        {
            c = c.lossy(true, format!("spoke {sp} allows at most {m} items, the hub more"));
        }
        if let Some(m) = hub_max
            && spoke_max.is_none_or(|s| s > m)
        {
            c = c.lossy(false, format!("hub {hp} allows at most {m} items, the spoke more"));
        }
        Some(c)
    }
}

#[derive(Debug)]
struct Op {
    hub: Path,
    spoke: Path,
    scope: ScopePlan,
}

impl Op {
    fn run(
        &self,
        dir: Direction,
        src: &Value,
        dst: &mut Value,
        from: &Path,
        to: &Path,
    ) -> Result<(), OpError> {
        let Some(v) = value::get(src, from.segments()) else { return Ok(()) };
        let Some(arr) = v.as_array() else {
            return Err(OpError::new(from, format!("expected an array, found {}", value::type_name(v))));
        };
        let mut out = sonic_rs::Array::with_capacity(arr.len());
        for (i, item) in arr.iter().enumerate() {
            crate::limits::check_item(i)
                .map_err(|why| OpError::new(format!("{from}[{i}]"), format!("conversion stopped: {why}")))?;
            if !item.is_object() {
                return Err(OpError::new(
                    format!("{from}[{i}]"),
                    format!("expected an object item, found {}", value::type_name(item)),
                ));
            }
            let mut d = item.clone();
            self.scope.run(dir, item, &mut d).map_err(|mut e| {
                e.path = if e.path.is_empty() {
                    format!("{from}[{i}]")
                } else {
                    format!("{from}[{i}].{}", e.path)
                };
                e
            })?;
            out.push(d);
        }
        value::set(dst, to.segments(), Value::from(out)).map_err(|e| OpError::new(to, e.to_string()))
    }
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.run(Direction::HubToSpoke, src, dst, &self.hub, &self.spoke)
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.run(Direction::SpokeToHub, src, dst, &self.spoke, &self.hub)
    }

    fn stream(&self) -> Option<super::Stream<'_>> {
        Some(super::Stream::Items { hub: &self.hub, spoke: &self.spoke, scope: &self.scope })
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn arr(props: serde_json::Value) -> serde_json::Value {
        json!({"type": "array", "items": {"type": "object", "properties": props}})
    }

    fn rename(h: &str, s: &str) -> serde_json::Value {
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": h, "spokePath": s}})
    }

    #[test]
    fn renames_inside_items_and_nested_items() {
        let hub = obj_schema(
            json!({"volumes": arr(json!({"sizeGB": {"type": "string"}, "label": {"type": "string"},
            "disks": arr(json!({"sizeGB": {"type": "integer"}, "kind": {"type": "string"}}))}))}),
        );
        let spoke =
            obj_schema(json!({"vols": arr(json!({"size": {"type": "string"}, "label": {"type": "string"},
            "disks": arr(json!({"size": {"type": "integer"}, "kind": {"type": "string"}}))}))}));
        let plan = plan_for(
            &hub,
            &spoke,
            json!([{"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.volumes", "spokeItemsPath": "spec.vols", "rules": [
                rename("sizeGB", "size"),
                {"strategy": "ForEach", "forEach": {"hubItemsPath": "disks", "spokeItemsPath": "disks", "rules": [rename("sizeGB", "size")]}}
            ]}}]),
        );
        let h = hub_obj(json!({"volumes": [
            {"sizeGB": "100", "label": "data", "disks": [{"sizeGB": 1, "kind": "ssd"}, {"sizeGB": 2}]},
            {"label": "logs"}]}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(
            s,
            spoke_obj(json!({"vols": [
            {"size": "100", "label": "data", "disks": [{"size": 1, "kind": "ssd"}, {"size": 2}]},
            {"label": "logs"}]}))
        );
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        let bad = hub_obj(json!({"volumes": [{"label": "x"}, {"disks": [{"sizeGB": 1}, "oops"]}]}));
        let err = plan.convert(&bad, SPOKE_AV).unwrap_err().to_string();
        assert!(
            err.contains(
                "rule 0.1 (ForEach) spec.volumes[1].disks[1]: expected an object item, found string"
            ),
            "{err}"
        );
    }

    #[test]
    fn nested_lossy_rules_and_item_leftovers_need_acknowledgement() {
        let hub =
            obj_schema(json!({"items": arr(json!({"a": {"type": "string"}, "b": {"type": "string"}}))}));
        let spoke = obj_schema(json!({"items": arr(json!({"a": {"type": "string"}}))}));
        let c = compile_rules(
            &hub,
            &spoke,
            json!([{"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.items", "spokeItemsPath": "spec.items", "rules": []}}]),
        );
        let err = all_errors(&c);
        assert!(err.contains("spoke v1, rule 0 b: hub field is not covered"), "{err}");
    }

    #[test]
    fn depth_three_is_refused() {
        let level = |inner: serde_json::Value| json!({"x": arr(inner)});
        let schema = obj_schema(level(level(level(json!({"v": {"type": "string"}})))));
        let fe = |path: &str, rules: serde_json::Value| json!({"strategy": "ForEach", "forEach": {"hubItemsPath": path, "spokeItemsPath": path, "rules": rules}});
        let rules = json!([fe("spec.x", json!([fe("x", json!([fe("x", json!([]))]))]))]);
        let err = first_error(&compile_rules(&schema, &schema, rules));
        assert!(err.contains("rule 0.0.0 (ForEach): nested rules go deeper than 2 levels"), "{err}");
    }

    #[test]
    fn compile_errors() {
        let hub = obj_schema(
            json!({"items": arr(json!({"a": {"type": "string"}})), "tags": {"type": "array", "items": {"type": "string"}}}),
        );
        let c = compile_rules(
            &hub,
            &hub,
            json!([{"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.tags", "spokeItemsPath": "spec.tags", "rules": []}}]),
        );
        assert!(
            first_error(&c).contains("hub field must be an array of objects, but it is a array of strings"),
            "{}",
            first_error(&c)
        );
        let c = compile_rules(
            &hub,
            &hub,
            json!([{"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.items", "spokeItemsPath": "spec.items", "rules": [rename("zz", "a")]}}]),
        );
        assert!(
            first_error(&c).contains(
                "rule 0.0 (FieldRename) zz: fieldRename.hubPath: not in the schema of hub version v2 items"
            ),
            "{}",
            first_error(&c)
        );
        let c = compile_rules(
            &hub,
            &hub,
            json!([{"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.items", "spokeItemsPath": "spec.items", "rules": [
            {"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "a", "key": "k", "restoreOnReverse": true}}]}}]),
        );
        assert!(first_error(&c).contains("cannot run inside ForEach"), "{}", first_error(&c));
    }
}
