//! FieldsToScalar: several hub fields join into one spoke string by a `{{.name}}` template;
//! the spoke string splits back into the hub fields by a regular expression with named groups.
//! The mirror of ScalarToFields, sharing its splitter and joiner.
//!
//! Verdict (rules.md): lossless only with `losslessOverride: true`.

use dco_api::rules::{Params, Strategy};

use super::scalar_to_fields::{Joiner, SideOf, Splitter, compile_split_join};
use super::{CompiledRule, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::value::Value;

pub struct FieldsToScalar;

impl StrategyImpl for FieldsToScalar {
    fn strategy(&self) -> Strategy {
        Strategy::FieldsToScalar
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::FieldsToScalar(p)) = cx.rule().params() else { return None };
        let (splitter, joiner, mut compiled) = compile_split_join(
            cx,
            "fieldsToScalar",
            "spokePath",
            &p.spoke_path,
            SideOf::Spoke,
            "hubFields",
            &p.hub_fields,
            &p.pattern,
            &p.join_template,
            p.lossless_override,
        )?;
        compiled.op = Box::new(Join { splitter, joiner });
        Some(compiled)
    }
}

/// Hub fields → spoke scalar (join); spoke scalar → hub fields (split).
#[derive(Debug)]
struct Join {
    splitter: Splitter,
    joiner: Joiner,
}

impl RuleOp for Join {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.joiner.run(src, dst)
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        self.splitter.run(src, dst)
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(json!({"contactName": {"type": "string"}, "contactEmail": {"type": "string"}})),
            obj_schema(json!({"contact": {"type": "string"}})),
        )
    }

    fn rule(override_: bool) -> serde_json::Value {
        json!({"strategy": "FieldsToScalar", "fieldsToScalar": {
            "hubFields": {"name": "spec.contactName", "email": "spec.contactEmail"},
            "pattern": "^(?P<name>[^<]+) <(?P<email>[^>]+)>$",
            "spokePath": "spec.contact",
            "joinTemplate": "{{.name}} <{{.email}}>",
            "losslessOverride": override_}})
    }

    #[test]
    fn joins_and_splits() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(true)]));
        let h = hub_obj(json!({"contactName": "Jane Doe", "contactEmail": "jane@example.com"}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"contact": "Jane Doe <jane@example.com>"})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }

    #[test]
    fn errors_name_paths() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(true)]));
        let err =
            plan.convert(&spoke_obj(json!({"contact": "no brackets"})), HUB_AV).unwrap_err().to_string();
        assert!(
            err.contains("spec.contact")
                && err.contains("does not match")
                && err.contains("(FieldsToScalar)"),
            "{err}"
        );
        let err = plan.convert(&hub_obj(json!({"contactName": "Jane"})), SPOKE_AV).unwrap_err().to_string();
        assert!(err.contains("spec.contactEmail") && err.contains("missing"), "{err}");
        let c = compile_rules(&hub, &spoke, json!([rule(false)]));
        assert!(first_error(&c).contains("rule is lossy"), "{}", first_error(&c));
        let c =
            compile_rules(&hub, &obj_schema(json!({"contact": {"type": "integer"}})), json!([rule(true)]));
        assert!(first_error(&c).contains("fieldsToScalar.spokePath: the joined value is text, so the field must be a string, not integer"), "{}", first_error(&c));
    }
}
