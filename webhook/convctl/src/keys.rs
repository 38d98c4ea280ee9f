//! Which keys and values a config may hold, taken from the CRD schema that `crdgen` generates
//! from the Rust types, so convctl refuses exactly what the apiserver's schema does not
//! declare. Rules nested in ForEach and BranchMap are stored opaquely in the CRD (a CRD schema
//! cannot recurse); here they are checked against the schema of a top-level rule, so every
//! level gets the same check.

use dco_api::config::TargetKind;
use serde_json::Value;

use crate::locate::FieldPath;

/// One thing the schema refuses, with the fix in its message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    pub path: FieldPath,
    pub message: String,
}

/// The keys every Kubernetes object has above its spec; `metadata` is not checked.
const OBJECT_KEYS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// The most similar candidate, when one is similar enough to be the intended word.
pub fn closest<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let w = word.to_lowercase();
    candidates
        .into_iter()
        .map(|c| (c, strsim::normalized_damerau_levenshtein(&w, &c.to_lowercase())))
        .filter(|(_, score)| *score >= 0.6)
        .max_by(|a, b| a.1.total_cmp(&b.1))
        .map(|(c, _)| c)
}

/// The openAPIV3Schema of dco's CRD for `kind` (`XRDConversionConfig`,
/// `ConversionWebhookServer`…); null for a kind dco does not define.
pub fn crd_schema(kind: &str) -> Value {
    let crds = serde_json::to_value(dco_api::crds()).unwrap_or(Value::Null);
    crds.as_array()
        .into_iter()
        .flatten()
        .find(|c| c.pointer("/spec/names/kind").and_then(Value::as_str) == Some(kind))
        .and_then(|c| c.pointer("/spec/versions/0/schema/openAPIV3Schema"))
        .cloned()
        .unwrap_or(Value::Null)
}

/// The schema of one top-level rule in a config CRD's schema: what nested rules, stored
/// opaquely, are read as.
pub fn rule_schema(config_schema: &Value) -> Option<&Value> {
    config_schema.pointer("/properties/spec/properties/spokes/items/properties/rules/items")
}

/// Checks a whole config document (`apiVersion`, `kind`, `metadata`, `spec`, `status`).
pub fn check(doc: &Value, kind: TargetKind) -> Vec<Problem> {
    let schema = crd_schema(match kind {
        TargetKind::Xrd => "XRDConversionConfig",
        TargetKind::Crd => "CRDConversionConfig",
    });
    let rule = rule_schema(&schema).cloned().unwrap_or(Value::Null);
    let mut walk = Walk { rule: &rule, out: Vec::new() };
    let Some(obj) = doc.as_object() else {
        walk.problem(FieldPath::default(), "a config is a mapping (apiVersion, kind, metadata, spec)".into());
        return walk.out;
    };
    let props = schema.get("properties").and_then(Value::as_object);
    let known: Vec<&str> = OBJECT_KEYS
        .iter()
        .copied()
        .chain(props.into_iter().flat_map(|p| p.keys().map(String::as_str)))
        .collect();
    let root = FieldPath::default();
    for (k, v) in obj {
        match props.and_then(|p| p.get(k)) {
            Some(s) => walk.value(v, s, root.child(k)),
            None if OBJECT_KEYS.contains(&k.as_str()) => {}
            None => walk.unknown_key(&root, k, &known),
        }
    }
    walk.missing(obj, &schema, &root, &known);
    walk.out
}

struct Walk<'a> {
    /// The schema of one rule, for nested rule lists.
    rule: &'a Value,
    out: Vec<Problem>,
}

fn type_name(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(n) if n.is_i64() || n.is_u64() => "an integer",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

fn type_fits(want: &str, v: &Value) -> bool {
    match want {
        "string" => v.is_string(),
        "boolean" => v.is_boolean(),
        "integer" => v.is_i64() || v.is_u64(),
        "number" => v.is_number(),
        "array" => v.is_array(),
        "object" => v.is_object(),
        _ => true,
    }
}

fn wanted(want: &str) -> &'static str {
    match want {
        "string" => "a string",
        "boolean" => "true or false",
        "integer" => "an integer",
        "number" => "a number",
        "array" => "a list",
        "object" => "a mapping",
        _ => "another type",
    }
}

/// A nested rule list: stored opaquely in the CRD, checked here as rules.
fn opaque_rules(key: &str, schema: &Value) -> bool {
    key == "rules"
        && schema.pointer("/items/x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool)
            == Some(true)
}

impl Walk<'_> {
    fn problem(&mut self, path: FieldPath, message: String) {
        self.out.push(Problem { path, message });
    }

    fn unknown_key(&mut self, at: &FieldPath, key: &str, known: &[&str]) {
        let fix = match closest(key, known.iter().copied()) {
            Some(c) => format!("did you mean `{c}`?"),
            None if known.len() <= 12 => format!("the keys here are {}", known.join(", ")),
            None => "see docs/configuration.md for the keys".to_string(),
        };
        self.problem(at.child(key), format!("unknown key `{key}`; {fix}"));
    }

    /// Required keys that are absent, unless an unknown key here is their misspelling (that
    /// error already names them: one mistake, one message).
    fn missing(
        &mut self,
        obj: &serde_json::Map<String, Value>,
        schema: &Value,
        at: &FieldPath,
        known: &[&str],
    ) {
        let Some(required) = schema.get("required").and_then(Value::as_array) else { return };
        for r in required.iter().filter_map(Value::as_str) {
            if obj.contains_key(r) {
                continue;
            }
            let misspelt = obj.keys().any(|k| !known.contains(&k.as_str()) && closest(k, [r]).is_some());
            if !misspelt {
                self.problem(at.child(r), format!("missing required key `{r}`; add it here"));
            }
        }
    }

    fn value(&mut self, v: &Value, schema: &Value, at: FieldPath) {
        if v.is_null() && schema.get("nullable").and_then(Value::as_bool) == Some(true) {
            return;
        }
        let free = schema.get("x-kubernetes-preserve-unknown-fields").and_then(Value::as_bool) == Some(true);
        if let Some(want) = schema.get("type").and_then(Value::as_str)
            && !type_fits(want, v)
        {
            let hint = if want == "string" && !v.is_object() && !v.is_array() { "; quote it" } else { "" };
            self.problem(at, format!("expects {}, found {}{hint}", wanted(want), type_name(v)));
            return;
        }
        if let (Some(allowed), Some(s)) = (schema.get("enum").and_then(Value::as_array), v.as_str()) {
            let names: Vec<&str> = allowed.iter().filter_map(Value::as_str).collect();
            if !names.contains(&s) {
                let what = if at.0.last() == Some(&crate::locate::Seg::Key("strategy".into())) {
                    "strategy"
                } else {
                    "value"
                };
                let fix = match closest(s, names.iter().copied()) {
                    Some(c) => format!("did you mean `{c}`?"),
                    None if names.len() <= 8 => format!("use one of {}", names.join(", ")),
                    None => format!("the {} strategies are listed in docs/strategies.md", names.len()),
                };
                self.problem(at, format!("unknown {what} `{s}`; {fix}"));
            }
            return;
        }
        match v {
            Value::Object(obj) => self.object(obj, schema, at, free),
            Value::Array(items) => {
                let Some(item) = schema.get("items") else { return };
                for (i, it) in items.iter().enumerate() {
                    self.value(it, item, at.item(i));
                }
            }
            _ => {}
        }
    }

    fn object(&mut self, obj: &serde_json::Map<String, Value>, schema: &Value, at: FieldPath, free: bool) {
        let props = schema.get("properties").and_then(Value::as_object);
        let extra = schema.get("additionalProperties").filter(|a| a.is_object());
        if props.is_none() {
            if let Some(each) = extra {
                for (k, v) in obj {
                    self.value(v, each, at.child(k));
                }
            }
            return;
        }
        let props = props.expect("checked above");
        let known: Vec<&str> = props.keys().map(String::as_str).collect();
        for (k, v) in obj {
            match props.get(k) {
                Some(s) if opaque_rules(k, s) => {
                    let rule = self.rule;
                    let list = serde_json::json!({ "type": "array", "items": rule });
                    self.value(v, &list, at.child(k));
                }
                Some(s) => self.value(v, s, at.child(k)),
                None if free => {}
                None => match extra {
                    Some(each) => self.value(v, each, at.child(k)),
                    None => self.unknown_key(&at, k, &known),
                },
            }
        }
        self.missing(obj, schema, &at, &known);
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn problems(spec: Value) -> Vec<(String, String)> {
        let doc = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": "x", "anything": {"goes": 1}}, "spec": spec});
        check(&doc, TargetKind::Crd).into_iter().map(|p| (p.path.to_string(), p.message)).collect()
    }

    fn spec(rules: Value) -> Value {
        json!({"targetCRD": {"name": "w.example.org"}, "hubVersion": "v2",
            "spokes": [{"version": "v1", "rules": rules}]})
    }

    #[test]
    fn a_valid_config_has_no_problem() {
        let rules = json!([
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"},
             "when": {"path": "spec.k", "equals": {"any": ["thing"]}}, "acknowledgeLossy": true, "reason": "r"},
            {"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.i", "spokeItemsPath": "spec.i",
             "rules": [{"strategy": "Delete", "delete": {"path": "x", "existsOn": "Hub"}}]}},
            {"strategy": "MapKeyRename", "mapKeyRename": {"hubPath": "a", "spokePath": "b", "renames": {"k": "v"}}},
        ]);
        assert_eq!(problems(spec(rules)), vec![]);
    }

    #[test]
    fn unknown_keys_are_named_with_their_path_and_the_closest_key() {
        let mut s = spec(json!([{"strategy": "Delete", "delete": {"path": "x", "existsOn": "Hub"},
            "wehn": {"path": "a", "equals": 1}, "acknowledgeLossey": true}]));
        s["hubVersoin"] = s["hubVersion"].take();
        s.as_object_mut().unwrap().remove("hubVersion");
        assert_eq!(
            problems(s),
            vec![
                ("spec.hubVersoin".into(), "unknown key `hubVersoin`; did you mean `hubVersion`?".into()),
                (
                    "spec.spokes[0].rules[0].acknowledgeLossey".into(),
                    "unknown key `acknowledgeLossey`; did you mean `acknowledgeLossy`?".into()
                ),
                ("spec.spokes[0].rules[0].wehn".into(), "unknown key `wehn`; did you mean `when`?".into()),
            ],
            "no `missing hubVersion` follows the misspelling"
        );
    }

    #[test]
    fn nested_rules_are_checked_like_top_level_ones() {
        let rules = json!([
            {"strategy": "ForEach", "forEach": {"hubItemsPath": "a", "spokeItemsPath": "a",
             "rules": [{"strategy": "FieldRename", "fieldRename": {"hubPth": "x", "spokePath": "y"}}]}},
            {"strategy": "BranchMap", "branchMap": {"hubPath": "u", "spokePath": "u", "branches": [
                {"hub": "a", "spoke": "a", "rules": [{"strategy": "Constant",
                  "constant": {"path": "k", "existsOn": "Hub", "value": 1}, "wen": {}}]}]}},
        ]);
        assert_eq!(
            problems(spec(rules)),
            vec![
                (
                    "spec.spokes[0].rules[0].forEach.rules[0].fieldRename.hubPth".into(),
                    "unknown key `hubPth`; did you mean `hubPath`?".into()
                ),
                (
                    "spec.spokes[0].rules[1].branchMap.branches[0].rules[0].wen".into(),
                    "unknown key `wen`; did you mean `when`?".into()
                ),
            ]
        );
    }

    #[test]
    fn a_misspelt_strategy_gets_one_suggestion_not_the_list() {
        let p = problems(spec(
            json!([{"strategy": "FieldRenam", "fieldRename": {"hubPath": "a", "spokePath": "b"}}]),
        ));
        assert_eq!(
            p,
            vec![(
                "spec.spokes[0].rules[0].strategy".into(),
                "unknown strategy `FieldRenam`; did you mean `FieldRename`?".into()
            )]
        );
        let p = problems(spec(json!([{"strategy": "Teleport"}])));
        assert_eq!(p[0].1, "unknown strategy `Teleport`; the 30 strategies are listed in docs/strategies.md");
        let p = problems(spec(json!([{"strategy": "Delete", "delete": {"path": "x", "existsOn": "Both"}}])));
        assert_eq!(p[0].1, "unknown value `Both`; use one of Hub, Spoke");
    }

    #[test]
    fn missing_keys_wrong_types_and_top_level_keys() {
        let mut s = spec(json!([{"strategy": "Delete", "delete": {"existsOn": "Hub"}}]));
        s["spokes"][0]["version"] = json!(1);
        assert_eq!(
            problems(s),
            vec![
                (
                    "spec.spokes[0].rules[0].delete.path".into(),
                    "missing required key `path`; add it here".into()
                ),
                ("spec.spokes[0].version".into(), "expects a string, found an integer; quote it".into()),
            ]
        );
        let doc = json!({"apiVersion": "a", "kind": "CRDConversionConfig", "specs": {}});
        let p: Vec<String> = check(&doc, TargetKind::Crd).into_iter().map(|p| p.message).collect();
        assert_eq!(p, vec!["unknown key `specs`; did you mean `spec`?"], "and no `missing spec` after it");
    }

    #[test]
    fn closest_needs_real_similarity() {
        assert_eq!(closest("rule", ["rules", "version"]), Some("rules"));
        assert_eq!(closest("hubpath", ["hubPath", "spokePath"]), Some("hubPath"));
        assert_eq!(closest("zzz", ["rules", "version"]), None);
    }
}
