//! Every config of both kinds under `--selector`, as [`ConfigRef`]s, from one unsharded watch
//! per kind (runtime/watches.rs): what a server's `status.assignedConfigs` reads at each of
//! its reconciles without listing every config (docs/operator.md, "The server wing").
//!
//! The config caches hold only this replica's shards (sharding/sharded_watch.rs) and the
//! whole objects; this index holds every shard but only the few fields the assignment rules
//! read, so a config costs its `ConfigRef` here however large its rules are. Each event is
//! reduced as it arrives; a relist (`Init` … `InitDone`) builds the kind's map apart and
//! swaps it in at its end, as a reflector does.

use std::collections::{BTreeMap, BTreeSet, HashMap};
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
    /// `live` by target name: (kind, name) of the configs naming it. A config's every wake
    /// asks who names its target; a scan of `live` made that O(configs) each, which at 10,000
    /// configs kept the replicas busy while idle.
    by_target: HashMap<String, BTreeSet<(&'static str, String)>>,
    /// A relist in progress, by kind: swapped into `live` at its `InitDone`.
    relist: BTreeMap<&'static str, BTreeMap<String, ConfigRef>>,
}

impl Inner {
    fn claim(&mut self, r: &ConfigRef) {
        self.by_target.entry(r.target.clone()).or_default().insert((r.kind, r.name.clone()));
    }

    fn unclaim(&mut self, r: &ConfigRef) {
        if let Some(set) = self.by_target.get_mut(&r.target) {
            set.remove(&(r.kind, r.name.clone()));
            if set.is_empty() {
                self.by_target.remove(&r.target);
            }
        }
    }

    fn insert(&mut self, kind: &'static str, r: ConfigRef) {
        self.claim(&r);
        let target = r.target.clone();
        if let Some(old) = self.live.entry(kind).or_default().insert(r.name.clone(), r)
            && old.target != target
        {
            self.unclaim(&old);
        }
    }

    fn remove(&mut self, kind: &'static str, name: &str) {
        if let Some(old) = self.live.get_mut(kind).and_then(|m| m.remove(name)) {
            self.unclaim(&old);
        }
    }

    /// Kind `kind`'s relist replaces all it had.
    fn replace(&mut self, kind: &'static str, listed: BTreeMap<String, ConfigRef>) {
        for old in self.live.remove(kind).unwrap_or_default().into_values() {
            self.unclaim(&old);
        }
        for r in listed.values() {
            self.claim(r);
        }
        self.live.insert(kind, listed);
    }
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
    /// (config/conflict.rs). One lookup in memory: a reconcile that listed them
    /// from the apiserver instead cost it a scan of every config (a field selector on a custom
    /// resource is applied to each object read), which at 10,000 configs timed the apiserver out.
    pub fn refs_naming(&self, target: &str) -> Vec<ConfigRef> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        let Some(claims) = inner.by_target.get(target) else { return Vec::new() };
        claims.iter().filter_map(|(kind, name)| inner.live.get(kind)?.get(name).cloned()).collect()
    }

    /// One event of kind `K`'s watch.
    pub fn apply<K: ConfigKind>(&self, ev: &watcher::Event<K>) {
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        match ev {
            watcher::Event::Apply(c) => inner.insert(K::KIND, ConfigRef::of(c)),
            watcher::Event::Delete(c) => inner.remove(K::KIND, &c.name_any()),
            watcher::Event::Init => {
                inner.relist.insert(K::KIND, BTreeMap::new());
            }
            watcher::Event::InitApply(c) => {
                inner.relist.entry(K::KIND).or_default().insert(c.name_any(), ConfigRef::of(c));
            }
            watcher::Event::InitDone => {
                let listed = inner.relist.remove(K::KIND).unwrap_or_default();
                inner.replace(K::KIND, listed);
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

    proptest::proptest! {
        /// Whatever the events, the configs naming a target are those of `all` naming it.
        #[test]
        fn the_configs_naming_a_target_are_those_a_scan_finds(
            events in proptest::collection::vec((0u8..6, 0u8..4, 0u8..3, proptest::bool::ANY), 0..60)
        ) {
            let refs = ConfigRefs::new(2);
            let target = |t: u8| format!("t{t}.example.org");
            for (op, name, t, crd) in events {
                let name = format!("c{name}");
                match (op, crd) {
                    (0..=2, true) => refs.apply(&watcher::Event::Apply(ccc(&name, &target(t), None))),
                    (0..=2, false) => refs.apply(&watcher::Event::Apply(xcc(&name, &target(t)))),
                    (3, true) => refs.apply(&watcher::Event::Delete(ccc(&name, &target(t), None))),
                    (3, false) => refs.apply(&watcher::Event::Delete(xcc(&name, &target(t)))),
                    // A relist of one kind listing one config.
                    (_, true) => {
                        refs.apply::<CRDConversionConfig>(&watcher::Event::Init);
                        refs.apply(&watcher::Event::InitApply(ccc(&name, &target(t), None)));
                        refs.apply::<CRDConversionConfig>(&watcher::Event::InitDone);
                    }
                    (_, false) => {
                        refs.apply::<XRDConversionConfig>(&watcher::Event::Init);
                        refs.apply(&watcher::Event::InitApply(xcc(&name, &target(t))));
                        refs.apply::<XRDConversionConfig>(&watcher::Event::InitDone);
                    }
                }
                for t in 0..3 {
                    let key = |r: &ConfigRef| (r.kind, r.name.clone());
                    let mut scan: Vec<_> = refs.all().iter().filter(|r| r.target == target(t)).map(key).collect();
                    let mut got: Vec<_> = refs.refs_naming(&target(t)).iter().map(key).collect();
                    scan.sort();
                    got.sort();
                    proptest::prop_assert_eq!(got, scan);
                }
            }
        }
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
