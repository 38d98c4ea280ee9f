//! Each controller's reconcile queue, measured as controller-runtime's workqueue reports it
//! (docs/operations.md, "Metrics"): kube-runtime's scheduler exposes neither its depth nor how
//! long a request waited, so every way into a controller stamps the object here and the
//! reconcile's start takes the stamp out.
//!
//! An object is pending from its first trigger (a watch event, a wake, or a requeue deadline
//! that has passed) until its reconcile starts; triggers of an object already pending add
//! nothing, as the scheduler keeps one slot per object. `depth` counts the pending objects,
//! `wait` observes trigger → start. A requeue is pending only once its deadline has passed.
//! Entries of objects gone from the controller's cache are dropped (the scheduler answers
//! them with `ObjectNotFound` and never reconciles them), so the map holds at most the cached
//! objects plus those not yet found to be gone.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use kube::Resource;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::DescriptorEncoder;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use dco_api::metrics::{encode_family, register};

use crate::observability::metrics::{ControllerLabel, Register};

/// Buckets of the wait: a scheduler's latency (ms) up to a paced wake during a rebalance of
/// hundreds of configs at a few per second (minutes).
const WAIT_BUCKETS: [f64; 13] =
    [0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0];

/// The least number of entries before a prune of objects no longer cached.
const PRUNE_FLOOR: usize = 1024;

/// The queue families: `queue_wait_seconds` (histogram) and `queue_depth` (gauge, read at
/// each scrape from the queues [`QueueMetrics::queue`] made).
#[derive(Clone, Debug)]
pub struct QueueMetrics {
    wait: Family<ControllerLabel, Histogram>,
    queues: Arc<Mutex<Vec<Arc<dyn Depth>>>>,
}

impl Default for QueueMetrics {
    fn default() -> Self {
        QueueMetrics {
            wait: Family::new_with_constructor(|| Histogram::new(WAIT_BUCKETS)),
            queues: Arc::default(),
        }
    }
}

impl QueueMetrics {
    /// The queue of `controller`, whose objects live in `store`.
    pub fn queue<K>(&self, controller: &'static str, store: Store<K>) -> Arc<Queue<K>>
    where
        K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    {
        let label = ControllerLabel { controller: controller.to_string() };
        let wait = self.wait.get_or_create(&label).clone();
        let q = Arc::new(Queue::new(controller, wait, move |r| store.get(r).is_some()));
        self.queues.lock().unwrap_or_else(PoisonError::into_inner).push(q.clone());
        q
    }
}

trait Depth: Send + Sync + std::fmt::Debug {
    fn controller(&self) -> &'static str;
    fn depth(&self, now: Instant) -> usize;
}

#[derive(Debug)]
struct DepthCollector(Arc<Mutex<Vec<Arc<dyn Depth>>>>);

impl Collector for DepthCollector {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let depth = Family::<ControllerLabel, Gauge>::default();
        let now = Instant::now();
        for q in self.0.lock().unwrap_or_else(PoisonError::into_inner).iter() {
            let n = i64::try_from(q.depth(now)).unwrap_or(i64::MAX);
            depth.get_or_create(&ControllerLabel { controller: q.controller().to_string() }).set(n);
        }
        encode_family(
            &mut encoder,
            "queue_depth",
            "Objects triggered (watch event, wake, passed requeue deadline) whose reconcile has not started, by controller",
            &depth,
        )
    }
}

impl Register for QueueMetrics {
    fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "queue_wait_seconds",
            "Seconds from an object's first trigger (watch event, wake, requeue deadline) to the start of its reconcile, by controller",
            self.wait.clone(),
        );
        registry.register_collector(Box::new(DepthCollector(self.queues.clone())));
    }
}

/// Since when an object is pending: its first trigger, or its requeue deadline.
#[derive(Clone, Copy, Debug, Default)]
struct Entry {
    triggered: Option<Instant>,
    due: Option<Instant>,
}

impl Entry {
    fn since(&self) -> Option<Instant> {
        match (self.triggered, self.due) {
            (Some(t), Some(d)) => Some(t.min(d)),
            (t, d) => t.or(d),
        }
    }
}

struct Pending<K: Resource> {
    entries: HashMap<ObjectRef<K>, Entry>,
    /// Past this many entries, those of objects no longer cached are dropped.
    limit: usize,
}

/// One controller's pending objects (module docs).
pub struct Queue<K: Resource<DynamicType = ()>> {
    controller: &'static str,
    wait: Histogram,
    pending: Mutex<Pending<K>>,
    cached: Cached<K>,
}

/// Whether an object is still in the controller's cache.
type Cached<K> = Box<dyn Fn(&ObjectRef<K>) -> bool + Send + Sync>;

impl<K: Resource<DynamicType = ()>> std::fmt::Debug for Queue<K> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Queue({})", self.controller)
    }
}

impl<K: Resource<DynamicType = ()>> Queue<K> {
    /// `cached` tells whether the object is still in the controller's cache.
    pub fn new(
        controller: &'static str,
        wait: Histogram,
        cached: impl Fn(&ObjectRef<K>) -> bool + Send + Sync + 'static,
    ) -> Self {
        let pending = Mutex::new(Pending { entries: HashMap::new(), limit: PRUNE_FLOOR });
        Queue { controller, wait, pending, cached: Box::new(cached) }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending<K>> {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A trigger of `r` at `now`: the first one of a pending object counts.
    pub fn triggered(&self, r: &ObjectRef<K>, now: Instant) {
        let mut p = self.lock();
        let e = p.entries.entry(r.clone()).or_default();
        if e.triggered.is_none() {
            e.triggered = Some(now);
        }
        if p.entries.len() > p.limit {
            p.entries.retain(|r, _| (self.cached)(r));
            p.limit = (2 * p.entries.len()).max(PRUNE_FLOOR);
        }
    }

    /// A reconcile of `r` ended at `now` asking to run again after `after`: pending from then
    /// on, unless something triggers it sooner (the scheduler keeps the earlier time).
    pub fn requeued(&self, r: &ObjectRef<K>, after: Option<Duration>, now: Instant) {
        let Some(due) = after.and_then(|a| now.checked_add(a)) else { return };
        let mut p = self.lock();
        let e = p.entries.entry(r.clone()).or_default();
        e.due = Some(e.due.map_or(due, |d| d.min(due)));
    }

    /// The reconcile of `r` starts at `now`: how long it waited (observed), if a trigger or a
    /// passed deadline was recorded for it.
    pub fn started(&self, r: &ObjectRef<K>, now: Instant) -> Option<Duration> {
        let since = self.lock().entries.remove(r)?.since()?;
        let waited = now.checked_duration_since(since)?;
        self.wait.observe(waited.as_secs_f64());
        Some(waited)
    }

    /// `r` will not be reconciled: the scheduler found it gone from the cache.
    pub fn forget(&self, r: &ObjectRef<K>) {
        self.lock().entries.remove(r);
    }

    /// Pending objects at `now`: triggered, or their requeue deadline passed. Entries of
    /// objects gone from the cache are dropped first.
    pub fn depth(&self, now: Instant) -> usize {
        let mut p = self.lock();
        p.entries.retain(|r, _| (self.cached)(r));
        p.entries.values().filter(|e| e.since().is_some_and(|s| s <= now)).count()
    }

    /// Entries held, pending or not yet due.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.lock().entries.len()
    }
}

impl<K: Resource<DynamicType = ()>> Depth for Queue<K> {
    fn controller(&self) -> &'static str {
        self.controller
    }
    fn depth(&self, now: Instant) -> usize {
        Queue::depth(self, now)
    }
}

/// When `action` asks to reconcile again. kube-runtime keeps the duration private; its
/// derived `Debug` (`Action { requeue_after: Some(10s) }`) carries it in `Duration`'s own
/// format, which a unit test holds this parser to.
pub fn requeue_after(action: &Action) -> Option<Duration> {
    let text = format!("{action:?}");
    let inner = text.split_once("Some(")?.1.split_once(')')?.0;
    parse_debug_duration(inner)
}

/// `Duration`'s `Debug`: a decimal number and one of `ns`, `µs`, `ms`, `s`.
fn parse_debug_duration(s: &str) -> Option<Duration> {
    let split = s.find(|c: char| !(c.is_ascii_digit() || c == '.'))?;
    let (number, unit) = s.split_at(split);
    let scale = match unit {
        "ns" => 1e-9,
        "µs" => 1e-6,
        "ms" => 1e-3,
        "s" => 1.0,
        _ => return None,
    };
    let v: f64 = number.parse().ok()?;
    Duration::try_from_secs_f64(v * scale).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use dco_api::CRDConversionConfig;
    use proptest::prelude::*;
    use std::collections::HashSet;

    fn queue(cached: impl Fn(&str) -> bool + Send + Sync + 'static) -> Queue<CRDConversionConfig> {
        let wait = Histogram::new(WAIT_BUCKETS);
        Queue::new("crdconversionconfig", wait, move |r: &ObjectRef<CRDConversionConfig>| cached(&r.name))
    }

    fn r(name: &str) -> ObjectRef<CRDConversionConfig> {
        ObjectRef::new(name)
    }

    #[test]
    fn repeated_triggers_of_one_object_count_once_from_the_first() {
        let q = queue(|_| true);
        let t0 = Instant::now();
        for i in 0..5 {
            q.triggered(&r("a"), t0 + Duration::from_millis(i * 100));
        }
        q.triggered(&r("b"), t0 + Duration::from_millis(200));
        assert_eq!(q.depth(t0 + Duration::from_secs(1)), 2, "one slot per object");
        let waited = q.started(&r("a"), t0 + Duration::from_secs(1));
        assert_eq!(waited, Some(Duration::from_secs(1)), "from the first trigger");
        assert_eq!(q.depth(t0 + Duration::from_secs(1)), 1);
        // A trigger during the reconcile makes it pending again, from then.
        q.triggered(&r("a"), t0 + Duration::from_millis(1500));
        assert_eq!(q.started(&r("a"), t0 + Duration::from_secs(2)), Some(Duration::from_millis(500)));
        assert_eq!(q.started(&r("b"), t0 + Duration::from_secs(2)), Some(Duration::from_millis(1800)));
        assert_eq!(q.depth(t0 + Duration::from_secs(2)), 0);
        assert_eq!(q.held(), 0);
    }

    #[test]
    fn a_requeue_is_pending_from_its_deadline_and_a_trigger_comes_first() {
        let q = queue(|_| true);
        let t0 = Instant::now();
        q.requeued(&r("a"), Some(Duration::from_secs(10)), t0);
        q.requeued(&r("b"), None, t0);
        assert_eq!(q.depth(t0 + Duration::from_secs(9)), 0, "not due yet; await_change holds nothing");
        assert_eq!(q.held(), 1);
        assert_eq!(q.depth(t0 + Duration::from_secs(10)), 1);
        assert_eq!(q.started(&r("a"), t0 + Duration::from_millis(10_050)), Some(Duration::from_millis(50)));
        // A watch event before the deadline: the scheduler runs it now, and the wait counts
        // from the event.
        q.requeued(&r("a"), Some(Duration::from_secs(30)), t0);
        q.triggered(&r("a"), t0 + Duration::from_secs(1));
        assert_eq!(q.started(&r("a"), t0 + Duration::from_secs(2)), Some(Duration::from_secs(1)));
        // Two requeues: the earlier deadline wins.
        q.requeued(&r("a"), Some(Duration::from_secs(30)), t0);
        q.requeued(&r("a"), Some(Duration::from_secs(5)), t0);
        assert_eq!(q.started(&r("a"), t0 + Duration::from_secs(6)), Some(Duration::from_secs(1)));
    }

    #[test]
    fn objects_gone_from_the_cache_leave_the_queue() {
        let gone = Arc::new(Mutex::new(HashSet::<String>::new()));
        let g = gone.clone();
        let q = queue(move |n| !g.lock().unwrap().contains(n));
        let t0 = Instant::now();
        q.triggered(&r("a"), t0);
        q.triggered(&r("b"), t0);
        gone.lock().unwrap().insert("a".into());
        assert_eq!(q.depth(t0), 1, "a deleted object is dropped at the next scrape");
        q.forget(&r("b"));
        assert_eq!(q.depth(t0), 0);
        // Without any scrape, the map stays within the cache plus the floor.
        for i in 0..5 * PRUNE_FLOOR {
            let name = format!("gone-{i}");
            gone.lock().unwrap().insert(name.clone());
            q.triggered(&r(&name), t0);
        }
        assert!(q.held() <= PRUNE_FLOOR + 1, "{} entries held", q.held());
    }

    #[test]
    fn a_requeue_duration_is_read_from_the_action() {
        for d in [
            Duration::from_secs(10),
            Duration::from_secs(15),
            Duration::from_millis(1500),
            Duration::from_millis(250),
            Duration::from_micros(7),
            Duration::from_nanos(3),
            Duration::from_secs(3600),
            Duration::from_millis(123_456),
        ] {
            let got = requeue_after(&Action::requeue(d)).unwrap();
            let diff = got.abs_diff(d);
            assert!(diff <= Duration::from_nanos(1), "{d:?} read as {got:?}");
        }
        assert_eq!(requeue_after(&Action::await_change()), None);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Trigger(u8),
        Requeue(u8, Option<u16>),
        Start(u8),
        Forget(u8),
        Tick(u16),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u8..8).prop_map(Op::Trigger),
            (0u8..8, proptest::option::of(0u16..2000)).prop_map(|(o, d)| Op::Requeue(o, d)),
            (0u8..8).prop_map(Op::Start),
            (0u8..8).prop_map(Op::Forget),
            (0u16..500).prop_map(Op::Tick),
        ]
    }

    proptest! {
        /// Against a model of the scheduler's slots: depth is the number of objects with a
        /// trigger or a passed deadline, every wait is from the earliest of them and never
        /// negative, and once each pending object has started the depth is back to 0.
        #[test]
        fn the_accounting_matches_a_model_of_the_scheduler(ops in proptest::collection::vec(op(), 1..200)) {
            let q = queue(|_| true);
            let t0 = Instant::now();
            let mut now = t0;
            let mut model: HashMap<u8, (Option<Instant>, Option<Instant>)> = HashMap::new();
            for o in ops {
                match o {
                    Op::Trigger(i) => {
                        q.triggered(&r(&i.to_string()), now);
                        let e = model.entry(i).or_default();
                        e.0 = e.0.or(Some(now));
                    }
                    Op::Requeue(i, d) => {
                        let d = d.map(|ms| Duration::from_millis(u64::from(ms)));
                        q.requeued(&r(&i.to_string()), d, now);
                        if let Some(d) = d {
                            let e = model.entry(i).or_default();
                            e.1 = Some(e.1.map_or(now + d, |x| x.min(now + d)));
                        }
                    }
                    Op::Start(i) => {
                        let want = model.remove(&i).and_then(|(t, d)| match (t, d) {
                            (Some(t), Some(d)) => Some(t.min(d)),
                            (t, d) => t.or(d),
                        });
                        let got = q.started(&r(&i.to_string()), now);
                        prop_assert_eq!(got, want.and_then(|s| now.checked_duration_since(s)));
                    }
                    Op::Forget(i) => {
                        q.forget(&r(&i.to_string()));
                        model.remove(&i);
                    }
                    Op::Tick(ms) => now += Duration::from_millis(u64::from(ms)),
                }
                let due = model.values().filter(|(t, d)| t.is_some() || d.is_some_and(|d| d <= now)).count();
                prop_assert_eq!(q.depth(now), due);
            }
            let keys: Vec<u8> = model.keys().copied().collect();
            for i in keys {
                q.triggered(&r(&i.to_string()), now);
                let waited = q.started(&r(&i.to_string()), now + Duration::from_secs(1));
                // Pending since the trigger at the latest: a second later it waited at least that.
                prop_assert!(waited.is_some_and(|w| w >= Duration::from_secs(1)), "{:?}", waited);
            }
            prop_assert_eq!(q.depth(now + Duration::from_secs(3600)), 0);
            prop_assert_eq!(q.held(), 0);
        }
    }
}
