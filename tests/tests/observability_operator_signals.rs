//! The operator's own signals on a real operator reconciling real objects (docs/operations.md,
//! "Metrics"): each controller's queue (waits observed, depth back to 0 once settled, a change
//! waited for once more), the Kubernetes API requests by verb (a `patch`, a `list`, a `watch`,
//! durations without watches), the server replicas it wants and has ready as the server's
//! status says, and since when a config whose target does not exist has not been applied.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::Api;
use serde_json::{Value, json};

use dco_tests::operator_process::OperatorProcess;
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-signals-test");
const WAIT: Duration = Duration::from_secs(180);

fn start(env: &TestEnv, selector: &str) -> Result<OperatorProcess> {
    let args = [
        "--webhook-listen",
        "$(POD_IP):9443",
        "--webhook-arg=--drain-period=5s",
        "--webhook-arg=--lease-renew-interval=5s",
        "--webhook-arg=--lease-duration=20s",
        "--resync",
        "60s",
    ];
    OperatorProcess::start(env, selector, "signals-1", &args, &[])
}

/// The value of `series` (as exposed, labels in their order), 0 when absent.
fn value(body: &str, series: &str) -> f64 {
    dco_tests::metric_value(body, series).unwrap_or(0.0)
}

fn config(name: &str, target: &str, label: (&str, &str)) -> Value {
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2",
            "spokes": [{"version": "v1", "rules": []}]}})
}

#[tokio::test]
async fn the_operator_reports_its_queues_api_requests_servers_and_unapplied_configs() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("signals").await?;
    let client = t.client.clone();
    let label = ("dco-signals-test", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    dco_tests::install_dco_crds(&client, MANAGER.0).await?;
    let op = start(&t, &selector)?;
    let server = dco_tests::apply_default_server(&t, MANAGER, label, 2).await?;
    let group = format!("{}.signals.dco.rs", t.ns);
    let (target, missing) = (format!("widgets.{group}"), format!("nothings.{group}"));
    let (applied, orphan) = (format!("{}-widgets", t.ns), format!("{}-orphan", t.ns));
    // Declared after the operator, so dropped before it: the configs go while it still answers
    // their finalizer.
    let _guard = dco_tests::ClusterScoped(vec![
        (dco_tests::ar::<CRDConversionConfig>(), applied.clone()),
        (dco_tests::ar::<CRDConversionConfig>(), orphan.clone()),
        (dco_tests::ar::<CustomResourceDefinition>(), target.clone()),
        (dco_tests::ar::<ConversionWebhookServer>(), server.clone()),
    ]);
    let result = scenario(&t, &op, label, &server, (&target, &missing), (&applied, &orphan)).await;
    drop(_guard);
    drop(op);
    t.cleanup().await;
    result
}

async fn scenario(
    t: &TestEnv,
    op: &OperatorProcess,
    label: (&str, &str),
    server: &str,
    (target, missing): (&str, &str),
    (applied, orphan): (&str, &str),
) -> Result<()> {
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let cfgs: Api<CRDConversionConfig> = Api::all(t.client.clone());
    wait_for("the server to have 2 ready replicas", WAIT, || async {
        Ok(servers.get(server).await?.status.is_some_and(|s| s.ready_replicas == 2).then_some(()))
    })
    .await?;
    let group = target.trim_start_matches("widgets.");
    MANAGER.apply(&crds, target, dco_tests::two_version_widget_crd(group)).await?;
    dco_tests::wait_crd_established(&crds, target, WAIT).await?;
    MANAGER.apply(&cfgs, applied, config(applied, target, label)).await?;
    MANAGER.apply(&cfgs, orphan, config(orphan, missing, label)).await?;
    wait_for(&format!("{applied} to be Applied"), WAIT, || async {
        let c = cfgs.get(applied).await?;
        let st = c.status.unwrap_or_default();
        Ok(st.conditions.iter().any(|c| c.type_ == "Applied" && c.status == "True").then_some(()))
    })
    .await?;
    let since = wait_for(&format!("{orphan} to say its target is missing"), WAIT, || async {
        let c = cfgs.get(orphan).await?;
        let st = c.status.unwrap_or_default();
        let healthy = st.conditions.iter().find(|c| c.type_ == "TargetHealthy" && c.status == "False");
        Ok(healthy.map(|c| c.last_transition_time.0.as_second() as f64))
    })
    .await?;

    // The server series equal what the server's status says, once its status is scraped.
    let body = wait_for("the server's replicas on /metrics", WAIT, || async {
        let body = op.scrape().await?;
        let s = servers.get(server).await?.status.unwrap_or_default();
        let sel = format!("{{server=\"{server}\"}}");
        let desired = value(&body, &format!("dco_operator_server_replicas_desired{sel}"));
        let ready = value(&body, &format!("dco_operator_server_replicas_ready{sel}"));
        eprintln!(
            "server {server}: desired {desired}, ready {ready} (status.readyReplicas {})",
            s.ready_replicas
        );
        Ok((desired == 2.0 && ready == f64::from(s.ready_replicas)).then_some(body))
    })
    .await?;

    // The orphan: not applied since its TargetHealthy turned False; the applied one not at all.
    let kind = "kind=\"CRDConversionConfig\"";
    let series = format!(
        "dco_operator_config_not_applied_since_timestamp_seconds{{{kind},target=\"{missing}\",reason=\"TargetNotFound\"}}"
    );
    let got = dco_tests::metric_value(&body, &series).with_context(|| format!("no {series} in\n{body}"))?;
    ensure!(got == since, "{series} is {got}, TargetHealthy turned False at {since}");
    ensure!(
        !body.contains(&format!("config_not_applied_since_timestamp_seconds{{{kind},target=\"{target}\"")),
        "{target} is Applied yet has a not-applied series"
    );

    // API requests by verb: writes of status and finalizers are patches, caches list and watch.
    for verb in ["patch", "list", "watch", "get"] {
        let n = value(&body, &format!("dco_operator_api_requests_total{{verb=\"{verb}\",code=\"200\"}}"));
        eprintln!("api requests {verb} 200: {n}");
        ensure!(n > 0.0, "no {verb} answered 200 counted");
    }
    let patches = value(&body, "dco_operator_api_request_duration_seconds_count{verb=\"patch\"}");
    ensure!(patches > 0.0, "no patch duration observed");
    ensure!(!body.contains("api_request_duration_seconds_count{verb=\"watch\"}"), "watches are timed");

    // Queues: every controller waited for something, and nothing is left waiting once settled.
    for controller in ["conversionwebhookserver", "crdconversionconfig"] {
        let waits =
            value(&body, &format!("dco_operator_queue_wait_seconds_count{{controller=\"{controller}\"}}"));
        let sum =
            value(&body, &format!("dco_operator_queue_wait_seconds_sum{{controller=\"{controller}\"}}"));
        let (runs, took) = (
            value(
                &body,
                &format!("dco_operator_reconcile_duration_seconds_count{{controller=\"{controller}\"}}"),
            ),
            value(
                &body,
                &format!("dco_operator_reconcile_duration_seconds_sum{{controller=\"{controller}\"}}"),
            ),
        );
        eprintln!("{controller}: {waits} waits, {sum:.3} s in all; {runs} reconciles, {took:.3} s in all");
        for l in body
            .lines()
            .filter(|l| l.starts_with("dco_operator_queue_wait_seconds_bucket") && l.contains(controller))
        {
            eprintln!("  {l}");
        }
        ensure!(waits > 0.0 && sum >= 0.0, "{controller}: no queue wait observed");
    }
    wait_for("every queue to be empty", Duration::from_secs(60), || async {
        let body = op.scrape().await?;
        let depths: Vec<f64> = ["conversionwebhookserver", "crdconversionconfig", "xrdconversionconfig"]
            .iter()
            .map(|c| value(&body, &format!("dco_operator_queue_depth{{controller=\"{c}\"}}")))
            .collect();
        eprintln!("queue depths: {depths:?}");
        Ok(depths.iter().all(|d| *d == 0.0).then_some(()))
    })
    .await?;

    // A change of the config is one more wait of its controller.
    let ccc = "controller=\"crdconversionconfig\"";
    let before = value(&op.scrape().await?, &format!("dco_operator_queue_wait_seconds_count{{{ccc}}}"));
    let mut changed = config(applied, target, label);
    changed["metadata"]["annotations"] = json!({"dco-signals-test/touched": "1"});
    MANAGER.apply(&cfgs, applied, changed).await?;
    wait_for("the change's reconcile to be waited for", Duration::from_secs(60), || async {
        let after = value(&op.scrape().await?, &format!("dco_operator_queue_wait_seconds_count{{{ccc}}}"));
        Ok((after > before).then_some(()))
    })
    .await?;
    Ok(())
}
