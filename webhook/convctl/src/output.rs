//! One report model for every command, and its renderings: `table`, `json`, `junit`, `github`
//! (workflow annotations), `sarif` (2.1.0) and `markdown`.
//!
//! A command builds a [`Report`] (findings, and for `test` the round trips as cases) and hands it
//! to [`write`], which renders it in the chosen [`Format`] to stdout or `--output-file`. The
//! shapes are documented in docs/convctl.md ("Output formats").

mod github;
mod junit;
mod markdown;
mod sarif;

use std::io::{IsTerminal, Write as _};
use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::{Value, json};

use crate::CliError;

/// The version of the JSON output's shape; bumped on any incompatible change (docs/convctl.md).
pub const JSON_SCHEMA_VERSION: &str = "convctl.dco.rs/v1";

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Format {
    Table,
    Json,
    Junit,
    Github,
    Sarif,
    Markdown,
}

/// The output flags every reporting command takes.
#[derive(Args, Clone, Debug)]
pub struct OutputArgs {
    /// Output format.
    #[arg(short, long, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Write the report to this file; a one-line summary still goes to stdout.
    #[arg(long, value_name = "FILE")]
    pub output_file: Option<PathBuf>,
    /// Only failing findings and cases in the report (the summary still counts all).
    #[arg(long)]
    pub only_failures: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    Note,
    Warning,
    Error,
}

/// Where a finding is: as much of it as is known.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Location {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub file: Option<String>,
    /// 1-based YAML document index within the file.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub document: Option<usize>,
    /// 1-based line and column.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub column: Option<usize>,
    /// The object (`Kind namespace/name`) or config the finding is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub object: Option<String>,
    /// A field path inside the object or config (`spec.spokes[0].rules[3].when`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// The kubeconfig context, for live runs.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub context: Option<String>,
}

/// One thing a command found.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Finding {
    /// A stable identifier of the kind of finding (`unknown-key`, `loss`, `uncovered-field`…),
    /// the SARIF rule id.
    pub rule: String,
    pub severity: Severity,
    pub message: String,
    /// What to do about it, when there is something to say.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
    pub location: Location,
    /// Whether it fails the run under the flags given (`--fail-on`, `--strict`).
    pub fails: bool,
}

/// One test case (a round trip of `test`): JUnit's testcase.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Case {
    /// The sample (file#document or object).
    pub group: String,
    /// The case within it (`v3 → v2 → v3`).
    pub name: String,
    /// `pass`, `acknowledged-loss`, `loss`, `error`, `skipped`…
    pub status: String,
    pub fails: bool,
    #[serde(skip_serializing_if = "String::is_empty")]
    pub detail: String,
    pub seconds: f64,
    /// Command-specific data kept in the JSON output (per-field diffs…).
    #[serde(skip_serializing_if = "Value::is_null")]
    pub data: Value,
}

/// What a command reports.
#[derive(Clone, Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// The command (`test`, `validate`, `lint`…).
    pub command: String,
    pub findings: Vec<Finding>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub cases: Vec<Case>,
    /// Counts and command-specific totals (`{"total": 8, "pass": 7, …}`).
    pub summary: Value,
    /// The human table for `-o table`, built by the command (its columns are its own).
    #[serde(skip)]
    pub table: String,
    /// One line for stdout when the report goes to a file, and for the end of a table.
    #[serde(skip)]
    pub summary_line: String,
}

impl Report {
    pub fn failed(&self) -> bool {
        self.findings.iter().any(|f| f.fails) || self.cases.iter().any(|c| c.fails)
    }
}

impl Severity {
    pub fn word(self) -> &'static str {
        match self {
            Severity::Note => "note",
            Severity::Warning => "warning",
            Severity::Error => "error",
        }
    }
}

impl Location {
    /// `context: file:line:column (object path)`, as much of it as is known; empty when
    /// nothing is.
    pub fn label(&self) -> String {
        let place = self.place();
        match (&self.context, place.is_empty()) {
            (Some(c), true) => c.clone(),
            (Some(c), false) => format!("{c}: {place}"),
            (None, _) => place,
        }
    }

    /// [`Location::label`] without the context.
    fn place(&self) -> String {
        let mut place = self.file.clone().unwrap_or_default();
        if let Some(d) = self.document.filter(|_| self.line.is_none()) {
            place.push_str(&format!("#{d}"));
        }
        if let Some(l) = self.line {
            place.push_str(&format!(":{l}"));
            if let Some(c) = self.column {
                place.push_str(&format!(":{c}"));
            }
        }
        let inner: Vec<&str> = [self.object.as_deref(), self.path.as_deref()].into_iter().flatten().collect();
        match (place.is_empty(), inner.is_empty()) {
            (_, true) => place,
            (true, false) => inner.join(" "),
            (false, false) => format!("{place} ({})", inner.join(" ")),
        }
    }
}

impl OutputArgs {
    /// The width tables are fitted to: the terminal's, or `None` (full width) when the report
    /// goes to a file or stdout is not a terminal (CI logs keep every character).
    pub fn table_width(&self) -> Option<usize> {
        if self.output_file.is_some() || self.output != Format::Table {
            return None;
        }
        terminal_width()
    }
}

/// The terminal's width in columns when stdout is a terminal.
pub fn terminal_width() -> Option<usize> {
    if !std::io::stdout().is_terminal() {
        return None;
    }
    terminal_size::terminal_size().map(|(w, _)| usize::from(w.0)).filter(|w| *w > 0)
}

/// Renders `report` as `args` ask, to `--output-file` (then one summary line to stdout) or to
/// stdout. Only writing can fail here: whether the findings fail the run is the caller's to
/// say (see [`finish`]). A closed stdout (`convctl … | head`) is not an error.
pub fn write(report: &Report, args: &OutputArgs) -> Result<(), CliError> {
    let filtered;
    let shown = if args.only_failures {
        filtered = report.only_failures();
        &filtered
    } else {
        report
    };
    let text = render(shown, args.output);
    match &args.output_file {
        Some(path) => {
            std::fs::write(path, text.as_bytes()).map_err(|e| {
                CliError::Usage(format!(
                    "--output-file {}: cannot write the report: {e}; give a writable path",
                    path.display()
                ))
            })?;
            let line = if report.summary_line.is_empty() {
                format!("convctl {}: report written to {}", report.command, path.display())
            } else {
                format!("{} (report written to {})", report.summary_line, path.display())
            };
            emit(&(line + "\n"));
        }
        None => emit(&text),
    }
    Ok(())
}

/// [`write`], then exit 1 (with nothing more to say) when a finding or case fails the run.
pub fn finish(report: &Report, args: &OutputArgs) -> Result<(), CliError> {
    write(report, args)?;
    if report.failed() { Err(CliError::Failed(String::new())) } else { Ok(()) }
}

/// Writes to stdout, ignoring errors: a closed pipe must not panic or change the exit code.
fn emit(text: &str) {
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes()).and_then(|()| out.flush());
}

/// The report in `format`, as text.
pub fn render(report: &Report, format: Format) -> String {
    match format {
        Format::Table => table(report),
        Format::Json => to_json(report),
        Format::Junit => junit::render(report),
        Format::Github => github::render(report),
        Format::Sarif => sarif::render(report),
        Format::Markdown => markdown::render(report),
    }
}

impl Report {
    /// A report with nothing in it yet.
    pub fn new(command: &str) -> Report {
        Report {
            command: command.to_string(),
            findings: Vec::new(),
            cases: Vec::new(),
            summary: Value::Null,
            table: String::new(),
            summary_line: String::new(),
        }
    }

    /// The same report with only what fails (the summary still counts everything).
    pub fn only_failures(&self) -> Report {
        Report {
            findings: self.findings.iter().filter(|f| f.fails).cloned().collect(),
            cases: self.cases.iter().filter(|c| c.fails).cloned().collect(),
            ..self.clone()
        }
    }

    /// Counts for the summary: findings by severity and failing, cases by status and failing.
    pub fn counts(&self) -> Value {
        let sev = |s: Severity| self.findings.iter().filter(|f| f.severity == s).count();
        let mut by_status = serde_json::Map::new();
        for c in &self.cases {
            let n = by_status.get(&c.status).and_then(Value::as_u64).unwrap_or(0);
            by_status.insert(c.status.clone(), json!(n + 1));
        }
        json!({
            "errors": sev(Severity::Error),
            "warnings": sev(Severity::Warning),
            "notes": sev(Severity::Note),
            "failingFindings": self.findings.iter().filter(|f| f.fails).count(),
            "cases": self.cases.len(),
            "casesByStatus": by_status,
            "failingCases": self.cases.iter().filter(|c| c.fails).count(),
        })
    }
}

/// `-o table`: the command's own table, then its summary line.
fn table(report: &Report) -> String {
    let mut out = report.table.clone();
    if !out.is_empty() && !out.ends_with('\n') {
        out.push('\n');
    }
    if !report.summary_line.is_empty() {
        out.push_str(&report.summary_line);
        out.push('\n');
    }
    out
}

/// `-o json`: the versioned shape (docs/convctl.md, "Output formats"). `cases` is always
/// there, empty for commands without cases, so consumers need no special case.
fn to_json(report: &Report) -> String {
    let doc = json!({
        "apiVersion": JSON_SCHEMA_VERSION,
        "command": report.command,
        "failed": report.failed(),
        "findings": report.findings,
        "cases": report.cases,
        "summary": report.summary,
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

/// The narrowest a truncated column gets (its header may be wider).
const MIN_COLUMN: usize = 6;

/// A left-aligned text table, columns two spaces apart, trailing spaces trimmed. With a
/// `width`, the widest columns are cut (their cells end in `…`) until a line fits, as far as
/// [`MIN_COLUMN`] allows; `None` keeps every character (a file, a pipe, a CI log).
pub fn fit_table(headers: &[&str], rows: &[Vec<String>], width: Option<usize>) -> String {
    let n = headers.len();
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    if let Some(limit) = width {
        shrink(&mut widths, limit);
    }
    let mut out = String::new();
    let mut line = |cells: &mut dyn Iterator<Item = &str>| {
        let mut s = String::new();
        for (i, (cell, w)) in cells.zip(&widths).enumerate() {
            let cell = cut(cell, *w);
            if i + 1 == n {
                s.push_str(&cell);
            } else {
                let pad = w.saturating_sub(cell.chars().count());
                s.push_str(&cell);
                s.push_str(&" ".repeat(pad + 2));
            }
        }
        out.push_str(s.trim_end());
        out.push('\n');
    };
    line(&mut headers.iter().copied());
    for row in rows {
        line(&mut row.iter().map(String::as_str));
    }
    out
}

/// Narrows the widest column, one column at a time, until the line fits `limit`.
fn shrink(widths: &mut [usize], limit: usize) {
    let gaps = 2 * widths.len().saturating_sub(1);
    loop {
        let total: usize = widths.iter().sum::<usize>() + gaps;
        if total <= limit {
            return;
        }
        let Some((i, &w)) = widths
            .iter()
            .enumerate()
            .filter(|(_, w)| **w > MIN_COLUMN)
            .max_by_key(|(i, w)| (**w, usize::MAX - i))
        else {
            return;
        };
        // Down to the next widest column (so wide columns share the cut), or just enough.
        let next = widths.iter().filter(|x| **x < w).max().copied().unwrap_or(0).max(MIN_COLUMN);
        widths[i] = next.max(w.saturating_sub(total - limit)).min(w - 1);
    }
}

/// `cell` cut to `width` characters, ending in `…` when it was longer.
fn cut(cell: &str, width: usize) -> String {
    if cell.chars().count() <= width {
        return cell.to_string();
    }
    let mut s: String = cell.chars().take(width.saturating_sub(1)).collect();
    s.push('…');
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rows() -> Vec<Vec<String>> {
        vec![
            vec!["a.yaml#1".into(), "pass".into(), String::new()],
            vec![
                "b.yaml#2".into(),
                "loss".into(),
                "spec.diskSize: \"050Gi\" → \"50Gi\" [UNACKNOWLEDGED]".into(),
            ],
        ]
    }

    #[test]
    fn full_width_keeps_every_character() {
        let t = fit_table(&["SAMPLE", "RESULT", "DETAIL"], &rows(), None);
        assert_eq!(
            t,
            "SAMPLE    RESULT  DETAIL\na.yaml#1  pass\nb.yaml#2  loss    spec.diskSize: \"050Gi\" → \"50Gi\" [UNACKNOWLEDGED]\n"
        );
    }

    #[test]
    fn a_narrow_terminal_cuts_the_widest_column() {
        let t = fit_table(&["SAMPLE", "RESULT", "DETAIL"], &rows(), Some(40));
        for l in t.lines() {
            assert!(l.chars().count() <= 40, "{l:?} is wider than 40");
        }
        assert!(t.ends_with("b.yaml#2  loss    spec.diskSize: \"050Gi…\n"), "{t}");
        // Too narrow for anything: columns stop at the minimum rather than vanish.
        let t = fit_table(&["SAMPLE", "RESULT", "DETAIL"], &rows(), Some(5));
        assert!(t.lines().nth(2).unwrap().starts_with("b.yam…  loss    spec.…"), "{t}");
    }

    fn finding(rule: &str, fails: bool) -> Finding {
        Finding {
            rule: rule.into(),
            severity: if fails { Severity::Error } else { Severity::Warning },
            message: format!("{rule} happened"),
            fix: None,
            location: Location { file: Some("c.yaml".into()), ..Location::default() },
            fails,
        }
    }

    #[test]
    fn only_failures_keeps_the_summary_and_the_failing() {
        let mut r = Report::new("validate");
        r.findings = vec![finding("compile-error", true), finding("compile-warning", false)];
        r.summary = r.counts();
        let f = r.only_failures();
        assert_eq!(f.findings.len(), 1);
        assert_eq!(f.findings[0].rule, "compile-error");
        assert_eq!(f.summary["warnings"], 1);
        let v: Value = serde_json::from_str(&to_json(&f)).unwrap();
        assert_eq!(v["apiVersion"], JSON_SCHEMA_VERSION);
        assert_eq!(v["failed"], true);
        assert_eq!(v["cases"], json!([]));
    }

    #[test]
    fn location_label_says_what_is_known() {
        let l = Location {
            file: Some("c.yaml".into()),
            line: Some(3),
            column: Some(5),
            object: Some("cfg".into()),
            path: Some("spec.spokes[0]".into()),
            ..Location::default()
        };
        assert_eq!(l.label(), "c.yaml:3:5 (cfg spec.spokes[0])");
        assert_eq!(
            Location { document: Some(2), file: Some("s.yaml".into()), ..Location::default() }.label(),
            "s.yaml#2"
        );
        assert_eq!(Location::default().label(), "");
        let live = Location { context: Some("east".into()), object: Some("Widget ns/a".into()), ..l.clone() };
        assert_eq!(live.label(), "east: c.yaml:3:5 (Widget ns/a spec.spokes[0])");
        assert_eq!(Location { context: Some("east".into()), ..Location::default() }.label(), "east");
    }
}
