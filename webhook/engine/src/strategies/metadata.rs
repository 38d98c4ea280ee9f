//! ToAnnotation / ToLabel: a hub-only field is stashed into the spoke's metadata (and, with
//! `restoreOnReverse`, read back). FromAnnotation / FromLabel: the mirror — the field lives
//! on the spoke and the stash on the hub (`stashOnReverse` writes it back).
//!
//! Values are written as JSON text (`serialization: JSON`, any value) or verbatim
//! (`String`, string fields only). Labels must also be valid label values.

use dco_api::rules::{Params, Serialization, Strategy};

use super::{CompiledRule, LOSSLESS, OpError, RuleCx, RuleOp, StrategyImpl};
use crate::schema::{Node, ScalarType};
use crate::value::{self, JsonValueTrait, Path, Value};

pub struct ToAnnotation;
pub struct ToLabel;
pub struct FromAnnotation;
pub struct FromLabel;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    Annotation,
    Label,
}

impl Kind {
    fn field(self) -> &'static str {
        match self {
            Kind::Annotation => "annotations",
            Kind::Label => "labels",
        }
    }
}

impl StrategyImpl for ToAnnotation {
    fn strategy(&self) -> Strategy {
        Strategy::ToAnnotation
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ToAnnotation(p)) = cx.rule().params() else { return None };
        compile(
            cx,
            "toAnnotation",
            Kind::Annotation,
            &p.hub_path,
            &p.key,
            p.serialization,
            p.restore_on_reverse,
            true,
        )
    }
}

impl StrategyImpl for ToLabel {
    fn strategy(&self) -> Strategy {
        Strategy::ToLabel
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::ToLabel(p)) = cx.rule().params() else { return None };
        compile(cx, "toLabel", Kind::Label, &p.hub_path, &p.key, p.serialization, p.restore_on_reverse, true)
    }
}

impl StrategyImpl for FromAnnotation {
    fn strategy(&self) -> Strategy {
        Strategy::FromAnnotation
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::FromAnnotation(p)) = cx.rule().params() else { return None };
        compile(
            cx,
            "fromAnnotation",
            Kind::Annotation,
            &p.spoke_path,
            &p.key,
            p.serialization,
            p.stash_on_reverse,
            false,
        )
    }
}

impl StrategyImpl for FromLabel {
    fn strategy(&self) -> Strategy {
        Strategy::FromLabel
    }

    fn compile(&self, cx: &mut RuleCx<'_>) -> Option<CompiledRule> {
        let Ok(Params::FromLabel(p)) = cx.rule().params() else { return None };
        compile(
            cx,
            "fromLabel",
            Kind::Label,
            &p.spoke_path,
            &p.key,
            p.serialization,
            p.stash_on_reverse,
            false,
        )
    }
}

/// `field_on_hub`: To* (the schema field is on the hub, the stash on the spoke) vs From*.
#[allow(clippy::too_many_arguments)]
fn compile(
    cx: &mut RuleCx<'_>,
    block: &str,
    kind: Kind,
    field: &str,
    key: &str,
    ser: Serialization,
    reverse: bool,
    field_on_hub: bool,
) -> Option<CompiledRule> {
    if cx.depth() > 0 {
        cx.error(
            &[field],
            format!(
                "{} cannot run inside ForEach or BranchMap: metadata belongs to the whole object",
                cx.rule().strategy
            ),
        );
        return None;
    }
    let resolved = if field_on_hub {
        cx.hub_node(&format!("{block}.hubPath"), field)
    } else {
        cx.spoke_node(&format!("{block}.spokePath"), field)
    };
    if let Err(e) = validate_key(key) {
        cx.error(&[], format!("{block}.key {key:?} is not a valid {} key: {e}", kind.field()));
    }
    let (path, node) = resolved?;
    let is_string = |n: &Node| n.scalar().is_some_and(|s| s.ty == ScalarType::String);
    if ser == Serialization::String && !is_string(node) {
        cx.error(
            &[field],
            format!(
                "serialization String needs a string field, but it is a {}; use serialization: JSON",
                node.describe()
            ),
        );
    }
    if kind == Kind::Label
        && ser == Serialization::Json
        && !node.scalar().is_some_and(|s| s.ty != ScalarType::String)
    {
        cx.warn(
            &[field],
            "JSON-serialised strings and objects rarely make valid label values; conversion fails for values that are not",
        );
    }
    if cx.has_errors() {
        return None;
    }
    let stash = Path::from_segments(["metadata", kind.field(), key]);
    let stash_claim = format!("metadata.{}.{key}", kind.field());
    let op = Op { field: path.clone(), stash: stash.clone(), ser, kind, reverse, field_on_hub };
    let mut c = CompiledRule::new(vec![], vec![], LOSSLESS, Box::new(op));
    if field_on_hub {
        c.hub_claims = vec![path.dotted()];
        c.spoke_claims = vec![stash_claim];
        c.clear_h2s = vec![path];
        // The stash never reaches the hub: consumed when restoring, and stripped without
        // `restoreOnReverse` too (as the reference does), or a value written from a hub field
        // would outlive the field and be stashed again, stale, on the next trip down.
        c.clear_s2h = vec![stash];
        if !reverse {
            c = c.lossy(
                false,
                format!("{block}.restoreOnReverse is false: the stashed value is not read back"),
            );
        }
    } else {
        c.hub_claims = vec![stash_claim];
        c.spoke_claims = vec![path.dotted()];
        c.clear_h2s = vec![stash];
        c.clear_s2h = vec![path];
        if !reverse {
            c = c.lossy(
                false,
                format!("{block}.stashOnReverse is false: the spoke field is dropped on the way to the hub"),
            );
        }
    }
    Some(c)
}

#[derive(Debug)]
struct Op {
    field: Path,
    stash: Path,
    ser: Serialization,
    kind: Kind,
    reverse: bool,
    field_on_hub: bool,
}

impl Op {
    fn stash(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let Some(v) = value::get(src, self.field.segments()) else { return Ok(()) };
        let text = match self.ser {
            Serialization::Json => {
                sonic_rs::to_string(v).map_err(|e| OpError::new(&self.field, e.to_string()))?
            }
            Serialization::String => match v.as_str() {
                Some(s) => s.to_string(),
                None => {
                    return Err(OpError::new(
                        &self.field,
                        format!("serialization String needs a string, found {}", value::type_name(v)),
                    ));
                }
            },
        };
        if self.kind == Kind::Label
            && let Err(e) = validate_label_value(&text)
        {
            return Err(OpError::new(&self.field, format!("{text:?} cannot be a label value: {e}")));
        }
        value::set(dst, self.stash.segments(), Value::from(text.as_str()))
            .map_err(|e| OpError::new(&self.stash, e.to_string()))
    }

    fn restore(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        let Some(v) = value::get(src, self.stash.segments()) else { return Ok(()) };
        let Some(text) = v.as_str() else {
            return Err(OpError::new(
                &self.stash,
                format!("expected a string, found {}", value::type_name(v)),
            ));
        };
        let restored = match self.ser {
            Serialization::Json => {
                // Parsing recurses once per level: bound the text before it is read, so the
                // restored object stays within the nesting limit (`limits`).
                let depth = crate::limits::text_depth(text.as_bytes());
                let room = crate::limits::MAX_DEPTH.saturating_sub(self.field.segments().len());
                if depth > room {
                    return Err(OpError::new(
                        &self.stash,
                        format!(
                            "the JSON in it nests {depth} levels; restored at {} the object would nest deeper than {} levels, the limit for any object",
                            self.field,
                            crate::limits::MAX_DEPTH
                        ),
                    ));
                }
                sonic_rs::from_str::<Value>(text).map_err(|e| {
                    OpError::new(
                        &self.stash,
                        format!(
                            "{} is not JSON ({e}); serialization is JSON",
                            value::preview(&Value::from(text))
                        ),
                    )
                })?
            }
            Serialization::String => Value::from(text),
        };
        value::set(dst, self.field.segments(), restored).map_err(|e| OpError::new(&self.field, e.to_string()))
    }
}

impl RuleOp for Op {
    fn hub_to_spoke(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        if self.field_on_hub { self.stash(src, dst) } else { self.restore(src, dst) }
    }

    fn spoke_to_hub(&self, src: &Value, dst: &mut Value) -> Result<(), OpError> {
        match (self.field_on_hub, self.reverse) {
            (true, true) => self.restore(src, dst),
            (false, true) => self.stash(src, dst),
            (_, false) => Ok(()),
        }
    }
}

fn is_name_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.'
}

fn validate_name(name: &str, max: usize) -> Result<(), String> {
    if name.len() > max {
        return Err(format!("longer than {max} characters"));
    }
    if !name.chars().all(is_name_char) {
        return Err("only letters, digits, '-', '_' and '.' are allowed".into());
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !name.is_empty() && (!alnum(name.chars().next()) || !alnum(name.chars().last())) {
        return Err("must start and end with a letter or digit".into());
    }
    Ok(())
}

/// A qualified name: `[prefix/]name`, prefix a DNS subdomain (the Kubernetes key rules).
fn validate_key(key: &str) -> Result<(), String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if name.is_empty() {
        return Err("the name part is empty".into());
    }
    validate_name(name, 63)?;
    if let Some(p) = prefix {
        let ok = !p.is_empty()
            && p.len() <= 253
            && p.split('.').all(|l| {
                !l.is_empty()
                    && l.chars().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                    && !l.starts_with('-')
                    && !l.ends_with('-')
            });
        if !ok {
            return Err(format!("prefix {p:?} is not a lowercase DNS subdomain"));
        }
    }
    Ok(())
}

fn validate_label_value(v: &str) -> Result<(), String> {
    validate_name(v, 63)
}

#[cfg(test)]
mod tests {
    use crate::strategies::testkit::*;
    use serde_json::json;

    fn hub() -> serde_json::Value {
        obj_schema(
            json!({"description": {"type": "string"}, "tier": {"type": "string"}, "extra": {"type": "object", "properties": {"a": {"type": "integer"}}}}),
        )
    }

    fn spoke() -> serde_json::Value {
        obj_schema(json!({}))
    }

    #[test]
    fn to_annotation_and_label_round_trip() {
        let plan = plan_for(
            &hub(),
            &spoke(),
            json!([
                {"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.description", "key": "example.org/description", "restoreOnReverse": true}},
                {"strategy": "ToLabel", "toLabel": {"hubPath": "spec.tier", "key": "tier", "serialization": "String", "restoreOnReverse": true}},
                {"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.extra", "key": "example.org/extra", "restoreOnReverse": true}},
            ]),
        );
        let h = hub_obj(json!({"description": "created via v2", "tier": "gold", "extra": {"a": 1}}));
        let s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s["metadata"]["annotations"]["example.org/description"], json!("\"created via v2\""));
        assert_eq!(s["metadata"]["annotations"]["example.org/extra"], json!("{\"a\":1}"));
        assert_eq!(s["metadata"]["labels"]["tier"], json!("gold"));
        assert_eq!(s["spec"], json!(null), "the emptied spec is pruned");
        assert_eq!(plan.convert(&s, HUB_AV).unwrap(), h);
        let bad = plan.convert(&hub_obj(json!({"tier": "not a label!"})), SPOKE_AV).unwrap_err().to_string();
        assert!(
            bad.contains("rule 1 (ToLabel) spec.tier: \"not a label!\" cannot be a label value"),
            "{bad}"
        );
    }

    #[test]
    fn from_annotation_round_trips_with_stash() {
        let plan = plan_for(
            &spoke(),
            &hub(),
            json!([
                {"strategy": "FromAnnotation", "fromAnnotation": {"spokePath": "spec.description", "key": "example.org/d", "stashOnReverse": true}},
                {"strategy": "FromLabel", "fromLabel": {"spokePath": "spec.tier", "key": "tier", "serialization": "String", "stashOnReverse": true}},
                {"strategy": "FromAnnotation", "fromAnnotation": {"spokePath": "spec.extra", "key": "example.org/e", "stashOnReverse": true}},
            ]),
        );
        let s = spoke_obj(json!({"description": "x", "tier": "gold", "extra": {"a": 2}}));
        let h = plan.convert(&s, HUB_AV).unwrap();
        assert_eq!(
            h["metadata"]["annotations"],
            json!({"example.org/d": "\"x\"", "example.org/e": "{\"a\":2}"})
        );
        assert_eq!(h["metadata"]["labels"], json!({"tier": "gold"}));
        assert_eq!(plan.convert(&h, SPOKE_AV).unwrap(), s);
        let mut broken = h.clone();
        broken["metadata"]["annotations"]["example.org/e"] = json!("{not json");
        let err = plan.convert(&broken, SPOKE_AV).unwrap_err().to_string();
        assert!(err.contains("is not JSON"), "{err}");
    }

    #[test]
    fn without_reverse_is_lossy() {
        let err = first_error(&compile_rules(
            &hub(),
            &obj_schema(
                json!({"tier": {"type": "string"}, "extra": {"type": "object", "properties": {"a": {"type": "integer"}}}}),
            ),
            json!([{"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.description", "key": "d"}}]),
        ));
        assert!(err.contains("spoke→hub: toAnnotation.restoreOnReverse is false"), "{err}");
    }

    /// Without `restoreOnReverse` the annotation or label written hub→spoke is stripped
    /// spoke→hub (as the reference does): it must not come back into the hub object, where it
    /// would outlive the field it was written from. Both the tree and the review path.
    #[test]
    fn without_restore_the_stash_is_stripped_on_the_way_to_the_hub() {
        let plan = plan_for(
            &obj_schema(json!({"description": {"type": "string"}, "tier": {"type": "string"}})),
            &spoke(),
            json!([
                {"strategy": "ToAnnotation", "acknowledgeLossy": true, "reason": "v1 readers only", "toAnnotation": {"hubPath": "spec.description", "key": "example.org/description"}},
                {"strategy": "ToLabel", "acknowledgeLossy": true, "reason": "v1 readers only", "toLabel": {"hubPath": "spec.tier", "key": "tier", "serialization": "String"}},
            ]),
        );
        let h = hub_obj(json!({"description": "primary", "tier": "gold"}));
        let mut s = plan.convert(&h, SPOKE_AV).unwrap();
        assert_eq!(s["metadata"]["annotations"]["example.org/description"], json!("\"primary\""));
        assert_eq!(s["metadata"]["labels"]["tier"], json!("gold"));
        // Other metadata the spoke carries is untouched.
        s["metadata"]["labels"]["team"] = json!("data");
        s["metadata"]["annotations"]["note"] = json!("kept");
        let up = plan.convert(&s, HUB_AV).unwrap();
        assert_eq!(up["metadata"]["labels"], json!({"team": "data"}), "{up}");
        assert_eq!(up["metadata"]["annotations"], json!({"note": "kept"}), "{up}");
        assert_eq!(up["spec"], json!(null), "not restored: {up}");

        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": HUB_AV, "objects": [s]}});
        let out = crate::convert_review(&plan, review.to_string().as_bytes()).unwrap();
        let out: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
        let up = &out["response"]["convertedObjects"][0];
        assert_eq!(up["metadata"]["labels"], json!({"team": "data"}), "{out}");
        assert_eq!(up["metadata"]["annotations"], json!({"note": "kept"}), "{out}");
    }

    proptest::proptest! {
        /// Whatever else the spoke's metadata holds, spoke→hub drops exactly the stash keys
        /// (present or not) and keeps the rest, on the tree and on the review path alike.
        #[test]
        fn the_stash_alone_is_stripped(
            labels in proptest::collection::btree_map("[a-z][a-z0-9]{0,6}", "[a-z0-9]{1,8}", 0..4),
            annotations in proptest::collection::btree_map("[a-z][a-z0-9./]{0,8}", ".{0,12}", 0..4),
            stashed in proptest::bool::ANY,
        ) {
            let plan = plan_for(
                &obj_schema(json!({"description": {"type": "string"}, "tier": {"type": "string"}})),
                &spoke(),
                json!([
                    {"strategy": "ToAnnotation", "acknowledgeLossy": true, "reason": "v1 readers only", "toAnnotation": {"hubPath": "spec.description", "key": "example.org/description"}},
                    {"strategy": "ToLabel", "acknowledgeLossy": true, "reason": "v1 readers only", "toLabel": {"hubPath": "spec.tier", "key": "tier", "serialization": "String"}},
                ]),
            );
            let mut s = spoke_obj(json!({}));
            s["metadata"]["labels"] = json!(labels);
            s["metadata"]["annotations"] = json!(annotations);
            if stashed {
                s["metadata"]["labels"]["tier"] = json!("gold");
                s["metadata"]["annotations"]["example.org/description"] = json!("\"x\"");
            }
            let mut want_labels = labels.clone();
            want_labels.remove("tier");
            let mut want_annotations = annotations.clone();
            want_annotations.remove("example.org/description");
            let up = plan.convert(&s, HUB_AV).unwrap();
            let got = |m: &serde_json::Value, f: &str| -> std::collections::BTreeMap<String, String> {
                serde_json::from_value(m["metadata"][f].clone()).unwrap_or_default()
            };
            proptest::prop_assert_eq!(got(&up, "labels"), want_labels.clone());
            proptest::prop_assert_eq!(got(&up, "annotations"), want_annotations.clone());
            let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
                "request": {"uid": "u", "desiredAPIVersion": HUB_AV, "objects": [s]}});
            let out = crate::convert_review(&plan, review.to_string().as_bytes()).unwrap();
            let out: serde_json::Value = serde_json::from_slice(&out.body).unwrap();
            let up = &out["response"]["convertedObjects"][0];
            proptest::prop_assert_eq!(got(up, "labels"), want_labels);
            proptest::prop_assert_eq!(got(up, "annotations"), want_annotations);
        }
    }

    /// FromLabel's serialization defaults to String: a string field needs no setting.
    #[test]
    fn from_label_defaults_to_string() {
        let plan = plan_for(
            &spoke(),
            &obj_schema(json!({"tier": {"type": "string"}})),
            json!([{"strategy": "FromLabel", "fromLabel": {"spokePath": "spec.tier", "key": "tier", "stashOnReverse": true}}]),
        );
        let s = spoke_obj(json!({"tier": "gold"}));
        let h = plan.convert(&s, HUB_AV).unwrap();
        assert_eq!(h["metadata"]["labels"], json!({"tier": "gold"}), "verbatim, not JSON text");
        assert_eq!(plan.convert(&h, SPOKE_AV).unwrap(), s);
    }

    /// The mirror loses in the same direction: without the stash, the spoke-only field has
    /// nowhere to go on the way up (hub→spoke only reads the hub's metadata).
    #[test]
    fn from_without_stash_is_lossy_toward_the_hub() {
        for (strategy, block) in [("FromAnnotation", "fromAnnotation"), ("FromLabel", "fromLabel")] {
            let err = first_error(&compile_rules(
                &spoke(),
                &hub(),
                json!([{"strategy": strategy, block: {"spokePath": "spec.tier", "key": "tier", "serialization": "String"}}]),
            ));
            assert!(err.contains(&format!("spoke→hub: {block}.stashOnReverse is false")), "{err}");
        }
    }

    #[test]
    fn compile_errors() {
        let one = |r: serde_json::Value| first_error(&compile_rules(&hub(), &spoke(), json!([r])));
        let err = one(
            json!({"strategy": "ToLabel", "toLabel": {"hubPath": "spec.tier", "key": "Bad_Prefix/x", "restoreOnReverse": true}}),
        );
        assert!(err.contains("not a valid labels key: prefix \"Bad_Prefix\""), "{err}");
        let err = one(
            json!({"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.extra", "key": "k", "serialization": "String", "restoreOnReverse": true}}),
        );
        assert!(err.contains("serialization String needs a string field"), "{err}");
        let err = one(
            json!({"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.description", "key": "", "restoreOnReverse": true}}),
        );
        assert!(err.contains("the name part is empty"), "{err}");
        let err = one(
            json!({"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.description", "key": "k", "restoreOnReverse": true},
            "when": {"path": "spec.nothing", "equals": 1}}),
        );
        assert!(err.contains("when.path is in neither"), "{err}");
    }

    #[test]
    fn two_rules_on_one_annotation_key_clash() {
        let err = first_error(&compile_rules(
            &hub(),
            &spoke(),
            json!([
                {"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.description", "key": "k", "restoreOnReverse": true}},
                {"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.tier", "key": "k", "restoreOnReverse": true}},
            ]),
        ));
        assert!(
            err.contains(
                "rule 1 (ToAnnotation) metadata.annotations.k: spoke field is already claimed by rule 0"
            ),
            "{err}"
        );
    }
}
