//! The full objects (schemas, `spec.conversion`) of the targets some config names — and of
//! no others. The replica watches every CRD and XRD as metadata only (`caches.rs`); a target
//! named by a config in scope is read whole with one GET when it first appears and whenever
//! its metadata shows a new uid or generation (every spec change bumps the generation), and
//! released once no config names it. So an unrelated CRD costs a replica a few hundred bytes
//! of metadata, never its schema, and a named one costs one copy of its JSON.
//!
//! Data flows one way: the metadata and config stores give the [`Wanted`] list, [`Held::stale`]
//! decides what to read and what to release (pure, tested here), the fetcher reads it.

use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, PoisonError};

use dco_api::config::TargetKind;
use dco_api::crossplane::XrdVersion;
use dco_api::target;
use kube::Client;
use serde_json::Value;

use crate::sync::TargetView;

pub type Key = (TargetKind, String);

/// A target some config names, as its metadata watch sees it now.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Wanted {
    pub key: Key,
    pub uid: String,
    pub generation: i64,
}

#[derive(Clone, Debug)]
struct Copy {
    uid: String,
    generation: i64,
    view: TargetView,
}

impl Copy {
    /// The copy is what the watch shows, or newer (a GET can run ahead of the watch).
    fn covers(&self, w: &Wanted) -> bool {
        self.uid == w.uid && self.generation >= w.generation
    }
}

/// The full objects held now.
#[derive(Default)]
pub struct Held {
    copies: Mutex<HashMap<Key, Copy>>,
    /// Targets whose last read failed (and that have no copy since): not "about to be read",
    /// so a pass treats them as missing ([`Held::unread`]).
    failed: Mutex<HashSet<Key>>,
}

impl Held {
    /// Releases every copy no `wanted` entry names and returns the wanted targets to read:
    /// not held yet, or held at another uid or an older generation. The bool is whether
    /// anything was released.
    pub fn stale(&self, wanted: &[Wanted]) -> (Vec<Wanted>, bool) {
        let mut copies = self.lock();
        let names: HashSet<&Key> = wanted.iter().map(|w| &w.key).collect();
        let before = copies.len();
        copies.retain(|k, _| names.contains(k));
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).retain(|k| names.contains(k));
        let released = copies.len() != before;
        let stale =
            wanted.iter().filter(|w| !copies.get(&w.key).is_some_and(|c| c.covers(w))).cloned().collect();
        (stale, released)
    }

    /// Records that reading `key` failed.
    pub fn failed(&self, key: Key) {
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).insert(key);
    }

    /// Whether `key`, which exists, is about to be read: no copy yet and no failed read. A
    /// sync pass leaves such a target alone rather than taking it as missing: the read's
    /// round wakes the pass again (a target that just joined the share).
    pub fn unread(&self, key: &Key) -> bool {
        !self.lock().contains_key(key)
            && !self.failed.lock().unwrap_or_else(PoisonError::into_inner).contains(key)
    }

    /// Records what a GET returned for `key` (`None`: the target is gone).
    pub fn put(&self, key: Key, object: Option<Value>) {
        self.failed.lock().unwrap_or_else(PoisonError::into_inner).remove(&key);
        let mut copies = self.lock();
        let Some(value) = object else {
            copies.remove(&key);
            return;
        };
        let uid = value.pointer("/metadata/uid").and_then(Value::as_str).unwrap_or_default().to_string();
        let generation = value.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
        let view = TargetView::new(&value, format!("{uid}@{generation}"));
        copies.insert(key, Copy { uid, generation, view });
    }

    /// The view of one held target.
    pub fn get(&self, key: &Key) -> Option<TargetView> {
        self.lock().get(key).map(|c| c.view.clone())
    }

    pub fn len(&self) -> usize {
        self.lock().len()
    }

    /// Bytes of JSON kept for all held targets.
    pub fn bytes(&self) -> usize {
        self.lock().values().map(|c| c.view.bytes()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Copy>> {
        self.copies.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// One target read whole, in the form the engine and the hold rule read: `apiVersion` and
/// `kind` set, no `managedFields`, annotations or status (nothing in the webhook reads them:
/// the compile reads `spec.versions`, the hold rule `spec.conversion`). `None` when it is gone.
/// XRDs are read through `xrd`, the version they are watched at (`None`: not served).
pub async fn fetch(
    client: &Client,
    kind: TargetKind,
    xrd: Option<XrdVersion>,
    name: &str,
) -> Result<Option<Value>, kube::Error> {
    let Some(mut o) = dco_api::cluster::fetch_target(client, kind, xrd, name).await? else { return Ok(None) };
    target::slim_target(&mut o);
    if let Some(data) = o.data.as_object_mut() {
        data.remove("status");
    }
    tracing::debug!(target = name, ?kind, "read the target's schemas");
    let at = xrd.unwrap_or(XrdVersion::V2);
    dco_api::cluster::target_json(kind, at, o).map(Some).map_err(kube::Error::SerdeError)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn wanted(name: &str, uid: &str, generation: i64) -> Wanted {
        Wanted { key: (TargetKind::Crd, name.into()), uid: uid.into(), generation }
    }

    fn object(uid: &str, generation: i64) -> Value {
        json!({"metadata": {"uid": uid, "generation": generation}, "spec": {}})
    }

    #[test]
    fn reads_what_is_new_or_changed_and_releases_what_no_config_names() {
        let held = Held::default();
        let (stale, released) = held.stale(&[wanted("a", "u1", 1), wanted("b", "u2", 1)]);
        assert_eq!((stale.len(), released), (2, false));
        held.put((TargetKind::Crd, "a".into()), Some(object("u1", 1)));
        held.put((TargetKind::Crd, "b".into()), Some(object("u2", 1)));

        // Nothing changed: nothing to read.
        assert_eq!(held.stale(&[wanted("a", "u1", 1), wanted("b", "u2", 1)]), (vec![], false));
        // A spec change (generation), a re-creation (uid), and b no longer named.
        let (stale, released) = held.stale(&[wanted("a", "u1", 2)]);
        assert_eq!((stale, released), (vec![wanted("a", "u1", 2)], true));
        assert!(held.get(&(TargetKind::Crd, "b".into())).is_none());
        let (stale, _) = held.stale(&[wanted("a", "u9", 1)]);
        assert_eq!(stale, vec![wanted("a", "u9", 1)]);
        // The old copy serves until the new one arrives.
        assert_eq!(held.get(&(TargetKind::Crd, "a".into())).unwrap().fingerprint, "u1@1");
    }

    #[test]
    fn a_read_ahead_of_the_watch_is_not_read_again_and_a_gone_target_is_dropped() {
        let held = Held::default();
        let key = (TargetKind::Crd, "a".to_string());
        held.put(key.clone(), Some(object("u1", 3)));
        assert_eq!(held.stale(&[wanted("a", "u1", 2)]).0, vec![]);
        held.put(key.clone(), None);
        assert!(held.is_empty());
    }

    #[test]
    fn xrds_and_crds_of_one_name_are_two_targets() {
        let held = Held::default();
        held.put((TargetKind::Crd, "a".into()), Some(object("u1", 1)));
        let x = Wanted { key: (TargetKind::Xrd, "a".into()), uid: "u1".into(), generation: 1 };
        let (stale, released) = held.stale(std::slice::from_ref(&x));
        assert_eq!((stale, released), (vec![x], true));
    }
}
