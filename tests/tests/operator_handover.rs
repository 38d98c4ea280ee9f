//! dco-operator on the local cluster: it runs two ConversionWebhookServers (their Deployments,
//! Services, RBAC and self-managed certificates), wires a CRD to the one its config names, and
//! moves it to the other when the config is re-pinned. Proves: objects written at one version
//! read back at the other; the target is re-wired only once every live replica of the
//! destination reports it in its served-target Lease; the move passes through every handover
//! state (one Event each) and settles; and not a single read at the spoke version fails
//! while a loop keeps reading throughout the move. Deleting the config then reverts the
//! CRD's spec.conversion (the safe-revert finalizer). With `--otlp-endpoint` pointing at a
//! collector on loopback, the move arrives there as one trace: its root span under the
//! persisted traceparent's ids and one child span per transition.
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook` (built by
//! `cargo test --workspace --no-run`, or `cargo build -p dco-operator -p dco-webhook`).
//! The operator runs as two local processes (replicas dividing the work by shard Leases),
//! scoped by `--selector` to this test's objects, and the
//! config is pinned, so other tests' servers on the same cluster cannot interfere.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::served_lease::{self, Report};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, LABEL_INSTANCE};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use opentelemetry_proto::tonic::trace::v1::Span;
use serde_json::{Value, json};

use dco_tests::{TestEnv, hex, wait_for};

const MANAGER: &str = "dco-operator-e2e";
const WAIT: Duration = Duration::from_secs(120);

/// Two replicas, which divide the configs and servers by shard Leases in the test's namespace
/// (docs/sharding.md): the move is made by whichever owns the config's shard.
const REPLICAS: [&str; 2] = ["oph-1", "oph-2"];

fn start_operator(env: &TestEnv, selector: &str, otlp: &str) -> Result<dco_tests::Operators> {
    dco_tests::start_operators(env, selector, &REPLICAS, &["--resync", "60s", "--otlp-endpoint", otlp])
}

async fn apply<K>(api: &Api<K>, name: &str, obj: Value) -> Result<K>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + serde::Serialize + std::fmt::Debug,
{
    dco_tests::apply_as(api, MANAGER, name, obj).await
}

fn schema(spec: Value) -> Value {
    json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": spec}}}})
}

/// `(namespace, name)` of the Service the CRD's spec.conversion names.
fn wired(crd: &CustomResourceDefinition) -> Option<(String, String)> {
    let svc = crd.spec.conversion.as_ref()?.webhook.as_ref()?.client_config.as_ref()?.service.as_ref()?;
    Some((svc.namespace.clone(), svc.name.clone()))
}

/// Whether every live served-target Lease of `server` lists `target` (and how many there are).
async fn leases_report(leases: &Api<Lease>, server: &str, target: &str) -> Result<(bool, usize)> {
    let list = leases.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut live = 0;
    let mut all = true;
    for l in &list.items {
        let spec = l.spec.clone().unwrap_or_default();
        let (Some(renew), Some(secs)) = (spec.renew_time, spec.lease_duration_seconds) else { continue };
        if renew.0 + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(secs)) < now {
            continue;
        }
        live += 1;
        let ann = l.metadata.annotations.clone().unwrap_or_default();
        match served_lease::read(&ann) {
            Report::Targets(t) if t.contains(target) => {}
            _ => all = false,
        }
    }
    Ok((all && live > 0, live))
}

async fn ready_pods(pods: &Api<Pod>, server: &str) -> Result<usize> {
    let list = pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| dco_tests::pod_ready(p) && p.metadata.deletion_timestamp.is_none())
        .count())
}

fn handover(cfg: &CRDConversionConfig) -> (String, String, String) {
    let st = cfg.status.clone().unwrap_or_default();
    let h = st.handover.unwrap_or_default();
    (
        format!("{:?}", st.phase.unwrap_or_default()),
        format!("{:?}", h.state),
        h.destination.unwrap_or_default(),
    )
}

async fn wait_settled(
    cfgs: &Api<CRDConversionConfig>,
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    target: &str,
    ns: &str,
    server: &str,
) -> Result<()> {
    let service = format!("dco-webhook-{server}");
    wait_for(&format!("config {name} settled on {server}"), WAIT, || async {
        let cfg = cfgs.get(name).await?;
        let crd = crds.get(target).await?;
        let settled = handover(&cfg) == ("Applied".into(), "SourceDropped".into(), server.to_string())
            && wired(&crd) == Some((ns.to_string(), service.clone()));
        Ok(settled.then_some(()))
    })
    .await
}

#[tokio::test]
async fn a_pinned_target_moves_between_servers_with_no_failed_read() -> Result<()> {
    let env = TestEnv::new("oph").await?;
    let client = env.client.clone();
    let ns = env.ns.clone();
    dco_tests::workspace_binary("dco-webhook")?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;

    // dco's own CRDs, as the chart ships them.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in dco_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply(MANAGER).force(), &Patch::Apply(&crd)).await?;
        // Run alone on a fresh cluster, the kinds must be served before the first server.
        dco_tests::wait_crd_established(&crds, &name, WAIT).await?;
    }

    let selector_label = ("dco-e2e", ns.as_str());
    let selector = format!("{}={}", selector_label.0, selector_label.1);
    let (otlp, exports) = dco_tests::otlp_collector().await?;
    let _operator = start_operator(&env, &selector, &otlp)?;

    let (a, b) = (format!("{ns}-a"), format!("{ns}-b"));
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = |name: &str| {
        json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": {selector_label.0: selector_label.1}},
            "spec": {"namespace": ns, "replicas": 2},
        })
    };
    apply(&servers, &a, server(&a)).await?;

    // The target: v1 served (spoke), v2 served and stored (hub).
    let group = format!("{ns}.e2e.dco.rs");
    let target = format!("widgets.{group}");
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target, "labels": {selector_label.0: selector_label.1}},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema(json!({"storageSize": {"type": "integer"}, "owner": {"type": "string"}}))},
                {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"storageGB": {"type": "integer"}, "owner": {"type": "string"}}))},
            ]},
    });
    apply(&crds, &target, crd).await?;
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let cfg_name = format!("{ns}-widgets");
    let config = |pin: &str| {
        json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": cfg_name, "labels": {selector_label.0: selector_label.1}},
            "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "webhookServerRef": {"name": pin},
                "spokes": [{"version": "v1", "rules": [
                    {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]},
        })
    };
    apply(&cfgs, &cfg_name, config(&a)).await?;
    wait_settled(&cfgs, &crds, &cfg_name, &target, &ns, &a).await?;

    // Objects written at the spoke version, read back at the hub version.
    let gvk = |v: &str| GroupVersionKind::gvk(&group, v, "Widget");
    let ar = |v: &str| ApiResource::from_gvk_with_plural(&gvk(v), "widgets");
    let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v1"));
    let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v2"));
    for i in 0..10 {
        let name = format!("w{i}");
        let obj = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": name},
            "spec": {"storageSize": i, "owner": "e2e"}});
        v1.patch(&name, &PatchParams::apply(MANAGER), &Patch::Apply(&obj)).await.context("writing at v1")?;
    }
    let w3 = v2.get("w3").await.context("reading w3 at v2")?;
    ensure!(w3.data["spec"]["storageGB"] == json!(3), "w3 at v2: {}", w3.data);

    // Keep reading at the spoke version (every read is a conversion) for the whole move.
    let stop = Arc::new(AtomicBool::new(false));
    let (ok, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let reader = {
        let (stop, ok, failed, v1) = (stop.clone(), ok.clone(), failed.clone(), v1.clone());
        tokio::spawn(async move {
            let mut errors = Vec::new();
            while !stop.load(Ordering::SeqCst) {
                match v1.list(&ListParams::default()).await {
                    Ok(l)
                        if l.items.len() == 10
                            && l.items.iter().all(|o| o.data["spec"]["storageSize"].is_i64()) =>
                    {
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(l) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        errors.push(format!(
                            "{} items, first: {:?}",
                            l.items.len(),
                            l.items.first().map(|o| &o.data)
                        ));
                    }
                    Err(e) => {
                        failed.fetch_add(1, Ordering::SeqCst);
                        errors.push(e.to_string());
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            errors
        })
    };

    // The second server, and the config re-pinned to it at once: the operator must hold the
    // wiring until b's replicas report the target.
    let move_started = Instant::now();
    apply(&servers, &b, server(&b)).await?;
    apply(&cfgs, &cfg_name, config(&b)).await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let b_service = (ns.clone(), format!("dco-webhook-{b}"));
    let mut saw_wait = false;
    loop {
        ensure!(move_started.elapsed() < WAIT, "the move to {b} did not settle within {WAIT:?}");
        let crd = crds.get(&target).await?;
        let (b_reports, b_leases) = leases_report(&leases, &b, &target).await?;
        if wired(&crd) == Some(b_service.clone()) {
            // Wired to b: every live replica of b reports the target, and all ready ones publish.
            let ready = ready_pods(&pods, &b).await?;
            ensure!(b_reports, "{target} is wired to {b} but not every live Lease of {b} reports it");
            ensure!(
                b_leases >= ready,
                "{target} is wired to {b} with {b_leases} live Leases for {ready} ready Pods"
            );
            break;
        }
        saw_wait |= !b_reports;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        saw_wait,
        "never observed the destination before it reported the target; the guard went untested"
    );
    wait_settled(&cfgs, &crds, &cfg_name, &target, &ns, &b).await?;
    let move_took = move_started.elapsed();
    // One move, from a to b: not a restarted one that took b for its source.
    let h = cfgs.get(&cfg_name).await?.status.and_then(|s| s.handover).unwrap_or_default();
    ensure!(h.source.as_deref() == Some(a.as_str()) && h.attempt == 2, "the settled move is {h:?}");
    tokio::time::sleep(Duration::from_secs(2)).await;
    stop.store(true, Ordering::SeqCst);
    let errors = reader.await?;
    let (ok, failed) = (ok.load(Ordering::SeqCst), failed.load(Ordering::SeqCst));
    eprintln!("move to {b} settled in {move_took:?}; reads at v1 during the move: {ok} ok, {failed} failed");
    ensure!(failed == 0, "{failed} reads failed during the move: {errors:?}");
    ensure!(ok >= 10, "only {ok} reads ran during the move");

    // a dropped the target (SourceDropped); b converts now.
    let (a_reports, _) = leases_report(&leases, &a, &target).await?;
    ensure!(!a_reports, "{a} still reports {target} after SourceDropped");
    let w7 = v1.get("w7").await?;
    ensure!(w7.data["spec"]["storageSize"] == json!(7), "w7 at v1: {}", w7.data);

    // One Event per transition of the move (attempt 2).
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(cfg_name.as_str()))
        .filter(|e| e.action.as_deref() == Some("HandoverMove2"))
        .filter_map(|e| e.reason)
        .collect();
    for want in ["HandoverStarted", "DestinationReady", "Patched", "SourceDropped"] {
        ensure!(
            reasons.iter().filter(|r| *r == want).count() == 1,
            "want one {want} Event for the move; saw {reasons:?}"
        );
    }

    // The same move in the collector: one trace, named by the persisted traceparent; its root
    // span carries the traceparent's span id, and each transition is one child of it. The
    // exporter batches (every 5 s by default).
    let traceparent = h.traceparent.clone().unwrap_or_default();
    let (trace_id, root_id) =
        (traceparent.get(3..35).unwrap_or_default(), traceparent.get(36..52).unwrap_or_default());
    let want = ["handover", "HandoverStarted", "DestinationReady", "Patched", "SourceDropped"];
    let names = wait_for("the move's spans at the OTLP collector", Duration::from_secs(30), || async {
        let got = dco_tests::otlp_spans(&exports);
        let ours = got.iter().filter(|s| hex(&s.trace_id) == trace_id);
        let parented = |s: &&Span| {
            if s.name == "handover" {
                hex(&s.span_id) == root_id && s.parent_span_id.is_empty()
            } else {
                hex(&s.parent_span_id) == root_id
            }
        };
        let names: Vec<String> = ours.filter(parented).map(|s| s.name.clone()).collect();
        Ok(want.iter().all(|w| names.iter().filter(|n| n == w).count() == 1).then_some(names))
    })
    .await?;
    eprintln!("trace {trace_id} at the collector: {names:?}");

    // Deleting the config reverts the CRD (it serves two versions: allowed by annotation).
    cfgs.patch(
        &cfg_name,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"conversion.dco.rs/allow-unsafe-delete": "true"}}}),
        ),
    )
    .await?;
    cfgs.delete(&cfg_name, &DeleteParams::default()).await?;
    wait_for("the config's finalizer to revert the CRD", WAIT, || async {
        let gone = cfgs.get_opt(&cfg_name).await?.is_none();
        let crd = crds.get(&target).await?;
        let none = crd.spec.conversion.as_ref().is_some_and(|c| c.strategy == "None");
        Ok((gone && none).then_some(()))
    })
    .await?;

    cleanup(&client, &servers, &[a, b], &crds, &target).await;
    env.cleanup().await;
    Ok(())
}

async fn cleanup(
    _client: &Client,
    servers: &Api<ConversionWebhookServer>,
    names: &[String],
    crds: &Api<CustomResourceDefinition>,
    target: &str,
) {
    for n in names {
        let _ = servers
            .patch(
                n,
                &PatchParams::default(),
                &Patch::Merge(
                    json!({"metadata": {"annotations": {"conversion.dco.rs/allow-force-delete": "true"}}}),
                ),
            )
            .await;
        let _ = servers.delete(n, &DeleteParams::default()).await;
    }
    let _ = wait_for("the servers to go", WAIT, || async {
        let mut left = 0;
        for n in names {
            left += usize::from(servers.get_opt(n).await?.is_some());
        }
        Ok((left == 0).then_some(()))
    })
    .await;
    let _ = crds.delete(target, &DeleteParams::default()).await;
}
