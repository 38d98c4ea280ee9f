//! Quantity: a Kubernetes quantity string (`"500m"`, `"1.5Gi"`) on one side, an integer
//! milli-value (`500`, `1610612736000`) on the other. Which side is which comes from the
//! schemas.
//!
//! Verdict (rules.md): integer→string is lossy — the integer is written back as the canonical
//! quantity spelling, so `"0.5"` returns as `"500m"`. String→integer is exact: a quantity finer
//! than a milli-unit (`"1n"`) is a conversion error, never silently rounded.

use dco_api::rules::{Params, PathPair, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl, move_value};
use crate::quantity::Quantity;
use crate::schema::{Node, ScalarType};
use crate::value::{JsonValueTrait, Path, Value};

pub struct QuantityStrategy;

/// Which side holds the text form, for strategies that pair a string with an integer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum TextSide {
    Hub,
    Spoke,
}

/// Resolves a string ⇄ integer pair of paths; reports what is wrong otherwise.
pub(crate) fn string_integer_pair(
    cx: &mut RuleCx<'_>,
    block: &str,
    p: &PathPair,
    what: &str,
) -> Option<(Path, Path, TextSide)> {
    let hub = cx.hub_node(&format!("{block}.hubPath"), &p.hub_path);
    let spoke = cx.spoke_node(&format!("{block}.spokePath"), &p.spoke_path);
    let ((hp, hn), (sp, sn)) = (hub?, spoke?);
    let is_text =
        |n: &Node| n.scalar().is_some_and(|s| matches!(s.ty, ScalarType::String | ScalarType::IntOrString));
    let is_int = |n: &Node| n.scalar().is_some_and(|s| s.ty == ScalarType::Integer);
    let side = match (is_text(hn), is_int(hn), is_text(sn), is_int(sn)) {
        (true, _, _, true) => TextSide::Hub,
        (_, true, true, _) => TextSide::Spoke,
        _ => {
            cx.error(
                &[&p.hub_path, &p.spoke_path],
                format!(
                    "{} converts between {what} string on one side and an integer on the other, but the hub field is a {} and the spoke field a {}",
                    cx.rule().strategy,
                    hn.describe(),
                    sn.describe()
                ),
            );
            return None;
        }
    };
    Some((hp, sp, side))
}

/// An integer from a JSON number (whole floats accepted).
pub(crate) fn whole_number(v: &Value) -> Option<i64> {
    if let Some(i) = v.as_i64() {
        return Some(i);
    }
    let f = v.as_f64()?;
    (f.fract() == 0.0 && (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&f))
        .then_some(f as i64)
}

impl StrategyImpl for QuantityStrategy {
    fn strategy(&self) -> Strategy {
        Strategy::Quantity
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::Quantity(p)) = cx.rule().params() else { return None };
        let (hub, spoke, text) = string_integer_pair(cx, "quantity", p, "a quantity")?;
        let op = QuantityOp { hub: hub.clone(), spoke: spoke.clone(), text };
        let compiled = CompiledRule::new(vec![hub], vec![spoke], LOSSLESS, Box::new(op));
        // The direction that writes the string writes the canonical spelling.
        Some(compiled.lossy(
            text == TextSide::Spoke,
            "integer milli-values are written as the canonical quantity string, so another spelling of the same amount (\"0.5\" for \"500m\") does not come back",
        ))
    }
}

#[derive(Debug)]
struct QuantityOp {
    hub: Path,
    spoke: Path,
    text: TextSide,
}

fn to_milli(v: &Value, path: &Path) -> Result<Option<Value>, OpError> {
    if v.is_null() {
        return Ok(Some(v.clone()));
    }
    let q = if let Some(s) = v.as_str() {
        Quantity::parse(s).map_err(|e| OpError::new(path, e.to_string()))?
    } else if let Some(i) = v.as_i64() {
        // An int-or-string field may hold a bare number.
        Quantity::parse(&i.to_string()).map_err(|e| OpError::new(path, e.to_string()))?
    } else {
        return Err(OpError::new(
            path,
            format!("expected a quantity string, found a {}", crate::value::type_name(v)),
        ));
    };
    let milli = q.exact_milli_value().map_err(|e| OpError::new(path, e.to_string()))?;
    Ok(Some(Value::from(milli)))
}

fn to_text(v: &Value, path: &Path) -> Result<Option<Value>, OpError> {
    if v.is_null() {
        return Ok(Some(v.clone()));
    }
    let milli = whole_number(v).ok_or_else(|| {
        OpError::new(path, format!("expected an integer milli-value, found {}", crate::value::preview(v)))
    })?;
    Ok(Some(Value::from(Quantity::from_milli(milli).to_string().as_str())))
}

impl RuleOp for QuantityOp {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let text = self.text;
        move_value(src, dst, &self.hub, &self.spoke, |v| match text {
            TextSide::Hub => to_milli(v, &self.hub),
            TextSide::Spoke => to_text(v, &self.hub),
        })
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let text = self.text;
        move_value(src, dst, &self.spoke, &self.hub, |v| match text {
            TextSide::Hub => to_text(v, &self.spoke),
            TextSide::Spoke => to_milli(v, &self.spoke),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn rule(ack: bool) -> serde_json::Value {
        let mut r = json!({"strategy": "Quantity", "quantity": {"hubPath": "spec.cpuRequest", "spokePath": "spec.cpuMillis"}});
        if ack {
            r["acknowledgeLossy"] = json!(true);
            r["reason"] = json!("canonical form");
        }
        r
    }

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(json!({"cpuRequest": {"type": "string"}})),
            obj_schema(json!({"cpuMillis": {"type": "integer"}})),
        )
    }

    #[test]
    fn string_hub_integer_spoke_both_directions() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(true)]));
        for (text, milli) in [("500m", 500), ("2", 2000), ("1500m", 1500), ("0", 0), ("-250m", -250)] {
            let s = plan.convert(&hub_obj(json!({"cpuRequest": text})), SPOKE_AV).unwrap();
            assert_eq!(s, spoke_obj(json!({"cpuMillis": milli})), "{text}");
            assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"cpuRequest": text})), "{text}");
        }
        // Another spelling comes back canonical: the acknowledged loss.
        let s = plan.convert(&hub_obj(json!({"cpuRequest": "0.5"})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"cpuMillis": 500})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"cpuRequest": "500m"})));
        let s = plan.convert(&hub_obj(json!({"cpuRequest": "1Ki"})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"cpuMillis": 1_024_000})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"cpuRequest": "1024"})));
        assert_eq!(
            plan.convert(&spoke_obj(json!({"cpuMillis": 1_610_612_736_000_i64})), HUB_AV).unwrap(),
            hub_obj(json!({"cpuRequest": "1610612736"}))
        );
    }

    #[test]
    fn runtime_errors_name_the_path() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(true)]));
        for (bad, needle) in [
            (json!("lots"), "is not a quantity"),
            (json!("1n"), "finer than a milli-unit"),
            (json!("1e30"), "does not fit"),
            (json!("5K"), "unknown suffix"),
            (json!(true), "expected a quantity string"),
        ] {
            let err = plan.convert(&hub_obj(json!({"cpuRequest": bad})), SPOKE_AV).unwrap_err().to_string();
            assert!(
                err.contains("spec.cpuRequest") && err.contains(needle) && err.contains("(Quantity)"),
                "{err}"
            );
        }
        let err = plan.convert(&spoke_obj(json!({"cpuMillis": 1.5})), HUB_AV).unwrap_err().to_string();
        assert!(err.contains("expected an integer milli-value"), "{err}");
    }

    #[test]
    fn verdict_needs_acknowledgement_on_the_integer_to_string_direction() {
        let (hub, spoke) = schemas();
        let c = compile_rules(&hub, &spoke, json!([rule(false)]));
        let err = first_error(&c);
        assert!(err.contains("rule is lossy (spoke→hub"), "{err}");
        // Reversed sides: the hub holds the integer.
        let c = compile_rules(
            &obj_schema(json!({"m": {"type": "integer"}})),
            &obj_schema(json!({"q": {"type": "string"}})),
            json!([{"strategy": "Quantity", "quantity": {"hubPath": "spec.m", "spokePath": "spec.q"}}]),
        );
        assert!(first_error(&c).contains("rule is lossy (hub→spoke"), "{}", first_error(&c));
        let plan = plan_for(
            &obj_schema(json!({"m": {"type": "integer"}})),
            &obj_schema(json!({"q": {"type": "string"}})),
            json!([{"strategy": "Quantity", "quantity": {"hubPath": "spec.m", "spokePath": "spec.q"}, "acknowledgeLossy": true, "reason": "r"}]),
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"m": 1500})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"q": "1500m"}))
        );
        assert_eq!(
            plan.convert(&spoke_obj(json!({"q": "1.5"})), HUB_AV).unwrap(),
            hub_obj(json!({"m": 1500}))
        );
    }

    #[test]
    fn compile_errors() {
        let c = compile_rules(
            &obj_schema(json!({"a": {"type": "string"}})),
            &obj_schema(json!({"b": {"type": "string"}})),
            json!([{"strategy": "Quantity", "quantity": {"hubPath": "spec.a", "spokePath": "spec.b"}, "acknowledgeLossy": true}]),
        );
        assert!(
            first_error(&c).contains("converts between a quantity string on one side and an integer"),
            "{}",
            first_error(&c)
        );
        let c = compile_rules(
            &obj_schema(json!({"a": {"type": "string"}})),
            &obj_schema(json!({"b": {"type": "number"}})),
            json!([{"strategy": "Quantity", "quantity": {"hubPath": "spec.a", "spokePath": "spec.b"}}]),
        );
        assert!(first_error(&c).contains("spoke field a number"), "{}", first_error(&c));
        let c = compile_rules(
            &obj_schema(json!({"a": {"type": "string"}})),
            &obj_schema(json!({"b": {"type": "integer"}})),
            json!([{"strategy": "Quantity", "quantity": {"hubPath": "spec.x", "spokePath": "spec.b"}}]),
        );
        assert!(first_error(&c).contains("quantity.hubPath: not in the schema"), "{}", first_error(&c));
    }
}
