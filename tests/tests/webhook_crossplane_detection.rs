//! Crossplane installed or removed while dco runs (docs/webhook.md, "Watches"): dco-webhook on
//! the local cluster (one replica of `dco_tests::hand_run_webhook_deployment`)
//! follows Crossplane's CRD `compositeresourcedefinitions.apiextensions.crossplane.io` with a
//! watch (`dco_api::crossplane`). Proves, by the replica's `/metrics`: without the CRD no XRD
//! is watched and the replica is ready; once a CRD of that name exists serving `v1` only
//! (Crossplane 1) the XRD watch starts and the XRD a config in scope names is read whole;
//! once the CRD serves `v2` and no longer `v1` (the replica must move its watch and reads to
//! v2) a second XRD, written at v2, is read whole too; once the CRD is deleted the watch
//! stops and the XRD targets are released, the replica ready throughout and never
//! restarted; and it does so again on a second install, the CRD serving both.
//!
//! The CRD's name is fixed: the test holds Crossplane's cluster-wide lock
//! (`dco_tests::crossplane::Crossplane::lock`), so it waits for any test running Crossplane.
//! Needs `target/debug/dco-webhook` (`cargo build -p dco-webhook`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams};
use serde_json::json;

use dco_api::target::{XRD_CRD_NAME, XrdVersion};
use dco_tests::{ClusterScoped, Manager, TestEnv, ar, wait_deployment_available, wait_for};

const MANAGER: Manager = Manager("dco-crossplane-detection");

/// The one replica's metrics endpoint.
async fn admin(pods: &Api<Pod>, app: &str) -> Result<(String, Pod)> {
    let pod = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .into_iter()
        .find(|p| p.metadata.deletion_timestamp.is_none())
        .context("no webhook Pod")?;
    let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).context("Pod without an IP")?;
    Ok((format!("{ip}:8080"), pod))
}

fn restarts(p: &Pod) -> i32 {
    p.status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .map_or(0, |cs| cs.iter().map(|c| c.restart_count).sum())
}

/// Waits until the replica's `dco_webhook_xrds_watched` and `dco_webhook_targets_held` are
/// `(watched, held)`, checking it stays ready; the time it took.
async fn until(addr: &str, watched: f64, held: f64, what: &str) -> Result<Duration> {
    let started = Instant::now();
    wait_for(what, Duration::from_secs(60), || async {
        let ready = dco_tests::metric(addr, "dco_webhook_ready").await?;
        anyhow::ensure!(ready == Some(1.0), "the replica went unready: dco_webhook_ready {ready:?}");
        let w = dco_tests::metric(addr, "dco_webhook_xrds_watched").await?;
        let h = dco_tests::metric(addr, "dco_webhook_targets_held").await?;
        Ok((w == Some(watched) && h == Some(held)).then_some(()))
    })
    .await?;
    Ok(started.elapsed())
}

#[tokio::test]
async fn the_webhook_watches_xrds_while_crossplane_is_installed() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("xpd").await?;
    let ns = t.ns.clone();
    let client = t.client.clone();
    let instance = dco_tests::unique_name("xpd");
    let cluster_role = format!("dco-webhook-{ns}");
    let (xrd_name, xrd) = dco_tests::crossplane_xrd(&format!("{ns}.e2e.dco.rs"));
    let config = format!("{instance}-xwidgets");
    let mut guard = ClusterScoped(Vec::new());

    // Crossplane's lock: no test's Crossplane (whose CRDs this stand-in replaces) runs meanwhile.
    let _lock = dco_tests::crossplane::Crossplane::lock().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(XRD_CRD_NAME).await?.is_some() {
        bail!(
            "{XRD_CRD_NAME} exists already (Crossplane installed, or a run of this test left it): remove it first"
        );
    }
    dco_tests::install_dco_crds(&client, MANAGER.0).await?;
    let cws_ar = ar::<dco_api::ConversionWebhookServer>();
    let xcc_ar = ar::<dco_api::XRDConversionConfig>();
    let cws: Api<DynamicObject> = Api::all_with(client.clone(), &cws_ar);
    let xccs: Api<DynamicObject> = Api::all_with(client.clone(), &xcc_ar);
    wait_for("the dco CRDs to be served", Duration::from_secs(30), || async {
        Ok(xccs.list(&ListParams::default().limit(1)).await.ok().map(|_| ()))
    })
    .await?;

    // The server sees this test's configs only; one names an XRD (pinned here, though
    // holding the target whole depends on the config alone).
    let label = json!({"dco-e2e-crossplane": ns});
    guard.0.push((cws_ar.clone(), instance.clone()));
    MANAGER
        .apply(
            &cws,
            &instance,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": instance}, "spec": {"namespace": ns, "replicas": 1,
                "cacheSelector": {"matchLabels": label}}}),
        )
        .await?;
    guard.0.push((xcc_ar.clone(), config.clone()));
    MANAGER
        .apply(&xccs, &config, json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
            "metadata": {"name": config, "labels": label},
            "spec": {"targetXRD": {"name": xrd_name}, "hubVersion": "v2", "webhookServerRef": {"name": instance},
                "spokes": [{"version": "v1", "rules": []}]}}))
        .await?;

    guard.0.push((ar::<ClusterRole>(), cluster_role.clone()));
    guard.0.push((ar::<ClusterRoleBinding>(), cluster_role.clone()));
    dco_tests::hand_run_webhook_setup(&t, MANAGER.0, &instance, &cluster_role).await?;
    let deployments = t.api::<Deployment>();
    MANAGER.apply(&deployments, &instance, dco_tests::hand_run_webhook_deployment(&instance, 1, &[])).await?;
    wait_deployment_available(&deployments, &instance, 1, Duration::from_secs(120)).await?;
    let pods = t.api::<Pod>();
    let (addr, pod) = admin(&pods, &instance).await?;
    let pod_name = pod.metadata.name.clone().unwrap_or_default();

    // No Crossplane: ready, no XRD watched, nothing held.
    until(&addr, 0.0, 0.0, "the replica without Crossplane: no XRD watch").await?;

    // A second config and XRD, the XRD written at v2 (found only through v2 while v1 is not
    // served).
    let v2_config = format!("{config}-v2");
    let v2_name = format!("xgadgets.{ns}.e2e.dco.rs");
    let mut v2_xrd = xrd.clone();
    v2_xrd["apiVersion"] = json!(XrdVersion::V2.api_version());
    v2_xrd["metadata"]["name"] = json!(v2_name);
    v2_xrd["spec"]["names"] = json!({"kind": "XGadget", "plural": "xgadgets"});
    guard.0.push((xcc_ar.clone(), v2_config.clone()));
    MANAGER
        .apply(&xccs, &v2_config, json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
            "metadata": {"name": v2_config, "labels": label},
            "spec": {"targetXRD": {"name": v2_name}, "hubVersion": "v2", "webhookServerRef": {"name": instance},
                "spokes": [{"version": "v1", "rules": []}]}}))
        .await?;
    let xrds = |v: XrdVersion| -> Api<DynamicObject> { Api::all_with(client.clone(), &v.resource()) };
    guard.0.push((ar::<CustomResourceDefinition>(), XRD_CRD_NAME.to_string()));
    // Round 1 installs Crossplane 1 (v1 served only) and upgrades it to serve v2 and no longer
    // v1; round 2 installs it serving both (v2 preferred).
    for (round, serving) in [(1, (true, false)), (2, (true, true))] {
        // Crossplane appears: the XRD watch starts and the named XRD is read whole.
        let installed = Instant::now();
        MANAGER
            .apply(&crds, XRD_CRD_NAME, dco_tests::crossplane_xrd_crd_serving(serving.0, serving.1))
            .await?;
        dco_tests::wait_crd_established(&crds, XRD_CRD_NAME, Duration::from_secs(30)).await?;
        let established = installed.elapsed();
        let watching = until(&addr, 1.0, 0.0, "the XRD watch to start").await? + established;
        MANAGER.apply(&xrds(XrdVersion::V1), &xrd_name, xrd.clone()).await?;
        let held = until(&addr, 1.0, 1.0, "the named XRD to be read whole").await?;
        if round == 1 {
            // Upgraded: only a watch and a read at v2 see the second XRD.
            MANAGER.apply(&crds, XRD_CRD_NAME, dco_tests::crossplane_xrd_crd_serving(false, true)).await?;
        }
        // The apiserver serves a version added to a CRD a moment after the update.
        wait_for("the XRD kind to be served at v2", Duration::from_secs(30), || async {
            Ok(xrds(XrdVersion::V2).list(&ListParams::default().limit(1)).await.ok().map(|_| ()))
        })
        .await?;
        MANAGER.apply(&xrds(XrdVersion::V2), &v2_name, v2_xrd.clone()).await?;
        let held_v2 = until(&addr, 1.0, 2.0, "the XRD written at v2 to be read whole").await?;

        // Crossplane goes: the watch stops and the XRD targets are released, without a restart.
        let removed = Instant::now();
        crds.delete(XRD_CRD_NAME, &DeleteParams::default()).await?;
        let stopped = until(&addr, 0.0, 0.0, "the XRD watch to stop and the XRDs to be released").await?;
        dco_tests::wait_deleted(&crds, XRD_CRD_NAME, Duration::from_secs(60)).await?;
        let gone = removed.elapsed();
        let pod = pods.get(&pod_name).await?;
        anyhow::ensure!(
            dco_tests::pod_ready(&pod) && restarts(&pod) == 0,
            "the replica restarted or is not ready: {:?}",
            pod.status
        );
        eprintln!(
            "round {round} (served v1 {}, v2 {}): CRD Established in {established:?}, XRD watch started {watching:?} after the create, XRD held {held:?} after its create, the second (v2) XRD {held_v2:?}; after the delete: watch stopped and XRDs released in {stopped:?}, CRD gone in {gone:?}",
            serving.0, serving.1
        );
    }
    // Still ready and still without XRDs once the CRD is gone for good.
    until(&addr, 0.0, 0.0, "the replica without Crossplane again").await?;
    t.cleanup().await;
    drop(guard);
    Ok(())
}
