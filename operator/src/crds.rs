//! `dco-operator --apply-crds DIR`: put dco's own CRDs from DIR on the cluster, wait until each
//! is Established, and exit. The chart runs it as its pre-upgrade hook
//! (charts/dco/templates/crds-upgrade.yaml): helm installs a chart's `crds/` on the first
//! install only and never upgrades them. DIR is the chart's `crds/` (the files `crdgen`
//! generates, mounted from a ConfigMap), so an install and an upgrade apply the same files.
//!
//! An existing CRD is replaced — the live object with the file's `spec`, guarded by its
//! resourceVersion — rather than server-side applied: helm's install made its own field manager
//! the owner of every field, so an apply would keep a field a newer CRD drops. A missing CRD is
//! created by server-side apply, whose request names the object, so RBAC can limit the hook to
//! dco's CRD names (`resourceNames` cannot limit a plain create). Files are checked before
//! anything is written: only CRDs of dco's group are applied.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde::Deserialize;

pub const FIELD_MANAGER: &str = "dco-operator-crds";
/// How long each CRD may take to become Established (names accepted, storage served).
const ESTABLISH_TIMEOUT: Duration = Duration::from_secs(120);
/// Replacements retried after a conflict (someone else wrote the CRD between read and write).
const CONFLICT_RETRIES: usize = 5;

/// The CRDs in `dir`'s `*.yaml`/`*.yml` files (several documents per file allowed), in file
/// order. Dotted entries are skipped: a ConfigMap volume holds `..data` links beside the keys.
pub fn read_dir(dir: &Path) -> Result<Vec<(PathBuf, CustomResourceDefinition)>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .with_context(|| format!("--apply-crds {}: cannot read the directory", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or_default();
            !name.starts_with('.') && (name.ends_with(".yaml") || name.ends_with(".yml"))
        })
        .collect();
    files.sort();
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).with_context(|| format!("reading {}", file.display()))?;
        for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
            let value = serde_json::Value::deserialize(doc)
                .with_context(|| format!("{}: document {i} is not YAML", file.display()))?;
            if value.is_null() {
                continue;
            }
            let (kind, api_version) = (value["kind"].as_str(), value["apiVersion"].as_str());
            if kind != Some("CustomResourceDefinition") || api_version != Some("apiextensions.k8s.io/v1") {
                bail!(
                    "{}: document {i} is {} {}, not an apiextensions.k8s.io/v1 CustomResourceDefinition; --apply-crds applies dco's CRDs only: remove it from the directory",
                    file.display(),
                    api_version.unwrap_or("(no apiVersion)"),
                    kind.unwrap_or("(no kind)")
                );
            }
            let crd: CustomResourceDefinition = serde_json::from_value(value).with_context(|| {
                format!("{}: document {i} is not a valid CustomResourceDefinition", file.display())
            })?;
            if crd.spec.group != dco_api::GROUP {
                bail!(
                    "{}: CustomResourceDefinition {} is of group {}, not {}; --apply-crds applies dco's CRDs only: remove it from the directory",
                    file.display(),
                    crd.name_any(),
                    crd.spec.group,
                    dco_api::GROUP
                );
            }
            out.push((file.clone(), crd));
        }
    }
    if out.is_empty() {
        bail!("--apply-crds {}: no CustomResourceDefinition in its *.yaml files", dir.display());
    }
    Ok(out)
}

/// What happened to one CRD.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    Created,
    /// The spec changed: the apiserver bumped the generation (and rebuilds the kind's storage).
    Updated {
        from: i64,
        to: i64,
    },
    Unchanged,
}

/// Create or replace `crd`, then wait until it is Established with its names accepted.
pub async fn apply_one(
    api: &Api<CustomResourceDefinition>,
    crd: &CustomResourceDefinition,
) -> Result<Outcome> {
    let name = crd.name_any();
    let mut outcome = None;
    for _ in 0..CONFLICT_RETRIES {
        let Some(mut live) = api.get_opt(&name).await.with_context(|| format!("reading CRD {name}"))? else {
            let mut body = serde_json::to_value(crd)?;
            body["apiVersion"] = "apiextensions.k8s.io/v1".into();
            body["kind"] = "CustomResourceDefinition".into();
            api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
                .await
                .with_context(|| format!("creating CRD {name}"))?;
            outcome = Some(Outcome::Created);
            break;
        };
        let from = live.metadata.generation.unwrap_or(0);
        live.spec = crd.spec.clone();
        if let Some(labels) = &crd.metadata.labels {
            live.metadata.labels.get_or_insert_with(Default::default).extend(labels.clone());
        }
        if let Some(annotations) = &crd.metadata.annotations {
            live.metadata.annotations.get_or_insert_with(Default::default).extend(annotations.clone());
        }
        let pp = PostParams { field_manager: Some(FIELD_MANAGER.to_string()), ..PostParams::default() };
        match api.replace(&name, &pp, &live).await {
            Ok(written) => {
                let to = written.metadata.generation.unwrap_or(0);
                outcome = Some(if to == from { Outcome::Unchanged } else { Outcome::Updated { from, to } });
                break;
            }
            Err(kube::Error::Api(s)) if s.code == 409 => continue,
            Err(e) => return Err(e).with_context(|| format!("replacing CRD {name}")),
        }
    }
    let Some(outcome) = outcome else {
        bail!("CRD {name}: {CONFLICT_RETRIES} conflicting writes in a row; run the upgrade again");
    };
    wait_established(api, &name).await?;
    Ok(outcome)
}

async fn wait_established(api: &Api<CustomResourceDefinition>, name: &str) -> Result<()> {
    let start = Instant::now();
    loop {
        let crd = api.get(name).await.with_context(|| format!("reading CRD {name}"))?;
        let conditions = crd.status.and_then(|s| s.conditions).unwrap_or_default();
        let is_true = |t: &str| conditions.iter().any(|c| c.type_ == t && c.status == "True");
        if is_true("Established") && is_true("NamesAccepted") {
            return Ok(());
        }
        if start.elapsed() > ESTABLISH_TIMEOUT {
            let seen: Vec<String> = conditions
                .iter()
                .map(|c| format!("{}={} ({})", c.type_, c.status, c.message.clone().unwrap_or_default()))
                .collect();
            bail!("CRD {name} is not Established after {ESTABLISH_TIMEOUT:?}: {}", seen.join(", "));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// `--apply-crds DIR`: every CRD of `dir`, in order; the first failure stops the run.
pub async fn run(dir: &Path) -> Result<()> {
    let crds = read_dir(dir)?;
    let config = kube::Config::infer()
        .await
        .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let client = Client::try_from(config).context("cannot build a Kubernetes client")?;
    let api: Api<CustomResourceDefinition> = Api::all(client);
    for (file, crd) in &crds {
        let outcome = apply_one(&api, crd).await?;
        tracing::info!(crd = %crd.name_any(), file = %file.display(), ?outcome, "CRD applied and Established");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dco-crds-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn reads_the_charts_crds_and_skips_configmap_links() {
        let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../charts/dco/crds");
        let names: Vec<String> = read_dir(&chart).unwrap().iter().map(|(_, c)| c.name_any()).collect();
        let mut want: Vec<String> = dco_api::crds().iter().map(|c| c.name_any()).collect();
        want.sort();
        let mut got = names.clone();
        got.sort();
        assert_eq!(got, want);

        // A ConfigMap volume: the keys, plus `..data` and a dotted timestamp directory.
        let d = temp_dir("links");
        for (file, yaml) in dco_api::crd_files() {
            std::fs::write(d.join(file), yaml).unwrap();
        }
        std::fs::create_dir_all(d.join("..2026_01_01")).unwrap();
        std::fs::write(d.join("..data"), "not yaml: [").unwrap();
        std::fs::write(d.join("README"), "ignored").unwrap();
        assert_eq!(read_dir(&d).unwrap().len(), 3);
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn refuses_what_is_not_a_dco_crd() {
        let d = temp_dir("foreign");
        let (file, yaml) = dco_api::crd_files().remove(0);
        std::fs::write(d.join(&file), &yaml).unwrap();
        std::fs::write(d.join("z.yaml"), yaml.replace("group: conversion.dco.rs", "group: example.org"))
            .unwrap();
        let err = read_dir(&d).unwrap_err().to_string();
        assert!(err.contains("is of group example.org, not conversion.dco.rs"), "{err}");
        assert!(err.contains("remove it from the directory"), "{err}");
        std::fs::write(d.join("z.yaml"), "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x}\n").unwrap();
        let err = read_dir(&d).unwrap_err().to_string();
        assert!(
            err.contains("is v1 ConfigMap, not an apiextensions.k8s.io/v1 CustomResourceDefinition"),
            "{err}"
        );
        std::fs::remove_file(d.join("z.yaml")).unwrap();
        std::fs::remove_file(d.join(&file)).unwrap();
        let err = read_dir(&d).unwrap_err().to_string();
        assert!(err.contains("no CustomResourceDefinition"), "{err}");
        let _ = std::fs::remove_dir_all(&d);
    }
}
