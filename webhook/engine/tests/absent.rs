//! Property: the compile-time check for JSONPatch ops on fields an object may lack
//! (docs/engine.md, "Rules that would fail at conversion time") is exact on generated
//! schemas. When compile accepts a patch, every object the schema allows converts; when it
//! refuses one, the smallest object the schema allows makes the patch fail.

use dco_engine::{Target, compile};
use proptest::prelude::*;
use serde_json::{Map, Value, json};

/// How a field is declared: required by its parent, defaulted, or optional.
#[derive(Clone, Copy, Debug)]
enum Decl {
    Required,
    Defaulted,
    Optional,
}

fn decl() -> impl Strategy<Value = Decl> {
    prop_oneof![Just(Decl::Required), Just(Decl::Defaulted), Just(Decl::Optional)]
}

/// `spec` declared `spec_decl`, holding `field` (a boolean) declared `field_decl`.
fn schema(spec_decl: Decl, field: &str, field_decl: Decl) -> Value {
    let mut leaf = json!({"type": "boolean"});
    if let Decl::Defaulted = field_decl {
        leaf["default"] = json!(false);
    }
    let mut spec = json!({"type": "object", "properties": {field: leaf}});
    if let Decl::Required = field_decl {
        spec["required"] = json!([field]);
    }
    if let Decl::Defaulted = spec_decl {
        spec["default"] = json!({});
    }
    let mut root = json!({"type": "object", "properties": {"spec": spec}});
    if let Decl::Required = spec_decl {
        root["required"] = json!(["spec"]);
    }
    root
}

fn target(hub: &Value, spoke: &Value) -> Target {
    Target::from_value(&json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "ws.x.org"},
        "spec": {"group": "x.org", "names": {"kind": "W", "plural": "ws"}, "scope": "Namespaced", "versions": [
            {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": spoke}},
            {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": hub}}]}}))
    .expect("target")
}

/// The smallest object the apiserver would hand over: what is required, plus what defaults
/// fill in (defaults apply below a present parent only).
fn smallest(version: &str, spec_decl: Decl, field: &str, field_decl: Decl) -> Value {
    let mut obj = json!({"apiVersion": format!("x.org/{version}"), "kind": "W", "metadata": {"name": "w", "namespace": "n"}});
    if matches!(spec_decl, Decl::Optional) {
        return obj;
    }
    let mut spec = Map::new();
    if !matches!(field_decl, Decl::Optional) {
        spec.insert(field.to_string(), json!(false));
    }
    obj["spec"] = Value::Object(spec);
    obj
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]

    #[test]
    fn a_move_is_refused_exactly_when_some_allowed_object_breaks_it(
        hub_spec in decl(), hub_field in decl(), spoke_spec in decl(), spoke_field in decl(),
        guarded in any::<bool>(), flag in any::<bool>(),
    ) {
        let hub = schema(hub_spec, "a", hub_field);
        let spoke = schema(spoke_spec, "b", spoke_field);
        let mut rule = json!({"strategy": "JSONPatch", "jsonPatch": {"losslessOverride": true,
            "hubToSpoke": [{"op": "move", "from": "/spec/a", "path": "/spec/b"}],
            "spokeToHub": [{"op": "move", "from": "/spec/b", "path": "/spec/a"}]}});
        if guarded {
            // Guarded on the hub field: the hub→spoke move is safe. The way back is judged by
            // spec.b alone (conservative: the spoke has no spec.a, so the rule never runs there).
            rule["when"] = json!({"path": "spec.a", "equals": true});
        }
        let spec = serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [rule]}]})).unwrap();
        let c = compile(&spec, &target(&hub, &spoke));
        let refused = |dir: &str| c.report.errors().any(|d| d.message.starts_with(&format!("jsonPatch.{dir}[0] (move)")));
        let safe = |s: Decl, f: Decl| !matches!(s, Decl::Optional) && !matches!(f, Decl::Optional);
        prop_assert_eq!(refused("hubToSpoke"), !guarded && !safe(hub_spec, hub_field), "{:?}", c.report.diagnostics);
        prop_assert_eq!(refused("spokeToHub"), !safe(spoke_spec, spoke_field), "{:?}", c.report.diagnostics);
        match &c.plan {
            Some(plan) => {
                // Accepted: the smallest objects and full ones convert both ways.
                for (v, to, s, f, field) in [("v2", "x.org/v1", hub_spec, hub_field, "a"), ("v1", "x.org/v2", spoke_spec, spoke_field, "b")] {
                    let mut o = smallest(v, s, field, f);
                    plan.convert(&o, to).unwrap_or_else(|e| panic!("accepted, yet {o} fails: {e}"));
                    o["spec"] = json!({field: flag});
                    plan.convert(&o, to).unwrap_or_else(|e| panic!("accepted, yet {o} fails: {e}"));
                }
            }
            None => {
                // Refused: the smallest object the schema allows lacks the field, and the
                // same move fails on it.
                let (s, f, field) = if refused("hubToSpoke") { (hub_spec, hub_field, "a") } else { (spoke_spec, spoke_field, "b") };
                let o = smallest("v2", s, field, f);
                let mut doc = o.clone();
                let from = dco_engine::patch::Pointer::parse(&format!("/spec/{field}")).unwrap();
                prop_assert!(dco_engine::patch::get(&doc, &from).is_none(), "the smallest object lacks {}: {}", field, o);
                let ops: Vec<dco_api::rules::JsonPatchOp> = serde_json::from_value(json!([{"op": "move", "from": format!("/spec/{field}"), "path": "/spec/z"}])).unwrap();
                let patch = dco_engine::patch::Patch::compile(&ops).unwrap();
                prop_assert!(patch.apply(&mut doc).is_err(), "the move fails on {}", o);
            }
        }
    }
}
