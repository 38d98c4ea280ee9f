//! An idle cluster costs the operator only watches and Lease renewals (docs/operator.md,
//! "The server wing"; docs/performance.md, "Scale: idle requests and a sixth server
//! joining"): a server with a few settled targets is reconciled whenever one of its replicas'
//! Leases could lapse, and those reconciles send nothing — no apply, no prune list, no Secret
//! read, no list of every config, no status write — as the operator's own
//! `dco_operator_api_requests_total` shows over an idle window. Then the server's Service,
//! deleted by hand, is made again: the Service watch wakes the server and its apply heals it.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, HandoverState};
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams};
use serde_json::{Value, json};

use dco_tests::operator_process::{OperatorProcess, requests_by_verb};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-idle-test");
const WAIT: Duration = Duration::from_secs(240);
const TARGETS: usize = 3;
/// Shards of the test's operator: each is one Lease renewed every `RENEW`.
const SHARDS: u32 = 2;
/// The operator's shard and member Lease renewal (its default).
const RENEW: Duration = Duration::from_secs(10);
/// The webhook replicas' served-target Leases: the server's reconcile recurs just after the
/// first could lapse, so several fall in the window.
const WEBHOOK_LEASE: &str = "--webhook-arg=--lease-duration=15s";
const IDLE: Duration = Duration::from_secs(45);

/// Pinned to the test's server, which is no default: the replicas of a default server would
/// also serve the unpinned configs other tests on the shared cluster make, and their changes
/// are no idle.
fn config(name: &str, target: &str, server: &str, label: (&str, &str)) -> Value {
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "webhookServerRef": {"name": server},
            "spokes": [{"version": "v1", "rules": []}]}})
}

#[tokio::test]
async fn an_idle_server_costs_only_watches_and_lease_renewals_and_a_deleted_service_is_healed() -> Result<()>
{
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("idle").await?;
    let label = ("dco-idle-test", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let shards = SHARDS.to_string();
    let args = [
        "--webhook-listen",
        "$(POD_IP):9443",
        "--webhook-arg=--drain-period=5s",
        "--webhook-arg=--lease-renew-interval=5s",
        WEBHOOK_LEASE,
        "--shards",
        &shards,
    ];
    let vars = [("RUST_LOG", "info,dco_operator::server=debug")];
    let op = OperatorProcess::start(&t, &selector, "idle-1", &args, &vars)?;
    let server = format!("{}-s", t.ns);
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let body = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": server, "labels": {label.0: label.1}},
        "spec": {"namespace": t.ns, "replicas": 2, "default": false}});
    MANAGER.apply(&servers, &server, body).await?;
    let targets: Vec<String> = (0..TARGETS).map(|i| format!("widgets.t{i}.{}.idle.dco.rs", t.ns)).collect();
    let configs: Vec<String> = (0..TARGETS).map(|i| format!("{}-t{i}", t.ns)).collect();
    let mut scoped = vec![(dco_tests::ar::<ConversionWebhookServer>(), server.clone())];
    for (target, cfg) in targets.iter().zip(&configs) {
        scoped.push((dco_tests::ar::<CRDConversionConfig>(), cfg.clone()));
        scoped.push((dco_tests::ar::<CustomResourceDefinition>(), target.clone()));
    }
    // Configs first, the server last: dropped while the operator still answers finalizers.
    scoped.rotate_left(1);
    let guard = dco_tests::ClusterScoped(scoped);
    let result = scenario(&t, &op, label, &server, &targets, &configs).await;
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
) -> Result<()> {
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let cfgs: Api<CRDConversionConfig> = Api::all(t.client.clone());
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    for (target, cfg) in targets.iter().zip(configs) {
        let group = target.trim_start_matches("widgets.");
        MANAGER.apply(&crds, target, dco_tests::two_version_widget_crd(group)).await?;
        dco_tests::wait_crd_established(&crds, target, WAIT).await?;
        MANAGER.apply(&cfgs, cfg, config(cfg, target, server, label)).await?;
    }
    wait_for("every config settled and the server serving every target", WAIT, || async {
        for cfg in configs {
            let st = cfgs.get(cfg).await?.status.unwrap_or_default();
            let settled = st.handover.as_ref().is_some_and(|h| h.state == HandoverState::SourceDropped);
            if !settled || !st.conditions.iter().any(|c| c.type_ == "HandoverReady" && c.status == "True") {
                return Ok(None);
            }
        }
        let st = servers.get(server).await?.status.unwrap_or_default();
        let serves = targets.iter().all(|t| st.served_targets.contains(t));
        Ok((st.assigned_configs.len() == configs.len() && serves).then_some(()))
    })
    .await?;

    // The last status writes and Events of the settling land first.
    tokio::time::sleep(Duration::from_secs(15)).await;
    let reconciles = |body: &str| {
        dco_tests::metric_value(body, "dco_operator_reconciles_total{controller=\"conversionwebhookserver\"}")
            .unwrap_or(0.0)
    };
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
    let timed = reconciles(&after) - reconciles(&before);
    eprintln!("idle {window:.0?}: {timed} server reconciles; requests by verb: {sent:?}");
    // The server was reconciled (its Leases' lapse times), and sent nothing for it.
    ensure!(timed >= 1.0, "no server reconcile in {window:?}: the window proves nothing");
    for verb in ["get", "patch", "create", "delete", "deletecollection"] {
        ensure!(!sent.contains_key(verb), "{verb} requests while idle: {sent:?}");
    }
    // What is left: the Coordinator's tick (one list of Leases a renew interval) and the
    // renewals of the shard and member Leases (updates), and watches that restart.
    let ticks = window.as_secs_f64() / RENEW.as_secs_f64() + 2.0;
    let lists = sent.get("list").copied().unwrap_or(0.0);
    let updates = sent.get("update").copied().unwrap_or(0.0);
    ensure!(lists <= ticks, "{lists} lists in {window:?}: more than the Coordinator's {ticks:.0} ticks");
    ensure!(
        updates <= f64::from(SHARDS + 1) * ticks,
        "{updates} updates in {window:?}: more than the {} Leases' renewals",
        SHARDS + 1
    );

    // The server's Service deleted by hand is made again (a new object of the same name).
    let services: Api<Service> = Api::namespaced(t.client.clone(), &t.ns);
    let name = format!("dco-webhook-{server}");
    let old = services.get(&name).await?.metadata.uid;
    services.delete(&name, &DeleteParams::default()).await?;
    let healed = Instant::now();
    wait_for(&format!("Service {name} made again"), Duration::from_secs(60), || async {
        let now = services.get_opt(&name).await?.and_then(|s| s.metadata.uid);
        Ok(now.filter(|uid| Some(uid) != old.as_ref()).map(|_| ()))
    })
    .await?;
    eprintln!("Service {name} made again {:.1?} after its deletion", healed.elapsed());
    Ok(())
}
