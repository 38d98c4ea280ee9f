//! The review path against serde_json and the executor. The input is the bytes of one object
//! (any bytes, UTF-8 or not), placed in a ConversionReview as they are and, when they start an
//! object, again with an `apiVersion` of the hub as its first member (so the stream path reads
//! it). Each review must be refused as malformed exactly when serde_json refuses the body (but
//! for what only serde_json refuses: nesting beyond its 128 levels, lone surrogates, numbers
//! beyond f64), and an accepted, converted object must equal what `Plan::convert` makes of
//! serde_json's reading of it.
#![no_main]

use std::sync::{Arc, OnceLock};

use dco_api::config::ConversionSpec;
use dco_engine::review::{ReviewError, convert_review};
use dco_engine::{Plan, Target, compile};
use libfuzzer_sys::fuzz_target;
use serde_json::{Value, json};

fn item(a: &str, b: &str) -> Value {
    json!({"type": "array", "items": {"type": "object", "properties": {
        a: {"type": "string"}, b: {"type": "integer"}, "kind": {"type": "string"}}}})
}

/// Renames at two depths, a swap, an enum remap and a ForEach: a plan the stream path serves.
fn plan() -> &'static Arc<Plan> {
    static PLAN: OnceLock<Arc<Plan>> = OnceLock::new();
    PLAN.get_or_init(|| {
        let schema = |spec: Value| json!({"type": "object", "properties": {"spec": {"type": "object", "properties": spec}}});
        let hub = schema(json!({"a": {"type": "integer"}, "x": {"type": "string"}, "y": {"type": "string"},
            "tier": {"type": "string", "enum": ["Small", "Large"]},
            "db": {"type": "object", "properties": {"name": {"type": "string"}}}, "volumes": item("name", "sizeGB")}));
        let spoke = schema(json!({"b": {"type": "integer"}, "x": {"type": "string"}, "y": {"type": "string"},
            "tier": {"type": "string", "enum": ["S", "L"]},
            "db": {"type": "object", "properties": {"dbName": {"type": "string"}}}, "vols": item("label", "size")}));
        let target = Target::from_value(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "things.example.org"},
            "spec": {"group": "example.org", "names": {"kind": "Thing", "plural": "things"},
                "versions": [
                    {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": spoke}},
                    {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": hub}}]}}))
        .expect("fixed CRD");
        let rename = |h: &str, s: &str| json!({"strategy": "FieldRename", "fieldRename": {"hubPath": h, "spokePath": s}});
        let spec: ConversionSpec = serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
            rename("spec.a", "spec.b"), rename("spec.x", "spec.y"), rename("spec.y", "spec.x"),
            rename("spec.db.name", "spec.db.dbName"),
            {"strategy": "EnumRemap", "enumRemap": {"path": "spec.tier", "mapping": [{"hub": "Small", "spoke": "S"}, {"hub": "Large", "spoke": "L"}]}},
            {"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.volumes", "spokeItemsPath": "spec.vols",
                "rules": [rename("name", "label"), rename("sizeGB", "size")]}}]}]}))
        .expect("fixed spec");
        compile(&spec, &target).plan.expect("fixed plan compiles")
    })
}

fn check(object: &[u8]) {
    let body = [
        &br#"{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{"uid":"u","desiredAPIVersion":"example.org/v1","objects":["#[..],
        object,
        b"]}}",
    ]
    .concat();
    let ours = convert_review(plan(), &body);
    let theirs = serde_json::from_slice::<Value>(&body);
    let object_text = String::from_utf8_lossy(object);
    let body = String::from_utf8_lossy(&body);
    match (&ours, &theirs) {
        (Err(ReviewError::Malformed(_)), Err(_)) => {}
        // Limits only serde_json sets: nesting, lone surrogates, numbers beyond f64 (valid
        // JSON grammar, copied as written).
        (Ok(_), Err(e))
            if ["recursion limit", "surrogate", "number out of range"].iter().any(|m| e.to_string().contains(m)) => {}
        (Ok(out), Ok(review)) => {
            // Duplicate keys are JSON whose meaning the RFC leaves open: serde_json keeps the
            // last `apiVersion`, the review path routes by the first. The apiserver never
            // sends them; only validity is compared then.
            if out.failure.is_some() || object_text.matches("apiVersion").count() > 1 {
                return;
            }
            let resp: Value = serde_json::from_slice(&out.body).expect("the response is JSON");
            let converted = &resp["response"]["convertedObjects"];
            let objects = review["request"]["objects"].as_array().expect("objects");
            assert_eq!(converted.as_array().map(Vec::len), Some(objects.len()), "{body}");
            for (got, obj) in converted.as_array().into_iter().flatten().zip(objects) {
                let want = plan().convert(obj, "example.org/v1").expect("the review converted it");
                assert_eq!(got, &want, "{body}");
            }
        }
        _ => panic!("review path {:?} but serde_json {:?} on {body}", ours.as_ref().map(|_| ()), theirs.as_ref().map(|_| ())),
    }
}

fuzz_target!(|data: &[u8]| {
    // Any bytes: the review path checks UTF-8 itself, in the same pass.
    check(data);
    if let Some(rest) = data.trim_ascii_start().strip_prefix(b"{") {
        let sep: &[u8] = if rest.trim_ascii_start().starts_with(b"}") { b"" } else { b"," };
        check(&[&br#"{"apiVersion":"example.org/v2""#[..], sep, rest].concat());
    }
});
