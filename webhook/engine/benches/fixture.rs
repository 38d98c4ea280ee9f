//! Synthetic targets, configs and objects shared by the benchmarks.
#![allow(dead_code)]

use serde_json::{Value, json};

/// A CRD whose hub (v2) and spoke (v1) differ by `renames` renamed spec fields and a list of
/// items whose fields are renamed too (ForEach), plus untouched bulk.
pub fn review_target() -> Value {
    let mut hub = serde_json::Map::new();
    let mut spoke = serde_json::Map::new();
    for i in 0..16 {
        hub.insert(format!("hubField{i}"), json!({"type": "string"}));
        spoke.insert(format!("spokeField{i}"), json!({"type": "string"}));
    }
    for i in 0..40 {
        let f = json!({"type": "string"});
        hub.insert(format!("same{i}"), f.clone());
        spoke.insert(format!("same{i}"), f);
    }
    let item = |a: &str, b: &str| {
        json!({"type": "array", "items": {"type": "object", "properties": {
        a: {"type": "string"}, b: {"type": "integer"}, "kind": {"type": "string"}, "labels": {"type": "object", "additionalProperties": {"type": "string"}}}}})
    };
    hub.insert("volumes".into(), item("name", "sizeGB"));
    spoke.insert("vols".into(), item("label", "size"));
    hub.insert("replicas".into(), json!({"type": "integer"}));
    spoke.insert("replicaCount".into(), json!({"type": "integer"}));
    hub.insert("tier".into(), json!({"type": "string", "enum": ["Small", "Large"]}));
    spoke.insert("tier".into(), json!({"type": "string", "enum": ["S", "L"]}));
    let values = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    hub.insert("values".into(), values.clone());
    spoke.insert("values".into(), values);
    let schema = |spec: serde_json::Map<String, Value>| {
        json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": spec},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}})
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.bench.example.org"},
        "spec": {"group": "bench.example.org", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema(spoke)}},
                {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema(hub)}}]}})
}

/// 20 rules: 16 FieldRename, a FieldRename, an EnumRemap, and a ForEach with 2 nested rules.
pub fn review_config() -> Value {
    let mut rules: Vec<Value> = (0..16)
        .map(|i| json!({"strategy": "FieldRename", "fieldRename": {"hubPath": format!("spec.hubField{i}"), "spokePath": format!("spec.spokeField{i}")}}))
        .collect();
    rules.push(json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.replicas", "spokePath": "spec.replicaCount"}}));
    rules.push(json!({"strategy": "EnumRemap", "enumRemap": {"path": "spec.tier", "mapping": [{"hub": "Small", "spoke": "S"}, {"hub": "Large", "spoke": "L"}]}}));
    rules.push(json!({"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.volumes", "spokeItemsPath": "spec.vols", "rules": [
        {"strategy": "FieldRename", "fieldRename": {"hubPath": "name", "spokePath": "label"}},
        {"strategy": "FieldRename", "fieldRename": {"hubPath": "sizeGB", "spokePath": "size"}}]}}));
    json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]})
}

/// One hub object of about 10 KB.
pub fn hub_object(n: usize) -> Value {
    let mut spec = serde_json::Map::new();
    for i in 0..16 {
        spec.insert(format!("hubField{i}"), json!(format!("value-{n}-{i}-abcdefghijklmnop")));
    }
    for i in 0..40 {
        spec.insert(format!("same{i}"), json!(format!("same-{n}-{i}-qrstuvwxyz0123456789")));
    }
    spec.insert("replicas".into(), json!(3 + n % 5));
    spec.insert("tier".into(), json!(if n.is_multiple_of(2) { "Small" } else { "Large" }));
    spec.insert(
        "volumes".into(),
        Value::Array(
            (0..8)
                .map(|v| {
                    json!({"name": format!("vol-{v}"), "sizeGB": 10 * v, "kind": "ssd",
            "labels": {"team": "platform", "env": "prod"}})
                })
                .collect(),
        ),
    );
    let blob: serde_json::Map<String, Value> = (0..75)
        .map(|i| (format!("key{i}"), json!({"nested": {"a": i, "b": format!("text-{i}-lorem-ipsum-dolor-sit-amet"), "c": [1, 2, 3]}})))
        .collect();
    spec.insert("values".into(), Value::Object(blob));
    json!({
        "apiVersion": "bench.example.org/v2", "kind": "Widget",
        "metadata": {"name": format!("widget-{n}"), "namespace": "default", "uid": format!("0000-{n}"),
            "resourceVersion": "12345", "generation": 3, "creationTimestamp": "2026-01-01T00:00:00Z",
            "labels": {"app": "widget", "tier": "backend"},
            "annotations": {"example.org/note": "a note that makes the object a little larger than it would otherwise be"}},
        "spec": spec,
        "status": {"conditions": [
            {"type": "Ready", "status": "True", "reason": "Available", "message": "all good", "lastTransitionTime": "2026-01-01T00:00:00Z"},
            {"type": "Synced", "status": "True", "reason": "ReconcileSuccess", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "observedGeneration": 3}
    })
}

/// A ConversionReview of `n` hub objects asking for the spoke.
pub fn review_body(n: usize) -> Vec<u8> {
    let objects: Vec<Value> = (0..n).map(hub_object).collect();
    serde_json::to_vec(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "bench", "desiredAPIVersion": "bench.example.org/v1", "objects": objects}}))
    .unwrap_or_default()
}

/// A hub/spoke pair with `groups × per_group` leaves each; `renamed` of them differ by name.
pub fn wide_target(groups: usize, per_group: usize, renamed: usize) -> (Value, Value) {
    let mut hub = serde_json::Map::new();
    let mut spoke = serde_json::Map::new();
    let mut rules = Vec::new();
    let types = ["string", "integer", "boolean", "number"];
    for g in 0..groups {
        let mut hp = serde_json::Map::new();
        let mut sp = serde_json::Map::new();
        for f in 0..per_group {
            let t = json!({"type": types[(g + f) % types.len()]});
            let idx = g * per_group + f;
            if idx < renamed {
                hp.insert(format!("old{f}"), t.clone());
                sp.insert(format!("new{f}"), t);
                rules.push(json!({"strategy": "FieldRename", "fieldRename": {
                    "hubPath": format!("spec.group{g}.old{f}"), "spokePath": format!("spec.group{g}.new{f}")}}));
            } else {
                hp.insert(format!("field{f}"), t.clone());
                sp.insert(format!("field{f}"), t);
            }
        }
        hub.insert(format!("group{g}"), json!({"type": "object", "properties": hp}));
        spoke.insert(format!("group{g}"), json!({"type": "object", "properties": sp}));
    }
    let schema = |spec: serde_json::Map<String, Value>| {
        json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": spec}}})
    };
    let target = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "wides.bench.example.org"},
        "spec": {"group": "bench.example.org", "names": {"kind": "Wide", "plural": "wides"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema(spoke)}},
                {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema(hub)}}]}});
    let config = json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]});
    (target, config)
}

/// The webhook load benchmark's target (`hack/bench/webhook-fixtures`): v2 (hub) and v1 differ
/// by one field name.
pub fn widget_target() -> Value {
    let schema = |size_field: &str| {
        json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                size_field: {"type": "integer"}, "replicas": {"type": "integer"}, "tier": {"type": "string"},
                "owner": {"type": "string"},
                "settings": {"type": "object", "additionalProperties": {"type": "string"}},
                "items": {"type": "array", "items": {"type": "object", "properties": {
                    "name": {"type": "string"}, "value": {"type": "string"}, "weight": {"type": "integer"}}}}}},
            "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}})
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.bench.dco.rs"},
        "spec": {"group": "bench.dco.rs", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
            "versions": [
                {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema("storageGB")}},
                {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema("storageSize")}}]}})
}

pub fn widget_config() -> Value {
    json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
        {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]})
}

/// The review `hack/bench/webhook-load` sends (it includes this file): `n` widgets of about
/// `object_bytes` each at `from`, asking for `to`.
pub fn widget_review(n: usize, object_bytes: usize, from: &str, to: &str) -> Vec<u8> {
    let widget = |i: usize| {
        let mut items = Vec::new();
        loop {
            let obj = json!({
                "apiVersion": from, "kind": "Widget",
                "metadata": {"name": format!("widget-{i:05}"), "namespace": "bench", "uid": format!("00000000-0000-0000-0000-{i:012}"),
                    "resourceVersion": "12345", "generation": 3, "labels": {"team": "storage", "env": "prod"}},
                "spec": {"storageSize": 100 + i, "replicas": 3, "tier": "gold", "owner": "team-storage",
                    "settings": {"retention": "30d", "backup": "nightly", "region": "eu-west-1"},
                    "items": items.clone()},
                "status": {"phase": "Ready"},
            });
            if obj.to_string().len() >= object_bytes {
                return obj;
            }
            let k = items.len();
            items.push(json!({"name": format!("item-{k:04}"), "value": "v".repeat(96), "weight": k}));
        }
    };
    let objects: Vec<Value> = (0..n).map(widget).collect();
    serde_json::to_vec(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
        "request": {"uid": "bench", "desiredAPIVersion": to, "objects": objects}}))
    .unwrap_or_default()
}

/// 1500 v1 widgets of ~10 KB asking for v2: the webhook load benchmark's default review.
pub fn widget_review_body(n: usize) -> Vec<u8> {
    widget_review(n, 10 * 1024, "bench.dco.rs/v1", "bench.dco.rs/v2")
}
