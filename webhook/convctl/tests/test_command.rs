//! `convctl test`: samples from a GitOps tree, a List, stdin and tar archives; unreadable and
//! schema-breaking samples; the bounds; --version-pair, --skip-identity, --concurrency; and
//! `--fail-on` × outcome as the reference documents it (docs/convctl.md, "test").

mod common;

use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

use common::*;
use serde_json::Value;

/// A Database at v2 (the hub) that round trips unchanged and exercises all three rules.
const CLEAN_V2: &str = "apiVersion: example.org/v2\nkind: Database\nmetadata: {name: clean, namespace: shop}\nspec: {storageGB: 50, memory: \"4294967296\", replicas: 3}\n";
/// The same at v1.
const CLEAN_V1: &str = "apiVersion: example.org/v1\nkind: Database\nmetadata: {name: old, namespace: shop}\nspec: {storageSize: 10, memoryMillis: 536870912000, replicas: \"1\"}\n";

fn db(samples: &str, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["test", "--config", "CONFIG", "--crd", "CRD", "-s", samples];
    let (config, crd) = (ex("databases-config.yaml"), ex("databases-crd.yaml"));
    args[2] = &config;
    args[4] = &crd;
    args.extend_from_slice(extra);
    convctl(&args)
}

fn json(o: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(o), stderr(o)))
}

fn write(dir: &Path, name: &str, text: &str) {
    let p = dir.join(name);
    std::fs::create_dir_all(p.parent().unwrap()).unwrap();
    std::fs::write(p, text).unwrap();
}

fn statuses(v: &Value) -> Vec<(String, String, String)> {
    v["cases"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (s("group"), s("name"), s("status"))
        })
        .collect()
}

/// A GitOps tree: kustomization.yaml, nested overlays, a ConfigMap beside a sample in one file,
/// another group's Database, a hidden directory and a non-YAML file. Only the Databases of
/// example.org are tested, the rest is counted.
#[test]
fn a_gitops_tree_is_walked_and_other_kinds_are_counted() {
    let dir = scratch("gitops");
    write(
        &dir,
        "kustomization.yaml",
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: [base]\n",
    );
    write(&dir, "base/kustomization.yaml", "resources: [db.yaml]\n");
    write(&dir, "base/db.yaml", CLEAN_V2);
    write(
        &dir,
        "overlays/prod/deep/db.yml",
        &format!("apiVersion: v1\nkind: ConfigMap\nmetadata: {{name: c}}\n---\n{CLEAN_V1}"),
    );
    write(
        &dir,
        "overlays/prod/other.json",
        r#"{"apiVersion": "other.org/v1", "kind": "Database", "metadata": {"name": "x"}}"#,
    );
    write(&dir, ".git/bad.yaml", "{{ not yaml");
    write(&dir, "README.md", "# not a sample");
    let o = db(dir.to_str().unwrap(), &["-o", "json"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    assert_eq!(v["summary"]["samples"], 2);
    assert_eq!(v["summary"]["skippedDocuments"], 4, "{}", v["summary"]);
    assert_eq!(v["summary"]["skippedKinds"]["Kustomization"], 1);
    assert_eq!(v["summary"]["skippedKinds"]["(no kind)"], 1);
    assert_eq!(v["summary"]["skippedKinds"]["Database (other.org/v1)"], 1);
    let groups: Vec<String> = statuses(&v).into_iter().map(|(g, _, _)| g).collect();
    assert!(groups.iter().any(|g| g.ends_with("base/db.yaml")), "{groups:?}");
    assert!(groups.iter().any(|g| g.ends_with("overlays/prod/deep/db.yml#2")), "{groups:?}");
    let note = v["findings"].as_array().unwrap().iter().find(|f| f["rule"] == "skipped-documents").unwrap();
    assert_eq!(note["severity"], "note");
    assert_eq!(note["fails"], false);
    assert!(
        note["message"]
            .as_str()
            .unwrap()
            .contains("skipped 4 document(s) of other kinds: 1 (no kind), 1 ConfigMap"),
        "{note}"
    );
}

/// `kubectl get -o yaml` prints a List: each item is a sample.
#[test]
fn a_list_is_expanded_into_its_items() {
    let dir = scratch("list");
    let item = |name: &str| {
        format!(
            "- apiVersion: example.org/v2\n  kind: Database\n  metadata: {{name: {name}}}\n  spec: {{storageGB: 1, memory: \"1024\", replicas: 1}}\n"
        )
    };
    write(
        &dir,
        "all.yaml",
        &format!(
            "apiVersion: v1\nkind: List\nmetadata: {{resourceVersion: \"\"}}\nitems:\n{}{}",
            item("a"),
            item("b")
        ),
    );
    let o = db(dir.join("all.yaml").to_str().unwrap(), &["-o", "json", "--skip-identity"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    assert_eq!(v["summary"]["samples"], 2);
    let groups: Vec<String> = statuses(&v).into_iter().map(|(g, _, _)| g).collect();
    assert!(
        groups[0].ends_with("all.yaml.items[0]") && groups[1].ends_with("all.yaml.items[1]"),
        "{groups:?}"
    );
}

/// `-s -` reads the samples from stdin.
#[test]
fn samples_come_from_stdin() {
    let (config, crd) = (ex("databases-config.yaml"), ex("databases-crd.yaml"));
    let mut child = Command::new(env!("CARGO_BIN_EXE_convctl"))
        .args(["test", "--config", &config, "--crd", &crd, "-s", "-", "--skip-identity"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child.stdin.take().unwrap().write_all(format!("{CLEAN_V2}---\n{CLEAN_V1}").as_bytes()).unwrap();
    let o = child.wait_with_output().unwrap();
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("<stdin>#1  v2 → v1 → v2  pass"), "{out}");
    assert!(out.contains("<stdin>#2  v1 → v2 → v1  pass"), "{out}");
    assert!(out.contains("2 round trip(s): 2 pass"), "{out}");
}

/// A .tgz and a .tar are read as trees, in path order.
#[test]
fn tar_archives_are_read_as_trees() {
    let dir = scratch("tar");
    let tree = dir.join("tree");
    write(&tree, "b/db.yaml", CLEAN_V1);
    write(&tree, "a/db.yaml", CLEAN_V2);
    write(&tree, "kustomization.yaml", "resources: [a, b]\n");
    for (name, flags) in [("s.tgz", "-czf"), ("s.tar", "-cf")] {
        let archive = dir.join(name);
        let st = Command::new("tar").arg(flags).arg(&archive).arg("-C").arg(&tree).arg(".").status().unwrap();
        assert!(st.success());
        let o = db(archive.to_str().unwrap(), &["-o", "json", "--skip-identity"]);
        assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
        let v = json(&o);
        let got = statuses(&v);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].0.ends_with(&format!("{name}:a/db.yaml")), "{got:?}");
        assert!(got[1].0.ends_with(&format!("{name}:b/db.yaml")), "{got:?}");
        assert_eq!(v["summary"]["skippedDocuments"], 1);
    }
}

/// A sample that does not parse is a failed case naming file, document and line; the other
/// samples are still tested.
#[test]
fn an_unreadable_sample_fails_that_sample_only() {
    let dir = scratch("unreadable");
    write(&dir, "good.yaml", CLEAN_V2);
    write(
        &dir,
        "bad.yaml",
        &format!("{CLEAN_V1}---\napiVersion: example.org/v1\nkind: Database\nspec: {{a: [1, 2}}\n"),
    );
    let o = db(dir.to_str().unwrap(), &["-o", "json"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let v = json(&o);
    let bad = v["cases"].as_array().unwrap().iter().find(|c| c["status"] == "error").unwrap();
    let detail = bad["detail"].as_str().unwrap();
    assert!(detail.contains("bad.yaml document 2 line"), "{detail}");
    assert!(detail.contains("not valid YAML"), "{detail}");
    assert_eq!(bad["data"]["document"], 2);
    assert!(bad["data"]["line"].as_u64().unwrap() >= 8, "{bad}");
    assert_eq!(v["summary"]["error"], 1);
    assert_eq!(v["summary"]["pass"], 4, "good.yaml and bad.yaml#1 still ran: {}", v["summary"]);
    // Only the unreadable sample fails, and --fail-on none reports it without failing.
    assert_eq!(code(&db(dir.to_str().unwrap(), &["--fail-on", "none"])), 0);
}

/// A sample its own version's schema refuses is a failed case naming the field.
#[test]
fn a_sample_breaking_its_schema_fails_naming_the_field() {
    let dir = scratch("schema");
    write(
        &dir,
        "ten.yaml",
        "apiVersion: example.org/v2\nkind: Database\nmetadata: {name: ten}\nspec: {storageGB: ten, memory: \"1\", replicas: 1, colour: red}\n",
    );
    let o = db(dir.to_str().unwrap(), &[]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.lines().any(|l| l.contains("ten.yaml  v2 schema") && l.contains(" error ")), "{out}");
    assert!(out.contains("spec.storageGB: must be of type integer, got string \"ten\""), "{out}");
    // Its rules are not reported unexercised: the sample that would have exercised them failed.
    assert!(!out.contains("exercised by no sample"), "{out}");
    assert!(out.contains("1 sample(s), rule coverage not judged"), "{out}");
    assert!(out.contains("spec.colour"), "{out}");
}

/// Nothing of the target's kinds: exit 2, saying what was found instead.
#[test]
fn a_run_that_tests_nothing_says_what_it_found() {
    let dir = scratch("nothing");
    write(&dir, "kustomization.yaml", "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\n");
    write(
        &dir,
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n---\napiVersion: v1\nkind: ConfigMap\nmetadata: {name: b}\n",
    );
    let o = db(dir.to_str().unwrap(), &[]);
    assert_eq!(code(&o), 2);
    let err = stderr(&o);
    assert!(
        err.contains("no Database (example.org) objects in --samples")
            && err.contains(
                "found 3 document(s) of other kinds: 2 ConfigMap, 1 Kustomization; nothing was tested"
            ),
        "{err}"
    );
    let empty = scratch("nothing-empty");
    write(&empty, "empty.yaml", "");
    let err = stderr(&db(empty.to_str().unwrap(), &[]));
    assert!(err.contains("found 1 file(s) with no objects in them"), "{err}");
}

/// Every bound refuses with a message naming its flag.
#[test]
fn the_bounds_refuse_naming_the_flag() {
    let dir = scratch("bounds");
    write(&dir, "a/b/c/db.yaml", CLEAN_V2);
    write(&dir, "two.yaml", &format!("{CLEAN_V2}---\n{CLEAN_V2}"));
    for (flag, value) in [("--max-depth", "2"), ("--max-file-size", "100"), ("--max-documents", "2")] {
        let o = db(dir.to_str().unwrap(), &[flag, value]);
        assert_eq!(code(&o), 2, "{flag}");
        assert!(stderr(&o).contains(&format!("{flag} {value}")), "{flag}: {}", stderr(&o));
    }
    assert_eq!(code(&db(dir.to_str().unwrap(), &["--max-depth", "3"])), 0);
}

/// --version-pair keeps only the round trips named; --skip-identity drops the v → v checks.
#[test]
fn version_pairs_and_skip_identity_choose_the_round_trips() {
    let dir = scratch("pairs");
    write(&dir, "v2.yaml", CLEAN_V2);
    write(&dir, "v1.yaml", CLEAN_V1);
    let names = |extra: &[&str]| -> Vec<String> {
        let mut args = vec!["-o", "json"];
        args.extend_from_slice(extra);
        statuses(&json(&db(dir.to_str().unwrap(), &args))).into_iter().map(|(_, n, _)| n).collect()
    };
    assert_eq!(names(&[]), ["v1 → v1", "v1 → v2 → v1", "v2 → v2", "v2 → v1 → v2"]);
    assert_eq!(names(&["--skip-identity"]), ["v1 → v2 → v1", "v2 → v1 → v2"]);
    assert_eq!(names(&["--version-pair", "v2:v1"]), ["v2 → v1 → v2"]);
    assert_eq!(names(&["--version-pair", "v2:v1", "--version-pair", "v1:v1"]), ["v1 → v1", "v2 → v1 → v2"]);
    let o = db(dir.to_str().unwrap(), &["--version-pair", "v2:v9"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("v9 is not a version of the target; it has v2, v1"), "{}", stderr(&o));
    let o = db(dir.join("v2.yaml").to_str().unwrap(), &["--version-pair", "v1:v2"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("no round trip matched --version-pair v1:v2: the samples are at v2 (1)"),
        "{}",
        stderr(&o)
    );
}

/// Any number of workers gives the report one worker gives, in sample order.
#[test]
fn concurrency_does_not_change_the_report() {
    let dir = scratch("concurrency");
    for i in 0..40 {
        let text = if i % 3 == 0 {
            CLEAN_V1.replace("name: old", &format!("name: s{i}"))
        } else {
            CLEAN_V2
                .replace("name: clean", &format!("name: s{i}"))
                .replace("4294967296", if i % 3 == 1 { "4Gi" } else { "4294967296" })
        };
        write(&dir, &format!("d{}/s{i:02}.yaml", i % 4), &text);
    }
    let run = |n: &str, format: &str| {
        let o = db(dir.to_str().unwrap(), &["--concurrency", n, "-o", format]);
        assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
        stdout(&o)
    };
    assert_eq!(run("1", "table"), run("4", "table"));
    let strip = |text: String| {
        let mut v: Value = serde_json::from_str(&text).unwrap();
        for c in v["cases"].as_array_mut().unwrap() {
            c["seconds"] = Value::Null;
        }
        v
    };
    let one = strip(run("1", "json"));
    assert_eq!(one, strip(run("3", "json")));
    assert_eq!(one["summary"]["total"], 80);
    assert_eq!(one["summary"]["acknowledgedLoss"], 13);
    assert_eq!(code(&db(dir.to_str().unwrap(), &["--concurrency", "0"])), 2);
}

/// The five run outcomes of the reference's `--fail-on` matrix, each a samples directory.
fn outcome(name: &str) -> String {
    let dir = scratch(&format!("outcome-{name}"));
    let sample = match name {
        "passed" => CLEAN_V2.to_string(),
        // "4Gi" comes back as "4294967296": the Quantity rule acknowledges it.
        "acknowledged" => CLEAN_V2.replace("\"4294967296\"", "4Gi"),
        // "01" → 1 → "1": TypeCoerce claims to be lossless, so this loss is nobody's.
        "unacknowledged" => CLEAN_V1.replace("replicas: \"1\"", "replicas: \"01\""),
        // finer than a milli-unit: the Quantity rule cannot convert it.
        "error" => CLEAN_V2.replace("\"4294967296\"", "1n"),
        // No memory: the Quantity rule (spoke v1 rule 1) is exercised by no sample.
        "unexercised" => CLEAN_V2.replace(", memory: \"4294967296\"", ""),
        _ => unreachable!(),
    };
    write(&dir, "sample.yaml", &sample);
    dir.to_string_lossy().into_owned()
}

#[test]
fn fail_on_follows_the_reference_matrix() {
    // (outcome, [none, warn, loss, loss --strict, none --strict])
    let table: [(&str, [i32; 5]); 5] = [
        ("passed", [0, 0, 0, 0, 0]),
        ("acknowledged", [0, 0, 0, 0, 0]),
        ("unacknowledged", [0, 1, 1, 1, 0]),
        ("error", [0, 1, 1, 1, 0]),
        ("unexercised", [0, 1, 0, 1, 0]),
    ];
    let flags: [&[&str]; 5] = [
        &["--fail-on", "none"],
        &["--fail-on", "warn"],
        &["--fail-on", "loss"],
        &["--strict"],
        &["--fail-on", "none", "--strict"],
    ];
    for (name, want) in table {
        let dir = outcome(name);
        // The outcome is what the name says.
        let v = json(&db(&dir, &["-o", "json", "--fail-on", "none"]));
        let status = match name {
            "passed" | "unexercised" => "pass",
            "acknowledged" => "acknowledged-loss",
            "unacknowledged" => "loss",
            _ => "error",
        };
        assert!(statuses(&v).iter().any(|(_, _, s)| s == status), "{name}: {v}");
        assert_eq!(v["summary"]["unexercisedRules"], if name == "unexercised" { 1 } else { 0 }, "{name}");
        for (f, want) in flags.iter().zip(want) {
            let o = db(&dir, f);
            assert_eq!(code(&o), want, "{name} {f:?}: {}{}", stdout(&o), stderr(&o));
        }
    }
    // The unexercised rule is named by spoke and index, and says why it fails.
    let o = db(&outcome("unexercised"), &["--fail-on", "warn"]);
    assert!(
        stdout(&o).contains("warning: spoke v1 rule 1 (Quantity) was exercised by no sample"),
        "{}",
        stdout(&o)
    );
    assert!(stderr(&o).contains("1 rule(s) exercised by no sample (--fail-on warn)"), "{}", stderr(&o));
    // Anything else is a usage error.
    assert_eq!(code(&db(&outcome("passed"), &["--fail-on", "loud"])), 2);
}

/// --only-failures keeps the failing rows; the summary still counts every round trip.
#[test]
fn only_failures_hides_passing_rows() {
    let dir = scratch("only-failures");
    write(&dir, "good.yaml", CLEAN_V2);
    write(&dir, "bad.yaml", &CLEAN_V2.replace("\"4294967296\"", "1n").replace("name: clean", "name: bad"));
    let o = db(dir.to_str().unwrap(), &["--only-failures"]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(!out.contains("good.yaml"), "{out}");
    assert!(out.contains("bad.yaml  v2 → v1 → v2  error"), "{out}");
    assert!(out.contains("4 round trip(s): 3 pass, 0 acknowledged loss, 0 loss, 1 error"), "{out}");
}
