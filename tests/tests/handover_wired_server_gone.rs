//! A config whose wired server is force-deleted says so, and recovers (docs/operations.md,
//! "Deleting"): on the pinned move's world (`dco_tests::pinned_move`: two dco-operator
//! replicas, a CRD with spoke v1 and hub v2, a config pinned to server `a`), server `a` is
//! force-deleted (`conversion.dco.rs/allow-force-delete=true`) while the target still names
//! its Service. The config must report `Applied=False` reason `WiredServerMissing` (phase
//! Failed) and a Warning Event naming the Service and the server, while every conversion of
//! the target fails. Then it recovers twice: `a` created again (the target is re-wired to it,
//! with its new CA), and, after a second force-delete, a re-pin to server `b` (a move whose
//! Event names the gone Service as its source, not "nothing"). Conversions work after each.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams};
use serde_json::json;

use dco_tests::pinned_move::{MANAGER, PinnedMove, REPLICAS, WAIT, handover, wired};
use dco_tests::{TestEnv, wait_for};

/// Waits until a read at `v1` of `w1` (a conversion: stored at v2) fails; returns the error.
async fn conversion_fails(v1: &Api<DynamicObject>) -> Result<String> {
    wait_for("a conversion of the target to fail", WAIT, || async {
        Ok(v1.get("w1").await.err().map(|e| e.to_string()))
    })
    .await
}

/// Waits until reads at v1 convert again; returns how long that took and checks the values.
async fn conversions_work(v1: &Api<DynamicObject>) -> Result<Duration> {
    let start = Instant::now();
    wait_for("conversions of the target to work", WAIT, || async {
        Ok(v1.get("w1").await.ok().filter(|o| o.data["spec"]["storageSize"] == json!(1)).map(|_| ()))
    })
    .await?;
    for i in 0..5 {
        let w = v1.get(&format!("w{i}")).await?;
        ensure!(w.data["spec"]["storageSize"] == json!(i), "w{i} at v1: {}", w.data);
    }
    Ok(start.elapsed())
}

#[tokio::test]
async fn a_force_deleted_wired_server_is_reported_and_the_config_recovers() -> Result<()> {
    let env = TestEnv::new("wsg").await?;
    let mv = PinnedMove::prepare(&env).await?;
    let _operators = dco_tests::start_operators(&env, &mv.selector, &REPLICAS, &["--resync", "60s"])?;
    mv.settle_on_a().await?;
    // b now, so it is ready by the time the second recovery needs it.
    mv.apply_server(&mv.b).await?;
    let (a, b, ns) = (mv.a.clone(), mv.b.clone(), env.ns.clone());

    let gvk = |v: &str| GroupVersionKind::gvk(&mv.group, v, "Widget");
    let ar = |v: &str| ApiResource::from_gvk_with_plural(&gvk(v), "widgets");
    let v1: Api<DynamicObject> = Api::namespaced_with(env.client.clone(), &ns, &ar("v1"));
    for i in 0..5 {
        let name = format!("w{i}");
        let obj = json!({"apiVersion": format!("{}/v1", mv.group), "kind": "Widget", "metadata": {"name": name},
            "spec": {"storageSize": i, "owner": "wsg"}});
        v1.patch(&name, &PatchParams::apply(&MANAGER), &Patch::Apply(&obj)).await.context("writing at v1")?;
    }
    conversions_work(&v1).await?;

    // 1. The pinned server is force-deleted under its target.
    let service = format!("{ns}/dco-webhook-{a}");
    let gone = format!("Service {service} (of ConversionWebhookServer {a}, which no longer exists)");
    let started = Instant::now();
    mv.force_delete(&a).await?;
    let deleted = started.elapsed();
    let (_, _, applied) = wait_for("Applied=False WiredServerMissing", WAIT, || async {
        Ok(mv.condition("Applied").await?.filter(|(s, r, _)| s == "False" && r == "WiredServerMissing"))
    })
    .await?;
    let reported = started.elapsed();
    let want = format!(
        "CustomResourceDefinition {}'s spec.conversion names {gone}, so every conversion of the target fails; spec.webhookServerRef.name names ConversionWebhookServer {a:?}, which does not exist; create it or change the reference",
        mv.target
    );
    ensure!(applied == want, "Applied says {applied:?}, want {want:?}");
    let cfg = mv.cfgs.get(&mv.config).await?;
    ensure!(handover(&cfg).0 == "Failed", "phase {:?}, want Failed", handover(&cfg));
    ensure!(
        cfg.status.as_ref().and_then(|s| s.message.as_deref()) == Some(want.as_str()),
        "{:?}",
        cfg.status
    );
    let ready = mv.condition("HandoverReady").await?.unwrap_or_default();
    ensure!(
        ready.0 == "False" && ready.1 == "WiredServerMissing" && ready.2.contains(&gone),
        "HandoverReady {ready:?}"
    );
    let note = mv.wait_event(&env.client, "Warning", "WiredServerMissing").await?;
    ensure!(
        note == format!(
            "the target's spec.conversion names {gone}: every conversion of the target fails until it is wired to a server that exists"
        ),
        "Warning Event: {note:?}"
    );
    let crd = mv.crds.get(&mv.target).await?;
    ensure!(
        wired(&crd) == Some((ns.clone(), format!("dco-webhook-{a}"))),
        "the CRD is wired to {:?}",
        wired(&crd)
    );
    let failure = conversion_fails(&v1).await?;
    let describe = mv.describe(&env.cluster)?;
    eprintln!(
        "server {a} gone {deleted:?} after the delete, reported {reported:?} after it; a read at v1 fails: {failure}\n{describe}"
    );
    for want in ["WiredServerMissing", "Failed", &format!("Service {service}")] {
        ensure!(describe.contains(want), "kubectl describe does not show {want:?}");
    }

    // 2. The server created again: the target names it again and is re-wired (its CA is new).
    let started = Instant::now();
    mv.apply_server(&a).await?;
    mv.wait_settled(&a).await?;
    let recovered = started.elapsed();
    let working = conversions_work(&v1).await?;
    let ready = mv.condition("HandoverReady").await?.unwrap_or_default();
    ensure!(ready.0 == "True", "HandoverReady {ready:?}");
    let applied = mv.condition("Applied").await?.unwrap_or_default();
    ensure!(applied.0 == "True" && applied.1 == "Wired", "Applied {applied:?}");
    let notes = mv.events(&env.client).await?;
    let rewire = format!("re-wiring the target to server {a}, which its spec.conversion names already");
    ensure!(
        notes.iter().any(|(_, r, n)| r == "HandoverStarted" && *n == rewire),
        "no {rewire:?} in {notes:#?}"
    );
    eprintln!(
        "server {a} created again: settled {recovered:?} later, reads at v1 worked {working:?} after that"
    );

    // 3. Gone again, and the config re-pinned to b: a move from the gone Service to b.
    mv.wait_server_reporting(&b, 2).await?;
    let started = Instant::now();
    mv.force_delete(&a).await?;
    wait_for("Applied=False WiredServerMissing again", WAIT, || async {
        Ok(mv.condition("Applied").await?.filter(|(s, r, _)| s == "False" && r == "WiredServerMissing"))
    })
    .await?;
    let reported_again = started.elapsed();
    let warnings = mv.events(&env.client).await?;
    let warnings = warnings.iter().filter(|(t, r, _)| t == "Warning" && r == "WiredServerMissing").count();
    ensure!(warnings == 2, "want one WiredServerMissing Warning per loss, saw {warnings}");
    let started = Instant::now();
    mv.pin(&b).await?;
    mv.wait_settled(&b).await?;
    let moved = started.elapsed();
    let working_b = conversions_work(&v1).await?;
    let notes = mv.events(&env.client).await?;
    let from_gone = format!("moving the target from {gone} to server {b}");
    ensure!(
        notes.iter().any(|(_, r, n)| r == "HandoverStarted" && *n == from_gone),
        "no {from_gone:?} in {notes:#?}"
    );
    ensure!(
        !notes.iter().any(|(_, _, n)| n.contains("from nothing")),
        "an Event says 'from nothing': {notes:#?}"
    );
    eprintln!(
        "second loss reported {reported_again:?} after the delete; re-pinned to {b}: settled {moved:?} later, reads at v1 worked {working_b:?} after that"
    );
    eprintln!("{}", mv.describe(&env.cluster)?);

    mv.delete_config_and_wait_revert().await?;
    mv.cleanup().await;
    env.cleanup().await;
    Ok(())
}
