//! diff, compat, lint, versions and plan on copies of the docs/examples/convctl fixtures, edited
//! in scratch directories. Table outputs are compared with tests/golden/compare/*.txt (run with
//! UPDATE_GOLDEN=1 to rewrite them after a deliberate change); every command runs inside its
//! scratch directory so the paths it prints are relative and stable.

mod common;
use common::*;

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

fn at(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_convctl")).current_dir(dir).args(args).output().expect("convctl runs")
}

fn copy(name: &str, dir: &Path, as_name: &str) -> PathBuf {
    let to = dir.join(as_name);
    fs::create_dir_all(to.parent().expect("parent")).expect("mkdir");
    fs::copy(examples().join(name), &to).expect("copy fixture");
    to
}

/// Rewrites a YAML file through `edit`.
fn edit(path: &Path, edit: impl FnOnce(&mut serde_yaml::Value)) {
    let mut v: serde_yaml::Value =
        serde_yaml::from_str(&fs::read_to_string(path).expect("read")).expect("yaml");
    edit(&mut v);
    fs::write(path, serde_yaml::to_string(&v).expect("write yaml")).expect("write");
}

fn replace(path: &Path, from: &str, to: &str) {
    let text = fs::read_to_string(path).expect("read");
    assert!(text.contains(from), "{} has no {from:?}", path.display());
    fs::write(path, text.replacen(from, to, 1)).expect("write");
}

fn golden(name: &str, actual: &str) {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/compare").join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        fs::write(&path, actual).expect("write golden");
        return;
    }
    let want = fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e}; run with UPDATE_GOLDEN=1", path.display()));
    assert_eq!(actual, want, "output differs from {}", path.display());
}

fn json_of(o: &Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

fn rules_of(v: &mut serde_yaml::Value, spoke: usize) -> &mut Vec<serde_yaml::Value> {
    v["spec"]["spokes"][spoke]["rules"].as_sequence_mut().expect("rules")
}

// ---- diff ----

#[test]
fn diff_of_a_config_with_itself_and_with_its_rules_reordered_is_clean() {
    let d = scratch("diff-equal");
    copy("widgets-xrd.yaml", &d, "xrd.yaml");
    copy("widgets-config.yaml", &d, "a.yaml");
    let b = copy("widgets-config.yaml", &d, "b.yaml");
    let o = at(&d, &["diff", "-c", "a.yaml", "-c", "a.yaml", "--xrd", "xrd.yaml"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("no differences"), "{}", stdout(&o));

    // Every rule of both spokes in reverse order: claims are matched by strategy and paths.
    edit(&b, |v| {
        rules_of(v, 0).reverse();
        rules_of(v, 1).reverse();
    });
    let o = at(&d, &["diff", "-c", "a.yaml", "-c", "b.yaml", "--xrd", "xrd.yaml", "-o", "json"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let j = json_of(&o);
    assert_eq!(j["summary"]["hasDeltas"], false);
    assert_eq!(j["findings"].as_array().map(Vec::len), Some(0));
}

#[test]
fn diff_of_one_removed_rule_names_the_rule_and_the_paths() {
    let d = scratch("diff-change");
    copy("databases-crd.yaml", &d, "crd.yaml");
    copy("databases-config.yaml", &d, "old.yaml");
    let new = copy("databases-config.yaml", &d, "new.yaml");
    edit(&new, |v| {
        rules_of(v, 0).remove(0);
    });
    let o = at(&d, &["diff", "-c", "old.yaml", "-c", "new.yaml", "--crd", "crd.yaml"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains("- rule 0 (FieldRename hub spec.storageGB ↔ spoke spec.storageSize) of old.yaml is gone from new.yaml"),
        "{out}"
    );
    assert!(out.contains("hub field spec.storageGB became uncovered: rule 0 (FieldRename"), "{out}");
    assert!(out.contains("at old.yaml:12 spec.spokes[0].rules[0]"), "{out}");
    assert!(
        out.contains("hub→spoke lossless → lossy: spec.storageGB, spec.storageSize uncovered in new.yaml"),
        "{out}"
    );
    golden("diff-removed-rule.txt", &out);

    let o = at(&d, &["diff", "-c", "old.yaml", "-c", "new.yaml", "--crd", "crd.yaml", "-o", "json"]);
    assert_eq!(code(&o), 1);
    let j = json_of(&o);
    let spoke = &j["summary"]["spokes"][0];
    assert_eq!(spoke["version"], "v1");
    assert_eq!(spoke["ruleClaimsRemoved"][0]["strategy"], "FieldRename");
    assert_eq!(spoke["ruleClaimsRemoved"][0]["rule"], 0);
    assert_eq!(spoke["uncoveredHubAdded"][0], "spec.storageGB");
    assert_eq!(spoke["uncoveredSpokeAdded"][0], "spec.storageSize");
    // The reordered TypeCoerce and Quantity rules (now at 0 and 1) are not deltas.
    let rules: Vec<&str> =
        j["findings"].as_array().expect("findings").iter().filter_map(|f| f["rule"].as_str()).collect();
    assert_eq!(rules.iter().filter(|r| **r == "rule-removed").count(), 1, "{rules:?}");
    assert!(!rules.contains(&"rule-added"), "{rules:?}");
    let removed = j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| f["rule"] == "rule-removed")
        .expect("rule-removed");
    assert_eq!(removed["location"]["path"], "spec.spokes[0].rules[0]");
    assert_eq!(removed["location"]["file"], "old.yaml");
    assert_eq!(removed["location"]["line"], 12, "the line of `- strategy: FieldRename`");
}

#[test]
fn diff_reports_hub_change_and_spokes_added_and_removed() {
    let d = scratch("diff-spokes");
    copy("widgets-xrd.yaml", &d, "xrd.yaml");
    copy("widgets-config.yaml", &d, "a.yaml");
    let b = copy("widgets-config.yaml", &d, "b.yaml");
    edit(&b, |v| {
        v["spec"]["spokes"].as_sequence_mut().expect("spokes").remove(1);
    });
    let o = at(&d, &["diff", "-c", "a.yaml", "-c", "b.yaml", "--xrd", "xrd.yaml", "-o", "json"]);
    assert_eq!(code(&o), 1, "{}", stderr(&o));
    let j = json_of(&o);
    assert_eq!(j["summary"]["spokesRemoved"][0], "v1");
    let o = at(&d, &["diff", "-c", "b.yaml", "-c", "a.yaml", "--xrd", "xrd.yaml", "-o", "json"]);
    assert_eq!(json_of(&o)["summary"]["spokesAdded"][0], "v1");
    assert_eq!(code(&o), 1);

    let c = copy("widgets-config.yaml", &d, "c.yaml");
    replace(&c, "hubVersion: v3", "hubVersion: v2");
    let o = at(&d, &["diff", "-c", "a.yaml", "-c", "c.yaml", "--xrd", "xrd.yaml", "-o", "json"]);
    assert_eq!(code(&o), 1);
    let j = json_of(&o);
    assert_eq!(j["summary"]["hubVersionChange"]["from"], "v3");
    assert_eq!(j["summary"]["hubVersionChange"]["to"], "v2");
    let hub = j["findings"]
        .as_array()
        .expect("f")
        .iter()
        .find(|f| f["rule"] == "hub-changed")
        .expect("hub-changed");
    assert_eq!(hub["location"]["path"], "spec.hubVersion");
    assert_eq!(hub["location"]["file"], "c.yaml");
}

#[test]
fn diff_usage_errors_exit_2() {
    let d = scratch("diff-usage");
    copy("widgets-xrd.yaml", &d, "xrd.yaml");
    copy("widgets-config.yaml", &d, "a.yaml");
    copy("databases-crd.yaml", &d, "crd.yaml");
    let o = at(&d, &["diff", "-c", "a.yaml", "--xrd", "xrd.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("exactly two configs"), "{}", stderr(&o));
    let o = at(&d, &["diff", "-c", "a.yaml", "-c", "a.yaml", "--crd", "crd.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("--xrd"), "{}", stderr(&o));
}

// ---- compat ----

fn revisions(name: &str) -> (PathBuf, PathBuf) {
    let d = scratch(name);
    for side in ["base", "head"] {
        copy("databases-crd.yaml", &d, &format!("{side}/crd.yaml"));
        copy("databases-config.yaml", &d, &format!("{side}/config/databases.yaml"));
        fs::write(d.join(side).join("kustomization.yaml"), "resources: [crd.yaml, config/databases.yaml]\n")
            .expect("write");
    }
    (d.clone(), d.join("head"))
}

#[test]
fn compat_of_identical_revisions_and_of_an_added_field_passes() {
    let (d, head) = revisions("compat-safe");
    let o = at(&d, &["compat", "--base", "base", "--head", "head"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("no differences"), "{}", stdout(&o));

    // An optional field added to both versions: copied as identical, safe for stored objects.
    let crd = head.join("crd.yaml");
    let text = fs::read_to_string(&crd).expect("read");
    fs::write(
        &crd,
        text.replace(
            "replicas: {type: integer}",
            "replicas: {type: integer}\n                labels: {type: string}",
        )
        .replace(
            "replicas: {type: string}",
            "replicas: {type: string}\n                labels: {type: string}",
        ),
    )
    .expect("write");
    let o = at(&d, &["compat", "--base", "base", "--head", "head", "-o", "json"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let j = json_of(&o);
    assert_eq!(j["summary"]["breaking"], 0);
    assert_eq!(j["summary"]["safe"], 2, "{}", stdout(&o));
    assert!(j["findings"].as_array().expect("findings").iter().all(|f| f["rule"] == "FieldAdded"));
}

#[test]
fn compat_fails_on_breaking_changes_and_names_their_paths() {
    let (d, head) = revisions("compat-breaking");
    let crd = head.join("crd.yaml");
    // v1 no longer served, and v2's replicas becomes a string.
    let text = fs::read_to_string(&crd).expect("read");
    let (v2, v1) = text.split_at(text.find("- name: v1").expect("v1"));
    let text = v2.replace("replicas: {type: integer}", "replicas: {type: string}")
        + &v1.replacen("served: true", "served: false", 1);
    fs::write(&crd, text).expect("write");
    // The config drops its TypeCoerce rule.
    edit(&head.join("config/databases.yaml"), |v| {
        rules_of(v, 0).remove(2);
    });
    let o = at(&d, &["compat", "--base", "base", "--head", "head"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("[breaking] ServedVersionRemoved: version v1 is no longer served"), "{out}");
    assert!(
        out.contains(
            "[breaking] FieldTypeChanged: version v2: field spec.replicas changed from integer to string"
        ),
        "{out}"
    );
    assert!(
        out.contains("at head/crd.yaml#1:23 spec.versions[0].schema.openAPIV3Schema spec.replicas"),
        "{out}"
    );
    assert!(
        out.contains(
            "RuleRemoved: spoke v1: rule 2 (TypeCoerce hub spec.replicas ↔ spoke spec.replicas) was removed"
        ),
        "{out}"
    );
    assert!(out.contains("at base/config/databases.yaml:18 spec.spokes[0].rules[2]"), "{out}");
    golden("compat-breaking.txt", &out);

    // Acknowledging every breaking class passes, and says which were used.
    let j = json_of(&at(&d, &["compat", "--base", "base", "--head", "head", "-o", "json"]));
    let mut classes: Vec<String> = j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .filter(|f| f["fails"] == true)
        .map(|f| f["rule"].as_str().expect("rule").to_string())
        .collect();
    classes.sort();
    classes.dedup();
    let mut args = vec!["compat", "--base", "base", "--head", "head"];
    for c in &classes {
        args.extend(["--allow", c.as_str()]);
    }
    let o = at(&d, &args);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("(allowed by --allow ServedVersionRemoved)"), "{}", stdout(&o));

    let o = at(&d, &["compat", "--base", "base", "--head", "head", "--allow", "Everything"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("not a change class"), "{}", stderr(&o));
}

#[test]
fn compat_reads_single_files_and_refuses_a_revision_without_its_definition() {
    let d = scratch("compat-files");
    let both = fs::read_to_string(examples().join("databases-config.yaml")).expect("read")
        + "---\n"
        + &fs::read_to_string(examples().join("databases-crd.yaml")).expect("read");
    fs::write(d.join("old.yaml"), &both).expect("write");
    fs::write(d.join("new.yaml"), &both).expect("write");
    let o = at(&d, &["compat", "--base", "old.yaml", "--head", "new.yaml"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    copy("databases-config.yaml", &d, "lonely/config.yaml");
    let o = at(&d, &["compat", "--base", "old.yaml", "--head", "lonely"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("targets CRD databases.example.org, which is not in the same tree"),
        "{}",
        stderr(&o)
    );
}

// ---- lint ----

fn lint_tree(name: &str) -> PathBuf {
    let d = scratch(name);
    copy("databases-crd.yaml", &d, "tree/good/crd.yaml");
    copy("databases-config.yaml", &d, "tree/good/config.yaml");
    copy("widgets-xrd.yaml", &d, "tree/broken/schemas/xrd.yaml");
    let bad = copy("widgets-config.yaml", &d, "tree/broken/config.yaml");
    // v1's only rule gone: its size enum (small/medium/large) no longer maps to the hub's.
    edit(&bad, |v| rules_of(v, 1).clear());
    fs::write(d.join("tree/good/kustomization.yaml"), "resources: [crd.yaml, config.yaml]\n").expect("write");
    fs::create_dir_all(d.join("tree/.git")).expect("mkdir");
    fs::write(d.join("tree/.git/config.yaml"), "kind: XRDConversionConfig\n: broken").expect("write");
    d
}

#[test]
fn lint_finds_pairs_and_validates_every_config_in_a_tree() {
    let d = lint_tree("lint-tree");
    let o = at(&d, &["lint", "tree"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    assert!(out.contains("OK       tree/good/config.yaml#1"), "{out}");
    assert!(out.contains("INVALID  tree/broken/config.yaml#1"), "{out}");
    assert!(
        out.contains("tree/broken/config.yaml:\n  error   document 1, line 101, spec.spokes[1]: spoke v1"),
        "{out}"
    );
    // The hidden directory is not searched.
    assert!(!out.contains(".git"), "{out}");
    golden("lint-tree.txt", &out);

    let o = at(&d, &["lint", "tree/good"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let o = at(&d, &["lint", "tree", "--fail-on", "none"]);
    assert_eq!(code(&o), 0);
    let o = at(&d, &["lint", "tree", "--exclude", "broken"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let o = at(&d, &["lint", "tree", "--exclude", "tree/broken/config.yaml", "-o", "json"]);
    let j = json_of(&o);
    assert_eq!((j["summary"]["configs"].as_u64(), j["summary"]["schemas"].as_u64()), (Some(1), Some(2)));

    // A config whose definition lives elsewhere is unpaired, until --schema-dir names it.
    let o = at(&d, &["lint", "tree/broken/config.yaml", "-o", "json"]);
    assert_eq!(code(&o), 1);
    assert_eq!(json_of(&o)["summary"]["unpaired"], 1);
    let o = at(&d, &["lint", "tree/broken/config.yaml", "--schema-dir", "tree/broken/schemas", "-o", "json"]);
    let j = json_of(&o);
    assert_eq!(j["summary"]["unpaired"], 0);
    assert_eq!(j["summary"]["invalid"], 1);
}

#[test]
fn lint_reports_duplicates_unparsable_configs_and_reference_configs() {
    let d = scratch("lint-dup");
    copy("databases-crd.yaml", &d, "crd.yaml");
    copy("databases-config.yaml", &d, "a.yaml");
    copy("databases-config.yaml", &d, "b.yaml");
    copy("reference-config.yaml", &d, "ref.yaml");
    fs::write(d.join("c.yaml"), "kind: CRDConversionConfig\nspec: [unclosed\n").expect("write");
    let o = at(&d, &["lint", ".", "-o", "json"]);
    assert_eq!(code(&o), 1);
    let j = json_of(&o);
    let rules: Vec<&str> =
        j["findings"].as_array().expect("findings").iter().filter_map(|f| f["rule"].as_str()).collect();
    assert!(rules.contains(&"duplicate-target"), "{rules:?}");
    assert!(rules.contains(&"parse-error"), "{rules:?}");
    assert!(rules.contains(&"api-version"), "{rules:?}");
    let dup =
        j["findings"].as_array().expect("f").iter().find(|f| f["rule"] == "duplicate-target").expect("dup");
    assert_eq!(dup["location"]["file"], "./b.yaml");
    assert!(dup["message"].as_str().expect("msg").contains("./a.yaml#1"), "{dup}");
}

#[test]
fn pre_commit_hook_runs_convctl_lint_on_yaml() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let hooks: serde_yaml::Value =
        serde_yaml::from_str(&fs::read_to_string(root.join(".pre-commit-hooks.yaml")).expect("hooks file"))
            .expect("yaml");
    let hook = hooks
        .as_sequence()
        .and_then(|s| s.iter().find(|h| h["id"] == "convctl-lint"))
        .expect("convctl-lint hook");
    assert_eq!(hook["language"], "system");
    assert_eq!(hook["entry"], "convctl lint");
    let files = hook["files"].as_str().expect("files");
    assert_eq!(files, r"\.(ya?ml)$");
    // The entry is a real command: run it the way pre-commit does (no file names).
    let d = lint_tree("lint-hook");
    let o = at(&d.join("tree/good"), &["lint"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
}

// ---- versions ----

#[test]
fn versions_lists_served_storage_deprecated_and_role() {
    let d = scratch("versions");
    copy("widgets-config.yaml", &d, "config.yaml");
    let xrd = copy("widgets-xrd.yaml", &d, "xrd.yaml");
    replace(
        &xrd,
        "    - name: v1\n      served: true\n",
        "    - name: v1\n      served: true\n      deprecated: true\n      deprecationWarning: v1 goes away; use v3\n",
    );
    let o = at(&d, &["versions", "--xrd", "xrd.yaml", "-c", "config.yaml"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    golden("versions-widgets.txt", &stdout(&o));
    let j = json_of(&at(&d, &["versions", "--xrd", "xrd.yaml", "-c", "config.yaml", "-o", "json"]));
    let v = &j["summary"]["versions"];
    assert_eq!(v[0]["name"], "v3");
    assert_eq!(v[0]["referenceable"], true);
    assert_eq!(v[0]["role"], "hub");
    assert_eq!(v[2]["deprecated"], true);
    assert_eq!(v[2]["stored"], "UNKNOWN");

    // A served version with no role fails: every conversion to or from it would.
    let cfg = d.join("config.yaml");
    edit(&cfg, |v| {
        v["spec"]["spokes"].as_sequence_mut().expect("spokes").remove(1);
    });
    let o = at(&d, &["versions", "--xrd", "xrd.yaml", "-c", "config.yaml"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("version v1 is served but is neither the hub nor a spoke"), "{}", stdout(&o));
}

// ---- plan ----

#[test]
fn plan_orders_the_steps_to_a_new_hub_and_marks_what_is_unknown_offline() {
    let d = scratch("plan");
    copy("databases-crd.yaml", &d, "crd.yaml");
    copy("databases-config.yaml", &d, "config.yaml");
    let o = at(&d, &["plan", "--to", "v1", "--crd", "crd.yaml", "-c", "config.yaml"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));
    let out = stdout(&o);
    golden("plan-to-v1.txt", &out);
    let titles: Vec<&str> = out.lines().filter(|l| l.contains(". [")).collect();
    assert_eq!(titles.len(), 8, "{out}");
    assert!(titles[0].contains("1. [DONE] Serve v1"), "{out}");
    assert!(titles[3].starts_with("▶ 4. [READY] Promote v1 to the hub"), "{out}");
    assert!(titles[4].contains("[UNKNOWN] Rewrite every stored object at v1"), "{out}");
    assert!(titles[6].contains("[BLOCKED] Stop serving v2"), "{out}");
    assert!(
        out.contains("kubectl get crd databases.example.org -o jsonpath='{.status.storedVersions}'"),
        "{out}"
    );

    // With the cluster-only steps verified, retirement waits only for the promotion.
    let j = json_of(&at(
        &d,
        &["plan", "--to", "v1", "--crd", "crd.yaml", "-c", "config.yaml", "--assume-verified", "-o", "json"],
    ));
    let stop = &j["summary"]["steps"][6];
    assert_eq!(stop["status"], "blocked");
    assert!(stop["blockedBy"].as_str().expect("why").contains("step 4 (Promote v1 to the hub)"), "{stop}");

    // Once v1 is the storage version and the hub, the promotion is done.
    let crd = d.join("crd.yaml");
    replace(&crd, "served: true\n      storage: true", "served: true\n      storage: false");
    replace(
        &crd,
        "served: true\n      storage: false\n      schema:\n        openAPIV3Schema:\n          type: object\n          properties:\n            spec:\n              type: object\n              properties:\n                storageSize",
        "served: true\n      storage: true\n      schema:\n        openAPIV3Schema:\n          type: object\n          properties:\n            spec:\n              type: object\n              properties:\n                storageSize",
    );
    replace(&d.join("config.yaml"), "hubVersion: v2", "hubVersion: v1");
    let j = json_of(&at(&d, &["plan", "--to", "v1", "--crd", "crd.yaml", "-c", "config.yaml", "-o", "json"]));
    assert_eq!(j["summary"]["steps"][3]["status"], "done", "{}", j["summary"]["steps"][3]);

    let o = at(&d, &["plan", "--to", "v9", "--crd", "crd.yaml"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("has versions v2, v1"), "{}", stderr(&o));
}

#[test]
fn plan_of_an_xrd_retargets_compositions_and_reads_the_xrd() {
    let d = scratch("plan-xrd");
    copy("widgets-xrd.yaml", &d, "xrd.yaml");
    copy("widgets-config.yaml", &d, "config.yaml");
    let j = json_of(&at(&d, &["plan", "--to", "v2", "--xrd", "xrd.yaml", "-c", "config.yaml", "-o", "json"]));
    let steps = j["summary"]["steps"].as_array().expect("steps");
    let titles: Vec<&str> = steps.iter().filter_map(|s| s["title"].as_str()).collect();
    assert_eq!(titles[4], "Retarget Compositions at v2", "{titles:?}");
    assert_eq!(steps[4]["status"], "unknown");
    assert!(
        steps[0]["verify"]
            .as_str()
            .expect("verify")
            .starts_with("kubectl get compositeresourcedefinition xwidgets.example.org")
    );
    assert!(
        steps[3]["run"].as_str().expect("run").contains("move referenceable: true from v3 to v2"),
        "{}",
        steps[3]
    );
}

#[test]
fn plan_retire_starts_by_moving_the_hub_off_the_version() {
    let d = scratch("plan-retire");
    copy("databases-crd.yaml", &d, "crd.yaml");
    copy("databases-config.yaml", &d, "config.yaml");
    let j =
        json_of(&at(&d, &["plan", "--retire", "v2", "--crd", "crd.yaml", "-c", "config.yaml", "-o", "json"]));
    let steps = j["summary"]["steps"].as_array().expect("steps");
    assert_eq!(steps[0]["title"], "Move the hub off v2");
    assert_eq!(steps[0]["status"], "ready");
    let o = at(&d, &["plan", "--retire", "v1", "--crd", "crd.yaml", "-c", "config.yaml"]);
    assert_eq!(code(&o), 0);
    golden("plan-retire-v1.txt", &stdout(&o));
    assert!(stdout(&o).contains("▶ 2. [READY] Deprecate v1"), "{}", stdout(&o));
}

#[test]
fn lint_github_annotations_carry_file_and_line() {
    let d = lint_tree("lint-github");
    let o = at(&d, &["lint", "tree", "-o", "github"]);
    assert_eq!(code(&o), 1);
    let out = stdout(&o);
    assert!(out.contains("::error file=tree/broken/config.yaml,line=101,title=compile-error"), "{out}");
}

/// Every output line the docs show for these commands is one the command prints (lines cut
/// with `…` and `...` aside), so the examples cannot drift from the program.
#[test]
fn docs_examples_are_real_outputs() {
    let docs = fs::read_to_string(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../docs/convctl.md"))
        .expect("docs/convctl.md");
    let goldens = [
        ("diff", "diff-removed-rule.txt"),
        ("compat", "compat-breaking.txt"),
        ("lint", "lint-tree.txt"),
        ("versions", "versions-widgets.txt"),
        ("plan", "plan-to-v1.txt"),
    ];
    for (section, file) in goldens {
        let body = docs
            .split(&format!("\n## {section}\n"))
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .unwrap_or_else(|| panic!("docs/convctl.md has no ## {section}"));
        let want = fs::read_to_string(
            PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/golden/compare").join(file),
        )
        .expect("golden");
        let example = body
            .split("```")
            .find(|block| {
                block.trim_start().starts_with(&format!("\n$ convctl {section}"))
                    || block.starts_with(&format!("\n$ convctl {section}"))
            })
            .unwrap_or_else(|| panic!("## {section} has no `$ convctl {section}` example"));
        let mut checked = 0;
        for line in example
            .lines()
            .filter(|l| !l.is_empty() && !l.starts_with("$ ") && !l.contains('…') && l.trim() != "...")
        {
            assert!(
                want.lines().any(|w| w == line),
                "## {section}: {line:?} is not in tests/golden/compare/{file}"
            );
            checked += 1;
        }
        assert!(checked >= 3, "## {section}: only {checked} lines checked");
    }
}

#[test]
fn lint_points_a_config_wide_error_at_its_field() {
    let d = scratch("lint-hub");
    copy("databases-crd.yaml", &d, "crd.yaml");
    let cfg = copy("databases-config.yaml", &d, "config.yaml");
    replace(&cfg, "hubVersion: v2", "hubVersion: v1");
    let o = at(&d, &["lint", ".", "-o", "json"]);
    assert_eq!(code(&o), 1);
    let j = json_of(&o);
    let hub = j["findings"]
        .as_array()
        .expect("findings")
        .iter()
        .find(|f| {
            f["message"].as_str().is_some_and(|m| m.starts_with("hubVersion v1 is not the storage version"))
        })
        .unwrap_or_else(|| panic!("no hub finding: {j}"));
    assert_eq!(hub["location"]["path"], "spec.hubVersion");
    assert_eq!(hub["location"]["line"], 8);
}

#[test]
fn every_format_of_the_shared_report_renders_these_commands() {
    let d = scratch("formats");
    copy("databases-crd.yaml", &d, "crd.yaml");
    copy("databases-config.yaml", &d, "old.yaml");
    let new = copy("databases-config.yaml", &d, "new.yaml");
    edit(&new, |v| {
        rules_of(v, 0).remove(0);
    });
    let diff = ["diff", "-c", "old.yaml", "-c", "new.yaml", "--crd", "crd.yaml"];
    let md = at(&d, &[&diff[..], &["-o", "markdown"]].concat());
    assert_eq!(code(&md), 1);
    assert!(
        stdout(&md).contains("rule 0 (FieldRename hub spec.storageGB ↔ spoke spec.storageSize)"),
        "{}",
        stdout(&md)
    );
    let sarif = json_of(&at(&d, &[&diff[..], &["-o", "sarif"]].concat()));
    assert_eq!(sarif["version"], "2.1.0");
    assert!(sarif["runs"][0]["results"].as_array().is_some_and(|r| r.len() == 6), "{sarif}");

    // plan's steps are cases: one JUnit testcase per step, none failing.
    let junit =
        stdout(&at(&d, &["plan", "--to", "v1", "--crd", "crd.yaml", "-c", "old.yaml", "-o", "junit"]));
    assert_eq!(junit.matches("<testcase").count(), 8, "{junit}");
    assert!(!junit.contains("<failure"), "{junit}");

    // --output-file: the report goes to the file, the summary line to stdout.
    let o = at(&d, &[&diff[..], &["-o", "json", "--output-file", "diff.json"]].concat());
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).starts_with("diff: 6 difference(s)"), "{}", stdout(&o));
    let j: Value =
        serde_json::from_str(&fs::read_to_string(d.join("diff.json")).expect("report file")).expect("json");
    assert_eq!(j["summary"]["deltas"], 6);
}

#[test]
fn compat_reads_git_revisions_as_the_reference_does() {
    let d = scratch("compat-git");
    let git = |args: &[&str]| {
        let o = Command::new("git")
            .current_dir(&d)
            .args([
                "-c",
                "user.name=convctl",
                "-c",
                "user.email=convctl@localhost",
                "-c",
                "init.defaultBranch=main",
            ])
            .args(args)
            .output()
            .expect("git runs");
        assert!(o.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&o.stderr));
    };
    git(&["init", "-q"]);
    copy("databases-crd.yaml", &d, "deploy/crd.yaml");
    copy("databases-config.yaml", &d, "deploy/config.yaml");
    git(&["add", "."]);
    git(&["commit", "-qm", "base"]);
    let crd = d.join("deploy/crd.yaml");
    let text = fs::read_to_string(&crd).expect("read");
    let (v2, v1) = text.split_at(text.find("- name: v1").expect("v1"));
    fs::write(&crd, v2.to_string() + &v1.replacen("served: true", "served: false", 1)).expect("write");
    git(&["commit", "-qam", "head"]);

    // The reference's form, from the repository root and from the config's directory.
    let o = at(
        &d,
        &[
            "compat",
            "--base",
            "HEAD~1",
            "--head",
            "HEAD",
            "--config",
            "deploy/config.yaml",
            "--crd",
            "deploy/crd.yaml",
        ],
    );
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("at HEAD:deploy/crd.yaml#1:24 spec.versions[1]"), "{}", stdout(&o));
    let o = at(&d.join("deploy"), &["compat", "--base", "HEAD~1", "--head", "HEAD", "-c", "config.yaml"]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).contains("ServedVersionRemoved: version v1 is no longer served"), "{}", stdout(&o));
    let o = at(&d, &["compat", "--base", "HEAD~1", "--head", "HEAD~1"]);
    assert_eq!(code(&o), 0, "{}{}", stdout(&o), stderr(&o));

    let o = at(&d, &["compat", "--base", "no-such-rev", "--head", "HEAD"]);
    assert_eq!(code(&o), 2);
    assert!(
        stderr(&o).contains("no-such-rev is neither a file, a directory nor a git revision"),
        "{}",
        stderr(&o)
    );
    let o = at(
        &d,
        &[
            "compat",
            "--base",
            "HEAD~1",
            "--head",
            "HEAD",
            "-c",
            "deploy/config.yaml",
            "--crd",
            "deploy/none.yaml",
        ],
    );
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("HEAD~1:deploy/none.yaml"), "{}", stderr(&o));
}
