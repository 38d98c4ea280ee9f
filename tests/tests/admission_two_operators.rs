//! Two operators share a cluster (`--selector`, docs/admission.md): two dco-operator Deployments in
//! one namespace, each with its own `--selector`, its own admission Service and its own
//! Leases. Each registers a ValidatingWebhookConfiguration of its own whose `objectSelector`
//! is its selector, each refuses a second default among its own servers while the other's
//! default does not count, each divides all its shards among its own replicas (no Lease
//! shared with the other: operator/src/sharding/leases.rs `LeaseNames`), and each reconciles its
//! own servers only.
//!
//! Needs `target/debug/dco-operator` (the testenv's `dco-operator` image).

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use dco_api::ConversionWebhookServer;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::coordination::v1::Lease;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::json;

use dco_tests::operator_pods::{OperatorDeployment, admission_args, remove_operators};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-two-operators-test");
const WAIT: Duration = Duration::from_secs(120);
const SHARDS: usize = 32;

#[tokio::test]
async fn two_operators_with_different_selectors_share_a_namespace() -> Result<()> {
    let t = TestEnv::new("twoop").await?;
    let result = scenario(&t).await;
    let selectors = ["a", "b", "stray"].map(|team| Team::new(&t.ns, team).selector());
    remove_operators(&t, &selectors).await;
    t.cleanup().await;
    result
}

/// One of the two operators: its label, Deployment and admission Service.
struct Team {
    label: (String, String),
    app: String,
    service: String,
}

impl Team {
    fn new(ns: &str, team: &str) -> Team {
        Team {
            label: (format!("dco-twoop-{team}"), ns.to_string()),
            app: format!("dco-op-{team}"),
            service: format!("dco-admission-{team}"),
        }
    }

    fn selector(&self) -> String {
        format!("{}={}", self.label.0, self.label.1)
    }

    fn server(&self, name: &str, default: bool) -> Result<ConversionWebhookServer> {
        Ok(serde_json::from_value(
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "labels": {&self.label.0: &self.label.1}},
            "spec": {"default": default, "replicas": 0}}),
        )?)
    }
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let ns = t.ns.clone();
    dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
    let teams = [Team::new(&ns, "a"), Team::new(&ns, "b")];
    let mut deployments = Vec::new();
    for team in &teams {
        let selector = team.selector();
        let d = OperatorDeployment {
            app: &team.app,
            replicas: 1,
            selector: &selector,
            extra_args: ["--lease-duration", "9s", "--lease-renew-interval", "2s"]
                .map(String::from)
                .into_iter()
                .chain(admission_args(&ns, &team.service, &team.app))
                .collect(),
            rust_log: "info",
            termination_grace_s: 5,
        };
        d.apply(t, &MANAGER).await?;
        deployments.push(d.ready(t, 1, WAIT).await?);
    }
    let pod_of = |i: usize| deployments[i][0].name_any();

    // Each refuses a second default among its own servers; the other's default is not one.
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let dry = PostParams { dry_run: true, ..PostParams::default() };
    for team in &teams {
        let d = format!("{ns}-{}-default", team.app);
        servers.create(&PostParams::default(), &team.server(&d, true)?).await.with_context(|| {
            format!("the first default of {} (the other operator's default must not count)", team.app)
        })?;
        let second = team.server(&format!("{d}-2"), true)?;
        let refused =
            wait_for(&format!("{}'s webhook to refuse a second default", team.app), WAIT, || async {
                Ok(match servers.create(&dry, &second).await {
                    Err(kube::Error::Api(e)) if e.message.contains("already has spec.default: true") => {
                        Some(e.message)
                    }
                    _ => None,
                })
            })
            .await?;
        ensure!(refused.contains(&d), "{}: the refusal names another default: {refused}", team.app);
        eprintln!("{}: {refused}", team.app);
    }

    // Two configurations, each narrowed to its own operator's objects.
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(t.client.clone());
    let mine: Vec<ValidatingWebhookConfiguration> = vwcs
        .list(&ListParams::default().labels("app.kubernetes.io/name=dco-operator"))
        .await?
        .items
        .into_iter()
        .filter(|v| serde_json::to_string(&v.webhooks).unwrap_or_default().contains(&ns))
        .collect();
    ensure!(mine.len() == 2, "{} admission configurations for this namespace, not 2", mine.len());
    for team in &teams {
        let v = mine
            .iter()
            .find(|v| serde_json::to_string(&v.webhooks).unwrap_or_default().contains(&team.service))
            .with_context(|| format!("the configuration of {}", team.app))?;
        for h in serde_json::to_value(&v.webhooks)?.as_array().context("webhooks")? {
            ensure!(h["objectSelector"] == json!({"matchLabels": {&team.label.0: &team.label.1}}), "{h}");
        }
    }

    // Each divides all its shards among its own replica(s): two groups of Leases.
    let leases: Api<Lease> = t.api();
    let groups = wait_for("each operator to hold all its shards", WAIT, || async {
        let l = leases.list(&ListParams::default().labels("sharding.dco.rs/role=shard")).await?;
        let mut groups: BTreeMap<String, BTreeMap<String, usize>> = BTreeMap::new();
        for lease in &l.items {
            let group = lease.labels().get("sharding.dco.rs/component").cloned().unwrap_or_default();
            let holder = lease.spec.as_ref().and_then(|s| s.holder_identity.clone()).unwrap_or_default();
            *groups.entry(group).or_default().entry(holder).or_default() += 1;
        }
        let whole = |pod: String| groups.values().any(|h| h.len() == 1 && h.get(&pod) == Some(&SHARDS));
        Ok((groups.len() == 2 && whole(pod_of(0)) && whole(pod_of(1))).then_some(groups))
    })
    .await?;
    eprintln!("shard Leases by group and holder: {groups:?}");

    // Each reconciles its own servers, and nobody a server neither selects.
    let stray = format!("{ns}-nobodys");
    servers
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                "metadata": {"name": stray, "labels": {"dco-twoop-stray": &ns}}, "spec": {"replicas": 0}}),
            )?,
        )
        .await?;
    for team in &teams {
        let d = format!("{ns}-{}-default", team.app);
        wait_for(&format!("{d} to get a status from {}", team.app), WAIT, || async {
            let s = servers.get(&d).await?;
            Ok(s.status.as_ref().is_some_and(|st| !st.conditions.is_empty()).then_some(()))
        })
        .await?;
    }
    // A resync is 5 min; a new object is reconciled within a second by an operator that
    // selects it. Ten seconds with no status: neither does.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let s = servers.get(&stray).await?;
    ensure!(
        s.status.as_ref().is_none_or(|st| st.conditions.is_empty()),
        "{stray}, selected by neither operator, was reconciled: {:?}",
        s.status
    );
    Ok(())
}
