//! `convctl generate kyverno`: Kyverno ClusterPolicies that move an XRD's composite resources
//! onto the Composition of a new hub version, the reference's two policies with dco's names.
//!
//! Crossplane pins an XR's `compositionRef` when it is created and ignores the selector while
//! that pin is set, so promoting a hub needs every XR re-pointed. Two policies do it:
//!
//! 1. a labeler: every Composition of the XRD's kind is labeled with the version of its
//!    `compositeTypeRef` (`example.org/v2` → `v2`), so Compositions can be selected by version;
//! 2. a migrator: an XR whose selector does not yet ask for `--to` (or, with `--from`, still asks
//!    for that) loses `compositionRef`/`compositionRevisionRef` and gets the selector label
//!    `--to`, so Crossplane selects the new hub's Composition.
//!
//! The reference emits `policies.kyverno.io/v1` MutatingPolicies with CEL; these are
//! `kyverno.io/v1` ClusterPolicies (admission mutation), which every Kyverno release applies.
//! Nothing is applied: the YAML goes to stdout for review.

use std::path::PathBuf;

use clap::{Args, Subcommand, ValueEnum};
use dco_api::config::TargetKind;
use serde_json::{Value, json};

use crate::{CliError, load};

/// The default label on Compositions and in XR selectors, under dco's API group.
pub const LABEL_KEY: &str = "conversion.dco.rs/xrd-api-version";

#[derive(Subcommand)]
pub enum Generate {
    /// Kyverno ClusterPolicies that move an XRD's composite resources onto a new hub's Composition.
    Kyverno(KyvernoArgs),
}

#[derive(Clone, Copy, ValueEnum)]
pub enum DocFormat {
    Yaml,
    Json,
}

#[derive(Args)]
pub struct KyvernoArgs {
    /// The XRDConversionConfig: its hub version is the default --to.
    #[arg(short, long)]
    pub config: PathBuf,
    /// The XRD the config targets (group, kind, plural, versions).
    #[arg(short = 'x', long)]
    pub xrd: PathBuf,
    /// The version whose Composition XRs move to; default: the config's hubVersion.
    #[arg(long)]
    pub to: Option<String>,
    /// Move only XRs whose selector is missing or still asks for this version (a canary).
    #[arg(long)]
    pub from: Option<String>,
    /// The label on Compositions and in XR selectors (`xrd-api-version` matches the reference's
    /// policies already in a cluster).
    #[arg(long, default_value = LABEL_KEY)]
    pub label_key: String,
    /// Name of the labeler policy; default dco-label-compositions-<plural>.
    #[arg(long)]
    pub composition_policy_name: Option<String>,
    /// Name of the migrator policy; default dco-select-composition-version-<plural>.
    #[arg(long)]
    pub migrate_policy_name: Option<String>,
    #[arg(short, long, value_enum, default_value_t = DocFormat::Yaml)]
    pub output: DocFormat,
}

/// What the policies need of the XRD.
struct Xrd {
    group: String,
    kind: String,
    plural: String,
    versions: Vec<String>,
    served: Vec<String>,
}

fn xrd_of(path: &std::path::Path) -> Result<Xrd, CliError> {
    let doc = load::documents(path)?
        .into_iter()
        .find(|d| d.get("kind").and_then(Value::as_str) == Some(TargetKind::Xrd.kind_name()))
        .ok_or_else(|| {
            CliError::Usage(format!(
                "{}: --xrd expects a CompositeResourceDefinition, and the file has none",
                path.display()
            ))
        })?;
    let s = |p: &str| doc.pointer(p).and_then(Value::as_str).unwrap_or_default().to_string();
    let (group, kind, plural) = (s("/spec/group"), s("/spec/names/kind"), s("/spec/names/plural"));
    if group.is_empty() || kind.is_empty() || plural.is_empty() {
        return Err(CliError::Usage(format!(
            "{}: the XRD must set spec.group, spec.names.kind and spec.names.plural",
            path.display()
        )));
    }
    let mut versions = Vec::new();
    let mut served = Vec::new();
    for v in doc.pointer("/spec/versions").and_then(Value::as_array).into_iter().flatten() {
        let Some(name) = v.get("name").and_then(Value::as_str) else { continue };
        versions.push(name.to_string());
        if v.get("served").and_then(Value::as_bool).unwrap_or(true) {
            served.push(name.to_string());
        }
    }
    if served.is_empty() {
        return Err(CliError::Usage(format!("{}: the XRD serves no version", path.display())));
    }
    Ok(Xrd { group, kind, plural, versions, served })
}

/// A DNS-1123 label from `s` (lowercase alphanumerics and single hyphens).
fn dns_label(s: &str) -> String {
    let mut out = String::new();
    for c in s.to_lowercase().chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.trim_matches('-').chars().take(63).collect()
}

/// A JMESPath quoted identifier (`"conversion.dco.rs/xrd-api-version"`).
fn jmes_key(k: &str) -> String {
    format!("\"{}\"", k.replace('\\', "\\\\").replace('"', "\\\""))
}

fn labeler(name: &str, x: &Xrd, label: &str) -> Value {
    json!({
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": name,
            "annotations": {
                "policies.kyverno.io/title": format!("Label {} Compositions with their version", x.kind),
                "policies.kyverno.io/description": format!(
                    "Labels every Composition of {}.{} with {label}: the version of its compositeTypeRef, so an XR can select the Composition of a version. Generated by convctl generate kyverno.",
                    x.kind, x.group
                ),
            },
        },
        "spec": {
            "background": false,
            "rules": [{
                "name": "label-composition-version",
                "match": {"any": [{"resources": {
                    "kinds": ["apiextensions.crossplane.io/v1/Composition"],
                    "operations": ["CREATE", "UPDATE"],
                }}]},
                "preconditions": {"all": [
                    {"key": "{{ request.object.spec.compositeTypeRef.kind || '' }}", "operator": "Equals", "value": x.kind},
                    {"key": format!("{{{{ starts_with(request.object.spec.compositeTypeRef.apiVersion || '', '{}/') }}}}", x.group),
                     "operator": "Equals", "value": true},
                ]},
                "mutate": {"patchStrategicMerge": {"metadata": {"labels": {
                    label: "{{ split(request.object.spec.compositeTypeRef.apiVersion, '/')[1] }}",
                }}}},
            }],
        },
    })
}

/// The selector label an XR asks for: on UPDATE the live object's (oldObject), so Crossplane
/// writing compositionRef back after the move does not trigger another one; on CREATE the
/// incoming object's.
fn selected(label: &str) -> String {
    let sel = format!("spec.crossplane.compositionSelector.matchLabels.{}", jmes_key(label));
    format!(
        "{{{{ (request.operation == 'UPDATE' && request.oldObject.{sel}) || request.object.{sel} || '' }}}}"
    )
}

fn migrator(name: &str, x: &Xrd, label: &str, from: Option<&str>, to: &str) -> Value {
    let kinds: Vec<String> = x.served.iter().map(|v| format!("{}/{v}/{}", x.group, x.kind)).collect();
    let matcher = json!({"any": [{"resources": {"kinds": kinds, "operations": ["CREATE", "UPDATE"]}}]});
    // Which XRs move: those not asking for --to yet, or (--from) those asking for --from or nothing.
    let needs = match from {
        None => json!({"key": selected(label), "operator": "NotEquals", "value": to}),
        Some(f) => json!({"key": selected(label), "operator": "AnyIn", "value": [f, ""]}),
    };
    let crossplane =
        json!({"key": "{{ request.object.spec.crossplane || '' }}", "operator": "NotEquals", "value": ""});
    let drop = |field: &str| {
        json!({
            "name": format!("drop-{}", dns_label(field)),
            "match": matcher,
            "preconditions": {"all": [
                needs,
                {"key": format!("{{{{ request.object.spec.crossplane.{field} || '' }}}}"), "operator": "NotEquals", "value": ""},
            ]},
            "mutate": {"patchesJson6902": format!("- op: remove\n  path: /spec/crossplane/{field}\n")},
        })
    };
    json!({
        "apiVersion": "kyverno.io/v1",
        "kind": "ClusterPolicy",
        "metadata": {
            "name": name,
            "annotations": {
                "policies.kyverno.io/title": format!("Move {} XRs onto the {to} Composition", x.kind),
                "policies.kyverno.io/description": format!(
                    "Removes compositionRef and compositionRevisionRef of {} XRs and sets compositionSelector.matchLabels.{label} to {to}, so Crossplane selects the Composition of hub {to}. Re-generate with the new --to on the next hub change and apply under the same name. Generated by convctl generate kyverno.",
                    x.kind
                ),
            },
        },
        "spec": {
            "background": false,
            "rules": [
                drop("compositionRef"),
                drop("compositionRevisionRef"),
                {
                    "name": "select-composition-version",
                    "match": matcher,
                    "preconditions": {"all": [needs, crossplane]},
                    // A merge keeps the selector's other labels (a JSON patch `add` of the
                    // selector would replace them).
                    "mutate": {"patchStrategicMerge": {"spec": {"crossplane": {"compositionSelector": {
                        "matchLabels": {label: to},
                    }}}}},
                },
            ],
        },
    })
}

/// The two policies.
pub fn policies(a: &KyvernoArgs) -> Result<Vec<Value>, CliError> {
    let config = load::config(&a.config)?;
    if config.kind != TargetKind::Xrd {
        return Err(CliError::Usage(format!(
            "{} is a CRDConversionConfig; these policies move Crossplane composite resources between Compositions, which a CRD has none of",
            a.config.display()
        )));
    }
    let x = xrd_of(&a.xrd)?;
    let xrd_name = format!("{}.{}", x.plural, x.group);
    if xrd_name != config.target_name {
        return Err(CliError::Usage(format!(
            "config {} targets {} but {} is {xrd_name}; give the matching XRD",
            config.name,
            config.target_name,
            a.xrd.display()
        )));
    }
    let to = a.to.clone().unwrap_or_else(|| config.spec.hub_version.clone());
    for (flag, v) in [("--to", Some(&to)), ("--from", a.from.as_ref())] {
        if let Some(v) = v
            && !x.versions.contains(v)
        {
            return Err(CliError::Usage(format!(
                "{flag} {v}: {xrd_name} has versions {}",
                x.versions.join(", ")
            )));
        }
    }
    if a.label_key.is_empty() || a.label_key.len() > 317 {
        return Err(CliError::Usage("--label-key must be a label key (1 to 317 characters)".into()));
    }
    let plural = dns_label(&x.plural);
    let labeler_name =
        a.composition_policy_name.clone().unwrap_or_else(|| format!("dco-label-compositions-{plural}"));
    let migrator_name =
        a.migrate_policy_name.clone().unwrap_or_else(|| format!("dco-select-composition-version-{plural}"));
    Ok(vec![
        labeler(&labeler_name, &x, &a.label_key),
        migrator(&migrator_name, &x, &a.label_key, a.from.as_deref(), &to),
    ])
}

pub fn run(g: &Generate) -> Result<(), CliError> {
    let Generate::Kyverno(a) = g;
    let docs = policies(a)?;
    let text = match a.output {
        DocFormat::Json => serde_json::to_string_pretty(&docs).unwrap_or_default() + "\n",
        DocFormat::Yaml => {
            let body: Vec<String> =
                docs.iter().map(|d| serde_yaml::to_string(d).unwrap_or_default()).collect();
            format!(
                "# Generated by convctl generate kyverno: review, commit, apply; convctl applies nothing.\n{}",
                body.join("---\n")
            )
        }
    };
    crate::emit(&text);
    Ok(())
}
