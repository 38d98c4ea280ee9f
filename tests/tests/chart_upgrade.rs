//! `helm upgrade` of charts/dco under load, on the local cluster (docs/installation.md,
//! "Upgrading"): the chart installed with 2 operator replicas and the default server of 2
//! webhook replicas, a target wired to it whose config renames a field (v1 `spec.sizeGB` ↔
//! v2 `spec.size.gb`, storage v2). While a load client writes and reads at v1 every 20 ms
//! (tests/src/load.rs: every read converted by the webhook, every value checked), `helm
//! upgrade` moves both images to a new tag — mapped to copies of the binaries, another file as
//! a rebuilt binary is — and changes values of the operator (RUST_LOG, --resync) and of the
//! webhook (its args), so every operator Pod and every webhook Pod is replaced by a rolling
//! update. Then every Pod runs the new tag from the copied binary, no old Pod is left, and no
//! request failed or read a wrong value. A further `helm upgrade` of a copy of the chart with
//! a changed CRD reaches the cluster through the chart's pre-upgrade Job (that CRD's
//! generation +1, the others unchanged), still under the same load. Before that, `helm
//! rollback` to the install's revision and back to the upgrade's replaces every Pod twice more,
//! again without a failed request.
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`, and helm
//! (`hack/testenv up` without `DCO_TESTENV_HELM=0`).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, LABEL_INSTANCE};
use dco_tests::chart::{
    chart_dir, copy_dir, helm, helm_install_dco, helm_install_dco_from, release_label, restore_crd,
    widget_config, widget_crd, widget_spec,
};
use dco_tests::load::{Load, Target};
use dco_tests::{Manager, TestEnv, container_pid, map_image, pod_ready, wait_for, workspace_binary};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const MANAGER: Manager = Manager("dco-e2e-chart-upgrade");
const WAIT: Duration = Duration::from_secs(180);
/// The chart's tags are v<appVersion> (charts/dco/Chart.yaml); the upgrade's is another.
const NEW_TAG: &str = "v0.2.0-upgrade";
const OPERATORS: &str = "app.kubernetes.io/name=dco-operator";

/// A Pod of the release as the test sees it: name, uid, image, the executable of its
/// container's process.
#[derive(Debug, Clone)]
struct Running {
    name: String,
    uid: String,
    image: String,
    exe: Option<PathBuf>,
}

/// `name image exe` of each, for the log.
fn summary(pods: &[Running]) -> Vec<String> {
    pods.iter()
        .map(|r| format!("{} {} {:?}", r.name, r.image, r.exe.as_deref().unwrap_or(Path::new("?"))))
        .collect()
}

fn running(p: &Pod, container: &str) -> Running {
    let spec = p.spec.clone().unwrap_or_default();
    let image = spec.containers.iter().find(|c| c.name == container).and_then(|c| c.image.clone());
    Running {
        name: p.metadata.name.clone().unwrap_or_default(),
        uid: p.metadata.uid.clone().unwrap_or_default(),
        image: image.unwrap_or_default(),
        exe: container_pid(p, container).and_then(|pid| std::fs::read_link(format!("/proc/{pid}/exe")).ok()),
    }
}

/// The Pods matching `selector`, terminating ones included.
async fn pods_of(pods: &Api<Pod>, selector: &str, container: &str) -> Result<Vec<(Running, bool)>> {
    let list = pods.list(&ListParams::default().labels(selector)).await?;
    Ok(list
        .items
        .iter()
        .map(|p| (running(p, container), pod_ready(p) && p.metadata.deletion_timestamp.is_none()))
        .collect())
}

/// Waits until exactly `n` Pods match `selector`, all Ready, all running `image` from `exe`.
async fn wait_rolled(
    pods: &Api<Pod>,
    selector: &str,
    container: &str,
    n: usize,
    image: &str,
    exe: &Path,
) -> Result<Vec<Running>> {
    wait_for(&format!("{n} Ready Pods of {selector} on {image}"), WAIT, || async {
        let now = pods_of(pods, selector, container).await?;
        let done = now.len() == n
            && now.iter().all(|(r, ready)| *ready && r.image == image && r.exe.as_deref() == Some(exe));
        Ok(done.then(|| now.into_iter().map(|(r, _)| r).collect()))
    })
    .await
}

/// Where the test puts the copied binaries and the changed chart.
fn upgrade_dir(t: &TestEnv) -> PathBuf {
    t.cluster.dir.join("tmp").join(format!("upgrade-{}", t.ns))
}

/// Copies `target/debug/<name>` to `dir/<name>` and maps `<name>:<tag>` to the copy.
fn rebuilt(name: &str, dir: &Path, tag: &str) -> Result<PathBuf> {
    let copy = dir.join(name);
    std::fs::copy(workspace_binary(name)?, &copy).with_context(|| format!("copying {name}"))?;
    map_image(&format!("{name}:{tag}"), &copy)?;
    Ok(copy)
}

fn args_of(d: &Deployment) -> Vec<String> {
    d.spec.template.spec.as_ref().map_or_else(Vec::new, |s| s.containers[0].args.clone().unwrap_or_default())
}

fn env_of(d: &Deployment, name: &str) -> Option<String> {
    let spec = d.spec.template.spec.as_ref()?;
    spec.containers[0].env.as_ref()?.iter().find(|e| e.name == name)?.value.clone()
}

#[tokio::test]
async fn helm_upgrade_under_load_rolls_every_pod_without_a_failed_request() -> Result<()> {
    let t = TestEnv::new("chartupg").await?;
    let result = scenario(&t).await;
    let removed = remove(&t).await;
    // The copied binaries (190 MB) and the chart copy; their processes are gone with the Pods.
    let _ = std::fs::remove_dir_all(upgrade_dir(&t));
    t.cleanup().await;
    result?;
    removed.context("removing the release, the server, the config and the target")
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    let label = release_label(t);
    // Names of this run's own (cluster-scoped: ClusterRoles, the default server).
    let suffix = ns.rsplit('-').next().unwrap_or("run").to_string();
    let release = format!("dco-upg-{suffix}");
    let server = format!("{ns}-default");
    let workload = format!("dco-webhook-{server}");
    let webhooks = format!("{LABEL_INSTANCE}={server}");
    let group = format!("{ns}.upgrade.example");
    let target = format!("widgets.{group}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let configs: Api<CRDConversionConfig> = Api::all(client.clone());
    let pods: Api<Pod> = t.api();
    let deployments: Api<Deployment> = t.api();
    let leases: Api<Lease> = t.api();

    // Install: 2 operator replicas, the default server with 2 replicas (the chart's defaults).
    let values = json!({"replicaCount": 2, "defaultServer": {"name": server, "spec": {"replicas": 2}},
        "webhook": {"args": ["--drain-period=5s"]}});
    let started = Instant::now();
    helm_install_dco(t, &release, &values).await.context("helm install")?;
    wait_for("the default server to be Available with 2 ready replicas", WAIT, || async {
        let st = servers.get(&server).await?.status.unwrap_or_default();
        let available = st.conditions.iter().any(|c| c.type_ == "Available" && c.status == "True");
        Ok((available && st.ready_replicas == 2).then_some(()))
    })
    .await?;
    eprintln!("installed: default server Available after {:?}", started.elapsed());

    // The target, wired to the default server.
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
    let target_generation = crds.get(&target).await?.metadata.generation;

    let old_operators: Vec<Running> =
        pods_of(&pods, OPERATORS, "operator").await?.into_iter().map(|(r, _)| r).collect();
    let old_webhooks: Vec<Running> =
        pods_of(&pods, &webhooks, "webhook").await?.into_iter().map(|(r, _)| r).collect();
    ensure!(old_operators.len() == 2 && old_webhooks.len() == 2, "{old_operators:?} {old_webhooks:?}");
    let old_workload_generation = deployments.get(&workload).await?.metadata.generation.unwrap_or(0);
    eprintln!(
        "before the upgrade: operators {:?}, webhooks {:?}",
        summary(&old_operators),
        summary(&old_webhooks)
    );

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
    // The load runs against the installed release first: it must already be clean.
    let before = load.wait_clean(100, WAIT, "before the upgrade").await?;

    // "Rebuilt" binaries: copies, so the new Pods run another file than the old ones.
    let dir = upgrade_dir(t);
    std::fs::create_dir_all(&dir)?;
    let (operator_exe, webhook_exe) =
        (rebuilt("dco-operator", &dir, NEW_TAG)?, rebuilt("dco-webhook", &dir, NEW_TAG)?);
    let upgraded = json!({"replicaCount": 2, "defaultServer": {"name": server, "spec": {"replicas": 2}},
        "image": {"tag": NEW_TAG}, "webhookImage": {"tag": NEW_TAG},
        "operator": {"logLevel": "info,kube_runtime=warn", "resync": "4m"},
        "webhook": {"args": ["--drain-period=6s"]}});
    let started = Instant::now();
    helm_install_dco(t, &release, &upgraded).await.context("helm upgrade to the new tag")?;
    let helm_returned = started.elapsed();
    let new_operators =
        wait_rolled(&pods, OPERATORS, "operator", 2, &format!("dco-operator:{NEW_TAG}"), &operator_exe)
            .await?;
    let operators_rolled = started.elapsed();
    // Every shard Lease is held by a new replica within a renew interval (10 s) of the old
    // replicas being gone: a stopping replica leaves (its member Lease deleted, its shard Leases
    // freed, operator/src/sharding/leases.rs `free_all`), so no shard waits out the 30 s lease
    // duration without an owner.
    let new_ids: BTreeSet<String> =
        pods_of(&pods, OPERATORS, "operator").await?.into_iter().map(|(r, _)| r.name).collect();
    let shards_moved = wait_for("every shard Lease held by a new operator replica", WAIT, || async {
        let leases = leases.list(&ListParams::default().labels("sharding.dco.rs/role=shard")).await?;
        let holders: Vec<Option<String>> =
            leases.items.iter().map(|l| l.spec.as_ref().and_then(|s| s.holder_identity.clone())).collect();
        let all =
            holders.len() == 32 && holders.iter().all(|h| h.as_ref().is_some_and(|h| new_ids.contains(h)));
        Ok(all.then(|| started.elapsed()))
    })
    .await?;
    let new_webhooks =
        wait_rolled(&pods, &webhooks, "webhook", 2, &format!("dco-webhook:{NEW_TAG}"), &webhook_exe).await?;
    let rolled = started.elapsed();
    // A few seconds more: the last old Pod's drain and the apiserver's switch to the new
    // endpoints are behind us.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let roll = load.tally() - before;
    eprintln!(
        "helm upgrade returned after {helm_returned:?}; operators rolled after {operators_rolled:?}, all 32 shards held by them after {shards_moved:?}, webhooks rolled after {rolled:?}; load meanwhile: {roll:?}"
    );
    ensure!(
        shards_moved < operators_rolled + Duration::from_secs(10),
        "the new replicas held every shard only {:?} after the old ones were gone: a shard waited for a lease to expire",
        shards_moved - operators_rolled
    );
    eprintln!(
        "after the upgrade: operators {:?}, webhooks {:?}",
        summary(&new_operators),
        summary(&new_webhooks)
    );
    let old_uids: BTreeSet<&str> =
        old_operators.iter().chain(&old_webhooks).map(|r| r.uid.as_str()).collect();
    ensure!(
        new_operators.iter().chain(&new_webhooks).all(|r| !old_uids.contains(r.uid.as_str())),
        "an old Pod is still there"
    );
    ensure!(
        old_operators.iter().chain(&old_webhooks).all(|r| r.exe.as_deref() != Some(operator_exe.as_path())
            && r.exe.as_deref() != Some(webhook_exe.as_path())),
        "the old Pods ran the copies already: {old_operators:?} {old_webhooks:?}"
    );
    // The values reached the Pods.
    let operator = deployments.get(&format!("{release}-operator")).await?;
    let (args, log) = (args_of(&operator), env_of(&operator, "RUST_LOG"));
    ensure!(
        args.contains(&"--resync=4m".to_string())
            && args.contains(&format!("--webhook-image=dco-webhook:{NEW_TAG}"))
            && args.contains(&"--webhook-arg=--drain-period=6s".to_string())
            && log.as_deref() == Some("info,kube_runtime=warn"),
        "the operator Deployment after the upgrade: {args:?} RUST_LOG={log:?}"
    );
    let webhook_deployment = deployments.get(&workload).await?;
    let webhook_args = args_of(&webhook_deployment);
    ensure!(
        webhook_args.contains(&"--drain-period=6s".to_string()),
        "the webhook Deployment after the upgrade: {webhook_args:?}"
    );
    let template_changes = webhook_deployment.metadata.generation.unwrap_or(0) - old_workload_generation;
    ensure!(roll.ok >= 100, "too little load during the roll: {roll:?}");
    ensure!(
        roll.failed == 0 && roll.wrong == 0,
        "the load during the roll: {roll:?}; first errors: {:?}",
        load.errors()
    );
    ensure!(
        crds.get(&target).await?.metadata.generation == target_generation,
        "the upgrade changed the target's spec"
    );
    eprintln!("the webhook Deployment's template changed {template_changes} time(s)");

    // helm rollback to the install (revision 1: the chart's own tags and the first values),
    // then to the upgrade (revision 2), under the same load: each replaces every operator and
    // webhook Pod again, and no request fails.
    let installed_binary = |name: &str| -> Result<PathBuf> {
        std::fs::canonicalize(workspace_binary(name)?).with_context(|| format!("target/debug/{name}"))
    };
    let (old_operator_image, old_webhook_image) =
        (old_operators[0].image.clone(), old_webhooks[0].image.clone());
    let steps = [
        (
            "1",
            old_operator_image,
            installed_binary("dco-operator")?,
            old_webhook_image,
            installed_binary("dco-webhook")?,
        ),
        (
            "2",
            format!("dco-operator:{NEW_TAG}"),
            operator_exe.clone(),
            format!("dco-webhook:{NEW_TAG}"),
            webhook_exe.clone(),
        ),
    ];
    for (revision, operator_image, operator_bin, webhook_image, webhook_bin) in steps {
        let mark = load.tally();
        let started = Instant::now();
        let (cluster, r, n, rev) = (t.cluster.clone(), release.clone(), ns.clone(), revision.to_string());
        tokio::task::spawn_blocking(move || {
            helm(
                &cluster,
                &["rollback", &r, &rev, "--namespace", &n, "--wait", "--wait-for-jobs", "--timeout", "5m"],
            )
        })
        .await?
        .with_context(|| format!("helm rollback to revision {revision}"))?;
        let helm_returned = started.elapsed();
        let operators = wait_rolled(&pods, OPERATORS, "operator", 2, &operator_image, &operator_bin).await?;
        let operators_rolled = started.elapsed();
        let webhooks_now = wait_rolled(&pods, &webhooks, "webhook", 2, &webhook_image, &webhook_bin).await?;
        let rolled = started.elapsed();
        tokio::time::sleep(Duration::from_secs(3)).await;
        let during = load.tally() - mark;
        eprintln!(
            "helm rollback to revision {revision} returned after {helm_returned:?}; operators on {operator_image} after {operators_rolled:?}, webhooks on {webhook_image} after {rolled:?}; load meanwhile {during:?}; now {:?} {:?}",
            summary(&operators),
            summary(&webhooks_now)
        );
        ensure!(during.ok >= 100, "too little load during the rollback to {revision}: {during:?}");
        ensure!(
            during.failed == 0 && during.wrong == 0,
            "the load during the rollback to revision {revision}: {during:?}; first errors: {:?}",
            load.errors()
        );
    }
    ensure!(
        crds.get(&target).await?.metadata.generation == target_generation,
        "a rollback changed the target's spec"
    );

    // A CRD change in a copy of the chart: a printer column on the CRDConversionConfig CRD.
    let changed_crd = "crdconversionconfigs.conversion.dco.rs";
    let mut generations = Vec::new();
    for c in dco_api::crds() {
        let name = c.metadata.name.unwrap_or_default();
        generations.push((name.clone(), crds.get(&name).await?.metadata.generation.unwrap_or(0)));
    }
    let copy = dir.join("chart").join("dco");
    let _ = std::fs::remove_dir_all(&copy);
    copy_dir(&chart_dir(), &copy)?;
    let file = copy.join("crds").join("crdconversionconfigs.yaml");
    let mut doc: Value = serde_yaml::from_str(&std::fs::read_to_string(&file)?)?;
    ensure!(doc["metadata"]["name"] == changed_crd, "{} is {}", file.display(), doc["metadata"]["name"]);
    doc["spec"]["versions"][0]["additionalPrinterColumns"]
        .as_array_mut()
        .context("printer columns")?
        .push(json!({"name": "Upgraded", "type": "string", "jsonPath": ".spec.hubVersion"}));
    std::fs::write(&file, serde_yaml::to_string(&doc)?)?;
    let mark = load.tally();
    let started = Instant::now();
    let result =
        helm_install_dco_from(t, &release, &copy, &upgraded).await.context("helm upgrade with a changed CRD");
    let crd_upgrade = started.elapsed();
    let live = crds.get(changed_crd).await?;
    let columns: Vec<String> =
        live.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.clone()).collect();
    let mut generation_changes = Vec::new();
    for (name, before) in &generations {
        generation_changes
            .push((name.clone(), crds.get(name).await?.metadata.generation.unwrap_or(0) - before));
    }
    // dco's CRDs are the cluster's: put them back before judging.
    restore_crd(&crds, changed_crd, &MANAGER).await?;
    result?;
    let crd_load = load.tally() - mark;
    let errors = load.errors();
    let total = load.stop().await?;
    eprintln!(
        "helm upgrade with the changed CRD returned after {crd_upgrade:?}: {changed_crd} columns {columns:?}, generation changes {generation_changes:?}; load meanwhile {crd_load:?}; the whole load {total:?}"
    );
    ensure!(
        columns.contains(&"Upgraded".to_string()),
        "{changed_crd}'s columns after the upgrade: {columns:?}"
    );
    for (name, change) in &generation_changes {
        let want = i64::from(name == changed_crd);
        ensure!(*change == want, "{name}: generation +{change}, want +{want}");
    }
    ensure!(total.failed == 0 && total.wrong == 0, "the whole load: {total:?}; first errors: {errors:?}");
    Ok(())
}

/// Removes what the test made outside its namespace, in the order docs/installation.md gives
/// ("Uninstall"): the config (it reverts its target), the server, the release, the target.
async fn remove(t: &TestEnv) -> Result<()> {
    let ns = &t.ns;
    let suffix = ns.rsplit('-').next().unwrap_or("run");
    let (release, server) = (format!("dco-upg-{suffix}"), format!("{ns}-default"));
    let configs: Api<CRDConversionConfig> = Api::all(t.client.clone());
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let cfg = format!("{ns}-widgets");
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
    let (cluster, r, n) = (t.cluster.clone(), release.clone(), ns.clone());
    tokio::task::spawn_blocking(move || {
        helm(
            &cluster,
            &["uninstall", &r, "--namespace", &n, "--wait", "--timeout", "3m", "--ignore-not-found"],
        )
    })
    .await??;
    let _ = crds.delete(&format!("widgets.{ns}.upgrade.example"), &DeleteParams::default()).await;
    Ok(())
}
