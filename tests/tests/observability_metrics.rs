//! Metrics and alerts people can use (docs/operations.md, "Metrics" and "Alerts").
//!
//! * `the_alert_rules_pass_promtool`: the chart's PrometheusRule, rendered by helm
//!   (templates/prometheusrule.yaml runs charts/dco/files/prometheus-rules.yaml through `tpl`),
//!   passes `promtool check rules` and `promtool test rules` with tests/prometheus/rules_test.yaml
//!   (every alert fires on its series and not on the others, at the default thresholds);
//!   promtool is built from its Go module (hack/testenv-go/tools/promtool).
//! * `the_binaries_export_what_the_alerts_and_the_dashboard_read`: on the local cluster, two
//!   dco-operator Pods and a server's two dco-webhook Pods serve OpenMetrics whose families
//!   follow the naming rules and the docs' tables; the series the alerts read report the
//!   cluster's truth as it changes (a wired target, a pin to a server that cannot take it, a
//!   schema drift that breaks the compile, a server scaled to nothing); and every metric the
//!   dashboards and the rules name is one of those the binaries export.
//! * `the_dashboards_parse_and_have_a_panel_for_each_signal`: the overview, per-target and
//!   stability dashboards each show their signals; every query of the per-target one selects
//!   its `target` variable.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use dco_api::metrics::{Exposed, compare_with_docs, convention_problems, documented, parse_exposition};
use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::jiff::Timestamp;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use dco_tests::monitoring::{
    PROMETHEUS_SERIES, alerts, dashboard_queries, dashboards, metric_names, render_rules,
};
use dco_tests::operator_pods::{OperatorDeployment, admission_args, remove_operators};
use dco_tests::{Manager, TestEnv, repo_root, unique_name, wait_for};

const MANAGER: Manager = Manager("dco-monitoring-test");
const WAIT: Duration = Duration::from_secs(120);
const DAY: f64 = 86_400.0;

// --- the rules --------------------------------------------------------------------------

/// A directory with `rules.yaml` (the rendered groups) and tests/prometheus/rules_test.yaml.
fn rules_dir(spec: &serde_yaml::Value) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(unique_name("dco-rules"));
    std::fs::create_dir_all(&dir)?;
    std::fs::write(dir.join("rules.yaml"), serde_yaml::to_string(spec)?)?;
    std::fs::copy(repo_root().join("tests/prometheus/rules_test.yaml"), dir.join("rules_test.yaml"))?;
    Ok(dir)
}

/// `promtool ARGS` in `dir`: whether it succeeded, and what it printed.
fn promtool(bin: &Path, dir: &Path, args: &[&str]) -> Result<(bool, String)> {
    let out = Command::new(bin).args(args).current_dir(dir).output().context("running promtool")?;
    let text = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Ok((out.status.success(), text))
}

/// The anchors of docs/operations.md's headings, as GitHub makes them.
fn doc_anchors() -> BTreeSet<String> {
    let md = std::fs::read_to_string(repo_root().join("docs/operations.md")).unwrap_or_default();
    md.lines()
        .filter_map(|l| l.trim_start_matches('#').strip_prefix(' ').filter(|_| l.starts_with('#')))
        .map(|h| {
            h.to_lowercase()
                .chars()
                .filter(|c| c.is_alphanumeric() || *c == ' ' || *c == '-')
                .map(|c| if c == ' ' { '-' } else { c })
                .collect()
        })
        .collect()
}

#[test]
fn the_alert_rules_pass_promtool() -> Result<()> {
    let cluster = dco_tests::ensure_cluster()?;
    let promtool_bin = dco_tests::testenv_tool("promtool")?;
    let spec = render_rules(&cluster, &[])?;
    let rules = alerts(&spec);
    let names: BTreeSet<String> = rules.iter().map(|r| r.0.clone()).collect();
    eprintln!("{} alerts: {names:?}", rules.len());

    // Each alert names its object in its summary and description and links its runbook.
    let anchors = doc_anchors();
    for (alert, _, ann) in &rules {
        for k in ["summary", "description", "runbook"] {
            ensure!(ann.get(k).is_some_and(|v| !v.trim().is_empty()), "{alert} has no {k} annotation");
        }
        let runbook = &ann["runbook"];
        let anchor =
            runbook.strip_prefix("docs/operations.md#").context("runbook outside docs/operations.md")?;
        ensure!(
            anchors.contains(anchor),
            "{alert}'s runbook {runbook}: no such section in docs/operations.md"
        );
        ensure!(
            ann["description"].contains(runbook.as_str()),
            "{alert}'s description does not link {runbook}"
        );
    }

    let dir = rules_dir(&spec)?;
    let (ok, out) = promtool(&promtool_bin, &dir, &["check", "rules", "rules.yaml"])?;
    eprintln!("promtool check rules:\n{out}");
    ensure!(ok && out.contains(&format!("SUCCESS: {} rules found", rules.len())), "{out}");

    // The unit tests cover every alert, each firing somewhere and silent somewhere.
    let tests: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("rules_test.yaml"))?)?;
    let mut fired: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    for t in tests["tests"].as_sequence().into_iter().flatten() {
        for a in t["alert_rule_test"].as_sequence().into_iter().flatten() {
            let e = fired.entry(a["alertname"].as_str().unwrap_or_default().to_string()).or_default();
            if a["exp_alerts"].as_sequence().is_some_and(|s| !s.is_empty()) {
                e.0 += 1;
            } else {
                e.1 += 1;
            }
        }
    }
    for n in &names {
        let (fires, silent) = fired.get(n).copied().unwrap_or_default();
        ensure!(fires > 0 && silent > 0, "{n}: {fires} test(s) where it fires, {silent} where it must not");
    }
    ensure!(fired.keys().all(|k| names.contains(k)), "tests for unknown alerts: {fired:?}");
    let (ok, out) = promtool(&promtool_bin, &dir, &["test", "rules", "rules_test.yaml"])?;
    eprintln!("promtool test rules:\n{out}");
    ensure!(ok && out.contains("SUCCESS"), "{out}");

    // The thresholds are the chart's values: others render into the expressions, and the same
    // series then no longer give the same alerts.
    let other = render_rules(
        &cluster,
        &[
            "monitoring.prometheusRule.handoverStuckMinutes=30",
            "monitoring.prometheusRule.certificateExpiryDays=7",
            "monitoring.prometheusRule.conversionErrorRatio=1",
            "monitoring.prometheusRule.queueDepth=1000",
            "monitoring.prometheusRule.webhookNotReadyMinutes=15",
        ],
    )?;
    let exprs: BTreeMap<String, String> = alerts(&other).into_iter().map(|(a, e, _)| (a, e)).collect();
    ensure!(exprs["DcoHandoverStuck"].contains("> 30 * 60"), "{}", exprs["DcoHandoverStuck"]);
    ensure!(
        exprs["DcoCertificateExpiringSoon"].contains("< 7 * 86400"),
        "{}",
        exprs["DcoCertificateExpiringSoon"]
    );
    ensure!(exprs["DcoConversionErrors"].contains("> 1\n"), "{}", exprs["DcoConversionErrors"]);
    ensure!(
        exprs["DcoReconcileQueueBackingUp"].contains("> 1000"),
        "{}",
        exprs["DcoReconcileQueueBackingUp"]
    );
    let dir2 = rules_dir(&other)?;
    let (ok, out) = promtool(&promtool_bin, &dir2, &["test", "rules", "rules_test.yaml"])?;
    for a in [
        "DcoHandoverStuck",
        "DcoCertificateExpiringSoon",
        "DcoConversionErrors",
        "DcoReconcileQueueBackingUp",
        "DcoWebhookReplicaNotReady",
    ] {
        ensure!(!ok && out.contains(&format!("alertname: {a},")), "{a} passes with other thresholds:\n{out}");
    }
    eprintln!(
        "with other thresholds (handover, certificates, error ratio, queue depth, replica not ready) the same tests fail, as they must"
    );
    let _ = std::fs::remove_dir_all(&dir);
    let _ = std::fs::remove_dir_all(&dir2);
    Ok(())
}

// --- metric names in PromQL -------------------------------------------------------------

/// Where `queries` name a metric no binary exports (nor Prometheus itself: `up`): `(where,
/// metric)`; also a query that names none at all (a panel that can only ever be empty or
/// constant).
fn unknown_metrics(queries: &[(String, String)], exported: &BTreeSet<String>) -> Vec<String> {
    let mut out = Vec::new();
    for (at, q) in queries {
        let names = metric_names(q);
        if names.is_empty() {
            out.push(format!("{at}: names no metric: {q}"));
        }
        for n in names
            .iter()
            .filter(|n| !PROMETHEUS_SERIES.contains(&n.as_str()))
            .filter(|n| !exported.contains(*n))
        {
            out.push(format!("{at}: {n} is not exported by dco-operator or dco-webhook"));
        }
    }
    out
}

// --- the binaries on the local cluster --------------------------------------------------

/// `GET /metrics` at `addr`: the Content-Type and the body.
async fn scrape(addr: &str) -> Result<(String, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut s = tokio::time::timeout(Duration::from_secs(5), tokio::net::TcpStream::connect(addr))
        .await
        .with_context(|| format!("connecting to {addr}: timeout"))??;
    s.write_all(format!("GET /metrics HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes()).await?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .context("reading /metrics")??;
    let text = String::from_utf8_lossy(&buf).to_string();
    let (head, body) = text.split_once("\r\n\r\n").with_context(|| format!("no HTTP answer from {addr}"))?;
    ensure!(head.starts_with("HTTP/1.") && head.contains(" 200 "), "{addr}/metrics: {head}");
    let kind = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case("content-type")))
        .map(|(_, v)| v.trim().to_string())
        .unwrap_or_default();
    Ok((kind, body.to_string()))
}

/// One scrape of one Pod.
struct Scrape {
    pod: String,
    text: String,
    families: Vec<Exposed>,
}

impl Scrape {
    /// Samples of series `name` whose labels include every `(k, v)` of `want`.
    fn samples(&self, name: &str, want: &[(&str, &str)]) -> Vec<(BTreeMap<String, String>, f64)> {
        self.text
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| {
                let (series, value) = l.rsplit_once(' ')?;
                let (n, labels) =
                    series.split_once('{').map_or((series, ""), |(n, r)| (n, r.trim_end_matches('}')));
                if n != name {
                    return None;
                }
                let labels: BTreeMap<String, String> = labels
                    .split("\",")
                    .filter_map(|kv| kv.split_once("=\""))
                    .map(|(k, v)| (k.to_string(), v.trim_end_matches('"').to_string()))
                    .collect();
                let hit = want.iter().all(|(k, v)| labels.get(*k).map(String::as_str) == Some(*v));
                Some((labels, value.parse().ok()?)).filter(|_| hit)
            })
            .collect()
    }

    fn value(&self, name: &str, want: &[(&str, &str)]) -> Option<f64> {
        let s = self.samples(name, want);
        (s.len() == 1).then(|| s[0].1)
    }
}

async fn scrape_pods(pods: &Api<Pod>, selector: &str, port: u16, want: usize) -> Result<Vec<Scrape>> {
    let list = pods.list(&ListParams::default().labels(selector)).await?;
    let ready: Vec<Pod> = list.items.into_iter().filter(dco_tests::pod_ready).collect();
    ensure!(ready.len() == want, "{} Ready Pods with {selector}, not {want}", ready.len());
    let mut out = Vec::new();
    for p in ready {
        let pod = p.metadata.name.clone().unwrap_or_default();
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("a Pod IP")?;
        let (kind, text) = scrape(&format!("{ip}:{port}")).await?;
        ensure!(kind.starts_with("application/openmetrics-text"), "{pod}/metrics is served as {kind:?}");
        ensure!(text.trim_end().ends_with("# EOF"), "{pod}/metrics does not end in # EOF");
        out.push(Scrape { pod, families: parse_exposition(&text), text });
    }
    Ok(out)
}

/// The naming rules and the docs' table, on what a binary really serves.
fn check_families(scrapes: &[Scrape], prefix: &str) -> Result<()> {
    let docs = documented(&std::fs::read_to_string(repo_root().join("docs/operations.md"))?, prefix);
    for s in scrapes {
        let mut problems = convention_problems(&s.families, prefix);
        problems.extend(compare_with_docs(&s.families, &docs, prefix));
        ensure!(problems.is_empty(), "{}'s /metrics:\n{}", s.pod, problems.join("\n"));
    }
    Ok(())
}

fn condition<'a>(
    c: &'a CRDConversionConfig,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    c.status.as_ref()?.conditions.iter().find(|x| x.type_ == type_)
}

fn unix(t: Timestamp) -> f64 {
    t.as_millisecond() as f64 / 1000.0
}

fn crd(group: &str, v2_field: &str) -> Value {
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema("sz")},
                {"name": "v2", "served": true, "storage": true, "schema": schema(v2_field)}]}})
}

#[tokio::test]
async fn the_binaries_export_what_the_alerts_and_the_dashboard_read() -> Result<()> {
    dco_tests::map_image("dco-operator", dco_tests::workspace_binary("dco-operator")?)?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("mon").await?;
    let result = scenario(&t).await;
    let client = t.client.clone();
    let label = format!("dco-mon-test={}", t.ns);
    let lp = ListParams::default().labels(&label);
    // Cluster-scoped leftovers: the admission configuration first, servers, configs, the target.
    remove_operators(&t, std::slice::from_ref(&label)).await;
    let unfinalize = Patch::Merge(json!({"metadata": {"finalizers": null}}));
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    for c in cfgs.list(&lp).await?.items {
        let name = c.metadata.name.clone().unwrap_or_default();
        let _ = cfgs.patch(&name, &PatchParams::default(), &unfinalize).await;
        let _ = cfgs.delete(&name, &DeleteParams::default()).await;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let _ = crds.delete(&format!("widgets.{}.mon.dco.rs", t.ns), &DeleteParams::default()).await;
    t.cleanup().await;
    result
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    let label = ("dco-mon-test", ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let operators = OperatorDeployment {
        app: "dco-mon",
        replicas: 2,
        selector: &selector,
        extra_args: ["--lease-duration", "9s", "--lease-renew-interval", "2s"]
            .map(String::from)
            .into_iter()
            .chain(admission_args(&ns, "dco-mon-admission", "dco-mon"))
            .collect(),
        rust_log: "info",
        termination_grace_s: 5,
    };
    operators.apply(t, &MANAGER).await?;
    operators.ready(t, 2, WAIT).await?;

    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let (a, p) = (format!("{ns}-a"), format!("{ns}-p"));
    let server = |name: &str, spec: Value| {
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": {label.0: label.1}}, "spec": spec})
    };
    // The admission webhook answers once the first replica has registered it.
    wait_for("the default server to be admitted", WAIT, || async {
        let s = server(&a, json!({"default": true, "replicas": 2, "namespace": ns}));
        Ok(MANAGER.apply(&servers, &a, s).await.ok())
    })
    .await?;
    // A server that can never take a target: no replica.
    MANAGER.apply(&servers, &p, server(&p, json!({"replicas": 0, "namespace": ns}))).await?;

    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let group = format!("{ns}.mon.dco.rs");
    let target = format!("widgets.{group}");
    MANAGER.apply(&crds, &target, crd(&group, "size")).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let cfg = format!("{ns}-widgets");
    let config = |pin: Option<&str>| {
        let rename = json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.size", "spokePath": "spec.sz"}});
        let mut spec = json!({"targetCRD": {"name": target}, "hubVersion": "v2",
            "spokes": [{"version": "v1", "rules": [rename]}]});
        if let Some(s) = pin {
            spec["webhookServerRef"] = json!({"name": s});
        }
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": cfg, "labels": {label.0: label.1}}, "spec": spec})
    };
    MANAGER.apply(&cfgs, &cfg, config(None)).await?;
    let settled = wait_for(&format!("{cfg} to be Applied on {a}"), WAIT, || async {
        let c = cfgs.get(&cfg).await?;
        let st = c.status.clone().unwrap_or_default();
        let done = format!("{:?}", st.phase) == "Some(Applied)"
            && st.handover.as_ref().is_some_and(|h| h.destination.as_deref() == Some(a.as_str()))
            && condition(&c, "HandoverReady").is_some_and(|h| h.status == "True");
        Ok(done.then_some(c))
    })
    .await?;
    let since: Timestamp = settled
        .status
        .as_ref()
        .and_then(|s| s.handover.as_ref()?.since.as_deref()?.parse().ok())
        .context("status.handover.since")?;

    // One object, read at the spoke: the webhook converts it.
    let ar =
        |v: &str| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, v, "Widget"), "widgets");
    let hub: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v2"));
    let spoke: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v1"));
    let obj = json!({"apiVersion": format!("{group}/v2"), "kind": "Widget",
        "metadata": {"name": "w"}, "spec": {"size": "L"}});
    hub.patch("w", &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&obj)).await?;
    let read = spoke.get("w").await?;
    ensure!(read.data["spec"]["sz"] == "L", "read at v1: {:?}", read.data);

    let pods: Api<Pod> = t.api();
    let op_pods = "app=dco-mon";
    let wh_pods = format!("conversion.dco.rs/instance={a}");
    let now = unix(Timestamp::now());

    // Settled: each replica's coordinator sees every shard owned; the config's series come
    // from its owner alone.
    let ops = wait_for("both replicas to see all 32 shards owned", WAIT, || async {
        let s = scrape_pods(&pods, op_pods, 8080, 2).await?;
        let owned: f64 = s.iter().filter_map(|s| s.value("dco_operator_owned_shards", &[])).sum();
        let ok = owned == 32.0
            && s.iter().all(|s| {
                s.value("dco_operator_shards", &[]) == Some(32.0)
                    && s.value("dco_operator_unowned_shards", &[]) == Some(0.0)
            });
        Ok(ok.then_some(s))
    })
    .await?;
    check_families(&ops, "dco_operator")?;
    let t_ = target.as_str();
    let owner: Vec<&Scrape> = ops
        .iter()
        .filter(|s| !s.samples("dco_operator_config_phase", &[("target", t_)]).is_empty())
        .collect();
    ensure!(owner.len() == 1, "{} replicas report {cfg}'s phase", owner.len());
    let owner = owner[0];
    eprintln!("{cfg} is reported by {}", owner.pod);
    let ours = [("kind", "CRDConversionConfig"), ("target", t_)];
    ensure!(owner.value("dco_operator_config_phase", &[ours[0], ours[1], ("phase", "Applied")]) == Some(1.0));
    ensure!(owner.value("dco_operator_config_compile_failed", &ours) == Some(0.0));
    let entered = owner.samples("dco_operator_handover_state_entered_timestamp_seconds", &ours);
    ensure!(
        entered.len() == 1
            && entered[0].0["state"] == "SourceDropped"
            && entered[0].0["destination"] == a
            && (entered[0].1 - unix(since)).abs() < 0.001,
        "state entered: {entered:?}, status.handover.since {since}"
    );
    ensure!(owner.samples("dco_operator_handover_not_ready_since_timestamp_seconds", &ours).is_empty());
    ensure!(
        owner.value("dco_operator_target_serving_replicas", &[ours[0], ours[1], ("server", &a)]) == Some(2.0),
        "{}",
        owner.text
    );
    let secret = format!("{ns}/dco-webhook-{a}-tls");
    let leaf: Vec<f64> = ops
        .iter()
        .filter_map(|s| {
            s.value(
                "dco_operator_certificate_expiration_timestamp_seconds",
                &[("usage", "webhook"), ("secret", &secret)],
            )
        })
        .collect();
    ensure!(leaf.len() == 1 && (leaf[0] - now - 365.0 * DAY).abs() < DAY, "{secret} expires at {leaf:?}");
    for s in &ops {
        let adm =
            s.samples("dco_operator_certificate_expiration_timestamp_seconds", &[("usage", "admission")]);
        ensure!(
            adm.len() == 1
                && adm[0].0["secret"] == format!("{ns}/dco-mon-admission-tls")
                && (adm[0].1 - now - 365.0 * DAY).abs() < DAY,
            "{}'s admission certificate: {adm:?}",
            s.pod
        );
        ensure!(s.value("dco_operator_process_resident_memory_bytes", &[]).is_some_and(|b| b > 1e6));
        ensure!(s.value("dco_operator_build_info", &[("version", env!("CARGO_PKG_VERSION"))]) == Some(1.0));
    }
    eprintln!(
        "operator series: shards 32/32 owned, {t_} Applied on {a} with 2 serving replicas, leaf and admission certificates ~365 days"
    );

    let whs = scrape_pods(&pods, &wh_pods, 8080, 2).await?;
    check_families(&whs, "dco_webhook")?;
    let converted: f64 = whs
        .iter()
        .filter_map(|s| s.value("dco_webhook_requests_total", &[("target", t_), ("result", "success")]))
        .sum();
    ensure!(converted >= 1.0, "no successful review of {t_} counted");
    for s in &whs {
        ensure!(s.value("dco_webhook_registry_entries", &[("state", "served")]) == Some(1.0), "{}", s.text);
        ensure!(s.value("dco_webhook_process_resident_memory_bytes", &[]).is_some_and(|b| b > 1e6));
    }
    eprintln!("webhook series: {converted} successful reviews of {t_}, one served entry per replica");

    // Every metric the dashboard and the rules name is exported by one of the binaries.
    let mut exported = BTreeSet::new();
    for s in ops.iter().chain(&whs) {
        for f in &s.families {
            exported.extend(f.series());
        }
    }
    let boards = dashboards()?;
    let mut queries: Vec<(String, String)> = boards
        .iter()
        .flat_map(|(file, d)| {
            dashboard_queries(d).into_iter().map(move |(at, q)| (format!("{file}: {at}"), q))
        })
        .collect();
    let panels = queries.len();
    let cluster = t.cluster.clone();
    let spec = tokio::task::spawn_blocking(move || render_rules(&cluster, &[])).await??;
    queries.extend(alerts(&spec).into_iter().map(|(a, e, _)| (format!("alert {a}"), e)));
    let unknown = unknown_metrics(&queries, &exported);
    ensure!(unknown.is_empty(), "unknown metrics:\n{}", unknown.join("\n"));
    // The check can fail: a typo, and a panel that names nothing.
    let bad = [
        ("panel \"typo\" (A)".to_string(), "rate(dco_webhook_request_total[5m])".to_string()),
        ("panel \"none\" (A)".to_string(), "vector(1)".to_string()),
    ];
    ensure!(unknown_metrics(&bad, &exported).len() == 2, "{:?}", unknown_metrics(&bad, &exported));
    let named: BTreeSet<String> = queries.iter().flat_map(|(_, q)| metric_names(q)).collect();
    eprintln!(
        "{panels} queries of {} dashboards and {} alert expressions name {} metrics, all among the {} series names exported",
        boards.len(),
        queries.len() - panels,
        named.len(),
        exported.len()
    );

    // A pin to a server that cannot take the target: no move starts, HandoverReady goes
    // False, and the series the stuck alert reads appears with the pin's server.
    let pinned_at = Timestamp::now();
    MANAGER.apply(&cfgs, &cfg, config(Some(&p))).await?;
    let blocked = wait_for("the pin to show as a handover not ready", WAIT, || async {
        let s = scrape_pods(&pods, op_pods, 8080, 2).await?;
        let hit = s.iter().find_map(|s| {
            s.samples("dco_operator_handover_not_ready_since_timestamp_seconds", &ours).into_iter().next()
        });
        Ok(hit.filter(|(l, _)| l["destination"] == p))
    })
    .await?;
    eprintln!("pinned to {p}: {:?}", blocked);
    ensure!(blocked.0["reason"] == "AwaitingDestination", "{blocked:?}");
    ensure!(
        (blocked.1 - unix(pinned_at)).abs() < 30.0,
        "not ready since {} (pinned at {pinned_at})",
        blocked.1
    );
    MANAGER.apply(&cfgs, &cfg, config(None)).await?;
    wait_for("the unpinned config to be ready again", WAIT, || async {
        let s = scrape_pods(&pods, op_pods, 8080, 2).await?;
        let gone = s
            .iter()
            .all(|s| s.samples("dco_operator_handover_not_ready_since_timestamp_seconds", &ours).is_empty());
        let applied = s.iter().any(|s| {
            s.value("dco_operator_config_phase", &[ours[0], ours[1], ("phase", "Applied")]) == Some(1.0)
        });
        Ok((gone && applied).then_some(()))
    })
    .await?;

    // The target's schema drifts under the config: v2 loses spec.size, the rename no longer
    // compiles; both binaries count it, and the last good plan keeps serving.
    MANAGER.apply(&crds, &target, crd(&group, "capacity")).await?;
    wait_for("the compile failure on both sides", WAIT, || async {
        let o = scrape_pods(&pods, op_pods, 8080, 2).await?;
        let w = scrape_pods(&pods, &wh_pods, 8080, 2).await?;
        let failed = o.iter().any(|s| s.value("dco_operator_config_compile_failed", &ours) == Some(1.0));
        let counted = w.iter().all(|s| {
            s.value("dco_webhook_compile_failures_total", &[("target", t_)]).is_some_and(|n| n >= 1.0)
        });
        let serving = o.iter().any(|s| {
            s.value("dco_operator_target_serving_replicas", &[ours[0], ours[1], ("server", &a)]) == Some(2.0)
        });
        Ok((failed && counted && serving).then_some(()))
    })
    .await?;
    eprintln!(
        "schema drift: dco_operator_config_compile_failed 1, every replica's dco_webhook_compile_failures_total >= 1, still 2 serving replicas"
    );

    // The server scaled to nothing: nothing serves the target it is wired to.
    let scaled = std::time::Instant::now();
    MANAGER.apply(&servers, &a, server(&a, json!({"default": true, "replicas": 0, "namespace": ns}))).await?;
    wait_for("the target to show as not served", WAIT, || async {
        let o = scrape_pods(&pods, op_pods, 8080, 2).await?;
        let zero = o.iter().any(|s| {
            s.value("dco_operator_target_serving_replicas", &[ours[0], ours[1], ("server", &a)]) == Some(0.0)
        });
        Ok(zero.then_some(()))
    })
    .await?;
    eprintln!(
        "{a} scaled to 0: dco_operator_target_serving_replicas{{target={t_}}} 0 after {:?}",
        scaled.elapsed()
    );
    Ok(())
}

#[test]
fn the_dashboards_parse_and_have_a_panel_for_each_signal() -> Result<()> {
    let boards = dashboards()?;
    let names: Vec<&str> = boards.iter().map(|(f, _)| f.as_str()).collect();
    ensure!(names == ["dco-stability.json", "dco-target.json", "dco.json"], "dashboards: {names:?}");
    let named = |file: &str| -> BTreeSet<String> {
        let d = &boards.iter().find(|(f, _)| f == file).expect("listed above").1;
        dashboard_queries(d).iter().flat_map(|(_, q)| metric_names(q)).collect()
    };
    let wanted: [(&str, &[(&str, &str)]); 3] = [
        (
            "dco.json",
            &[
                ("moves", "dco_operator_handover_transitions_total"),
                ("reviews: rate and errors", "dco_webhook_requests_total"),
                ("reviews: latency", "dco_webhook_request_duration_seconds_bucket"),
                ("objects by target and result", "dco_webhook_conversions_total"),
                ("lossy conversions", "dco_webhook_lossy_conversions_total"),
                ("replicas not ready", "dco_webhook_ready"),
                ("servers below their replicas", "dco_operator_server_replicas_desired"),
                ("configs not applied", "dco_operator_config_not_applied_since_timestamp_seconds"),
                ("compile failures", "dco_operator_config_compile_failed"),
                ("certificate expiry", "dco_operator_certificate_expiration_timestamp_seconds"),
            ],
        ),
        (
            "dco-target.json",
            &[
                ("reviews by result", "dco_webhook_requests_total"),
                ("latency", "dco_webhook_request_duration_seconds_bucket"),
                ("objects by version pair", "dco_webhook_conversions_total"),
                ("lossy objects by version pair", "dco_webhook_lossy_conversions_total"),
                ("the server it is wired to", "dco_operator_target_serving_replicas"),
                ("that server's replicas", "dco_operator_server_replicas_ready"),
                ("plan age per replica", "dco_webhook_plan_compiled_timestamp_seconds"),
                ("handover history", "dco_operator_handover_state_entered_timestamp_seconds"),
                ("phase", "dco_operator_config_phase"),
            ],
        ),
        (
            "dco-stability.json",
            &[
                ("restarts", "dco_operator_process_start_time_seconds"),
                ("webhook restarts", "dco_webhook_process_start_time_seconds"),
                ("memory", "dco_webhook_process_resident_memory_bytes"),
                ("queue depth", "dco_operator_queue_depth"),
                ("queue wait", "dco_operator_queue_wait_seconds_bucket"),
                ("API latency", "dco_operator_api_request_duration_seconds_bucket"),
                ("API throttling", "dco_operator_api_throttled_total"),
                ("shard ownership", "dco_operator_unowned_shards"),
            ],
        ),
    ];
    for (file, signals) in wanted {
        let named = named(file);
        for (what, metric) in signals {
            ensure!(named.contains(*metric), "{file}: no panel for {what} ({metric})");
        }
    }
    // The per-target dashboard: a `target` variable from the configs, and every panel's
    // query selects it (no panel shows every target).
    let (_, d) = boards.iter().find(|(f, _)| f == "dco-target.json").expect("listed above");
    let vars = d["templating"]["list"].as_array().context("templating")?;
    ensure!(
        vars.iter().any(|v| v["name"] == "target" && v["type"] == "query"),
        "no target variable: {vars:?}"
    );
    for (at, q) in dashboard_queries(d) {
        ensure!(at.starts_with("variable") || q.contains(r#"target="$target""#), "{at} ignores $target: {q}");
    }
    // Unique uids, and ids unique within each dashboard.
    let uids: BTreeSet<&str> = boards.iter().filter_map(|(_, d)| d["uid"].as_str()).collect();
    ensure!(uids.len() == boards.len(), "dashboard uids: {uids:?}");
    Ok(())
}
