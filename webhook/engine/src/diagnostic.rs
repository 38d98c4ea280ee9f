//! Compile diagnostics: every finding names the spoke, the rule (an index path, nested for
//! ForEach/BranchMap), the strategy, the paths involved and what to do about it.

use std::fmt;

use dco_api::rules::Strategy;
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
pub enum Severity {
    Error,
    Warning,
}

#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Diagnostic {
    pub severity: Severity,
    /// The spoke version the finding belongs to (None: config-wide, e.g. the hub).
    pub spoke: Option<String>,
    /// Index path of the rule: `[3]` is rule 3 of the spoke, `[3, 0]` its first nested rule.
    pub rule: Option<Vec<usize>>,
    pub strategy: Option<Strategy>,
    /// Field paths involved (dotted; item-relative inside ForEach).
    pub paths: Vec<String>,
    pub message: String,
}

impl Diagnostic {
    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    /// The rule index path as users read it: `3` or `3.0`.
    pub fn rule_label(&self) -> Option<String> {
        self.rule.as_ref().map(|r| r.iter().map(|i| i.to_string()).collect::<Vec<_>>().join("."))
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut parts = Vec::new();
        if let Some(s) = &self.spoke {
            parts.push(format!("spoke {s}"));
        }
        if let Some(r) = self.rule_label() {
            match self.strategy {
                Some(st) => parts.push(format!("rule {r} ({st})")),
                None => parts.push(format!("rule {r}")),
            }
        } else if let Some(st) = self.strategy {
            parts.push(st.to_string());
        }
        let head = parts.join(", ");
        let paths = self.paths.join(", ");
        match (head.is_empty(), paths.is_empty()) {
            (true, true) => write!(f, "{}", self.message),
            (true, false) => write!(f, "{paths}: {}", self.message),
            (false, true) => write!(f, "{head}: {}", self.message),
            (false, false) => write!(f, "{head} {paths}: {}", self.message),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display_names_spoke_rule_strategy_and_paths() {
        let d = Diagnostic {
            severity: Severity::Error,
            spoke: Some("v1".into()),
            rule: Some(vec![3, 1]),
            strategy: Some(Strategy::FieldRename),
            paths: vec!["spec.size".into()],
            message: "not in the hub schema".into(),
        };
        assert_eq!(d.to_string(), "spoke v1, rule 3.1 (FieldRename) spec.size: not in the hub schema");
        let bare = Diagnostic { spoke: None, rule: None, strategy: None, paths: vec![], ..d };
        assert_eq!(bare.to_string(), "not in the hub schema");
    }
}
