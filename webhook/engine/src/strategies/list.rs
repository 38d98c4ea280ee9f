//! ListJoin (hub array of scalars ⇄ spoke delimited string) and ListSplit (hub string ⇄
//! spoke array). Always lossless: a list that could not be split back exactly (an item
//! holding the separator, or a single empty string) is refused at conversion time instead
//! of being silently changed.

use dco_api::rules::{ListParams, Params, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{ScalarType, Shape};
use crate::value::{self, JsonContainerTrait, JsonValueTrait, Path, Value};

pub struct ListJoin;
pub struct ListSplit;

impl StrategyImpl for ListJoin {
    fn strategy(&self) -> Strategy {
        Strategy::ListJoin
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ListJoin(p)) = cx.rule().params() else { return None };
        compile(cx, p, "listJoin", true)
    }
}

impl StrategyImpl for ListSplit {
    fn strategy(&self) -> Strategy {
        Strategy::ListSplit
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ListSplit(p)) = cx.rule().params() else { return None };
        compile(cx, p, "listSplit", false)
    }
}

fn compile(cx: &mut RuleCx<'_>, p: &ListParams, block: &str, hub_is_array: bool) -> Option<CompiledRule> {
    let hub = cx.hub_node(&format!("{block}.hubPath"), &p.hub_path);
    let spoke = cx.spoke_node(&format!("{block}.spokePath"), &p.spoke_path);
    if p.separator.is_empty() {
        cx.error(
            &[],
            format!("{block}.separator is empty; give the string that separates items, e.g. \",\""),
        );
    }
    let ((hp, hn), (sp, sn)) = (hub?, spoke?);
    let (array_side, string_side) = if hub_is_array { ("hub", "spoke") } else { ("spoke", "hub") };
    let (array_path, array_node, string_path, string_node) =
        if hub_is_array { (&hp, hn, &sp, sn) } else { (&sp, sn, &hp, hn) };
    let item_ty = match &array_node.shape {
        Shape::Array { items, .. } => items.root.scalar().map(|s| s.ty),
        _ => None,
    };
    if item_ty.is_none() {
        cx.error(
            &[&array_path.dotted()],
            format!("{array_side} field must be an array of scalars, but it is a {}", array_node.describe()),
        );
    }
    if string_node.scalar().map(|s| s.ty) != Some(ScalarType::String) {
        cx.error(
            &[&string_path.dotted()],
            format!("{string_side} field must be a string, but it is a {}", string_node.describe()),
        );
    }
    if cx.has_errors() {
        return None;
    }
    let op = Op {
        array: array_path.clone(),
        string: string_path.clone(),
        sep: p.separator.clone(),
        item: item_ty.unwrap_or(ScalarType::String),
        hub_is_array,
    };
    Some(CompiledRule::new(vec![hp.clone()], vec![sp.clone()], LOSSLESS, Box::new(op)))
}

#[derive(Debug)]
struct Op {
    array: Path,
    string: Path,
    sep: String,
    item: ScalarType,
    hub_is_array: bool,
}

impl Op {
    fn join(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.array, &self.string, |v| {
            let Some(arr) = v.as_array() else {
                return Err(OpError::new(
                    &self.array,
                    format!("expected an array, found {}", value::type_name(v)),
                ));
            };
            let mut parts = Vec::with_capacity(arr.len());
            for (i, item) in arr.iter().enumerate() {
                let text = if let Some(s) = item.as_str() {
                    s.to_string()
                } else if item.is_number() || item.is_boolean() {
                    sonic_rs::to_string(item).unwrap_or_default()
                } else {
                    return Err(OpError::new(
                        format!("{}[{i}]", self.array),
                        format!("expected a scalar item, found {}", value::type_name(item)),
                    ));
                };
                if text.contains(&self.sep) {
                    return Err(OpError::new(
                        format!("{}[{i}]", self.array),
                        format!(
                            "{text:?} contains the separator {:?}, so the joined list could not be split back",
                            self.sep
                        ),
                    ));
                }
                parts.push(text);
            }
            if parts.len() == 1 && parts[0].is_empty() {
                return Err(OpError::new(
                    &self.array,
                    "a list of one empty string joins to \"\", which splits back to an empty list",
                ));
            }
            Ok(Some(Value::from(parts.join(&self.sep).as_str())))
        })
    }

    fn split(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.string, &self.array, |v| {
            let Some(s) = v.as_str() else {
                return Err(OpError::new(
                    &self.string,
                    format!("expected a string, found {}", value::type_name(v)),
                ));
            };
            let mut out = sonic_rs::Array::new();
            if !s.is_empty() {
                for part in s.split(self.sep.as_str()) {
                    out.push(self.parse_item(part)?);
                }
            }
            Ok(Some(Value::from(out)))
        })
    }

    fn parse_item(&self, part: &str) -> Result<Value, OpError> {
        let bad = |what: &str| OpError::new(&self.string, format!("item {part:?} is not {what}"));
        Ok(match self.item {
            ScalarType::String => Value::from(part),
            ScalarType::Integer => {
                if let Ok(i) = part.parse::<i64>() {
                    Value::from(i)
                } else {
                    Value::from(part.parse::<u64>().map_err(|_| bad("an integer"))?)
                }
            }
            ScalarType::Number => sonic_rs::from_str::<Value>(part)
                .ok()
                .filter(|v| v.is_number())
                .ok_or_else(|| bad("a number"))?,
            ScalarType::Boolean => Value::from(part.parse::<bool>().map_err(|_| bad("true or false"))?),
            ScalarType::IntOrString => match part.parse::<i64>() {
                Ok(i) if i.to_string() == part => Value::from(i),
                _ => Value::from(part),
            },
        })
    }
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.hub_is_array { self.join(src, dst) } else { self.split(src, dst) }
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.hub_is_array { self.split(src, dst) } else { self.join(src, dst) }
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn arr(items: &str) -> serde_json::Value {
        obj_schema(json!({"dns": {"type": "array", "items": {"type": items}}}))
    }

    fn csv() -> serde_json::Value {
        obj_schema(json!({"dnsCSV": {"type": "string"}}))
    }

    #[test]
    fn join_and_split_round_trip() {
        let plan = plan_for(
            &arr("string"),
            &csv(),
            json!([{"strategy": "ListJoin", "listJoin": {"hubPath": "spec.dns", "spokePath": "spec.dnsCSV", "separator": ","}}]),
        );
        for list in [json!(["8.8.8.8", "1.1.1.1"]), json!([]), json!(["a", ""])] {
            let h = hub_obj(json!({"dns": list}));
            let s = plan.convert(&h, SPOKE_AV).unwrap();
            assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h, "{s}");
        }
        assert_eq!(
            plan.convert(&hub_obj(json!({"dns": ["a", "b"]})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"dnsCSV": "a,b"}))
        );
        let err = plan.convert(&hub_obj(json!({"dns": ["a,b"]})), SPOKE_AV).unwrap_err().to_string();
        assert!(err.contains("spec.dns[0]: \"a,b\" contains the separator"), "{err}");
        assert!(plan.convert(&hub_obj(json!({"dns": [""]})), SPOKE_AV).is_err());
    }

    #[test]
    fn split_typed_items() {
        let plan = plan_for(
            &csv(),
            &arr("integer"),
            json!([{"strategy": "ListSplit", "listSplit": {"hubPath": "spec.dnsCSV", "spokePath": "spec.dns", "separator": ";"}}]),
        );
        let s = plan.convert(&hub_obj(json!({"dnsCSV": "1;-2;3"})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"dns": [1, -2, 3]})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"dnsCSV": "1;-2;3"})));
        let err = plan.convert(&hub_obj(json!({"dnsCSV": "1;x"})), SPOKE_AV).unwrap_err().to_string();
        assert!(err.contains("item \"x\" is not an integer"), "{err}");
    }

    #[test]
    fn compile_errors() {
        let r = |sep: &str| json!([{"strategy": "ListJoin", "listJoin": {"hubPath": "spec.dns", "spokePath": "spec.dnsCSV", "separator": sep}}]);
        assert!(first_error(&compile_rules(&arr("string"), &csv(), r(""))).contains("separator is empty"));
        let objs = obj_schema(
            json!({"dns": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}}}),
        );
        assert!(
            first_error(&compile_rules(&objs, &csv(), r(",")))
                .contains("hub field must be an array of scalars")
        );
        let not_string = obj_schema(json!({"dnsCSV": {"type": "integer"}}));
        assert!(
            first_error(&compile_rules(&arr("string"), &not_string, r(",")))
                .contains("spoke field must be a string")
        );
    }
}
