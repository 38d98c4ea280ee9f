//! What a change of one object must wake elsewhere, decided on the fields that matter only.
//!
//! A server's status is written by its own reconcile (server/status.rs lists the configs it
//! serves, with their phase), so waking configs on every server event made each config change
//! re-reconcile every config of its servers. Here a server fans out only when what the
//! resolver or a config reads of it changes (spec, deletion, existence), or its serving CA.
//! Handover progress is woken apart (`progress`), for the unsettled configs a server takes
//! part in only: on its Leases, and on the part of its status a move reads ([`ServedView`]:
//! ready replicas and `Available`, config/facts.rs).

use std::collections::{HashMap, HashSet};
use std::num::NonZeroU32;
use std::sync::Arc;

use dco_api::assign::Servers;
use dco_api::{
    CRDConversionConfig, ConversionWebhookServer, ConversionWebhookServerSpec, LABEL_INSTANCE,
    XRDConversionConfig,
};
use futures::{Stream, stream};
use governor::{Quota, RateLimiter};
use k8s_openapi::api::core::v1::Secret;
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::watcher;
use kube::{Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::context::Context;
use crate::kinds::ConfigKind;
use crate::kinds::{self, ConfigRef};
use crate::pki;

/// One object's relevant fields going from `before` to `after` (`None`: absent, or not ours).
#[derive(Clone, Debug, PartialEq)]
pub struct Change<V> {
    pub before: Option<V>,
    pub after: Option<V>,
}

/// The last seen view of each object of a watch, to pass on only changes of that view.
/// Relists (`Init` … `InitDone`) are compared too: what changed or vanished while the watch
/// was down is reported, the first list only records.
pub struct Changes<V> {
    seen: HashMap<(Option<String>, String), V>,
    relisted: Option<HashSet<(Option<String>, String)>>,
    listed: bool,
}

impl<V> Default for Changes<V> {
    fn default() -> Self {
        Changes { seen: HashMap::new(), relisted: None, listed: false }
    }
}

impl<V: Clone + PartialEq> Changes<V> {
    pub fn observe<K: Resource>(
        &mut self,
        ev: &watcher::Event<K>,
        view: impl Fn(&K) -> Option<V>,
    ) -> Vec<Change<V>> {
        let key = |o: &K| (o.meta().namespace.clone(), o.meta().name.clone().unwrap_or_default());
        let mut out = Vec::new();
        match ev {
            watcher::Event::Apply(o) | watcher::Event::InitApply(o) => {
                let k = key(o);
                let after = view(o);
                let before = match &after {
                    Some(v) => self.seen.insert(k.clone(), v.clone()),
                    None => self.seen.remove(&k),
                };
                if let Some(r) = self.relisted.as_mut().filter(|_| matches!(ev, watcher::Event::InitApply(_)))
                {
                    r.insert(k);
                }
                let first_list = matches!(ev, watcher::Event::InitApply(_)) && !self.listed;
                if before != after && !first_list {
                    out.push(Change { before, after });
                }
            }
            watcher::Event::Delete(o) => {
                if let Some(before) = self.seen.remove(&key(o)) {
                    out.push(Change { before: Some(before), after: None });
                }
            }
            watcher::Event::Init => self.relisted = Some(HashSet::new()),
            watcher::Event::InitDone => {
                if let Some(listed) = self.relisted.take() {
                    let gone: Vec<_> = self.seen.keys().filter(|k| !listed.contains(*k)).cloned().collect();
                    for k in gone {
                        if let Some(before) = self.seen.remove(&k) {
                            out.push(Change { before: Some(before), after: None });
                        }
                    }
                }
                self.listed = true;
            }
        }
        out
    }
}

/// What of a server the resolver (`ServerInfo::from`) and the configs read: never its status.
#[derive(Clone, Debug, PartialEq)]
pub struct ServerView {
    pub name: String,
    pub spec: ConversionWebhookServerSpec,
    pub deleting: bool,
}

impl ServerView {
    pub fn of(s: &ConversionWebhookServer) -> Option<Self> {
        Some(ServerView {
            name: s.name_any(),
            spec: s.spec.clone(),
            deleting: s.meta().deletion_timestamp.is_some(),
        })
    }
}

/// What the handover machine reads of a server's status: its ready replicas (the count a
/// destination's Leases must match, `served::replicas`) and `Available` (whether it may be
/// wired to, config/facts.rs) — not `servedTargets` (a move reads the Leases themselves, and
/// Lease changes wake it already), `assignedConfigs` or condition messages, which a config
/// change itself rewrites.
#[derive(Clone, Debug, PartialEq)]
pub struct ServedView {
    pub name: String,
    pub ready_replicas: i32,
    pub available: bool,
}

impl ServedView {
    pub fn of(s: &ConversionWebhookServer) -> Option<Self> {
        let st = s.status.as_ref();
        Some(ServedView {
            name: s.name_any(),
            ready_replicas: st.map_or(0, |st| st.ready_replicas),
            available: st.is_some_and(|st| {
                dco_state::conditions::is_true(&st.conditions, crate::server::condition::AVAILABLE)
            }),
        })
    }
}

/// A server's certificate Secret as the configs read it: whose it is and its `ca.crt`
/// (`Context::ca_bundle` puts that into the targets' caBundle).
#[derive(Clone, Debug, PartialEq)]
pub struct CaView {
    pub server: String,
    pub ca: Option<Vec<u8>>,
}

impl CaView {
    pub fn of(s: &Secret) -> Option<Self> {
        let server = owner_of(s).map(|r| r.name).or_else(|| s.labels().get(LABEL_INSTANCE).cloned())?;
        let ca = s.data.as_ref().and_then(|d| d.get(pki::CA_CRT)).map(|b| b.0.clone());
        Some(CaView { server, ca })
    }
}

/// The servers named in a change (a Secret moving between servers names both).
pub fn servers_of<V>(changes: &[Change<V>], server: impl Fn(&V) -> &str) -> Vec<String> {
    let mut out: Vec<String> =
        changes.iter().flat_map(|c| [&c.before, &c.after]).flatten().map(|v| server(v).to_string()).collect();
    out.sort();
    out.dedup();
    out
}

/// The servers a config's change must refresh (status.assignedConfigs, deletion blockers):
/// those it names before and after. A change that leaves its `ConfigRef` as it was (an
/// annotation, a rule, its own conditions) names none, so it wakes no server.
pub fn config_servers(changes: &[Change<ConfigRef>]) -> Vec<ObjectRef<ConversionWebhookServer>> {
    let mut names: Vec<&String> = changes
        .iter()
        .flat_map(|c| [&c.before, &c.after])
        .flatten()
        .flat_map(|c| [&c.pin, &c.assigned, &c.source, &c.destination])
        .flatten()
        .collect();
    names.sort();
    names.dedup();
    names.into_iter().map(|n| ObjectRef::new(n)).collect()
}

/// The configs whose handover may progress on what `server` serves: those it takes part in
/// (or that now resolve to it) and that are not settled where they resolve — mid-move, or
/// still settled on their old server while the machine waits for the new one to be Available
/// (the handover's gate, `dco_state::handover::step`). A config settled where it resolves
/// waits for nothing.
pub fn progressing(configs: &[ConfigRef], servers: &Servers, server: &str) -> Vec<String> {
    configs
        .iter()
        .filter(|c| {
            let now = servers.resolve(&c.target, c.pin.as_deref()).ok().map(|a| a.server);
            let waiting = !c.settled || now != c.destination;
            waiting && (c.involves(server) || now.as_deref() == Some(server))
        })
        .map(|c| c.name.clone())
        .collect()
}

/// What one event wakes.
#[derive(Clone, Debug, PartialEq)]
pub enum Wake {
    /// A server's spec, deletion, existence or CA changed: `kinds::affected_by`.
    Rebalance(String),
    /// What a server serves may have changed: the moves it takes part in (`progressing`).
    Progress(String),
    /// A server's reconcile: its child, its Leases, or a config it lists changed.
    Server(ObjectRef<ConversionWebhookServer>),
}

/// Delivers [`Wake`]s: config requests to the two (paced) config controllers, server
/// requests to the server controller.
#[derive(Clone)]
pub struct Fanout {
    ctx: Arc<Context>,
    ccc: mpsc::Sender<ObjectRef<CRDConversionConfig>>,
    xcc: mpsc::Sender<ObjectRef<XRDConversionConfig>>,
    cws: mpsc::Sender<ObjectRef<ConversionWebhookServer>>,
}

impl Fanout {
    pub fn new(
        ctx: Arc<Context>,
        ccc: mpsc::Sender<ObjectRef<CRDConversionConfig>>,
        xcc: mpsc::Sender<ObjectRef<XRDConversionConfig>>,
        cws: mpsc::Sender<ObjectRef<ConversionWebhookServer>>,
    ) -> Self {
        Fanout { ctx, ccc, xcc, cws }
    }

    /// `false` once the receiving controllers are gone.
    pub async fn wake(&self, w: Wake) -> bool {
        match w {
            Wake::Rebalance(server) => {
                let pool = self.ctx.servers();
                self.configs(|configs| kinds::affected_by(configs, &pool, &server)).await
            }
            Wake::Progress(server) => {
                let pool = self.ctx.servers();
                self.configs(|configs| progressing(configs, &pool, &server)).await
            }
            Wake::Server(r) => self.cws.send(r).await.is_ok(),
        }
    }

    async fn configs(&self, pick: impl Fn(&[ConfigRef]) -> Vec<String>) -> bool {
        send_all(&self.ccc, pick(&refs(&self.ctx.stores.cccs))).await
            && send_all(&self.xcc, pick(&refs(&self.ctx.stores.xccs))).await
    }
}

/// The server whose child `o` is, by its controller ownerReference (server/desired.rs
/// `owner`). Not `Controller::owns`: kube-runtime gives the owner's reference the child's
/// namespace (controller/trigger.rs `trigger_owners`), which never matches a cluster-scoped
/// server in the store, so those triggers would be dropped.
pub fn owner_of<K: Resource>(o: &K) -> Option<ObjectRef<ConversionWebhookServer>> {
    let (kind, api_version) = (ConversionWebhookServer::kind(&()), ConversionWebhookServer::api_version(&()));
    o.meta()
        .owner_references
        .as_ref()?
        .iter()
        .find(|r| r.controller == Some(true) && r.kind == kind && r.api_version == api_version)
        .map(|r| ObjectRef::new(&r.name))
}

async fn send_all<K: Resource<DynamicType = ()>>(
    tx: &mpsc::Sender<ObjectRef<K>>,
    names: Vec<String>,
) -> bool {
    for name in names {
        if tx.send(ObjectRef::new(&name)).await.is_err() {
            return false;
        }
    }
    true
}

pub fn refs<K: ConfigKind>(store: &Store<K>) -> Vec<ConfigRef> {
    store.state().iter().map(|c| ConfigRef::of(c.as_ref())).collect()
}

/// The rebalance budget (`--rebalance-qps`), shared by the live members of the Coordinator:
/// each replica paces at its share, so adding replicas does not multiply the burst of
/// reconciles (and their target reads and writes) on the apiserver (docs/sharding.md,
/// "Pacing is one budget"). One pacer serves both config controllers.
pub struct Pacer {
    qps: u32,
    members: Box<dyn Fn() -> usize + Send + Sync>,
    limiter: std::sync::Mutex<(u32, Arc<governor::DefaultDirectRateLimiter>)>,
}

impl Pacer {
    /// `members` reads how many live members share the budget now (1 if unknown).
    pub fn new(qps: u32, members: impl Fn() -> usize + Send + Sync + 'static) -> Self {
        let rate = share(qps, 1);
        Pacer { qps, members: Box::new(members), limiter: std::sync::Mutex::new((rate, limiter(rate))) }
    }

    /// This replica's rate now, per second.
    pub fn rate(&self) -> u32 {
        share(self.qps, (self.members)())
    }

    /// Waits for the next permit at this replica's current share.
    pub async fn ready(&self) {
        let rate = self.rate();
        let l = {
            let mut cur = self.limiter.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if cur.0 != rate {
                *cur = (rate, limiter(rate));
            }
            cur.1.clone()
        };
        l.until_ready().await;
    }
}

/// One member's share of `qps` among `members`: never below 1 per second, so every replica
/// makes progress; the sum stays within the budget whenever `qps >= members`.
pub fn share(qps: u32, members: usize) -> u32 {
    let n = u32::try_from(members.max(1)).unwrap_or(u32::MAX);
    (qps / n).max(1)
}

fn limiter(rate: u32) -> Arc<governor::DefaultDirectRateLimiter> {
    let quota = Quota::per_second(NonZeroU32::new(rate.max(1)).unwrap_or(NonZeroU32::MIN));
    Arc::new(RateLimiter::direct(quota))
}

/// Reconcile requests from a channel, paced by `pacer` (rebalancing may enqueue many configs
/// at once), each config once while it waits for its permit: a request for a config already
/// waiting keeps the first one's place. Every Lease change of a server wakes all the configs
/// moving with it (`progressing`), so during a rebalance the same configs arrive again and
/// again; passed on one by one, the copies used the budget up (e2e_rebalance at 10 qps: 73
/// moves started at 1.8/s over 39 s; once each, at 8.6/s over 8 s).
pub fn paced<K>(
    rx: mpsc::Receiver<ObjectRef<K>>,
    pacer: Arc<Pacer>,
) -> impl Stream<Item = ObjectRef<K>> + Send
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Send + Sync + Clone + Eq + std::hash::Hash,
{
    stream::unfold((Pending::new(rx), pacer), |(mut pending, pacer)| async move {
        loop {
            pending.take_sent();
            if pending.queue.is_empty() {
                let r = pending.rx.recv().await?;
                pending.push(r);
                continue;
            }
            pacer.ready().await;
            // What arrived during the wait joins the queue (or finds itself in it already).
            pending.take_sent();
            let r = pending.pop()?;
            return Some((r, (pending, pacer)));
        }
    })
}

/// The requests waiting for a permit, in arrival order, each once.
struct Pending<K: Resource> {
    rx: mpsc::Receiver<ObjectRef<K>>,
    queue: std::collections::VecDeque<ObjectRef<K>>,
    queued: HashSet<ObjectRef<K>>,
}

impl<K> Pending<K>
where
    K: Resource,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    fn new(rx: mpsc::Receiver<ObjectRef<K>>) -> Self {
        Pending { rx, queue: Default::default(), queued: HashSet::new() }
    }

    fn push(&mut self, r: ObjectRef<K>) {
        if self.queued.insert(r.clone()) {
            self.queue.push_back(r);
        }
    }

    /// Everything already sent, without waiting.
    fn take_sent(&mut self) {
        while let Ok(r) = self.rx.try_recv() {
            self.push(r);
        }
    }

    fn pop(&mut self) -> Option<ObjectRef<K>> {
        let r = self.queue.pop_front()?;
        self.queued.remove(&r);
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_config_asked_for_again_while_it_waits_is_paced_once() {
        use futures::StreamExt;
        let (tx, rx) = mpsc::channel::<ObjectRef<CRDConversionConfig>>(16);
        let pacer = Arc::new(Pacer::new(50, || 1));
        for name in ["a", "b", "a", "a", "c", "b"] {
            tx.send(ObjectRef::new(name)).await.unwrap();
        }
        drop(tx);
        let out: Vec<String> = paced(rx, pacer).map(|r| r.name).collect().await;
        assert_eq!(out, ["a", "b", "c"], "each waiting config once, in first-arrival order");

        // Once passed on, a config may be asked for again: a new request, a new permit.
        let (tx, rx) = mpsc::channel::<ObjectRef<CRDConversionConfig>>(16);
        let mut s = std::pin::pin!(paced(rx, Arc::new(Pacer::new(50, || 1))));
        tx.send(ObjectRef::new("a")).await.unwrap();
        assert_eq!(s.next().await.map(|r| r.name).as_deref(), Some("a"));
        tx.send(ObjectRef::new("a")).await.unwrap();
        assert_eq!(s.next().await.map(|r| r.name).as_deref(), Some("a"));
    }

    #[test]
    fn the_rebalance_budget_is_shared_by_the_live_members() {
        assert_eq!(share(50, 0), 50, "no view yet: the whole budget");
        assert_eq!(share(50, 1), 50);
        assert_eq!(share(50, 3), 16);
        assert_eq!(share(50, 100), 1, "never stalls");
        for n in 1..=50usize {
            assert!(share(50, n) as usize * n <= 50, "{n} members stay within the budget");
        }
        let members = Arc::new(std::sync::atomic::AtomicUsize::new(1));
        let m = members.clone();
        let pacer = Pacer::new(50, move || m.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(pacer.rate(), 50);
        members.store(2, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(pacer.rate(), 25, "a member joins: the share halves at once");
    }
    use crate::kinds::tests::cfg;
    use dco_api::ServerStatus;
    use dco_api::assign::ServerInfo;
    use k8s_openapi::ByteString;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use watcher::Event;

    fn server(name: &str) -> ConversionWebhookServer {
        let spec: ConversionWebhookServerSpec = serde_json::from_value(serde_json::json!({})).unwrap();
        let mut s = ConversionWebhookServer::new(name, spec);
        s.metadata.resource_version = Some("1".into());
        s
    }

    /// What the server watch fans out for `events`, against `configs` and the pool `servers`
    /// holds after them (the cache is updated before the fan-out reads it).
    fn fanned(events: &[Event<ConversionWebhookServer>], configs: &[ConfigRef]) -> Vec<String> {
        let mut changes = Changes::default();
        let mut cache: HashMap<String, ConversionWebhookServer> = HashMap::new();
        let mut out = Vec::new();
        for ev in events {
            match ev {
                Event::Apply(s) | Event::InitApply(s) => {
                    cache.insert(s.name_any(), s.clone());
                }
                Event::Delete(s) => {
                    cache.remove(&s.name_any());
                }
                // Close enough to the store's swap at InitDone for one-threaded events.
                Event::Init => cache.clear(),
                Event::InitDone => {}
            }
            let pool = Servers::new(cache.values().map(ServerInfo::from));
            for name in servers_of(&changes.observe(ev, ServerView::of), |v| &v.name) {
                out.extend(kinds::affected_by(configs, &pool, &name));
            }
        }
        out
    }

    #[test]
    fn a_status_only_change_fans_out_nothing() {
        let a = server("a");
        let configs = [cfg("c1", "t1", Some("a"), Some("a")), cfg("c2", "t2", Some("a"), Some("a"))];
        let mut written = a.clone();
        written.status = Some(ServerStatus { reporting_replicas: 2, ..ServerStatus::default() });
        written.metadata.resource_version = Some("2".into());
        let events =
            [Event::Init, Event::InitApply(a.clone()), Event::InitDone, Event::Apply(written.clone())];
        assert!(fanned(&events, &configs).is_empty());
        // A relist that finds the same spec is no change either.
        let relist = [Event::Init, Event::InitApply(written), Event::InitDone];
        assert!(fanned(&[&events[..], &relist[..]].concat(), &configs).is_empty());
    }

    #[test]
    fn a_spec_or_pool_change_enqueues_exactly_what_it_must() {
        let pool_member = |name: &str| {
            let mut s = server(name);
            s.spec.sharding = serde_json::from_value(serde_json::json!({"enabled": true})).unwrap();
            s
        };
        let a = pool_member("a");
        let configs: Vec<ConfigRef> =
            (0..100).map(|i| cfg(&format!("c{i}"), &format!("t{i}.example.org"), None, Some("a"))).collect();
        let start = [Event::Init, Event::InitApply(a.clone()), Event::InitDone];
        // b joins the pool: exactly the configs it now wins.
        let b = pool_member("b");
        let pool = Servers::new([ServerInfo::from(&a), ServerInfo::from(&b)]);
        let wins: Vec<String> = configs
            .iter()
            .filter(|c| pool.resolve(&c.target, None).unwrap().server == "b")
            .map(|c| c.name.clone())
            .collect();
        assert!(!wins.is_empty() && wins.len() < configs.len());
        let joined = [&start[..], &[Event::Apply(b.clone())]].concat();
        assert_eq!(fanned(&joined, &configs), wins);
        // b is being deleted: the same configs (now assigned to b) go back.
        let moved: Vec<ConfigRef> = configs
            .iter()
            .map(|c| {
                let s = pool.resolve(&c.target, None).unwrap().server;
                cfg(&c.name, &c.target, None, Some(&s))
            })
            .collect();
        let mut deleting = b.clone();
        deleting.metadata.deletion_timestamp = Some(Time(Timestamp::now()));
        let leaving = [&joined[..], &[Event::Apply(deleting.clone())]].concat();
        assert_eq!(fanned(&leaving, &moved)[wins.len()..], wins[..]);
        // Its final removal changes nothing the resolver reads, but it is a change: the
        // configs that involve b are looked at (their deletion blockers, their source).
        let gone = [&leaving[..], &[Event::Delete(deleting)]].concat();
        assert_eq!(fanned(&gone, &moved).len(), 3 * wins.len());
        // A server vanishing while the watch was down is seen at the relist: what it held
        // goes back.
        let relist = [&joined[..], &[Event::Init, Event::InitApply(a), Event::InitDone]].concat();
        assert_eq!(fanned(&relist, &moved)[wins.len()..], wins[..]);
    }

    #[test]
    fn only_a_changed_ca_of_a_server_secret_counts() {
        let secret = |ca: &str, rv: &str| Secret {
            metadata: kube::api::ObjectMeta {
                name: Some("dco-webhook-a-tls".into()),
                namespace: Some("ns".into()),
                resource_version: Some(rv.into()),
                owner_references: Some(vec![OwnerReference {
                    kind: "ConversionWebhookServer".into(),
                    api_version: "conversion.dco.rs/v1alpha1".into(),
                    name: "a".into(),
                    controller: Some(true),
                    ..OwnerReference::default()
                }]),
                ..Default::default()
            },
            data: Some([(pki::CA_CRT.to_string(), ByteString(ca.as_bytes().to_vec()))].into()),
            ..Secret::default()
        };
        let mut changes = Changes::default();
        assert!(changes.observe(&Event::InitApply(secret("ca1", "1")), CaView::of).is_empty());
        changes.observe(&Event::<Secret>::InitDone, CaView::of);
        // A rotated leaf with the same CA (another resourceVersion) is no change.
        assert!(changes.observe(&Event::Apply(secret("ca1", "2")), CaView::of).is_empty());
        let rotated = changes.observe(&Event::Apply(secret("ca2", "3")), CaView::of);
        assert_eq!(servers_of(&rotated, |v| &v.server), ["a"]);
    }

    #[test]
    fn configs_wake_servers_only_on_what_the_servers_list() {
        let mut changes = Changes::default();
        let c = cfg("c", "t", Some("a"), Some("a"));
        // An object named like the config carries the key; its view stands in for
        // `ConfigRef::of`.
        let mut obs = |c: &ConfigRef| {
            let c = c.clone();
            config_servers(&changes.observe(&Event::Apply(server(&c.name)), move |_| Some(c.clone())))
        };
        assert_eq!(obs(&c), [ObjectRef::new("a")]);
        // The same again (an annotation, a rule, its conditions): nothing.
        assert!(obs(&c).is_empty());
        // Re-pinned to b: both servers' assignments change.
        let mut moved = c.clone();
        moved.pin = Some("b".into());
        moved.destination = Some("b".into());
        moved.source = Some("a".into());
        moved.settled = false;
        assert_eq!(obs(&moved), [ObjectRef::new("a"), ObjectRef::new("b")]);
    }

    #[test]
    fn leases_wake_only_the_configs_waiting_on_a_server() {
        let pool = Servers::new(["a", "b", "c"].map(|n| ServerInfo {
            name: n.into(),
            default: false,
            pool_weight: None,
        }));
        let mut moving = cfg("moving", "t1", Some("b"), Some("a"));
        moving.source = Some("a".into());
        moving.destination = Some("b".into());
        moving.settled = false;
        // Re-pinned to b, its machine not started yet (b not Available): still settled on a.
        let repinned = cfg("repinned", "t4", Some("b"), Some("a"));
        let configs = [
            moving,
            repinned,
            cfg("settled-on-b", "t2", Some("b"), Some("b")),
            cfg("elsewhere", "t3", Some("c"), Some("c")),
        ];
        assert_eq!(progressing(&configs, &pool, "b"), ["moving", "repinned"]);
        assert_eq!(progressing(&configs, &pool, "a"), ["moving", "repinned"]);
        assert!(progressing(&configs, &pool, "c").is_empty());
    }
}
