//! The Coordinator of this replica's shards, and the client of the shard-scoped config watches.

use std::sync::Arc;

use anyhow::Context as _;
use dco_api::{CRDConversionConfig, XRDConversionConfig};
use k8s_openapi::jiff::SignedDuration;
use kube::Client;
use tokio::sync::watch;

use super::clients::Clients;
use crate::cli::Args;
use crate::sharding::coordinator::{self, ShardOwnership};
use crate::sharding::gate::Gate;
use crate::sharding::metrics::ShardingMetrics;
use crate::sharding::shard::Shards;
use crate::sharding::sharded_watch::{self, SelectorLayer};
use crate::sharding::{leases, run};

/// What the later steps read of the sharding: the Coordinator's thread, its Leases and the
/// client whose layer narrows the config watches to the owned shards.
pub struct Sharding {
    pub coordinator: run::Thread,
    /// This replica's member name (`--replica-id`).
    pub me: String,
    pub lease_namespace: String,
    pub lease_names: leases::LeaseNames,
    pub selector: SelectorLayer,
    /// The config watches' client (sharding/sharded_watch.rs).
    pub watch_client: Client,
    pub metrics: Arc<ShardingMetrics>,
}

impl Sharding {
    pub fn gate(&self) -> Gate {
        self.coordinator.gate.clone()
    }

    pub fn owned(&self) -> watch::Receiver<ShardOwnership> {
        self.coordinator.owned.clone()
    }

    /// The Coordinator's view after its last tick: the live members, the owners.
    pub fn membership(&self) -> watch::Receiver<leases::Snapshot> {
        self.coordinator.snapshot.clone()
    }
}

/// Starts the Coordinator (sharding/leases.rs, sharding/run.rs): Prime runs one tick before
/// the watches start, so the gate knows the owned shards at the first event. Then asks the
/// apiserver whether it filters by shardSelector.
pub async fn start(
    args: &Args,
    clients: &Clients,
    metrics: &Arc<ShardingMetrics>,
) -> anyhow::Result<Sharding> {
    let shards = Shards::new(args.shards).context("--shards must be at least 1")?;
    let coordination = coordinator::CoordinatorSettings::new(
        shards,
        SignedDuration::try_from(args.lease_duration).context("--lease-duration")?,
        SignedDuration::try_from(args.lease_renew_interval).context("--lease-renew-interval")?,
    );
    coordination
        .check()
        .map_err(|e| anyhow::anyhow!("{e}; fix --lease-duration or --lease-renew-interval"))?;
    let lease_namespace = args.lease_namespace.clone().unwrap_or_else(|| args.namespace.clone());
    let lease_names = leases::LeaseNames::for_selector(args.selector.as_deref());
    let me = args.replica_id();
    let (config, api) = (clients.config.clone(), clients.api.clone());
    let coordinator = run::Thread::start(
        move || api.client(config),
        lease_namespace.clone(),
        lease_names.clone(),
        coordination,
        me.clone(),
        leases::PodRef::from_env(&lease_namespace),
        metrics.clone(),
    )
    .await?;
    let selector = SelectorLayer::new(shards, coordinator.owned.clone(), metrics.clone())
        .shard::<CRDConversionConfig>()
        .shard::<XRDConversionConfig>();
    let supported = sharded_watch::probe(&clients.client, &lease_namespace, shards).await;
    announce(&selector, metrics, supported);
    let watch_client = clients
        .api
        .client_through(clients.config.clone(), &selector)
        .context("cannot build the watch client")?;
    Ok(Sharding {
        coordinator,
        me,
        lease_namespace,
        lease_names,
        selector,
        watch_client,
        metrics: metrics.clone(),
    })
}

/// The config watches ask for this replica's shards only, through a client whose layer adds
/// the selector when the apiserver applies it (sharding/sharded_watch.rs).
fn announce(selector: &SelectorLayer, metrics: &ShardingMetrics, supported: bool) {
    selector.set_supported(supported);
    metrics.sharded_watch.set(i64::from(supported));
    if supported {
        tracing::info!(
            "the apiserver filters by shardSelector (KEP-5866): the config watches carry this replica's shards only"
        );
    } else {
        tracing::info!(
            "the apiserver ignores shardSelector (ShardedListAndWatch off or absent): every config reaches this replica and is filtered here"
        );
    }
}
