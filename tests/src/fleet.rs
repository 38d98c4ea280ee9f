//! Rename targets in bulk, everything labelled `<label>=<namespace>` so one call deletes it:
//! a namespaced Widget CRD whose v1 holds `spec.foo` and v2 (stored) `spec.bar`, a config
//! renaming one to the other, and servers of 2 replicas. Shared by tests/sharding_rebalance.rs
//! and the scale benches (tests/examples/scale_*.rs).

use std::ops::Range;
use std::time::Duration;

use anyhow::Result;
use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::{Manager, wait_crd_established, wait_for};

/// The field manager and the label of one run's objects.
#[derive(Clone, Copy, Debug)]
pub struct Fleet<'a> {
    pub manager: Manager,
    pub label: &'a str,
    pub ns: &'a str,
}

impl Fleet<'_> {
    /// `<label>=<namespace>`: selects everything this run made.
    pub fn selector(&self) -> String {
        format!("{}={}", self.label, self.ns)
    }

    /// The CRD `widgets.<group>`.
    pub fn crd(&self, group: &str) -> Value {
        let schema = |field: &str| {
            json!({"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
        };
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("widgets.{group}"), "labels": {self.label: self.ns}},
            "spec": {"group": group, "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [
                    {"name": "v1", "served": true, "storage": false, "schema": schema("foo")},
                    {"name": "v2", "served": true, "storage": true, "schema": schema("bar")}]}})
    }

    /// The config `name` of `target` (hub v2, `spec.bar` ⇄ `spec.foo` at v1), pinned to
    /// `server` when given.
    pub fn config(&self, name: &str, target: &str, server: Option<&str>) -> Value {
        let mut spec = json!({"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1",
            "rules": [{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.bar", "spokePath": "spec.foo"}}]}]});
        if let Some(server) = server {
            spec["webhookServerRef"] = json!({"name": server});
        }
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": name, "labels": {self.label: self.ns}}, "spec": spec})
    }

    /// A server of 2 replicas running in the run's namespace.
    pub fn server(&self, name: &str, default: bool, sharded: bool) -> Value {
        let mut spec = json!({"namespace": self.ns, "replicas": 2, "default": default});
        if sharded {
            spec["sharding"] = json!({"enabled": true});
        }
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": {self.label: self.ns}}, "spec": spec})
    }

    /// Applies the targets `range` names (`names(i)`: the group and the config's name): the
    /// CRDs, then, once every one is Established, their configs; `concurrency` requests at a
    /// time.
    pub async fn apply_targets(
        &self,
        client: &Client,
        range: Range<usize>,
        concurrency: usize,
        timeout: Duration,
        names: impl Fn(usize) -> (String, String),
    ) -> Result<()> {
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
        let names = &names;
        stream::iter(range.clone())
            .map(|i| {
                let crds = crds.clone();
                async move {
                    let group = names(i).0;
                    self.manager.apply(&crds, &format!("widgets.{group}"), self.crd(&group)).await.map(|_| ())
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<_>>()
            .await?;
        for i in range.clone() {
            wait_crd_established(&crds, &format!("widgets.{}", names(i).0), timeout).await?;
        }
        stream::iter(range)
            .map(|i| {
                let cfgs = cfgs.clone();
                async move {
                    let (group, config) = names(i);
                    let body = self.config(&config, &format!("widgets.{group}"), None);
                    self.manager.apply(&cfgs, &config, body).await.map(|_| ())
                }
            })
            .buffer_unordered(concurrency)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }

    /// Deletes everything cluster-scoped the run labelled, finalizers first (the operators are
    /// stopped by then, so none would be handled or added again).
    pub async fn delete_all(&self, client: &Client) {
        let lp = ListParams::default().labels(&self.selector());
        let strip = Patch::Merge(json!({"metadata": {"finalizers": null}}));
        let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
        if let Ok(list) = cfgs.list_metadata(&lp).await {
            stream::iter(list.items)
                .for_each_concurrent(16, |c| {
                    let (cfgs, strip) = (cfgs.clone(), &strip);
                    async move {
                        let name = kube::ResourceExt::name_any(&c);
                        let _ = cfgs.patch(&name, &PatchParams::default(), strip).await;
                    }
                })
                .await;
        }
        let _ = cfgs.delete_collection(&DeleteParams::background(), &lp).await;
        let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
        let _ = crds.delete_collection(&DeleteParams::background(), &lp).await;
        let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
        if let Ok(list) = servers.list_metadata(&lp).await {
            for s in list.items {
                let name = kube::ResourceExt::name_any(&s);
                let _ = servers.patch(&name, &PatchParams::default(), &strip).await;
            }
        }
        let _ = servers.delete_collection(&DeleteParams::background(), &lp).await;
    }
}

/// Waits until the server `name` has 2 ready replicas, is Available and both replicas publish
/// a live served-target Lease.
pub async fn wait_server_up(client: &Client, name: &str, timeout: Duration) -> Result<()> {
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    wait_for(&format!("server {name}: 2 ready, Available, 2 reporting"), timeout, || async {
        let st = servers.get(name).await?.status.unwrap_or_default();
        let available = st.conditions.iter().any(|c| c.type_ == "Available" && c.status == "True");
        Ok((available && st.ready_replicas == 2 && st.reporting_replicas == 2).then_some(()))
    })
    .await
}
