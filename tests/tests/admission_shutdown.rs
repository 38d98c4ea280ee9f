//! Admission that never drops a review across rolling restarts (docs/admission.md, "Stopping
//! and failing replicas"): dco-operator as a Deployment of 2 Pods serving admission, as in
//! admission.rs, restarted five times (the template annotation `kubectl rollout restart`
//! sets; maxSurge 1, maxUnavailable 0) while a client sends, every 20 ms each, a dry-run create
//! of a server (`SecondDefaultLoad`: alternately admitted and refused by the second-default
//! rule) and a dry-run server-side apply of a config. With the default `--shutdown-drain` no
//! review may fail. Then the same with `--shutdown-drain=0s`: the failures are counted and
//! printed, not asserted (whether the apiserver opens a connection to a stopping Pod in that
//! window is a race).
//!
//! The test also follows the Pods every 50 ms and prints, per stopped Pod, when it was seen
//! deleting and not Ready against its deletion as the apiserver recorded it
//! (`deletionTimestamp` less the grace period, whole seconds: when the kubelet was told to stop
//! it): how long the apiserver may still route to it.
//!
//! Needs `target/debug/dco-operator` (the testenv's `dco-operator` image).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use dco_tests::operator_pods::{OperatorDeployment, SecondDefaultLoad, admission_args, remove_operators};
use dco_tests::{Manager, TestEnv, pod_ready, wait_for};

const MANAGER: Manager = Manager("dco-admission-shutdown-test");
const SERVICE: &str = "dco-admission";
const APP: &str = "dco-admstop";
const RESTARTS: usize = 5;
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn rolling_restarts_drop_no_admission_review() -> Result<()> {
    let t = TestEnv::new("admstop").await?;
    let label = format!("dco-admstop-test={}", t.ns);
    let result = scenario(&t).await;
    remove_operators(&t, &[label]).await;
    t.cleanup().await;
    result
}

fn deployment<'a>(ns: &str, selector: &'a str, drain: Option<&str>) -> OperatorDeployment<'a> {
    let mut extra_args = admission_args(ns, SERVICE, APP);
    extra_args.extend(drain.map(|d| format!("--shutdown-drain={d}")));
    OperatorDeployment {
        app: APP,
        replicas: 2,
        selector,
        extra_args,
        rust_log: "info",
        termination_grace_s: 30,
    }
}

/// Per Pod: its deletion (`deletionTimestamp` less `deletionGracePeriodSeconds`), first seen
/// deleting, first seen not Ready after Ready (wall clock).
#[derive(Clone, Debug, Default)]
struct Seen {
    deleted: Option<Timestamp>,
    deleting: Option<Timestamp>,
    not_ready: Option<Timestamp>,
    was_ready: bool,
}

fn follow_pods(pods: Api<Pod>, stop: Arc<AtomicBool>) -> tokio::task::JoinHandle<BTreeMap<String, Seen>> {
    tokio::spawn(async move {
        let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
        let lp = ListParams::default().labels(&format!("app={APP}"));
        while !stop.load(Ordering::SeqCst) {
            if let Ok(l) = pods.list(&lp).await {
                let now = Timestamp::now();
                for p in &l.items {
                    let Some(name) = p.metadata.name.clone() else { continue };
                    let s = seen.entry(name).or_default();
                    if let Some(until) = &p.metadata.deletion_timestamp
                        && s.deleting.is_none()
                    {
                        s.deleting = Some(now);
                        let grace = p.metadata.deletion_grace_period_seconds.unwrap_or(0);
                        s.deleted = Some(until.0 - k8s_openapi::jiff::SignedDuration::from_secs(grace));
                    }
                    if pod_ready(p) {
                        s.was_ready = true;
                    } else if s.was_ready && s.not_ready.is_none() {
                        s.not_ready = Some(now);
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        seen
    })
}

/// Dry-run server-side applies of a config every 20 ms (admitted: its target does not exist,
/// which is a warning); (admitted, failures).
fn config_load(
    ns: &str,
    label: (String, String),
    stop: Arc<AtomicBool>,
) -> tokio::task::JoinHandle<(u64, Vec<String>)> {
    let name = format!("{ns}-cfg");
    let target = format!("widgets.{ns}.example");
    tokio::spawn(async move {
        let client = match dco_tests::client().await {
            Ok(c) => c,
            Err(e) => return (0, vec![e.to_string()]),
        };
        let cfgs: Api<CRDConversionConfig> = Api::all(client);
        let pp = PatchParams::apply(&MANAGER).dry_run();
        let obj = dco_tests::chart::widget_config(&name, &target, &label);
        let (mut ok, mut failed) = (0u64, Vec::new());
        while !stop.load(Ordering::SeqCst) {
            match cfgs.patch(&name, &pp, &Patch::Apply(&obj)).await {
                Ok(_) => ok += 1,
                Err(e) => failed.push(e.to_string()),
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        (ok, failed)
    })
}

struct Phase {
    reviews: u64,
    failed: Vec<String>,
    stops: Vec<String>,
}

/// `RESTARTS` rolling restarts under both loads; what failed, and when each stopped Pod was
/// seen deleting and not Ready.
async fn restarts(
    t: &TestEnv,
    servers: &Api<ConversionWebhookServer>,
    d2: &str,
    label: (&str, &str),
) -> Result<Phase> {
    let pods: Api<Pod> = t.api();
    let deployments: Api<Deployment> = t.api();
    let stop = Arc::new(AtomicBool::new(false));
    let follow = follow_pods(pods.clone(), stop.clone());
    let servers_load = SecondDefaultLoad::start(servers.clone(), d2, label);
    let cfg_load = config_load(&t.ns, (label.0.to_string(), label.1.to_string()), stop.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let lp = ListParams::default().labels(&format!("app={APP}"));
    let mut stopped: Vec<String> = Vec::new();
    for i in 0..RESTARTS {
        let before: Vec<String> =
            pods.list(&lp).await?.items.iter().filter_map(|p| p.metadata.name.clone()).collect();
        let at = Instant::now();
        let patch = json!({"spec": {"template": {"metadata": {"annotations": {"dco-tests/restarted": format!("{i}-{}", Timestamp::now())}}}}});
        deployments.patch(APP, &PatchParams::default(), &Patch::Merge(&patch)).await?;
        wait_for(&format!("restart {i} to complete"), WAIT, || async {
            let l = pods.list(&lp).await?.items;
            let done = l.len() == 2
                && l.iter().all(|p| pod_ready(p) && p.metadata.deletion_timestamp.is_none())
                && l.iter().all(|p| p.metadata.name.as_ref().is_some_and(|n| !before.contains(n)));
            Ok(done.then_some(()))
        })
        .await?;
        eprintln!("restart {i}: both Pods replaced in {:?}", at.elapsed());
        stopped.extend(before);
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let (admitted, denied, server_failed) = servers_load.stop().await?;
    let (cfg_ok, cfg_failed) = cfg_load.await?;
    let seen = follow.await?;
    let mut failed: Vec<String> = server_failed.into_iter().map(|(_, e)| e).collect();
    failed.extend(cfg_failed);
    let reviews = admitted + denied + cfg_ok + failed.len() as u64;
    ensure!(
        admitted > 50 && denied > 50 && cfg_ok > 50,
        "too little load: {admitted} admitted, {denied} denied, {cfg_ok} configs"
    );
    let mut stops = Vec::new();
    for pod in &stopped {
        let s = seen.get(pod).cloned().unwrap_or_default();
        let Some(deleted) = s.deleted else {
            stops.push(format!("{pod}: not seen deleting"));
            continue;
        };
        let after = |t: Option<Timestamp>| {
            t.map(|t| {
                format!("{:+.2}s", (t - deleted).total(k8s_openapi::jiff::Unit::Second).unwrap_or(f64::NAN))
            })
        };
        stops.push(format!(
            "{pod}: deleting seen {}, not Ready seen {} after its deletion",
            after(s.deleting).unwrap_or("-".into()),
            after(s.not_ready).unwrap_or("-".into()),
        ));
    }
    Ok(Phase { reviews, failed, stops })
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let ns = t.ns.clone();
    let label = ("dco-admstop-test", ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
    let operators = deployment(&ns, &selector, None);
    operators.apply(t, &MANAGER).await?;
    operators.ready(t, 2, WAIT).await?;

    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let server = |name: &str, default: bool| -> Result<ConversionWebhookServer> {
        Ok(serde_json::from_value(
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": {label.0: label.1}}, "spec": {"default": default, "replicas": 0}}),
        )?)
    };
    let (d, d2) = (format!("{ns}-d"), format!("{ns}-d2"));
    servers.create(&PostParams::default(), &server(&d, true)?).await?;
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    wait_for("the webhook to answer", WAIT, || async {
        Ok(match servers.create(&dry, &server(&d2, true)?).await {
            Err(kube::Error::Api(e)) if e.message.contains("already has spec.default: true") => Some(()),
            _ => None,
        })
    })
    .await?;

    let with_drain = restarts(t, &servers, &d2, label).await?;
    for d in &with_drain.stops {
        eprintln!("  {d}");
    }
    eprintln!(
        "default --shutdown-drain, {RESTARTS} rolling restarts: {} reviews, {} failed {:?}",
        with_drain.reviews,
        with_drain.failed.len(),
        with_drain.failed.iter().take(3).collect::<Vec<_>>()
    );
    ensure!(
        with_drain.failed.is_empty(),
        "{} of {} admission reviews failed across {RESTARTS} rolling restarts: {:?}",
        with_drain.failed.len(),
        with_drain.reviews,
        with_drain.failed
    );

    // The same without a drain: the flag change is a rollout of its own; then the restarts.
    let no_drain = deployment(&ns, &selector, Some("0s"));
    no_drain.apply(t, &MANAGER).await?;
    let pods: Api<Pod> = t.api();
    wait_for("the --shutdown-drain=0s Pods", WAIT, || async {
        let l = pods.list(&ListParams::default().labels(&format!("app={APP}"))).await?.items;
        let args =
            |p: &Pod| serde_json::to_string(&p.spec.as_ref().map(|s| &s.containers)).unwrap_or_default();
        Ok((l.len() == 2 && l.iter().all(|p| pod_ready(p) && args(p).contains("--shutdown-drain=0s")))
            .then_some(()))
    })
    .await
    .context("rolling out --shutdown-drain=0s")?;
    let without = restarts(t, &servers, &d2, label).await?;
    for d in &without.stops {
        eprintln!("  {d}");
    }
    eprintln!(
        "--shutdown-drain=0s, {RESTARTS} rolling restarts: {} reviews, {} failed {:?}",
        without.reviews,
        without.failed.len(),
        without.failed.iter().take(5).collect::<Vec<_>>()
    );
    Ok(())
}
