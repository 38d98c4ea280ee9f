//! Who wakes whom, apart from each controller's own objects (the rules are crate::wake's):
//! a server's spec, deletion, existence and CA → the configs it affects (paced); its Leases
//! and its served status → the unsettled configs it takes part in; a config's ConfigRef → its
//! servers; a Secret → its server. Nothing wakes a config because a server's status listed
//! it. And OnChange: what a change of the owned shards wakes.

use std::sync::Arc;

use dco_api::{CRDConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::mpsc;

use super::sharding::Sharding;
use super::watches::{Roots, dispatch};
use crate::context::Context;
use crate::kinds::{ConfigKind, ConfigRef};
use crate::namespaces::{self, Events};
use crate::served::lease_triggers;
use crate::sharding::gate::Gate;
use crate::sharding::run;
use crate::wake::changes::Changes;
use crate::wake::fanout::{self, Fanout, Wake};
use crate::wake::views::{self, CaView, ServedView, ServerView};

/// What the fan-out asks of each controller, beyond its primary stream.
pub struct Queues {
    pub servers: mpsc::Receiver<ObjectRef<ConversionWebhookServer>>,
    pub cccs: mpsc::Receiver<ObjectRef<CRDConversionConfig>>,
    pub xccs: mpsc::Receiver<ObjectRef<XRDConversionConfig>>,
}

/// Hands the Coordinator its OnChange and drives every root stream: each feeds its
/// controller and wakes what its changes wake, through the queues returned.
pub fn start(roots: Roots, ctx: Arc<Context>, sharding: &mut Sharding) -> Queues {
    let gate = sharding.gate();
    let on_change = on_change(ctx.stores.servers.clone(), gate.clone(), roots.servers.triggers.clone());
    sharding.coordinator.run(on_change);
    let (ccc_tx, cccs) = mpsc::channel(4096);
    let (xcc_tx, xccs) = mpsc::channel(4096);
    let (cws_tx, servers) = mpsc::channel::<ObjectRef<ConversionWebhookServer>>(4096);
    let fanout = Fanout::new(ctx, ccc_tx, xcc_tx, cws_tx);
    let Roots { servers: server_root, cccs: ccc_root, xccs: xcc_root, secrets, leases, ccc_refs, xcc_refs } =
        roots;
    // The shard-scoped config watches feed their controllers only; a config's change wakes
    // its servers from the unsharded watch of every config, so a change in a shard another
    // replica owns reaches the replica that owns the server.
    tokio::spawn(dispatch(
        "CRDConversionConfig",
        ccc_root.events,
        Some((ccc_root.triggers, gate.clone())),
        |_| Vec::new(),
        fanout.clone(),
    ));
    tokio::spawn(dispatch(
        "XRDConversionConfig",
        xcc_root.events,
        Some((xcc_root.triggers, gate.clone())),
        |_| Vec::new(),
        fanout.clone(),
    ));
    tokio::spawn(dispatch("CRDConversionConfig", ccc_refs, None, config_changes(), fanout.clone()));
    tokio::spawn(dispatch("XRDConversionConfig", xcc_refs, None, config_changes(), fanout.clone()));
    tokio::spawn(dispatch(
        "ConversionWebhookServer",
        server_root.events,
        Some((server_root.triggers, gate.clone())),
        server_changes(),
        fanout.clone(),
    ));
    // One dispatch per namespace: `Changes` reads a relist as the whole of its watch.
    for events in secrets {
        tokio::spawn(dispatch("Secret", events, None, secret_changes(), fanout.clone()));
    }
    tokio::spawn(lease_wakes(leases, coordinator_nudges(sharding), fanout));
    Queues { servers, cccs, xccs }
}

/// OnChange: every held server goes back into its controller's queue (the gate lets the
/// owned ones through). The configs need no such pass: the same change restarts their
/// shard-scoped watches, whose relist enqueues every held config once it is in the store
/// (`dispatch`), so a second enqueue here would only reconcile each of them twice.
fn on_change(
    servers: Store<ConversionWebhookServer>,
    gate: Gate,
    requeue: mpsc::UnboundedSender<ObjectRef<ConversionWebhookServer>>,
) -> impl FnMut() + Send + 'static {
    move || {
        for s in servers.state().iter().filter(|o| gate.holds(o.meta().uid.as_deref())) {
            let _ = requeue.send(ObjectRef::from_obj(s.as_ref()));
        }
    }
}

/// A server's changes → the configs its spec, deletion or existence affects, and the moves
/// its served status lets progress.
fn server_changes() -> impl FnMut(&watcher::Event<ConversionWebhookServer>) -> Vec<Wake> {
    let (mut spec, mut served) = (Changes::default(), Changes::default());
    move |ev| {
        let mut out: Vec<Wake> = fanout::servers_of(&spec.observe(ev, ServerView::of), |v| &v.name)
            .into_iter()
            .map(Wake::Affected)
            .collect();
        out.extend(
            fanout::servers_of(&served.observe(ev, ServedView::of), |v| &v.name)
                .into_iter()
                .map(Wake::Progress),
        );
        out
    }
}

/// A Secret's changes → the servers whose CA bundle it changes, and its owner (like
/// `Controller::watches`: every touched Secret wakes its owner, deletions too).
fn secret_changes() -> impl FnMut(&watcher::Event<Secret>) -> Vec<Wake> {
    let mut ca = Changes::default();
    move |ev| {
        let mut out: Vec<Wake> = fanout::servers_of(&ca.observe(ev, CaView::of), |v| &v.server)
            .into_iter()
            .map(Wake::Affected)
            .collect();
        if let watcher::Event::Apply(s) | watcher::Event::Delete(s) = ev {
            out.extend(views::owner_of(s).map(Wake::Server));
        }
        out
    }
}

/// A config's changes → the servers whose status or deletion reads it (`ConfigRef`).
fn config_changes<K: ConfigKind>() -> impl FnMut(&watcher::Event<K>) -> Vec<Wake> {
    let mut changes = Changes::default();
    move |ev| {
        let changed = changes.observe(ev, |c: &K| Some(ConfigRef::of(c)));
        let servers = fanout::config_servers(&changed).into_iter().map(Wake::Server);
        servers.chain(fanout::claimed_targets(&changed).into_iter().map(Wake::Naming)).collect()
    }
}

/// Another replica's free of a shard Lease, a new member or a member Lease gone asks this
/// Coordinator for a tick now rather than at its next interval (sharding/run.rs).
fn coordinator_nudges(
    sharding: &Sharding,
) -> impl FnMut(&watcher::Result<watcher::Event<Lease>>) + Send + 'static {
    let nudge = sharding.coordinator.nudge.clone();
    let mut nudges = run::Nudges::new(sharding.lease_namespace.clone(), &sharding.lease_names, &sharding.me);
    move |ev| {
        let now = match ev {
            Ok(watcher::Event::Apply(l)) => nudges.observe(l),
            Ok(watcher::Event::Delete(l)) => nudges.observe_deleted(l),
            _ => false,
        };
        if now {
            nudge.notify_one();
        }
    }
}

/// The Leases, all namespaces' as one stream: each change that can alter what a server's
/// replicas serve wakes the moves it takes part in and the server itself.
async fn lease_wakes(
    leases: Vec<Events<Lease>>,
    nudges: impl FnMut(&watcher::Result<watcher::Event<Lease>>) + Send + 'static,
    fanout: Fanout,
) {
    let events = namespaces::merged(leases).inspect(nudges);
    let mut triggers = std::pin::pin!(lease_triggers(events));
    while let Some(server) = triggers.next().await {
        let progress = Wake::Progress(server.name.clone());
        if !fanout.wake(progress).await || !fanout.wake(Wake::Server(server)).await {
            return;
        }
    }
}
