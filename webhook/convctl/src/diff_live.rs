//! `convctl diff --live -c CONFIG`: a config file against what each cluster runs — the
//! config deployed for the same target, and the target itself (docs/convctl.md, "diff
//! --live"). Both configs are compiled against the live target and compared by the offline
//! diff ([`crate::diff::compare`]); what that comparison cannot see (the pin, the policies,
//! a rule's parameters that leave its claims as they were) is compared field by field. With
//! `--crd FILE`/`--xrd FILE` the file's target is compared with the live one, version by
//! version. Every finding names its context; a context that cannot be read is a finding.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use dco_api::config::{ConversionSpec, TargetKind};
use dco_engine::{Target, compile};
use serde_json::{Value, json};

use crate::diff::{DiffArgs, Side, compare, config_kind_name, target_kind_label};
use crate::live::cluster::Member;
use crate::live::target::{self as live_target, LiveTarget};
use crate::output::{Finding, Location, Report, Severity};
use crate::{CliError, load};

fn finding(ctx: &str, rule: &str, message: String, fix: Option<String>, location: Location) -> Finding {
    let location = Location { context: Some(ctx.to_string()), ..location };
    Finding {
        rule: rule.into(),
        severity: Severity::Error,
        message: format!("{ctx}: {message}"),
        fix,
        location,
        fails: true,
    }
}

/// A client for `m` that has answered: its connection or credentials failing is this
/// member's "unreachable" finding, told apart from what a later read finds missing.
pub async fn reach(m: &Member, timeout: std::time::Duration) -> Result<kube::Client, String> {
    let client = m.connect(timeout).await?;
    match client.apiserver_version().await {
        Ok(_) => Ok(client),
        Err(e) => Err(format!("the cluster of {} does not answer: {e}", m.label)),
    }
}

/// The spec fields the rule comparison does not look at, compared as they are written.
pub fn settings_deltas(live: &ConversionSpec, file: &ConversionSpec) -> Vec<(String, String, String)> {
    let text = |v: Value| -> String { if v.is_null() { "unset".into() } else { v.to_string() } };
    let pairs = [
        ("spec.webhookServerRef", json!(live.webhook_server_ref), json!(file.webhook_server_ref)),
        (
            "spec.conversionReviewVersions",
            json!(live.conversion_review_versions),
            json!(file.conversion_review_versions),
        ),
        ("spec.unmappedFieldPolicy", json!(live.unmapped_field_policy), json!(file.unmapped_field_policy)),
        ("spec.unmappedFieldReason", json!(live.unmapped_field_reason), json!(file.unmapped_field_reason)),
        ("spec.driftPolicy", json!(live.drift_policy), json!(file.drift_policy)),
    ];
    pairs.into_iter().filter(|(_, a, b)| a != b).map(|(p, a, b)| (p.to_string(), text(a), text(b))).collect()
}

/// Spokes present in both whose rules differ as written (parameters, order, `when`).
pub fn spokes_written_differently(live: &ConversionSpec, file: &ConversionSpec) -> Vec<(usize, String)> {
    file.spokes
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let other = live.spokes.iter().find(|o| o.version == s.version)?;
            (json!(other.rules) != json!(s.rules)).then(|| (i, s.version.clone()))
        })
        .collect()
}

/// The file's target against the live one: versions added or removed, served and hub flags,
/// schemas (compared as JSON values, so key order is not a delta).
pub fn target_deltas(file: &Target, live: &Target) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let names = |t: &Target| -> BTreeSet<String> { t.versions().iter().map(|v| v.name.clone()).collect() };
    let (f, l) = (names(file), names(live));
    for v in f.difference(&l) {
        out.push((
            format!("spec.versions[{v}]"),
            format!("version {v} is in the file but not on the cluster"),
        ));
    }
    for v in l.difference(&f) {
        out.push((
            format!("spec.versions[{v}]"),
            format!("version {v} is on the cluster but not in the file"),
        ));
    }
    for v in f.intersection(&l) {
        let (a, b) = (file.version(v).expect("listed"), live.version(v).expect("listed"));
        if a.served != b.served {
            out.push((
                format!("spec.versions[{v}].served"),
                format!("version {v}: served {} in the file, {} on the cluster", a.served, b.served),
            ));
        }
        if a.hub_eligible != b.hub_eligible {
            let flag = if file.kind() == TargetKind::Xrd { "referenceable" } else { "storage" };
            out.push((
                format!("spec.versions[{v}].{flag}"),
                format!(
                    "version {v}: {flag} {} in the file, {} on the cluster",
                    a.hub_eligible, b.hub_eligible
                ),
            ));
        }
        if a.schema != b.schema {
            out.push((
                format!("spec.versions[{v}].schema.openAPIV3Schema"),
                format!("version {v}: the schema in the file differs from the cluster's"),
            ));
        }
    }
    out
}

/// One context's comparison: its findings and its JSON summary.
async fn member_diff(
    m: &Member,
    args: &DiffArgs,
    file: &Path,
    file_target: Option<&Target>,
) -> (Vec<Finding>, Value) {
    let ctx = m.label.as_str();
    let here = |path: Option<String>| Location {
        file: Some(file.display().to_string()),
        path,
        ..Location::default()
    };
    let failed = |rule: &str, msg: String, fix: &str| {
        let f = finding(ctx, rule, msg.clone(), Some(fix.to_string()), here(None));
        (vec![f], json!({"context": ctx, "error": msg}))
    };
    let client = match crate::diff_live::reach(m, args.cluster.timeout()).await {
        Ok(c) => c,
        Err(e) => return failed("unreachable", e, "check the context's cluster and credentials"),
    };
    // Read fresh per member: its `target_place` names the file, the compile is per live target.
    let config = match load::config(file) {
        Ok(c) => c,
        Err(e) => return failed("config-unreadable", e.to_string(), "fix the config file"),
    };
    let kind = config.kind;
    let live: LiveTarget = match live_target::read(&client, kind, &config.target_name).await {
        Ok(t) => t,
        Err(e) => {
            return failed("target-missing", e, "deploy the target first, or check the config's target name");
        }
    };
    let mut findings = Vec::new();
    if let Some(ft) = file_target {
        for (path, msg) in target_deltas(ft, &live.target) {
            let loc = Location { object: Some(live.describe()), path: Some(path), ..Location::default() };
            findings.push(finding(ctx, "target-differs", msg, None, loc));
        }
    }
    let deployed = match live_target::configs(&client, ctx, kind, &config.target_name).await {
        Ok(list) => list,
        Err(e) => return failed("configs-unreadable", e, "check that dco is installed and readable there"),
    };
    let mut summaries = Vec::new();
    if deployed.is_empty() {
        let msg = format!(
            "no {} on the cluster targets {} {}: the config is not deployed there",
            config_kind_name(kind),
            target_kind_label(kind),
            config.target_name
        );
        findings.push(finding(ctx, "not-deployed", msg, Some("apply the config".into()), here(None)));
    }
    let to =
        Side { label: file.display().to_string(), compiled: compile(&config.spec, &live.target), config };
    for d in deployed {
        let lc = match d {
            Ok(lc) => lc,
            Err(e) => {
                findings.push(finding(ctx, "deployed-config-unreadable", e, None, Location::default()));
                continue;
            }
        };
        let label = format!("{ctx}/{}/{}", config_kind_name(kind), lc.name);
        let from = Side {
            label: label.clone(),
            compiled: compile(&lc.config.spec, &live.target),
            config: lc.config,
        };
        let (mut found, mut summary) = compare(&from, &to, &live.target);
        let flagged: BTreeSet<String> = summary["spokes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|s| s["version"].as_str().map(str::to_string))
            .collect();
        for (path, was, is) in settings_deltas(&from.config.spec, &to.config.spec) {
            let msg = format!("{path}: {was} on the cluster ({label}), {is} in {}", to.label);
            found.push(finding(ctx, "setting-changed", msg, None, to.location(path.clone())));
        }
        for (i, v) in spokes_written_differently(&from.config.spec, &to.config.spec) {
            if flagged.contains(&v) {
                continue;
            }
            let msg = format!(
                "spoke {v}: the rules are written differently from {label} (parameters or order) though they claim the same fields"
            );
            found.push(finding(ctx, "rules-changed", msg, None, to.location(format!("spec.spokes[{i}]"))));
        }
        for f in &mut found {
            f.location.context = Some(ctx.to_string());
            if !f.message.starts_with(ctx) {
                f.message = format!("{ctx}: {}", f.message);
            }
            f.fails = true;
        }
        summary["deployed"] = json!(label);
        summaries.push(summary);
        findings.extend(found);
    }
    let summary = json!({"context": ctx, "target": live.describe(), "deltas": findings.len(), "comparisons": summaries});
    (findings, summary)
}

pub fn run(args: &DiffArgs) -> Result<(), CliError> {
    let [file] = args.configs.as_slice() else {
        return Err(CliError::Usage(format!(
            "diff --live compares one config file (-c FILE) with what each cluster runs; got {}",
            args.configs.len()
        )));
    };
    let config = load::config(file)?;
    let file_target = match (&args.target.crd, &args.target.xrd) {
        (None, None) => None,
        _ => {
            let t = args.target.load()?;
            load::same_target(&config, &t)?;
            Some(t)
        }
    };
    let members = args.cluster.members()?;
    let results = crate::live::block_on(async {
        let mut out = Vec::new();
        for m in &members {
            out.push(member_diff(m, args, file, file_target.as_ref()).await);
        }
        out
    });
    let mut findings = Vec::new();
    let mut contexts = Vec::new();
    let mut table = format!(
        "{} {} {}: {} against the deployed config, per context\n\n",
        config_kind_name(config.kind),
        target_kind_label(config.kind),
        config.target_name,
        file.display()
    );
    for (m, (found, summary)) in members.iter().zip(results) {
        let _ = writeln!(
            table,
            "{}: {}",
            m.label,
            if summary.get("error").is_some() {
                "not compared".to_string()
            } else if found.is_empty() {
                "no differences".to_string()
            } else {
                format!("{} difference(s)", found.len())
            }
        );
        for f in &found {
            let text = f.message.strip_prefix(&format!("{}: ", m.label)).unwrap_or(&f.message);
            let _ = writeln!(table, "  {text}");
        }
        contexts.push(summary);
        findings.extend(found);
    }
    let differing =
        contexts.iter().filter(|c| c["deltas"].as_u64().unwrap_or(0) > 0 || c.get("error").is_some()).count();
    let summary_line = format!(
        "diff --live: {} context(s), {differing} with differences or unreachable, {} finding(s)",
        members.len(),
        findings.len()
    );
    let summary = json!({"config": file.display().to_string(), "target": config.target_name,
        "hasDeltas": !findings.is_empty(), "deltas": findings.len(), "contexts": contexts});
    let report = Report { command: "diff".into(), findings, cases: Vec::new(), summary, table, summary_line };
    crate::output::finish(&report, &args.out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(yaml: &str) -> ConversionSpec {
        serde_yaml::from_str(yaml).unwrap()
    }

    #[test]
    fn settings_and_rule_parameters_are_deltas_too() {
        let a = spec(
            "hubVersion: v2\nspokes:\n- version: v1\n  rules:\n  - strategy: DefaultValue\n    defaultValue: {path: spec.x, existsOn: Hub, default: 1}\n",
        );
        let b = spec(
            "hubVersion: v2\nwebhookServerRef: {name: pool-b}\ndriftPolicy: FailClosed\nspokes:\n- version: v1\n  rules:\n  - strategy: DefaultValue\n    defaultValue: {path: spec.x, existsOn: Hub, default: 2}\n",
        );
        let d = settings_deltas(&a, &b);
        let paths: Vec<&str> = d.iter().map(|(p, _, _)| p.as_str()).collect();
        assert_eq!(paths, ["spec.webhookServerRef", "spec.driftPolicy"]);
        assert_eq!(d[0].1, "unset");
        assert!(d[0].2.contains("pool-b"), "{d:?}");
        assert_eq!(spokes_written_differently(&a, &b), [(0, "v1".to_string())]);
        assert!(settings_deltas(&a, &a).is_empty() && spokes_written_differently(&a, &a).is_empty());
    }

    #[test]
    fn a_target_differs_by_version_flag_and_schema() {
        let crd = |served_v1: bool, field: &str| {
            Target::from_value(&json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
                "metadata": {"name": "ws.example.org"},
                "spec": {"group": "example.org", "scope": "Namespaced",
                    "names": {"plural": "ws", "singular": "w", "kind": "W", "listKind": "WList"},
                    "versions": [
                        {"name": "v1", "served": served_v1, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                        {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": {"type": "object",
                            "properties": {"spec": {"type": "object", "properties": {field: {"type": "string"}}}}}}}]}}))
            .unwrap()
        };
        assert!(target_deltas(&crd(true, "a"), &crd(true, "a")).is_empty());
        let d = target_deltas(&crd(true, "a"), &crd(false, "b"));
        let paths: Vec<&str> = d.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["spec.versions[v1].served", "spec.versions[v2].schema.openAPIV3Schema"]);
    }
}
