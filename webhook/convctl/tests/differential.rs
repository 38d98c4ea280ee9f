//! Differential run against the reference project (docs/convctl.md "Differences from the
//! reference"): every case of tests/fixtures/reference/expected.yaml — the reference's own
//! example configs and samples with the outcome its READMEs, demo script, CLI tests and
//! docs record — is imported with `convctl import` and run through dco's convctl. The reference's
//! binary cannot run here, so its recorded outcome stands in for it. Prints a table of every
//! case; fails on a disagreement that tests/fixtures/reference/disagreements.md does not
//! classify (`deliberate`, `fixed` or `open`), and on a `fixed` case that disagrees again.

mod common;
use common::*;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;

fn reference() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reference")
}

#[derive(Deserialize)]
struct Manifest {
    cases: Vec<Case>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Case {
    name: String,
    command: String,
    config: String,
    config2: Option<String>,
    xrd: Option<String>,
    crd: Option<String>,
    samples: Option<String>,
    sample: Option<String>,
    to: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    expect: Expect,
    source: String,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct Expect {
    /// A code, or `nonzero` where the reference records only that the command fails.
    exit: Value,
    total: Option<u64>,
    pass: Option<u64>,
    acknowledged_loss: Option<u64>,
    loss: Option<u64>,
    error: Option<u64>,
    loss_on: Option<String>,
    #[serde(default)]
    message: Vec<String>,
    #[serde(default)]
    object: BTreeMap<String, Value>,
}

impl Expect {
    fn describe(&self) -> String {
        let mut out = match &self.exit {
            Value::Number(n) => format!("exit {n}"),
            _ => "fails".to_string(),
        };
        for (k, v) in [
            ("total", self.total),
            ("pass", self.pass),
            ("ack", self.acknowledged_loss),
            ("loss", self.loss),
            ("error", self.error),
        ] {
            if let Some(v) = v {
                out.push_str(&format!(", {k} {v}"));
            }
        }
        if !self.message.is_empty() {
            out.push_str(&format!(", names {}", self.message.join("+")));
        }
        out
    }
}

/// What dco did on one case.
struct Outcome {
    exit: i32,
    text: String,
    json: Option<Value>,
}

fn path_arg(rel: &str, empty: &Path) -> String {
    if rel == "EMPTY_DIR" {
        empty.to_string_lossy().into_owned()
    } else {
        reference().join(rel).to_string_lossy().into_owned()
    }
}

/// `convctl import` of one reference config into the scratch dir; dco's translation.
fn import(rel: &str, dir: &Path, n: usize) -> PathBuf {
    let o = convctl(&["import", &reference().join(rel).to_string_lossy()]);
    assert!(matches!(code(&o), 0 | 1), "convctl import {rel}: exit {}: {}", code(&o), stderr(&o));
    assert!(
        stdout(&o).contains("conversion.dco.rs/v1alpha1"),
        "convctl import {rel} printed no dco object: {}",
        stderr(&o)
    );
    let out = dir.join(format!("imported-{n}.yaml"));
    std::fs::write(&out, stdout(&o)).expect("write the imported config");
    out
}

fn run_case(c: &Case, dir: &Path, n: usize) -> Outcome {
    let empty = dir.join("empty");
    std::fs::create_dir_all(&empty).expect("empty samples dir");
    let config = import(&c.config, dir, 2 * n);
    let mut args: Vec<String> =
        vec![c.command.clone(), "--config".into(), config.to_string_lossy().into_owned()];
    if let Some(b) = &c.config2 {
        args.extend(["--config".into(), import(b, dir, 2 * n + 1).to_string_lossy().into_owned()]);
    }
    if let Some(x) = &c.xrd {
        args.extend(["--xrd".into(), path_arg(x, &empty)]);
    }
    if let Some(x) = &c.crd {
        args.extend(["--crd".into(), path_arg(x, &empty)]);
    }
    if let Some(s) = &c.samples {
        args.extend(["--samples".into(), path_arg(s, &empty)]);
    }
    if let Some(s) = &c.sample {
        args.extend(["--sample".into(), path_arg(s, &empty)]);
    }
    if let Some(t) = &c.to {
        args.extend(["--to".into(), t.clone()]);
    }
    if matches!(c.command.as_str(), "test" | "convert") {
        args.extend(["-o".into(), "json".into()]);
    }
    args.extend(c.args.iter().cloned());
    let o = run(args);
    let json = serde_json::from_str(&stdout(&o)).ok();
    Outcome { exit: code(&o), text: format!("{}{}", stdout(&o), stderr(&o)), json }
}

/// Whether a round trip of `test -o json` reports an acknowledged loss of `field`: a case with
/// that status whose detail names it, or (the older shape) a result's acknowledged diff at it.
fn acknowledged_loss_on(report: &Value, field: &str) -> bool {
    let list = |key: &str| report.get(key).and_then(Value::as_array).cloned().unwrap_or_default();
    let in_cases = list("cases").iter().any(|c| {
        c["status"] == "acknowledged-loss" && c["detail"].as_str().is_some_and(|d| d.contains(field))
    });
    let in_results = list("results").iter().any(|r| {
        r["diffs"]
            .as_array()
            .is_some_and(|ds| ds.iter().any(|d| d["path"] == field && d["acknowledged"] == true))
    });
    in_cases || in_results
}

/// `a.b.c` in a JSON object; `None` when absent.
fn dotted<'a>(v: &'a Value, path: &str) -> Option<&'a Value> {
    path.split('.').try_fold(v, |v, k| v.get(k))
}

/// Where dco's outcome differs from the expectation, one line each; empty when they agree.
fn compare(e: &Expect, got: &Outcome) -> Vec<String> {
    let mut diffs = Vec::new();
    match &e.exit {
        Value::Number(n) if n.as_i64() != Some(got.exit as i64) => {
            diffs.push(format!("exit {} (want {n})", got.exit))
        }
        Value::String(s) if s == "nonzero" && got.exit == 0 => diffs.push("exit 0 (want a failure)".into()),
        Value::Number(_) | Value::String(_) => {}
        other => panic!("expect.exit must be a code or \"nonzero\", found {other}"),
    }
    let summary = got.json.as_ref().and_then(|j| j.get("summary"));
    for (key, want) in [
        ("total", e.total),
        ("pass", e.pass),
        ("acknowledgedLoss", e.acknowledged_loss),
        ("loss", e.loss),
        ("error", e.error),
    ] {
        let Some(want) = want else { continue };
        match summary.and_then(|s| s.get(key)).and_then(Value::as_u64) {
            Some(have) if have == want => {}
            have => diffs.push(format!("{key} {have:?} (want {want})")),
        }
    }
    if let Some(field) = &e.loss_on
        && !got.json.as_ref().is_some_and(|j| acknowledged_loss_on(j, field))
    {
        diffs.push(format!("no acknowledged loss names {field}"));
    }
    for word in &e.message {
        if !got.text.contains(word.as_str()) {
            diffs.push(format!("output does not name {word:?}"));
        }
    }
    for (path, want) in &e.object {
        let have = got.json.as_ref().and_then(|j| dotted(j, path));
        let same = match (want, have) {
            (Value::Null, None) => true,
            (w, Some(h)) => w == h,
            _ => false,
        };
        if !same {
            diffs.push(format!("{path} = {} (want {want})", have.map_or("absent".into(), Value::to_string)));
        }
    }
    diffs
}

/// The first line of dco's output worth showing: an error, or the summary.
fn headline(o: &Outcome) -> String {
    let line = o
        .text
        .lines()
        .find(|l| l.starts_with("error") || l.starts_with("convctl:"))
        .or_else(|| o.text.lines().find(|l| l.starts_with("ok:") || l.starts_with("diff:")))
        .unwrap_or("");
    let line: String = line.chars().take(90).collect();
    match o.json.as_ref().and_then(|j| j.get("summary")) {
        Some(s) => format!(
            "exit {}, total {}, pass {}, ack {}, loss {}, error {}",
            o.exit, s["total"], s["pass"], s["acknowledgedLoss"], s["loss"], s["error"]
        ),
        None => format!("exit {}: {line}", o.exit),
    }
}

/// `| case | class | ... |` rows of disagreements.md: case name → class.
fn classified() -> BTreeMap<String, String> {
    let text = std::fs::read_to_string(reference().join("disagreements.md")).expect("disagreements.md");
    text.lines()
        .filter(|l| l.starts_with("| `"))
        .map(|l| {
            let cells: Vec<&str> = l.split('|').map(str::trim).collect();
            (cells[1].trim_matches('`').to_string(), cells[2].trim_matches('`').to_string())
        })
        .collect()
}

#[test]
fn reference_cases_agree_or_are_classified() {
    let text = std::fs::read_to_string(reference().join("expected.yaml")).expect("expected.yaml");
    let manifest: Manifest = serde_yaml::from_str(&text).expect("expected.yaml parses");
    let classes = classified();
    for (name, class) in &classes {
        assert!(
            manifest.cases.iter().any(|c| &c.name == name),
            "disagreements.md lists {name}, which expected.yaml does not have"
        );
        assert!(
            matches!(class.as_str(), "deliberate" | "fixed" | "open"),
            "{name}: class {class:?} is not deliberate, fixed or open"
        );
    }
    let dir = scratch("differential");
    let mut rows = Vec::new();
    let mut problems = Vec::new();
    let mut stale = Vec::new();
    let mut agree = 0;
    for (n, c) in manifest.cases.iter().enumerate() {
        assert!(!c.source.is_empty(), "{}: no source", c.name);
        let got = run_case(c, &dir, n);
        let diffs = compare(&c.expect, &got);
        let class = classes.get(&c.name).map(String::as_str);
        let verdict = match (diffs.is_empty(), class) {
            (true, Some(listed @ ("deliberate" | "open"))) => {
                stale.push(format!("{} (listed as {listed})", c.name));
                "yes (stale entry in disagreements.md)"
            }
            (true, _) => "yes",
            (false, Some("deliberate")) => "no: deliberate",
            (false, Some("open")) => "no: open gap",
            (false, Some(_)) => {
                problems.push(format!(
                    "{}: classified fixed but disagrees again: {}",
                    c.name,
                    diffs.join("; ")
                ));
                "NO: regression"
            }
            (false, None) => {
                problems.push(format!("{}: unclassified disagreement: {}", c.name, diffs.join("; ")));
                "NO: unclassified"
            }
        };
        if diffs.is_empty() {
            agree += 1;
        }
        rows.push(format!("{:<46} {:<44} {:<70} {verdict}", c.name, c.expect.describe(), headline(&got)));
    }
    println!("{:<46} {:<44} {:<70} AGREE", "CASE", "REFERENCE (recorded)", "DCO");
    for r in &rows {
        println!("{r}");
    }
    println!("\n{agree} of {} case(s) agree", manifest.cases.len());
    // An entry that agrees now is reported, not failed: another change may have closed the gap.
    for s in &stale {
        println!("agrees now, remove from disagreements.md: {s}");
    }
    assert!(problems.is_empty(), "{}", problems.join("\n"));
}
