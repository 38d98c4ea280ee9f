//! The two config kinds as both wings see them: [`ConfigKind`], what a config kind must be
//! for the generic reconciler and the collectors; [`ConfigRef`], what the assignment rules
//! need of one config; the listings of configs by their selectable target field.
//!
//! Which configs belong to which server: the assignments a server's status lists, what holds
//! a server's deletion, and which configs a server change must re-reconcile (rebalancing;
//! which changes count is wake/views.rs).
//! Pure functions over a snapshot of the configs, so the rules are tested without a cluster.

use dco_api::assign::Servers;
use dco_api::config::{ConfigStatus, ConversionConfig};
use dco_api::server::AssignedConfig;
use dco_api::{CRDConversionConfig, HandoverState, XRDConversionConfig};
use k8s_openapi::ClusterResourceScope;
use kube::api::{Api, ListParams};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::{Client, Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::error::{Error, Result};

/// The configs in `store` that name target `target` (a CRD's or an XRD's events wake them).
pub(crate) fn configs_of_target<K>(store: &Store<K>, target: &str) -> Vec<ObjectRef<K>>
where
    K: ConversionConfig + Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|c| c.target_name() == target)
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// Everything a config kind must be for the generic reconciler, with the status access both
/// kinds share.
pub(crate) trait ConfigKind:
    ConversionConfig
    + Resource<DynamicType = (), Scope = ClusterResourceScope>
    + Clone
    + Serialize
    + DeserializeOwned
    + std::fmt::Debug
    + Send
    + Sync
    + 'static
{
    fn config_status(&self) -> Option<&ConfigStatus>;
}

impl ConfigKind for XRDConversionConfig {
    fn config_status(&self) -> Option<&ConfigStatus> {
        self.status.as_ref()
    }
}

impl ConfigKind for CRDConversionConfig {
    fn config_status(&self) -> Option<&ConfigStatus> {
        self.status.as_ref()
    }
}

/// What these rules need of one config, of either kind.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ConfigRef {
    pub kind: &'static str,
    pub name: String,
    pub target: String,
    pub pin: Option<String>,
    /// `status.assignedWebhookServer`: the resolver's last answer as persisted.
    pub assigned: Option<String>,
    pub phase: Option<String>,
    pub source: Option<String>,
    pub destination: Option<String>,
    /// The handover is in SourceDropped (nothing in flight).
    pub settled: bool,
}

impl ConfigRef {
    pub fn of<K>(c: &K) -> Self
    where
        K: ConfigKind,
    {
        let status = c.config_status();
        let handover = status.and_then(|s| s.handover.as_ref());
        ConfigRef {
            kind: K::KIND,
            name: c.name_any(),
            target: c.target_name().to_string(),
            pin: c.conversion().webhook_server_ref.as_ref().map(|r| r.name.clone()),
            assigned: status.and_then(|s| s.assigned_webhook_server.clone()),
            phase: status.and_then(|s| s.phase).map(|p| format!("{p:?}")),
            source: handover.and_then(|h| h.source.clone()),
            destination: handover.and_then(|h| h.destination.clone()),
            settled: handover.is_some_and(|h| h.state == HandoverState::SourceDropped),
        }
    }

    /// Whether this config touches `server` in any way that its status or the server's
    /// deletion depends on: the same test a webhook replica reads its share by
    /// (`dco_api::placement`).
    pub fn involves(&self, server: &str) -> bool {
        let (a, s, d) = (self.assigned.as_deref(), self.source.as_deref(), self.destination.as_deref());
        dco_api::placement::involves(server, self.pin.as_deref(), a, s, d, self.settled)
    }
}

/// Every config of both kinds under `selector` (`--selector`), as the assignment rules see
/// them, read from the apiserver: a replica's config caches hold only the shards it owns
/// (sharding/sharded_watch.rs), while a server's assignments and its deletion depend on every
/// config.
pub(crate) async fn config_refs(client: &Client, selector: Option<&str>) -> Result<Vec<ConfigRef>> {
    let mut out = list_refs_where::<CRDConversionConfig>(client, selector, None).await?;
    out.extend(list_refs_where::<XRDConversionConfig>(client, selector, None).await?);
    Ok(out)
}

/// The configs of both kinds under `selector` that name `target` (normally one:
/// `config/conflict.rs`), by the configs' selectable target field, so a config's reconcile
/// reads what concerns it and not every config in the cluster.
pub(crate) async fn configs_naming(
    client: &Client,
    selector: Option<&str>,
    target: &str,
) -> Result<Vec<ConfigRef>> {
    let mut out = list_refs_where::<CRDConversionConfig>(client, selector, Some(target)).await?;
    out.extend(list_refs_where::<XRDConversionConfig>(client, selector, Some(target)).await?);
    Ok(out)
}

/// The configs of kind `K` under `selector` (naming `target`, if given), in pages.
async fn list_refs_where<K: ConfigKind>(
    client: &Client,
    selector: Option<&str>,
    target: Option<&str>,
) -> Result<Vec<ConfigRef>> {
    let api: Api<K> = Api::all(client.clone());
    let mut lp = ListParams::default().limit(CONFIG_PAGE);
    if let Some(s) = selector {
        lp = lp.labels(s);
    }
    if let Some(t) = target {
        lp = lp.fields(&format!("{}={t}", K::TARGET_FIELD));
    }
    let mut out = Vec::new();
    loop {
        let page = api.list(&lp).await.map_err(Error::kube("list", K::KIND, "(every config)"))?;
        out.extend(page.items.iter().map(ConfigRef::of));
        match page.metadata.continue_ {
            Some(c) if !c.is_empty() => lp = lp.continue_token(&c),
            _ => return Ok(out),
        }
    }
}

/// Page size of those lists: a config is a few KB, so a page stays well under a few MB.
const CONFIG_PAGE: u32 = 500;

/// The configs the resolver assigns to `server` now, sorted by kind and name.
pub fn assigned_to(configs: &[ConfigRef], servers: &Servers, server: &str) -> Vec<AssignedConfig> {
    let mut out: Vec<AssignedConfig> = configs
        .iter()
        .filter(|c| servers.resolve(&c.target, c.pin.as_deref()).is_ok_and(|a| a.server == server))
        .map(|c| AssignedConfig {
            kind: c.kind.to_string(),
            name: c.name.clone(),
            target: c.target.clone(),
            phase: c.phase.clone(),
        })
        .collect();
    out.sort_by(|a, b| (&a.kind, &a.name).cmp(&(&b.kind, &b.name)));
    out
}

/// What holds the deletion of `server`: configs that pin it, that it still serves, or that
/// are moving away from it. `servers` must already leave the deleting server out.
pub fn deletion_blockers(configs: &[ConfigRef], servers: &Servers, server: &str) -> Vec<String> {
    let mut out: Vec<String> = configs
        .iter()
        .filter(|c| {
            c.pin.as_deref() == Some(server)
                || servers.resolve(&c.target, c.pin.as_deref()).is_ok_and(|a| a.server == server)
                || (c.assigned.as_deref() == Some(server) && !c.settled)
                || (c.destination.as_deref() == Some(server) && c.settled)
                || (c.source.as_deref() == Some(server) && !c.settled)
        })
        .map(|c| format!("{} {}", c.kind, c.name))
        .collect();
    out.sort();
    out
}

/// The configs a change of `server` (its spec, deletion, existence or CA, never its status
/// alone: wake/views.rs) must reconcile again: those whose resolution now differs from the
/// persisted one (rebalancing: a new pool member enqueues what it wins, a removed one what it
/// held), and those involving the server (its CA is in their wiring, it may hold a move).
pub fn affected_by(configs: &[ConfigRef], servers: &Servers, server: &str) -> Vec<String> {
    configs
        .iter()
        .filter(|c| {
            let now = servers.resolve(&c.target, c.pin.as_deref()).ok().map(|a| a.server);
            now != c.assigned || c.involves(server)
        })
        .map(|c| c.name.clone())
        .collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use dco_api::assign::ServerInfo;

    /// A settled config of `target`, assigned (and moved) to `assigned`.
    pub(crate) fn cfg(name: &str, target: &str, pin: Option<&str>, assigned: Option<&str>) -> ConfigRef {
        ConfigRef {
            kind: "CRDConversionConfig",
            name: name.into(),
            target: target.into(),
            pin: pin.map(str::to_string),
            assigned: assigned.map(str::to_string),
            phase: None,
            source: None,
            destination: assigned.map(str::to_string),
            settled: true,
        }
    }

    fn pool(members: &[&str], default: &str) -> Servers {
        Servers::new(members.iter().map(|m| ServerInfo {
            name: m.to_string(),
            default: *m == default,
            pool_weight: Some(1),
        }))
    }

    #[test]
    fn a_new_member_enqueues_exactly_what_it_wins_plus_its_own() {
        let before = pool(&["a", "b"], "a");
        let configs: Vec<ConfigRef> = (0..200)
            .map(|i| {
                let t = format!("t{i}.example.org");
                let s = before.resolve(&t, None).unwrap().server;
                cfg(&format!("c{i}"), &t, None, Some(&s))
            })
            .collect();
        let after = pool(&["a", "b", "c"], "a");
        let affected = affected_by(&configs, &after, "c");
        let wins: Vec<String> = configs
            .iter()
            .filter(|c| after.resolve(&c.target, None).unwrap().server == "c")
            .map(|c| c.name.clone())
            .collect();
        assert!(!wins.is_empty());
        assert_eq!(affected, wins);
        // Nothing changed for an unrelated server's status update.
        assert!(affected_by(&configs, &before, "zzz").is_empty());
    }

    #[test]
    fn a_removed_member_enqueues_what_it_held() {
        let full = pool(&["a", "b"], "a");
        let configs: Vec<ConfigRef> = (0..50)
            .map(|i| {
                let t = format!("t{i}");
                let s = full.resolve(&t, None).unwrap().server;
                cfg(&format!("c{i}"), &t, None, Some(&s))
            })
            .collect();
        let without_b = pool(&["a"], "a");
        let held: Vec<String> =
            configs.iter().filter(|c| c.assigned.as_deref() == Some("b")).map(|c| c.name.clone()).collect();
        assert_eq!(affected_by(&configs, &without_b, "b"), held);
    }

    #[test]
    fn assignments_and_blockers() {
        let s = pool(&["a"], "a");
        let mut moving = cfg("moving", "t2", None, Some("a"));
        moving.source = Some("gone".into());
        moving.settled = false;
        let configs = vec![cfg("pinned", "t1", Some("gone"), Some("gone")), moving];
        let assigned = assigned_to(&configs, &s, "a");
        assert_eq!(assigned.len(), 1);
        assert_eq!(assigned[0].name, "moving");
        // "gone" is deleting (left out of `s`): the pin and the unfinished move hold it.
        assert_eq!(
            deletion_blockers(&configs, &s, "gone"),
            ["CRDConversionConfig moving", "CRDConversionConfig pinned"]
        );
        assert!(deletion_blockers(&[cfg("x", "t3", None, Some("a"))], &s, "gone").is_empty());
    }
}
