//! The manifests under docs/examples/ are valid: they deserialise into the Rust types without
//! losing a field, and every rule selects exactly one params block.

use dco_api::rules::{ConversionRule, Params};
use dco_api::{CRDConversionConfig, ConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use serde::de::DeserializeOwned;
use serde_json::Value;

fn examples() -> Vec<(String, Value)> {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/examples");
    let mut out = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("docs/examples exists") {
        let path = entry.expect("readable entry").path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let text = std::fs::read_to_string(&path).expect("readable example");
            let value: Value =
                serde_yaml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            out.push((path.display().to_string(), value));
        }
    }
    assert!(out.len() >= 4, "expected the example manifests, found {}", out.len());
    out
}

/// Every field of `orig` is present in `back` with the same value: a misspelled or unknown
/// field would be dropped by serde and caught here. Defaults may add fields to `back`.
fn assert_subset(orig: &Value, back: &Value, at: &str) {
    match (orig, back) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let next = format!("{at}.{k}");
                let other =
                    b.get(k).unwrap_or_else(|| panic!("{next} was dropped: unknown or misspelled field"));
                assert_subset(v, other, &next);
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            assert_eq!(a.len(), b.len(), "{at}: list length changed");
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_subset(x, y, &format!("{at}[{i}]"));
            }
        }
        (a, b) => assert!(a == b || a.as_f64().is_some() && a.as_f64() == b.as_f64(), "{at}: {a} became {b}"),
    }
}

fn round_trip<T: DeserializeOwned + serde::Serialize>(name: &str, v: &Value) -> T {
    let typed: T = serde_json::from_value(v.clone()).unwrap_or_else(|e| panic!("{name}: {e}"));
    let back = serde_json::to_value(&typed).expect("serialises");
    assert_subset(v, &back, name);
    typed
}

fn check_rules(name: &str, rules: &[ConversionRule], depth: usize) -> usize {
    let mut n = 0;
    for (i, r) in rules.iter().enumerate() {
        let params = r.params().unwrap_or_else(|e| panic!("{name}: rule {i}: {e}"));
        n += 1;
        if let Params::ForEach(f) = params {
            assert!(depth < 2, "{name}: ForEach nested deeper than 2");
            n += check_rules(name, &f.rules, depth + 1);
        }
    }
    n
}

#[test]
fn every_example_deserialises_without_loss() {
    let mut kinds = Vec::new();
    for (name, v) in examples() {
        let kind = v["kind"].as_str().unwrap_or_default().to_string();
        // A config's target ships beside it (convctl's doc_examples test compiles the pair).
        if matches!(kind.as_str(), "CustomResourceDefinition" | "CompositeResourceDefinition") {
            continue;
        }
        assert_eq!(v["apiVersion"], dco_api::API_VERSION, "{name}");
        let rules = match kind.as_str() {
            "XRDConversionConfig" => {
                let c: XRDConversionConfig = round_trip(&name, &v);
                assert!(c.target_name().ends_with(".org"), "{name}: target {}", c.target_name());
                c.spec.conversion.spokes.iter().map(|s| check_rules(&name, &s.rules, 0)).sum::<usize>()
            }
            "CRDConversionConfig" => {
                let c: CRDConversionConfig = round_trip(&name, &v);
                c.spec.conversion.spokes.iter().map(|s| check_rules(&name, &s.rules, 0)).sum::<usize>()
            }
            "ConversionWebhookServer" => {
                let s: ConversionWebhookServer = round_trip(&name, &v);
                assert!(s.spec.replicas >= 0);
                0
            }
            other => panic!("{name}: unexpected kind {other}"),
        };
        if kind.ends_with("ConversionConfig") {
            assert!(rules > 0, "{name}: a config example with no rules");
        }
        kinds.push(kind);
    }
    for k in ["XRDConversionConfig", "CRDConversionConfig", "ConversionWebhookServer"] {
        assert!(kinds.iter().any(|x| x == k), "no example of {k}");
    }
}

#[test]
fn a_misspelled_field_is_caught() {
    let v: Value = serde_yaml::from_str(
        "apiVersion: conversion.dco.rs/v1alpha1\nkind: ConversionWebhookServer\nmetadata: {name: x}\nspec: {replcas: 3}\n",
    )
    .unwrap();
    let typed: ConversionWebhookServer = serde_json::from_value(v.clone()).unwrap();
    let back = serde_json::to_value(&typed).unwrap();
    let caught = std::panic::catch_unwind(|| assert_subset(&v, &back, "x"));
    assert!(caught.is_err(), "the subset check must reject a dropped field");
}

#[test]
fn params_errors_name_the_block() {
    let mut r = ConversionRule::new(dco_api::rules::Strategy::FieldRename);
    assert_eq!(
        r.params().unwrap_err().to_string(),
        "strategy FieldRename needs its params block `fieldRename`"
    );
    r.field_rename = Some(Box::default());
    r.delete = Some(Box::new(dco_api::rules::DeleteParams {
        path: "spec.a".into(),
        exists_on: dco_api::rules::Side::Hub,
    }));
    assert_eq!(
        r.params().unwrap_err().to_string(),
        "params block `delete` does not belong to strategy FieldRename; remove it"
    );
}
