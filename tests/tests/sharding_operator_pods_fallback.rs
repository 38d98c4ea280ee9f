//! The sharded watch's fallback (docs/sharding.md, "The server-side sharded watch"): the
//! scenario of tests/tests/sharding_operator_pods.rs on a second local cluster whose apiserver has
//! ShardedListAndWatch off: the replicas' probe finds no `shardSelector` support,
//! they watch every config and drop what is not theirs, and the ownership and the results are
//! the same. The second cluster has its own state directory (`target/testenv-fallback`) and its
//! own Pod addresses (127.0.1.x), and is stopped at the end.

use std::process::Command;

/// Points this test process (and the `hack/testenv` it starts) at the second cluster. Called
/// before anything reads the environment: this binary holds this one test.
fn use_fallback_cluster() -> std::path::PathBuf {
    let dir = dco_tests::repo_root().join("target").join("testenv-fallback");
    // SAFETY: no other thread of this process reads or writes the environment yet.
    unsafe {
        std::env::set_var("DCO_TESTENV_DIR", &dir);
        std::env::set_var("DCO_TESTENV_FEATURE_GATES", "ShardedListAndWatch=false");
        std::env::set_var("DCO_TESTENV_POD_IP_RANGE", "127.0.1.2-127.0.1.254");
        std::env::set_var("DCO_TESTENV_HELM", "0");
    }
    dir
}

struct Down;

impl Drop for Down {
    fn drop(&mut self) {
        let script = dco_tests::repo_root().join("hack").join("testenv");
        let _ = Command::new(script).arg("down").output();
    }
}

#[tokio::test]
async fn without_the_feature_gate_the_replicas_filter_alone_with_the_same_ownership() -> anyhow::Result<()> {
    let dir = use_fallback_cluster();
    eprintln!("the fallback cluster: {}", dir.display());
    let _down = Down;
    dco_tests::operator_pods::divide_and_survive(false).await
}
