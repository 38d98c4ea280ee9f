//! A replica reads only the targets its server may serve (docs/webhook.md, "Targets read
//! whole"): with a target settled on server `a`, the replicas of server `b` hold no copy of it
//! (`dco_webhook_targets_held` 0, nothing in `/debug/registry`); pinned to `b`, every replica of
//! `b` reads it and serves it before the operator re-wires it, the move settles with not one
//! failed read at the spoke version throughout, and `a`'s replicas release their copies once
//! their drain is over.
//!
//! Both servers carry a `cacheSelector` on the test's label, so the configs of other tests on
//! the shared cluster are out of their scope and the counts are this test's alone. The servers,
//! target, config and two operator replicas are those of `dco_tests::pinned_move`.
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::{ConversionWebhookServer, LABEL_INSTANCE};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::json;

use dco_tests::pinned_move::{MANAGER, PinnedMove, SpokeReader, WAIT};
use dco_tests::{Manager, TestEnv, wait_for};

/// Owns the servers' `cacheSelector` (and all of `b`), apart from what `PinnedMove` applies.
const SCOPE: Manager = Manager("dco-e2e-share");

/// The admin address (`<pod IP>:8080`) of every Ready replica of `server`.
async fn replicas(pods: &Api<Pod>, server: &str) -> Result<Vec<String>> {
    let list = pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| dco_tests::pod_ready(p) && p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.status.as_ref()?.pod_ip.as_ref().map(|ip| format!("{ip}:8080")))
        .collect())
}

/// `(dco_webhook_targets_held, whether /debug/registry names target)` of one replica.
async fn holds(addr: &str, target: &str) -> Result<(f64, bool)> {
    let held = dco_tests::metric(addr, "dco_webhook_targets_held").await?.context("no targets_held")?;
    let (code, body) = dco_tests::http_get(addr, "/debug/registry").await?;
    ensure!(code == 200, "GET {addr}/debug/registry: {code}");
    Ok((held, body.contains(&format!("\"{target}\""))))
}

/// Waits until each of `server`'s 2 Ready replicas holds `held` copies, with `target` in its
/// registry or not as `listed`; the time it took.
async fn until_all(pods: &Api<Pod>, server: &str, target: &str, held: f64, listed: bool) -> Result<Duration> {
    let started = Instant::now();
    let what = format!("each replica of {server} holding {held} target(s), {target} listed: {listed}");
    wait_for(&what, WAIT, || async {
        let addrs = replicas(pods, server).await?;
        let mut all = addrs.len() == 2;
        for a in &addrs {
            all &= holds(a, target).await? == (held, listed);
        }
        Ok(all.then_some(()))
    })
    .await?;
    Ok(started.elapsed())
}

async fn scope_server(
    servers: &Api<ConversionWebhookServer>,
    name: &str,
    ns: &str,
    selector: &str,
) -> Result<()> {
    let (key, value) = selector.split_once('=').context("selector")?;
    let obj = json!({
        "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": name, "labels": {key: value}},
        "spec": {"namespace": ns, "replicas": 2, "cacheSelector": {"matchLabels": {key: value}}},
    });
    SCOPE.apply(servers, name, obj).await.map(drop)
}

#[tokio::test]
async fn a_replica_reads_a_target_only_once_its_server_may_serve_it() -> Result<()> {
    let env = TestEnv::new("osh").await?;
    let (client, ns) = (env.client.clone(), env.ns.clone());
    let mv = PinnedMove::prepare(&env).await?;
    let _operators =
        dco_tests::start_operators(&env, &mv.selector, &["osh-1", "osh-2"], &["--resync", "60s"])?;
    let (a, b, target) = (mv.a.clone(), mv.b.clone(), mv.target.clone());
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);

    mv.settle_on_a().await?;
    scope_server(&mv.servers, &a, &ns, &mv.selector).await?;
    scope_server(&mv.servers, &b, &ns, &mv.selector).await?;
    mv.wait_server_reporting(&b, 2).await?;
    until_all(&pods, &a, &target, 1.0, true).await?;
    // b's replicas are Ready with their scope listed and read: the target is not theirs.
    until_all(&pods, &b, &target, 0.0, false).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    for addr in replicas(&pods, &b).await? {
        let got = holds(&addr, &target).await?;
        ensure!(got == (0.0, false), "replica {addr} of {b} holds {target} served by {a} alone: {got:?}");
    }

    // Objects at the spoke version; a loop keeps reading them (each read a conversion).
    let gvk = GroupVersionKind::gvk(&mv.group, "v1", "Widget");
    let v1: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns, &ApiResource::from_gvk_with_plural(&gvk, "widgets"));
    for i in 0..10 {
        let name = format!("w{i}");
        let obj = json!({"apiVersion": format!("{}/v1", mv.group), "kind": "Widget", "metadata": {"name": name},
            "spec": {"storageSize": i, "owner": "e2e"}});
        v1.patch(&name, &PatchParams::apply(&MANAGER), &Patch::Apply(&obj)).await.context("writing at v1")?;
    }
    let reader = SpokeReader::start(v1.clone(), Duration::from_millis(50));

    // Pinned to b: b's replicas read it from the pin's event on, then the operator moves it.
    let pinned = Instant::now();
    mv.pin(&b).await?;
    let read_in = until_all(&pods, &b, &target, 1.0, true).await?;
    mv.wait_settled(&b).await?;
    let settled_in = pinned.elapsed();
    // a serves on through its drain (5 s after the re-wiring and after its last review), then
    // drops the plan and releases the copy.
    let released_in = until_all(&pods, &a, &target, 0.0, false).await?;
    let (ok, failed, errors) = reader.finish().await?;
    eprintln!(
        "pinned to {b}: read and served by both its replicas in {read_in:?}, settled in {settled_in:?}; \
         {a} released it {released_in:?} later; reads at v1: {ok} ok, {failed} failed"
    );
    ensure!(failed == 0, "{failed} reads failed during the move: {errors:?}");
    ensure!(ok >= 10, "only {ok} reads ran during the move");

    mv.delete_config_and_wait_revert().await?;
    mv.cleanup().await;
    env.cleanup().await;
    Ok(())
}
