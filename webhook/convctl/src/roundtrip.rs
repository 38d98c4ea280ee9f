//! `convctl test`: every sample to every other version and back, compared with the original.
//!
//! A difference is *acknowledged* when a rule with `acknowledgeLossy: true` claims the field
//! (or the field is left unmapped under `unmappedFieldPolicy: Warn`) on the sample's side of a
//! spoke the round trip passes through; otherwise it is *unacknowledged* loss.

use std::fmt::Write as _;
use std::path::Path;

use dco_api::config::UnmappedFieldPolicy;
use serde_json::{Value, json};

use crate::analyze::table;
use crate::{CliError, FailOn, Loaded, TestFormat, load, require_plan};

/// One differing field after a round trip.
#[derive(Debug, Clone)]
pub struct Diff {
    pub path: Vec<String>,
    pub before: Option<Value>,
    pub after: Option<Value>,
    /// The acknowledged rule or policy that allows this loss, if any.
    pub acknowledged_by: Option<String>,
}

#[derive(Debug)]
pub enum Outcome {
    Pass,
    Loss(Vec<Diff>),
    Error(String),
}

pub struct Case {
    pub sample: String,
    pub from: String,
    pub to: String,
    pub outcome: Outcome,
}

impl Case {
    fn status(&self) -> &'static str {
        match &self.outcome {
            Outcome::Pass => "pass",
            Outcome::Error(_) => "error",
            Outcome::Loss(d) if d.iter().all(|d| d.acknowledged_by.is_some()) => "acknowledged-loss",
            Outcome::Loss(_) => "loss",
        }
    }

    fn fails(&self, fail_on: FailOn) -> bool {
        match self.status() {
            "error" => true,
            "loss" => fail_on != FailOn::None,
            "acknowledged-loss" => fail_on == FailOn::Warn,
            _ => false,
        }
    }
}

fn render(path: &[String]) -> String {
    let mut s = String::new();
    for seg in path {
        if seg.starts_with('[') {
            s.push_str(seg);
        } else {
            if !s.is_empty() {
                s.push('.');
            }
            s.push_str(seg);
        }
    }
    s
}

/// Field-level differences between `a` (original) and `b` (after the round trip). Numbers
/// compare by value.
pub fn diff(a: &Value, b: &Value, path: &mut Vec<String>, out: &mut Vec<Diff>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            for (k, va) in x {
                path.push(k.clone());
                match y.get(k) {
                    Some(vb) => diff(va, vb, path, out),
                    None => out.push(Diff {
                        path: path.clone(),
                        before: Some(va.clone()),
                        after: None,
                        acknowledged_by: None,
                    }),
                }
                path.pop();
            }
            for (k, vb) in y {
                if !x.contains_key(k) {
                    path.push(k.clone());
                    out.push(Diff {
                        path: path.clone(),
                        before: None,
                        after: Some(vb.clone()),
                        acknowledged_by: None,
                    });
                    path.pop();
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                path.push(format!("[{i}]"));
                diff(va, vb, path, out);
                path.pop();
            }
        }
        _ => {
            if !json_equal(a, b) {
                out.push(Diff {
                    path: path.clone(),
                    before: Some(a.clone()),
                    after: Some(b.clone()),
                    acknowledged_by: None,
                });
            }
        }
    }
}

fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => x == y || (x.as_f64().is_some() && x.as_f64() == y.as_f64()),
        _ => a == b,
    }
}

/// A claimed path (as segments) that allows loss, and why.
type Allowance = (Vec<String>, String);

/// Claimed paths that allow loss, per spoke version, split by side: `(version, hub side, spoke side)`.
struct Acks {
    per_spoke: Vec<(String, Vec<Allowance>, Vec<Allowance>)>,
}

/// A claim as path segments (`metadata.annotations.["a.b/c"]` keeps its key whole).
fn claim_segments(claim: &str) -> Vec<String> {
    for bag in ["metadata.annotations.", "metadata.labels."] {
        if let Some(key) = claim.strip_prefix(bag) {
            let key = key.strip_prefix("[\"").and_then(|k| k.strip_suffix("\"]")).unwrap_or(key);
            return vec![
                "metadata".into(),
                bag.trim_end_matches('.').trim_start_matches("metadata.").into(),
                key.into(),
            ];
        }
    }
    claim.split('.').map(str::to_string).collect()
}

impl Acks {
    fn new(l: &Loaded) -> Acks {
        let spec = &l.config.spec;
        let mut per_spoke = Vec::new();
        for status in &l.compiled.report.spokes {
            let mut hub = Vec::new();
            let mut spoke = Vec::new();
            let rules = spec
                .spokes
                .iter()
                .find(|s| s.version == status.version)
                .map(|s| s.rules.as_slice())
                .unwrap_or(&[]);
            for rr in &status.rule_results {
                let Some(rule) = rules.get(rr.index as usize) else { continue };
                if !rule.acknowledge_lossy {
                    continue;
                }
                let why = format!(
                    "spoke {} rule {} ({}): {}",
                    status.version,
                    rr.index,
                    rr.strategy,
                    rule.reason.trim()
                );
                hub.extend(rr.hub_paths.iter().map(|p| (claim_segments(p), why.clone())));
                spoke.extend(rr.spoke_paths.iter().map(|p| (claim_segments(p), why.clone())));
            }
            if spec.unmapped_field_policy == UnmappedFieldPolicy::Warn {
                let why = format!("unmappedFieldPolicy Warn: {}", spec.unmapped_field_reason.trim());
                hub.extend(status.fields_uncovered_hub.iter().map(|p| (claim_segments(p), why.clone())));
                spoke.extend(status.fields_uncovered_spoke.iter().map(|p| (claim_segments(p), why.clone())));
            }
            per_spoke.push((status.version.clone(), hub, spoke));
        }
        Acks { per_spoke }
    }

    /// Why a difference at `path` (on the `from` side) is acknowledged on the way `from` → `to`.
    fn find(&self, hub: &str, from: &str, to: &str, path: &[String]) -> Option<String> {
        let under = |claims: &[Allowance]| {
            claims.iter().find(|(c, _)| path.starts_with(c)).map(|(_, why)| why.clone())
        };
        let spoke = |v: &str| self.per_spoke.iter().find(|(s, _, _)| s == v);
        // The sample's own spoke: its spoke-side claims. The far spoke: its hub-side claims
        // (through the hub, a field keeps its hub path when no rule of the near spoke maps it).
        let near = if from != hub { spoke(from).and_then(|(_, _, s)| under(s)) } else { None };
        near.or_else(|| if to != hub { spoke(to).and_then(|(_, h, _)| under(h)) } else { None })
    }
}

pub fn run(l: &Loaded, dir: &Path, format: TestFormat, fail_on: FailOn) -> Result<(), CliError> {
    let plan = require_plan(l)?;
    let acks = Acks::new(l);
    let hub = plan.hub_version().to_string();
    let versions: Vec<String> = plan.versions().iter().map(|v| v.to_string()).collect();
    let mut cases = Vec::new();
    for file in load::sample_files(dir)? {
        for (label, obj) in load::samples_in_file(&file)? {
            let Some(from) = load::version_of(&obj).map(str::to_string) else {
                cases.push(Case {
                    sample: label,
                    from: "?".into(),
                    to: "-".into(),
                    outcome: Outcome::Error("the object has no apiVersion".into()),
                });
                continue;
            };
            if !versions.contains(&from) {
                cases.push(Case {
                    sample: label,
                    from: from.clone(),
                    to: "-".into(),
                    outcome: Outcome::Error(format!("version {from} is not one of {}", versions.join(", "))),
                });
                continue;
            }
            for to in versions.iter().filter(|v| **v != from) {
                let there = plan.convert(&obj, &format!("{}/{to}", plan.group()));
                let back = there.and_then(|t| plan.convert(&t, &format!("{}/{from}", plan.group())));
                let outcome = match back {
                    Err(e) => Outcome::Error(e.to_string()),
                    Ok(back) => {
                        let mut diffs = Vec::new();
                        diff(&obj, &back, &mut Vec::new(), &mut diffs);
                        for d in &mut diffs {
                            d.acknowledged_by = acks.find(&hub, &from, to, &d.path);
                        }
                        if diffs.is_empty() { Outcome::Pass } else { Outcome::Loss(diffs) }
                    }
                };
                cases.push(Case { sample: label.clone(), from: from.clone(), to: to.clone(), outcome });
            }
        }
    }
    match format {
        TestFormat::Table => crate::emit(&as_table(&cases)),
        TestFormat::Json => {
            crate::emit(&(serde_json::to_string_pretty(&as_json(&cases, fail_on)).unwrap_or_default() + "\n"))
        }
        TestFormat::Junit => crate::emit(&as_junit(&cases, fail_on)),
    }
    let failed = cases.iter().filter(|c| c.fails(fail_on)).count();
    if failed > 0 {
        Err(CliError::Failed(format!(
            "{failed} of {} round trip(s) failed (--fail-on {})",
            cases.len(),
            fail_on_name(fail_on)
        )))
    } else {
        Ok(())
    }
}

fn fail_on_name(f: FailOn) -> &'static str {
    match f {
        FailOn::None => "none",
        FailOn::Warn => "warn",
        FailOn::Loss => "loss",
    }
}

fn short(v: &Option<Value>) -> String {
    match v {
        None => "(absent)".into(),
        Some(v) => {
            let s = v.to_string();
            if s.chars().count() > 40 { format!("{}…", s.chars().take(39).collect::<String>()) } else { s }
        }
    }
}

fn diff_line(d: &Diff) -> String {
    let ack = match &d.acknowledged_by {
        Some(why) => format!(" [acknowledged: {why}]"),
        None => " [UNACKNOWLEDGED]".into(),
    };
    format!("{}: {} → {}{ack}", render(&d.path), short(&d.before), short(&d.after))
}

fn as_table(cases: &[Case]) -> String {
    let rows: Vec<[String; 4]> = cases
        .iter()
        .map(|c| {
            let detail = match &c.outcome {
                Outcome::Pass => String::new(),
                Outcome::Error(e) => e.clone(),
                Outcome::Loss(d) => d.iter().map(diff_line).collect::<Vec<_>>().join("; "),
            };
            [c.sample.clone(), format!("{} → {} → {}", c.from, c.to, c.from), c.status().to_string(), detail]
        })
        .collect();
    let mut out = String::new();
    table(&mut out, ["SAMPLE", "ROUND TRIP", "RESULT", "DETAIL"], &rows);
    let count = |s: &str| cases.iter().filter(|c| c.status() == s).count();
    let _ = writeln!(
        out,
        "\n{} round trip(s): {} pass, {} acknowledged loss, {} loss, {} error",
        cases.len(),
        count("pass"),
        count("acknowledged-loss"),
        count("loss"),
        count("error")
    );
    out
}

fn as_json(cases: &[Case], fail_on: FailOn) -> Value {
    let results: Vec<Value> = cases
        .iter()
        .map(|c| {
            let mut v = json!({"sample": c.sample, "from": c.from, "to": c.to, "status": c.status(), "failed": c.fails(fail_on)});
            match &c.outcome {
                Outcome::Pass => {}
                Outcome::Error(e) => v["error"] = json!(e),
                Outcome::Loss(diffs) => {
                    v["diffs"] = diffs
                        .iter()
                        .map(|d| json!({"path": render(&d.path), "before": d.before, "after": d.after, "acknowledged": d.acknowledged_by.is_some(), "acknowledgedBy": d.acknowledged_by}))
                        .collect();
                }
            }
            v
        })
        .collect();
    let count = |s: &str| cases.iter().filter(|c| c.status() == s).count();
    json!({
        "results": results,
        "summary": {"total": cases.len(), "pass": count("pass"), "acknowledgedLoss": count("acknowledged-loss"), "loss": count("loss"), "error": count("error"),
                    "failed": cases.iter().filter(|c| c.fails(fail_on)).count(), "failOn": fail_on_name(fail_on)}
    })
}

fn xml(s: &str) -> String {
    s.chars()
        .map(|c| match c {
            '&' => "&amp;".into(),
            '<' => "&lt;".into(),
            '>' => "&gt;".into(),
            '"' => "&quot;".into(),
            '\'' => "&apos;".into(),
            c if (c as u32) < 0x20 && !matches!(c, '\n' | '\t' | '\r') => String::new(),
            c => c.to_string(),
        })
        .collect()
}

fn as_junit(cases: &[Case], fail_on: FailOn) -> String {
    let failures = cases.iter().filter(|c| c.fails(fail_on) && c.status() != "error").count();
    let errors = cases.iter().filter(|c| c.status() == "error").count();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"convctl\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">",
        cases.len()
    );
    let _ = writeln!(
        out,
        "  <testsuite name=\"convctl test\" tests=\"{}\" failures=\"{failures}\" errors=\"{errors}\">",
        cases.len()
    );
    for c in cases {
        let name = format!("{} → {} → {}", c.from, c.to, c.from);
        let _ = write!(out, "    <testcase classname=\"{}\" name=\"{}\"", xml(&c.sample), xml(&name));
        let body = match &c.outcome {
            Outcome::Pass => None,
            Outcome::Error(e) => Some(format!("      <error message=\"{}\"/>\n", xml(e))),
            Outcome::Loss(d) => {
                let text = d.iter().map(diff_line).collect::<Vec<_>>().join("\n");
                if c.fails(fail_on) {
                    Some(format!("      <failure message=\"{}\">{}</failure>\n", xml(c.status()), xml(&text)))
                } else {
                    Some(format!("      <system-out>{}</system-out>\n", xml(&text)))
                }
            }
        };
        match body {
            None => out.push_str("/>\n"),
            Some(b) => {
                out.push_str(">\n");
                out.push_str(&b);
                out.push_str("    </testcase>\n");
            }
        }
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_are_field_level_and_numbers_compare_by_value() {
        let a = json!({"spec": {"a": 1, "b": [1, {"c": "x"}], "gone": true, "n": 1.0}});
        let b = json!({"spec": {"a": 1, "b": [1, {"c": "y"}], "new": 2, "n": 1.0}});
        let mut out = Vec::new();
        diff(&a, &b, &mut Vec::new(), &mut out);
        let paths: Vec<String> = out.iter().map(|d| render(&d.path)).collect();
        assert_eq!(paths, ["spec.b[1].c", "spec.gone", "spec.new"]);
    }

    #[test]
    fn claim_segments_keep_metadata_keys_whole() {
        assert_eq!(
            claim_segments("metadata.annotations.[\"example.com/x\"]"),
            ["metadata", "annotations", "example.com/x"]
        );
        assert_eq!(claim_segments("metadata.labels.tier"), ["metadata", "labels", "tier"]);
        assert_eq!(claim_segments("spec.a.b"), ["spec", "a", "b"]);
    }

    #[test]
    fn junit_escapes() {
        assert_eq!(xml("a<b & \"c\"\u{1}"), "a&lt;b &amp; &quot;c&quot;");
    }
}
