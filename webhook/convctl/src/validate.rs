//! `convctl validate`: compile the config against the target's schemas and report every
//! diagnostic as a finding (rule ids `compile-error`, `compile-warning`, `lossy-rule`,
//! `uncovered-field`, `target-mismatch`), in any output format.

use std::fmt::Write as _;
use std::path::Path;

use dco_engine::Diagnostic;
use serde_json::{Value, json};

use crate::load::Doc;
use crate::locate::FieldPath;

use crate::output::{Finding, Location, OutputArgs, Report, Severity};
use crate::{CliError, Loaded};

/// The finding's rule id for an engine diagnostic. The engine has no kinds, so this reads its
/// shape: a lossy rule's message, and the leftover scan's (no strategy, one field path).
pub fn rule_id(d: &Diagnostic) -> &'static str {
    let leftover = d.strategy.is_none()
        && d.paths.len() == 1
        && (d.message.starts_with("hub field ") || d.message.starts_with("spoke field "));
    if d.message.starts_with("rule is lossy") {
        "lossy-rule"
    } else if leftover {
        "uncovered-field"
    } else if d.is_error() {
        "compile-error"
    } else {
        "compile-warning"
    }
}

/// `spec.spokes[i].rules[j]` for the diagnostic's spoke and top-level rule, as far as known.
fn config_path(l: &Loaded, d: &Diagnostic) -> Option<String> {
    let spoke = d.spoke.as_deref()?;
    let Some(i) = l.config.spec.spokes.iter().position(|s| s.version == spoke) else {
        // A served version with no spoke: the finding is about the spoke list.
        return Some("spec.spokes".into());
    };
    let mut path = format!("spec.spokes[{i}]");
    if let Some(rule) = d.rule.as_ref().and_then(|r| r.first()) {
        let _ = write!(path, ".rules[{rule}]");
    }
    Some(path)
}

/// The config's document in its file, with where its fields are (for a line on each finding).
pub fn config_doc(config_file: &Path) -> Option<Doc> {
    let source = crate::load::read(config_file).ok()?;
    source.docs.into_iter().find(|d| {
        matches!(
            d.value.get("kind").and_then(Value::as_str),
            Some("XRDConversionConfig" | "CRDConversionConfig")
        )
    })
}

/// A finding's location in the config: file, document, the line and column of `path` (or of
/// its nearest ancestor in the file), the config's name and the path.
pub fn config_location(l: &Loaded, config_file: &Path, doc: Option<&Doc>, path: Option<String>) -> Location {
    let pos = doc.zip(path.as_deref()).and_then(|(d, p)| d.marks.find(&FieldPath::parse(p)));
    Location {
        file: Some(config_file.display().to_string()),
        document: doc.map(|d| d.index),
        line: pos.map(|p| p.line),
        column: pos.map(|p| p.column),
        object: Some(l.config.name.clone()),
        path,
        ..Location::default()
    }
}

/// The compile's diagnostics (and the target mismatch) as findings; errors fail the run.
pub fn findings(l: &Loaded, config_file: &Path) -> Vec<Finding> {
    let doc = config_doc(config_file);
    let at = |path: Option<String>| config_location(l, config_file, doc.as_ref(), path);
    let mut out: Vec<Finding> = l
        .extra_errors()
        .into_iter()
        .map(|message| Finding {
            rule: "target-mismatch".into(),
            severity: Severity::Error,
            message,
            fix: None,
            location: at(Some(format!("spec.{}.name", target_ref(l)))),
            fails: true,
        })
        .collect();
    out.extend(l.compiled.report.diagnostics.iter().map(|d| Finding {
        rule: rule_id(d).into(),
        severity: if d.is_error() { Severity::Error } else { Severity::Warning },
        message: d.to_string(),
        fix: None,
        location: at(config_path(l, d)),
        fails: d.is_error(),
    }));
    out
}

fn target_ref(l: &Loaded) -> &'static str {
    match l.config.kind {
        dco_api::config::TargetKind::Xrd => "targetXRD",
        dco_api::config::TargetKind::Crd => "targetCRD",
    }
}

/// The report of `validate`: one line per diagnostic, then `ok: …` or why it does not compile.
pub fn report(l: &Loaded, config_file: &Path) -> Report {
    let mut report = Report::new("validate");
    report.findings = findings(l, config_file);
    let errors = report.findings.iter().filter(|f| f.severity == Severity::Error).count();
    let warnings = report.findings.iter().filter(|f| f.severity == Severity::Warning).count();
    for f in &report.findings {
        let _ = writeln!(report.table, "{}: {}", f.severity.word(), f.message);
    }
    let r = &l.compiled.report;
    report.summary_line = if l.ok() {
        format!(
            "ok: {} converts {} between hub {} and {} spoke(s); lossless: {}; {warnings} warning(s)",
            l.config.name,
            l.target.name(),
            l.config.spec.hub_version,
            l.config.spec.spokes.len(),
            if r.overall_lossless { "yes" } else { "no (acknowledged)" }
        )
    } else {
        format!("{} does not compile: {errors} error(s), {warnings} warning(s)", l.config.name)
    };
    let mut summary = report.counts();
    summary["config"] = json!(l.config.name);
    summary["target"] = json!(l.target.name());
    summary["compiles"] = json!(l.ok());
    summary["overallLossless"] = json!(r.overall_lossless);
    report.summary = summary;
    report
}

/// Prints the report; exits 1 when the config does not compile, saying so on stderr as well
/// (a CI log shows why whatever the format).
pub fn run(l: &Loaded, config_file: &Path, args: &OutputArgs) -> Result<(), CliError> {
    let report = report(l, config_file);
    crate::output::write(&report, args)?;
    if l.ok() { Ok(()) } else { Err(CliError::Failed(report.summary_line)) }
}
