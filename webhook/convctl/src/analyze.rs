//! `convctl analyze`: verdicts per spoke and rule, what each rule claims, uncovered fields.

use std::fmt::Write as _;

use dco_api::config::{LosslessVerdict, TargetKind};
use serde_json::json;

use crate::{CliError, Format, Loaded};

fn verdict_word(lossless: bool) -> &'static str {
    if lossless { "lossless" } else { "LOSSY" }
}

fn pair(v: LosslessVerdict) -> String {
    format!("hub→spoke {}, spoke→hub {}", verdict_word(v.hub_to_spoke), verdict_word(v.spoke_to_hub))
}

pub fn run(l: &Loaded, format: Format) -> Result<(), CliError> {
    let r = &l.compiled.report;
    let extra = l.extra_errors();
    match format {
        Format::Json => {
            let diagnostics: Vec<serde_json::Value> = r
                .diagnostics
                .iter()
                .map(|d| {
                    let mut v = serde_json::to_value(d).unwrap_or_default();
                    v["text"] = json!(d.to_string());
                    v
                })
                .chain(extra.iter().map(|e| json!({"severity": "Error", "message": e, "text": e})))
                .collect();
            let doc = json!({
                "config": l.config.name,
                "target": l.target.name(),
                "kind": match l.target.kind() { TargetKind::Xrd => "XRD", TargetKind::Crd => "CRD" },
                "hubVersion": l.config.spec.hub_version,
                "compiles": l.ok(),
                "overallLossless": r.overall_lossless,
                "schemaHash": r.schema_hash,
                "planHash": l.compiled.plan.as_ref().map(|p| p.hash()),
                "spokes": r.spokes,
                "diagnostics": diagnostics,
            });
            crate::emit(&(serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"));
        }
        Format::Table => {
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
                    table(
                        &mut out,
                        ["RULE", "STRATEGY", "HUB CLAIMS", "SPOKE CLAIMS", "HUB→SPOKE", "SPOKE→HUB"],
                        &rows,
                    );
                }
                if !s.fields_uncovered_hub.is_empty() {
                    let _ = writeln!(out, "  uncovered hub fields: {}", s.fields_uncovered_hub.join(", "));
                }
                if !s.fields_uncovered_spoke.is_empty() {
                    let _ =
                        writeln!(out, "  uncovered spoke fields: {}", s.fields_uncovered_spoke.join(", "));
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
            crate::emit(&out);
        }
    }
    if l.ok() { Ok(()) } else { Err(CliError::Failed(String::new())) }
}

/// A left-aligned text table, indented by two spaces.
pub fn table<const N: usize>(out: &mut String, head: [&str; N], rows: &[[String; N]]) {
    let mut widths: Vec<usize> = head.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |out: &mut String, cells: Vec<&str>| {
        let mut s = String::from("  ");
        for (i, (cell, w)) in cells.iter().zip(&widths).enumerate() {
            if i + 1 == N {
                s.push_str(cell);
            } else {
                let _ = write!(s, "{cell:<w$}  ");
            }
        }
        let _ = writeln!(out, "{}", s.trim_end());
    };
    line(out, head.to_vec());
    for row in rows {
        line(out, row.iter().map(String::as_str).collect());
    }
}
