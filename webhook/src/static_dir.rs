//! Static mode: serve the configs and targets (CRD/XRD manifests) found in a directory, with
//! no cluster. For local runs, demos and benchmarks.
//!
//! Every `*.yaml`, `*.yml` and `*.json` file directly in the directory is read; YAML files may
//! hold several documents. Documents of other kinds are skipped with a log line.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use dco_api::config::{ConversionConfig, TargetKind};
use dco_api::{CRDConversionConfig, XRDConversionConfig};

use crate::sync::{ConfigView, TargetView, World};

#[derive(Debug, thiserror::Error)]
pub enum StaticError {
    #[error("cannot read --static-dir {dir}: {source}")]
    Dir { dir: PathBuf, source: std::io::Error },
    #[error("cannot read {file}: {source}")]
    Read { file: PathBuf, source: std::io::Error },
    #[error("{file}, document {doc}: not valid YAML/JSON: {message}")]
    Parse { file: PathBuf, doc: usize, message: String },
    #[error("{file}, document {doc}: {kind} {name:?} is not a valid config: {message}")]
    Config { file: PathBuf, doc: usize, kind: String, name: String, message: String },
    #[error("{file}, document {doc}: {kind} has no metadata.name")]
    NoName { file: PathBuf, doc: usize, kind: String },
}

fn documents(file: &Path, text: &str) -> Result<Vec<serde_json::Value>, StaticError> {
    let is_json = file.extension().is_some_and(|e| e == "json");
    if is_json {
        let v = serde_json::from_str(text).map_err(|e| StaticError::Parse {
            file: file.to_path_buf(),
            doc: 1,
            message: e.to_string(),
        })?;
        return Ok(vec![v]);
    }
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(text).enumerate() {
        let v: serde_json::Value = serde::Deserialize::deserialize(doc).map_err(|e| StaticError::Parse {
            file: file.to_path_buf(),
            doc: i + 1,
            message: e.to_string(),
        })?;
        if !v.is_null() {
            out.push(v);
        }
    }
    Ok(out)
}

/// Content digest: a changed file is a new fingerprint, so static mode recompiles it.
fn digest(v: &serde_json::Value) -> String {
    format!("{:016x}", dco_api::hash::fnv1a64(v.to_string().as_bytes()))
}

/// The config and target files directly in `dir`, in name order.
fn files(dir: &Path) -> Result<Vec<PathBuf>, StaticError> {
    let rd = std::fs::read_dir(dir).map_err(|source| StaticError::Dir { dir: dir.to_path_buf(), source })?;
    let mut files: Vec<PathBuf> = rd
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| p.is_file() && p.extension().is_some_and(|e| e == "yaml" || e == "yml" || e == "json"))
        .collect();
    files.sort();
    Ok(files)
}

/// Digest of the files' names and contents, read one at a time: the same digest loads the
/// same [`World`], so a reload that finds it needs neither a parse nor a pass (whose
/// transient documents, ~40 KB a target, would stay resident in malloc's arenas).
pub fn files_digest(dir: &Path) -> Result<u64, StaticError> {
    use dco_api::hash::{fnv1a64, mix64};
    files(dir)?.into_iter().try_fold(0, |h, file| {
        let bytes =
            std::fs::read(&file).map_err(|source| StaticError::Read { file: file.clone(), source })?;
        let h = mix64(h ^ fnv1a64(file.as_os_str().as_encoded_bytes()));
        Ok(mix64(h ^ fnv1a64(&bytes)))
    })
}

/// Load the directory into a pass input. All configs are served (static mode ignores
/// assignment), so no servers are needed.
pub fn load(dir: &Path) -> Result<World, StaticError> {
    let mut configs = Vec::new();
    let mut targets = HashMap::new();
    for file in files(dir)? {
        let text = std::fs::read_to_string(&file)
            .map_err(|source| StaticError::Read { file: file.clone(), source })?;
        for (i, doc) in documents(&file, &text)?.into_iter().enumerate() {
            let api_version = doc.get("apiVersion").and_then(|v| v.as_str()).unwrap_or("").to_string();
            let kind = doc.get("kind").and_then(|v| v.as_str()).unwrap_or("").to_string();
            let name = doc.pointer("/metadata/name").and_then(|v| v.as_str()).map(str::to_string);
            let Some(name) = name else {
                return Err(StaticError::NoName { file: file.clone(), doc: i + 1, kind });
            };
            let fp = digest(&doc);
            let bad = |message: String| StaticError::Config {
                file: file.clone(),
                doc: i + 1,
                kind: kind.clone(),
                name: name.clone(),
                message,
            };
            match (api_version.as_str(), kind.as_str()) {
                (dco_api::API_VERSION, "XRDConversionConfig") => {
                    let c: XRDConversionConfig =
                        serde_json::from_value(doc).map_err(|e| bad(e.to_string()))?;
                    configs.push(view(&c, &kind, &name, fp));
                }
                (dco_api::API_VERSION, "CRDConversionConfig") => {
                    let c: CRDConversionConfig =
                        serde_json::from_value(doc).map_err(|e| bad(e.to_string()))?;
                    configs.push(view(&c, &kind, &name, fp));
                }
                (av, k) => match TargetKind::of_type(av, k) {
                    Some(tkind) => {
                        targets.insert((tkind, name), TargetView::new(&doc, fp));
                    }
                    None => {
                        tracing::info!(file = %file.display(), doc = i + 1, %api_version, %kind, "skipping a document that is neither a config nor a target")
                    }
                },
            }
        }
    }
    Ok(World { configs, targets, ..World::default() })
}

fn view<C: ConversionConfig>(c: &C, kind: &str, name: &str, fingerprint: String) -> ConfigView {
    ConfigView {
        kind: kind.to_string(),
        name: name.to_string(),
        target: c.target_name().to_string(),
        target_kind: c.target_kind(),
        spec: Arc::new(c.conversion().clone()),
        fingerprint,
        moved_from: None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_configs_and_targets_and_names_bad_documents() {
        let dir = std::env::temp_dir().join(format!("dco-static-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join("a.yaml"),
            r#"
apiVersion: conversion.dco.rs/v1alpha1
kind: CRDConversionConfig
metadata: {name: widgets}
spec:
  targetCRD: {name: widgets.example.org}
  hubVersion: v2
  spokes: [{version: v1, rules: []}]
---
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: widgets.example.org}
spec: {group: example.org}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: ignored}
"#,
        )
        .unwrap();
        std::fs::write(dir.join("notes.txt"), "not read").unwrap();
        let w = load(&dir).unwrap();
        assert_eq!(w.configs.len(), 1);
        assert_eq!(w.configs[0].target, "widgets.example.org");
        assert!(w.targets.contains_key(&(TargetKind::Crd, "widgets.example.org".to_string())));

        let digest = files_digest(&dir).unwrap();
        assert_eq!(files_digest(&dir).unwrap(), digest, "unchanged files, same digest");

        std::fs::write(dir.join("b.yaml"), "kind: CRDConversionConfig\napiVersion: conversion.dco.rs/v1alpha1\nmetadata: {name: broken}\nspec: {hubVersion: 3}\n").unwrap();
        assert_ne!(files_digest(&dir).unwrap(), digest, "a new file, a new digest");
        let err = load(&dir).unwrap_err().to_string();
        assert!(err.contains("b.yaml") && err.contains("document 1") && err.contains("\"broken\""), "{err}");
        std::fs::write(dir.join("b.yaml"), "a: [unclosed").unwrap();
        let err = load(&dir).unwrap_err().to_string();
        assert!(err.contains("b.yaml") && err.contains("not valid YAML"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(load(&dir).unwrap_err().to_string().contains("--static-dir"));
    }
}
