//! The admission webhook's serving certificate rotates without a restart (docs/admission.md,
//! "Registration"): dco-operator as a Deployment of 2 Pods behind the Service it applies, as
//! in admission.rs. Deleting the leaf Secret (`<service>-tls`) is what a due rotation does to
//! it: the next registration pass of a replica (operator/src/admission/registration.rs,
//! every 60 s) finds no leaf, issues one from the same CA, writes it and serves it; the other
//! replica reads it on its own next pass and swaps it in. Reviews keep coming every 20 ms all
//! along: none may fail, both replicas end up serving the new leaf (checked over TLS against
//! the CA, with the Service's DNS name), the caBundle is unchanged and no container restarted.
//! Then the CA Secret (`<service>-ca`) is deleted: a replica makes a new CA and the
//! caBundle trusts it beside the old one, while the leaf signed by the old CA is kept and
//! served (operator/src/server/certs.rs), so still no review fails.
//!
//! Needs `target/debug/dco-operator` (the testenv's `dco-operator` image).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use base64::Engine as _;
use dco_api::ConversionWebhookServer;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::json;

use dco_tests::cert_manager::{ders, served_leaf};
use dco_tests::operator_pods::{OperatorDeployment, SecondDefaultLoad, admission_args, remove_operators};
use dco_tests::{Manager, TestEnv, container_pid, pod_ready, secret_bytes, wait_for};

const MANAGER: Manager = Manager("dco-admission-rotation-test");
const SERVICE: &str = "dco-admission";
const PORT: u16 = 9443;
/// Two registration passes (60 s each) and slack.
const ROTATION: Duration = Duration::from_secs(150);
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn admission_certificate_rotates_without_a_restart_or_a_failed_review() -> Result<()> {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let t = TestEnv::new("admrot").await?;
    let result = scenario(&t).await;
    remove_operators(&t, &[format!("dco-admrot-test={}", t.ns)]).await;
    t.cleanup().await;
    result
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    let label = ("dco-admrot-test", ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let operators = OperatorDeployment {
        app: "dco-admrot",
        replicas: 2,
        selector: &selector,
        extra_args: admission_args(&ns, SERVICE, "dco-admrot"),
        rust_log: "info",
        termination_grace_s: 5,
    };
    operators.apply(t, &MANAGER).await?;
    let pods: Api<Pod> = t.api();
    let before_pods = operators.ready(t, 2, WAIT).await?;

    // A second default server is refused: the rule the load below relies on.
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = |name: &str, default: bool| -> ConversionWebhookServer {
        serde_json::from_value(json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": {label.0: label.1}}, "spec": {"default": default, "replicas": 0}}))
        .expect("a server")
    };
    let (d, d2) = (format!("{ns}-d"), format!("{ns}-d2"));
    servers.create(&PostParams::default(), &server(&d, true)).await?;
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    wait_for("the webhook to answer", WAIT, || async {
        Ok(match servers.create(&dry, &server(&d2, true)).await {
            Err(kube::Error::Api(e)) if e.message.contains("already has spec.default: true") => Some(()),
            _ => None,
        })
    })
    .await?;

    let secrets: Api<Secret> = t.api();
    let (ca_name, tls_name) = (format!("{SERVICE}-ca"), format!("{SERVICE}-tls"));
    let host = format!("{SERVICE}.{ns}.svc");
    let ca_pem = secret_bytes(&secrets.get(&ca_name).await?, "ca.crt").context("the CA")?;
    let old_leaf = ders(&secret_bytes(&secrets.get(&tls_name).await?, "tls.crt").context("the leaf")?)?;
    let old_leaf = old_leaf.first().context("a leaf certificate")?.clone();
    let ips: Vec<String> = before_pods
        .iter()
        .map(|p| p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("a Pod IP"))
        .collect::<Result<_>>()?;
    let pids: Vec<(String, u32)> = before_pods
        .iter()
        .map(|p| {
            Ok((p.metadata.name.clone().unwrap_or_default(), container_pid(p, "operator").context("pid")?))
        })
        .collect::<Result<_>>()?;
    // Each replica serves the Secret's leaf once its pass has run since start.
    for ip in &ips {
        wait_for(&format!("{ip} to serve the Secret's leaf"), ROTATION, || async {
            Ok((served_leaf(&format!("{ip}:{PORT}"), &host, &ca_pem).await.ok() == Some(old_leaf.clone()))
                .then_some(()))
        })
        .await?;
    }
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let ca_bundle = || async {
        let l = vwcs.list(&ListParams::default().labels("app.kubernetes.io/name=dco-operator")).await?;
        let v = l
            .items
            .into_iter()
            .find(|v| serde_json::to_string(&v.webhooks).unwrap_or_default().contains(&ns))
            .context("the operator's ValidatingWebhookConfiguration")?;
        let hooks = serde_json::to_value(&v.webhooks)?;
        anyhow::Ok(hooks[0]["clientConfig"]["caBundle"].clone())
    };
    let bundle_before = ca_bundle().await?;

    // Reviews every 20 ms (dry-run: nothing is stored), half refused by the rule.
    let load = SecondDefaultLoad::start(servers.clone(), &d2, label);
    tokio::time::sleep(Duration::from_secs(2)).await;

    let deleted = Instant::now();
    secrets.delete(&tls_name, &DeleteParams::default()).await?;
    let new_leaf = wait_for("a replica to issue a new leaf", ROTATION, || async {
        let Some(s) = secrets.get_opt(&tls_name).await? else { return Ok(None) };
        let leaf =
            secret_bytes(&s, "tls.crt").map(|p| ders(&p)).transpose()?.and_then(|d| d.first().cloned());
        Ok(leaf.filter(|l| *l != old_leaf))
    })
    .await?;
    eprintln!("new leaf in the Secret {:?} after deleting it", deleted.elapsed());
    for ip in &ips {
        wait_for(&format!("{ip} to serve the new leaf"), ROTATION, || async {
            Ok((served_leaf(&format!("{ip}:{PORT}"), &host, &ca_pem).await.ok() == Some(new_leaf.clone()))
                .then_some(()))
        })
        .await?;
        eprintln!("{ip} serves the new leaf {:?} after the delete", deleted.elapsed());
    }
    // Same CA, so the caBundle did not change.
    ensure!(ca_bundle().await? == bundle_before, "the caBundle changed on a leaf rotation");

    // The CA Secret lost (deleted by hand, or by a cleanup): a replica's next pass makes a new
    // CA and trusts it beside the one that signed the served leaf, which it keeps — so the
    // apiserver never meets a leaf it cannot verify (operator/src/server/certs.rs).
    let old_ca = ders(&ca_pem)?;
    let ca_deleted = Instant::now();
    secrets.delete(&ca_name, &DeleteParams::default()).await?;
    let new_ca = wait_for("a replica to make a new CA", ROTATION, || async {
        let Some(s) = secrets.get_opt(&ca_name).await? else { return Ok(None) };
        Ok(secret_bytes(&s, "ca.crt").map(|p| ders(&p)).transpose()?.filter(|d| *d != old_ca))
    })
    .await?;
    eprintln!("new CA {:?} after deleting the CA Secret", ca_deleted.elapsed());
    let both = wait_for("the caBundle to trust the new and the old CA", ROTATION, || async {
        let b = ca_bundle().await?;
        let pem = base64::engine::general_purpose::STANDARD.decode(b.as_str().unwrap_or_default())?;
        let got = ders(&pem)?;
        Ok((new_ca.iter().chain(&old_ca).all(|c| got.contains(c))).then_some(got.len()))
    })
    .await?;
    eprintln!("caBundle holds {both} CAs {:?} after deleting the CA Secret", ca_deleted.elapsed());
    let tls_now = ders(&secret_bytes(&secrets.get(&tls_name).await?, "tls.crt").context("the leaf")?)?;
    ensure!(tls_now.first() == Some(&new_leaf), "the leaf was reissued when only the CA Secret went");
    for ip in &ips {
        ensure!(
            served_leaf(&format!("{ip}:{PORT}"), &host, &ca_pem).await? == new_leaf,
            "{ip} no longer serves the leaf of the old CA"
        );
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let (admitted, denied, failed) = load.stop().await?;
    let failed: Vec<String> = failed.into_iter().map(|(_, e)| e).collect();
    let total = admitted + denied + failed.len() as u64;
    eprintln!(
        "during the rotations: {total} reviews, {admitted} admitted, {denied} refused with the rule's message, {} failed {:?}",
        failed.len(),
        failed.iter().take(3).collect::<Vec<_>>()
    );
    ensure!(failed.is_empty(), "{} of {total} reviews failed during the rotation: {failed:?}", failed.len());
    ensure!(admitted > 20 && denied > 20, "too little load: {admitted} admitted, {denied} denied");

    // The same processes serve.
    for (name, pid) in pids {
        let p = pods.get(&name).await?;
        ensure!(pod_ready(&p), "{name} not Ready");
        ensure!(container_pid(&p, "operator") == Some(pid), "{name} restarted");
    }
    Ok(())
}
