//! The testenv calls conversion webhooks (docs/testenv.md, "The service resolver"): a CRD with
//! v1 served and v2 stored, wired to a conversion webhook that runs
//! as a Pod through the testenv process-kubelet and is reached through the
//! testenv service resolver. An object written at v1 and read at v2 proves the
//! apiserver called the webhook.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::json;

use crate::CrdGuard;
use dco_tests::{TestEnv, b64, wait_for};

#[tokio::test]
async fn conversion_webhook_runs_as_a_pod_and_is_called_by_the_apiserver() -> Result<()> {
    dco_tests::map_echo_convert(env!("CARGO_BIN_EXE_echo-convert"))?;
    let t = TestEnv::new("conv").await?;
    let ns = t.ns.clone();

    let ca = dco_tests::deploy_echo_convert(&t).await?;

    // the CRD: v1 served, v2 served + storage, webhook conversion through the Service
    let group = format!("{ns}.e2e.dco.rs");
    let crd_name = format!("widgets.{group}");
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}}},
        }}})
    };
    let crd: CustomResourceDefinition = serde_json::from_value(json!({
        "metadata": {"name": crd_name},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema("foo")},
                {"name": "v2", "served": true, "storage": true, "schema": schema("bar")},
            ],
            "conversion": {
                "strategy": "Webhook",
                "webhook": {
                    "conversionReviewVersions": ["v1"],
                    "clientConfig": {
                        "service": {"namespace": ns, "name": "echo-convert", "path": "/convert", "port": 443},
                        "caBundle": b64(&ca),
                    },
                },
            },
        },
    }))?;
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    crds.create(&PostParams::default(), &crd).await?;
    let mut guard = CrdGuard { cluster: t.cluster.clone(), name: crd_name.clone(), armed: true };
    dco_tests::wait_crd_established(&crds, &crd_name, Duration::from_secs(60)).await?;

    let ar =
        |v: &str| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, v, "Widget"), "widgets");
    let v1: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &ns, &ar("v1"));
    let v2: Api<DynamicObject> = Api::namespaced_with(t.client.clone(), &ns, &ar("v2"));

    // write at v1 (retry while the new API is being wired up)
    let obj: DynamicObject = serde_json::from_value(json!({
        "apiVersion": format!("{group}/v1"),
        "kind": "Widget",
        "metadata": {"name": "w1"},
        "spec": {"foo": "hello"},
    }))?;
    wait_for("creating a Widget at v1", Duration::from_secs(60), || async {
        match v1.create(&PostParams::default(), &obj).await {
            Ok(o) => Ok(Some(o)),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code >= 500 => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await?;

    // read at v2: only the webhook renames spec.foo to spec.bar
    let got = v2.get("w1").await.context("reading the Widget at v2")?;
    assert_eq!(got.types.as_ref().map(|t| t.api_version.clone()), Some(format!("{group}/v2")));
    assert_eq!(got.data["spec"]["bar"], json!("hello"), "v2 object: {:?}", got.data);
    assert!(got.data["spec"].get("foo").is_none(), "v2 object: {:?}", got.data);
    let by = got
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get("echo-convert.testenv.dco.rs/converted-by"))
        .cloned()
        .unwrap_or_default();
    assert!(by.starts_with("echo-convert-"), "converted-by annotation: {by:?}");

    // and back at v1
    let back = v1.get("w1").await?;
    assert_eq!(back.data["spec"]["foo"], json!("hello"), "v1 object: {:?}", back.data);

    // the webhook's own log shows the reviews
    let log = std::fs::read_to_string(t.cluster.pod_log(&ns, &by, "webhook")).unwrap_or_default();
    assert!(log.contains("converted"), "webhook log: {log}");

    // the CRD goes before the namespace (and its webhook) does
    crds.delete(&crd_name, &DeleteParams::default()).await?;
    guard.armed = false;
    t.cleanup().await;
    Ok(())
}
