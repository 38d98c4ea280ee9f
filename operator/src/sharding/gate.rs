//! The reconcile gate: whether this replica owns an object's shard now, from the owned set
//! the Coordinator publishes (`leases.rs`, `run.rs`).

use k8s_openapi::jiff::Timestamp;
use tokio::sync::watch;

use super::coordinator::ShardOwnership;
use super::shard::Shards;

/// The shard gates over this replica's owned set. [`Gate::owned_shard`] is the reconcile gate,
/// read at the start of every reconcile (the correctness check); [`Gate::holds`] is what the
/// enqueue filter and the shard-scoped watches keep, so a lapse (renewals late past the renew
/// deadline) delays reconciles but loses no event.
#[derive(Clone)]
pub struct Gate {
    shards: Shards,
    owned: watch::Receiver<ShardOwnership>,
    /// When a reconcile the gate stopped for a lapse is tried again: a renew interval, by
    /// which the next tick has either renewed the shard or given it up.
    pub lapse_retry: std::time::Duration,
}

impl Gate {
    pub fn new(shards: Shards, owned: watch::Receiver<ShardOwnership>) -> Self {
        Gate { shards, owned, lapse_retry: std::time::Duration::from_secs(1) }
    }

    /// Owns every shard for ever: for the reconcilers' unit tests.
    #[cfg(test)]
    pub fn everything() -> Self {
        let shards = Shards::new(1).unwrap_or_else(|| unreachable!("1 is a valid shard count"));
        let (_, owned) = watch::channel(ShardOwnership::all(shards, Timestamp::MAX));
        Gate::new(shards, owned)
    }

    /// The shard of the object of `uid` when it is ours to reconcile now; `None` when it is
    /// not (no uid: not yet created, never).
    pub fn owned_shard(&self, uid: Option<&str>) -> Option<u32> {
        let shard = self.shards.of_uid(uid?);
        self.owned.borrow().owns(shard, Timestamp::now()).then_some(shard)
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
        assert!(in_0.iter().all(|u| gate.owned_shard(Some(u)).is_some()));
        assert!(in_1.iter().all(|u| gate.owned_shard(Some(u)).is_none()));
        assert!(gate.owned_shard(None).is_none(), "an object without a uid is nobody's");
        // Past its deadline nothing is owned, though no tick ran since.
        tx.send_replace(ShardOwnership::all(shards, Timestamp::now() - SignedDuration::from_secs(1)));
        assert!(uids.iter().all(|u| gate.owned_shard(Some(u)).is_none()));
        assert!(uids.iter().all(|u| gate.holds(Some(u))), "lapsed, still held: the watches keep them");
        assert!(Gate::everything().owned_shard(Some("any")).is_some());
    }
}
