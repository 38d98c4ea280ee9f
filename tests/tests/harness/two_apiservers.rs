//! The testenv's two kube-apiservers on one etcd (docs/testenv.md, "Two apiservers"): both
//! serve the cluster, each
//! calls conversion webhooks through the service resolver, and each switches a kind's
//! storage after a change of its CRD's spec on its own schedule. The lag between the two
//! switches, over 10 changes, is printed: the drain period is set from its maximum.

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, PostParams};
use serde_json::{Value, json};

use crate::CrdGuard;
use dco_tests::apiservers::{RebuildProbe, client2};
use dco_tests::{Manager, TestEnv, b64, wait_for};

const MANAGER: Manager = Manager("dco-two-apiservers-test");
const CHANGES: usize = 10;

/// Creates `obj`, retrying while the apiserver behind `api` does not serve the kind yet
/// (each apiserver installs a new CRD's API when its own informer sees it).
async fn create_when_served(api: &Api<DynamicObject>, obj: &DynamicObject, what: &str) -> Result<()> {
    wait_for(what, Duration::from_secs(60), || async {
        match api.create(&PostParams::default(), obj).await {
            Ok(_) => Ok(Some(())),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code >= 500 => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await
}

#[tokio::test]
async fn two_apiservers_serve_one_cluster_and_switch_a_kind_after_each_crd_change() -> Result<()> {
    dco_tests::map_echo_convert(env!("CARGO_BIN_EXE_echo-convert"))?;
    let t = TestEnv::new("apis2").await?;
    let ns = t.ns.clone();
    let c1 = t.client.clone();
    let c2 = client2().await?;

    for (n, c) in [(1, &c1), (2, &c2)] {
        let body = c.request_text(http::Request::get("/readyz").body(Vec::new())?).await?;
        assert_eq!(body.trim(), "ok", "apiserver {n} /readyz");
    }
    // two apiservers, not one reached twice: each holds an identity Lease of its own
    let leases: Api<Lease> = Api::namespaced(c2.clone(), "kube-system");
    let identities = wait_for("two kube-apiserver identity Leases", Duration::from_secs(60), || async {
        let l = leases
            .list(&ListParams::default().labels("apiserver.kubernetes.io/identity=kube-apiserver"))
            .await?;
        Ok((l.items.len() >= 2).then_some(l.items.len()))
    })
    .await?;
    println!("kube-apiserver identity Leases: {identities}");

    // a CRD with webhook conversion (v1 served, v2 stored) through the echo-convert Service
    let ca = dco_tests::deploy_echo_convert(&t).await?;
    let group = format!("{ns}.e2e.dco.rs");
    let crd_name = format!("widgets.{group}");
    // `described` toggles a description in v2's schema: a change of the CRD's spec
    let crd = |described: bool| -> Value {
        let mut bar = json!({"type": "string"});
        if described {
            bar["description"] = json!("toggled by cluster_two_apiservers");
        }
        let schema = |props: Value| {
            json!({"openAPIV3Schema": {"type": "object", "properties": {
                "spec": {"type": "object", "properties": props}}}})
        };
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": crd_name},
            "spec": {
                "group": group,
                "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [
                    {"name": "v1", "served": true, "storage": false,
                        "schema": schema(json!({"foo": {"type": "string"}}))},
                    {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"bar": bar}))},
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
        })
    };
    let crds1: Api<CustomResourceDefinition> = Api::all(c1.clone());
    let crds2: Api<CustomResourceDefinition> = Api::all(c2.clone());
    MANAGER.apply(&crds1, &crd_name, crd(false)).await?;
    let mut guard = CrdGuard { cluster: t.cluster.clone(), name: crd_name.clone(), armed: true };
    dco_tests::wait_crd_established(&crds1, &crd_name, Duration::from_secs(60)).await?;

    let ar =
        |v: &str| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, v, "Widget"), "widgets");
    let at = |c: &kube::Client, v: &str| Api::<DynamicObject>::namespaced_with(c.clone(), &ns, &ar(v));
    let widget = |name: &str, foo: &str| -> Result<DynamicObject> {
        Ok(serde_json::from_value(json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": {"name": name}, "spec": {"foo": foo},
        }))?)
    };

    // written through apiserver 1 (its webhook call converts to v2 for storage), read through
    // apiserver 2: at v2 as stored, at v1 converted by apiserver 2's own webhook call
    create_when_served(&at(&c1, "v1"), &widget("w1", "one")?, "creating w1 through apiserver 1").await?;
    let w1 = wait_for("w1 through apiserver 2", Duration::from_secs(60), || async {
        match at(&c2, "v2").get_opt("w1").await {
            Ok(o) => Ok(o),
            Err(kube::Error::Api(e)) if e.code == 404 || e.code >= 500 => Ok(None),
            Err(e) => Err(e.into()),
        }
    })
    .await?;
    assert_eq!(w1.data["spec"]["bar"], json!("one"), "w1 at v2 through apiserver 2: {:?}", w1.data);
    let w1 = at(&c2, "v1").get("w1").await.context("reading w1 at v1 through apiserver 2")?;
    assert_eq!(w1.data["spec"]["foo"], json!("one"), "w1 at v1 through apiserver 2: {:?}", w1.data);
    assert!(w1.data["spec"].get("bar").is_none(), "w1 at v1 through apiserver 2: {:?}", w1.data);
    // and the other way round
    create_when_served(&at(&c2, "v1"), &widget("w2", "two")?, "creating w2 through apiserver 2").await?;
    let w2 = at(&c1, "v2").get("w2").await.context("reading w2 at v2 through apiserver 1")?;
    assert_eq!(w2.data["spec"]["bar"], json!("two"), "w2 at v2 through apiserver 1: {:?}", w2.data);

    // the switches: a watch of the kind through each apiserver, 10 spec changes
    let probe = RebuildProbe::start([c1.clone(), c2.clone()], &ar("v2"), &ns).await?;
    let mut changes = Vec::new();
    for i in 0..CHANGES {
        // written through each apiserver in turn: the writer's informer has no head start
        let (crds, via) = if i % 2 == 0 { (&crds1, 1) } else { (&crds2, 2) };
        let changed = Instant::now();
        MANAGER.apply(crds, &crd_name, crd(i % 2 == 0)).await.with_context(|| format!("change {i}"))?;
        changes.push(changed);
        let s = probe
            .wait_switches_after(changed, Duration::from_secs(30))
            .await
            .with_context(|| format!("change {i}"))?;
        println!("change {i} (through apiserver {via}): watch ends {}", s.describe());
    }
    let log = probe.stop();

    // every change, seen by both apiservers before the next one
    let switches = log.switches(&changes);
    for (i, s) in switches.iter().enumerate() {
        assert!(s.complete(), "change {i}: not every apiserver's watch ended: {}", s.describe());
    }
    let lags: Vec<Duration> = switches.iter().filter_map(|s| s.lag()).collect();
    assert_eq!(lags.len(), CHANGES);
    let ms: Vec<String> = lags.iter().map(|l| format!("{:.1}", l.as_secs_f64() * 1000.0)).collect();
    let max = lags.iter().max().copied().unwrap_or_default();
    println!("lag between the two apiservers' switches per change (ms): {}", ms.join(", "));
    println!("max lag: {:.1} ms (the drain period is set from this)", max.as_secs_f64() * 1000.0);
    for (n, a) in log.apiservers.iter().enumerate() {
        let errors: Vec<&str> = a.ends.iter().filter_map(|e| e.error.as_deref()).collect();
        println!(
            "apiserver {}: {} watch ends ({} with an error: {errors:?}), {} failed opens{}",
            n + 1,
            a.ends.len(),
            errors.len(),
            a.open_failures.len(),
            a.open_failures.first().map(|f| format!(" (first: {})", f.1)).unwrap_or_default()
        );
    }

    crds1.delete(&crd_name, &DeleteParams::default()).await?;
    guard.armed = false;
    t.cleanup().await;
    Ok(())
}
