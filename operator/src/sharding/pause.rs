//! Pauses of this process (docs/sharding.md, "After a pause"). A replica that did not run for
//! a while — SIGSTOP, a frozen VM or container, a starved CPU — wakes up with caches as old as
//! the pause and a reconcile perhaps half done, and its shard Leases may have been taken
//! meanwhile. The gate's clock check (`ShardOwnership::owns`) stops it once the renew deadline
//! has passed, but a shorter pause leaves it owning shards on a view as old as the pause.
//!
//! So a heartbeat on the Coordinator's thread counts a pause when its clock jumped by more
//! than [`dco_api::clock_jumps::PAUSE`]; from then until a tick that began after the pause has renewed this
//! replica's Leases (the LIST and the resourceVersion-guarded writes prove it still holds
//! them), the gate owns nothing ([`Pauses::stale`]), and a reconcile that passed the gate
//! before the pause stops at its next write (`gate.rs` `Gate::fence`).

use std::sync::atomic::{AtomicU64, Ordering};
#[cfg(test)]
use std::time::Duration;

pub use dco_api::clock_jumps::BEAT;
use dco_api::clock_jumps::ClockJumps;
#[cfg(test)]
pub use dco_api::clock_jumps::PAUSE;

/// The pauses of this process, counted, and how many of them a renewal since covers.
#[derive(Debug, Default)]
pub struct Pauses {
    /// Only where a heartbeat runs ([`Pauses::started`]): without one, every look would find
    /// a gap since the last.
    enabled: bool,
    clock: ClockJumps,
    /// How many pauses a tick that began after them renewed.
    renewed: AtomicU64,
}

impl Pauses {
    /// Counting from now on: the Coordinator's, whose heartbeat ([`Pauses::run`]) starts with it.
    pub fn started() -> Self {
        Pauses { enabled: true, ..Pauses::default() }
    }

    /// One heartbeat: counts a pause since the last one, then moves the clock on. Returns
    /// whether this look counted a new pause.
    pub fn beat(&self) -> bool {
        if !self.enabled {
            return false;
        }
        let look = self.clock.look();
        if look.counted {
            tracing::warn!(
                paused_ms = look.gap.as_millis() as u64,
                "this process did not run for a while (stopped, frozen or starved): it reconciles nothing until its next tick has renewed its shard Leases"
            );
        }
        look.counted
    }

    /// Pauses counted so far (after a look at the clock): a reconcile's pass carries it, and a
    /// tick that renews covers the pauses counted when it began.
    pub fn count(&self) -> u64 {
        self.beat();
        self.clock.count()
    }

    /// How many pauses the last renewal covers.
    pub fn renewed_upto(&self) -> u64 {
        self.renewed.load(Ordering::SeqCst)
    }

    /// A tick that began when [`Pauses::count`] was `upto` renewed this replica's Leases.
    pub fn renewed(&self, upto: u64) {
        self.renewed.fetch_max(upto, Ordering::SeqCst);
    }

    /// Whether a pause has not been covered by a renewal yet: the gate owns nothing then.
    #[cfg(test)]
    pub fn stale(&self) -> bool {
        self.count() > self.renewed_upto()
    }

    /// Beats every [`BEAT`] for as long as it runs; on a pause — counted here, or first by a
    /// reconcile's look at the gate — asks for a tick at once (`nudge`, the Coordinator's), so
    /// the gate reopens as soon as the renewal proves the Leases are still this replica's, and
    /// counts it in `pauses`.
    pub async fn run(
        self: std::sync::Arc<Self>,
        nudge: std::sync::Arc<tokio::sync::Notify>,
        pauses: prometheus_client::metrics::counter::Counter,
    ) {
        let mut tick = tokio::time::interval(BEAT);
        // After a pause, one tick, not a burst of the missed ones.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut seen = 0;
        loop {
            tick.tick().await;
            let now = self.count();
            if now > seen {
                pauses.inc_by(now - seen);
                seen = now;
                nudge.notify_one();
            }
        }
    }

    /// As if the last beat was `ago` ago (unit tests).
    #[cfg(test)]
    pub fn last_beat_ago(&self, ago: Duration) {
        self.clock.last_look_ago(ago);
    }

    /// Pauses whose clock has run a minute, so a gap can be set back from now (unit tests).
    #[cfg(test)]
    pub fn for_tests() -> Self {
        Pauses { clock: ClockJumps::aged(Duration::from_secs(60)), ..Pauses::started() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_heartbeat_counts_and_nudges_a_pause_another_look_saw_first() {
        let p = std::sync::Arc::new(Pauses::for_tests());
        let nudge = std::sync::Arc::new(tokio::sync::Notify::new());
        let counter = prometheus_client::metrics::counter::Counter::<u64>::default();
        tokio::spawn(p.clone().run(nudge.clone(), counter.clone()));
        tokio::time::sleep(BEAT * 2).await;
        assert_eq!(counter.get(), 0);
        // A reconcile's look at the gate counts the pause before the heartbeat runs.
        p.last_beat_ago(PAUSE * 2);
        assert_eq!(p.count(), 1);
        tokio::time::timeout(BEAT * 4, nudge.notified()).await.expect("a tick asked for");
        assert_eq!(counter.get(), 1);
    }

    #[test]
    fn without_a_heartbeat_nothing_is_a_pause() {
        let p = Pauses { enabled: false, ..Pauses::for_tests() };
        p.last_beat_ago(PAUSE * 3);
        assert!(!p.stale());
        assert_eq!(p.count(), 0);
    }

    #[test]
    fn a_pause_is_counted_once_and_stale_until_a_tick_begun_after_it_renews() {
        let p = Pauses::for_tests();
        p.last_beat_ago(PAUSE / 2);
        assert!(!p.stale(), "a gap shorter than PAUSE is not a pause");
        // A tick begins before the pause (it read count 0), the pause comes, the tick renews.
        let before = p.count();
        p.last_beat_ago(PAUSE * 3);
        assert!(p.stale());
        assert_eq!(p.count(), before + 1, "one gap, one pause, however many look");
        p.renewed(before);
        assert!(p.stale(), "a renewal begun before the pause proves nothing after it");
        let after = p.count();
        p.renewed(after);
        assert!(!p.stale());
        // Renewals only move forward: a late report of an old tick does not reopen a pause.
        p.renewed(before);
        assert!(!p.stale());
        p.last_beat_ago(PAUSE * 2);
        assert!(p.stale(), "a second pause");
        assert_eq!(p.count(), after + 1);
    }
}
