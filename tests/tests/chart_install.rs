//! The Helm chart (charts/dco, docs/installation.md) on the local cluster's real apiserver:
//!
//! * `chart_lints_renders_and_is_accepted`: `helm lint` and `helm template` are clean for the
//!   default values and for tests/chart/full-values.yaml; every value has a schema entry;
//!   the full render is of the kinds it should be, and everything in it but the
//!   prometheus-operator kinds is accepted by the apiserver (server-side dry run) in a
//!   namespace that warns on Pod Security "restricted", without a warning.
//! * `install_rbac_upgrade_uninstall`: `helm install` into a namespace enforcing
//!   "restricted"; the operator Pods and the default server become Ready; admission answers
//!   through the chart's ValidatingWebhookConfiguration; a target is wired through the default
//!   server under the chart's least-privilege RBAC; SubjectAccessReviews of the operator's and
//!   the webhook's ServiceAccounts, allowed and refused; `helm upgrade` with a changed CRD
//!   reaches the cluster through the pre-upgrade Job; `helm uninstall` leaves the CRDs, the
//!   custom resources and the wired target converting.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};

use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use dco_tests::chart::{
    Helm, HelmOutput, chart_dir, copy_dir, documents, helm, helm_install_dco_with, release_label,
    restore_crd, widget_crd,
};
use dco_tests::rbac::{Check, audit, expand};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-chart");
const WAIT: Duration = Duration::from_secs(180);
/// The render test's release (a dry run only): its cluster-scoped names differ from the
/// install test's, which runs at the same time.
const RENDER: &str = "dco-render";

fn full_values() -> PathBuf {
    dco_tests::repo_root().join("tests/chart/full-values.yaml")
}

fn kinds(docs: &[Value]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    for d in docs {
        *out.entry(d["kind"].as_str().unwrap_or("?").to_string()).or_default() += 1;
    }
    out
}

/// `helm lint` output without a warning or an error (helm reports icons as INFO).
fn lint(cluster: &dco_tests::Cluster, extra: &[&str]) -> Result<()> {
    let chart = chart_dir();
    let mut args = vec!["lint", chart.to_str().unwrap_or_default(), "--strict"];
    args.extend(extra);
    let out = helm(cluster, &args)?;
    ensure!(out.contains("1 chart(s) linted, 0 chart(s) failed"), "helm lint {extra:?}: {out}");
    ensure!(!out.contains("[WARNING]") && !out.contains("[ERROR]"), "helm lint {extra:?}: {out}");
    Ok(())
}

/// Every leaf of `values` has an entry in `schema`, and every object of the chart's own
/// values refuses unknown keys: the schema covers every value.
fn check_schema_covers(path: &str, values: &Value, schema: &Value, missing: &mut Vec<String>) {
    let Some(map) = values.as_object() else { return };
    let props = &schema["properties"];
    if schema["type"] == "object" && props.is_object() && schema["additionalProperties"] != json!(false) {
        missing.push(format!("{path}: additionalProperties is not false"));
    }
    if !props.is_object() {
        // A free-form Kubernetes object (affinity, resources' maps): the apiserver checks it.
        return;
    }
    for (k, v) in map {
        let p = format!("{path}.{k}");
        match props.get(k) {
            None => missing.push(format!("{p}: no schema entry")),
            Some(s) => {
                if s.get("description").and_then(Value::as_str).is_none_or(str::is_empty)
                    && path.matches('.').count() < 2
                {
                    missing.push(format!("{p}: no description"));
                }
                check_schema_covers(&p, v, s, missing);
            }
        }
    }
}

/// Applies `docs` (each names its namespace, as the chart renders them) with the cluster's
/// kubectl as a server-side dry run; returns stderr (the warnings).
fn dry_run_apply(env: &TestEnv, docs: &[Value]) -> Result<String> {
    use std::io::Write;
    let stream: String =
        docs.iter().map(|d| format!("---\n{}", serde_yaml::to_string(d).unwrap_or_default())).collect();
    let mut child = Command::new(env.cluster.kubectl())
        .arg("--kubeconfig")
        .arg(&env.cluster.kubeconfig)
        .args([
            "apply",
            "--dry-run=server",
            "--server-side",
            "--force-conflicts",
            "--field-manager",
            &MANAGER,
            "-f",
            "-",
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    child.stdin.take().context("kubectl stdin")?.write_all(stream.as_bytes())?;
    let out = child.wait_with_output()?;
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    ensure!(
        out.status.success(),
        "the apiserver refused the render: {stderr}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    Ok(stderr)
}

async fn label_namespace(client: &kube::Client, ns: &str, mode: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                format!("pod-security.kubernetes.io/{mode}"): "restricted",
                format!("pod-security.kubernetes.io/{mode}-version"): "latest"}}})),
        )
        .await?;
    Ok(())
}

#[tokio::test]
async fn chart_lints_renders_and_is_accepted() -> Result<()> {
    let t = TestEnv::new("chartrender").await?;
    let cluster = t.cluster.clone();
    let full = full_values();
    let full_s = full.to_string_lossy().to_string();
    lint(&cluster, &[])?;
    lint(&cluster, &["--values", &full_s])?;

    // The schema refuses what is not a value, and a value of the wrong shape.
    let chart = chart_dir().to_string_lossy().to_string();
    for (bad, why) in [
        ("replica=3", "additional properties 'replica' not allowed"),
        ("operator.leaseDuration=5parsecs", "does not match pattern"),
        ("defaultServer.spec.replica=3", "additional properties 'replica' not allowed"),
        ("operator.logFormat=xml", "value must be one of"),
    ] {
        let err = helm(&cluster, &["template", "t", &chart, "--set", bad]).expect_err(bad).to_string();
        ensure!(err.contains(why), "--set {bad}: {err}");
    }
    let schema: Value =
        serde_json::from_str(&std::fs::read_to_string(chart_dir().join("values.schema.json"))?)?;
    let values: Value = serde_yaml::from_str(&std::fs::read_to_string(chart_dir().join("values.yaml"))?)?;
    let full_doc: Value = serde_yaml::from_str(&std::fs::read_to_string(&full)?)?;
    let mut missing = Vec::new();
    check_schema_covers("", &values, &schema, &mut missing);
    check_schema_covers("", &full_doc, &schema, &mut missing);
    ensure!(missing.is_empty(), "values.schema.json does not cover: {missing:#?}");
    // defaultServer.spec lists exactly the CRD's spec fields (but `default`, the chart's).
    let crd = serde_json::to_value(dco_api::crds().remove(2))?;
    let crd_spec =
        &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"];
    let want: BTreeSet<&String> =
        crd_spec.as_object().context("CRD spec properties")?.keys().filter(|k| *k != "default").collect();
    let have: BTreeSet<&String> = schema["properties"]["defaultServer"]["properties"]["spec"]["properties"]
        .as_object()
        .context("defaultServer.spec properties")?
        .keys()
        .collect();
    ensure!(have == want, "defaultServer.spec in values.schema.json {have:?} != the CRD's spec {want:?}");

    // The default render.
    let default = documents(&helm(&cluster, &["template", RENDER, &chart, "--namespace", &t.ns])?)?;
    let k = kinds(&default);
    for (kind, n) in [
        ("Deployment", 1),
        ("ServiceAccount", 2),
        ("ClusterRole", 3),
        ("ClusterRoleBinding", 2),
        // admission and the operator's metrics (with every install)
        ("Service", 2),
        ("ValidatingWebhookConfiguration", 1),
        ("ConversionWebhookServer", 1),
        ("PodDisruptionBudget", 1),
        ("Job", 1),
    ] {
        ensure!(k.get(kind) == Some(&n), "default render: {n} {kind} expected, got {k:?}");
    }
    for absent in
        ["ServiceMonitor", "PodMonitor", "PrometheusRule", "NetworkPolicy", "MutatingWebhookConfiguration"]
    {
        ensure!(!k.contains_key(absent), "default render has a {absent}: {k:?}");
    }
    let deploy = default.iter().find(|d| d["kind"] == "Deployment").context("Deployment")?;
    ensure!(deploy["spec"]["replicas"] == 2, "2 operator replicas by default");
    let args: Vec<&str> = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .context("args")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    for want in [
        "--shards=32",
        "--lease-duration=30s",
        "--lease-renew-interval=10s",
        &format!("--admission-service={}/{RENDER}-admission", t.ns),
        "--admission-webhook-name=dco-operator-admission",
        "--webhook-image=dco-webhook:v0.1.0",
    ] {
        ensure!(args.contains(&want), "default args {args:?} lack {want}");
    }
    ensure!(
        deploy["spec"]["template"]["spec"]["containers"][0]["image"] == "dco-operator:v0.1.0",
        "the image repository ends in dco-operator and the tag is v<appVersion>"
    );
    // The VWC is rendered without webhooks: the operator fills them in.
    let vwc = default.iter().find(|d| d["kind"] == "ValidatingWebhookConfiguration").context("VWC")?;
    ensure!(
        vwc.get("webhooks").is_none(),
        "the chart's ValidatingWebhookConfiguration carries no webhooks: {vwc}"
    );
    ensure!(!args.contains(&"--xrd-guard"), "the XRD guard is off by default: {args:?}");
    // The CRD Job's rights are dco's three CRDs by name.
    let crd_role = default
        .iter()
        .find(|d| d["kind"] == "ClusterRole" && d["metadata"]["name"] == format!("{RENDER}-crds"))
        .context("the CRD Job's ClusterRole")?;
    let names: BTreeSet<&str> = crd_role["rules"][0]["resourceNames"]
        .as_array()
        .context("resourceNames")?
        .iter()
        .filter_map(Value::as_str)
        .collect();
    let dco_names: Vec<String> = dco_api::crds().iter().filter_map(|c| c.metadata.name.clone()).collect();
    ensure!(names == dco_names.iter().map(String::as_str).collect(), "the CRD Job may touch {names:?}");
    ensure!(crd_role["rules"].as_array().map(Vec::len) == Some(1), "one rule: {crd_role}");

    // The full render: every optional part, of the right kinds.
    let full_docs = documents(&helm(
        &cluster,
        &["template", RENDER, &chart, "--namespace", &t.ns, "--values", &full_s],
    )?)?;
    let k = kinds(&full_docs);
    let dashboards: Vec<PathBuf> = std::fs::read_dir(chart_dir().join("files/dashboards"))
        .map(|d| {
            d.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.extension().is_some_and(|e| e == "json"))
                .collect()
        })
        .unwrap_or_default();
    for (kind, n) in [
        ("ServiceMonitor", 1),
        ("PodMonitor", 1),
        ("PrometheusRule", 1),
        ("NetworkPolicy", 2),
        ("Service", 2),
        ("ConfigMap", 1 + dashboards.len()),
        // Workloads in the release namespace, the default server's (default) and
        // rbac.serverNamespaces' (kube-public); Leases, admission, Events.
        ("RoleBinding", 6),
        // The admission configurations: validating, and the XRD guard's (admission.xrdGuard).
        ("ValidatingWebhookConfiguration", 1),
        ("MutatingWebhookConfiguration", 1),
    ] {
        ensure!(k.get(kind) == Some(&n), "full render: {n} {kind} expected, got {k:?}");
    }
    for d in &full_docs {
        let kind = d["kind"].as_str().unwrap_or_default();
        let api = d["apiVersion"].as_str().unwrap_or_default();
        if matches!(kind, "ServiceMonitor" | "PodMonitor" | "PrometheusRule") {
            ensure!(api == "monitoring.coreos.com/v1", "{kind} is {api}");
        }
    }
    // admission.xrdGuard: the flag, the guard's configuration without webhooks (the operator
    // fills it in), and the right to patch that one configuration.
    let mwc = full_docs.iter().find(|d| d["kind"] == "MutatingWebhookConfiguration").context("MWC")?;
    let vwc = full_docs.iter().find(|d| d["kind"] == "ValidatingWebhookConfiguration").context("VWC")?;
    let vwc_name = vwc["metadata"]["name"].as_str().context("the VWC has no name")?;
    ensure!(
        mwc["metadata"]["name"] == format!("{vwc_name}-xrd-guard").as_str() && mwc.get("webhooks").is_none(),
        "the XRD guard's configuration is named after the VWC and carries no webhooks: {mwc}"
    );
    let full_deploy = full_docs.iter().find(|d| d["kind"] == "Deployment").context("Deployment")?;
    ensure!(
        full_deploy["spec"]["template"]["spec"]["containers"][0]["args"]
            .as_array()
            .is_some_and(|a| a.iter().any(|x| x == "--xrd-guard")),
        "admission.xrdGuard.enabled passes --xrd-guard"
    );
    let guard_rule = full_docs
        .iter()
        .filter(|d| d["kind"] == "ClusterRole")
        .flat_map(|d| d["rules"].as_array().cloned().unwrap_or_default())
        .find(|r| r["resources"] == json!(["mutatingwebhookconfigurations"]))
        .context("a ClusterRole rule on mutatingwebhookconfigurations")?;
    ensure!(
        guard_rule["resourceNames"] == json!([format!("{vwc_name}-xrd-guard")])
            && guard_rule["verbs"] == json!(["get", "patch"]),
        "the operator may get and patch the guard's configuration only: {guard_rule}"
    );
    let rule = full_docs.iter().find(|d| d["kind"] == "PrometheusRule").context("PrometheusRule")?;
    let groups = rule["spec"]["groups"].as_array().context("PrometheusRule spec.groups")?;
    ensure!(!groups.is_empty(), "no rule groups");
    for g in groups {
        for r in g["rules"].as_array().context("rules")? {
            ensure!(r["expr"].is_string() && (r["alert"].is_string() || r["record"].is_string()), "rule {r}");
            ensure!(!r["expr"].as_str().unwrap_or_default().contains("{{ .Values"), "untemplated rule {r}");
        }
    }
    let sm = full_docs.iter().find(|d| d["kind"] == "ServiceMonitor").context("ServiceMonitor")?;
    let metrics_svc = full_docs
        .iter()
        .find(|d| {
            d["kind"] == "Service" && d["metadata"]["labels"]["app.kubernetes.io/component"] == "metrics"
        })
        .context("the metrics Service")?;
    for (k, v) in sm["spec"]["selector"]["matchLabels"].as_object().context("ServiceMonitor selector")? {
        ensure!(
            &metrics_svc["metadata"]["labels"][k] == v,
            "the ServiceMonitor's {k}={v} does not select the metrics Service"
        );
    }
    ensure!(
        sm["spec"]["endpoints"][0]["port"] == metrics_svc["spec"]["ports"][0]["name"],
        "ServiceMonitor port"
    );
    ensure!(sm["metadata"]["labels"]["release"] == "prometheus", "monitoring.serviceMonitor.labels");
    for path in &dashboards {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or_default();
        let cm = full_docs
            .iter()
            .find(|d| d["kind"] == "ConfigMap" && d["data"].get(name).is_some())
            .with_context(|| format!("no dashboard ConfigMap holds {name}"))?;
        ensure!(cm["metadata"]["labels"]["grafana_dashboard"] == "1", "{name}: sidecar label");
        ensure!(
            cm["data"][name].as_str().map(str::trim) == Some(std::fs::read_to_string(path)?.trim()),
            "{name}: content"
        );
    }
    let server = full_docs.iter().find(|d| d["kind"] == "ConversionWebhookServer").context("server")?;
    ensure!(
        server["metadata"]["labels"]["team"] == "platform",
        "the selector's label is on the default server"
    );
    ensure!(server["spec"]["default"] == true, "the default server is the default");

    // The apiserver accepts all of it but the prometheus-operator kinds (not installed here),
    // and Pod Security "restricted" finds nothing to warn about in the Pod templates.
    // dco's CRDs for the server's dry run — applied only where missing, so this test never
    // rewrites a CRD the install test (in parallel) has just upgraded.
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    for c in dco_api::crds() {
        if crds.get_opt(c.metadata.name.as_deref().unwrap_or_default()).await?.is_none() {
            dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
            break;
        }
    }
    label_namespace(&t.client, &t.ns, "warn").await?;
    let accepted: Vec<Value> =
        full_docs.into_iter().filter(|d| d["apiVersion"] != "monitoring.coreos.com/v1").collect();
    let warnings = dry_run_apply(&t, &accepted)?;
    ensure!(!warnings.contains("PodSecurity"), "Pod Security warnings: {warnings}");
    let accepted_default: Vec<Value> = default.into_iter().collect();
    let warnings = dry_run_apply(&t, &accepted_default)?;
    ensure!(!warnings.contains("PodSecurity"), "Pod Security warnings (default values): {warnings}");
    eprintln!("full render: {} objects accepted by a dry run ({k:?})", accepted.len());
    // The chart's CRDs as helm's first install creates them: the apiserver warns about nothing
    // in their schemas (an unknown `format`, such as schemars' uint32, would be printed by every
    // `helm install` of a cluster without them).
    let mut chart_crds = Vec::new();
    for e in std::fs::read_dir(chart_dir().join("crds"))? {
        chart_crds.extend(documents(&std::fs::read_to_string(e?.path())?)?);
    }
    let warnings = dry_run_apply(&t, &chart_crds)?;
    ensure!(!warnings.contains("Warning"), "the apiserver warned about the chart's CRDs: {warnings}");
    eprintln!("the chart's {} CRDs: accepted by a dry run without a warning", chart_crds.len());
    t.cleanup().await;
    Ok(())
}

fn widgets(client: &kube::Client, group: &str, version: &str, ns: &str) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, "Widget");
    Api::namespaced_with(client.clone(), ns, &ApiResource::from_gvk_with_plural(&gvk, "widgets"))
}

/// Reads widget `w1` at v1 (the webhook converts it from the stored v2) until it answers
/// `sizeGB = gb`.
async fn converts(client: &kube::Client, group: &str, ns: &str, gb: i64) -> Result<()> {
    let v1 = widgets(client, group, "v1", ns);
    wait_for("widget w1 read at v1 through the conversion webhook", WAIT, || async {
        Ok(match v1.get("w1").await {
            Ok(o) if o.data["spec"]["sizeGB"] == gb => Some(()),
            Ok(o) => bail!("w1 at v1 is {}", o.data["spec"]),
            Err(_) => None,
        })
    })
    .await
}

/// The chart's `operator.metricsPort`: each operator Pod serves `/metrics` there on its address.
const OPERATOR_METRICS_PORT: u16 = 8080;

/// Each of `pods`' (name, `/metrics` text), each Pod Ready and in its first container start.
/// An operator turns Ready only once its caches synced, right before it starts its controllers
/// (operator/src/runtime/mod.rs, shutdown.rs), so Ready with no restart means the one process
/// whose counters are read started its controllers.
async fn operator_scrapes(pods_api: &Api<Pod>, pods: &[Pod]) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for p in pods {
        let name = p.metadata.name.clone().context("an operator Pod without a name")?;
        let p = pods_api.get(&name).await?;
        let restarts: i32 = p
            .status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .map(|cs| cs.iter().map(|c| c.restart_count).sum())
            .unwrap_or(0);
        ensure!(
            dco_tests::pod_ready(&p) && restarts == 0,
            "operator Pod {name}: Ready {}, {restarts} restarts: its controllers did not start in one process",
            dco_tests::pod_ready(&p)
        );
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("an operator Pod without an IP")?;
        let (code, body) = dco_tests::http_get(&format!("{ip}:{OPERATOR_METRICS_PORT}"), "/metrics").await?;
        ensure!(code == 200, "GET {name}'s /metrics: {code}");
        out.push((name, body));
    }
    Ok(out)
}

/// The samples of `dco_operator_watch_errors_total` (docs/operations.md, "Metrics") in a
/// scrape, as (labels, value); the family itself must be there, so "no sample" is a reading.
fn watch_errors(body: &str) -> Result<Vec<(String, f64)>> {
    ensure!(
        body.lines().any(|l| l == "# TYPE dco_operator_watch_errors counter"),
        "the operator exports no dco_operator_watch_errors family"
    );
    Ok(body
        .lines()
        .filter_map(|l| {
            let (labels, value) = l.strip_prefix("dco_operator_watch_errors_total{")?.split_once("} ")?;
            Some((labels.to_string(), value.trim().parse().ok()?))
        })
        .collect())
}

/// Lines of a helm command's stderr that warn: none on a clean install or upgrade. Both helms
/// print the apiserver's warnings through client-go (`warnings.go] "Warning: ..."`). One line
/// is not a warning about the release: helm 4's wait ends its own watches, and client-go's
/// reflector sometimes logs that end (`reflector.go] "Warning: watch ended with error" ...
/// context canceled`); it is left out and counted ([`watch_ends`]).
fn warnings(out: &HelmOutput) -> Vec<&str> {
    out.stderr.lines().filter(|l| l.to_lowercase().contains("warn") && !is_watch_end(l)).collect()
}

fn is_watch_end(line: &str) -> bool {
    line.contains("reflector.go")
        && line.contains("watch ended with error")
        && line.contains("context canceled")
}

fn watch_ends(out: &HelmOutput) -> usize {
    out.stderr.lines().filter(|l| is_watch_end(l)).count()
}

/// What a helm upgrade or rollback may leave alone but never rewrite: the admission
/// configuration (generation, resourceVersion, the webhooks the operator wrote), the default
/// server (generation and spec) and the operator Deployment's generation.
#[derive(Debug, PartialEq)]
struct Owned {
    vwc: (Option<i64>, Option<String>, Value),
    server: (Option<i64>, Value),
    operator_generation: Option<i64>,
}

impl Owned {
    async fn read(
        vwcs: &Api<ValidatingWebhookConfiguration>,
        vwc: &str,
        servers: &Api<ConversionWebhookServer>,
        server: &str,
        deploy: &Api<Deployment>,
        operator: &str,
    ) -> Result<Owned> {
        let v = vwcs.get(vwc).await?;
        let hooks = v.webhooks.clone().unwrap_or_default();
        ensure!(
            hooks.len() == 2
                && hooks.iter().all(|h| h.client_config.ca_bundle.as_ref().is_some_and(|b| !b.0.is_empty())),
            "{vwc} holds {} webhooks, caBundles {:?}: the operator's two webhooks with their caBundle are gone",
            hooks.len(),
            hooks.iter().map(|h| h.client_config.ca_bundle.as_ref().map(|b| b.0.len())).collect::<Vec<_>>()
        );
        let s = servers.get(server).await?;
        Ok(Owned {
            vwc: (v.metadata.generation, v.metadata.resource_version.clone(), serde_json::to_value(&hooks)?),
            server: (s.metadata.generation, serde_json::to_value(&s.spec)?),
            operator_generation: deploy.get(operator).await?.metadata.generation,
        })
    }
}

/// `manager:operation` of each field manager of an object, for the log and the helm 3 / 4
/// difference.
fn managers_of(meta: &kube::api::ObjectMeta) -> Vec<String> {
    meta.managed_fields
        .iter()
        .flatten()
        .map(|m| format!("{}:{}", m.manager.as_deref().unwrap_or("?"), m.operation.as_deref().unwrap_or("?")))
        .collect()
}

/// One lifecycle at a time: each changes dco's ConversionWebhookServer CRD through the
/// upgrade's Job and counts every dco CRD's generation.
static LIFECYCLE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn install_rbac_upgrade_uninstall() -> Result<()> {
    lifecycle(Helm::V3, "chart").await
}

/// The same lifecycle under helm 4, which applies server-side: helm and the operator write
/// the same objects (the admission configuration, the default server) without a conflict.
#[tokio::test]
async fn install_rbac_upgrade_uninstall_helm4() -> Result<()> {
    lifecycle(Helm::V4, "chart4").await
}

async fn lifecycle(helm: Helm, prefix: &str) -> Result<()> {
    let _one = LIFECYCLE.lock().await;
    let t = TestEnv::new(prefix).await?;
    let result = lifecycle_in(helm, &t).await;
    // dco's CRD back as crdgen has it, however the run ended: the upgrade changed it in a
    // cluster other tests share (and helm 4 would not install over it).
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    restore_crd(&crds, CWS_CRD, &MANAGER).await?;
    result?;
    t.cleanup().await;
    Ok(())
}

/// The CRD the upgrade changes (a printer column added, one removed).
const CWS_CRD: &str = "conversionwebhookservers.conversion.dco.rs";

async fn lifecycle_in(helm: Helm, t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    let label = release_label(t);
    // Names of this run's own: a failed run leaves cluster-scoped objects (ClusterRoles, the
    // kept server) that must not stop the next one.
    let release = format!("dco-{}", ns.rsplit('-').next().unwrap_or("run"));
    let server_name = format!("{ns}-default");
    let server = server_name.as_str();
    let workload = format!("dco-webhook-{server}");
    let group = format!("{ns}.chart.example");
    let target = format!("widgets.{group}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let configs: Api<CRDConversionConfig> = Api::all(client.clone());
    let pods: Api<Pod> = t.api();

    // The namespace enforces "restricted" (a violating Pod is refused: the check is real).
    label_namespace(&client, &ns, "enforce").await?;
    let bad: Pod =
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "violates"},
        "spec": {"containers": [{"name": "c", "image": "dco-webhook"}]}}))?;
    match pods.create(&PostParams::default(), &bad).await {
        Err(kube::Error::Api(e)) if e.code == 403 && e.message.contains("violates PodSecurity") => {}
        other => bail!("a Pod without a security context was not refused in {ns}: {other:?}"),
    }

    // Install. The webhook drain is short so the test's rollouts are quick.
    let values = json!({"webhook": {"args": ["--drain-period=5s"]}, "defaultServer": {"name": server}});
    let started = Instant::now();
    let out =
        helm_install_dco_with(helm, t, &release, &chart_dir(), &values).await.context("helm install")?;
    let installed = started.elapsed();
    ensure!(warnings(&out).is_empty(), "{helm:?} helm install warned: {:?}", warnings(&out));
    // client-go's notes of the ends of helm's own watches (helm 4), over every helm command.
    let mut watch_end_lines = watch_ends(&out);
    let operators = dco_tests::wait_ready_pods(&pods, "app.kubernetes.io/name=dco-operator", 2, WAIT).await?;
    wait_for("the default server to be Available with 2 ready replicas", WAIT, || async {
        let st = servers.get(server).await?.status.unwrap_or_default();
        let available = st.conditions.iter().any(|c| c.type_ == "Available" && c.status == "True");
        Ok((available && st.ready_replicas == 2).then_some(()))
    })
    .await?;
    let server_ready = started.elapsed();
    let webhook_pods =
        dco_tests::wait_ready_pods(&pods, &format!("conversion.dco.rs/instance={server}"), 2, WAIT).await?;
    eprintln!(
        "helm install returned after {installed:?}; the default server was Available with 2 Ready replicas {server_ready:?} after the start; operator Pods {:?}",
        operators.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>()
    );
    for p in operators.iter().chain(&webhook_pods) {
        let spec = p.spec.clone().unwrap_or_default();
        let sc = spec.containers[0].security_context.clone().unwrap_or_default();
        ensure!(
            spec.security_context.and_then(|s| s.run_as_non_root) == Some(true)
                && sc.allow_privilege_escalation == Some(false)
                && sc.read_only_root_filesystem == Some(true),
            "{:?} was admitted without the restricted settings",
            p.metadata.name
        );
    }

    // Admission answers through the chart's configuration, which the operator filled in.
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    // Its name, as the chart passes it to the operator (derived from the selector as
    // registration.rs derives it).
    let deploy: Api<Deployment> = t.api();
    let args = |d: Deployment| -> Vec<String> {
        d.spec.template.spec.map(|s| s.containers[0].args.clone().unwrap_or_default()).unwrap_or_default()
    };
    let vwc_name = args(deploy.get(&format!("{release}-operator")).await?)
        .iter()
        .find_map(|a| a.strip_prefix("--admission-webhook-name=").map(str::to_string))
        .context("the operator's --admission-webhook-name")?;
    ensure!(
        vwc_name.starts_with("dco-operator-admission-") && vwc_name.len() == 31,
        "webhook name {vwc_name}"
    );
    let vwc =
        wait_for("the operator to fill in the chart's ValidatingWebhookConfiguration", WAIT, || async {
            let v = vwcs.get(&vwc_name).await?;
            let hooks = v.webhooks.clone().unwrap_or_default();
            Ok((hooks.len() == 2 && hooks.iter().all(|h| h.client_config.ca_bundle.is_some())).then_some(v))
        })
        .await?;
    let managers = managers_of(&vwc.metadata);
    // helm 3 patches (Update), helm 4 applies (Apply); the operator patches the webhooks in.
    let helm_writes = match helm {
        Helm::V3 => "helm:Update",
        Helm::V4 => "helm:Apply",
    };
    ensure!(
        managers.iter().any(|m| m == helm_writes) && managers.iter().any(|m| m == "dco-operator:Update"),
        "{vwc_name} managers {managers:?}, want {helm_writes} and dco-operator:Update"
    );
    let server_managers = managers_of(&servers.get(server).await?.metadata);
    eprintln!("{helm:?}: {vwc_name} managed by {managers:?}; the default server by {server_managers:?}");
    let installed_spec = serde_json::to_value(servers.get(server).await?.spec)?;
    let second_default: ConversionWebhookServer = serde_json::from_value(json!({
        "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": format!("{ns}-second"), "labels": {&label.0: &label.1}},
        "spec": {"default": true, "namespace": ns}}))?;
    let refused = wait_for("admission to refuse a second default", WAIT, || async {
        match servers.create(&PostParams { dry_run: true, ..Default::default() }, &second_default).await {
            Err(kube::Error::Api(e)) if e.message.contains("already has spec.default: true") => {
                Ok(Some(e.message))
            }
            Err(kube::Error::Api(e)) if e.message.contains("failed calling webhook") => Ok(None),
            other => bail!("a second default server was not refused by admission: {other:?}"),
        }
    })
    .await?;
    eprintln!("admission: {refused}");

    // A target wired through the default server, under the chart's RBAC.
    MANAGER.apply(&crds, &target, widget_crd(&group, &label)).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let hub = widgets(&client, &group, "v2", &ns);
    let w1 = json!({"apiVersion": format!("{group}/v2"), "kind": "Widget", "metadata": {"name": "w1"},
        "spec": {"size": {"gb": 7}}});
    MANAGER.apply(&hub, "w1", w1).await?;
    let cfg = format!("{ns}-widgets");
    MANAGER.apply(&configs, &cfg, json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": cfg, "labels": {&label.0: &label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.size.gb", "spokePath": "spec.sizeGB"}}]}]}}))
    .await?;
    wait_for("the config to settle on the default server", WAIT, || async {
        let c = configs.get(&cfg).await?;
        let st = c.status.unwrap_or_default();
        let settled = st
            .handover
            .as_ref()
            .is_some_and(|h| serde_json::to_value(h.state).ok() == Some(json!("SourceDropped")));
        Ok((settled && st.assigned_webhook_server.as_deref() == Some(server)).then_some(()))
    })
    .await?;
    let wired = crds.get(&target).await?;
    let svc = dco_tests::conversion_service(&wired);
    ensure!(svc == Some((ns.clone(), workload.clone())), "the target is wired to {svc:?}");
    converts(&client, &group, &ns, 7).await?;
    // Both replicas started their controllers, and no watch of either was refused by RBAC.
    let scrapes = operator_scrapes(&pods, &operators).await?;
    ensure!(scrapes.len() == 2, "{} operator replicas scraped", scrapes.len());
    for (name, body) in &scrapes {
        let errors = watch_errors(body)?;
        eprintln!("operator {name}: Ready, no restart; watch errors {errors:?}");
        let forbidden: Vec<_> =
            errors.iter().filter(|(l, v)| l.contains("reason=\"forbidden\"") && *v > 0.0).collect();
        ensure!(forbidden.is_empty(), "the operator {name} was refused by RBAC: {forbidden:?}");
    }
    eprintln!("target {target} wired to {workload} and converting; no watch of the operator refused by RBAC");

    // A server in a namespace the chart gave the operator no rights in: refused in its status
    // before any write there (tests/tests/chart_rbac.rs has the Event too). Then it deletes cleanly.
    let elsewhere = format!("{ns}-elsewhere");
    MANAGER
        .apply(
            &servers,
            &elsewhere,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1",
        "kind": "ConversionWebhookServer", "metadata": {"name": elsewhere, "labels": {&label.0: &label.1}},
        "spec": {"namespace": "default", "replicas": 1}}),
        )
        .await?;
    let message = wait_for("the server in namespace default to be refused", WAIT, || async {
        let s = servers.get(&elsewhere).await?;
        Ok(s.status.iter().flat_map(|st| st.conditions.iter()).find_map(|c| {
            (c.type_ == "Available" && c.status == "False" && c.reason == "NamespaceNotWatched")
                .then(|| c.message.clone())
        }))
    })
    .await?;
    ensure!(message.contains("rbac.serverNamespaces"), "the refusal names no chart value: {message}");
    eprintln!("out of scope: {message}");
    servers.delete(&elsewhere, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&servers, &elsewhere, WAIT).await?;

    // RBAC, asked of the real apiserver.
    let operator_sa = (ns.clone(), format!("{release}-operator"));
    let webhook_sa = (ns.clone(), workload.clone());
    let dco = "conversion.dco.rs";
    let dco_kinds = ["crdconversionconfigs", "xrdconversionconfigs", "conversionwebhookservers"];
    let status =
        ["crdconversionconfigs/status", "xrdconversionconfigs/status", "conversionwebhookservers/status"];
    let admission_svc = format!("{release}-admission");
    let (ca_secret, tls_secret) = (format!("{admission_svc}-ca"), format!("{admission_svc}-tls"));
    let n = Some(ns.as_str());
    let mut allowed: Vec<Check> = Vec::new();
    allowed.extend(expand(&["get", "list", "watch", "patch"], dco, &dco_kinds, None));
    allowed.extend(expand(&["patch"], dco, &status, None));
    allowed.extend(expand(
        &["get", "list", "watch", "patch"],
        "apiextensions.k8s.io",
        &["customresourcedefinitions"],
        None,
    ));
    allowed.extend(expand(
        &["get", "list", "watch", "patch"],
        "apiextensions.crossplane.io",
        &["compositeresourcedefinitions"],
        None,
    ));
    allowed.extend(expand(
        &["create", "patch", "list", "delete"],
        "rbac.authorization.k8s.io",
        &["clusterroles", "clusterrolebindings"],
        None,
    ));
    // The release creates its admission configuration; the operator only fills it in.
    for v in ["get", "patch"] {
        allowed.push((
            (v, "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
            None,
            Some(vwc_name.as_str()),
        ));
    }
    // Watched (by label) and written only in the server namespaces (--server-namespaces).
    allowed.extend(expand(&["create", "patch", "list", "watch", "delete"], "apps", &["deployments"], n));
    allowed.extend(expand(&["create", "patch", "list", "watch", "delete"], "", &["services"], n));
    allowed.extend(expand(&["create", "patch", "list", "delete"], "", &["serviceaccounts"], n));
    allowed.extend(expand(&["get", "create", "patch", "list", "watch", "delete"], "", &["secrets"], n));
    allowed.extend(expand(
        &["create", "patch", "list", "delete"],
        "rbac.authorization.k8s.io",
        &["roles", "rolebindings"],
        n,
    ));
    allowed.extend(expand(
        &["create", "patch", "list", "delete"],
        "autoscaling",
        &["horizontalpodautoscalers"],
        n,
    ));
    allowed.extend(expand(&["create", "patch", "list", "delete"], "policy", &["poddisruptionbudgets"], n));
    allowed.extend(expand(&["get", "create", "patch", "delete"], "cert-manager.io", &["certificates"], n));
    allowed.extend(expand(
        &["get", "list", "watch", "create", "update", "patch", "delete"],
        "coordination.k8s.io",
        &["leases"],
        n,
    ));
    allowed.extend(expand(&["get", "list"], "", &["pods"], n));
    allowed.extend(expand(&["create", "patch"], "events.k8s.io", &["events"], n));
    allowed.extend(expand(&["create", "patch"], "events.k8s.io", &["events"], Some("default")));
    for v in ["get", "update"] {
        for s in [&ca_secret, &tls_secret] {
            allowed.push(((v, "", "secrets"), n, Some(s.as_str())));
        }
    }
    let ks = Some("kube-system");
    let mut refused: Vec<Check> = vec![
        (("get", "", "secrets"), ks, Some("any")),
        (("create", "", "secrets"), ks, None),
        (("delete", "", "secrets"), ks, None),
        (("update", "", "secrets"), ks, None),
        (("create", "apps", "deployments"), ks, None),
        (("patch", "apps", "deployments"), ks, None),
        (("delete", "", "services"), ks, None),
        (("create", "rbac.authorization.k8s.io", "roles"), ks, None),
        (("create", "coordination.k8s.io", "leases"), ks, None),
        (("create", "events.k8s.io", "events"), ks, None),
        (("list", "cert-manager.io", "certificates"), None, None),
        (("get", "cert-manager.io", "certificates"), ks, None),
        (("create", "apiextensions.k8s.io", "customresourcedefinitions"), None, None),
        (("update", "apiextensions.k8s.io", "customresourcedefinitions"), None, Some(target.as_str())),
        (("delete", "apiextensions.k8s.io", "customresourcedefinitions"), None, Some(target.as_str())),
        (("delete", dco, "conversionwebhookservers"), None, Some(server)),
        (("create", dco, "crdconversionconfigs"), None, None),
        (("update", dco, "conversionwebhookservers"), None, Some(server)),
        (("create", "", "pods/exec"), n, None),
        (("delete", "", "pods"), n, None),
        (("list", "", "pods"), None, None),
        (("get", "", "configmaps"), n, None),
        (("escalate", "rbac.authorization.k8s.io", "clusterroles"), None, None),
        (("bind", "rbac.authorization.k8s.io", "clusterroles"), None, Some("cluster-admin")),
        (("impersonate", "", "serviceaccounts"), n, None),
        (("patch", "admissionregistration.k8s.io", "validatingwebhookconfigurations"), None, Some("other")),
        (
            ("create", "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
            None,
            Some(vwc_name.as_str()),
        ),
        (
            ("delete", "admissionregistration.k8s.io", "validatingwebhookconfigurations"),
            None,
            Some(vwc_name.as_str()),
        ),
        (("list", "admissionregistration.k8s.io", "validatingwebhookconfigurations"), None, None),
        (("patch", "admissionregistration.k8s.io", "mutatingwebhookconfigurations"), None, None),
        (("get", "", "nodes"), None, None),
        (("create", "", "namespaces"), None, None),
        (("delete", "", "namespaces"), None, Some(ns.as_str())),
        (("update", "", "secrets"), n, Some("someone-elses")),
        // No cluster-wide reads of namespaced objects: the watches are per namespace.
        (("list", "", "secrets"), None, None),
        (("watch", "", "secrets"), None, None),
        (("list", "", "secrets"), ks, None),
        (("watch", "", "secrets"), ks, None),
        (("list", "", "services"), None, None),
        (("watch", "apps", "deployments"), None, None),
        (("list", "coordination.k8s.io", "leases"), None, None),
        (("watch", "coordination.k8s.io", "leases"), ks, None),
    ];
    for (what, ns, name) in &refused {
        eprintln!("operator may not: {} {}/{} ns={ns:?} name={name:?}", what.0, what.1, what.2);
    }
    let mut wrong = audit(&client, &operator_sa, &allowed, true).await?;
    let over = audit(&client, &operator_sa, &refused, false).await?;
    ensure!(
        wrong.is_empty() && over.is_empty(),
        "operator ServiceAccount: refused {wrong:#?}; allowed {over:#?}"
    );
    eprintln!(
        "operator ServiceAccount: {} checks allowed, {} refused, as expected",
        allowed.len(),
        refused.len()
    );

    let mut web_allowed: Vec<Check> = expand(&["get", "list", "watch"], dco, &dco_kinds, None);
    web_allowed.extend(expand(
        &["get", "list", "watch"],
        "apiextensions.k8s.io",
        &["customresourcedefinitions"],
        None,
    ));
    web_allowed.extend(expand(
        &["get", "list", "watch"],
        "apiextensions.crossplane.io",
        &["compositeresourcedefinitions"],
        None,
    ));
    web_allowed.extend(expand(&["get", "create", "update", "patch"], "coordination.k8s.io", &["leases"], n));
    web_allowed.push((("get", "", "pods"), n, None));
    let tls = format!("{workload}-tls");
    refused = vec![
        (("get", "", "secrets"), n, Some(tls.as_str())),
        (("list", "", "secrets"), None, None),
        (("list", "", "pods"), None, None),
        (("get", "", "pods"), ks, None),
        (("create", "coordination.k8s.io", "leases"), ks, None),
        (("delete", "coordination.k8s.io", "leases"), n, None),
        (("list", "coordination.k8s.io", "leases"), None, None),
        (("patch", "apiextensions.k8s.io", "customresourcedefinitions"), None, Some(target.as_str())),
        (("patch", dco, "conversionwebhookservers/status"), None, Some(server)),
        (("patch", dco, "crdconversionconfigs"), None, None),
        (("create", "", "pods/exec"), n, None),
        (("create", "events.k8s.io", "events"), n, None),
        (("get", "", "configmaps"), n, None),
        (("create", "apps", "deployments"), n, None),
    ];
    for (what, ns, name) in &refused {
        eprintln!("webhook may not: {} {}/{} ns={ns:?} name={name:?}", what.0, what.1, what.2);
    }
    wrong = audit(&client, &webhook_sa, &web_allowed, true).await?;
    let over = audit(&client, &webhook_sa, &refused, false).await?;
    ensure!(
        wrong.is_empty() && over.is_empty(),
        "webhook ServiceAccount: refused {wrong:#?}; allowed {over:#?}"
    );
    eprintln!(
        "webhook ServiceAccount: {} checks allowed, {} refused, as expected",
        web_allowed.len(),
        refused.len()
    );

    // helm upgrade with a changed CRD: a printer column added, one removed, and a value
    // changed (the operator Pods roll).
    let cws_crd = CWS_CRD;
    let before: BTreeMap<String, i64> = {
        let mut m = BTreeMap::new();
        for c in dco_api::crds() {
            let name = c.metadata.name.unwrap_or_default();
            m.insert(name.clone(), crds.get(&name).await?.metadata.generation.unwrap_or(0));
        }
        m
    };
    let copy = t.cluster.dir.join("tmp").join(format!("chart-{ns}")).join("dco");
    let _ = std::fs::remove_dir_all(&copy);
    copy_dir(&chart_dir(), &copy)?;
    let file = copy.join("crds").join("conversionwebhookservers.yaml");
    let mut doc: Value = serde_yaml::from_str(&std::fs::read_to_string(&file)?)?;
    let columns =
        doc["spec"]["versions"][0]["additionalPrinterColumns"].as_array_mut().context("printer columns")?;
    columns.retain(|c| c["name"] != "Endpoint");
    columns.push(json!({"name": "Upgraded", "type": "string", "jsonPath": ".metadata.name"}));
    std::fs::write(&file, serde_yaml::to_string(&doc)?)?;
    // What the pre-upgrade Job is given: the chart's crds/, every one of dco's CRDs.
    let mut given = BTreeSet::new();
    for f in std::fs::read_dir(copy.join("crds"))? {
        for d in documents(&std::fs::read_to_string(f?.path())?)? {
            given.insert(d["metadata"]["name"].as_str().unwrap_or_default().to_string());
        }
    }
    ensure!(
        given == before.keys().cloned().collect::<BTreeSet<_>>(),
        "the chart's crds/ holds {given:?}, dco's CRDs are {:?}",
        before.keys()
    );
    // managedFields times are whole seconds.
    let upgrade_wall = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
    let started = Instant::now();
    let upgraded_values = json!({"webhook": {"args": ["--drain-period=5s"]}, "defaultServer": {"name": server}, "operator": {"resync": "4m"}});
    let out =
        helm_install_dco_with(helm, t, &release, &copy, &upgraded_values).await.context("helm upgrade")?;
    let upgraded = started.elapsed();
    ensure!(warnings(&out).is_empty(), "{helm:?} helm upgrade warned: {:?}", warnings(&out));
    watch_end_lines += watch_ends(&out);
    let live = crds.get(cws_crd).await?;
    // The Job (gone with its hook) succeeded, or helm's upgrade would have failed; it exits
    // only once each CRD it was given is applied and Established. So all three are Established,
    // and the changed one was written by the Job's field manager during this upgrade.
    let mut outcomes = Vec::new();
    for name in before.keys() {
        let crd = crds.get(name).await?;
        let established = crd
            .status
            .as_ref()
            .and_then(|st| st.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Established" && c.status == "True"));
        let by_job = crd
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| m.manager.as_deref() == Some("dco-operator-crds"))
            .filter_map(|m| m.time.as_ref().map(|t| t.0))
            .max();
        outcomes.push(format!("{name}: Established {established}, written by the Job at {by_job:?}"));
        ensure!(established, "{name} is not Established after the upgrade: {outcomes:?}");
        if name == cws_crd {
            ensure!(
                by_job.is_some_and(|at| at >= upgrade_wall),
                "{name} was not written by the CRD Job during the upgrade (from {upgrade_wall}): {outcomes:?}"
            );
        }
    }
    eprintln!("the CRD Job: {outcomes:?}");
    let names: Vec<String> =
        live.spec.versions[0].additional_printer_columns.iter().flatten().map(|c| c.name.clone()).collect();
    ensure!(
        names.contains(&"Upgraded".to_string()) && !names.contains(&"Endpoint".to_string()),
        "columns after the upgrade: {names:?}"
    );
    let managers: BTreeSet<String> =
        live.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.clone()).collect();
    ensure!(managers.contains("dco-operator-crds"), "the CRD Job wrote the CRD: {managers:?}");
    for (name, gen_before) in &before {
        let now = crds.get(name).await?.metadata.generation.unwrap_or(0);
        let want = if name == cws_crd { gen_before + 1 } else { *gen_before };
        ensure!(
            now == want,
            "{name}: generation {gen_before} → {now}, want {want} (one write for the changed CRD, none for the others)"
        );
    }
    let now_args = args(deploy.get(&format!("{release}-operator")).await?);
    ensure!(
        now_args.contains(&"--resync=4m".to_string()),
        "the upgrade's values reached the Deployment: {now_args:?}"
    );
    let operators = dco_tests::wait_ready_pods(&pods, "app.kubernetes.io/name=dco-operator", 2, WAIT).await?;
    // helm's patch (helm 3) or apply (helm 4) left the operator's webhooks in the
    // configuration alone, and the server's spec as installed.
    let operator_name = format!("{release}-operator");
    let owned = Owned::read(&vwcs, &vwc_name, &servers, server, &deploy, &operator_name).await?;
    ensure!(
        owned.server.1 == installed_spec,
        "the upgrade changed the default server's spec: {installed_spec} → {}",
        owned.server.1
    );
    converts(&client, &group, &ns, 7).await?;
    eprintln!(
        "{helm:?} helm upgrade returned after {upgraded:?}: {cws_crd} columns {names:?} (generation +1, the other CRDs unchanged); operator Pods rolled to {:?}",
        operators.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>()
    );

    // The same upgrade twice more: nothing to change, so nothing changes — no conflict
    // between helm's fields and the operator's, and no field that flips between them.
    let mut again = Vec::new();
    for i in 1..=2 {
        let started = Instant::now();
        let out = helm_install_dco_with(helm, t, &release, &copy, &upgraded_values)
            .await
            .with_context(|| format!("helm upgrade, the same again (#{i})"))?;
        again.push(started.elapsed());
        ensure!(
            warnings(&out).is_empty() && !out.stderr.to_lowercase().contains("conflict"),
            "{helm:?} helm upgrade #{i} of the same release: {}",
            out.stderr
        );
        watch_end_lines += watch_ends(&out);
        // The operator's next registration pass could only flip a field back after helm's.
        tokio::time::sleep(Duration::from_secs(2)).await;
        let now = Owned::read(&vwcs, &vwc_name, &servers, server, &deploy, &operator_name).await?;
        ensure!(now == owned, "the same upgrade (#{i}) changed what was installed: {owned:?} → {now:?}");
    }
    eprintln!(
        "{helm:?} helm upgrade of the same release twice more: {again:?}, nothing changed ({:?})",
        owned.vwc.0
    );

    // Rollback to the install: the operator's flags as installed (the Pods roll), the
    // configuration's webhooks and the server untouched. No CRD Job: rollback keeps the CRDs.
    let started = Instant::now();
    // managedFields times are whole seconds.
    let rollback_wall = k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(1);
    let out = helm
        .output(
            &t.cluster,
            &["rollback", &release, "1", "--namespace", &ns, "--wait", "--wait-for-jobs", "--timeout", "5m"],
        )
        .context("helm rollback")?;
    let rolled_back = started.elapsed();
    ensure!(warnings(&out).is_empty(), "{helm:?} helm rollback warned: {:?}", warnings(&out));
    watch_end_lines += watch_ends(&out);
    let now_args = args(deploy.get(&operator_name).await?);
    ensure!(
        !now_args.iter().any(|a| a.starts_with("--resync=4m")),
        "the rollback left the upgrade's --resync: {now_args:?}"
    );
    let after = Owned::read(&vwcs, &vwc_name, &servers, server, &deploy, &operator_name).await?;
    ensure!(
        after.vwc == owned.vwc && after.server == owned.server,
        "the rollback changed the configuration or the server: {owned:?} → {after:?}"
    );
    let operators = dco_tests::wait_ready_pods(&pods, "app.kubernetes.io/name=dco-operator", 2, WAIT).await?;
    // helm wrote no CRD (other tests may, in the shared cluster: the writer is what counts).
    for name in before.keys() {
        let live = crds.get(name).await?;
        let by_helm: Vec<String> = live
            .metadata
            .managed_fields
            .iter()
            .flatten()
            .filter(|m| {
                m.manager.as_deref() == Some("helm") && m.time.as_ref().is_some_and(|t| t.0 >= rollback_wall)
            })
            .map(|m| format!("{:?} at {:?}", m.operation, m.time))
            .collect();
        ensure!(by_helm.is_empty(), "{helm:?} helm rollback wrote CRD {name}: {by_helm:?}");
    }
    converts(&client, &group, &ns, 7).await?;
    let history = helm.run(&t.cluster, &["history", &release, "--namespace", &ns, "-o", "json"])?;
    let history: Vec<Value> = serde_json::from_str(&history)?;
    let last = history.last().context("helm history")?;
    ensure!(
        last["status"] == "deployed"
            && last["description"].as_str().is_some_and(|d| d.contains("Rollback to 1")),
        "helm history's last revision: {last}"
    );
    eprintln!(
        "{helm:?} helm rollback to 1 returned after {rolled_back:?} (revision {}); operator Pods {:?}; the configuration's webhooks and the server unchanged",
        last["revision"],
        operators.iter().filter_map(|p| p.metadata.name.clone()).collect::<Vec<_>>()
    );

    // helm uninstall: the CRDs, the custom resources and the wired target stay.
    let started = Instant::now();
    let out =
        helm.output(&t.cluster, &["uninstall", &release, "--namespace", &ns, "--wait", "--timeout", "3m"])?;
    let uninstalled = started.elapsed();
    ensure!(warnings(&out).is_empty(), "{helm:?} helm uninstall warned: {:?}", warnings(&out));
    watch_end_lines += watch_ends(&out);
    eprintln!("{helm:?} helm uninstall returned after {uninstalled:?}");
    for c in dco_api::crds() {
        let name = c.metadata.name.unwrap_or_default();
        ensure!(crds.get_opt(&name).await?.is_some(), "CRD {name} was deleted by helm uninstall");
    }
    ensure!(configs.get_opt(&cfg).await?.is_some(), "the config was deleted");
    ensure!(
        servers.get_opt(server).await?.is_some_and(|s| s.metadata.deletion_timestamp.is_none()),
        "the default server was deleted"
    );
    ensure!(crds.get_opt(&target).await?.is_some(), "the target was deleted");
    let gone = |what: &str| format!("{what} is still there after helm uninstall");
    ensure!(
        deploy.get_opt(&format!("{release}-operator")).await?.is_none(),
        "{}",
        gone("the operator Deployment")
    );
    let cluster_roles: Api<ClusterRole> = Api::all(client.clone());
    for r in [format!("{release}-operator"), format!("{release}-operator-workloads")] {
        ensure!(cluster_roles.get_opt(&r).await?.is_none(), "{}", gone(&format!("ClusterRole {r}")));
    }
    // The configuration went with the release, and no stopping replica wrote it back.
    dco_tests::wait_deleted(&vwcs, &vwc_name, Duration::from_secs(30)).await?;
    tokio::time::sleep(Duration::from_secs(10)).await;
    ensure!(vwcs.get_opt(&vwc_name).await?.is_none(), "{}", gone("the ValidatingWebhookConfiguration"));
    ensure!(deploy.get_opt(&workload).await?.is_some(), "the default server's webhook Deployment went");
    let v2 = widgets(&client, &group, "v2", &ns);
    v2.patch(
        "w1",
        &PatchParams::apply(&MANAGER).force(),
        &Patch::Apply(json!({"apiVersion": format!("{group}/v2"),
        "kind": "Widget", "metadata": {"name": "w1"}, "spec": {"size": {"gb": 9}}})),
    )
    .await?;
    converts(&client, &group, &ns, 9).await?;
    eprintln!(
        "after helm uninstall: dco's CRDs, the config, the default server and its webhook Pods stay; {target} still converts"
    );

    // helm 4 applies crds/ server-side on every install, over CRDs that exist (helm 3 skips
    // them). dco's ConversionWebhookServer CRD is still the upgrade's (the chart copy's
    // columns, written by the CRD Job as dco-operator-crds): helm 4's install of the original
    // chart conflicts with it and stops before it creates anything. Once the CRD is the chart's
    // again, it installs.
    if helm == Helm::V4 {
        let err = helm_install_dco_with(helm, t, &release, &chart_dir(), &values)
            .await
            .err()
            .context("helm 4 installed the original chart over the upgrade's CRD")?;
        let err = format!("{err:#}");
        ensure!(
            err.contains("conflict") && err.contains("dco-operator-crds") && err.contains(cws_crd),
            "helm 4's install over the upgrade's CRD: {err}"
        );
        ensure!(
            deploy.get_opt(&operator_name).await?.is_none(),
            "helm 4's failed install created the operator Deployment"
        );
        let line = err.lines().find(|l| l.contains("conflict")).unwrap_or_default().trim().to_string();
        eprintln!("{helm:?} helm install of the original chart over the upgrade's CRD: {line}");
        restore_crd(&crds, cws_crd, &MANAGER).await?;
    }
    // helm install with the same release name adopts the kept server and takes over.
    let started = Instant::now();
    let out = helm_install_dco_with(helm, t, &release, &chart_dir(), &values)
        .await
        .context("helm install after the uninstall")?;
    ensure!(warnings(&out).is_empty(), "{helm:?} helm install (again) warned: {:?}", warnings(&out));
    watch_end_lines += watch_ends(&out);
    let manifest = helm.run(&t.cluster, &["get", "manifest", &release, "--namespace", &ns])?;
    ensure!(
        manifest.contains("kind: ConversionWebhookServer"),
        "the reinstall did not adopt the default server"
    );
    dco_tests::wait_ready_pods(&pods, "app.kubernetes.io/name=dco-operator", 2, WAIT).await?;
    wait_for("the reinstalled operator to fill in the configuration again", WAIT, || async {
        Ok(vwcs
            .get_opt(&vwc_name)
            .await?
            .and_then(|v| v.webhooks)
            .is_some_and(|h| h.len() == 2)
            .then_some(()))
    })
    .await?;
    converts(&client, &group, &ns, 9).await?;
    let reinstalled = started.elapsed();
    eprintln!("reinstalled in {reinstalled:?}: the kept default server adopted by the release");

    // Removing dco entirely, as docs/installation.md says: the config first (it reverts its
    // target; the target still serves two versions, hence the annotation), then the server,
    // then the release. Only the CRDs remain.
    configs
        .patch(
            &cfg,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"annotations": {
            dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE: "true"}}})),
        )
        .await?;
    configs.delete(&cfg, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&configs, &cfg, WAIT).await?;
    let strategy = crds.get(&target).await?.spec.conversion.map(|c| c.strategy);
    ensure!(strategy.as_deref() == Some("None"), "the config's deletion left the target at {strategy:?}");
    servers.delete(server, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&servers, server, WAIT).await?;
    let out =
        helm.output(&t.cluster, &["uninstall", &release, "--namespace", &ns, "--wait", "--timeout", "3m"])?;
    ensure!(warnings(&out).is_empty(), "{helm:?} helm uninstall warned: {:?}", warnings(&out));
    wait_for("the webhook Deployment to be garbage-collected", WAIT, || async {
        Ok(deploy.get_opt(&workload).await?.is_none().then_some(()))
    })
    .await?;
    eprintln!("removed: config (target reverted to None), server, release; dco's CRDs stay");
    crds.delete(&target, &DeleteParams::default()).await?;
    eprintln!(
        "{helm:?}: install {installed:?} (server Available {server_ready:?}), upgrade {upgraded:?}, the same upgrade {again:?}, rollback {rolled_back:?}, uninstall {uninstalled:?}, reinstall {reinstalled:?}; client-go's watch-end lines on stderr: {watch_end_lines}"
    );
    Ok(())
}
