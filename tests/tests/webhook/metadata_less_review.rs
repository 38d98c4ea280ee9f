//! Converting a review without `metadata` (docs/engine.md, "Objects without `metadata`"): a
//! ConversionReview whose object has no `metadata`, sent by the real kube-apiserver when a
//! server-side applier whose last apply was at v1 applies at v2 (its manifests moved to the new
//! version). In structured-merge-diff's `Updater.prune`
//! (merge/update.go, v6.3.3) the merged object is converted to the last applied version (v1)
//! and the last applied set is removed with `EnsureNamedFieldsAreMembers`: a set holding any
//! `metadata` child (here a label) or `spec` child removes the whole `metadata` and `spec`,
//! leaving `{apiVersion, kind, status}`. No manager is at v1 any more, so `addBackOwnedItems`
//! goes straight to v2, and `addBackOwnedItemsForVersion` converts that fragment v1→v2
//! (`versionConverter.Convert`, apimachinery pkg/util/managedfields/internal): the apiserver
//! POSTs it to the webhook without `metadata`. apiextensions-apiserver's `restoreObjectMeta`
//! (webhook_converter.go) refuses a converted object without `metadata` ("missing metadata
//! in converted object"), and the apply fails with "failed to prune fields: failed add back
//! owned items: failed to convert pruned object at version <group>/v2". dco answers with
//! `"metadata": {}`, so the apply goes through.
//!
//! One dco-webhook replica (a Deployment made by the test, as the operator would), one CRD
//! (v2 storage and hub, v1 spoke), one config.
//!
//! Needs `target/debug/dco-webhook` (`cargo build -p dco-webhook`).

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams,
};
use serde_json::{Value, json};

use dco_tests::{Manager, ar, b64, wait_deployment_available, wait_for};

const MANAGER: Manager = Manager("dco-metaless-e2e");
/// The server-side applier (Flux's kustomize-controller in the reports).
const APPLIER: &str = "e2e-applier";
/// An Update manager at the storage version: owns `status`, which the prune keeps.
const CREATOR: &str = "e2e-creator";
const LABEL: &str = "e2e.dco.rs/applied";

/// The managedFields entry of `manager`: (apiVersion, operation, fieldsV1).
fn managed(obj: &DynamicObject, manager: &str) -> Option<(String, String, Value)> {
    let e = obj.metadata.managed_fields.as_ref()?.iter().find(|e| e.manager.as_deref() == Some(manager))?;
    let fields = e.fields_v1.as_ref().map(|f| f.0.clone()).unwrap_or_default();
    Some((e.api_version.clone()?, e.operation.clone()?, fields))
}

#[tokio::test]
async fn server_side_apply_sends_a_fragment_without_metadata_and_it_converts() -> Result<()> {
    let crate::World { t, instance, mut guard, crds, ccc_ar, cccs, ca } =
        crate::world("metaless", MANAGER).await?;
    let (ns, client) = (t.ns.clone(), t.client.clone());

    // v2 (storage, hub) calls it spec.storageGB, v1 spec.storageSize; spec.color and status
    // (a plain field: no status subresource) are alike.
    let schema = |size: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {size: {"type": "integer"}, "color": {"type": "string"}}},
        "status": {"type": "object", "properties": {"phase": {"type": "string"}}}}}})
    };
    let group = format!("{ns}.e2e.dco.rs");
    let target = format!("widgets.{group}");
    guard.0.push((ar::<CustomResourceDefinition>(), target.clone()));
    MANAGER
        .apply(
            &crds,
            &target,
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v2", "served": true, "storage": true, "schema": schema("storageGB")},
                {"name": "v1", "served": true, "storage": false, "schema": schema("storageSize")}],
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"caBundle": b64(&ca), "service": {"name": instance, "namespace": ns,
                    "path": format!("/convert/{target}"), "port": 443}}}}}}),
        )
        .await?;
    guard.0.push((ccc_ar.clone(), instance.clone()));
    MANAGER
        .apply(
            &cccs,
            &instance,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": instance},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "webhookServerRef": {"name": instance},
            "spokes": [{"version": "v1", "rules": [{"strategy": "FieldRename",
                "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]}}),
        )
        .await?;

    let deployments = t.api::<Deployment>();
    MANAGER.apply(&deployments, &instance, dco_tests::hand_run_webhook_deployment(&instance, 1, &[])).await?;
    wait_deployment_available(&deployments, &instance, 1, Duration::from_secs(120)).await?;

    let widgets = |v: &str| -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(&group, v, "Widget");
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk_with_plural(&gvk, "widgets"))
    };
    let (v1, v2) = (widgets("v1"), widgets("v2"));

    // An Update manager at the storage version owns spec.color and status.
    let created: DynamicObject = serde_json::from_value(json!({"apiVersion": format!("{group}/v2"),
        "kind": "Widget", "metadata": {"name": "w"}, "spec": {"color": "blue"}, "status": {"phase": "Ready"}}))?;
    let pp = PostParams { field_manager: Some(CREATOR.into()), ..Default::default() };
    v2.create(&pp, &created).await?;
    wait_for("a read at v1 to be converted", Duration::from_secs(60), || async {
        Ok(v1.get("w").await.ok())
    })
    .await?;

    // The applier at v1, with a label: its last applied set holds a metadata child.
    let ssa = PatchParams::apply(APPLIER);
    let first = v1
        .patch(
            "w",
            &ssa,
            &Patch::Apply(json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": "w", "labels": {LABEL: "yes"}}, "spec": {"storageSize": 10}})),
        )
        .await
        .context("the apply at v1")?;
    // The state the prune path needs: the applier's last set at v1 with a label, and status
    // that is not the applier's.
    let (av, op, fields) = managed(&first, APPLIER).context("the applier's managedFields entry")?;
    assert_eq!((av.as_str(), op.as_str()), (format!("{group}/v1").as_str(), "Apply"), "{fields}");
    assert!(fields["f:metadata"]["f:labels"].get(format!("f:{LABEL}")).is_some(), "{fields}");
    assert!(fields.get("f:status").is_none(), "{fields}");
    let (av, op, fields) = managed(&first, CREATOR).context("the creator's managedFields entry")?;
    assert_eq!((av.as_str(), op.as_str()), (format!("{group}/v2").as_str(), "Update"));
    assert!(fields.get("f:status").is_some(), "{fields}");

    // The applier moves to v2 and drops the label: the prune converts {apiVersion v1, kind,
    // status} to v2 through the webhook. Without dco's `"metadata": {}` this fails with
    // "failed to prune fields: failed add back owned items: failed to convert pruned object at
    // version <group>/v2: ... missing metadata in converted object".
    let second = v2
        .patch(
            "w",
            &ssa,
            &Patch::Apply(json!({"apiVersion": format!("{group}/v2"), "kind": "Widget",
            "metadata": {"name": "w"}, "spec": {"storageGB": 20}})),
        )
        .await
        .context("the apply at v2 (its prune converts a fragment without metadata)")?;
    assert_eq!(second.data["spec"], json!({"storageGB": 20, "color": "blue"}));
    assert_eq!(second.data["status"], json!({"phase": "Ready"}));
    assert_eq!(second.metadata.name.as_deref(), Some("w"));
    assert!(second.metadata.labels.as_ref().is_none_or(|l| !l.contains_key(LABEL)), "{:?}", second.metadata);
    let (av, _, fields) = managed(&second, APPLIER).context("the applier's managedFields entry")?;
    assert_eq!(av, format!("{group}/v2"));
    assert!(fields.get("f:metadata").is_none(), "the label is no longer the applier's: {fields}");

    // Read back at the spoke: a full object, converted as usual.
    let back = v1.get("w").await?;
    assert_eq!(back.data["spec"], json!({"storageSize": 20, "color": "blue"}));
    assert!(back.metadata.labels.as_ref().is_none_or(|l| !l.contains_key(LABEL)));

    crds.delete(&target, &DeleteParams::default()).await?;
    t.cleanup().await;
    drop(guard);
    Ok(())
}
