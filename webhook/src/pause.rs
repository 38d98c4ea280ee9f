//! Catching up after a pause (docs/webhook.md, "After a pause"). A process that did not run for
//! a while — SIGSTOP, a frozen VM or container, a starved CPU — wakes up with caches as old as
//! the pause, and meanwhile the kubelet may have marked its Pod unready and its served-target
//! Lease may have expired, which lets the operator wire a target to its server without it. On
//! waking it becomes Ready again at the next probe, before it has read what changed, so an
//! apiserver's next connection can reach it while it has no plan for a target it is now wired
//! to: the review failed with 503 ("no conversion plan").
//!
//! So a heartbeat marks the replica stale when its clock jumped by more than [`PAUSE`]; the
//! sync loop then re-lists everything (new watches: a list is as fresh as the moment it is
//! answered, unlike the events queued during the pause) and runs a pass, and until that pass is
//! done a review waits for it (at most [`MAX_WAIT`]) instead of being answered from the old
//! view. The check is made where it is needed too, so whichever runs first after the pause —
//! the heartbeat or a review — sees it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use dco_api::clock_jumps::ClockJumps;
pub use dco_api::clock_jumps::{BEAT, PAUSE};
use tokio::sync::{Notify, watch};

/// The longest a review waits for the re-read: it takes a few hundred milliseconds against a
/// healthy apiserver; past this (the apiserver unreachable) the review is answered from what
/// the replica has, as before.
pub const MAX_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug)]
pub struct Freshness {
    /// Only where something re-reads (cluster mode): a static directory has nothing to catch
    /// up with.
    enabled: AtomicBool,
    /// Pauses counted so far; `caught_up` is how many of them the last finished re-read
    /// covers. Stale while the first is ahead.
    clock: ClockJumps,
    caught_up: watch::Sender<u64>,
    /// Wakes the sync loop to re-read.
    wanted: Notify,
}

impl Default for Freshness {
    fn default() -> Self {
        Freshness {
            enabled: AtomicBool::new(false),
            clock: ClockJumps::new(),
            caught_up: watch::Sender::new(0),
            wanted: Notify::new(),
        }
    }
}

impl Freshness {
    /// One heartbeat: counts a pause since the last one, then moves the clock on. Returns
    /// whether it saw a pause (counted here or by a concurrent look).
    pub fn beat(&self) -> bool {
        if !self.enabled.load(Ordering::SeqCst) {
            self.clock.skip();
            return false;
        }
        let look = self.clock.look();
        if look.counted {
            tracing::warn!(
                paused_ms = look.gap.as_millis() as u64,
                "this process did not run for a while (stopped, frozen or starved): re-reading the cluster before answering reviews again"
            );
            self.wanted.notify_one();
        }
        look.paused
    }

    /// Cluster mode: from now on a pause makes the replica stale until the sync loop re-read.
    pub fn enable(&self) {
        self.clock.skip();
        self.enabled.store(true, Ordering::SeqCst);
    }

    /// The count of pauses a re-read must cover, if the replica is stale now.
    pub fn stale(&self) -> Option<u64> {
        let gap = self.beat();
        let caught_up = *self.caught_up.borrow();
        let paused = self.clock.count();
        if paused > caught_up {
            Some(paused)
        } else {
            // A pause another look is counting right now.
            gap.then_some(caught_up + 1)
        }
    }

    /// Resolves when a re-read is wanted (a pause was counted).
    pub async fn wanted(&self) {
        self.wanted.notified().await
    }

    /// The sync loop re-read the cluster and ran a pass, covering the pauses counted by
    /// `upto` ([`Freshness::stale`] before it started): reviews waiting on it go on. A pause
    /// during the re-read is not covered and asks for another.
    pub fn caught_up(&self, upto: u64) {
        self.caught_up.send_if_modified(|c| {
            let moved = upto > *c;
            *c = (*c).max(upto);
            moved
        });
        if self.stale().is_some() {
            self.wanted.notify_one();
        } else {
            tracing::info!("re-read the cluster after the pause; answering reviews again");
        }
    }

    /// Waits until the replica is not stale, at most until `until`. Returns how long it
    /// waited when it had to.
    pub async fn wait_fresh(&self, until: Instant) -> Option<Duration> {
        let need = self.stale()?;
        let start = Instant::now();
        let mut rx = self.caught_up.subscribe();
        let _ = tokio::time::timeout_at(until.into(), rx.wait_for(|c| *c >= need)).await;
        Some(start.elapsed())
    }

    /// Beats every [`BEAT`] for the life of the process.
    pub async fn run(self: std::sync::Arc<Self>) {
        let mut tick = tokio::time::interval(BEAT);
        // After a pause, one tick, not a burst of the missed ones.
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            self.beat();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Freshness whose clock has run a minute, so that a gap can be set back from now.
    fn freshness() -> Freshness {
        Freshness { clock: ClockJumps::aged(Duration::from_secs(60)), ..Freshness::default() }
    }

    fn paused_for(f: &Freshness, d: Duration) {
        // As if the last beat was `d` ago.
        f.clock.last_look_ago(d);
    }

    #[tokio::test]
    async fn a_short_gap_is_not_a_pause_and_static_mode_never_waits() {
        let f = freshness();
        paused_for(&f, PAUSE * 2);
        assert_eq!(f.stale(), None, "not enabled: nothing would re-read");
        f.enable();
        paused_for(&f, PAUSE / 2);
        assert_eq!(f.stale(), None);
        assert_eq!(f.wait_fresh(Instant::now() + Duration::from_secs(1)).await, None);
    }

    #[tokio::test]
    async fn a_pause_makes_reviews_wait_until_the_re_read() {
        let f = std::sync::Arc::new(freshness());
        f.enable();
        paused_for(&f, PAUSE * 2);
        let need = f.stale().expect("stale after a pause");
        // Seen once: the second look neither counts another pause nor loses this one.
        assert_eq!(f.stale(), Some(need));
        let waiter = {
            let f = f.clone();
            tokio::spawn(async move { f.wait_fresh(Instant::now() + Duration::from_secs(10)).await })
        };
        tokio::time::sleep(Duration::from_millis(50)).await;
        assert!(!waiter.is_finished(), "a review went on before the re-read");
        f.caught_up(need);
        let waited = waiter.await.unwrap().expect("it waited");
        assert!(waited >= Duration::from_millis(50) && waited < Duration::from_secs(5), "{waited:?}");
        assert_eq!(f.stale(), None);
    }

    #[tokio::test]
    async fn a_re_read_that_never_comes_holds_a_review_only_until_its_limit() {
        let f = freshness();
        f.enable();
        paused_for(&f, PAUSE * 2);
        let waited = f.wait_fresh(Instant::now() + Duration::from_millis(80)).await.unwrap();
        assert!(waited >= Duration::from_millis(80) && waited < Duration::from_secs(2), "{waited:?}");
        assert!(f.stale().is_some(), "still stale: the re-read has not happened");
    }

    #[tokio::test]
    async fn a_pause_during_the_re_read_asks_for_another() {
        let f = freshness();
        f.enable();
        paused_for(&f, PAUSE * 2);
        let first = f.stale().unwrap();
        // The sync loop starts its re-read covering `first`; the process pauses again.
        paused_for(&f, PAUSE * 3);
        assert_eq!(f.stale(), Some(first + 1));
        f.caught_up(first);
        assert_eq!(f.stale(), Some(first + 1), "the second pause is not covered by the first re-read");
        // The loop was woken again (a permit is stored for it).
        tokio::time::timeout(Duration::from_secs(1), f.wanted()).await.expect("woken for another re-read");
        f.caught_up(first + 1);
        assert_eq!(f.stale(), None);
    }
}
