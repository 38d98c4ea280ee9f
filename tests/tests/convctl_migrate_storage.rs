//! `convctl migrate-storage` on a converted target of 10,000 objects (docs/convctl.md,
//! "migrate-storage"): a CRD serving v1 (`spec.foo`) and v2 (`spec.bar`), converted by dco
//! (a config renaming the field, served by a ConversionWebhookServer of 2 replicas), its
//! objects written while v1 was the storage version, then the storage version moved to v2 so
//! that `status.storedVersions` is `[v1, v2]`.
//!
//! A first run is killed with SIGKILL part way (some objects rewritten, some not); a rerun with
//! `--prune-stored-versions` finds the objects the first run rewrote already stored at v2
//! (the apiserver's byte-identical update writes nothing), rewrites the rest and prunes
//! `storedVersions` to `[v2]`. Every object reads back with the same spec at v1 and at v2 as
//! before. Then v1 is retired (unserved in the CRD; the config deleted, as a target serving
//! one version needs no conversion; the version removed from the CRD) under a load writing and
//! reading at v2: no request fails; every object still reads back unchanged at v2. A last run
//! is a no-op: it reports the target already migrated and no object's resourceVersion moves.
//!
//! Needs `target/debug/convctl` (`cargo build -p convctl`) beside dco-operator and dco-webhook.

use std::collections::BTreeMap;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams,
    PostParams,
};
use serde_json::{Value, json};

use dco_api::{CRDConversionConfig, ConversionWebhookServer};
use dco_tests::load::{Load, Target};
use dco_tests::{Manager, TestEnv, wait_for};

const MANAGER: Manager = Manager("dco-convctl-migrate-storage");
const WAIT: Duration = Duration::from_secs(180);
/// Objects of the target, split over two namespaces (the command lists all namespaces).
const OBJECTS: usize = 10_000;

/// The spec of object `i` at a version: v1 calls the field `foo`, v2 `bar`.
fn spec_at(version: &str, i: usize) -> Value {
    let field = if version == "v1" { "foo" } else { "bar" };
    json!({field: format!("value-{i}"), "n": i, "tags": [format!("t{}", i % 7), "x"]})
}

/// The load's spec of write `k` (the load writes and reads at v2 only: v1 is retired under it).
fn load_spec(_version: &str, k: i64) -> Value {
    json!({"bar": format!("load-{k}"), "n": k})
}

fn schema(field: &str) -> Value {
    json!({"openAPIV3Schema": {"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            field: {"type": "string"}, "n": {"type": "integer"},
            "tags": {"type": "array", "items": {"type": "string"}}}}}}})
}

/// The CRD with v1 (`served` as given, or absent) and v2, `storage` the stored one.
fn crd(name: &str, group: &str, label: (&str, &str), v1: Option<bool>, storage: &str) -> Value {
    let mut versions = Vec::new();
    if let Some(served) = v1 {
        versions.push(
            json!({"name": "v1", "served": served, "storage": storage == "v1", "schema": schema("foo")}),
        );
    }
    versions.push(json!({"name": "v2", "served": true, "storage": storage == "v2", "schema": schema("bar")}));
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": versions}})
}

fn api_at(client: &kube::Client, group: &str, version: &str) -> Api<DynamicObject> {
    let ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(group, version, "Widget"), "widgets");
    Api::all_with(client.clone(), &ar)
}

/// Every test object (`ns/name`) read at `version`, a page at a time: (fnv of its spec,
/// resourceVersion).
async fn snapshot(api: &Api<DynamicObject>, selector: &str) -> Result<BTreeMap<String, (u64, String)>> {
    let mut out = BTreeMap::new();
    let mut lp = ListParams::default().labels(selector).limit(500);
    loop {
        let page = api.list(&lp).await.context("listing the test's objects")?;
        for o in page.items {
            let key = format!(
                "{}/{}",
                o.metadata.namespace.clone().unwrap_or_default(),
                o.metadata.name.clone().unwrap_or_default()
            );
            // The writes change no field, so convctl's field manager is never recorded.
            let mut managers =
                o.metadata.managed_fields.iter().flatten().filter_map(|m| m.manager.as_deref());
            ensure!(!managers.any(|m| m == "convctl-migrate-storage"), "{key} records convctl's write");
            let spec = serde_json::to_vec(&o.data["spec"])?;
            out.insert(
                key,
                (dco_tests::fnv1a64(&spec), o.metadata.resource_version.clone().unwrap_or_default()),
            );
        }
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp.continue_token = Some(c),
            None => return Ok(out),
        }
    }
}

/// The specs of `a` and `b` agree object by object (resourceVersions aside).
fn same_specs(
    a: &BTreeMap<String, (u64, String)>,
    b: &BTreeMap<String, (u64, String)>,
    what: &str,
) -> Result<()> {
    ensure!(a.len() == b.len(), "{what}: {} objects before, {} after", a.len(), b.len());
    let differing: Vec<&String> =
        a.iter().filter(|(k, v)| b.get(*k).map(|w| w.0) != Some(v.0)).map(|(k, _)| k).collect();
    ensure!(
        differing.is_empty(),
        "{what}: {} objects read back differently, e.g. {:?}",
        differing.len(),
        &differing[..differing.len().min(5)]
    );
    Ok(())
}

fn convctl(kubeconfig: &std::path::Path, args: &[&str]) -> Result<Command> {
    let mut cmd = Command::new(dco_tests::workspace_binary("convctl")?);
    cmd.arg("migrate-storage").args(args).arg("--kubeconfig").arg(kubeconfig);
    Ok(cmd)
}

/// Runs convctl to the end with `-o json`: (exit code, the report).
fn convctl_json(kubeconfig: &std::path::Path, args: &[&str]) -> Result<(i32, Value)> {
    let out = convctl(kubeconfig, args)?
        .args(["-o", "json"])
        .output()
        .context("running convctl migrate-storage")?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "convctl migrate-storage {}:\n{stdout}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value =
        serde_json::from_str(&stdout).with_context(|| format!("the JSON report: {stdout}"))?;
    Ok((out.status.code().unwrap_or(-1), report))
}

async fn stored_versions(crds: &Api<CustomResourceDefinition>, name: &str) -> Result<Vec<String>> {
    Ok(crds.get(name).await?.status.and_then(|s| s.stored_versions).unwrap_or_default())
}

#[tokio::test]
async fn ten_thousand_objects_are_migrated_through_a_kill_pruned_and_the_old_version_retired_under_load()
-> Result<()> {
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    let t = TestEnv::new("migst").await?;
    let client = t.client.clone();
    let kubeconfig = t.cluster.kubeconfig.clone();
    let label = ("dco-convctl-migrate-storage", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    let (_operators, server) = dco_tests::start_dco(&t, MANAGER, label, "migst-1").await?;
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let service = format!("dco-webhook-{server}");

    // The target, v1 stored, wired to dco by a config renaming foo (v1) to bar (v2).
    let group = format!("{}.migst.dco.rs", t.ns);
    let target = format!("widgets.{group}");
    let other_ns = format!("{}-b", t.ns);
    // Removed even when the test fails part way.
    let _cluster_scoped = dco_tests::ClusterScoped(vec![
        (dco_tests::ar::<CustomResourceDefinition>(), target.clone()),
        (dco_tests::ar::<Namespace>(), other_ns.clone()),
        (dco_tests::ar::<CRDConversionConfig>(), format!("{}-widgets", t.ns)),
        (dco_tests::ar::<ConversionWebhookServer>(), server.clone()),
    ]);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    MANAGER.apply(&crds, &target, crd(&target, &group, label, Some(true), "v1")).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let cfgs: Api<CRDConversionConfig> = Api::all(client.clone());
    let cfg = format!("{}-widgets", t.ns);
    // dco's hub is the storage version: hub v1 (foo) with spoke v2 (bar) first, rehubbed to
    // v2 with spoke v1 when the storage version moves.
    let config = |hub: &str, spokes: Value| {
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": cfg, "labels": {label.0: label.1}},
            "spec": {"targetCRD": {"name": target}, "hubVersion": hub, "spokes": spokes}})
    };
    let rename = |spoke: &str| {
        let (hub_path, spoke_path) =
            if spoke == "v1" { ("spec.bar", "spec.foo") } else { ("spec.foo", "spec.bar") };
        json!([{"version": spoke, "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": hub_path, "spokePath": spoke_path}}]}])
    };
    MANAGER.apply(&cfgs, &cfg, config("v1", rename("v2"))).await?;
    wait_for(&format!("{target} to be wired to {service}"), WAIT, || async {
        let crd = crds.get(&target).await?;
        Ok(dco_tests::conversion_service(&crd).is_some_and(|(_, name)| name == service).then_some(()))
    })
    .await?;

    // 10,000 objects written at v1 while v1 is stored, in two namespaces.
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(
                json!({"metadata": {"name": other_ns, "labels": {"dco-tests": "true"}}}),
            )?,
        )
        .await?;
    let created = Instant::now();
    let v1_ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, "v1", "Widget"), "widgets");
    futures::stream::iter(0..OBJECTS)
        .map(|i| {
            let ns = if i % 2 == 0 { t.ns.clone() } else { other_ns.clone() };
            let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns, &v1_ar);
            let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                "metadata": {"name": format!("o{i}"), "labels": {label.0: label.1}}, "spec": spec_at("v1", i)}))
            .expect("a Widget");
            async move { api.create(&PostParams::default(), &obj).await.with_context(|| format!("creating o{i}")) }
        })
        .buffer_unordered(32)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    eprintln!("{OBJECTS} objects created at v1 in {:?}", created.elapsed());

    let (at_v1, at_v2) = (api_at(&client, &group, "v1"), api_at(&client, &group, "v2"));
    let before_v1 = snapshot(&at_v1, &selector).await?;
    let before_v2 = snapshot(&at_v2, &selector).await?;
    ensure!(
        before_v1.len() == OBJECTS && before_v2.len() == OBJECTS,
        "read {} and {} objects",
        before_v1.len(),
        before_v2.len()
    );

    // The storage version moves to v2 and the config's hub with it (applied together, as
    // `convctl plan --to` orders it): storedVersions [v1, v2].
    MANAGER.apply(&crds, &target, crd(&target, &group, label, Some(true), "v2")).await?;
    MANAGER.apply(&cfgs, &cfg, config("v2", rename("v1"))).await?;
    wait_for(&format!("{cfg} to apply hub v2"), WAIT, || async {
        let c = cfgs.get(&cfg).await?;
        let applied = c.status.as_ref().is_some_and(|s| {
            s.phase == Some(dco_api::config::Phase::Applied) && s.observed_generation == c.metadata.generation
        });
        Ok(applied.then_some(()))
    })
    .await?;
    wait_for("storedVersions [v1, v2]", WAIT, || async {
        Ok((stored_versions(&crds, &target).await? == ["v1", "v2"]).then_some(()))
    })
    .await?;

    // --dry-run counts and writes nothing.
    let (code, report) =
        convctl_json(&kubeconfig, &["--crd", &target, "--dry-run", "--prune-stored-versions"])?;
    ensure!(code == 0, "--dry-run exited {code}");
    ensure!(report["summary"]["targets"][0]["listed"].as_u64() == Some(OBJECTS as u64), "{report}");
    ensure!(stored_versions(&crds, &target).await? == ["v1", "v2"], "--dry-run changed storedVersions");
    ensure!(snapshot(&at_v2, &selector).await? == before_v2, "--dry-run wrote an object");

    // A first run, slowed by --qps, killed with SIGKILL part way.
    let mut child = convctl(&kubeconfig, &["--crd", &target, "--qps", "150", "--concurrency", "8"])?
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()?;
    tokio::time::sleep(Duration::from_secs(25)).await;
    ensure!(child.try_wait()?.is_none(), "the first run ended before it was killed");
    child.kill()?; // SIGKILL
    child.wait()?;
    let after_kill = snapshot(&at_v2, &selector).await?;
    let rewritten_first = after_kill.iter().filter(|(k, v)| before_v2[*k].1 != v.1).count();
    eprintln!("the killed run rewrote {rewritten_first} of {OBJECTS} objects");
    ensure!(
        rewritten_first > 0 && rewritten_first < OBJECTS,
        "the kill was not part way: {rewritten_first} rewritten"
    );
    ensure!(stored_versions(&crds, &target).await? == ["v1", "v2"], "the killed run changed storedVersions");

    // The rerun: finds the first run's objects already at v2, rewrites the rest, prunes.
    let (code, report) = convctl_json(
        &kubeconfig,
        &[
            "--crd",
            &target,
            "--prune-stored-versions",
            "--qps",
            "5000",
            "--concurrency",
            "16",
            "--page-size",
            "500",
        ],
    )?;
    ensure!(code == 0, "the rerun exited {code}: {report}");
    let r = &report["summary"]["targets"][0];
    ensure!(r["rewritten"].as_u64() == Some(OBJECTS as u64) && r["failed"] == 0 && r["skipped"] == 0, "{r}");
    ensure!(
        r["alreadyAtStorageVersion"].as_u64() == Some(rewritten_first as u64),
        "the rerun found {} already at v2, the killed run rewrote {rewritten_first}",
        r["alreadyAtStorageVersion"]
    );
    ensure!(r["storedVersionsAfter"] == json!(["v2"]), "{r}");
    ensure!(stored_versions(&crds, &target).await? == ["v2"], "storedVersions was not pruned");
    eprintln!(
        "rerun: {} objects ({} rewritten at v2, {} already there) in {:.1} s: {:.0} objects/s (--concurrency 16, --qps 5000, debug build)",
        r["rewritten"],
        OBJECTS - rewritten_first,
        rewritten_first,
        r["seconds"].as_f64().unwrap_or_default(),
        r["objectsPerSecond"].as_f64().unwrap_or_default()
    );
    let migrated_v2 = snapshot(&at_v2, &selector).await?;
    ensure!(migrated_v2.iter().all(|(k, v)| before_v2[k].1 != v.1), "an object was not rewritten");
    same_specs(&before_v1, &snapshot(&at_v1, &selector).await?, "at v1 after the migration")?;
    same_specs(&before_v2, &migrated_v2, "at v2 after the migration")?;

    // v1 retired under a load at v2: unserved, the config deleted, v1 removed from the CRD.
    let load = Load::start(
        Target {
            client: client.clone(),
            ns: t.ns.clone(),
            group: group.clone(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            spoke: "v2".into(),
            hub: "v2".into(),
            spec: load_spec,
            manager: "dco-convctl-migrate-storage-load",
        },
        8,
        Duration::from_millis(20),
    );
    load.wait_clean(50, WAIT, "before v1 is retired").await?;
    MANAGER.apply(&crds, &target, crd(&target, &group, label, Some(false), "v2")).await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    // One version served: the config may go (docs/operations.md, "Deleting"), the operator
    // reverting the target's conversion to None.
    cfgs.delete(&cfg, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&cfgs, &cfg, WAIT).await?;
    let strategy = crds.get(&target).await?.spec.conversion.map(|c| c.strategy);
    ensure!(strategy.as_deref() == Some("None"), "{target}'s conversion after the config went: {strategy:?}");
    MANAGER.apply(&crds, &target, crd(&target, &group, label, None, "v2")).await?;
    let crd_now = crds.get(&target).await?;
    ensure!(
        crd_now.spec.versions.iter().map(|v| v.name.as_str()).collect::<Vec<_>>() == ["v2"],
        "v1 is still in {target}"
    );
    let tail = load.tally();
    load.wait_clean(tail.ok + tail.failed + 100, WAIT, "after v1 was removed").await?;
    let tally = load.stop().await?;
    eprintln!(
        "load while v1 was retired: {} requests ok, {} failed, {} wrong",
        tally.ok, tally.failed, tally.wrong
    );
    ensure!(tally.failed == 0 && tally.wrong == 0, "{tally:?}");
    let retired_v2 = snapshot(&at_v2, &selector).await?;
    same_specs(&before_v2, &retired_v2, "at v2 after v1 was removed")?;

    // A second run: already migrated, nothing written.
    let (code, report) = convctl_json(&kubeconfig, &["--crd", &target, "--prune-stored-versions"])?;
    ensure!(code == 0, "the second run exited {code}");
    ensure!(report["summary"]["targets"][0]["state"] == "already-migrated", "{report}");
    ensure!(
        report["findings"].as_array().is_some_and(|f| f.iter().any(|f| f["rule"] == "already-migrated")),
        "{report}"
    );
    ensure!(snapshot(&at_v2, &selector).await? == retired_v2, "the second run wrote an object");
    ensure!(stored_versions(&crds, &target).await? == ["v2"], "storedVersions changed");

    let _ = cfgs
        .patch(&cfg, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = cfgs.delete(&cfg, &DeleteParams::default()).await;
    let _ = crds.delete(&target, &DeleteParams::default()).await;
    let _ = servers
        .patch(&server, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = servers.delete(&server, &DeleteParams::default()).await;
    let _ = namespaces.delete(&other_ns, &DeleteParams::background()).await;
    t.cleanup().await;
    Ok(())
}

/// Objects written or deleted between the LIST and their write: a slowed run over 1,000
/// objects (strategy `None`, `spec.n` in both versions' schemas) meets 11 objects relabelled
/// and 11 deleted after it listed them. Each relabelled one is a conflict, re-read and written
/// (its new label kept: the write is of the object as re-read, not as first listed), and found
/// already at v2 (the relabelling wrote it there); each deleted one is skipped; nothing fails,
/// so the prune goes through.
#[tokio::test]
async fn objects_changed_after_the_list_are_re_read_and_deleted_ones_skipped() -> Result<()> {
    const N: usize = 1_000;
    let t = TestEnv::new("migst-race").await?;
    let client = t.client.clone();
    let label = ("dco-convctl-migrate-storage", t.ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    let group = format!("{}.migst.dco.rs", t.ns);
    let target = format!("widgets.{group}");
    let _cluster_scoped =
        dco_tests::ClusterScoped(vec![(dco_tests::ar::<CustomResourceDefinition>(), target.clone())]);
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    MANAGER.apply(&crds, &target, crd(&target, &group, label, Some(true), "v1")).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let v1_ar = ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(&group, "v1", "Widget"), "widgets");
    let v1: Api<DynamicObject> = Api::namespaced_with(client.clone(), &t.ns, &v1_ar);
    futures::stream::iter(0..N)
        .map(|i| {
            let obj: DynamicObject = serde_json::from_value(json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                "metadata": {"name": format!("o{i}"), "labels": {label.0: label.1}}, "spec": {"n": i}}))
            .expect("a Widget");
            let v1 = v1.clone();
            async move { v1.create(&PostParams::default(), &obj).await.with_context(|| format!("creating o{i}")) }
        })
        .buffer_unordered(32)
        .try_for_each(|_| async { Ok(()) })
        .await?;
    MANAGER.apply(&crds, &target, crd(&target, &group, label, Some(true), "v2")).await?;
    wait_for("storedVersions [v1, v2]", WAIT, || async {
        Ok((stored_versions(&crds, &target).await? == ["v1", "v2"]).then_some(()))
    })
    .await?;

    // 1,000 objects at 40 a second: the last in name order (o98*, o99*) are written ~20 s after
    // the LIST read them.
    let child = convctl(
        &t.cluster.kubeconfig,
        &["--crd", &target, "--qps", "40", "--concurrency", "2", "--prune-stored-versions", "-o", "json"],
    )?
    .stdout(Stdio::piped())
    .stderr(Stdio::piped())
    .spawn()?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let late = |prefix: &str| -> Vec<String> {
        std::iter::once(prefix.to_string()).chain((0..10).map(|d| format!("{prefix}{d}"))).collect()
    };
    for name in late("o99") {
        let relabel = json!({"metadata": {"labels": {"touched": "yes"}}});
        v1.patch(&name, &PatchParams::default(), &Patch::Merge(&relabel)).await?;
    }
    for name in late("o98") {
        v1.delete(&name, &DeleteParams::default()).await?;
    }
    let out = tokio::task::spawn_blocking(move || child.wait_with_output()).await??;
    let stdout = String::from_utf8_lossy(&out.stdout);
    eprintln!(
        "convctl migrate-storage with objects changed meanwhile:\n{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    ensure!(out.status.code() == Some(0), "exited {:?}", out.status.code());
    let report: Value = serde_json::from_str(&stdout)?;
    let r = &report["summary"]["targets"][0];
    ensure!(r["listed"] == N && r["skipped"] == 11 && r["conflictsRetried"] == 11, "{r}");
    ensure!(r["rewritten"] == N - 11 && r["failed"] == 0 && r["alreadyAtStorageVersion"] == 11, "{r}");
    ensure!(stored_versions(&crds, &target).await? == ["v2"], "storedVersions was not pruned");
    let touched = v1.list(&ListParams::default().labels(&format!("{selector},touched=yes"))).await?;
    ensure!(touched.items.len() == 11, "{} relabelled objects kept their label", touched.items.len());

    let _ = crds.delete(&target, &DeleteParams::default()).await;
    t.cleanup().await;
    Ok(())
}
