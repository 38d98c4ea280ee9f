//! The replica's watches (kube-runtime reflectors): ConversionWebhookServers (all: the pool
//! and the default decide assignment), both config kinds, narrowed by the instance's
//! `cacheSelector`, and the targets' metadata (CRDs, and XRDs while Crossplane's
//! CompositeResourceDefinition CRD serves them, through the version `dco_api::crossplane`
//! prefers: v2 where served, v1 while it is the only one), never narrowed: `cacheSelector` picks configs, as
//! in the reference, and a target without the configs' labels must still be found and served.
//! Targets are watched as metadata only; the ones in this server's share (`share.rs`) are
//! read whole by `targets.rs`, after which the sync loop is woken and reads the stores.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, SystemTime};

use dco_api::assign::Servers;
use dco_api::config::{ConversionConfig, TargetKind};
use dco_api::crossplane::{XrdApi, XrdApiReceiver, XrdVersion};
use dco_api::target::{TARGET_PAGE, slim, slim_target};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use futures::{Stream, StreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, PartialObjectMeta};
use kube::runtime::reflector::{self, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

use crate::kept;
use crate::metrics::Metrics;
use crate::registry::Registry;
use crate::share::{Candidate, Share};
use crate::sync::{ConfigView, MovedFrom, World};
use crate::targets::{self, Held, Key, Wanted};

/// What narrows the config and target watches.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Scope {
    /// A label selector in the apiserver's string form, from the instance's `cacheSelector`.
    pub label_selector: Option<String>,
}

impl Scope {
    /// The scope the instance asks for, or an error naming the bad selector.
    pub fn of(server: Option<&ConversionWebhookServer>) -> Result<Scope, String> {
        let Some(sel) = server.and_then(|s| s.spec.cache_selector.clone()) else {
            return Ok(Scope::default());
        };
        let selector = kube::core::Selector::try_from(sel)
            .map_err(|e| format!("spec.cacheSelector is not a valid label selector: {e}"))?;
        let s = selector.to_string();
        Ok(Scope { label_selector: (!s.is_empty()).then_some(s) })
    }

    /// The config watches: narrowed by `cacheSelector`.
    fn config(&self) -> watcher::Config {
        let c = watcher::Config::default();
        match &self.label_selector {
            Some(s) => c.labels(s),
            None => c,
        }
    }

    /// The target (CRD, XRD) watches: never narrowed. The selector is about configs; CRDs and
    /// XRDs carry their own labels (a Crossplane package's, a chart's), and a selected config
    /// whose target lacks the label would otherwise compile against nothing and go unserved.
    fn targets(&self) -> watcher::Config {
        watcher::Config::default()
    }
}

/// Run a reflector for `api` into a new store, waking `notify` on every event; `keep`
/// narrows each object as it arrives, before it is stored (`kept.rs`).
fn reflect<K>(
    api: Api<K>,
    cfg: watcher::Config,
    notify: Arc<Notify>,
    what: &'static str,
    keep: fn(&mut K),
) -> (Store<K>, JoinHandle<()>)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone,
{
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(writer, watcher(api, cfg).modify(keep).default_backoff());
    (reader, tokio::spawn(drive(stream, notify, what)))
}

/// The metadata of a target kind, slim (`slim_target`) and listed in small pages: the
/// schemas of targets never come through a watch (`targets.rs` reads the named ones).
fn target_metadata<K>(
    api: Api<PartialObjectMeta<K>>,
    dyntype: K::DynamicType,
    cfg: watcher::Config,
) -> (Store<PartialObjectMeta<K>>, impl Stream<Item = watcher::Result<watcher::Event<PartialObjectMeta<K>>>>)
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    let writer = reflector::store::Writer::new(dyntype);
    let reader = writer.as_reader();
    let events = watcher(api, cfg.page_size(TARGET_PAGE))
        .modify(slim_target::<PartialObjectMeta<K>>)
        .default_backoff();
    (reader, reflector::reflector(writer, events))
}

async fn drive<S, K>(stream: S, notify: Arc<Notify>, what: &'static str)
where
    S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
{
    let mut stream = std::pin::pin!(stream);
    while let Some(ev) = stream.next().await {
        match ev {
            Ok(_) => notify.notify_one(),
            Err(e) => tracing::warn!(watch = what, error = %e,
                "watch failed; retrying with backoff (a 403 means the ClusterRole lacks list/watch on this resource)"),
        }
    }
}

/// The XRD metadata store and the version it watches, while XRDs are watched.
type XrdStore = (XrdVersion, Store<PartialObjectMeta<DynamicObject>>);
type XrdSlot = Arc<Mutex<Option<XrdStore>>>;

/// This replica's server and the servers' watch: what its share (`share.rs`) is decided from.
#[derive(Clone)]
pub struct Own {
    pub instance: String,
    /// `--drain-period`.
    pub drain: Duration,
    pub servers: Store<ConversionWebhookServer>,
    /// Bumped on every event of the servers' watch: a server joining, leaving or changing
    /// its pool weight changes what the resolver assigns here.
    pub changed: tokio::sync::watch::Receiver<u64>,
}

/// The targets read whole now, and when that changes by time alone (a move's drain window).
type Names = (Vec<Key>, Option<SystemTime>);

/// What decides which targets are read whole: the configs in scope whose target is in this
/// server's share, the targets' metadata, and the registry (a plan held without a config —
/// its config deleted while the target's `spec.conversion` still names this Service — still
/// needs its target, `hold.rs`).
#[derive(Clone)]
struct Named {
    xccs: Store<XRDConversionConfig>,
    cccs: Store<CRDConversionConfig>,
    crds: Store<PartialObjectMeta<CustomResourceDefinition>>,
    xrds: XrdSlot,
    registry: Arc<Registry>,
    instance: String,
    drain: Duration,
    servers: Store<ConversionWebhookServer>,
}

impl Named {
    /// The servers as the resolver sees them now.
    fn servers(&self) -> Servers {
        Servers::new(self.servers.state().iter().map(|s| s.as_ref().into()))
    }

    /// The targets in the share or held by the registry, and the CRDs Crossplane generated
    /// from the XRDs among them (read whole too: the hold rule reads their `spec.conversion`),
    /// deduplicated.
    fn names(&self, servers: &Servers, now: SystemTime) -> Names {
        let (mut names, expires) = self.targets(servers, now);
        let generated = self.generated(&names);
        names.extend(generated.into_values().flatten().map(|crd| (TargetKind::Crd, crd)));
        names.sort();
        names.dedup();
        (names, expires)
    }

    /// Per XRD in `names`, the CRDs whose controller owner it is (`hold::generated_from`).
    fn generated(&self, names: &[(TargetKind, String)]) -> HashMap<String, Vec<String>> {
        let mut out: HashMap<String, Vec<String>> = HashMap::new();
        let xrds: Vec<&str> =
            names.iter().filter(|(k, _)| *k == TargetKind::Xrd).map(|(_, n)| n.as_str()).collect();
        if xrds.is_empty() {
            return out;
        }
        for crd in self.crds.state() {
            let owners = crd.metadata.owner_references.as_deref().unwrap_or_default();
            for xrd in xrds.iter().filter(|x| crate::hold::generated_from(owners, x)) {
                out.entry((*xrd).to_string()).or_default().push(crd.name_any());
            }
        }
        out
    }

    /// The targets of the configs in the share, and those the registry holds, deduplicated.
    fn targets(&self, servers: &Servers, now: SystemTime) -> Names {
        let share = Share { instance: &self.instance, servers, drain: self.drain };
        let mut names: Vec<Key> = Vec::new();
        let mut expires: Option<SystemTime> = None;
        let mut consider = |(name, until): (Option<Key>, Option<SystemTime>)| {
            names.extend(name);
            if let Some(t) = until {
                expires = Some(expires.map_or(t, |e| e.min(t)));
            }
        };
        for c in self.cccs.state() {
            consider(in_share(&share, c.as_ref(), now));
        }
        for c in self.xccs.state() {
            consider(in_share(&share, c.as_ref(), now));
        }
        names.extend(self.registry.snapshot().values().map(|e| (e.target_kind, e.target.clone())));
        names.sort();
        names.dedup();
        (names, expires)
    }

    /// The XRD store and its version, while XRDs are watched.
    fn xrds(&self) -> Option<XrdStore> {
        self.xrds.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Every target named (`names`) that exists now, at its uid and generation, and when
    /// the names change by time alone.
    fn wanted(&self, servers: &Servers, now: SystemTime) -> (Vec<Wanted>, Option<SystemTime>) {
        let xrds = self.xrds();
        let xrd = xrds.as_ref().map(|(at, _)| at.resource());
        let mut wanted = Vec::new();
        let identity =
            |m: &kube::core::ObjectMeta| (m.uid.clone().unwrap_or_default(), m.generation.unwrap_or(0));
        let (names, expires) = self.names(servers, now);
        for (kind, name) in names {
            let seen = match kind {
                TargetKind::Crd => {
                    self.crds.get(&reflector::ObjectRef::new(&name)).map(|o| identity(&o.metadata))
                }
                TargetKind::Xrd => xrds
                    .as_ref()
                    .zip(xrd.as_ref())
                    .and_then(|((_, s), ar)| s.get(&reflector::ObjectRef::new_with(&name, ar.clone())))
                    .map(|o| identity(&o.metadata)),
            };
            if let Some((uid, generation)) = seen {
                wanted.push(Wanted { key: (kind, name), uid, generation });
            }
        }
        (wanted, expires)
    }
}

/// `c`'s target if it is in `share` at `now`, and when it leaves the share by time alone.
fn in_share<C: ConversionConfig>(
    share: &Share<'_>,
    c: &C,
    now: SystemTime,
) -> (Option<Key>, Option<SystemTime>) {
    let (placement, moved_from) = (c.placement(), c.handover().and_then(MovedFrom::of));
    let candidate = Candidate {
        target: c.target_name(),
        pin: c.conversion().webhook_server_ref.as_ref().map(|r| r.name.as_str()),
        placement: &placement,
        moved_from: moved_from.as_ref(),
    };
    let key = share.why(&candidate, now).map(|_| (c.target_kind(), c.target_name().to_string()));
    (key, share.expires(&candidate, now))
}

/// GETs in flight at once while reading targets whole (the first round reads every named one).
const FETCH_CONCURRENCY: usize = 8;
/// When a read failed, the next round runs this much later even without events.
const FETCH_RETRY: Duration = Duration::from_secs(2);

/// Reads the named targets whole into `held`.
struct Fetcher {
    client: Client,
    named: Named,
    held: Arc<Held>,
    metrics: Arc<Metrics>,
    /// Bumped on every server event (`Own::changed`).
    servers_changed: tokio::sync::watch::Receiver<u64>,
}

impl Fetcher {
    /// Keeps `held` to the targets `named` names, at their current generation: a round per wake
    /// (a config, server or target event, a registry change, or the end of a move's drain
    /// window), then a wake of the sync loop (`sync`).
    /// `fetched` turns true after the first round over the initial `lists`.
    async fn run(
        self,
        wake: Arc<Notify>,
        sync: Arc<Notify>,
        lists: impl std::future::Future<Output = ()>,
        fetched: tokio::sync::watch::Sender<bool>,
    ) {
        let Fetcher { client, named, held, metrics, mut servers_changed } = self;
        lists.await;
        let mut registry_changes = named.registry.subscribe();
        loop {
            servers_changed.mark_unchanged();
            let (wanted, expires) = named.wanted(&named.servers(), SystemTime::now());
            let (stale, released) = held.stale(&wanted);
            // XRDs are read at the version they are watched at (wanted only while watched).
            let xrd_at = named.xrds().map(|(at, _)| at);
            let reads = futures::stream::iter(stale)
                .map(|w| {
                    let client = client.clone();
                    async move {
                        let got = targets::fetch(&client, w.key.0, xrd_at, &w.key.1).await;
                        (w, got)
                    }
                })
                .buffer_unordered(FETCH_CONCURRENCY)
                .collect::<Vec<_>>()
                .await;
            let mut failed = false;
            for (w, got) in reads {
                match got {
                    Ok(object) => held.put(w.key, object),
                    Err(e) => {
                        failed = true;
                        held.failed(w.key.clone());
                        tracing::warn!(target = w.key.1, kind = ?w.key.0, error = %e,
                        "cannot read the target; keeping the copy held so far and retrying (needs get on its resource)");
                    }
                }
            }
            if released {
                tracing::debug!(held = held.len(), "released targets that left this server's share");
            }
            metrics.targets_held.set(i64::try_from(held.len()).unwrap_or(i64::MAX));
            metrics.targets_held_bytes.set(i64::try_from(held.bytes()).unwrap_or(i64::MAX));
            if !*fetched.borrow() {
                tracing::info!(held = held.len(), "read the targets of this server's share whole");
                fetched.send_replace(true);
            }
            sync.notify_one();
            let window = expires.map(|t| t.duration_since(SystemTime::now()).unwrap_or_default());
            tokio::select! {
                () = wake.notified() => {}
                // A plan dropped (or held without a config) changes what is named.
                _ = registry_changes.changed() => {}
                // The resolver's answer may have changed.
                Ok(()) = servers_changed.changed() => {}
                () = tokio::time::sleep(FETCH_RETRY), if failed => {}
                () = tokio::time::sleep(window.unwrap_or_default()), if window.is_some() => {}
            }
        }
    }
}

/// The reflector stores of one scope.
pub struct Caches {
    named: Named,
    held: Arc<Held>,
    fetched: tokio::sync::watch::Receiver<bool>,
    tasks: Vec<JoinHandle<()>>,
    pub scope: Scope,
}

impl Drop for Caches {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

/// The server watch lives apart from the scoped caches: the scope itself comes from it.
/// `selector` (`--server-selector`) narrows the pool to the servers the operator manages.
/// Every event wakes `notify` (the sync loop) and bumps `changed` (the target reader of
/// whichever caches run now: what the resolver assigns here may have changed).
pub fn watch_servers(
    client: &Client,
    selector: Option<&str>,
    notify: Arc<Notify>,
    changed: tokio::sync::watch::Sender<u64>,
) -> (Store<ConversionWebhookServer>, JoinHandle<()>) {
    let config = match selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    };
    let (reader, writer) = reflector::store();
    let stream = reflector::reflector(
        writer,
        watcher(Api::all(client.clone()), config).modify(slim::<ConversionWebhookServer>).default_backoff(),
    )
    .inspect(move |ev| {
        if ev.is_ok() {
            changed.send_modify(|v| *v = v.wrapping_add(1));
        }
    });
    (reader, tokio::spawn(drive(stream, notify, "ConversionWebhookServers")))
}

impl Caches {
    /// Starts the scope's watches. Their events wake the target reader, which wakes `notify`
    /// (the sync loop) once the targets they name are read.
    pub async fn start(
        client: &Client,
        own: Own,
        scope: Scope,
        notify: Arc<Notify>,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        crossplane: XrdApiReceiver,
    ) -> Caches {
        let wake = Arc::new(Notify::new());
        let (xccs, t1) = reflect(
            Api::all(client.clone()),
            scope.config(),
            wake.clone(),
            "XRDConversionConfigs",
            kept::config,
        );
        let (cccs, t2) = reflect(
            Api::all(client.clone()),
            scope.config(),
            wake.clone(),
            "CRDConversionConfigs",
            kept::config,
        );
        let (crds, events) = target_metadata(Api::all(client.clone()), (), scope.targets());
        let t3 = tokio::spawn(drive(events, wake.clone(), "CustomResourceDefinitions"));
        let xrds: XrdSlot = Arc::new(Mutex::new(None));
        let (settled, xrds_settled) = tokio::sync::watch::channel(false);
        let t4 = tokio::spawn(watch_xrds_while_installed(
            XrdWatch {
                client: client.clone(),
                scope: scope.clone(),
                notify: wake.clone(),
                slot: xrds.clone(),
                metrics: metrics.clone(),
            },
            crossplane,
            settled,
        ));
        let Own { instance, drain, servers, changed: servers_changed } = own;
        let named = Named { xccs, cccs, crds, xrds, registry, instance, drain, servers };
        let held = Arc::new(Held::default());
        let lists = {
            let (named, mut xrds_settled) = (named.clone(), xrds_settled);
            async move {
                let _ = named.xccs.wait_until_ready().await;
                let _ = named.cccs.wait_until_ready().await;
                let _ = named.crds.wait_until_ready().await;
                let _ = xrds_settled.wait_for(|settled| *settled).await;
            }
        };
        let (fetched_tx, fetched) = tokio::sync::watch::channel(false);
        let fetcher = Fetcher {
            client: client.clone(),
            named: named.clone(),
            held: held.clone(),
            metrics,
            servers_changed,
        };
        let t5 = tokio::spawn(fetcher.run(wake, notify, lists, fetched_tx));
        Caches { named, held, fetched, tasks: vec![t1, t2, t3, t4, t5], scope }
    }

    /// Resolves once every started watch has listed once and the targets the configs name
    /// were read. The XRD watch counts only when Crossplane was found at start; its first
    /// list completes before it is published here.
    pub async fn wait_ready(&self) {
        let all = async {
            let _ = self.named.servers.wait_until_ready().await;
            let _ = self.fetched.clone().wait_for(|f| *f).await;
        };
        let mut all = std::pin::pin!(all);
        loop {
            tokio::select! {
                () = &mut all => return,
                () = tokio::time::sleep(Duration::from_secs(10)) => tracing::info!(
                    "still waiting for the initial lists of servers, configs and CRDs and the named targets; not ready until they complete"),
            }
        }
    }

    /// Render the stores into the pass's input: the configs, the targets held whole and those
    /// about to be (the share and the resolver over one snapshot of the servers).
    pub fn world(&self) -> World {
        let servers = self.named.servers();
        let mut configs = Vec::new();
        for c in self.named.xccs.state() {
            configs.push(config_view("XRDConversionConfig", c.as_ref()));
        }
        for c in self.named.cccs.state() {
            configs.push(config_view("CRDConversionConfig", c.as_ref()));
        }
        let now = SystemTime::now();
        let mut targets = HashMap::new();
        let mut unread = HashSet::new();
        for w in self.named.wanted(&servers, now).0 {
            if let Some(v) = self.held.get(&w.key) {
                targets.insert(w.key, v);
            } else if self.held.unread(&w.key) {
                unread.insert(w.key);
            }
        }
        let generated = self.named.generated(&self.named.targets(&servers, now).0);
        World { configs, targets, servers, generated, unread }
    }
}

/// uid + generation: changes with every spec change.
fn fingerprint<K: Resource>(o: &K) -> String {
    format!("{}@{}", o.meta().uid.as_deref().unwrap_or(""), o.meta().generation.unwrap_or(0))
}

pub(crate) fn config_view<C: ConversionConfig + Resource>(kind: &str, c: &C) -> ConfigView {
    ConfigView {
        kind: kind.to_string(),
        name: c.name_any(),
        target: c.target_name().to_string(),
        target_kind: c.target_kind(),
        spec: Arc::new(c.conversion().clone()),
        fingerprint: fingerprint(c),
        moved_from: c.handover().and_then(crate::sync::MovedFrom::of),
    }
}

/// What the XRD watch needs.
struct XrdWatch {
    client: Client,
    scope: Scope,
    /// Woken on every XRD event and when the watch starts or stops.
    notify: Arc<Notify>,
    /// The XRD metadata store while the watch runs and has listed once.
    slot: XrdSlot,
    metrics: Arc<Metrics>,
}

impl XrdWatch {
    /// Publishes the store (or its absence), so the target reader wants XRD targets only
    /// while XRDs are watched: without it their copies are released and the next pass drops
    /// their plans as it does for a deleted target.
    fn publish(&self, store: Option<XrdStore>) {
        self.metrics.xrds_watched.set(i64::from(store.is_some()));
        *self.slot.lock().unwrap_or_else(PoisonError::into_inner) = store;
        self.notify.notify_one();
    }

    /// Watches XRDs through `at` until `crossplane` prefers another version or none (`true`)
    /// or the watch ends (`false`). `settled` turns true once the first list completed. The
    /// store watched so far (another version's) serves until this one has listed.
    async fn run(
        &self,
        at: XrdVersion,
        crossplane: &mut XrdApiReceiver,
        settled: &tokio::sync::watch::Sender<bool>,
    ) -> bool {
        let res = at.resource();
        let (reader, stream) =
            target_metadata(Api::all_with(self.client.clone(), &res), res, self.scope.targets());
        let driving = drive(stream, self.notify.clone(), "CompositeResourceDefinitions");
        let mut driving = std::pin::pin!(driving);
        let changed = crossplane.wait_for(|a| a.is_some_and(|a| a.preferred() != Some(at)));
        let mut changed = std::pin::pin!(changed);
        let mut listed = false;
        loop {
            tokio::select! {
                () = &mut driving => return false,
                c = &mut changed => return c.is_ok(),
                ready = reader.wait_until_ready(), if !listed => {
                    listed = true;
                    if ready.is_ok() {
                        tracing::info!(api = at.api_version(), "Crossplane found: watching CompositeResourceDefinitions");
                        self.publish(Some((at, reader.clone())));
                        settled.send_replace(true);
                    }
                }
            }
        }
    }
}

/// Watch XRDs while Crossplane's CRD serves them (`crossplane`, `dco_api::crossplane`), through
/// the version it prefers: start when it appears, watch again when the preferred version
/// changes (an upgrade adding `v2`), stop and drop the XRD targets once it is gone; while it
/// is absent there are no XRDs to serve and nothing fails. `settled` turns true once
/// Crossplane is known absent or the XRD watch listed once, so readiness waits for XRDs only
/// where they exist.
async fn watch_xrds_while_installed(
    xrds: XrdWatch,
    mut crossplane: XrdApiReceiver,
    settled: tokio::sync::watch::Sender<bool>,
) {
    loop {
        let Some(api) = dco_api::crossplane::wait_known(&mut crossplane).await else { return };
        if let Some(at) = api.preferred() {
            if !xrds.run(at, &mut crossplane, &settled).await {
                return;
            }
            if crossplane.borrow().is_some_and(|a| !a.installed()) {
                tracing::info!(
                    "Crossplane was removed: stopped watching CompositeResourceDefinitions; dropping the XRD targets"
                );
                xrds.publish(None);
            }
        } else {
            if !*settled.borrow() {
                tracing::info!("serving CRD targets only until Crossplane is installed");
                xrds.publish(None);
                settled.send_replace(true);
            }
            if crossplane.wait_for(|a| a.is_some_and(XrdApi::installed)).await.is_err() {
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(spec: serde_json::Value) -> ConversionWebhookServer {
        ConversionWebhookServer::new("s", serde_json::from_value(spec).unwrap())
    }

    #[test]
    fn cache_selector_narrows_the_configs_and_never_the_targets() {
        let s = server(serde_json::json!({"cacheSelector": {"matchLabels": {"team": "a"},
            "matchExpressions": [{"key": "tier", "operator": "In", "values": ["gold"]}]}}));
        let scope = Scope::of(Some(&s)).unwrap();
        let configs = scope.config().label_selector.unwrap_or_default();
        assert!(configs.contains("team=a") && configs.contains("tier in (gold)"), "{configs}");
        // CRDs and XRDs are watched whole: a target without the configs' labels is still seen.
        assert_eq!(scope.targets().label_selector, None);

        let unscoped = Scope::of(Some(&server(serde_json::json!({})))).unwrap();
        assert_eq!((unscoped.config().label_selector, unscoped.targets().label_selector), (None, None));
        assert_eq!(Scope::of(None).unwrap(), Scope::default());
    }

    #[test]
    fn a_bad_cache_selector_is_named() {
        let s = server(
            serde_json::json!({"cacheSelector": {"matchExpressions": [{"key": "tier", "operator": "Bogus"}]}}),
        );
        let err = Scope::of(Some(&s)).unwrap_err();
        assert!(err.starts_with("spec.cacheSelector is not a valid label selector"), "{err}");
    }
}
