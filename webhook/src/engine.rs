//! The production compiler and plan: `dco_engine` behind the webhook's traits.

use std::sync::Arc;

use dco_api::config::ConversionSpec;
use dco_engine::{Plan, ReviewError, Target};

use crate::plan::{BadReview, Compilation, Compiler, Reviewed, ServablePlan};

/// Compiles with `dco_engine::compile`.
#[derive(Clone, Copy, Debug, Default)]
pub struct EngineCompiler;

impl Compiler for EngineCompiler {
    fn compile(&self, spec: &ConversionSpec, target: &serde_json::Value) -> Compilation {
        let target = match Target::from_value(target) {
            Ok(t) => t,
            Err(e) => {
                return Compilation {
                    plan: None,
                    errors: vec![e.to_string()],
                    locations: vec!["the target".to_string()],
                    warnings: Vec::new(),
                };
            }
        };
        let compiled = dco_engine::compile(spec, &target);
        let errors = compiled.report.errors().map(ToString::to_string).collect();
        let locations = compiled.report.errors().map(location).collect();
        let warnings = compiled.report.warnings().map(ToString::to_string).collect();
        Compilation {
            plan: compiled.plan.map(|p| EnginePlan(p).into_servable()),
            errors,
            locations,
            warnings,
        }
    }
}

/// Where a diagnostic is, as its `Display` names it, without the message.
fn location(d: &dco_engine::diagnostic::Diagnostic) -> String {
    let mut parts = Vec::new();
    if let Some(s) = &d.spoke {
        parts.push(format!("spoke {s}"));
    }
    match (d.rule_label(), d.strategy) {
        (Some(r), Some(st)) => parts.push(format!("rule {r} ({st})")),
        (Some(r), None) => parts.push(format!("rule {r}")),
        (None, Some(st)) => parts.push(st.to_string()),
        (None, None) => {}
    }
    if !d.paths.is_empty() {
        parts.push(d.paths.join(", "));
    }
    if parts.is_empty() { "the config".to_string() } else { parts.join(", ") }
}

/// A compiled engine plan.
pub struct EnginePlan(pub Arc<Plan>);

impl EnginePlan {
    fn into_servable(self) -> Arc<dyn ServablePlan> {
        Arc::new(self)
    }
}

impl ServablePlan for EnginePlan {
    fn hub_version(&self) -> &str {
        self.0.hub_version()
    }

    fn versions(&self) -> Vec<String> {
        self.0.versions().into_iter().map(str::to_string).collect()
    }

    fn hash(&self) -> String {
        self.0.hash()
    }

    fn review(&self, body: &[u8]) -> Result<Reviewed, BadReview> {
        match dco_engine::convert_review(&self.0, body) {
            Ok(o) => {
                // The JSON may start past the buffer's beginning (see `ResponseBody`); the
                // slice shares the buffer rather than copying ~15 MB.
                let (buf, start) = o.body.into_parts();
                let body = bytes::Bytes::from(buf).slice(start..);
                Ok(Reviewed {
                    body,
                    uid: o.uid,
                    objects: o.objects,
                    failure: o.failure,
                    to: o.to,
                    tally: o.tally,
                })
            }
            Err(ReviewError::Malformed(m)) => Err(BadReview::Malformed(m)),
            Err(ReviewError::MissingRequest) => Err(BadReview::MissingRequest),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn locations_name_where_an_error_is_without_its_text() {
        let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.org"},
            "spec": {"group": "example.org", "names": {"kind": "Widget", "plural": "widgets"}, "scope": "Namespaced",
                "versions": [
                    {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object",
                        "properties": {"spec": {"type": "object", "properties": {"tier": {"type": "string", "enum": ["SecretGold"]}}}}}}},
                    {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": {"type": "object",
                        "properties": {"spec": {"type": "object", "properties": {"level": {"type": "string", "enum": ["SecretSilver"]}}}}}}}]}});
        let spec: ConversionSpec = serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.nope", "spokePath": "spec.level"}}]}]}))
        .unwrap();
        let c = EngineCompiler.compile(&spec, &crd);
        assert!(c.plan.is_none());
        assert!(!c.errors.is_empty());
        assert_eq!(c.errors.len(), c.locations.len());
        assert!(
            c.locations.iter().any(|l| l.starts_with("spoke v1, rule 0 (FieldRename)")),
            "{:?}",
            c.locations
        );
        for l in &c.locations {
            assert!(!l.contains("Secret"), "{l}");
        }
    }
}
