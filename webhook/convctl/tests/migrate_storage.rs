//! `convctl migrate-storage` without a cluster: its usage errors (exit 2, naming why) and an
//! unreachable cluster as a failing finding (exit 1). The migration itself is proven on the
//! local cluster by tests/tests/convctl_migrate_storage.rs.

mod common;
use common::*;

#[test]
fn a_fleet_a_missing_or_doubled_target_and_out_of_bound_flags_are_usage_errors() {
    let o = convctl(&["migrate-storage", "--crd", "widgets.example.org", "--contexts", "a,b"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(
        stderr(&o).contains("one cluster") && stderr(&o).contains("storage is its own"),
        "{}",
        stderr(&o)
    );
    let dir = scratch("migrate-fleet");
    std::fs::write(dir.join("a.yaml"), "apiVersion: v1\nkind: Config\n").unwrap();
    let o =
        convctl(&["migrate-storage", "--crd", "w.example.org", "--kubeconfig-dir", dir.to_str().unwrap()]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--kubeconfig-dir"), "{}", stderr(&o));

    let o = convctl(&["migrate-storage"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("--crd"), "{}", stderr(&o));
    let o = convctl(&["migrate-storage", "--crd", "a.example.org", "--xrd", "b.example.org"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    for (flag, value) in
        [("--concurrency", "0"), ("--concurrency", "65"), ("--qps", "0"), ("--page-size", "5001")]
    {
        let o = convctl(&["migrate-storage", "--crd", "a.example.org", flag, value]);
        assert_eq!(code(&o), 2, "{flag} {value}: {}", stderr(&o));
        assert!(stderr(&o).contains(flag), "{flag} {value}: {}", stderr(&o));
    }
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn an_unreachable_cluster_is_a_failing_finding_naming_its_context() {
    let dir = scratch("migrate-unreachable");
    let kubeconfig = dir.join("config");
    // Port 1 on loopback: refused at once.
    std::fs::write(
        &kubeconfig,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster: {server: 'https://127.0.0.1:1'}\n\
         users:\n- name: u\n  user: {token: t}\ncontexts:\n- name: gone\n  context: {cluster: c, user: u}\ncurrent-context: gone\n",
    )
    .unwrap();
    let o = convctl(&[
        "migrate-storage",
        "--crd",
        "widgets.example.org",
        "--kubeconfig",
        kubeconfig.to_str().unwrap(),
        "--request-timeout",
        "2",
        "-o",
        "json",
    ]);
    assert_eq!(code(&o), 1, "{}{}", stdout(&o), stderr(&o));
    let report: serde_json::Value = serde_json::from_str(&stdout(&o)).expect("a JSON report");
    let f = &report["findings"][0];
    assert_eq!(f["location"]["context"], "gone", "{report}");
    assert_eq!(f["fails"], true, "{report}");
    let _ = std::fs::remove_dir_all(&dir);
}
