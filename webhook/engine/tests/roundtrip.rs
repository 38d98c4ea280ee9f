//! Property tests: a config compiled as lossless round-trips arbitrary schema-valid objects
//! exactly (hub→spoke→hub and spoke→hub→spoke); lossy rules are flagged and refused without
//! acknowledgement; the review path and `Plan::convert` agree; nothing panics on any input.
//!
//! Objects are generated from the flattened schema itself, so every declared shape (nested
//! objects, arrays of objects, maps, enums, preserve-unknown subtrees) is exercised.

use std::collections::BTreeMap;
use std::sync::Arc;

use dco_engine::schema::{FlatSchema, Node, ScalarType, Shape};
use dco_engine::{Plan, Target, compile};
use proptest::prelude::*;
use serde_json::{Value, json};

const HUB_AV: &str = "example.org/v2";
const SPOKE_AV: &str = "example.org/v1";

fn object_schema(spec: Value, status: Value) -> Value {
    json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": spec},
        "status": {"type": "object", "properties": status}}})
}

fn items(props: Value) -> Value {
    json!({"type": "array", "items": {"type": "object", "properties": props}})
}

fn hub_schema() -> Value {
    object_schema(
        json!({
            "size": {"type": "string", "enum": ["Small", "Large"]},
            "storageGB": {"type": "integer"},
            "db": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
            "replicaCount": {"type": "integer"},
            "endpoints": {"type": "array", "minItems": 1, "maxItems": 1, "items": {"type": "object", "properties": {
                "host": {"type": "string"}, "port": {"type": "integer"}}}},
            "cpuLimit": {"type": "string"},
            "memoryLimit": {"type": "string"},
            "description": {"type": "string"},
            "dns": {"type": "array", "items": {"type": "string"}},
            "extraLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "memoryMB": {"type": "number"},
            "volumes": items(json!({"sizeGB": {"type": "string"}, "label": {"type": "string"},
                "disks": items(json!({"sizeGB": {"type": "integer"}, "kind": {"type": "string"}}))})),
            "same1": {"type": "string"},
            "same2": {"type": "integer"},
            "same3": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "values": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "port": {"x-kubernetes-int-or-string": true},
            "choice": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}], "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
        }),
        json!({"ready": {"type": "boolean"}}),
    )
}

fn spoke_schema() -> Value {
    object_schema(
        json!({
            "size": {"type": "string", "enum": ["S", "L"]},
            "storageSize": {"type": "integer"},
            "database": {"type": "object", "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
            "replicas": {"type": "object", "properties": {"count": {"type": "integer"}}},
            "endpoint": {"type": "object", "properties": {"host": {"type": "string"}, "port": {"type": "integer"}}},
            "limits": {"type": "object", "additionalProperties": {"type": "string"}},
            "dnsCSV": {"type": "string"},
            "extraLabels": {"type": "object", "additionalProperties": {"type": "string"}},
            "memoryGB": {"type": "number"},
            "vols": items(json!({"size": {"type": "string"}, "label": {"type": "string"},
                "disks": items(json!({"size": {"type": "integer"}, "kind": {"type": "string"}}))})),
            "same1": {"type": "string"},
            "same2": {"type": "integer"},
            "same3": {"type": "boolean"},
            "tags": {"type": "array", "items": {"type": "string"}},
            "counts": {"type": "object", "additionalProperties": {"type": "integer"}},
            "values": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "port": {"x-kubernetes-int-or-string": true},
            "choice": {"oneOf": [{"required": ["a"]}, {"required": ["b"]}], "type": "object",
                "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
        }),
        json!({"ready": {"type": "boolean"}}),
    )
}

fn rename(h: &str, s: &str) -> Value {
    json!({"strategy": "FieldRename", "fieldRename": {"hubPath": h, "spokePath": s}})
}

fn lossless_rules() -> Value {
    json!([
        {"strategy": "EnumRemap", "enumRemap": {"path": "spec.size", "mapping": [{"hub": "Small", "spoke": "S"}, {"hub": "Large", "spoke": "L"}]}},
        rename("spec.storageGB", "spec.storageSize"),
        rename("spec.db", "spec.database"),
        {"strategy": "ScalarToObject", "scalarToObject": {"hubPath": "spec.replicaCount", "spokePath": "spec.replicas", "key": "count"}},
        {"strategy": "SingletonArrayToObject", "singletonArrayToObject": {"hubPath": "spec.endpoints", "spokePath": "spec.endpoint"}},
        {"strategy": "FieldsToMap", "fieldsToMap": {"hubPaths": ["spec.cpuLimit", "spec.memoryLimit"], "spokeMapPath": "spec.limits"}},
        {"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.description", "key": "example.org/description", "restoreOnReverse": true}},
        {"strategy": "ListJoin", "listJoin": {"hubPath": "spec.dns", "spokePath": "spec.dnsCSV", "separator": ","}},
        {"strategy": "MapKeyRename", "mapKeyRename": {"hubPath": "spec.extraLabels", "spokePath": "spec.extraLabels", "renames": {"app": "application"}}},
        {"strategy": "NumericScale", "numericScale": {"hubPath": "spec.memoryMB", "spokePath": "spec.memoryGB", "factor": 1024.0}},
        {"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.volumes", "spokeItemsPath": "spec.vols", "rules": [
            rename("sizeGB", "size"),
            {"strategy": "ForEach", "forEach": {"hubItemsPath": "disks", "spokeItemsPath": "disks", "rules": [rename("sizeGB", "size")]}}
        ]}}
    ])
}

fn target() -> Target {
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "dbs.example.org"},
        "spec": {"group": "example.org", "names": {"kind": "DB", "plural": "dbs"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": spoke_schema()}},
                {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": hub_schema()}}]}});
    Target::from_value(&crd).expect("test CRD")
}

fn spec(rules: Value) -> dco_api::config::ConversionSpec {
    serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}))
        .expect("spec")
}

fn plan() -> Arc<Plan> {
    let c = compile(&spec(lossless_rules()), &target());
    let diags: Vec<String> = c.report.diagnostics.iter().map(|d| d.to_string()).collect();
    assert!(c.report.overall_lossless, "config must be lossless: {diags:#?}");
    c.plan.unwrap_or_else(|| panic!("config must compile: {diags:#?}"))
}

// ---- generating schema-valid objects from a flattened schema ----

type Overrides = BTreeMap<&'static str, BoxedStrategy<Value>>;

fn arb_scalar(ty: ScalarType, enumeration: Option<&Vec<Value>>) -> BoxedStrategy<Value> {
    if let Some(e) = enumeration {
        return proptest::sample::select(e.clone()).boxed();
    }
    match ty {
        // No commas (the ListJoin separator) and never empty, so joined lists split back.
        ScalarType::String => "[a-z0-9 ._-]{1,8}".prop_map(Value::from).boxed(),
        ScalarType::Integer => (-100_000i64..100_000).prop_map(Value::from).boxed(),
        // Quarter steps: exact in binary, so scaling by powers of two is exact.
        ScalarType::Number => (-40_000i64..40_000).prop_map(|q| json!(q as f64 / 4.0)).boxed(),
        ScalarType::Boolean => any::<bool>().prop_map(Value::from).boxed(),
        ScalarType::IntOrString => {
            prop_oneof![(0i64..65_536).prop_map(Value::from), "[a-z]{1,6}".prop_map(Value::from)].boxed()
        }
    }
}

fn arb_free_form(depth: u32) -> BoxedStrategy<Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        (-1000i64..1000).prop_map(Value::from),
        "[a-z]{0,6}".prop_map(Value::from),
    ];
    leaf.prop_recursive(depth, 16, 4, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            proptest::collection::btree_map("[a-z]{1,4}", inner, 0..4)
                .prop_map(|m| Value::Object(m.into_iter().collect())),
        ]
    })
    .boxed()
}

fn arb_node(node: &Node, fs_children: Option<&FlatSchema>) -> BoxedStrategy<Value> {
    match &node.shape {
        Shape::Scalar(s) => arb_scalar(s.ty, s.enumeration.as_ref()),
        Shape::Array { items, max_items } => {
            let max = max_items.map(|m| m as usize).unwrap_or(3).min(3);
            let min = if *max_items == Some(1) { 1 } else { 0 };
            proptest::collection::vec(arb_schema(items, &Overrides::new(), ""), min..=max)
                .prop_map(Value::Array)
                .boxed()
        }
        Shape::Map { values } => {
            // Keys never start with "a": the MapKeyRename test renames "app".
            proptest::collection::btree_map(
                "[b-z][a-z]{0,3}",
                arb_schema(values, &Overrides::new(), ""),
                0..3,
            )
            .prop_map(|m| Value::Object(m.into_iter().collect()))
            .boxed()
        }
        Shape::Object { has_properties: false, .. } => Just(json!({})).boxed(),
        Shape::Object { has_properties: true, .. } => match fs_children {
            Some(fs) => arb_schema(fs, &Overrides::new(), ""),
            None => Just(json!({})).boxed(),
        },
        Shape::Opaque { .. } => {
            // A union: exactly one branch key, as the oneOf demands.
            if node.describe().contains("oneOf") {
                prop_oneof![
                    "[a-z]{1,5}".prop_map(|s| json!({"a": s})),
                    "[a-z]{1,5}".prop_map(|s| json!({"b": s}))
                ]
                .boxed()
            } else {
                arb_free_form(2)
            }
        }
    }
}

/// An object for the interior node at `prefix` (root when empty): each child present or not.
fn arb_schema(fs: &FlatSchema, overrides: &Overrides, prefix: &str) -> BoxedStrategy<Value> {
    if !matches!(fs.root.shape, Shape::Object { has_properties: true, .. })
        || !prefix.is_empty() && fs.get(prefix).is_none()
    {
        return arb_node(&fs.root, None);
    }
    let mut fields: Vec<BoxedStrategy<Option<(String, Value)>>> = Vec::new();
    for child in fs.children(prefix) {
        let path = if prefix.is_empty() { child.to_string() } else { format!("{prefix}.{child}") };
        let Some(node) = fs.get(&path) else { continue };
        let strat = match overrides.get(path.as_str()) {
            Some(s) => s.clone(),
            None if matches!(node.shape, Shape::Object { has_properties: true, .. }) => {
                arb_schema(fs, overrides, &path)
            }
            None => arb_node(node, None),
        };
        let name = child.to_string();
        fields.push(proptest::option::weighted(0.7, strat.prop_map(move |v| (name.clone(), v))).boxed());
    }
    let all = fields.prop_map(|kvs| Value::Object(kvs.into_iter().flatten().collect()));
    if prefix.is_empty() {
        all.boxed()
    } else {
        // A nested object that holds nothing converts to an absent field under the
        // structural strategies (documented in docs/engine.md), so present ones hold a field.
        all.prop_filter("nested objects hold a field", |v| v.as_object().is_some_and(|o| !o.is_empty()))
            .boxed()
    }
}

fn arb_object(schema: &Value, api_version: &'static str, overrides: Overrides) -> BoxedStrategy<Value> {
    let fs = FlatSchema::object(schema);
    let conditions = proptest::collection::vec(
        ("[A-Z][a-z]{2,6}", prop_oneof![Just("True"), Just("False")])
            .prop_map(|(t, s)| json!({"type": t, "status": s, "reason": "Test"})),
        0..3,
    );
    (arb_schema(&fs, &overrides, ""), conditions, "[a-z]{1,10}")
        .prop_map(move |(mut body, conditions, name)| {
            if let Some(o) = body.as_object_mut() {
                o.insert("apiVersion".into(), json!(api_version));
                o.insert("kind".into(), json!("DB"));
                o.insert("metadata".into(), json!({"name": name, "namespace": "default"}));
                // Injected status.conditions are not declared: they must be copied through.
                if !conditions.is_empty() {
                    let status = o.entry("status").or_insert_with(|| json!({}));
                    if let Some(s) = status.as_object_mut() {
                        s.insert("conditions".into(), Value::Array(conditions));
                    }
                }
            }
            body
        })
        .boxed()
}

/// JSON numbers compare by value: 4 and 4.0 are the same number.
fn normalise(v: &Value) -> Value {
    match v {
        Value::Number(n) => match n.as_f64() {
            Some(f) if f.fract() == 0.0 && f.abs() < 9.0e15 => json!(f as i64),
            _ => v.clone(),
        },
        Value::Array(a) => Value::Array(a.iter().map(normalise).collect()),
        Value::Object(o) => Value::Object(o.iter().map(|(k, v)| (k.clone(), normalise(v))).collect()),
        other => other.clone(),
    }
}

fn spoke_overrides() -> Overrides {
    // FieldsToMap fails closed on keys no hub field takes; the schema cannot say which keys
    // a map has, so generate only the two that exist. An empty map gathers from no fields
    // and so comes back absent (documented in docs/engine.md): generate at least one key.
    let limits = proptest::collection::btree_map(
        prop_oneof![Just("cpuLimit".to_string()), Just("memoryLimit".to_string())],
        "[a-z0-9]{1,4}".prop_map(Value::from),
        1..=2,
    )
    .prop_map(|m| Value::Object(m.into_iter().collect()))
    .boxed();
    let mut o = Overrides::new();
    o.insert("spec.limits", limits);
    o
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, .. ProptestConfig::default() })]

    #[test]
    fn hub_spoke_hub_is_exact(obj in arb_object(&hub_schema(), HUB_AV, Overrides::new())) {
        let plan = plan();
        let spoke = plan.convert(&obj, SPOKE_AV).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(spoke["apiVersion"].as_str(), Some(SPOKE_AV));
        let back = plan.convert(&spoke, HUB_AV).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(normalise(&back), normalise(&obj), "via spoke {}", spoke);
    }

    #[test]
    fn spoke_hub_spoke_is_exact(obj in arb_object(&spoke_schema(), SPOKE_AV, spoke_overrides())) {
        let plan = plan();
        let hub = plan.convert(&obj, HUB_AV).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let back = plan.convert(&hub, SPOKE_AV).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(normalise(&back), normalise(&obj), "via hub {}", hub);
    }

    #[test]
    fn review_path_matches_plan_convert(objs in proptest::collection::vec(arb_object(&hub_schema(), HUB_AV, Overrides::new()), 1..4)) {
        let plan = plan();
        let body = serde_json::to_vec(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u", "desiredAPIVersion": SPOKE_AV, "objects": objs}})).unwrap_or_default();
        let out = dco_engine::convert_review(&plan, &body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&out.failure, &None);
        let resp: Value = serde_json::from_slice(&out.body).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let expected: Vec<Value> = objs.iter().map(|o| plan.convert(o, SPOKE_AV)).collect::<Result<_, _>>()
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(&resp["response"]["convertedObjects"], &Value::Array(expected));
    }

    /// Any JSON at all: conversion may fail, but never panics, and failures name the object.
    #[test]
    fn arbitrary_input_never_panics(spec_v in arb_free_form(4), meta in arb_free_form(2), to_hub in any::<bool>()) {
        let plan = plan();
        let (from, to) = if to_hub { (SPOKE_AV, HUB_AV) } else { (HUB_AV, SPOKE_AV) };
        let obj = json!({"apiVersion": from, "kind": "DB", "metadata": meta, "spec": spec_v.clone(), "status": spec_v});
        if let Err(e) = plan.convert(&obj, to) {
            prop_assert!(e.to_string().starts_with("DB "), "{}", e);
        }
    }

    #[test]
    fn arbitrary_review_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
        let _ = dco_engine::convert_review(&plan(), &bytes);
    }
}

// ---- lossy rules are flagged and refused without acknowledgement ----

fn lossy_cases() -> Vec<(Value, &'static str)> {
    vec![
        (
            json!({"strategy": "Delete", "delete": {"path": "spec.description", "existsOn": "Hub"}}),
            "hub→spoke",
        ),
        (
            json!({"strategy": "DefaultValue", "defaultValue": {"path": "spec.description", "existsOn": "Hub", "default": "x"}}),
            "hub→spoke",
        ),
        (
            json!({"strategy": "Constant", "constant": {"path": "spec.description", "existsOn": "Hub", "value": "x"}}),
            "hub→spoke",
        ),
        (
            json!({"strategy": "ToAnnotation", "toAnnotation": {"hubPath": "spec.description", "key": "d"}}),
            "spoke→hub",
        ),
        (
            json!({"strategy": "EnumRemap", "enumRemap": {"path": "spec.size", "mapping": [{"hub": "Small", "spoke": "S"}, {"hub": "Large", "spoke": "L"}], "onUnmappedHubValue": "Drop"}}),
            "hub→spoke",
        ),
        (
            json!({"strategy": "FieldsToMap", "fieldsToMap": {"hubPaths": ["spec.cpuLimit", "spec.memoryLimit"], "spokeMapPath": "spec.limits", "onUnknownSpokeKey": "Drop"}}),
            "spoke→hub",
        ),
        (
            json!({"strategy": "NumericScale", "numericScale": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize", "factor": 3.0}}),
            "hub→spoke",
        ),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, .. ProptestConfig::default() })]

    /// Swap one lossless rule for a lossy one: without acknowledgement the config is refused
    /// with an error naming the rule and direction; with it, it compiles and is not lossless.
    #[test]
    fn lossy_rules_need_acknowledgement(case in 0usize..7, at in 0usize..11) {
        let (lossy, dir) = lossy_cases()[case].clone();
        let mut rules: Vec<Value> = lossless_rules().as_array().cloned().unwrap_or_default();
        // Drop the lossless rules that claim the same fields, and make room for the new one.
        let touched: Vec<&str> = ["spec.description", "spec.size", "spec.cpuLimit", "spec.storageGB"].to_vec();
        rules.retain(|r| !touched.iter().any(|t| r.to_string().contains(&format!("\"{t}\""))));
        let at = at.min(rules.len());
        rules.insert(at, lossy.clone());
        let c = compile(&spec(Value::Array(rules.clone())), &target());
        let errors: Vec<String> = c.report.errors().map(|d| d.to_string()).collect();
        prop_assert!(c.plan.is_none());
        let needle = format!("rule {at} (");
        prop_assert!(errors.iter().any(|e| e.contains(&needle) && e.contains("rule is lossy") && e.contains(dir)), "{:#?}", errors);

        let mut acked = lossy;
        acked["acknowledgeLossy"] = json!(true);
        acked["reason"] = json!("accepted for the test");
        rules[at] = acked;
        let c = compile(&spec(Value::Array(rules)), &target());
        let lossy_errors: Vec<String> = c.report.errors().map(|d| d.to_string()).filter(|e| e.contains("rule is lossy")).collect();
        prop_assert!(lossy_errors.is_empty(), "{:#?}", lossy_errors);
        let verdict = c.report.spokes[0].rule_results[at].verdict;
        let lossy_dir = if dir == "hub→spoke" { verdict.hub_to_spoke } else { verdict.spoke_to_hub };
        prop_assert!(!lossy_dir, "verdict {:?}", verdict);
    }
}
