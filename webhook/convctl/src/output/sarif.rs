//! `-o sarif`: SARIF 2.1.0, as code scanning (GitHub, GitLab, Azure DevOps) reads it. One run;
//! the driver's rules are the rule ids the findings use; each finding is a result located by
//! file (line and column when known) and by the object and path inside it as logical
//! locations. Failing cases are results as well (rule `<command>-<status>`).

use serde_json::{Value, json};

use super::{Location, Report, Severity};

pub const SARIF_SCHEMA: &str = "https://json.schemastore.org/sarif-2.1.0.json";

/// Where the tool is documented: the package's repository when the build names one (the
/// property is optional in SARIF, and left out rather than pointing anywhere made up).
fn information_uri() -> Option<&'static str> {
    option_env!("CARGO_PKG_REPOSITORY").filter(|r| !r.is_empty())
}

/// What a rule id means, for the driver's rule list.
fn describe(rule: &str) -> String {
    match rule {
        "compile-error" => "The config does not compile against the target's schemas".into(),
        "compile-warning" => "The config compiles with a warning".into(),
        "lossy-rule" => "A rule loses data in a direction".into(),
        "uncovered-field" => "A field no rule maps and the other version has no identical field for".into(),
        "target-mismatch" => "The config names another target than the definition given".into(),
        other => format!("convctl finding {other}"),
    }
}

fn level(s: Severity) -> &'static str {
    match s {
        Severity::Error => "error",
        Severity::Warning => "warning",
        Severity::Note => "note",
    }
}

/// A relative or absolute path as a URI reference: absolute ones as `file://`, characters
/// outside RFC 3986's unreserved set and `/` percent-encoded.
pub fn uri(path: &str) -> String {
    let path = path.replace('\\', "/");
    let mut out = String::new();
    for b in path.bytes() {
        match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'~' | b'/' => out.push(b as char),
            _ => out.push_str(&format!("%{b:02X}")),
        }
    }
    if path.starts_with('/') { format!("file://{out}") } else { out }
}

fn location(l: &Location, fallback_name: Option<(&str, &str)>) -> Option<Value> {
    let mut loc = serde_json::Map::new();
    if let Some(file) = &l.file {
        let mut physical = json!({"artifactLocation": {"uri": uri(file)}});
        if let Some(line) = l.line.filter(|n| *n > 0) {
            let mut region = json!({"startLine": line});
            if let Some(col) = l.column.filter(|n| *n > 0) {
                region["startColumn"] = json!(col);
            }
            physical["region"] = region;
        }
        loc.insert("physicalLocation".into(), physical);
    }
    let mut logical = Vec::new();
    // The cluster (kubeconfig context) of a live run: the outermost logical location.
    if let Some(context) = &l.context {
        logical.push(
            json!({"name": context, "fullyQualifiedName": format!("context/{context}"), "kind": "module"}),
        );
    }
    if let Some(object) = &l.object {
        logical.push(json!({"name": object, "fullyQualifiedName": object, "kind": "resource"}));
    }
    if let Some(path) = &l.path {
        let fqn = match &l.object {
            Some(o) => format!("{o}/{path}"),
            None => path.clone(),
        };
        logical.push(json!({"name": path, "fullyQualifiedName": fqn, "kind": "member"}));
    }
    if let Some((group, name)) = fallback_name {
        logical
            .push(json!({"name": name, "fullyQualifiedName": format!("{group}/{name}"), "kind": "member"}));
    }
    if !logical.is_empty() {
        loc.insert("logicalLocations".into(), Value::Array(logical));
    }
    (!loc.is_empty()).then_some(Value::Object(loc))
}

pub fn render(report: &Report) -> String {
    let mut rules: Vec<(String, Severity)> = Vec::new();
    let mut rule_index = |id: &str, sev: Severity| -> usize {
        match rules.iter().position(|(r, _)| r == id) {
            Some(i) => i,
            None => {
                rules.push((id.to_string(), sev));
                rules.len() - 1
            }
        }
    };
    let mut results = Vec::new();
    for f in &report.findings {
        let index = rule_index(&f.rule, f.severity);
        let mut text = f.message.clone();
        if let Some(fix) = &f.fix {
            text.push_str(" Fix: ");
            text.push_str(fix);
        }
        let mut r = json!({
            "ruleId": f.rule,
            "ruleIndex": index,
            "level": level(f.severity),
            "message": {"text": text},
        });
        if let Some(loc) = location(&f.location, None) {
            r["locations"] = json!([loc]);
        }
        if let Some(context) = &f.location.context {
            r["properties"] = json!({"context": context});
        }
        results.push(r);
    }
    for c in report.cases.iter().filter(|c| c.fails) {
        let id = format!("{}-{}", report.command, c.status);
        let index = rule_index(&id, Severity::Error);
        let text = if c.detail.is_empty() {
            format!("{}: {}", c.name, c.status)
        } else {
            format!("{}: {}", c.name, c.detail)
        };
        let mut r = json!({"ruleId": id, "ruleIndex": index, "level": "error", "message": {"text": text}});
        // A live run's case is an object of a cluster, not a file.
        let l = match c.data.get("context").and_then(Value::as_str) {
            Some(context) => Location {
                context: Some(context.to_string()),
                object: c.data.get("object").and_then(Value::as_str).map(str::to_string),
                ..Location::default()
            },
            None => {
                let (file, _) = c.group.split_once('#').unwrap_or((&c.group, ""));
                Location { file: Some(file.to_string()), ..Location::default() }
            }
        };
        if let Some(loc) = location(&l, Some((&c.group, &c.name))) {
            r["locations"] = json!([loc]);
        }
        results.push(r);
    }
    let rules: Vec<Value> = rules
        .iter()
        .map(|(id, sev)| {
            json!({
                "id": id,
                "shortDescription": {"text": describe(id)},
                "defaultConfiguration": {"level": level(*sev)},
            })
        })
        .collect();
    let mut driver = json!({"name": "convctl", "version": env!("CARGO_PKG_VERSION"), "rules": rules});
    if let Some(uri) = information_uri() {
        driver["informationUri"] = json!(uri);
    }
    let doc = json!({
        "$schema": SARIF_SCHEMA,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": driver},
            "invocations": [{"executionSuccessful": true, "commandLine": format!("convctl {}", report.command)}],
            "columnKind": "unicodeCodePoints",
            "results": results,
        }],
    });
    serde_json::to_string_pretty(&doc).unwrap_or_default() + "\n"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_become_uri_references() {
        assert_eq!(uri("docs/examples/a b.yaml"), "docs/examples/a%20b.yaml");
        assert_eq!(uri("/tmp/x#1.yaml"), "file:///tmp/x%231.yaml");
        assert_eq!(uri("dir\\c.yaml"), "dir/c.yaml");
    }
}
