//! The authoring commands on the fixtures of docs/examples/convctl: suggest, rehub,
//! patch-preview, generate kyverno, completion and version.

mod common;
use common::*;

use std::path::Path;
use std::process::Command;

use dco_api::config::TargetKind;
use dco_api::target::{Wiring, XrdVersion, apply_body};
use serde_json::{Value, json};

const PEM: &str = "-----BEGIN CERTIFICATE-----\nMIIBdTCCARugAwIBAgIUTest\n-----END CERTIFICATE-----\n";

fn s(p: &Path) -> String {
    p.to_string_lossy().into_owned()
}

fn json_out(o: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(o))
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}\n{}", stdout(o), stderr(o)))
}

/// `text` with every line containing `needle` dropped, and the `n` lines after each.
fn without(text: &str, needle: &str, n: usize) -> String {
    let mut out = Vec::new();
    let mut skip = 0;
    for line in text.lines() {
        if skip > 0 {
            skip -= 1;
            continue;
        }
        if line.contains(needle) {
            skip = n;
            continue;
        }
        out.push(line);
    }
    out.join("\n") + "\n"
}

fn write(dir: &Path, name: &str, text: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, text).expect("write fixture");
    s(&p)
}

/// `file` (a config) with the rules of spoke `version` extended by `rules` (JSON), as YAML.
fn with_rules(config: &str, version: &str, rules: &Value) -> String {
    let mut doc: Value = serde_yaml::from_str(&std::fs::read_to_string(config).unwrap()).unwrap();
    let spokes = doc["spec"]["spokes"].as_array_mut().unwrap();
    let spoke = spokes.iter_mut().find(|s| s["version"] == version).expect("spoke");
    spoke["rules"].as_array_mut().unwrap().extend(rules.as_array().unwrap().iter().cloned());
    serde_yaml::to_string(&doc).unwrap()
}

#[test]
fn suggest_finds_a_removed_rename_back_and_the_pasted_result_validates() {
    let dir = scratch("suggest-rename");
    let full = std::fs::read_to_string(ex("databases-config.yaml")).unwrap();
    let config = write(&dir, "config.yaml", &without(&full, "strategy: FieldRename", 1));
    let o = convctl(&["suggest", "--config", &config, "--crd", &ex("databases-crd.yaml"), "-o", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json_out(&o);
    assert_eq!(
        v,
        json!({"spokes": [{"version": "v1", "rules": [{
            "strategy": "FieldRename",
            "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}
        }]}]})
    );
    // Without the rule the config does not compile; with the suggestion pasted in it does.
    assert_eq!(code(&convctl(&["validate", "--config", &config, "--crd", &ex("databases-crd.yaml")])), 1);
    let pasted = write(&dir, "pasted.yaml", &with_rules(&config, "v1", &v["spokes"][0]["rules"]));
    let o = convctl(&["validate", "--config", &pasted, "--crd", &ex("databases-crd.yaml")]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
}

#[test]
fn suggest_proposes_a_type_coerce_and_yaml_is_shaped_like_spec_spokes() {
    let dir = scratch("suggest-coerce");
    let full = std::fs::read_to_string(ex("databases-config.yaml")).unwrap();
    let config = write(&dir, "config.yaml", &without(&full, "strategy: TypeCoerce", 1));
    let o = convctl(&["suggest", "--config", &config, "--crd", &ex("databases-crd.yaml")]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert!(text.starts_with("# suggested rules"), "{text}");
    let v: Value = serde_yaml::from_str(&text).unwrap();
    assert_eq!(v["spokes"][0]["version"], "v1");
    assert_eq!(v["spokes"][0]["rules"][0]["strategy"], "TypeCoerce");
    assert_eq!(v["spokes"][0]["rules"][0]["typeCoerce"]["path"], "spec.replicas");
    // A complete config has nothing left to suggest.
    let o =
        convctl(&["suggest", "--config", &ex("databases-config.yaml"), "--crd", &ex("databases-crd.yaml")]);
    assert_eq!(code(&o), 0);
    assert!(stdout(&o).starts_with("# no suggestions"), "{}", stdout(&o));
}

/// Two versions: hub v2 has an enum `tier`, spoke v1 a free string `tiers`. A rename between
/// them is refused by the engine (a spoke value may not be a hub enum value), so suggest
/// drops it and says so.
#[test]
fn suggest_drops_a_suggestion_the_engine_refuses_and_counts_it() {
    let dir = scratch("suggest-dropped");
    let crd = write(
        &dir,
        "crd.yaml",
        r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: plans.example.org}
spec:
  group: example.org
  scope: Namespaced
  names: {kind: Plan, plural: plans, singular: plan, listKind: PlanList}
  versions:
    - name: v2
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                tier: {type: string, enum: [gold, silver]}
    - name: v1
      served: true
      storage: false
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              properties:
                tiers: {type: string}
"#,
    );
    let config = write(
        &dir,
        "config.yaml",
        "apiVersion: conversion.dco.rs/v1alpha1\nkind: CRDConversionConfig\nmetadata: {name: plans}\nspec:\n  targetCRD: {name: plans.example.org}\n  hubVersion: v2\n  spokes:\n    - version: v1\n      rules: []\n",
    );
    let o = convctl(&["suggest", "--config", &config, "--crd", &crd, "-o", "json"]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_out(&o), json!({"spokes": []}));
    let err = stderr(&o);
    assert!(err.contains("1 suggestion(s) dropped"), "{err}");
    assert!(err.contains("FieldRename spec.tier ← spec.tiers"), "{err}");
}

/// The CRD or XRD of `file` with `hub` as its storage/referenceable version.
fn with_hub(file: &str, kind: TargetKind, hub: &str, dir: &Path) -> String {
    let mut doc: Value = serde_yaml::from_str(&std::fs::read_to_string(file).unwrap()).unwrap();
    let flag = if kind == TargetKind::Xrd { "referenceable" } else { "storage" };
    for v in doc["spec"]["versions"].as_array_mut().unwrap() {
        let is_hub = v["name"] == hub;
        v[flag] = Value::Bool(is_hub);
    }
    write(dir, &format!("target-{hub}.yaml"), &serde_yaml::to_string(&doc).unwrap())
}

/// Every sample converted to every version gives the same object under `a` (against
/// `target_a`) and `b` (against `target_b`): the rehubbed config converts as the original.
fn same_conversions(flag: &str, a: (&str, &str), b: (&str, &str), samples: &str, versions: &[&str]) {
    let mut files: Vec<_> = std::fs::read_dir(samples).unwrap().map(|e| e.unwrap().path()).collect();
    files.sort();
    let mut compared = 0;
    for f in files {
        for to in versions {
            let run = |(config, target): (&str, &str)| {
                convctl(&[
                    "convert",
                    "--config",
                    config,
                    flag,
                    target,
                    "--sample",
                    &s(&f),
                    "--to",
                    to,
                    "-o",
                    "json",
                ])
            };
            let (oa, ob) = (run(a), run(b));
            assert_eq!(code(&oa), 0, "{}: {}", f.display(), stderr(&oa));
            assert_eq!(code(&ob), 0, "{} to {to} with the draft: {}", f.display(), stderr(&ob));
            assert_eq!(json_out(&oa), json_out(&ob), "{} converted to {to}", f.display());
            compared += 1;
        }
    }
    assert!(compared >= 2 * versions.len(), "only {compared} conversions compared");
}

#[test]
fn rehub_of_a_crd_config_compiles_and_converts_every_sample_as_the_original() {
    let dir = scratch("rehub-crd");
    let o = convctl(&[
        "rehub",
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--to",
        "v1",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert!(stderr(&o).contains("the draft compiles"), "{}", stderr(&o));
    let draft: Value = serde_yaml::from_str(&stdout(&o)).unwrap();
    assert_eq!(draft["kind"], "CRDConversionConfig");
    assert_eq!(draft["spec"]["hubVersion"], "v1");
    assert_eq!(draft["spec"]["targetCRD"]["name"], "databases.example.org");
    let rules = &draft["spec"]["spokes"][0]["rules"];
    assert_eq!(draft["spec"]["spokes"][0]["version"], "v2");
    assert_eq!(
        rules[0]["fieldRename"],
        json!({"hubPath": "spec.storageSize", "spokePath": "spec.storageGB"})
    );
    assert_eq!(rules[1]["quantity"], json!({"hubPath": "spec.memoryMillis", "spokePath": "spec.memory"}));
    let draft_file = write(&dir, "draft.yaml", &stdout(&o));
    let crd = with_hub(&ex("databases-crd.yaml"), TargetKind::Crd, "v1", &dir);
    assert_eq!(code(&convctl(&["validate", "--config", &draft_file, "--crd", &crd])), 0);
    let t = convctl(&["test", "--config", &draft_file, "--crd", &crd, "--samples", &ex("samples-db")]);
    assert_eq!(code(&t), 0, "{}{}", stdout(&t), stderr(&t));
    same_conversions(
        "--crd",
        (&ex("databases-config.yaml"), &ex("databases-crd.yaml")),
        (&draft_file, &crd),
        &ex("samples-db"),
        &["v1", "v2"],
    );
}

/// The widgets config with its JSONPatch move (which fails on objects without the field) as
/// the FieldRename the engine suggests for it, so the config compiles whatever the example says.
fn widgets_without_json_patch(dir: &Path) -> String {
    let mut doc: Value =
        serde_yaml::from_str(&std::fs::read_to_string(ex("widgets-config.yaml")).unwrap()).unwrap();
    for spoke in doc["spec"]["spokes"].as_array_mut().unwrap() {
        for rule in spoke["rules"].as_array_mut().unwrap() {
            if rule["strategy"] == "JSONPatch" {
                *rule = json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.legacyFlag", "spokePath": "spec.legacyFlagV2"}});
            }
        }
    }
    let path = write(dir, "widgets-config.yaml", &serde_yaml::to_string(&doc).unwrap());
    let o = convctl(&["validate", "--config", &path, "--xrd", &ex("widgets-xrd.yaml")]);
    assert_eq!(code(&o), 0, "the fixture compiles: {}{}", stdout(&o), stderr(&o));
    path
}

#[test]
fn rehub_of_an_xrd_config_composes_the_other_spoke_and_converts_as_the_original() {
    let dir = scratch("rehub-xrd");
    let config = widgets_without_json_patch(&dir);
    let o = convctl(&[
        "rehub",
        "--config",
        &config,
        "--xrd",
        &ex("widgets-xrd.yaml"),
        "--to",
        "v1",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let draft = json_out(&o);
    assert_eq!(draft["spec"]["hubVersion"], "v1");
    let versions: Vec<&str> =
        draft["spec"]["spokes"].as_array().unwrap().iter().map(|s| s["version"].as_str().unwrap()).collect();
    assert_eq!(versions, ["v2", "v3"]);
    // v2's EnumRemap is composed through v1's: v1 values map to v2 values directly.
    let v2 = &draft["spec"]["spokes"][0]["rules"];
    let remap = v2.as_array().unwrap().iter().find(|r| r["strategy"] == "EnumRemap").unwrap();
    assert_eq!(remap["enumRemap"]["mapping"][0], json!({"hub": "small", "spoke": "S"}));
    // The old hub's spoke rules are v1's, turned around.
    assert_eq!(
        draft["spec"]["spokes"][1]["rules"][0]["enumRemap"]["mapping"][0],
        json!({"hub": "small", "spoke": "Small"})
    );
    let draft_file = write(&dir, "draft.json", &stdout(&o));
    let xrd = with_hub(&ex("widgets-xrd.yaml"), TargetKind::Xrd, "v1", &dir);
    let t = convctl(&["test", "--config", &draft_file, "--xrd", &xrd, "--samples", &ex("samples")]);
    assert_eq!(code(&t), 0, "{}{}", stdout(&t), stderr(&t));
    same_conversions(
        "--xrd",
        (&config, &ex("widgets-xrd.yaml")),
        (&draft_file, &xrd),
        &ex("samples"),
        &["v1", "v2", "v3"],
    );
}

#[test]
fn rehub_fails_closed_naming_the_rule_it_cannot_rewrite() {
    let o = convctl(&[
        "rehub",
        "--config",
        &ex("widgets-config.yaml"),
        "--xrd",
        &ex("widgets-xrd.yaml"),
        "--to",
        "v2",
    ]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).is_empty(), "a refused draft prints nothing: {}", stdout(&o));
    let err = stderr(&o);
    assert!(err.contains("cannot be rewritten against hub v2"), "{err}");
    assert!(err.contains("(JSONPatch)") || err.contains("(CEL)"), "names the expression rule: {err}");
    // Not a spoke, and the hub itself: usage errors.
    for to in ["v9", "v3"] {
        let o = convctl(&[
            "rehub",
            "--config",
            &ex("widgets-config.yaml"),
            "--xrd",
            &ex("widgets-xrd.yaml"),
            "--to",
            to,
        ]);
        assert_eq!(code(&o), 2, "--to {to}: {}", stderr(&o));
    }
}

#[test]
fn rehub_refuses_a_draft_that_does_not_compile_unless_allow_invalid() {
    let dir = scratch("rehub-invalid");
    // A rule on v1 that the engine refuses once v1 is the hub: a rename onto a field v2
    // does not have.
    let config = write(
        &dir,
        "config.yaml",
        &with_rules(
            &ex("databases-config.yaml"),
            "v1",
            &json!([{"strategy": "Delete", "delete": {"path": "spec.nowhere", "existsOn": "Spoke"}}]),
        ),
    );
    let base = ["rehub", "--config", config.as_str(), "--crd", &ex("databases-crd.yaml"), "--to", "v1"];
    let refused = convctl(&base);
    assert_eq!(code(&refused), 1, "{}", stderr(&refused));
    assert!(stdout(&refused).is_empty());
    assert!(stderr(&refused).contains("--allow-invalid"), "{}", stderr(&refused));
    let mut args = base.to_vec();
    args.push("--allow-invalid");
    let printed = convctl(&args);
    assert_eq!(code(&printed), 1);
    let draft: Value = serde_yaml::from_str(&stdout(&printed)).unwrap();
    assert_eq!(draft["spec"]["hubVersion"], "v1");
}

fn preview(args: &[&str]) -> std::process::Output {
    let mut all =
        vec!["patch-preview", "--service-name", "dco-webhook-a", "--service-namespace", "dco-system"];
    all.extend_from_slice(args);
    convctl(&all)
}

#[test]
fn patch_preview_prints_what_the_operator_code_builds() {
    let b64 = base64_of(PEM);
    let o = preview(&[
        "--config",
        &ex("databases-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--ca-bundle",
        &b64,
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let wiring = Wiring {
        namespace: "dco-system".into(),
        service: "dco-webhook-a".into(),
        path: dco_api::webhook_path("databases.example.org"),
        port: dco_api::server::ServiceSpec::default().port,
        ca_bundle: PEM.into(),
        review_versions: vec!["v1".into()],
    };
    let want =
        apply_body(TargetKind::Crd, XrdVersion::V2, "databases.example.org", Some(&wiring.conversion()));
    assert_eq!(json_out(&o), want);
    // The PEM itself gives the same body; the YAML names the field manager and says no
    // labels or annotations are set.
    let o = preview(&["--config", &ex("databases-config.yaml"), "--ca-bundle", PEM]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(serde_yaml::from_str::<Value>(&text).unwrap(), want);
    assert!(text.contains("field manager dco-operator"), "{text}");
    assert!(text.contains("sets no labels or annotations"), "{text}");
}

#[test]
fn patch_preview_field_manager_is_the_operators() {
    let names = std::fs::read_to_string(examples().join("../../../operator/src/names.rs")).unwrap();
    assert!(
        names.contains("pub const FIELD_MANAGER: &str = \"dco-operator\";"),
        "operator/src/names.rs changed its field manager"
    );
}

#[test]
fn patch_preview_of_an_xrd_follows_its_scope_and_refuses_bad_input() {
    let dir = scratch("preview-xrd");
    let o = preview(&[
        "--config",
        &ex("widgets-config.yaml"),
        "--xrd",
        &ex("widgets-xrd.yaml"),
        "--ca-bundle",
        PEM,
        "--port",
        "8443",
        "--path",
        "/convert/x",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json_out(&o);
    assert_eq!(v["apiVersion"], "apiextensions.crossplane.io/v2");
    assert_eq!(
        v["spec"]["conversion"]["webhook"]["clientConfig"]["service"],
        json!({"name": "dco-webhook-a", "namespace": "dco-system", "path": "/convert/x", "port": 8443})
    );
    // A LegacyCluster XRD is written through v1 (Crossplane's v2 schema refuses that scope).
    let xrd = std::fs::read_to_string(ex("widgets-xrd.yaml")).unwrap().replacen(
        "spec:\n",
        "spec:\n  scope: LegacyCluster\n",
        1,
    );
    let legacy = write(&dir, "legacy.yaml", &xrd);
    let o = preview(&[
        "--config",
        &ex("widgets-config.yaml"),
        "--xrd",
        &legacy,
        "--ca-bundle",
        PEM,
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    assert_eq!(json_out(&o)["apiVersion"], "apiextensions.crossplane.io/v1");
    // Not a CA, wrong target flag, a config that does not compile.
    assert_eq!(
        code(&preview(&["--config", &ex("widgets-config.yaml"), "--ca-bundle", "not a certificate"])),
        2
    );
    assert_eq!(
        code(&preview(&[
            "--config",
            &ex("widgets-config.yaml"),
            "--crd",
            &ex("databases-crd.yaml"),
            "--ca-bundle",
            PEM
        ])),
        2
    );
    let o = preview(&[
        "--config",
        &ex("invalid-config.yaml"),
        "--crd",
        &ex("databases-crd.yaml"),
        "--ca-bundle",
        PEM,
    ]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    assert!(stderr(&o).contains("never wires"), "{}", stderr(&o));
}

fn base64_of(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s)
}

#[test]
fn generate_kyverno_prints_two_cluster_policies_for_the_xrd() {
    let o = convctl(&[
        "generate",
        "kyverno",
        "--config",
        &ex("widgets-config.yaml"),
        "--xrd",
        &ex("widgets-xrd.yaml"),
    ]);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let docs: Vec<Value> = serde_yaml::Deserializer::from_str(&stdout(&o))
        .map(|d| <Value as serde::Deserialize>::deserialize(d).expect("policy YAML parses"))
        .collect();
    assert_eq!(docs.len(), 2);
    for d in &docs {
        assert_eq!(d["apiVersion"], "kyverno.io/v1");
        assert_eq!(d["kind"], "ClusterPolicy");
    }
    assert_eq!(docs[0]["metadata"]["name"], "dco-label-compositions-xwidgets");
    let label = &docs[0]["spec"]["rules"][0];
    assert_eq!(
        label["match"]["any"][0]["resources"]["kinds"],
        json!(["apiextensions.crossplane.io/v1/Composition"])
    );
    assert_eq!(label["preconditions"]["all"][0]["value"], "XWidget");
    assert!(
        label["mutate"]["patchStrategicMerge"]["metadata"]["labels"]["conversion.dco.rs/xrd-api-version"]
            .is_string()
    );
    let migrate = &docs[1]["spec"]["rules"];
    let names: Vec<&str> = migrate.as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["drop-compositionref", "drop-compositionrevisionref", "select-composition-version"]);
    assert_eq!(
        migrate[0]["match"]["any"][0]["resources"]["kinds"],
        json!(["example.org/v3/XWidget", "example.org/v2/XWidget", "example.org/v1/XWidget"])
    );
    // The default --to is the config's hub.
    assert_eq!(
        migrate[2]["mutate"]["patchStrategicMerge"]["spec"]["crossplane"]["compositionSelector"]["matchLabels"]
            ["conversion.dco.rs/xrd-api-version"],
        "v3"
    );
    let patch: Value =
        serde_yaml::from_str(migrate[0]["mutate"]["patchesJson6902"].as_str().unwrap()).unwrap();
    assert_eq!(patch, json!([{"op": "remove", "path": "/spec/crossplane/compositionRef"}]));
}

#[test]
fn generate_kyverno_takes_from_to_and_the_reference_label_and_refuses_what_does_not_fit() {
    let base =
        ["generate", "kyverno", "--config", &ex("widgets-config.yaml"), "--xrd", &ex("widgets-xrd.yaml")];
    let mut args = base.to_vec();
    args.extend(["--to", "v2", "--from", "v1", "--label-key", "xrd-api-version", "-o", "json"]);
    let o = convctl(&args);
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let v = json_out(&o);
    let select = &v[1]["spec"]["rules"][2];
    assert_eq!(select["preconditions"]["all"][0]["operator"], "AnyIn");
    assert_eq!(select["preconditions"]["all"][0]["value"], json!(["v1", ""]));
    assert_eq!(
        select["mutate"]["patchStrategicMerge"]["spec"]["crossplane"]["compositionSelector"]["matchLabels"]["xrd-api-version"],
        "v2"
    );
    let mut bad = base.to_vec();
    bad.extend(["--to", "v9"]);
    assert_eq!(code(&convctl(&bad)), 2);
    let o = convctl(&[
        "generate",
        "kyverno",
        "--config",
        &ex("databases-config.yaml"),
        "--xrd",
        &ex("widgets-xrd.yaml"),
    ]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("CRDConversionConfig"), "{}", stderr(&o));
}

#[test]
fn completion_scripts_are_printed_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "powershell"] {
        let o = convctl(&["completion", shell]);
        assert_eq!(code(&o), 0, "{shell}: {}", stderr(&o));
        let text = stdout(&o);
        assert!(text.contains("convctl") && text.contains("COMPLETE"), "{shell}: {text}");
    }
    let bash = stdout(&convctl(&["completion", "bash"]));
    assert!(bash.contains("complete -o nospace -o bashdefault"), "{bash}");
}

/// What the bash script asks for when the cursor is on word `index` of `words`, run in `cwd`.
fn candidates(cwd: &Path, words: &[&str]) -> Vec<String> {
    let o = Command::new(env!("CARGO_BIN_EXE_convctl"))
        .current_dir(cwd)
        .env("COMPLETE", "bash")
        .env("_CLAP_COMPLETE_INDEX", (words.len() - 1).to_string())
        .env("_CLAP_IFS", "\n")
        .arg("--")
        .args(words)
        .output()
        .expect("convctl runs");
    assert_eq!(code(&o), 0, "{}", stderr(&o));
    let mut v: Vec<String> = stdout(&o).lines().filter(|l| !l.is_empty()).map(str::to_string).collect();
    v.sort();
    v
}

#[test]
fn completion_offers_only_files_of_the_right_kind() {
    let dir = scratch("completion-tree");
    std::fs::create_dir_all(dir.join("configs")).unwrap();
    std::fs::create_dir_all(dir.join(".git")).unwrap();
    std::fs::copy(ex("widgets-config.yaml"), dir.join("configs/widgets.yaml")).unwrap();
    std::fs::copy(ex("databases-config.yaml"), dir.join("db-config.yml")).unwrap();
    std::fs::copy(ex("databases-crd.yaml"), dir.join("db-crd.yaml")).unwrap();
    std::fs::copy(ex("widgets-xrd.yaml"), dir.join("configs/xrd.yaml")).unwrap();
    std::fs::copy(ex("widgets-config.yaml"), dir.join(".git/hidden.yaml")).unwrap();
    std::fs::write(dir.join("notes.yaml"), "kind: ConfigMap\n").unwrap();
    std::fs::write(
        dir.join("crd.json"),
        "{\"apiVersion\": \"apiextensions.k8s.io/v1\", \"kind\": \"CustomResourceDefinition\"}",
    )
    .unwrap();
    assert_eq!(
        candidates(&dir, &["convctl", "validate", "--config", ""]),
        ["configs/widgets.yaml", "db-config.yml"]
    );
    assert_eq!(candidates(&dir, &["convctl", "suggest", "--crd", ""]), ["crd.json", "db-crd.yaml"]);
    assert_eq!(candidates(&dir, &["convctl", "rehub", "--xrd", ""]), ["configs/xrd.yaml"]);
    assert_eq!(candidates(&dir, &["convctl", "test", "--config", "db"]), ["db-config.yml"]);
    // Subcommands still complete as clap knows them.
    assert!(candidates(&dir, &["convctl", "reh"]).contains(&"rehub".to_string()));
}

#[test]
fn version_json_names_version_commit_and_target() {
    let o = convctl(&["version", "-o", "json"]);
    assert_eq!(code(&o), 0);
    let v = json_out(&o);
    assert_eq!(v["version"], env!("CARGO_PKG_VERSION"));
    let commit = v["commit"].as_str().unwrap();
    assert!(
        commit == "unknown" || (commit.len() >= 7 && commit.chars().all(|c| c.is_ascii_hexdigit())),
        "{commit}"
    );
    assert!(v["target"].as_str().unwrap().contains('-'), "{v}");
    assert!(v["rustc"].as_str().unwrap().starts_with("rustc "), "{v}");
    let long = stdout(&convctl(&["--version"]));
    assert_eq!(
        long.trim(),
        format!("convctl {} (commit {commit}, {})", env!("CARGO_PKG_VERSION"), v["target"].as_str().unwrap())
    );
    let text = stdout(&convctl(&["version"]));
    assert!(
        text.starts_with(&format!("convctl {}\ncommit: {commit}\n", env!("CARGO_PKG_VERSION"))),
        "{text}"
    );
}
