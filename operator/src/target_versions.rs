//! The resourceVersion of every CRD and XRD as the operator's metadata watches show it
//! (runtime/controllers.rs for CRDs, config/xrds.rs for XRDs): what a config's idle wake
//! compares with what its last full reconcile read (config/idle.rs), so a settled config whose
//! target did not change is not read again (docs/operator.md, "What an idle config costs").
//!
//! A name and a resourceVersion per object, whatever the object's size: every CRD of the
//! cluster is kept, not only targets, since a config may come to name one after its event
//! passed. A relist (`Init` … `InitDone`) builds the kind's map apart and swaps it in at its
//! end, so an object deleted while the watch was down is gone from the index too.

use std::collections::BTreeMap;
use std::sync::{Arc, PoisonError, RwLock};

use dco_api::config::TargetKind;
use kube::Resource;
use kube::runtime::watcher;

/// The index, shared by the watches that fill it and the config reconciles that read it.
#[derive(Clone, Default)]
pub struct TargetVersions {
    inner: Arc<RwLock<Inner>>,
}

#[derive(Default)]
struct Inner {
    /// By kind, then name: the resourceVersion.
    live: BTreeMap<Key, BTreeMap<String, String>>,
    /// A relist in progress, by kind: swapped into `live` at its `InitDone`.
    relist: BTreeMap<Key, BTreeMap<String, String>>,
}

/// `TargetKind` as an ordered key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Key {
    Crd,
    Xrd,
}

impl From<TargetKind> for Key {
    fn from(k: TargetKind) -> Self {
        match k {
            TargetKind::Crd => Key::Crd,
            TargetKind::Xrd => Key::Xrd,
        }
    }
}

fn entry<K: Resource>(o: &K) -> Option<(String, String)> {
    let m = o.meta();
    Some((m.name.clone()?, m.resource_version.clone()?))
}

impl TargetVersions {
    /// The resourceVersion of `kind` `name` as last watched; `None` when the watch has not
    /// seen it (absent, deleted, or not listed yet).
    pub fn get(&self, kind: TargetKind, name: &str) -> Option<String> {
        let inner = self.inner.read().unwrap_or_else(PoisonError::into_inner);
        inner.live.get(&Key::from(kind))?.get(name).cloned()
    }

    /// One event of `kind`'s watch.
    pub fn apply<K: Resource>(&self, kind: TargetKind, ev: &watcher::Event<K>) {
        let key = Key::from(kind);
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        match ev {
            watcher::Event::Apply(o) => {
                if let Some((name, rv)) = entry(o) {
                    inner.live.entry(key).or_default().insert(name, rv);
                }
            }
            watcher::Event::Delete(o) => {
                if let Some(name) = o.meta().name.as_deref() {
                    inner.live.entry(key).or_default().remove(name);
                }
            }
            watcher::Event::Init => {
                inner.relist.insert(key, BTreeMap::new());
            }
            watcher::Event::InitApply(o) => {
                if let Some((name, rv)) = entry(o) {
                    inner.relist.entry(key).or_default().insert(name, rv);
                }
            }
            watcher::Event::InitDone => {
                let listed = inner.relist.remove(&key).unwrap_or_default();
                inner.live.insert(key, listed);
            }
        }
    }

    /// Forgets every object of `kind`: its watch stopped (Crossplane removed, or its API
    /// version changed and the watch starts again with a list).
    pub fn clear(&self, kind: TargetKind) {
        let key = Key::from(kind);
        let mut inner = self.inner.write().unwrap_or_else(PoisonError::into_inner);
        inner.live.remove(&key);
        inner.relist.remove(&key);
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kube::api::PartialObjectMeta;

    use super::*;

    type Meta = PartialObjectMeta<CustomResourceDefinition>;

    fn crd(name: &str, rv: &str) -> Meta {
        let mut o = Meta::default();
        o.metadata.name = Some(name.into());
        o.metadata.resource_version = Some(rv.into());
        o
    }

    #[test]
    fn events_and_relists_keep_the_latest_version_per_kind_and_name() {
        let v = TargetVersions::default();
        let (c, x) = (TargetKind::Crd, TargetKind::Xrd);
        v.apply(c, &watcher::Event::<Meta>::Init);
        v.apply(c, &watcher::Event::InitApply(crd("a.example.org", "1")));
        v.apply(c, &watcher::Event::InitApply(crd("b.example.org", "2")));
        // Not in before the list is done.
        assert_eq!(v.get(c, "a.example.org"), None);
        v.apply(c, &watcher::Event::<Meta>::InitDone);
        assert_eq!(v.get(c, "a.example.org").as_deref(), Some("1"));
        // Kinds apart: an XRD of the same name is another object.
        assert_eq!(v.get(x, "a.example.org"), None);
        v.apply(x, &watcher::Event::Apply(crd("a.example.org", "9")));
        assert_eq!(v.get(x, "a.example.org").as_deref(), Some("9"));
        // An edit, a deletion.
        v.apply(c, &watcher::Event::Apply(crd("a.example.org", "5")));
        v.apply(c, &watcher::Event::Delete(crd("b.example.org", "6")));
        assert_eq!(v.get(c, "a.example.org").as_deref(), Some("5"));
        assert_eq!(v.get(c, "b.example.org"), None);
        // A relist that no longer lists `a` (deleted while the watch was down) drops it.
        v.apply(c, &watcher::Event::<Meta>::Init);
        v.apply(c, &watcher::Event::InitApply(crd("c.example.org", "7")));
        v.apply(c, &watcher::Event::<Meta>::InitDone);
        assert_eq!(v.get(c, "a.example.org"), None);
        assert_eq!(v.get(c, "c.example.org").as_deref(), Some("7"));
        v.clear(x);
        assert_eq!(v.get(x, "a.example.org"), None);
        assert_eq!(v.get(c, "c.example.org").as_deref(), Some("7"), "the other kind stays");
    }
}
