//! Moving a target without a failed request (docs/architecture.md, "Moving a target without a gap";
//! docs/operations.md, "How a target is wired and moved"): every kind of move under load, on the
//! world of `tests/src/moves.rs`: two servers of 2 replicas, 2 operator replicas, a three-version
//! target whose storage version is the middle one, and a load client writing at both spokes and
//! reading at the other versions (alternating between the cluster's apiservers) for the whole test,
//! checking every value.
//!
//! The moves: an explicit `webhookServerRef` pin (a → b), an unpin (b → a), sharding (`a`
//! joins the pool: no move; `b` joins and wins the target's rendezvous: a → b), and `b`
//! leaving the pool with the operator replica that owns the config killed mid-move (b → a;
//! the other replica takes the config's shard once its Lease expires and finishes the move
//! from the persisted status). Each move: zero failed requests, zero wrong values, settled
//! verified (HandoverReady reason `HandoverReady`) and exactly one change of the target's
//! spec. With `DCO_E2E_NO_HOLD_WHILE_NAMED=1` the source replicas stop holding a target that
//! still names them, and this test fails in the move whose operator is killed (why the source
//! holds: docs/architecture.md, "Moving a target without a gap").

use std::time::Duration;

use anyhow::Result;
use dco_tests::moves::World;

#[tokio::test]
async fn every_kind_of_move_under_load_fails_no_request() -> Result<()> {
    let mut w = World::new("mv").await?;
    let [a, b] = w.servers.clone();

    let m = w.begin().await?;
    w.set_pin(Some(&b)).await?;
    w.finish("pin to b", m, &a, &b).await?;

    let m = w.begin().await?;
    w.set_pin(None).await?;
    w.finish("unpin (back to the default a)", m, &b, &a).await?;

    // a joins the pool alone: it wins every target of the pool, so nothing moves.
    let m = w.begin().await?;
    w.set_sharding(&a, true).await?;
    w.no_move("sharding on a (a wins alone)", m, Duration::from_secs(5)).await?;

    let m = w.begin().await?;
    w.set_sharding(&b, true).await?;
    w.finish("sharding on b (b wins the rendezvous)", m, &a, &b).await?;

    // b leaves the pool, and the operator replica that owns the config is killed at once:
    // before it persisted anything of the move, so the move waits for the other replica to
    // take the config's shard (its Lease expires first) — longer than the source's drain
    // period, which only the hold-while-named rule covers.
    let owner = w.config_owner().await?;
    let m = w.begin().await?;
    w.set_sharding(&b, false).await?;
    w.kill_operator(&owner)?;
    let seen = w.history.since(m.seen);
    eprintln!("operator {owner} killed; the move's statuses seen by then: {seen:?}");
    w.finish("b leaves the pool, the owning operator killed", m, &b, &a).await?;

    w.end().await
}
