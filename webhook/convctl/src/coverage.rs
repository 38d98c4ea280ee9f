//! Which declared rules a round trip exercised. The engine does not report which rules fired,
//! so this reads it from the compile report: a rule is exercised when its `when` holds on the
//! object its direction reads and one of the paths it claims on that side is present there
//! (docs/convctl.md, "test").

use serde_json::Value;

use crate::Loaded;

/// One top-level rule of one spoke, as compiled.
#[derive(Debug)]
pub struct Rule {
    pub spoke: String,
    /// Its index in `spec.spokes[spoke_index].rules`.
    pub index: u32,
    pub spoke_index: usize,
    pub strategy: String,
    pub hub: Vec<Vec<String>>,
    pub spoke_side: Vec<Vec<String>>,
    pub when: Option<(Vec<String>, Value)>,
}

impl Rule {
    /// `v2:rule[3]:Duration`, the reference's rule id.
    pub fn id(&self) -> String {
        format!("{}:rule[{}]:{}", self.spoke, self.index, self.strategy)
    }

    /// Whether the rule acts on `input`, the object its direction reads (`hub_side`: the hub
    /// form, going to the spoke; otherwise the spoke form, going to the hub).
    fn acts_on(&self, input: &Value, hub_side: bool) -> bool {
        if let Some((path, equals)) = &self.when
            && get(input, path) != Some(equals)
        {
            return false;
        }
        let claims = if hub_side { &self.hub } else { &self.spoke_side };
        claims.is_empty() || claims.iter().any(|c| present(input, c))
    }

    /// The claimed paths of one side, for messages.
    pub fn claims(&self, hub_side: bool) -> String {
        let claims = if hub_side { &self.hub } else { &self.spoke_side };
        claims.iter().map(|c| c.join(".")).collect::<Vec<_>>().join(", ")
    }
}

/// Every declared top-level rule of the compiled config, spoke by spoke.
pub struct Rules(pub Vec<Rule>);

impl Rules {
    pub fn new(l: &Loaded) -> Rules {
        let spec = &l.config.spec;
        let mut out = Vec::new();
        for status in &l.compiled.report.spokes {
            let Some(spoke_index) = spec.spokes.iter().position(|s| s.version == status.version) else {
                continue;
            };
            for rr in &status.rule_results {
                let when = spec.spokes[spoke_index]
                    .rules
                    .get(rr.index as usize)
                    .and_then(|r| r.when.as_ref())
                    .map(|w| (segments(&w.path), w.equals.clone()));
                out.push(Rule {
                    spoke: status.version.clone(),
                    index: rr.index,
                    spoke_index,
                    strategy: rr.strategy.to_string(),
                    hub: rr.hub_paths.iter().map(|p| segments(p)).collect(),
                    spoke_side: rr.spoke_paths.iter().map(|p| segments(p)).collect(),
                    when,
                });
            }
        }
        Rules(out)
    }

    /// Adds to `out` the positions (in `self.0`) of the rules of `spoke` that act on `input`.
    pub fn exercised(&self, spoke: &str, input: &Value, hub_side: bool, out: &mut Vec<usize>) {
        for (i, r) in self.0.iter().enumerate() {
            if r.spoke == spoke && r.acts_on(input, hub_side) && !out.contains(&i) {
                out.push(i);
            }
        }
    }
}

/// A claimed path as segments: `metadata.annotations.["example.com/x"]` keeps its key whole.
pub fn segments(path: &str) -> Vec<String> {
    // An annotation or label key is one segment, quoted or not (`example.com/x` has dots).
    for bag in ["annotations", "labels"] {
        if let Some(key) = path.strip_prefix("metadata.").and_then(|p| p.strip_prefix(bag)?.strip_prefix('.'))
        {
            let key = key.strip_prefix("[\"").and_then(|k| k.strip_suffix("\"]")).unwrap_or(key);
            return vec!["metadata".into(), bag.into(), key.into()];
        }
    }
    let mut out = Vec::new();
    let mut rest = path;
    while !rest.is_empty() {
        if let Some(quoted) = rest.strip_prefix("[\"") {
            // A key holding dots, written as a quoted string.
            let end = quoted.find("\"]").unwrap_or(quoted.len());
            out.push(quoted[..end].replace("\\\"", "\"").replace("\\\\", "\\"));
            rest = quoted.get(end + 2..).unwrap_or("");
            rest = rest.strip_prefix('.').unwrap_or(rest);
            continue;
        }
        let end = rest.find('.').unwrap_or(rest.len());
        out.push(rest[..end].to_string());
        rest = rest.get(end + 1..).unwrap_or("");
    }
    out
}

fn get<'a>(v: &'a Value, path: &[String]) -> Option<&'a Value> {
    path.iter().try_fold(v, |cur, k| cur.get(k.as_str()))
}

/// Whether `path` leads to a value in `v`; through an array, in any of its items (a ForEach
/// item's claims).
pub fn present(v: &Value, path: &[String]) -> bool {
    match (path.split_first(), v) {
        (None, v) => !v.is_null(),
        (Some(_), Value::Array(items)) => items.iter().any(|i| present(i, path)),
        (Some((k, rest)), Value::Object(m)) => m.get(k).is_some_and(|c| present(c, rest)),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn segments_keep_quoted_keys_whole() {
        assert_eq!(
            segments("metadata.annotations.[\"example.com/x\"]"),
            ["metadata", "annotations", "example.com/x"]
        );
        assert_eq!(segments("[\"a.b\"].c"), ["a.b", "c"]);
        assert_eq!(segments("spec.a.b"), ["spec", "a", "b"]);
        assert_eq!(segments("metadata.labels.tier"), ["metadata", "labels", "tier"]);
        assert_eq!(
            segments("metadata.annotations.example.com/x"),
            ["metadata", "annotations", "example.com/x"]
        );
    }

    #[test]
    fn present_looks_into_array_items_and_ignores_null() {
        let v = json!({"spec": {"items": [{"a": 1}, {"b": null}], "n": null}});
        assert!(present(&v, &segments("spec.items.a")));
        assert!(!present(&v, &segments("spec.items.b")));
        assert!(!present(&v, &segments("spec.n")));
        assert!(!present(&v, &segments("spec.missing")));
    }
}
