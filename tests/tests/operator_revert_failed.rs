//! A config whose revert on deletion the apiserver refuses (docs/operations.md, "Deleting"):
//! a ValidatingAdmissionPolicy stands in for what refuses it in the field (Crossplane's XRD
//! schema refuses any strategy but Webhook): it denies every update of the test's CRD that
//! takes its `spec.conversion` off Webhook. Deleting the config then holds it, and the config
//! says why where `kubectl describe` shows it: `DeletionBlocked` True `RevertFailed` naming
//! the target, the apiserver's answer (HTTP 422, the policy's message) and the ways out,
//! phase `Reverting`, one Warning Event `RevertFailed` however often the operator retries.
//! Removing the policy lets the next retry revert the target and the config go.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-revert-failed");
const WAIT: Duration = Duration::from_secs(120);

/// `(status, reason, message)` of condition `type_`, if present.
fn condition(c: &CRDConversionConfig, type_: &str) -> Option<(String, String, String)> {
    let st = c.status.as_ref()?;
    st.conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| (x.status.clone(), x.reason.clone(), x.message.clone()))
}

fn strategy(crd: &CustomResourceDefinition) -> String {
    crd.spec.conversion.as_ref().map(|c| c.strategy.clone()).unwrap_or_default()
}

/// The policy and its binding: updates of CRD `target` that take `spec.conversion` off
/// Webhook are refused (HTTP 422, reason Invalid) with `message`.
fn policy(name: &str, target: &str, message: &str) -> (serde_json::Value, serde_json::Value) {
    let policy = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicy",
        "metadata": {"name": name},
        "spec": {"failurePolicy": "Fail",
            "matchConstraints": {"resourceRules": [{"apiGroups": ["apiextensions.k8s.io"], "apiVersions": ["v1"],
                "operations": ["UPDATE"], "resources": ["customresourcedefinitions"]}]},
            "matchConditions": [{"name": "the-target", "expression": format!("object.metadata.name == '{target}'")}],
            "validations": [{"reason": "Invalid", "message": message,
                "expression": "!has(oldObject.spec.conversion) || oldObject.spec.conversion.strategy != 'Webhook' || (has(object.spec.conversion) && object.spec.conversion.strategy == 'Webhook')"}]}});
    let binding = json!({"apiVersion": "admissionregistration.k8s.io/v1", "kind": "ValidatingAdmissionPolicyBinding",
        "metadata": {"name": name},
        "spec": {"policyName": name, "validationActions": ["Deny"]}});
    (policy, binding)
}

#[tokio::test]
async fn a_refused_revert_holds_the_deletion_and_says_so_until_the_obstacle_goes() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("revertfail").await?;
    let client = t.client.clone();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let label = ("dco-e2e-revert-failed", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    let _operators = dco_tests::start_operators(&t, &selector, &["revertfail-1"], &[])?;

    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = dco_tests::apply_default_server(&t, MANAGER, label, 1).await?;

    let group = format!("{}.revertfail.dco.rs", t.ns);
    let target = format!("widgets.{group}");
    MANAGER.apply(&crds, &target, dco_tests::two_version_widget_crd(&group)).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;

    // Two versions served: the annotation lets the deletion go on to the revert.
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let name = format!("{}-c", t.ns);
    MANAGER
        .apply(
            &cfgs,
            &name,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": name, "labels": {label.0: label.1},
            "annotations": {dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE: "true"}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}}),
        )
        .await?;
    wait_for(&format!("{name} to wire {target}"), WAIT, || async {
        let c = cfgs.get(&name).await?;
        let phase = c.status.as_ref().and_then(|s| s.phase).map(|p| format!("{p:?}"));
        let crd = crds.get(&target).await?;
        Ok((phase.as_deref() == Some("Applied") && strategy(&crd) == "Webhook").then_some(()))
    })
    .await?;

    // The obstacle, in force once a dry run of the revert is refused.
    let pname = format!("{}-pin-conversion", t.ns);
    let refusal = format!("{target}: spec.conversion stays Webhook (test policy {pname})");
    let (p, b) = policy(&pname, &target, &refusal);
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    MANAGER.apply(&policies, &pname, p).await?;
    MANAGER.apply(&bindings, &pname, b).await?;
    let dry = PatchParams { dry_run: true, ..PatchParams::default() };
    let unwire = json!({"spec": {"conversion": {"strategy": "None", "webhook": null}}});
    wait_for("the policy to refuse a revert", WAIT, || async {
        match crds.patch(&target, &dry, &Patch::Merge(&unwire)).await {
            Err(kube::Error::Api(s)) if s.code == 422 && s.message.contains(&refusal) => Ok(Some(())),
            _ => Ok(None),
        }
    })
    .await?;

    let deleted = Instant::now();
    cfgs.delete(&name, &DeleteParams::default()).await?;
    let (c, msg) = wait_for(&format!("{name}'s DeletionBlocked RevertFailed"), WAIT, || async {
        let c = cfgs.get(&name).await?;
        Ok(match condition(&c, "DeletionBlocked") {
            Some((s, r, m)) if s == "True" && r == "RevertFailed" => Some((c, m)),
            _ => None,
        })
    })
    .await?;
    let blocked_after = deleted.elapsed();
    eprintln!("DeletionBlocked after {blocked_after:?}: {msg}");
    for part in [
        format!("cannot revert CustomResourceDefinition {target}'s spec.conversion to None"),
        format!("ConversionWebhookServer {server}"),
        "HTTP 422 Invalid".to_string(),
        refusal.clone(),
        "remove the finalizer conversion.dco.rs/safe-revert from this config".to_string(),
    ] {
        ensure!(msg.contains(&part), "no {part:?} in {name}'s DeletionBlocked message: {msg}");
    }
    let phase = c.status.as_ref().and_then(|s| s.phase).map(|p| format!("{p:?}"));
    ensure!(phase.as_deref() == Some("Reverting"), "{name} is {phase:?}, not Reverting");
    let events = wait_for("the RevertFailed Event", WAIT, || async {
        let evs = dco_tests::warning_events(&client, &name, "RevertFailed").await?;
        Ok((!evs.is_empty()).then_some(evs))
    })
    .await?;
    ensure!(
        events[0].note.as_deref() == Some(msg.as_str()),
        "the Event says {:?}, not {msg}",
        events[0].note
    );

    // Retries (every 10 s) go on without more Events or a change of the condition.
    tokio::time::sleep(Duration::from_secs(25)).await;
    let events = dco_tests::warning_events(&client, &name, "RevertFailed").await?;
    let series = events[0].series.as_ref().map(|s| s.count);
    ensure!(
        events.len() == 1 && series.is_none(),
        "{} RevertFailed Events (series {series:?})",
        events.len()
    );
    let c = cfgs.get(&name).await?;
    ensure!(condition(&c, "DeletionBlocked").is_some_and(|(_, _, m)| m == msg), "the condition changed");
    ensure!(strategy(&crds.get(&target).await?) == "Webhook", "{target} was unwired past the policy");
    let kubectl = t.cluster.kubectl();
    let describe = std::process::Command::new(&kubectl)
        .arg("--kubeconfig")
        .arg(&t.cluster.kubeconfig)
        .args(["describe", "crdconversionconfig", &name])
        .output()?;
    eprintln!("kubectl describe crdconversionconfig {name}:\n{}", String::from_utf8_lossy(&describe.stdout));

    // The obstacle goes: the next retry reverts the target and the config goes.
    let freed = Instant::now();
    bindings.delete(&pname, &DeleteParams::default()).await?;
    policies.delete(&pname, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&cfgs, &name, WAIT).await?;
    let gone_after = freed.elapsed();
    let crd = crds.get(&target).await?;
    ensure!(strategy(&crd) == "None", "{name} went, but {target}'s strategy is {:?}", strategy(&crd));
    eprintln!("{name} gone {gone_after:?} after the policy's delete; {target} strategy None");

    let _ = crds.delete(&target, &DeleteParams::default()).await;
    let _ = servers
        .patch(&server, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = servers.delete(&server, &DeleteParams::default()).await;
    t.cleanup().await;
    Ok(())
}
