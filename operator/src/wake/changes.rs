//! The last seen view of each object of a watch, and what changed of it.

use std::collections::{HashMap, HashSet};

use kube::Resource;
use kube::runtime::watcher;

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
