//! The world of `tests/tests/e2e_crossplane.rs`: a real Crossplane 2 ([`crate::crossplane`]),
//! one XRD of each scope — `Namespaced` and `Cluster` written at
//! `apiextensions.crossplane.io/v2`, `LegacyCluster` with claim names at `/v1` (in Crossplane
//! v2.3.0 only v1 has both) — each serving three versions with the referenceable (storage) one
//! in the middle, an XRDConversionConfig each, two ConversionWebhookServers `<ns>-a` and
//! `<ns>-b` (2 replicas each) and two dco-operator replicas (local processes), all scoped to
//! the test by `--selector` and its group `<ns>.xp.e2e.dco.rs`.
//!
//! The composite's shape, by version (the rules between them in [`spokes`]):
//!
//! | version | `spec.parameters` |
//! |---|---|
//! | `v1alpha1` | `storageSize`, `engine` (`pg`, `mysql`), `region` |
//! | `v1beta1` (referenceable, the hub) | `storageGB`, `engine` (`postgres`, `mysql`), `region` |
//! | `v1` | `storage.gb`, `engine` (`postgres`, `mysql`), `location` |
//!
//! Everything else in a composite's or claim's `spec` is Crossplane's (defaults of the
//! generated CRDs' schemas, `claimRef`, `resourceRef`, ...): [`user_part`] and
//! [`crossplane_part`] split a spec in the two.

use std::time::Duration;

use anyhow::Result;
use dco_api::ConversionWebhookServer;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use crate::{Manager, TestEnv, wait_for};

pub const MANAGER: Manager = Manager("dco-e2e-crossplane");
pub const WAIT: Duration = Duration::from_secs(180);
pub const VERSIONS: [&str; 3] = ["v1alpha1", "v1beta1", "v1"];
pub const HUB: &str = "v1beta1";
pub const SPOKES: [&str; 2] = ["v1alpha1", "v1"];
/// The operator replicas (ids unique per test: the namespace is part of their Lease names).
pub const OPERATORS: [&str; 2] = ["xpo-1", "xpo-2"];

/// A Crossplane XRD scope.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scope {
    Namespaced,
    Cluster,
    LegacyCluster,
}

/// One XRD of the world.
#[derive(Clone, Copy, Debug)]
pub struct Xrd {
    pub scope: Scope,
    pub kind: &'static str,
    pub plural: &'static str,
    /// `(kind, plural)` of its claim (`LegacyCluster` only).
    pub claim: Option<(&'static str, &'static str)>,
}

pub const XRDS: [Xrd; 3] = [
    Xrd { scope: Scope::Namespaced, kind: "XDatabase", plural: "xdatabases", claim: None },
    Xrd { scope: Scope::Cluster, kind: "XCache", plural: "xcaches", claim: None },
    Xrd {
        scope: Scope::LegacyCluster,
        kind: "XBucket",
        plural: "xbuckets",
        claim: Some(("Bucket", "buckets")),
    },
];

/// A kind whose objects the test writes and reads: an XR kind or a claim kind.
#[derive(Clone, Copy, Debug)]
pub struct Kind {
    pub kind: &'static str,
    pub plural: &'static str,
    pub namespaced: bool,
    /// Index into [`XRDS`] of the XRD it comes from.
    pub xrd: usize,
    pub claim: bool,
}

pub const KINDS: [Kind; 4] = [
    Kind { kind: "XDatabase", plural: "xdatabases", namespaced: true, xrd: 0, claim: false },
    Kind { kind: "XCache", plural: "xcaches", namespaced: false, xrd: 1, claim: false },
    Kind { kind: "XBucket", plural: "xbuckets", namespaced: false, xrd: 2, claim: false },
    Kind { kind: "Bucket", plural: "buckets", namespaced: true, xrd: 2, claim: true },
];

/// A composite's `spec` at `version` for write `k`: the same content in each version's shape.
pub fn spec_at(version: &str, k: i64) -> Value {
    let (hub_engine, alpha_engine) = if k % 2 == 0 { ("postgres", "pg") } else { ("mysql", "mysql") };
    let region = format!("region-{k}");
    match version {
        "v1alpha1" => json!({"parameters": {"storageSize": k, "engine": alpha_engine, "region": region}}),
        "v1beta1" => json!({"parameters": {"storageGB": k, "engine": hub_engine, "region": region}}),
        _ => json!({"parameters": {"storage": {"gb": k}, "engine": hub_engine, "location": region}}),
    }
}

/// The part of a spec the test writes (`parameters`).
pub fn user_part(spec: &Value) -> Value {
    json!({"parameters": spec.get("parameters").cloned().unwrap_or(Value::Null)})
}

/// The part of a spec Crossplane writes: everything but `parameters`.
pub fn crossplane_part(spec: &Value) -> Value {
    let mut rest = spec.as_object().cloned().unwrap_or_default();
    rest.remove("parameters");
    Value::Object(rest)
}

fn schema(parameters: Value) -> Value {
    json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
        "required": ["parameters"],
        "properties": {"parameters": {"type": "object", "properties": parameters}}}}}})
}

/// The three versions' schemas, in [`VERSIONS`] order.
fn schemas() -> [Value; 3] {
    let int = json!({"type": "integer"});
    let s = json!({"type": "string"});
    let engine = |values: [&str; 2]| json!({"type": "string", "enum": values});
    [
        schema(json!({"storageSize": int, "engine": engine(["pg", "mysql"]), "region": s})),
        schema(json!({"storageGB": int, "engine": engine(["postgres", "mysql"]), "region": s})),
        schema(json!({"storage": {"type": "object", "properties": {"gb": int}},
            "engine": engine(["postgres", "mysql"]), "location": s})),
    ]
}

/// The config's spokes: v1alpha1 renames the size and remaps the engine; v1 renames the size
/// into a nested object and the region to `location`.
pub fn spokes() -> Value {
    let rename = |hub: &str, spoke: &str| {
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": format!("spec.parameters.{hub}"),
            "spokePath": format!("spec.parameters.{spoke}")}})
    };
    let remap = json!({"strategy": "EnumRemap", "enumRemap": {"path": "spec.parameters.engine",
        "mapping": [{"hub": "postgres", "spoke": "pg"}, {"hub": "mysql", "spoke": "mysql"}]}});
    json!([
        {"version": "v1alpha1", "rules": [rename("storageGB", "storageSize"), remap]},
        {"version": "v1", "rules": [rename("storageGB", "storage.gb"), rename("region", "location")]},
    ])
}

/// XRDs at `apiextensions.crossplane.io/<version>`.
pub fn xrd_resource(version: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk("apiextensions.crossplane.io", version, "CompositeResourceDefinition");
    ApiResource::from_gvk_with_plural(&gvk, "compositeresourcedefinitions")
}

/// The world's objects, named after the test's namespace.
pub struct XpWorld {
    pub ns: String,
    pub group: String,
    /// `dco-e2e-xp=<ns>`: the operator's `--selector`, carried by the configs and servers.
    pub selector: String,
    pub servers: [String; 2],
    pub client: Client,
    pub srvs: Api<ConversionWebhookServer>,
    pub cfgs: Api<DynamicObject>,
    pub crds: Api<CustomResourceDefinition>,
}

impl XpWorld {
    pub fn new(t: &TestEnv) -> XpWorld {
        XpWorld {
            group: format!("{}.xp.e2e.dco.rs", t.ns),
            selector: format!("dco-e2e-xp={}", t.ns),
            servers: [format!("{}-a", t.ns), format!("{}-b", t.ns)],
            client: t.client.clone(),
            srvs: Api::all(t.client.clone()),
            cfgs: Api::all_with(t.client.clone(), &crate::ar::<dco_api::XRDConversionConfig>()),
            crds: Api::all(t.client.clone()),
            ns: t.ns.clone(),
        }
    }

    fn labels(&self) -> Value {
        json!({"dco-e2e-xp": self.ns})
    }

    /// `<plural>.<group>` of XRD `i` (also its XR CRD's name).
    pub fn xrd_name(&self, i: usize) -> String {
        format!("{}.{}", XRDS[i].plural, self.group)
    }

    /// The config of XRD `i`.
    pub fn config_name(&self, i: usize) -> String {
        format!("{}-{}", self.ns, XRDS[i].plural)
    }

    /// The CRDs Crossplane generates: one per XR kind and one for the claim.
    pub fn generated_crds(&self) -> Vec<String> {
        KINDS.iter().map(|k| format!("{}.{}", k.plural, self.group)).collect()
    }

    /// The generated CRDs of XRD `i`.
    pub fn generated_crds_of(&self, i: usize) -> Vec<String> {
        KINDS.iter().filter(|k| k.xrd == i).map(|k| format!("{}.{}", k.plural, self.group)).collect()
    }

    /// The Service of server `s`.
    pub fn service(&self, s: &str) -> String {
        format!("dco-webhook-{s}")
    }

    /// `kind` at `version` through `client` (the test's namespace for a namespaced kind).
    pub fn api(&self, client: &Client, kind: &Kind, version: &str) -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(&self.group, version, kind.kind);
        let ar = ApiResource::from_gvk_with_plural(&gvk, kind.plural);
        if kind.namespaced {
            Api::namespaced_with(client.clone(), &self.ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        }
    }

    /// The XRD manifest of `XRDS[i]` and the API version it is written at.
    pub fn xrd(&self, i: usize) -> (&'static str, Value) {
        let x = XRDS[i];
        let versions: Vec<Value> = VERSIONS
            .iter()
            .zip(schemas())
            .map(|(v, schema)| json!({"name": v, "served": true, "referenceable": *v == HUB, "schema": schema}))
            .collect();
        let mut spec = json!({"group": self.group, "names": {"kind": x.kind, "plural": x.plural},
            "versions": versions});
        let version = match x.scope {
            Scope::Namespaced => "v2",
            Scope::Cluster => {
                spec["scope"] = json!("Cluster");
                "v2"
            }
            Scope::LegacyCluster => {
                spec["scope"] = json!("LegacyCluster");
                if let Some((kind, plural)) = x.claim {
                    spec["claimNames"] = json!({"kind": kind, "plural": plural});
                }
                "v1"
            }
        };
        let obj = json!({"apiVersion": format!("apiextensions.crossplane.io/{version}"),
            "kind": "CompositeResourceDefinition", "metadata": {"name": self.xrd_name(i)}, "spec": spec});
        (version, obj)
    }

    /// Applies the three XRDs and waits until Crossplane has generated every CRD, Established.
    pub async fn apply_xrds(&self) -> Result<()> {
        for i in 0..XRDS.len() {
            let (version, obj) = self.xrd(i);
            let api: Api<DynamicObject> = Api::all_with(self.client.clone(), &xrd_resource(version));
            MANAGER.apply(&api, &self.xrd_name(i), obj).await?;
        }
        for name in self.generated_crds() {
            wait_for(&format!("Crossplane to generate CRD {name}, Established"), WAIT, || async {
                let crd = self.crds.get_opt(&name).await?;
                let conditions = crd.and_then(|c| c.status?.conditions).unwrap_or_default();
                Ok(conditions.iter().any(|c| c.type_ == "Established" && c.status == "True").then_some(()))
            })
            .await?;
        }
        Ok(())
    }

    /// Applies the two servers (2 replicas each) and waits until both have 2 ready replicas.
    pub async fn apply_servers(&self) -> Result<()> {
        for s in &self.servers {
            let obj = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                "metadata": {"name": s, "labels": self.labels()}, "spec": {"namespace": self.ns, "replicas": 2}});
            MANAGER.apply(&self.srvs, s, obj).await?;
        }
        for s in &self.servers {
            wait_for(&format!("server {s} to have 2 ready replicas"), WAIT, || async {
                let st = self.srvs.get(s).await?.status;
                Ok(st.is_some_and(|st| st.ready_replicas == 2).then_some(()))
            })
            .await?;
        }
        Ok(())
    }

    /// Applies (or re-pins) the config of every XRD, pinned to `server`.
    pub async fn pin_all(&self, server: &str) -> Result<()> {
        for i in 0..XRDS.len() {
            let name = self.config_name(i);
            let obj = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
                "metadata": {"name": name, "labels": self.labels()},
                "spec": {"targetXRD": {"name": self.xrd_name(i)}, "hubVersion": HUB,
                    "webhookServerRef": {"name": server}, "spokes": spokes()}});
            MANAGER.apply(&self.cfgs, &name, obj).await?;
        }
        Ok(())
    }

    /// Waits until every config is settled on `server` (handover `SourceDropped` there, phase
    /// `Applied`) and every generated CRD's spec.conversion calls its Service.
    pub async fn wait_settled(&self, server: &str) -> Result<()> {
        let service = self.service(server);
        for i in 0..XRDS.len() {
            let cfg = self.config_name(i);
            wait_for(&format!("config {cfg} settled on {server}"), WAIT, || async {
                let st = self.cfgs.get(&cfg).await?.data["status"].clone();
                let settled = st["phase"] == "Applied"
                    && st["handover"]["state"] == "SourceDropped"
                    && st["handover"]["destination"] == server;
                Ok(settled.then_some(()))
            })
            .await?;
        }
        for crd in self.generated_crds() {
            wait_for(&format!("CRD {crd} wired to {service}"), WAIT, || async {
                let c = serde_json::to_value(self.crds.get(&crd).await?)?;
                Ok((dco_api::target::wired_service(&c).map(|(_, n)| n) == Some(service.as_str()))
                    .then_some(()))
            })
            .await?;
        }
        Ok(())
    }

    /// Condition `type_` of config `cfg` as its JSON, if set.
    pub async fn condition(&self, cfg: &str, type_: &str) -> Result<Option<Value>> {
        Ok(condition(&self.cfgs.get(cfg).await?.data, type_))
    }

    /// Deletes every object of the world's kinds (claims first) and waits until they are gone
    /// (Crossplane, still running, removes its finalizers).
    pub async fn remove_objects(&self) -> Result<()> {
        for kind in KINDS.iter().filter(|k| k.claim).chain(KINDS.iter().filter(|k| !k.claim)) {
            let api = self.api(&self.client, kind, HUB);
            let _ = api.delete_collection(&DeleteParams::background(), &Default::default()).await;
            wait_for(&format!("every {} gone", kind.kind), WAIT, || async {
                Ok(api
                    .list(&Default::default())
                    .await
                    .map(|l| l.items.is_empty())
                    .unwrap_or(true)
                    .then_some(()))
            })
            .await?;
        }
        Ok(())
    }

    /// Deletes the configs (allowed by annotation: the targets serve three versions) and waits
    /// up to `timeout` for each to go: their finalizer reverts the XRD's wiring first. The
    /// error names the config's conditions and message, and its XRD's spec.conversion.
    pub async fn delete_configs(&self, timeout: Duration) -> Result<()> {
        let allow = json!({"metadata": {"annotations": {dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE: "true"}}});
        for i in 0..XRDS.len() {
            let cfg = self.config_name(i);
            let _ = self.cfgs.patch(&cfg, &PatchParams::default(), &Patch::Merge(&allow)).await;
            let _ = self.cfgs.delete(&cfg, &DeleteParams::default()).await;
        }
        let xrds: Api<DynamicObject> = Api::all_with(self.client.clone(), &xrd_resource("v1"));
        for i in 0..XRDS.len() {
            let cfg = self.config_name(i);
            if crate::wait_deleted(&self.cfgs, &cfg, timeout).await.is_err() {
                let st = self.cfgs.get(&cfg).await.map(|c| c.data["status"].clone()).unwrap_or_default();
                let conditions: Vec<String> = st["conditions"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|c| {
                        let f = |k: &str| c[k].as_str().unwrap_or_default().to_string();
                        format!("{}={} ({})", f("type"), f("status"), f("reason"))
                    })
                    .collect();
                let xrd =
                    xrds.get(&self.xrd_name(i)).await.map(|x| serde_json::to_value(x).unwrap_or_default());
                let wired = xrd
                    .as_ref()
                    .ok()
                    .and_then(|x| dco_api::target::wired_service(x).map(|(_, n)| n.to_string()));
                let events = crate::warning_events_about(&self.client, &cfg).await.unwrap_or_default();
                anyhow::bail!(
                    "config {cfg} was not deleted within {timeout:?} (its finalizer reverts XRD {}, which still calls {wired:?}); conditions {conditions:?}, message {}; Warning Events {events:?}",
                    self.xrd_name(i),
                    st["message"]
                );
            }
        }
        Ok(())
    }

    /// Clean-up: [`XpWorld::remove_objects`], the configs (their finalizers dropped when they
    /// do not go within 60 s), then the XRDs (Crossplane deletes the CRDs it generated).
    pub async fn remove_all(&self) -> Result<()> {
        self.remove_objects().await?;
        if self.delete_configs(Duration::from_secs(60)).await.is_err() {
            let strip = json!({"metadata": {"finalizers": null}});
            for i in 0..XRDS.len() {
                let _ = self
                    .cfgs
                    .patch(&self.config_name(i), &PatchParams::default(), &Patch::Merge(&strip))
                    .await;
            }
        }
        let xrds: Api<DynamicObject> = Api::all_with(self.client.clone(), &xrd_resource("v1"));
        for i in 0..XRDS.len() {
            let _ = xrds.delete(&self.xrd_name(i), &DeleteParams::default()).await;
        }
        for i in 0..XRDS.len() {
            crate::wait_deleted(&xrds, &self.xrd_name(i), WAIT).await?;
        }
        for crd in self.generated_crds() {
            crate::wait_deleted(&self.crds, &crd, WAIT).await?;
        }
        Ok(())
    }

    /// Force-deletes both servers and waits (best effort) until they are gone.
    pub async fn remove_servers(&self) {
        let force = json!({"metadata": {"annotations": {dco_api::ANNOTATION_ALLOW_FORCE_DELETE: "true"}}});
        for s in &self.servers {
            let _ = self.srvs.patch(s, &PatchParams::default(), &Patch::Merge(&force)).await;
            let _ = self.srvs.delete(s, &DeleteParams::default()).await;
        }
        for s in &self.servers {
            let _ = crate::wait_deleted(&self.srvs, s, WAIT).await;
        }
    }
}

/// Condition `type_` in an object's `status.conditions`.
pub fn condition(obj: &Value, type_: &str) -> Option<Value> {
    obj["status"]["conditions"].as_array()?.iter().find(|c| c["type"] == type_).cloned()
}

/// Whether condition `type_` of an object is `True`.
pub fn is_true(obj: &Value, type_: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c["status"] == "True")
}
