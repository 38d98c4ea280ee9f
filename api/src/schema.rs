//! Schema pieces the derive cannot express: free-form JSON values, the opaque nested rule
//! lists (a CRD schema cannot recurse) and the CEL checks that tie `strategy` to its block.

use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde_json::{Value, json};

use crate::rules::Strategy;

/// Any JSON value: a scalar, a list or an object.
pub fn any_value(_: &mut SchemaGenerator) -> Schema {
    json_schema!({ "x-kubernetes-preserve-unknown-fields": true })
}

pub fn any_value_opt(g: &mut SchemaGenerator) -> Schema {
    let mut s = any_value(g);
    s.insert("nullable".into(), Value::Bool(true));
    s
}

/// A map of keys to any JSON value.
pub fn any_map(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "additionalProperties": { "x-kubernetes-preserve-unknown-fields": true },
    })
}

/// Nested rules (ForEach, BranchMap): items kept verbatim, checked by the engine and admission.
pub fn opaque_rules(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "array",
        "items": { "type": "object", "x-kubernetes-preserve-unknown-fields": true },
    })
}

/// One CEL rule per strategy: its params block is set exactly when it is the strategy.
/// Together they say "exactly one params block, the one `strategy` names".
pub fn params_block_validations(schema: &mut Schema) {
    let rules: Vec<Value> = Strategy::ALL
        .iter()
        .map(|s| {
            let field = s.params_field();
            let name = s.name();
            json!({
                "rule": format!("has(self.{field}) == (self.strategy == '{name}')"),
                "message": format!("the params block `{field}` must be set when, and only when, strategy is {name}"),
                "fieldPath": format!(".{field}"),
            })
        })
        .collect();
    schema.insert("x-kubernetes-validations".into(), Value::Array(rules));
}

fn add_validation(schema: &mut Schema, rule: &str, message: &str) {
    let entry = json!({ "rule": rule, "message": message });
    match schema.get_mut("x-kubernetes-validations").and_then(Value::as_array_mut) {
        Some(list) => list.push(entry),
        None => {
            schema.insert("x-kubernetes-validations".into(), json!([entry]));
        }
    }
}

/// On a config's spec: `unmappedFieldPolicy: Warn` must say why.
pub fn warn_needs_reason(schema: &mut Schema) {
    add_validation(
        schema,
        "!has(self.unmappedFieldPolicy) || self.unmappedFieldPolicy != 'Warn' || (has(self.unmappedFieldReason) && self.unmappedFieldReason != '')",
        "unmappedFieldPolicy Warn needs unmappedFieldReason: say why unmapped fields may be dropped",
    );
}

/// On an unsigned integer field: schemars writes `format: uint32`, a format the apiserver's
/// OpenAPI does not know, so every `helm install` of the chart warned `unrecognized format
/// "uint32"`. The format goes; the `minimum` schemars wrote (0, or the field's own bound)
/// still says the value is unsigned.
pub fn unsigned(schema: &mut Schema) {
    if schema.get("format").and_then(Value::as_str).is_some_and(|f| f.starts_with("uint")) {
        schema.remove("format");
    }
}

/// On `autoscaling`: the bounds must be in order.
pub fn min_within_max(schema: &mut Schema) {
    add_validation(
        schema,
        "self.minReplicas <= self.maxReplicas",
        "autoscaling.minReplicas must not exceed autoscaling.maxReplicas",
    );
}

/// The schema of `T` as kube would put it into a CRD (used by tests and docs).
pub fn schema_of<T: JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).unwrap_or(Value::Null)
}

/// `metav1.Condition` list, merged by `type` as Kubernetes conventions expect.
pub fn conditions(g: &mut SchemaGenerator) -> Schema {
    let mut s = g.subschema_for::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>();
    s.insert("x-kubernetes-list-type".into(), json!("map"));
    s.insert("x-kubernetes-list-map-keys".into(), json!(["type"]));
    s
}
