//! The chart's dashboards and alerts against a real Prometheus (docs/operations.md, "Metrics"
//! and "Alerts").
//!
//! `every_dashboard_query_and_alert_reads_data`: dco on the local cluster (two operator Pods,
//! a server's two webhook Pods), one config converting a CRD between v1 and v2, and the load
//! client reading and writing at the spoke v1. A `prometheus` server (built from the module
//! promtool is built from, `hack/testenv tool prometheus`) on loopback scrapes the Pods'
//! metrics ports with a static config. Then every dashboard query (`$target` the test's
//! target, `$__rate_interval` 30s) and every alert expression's parts without their threshold
//! (`dco_tests::monitoring::inner_queries`) go through the query API: each must be valid and
//! return data. A query may come back empty only when one of its selectors has no sample at
//! all and that selector is one of [`NO_SAMPLES`], each with the reason it has none here; the
//! family of every metric a query reads must be in Prometheus' metadata (families are listed
//! from the start, with no sample until they have one).

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use dco_api::CRDConversionConfig;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use dco_tests::load::{Load, Target};
use dco_tests::monitoring::{
    PROMETHEUS_SERIES, Prometheus, ScrapeTarget, alerts, dashboard_queries, dashboards, family_of,
    inner_queries, metric_names, render_rules, selectors,
};
use dco_tests::operator_pods::{OperatorDeployment, admission_args, remove_operators};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-prometheus-test");
const WAIT: Duration = Duration::from_secs(180);
/// Seconds between scrapes: short, so a minute of load gives every rate window samples.
const SCRAPE_S: u32 = 2;

/// Selectors with no sample in this test's cluster, and why: the failures, XRDs and lossy
/// rules it does not have. A query may be empty only through one of these.
const NO_SAMPLES: &[(&str, &str)] = &[
    ("dco_operator_handover_not_ready_since_timestamp_seconds", "every handover has settled"),
    ("dco_operator_config_not_propagated_since_timestamp_seconds", "XRD configs only; the target is a CRD"),
    ("dco_operator_config_not_applied_since_timestamp_seconds", "the config is Applied"),
    ("dco_operator_reconcile_errors_total", "no reconcile failed"),
    ("dco_operator_api_throttled_total", "the apiserver throttled no request"),
    ("dco_operator_watch_errors_total", "no watch failed"),
    ("dco_webhook_compile_failures_total", "no compile failed"),
    ("dco_webhook_lossy_conversions_total", "the config has no acknowledged-lossy rule"),
    ("dco_webhook_panics_total", "nothing panicked"),
    ("dco_webhook_tls_reloads_total", "no certificate was rotated"),
    ("dco_webhook_connections_closed_total", "no connection closed yet"),
    (r#"dco_webhook_requests_total{result!="success"}"#, "no review failed"),
    (r#"dco_webhook_requests_total{result="unknown_target"}"#, "no review was refused"),
    (r#"dco_webhook_requests_total{target="$target",result="unknown_target"}"#, "no review was refused"),
    (r#"dco_webhook_requests_total{target="$target",result!="success"}"#, "no review failed"),
];

/// Why `selector` (the target as `$target`) has no sample here, if [`NO_SAMPLES`] says: an
/// entry naming a metric alone covers each of its selectors, one with matchers only itself.
fn why_no_samples(selector: &str) -> Option<&'static str> {
    let name = selector.split('{').next().unwrap_or_default();
    NO_SAMPLES.iter().find(|(n, _)| *n == selector || *n == name).map(|(_, why)| *why)
}

#[tokio::test]
async fn every_dashboard_query_and_alert_reads_data() -> Result<()> {
    dco_tests::map_image("dco-operator", dco_tests::workspace_binary("dco-operator")?)?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("prom").await?;
    let result = scenario(&t).await;
    let label = format!("dco-prom-test={}", t.ns);
    let lp = ListParams::default().labels(&label);
    let unfinalize = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    // The config and the target first: a server a config is still wired to keeps its in-use
    // finalizer while an operator runs.
    let cfgs: Api<CRDConversionConfig> = Api::all(t.client.clone());
    for c in cfgs.list(&lp).await.map(|l| l.items).unwrap_or_default() {
        let name = c.metadata.name.clone().unwrap_or_default();
        let _ = cfgs.patch(&name, &PatchParams::default(), &unfinalize).await;
        let _ = cfgs.delete(&name, &DeleteParams::default()).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let _ = crds.delete(&format!("widgets.{}.prom.dco.rs", t.ns), &DeleteParams::default()).await;
    remove_operators(&t, std::slice::from_ref(&label)).await;
    let client = t.client.clone();
    t.cleanup().await;
    // Should an operator have put the in-use finalizer back meanwhile.
    let servers: Api<dco_api::ConversionWebhookServer> = Api::all(client);
    for s in servers.list(&lp).await.map(|l| l.items).unwrap_or_default() {
        let name = s.metadata.name.clone().unwrap_or_default();
        let _ = servers.patch(&name, &PatchParams::default(), &unfinalize).await;
        let _ = servers.delete(&name, &DeleteParams::default()).await;
    }
    result
}

fn widget_spec(version: &str, k: i64) -> Value {
    if version == "v1" { json!({"sz": format!("s{k}")}) } else { json!({"size": format!("s{k}")}) }
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    let label = ("dco-prom-test", ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let operators = OperatorDeployment {
        app: "dco-prom",
        replicas: 2,
        selector: &selector,
        extra_args: admission_args(&ns, "dco-prom-admission", "dco-prom"),
        rust_log: "info",
        termination_grace_s: 5,
    };
    operators.apply(t, &MANAGER).await?;
    operators.ready(t, 2, WAIT).await?;
    // The admission webhook answers once the first replica has registered it.
    let server = wait_for("the default server to be admitted", WAIT, || async {
        Ok(dco_tests::apply_default_server(t, MANAGER, label, 2).await.ok())
    })
    .await?;
    let servers: Api<dco_api::ConversionWebhookServer> = Api::all(client.clone());
    wait_for("the server to have 2 ready replicas", WAIT, || async {
        Ok(servers.get(&server).await?.status.is_some_and(|s| s.ready_replicas == 2).then_some(()))
    })
    .await?;

    // The target and its config: spec.size at the hub v2 is spec.sz at the spoke v1.
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let group = format!("{ns}.prom.dco.rs");
    let target = format!("widgets.{group}");
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema("sz")},
                {"name": "v2", "served": true, "storage": true, "schema": schema("size")}]}});
    MANAGER.apply(&crds, &target, crd).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let cfg = format!("{ns}-widgets");
    let rename =
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.size", "spokePath": "spec.sz"}});
    let config = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": cfg, "labels": {label.0: label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": [rename]}]}});
    MANAGER.apply(&cfgs, &cfg, config).await?;
    wait_for(&format!("{cfg} to be Applied"), WAIT, || async {
        let st = cfgs.get(&cfg).await?.status.unwrap_or_default();
        Ok((format!("{:?}", st.phase) == "Some(Applied)").then_some(()))
    })
    .await?;

    // The load at the spoke: every read and write goes through a ConversionReview.
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
        Duration::from_millis(50),
    );
    let result = with_prometheus(t, &server, &target).await;
    let tally = load.stop().await?;
    eprintln!("load: {tally:?}");
    result?;
    ensure!(tally.failed == 0 && tally.wrong == 0 && tally.ok > 100, "the load: {tally:?}");
    Ok(())
}

async fn with_prometheus(t: &TestEnv, server: &str, target: &str) -> Result<()> {
    // The operator Pods' and the webhook Pods' metrics ports, as a PodMonitor would find them.
    let pods: Api<Pod> = t.api();
    let mut targets = Vec::new();
    for (job, sel) in [
        ("dco-operator", "app=dco-prom".to_string()),
        ("dco-webhook", format!("conversion.dco.rs/instance={server}")),
    ] {
        for p in pods
            .list(&ListParams::default().labels(&sel))
            .await?
            .items
            .into_iter()
            .filter(dco_tests::pod_ready)
        {
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("a Pod IP")?;
            targets.push(ScrapeTarget {
                job: job.to_string(),
                address: format!("{ip}:8080"),
                namespace: t.ns.clone(),
                pod: p.metadata.name.clone().unwrap_or_default(),
            });
        }
    }
    ensure!(targets.len() == 4, "{} Pods to scrape, not 2 operators and 2 webhooks", targets.len());
    let started = Instant::now();
    let prom = Prometheus::start(&targets, SCRAPE_S).await?;
    eprintln!(
        "prometheus on {} scraping {:?}",
        prom.addr,
        targets.iter().map(|t| &t.address).collect::<Vec<_>>()
    );

    // Every target up, and reviews of the target counted, then 40 s more: every rate window
    // of 30 s holds a dozen scrapes.
    wait_for("every target up and reviews counted", WAIT, || async {
        let up = prom.query("sum(up)").await?;
        let reviews = prom
            .query(&format!(r#"sum(dco_webhook_requests_total{{target="{target}",result="success"}})"#))
            .await?;
        let n =
            |v: &[Value]| v.first().and_then(|s| s["value"][1].as_str()?.parse::<f64>().ok()).unwrap_or(0.0);
        Ok((n(&up) == 4.0 && n(&reviews) > 0.0).then_some(()))
    })
    .await
    .with_context(|| prom.log())?;
    tokio::time::sleep(Duration::from_secs(40)).await;
    eprintln!("{:?} after prometheus started", started.elapsed());

    let families = prom.families().await?;
    let values = prom
        .api(&format!("label/target/values?match[]={}", dco_tests::query_escape("dco_operator_config_phase")))
        .await?;
    ensure!(
        values.as_array().is_some_and(|v| v.iter().any(|x| x == target)),
        "the dashboards' target variable (label_values(dco_operator_config_phase, target)) does not offer {target}: {values}"
    );

    let mut checks: Vec<(String, String, bool)> = Vec::new();
    for (file, d) in dashboards()? {
        for (at, q) in dashboard_queries(&d) {
            let q = q.replace("$__rate_interval", "30s").replace("$target", target);
            checks.push((format!("{file}: {at}"), q, false));
        }
    }
    let cluster = t.cluster.clone();
    let spec = tokio::task::spawn_blocking(move || render_rules(&cluster, &[])).await??;
    for (alert, expr, _) in alerts(&spec) {
        for part in inner_queries(&expr) {
            checks.push((format!("alert {alert}"), part, true));
        }
    }

    let (mut with_data, mut excused, mut problems) = (0, BTreeMap::<String, Vec<String>>::new(), Vec::new());
    for (at, q, _) in &checks {
        for name in metric_names(q) {
            if !PROMETHEUS_SERIES.contains(&name.as_str()) && family_of(&name, &families).is_none() {
                problems.push(format!("{at}: no family of {name} in Prometheus' metadata"));
            }
        }
        let result = match prom.query(q).await {
            Ok(r) => r,
            Err(e) => {
                problems.push(format!("{at}: {q}: {e:#}"));
                continue;
            }
        };
        if !result.is_empty() {
            with_data += 1;
            continue;
        }
        // Empty: a panel that shows only what is wrong (`== 0`) is checked as its alert is,
        // by its parts; a part is empty only for want of a sample of an excused selector.
        let mut parts = inner_queries(q);
        parts.retain(|p| p != q);
        if parts.is_empty() {
            parts.push(q.clone());
        }
        for part in parts {
            if part != *q && !prom.query(&part).await?.is_empty() {
                continue;
            }
            let mut bare = Vec::new();
            for sel in selectors(&part) {
                if prom.query(&format!("count(last_over_time({sel}[1h]))")).await?.is_empty() {
                    bare.push(sel.replace(target, "$target"));
                }
            }
            let unexcused: Vec<&String> = bare.iter().filter(|s| why_no_samples(s).is_none()).collect();
            if bare.is_empty() {
                problems.push(format!("{at}: empty although each of its selectors has samples: {part}"));
            } else if !unexcused.is_empty() {
                problems.push(format!("{at}: empty; no sample of {unexcused:?}: {part}"));
            } else {
                excused.entry(at.clone()).or_default().extend(bare);
            }
        }
    }
    let alerts_n = checks.iter().filter(|c| c.2).count();
    eprintln!(
        "{} queries ({} of dashboards, {} alert parts): {with_data} with data, {} empty for lack of a sample of:",
        checks.len(),
        checks.len() - alerts_n,
        alerts_n,
        excused.len()
    );
    for (at, sels) in &excused {
        let why: Vec<String> = sels
            .iter()
            .map(|s| {
                format!(
                    "{s} ({})",
                    NO_SAMPLES.iter().find(|(n, _)| n == s || s.starts_with(n)).map_or("", |w| w.1)
                )
            })
            .collect();
        eprintln!("  {at}: {}", why.join(", "));
    }
    if !problems.is_empty() {
        bail!("{} queries fail:\n{}", problems.len(), problems.join("\n"));
    }
    // The check can fail: a query with a typo finds no family, one whose `on` labels do not
    // match finds nothing although its selectors have samples.
    let bogus = r#"max by (server) (dco_operator_server_replicas_ready) and on (server) max by (target) (dco_webhook_requests_total)"#;
    ensure!(prom.query(bogus).await?.is_empty(), "{bogus} has data");
    ensure!(family_of("dco_webhook_request_total", &families).is_none());
    let used: BTreeSet<&str> = excused.values().flatten().filter_map(|s| why_no_samples(s)).collect();
    let reasons: BTreeSet<&str> = NO_SAMPLES.iter().map(|(_, why)| *why).collect();
    eprintln!("{} of the {} reasons in NO_SAMPLES were needed", used.len(), reasons.len());
    Ok(())
}
