//! The chart's alerts and dashboards as the monitoring tests read them
//! (tests/tests/observability_metrics.rs, tests/tests/observability_prometheus.rs): the
//! PrometheusRule rendered by helm, its alerts, the dashboards of charts/dco/files/dashboards,
//! their queries and the metric names a query reads.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{Context, Result, ensure};
use serde_json::Value;

use crate::Cluster;
use crate::chart::{chart_dir, helm};

/// Series Prometheus makes itself for each scrape target, which a rule may read beside dco's.
pub const PROMETHEUS_SERIES: &[&str] = &["up"];

/// The chart's dashboards (charts/dco/files/dashboards/*.json), by file name, in name order.
pub fn dashboards() -> Result<Vec<(String, Value)>> {
    let dir = crate::repo_root().join("charts/dco/files/dashboards");
    let mut out = Vec::new();
    for e in std::fs::read_dir(&dir).with_context(|| format!("reading {}", dir.display()))? {
        let path = e?.path();
        if path.extension().is_some_and(|x| x == "json") {
            let name = path.file_name().unwrap_or_default().to_string_lossy().to_string();
            let text = std::fs::read_to_string(&path)?;
            let d: Value = serde_json::from_str(&text).with_context(|| format!("parsing {name}"))?;
            out.push((name, d));
        }
    }
    out.sort_by(|a, b| a.0.cmp(&b.0));
    ensure!(!out.is_empty(), "no dashboards in {}", dir.display());
    Ok(out)
}

/// The `spec` of the PrometheusRule the chart renders with `sets` (`--set` arguments).
pub fn render_rules(cluster: &Cluster, sets: &[&str]) -> Result<serde_yaml::Value> {
    let chart = chart_dir();
    let mut args =
        vec!["template", "dco", chart.to_str().context("chart path")?, "--namespace", "dco-system"];
    args.extend([
        "--show-only",
        "templates/prometheusrule.yaml",
        "--set",
        "monitoring.prometheusRule.enabled=true",
    ]);
    for s in sets {
        args.extend(["--set", s]);
    }
    let out = helm(cluster, &args)?;
    let doc: serde_yaml::Value = serde_yaml::from_str(&out).context("the rendered PrometheusRule")?;
    ensure!(doc["kind"] == "PrometheusRule", "helm rendered {out}");
    Ok(doc["spec"].clone())
}

/// `(alert, expr, annotations)` of every rule.
pub fn alerts(spec: &serde_yaml::Value) -> Vec<(String, String, BTreeMap<String, String>)> {
    let mut out = Vec::new();
    for g in spec["groups"].as_sequence().into_iter().flatten() {
        for r in g["rules"].as_sequence().into_iter().flatten() {
            let ann = r["annotations"]
                .as_mapping()
                .into_iter()
                .flatten()
                .filter_map(|(k, v)| Some((k.as_str()?.to_string(), v.as_str()?.to_string())))
                .collect();
            let text = |v: &serde_yaml::Value| v.as_str().unwrap_or_default().to_string();
            out.push((text(&r["alert"]), text(&r["expr"]), ann));
        }
    }
    out
}

/// The metric names a PromQL expression reads: identifiers that are not functions,
/// aggregations, keywords or label names (matchers `{...}`, `by (...)`, `on (...)`…), with
/// strings, ranges `[...]`, numbers, durations and Grafana's `$variables` skipped.
pub fn metric_names(expr: &str) -> BTreeSet<String> {
    const KEYWORDS: &[&str] = &[
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
        "sum",
        "min",
        "max",
        "avg",
        "group",
        "stddev",
        "stdvar",
        "count",
        "count_values",
        "bottomk",
        "topk",
        "quantile",
        "limitk",
        "limit_ratio",
        "inf",
        "nan",
        "atan2",
    ];
    const LABEL_LISTS: &[&str] = &["by", "without", "on", "ignoring", "group_left", "group_right"];
    let c: Vec<char> = expr.chars().collect();
    let mut names = BTreeSet::new();
    let mut i = 0;
    // Skips from an opening `open` at `i` past its matching `close`, strings included.
    let skip = |mut i: usize, open: char, close: char| -> usize {
        let mut depth = 0;
        while i < c.len() {
            match c[i] {
                q @ ('"' | '\'' | '`') => {
                    i += 1;
                    while i < c.len() && c[i] != q {
                        i += if c[i] == '\\' { 2 } else { 1 };
                    }
                }
                x if x == open => depth += 1,
                x if x == close => {
                    depth -= 1;
                    if depth == 0 {
                        return i + 1;
                    }
                }
                _ => {}
            }
            i += 1;
        }
        i
    };
    let next_non_space = |mut i: usize| {
        while i < c.len() && c[i].is_whitespace() {
            i += 1;
        }
        i
    };
    while i < c.len() {
        let ch = c[i];
        if ch == '"' || ch == '\'' || ch == '`' {
            let mut j = i + 1;
            while j < c.len() && c[j] != ch {
                j += if c[j] == '\\' { 2 } else { 1 };
            }
            i = j + 1;
        } else if ch == '{' {
            i = skip(i, '{', '}');
        } else if ch == '[' {
            i = skip(i, '[', ']');
        } else if ch == '$' {
            i += 1;
            while i < c.len() && (c[i].is_alphanumeric() || "_{}:".contains(c[i])) {
                i += 1;
            }
        } else if ch.is_ascii_digit() || (ch == '.' && c.get(i + 1).is_some_and(char::is_ascii_digit)) {
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '.' || c[i] == '_') {
                i += 1;
            }
        } else if ch.is_alphabetic() || ch == '_' || ch == ':' {
            let start = i;
            while i < c.len() && (c[i].is_alphanumeric() || c[i] == '_' || c[i] == ':') {
                i += 1;
            }
            let word: String = c[start..i].iter().collect();
            let after = next_non_space(i);
            if LABEL_LISTS.contains(&word.as_str()) && c.get(after) == Some(&'(') {
                i = skip(after, '(', ')');
            } else if !KEYWORDS.contains(&word.as_str()) && c.get(after) != Some(&'(') {
                names.insert(word);
            }
        } else {
            i += 1;
        }
    }
    names
}

/// Every query of a dashboard, with where it is: panels (rows' nested ones too) and
/// templating variables (`label_values(metric, label)` reads its first argument).
pub fn dashboard_queries(d: &Value) -> Vec<(String, String)> {
    fn walk(panels: &Value, out: &mut Vec<(String, String)>) {
        for p in panels.as_array().into_iter().flatten() {
            let title = p["title"].as_str().unwrap_or("?");
            for t in p["targets"].as_array().into_iter().flatten() {
                if let Some(e) = t["expr"].as_str() {
                    out.push((
                        format!("panel {title:?} ({})", t["refId"].as_str().unwrap_or("?")),
                        e.to_string(),
                    ));
                }
            }
            walk(&p["panels"], out);
        }
    }
    let mut out = Vec::new();
    walk(&d["panels"], &mut out);
    for v in d["templating"]["list"].as_array().into_iter().flatten() {
        if v["type"] == "query" {
            let q = v["query"].as_str().or_else(|| v["query"]["query"].as_str()).unwrap_or_default();
            let q =
                q.strip_prefix("label_values(").map_or(q, |r| r.split([',', ')']).next().unwrap_or_default());
            out.push((format!("variable {}", v["name"]), q.to_string()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_names_skip_functions_labels_and_durations() {
        let e = r#"histogram_quantile(0.99, sum by (le, target) (rate(dco_webhook_request_duration_seconds_bucket{result!="success",target=~"a.b"}[$__rate_interval])))
            / on (target) group_left (server) max without (pod) (dco_operator_target_serving_replicas offset 5m) > bool 2e3
            or absent(dco_operator_shards) unless count(x_total{a="}"}) * 1.5 and time() - vector(0)"#;
        let got: Vec<String> = metric_names(e).into_iter().collect();
        assert_eq!(
            got,
            [
                "dco_operator_shards",
                "dco_operator_target_serving_replicas",
                "dco_webhook_request_duration_seconds_bucket",
                "x_total"
            ]
        );
    }
}
