//! `versions --check-unserve` offline and the usage errors of `versions --live` and `plan --live`
//! that need no cluster (docs/convctl.md, "versions --check-unserve", "Retiring a version").
//! The live run is tests/tests/convctl_retire_version.rs on the local cluster.

mod common;
use common::*;

use serde_json::Value;

fn json_of(o: &std::process::Output) -> Value {
    serde_json::from_str(&stdout(o)).unwrap_or_else(|e| panic!("not JSON ({e}): {}", stdout(o)))
}

/// The docs' example is the command's output, line for line.
#[test]
fn the_docs_check_unserve_example_is_what_the_command_prints() {
    let docs = std::fs::read_to_string(examples().join("../../convctl.md")).expect("docs/convctl.md");
    let block = docs
        .split("```")
        .find(|b| {
            b.trim_start().starts_with(
                "$ convctl versions --xrd widgets-xrd.yaml -c widgets-config.yaml --check-unserve",
            )
        })
        .expect("the check-unserve example");
    let mut lines = block.trim_start_matches('\n').lines();
    let cmd = lines.next().unwrap().trim_start_matches("$ convctl ");
    let args: Vec<&str> = cmd.split_whitespace().collect();
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_convctl"))
        .args(&args)
        .current_dir(examples())
        .output()
        .expect("convctl runs");
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let want: Vec<&str> = lines.collect();
    assert_eq!(stdout(&o).lines().collect::<Vec<_>>(), want);
}

/// An XRD's v1: the Composition at v1 blocks, the spoke is a note; without the Compositions the
/// answer is unknown and blocks; with the Composition gone from the input, v1 is safe.
#[test]
fn an_xrd_version_is_blocked_by_its_composition_until_it_is_gone() {
    let base = |extra: &[&str]| {
        let mut a = vec![
            "versions".to_string(),
            "--xrd".into(),
            ex("widgets-xrd.yaml"),
            "-c".into(),
            ex("widgets-config.yaml"),
            "--check-unserve".into(),
            "v1".into(),
            "-o".into(),
            "json".into(),
        ];
        a.extend(extra.iter().map(|s| s.to_string()));
        run(a)
    };
    let comps = ex("widgets-compositions.yaml");
    let o = base(&["--stored-versions", "v3", "--compositions", &comps]);
    assert_eq!(code(&o), 1);
    let j = json_of(&o);
    let blockers = j["summary"]["checkUnserve"]["blockers"].as_array().unwrap();
    assert_eq!(blockers.len(), 1, "{j}");
    assert_eq!(blockers[0]["object"], "Composition xwidgets-v1");

    let o = base(&["--stored-versions", "v3"]);
    assert_eq!(code(&o), 1);
    assert!(stdout(&o).contains("unserve-compositions-unknown"), "{}", stdout(&o));

    let dir = scratch("retire-xrd");
    let only_v3: String = std::fs::read_to_string(&comps).unwrap().split("---\n").nth(1).unwrap().to_string();
    std::fs::write(dir.join("compositions.yaml"), only_v3).unwrap();
    let o = base(&["--stored-versions", "v3", "--compositions", dir.to_str().unwrap()]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
    assert_eq!(json_of(&o)["summary"]["checkUnserve"]["safe"], true);
}

/// A CRD as the cluster returns it carries status.storedVersions: that is read; v2 (storage)
/// is blocked as the storage version, the config's hub and a stored version.
#[test]
fn a_crd_file_with_status_answers_for_its_stored_versions() {
    let dir = scratch("retire-crd");
    let mut crd = std::fs::read_to_string(ex("databases-crd.yaml")).unwrap();
    crd.push_str("status:\n  storedVersions: [v1, v2]\n");
    std::fs::write(dir.join("crd.yaml"), crd).unwrap();
    let crd = dir.join("crd.yaml").to_string_lossy().into_owned();
    let cfg = ex("databases-config.yaml");
    let o = convctl(&["versions", "--crd", &crd, "-c", &cfg, "--check-unserve", "v1", "-o", "json"]);
    assert_eq!(code(&o), 1);
    let j = json_of(&o);
    let rules: Vec<&str> =
        j["findings"].as_array().unwrap().iter().filter_map(|f| f["rule"].as_str()).collect();
    assert_eq!(rules, ["unserve-stored", "unserve-config-spoke"], "{j}");
    let o = convctl(&["versions", "--crd", &crd, "-c", &cfg, "--check-unserve", "v2", "-o", "json"]);
    let j = json_of(&o);
    let rules: Vec<&str> =
        j["findings"].as_array().unwrap().iter().filter_map(|f| f["rule"].as_str()).collect();
    assert_eq!(rules, ["unserve-storage-version", "unserve-stored", "unserve-config-hub"], "{j}");
    // --stored-versions overrides the file's status.
    let o =
        convctl(&["versions", "--crd", &crd, "-c", &cfg, "--check-unserve", "v1", "--stored-versions", "v2"]);
    assert_eq!(code(&o), 0, "{}", stdout(&o));
}

#[test]
fn live_usage_errors_exit_2_and_an_unreachable_cluster_is_a_finding() {
    let crd = ex("databases-crd.yaml");
    let o = convctl(&["versions", "--crd", &crd, "--context", "x"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("add --live"), "{}", stderr(&o));
    let o = convctl(&["plan", "--to", "v2", "--live", "--crd", "dbs.example.org", "--contexts", "a,b"]);
    assert_eq!(code(&o), 2);
    assert!(stderr(&o).contains("plans for one cluster"), "{}", stderr(&o));

    let dir = scratch("retire-unreachable");
    let kc = dir.join("kubeconfig");
    std::fs::write(
        &kc,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n\
         users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: gone\n  context: {cluster: c, user: u}\ncurrent-context: gone\n",
    )
    .unwrap();
    let kc = kc.to_string_lossy().into_owned();
    let o = convctl(&[
        "versions",
        "--live",
        "--crd",
        "dbs.example.org",
        "--kubeconfig",
        &kc,
        "--check-unserve",
        "v1",
        "--request-timeout",
        "2",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let j = json_of(&o);
    assert_eq!(j["findings"][0]["rule"], "cluster-unreadable");
    assert_eq!(j["findings"][0]["location"]["context"], "gone");
}
