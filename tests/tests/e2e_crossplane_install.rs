//! Crossplane installed and removed while dco runs, with a real Crossplane 2
//! (docs/testenv.md "Crossplane"; `dco_api::crossplane`): dco-operator and one
//! ConversionWebhookServer start while Crossplane is absent. Proves:
//!
//! 1. without Crossplane the server's replica watches no XRD (`dco_webhook_xrds_watched` 0);
//! 2. `Crossplane::start` (its CRDs: the XRD CRD serves `v1` and `v2`): the replica starts
//!    watching XRDs without a restart, and the world's XRDs (`dco_tests::crossplane_world`: a
//!    `Namespaced` and a `Cluster` one written at `v2`, a `LegacyCluster` one with a claim
//!    written at `v1`) are wired by their XRDConversionConfigs: phase `Applied`, the XRD's
//!    `spec.conversion` read at `v2` names the server's Service, and every CRD Crossplane
//!    generated (the XR CRDs and the claim CRD) carries it;
//! 3. `Crossplane::stop` (Crossplane killed, its CRDs deleted): every config says its XRD is
//!    gone (`TargetHealthy` reason `TargetNotFound`) and the replica stops watching XRDs, the
//!    operator and the replica never restarted.
//!
//! Prints how long dco took to notice the install and the removal.
//!
//! Needs `target/debug/dco-operator`, `target/debug/dco-webhook` and Go (the crossplane tool).
//! Runs Crossplane under its cluster-wide lock: never beside `webhook_crossplane_detection` or
//! `operator_crossplane_detection`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use dco_api::target::{XRD_CRD_NAME, XrdVersion};
use dco_tests::crossplane::Crossplane;
use dco_tests::crossplane_world::{MANAGER, Scope, WAIT, XRDS, XpWorld};
use dco_tests::{TestEnv, wait_for};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

/// dco notices a change of Crossplane's CRD one watch event later; generous for a loaded
/// machine.
const NOTICE: Duration = Duration::from_secs(30);

/// The admin endpoints (`<pod IP>:8080`) of server `s`'s replicas.
async fn replicas(pods: &Api<Pod>, s: &str) -> Result<Vec<String>> {
    let lp = ListParams::default().labels(&format!("{}={s}", dco_api::LABEL_INSTANCE));
    let addrs: Vec<String> = pods
        .list(&lp)
        .await?
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| Some(format!("{}:8080", p.status.as_ref()?.pod_ip.as_ref()?)))
        .collect();
    ensure!(!addrs.is_empty(), "server {s} has no replica with an IP");
    Ok(addrs)
}

/// Waits until every replica's `dco_webhook_xrds_watched` is `want`, each staying ready.
async fn until_watched(addrs: &[String], want: f64, what: &str) -> Result<()> {
    wait_for(what, NOTICE, || async {
        for a in addrs {
            let ready = dco_tests::metric(a, "dco_webhook_ready").await?;
            ensure!(ready == Some(1.0), "replica {a} went unready: dco_webhook_ready {ready:?}");
            if dco_tests::metric(a, "dco_webhook_xrds_watched").await? != Some(want) {
                return Ok(None);
            }
        }
        Ok(Some(()))
    })
    .await
}

fn restarts(pods: &[Pod]) -> i32 {
    pods.iter()
        .filter_map(|p| p.status.as_ref()?.container_statuses.as_ref())
        .flatten()
        .map(|c| c.restart_count)
        .sum()
}

/// The reason of config `cfg`'s `TargetHealthy` condition.
async fn target_healthy(w: &XpWorld, cfg: &str) -> Result<Option<String>> {
    Ok(w.condition(cfg, "TargetHealthy").await?.and_then(|c| c["reason"].as_str().map(str::to_string)))
}

/// Phase 2: the XRDs are wired through the API dco chose, and Crossplane carries the wiring.
async fn wire(w: &XpWorld, server: &str) -> Result<()> {
    w.apply_xrds().await?;
    w.pin_all(server).await?;
    w.wait_settled(server).await?;
    let service = w.service(server);
    for (i, x) in XRDS.iter().enumerate() {
        let name = w.xrd_name(i);
        // Read at v2, the version dco prefers, whatever version it was written at.
        let xrds: Api<DynamicObject> = Api::all_with(w.client.clone(), &XrdVersion::V2.resource());
        let xrd = serde_json::to_value(
            xrds.get(&name).await.with_context(|| format!("reading XRD {name} at v2"))?,
        )?;
        ensure!(
            dco_api::target::wired_service(&xrd) == Some((w.ns.as_str(), service.as_str())),
            "XRD {name} ({:?}) read at v2: spec.conversion {} does not name Service {}/{service}",
            x.scope,
            xrd["spec"]["conversion"],
            w.ns
        );
        let cfg = w.cfgs.get(&w.config_name(i)).await?.data;
        ensure!(cfg["status"]["phase"] == "Applied", "config of {name}: phase {}", cfg["status"]["phase"]);
        if x.scope == Scope::LegacyCluster {
            // Written at v1: Crossplane 2.3's v2 schema refuses claimNames.
            let managed = xrd["metadata"]["managedFields"].as_array().cloned().unwrap_or_default();
            let ours: Vec<&Value> = managed.iter().filter(|m| m["manager"] == "dco-operator").collect();
            ensure!(
                ours.iter().any(|m| m["apiVersion"] == XrdVersion::V1.api_version()),
                "LegacyCluster XRD {name}: dco-operator's managed fields are not at v1: {ours:?}"
            );
        }
    }
    for crd in w.generated_crds() {
        let c = serde_json::to_value(w.crds.get(&crd).await?)?;
        ensure!(
            dco_api::target::wired_service(&c) == Some((w.ns.as_str(), service.as_str())),
            "generated CRD {crd}: spec.conversion {} does not name Service {service}",
            c["spec"]["conversion"]
        );
    }
    Ok(())
}

#[tokio::test]
async fn dco_notices_crossplane_installed_and_removed_without_a_restart() -> Result<()> {
    let t = TestEnv::new("xpi").await?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
    let w = XpWorld::new(&t);
    // No other test's Crossplane may start while dco runs without one (each removes
    // Crossplane's CRDs when it stops).
    let lock = Crossplane::lock().await?;
    if w.crds.get_opt(XRD_CRD_NAME).await?.is_some() {
        bail!(
            "{XRD_CRD_NAME} exists, though no test runs Crossplane (a run left it, or DCO_TESTS_KEEP_CROSSPLANE): remove it first"
        );
    }
    let operators = dco_tests::start_operators(&t, &w.selector, &["xpi-1"], &["--resync", "60s"])?;
    let server = w.servers[0].clone();
    let obj = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": server, "labels": {"dco-e2e-xp": t.ns}}, "spec": {"namespace": t.ns, "replicas": 1}});
    MANAGER.apply(&w.srvs, &server, obj).await?;
    wait_for(&format!("server {server} to have a ready replica"), WAIT, || async {
        Ok(w.srvs.get(&server).await?.status.is_some_and(|s| s.ready_replicas == 1).then_some(()))
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(t.client.clone(), &t.ns);
    let addrs = replicas(&pods, &server).await?;
    until_watched(&addrs, 0.0, "no XRD watched without Crossplane").await?;
    let before = restarts(&pods.list(&Default::default()).await?.items);

    let dir = std::env::temp_dir().join(format!("dco-tests-{}", t.ns));
    let xp = Crossplane::start_locked(lock, &t.client, &dir).await?;
    eprintln!("crossplane log: {}", xp.log.display());
    let installed = Instant::now();
    until_watched(&addrs, 1.0, "the replica to watch XRDs once Crossplane is installed").await?;
    let webhook_saw_install = installed.elapsed();

    let wired = wire(&w, &server).await;
    // Removal, whether or not wiring passed: Crossplane must stop either way.
    let stopping = Instant::now();
    let stopped = xp.stop().await;
    let removed = Instant::now();
    let noticed = async {
        stopped?;
        wired?;
        until_watched(&addrs, 0.0, "the replica to stop watching XRDs once Crossplane is removed").await?;
        let webhook_saw_removal = removed.elapsed();
        for i in 0..XRDS.len() {
            let cfg = w.config_name(i);
            wait_for(&format!("config {cfg} to say its XRD is gone"), NOTICE, || async {
                Ok(target_healthy(&w, &cfg).await?.filter(|r| r == "TargetNotFound").map(|_| ()))
            })
            .await?;
        }
        let operator_saw_removal = removed.elapsed();
        let after = restarts(&pods.list(&Default::default()).await?.items);
        ensure!(after == before, "replicas restarted: {before} restarts before, {after} after");
        println!(
            "install (Crossplane ready) -> webhook watching XRDs {webhook_saw_install:?}; removal (stop took {:?}, CRDs gone) -> webhook stopped {webhook_saw_removal:?}, every config TargetNotFound {operator_saw_removal:?}",
            removed - stopping
        );
        Ok::<_, anyhow::Error>(())
    }
    .await;

    let allow = json!({"metadata": {"annotations": {dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE: "true"}}});
    for i in 0..XRDS.len() {
        let cfg = w.config_name(i);
        let _ = w.cfgs.patch(&cfg, &PatchParams::default(), &Patch::Merge(&allow)).await;
        let _ = w.cfgs.delete(&cfg, &DeleteParams::default()).await;
        let _ = dco_tests::wait_deleted(&w.cfgs, &cfg, WAIT).await;
    }
    w.remove_servers().await;
    drop(operators);
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    noticed
}
