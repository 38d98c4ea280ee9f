//! Installing `charts/dco` on the local cluster (docs/installation.md): `helm` against the
//! cluster, and [`helm_install_dco`], which installs or upgrades a release with the workspace's
//! binaries as its images and what the local cluster needs. tests/tests/chart_install.rs proves the
//! chart with it; other tests install dco with it the way a user would.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result, bail};
use serde_json::{Value, json};

use crate::{Cluster, TestEnv, map_image, repo_root, workspace_binary};

/// The chart in this repository.
pub fn chart_dir() -> PathBuf {
    repo_root().join("charts").join("dco")
}

/// `hack/testenv`'s helm (`<testenv>/bin/helm`, built by `hack/testenv up` unless
/// `DCO_TESTENV_HELM=0`).
pub fn helm_binary(cluster: &Cluster) -> Result<PathBuf> {
    let helm = cluster.dir.join("bin").join("helm");
    if !helm.exists() {
        bail!("{} is missing: run `hack/testenv up` without DCO_TESTENV_HELM=0", helm.display());
    }
    Ok(helm)
}

/// The documents of a multi-document YAML stream (`helm template`'s output), empty ones dropped.
pub fn documents(yaml: &str) -> Result<Vec<Value>> {
    use serde::Deserialize;
    let mut out = Vec::new();
    for doc in serde_yaml::Deserializer::from_str(yaml) {
        let v = Value::deserialize(doc)?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// The helm a test runs: 3 (built by `hack/testenv up`) or 4 (`hack/testenv tool helm4`,
/// which applies server-side by default).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Helm {
    V3,
    V4,
}

impl Helm {
    pub const ALL: [Helm; 2] = [Helm::V3, Helm::V4];

    pub fn binary(self, cluster: &Cluster) -> Result<PathBuf> {
        match self {
            Helm::V3 => helm_binary(cluster),
            Helm::V4 => crate::testenv_tool("helm4"),
        }
    }

    /// Runs `helm ARGS` against the cluster; its stdout, or an error with its stderr.
    pub fn run(self, cluster: &Cluster, args: &[&str]) -> Result<String> {
        Ok(self.output(cluster, args)?.stdout)
    }

    /// [`Helm::run`], with what helm printed on stderr too (its warnings).
    pub fn output(self, cluster: &Cluster, args: &[&str]) -> Result<HelmOutput> {
        let out = Command::new(self.binary(cluster)?)
            .args(args)
            .env("KUBECONFIG", &cluster.kubeconfig)
            .output()
            .with_context(|| format!("running {self:?} helm {}", args.join(" ")))?;
        if !out.status.success() {
            bail!(
                "{self:?} helm {} failed ({}):\n{}{}",
                args.join(" "),
                out.status,
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(HelmOutput {
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        })
    }
}

/// What a helm command that succeeded printed.
#[derive(Debug, Clone)]
pub struct HelmOutput {
    pub stdout: String,
    pub stderr: String,
}

/// Runs helm 3's `helm ARGS` against the cluster; its stdout, or an error with its stderr.
pub fn helm(cluster: &Cluster, args: &[&str]) -> Result<String> {
    Helm::V3.run(cluster, args)
}

/// The label a release installed by [`helm_install_dco`] scopes its operator to
/// (`operator.selector`), so it manages only the servers and configs of its test: tests share
/// the cluster.
pub fn release_label(env: &TestEnv) -> (String, String) {
    ("dco-release".to_string(), env.ns.clone())
}

/// The values the local cluster needs, under the caller's: the Pods bind their own address
/// (`bindPodIP`: every Pod shares the host's network namespace there) and the operator is
/// scoped by [`release_label`].
pub fn local_values(env: &TestEnv) -> Value {
    let (k, v) = release_label(env);
    json!({"bindPodIP": true, "operator": {"selector": format!("{k}={v}")}})
}

/// `helm upgrade --install RELEASE charts/dco` in `env`'s namespace with [`local_values`] and
/// then `values`, waiting until the operator Deployment is available (and on an upgrade the
/// CRD Job has succeeded). dco-operator and dco-webhook run the workspace's debug binaries
/// (the chart's image repositories end in those names: hack/testenv-go/images.go).
pub async fn helm_install_dco(env: &TestEnv, release: &str, values: &Value) -> Result<String> {
    helm_install_dco_from(env, release, &chart_dir(), values).await
}

/// [`helm_install_dco`] of the chart in `chart` (a modified copy, for an upgrade).
pub async fn helm_install_dco_from(
    env: &TestEnv,
    release: &str,
    chart: &Path,
    values: &Value,
) -> Result<String> {
    Ok(helm_install_dco_with(Helm::V3, env, release, chart, values).await?.stdout)
}

/// The values files of a release of `env`: [`local_values`], then `values`; the workspace's
/// binaries mapped to the chart's images.
pub fn values_files(env: &TestEnv, release: &str, values: &Value) -> Result<[PathBuf; 2]> {
    map_image("dco-operator", workspace_binary("dco-operator")?)?;
    map_image("dco-webhook", workspace_binary("dco-webhook")?)?;
    let dir = env.cluster.dir.join("tmp");
    std::fs::create_dir_all(&dir)?;
    let write = |tag: &str, v: &Value| -> Result<PathBuf> {
        let path = dir.join(format!("values-{}-{release}-{tag}.yaml", env.ns));
        std::fs::write(&path, serde_yaml::to_string(v)?)?;
        Ok(path)
    };
    Ok([write("local", &local_values(env))?, write("test", values)?])
}

/// [`helm_install_dco_from`] with the given helm; what it printed (a clean install or upgrade
/// warns about nothing on stderr).
pub async fn helm_install_dco_with(
    helm: Helm,
    env: &TestEnv,
    release: &str,
    chart: &Path,
    values: &Value,
) -> Result<HelmOutput> {
    let [base, mine] = values_files(env, release, values)?;
    let (cluster, chart, ns, release) =
        (env.cluster.clone(), chart.to_path_buf(), env.ns.clone(), release.to_string());
    tokio::task::spawn_blocking(move || {
        let (chart, base, mine) = (chart.to_string_lossy(), base.to_string_lossy(), mine.to_string_lossy());
        helm.output(
            &cluster,
            &[
                "upgrade",
                "--install",
                &release,
                &chart,
                "--namespace",
                &ns,
                "--values",
                &base,
                "--values",
                &mine,
                "--wait",
                "--wait-for-jobs",
                "--timeout",
                "5m",
            ],
        )
    })
    .await?
}

/// A target for chart tests: widgets of `group`, v1 (spoke, `spec.sizeGB`) and v2 (hub and
/// storage, `spec.size.gb`), converted by one FieldRename ([`widget_config`]), labelled
/// `label` (the release's, [`release_label`]).
pub fn widget_crd(group: &str, label: &(String, String)) -> Value {
    let obj = |props: Value| json!({"type": "object", "properties": props});
    let int = json!({"type": "integer"});
    let v1 = json!({"openAPIV3Schema": obj(json!({"spec": obj(json!({"sizeGB": int}))}))});
    let v2 = json!({"openAPIV3Schema": obj(json!({"spec": obj(json!({"size": obj(json!({"gb": int}))}))}))});
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}"), "labels": {&label.0: &label.1}},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": v1},
                {"name": "v2", "served": true, "storage": true, "schema": v2}],
            "conversion": {"strategy": "None"}}})
}

/// The CRDConversionConfig `name` of [`widget_crd`]'s target: hub v2, spoke v1 renames
/// `spec.size.gb` to `spec.sizeGB`.
pub fn widget_config(name: &str, target: &str, label: &(String, String)) -> Value {
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": name, "labels": {&label.0: &label.1}},
        "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.size.gb", "spokePath": "spec.sizeGB"}}]}]}})
}

/// A widget's spec of [`widget_crd`] holding `gb`, at `version` (for `dco_tests::load`).
pub fn widget_spec(version: &str, gb: i64) -> Value {
    match version {
        "v1" => json!({"sizeGB": gb}),
        _ => json!({"size": {"gb": gb}}),
    }
}

/// Copies the directory `from` to `to` (a chart, to change a copy of it).
pub fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to)?;
    for e in std::fs::read_dir(from)? {
        let e = e?;
        let dest = to.join(e.file_name());
        if e.file_type()?.is_dir() {
            copy_dir(&e.path(), &dest)?;
        } else {
            std::fs::copy(e.path(), dest)?;
        }
    }
    Ok(())
}

/// Puts dco's own CRD `name` back as `dco_api::crds()` has it (an upgrade test changed it in a
/// cluster other tests share): a replace of the spec, as the CRD Job writes it.
pub async fn restore_crd(
    crds: &kube::Api<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >,
    name: &str,
    manager: &str,
) -> Result<()> {
    let want =
        dco_api::crds().into_iter().find(|c| c.metadata.name.as_deref() == Some(name)).context("dco CRD")?;
    for _ in 0..5 {
        let mut live = crds.get(name).await?;
        live.spec = want.spec.clone();
        let pp = kube::api::PostParams { field_manager: Some(manager.into()), ..Default::default() };
        match crds.replace(name, &pp, &live).await {
            Ok(_) => return Ok(()),
            Err(kube::Error::Api(e)) if e.code == 409 => continue,
            Err(e) => return Err(e.into()),
        }
    }
    bail!("could not restore CRD {name}")
}
