//! FieldRename: the value at hubPath is the value at spokePath. Lossless when both sides
//! hold the same kind of value and each side's values fit the other's schema.

use dco_api::rules::{Params, Strategy};

use super::{CompiledRule, OpError, RuleCx, RuleOp, StrategyImpl, fit_verdict, move_value, same_kind};
use crate::value::{Path, Value};

pub struct FieldRename;

impl StrategyImpl for FieldRename {
    fn strategy(&self) -> Strategy {
        Strategy::FieldRename
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::FieldRename(p)) = cx.rule().params() else { return None };
        let hub = cx.hub_node("fieldRename.hubPath", &p.hub_path);
        let spoke = cx.spoke_node("fieldRename.spokePath", &p.spoke_path);
        let ((hp, hn), (sp, sn)) = (hub?, spoke?);
        if !same_kind(hn, sn) {
            cx.error(
                &[&p.hub_path, &p.spoke_path],
                format!(
                    "hub field is a {} but spoke field is a {}; FieldRename needs the same kind on both sides (ScalarToObject, SingletonArrayToObject or TypeCoerce change kinds)",
                    hn.describe(),
                    sn.describe()
                ),
            );
            return None;
        }
        if let (Some(h), Some(s)) = (hn.scalar(), sn.scalar())
            && h.ty != s.ty
            && crate::schema::node_fits(hn, sn).is_err()
            && crate::schema::node_fits(sn, hn).is_err()
        {
            cx.error(
                &[&p.hub_path, &p.spoke_path],
                format!(
                    "hub field is {} but spoke field is {}; FieldRename does not change types — use TypeCoerce",
                    h.ty.name(),
                    s.ty.name()
                ),
            );
            return None;
        }
        let (verdict, why) = fit_verdict(cx, (&hp, hn), (&sp, sn));
        let mut compiled = CompiledRule::new(
            vec![hp.clone()],
            vec![sp.clone()],
            verdict,
            Box::new(Rename { hub: hp, spoke: sp }),
        );
        for (h2s, w) in why {
            compiled = compiled.lossy(h2s, w);
        }
        Some(compiled)
    }
}

#[derive(Debug)]
struct Rename {
    hub: Path,
    spoke: Path,
}

impl RuleOp for Rename {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        move_value(src, dst, &self.hub, &self.spoke, |v| Ok(Some(v.clone())))
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        move_value(src, dst, &self.spoke, &self.hub, |v| Ok(Some(v.clone())))
    }

    fn stream(&self) -> Option<super::Stream<'_>> {
        Some(super::Stream::Move { hub: &self.hub, spoke: &self.spoke, mapped: false })
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(json!({
                "storageGB": {"type": "integer"},
                "tier": {"type": "string", "enum": ["a", "b"]},
                "db": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
            })),
            obj_schema(json!({
                "storageSize": {"type": "integer"},
                "level": {"type": "string", "enum": ["a", "b", "c"]},
                "database": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
            })),
        )
    }

    fn rename(h: &str, s: &str) -> serde_json::Value {
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": h, "spokePath": s}})
    }

    #[test]
    fn renames_in_both_directions_and_round_trips() {
        let (hub, spoke) = schemas();
        let rules = json!([
            rename("spec.storageGB", "spec.storageSize"),
            rename("spec.db", "spec.database"),
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.tier", "spokePath": "spec.level"},
             "acknowledgeLossy": true, "reason": "spoke has an extra tier"},
        ]);
        let plan = plan_for(&hub, &spoke, rules);
        let h = hub_obj(json!({"storageGB": 10, "tier": "a", "db": {"name": "x", "port": 5432}}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(
            s,
            spoke_obj(json!({"storageSize": 10, "level": "a", "database": {"name": "x", "port": 5432}}))
        );
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }

    #[test]
    fn missing_source_writes_nothing() {
        let (hub, spoke) = schemas();
        let plan = plan_for(
            &hub,
            &spoke,
            json!([rename("spec.storageGB", "spec.storageSize"), rename("spec.db", "spec.database"),
                   {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.tier", "spokePath": "spec.level"}, "acknowledgeLossy": true, "reason": "r"}]),
        );
        let s = plan.convert(&hub_obj(json!({})), SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({})));
    }

    #[test]
    fn verdict_follows_enum_widening() {
        let (hub, spoke) = schemas();
        let c = compile_rules(
            &hub,
            &spoke,
            json!([
                rename("spec.storageGB", "spec.storageSize"),
                rename("spec.db", "spec.database"),
                rename("spec.tier", "spec.level")
            ]),
        );
        let err = first_error(&c);
        assert!(err.contains("rule 2 (FieldRename)"), "{err}");
        assert!(
            err.contains("rule is lossy (spoke→hub: spoke spec.level does not fit hub spec.tier"),
            "{err}"
        );
        assert!(err.contains("acknowledgeLossy"), "{err}");
    }

    #[test]
    fn compile_errors_name_the_path_and_fix() {
        let (hub, spoke) = schemas();
        let c = compile_rules(&hub, &spoke, json!([rename("spec.storage", "spec.storageSize")]));
        let err = first_error(&c);
        assert!(err.contains("fieldRename.hubPath: not in the schema of hub version v2"), "{err}");
        assert!(err.contains("fields at spec: db, storageGB, tier"), "{err}");

        let c = compile_rules(&hub, &spoke, json!([rename("spec.storageGB", "spec.database")]));
        assert!(first_error(&c).contains("needs the same kind on both sides"));

        let c = compile_rules(&hub, &spoke, json!([rename("spec.tier", "spec.storageSize")]));
        assert!(first_error(&c).contains("use TypeCoerce"), "{}", first_error(&c));

        let c = compile_rules(&hub, &spoke, json!([rename("spec..x", "spec.storageSize")]));
        assert!(first_error(&c).contains("empty segment"));

        let c = compile_rules(&hub, &spoke, json!([rename("spec.db.name.first", "spec.storageSize")]));
        assert!(first_error(&c).contains("goes inside spec.db.name"), "{}", first_error(&c));
    }

    #[test]
    fn two_rules_on_one_field_is_a_claim_error() {
        let (hub, spoke) = schemas();
        let c = compile_rules(
            &hub,
            &spoke,
            json!([
                rename("spec.storageGB", "spec.storageSize"),
                rename("spec.storageGB", "spec.database.port")
            ]),
        );
        let err = first_error(&c);
        assert!(
            err.contains(
                "rule 1 (FieldRename) spec.storageGB: hub field is already claimed by rule 0 (FieldRename)"
            ),
            "{err}"
        );
    }
}
