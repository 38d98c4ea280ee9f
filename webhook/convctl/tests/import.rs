//! `convctl import` (docs/convctl.md "import"): every example config and server the reference
//! project ships (tests/fixtures/reference, PROVENANCE.md there) imports into an object dco's
//! API reads, with nothing dropped silently; a live reference object's metadata, finalizers,
//! annotations, reference-only fields and misspellings are each reported; exit codes 0/1/2.

mod common;
use common::*;

use std::path::PathBuf;

use serde_json::{Value, json};

fn reference() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/reference")
}

fn fixture(rel: &str) -> String {
    reference().join(rel).to_string_lossy().into_owned()
}

/// Runs import with a JSON report file; returns (exit code, stdout objects, report).
fn import(args: &[&str], name: &str) -> (i32, Vec<Value>, Value) {
    let dir = scratch(name);
    let report = dir.join("report.json");
    let mut all: Vec<String> = vec!["import".into(), "-o".into(), "json".into()];
    all.extend(args.iter().map(|s| s.to_string()));
    all.extend(["--report-file".into(), report.to_string_lossy().into_owned()]);
    let o = run(all);
    let out: Value = serde_json::from_str(&stdout(&o))
        .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}\nstderr: {}", stdout(&o), stderr(&o)));
    let items = match out.get("kind").and_then(Value::as_str) {
        Some("List") => out["items"].as_array().cloned().unwrap_or_default(),
        _ => vec![out],
    };
    let report: Value = serde_json::from_str(&std::fs::read_to_string(&report).expect("report written"))
        .expect("report is JSON");
    (code(&o), items, report)
}

fn rules_of(report: &Value, rule: &str) -> Vec<Value> {
    report["findings"].as_array().unwrap().iter().filter(|f| f["rule"] == rule).cloned().collect()
}

/// The reference input with the translations import reports applied (the apiVersion, BranchMap's
/// long branch names), to compare with the output.
fn expected(mut doc: Value) -> Value {
    fn branches(v: &mut Value) {
        match v {
            Value::Object(m) => {
                for (old, new) in [("hubBranch", "hub"), ("spokeBranch", "spoke")] {
                    if let Some(x) = m.remove(old) {
                        m.insert(new.into(), x);
                    }
                }
                m.values_mut().for_each(branches);
            }
            Value::Array(a) => a.iter_mut().for_each(branches),
            _ => {}
        }
    }
    branches(&mut doc);
    doc["apiVersion"] = json!("conversion.dco.rs/v1alpha1");
    doc
}

/// Every leaf of `want` is in `have` with the same value: nothing was dropped or changed.
fn assert_subset(want: &Value, have: &Value, path: &str) {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, v) in w {
                let here = format!("{path}.{k}");
                let got = h.get(k).unwrap_or_else(|| panic!("{here} dropped; output: {have}"));
                assert_subset(v, got, &here);
            }
        }
        (Value::Array(w), Value::Array(h)) => {
            assert_eq!(w.len(), h.len(), "{path}: length changed");
            for (i, (a, b)) in w.iter().zip(h).enumerate() {
                assert_subset(a, b, &format!("{path}[{i}]"));
            }
        }
        (Value::Number(a), Value::Number(b)) => assert_eq!(a.as_f64(), b.as_f64(), "{path}"),
        _ => assert_eq!(want, have, "{path} changed"),
    }
}

fn yaml_docs(path: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(path).unwrap();
    serde_yaml::Deserializer::from_str(&text)
        .map(|d| <Value as serde::Deserialize>::deserialize(d).unwrap())
        .filter(|v| !v.is_null())
        .collect()
}

/// Every example config of the reference, with its target: imported, read by dco's API,
/// nothing dropped, compiled by the engine.
#[test]
fn every_reference_example_config_imports_and_compiles() {
    let examples = [
        ("examples/field-rename/xrdconversionconfig.yaml", "--xrd", "examples/field-rename/xrd.yaml"),
        ("examples/enum-remap/xrdconversionconfig.yaml", "--xrd", "examples/enum-remap/xrd.yaml"),
        ("examples/for-each/xrdconversionconfig.yaml", "--xrd", "examples/for-each/xrd.yaml"),
        ("examples/native-crd/crdconversionconfig.yaml", "--crd", "examples/native-crd/crd.yaml"),
        (
            "examples/crossplane-xr-multiversion/xrdconversionconfig.yaml",
            "--xrd",
            "examples/crossplane-xr-multiversion/xrd.yaml",
        ),
        ("examples/gitops/configs/xrdconversionconfig.yaml", "--xrd", "examples/gitops/configs/xrd.yaml"),
        ("examples/branch-map/xrdconversionconfig.yaml", "--xrd", "examples/branch-map/xrd.yaml"),
    ];
    for (i, (config, flag, target)) in examples.iter().enumerate() {
        let (config, target) = (fixture(config), fixture(target));
        let (rc, out, report) = import(&[&config, flag, &target], &format!("ex{i}"));
        assert_eq!(out.len(), 1, "{config}");
        let kind = out[0]["kind"].as_str().unwrap();
        match kind {
            "XRDConversionConfig" => {
                drop(serde_json::from_value::<dco_api::XRDConversionConfig>(out[0].clone()).unwrap())
            }
            "CRDConversionConfig" => {
                drop(serde_json::from_value::<dco_api::CRDConversionConfig>(out[0].clone()).unwrap())
            }
            other => panic!("{config}: kind {other}"),
        }
        assert_subset(&expected(yaml_docs(&config).remove(0)), &out[0], "");
        assert!(rules_of(&report, "unmappable").is_empty(), "{config}: {report}");
        assert!(rules_of(&report, "dropped").is_empty(), "{config}: {report}");
        assert_eq!(rc, 0, "{config}: {report}");
        assert_eq!(rules_of(&report, "compiled").len(), 1, "{config}: {report}");
        if config.contains("branch-map") {
            assert_eq!(rules_of(&report, "changed").len(), 5, "apiVersion and 4 branch names: {report}");
        }
    }
}

/// The reference documentation's servers, several files and documents at once: each reads as
/// dco's server, nothing dropped, the sharding block's opt-in kept explicit.
#[test]
fn the_reference_documentation_servers_import() {
    let files = [
        "docs/configuration/conversionwebhookserver-spec.yaml",
        "docs/configuration/conversionwebhookserver-multiple-instances.yaml",
        "docs/configuration/conversionwebhookserver-sharding.yaml",
    ]
    .map(fixture);
    let (rc, out, report) = import(&files.iter().map(String::as_str).collect::<Vec<_>>(), "servers");
    assert_eq!(rc, 0, "{report}");
    let inputs: Vec<Value> = files.iter().flat_map(|f| yaml_docs(f)).collect();
    assert_eq!(out.len(), inputs.len());
    for (want, have) in inputs.into_iter().zip(&out) {
        let s: dco_api::ConversionWebhookServer = serde_json::from_value(have.clone()).unwrap();
        assert_subset(&expected(want.clone()), have, "");
        if want["spec"].get("sharding").is_some() {
            assert!(s.spec.sharding.unwrap().enabled, "a written sharding block opts in: {have}");
        }
    }
    assert_eq!(rules_of(&report, "behaviour").len(), 1, "cacheSelector's narrower meaning: {report}");
    // The documentation's sharding blocks spell `enabled` out, so only the apiVersions change.
    assert_eq!(rules_of(&report, "changed").len(), 4, "the 4 apiVersions: {report}");
}

/// A reference object as `kubectl get -o yaml` prints it, from stdin in a List: every change,
/// drop and unmappable field is named with its path, and exit 1 because a person is needed.
#[test]
fn a_live_reference_object_reports_every_change_and_needs_a_person() {
    let live = r#"
apiVersion: v1
kind: List
items:
- apiVersion: conversion.terasky.com/v1alpha1
  kind: CRDConversionConfig
  metadata:
    name: widgets-conversion
    uid: 6a2c
    resourceVersion: "99"
    finalizers: [conversion.terasky.com/safe-revert-crd]
    annotations:
      conversion.terasky.com/allow-unsafe-delete: "true"
      team: a
  spec:
    targetCRD: {name: widgets.example.org}
    hubVersion: v2
    driftPolicy: FailClosed
    spokes:
    - version: v1
      rules:
      - strategy: FieldRename
        fieldRename: {hubPath: spec.storageGB, spokePath: spec.storageSize}
        acknowledgeLosy: true
  status: {phase: Applied}
- apiVersion: terasky.com/v1alpha1
  kind: ConversionWebhookServer
  metadata: {name: s}
  spec:
    image: {repository: r, digest: "sha256:00"}
    autoscaling: {minReplicas: 1, maxReplicas: 3}
- apiVersion: apiextensions.k8s.io/v1
  kind: CustomResourceDefinition
  metadata: {name: widgets.example.org}
"#;
    let dir = scratch("live");
    let input = dir.join("live.yaml");
    std::fs::write(&input, live).unwrap();
    let (rc, out, report) = import(&[&input.to_string_lossy()], "live-report");
    assert_eq!(rc, 1, "{report}");
    assert_eq!(out.len(), 2, "the CRD is left out");
    assert_eq!(
        out[0]["metadata"],
        json!({"name": "widgets-conversion", "annotations": {
        "conversion.dco.rs/allow-unsafe-delete": "true", "team": "a"}})
    );
    assert!(out[0].get("status").is_none());
    let at = |rule: &str| -> Vec<String> {
        rules_of(&report, rule)
            .iter()
            .map(|f| f["location"]["path"].as_str().unwrap_or("").to_string())
            .collect()
    };
    let unmappable = at("unmappable");
    assert_eq!(unmappable, ["spec.spokes[0].rules[0].acknowledgeLosy"], "{report}");
    assert_eq!(out[1]["spec"]["image"]["digest"], "sha256:00", "dco pins by digest too");
    let typo = &rules_of(&report, "unmappable")[0];
    assert!(typo["fix"].as_str().unwrap().contains("\"acknowledgeLossy\""), "{typo}");
    assert_eq!(at("dropped"), ["metadata.finalizers", "metadata", "status"], "{report}");
    assert_eq!(at("behaviour"), ["spec.driftPolicy"]);
    assert!(at("changed").contains(&"spec.autoscaling.targetCPUUtilizationPercentage".to_string()));
    assert_eq!(at("skipped").len(), 1);
    assert_eq!(report["summary"]["unmappable"], 1);

    // The same from stdin (`-`), YAML out.
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_convctl"))
        .args(["import", "-"])
        .stdin(std::fs::File::open(&input).unwrap())
        .output()
        .unwrap();
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("apiVersion: conversion.dco.rs/v1alpha1"), "{}", stdout(&o));
    assert!(stderr(&o).contains("<stdin>"), "{}", stderr(&o));
}

#[test]
fn unreadable_input_is_exit_2() {
    let dir = scratch("bad");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "a: [").unwrap();
    for args in [
        vec!["import".to_string(), bad.to_string_lossy().into_owned()],
        vec!["import".into(), "/nonexistent.yaml".into()],
    ] {
        let o = run(args);
        assert_eq!(code(&o), 2, "{}", stderr(&o));
        assert!(stdout(&o).is_empty());
    }
}
