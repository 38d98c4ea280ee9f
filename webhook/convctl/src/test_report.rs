//! `convctl test`'s report: one case per round trip, findings for rules no sample exercised
//! and for skipped documents, the summary, and the table fitted to the terminal.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde_json::{Value, json};

use crate::output::{Case, Finding, Location, Report, Severity};
use crate::roundtrip::{Ctx, Diff, FailOn, Outcome, TestArgs, Trip, render};
use crate::samples::{Sample, Samples};
use crate::{CliError, Loaded};

/// `v3 (2), v2 (1)`: the versions the samples are at, for messages.
pub fn versions_seen(samples: &[Sample]) -> String {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    for s in samples {
        let v = s.object.as_ref().ok().and_then(crate::load::version_of).unwrap_or("?");
        *seen.entry(v.to_string()).or_default() += 1;
    }
    seen.iter().map(|(v, n)| format!("{v} ({n})")).collect::<Vec<_>>().join(", ")
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

fn case(ctx: &Ctx, t: &Trip, fail_on: FailOn) -> Case {
    let (detail, diffs) = match &t.outcome {
        Outcome::Pass => (String::new(), Value::Null),
        Outcome::Error(e) => (e.clone(), Value::Null),
        Outcome::Loss(d) => (
            d.iter().map(diff_line).collect::<Vec<_>>().join("; "),
            d.iter()
                .map(|d| {
                    json!({"path": render(&d.path), "before": d.before, "after": d.after,
                           "acknowledged": d.acknowledged_by.is_some(), "acknowledgedBy": d.acknowledged_by})
                })
                .collect(),
        ),
    };
    let mut data = json!({"from": t.from, "to": t.to, "file": t.file, "document": t.document,
        "rulesExercised": t.exercised.iter().map(|&i| ctx.rules.0[i].id()).collect::<Vec<_>>()});
    if let Some(l) = t.line {
        data["line"] = json!(l);
    }
    if !diffs.is_null() {
        data["diffs"] = diffs;
    }
    Case {
        group: t.sample.clone(),
        name: t.name(),
        status: t.status().into(),
        fails: t.fails(fail_on),
        detail,
        seconds: t.seconds,
        data,
    }
}

/// Rules no round trip exercised, as findings naming spoke and rule index; rules of spokes a
/// `--version-pair` keeps out are noted, not judged.
fn unexercised(l: &Loaded, config: &str, ctx: &Ctx, trips: &[Trip], fails: bool) -> (Vec<Finding>, usize) {
    let mut used = vec![0usize; ctx.rules.0.len()];
    for t in trips {
        for &i in &t.exercised {
            used[i] += 1;
        }
    }
    let hub = ctx.plan.hub_version();
    let in_scope = |spoke: &str| {
        ctx.pairs.is_empty() || ctx.pairs.iter().any(|(f, t)| f != t && (f == spoke || t == spoke))
    };
    let mut out = Vec::new();
    let mut out_of_scope: BTreeMap<&str, usize> = BTreeMap::new();
    for (r, n) in ctx.rules.0.iter().zip(&used) {
        if *n > 0 {
            continue;
        }
        if !in_scope(&r.spoke) {
            *out_of_scope.entry(&r.spoke).or_default() += 1;
            continue;
        }
        let when = match &r.when {
            Some((p, v)) => format!(" with {} = {v}", p.join(".")),
            None => String::new(),
        };
        out.push(Finding {
            rule: "unexercised-rule".into(),
            severity: Severity::Warning,
            message: format!(
                "spoke {} rule {} ({}) was exercised by no sample: none had {} at {hub} or {} at {}{when}",
                r.spoke,
                r.index,
                r.strategy,
                or_none(r.claims(true)),
                or_none(r.claims(false)),
                r.spoke
            ),
            fix: Some("add a sample that sets a field the rule claims, or remove the rule".into()),
            location: Location {
                file: Some(config.to_string()),
                object: Some(l.config.name.clone()),
                path: Some(format!("spec.spokes[{}].rules[{}]", r.spoke_index, r.index)),
                ..Location::default()
            },
            fails,
        });
    }
    let count = out.len();
    for (spoke, n) in out_of_scope {
        out.push(note(
            "rules-not-in-scope",
            format!("{n} rule(s) of spoke {spoke} not checked for coverage: no --version-pair passes through {spoke}"),
        ));
    }
    (out, count)
}

fn or_none(s: String) -> String {
    if s.is_empty() { "(no claimed field)".into() } else { s }
}

fn note(rule: &str, message: String) -> Finding {
    Finding {
        rule: rule.into(),
        severity: Severity::Note,
        message,
        fix: None,
        location: Location::default(),
        fails: false,
    }
}

/// Builds the report, writes it, and fails the run when a case or finding fails.
pub fn finish(
    l: &Loaded,
    ctx: &Ctx,
    read: &Samples,
    trips: &[Trip],
    args: &TestArgs,
) -> Result<(), CliError> {
    let report = build(l, ctx, read, trips, args);
    crate::output::write(&report, &args.output)?;
    match failure(&report, trips.len(), args) {
        None => Ok(()),
        Some(why) => Err(CliError::Failed(why)),
    }
}

/// Why the report fails the run under `args` (`None`: it passes).
pub fn failure(report: &Report, trips: usize, args: &TestArgs) -> Option<String> {
    let failed = report.cases.iter().filter(|c| c.fails).count();
    let failing_findings = report.findings.iter().filter(|f| f.fails).count();
    if failed + failing_findings == 0 {
        return None;
    }
    let mut why = Vec::new();
    if failed > 0 {
        why.push(format!("{failed} of {trips} round trip(s) failed"));
    }
    let unexercised = report.findings.iter().filter(|f| f.fails && f.rule == "unexercised-rule").count();
    if unexercised > 0 {
        why.push(format!("{unexercised} rule(s) exercised by no sample"));
    }
    let other = failing_findings - unexercised;
    if other > 0 {
        why.push(format!("{other} failing finding(s)"));
    }
    let strict = if args.strict { " --strict" } else { "" };
    Some(format!("{} (--fail-on {}{strict})", why.join(", "), args.fail_on.name()))
}

/// The report of one run: a case per round trip, the coverage and skipped-document findings,
/// the summary and the table.
pub fn build(l: &Loaded, ctx: &Ctx, read: &Samples, trips: &[Trip], args: &TestArgs) -> Report {
    let fail_on = args.fail_on;
    let coverage_fails = fail_on == FailOn::Warn || (args.strict && fail_on != FailOn::None);
    let cases: Vec<Case> = trips.iter().map(|t| case(ctx, t, fail_on)).collect();
    // A sample that could not be tested exercised nothing: reporting the rules it would have
    // exercised as unexercised would report one cause twice.
    let untested = trips.iter().filter(|t| t.to == "-").count();
    let (mut findings, unexercised_count) = if untested == 0 {
        unexercised(l, &args.inputs.config.display().to_string(), ctx, trips, coverage_fails)
    } else {
        let why = format!("rule coverage not judged: {untested} sample(s) could not be tested");
        (vec![note("coverage-not-judged", why)], 0)
    };
    if read.skipped_total() > 0 {
        findings.push(note(
            "skipped-documents",
            format!("skipped {} document(s) of other kinds: {}", read.skipped_total(), read.skipped_text()),
        ));
    }
    let count = |s: &str| trips.iter().filter(|t| t.status() == s).count();
    let failed = cases.iter().filter(|c| c.fails).count();
    let summary = json!({
        "samples": read.samples.len(), "files": read.files, "documents": read.documents,
        "total": trips.len(), "pass": count("pass"), "acknowledgedLoss": count("acknowledged-loss"),
        "loss": count("loss"), "error": count("error"), "failed": failed,
        "rules": ctx.rules.0.len(), "unexercisedRules": unexercised_count, "coverageJudged": untested == 0,
        "skippedDocuments": read.skipped_total(), "skippedKinds": read.skipped,
        "failOn": fail_on.name(), "strict": args.strict,
    });
    let coverage = if untested == 0 {
        format!("{} of {} rule(s) exercised", ctx.rules.0.len() - unexercised_count, ctx.rules.0.len())
    } else {
        "rule coverage not judged".to_string()
    };
    let summary_line = format!(
        "{} round trip(s): {} pass, {} acknowledged loss, {} loss, {} error; {} sample(s), {coverage}, {} document(s) of other kinds skipped",
        trips.len(),
        count("pass"),
        count("acknowledged-loss"),
        count("loss"),
        count("error"),
        read.samples.len(),
        read.skipped_total()
    );
    let mut report =
        Report { command: "test".into(), findings, cases, summary, table: String::new(), summary_line };
    report.table = table_text(&report, args.output.only_failures, args.output.table_width());
    report
}

/// The rows (failing ones only with `only_failures`, as `output::write` filters the cases),
/// fitted to `width`, then the findings.
pub fn table_text(report: &Report, only_failures: bool, width: Option<usize>) -> String {
    let rows: Vec<Vec<String>> = report
        .cases
        .iter()
        .filter(|c| !only_failures || c.fails)
        .map(|c| vec![c.group.clone(), c.name.clone(), c.status.clone(), c.detail.clone()])
        .collect();
    let mut out = crate::output::fit_table(&["SAMPLE", "ROUND TRIP", "RESULT", "DETAIL"], &rows, width);
    let findings: Vec<&Finding> = report.findings.iter().filter(|f| !only_failures || f.fails).collect();
    if !findings.is_empty() {
        out.push('\n');
    }
    for f in findings {
        let sev = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "note",
        };
        let context = f.location.context.as_deref().map(|c| format!("[{c}] ")).unwrap_or_default();
        let _ = writeln!(out, "{}", cut(&format!("{sev}: {context}{}", f.message), width));
    }
    out.push('\n');
    out
}

fn cut(s: &str, width: Option<usize>) -> String {
    match width {
        Some(w) if s.chars().count() > w => {
            let mut t: String = s.chars().take(w.saturating_sub(1)).collect();
            t.push('…');
            t
        }
        _ => s.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(detail: &str) -> Report {
        let mut r = Report::new("test");
        for (status, fails) in [("pass", false), ("loss", true)] {
            r.cases.push(Case {
                group: format!("{status}.yaml"),
                name: "v1 → v2 → v1".into(),
                status: status.into(),
                fails,
                detail: if fails { detail.into() } else { String::new() },
                seconds: 0.0,
                data: Value::Null,
            });
        }
        r
    }

    #[test]
    fn the_detail_is_cut_to_the_terminal_and_kept_whole_without_one() {
        let r = report(&"x".repeat(200));
        let t = table_text(&r, false, Some(60));
        for line in t.lines() {
            assert!(line.chars().count() <= 60, "{line}");
        }
        assert!(t.contains("loss.yaml  v1 → v2 → v1  loss"), "{t}");
        assert!(t.lines().any(|l| l.ends_with('…')), "{t}");
        assert!(table_text(&r, false, None).contains(&"x".repeat(200)));
    }

    #[test]
    fn only_failures_hides_passing_rows() {
        let t = table_text(&report("spec.a"), true, None);
        assert!(!t.contains("pass.yaml"), "{t}");
        assert!(t.contains("loss.yaml"), "{t}");
    }
}
