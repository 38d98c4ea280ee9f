//! Config parsing + compile: arbitrary bytes as a ConversionSpec (JSON) compiled against a
//! fixed CRD, and as a CRD compiled against a fixed spec. Nothing may panic.
#![no_main]

use dco_api::config::ConversionSpec;
use dco_engine::{Target, compile};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn fixed_crd() -> Value {
    let props = json!({"spec": {"type": "object", "properties": {
        "a": {"type": "string"}, "n": {"type": "integer"}, "q": {"type": "string"},
        "list": {"type": "array", "items": {"type": "object", "properties": {"x": {"type": "string"}}}},
        "m": {"type": "object", "additionalProperties": {"type": "string"}},
        "u": {"type": "object", "properties": {"s3": {"type": "object", "properties": {"b": {"type": "string"}}}}, "oneOf": [{"required": ["s3"]}]}
    }}});
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.org"},
        "spec": {"group": "example.org", "names": {"kind": "Thing", "plural": "things"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object", "properties": props}}},
                {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object", "properties": props}}}]}})
}

fuzz_target!(|data: &[u8]| {
    let crd = Target::from_value(&fixed_crd()).expect("fixed CRD");
    if let Ok(spec) = serde_json::from_slice::<ConversionSpec>(data) {
        let compiled = compile(&spec, &crd);
        for d in &compiled.report.diagnostics {
            let _ = d.to_string();
        }
    }
    if let Ok(v) = serde_json::from_slice::<Value>(data) {
        if let Ok(target) = Target::from_value(&v) {
            let spec: ConversionSpec =
                serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]})).expect("spec");
            let _ = compile(&spec, &target);
            let _ = target.schema_hash();
        }
    }
});
