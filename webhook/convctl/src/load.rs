//! Reading the inputs: a conversion config, a CRD or XRD, and sample objects, from YAML or
//! JSON files (multi-document YAML allowed).

use std::fs;
use std::path::{Path, PathBuf};

use dco_api::config::{ConversionSpec, TargetKind};
use dco_engine::Target;
use serde_json::Value;

use crate::CliError;

/// The config's apiVersion; a reference-project config moves over by changing only this.
pub const CONFIG_API_VERSION: &str = dco_api::API_VERSION;

/// A conversion config as read from a file.
pub struct Config {
    pub name: String,
    pub kind: TargetKind,
    pub target_name: String,
    pub spec: ConversionSpec,
}

/// Every YAML/JSON document in a file, empty documents skipped.
pub fn documents(path: &Path) -> Result<Vec<Value>, CliError> {
    let text = fs::read_to_string(path)
        .map_err(|e| CliError::Usage(format!("cannot read {}: {e}", path.display())))?;
    let mut out = Vec::new();
    for (i, doc) in serde_yaml::Deserializer::from_str(&text).enumerate() {
        let value = <Value as serde::Deserialize>::deserialize(doc).map_err(|e| {
            CliError::Usage(format!("{} (document {}): not valid YAML or JSON: {e}", path.display(), i + 1))
        })?;
        if !value.is_null() {
            out.push(value);
        }
    }
    Ok(out)
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter().try_fold(v, |cur, k| cur.get(k)).and_then(Value::as_str)
}

/// Reads the XRDConversionConfig or CRDConversionConfig in `path`.
pub fn config(path: &Path) -> Result<Config, CliError> {
    let docs = documents(path)?;
    let mut found = Vec::new();
    for doc in &docs {
        let kind = match str_at(doc, &["kind"]) {
            Some("XRDConversionConfig") => TargetKind::Xrd,
            Some("CRDConversionConfig") => TargetKind::Crd,
            _ => continue,
        };
        let api_version = str_at(doc, &["apiVersion"]).unwrap_or_default();
        if api_version != CONFIG_API_VERSION {
            return Err(CliError::Usage(format!(
                "{}: apiVersion is {api_version:?}; dco configs use {CONFIG_API_VERSION} — a config written for the reference project moves over by changing only its apiVersion",
                path.display()
            )));
        }
        found.push((kind, doc));
    }
    let (kind, doc) = match found.as_slice() {
        [one] => *one,
        [] => {
            return Err(CliError::Usage(format!(
                "{}: no XRDConversionConfig or CRDConversionConfig ({CONFIG_API_VERSION}) in the file",
                path.display()
            )));
        }
        _ => {
            return Err(CliError::Usage(format!(
                "{}: holds {} configs; give one config per file",
                path.display(),
                found.len()
            )));
        }
    };
    let spec_value = doc.get("spec").cloned().unwrap_or(Value::Null);
    let ref_field = if kind == TargetKind::Xrd { "targetXRD" } else { "targetCRD" };
    let target_name = str_at(&spec_value, &[ref_field, "name"])
        .ok_or_else(|| CliError::Usage(format!("{}: spec.{ref_field}.name is missing", path.display())))?
        .to_string();
    let spec: ConversionSpec = serde_json::from_value(spec_value).map_err(|e| {
        CliError::Usage(format!("{}: spec does not read as a conversion config: {e}", path.display()))
    })?;
    Ok(Config {
        name: str_at(doc, &["metadata", "name"]).unwrap_or("<unnamed>").to_string(),
        kind,
        target_name,
        spec,
    })
}

/// Reads the CRD (`want` = Crd) or XRD (`want` = Xrd) in `path`.
pub fn target(path: &Path, want: TargetKind) -> Result<Target, CliError> {
    let docs = documents(path)?;
    let wanted_kind = want.kind_name();
    let candidates: Vec<&Value> = docs.iter().filter(|d| str_at(d, &["kind"]) == Some(wanted_kind)).collect();
    let doc = match candidates.as_slice() {
        [one] => *one,
        [] => {
            let flag = if want == TargetKind::Xrd { "--xrd" } else { "--crd" };
            return Err(CliError::Usage(format!(
                "{}: {flag} expects a {wanted_kind}, and the file has none",
                path.display()
            )));
        }
        _ => {
            return Err(CliError::Usage(format!(
                "{}: holds several {wanted_kind}s; give one per file",
                path.display()
            )));
        }
    };
    Target::from_value(doc).map_err(|e| CliError::Usage(format!("{}: {e}", path.display())))
}

/// Sample objects: every document of `path` (a file), with the file they came from.
pub fn samples_in_file(path: &Path) -> Result<Vec<(String, Value)>, CliError> {
    let docs = documents(path)?;
    let many = docs.len() > 1;
    Ok(docs
        .into_iter()
        .enumerate()
        .map(|(i, d)| {
            let label =
                if many { format!("{}#{}", path.display(), i + 1) } else { path.display().to_string() };
            (label, d)
        })
        .collect())
}

/// Sample files in a directory: `*.yaml`, `*.yml`, `*.json`, sorted by name.
pub fn sample_files(dir: &Path) -> Result<Vec<PathBuf>, CliError> {
    let entries = fs::read_dir(dir)
        .map_err(|e| CliError::Usage(format!("cannot read samples directory {}: {e}", dir.display())))?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            p.is_file() && matches!(p.extension().and_then(|e| e.to_str()), Some("yaml" | "yml" | "json"))
        })
        .collect();
    files.sort();
    if files.is_empty() {
        return Err(CliError::Usage(format!("{} has no .yaml, .yml or .json samples", dir.display())));
    }
    Ok(files)
}

/// The version of an object's `apiVersion` (`group/version` → `version`).
pub fn version_of(obj: &Value) -> Option<&str> {
    str_at(obj, &["apiVersion"]).and_then(|av| av.rsplit_once('/').map(|(_, v)| v))
}
