//! The shard coordinator's and the shard-scoped watches' families (docs/operations.md,
//! "Metrics"), registered into the operator's registry (`observability::metrics`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use dco_api::metrics::register;

use crate::observability::metrics::Register;

/// The kind of a shard-scoped watch (sharded_watch.rs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

#[derive(Default)]
pub struct ShardingMetrics {
    /// Coordinator ticks by result, and its shard takes and frees.
    pub coordinator_ticks: Family<ResultLabel, Counter>,
    pub shard_takes: Counter,
    pub shard_frees: Counter,
    /// Pauses of this process the Coordinator's heartbeat saw (`pause.rs`).
    pub pauses: Counter,
    /// Shards this replica owns now.
    pub owned_shards: Gauge,
    /// 1 when the apiserver applies `shardSelector` and the config watches send it.
    pub sharded_watch: Gauge,
    /// The shard-scoped watches, by kind: response bytes of their lists and watches, objects
    /// received, objects the client-side check dropped, restarts on ownership change.
    pub watch_bytes: Family<KindLabel, Counter>,
    pub watch_events: Family<KindLabel, Counter>,
    pub watch_dropped: Family<KindLabel, Counter>,
    pub watch_restarts: Family<KindLabel, Counter>,
}

impl Register for ShardingMetrics {
    fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "coordinator_ticks",
            "Coordinator ticks, by result",
            self.coordinator_ticks.clone(),
        );
        register(registry, "shard_takes", "Shard Leases this replica took", self.shard_takes.clone());
        register(registry, "shard_frees", "Shard Leases this replica freed", self.shard_frees.clone());
        register(
            registry,
            "pauses_detected",
            "Times this process did not run for over 4 s (stopped, frozen or starved); it owned no shard until its next renewal",
            self.pauses.clone(),
        );
        register(registry, "owned_shards", "Shards this replica owns", self.owned_shards.clone());
        register(
            registry,
            "sharded_watch",
            "1 when the apiserver filters the config watches by shardSelector (KEP-5866), 0 when this replica filters them alone",
            self.sharded_watch.clone(),
        );
        for (name, help, family) in [
            (
                "watch_received_bytes",
                "Response bytes of the shard-scoped lists and watches, by kind",
                &self.watch_bytes,
            ),
            (
                "watch_received_events",
                "Objects the shard-scoped watches received (listed, applied or deleted), by kind",
                &self.watch_events,
            ),
            (
                "watch_dropped_events",
                "Objects of shards this replica does not own that reached it and were dropped client-side, by kind",
                &self.watch_dropped,
            ),
            (
                "watch_restarts",
                "Restarts of the shard-scoped watches after the owned shards changed, by kind",
                &self.watch_restarts,
            ),
        ] {
            register(registry, name, help, family.clone());
        }
    }
}
