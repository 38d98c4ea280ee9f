//! `-o junit`: JUnit XML as CI test reports read it (Jenkins, GitLab, GitHub test reporters).
//!
//! Each case group (a sample) is a `testsuite`, each case a `testcase` with its `time`. A case
//! with status `error` is an `<error>` (the run could not check it), another failing case a
//! `<failure>`, `skipped` a `<skipped/>`; a case that passes with something to say
//! (`acknowledged-loss`) carries it as `<system-out>`. Findings form one more suite, one
//! testcase per finding, failing ones as `<failure>`; a report with neither gets one passing
//! testcase for the command, so a clean run is not an empty report.

use std::fmt::Write as _;

use super::{Case, Finding, Report};

/// Text for an XML attribute or element: the five entities escaped, and characters XML 1.0
/// forbids dropped.
pub fn xml(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{FFFE}' || c == '\u{FFFF}' => {}
            c => out.push(c),
        }
    }
    out
}

/// Element text: as [`xml`], but line breaks stay readable.
fn text(s: &str) -> String {
    xml(s).replace("&#10;", "\n").replace("&#9;", "\t")
}

struct Suite {
    name: String,
    cases: Vec<String>,
    failures: usize,
    errors: usize,
    skipped: usize,
    seconds: f64,
}

impl Suite {
    fn new(name: String) -> Suite {
        Suite { name, cases: Vec::new(), failures: 0, errors: 0, skipped: 0, seconds: 0.0 }
    }
}

fn secs(s: f64) -> String {
    format!("{:.3}", if s.is_finite() && s > 0.0 { s } else { 0.0 })
}

fn case_xml(c: &Case, suite: &mut Suite) {
    let mut x = format!(
        "    <testcase classname=\"{}\" name=\"{}\" time=\"{}\"",
        xml(&c.group),
        xml(&c.name),
        secs(c.seconds)
    );
    let body = if c.status == "error" {
        suite.errors += 1;
        Some(format!(
            "      <error type=\"error\" message=\"{}\">{}</error>\n",
            xml(&first_line(&c.detail)),
            text(&c.detail)
        ))
    } else if c.fails {
        suite.failures += 1;
        Some(format!(
            "      <failure type=\"{}\" message=\"{}\">{}</failure>\n",
            xml(&c.status),
            xml(&first_line(&format!("{}: {}", c.status, c.detail))),
            text(&c.detail)
        ))
    } else if c.status == "skipped" {
        suite.skipped += 1;
        Some(format!("      <skipped message=\"{}\"/>\n", xml(&c.detail)))
    } else if c.status != "pass" || !c.detail.is_empty() {
        Some(format!("      <system-out>{}: {}</system-out>\n", text(&c.status), text(&c.detail)))
    } else {
        None
    };
    close(&mut x, body);
    suite.seconds += c.seconds.max(0.0);
    suite.cases.push(x);
}

fn finding_xml(f: &Finding, suite: &mut Suite) {
    let place = f.location.label();
    let classname = if place.is_empty() { format!("convctl {}", f.rule) } else { place };
    // The message makes the name unique (several findings share a rule and a place).
    let short: String = first_line(&f.message).chars().take(120).collect();
    let name = format!("{}: {short}", f.rule);
    let mut x =
        format!("    <testcase classname=\"{}\" name=\"{}\" time=\"0.000\"", xml(&classname), xml(&name));
    let mut detail = f.message.clone();
    if let Some(fix) = &f.fix {
        detail.push_str("\nfix: ");
        detail.push_str(fix);
    }
    let body = if f.fails {
        suite.failures += 1;
        format!(
            "      <failure type=\"{}\" message=\"{}\">{}: {}</failure>\n",
            xml(&f.rule),
            xml(&first_line(&f.message)),
            f.severity.word(),
            text(&detail)
        )
    } else {
        format!("      <system-out>{}: {}</system-out>\n", f.severity.word(), text(&detail))
    };
    close(&mut x, Some(body));
    suite.cases.push(x);
}

fn close(x: &mut String, body: Option<String>) {
    match body {
        None => x.push_str("/>\n"),
        Some(b) => {
            x.push_str(">\n");
            x.push_str(&b);
            x.push_str("    </testcase>\n");
        }
    }
}

fn first_line(s: &str) -> String {
    s.lines().next().unwrap_or_default().to_string()
}

pub fn render(report: &Report) -> String {
    let mut suites: Vec<Suite> = Vec::new();
    for c in &report.cases {
        let i = match suites.iter().position(|s| s.name == c.group) {
            Some(i) => i,
            None => {
                suites.push(Suite::new(c.group.clone()));
                suites.len() - 1
            }
        };
        case_xml(c, &mut suites[i]);
    }
    if !report.findings.is_empty() || report.cases.is_empty() {
        let mut s = Suite::new(format!("convctl {}", report.command));
        for f in &report.findings {
            finding_xml(f, &mut s);
        }
        if s.cases.is_empty() {
            let mut x = format!(
                "    <testcase classname=\"convctl\" name=\"{}\" time=\"0.000\"",
                xml(&report.command)
            );
            let out = (!report.summary_line.is_empty())
                .then(|| format!("      <system-out>{}</system-out>\n", text(&report.summary_line)));
            close(&mut x, out);
            s.cases.push(x);
        }
        suites.push(s);
    }
    let total = |f: fn(&Suite) -> usize| suites.iter().map(f).sum::<usize>();
    let seconds: f64 = suites.iter().map(|s| s.seconds).sum();
    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(
        out,
        "<testsuites name=\"convctl {}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\">",
        xml(&report.command),
        total(|s| s.cases.len()),
        total(|s| s.failures),
        total(|s| s.errors),
        total(|s| s.skipped),
        secs(seconds)
    );
    for s in &suites {
        let _ = writeln!(
            out,
            "  <testsuite name=\"{}\" tests=\"{}\" failures=\"{}\" errors=\"{}\" skipped=\"{}\" time=\"{}\">",
            xml(&s.name),
            s.cases.len(),
            s.failures,
            s.errors,
            s.skipped,
            secs(s.seconds)
        );
        for c in &s.cases {
            out.push_str(c);
        }
        out.push_str("  </testsuite>\n");
    }
    out.push_str("</testsuites>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_entities_and_drops_forbidden_characters() {
        assert_eq!(xml("a<b & \"c\"\u{1}'\n"), "a&lt;b &amp; &quot;c&quot;&apos;&#10;");
    }
}
