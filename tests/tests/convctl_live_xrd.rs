//! convctl's XRD paths against a real Crossplane 2 (tests/src/crossplane.rs, under its lock) and
//! dco: an XRD (`LegacyCluster`, with claims) serving v1 (`spec.foo`) and v2 (`spec.bar`), wired
//! by an XRDConversionConfig renaming one into the other, XRs and claims written at v1 (half of
//! them paused: Crossplane itself rewrites what it reconciles at a new storage version). Proves:
//!
//! 1. `convctl test --live -c CONFIG --xrd NAME` exits 0 and its JSON report holds round trips
//!    of XRs and of claims sampled at each served version; a config file whose rule names a
//!    field the schemas lack exits 1 with a compile-error naming the context;
//! 2. `--verify-propagation` names the XRD and both generated CRDs (the XR's and the claim's)
//!    before the config exists (exit 1), and is clean once dco wired the XRD and Crossplane
//!    carried the wiring into both;
//! 3. once the XRD's referenceable version (so the generated CRDs' storage) moved to v2,
//!    `convctl migrate-storage --xrd NAME --prune-stored-versions` leaves both generated CRDs
//!    with `status.storedVersions == [v2]` and every object with its uid and value.
//!
//! Needs `target/debug/convctl`, dco-operator, dco-webhook and Go (the crossplane tool).

use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, PostParams};
use serde_json::{Value, json};

use dco_api::XRDConversionConfig;
use dco_tests::crossplane::Crossplane;
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-e2e-live-xrd");
const WAIT: Duration = Duration::from_secs(120);
/// XRs written at v1, and as many claims.
const OBJECTS: usize = 10;

fn convctl(args: &[&str]) -> Result<Output> {
    let out = Command::new(dco_tests::workspace_binary("convctl")?)
        .args(args)
        .output()
        .context("running convctl")?;
    eprintln!(
        "$ convctl {} -> {}\n{}{}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stdout).chars().take(4000).collect::<String>(),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn json_of(o: &Output) -> Result<Value> {
    serde_json::from_slice(&o.stdout)
        .with_context(|| format!("not JSON: {}", String::from_utf8_lossy(&o.stdout)))
}

/// The XRD at `apiextensions.crossplane.io/v1` (claims need v1 in Crossplane v2.3.0), with
/// `referenceable` (the generated CRDs' storage version) at `storage`.
fn xrd(name: &str, group: &str, storage: &str) -> Value {
    let schema = |field: &str| {
        json!({"openAPIV3Schema": {"type": "object", "properties": {
            "spec": {"type": "object", "properties": {field: {"type": "string"}}}}}})
    };
    json!({"apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": group, "scope": "LegacyCluster",
            "names": {"kind": "XWidget", "plural": "xwidgets"},
            "claimNames": {"kind": "Widget", "plural": "widgets"},
            "versions": [
                {"name": "v1", "served": true, "referenceable": storage == "v1", "schema": schema("foo")},
                {"name": "v2", "served": true, "referenceable": storage == "v2", "schema": schema("bar")}]}})
}

/// The config with `hub` as hub, renaming `foo` (v1) to `bar` (v2); `hub_path` overrides the
/// hub side of the rename (a broken rule).
fn config(name: &str, target: &str, label: (&str, &str), hub: &str, broken: bool) -> Value {
    let (spoke, mut hub_path, spoke_path) =
        if hub == "v1" { ("v2", "spec.foo", "spec.bar") } else { ("v1", "spec.bar", "spec.foo") };
    if broken {
        hub_path = "spec.nosuchfield";
    }
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
        "metadata": {"name": name, "labels": {label.0: label.1},
            "annotations": {dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE: "true"}},
        "spec": {"targetXRD": {"name": target}, "hubVersion": hub, "spokes": [{"version": spoke, "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": hub_path, "spokePath": spoke_path}}]}]}})
}

fn stored_versions(crd: &CustomResourceDefinition) -> Vec<String> {
    crd.status.as_ref().and_then(|s| s.stored_versions.clone()).unwrap_or_default()
}

fn storage_version(crd: &CustomResourceDefinition) -> Option<String> {
    crd.spec.versions.iter().find(|v| v.storage).map(|v| v.name.clone())
}

/// The kubeconfig's current context: the one every finding must name.
fn current_context(path: &std::path::Path) -> Result<String> {
    let v: Value = serde_yaml::from_str(&std::fs::read_to_string(path)?)?;
    Ok(v["current-context"].as_str().context("no current-context")?.to_string())
}

#[tokio::test]
async fn test_live_and_migrate_storage_on_an_xrd_of_a_real_crossplane() -> Result<()> {
    let began = Instant::now();
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("livexrd").await?;
    let client = t.client.clone();
    let label = ("dco-e2e-live-xrd", t.ns.as_str());
    let (operators, server) = dco_tests::start_dco(&t, MANAGER, label, "livexrd-1").await?;
    let dir = std::env::temp_dir().join(format!("dco-tests-{}", t.ns));
    let xp = Crossplane::start(&client, &dir).await?;
    let group = format!("{}.livexrd.dco.rs", t.ns);
    let name = format!("xwidgets.{group}");
    let claim_crd = format!("widgets.{group}");
    let cfg_name = format!("{}-xwidgets", t.ns);
    let xrd_ar = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk("apiextensions.crossplane.io", "v1", "CompositeResourceDefinition"),
        "compositeresourcedefinitions",
    );
    // Dropped before `xp` and the operators: deleted while Crossplane and dco still run.
    let guard = dco_tests::ClusterScoped(vec![
        (dco_tests::ar::<XRDConversionConfig>(), cfg_name.clone()),
        (xrd_ar.clone(), name.clone()),
        (dco_tests::ar::<dco_api::ConversionWebhookServer>(), server.clone()),
    ]);
    let result = run(&t, &name, &claim_crd, &group, &cfg_name, label, &server, &xrd_ar).await;

    let xrds: Api<DynamicObject> = Api::all_with(client.clone(), &xrd_ar);
    let cfgs: Api<XRDConversionConfig> = Api::all(client.clone());
    for (plural, kind, namespaced) in [("widgets", "Widget", true), ("xwidgets", "XWidget", false)] {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, "v2", kind), plural);
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), &t.ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        let _ = api.delete_collection(&DeleteParams::background(), &Default::default()).await;
    }
    let _ = cfgs.delete(&cfg_name, &DeleteParams::default()).await;
    let _ = dco_tests::wait_deleted(&cfgs, &cfg_name, WAIT).await;
    let _ = xrds.delete(&name, &DeleteParams::default()).await;
    let _ = dco_tests::wait_deleted(&xrds, &name, WAIT).await;
    drop(guard);
    drop(operators);
    xp.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    eprintln!("test took {:?}", began.elapsed());
    result
}

#[allow(clippy::too_many_arguments)]
async fn run(
    t: &TestEnv,
    name: &str,
    claim_crd: &str,
    group: &str,
    cfg_name: &str,
    label: (&str, &str),
    server: &str,
    xrd_ar: &ApiResource,
) -> Result<()> {
    let client = t.client.clone();
    let xrds: Api<DynamicObject> = Api::all_with(client.clone(), xrd_ar);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let cfgs: Api<DynamicObject> = Api::all_with(client.clone(), &dco_tests::ar::<XRDConversionConfig>());
    let generated = [name.to_string(), claim_crd.to_string()];
    let service = format!("dco-webhook-{server}");

    let t0 = Instant::now();
    MANAGER.apply(&xrds, name, xrd(name, group, "v1")).await?;
    for crd in &generated {
        wait_for(&format!("Crossplane to generate CRD {crd}"), WAIT, || async {
            Ok(crds.get_opt(crd).await?.map(|_| ()))
        })
        .await?;
        dco_tests::wait_crd_established(&crds, crd, WAIT).await?;
    }
    eprintln!("XRD applied -> both generated CRDs Established in {:?}", t0.elapsed());
    let scratch = std::env::temp_dir().join(format!("dco-tests-{}-files", t.ns));
    std::fs::create_dir_all(&scratch)?;
    let good = scratch.join("config.yaml");
    std::fs::write(&good, serde_yaml::to_string(&config(cfg_name, name, label, "v1", false))?)?;
    let broken = scratch.join("broken.yaml");
    std::fs::write(&broken, serde_yaml::to_string(&config(cfg_name, name, label, "v1", true))?)?;
    let kubeconfig = t.cluster.kubeconfig.display().to_string();
    let context = current_context(&t.cluster.kubeconfig)?;
    let live = |cfg: &std::path::Path, extra: &[&str]| -> Result<Output> {
        let cfg = cfg.display().to_string();
        let mut a =
            vec!["test", "--live", "-c", &cfg, "--xrd", name, "--kubeconfig", &kubeconfig, "-o", "json"];
        a.extend_from_slice(extra);
        convctl(&a)
    };
    // Not wired yet: --verify-propagation names the XRD and both generated CRDs.
    let o = live(&good, &["--verify-propagation"])?;
    ensure!(o.status.code() == Some(1), "--verify-propagation before the config exited {:?}", o.status);
    let report = json_of(&o)?;
    let mut flagged: Vec<String> = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|f| f["rule"] == "propagation" && f["location"]["context"] == context.as_str())
        .map(|f| f["location"]["object"].as_str().unwrap_or_default().to_string())
        .collect();
    flagged.sort();
    let mut want = vec![
        format!("CompositeResourceDefinition {name}"),
        format!("CustomResourceDefinition {name}"),
        format!("CustomResourceDefinition {claim_crd}"),
    ];
    want.sort();
    ensure!(flagged == want, "propagation findings on {flagged:?}, not {want:?}: {report}");

    MANAGER.apply(&cfgs, cfg_name, config(cfg_name, name, label, "v1", false)).await?;
    let wait_wired = || async {
        for crd in &generated {
            wait_for(&format!("CRD {crd} wired to {service}"), WAIT, || async {
                let c = crds.get(crd).await?;
                Ok(dco_tests::conversion_service(&c).is_some_and(|(_, s)| s == service).then_some(()))
            })
            .await?;
        }
        anyhow::Ok(())
    };
    wait_wired().await?;
    eprintln!("config applied -> both generated CRDs wired in {:?}", t0.elapsed());

    let at = |plural: &str, kind: &str, v: &str| {
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, v, kind), plural)
    };
    let xrs: Api<DynamicObject> = Api::all_with(client.clone(), &at("xwidgets", "XWidget", "v1"));
    let claims: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &t.ns, &at("widgets", "Widget", "v1"));
    for k in 0..OBJECTS {
        // Crossplane writes what it reconciles (status) at the storage version; the paused half
        // is reconciled less, so some objects are still stored at v1 when migrate-storage runs.
        let meta = |name: String| match k % 2 {
            0 => json!({"name": name, "annotations": {"crossplane.io/paused": "true"}}),
            _ => json!({"name": name}),
        };
        let xr = json!({"apiVersion": format!("{group}/v1"), "kind": "XWidget",
            "metadata": meta(format!("{}-x{k:02}", t.ns)), "spec": {"foo": format!("xr-{k}")}});
        xrs.create(&PostParams::default(), &serde_json::from_value(xr)?).await?;
        let claim = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
            "metadata": meta(format!("c{k:02}")), "spec": {"foo": format!("claim-{k}")}});
        claims.create(&PostParams::default(), &serde_json::from_value(claim)?).await?;
    }

    // (1) Clean, with round trips of XRs and claims at both versions.
    let started = Instant::now();
    let o = live(&good, &[])?;
    ensure!(o.status.code() == Some(0), "test --live exited {:?}", o.status);
    let report = json_of(&o)?;
    let cases = report["cases"].as_array().context("cases")?;
    for (kind, version) in [("XWidget", "v1"), ("XWidget", "v2"), ("Widget", "v1"), ("Widget", "v2")] {
        let n = cases
            .iter()
            .filter(|c| {
                let g = c["group"].as_str().unwrap_or_default();
                g.contains(&format!("{kind} ")) && g.ends_with(&format!("@{version}"))
            })
            .count();
        ensure!(n >= OBJECTS, "{n} case(s) of {kind} sampled at {version}, not at least {OBJECTS}: {report}");
    }
    ensure!(cases.iter().all(|c| c["fails"] == false), "failing cases: {report}");
    let row = &report["summary"]["contexts"][0];
    ensure!(row["context"] == context.as_str() && row["xrdApiVersion"].is_string(), "{row}");
    eprintln!(
        "test --live: {} case(s), {} round trip(s) in {:?}",
        cases.len(),
        report["summary"]["total"],
        started.elapsed()
    );

    // A broken rule: exit 1, a compile-error naming the context.
    let o = live(&broken, &[])?;
    ensure!(o.status.code() == Some(1), "test --live with a broken rule exited {:?}", o.status);
    let report = json_of(&o)?;
    let f = report["findings"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|f| f["rule"] == "compile-error" && f["fails"] == true)
        .with_context(|| format!("no failing compile-error: {report}"))?;
    ensure!(f["location"]["context"] == context.as_str(), "the finding names no context: {f}");
    ensure!(f["message"].as_str().unwrap_or_default().contains("nosuchfield"), "{f}");

    // (2) dco's wiring propagated to both generated CRDs.
    let o = live(&good, &["--verify-propagation"])?;
    ensure!(o.status.code() == Some(0), "--verify-propagation exited {:?}", o.status);
    let report = json_of(&o)?;
    ensure!(
        report["findings"].as_array().into_iter().flatten().all(|f| f["rule"] != "propagation"),
        "{report}"
    );

    // (3) Storage moves to v2 (the config rehubbed with it); both CRDs then list [v1, v2].
    let before = snapshot(&client, group, &t.ns).await?;
    ensure!(before.len() >= 2 * OBJECTS, "{} objects before the move", before.len());
    MANAGER.apply(&xrds, name, xrd(name, group, "v2")).await?;
    MANAGER.apply(&cfgs, cfg_name, config(cfg_name, name, label, "v2", false)).await?;
    for crd in &generated {
        wait_for(&format!("CRD {crd} to store v2"), WAIT, || async {
            let c = crds.get(crd).await?;
            Ok((storage_version(&c).as_deref() == Some("v2")).then_some(()))
        })
        .await?;
    }
    wait_wired().await?;
    for crd in &generated {
        let c = crds.get(crd).await?;
        ensure!(
            stored_versions(&c).contains(&"v1".to_string()),
            "{crd}: storedVersions {:?}",
            stored_versions(&c)
        );
    }
    let before = snapshot(&client, group, &t.ns).await?;
    let started = Instant::now();
    let o = convctl(&[
        "migrate-storage",
        "--xrd",
        name,
        "--prune-stored-versions",
        "--kubeconfig",
        &kubeconfig,
        "-o",
        "json",
    ])?;
    ensure!(o.status.success(), "migrate-storage exited {:?}", o.status);
    eprintln!("migrate-storage --xrd in {:?}", started.elapsed());
    // Both generated CRDs migrated: every object listed went through a write at v2 (those
    // Crossplane rewrote meanwhile, by reconciling them, the apiserver found already there).
    let report = json_of(&o)?;
    for crd in &generated {
        let r = report["summary"]["targets"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|r| r["crd"] == crd.as_str())
            .with_context(|| format!("no target row for {crd}: {report}"))?;
        let n = |k: &str| r[k].as_u64().unwrap_or(0);
        let written = n("rewritten") - n("alreadyAtStorageVersion");
        ensure!(
            n("listed") >= OBJECTS as u64
                && n("rewritten") == n("listed")
                && n("failed") == 0
                && r["storedVersionsBefore"] == json!(["v1", "v2"])
                && r["storedVersionsAfter"] == json!(["v2"]),
            "{crd}: {r}"
        );
        eprintln!(
            "{crd}: {} listed, {written} written anew, {} already at v2",
            r["listed"], r["alreadyAtStorageVersion"]
        );
    }
    for crd in &generated {
        let c = crds.get(crd).await?;
        ensure!(
            stored_versions(&c) == ["v2"],
            "{crd}: storedVersions {:?} after the prune",
            stored_versions(&c)
        );
    }
    let after = snapshot(&client, group, &t.ns).await?;
    for (key, was) in &before {
        let now =
            after.iter().find(|(k, _)| k == key).map(|(_, v)| v).with_context(|| format!("{key} is gone"))?;
        ensure!(now == was, "{key} changed: {was} -> {now}");
    }
    eprintln!(
        "migrated {} object(s) of {name}; both generated CRDs store [v2]; everything read back unchanged",
        before.len()
    );
    let _ = std::fs::remove_dir_all(&scratch);
    Ok(())
}

/// Every XR and claim of the test read at v2: `(kind name, {uid, bar})`.
async fn snapshot(client: &kube::Client, group: &str, ns: &str) -> Result<Vec<(String, Value)>> {
    let mut out = Vec::new();
    for (plural, kind, namespaced) in [("xwidgets", "XWidget", false), ("widgets", "Widget", true)] {
        let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, "v2", kind), plural);
        let api: Api<DynamicObject> = if namespaced {
            Api::namespaced_with(client.clone(), ns, &ar)
        } else {
            Api::all_with(client.clone(), &ar)
        };
        for o in api.list(&Default::default()).await?.items {
            let key = format!("{kind} {}", o.metadata.name.clone().unwrap_or_default());
            out.push((key, json!({"uid": o.metadata.uid, "bar": o.data["spec"]["bar"]})));
        }
    }
    Ok(out)
}
