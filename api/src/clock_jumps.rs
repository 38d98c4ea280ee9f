//! How a process tells it did not run for a while — SIGSTOP, a frozen VM or container, a
//! starved CPU: a heartbeat every [`BEAT`] whose clock jumped by more than [`PAUSE`]. Each
//! jump is counted once, however many look at it (the heartbeat and the code that needs to
//! know first). dco-operator closes its shard gate on a jump (docs/sharding.md, "After a
//! pause") and dco-webhook re-reads the cluster before answering (docs/webhook.md, "After a
//! pause").

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// A clock jump longer than this is a pause. The kubelet marks a webhook replica unready only
/// after three failed readiness probes 2 s apart with a 2 s timeout, at least 6 s of silence,
/// so a shorter pause cannot have let the operator wire a target without it; 4 s stays clear
/// of that and of the scheduling delays of a busy node.
pub const PAUSE: Duration = Duration::from_secs(4);
/// How often a heartbeat looks at the clock.
pub const BEAT: Duration = Duration::from_millis(250);

/// What one look at the clock found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Look {
    /// The time since the last look.
    pub gap: Duration,
    /// The gap is a pause (counted by this look or by a concurrent one).
    pub paused: bool,
    /// This look counted it.
    pub counted: bool,
}

/// The pauses seen so far.
#[derive(Debug)]
pub struct ClockJumps {
    epoch: Instant,
    /// Milliseconds since `epoch` at the last look.
    last_ms: AtomicU64,
    /// The `last_ms` whose gap was last counted: a gap is counted once.
    counted_at: AtomicU64,
    paused: AtomicU64,
}

impl Default for ClockJumps {
    fn default() -> Self {
        Self::new()
    }
}

impl ClockJumps {
    pub fn new() -> Self {
        ClockJumps {
            epoch: Instant::now(),
            last_ms: AtomicU64::new(0),
            counted_at: AtomicU64::new(u64::MAX),
            paused: AtomicU64::new(0),
        }
    }

    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// One look: counts a pause since the last look, then moves the clock on.
    pub fn look(&self) -> Look {
        let now = self.now_ms();
        let last = self.last_ms.load(Ordering::SeqCst);
        let gap = now.saturating_sub(last);
        let paused = gap > PAUSE.as_millis() as u64;
        let counted = paused && self.counted_at.swap(last, Ordering::SeqCst) != last;
        if counted {
            self.paused.fetch_add(1, Ordering::SeqCst);
        }
        self.last_ms.fetch_max(now, Ordering::SeqCst);
        Look { gap: Duration::from_millis(gap), paused, counted }
    }

    /// Moves the clock on without counting: while nobody needs to know, a gap is no pause.
    pub fn skip(&self) {
        self.last_ms.fetch_max(self.now_ms(), Ordering::SeqCst);
    }

    /// Pauses counted so far (without a look).
    pub fn count(&self) -> u64 {
        self.paused.load(Ordering::SeqCst)
    }

    /// A clock that has run `age` already, so a last look can be set back by up to `age`
    /// ([`ClockJumps::last_look_ago`]; tests).
    pub fn aged(age: Duration) -> Self {
        let epoch = Instant::now().checked_sub(age).expect("the machine has run that long");
        let c = ClockJumps { epoch, ..ClockJumps::new() };
        c.skip();
        c
    }

    /// As if the last look was `ago` ago (tests).
    pub fn last_look_ago(&self, ago: Duration) {
        let now = self.now_ms();
        self.last_ms.store(now.saturating_sub(ago.as_millis() as u64), Ordering::SeqCst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gap_over_pause_is_counted_once_however_many_look() {
        let c = ClockJumps::aged(Duration::from_secs(60));
        c.last_look_ago(PAUSE / 2);
        let l = c.look();
        assert!(!l.paused && !l.counted, "a gap shorter than PAUSE is not a pause: {l:?}");
        c.last_look_ago(PAUSE * 2);
        let first = c.look();
        assert!(first.paused && first.counted && first.gap >= PAUSE * 2, "{first:?}");
        assert_eq!(c.count(), 1);
        let again = c.look();
        assert!(!again.paused, "the next look finds the clock moved on: {again:?}");
        assert_eq!(c.count(), 1);
        c.last_look_ago(PAUSE * 3);
        c.skip();
        assert!(!c.look().paused, "a skipped gap is no pause");
        c.last_look_ago(PAUSE * 3);
        assert!(c.look().counted, "a second pause");
        assert_eq!(c.count(), 2);
    }
}
