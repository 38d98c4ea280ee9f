//! Adopting a live target (docs/operations.md, "How a target is wired and moved";
//! docs/migrating.md, "Moving a config over"): a gated first wiring is a move too. A multi-version
//! target with stored objects is already served — by strategy `None`, or by another webhook
//! (here the `echo-convert` fixture, standing in for the reference project's) — so dco wires
//! it only once every live replica of its server reports the plan. Under a load client that
//! writes at the spoke version and reads at both versions for the whole adoption, checking
//! every value, not one request fails and not one value is wrong, and the adoption settles
//! verified (`HandoverReady` reason `HandoverReady`) with one change of the target's spec.
//!
//! Two operator replicas (local processes) and one server of 2 replicas; the config is
//! created after the target and its objects, as a platform team adopts an existing CRD. A
//! second default server outside the operator's `--selector` (another operator's) is in the
//! cluster throughout: the server's replicas resolve over the operator's servers only
//! (`--server-selector`), so both see one default.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
};
use serde_json::{Value, json};

use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use dco_tests::moves::Counts;
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-adopt");
const WAIT: Duration = Duration::from_secs(120);
const OBJECTS: usize = 12;
/// Load clients running at once, each on its own objects (so each checks its own writes).
const CLIENTS: usize = 3;

/// How a Widget reads at each version: `(spoke field, hub field)`.
struct Fields {
    spoke: &'static str,
    hub: &'static str,
}

/// Client `client` of [`CLIENTS`]: writes its objects at the spoke version, reads each back at
/// the hub version and lists at the spoke version, checking every value, until `stop`: about
/// 3 requests per 50 ms.
fn load(
    client: usize,
    v1: Api<DynamicObject>,
    v2: Api<DynamicObject>,
    group: String,
    f: &'static Fields,
    stop: Arc<AtomicBool>,
    counts: Arc<Counts>,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut k = 0u64;
        while !stop.load(Ordering::SeqCst) {
            k += 1;
            let i = (k as usize * CLIENTS + client) % OBJECTS;
            let name = format!("w{i}");
            let value = format!("v{k}");
            let obj = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": name},
                "spec": {f.spoke: value}});
            match v1.patch(&name, &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&obj)).await {
                Ok(_) => counts.ok.fetch_add(1, Ordering::SeqCst),
                Err(e) => {
                    counts.fail(false, format!("write {name} at v1: {e}"));
                    continue;
                }
            };
            match v2.get(&name).await {
                Ok(o) if o.data["spec"][f.hub] == json!(value) => counts.ok.fetch_add(1, Ordering::SeqCst),
                Ok(o) => {
                    counts.fail(true, format!("{name} at v2: {} (wrote {value})", o.data["spec"]));
                    0
                }
                Err(e) => {
                    counts.fail(false, format!("read {name} at v2: {e}"));
                    0
                }
            };
            match v1.list(&ListParams::default()).await {
                Ok(l)
                    if l.items.len() == OBJECTS
                        && l.items.iter().all(|o| o.data["spec"][f.spoke].is_string()) =>
                {
                    counts.ok.fetch_add(1, Ordering::SeqCst)
                }
                Ok(l) => {
                    counts.fail(
                        true,
                        format!(
                            "list at v1: {} items, first {:?}",
                            l.items.len(),
                            l.items.first().map(|o| &o.data)
                        ),
                    );
                    0
                }
                Err(e) => {
                    counts.fail(false, format!("list at v1: {e}"));
                    0
                }
            };
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
}

/// `(state, HandoverReady reason)` of a config.
fn settled_reason(cfg: &CRDConversionConfig) -> (String, String) {
    let st = cfg.status.clone().unwrap_or_default();
    let state = st.handover.map(|h| format!("{:?}", h.state)).unwrap_or_default();
    let reason = st
        .conditions
        .iter()
        .find(|c| c.type_ == "HandoverReady" && c.status == "True")
        .map(|c| c.reason.clone())
        .unwrap_or_default();
    (state, reason)
}

/// Creates the target (`conversion` as given) and its objects, runs the load, adopts the
/// target with a config, and checks what the load saw. Returns `(requests ok, took)`.
#[allow(clippy::too_many_arguments)]
async fn adopt(
    t: &TestEnv,
    label: (&str, &str),
    name: &str,
    f: &'static Fields,
    conversion: Value,
    rules: Value,
    service: &str,
) -> Result<(u64, Duration)> {
    let client = t.client.clone();
    let group = format!("{name}.{}.adopt.dco.rs", t.ns);
    let target = format!("widgets.{group}");
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    MANAGER
        .apply(
            &crds,
            &target,
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target, "labels": {label.0: label.1}},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema(f.spoke)},
                {"name": "v2", "served": true, "storage": true, "schema": schema(f.hub)}],
            "conversion": conversion}}),
        )
        .await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let ar =
        |v: &str| ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, v, "Widget"), "widgets");
    let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), &t.ns, &ar("v1"));
    let v2: Api<DynamicObject> = Api::namespaced_with(client.clone(), &t.ns, &ar("v2"));
    // Stored objects, written at the hub (storage) version.
    for i in 0..OBJECTS {
        let obj = json!({"apiVersion": format!("{group}/v2"), "kind": "Widget", "metadata": {"name": format!("w{i}")},
            "spec": {f.hub: "stored"}});
        wait_for(&format!("storing w{i}"), WAIT, || async {
            Ok(v2
                .patch(&format!("w{i}"), &PatchParams::apply(&MANAGER).force(), &Patch::Apply(&obj))
                .await
                .ok())
        })
        .await?;
    }
    let generation = crds.get(&target).await?.metadata.generation.unwrap_or_default();

    let (stop, counts) = (Arc::new(AtomicBool::new(false)), Arc::new(Counts::default()));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| load(c, v1.clone(), v2.clone(), group.clone(), f, stop.clone(), counts.clone()))
        .collect();
    tokio::time::sleep(Duration::from_secs(2)).await;
    ensure!(counts.failed.load(Ordering::SeqCst) == 0, "before the adoption: {:?}", counts.errors());

    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let cfg = format!("{}-{name}", t.ns);
    let started = Instant::now();
    MANAGER.apply(&cfgs, &cfg, json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": cfg, "labels": {label.0: label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]}}))
    .await?;
    wait_for(&format!("{cfg} to adopt {target}"), WAIT, || async {
        let c = cfgs.get(&cfg).await?;
        let crd = crds.get(&target).await?;
        let svc = crd
            .spec
            .conversion
            .as_ref()
            .and_then(|c| c.webhook.as_ref()?.client_config.as_ref()?.service.as_ref());
        let wired = svc.is_some_and(|s| s.name == service);
        Ok((wired && settled_reason(&c).0 == "SourceDropped").then_some(()))
    })
    .await?;
    let took = started.elapsed();
    // Keep the load on the adopted target a little longer: the apiserver's switch is done.
    tokio::time::sleep(Duration::from_secs(3)).await;
    stop.store(true, Ordering::SeqCst);
    for t in tasks {
        t.await?;
    }

    let (ok, failed, wrong) = (
        counts.ok.load(Ordering::SeqCst),
        counts.failed.load(Ordering::SeqCst),
        counts.wrong.load(Ordering::SeqCst),
    );
    eprintln!(
        "adopting {target}: {ok} requests ok, {failed} failed, {wrong} wrong; settled {took:?} after the config"
    );
    let errors = counts.errors();
    ensure!(failed == 0 && wrong == 0, "adopting {target}: {failed} failed, {wrong} wrong: {errors:?}");
    ensure!(ok >= 20, "the load made only {ok} requests");
    let c = cfgs.get(&cfg).await?;
    ensure!(
        settled_reason(&c).1 == "HandoverReady",
        "{cfg} settled as {:?}, not verified",
        settled_reason(&c)
    );
    let after = crds.get(&target).await?.metadata.generation.unwrap_or_default();
    ensure!(after == generation + 1, "{target}'s spec changed {} times, not once", after - generation);

    let _ = cfgs
        .patch(&cfg, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = crds.delete(&target, &DeleteParams::default()).await;
    let _ = cfgs.delete(&cfg, &DeleteParams::default()).await;
    Ok((ok, took))
}

#[tokio::test]
async fn adopting_a_live_target_from_none_and_from_a_foreign_webhook_fails_no_request() -> Result<()> {
    dco_tests::map_echo_convert(env!("CARGO_BIN_EXE_echo-convert"))?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("adopt").await?;
    let client = t.client.clone();
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let label = ("dco-e2e-adopt", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    let _operators =
        dco_tests::start_operators(&t, &selector, &["adopt-1", "adopt-2"], &["--resync", "60s"])?;

    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let server = dco_tests::apply_default_server(&t, MANAGER, label, 2).await?;
    wait_for("the server to be Available with 2 ready replicas", WAIT, || async {
        let s = servers.get(&server).await?;
        Ok(s.status.is_some_and(|st| st.ready_replicas == 2).then_some(()))
    })
    .await
    .context("the dco server")?;
    let service = format!("dco-webhook-{server}");
    // Another operator's default server, outside this operator's --selector: neither this
    // operator nor its servers' replicas may count it (two defaults would resolve nothing).
    let decoy = format!("{}-other-scope", t.ns);
    MANAGER
        .apply(
            &servers,
            &decoy,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": decoy, "labels": {"dco-e2e-adopt": "someone-else"}},
        "spec": {"namespace": t.ns, "default": true}}),
        )
        .await?;

    // From strategy None: both versions carry the same field, so None and dco agree.
    static SAME: Fields = Fields { spoke: "owner", hub: "owner" };
    adopt(&t, label, "none", &SAME, json!({"strategy": "None"}), json!([]), &service).await?;

    // From a foreign webhook that renames spec.foo (v1) to spec.bar (v2), as the config does.
    let ca = dco_tests::deploy_echo_convert(&t).await?;
    static RENAMED: Fields = Fields { spoke: "foo", hub: "bar" };
    let foreign = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
        "clientConfig": {"service": {"namespace": t.ns, "name": "echo-convert", "path": "/convert", "port": 443},
            "caBundle": base64_of(&ca)}}});
    let rename =
        json!([{"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.bar", "spokePath": "spec.foo"}}]);
    adopt(&t, label, "foreign", &RENAMED, foreign, rename, &service).await?;

    let _ = servers
        .patch(&server, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = servers.delete(&server, &DeleteParams::default()).await;
    let _ = servers.delete(&decoy, &DeleteParams::default()).await;
    t.cleanup().await;
    Ok(())
}

fn base64_of(s: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(s)
}
