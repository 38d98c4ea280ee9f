//! Crossplane installed or removed while dco-operator runs (docs/operator.md, the watches of
//! operator/src/runtime/): the operator follows Crossplane's CRD
//! `compositeresourcedefinitions.apiextensions.crossplane.io` with a watch
//! (`dco_api::crossplane`, operator/src/config/xrds.rs). Proves, by an XRDConversionConfig's
//! `TargetHealthy` condition, with one operator started before the CRD exists: the config
//! says its XRD does not exist; once the CRD is installed and the XRD created, the config
//! finds it within 10 s (from the XRD's own event: before, the operator watched XRDs only if
//! Crossplane was there at its start, and looked again at a missing target every 30 s);
//! once the CRD is deleted the config says its XRD does not exist again within 10 s.
//!
//! The CRD's name is fixed, so this binary and `webhook_crossplane_detection` must not run
//! at the same time (cargo runs test binaries one after another). Needs
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
    MANAGER.apply(&crds, XRD_CRD_NAME, dco_tests::crossplane_xrd_crd()).await?;
    dco_tests::wait_crd_established(&crds, XRD_CRD_NAME, Duration::from_secs(30)).await?;
    // The operator sees Crossplane and looks at the config again (still missing) first.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let xrds: Api<DynamicObject> = Api::all_with(client.clone(), &XrdVersion::V1.resource());
    let created = Instant::now();
    MANAGER.apply(&xrds, &xrd_name, xrd).await?;
    wait_for("the config to find its XRD", Duration::from_secs(10), || async {
        Ok(target_healthy(&xccs, &config).await?.filter(|r| r != "TargetNotFound").map(|_| ()))
    })
    .await?;
    let found = created.elapsed();

    let removed = Instant::now();
    crds.delete(XRD_CRD_NAME, &DeleteParams::default()).await?;
    wait_for("the config to say its XRD does not exist again", Duration::from_secs(10), missing).await?;
    let lost = removed.elapsed();
    dco_tests::wait_deleted(&crds, XRD_CRD_NAME, Duration::from_secs(60)).await?;
    eprintln!(
        "the config found its XRD {found:?} after the XRD's create and lost it {lost:?} after the CRD's delete"
    );
    drop(guard);
    t.cleanup().await;
    Ok(())
}
