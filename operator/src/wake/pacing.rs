//! The pacing of the config reconciles the fan-out asks for: one budget (`--rebalance-qps`)
//! shared by the live members, each config once while it waits.

use std::collections::HashSet;
use std::num::NonZeroU32;
use std::sync::Arc;

use futures::{Stream, stream};
use governor::{Quota, RateLimiter};
use kube::Resource;
use kube::runtime::reflector::ObjectRef;
use tokio::sync::mpsc;

/// The budget of the config reconciles the fan-out asks for (`--rebalance-qps`), shared by
/// the live members of the Coordinator: each replica paces at its share, so adding replicas
/// does not multiply the burst of reconciles (and their target reads and writes) on the
/// apiserver (docs/sharding.md, "Pacing is one budget"). One pacer serves both config
/// controllers.
pub struct Pacer {
    qps: u32,
    members: Box<dyn Fn() -> usize + Send + Sync>,
    limiter: std::sync::Mutex<(u32, Arc<governor::DefaultDirectRateLimiter>)>,
}

impl Pacer {
    /// `members` reads how many live members share the budget now (1 if unknown).
    pub fn new(qps: u32, members: impl Fn() -> usize + Send + Sync + 'static) -> Self {
        let rate = share(qps, 1);
        Pacer { qps, members: Box::new(members), limiter: std::sync::Mutex::new((rate, limiter(rate))) }
    }

    /// This replica's rate now, per second.
    pub fn rate(&self) -> u32 {
        share(self.qps, (self.members)())
    }

    /// Waits for the next permit at this replica's current share.
    pub async fn ready(&self) {
        let rate = self.rate();
        let l = {
            let mut cur = self.limiter.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
            if cur.0 != rate {
                *cur = (rate, limiter(rate));
            }
            cur.1.clone()
        };
        l.until_ready().await;
    }
}

/// One member's share of `qps` among `members`: never below 1 per second, so every replica
/// makes progress; the sum stays within the budget whenever `qps >= members`.
pub fn share(qps: u32, members: usize) -> u32 {
    let n = u32::try_from(members.max(1)).unwrap_or(u32::MAX);
    (qps / n).max(1)
}

fn limiter(rate: u32) -> Arc<governor::DefaultDirectRateLimiter> {
    let quota = Quota::per_second(NonZeroU32::new(rate.max(1)).unwrap_or(NonZeroU32::MIN));
    Arc::new(RateLimiter::direct(quota))
}

/// Reconcile requests from a channel, paced by `pacer` (a server's change may enqueue many
/// configs at once), each config once while it waits for its permit: a request for a config
/// already waiting keeps the first one's place. Every Lease change of a server wakes all the
/// configs moving with it (`fanout::progressing`), so during a rebalance the same configs arrive again and
/// again; passed on one by one, the copies used the budget up (sharding_rebalance at 10 qps: 73
/// moves started at 1.8/s over 39 s; once each, at 8.6/s over 8 s).
///
/// `arrived` sees each request as it arrives, before its wait (the queue metrics count the
/// wait for a permit as queue wait).
pub fn paced<K>(
    rx: mpsc::Receiver<ObjectRef<K>>,
    pacer: Arc<Pacer>,
    arrived: impl FnMut(&ObjectRef<K>) + Send + 'static,
) -> impl Stream<Item = ObjectRef<K>> + Send
where
    K: Resource + Send + Sync + 'static,
    K::DynamicType: Send + Sync + Clone + Eq + std::hash::Hash,
{
    stream::unfold((Pending::new(rx, arrived), pacer), |(mut pending, pacer)| async move {
        loop {
            pending.take_sent();
            if pending.queue.is_empty() {
                let r = pending.rx.recv().await?;
                pending.push(r);
                continue;
            }
            pacer.ready().await;
            // What arrived during the wait joins the queue (or finds itself in it already).
            pending.take_sent();
            let r = pending.pop()?;
            return Some((r, (pending, pacer)));
        }
    })
}

/// The requests waiting for a permit, in arrival order, each once.
struct Pending<K: Resource> {
    rx: mpsc::Receiver<ObjectRef<K>>,
    queue: std::collections::VecDeque<ObjectRef<K>>,
    queued: HashSet<ObjectRef<K>>,
    arrived: Arrived<K>,
}

/// What sees each request as it arrives ([`paced`]).
type Arrived<K> = Box<dyn FnMut(&ObjectRef<K>) + Send>;

impl<K> Pending<K>
where
    K: Resource,
    K::DynamicType: Clone + Eq + std::hash::Hash,
{
    fn new(rx: mpsc::Receiver<ObjectRef<K>>, arrived: impl FnMut(&ObjectRef<K>) + Send + 'static) -> Self {
        Pending { rx, queue: Default::default(), queued: HashSet::new(), arrived: Box::new(arrived) }
    }

    fn push(&mut self, r: ObjectRef<K>) {
        (self.arrived)(&r);
        if self.queued.insert(r.clone()) {
            self.queue.push_back(r);
        }
    }

    /// Everything already sent, without waiting.
    fn take_sent(&mut self) {
        while let Ok(r) = self.rx.try_recv() {
            self.push(r);
        }
    }

    fn pop(&mut self) -> Option<ObjectRef<K>> {
        let r = self.queue.pop_front()?;
        self.queued.remove(&r);
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dco_api::CRDConversionConfig;

    #[tokio::test]
    async fn a_config_asked_for_again_while_it_waits_is_paced_once() {
        use futures::StreamExt;
        let (tx, rx) = mpsc::channel::<ObjectRef<CRDConversionConfig>>(16);
        let pacer = Arc::new(Pacer::new(50, || 1));
        for name in ["a", "b", "a", "a", "c", "b"] {
            tx.send(ObjectRef::new(name)).await.unwrap();
        }
        drop(tx);
        let out: Vec<String> = paced(rx, pacer, |_| {}).map(|r| r.name).collect().await;
        assert_eq!(out, ["a", "b", "c"], "each waiting config once, in first-arrival order");

        // Once passed on, a config may be asked for again: a new request, a new permit.
        let (tx, rx) = mpsc::channel::<ObjectRef<CRDConversionConfig>>(16);
        let mut s = std::pin::pin!(paced(rx, Arc::new(Pacer::new(50, || 1)), |_| {}));
        tx.send(ObjectRef::new("a")).await.unwrap();
        assert_eq!(s.next().await.map(|r| r.name).as_deref(), Some("a"));
        tx.send(ObjectRef::new("a")).await.unwrap();
        assert_eq!(s.next().await.map(|r| r.name).as_deref(), Some("a"));
    }

    #[test]
    fn the_budget_is_shared_by_the_live_members() {
        assert_eq!(share(50, 0), 50, "no view yet: the whole budget");
        assert_eq!(share(50, 1), 50);
        assert_eq!(share(50, 3), 16);
        assert_eq!(share(50, 100), 1, "never stalls");
        for n in 1..=50usize {
            assert!(share(50, n) as usize * n <= 50, "{n} members stay within the budget");
        }
        let members = Arc::new(std::sync::atomic::AtomicUsize::new(1));
        let m = members.clone();
        let pacer = Pacer::new(50, move || m.load(std::sync::atomic::Ordering::SeqCst));
        assert_eq!(pacer.rate(), 50);
        members.store(2, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(pacer.rate(), 25, "a member joins: the share halves at once");
    }
}
