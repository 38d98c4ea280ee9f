//! Server-side sharded list (docs/sharding.md, "Shards"; the feature gate ShardedListAndWatch
//! is on in the testenv): a Lease list with a `shardSelector` echoes it in
//! `metadata.shardInfo` and returns exactly the Leases whose FNV-1a hash of
//! `metadata.uid` falls in the range — for 200 objects, two halves and the unions of shard
//! ranges the operator asks for.

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
    for i in 0..OBJECTS {
        let l: Lease = serde_json::from_value(json!({
            "metadata": {"name": format!("l{i}")},
            "spec": {"holderIdentity": "dco-tests"},
        }))?;
        leases.create(&PostParams::default(), &l).await?;
    }
    let all = leases.list(&ListParams::default()).await?;
    assert_eq!(all.items.len(), OBJECTS);
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

    // The operator's own shapes (operator/src/shard.rs): shard i of 32 covers
    // [i·2^59, (i+1)·2^59); a replica's selector is the union of its merged ranges, the last
    // one ending at 2^64. Every one of the 200 uids lands where the client-side hash says.
    let shard = |h: u64| (h >> 59) as u32;
    let range = |a: u32, b: u32| {
        format!(
            "shardRange(object.metadata.uid, '0x{:016x}', '0x{:016x}')",
            u128::from(a) << 59,
            u128::from(b) << 59
        )
    };
    for owned in [vec![0u32], vec![5, 6, 7], vec![1, 9, 31], vec![3, 4, 17, 30, 31]] {
        // Adjacent shards merge into one range, as OwnedShards::ranges does.
        let mut terms: Vec<(u32, u32)> = Vec::new();
        for i in &owned {
            match terms.last_mut() {
                Some((_, end)) if *end == *i => *end = i + 1,
                _ => terms.push((*i, i + 1)),
            }
        }
        let selector = terms.iter().map(|(a, b)| range(*a, *b)).collect::<Vec<_>>().join(" || ");
        let got = sharded_list(&t, &selector).await?;
        assert_eq!(got.metadata.shard_info.as_ref().map(|i| i.selector.as_str()), Some(selector.as_str()));
        let uids: BTreeSet<String> = got.items.iter().map(uid_of).collect();
        let want: BTreeSet<String> =
            all.items.iter().map(uid_of).filter(|u| owned.contains(&shard(fnv1a64(u.as_bytes())))).collect();
        assert_eq!(uids, want, "server-side filtering for {selector}");
    }
    t.cleanup().await;
    Ok(())
}

const OBJECTS: usize = 200;
