//! cert-manager issues a ConversionWebhookServer's serving certificate, on the local cluster
//! with the real cert-manager controller (tests/src/cert_manager.rs; docs/operations.md,
//! "Certificates"): a SelfSigned ClusterIssuer signs a CA Certificate, a CA ClusterIssuer signs
//! the server's leaf. The server with `spec.certificate.issuerRef` becomes Available on
//! cert-manager's leaf (the Secret carries cert-manager's annotations, every replica serves
//! that leaf over TLS, the target's caBundle is the CA), and conversions run through it. A
//! renewal forced as `cmctl renew` forces one (the Certificate's `Issuing` condition) is
//! served by the same processes without a failed request of a load client reading and
//! writing at the non-storage version throughout, and without a change of the target's spec.
//! Then `spec.certificate` is removed (the operator takes the Secret back, keeps serving
//! cert-manager's leaf and trusts its CA beside a new one of its own) and set again
//! (cert-manager reissues), with the same load and no failed request.
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook`, and Go for
//! `hack/testenv tool cert-manager` (minutes when cold, cached after).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, LABEL_INSTANCE};
use dco_tests::cert_manager::{self, CertManager, ders, serial, served_leaf};
use dco_tests::moves::{Counts, Tally};
use dco_tests::{Manager, TestEnv, container_pid, pod_ready, secret_bytes, wait_for};
use k8s_openapi::api::core::v1::{Pod, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const MANAGER: Manager = Manager("dco-cert-manager-test");
const WAIT: Duration = Duration::from_secs(150);
/// `start_operators` runs the webhook containers with `--listen $(POD_IP):9443`.
const PORT: u16 = 9443;
/// The objects the load client reads and writes.
const OBJECTS: usize = 5;

/// The first certificate of the Secret's `tls.crt`.
fn leaf_of(s: &Secret) -> Result<Vec<u8>> {
    let pem = secret_bytes(s, "tls.crt").context("the Secret has no tls.crt")?;
    ders(&pem)?.into_iter().next().context("tls.crt holds no certificate")
}

fn condition<'a>(st: &'a Value, type_: &str) -> Option<&'a Value> {
    st["conditions"].as_array()?.iter().find(|c| c["type"] == type_)
}

/// The target's caBundle, as the DER of each certificate in it.
fn ca_bundle(crd: &CustomResourceDefinition) -> Result<Vec<Vec<u8>>> {
    let b = dco_tests::conversion_client_config(crd)
        .and_then(|c| c.ca_bundle.as_ref())
        .context("the target has no caBundle")?;
    ders(&b.0)
}

/// The load client: GETs of one object at a time at the spoke `v1` (each one converted by the
/// webhook: a GET reads etcd at the storage version), and every fourth request a write at
/// `v1` (converted to the storage version `v2`), every 20 ms. A read must carry what the last
/// write of that object wrote.
fn load(
    v1: Api<DynamicObject>,
    group: String,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut written: BTreeMap<String, i64> = (0..OBJECTS).map(|i| (format!("w{i}"), i as i64)).collect();
        let mut k = 0u64;
        while !stop.load(Ordering::SeqCst) {
            k += 1;
            let name = format!("w{}", k as usize % OBJECTS);
            if k.is_multiple_of(4) {
                let size = (k as i64) * 10;
                let obj = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                    "metadata": {"name": name}, "spec": {"storageSize": size, "owner": "load"}});
                match v1.patch(&name, &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&obj)).await {
                    Ok(_) => {
                        written.insert(name.clone(), size);
                        counts.ok.fetch_add(1, Ordering::SeqCst);
                    }
                    Err(e) => counts.fail(false, format!("write {name} at v1: {e}")),
                }
            } else {
                match v1.get(&name).await {
                    Ok(o) if o.data["spec"]["storageSize"] == json!(written[&name]) => {
                        counts.ok.fetch_add(1, Ordering::SeqCst);
                    }
                    Ok(o) => counts
                        .fail(true, format!("{name} at v1: {} (wrote {})", o.data["spec"], written[&name])),
                    Err(e) => counts.fail(false, format!("read {name} at v1: {e}")),
                }
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
}

/// The names and processes of the server's replicas: (Pod, IP, container pid, restarts).
async fn replicas(pods: &Api<Pod>, server: &str) -> Result<Vec<(String, String, u32, i32)>> {
    let list = pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?;
    list.items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .map(|p| {
            let name = p.metadata.name.clone().unwrap_or_default();
            let ip = p.status.as_ref().and_then(|s| s.pod_ip.clone()).context("a Pod IP")?;
            let pid = container_pid(p, "webhook").with_context(|| format!("the pid of {name}"))?;
            let restarts = p
                .status
                .as_ref()
                .and_then(|s| s.container_statuses.as_ref())
                .map_or(0, |c| c.iter().map(|c| c.restart_count).sum());
            ensure!(pod_ready(p), "{name} is not Ready");
            Ok((name, ip, pid, restarts))
        })
        .collect()
}

/// Waits until every replica serves `leaf` (verified against `ca` for `host`).
async fn wait_served(
    replicas: &[(String, String, u32, i32)],
    host: &str,
    ca: &[u8],
    leaf: &[u8],
) -> Result<()> {
    for (name, ip, _, _) in replicas {
        let addr = format!("{ip}:{PORT}");
        wait_for(&format!("{name} to serve the Secret's leaf"), WAIT, || async {
            Ok((served_leaf(&addr, host, ca).await.ok().as_deref() == Some(leaf)).then_some(()))
        })
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn cert_manager_issues_and_renews_the_serving_certificate_without_a_failed_conversion() -> Result<()> {
    dco_tests::install_crypto();
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("certmgr").await?;
    let result = scenario(&t).await;
    cleanup(&t).await;
    t.cleanup().await;
    result
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    let label = ("dco-cert-manager-test", ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    cert_manager::install_crds(&client).await?;

    // SelfSigned → a CA Certificate (its Secret in the cluster resource namespace) → a CA
    // ClusterIssuer: every leaf verifies against that one CA, across renewals. Nothing issues
    // them until cert-manager runs.
    let chain = cert_manager::apply_ca_chain(&client, &ns, "ClusterIssuer", &format!("{ns}-")).await?;
    let (ca_issuer, root) = (chain.issuer, chain.root_secret);
    let cluster_issuers: Api<DynamicObject> =
        Api::all_with(client.clone(), &cert_manager::resource("ClusterIssuer", "clusterissuers"));
    let certificates = cert_manager::api(&client, &ns, "Certificate", "certificates");
    let secrets: Api<Secret> = t.api();
    let pods: Api<Pod> = t.api();

    let _operators = dco_tests::start_operators(t, &selector, &["cm-1"], &[])?;
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = format!("{ns}-s");
    let workload = format!("dco-webhook-{server}");
    let (tls_secret, host) = (format!("{workload}-tls"), format!("{workload}.{ns}.svc"));
    let server_obj = |issuer: Option<&str>| {
        let mut spec = json!({"namespace": ns, "replicas": 2});
        if let Some(i) = issuer {
            spec["certificate"] = json!({"issuerRef": {"name": i}});
        }
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": server, "labels": {label.0: label.1}}, "spec": spec})
    };
    MANAGER.apply(&servers, &server, server_obj(Some(&ca_issuer))).await?;
    let cert_ready = |reason: &'static str| {
        let servers = servers.clone();
        let server = server.clone();
        async move {
            wait_for(&format!("{server} Available with CertificateReady {reason}"), WAIT, || async {
                let st = serde_json::to_value(servers.get(&server).await?.status)?;
                let ok = condition(&st, "Available").is_some_and(|c| c["status"] == "True")
                    && condition(&st, "CertificateReady")
                        .is_some_and(|c| c["status"] == "True" && c["reason"] == reason)
                    && st["readyReplicas"] == 2;
                Ok(ok.then(|| condition(&st, "CertificateReady").map(|c| c["message"].clone())).flatten())
            })
            .await
        }
    };

    // Without a running cert-manager nothing issues the Secret: the replicas wait for it, not
    // Ready, and the server says so (condition and Warning Event).
    let pending = wait_for("CertificateReady False while nothing issues", WAIT, || async {
        let st = serde_json::to_value(servers.get(&server).await?.status)?;
        Ok(condition(&st, "CertificateReady")
            .filter(|c| c["status"] == "False" && c["reason"] == "CertificatePending")
            .map(|c| (c["message"].as_str().unwrap_or_default().to_string(), st.clone())))
    })
    .await?;
    eprintln!("before cert-manager runs: CertificateReady False CertificatePending: {}", pending.0);
    ensure!(
        pending.0.contains("no Ready condition yet (is cert-manager running?)")
            && pending
                .0
                .contains(&format!("the webhook Pods wait for Secret {ns}/{tls_secret} (ContainerCreating)")),
        "the pending message: {}",
        pending.0
    );
    let waiting =
        pods.list(&ListParams::default().labels(&format!("{LABEL_INSTANCE}={server}"))).await?.items;
    ensure!(!waiting.is_empty() && !waiting.iter().any(pod_ready), "replicas Ready without their Secret");
    ensure!(
        condition(&pending.1, "Available").is_none_or(|c| c["status"] == "False"),
        "Available without a certificate: {}",
        pending.1
    );
    let events: Api<k8s_openapi::api::events::v1::Event> = Api::namespaced(client.clone(), "default");
    wait_for("a Warning Event CertificatePending", WAIT, || async {
        let found = events.list(&ListParams::default()).await?.items.into_iter().any(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(server.as_str())
                && e.reason.as_deref() == Some("CertificatePending")
                && e.type_.as_deref() == Some("Warning")
        });
        Ok(found.then_some(()))
    })
    .await?;

    let started = Instant::now();
    let mut cm = CertManager::start(t, &ns)?;
    wait_for("the CA ClusterIssuer to be Ready", WAIT, || async {
        let ci = cluster_issuers.get(&ca_issuer).await?;
        Ok(condition(&ci.data["status"], "Ready").is_some_and(|c| c["status"] == "True").then_some(()))
    })
    .await?;
    let root_ca = secret_bytes(&secrets.get(&root).await?, "tls.crt").context("the root CA")?;
    let root_der = ders(&root_ca)?;
    let message = cert_ready("CertManager").await?;
    eprintln!(
        "{server} Available on cert-manager's certificate {:?} after cert-manager started: {message}",
        started.elapsed()
    );
    ensure!(cm.running(), "cert-manager exited: see {}", cm.log.display());

    // The serving Secret is cert-manager's, for the server's Certificate; both go with the server.
    let cws = servers.get(&server).await?;
    let uid = cws.metadata.uid.clone().unwrap_or_default();
    let secret = secrets.get(&tls_secret).await?;
    let ann = secret.metadata.annotations.clone().unwrap_or_default();
    ensure!(
        ann.get("cert-manager.io/certificate-name") == Some(&workload)
            && ann.get("cert-manager.io/issuer-name") == Some(&ca_issuer)
            && ann.get("cert-manager.io/issuer-kind").map(String::as_str) == Some("ClusterIssuer"),
        "the serving Secret was not issued by cert-manager for {workload}: {ann:?}"
    );
    let refs = secret.metadata.owner_references.clone().unwrap_or_default();
    ensure!(
        refs.iter().any(|r| r.uid == uid && r.controller != Some(true)),
        "the serving Secret is not owned by the server: {refs:?}"
    );
    let cert = certificates.get(&workload).await?;
    ensure!(
        cert.metadata.owner_references.iter().flatten().any(|r| r.uid == uid && r.controller == Some(true)),
        "the Certificate is not controlled by the server"
    );
    let cert_names = cert.data["spec"]["dnsNames"].clone();
    ensure!(cert_names[0] == json!(host), "the Certificate's dnsNames: {cert_names}");
    ensure!(ders(&secret_bytes(&secret, "ca.crt").context("ca.crt")?)? == root_der, "ca.crt is not the CA");
    ensure!(secrets.get_opt(&format!("{workload}-ca")).await?.is_none(), "a self-managed CA was made");

    // A target wired to the server: its caBundle is cert-manager's CA.
    let group = format!("{ns}.cm.dco.rs");
    let target = format!("widgets.{group}");
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let schema = |props: Value| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}});
    MANAGER.apply(&crds, &target, json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target, "labels": {label.0: label.1}},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema(json!({"storageSize": {"type": "integer"}, "owner": {"type": "string"}}))},
                {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"storageGB": {"type": "integer"}, "owner": {"type": "string"}}))},
            ]}}))
    .await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let cfg = format!("{ns}-widgets");
    MANAGER.apply(&cfgs, &cfg, json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": cfg, "labels": {label.0: label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "webhookServerRef": {"name": server},
            "spokes": [{"version": "v1", "rules": [
                {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]}}))
    .await?;
    let wired = wait_for(&format!("{target} wired to {server}"), WAIT, || async {
        let c = cfgs.get(&cfg).await?;
        let st = serde_json::to_value(&c.status)?;
        let crd = crds.get(&target).await?;
        let svc = dco_tests::conversion_service(&crd).map(|(_, name)| name);
        let settled = st["phase"] == "Applied" && st["handover"]["state"] == "SourceDropped";
        Ok((settled && svc.as_deref() == Some(workload.as_str())).then_some(crd))
    })
    .await?;
    ensure!(ca_bundle(&wired)? == root_der, "the target's caBundle is not cert-manager's CA");

    // Every replica serves cert-manager's leaf, verified against the caBundle for the Service name.
    let before = replicas(&pods, &server).await?;
    ensure!(before.len() == 2, "{} replicas", before.len());
    let leaf = leaf_of(&secrets.get(&tls_secret).await?)?;
    wait_served(&before, &host, &root_ca, &leaf).await?;

    // Conversions, both ways.
    let ar =
        |v: &str| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, v, "Widget"), "widgets");
    let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v1"));
    let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &ar("v2"));
    for i in 0..OBJECTS {
        let name = format!("w{i}");
        let obj = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": name},
            "spec": {"storageSize": i, "owner": "load"}});
        v1.patch(&name, &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&obj))
            .await
            .context("writing at v1")?;
    }
    let w3 = v2.get("w3").await?;
    ensure!(w3.data["spec"]["storageGB"] == json!(3), "w3 at v2: {}", w3.data);

    let stop = Arc::new(AtomicBool::new(false));
    let counts = Arc::new(Counts::default());
    let load_task = load(v1.clone(), group.clone(), stop.clone(), counts.clone());
    tokio::time::sleep(Duration::from_secs(2)).await;
    let t0 = counts.tally();
    ensure!(
        t0.ok > 0 && t0.failed == 0 && t0.wrong == 0,
        "the load before the renewal: {t0:?}: {:?}",
        counts.errors()
    );

    // The renewal, as `cmctl renew` asks for one: the Certificate's Issuing condition.
    let generation = wired.metadata.generation;
    let old_serial = serial(&leaf).unwrap_or_default();
    let renew = json!([{"op": "add", "path": "/status/conditions/-", "value": {"type": "Issuing", "status": "True",
        "reason": "ManuallyTriggered", "message": "Certificate re-issuance manually triggered",
        "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string()}}]);
    let renewed_at = Instant::now();
    certificates
        .patch_status(&workload, &PatchParams::default(), &Patch::<()>::Json(serde_json::from_value(renew)?))
        .await
        .context("asking cert-manager to renew")?;
    let new_leaf = wait_for("cert-manager to write a new leaf", WAIT, || async {
        let l = leaf_of(&secrets.get(&tls_secret).await?)?;
        Ok((l != leaf).then_some(l))
    })
    .await?;
    let in_secret = renewed_at.elapsed();
    wait_served(&before, &host, &root_ca, &new_leaf).await?;
    let served = renewed_at.elapsed();
    tokio::time::sleep(Duration::from_secs(3)).await;
    let renewal = counts.tally() - t0;
    let new_serial = serial(&new_leaf).unwrap_or_default();
    eprintln!(
        "renewal: serial {old_serial} → {new_serial}; in the Secret after {in_secret:?}, served by both replicas after {served:?}; load meanwhile (to 3 s after): {renewal:?}"
    );
    ensure!(new_serial != old_serial, "the renewed leaf has the old serial");
    ensure!(
        renewal.failed == 0 && renewal.wrong == 0,
        "{renewal:?} during the renewal: {:?}",
        counts.errors()
    );
    ensure!(renewal.ok >= 100, "too little load during the renewal: {renewal:?}");
    let crd = crds.get(&target).await?;
    ensure!(crd.metadata.generation == generation, "the renewal changed the target's spec");
    ensure!(ca_bundle(&crd)? == root_der, "the caBundle changed on a renewal");
    let after = replicas(&pods, &server).await?;
    ensure!(after == before, "the replicas restarted or changed: {before:?} → {after:?}");
    ensure!(after.iter().all(|r| r.3 == 0), "a container restarted: {after:?}");

    // spec.certificate removed: the operator takes the Secret back. The Certificate goes; the
    // replicas keep serving cert-manager's leaf, which the caBundle trusts beside the
    // operator's new CA, so nothing has to change at once.
    let off = counts.tally();
    let switched = Instant::now();
    MANAGER.apply(&servers, &server, server_obj(None)).await?;
    cert_ready("SelfManaged").await?;
    wait_for("the Certificate to be deleted", WAIT, || async {
        Ok(certificates.get_opt(&workload).await?.is_none().then_some(()))
    })
    .await?;
    let own_ca = wait_for("the operator's CA beside cert-manager's in the caBundle", WAIT, || async {
        let b = ca_bundle(&crds.get(&target).await?)?;
        Ok((b.len() == 2 && b.contains(&root_der[0])).then_some(b))
    })
    .await?;
    let back = secrets.get(&tls_secret).await?;
    let ann = back.metadata.annotations.clone().unwrap_or_default();
    ensure!(
        !ann.keys().any(|k| k.starts_with("cert-manager.io/")),
        "cert-manager's annotations stayed: {ann:?}"
    );
    ensure!(leaf_of(&back)? == new_leaf, "the operator replaced cert-manager's leaf at once");
    let bundle_pem = secret_bytes(&back, "ca.crt").context("ca.crt")?;
    wait_served(&before, &host, &bundle_pem, &new_leaf).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let switch_off = counts.tally() - off;
    eprintln!(
        "spec.certificate removed: self-managed after {:?}, caBundle {} CAs; load meanwhile: {switch_off:?}",
        switched.elapsed(),
        own_ca.len()
    );

    // And set again: cert-manager reissues into the Secret (it no longer carries its
    // annotations); the operator's CA stays trusted meanwhile.
    let on = counts.tally();
    let switched = Instant::now();
    MANAGER.apply(&servers, &server, server_obj(Some(&ca_issuer))).await?;
    let reissued = wait_for("cert-manager to reissue into the Secret", WAIT, || async {
        let s = secrets.get(&tls_secret).await?;
        let issued = s.metadata.annotations.as_ref().and_then(|a| a.get("cert-manager.io/certificate-name"))
            == Some(&workload);
        Ok(if issued { Some(leaf_of(&s)?).filter(|l| *l != new_leaf) } else { None })
    })
    .await?;
    cert_ready("CertManager").await?;
    let bundle = ca_bundle(&crds.get(&target).await?)?;
    ensure!(
        bundle.contains(&root_der[0]),
        "the caBundle lost cert-manager's CA: {} certificates",
        bundle.len()
    );
    wait_served(&before, &host, &root_ca, &reissued).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let switch_on = counts.tally() - on;
    eprintln!(
        "spec.certificate set again: cert-manager's new leaf {} served by both replicas after {:?}; caBundle {} CAs; load meanwhile: {switch_on:?}",
        serial(&reissued).unwrap_or_default(),
        switched.elapsed(),
        bundle.len()
    );

    stop.store(true, Ordering::SeqCst);
    load_task.await?;
    let total: Tally = counts.tally();
    eprintln!("the whole load: {total:?}");
    ensure!(
        switch_off.failed == 0 && switch_off.wrong == 0,
        "{switch_off:?} while the operator took the Secret back: {:?}",
        counts.errors()
    );
    ensure!(
        switch_on.failed == 0 && switch_on.wrong == 0,
        "{switch_on:?} while cert-manager took it again: {:?}",
        counts.errors()
    );
    ensure!(total.failed == 0 && total.wrong == 0, "{total:?}: {:?}", counts.errors());
    let end = replicas(&pods, &server).await?;
    ensure!(end == before, "the replicas restarted or changed: {before:?} → {end:?}");
    ensure!(cm.running(), "cert-manager exited: see {}", cm.log.display());

    // Deleting the config reverts the target (it serves two versions: allowed by annotation)
    // while the operator still runs.
    cfgs.patch(
        &cfg,
        &PatchParams::default(),
        &Patch::Merge(
            json!({"metadata": {"annotations": {"conversion.dco.rs/allow-unsafe-delete": "true"}}}),
        ),
    )
    .await?;
    cfgs.delete(&cfg, &Default::default()).await?;
    dco_tests::wait_deleted(&cfgs, &cfg, WAIT).await?;
    Ok(())
}

/// The cluster-scoped objects the test made (the namespace goes with `TestEnv`), finalizers
/// first: the operator is gone by now.
async fn cleanup(t: &TestEnv) {
    let kubectl = |args: &[&str]| {
        let _ = std::process::Command::new(t.cluster.kubectl())
            .arg("--kubeconfig")
            .arg(&t.cluster.kubeconfig)
            .args(args)
            .output();
    };
    let ns = &t.ns;
    let unfinalize = r#"{"metadata":{"finalizers":null}}"#;
    for (kind, name) in [
        ("crdconversionconfigs.conversion.dco.rs", format!("{ns}-widgets")),
        ("conversionwebhookservers.conversion.dco.rs", format!("{ns}-s")),
    ] {
        kubectl(&["patch", kind, &name, "--type=merge", "-p", unfinalize]);
        kubectl(&["delete", kind, &name, "--wait=false", "--ignore-not-found"]);
    }
    kubectl(&["delete", "crd", &format!("widgets.{ns}.cm.dco.rs"), "--wait=false", "--ignore-not-found"]);
    for issuer in [format!("{ns}-ca"), format!("{ns}-selfsigned")] {
        kubectl(&["delete", "clusterissuers.cert-manager.io", &issuer, "--wait=false", "--ignore-not-found"]);
    }
}
