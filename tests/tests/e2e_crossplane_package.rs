//! Crossplane's package manager rewriting an XRD dco wired, on the local cluster with a real
//! Crossplane 2 (docs/admission.md, "The XRD guard"; docs/testenv.md, "Crossplane").
//!
//! The XRD (`Namespaced`, written at `apiextensions.crossplane.io/v2`, three versions, the hub
//! `v1beta1` referenceable: `dco_tests::crossplane_world`'s first XRD) is not applied by the
//! test: it is the only object of a Configuration package built by `dco_tests::xpkg`, pushed
//! to crane's registry on 127.0.0.1 and installed with a `pkg.crossplane.io/v1` Configuration,
//! so Crossplane's package manager creates it and owns it (controller: the
//! ConfigurationRevision). dco-operator runs as a Deployment of one Pod serving admission
//! (`--admission-service`, so the apiserver can call the guard), one ConversionWebhookServer
//! (2 replicas), and an XRDConversionConfig pinned to it; a load writes and reads XRs at the
//! spoke `v1alpha1` (and checks at the hub) throughout.
//!
//! Each rewrite is the package manager's own: the ConfigurationRevision is annotated, its
//! reconcile writes the package's XRD again (a whole-object update without spec.conversion),
//! as at every `--sync-interval` of Crossplane.
//!
//! 1. Without the guard, 10 rewrites: each is seen on a watch of the XRD as the event that
//!    drops dco's wiring; the time from it to the moment the XRD and its generated XR CRD both
//!    carry the wiring again is measured (min/median/max printed) and must stay under 60 s;
//!    the load's failed and wrong requests are counted and printed.
//! 2. The operator restarted with `--xrd-guard`: 10 rewrites, each answered by the guard
//!    (`dco_operator_xrd_guard_restores_total` grows by one per rewrite), a watch of the XRD
//!    and of the CRD never sees the wiring go, and no request of the load fails or reads a
//!    wrong value.
//!
//! Revert detection (operator/src/config/reverts.rs) is checked too: after phase 1 the operator
//! counted every revert (`dco_operator_xrd_wiring_reverts_total`), published a `WiringReverted`
//! Event and set `PackageManaged` True; the operator restarted with the guard counts none.
//!
//! Crossplane runs under its cluster-wide lock (one test at a time). Needs
//! `target/debug/dco-operator` and `target/debug/dco-webhook` (mapped as the images
//! `dco-operator-xpkg` and `dco-webhook-xpkg`, names of this test's own).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::StreamExt;
use k8s_openapi::api::admissionregistration::v1::MutatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::runtime::watcher;
use serde_json::json;

use dco_tests::crossplane::Crossplane;
use dco_tests::crossplane_world::{HUB, MANAGER, SPOKES, XpWorld, spec_at, spokes, user_part, xrd_resource};
use dco_tests::load::{Load, Shape, Target};
use dco_tests::operator_pods::{OperatorDeployment, admission_args, remove_operators};
use dco_tests::{TestEnv, wait_for, xpkg};

const WAIT: Duration = Duration::from_secs(180);
const REWRITES: usize = 10;
const APP: &str = "dco-xpkg";
const OPERATOR_IMAGE: &str = "dco-operator-xpkg:dev";
const WEBHOOK_IMAGE: &str = "dco-webhook-xpkg:dev";
const HEAL_BOUND: Duration = Duration::from_secs(60);
const RESTORES: &str = "dco_operator_xrd_guard_restores_total";
const REVERTS: &str = "dco_operator_xrd_wiring_reverts_total";

/// One observed state of a watched object: when, and whether it carried dco's wiring.
#[derive(Clone, Copy, Debug)]
struct Seen {
    at: Instant,
    wired: bool,
}

/// A watch of one object, recording each state whether it calls `namespace/service`.
struct Watch {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Watch {
    fn start(api: Api<DynamicObject>, name: &str, ns: &str, service: &str) -> Watch {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (s, ns, service) = (seen.clone(), ns.to_string(), service.to_string());
        let cfg = watcher::Config::default().fields(&format!("metadata.name={name}"));
        let task = tokio::spawn(async move {
            let mut events = watcher(api, cfg).boxed();
            while let Some(ev) = events.next().await {
                let obj = match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                    _ => continue,
                };
                let v = serde_json::to_value(&obj).unwrap_or_default();
                let wired = dco_api::target::wired_service(&v) == Some((ns.as_str(), service.as_str()));
                s.lock().expect("watch log").push(Seen { at: Instant::now(), wired });
            }
        });
        Watch { seen, task }
    }

    fn since(&self, t: Instant) -> Vec<Seen> {
        self.seen.lock().expect("watch log").iter().filter(|s| s.at >= t).copied().collect()
    }

    fn last(&self) -> Option<Seen> {
        self.seen.lock().expect("watch log").last().copied()
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The first moment at or after `from` when the last state of each of `watches` is wired.
fn healed_at(watches: &[&Watch], from: Instant) -> Option<Instant> {
    let logs: Vec<Vec<Seen>> = watches.iter().map(|w| w.seen.lock().expect("watch log").clone()).collect();
    let mut moments: Vec<Instant> = logs.iter().flatten().map(|s| s.at).filter(|t| *t >= from).collect();
    moments.sort();
    moments
        .into_iter()
        .find(|t| logs.iter().all(|log| log.iter().rev().find(|s| s.at <= *t).is_some_and(|s| s.wired)))
}

/// The sum of every series of the operator's counter `name` (whatever its labels): the guard's
/// restores (`dry_run` true or false: Crossplane's package manager writes what its dry run
/// answered, so the dry run is the update the guard patches), the reverts the operator saw
/// (`owner`).
async fn counter_sum(pods: &Api<Pod>, name: &str) -> Result<f64> {
    let ip = operator_ip(pods).await?;
    let (code, body) = dco_tests::http_get(&format!("{ip}:8080"), "/metrics").await?;
    ensure!(code == 200, "GET {ip}:8080/metrics: {code}");
    Ok(body
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum())
}

async fn operator_ip(pods: &Api<Pod>) -> Result<String> {
    let list = pods.list(&ListParams::default().labels(&format!("app={APP}"))).await?;
    let pod = list
        .items
        .iter()
        .find(|p| dco_tests::pod_ready(p) && p.metadata.deletion_timestamp.is_none())
        .context("a Ready operator Pod")?;
    pod.status.as_ref().and_then(|s| s.pod_ip.clone()).context("the operator Pod's IP")
}

/// Sets the operator container's image (the test's own) and arguments: one rollout.
async fn set_operator(deployments: &Api<Deployment>, args: &[String]) -> Result<()> {
    let patch = json!([
        {"op": "replace", "path": "/spec/replicas", "value": 1},
        {"op": "replace", "path": "/spec/template/spec/containers/0/image", "value": OPERATOR_IMAGE},
        {"op": "replace", "path": "/spec/template/spec/containers/0/args", "value": args},
    ]);
    deployments
        .patch(APP, &PatchParams::default(), &Patch::Json::<()>(serde_json::from_value(patch)?))
        .await
        .context("patching the operator Deployment")?;
    Ok(())
}

/// Waits until the Deployment's one Pod runs `args` and is Ready (the old one gone).
async fn operator_rolled(t: &TestEnv, args: &[String]) -> Result<()> {
    let pods: Api<Pod> = t.api();
    wait_for("the operator Pod with its new arguments to be Ready alone", WAIT, || async {
        let l = pods.list(&ListParams::default().labels(&format!("app={APP}"))).await?;
        let new = l.items.iter().all(|p| {
            p.spec.as_ref().is_some_and(|s| s.containers[0].args.as_deref() == Some(args))
                && dco_tests::pod_ready(p)
                && p.metadata.deletion_timestamp.is_none()
        });
        Ok((new && l.items.len() == 1).then_some(()))
    })
    .await
}

fn min_median_max(mut d: Vec<Duration>) -> (Duration, Duration, Duration) {
    d.sort();
    (d[0], d[d.len() / 2], d[d.len() - 1])
}

#[tokio::test]
async fn the_package_managers_rewrites_heal_without_the_guard_and_never_land_with_it() -> Result<()> {
    dco_tests::map_image("dco-operator-xpkg", dco_tests::workspace_binary("dco-operator")?)?;
    dco_tests::map_image("dco-webhook-xpkg", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("xpkg").await?;
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let w = XpWorld::new(&t);
    let dir = std::env::temp_dir().join(format!("dco-{}", t.ns));
    let xp = Crossplane::start(&t.client, &dir).await?;
    let result = scenario(&t, &w, &dir).await;
    if let Err(e) = &result {
        eprintln!("failed: {e:#}; cleaning up (Crossplane's log: {})", xp.log.display());
    }
    cleanup(&t, &w).await;
    xp.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    result
}

/// Everything of this test's, best effort: the guard's configuration, the config (unwiring,
/// allowed), the XRs, the package (the XRD and its CRD go with its revision, Crossplane still
/// running), the servers, the operator.
async fn cleanup(t: &TestEnv, w: &XpWorld) {
    let client = &t.client;
    // The XRs, then the package (its revision takes the XRD and the CRD), then the config:
    // its finalizer's revert of the XRD succeeds once the XRD is gone.
    let xrs = w.api(client, &dco_tests::crossplane_world::KINDS[0], HUB);
    let _ = xrs.delete_collection(&DeleteParams::background(), &Default::default()).await;
    let configs: Api<DynamicObject> = Api::all_with(client.clone(), &xpkg::configuration_resource());
    let _ = configs.delete(&format!("{}-pkg", t.ns), &DeleteParams::default()).await;
    let xrds: Api<DynamicObject> = Api::all_with(client.clone(), &xrd_resource("v1"));
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let _ = dco_tests::wait_deleted(&xrds, &w.xrd_name(0), WAIT).await;
    let _ = dco_tests::wait_deleted(&crds, &w.xrd_name(0), WAIT).await;
    let cfg = w.config_name(0);
    let _ = w.cfgs.delete(&cfg, &DeleteParams::default()).await;
    let _ = dco_tests::wait_deleted(&w.cfgs, &cfg, WAIT).await;
    w.remove_servers().await;
    // The operator goes before its guard's configuration: a running replica would apply it
    // again within a minute.
    let deployments: Api<Deployment> = t.api();
    let _ = deployments.delete(APP, &DeleteParams::default()).await;
    let pods: Api<Pod> = t.api();
    let _ = wait_for("the operator Pods gone", WAIT, || async {
        let l = pods.list(&ListParams::default().labels(&format!("app={APP}"))).await?;
        Ok(l.items.is_empty().then_some(()))
    })
    .await;
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    let lp = ListParams::default().labels("app.kubernetes.io/name=dco-operator");
    for m in mwcs.list(&lp).await.map(|l| l.items).unwrap_or_default() {
        let ours = m
            .webhooks
            .iter()
            .flatten()
            .any(|h| h.client_config.service.as_ref().is_some_and(|s| s.namespace == t.ns));
        if ours && let Some(name) = m.metadata.name.as_deref() {
            let _ = mwcs.delete(name, &DeleteParams::default()).await;
        }
    }
    remove_operators(t, std::slice::from_ref(&w.selector)).await;
}

async fn scenario(t: &TestEnv, w: &XpWorld, dir: &std::path::Path) -> Result<()> {
    let client = t.client.clone();

    // The package: XRD 0 of the world (Namespaced, at v2), installed by the package manager.
    let t0 = Instant::now();
    let registry = xpkg::Registry::start(dir)?;
    let (_, xrd) = w.xrd(0);
    let xrd_name = w.xrd_name(0);
    xpkg::write_layout(&dir.join("layout"), &xpkg::package_yaml(&format!("{}-pkg", t.ns), &[xrd]))?;
    let pushed = registry.push(&dir.join("layout"), &format!("dco-e2e/{}:v0.1.0", t.ns))?;
    let package = format!("{}/dco-e2e/{}:v0.1.0", registry.host, t.ns);
    let rev = xpkg::install(&client, MANAGER.0, &format!("{}-pkg", t.ns), &package, WAIT).await?;
    let xrds: Api<DynamicObject> = Api::all_with(client.clone(), &xrd_resource("v1"));
    let installed = xrds.get(&xrd_name).await?;
    let controller =
        installed.metadata.owner_references.iter().flatten().find(|o| o.controller == Some(true));
    ensure!(
        controller.is_some_and(|o| o.kind == "ConfigurationRevision" && o.name == rev.name),
        "XRD {xrd_name} is controlled by ConfigurationRevision {}: {:?}",
        rev.name,
        installed.metadata.owner_references
    );
    let crd = xrd_name.clone(); // the XR CRD has the XRD's name
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    dco_tests::wait_crd_established(&crds, &crd, WAIT).await?;
    println!(
        "package {pushed} installed, XRD owned by {}, its CRD Established: {:?}",
        rev.name,
        t0.elapsed()
    );

    // dco: the operator as a Pod serving admission, one server, the config pinned to it.
    let mut args: Vec<String> =
        ["--namespace", &t.ns, "--selector", &w.selector, "--metrics-listen", "$(POD_IP):8080"]
            .map(String::from)
            .to_vec();
    args.extend(["--webhook-listen".to_string(), "$$(POD_IP):9443".to_string()]);
    args.extend(admission_args(&t.ns, "dco-xpkg-admission", APP));
    args.extend([format!("--webhook-image={WEBHOOK_IMAGE}"), "--webhook-arg=--drain-period=5s".into()]);
    let op = OperatorDeployment {
        app: APP,
        // Scaled up by set_operator with the test's image: no Pod of another build starts.
        replicas: 0,
        selector: &w.selector,
        extra_args: vec![],
        rust_log: "info",
        termination_grace_s: 30,
    };
    op.apply(t, MANAGER.0).await?;
    let deployments: Api<Deployment> = t.api();
    set_operator(&deployments, &args).await?;
    operator_rolled(t, &args).await?;
    let server = w.servers[0].clone();
    let service = w.service(&server);
    MANAGER
        .apply(&w.srvs, &server, json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": server, "labels": {"dco-e2e-xp": t.ns}}, "spec": {"namespace": t.ns, "replicas": 2}}))
        .await?;
    wait_for(&format!("server {server} to have 2 ready replicas"), WAIT, || async {
        Ok(w.srvs.get(&server).await?.status.is_some_and(|s| s.ready_replicas == 2).then_some(()))
    })
    .await?;
    let cfg = w.config_name(0);
    MANAGER
        .apply(
            &w.cfgs,
            &cfg,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
            "metadata": {"name": cfg, "labels": {"dco-e2e-xp": t.ns}},
            "spec": {"targetXRD": {"name": xrd_name}, "hubVersion": HUB, "webhookServerRef": {"name": server},
                "spokes": spokes()}}),
        )
        .await?;
    let crd_api: Api<DynamicObject> =
        Api::all_with(client.clone(), &dco_tests::ar::<CustomResourceDefinition>());
    let xrd_watch = Watch::start(xrds.clone(), &xrd_name, &t.ns, &service);
    let crd_watch = Watch::start(crd_api.clone(), &crd, &t.ns, &service);
    wait_for("the XRD and its CRD wired to the server", WAIT, || async {
        Ok(healed_at(&[&xrd_watch, &crd_watch], t0).map(|_| ()))
    })
    .await?;
    println!("XRD and CRD wired to {service}: {:?}", t0.elapsed());

    let target = Target {
        client: client.clone(),
        ns: t.ns.clone(),
        group: w.group.clone(),
        kind: "XDatabase".into(),
        plural: "xdatabases".into(),
        spoke: SPOKES[0].into(),
        hub: HUB.into(),
        spec: spec_at,
        manager: "dco-e2e-xpkg-load",
    };
    let load = Load::start_shaped(
        target.clone(),
        8,
        Duration::from_millis(20),
        Shape { prefix: "l".into(), view: user_part },
    );
    let clean = load.wait_clean(50, WAIT, "before the rewrites").await?;

    // 1. Without the guard: each rewrite drops the wiring; the operator heals it.
    let mut heals = Vec::new();
    for i in 0..REWRITES {
        let nudged = Instant::now();
        rev.nudge("dco.rs/e2e-rewrite", &format!("unguarded-{i}")).await?;
        let dropped =
            wait_for(&format!("rewrite {i} to drop the XRD's wiring"), Duration::from_secs(60), || async {
                Ok(xrd_watch.since(nudged).into_iter().find(|s| !s.wired).map(|s| s.at))
            })
            .await?;
        let healed = wait_for(&format!("rewrite {i} to be healed"), WAIT, || async {
            Ok(healed_at(&[&xrd_watch, &crd_watch], dropped))
        })
        .await?;
        let took = healed - dropped;
        println!(
            "unguarded rewrite {i}: dropped {:?} after the nudge, healed {took:?} later",
            dropped - nudged
        );
        heals.push(took);
        // Quiet before the next one: the CRD's storage settles.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    let unguarded_errors = load.errors();
    let unguarded = load.stop().await?;
    let (min, median, max) = min_median_max(heals.clone());
    println!(
        "without the guard: {REWRITES} rewrites, drop to heal min {min:?} median {median:?} max {max:?}; load {:?} \
         (before {clean:?}), first errors {unguarded_errors:?}",
        unguarded,
    );
    ensure!(max < HEAL_BOUND, "a rewrite took {max:?} to heal");
    // Revert detection (operator/src/config/reverts.rs): every revert counted, an Event on the
    // config, the config says a package owns its XRD.
    let pods: Api<Pod> = t.api();
    let reverts = counter_sum(&pods, REVERTS).await?;
    ensure!(reverts >= REWRITES as f64, "the operator counted {reverts} reverts of {REWRITES}");
    let events = dco_tests::warning_events(&client, &cfg, "WiringReverted").await?;
    ensure!(!events.is_empty(), "no WiringReverted Event on XRDConversionConfig {cfg}");
    let managed = w.condition(&cfg, "PackageManaged").await?;
    ensure!(
        managed.as_ref().is_some_and(|c| c["status"] == "True"),
        "XRDConversionConfig {cfg}'s PackageManaged condition: {managed:?}"
    );
    println!(
        "revert detection: {reverts} reverts counted, {} WiringReverted Event(s), PackageManaged: {}",
        events.len(),
        managed.map(|c| c["message"].to_string()).unwrap_or_default()
    );

    // 2. With the guard: the operator restarted with --xrd-guard.
    let mut guarded_args = args.clone();
    guarded_args.push("--xrd-guard".into());
    set_operator(&deployments, &guarded_args).await?;
    operator_rolled(t, &guarded_args).await?;
    let mwcs: Api<MutatingWebhookConfiguration> = Api::all(client.clone());
    wait_for("the XRD guard registered", WAIT, || async {
        let l = mwcs.list(&ListParams::default().labels("app.kubernetes.io/name=dco-operator")).await?;
        Ok(l.items
            .iter()
            .any(|m| {
                m.webhooks.iter().flatten().any(|h| {
                    h.client_config.service.as_ref().is_some_and(|s| s.namespace == t.ns)
                        && h.client_config.ca_bundle.is_some()
                })
            })
            .then_some(()))
    })
    .await?;
    // The registration is read by the apiserver's webhook informer: a moment later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(
        xrd_watch.last().is_some_and(|s| s.wired) && crd_watch.last().is_some_and(|s| s.wired),
        "wired before the guarded rewrites"
    );
    // A load on objects of its own: phase 1 left objects written at the spoke while the XRD was
    // unwired stored in the spoke's shape (fields pruned, spoke enum values in the hub), which
    // fail or read wrong until they are written again.
    let load = Load::start_shaped(
        target.clone(),
        8,
        Duration::from_millis(20),
        Shape { prefix: "g".into(), view: user_part },
    );
    let before = load.wait_clean(50, WAIT, "before the guarded rewrites").await?;
    let guarded_from = Instant::now();
    for i in 0..REWRITES {
        let restores = counter_sum(&pods, RESTORES).await?;
        rev.nudge("dco.rs/e2e-rewrite", &format!("guarded-{i}")).await?;
        wait_for(&format!("the guard to restore rewrite {i}"), Duration::from_secs(60), || async {
            let now = counter_sum(&pods, RESTORES).await?;
            Ok((now > restores).then_some(()))
        })
        .await?;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    tokio::time::sleep(Duration::from_secs(3)).await;
    let reverted: Vec<Seen> = xrd_watch
        .since(guarded_from)
        .into_iter()
        .chain(crd_watch.since(guarded_from))
        .filter(|s| !s.wired)
        .collect();
    let after = load.stop().await?;
    let restores = counter_sum(&pods, RESTORES).await?;
    let (failed, wrong) = (after.failed - before.failed, after.wrong - before.wrong);
    println!(
        "with the guard: {REWRITES} rewrites, {restores} restores, {} states without the wiring on the XRD or CRD \
         watch ({} XRD events seen), load {} requests: {failed} failed, {wrong} wrong",
        reverted.len(),
        xrd_watch.since(guarded_from).len(),
        (after.ok + after.failed) - (before.ok + before.failed)
    );
    ensure!(reverted.is_empty(), "with the guard, the wiring went {} times", reverted.len());
    let reverts_guarded = counter_sum(&pods, REVERTS).await?;
    ensure!(
        reverts_guarded == 0.0,
        "the restarted operator counted {reverts_guarded} reverts with the guard on"
    );
    ensure!(restores >= REWRITES as f64, "the guard restored {restores} of {REWRITES} rewrites");
    ensure!(failed == 0 && wrong == 0, "with the guard the load failed: {failed} failed, {wrong} wrong");

    drop((xrd_watch, crd_watch));
    ensure!(heals.len() == REWRITES, "measured {} of {REWRITES} rewrites", heals.len());
    // The XRs first: Crossplane keeps an XRD being deleted while composites of it exist
    // (TerminatingCompositeResource).
    let xrs = w.api(&client, &dco_tests::crossplane_world::KINDS[0], HUB);
    xrs.delete_collection(&DeleteParams::background(), &Default::default()).await?;
    wait_for("every XR gone", WAIT, || async {
        Ok(xrs.list(&Default::default()).await?.items.is_empty().then_some(()))
    })
    .await?;
    rev.uninstall(WAIT).await?;
    dco_tests::wait_deleted(&xrds, &xrd_name, WAIT).await?;
    dco_tests::wait_deleted(&crds, &crd, WAIT).await?;
    println!("package uninstalled: its XRD and CRD deleted");
    drop(registry);
    Ok(())
}
