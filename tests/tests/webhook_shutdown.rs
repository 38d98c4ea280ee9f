//! Conversion that never drops a request across rolling restarts of a server's webhook
//! Deployment (docs/webhook.md, "Shutdown"), on the local cluster: charts/dco installed with
//! the default server of 2 webhook replicas, a target wired to it whose config renames a field
//! (v1 `spec.sizeGB` ↔ v2 `spec.size.gb`, storage v2), and a load client that writes and reads
//! at v1 every 20 ms (tests/src/load.rs: every read converted by the webhook, every value
//! checked). The server's `podAnnotations` change five times — the operator rolls its webhook
//! Deployment each time (maxSurge 1, maxUnavailable 0) — and no conversion request may fail or
//! read a wrong value.
//!
//! The apiserver speaks HTTP/1.1 to webhooks, keeps idle connections, and does not retry a
//! POST that fails because the server closed the connection as it sent the next request on it.
//! So from SIGTERM on every answer of a stopping replica carries `Connection: close` while it
//! keeps serving for `--shutdown-delay`. Then the same five restarts with
//! `--shutdown-delay=0s` (the server's `extraArgs`): the failures are counted and printed, not
//! asserted (whether a request meets the closing listener is a race).
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`, and helm
//! (`hack/testenv up` without `DCO_TESTENV_HELM=0`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, LABEL_INSTANCE};
use dco_tests::chart::{helm, helm_install_dco, release_label, widget_config, widget_crd, widget_spec};
use dco_tests::load::{Load, Target};
use dco_tests::moves::Tally;
use dco_tests::{Manager, TestEnv, pod_ready, wait_for};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

const MANAGER: Manager = Manager("dco-e2e-webhook-shutdown");
const WAIT: Duration = Duration::from_secs(180);
const RESTARTS: usize = 5;
const REPLICAS: usize = 2;

#[tokio::test]
async fn rolling_restarts_of_a_webhook_drop_no_conversion() -> Result<()> {
    let t = TestEnv::new("whstop").await?;
    let result = scenario(&t).await;
    let removed = remove(&t).await;
    t.cleanup().await;
    result?;
    removed.context("removing the release, the server, the config and the target")
}

fn names(t: &TestEnv) -> (String, String) {
    let suffix = t.ns.rsplit('-').next().unwrap_or("run").to_string();
    (format!("dco-whstop-{suffix}"), format!("{}-default", t.ns))
}

/// The webhook Pods of `server`, terminating ones included.
async fn webhook_pods(pods: &Api<Pod>, server: &str) -> Result<Vec<Pod>> {
    Ok(pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?.items)
}

struct Phase {
    load: Tally,
    took: Duration,
}

/// `RESTARTS` rollouts of `server`'s webhook Deployment under `load`, each to its end (the old
/// Pods gone, `REPLICAS` new ones Ready); the load meanwhile.
async fn restarts(t: &TestEnv, load: &Load, server: &str, phase: &str) -> Result<Phase> {
    let pods: Api<Pod> = t.api();
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let mark = load.tally();
    let started = Instant::now();
    for i in 0..RESTARTS {
        let before: Vec<String> =
            webhook_pods(&pods, server).await?.iter().filter_map(|p| p.metadata.name.clone()).collect();
        let at = Instant::now();
        let patch = json!({"spec": {"podAnnotations": {"dco-tests/restarted": format!("{phase}-{i}")}}});
        servers.patch(server, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        wait_for(&format!("{phase} restart {i} to complete"), WAIT, || async {
            let l = webhook_pods(&pods, server).await?;
            let done = l.len() == REPLICAS
                && l.iter().all(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
                && l.iter().all(|p| p.metadata.name.as_ref().is_some_and(|n| !before.contains(n)));
            Ok(done.then_some(()))
        })
        .await?;
        eprintln!(
            "{phase} restart {i}: both webhook Pods replaced and the old ones gone in {:?}",
            at.elapsed()
        );
    }
    let took = started.elapsed();
    let load_meanwhile = load.tally() - mark;
    Ok(Phase { load: load_meanwhile, took })
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    let label = release_label(t);
    let (release, server) = names(t);
    let group = format!("{ns}.whstop.example");
    let target = format!("widgets.{group}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let configs: Api<CRDConversionConfig> = Api::all(client.clone());
    let pods: Api<Pod> = t.api();

    let values = json!({"replicaCount": 1,
        "defaultServer": {"name": server, "spec": {"replicas": REPLICAS}}});
    helm_install_dco(t, &release, &values).await.context("helm install")?;
    wait_for("the default server to be Available with 2 ready replicas", WAIT, || async {
        let st = servers.get(&server).await?.status.unwrap_or_default();
        let available = st.conditions.iter().any(|c| c.type_ == "Available" && c.status == "True");
        Ok((available && st.ready_replicas == REPLICAS as i32).then_some(()))
    })
    .await?;

    MANAGER.apply(&crds, &target, widget_crd(&group, &label)).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let cfg = format!("{ns}-widgets");
    MANAGER.apply(&configs, &cfg, widget_config(&cfg, &target, &label)).await?;
    wait_for("the config to settle on the default server", WAIT, || async {
        let st = configs.get(&cfg).await?.status.unwrap_or_default();
        let settled = st
            .handover
            .as_ref()
            .is_some_and(|h| serde_json::to_value(h.state).ok() == Some(json!("SourceDropped")));
        Ok((settled && st.assigned_webhook_server.as_deref() == Some(server.as_str())).then_some(()))
    })
    .await?;

    let load = Load::start(
        Target {
            client: client.clone(),
            ns: ns.clone(),
            group: group.clone(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            spoke: "v1".into(),
            hub: "v2".into(),
            spec: widget_spec,
            manager: &MANAGER,
        },
        5,
        Duration::from_millis(20),
    );
    load.wait_clean(100, WAIT, "before the restarts").await?;

    let with_delay = restarts(t, &load, &server, "default").await?;
    let errors = load.errors();
    eprintln!(
        "default --shutdown-delay, {RESTARTS} rolling restarts in {:?}: {} requests ok, {} failed, {} wrong {:?}",
        with_delay.took,
        with_delay.load.ok,
        with_delay.load.failed,
        with_delay.load.wrong,
        errors.iter().take(3).collect::<Vec<_>>()
    );
    ensure!(with_delay.load.ok >= 200, "too little load during the restarts: {:?}", with_delay.load);
    ensure!(
        with_delay.load.failed == 0 && with_delay.load.wrong == 0,
        "{} of {} conversion requests failed and {} read a wrong value across {RESTARTS} rolling restarts: {errors:?}",
        with_delay.load.failed,
        with_delay.load.ok + with_delay.load.failed,
        with_delay.load.wrong
    );

    // The same without the delay: the flag change is a rollout of its own (protected by the
    // old Pods' delay); then the restarts.
    let patch = json!({"spec": {"extraArgs": ["--shutdown-delay=0s"]}});
    servers.patch(&server, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    wait_for("the --shutdown-delay=0s Pods", WAIT, || async {
        let l = webhook_pods(&pods, &server).await?;
        let args =
            |p: &Pod| serde_json::to_string(&p.spec.as_ref().map(|s| &s.containers)).unwrap_or_default();
        Ok((l.len() == REPLICAS
            && l.iter().all(|p| {
                pod_ready(p)
                    && p.metadata.deletion_timestamp.is_none()
                    && args(p).contains("--shutdown-delay=0s")
            }))
        .then_some(()))
    })
    .await
    .context("rolling out --shutdown-delay=0s")?;
    let without = restarts(t, &load, &server, "no-delay").await?;
    let errors = load.errors();
    let total = load.stop().await?;
    eprintln!(
        "--shutdown-delay=0s, {RESTARTS} rolling restarts in {:?}: {} requests ok, {} failed, {} wrong (not asserted) {:?}; the whole load {total:?}",
        without.took,
        without.load.ok,
        without.load.failed,
        without.load.wrong,
        errors.iter().take(3).collect::<Vec<_>>()
    );
    Ok(())
}

/// Removes what the test made outside its namespace, in the order docs/installation.md gives
/// ("Uninstall"): the config (it reverts its target), the server, the release, the target.
async fn remove(t: &TestEnv) -> Result<()> {
    let (release, server) = names(t);
    let configs: Api<CRDConversionConfig> = Api::all(t.client.clone());
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let cfg = format!("{}-widgets", t.ns);
    if configs.get_opt(&cfg).await?.is_some() {
        let unsafe_ok =
            json!({"metadata": {"annotations": {dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE: "true"}}});
        configs.patch(&cfg, &PatchParams::default(), &Patch::Merge(unsafe_ok)).await?;
        configs.delete(&cfg, &DeleteParams::default()).await?;
        dco_tests::wait_deleted(&configs, &cfg, WAIT).await?;
    }
    if servers.get_opt(&server).await?.is_some() {
        servers.delete(&server, &DeleteParams::default()).await?;
        dco_tests::wait_deleted(&servers, &server, WAIT).await?;
    }
    let (cluster, ns) = (t.cluster.clone(), t.ns.clone());
    tokio::task::spawn_blocking(move || {
        helm(
            &cluster,
            &["uninstall", &release, "--namespace", &ns, "--wait", "--timeout", "3m", "--ignore-not-found"],
        )
    })
    .await??;
    let _ = crds.delete(&format!("widgets.{}.whstop.example", t.ns), &DeleteParams::default()).await;
    Ok(())
}
