//! convctl's live admin commands on the local cluster (docs/convctl.md: "diff --live", "Fleet
//! CI", "completion", "crossplane status", "retarget"):
//!
//! 1. `diff --live` over a fleet directory of two kubeconfigs (`east.yaml` → the first
//!    apiserver, `west.yaml` → the second; one etcd): no delta while the file and the deployed
//!    config agree (exit 0), a delta in each context once the deployed config is changed, each
//!    finding naming its context (exit 1); a target drift with `--crd FILE`; an unreachable
//!    member its own finding. The Fleet CI script `docs/examples/fleet-ci.sh` runs lint, `test
//!    --live` and `diff --live` over that fleet: exit 0 before the change, 1 after.
//! 2. completion offers a kubeconfig's contexts (also after `--contexts a,`), the server names
//!    the cluster has for `retarget --to`, and the names in files when the context is dead
//!    (within the 2 s bound).
//! 3. `crossplane status` on an XRD of a real Crossplane (its lock taken, as every Crossplane
//!    test does): unwired (nothing to propagate), then wired by hand and propagated by
//!    Crossplane into its XR and claim CRDs, then package-labelled (a warning, not a failure),
//!    then named by a config.
//! 4. `retarget`: four targets on a default server `a`, under a load of reads and writes each;
//!    a dry run writes nothing; `--canary 50 --apply` pins two (the hash-chosen ones) to `b`,
//!    the operator moves exactly those to `b`, a rerun writes nothing; `--unpin --from b
//!    --apply` hands them back to `a`; the load has no failed or wrong request.
//!
//! Needs `target/debug/convctl`, `dco-operator` and `dco-webhook` (`cargo build -p convctl -p
//! dco-operator -p dco-webhook`) and, for 3, Go (the crossplane tool).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use dco_tests::load::{Load, Target};
use dco_tests::moves::Tally;
use dco_tests::pinned_move::{handover, wired};
use dco_tests::{Manager, TestEnv, wait_for};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

const MANAGER: Manager = Manager("dco-convctl-live-admin");
const WAIT: Duration = Duration::from_secs(120);

fn convctl() -> Result<PathBuf> {
    dco_tests::workspace_binary("convctl")
}

fn run(cmd: &mut Command) -> Result<Output> {
    let out = cmd.output().context("running convctl")?;
    eprintln!(
        "$ {:?} → {:?}\n{}{}",
        cmd.get_args().collect::<Vec<_>>(),
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn scratch(ns: &str) -> Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("dco-{ns}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// `src` (an admin kubeconfig of the local cluster) with its one context, cluster and user
/// renamed to `name`; `server` replaces the apiserver's address when given.
fn renamed(src: &Path, name: &str, server: Option<&str>) -> Result<Value> {
    let mut kc: Value = serde_yaml::from_str(&std::fs::read_to_string(src)?)?;
    let cluster = kc["clusters"][0].clone();
    let user = kc["users"][0].clone();
    let mut cluster = json!({"name": name, "cluster": cluster["cluster"]});
    if let Some(s) = server {
        cluster["cluster"]["server"] = json!(s);
    }
    kc["clusters"] = json!([cluster]);
    kc["users"] = json!([{"name": name, "user": user["user"]}]);
    kc["contexts"] = json!([{"name": name, "context": {"cluster": name, "user": name}}]);
    kc["current-context"] = json!(name);
    Ok(kc)
}

fn write_yaml(path: &Path, v: &Value) -> Result<()> {
    std::fs::write(path, serde_yaml::to_string(v)?).with_context(|| format!("writing {}", path.display()))
}

fn widget_crd(name: &str, group: &str, label: (&str, &str), v1_extra: Option<&str>) -> Value {
    let schema = |props: Value| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}});
    let mut v1 = json!({"storageSize": {"type": "integer"}});
    if let Some(f) = v1_extra {
        v1[f] = json!({"type": "string"});
    }
    let plural = name.split('.').next().unwrap_or("widgets");
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": plural.trim_end_matches('s'), "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema(v1)},
                {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"storageGB": {"type": "integer"}}))}]}})
}

fn widget_config(name: &str, target: &str, label: (&str, &str)) -> Value {
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": name, "labels": {label.0: label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2",
            "spokes": [{"version": "v1", "rules": [
                {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}]}]}})
}

/// Deletes a config no operator of this test manages: its finalizers (if another operator
/// added one) removed first, then waits until it is gone.
async fn remove_config<K>(api: &Api<K>, name: &str) -> Result<()>
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let _ = api
        .patch(name, &PatchParams::default(), &Patch::Merge(json!({"metadata": {"finalizers": null}})))
        .await;
    let _ = api.delete(name, &DeleteParams::default()).await;
    dco_tests::wait_deleted(api, name, WAIT).await
}

fn findings(o: &Output) -> Result<Vec<Value>> {
    let v: Value = serde_json::from_slice(&o.stdout).context("the JSON report")?;
    Ok(v["findings"].as_array().cloned().unwrap_or_default())
}

#[tokio::test]
async fn diff_live_finds_a_changed_deployed_config_per_context_and_the_fleet_ci_script_gates_on_it()
-> Result<()> {
    let t = TestEnv::new("cvdiff").await?;
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let label = ("dco-convctl-live-admin", t.ns.as_str());
    let group = format!("{}.cvdiff.dco.rs", t.ns);
    let target = format!("widgets.{group}");
    let config_name = format!("{}-widgets", t.ns);
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let cfgs: Api<CRDConversionConfig> = Api::all(t.client.clone());
    let crd = widget_crd(&target, &group, label, None);
    MANAGER.apply(&crds, &target, crd.clone()).await?;
    dco_tests::wait_crd_established(&crds, &target, WAIT).await?;
    let config = widget_config(&config_name, &target, label);
    MANAGER.apply(&cfgs, &config_name, config.clone()).await?;

    // The repository (config and target, for lint) and the fleet (one kubeconfig per cluster).
    let dir = scratch(&t.ns)?;
    let (repo, fleet) = (dir.join("repo"), dir.join("fleet"));
    std::fs::create_dir_all(&repo)?;
    std::fs::create_dir_all(&fleet)?;
    let cfg_file = repo.join("widgets-config.yaml");
    write_yaml(&cfg_file, &config)?;
    write_yaml(&repo.join("widgets-crd.yaml"), &crd)?;
    let kc2 = t.cluster.dir.join("kubeconfig-2");
    write_yaml(&fleet.join("east.yaml"), &renamed(&t.cluster.kubeconfig, "east", None)?)?;
    write_yaml(&fleet.join("west.yaml"), &renamed(&kc2, "west", None)?)?;
    let diff = |extra: &[&str]| -> Result<Output> {
        run(Command::new(convctl()?)
            .args(["diff", "--live", "-c"])
            .arg(&cfg_file)
            .arg("--kubeconfig-dir")
            .arg(&fleet)
            .args(["--request-timeout", "5"])
            .args(extra))
    };
    let script = dco_tests::repo_root().join("docs/examples/fleet-ci.sh");
    let fleet_ci = || -> Result<Output> {
        run(Command::new("sh")
            .arg(&script)
            .arg(&repo)
            .arg(&fleet)
            .env("CONVCTL", convctl()?)
            .env("REPORT_DIR", dir.join("reports")))
    };

    // Before any change: no delta anywhere, and the Fleet CI job passes.
    let o = diff(&["-o", "json"])?;
    ensure!(o.status.code() == Some(0), "diff --live before the change: {:?}", o.status);
    let report: Value = serde_json::from_slice(&o.stdout)?;
    let labels: Vec<&str> = report["summary"]["contexts"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|c| c["context"].as_str())
        .collect();
    ensure!(labels == ["east.yaml", "west.yaml"], "contexts compared: {labels:?}");
    ensure!(findings(&o)?.is_empty(), "findings before the change: {:?}", findings(&o)?);
    let o = fleet_ci()?;
    ensure!(o.status.code() == Some(0), "fleet-ci.sh before the change: {:?}", o.status);
    for report in ["lint.xml", "test-widgets-config.xml"] {
        ensure!(dir.join("reports").join(report).is_file(), "fleet-ci.sh wrote no {report}");
    }

    // The deployed config changed: a delta in every context, each naming its context.
    let patch = json!({"spec": {"driftPolicy": "FailClosed"}});
    cfgs.patch(&config_name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
    let o = diff(&["-o", "json"])?;
    ensure!(o.status.code() == Some(1), "diff --live after the change: {:?}", o.status);
    let found = findings(&o)?;
    let mut contexts: Vec<&str> = found.iter().filter_map(|f| f["location"]["context"].as_str()).collect();
    contexts.sort();
    ensure!(contexts == ["east.yaml", "west.yaml"], "one finding per context: {found:?}");
    for f in &found {
        ensure!(f["rule"] == "setting-changed", "{f}");
        let msg = f["message"].as_str().unwrap_or_default();
        ensure!(msg.contains("spec.driftPolicy") && msg.contains("FailClosed"), "{msg}");
        ensure!(
            msg.starts_with(f["location"]["context"].as_str().unwrap_or("?")),
            "not named by its context: {msg}"
        );
    }
    let table = stdout(&diff(&[])?);
    ensure!(
        table.contains("east.yaml: 1 difference(s)") && table.contains("west.yaml: 1 difference(s)"),
        "{table}"
    );
    let o = fleet_ci()?;
    ensure!(o.status.code() == Some(1), "fleet-ci.sh after the change: {:?}", o.status);

    // Back as the file has it; then the target drifts: seen with the file's target (--crd).
    MANAGER.apply(&cfgs, &config_name, config.clone()).await?;
    let undo = json!({"spec": {"driftPolicy": null}});
    cfgs.patch(&config_name, &PatchParams::default(), &Patch::Merge(&undo)).await?;
    ensure!(diff(&[])?.status.code() == Some(0), "diff --live after the config was put back");
    MANAGER.apply(&crds, &target, widget_crd(&target, &group, label, Some("owner"))).await?;
    let crd_file = repo.join("widgets-crd.yaml");
    let o = diff(&["--crd", crd_file.to_str().unwrap_or_default(), "-o", "json"])?;
    ensure!(o.status.code() == Some(1), "diff --live --crd after the target drifted: {:?}", o.status);
    let found = findings(&o)?;
    ensure!(
        found.len() == 2
            && found.iter().all(|f| f["rule"] == "target-differs"
                && f["location"]["path"] == "spec.versions[v1].schema.openAPIV3Schema"),
        "{found:?}"
    );

    // An unreachable member is a finding of its own; the others are still compared.
    let port = dco_tests::free_port()?;
    write_yaml(
        &fleet.join("dead.yaml"),
        &renamed(&t.cluster.kubeconfig, "dead", Some(&format!("https://127.0.0.1:{port}")))?,
    )?;
    let o = diff(&["-o", "json"])?;
    ensure!(o.status.code() == Some(1), "diff --live with a dead member: {:?}", o.status);
    let found = findings(&o)?;
    ensure!(
        found.len() == 1
            && found[0]["rule"] == "unreachable"
            && found[0]["location"]["context"] == "dead.yaml",
        "{found:?}"
    );

    remove_config(&cfgs, &config_name).await?;
    crds.delete(&target, &DeleteParams::default()).await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    Ok(())
}

/// What the bash completion script asks convctl for `words` (the last one being completed).
fn complete(cwd: &Path, words: &[&str]) -> Result<(Vec<String>, Duration)> {
    let t0 = Instant::now();
    let o = Command::new(convctl()?)
        .current_dir(cwd)
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
        .env("_CLAP_IFS", "\n")
        .env_remove("KUBECONFIG")
        .arg("--")
        .args(words)
        .output()?;
    ensure!(o.status.success(), "completion of {words:?}: {}", String::from_utf8_lossy(&o.stderr));
    let mut v: Vec<String> = stdout(&o).lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
    v.sort();
    Ok((v, t0.elapsed()))
}

#[tokio::test]
async fn completion_offers_the_kubeconfigs_contexts_and_the_clusters_server_names() -> Result<()> {
    let t = TestEnv::new("cvcomp").await?;
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let dir = scratch(&t.ns)?;
    // One kubeconfig with two contexts, both on the local cluster.
    let mut kc = renamed(&t.cluster.kubeconfig, "east", None)?;
    let west = renamed(&t.cluster.dir.join("kubeconfig-2"), "west", None)?;
    for list in ["clusters", "users", "contexts"] {
        let more = west[list].as_array().cloned().unwrap_or_default();
        kc[list].as_array_mut().context("a list")?.extend(more);
    }
    let port = dco_tests::free_port()?;
    let dead = renamed(&t.cluster.kubeconfig, "dead", Some(&format!("https://127.0.0.1:{port}")))?;
    for list in ["clusters", "users", "contexts"] {
        kc[list].as_array_mut().context("a list")?.extend(dead[list].as_array().cloned().unwrap_or_default());
    }
    let file = dir.join("kubeconfig");
    write_yaml(&file, &kc)?;
    let k = file.to_str().unwrap_or_default();

    let (c, _) =
        complete(&dir, &["convctl", "diff", "--live", "-c", "x.yaml", "--kubeconfig", k, "--context", ""])?;
    ensure!(c == ["dead", "east", "west"], "--context candidates: {c:?}");
    let (c, _) =
        complete(&dir, &["convctl", "crossplane", "status", "--kubeconfig", k, "--contexts", "east,w"])?;
    ensure!(c == ["east,west"], "--contexts candidates: {c:?}");

    // Server names from the cluster, for retarget --to.
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let server = format!("{}-srv", t.ns);
    MANAGER
        .apply(
            &servers,
            &server,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": server, "labels": {"dco-convctl-live-admin": t.ns}},
            "spec": {"namespace": t.ns, "replicas": 0}}),
        )
        .await?;
    let (c, _) =
        complete(&dir, &["convctl", "retarget", "--kubeconfig", k, "--context", "west", "--to", &t.ns])?;
    ensure!(c == [server.clone()], "--to candidates from the cluster: {c:?}");

    // A dead context: the names in the files of the current directory, within the bound.
    write_yaml(
        &dir.join("servers.yaml"),
        &json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
        "metadata": {"name": "from-a-file"}, "spec": {}}),
    )?;
    let (c, took) =
        complete(&dir, &["convctl", "retarget", "--kubeconfig", k, "--context", "dead", "--to", ""])?;
    ensure!(c == ["from-a-file"], "--to candidates with a dead context: {c:?}");
    ensure!(took < Duration::from_secs(5), "completion against a dead context took {took:?}");
    eprintln!("completion against a dead context answered from files in {took:?}");

    servers.delete(&server, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&servers, &server, WAIT).await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    Ok(())
}

/// `convctl crossplane status --xrd NAME -o json`: the exit code and the XRD's entry.
fn xp_status(kubeconfig: &Path, xrd: &str) -> Result<(Option<i32>, Value, Vec<Value>)> {
    let o = run(Command::new(convctl()?)
        .args(["crossplane", "status", "--xrd", xrd, "-o", "json", "--kubeconfig"])
        .arg(kubeconfig))?;
    let v: Value = serde_json::from_slice(&o.stdout).context("the status report")?;
    let entry = v["summary"]["contexts"][0]["xrds"][0].clone();
    Ok((o.status.code(), entry, v["findings"].as_array().cloned().unwrap_or_default()))
}

fn rules(found: &[Value]) -> Vec<String> {
    found.iter().filter_map(|f| f["rule"].as_str().map(str::to_string)).collect()
}

#[tokio::test]
async fn crossplane_status_shows_an_xrd_unwired_then_wired_and_propagated_then_package_owned() -> Result<()> {
    let t = TestEnv::new("cvxp").await?;
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let dir = scratch(&t.ns)?;
    let xp = dco_tests::crossplane::Crossplane::start(&t.client, &dir).await?;
    let group = format!("{}.cvxp.dco.rs", t.ns);
    let xrd_name = format!("xbuckets.{group}");
    let claim_crd = format!("buckets.{group}");
    let schema = json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object",
        "properties": {"size": {"type": "string"}}}}}});
    let xrd = json!({"apiVersion": "apiextensions.crossplane.io/v1", "kind": "CompositeResourceDefinition",
        "metadata": {"name": xrd_name},
        "spec": {"group": group, "scope": "LegacyCluster", "names": {"kind": "XBucket", "plural": "xbuckets"},
            "claimNames": {"kind": "Bucket", "plural": "buckets"},
            "versions": [
                {"name": "v1", "served": true, "referenceable": false, "schema": schema},
                {"name": "v2", "served": true, "referenceable": true, "schema": schema}]}});
    let xrds: Api<DynamicObject> =
        Api::all_with(t.client.clone(), &dco_tests::crossplane_world::xrd_resource("v1"));
    MANAGER.apply(&xrds, &xrd_name, xrd).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    for name in [&xrd_name, &claim_crd] {
        wait_for(&format!("Crossplane to generate {name}"), WAIT, || async {
            Ok(crds.get_opt(name).await?.map(|_| ()))
        })
        .await?;
    }
    let kubeconfig = t.cluster.kubeconfig.clone();

    // Unwired: nothing to propagate, no config: shown, exit 0.
    let (code, x, found) = xp_status(&kubeconfig, &xrd_name)?;
    ensure!(code == Some(0), "status of the unwired XRD exited {code:?}");
    ensure!(x["wired"] == false && x["wiring"].as_str().is_some_and(|w| w.starts_with("none")), "{x}");
    let generated: Vec<(&str, &Value)> = x["generatedCRDs"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|g| (g["role"].as_str().unwrap_or(""), &g["carriesWiring"]))
        .collect();
    ensure!(generated == [("Composite", &Value::Null), ("Claim", &Value::Null)], "{x}");
    let versions: Vec<(&str, bool)> = x["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (v["name"].as_str().unwrap_or(""), v["referenceable"] == true))
        .collect();
    ensure!(versions == [("v1", false), ("v2", true)], "{x}");
    ensure!(rules(&found) == ["no-config"], "{found:?}");

    // Wired by hand: Crossplane copies the wiring into both generated CRDs; status says so.
    let (ca, _, _) = dco_tests::serving_cert(&["dco-webhook-cvxp.example".to_string()])?;
    let conversion = json!({"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {
        "caBundle": dco_tests::b64(&ca),
        "service": {"namespace": t.ns, "name": "dco-webhook-cvxp", "path": format!("/convert/{xrd_name}"), "port": 443}}}});
    xrds.patch(
        &xrd_name,
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"conversion": conversion}})),
    )
    .await?;
    for name in [&xrd_name, &claim_crd] {
        wait_for(&format!("Crossplane to carry the wiring into {name}"), WAIT, || async {
            let crd = crds.get(name).await?;
            Ok(dco_tests::conversion_service(&crd).filter(|(_, s)| s == "dco-webhook-cvxp").map(|_| ()))
        })
        .await?;
    }
    let (code, x, found) = xp_status(&kubeconfig, &xrd_name)?;
    ensure!(code == Some(0), "status of the wired XRD exited {code:?}");
    ensure!(
        x["wired"] == true && x["wiring"].as_str().is_some_and(|w| w.contains("dco-webhook-cvxp")),
        "{x}"
    );
    ensure!(
        x["generatedCRDs"]
            .as_array()
            .is_some_and(|g| g.len() == 2 && g.iter().all(|g| g["carriesWiring"] == true)),
        "{x}"
    );
    ensure!(rules(&found) == ["no-config"], "{found:?}");

    // Owned by a package (its label): a warning that does not fail; a config naming it shows.
    let pkg = json!({"metadata": {"labels": {"pkg.crossplane.io/package": "acme-platform"}}});
    xrds.patch(&xrd_name, &PatchParams::default(), &Patch::Merge(pkg)).await?;
    let cfgs: Api<XRDConversionConfig> = Api::all(t.client.clone());
    let cfg_name = format!("{}-xbuckets", t.ns);
    MANAGER
        .apply(
            &cfgs,
            &cfg_name,
            json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
            "metadata": {"name": cfg_name, "labels": {"dco-convctl-live-admin": t.ns}},
            "spec": {"targetXRD": {"name": xrd_name}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}}),
        )
        .await?;
    let (code, x, found) = xp_status(&kubeconfig, &xrd_name)?;
    ensure!(code == Some(0), "status of the package-owned XRD exited {code:?}");
    ensure!(rules(&found) == ["package-managed"], "{found:?}");
    ensure!(found[0]["fails"] == false && found[0]["severity"] == "warning", "{found:?}");
    ensure!(x["packageOwner"].as_str().is_some_and(|p| p.contains("acme-platform")), "{x}");
    ensure!(x["configs"][0]["name"] == cfg_name.as_str() && x["versions"][0]["inConfig"] == "spoke", "{x}");

    // A missing XRD fails.
    let (code, _, found) = xp_status(&kubeconfig, &format!("xnothing.{group}"))?;
    ensure!(code == Some(1) && rules(&found) == ["xrd-missing"], "{code:?} {found:?}");

    remove_config(&cfgs, &cfg_name).await?;
    xrds.delete(&xrd_name, &DeleteParams::default()).await?;
    dco_tests::wait_deleted(&xrds, &xrd_name, WAIT).await?;
    for name in [&xrd_name, &claim_crd] {
        dco_tests::wait_deleted(&crds, name, WAIT).await?;
    }
    xp.stop().await?;
    let _ = std::fs::remove_dir_all(&dir);
    t.cleanup().await;
    Ok(())
}

const TARGETS: usize = 4;

fn load_spec(version: &str, k: i64) -> Value {
    if version == "v1" { json!({"storageSize": k}) } else { json!({"storageGB": k}) }
}

/// `(phase, state, destination)` is settled on `server` and the CRD calls its Service.
async fn settled(
    cfgs: &Api<CRDConversionConfig>,
    crds: &Api<CustomResourceDefinition>,
    ns: &str,
    cfg: &str,
    target: &str,
    server: &str,
) -> Result<bool> {
    let c = cfgs.get(cfg).await?;
    let crd = crds.get(target).await?;
    Ok(handover(&c) == ("Applied".into(), "SourceDropped".into(), server.to_string())
        && wired(&crd) == Some((ns.to_string(), format!("dco-webhook-{server}"))))
}

fn retarget(kubeconfig: &Path, selector: &str, args: &[&str]) -> Result<(Option<i32>, Value)> {
    let o = run(Command::new(convctl()?)
        .arg("retarget")
        .arg("--kubeconfig")
        .arg(kubeconfig)
        .args(["-l", selector, "--server-selector", selector, "-o", "json"])
        .args(args))?;
    Ok((
        o.status.code(),
        serde_json::from_slice::<Value>(&o.stdout).context("the retarget report")?["summary"].clone(),
    ))
}

#[tokio::test]
async fn retarget_moves_a_canary_share_to_another_server_and_back_with_no_failed_request() -> Result<()> {
    let t = TestEnv::new("cvrt").await?;
    dco_tests::map_image("dco-webhook", dco_tests::workspace_binary("dco-webhook")?)?;
    dco_tests::install_dco_crds(&t.client, MANAGER.0).await?;
    let key = "dco-e2e-cvrt";
    let label = (key, t.ns.as_str());
    let selector = format!("{key}={}", t.ns);
    let _operators = dco_tests::start_operators(&t, &selector, &["cvrt-1"], &["--resync", "60s"])?;
    let servers: Api<ConversionWebhookServer> = Api::all(t.client.clone());
    let (a, b) = (format!("{}-a", t.ns), format!("{}-b", t.ns));
    for (name, default) in [(&a, true), (&b, false)] {
        MANAGER
            .apply(
                &servers,
                name,
                json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                "metadata": {"name": name, "labels": {key: t.ns}},
                "spec": {"namespace": t.ns, "replicas": 2, "default": default}}),
            )
            .await?;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(t.client.clone());
    let cfgs: Api<CRDConversionConfig> = Api::all(t.client.clone());
    let group = |i: usize| format!("g{i}.{}.cvrt.dco.rs", t.ns);
    let target = |i: usize| format!("widgets.{}", group(i));
    let config = |i: usize| format!("{}-w{i}", t.ns);
    for i in 0..TARGETS {
        MANAGER.apply(&crds, &target(i), widget_crd(&target(i), &group(i), label, None)).await?;
        dco_tests::wait_crd_established(&crds, &target(i), WAIT).await?;
        MANAGER.apply(&cfgs, &config(i), widget_config(&config(i), &target(i), label)).await?;
    }
    for i in 0..TARGETS {
        wait_for(&format!("{} settled on {a}", config(i)), WAIT, || async {
            Ok(settled(&cfgs, &crds, &t.ns, &config(i), &target(i), &a).await?.then_some(()))
        })
        .await?;
    }
    let loads: Vec<Load> = (0..TARGETS)
        .map(|i| {
            let tg = Target {
                client: t.client.clone(),
                ns: t.ns.clone(),
                group: group(i),
                kind: "Widget".into(),
                plural: "widgets".into(),
                spoke: "v1".into(),
                hub: "v2".into(),
                spec: load_spec,
                manager: MANAGER.0,
            };
            Load::start(tg, 3, Duration::from_millis(100))
        })
        .collect();
    for l in &loads {
        l.wait_clean(12, WAIT, "before the retarget").await?;
    }
    let kubeconfig = t.cluster.kubeconfig.clone();

    // A dry run: the plan, nothing written.
    let (code, plan) = retarget(&kubeconfig, &selector, &["--to", &b, "--canary", "50"])?;
    ensure!(
        code == Some(0)
            && plan["candidates"] == TARGETS
            && plan["chosen"] == 2
            && plan["planned"] == 2
            && plan["written"] == 0,
        "{plan}"
    );
    for i in 0..TARGETS {
        let pin = cfgs.get(&config(i)).await?.spec.conversion.webhook_server_ref;
        ensure!(pin.is_none(), "the dry run pinned {}: {pin:?}", config(i));
    }

    // The canary share, applied: exactly the two planned configs move to b.
    let t0 = Instant::now();
    let (code, done) = retarget(&kubeconfig, &selector, &["--to", &b, "--canary", "50", "--apply"])?;
    ensure!(code == Some(0) && done["written"] == 2, "{done}");
    let names = |report: &Value, action: &str| -> Vec<String> {
        report["configs"]
            .as_array()
            .into_iter()
            .flatten()
            .filter(|c| c["action"] == action)
            .filter_map(|c| c["name"].as_str().map(str::to_string))
            .collect()
    };
    let moved = names(&done, "pinned");
    ensure!(
        moved.len() == 2 && moved == names(&plan, "would pin"),
        "the applied run is not the planned one: {done} vs {plan}"
    );
    for i in 0..TARGETS {
        let dest = if moved.contains(&config(i)) { &b } else { &a };
        wait_for(&format!("{} settled on {dest}", config(i)), WAIT, || async {
            Ok(settled(&cfgs, &crds, &t.ns, &config(i), &target(i), dest).await?.then_some(()))
        })
        .await?;
    }
    eprintln!(
        "retarget --canary 50: 2 of {TARGETS} targets served from {b} {:?} after the write",
        t0.elapsed()
    );

    // A rerun writes nothing: the two are already moved.
    let (code, again) = retarget(&kubeconfig, &selector, &["--to", &b, "--canary", "50", "--apply"])?;
    ensure!(code == Some(0) && again["written"] == 0 && again["alreadyMoved"] == 2, "{again}");

    // Back: the pins removed, the default serves all four again.
    let (code, back) = retarget(&kubeconfig, &selector, &["--unpin", "--from", &b, "--apply"])?;
    ensure!(code == Some(0) && back["written"] == 2, "{back}");
    for i in 0..TARGETS {
        wait_for(&format!("{} settled on {a} again", config(i)), WAIT, || async {
            Ok(settled(&cfgs, &crds, &t.ns, &config(i), &target(i), &a).await?.then_some(()))
        })
        .await?;
        let c = cfgs.get(&config(i)).await?;
        ensure!(c.spec.conversion.webhook_server_ref.is_none(), "{} still pinned", config(i));
        ensure!(
            !c.metadata.annotations.unwrap_or_default().contains_key("conversion.dco.rs/retargeted-from"),
            "{}",
            config(i)
        );
    }

    let mut total = Tally { ok: 0, failed: 0, wrong: 0 };
    for (i, l) in loads.into_iter().enumerate() {
        let tally = l.stop().await?;
        ensure!(tally.failed == 0 && tally.wrong == 0, "load on {}: {tally:?}", target(i));
        total = Tally {
            ok: total.ok + tally.ok,
            failed: total.failed + tally.failed,
            wrong: total.wrong + tally.wrong,
        };
    }
    eprintln!("load over both retargets: {total:?}");

    for i in 0..TARGETS {
        let allow = json!({"metadata": {"annotations": {"conversion.dco.rs/allow-unsafe-delete": "true"}}});
        cfgs.patch(&config(i), &PatchParams::default(), &Patch::Merge(&allow)).await?;
        cfgs.delete(&config(i), &DeleteParams::default()).await?;
    }
    for i in 0..TARGETS {
        dco_tests::wait_deleted(&cfgs, &config(i), WAIT).await?;
        crds.delete(&target(i), &DeleteParams::default()).await?;
    }
    for s in [&a, &b] {
        let force = json!({"metadata": {"annotations": {"conversion.dco.rs/allow-force-delete": "true"}}});
        servers.patch(s, &PatchParams::default(), &Patch::Merge(&force)).await?;
        servers.delete(s, &DeleteParams::default()).await?;
        dco_tests::wait_deleted(&servers, s, WAIT).await?;
    }
    t.cleanup().await;
    Ok(())
}
