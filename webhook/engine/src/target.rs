//! The conversion target: a native CustomResourceDefinition or a Crossplane
//! CompositeResourceDefinition, read from JSON into one shape.

use dco_api::config::TargetKind;
use dco_api::target::{CRD_API_VERSION, CRD_KIND, XRD_GROUP, XRD_KIND};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::crossplane::{ClaimNames, Composite, Scope};

/// One version of the target with its schema.
#[derive(Clone, Debug, PartialEq)]
pub struct VersionSchema {
    pub name: String,
    pub served: bool,
    /// `storage` (CRD) or `referenceable` (XRD): the only version that may be the hub.
    pub hub_eligible: bool,
    /// The version's `openAPIV3Schema` (Null when the version declares none).
    pub schema: Value,
}

/// A target's versions and schemas.
#[derive(Clone, Debug, PartialEq)]
pub struct Target {
    name: String,
    kind: TargetKind,
    group: String,
    resource_kind: String,
    versions: Vec<VersionSchema>,
    schema_hash: String,
    /// For an XRD: its scope and claim, which decide Crossplane's fields and the kinds a
    /// review may carry.
    composite: Option<Composite>,
}

#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TargetError {
    #[error(
        "{api_version}/{kind} is not a conversion target; give an apiextensions.k8s.io/v1 CustomResourceDefinition or an apiextensions.crossplane.io/v1 or v2 CompositeResourceDefinition"
    )]
    UnknownKind { api_version: String, kind: String },
    #[error("{kind} {name}: field {field} is missing or has the wrong type")]
    MissingField { kind: &'static str, name: String, field: String },
    #[error("{kind} {name} declares no versions in spec.versions")]
    NoVersions { kind: &'static str, name: String },
    #[error("{kind} {name} declares version {version} twice in spec.versions")]
    DuplicateVersion { kind: &'static str, name: String, version: String },
    #[error(
        "CompositeResourceDefinition {name}: spec.scope {scope:?} is not a scope Crossplane knows; set Namespaced, Cluster or LegacyCluster"
    )]
    UnknownScope { name: String, scope: String },
}

impl Target {
    /// Reads a CustomResourceDefinition (apiextensions.k8s.io/v1) or a Crossplane
    /// CompositeResourceDefinition (apiextensions.crossplane.io/v1) from its JSON form;
    /// detects which by apiVersion/kind.
    pub fn from_value(obj: &Value) -> Result<Target, TargetError> {
        let api_version = obj.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
        let kind = obj.get("kind").and_then(Value::as_str).unwrap_or_default();
        let (tkind, label, hub_flag) = if api_version == CRD_API_VERSION && kind == CRD_KIND {
            (TargetKind::Crd, CRD_KIND, "storage")
        } else if api_version.split_once('/').is_some_and(|(g, _)| g == XRD_GROUP) && kind == XRD_KIND {
            (TargetKind::Xrd, XRD_KIND, "referenceable")
        } else {
            return Err(TargetError::UnknownKind { api_version: api_version.into(), kind: kind.into() });
        };
        let name = obj
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .ok_or_else(|| TargetError::MissingField {
                kind: label,
                name: "<unnamed>".into(),
                field: "metadata.name".into(),
            })?
            .to_string();
        let missing =
            |field: &str| TargetError::MissingField { kind: label, name: name.clone(), field: field.into() };
        let group =
            obj.pointer("/spec/group").and_then(Value::as_str).ok_or_else(|| missing("spec.group"))?;
        let resource_kind = obj
            .pointer("/spec/names/kind")
            .and_then(Value::as_str)
            .ok_or_else(|| missing("spec.names.kind"))?;
        let raw_versions = obj
            .pointer("/spec/versions")
            .and_then(Value::as_array)
            .ok_or_else(|| missing("spec.versions"))?;
        if raw_versions.is_empty() {
            return Err(TargetError::NoVersions { kind: label, name });
        }
        let mut versions: Vec<VersionSchema> = Vec::with_capacity(raw_versions.len());
        for (i, v) in raw_versions.iter().enumerate() {
            let vname = v
                .get("name")
                .and_then(Value::as_str)
                .ok_or_else(|| missing(&format!("spec.versions[{i}].name")))?;
            if versions.iter().any(|x| x.name == vname) {
                return Err(TargetError::DuplicateVersion { kind: label, name, version: vname.into() });
            }
            versions.push(VersionSchema {
                name: vname.to_string(),
                served: v.get("served").and_then(Value::as_bool).unwrap_or(false),
                hub_eligible: v.get(hub_flag).and_then(Value::as_bool).unwrap_or(false),
                schema: v.pointer("/schema/openAPIV3Schema").cloned().unwrap_or(Value::Null),
            });
        }
        let composite = match tkind {
            TargetKind::Crd => None,
            TargetKind::Xrd => Some(composite_of(obj, api_version, &name)?),
        };
        let schema_hash = hash_versions(&versions);
        Ok(Target {
            name,
            kind: tkind,
            group: group.to_string(),
            resource_kind: resource_kind.to_string(),
            versions,
            schema_hash,
            composite,
        })
    }

    /// For an XRD: its scope (`spec.scope`, or its API version's default) and its claim.
    pub fn composite(&self) -> Option<&Composite> {
        self.composite.as_ref()
    }

    /// The claim's kind (`spec.claimNames.kind`) of a LegacyCluster XRD that offers claims.
    pub fn claim_kind(&self) -> Option<&str> {
        self.composite.as_ref().and_then(|c| c.claim.as_ref()).map(|c| c.kind.as_str())
    }

    /// The CRDs Crossplane renders from this XRD: the XR's (named like the XRD) and, with
    /// claims, the claim's (`<claimNames.plural>.<group>`). Empty for a CRD target.
    pub fn generated_crds(&self) -> Vec<String> {
        let Some(c) = &self.composite else { return Vec::new() };
        let mut out = vec![self.name.clone()];
        if let Some(claim) = &c.claim {
            out.push(format!("{}.{}", claim.plural, self.group));
        }
        out
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn kind(&self) -> TargetKind {
        self.kind
    }

    pub fn group(&self) -> &str {
        &self.group
    }

    /// `spec.names.kind`: the kind of the objects being converted.
    pub fn resource_kind(&self) -> &str {
        &self.resource_kind
    }

    pub fn versions(&self) -> &[VersionSchema] {
        &self.versions
    }

    pub fn version(&self, name: &str) -> Option<&VersionSchema> {
        self.versions.iter().find(|v| v.name == name)
    }

    /// Stable hex digest of the versions' schemas (status.schemaHash): independent of key
    /// order, so a re-serialised but unchanged target hashes the same.
    pub fn schema_hash(&self) -> String {
        self.schema_hash.clone()
    }

    /// What kind of object this is, for messages ("CustomResourceDefinition x.example.org").
    pub fn describe(&self) -> String {
        format!("{} {}", self.kind.kind_name(), self.name)
    }
}

/// An XRD's scope and claim names. Crossplane renders a claim CRD only for LegacyCluster
/// (its API refuses claimNames on the other scopes), so claimNames elsewhere are ignored.
fn composite_of(obj: &Value, api_version: &str, name: &str) -> Result<Composite, TargetError> {
    let scope = match obj.pointer("/spec/scope") {
        None | Some(Value::Null) => Scope::default_for(api_version),
        Some(v) => {
            let s = v.as_str().unwrap_or_default();
            Scope::parse(s).ok_or_else(|| TargetError::UnknownScope {
                name: name.to_string(),
                scope: s.chars().take(64).collect(),
            })?
        }
    };
    let claim = match (scope, obj.pointer("/spec/claimNames")) {
        (Scope::LegacyCluster, Some(names)) if !names.is_null() => {
            let field = |f: &str| {
                names.get(f).and_then(Value::as_str).map(str::to_string).ok_or_else(|| {
                    TargetError::MissingField {
                        kind: XRD_KIND,
                        name: name.to_string(),
                        field: format!("spec.claimNames.{f}"),
                    }
                })
            };
            Some(ClaimNames { kind: field("kind")?, plural: field("plural")? })
        }
        _ => None,
    };
    Ok(Composite { scope, claim })
}

fn hash_versions(versions: &[VersionSchema]) -> String {
    let mut h = Sha256::new();
    for v in versions {
        h.update(v.name.as_bytes());
        h.update([0, u8::from(v.served), u8::from(v.hub_eligible)]);
        let mut buf = String::new();
        canonical_json(&v.schema, &mut buf);
        h.update(buf.as_bytes());
        h.update([0xff]);
    }
    hex(&h.finalize())
}

/// Serialises with sorted object keys, whatever map the serde_json build uses.
pub(crate) fn canonical_json(v: &Value, out: &mut String) {
    match v {
        Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                if let Some(x) = m.get(k) {
                    canonical_json(x, out);
                }
            }
            out.push('}');
        }
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(x, out);
            }
            out.push(']');
        }
        other => out.push_str(&other.to_string()),
    }
}

pub(crate) fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[usize::from(b >> 4)] as char);
        s.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "dbs.example.org"},
            "spec": {
                "group": "example.org",
                "names": {"kind": "DB", "plural": "dbs"},
                "versions": [
                    {"name": "v1", "served": true, "storage": false,
                     "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object"}}}}},
                    {"name": "v2", "served": true, "storage": true,
                     "schema": {"openAPIV3Schema": {"type": "object"}}}
                ]
            }
        })
    }

    #[test]
    fn reads_a_crd() {
        let t = Target::from_value(&crd()).unwrap();
        assert_eq!(t.name(), "dbs.example.org");
        assert_eq!(t.kind(), TargetKind::Crd);
        assert_eq!(t.group(), "example.org");
        assert_eq!(t.resource_kind(), "DB");
        assert_eq!(t.versions().len(), 2);
        assert!(!t.versions()[0].hub_eligible);
        assert!(t.versions()[1].hub_eligible);
        assert_eq!(t.schema_hash().len(), 64);
    }

    #[test]
    fn reads_an_xrd_by_referenceable() {
        let x = json!({
            "apiVersion": "apiextensions.crossplane.io/v1",
            "kind": "CompositeResourceDefinition",
            "metadata": {"name": "xdbs.example.org"},
            "spec": {
                "group": "example.org",
                "names": {"kind": "XDB", "plural": "xdbs"},
                "versions": [
                    {"name": "v1", "served": true, "referenceable": true,
                     "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v2", "served": true, "referenceable": false}
                ]
            }
        });
        let t = Target::from_value(&x).unwrap();
        assert_eq!(t.kind(), TargetKind::Xrd);
        assert!(t.versions()[0].hub_eligible);
        assert!(!t.versions()[1].hub_eligible);
        assert_eq!(t.versions()[1].schema, Value::Null);
    }

    #[test]
    fn schema_hash_ignores_key_order_but_not_content() {
        let a = Target::from_value(&crd()).unwrap();
        let mut reordered = crd();
        reordered["spec"]["versions"][0]["schema"]["openAPIV3Schema"] =
            json!({"properties": {"spec": {"type": "object"}}, "type": "object"});
        assert_eq!(a.schema_hash(), Target::from_value(&reordered).unwrap().schema_hash());
        let mut changed = crd();
        changed["spec"]["versions"][1]["schema"]["openAPIV3Schema"] = json!({"type": "string"});
        assert_ne!(a.schema_hash(), Target::from_value(&changed).unwrap().schema_hash());
    }

    #[test]
    fn rejects_other_kinds_and_missing_fields() {
        let err = Target::from_value(&json!({"apiVersion": "v1", "kind": "ConfigMap"})).unwrap_err();
        assert!(err.to_string().contains("v1/ConfigMap is not a conversion target"));
        let mut no_group = crd();
        no_group["spec"].as_object_mut().unwrap().remove("group");
        let err = Target::from_value(&no_group).unwrap_err();
        assert_eq!(
            err.to_string(),
            "CustomResourceDefinition dbs.example.org: field spec.group is missing or has the wrong type"
        );
        let mut dup = crd();
        dup["spec"]["versions"][1]["name"] = json!("v1");
        assert!(matches!(Target::from_value(&dup), Err(TargetError::DuplicateVersion { .. })));
        let mut empty = crd();
        empty["spec"]["versions"] = json!([]);
        assert!(matches!(Target::from_value(&empty), Err(TargetError::NoVersions { .. })));
    }
}
