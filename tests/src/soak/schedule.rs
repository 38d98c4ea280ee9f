//! The soak's random schedule of faults and changes (docs/performance.md, "Soak"): a plan drawn
//! from the seed alone, so the same seed replays the same sequence of kinds, gaps and picks. A
//! pick chooses among what exists when the event runs (the Pods then alive, a config's pin
//! then), sorted by name, so a replay makes the same choices as long as the cluster does.

use std::time::Duration;

/// splitmix64: a small, well-mixed generator with a 64-bit state; no dependency for a test.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `lo..=hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.next_u64() % (hi - lo + 1)
    }
}

/// What an event does. `Pin` toggles the pin of the picked config (pin when unpinned, unpin
/// when pinned); `Pool` adds the pool member when absent and removes it when present.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Pin,
    Pool,
    WebhookKill,
    WebhookStop,
    OperatorKill,
    OperatorStop,
    CertRotate,
    HelmUpgrade,
}

impl Kind {
    pub const ALL: [Kind; 8] = [
        Kind::Pin,
        Kind::Pool,
        Kind::WebhookKill,
        Kind::WebhookStop,
        Kind::OperatorKill,
        Kind::OperatorStop,
        Kind::CertRotate,
        Kind::HelmUpgrade,
    ];

    /// Relative frequency: moves most often, a rolling upgrade (a minute of the run) seldom.
    fn weight(self) -> u64 {
        match self {
            Kind::Pin => 5,
            Kind::Pool => 2,
            Kind::WebhookKill | Kind::WebhookStop | Kind::OperatorKill | Kind::OperatorStop => 2,
            Kind::CertRotate => 2,
            Kind::HelmUpgrade => 1,
        }
    }
}

/// One planned event: wait `gap` after the previous one ended, then do `kind` with `pick`.
#[derive(Clone, Debug)]
pub struct Planned {
    pub gap: Duration,
    pub kind: Kind,
    /// Chooses the object (config, Pod, Secret) and any duration (a SIGSTOP's) when it runs.
    pub pick: u64,
}

/// At most this many events are planned: more than any run executes (gaps of at least 3 s).
const MAX_PLANNED: usize = 20_000;

/// The plan of `seed`: gaps of 3–9 s, kinds by weight, enough events to outlast `duration`.
pub fn plan(seed: u64, duration: Duration) -> Vec<Planned> {
    let mut rng = Rng::new(seed);
    let total: u64 = Kind::ALL.iter().map(|k| k.weight()).sum();
    let n = ((duration.as_secs() / 3) as usize + 1).min(MAX_PLANNED);
    (0..n)
        .map(|_| {
            let gap = Duration::from_millis(rng.range(3_000, 9_000));
            let mut w = rng.next_u64() % total;
            let kind = *Kind::ALL
                .iter()
                .find(|k| {
                    if w < k.weight() {
                        return true;
                    }
                    w -= k.weight();
                    false
                })
                .unwrap_or(&Kind::Pin);
            Planned { gap, kind, pick: rng.next_u64() }
        })
        .collect()
}

/// Parses a duration as `90s`, `5m`, `1h` or plain seconds (`--duration`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    let s = s.trim();
    let (num, unit) = match s.char_indices().find(|(_, c)| !c.is_ascii_digit()) {
        Some((i, _)) => s.split_at(i),
        None => (s, "s"),
    };
    let n: u64 = num.parse().ok()?;
    let secs = match unit {
        "s" => n,
        "m" => n.checked_mul(60)?,
        "h" => n.checked_mul(3600)?,
        _ => return None,
    };
    // A day bounds a soak: longer is a typo.
    (secs > 0 && secs <= 86_400).then(|| Duration::from_secs(secs))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_plans_the_same_events_and_another_seed_others() {
        let a = plan(42, Duration::from_secs(300));
        let b = plan(42, Duration::from_secs(300));
        let c = plan(43, Duration::from_secs(300));
        let key = |p: &[Planned]| p.iter().map(|e| (e.gap, e.kind, e.pick)).collect::<Vec<_>>();
        assert_eq!(key(&a), key(&b));
        assert_ne!(key(&a), key(&c));
        assert_eq!(a.len(), 101);
        assert!(a.iter().all(|e| (3_000..=9_000).contains(&(e.gap.as_millis() as u64))));
        // Every kind is drawn in a 5-minute plan of this seed.
        for k in Kind::ALL {
            assert!(a.iter().any(|e| e.kind == k), "{k:?} never planned");
        }
    }

    #[test]
    fn durations_parse_in_seconds_minutes_and_hours_and_are_bounded() {
        assert_eq!(parse_duration("5m"), Some(Duration::from_secs(300)));
        assert_eq!(parse_duration("90s"), Some(Duration::from_secs(90)));
        assert_eq!(parse_duration("1h"), Some(Duration::from_secs(3600)));
        assert_eq!(parse_duration("45"), Some(Duration::from_secs(45)));
        assert_eq!(parse_duration("0s"), None);
        assert_eq!(parse_duration("2d"), None);
        assert_eq!(parse_duration("25h"), None);
    }
}
