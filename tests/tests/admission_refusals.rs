//! The operator's validating admission webhook (docs/admission.md) on the local
//! cluster: dco-operator as a Deployment of 2 Pods behind the Service it applies itself
//! (`--admission-pod-selector`), registered by the operator (no chart), scoped by `--selector`
//! to this test's objects. Every refusal is tried with the cluster's real kubectl and refused
//! with its message, every warning shown, the same objects made valid admitted; then each
//! replica is SIGKILLed in turn (the kubelet restarts it) while reviews keep coming, and
//! admission keeps answering while one replica is up.
//!
//! Needs `target/debug/dco-operator` (the testenv's `dco-operator` image). Its ServiceAccount
//! is bound to cluster-admin, as in tests/src/operator_pods.rs.

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use dco_api::ConversionWebhookServer;
use k8s_openapi::api::admissionregistration::v1::ValidatingWebhookConfiguration;
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use dco_tests::operator_pods::{OperatorDeployment, SecondDefaultLoad, admission_args, remove_operators};
use dco_tests::{Manager, TestEnv, container_pid, pod_ready, wait_for};

const MANAGER: Manager = Manager("dco-admission-test");
const WAIT: Duration = Duration::from_secs(120);

struct Kubectl {
    bin: std::path::PathBuf,
    kubeconfig: std::path::PathBuf,
}

/// What kubectl said.
struct Out {
    ok: bool,
    stderr: String,
}

impl Kubectl {
    fn run(&self, args: &[&str], stdin: Option<&Value>) -> Result<Out> {
        let mut child = Command::new(&self.bin)
            .arg("--kubeconfig")
            .arg(&self.kubeconfig)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .context("running kubectl")?;
        let mut input = child.stdin.take().context("kubectl stdin")?;
        if let Some(v) = stdin {
            input.write_all(serde_json::to_string(v)?.as_bytes())?;
        }
        drop(input);
        let out = child.wait_with_output()?;
        Ok(Out { ok: out.status.success(), stderr: String::from_utf8_lossy(&out.stderr).into_owned() })
    }

    fn apply(&self, obj: &Value) -> Result<Out> {
        self.run(&["apply", "-f", "-"], Some(obj))
    }

    /// `kubectl apply` refused, with `want` in what it printed.
    fn refused(&self, what: &str, obj: &Value, want: &str) -> Result<()> {
        let o = self.apply(obj)?;
        ensure!(!o.ok, "{what}: admitted, but it should be refused with {want:?}");
        ensure!(
            o.stderr.contains("denied the request") && o.stderr.contains(want),
            "{what}: refused, but not with {want:?}:\n{}",
            o.stderr
        );
        eprintln!("refused ({what}): {}", o.stderr.trim());
        Ok(())
    }

    /// `kubectl apply` admitted; with `warning` shown when given.
    fn admitted(&self, what: &str, obj: &Value, warning: Option<&str>) -> Result<()> {
        let o = self.apply(obj)?;
        ensure!(o.ok, "{what}: refused:\n{}", o.stderr);
        if let Some(w) = warning {
            ensure!(
                o.stderr.contains("Warning:") && o.stderr.contains(w),
                "{what}: no warning {w:?}:\n{}",
                o.stderr
            );
            eprintln!("admitted with a warning ({what}): {}", o.stderr.trim());
        }
        Ok(())
    }
}

#[tokio::test]
async fn admission_refuses_warns_and_survives_replica_kills() -> Result<()> {
    let t = TestEnv::new("adm").await?;
    let result = scenario(&t).await;
    remove_operators(&t, &[format!("dco-adm-test={}", t.ns)]).await;
    t.cleanup().await;
    result
}

async fn scenario(t: &TestEnv) -> Result<()> {
    let client = t.client.clone();
    let ns = t.ns.clone();
    let label = ("dco-adm-test", ns.as_str());
    let selector = format!("{}={}", label.0, label.1);
    let pp = PatchParams::apply(&MANAGER).force();
    dco_tests::install_dco_crds(&client, &MANAGER).await?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    let operators = OperatorDeployment {
        app: "dco-adm",
        replicas: 2,
        selector: &selector,
        extra_args: ["--lease-duration", "9s", "--lease-renew-interval", "2s"]
            .map(String::from)
            .into_iter()
            .chain(admission_args(&ns, "dco-admission", "dco-adm"))
            .collect(),
        rust_log: "info,dco_operator::admission=debug",
        termination_grace_s: 5,
    };
    operators.apply(t, &MANAGER).await?;
    let pods: Api<Pod> = t.api();
    let ready = |n: usize| operators.ready(t, n, WAIT);
    let started = Instant::now();
    ready(2).await?;
    eprintln!("2 operator Pods Ready after {:?}", started.elapsed());

    let kubectl = Kubectl { bin: t.cluster.kubectl(), kubeconfig: t.cluster.kubeconfig.clone() };
    let meta = |name: &str| json!({"name": name, "labels": {label.0: label.1}});
    let server = |name: &str, spec: Value| json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer", "metadata": meta(name), "spec": spec});
    let (d, d2, p, x) = (format!("{ns}-d"), format!("{ns}-d2"), format!("{ns}-p"), format!("{ns}-x"));
    kubectl.admitted(
        "the default server",
        &server(&d, json!({"default": true, "replicas": 0, "namespace": ns})),
        None,
    )?;
    // The configuration is applied by the first Ready replica; the apiserver picks it up soon.
    wait_for("the webhook to answer", WAIT, || async {
        let o = kubectl.apply(&server(&d2, json!({"default": true, "replicas": 0})))?;
        if o.ok {
            let _ = kubectl.run(&["delete", "conversionwebhookserver", &d2, "--wait=false"], None);
        }
        Ok(o.stderr.contains("denied the request").then_some(()))
    })
    .await?;
    eprintln!("admission answering {:?} after the Deployment was applied", started.elapsed());
    let vwc_name = "dco-operator-admission-";
    let vwcs: Api<ValidatingWebhookConfiguration> = Api::all(client.clone());
    let vwc = vwcs
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .find(|v| {
            v.metadata.name.as_deref().is_some_and(|n| n.starts_with(vwc_name))
                && serde_json::to_string(&v.webhooks).unwrap_or_default().contains(&ns)
        })
        .context("the operator's ValidatingWebhookConfiguration")?;
    let hooks = serde_json::to_value(&vwc.webhooks)?;
    for h in hooks.as_array().context("webhooks")? {
        ensure!(
            h["failurePolicy"] == "Fail" && h["timeoutSeconds"] == 5 && h["sideEffects"] == "None",
            "{h}"
        );
        ensure!(h["objectSelector"] == json!({"matchLabels": {label.0: label.1}}), "{h}");
        ensure!(h["clientConfig"]["caBundle"].as_str().is_some_and(|c| !c.is_empty()), "{h}");
    }

    // Servers.
    kubectl.refused(
        "a second default",
        &server(&d2, json!({"default": true, "replicas": 0})),
        &format!("ConversionWebhookServer {d2}: spec.default: ConversionWebhookServer {d} already has spec.default: true; only one server may be the default"),
    )?;
    kubectl.admitted(
        "the same server, not the default",
        &server(&d2, json!({"default": false, "replicas": 0})),
        None,
    )?;
    kubectl.refused(
        "a pool without the default",
        &server(&p, json!({"replicas": 0, "sharding": {"enabled": true}})),
        &format!("ConversionWebhookServer {p}: spec.sharding.enabled: the pool ({p}) would exist while the default server {d} is not in it"),
    )?;
    kubectl.admitted(
        "the default joins the pool first",
        &server(&d, json!({"default": true, "replicas": 0, "namespace": ns, "sharding": {"enabled": true}})),
        None,
    )?;
    wait_for("the cache to see the default in the pool", WAIT, || async {
        let o = kubectl.apply(&server(&p, json!({"replicas": 0, "sharding": {"enabled": true}})))?;
        Ok(o.ok.then_some(()))
    })
    .await?;
    kubectl.refused(
        "the default leaves the pool while it has members",
        &server(&d, json!({"default": true, "replicas": 0, "namespace": ns})),
        &format!("ConversionWebhookServer {d}: spec.sharding.enabled: the pool ({p}) would exist while the default server {d} is not in it"),
    )?;
    kubectl.refused(
        "managed extraArgs, both forms",
        &server(&x, json!({"replicas": 0, "extraArgs": ["--drain-period=5s", "--listen=0.0.0.0:1", "--instance", "other"]})),
        &format!("ConversionWebhookServer {x}: spec.extraArgs: [1] \"--listen=0.0.0.0:1\", [2] \"--instance\", [3] \"other\" set(s) a flag the operator manages"),
    )?;
    kubectl.admitted(
        "extraArgs without managed flags",
        &server(&x, json!({"replicas": 0, "extraArgs": ["--drain-period=5s"]})),
        None,
    )?;

    // Configs: a target with a hub-only field.
    let group = format!("{ns}.adm.dco.rs");
    let target = format!("widgets.{group}");
    let schema = |props: Value| json!({"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": props}}}});
    crds.patch(&target, &pp, &Patch::Apply(json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": target},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"a": {"type": "string"}, "hubOnly": {"type": "string"},
                    "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}}}))},
                {"name": "v1", "served": true, "storage": false, "schema": schema(json!({"b": {"type": "string"},
                    "items": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}}}))}]}})))
        .await?;
    let c = format!("{ns}-c");
    let config = |name: &str, target: &str, spec: Value| {
        let mut s = spec;
        s["targetCRD"] = json!({"name": target});
        json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig", "metadata": meta(name), "spec": s})
    };
    let rename =
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}});
    let items = json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.items", "spokePath": "spec.items"}});
    let spokes = |rules: Value| json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": rules}]});
    let delete = json!({"strategy": "Delete", "delete": {"path": "spec.hubOnly", "existsOn": "Hub"}});
    kubectl.refused(
        "a lossy rule without acknowledgeLossy",
        &config(&c, &target, spokes(json!([rename, items, delete]))),
        &format!("CRDConversionConfig {c}: spec.spokes[0].rules[2]: spoke v1, rule 2 (Delete) spec.hubOnly: rule is lossy ("),
    )?;
    let fe = |rules: Value| json!({"strategy": "ForEach", "forEach": {"hubItemsPath": "spec.items", "spokeItemsPath": "spec.items", "rules": rules}});
    let inner_bad = json!({"strategy": "FieldRename", "enumRemap": {"path": "a", "mapping": []}});
    kubectl.refused(
        "a nested params block that does not match its strategy",
        &config(&c, &target, spokes(json!([rename, fe(json!([inner_bad]))]))),
        "spec.spokes[0].rules[1].forEach.rules[0]: params block `enumRemap` does not belong to strategy FieldRename; remove it",
    )?;
    kubectl.refused(
        "ForEach three deep",
        &config(&c, &target, spokes(json!([rename, fe(json!([fe(json!([fe(json!([]))]))]))]))),
        "spec.spokes[0].rules[1].forEach.rules[0].forEach.rules[0].forEach.rules: nested rules go deeper than 2 levels",
    )?;
    kubectl.refused(
        "a spoke equal to the hub, and one listed twice",
        &config(&c, &target, json!({"hubVersion": "v2", "spokes": [{"version": "v2", "rules": []}, {"version": "v1", "rules": [rename]}, {"version": "v1", "rules": []}]})),
        "spec.spokes[0].version: v2 is the hub version (spec.hubVersion); a spoke cannot be the hub, remove this spoke; spec.spokes[2].version: v1 is listed twice (also spec.spokes[1]); merge its rules into one entry",
    )?;
    let mut when_empty = rename.clone();
    when_empty["when"] = json!({"path": "", "equals": "x"});
    kubectl.refused(
        "when without a path",
        &config(&c, &target, spokes(json!([when_empty, items]))),
        "spec.spokes[0].rules[0].when.path: the path is empty",
    )?;
    let cel = json!({"strategy": "CEL", "cel": {"hubPaths": ["spec.a"], "spokePaths": ["spec.b"], "hubToSpoke": "{'spec.b': object.spec.a}", "spokeToHub": "{'spec.a': object.spec.b}"}});
    kubectl.refused(
        "CEL without acknowledgement",
        &config(&c, &target, spokes(json!([cel, items]))),
        &format!("CRDConversionConfig {c}: spec.spokes[0].rules[0]: strategy CEL is never provably lossless (the engine cannot prove its two expressions are inverses); set acknowledgeLossy: true with a reason"),
    )?;
    kubectl.refused(
        "a label key that is not a qualified name",
        &config(&c, &target, spokes(json!([rename, items, {"strategy": "ToLabel", "toLabel": {"hubPath": "spec.hubOnly", "key": "not a key", "serialization": "String", "restoreOnReverse": true}}]))),
        "spec.spokes[0].rules[2].toLabel.key: \"not a key\" is not a qualified name",
    )?;
    kubectl.refused(
        "FromLabel with serialization JSON",
        &config(&c, &target, spokes(json!([rename, items, {"strategy": "FromLabel", "fromLabel": {"spokePath": "spec.b", "key": "example.org/b", "serialization": "JSON", "stashOnReverse": true}}]))),
        "spec.spokes[0].rules[2].fromLabel.serialization: JSON cannot be stored in a label value",
    )?;
    // Valid: the lossy rule acknowledged (without a reason: a warning), pinned to a server that
    // does not exist yet (a warning).
    let mut acked = delete.clone();
    acked["acknowledgeLossy"] = json!(true);
    let mut pinned = spokes(json!([rename, items, acked]));
    pinned["webhookServerRef"] = json!({"name": format!("{ns}-later")});
    let o = kubectl.apply(&config(&c, &target, pinned))?;
    ensure!(o.ok, "the valid config: {}", o.stderr);
    for w in [
        format!(
            "CRDConversionConfig {c} spec.spokes[0].rules[2].reason: acknowledgeLossy is set without a reason"
        ),
        format!(
            "CRDConversionConfig {c} spec.webhookServerRef.name: ConversionWebhookServer {ns}-later does not exist yet"
        ),
    ] {
        ensure!(o.stderr.contains(&w), "no warning {w:?}:\n{}", o.stderr);
    }
    eprintln!(
        "admitted with warnings (acknowledged lossy rule, pin to a missing server): {}",
        o.stderr.trim()
    );
    kubectl.admitted(
        "a config whose target does not exist yet",
        &config(&format!("{ns}-later"), &format!("nothing.{group}"), spokes(json!([]))),
        Some(&format!("CustomResourceDefinition nothing.{group} does not exist yet")),
    )?;
    kubectl.refused(
        "a second config for the same target, of the other kind",
        &json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig", "metadata": meta(&format!("{ns}-xc")),
            "spec": {"targetXRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}}),
        &format!("XRDConversionConfig {ns}-xc: spec.targetXRD.name: {target} already has a config: CRDConversionConfig {c}; a target takes one config (of either kind)"),
    )?;

    kubectl.admitted(
        "the XRDConversionConfig for a target of its own",
        &json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig", "metadata": meta(&format!("{ns}-xc")),
            "spec": {"targetXRD": {"name": format!("x{target}")}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": []}]}}),
        Some(&format!("CompositeResourceDefinition x{target} does not exist yet")),
    )?;

    // Deleting a server configs resolve to: c is pinned to x now.
    let mut to_x = spokes(json!([rename, items, acked]));
    to_x["webhookServerRef"] = json!({"name": x});
    let mut acked_reason = to_x.clone();
    acked_reason["spokes"][0]["rules"][2]["reason"] = json!("hubOnly is dropped from v1 on purpose");
    kubectl.admitted("the config pinned to x", &config(&c, &target, acked_reason), None)?;
    let o = kubectl.run(&["delete", "conversionwebhookserver", &x, "--wait=false"], None)?;
    ensure!(!o.ok && o.stderr.contains(&format!("ConversionWebhookServer {x}: 1 config(s) still resolve to it: CRDConversionConfig {c} (target {target}); move them first")), "{}", o.stderr);
    eprintln!("refused (deleting a server in use): {}", o.stderr.trim());
    let o = kubectl.run(
        &["annotate", "conversionwebhookserver", &x, "conversion.dco.rs/allow-force-delete=true"],
        None,
    )?;
    ensure!(o.ok, "{}", o.stderr);
    let o = kubectl.run(&["delete", "conversionwebhookserver", &x, "--wait=false"], None)?;
    ensure!(o.ok, "the annotated server: {}", o.stderr);

    // Replica kills under load: reviews (dry-run, so nothing is stored) every 20 ms, each
    // replica SIGKILLed in turn (twice each) once the other is Ready.
    let servers: Api<ConversionWebhookServer> = Api::all(client.clone());
    let load = SecondDefaultLoad::start(servers.clone(), &d2, label);
    // The apiserver resolves the Service to Ready Pods (docs/testenv.md) and does not retry a
    // failed webhook POST: a review sent to a killed replica before its Pod is not Ready in the
    // API fails (as with kube-proxy and endpoints). Those are counted apart (`moves::Kill`
    // does the same for conversion); any other failure fails the test.
    let mut kills: Vec<(Instant, Instant)> = Vec::new();
    for round in 0..4 {
        let mut rs = ready(2).await?;
        rs.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        let victim = &rs[round % 2];
        let name = victim.metadata.name.clone().unwrap_or_default();
        let pid = container_pid(victim, "operator").context("the operator's pid")?;
        dco_tests::signal(pid, "KILL")?;
        let killed = Instant::now();
        eprintln!("SIGKILLed {name} (pid {pid})");
        let not_ready = wait_for(&format!("{name} not Ready"), WAIT, || async {
            Ok((!pod_ready(&pods.get(&name).await?)).then(Instant::now))
        })
        .await?;
        eprintln!("{name} not Ready in the API {:?} after the kill", not_ready - killed);
        kills.push((killed, not_ready));
        wait_for(&format!("{name} to restart"), WAIT, || async {
            let p = pods.get(&name).await?;
            Ok((pod_ready(&p) && container_pid(&p, "operator").is_some_and(|n| n != pid)).then_some(()))
        })
        .await?;
        eprintln!("{name} Ready again {:?} after the kill", killed.elapsed());
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    // A graceful stop (a rollout, a drained node): the Pod deleted, the replica turns not
    // Ready at SIGTERM and keeps answering for a drain period (operator/src/shutdown.rs), so nothing fails.
    let rs = ready(2).await?;
    let gone = rs[0].metadata.name.clone().unwrap_or_default();
    let deleted = Instant::now();
    pods.delete(&gone, &DeleteParams::default()).await?;
    wait_for(&format!("{gone} to be replaced"), WAIT, || async {
        let l = pods.list(&ListParams::default().labels("app=dco-adm")).await?;
        let names: Vec<String> =
            l.items.iter().filter(|p| pod_ready(p)).filter_map(|p| p.metadata.name.clone()).collect();
        Ok((names.len() == 2 && !names.contains(&gone) && pods.get_opt(&gone).await?.is_none()).then_some(()))
    })
    .await?;
    eprintln!("deleted {gone}; replaced and gone {:?} later", deleted.elapsed());
    let graceful = (deleted, Instant::now());
    let (admitted, denied, failed) = load.stop().await?;
    let during_delete = failed.iter().filter(|(at, _)| *at >= graceful.0 && *at <= graceful.1).count();
    ensure!(
        during_delete == 0,
        "{during_delete} reviews failed while a replica stopped gracefully: {failed:?}"
    );
    let propagation = Duration::from_millis(250);
    let (to_dying, other): (Vec<_>, Vec<_>) =
        failed.iter().partition(|(at, _)| kills.iter().any(|(k, nr)| *at >= *k && *at <= *nr + propagation));
    let total = admitted + denied + failed.len() as u64;
    eprintln!(
        "during 4 replica kills (each replica twice) and 1 graceful Pod delete: {total} reviews, {admitted} admitted, {denied} refused with the rule's message, {} failed: {} sent to a killed replica before its Pod was not Ready, {} otherwise {:?}",
        failed.len(),
        to_dying.len(),
        other.len(),
        failed.iter().map(|(_, e)| e).take(3).collect::<Vec<_>>()
    );
    ensure!(admitted > 20 && denied > 20, "too little load: {admitted} admitted, {denied} denied");
    if !other.is_empty() {
        bail!("{} of {total} reviews failed with a live replica up: {other:?}", other.len());
    }
    Ok(())
}
