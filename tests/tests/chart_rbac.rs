//! The operator reads Secrets only where servers run (docs/installation.md, "RBAC"), on the
//! local cluster's real apiserver:
//!
//! * `secrets_only_in_server_namespaces`: charts/dco installed into a fresh namespace with one
//!   extra server namespace (`rbac.serverNamespaces`) that also holds the chart's default
//!   server. SubjectAccessReviews of the operator's ServiceAccount: get, list and watch on
//!   Secrets (and list/watch on Deployments, Services, Leases) allowed in the release namespace
//!   and the server namespace, refused in `kube-system`, `default` and cluster-wide. The
//!   default server becomes Available under that RBAC (its Secrets watched in its namespace
//!   only). A server whose `spec.namespace` is not granted gets `Available=False`
//!   `NamespaceNotWatched` naming `rbac.serverNamespaces` and `--server-namespaces`, one
//!   Warning Event, and neither a status rewrite loop nor an operator restart.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams};
use serde_json::json;

use dco_api::ConversionWebhookServer;
use dco_tests::chart::{helm, helm_install_dco, release_label};
use dco_tests::rbac::{Check, audit, expand};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-rbac");
const WAIT: Duration = Duration::from_secs(180);

#[tokio::test]
async fn secrets_only_in_server_namespaces() -> Result<()> {
    let t = TestEnv::new("rbac").await?;
    // The server namespace, deleted with it.
    let srv = TestEnv::new("rbac-srv").await?;
    let client = t.client.clone();
    let (ns, srv_ns) = (t.ns.clone(), srv.ns.clone());
    let label = release_label(&t);
    let release = format!("dco-{}", ns.rsplit('-').next().unwrap_or("run"));
    let server = format!("{ns}-default");
    let outside = format!("{ns}-outside");
    let outside_ns = format!("{ns}-not-granted");
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let pods: Api<Pod> = t.api();

    // One operator replica, the default server in the extra namespace.
    let values = json!({
        "replicaCount": 1,
        "webhook": {"args": ["--drain-period=5s"]},
        "rbac": {"serverNamespaces": [srv_ns]},
        "defaultServer": {"name": server, "spec": {"replicas": 1, "namespace": srv_ns}},
    });
    let started = Instant::now();
    helm_install_dco(&t, &release, &values).await.context("helm install")?;
    let installed = started.elapsed();
    let operators = dco_tests::wait_ready_pods(&pods, "app.kubernetes.io/name=dco-operator", 1, WAIT).await?;
    let deploy: Api<Deployment> = t.api();
    let args = deploy
        .get(&format!("{release}-operator"))
        .await?
        .spec
        .template
        .spec
        .map(|s| s.containers[0].args.clone().unwrap_or_default())
        .unwrap_or_default();
    let flag = format!("--server-namespaces={ns},{srv_ns}");
    ensure!(args.contains(&flag), "the operator's args {args:?} lack {flag}");

    // The default server runs in the extra namespace with the chart's RBAC.
    wait_for("the default server to be Available", WAIT, || async {
        Ok(dco_tests::server_condition(&servers, &server, "Available")
            .await?
            .filter(|(s, _, _)| s == "True")
            .map(|_| ()))
    })
    .await?;
    let server_ready = started.elapsed();
    eprintln!(
        "helm install {installed:?}; default server {server} Available in {srv_ns} {server_ready:?} after the start"
    );

    // SubjectAccessReviews of the operator's ServiceAccount.
    let sa = (ns.clone(), format!("{release}-operator"));
    let mut allowed: Vec<Check> = Vec::new();
    let mut refused: Vec<Check> = Vec::new();
    let reads = ["get", "list", "watch"];
    for granted in [ns.as_str(), srv_ns.as_str()] {
        allowed.extend(expand(&reads, "", &["secrets"], Some(granted)));
        allowed.extend(expand(&["list", "watch"], "", &["services"], Some(granted)));
        allowed.extend(expand(&["list", "watch"], "apps", &["deployments"], Some(granted)));
        allowed.extend(expand(&["list", "watch"], "coordination.k8s.io", &["leases"], Some(granted)));
    }
    for other in [Some("kube-system"), Some("default"), Some(outside_ns.as_str()), None] {
        refused.extend(expand(&reads, "", &["secrets"], other));
        refused.extend(expand(&["list", "watch"], "", &["services"], other));
        refused.extend(expand(&["list", "watch"], "apps", &["deployments"], other));
        refused.extend(expand(&["list", "watch"], "coordination.k8s.io", &["leases"], other));
    }
    // A named Secret elsewhere too (a get names its object).
    refused.push((("get", "", "secrets"), Some("kube-system"), Some("any")));
    let wrong = audit(&client, &sa, &allowed, true).await?;
    let over = audit(&client, &sa, &refused, false).await?;
    ensure!(
        wrong.is_empty() && over.is_empty(),
        "operator ServiceAccount: refused {wrong:#?}; allowed {over:#?}"
    );
    eprintln!(
        "SubjectAccessReviews: {} allowed (in {ns} and {srv_ns}), {} refused (kube-system, default, {outside_ns}, cluster-wide), as expected",
        allowed.len(),
        refused.len()
    );

    // A server in a namespace not granted: refused in its status and by one Warning Event.
    let restarts = |p: &Pod| -> i32 {
        p.status.iter().flat_map(|s| s.container_statuses.iter().flatten()).map(|c| c.restart_count).sum()
    };
    let restarts_before: i32 = operators.iter().map(restarts).sum();
    MANAGER
        .apply(
            &servers,
            &outside,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": outside, "labels": {&label.0: &label.1}},
            "spec": {"namespace": outside_ns, "replicas": 1}}),
        )
        .await?;
    let applied = Instant::now();
    let (_, reason, message) =
        wait_for("the server outside the granted namespaces to be refused", WAIT, || async {
            Ok(dco_tests::server_condition(&servers, &outside, "Available")
                .await?
                .filter(|(s, r, _)| s == "False" && r == "NamespaceNotWatched"))
        })
        .await?;
    let refused_after = applied.elapsed();
    for part in ["rbac.serverNamespaces", &format!("--server-namespaces={ns},{srv_ns}"), &outside_ns] {
        ensure!(message.contains(part), "the refusal does not name {part}: {message}");
    }
    let events = wait_for("a Warning Event NamespaceNotWatched", WAIT, || async {
        let e = dco_tests::warning_events(&client, &outside, &reason).await?;
        Ok((!e.is_empty()).then_some(e))
    })
    .await?;
    let note = events[0].note.clone().unwrap_or_default();
    ensure!(note.contains("rbac.serverNamespaces"), "the Event does not name rbac.serverNamespaces: {note}");
    eprintln!("refused {refused_after:?} after the apply: {message}");

    // No spin: the server's object stays as it is (no status rewrites), one Event, and the
    // operator neither restarts nor stops being Ready. Then it deletes cleanly.
    let rv = servers.get(&outside).await?.metadata.resource_version;
    tokio::time::sleep(Duration::from_secs(15)).await;
    let after = servers.get(&outside).await?;
    ensure!(after.metadata.resource_version == rv, "the refused server was rewritten within 15 s");
    let events = dco_tests::warning_events(&client, &outside, &reason).await?;
    let series: i32 = events.iter().map(|e| e.series.as_ref().map_or(1, |s| s.count)).sum();
    ensure!(events.len() == 1 && series == 1, "{} Events ({series} in series) for one refusal", events.len());
    let now = dco_tests::wait_ready_pods(&pods, "app.kubernetes.io/name=dco-operator", 1, WAIT).await?;
    let restarts_after: i32 = now.iter().map(restarts).sum();
    ensure!(
        restarts_after == restarts_before,
        "the operator restarted ({restarts_before} → {restarts_after})"
    );
    servers.delete(&outside, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&servers, &outside, WAIT).await?;
    eprintln!("no status rewrite, 1 Event and no restart in 15 s; the refused server deleted cleanly");

    // The chart keeps the default server on uninstall: remove it first, then the release.
    servers.delete(&server, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&servers, &server, WAIT).await?;
    helm(&t.cluster, &["uninstall", &release, "--namespace", &ns, "--wait", "--timeout", "3m"])?;
    srv.cleanup().await;
    t.cleanup().await;
    Ok(())
}
