//! Webhook Pods pass Pod Security "restricted". The test's namespace is labelled
//! `pod-security.kubernetes.io/enforce=restricted`, so the apiserver's own PodSecurity
//! admission plugin (a default plugin, not disabled by hack/testenv-go/serve.go) decides
//! every Pod created there. First a Pod that violates the profile is refused there — the
//! check can fail — then a server whose namespace is that one becomes Available with both
//! replicas Ready: the Deployment's Pods (operator/src/server/desired.rs) were admitted.
//!
//! The local cluster runs Pod processes as the current user whatever `runAsUser` says
//! (docs/testenv.md, "Limits"): what is proven here is admission, not the runtime's sandbox.

use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;

use dco_api::ConversionWebhookServer;
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-pod-security");
const WAIT: Duration = Duration::from_secs(120);

#[tokio::test]
async fn webhook_pods_are_admitted_in_a_restricted_namespace() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("psa").await?;
    let client = t.client.clone();
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .patch(
            &t.ns,
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {
                "pod-security.kubernetes.io/enforce": "restricted",
                "pod-security.kubernetes.io/enforce-version": "latest"}}})),
        )
        .await?;

    // A Pod with no security context violates restricted: refused by the apiserver.
    let pods: Api<Pod> = t.api();
    let bad: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "violates-restricted"},
        "spec": {"containers": [{"name": "c", "image": "dco-webhook"}]}}))?;
    match pods.create(&PostParams::default(), &bad).await {
        Ok(_) => bail!("a Pod without a security context was admitted into {} (enforce=restricted)", t.ns),
        Err(kube::Error::Api(e)) => {
            eprintln!("refused as expected: {}", e.message);
            ensure!(e.code == 403, "refused with {} ({}), not 403", e.code, e.message);
            for want in [
                "violates PodSecurity \"restricted:latest\"",
                "allowPrivilegeEscalation != false",
                "unrestricted capabilities",
                "runAsNonRoot != true",
                "seccompProfile",
            ] {
                ensure!(e.message.contains(want), "the refusal does not say {want:?}: {}", e.message);
            }
        }
        Err(e) => return Err(e).context("creating the violating Pod"),
    }

    let label = ("dco-e2e-psa", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    let _operators = dco_tests::start_operators(&t, &selector, &["psa-1"], &["--resync", "60s"])?;
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = dco_tests::apply_default_server(&t, MANAGER, label, 2).await?;
    let workload = format!("dco-webhook-{server}");
    let waited = wait_for("the server to be Available with 2 ready replicas", WAIT, || async {
        let s = servers.get(&server).await?;
        let st = s.status.unwrap_or_default();
        let available = st.conditions.iter().any(|c| c.type_ == "Available" && c.status == "True");
        Ok((available && st.ready_replicas == 2).then_some(()))
    })
    .await;
    if let Err(e) = waited {
        // The ReplicaSet's FailedCreate Event carries PodSecurity's refusal, if that was it.
        let events: Api<k8s_openapi::api::core::v1::Event> = t.api();
        let failed: Vec<_> = events
            .list(&ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|e| e.reason.as_deref() == Some("FailedCreate"))
            .map(|e| e.message.unwrap_or_default())
            .collect();
        return Err(e).context(format!("{workload} in {}: FailedCreate events {failed:?}", t.ns));
    }
    let ready =
        dco_tests::wait_ready_pods(&pods, &format!("conversion.dco.rs/instance={server}"), 2, WAIT).await?;
    // The Pods as admitted carry the restricted settings (the apiserver stored what it checked).
    for p in &ready {
        let spec = p.spec.clone().unwrap_or_default();
        let psc = spec.security_context.unwrap_or_default();
        let sc = spec.containers[0].security_context.clone().unwrap_or_default();
        let name = p.metadata.name.clone().unwrap_or_default();
        ensure!(
            psc.seccomp_profile.map(|s| s.type_).as_deref() == Some("RuntimeDefault")
                && psc.run_as_non_root == Some(true)
                && psc.run_as_user == Some(65532),
            "{name}'s Pod securityContext is not restricted"
        );
        ensure!(
            sc.allow_privilege_escalation == Some(false)
                && sc.read_only_root_filesystem == Some(true)
                && sc.capabilities.and_then(|c| c.drop) == Some(vec!["ALL".to_string()]),
            "{name}'s container securityContext is not restricted"
        );
    }
    eprintln!("{workload}: {} Pods Ready in {} (enforce=restricted)", ready.len(), t.ns);

    let _ = servers
        .patch(&server, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = servers.delete(&server, &DeleteParams::default()).await;
    t.cleanup().await;
    Ok(())
}
