//! `convctl analyze`: verdicts per spoke and rule, what each rule claims, uncovered fields.

use std::fmt::Write as _;
use std::path::Path;

use dco_api::config::{LosslessVerdict, TargetKind};
use serde_json::json;

use crate::output::{Finding, OutputArgs, Report, Severity};
use crate::{CliError, Loaded};

fn verdict_word(lossless: bool) -> &'static str {
    if lossless { "lossless" } else { "LOSSY" }
}

fn pair(v: LosslessVerdict) -> String {
    format!("hub→spoke {}, spoke→hub {}", verdict_word(v.hub_to_spoke), verdict_word(v.spoke_to_hub))
}

/// The analysis as a report: the per-spoke tables (fitted to the terminal), the diagnostics
/// as findings, acknowledged lossy rules as notes; `summary` carries the analysis itself.
pub fn report(l: &Loaded, config_file: &Path, width: Option<usize>) -> Report {
    let r = &l.compiled.report;
    let extra = l.extra_errors();
    let mut report = Report::new("analyze");
    report.findings = crate::validate::findings(l, config_file);
    report.findings.extend(acknowledged(l, config_file));
    let mut out = String::new();
    let _ = writeln!(
        out,
        "config {} → {} (hub {}), compiles: {}, overall lossless: {}",
        l.config.name,
        l.target.name(),
        l.config.spec.hub_version,
        if l.ok() { "yes" } else { "NO" },
        if r.overall_lossless { "yes" } else { "no" }
    );
    for s in &r.spokes {
        let _ = writeln!(out, "\nspoke {}: {}", s.version, pair(s.lossless));
        let rows: Vec<[String; 6]> = s
            .rule_results
            .iter()
            .map(|rr| {
                [
                    rr.index.to_string(),
                    rr.strategy.to_string(),
                    rr.hub_paths.join(", "),
                    rr.spoke_paths.join(", "),
                    verdict_word(rr.verdict.hub_to_spoke).to_string(),
                    verdict_word(rr.verdict.spoke_to_hub).to_string(),
                ]
            })
            .collect();
        if !rows.is_empty() {
            table_fit(
                &mut out,
                ["RULE", "STRATEGY", "HUB CLAIMS", "SPOKE CLAIMS", "HUB→SPOKE", "SPOKE→HUB"],
                &rows,
                width,
            );
        }
        if !s.fields_uncovered_hub.is_empty() {
            let _ = writeln!(out, "  uncovered hub fields: {}", s.fields_uncovered_hub.join(", "));
        }
        if !s.fields_uncovered_spoke.is_empty() {
            let _ = writeln!(out, "  uncovered spoke fields: {}", s.fields_uncovered_spoke.join(", "));
        }
    }
    if !r.diagnostics.is_empty() || !extra.is_empty() {
        let _ = writeln!(out, "\ndiagnostics:");
        for e in &extra {
            let _ = writeln!(out, "  error: {e}");
        }
        for d in &r.diagnostics {
            let _ = writeln!(out, "  {}: {d}", if d.is_error() { "error" } else { "warning" });
        }
    }
    report.table = out;
    let count = |s: Severity| report.findings.iter().filter(|f| f.severity == s).count();
    report.summary_line = format!(
        "{}: compiles {}, {} error(s), {} warning(s), {} acknowledged lossy rule(s)",
        l.config.name,
        if l.ok() { "yes" } else { "NO" },
        count(Severity::Error),
        count(Severity::Warning),
        count(Severity::Note)
    );
    let mut summary = report.counts();
    let analysis = json!({
        "config": l.config.name,
        "target": l.target.name(),
        "kind": match l.target.kind() { TargetKind::Xrd => "XRD", TargetKind::Crd => "CRD" },
        "hubVersion": l.config.spec.hub_version,
        "compiles": l.ok(),
        "overallLossless": r.overall_lossless,
        "schemaHash": r.schema_hash,
        "planHash": l.compiled.plan.as_ref().map(|p| p.hash()),
        "spokes": r.spokes,
    });
    if let (Some(m), Some(a)) = (summary.as_object_mut(), analysis.as_object()) {
        m.extend(a.clone());
    }
    report.summary = summary;
    report
}

/// Rules whose loss the config acknowledges: notes, they do not fail.
fn acknowledged(l: &Loaded, config_file: &Path) -> Vec<Finding> {
    let mut out = Vec::new();
    let doc = crate::validate::config_doc(config_file);
    for (i, spoke) in l.config.spec.spokes.iter().enumerate() {
        let Some(s) = l.compiled.report.spokes.iter().find(|s| s.version == spoke.version) else { continue };
        for rr in &s.rule_results {
            if rr.verdict.hub_to_spoke && rr.verdict.spoke_to_hub {
                continue;
            }
            let reason = spoke.rules.get(rr.index as usize).map(|r| r.reason.trim()).unwrap_or_default();
            let paths: Vec<&str> = rr.hub_paths.iter().chain(&rr.spoke_paths).map(String::as_str).collect();
            out.push(Finding {
                rule: "lossy-rule".into(),
                severity: Severity::Note,
                message: format!(
                    "spoke {}, rule {} ({}) {}: {}; acknowledged: {}",
                    spoke.version,
                    rr.index,
                    rr.strategy,
                    paths.join(", "),
                    pair(rr.verdict),
                    if reason.is_empty() { "(no reason given)" } else { reason }
                ),
                fix: None,
                location: crate::validate::config_location(
                    l,
                    config_file,
                    doc.as_ref(),
                    Some(format!("spec.spokes[{i}].rules[{}]", rr.index)),
                ),
                fails: false,
            });
        }
    }
    out
}

pub fn run(l: &Loaded, config_file: &Path, args: &OutputArgs) -> Result<(), CliError> {
    let report = report(l, config_file, args.table_width());
    crate::output::write(&report, args)?;
    if l.ok() { Ok(()) } else { Err(CliError::Failed(String::new())) }
}

/// A left-aligned text table, indented by two spaces, at full width (lint, versions).
pub fn table<const N: usize>(out: &mut String, head: [&str; N], rows: &[[String; N]]) {
    table_fit(out, head, rows, None);
}

/// [`table`], cut to `width` columns (`output::fit_table`).
pub fn table_fit<const N: usize>(
    out: &mut String,
    head: [&str; N],
    rows: &[[String; N]],
    width: Option<usize>,
) {
    let rows: Vec<Vec<String>> = rows.iter().map(|r| r.to_vec()).collect();
    let text = crate::output::fit_table(&head, &rows, width.map(|w| w.saturating_sub(2)));
    for line in text.lines() {
        let _ = writeln!(out, "  {line}");
    }
}
