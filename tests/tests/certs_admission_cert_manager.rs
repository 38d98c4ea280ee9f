//! The admission webhook's certificate from cert-manager (docs/admission.md, "A certificate
//! from cert-manager"), on the local cluster with the real cert-manager controller
//! (tests/src/cert_manager.rs): a SelfSigned Issuer signs a CA Certificate, a CA `Issuer`
//! (namespaced, `issuerRef.group` spelled out) signs the admission leaf. The chart is
//! installed with `admission.certManager` (2 operator replicas): its Certificate is issued
//! into the Secret the replicas serve, every replica serves that leaf (verified over TLS
//! against cert-manager's CA, with the Service's DNS name, as the apiserver does), the
//! ValidatingWebhookConfiguration's caBundle is that CA, and a dry-run create of a
//! ConversionWebhookServer is admitted, a second default refused by the rule.
//!
//! Then, under dry-run creates every 20 ms (half admitted, half refused), the certificate is
//! renewed twice: as `cmctl renew` asks (the Certificate's `Issuing` condition), and by
//! deleting the Secret (cert-manager issues it again). Each time every replica serves the new
//! leaf with no restart, within 10 s of the Secret's change (the Secret is watched; the
//! registration pass alone runs every 60 s), the caBundle stays, and no review fails.
//! Measured: time from the Secret's change to each replica serving the new leaf.
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`, and Go for
//! `hack/testenv tool cert-manager` (minutes when cold, cached after).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use dco_api::ConversionWebhookServer;
use dco_tests::cert_manager::{self, CertManager, ders, serial, served_leaf};
use dco_tests::chart::{helm, helm_install_dco, release_label};
use dco_tests::operator_pods::SecondDefaultLoad;
use dco_tests::{TestEnv, container_pid, pod_ready, secret_bytes, unique_name, wait_for};
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const WAIT: Duration = Duration::from_secs(150);
const RELEASE: &str = "dco";
/// The chart's names for release `dco`: the admission Service and the Certificate's Secret.
const SERVICE: &str = "dco-admission";
const SECRET: &str = "dco-admission-cert-manager";
/// From the Secret's change to every replica serving it: well under the 60 s registration
/// interval, which would bound it without the Secret's watch.
const SWAP: Duration = Duration::from_secs(10);
/// The chart's admission.containerPort, on the Pod's own address (bindPodIP).
const PORT: u16 = 9443;

fn condition<'a>(st: &'a Value, type_: &str) -> Option<&'a Value> {
    st["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

fn leaf_of(s: &Secret) -> Result<Vec<u8>> {
    let pem = secret_bytes(s, "tls.crt").context("the Secret has no tls.crt")?;
    ders(&pem)?.into_iter().next().context("tls.crt holds no certificate")
}

#[tokio::test]
async fn cert_manager_issues_the_admission_certificate_and_renewals_fail_no_review() -> Result<()> {
    dco_tests::install_crypto();
    let t = TestEnv::new("admcm").await?;
    let result = scenario(&t).await;
    let _ = helm(&t.cluster, &["uninstall", RELEASE, "--namespace", &t.ns, "--wait", "--timeout", "3m"]);
    t.cleanup().await;
    result
}

/// The issuer chain in the test's namespace: SelfSigned → CA Certificate → CA Issuer. Returns
/// the CA Issuer's name and the CA (PEM).
async fn issuers(t: &TestEnv) -> Result<(String, Vec<u8>)> {
    let issuers = cert_manager::api(&t.client, &t.ns, "Issuer", "issuers");
    let chain = cert_manager::apply_ca_chain(&t.client, &t.ns, "Issuer", "admission-").await?;
    let (ca, root) = (chain.issuer, chain.root_secret);
    wait_for("the CA Issuer to be Ready", WAIT, || async {
        let i = issuers.get(&ca).await?;
        Ok(condition(&i.data["status"], "Ready").is_some_and(|c| c["status"] == "True").then_some(()))
    })
    .await?;
    let secrets: Api<Secret> = t.api();
    let pem = secret_bytes(&secrets.get(&root).await?, "tls.crt").context("the root CA")?;
    Ok((ca, pem))
}

/// The operator replicas: (Pod, IP, container pid).
async fn replicas(pods: &Api<Pod>) -> Result<Vec<(String, String, u32)>> {
    let l = pods
        .list(
            &ListParams::default()
                .labels(&format!("app.kubernetes.io/name=dco-operator,app.kubernetes.io/instance={RELEASE}")),
        )
        .await?;
    l.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            ensure!(pod_ready(p), "{name} is not Ready");
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("a Pod IP")?;
            Ok((
                name.clone(),
                ip,
                container_pid(p, "operator").with_context(|| format!("the pid of {name}"))?,
            ))
        })
        .collect()
}

/// After a change of the Secret begun at `start`: when its leaf changed, and when each
/// replica served it (polled every 100 ms). Returns the new leaf.
async fn rotation(
    what: &str,
    secrets: &Api<Secret>,
    old: &[u8],
    ops: &[(String, String, u32)],
    host: &str,
    ca: &[u8],
    start: Instant,
) -> Result<Vec<u8>> {
    let deadline = start + WAIT;
    let (mut changed, mut leaf) = (None, None);
    let mut served: Vec<Option<Duration>> = vec![None; ops.len()];
    while served.iter().any(Option::is_none) {
        ensure!(Instant::now() < deadline, "{what}: not served by every replica in {WAIT:?} ({served:?})");
        if leaf.is_none()
            && let Some(s) = secrets.get_opt(SECRET).await?
            && let Ok(l) = leaf_of(&s)
            && l != old
        {
            changed = Some(start.elapsed());
            leaf = Some(l);
        }
        if let Some(l) = &leaf {
            for (i, (_, ip, _)) in ops.iter().enumerate() {
                if served[i].is_none()
                    && served_leaf(&format!("{ip}:{PORT}"), host, ca).await.ok().as_ref() == Some(l)
                {
                    served[i] = Some(start.elapsed());
                }
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let changed = changed.unwrap_or_default();
    let after: Vec<String> = served
        .iter()
        .flatten()
        .map(|s| format!("{:.2} s", s.saturating_sub(changed).as_secs_f64()))
        .collect();
    eprintln!(
        "{what}: the Secret's leaf changed {:.2} s after the trigger; served by the replicas {} after that",
        changed.as_secs_f64(),
        after.join(", ")
    );
    // The watch swaps it in at once; without it the next pass (60 s) would.
    let slowest = served.iter().flatten().max().copied().unwrap_or_default().saturating_sub(changed);
    ensure!(slowest < SWAP, "{what}: a replica served the new leaf {slowest:?} after the Secret changed");
    leaf.context("the new leaf")
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    cert_manager::install_crds(&client).await?;
    let mut cm = CertManager::start(t, &ns)?;
    let (ca_issuer, ca_pem) = issuers(t).await?;
    let ca_der = ders(&ca_pem)?;

    let default_server = unique_name("admcm-default");
    let installed = Instant::now();
    helm_install_dco(
        t,
        RELEASE,
        &json!({
            "replicaCount": 2,
            "admission": {"certManager": {"enabled": true,
                "issuerRef": {"name": ca_issuer, "kind": "Issuer", "group": "cert-manager.io"}}},
            "defaultServer": {"name": default_server, "keepOnUninstall": false, "spec": {"replicas": 0}},
            "crds": {"upgrade": {"enabled": false}},
        }),
    )
    .await?;
    eprintln!("helm install with admission.certManager done in {:?}", installed.elapsed());
    ensure!(cm.running(), "cert-manager exited: see {}", cm.log.display());

    // The Secret is cert-manager's, for the chart's Certificate, from the CA Issuer.
    let secrets: Api<Secret> = t.api();
    let secret = secrets.get(SECRET).await?;
    let ann = secret.metadata.annotations.clone().unwrap_or_default();
    ensure!(
        ann.get("cert-manager.io/certificate-name").map(String::as_str) == Some(SECRET)
            && ann.get("cert-manager.io/issuer-name") == Some(&ca_issuer)
            && ann.get("cert-manager.io/issuer-kind").map(String::as_str) == Some("Issuer"),
        "Secret {SECRET} was not issued by cert-manager from Issuer {ca_issuer}: {ann:?}"
    );
    ensure!(ders(&secret_bytes(&secret, "ca.crt").context("ca.crt")?)? == ca_der, "ca.crt is not the CA");
    for own in [format!("{SERVICE}-ca"), format!("{SERVICE}-tls")] {
        ensure!(
            secrets.get_opt(&own).await?.is_none(),
            "the operator issued a certificate of its own ({own})"
        );
    }
    let leaf = leaf_of(&secret)?;

    // Every replica serves it, verified against cert-manager's CA alone.
    let pods: Api<Pod> = t.api();
    let ops = replicas(&pods).await?;
    ensure!(ops.len() == 2, "{} operator replicas", ops.len());
    let host = format!("{SERVICE}.{ns}.svc");
    for (name, ip, _) in &ops {
        let got = served_leaf(&format!("{ip}:{PORT}"), &host, &ca_pem).await?;
        ensure!(got == leaf, "{name} does not serve the Secret's leaf");
    }

    // The configuration trusts that CA, and admission answers through it.
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let ca_bundle = || async {
        let l = vwcs
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}")))
            .await?;
        let v = l
            .items
            .into_iter()
            .find(|v| serde_json::to_string(&v.webhooks).unwrap_or_default().contains(&ns))
            .context("the release's ValidatingWebhookConfiguration with its webhooks")?;
        let hooks = serde_json::to_value(&v.webhooks)?;
        let b = base64::engine::general_purpose::STANDARD
            .decode(hooks[0]["clientConfig"]["caBundle"].as_str().unwrap_or(""))?;
        ders(&b)
    };
    let bundle = wait_for("the webhooks registered with cert-manager's CA", WAIT, || async {
        Ok(ca_bundle().await.ok().filter(|b| *b == ca_der))
    })
    .await?;
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let label = release_label(t);
    let second = unique_name("admcm-second");
    let server = |name: &str, default: bool| -> Result<ConversionWebhookServer> {
        Ok(serde_json::from_value(
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": {label.0.clone(): label.1.clone()}}, "spec": {"default": default, "replicas": 0}}),
        )?)
    };
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    let refused = wait_for("a second default refused by admission", WAIT, || async {
        Ok(match servers.create(&dry, &server(&second, true)?).await {
            Err(kube::Error::Api(e)) if e.message.contains("already has spec.default: true") => {
                Some(e.message)
            }
            _ => None,
        })
    })
    .await?;
    eprintln!("through cert-manager's certificate: {refused}");
    servers.create(&dry, &server(&format!("{second}-ok"), false)?).await.context("a valid server refused")?;

    let load = SecondDefaultLoad::start(servers.clone(), &second, (label.0.as_str(), label.1.as_str()));
    tokio::time::sleep(Duration::from_secs(2)).await;

    // 1. A renewal as `cmctl renew` asks for one: the Certificate's Issuing condition.
    let certificates = cert_manager::api(&client, &ns, "Certificate", "certificates");
    let renew = json!([{"op": "add", "path": "/status/conditions/-", "value": {"type": "Issuing", "status": "True",
        "reason": "ManuallyTriggered", "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}}]);
    let start = Instant::now();
    certificates
        .patch_status(SECRET, &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(renew)?))
        .await
        .context("asking cert-manager to renew")?;
    let renewed = rotation("renewal (Issuing)", &secrets, &leaf, &ops, &host, &ca_pem, start).await?;
    ensure!(serial(&renewed) != serial(&leaf), "the renewal kept the serial");

    // 2. The Secret deleted: cert-manager issues it again; meanwhile the replicas keep serving.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let start = Instant::now();
    secrets.delete(SECRET, &DeleteParams::default()).await?;
    let reissued = rotation("Secret deleted", &secrets, &renewed, &ops, &host, &ca_pem, start).await?;
    ensure!(reissued != renewed, "the same leaf after the delete");

    tokio::time::sleep(Duration::from_secs(3)).await;
    let (admitted, denied, failed) = load.stop().await?;
    let failed: Vec<String> = failed.into_iter().map(|(_, e)| e).collect();
    let total = admitted + denied + failed.len() as u64;
    eprintln!(
        "during both rotations: {total} reviews, {admitted} admitted, {denied} refused by the rule, {} failed {:?}",
        failed.len(),
        failed.iter().take(3).collect::<Vec<_>>()
    );
    ensure!(failed.is_empty(), "{} of {total} reviews failed during the rotations: {failed:?}", failed.len());
    ensure!(admitted > 20 && denied > 20, "too little load: {admitted} admitted, {denied} refused");
    ensure!(
        ca_bundle().await? == bundle,
        "the caBundle changed: the CA Issuer's CA is the same across renewals"
    );

    // The same processes serve.
    let now = replicas(&pods).await?;
    for (name, _, pid) in &ops {
        ensure!(now.iter().any(|(n, _, p)| n == name && p == pid), "{name} restarted or went: {now:?}");
    }
    ensure!(cm.running(), "cert-manager exited: see {}", cm.log.display());
    Ok(())
}
