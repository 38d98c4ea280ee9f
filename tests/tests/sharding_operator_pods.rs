//! Sharding the operator's work across Pods (docs/sharding.md, "Never two owners" and "The
//! server-side sharded watch"): dco-operator as a Deployment of 3 replicas, Pods of the
//! process-kubelet: they divide 32 shards, the apiserver sends each replica only its shards'
//! configs (`shardSelector`; the feature gate ShardedListAndWatch is on in the testenv), 300
//! configs (20 with real targets that get wired and converted) are each reconciled by their shard's
//! owner and by no other replica (each replica's shard gate counts what it lets through by shard:
//! `dco_operator_shard_reconciles_total`), a stopped replica (SIGSTOP) stops reconciling before its
//! shards are taken and does not reconcile them when it resumes, a replica killed with SIGKILL is
//! restarted by the kubelet and resumes its shards, scaling to 1 gives the survivor every shard,
//! and scaling back to 3 moves exactly the shards the assignment rule must move.
//!
//! Needs `target/debug/dco-operator` and `target/debug/dco-webhook` (the images `dco-operator`
//! and `dco-webhook` of the testenv). The replicas are scoped by `--selector` to this test's
//! configs and servers, their Leases in the test's namespace; their ServiceAccount is bound to
//! `cluster-admin` (least-privilege RBAC is the chart's, docs/installation.md "RBAC").

#[tokio::test]
async fn three_operator_pods_divide_300_configs_and_survive_stop_kill_and_scaling() -> anyhow::Result<()> {
    dco_tests::operator_pods::divide_and_survive(true).await
}
