//! Runs the convctl binary on the fixtures in docs/examples/convctl and checks exit codes and
//! output.

mod common;

use common::*;

#[test]
fn validate_ok_exits_0() {
    let o = run(widgets("validate"));
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains("ok: xwidgets converts xwidgets.example.org between hub v3 and 2 spoke(s)"),
        "{}",
        stdout(&o)
    );
}

/// Retiring v1: dco's order is unserve first, then drop the spoke, and `validate` says which
/// step comes next at each point.
#[test]
fn retiring_a_version_says_which_step_comes_next() {
    let dir = scratch("retire");
    // The spoke dropped while v1 is still served: refused, naming both ways forward.
    let config = std::fs::read_to_string(ex("widgets-config.yaml")).unwrap();
    let (without_v1, _) = config.split_once("    - version: v1\n").expect("the v1 spoke");
    let cfg = dir.join("config.yaml");
    std::fs::write(&cfg, without_v1).unwrap();
    let o = convctl(&["validate", "--config", cfg.to_str().unwrap(), "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains(
        "error: spoke v1: version v1 of CompositeResourceDefinition xwidgets.example.org is served but has no spoke in the config: add a spoke for v1 (an empty rules list copies identical fields), or, to retire v1, stop serving it in the target first (set served: false on v1), then remove its spoke"
    ), "{}", stdout(&o));
    // v1 unserved, spoke still there: valid, with the hint that the spoke can go now.
    let xrd = std::fs::read_to_string(ex("widgets-xrd.yaml")).unwrap();
    let (head, tail) = xrd.split_once("    - name: v1\n").expect("v1 in the XRD");
    let unserved = format!("{head}    - name: v1\n{}", tail.replacen("served: true", "served: false", 1));
    let xrd_path = dir.join("xrd.yaml");
    std::fs::write(&xrd_path, unserved).unwrap();
    let o =
        convctl(&["validate", "--config", &ex("widgets-config.yaml"), "--xrd", xrd_path.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains(
        "warning: spoke v1: version v1 of CompositeResourceDefinition xwidgets.example.org is no longer served: its spoke can now be removed, the last step of retiring v1"
    ), "{}", stdout(&o));
    // And the last step: the spoke removed as well.
    let o = convctl(&["validate", "--config", cfg.to_str().unwrap(), "--xrd", xrd_path.to_str().unwrap()]);
    assert!(!stdout(&o).contains("error: spoke v1"), "{}", stdout(&o));
}

#[test]
fn validate_reports_diagnostics_and_exits_1() {
    let o =
        convctl(&["validate", "--config", &ex("invalid-config.yaml"), "--crd", &ex("databases-crd.yaml")]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(
        out.contains("error: spoke v1, rule 1 (Quantity) spec.memory, spec.memoryMillis: rule is lossy"),
        "{out}"
    );
    assert!(out.contains("error: spoke v1 spec.replicas: hub field differs between hub and spoke (integer vs string) — TypeCoerce"), "{out}");
    // One mistake, one error: the lossy Quantity rule's fields are not also "not covered".
    assert!(stderr(&o).contains("databases-broken does not compile: 2 error(s)"), "{}", stderr(&o));
}

#[test]
fn a_reference_config_moves_over_by_changing_only_its_api_version() {
    let reference = ex("reference-config.yaml");
    let o = convctl(&["validate", "--config", &reference, "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o)
            .contains("apiVersion is \"terasky.com/v1alpha1\"; dco configs use conversion.dco.rs/v1alpha1"),
        "{}",
        stderr(&o)
    );

    let text = std::fs::read_to_string(&reference).unwrap();
    let moved = text.replace("apiVersion: terasky.com/v1alpha1", "apiVersion: conversion.dco.rs/v1alpha1");
    assert_eq!(moved.lines().count(), text.lines().count());
    let changed: Vec<_> = text.lines().zip(moved.lines()).filter(|(a, b)| a != b).collect();
    assert_eq!(changed.len(), 1, "only the apiVersion line changes");
    let dir = scratch("reference");
    let path = dir.join("config.yaml");
    std::fs::write(&path, moved).unwrap();
    let o = convctl(&["validate", "--config", path.to_str().unwrap(), "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    // It converts exactly as the dco config does (the reference spells BranchMap's
    // branches hubBranch/spokeBranch).
    let a = convctl(&[
        "convert",
        "--config",
        path.to_str().unwrap(),
        "--xrd",
        &ex("widgets-xrd.yaml"),
        "--sample",
        &ex("samples/spoke-v2.yaml"),
        "--to",
        "v3",
    ]);
    let mut args = widgets("convert");
    args.extend(["--sample".into(), ex("samples/spoke-v2.yaml"), "--to".into(), "v3".into()]);
    let b = run(args);
    assert_eq!(code(&a), 0);
    assert_eq!(stdout(&a), stdout(&b));
}

#[test]
fn usage_errors_exit_2() {
    // An XRD config given a --crd.
    let o = convctl(&["validate", "--config", &ex("widgets-config.yaml"), "--crd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("is an XRDConversionConfig; give its target with --xrd"), "{}", stderr(&o));
    // A file that does not exist.
    let o = convctl(&["validate", "--config", &ex("nope.yaml"), "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("cannot read"), "{}", stderr(&o));
    // Not YAML.
    let dir = scratch("usage");
    let bad = dir.join("bad.yaml");
    std::fs::write(&bad, "spec: [unclosed").unwrap();
    let o = convctl(&["validate", "--config", bad.to_str().unwrap(), "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("not valid YAML or JSON"), "{}", stderr(&o));
    // Missing arguments, both targets, unknown output format.
    assert_eq!(code(&convctl(&["validate", "--config", &ex("widgets-config.yaml")])), 2);
    assert_eq!(
        code(&convctl(&[
            "validate",
            "--config",
            &ex("widgets-config.yaml"),
            "--xrd",
            &ex("widgets-xrd.yaml"),
            "--crd",
            &ex("databases-crd.yaml")
        ])),
        2
    );
    let mut args = widgets("analyze");
    args.extend(["-o".into(), "xml".into()]);
    assert_eq!(code(&run(args)), 2);
    assert_eq!(code(&convctl(&["frobnicate"])), 2);
}

#[test]
fn target_name_mismatch_fails_validation() {
    let dir = scratch("mismatch");
    let text = std::fs::read_to_string(ex("widgets-config.yaml"))
        .unwrap()
        .replace("name: xwidgets.example.org", "name: gadgets.example.org");
    let path = dir.join("config.yaml");
    std::fs::write(&path, text).unwrap();
    let o = convctl(&["validate", "--config", path.to_str().unwrap(), "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 1);
    // One cause, reported once at the target's name, before any compile diagnostic.
    assert!(
        stderr(&o).contains("targets gadgets.example.org but the given definition is xwidgets.example.org"),
        "{}",
        stderr(&o)
    );
    assert_eq!(stderr(&o).lines().count(), 1, "{}", stderr(&o));
    assert!(stdout(&o).is_empty(), "{}", stdout(&o));
}

#[test]
fn analyze_table_and_json() {
    let o = run(widgets("analyze"));
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("spoke v2: hub→spoke LOSSY, spoke→hub LOSSY"), "{out}");
    assert!(
        out.lines().any(|l| l.contains("Quantity")
            && l.contains("spec.cpuRequest")
            && l.contains("spec.cpuMillis")
            && l.ends_with("LOSSY")),
        "{out}"
    );
    assert!(out.contains("spoke v1: hub→spoke lossless, spoke→hub lossless"), "{out}");

    let mut args = widgets("analyze");
    args.extend(["-o".into(), "json".into()]);
    let o = run(args);
    assert_eq!(code(&o), 0);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("analyze -o json prints JSON");
    // The versioned report shape; the analysis is its summary (docs/convctl.md, "Output formats").
    assert_eq!(doc["apiVersion"], "convctl.dco.rs/v1");
    let v = &doc["summary"];
    assert_eq!(v["compiles"], true);
    assert_eq!(v["overallLossless"], false);
    assert_eq!(v["kind"], "XRD");
    let v2 = &v["spokes"][0];
    assert_eq!(v2["version"], "v2");
    assert_eq!(v2["ruleResults"].as_array().unwrap().len(), 10);
    assert_eq!(v2["ruleResults"][2]["strategy"], "Quantity");
    assert_eq!(
        v2["ruleResults"][2]["lossless"],
        serde_json::json!({"hubToSpoke": true, "spokeToHub": false})
    );
    // A oneOf union of required-only alternatives: BranchMap claims its branches and the
    // discriminator, and leaves its other properties to other rules.
    assert_eq!(
        v2["ruleResults"][9]["hubPaths"],
        serde_json::json!(["spec.store.s3", "spec.store.gcs", "spec.store.backend"])
    );

    let o = convctl(&[
        "analyze",
        "--config",
        &ex("invalid-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1);
    let doc: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    let v = &doc["summary"];
    assert_eq!(v["compiles"], false);
    assert_eq!(v["spokes"][0]["fieldsUncoveredHub"], serde_json::json!(["spec.replicas"]));
}

#[test]
fn convert_prints_the_object() {
    let mut args = widgets("convert");
    args.extend(["--sample".into(), ex("samples/hub-v3.yaml"), "--to".into(), "v2".into()]);
    let o = run(args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let docs: Vec<serde_json::Value> =
        stdout(&o).split("---\n").map(|d| serde_yaml::from_str(d).expect("YAML output")).collect();
    assert_eq!(docs.len(), 2);
    let spec = &docs[0]["spec"];
    assert_eq!(docs[0]["apiVersion"], "example.org/v2");
    assert_eq!(spec["storageSize"], 20);
    assert_eq!(spec["size"], "M");
    assert_eq!(spec["cpuMillis"], 500);
    assert_eq!(spec["timeoutSeconds"], 300);
    assert_eq!(spec["priority"], "3");
    assert_eq!(spec["diskSizeValue"], 50);
    assert_eq!(spec["diskSizeUnit"], "Gi");
    assert_eq!(spec["contact"], "Jane Doe <jane@example.com>");
    assert_eq!(spec["legacyFlagV2"], true);
    assert_eq!(
        (spec["bitHigh"].clone(), spec["bitLow"].clone()),
        (serde_json::json!(4), serde_json::json!(1))
    );
    assert_eq!(spec["store"], serde_json::json!({"backend": "objectStore", "objectStore": {"name": "logs"}}));
    assert_eq!(docs[0]["status"]["phase"], "Ready");

    // JSON output, CRD target, --from check.
    let o = convctl(&[
        "convert",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--sample",
        &ex("samples-db/db-v1.json"),
        "--to",
        "v2",
        "--from",
        "v1",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    assert_eq!(v["spec"], serde_json::json!({"storageGB": 10, "memory": "536870912", "replicas": 1}));
    let o = convctl(&[
        "convert",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--sample",
        &ex("samples-db/db-v1.json"),
        "--to",
        "v2",
        "--from",
        "v2",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--from v2 but the object's apiVersion says v1"), "{}", stderr(&o));
    let o = convctl(&[
        "convert",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--sample",
        &ex("samples-db/db-v1.json"),
        "--to",
        "v9",
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("has versions v2, v1"), "{}", stderr(&o));
}

#[test]
fn convert_failure_names_object_rule_and_path() {
    let dir = scratch("convert-fail");
    let sample = dir.join("bad.yaml");
    std::fs::write(&sample, "apiVersion: example.org/v2\nkind: Database\nmetadata: {name: bad, namespace: shop}\nspec: {memory: lots}\n").unwrap();
    let o = convctl(&[
        "convert",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--sample",
        sample.to_str().unwrap(),
        "--to",
        "v1",
    ]);
    assert_eq!(code(&o), 1);
    assert!(
        stderr(&o).contains(
            "Database shop/bad: spoke v1, rule 1 (Quantity) spec.memory: \"lots\" is not a quantity"
        ),
        "{}",
        stderr(&o)
    );
    // A sample without apiVersion needs --from.
    std::fs::write(&sample, "kind: Database\nmetadata: {name: x}\nspec: {storageGB: 1}\n").unwrap();
    let base = [
        "convert",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--sample",
        sample.to_str().unwrap(),
        "--to",
        "v1",
    ];
    assert_eq!(code(&convctl(&base)), 2);
    let mut with_from = base.to_vec();
    with_from.extend(["--from", "v2"]);
    let o = convctl(&with_from);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stdout(&o).contains("storageSize: 1"), "{}", stdout(&o));
}

#[test]
fn test_round_trips_every_sample() {
    let mut args = widgets("test");
    args.extend(["--samples".into(), ex("samples"), "-o".into(), "json".into()]);
    let o = run(args.clone());
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let v: serde_json::Value = serde_json::from_str(&stdout(&o)).unwrap();
    // 4 samples, each to its own version and to the 2 others.
    assert_eq!(v["summary"]["total"], 12);
    assert_eq!(v["summary"]["pass"], 11);
    assert_eq!(v["summary"]["acknowledgedLoss"], 1);
    assert_eq!(v["summary"]["unexercisedRules"], 0);
    let lossy = v["cases"].as_array().unwrap().iter().find(|r| r["status"] == "acknowledged-loss").unwrap();
    assert_eq!((lossy["data"]["from"].as_str(), lossy["data"]["to"].as_str()), (Some("v3"), Some("v2")));
    let diffs = lossy["data"]["diffs"].as_array().unwrap();
    let paths: Vec<&str> = diffs.iter().map(|d| d["path"].as_str().unwrap()).collect();
    assert_eq!(paths, ["spec.cpuRequest", "spec.timeout"]);
    assert!(diffs[0]["acknowledgedBy"].as_str().unwrap().contains("spoke v2 rule 2 (Quantity)"));

    // Acknowledged loss never fails, whatever --fail-on says (docs/convctl.md, "test").
    args.extend(["--fail-on".into(), "warn".into()]);
    let o = run(args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
}

#[test]
fn unacknowledged_loss_fails_unless_fail_on_none() {
    let mut args = widgets("test");
    args.extend(["--samples".into(), ex("samples-loss")]);
    let o = run(args.clone());
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(out.contains("spec.diskSize: \"050Gi\" → \"50Gi\" [UNACKNOWLEDGED]"), "{out}");
    assert!(out.contains("3 round trip(s): 2 pass, 0 acknowledged loss, 1 loss, 0 error"), "{out}");
    args.extend(["--fail-on".into(), "none".into()]);
    assert_eq!(code(&run(args)), 0);
}

#[test]
fn junit_output_and_crd_targets() {
    let o = convctl(&[
        "test",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--samples",
        &ex("samples-db"),
        "-o",
        "junit",
        "--fail-on",
        "warn",
    ]);
    // Acknowledged loss passes, its detail kept as the testcase's output.
    assert_eq!(code(&o), 0);
    let out = stdout(&o);
    assert!(out.starts_with("<?xml"), "{out}");
    assert!(out.contains("tests=\"4\" failures=\"0\" errors=\"0\""), "{out}");
    assert!(
        out.contains("<system-out>acknowledged-loss: spec.memory: &quot;4Gi&quot; → &quot;4294967296&quot;"),
        "{out}"
    );
    assert_eq!(out.matches("<testcase ").count(), 4);
    let o = convctl(&[
        "test",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--samples",
        &ex("samples-db"),
    ]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn test_reports_conversion_errors_and_unknown_versions() {
    let dir = scratch("errors");
    std::fs::write(
        dir.join("a.yaml"),
        "apiVersion: example.org/v2\nkind: Database\nmetadata: {name: a}\nspec: {memory: 1n}\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("b.json"),
        r#"{"apiVersion": "example.org/v7", "kind": "Database", "metadata": {"name": "b"}}"#,
    )
    .unwrap();
    std::fs::write(dir.join("ignored.txt"), "not a sample").unwrap();
    let o = convctl(&[
        "test",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--samples",
        dir.to_str().unwrap(),
        "--fail-on",
        "none",
    ]);
    assert_eq!(code(&o), 0, "--fail-on none reports conversion errors without failing");
    let out = stdout(&o);
    assert!(out.contains("finer than a milli-unit"), "{out}");
    assert!(out.contains("version v7 is not one of v2, v1"), "{out}");
    let empty = scratch("empty");
    assert_eq!(
        code(&convctl(&[
            "test",
            "--config",
            &ex("databases-config.yaml"),
            "--crd",
            &ex("databases-crd.yaml"),
            "--samples",
            empty.to_str().unwrap()
        ])),
        2
    );
}

/// A rule that writes a field Crossplane owns (`spec.crossplane.compositionRef` of a Namespaced
/// XRD) does not compile: exit 1, the message naming the rule, the field and the fix.
#[test]
fn a_rule_on_a_field_crossplane_owns_is_refused_naming_the_rule_and_the_fix() {
    let dir = scratch("crossplane-owned");
    let xrd = dir.join("xrd.yaml");
    std::fs::write(
        &xrd,
        "apiVersion: apiextensions.crossplane.io/v2
kind: CompositeResourceDefinition
metadata:
  name: xbuckets.example.org
spec:
  group: example.org
  scope: Namespaced
  names: {kind: XBucket, plural: xbuckets}
  versions:
    - name: v2
      served: true
      referenceable: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                region: {type: string}
                composition: {type: string}
    - name: v1
      served: true
      referenceable: false
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                location: {type: string}
                composition: {type: string}
",
    )
    .unwrap();
    let config = dir.join("config.yaml");
    std::fs::write(
        &config,
        "apiVersion: conversion.dco.rs/v1alpha1
kind: XRDConversionConfig
metadata:
  name: xbuckets
spec:
  targetXRD: {name: xbuckets.example.org}
  hubVersion: v2
  spokes:
    - version: v1
      rules:
        - strategy: FieldRename
          fieldRename: {hubPath: spec.region, spokePath: spec.location}
        - strategy: FieldRename
          fieldRename: {hubPath: spec.crossplane.compositionRef.name, spokePath: spec.composition}
",
    )
    .unwrap();
    let o = convctl(&["validate", "--config", config.to_str().unwrap(), "--xrd", xrd.to_str().unwrap()]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(
        stdout(&o).contains(
            "error: spoke v1, rule 1 (FieldRename) spec.crossplane.compositionRef.name: fieldRename.hubPath names spec.crossplane.compositionRef.name, a field Crossplane owns on the composite resource of this Namespaced XRD (Crossplane writes it itself, and every conversion carries it through unchanged); remove the rule, or point fieldRename.hubPath at a field of the XRD's own schema"
        ),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("xbuckets does not compile"), "{}", stderr(&o));
    // Without that rule the config compiles: spec.composition is the XRD's own field.
    let fixed = std::fs::read_to_string(&config).unwrap();
    let (head, _) = fixed
        .split_once("        - strategy: FieldRename\n          fieldRename: {hubPath: spec.crossplane")
        .unwrap();
    std::fs::write(&config, head).unwrap();
    let o = convctl(&["validate", "--config", config.to_str().unwrap(), "--xrd", xrd.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
}

/// `--xrd` takes an XRD at `apiextensions.crossplane.io/v2` too (a Crossplane 2 `Namespaced`
/// one): validated and converted exactly as the same XRD at v1.
#[test]
fn a_v2_namespaced_xrd_file_validates_and_converts_as_at_v1() {
    let v1 = std::fs::read_to_string(ex("widgets-xrd.yaml")).unwrap();
    let v2 = v1
        .replace(
            "apiVersion: apiextensions.crossplane.io/v1\n",
            "apiVersion: apiextensions.crossplane.io/v2\n",
        )
        .replace("spec:\n  group: example.org\n", "spec:\n  scope: Namespaced\n  group: example.org\n");
    assert!(v2.contains("crossplane.io/v2") && v2.contains("scope: Namespaced"), "{v2}");
    let path = scratch("v2-xrd").join("xrd.yaml");
    std::fs::write(&path, v2).unwrap();
    let xrd = path.to_str().unwrap();
    let o = convctl(&["validate", "--config", &ex("widgets-config.yaml"), "--xrd", xrd]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("ok: xwidgets converts xwidgets.example.org between hub v3 and 2 spoke(s)"));
    let convert = |xrd: &str| {
        let o = convctl(&[
            "convert",
            "--config",
            &ex("widgets-config.yaml"),
            "--xrd",
            xrd,
            "--sample",
            &ex("samples/hub-v3.yaml"),
            "--to",
            "v2",
        ]);
        assert_eq!(code(&o), 0, "{}", stderr(&o));
        stdout(&o)
    };
    let at_v2 = convert(xrd);
    assert!(at_v2.contains("storageSize: 20"), "{at_v2}");
    assert_eq!(at_v2, convert(&ex("widgets-xrd.yaml")));
}
