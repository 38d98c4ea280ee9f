//! One watch per kind: the reflectors whose stores the reconcilers read, the controllers'
//! primary streams, and the root event streams that [`dispatch`] drives.

use std::sync::Arc;

use anyhow::Context as _;
use dco_api::{
    CRDConversionConfig, ConversionWebhookServer, LABEL_MANAGED_BY, MANAGED_BY, XRDConversionConfig,
};
use futures::stream::BoxStream;
use futures::{Stream, StreamExt, future, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use super::sharding::Sharding;
use crate::config_refs::ConfigRefs;
use crate::context::{Stores, Watched};
use crate::kinds::ConfigKind;
use crate::namespaces::{self, Events, ServerNamespaces};
use crate::observability::watch_metrics::WatchMetrics;
use crate::sharding::gate::Gate;
use crate::sharding::sharded_watch;
use crate::wake::fanout::{Fanout, Wake};
use dco_api::target::slim;

/// The watch config of the kinds `--selector` narrows (servers and configs).
fn scoped(selector: &Option<String>) -> watcher::Config {
    match selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    }
}

/// The watch config of what dco made (Secrets, Leases, Deployments, Services).
pub fn managed() -> watcher::Config {
    watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"))
}

/// A controller's primary stream: the objects its root stream's [`dispatch`] passed on.
pub type Primary<K> = BoxStream<'static, Arc<K>>;

/// A root event stream, which must be driven for its store and its controller to move, and
/// the sender of its controller's primary stream.
pub struct Root<K: Resource<DynamicType = ()>> {
    pub events: Events<K>,
    pub triggers: mpsc::UnboundedSender<ObjectRef<K>>,
}

/// The primary streams of the three controllers, and the event streams of the Deployments
/// and Services the server controller drives (one per watched namespace): they fill
/// `Watched`'s stores and wake each object's server.
pub struct Primaries {
    pub servers: Primary<ConversionWebhookServer>,
    pub cccs: Primary<CRDConversionConfig>,
    pub xccs: Primary<XRDConversionConfig>,
    pub deployments: Vec<Events<Deployment>>,
    pub services: Vec<Events<Service>>,
}

/// The root event streams: the dco kinds' each with its controller's sender, and the
/// Secrets' and Leases', one per watched namespace.
pub struct Roots {
    pub servers: Root<ConversionWebhookServer>,
    pub cccs: Root<CRDConversionConfig>,
    pub xccs: Root<XRDConversionConfig>,
    pub secrets: Vec<Events<Secret>>,
    pub leases: Vec<Events<Lease>>,
    /// The unsharded watches of every config (`Watched::config_refs`), already reflected
    /// into the index: they wake the servers a config's `ConfigRef` change concerns.
    pub ccc_refs: Events<CRDConversionConfig>,
    pub xcc_refs: Events<XRDConversionConfig>,
}

pub struct Watches {
    pub stores: Stores,
    pub watched: Watched,
    pub primaries: Primaries,
    pub roots: Roots,
}

/// Opens one watch per kind; none moves before its root stream is driven. The stores the
/// reconcilers read are these reflectors' own. Servers are watched whole: every config's
/// assignment resolves against the whole pool; the configs through the shard-scoped watch.
/// Every watch's errors are counted in `errors`.
pub fn open(
    selector: &Option<String>,
    client: &Client,
    server_ns: &ServerNamespaces,
    sharding: &Sharding,
    errors: &WatchMetrics,
) -> Watches {
    let server_watch = watcher(Api::<ConversionWebhookServer>::all(client.clone()), scoped(selector));
    let (servers, server_primary, server_root) =
        shared(errors.counted("ConversionWebhookServer", server_watch));
    let ccc_watch = errors.counted("CRDConversionConfig", sharded::<CRDConversionConfig>(selector, sharding));
    let (cccs, ccc_primary, ccc_root) = shared(ccc_watch);
    let xcc_watch = errors.counted("XRDConversionConfig", sharded::<XRDConversionConfig>(selector, sharding));
    let (xccs, xcc_primary, xcc_root) = shared(xcc_watch);
    // Secrets and Leases trigger no controller of their own: a deleted serving Secret wakes
    // its server through `dispatch`, which sees deletions too. Both, like the Deployments and
    // Services of the server controller, are watched only where servers may run
    // (`--server-namespaces`, namespaces.rs), the Leases in the coordinator's namespace too.
    let (secrets, secret_events) = namespaces::watch::<Secret>(client, server_ns, managed());
    let secret_events = secret_events.into_iter().map(|e| errors.counted("Secret", e).boxed()).collect();
    // Leases are facts, read whole, through `lease_triggers`.
    let lease_ns = server_ns.with(&sharding.lease_namespace);
    let (leases, lease_events) = namespaces::watch::<Lease>(client, &lease_ns, managed());
    let lease_events = lease_events.into_iter().map(|e| errors.counted("Lease", e).boxed()).collect();
    let (deployments, deployment_events) = namespaces::watch::<Deployment>(client, server_ns, managed());
    let (services, service_events) = namespaces::watch::<Service>(client, server_ns, managed());
    tracing::info!(namespaces = %server_ns.render(), "watching Secrets, Deployments, Services and Leases");
    let config_refs = ConfigRefs::new(2);
    let ccc_refs =
        errors.counted("CRDConversionConfig", every::<CRDConversionConfig>(selector, client, &config_refs));
    let xcc_refs =
        errors.counted("XRDConversionConfig", every::<XRDConversionConfig>(selector, client, &config_refs));
    Watches {
        stores: Stores { servers, leases, secrets, xccs, cccs },
        watched: Watched { config_refs, targets: Default::default(), deployments, services },
        primaries: Primaries {
            servers: server_primary,
            cccs: ccc_primary,
            xccs: xcc_primary,
            deployments: deployment_events,
            services: service_events,
        },
        roots: Roots {
            servers: server_root,
            cccs: ccc_root,
            xccs: xcc_root,
            secrets: secret_events,
            leases: lease_events,
            ccc_refs: ccc_refs.boxed(),
            xcc_refs: xcc_refs.boxed(),
        },
    }
}

/// Every config of kind `K` under `--selector`, unsharded, each event reduced into `refs`
/// as it passes (the objects themselves are not kept: crate::config_refs).
fn every<K: ConfigKind>(
    selector: &Option<String>,
    client: &Client,
    refs: &ConfigRefs,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static {
    let refs = refs.clone();
    watcher(Api::<K>::all(client.clone()), scoped(selector)).default_backoff().inspect(move |ev| {
        if let Ok(ev) = ev {
            refs.apply(ev);
        }
    })
}

/// The watch of config kind `K`, on this replica's shards (sharding/sharded_watch.rs).
fn sharded<K>(
    selector: &Option<String>,
    sharding: &Sharding,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    sharded_watch::watch(
        Api::<K>::all(sharding.watch_client.clone()),
        scoped(selector),
        sharding.gate(),
        sharding.owned(),
        sharding.metrics.clone(),
    )
}

/// Reconciles must not start on empty caches (an empty server cache reads as "no server",
/// an empty config cache as "nothing assigned").
pub async fn synced(stores: &Stores, watched: &Watched) -> anyhow::Result<()> {
    tokio::try_join!(
        async { stores.servers.wait_until_ready().await.context("server cache") },
        async { stores.secrets.wait_until_ready().await.context("secret cache") },
        async { stores.leases.wait_until_ready().await.context("lease cache") },
        async { stores.cccs.wait_until_ready().await.context("CRDConversionConfig cache") },
        async { stores.xccs.wait_until_ready().await.context("XRDConversionConfig cache") },
    )?;
    watched.config_refs.wait_until_ready().await;
    Ok(())
}

/// One watch of kind `K` from `events` (a kube-runtime watcher, or the shard-scoped one of
/// sharding/sharded_watch.rs): its store, the stream of its objects that triggers its controller,
/// and its root: the event stream, which must be driven for any of them to move, and the
/// sender that feeds the controller's stream (the root's [`dispatch`] passes every applied
/// object on).
///
/// Not kube-runtime's shared subscriber: its `ReflectHandle` returns `Pending` without a
/// waker when an object it was told about is already gone from the store (deleted before the
/// controller read the event), which stalls the controller until some unrelated event wakes
/// it. Here a gone object is skipped and the next one read. The channel is unbounded: the
/// controllers start only once every store has listed, so a bounded one would hold the first
/// list (and so the start) back as soon as there are more objects than it holds; what waits
/// in it is one small reference per event, and the controller merges repeats.
fn shared<K>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send + 'static,
) -> (Store<K>, Primary<K>, Root<K>)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded_channel::<ObjectRef<K>>();
    let root = Root { events: reflected(events, writer).boxed(), triggers: tx };
    (store.clone(), triggers(store, rx).boxed(), root)
}

/// The objects named on `rx`, as `store` holds them now; one gone meanwhile is skipped.
fn triggers<K>(
    store: Store<K>,
    rx: mpsc::UnboundedReceiver<ObjectRef<K>>,
) -> impl Stream<Item = Arc<K>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    stream::unfold(rx, |mut rx| async { rx.recv().await.map(|r| (r, rx)) })
        .filter_map(move |r| future::ready(store.get(&r)))
}

/// `events` slimmed (dco_api::target::slim), retried with backoff, and reflected into `writer`.
fn reflected<K>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    writer: Writer<K>,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    events.modify(slim::<K>).default_backoff().reflect_shared(writer)
}

/// Dispatch a root event stream: every applied object of a shard this replica owns goes to
/// `triggers` (its controller's primary stream, when it has one: the enqueue filter, which
/// only shortens queues — the reconcile gate is the check), and `changed` picks what else
/// each event must wake.
pub async fn dispatch<K>(
    kind: &'static str,
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    triggers: Option<(mpsc::UnboundedSender<ObjectRef<K>>, Gate)>,
    mut changed: impl FnMut(&watcher::Event<K>) -> Vec<Wake>,
    fanout: Fanout,
) where
    K: Resource<DynamicType = ()>,
{
    let mut events = std::pin::pin!(events);
    // The objects of a (re)list, sent once it is done: the reflector swaps them into its store
    // only at `InitDone`, and a trigger read before that finds nothing and is skipped
    // (`triggers`). A shard-scoped watch relists whenever the owned shards change, with the
    // controllers running (sharding/sharded_watch.rs).
    let mut listed: Vec<ObjectRef<K>> = Vec::new();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(ev) => {
                crate::observability::memory::touched();
                if let Some((tx, gate)) = &triggers {
                    let sent = match &ev {
                        watcher::Event::Init => {
                            listed.clear();
                            true
                        }
                        watcher::Event::InitApply(o) => {
                            if gate.holds(o.meta().uid.as_deref()) {
                                listed.push(ObjectRef::from_obj(o));
                            }
                            true
                        }
                        watcher::Event::InitDone => listed.drain(..).all(|r| tx.send(r).is_ok()),
                        watcher::Event::Apply(o) => {
                            !gate.holds(o.meta().uid.as_deref()) || tx.send(ObjectRef::from_obj(o)).is_ok()
                        }
                        watcher::Event::Delete(_) => true,
                    };
                    if !sent {
                        return;
                    }
                }
                for w in changed(&ev) {
                    if !fanout.wake(w).await {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(kind, error = %e, "watch failed; retrying (the operator needs list/watch on it)")
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::ResourceExt;

    fn server(name: &str) -> ConversionWebhookServer {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name}, "spec": {},
        }))
        .unwrap()
    }

    /// The enqueue filter: only objects of owned shards reach the controller's queue.
    #[tokio::test]
    async fn only_owned_objects_are_enqueued() {
        use crate::sharding::coordinator::ShardOwnership;
        use crate::sharding::shard::Shards;
        let shards = Shards::new(2).unwrap();
        let uids = [
            "0e8f2c1a-5b7d-4c3e-9a1f-7d6b5c4a3e21",
            "c3d9a7e2-1f4b-4e8a-b6c5-2a9d8e7f6b10",
            "5a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9",
        ];
        let in_shard =
            |i| uids.iter().copied().find(|u| shards.of_uid(u) == i).expect("a fixture uid in each shard");
        let (a, b) = (in_shard(0), in_shard(1));
        let until = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(60);
        // Every shard of a 1-shard space is shard 0 of 2: a's.
        let owned = ShardOwnership::all(Shards::new(1).unwrap(), until);
        let (_keep, rx) = tokio::sync::watch::channel(owned);
        let gate = Gate::new(shards, rx);
        let with_uid = |name: &str, uid: &str| {
            let mut s = server(name);
            s.metadata.uid = Some(uid.to_string());
            s
        };
        let events = stream::iter(vec![
            Ok(watcher::Event::Apply(with_uid("theirs", b))),
            Ok(watcher::Event::Apply(with_uid("ours", a))),
            // A relist: its objects are enqueued once it is done (the store has them then).
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(with_uid("listed", a))),
            Ok(watcher::Event::InitApply(with_uid("listed-theirs", b))),
            Ok(watcher::Event::InitDone),
        ]);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (ctx, _api, _w) = crate::context::testing::test_context();
        let (ccc, _) = mpsc::channel(1);
        let (xcc, _) = mpsc::channel(1);
        let (cws, _) = mpsc::channel(1);
        let fanout = Fanout::new(ctx, ccc, xcc, cws);
        dispatch("ConversionWebhookServer", events, Some((tx, gate)), |_| Vec::new(), fanout).await;
        let mut got = Vec::new();
        while let Ok(r) = rx.try_recv() {
            got.push(r.name);
        }
        assert_eq!(got, ["ours", "listed"]);
    }

    /// An object deleted before its controller read the trigger is skipped, and the stream
    /// goes on to the next one instead of stalling (what kube-runtime's subscriber does).
    #[tokio::test]
    async fn a_trigger_for_a_deleted_object_is_skipped() {
        let (store, mut writer) = reflector::store();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut triggers = std::pin::pin!(triggers(store, rx));
        writer.apply_watcher_event(&watcher::Event::Apply(server("a")));
        tx.send(ObjectRef::new("a")).unwrap();
        writer.apply_watcher_event(&watcher::Event::Delete(server("a")));
        let later = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            writer.apply_watcher_event(&watcher::Event::Apply(server("b")));
            tx.send(ObjectRef::new("b")).unwrap();
            tx
        });
        let next = tokio::time::timeout(std::time::Duration::from_secs(5), triggers.next()).await;
        assert_eq!(next.expect("the stream went on").map(|s| s.name_any()).as_deref(), Some("b"));
        drop(later.await);
    }
}
