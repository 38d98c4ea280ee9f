//! Convert: the input is split at the first NUL byte into a rule list (JSON) and an object
//! (JSON). When the rules compile, the object is converted hub→spoke and spoke→hub, directly
//! and as a ConversionReview. Nothing may panic.
#![no_main]

use std::sync::Arc;

use dco_api::config::ConversionSpec;
use dco_engine::review::convert_review;
use dco_engine::{Plan, Target, compile};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn schema() -> Value {
    json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
        "s": {"type": "string"}, "n": {"type": "integer"}, "f": {"type": "number"}, "b": {"type": "boolean"},
        "q": {"type": "string"}, "mi": {"type": "integer"}, "d": {"type": "string"}, "secs": {"type": "integer"},
        "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}, "y": {"type": "integer"}}}},
        "tags": {"type": "array", "items": {"type": "string"}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
        "free": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "u": {"type": "object", "properties": {"a": {"type": "object", "properties": {"v": {"type": "string"}}},
                                              "b": {"type": "object", "properties": {"v": {"type": "string"}}}},
              "oneOf": [{"required": ["a"]}, {"required": ["b"]}]}
    }}}})
}

fn target() -> Target {
    let v = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.org"},
        "spec": {"group": "example.org", "names": {"kind": "Thing", "plural": "things"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema()}},
                {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema()}}]}});
    Target::from_value(&v).expect("fixed CRD")
}

fn plan(rules: Value) -> Option<Arc<Plan>> {
    let spec: ConversionSpec = serde_json::from_value(json!({
        "hubVersion": "v2", "unmappedFieldPolicy": "Warn", "unmappedFieldReason": "fuzzing",
        "spokes": [{"version": "v1", "rules": rules}]})).ok()?;
    compile(&spec, &target()).plan
}

fuzz_target!(|data: &[u8]| {
    let (rules, object) = match data.iter().position(|b| *b == 0) {
        Some(i) => (&data[..i], &data[i + 1..]),
        None => (&b"[]"[..], data),
    };
    let Ok(rules) = serde_json::from_slice::<Value>(rules) else { return };
    let Some(plan) = plan(rules) else { return };
    let Ok(mut obj) = serde_json::from_slice::<Value>(object) else { return };
    for (from, to) in [("v2", "v1"), ("v1", "v2")] {
        if let Some(o) = obj.as_object_mut() {
            o.insert("apiVersion".into(), json!(format!("example.org/{from}")));
        }
        if let Ok(out) = plan.convert(&obj, &format!("example.org/{to}")) {
            let _ = plan.convert(&out, &format!("example.org/{from}"));
        }
        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": format!("example.org/{to}"), "objects": [obj.clone()]}});
        let _ = convert_review(&plan, &serde_json::to_vec(&review).unwrap_or_default());
    }
    // The raw bytes as a review body, too.
    let _ = convert_review(&plan, object);
});
