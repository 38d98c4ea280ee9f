//! A settled config costs no request when nothing changed (docs/operator.md, "What an idle
//! config costs"): with `--resync 3s`, each of a few settled configs is woken about ten times
//! over an idle window, and the operator's own `dco_operator_api_requests_total` shows no
//! get, patch, create or delete and no more lists than the Coordinator's ticks (a full look
//! reads the config and its target and writes status if it changed). Then another field manager sets a target's `spec.conversion` to strategy None,
//! as `kubectl edit` would: the CRD watch wakes the config, which sees the changed target and
//! wires it back, timed. A fourth config names a target that does not exist yet: held back,
//! it is woken every 30 s and sends nothing either, and the target's creation wires it, timed.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::config::Phase;
use dco_api::{CRDConversionConfig, ConversionWebhookServer, HandoverState};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams};
use serde_json::{Value, json};

use dco_tests::operator_process::{OperatorProcess, requests_by_verb};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-idle-configs-test");
/// The other writer of a target's `spec.conversion`.
const EDITOR: &str = "kubectl-edit";
const WAIT: Duration = Duration::from_secs(240);
const TARGETS: usize = 3;
const SHARDS: u32 = 2;
/// The operator's shard and member Lease renewal (its default).
const RENEW: Duration = Duration::from_secs(10);
/// The configs' timer: several wakes of each fall in the window.
const RESYNC: Duration = Duration::from_secs(3);
const IDLE: Duration = Duration::from_secs(30);
/// How soon a target's edited wiring must be put back: a watch round trip and one look.
const HEAL_WITHIN: Duration = Duration::from_secs(20);
/// How soon a created target is wired: a watch round trip, the replicas' next Lease renewal
/// (`--lease-renew-interval=5s`) naming it, and the looks of a first wiring.
const CREATED_WITHIN: Duration = Duration::from_secs(60);

fn config_reconciles(body: &str) -> f64 {
    dco_tests::metric_value(body, "dco_operator_reconciles_total{controller=\"crdconversionconfig\"}")
        .unwrap_or(0.0)
}

/// Pinned to the test's server, which is no default (other tests' unpinned configs are not
/// its to serve).
fn config(name: &str, target: &str, server: &str, label: (&str, &str)) -> Value {
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "webhookServerRef": {"name": server},
            "spokes": [{"version": "v1", "rules": []}]}})
}

#[tokio::test]
async fn an_idle_config_sends_nothing_and_an_edited_target_is_wired_back_at_once() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("idlecfg").await?;
    let label = ("dco-idle-configs-test", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let (shards, resync) = (SHARDS.to_string(), format!("--resync={}s", RESYNC.as_secs()));
    let args = [
        "--webhook-listen",
        "$(POD_IP):9443",
        "--webhook-arg=--drain-period=5s",
        "--webhook-arg=--lease-renew-interval=5s",
        "--shards",
        &shards,
        &resync,
    ];
    let vars = [("RUST_LOG", "info,dco_operator::config=debug")];
    let op = OperatorProcess::start(&t, &selector, "idle-configs-1", &args, &vars)?;
    let server = format!("{}-s", t.ns);
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let body = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": server, "labels": {label.0: label.1}},
        "spec": {"namespace": t.ns, "replicas": 2, "default": false}});
    MANAGER.apply(&servers, &server, body).await?;
    let targets: Vec<String> =
        (0..TARGETS).map(|i| format!("widgets.t{i}.{}.idlecfg.dco.rs", t.ns)).collect();
    let configs: Vec<String> = (0..TARGETS).map(|i| format!("{}-t{i}", t.ns)).collect();
    let absent = (format!("widgets.absent.{}.idlecfg.dco.rs", t.ns), format!("{}-absent", t.ns));
    let mut scoped = vec![(dco_tests::ar::<ConversionWebhookServer>(), server.clone())];
    for (target, cfg) in targets.iter().zip(&configs).chain([(&absent.0, &absent.1)]) {
        scoped.push((dco_tests::ar::<CRDConversionConfig>(), cfg.clone()));
        scoped.push((dco_tests::ar::<CustomResourceDefinition>(), target.clone()));
    }
    // Configs first, the server last: dropped while the operator still answers finalizers.
    scoped.rotate_left(1);
    let guard = dco_tests::ClusterScoped(scoped);
    let result = scenario(&t, &op, label, &server, &targets, &configs, &absent).await;
    drop(guard);
    drop(op);
    t.cleanup().await;
    result
}

async fn scenario(
    t: &TestEnv,
    op: &OperatorProcess,
    label: (&str, &str),
    server: &str,
    targets: &[String],
    configs: &[String],
    (absent_target, absent): &(String, String),
) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let cfgs: Api<CRDConversionConfig> = Api::all(t.client.clone());
    for (target, cfg) in targets.iter().zip(configs) {
        MANAGER.apply(&crds, target, widgets(target)).await?;
        dco_tests::wait_crd_established(&crds, target, WAIT).await?;
        MANAGER.apply(&cfgs, cfg, config(cfg, target, server, label)).await?;
    }
    MANAGER.apply(&cfgs, absent, config(absent, absent_target, server, label)).await?;
    wait_for("every config settled, the one without a target Pending", WAIT, || async {
        for cfg in configs {
            if !settled(&cfgs, cfg).await? {
                return Ok(None);
            }
        }
        let st = cfgs.get(absent).await?.status.unwrap_or_default();
        Ok((st.phase == Some(Phase::Pending)).then_some(()))
    })
    .await?;

    // The settling's last writes land, and each config's first look at rest is remembered.
    tokio::time::sleep(Duration::from_secs(15)).await;
    idle_window(op, configs.len()).await?;
    heal(&crds, &targets[0], server).await?;

    // The absent target is created: the CRD watch wakes its config, which wires it.
    MANAGER.apply(&crds, absent_target, widgets(absent_target)).await?;
    let created = Instant::now();
    wait_for(&format!("{absent} settled once its target exists"), CREATED_WITHIN, || async {
        Ok(settled(&cfgs, absent).await?.then_some(()))
    })
    .await?;
    eprintln!("{absent_target} created: {absent} settled {:.2?} after", created.elapsed());
    Ok(())
}

fn widgets(target: &str) -> Value {
    dco_tests::two_version_widget_crd(target.trim_start_matches("widgets."))
}

/// Settled on its server, `HandoverReady` True.
async fn settled(cfgs: &Api<CRDConversionConfig>, cfg: &str) -> Result<bool> {
    let st = cfgs.get(cfg).await?.status.unwrap_or_default();
    let settled = st.handover.as_ref().is_some_and(|h| h.state == HandoverState::SourceDropped);
    Ok(settled && st.conditions.iter().any(|c| c.type_ == "HandoverReady" && c.status == "True"))
}

/// Over `IDLE`, the configs are woken by their timer and send nothing.
async fn idle_window(op: &OperatorProcess, configs: usize) -> Result<()> {
    let before = op.scrape().await?;
    let started = Instant::now();
    tokio::time::sleep(IDLE).await;
    let after = op.scrape().await?;
    let window = started.elapsed();
    let (b, a) = (requests_by_verb(&before), requests_by_verb(&after));
    let sent: BTreeMap<&str, f64> = a
        .iter()
        .map(|(v, n)| (v.as_str(), n - b.get(v).copied().unwrap_or(0.0)))
        .filter(|(_, n)| *n > 0.0)
        .collect();
    let wakes = config_reconciles(&after) - config_reconciles(&before);
    eprintln!("idle {window:.0?}: {wakes} config reconciles; requests by verb: {sent:?}");
    // Each config woken several times by its timer: the window proves something.
    let expected = configs as f64 * (window.as_secs_f64() / RESYNC.as_secs_f64());
    ensure!(wakes >= expected / 2.0, "{wakes} config reconciles in {window:?}, expected about {expected:.0}");
    for verb in ["get", "patch", "create", "delete", "deletecollection"] {
        ensure!(!sent.contains_key(verb), "{verb} requests while idle: {sent:?}");
    }
    // What is left: the Coordinator's tick (one list of Leases a renew interval), the shard
    // and member Lease renewals (updates), and watches that restart. A full look of each
    // wake would have read twice: 2 x {wakes} gets.
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

/// Another manager sets `target`'s `spec.conversion` to strategy None; the operator wires it
/// back to `server` within `HEAL_WITHIN`.
async fn heal(crds: &Api<CustomResourceDefinition>, target: &str, server: &str) -> Result<()> {
    let service = format!("dco-webhook-{server}");
    let names = |crd: &CustomResourceDefinition| {
        let c = crd.spec.conversion.as_ref();
        let svc = c.and_then(|c| c.webhook.as_ref()).and_then(|w| w.client_config.as_ref());
        c.is_some_and(|c| c.strategy == "Webhook")
            && svc.and_then(|s| s.service.as_ref()).is_some_and(|s| s.name == service)
    };
    ensure!(names(&crds.get(target).await?), "{target} is not wired to {service} before the edit");
    let edit = json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
    let pp = PatchParams { field_manager: Some(EDITOR.to_string()), ..PatchParams::default() };
    crds.patch(target, &pp, &Patch::Merge(&edit)).await.with_context(|| format!("editing {target}"))?;
    let edited = Instant::now();
    wait_for(&format!("{target} wired back to {service}"), HEAL_WITHIN, || async {
        Ok(names(&crds.get(target).await?).then_some(()))
    })
    .await?;
    eprintln!(
        "{target}'s spec.conversion set to None by {EDITOR}: wired back {:.2?} after",
        edited.elapsed()
    );
    Ok(())
}
