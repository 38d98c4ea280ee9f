//! `-o github`: GitHub Actions workflow commands, one annotation per finding and per failing
//! case (`::error file=F,line=L,col=C,title=T::message`), then the summary as a plain line.
//! Escaping follows the runner's: `%`, `\r`, `\n` in the message; those and `:` `,` in a
//! property.

use super::{Report, Severity};

/// A message: `%` first, so the escapes it introduces are not escaped again.
pub fn escape_data(s: &str) -> String {
    s.replace('%', "%25").replace('\r', "%0D").replace('\n', "%0A")
}

/// A property value (`file=`, `title=`).
pub fn escape_property(s: &str) -> String {
    escape_data(s).replace(':', "%3A").replace(',', "%2C")
}

fn command(level: &str, props: &[(&str, String)], message: &str) -> String {
    let props: Vec<String> = props.iter().map(|(k, v)| format!("{k}={}", escape_property(v))).collect();
    let sep = if props.is_empty() { "" } else { " " };
    format!("::{level}{sep}{}::{}\n", props.join(","), escape_data(message))
}

pub fn render(report: &Report) -> String {
    let mut out = String::new();
    for f in &report.findings {
        let level = match f.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Note => "notice",
        };
        let l = &f.location;
        let mut props = Vec::new();
        if let Some(file) = &l.file {
            props.push(("file", file.clone()));
            if let Some(line) = l.line {
                props.push(("line", line.to_string()));
                if let Some(col) = l.column {
                    props.push(("col", col.to_string()));
                }
            }
        }
        let inner: Vec<&str> =
            [l.context.as_deref(), l.object.as_deref(), l.path.as_deref()].into_iter().flatten().collect();
        let title =
            if inner.is_empty() { f.rule.clone() } else { format!("{} ({})", f.rule, inner.join(" ")) };
        props.push(("title", title));
        let mut message = f.message.clone();
        if let Some(fix) = &f.fix {
            message.push_str("\nfix: ");
            message.push_str(fix);
        }
        out.push_str(&command(level, &props, &message));
    }
    for c in report.cases.iter().filter(|c| c.fails) {
        let title = format!("{} {}: {}", c.group, c.name, c.status);
        let message = if c.detail.is_empty() { c.status.clone() } else { c.detail.clone() };
        out.push_str(&command("error", &[("title", title)], &message));
    }
    if !report.summary_line.is_empty() {
        // A plain log line; a line starting with "::" would be read as a command.
        let line = report.summary_line.trim_start_matches(':');
        out.push_str(line);
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_as_the_runner_does() {
        assert_eq!(escape_data("50% a\r\nb: c, d"), "50%25 a%0D%0Ab: c, d");
        assert_eq!(escape_property("dir/a:b,c%\n"), "dir/a%3Ab%2Cc%25%0A");
        assert_eq!(command("error", &[("file", "a,b.yaml".into())], "x"), "::error file=a%2Cb.yaml::x\n");
        assert_eq!(command("notice", &[], "x"), "::notice::x\n");
    }
}
