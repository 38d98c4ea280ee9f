//! The first `helm install` of charts/dco succeeds whatever lands first (docs/installation.md,
//! "Install"): the operator's admission registration or helm's ValidatingWebhookConfiguration.
//! Helm creates the Deployment before the configuration and custom resources last, so a fast
//! replica used to create the configuration itself (helm then failed with "already exists")
//! and fill in webhooks before any replica answered (the chart's default server was refused).
//!
//! Both orders are forced, under helm 3 and helm 4, each into its own namespace:
//! * operator first: the chart's RBAC, Services and operator Deployment are applied before
//!   helm runs (labelled for helm to adopt), and helm starts only once a Ready replica has
//!   tried to register;
//! * helm first: the release is installed with no operator replica, then scaled to two.
//!
//! In each, from before helm starts until admission answers, a dry-run create of a server is
//! sent every 50 ms: none may fail (a webhook with `failurePolicy: Fail` never points at a
//! Service without a ready endpoint), helm succeeds, the configuration gets its two webhooks,
//! the default server is admitted, validated (a second default is refused) and Available.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

use dco_api::ConversionWebhookServer;
use dco_tests::chart::{Helm, chart_dir, documents, helm_install_dco_with, release_label, values_files};
use dco_tests::{Manager, TestEnv, wait_for};

const WAIT: Duration = Duration::from_secs(180);
const MANAGER: Manager = Manager("dco-e2e-install-order");

#[derive(Clone, Copy, Debug)]
enum Order {
    OperatorFirst,
    HelmFirst,
}

/// Dry-run creates of a (non-default) server every 50 ms: (sent, failures with when).
struct Probe {
    stop: Arc<AtomicBool>,
    task: tokio::task::JoinHandle<(u64, Vec<(Duration, String)>)>,
}

impl Probe {
    fn start(servers: Api<ConversionWebhookServer>, prefix: &str, label: &(String, String)) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let (running, prefix, label) = (stop.clone(), prefix.to_string(), label.clone());
        let task = tokio::spawn(async move {
            let (start, mut sent, mut failed) = (Instant::now(), 0u64, Vec::new());
            let dry = PostParams { dry_run: true, ..Default::default() };
            while !running.load(Ordering::SeqCst) {
                sent += 1;
                let obj: ConversionWebhookServer = serde_json::from_value(json!({
                    "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                    "metadata": {"name": format!("{prefix}-probe-{sent}"), "labels": {&label.0: &label.1}},
                    "spec": {"replicas": 0}}))
                .expect("a server");
                if let Err(e) = servers.create(&dry, &obj).await {
                    failed.push((start.elapsed(), e.to_string()));
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            (sent, failed)
        });
        Probe { stop, task }
    }

    async fn stop(self) -> Result<(u64, Vec<(Duration, String)>)> {
        self.stop.store(true, Ordering::SeqCst);
        Ok(self.task.await?)
    }
}

/// The chart rendered as `helm template` does (no hooks), one value per document.
fn render(helm: Helm, t: &TestEnv, release: &str, values: &Value) -> Result<Vec<Value>> {
    let [base, mine] = values_files(t, release, values)?;
    let chart = chart_dir();
    let out = helm.run(
        &t.cluster,
        &[
            "template",
            release,
            chart.to_str().unwrap_or_default(),
            "--namespace",
            &t.ns,
            "--no-hooks",
            "--values",
            base.to_str().unwrap_or_default(),
            "--values",
            mine.to_str().unwrap_or_default(),
        ],
    )?;
    documents(&out)
}

/// Applies what the chart renders, bar the admission configuration and the custom resources,
/// with the metadata by which helm adopts an object into `release`.
fn apply_for_adoption(t: &TestEnv, release: &str, docs: &[Value]) -> Result<()> {
    let mut stream = String::new();
    for d in docs {
        let kind = d["kind"].as_str().unwrap_or_default();
        if kind == "ValidatingWebhookConfiguration" || kind == "ConversionWebhookServer" {
            continue;
        }
        let mut d = d.clone();
        d["metadata"]["labels"]["app.kubernetes.io/managed-by"] = json!("Helm");
        d["metadata"]["annotations"]["meta.helm.sh/release-name"] = json!(release);
        d["metadata"]["annotations"]["meta.helm.sh/release-namespace"] = json!(t.ns);
        stream.push_str(&format!("---\n{}", serde_yaml::to_string(&d)?));
    }
    let file = t.cluster.dir.join("tmp").join(format!("adopt-{}.yaml", t.ns));
    std::fs::write(&file, stream)?;
    let out = std::process::Command::new(t.cluster.kubectl())
        .arg("--kubeconfig")
        .arg(&t.cluster.kubeconfig)
        .args(["apply", "--server-side", "--field-manager", &MANAGER, "-f"])
        .arg(&file)
        .output()?;
    ensure!(out.status.success(), "kubectl apply: {}", String::from_utf8_lossy(&out.stderr));
    Ok(())
}

/// `dco_operator_admission_registration_passes_total{outcome}` summed over `pods`' metrics
/// endpoints (the chart's `operator.metricsPort`, on the Pod's address with `bindPodIP`).
async fn registration_passes(pods: &[Pod], outcome: &str) -> Result<u64> {
    let series = format!("dco_operator_admission_registration_passes_total{{outcome=\"{outcome}\"}}");
    let mut total = 0;
    for p in pods {
        let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("an operator Pod without an IP")?;
        total += dco_tests::metric(&format!("{ip}:8080"), &series).await?.unwrap_or(0.0) as u64;
    }
    Ok(total)
}

async fn install(helm: Helm, order: Order) -> Result<()> {
    dco_tests::install_crypto();
    let t = TestEnv::new(match order {
        Order::OperatorFirst => "order-op",
        Order::HelmFirst => "order-helm",
    })
    .await?;
    let client = t.client.clone();
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let label = release_label(&t);
    // Cluster-scoped names of this run's own (ClusterRoles, the server, the configuration).
    let release = format!("dco-{}", t.ns.rsplit('-').next().unwrap_or("run"));
    let server = format!("{}-default", t.ns);
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let pods: Api<Pod> = t.api();
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let replicas = match order {
        Order::OperatorFirst => 2,
        Order::HelmFirst => 0,
    };
    let values =
        json!({"replicaCount": replicas, "defaultServer": {"name": server, "spec": {"replicas": 1}}});
    let docs = render(helm, &t, &release, &values)?;
    let vwc_name = docs
        .iter()
        .find(|d| d["kind"] == "ValidatingWebhookConfiguration")
        .and_then(|d| d["metadata"]["name"].as_str())
        .context("the chart renders a ValidatingWebhookConfiguration")?
        .to_string();

    let start = Instant::now();
    let probe = Probe::start(servers.clone(), &t.ns, &label);
    if let Order::OperatorFirst = order {
        apply_for_adoption(&t, &release, &docs)?;
        let ready = dco_tests::wait_ready_pods(&pods, "app.kubernetes.io/name=dco-operator", 2, WAIT).await?;
        // Before helm runs, a Ready replica has tried to register and found no configuration.
        wait_for("a replica to look for the admission configuration", WAIT, || async {
            Ok((registration_passes(&ready, "no_configuration").await? > 0).then_some(()))
        })
        .await?;
        ensure!(
            vwcs.get_opt(&vwc_name).await?.is_none(),
            "an operator replica created {vwc_name} before helm did"
        );
        eprintln!(
            "{helm:?} {order:?}: operator Ready and waiting for {vwc_name} {:?} after the start",
            start.elapsed()
        );
    }
    let helm_started = Instant::now();
    helm_install_dco_with(helm, &t, &release, &chart_dir(), &values).await.context("helm install")?;
    let helm_took = helm_started.elapsed();
    if let Order::HelmFirst = order {
        // The release and its default server exist before any replica runs.
        ensure!(servers.get_opt(&server).await?.is_some(), "helm created no default server");
        let filled = vwcs.get(&vwc_name).await?.webhooks.unwrap_or_default();
        ensure!(filled.is_empty(), "{vwc_name} has webhooks while no operator replica runs: {filled:?}");
        scale(helm, &t, &release, 2)?;
    }

    // The configuration gets its two webhooks once a replica answers.
    let filled = wait_for("the admission configuration to be filled in", WAIT, || async {
        let hooks = vwcs.get(&vwc_name).await?.webhooks.unwrap_or_default();
        Ok((hooks.len() == 2 && hooks.iter().all(|h| h.client_config.ca_bundle.is_some())).then_some(()))
    })
    .await
    .map(|()| start.elapsed())?;
    // Admission answers: a second default is refused by its rule.
    let second: ConversionWebhookServer = serde_json::from_value(json!({
        "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": format!("{}-second", t.ns), "labels": {&label.0: &label.1}},
        "spec": {"default": true, "replicas": 0}}))?;
    wait_for("admission to refuse a second default server", WAIT, || async {
        match servers.create(&PostParams { dry_run: true, ..Default::default() }, &second).await {
            Err(kube::Error::Api(e)) if e.message.contains("already has spec.default: true") => Ok(Some(())),
            Err(e) => Err(e.into()),
            Ok(_) => Ok(None),
        }
    })
    .await?;
    let (sent, failed) = probe.stop().await?;
    wait_for("the default server to be Available", WAIT, || async {
        let st = servers.get(&server).await?.status.unwrap_or_default();
        Ok(st.conditions.iter().any(|c| c.type_ == "Available" && c.status == "True").then_some(()))
    })
    .await?;
    eprintln!(
        "{helm:?} {order:?}: helm install {helm_took:?}; webhooks registered {filled:?} and the default server Available {:?} after the start; {sent} dry-run reviews, {} failed",
        start.elapsed(),
        failed.len()
    );
    ensure!(
        failed.is_empty(),
        "{helm:?} {order:?}: {} of {sent} dry-run creates failed: {failed:?}",
        failed.len()
    );

    if let Order::HelmFirst = order {
        // Scaled to zero, the last replica to stop takes the webhooks out: dco's kinds stay
        // writable while no replica answers.
        scale(helm, &t, &release, 0)?;
        let stopped = Instant::now();
        wait_for("the webhooks to be taken out", WAIT, || async {
            Ok(vwcs.get(&vwc_name).await?.webhooks.unwrap_or_default().is_empty().then_some(()))
        })
        .await?;
        let out = stopped.elapsed();
        wait_for("no operator Pod left", WAIT, || async {
            let left =
                pods.list(&ListParams::default().labels("app.kubernetes.io/name=dco-operator")).await?;
            Ok(left.items.is_empty().then_some(()))
        })
        .await?;
        let probe = Probe::start(servers.clone(), &format!("{}-zero", t.ns), &label);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (sent, failed) = probe.stop().await?;
        eprintln!(
            "{helm:?}: scaled to 0, webhooks out {out:?} after the upgrade; {sent} dry-run creates then"
        );
        ensure!(
            failed.is_empty(),
            "with no replica, {} of {sent} dry-run creates failed: {failed:?}",
            failed.len()
        );
    }

    helm.run(&t.cluster, &["uninstall", &release, "--namespace", &t.ns, "--wait", "--timeout", "3m"])?;
    ensure!(vwcs.get_opt(&vwc_name).await?.is_none(), "{vwc_name} outlived helm uninstall");
    // The default server stays (keepOnUninstall), with no operator left to drop its finalizer.
    let unfinalized = json!({"metadata": {"finalizers": null}});
    servers.patch(&server, &PatchParams::default(), &Patch::Merge(&unfinalized)).await?;
    servers.delete(&server, &Default::default()).await?;
    t.cleanup().await;
    Ok(())
}

/// `helm upgrade` of the release to `replicas` operator replicas, everything else as it was.
fn scale(helm: Helm, t: &TestEnv, release: &str, replicas: u32) -> Result<String> {
    helm.run(
        &t.cluster,
        &[
            "upgrade",
            release,
            chart_dir().to_str().unwrap_or_default(),
            "--namespace",
            &t.ns,
            "--reuse-values",
            "--set",
            &format!("replicaCount={replicas}"),
        ],
    )
    .with_context(|| format!("helm upgrade to {replicas} operator replicas"))
}

#[tokio::test(flavor = "multi_thread")]
async fn helm3_operator_registers_first() -> Result<()> {
    install(Helm::V3, Order::OperatorFirst).await
}

#[tokio::test(flavor = "multi_thread")]
async fn helm3_helm_creates_first() -> Result<()> {
    install(Helm::V3, Order::HelmFirst).await
}

#[tokio::test(flavor = "multi_thread")]
async fn helm4_operator_registers_first() -> Result<()> {
    install(Helm::V4, Order::OperatorFirst).await
}

#[tokio::test(flavor = "multi_thread")]
async fn helm4_helm_creates_first() -> Result<()> {
    install(Helm::V4, Order::HelmFirst).await
}
