//! Split and join of scalar strings for ScalarToFields / FieldsToScalar: a regular expression
//! with named groups splits a scalar into parts, and a `{{.name}}` join template puts the parts
//! back together.
//!
//! Patterns use the `regex` crate, whose syntax is RE2's (as Go's `regexp`): both `(?P<name>…)`
//! and `(?<name>…)` name a group. A pattern is unanchored unless it says `^…$`, as in Go.
//!
//! Templates are the subset of Go `text/template` that these rules need: literal text and
//! `{{.name}}` actions (spaces inside the braces and the `{{-`/`-}}` trim markers allowed).
//! Anything else (`{{if}}`, pipelines, functions) is refused at compile time rather than
//! rendered differently from Go.

use std::collections::{BTreeMap, BTreeSet};

use regex::Regex;
use serde_json::Value;

/// Why a pattern or template cannot be used, or a value cannot be split or joined.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("pattern {pattern:?} does not compile: {message}")]
    Pattern { pattern: String, message: String },
    #[error("pattern {0:?} has no named groups; name each part, e.g. (?P<value>\\d+)")]
    NoNamedGroups(String),
    #[error("join template {template:?}: {message}")]
    Template { template: String, message: String },
    #[error("join template {template:?} uses {{{{.{name}}}}} but the pattern has no group named {name:?}")]
    UnknownPlaceholder { template: String, name: String },
    #[error("{value:?} does not match pattern {pattern:?}")]
    NoMatch { value: String, pattern: String },
    #[error("join needs a value for {{{{.{0}}}}} but it is missing")]
    MissingValue(String),
    #[error(
        "join cannot render {name:?}: {kind} values have no string form; only strings, numbers and booleans join"
    )]
    NotScalar { name: String, kind: &'static str },
}

/// A compiled named-group pattern.
#[derive(Clone, Debug)]
pub struct Pattern {
    regex: Regex,
    groups: BTreeSet<String>,
}

/// Patterns beyond this compiled size are refused (the regex crate's own default is 10 MiB;
/// a conversion pattern needs a tiny fraction of that).
const PATTERN_SIZE_LIMIT: usize = 1 << 20;

impl Pattern {
    pub fn compile(pattern: &str) -> Result<Pattern, TemplateError> {
        let regex = regex::RegexBuilder::new(pattern)
            .size_limit(PATTERN_SIZE_LIMIT)
            .build()
            .map_err(|e| TemplateError::Pattern { pattern: pattern.to_string(), message: e.to_string() })?;
        let groups: BTreeSet<String> = regex.capture_names().flatten().map(str::to_string).collect();
        if groups.is_empty() {
            return Err(TemplateError::NoNamedGroups(pattern.to_string()));
        }
        Ok(Pattern { regex, groups })
    }

    /// Names of the pattern's named groups.
    pub fn groups(&self) -> &BTreeSet<String> {
        &self.groups
    }

    pub fn as_str(&self) -> &str {
        self.regex.as_str()
    }

    /// Splits `value` into its named groups (leftmost-first match, as Go's
    /// `FindStringSubmatch`). A group that did not take part in the match is absent.
    pub fn split(&self, value: &str) -> Result<BTreeMap<String, String>, TemplateError> {
        let caps = self.regex.captures(value).ok_or_else(|| TemplateError::NoMatch {
            value: value.to_string(),
            pattern: self.as_str().to_string(),
        })?;
        Ok(self
            .groups
            .iter()
            .filter_map(|name| caps.name(name).map(|m| (name.clone(), m.as_str().to_string())))
            .collect())
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Text(String),
    Field(String),
}

/// A compiled `{{.name}}` join template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinTemplate {
    source: String,
    pieces: Vec<Piece>,
}

impl JoinTemplate {
    pub fn parse(template: &str) -> Result<JoinTemplate, TemplateError> {
        let err = |message: String| TemplateError::Template { template: template.to_string(), message };
        let mut pieces: Vec<Piece> = Vec::new();
        let mut rest = template;
        let mut trim_next_text = false;
        while !rest.is_empty() {
            let Some(open) = rest.find("{{") else {
                push_text(&mut pieces, rest, trim_next_text);
                break;
            };
            let (text, after) = rest.split_at(open);
            let after = &after[2..];
            let close = after.find("}}").ok_or_else(|| {
                err(format!("unclosed action at byte {}", template.len() - rest.len() + open))
            })?;
            let mut action = &after[..close];
            rest = &after[close + 2..];

            // Go requires a space between a trim marker and the action body.
            let trim_left = action.starts_with("- ") || action == "-";
            if trim_left {
                action = &action[1..];
            }
            let trim_right = action.ends_with(" -");
            if trim_right {
                action = &action[..action.len() - 1];
            }
            let mut text = text.to_string();
            if trim_left {
                text.truncate(text.trim_end().len());
            }
            if trim_next_text {
                text = text.trim_start().to_string();
            }
            push_text(&mut pieces, &text, false);
            trim_next_text = trim_right;

            let body = action.trim();
            let name = body
                .strip_prefix('.')
                .filter(|n| !n.is_empty() && n.chars().all(|c| c.is_alphanumeric() || c == '_'))
                .ok_or_else(|| {
                    err(format!("{{{{{body}}}}} is not supported; only {{{{.name}}}} placeholders are (no functions, pipelines or control actions)"))
                })?;
            pieces.push(Piece::Field(name.to_string()));
        }
        if !pieces.iter().any(|p| matches!(p, Piece::Field(_))) {
            return Err(err(
                "has no {{.name}} placeholder; it would produce the same text for every object".into()
            ));
        }
        Ok(JoinTemplate { source: template.to_string(), pieces })
    }

    pub fn as_str(&self) -> &str {
        &self.source
    }

    /// Placeholder names, in order of first use.
    pub fn placeholders(&self) -> Vec<&str> {
        let mut seen = BTreeSet::new();
        self.pieces
            .iter()
            .filter_map(|p| match p {
                Piece::Field(n) if seen.insert(n.as_str()) => Some(n.as_str()),
                _ => None,
            })
            .collect()
    }

    /// Checks that every placeholder names a group of `pattern`; returns the groups the
    /// template never uses (their values would be lost on a join).
    pub fn check_against(&self, pattern: &Pattern) -> Result<Vec<String>, TemplateError> {
        for name in self.placeholders() {
            if !pattern.groups().contains(name) {
                return Err(TemplateError::UnknownPlaceholder {
                    template: self.source.clone(),
                    name: name.to_string(),
                });
            }
        }
        let used: BTreeSet<&str> = self.placeholders().into_iter().collect();
        Ok(pattern.groups().iter().filter(|g| !used.contains(g.as_str())).cloned().collect())
    }

    /// Renders the template; `lookup` gives each placeholder's value.
    pub fn render<'v>(&self, lookup: impl Fn(&str) -> Option<&'v Value>) -> Result<String, TemplateError> {
        let mut out = String::new();
        for piece in &self.pieces {
            match piece {
                Piece::Text(t) => out.push_str(t),
                Piece::Field(name) => {
                    let value = lookup(name).ok_or_else(|| TemplateError::MissingValue(name.clone()))?;
                    out.push_str(&scalar_text(name, value)?);
                }
            }
        }
        Ok(out)
    }
}

fn push_text(pieces: &mut Vec<Piece>, text: &str, trim_start: bool) {
    let text = if trim_start { text.trim_start() } else { text };
    if !text.is_empty() {
        pieces.push(Piece::Text(text.to_string()));
    }
}

/// The text of a scalar as a join writes it: strings as they are, numbers in their shortest
/// exact form, booleans as `true`/`false`.
pub fn scalar_text(name: &str, value: &Value) -> Result<String, TemplateError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        Value::Null => Err(TemplateError::NotScalar { name: name.to_string(), kind: "null" }),
        Value::Array(_) => Err(TemplateError::NotScalar { name: name.to_string(), kind: "array" }),
        Value::Object(_) => Err(TemplateError::NotScalar { name: name.to_string(), kind: "object" }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn splits_with_go_named_groups() {
        let p = Pattern::compile(r"^(?P<value>\d+)(?P<unit>[A-Za-z]+)$").unwrap();
        assert_eq!(p.groups().iter().map(String::as_str).collect::<Vec<_>>(), ["unit", "value"]);
        let parts = p.split("50Gi").unwrap();
        assert_eq!(parts["value"], "50");
        assert_eq!(parts["unit"], "Gi");
        assert!(matches!(p.split("Gi50"), Err(TemplateError::NoMatch { .. })));
        // The other named-group syntax works too.
        let p2 = Pattern::compile(r"(?<a>x)").unwrap();
        assert_eq!(p2.split("yxz").unwrap()["a"], "x");
    }

    #[test]
    fn unmatched_optional_group_is_absent() {
        let p = Pattern::compile(r"^(?P<name>[a-z]+)(:(?P<tag>[a-z0-9]+))?$").unwrap();
        let parts = p.split("nginx").unwrap();
        assert_eq!(parts.get("name").map(String::as_str), Some("nginx"));
        assert!(!parts.contains_key("tag"));
    }

    #[test]
    fn pattern_errors() {
        assert!(matches!(Pattern::compile("(unclosed"), Err(TemplateError::Pattern { .. })));
        assert!(matches!(Pattern::compile(r"^(\d+)$"), Err(TemplateError::NoNamedGroups(_))));
        // Backreferences are not RE2 and are refused, as Go would.
        assert!(Pattern::compile(r"(?P<a>x)\1").is_err());
    }

    #[test]
    fn renders_templates() {
        let t = JoinTemplate::parse("{{.value}}{{.unit}}").unwrap();
        let vals = json!({"value": 50, "unit": "Gi"});
        assert_eq!(t.render(|n| vals.get(n)).unwrap(), "50Gi");
        let t = JoinTemplate::parse("{{ .name }} <{{.email}}>").unwrap();
        let vals = json!({"name": "Jane Doe", "email": "jane@example.com"});
        assert_eq!(t.render(|n| vals.get(n)).unwrap(), "Jane Doe <jane@example.com>");
        assert_eq!(t.placeholders(), ["name", "email"]);
        let vals = json!({"name": true, "email": 1.5});
        assert_eq!(t.render(|n| vals.get(n)).unwrap(), "true <1.5>");
    }

    #[test]
    fn trim_markers_follow_go() {
        let t = JoinTemplate::parse("a  {{- .x -}}  b").unwrap();
        let vals = json!({"x": "X"});
        assert_eq!(t.render(|n| vals.get(n)).unwrap(), "aXb");
        // Without the space, "-3" would be a number in Go; here it is simply unsupported.
        assert!(JoinTemplate::parse("{{-3}}").is_err());
    }

    #[test]
    fn template_errors() {
        for bad in
            ["{{.a", "{{if .a}}x{{end}}", "{{.a | printf}}", "{{a}}", "{{.}}", "{{.a.b}}", "plain text"]
        {
            assert!(JoinTemplate::parse(bad).is_err(), "{bad:?} parsed");
        }
        let t = JoinTemplate::parse("{{.a}}-{{.b}}").unwrap();
        let vals = json!({"a": "x"});
        assert_eq!(t.render(|n| vals.get(n)), Err(TemplateError::MissingValue("b".into())));
        let vals = json!({"a": "x", "b": {"c": 1}});
        assert!(matches!(t.render(|n| vals.get(n)), Err(TemplateError::NotScalar { kind: "object", .. })));
        let vals = json!({"a": "x", "b": null});
        assert!(matches!(t.render(|n| vals.get(n)), Err(TemplateError::NotScalar { kind: "null", .. })));
    }

    #[test]
    fn template_checked_against_pattern() {
        let p = Pattern::compile(r"^(?P<value>\d+)(?P<unit>[A-Za-z]+)$").unwrap();
        assert_eq!(JoinTemplate::parse("{{.value}}{{.unit}}").unwrap().check_against(&p), Ok(vec![]));
        assert_eq!(
            JoinTemplate::parse("{{.value}}").unwrap().check_against(&p),
            Ok(vec!["unit".to_string()])
        );
        assert!(matches!(
            JoinTemplate::parse("{{.value}}{{.size}}").unwrap().check_against(&p),
            Err(TemplateError::UnknownPlaceholder { name, .. }) if name == "size"
        ));
    }
}
