//! Which objects a change wakes, and their delivery to the controllers' queues.

use std::sync::Arc;

use dco_api::assign::Servers;
use dco_api::{CRDConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use tokio::sync::mpsc;

use super::changes::Change;
use crate::context::Context;
use crate::kinds::{self, ConfigKind, ConfigRef};

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

/// The targets whose set of claiming configs a config's change altered: both targets of a
/// config created, deleted or re-targeted (config/conflict.rs decides among them). A status
/// or rule change keeps the set, so it wakes no other config.
pub fn claimed_targets(changes: &[Change<ConfigRef>]) -> Vec<String> {
    let mut out: Vec<String> = changes
        .iter()
        .filter(|c| c.before.as_ref().map(|r| &r.target) != c.after.as_ref().map(|r| &r.target))
        .flat_map(|c| [&c.before, &c.after])
        .flatten()
        .map(|r| r.target.clone())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// What one event wakes.
#[derive(Clone, Debug, PartialEq)]
pub enum Wake {
    /// A server's spec, deletion, existence or CA changed: the configs it affects
    /// (`kinds::affected_by`: those it wins or loses, and those that involve it).
    Affected(String),
    /// What a server serves may have changed: the moves it takes part in (`progressing`).
    Progress(String),
    /// The configs naming a target: another config began or ceased to name it.
    Naming(String),
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
            Wake::Affected(server) => {
                let pool = self.ctx.servers();
                self.configs(|configs| kinds::affected_by(configs, &pool, &server)).await
            }
            Wake::Progress(server) => {
                let pool = self.ctx.servers();
                self.configs(|configs| progressing(configs, &pool, &server)).await
            }
            Wake::Naming(target) => {
                self.configs(|configs| {
                    configs.iter().filter(|c| c.target == target).map(|c| c.name.clone()).collect()
                })
                .await
            }
            Wake::Server(r) => self.cws.send(r).await.is_ok(),
        }
    }

    async fn configs(&self, pick: impl Fn(&[ConfigRef]) -> Vec<String>) -> bool {
        send_all(&self.ccc, pick(&refs(&self.ctx.stores.cccs))).await
            && send_all(&self.xcc, pick(&refs(&self.ctx.stores.xccs))).await
    }
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use dco_api::assign::ServerInfo;
    use dco_api::{ConversionWebhookServerSpec, ServerStatus};
    use k8s_openapi::ByteString;
    use k8s_openapi::api::core::v1::Secret;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
    use k8s_openapi::jiff::Timestamp;
    use kube::ResourceExt;
    use kube::runtime::watcher::Event;

    use super::*;
    use crate::kinds::tests::cfg;
    use crate::pki;
    use crate::wake::changes::Changes;
    use crate::wake::views::{CaView, ServerView};

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
    fn configs_wake_the_configs_naming_a_target_only_when_its_claimants_change() {
        let change = |before: Option<&ConfigRef>, after: Option<&ConfigRef>| Change {
            before: before.cloned(),
            after: after.cloned(),
        };
        let c = cfg("c", "t", None, Some("a"));
        assert_eq!(claimed_targets(&[change(None, Some(&c))]), ["t"], "created");
        assert_eq!(claimed_targets(&[change(Some(&c), None)]), ["t"], "deleted");
        let mut moved = c.clone();
        moved.target = "u".into();
        assert_eq!(claimed_targets(&[change(Some(&c), Some(&moved))]), ["t", "u"], "re-targeted");
        // Its status or its server changed: the set of configs naming `t` did not.
        let mut progressed = c.clone();
        progressed.settled = false;
        progressed.pin = Some("b".into());
        assert!(claimed_targets(&[change(Some(&c), Some(&progressed))]).is_empty());
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
