//! Wiring, one step a file: the clients and settings (clients.rs), the Coordinator and the
//! shard-scoped watch client (sharding.rs), the probes and metrics (health.rs), one watch per
//! kind (watches.rs), who wakes whom (wakes.rs, on the rules of wake/), the admission
//! webhook (admission.rs) and the three controllers (controllers.rs).

mod admission;
mod clients;
mod controllers;
mod health;
mod queued;
mod sharding;
mod wakes;
mod watches;

use std::sync::Arc;

use crate::cli::Args;
use crate::context::Context;
use crate::shutdown::{Readiness, Shutdown};

/// Readiness, and the stop the listeners drain on.
pub struct Lifecycle {
    pub readiness: Arc<Readiness>,
    pub stop: Shutdown,
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    // Bound before anything else, so a replica that cannot serve them never turns Ready.
    let bound = crate::shutdown::bind(&args).await?;
    crate::observability::memory::spawn_trimmer(std::time::Duration::from_secs(5));
    let metrics = health::Instruments::new();
    let clients = clients::Clients::infer(&metrics.api).await?;
    let settings = clients::settings(&args);
    let readiness = Arc::new(Readiness::default());
    let lifecycle = Lifecycle { stop: Shutdown::start(readiness.clone(), args.shutdown_drain), readiness };

    let mut sharding = sharding::start(&args, &clients, &metrics.sharding).await?;
    health::spawn(bound.metrics, &metrics, &lifecycle.readiness, &sharding);
    let watches = watches::open(
        &args.selector,
        &clients.client,
        &settings.server_namespaces,
        &sharding,
        &metrics.watches,
    );
    metrics.collect(&watches.stores, &args.namespace, &sharding);
    let stores = watches.stores.clone();
    // Which XRD API the cluster serves (Crossplane installed, upgraded or removed), for the
    // XRD watch and every XRD read and write; held until the replica stops.
    let crossplane = controllers::crossplane(&clients.client, &metrics.watches);
    let ctx = Arc::new(
        Context::new(clients.client, settings, stores, metrics.registry.clone(), sharding.gate())
            .with_crossplane(crossplane.subscribe())
            .with_watched(watches.watched.clone()),
    );
    let queues = wakes::start(watches.roots, ctx.clone(), &mut sharding);
    // A replica that cannot list (no rights yet, no apiserver) must still stop on SIGTERM.
    tokio::select! {
        synced = watches::synced(&ctx.stores, &ctx.watched) => synced?,
        () = lifecycle.stop.stopping() => {
            tracing::info!("termination signal before the caches synced: stopping without starting the controllers");
            sharding.coordinator.stop().await;
            return Ok(());
        }
    }
    let admission = admission::start(&args, &ctx, &metrics, bound.admission, &lifecycle).await?;
    lifecycle.readiness.mark_synced();
    tracing::info!("caches synced; starting the controllers");

    let membership = sharding.membership();
    controllers::run(
        &ctx,
        watches.primaries,
        queues,
        args.rebalance_qps,
        membership,
        &metrics,
        &lifecycle.stop,
    )
    .await;
    tracing::info!("controllers stopped");
    // The shards go to the other replicas now; admission drains meanwhile (shutdown.rs).
    sharding.coordinator.stop().await;
    admission.stop(&ctx.client).await
}
