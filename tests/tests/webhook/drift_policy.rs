//! `driftPolicy` (docs/configuration.md; docs/webhook.md, "What a replica does") on the local
//! cluster: one dco-webhook replica (a Deployment made by the test,
//! as the operator would) serves two CRDs, one config each, one `FailClosed` and one
//! `KeepServingStale`. Both CRDs' v1 schema then drifts so the configs no longer compile: a
//! read at v1 through the apiserver fails with a message naming the FailClosed config, and
//! keeps working (from the last good plan) for the KeepServingStale one. Restoring the schema
//! serves the FailClosed target again.
//!
//! Needs `target/debug/dco-webhook` (`cargo build -p dco-webhook`).

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

use dco_tests::{Manager, ar, b64, wait_deployment_available, wait_for};

const MANAGER: Manager = Manager("dco-drift-e2e");

#[tokio::test]
async fn fail_closed_refuses_a_drifted_target_and_keep_serving_stale_keeps_serving() -> Result<()> {
    let crate::World { t, instance, mut guard, crds, ccc_ar, cccs, ca } =
        crate::world("drift", MANAGER).await?;
    let (ns, client) = (t.ns.clone(), t.client.clone());

    // Two targets alike but for the policy: v2 stores spec.storageGB, v1 calls it
    // spec.storageSize.
    let schema = |size: &str, drifted: bool| {
        let mut props = json!({size: {"type": "integer"}});
        if drifted {
            props["color"] = json!({"type": "string"});
        }
        json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": props}}}})
    };
    let group = |policy: &str| format!("{}.{ns}.e2e.dco.rs", policy.to_lowercase());
    let target = |policy: &str| format!("widgets.{}", group(policy));
    let config = |policy: &str| format!("{instance}-{}", policy.to_lowercase());
    let crd = |policy: &str, drifted: bool| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target(policy)},
        "spec": {"group": group(policy), "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v2", "served": true, "storage": true, "schema": schema("storageGB", false)},
                {"name": "v1", "served": true, "storage": false, "schema": schema("storageSize", drifted)}],
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"caBundle": b64(&ca), "service": {"name": instance, "namespace": ns,
                    "path": format!("/convert/{}", target(policy)), "port": 443}}}}}})
    };
    let policies = ["FailClosed", "KeepServingStale"];
    for policy in policies {
        guard.0.push((ar::<CustomResourceDefinition>(), target(policy)));
        MANAGER.apply(&crds, &target(policy), crd(policy, false)).await?;
        guard.0.push((ccc_ar.clone(), config(policy)));
        MANAGER.apply(&cccs, &config(policy), json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": config(policy)},
            "spec": {"targetCRD": {"name": target(policy)}, "hubVersion": "v2", "webhookServerRef": {"name": instance},
                "driftPolicy": policy,
                "spokes": [{"version": "v1", "rules": [{"strategy": "FieldRename",
                    "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]}})).await?;
    }

    let deployments = t.api::<Deployment>();
    MANAGER.apply(&deployments, &instance, dco_tests::hand_run_webhook_deployment(&instance, 1, &[])).await?;
    wait_deployment_available(&deployments, &instance, 1, Duration::from_secs(120)).await?;

    let widgets = |policy: &str, v: &str| -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(&group(policy), v, "Widget");
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk_with_plural(&gvk, "widgets"))
    };
    // Written at the hub, read at the spoke: every read at v1 is a conversion.
    for policy in policies {
        let obj: DynamicObject =
            serde_json::from_value(json!({"apiVersion": format!("{}/v2", group(policy)),
            "kind": "Widget", "metadata": {"name": "w"}, "spec": {"storageGB": 10}}))?;
        widgets(policy, "v2").create(&PostParams::default(), &obj).await?;
        let v1 = widgets(policy, "v1");
        let got =
            wait_for(&format!("{policy}: a read at v1 to be converted"), Duration::from_secs(60), || async {
                Ok(v1.get("w").await.ok())
            })
            .await?;
        assert_eq!(got.data["spec"], json!({"storageSize": 10}), "{policy}: before the drift");
    }

    // The drift: v1 gains spec.color, which the hub cannot hold; neither config compiles
    // any more (the field is unmapped).
    for policy in policies {
        MANAGER.apply(&crds, &target(policy), crd(policy, true)).await?;
    }
    let fc = widgets("FailClosed", "v1");
    let refused = wait_for("FailClosed: a read at v1 to be refused", Duration::from_secs(60), || async {
        match fc.get("w").await {
            Ok(_) => Ok(None),
            Err(kube::Error::Api(e)) => Ok(Some(e)),
            Err(e) => Err(e.into()),
        }
    })
    .await?;
    eprintln!("the apiserver answered: {}", refused.message);
    let fc_config = config("FailClosed");
    for needle in [
        format!("CRDConversionConfig \"{fc_config}\" does not compile"),
        format!(
            "ConversionWebhookServer \"{instance}\" refuses to convert target \"{}\"",
            target("FailClosed")
        ),
        "driftPolicy FailClosed".to_string(),
        "spec.color".to_string(),
    ] {
        assert!(
            refused.message.contains(&needle),
            "missing {needle:?} in the apiserver's error: {refused:?}"
        );
    }
    // The hub version is read without conversion, so it stays readable.
    widgets("FailClosed", "v2").get("w").await.context("FailClosed: reading at the hub")?;

    // KeepServingStale: once the replica shows the compile failure, the last good plan
    // still answers.
    let pods: Api<k8s_openapi::api::core::v1::Pod> = t.api();
    let pod = pods.list(&ListParams::default().labels(&format!("app={instance}"))).await?.items;
    let ip = pod.first().and_then(|p| p.status.as_ref()?.pod_ip.clone()).context("the replica's Pod IP")?;
    let stale_target = target("KeepServingStale");
    wait_for("KeepServingStale: the replica to see the drift", Duration::from_secs(60), || async {
        let (_, body) = dco_tests::http_get(&format!("{ip}:8080"), "/debug/registry").await?;
        let entries: Vec<Value> = serde_json::from_str(&body).unwrap_or_default();
        Ok(entries
            .iter()
            .find(|e| e["target"] == json!(stale_target))
            .filter(|e| e["lastError"]["message"].as_str().is_some_and(|m| m.contains("KeepServingStale")))
            .map(|e| assert!(e.get("failClosed").is_none(), "{e}")))
    })
    .await?;
    let stale = widgets("KeepServingStale", "v1");
    for _ in 0..5 {
        let got = stale.get("w").await.context("KeepServingStale: reading at v1 after the drift")?;
        assert_eq!(got.data["spec"], json!({"storageSize": 10}), "the last good plan answers");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // The schema back as it was: FailClosed serves again.
    MANAGER.apply(&crds, &target("FailClosed"), crd("FailClosed", false)).await?;
    let back = wait_for("FailClosed: reads at v1 to work again", Duration::from_secs(60), || async {
        Ok(fc.get("w").await.ok())
    })
    .await?;
    assert_eq!(back.data["spec"], json!({"storageSize": 10}));

    for policy in policies {
        crds.delete(&target(policy), &DeleteParams::default()).await?;
    }
    t.cleanup().await;
    drop(guard);
    Ok(())
}
