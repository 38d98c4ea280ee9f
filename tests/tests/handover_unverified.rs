//! Moves onto servers whose served-target Leases cannot vouch for them (docs/operations.md,
//! "How a target is wired and moved"), on the pinned move's world (`dco_tests::pinned_move`:
//! two dco-operator replicas, a CRD with spoke v1 and hub v2, a config settled on server `a`).
//!
//! Servers `b` and `c` (2 replicas each) first publish their Leases as usual; then a
//! ValidatingAdmissionPolicy refuses every Lease write of their webhook ServiceAccounts — as
//! replicas without their Lease Role would be — and their Leases are deleted, so they publish
//! none while every replica stays Ready (a replica is Ready once it published once).
//!
//! 1. Pinned to `b`, which publishes no Leases: the move proceeds (all of b's replicas are
//!    Ready), `HandoverReady=True` reason `HandoverUnverified`, and its `DestinationReady`
//!    Event is a Warning saying what was not verified. Conversions work through `b`.
//! 2. Pinned to `c`, whose Leases the test writes by hand — first with a served-target set that
//!    cannot be decoded, then with the truncated marker (c's replicas cannot overwrite them):
//!    the move waits in `Compiling` with `HandoverReady=False` `AwaitingDestination` naming the
//!    Lease and why, and the target stays wired to `b`. Once those Leases are deleted, `c`
//!    publishes none and the move proceeds unverified, its source `b` assumed dropped.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::{
    ANNOTATION_SERVED_TARGETS, ANNOTATION_SERVED_TRUNCATED, LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY,
};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::json;

use dco_tests::pinned_move::{MANAGER, PinnedMove, REPLICAS, WAIT, handover, wired};
use dco_tests::{ClusterScoped, TestEnv, ar, wait_for};

/// The Leases of `server`'s replicas in `ns`.
async fn leases_of(leases: &Api<Lease>, server: &str) -> Result<Vec<Lease>> {
    Ok(leases.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?.items)
}

/// Refuses every Lease write in `ns` by the webhook ServiceAccounts of `servers`; returns the
/// guard that deletes the policy and its binding.
async fn forbid_lease_writes(env: &TestEnv, servers: &[&str]) -> Result<ClusterScoped> {
    let name = format!("{}-no-served-leases", env.ns);
    let users: Vec<String> =
        servers.iter().map(|s| format!("'system:serviceaccount:{}:dco-webhook-{s}'", env.ns)).collect();
    let policy = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {
            "failurePolicy": "Fail",
            "matchConstraints": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": env.ns}},
                "resourceRules": [{"apiGroups": ["coordination.k8s.io"], "apiVersions": ["*"],
                    "operations": ["CREATE", "UPDATE"], "resources": ["leases"]}],
            },
            "validations": [{
                "expression": format!("!(request.userInfo.username in [{}])", users.join(", ")),
                "message": "this webhook replica may not write Leases (a test of servers that publish none)",
            }],
        },
    });
    let binding = json!({
        "apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]},
    });
    let guard = ClusterScoped(vec![
        (ar::<ValidatingAdmissionPolicyBinding>(), name.clone()),
        (ar::<ValidatingAdmissionPolicy>(), name.clone()),
    ]);
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(env.client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(env.client.clone());
    MANAGER.apply(&policies, &name, policy).await?;
    MANAGER.apply(&bindings, &name, binding).await?;
    Ok(guard)
}

/// Hand-written Leases for each of `server`'s Pods, live for an hour, with `annotations`.
async fn write_leases(
    leases: &Api<Lease>,
    pods: &Api<Pod>,
    server: &str,
    annotations: serde_json::Value,
) -> Result<Vec<String>> {
    let list = pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
    let mut names = Vec::new();
    for p in list.items.iter().filter(|p| p.metadata.deletion_timestamp.is_none()) {
        let pod = p.metadata.name.clone().context("a Pod without a name")?;
        let name = dco_api::served_lease_name(&pod);
        // A MicroTime, as the apiserver parses it (six fractional digits).
        let renew = serde_json::to_value(MicroTime(k8s_openapi::jiff::Timestamp::now()))?;
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "labels": {LABEL_INSTANCE: server, LABEL_MANAGED_BY: MANAGED_BY},
                "annotations": annotations},
            "spec": {"holderIdentity": pod, "leaseDurationSeconds": 3600, "renewTime": renew},
        });
        leases.patch(&name, &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&lease)).await?;
        names.push(name);
    }
    Ok(names)
}

/// Waits until reads at v1 (conversions: the objects are stored at v2) return every value.
async fn conversions_work(v1: &Api<DynamicObject>) -> Result<Duration> {
    let start = Instant::now();
    wait_for("conversions of the target to work", WAIT, || async {
        for i in 0..5 {
            match v1.get(&format!("w{i}")).await {
                Ok(w) if w.data["spec"]["storageSize"] == json!(i) => {}
                _ => return Ok(None),
            }
        }
        Ok(Some(()))
    })
    .await?;
    Ok(start.elapsed())
}

#[tokio::test]
async fn moves_onto_servers_whose_leases_say_nothing_or_cannot_be_read() -> Result<()> {
    let env = TestEnv::new("unv").await?;
    let mv = PinnedMove::prepare(&env).await?;
    let _operators = dco_tests::start_operators(&env, &mv.selector, &REPLICAS, &["--resync", "60s"])?;
    let ns = env.ns.clone();
    let (b, c) = (mv.b.clone(), format!("{ns}-c"));
    mv.settle_on_a().await?;
    mv.apply_server(&b).await?;
    mv.apply_server(&c).await?;
    mv.wait_server_reporting(&b, 2).await?;
    mv.wait_server_reporting(&c, 2).await?;

    let gvk = GroupVersionKind::gvk(&mv.group, "v1", "Widget");
    let v1: Api<DynamicObject> =
        Api::namespaced_with(env.client.clone(), &ns, &ApiResource::from_gvk_with_plural(&gvk, "widgets"));
    for i in 0..5 {
        let name = format!("w{i}");
        let obj = json!({"apiVersion": format!("{}/v1", mv.group), "kind": "Widget", "metadata": {"name": name},
            "spec": {"storageSize": i, "owner": "unv"}});
        v1.patch(&name, &PatchParams::apply(&MANAGER), &Patch::Apply(&obj)).await.context("writing at v1")?;
    }
    conversions_work(&v1).await?;

    // b's and c's replicas can no longer write Leases; theirs go. A policy takes a moment to
    // be enforced, so the Leases are deleted until none has come back for three renewals
    // (start_operators runs the webhooks with --lease-renew-interval=5s).
    let _policy = forbid_lease_writes(&env, &[&b, &c]).await?;
    let leases: Api<Lease> = Api::namespaced(env.client.clone(), &ns);
    let pods: Api<Pod> = Api::namespaced(env.client.clone(), &ns);
    let silenced = Instant::now();
    let mut quiet = false;
    for _ in 0..8 {
        for s in [&b, &c] {
            for l in leases_of(&leases, s).await? {
                let _ = leases.delete(&l.metadata.name.unwrap_or_default(), &DeleteParams::default()).await;
            }
        }
        tokio::time::sleep(Duration::from_secs(16)).await;
        if leases_of(&leases, &b).await?.is_empty() && leases_of(&leases, &c).await?.is_empty() {
            quiet = true;
            break;
        }
    }
    ensure!(quiet, "b's or c's replicas still publish Leases {:?} after the policy", silenced.elapsed());
    for s in [&b, &c] {
        wait_for(&format!("{s} reported by no Lease, with 2 Ready replicas"), WAIT, || async {
            let st = mv.servers.get(s).await?.status.unwrap_or_default();
            Ok((st.reporting_replicas == 0 && st.ready_replicas == 2).then_some(()))
        })
        .await?;
    }
    eprintln!("b and c publish no Leases ({:?} after the policy)", silenced.elapsed());

    // 1. Onto b, which publishes none: proceeds unverified, and says so.
    let started = Instant::now();
    mv.pin(&b).await?;
    mv.wait_settled(&b).await?;
    let onto_b = started.elapsed();
    let working_b = conversions_work(&v1).await?;
    let ready = mv.condition("HandoverReady").await?.unwrap_or_default();
    let want = format!("served by server {b}; the move was not verified through served-target Leases");
    ensure!(
        (ready.0.as_str(), ready.1.as_str(), ready.2.as_str())
            == ("True", "HandoverUnverified", want.as_str()),
        "HandoverReady {ready:?}"
    );
    let note = mv.wait_event(&env.client, "Warning", "DestinationReady").await?;
    let want = format!(
        "server {b} publishes no served-target Leases (its Lease Role missing, or a webhook version that does not publish them): not verified that its replicas hold a compiled plan for the target; all 2 of its replicas are Ready, so wiring the target to it anyway (HandoverUnverified)"
    );
    ensure!(note == want, "the DestinationReady Warning says {note:?}, want {want:?}");
    eprintln!(
        "onto {b} unverified: settled {onto_b:?} after the pin, reads at v1 worked {working_b:?} after that"
    );

    // 2. Onto c, whose Leases cannot be read: the move waits, the target stays on b.
    let written =
        write_leases(&leases, &pods, &c, json!({ANNOTATION_SERVED_TARGETS: "%%% not base64"})).await?;
    ensure!(written.len() == 2, "wrote Leases {written:?} for c's Pods");
    wait_for("c's hand-written Leases in its status", WAIT, || async {
        let st = mv.servers.get(&c).await?.status.unwrap_or_default();
        Ok((st.reporting_replicas == 2 && st.served_targets_truncated).then_some(()))
    })
    .await?;
    let started = Instant::now();
    mv.pin(&c).await?;
    let undecodable =
        wait_for("HandoverReady=False AwaitingDestination (undecodable Lease)", WAIT, || async {
            Ok(mv.condition("HandoverReady").await?.filter(|(s, r, m)| {
                s == "False" && r == "AwaitingDestination" && m.contains("cannot be decoded")
            }))
        })
        .await?;
    let blocked_after = started.elapsed();
    let prefix = format!(
        "server {c}'s Leases cannot tell whether it serves the target, so the move waits: Lease {ns}/"
    );
    ensure!(undecodable.2.starts_with(&prefix), "HandoverReady says {:?}", undecodable.2);
    ensure!(
        undecodable
            .2
            .contains("cannot be decoded: annotation conversion.dco.rs/served-targets is not valid base64")
            && undecodable.2.ends_with("(and 1 more of its Leases cannot tell)"),
        "HandoverReady says {:?}",
        undecodable.2
    );
    // It stays blocked: a reconcile every 5 s while unsettled.
    tokio::time::sleep(Duration::from_secs(12)).await;
    let cfg = mv.cfgs.get(&mv.config).await?;
    ensure!(handover(&cfg).1 == "Compiling", "the move to c went on: {:?}", handover(&cfg));
    let crd = mv.crds.get(&mv.target).await?;
    ensure!(wired(&crd) == Some((ns.clone(), format!("dco-webhook-{b}"))), "wired to {:?}", wired(&crd));
    conversions_work(&v1).await?;
    let describe_blocked = mv.describe(&env.cluster)?;

    // The truncated marker instead of the set: blocked the same way, with its own reason.
    for name in &written {
        let patch = json!({"metadata": {"annotations": {ANNOTATION_SERVED_TARGETS: null, ANNOTATION_SERVED_TRUNCATED: "true"}}});
        leases.patch(name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    }
    let truncated = wait_for("HandoverReady=False AwaitingDestination (truncated Lease)", WAIT, || async {
        Ok(mv.condition("HandoverReady").await?.filter(|(s, r, m)| {
            s == "False" && r == "AwaitingDestination" && m.contains("is marked truncated")
        }))
    })
    .await?;
    ensure!(
        truncated.2.starts_with(&prefix)
            && truncated
                .2
                .contains("is marked truncated (its replica's set is over --served-targets-max-bytes)"),
        "HandoverReady says {:?}",
        truncated.2
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    let crd = mv.crds.get(&mv.target).await?;
    ensure!(wired(&crd) == Some((ns.clone(), format!("dco-webhook-{b}"))), "wired to {:?}", wired(&crd));
    ensure!(handover(&mv.cfgs.get(&mv.config).await?).1 == "Compiling", "the move to c went on");

    // Those Leases gone, c publishes none: the move proceeds unverified.
    let started = Instant::now();
    for name in &written {
        leases.delete(name, &DeleteParams::default()).await?;
    }
    mv.wait_settled(&c).await?;
    let onto_c = started.elapsed();
    let working_c = conversions_work(&v1).await?;
    let ready = mv.condition("HandoverReady").await?.unwrap_or_default();
    ensure!(ready.0 == "True" && ready.1 == "HandoverUnverified", "HandoverReady {ready:?}");
    let events = mv.events(&env.client).await?;
    let warned = events.iter().any(|(t, r, n)| {
        t == "Warning"
            && r == "DestinationReady"
            && n.starts_with(&format!("server {c} publishes no served-target Leases"))
    });
    ensure!(warned, "no DestinationReady Warning for {c}: {events:#?}");
    let dropped = format!(
        "server {b} publishes no served-target Leases: not verified that it dropped the target; assuming it did"
    );
    ensure!(
        events.iter().any(|(_, r, n)| r == "SourceDropped" && *n == dropped),
        "no {dropped:?} in {events:#?}"
    );
    eprintln!(
        "onto {c}: blocked {blocked_after:?} after the pin ({:?}), then truncated ({:?}); settled unverified {onto_c:?} after its Leases were deleted, reads at v1 worked {working_c:?} after that",
        undecodable.2, truncated.2
    );
    eprintln!("while blocked:\n{describe_blocked}\nsettled:\n{}", mv.describe(&env.cluster)?);

    mv.delete_config_and_wait_revert().await?;
    mv.remove_servers(&[&mv.a, &b, &c]).await;
    let _ = mv.crds.delete(&mv.target, &DeleteParams::default()).await;
    env.cleanup().await;
    Ok(())
}
