//! A settled XRDConversionConfig costs no request when nothing changed (docs/operator.md,
//! "What an idle config costs"), on a real Crossplane 2: the world of
//! `dco_tests::crossplane_world` (three XRDs of every scope, their generated CRDs), its configs
//! pinned and settled, one dco-operator with `--resync 3s`. Over an idle window each config is
//! woken about ten times, and the operator's `dco_operator_api_requests_total` shows no get,
//! patch, create or delete (a full look of an XRD config reads the config, the XRD and its
//! generated CRDs) and no more lists than the Coordinator's ticks. Crossplane's own writes of
//! the XRDs and generated CRDs, if it made any, would show here as looks. Then the package
//! manager's rewrite of one XRD, replayed (an Update as field manager `crossplane` that drops
//! `spec.conversion`), is healed: the XRD watch wakes the config, which wires it back, timed.
//!
//! Needs `target/debug/dco-operator`, `target/debug/dco-webhook` and Go (the crossplane tool).
//! Runs Crossplane under its cluster-wide lock.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_tests::crossplane::Crossplane;
use dco_tests::crossplane_world::{MANAGER, XRDS, XpWorld, xrd_resource};
use dco_tests::operator_process::{OperatorProcess, requests_by_verb};
use dco_tests::{ClusterScoped, TestEnv, wait_for};
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::Value;

const SHARDS: u32 = 2;
/// The operator's shard and member Lease renewal (its default).
const RENEW: Duration = Duration::from_secs(10);
const RESYNC: &str = "3s";
const IDLE: Duration = Duration::from_secs(30);
/// The XRD whose wiring the replayed package rewrite drops (the LegacyCluster one, written
/// through `v1`).
const XRD: usize = 2;
const HEAL_WITHIN: Duration = Duration::from_secs(30);

#[tokio::test]
async fn an_idle_xrd_config_sends_nothing_and_a_package_rewrite_is_wired_back() -> Result<()> {
    let t = TestEnv::new("xpidle").await?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
    let dir = std::env::temp_dir().join(format!("dco-tests-{}", t.ns));
    let xp = Crossplane::start(&t.client, &dir).await?;
    eprintln!("crossplane log: {}", xp.log.display());
    let w = XpWorld::new(&t);
    // Declared after `xp`, so dropped before it: deleted while Crossplane still runs.
    let guard = ClusterScoped((0..XRDS.len()).map(|i| (xrd_resource("v1"), w.xrd_name(i))).collect());
    let args = [
        "--webhook-listen",
        "$(POD_IP):9443",
        "--webhook-arg=--drain-period=5s",
        "--webhook-arg=--lease-renew-interval=5s",
        "--resync",
        RESYNC,
        "--shards",
        "2",
    ];
    let vars = [("RUST_LOG", "info,dco_operator::config=debug")];
    let op = OperatorProcess::start(&t, &w.selector, "xpidle-1", &args, &vars)?;

    let result = run(&w, &op).await;
    let removed = w.remove_all().await;
    w.remove_servers().await;
    drop(op);
    drop(guard);
    xp.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    result?;
    removed
}

async fn run(w: &XpWorld, op: &OperatorProcess) -> Result<()> {
    w.apply_servers().await?;
    w.apply_xrds().await?;
    let server = w.servers[0].clone();
    w.pin_all(&server).await?;
    w.wait_settled(&server).await.context("the first wiring")?;
    // The settling's last writes land, and each config's first look at rest is remembered.
    tokio::time::sleep(Duration::from_secs(15)).await;
    idle_window(op).await?;
    rewrite_healed(w, &server).await
}

async fn idle_window(op: &OperatorProcess) -> Result<()> {
    let reconciles = r#"dco_operator_reconciles_total{controller="xrdconversionconfig"}"#;
    let (before, wakes_before) = (op.scrape().await?, op.metric(reconciles).await?);
    let started = Instant::now();
    tokio::time::sleep(IDLE).await;
    let (after, wakes_after) = (op.scrape().await?, op.metric(reconciles).await?);
    let window = started.elapsed();
    let (b, a) = (requests_by_verb(&before), requests_by_verb(&after));
    let sent: BTreeMap<&str, f64> = a
        .iter()
        .map(|(v, n)| (v.as_str(), n - b.get(v).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let wakes = wakes_after - wakes_before;
    eprintln!("idle {window:.0?}: {wakes} XRD config reconciles; requests by verb: {sent:?}");
    let expected = XRDS.len() as f64 * window.as_secs_f64() / 3.0;
    ensure!(wakes >= expected / 2.0, "{wakes} config reconciles in {window:?}, expected about {expected:.0}");
    for verb in ["get", "patch", "create", "delete", "deletecollection"] {
        ensure!(!sent.contains_key(verb), "{verb} requests while idle: {sent:?}");
    }
    // The Coordinator's tick (one list of Leases a renew interval), the shard and member
    // Lease renewals (updates), and watches that restart.
    let ticks = window.as_secs_f64() / RENEW.as_secs_f64() + 2.0;
    let lists = sent.get("list").copied().unwrap_or(0.0);
    let updates = sent.get("update").copied().unwrap_or(0.0);
    ensure!(lists <= ticks, "{lists} lists in {window:?}: more than the Coordinator's {ticks:.0} ticks");
    ensure!(
        updates <= f64::from(SHARDS + 1) * ticks,
        "{updates} updates in {window:?}: more than the {} Leases' renewals",
        SHARDS + 1
    );
    Ok(())
}

/// The package manager's rewrite, replayed on XRD `XRD` (an Update as `crossplane` without
/// `spec.conversion`), is wired back to `server` within `HEAL_WITHIN`.
async fn rewrite_healed(w: &XpWorld, server: &str) -> Result<()> {
    let xrds: Api<DynamicObject> = Api::all_with(w.client.clone(), &xrd_resource("v1"));
    let name = w.xrd_name(XRD);
    let service = w.service(server);
    let wired = |x: &DynamicObject| -> Result<bool> {
        let v = serde_json::to_value(x)?;
        Ok(dco_api::target::wired_service(&v).map(|(_, n)| n) == Some(service.as_str()))
    };
    ensure!(wired(&xrds.get(&name).await?)?, "XRD {name} is not wired to {service} before the rewrite");
    let mut rewritten = false;
    for _ in 0..20 {
        let mut obj = xrds.get(&name).await?;
        if let Some(spec) = obj.data.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("conversion");
        }
        obj.metadata.managed_fields = None;
        let pp = PostParams { field_manager: Some("crossplane".into()), ..Default::default() };
        match xrds.replace(&name, &pp, &obj).await {
            Ok(_) => {
                rewritten = true;
                break;
            }
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e).context(format!("updating XRD {name} as crossplane")),
        }
    }
    ensure!(rewritten, "XRD {name}: 20 conflicts in a row");
    let start = Instant::now();
    wait_for(&format!("XRD {name} wired back to {service}"), HEAL_WITHIN, || async {
        Ok(wired(&xrds.get(&name).await?)?.then_some(()))
    })
    .await?;
    eprintln!("XRD {name}'s spec.conversion dropped by crossplane: wired back {:.2?} after", start.elapsed());
    Ok(())
}
