//! The sharded operator-as-Pods scenario (docs/sharding.md), shared by
//! tests/tests/sharding_operator_pods.rs (the testenv with ShardedListAndWatch on) and
//! tests/tests/sharding_operator_pods_fallback.rs (a second testenv with it off): the same
//! ownership and the same results either way.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{AsyncBufReadExt, StreamExt, TryStreamExt};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, ServiceAccount};
use k8s_openapi::api::rbac::v1::ClusterRoleBinding;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use crate::{Manager, TestEnv, container_pid, fnv1a64, pod_ready, query_escape, signal, wait_for};
use dco_api::{CRDConversionConfig, ConversionWebhookServer};

const SHARDS: u32 = 32;
const REPLICAS: usize = 3;
const LEASE_DURATION_S: u64 = 9;
const RENEW_S: u64 = 2;
const CONFIGS: usize = 300;
const REAL: usize = 20;
const MANAGER: Manager = Manager("dco-pods-test");
const WAIT: Duration = Duration::from_secs(120);

/// dco-operator as a Deployment `<app>` of the test's namespace, labelled `app=<app>`: the
/// `dco-operator:dev` image (the testenv maps it to target/debug/dco-operator), a
/// ServiceAccount `dco-operator` bound to cluster-admin by a ClusterRoleBinding
/// `<ns>-dco-operator` ([`remove_operator_binding`] deletes it; the chart's least-privilege
/// RBAC is tests/tests/chart_install.rs's), `--namespace`, `--selector`, `--metrics-listen
/// $(POD_IP):8080` (readiness `/readyz` there) and `--webhook-listen $$(POD_IP):9443` (`$$`
/// escapes the kubelet's expansion: the webhook Pods expand it), then `extra_args`.
pub struct OperatorDeployment<'a> {
    pub app: &'a str,
    pub replicas: usize,
    pub selector: &'a str,
    pub extra_args: Vec<String>,
    pub rust_log: &'a str,
    pub termination_grace_s: u32,
}

impl OperatorDeployment<'_> {
    /// Applies the ServiceAccount, the binding and the Deployment (as `manager`).
    pub async fn apply(&self, t: &TestEnv, manager: &str) -> Result<()> {
        let ns = &t.ns;
        apply_operator_account(t, manager).await?;
        let field = |path: &str| json!({"fieldRef": {"fieldPath": path}});
        let mut args: Vec<String> = [
            "--namespace",
            ns,
            "--selector",
            self.selector,
            "--metrics-listen",
            "$(POD_IP):8080",
            "--webhook-listen",
            "$$(POD_IP):9443",
        ]
        .map(String::from)
        .to_vec();
        args.extend(self.extra_args.iter().cloned());
        let deployments: Api<Deployment> = t.api();
        crate::apply_as(
            &deployments,
            manager,
            self.app,
            json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": self.app},
                "spec": {"replicas": self.replicas, "selector": {"matchLabels": {"app": self.app}},
                    "template": {"metadata": {"labels": {"app": self.app}},
                        "spec": {"serviceAccountName": "dco-operator",
                            "terminationGracePeriodSeconds": self.termination_grace_s,
                            "containers": [{"name": "operator", "image": "dco-operator:dev", "args": args,
                                "env": [
                                    {"name": "POD_NAME", "valueFrom": field("metadata.name")},
                                    {"name": "POD_NAMESPACE", "valueFrom": field("metadata.namespace")},
                                    {"name": "POD_IP", "valueFrom": field("status.podIP")},
                                    {"name": "RUST_LOG", "value": self.rust_log}],
                                "readinessProbe": {"httpGet": {"path": "/readyz", "port": 8080}, "periodSeconds": 1}}]}}}}),
        )
        .await?;
        Ok(())
    }

    /// Waits until exactly `n` of its Pods are Ready, and returns them.
    pub async fn ready(&self, t: &TestEnv, n: usize, timeout: Duration) -> Result<Vec<Pod>> {
        let pods: Api<Pod> = t.api();
        let selector = format!("app={}", self.app);
        wait_for(&format!("{n} Ready operator Pods"), timeout, || async {
            let l = pods.list(&ListParams::default().labels(&selector)).await?;
            let r: Vec<Pod> = l.items.into_iter().filter(pod_ready).collect();
            Ok((r.len() == n).then_some(r))
        })
        .await
    }
}

/// The ServiceAccount `dco-operator` of `t`'s namespace, bound to cluster-admin by the
/// ClusterRoleBinding `<ns>-dco-operator` ([`remove_operator_binding`] deletes it).
pub async fn apply_operator_account(t: &TestEnv, manager: &str) -> Result<()> {
    let ns = &t.ns;
    let sas: Api<ServiceAccount> = t.api();
    let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "dco-operator"}});
    crate::apply_as(&sas, manager, "dco-operator", sa).await?;
    let crbs: Api<ClusterRoleBinding> = Api::all(t.client.clone());
    let crb = format!("{ns}-dco-operator");
    crate::apply_as(
        &crbs,
        manager,
        &crb,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": crb},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": "dco-operator", "namespace": ns}]}),
    )
    .await?;
    Ok(())
}

/// The flags that serve admission from [`OperatorDeployment`] Pods labelled `app=<app>`
/// behind Service `<ns>/<service>`, which the operator applies itself.
pub fn admission_args(ns: &str, service: &str, app: &str) -> Vec<String> {
    [
        "--admission-service",
        &format!("{ns}/{service}"),
        "--admission-listen",
        "$(POD_IP):9443",
        "--admission-pod-selector",
        &format!("app={app}"),
    ]
    .map(String::from)
    .to_vec()
}

/// Deletes the cluster-scoped binding [`OperatorDeployment::apply`] made (the namespace's
/// deletion takes the rest).
pub async fn remove_operator_binding(t: &TestEnv) {
    let crbs: Api<ClusterRoleBinding> = Api::all(t.client.clone());
    let _ = crbs.delete(&format!("{}-dco-operator", t.ns), &DeleteParams::default()).await;
}

/// A test's operators gone for good: first the admission configurations that send to
/// Services of `t`'s namespace (with `failurePolicy: Fail` and the Pods gone, the objects they
/// cover could not be changed any more), then the servers matching each of
/// `server_selectors` (their finalizers dropped: no operator is left to release them), then
/// the binding. The namespace's deletion takes the rest.
pub async fn remove_operators(t: &TestEnv, server_selectors: &[String]) {
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
    let lp = ListParams::default().labels("app.kubernetes.io/name=dco-operator");
    for v in vwcs.list(&lp).await.map(|l| l.items).unwrap_or_default() {
        let ours = v
            .webhooks
            .iter()
            .flatten()
            .any(|h| h.client_config.service.as_ref().is_some_and(|s| s.namespace == t.ns));
        if ours && let Some(name) = v.metadata.name.as_deref() {
            let _ = vwcs.delete(name, &DeleteParams::default()).await;
        }
    }
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let unfinalize = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    for selector in server_selectors {
        let lp = ListParams::default().labels(selector);
        for s in servers.list(&lp).await.map(|l| l.items).unwrap_or_default() {
            let Some(name) = s.metadata.name.as_deref() else { continue };
            let _ = servers.patch(name, &PatchParams::default(), &unfinalize).await;
            let _ = servers.delete(name, &DeleteParams::default()).await;
        }
    }
    remove_operator_binding(t).await;
}

/// The shard of a uid for S = 32: a power of two, so the top 5 bits of the hash.
fn shard_of(uid: &str) -> u32 {
    (fnv1a64(uid.as_bytes()) >> 59) as u32
}

/// One operator replica as the test sees it.
#[derive(Clone, Debug)]
struct Replica {
    pod: String,
    ip: String,
    pid: u32,
}

async fn replicas(pods: &Api<Pod>) -> Result<Vec<Replica>> {
    let list = pods.list(&ListParams::default().labels("app=dco-operator")).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            Some(Replica {
                pod: p.metadata.name.clone()?,
                ip: p.status.as_ref()?.pod_ip.clone()?,
                pid: container_pid(p, "operator")?,
            })
        })
        .collect())
}

/// `/debug/shards` of a replica.
async fn debug_shards(r: &Replica) -> Result<Value> {
    let (code, body) = crate::http_get(&format!("{}:8080", r.ip), "/debug/shards").await?;
    ensure!(code == 200, "/debug/shards of {}: {code} {body}", r.pod);
    Ok(serde_json::from_str(&body)?)
}

/// A series of a replica's `/metrics`; 0 when not exposed yet.
async fn metric(r: &Replica, series: &str) -> Result<f64> {
    Ok(crate::metric(&format!("{}:8080", r.ip), series).await?.unwrap_or(0.0))
}

/// Shard → holder, from the shard Leases (only those held, renewed within the duration).
async fn holders(leases: &Api<Lease>) -> Result<BTreeMap<u32, String>> {
    Ok(crate::shard_holders(leases)
        .await?
        .into_iter()
        .filter(|(_, h)| h.live && !h.holder.is_empty())
        .map(|(i, h)| (i, h.holder))
        .collect())
}

/// Sum of the shard Leases' `leaseTransitions`: one per take.
async fn transitions(leases: &Api<Lease>) -> Result<i64> {
    let lp = ListParams::default().labels("sharding.dco.rs/role=shard");
    Ok(leases
        .list(&lp)
        .await?
        .items
        .iter()
        .map(|l| i64::from(l.spec.as_ref().and_then(|s| s.lease_transitions).unwrap_or(0)))
        .sum())
}

/// The owned sets are a partition of every shard among `n` live pods, each within ceil(S/n).
fn balanced(h: &BTreeMap<u32, String>, pods: &BTreeSet<String>) -> bool {
    let mut count: BTreeMap<&str, u32> = BTreeMap::new();
    for holder in h.values() {
        *count.entry(holder).or_default() += 1;
    }
    let n = pods.len() as u32;
    h.len() == SHARDS as usize
        && count.keys().all(|k| pods.contains(*k))
        && count.len() == pods.len()
        && count.values().all(|c| *c <= SHARDS.div_ceil(n))
}

/// The config reconciles a replica's shard gate let through, by shard (its metrics).
async fn gate_counts(r: &Replica) -> Result<BTreeMap<u32, u64>> {
    crate::shard_reconciles(&format!("{}:8080", r.ip), "crdconversionconfig").await
}

/// What one replica said at one sample: its gate's counts by shard, then the shards its gate
/// owned.
#[derive(Clone, Debug)]
struct Sample {
    counts: BTreeMap<u32, u64>,
    owned: BTreeSet<u32>,
}

/// Samples every replica of `rs` every 500 ms until `stop`: each replica's samples, in order.
fn sample_gates(
    rs: Vec<Replica>,
    stop: Arc<std::sync::atomic::AtomicBool>,
) -> tokio::task::JoinHandle<BTreeMap<String, Vec<Sample>>> {
    tokio::spawn(async move {
        let mut out: BTreeMap<String, Vec<Sample>> = BTreeMap::new();
        loop {
            let last = stop.load(Ordering::SeqCst);
            for r in &rs {
                let Ok(counts) = gate_counts(r).await else { continue };
                let Ok(d) = debug_shards(r).await else { continue };
                let owned =
                    d["owned"].as_array().into_iter().flatten().filter_map(|v| v.as_u64()).map(|v| v as u32);
                out.entry(r.pod.clone()).or_default().push(Sample { counts, owned: owned.collect() });
            }
            if last {
                return out;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    })
}

/// Never two owners, at the samples' resolution: every reconcile a replica's gate let through
/// between two of its samples was of a shard its gate owned at one of them (the gate's owned
/// set is the replica's shard Leases, which no two replicas hold at once: docs/sharding.md,
/// "Never two owners"). Returns how many shards more than one replica reconciled (hand-overs).
fn reconciled_only_while_owned(samples: &BTreeMap<String, Vec<Sample>>) -> Result<usize, String> {
    let mut by: BTreeMap<u32, BTreeSet<&str>> = BTreeMap::new();
    for (pod, seq) in samples {
        for w in seq.windows(2) {
            let (before, after) = (&w[0], &w[1]);
            for (shard, n) in &after.counts {
                if *n > before.counts.get(shard).copied().unwrap_or(0) {
                    if !before.owned.contains(shard) && !after.owned.contains(shard) {
                        return Err(format!(
                            "{pod} reconciled in shard {shard} between two samples, owning it at neither (owned {:?}, then {:?})",
                            before.owned, after.owned
                        ));
                    }
                    by.entry(*shard).or_default().insert(pod);
                }
            }
        }
    }
    Ok(by.values().filter(|p| p.len() > 1).count())
}

/// An unsharded watch of this test's configs, run by the test: the reference stream.
struct Reference {
    bytes: Arc<AtomicU64>,
    /// uid of every object in every event, in order.
    events: Arc<std::sync::Mutex<Vec<String>>>,
}

async fn reference_watch(
    client: &kube::Client,
    selector: &str,
) -> Result<(Reference, tokio::task::JoinHandle<()>)> {
    let rv = Api::<CRDConversionConfig>::all(client.clone())
        .list_metadata(&ListParams::default().labels(selector))
        .await?
        .metadata
        .resource_version
        .unwrap_or_default();
    let r = Reference { bytes: Arc::default(), events: Arc::default() };
    let (bytes, events) = (r.bytes.clone(), r.events.clone());
    let (client, selector) = (client.clone(), selector.to_string());
    // A watch the apiserver ends is resumed from the last resourceVersion seen, as a watcher
    // would: the reference must be the whole stream.
    let task = tokio::spawn(async move {
        let mut rv = rv;
        loop {
            let url = format!(
                "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs?watch=true&allowWatchBookmarks=true&timeoutSeconds=3600&resourceVersion={rv}&labelSelector={}",
                query_escape(&selector)
            );
            let Ok(req) = http::Request::get(url).body(Vec::new()) else { return };
            let Ok(reader) = client.request_stream(req).await else {
                tokio::time::sleep(Duration::from_millis(200)).await;
                continue;
            };
            let mut lines = reader.lines();
            while let Some(Ok(line)) = lines.next().await {
                bytes.fetch_add(line.len() as u64 + 1, Ordering::SeqCst);
                let Ok(ev) = serde_json::from_str::<Value>(&line) else { continue };
                if let Some(v) = ev["object"]["metadata"]["resourceVersion"].as_str() {
                    rv = v.to_string();
                }
                if ev["type"] == "BOOKMARK" || ev["type"] == "ERROR" {
                    continue;
                }
                if let Some(uid) = ev["object"]["metadata"]["uid"].as_str() {
                    events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(uid.to_string());
                }
            }
        }
    });
    Ok((r, task))
}

/// The scenario. `server_side`: whether the cluster's apiserver has ShardedListAndWatch on
/// (the replicas then receive only their shards' events; off, every event, dropped here).
pub async fn divide_and_survive(server_side: bool) -> Result<()> {
    let t = TestEnv::new("oppods").await?;
    let client = t.client.clone();
    let ns = t.ns.clone();
    let (label_k, label_v) = ("dco-pods-test", ns.as_str());
    let selector = format!("{label_k}={label_v}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in dco_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&crd)).await?;
    }
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    wait_for("the dco CRDs to be served", Duration::from_secs(30), || async {
        Ok(cfgs.list(&ListParams::default().limit(1)).await.ok().map(|_| ()))
    })
    .await?;

    // The operator's identity is cluster-admin for this test.
    let deployment = |replicas: usize| OperatorDeployment {
        app: "dco-operator",
        replicas,
        selector: &selector,
        extra_args: [
            "--shards",
            &SHARDS.to_string(),
            "--lease-duration",
            &format!("{LEASE_DURATION_S}s"),
            "--lease-renew-interval",
            &format!("{RENEW_S}s"),
            "--resync",
            "300s",
            "--webhook-arg=--drain-period=5s",
        ]
        .map(String::from)
        .to_vec(),
        rust_log: "info",
        termination_grace_s: 10,
    };
    deployment(REPLICAS).apply(&t, &MANAGER).await?;
    let pods: Api<Pod> = t.api();
    let leases: Api<Lease> = t.api();

    // Settled: three ready replicas hold a balanced partition of the shards.
    let settle = |n: usize| {
        let (pods, leases) = (pods.clone(), leases.clone());
        async move {
            wait_for(&format!("{n} replicas to hold a balanced partition of the shards"), WAIT, || async {
                let rs = replicas(&pods).await?;
                let names: BTreeSet<String> = rs.iter().map(|r| r.pod.clone()).collect();
                let h = holders(&leases).await?;
                Ok((rs.len() == n && balanced(&h, &names)).then_some((rs, h)))
            })
            .await
        }
    };
    let started = Instant::now();
    let (rs, owners) = settle(REPLICAS).await?;
    let transitions_at_settle = transitions(&leases).await?;
    eprintln!("3 replicas settled {:?} after the Deployment was applied", started.elapsed());
    for r in &rs {
        let d = debug_shards(r).await?;
        let owned: BTreeSet<u32> = d["owned"]
            .as_array()
            .context("owned")?
            .iter()
            .filter_map(|v| v.as_u64().map(|v| v as u32))
            .collect();
        let by_leases: BTreeSet<u32> = owners.iter().filter(|(_, h)| **h == r.pod).map(|(i, _)| *i).collect();
        ensure!(owned == by_leases, "{}: /debug/shards says {owned:?}, the Leases {by_leases:?}", r.pod);
        ensure!(
            d["serverSideSelector"] == server_side,
            "{}: the probe's answer is not {server_side}: {d}",
            r.pod
        );
        if server_side {
            ensure!(
                d["selector"].as_str().is_some_and(|s| s.contains("shardRange(object.metadata.uid")),
                "{d}"
            );
        } else {
            ensure!(d["selector"].is_null(), "no selector is sent to a server that ignores it: {d}");
        }
        ensure!(metric(r, "dco_operator_sharded_watch").await? == f64::from(u8::from(server_side)));
    }

    // The reference stream and each replica's counters, from here on.
    let (reference, ref_task) = reference_watch(&client, &selector).await?;
    let kind = "{kind=\"CRDConversionConfig\"}";
    let mut before = BTreeMap::new();
    for r in &rs {
        let bytes = metric(r, &format!("dco_operator_watch_received_bytes_total{kind}")).await?;
        let events = metric(r, &format!("dco_operator_watch_received_events_total{kind}")).await?;
        let dropped = metric(r, &format!("dco_operator_watch_dropped_events_total{kind}")).await?;
        before.insert(r.pod.clone(), (bytes, events, dropped));
    }
    // Who reconciles what, from here on: each replica's gate counts by shard, now and every
    // 500 ms (with the shards its gate owns) until they are compared.
    let mut gates_before = BTreeMap::new();
    for r in &rs {
        gates_before.insert(r.pod.clone(), gate_counts(r).await?);
    }
    let stop_sampling = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let sampler = sample_gates(rs.clone(), stop_sampling.clone());

    // A default server for the real targets, 20 targets of two versions, and 300 configs.
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = format!("{ns}-s");
    MANAGER
        .apply(
            &servers,
            &server,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": server, "labels": {label_k: label_v}},
        "spec": {"namespace": ns, "replicas": 1, "default": true}}),
        )
        .await?;
    let schema = |spec: Value| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": spec}}}});
    let group = |i: usize| format!("g{i}.{ns}.pods.dco.rs");
    let target = |i: usize| format!("widgets.{}", group(i));
    for i in 0..REAL {
        MANAGER.apply(&crds, &target(i), json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": target(i)},
            "spec": {"group": group(i), "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [
                    {"name": "v1", "served": true, "storage": false, "schema": schema(json!({"storageSize": {"type": "integer"}}))},
                    {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"storageGB": {"type": "integer"}}))}]}}))
        .await?;
    }
    let cfg_name = |i: usize| format!("{ns}-c{i:03}");
    // A later stamp changes the spec too (a drift policy, moot without a drift), so that its
    // reconcile shows in the status: `observedGeneration`.
    let config = |i: usize, stamp: &str| {
        let tgt = if i < REAL { target(i) } else { format!("missing{i}.{ns}.pods.dco.rs") };
        let mut c = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": cfg_name(i), "labels": {label_k: label_v}, "annotations": {"dco-pods-test/stamp": stamp}},
            "spec": {"targetCRD": {"name": tgt}, "hubVersion": "v2",
                "spokes": [{"version": "v1", "rules": [
                    {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]}});
        if stamp != "1" {
            c["spec"]["driftPolicy"] = json!("FailClosed");
        }
        c
    };
    let created = Instant::now();
    futures::stream::iter(0..CONFIGS)
        .map(|i| {
            let cfgs = cfgs.clone();
            let obj = config(i, "1");
            async move { MANAGER.apply(&cfgs, &cfg_name(i), obj).await.map(|_| ()) }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<()>>()
        .await?;
    eprintln!("applied {CONFIGS} configs in {:?}", created.elapsed());

    // Every config gets a status from its reconcile; the real targets get wired.
    let uids: BTreeMap<String, String> = wait_for("every config to have a status", WAIT, || async {
        let list = cfgs.list(&ListParams::default().labels(&selector)).await?;
        let done = list.items.iter().filter(|c| c.status.as_ref().is_some_and(|s| s.phase.is_some())).count();
        Ok((done == CONFIGS).then(|| {
            list.items
                .iter()
                .filter_map(|c| Some((c.metadata.name.clone()?, c.metadata.uid.clone()?)))
                .collect()
        }))
    })
    .await?;
    eprintln!("all {CONFIGS} configs had a status {:?} after the first apply", created.elapsed());
    for i in 0..REAL {
        wait_for(&format!("target {} wired to the server", target(i)), WAIT, || async {
            let crd = crds.get(&target(i)).await?;
            let strategy = crd.spec.conversion.as_ref().map(|c| c.strategy.clone());
            Ok((strategy.as_deref() == Some("Webhook")).then_some(()))
        })
        .await?;
    }
    // Converted: written at v1, read at v2 (every read at another version is a conversion).
    for i in 0..REAL {
        let gvk = |v: &str| GroupVersionKind::gvk(&group(i), v, "Widget");
        let ar = |v: &str| ApiResource::from_gvk_with_plural(&gvk(v), "widgets");
        let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v1"));
        let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v2"));
        let obj = json!({"apiVersion": format!("{}/v1", group(i)), "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"storageSize": i}});
        wait_for(&format!("a v1 write of target {i} converted"), WAIT, || async {
            Ok(v1.patch("w", &PatchParams::apply(&MANAGER), &Patch::Apply(&obj)).await.ok().map(|_| ()))
        })
        .await?;
        let got = v2.get("w").await?;
        ensure!(got.data["spec"]["storageGB"] == json!(i), "target {i} at v2: {}", got.data);
    }

    // Who reconciled what: every config by the owner of its shard, and by no other replica —
    // unless the shard changed hands (renewals starved past the deadline on a loaded machine
    // lapse and lose shards, membership), and then only while it owned it. Every config has a
    // status, written by a reconcile, so the owner's gate let at least one through for each.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop_sampling.store(true, Ordering::SeqCst);
    let samples = sampler.await?;
    let moved_during_test = transitions(&leases).await? - transitions_at_settle;
    let mut configs_in: BTreeMap<u32, u64> = BTreeMap::new();
    for uid in uids.values() {
        *configs_in.entry(shard_of(uid)).or_default() += 1;
    }
    // shard → replica → reconciles since the configs were applied
    let mut by: BTreeMap<u32, BTreeMap<String, u64>> = BTreeMap::new();
    for r in &rs {
        let was = &gates_before[&r.pod];
        for (shard, n) in gate_counts(r).await? {
            let d = n - was.get(&shard).copied().unwrap_or(0);
            if d > 0 {
                by.entry(shard).or_default().insert(r.pod.clone(), d);
            }
        }
    }
    if moved_during_test == 0 {
        for shard in 0..SHARDS {
            let (owner, n) = (&owners[&shard], configs_in.get(&shard).copied().unwrap_or(0));
            let who = by.get(&shard).cloned().unwrap_or_default();
            let replicas: BTreeSet<&String> = who.keys().collect();
            if n == 0 {
                ensure!(who.is_empty(), "shard {shard} holds no config, yet reconciles by {who:?}");
                continue;
            }
            ensure!(
                replicas == BTreeSet::from([owner]),
                "shard {shard} ({n} configs) reconciled by {who:?}, owner {owner}"
            );
            ensure!(
                who[owner] >= n,
                "shard {shard}: {} reconciles by its owner {owner} for {n} configs",
                who[owner]
            );
        }
    } else {
        let handed_over = reconciled_only_while_owned(&samples)
            .map_err(|e| anyhow::anyhow!("shards changed hands {moved_during_test} times: {e}"))?;
        eprintln!(
            "shards changed hands {moved_during_test} times after settling (starved renewals); {handed_over} shards reconciled by more than one replica, each only while it owned them"
        );
    }
    let per_replica: Vec<(String, u64)> =
        rs.iter().map(|r| (r.pod.clone(), by.values().filter_map(|w| w.get(&r.pod)).sum())).collect();
    eprintln!("config reconciles per replica: {per_replica:?}");

    // The sharded streams: each replica received exactly the events of its own shards' configs.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ref_events = reference.events.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
    let ref_bytes = reference.bytes.load(Ordering::SeqCst) as f64;
    for r in &rs {
        let mine: BTreeSet<u32> = owners.iter().filter(|(_, h)| **h == r.pod).map(|(i, _)| *i).collect();
        let want = ref_events.iter().filter(|u| mine.contains(&shard_of(u))).count() as f64;
        let (b0, e0, d0) = before[&r.pod];
        let bytes = metric(r, &format!("dco_operator_watch_received_bytes_total{kind}")).await? - b0;
        let events = metric(r, &format!("dco_operator_watch_received_events_total{kind}")).await? - e0;
        let dropped = metric(r, &format!("dco_operator_watch_dropped_events_total{kind}")).await? - d0;
        eprintln!(
            "{}: {events} events ({:.3} of the unsharded {}), {bytes} bytes ({:.3} of {ref_bytes}), owns {} of {SHARDS} shards; bound 1.2/N = {:.3}",
            r.pod,
            events / ref_events.len() as f64,
            ref_events.len(),
            bytes / ref_bytes,
            mine.len(),
            1.2 / REPLICAS as f64
        );
        if moved_during_test > 0 {
            // A changed owned set restarts the shard-scoped watches (a re-list): the counts
            // above no longer compare with the reference's for the settled partition.
            eprintln!("{}: stream counts not compared (shards changed hands)", r.pod);
        } else if server_side {
            ensure!(
                events == want,
                "{}: {events} events received, {want} in the reference for its shards",
                r.pod
            );
            ensure!(dropped == 0.0, "{}: the apiserver sent {dropped} objects of other shards", r.pod);
            ensure!(
                bytes / ref_bytes < 0.5,
                "{}: {bytes} of {ref_bytes} bytes is not a shard's share",
                r.pod
            );
        } else {
            // The fallback: the whole stream arrives, and what is of other shards is dropped here.
            let all = ref_events.len() as f64;
            ensure!(events == all, "{}: {events} events received, {all} in the unsharded stream", r.pod);
            ensure!(
                dropped == all - want,
                "{}: {dropped} dropped, {} are of other shards",
                r.pod,
                all - want
            );
        }
    }
    ref_task.abort();

    // SIGSTOP one replica: it stops reconciling before its shards are taken, the others take
    // them (their gates' counts of the shard move) and a change in one of them is reconciled
    // there (the config's status is of the change's generation), and the stopped one, resumed,
    // does not reconcile what it no longer owns (its gate's counts of those shards stay).
    let victim = rs[0].clone();
    let victim_shards: BTreeSet<u32> =
        owners.iter().filter(|(_, h)| **h == victim.pod).map(|(i, _)| *i).collect();
    let (moved_name, moved_uid) = uids
        .iter()
        .find(|(_, u)| victim_shards.contains(&shard_of(u)))
        .context("a config in the stopped replica's shards")?;
    let moved_shard = shard_of(moved_uid);
    let moved_i: usize =
        moved_name.rsplit("-c").next().and_then(|s| s.parse().ok()).context("config index")?;
    let victim_before = gate_counts(&victim).await?;
    let others: Vec<Replica> = rs.iter().filter(|r| r.pod != victim.pod).cloned().collect();
    let mut others_before = BTreeMap::new();
    for r in &others {
        others_before.insert(r.pod.clone(), gate_counts(r).await?.get(&moved_shard).copied().unwrap_or(0));
    }
    signal(victim.pid, "STOP")?;
    let stopped = Instant::now();
    let changed = MANAGER.apply(&cfgs, moved_name, config(moved_i, "2")).await?;
    let generation = changed.metadata.generation.context("the changed config's generation")?;
    // Taken: another replica's gate lets a reconcile of the shard through (taking a shard
    // reconciles every object in it, the changed one too).
    let taker = wait_for("another replica to reconcile in a stopped replica's shard", WAIT, || async {
        for r in &others {
            if gate_counts(r).await?.get(&moved_shard).copied().unwrap_or(0) > others_before[&r.pod] {
                return Ok(Some(r.pod.clone()));
            }
        }
        Ok(None)
    })
    .await?;
    let took = stopped.elapsed();
    // And the change itself is reconciled: the config's status is of its new generation.
    wait_for("the change in a stopped replica's shard to be reconciled", WAIT, || async {
        let c = cfgs.get(moved_name).await?;
        Ok(c.status.and_then(|s| s.observed_generation).filter(|g| *g >= generation).map(|_| ()))
    })
    .await?;
    eprintln!(
        "{taker} reconciled in shard {moved_shard} {took:?} after {} was stopped, and {moved_name}'s change {:?} after",
        victim.pod,
        stopped.elapsed()
    );
    ensure!(
        took <= Duration::from_secs(LEASE_DURATION_S + RENEW_S + 3),
        "the change waited {took:?}, beyond the lease duration plus a renew interval (and 3 s for the ticks' writes, the relist and the reconcile)"
    );
    let h = holders(&leases).await?;
    ensure!(h.values().all(|p| *p != victim.pod), "the stopped replica still holds live shard Leases: {h:?}");
    signal(victim.pid, "CONT")?;
    // Resumed, it rejoins: shards come back to it only by Lease takes, at its ticks.
    settle(REPLICAS).await?;
    let victim_after = gate_counts(&victim).await?;
    let h = holders(&leases).await?;
    for (shard, n) in &victim_after {
        let was = victim_before.get(shard).copied().unwrap_or(0);
        ensure!(
            *n == was || h.get(shard) == Some(&victim.pod),
            "{} reconciled {} times in shard {shard} while stopped or before retaking it",
            victim.pod,
            n - was
        );
    }
    let skipped =
        metric(&victim, "dco_operator_reconciles_skipped_total{controller=\"crdconversionconfig\"}").await?;
    eprintln!("{} resumed and rejoined; its gate skipped {skipped} reconciles in all", victim.pod);

    // SIGKILL a replica: the kubelet restarts it under the same Pod name, and it resumes.
    let rs = replicas(&pods).await?;
    let killed = rs.iter().find(|r| r.pod != victim.pod).context("a replica to kill")?.clone();
    signal(killed.pid, "KILL")?;
    let at = Instant::now();
    let restarted = wait_for("the killed replica to be restarted and own its shards again", WAIT, || async {
        let now = replicas(&pods).await?;
        let names: BTreeSet<String> = now.iter().map(|r| r.pod.clone()).collect();
        let h = holders(&leases).await?;
        Ok(now
            .iter()
            .find(|r| r.pod == killed.pod && r.pid != killed.pid)
            .filter(|_| balanced(&h, &names) && h.values().any(|p| *p == killed.pod))
            .cloned())
    })
    .await?;
    eprintln!(
        "{} (pid {} → {}) owned shards again {:?} after SIGKILL",
        killed.pod,
        killed.pid,
        restarted.pid,
        at.elapsed()
    );

    // Scale to 1: the survivor owns every shard (the others free theirs on SIGTERM).
    deployment(1).apply(&t, &MANAGER).await?;
    let at = Instant::now();
    let (rs1, _) = settle(1).await?;
    eprintln!("scaled to 1: {} owned all {SHARDS} shards {:?} after the scale", rs1[0].pod, at.elapsed());
    let d = debug_shards(&rs1[0]).await?;
    ensure!(d["selector"].is_null(), "owning everything asks for no selector: {d}");
    // And back to 3: exactly the shards that must move do, each once.
    let takes_before = transitions(&leases).await?;
    deployment(REPLICAS).apply(&t, &MANAGER).await?;
    let at = Instant::now();
    let (_, h3) = settle(REPLICAS).await?;
    tokio::time::sleep(Duration::from_secs(RENEW_S * 2)).await;
    let takes = transitions(&leases).await? - takes_before;
    let kept = h3.values().filter(|p| **p == rs1[0].pod).count() as i64;
    eprintln!(
        "scaled back to 3 in {:?}: {takes} shard takes, the minimum is {} (the survivor kept {kept})",
        at.elapsed(),
        i64::from(SHARDS) - kept
    );
    ensure!(
        takes == i64::from(SHARDS) - kept,
        "{takes} takes to spread {SHARDS} shards from 1 replica to 3 (kept {kept})"
    );

    // Cleanup: the operator goes first, then the finalizers it would have handled.
    deployment(0).apply(&t, &MANAGER).await?;
    wait_for("the operator Pods to go", WAIT, || async {
        Ok(pods.list(&ListParams::default().labels("app=dco-operator")).await?.items.is_empty().then_some(()))
    })
    .await?;
    let unfinalize = json!({"metadata": {"finalizers": null}});
    for i in 0..CONFIGS {
        let _ = cfgs.patch(&cfg_name(i), &PatchParams::default(), &Patch::Merge(&unfinalize)).await;
        let _ = cfgs.delete(&cfg_name(i), &DeleteParams::default()).await;
    }
    let _ = servers.patch(&server, &PatchParams::default(), &Patch::Merge(&unfinalize)).await;
    let _ = servers.delete(&server, &DeleteParams::default()).await;
    for i in 0..REAL {
        let _ = crds.delete(&target(i), &DeleteParams::default()).await;
    }
    remove_operator_binding(&t).await;
    t.cleanup().await;
    Ok(())
}

/// Admission reviews every 20 ms while it runs, each a dry-run create (nothing is stored) of a
/// server labelled `label`: alternately a valid one, to be admitted, and a second default
/// named `second_default` beside the existing default, to be refused by its rule.
pub struct SecondDefaultLoad {
    stop: Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<ReviewTally>,
}

/// (admitted, refused by the rule, failed with when and why).
pub type ReviewTally = (u64, u64, Vec<(Instant, String)>);

impl SecondDefaultLoad {
    pub fn start(servers: Api<ConversionWebhookServer>, second_default: &str, label: (&str, &str)) -> Self {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (d2, label) = (second_default.to_string(), (label.0.to_string(), label.1.to_string()));
        let running = stop.clone();
        let task = tokio::spawn(async move {
            let (mut admitted, mut denied, mut failed) = (0u64, 0u64, Vec::<(Instant, String)>::new());
            let dry = kube::api::PostParams { dry_run: true, ..Default::default() };
            let mut i = 0u64;
            while !running.load(Ordering::SeqCst) {
                i += 1;
                let bad = i.is_multiple_of(2);
                let name = if bad { d2.clone() } else { format!("{d2}-ok-{i}") };
                let obj: ConversionWebhookServer = serde_json::from_value(json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                    "metadata": {"name": name, "labels": {label.0.clone(): label.1.clone()}}, "spec": {"default": bad, "replicas": 0}}))
                .expect("a server");
                match servers.create(&dry, &obj).await {
                    Ok(_) if !bad => admitted += 1,
                    Err(kube::Error::Api(e))
                        if bad && e.message.contains("already has spec.default: true") =>
                    {
                        denied += 1
                    }
                    Ok(_) => failed.push((Instant::now(), "a second default admitted".into())),
                    Err(e) => failed.push((Instant::now(), e.to_string())),
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            (admitted, denied, failed)
        });
        SecondDefaultLoad { stop, task }
    }

    /// Stops it and says what it saw.
    pub async fn stop(self) -> Result<ReviewTally> {
        self.stop.store(true, Ordering::SeqCst);
        Ok(self.task.await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reconcile_of_a_shard_owned_at_neither_sample_is_caught() {
        let sample = |counts: &[(u32, u64)], owned: &[u32]| Sample {
            counts: counts.iter().copied().collect(),
            owned: owned.iter().copied().collect(),
        };
        // a reconciles shard 3 while owning it, hands it to b, which reconciles it once it owns it.
        let ok = BTreeMap::from([
            ("a".to_string(), vec![sample(&[], &[3]), sample(&[(3, 2)], &[3]), sample(&[(3, 2)], &[])]),
            ("b".to_string(), vec![sample(&[], &[]), sample(&[], &[3]), sample(&[(3, 1)], &[3])]),
        ]);
        assert_eq!(reconciled_only_while_owned(&ok), Ok(1));
        // b reconciles shard 3 between two samples at which it owned it at neither: two owners.
        let two = BTreeMap::from([
            ("a".to_string(), vec![sample(&[], &[3]), sample(&[(3, 1)], &[3])]),
            ("b".to_string(), vec![sample(&[], &[4]), sample(&[(3, 1)], &[4])]),
        ]);
        assert!(reconciled_only_while_owned(&two).is_err());
        // a, having handed shard 3 over, reconciles it again without owning it.
        let back = BTreeMap::from([(
            "a".to_string(),
            vec![sample(&[(3, 1)], &[3]), sample(&[(3, 1)], &[]), sample(&[(3, 2)], &[])],
        )]);
        assert!(reconciled_only_while_owned(&back).is_err());
    }
}
