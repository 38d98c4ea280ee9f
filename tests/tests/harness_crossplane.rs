//! The local cluster runs a real Crossplane 2 (tests/src/crossplane.rs, docs/testenv.md,
//! "Crossplane"): the cluster's own capability, no dco. Proves, with Crossplane started: an
//! XRD at `apiextensions.crossplane.io/v2` with a `spec.conversion` (strategy Webhook, a
//! Service client config) makes Crossplane render the XR's CRD carrying exactly that
//! `spec.conversion`; a `LegacyCluster` XRD with `claimNames` (which Crossplane 2.3 takes at
//! `apiextensions.crossplane.io/v1` only) renders the claim's CRD too, carrying it as well; a change of the XRDs' `spec.conversion` is followed by every rendered
//! CRD. Prints how long each took. The XRDs are deleted at the end and Crossplane removes the
//! CRDs it rendered.
//!
//! Needs Go for `hack/testenv tool crossplane` (minutes when cold, cached after). Runs
//! Crossplane under its cluster-wide lock, so never beside `webhook_crossplane_detection` or
//! `operator_crossplane_detection` (they install a stand-in for Crossplane's XRD CRD).

use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use dco_tests::crossplane::Crossplane;
use dco_tests::{ClusterScoped, Manager, TestEnv, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition,
};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use serde_json::{Value, json};

const MANAGER: Manager = Manager("dco-harness-crossplane");
/// Crossplane rendered a CRD in about 8 s when first measured; generous for a loaded machine.
const RENDER: Duration = Duration::from_secs(90);

/// XRDs at `version` (`v1`, `v2`).
fn xrd_resource(version: &str) -> ApiResource {
    let gvk = GroupVersionKind::gvk("apiextensions.crossplane.io", version, "CompositeResourceDefinition");
    ApiResource::from_gvk_with_plural(&gvk, "compositeresourcedefinitions")
}

/// A `spec.conversion` calling Service `service` in `ns` (no such Service needs to exist:
/// nothing is converted here), with `ca` as its caBundle.
fn conversion(ns: &str, service: &str, path: &str, ca: &str) -> Value {
    json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": ns, "name": service, "path": path, "port": 443},
            "caBundle": dco_tests::b64(ca)}}})
}

/// An XRD of `plural.group` serving v1 and v2 (v2 referenceable), with `conversion`. Without
/// `claim` at `apiextensions.crossplane.io/v2` (scope Namespaced, its default); with `claim`
/// (kind, plural) `LegacyCluster` with those claim names, at `apiextensions.crossplane.io/v1`:
/// in v2.3.0 only v1 has `claimNames` and the scope `LegacyCluster`.
fn xrd(group: &str, kind: &str, plural: &str, claim: Option<(&str, &str)>, conversion: &Value) -> Value {
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {"size": {"type": "integer"}}}}}});
    let mut spec = json!({"group": group, "names": {"kind": kind, "plural": plural},
        "versions": [
            {"name": "v1", "served": true, "referenceable": false, "schema": schema},
            {"name": "v2", "served": true, "referenceable": true, "schema": schema}],
        "conversion": conversion});
    let mut version = "v2";
    if let Some((claim_kind, claim_plural)) = claim {
        spec["scope"] = json!("LegacyCluster");
        spec["claimNames"] = json!({"kind": claim_kind, "plural": claim_plural});
        version = "v1";
    }
    json!({"apiVersion": format!("apiextensions.crossplane.io/{version}"), "kind": "CompositeResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")}, "spec": spec})
}

/// Waits until CRD `name` exists with exactly `want` as its `spec.conversion`; the time it took.
async fn until_wired(
    crds: &Api<CustomResourceDefinition>,
    name: &str,
    want: &Value,
    since: Instant,
) -> Result<Duration> {
    let want: CustomResourceConversion = serde_json::from_value(want.clone())?;
    wait_for(&format!("CRD {name} with the XRD's spec.conversion"), RENDER, || async {
        let crd = crds.get_opt(name).await?;
        Ok(crd.filter(|c| c.spec.conversion.as_ref() == Some(&want)).map(|_| since.elapsed()))
    })
    .await
}

#[tokio::test]
async fn crossplane_renders_the_xrds_conversion_into_the_crds_it_generates() -> Result<()> {
    let t = TestEnv::new("xp").await?;
    let dir = std::env::temp_dir().join(format!("dco-tests-{}", t.ns));
    let xp = Crossplane::start(&t.client, &dir).await?;
    eprintln!("crossplane log: {}", xp.log.display());

    let group = format!("{}.e2e.dco.rs", t.ns);
    let xrds: Api<DynamicObject> = Api::all_with(t.client.clone(), &xrd_resource("v2"));
    let legacy_xrds: Api<DynamicObject> = Api::all_with(t.client.clone(), &xrd_resource("v1"));
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let (widgets, gadgets, claims) =
        (format!("xwidgets.{group}"), format!("xgadgets.{group}"), format!("gadgets.{group}"));
    // Declared after `xp`, so dropped before it: deleted while Crossplane still runs.
    let guard =
        ClusterScoped(vec![(xrd_resource("v2"), widgets.clone()), (xrd_resource("v1"), gadgets.clone())]);

    let (ca, _, _) = dco_tests::serving_cert(&["conversion.example".to_string()])?;
    let first = conversion(&t.ns, "conv-a", "/convert", &ca);
    let created = Instant::now();
    MANAGER.apply(&xrds, &widgets, xrd(&group, "XWidget", "xwidgets", None, &first)).await?;
    MANAGER
        .apply(
            &legacy_xrds,
            &gadgets,
            xrd(&group, "XGadget", "xgadgets", Some(("Gadget", "gadgets")), &first),
        )
        .await?;
    let xr = until_wired(&crds, &widgets, &first, created).await?;
    let legacy = until_wired(&crds, &gadgets, &first, created).await?;
    let claim = until_wired(&crds, &claims, &first, created).await?;
    println!(
        "create -> rendered with spec.conversion: XR CRD {xr:?}, LegacyCluster XR CRD {legacy:?}, claim CRD {claim:?}"
    );
    // Rendered, not merely present: the kinds are Crossplane's (it owns the CRDs).
    for name in [&widgets, &gadgets, &claims] {
        let crd = crds.get(name).await?;
        let owner = crd.metadata.owner_references.unwrap_or_default();
        anyhow::ensure!(
            owner.iter().any(|o| o.kind == "CompositeResourceDefinition" && o.controller == Some(true)),
            "CRD {name} is not controlled by its XRD: {owner:?}"
        );
    }

    let second = conversion(&t.ns, "conv-b", "/v2/convert", &ca);
    let changed = Instant::now();
    MANAGER.apply(&xrds, &widgets, xrd(&group, "XWidget", "xwidgets", None, &second)).await?;
    MANAGER
        .apply(
            &legacy_xrds,
            &gadgets,
            xrd(&group, "XGadget", "xgadgets", Some(("Gadget", "gadgets")), &second),
        )
        .await?;
    let xr = until_wired(&crds, &widgets, &second, changed).await?;
    let legacy = until_wired(&crds, &gadgets, &second, changed).await?;
    let claim = until_wired(&crds, &claims, &second, changed).await?;
    println!("change -> followed: XR CRD {xr:?}, LegacyCluster XR CRD {legacy:?}, claim CRD {claim:?}");

    // Clean up while Crossplane runs: its finalizers delete the CRDs it rendered.
    let deleted = Instant::now();
    for (api, name) in [(&xrds, &widgets), (&legacy_xrds, &gadgets)] {
        api.delete(name, &Default::default()).await.with_context(|| format!("deleting XRD {name}"))?;
    }
    for (api, name) in [(&xrds, &widgets), (&legacy_xrds, &gadgets)] {
        dco_tests::wait_deleted(api, name, RENDER).await?;
    }
    for name in [&widgets, &gadgets, &claims] {
        dco_tests::wait_deleted(&crds, name, RENDER).await?;
    }
    println!("XRDs deleted -> rendered CRDs gone: {:?}", deleted.elapsed());
    drop(guard);
    xp.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    Ok(())
}
