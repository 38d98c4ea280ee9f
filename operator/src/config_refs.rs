//! Every config of both kinds under `--selector`, as [`ConfigRef`]s, from one unsharded watch
//! per kind (runtime/watches.rs): what a server's `status.assignedConfigs` reads at each of
//! its reconciles without listing every config (docs/operator.md, "The server wing").
//!
//! The config caches hold only this replica's shards (sharding/sharded_watch.rs) and the
//! whole objects; this index holds every shard but only the few fields the assignment rules
//! read, so a config costs its `ConfigRef` here however large its rules are. Each event is
//! reduced as it arrives; a relist (`Init` … `InitDone`) builds the kind's map apart and
//! swaps it in at its end, as a reflector does.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};

use kube::ResourceExt;
use kube::runtime::watcher;
use tokio::sync::watch;

use crate::kinds::{ConfigKind, ConfigRef};

/// The index, shared by the watch tasks that fill it and the reconciles that read it.
#[derive(Clone)]
pub struct ConfigRefs {
    inner: Arc<RwLock<Inner>>,
    /// The kinds whose first list is done.
    listed: watch::Sender<BTreeSet<&'static str>>,
    /// How many kinds feed it: ready once all have listed.
    kinds: usize,
}

#[derive(Default)]
struct Inner {
    /// By kind, then name.
    live: BTreeMap<&'static str, BTreeMap<String, ConfigRef>>,
    /// A relist in progress, by kind: swapped into `live` at its `InitDone`.
    relist: BTreeMap<&'static str, BTreeMap<String, ConfigRef>>,
}

impl ConfigRefs {
    /// An empty index fed by `kinds` watches.
    pub fn new(kinds: usize) -> Self {
        ConfigRefs { inner: Arc::default(), listed: watch::channel(BTreeSet::new()).0, kinds }
    }

    /// Every config, sorted by kind and name.
    pub fn all(&self) -> Vec<ConfigRef> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.live.values().flat_map(|m| m.values().cloned()).collect()
    }

    /// The configs naming `target`, of both kinds: who else claims a config's target
    /// (config/conflict.rs). One pass over the index, in memory: a reconcile that listed them
    /// from the apiserver instead cost it a scan of every config (a field selector on a custom
    /// resource is applied to each object read), which at 10,000 configs timed the apiserver out.
    pub fn refs_naming(&self, target: &str) -> Vec<ConfigRef> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.live.values().flat_map(|m| m.values().filter(|r| r.target == target).cloned()).collect()
    }

    /// One event of kind `K`'s watch.
    pub fn apply<K: ConfigKind>(&self, ev: &watcher::Event<K>) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        match ev {
            watcher::Event::Apply(c) => {
                inner.live.entry(K::KIND).or_default().insert(c.name_any(), ConfigRef::of(c));
            }
            watcher::Event::Delete(c) => {
                inner.live.entry(K::KIND).or_default().remove(&c.name_any());
            }
            watcher::Event::Init => {
                inner.relist.insert(K::KIND, BTreeMap::new());
            }
            watcher::Event::InitApply(c) => {
                inner.relist.entry(K::KIND).or_default().insert(c.name_any(), ConfigRef::of(c));
            }
            watcher::Event::InitDone => {
                let listed = inner.relist.remove(K::KIND).unwrap_or_default();
                inner.live.insert(K::KIND, listed);
                drop(inner);
                self.listed.send_modify(|l| {
                    l.insert(K::KIND);
                });
            }
        }
    }

    /// Once every kind's watch has listed.
    pub async fn wait_until_ready(&self) {
        let kinds = self.kinds;
        let mut rx = self.listed.subscribe();
        // The sender lives in `self`, so the wait ends only by the condition.
        let _ = rx.wait_for(|l| l.len() >= kinds).await;
    }
}

#[cfg(test)]
mod tests {
    use dco_api::{CRDConversionConfig, XRDConversionConfig};
    use serde_json::json;

    use super::*;

    fn ccc(name: &str, target: &str, pin: Option<&str>) -> CRDConversionConfig {
        let mut spec = json!({"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": []});
        if let Some(p) = pin {
            spec["webhookServerRef"] = json!({"name": p});
        }
        serde_json::from_value(json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": name}, "spec": spec,
        }))
        .unwrap()
    }

    fn xcc(name: &str, target: &str) -> XRDConversionConfig {
        serde_json::from_value(json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
            "metadata": {"name": name},
            "spec": {"targetXRD": {"name": target}, "hubVersion": "v2", "spokes": []},
        }))
        .unwrap()
    }

    fn names(refs: &ConfigRefs) -> Vec<(String, Option<String>)> {
        refs.all().into_iter().map(|r| (format!("{}/{}", r.kind, r.name), r.pin)).collect()
    }

    #[tokio::test]
    async fn events_and_relists_of_both_kinds_keep_every_config_and_ready_waits_for_both_lists() {
        let refs = ConfigRefs::new(2);
        refs.apply::<CRDConversionConfig>(&watcher::Event::Init);
        refs.apply(&watcher::Event::InitApply(ccc("a", "as.example.org", None)));
        refs.apply(&watcher::Event::InitApply(ccc("b", "bs.example.org", Some("s1"))));
        // Not in before its list is done: a half list would read as configs gone.
        assert!(refs.all().is_empty());
        refs.apply::<CRDConversionConfig>(&watcher::Event::InitDone);
        let ready = tokio::time::timeout(std::time::Duration::from_millis(50), refs.wait_until_ready()).await;
        assert!(ready.is_err(), "one kind of two listed is not ready");
        refs.apply::<XRDConversionConfig>(&watcher::Event::Init);
        refs.apply(&watcher::Event::InitApply(xcc("x", "xs.example.org")));
        refs.apply::<XRDConversionConfig>(&watcher::Event::InitDone);
        tokio::time::timeout(std::time::Duration::from_secs(1), refs.wait_until_ready())
            .await
            .expect("both kinds listed: ready");
        assert_eq!(
            names(&refs),
            [
                ("CRDConversionConfig/a".to_string(), None),
                ("CRDConversionConfig/b".to_string(), Some("s1".to_string())),
                ("XRDConversionConfig/x".to_string(), None),
            ]
        );
        // A change, a deletion, and a relist that drops what it no longer lists.
        refs.apply(&watcher::Event::Apply(ccc("a", "as.example.org", Some("s2"))));
        refs.apply(&watcher::Event::Delete(ccc("b", "bs.example.org", Some("s1"))));
        assert_eq!(
            names(&refs),
            [
                ("CRDConversionConfig/a".to_string(), Some("s2".to_string())),
                ("XRDConversionConfig/x".to_string(), None),
            ]
        );
        refs.apply::<XRDConversionConfig>(&watcher::Event::Init);
        refs.apply::<XRDConversionConfig>(&watcher::Event::InitDone);
        assert_eq!(names(&refs), [("CRDConversionConfig/a".to_string(), Some("s2".to_string()))]);
    }
}
