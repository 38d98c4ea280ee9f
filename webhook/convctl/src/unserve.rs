//! `convctl versions --check-unserve VERSION`: may VERSION stop being served? Decided from
//! [`Facts`] gathered from files (offline) or from a cluster (`--live`), for CRDs and XRDs
//! alike (docs/convctl.md, "Retiring a version").
//!
//! Blockers (each fails the run and names the command that clears it): VERSION is the
//! storage/referenceable version; a conversion config has it as its hub; `status.storedVersions`
//! of the CRD (for an XRD: of every CRD Crossplane renders from it) still lists it — the
//! apiserver's own record, the only authority on which versions objects are stored at; a
//! Composition's `compositeTypeRef` names it; any of these facts is unknown. A config that
//! keeps a spoke for VERSION is not a blocker but the next step: dco refuses a config without a
//! spoke for a served version, so the spoke goes after VERSION is unserved (docs/engine.md,
//! "Retiring a version").

use crate::output::{Finding, Location, Severity};
use crate::versions::Definition;

/// Where the facts came from, for the commands the findings print.
#[derive(Clone, Debug, Default)]
pub struct Cluster {
    /// The member's label (the context), for findings; `None` offline.
    pub label: Option<String>,
    /// ` --kubeconfig FILE --context NAME`, appended to every printed command.
    pub flags: String,
}

/// A conversion config's view of the target's versions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigRef {
    /// `CRDConversionConfig` or `XRDConversionConfig`.
    pub kind: String,
    pub name: String,
    /// The file it was read from (offline).
    pub file: Option<String>,
    pub hub: String,
    pub spokes: Vec<String>,
}

impl ConfigRef {
    /// The kubectl resource of the config's kind.
    pub fn resource(&self) -> String {
        format!("{}.conversion.dco.rs", self.kind.to_lowercase())
    }

    /// `kubectl patch` removing the spoke of `version` (guarded by a test of its index: a
    /// config changed since it was read makes the patch fail instead of removing another). A
    /// config's last spoke cannot go (a config has at least one): the config is deleted instead,
    /// which the operator allows once the target serves one version, reverting its
    /// `spec.conversion` to `None` first (docs/operations.md, deleting).
    pub fn remove_spoke_cmd(&self, version: &str, flags: &str) -> Option<String> {
        let i = self.spokes.iter().position(|s| s == version)?;
        if self.spokes.len() == 1 {
            return Some(format!("kubectl delete {} {} --timeout=120s{flags}", self.resource(), self.name));
        }
        Some(format!(
            "kubectl patch {} {} --type=json -p '[{{\"op\":\"test\",\"path\":\"/spec/spokes/{i}/version\",\"value\":\"{version}\"}},{{\"op\":\"remove\",\"path\":\"/spec/spokes/{i}\"}}]'{flags}",
            self.resource(),
            self.name
        ))
    }
}

/// A Composition's `compositeTypeRef`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CompositionRef {
    pub name: String,
    pub api_version: String,
    pub kind: String,
    pub file: Option<String>,
}

/// What is known about a target; `None` is "unknown", which blocks.
pub struct Facts<'a> {
    pub def: &'a Definition,
    /// `status.storedVersions` of each CRD backing the target (a CRD itself; an XRD's generated
    /// CRDs), by CRD name.
    pub stored: Option<Vec<(String, Vec<String>)>>,
    /// The configs of the target; `None` when none could be read (offline without `-c`).
    pub configs: Option<Vec<ConfigRef>>,
    /// For an XRD: the Compositions of its kind. Unused for a CRD.
    pub compositions: Option<Vec<CompositionRef>>,
    pub cluster: Cluster,
}

impl Facts<'_> {
    /// Does `status.storedVersions` list `version` anywhere? `None`: unknown.
    pub fn is_stored(&self, version: &str) -> Option<bool> {
        self.stored.as_ref().map(|s| s.iter().any(|(_, vs)| vs.iter().any(|v| v == version)))
    }

    /// The Compositions whose `compositeTypeRef` names `version` of this XRD's kind.
    pub fn compositions_at(&self, version: &str) -> Vec<&CompositionRef> {
        let want = format!("{}/{version}", self.def.target.group());
        let kind = self.def.target.resource_kind();
        self.compositions.iter().flatten().filter(|c| c.api_version == want && c.kind == kind).collect()
    }

    fn at(&self, object: String, path: Option<&str>, file: Option<&str>) -> Location {
        Location {
            file: file.map(str::to_string),
            object: Some(object),
            path: path.map(str::to_string),
            context: self.cluster.label.clone(),
            ..Location::default()
        }
    }

    fn target_object(&self) -> String {
        self.def.target.describe()
    }

    /// `convctl plan --to OTHER ...`: moving the hub off `version`.
    fn plan_cmd(&self, version: &str) -> String {
        let other = self
            .def
            .versions
            .iter()
            .find(|v| v.name != version && v.served)
            .map_or("VERSION", |v| v.name.as_str());
        let live = if self.cluster.label.is_some() { " --live" } else { "" };
        format!(
            "convctl plan --to {other}{live} {} {}{}",
            self.def.flag(),
            self.def.target.name(),
            self.cluster.flags
        )
    }
}

fn blocker(rule: &str, message: String, fix: String, location: Location) -> Finding {
    Finding { rule: rule.into(), severity: Severity::Error, message, fix: Some(fix), location, fails: true }
}

fn note(rule: &str, message: String, fix: Option<String>, location: Location) -> Finding {
    Finding { rule: rule.into(), severity: Severity::Note, message, fix, location, fails: false }
}

/// Every reason `version` cannot stop being served, and notes on what comes after.
pub fn check(f: &Facts, version: &str) -> Vec<Finding> {
    let def = f.def;
    let name = def.target.name();
    let mut out = Vec::new();
    let Some((index, v)) = def.versions.iter().enumerate().find(|(_, v)| v.name == version) else {
        out.push(note(
            "unserve-not-a-version",
            format!(
                "{version} is not a version of {name} (it has {}): nothing serves it",
                def.versions.iter().map(|v| v.name.as_str()).collect::<Vec<_>>().join(", ")
            ),
            None,
            f.at(f.target_object(), Some("spec.versions"), None),
        ));
        return out;
    };
    let vpath = format!("spec.versions[{index}]");
    if v.hub_eligible {
        out.push(blocker(
            "unserve-storage-version",
            format!("{version} is the {} version of {name}: every object is stored at it", def.hub_field()),
            format!("make another version the hub first: {}", f.plan_cmd(version)),
            f.at(f.target_object(), Some(&format!("{vpath}.{}", def.hub_field())), None),
        ));
    }
    check_stored(f, version, &mut out);
    check_configs(f, version, &mut out);
    if def.target.kind() == dco_api::config::TargetKind::Xrd {
        check_compositions(f, version, &mut out);
    }
    if !v.served {
        out.push(note(
            "unserve-already-unserved",
            format!(
                "{version} is not served already; the findings above block dropping it from spec.versions"
            ),
            None,
            f.at(f.target_object(), Some(&format!("{vpath}.served")), None),
        ));
    }
    out
}

fn check_stored(f: &Facts, version: &str, out: &mut Vec<Finding>) {
    let def = f.def;
    let migrate = format!(
        "convctl migrate-storage {} {} --prune-stored-versions{}",
        def.flag(),
        def.target.name(),
        f.cluster.flags
    );
    match &f.stored {
        None => out.push(blocker(
            "unserve-stored-versions-unknown",
            format!(
                "which versions objects of {} are stored at is unknown: status.storedVersions is in the cluster",
                def.target.name()
            ),
            format!(
                "run with --live, give --stored-versions as `{}` prints, or give the definition as the cluster returns it (kubectl get crd {} -o yaml keeps its status)",
                def.stored_versions_cmd(),
                def.target.name()
            ),
            f.at(f.target_object(), Some("status.storedVersions"), None),
        )),
        Some(stored) => {
            for (crd, versions) in stored.iter().filter(|(_, vs)| vs.iter().any(|v| v == version)) {
                out.push(blocker(
                    "unserve-stored",
                    format!(
                        "status.storedVersions of CustomResourceDefinition {crd} is [{}]: objects may still be stored at {version}",
                        versions.join(", ")
                    ),
                    format!(
                        "rewrite every object at the storage version and prune the list: {migrate}"
                    ),
                    f.at(format!("CustomResourceDefinition {crd}"), Some("status.storedVersions"), None),
                ));
            }
        }
    }
}

fn check_configs(f: &Facts, version: &str, out: &mut Vec<Finding>) {
    let Some(configs) = &f.configs else {
        out.push(note(
            "unserve-configs-unknown",
            format!(
                "no conversion config was read: a config whose hubVersion is {version} would block (give -c CONFIG, or --live)"
            ),
            None,
            f.at(f.target_object(), None, None),
        ));
        return;
    };
    for c in configs {
        let object = format!("{} {}", c.kind, c.name);
        if c.hub == version {
            out.push(blocker(
                "unserve-config-hub",
                format!("{object} has hubVersion {version}: the webhook converts every object through it"),
                format!(
                    "move the hub off {version} (the CRD's storage version and the config together): {}",
                    f.plan_cmd(version)
                ),
                f.at(object.clone(), Some("spec.hubVersion"), c.file.as_deref()),
            ));
        }
        if let Some(i) = c.spokes.iter().position(|s| s == version) {
            let cmd = c.remove_spoke_cmd(version, &f.cluster.flags).unwrap_or_default();
            out.push(note(
                "unserve-config-spoke",
                format!(
                    "{object} has a spoke for {version}: keep it until {version} is unserved (dco refuses a config without a spoke for a served version), then remove it before dropping {version}{}",
                    if c.spokes.len() == 1 { " (its last spoke: the config itself goes, the target then serving one version needs none)" } else { "" }
                ),
                Some(format!("after unserving {version}: {cmd}")),
                f.at(object, Some(&format!("spec.spokes[{i}]")), c.file.as_deref()),
            ));
        }
    }
}

fn check_compositions(f: &Facts, version: &str, out: &mut Vec<Finding>) {
    let def = f.def;
    let Some(_) = &f.compositions else {
        out.push(blocker(
            "unserve-compositions-unknown",
            format!(
                "the Compositions of {} were not read: one whose compositeTypeRef names {version} would stop matching its XRs",
                def.target.resource_kind()
            ),
            "run with --live, or give the Compositions with --compositions FILE|DIR".into(),
            f.at(f.target_object(), None, None),
        ));
        return;
    };
    let hub = def.hub().filter(|h| *h != version).unwrap_or("THE_HUB");
    for c in f.compositions_at(version) {
        out.push(blocker(
            "unserve-composition",
            format!(
                "Composition {} still names {version} in spec.compositeTypeRef.apiVersion ({}): a Composition must follow the referenceable version, and {version} is going",
                c.name, c.api_version
            ),
            format!(
                "compositeTypeRef is immutable: apply a copy of {} under a new name with spec.compositeTypeRef.apiVersion: {}/{hub}, move the XRs that use it to the copy, then: kubectl delete composition {}{}",
                c.name,
                def.target.group(),
                c.name,
                f.cluster.flags
            ),
            f.at(format!("Composition {}", c.name), Some("spec.compositeTypeRef.apiVersion"), c.file.as_deref()),
        ));
    }
}

/// The Compositions in `docs` (any other kind is skipped).
pub fn compositions_in(docs: &[serde_json::Value], file: &str) -> Vec<CompositionRef> {
    docs.iter()
        .filter(|d| {
            d.get("kind").and_then(serde_json::Value::as_str) == Some("Composition")
                && d.get("apiVersion")
                    .and_then(serde_json::Value::as_str)
                    .is_some_and(|a| a.starts_with("apiextensions.crossplane.io/"))
        })
        .filter_map(|d| composition_of(d, Some(file)))
        .collect()
}

/// A Composition's name and `compositeTypeRef`, from its JSON.
pub fn composition_of(d: &serde_json::Value, file: Option<&str>) -> Option<CompositionRef> {
    let s = |p: &str| d.pointer(p).and_then(serde_json::Value::as_str).map(str::to_string);
    Some(CompositionRef {
        name: s("/metadata/name")?,
        api_version: s("/spec/compositeTypeRef/apiVersion").unwrap_or_default(),
        kind: s("/spec/compositeTypeRef/kind").unwrap_or_default(),
        file: file.map(str::to_string),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn xrd() -> Definition {
        let doc = json!({"apiVersion": "apiextensions.crossplane.io/v2", "kind": "CompositeResourceDefinition",
            "metadata": {"name": "xwidgets.example.org"},
            "spec": {"group": "example.org", "scope": "Namespaced", "names": {"kind": "XWidget", "plural": "xwidgets"},
                "versions": [
                    {"name": "v2", "served": true, "referenceable": true, "schema": {"openAPIV3Schema": {"type": "object"}}},
                    {"name": "v1", "served": true, "referenceable": false, "schema": {"openAPIV3Schema": {"type": "object"}}}]}});
        Definition::from_value(dco_engine::Target::from_value(&doc).unwrap(), &doc)
    }

    fn config(hub: &str, spokes: &[&str]) -> ConfigRef {
        ConfigRef {
            kind: "XRDConversionConfig".into(),
            name: "xwidgets".into(),
            file: None,
            hub: hub.into(),
            spokes: spokes.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn comps(yaml: &str) -> Vec<CompositionRef> {
        let docs: Vec<serde_json::Value> = serde_yaml::Deserializer::from_str(yaml)
            .map(|d| <serde_json::Value as serde::Deserialize>::deserialize(d).unwrap())
            .collect();
        compositions_in(&docs, "compositions.yaml")
    }

    const COMPOSITIONS: &str = "apiVersion: apiextensions.crossplane.io/v1
kind: Composition
metadata: {name: xwidgets-old}
spec:
  compositeTypeRef: {apiVersion: example.org/v1, kind: XWidget}
  mode: Pipeline
---
apiVersion: apiextensions.crossplane.io/v1
kind: Composition
metadata: {name: xwidgets-new}
spec:
  compositeTypeRef: {apiVersion: example.org/v2, kind: XWidget}
---
apiVersion: apiextensions.crossplane.io/v1
kind: Composition
metadata: {name: xgadgets}
spec:
  compositeTypeRef: {apiVersion: example.org/v1, kind: XGadget}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: not-a-composition}
";

    fn rules(f: &[Finding]) -> Vec<(&str, bool)> {
        f.iter().map(|f| (f.rule.as_str(), f.fails)).collect()
    }

    /// An XRD's spoke v1: blocked by the generated CRD's storedVersions and by the one
    /// Composition of its kind at v1 (not by another kind's, not by the one at v2); the config's
    /// spoke is the step after unserving, never a blocker.
    #[test]
    fn an_xrd_version_is_blocked_by_stored_versions_and_its_compositions() {
        let def = xrd();
        let f = Facts {
            def: &def,
            stored: Some(vec![("xwidgets.example.org".into(), vec!["v1".into(), "v2".into()])]),
            configs: Some(vec![config("v2", &["v1"])]),
            compositions: Some(comps(COMPOSITIONS)),
            cluster: Cluster { label: Some("east".into()), flags: " --context east".into() },
        };
        let out = check(&f, "v1");
        assert_eq!(
            rules(&out),
            [("unserve-stored", true), ("unserve-config-spoke", false), ("unserve-composition", true)]
        );
        let comp = &out[2];
        assert_eq!(comp.location.object.as_deref(), Some("Composition xwidgets-old"));
        assert_eq!(comp.location.context.as_deref(), Some("east"));
        let fix = comp.fix.as_deref().unwrap();
        assert!(fix.contains("spec.compositeTypeRef.apiVersion: example.org/v2"), "{fix}");
        assert!(fix.ends_with("kubectl delete composition xwidgets-old --context east"), "{fix}");
        assert_eq!(
            out[0].fix.as_deref(),
            Some(
                "rewrite every object at the storage version and prune the list: convctl migrate-storage --xrd xwidgets.example.org --prune-stored-versions --context east"
            )
        );
        // Its last spoke: the config goes (a config has at least one spoke).
        assert_eq!(
            out[1].fix.as_deref(),
            Some(
                "after unserving v1: kubectl delete xrdconversionconfig.conversion.dco.rs xwidgets --timeout=120s --context east"
            )
        );
        assert_eq!(
            config("v3", &["v2", "v1"]).remove_spoke_cmd("v1", "").as_deref(),
            Some(
                "kubectl patch xrdconversionconfig.conversion.dco.rs xwidgets --type=json -p '[{\"op\":\"test\",\"path\":\"/spec/spokes/1/version\",\"value\":\"v1\"},{\"op\":\"remove\",\"path\":\"/spec/spokes/1\"}]'"
            )
        );

        // Migrated and the Composition replaced: safe (the spoke note stays).
        let f = Facts {
            stored: Some(vec![("xwidgets.example.org".into(), vec!["v2".into()])]),
            compositions: Some(
                comps(COMPOSITIONS).into_iter().filter(|c| c.name != "xwidgets-old").collect(),
            ),
            ..f
        };
        let out = check(&f, "v1");
        assert_eq!(rules(&out), [("unserve-config-spoke", false)]);
    }

    /// The referenceable version is blocked twice: as the storage version and as the config's
    /// hub, both pointing at plan; offline unknowns (storedVersions, Compositions) block too.
    #[test]
    fn the_hub_and_unknown_facts_block() {
        let def = xrd();
        let f = Facts {
            def: &def,
            stored: None,
            configs: Some(vec![config("v2", &["v1"])]),
            compositions: None,
            cluster: Cluster::default(),
        };
        let out = check(&f, "v2");
        assert_eq!(
            rules(&out),
            [
                ("unserve-storage-version", true),
                ("unserve-stored-versions-unknown", true),
                ("unserve-config-hub", true),
                ("unserve-compositions-unknown", true)
            ]
        );
        assert!(
            out[0].fix.as_deref().unwrap().ends_with("convctl plan --to v1 --xrd xwidgets.example.org"),
            "{:?}",
            out[0].fix
        );
        // A version the XRD no longer has: nothing to unserve, no failure.
        let out = check(&f, "v0");
        assert_eq!(rules(&out), [("unserve-not-a-version", false)]);
    }
}
