//! Server-side sharded list (KEP-5866, feature gate ShardedListAndWatch on in
//! the testenv): a Lease list with a `shardSelector` echoes it in
//! `metadata.shardInfo` and returns exactly the Leases whose FNV-1a hash of
//! `metadata.uid` falls in the range.

use std::collections::BTreeSet;

use anyhow::{Context, Result};
use k8s_openapi::List;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::{ListParams, PostParams};
use serde_json::json;

use dco_tests::{TestEnv, fnv1a64, query_escape};

async fn sharded_list(t: &TestEnv, selector: &str) -> Result<List<Lease>> {
    let url = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases?shardSelector={}",
        t.ns,
        query_escape(selector)
    );
    let req = http::Request::get(url).body(Vec::new())?;
    t.client.request::<List<Lease>>(req).await.context("sharded lease list")
}

#[tokio::test]
async fn sharded_list_returns_shard_info_and_filters_by_uid_hash() -> Result<()> {
    let t = TestEnv::new("shard").await?;
    let leases = t.api::<Lease>();
    for i in 0..24 {
        let l: Lease = serde_json::from_value(json!({
            "metadata": {"name": format!("l{i}")},
            "spec": {"holderIdentity": "dco-tests"},
        }))?;
        leases.create(&PostParams::default(), &l).await?;
    }
    let all = leases.list(&ListParams::default()).await?;
    assert_eq!(all.items.len(), 24);
    assert!(all.metadata.shard_info.is_none(), "an unsharded list has no shardInfo");

    let uid_of = |l: &Lease| l.metadata.uid.clone().unwrap_or_default();
    let lower: BTreeSet<String> =
        all.items.iter().map(uid_of).filter(|u| fnv1a64(u.as_bytes()) < 0x8000_0000_0000_0000).collect();
    let upper: BTreeSet<String> = all.items.iter().map(uid_of).filter(|u| !lower.contains(u)).collect();

    for (selector, want) in [
        ("shardRange(object.metadata.uid, '0x0000000000000000', '0x8000000000000000')", &lower),
        ("shardRange(object.metadata.uid, '0x8000000000000000', '0x10000000000000000')", &upper),
    ] {
        let got = sharded_list(&t, selector).await?;
        let info = got
            .metadata
            .shard_info
            .as_ref()
            .context("the apiserver did not echo metadata.shardInfo: is ShardedListAndWatch on?")?;
        assert_eq!(info.selector, selector);
        let uids: BTreeSet<String> = got.items.iter().map(uid_of).collect();
        assert_eq!(&uids, want, "server-side filtering for {selector}");
    }
    t.cleanup().await;
    Ok(())
}
