//! TypeCoerce: the same field at the same path holds a string on one side and an integer,
//! number or boolean on the other (or integer vs number). Values are converted between the
//! two declared scalar types.
//!
//! Verdict (rules.md): lossy toward an integer unless `onFractionalInteger: Error` (then a
//! fractional value is a conversion error instead of being truncated or rounded). An
//! int-or-string source written to a plain string or integer field also loses which of the two
//! it was. Text written from numbers is canonical (`5`, `1.5`), so whole canonical values
//! round-trip exactly.

use dco_api::rules::{FractionalInteger, Params, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl, move_value};
use crate::schema::ScalarType;
use crate::value::{JsonValueTrait, Path, Value};

pub struct TypeCoerce;

impl StrategyImpl for TypeCoerce {
    fn strategy(&self) -> Strategy {
        Strategy::TypeCoerce
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::TypeCoerce(p)) = cx.rule().params() else { return None };
        let hub = cx.hub_node("typeCoerce.path", &p.path);
        let spoke = cx.spoke_node("typeCoerce.path", &p.path);
        let ((path, hn), (_, sn)) = (hub?, spoke?);
        let (Some(h), Some(s)) = (hn.scalar(), sn.scalar()) else {
            cx.error(
                &[&p.path],
                format!(
                    "TypeCoerce converts scalars, but the hub field is a {} and the spoke field a {}; use ScalarToObject, SingletonArrayToObject or ListJoin for changes of shape",
                    hn.describe(),
                    sn.describe()
                ),
            );
            return None;
        };
        let (ht, st) = (h.ty, s.ty);
        for (from, to) in [(ht, st), (st, ht)] {
            if !convertible(from, to) {
                cx.error(
                    &[&p.path],
                    format!(
                        "cannot coerce {} to {}: TypeCoerce converts strings to and from integers, numbers and booleans, and integers to and from numbers",
                        from.name(),
                        to.name()
                    ),
                );
                return None;
            }
        }
        if ht == st {
            cx.warn(
                &[&p.path],
                format!("both sides are {}; there is nothing to coerce — remove the rule (identical fields are copied as they are)", ht.name()),
            );
        }
        let policy = p.on_fractional_integer;
        let integer_dest = |from: ScalarType, to: ScalarType| {
            matches!(to, ScalarType::Integer | ScalarType::IntOrString)
                && from != to
                && from != ScalarType::Integer
        };
        if policy != FractionalInteger::Error && !integer_dest(ht, st) && !integer_dest(st, ht) {
            cx.warn(&[&p.path], "onFractionalInteger has no effect: neither side is an integer field fed by a number or string");
        }
        let mut compiled = CompiledRule::new(
            vec![path.clone()],
            vec![path.clone()],
            LOSSLESS,
            Box::new(Coerce { path, hub: ht, spoke: st, policy }),
        );
        for (h2s, from, to) in [(true, ht, st), (false, st, ht)] {
            if let Some(why) = direction_loss(from, to, policy) {
                compiled = compiled.lossy(h2s, why);
            }
        }
        Some(compiled)
    }
}

/// Which scalar pairs TypeCoerce converts.
fn convertible(from: ScalarType, to: ScalarType) -> bool {
    use ScalarType::*;
    from == to
        || matches!(
            (from, to),
            (String, _) | (_, String) | (Integer | Number | IntOrString, Integer | Number | IntOrString)
        )
}

/// Why converting `from` → `to` loses information, if it does.
fn direction_loss(from: ScalarType, to: ScalarType, policy: FractionalInteger) -> Option<String> {
    use ScalarType::*;
    if from == to {
        return None;
    }
    if matches!(to, Integer | IntOrString)
        && matches!(from, Number | String)
        && policy != FractionalInteger::Error
    {
        let how = if policy == FractionalInteger::Truncate { "truncated" } else { "rounded" };
        return Some(format!(
            "fractional values written to the {} field are {how} (onFractionalInteger: {policy:?})",
            to.name()
        ));
    }
    if from == IntOrString && matches!(to, String | Integer) {
        return Some(format!(
            "an int-or-string value written to a {} field no longer says whether it was a number or text",
            to.name()
        ));
    }
    None
}

#[derive(Debug)]
struct Coerce {
    path: Path,
    hub: ScalarType,
    spoke: ScalarType,
    policy: FractionalInteger,
}

impl RuleOp for Coerce {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        move_value(src, dst, &self.path, &self.path, |v| {
            coerce(v, self.spoke, self.policy).map(Some).map_err(|m| OpError::new(&self.path, m))
        })
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        move_value(src, dst, &self.path, &self.path, |v| {
            coerce(v, self.hub, self.policy).map(Some).map_err(|m| OpError::new(&self.path, m))
        })
    }
}

/// Converts a scalar value to the scalar type `to`. Nulls pass through. The error says what
/// the value was and how to fix it.
pub(crate) fn coerce(v: &Value, to: ScalarType, policy: FractionalInteger) -> Result<Value, String> {
    if v.is_null() {
        return Ok(v.clone());
    }
    match to {
        ScalarType::String => {
            if v.is_str() {
                Ok(v.clone())
            } else if let Some(b) = v.as_bool() {
                Ok(Value::from(if b { "true" } else { "false" }))
            } else if v.is_number() {
                Ok(Value::from(number_text(v).as_str()))
            } else {
                Err(format!(
                    "{} is not a scalar; only strings, numbers and booleans coerce",
                    crate::value::type_name(v)
                ))
            }
        }
        ScalarType::Integer => to_integer(v, policy),
        ScalarType::IntOrString => {
            if v.is_str() || v.is_i64() || v.is_u64() {
                Ok(v.clone())
            } else {
                to_integer(v, policy)
            }
        }
        ScalarType::Number => {
            if v.is_number() {
                Ok(v.clone())
            } else if let Some(s) = v.as_str() {
                parse_number(s).ok_or_else(|| format!("{s:?} is not a number"))
            } else {
                Err(format!("a {} cannot become a number", crate::value::type_name(v)))
            }
        }
        ScalarType::Boolean => {
            if v.is_boolean() {
                Ok(v.clone())
            } else if let Some(s) = v.as_str() {
                // The spellings Go's strconv.ParseBool accepts.
                match s {
                    "1" | "t" | "T" | "true" | "TRUE" | "True" => Ok(Value::from(true)),
                    "0" | "f" | "F" | "false" | "FALSE" | "False" => Ok(Value::from(false)),
                    _ => Err(format!("{s:?} is not a boolean (true or false)")),
                }
            } else {
                Err(format!("a {} cannot become a boolean", crate::value::type_name(v)))
            }
        }
    }
}

/// The canonical text of a number: integers in full, floats in their shortest exact form.
pub(crate) fn number_text(v: &Value) -> String {
    if let Some(i) = v.as_i64() {
        i.to_string()
    } else if let Some(u) = v.as_u64() {
        u.to_string()
    } else {
        sonic_rs::to_string(v).unwrap_or_default()
    }
}

/// Parses a JSON-style number ("5", "-1.5", "2e3"); no signs other than a leading '-', no
/// spaces, no "inf"/"NaN".
fn parse_number(s: &str) -> Option<Value> {
    let body = s.strip_prefix('-').unwrap_or(s);
    let ok_chars = !body.is_empty()
        && body.starts_with(|c: char| c.is_ascii_digit())
        && body.chars().all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
    if !ok_chars {
        return None;
    }
    if let Ok(i) = s.parse::<i64>() {
        return Some(Value::from(i));
    }
    if let Ok(u) = s.parse::<u64>() {
        return Some(Value::from(u));
    }
    let f: f64 = s.parse().ok()?;
    Value::new_f64(f)
}

fn to_integer(v: &Value, policy: FractionalInteger) -> Result<Value, String> {
    let n = if v.is_number() {
        v.clone()
    } else if let Some(s) = v.as_str() {
        parse_number(s).ok_or_else(|| format!("{s:?} is not a number"))?
    } else {
        return Err(format!("a {} cannot become an integer", crate::value::type_name(v)));
    };
    if n.is_i64() || n.is_u64() {
        return Ok(n);
    }
    let f = n.as_f64().unwrap_or(f64::NAN);
    let whole = if f.fract() == 0.0 {
        f
    } else {
        match policy {
            FractionalInteger::Error => {
                return Err(format!(
                    "{} is fractional but the field is an integer; set onFractionalInteger: Truncate or Round (lossy) to convert it",
                    number_text(&n)
                ));
            }
            FractionalInteger::Truncate => f.trunc(),
            FractionalInteger::Round => f.round(),
        }
    };
    // i64 covers [-2^63, 2^63); the f64 bounds are exact powers of two.
    if (-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&whole) {
        Ok(Value::from(whole as i64))
    } else {
        Err(format!("{} does not fit in a 64-bit integer", number_text(&n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn coerce_rule(path: &str, policy: Option<&str>) -> serde_json::Value {
        let mut r = json!({"strategy": "TypeCoerce", "typeCoerce": {"path": path}});
        if let Some(p) = policy {
            r["typeCoerce"]["onFractionalInteger"] = json!(p);
            r["acknowledgeLossy"] = json!(true);
            r["reason"] = json!("test");
        }
        r
    }

    #[test]
    fn string_and_integer_both_directions() {
        let hub = obj_schema(json!({"priority": {"type": "integer"}}));
        let spoke = obj_schema(json!({"priority": {"type": "string"}}));
        let plan = plan_for(&hub, &spoke, json!([coerce_rule("spec.priority", None)]));
        let h = hub_obj(json!({"priority": 5}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"priority": "5"})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        // Fractional text toward the integer hub is an error under the default policy.
        let err = plan.convert(&spoke_obj(json!({"priority": "1.7"})), HUB_AV).unwrap_err().to_string();
        assert!(err.contains("spec.priority") && err.contains("onFractionalInteger"), "{err}");
        assert!(err.contains("rule 0 (TypeCoerce)"), "{err}");
        let err = plan.convert(&spoke_obj(json!({"priority": "nope"})), HUB_AV).unwrap_err().to_string();
        assert!(err.contains("\"nope\" is not a number"), "{err}");
        // 5.0 is whole.
        assert_eq!(plan.convert(&spoke_obj(json!({"priority": "5.0"})), HUB_AV).unwrap(), h);
    }

    #[test]
    fn truncate_and_round_are_lossy_and_acknowledged() {
        let hub = obj_schema(json!({"n": {"type": "integer"}}));
        let spoke = obj_schema(json!({"n": {"type": "number"}}));
        let c = compile_rules(
            &hub,
            &spoke,
            json!([{"strategy": "TypeCoerce", "typeCoerce": {"path": "spec.n", "onFractionalInteger": "Round"}}]),
        );
        let err = first_error(&c);
        assert!(
            err.contains("rule is lossy") && err.contains("spoke→hub") && err.contains("rounded"),
            "{err}"
        );
        let plan = plan_for(&hub, &spoke, json!([coerce_rule("spec.n", Some("Round"))]));
        assert_eq!(plan.convert(&spoke_obj(json!({"n": 1.5})), HUB_AV).unwrap(), hub_obj(json!({"n": 2})));
        assert_eq!(plan.convert(&spoke_obj(json!({"n": -1.5})), HUB_AV).unwrap(), hub_obj(json!({"n": -2})));
        assert_eq!(plan.convert(&hub_obj(json!({"n": 3})), SPOKE_AV).unwrap(), spoke_obj(json!({"n": 3})));
        let plan = plan_for(&hub, &spoke, json!([coerce_rule("spec.n", Some("Truncate"))]));
        assert_eq!(plan.convert(&spoke_obj(json!({"n": -1.7})), HUB_AV).unwrap(), hub_obj(json!({"n": -1})));
        let err = plan.convert(&spoke_obj(json!({"n": 1e300})), HUB_AV).unwrap_err().to_string();
        assert!(err.contains("does not fit"), "{err}");
        let c = compile_rules(&hub, &spoke, json!([coerce_rule("spec.n", None)]));
        let report = &c.report.spokes[0].rule_results[0];
        assert!(report.verdict.hub_to_spoke && report.verdict.spoke_to_hub);
    }

    #[test]
    fn booleans_and_numbers_to_strings() {
        let hub = obj_schema(json!({"on": {"type": "boolean"}, "ratio": {"type": "number"}}));
        let spoke = obj_schema(json!({"on": {"type": "string"}, "ratio": {"type": "string"}}));
        let plan =
            plan_for(&hub, &spoke, json!([coerce_rule("spec.on", None), coerce_rule("spec.ratio", None)]));
        let h = hub_obj(json!({"on": true, "ratio": 0.25}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"on": "true", "ratio": "0.25"})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        assert_eq!(
            plan.convert(&spoke_obj(json!({"on": "F", "ratio": "2e3"})), HUB_AV).unwrap(),
            hub_obj(json!({"on": false, "ratio": 2000.0}))
        );
        assert!(plan.convert(&spoke_obj(json!({"on": "yes"})), HUB_AV).is_err());
        assert!(plan.convert(&spoke_obj(json!({"ratio": " 1"})), HUB_AV).is_err());
        assert!(plan.convert(&spoke_obj(json!({"ratio": "inf"})), HUB_AV).is_err());
    }

    #[test]
    fn int_or_string_source_is_lossy() {
        let hub = obj_schema(json!({"port": {"x-kubernetes-int-or-string": true}}));
        let spoke = obj_schema(json!({"port": {"type": "string"}}));
        let c = compile_rules(&hub, &spoke, json!([coerce_rule("spec.port", None)]));
        assert!(first_error(&c).contains("no longer says whether it was a number or text"));
        let plan = plan_for(
            &hub,
            &spoke,
            json!([{"strategy": "TypeCoerce", "typeCoerce": {"path": "spec.port"}, "acknowledgeLossy": true, "reason": "ports are numbers"}]),
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"port": 80})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"port": "80"}))
        );
        assert_eq!(
            plan.convert(&spoke_obj(json!({"port": "http"})), HUB_AV).unwrap(),
            hub_obj(json!({"port": "http"}))
        );
    }

    #[test]
    fn compile_errors() {
        let hub = obj_schema(
            json!({"on": {"type": "boolean"}, "n": {"type": "integer"}, "o": {"type": "object", "properties": {"a": {"type": "string"}}}}),
        );
        let spoke =
            obj_schema(json!({"on": {"type": "integer"}, "n": {"type": "integer"}, "o": {"type": "string"}}));
        let c = compile_rules(&hub, &spoke, json!([coerce_rule("spec.on", None)]));
        assert!(first_error(&c).contains("cannot coerce boolean to integer"), "{}", first_error(&c));
        let c = compile_rules(&hub, &spoke, json!([coerce_rule("spec.o", None)]));
        assert!(first_error(&c).contains("TypeCoerce converts scalars"), "{}", first_error(&c));
        let c = compile_rules(&hub, &spoke, json!([coerce_rule("spec.missing", None)]));
        assert!(first_error(&c).contains("typeCoerce.path: not in the schema"), "{}", first_error(&c));
        let c = compile_rules(&hub, &spoke, json!([coerce_rule("spec.n", None)]));
        assert!(c.report.warnings().any(|d| d.message.contains("nothing to coerce")));
    }

    #[test]
    fn coerce_table() {
        let v = |j: serde_json::Value| crate::value::from_serde(&j);
        let e = FractionalInteger::Error;
        assert_eq!(coerce(&v(json!(5)), ScalarType::String, e).unwrap(), v(json!("5")));
        assert_eq!(coerce(&v(json!("5")), ScalarType::Integer, e).unwrap(), v(json!(5)));
        assert_eq!(coerce(&v(json!(5.0)), ScalarType::Integer, e).unwrap(), v(json!(5)));
        assert!(coerce(&v(json!(1.7)), ScalarType::Integer, e).is_err());
        assert_eq!(
            coerce(&v(json!(1.7)), ScalarType::Integer, FractionalInteger::Truncate).unwrap(),
            v(json!(1))
        );
        assert_eq!(
            coerce(&v(json!(1.7)), ScalarType::Integer, FractionalInteger::Round).unwrap(),
            v(json!(2))
        );
        assert_eq!(coerce(&v(json!(1.7)), ScalarType::Number, e).unwrap(), v(json!(1.7)));
        assert_eq!(coerce(&v(json!("true")), ScalarType::Boolean, e).unwrap(), v(json!(true)));
        assert!(coerce(&v(json!("nope")), ScalarType::Integer, e).is_err());
        assert_eq!(coerce(&v(json!(null)), ScalarType::Integer, e).unwrap(), v(json!(null)));
        assert!(coerce(&v(json!([1])), ScalarType::String, e).is_err());
        assert_eq!(
            coerce(&v(json!("18446744073709551615")), ScalarType::Integer, e).unwrap(),
            v(json!(u64::MAX))
        );
    }
}
