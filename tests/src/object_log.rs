//! Every version of some objects a test watches, each with the moment this process saw it: a
//! test counts from it how often a CRD's spec changed during a move, when a generated CRD
//! took the wiring its XRD got, and in which order a config's conditions turned
//! (tests/tests/e2e_crossplane.rs). One watch of the kind (`resourceVersion` order, so no
//! version of an object is skipped while the watch holds); a re-list after a broken watch adds
//! only versions not seen yet.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::Result;
use futures::StreamExt;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject};
use kube::runtime::{WatchStreamExt, watcher};
use serde_json::Value;

/// One version of one object, as the watch delivered it.
#[derive(Clone, Debug)]
pub struct Seen {
    pub at: Instant,
    pub name: String,
    pub generation: i64,
    /// The whole object (`spec`, `status`, `metadata`).
    pub object: Value,
}

/// A running watch of the named objects of one kind; stops when dropped.
pub struct ObjectLog {
    seen: Arc<Mutex<Vec<Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for ObjectLog {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// At most this many versions are kept (a runaway writer must not fill the memory).
const MAX_SEEN: usize = 200_000;

impl ObjectLog {
    /// Watches the cluster-wide kind `ar`, keeping the versions of objects named in `names`;
    /// returns once the first list has been read (the objects' state before anything the
    /// test does next).
    pub async fn start(client: &Client, ar: &ApiResource, names: &[String]) -> Result<ObjectLog> {
        let api: Api<DynamicObject> = Api::all_with(client.clone(), ar);
        let names: BTreeSet<String> = names.iter().cloned().collect();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (synced_tx, synced) = tokio::sync::oneshot::channel();
        let log = seen.clone();
        let task = tokio::spawn(async move {
            let mut synced_tx = Some(synced_tx);
            let mut versions: BTreeSet<(String, String)> = BTreeSet::new();
            let mut events = std::pin::pin!(watcher(api, watcher::Config::default()).default_backoff());
            while let Some(ev) = events.next().await {
                let obj = match ev {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => o,
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = synced_tx.take() {
                            let _ = tx.send(());
                        }
                        continue;
                    }
                    _ => continue,
                };
                let name = obj.metadata.name.clone().unwrap_or_default();
                let rv = obj.metadata.resource_version.clone().unwrap_or_default();
                if !names.contains(&name) || !versions.insert((name.clone(), rv)) {
                    continue;
                }
                let generation = obj.metadata.generation.unwrap_or(0);
                let Ok(object) = serde_json::to_value(&obj) else { continue };
                let mut log = log.lock().unwrap_or_else(PoisonError::into_inner);
                if log.len() < MAX_SEEN {
                    log.push(Seen { at: Instant::now(), name, generation, object });
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(60), synced)
            .await
            .map_err(|_| anyhow::anyhow!("the watch of {} did not list within 60 s", ar.plural))??;
        Ok(ObjectLog { seen, task })
    }

    /// Every version of `name` seen, oldest first.
    pub fn of(&self, name: &str) -> Vec<Seen> {
        let seen = self.seen.lock().unwrap_or_else(PoisonError::into_inner);
        seen.iter().filter(|s| s.name == name).cloned().collect()
    }

    /// The versions of `name` seen in `[from, to]`, and the last one seen before `from`.
    pub fn window(&self, name: &str, from: Instant, to: Instant) -> (Option<Seen>, Vec<Seen>) {
        let all = self.of(name);
        let before = all.iter().rev().find(|s| s.at < from).cloned();
        (before, all.into_iter().filter(|s| s.at >= from && s.at <= to).collect())
    }

    /// The first version of `name` seen at or after `from` that `pred` accepts.
    pub fn first_after(&self, name: &str, from: Instant, pred: impl Fn(&Value) -> bool) -> Option<Seen> {
        self.of(name).into_iter().find(|s| s.at >= from && pred(&s.object))
    }
}
