//! Every worked example in docs/strategies.md is compiled and converted both ways, so the
//! documentation cannot drift from what the engine does.

use std::path::PathBuf;

use dco_api::config::ConversionSpec;
use dco_api::rules::Strategy;
use dco_engine::{Target, compile};
use serde_json::{Value, json};

struct Example {
    title: String,
    blocks: Vec<(String, String)>,
}

impl Example {
    fn block(&self, name: &str) -> Option<Value> {
        self.blocks.iter().find(|(n, _)| n == name).map(|(_, text)| {
            serde_yaml::from_str::<Value>(text)
                .unwrap_or_else(|e| panic!("{}: block {name} is not YAML: {e}", self.title))
        })
    }
}

/// Sections (`## Title`) with their ```` ```yaml <name> ```` blocks.
fn examples() -> Vec<Example> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/strategies.md");
    let text = std::fs::read_to_string(&path).expect("docs/strategies.md");
    let mut out: Vec<Example> = Vec::new();
    let mut current: Option<(String, String)> = None;
    for line in text.lines() {
        if let Some((name, body)) = &mut current {
            if line == "```" {
                let (name, body) = current.take().unwrap();
                if let Some(ex) = out.last_mut() {
                    ex.blocks.push((name, body));
                }
            } else {
                body.push_str(line);
                body.push('\n');
                let _ = name;
            }
            continue;
        }
        if let Some(title) = line.strip_prefix("## ") {
            out.push(Example { title: title.trim().to_string(), blocks: Vec::new() });
        } else if let Some(name) = line.strip_prefix("```yaml ") {
            current = Some((name.trim().to_string(), String::new()));
        }
    }
    out
}

/// Every example object has a spec: required, so a field the example's schema requires or
/// defaults is on every object (JSONPatch relies on it).
fn object_schema(props: Value) -> Value {
    json!({"type": "object", "required": ["spec"], "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": props}}})
}

fn object(version: &str, body: Value) -> Value {
    let mut obj = json!({"apiVersion": format!("example.org/{version}"), "kind": "Example", "metadata": {"name": "example"}});
    if let Value::Object(m) = body {
        for (k, v) in m {
            if k == "metadata" {
                for (mk, mv) in v.as_object().cloned().unwrap_or_default() {
                    obj["metadata"][mk] = mv;
                }
            } else {
                obj[k] = v;
            }
        }
    }
    obj
}

#[test]
fn every_strategy_has_a_checked_example() {
    let examples = examples();
    let titles: Vec<&str> = examples.iter().map(|e| e.title.as_str()).collect();
    for s in Strategy::ALL {
        assert!(titles.contains(&s.name()), "docs/strategies.md has no section for {s}");
    }
    let mut checked = 0;
    for ex in &examples {
        let Some(rules) = ex.block("rule") else { continue };
        let hub_schema = object_schema(ex.block("hub-schema").unwrap_or(json!({})));
        let spoke_schema = object_schema(ex.block("spoke-schema").unwrap_or(json!({})));
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "examples.example.org"},
            "spec": {"group": "example.org", "names": {"kind": "Example", "plural": "examples"}, "scope": "Namespaced",
                "versions": [
                    {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": hub_schema}},
                    {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": spoke_schema}}]}});
        let target = Target::from_value(&crd).unwrap_or_else(|e| panic!("{}: {e}", ex.title));
        let spec: ConversionSpec = serde_json::from_value(
            json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}),
        )
        .unwrap_or_else(|e| panic!("{}: the rule does not parse: {e}", ex.title));
        let compiled = compile(&spec, &target);
        let diags: Vec<String> = compiled.report.diagnostics.iter().map(|d| d.to_string()).collect();
        let plan = compiled
            .plan
            .unwrap_or_else(|| panic!("{}: the example does not compile:\n{}", ex.title, diags.join("\n")));
        let hub = object("v2", ex.block("hub").expect("hub block"));
        let spoke = object("v1", ex.block("spoke").expect("spoke block"));
        let back = ex.block("hub-back").map(|b| object("v2", b)).unwrap_or_else(|| hub.clone());
        let got = plan
            .convert(&hub, "example.org/v1")
            .unwrap_or_else(|e| panic!("{}: hub→spoke failed: {e}", ex.title));
        assert_eq!(got, spoke, "{}: hub→spoke", ex.title);
        let got = plan
            .convert(&spoke, "example.org/v2")
            .unwrap_or_else(|e| panic!("{}: spoke→hub failed: {e}", ex.title));
        assert_eq!(got, back, "{}: spoke→hub", ex.title);
        checked += 1;
    }
    assert_eq!(checked, 30, "one checked example per strategy");
}
