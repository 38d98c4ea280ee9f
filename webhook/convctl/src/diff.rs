//! `convctl diff`: two configs compiled against one target, and what changed between them —
//! coverage, rule claims, lossless verdicts, diagnostics, the hub and the spoke list — with the
//! rule and path behind each delta (docs/convctl.md, "diff").
//!
//! Rules are matched by strategy and claimed paths, never by index, so reordering a config's
//! rules is not a delta; diagnostics are matched without their rule index for the same reason.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use clap::Args;
use dco_api::config::{RuleResult, SpokeStatus, TargetKind};
use dco_engine::{Compiled, Diagnostic, Target, compile};
use serde_json::{Value, json};

use crate::output::{Finding, Location, OutputArgs, Report, Severity};
use crate::{CliError, load};

/// The definition every comparison is made against: `--crd FILE` or `--xrd FILE`.
#[derive(Args, Clone, Debug)]
pub struct TargetArgs {
    /// The CustomResourceDefinition (for CRDConversionConfigs). One of --crd or --xrd is
    /// required, except by `diff --live`, which reads the target from each cluster.
    #[arg(long, conflicts_with = "xrd")]
    pub crd: Option<PathBuf>,
    /// The Crossplane CompositeResourceDefinition (for XRDConversionConfigs).
    #[arg(short = 'x', long)]
    pub xrd: Option<PathBuf>,
}

impl TargetArgs {
    pub fn path_and_kind(&self) -> Result<(&Path, TargetKind), CliError> {
        match (&self.crd, &self.xrd) {
            (Some(p), None) => Ok((p, TargetKind::Crd)),
            (None, Some(p)) => Ok((p, TargetKind::Xrd)),
            _ => Err(CliError::Usage("give exactly one of --crd or --xrd".into())),
        }
    }

    pub fn load(&self) -> Result<Target, CliError> {
        let (path, kind) = self.path_and_kind()?;
        load::target(path, kind)
    }
}

#[derive(Args)]
pub struct DiffArgs {
    /// The two configs, the old one first: `-c old.yaml -c new.yaml`; with --live, one.
    #[arg(short = 'c', long = "config", value_name = "CONFIG", required = true)]
    pub configs: Vec<PathBuf>,
    #[command(flatten)]
    pub target: TargetArgs,
    /// Compare the config with the one each cluster runs for its target, compiled against the
    /// live target (and, given --crd/--xrd, that file's target with the live one).
    #[arg(long)]
    pub live: bool,
    #[command(flatten)]
    pub cluster: crate::live::cluster::ClusterArgs,
    #[command(flatten)]
    pub out: OutputArgs,
}

/// One config compiled against the target.
pub struct Side {
    pub label: String,
    pub config: load::Config,
    pub compiled: Compiled,
}

impl Side {
    pub fn load(path: &Path, target: &Target) -> Result<Side, CliError> {
        let config = load::config(path)?;
        if config.kind != target.kind() {
            let flag = if config.kind == TargetKind::Xrd { "--xrd" } else { "--crd" };
            return Err(CliError::Usage(format!(
                "{} is a {}; give its target with {flag}",
                path.display(),
                config_kind_name(config.kind)
            )));
        }
        let compiled = compile(&config.spec, target);
        Ok(Side { label: path.display().to_string(), config, compiled })
    }

    pub fn spoke(&self, version: &str) -> Option<&SpokeStatus> {
        self.compiled.report.spokes.iter().find(|s| s.version == version)
    }

    /// Where spoke `version`'s rule `index` sits in the config file.
    pub fn rule_path(&self, version: &str, index: Option<u32>) -> String {
        let si = self.config.spec.spokes.iter().position(|s| s.version == version);
        match (si, index) {
            (Some(si), Some(i)) => format!("spec.spokes[{si}].rules[{i}]"),
            (Some(si), None) => format!("spec.spokes[{si}]"),
            (None, _) => "spec.spokes".into(),
        }
    }

    pub fn location(&self, path: String) -> Location {
        Location {
            file: Some(self.label.clone()),
            object: Some(format!("{} {}", config_kind_name(self.config.kind), self.config.name)),
            path: Some(path),
            ..Location::default()
        }
    }
}

pub fn config_kind_name(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Xrd => "XRDConversionConfig",
        TargetKind::Crd => "CRDConversionConfig",
    }
}

pub fn target_kind_label(kind: TargetKind) -> &'static str {
    match kind {
        TargetKind::Xrd => "XRD",
        TargetKind::Crd => "CRD",
    }
}

/// A rule as diff and compat identify it: its strategy and the paths it claims.
pub fn claim_key(r: &RuleResult) -> String {
    format!("{}|{}|{}", r.strategy, r.hub_paths.join(","), r.spoke_paths.join(","))
}

/// How a rule reads in a message: `rule 2 (FieldRename hub spec.a ↔ spoke spec.b)`.
pub fn describe_rule(r: &RuleResult) -> String {
    let mut s = format!("rule {} ({}", r.index, r.strategy);
    if !r.hub_paths.is_empty() {
        let _ = write!(s, " hub {}", r.hub_paths.join(", "));
    }
    if !r.spoke_paths.is_empty() {
        let _ = write!(
            s,
            "{}spoke {}",
            if r.hub_paths.is_empty() { " " } else { " ↔ " },
            r.spoke_paths.join(", ")
        );
    }
    s.push(')');
    s
}

/// Whether claiming `claim` covers `field` (the field itself or something below it).
pub fn covers(claim: &str, field: &str) -> bool {
    field == claim
        || field.strip_prefix(claim).is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

/// The rule of `spoke` that claims `field` on the hub (`hub`) or spoke side.
pub fn claimant<'a>(spoke: Option<&'a SpokeStatus>, field: &str, hub: bool) -> Option<&'a RuleResult> {
    spoke?.rule_results.iter().find(|r| {
        let paths = if hub { &r.hub_paths } else { &r.spoke_paths };
        paths.iter().any(|c| covers(c, field))
    })
}

fn lossless_in(v: dco_api::config::LosslessVerdict, hub_to_spoke: bool) -> bool {
    if hub_to_spoke { v.hub_to_spoke } else { v.spoke_to_hub }
}

/// A diagnostic without its rule index: reordering rules must not make it a delta.
fn diag_key(d: &Diagnostic) -> String {
    format!(
        "{:?}|{}|{}|{}|{}",
        d.severity,
        d.spoke.as_deref().unwrap_or(""),
        d.strategy.map(|s| s.to_string()).unwrap_or_default(),
        d.paths.join(","),
        d.message
    )
}

/// The comparison: findings (one per delta) and the reference-shaped JSON summary.
struct Delta<'a> {
    from: &'a Side,
    to: &'a Side,
    findings: Vec<Finding>,
    spokes: Vec<Value>,
}

fn delta(rule: &str, severity: Severity, message: String, location: Location) -> Finding {
    Finding { rule: rule.into(), severity, message, fix: None, location, fails: true }
}

impl<'a> Delta<'a> {
    fn push(&mut self, rule: &str, severity: Severity, message: String, location: Location) {
        self.findings.push(delta(rule, severity, message, location));
    }

    fn hub_and_spokes(&mut self) -> (Option<Value>, Vec<String>, Vec<String>) {
        let (a, b) = (&self.from.config.spec, &self.to.config.spec);
        let mut hub = None;
        if a.hub_version != b.hub_version {
            hub = Some(json!({"from": a.hub_version, "to": b.hub_version}));
            self.push(
                "hub-changed",
                Severity::Warning,
                format!(
                    "hub version {} → {}: every spoke's rules now map to a different version",
                    a.hub_version, b.hub_version
                ),
                self.to.location("spec.hubVersion".into()),
            );
        }
        let va: BTreeSet<&str> = a.spokes.iter().map(|s| s.version.as_str()).collect();
        let vb: BTreeSet<&str> = b.spokes.iter().map(|s| s.version.as_str()).collect();
        let added: Vec<String> = vb.difference(&va).map(|s| s.to_string()).collect();
        let removed: Vec<String> = va.difference(&vb).map(|s| s.to_string()).collect();
        for v in &added {
            let n = b.spokes.iter().find(|s| &s.version == v).map_or(0, |s| s.rules.len());
            let loc = self.to.location(self.to.rule_path(v, None));
            self.push("spoke-added", Severity::Note, format!("+ spoke {v} ({n} rule(s))"), loc);
        }
        for v in &removed {
            let n = a.spokes.iter().find(|s| &s.version == v).map_or(0, |s| s.rules.len());
            let loc = self.from.location(self.from.rule_path(v, None));
            self.push("spoke-removed", Severity::Warning, format!("- spoke {v} ({n} rule(s))"), loc);
        }
        (hub, added, removed)
    }

    fn uncovered(&mut self, v: &str, hub: bool, sj: &mut Value) {
        let (sa, sb) = (self.from.spoke(v), self.to.spoke(v));
        let list = |s: Option<&SpokeStatus>| -> BTreeSet<String> {
            s.map(|s| if hub { &s.fields_uncovered_hub } else { &s.fields_uncovered_spoke })
                .into_iter()
                .flatten()
                .cloned()
                .collect()
        };
        let (ua, ub) = (list(sa), list(sb));
        let side = if hub { "hub" } else { "spoke" };
        let key = if hub { "Hub" } else { "Spoke" };
        let added: Vec<&String> = ub.difference(&ua).collect();
        let removed: Vec<&String> = ua.difference(&ub).collect();
        sj[format!("uncovered{key}Added")] = json!(added);
        sj[format!("uncovered{key}Removed")] = json!(removed);
        for f in added {
            let (msg, loc) = match claimant(sa, f, hub) {
                Some(r) => (
                    format!(
                        "spoke {v}: {side} field {f} became uncovered: {} of {} claimed it; no rule of {} does",
                        describe_rule(r),
                        self.from.label,
                        self.to.label
                    ),
                    self.from.location(self.from.rule_path(v, Some(r.index))),
                ),
                None => (
                    format!(
                        "spoke {v}: {side} field {f} became uncovered; no rule of {} claims it",
                        self.to.label
                    ),
                    self.to.location(self.to.rule_path(v, None)),
                ),
            };
            self.push("field-uncovered", Severity::Warning, msg, loc);
        }
        for f in removed {
            let (msg, loc) = match claimant(sb, f, hub) {
                Some(r) => (
                    format!(
                        "spoke {v}: {side} field {f} became covered by {} of {}",
                        describe_rule(r),
                        self.to.label
                    ),
                    self.to.location(self.to.rule_path(v, Some(r.index))),
                ),
                None => (
                    format!(
                        "spoke {v}: {side} field {f} is no longer reported uncovered by {}",
                        self.to.label
                    ),
                    self.to.location(self.to.rule_path(v, None)),
                ),
            };
            self.push("field-covered", Severity::Note, msg, loc);
        }
    }

    /// Rule claims as a multiset: the same rule twice is not the same config as once.
    fn claims(&mut self, v: &str, sj: &mut Value) {
        let rules = |s: Option<&'a SpokeStatus>| -> Vec<&'a RuleResult> {
            s.map(|s| s.rule_results.iter().collect()).unwrap_or_default()
        };
        let (ra, rb) = (rules(self.from.spoke(v)), rules(self.to.spoke(v)));
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for r in &ra {
            *counts.entry(claim_key(r)).or_default() -= 1;
        }
        for r in &rb {
            *counts.entry(claim_key(r)).or_default() += 1;
        }
        let claim_json = |r: &RuleResult| json!({"strategy": r.strategy.to_string(), "hubPaths": r.hub_paths, "spokePaths": r.spoke_paths, "rule": r.index});
        let (mut added, mut removed) = (Vec::new(), Vec::new());
        for (k, n) in counts {
            // The last rules with this key on the side that has more of them are the extra ones.
            if n > 0 {
                for r in rb.iter().filter(|r| claim_key(r) == k).rev().take(n as usize) {
                    added.push(claim_json(r));
                    let loc = self.to.location(self.to.rule_path(v, Some(r.index)));
                    let msg = format!("spoke {v}: + {} added in {}", describe_rule(r), self.to.label);
                    self.push("rule-added", Severity::Note, msg, loc);
                }
            } else if n < 0 {
                for r in ra.iter().filter(|r| claim_key(r) == k).rev().take((-n) as usize) {
                    removed.push(claim_json(r));
                    let loc = self.from.location(self.from.rule_path(v, Some(r.index)));
                    let msg = format!(
                        "spoke {v}: - {} of {} is gone from {}",
                        describe_rule(r),
                        self.from.label,
                        self.to.label
                    );
                    self.push("rule-removed", Severity::Warning, msg, loc);
                }
            }
        }
        sj["ruleClaimsAdded"] = json!(added);
        sj["ruleClaimsRemoved"] = json!(removed);
    }

    fn lossless(&mut self, v: &str, sj: &mut Value) {
        let (Some(sa), Some(sb)) = (self.from.spoke(v), self.to.spoke(v)) else { return };
        let mut changes = Vec::new();
        for (dir, label, h2s) in [("hubToSpoke", "hub→spoke", true), ("spokeToHub", "spoke→hub", false)] {
            let (was, is) = (lossless_in(sa.lossless, h2s), lossless_in(sb.lossless, h2s));
            if was == is {
                continue;
            }
            changes.push(json!({"direction": dir, "from": was, "to": is}));
            // The cause: rules lossy in this direction on the lossy side with no lossy twin on
            // the other side.
            let (lossy_side, other) = if is { (self.from, self.to) } else { (self.to, self.from) };
            let other_lossy: BTreeSet<String> = other
                .spoke(v)
                .map(|s| {
                    s.rule_results.iter().filter(|r| !lossless_in(r.verdict, h2s)).map(claim_key).collect()
                })
                .unwrap_or_default();
            let causes: Vec<&RuleResult> = lossy_side
                .spoke(v)
                .map(|s| {
                    s.rule_results
                        .iter()
                        .filter(|r| !lossless_in(r.verdict, h2s) && !other_lossy.contains(&claim_key(r)))
                        .collect()
                })
                .unwrap_or_default();
            let why = if causes.is_empty() {
                let before: BTreeSet<&String> = other
                    .spoke(v)
                    .map(|s| s.fields_uncovered_hub.iter().chain(&s.fields_uncovered_spoke).collect())
                    .unwrap_or_default();
                let newly: Vec<&str> = lossy_side
                    .spoke(v)
                    .map(|s| {
                        s.fields_uncovered_hub
                            .iter()
                            .chain(&s.fields_uncovered_spoke)
                            .filter(|f| !before.contains(f))
                            .map(String::as_str)
                            .collect()
                    })
                    .unwrap_or_default();
                if newly.is_empty() {
                    format!("no rule's verdict explains it; {}'s diagnostics changed", lossy_side.label)
                } else {
                    format!("{} uncovered in {}", newly.join(", "), lossy_side.label)
                }
            } else {
                let names: Vec<String> = causes.iter().map(|r| describe_rule(r)).collect();
                format!("{} of {} is lossy {label}", names.join(", "), lossy_side.label)
            };
            let word = |b: bool| if b { "lossless" } else { "lossy" };
            let loc = lossy_side.location(lossy_side.rule_path(v, causes.first().map(|r| r.index)));
            let msg = format!("spoke {v}: {label} {} → {}: {why}", word(was), word(is));
            let sev = if is { Severity::Note } else { Severity::Warning };
            self.push("lossless-changed", sev, msg, loc);
        }
        sj["losslessChanges"] = json!(changes);
    }

    fn diagnostics(&mut self, v: Option<&str>, sj: &mut Value) {
        let of = |s: &'a Side| -> Vec<&'a Diagnostic> {
            s.compiled.report.diagnostics.iter().filter(|d| d.spoke.as_deref() == v).collect()
        };
        let (da, db) = (of(self.from), of(self.to));
        let mut counts: BTreeMap<String, i64> = BTreeMap::new();
        for d in &da {
            *counts.entry(diag_key(d)).or_default() -= 1;
        }
        for d in &db {
            *counts.entry(diag_key(d)).or_default() += 1;
        }
        let (mut ea, mut er, mut wa, mut wr) = (vec![], vec![], vec![], vec![]);
        for (k, n) in counts {
            let (side, list, sign) = if n > 0 { (self.to, &db, '+') } else { (self.from, &da, '-') };
            for d in list.iter().filter(|d| diag_key(d) == k).take(n.unsigned_abs() as usize) {
                let text = d.to_string();
                let bucket = match (d.is_error(), sign) {
                    (true, '+') => &mut ea,
                    (true, _) => &mut er,
                    (false, '+') => &mut wa,
                    (false, _) => &mut wr,
                };
                bucket.push(text.clone());
                let index = d.rule.as_ref().and_then(|r| r.first()).map(|i| *i as u32);
                let path = match &d.spoke {
                    Some(sv) => side.rule_path(sv, index),
                    None => "spec".into(),
                };
                let sev_word = if d.is_error() { "error" } else { "warning" };
                let (rule, what) = if sign == '+' {
                    ("diagnostic-added", "appears in")
                } else {
                    ("diagnostic-removed", "is gone from")
                };
                let sev = if sign == '+' && d.is_error() { Severity::Error } else { Severity::Warning };
                let msg = format!("{sign} {sev_word} {what} {}: {text}", self.to.label);
                self.push(rule, sev, msg, side.location(path));
            }
        }
        sj["errorsAdded"] = json!(ea);
        sj["errorsRemoved"] = json!(er);
        sj["warningsAdded"] = json!(wa);
        sj["warningsRemoved"] = json!(wr);
    }
}

/// Compares two compiled configs of one target. Findings come in a stable order: hub, spokes
/// added/removed, then per spoke (sorted) lossless, coverage, claims, diagnostics.
pub fn compare(from: &Side, to: &Side, target: &Target) -> (Vec<Finding>, Value) {
    let mut d = Delta { from, to, findings: Vec::new(), spokes: Vec::new() };
    let (hub, added, removed) = d.hub_and_spokes();
    let both: BTreeSet<String> = from
        .config
        .spec
        .spokes
        .iter()
        .filter(|s| to.config.spec.spokes.iter().any(|t| t.version == s.version))
        .map(|s| s.version.clone())
        .collect();
    let mut global = json!({});
    d.diagnostics(None, &mut global);
    for v in &both {
        let before = d.findings.len();
        let mut sj = json!({"version": v});
        d.lossless(v, &mut sj);
        d.uncovered(v, true, &mut sj);
        d.uncovered(v, false, &mut sj);
        d.claims(v, &mut sj);
        d.diagnostics(Some(v), &mut sj);
        if d.findings.len() > before {
            strip_empty(&mut sj);
            d.spokes.push(sj);
        }
    }
    strip_empty(&mut global);
    let summary = json!({
        "resourceKind": target_kind_label(target.kind()),
        "resource": target.name(),
        "from": from.label,
        "to": to.label,
        "hasDeltas": !d.findings.is_empty(),
        "deltas": d.findings.len(),
        "hubVersionChange": hub,
        "spokesAdded": added,
        "spokesRemoved": removed,
        "configWide": global,
        "spokes": d.spokes,
    });
    (d.findings, summary)
}

fn strip_empty(v: &mut Value) {
    if let Value::Object(m) = v {
        m.retain(|_, x| {
            !(x.is_null()
                || x.as_array().is_some_and(Vec::is_empty)
                || x.as_object().is_some_and(|o| o.is_empty()))
        });
    }
}

pub fn run(args: &DiffArgs) -> Result<(), CliError> {
    if args.live {
        return crate::diff_live::run(args);
    }
    let [a, b] = args.configs.as_slice() else {
        return Err(CliError::Usage(format!(
            "diff compares exactly two configs (-c OLD -c NEW); got {}",
            args.configs.len()
        )));
    };
    let target = args.target.load()?;
    let (from, to) = (Side::load(a, &target)?, Side::load(b, &target)?);
    let (mut findings, summary) = compare(&from, &to, &target);
    crate::lint::add_lines(&mut findings);
    let mut table = String::new();
    let _ = writeln!(table, "{} conversion diff: {}", target_kind_label(target.kind()), target.name());
    let _ = writeln!(table, "{} → {}\n", from.label, to.label);
    if findings.is_empty() {
        let _ = writeln!(table, "no differences");
    }
    for f in &findings {
        let _ = writeln!(table, "  {}", f.message);
        if let Some(p) = &f.location.path {
            let _ = writeln!(table, "      at {} {p}", file_line(&f.location));
        }
    }
    let summary_line = if findings.is_empty() {
        format!("diff: {} and {} are equivalent", from.label, to.label)
    } else {
        format!("diff: {} difference(s) between {} and {}", findings.len(), from.label, to.label)
    };
    let report = Report { command: "diff".into(), findings, cases: Vec::new(), summary, table, summary_line };
    emit_report(&report, &args.out)
}

/// `file:line` when the line is known, else the file.
pub fn file_line(l: &Location) -> String {
    match (&l.file, l.line) {
        (Some(f), Some(n)) => format!("{f}:{n}"),
        (Some(f), None) => f.clone(),
        _ => String::new(),
    }
}

/// Renders a report in the chosen format (stdout or `--output-file`) and maps it to the exit
/// code: 1 when a finding or case fails.
pub fn emit_report(report: &Report, out: &OutputArgs) -> Result<(), CliError> {
    crate::output::finish(report, out)
}
