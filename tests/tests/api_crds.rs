//! dco's own CRDs (docs/configuration.md) on a real apiserver: the generated schemas are structural
//! and accepted, the CEL rules compile within the cost budget, the examples are valid, and bad
//! objects are refused with messages that name the fix.

use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

async fn install_crds(client: &kube::Client) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for crd in dco_api::crds() {
        let name = crd.metadata.name.clone().context("crd name")?;
        crds.patch(&name, &PatchParams::apply("dco-tests").force(), &Patch::Apply(&crd))
            .await
            .with_context(|| format!("applying CRD {name}"))?;
        dco_tests::wait_crd_established(&crds, &name, Duration::from_secs(30)).await?;
    }
    Ok(())
}

fn api_for(client: &kube::Client, kind: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(dco_api::GROUP, dco_api::VERSION, kind);
    let plural = format!("{}s", kind.to_lowercase());
    Api::all_with(client.clone(), &ApiResource::from_gvk_with_plural(&gvk, &plural))
}

async fn dry_run_create(client: &kube::Client, obj: &Value) -> Result<(), kube::Error> {
    let kind = obj["kind"].as_str().unwrap_or_default();
    let o: DynamicObject = serde_json::from_value(obj.clone()).map_err(kube::Error::SerdeError)?;
    api_for(client, kind).create(&PostParams { dry_run: true, ..Default::default() }, &o).await.map(|_| ())
}

fn rejection(r: Result<(), kube::Error>) -> String {
    match r {
        Ok(()) => panic!("the apiserver accepted an invalid object"),
        Err(kube::Error::Api(s)) => s.message,
        Err(e) => panic!("unexpected error: {e}"),
    }
}

#[tokio::test]
async fn crds_are_accepted_and_enforce_their_rules() -> Result<()> {
    let client = dco_tests::client().await?;
    install_crds(&client).await?;

    // Every example is valid on a real apiserver (schema, defaults, CEL).
    let dir = dco_tests::repo_root().join("docs/examples");
    let mut checked = 0;
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "yaml") {
            let v: Value = serde_yaml::from_str(&std::fs::read_to_string(&path)?)?;
            // The targets shipped beside the example configs are not dco's objects (an XRD needs
            // Crossplane's CRDs); convctl's doc_examples test compiles the configs against them.
            if !v["apiVersion"].as_str().is_some_and(|a| a.starts_with(dco_api::GROUP)) {
                continue;
            }
            dry_run_create(&client, &v).await.with_context(|| format!("{} was refused", path.display()))?;
            checked += 1;
        }
    }
    assert!(checked >= 4, "checked {checked} examples");

    let config = |rule: Value, extra: Value| {
        let mut spec = json!({
            "targetCRD": {"name": "widgets.example.org"},
            "hubVersion": "v2",
            "spokes": [{"version": "v1", "rules": [rule]}],
        });
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        json!({"apiVersion": dco_api::API_VERSION, "kind": "CRDConversionConfig", "metadata": {"name": "bad"}, "spec": spec})
    };

    // The params block must match the strategy.
    let wrong_block = config(
        json!({"strategy": "FieldRename", "delete": {"path": "spec.a", "existsOn": "Hub"}}),
        json!({}),
    );
    let msg = rejection(dry_run_create(&client, &wrong_block).await);
    assert!(msg.contains("`fieldRename` must be set when, and only when, strategy is FieldRename"), "{msg}");
    assert!(msg.contains("`delete` must be set when, and only when, strategy is Delete"), "{msg}");

    // An unknown strategy is refused by the enum.
    let unknown =
        config(json!({"strategy": "Rename", "fieldRename": {"hubPath": "a", "spokePath": "b"}}), json!({}));
    let msg = rejection(dry_run_create(&client, &unknown).await);
    assert!(msg.contains("Unsupported value: \"Rename\""), "{msg}");

    // Warn needs a reason.
    let ok_rule =
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}});
    let warn = config(ok_rule.clone(), json!({"unmappedFieldPolicy": "Warn"}));
    let msg = rejection(dry_run_create(&client, &warn).await);
    assert!(msg.contains("unmappedFieldPolicy Warn needs unmappedFieldReason"), "{msg}");
    let warn_ok = config(ok_rule, json!({"unmappedFieldPolicy": "Warn", "unmappedFieldReason": "free text"}));
    dry_run_create(&client, &warn_ok).await?;

    // Autoscaling bounds are checked, and the weight has a floor.
    let cws = json!({
        "apiVersion": dco_api::API_VERSION, "kind": "ConversionWebhookServer", "metadata": {"name": "bad"},
        "spec": {"autoscaling": {"minReplicas": 5, "maxReplicas": 2}, "sharding": {"enabled": true, "weight": 0}},
    });
    let msg = rejection(dry_run_create(&client, &cws).await);
    assert!(msg.contains("autoscaling.minReplicas must not exceed autoscaling.maxReplicas"), "{msg}");
    assert!(msg.contains("spec.sharding.weight"), "{msg}");

    // Defaults are applied by the apiserver as the Rust types declare them.
    let minimal = json!({
        "apiVersion": dco_api::API_VERSION, "kind": "ConversionWebhookServer", "metadata": {"name": "minimal"},
        "spec": {"sharding": {"enabled": true}},
    });
    let o: DynamicObject = serde_json::from_value(minimal)?;
    let created = api_for(&client, "ConversionWebhookServer")
        .create(&PostParams { dry_run: true, ..Default::default() }, &o)
        .await?;
    assert_eq!(created.data["spec"]["replicas"], 2);
    assert_eq!(created.data["spec"]["sharding"]["weight"], 1);
    Ok(())
}
