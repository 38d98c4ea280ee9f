//! Duration: a Go duration string (`"5m"`, `"1h30m"`) on one side, integer seconds on the
//! other. Which side is which comes from the schemas.
//!
//! Verdict (rules.md): integer→string is lossy — seconds are written as Go's canonical
//! `Duration.String()` (`300` → `"5m0s"`, not `"5m"`). String→integer is exact: a duration
//! with a sub-second part (`"1.5s"`, `"300ms"`) is a conversion error, never truncated.

use dco_api::rules::{Params, Strategy};

use super::quantity::{TextSide, string_integer_pair, whole_number};
use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl, move_value};
use crate::duration::{format_seconds, parse_seconds};
use crate::value::{JsonValueTrait, Path, Value};

pub struct DurationStrategy;

impl StrategyImpl for DurationStrategy {
    fn strategy(&self) -> Strategy {
        Strategy::Duration
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::Duration(p)) = cx.rule().params() else { return None };
        let (hub, spoke, text) = string_integer_pair(cx, "duration", p, "a duration")?;
        let op = DurationOp { hub: hub.clone(), spoke: spoke.clone(), text };
        let compiled = CompiledRule::new(vec![hub], vec![spoke], LOSSLESS, Box::new(op));
        Some(compiled.lossy(
            text == TextSide::Spoke,
            "integer seconds are written as Go's canonical duration string, so another spelling of the same time (\"5m\" for \"5m0s\") does not come back",
        ))
    }
}

#[derive(Debug)]
struct DurationOp {
    hub: Path,
    spoke: Path,
    text: TextSide,
}

fn to_seconds(v: &Value, path: &Path) -> Result<Option<Value>, OpError> {
    if v.is_null() {
        return Ok(Some(v.clone()));
    }
    let s = v.as_str().ok_or_else(|| {
        OpError::new(
            path,
            format!("expected a duration string such as \"90s\", found a {}", crate::value::type_name(v)),
        )
    })?;
    let secs = parse_seconds(s).map_err(|e| OpError::new(path, e.to_string()))?;
    Ok(Some(Value::from(secs)))
}

fn to_text(v: &Value, path: &Path) -> Result<Option<Value>, OpError> {
    if v.is_null() {
        return Ok(Some(v.clone()));
    }
    let secs = whole_number(v).ok_or_else(|| {
        OpError::new(path, format!("expected whole seconds, found {}", crate::value::preview(v)))
    })?;
    let text = format_seconds(secs).map_err(|e| OpError::new(path, e.to_string()))?;
    Ok(Some(Value::from(text.as_str())))
}

impl RuleOp for DurationOp {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let text = self.text;
        move_value(src, dst, &self.hub, &self.spoke, |v| match text {
            TextSide::Hub => to_seconds(v, &self.hub),
            TextSide::Spoke => to_text(v, &self.hub),
        })
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let text = self.text;
        move_value(src, dst, &self.spoke, &self.hub, |v| match text {
            TextSide::Hub => to_text(v, &self.spoke),
            TextSide::Spoke => to_seconds(v, &self.spoke),
        })
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(json!({"timeout": {"type": "string"}})),
            obj_schema(json!({"timeoutSeconds": {"type": "integer"}})),
        )
    }

    fn rule(ack: bool) -> serde_json::Value {
        let mut r = json!({"strategy": "Duration", "duration": {"hubPath": "spec.timeout", "spokePath": "spec.timeoutSeconds"}});
        if ack {
            r["acknowledgeLossy"] = json!(true);
            r["reason"] = json!("canonical form");
        }
        r
    }

    #[test]
    fn both_directions() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(true)]));
        let s = plan.convert(&hub_obj(json!({"timeout": "5m"})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"timeoutSeconds": 300})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), hub_obj(json!({"timeout": "5m0s"})));
        for (text, secs) in [("1h30m0s", 5400), ("59s", 59), ("0s", 0), ("-1m30s", -90)] {
            let s = plan.convert(&hub_obj(json!({"timeout": text})), SPOKE_AV).unwrap();
            assert_eq!(s, spoke_obj(json!({"timeoutSeconds": secs})));
            assert_eq!(
                plan.convert(&s, HUB_AV).unwrap(),
                hub_obj(json!({"timeout": text})),
                "canonical {text} round-trips"
            );
        }
    }

    #[test]
    fn runtime_errors() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(true)]));
        for (bad, needle) in [
            (json!("1.5s"), "not a whole number of seconds"),
            (json!("300ms"), "not a whole number of seconds"),
            (json!("5 minutes"), "unknown unit"),
            (json!("3"), "has no unit"),
            (json!(30), "expected a duration string"),
        ] {
            let err = plan.convert(&hub_obj(json!({"timeout": bad})), SPOKE_AV).unwrap_err().to_string();
            assert!(
                err.contains("spec.timeout") && err.contains(needle) && err.contains("(Duration)"),
                "{err}"
            );
        }
        let err = plan
            .convert(&spoke_obj(json!({"timeoutSeconds": 9_223_372_037_i64})), HUB_AV)
            .unwrap_err()
            .to_string();
        assert!(err.contains("out of the range"), "{err}");
    }

    #[test]
    fn verdict_and_compile_errors() {
        let (hub, spoke) = schemas();
        let c = compile_rules(&hub, &spoke, json!([rule(false)]));
        assert!(first_error(&c).contains("rule is lossy (spoke→hub"), "{}", first_error(&c));
        let c = compile_rules(
            &obj_schema(json!({"a": {"type": "integer"}})),
            &obj_schema(json!({"b": {"type": "integer"}})),
            json!([{"strategy": "Duration", "duration": {"hubPath": "spec.a", "spokePath": "spec.b"}}]),
        );
        assert!(
            first_error(&c).contains("between a duration string on one side and an integer"),
            "{}",
            first_error(&c)
        );
        let c = compile_rules(
            &hub,
            &spoke,
            json!([{"strategy": "Duration", "duration": {"hubPath": "spec.timeout", "spokePath": "spec.nope"}}]),
        );
        assert!(first_error(&c).contains("duration.spokePath: not in the schema"), "{}", first_error(&c));
    }
}
