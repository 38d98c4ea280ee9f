//! Helpers for strategy tests: a two-version CRD built from property maps, and objects.

use std::sync::Arc;

use dco_api::config::ConversionSpec;
use serde_json::{Value, json};

use crate::{Compiled, Plan, Target, compile};

pub const HUB_AV: &str = "example.org/v2";
pub const SPOKE_AV: &str = "example.org/v1";

/// An object schema whose `spec` has `spec_props`.
pub fn obj_schema(spec_props: Value) -> Value {
    json!({"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": spec_props}}})
}

/// Like [`obj_schema`], with `spec` required and `required` required within it: fields an
/// object always has (rules that read a field need it present, `strategies::absent`).
pub fn obj_schema_required(spec_props: Value, required: &[&str]) -> Value {
    json!({"type": "object", "required": ["spec"], "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "required": required, "properties": spec_props}}})
}

/// A CRD with hub (storage) v2 and spoke v1.
pub fn crd(hub: &Value, spoke: &Value) -> Target {
    let v = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "dbs.example.org"},
        "spec": {"group": "example.org", "names": {"kind": "DB", "plural": "dbs"}, "scope": "Namespaced",
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": spoke}},
                {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": hub}}]}});
    Target::from_value(&v).expect("test CRD")
}

pub fn spec_with(rules: Value) -> ConversionSpec {
    serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}))
        .expect("test spec parses")
}

pub fn compile_rules(hub: &Value, spoke: &Value, rules: Value) -> Compiled {
    compile(&spec_with(rules), &crd(hub, spoke))
}

/// Compiles and insists on a plan, printing the diagnostics otherwise.
pub fn plan_for(hub: &Value, spoke: &Value, rules: Value) -> Arc<Plan> {
    let c = compile_rules(hub, spoke, rules);
    match c.plan {
        Some(p) => p,
        None => panic!(
            "expected a plan, got:\n{}",
            c.report.diagnostics.iter().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
        ),
    }
}

/// The first error's text (panics when compile succeeded).
pub fn first_error(c: &Compiled) -> String {
    assert!(c.plan.is_none(), "expected compile errors, got a plan");
    c.report.errors().next().map(|d| d.to_string()).expect("an error diagnostic")
}

#[allow(dead_code)]
pub fn all_errors(c: &Compiled) -> String {
    c.report.errors().map(|d| d.to_string()).collect::<Vec<_>>().join("\n")
}

pub fn obj(api_version: &str, spec: Value) -> Value {
    json!({"apiVersion": api_version, "kind": "DB", "metadata": {"name": "db1", "namespace": "default"}, "spec": spec})
}

pub fn hub_obj(spec: Value) -> Value {
    obj(HUB_AV, spec)
}

pub fn spoke_obj(spec: Value) -> Value {
    obj(SPOKE_AV, spec)
}
