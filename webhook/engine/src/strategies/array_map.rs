//! ArrayToMapByKey (hub array of objects ⇄ spoke map keyed by `keyField`) and
//! MapToArrayByKey (the mirror). The key field becomes the map key and is not repeated in
//! the value. A duplicate key is a conversion error; map→array is lossy because the array
//! comes back sorted by key.

use dco_api::rules::{KeyedParams, Params, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{FlatSchema, Resolved, ScalarType, Shape, node_fits};
use crate::value::{self, JsonContainerTrait, JsonValueTrait, Path, Value};

pub struct ArrayToMapByKey;
pub struct MapToArrayByKey;

impl StrategyImpl for ArrayToMapByKey {
    fn strategy(&self) -> Strategy {
        Strategy::ArrayToMapByKey
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ArrayToMapByKey(p)) = cx.rule().params() else { return None };
        compile(cx, p, "arrayToMapByKey", true)
    }
}

impl StrategyImpl for MapToArrayByKey {
    fn strategy(&self) -> Strategy {
        Strategy::MapToArrayByKey
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::MapToArrayByKey(p)) = cx.rule().params() else { return None };
        compile(cx, p, "mapToArrayByKey", false)
    }
}

fn compile(cx: &mut RuleCx<'_>, p: &KeyedParams, block: &str, hub_is_array: bool) -> Option<CompiledRule> {
    let hub = cx.hub_node(&format!("{block}.hubPath"), &p.hub_path);
    let spoke = cx.spoke_node(&format!("{block}.spokePath"), &p.spoke_path);
    let ((hp, hn), (sp, sn)) = (hub?, spoke?);
    let (array_side, map_side) = if hub_is_array { ("hub", "spoke") } else { ("spoke", "hub") };
    let (array_path, array_node, map_path, map_node) =
        if hub_is_array { (&hp, hn, &sp, sn) } else { (&sp, sn, &hp, hn) };
    let items: Option<&FlatSchema> = match &array_node.shape {
        Shape::Array { items, .. } if matches!(items.root.shape, Shape::Object { .. }) => Some(items),
        _ => {
            cx.error(
                &[&array_path.dotted()],
                format!(
                    "{array_side} field must be an array of objects, but it is a {}",
                    array_node.describe()
                ),
            );
            None
        }
    };
    let values: Option<&FlatSchema> = match &map_node.shape {
        Shape::Map { values } => Some(values),
        _ => {
            cx.error(
                &[&map_path.dotted()],
                format!(
                    "{map_side} field must be a map (additionalProperties), but it is a {}",
                    map_node.describe()
                ),
            );
            None
        }
    };
    let (items, values) = (items?, values?);
    if p.key_field.is_empty() || p.key_field.contains('.') {
        cx.error(&[], format!("{block}.keyField must be one property name, got {:?}", p.key_field));
        return None;
    }
    match items.get(&p.key_field).and_then(|n| n.scalar()) {
        Some(s) if s.ty == ScalarType::String => {}
        _ => {
            cx.error(
                &[&array_path.dotted()],
                format!(
                    "{block}.keyField {:?} must be a string property of the {array_side} items (they have: {})",
                    p.key_field,
                    items.children("").join(", ")
                ),
            );
            return None;
        }
    }
    let mut c = CompiledRule::new(
        vec![hp.clone()],
        vec![sp.clone()],
        LOSSLESS,
        Box::new(Op {
            array: array_path.clone(),
            map: map_path.clone(),
            key: p.key_field.clone(),
            hub_is_array,
        }),
    );
    // Item leaves other than the key must fit the map values, and back.
    let key_prefix = format!("{}.", p.key_field);
    let to_map = items
        .leaves()
        .filter(|(l, _)| *l != p.key_field && !l.starts_with(&key_prefix))
        .try_for_each(|(l, n)| fits_at(values, l, n).map_err(|e| format!("{l}: {e}")));
    let to_array =
        values.leaves().try_for_each(|(l, n)| fits_at(items, l, n).map_err(|e| format!("{l}: {e}")));
    if let Err(e) = to_map {
        c = c.lossy(hub_is_array, format!("items do not fit the {map_side} map values ({e})"));
    }
    if let Err(e) = to_array {
        c = c.lossy(!hub_is_array, format!("map values do not fit the {array_side} items ({e})"));
    }
    c = c.lossy(!hub_is_array, "the array is rebuilt sorted by key, so the original order is not kept");
    Some(c)
}

fn fits_at(fs: &FlatSchema, path: &str, n: &crate::schema::Node) -> Result<(), String> {
    match fs.resolve(path) {
        Resolved::Node(m) => node_fits(n, m),
        Resolved::InsideLeaf { node, .. } if node.accepts_anything() => Ok(()),
        _ if fs.root.accepts_anything() => Ok(()),
        _ => Err("no counterpart".into()),
    }
}

#[derive(Debug)]
struct Op {
    array: Path,
    map: Path,
    key: String,
    hub_is_array: bool,
}

impl Op {
    fn to_map(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.array, &self.map, |v| {
            let Some(arr) = v.as_array() else {
                return Err(OpError::new(
                    &self.array,
                    format!("expected an array, found {}", value::type_name(v)),
                ));
            };
            let mut m = sonic_rs::Object::with_capacity(arr.len());
            for (i, item) in arr.iter().enumerate() {
                let at = || format!("{}[{i}]", self.array);
                let Some(o) = item.as_object() else {
                    return Err(OpError::new(
                        at(),
                        format!("expected an object item, found {}", value::type_name(item)),
                    ));
                };
                let Some(key) = o.get(&self.key).and_then(|k| k.as_str()) else {
                    return Err(OpError::new(
                        at(),
                        format!("item has no string {:?}, the map key", self.key),
                    ));
                };
                if m.contains_key(&key) {
                    return Err(OpError::new(
                        at(),
                        format!("duplicate key {key:?}: {} must be unique", self.key),
                    ));
                }
                let mut rest = o.clone();
                rest.remove(&self.key);
                m.insert(key, Value::from(rest));
            }
            Ok(Some(Value::from(m)))
        })
    }

    fn to_array(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.map, &self.array, |v| {
            let Some(m) = v.as_object() else {
                return Err(OpError::new(
                    &self.map,
                    format!("expected a map, found {}", value::type_name(v)),
                ));
            };
            let mut entries: Vec<(&str, &Value)> = m.iter().collect();
            entries.sort_by(|a, b| a.0.cmp(b.0));
            let mut out = sonic_rs::Array::with_capacity(entries.len());
            for (k, val) in entries {
                let Some(o) = val.as_object() else {
                    return Err(OpError::new(
                        format!("{}.{k}", self.map),
                        format!("expected an object value, found {}", value::type_name(val)),
                    ));
                };
                let mut item = o.clone();
                item.insert(&self.key, Value::from(k));
                out.push(Value::from(item));
            }
            Ok(Some(Value::from(out)))
        })
    }
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.hub_is_array { self.to_map(src, dst) } else { self.to_array(src, dst) }
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.hub_is_array { self.to_array(src, dst) } else { self.to_map(src, dst) }
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn array() -> serde_json::Value {
        obj_schema(json!({"endpoints": {"type": "array", "items": {"type": "object", "properties": {
            "name": {"type": "string"}, "url": {"type": "string"}}}}}))
    }

    fn map() -> serde_json::Value {
        obj_schema(
            json!({"endpoints": {"type": "object", "additionalProperties": {"type": "object", "properties": {
            "url": {"type": "string"}}}}}),
        )
    }

    fn rule(strategy: &str, block: &str, ack: bool) -> serde_json::Value {
        let mut r = json!({"strategy": strategy, block: {"hubPath": "spec.endpoints", "spokePath": "spec.endpoints", "keyField": "name"}});
        if ack {
            r["acknowledgeLossy"] = json!(true);
            r["reason"] = json!("order does not matter");
        }
        json!([r])
    }

    #[test]
    fn array_to_map_and_back_sorted() {
        let err =
            first_error(&compile_rules(&array(), &map(), rule("ArrayToMapByKey", "arrayToMapByKey", false)));
        assert!(err.contains("spoke→hub: the array is rebuilt sorted by key"), "{err}");
        let plan = plan_for(&array(), &map(), rule("ArrayToMapByKey", "arrayToMapByKey", true));
        let h = hub_obj(json!({"endpoints": [{"name": "web", "url": "w"}, {"name": "api", "url": "a"}]}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"endpoints": {"web": {"url": "w"}, "api": {"url": "a"}}})));
        let back = plan.convert(&s, HUB_AV).unwrap();
        assert_eq!(
            back,
            hub_obj(json!({"endpoints": [{"name": "api", "url": "a"}, {"name": "web", "url": "w"}]}))
        );
        let dup = hub_obj(json!({"endpoints": [{"name": "a"}, {"name": "a"}]}));
        let err = plan.convert(&dup, SPOKE_AV).unwrap_err().to_string();
        assert!(err.contains("spec.endpoints[1]: duplicate key \"a\""), "{err}");
        let nokey = hub_obj(json!({"endpoints": [{"url": "x"}]}));
        assert!(
            plan.convert(&nokey, SPOKE_AV).unwrap_err().to_string().contains("item has no string \"name\"")
        );
    }

    #[test]
    fn map_to_array_lossy_toward_the_spoke() {
        let err =
            first_error(&compile_rules(&map(), &array(), rule("MapToArrayByKey", "mapToArrayByKey", false)));
        assert!(err.contains("hub→spoke: the array is rebuilt sorted by key"), "{err}");
        let plan = plan_for(&map(), &array(), rule("MapToArrayByKey", "mapToArrayByKey", true));
        let h = hub_obj(json!({"endpoints": {"gold": {"url": "g"}, "silver": {"url": "s"}}}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(
            s,
            spoke_obj(json!({"endpoints": [{"name": "gold", "url": "g"}, {"name": "silver", "url": "s"}]}))
        );
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }

    #[test]
    fn compile_errors() {
        let bad_key = json!([{"strategy": "ArrayToMapByKey", "arrayToMapByKey": {"hubPath": "spec.endpoints", "spokePath": "spec.endpoints", "keyField": "id"}}]);
        assert!(
            first_error(&compile_rules(&array(), &map(), bad_key)).contains(
                "keyField \"id\" must be a string property of the hub items (they have: name, url)"
            )
        );
        assert!(
            first_error(&compile_rules(&map(), &map(), rule("ArrayToMapByKey", "arrayToMapByKey", true)))
                .contains("hub field must be an array of objects")
        );
        assert!(
            first_error(&compile_rules(&array(), &array(), rule("ArrayToMapByKey", "arrayToMapByKey", true)))
                .contains("spoke field must be a map")
        );
    }
}
