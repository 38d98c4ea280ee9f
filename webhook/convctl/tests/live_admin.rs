//! The live admin commands without a cluster (docs/convctl.md: "diff --live", "crossplane
//! status", "retarget"): usage errors exit 2 before any request, and a fleet whose every member
//! is at a closed port gives one `unreachable` finding per member, named by it, exit 1.
//! tests/tests/convctl_live_admin.rs runs them against the local cluster.

mod common;

use std::net::TcpListener;
use std::path::Path;

use common::*;
use serde_json::Value;

/// A kubeconfig with one context, `name`, whose apiserver is a loopback port nothing listens on.
fn dead_kubeconfig(path: &Path, name: &str) {
    // Bound then dropped: the port was free a moment ago and nothing listens on it now.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    std::fs::write(
        path,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster: {{server: 'https://127.0.0.1:{port}', insecure-skip-tls-verify: true}}\n\
             users:\n- name: {name}\n  user: {{token: t}}\ncontexts:\n- name: {name}\n  context: {{cluster: {name}, user: {name}}}\ncurrent-context: {name}\n"
        ),
    )
    .unwrap();
}

fn report(o: &std::process::Output) -> Value {
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{e}: {}{}", stdout(o), stderr(o)))
}

#[test]
fn usage_errors_exit_2_before_any_request() {
    let cfg = ex("widgets-config.yaml");
    let o = convctl(&["diff", "--live", "-c", &cfg, "-c", &cfg]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("compares one config file"), "{}", stderr(&o));
    for args in [
        vec!["retarget"],
        vec!["retarget", "--unpin"],
        vec!["retarget", "--to", "b", "--canary", "0"],
        vec!["retarget", "--to", "b", "--unpin", "--from", "a"],
    ] {
        let o = convctl(&args);
        assert_eq!(code(&o), 2, "{args:?}: {}", stderr(&o));
    }
    let dir = scratch("admin-usage");
    let k = dir.join("kubeconfig");
    std::fs::write(
        &k,
        "apiVersion: v1\nkind: Config\nclusters: []\nusers: []\ncontexts:\n- name: a\n  context: {cluster: a, user: a}\n- name: b\n  context: {cluster: b, user: b}\n",
    )
    .unwrap();
    let o = convctl(&["retarget", "--to", "x", "--kubeconfig", k.to_str().unwrap(), "--contexts", "a,b"]);
    assert_eq!(code(&o), 2, "{}", stderr(&o));
    assert!(stderr(&o).contains("one cluster at a time"), "{}", stderr(&o));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn every_unreachable_member_is_its_own_finding_named_by_it() {
    let dir = scratch("admin-dead");
    let fleet = dir.join("fleet");
    std::fs::create_dir_all(&fleet).unwrap();
    dead_kubeconfig(&fleet.join("east.yaml"), "east");
    dead_kubeconfig(&fleet.join("west.yaml"), "west");
    let fleet = fleet.to_str().unwrap();
    let cfg = ex("widgets-config.yaml");
    for args in [
        vec!["diff", "--live", "-c", &cfg, "--kubeconfig-dir", fleet, "--request-timeout", "2", "-o", "json"],
        vec!["crossplane", "status", "--kubeconfig-dir", fleet, "--request-timeout", "2", "-o", "json"],
    ] {
        let o = convctl(&args);
        assert_eq!(code(&o), 1, "{args:?}: {}{}", stdout(&o), stderr(&o));
        let r = report(&o);
        let found: Vec<(String, String)> = r["findings"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| {
                let ctx = f["location"]["context"].as_str().unwrap_or_default().to_string();
                assert!(f["message"].as_str().unwrap().starts_with(&format!("{ctx}: ")), "{f}");
                (f["rule"].as_str().unwrap().to_string(), ctx)
            })
            .collect();
        assert_eq!(
            found,
            [
                ("unreachable".to_string(), "east.yaml".to_string()),
                ("unreachable".into(), "west.yaml".into())
            ],
            "{args:?}"
        );
    }
    // The table says the same, each member on its own line.
    let o = convctl(&["diff", "--live", "-c", &cfg, "--kubeconfig-dir", fleet, "--request-timeout", "2"]);
    assert_eq!(code(&o), 1);
    let table = stdout(&o);
    assert!(
        table.contains("east.yaml: not compared") && table.contains("west.yaml: not compared"),
        "{table}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}
