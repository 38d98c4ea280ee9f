//! `convctl versions`: the target's versions — served, storage (CRD) or referenceable (XRD),
//! deprecated — and, with a config, each one's role: hub, spoke, or none (docs/convctl.md,
//! "versions"). What only the cluster knows (stored versions, object counts) is printed as
//! UNKNOWN with the command that tells it.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use dco_api::config::TargetKind;
use dco_engine::Target;
use serde_json::{Value, json};

use crate::diff::{TargetArgs, emit_report, target_kind_label};
use crate::output::{Finding, Location, OutputArgs, Report, Severity};
use crate::{CliError, load};

#[derive(Args)]
pub struct VersionsArgs {
    #[command(flatten)]
    pub target: TargetArgs,
    /// The conversion config, to show each version's role (hub, spoke) in it.
    #[arg(short = 'c', long = "config", value_name = "CONFIG")]
    pub config: Option<PathBuf>,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// One version as the definition declares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VersionInfo {
    pub name: String,
    pub served: bool,
    /// `storage` on a CRD, `referenceable` on an XRD.
    pub hub_eligible: bool,
    pub deprecated: bool,
    pub deprecation_warning: Option<String>,
}

/// The definition, its versions as declared (deprecation included, which the engine does not
/// keep) and its plural, from the one document of the wanted kind in `path`.
pub struct Definition {
    pub target: Target,
    pub versions: Vec<VersionInfo>,
    pub plural: String,
}

impl Definition {
    pub fn read(path: &Path, kind: TargetKind) -> Result<Definition, CliError> {
        let target = load::target(path, kind)?;
        let docs = load::documents(path)?;
        let doc = docs
            .iter()
            .find(|d| d.get("kind").and_then(Value::as_str) == Some(kind.kind_name()))
            .cloned()
            .unwrap_or(Value::Null);
        Ok(Definition::from_value(target, &doc))
    }

    pub fn from_value(target: Target, doc: &Value) -> Definition {
        let hub_flag = if target.kind() == TargetKind::Xrd { "referenceable" } else { "storage" };
        let raw = doc.pointer("/spec/versions").and_then(Value::as_array).cloned().unwrap_or_default();
        let versions = raw
            .iter()
            .map(|v| VersionInfo {
                name: v.get("name").and_then(Value::as_str).unwrap_or_default().to_string(),
                served: v.get("served").and_then(Value::as_bool).unwrap_or(false),
                hub_eligible: v.get(hub_flag).and_then(Value::as_bool).unwrap_or(false),
                deprecated: v.get("deprecated").and_then(Value::as_bool).unwrap_or(false),
                deprecation_warning: v.get("deprecationWarning").and_then(Value::as_str).map(str::to_string),
            })
            .collect();
        let plural =
            doc.pointer("/spec/names/plural").and_then(Value::as_str).unwrap_or_default().to_string();
        Definition { target, versions, plural }
    }

    pub fn hub_field(&self) -> &'static str {
        if self.target.kind() == TargetKind::Xrd { "referenceable" } else { "storage" }
    }

    pub fn flag(&self) -> &'static str {
        if self.target.kind() == TargetKind::Xrd { "--xrd" } else { "--crd" }
    }

    pub fn version(&self, name: &str) -> Option<&VersionInfo> {
        self.versions.iter().find(|v| v.name == name)
    }

    /// The version marked storage/referenceable, if exactly one is.
    pub fn hub(&self) -> Option<&str> {
        self.versions.iter().find(|v| v.hub_eligible).map(|v| v.name.as_str())
    }

    /// The command that prints the versions objects are stored at. For an XRD it is the CRD
    /// Crossplane generates, which has the XRD's name.
    pub fn stored_versions_cmd(&self) -> String {
        format!("kubectl get crd {} -o jsonpath='{{.status.storedVersions}}'", self.target.name())
    }

    /// The command that counts the objects (all namespaces).
    pub fn count_cmd(&self) -> String {
        format!("kubectl get {}.{} -A --no-headers | wc -l", self.plural, self.target.group())
    }
}

/// A version's role in a config: `hub`, `spoke` (with its rule count) or `none`.
pub fn role(config: &load::Config, version: &str) -> String {
    if config.spec.hub_version == version {
        return "hub".into();
    }
    match config.spec.spokes.iter().find(|s| s.version == version) {
        Some(s) => format!("spoke ({} rule(s))", s.rules.len()),
        None => "none".into(),
    }
}

fn finding(
    rule: &str,
    severity: Severity,
    message: String,
    fix: Option<String>,
    location: Location,
) -> Finding {
    let fails = severity == Severity::Error;
    Finding { rule: rule.into(), severity, message, fix, location, fails }
}

fn check(def: &Definition, config: &load::Config, config_file: &str, def_file: &str) -> Vec<Finding> {
    let mut out = Vec::new();
    let at_config = |path: String| Location {
        file: Some(config_file.into()),
        object: Some(config.name.clone()),
        path: Some(path),
        ..Location::default()
    };
    let at_def = |path: String| Location {
        file: Some(def_file.into()),
        object: Some(def.target.name().into()),
        path: Some(path),
        ..Location::default()
    };
    let hub = &config.spec.hub_version;
    match def.version(hub) {
        None => out.push(finding(
            "unknown-version",
            Severity::Error,
            format!("the hub {hub} is not a version of {}", def.target.name()),
            Some(format!("set spec.hubVersion to the {} version", def.hub_field())),
            at_config("spec.hubVersion".into()),
        )),
        Some(v) if !v.hub_eligible => out.push(finding(
            "hub-not-storage",
            Severity::Error,
            format!("the hub {hub} is not the {} version of {}", def.hub_field(), def.target.name()),
            Some(format!(
                "set spec.hubVersion: {}, or run convctl plan --to {hub} for the steps to move the hub",
                def.hub().unwrap_or("<the storage version>")
            )),
            at_config("spec.hubVersion".into()),
        )),
        Some(v) if v.deprecated => out.push(finding(
            "deprecated-hub",
            Severity::Warning,
            format!("the hub {hub} is deprecated; every object is stored at it"),
            Some(format!(
                "make a current version the hub first: convctl plan --to VERSION {} FILE",
                def.flag()
            )),
            at_config("spec.hubVersion".into()),
        )),
        _ => {}
    }
    for (i, s) in config.spec.spokes.iter().enumerate() {
        if def.version(&s.version).is_none() {
            out.push(finding(
                "unknown-version",
                Severity::Error,
                format!("spoke {} is not a version of {}", s.version, def.target.name()),
                Some("remove the spoke or fix its name".into()),
                at_config(format!("spec.spokes[{i}].version")),
            ));
        }
    }
    for (i, v) in def.versions.iter().enumerate() {
        if v.served && role(config, &v.name) == "none" {
            out.push(finding(
                "served-without-role",
                Severity::Error,
                format!("version {} is served but is neither the hub nor a spoke: every conversion to or from it fails", v.name),
                Some(format!("add a spoke for {} to the config, or set served: false on it", v.name)),
                at_def(format!("spec.versions[{i}]")),
            ));
        }
    }
    out
}

pub fn run(args: &VersionsArgs) -> Result<(), CliError> {
    let (path, kind) = args.target.path_and_kind()?;
    let def = Definition::read(path, kind)?;
    let config = match &args.config {
        Some(p) => {
            let c = load::config(p)?;
            if c.kind != kind {
                return Err(CliError::Usage(format!(
                    "{} is for an {}; give the matching definition",
                    p.display(),
                    if c.kind == TargetKind::Xrd { "XRD (--xrd)" } else { "CRD (--crd)" }
                )));
            }
            Some(c)
        }
        None => None,
    };
    let hub_col = def.hub_field().to_uppercase();
    let rows: Vec<[String; 6]> = def
        .versions
        .iter()
        .map(|v| {
            let yn = |b: bool| if b { "yes" } else { "no" }.to_string();
            [
                v.name.clone(),
                yn(v.served),
                yn(v.hub_eligible),
                if v.deprecated { "yes".into() } else { "no".into() },
                config.as_ref().map_or_else(|| "-".into(), |c| role(c, &v.name)),
                "UNKNOWN".into(),
            ]
        })
        .collect();
    let mut table = String::new();
    let _ = writeln!(
        table,
        "{} {} ({} version(s))",
        target_kind_label(kind),
        def.target.name(),
        def.versions.len()
    );
    if let Some(c) = &config {
        let _ = writeln!(table, "config {} (hub {})", c.name, c.spec.hub_version);
    }
    let _ = writeln!(table);
    crate::analyze::table(
        &mut table,
        ["VERSION", "SERVED", hub_col.as_str(), "DEPRECATED", "ROLE", "STORED"],
        &rows,
    );
    for v in def.versions.iter().filter(|v| v.deprecated) {
        if let Some(w) = &v.deprecation_warning {
            let _ = writeln!(table, "  {} deprecation warning: {w}", v.name);
        }
    }
    let _ = writeln!(table, "\nSTORED is UNKNOWN offline; learn it with: {}", def.stored_versions_cmd());
    let _ = writeln!(table, "objects (all versions): UNKNOWN offline; count them with: {}", def.count_cmd());
    let findings = match &config {
        Some(c) => check(
            &def,
            c,
            &args.config.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
            &path.display().to_string(),
        ),
        None => Vec::new(),
    };
    if !findings.is_empty() {
        let _ = writeln!(table, "\nfindings:");
        for f in &findings {
            let sev = if f.severity == Severity::Error { "error" } else { "warning" };
            let _ = writeln!(table, "  {sev}: {} ({})", f.message, f.location.path.as_deref().unwrap_or(""));
            if let Some(fix) = &f.fix {
                let _ = writeln!(table, "    fix: {fix}");
            }
        }
    }
    let versions: Vec<Value> = def
        .versions
        .iter()
        .map(|v| {
            json!({
                "name": v.name,
                "served": v.served,
                def.hub_field(): v.hub_eligible,
                "deprecated": v.deprecated,
                "deprecationWarning": v.deprecation_warning,
                "role": config.as_ref().map(|c| role(c, &v.name)),
                "stored": "UNKNOWN",
            })
        })
        .collect();
    let summary = json!({
        "kind": target_kind_label(kind),
        "target": def.target.name(),
        "config": config.as_ref().map(|c| c.name.clone()),
        "hubVersion": config.as_ref().map(|c| c.spec.hub_version.clone()),
        "versions": versions,
        "unknown": {"storedVersions": def.stored_versions_cmd(), "objectCount": def.count_cmd()},
    });
    let summary_line = format!(
        "versions: {} has {} version(s), {} served; {} finding(s)",
        def.target.name(),
        def.versions.len(),
        def.versions.iter().filter(|v| v.served).count(),
        findings.len()
    );
    let report =
        Report { command: "versions".into(), findings, cases: Vec::new(), summary, table, summary_line };
    emit_report(&report, &args.out)
}
