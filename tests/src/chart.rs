//! Installing `charts/dco` on the local cluster (docs/installation.md): `helm` against the
//! cluster, and [`helm_install_dco`], which installs or upgrades a release with the workspace's
//! binaries as its images and what the local cluster needs. tests/tests/chart.rs proves the
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

/// Runs `helm ARGS` against the cluster; its stdout, or an error with its stderr.
pub fn helm(cluster: &Cluster, args: &[&str]) -> Result<String> {
    let out = Command::new(helm_binary(cluster)?)
        .args(args)
        .env("KUBECONFIG", &cluster.kubeconfig)
        .output()
        .with_context(|| format!("running helm {}", args.join(" ")))?;
    if !out.status.success() {
        bail!(
            "helm {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
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
    map_image("dco-operator", workspace_binary("dco-operator")?)?;
    map_image("dco-webhook", workspace_binary("dco-webhook")?)?;
    let dir = env.cluster.dir.join("tmp");
    std::fs::create_dir_all(&dir)?;
    let write = |tag: &str, v: &Value| -> Result<PathBuf> {
        let path = dir.join(format!("values-{}-{release}-{tag}.yaml", env.ns));
        std::fs::write(&path, serde_yaml::to_string(v)?)?;
        Ok(path)
    };
    let (base, mine) = (write("local", &local_values(env))?, write("test", values)?);
    let (cluster, chart, ns, release) =
        (env.cluster.clone(), chart.to_path_buf(), env.ns.clone(), release.to_string());
    tokio::task::spawn_blocking(move || {
        let (chart, base, mine) = (chart.to_string_lossy(), base.to_string_lossy(), mine.to_string_lossy());
        helm(
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
