//! The plan registry: target name → entry, a copy-on-write map behind `ArcSwap`.
//!
//! Readers (every ConversionReview) load the current map without locks. Writers (the sync
//! loop, one pass at a time) build a new map and swap it in; a pass batches all its changes
//! into one swap, so a pass over N configs costs one copy, not N.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Instant, SystemTime};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use dco_api::config::TargetKind;

use crate::hold::HoldReason;
use crate::plan::ServablePlan;
use crate::signals::PlanSignals;

/// The config an entry was built from.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct ConfigRef {
    /// `XRDConversionConfig`, `CRDConversionConfig`, or `file` in static mode.
    pub kind: String,
    pub name: String,
}

/// A compiled, servable plan.
#[derive(Clone)]
pub struct Served {
    pub plan: Arc<dyn ServablePlan>,
    pub plan_hash: String,
    pub compiled_at: SystemTime,
    /// What the plan was compiled from (config and target identity and generation); an
    /// unchanged fingerprint skips the compile.
    pub fingerprint: String,
    /// The plan's conversion counters, resolved once (`signals.rs`).
    pub signals: PlanSignals,
}

/// The last compile failure, kept beside the last good plan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub message: String,
    /// `message` without the compile errors' text (which can quote schema contents).
    pub summary: String,
    pub errors: Vec<String>,
    /// Where each error is, without its text.
    pub locations: Vec<String>,
    pub at: SystemTime,
    pub fingerprint: String,
    /// The config's `driftPolicy` is FailClosed: reviews are answered with this failure, not
    /// with the last good plan (which stays, so a compile that succeeds again swaps nothing
    /// in the Lease).
    pub fail_closed: bool,
}

#[derive(Clone)]
pub struct Entry {
    pub target: String,
    pub target_kind: TargetKind,
    pub config: Option<ConfigRef>,
    pub served: Option<Served>,
    pub failure: Option<Failure>,
    pub hold: HoldReason,
    /// Set while the entry is draining: neither hold clause applies any more. The deadline as
    /// the drain began: a review answered meanwhile extends it ([`LastReview`]).
    pub draining_until: Option<SystemTime>,
    /// When the entry last answered a review while draining.
    pub last_review: LastReview,
}

/// When a draining entry last answered a review. Shared by every copy of the entry (a pass
/// clones an entry to change it; the request path only stamps it), so the sync pass sees the
/// reviews of the entry it drains. A review proves an apiserver still routes the target here:
/// the drain runs `--drain-period` from the last one (`hold::decide`), not only from the
/// switch, so an apiserver slow to pick up a re-wiring (sharding_rebalance: one still called the
/// source 11 s after the write, with 63 CRDs re-wired at once) is still answered.
#[derive(Clone, Debug, Default)]
pub struct LastReview(Arc<Mutex<Option<Instant>>>);

impl LastReview {
    pub fn stamp(&self, at: Instant) {
        let mut last = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        *last = Some(last.map_or(at, |l| l.max(at)));
    }

    pub fn get(&self) -> Option<Instant> {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl Entry {
    pub fn plan(&self) -> Option<&Arc<dyn ServablePlan>> {
        self.served.as_ref().map(|s| &s.plan)
    }

    /// The failure reviews must be answered with instead of the plan (`driftPolicy:
    /// FailClosed` and the config no longer compiles).
    pub fn closed(&self) -> Option<&Failure> {
        self.failure.as_ref().filter(|f| f.fail_closed)
    }
}

pub type Map = HashMap<String, Arc<Entry>>;

pub struct Registry {
    map: ArcSwap<Map>,
    /// Serialises writers so no swap is lost; readers never touch it.
    write: Mutex<()>,
    /// Bumped on every change that alters the map; the Lease publisher and metrics follow it.
    changes: watch::Sender<u64>,
}

impl Default for Registry {
    fn default() -> Self {
        Registry {
            map: ArcSwap::from_pointee(Map::new()),
            write: Mutex::new(()),
            changes: watch::channel(0).0,
        }
    }
}

impl Registry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Lock-free lookup on the request path.
    pub fn get(&self, target: &str) -> Option<Arc<Entry>> {
        self.map.load().get(target).cloned()
    }

    /// The whole map as of now.
    pub fn snapshot(&self) -> Arc<Map> {
        self.map.load_full()
    }

    /// Targets with a servable plan, sorted.
    pub fn served_targets(&self) -> Vec<String> {
        self.targets(|e| e.served.is_some())
    }

    /// What the replica reports in its served-target Lease, sorted: servable plans that are not
    /// draining. A draining plan still answers (for apiservers that have not switched yet) but
    /// is on its way out, so the Lease stops listing it when the drain starts, not when the plan
    /// is dropped: a Lease never lists a plan the replica no longer has, and a move back here
    /// waits until the drain is cancelled. The model check (state/tests/model.rs) found the
    /// move that trusted a Lease still listing a plan dropped a moment before.
    pub fn reported_targets(&self) -> Vec<String> {
        self.targets(|e| e.served.is_some() && e.draining_until.is_none())
    }

    fn targets(&self, keep: impl Fn(&Entry) -> bool) -> Vec<String> {
        let mut out: Vec<String> =
            self.map.load().values().filter(|e| keep(e)).map(|e| e.target.clone()).collect();
        out.sort();
        out
    }

    pub fn len(&self) -> usize {
        self.map.load().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Notified on every change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    /// Apply a batch of changes as one swap. `f` edits a private copy; readers see the old map
    /// until the swap and the new one after, never a half-applied batch. Returns whether
    /// anything changed (subscribers are only woken then).
    pub fn update<R>(&self, f: impl FnOnce(&mut Map) -> (R, bool)) -> R {
        let _guard = self.write.lock().unwrap_or_else(PoisonError::into_inner);
        let mut next: Map = (**self.map.load()).clone();
        let (r, changed) = f(&mut next);
        if changed {
            self.map.store(Arc::new(next));
            self.changes.send_modify(|v| *v = v.wrapping_add(1));
        }
        r
    }

    pub fn insert(&self, entry: Entry) {
        self.update(|m| {
            m.insert(entry.target.clone(), Arc::new(entry));
            ((), true)
        })
    }

    pub fn remove(&self, target: &str) -> bool {
        self.update(|m| {
            let removed = m.remove(target).is_some();
            (removed, removed)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plan::{BadReview, Reviewed};
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    /// A plan that answers with its own generation, so a reader can check it saw a whole entry.
    struct Tagged(u64);
    impl ServablePlan for Tagged {
        fn hub_version(&self) -> &str {
            "v2"
        }
        fn versions(&self) -> Vec<String> {
            vec!["v2".into()]
        }
        fn hash(&self) -> String {
            self.0.to_string()
        }
        fn review(&self, _: &[u8]) -> Result<Reviewed, BadReview> {
            Ok(Reviewed {
                body: self.0.to_string().into(),
                uid: String::new(),
                objects: 0,
                failure: None,
                to: None,
                tally: Vec::new(),
            })
        }
    }

    fn entry(target: &str, generation: u64) -> Entry {
        Entry {
            target: target.to_string(),
            target_kind: TargetKind::Crd,
            config: None,
            served: Some(Served {
                plan: Arc::new(Tagged(generation)),
                plan_hash: generation.to_string(),
                compiled_at: SystemTime::now(),
                fingerprint: generation.to_string(),
                signals: PlanSignals::default(),
            }),
            failure: None,
            hold: HoldReason::Assigned,
            draining_until: None,
            last_review: LastReview::default(),
        }
    }

    #[test]
    fn swaps_under_concurrent_readers_are_whole_and_monotonic() {
        let reg = Arc::new(Registry::new());
        let targets: Vec<String> = (0..16).map(|i| format!("t{i}.example.org")).collect();
        for t in &targets {
            reg.insert(entry(t, 0));
        }
        let stop = Arc::new(AtomicBool::new(false));
        let reads = Arc::new(AtomicUsize::new(0));
        let readers: Vec<_> = (0..4)
            .map(|r| {
                let (reg, stop, reads, targets) = (reg.clone(), stop.clone(), reads.clone(), targets.clone());
                std::thread::spawn(move || {
                    let mut last = vec![0u64; targets.len()];
                    while !stop.load(Ordering::Relaxed) {
                        // Every batch writes the same generation to all targets, so one
                        // snapshot must show one generation everywhere.
                        let snap = reg.snapshot();
                        let gens: Vec<u64> = targets
                            .iter()
                            .map(|t| snap[t].served.as_ref().unwrap().plan_hash.parse().unwrap())
                            .collect();
                        assert!(
                            gens.windows(2).all(|w| w[0] == w[1]),
                            "reader {r} saw a torn batch {gens:?}"
                        );
                        for (i, t) in targets.iter().enumerate() {
                            let e = reg.get(t).expect("targets are never removed in this test");
                            let body = e.plan().unwrap().review(b"").unwrap().body;
                            let g: u64 = std::str::from_utf8(&body).unwrap().parse().unwrap();
                            assert!(g >= last[i], "reader {r} went back in time on {t}: {g} < {}", last[i]);
                            last[i] = g;
                        }
                        reads.fetch_add(1, Ordering::Relaxed);
                    }
                })
            })
            .collect();
        let mut rx = reg.subscribe();
        for g in 1..=500u64 {
            reg.update(|m| {
                for t in &targets {
                    m.insert(t.clone(), Arc::new(entry(t, g)));
                }
                ((), true)
            });
        }
        stop.store(true, Ordering::Relaxed);
        for r in readers {
            r.join().expect("a reader panicked");
        }
        assert!(reads.load(Ordering::Relaxed) > 0);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 16 + 500);
        assert_eq!(reg.served_targets(), {
            let mut t = targets.clone();
            t.sort();
            t
        });
    }

    #[test]
    fn an_unchanged_batch_does_not_notify() {
        let reg = Registry::new();
        let rx = reg.subscribe();
        reg.update(|_| ((), false));
        assert!(!rx.has_changed().unwrap());
        assert!(!reg.remove("absent"));
        assert!(!rx.has_changed().unwrap());
    }

    #[test]
    fn only_entries_with_a_plan_are_served() {
        let reg = Registry::new();
        reg.insert(entry("b", 1));
        let mut failed = entry("a", 1);
        failed.served = None;
        reg.insert(failed);
        assert_eq!(reg.served_targets(), ["b"]);
        assert_eq!(reg.len(), 2);
    }

    #[test]
    fn a_draining_plan_is_served_but_not_reported() {
        let reg = Registry::new();
        reg.insert(entry("b", 1));
        let mut draining = entry("c", 1);
        draining.draining_until = Some(SystemTime::now() + std::time::Duration::from_secs(5));
        reg.insert(draining);
        assert_eq!(reg.served_targets(), ["b", "c"], "it still answers");
        assert_eq!(reg.reported_targets(), ["b"], "its Lease no longer lists it");
    }
}
