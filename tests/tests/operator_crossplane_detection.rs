//! Crossplane installed or removed while dco-operator runs (docs/operator.md, the watches of
//! operator/src/runtime/): the operator follows Crossplane's CRD
//! `compositeresourcedefinitions.apiextensions.crossplane.io` with a watch
//! (`dco_api::crossplane`, operator/src/config/xrds.rs). Proves, by an XRDConversionConfig's
//! `TargetHealthy` condition, with one operator started before the CRD exists: the config
//! says its XRD does not exist; once the CRD is installed serving `v1` only (Crossplane 1)
//! and the XRD created, the config finds it within 10 s (from the XRD's own event: a missing
//! target is otherwise looked at again every 30 s); once the CRD serves `v2` and no longer
//! `v1` (the operator must move its watch and reads to v2), a second config finds a second
//! XRD within 10 s of its create; once the CRD is deleted both say their XRD does not exist
//! again within 10 s.
//!
//! The CRD's name is fixed: the test holds Crossplane's cluster-wide lock
//! (`dco_tests::crossplane::Crossplane::lock`), so it waits for any test running Crossplane. Needs
//! `target/debug/dco-operator`.

use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject};
use serde_json::json;

use dco_api::XRDConversionConfig;
use dco_api::target::{XRD_CRD_NAME, XrdVersion};
use dco_tests::{ClusterScoped, Manager, TestEnv, ar, wait_for};

const MANAGER: Manager = Manager("dco-crossplane-operator");

/// The reason of the config's `TargetHealthy` condition.
async fn target_healthy(xccs: &Api<XRDConversionConfig>, name: &str) -> Result<Option<String>> {
    let c = xccs.get(name).await?;
    Ok(c.status.and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "TargetHealthy")).map(|c| c.reason))
}

#[tokio::test]
async fn the_operator_watches_xrds_while_crossplane_is_installed() -> Result<()> {
    let t = TestEnv::new("xpo").await?;
    let client = t.client.clone();
    // Crossplane's lock: no test's Crossplane (whose CRDs this stand-in replaces) runs meanwhile.
    let _lock = dco_tests::crossplane::Crossplane::lock().await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    if crds.get_opt(XRD_CRD_NAME).await?.is_some() {
        bail!(
            "{XRD_CRD_NAME} exists already (Crossplane installed, or a run of this test left it): remove it first"
        );
    }
    dco_tests::install_dco_crds(&client, MANAGER.0).await?;
    let label = ("dco-e2e-crossplane-operator", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    let _operators = dco_tests::start_operators(&t, &selector, &["xpo-1"], &[])?;

    let xccs: Api<XRDConversionConfig> = Api::all(client.clone());
    let config = format!("{}-xwidgets", t.ns);
    let (xrd_name, xrd) = dco_tests::crossplane_xrd(&format!("{}.e2e.dco.rs", t.ns));
    let mut guard = ClusterScoped(vec![(ar::<XRDConversionConfig>(), config.clone())]);
    wait_for("the dco CRDs to be served", Duration::from_secs(30), || async {
        Ok(xccs.list(&Default::default()).await.ok().map(|_| ()))
    })
    .await?;
    MANAGER
        .apply(&xccs, &config, json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
            "metadata": {"name": config, "labels": {label.0: label.1}},
            "spec": {"targetXRD": {"name": xrd_name}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}}))
        .await?;
    let missing =
        || async { Ok(target_healthy(&xccs, &config).await?.filter(|r| r == "TargetNotFound").map(|_| ())) };
    wait_for("the config to say its XRD does not exist", Duration::from_secs(60), missing).await?;

    guard.0.push((ar::<CustomResourceDefinition>(), XRD_CRD_NAME.to_string()));
    // Crossplane 1: only v1 served, so only v1 finds the XRD.
    MANAGER.apply(&crds, XRD_CRD_NAME, dco_tests::crossplane_xrd_crd_serving(true, false)).await?;
    dco_tests::wait_crd_established(&crds, XRD_CRD_NAME, Duration::from_secs(30)).await?;
    // The operator sees Crossplane and looks at the config again (still missing) first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let xrds: Api<DynamicObject> = Api::all_with(client.clone(), &XrdVersion::V1.resource());
    let created = Instant::now();
    MANAGER.apply(&xrds, &xrd_name, xrd.clone()).await?;
    let found_cfg = |cfg: String| {
        let xccs = xccs.clone();
        move || {
            let (xccs, cfg) = (xccs.clone(), cfg.clone());
            async move { Ok(target_healthy(&xccs, &cfg).await?.filter(|r| r != "TargetNotFound").map(|_| ())) }
        }
    };
    wait_for("the config to find its XRD at v1", Duration::from_secs(10), found_cfg(config.clone())).await?;
    let found = created.elapsed();

    // Upgraded: v2 added and v1 no longer served, so only a watch and a read at v2 find a
    // second XRD within 10 s (a missing target is otherwise looked at again every 30 s).
    MANAGER.apply(&crds, XRD_CRD_NAME, dco_tests::crossplane_xrd_crd_serving(false, true)).await?;
    let v2_config = format!("{config}-v2");
    guard.0.push((ar::<XRDConversionConfig>(), v2_config.clone()));
    let v2_name = format!("xgadgets.{}.e2e.dco.rs", t.ns);
    let mut v2_xrd = xrd;
    v2_xrd["apiVersion"] = json!(XrdVersion::V2.api_version());
    v2_xrd["metadata"]["name"] = json!(v2_name);
    v2_xrd["spec"]["names"] = json!({"kind": "XGadget", "plural": "xgadgets"});
    MANAGER
        .apply(&xccs, &v2_config, json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
            "metadata": {"name": v2_config, "labels": {label.0: label.1}},
            "spec": {"targetXRD": {"name": v2_name}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}}))
        .await?;
    let v2_missing = || async {
        Ok(target_healthy(&xccs, &v2_config).await?.filter(|r| r == "TargetNotFound").map(|_| ()))
    };
    wait_for("the second config to say its XRD does not exist", Duration::from_secs(60), v2_missing).await?;
    let v2_xrds: Api<DynamicObject> = Api::all_with(client.clone(), &XrdVersion::V2.resource());
    let v2_created = Instant::now();
    MANAGER.apply(&v2_xrds, &v2_name, v2_xrd).await?;
    wait_for(
        "the second config to find its XRD at v2",
        Duration::from_secs(10),
        found_cfg(v2_config.clone()),
    )
    .await?;
    let found_v2 = v2_created.elapsed();

    let removed = Instant::now();
    crds.delete(XRD_CRD_NAME, &DeleteParams::default()).await?;
    wait_for("the config to say its XRD does not exist again", Duration::from_secs(10), missing).await?;
    wait_for("the second config to say its XRD does not exist again", Duration::from_secs(10), v2_missing)
        .await?;
    let lost = removed.elapsed();
    dco_tests::wait_deleted(&crds, XRD_CRD_NAME, Duration::from_secs(60)).await?;
    eprintln!(
        "the config found its XRD (v1 served) {found:?} after the XRD's create; after the upgrade (v2 only) the second config found its XRD {found_v2:?} after the create; both lost them {lost:?} after the CRD's delete"
    );
    drop(guard);
    t.cleanup().await;
    Ok(())
}
