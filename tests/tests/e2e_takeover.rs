//! Taking a target over from the reference project (docs/migrating.md, "Taking a target
//! over"), step by step as the page gives them, under a load that writes at the spoke and reads
//! at both versions for the whole takeover.
//!
//! The reference's side is reproduced as a cluster left behind by it: a target CRD wired to a
//! foreign webhook (`echo-convert`, tests/src/bin/echo-convert.rs, renaming `spec.foo` at v1
//! to `spec.bar` at v2 as the reference's server would) and carrying the reference's
//! `conversion.terasky.com/managed-by` and `plan-hash` annotations; its old
//! `CRDConversionConfig` (`terasky.com/v1alpha1`, a stand-in CRD of that group) holding the
//! finalizer `conversion.terasky.com/safe-revert-crd`; and its validating admission webhook
//! on those configs, whose Service is gone with the manager (failurePolicy Fail).
//!
//! Steps: the admission webhook is shown to block the finalizer's removal, then deleted; the
//! old config is exported and translated by `convctl import` (compiled against the exported
//! target), and the output applied; dco adopts the target (verified handover, one change of
//! its spec); the old finalizer is removed by hand and the old config deleted; the reference's
//! annotations are removed. Not one request fails, not one value is wrong, and the target stays
//! wired to dco's server after the old config is gone.
//!
//! Needs `target/debug/convctl` (`cargo build -p convctl`) beside dco-operator and dco-webhook.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::{Value, json};

use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use dco_tests::load::{Load, Target};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-takeover");
const WAIT: Duration = Duration::from_secs(120);
const REFERENCE_GROUP: &str = "terasky.com";
const REFERENCE_FINALIZER: &str = "conversion.terasky.com/safe-revert-crd";

/// v1 carries `spec.foo`, v2 `spec.bar`: echo-convert and the imported rule both rename.
fn widget_spec(version: &str, k: i64) -> Value {
    let field = if version == "v1" { "foo" } else { "bar" };
    json!({ field: format!("v{k}") })
}

/// The reference's CRDConversionConfig kind, as a stand-in CRD that keeps any spec (its real
/// schema is not what is tested here). Cluster-wide: applied idempotently, never removed.
async fn install_reference_crd(crds: &Api<CustomResourceDefinition>) -> Result<()> {
    let name = format!("crdconversionconfigs.{REFERENCE_GROUP}");
    MANAGER
        .apply(
            crds,
            &name,
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": REFERENCE_GROUP, "scope": "Cluster",
            "names": {"plural": "crdconversionconfigs", "singular": "crdconversionconfig",
                "kind": "CRDConversionConfig", "listKind": "CRDConversionConfigList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}}),
        )
        .await?;
    dco_tests::wait_crd_established(crds, &name, WAIT).await
}

/// `convctl import FILE --crd TARGET` on the exported objects: the translated config.
fn convctl_import(dir: &std::path::Path, old: &Value, target: &Value) -> Result<Value> {
    let (old_file, target_file) = (dir.join("old.yaml"), dir.join("target.yaml"));
    std::fs::write(&old_file, serde_yaml::to_string(old)?)?;
    std::fs::write(&target_file, serde_yaml::to_string(target)?)?;
    let out = std::process::Command::new(dco_tests::workspace_binary("convctl")?)
        .arg("import")
        .arg(&old_file)
        .arg("--crd")
        .arg(&target_file)
        .output()
        .context("running convctl import")?;
    let report = String::from_utf8_lossy(&out.stderr);
    eprintln!("convctl import:\n{report}");
    ensure!(out.status.success(), "convctl import exited {}: {report}", out.status);
    ensure!(report.contains("compiles against"), "the imported config was not compiled: {report}");
    Ok(serde_yaml::from_slice(&out.stdout)?)
}

#[tokio::test]
async fn a_reference_target_is_taken_over_under_load_and_stays_wired_after_the_old_config_goes() -> Result<()>
{
    dco_tests::map_echo_convert(env!("CARGO_BIN_EXE_echo-convert"))?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("takeover").await?;
    let client = t.client.clone();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    install_reference_crd(&crds).await?;
    let label = ("dco-e2e-takeover", t.ns.as_str());
    let (_operators, server) = dco_tests::start_dco(&t, MANAGER, label, "takeover-1").await?;
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let service = format!("dco-webhook-{server}");

    // What the reference left behind: the target wired to its server, with its annotations.
    let ca = dco_tests::deploy_echo_convert(&t).await?;
    let old_name = format!("{}-widgets", t.ns);
    let group = format!("{}.takeover.dco.rs", t.ns);
    let target = format!("widgets.{group}");
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    MANAGER.apply(&crds, &target, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target, "labels": {label.0: label.1},
            "annotations": {"conversion.terasky.com/managed-by": old_name, "conversion.terasky.com/plan-hash": "sha256:0d1f"}},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema("foo")},
                {"name": "v2", "served": true, "storage": true, "schema": schema("bar")}],
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"service": {"namespace": t.ns, "name": "echo-convert", "path": "/convert", "port": 443},
                    "caBundle": dco_tests::b64(&ca)}}}}})).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let old_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(REFERENCE_GROUP, "v1alpha1", "CRDConversionConfig"),
        "crdconversionconfigs",
    );
    let olds: Api<DynamicObject> = Api::all_with(client.clone(), &old_ar);
    MANAGER
        .apply(
            &olds,
            &old_name,
            json!({"apiVersion": "terasky.com/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": old_name, "labels": {label.0: label.1}, "finalizers": [REFERENCE_FINALIZER]},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.bar", "spokePath": "spec.foo"}}]}]},
        "status": {"phase": "Applied", "assignedWebhookServer": "default"}}),
        )
        .await?;
    // The reference's admission webhook on its configs; its Service went with the manager.
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let vwc = format!("{}-reference-validating-webhook-configuration", t.ns);
    MANAGER.apply(&vwcs, &vwc, json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingWebhookConfiguration",
        "metadata": {"name": vwc},
        "webhooks": [{"name": "vcrdconversionconfig.terasky.com", "admissionReviewVersions": ["v1"], "sideEffects": "None",
            "failurePolicy": "Fail", "objectSelector": {"matchLabels": {label.0: label.1}},
            "clientConfig": {"service": {"namespace": t.ns, "name": "reference-webhook-service",
                "path": "/validate-terasky-com-v1alpha1-crdconversionconfig", "port": 443}},
            "rules": [{"apiGroups": [REFERENCE_GROUP], "apiVersions": ["v1alpha1"], "operations": ["CREATE", "UPDATE"],
                "resources": ["crdconversionconfigs"], "scope": "Cluster"}]}]})).await?;

    let load_started = Instant::now();
    let load = Load::start(
        Target {
            client: client.clone(),
            ns: t.ns.clone(),
            group: group.clone(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            spoke: "v1".into(),
            hub: "v2".into(),
            spec: widget_spec,
            manager: "dco-e2e-takeover-load",
        },
        8,
        Duration::from_millis(40),
    );
    load.wait_clean(30, WAIT, "on the reference's webhook, before the takeover").await?;
    let started = Instant::now();

    // Step: remove the reference's admission webhooks. While one is there and its manager is
    // gone, no change to the old config gets through, the finalizer's removal included.
    let unfinalize = json!({"metadata": {"finalizers": null}});
    wait_for("the reference's webhook to refuse a change to its config", WAIT, || async {
        let refused = match olds.patch(&old_name, &PatchParams::default(), &Patch::Merge(&unfinalize)).await {
            Ok(_) => {
                anyhow::bail!("the finalizer went while the reference's admission webhook was registered")
            }
            Err(e) => e.to_string().contains("vcrdconversionconfig.terasky.com"),
        };
        Ok(refused.then_some(()))
    })
    .await?;
    vwcs.delete(&vwc, &DeleteParams::default()).await?;

    // Steps: import (exported objects, compiled against the target), apply.
    let old = serde_json::to_value(olds.get(&old_name).await?)?;
    let crd_before = crds.get(&target).await?;
    let generation = crd_before.metadata.generation.unwrap_or_default();
    let dir = std::env::temp_dir().join(format!("dco-takeover-{}", t.ns));
    std::fs::create_dir_all(&dir)?;
    let imported = convctl_import(&dir, &old, &serde_json::to_value(&crd_before)?)?;
    ensure!(imported["apiVersion"] == "conversion.dco.rs/v1alpha1", "import gave {imported}");
    ensure!(imported["metadata"].get("finalizers").is_none(), "import kept the old finalizer: {imported}");
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    MANAGER.apply(&cfgs, &old_name, imported).await?;

    // Step: verify. dco serves the target, the handover verified, its spec changed once.
    wait_for(&format!("{old_name} to take {target} over"), WAIT, || async {
        let c = cfgs.get(&old_name).await?;
        let crd = crds.get(&target).await?;
        let wired = dco_tests::conversion_service(&crd).is_some_and(|(_, name)| name == service);
        let st = c.status.unwrap_or_default();
        let settled = st.handover.is_some_and(|h| format!("{:?}", h.state) == "SourceDropped");
        let verified = st
            .conditions
            .iter()
            .any(|c| c.type_ == "HandoverReady" && c.status == "True" && c.reason == "HandoverReady");
        Ok((wired && settled && verified).then_some(()))
    })
    .await?;
    let adopted = started.elapsed();
    let after = crds.get(&target).await?.metadata.generation.unwrap_or_default();
    ensure!(after == generation + 1, "{target}'s spec changed {} times, not once", after - generation);

    // Steps: the old config's finalizer by hand (its manager is gone), then delete it.
    olds.patch(&old_name, &PatchParams::default(), &Patch::Merge(&unfinalize)).await?;
    olds.delete(&old_name, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&olds, &old_name, WAIT).await?;
    // The reference's annotations on the target: dco does not read them.
    let strip = json!({"metadata": {"annotations": {
        "conversion.terasky.com/managed-by": null, "conversion.terasky.com/plan-hash": null}}});
    crds.patch(&target, &PatchParams::default(), &Patch::Merge(&strip)).await?;
    let before_tail = load.tally();
    load.wait_clean(before_tail.ok + before_tail.failed + 100, WAIT, "after the old config went").await?;
    let errors = load.errors();
    let tally = load.stop().await?;

    let crd = crds.get(&target).await?;
    ensure!(
        dco_tests::conversion_service(&crd).is_some_and(|(_, name)| name == service),
        "{target} is no longer wired to {service}: {:?}",
        crd.spec.conversion
    );
    ensure!(
        crd.metadata.generation.unwrap_or_default() == generation + 1,
        "{target}'s spec changed after the adoption"
    );
    let c = cfgs.get(&old_name).await?;
    ensure!(
        c.status.as_ref().and_then(|s| s.phase).is_some_and(|p| p == dco_api::config::Phase::Applied),
        "{old_name} is not Applied: {:?}",
        c.status
    );
    eprintln!(
        "takeover of {target}: adopted {adopted:?} after the first step; {} requests ok, {} failed, {} wrong over {:?} of load",
        tally.ok,
        tally.failed,
        tally.wrong,
        load_started.elapsed()
    );
    ensure!(tally.failed == 0 && tally.wrong == 0, "{tally:?}: {errors:?}");
    ensure!(tally.ok >= 100, "the load made only {} requests", tally.ok);

    let _ = cfgs
        .patch(&old_name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = cfgs.delete(&old_name, &DeleteParams::default()).await;
    let _ = crds.delete(&target, &DeleteParams::default()).await;
    let _ = servers
        .patch(&server, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = servers.delete(&server, &DeleteParams::default()).await;
    t.cleanup().await;
    Ok(())
}
