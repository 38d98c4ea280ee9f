//! MapKeyRename: a map keeps its shape but some keys are spelled differently; every other key
//! passes through. `renames` (hub key → spoke key) must be injective; a key that would land
//! on a renamed key's name is a conversion error rather than an overwrite.

use std::collections::BTreeMap;

use dco_api::rules::{Params, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{Shape, schema_fits};
use crate::value::{self, JsonContainerTrait, Path, Value};

pub struct MapKeyRename;

impl StrategyImpl for MapKeyRename {
    fn strategy(&self) -> Strategy {
        Strategy::MapKeyRename
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::MapKeyRename(p)) = cx.rule().params() else { return None };
        let hub = cx.hub_node("mapKeyRename.hubPath", &p.hub_path);
        let spoke = cx.spoke_node("mapKeyRename.spokePath", &p.spoke_path);
        let ((hp, hn), (sp, sn)) = (hub?, spoke?);
        let mut values = Vec::new();
        for (side, path, node) in [("hub", &hp, hn), ("spoke", &sp, sn)] {
            match &node.shape {
                Shape::Map { values: v } => values.push(Some(v.as_ref())),
                _ if node.accepts_anything() => values.push(None),
                _ => cx.error(
                    &[&path.dotted()],
                    format!(
                        "{side} field must be a map (additionalProperties), but it is a {}",
                        node.describe()
                    ),
                ),
            }
        }
        if p.renames.is_empty() {
            cx.warn(&[], "mapKeyRename.renames is empty: the map is copied unchanged");
        }
        let mut reverse: BTreeMap<&str, &str> = BTreeMap::new();
        for (h, s) in &p.renames {
            if let Some(prev) = reverse.insert(s.as_str(), h.as_str()) {
                cx.error(
                    &[],
                    format!("hub keys {prev:?} and {h:?} both rename to {s:?}; renames must be one-to-one"),
                );
            }
        }
        if cx.has_errors() {
            return None;
        }
        let mut c = CompiledRule::new(
            vec![hp.clone()],
            vec![sp.clone()],
            LOSSLESS,
            Box::new(Op {
                hub: hp.clone(),
                spoke: sp.clone(),
                h2s: p.renames.iter().map(|(a, b)| (a.clone(), b.clone())).collect(),
                s2h: p.renames.iter().map(|(a, b)| (b.clone(), a.clone())).collect(),
            }),
        );
        if let [Some(hv), Some(sv)] = values[..] {
            if let Err(e) = schema_fits(hv, sv) {
                c = c.lossy(true, format!("hub map values do not fit the spoke's: {e}"));
            }
            if let Err(e) = schema_fits(sv, hv) {
                c = c.lossy(false, format!("spoke map values do not fit the hub's: {e}"));
            }
        }
        Some(c)
    }
}

#[derive(Debug)]
struct Op {
    hub: Path,
    spoke: Path,
    h2s: BTreeMap<String, String>,
    s2h: BTreeMap<String, String>,
}

fn rename(
    src: &Value,
    dst: &mut Value,
    from: &Path,
    to: &Path,
    map: &BTreeMap<String, String>,
    inverse: &BTreeMap<String, String>,
) -> Result<(), OpError> {
    super::move_value(src, dst, from, to, |v| {
        let Some(m) = v.as_object() else {
            return Err(OpError::new(from, format!("expected a map, found {}", value::type_name(v))));
        };
        let mut out = sonic_rs::Object::with_capacity(m.len());
        for (k, x) in m.iter() {
            let new = match map.get(k) {
                Some(n) => n.as_str(),
                // An unrenamed key spelled like a rename target would collide (and come back
                // under another name).
                None if inverse.contains_key(k) => {
                    return Err(OpError::new(
                        from,
                        format!(
                            "key {k:?} is unrenamed but collides with a renamed key; rename or remove it"
                        ),
                    ));
                }
                None => k,
            };
            out.insert(new, x.clone());
        }
        Ok(Some(Value::from(out)))
    })
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        rename(src, dst, &self.hub, &self.spoke, &self.h2s, &self.s2h)
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        rename(src, dst, &self.spoke, &self.hub, &self.s2h, &self.h2s)
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn labels() -> serde_json::Value {
        obj_schema(json!({"extraLabels": {"type": "object", "additionalProperties": {"type": "string"}}}))
    }

    #[test]
    fn renames_known_keys_and_passes_others() {
        let plan = plan_for(
            &labels(),
            &labels(),
            json!([{"strategy": "MapKeyRename", "mapKeyRename": {"hubPath": "spec.extraLabels",
            "spokePath": "spec.extraLabels", "renames": {"app": "application"}}}]),
        );
        let h = hub_obj(json!({"extraLabels": {"app": "widget", "region": "us"}}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"extraLabels": {"application": "widget", "region": "us"}})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        let err = plan
            .convert(&hub_obj(json!({"extraLabels": {"application": "x"}})), SPOKE_AV)
            .unwrap_err()
            .to_string();
        assert!(err.contains("key \"application\" is unrenamed but collides"), "{err}");
    }

    #[test]
    fn compile_errors() {
        let r = |renames: serde_json::Value| json!([{"strategy": "MapKeyRename", "mapKeyRename": {"hubPath": "spec.extraLabels", "spokePath": "spec.extraLabels", "renames": renames}}]);
        assert!(
            first_error(&compile_rules(&labels(), &labels(), r(json!({"a": "x", "b": "x"}))))
                .contains("renames must be one-to-one")
        );
        let scalar = obj_schema(json!({"extraLabels": {"type": "string"}}));
        assert!(
            first_error(&compile_rules(&scalar, &labels(), r(json!({})))).contains("hub field must be a map")
        );
        let ints = obj_schema(
            json!({"extraLabels": {"type": "object", "additionalProperties": {"type": "integer"}}}),
        );
        assert!(
            first_error(&compile_rules(&labels(), &ints, r(json!({"a": "b"})))).contains("rule is lossy")
        );
    }
}
