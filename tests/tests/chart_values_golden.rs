//! The chart's values do what they say (docs/installation.md, "Values"):
//!
//! * `each_value_renders_what_it_says`: `helm template` with each value set alone (registry and
//!   digests, commonLabels, podAnnotations/podLabels, admission.failurePolicy, extraVolumes,
//!   priorityClassName/topologySpreadConstraints, admission.certManager, the defaults) renders
//!   what the value promises (asserted here) and exactly what `tests/golden/chart/<case>.yaml`
//!   holds: the operator Pod template's metadata, its container's image, args, mounts and
//!   resources, the Pod's volumes and scheduling, the CRD Job's image and every object's
//!   commonLabels (with admission.certManager also the Certificate's spec and the admission
//!   Role's Secret rules). What the schema and the templates refuse fails with the fix.
//!   `UPDATE_GOLDEN=1` rewrites the files.
//! * `the_readme_lists_every_value`: the table of `charts/dco/README.md` between its
//!   `values:begin`/`values:end` markers is generated from `values.schema.json` (every property,
//!   with its description) and `values.yaml` (its default), so the two cannot drift; every
//!   leaf of values.yaml is in the schema, and every schema property has a description.
//!   `UPDATE_GOLDEN=1` rewrites the table.
//! * `install_with_a_registry_and_digests_runs_the_mapped_images`: `helm install` on the local
//!   cluster with `image.registry`, `image.digest` and `webhookImage.digest`, the registry's
//!   repositories mapped to copies of the workspace's binaries: the operator Pods and the
//!   default server's webhook Pods run `<registry>/<name>@<digest>`, resolved to those copies
//!   (the local cluster's imageID names the binary), a server with `spec.image.digest` runs
//!   its own pinned image; the metrics Service selects the operator Pod, and the operator's
//!   and a webhook Pod's `/metrics` and `/debug/*` answer (docs/operations.md, "Reaching
//!   /metrics and /debug": the Pod proxy, which the local cluster refuses for its loopback Pod
//!   IPs, so there the Pod IP).

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

use dco_tests::chart::{chart_dir, documents, helm, helm_install_dco};
use dco_tests::{TestEnv, ensure_cluster, map_image, repo_root, unique_name, wait_for, workspace_binary};

const DIGEST_OP: &str = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
const DIGEST_WH: &str = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
const DIGEST_SERVER: &str = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
/// A registry no test can reach: the local cluster resolves images from its map only.
const REGISTRY: &str = "registry.dco.test:5000/mirror";

fn update() -> bool {
    std::env::var("UPDATE_GOLDEN").is_ok_and(|v| v == "1" || v == "true")
}

fn golden_dir() -> PathBuf {
    repo_root().join("tests").join("golden").join("chart")
}

/// `helm template dco charts/dco -n dco-system` with `values`, as documents.
fn render(values: &Value) -> Result<Vec<Value>> {
    let cluster = ensure_cluster()?;
    let dir = cluster.dir.join("tmp");
    std::fs::create_dir_all(&dir)?;
    let file = dir.join(format!("{}.yaml", unique_name("golden-values")));
    std::fs::write(&file, serde_yaml::to_string(values)?)?;
    let chart = chart_dir();
    let out = helm(
        &cluster,
        &["template", "dco", &chart.to_string_lossy(), "-n", "dco-system", "-f", &file.to_string_lossy()],
    );
    let _ = std::fs::remove_file(&file);
    documents(&out?)
}

fn find<'a>(docs: &'a [Value], kind: &str, name: &str) -> Result<&'a Value> {
    docs.iter()
        .find(|d| d["kind"] == kind && d["metadata"]["name"] == name)
        .with_context(|| format!("no {kind} {name} rendered"))
}

/// What the golden files hold: the parts of the render the values act on.
fn summary(docs: &[Value]) -> Result<Value> {
    let deploy = find(docs, "Deployment", "dco-operator")?;
    let pod = &deploy["spec"]["template"];
    let ctr = &pod["spec"]["containers"][0];
    let job_image = docs
        .iter()
        .find(|d| d["kind"] == "Job")
        .map(|j| j["spec"]["template"]["spec"]["containers"][0]["image"].clone())
        .unwrap_or(Value::Null);
    let mut team = BTreeMap::new();
    for d in docs {
        let key =
            format!("{}/{}", d["kind"].as_str().unwrap_or(""), d["metadata"]["name"].as_str().unwrap_or(""));
        team.insert(key, d["metadata"]["labels"]["team"].clone());
    }
    Ok(json!({
        "podMetadata": pod["metadata"],
        "container": {"image": ctr["image"], "args": ctr["args"], "volumeMounts": ctr["volumeMounts"],
            "resources": ctr["resources"]},
        "pod": {"volumes": pod["spec"]["volumes"], "priorityClassName": pod["spec"]["priorityClassName"],
            "topologySpreadConstraints": pod["spec"]["topologySpreadConstraints"]},
        "crdJobImage": job_image,
        "commonLabel team": team,
    }))
}

fn args(docs: &[Value]) -> Result<Vec<String>> {
    let deploy = find(docs, "Deployment", "dco-operator")?;
    Ok(deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .context("args")?
        .iter()
        .filter_map(|a| a.as_str().map(String::from))
        .collect())
}

/// The render of `values` against `tests/golden/chart/<case>.yaml`.
fn golden(case: &str, docs: &[Value]) -> Result<()> {
    golden_value(case, &summary(docs)?)
}

/// `got` (a summary, with what else a case renders) against `tests/golden/chart/<case>.yaml`.
fn golden_value(case: &str, got: &Value) -> Result<()> {
    let path = golden_dir().join(format!("{case}.yaml"));
    let got = serde_yaml::to_string(got)?;
    if update() {
        std::fs::create_dir_all(golden_dir())?;
        std::fs::write(&path, &got)?;
        return Ok(());
    }
    let want = std::fs::read_to_string(&path)
        .with_context(|| format!("{} is missing: run with UPDATE_GOLDEN=1", path.display()))?;
    ensure!(
        got == want,
        "{case}: the render differs from {} (UPDATE_GOLDEN=1 rewrites it):\n{got}",
        path.display()
    );
    Ok(())
}

#[test]
fn each_value_renders_what_it_says() -> Result<()> {
    // The defaults: Fail, the metrics Service, the measured resources, no volumes.
    let docs = render(&json!({}))?;
    golden("defaults", &docs)?;
    ensure!(args(&docs)?.contains(&"--admission-failure-policy=Fail".to_string()), "Fail by default");
    let svc = find(&docs, "Service", "dco-operator-metrics")?;
    ensure!(
        svc["spec"]["clusterIP"] == "None" && svc["spec"]["ports"][0]["targetPort"] == "metrics",
        "{svc}"
    );
    let deploy = find(&docs, "Deployment", "dco-operator")?;
    let resources = &deploy["spec"]["template"]["spec"]["containers"][0]["resources"];
    ensure!(
        resources["requests"]["cpu"].is_string() && resources["limits"]["memory"].is_string(),
        "{resources}"
    );

    let docs = render(&json!({"image": {"registry": format!("{REGISTRY}/"), "digest": DIGEST_OP},
        "webhookImage": {"digest": DIGEST_WH}}))?;
    golden("registry-digests", &docs)?;
    let s = summary(&docs)?;
    ensure!(s["container"]["image"] == format!("{REGISTRY}/dco-operator@{DIGEST_OP}"), "{s}");
    ensure!(s["crdJobImage"] == format!("{REGISTRY}/dco-operator@{DIGEST_OP}"), "the Job's image: {s}");
    ensure!(args(&docs)?.contains(&format!("--webhook-image={REGISTRY}/dco-webhook@{DIGEST_WH}")), "{s}");
    // A registry alone keeps the tag.
    let docs = render(&json!({"image": {"registry": "mirror.dco.test"}}))?;
    let s = summary(&docs)?;
    ensure!(
        s["container"]["image"].as_str().is_some_and(|i| i.starts_with("mirror.dco.test/dco-operator:v")),
        "{s}"
    );
    ensure!(
        args(&docs)?.iter().any(|a| a.starts_with("--webhook-image=mirror.dco.test/dco-webhook:v")),
        "the registry applies to the webhook image too: {s}"
    );

    let docs = render(&json!({"commonLabels": {"team": "platform"}, "podLabels": {"team": "pods"}}))?;
    golden("common-labels", &docs)?;
    for d in &docs {
        ensure!(
            d["metadata"]["labels"]["team"] == "platform",
            "commonLabels missing on {} {}",
            d["kind"],
            d["metadata"]["name"]
        );
    }
    let deploy = find(&docs, "Deployment", "dco-operator")?;
    ensure!(deploy["spec"]["template"]["metadata"]["labels"]["team"] == "pods", "podLabels win on the Pods");
    ensure!(
        deploy["spec"]["selector"]["matchLabels"].get("team").is_none(),
        "the selector is the chart's only (it is immutable): {deploy}"
    );

    let docs = render(
        &json!({"podAnnotations": {"example.dco.test/scrape": "true"}, "podLabels": {"tier": "control"}}),
    )?;
    golden("pod-metadata", &docs)?;
    let meta = &find(&docs, "Deployment", "dco-operator")?["spec"]["template"]["metadata"];
    ensure!(
        meta["annotations"]["example.dco.test/scrape"] == "true" && meta["labels"]["tier"] == "control",
        "{meta}"
    );

    let docs = render(&json!({"admission": {"failurePolicy": "Ignore"}}))?;
    golden("failure-policy", &docs)?;
    ensure!(
        args(&docs)?.contains(&"--admission-failure-policy=Ignore".to_string()),
        "admission.failurePolicy"
    );

    let docs = render(&json!({"operator": {
        "extraVolumes": [{"name": "proxy-ca", "configMap": {"name": "proxy-ca"}}],
        "extraVolumeMounts": [{"name": "proxy-ca", "mountPath": "/etc/proxy-ca", "readOnly": true}]}}))?;
    golden("extra-volumes", &docs)?;
    let s = summary(&docs)?;
    ensure!(s["pod"]["volumes"][0]["configMap"]["name"] == "proxy-ca", "{s}");
    ensure!(s["container"]["volumeMounts"][0]["mountPath"] == "/etc/proxy-ca", "{s}");

    let spread = json!([{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
        "labelSelector": {"matchLabels": {"app.kubernetes.io/name": "dco-operator"}}}]);
    let docs = render(
        &json!({"priorityClassName": "system-cluster-critical", "topologySpreadConstraints": spread}),
    )?;
    golden("scheduling", &docs)?;
    let s = summary(&docs)?;
    ensure!(s["pod"]["priorityClassName"] == "system-cluster-critical", "{s}");
    ensure!(s["pod"]["topologySpreadConstraints"] == spread, "{s}");

    // The admission certificate from cert-manager: a Certificate for the admission Service's
    // names into the Secret the operator serves, whose read and watch are all the Role grants.
    let docs = render(&json!({"admission": {"certManager": {"enabled": true,
        "issuerRef": {"name": "dco-ca", "kind": "Issuer", "group": "cert-manager.io"}, "renewBefore": "720h"}}}))?;
    let cert = find(&docs, "Certificate", "dco-admission-cert-manager")?;
    let role = find(&docs, "Role", "dco-operator-admission")?;
    let mut s = summary(&docs)?;
    s["admissionCertificate"] = cert["spec"].clone();
    s["admissionSecretRules"] = json!(
        role["rules"]
            .as_array()
            .context("rules")?
            .iter()
            .filter(|r| r["resources"] == json!(["secrets"]))
            .collect::<Vec<_>>()
    );
    golden_value("cert-manager", &s)?;
    ensure!(
        args(&docs)?.contains(&"--admission-tls-secret=dco-admission-cert-manager".to_string()),
        "the operator serves the Certificate's Secret: {s}"
    );
    ensure!(cert["spec"]["secretName"] == "dco-admission-cert-manager", "{cert}");
    ensure!(cert["spec"]["dnsNames"][0] == "dco-admission.dco-system.svc", "{cert}");
    ensure!(
        cert["spec"]["issuerRef"] == json!({"name": "dco-ca", "kind": "Issuer", "group": "cert-manager.io"}),
        "{cert}"
    );
    ensure!(
        s["admissionSecretRules"]
            == json!([{"apiGroups": [""], "resources": ["secrets"],
            "resourceNames": ["dco-admission-cert-manager"], "verbs": ["get", "list", "watch"]}]),
        "with cert-manager the operator writes no Secret: {s}"
    );
    // An external issuer: its group is carried; the default renders no Certificate.
    let docs = render(&json!({"admission": {"certManager": {"enabled": true,
        "issuerRef": {"name": "pca", "kind": "AWSPCAClusterIssuer", "group": "awspca.cert-manager.io"}}}}))?;
    let cert = find(&docs, "Certificate", "dco-admission-cert-manager")?;
    ensure!(cert["spec"]["issuerRef"]["group"] == "awspca.cert-manager.io", "{cert}");
    ensure!(!render(&json!({}))?.iter().any(|d| d["kind"] == "Certificate"), "a Certificate by default");
    ensure!(
        !args(&render(&json!({}))?)?.iter().any(|a| a.starts_with("--admission-tls-secret")),
        "by default"
    );

    // What the schema refuses: a digest that is not one, the chart's own label keys.
    let cluster = ensure_cluster()?;
    for (bad, why) in [
        (json!({"image": {"digest": "latest"}}), "image.digest"),
        (json!({"commonLabels": {"app.kubernetes.io/name": "x"}}), "commonLabels"),
        (json!({"admission": {"failurePolicy": "Maybe"}}), "admission.failurePolicy"),
        (json!({"admission": {"certManager": {"duration": "90d"}}}), "admission.certManager.duration"),
    ] {
        let file = cluster.dir.join("tmp").join(format!("{}.yaml", unique_name("bad-values")));
        std::fs::create_dir_all(cluster.dir.join("tmp"))?;
        std::fs::write(&file, serde_yaml::to_string(&bad)?)?;
        let r = helm(
            &cluster,
            &["template", "dco", &chart_dir().to_string_lossy(), "-f", &file.to_string_lossy()],
        );
        let _ = std::fs::remove_file(&file);
        let e = match r {
            Ok(_) => bail!("the schema accepted {bad}"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(e.contains("values don't meet the specifications of the schema"), "{why}: {e}");
    }
    // What the templates refuse, with the fix: no issuer named, a kind cert-manager lacks.
    for (bad, fix) in [
        (
            json!({"admission": {"certManager": {"enabled": true}}}),
            "admission.certManager.issuerRef.name: name the Issuer",
        ),
        (
            json!({"admission": {"certManager": {"enabled": true, "issuerRef": {"name": "x", "kind": "AWSPCAClusterIssuer"}}}}),
            "for an external issuer set admission.certManager.issuerRef.group",
        ),
    ] {
        let e = match render(&bad) {
            Ok(_) => bail!("the chart rendered {bad}"),
            Err(e) => format!("{e:#}"),
        };
        ensure!(e.contains(fix), "{bad}: {e}");
    }
    Ok(())
}

// --- the README's table ------------------------------------------------------------------

const BEGIN: &str =
    "<!-- values:begin (generated by tests/tests/chart_values_golden.rs; UPDATE_GOLDEN=1 rewrites it) -->";
const END: &str = "<!-- values:end -->";

/// Every leaf path of values.yaml (an empty map or list is a leaf).
fn leaves(prefix: &str, v: &Value, out: &mut Vec<String>) {
    match v.as_object() {
        Some(m) if !m.is_empty() => {
            for (k, v) in m {
                leaves(&format!("{prefix}{k}."), v, out);
            }
        }
        _ => out.push(prefix.trim_end_matches('.').to_string()),
    }
}

fn lookup<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// The table's rows: every schema property, depth first in the schema's order.
fn rows(prefix: &str, schema: &Value, values: &Value, out: &mut Vec<String>, missing: &mut Vec<String>) {
    let Some(props) = schema["properties"].as_object() else { return };
    for (k, s) in props {
        let path = format!("{prefix}{k}");
        let desc = s["description"].as_str().unwrap_or_default();
        if desc.is_empty() {
            missing.push(path.clone());
        }
        if s["properties"].is_object() {
            rows(&format!("{path}."), s, values, out, missing);
            continue;
        }
        let default = match lookup(values, &path) {
            Some(v) => format!("`{}`", serde_json::to_string(v).unwrap_or_default()),
            None => "—".to_string(),
        };
        let cell = |s: &str| s.replace('|', "\\|").replace('\n', " ");
        out.push(format!("| `{path}` | {} | {} |", cell(&default), cell(desc)));
    }
}

#[test]
fn the_readme_lists_every_value() -> Result<()> {
    let chart = chart_dir();
    let values: Value = serde_yaml::from_str(&std::fs::read_to_string(chart.join("values.yaml"))?)?;
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(chart.join("values.schema.json"))?)?;
    let mut paths = Vec::new();
    leaves("", &values, &mut paths);
    let not_in_schema: Vec<&String> = paths
        .iter()
        .filter(|p| {
            // A leaf is covered by its own property or by a free-form parent (labels, resources).
            let mut s = &schema;
            for k in p.split('.') {
                match s["properties"].get(k) {
                    Some(next) => s = next,
                    None => return !s["additionalProperties"].is_object() && s["properties"].is_object(),
                }
            }
            false
        })
        .collect();
    ensure!(not_in_schema.is_empty(), "values.yaml leaves without a schema entry: {not_in_schema:?}");

    let mut table = vec!["| value | default | meaning |".to_string(), "|---|---|---|".to_string()];
    let mut missing = Vec::new();
    rows("", &schema, &values, &mut table, &mut missing);
    ensure!(missing.is_empty(), "schema properties without a description (add one): {missing:?}");
    let generated = format!("{BEGIN}\n{}\n{END}", table.join("\n"));

    let path = chart.join("README.md");
    let readme = std::fs::read_to_string(&path)?;
    let (Some(b), Some(e)) = (readme.find(BEGIN), readme.find(END)) else {
        bail!("{} has no {BEGIN} … {END} block", path.display())
    };
    let current = &readme[b..e + END.len()];
    if update() {
        std::fs::write(&path, readme.replace(current, &generated))?;
        return Ok(());
    }
    ensure!(
        current == generated,
        "{}'s values table is not what values.schema.json and values.yaml give (UPDATE_GOLDEN=1 rewrites it):\n{generated}",
        path.display()
    );
    Ok(())
}

// --- on the local cluster ----------------------------------------------------------------

/// A copy of a workspace binary under another name, so the imageID the local cluster reports
/// ("testenv://<path>") tells which map entry an image took.
fn mirror_copy(name: &str) -> Result<PathBuf> {
    let cluster = ensure_cluster()?;
    let dir = cluster.dir.join("tmp");
    std::fs::create_dir_all(&dir)?;
    let copy = dir.join(format!("mirror-{name}"));
    let _ = std::fs::remove_file(&copy);
    let bin = workspace_binary(name)?;
    if std::fs::hard_link(&bin, &copy).is_err() {
        std::fs::copy(&bin, &copy)?;
    }
    Ok(copy)
}

async fn running_images(pods: &Api<Pod>, selector: &str, n: usize) -> Result<Vec<(String, String, String)>> {
    wait_for(&format!("{n} ready Pods {selector}"), Duration::from_secs(180), || async {
        let list = pods.list(&ListParams::default().labels(selector)).await?;
        let ready: Vec<(String, String, String)> = list
            .items
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none() && dco_tests::pod_ready(p))
            .filter_map(|p| {
                let st = p.status.as_ref()?.container_statuses.as_ref()?.first()?;
                let name = p.metadata.name.clone()?;
                Some((name, st.image.clone(), st.image_id.clone()))
            })
            .collect();
        Ok((ready.len() >= n).then_some(ready))
    })
    .await
}

/// GET of a Pod's admin endpoint: through the apiserver's Pod proxy where it proxies (`kubectl
/// get --raw`, docs/operations.md), else at the Pod's IP. On the local cluster every Pod IP is
/// a loopback address, which the apiserver refuses to proxy to ("address not allowed"); the
/// refusal is asserted, so the proxy path is known to reach the Pod's port.
async fn admin_get(env: &TestEnv, pods: &Api<Pod>, pod: &str, port: u16, path: &str) -> Result<String> {
    let ns = &env.ns;
    let req =
        http::Request::get(format!("/api/v1/namespaces/{ns}/pods/{pod}:{port}/proxy{path}")).body(vec![])?;
    match env.client.request_text(req).await {
        Ok(body) => return Ok(body),
        Err(kube::Error::Api(e)) if e.message.contains("address not allowed") => {}
        Err(e) => bail!("GET {path} of Pod {ns}/{pod} through the apiserver's proxy: {e}"),
    }
    let ip = pods.get(pod).await?.status.and_then(|s| s.pod_ip).context("no Pod IP")?;
    let (code, body) = dco_tests::http_get(&format!("{ip}:{port}"), path).await?;
    ensure!(code == 200, "GET {path} of Pod {ns}/{pod} at {ip}:{port}: {code} {body}");
    Ok(body)
}

#[tokio::test]
async fn install_with_a_registry_and_digests_runs_the_mapped_images() -> Result<()> {
    let env = TestEnv::new("chart-digest").await?;
    let (op_bin, wh_bin) = (mirror_copy("dco-operator")?, mirror_copy("dco-webhook")?);
    // The registry's repositories, whole: the local cluster tries them before the last path
    // element (hack/testenv-go/images.go), so these entries, not the plain names, run.
    map_image(&format!("{REGISTRY}/dco-operator"), &op_bin)?;
    map_image(&format!("{REGISTRY}/dco-webhook"), &wh_bin)?;
    let server = unique_name("digest-default");
    let release = "dco";
    let values = json!({
        "replicaCount": 1,
        "image": {"registry": REGISTRY, "digest": DIGEST_OP},
        "webhookImage": {"digest": DIGEST_WH},
        "defaultServer": {"name": server, "keepOnUninstall": false, "spec": {"replicas": 1}},
        "crds": {"upgrade": {"enabled": false}},
    });
    let result = async {
        helm_install_dco(&env, release, &values).await?;
        let pods: Api<Pod> = Api::namespaced(env.client.clone(), &env.ns);
        let ops = running_images(&pods, "app.kubernetes.io/name=dco-operator", 1).await?;
        for (pod, image, id) in &ops {
            ensure!(
                image == &format!("{REGISTRY}/dco-operator@{DIGEST_OP}"),
                "operator Pod {pod} runs {image}"
            );
            ensure!(id == &format!("testenv://{}", op_bin.display()), "operator Pod {pod} resolved to {id}");
        }
        let selector = format!("conversion.dco.rs/instance={server}");
        let whs = running_images(&pods, &selector, 1).await?;
        for (pod, image, id) in &whs {
            ensure!(
                image == &format!("{REGISTRY}/dco-webhook@{DIGEST_WH}"),
                "webhook Pod {pod} runs {image}"
            );
            ensure!(id == &format!("testenv://{}", wh_bin.display()), "webhook Pod {pod} resolved to {id}");
        }
        eprintln!("operator {ops:?}\nwebhook {whs:?}");
        // A server's own spec.image.digest: its Pods run <the operator's repository>@<digest>.
        let servers: Api<dco_api::ConversionWebhookServer> = Api::all(env.client.clone());
        servers
            .patch(
                &server,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"image": {"digest": DIGEST_SERVER}}})),
            )
            .await?;
        let pinned = format!("{REGISTRY}/dco-webhook@{DIGEST_SERVER}");
        wait_for("the server's Pods to run its pinned image", Duration::from_secs(180), || async {
            let list = pods.list(&ListParams::default().labels(&selector)).await?;
            Ok(list
                .items
                .iter()
                .any(|p| {
                    dco_tests::pod_ready(p)
                        && p.status
                            .as_ref()
                            .and_then(|s| s.container_statuses.as_ref())
                            .and_then(|c| c.first())
                            .is_some_and(|c| {
                                c.image == pinned && c.image_id == format!("testenv://{}", wh_bin.display())
                            })
                })
                .then_some(()))
        })
        .await?;
        // /metrics and /debug/*: the metrics Service selects the operator Pod, and both
        // binaries answer on their admin ports.
        let (op, _, _) = &ops[0];
        let svc: Api<k8s_openapi::api::core::v1::Service> = Api::namespaced(env.client.clone(), &env.ns);
        let svc_selector =
            svc.get("dco-operator-metrics").await?.spec.and_then(|s| s.selector).unwrap_or_default();
        let labels = pods.get(op).await?.metadata.labels.unwrap_or_default();
        ensure!(
            !svc_selector.is_empty() && svc_selector.iter().all(|(k, v)| labels.get(k) == Some(v)),
            "the metrics Service's selector {svc_selector:?} does not select operator Pod {op} ({labels:?})"
        );
        let body = admin_get(&env, &pods, op, 8080, "/metrics").await?;
        ensure!(body.contains("dco_operator_"), "operator /metrics: {}", &body[..body.len().min(300)]);
        let shards = admin_get(&env, &pods, op, 8080, "/debug/shards").await?;
        ensure!(!shards.is_empty(), "operator /debug/shards is empty");
        let whs = running_images(&pods, &selector, 1).await?;
        let (wh, _, _) = &whs[0];
        let body = admin_get(&env, &pods, wh, 8080, "/metrics").await?;
        ensure!(body.contains("dco_webhook_"), "webhook /metrics: {}", &body[..body.len().min(300)]);
        let registry = admin_get(&env, &pods, wh, 8080, "/debug/registry").await?;
        ensure!(!registry.is_empty(), "webhook /debug/registry is empty");
        Ok(())
    }
    .await;
    let cluster = env.cluster.clone();
    let _ = helm(&cluster, &["uninstall", release, "--namespace", &env.ns, "--wait", "--timeout", "3m"]);
    result?;
    env.cleanup().await;
    Ok(())
}
