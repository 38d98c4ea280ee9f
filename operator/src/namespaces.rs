//! The namespaces the operator reads its namespaced children in (`--server-namespaces`):
//! servers' Secrets, Deployments, Services and served-target Leases, and the coordinator's
//! Leases. RBAC cannot narrow a label-selected watch, so a cluster-wide one needs list/watch
//! on every Secret of the cluster; here there is one namespaced watch per namespace instead,
//! and the chart grants list/watch in exactly those namespaces (docs/installation.md, "RBAC").
//! A server whose namespace is not among them is refused in its status, not applied.

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::future::try_join_all;
use futures::stream::BoxStream;
use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, Resource};
use serde::de::DeserializeOwned;

/// Most namespaces `--server-namespaces` may name: each costs four watches (Secrets,
/// Deployments, Services, Leases); beyond this, `*` is the cheaper choice.
pub const MAX_NAMESPACES: usize = 100;

/// The chart value that fills `--server-namespaces` (the refusal names it).
pub const CHART_VALUE: &str = "rbac.serverNamespaces";

/// `--server-namespaces`: every namespace (`*`), or these.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum ServerNamespaces {
    #[default]
    All,
    Only(BTreeSet<String>),
}

impl ServerNamespaces {
    /// `*`, or a comma-separated list of namespace names (DNS-1123 labels).
    pub fn parse(s: &str) -> Result<Self, String> {
        let names: Vec<&str> = s.split(',').map(str::trim).filter(|p| !p.is_empty()).collect();
        if names.is_empty() {
            return Err("--server-namespaces is empty: name the namespaces servers run in (a,b), or * for every namespace".into());
        }
        if names.contains(&"*") {
            return if names.len() == 1 {
                Ok(ServerNamespaces::All)
            } else {
                Err(format!("--server-namespaces {s:?}: * (every namespace) stands alone, without names"))
            };
        }
        let set: BTreeSet<String> = names.iter().map(|n| n.to_string()).collect();
        if set.len() > MAX_NAMESPACES {
            return Err(format!(
                "--server-namespaces names {} namespaces, at most {MAX_NAMESPACES}: use * for every namespace",
                set.len()
            ));
        }
        if let Some(bad) = set.iter().find(|n| !is_namespace_name(n)) {
            return Err(format!(
                "--server-namespaces: {bad:?} is not a namespace name (lowercase letters, digits and '-', at most 63)"
            ));
        }
        Ok(ServerNamespaces::Only(set))
    }

    /// These plus `namespace` (`--namespace`, where servers without spec.namespace run; or
    /// the Lease namespace).
    pub fn with(&self, namespace: &str) -> Self {
        match self {
            ServerNamespaces::All => ServerNamespaces::All,
            ServerNamespaces::Only(set) => {
                let mut set = set.clone();
                set.insert(namespace.to_string());
                ServerNamespaces::Only(set)
            }
        }
    }

    pub fn allows(&self, namespace: &str) -> bool {
        match self {
            ServerNamespaces::All => true,
            ServerNamespaces::Only(set) => set.contains(namespace),
        }
    }

    /// One entry per watch: `None` is the one cluster-wide watch of `*`.
    pub fn scopes(&self) -> Vec<Option<String>> {
        match self {
            ServerNamespaces::All => vec![None],
            ServerNamespaces::Only(set) => set.iter().cloned().map(Some).collect(),
        }
    }

    /// The flag's value as it would be written.
    pub fn render(&self) -> String {
        match self {
            ServerNamespaces::All => "*".into(),
            ServerNamespaces::Only(set) => set.iter().cloned().collect::<Vec<_>>().join(","),
        }
    }

    /// Why a server whose workload goes to `namespace` cannot be run, when it cannot: the
    /// operator neither watches nor (with the chart's RBAC) may read the Secrets there.
    pub fn refusal(&self, server: &str, namespace: &str) -> Option<String> {
        if self.allows(namespace) {
            return None;
        }
        Some(format!(
            "ConversionWebhookServer {server} runs in namespace {namespace:?}, which this operator does not watch and may not read Secrets in (--server-namespaces={}); add {namespace:?} to the chart value {CHART_VALUE} (it sets --server-namespaces and the RBAC), or set spec.namespace to one of those",
            self.render()
        ))
    }
}

/// A DNS-1123 label: what a namespace name is.
fn is_namespace_name(n: &str) -> bool {
    let b = n.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b.iter().all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        && b[0] != b'-'
        && b[b.len() - 1] != b'-'
}

/// One store per watched namespace behind the lookups of kube-runtime's `Store` (`get`,
/// `state`, `wait_until_ready`). Not one store fed by several watches: a store's writer swaps
/// in the whole list at the end of a relist, so one namespace's relist would drop the others.
pub struct NamespacedStore<K: Resource<DynamicType = ()> + 'static> {
    /// Keyed by namespace; the `None` entry is a cluster-wide watch (then the only one).
    stores: Arc<Vec<(Option<String>, Store<K>)>>,
}

impl<K: Resource<DynamicType = ()> + 'static> Clone for NamespacedStore<K> {
    fn clone(&self) -> Self {
        NamespacedStore { stores: self.stores.clone() }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> From<Store<K>> for NamespacedStore<K> {
    /// One store of every namespace (tests, and a cluster-wide watch).
    fn from(store: Store<K>) -> Self {
        NamespacedStore { stores: Arc::new(vec![(None, store)]) }
    }
}

impl<K: Resource<DynamicType = ()> + Clone + 'static> NamespacedStore<K> {
    /// The object `key` names, from the store of its namespace.
    pub fn get(&self, key: &ObjectRef<K>) -> Option<Arc<K>> {
        self.stores.iter().find(|(ns, _)| ns.is_none() || *ns == key.namespace).and_then(|(_, s)| s.get(key))
    }

    /// Every object of every watched namespace.
    pub fn state(&self) -> Vec<Arc<K>> {
        self.stores.iter().flat_map(|(_, s)| s.state()).collect()
    }

    /// Once every namespace's watch has listed.
    pub async fn wait_until_ready(&self) -> Result<(), reflector::store::WriterDropped> {
        try_join_all(self.stores.iter().map(|(_, s)| s.wait_until_ready())).await.map(|_| ())
    }
}

/// The events of one namespace's watch, already reflected into its store.
pub type Events<K> = BoxStream<'static, watcher::Result<watcher::Event<K>>>;

/// `Api::namespaced` for `Some`, `Api::all` for the cluster-wide `None`.
pub fn api<K>(client: &Client, namespace: &Option<String>) -> Api<K>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>,
{
    match namespace {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// One watch of kind `K` per scope of `namespaces` (config `config`), slimmed like every
/// other watch (dco_api::target::slim), retried with backoff and reflected into its own
/// store: the merged store and the event stream of each namespace, to be driven one by one
/// (a relist's `Init`..`InitDone` is per namespace, and whoever reads them must not mix two).
pub fn watch<K>(
    client: &Client,
    namespaces: &ServerNamespaces,
    config: watcher::Config,
) -> (NamespacedStore<K>, Vec<Events<K>>)
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let mut stores = Vec::new();
    let mut events = Vec::new();
    for scope in namespaces.scopes() {
        let (store, writer) = reflector::store();
        let stream = watcher(api::<K>(client, &scope), config.clone())
            .modify(dco_api::target::slim::<K>)
            .default_backoff()
            .reflect(writer);
        stores.push((scope, store));
        events.push(stream.boxed());
    }
    (NamespacedStore { stores: Arc::new(stores) }, events)
}

/// Several namespaces' events as one stream, for readers that keep no per-list state.
pub fn merged<K: Send + 'static>(
    events: Vec<Events<K>>,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send {
    futures::stream::select_all(events)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::Secret;

    fn only(names: &[&str]) -> ServerNamespaces {
        ServerNamespaces::Only(names.iter().map(|n| n.to_string()).collect())
    }

    #[test]
    fn the_flag_is_star_or_namespace_names() {
        assert_eq!(ServerNamespaces::parse("*"), Ok(ServerNamespaces::All));
        assert_eq!(ServerNamespaces::parse(" * "), Ok(ServerNamespaces::All));
        assert_eq!(ServerNamespaces::parse("b, a,,a"), Ok(only(&["a", "b"])));
        assert_eq!(ServerNamespaces::parse("dco-system").unwrap().render(), "dco-system");
        assert_eq!(ServerNamespaces::parse("b,a").unwrap().render(), "a,b");
        for bad in ["", " , ", "a,*", "Upper", "-a", "a-", "a_b", "a/b", &"x".repeat(64)] {
            assert!(ServerNamespaces::parse(bad).is_err(), "{bad:?} was accepted");
        }
        assert!(ServerNamespaces::parse(&"x".repeat(63)).is_ok());
        let many: Vec<String> = (0..=MAX_NAMESPACES).map(|i| format!("ns-{i}")).collect();
        let err = ServerNamespaces::parse(&many.join(",")).unwrap_err();
        assert!(err.contains("at most 100"), "{err}");
        assert!(ServerNamespaces::parse(&many[..MAX_NAMESPACES].join(",")).is_ok());
    }

    #[test]
    fn which_namespaces_are_watched_and_which_servers_refused() {
        let ns = only(&["team-a"]).with("dco-system");
        assert_eq!(ns.scopes(), [Some("dco-system".to_string()), Some("team-a".to_string())]);
        assert!(ns.allows("dco-system") && ns.allows("team-a"));
        assert!(ns.refusal("a", "team-a").is_none());
        let msg = ns.refusal("b", "team-c").expect("team-c is not watched");
        for part in [
            "ConversionWebhookServer b",
            "\"team-c\"",
            "rbac.serverNamespaces",
            "--server-namespaces=dco-system,team-a",
        ] {
            assert!(msg.contains(part), "{part} missing from {msg}");
        }
        let all = ServerNamespaces::All.with("dco-system");
        assert_eq!(all.scopes(), [None]);
        assert!(all.refusal("b", "anything").is_none());
    }

    fn secret(ns: &str, name: &str) -> Secret {
        serde_json::from_value(serde_json::json!({"metadata": {"name": name, "namespace": ns}})).unwrap()
    }

    /// A lookup goes to its namespace's store; a relist of one namespace leaves the others.
    #[tokio::test]
    async fn one_store_per_namespace_behind_one_lookup() {
        let (a, mut aw) = reflector::store::<Secret>();
        let (b, mut bw) = reflector::store::<Secret>();
        let merged = NamespacedStore {
            stores: Arc::new(vec![(Some("a".to_string()), a), (Some("b".to_string()), b)]),
        };
        for (w, ns) in [(&mut aw, "a"), (&mut bw, "b")] {
            w.apply_watcher_event(&watcher::Event::Init);
            w.apply_watcher_event(&watcher::Event::InitApply(secret(ns, "s")));
            w.apply_watcher_event(&watcher::Event::InitDone);
        }
        merged.wait_until_ready().await.unwrap();
        assert!(merged.get(&ObjectRef::new("s").within("a")).is_some());
        assert!(merged.get(&ObjectRef::new("s").within("c")).is_none());
        // b relists without its Secret: a's stays.
        bw.apply_watcher_event(&watcher::Event::Init);
        bw.apply_watcher_event(&watcher::Event::InitDone);
        assert!(merged.get(&ObjectRef::new("s").within("b")).is_none());
        assert!(merged.get(&ObjectRef::new("s").within("a")).is_some());
        assert_eq!(merged.state().len(), 1);
        let (all, mut w) = reflector::store::<Secret>();
        w.apply_watcher_event(&watcher::Event::Apply(secret("c", "s")));
        let all = NamespacedStore::from(all);
        assert!(all.get(&ObjectRef::new("s").within("c")).is_some());
    }
}
