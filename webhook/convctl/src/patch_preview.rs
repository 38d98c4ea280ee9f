//! `convctl patch-preview`: the exact server-side apply body dco's operator sends to a target
//! to wire its `spec.conversion` to a webhook server. Built by `dco_api::target` (`Wiring`,
//! `apply_body`), the code the operator's wiring calls, so the preview cannot drift from it.
//! Offline: the Service, port and CA are flags, never looked up.

use std::path::PathBuf;

use base64::Engine as _;
use clap::{Args, ValueEnum};
use dco_api::config::TargetKind;
use dco_api::target::{Wiring, XrdApi, XrdVersion, apply_body};
use serde_json::Value;

use crate::{CliError, load};

/// The field manager the operator applies with (operator/src/names.rs; a test checks they agree).
pub const FIELD_MANAGER: &str = "dco-operator";

#[derive(Clone, Copy, ValueEnum)]
pub enum PatchFormat {
    Yaml,
    Json,
}

#[derive(Args)]
pub struct PatchPreviewArgs {
    /// The XRDConversionConfig or CRDConversionConfig: its target, review versions.
    #[arg(short, long)]
    pub config: PathBuf,
    /// The webhook server's Service (the server's name, as dco names it).
    #[arg(long)]
    pub service_name: String,
    #[arg(long)]
    pub service_namespace: String,
    /// The CA that signed the server's certificate: PEM, or base64 of the PEM (as in a
    /// Secret's `ca.crt` or a CRD's `caBundle`).
    #[arg(long, allow_hyphen_values = true)]
    pub ca_bundle: String,
    /// The webhook path; the operator's is /convert/<target name>.
    #[arg(long)]
    pub path: Option<String>,
    /// The Service port; the operator's default is a server's spec.service.port default.
    #[arg(long)]
    pub port: Option<i32>,
    /// The CRD: compile the config against it first (a config that fails is never wired).
    #[arg(long, conflicts_with = "xrd")]
    pub crd: Option<PathBuf>,
    /// The XRD: compile the config against it first, and pick the XRD API version written
    /// through from its scope.
    #[arg(short = 'x', long)]
    pub xrd: Option<PathBuf>,
    #[arg(short, long, value_enum, default_value_t = PatchFormat::Yaml)]
    pub output: PatchFormat,
}

/// The PEM of a `--ca-bundle` given as PEM or as base64 of a PEM. Stricter than taking
/// any text: a bundle without a certificate would wire a target no apiserver can call.
pub fn ca_pem(given: &str) -> Result<String, CliError> {
    const BEGIN: &str = "-----BEGIN CERTIFICATE-----";
    let pem = if given.contains("-----BEGIN") {
        given.to_string()
    } else {
        let compact: String = given.split_whitespace().collect();
        let bytes = base64::engine::general_purpose::STANDARD.decode(compact.as_bytes()).map_err(|e| {
            CliError::Usage(format!(
                "--ca-bundle is neither a PEM nor base64 of one ({e}); give the Secret's ca.crt"
            ))
        })?;
        String::from_utf8(bytes).map_err(|_| {
            CliError::Usage(
                "--ca-bundle decodes from base64 to bytes that are not a PEM; give the Secret's ca.crt"
                    .into(),
            )
        })?
    };
    if !pem.contains(BEGIN) {
        return Err(CliError::Usage(format!(
            "--ca-bundle holds no {BEGIN} block; give the CA certificate in PEM"
        )));
    }
    Ok(pem)
}

/// What the preview needs, resolved from the flags and files.
pub struct Preview {
    pub kind: TargetKind,
    pub xrd_version: XrdVersion,
    pub target: String,
    pub body: Value,
}

pub fn build(a: &PatchPreviewArgs) -> Result<Preview, CliError> {
    let config = load::config(&a.config)?;
    let given = match (&a.crd, &a.xrd) {
        (Some(p), None) => Some((p, TargetKind::Crd)),
        (None, Some(p)) => Some((p, TargetKind::Xrd)),
        _ => None,
    };
    let mut xrd_version = XrdApi { v1: true, v2: true }.preferred().unwrap_or(XrdVersion::V2);
    if let Some((path, kind)) = given {
        if kind != config.kind {
            let (have, flag) = match config.kind {
                TargetKind::Xrd => ("an XRDConversionConfig", "--xrd"),
                TargetKind::Crd => ("a CRDConversionConfig", "--crd"),
            };
            return Err(CliError::Usage(format!(
                "{} is {have}; give its target with {flag}",
                a.config.display()
            )));
        }
        let target = load::target(path, kind)?;
        if target.name() != config.target_name {
            return Err(CliError::Usage(format!(
                "config {} targets {} but {} is {}; give the matching definition",
                config.name,
                config.target_name,
                path.display(),
                target.name()
            )));
        }
        let compiled = dco_engine::compile(&config.spec, &target);
        if compiled.plan.is_none() {
            for d in compiled.report.errors() {
                eprintln!("error: {d}");
            }
            return Err(CliError::Failed(format!(
                "{} does not compile against {}: the operator never wires a config that fails; run convctl validate",
                config.name,
                target.name()
            )));
        }
        if kind == TargetKind::Xrd {
            // The scope decides the API version the operator writes an XRD through.
            let doc = load::documents(path)?
                .into_iter()
                .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind.kind_name()))
                .unwrap_or(Value::Null);
            xrd_version = XrdApi { v1: true, v2: true }.for_write(&doc).unwrap_or(xrd_version);
        }
    }
    let wiring = Wiring {
        namespace: a.service_namespace.clone(),
        service: a.service_name.clone(),
        path: a.path.clone().unwrap_or_else(|| dco_api::webhook_path(&config.target_name)),
        port: a.port.unwrap_or_else(|| dco_api::server::ServiceSpec::default().port),
        ca_bundle: ca_pem(&a.ca_bundle)?,
        review_versions: if config.spec.conversion_review_versions.is_empty() {
            vec!["v1".to_string()]
        } else {
            config.spec.conversion_review_versions.clone()
        },
    };
    if !(1..=65535).contains(&wiring.port) {
        return Err(CliError::Usage(format!("--port {}: a Service port is 1 to 65535", wiring.port)));
    }
    let body = apply_body(config.kind, xrd_version, &config.target_name, Some(&wiring.conversion()));
    Ok(Preview { kind: config.kind, xrd_version, target: config.target_name, body })
}

pub fn run(a: &PatchPreviewArgs) -> Result<(), CliError> {
    let p = build(a)?;
    let text = match a.output {
        PatchFormat::Json => serde_json::to_string_pretty(&p.body).unwrap_or_default() + "\n",
        PatchFormat::Yaml => {
            let through = match p.kind {
                TargetKind::Crd => String::new(),
                TargetKind::Xrd => format!(
                    "# An XRD is written through {} ({}); v1 is used instead for a LegacyCluster XRD or one with claimNames while v1 is served.\n",
                    p.xrd_version.api_version(),
                    if a.xrd.is_some() {
                        "from the given XRD's scope"
                    } else {
                        "give --xrd to decide it from the XRD's scope"
                    }
                ),
            };
            format!(
                "# Server-side apply of {} {} by field manager {FIELD_MANAGER} (force): dco writes only spec.conversion and sets no labels or annotations on the target.\n{through}{}",
                p.kind.kind_name(),
                p.target,
                serde_yaml::to_string(&p.body).unwrap_or_default()
            )
        }
    };
    crate::emit(&text);
    Ok(())
}
