//! Crossplane's own fields in composite resources (XRs) and their claims.
//!
//! Crossplane renders an XRD into the XR's CRD (and, for a `LegacyCluster` XRD with
//! `claimNames`, the claim's CRD) by adding its own fields to the XRD's schema, overriding
//! any the XRD declares under the same name (crossplane-runtime v2.3.0, `pkg/xcrd`
//! `CompositeResourceSpecProps`, `CompositeResourceClaimSpecProps`,
//! `CompositeResourceStatusProps`). Those fields belong to Crossplane: rules may not read or
//! write them (an error naming the rule and the fix), they are left out of the schemas rules
//! are compiled against (so the leftover scan never copies, compares or drops them), and
//! every conversion carries them through unchanged, on both kinds, in both directions.
//!
//! The XR and the claim share the user's part of the schema: they differ only in Crossplane's
//! fields. A path Crossplane owns on either kind is refused on both, so one set of rules
//! converts both kinds (docs/engine.md, "Crossplane targets").

use std::borrow::Cow;

use dco_api::rules::{ConversionRule, Params};
use serde_json::Value;

use crate::diagnostic::{Diagnostic, Severity};

/// An XRD's `spec.scope`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Scope {
    /// Crossplane 2's default (API v2): a namespaced XR, Crossplane's fields under
    /// `spec.crossplane`.
    Namespaced,
    /// A cluster-scoped XR with Crossplane's fields under `spec.crossplane`.
    Cluster,
    /// Crossplane 1's layout (API v1's default): Crossplane's fields directly under `spec`,
    /// and claims.
    LegacyCluster,
}

impl Scope {
    pub fn parse(s: &str) -> Option<Scope> {
        match s {
            "Namespaced" => Some(Scope::Namespaced),
            "Cluster" => Some(Scope::Cluster),
            "LegacyCluster" => Some(Scope::LegacyCluster),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Scope::Namespaced => "Namespaced",
            Scope::Cluster => "Cluster",
            Scope::LegacyCluster => "LegacyCluster",
        }
    }

    /// The scope of an XRD that sets none: the schema default of the API version it was
    /// read at (`apiextensions.crossplane.io/v1`: LegacyCluster, `v2`: Namespaced).
    pub fn default_for(api_version: &str) -> Scope {
        match api_version.rsplit_once('/').map(|(_, v)| v) {
            Some("v1") => Scope::LegacyCluster,
            _ => Scope::Namespaced,
        }
    }
}

/// The names of an XRD's claim (`spec.claimNames`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClaimNames {
    pub kind: String,
    pub plural: String,
}

/// What an XRD says about the objects Crossplane defines from it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Composite {
    pub scope: Scope,
    /// Only for `LegacyCluster`: Crossplane refuses claims on the other scopes.
    pub claim: Option<ClaimNames>,
}

/// Crossplane's fields in a Namespaced or Cluster XR.
const XR_MODERN: &[&str] = &["spec.crossplane", "status.conditions"];

/// Crossplane's fields in a LegacyCluster XR.
const XR_LEGACY: &[&str] = &[
    "spec.compositionRef",
    "spec.compositionSelector",
    "spec.compositionRevisionRef",
    "spec.compositionRevisionSelector",
    "spec.compositionUpdatePolicy",
    "spec.resourceRefs",
    "spec.claimRef",
    "spec.writeConnectionSecretToRef",
    "status.conditions",
    "status.connectionDetails",
    "status.claimConditionTypes",
];

/// Crossplane's fields in a claim.
const CLAIM: &[&str] = &[
    "spec.compositionRef",
    "spec.compositionSelector",
    "spec.compositionRevisionRef",
    "spec.compositionRevisionSelector",
    "spec.compositionUpdatePolicy",
    "spec.compositeDeletePolicy",
    "spec.resourceRef",
    "spec.writeConnectionSecretToRef",
    "status.conditions",
    "status.connectionDetails",
    "status.claimConditionTypes",
];

/// One path Crossplane owns, and on which kinds of object.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owned {
    pub path: &'static str,
    pub on_composite: bool,
    pub on_claim: bool,
}

impl Composite {
    /// The paths Crossplane owns on the objects of this XRD, each once.
    pub fn owned(&self) -> Vec<Owned> {
        let xr = match self.scope {
            Scope::Namespaced | Scope::Cluster => XR_MODERN,
            Scope::LegacyCluster => XR_LEGACY,
        };
        let mut out: Vec<Owned> =
            xr.iter().map(|&path| Owned { path, on_composite: true, on_claim: false }).collect();
        if self.claim.is_some() {
            for &path in CLAIM {
                match out.iter_mut().find(|o| o.path == path) {
                    Some(o) => o.on_claim = true,
                    None => out.push(Owned { path, on_composite: false, on_claim: true }),
                }
            }
        }
        out
    }

    /// Which objects an owned path is Crossplane's on, for messages.
    fn whose(&self, o: &Owned) -> String {
        let claim = self.claim.as_ref().map(|c| c.kind.as_str()).unwrap_or("claim");
        match (o.on_composite, o.on_claim) {
            (true, true) => format!("the composite resource and its claim {claim}"),
            (true, false) => "the composite resource".to_string(),
            _ => format!("the claim {claim} (rules convert the composite resource and the claim alike)"),
        }
    }

    /// The errors for every top-level rule that names a path Crossplane owns; one per rule,
    /// naming the first such field. Nested rules are item-relative, inside a field of the
    /// user's schema that the top-level rule names.
    pub fn check_rule(&self, spoke: &str, index: usize, rule: &ConversionRule) -> Option<Diagnostic> {
        let owned = self.owned();
        for (field, path) in rule_paths(rule) {
            for o in &owned {
                let inside = path == o.path || path.strip_prefix(o.path).is_some_and(|r| r.starts_with('.'));
                let holds = o.path.strip_prefix(path.as_str()).is_some_and(|r| r.starts_with('.'));
                if !(inside || holds) {
                    continue;
                }
                let scope = self.scope.name();
                let whose = self.whose(o);
                let message = if inside {
                    format!(
                        "{field} names {path}, a field Crossplane owns on {whose} of this {scope} XRD \
                         (Crossplane writes it itself, and every conversion carries it through unchanged); \
                         remove the rule, or point {field} at a field of the XRD's own schema"
                    )
                } else {
                    format!(
                        "{field} names {path}, which holds {}, a field Crossplane owns on {whose} of this \
                         {scope} XRD, so the rule would move Crossplane's field with it; name the fields \
                         of the XRD's own schema below {path} instead",
                        o.path
                    )
                };
                return Some(Diagnostic {
                    severity: Severity::Error,
                    spoke: Some(spoke.to_string()),
                    rule: Some(vec![index]),
                    strategy: Some(rule.strategy),
                    paths: vec![path],
                    message,
                });
            }
        }
        None
    }

    /// `schema` without the properties Crossplane owns, which it overrides in the CRDs it
    /// renders whatever the XRD declares: what rules are compiled against.
    pub fn strip<'a>(&self, schema: &'a Value) -> Cow<'a, Value> {
        let owned = self.owned();
        let declared = |path: &str| {
            let mut node = schema;
            for seg in path.split('.') {
                match node.get("properties").and_then(|p| p.get(seg)) {
                    Some(n) => node = n,
                    None => return false,
                }
            }
            true
        };
        if !owned.iter().any(|o| declared(o.path)) {
            return Cow::Borrowed(schema);
        }
        let mut out = schema.clone();
        for o in &owned {
            let segs: Vec<&str> = o.path.split('.').collect();
            let Some((last, parents)) = segs.split_last() else { continue };
            let mut node = Some(&mut out);
            for seg in parents {
                node = node.and_then(|n| n.get_mut("properties")).and_then(|p| p.get_mut(*seg));
            }
            if let Some(props) = node.and_then(|n| n.get_mut("properties")).and_then(Value::as_object_mut) {
                props.remove(*last);
            }
        }
        Cow::Owned(out)
    }
}

/// Every object-root path a top-level rule reads or writes, with the params field naming it
/// (`fieldRename.hubPath`); JSONPatch pointers as dotted paths.
pub fn rule_paths(rule: &ConversionRule) -> Vec<(String, String)> {
    let block = rule.strategy.params_field();
    let mut out: Vec<(String, String)> = Vec::new();
    let mut add = |name: &str, path: &str| out.push((format!("{block}.{name}"), path.to_string()));
    match rule.params() {
        Ok(Params::FieldRename(p))
        | Ok(Params::SingletonArrayToObject(p))
        | Ok(Params::ObjectToSingletonArray(p))
        | Ok(Params::Quantity(p))
        | Ok(Params::Duration(p)) => {
            add("hubPath", &p.hub_path);
            add("spokePath", &p.spoke_path);
        }
        Ok(Params::ScalarToObject(p)) | Ok(Params::ObjectToScalar(p)) => {
            add("hubPath", &p.hub_path);
            add("spokePath", &p.spoke_path);
        }
        Ok(Params::FieldsToMap(p)) => {
            p.hub_paths.iter().for_each(|h| add("hubPaths", h));
            add("spokeMapPath", &p.spoke_map_path);
        }
        Ok(Params::MapToFields(p)) => {
            add("hubMapPath", &p.hub_map_path);
            p.spoke_paths.iter().for_each(|s| add("spokePaths", s));
        }
        Ok(Params::ToAnnotation(p)) | Ok(Params::ToLabel(p)) => add("hubPath", &p.hub_path),
        Ok(Params::FromAnnotation(p)) => add("spokePath", &p.spoke_path),
        Ok(Params::FromLabel(p)) => add("spokePath", &p.spoke_path),
        Ok(Params::EnumRemap(p)) => add("path", &p.path),
        Ok(Params::DefaultValue(p)) => add("path", &p.path),
        Ok(Params::Constant(p)) => add("path", &p.path),
        Ok(Params::Delete(p)) => add("path", &p.path),
        Ok(Params::TypeCoerce(p)) => add("path", &p.path),
        Ok(Params::JsonPatch(p)) => {
            for (dir, ops) in [("hubToSpoke", &p.hub_to_spoke), ("spokeToHub", &p.spoke_to_hub)] {
                for (i, op) in ops.iter().enumerate() {
                    add(&format!("{dir}[{i}].path"), &pointer_to_dotted(&op.path));
                    if let Some(from) = &op.from {
                        add(&format!("{dir}[{i}].from"), &pointer_to_dotted(from));
                    }
                }
            }
        }
        Ok(Params::ForEach(p)) => {
            add("hubItemsPath", &p.hub_items_path);
            add("spokeItemsPath", &p.spoke_items_path);
        }
        Ok(Params::ScalarToFields(p)) => {
            add("hubPath", &p.hub_path);
            p.spoke_fields.values().for_each(|s| add("spokeFields", s));
        }
        Ok(Params::FieldsToScalar(p)) => {
            p.hub_fields.values().for_each(|h| add("hubFields", h));
            add("spokePath", &p.spoke_path);
        }
        Ok(Params::ArrayToMapByKey(p)) | Ok(Params::MapToArrayByKey(p)) => {
            add("hubPath", &p.hub_path);
            add("spokePath", &p.spoke_path);
        }
        Ok(Params::NumericScale(p)) => {
            add("hubPath", &p.hub_path);
            add("spokePath", &p.spoke_path);
        }
        Ok(Params::ListJoin(p)) | Ok(Params::ListSplit(p)) => {
            add("hubPath", &p.hub_path);
            add("spokePath", &p.spoke_path);
        }
        Ok(Params::MapKeyRename(p)) => {
            add("hubPath", &p.hub_path);
            add("spokePath", &p.spoke_path);
        }
        Ok(Params::Cel(p)) => {
            p.hub_paths.iter().for_each(|h| add("hubPaths", h));
            p.spoke_paths.iter().for_each(|s| add("spokePaths", s));
        }
        Ok(Params::BranchMap(p)) => {
            add("hubPath", &p.hub_path);
            add("spokePath", &p.spoke_path);
        }
        // The compile reports the params block itself.
        Err(_) => {}
    }
    if let Some(w) = &rule.when {
        out.push(("when.path".to_string(), w.path.clone()));
    }
    out
}

/// `/spec/a~1b/0` → `spec.a/b.0` (RFC 6901 unescaping), for comparing with dotted paths.
fn pointer_to_dotted(pointer: &str) -> String {
    pointer
        .strip_prefix('/')
        .unwrap_or(pointer)
        .split('/')
        .map(|s| s.replace("~1", "/").replace("~0", "~"))
        .collect::<Vec<_>>()
        .join(".")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rule(v: Value) -> ConversionRule {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn scope_defaults_follow_the_api_version() {
        assert_eq!(Scope::default_for("apiextensions.crossplane.io/v1"), Scope::LegacyCluster);
        assert_eq!(Scope::default_for("apiextensions.crossplane.io/v2"), Scope::Namespaced);
        assert_eq!(Scope::parse("Cluster"), Some(Scope::Cluster));
        assert_eq!(Scope::parse("cluster"), None);
    }

    #[test]
    fn owned_paths_per_scope_and_claim() {
        let modern = Composite { scope: Scope::Cluster, claim: None }.owned();
        assert_eq!(
            modern.iter().map(|o| o.path).collect::<Vec<_>>(),
            ["spec.crossplane", "status.conditions"]
        );
        let legacy = Composite {
            scope: Scope::LegacyCluster,
            claim: Some(ClaimNames { kind: "DB".into(), plural: "dbs".into() }),
        }
        .owned();
        let find = |p: &str| *legacy.iter().find(|o| o.path == p).unwrap();
        assert_eq!(
            find("spec.claimRef"),
            Owned { path: "spec.claimRef", on_composite: true, on_claim: false }
        );
        assert_eq!(
            find("spec.resourceRef"),
            Owned { path: "spec.resourceRef", on_composite: false, on_claim: true }
        );
        assert_eq!(
            find("spec.compositionRef"),
            Owned { path: "spec.compositionRef", on_composite: true, on_claim: true }
        );
        assert!(legacy.iter().any(|o| o.path == "spec.compositeDeletePolicy" && o.on_claim));
        // Without claims, the claim's fields are the user's.
        let unclaimed = Composite { scope: Scope::LegacyCluster, claim: None }.owned();
        assert!(
            !unclaimed.iter().any(|o| o.path == "spec.resourceRef" || o.path == "spec.compositeDeletePolicy")
        );
    }

    #[test]
    fn rule_paths_cover_pointers_and_when() {
        let r = rule(json!({"strategy": "JSONPatch", "jsonPatch": {"hubToSpoke": [
            {"op": "move", "from": "/spec/a~1b", "path": "/spec/resourceRefs/0"}]},
            "when": {"path": "spec.mode", "equals": "x"}}));
        assert_eq!(
            rule_paths(&r),
            [
                ("jsonPatch.hubToSpoke[0].path".to_string(), "spec.resourceRefs.0".to_string()),
                ("jsonPatch.hubToSpoke[0].from".to_string(), "spec.a/b".to_string()),
                ("when.path".to_string(), "spec.mode".to_string()),
            ]
        );
    }

    #[test]
    fn strip_removes_only_what_crossplane_owns() {
        let schema = json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
            "crossplane": {"type": "object"}, "size": {"type": "string"}}}}});
        let c = Composite { scope: Scope::Namespaced, claim: None };
        let out = c.strip(&schema);
        assert_eq!(out["properties"]["spec"]["properties"], json!({"size": {"type": "string"}}));
        let plain = json!({"type": "object", "properties": {"spec": {"type": "object"}}});
        assert!(matches!(c.strip(&plain), Cow::Borrowed(_)));
    }

    // ---- The plan: XRs and claims of every scope, Crossplane's fields carried through ----

    use crate::Via;
    use crate::compile;

    /// An XRD with hub v2 (referenceable) and spoke v1; the spoke calls `spec.storageGB`
    /// `spec.size`. `scope: None` leaves the API version's default.
    fn xrd(api_version: &str, scope: Option<&str>, claim: bool, hub_spec_extra: Value) -> Value {
        let schema = |size_key: &str, extra: &Value| {
            let mut spec =
                json!({size_key: {"type": "integer"}, "engine": {"type": "string", "enum": ["pg", "mysql"]}});
            for (k, v) in extra.as_object().into_iter().flatten() {
                spec[k] = v.clone();
            }
            json!({"type": "object", "properties": {
                "spec": {"type": "object", "properties": spec},
                "status": {"type": "object", "properties": {"endpoint": {"type": "string"}}}}})
        };
        let mut x = json!({
            "apiVersion": api_version, "kind": "CompositeResourceDefinition",
            "metadata": {"name": "xdbs.example.org"},
            "spec": {"group": "example.org", "names": {"kind": "XDB", "plural": "xdbs"},
                "versions": [
                    {"name": "v1", "served": true, "referenceable": false,
                     "schema": {"openAPIV3Schema": schema("size", &hub_spec_extra)}},
                    {"name": "v2", "served": true, "referenceable": true,
                     "schema": {"openAPIV3Schema": schema("storageGB", &hub_spec_extra)}}]}});
        if let Some(s) = scope {
            x["spec"]["scope"] = json!(s);
        }
        if claim {
            x["spec"]["claimNames"] = json!({"kind": "DB", "plural": "dbs"});
        }
        x
    }

    fn rename_spec(extra_rules: Value) -> dco_api::config::ConversionSpec {
        let mut rules = vec![json!({"strategy": "FieldRename",
            "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.size"}})];
        rules.extend(extra_rules.as_array().cloned().unwrap_or_default());
        serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}))
            .unwrap()
    }

    fn target(x: &Value) -> crate::Target {
        crate::Target::from_value(x).unwrap()
    }

    fn condition(t: &str) -> Value {
        json!({"type": t, "status": "True", "reason": "Available",
               "lastTransitionTime": "2026-12-01T10:00:00Z", "observedGeneration": 3})
    }

    /// A Namespaced or Cluster XR at the hub, with every field Crossplane writes.
    fn modern_xr(namespace: Option<&str>) -> Value {
        let mut meta = json!({"name": "db1", "uid": "0b7b9c1e-3c1d-4b8e-9b54-1f0e1c2d3e4f", "generation": 3,
            "labels": {"crossplane.io/composite": "db1"},
            "finalizers": ["composite.apiextensions.crossplane.io"]});
        if let Some(ns) = namespace {
            meta["namespace"] = json!(ns);
        }
        json!({"apiVersion": "example.org/v2", "kind": "XDB", "metadata": meta,
            "spec": {"storageGB": 20, "engine": "pg", "crossplane": {
                "compositionRef": {"name": "xdbs-aws"},
                "compositionSelector": {"matchLabels": {"provider": "aws"}},
                "compositionRevisionRef": {"name": "xdbs-aws-8f2c1"},
                "compositionRevisionSelector": {"matchLabels": {"channel": "stable"}},
                "compositionUpdatePolicy": "Manual",
                "resourceRefs": [{"apiVersion": "rds.aws.upbound.io/v1beta1", "kind": "Instance", "name": "db1-x7k2p"}]}},
            "status": {"endpoint": "db1.example.org", "conditions": [condition("Synced"), condition("Ready")]}})
    }

    /// A LegacyCluster XR bound to a claim, at the hub.
    fn legacy_xr() -> Value {
        json!({"apiVersion": "example.org/v2", "kind": "XDB",
            "metadata": {"name": "db1-q8rzt", "labels": {"crossplane.io/claim-name": "db1", "crossplane.io/claim-namespace": "team-a", "crossplane.io/composite": "db1-q8rzt"}},
            "spec": {"storageGB": 20, "engine": "mysql",
                "compositionRef": {"name": "xdbs-aws"},
                "compositionSelector": {"matchLabels": {"provider": "aws"}},
                "compositionRevisionRef": {"name": "xdbs-aws-8f2c1"},
                "compositionRevisionSelector": {"matchLabels": {"channel": "stable"}},
                "compositionUpdatePolicy": "Automatic",
                "resourceRefs": [{"apiVersion": "rds.aws.upbound.io/v1beta1", "kind": "Instance", "name": "db1-q8rzt-x7k2p"}],
                "claimRef": {"apiVersion": "example.org/v2", "kind": "DB", "namespace": "team-a", "name": "db1"},
                "writeConnectionSecretToRef": {"name": "0b7b9c1e-3c1d-4b8e-9b54-1f0e1c2d3e4f", "namespace": "crossplane-system"}},
            "status": {"endpoint": "db1.example.org", "conditions": [condition("Synced"), condition("Ready")],
                "connectionDetails": {"lastPublishedTime": "2026-12-01T10:00:05Z"},
                "claimConditionTypes": ["DatabaseReady"]}})
    }

    /// A claim, at the hub.
    fn claim() -> Value {
        json!({"apiVersion": "example.org/v2", "kind": "DB",
            "metadata": {"name": "db1", "namespace": "team-a", "finalizers": ["finalizer.apiextensions.crossplane.io"]},
            "spec": {"storageGB": 20, "engine": "pg",
                "compositionRef": {"name": "xdbs-aws"},
                "compositionSelector": {"matchLabels": {"provider": "aws"}},
                "compositionRevisionRef": {"name": "xdbs-aws-8f2c1"},
                "compositionRevisionSelector": {"matchLabels": {"channel": "stable"}},
                "compositionUpdatePolicy": "Automatic",
                "compositeDeletePolicy": "Foreground",
                "resourceRef": {"apiVersion": "example.org/v2", "kind": "XDB", "name": "db1-q8rzt"},
                "writeConnectionSecretToRef": {"name": "db1-conn"}},
            "status": {"endpoint": "db1.example.org", "conditions": [condition("Synced"), condition("Ready")],
                "connectionDetails": {"lastPublishedTime": "2026-12-01T10:00:05Z"},
                "claimConditionTypes": ["DatabaseReady"]}})
    }

    /// hub → spoke → hub on `Plan::convert` and on every review path: the spoke has the user's
    /// field renamed and every other field (Crossplane's) exactly as at the hub; the round
    /// trip gives the object back.
    fn round_trips(plan: &crate::Plan, hub: &Value) {
        let spoke = plan.convert(hub, "example.org/v1").unwrap();
        assert_eq!(spoke["spec"]["size"], hub["spec"]["storageGB"]);
        let mut expected = hub.clone();
        let size = expected["spec"].as_object_mut().unwrap().remove("storageGB").unwrap();
        expected["spec"]["size"] = size;
        expected["apiVersion"] = json!("example.org/v1");
        assert_eq!(spoke, expected, "hub → spoke keeps every Crossplane field");
        assert_eq!(plan.convert(&spoke, "example.org/v2").unwrap(), *hub, "spoke → hub");
        for via in [Via::Fastest, Via::Projection, Via::Full] {
            let mut out = Vec::new();
            plan.convert_raw_via(hub.to_string().as_bytes(), "example.org/v1", via, &mut out).unwrap();
            let got: Value = serde_json::from_slice(&out).unwrap();
            assert_eq!(got, expected, "{via:?} hub → spoke");
            let mut back = Vec::new();
            plan.convert_raw_via(&out, "example.org/v2", via, &mut back).unwrap();
            assert_eq!(serde_json::from_slice::<Value>(&back).unwrap(), *hub, "{via:?} spoke → hub");
        }
    }

    fn plan_of(x: &Value) -> std::sync::Arc<crate::Plan> {
        let c = compile(&rename_spec(json!([])), &target(x));
        match c.plan {
            Some(p) => p,
            None => panic!("{:?}", c.report.diagnostics.iter().map(|d| d.to_string()).collect::<Vec<_>>()),
        }
    }

    #[test]
    fn a_namespaced_xr_keeps_spec_crossplane_and_conditions_both_ways() {
        let x = xrd("apiextensions.crossplane.io/v2", None, false, json!({}));
        assert_eq!(target(&x).composite().unwrap().scope, Scope::Namespaced, "API v2's default");
        round_trips(&plan_of(&x), &modern_xr(Some("team-a")));
    }

    #[test]
    fn a_cluster_xr_keeps_spec_crossplane_and_conditions_both_ways() {
        let x = xrd("apiextensions.crossplane.io/v2", Some("Cluster"), false, json!({}));
        assert_eq!(target(&x).composite().unwrap().scope, Scope::Cluster);
        round_trips(&plan_of(&x), &modern_xr(None));
    }

    #[test]
    fn a_legacy_xr_and_its_claim_keep_every_crossplane_field_both_ways() {
        let x = xrd("apiextensions.crossplane.io/v1", None, true, json!({}));
        let t = target(&x);
        assert_eq!(t.composite().unwrap().scope, Scope::LegacyCluster, "API v1's default");
        assert_eq!(t.claim_kind(), Some("DB"));
        assert_eq!(t.generated_crds(), ["xdbs.example.org", "dbs.example.org"]);
        let plan = plan_of(&x);
        round_trips(&plan, &legacy_xr());
        round_trips(&plan, &claim());
    }

    #[test]
    fn crossplane_fields_the_xrd_declares_itself_are_left_to_crossplane() {
        // Crossplane overrides them in the CRDs it renders; declared differently per version,
        // they are neither compared nor dropped, even under unmappedFieldPolicy Warn.
        let mut x = xrd(
            "apiextensions.crossplane.io/v2",
            None,
            false,
            json!({"crossplane": {"type": "object",
            "properties": {"compositionUpdatePolicy": {"type": "string"}}}}),
        );
        x["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["crossplane"] =
            json!({"type": "integer"});
        let mut spec = rename_spec(json!([]));
        spec.unmapped_field_policy = dco_api::config::UnmappedFieldPolicy::Warn;
        spec.unmapped_field_reason = "test".into();
        let c = compile(&spec, &target(&x));
        assert!(c.report.diagnostics.is_empty(), "{:?}", c.report.diagnostics);
        round_trips(&c.plan.unwrap(), &modern_xr(Some("team-a")));
    }

    #[test]
    fn an_object_of_another_kind_fails_naming_the_expected_kinds() {
        let plan = plan_of(&xrd("apiextensions.crossplane.io/v1", None, true, json!({})));
        let mut other = claim();
        other["kind"] = json!("Bucket");
        let want = "kind Bucket is not a kind of target xdbs.example.org: it converts XDB or DB (its claim)";
        let err = plan.convert(&other, "example.org/v1").unwrap_err().to_string();
        assert!(err.contains(want), "{err}");
        for via in [Via::Fastest, Via::Projection, Via::Full] {
            let err = plan
                .convert_raw_via(other.to_string().as_bytes(), "example.org/v1", via, &mut Vec::new())
                .unwrap_err()
                .to_string();
            assert!(err.contains(want), "{via:?}: {err}");
        }
        let body = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": "example.org/v1", "objects": [claim(), other]}});
        let out = crate::convert_review(&plan, body.to_string().as_bytes()).unwrap();
        let failure = out.failure.unwrap();
        assert!(failure.starts_with("object 1 of 2: ") && failure.contains(want), "{failure}");
        // Another group is refused as before.
        let mut elsewhere = claim();
        elsewhere["apiVersion"] = json!("other.org/v2");
        let err = plan.convert(&elsewhere, "example.org/v1").unwrap_err().to_string();
        assert!(err.contains("is not in group example.org"), "{err}");
        // Without claimNames the claim's kind is foreign too.
        let unclaimed = plan_of(&xrd("apiextensions.crossplane.io/v1", None, false, json!({})));
        let err = unclaimed.convert(&claim(), "example.org/v1").unwrap_err().to_string();
        assert!(err.contains("kind DB is not a kind of target xdbs.example.org: it converts XDB;"), "{err}");
    }

    // ---- Diagnostics: a rule that names a field Crossplane owns ----

    fn errors_of(x: &Value, rules: Value) -> Vec<String> {
        let spec: dco_api::config::ConversionSpec = serde_json::from_value(
            json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}),
        )
        .unwrap();
        let c = compile(&spec, &target(x));
        assert!(c.plan.is_none());
        c.report.errors().map(|d| d.to_string()).collect()
    }

    fn rename(hub: &str, spoke: &str) -> Value {
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": hub, "spokePath": spoke}})
    }

    #[test]
    fn namespaced_and_cluster_refuse_spec_crossplane_naming_rule_and_fix() {
        for scope in ["Namespaced", "Cluster"] {
            let x = xrd("apiextensions.crossplane.io/v2", Some(scope), false, json!({}));
            let errs = errors_of(
                &x,
                json!([
                    rename("spec.storageGB", "spec.size"),
                    rename("spec.crossplane.compositionRef", "spec.crossplane.compositionRef")
                ]),
            );
            assert_eq!(
                errs,
                [format!(
                    "spoke v1, rule 1 (FieldRename) spec.crossplane.compositionRef: fieldRename.hubPath names spec.crossplane.compositionRef, a field Crossplane owns on the composite resource of this {scope} XRD (Crossplane writes it itself, and every conversion carries it through unchanged); remove the rule, or point fieldRename.hubPath at a field of the XRD's own schema"
                )]
            );
            // A JSONPatch pointer into it, a `when` reading it, a rule moving all of `status`.
            let errs = errors_of(
                &x,
                json!([rename("spec.storageGB", "spec.size"),
                    {"strategy": "JSONPatch", "jsonPatch": {"losslessOverride": true,
                        "hubToSpoke": [{"op": "remove", "path": "/spec/crossplane/resourceRefs/0"}]}},
                    {"strategy": "Constant", "constant": {"path": "spec.engine", "existsOn": "Hub", "value": "pg"},
                     "acknowledgeLossy": true, "reason": "x", "when": {"path": "spec.crossplane.compositionUpdatePolicy", "equals": "Manual"}},
                    rename("status", "status")]),
            );
            assert_eq!(errs.len(), 3, "{errs:?}");
            assert!(errs[0].starts_with("spoke v1, rule 1 (JSONPatch) spec.crossplane.resourceRefs.0: jsonPatch.hubToSpoke[0].path names"), "{}", errs[0]);
            assert!(
                errs[1].starts_with(
                    "spoke v1, rule 2 (Constant) spec.crossplane.compositionUpdatePolicy: when.path names"
                ),
                "{}",
                errs[1]
            );
            assert!(errs[2].contains("rule 3 (FieldRename) status: fieldRename.hubPath names status, which holds status.conditions, a field Crossplane owns"), "{}", errs[2]);
            assert!(
                errs[2].ends_with("name the fields of the XRD's own schema below status instead"),
                "{}",
                errs[2]
            );
            // The legacy names are the user's own fields on these scopes.
            let c = Composite { scope: Scope::parse(scope).unwrap(), claim: None };
            assert!(
                c.check_rule("v1", 0, &rule(rename("spec.compositionRef", "spec.compositionRef"))).is_none()
            );
        }
    }

    #[test]
    fn legacy_cluster_refuses_every_field_crossplane_sets_on_the_xr_and_the_claim() {
        let unclaimed = Composite { scope: Scope::LegacyCluster, claim: None };
        let claimed = Composite {
            scope: Scope::LegacyCluster,
            claim: Some(ClaimNames { kind: "DB".into(), plural: "dbs".into() }),
        };
        for path in [
            "spec.compositionRef.name",
            "spec.compositionSelector",
            "spec.compositionRevisionRef",
            "spec.compositionRevisionSelector",
            "spec.compositionUpdatePolicy",
            "spec.resourceRefs",
            "spec.claimRef",
            "spec.writeConnectionSecretToRef.namespace",
            "status.conditions",
            "status.connectionDetails",
            "status.claimConditionTypes",
        ] {
            let r = rule(rename("spec.storageGB", path));
            for c in [&unclaimed, &claimed] {
                let d = c.check_rule("v1", 4, &r).unwrap_or_else(|| panic!("{path} refused"));
                assert_eq!(d.rule, Some(vec![4]));
                assert!(d.to_string().contains(&format!("fieldRename.spokePath names {path}")), "{d}");
                assert!(d.message.contains("of this LegacyCluster XRD"), "{d}");
            }
        }
        // A claim's own fields: Crossplane's only when the XRD offers claims.
        for path in ["spec.compositeDeletePolicy", "spec.resourceRef.name"] {
            let r = rule(rename(path, "spec.size"));
            assert!(unclaimed.check_rule("v1", 0, &r).is_none(), "{path}");
            let d = claimed.check_rule("v1", 0, &r).unwrap();
            assert!(
                d.message.contains("a field Crossplane owns on the claim DB (rules convert the composite resource and the claim alike)"),
                "{d}"
            );
        }
        let d = claimed.check_rule("v1", 0, &rule(rename("spec.compositionRef", "spec.size"))).unwrap();
        assert!(
            d.message.contains("owns on the composite resource and its claim DB of this LegacyCluster XRD"),
            "{d}"
        );
        // Through compile, on a v1 XRD with claims.
        let x = xrd("apiextensions.crossplane.io/v1", None, true, json!({}));
        let errs = errors_of(
            &x,
            json!([rename("spec.storageGB", "spec.size"), rename("spec.claimRef", "spec.claimRef")]),
        );
        assert_eq!(errs.len(), 1, "{errs:?}");
        assert!(errs[0].starts_with("spoke v1, rule 1 (FieldRename) spec.claimRef: fieldRename.hubPath names spec.claimRef, a field Crossplane owns on the composite resource of this LegacyCluster XRD"), "{}", errs[0]);
    }

    #[test]
    fn a_crd_target_has_no_crossplane_fields() {
        let crd = crate::strategies::testkit::crd(
            &crate::strategies::testkit::obj_schema(json!({"crossplane": {"type": "string"}})),
            &crate::strategies::testkit::obj_schema(json!({"crossplane": {"type": "string"}})),
        );
        assert!(crd.composite().is_none() && crd.generated_crds().is_empty());
        let c = compile(
            &crate::strategies::testkit::spec_with(json!([rename("spec.crossplane", "spec.crossplane")])),
            &crd,
        );
        assert!(c.plan.is_some(), "{:?}", c.report.diagnostics);
    }

    #[test]
    fn an_unknown_scope_is_refused_with_the_fix() {
        let x = xrd("apiextensions.crossplane.io/v1", Some("Global"), false, json!({}));
        let err = crate::Target::from_value(&x).unwrap_err().to_string();
        assert_eq!(
            err,
            "CompositeResourceDefinition xdbs.example.org: spec.scope \"Global\" is not a scope Crossplane knows; set Namespaced, Cluster or LegacyCluster"
        );
        // claimNames on a scope that cannot have claims renders no claim CRD.
        let x = xrd("apiextensions.crossplane.io/v1", Some("Cluster"), true, json!({}));
        assert_eq!(target(&x).claim_kind(), None);
    }
}
