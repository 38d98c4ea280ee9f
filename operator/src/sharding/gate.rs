//! The reconcile gate: whether this replica owns an object's shard now, from the owned set
//! the Coordinator publishes (`leases.rs`, `run.rs`), and the fence every write of a
//! reconcile passes: the same question asked again right before the request
//! (docs/sharding.md, "After a pause").

use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use super::coordinator::ShardOwnership;
use super::pause::Pauses;
use super::shard::Shards;

/// What the gate gave one reconcile: the object's shard, and the pauses of this process
/// counted when it passed (a reconcile that spans a pause decided on a view as old as it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Pass {
    pub shard: u32,
    pauses: u64,
}

/// Why a reconcile's pass no longer holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lapse {
    /// The shard is not this replica's now: its Lease was not renewed within the renew
    /// deadline by this replica's clock, or another replica holds it.
    NotOwned,
    /// This process was paused since the pass, or since its last renewal.
    Paused,
}

/// Whether a pass through the gate for `shard`, given when `passed_at` pauses had been
/// counted, still holds at `now`: the shard is owned (renewed within the renew deadline by
/// this clock, `ShardOwnership::owns`), and no pause was counted since the pass nor left
/// uncovered by a renewal (`renewed`: the pauses the last renewal covers).
pub fn decide(
    owned: &ShardOwnership,
    shard: u32,
    now: Timestamp,
    passed_at: u64,
    pauses: u64,
    renewed: u64,
) -> Result<(), Lapse> {
    if !owned.owns(shard, now) {
        Err(Lapse::NotOwned)
    } else if pauses != passed_at || pauses > renewed {
        Err(Lapse::Paused)
    } else {
        Ok(())
    }
}

/// The shard gates over this replica's owned set. [`Gate::pass`] is the reconcile gate,
/// read at the start of every reconcile (the correctness check); [`Gate::holds`] is what the
/// enqueue filter and the shard-scoped watches keep, so a lapse (renewals late past the renew
/// deadline) delays reconciles but loses no event.
#[derive(Clone)]
pub struct Gate {
    shards: Shards,
    owned: watch::Receiver<ShardOwnership>,
    /// This process's pauses (the Coordinator's heartbeat counts them; its renewals cover them).
    pauses: Arc<Pauses>,
    /// When a reconcile the gate stopped for a lapse is tried again: a renew interval, by
    /// which the next tick has either renewed the shard or given it up.
    pub lapse_retry: std::time::Duration,
}

impl Gate {
    pub fn new(shards: Shards, owned: watch::Receiver<ShardOwnership>) -> Self {
        Gate { shards, owned, pauses: Arc::default(), lapse_retry: std::time::Duration::from_secs(1) }
    }

    /// The gate over the pauses the Coordinator's heartbeat counts.
    pub fn with_pauses(self, pauses: Arc<Pauses>) -> Self {
        Gate { pauses, ..self }
    }

    /// Owns every shard for ever: for the reconcilers' unit tests.
    #[cfg(test)]
    pub fn everything() -> Self {
        let shards = Shards::new(1).unwrap_or_else(|| unreachable!("1 is a valid shard count"));
        let (_, owned) = watch::channel(ShardOwnership::all(shards, Timestamp::MAX));
        Gate::new(shards, owned)
    }

    /// The pass of the object of `uid` when it is ours to reconcile now: its shard, with what
    /// [`Gate::fence`] checks again later; `None` when it is not (no uid: not yet created,
    /// never; a pause not yet covered by a renewal, none).
    pub fn pass(&self, uid: Option<&str>) -> Option<Pass> {
        let shard = self.shards.of_uid(uid?);
        let pauses = self.pauses.count();
        let renewed = self.pauses.renewed_upto();
        decide(&self.owned.borrow(), shard, Timestamp::now(), pauses, pauses, renewed).ok()?;
        Some(Pass { shard, pauses })
    }

    /// Whether `pass` still holds now: asked right before every write of the reconcile it was
    /// given to, so a replica paused mid-reconcile past its renew deadline, whose shard
    /// another replica may have taken, writes nothing more.
    pub fn fence(&self, pass: &Pass) -> Result<(), Lapse> {
        let (pauses, renewed) = (self.pauses.count(), self.pauses.renewed_upto());
        decide(&self.owned.borrow(), pass.shard, Timestamp::now(), pass.pauses, pauses, renewed)
    }

    /// Whether this replica holds the Lease of the object's shard, renewed in time or not.
    pub fn holds(&self, uid: Option<&str>) -> bool {
        uid.is_some_and(|u| self.owned.borrow().held().contains(&self.shards.of_uid(u)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::SignedDuration;

    #[test]
    fn a_pass_holds_while_the_shard_is_owned_and_no_pause_came_since() {
        let shards = Shards::new(4).unwrap();
        let now = Timestamp::now();
        let owned = ShardOwnership::some(shards, [1], now + SignedDuration::from_secs(10));
        assert_eq!(decide(&owned, 1, now, 0, 0, 0), Ok(()));
        assert_eq!(decide(&owned, 2, now, 0, 0, 0), Err(Lapse::NotOwned), "another replica's shard");
        // Renewed at T, trusted until T + renew deadline only, by this replica's own clock.
        assert_eq!(decide(&owned, 1, now + SignedDuration::from_secs(10), 0, 0, 0), Err(Lapse::NotOwned));
        // A pause since the pass, even one a renewal has covered since: the reconcile decided
        // on a view as old as the pause.
        assert_eq!(decide(&owned, 1, now, 0, 1, 1), Err(Lapse::Paused));
        // A pause no renewal has covered yet: nothing passes, a new pass neither.
        assert_eq!(decide(&owned, 1, now, 1, 1, 0), Err(Lapse::Paused));
        assert_eq!(decide(&owned, 1, now, 1, 1, 1), Ok(()), "a pass given after the renewal");
        // Not owned wins: the reason names what the operator must wait for.
        assert_eq!(decide(&owned, 2, now, 0, 1, 0), Err(Lapse::NotOwned));
    }

    #[test]
    fn the_fence_stops_a_pass_once_the_deadline_passed_or_the_process_paused() {
        use crate::sharding::pause::{PAUSE, Pauses};
        let shards = Shards::new(1).unwrap();
        let soon = Timestamp::now() + SignedDuration::from_secs(60);
        let (tx, rx) = watch::channel(ShardOwnership::all(shards, soon));
        let pauses = Arc::new(Pauses::for_tests());
        let gate = Gate::new(shards, rx).with_pauses(pauses.clone());
        let pass = gate.pass(Some("u")).expect("owned");
        assert_eq!(gate.fence(&pass), Ok(()));
        // The deadline passes (no tick renewed it): the next write is fenced.
        tx.send_replace(ShardOwnership::all(shards, Timestamp::now() - SignedDuration::from_secs(1)));
        assert_eq!(gate.fence(&pass), Err(Lapse::NotOwned));
        tx.send_replace(ShardOwnership::all(shards, soon));
        assert_eq!(gate.fence(&pass), Ok(()));
        // A pause: the pass is void, and the gate gives none until a renewal after it.
        pauses.last_beat_ago(PAUSE * 2);
        assert_eq!(gate.fence(&pass), Err(Lapse::Paused));
        assert_eq!(gate.pass(Some("u")), None);
        assert!(gate.holds(Some("u")), "still held: the watches keep the shard");
        pauses.renewed(pauses.count());
        let again = gate.pass(Some("u")).expect("owned again after the renewal");
        assert_eq!(gate.fence(&again), Ok(()));
        assert_eq!(
            gate.fence(&pass),
            Err(Lapse::Paused),
            "the reconcile that spanned the pause stays stopped"
        );
    }

    #[test]
    fn the_gate_lets_through_only_owned_shards_and_only_until_their_deadline() {
        let shards = Shards::new(2).unwrap();
        // uids as the apiserver makes them (random UUIDs): FNV-1a's top bits barely move
        // with the last bytes of near-identical strings.
        let uids: Vec<String> = (0..40u64)
            .map(|i| {
                let (a, b) = (dco_api::hash::mix64(i + 1), dco_api::hash::mix64(i + 1000));
                format!(
                    "{:08x}-{:04x}-4{:03x}-8{:03x}-{:012x}",
                    a >> 32,
                    a & 0xffff,
                    b & 0xfff,
                    (b >> 12) & 0xfff,
                    b >> 16
                )
            })
            .collect();
        let in_0: Vec<&String> = uids.iter().filter(|u| shards.of_uid(u) == 0).collect();
        let in_1: Vec<&String> = uids.iter().filter(|u| shards.of_uid(u) == 1).collect();
        assert!(!in_0.is_empty() && !in_1.is_empty());
        let until = Timestamp::now() + SignedDuration::from_secs(60);
        let owned = ShardOwnership::all(Shards::new(1).unwrap(), until); // shard 0 of 2 only
        let (tx, rx) = watch::channel(owned);
        let gate = Gate::new(shards, rx);
        assert!(in_0.iter().all(|u| gate.pass(Some(u)).is_some()));
        assert!(in_1.iter().all(|u| gate.pass(Some(u)).is_none()));
        assert!(gate.pass(None).is_none(), "an object without a uid is nobody's");
        // Past its deadline nothing is owned, though no tick ran since.
        tx.send_replace(ShardOwnership::all(shards, Timestamp::now() - SignedDuration::from_secs(1)));
        assert!(uids.iter().all(|u| gate.pass(Some(u)).is_none()));
        assert!(uids.iter().all(|u| gate.holds(Some(u))), "lapsed, still held: the watches keep them");
        assert!(Gate::everything().pass(Some("any")).is_some());
    }
}
