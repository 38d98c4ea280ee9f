//! CEL: two expressions, one per direction, over `object` (the rule's input: the whole object,
//! or the item inside ForEach). Each returns a map of destination path → value; the rule's
//! declared destination paths are read from it (as dotted keys or nested maps), other keys
//! are ignored, and a path the map leaves out (or sets to null) is left unset.
//!
//! Claims: `hubPaths` and `spokePaths`, which must be declared fields. The expressions may read
//! anything. Cost is bounded (see [`crate::cel`]).
//!
//! Verdict (rules.md): never lossless — the engine cannot prove two expressions are inverses,
//! so the rule always needs `acknowledgeLossy: true`.

use dco_api::rules::{Params, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::cel::CelProgram;
use crate::value::{self, Path, Value};

pub struct Cel;

impl StrategyImpl for Cel {
    fn strategy(&self) -> Strategy {
        Strategy::Cel
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::Cel(p)) = cx.rule().params() else { return None };
        let mut hub_paths = Vec::new();
        for (i, path) in p.hub_paths.iter().enumerate() {
            if let Some((pp, _)) = cx.hub_node(&format!("cel.hubPaths[{i}]"), path) {
                hub_paths.push(pp);
            }
        }
        let mut spoke_paths = Vec::new();
        for (i, path) in p.spoke_paths.iter().enumerate() {
            if let Some((pp, _)) = cx.spoke_node(&format!("cel.spokePaths[{i}]"), path) {
                spoke_paths.push(pp);
            }
        }
        if p.hub_paths.is_empty() && p.spoke_paths.is_empty() {
            cx.error(
                &[],
                "cel.hubPaths and cel.spokePaths are both empty; list the fields the expressions convert",
            );
        }
        let program = |cx: &mut RuleCx<'_>, field: &str, src: &str, writes: &[String]| {
            if src.trim().is_empty() {
                if writes.is_empty() {
                    return None;
                }
                cx.error(
                    &[],
                    format!(
                        "cel.{field} is empty but the rule declares fields it must fill ({})",
                        writes.join(", ")
                    ),
                );
                return None;
            }
            match CelProgram::compile(src) {
                Ok(prog) => Some(prog),
                Err(e) => {
                    cx.error(&[], format!("cel.{field}: {e}"));
                    None
                }
            }
        };
        let h2s = program(cx, "hubToSpoke", &p.hub_to_spoke, &p.spoke_paths);
        let s2h = program(cx, "spokeToHub", &p.spoke_to_hub, &p.hub_paths);
        if cx.has_errors() {
            return None;
        }
        let op = CelOp { h2s, s2h, hub: hub_paths.clone(), spoke: spoke_paths.clone() };
        let why = "the engine cannot prove two CEL expressions are inverses; check them on samples with convctl test";
        Some(
            CompiledRule::new(hub_paths, spoke_paths, LOSSLESS, Box::new(op))
                .lossy(true, why)
                .lossy(false, why),
        )
    }
}

#[derive(Debug)]
struct CelOp {
    h2s: Option<CelProgram>,
    s2h: Option<CelProgram>,
    hub: Vec<Path>,
    spoke: Vec<Path>,
}

fn run(
    prog: Option<&CelProgram>,
    field: &str,
    writes: &[Path],
    src: &Value,
    dst: &mut Value,
) -> Result<(), OpError> {
    let Some(prog) = prog else { return Ok(()) };
    let label = || writes.iter().map(Path::dotted).collect::<Vec<_>>().join(", ");
    let stopped = |why: String| OpError::new(label(), format!("cel.{field}: {why}"));
    // The object is copied whole into CEL values and the interpreter recurses over them:
    // ask before (depth, memory) and after (time, memory) the evaluation, whose own work is
    // bounded by its cost estimate (`cel::COST_LIMIT`).
    crate::limits::admit_copy(src, "CEL", crate::limits::CopyInto::Cel).map_err(stopped)?;
    let out = prog.evaluate(src).map_err(|e| stopped(e.to_string()))?;
    crate::limits::check().map_err(|why| stopped(format!("conversion stopped: {why}")))?;
    let result = serde_json::Value::Object(out);
    for path in writes {
        let dotted = path.dotted();
        // A dotted key wins over a nested map.
        let found =
            result.get(&dotted).or_else(|| path.segments().iter().try_fold(&result, |cur, seg| cur.get(seg)));
        match found {
            Some(v) if !v.is_null() => {
                value::set(dst, path.segments(), value::from_serde(v))
                    .map_err(|e| OpError::new(path, e.to_string()))?;
            }
            _ => {}
        }
    }
    Ok(())
}

impl RuleOp for CelOp {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        run(self.h2s.as_ref(), "hubToSpoke", &self.spoke, src, dst)
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        run(self.s2h.as_ref(), "spokeToHub", &self.hub, src, dst)
    }
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn schemas() -> (serde_json::Value, serde_json::Value) {
        (
            obj_schema(json!({"packed": {"type": "integer"}})),
            obj_schema(json!({"bitHigh": {"type": "integer"}, "bitLow": {"type": "integer"}})),
        )
    }

    fn rule(h2s: &str, s2h: &str, ack: bool) -> serde_json::Value {
        json!({"strategy": "CEL", "cel": {"hubPaths": ["spec.packed"], "spokePaths": ["spec.bitHigh", "spec.bitLow"],
            "hubToSpoke": h2s, "spokeToHub": s2h}, "acknowledgeLossy": ack, "reason": "packing"})
    }

    const H2S: &str =
        r#"{"spec.bitHigh": int(object.spec.packed) / 256, "spec.bitLow": int(object.spec.packed) % 256}"#;
    const S2H: &str = r#"{"spec": {"packed": int(object.spec.bitHigh) * 256 + int(object.spec.bitLow)}}"#;

    #[test]
    fn packs_both_ways() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(H2S, S2H, true)]));
        let h = hub_obj(json!({"packed": 1025}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s, spoke_obj(json!({"bitHigh": 4, "bitLow": 1})));
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
    }

    #[test]
    fn always_needs_acknowledgement() {
        let (hub, spoke) = schemas();
        let c = compile_rules(&hub, &spoke, json!([rule(H2S, S2H, false)]));
        let err = first_error(&c);
        assert!(err.contains("rule is lossy") && err.contains("CEL expressions"), "{err}");
    }

    #[test]
    fn null_and_missing_keys_leave_fields_unset() {
        let (hub, spoke) = schemas();
        let plan = plan_for(
            &hub,
            &spoke,
            json!([rule(
                r#"has(object.spec.packed) ? {"spec.bitHigh": object.spec.packed / 256, "spec.bitLow": null} : {}"#,
                S2H,
                true
            )]),
        );
        assert_eq!(
            plan.convert(&hub_obj(json!({"packed": 512})), SPOKE_AV).unwrap(),
            spoke_obj(json!({"bitHigh": 2}))
        );
        assert_eq!(plan.convert(&hub_obj(json!({})), SPOKE_AV).unwrap(), spoke_obj(json!({})));
    }

    #[test]
    fn runtime_errors_name_rule_and_paths() {
        let (hub, spoke) = schemas();
        let plan = plan_for(&hub, &spoke, json!([rule(H2S, S2H, true)]));
        let err = plan.convert(&hub_obj(json!({})), SPOKE_AV).unwrap_err().to_string();
        assert!(
            err.contains("rule 0 (CEL) spec.bitHigh, spec.bitLow: cel.hubToSpoke: evaluation failed"),
            "{err}"
        );
        let plan = plan_for(&hub, &spoke, json!([rule("object.spec.packed", S2H, true)]));
        let err = plan.convert(&hub_obj(json!({"packed": 1})), SPOKE_AV).unwrap_err().to_string();
        assert!(err.contains("must return a map"), "{err}");
    }

    #[test]
    fn compile_errors() {
        let (hub, spoke) = schemas();
        for (r, needle) in [
            (rule("{\"a\": ", S2H, true), "cel.hubToSpoke: expression does not parse"),
            (rule(H2S, "{\"spec.packed\": self.x}", true), "cel.spokeToHub: expression references `self`"),
            (rule("", S2H, true), "cel.hubToSpoke is empty"),
            (
                json!({"strategy": "CEL", "cel": {"hubPaths": ["spec.nope"], "spokePaths": [], "hubToSpoke": "{}", "spokeToHub": "{}"}, "acknowledgeLossy": true}),
                "cel.hubPaths[0]: not in the schema",
            ),
            (
                json!({"strategy": "CEL", "cel": {"hubPaths": [], "spokePaths": [], "hubToSpoke": "{}", "spokeToHub": "{}"}, "acknowledgeLossy": true}),
                "both empty",
            ),
        ] {
            let c = compile_rules(&hub, &spoke, json!([r]));
            assert!(all_errors(&c).contains(needle), "{needle}: {}", all_errors(&c));
        }
    }
}
