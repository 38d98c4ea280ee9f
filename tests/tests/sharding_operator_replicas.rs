//! Two dco-operator replicas on the local cluster divide their work by shard Leases
//! (docs/sharding.md): each holds half of the shard Leases, every config is reconciled (its status
//! is of its generation) by exactly one of them (the shard gate's counts by shard,
//! `dco_operator_shard_reconciles_total`, never both in one shard), a replica killed with SIGKILL
//! has its shards taken by the other (the wait allows the lease duration plus a renew interval plus
//! 10 s; the time is printed), after which the survivor reconciles every config, and a replica
//! stopped with SIGTERM frees its shard Leases.
//!
//! Needs `target/debug/dco-operator` (`cargo build -p dco-operator`). The replicas run as local
//! processes with `--replica-id`, scoped by `--selector` to this test's configs, their Leases in
//! the test's namespace; the configs name no existing CRD, which is still a reconcile that
//! writes status.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::Result;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use dco_tests::operator_process::OperatorProcess;
use dco_tests::{TestEnv, wait_for};

const CONFIGS: usize = 20;
const SHARDS: usize = 32;
const LEASE_DURATION_S: u64 = 9;
const RENEW_S: u64 = 2;

type Replica = OperatorProcess;

fn start(env: &TestEnv, selector: &str, id: &str) -> Result<Replica> {
    let (lease, renew, shards) = (format!("{LEASE_DURATION_S}s"), format!("{RENEW_S}s"), SHARDS.to_string());
    let args = [
        "--lease-duration",
        &lease,
        "--lease-renew-interval",
        &renew,
        "--shards",
        &shards,
        "--resync",
        "300s",
    ];
    OperatorProcess::start(env, selector, id, &args, &[])
}

/// The shards in which a replica's gate let a config reconcile through since `before` (its
/// counts then).
async fn reconciled_shards(r: &Replica, before: &BTreeMap<u32, u64>) -> Result<BTreeSet<u32>> {
    let now = dco_tests::shard_reconciles(&r.metrics, "crdconversionconfig").await?;
    Ok(now.into_iter().filter(|(s, n)| *n > before.get(s).copied().unwrap_or(0)).map(|(s, _)| s).collect())
}

/// Waits until every config's status is of its current generation: each was reconciled since
/// it last changed.
async fn wait_all_reconciled(
    cccs: &Api<dco_api::CRDConversionConfig>,
    selector: &str,
    names: &BTreeSet<String>,
    what: &str,
) -> Result<()> {
    wait_for(what, Duration::from_secs(60), || async {
        let mut done = 0;
        for c in cccs.list(&ListParams::default().labels(selector)).await?.items {
            let current = c.metadata.generation.is_some()
                && c.status.as_ref().and_then(|s| s.observed_generation) == c.metadata.generation;
            if current && c.metadata.name.as_ref().is_some_and(|n| names.contains(n)) {
                done += 1;
            }
        }
        Ok((done == names.len()).then_some(()))
    })
    .await
}

/// Shard Lease holders: replica id → number of shards held ("" for those freed).
async fn holders(leases: &Api<Lease>) -> Result<std::collections::BTreeMap<String, usize>> {
    let mut out = std::collections::BTreeMap::new();
    for h in dco_tests::shard_holders(leases).await?.into_values() {
        *out.entry(h.holder).or_insert(0) += 1;
    }
    Ok(out)
}

#[tokio::test]
async fn two_replicas_divide_the_configs_and_the_survivor_takes_over() -> Result<()> {
    let t = TestEnv::new("shards").await?;
    let client = t.client.clone();
    let selector = format!("dco-shards-test={}", t.ns);
    let crds: Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    > = Api::all(client.clone());
    for crd in dco_api::crds() {
        let name = crd.metadata.name.clone().unwrap_or_default();
        crds.patch(&name, &PatchParams::apply("dco-shards-test").force(), &Patch::Apply(&crd)).await?;
    }
    let cccs: Api<dco_api::CRDConversionConfig> = Api::all(client.clone());
    wait_for("the dco CRDs to be served", Duration::from_secs(30), || async {
        Ok(cccs.list(&ListParams::default().limit(1)).await.ok().map(|_| ()))
    })
    .await?;
    let leases: Api<Lease> = t.api();

    let a = start(&t, &selector, "op-a")?;
    let mut b = start(&t, &selector, "op-b")?;
    wait_for("the two replicas to hold half of the shards each", Duration::from_secs(60), || async {
        let h = holders(&leases).await?;
        Ok((h.get("op-a") == Some(&(SHARDS / 2)) && h.get("op-b") == Some(&(SHARDS / 2))).then_some(()))
    })
    .await?;

    // Each change of a replica's shards is an Event on its member Lease (`kubectl describe
    // lease dco-operator-member-op-a`).
    let events: Api<k8s_openapi::api::events::v1::Event> = t.api();
    wait_for("a ShardsChanged Event on each member Lease", Duration::from_secs(30), || async {
        let list = events.list(&ListParams::default()).await?;
        let on = |id: &str| {
            list.items.iter().any(|e| {
                e.reason.as_deref() == Some("ShardsChanged")
                    // `dco-operator[-<hash of --selector>]-member-<id>` (operator/src/sharding/leases.rs `LeaseNames`)
                    && e.regarding
                        .as_ref()
                        .and_then(|r| r.name.as_deref())
                        .is_some_and(|n| n.starts_with("dco-operator-") && n.ends_with(&format!("-member-{id}")))
                    && e.note.as_deref().is_some_and(|n| n.contains(&format!("of {SHARDS} shards")))
            })
        };
        Ok((on("op-a") && on("op-b")).then_some(()))
    })
    .await?;

    let names: Vec<String> = (0..CONFIGS).map(|i| format!("{}-c{i}", t.ns)).collect();
    let apply_all = |stamp: String| {
        let cccs = cccs.clone();
        let names = names.clone();
        let (ns, selector) = (t.ns.clone(), selector.clone());
        async move {
            let (k, v) = selector.split_once('=').unwrap_or_default();
            for (i, name) in names.iter().enumerate() {
                let mut cfg = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
                    "metadata": {"name": name, "labels": {k: v}, "annotations": {"dco-shards-test/stamp": stamp}},
                    "spec": {"targetCRD": {"name": format!("widgets.g{i}.{ns}.shards.dco.rs")}, "hubVersion": "v2",
                        "spokes": [{"version": "v1", "rules": []}]}});
                // A later stamp changes the spec too (a drift policy, moot without a target),
                // so that its reconcile shows in the status: `observedGeneration`.
                if stamp != "1" {
                    cfg["spec"]["driftPolicy"] = json!("FailClosed");
                }
                cccs.patch(name, &PatchParams::apply("dco-shards-test").force(), &Patch::Apply(&cfg)).await?;
            }
            anyhow::Ok(())
        }
    };
    let all: BTreeSet<String> = names.iter().cloned().collect();
    // Who reconciled: each replica's gate counts by shard (its metrics), before and after.
    let before_a = dco_tests::shard_reconciles(&a.metrics, "crdconversionconfig").await?;
    let before_b = dco_tests::shard_reconciles(&b.metrics, "crdconversionconfig").await?;
    apply_all("1".into()).await?;
    wait_all_reconciled(&cccs, &selector, &all, "every config to be reconciled").await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (by_a, by_b) = (reconciled_shards(&a, &before_a).await?, reconciled_shards(&b, &before_b).await?);
    let both: Vec<&u32> = by_a.intersection(&by_b).collect();
    eprintln!(
        "op-a reconciled configs in {} shards, op-b in {}, both in {}",
        by_a.len(),
        by_b.len(),
        both.len()
    );
    assert!(both.is_empty(), "shards whose configs both replicas reconciled: {both:?}");
    assert!(!by_a.is_empty() && !by_b.is_empty(), "each replica reconciles its share");

    // SIGKILL op-b: op-a takes its shards within the lease duration plus a renew interval.
    b.child.kill()?;
    let _ = b.child.wait();
    let killed = std::time::Instant::now();
    wait_for("op-a to own every shard", Duration::from_secs(LEASE_DURATION_S + RENEW_S + 10), || async {
        Ok((dco_tests::metric(&a.metrics, "dco_operator_owned_shards").await? == Some(SHARDS as f64))
            .then_some(()))
    })
    .await?;
    // The bound the wait allows is generous (a loaded machine); the time itself is reported.
    eprintln!("op-a owned every shard {:?} after op-b was killed", killed.elapsed());
    // op-b is gone: what reconciles the change is op-a.
    apply_all("2".into()).await?;
    wait_all_reconciled(&cccs, &selector, &all, "the survivor to reconcile every config").await?;

    // SIGTERM: the replica frees its shard Leases on the way out.
    let pid = a.child.id();
    dco_tests::signal(pid, "TERM")?;
    wait_for("op-a to free its shard Leases on SIGTERM", Duration::from_secs(20), || async {
        let h = holders(&leases).await?;
        Ok((h.get("").copied() == Some(SHARDS)).then_some(()))
    })
    .await?;
    drop(a);

    // The configs name no CRD: their safe-revert finalizer has nothing to revert, but no
    // operator runs any more, so drop it.
    for name in &names {
        let _ = cccs
            .patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
            .await;
        let _ = cccs.delete(name, &Default::default()).await;
    }
    t.cleanup().await;
    Ok(())
}
