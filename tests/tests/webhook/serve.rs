//! What a webhook replica does (docs/webhook.md, "What a replica does" and "The served-target
//! Lease"): dco-webhook on the local cluster, a Deployment of 2 replicas (made by the test, as the
//! operator would), a CRD whose spec.conversion names its Service. Proves: objects written
//! and read at every version through the apiserver; both replicas' served-target Leases
//! carry the target, are owned by their Pods and renew; moving the assignment away while
//! spec.conversion still names the Service keeps the plan (and dropping spec.conversion
//! then releases it); an over-the-cap set is marked truncated.
//!
//! Needs `target/debug/dco-webhook` (built by `cargo test --workspace --no-run`, or
//! `cargo build -p dco-webhook`).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use dco_api::served_lease::{self, Report};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::json;

use dco_tests::{ClusterScoped, Manager, TestEnv, ar, b64, wait_deployment_available, wait_for};

const MANAGER: Manager = Manager("dco-webhook-e2e");

/// The served-target reports of an instance's Leases, by Lease name.
async fn reports(leases: &Api<Lease>, instance: &str) -> Result<BTreeMap<String, (Lease, Report)>> {
    let lp = ListParams::default().labels(&format!(
        "{}={instance},{}={}",
        dco_api::LABEL_INSTANCE,
        dco_api::LABEL_MANAGED_BY,
        dco_api::MANAGED_BY
    ));
    Ok(leases
        .list(&lp)
        .await?
        .items
        .into_iter()
        .map(|l| {
            let r = served_lease::read(l.metadata.annotations.as_ref().unwrap_or(&BTreeMap::new()));
            (l.metadata.name.clone().unwrap_or_default(), (l, r))
        })
        .collect())
}

async fn ready_pods(pods: &Api<Pod>, app: &str) -> Result<Vec<Pod>> {
    Ok(pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none() && dco_tests::pod_ready(p))
        .collect())
}

#[tokio::test]
async fn webhook_replicas_serve_publish_leases_and_hold_during_a_move() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("wh").await?;
    let ns = t.ns.clone();
    let client = t.client.clone();
    let instance = dco_tests::unique_name("whi");
    let elsewhere = format!("{instance}-other");
    let group = format!("{ns}.e2e.dco.rs");
    let target = format!("widgets.{group}");
    let config = format!("{instance}-widgets");
    let cluster_role = format!("dco-webhook-{ns}");
    let mut guard = ClusterScoped(Vec::new());

    // The dco CRDs (idempotent; other tests may have applied them), served before first use.
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let cws_ar = ar::<dco_api::ConversionWebhookServer>();
    let ccc_ar = ar::<dco_api::CRDConversionConfig>();
    let cws: Api<DynamicObject> = Api::all_with(client.clone(), &cws_ar);
    let cccs: Api<DynamicObject> = Api::all_with(client.clone(), &ccc_ar);
    wait_for("the dco CRDs to be served", Duration::from_secs(30), || async {
        Ok(cccs.list(&ListParams::default().limit(1)).await.ok().map(|_| ()))
    })
    .await?;

    // Two servers: ours, and one the assignment can move to (it never runs).
    for name in [&instance, &elsewhere] {
        guard.0.push((cws_ar.clone(), name.clone()));
        MANAGER
            .apply(
                &cws,
                name,
                // The replicas see this test's configs only: other tests' leftovers in a shared
                // cluster must not change what they hold.
                json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name}, "spec": {"namespace": ns, "replicas": 2,
                "cacheSelector": {"matchLabels": {"dco-e2e-webhook": ns}}}}),
            )
            .await?;
    }

    // RBAC, the serving Secret and the Service, as the operator would make them.
    guard.0.push((ar::<ClusterRole>(), cluster_role.clone()));
    guard.0.push((ar::<ClusterRoleBinding>(), cluster_role.clone()));
    let ca = dco_tests::hand_run_webhook_setup(&t, &MANAGER, &instance, &cluster_role).await?;

    // The target: v2 stores spec.storageGB, v1 calls it spec.storageSize.
    let schema = |size: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {size: {"type": "integer"}, "color": {"type": "string"}}}}}})
    };
    let conversion_to = |svc: Option<&str>| match svc {
        Some(svc) => json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
            "clientConfig": {"caBundle": b64(&ca), "service": {"name": svc, "namespace": ns, "path": format!("/convert/{target}"), "port": 443}}}}),
        None => json!({"strategy": "None"}),
    };
    let crd = |svc: Option<&str>| {
        json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v2", "served": true, "storage": true, "schema": schema("storageGB")},
                {"name": "v1", "served": true, "storage": false, "schema": schema("storageSize")}],
            "conversion": conversion_to(svc)}})
    };
    guard.0.push((ar::<CustomResourceDefinition>(), target.clone()));
    MANAGER.apply(&crds, &target, crd(Some(&instance))).await?;
    let cfg = |server: &str| {
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": config, "labels": {"dco-e2e-webhook": ns}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "webhookServerRef": {"name": server},
            "spokes": [{"version": "v1", "rules": [{"strategy": "FieldRename",
                "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]}})
    };
    guard.0.push((ccc_ar.clone(), config.clone()));
    MANAGER.apply(&cccs, &config, cfg(&instance)).await?;

    // The Deployment the operator would make.
    let deployment = |cap: Option<u32>| {
        let mut extra = vec!["--drain-period=2s".to_string()];
        extra.extend(cap.map(|cap| format!("--served-targets-max-bytes={cap}")));
        dco_tests::hand_run_webhook_deployment(&instance, 2, &extra)
    };
    let deployments = t.api::<Deployment>();
    MANAGER.apply(&deployments, &instance, deployment(None)).await?;
    wait_deployment_available(&deployments, &instance, 2, Duration::from_secs(120)).await?;

    // Objects written and read at every version through the apiserver.
    let gvk = |v: &str| GroupVersionKind::gvk(&group, v, "Widget");
    let widgets = |v: &str| -> Api<DynamicObject> {
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk_with_plural(&gvk(v), "widgets"))
    };
    let (v1, v2) = (widgets("v1"), widgets("v2"));
    let obj = |v: &str, name: &str, field: &str, n: i64| -> Result<DynamicObject> {
        Ok(serde_json::from_value(json!({"apiVersion": format!("{group}/{v}"), "kind": "Widget",
            "metadata": {"name": name}, "spec": {field: n, "color": "blue"}}))?)
    };
    wait_for("the first write at v1 to be converted", Duration::from_secs(60), || async {
        Ok(v1
            .create(&PostParams::default(), &obj("v1", "from-v1", "storageSize", 10)?)
            .await
            .ok()
            .map(|_| ()))
    })
    .await?;
    v2.create(&PostParams::default(), &obj("v2", "from-v2", "storageGB", 20)?).await?;
    for (name, n) in [("from-v1", 10), ("from-v2", 20)] {
        let a = v1.get(name).await.with_context(|| format!("reading {name} at v1"))?;
        let b = v2.get(name).await.with_context(|| format!("reading {name} at v2"))?;
        assert_eq!(a.data["spec"], json!({"storageSize": n, "color": "blue"}), "{name} at v1");
        assert_eq!(b.data["spec"], json!({"storageGB": n, "color": "blue"}), "{name} at v2");
    }
    assert_eq!(v1.list(&ListParams::default()).await?.items.len(), 2);

    // Both replicas' Leases carry the target, are owned by their Pods and renew.
    let leases = t.api::<Lease>();
    let pods = t.api::<Pod>();
    let holds_target = |r: &Report| r.targets().is_some_and(|s| s.contains(&target));
    let first = wait_for("both replicas' Leases to carry the target", Duration::from_secs(30), || async {
        let rs = reports(&leases, &instance).await?;
        Ok((rs.len() == 2 && rs.values().all(|(_, r)| holds_target(r))).then_some(rs))
    })
    .await?;
    let ready = ready_pods(&pods, &instance).await?;
    for pod in &ready {
        let pod_name = pod.metadata.name.clone().unwrap_or_default();
        let (lease, _) = first
            .get(&dco_api::served_lease_name(&pod_name))
            .with_context(|| format!("no Lease for Pod {pod_name}"))?;
        let owner = &lease.metadata.owner_references.as_ref().context("Lease without owner")?[0];
        assert_eq!((owner.kind.as_str(), owner.name.as_str()), ("Pod", pod_name.as_str()));
        assert_eq!(Some(&owner.uid), pod.metadata.uid.as_ref());
    }
    let renew = |l: &Lease| l.spec.as_ref().and_then(|s| s.renew_time.clone()).map(|t| t.0);
    wait_for("both Leases to renew", Duration::from_secs(20), || async {
        let now = reports(&leases, &instance).await?;
        Ok(first
            .iter()
            .all(|(name, (l, _))| now.get(name).is_some_and(|(n, _)| renew(n) > renew(l)))
            .then_some(()))
    })
    .await?;

    // Only named targets are read whole: an unrelated CRD is not held; a config
    // created before its CRD is served once the CRD appears; a target no config names and no
    // plan holds is released.
    let held = || async {
        let mut counts = Vec::new();
        for pod in ready_pods(&pods, &instance).await? {
            let ip = pod.status.as_ref().and_then(|s| s.pod_ip.clone()).context("Pod without an IP")?;
            let n = dco_tests::metric(&format!("{ip}:8080"), "dco_webhook_targets_held")
                .await?
                .context("no dco_webhook_targets_held")?;
            counts.push(n as i64);
        }
        Ok::<_, anyhow::Error>(counts)
    };
    let unrelated = format!("unrelated.{group}");
    let later = format!("gadgets.{group}");
    let later_config = format!("{instance}-gadgets");
    guard.0.push((ar::<CustomResourceDefinition>(), unrelated.clone()));
    guard.0.push((ar::<CustomResourceDefinition>(), later.clone()));
    guard.0.push((ccc_ar.clone(), later_config.clone()));
    MANAGER.apply(&crds, &unrelated, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": unrelated},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "unrelated", "singular": "unrelated", "kind": "Unrelated", "listKind": "UnrelatedList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "schema": schema("size")}]}})).await?;
    MANAGER
        .apply(
            &cccs,
            &later_config,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": later_config, "labels": {"dco-e2e-webhook": ns}},
        "spec": {"targetCRD": {"name": later}, "hubVersion": "v2", "webhookServerRef": {"name": instance},
            "spokes": [{"version": "v1", "rules": [{"strategy": "FieldRename",
                "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]}}),
        )
        .await?;
    dco_tests::wait_crd_established(&crds, &unrelated, Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(held().await?, vec![1, 1], "only the one named CRD that exists is held whole");
    let mut gadget_crd = crd(Some(&instance));
    gadget_crd["metadata"]["name"] = json!(later);
    gadget_crd["spec"]["names"] =
        json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"});
    gadget_crd["spec"]["conversion"]["webhook"]["clientConfig"]["service"]["path"] =
        json!(format!("/convert/{later}"));
    MANAGER.apply(&crds, &later, gadget_crd).await?;
    wait_for(
        "both replicas' Leases to carry the CRD created after its config",
        Duration::from_secs(30),
        || async {
            let rs = reports(&leases, &instance).await?;
            Ok((rs.len() == 2 && rs.values().all(|(_, r)| r.targets().is_some_and(|s| s.contains(&later))))
                .then_some(()))
        },
    )
    .await?;
    assert_eq!(held().await?, vec![2, 2]);
    let gadgets = |v: &str| -> Api<DynamicObject> {
        let gvk = GroupVersionKind::gvk(&group, v, "Gadget");
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk_with_plural(&gvk, "gadgets"))
    };
    let g: DynamicObject =
        serde_json::from_value(json!({"apiVersion": format!("{group}/v1"), "kind": "Gadget",
        "metadata": {"name": "g1"}, "spec": {"storageSize": 3, "color": "red"}}))?;
    wait_for("a write at v1 of the CRD created after its config", Duration::from_secs(30), || async {
        Ok(gadgets("v1").create(&PostParams::default(), &g).await.ok().map(|_| ()))
    })
    .await?;
    assert_eq!(gadgets("v2").get("g1").await?.data["spec"], json!({"storageGB": 3, "color": "red"}));
    // The config goes and spec.conversion stops naming the Service: the plan drains, then the
    // copy is released.
    cccs.delete(&later_config, &DeleteParams::default()).await?;
    let mut gadget_unwired = crd(None);
    gadget_unwired["metadata"]["name"] = json!(later);
    gadget_unwired["spec"]["names"] =
        json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"});
    MANAGER.apply(&crds, &later, gadget_unwired).await?;
    wait_for("the replicas to release the copy of the unnamed target", Duration::from_secs(30), || async {
        Ok((held().await? == vec![1, 1]).then_some(()))
    })
    .await?;

    // Move the assignment away while spec.conversion still names our Service: the plan stays.
    MANAGER.apply(&cccs, &config, cfg(&elsewhere)).await?;
    tokio::time::sleep(Duration::from_secs(6)).await; // three drain periods
    let rs = reports(&leases, &instance).await?;
    assert!(
        rs.len() == 2 && rs.values().all(|(_, r)| holds_target(r)),
        "the plan must be held while spec.conversion names the Service: {rs:?}"
    );
    let a = v1.get("from-v2").await.context("reading at v1 after the assignment moved")?;
    assert_eq!(a.data["spec"]["storageSize"], 20);
    // Control: once spec.conversion no longer names the Service, the replicas let go.
    MANAGER.apply(&crds, &target, crd(None)).await?;
    wait_for("the replicas to release the target", Duration::from_secs(30), || async {
        let rs = reports(&leases, &instance).await?;
        Ok((rs.len() == 2 && rs.values().all(|(_, r)| r.targets().is_some_and(|s| !s.contains(&target))))
            .then_some(()))
    })
    .await?;

    // Truncation: a cap smaller than any encoded set.
    MANAGER.apply(&cccs, &config, cfg(&instance)).await?;
    MANAGER.apply(&crds, &target, crd(Some(&instance))).await?;
    MANAGER.apply(&deployments, &instance, deployment(Some(8))).await?;
    wait_deployment_available(&deployments, &instance, 2, Duration::from_secs(120)).await?;
    wait_for("the new replicas' Leases to be marked truncated", Duration::from_secs(60), || async {
        let pods_now: Vec<String> =
            ready_pods(&pods, &instance).await?.into_iter().filter_map(|p| p.metadata.name).collect();
        let rs = reports(&leases, &instance).await?;
        let ok = pods_now.len() == 2
            && pods_now.iter().all(|p| {
                rs.get(&dco_api::served_lease_name(p)).is_some_and(|(l, r)| {
                    let ann = l.metadata.annotations.clone().unwrap_or_default();
                    matches!(r, Report::CannotTell(served_lease::CannotTell::Truncated))
                        && !ann.contains_key(dco_api::ANNOTATION_SERVED_TARGETS)
                })
            });
        Ok(ok.then_some(()))
    })
    .await?;

    t.cleanup().await;
    drop(guard);
    Ok(())
}
