//! One report model for every command, and its renderings: `table`, `json`, `junit`, `github`
//! (workflow annotations), `sarif` (2.1.0) and `markdown`.
//!
//! A command builds a [`Report`] (findings, and for `test` the round trips as cases) and hands it
//! to [`write`], which renders it in the chosen [`Format`] to stdout or `--output-file`.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use serde::Serialize;
use serde_json::Value;

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
