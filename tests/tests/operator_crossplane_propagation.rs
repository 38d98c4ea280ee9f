//! An XRD's wiring on a real Crossplane 2, and a package manager's reverts of it
//! (docs/operations.md, "XRDs and their generated CRDs", "XRDs a package manages"). The world
//! is `dco_tests::crossplane_world`'s `LegacyCluster` XRD with claim names (three versions,
//! the referenceable one in the middle), one ConversionWebhookServer and one dco-operator.
//! Proves:
//!
//! 1. the config's `ConversionPropagated` turns True with both generated CRDs (the composite's
//!    and the claim's) listed as propagated in `status.generatedCRDs`, and `Applied` is never
//!    True before it (checked at every poll, and on the conditions' transition times);
//! 2. 10 times, an Update of the XRD as field manager `crossplane` (not an apply) that replays
//!    the package manager's rewrite — the XRD from the package, without `spec.conversion`,
//!    labelled as a package's — is detected (`status.reverts.count`, a Warning Event
//!    `WiringReverted` naming the writer, `PackageManaged=True`) and healed: the XRD and both
//!    generated CRDs call the server again and the config is `Applied` again;
//! 3. deleting the config afterwards (`allow-unsafe-delete`) unwires the XRD: the finalizer's
//!    revert is accepted, the config goes, the XRD is left with no `spec.conversion` and both
//!    generated CRDs at strategy None.
//!
//! Prints the propagation lag and the revert → detection, detection → heal (generated CRDs
//! wired again; config Applied again) times: min, median, max.
//!
//! Needs `target/debug/dco-operator`, `target/debug/dco-webhook` and Go (the crossplane tool).
//! Runs Crossplane under its cluster-wide lock: never beside `webhook_crossplane_detection` or
//! `operator_crossplane_detection`.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_tests::crossplane::Crossplane;
use dco_tests::crossplane_world::{HUB, MANAGER, WAIT, XpWorld, condition, is_true, spokes, xrd_resource};
use dco_tests::{ClusterScoped, TestEnv, wait_for};
use k8s_openapi::api::core::v1::Event;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

/// The LegacyCluster XRD of the world, with claim names.
const XRD: usize = 2;
const REVERTS: usize = 10;
/// The package the replayed rewrite says the XRD belongs to.
const PACKAGE: &str = "platform-config";
const POLL: Duration = Duration::from_millis(50);

fn wired(obj: &Value) -> Option<String> {
    dco_api::target::wired_service(obj).map(|(_, n)| n.to_string())
}

/// Whether the XRD and every CRD generated from it call `service`.
async fn all_wired(w: &XpWorld, xrds: &Api<DynamicObject>, service: &str) -> Result<bool> {
    let xrd = serde_json::to_value(xrds.get(&w.xrd_name(XRD)).await?)?;
    if wired(&xrd).as_deref() != Some(service) {
        return Ok(false);
    }
    for crd in w.generated_crds_of(XRD) {
        let c = serde_json::to_value(w.crds.get(&crd).await?)?;
        if wired(&c).as_deref() != Some(service) {
            return Ok(false);
        }
    }
    Ok(true)
}

/// The package manager's rewrite, replayed: the XRD as the package has it (no
/// `spec.conversion`), labelled as the package's, written with an Update (PUT) as field
/// manager `crossplane` on the live resourceVersion; retried on a conflict.
async fn package_rewrite(w: &XpWorld, xrds: &Api<DynamicObject>) -> Result<()> {
    let name = w.xrd_name(XRD);
    for _ in 0..20 {
        let mut obj = xrds.get(&name).await?;
        if let Some(spec) = obj.data.get_mut("spec").and_then(Value::as_object_mut) {
            spec.remove("conversion");
        }
        obj.metadata
            .labels
            .get_or_insert_default()
            .insert("pkg.crossplane.io/package".into(), PACKAGE.into());
        obj.metadata.managed_fields = None;
        let pp = PostParams { field_manager: Some("crossplane".into()), ..Default::default() };
        match xrds.replace(&name, &pp, &obj).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e).context(format!("updating XRD {name} as crossplane")),
        }
    }
    anyhow::bail!("XRD {name}: 20 conflicts in a row")
}

fn stats(what: &str, mut v: Vec<Duration>) -> String {
    v.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    format!(
        "{what}: min {:.0} ms, median {:.0} ms, max {:.0} ms (n={})",
        ms(v[0]),
        ms(v[v.len() / 2]),
        ms(v[v.len() - 1]),
        v.len()
    )
}

/// The config's `Applied` and `ConversionPropagated` conditions.
async fn conds(w: &XpWorld, cfg: &str) -> Result<(Option<Value>, Option<Value>, Value)> {
    let c = w.cfgs.get(cfg).await?.data;
    Ok((condition(&c, "Applied"), condition(&c, "ConversionPropagated"), c))
}

async fn first_wiring(w: &XpWorld, cfg: &str) -> Result<()> {
    let created = Instant::now();
    let obj = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
        "metadata": {"name": cfg, "labels": {"dco-e2e-xp": w.ns}},
        "spec": {"targetXRD": {"name": w.xrd_name(XRD)}, "hubVersion": HUB,
            "webhookServerRef": {"name": w.servers[0]}, "spokes": spokes()}});
    MANAGER.apply(&w.cfgs, cfg, obj).await?;
    let (mut propagated_at, mut applied_at) = (None, None);
    while applied_at.is_none() {
        ensure!(created.elapsed() < WAIT, "config {cfg} not Applied within {WAIT:?}");
        let (applied, propagated, _) = conds(w, cfg).await?;
        let p = propagated.as_ref().is_some_and(|c| c["status"] == "True");
        let a = applied.as_ref().is_some_and(|c| c["status"] == "True");
        ensure!(!a || p, "config {cfg} Applied while ConversionPropagated is {propagated:?}");
        if p && propagated_at.is_none() {
            propagated_at = Some(created.elapsed());
        }
        if a {
            applied_at = Some(created.elapsed());
            let t = |c: &Option<Value>| {
                c.as_ref()
                    .and_then(|c| c["lastTransitionTime"].as_str().map(str::to_string))
                    .unwrap_or_default()
            };
            ensure!(
                t(&applied) >= t(&propagated),
                "Applied turned True ({:?}) before ConversionPropagated ({:?})",
                t(&applied),
                t(&propagated)
            );
        }
        tokio::time::sleep(POLL).await;
    }
    let c = w.cfgs.get(cfg).await?.data;
    let mut listed: Vec<(String, String, bool)> = c["status"]["generatedCRDs"]
        .as_array()
        .context("no status.generatedCRDs")?
        .iter()
        .map(|e| {
            (
                e["name"].as_str().unwrap_or("").to_string(),
                e["role"].as_str().unwrap_or("").to_string(),
                e["propagated"] == true,
            )
        })
        .collect();
    listed.sort();
    let crds = w.generated_crds_of(XRD);
    let mut want =
        vec![(crds[0].clone(), "Composite".to_string(), true), (crds[1].clone(), "Claim".to_string(), true)];
    want.sort();
    ensure!(listed == want, "status.generatedCRDs is {listed:?}, not {want:?}");
    println!(
        "first wiring: ConversionPropagated True {:?} after the config, Applied True {:?}",
        propagated_at.unwrap_or_default(),
        applied_at.unwrap_or_default()
    );
    Ok(())
}

/// One revert and its heal: (revert → detected, detected → CRDs wired again, detected → Applied).
async fn one_revert(w: &XpWorld, xrds: &Api<DynamicObject>, cfg: &str, n: u32) -> Result<[Duration; 3]> {
    let service = w.service(&w.servers[0]);
    let start = Instant::now();
    package_rewrite(w, xrds).await?;
    let mut detected = None;
    let mut wired_again = None;
    loop {
        ensure!(start.elapsed() < WAIT, "revert {n} not healed within {WAIT:?}");
        let (applied, _, c) = conds(w, cfg).await?;
        let count = c["status"]["reverts"]["count"].as_u64().unwrap_or(0);
        if detected.is_none() && count >= u64::from(n) {
            detected = Some(start.elapsed());
            ensure!(
                c["status"]["reverts"]["lastWriter"] == "crossplane",
                "status.reverts names {}, not crossplane",
                c["status"]["reverts"]
            );
        }
        if detected.is_some() && wired_again.is_none() && all_wired(w, xrds, &service).await? {
            wired_again = Some(start.elapsed());
        }
        let applied = applied.is_some_and(|a| a["status"] == "True");
        if let (Some(d), Some(wa), true) = (detected, wired_again, applied) {
            ensure!(is_true(&c, "PackageManaged"), "PackageManaged is {:?}", condition(&c, "PackageManaged"));
            let healed = start.elapsed();
            return Ok([d, wa.saturating_sub(d), healed.saturating_sub(d)]);
        }
        tokio::time::sleep(POLL).await;
    }
}

async fn run(w: &XpWorld, xrds: &Api<DynamicObject>) -> Result<()> {
    let (version, obj) = w.xrd(XRD);
    let api: Api<DynamicObject> = Api::all_with(w.client.clone(), &xrd_resource(version));
    MANAGER.apply(&api, &w.xrd_name(XRD), obj).await?;
    for name in w.generated_crds_of(XRD) {
        wait_for(&format!("Crossplane to generate CRD {name}"), WAIT, || async {
            Ok(w.crds.get_opt(&name).await?.map(|_| ()))
        })
        .await?;
    }
    let server = &w.servers[0];
    let obj = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": server, "labels": {"dco-e2e-xp": w.ns}}, "spec": {"namespace": w.ns, "replicas": 1}});
    MANAGER.apply(&w.srvs, server, obj).await?;
    wait_for(&format!("server {server} ready"), WAIT, || async {
        Ok(w.srvs.get(server).await?.status.is_some_and(|s| s.ready_replicas == 1).then_some(()))
    })
    .await?;
    let cfg = w.config_name(XRD);
    first_wiring(w, &cfg).await?;
    ensure!(all_wired(w, xrds, &w.service(server)).await?, "the XRD or a generated CRD is not wired");

    let mut times = Vec::new();
    for n in 1..=REVERTS as u32 {
        let t = one_revert(w, xrds, &cfg, n).await?;
        println!("revert {n}: detected {:?}, CRDs wired again +{:?}, Applied again +{:?}", t[0], t[1], t[2]);
        times.push(t);
    }
    let events: Api<Event> = Api::all(w.client.clone());
    let lp = ListParams::default().fields(&format!("involvedObject.name={cfg},reason=WiringReverted"));
    let evs = events.list(&lp).await?.items;
    // Recorded as events.k8s.io Events: repeats are a series on one Event.
    let count: i32 =
        evs.iter().map(|e| e.series.as_ref().and_then(|s| s.count).or(e.count).unwrap_or(1)).sum();
    let note = evs.first().and_then(|e| e.message.clone()).unwrap_or_default();
    ensure!(count >= REVERTS as i32, "{count} WiringReverted Events, not {REVERTS}: {evs:?}");
    ensure!(note.starts_with("crossplane changed CompositeResourceDefinition"), "Event note: {note}");
    ensure!(evs.iter().all(|e| e.type_.as_deref() == Some("Warning")), "WiringReverted not a Warning");
    println!("WiringReverted Events: {count}, e.g. {note}");
    println!("{}", stats("revert -> detected", times.iter().map(|t| t[0]).collect()));
    println!("{}", stats("detected -> generated CRDs wired again", times.iter().map(|t| t[1]).collect()));
    println!("{}", stats("detected -> Applied again", times.iter().map(|t| t[2]).collect()));
    println!(
        "{}",
        stats("revert -> generated CRDs wired again", times.iter().map(|t| t[0] + t[1]).collect())
    );
    Ok(())
}

fn allow_unsafe_delete() -> Value {
    json!({"metadata": {"annotations": {dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE: "true"}}})
}

/// 3. After the reverts and heals, deleting the config (the XRD serves three versions, so
///    with `allow-unsafe-delete`) unwires the XRD: the finalizer's revert succeeds, the config
///    goes, the XRD has no `spec.conversion` (Crossplane's `v1` XRD schema refuses strategy
///    None, `dco_api::target::unwired`) and Crossplane renders both generated CRDs back to
///    strategy None.
async fn unwired_on_delete(w: &XpWorld, xrds: &Api<DynamicObject>) -> Result<()> {
    let cfg = w.config_name(XRD);
    w.cfgs.patch(&cfg, &PatchParams::default(), &Patch::Merge(&allow_unsafe_delete())).await?;
    let start = Instant::now();
    w.cfgs.delete(&cfg, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&w.cfgs, &cfg, Duration::from_secs(30)).await.with_context(|| {
        format!("config {cfg} not deleted: the finalizer could not revert XRD {}", w.xrd_name(XRD))
    })?;
    let deleted = start.elapsed();
    let xrd = serde_json::to_value(xrds.get(&w.xrd_name(XRD)).await?)?;
    let conv = &xrd["spec"]["conversion"];
    ensure!(
        conv.is_null(),
        "XRD {} keeps spec.conversion {conv} after the config's deletion",
        w.xrd_name(XRD)
    );
    for name in w.generated_crds_of(XRD) {
        wait_for(&format!("generated CRD {name} back at strategy None"), WAIT, || async {
            let crd = w.crds.get(&name).await?;
            let conv = crd.spec.conversion.as_ref();
            Ok(conv.is_some_and(|c| c.strategy == "None" && c.webhook.is_none()).then_some(()))
        })
        .await?;
    }
    println!(
        "config deleted {deleted:?} after the delete; the XRD has no spec.conversion, its generated CRDs strategy None after {:?}",
        start.elapsed()
    );
    Ok(())
}

#[tokio::test]
async fn an_xrds_wiring_propagates_and_a_package_managers_reverts_are_healed() -> Result<()> {
    let t = TestEnv::new("xpr").await?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    dco_tests::install_dco_crds(&t.client, &MANAGER).await?;
    let dir = std::env::temp_dir().join(format!("dco-tests-{}", t.ns));
    let xp = Crossplane::start(&t.client, &dir).await?;
    eprintln!("crossplane log: {}", xp.log.display());
    let w = XpWorld::new(&t);
    let xrds: Api<DynamicObject> = Api::all_with(t.client.clone(), &xrd_resource("v1"));
    let guard = ClusterScoped(vec![(xrd_resource("v1"), w.xrd_name(XRD))]);
    let operators = dco_tests::start_operators(&t, &w.selector, &["xpr-1"], &["--resync", "60s"])?;

    let result = match run(&w, &xrds).await {
        Ok(()) => unwired_on_delete(&w, &xrds).await,
        failed => failed,
    };
    // Clean up while Crossplane runs: the config reverts the XRD, Crossplane deletes its CRDs.
    let cfg = w.config_name(XRD);
    let _ = w.cfgs.patch(&cfg, &PatchParams::default(), &Patch::Merge(&allow_unsafe_delete())).await;
    let _ = w.cfgs.delete(&cfg, &DeleteParams::default()).await;
    let _ = dco_tests::wait_deleted(&w.cfgs, &cfg, WAIT).await;
    let _ = xrds.delete(&w.xrd_name(XRD), &DeleteParams::default()).await;
    let _ = dco_tests::wait_deleted(&xrds, &w.xrd_name(XRD), WAIT).await;
    w.remove_servers().await;
    drop(operators);
    drop(guard);
    xp.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    result
}
