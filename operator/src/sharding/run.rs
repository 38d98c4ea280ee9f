//! The Coordinator's run loop on a thread of its own: a tick every renew interval (`leases.rs`
//! does its Lease I/O), early at a Lease's expiry, and at once when another replica's Lease
//! event asks for it ([`Nudges`]).

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::api::Api;
use tokio::sync::watch;

use super::coordinator::{CoordinatorSettings, ShardOwnership};
use super::gate::Gate;
use super::leases::{
    LABEL_COMPONENT, LABEL_ROLE, LeaseNames, Membership, PodRef, ROLE_MEMBER, ROLE_SHARD, Snapshot,
};

/// Which Lease events ask this replica's Coordinator for a tick now (`run`'s nudge): another
/// replica freed a shard Lease, or a member joined. Not our own renewals, which would loop.
pub struct Nudges {
    namespace: String,
    group: String,
    me: String,
    members: std::collections::BTreeSet<String>,
}

impl Nudges {
    pub fn new(namespace: String, names: &LeaseNames, replica_id: &str) -> Self {
        let group = names.group().to_string();
        Nudges { namespace, group, me: names.member(replica_id), members: Default::default() }
    }

    /// Whether this applied Lease calls for a tick now.
    pub fn observe(&mut self, l: &Lease) -> bool {
        let labels = l.metadata.labels.as_ref();
        if l.metadata.namespace.as_deref() != Some(self.namespace.as_str())
            || labels.and_then(|m| m.get(LABEL_COMPONENT)) != Some(&self.group)
        {
            return false;
        }
        let role = l.metadata.labels.as_ref().and_then(|m| m.get(LABEL_ROLE)).map(String::as_str);
        let name = l.metadata.name.clone().unwrap_or_default();
        match role {
            Some(ROLE_SHARD) => {
                l.spec.as_ref().and_then(|s| s.holder_identity.as_deref()).unwrap_or_default().is_empty()
            }
            Some(ROLE_MEMBER) => name != self.me && self.members.insert(name),
            _ => false,
        }
    }

    /// Whether this deleted Lease calls for a tick now: another member's Lease is gone (it
    /// left, or the garbage collector removed it with its Pod), so the shard Leases it still
    /// holds may be taken at once (coordinator.rs `holder_left`).
    pub fn observe_deleted(&mut self, l: &Lease) -> bool {
        let labels = l.metadata.labels.as_ref();
        if l.metadata.namespace.as_deref() != Some(self.namespace.as_str())
            || labels.and_then(|m| m.get(LABEL_COMPONENT)) != Some(&self.group)
            || labels.and_then(|m| m.get(LABEL_ROLE)).map(String::as_str) != Some(ROLE_MEMBER)
        {
            return false;
        }
        let name = l.metadata.name.clone().unwrap_or_default();
        self.members.remove(&name);
        name != self.me
    }
}

/// The OnChange callback, handed to the Coordinator's thread once the watches exist.
pub type OnChange = Box<dyn FnMut() + Send>;

/// A Coordinator running on a thread of its own, with a current-thread runtime and a client
/// of its own: CPU-heavy reconciles on the main runtime's workers cannot delay its renewals
/// past the renew deadline (which would stop this replica's reconciles for a while, see
/// docs/sharding.md "Never two owners").
pub struct Thread {
    pub gate: Gate,
    /// Ask for a tick now (a shard Lease was freed, a member joined): see [`run`].
    pub nudge: std::sync::Arc<tokio::sync::Notify>,
    pub owned: watch::Receiver<ShardOwnership>,
    pub snapshot: watch::Receiver<Snapshot>,
    on_change: Option<tokio::sync::oneshot::Sender<OnChange>>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    done: tokio::sync::oneshot::Receiver<()>,
}

impl Thread {
    /// Starts the thread and returns once Prime (the first tick) has run there, so the gate
    /// knows the owned shards before any watch opens.
    pub async fn start(
        client: impl FnOnce() -> Result<kube::Client, kube::Error> + Send + 'static,
        namespace: String,
        names: LeaseNames,
        settings: CoordinatorSettings,
        me: String,
        pod: Option<PodRef>,
        metrics: std::sync::Arc<super::metrics::ShardingMetrics>,
    ) -> anyhow::Result<Self> {
        use tokio::sync::oneshot;
        let (primed_tx, primed_rx) = oneshot::channel();
        let (on_change_tx, on_change_rx) = oneshot::channel::<OnChange>();
        let (stop_tx, stop_rx) = oneshot::channel::<()>();
        let (done_tx, done_rx) = oneshot::channel::<()>();
        let nudge = std::sync::Arc::new(tokio::sync::Notify::new());
        let nudged = nudge.clone();
        std::thread::Builder::new().name("dco-coordinator".into()).spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = primed_tx.send(Err(format!("cannot start the coordinator's runtime: {e}")));
                    return;
                }
            };
            rt.block_on(async move {
                // Built on this thread's runtime (its requests counted with the rest:
                // observability/api_metrics.rs).
                let client = match client() {
                    Ok(c) => c,
                    Err(e) => {
                        let _ = primed_tx.send(Err(format!("cannot build the coordinator's client: {e}")));
                        return;
                    }
                };
                let reporter = kube::runtime::events::Reporter {
                    controller: crate::names::FIELD_MANAGER.to_string(),
                    instance: Some(me.clone()),
                };
                let recorder = kube::runtime::events::Recorder::new(client.clone(), reporter);
                let mut m = Membership::new(Api::namespaced(client, &namespace), settings, me)
                    .with_names(names)
                    .with_pod(pod);
                m.recorder = Some(recorder);
                // From the start: the wait for the watches below is no pause.
                tokio::spawn(m.pauses.clone().run(nudged.clone(), metrics.pauses.clone()));
                m.tick_and_report(&metrics, &mut || {}).await;
                if primed_tx.send(Ok((m.gate(), m.owned(), m.snapshot()))).is_err() {
                    return;
                }
                let Ok(on_change) = on_change_rx.await else { return };
                run(m, metrics, on_change, nudged, async {
                    let _ = stop_rx.await;
                })
                .await;
            });
            let _ = done_tx.send(());
        })?;
        let (gate, owned, snapshot) = primed_rx
            .await
            .map_err(|_| anyhow::anyhow!("the coordinator's thread ended before its first tick"))?
            .map_err(|e| anyhow::anyhow!(e))?;
        Ok(Thread {
            gate,
            nudge,
            owned,
            snapshot,
            on_change: Some(on_change_tx),
            stop: Some(stop_tx),
            done: done_rx,
        })
    }

    /// Starts the ticks after Prime, with the OnChange callback.
    pub fn run(&mut self, on_change: impl FnMut() + Send + 'static) {
        if let Some(tx) = self.on_change.take() {
            let _ = tx.send(Box::new(on_change));
        }
    }

    /// Stops the ticks and waits for this replica's shard Leases to be freed (within 5 s).
    pub async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        drop(self.on_change.take());
        let _ = (&mut self.done).await;
    }
}

/// Runs a tick every renew interval until `stop` resolves, then frees this replica's shard
/// Leases (within 5 s) so the others take them at once. `on_change` runs after every tick
/// that changed the owned set (the OnChange callback: re-enqueue every owned object). A
/// `nudge` asks for a tick now — another replica freed a shard Lease, or a member joined —
/// so a shard in transit waits for no interval (at most one nudged tick per `NUDGE_GAP`).
pub async fn run(
    mut m: Membership,
    metrics: std::sync::Arc<super::metrics::ShardingMetrics>,
    mut on_change: impl FnMut(),
    nudge: std::sync::Arc<tokio::sync::Notify>,
    stop: impl std::future::Future<Output = ()>,
) {
    // At a fixed rate, not an interval after each tick ends: a tick's own time (slow
    // writes) must not stretch the gap between renewals, nor the time until another
    // replica's expired shards are taken (≤ lease duration + renew interval).
    let every = m.settings.renew_interval.unsigned_abs();
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut stop = std::pin::pin!(stop);
    let mut wake: Option<tokio::time::Instant> = None;
    let mut last = tokio::time::Instant::now();
    loop {
        // Early, at a Lease's expiry (a little after it: the Lease must read expired then).
        let early = async {
            match wake {
                Some(at) => tokio::time::sleep_until(at).await,
                None => futures::future::pending().await,
            }
        };
        tokio::select! {
            () = &mut stop => break,
            _ = ticks.tick() => {}
            () = early => {}
            () = nudge.notified() => tokio::time::sleep_until(last + NUDGE_GAP).await,
        }
        last = tokio::time::Instant::now();
        wake = m.tick_and_report(&metrics, &mut on_change).await.map(|at| {
            let until = at.duration_since(Timestamp::now());
            let wait = if until.is_negative() { std::time::Duration::ZERO } else { until.unsigned_abs() };
            let wait = wait.min(every) + WAKE_MARGIN;
            tokio::time::Instant::now() + wait
        });
    }
    match tokio::time::timeout(std::time::Duration::from_secs(5), m.free_all()).await {
        Ok(Ok(n)) => tracing::info!(freed = n, "shutting down: freed this replica's shard Leases"),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "shutting down: cannot free the shard Leases; others take them once this member Lease is gone (with the Pod, as its owner) or they expire")
        }
        Err(_) => tracing::warn!(
            "shutting down: freeing the shard Leases took over 5 s; others take them once they expire"
        ),
    }
}

impl Membership {
    /// One tick now, logged and counted; a failed tick keeps the owned set as it was (it
    /// lapses by itself at the renew deadline, `ShardOwnership::owns`). Returns when the next tick is
    /// due early, if it is.
    pub async fn tick_and_report(
        &mut self,
        metrics: &super::metrics::ShardingMetrics,
        on_change: &mut impl FnMut(),
    ) -> Option<Timestamp> {
        // The pauses counted before this tick's LIST: its renewal proves the Leases held after them.
        let pauses = self.pauses.count();
        let now = Timestamp::now();
        match self.tick(now).await {
            Ok(r) => {
                if self.last_renewal == Some(now) {
                    self.pauses.renewed(pauses);
                }
                metrics.coordinator_ticks.get_or_create(&super::metrics::ResultLabel { result: "ok" }).inc();
                metrics.shard_takes.inc_by(r.taken.len() as u64);
                metrics.shard_frees.inc_by(r.freed.len() as u64);
                let owned = self.owned.borrow().at(now);
                metrics.owned_shards.set(i64::try_from(owned.len()).unwrap_or(i64::MAX));
                if r.lapsed > 0 {
                    tracing::warn!(replica = %self.me, lapsed = r.lapsed,
                        "shards lapsed before this tick renewed them (renewals later than the renew deadline: a slow apiserver, a starved or paused process); their reconciles waited");
                }
                if r.changed {
                    tracing::info!(replica = %self.me, owned = ?owned, taken = ?r.taken, freed = ?r.freed,
                        "the shards this replica owns changed; re-enqueueing their objects");
                    on_change();
                    if let (Some(recorder), Some(member)) = (&self.recorder, &self.member) {
                        let note = format!(
                            "owns {} of {} shards {owned:?}; took {:?}, freed {:?}",
                            owned.len(),
                            self.settings.shards.count(),
                            r.taken,
                            r.freed
                        );
                        dco_state::drive::publish(
                            recorder,
                            member,
                            false,
                            "ShardsChanged",
                            "Coordinate",
                            note,
                        )
                        .await;
                    }
                }
                r.wake_at
            }
            Err(e) => {
                metrics
                    .coordinator_ticks
                    .get_or_create(&super::metrics::ResultLabel { result: "error" })
                    .inc();
                tracing::warn!(error = %e, replica = %self.me,
                    "coordinator tick failed (needs get, list, create, update and delete on leases in the lease namespace); retrying next interval");
                None
            }
        }
    }
}

/// The least time between a tick and a nudged one: frees and joins come in bursts.
const NUDGE_GAP: std::time::Duration = std::time::Duration::from_millis(200);

/// How long after a Lease's expiry the early tick runs, so that the Lease reads expired.
const WAKE_MARGIN: std::time::Duration = std::time::Duration::from_millis(100);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sharding::leases::COMPONENT;
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::collections::BTreeMap;

    #[test]
    fn a_freed_shard_and_a_new_member_nudge_our_own_renewals_do_not() {
        let in_group = |group: &str, ns: &str, name: &str, role: &str, holder: Option<&str>| Lease {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(ns.into()),
                labels: Some(BTreeMap::from([
                    (LABEL_ROLE.to_string(), role.to_string()),
                    (LABEL_COMPONENT.to_string(), group.to_string()),
                ])),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec { holder_identity: holder.map(str::to_string), ..LeaseSpec::default() }),
        };
        let lease = |ns: &str, name: &str, role: &str, holder: Option<&str>| {
            in_group(COMPONENT, ns, name, role, holder)
        };
        let mut n = Nudges::new("dco-system".into(), &LeaseNames::default(), "op-a");
        // Another operator's group (its own --selector) is none of this one's business.
        let other = LeaseNames::for_selector(Some("team=b"));
        assert!(!n.observe(&in_group(other.group(), "dco-system", &other.shard(3), ROLE_SHARD, None)));
        assert!(!n.observe(&in_group(other.group(), "dco-system", &other.member("x"), ROLE_MEMBER, None)));
        assert!(n.observe(&lease("dco-system", "dco-operator-shard-3", ROLE_SHARD, None)));
        assert!(n.observe(&lease("dco-system", "dco-operator-shard-3", ROLE_SHARD, Some(""))));
        assert!(!n.observe(&lease("dco-system", "dco-operator-shard-3", ROLE_SHARD, Some("op-b"))));
        assert!(!n.observe(&lease("elsewhere", "dco-operator-shard-3", ROLE_SHARD, None)));
        assert!(!n.observe(&lease("dco-system", "dco-operator-member-op-a", ROLE_MEMBER, Some("op-a"))));
        assert!(n.observe(&lease("dco-system", "dco-operator-member-op-b", ROLE_MEMBER, Some("op-b"))));
        assert!(
            !n.observe(&lease("dco-system", "dco-operator-member-op-b", ROLE_MEMBER, Some("op-b"))),
            "renewals of a known member"
        );
        // A member Lease gone (left, or collected with its Pod): its shards may go at once.
        assert!(n.observe_deleted(&lease("dco-system", "dco-operator-member-op-b", ROLE_MEMBER, None)));
        assert!(
            n.observe(&lease("dco-system", "dco-operator-member-op-b", ROLE_MEMBER, Some("op-b"))),
            "rejoined"
        );
        assert!(
            !n.observe_deleted(&lease("dco-system", "dco-operator-member-op-a", ROLE_MEMBER, None)),
            "ours"
        );
        assert!(!n.observe_deleted(&lease("dco-system", "dco-operator-shard-3", ROLE_SHARD, None)));
        assert!(!n.observe_deleted(&lease("elsewhere", "dco-operator-member-op-b", ROLE_MEMBER, None)));
        assert!(!n.observe_deleted(&in_group(
            other.group(),
            "dco-system",
            &other.member("x"),
            ROLE_MEMBER,
            None
        )));
    }
}
