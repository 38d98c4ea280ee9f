//! dco-webhook on the local cluster, run by the test as the operator would run it (a
//! Deployment, its Service, RBAC and serving Secret: `dco_tests::hand_run_webhook_setup`), so
//! that what is proven is the webhook's own behaviour (docs/webhook.md). One binary; each
//! module is one test in a namespace of its own, with cluster-scoped names of its own, so they
//! run side by side.
//!
//! * [`serve`]: conversion through the apiserver, served-target Leases, holding during a move.
//! * [`drift_policy`]: `driftPolicy` FailClosed and KeepServingStale.
//! * [`metadata_less_review`]: a ConversionReview whose object has no `metadata`.
//!
//! Rolling restarts of a server's webhook Pods are `webhook_shutdown` (a binary of its own:
//! it installs the chart and counts failed requests under load).

mod drift_policy;
mod metadata_less_review;
mod serve;

use anyhow::Result;
use dco_tests::{ClusterScoped, Manager, TestEnv, ar};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject};
use serde_json::json;

/// One server's world, run by hand in a namespace of its own: dco's CRDs, the server
/// `<prefix>-xxxxxx` (1 replica; no operator runs it), and what the operator would make for
/// it (`dco_tests::hand_run_webhook_setup`). The test adds its targets, configs and the
/// Deployment (`dco_tests::hand_run_webhook_deployment`).
struct World {
    t: TestEnv,
    /// The server's name, its Service's and its Deployment's.
    instance: String,
    /// The cluster-scoped objects, deleted when dropped: the test pushes its own.
    guard: ClusterScoped,
    crds: Api<CustomResourceDefinition>,
    ccc_ar: ApiResource,
    cccs: Api<DynamicObject>,
    /// The CA (PEM) a target's `caBundle` carries.
    ca: String,
}

async fn world(prefix: &str, manager: Manager) -> Result<World> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new(prefix).await?;
    let (ns, client) = (t.ns.clone(), t.client.clone());
    let instance = dco_tests::unique_name(prefix);
    let cluster_role = format!("dco-webhook-{ns}");
    let mut guard = ClusterScoped(Vec::new());

    // Each CRD applied and Established (serving one kind says nothing of the other's).
    dco_tests::install_dco_crds(&client, &manager).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let cws_ar = ar::<dco_api::ConversionWebhookServer>();
    let ccc_ar = ar::<dco_api::CRDConversionConfig>();
    let cws: Api<DynamicObject> = Api::all_with(client.clone(), &cws_ar);
    let cccs: Api<DynamicObject> = Api::all_with(client.clone(), &ccc_ar);
    guard.0.push((cws_ar.clone(), instance.clone()));
    let server = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": instance}, "spec": {"namespace": ns, "replicas": 1}});
    manager.apply(&cws, &instance, server).await?;

    // RBAC, the serving Secret and the Service, as the operator would make them.
    guard.0.push((ar::<ClusterRole>(), cluster_role.clone()));
    guard.0.push((ar::<ClusterRoleBinding>(), cluster_role.clone()));
    let ca = dco_tests::hand_run_webhook_setup(&t, &manager, &instance, &cluster_role).await?;
    Ok(World { t, instance, guard, crds, ccc_ar, cccs, ca })
}
