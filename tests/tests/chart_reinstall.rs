//! `helm uninstall` and `helm install` again into the same namespace, on the local cluster
//! (docs/sharding.md, "Leaving without RBAC"):
//!
//! * `reinstall_takes_the_shards_at_once_and_leaves_no_member_lease`: the chart with its own
//!   lease periods (30 s, 10 s). `helm uninstall` deletes the operator's RBAC together with its
//!   Deployment, so the stopping replicas can neither delete their member Leases nor free their
//!   shard Leases. The new release's replicas must reconcile the default server anyway within
//!   10 s of being Ready — not a lease duration later — and the member Leases of the gone Pods
//!   must go (they are the Pods' own: the garbage collector removes them), also after the last
//!   uninstall.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;

use dco_api::ConversionWebhookServer;
use dco_tests::chart::{helm, helm_install_dco};
use dco_tests::{TestEnv, pod_ready, wait_for};

const WAIT: Duration = Duration::from_secs(180);
const OPERATORS: &str = "app.kubernetes.io/name=dco-operator";
/// The bound: the new replicas act on the server within this long of being Ready.
const TAKEOVER: Duration = Duration::from_secs(10);

/// The generation of `name` once the operator has reconciled it (observedGeneration caught
/// up) and it is Available.
async fn reconciled(servers: &Api<ConversionWebhookServer>, name: &str) -> Result<Option<i64>> {
    let Some(s) = servers.get_opt(name).await? else { return Ok(None) };
    let generation = s.metadata.generation.unwrap_or_default();
    let st = s.status.unwrap_or_default();
    let available = st.conditions.iter().any(|c| c.type_ == "Available" && c.status == "True");
    Ok((available && st.observed_generation == Some(generation)).then_some(generation))
}

/// The member Leases in the namespace: (name, the Pod uid its ownerReference names).
async fn member_leases(leases: &Api<Lease>) -> Result<Vec<(String, Option<String>)>> {
    let list = leases.list(&ListParams::default().labels("sharding.dco.rs/role=member")).await?;
    Ok(list
        .items
        .into_iter()
        .map(|l| {
            let owner = l.metadata.owner_references.unwrap_or_default().into_iter().find(|o| o.kind == "Pod");
            (l.metadata.name.unwrap_or_default(), owner.map(|o| o.uid))
        })
        .collect())
}

/// The operator Pods that exist now: (name, uid), terminating ones included.
async fn operator_pods(pods: &Api<Pod>) -> Result<BTreeSet<(String, String)>> {
    Ok(pods
        .list(&ListParams::default().labels(OPERATORS))
        .await?
        .items
        .into_iter()
        .map(|p| (p.metadata.name.unwrap_or_default(), p.metadata.uid.unwrap_or_default()))
        .collect())
}

/// Member Leases whose Pod is gone (none named by an existing operator Pod's uid).
async fn orphans(leases: &Api<Lease>, pods: &Api<Pod>) -> Result<Vec<String>> {
    let uids: BTreeSet<String> = operator_pods(pods).await?.into_iter().map(|(_, uid)| uid).collect();
    Ok(member_leases(leases)
        .await?
        .into_iter()
        .filter(|(_, owner)| !owner.as_ref().is_some_and(|u| uids.contains(u)))
        .map(|(name, _)| name)
        .collect())
}

#[tokio::test]
async fn reinstall_takes_the_shards_at_once_and_leaves_no_member_lease() -> Result<()> {
    let t = TestEnv::new("dco-reinst").await?;
    let result = reinstall(&t).await;
    if result.is_err() {
        // The cluster is shared: leave no server, release or cluster-scoped RBAC behind.
        let server = format!("{}-default", t.ns);
        let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
        let _ = servers
            .patch(&server, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
            .await;
        let _ = servers.delete(&server, &DeleteParams::default()).await;
        let _ = helm(&t.cluster, &["uninstall", &t.ns, "--namespace", &t.ns, "--wait", "--timeout", "1m"]);
    }
    t.cleanup().await;
    result
}

async fn reinstall(t: &TestEnv) -> Result<()> {
    let ns = t.ns.clone();
    // Named after the namespace: cluster-scoped names of a failed run cannot stop the next.
    let release = ns.clone();
    let server = format!("{ns}-default");
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let pods: Api<Pod> = t.api();
    let leases: Api<Lease> = t.api();
    let values = json!({"defaultServer": {"name": server, "spec": {"replicas": 1}}});

    let started = Instant::now();
    helm_install_dco(t, &release, &values).await.context("the first helm install")?;
    let first = dco_tests::wait_ready_pods(&pods, OPERATORS, 2, WAIT).await?;
    wait_for("the default server to be reconciled and Available", WAIT, || reconciled(&servers, &server))
        .await?;
    eprintln!("installed; the default server Available {:?} after the start", started.elapsed());
    // Every replica's member Lease is owned by its Pod.
    let members = wait_for("a member Lease per operator Pod", WAIT, || async {
        let m = member_leases(&leases).await?;
        Ok((m.len() == 2).then_some(m))
    })
    .await?;
    let uids: BTreeSet<String> = first.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    for (name, owner) in &members {
        ensure!(
            owner.as_ref().is_some_and(|u| uids.contains(u)),
            "member Lease {name} is not owned by an operator Pod ({owner:?}; Pods {uids:?})"
        );
    }

    // Uninstall: the RBAC goes with the Deployment.
    let uninstalling = Instant::now();
    helm(&t.cluster, &["uninstall", &release, "--namespace", &ns, "--wait", "--timeout", "3m"])?;
    let uninstalled = Instant::now();
    eprintln!("helm uninstall returned after {:?}", uninstalled - uninstalling);
    // The kept server changes while no operator runs: its generation moves, and only a
    // replica of the new release can catch observedGeneration up.
    let before = servers.get_opt(&server).await?.context("the default server went with the release")?;
    servers
        .patch(
            &server,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"spec": {"service": {"annotations": {"dco-tests/changed": "between-installs"}}}}),
            ),
        )
        .await?;
    let changed = servers.get(&server).await?.metadata.generation.unwrap_or_default();
    ensure!(
        changed > before.metadata.generation.unwrap_or_default(),
        "the spec change did not move the generation ({changed})"
    );

    // Reinstall at once, timing the moment both new operator Pods are Ready.
    let old: BTreeSet<String> = first.iter().filter_map(|p| p.metadata.uid.clone()).collect();
    let watch_ready = {
        let pods = pods.clone();
        let old = old.clone();
        tokio::spawn(async move {
            loop {
                if let Ok(list) = pods.list(&ListParams::default().labels(OPERATORS)).await {
                    let ready = list
                        .items
                        .iter()
                        .filter(|p| !p.metadata.uid.as_ref().is_some_and(|u| old.contains(u)))
                        .filter(|p| p.metadata.deletion_timestamp.is_none() && pod_ready(p))
                        .count();
                    if ready >= 2 {
                        return Instant::now();
                    }
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    };
    helm_install_dco(t, &release, &values).await.context("helm install after the uninstall")?;
    let helm_returned = Instant::now();
    let ready_at = tokio::time::timeout(WAIT, watch_ready).await.context("new operator Pods Ready")??;
    let generation = wait_for("the reinstalled operator to reconcile the default server", WAIT, || async {
        Ok(reconciled(&servers, &server).await?.filter(|g| *g >= changed))
    })
    .await?;
    let available = Instant::now();
    let after_ready = available.saturating_duration_since(ready_at);
    eprintln!(
        "reinstall: helm returned {:?} after the uninstall; new operator Pods Ready at +{:?}; the default server reconciled (generation {generation}) and Available {after_ready:?} after the Pods were Ready, {:?} after helm returned",
        helm_returned - uninstalled,
        ready_at - uninstalled,
        available.saturating_duration_since(helm_returned),
    );
    ensure!(
        after_ready <= TAKEOVER,
        "the default server was reconciled {after_ready:?} after the new operator Pods were Ready (bound {TAKEOVER:?}): the old replicas' shard Leases were not taken at once"
    );
    // Every shard comes to a Pod of the new release. A shard of an old Pod that was still
    // stopping is takeable once that Pod is gone (the garbage collector then deletes its member
    // Lease), so the bound counts from the moment the last old Pod was gone.
    let mut old_gone_at: Option<Instant> = None;
    let deadline = Instant::now() + WAIT;
    let held_at = loop {
        let now = operator_pods(&pods).await?;
        if old_gone_at.is_none() && !now.iter().any(|(_, uid)| old.contains(uid)) {
            old_gone_at = Some(Instant::now());
        }
        let names: BTreeSet<&String> =
            now.iter().filter(|(_, uid)| !old.contains(uid)).map(|(n, _)| n).collect();
        let shards = leases.list(&ListParams::default().labels("sharding.dco.rs/role=shard")).await?.items;
        ensure!(shards.len() == 32, "{} shard Leases", shards.len());
        let foreign: Vec<(String, String)> = shards
            .iter()
            .map(|l| {
                let holder = l.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
                (l.metadata.name.clone().unwrap_or_default(), holder)
            })
            .filter(|(_, holder)| !names.contains(holder))
            .collect();
        if foreign.is_empty() {
            break Instant::now();
        }
        ensure!(
            Instant::now() < deadline,
            "after {WAIT:?} shard Leases are still held by Pods not of the new release ({names:?}): {foreign:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let old_gone_at = old_gone_at.unwrap_or(held_at);
    let after_gone = held_at.saturating_duration_since(old_gone_at);
    eprintln!(
        "the old Pods were gone {:?} after helm uninstall returned; every shard held by a new Pod {after_gone:?} after that",
        old_gone_at - uninstalled
    );
    ensure!(
        after_gone <= TAKEOVER,
        "the shards of the uninstalled Pods were taken {after_gone:?} after the last of them was gone (bound {TAKEOVER:?})"
    );

    // No member Lease of a gone Pod remains.
    wait_for("the member Leases of the uninstalled Pods to go", WAIT, || async {
        Ok(orphans(&leases, &pods).await?.is_empty().then_some(()))
    })
    .await?;
    eprintln!(
        "the old Pods' member Leases were gone {:?} after helm uninstall returned; {} member Leases now",
        uninstalled.elapsed(),
        member_leases(&leases).await?.len()
    );

    // The end: the server first (its workload goes with it), then the release; then no
    // member Lease is left at all.
    servers
        .patch(
            &server,
            &PatchParams::default(),
            &Patch::Merge(
                json!({"metadata": {"annotations": {dco_api::ANNOTATION_ALLOW_FORCE_DELETE: "true"}}}),
            ),
        )
        .await?;
    servers.delete(&server, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&servers, &server, WAIT).await?;
    helm(&t.cluster, &["uninstall", &release, "--namespace", &ns, "--wait", "--timeout", "3m"])?;
    let last = Instant::now();
    wait_for("no member Lease after the last uninstall", WAIT, || async {
        Ok(member_leases(&leases).await?.is_empty().then_some(()))
    })
    .await?;
    eprintln!(
        "after the last helm uninstall no member Lease was left {:?} after it returned",
        last.elapsed()
    );
    Ok(())
}
