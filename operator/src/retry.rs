//! How soon a failed reconcile is tried again: 10 s after its first failure, twice as long
//! after each further failure in a row, at most 5 minutes, each delay spread by ±10 %. The
//! first success forgets the failures.
//!
//! A fixed delay turns an overloaded apiserver into a retry storm: at 10,000 configs, every
//! one failing on a timed-out request came back every 10 s, 1,000 reconciles a second,
//! keeping the apiserver down. Growing, spread delays let it recover.

use std::collections::HashMap;
use std::hash::BuildHasher;
use std::time::{Duration, Instant};

/// The delay after one failure.
pub const FIRST: Duration = Duration::from_secs(10);
/// The longest delay, however many failures.
pub const MAX: Duration = Duration::from_secs(300);
/// Objects whose failures are remembered at most; beyond, the oldest memory is dropped whole
/// (each object starts again at [`FIRST`]), so the memory is bounded whatever fails.
const REMEMBERED: usize = 100_000;

/// The delay after `failures` failures in a row (1 for the first), before the spread.
pub fn delay(failures: u32) -> Duration {
    let doublings = failures.saturating_sub(1).min(16);
    FIRST.saturating_mul(1 << doublings).min(MAX)
}

/// `period` ± 10 %, drawn per call.
pub fn jittered(period: Duration) -> Duration {
    let draw = std::collections::hash_map::RandomState::new().hash_one(Instant::now());
    // 0..=200 per-mille steps: a tenth of the period each way.
    let permille = 900 + draw % 201;
    period * u32::try_from(permille).unwrap_or(1000) / 1000
}

/// Failures in a row per object (`kind`, name: dco's kinds are cluster-scoped), kept in
/// `Context::memos`.
#[derive(Clone, Default)]
pub struct Failures(HashMap<(&'static str, String), u32>);

impl Failures {
    /// One more failure of `object`: the delay before its next try, spread.
    pub fn failed(&mut self, kind: &'static str, object: String) -> Duration {
        if self.0.len() >= REMEMBERED {
            self.0.clear();
        }
        let n = self.0.entry((kind, object)).or_insert(0);
        *n = n.saturating_add(1);
        jittered(delay(*n))
    }

    /// `object` reconciled: its next failure is a first one again.
    pub fn succeeded(&mut self, kind: &'static str, object: &str) {
        if !self.0.is_empty() {
            self.0.remove(&(kind, object.to_string()));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn delays_double_from_the_first_up_to_the_cap() {
        let got: Vec<u64> = (1..=7).map(|n| delay(n).as_secs()).collect();
        assert_eq!(got, [10, 20, 40, 80, 160, 300, 300]);
        assert_eq!(delay(u32::MAX), MAX);
        assert_eq!(delay(0), FIRST);
    }

    #[test]
    fn a_success_starts_the_object_again_and_others_keep_theirs() {
        let mut f = Failures::default();
        let within = |d: Duration, base: Duration| d >= base * 9 / 10 && d <= base * 11 / 10;
        assert!(within(f.failed("K", "a".into()), FIRST));
        assert!(within(f.failed("K", "a".into()), FIRST * 2));
        assert!(within(f.failed("K", "b".into()), FIRST), "another object has its own count");
        f.succeeded("K", "a");
        assert!(within(f.failed("K", "a".into()), FIRST));
        assert!(within(f.failed("J", "b".into()), FIRST), "and another kind");
    }

    #[test]
    fn the_memory_is_bounded() {
        let mut f = Failures::default();
        for i in 0..REMEMBERED + 10 {
            f.failed("K", i.to_string());
        }
        assert!(f.0.len() <= REMEMBERED);
    }

    #[test]
    fn the_spread_stays_within_a_tenth_and_varies() {
        let draws: Vec<Duration> = (0..200).map(|_| jittered(Duration::from_secs(100))).collect();
        assert!(draws.iter().all(|d| *d >= Duration::from_secs(90) && *d <= Duration::from_secs(110)));
        assert!(draws.iter().any(|d| *d != draws[0]), "every draw was {:?}", draws[0]);
    }
}
