//! NumericScale: hubValue = spokeValue × factor. A direction that writes an integer field is
//! lossy (results are rounded) unless it multiplies an integer by a whole number.

use dco_api::rules::{Params, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::ScalarType;
use crate::value::{self, JsonValueTrait, Path, Value};

pub struct NumericScale;

impl StrategyImpl for NumericScale {
    fn strategy(&self) -> Strategy {
        Strategy::NumericScale
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::NumericScale(p)) = cx.rule().params() else { return None };
        let hub = cx.hub_node("numericScale.hubPath", &p.hub_path);
        let spoke = cx.spoke_node("numericScale.spokePath", &p.spoke_path);
        if !p.factor.is_finite() || p.factor == 0.0 {
            cx.error(&[], format!("numericScale.factor must be a finite, non-zero number, got {}", p.factor));
        }
        let ((hp, hn), (sp, sn)) = (hub?, spoke?);
        let mut int = [false; 2];
        for (i, (side, path, node)) in [("hub", &hp, hn), ("spoke", &sp, sn)].into_iter().enumerate() {
            match node.scalar().map(|s| s.ty) {
                Some(ScalarType::Integer) => int[i] = true,
                Some(ScalarType::Number) => {}
                _ => cx.error(
                    &[&path.dotted()],
                    format!("{side} field must be an integer or number, but it is a {}", node.describe()),
                ),
            }
        }
        if cx.has_errors() {
            return None;
        }
        let [hub_int, spoke_int] = int;
        let whole = |x: f64| x.fract() == 0.0 && x.abs() < 9.0e15;
        let mut c = CompiledRule::new(
            vec![hp.clone()],
            vec![sp.clone()],
            LOSSLESS,
            Box::new(Op { hub: hp.clone(), spoke: sp.clone(), factor: p.factor, hub_int, spoke_int }),
        );
        // hub→spoke divides by factor; spoke→hub multiplies.
        if spoke_int && !(hub_int && whole(1.0 / p.factor)) {
            c = c.lossy(
                true,
                format!(
                    "spoke {sp} is an integer: hub values that are not multiples of {} are rounded",
                    p.factor
                ),
            );
        }
        if hub_int && !(spoke_int && whole(p.factor)) {
            c = c.lossy(false, format!("hub {hp} is an integer: spoke values × {} are rounded", p.factor));
        }
        Some(c)
    }
}

#[derive(Debug)]
struct Op {
    hub: Path,
    spoke: Path,
    factor: f64,
    hub_int: bool,
    spoke_int: bool,
}

/// Scales a JSON number; integers stay exact when the multiplier is whole.
fn scale(v: &Value, path: &Path, mul: Mul, to_int: bool) -> Result<Value, OpError> {
    let bad = || {
        OpError::new(path, format!("expected a number, found {} {}", value::type_name(v), value::preview(v)))
    };
    if let (Some(i), Mul::Times(f)) = (v.as_i64(), mul)
        && f.fract() == 0.0
        && f.abs() < 9.0e18
        && let Some(r) = i.checked_mul(f as i64)
    {
        return Ok(Value::from(r));
    }
    let x = v.as_f64().ok_or_else(bad)?;
    let r = match mul {
        Mul::Times(f) => x * f,
        Mul::Divide(f) => x / f,
    };
    if !r.is_finite() {
        return Err(OpError::new(path, format!("{x} scaled by the factor is out of range")));
    }
    if to_int || r.fract() == 0.0 {
        let rounded = r.round();
        if rounded.abs() >= 9.2e18 {
            return Err(OpError::new(path, format!("{r} does not fit a 64-bit integer")));
        }
        if to_int || rounded.abs() < 9.0e15 {
            return Ok(Value::from(rounded as i64));
        }
    }
    Value::new_f64(r).ok_or_else(|| OpError::new(path, format!("{r} is not a JSON number")))
}

#[derive(Clone, Copy)]
enum Mul {
    Times(f64),
    Divide(f64),
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        // Dividing by a factor whose inverse is whole is a multiplication (exact for ints).
        let inv = 1.0 / self.factor;
        let mul = if inv.fract() == 0.0 { Mul::Times(inv) } else { Mul::Divide(self.factor) };
        super::move_value(src, dst, &self.hub, &self.spoke, |v| {
            scale(v, &self.hub, mul, self.spoke_int).map(Some)
        })
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        super::move_value(src, dst, &self.spoke, &self.hub, |v| {
            scale(v, &self.spoke, Mul::Times(self.factor), self.hub_int).map(Some)
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn rule(factor: f64, ack: bool) -> serde_json::Value {
        let mut r = json!({"strategy": "NumericScale", "numericScale": {"hubPath": "spec.memoryMB", "spokePath": "spec.memoryGB", "factor": factor}});
        if ack {
            r["acknowledgeLossy"] = json!(true);
            r["reason"] = json!("sizes are whole GB");
        }
        json!([r])
    }

    #[test]
    fn integer_sides_round_toward_the_spoke() {
        let hub = obj_schema(json!({"memoryMB": {"type": "integer"}}));
        let spoke = obj_schema(json!({"memoryGB": {"type": "integer"}}));
        let err = first_error(&compile_rules(&hub, &spoke, rule(1024.0, false)));
        assert!(err.contains("hub→spoke: spoke spec.memoryGB is an integer"), "{err}");
        assert!(!err.contains("spoke→hub"), "{err}");
        let plan = plan_for(&hub, &spoke, rule(1024.0, true));
        let s = plan.convert(&hub_obj(json!({"memoryMB": 4096})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"memoryGB": 4})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"memoryMB": 4096})));
        assert_eq!(
            plan.convert(&hub_obj(json!({"memoryMB": 3000})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"memoryGB": 3}))
        );
        let err = plan.convert(&hub_obj(json!({"memoryMB": "big"})), SPOKE_AV).unwrap_err().to_string();
        assert!(err.contains("spec.memoryMB: expected a number, found string"), "{err}");
    }

    #[test]
    fn number_sides_are_exact() {
        let hub = obj_schema(json!({"memoryMB": {"type": "number"}}));
        let spoke = obj_schema(json!({"memoryGB": {"type": "number"}}));
        let plan = plan_for(&hub, &spoke, rule(1024.0, false));
        let s = plan.convert(&hub_obj(json!({"memoryMB": 1536})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"memoryGB": 1.5})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"memoryMB": 1536})));
    }

    #[test]
    fn compile_errors() {
        let hub = obj_schema(json!({"memoryMB": {"type": "string"}}));
        let spoke = obj_schema(json!({"memoryGB": {"type": "number"}}));
        assert!(
            first_error(&compile_rules(&hub, &spoke, rule(2.0, true)))
                .contains("hub field must be an integer or number")
        );
        let hub = obj_schema(json!({"memoryMB": {"type": "number"}}));
        assert!(
            first_error(&compile_rules(&hub, &spoke, rule(0.0, true)))
                .contains("factor must be a finite, non-zero number")
        );
    }
}
