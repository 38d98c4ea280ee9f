//! Cluster mode's sync loop: wait for the caches, run a pass whenever something changed (or
//! a drain ends, or a periodic resync is due), mark the replica ready after the first full
//! pass, and rebuild the caches when the instance's `cacheSelector` changes.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use dco_api::ConversionWebhookServer;
use kube::Client;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::Notify;

use crate::caches::{self, Caches, Own, Scope};
use crate::health::Health;
use crate::metrics::Metrics;
use crate::sync::Syncer;

/// A full pass even without events, as a backstop against a missed wake-up.
const RESYNC: Duration = Duration::from_secs(60);
/// Coalesce bursts of events (a rollout, the initial lists) into one pass.
const DEBOUNCE: Duration = Duration::from_millis(100);

fn scope_of(servers: &Store<ConversionWebhookServer>, instance: &str) -> Scope {
    let own = servers.get(&ObjectRef::new(instance));
    if own.is_none() {
        tracing::warn!(
            instance,
            "ConversionWebhookServer {instance:?} not found; watching configs and targets without a cacheSelector"
        );
    }
    match Scope::of(own.as_deref()) {
        Ok(s) => s,
        Err(e) => {
            tracing::error!(instance, error = %e, "ignoring the instance's cacheSelector; fix spec.cacheSelector");
            Scope::default()
        }
    }
}

pub async fn run(
    client: Client,
    instance: String,
    server_selector: Option<String>,
    syncer: Syncer,
    health: Arc<Health>,
    metrics: Arc<Metrics>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut stop = std::pin::pin!(stop);
    let notify = Arc::new(Notify::new());
    let (servers_changed, _) = tokio::sync::watch::channel(0u64);
    let (mut servers, mut servers_task) =
        caches::watch_servers(&client, server_selector.as_deref(), notify.clone(), servers_changed.clone());
    tokio::select! {
        _ = servers.wait_until_ready() => {}
        () = &mut stop => return,
    }
    let scope = scope_of(&servers, &instance);
    tracing::info!(?scope, "starting watches");
    let registry = syncer.registry().clone();
    let drain = syncer.drain_period();
    let own = |servers: &Store<ConversionWebhookServer>| Own {
        instance: instance.clone(),
        drain,
        servers: servers.clone(),
        changed: servers_changed.subscribe(),
    };
    // One watch of Crossplane's CRD for the process; the caches (rebuilt on a scope change)
    // follow it to watch XRDs while it exists.
    let crossplane = dco_api::crossplane::Detector::start(client.clone());
    let mut caches = Arc::new(
        Caches::start(
            &client,
            own(&servers),
            scope,
            notify.clone(),
            registry.clone(),
            metrics.clone(),
            crossplane.subscribe(),
        )
        .await,
    );
    tokio::select! {
        () = caches.wait_ready() => {}
        () = &mut stop => return,
    }
    tracing::info!("caches synced; running the first pass over existing configs");

    let syncer = Arc::new(Mutex::new(syncer));
    let mut first = true;
    // The pauses the re-read now running covers (`pause.rs`): done after its pass.
    let mut re_read: Option<u64> = None;
    health.freshness.enable();
    loop {
        let (s, c) = (syncer.clone(), caches.clone());
        let started = Instant::now();
        let report = tokio::task::spawn_blocking(move || {
            let world = c.world();
            s.lock().unwrap_or_else(PoisonError::into_inner).pass(&world, Instant::now())
        })
        .await;
        let next_wake = match report {
            Ok(r) => {
                tracing::debug!(?r, took = ?started.elapsed(), "pass done");
                // Every pass follows a round of watch events and target reads (pages of target
                // metadata can be MBs) and may have compiled: that scratch is freed now but
                // resident in malloc's arenas. Hand it back once idle (requests coalesce).
                crate::alloc::release_free_memory_soon();
                if first {
                    tracing::info!(compiled = r.compiled, failed = r.failed, took = ?started.elapsed(), "first pass done; ready");
                    health.mark_synced();
                    first = false;
                }
                if let Some(upto) = re_read.take() {
                    health.freshness.caught_up(upto);
                }
                r.next_wake
            }
            Err(e) => {
                // A panic in a pass is a bug; keep serving what the registry holds and retry.
                tracing::error!(error = %e, "sync pass failed; retrying");
                Some(Instant::now() + Duration::from_secs(1))
            }
        };
        let deadline = next_wake.unwrap_or_else(|| Instant::now() + RESYNC).min(Instant::now() + RESYNC);
        tokio::select! {
            () = notify.notified() => tokio::time::sleep(DEBOUNCE).await,
            () = tokio::time::sleep_until(deadline.into()) => {}
            () = health.freshness.wanted() => {}
            () = &mut stop => return,
        }
        // After a pause every watch restarts: the events queued meanwhile are as old as the
        // pause, a new list is not. The instance's own object (the scope) too.
        let stale = health.freshness.stale();
        if stale.is_some() {
            let (fresh, task) = caches::watch_servers(
                &client,
                server_selector.as_deref(),
                notify.clone(),
                servers_changed.clone(),
            );
            tokio::select! {
                _ = fresh.wait_until_ready() => {}
                () = &mut stop => return,
            }
            servers_task.abort();
            (servers, servers_task) = (fresh, task);
        }
        let scope = scope_of(&servers, &instance);
        if scope != caches.scope || stale.is_some() {
            if scope != caches.scope {
                tracing::info!(old = ?caches.scope, new = ?scope, "the instance's cacheSelector changed; rebuilding the watches (the registry keeps serving meanwhile)");
            }
            let fresh = Caches::start(
                &client,
                own(&servers),
                scope,
                notify.clone(),
                registry.clone(),
                metrics.clone(),
                crossplane.subscribe(),
            )
            .await;
            tokio::select! {
                () = fresh.wait_ready() => {}
                () = &mut stop => return,
            }
            caches = Arc::new(fresh);
            re_read = stale;
        }
    }
}
