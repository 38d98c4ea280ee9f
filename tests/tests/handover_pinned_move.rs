//! The pinned move, end to end (docs/operations.md, "What a ConversionWebhookServer becomes" and
//! "How a target is wired and moved"): dco-operator on the local cluster runs two
//! ConversionWebhookServers (their Deployments, Services, RBAC and self-managed certificates), and
//! wires a CRD to the one its config names, and moves it to the other when the config is re-pinned.
//! Proves: objects written at one version read back at the other; the target is re-wired only once
//! every live replica of the destination reports it in its served-target Lease; the move passes
//! through every handover state (one Event each) and settles; and not a single read at the spoke
//! version fails while a loop keeps reading throughout the move. Deleting the config then reverts
//! the CRD's spec.conversion (the safe-revert finalizer). With `--otlp-endpoint` pointing at a
//! collector on loopback (an in-test OTLP/HTTP receiver, `dco_tests::otlp_collector`), the move
//! arrives there as one trace: its root span under the persisted traceparent's ids and one child
//! span per transition (`dco_tests::pinned_move::move_trace`; tests/tests/observability_tracing.rs
//! proves the same through a real OpenTelemetry Collector).
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook` (built by
//! `cargo test --workspace --no-run`, or `cargo build -p dco-operator -p dco-webhook`).
//! The servers, target, config and operator replicas are those of `dco_tests::pinned_move`
//! (tests/src/pinned_move.rs).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::LABEL_INSTANCE;
use dco_api::served_lease::{self, Report};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::Event;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::json;

use dco_tests::pinned_move::{MANAGER, PinnedMove, SpokeReader, WAIT, wired};
use dco_tests::{TestEnv, wait_for};

/// Whether every live served-target Lease of `server` lists `target` (and how many there are).
async fn leases_report(leases: &Api<Lease>, server: &str, target: &str) -> Result<(bool, usize)> {
    let list = leases.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
    let now = k8s_openapi::jiff::Timestamp::now();
    let mut live = 0;
    let mut all = true;
    for l in &list.items {
        let spec = l.spec.clone().unwrap_or_default();
        let (Some(renew), Some(secs)) = (spec.renew_time, spec.lease_duration_seconds) else { continue };
        if renew.0 + k8s_openapi::jiff::SignedDuration::from_secs(i64::from(secs)) < now {
            continue;
        }
        live += 1;
        let ann = l.metadata.annotations.clone().unwrap_or_default();
        match served_lease::read(&ann) {
            Report::Targets(t) if t.contains(target) => {}
            _ => all = false,
        }
    }
    Ok((all && live > 0, live))
}

async fn ready_pods(pods: &Api<Pod>, server: &str) -> Result<usize> {
    let list = pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
    Ok(list
        .items
        .iter()
        .filter(|p| dco_tests::pod_ready(p) && p.metadata.deletion_timestamp.is_none())
        .count())
}

#[tokio::test]
async fn a_pinned_target_moves_between_servers_with_no_failed_read() -> Result<()> {
    let env = TestEnv::new("oph").await?;
    let client = env.client.clone();
    let ns = env.ns.clone();
    let mv = PinnedMove::prepare(&env).await?;
    let (otlp, exports) = dco_tests::otlp_collector().await?;
    let _operator = mv.start_operators(&env, &otlp)?;
    mv.settle_on_a().await?;
    let (a, b, target) = (&mv.a, &mv.b, &mv.target);

    // Objects written at the spoke version, read back at the hub version.
    let gvk = |v: &str| GroupVersionKind::gvk(&mv.group, v, "Widget");
    let ar = |v: &str| ApiResource::from_gvk_with_plural(&gvk(v), "widgets");
    let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v1"));
    let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v2"));
    for i in 0..10 {
        let name = format!("w{i}");
        let obj = json!({"apiVersion": format!("{}/v1", mv.group), "kind": "Widget", "metadata": {"name": name},
            "spec": {"storageSize": i, "owner": "e2e"}});
        v1.patch(&name, &PatchParams::apply(&MANAGER), &Patch::Apply(&obj)).await.context("writing at v1")?;
    }
    let w3 = v2.get("w3").await.context("reading w3 at v2")?;
    ensure!(w3.data["spec"]["storageGB"] == json!(3), "w3 at v2: {}", w3.data);

    // Keep reading at the spoke version (every read is a conversion) for the whole move.
    let reader = SpokeReader::start(v1.clone(), Duration::from_millis(100));

    // The second server, and the config re-pinned to it at once: the operator must hold the
    // wiring until b's replicas report the target.
    let move_started = Instant::now();
    mv.repin_to_b().await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let b_service = (ns.clone(), format!("dco-webhook-{b}"));
    let mut saw_wait = false;
    loop {
        ensure!(move_started.elapsed() < WAIT, "the move to {b} did not settle within {WAIT:?}");
        let crd = mv.crds.get(target).await?;
        let (b_reports, b_leases) = leases_report(&leases, b, target).await?;
        if wired(&crd) == Some(b_service.clone()) {
            // Wired to b: every live replica of b reports the target, and all ready ones publish.
            let ready = ready_pods(&pods, b).await?;
            ensure!(b_reports, "{target} is wired to {b} but not every live Lease of {b} reports it");
            ensure!(
                b_leases >= ready,
                "{target} is wired to {b} with {b_leases} live Leases for {ready} ready Pods"
            );
            break;
        }
        saw_wait |= !b_reports;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    ensure!(
        saw_wait,
        "never observed the destination before it reported the target; the guard went untested"
    );
    mv.wait_settled(b).await?;
    let move_took = move_started.elapsed();
    let h = mv.settled_move().await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (ok, failed, errors) = reader.finish().await?;
    eprintln!("move to {b} settled in {move_took:?}; reads at v1 during the move: {ok} ok, {failed} failed");
    ensure!(failed == 0, "{failed} reads failed during the move: {errors:?}");
    ensure!(ok >= 10, "only {ok} reads ran during the move");

    // a dropped the target (SourceDropped); b converts now.
    let (a_reports, _) = leases_report(&leases, a, target).await?;
    ensure!(!a_reports, "{a} still reports {target} after SourceDropped");
    let w7 = v1.get("w7").await?;
    ensure!(w7.data["spec"]["storageSize"] == json!(7), "w7 at v1: {}", w7.data);

    // One Event per transition of the move (attempt 2).
    let events: Api<Event> = Api::namespaced(client.clone(), "default");
    let reasons: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(mv.config.as_str()))
        .filter(|e| e.action.as_deref() == Some("HandoverMove2"))
        .filter_map(|e| e.reason)
        .collect();
    for want in ["HandoverStarted", "DestinationReady", "Patched", "SourceDropped"] {
        ensure!(
            reasons.iter().filter(|r| *r == want).count() == 1,
            "want one {want} Event for the move; saw {reasons:?}"
        );
    }

    // The same move at the collector: one trace, named by the persisted traceparent, its root
    // span and one child per transition. The exporter batches (every 5 s by default).
    let trace = wait_for("the move's spans at the OTLP collector", Duration::from_secs(30), || async {
        mv.trace(&dco_tests::otlp_resource_spans(&exports), &h)
    })
    .await?;
    eprintln!("at the collector:\n{}", trace.describe());

    mv.delete_config_and_wait_revert().await?;
    mv.cleanup().await;
    env.cleanup().await;
    Ok(())
}
