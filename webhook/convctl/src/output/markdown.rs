//! `-o markdown`: a status line, the summary and a table, sized for a pull-request comment
//! (GitHub cuts comments at 65,536 characters, so rows stop at [`MAX_ROWS`]).

use std::fmt::Write as _;

use super::Report;

/// Rows per table; the rest are counted, not listed.
pub const MAX_ROWS: usize = 200;

/// A table cell: `|` escaped, line breaks as `<br>`, `<`/`>` as entities (no raw HTML).
pub fn cell(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('|', "\\|")
        .replace("\r\n", "<br>")
        .replace(['\n', '\r'], "<br>")
}

fn rest(out: &mut String, total: usize) {
    if total > MAX_ROWS {
        let _ = writeln!(
            out,
            "\n… and {} more (the full report: `-o json` or `--output-file`)",
            total - MAX_ROWS
        );
    }
}

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    let status = if report.failed() { "❌ failed" } else { "✅ passed" };
    let _ = writeln!(out, "### convctl {}: {status}\n", cell(&report.command));
    if !report.summary_line.is_empty() {
        let _ = writeln!(out, "{}\n", cell(&report.summary_line));
    }
    if !report.findings.is_empty() {
        out.push_str("| | Severity | Rule | Where | Message |\n|---|---|---|---|---|\n");
        for f in report.findings.iter().take(MAX_ROWS) {
            let mark = if f.fails { "❌" } else { "" };
            let mut msg = cell(&f.message);
            if let Some(fix) = &f.fix {
                let _ = write!(msg, "<br>**fix:** {}", cell(fix));
            }
            let _ = writeln!(
                out,
                "| {mark} | {} | `{}` | {} | {msg} |",
                f.severity.word(),
                f.rule.replace('`', "'").replace('|', "\\|"),
                cell(&f.location.label()),
            );
        }
        rest(&mut out, report.findings.len());
        out.push('\n');
    }
    if !report.cases.is_empty() {
        out.push_str("| | Sample | Case | Result | Detail |\n|---|---|---|---|---|\n");
        for c in report.cases.iter().take(MAX_ROWS) {
            let mark = if c.fails { "❌" } else { "" };
            let _ = writeln!(
                out,
                "| {mark} | {} | {} | {} | {} |",
                cell(&c.group),
                cell(&c.name),
                cell(&c.status),
                cell(&c.detail)
            );
        }
        rest(&mut out, report.cases.len());
        out.push('\n');
    }
    if report.findings.is_empty() && report.cases.is_empty() {
        out.push_str("Nothing to report.\n");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cells_cannot_break_the_table() {
        assert_eq!(cell("a|b\nc <x>"), "a\\|b<br>c &lt;x&gt;");
    }
}
