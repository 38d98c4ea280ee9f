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
            i = close(&c, i, '{', '}');
        } else if ch == '[' {
            i = close(&c, i, '[', ']');
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
                i = close(&c, after, '(', ')');
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

/// The parts of a rule's or panel's expression that read data, each on its own: the operands
/// of `or`, `and` and `unless` (their `on (...)`/`ignoring (...)` dropped), both sides of a
/// comparison when the right one reads a metric (else the left alone: the threshold goes),
/// the argument of `absent(...)`, all without enclosing parentheses. An expression with none of
/// these is its own only part.
pub fn inner_queries(expr: &str) -> Vec<String> {
    let e = unwrap_parens(expr.trim());
    let c: Vec<char> = e.chars().collect();
    if e.starts_with("absent(") && close(&c, 6, '(', ')') == c.len() {
        return inner_queries(&e[7..e.len() - 1]);
    }
    let top = top_level(&c);
    // Set operators bind loosest: split there first.
    let mut cuts = Vec::new();
    for &i in &top {
        for op in ["or", "and", "unless"] {
            if word_at(&c, i, op) {
                cuts.push((i, op.len()));
            }
        }
    }
    if !cuts.is_empty() {
        let mut parts = Vec::new();
        let mut start = 0;
        for (i, len) in cuts.iter().copied().chain([(c.len(), 0)]) {
            let part: String = c[start..i].iter().collect();
            parts.extend(inner_queries(&strip_matching(&part)));
            start = i + len;
        }
        return parts;
    }
    for &i in &top {
        let two: String = c[i..(i + 2).min(c.len())].iter().collect();
        let len = if ["==", "!=", ">=", "<="].contains(&two.as_str()) {
            2
        } else if c[i] == '>' || c[i] == '<' {
            1
        } else {
            continue;
        };
        let left: String = c[..i].iter().collect();
        let right: String = c[i + len..].iter().collect();
        let right = right.trim_start().strip_prefix("bool ").unwrap_or(right.trim_start()).to_string();
        let mut out = inner_queries(&left);
        if !metric_names(&right).is_empty() {
            out.extend(inner_queries(&right));
        }
        return out;
    }
    vec![e.to_string()]
}

/// The selectors of an expression: each metric name it reads with its matchers (`name` or
/// `name{...}`), once each.
pub fn selectors(expr: &str) -> Vec<String> {
    let c: Vec<char> = expr.chars().collect();
    let mut out: Vec<String> = Vec::new();
    for name in metric_names(expr) {
        let n: Vec<char> = name.chars().collect();
        let mut i = 0;
        while i + n.len() <= c.len() {
            let ident = |ch: char| ch.is_alphanumeric() || ch == '_' || ch == ':';
            let hit = c[i..i + n.len()] == n[..]
                && (i == 0 || !ident(c[i - 1]))
                && c.get(i + n.len()).is_none_or(|ch| !ident(*ch));
            if !hit {
                i += 1;
                continue;
            }
            let mut j = i + n.len();
            let mut sel = name.clone();
            if c.get(j) == Some(&'{') {
                let end = close(&c, j, '{', '}');
                sel = c[i..end].iter().collect();
                j = end;
            }
            if c.get(j).is_none_or(|ch| *ch != '(') && !out.contains(&sel) {
                out.push(sel);
            }
            i = j;
        }
    }
    out
}

/// Indexes of `c` outside any bracket, brace, parenthesis or string.
fn top_level(c: &[char]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut i = 0;
    while i < c.len() {
        match c[i] {
            '"' | '\'' | '`' => i = string_end(c, i),
            '(' | '[' | '{' => depth += 1,
            ')' | ']' | '}' => depth -= 1,
            _ if depth == 0 => out.push(i),
            _ => {}
        }
        i += 1;
    }
    out
}

/// The index of the quote that closes the string opened at `i` (or the end).
fn string_end(c: &[char], mut i: usize) -> usize {
    let q = c[i];
    i += 1;
    while i < c.len() && c[i] != q {
        i += if c[i] == '\\' { 2 } else { 1 };
    }
    i
}

/// The index after the `close` matching the `open` at `i`, strings skipped.
fn close(c: &[char], i: usize, open: char, close: char) -> usize {
    let mut depth = 0;
    let mut j = i;
    while j < c.len() {
        match c[j] {
            '"' | '\'' | '`' => j = string_end(c, j),
            x if x == open => depth += 1,
            x if x == close => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    c.len()
}

/// `e` without parentheses that enclose all of it.
fn unwrap_parens(e: &str) -> &str {
    let c: Vec<char> = e.chars().collect();
    if c.first() == Some(&'(') && close(&c, 0, '(', ')') == c.len() {
        unwrap_parens(e[1..e.len() - 1].trim())
    } else {
        e
    }
}

fn word_at(c: &[char], i: usize, w: &str) -> bool {
    let ident = |ch: char| ch.is_alphanumeric() || ch == '_' || ch == ':';
    let n: Vec<char> = w.chars().collect();
    i + n.len() <= c.len()
        && c[i..i + n.len()] == n[..]
        && (i == 0 || !ident(c[i - 1]))
        && c.get(i + n.len()).is_none_or(|ch| !ident(*ch))
}

/// An operand of a set operator without its leading `on (...)`, `ignoring (...)`,
/// `group_left (...)` or `group_right (...)`.
fn strip_matching(part: &str) -> String {
    let mut p = part.trim().to_string();
    loop {
        let Some(w) = ["on", "ignoring", "group_left", "group_right"]
            .into_iter()
            .find(|w| p.strip_prefix(w).is_some_and(|r| r.trim_start().starts_with('(')))
        else {
            return p;
        };
        let rest: Vec<char> = p[w.len()..].trim_start().chars().collect();
        let end = close(&rest, 0, '(', ')');
        p = rest[end..].iter().collect::<String>().trim().to_string();
    }
}

/// A Prometheus server (`hack/testenv tool prometheus`, from the module promtool is built
/// from) on loopback, scraping static targets; its data directory and process go on drop.
pub struct Prometheus {
    child: std::process::Child,
    dir: std::path::PathBuf,
    pub addr: String,
}

/// One scrape target: `job`, `address` (`ip:port`) and the `namespace` and `pod` labels a
/// Kubernetes service discovery would give it.
pub struct ScrapeTarget {
    pub job: String,
    pub address: String,
    pub namespace: String,
    pub pod: String,
}

impl Prometheus {
    /// Starts it with `targets` scraped every `interval_s` seconds, and waits for `/-/ready`.
    pub async fn start(targets: &[ScrapeTarget], interval_s: u32) -> Result<Prometheus> {
        let bin = tokio::task::spawn_blocking(|| crate::testenv_tool("prometheus")).await??;
        let dir = std::env::temp_dir().join(crate::unique_name("dco-prometheus"));
        std::fs::create_dir_all(&dir)?;
        let mut jobs: BTreeMap<&str, Vec<serde_json::Value>> = BTreeMap::new();
        for t in targets {
            ensure!(t.address.starts_with("127."), "{} is not on loopback", t.address);
            jobs.entry(&t.job).or_default().push(serde_json::json!({
                "targets": [t.address], "labels": {"namespace": t.namespace, "pod": t.pod}}));
        }
        let config = serde_json::json!({
            "global": {"scrape_interval": format!("{interval_s}s"), "evaluation_interval": format!("{interval_s}s")},
            "scrape_configs": jobs.iter().map(|(job, statics)| serde_json::json!({
                "job_name": job, "static_configs": statics})).collect::<Vec<_>>(),
        });
        // JSON is YAML: Prometheus reads it as its config file.
        std::fs::write(dir.join("prometheus.yml"), serde_json::to_string_pretty(&config)?)?;
        let port = crate::free_port()?;
        let addr = format!("127.0.0.1:{port}");
        let log = std::fs::File::create(dir.join("prometheus.log"))?;
        let child = std::process::Command::new(&bin)
            .arg(format!("--config.file={}", dir.join("prometheus.yml").display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .stdout(std::process::Stdio::from(log.try_clone()?))
            .stderr(std::process::Stdio::from(log))
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let p = Prometheus { child, dir, addr };
        crate::wait_for("prometheus to be ready", std::time::Duration::from_secs(60), || async {
            Ok(crate::http_get(&p.addr, "/-/ready").await.ok().filter(|(c, _)| *c == 200).map(|_| ()))
        })
        .await
        .with_context(|| p.log())?;
        Ok(p)
    }

    /// The tail of its log, for an error.
    pub fn log(&self) -> String {
        let text = std::fs::read_to_string(self.dir.join("prometheus.log")).unwrap_or_default();
        let lines: Vec<&str> = text.lines().collect();
        lines[lines.len().saturating_sub(20)..].join("\n")
    }

    /// `GET /api/v1/<path>`: the `data` of a successful answer; an error names the answer.
    pub async fn api(&self, path: &str) -> Result<serde_json::Value> {
        let (code, body) = crate::http_get(&self.addr, &format!("/api/v1/{path}")).await?;
        let v: serde_json::Value =
            serde_json::from_str(&body).with_context(|| format!("/api/v1/{path}: {code} {body}"))?;
        ensure!(code == 200 && v["status"] == "success", "/api/v1/{path}: {code} {body}");
        Ok(v["data"].clone())
    }

    /// The instant vector (or scalar, as one sample) of `query` now.
    pub async fn query(&self, query: &str) -> Result<Vec<serde_json::Value>> {
        let data = self.api(&format!("query?query={}", crate::query_escape(query))).await?;
        Ok(match data["resultType"].as_str() {
            Some("vector") | Some("matrix") => data["result"].as_array().cloned().unwrap_or_default(),
            _ => vec![data["result"].clone()],
        })
    }

    /// The metric families of every target's last scrape (`/api/v1/metadata`), with or
    /// without samples.
    pub async fn families(&self) -> Result<BTreeSet<String>> {
        let data = self.api("metadata").await?;
        Ok(data.as_object().map(|m| m.keys().cloned().collect()).unwrap_or_default())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The family a series name belongs to: itself, or without the suffix a histogram's or a
/// counter's series adds.
pub fn family_of<'a>(series: &'a str, families: &BTreeSet<String>) -> Option<&'a str> {
    let mut candidates = vec![series];
    for suffix in ["_bucket", "_count", "_sum", "_total", "_created"] {
        if let Some(f) = series.strip_suffix(suffix) {
            candidates.push(f);
        }
    }
    candidates.into_iter().find(|c| families.contains(*c))
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

    #[test]
    fn inner_queries_drop_thresholds_and_split_set_operators() {
        let e = r#"max by (namespace, pod) (dco_webhook_ready) == 0
          or
          (
            max by (namespace, pod) (up) == 0
            and on (namespace, pod)
            max by (namespace, pod) (max_over_time(dco_webhook_ready[1h]))
          )"#;
        assert_eq!(
            inner_queries(e),
            [
                "max by (namespace, pod) (dco_webhook_ready)",
                "max by (namespace, pod) (up)",
                "max by (namespace, pod) (max_over_time(dco_webhook_ready[1h]))"
            ]
        );
        assert_eq!(
            inner_queries("time() - max by (a) (x_seconds{r!=\"b>c\"}) > 10 * 60"),
            ["time() - max by (a) (x_seconds{r!=\"b>c\"})"]
        );
        assert_eq!(
            inner_queries("max by (s) (ready) < max by (s) (desired)"),
            ["max by (s) (ready)", "max by (s) (desired)"]
        );
        assert_eq!(inner_queries("absent(dco_operator_shards)"), ["dco_operator_shards"]);
        assert_eq!(
            inner_queries("sum(rate(a_total[5m])) / sum(rate(b_total[5m])) > bool 0.05"),
            ["sum(rate(a_total[5m])) / sum(rate(b_total[5m]))"]
        );
        assert_eq!(
            selectors(
                r#"sum(rate(r_total{result!="success"}[5m])) / sum(rate(r_total[5m])) + histogram_quantile(0.9, rate(h_bucket{t="x"}[1m]))"#
            ),
            [r#"h_bucket{t="x"}"#, r#"r_total{result!="success"}"#, "r_total"]
        );
    }
}
