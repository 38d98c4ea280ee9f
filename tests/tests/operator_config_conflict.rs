//! Two configs for one target (docs/configuration.md, "Status"; docs/admission.md refuses the
//! second where admission runs) that slip past admission (the operator here runs
//! without `--admission-service`, so nothing refuses the second). The operator chooses as
//! every webhook replica does — the first by kind, then name (operator/src/config/conflict.rs,
//! webhook/src/sync.rs) — so `<ns>-a`, created second, is chosen over `<ns>-b`: both get
//! `Conflict=True` naming the other and the fix, `<ns>-b` goes `HandoverReady=False`/`Conflict`
//! and `Invalid`, and neither changes the target's spec (both resolve to the same server, which
//! already serves it). Deleting `<ns>-b` ("delete one of them") leaves the target wired, and
//! `<ns>-a`'s condition clears.

use std::time::Duration;

use anyhow::{Result, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, Patch, PatchParams};
use serde_json::json;

use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-conflict");
const WAIT: Duration = Duration::from_secs(120);

/// `(status, reason, message)` of condition `type_`, if present.
fn condition(c: &CRDConversionConfig, type_: &str) -> Option<(String, String, String)> {
    let st = c.status.as_ref()?;
    st.conditions
        .iter()
        .find(|x| x.type_ == type_)
        .map(|x| (x.status.clone(), x.reason.clone(), x.message.clone()))
}

fn wired_service(crd: &CustomResourceDefinition) -> Option<String> {
    let c = crd.spec.conversion.as_ref()?;
    Some(c.webhook.as_ref()?.client_config.as_ref()?.service.as_ref()?.name.clone())
}

#[tokio::test]
async fn two_configs_for_one_target_one_is_served_the_other_says_conflict() -> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("conflict").await?;
    let client = t.client.clone();
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let label = ("dco-e2e-conflict", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    // A short resync: a config is told of the other one at its next reconcile.
    let _operators = dco_tests::start_operators(&t, &selector, &["conflict-1"], &["--resync", "5s"])?;

    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = dco_tests::apply_default_server(&t, MANAGER, label, 1).await?;
    let service = format!("dco-webhook-{server}");

    let group = format!("{}.conflict.dco.rs", t.ns);
    let target = format!("widgets.{group}");
    MANAGER.apply(&crds, &target, dco_tests::two_version_widget_crd(&group)).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;

    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let config = |name: &str| {
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}})
    };
    let (a, b) = (format!("{}-a", t.ns), format!("{}-b", t.ns));
    MANAGER.apply(&cfgs, &b, config(&b)).await?;
    wait_for(&format!("{b} to wire {target}"), WAIT, || async {
        let c = cfgs.get(&b).await?;
        let crd = crds.get(&target).await?;
        let applied = c.status.as_ref().and_then(|s| s.phase).map(|p| format!("{p:?}"));
        Ok((applied.as_deref() == Some("Applied")
            && wired_service(&crd).as_deref() == Some(service.as_str()))
        .then_some(()))
    })
    .await?;
    let generation = crds.get(&target).await?.metadata.generation.unwrap_or_default();

    // The second config sorts first: it is the one served, and the first one created yields.
    MANAGER.apply(&cfgs, &a, config(&a)).await?;
    let desc = format!("CustomResourceDefinition {target}");
    let ignored = format!(
        "CRDConversionConfig {a} also names {desc} and is the one served (the first by kind, then name, as every webhook replica chooses); this config is ignored and never writes the target: delete one of them"
    );
    let (ca, cb) = wait_for("both configs to report the conflict", WAIT, || async {
        let (ca, cb) = (cfgs.get(&a).await?, cfgs.get(&b).await?);
        let both = condition(&ca, "Conflict").is_some_and(|c| c.0 == "True")
            && condition(&cb, "Conflict").is_some_and(|c| c.0 == "True");
        Ok(both.then_some((ca, cb)))
    })
    .await?;
    let (status, reason, msg) = condition(&cb, "Conflict").unwrap_or_default();
    eprintln!("{b}: Conflict={status} {reason}: {msg}");
    ensure!(reason == "Conflict" && msg == ignored, "{b}'s Conflict condition: {reason}: {msg}");
    let (_, hreason, hmsg) = condition(&cb, "HandoverReady").unwrap_or_default();
    ensure!(hreason == "Conflict" && hmsg == ignored, "{b}'s HandoverReady: {hreason}: {hmsg}");
    let phase = cb.status.as_ref().and_then(|s| s.phase).map(|p| format!("{p:?}"));
    ensure!(phase.as_deref() == Some("Invalid"), "{b} is {phase:?}, not Invalid");
    ensure!(condition(&cb, "Applied").is_none(), "{b} still claims Applied");
    let (_, reason, msg) = condition(&ca, "Conflict").unwrap_or_default();
    eprintln!("{a}: Conflict=True {reason}: {msg}");
    ensure!(
        reason == "ChosenOverAnother"
            && msg.starts_with(&format!(
                "CRDConversionConfig {b} also names {desc}; this config is the one served"
            ))
            && msg.ends_with("delete one of them"),
        "{a}'s Conflict condition: {reason}: {msg}"
    );
    wait_for(&format!("{a} to be Applied"), WAIT, || async {
        let c = cfgs.get(&a).await?;
        Ok((c.status.as_ref().and_then(|s| s.phase).map(|p| format!("{p:?}")).as_deref() == Some("Applied"))
            .then_some(()))
    })
    .await?;

    // "Delete one of them": the ignored one goes, the target stays wired, the conflict clears.
    cfgs.delete(&b, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&cfgs, &b, WAIT).await?;
    let crd = crds.get(&target).await?;
    ensure!(
        wired_service(&crd).as_deref() == Some(service.as_str()),
        "deleting {b} un-wired {target}: {:?}",
        crd.spec.conversion
    );
    wait_for(&format!("{a}'s Conflict condition to clear"), WAIT, || async {
        let c = cfgs.get(&a).await?;
        Ok(condition(&c, "Conflict").is_none().then_some(()))
    })
    .await?;
    let after = crds.get(&target).await?.metadata.generation.unwrap_or_default();
    ensure!(after == generation, "{target}'s spec changed {} times during the conflict", after - generation);

    let _ = cfgs
        .patch(&a, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = cfgs.delete(&a, &DeleteParams::default()).await;
    let _ = crds.delete(&target, &DeleteParams::default()).await;
    let _ = servers
        .patch(&server, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = servers.delete(&server, &DeleteParams::default()).await;
    t.cleanup().await;
    Ok(())
}
