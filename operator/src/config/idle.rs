//! Whether a config's reconcile must look at its world again, or may only wait for the next
//! wake (docs/operator.md, "What an idle config costs"): pure, over what the last full look
//! decided on ([`Looked`]) and what the watches and caches show now ([`Inputs`]).
//!
//! A settled config is woken every `--resync` with nothing changed, and a full look reads the
//! config and its target (an XRD's generated CRDs too) and writes its status if it changed:
//! at 1,000 configs, every 5 minutes, the reads alone are 6.7 requests a second of idle
//! cost. Now a wake looks only when an input changed: the config (its resourceVersion), the
//! target or, for an XRD, its generated CRDs (their resourceVersions in the operator's
//! metadata watches, `crate::target_versions`), the configs naming the target (the index of
//! every config, `crate::config_refs`), what the caches say of the servers (the resolver's
//! answer, the destination's wiring and availability), or the slow resync ([`FULL_RESYNC`])
//! that heals what no watch follows. Only a config at rest is remembered (`status::at_rest`:
//! settled, or held back by a missing target or another config chosen over it): a move,
//! which waits on Leases no input here follows, or a blocked destination is looked at whole
//! on its short timer.

use std::collections::{HashMap, HashSet};
use std::fmt::Debug;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

pub use crate::server::idle::jittered;

/// How often a settled config is looked at whole with no change seen. Jittered by ±10 %
/// ([`jittered`]) so configs spread out.
pub const FULL_RESYNC: Duration = Duration::from_secs(600);

/// What one look decided on, as values the watches and caches show later. `None`: absent.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Inputs {
    /// The config's resourceVersion: as its status write left it, or as read when the status
    /// did not change.
    pub config: Option<String>,
    /// The target's resourceVersion as the look read it (or as its own write left it).
    pub target: Option<String>,
    /// XRD targets: the generated CRDs' resourceVersions, by name, as read.
    pub generated: Vec<(String, Option<String>)>,
    /// [`fingerprint`] of the configs naming the target (kind and name), from the index.
    pub naming: u64,
    /// [`fingerprint`] of what the caches say of the servers the config depends on.
    pub servers: u64,
}

/// A config's last full look, when it left the config at rest.
#[derive(Clone, Debug, PartialEq)]
pub struct Looked {
    pub inputs: Inputs,
    /// The requeue the look returned (`--resync`).
    pub requeue: Duration,
    /// When the slow resync is due.
    pub resync_due: Instant,
}

/// The last full look of each config at rest, by uid (a config deleted and made again under
/// its name starts afresh); kept in `Context::memos`.
#[derive(Clone, Debug, Default)]
pub struct Memo {
    looks: HashMap<String, Looked>,
    /// The size past which [`Memo::remember`] asks which configs are still held.
    check_at: usize,
}

/// A memo grows to twice what it held at its last check, plus this, before the entries of
/// configs no longer held (deleted, or their shard another replica's; a config regained is
/// looked at again) are dropped: bounded by this replica's share, at an amortized cost.
const SLACK: usize = 64;

impl Memo {
    pub fn get(&self, uid: &str) -> Option<&Looked> {
        self.looks.get(uid)
    }

    /// Remembers config `uid`'s look; `held` (asked only when the memo has grown past its
    /// bound) is the uids of the configs this replica's caches hold now.
    pub fn remember(&mut self, uid: String, looked: Looked, held: impl FnOnce() -> HashSet<String>) {
        self.looks.insert(uid, looked);
        if self.looks.len() > self.check_at.max(SLACK) {
            let held = held();
            self.looks.retain(|uid, _| held.contains(uid));
            self.check_at = 2 * self.looks.len() + SLACK;
        }
    }

    pub fn forget(&mut self, uid: &str) {
        self.looks.remove(uid);
    }
}

/// What a wake does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing changed: no request; wake again after `requeue`.
    Quiet { requeue: Duration },
    /// Look at the config's world whole; `why` goes to the debug log.
    Look { why: &'static str },
}

/// The plan, given the last full look (`None`: none at rest since this replica started or
/// took the config's shard) and the inputs seen now.
pub fn plan(last: Option<&Looked>, seen: &Inputs, now: Instant) -> Plan {
    let Some(last) = last else {
        return Plan::Look { why: "no look at rest yet on this replica" };
    };
    if now >= last.resync_due {
        return Plan::Look { why: "the slow resync is due" };
    }
    let was = &last.inputs;
    let why = if was.config != seen.config {
        "the config changed"
    } else if was.target != seen.target {
        "the target changed or is gone"
    } else if was.generated != seen.generated {
        "a generated CRD changed or is gone"
    } else if was.naming != seen.naming {
        "the configs naming the target changed"
    } else if was.servers != seen.servers {
        "a server the config depends on changed"
    } else {
        let requeue = last.requeue.min(last.resync_due - now).max(Duration::from_millis(1));
        return Plan::Quiet { requeue };
    };
    Plan::Look { why }
}

/// A hash of `parts` as `Debug` writes them: equal parts, equal fingerprints within this
/// process (as long as a memo lives). `Debug`, since the resolver's answer and a wiring are
/// not `Serialize`.
pub fn fingerprint(parts: &[&dyn Debug]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parts {
        format!("{p:?}").hash(&mut h);
    }
    h.finish()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    const RESYNC: Duration = Duration::from_secs(300);

    fn inputs() -> Inputs {
        Inputs {
            config: Some("10".into()),
            target: Some("20".into()),
            generated: vec![("xs.example.org".into(), Some("21".into()))],
            naming: 3,
            servers: 4,
        }
    }

    fn looked(now: Instant) -> Looked {
        Looked { inputs: inputs(), requeue: RESYNC, resync_due: now + FULL_RESYNC }
    }

    #[test]
    fn a_timer_wake_with_nothing_changed_is_quiet_until_the_slow_resync() {
        let now = Instant::now();
        let last = looked(now);
        assert_eq!(plan(Some(&last), &inputs(), now + RESYNC), Plan::Quiet { requeue: RESYNC });
        // The wake before the slow resync waits only until it.
        let late = now + FULL_RESYNC - Duration::from_secs(60);
        assert_eq!(plan(Some(&last), &inputs(), late), Plan::Quiet { requeue: Duration::from_secs(60) });
        assert!(matches!(plan(Some(&last), &inputs(), now + FULL_RESYNC), Plan::Look { .. }));
        assert!(matches!(plan(None, &inputs(), now), Plan::Look { .. }));
    }

    #[test]
    fn the_memo_drops_configs_no_longer_held_once_past_its_bound() {
        let now = Instant::now();
        let mut memo = Memo::default();
        let held: HashSet<String> = (0..10).map(|i| format!("held-{i}")).collect();
        let mut asked = 0;
        for i in 0..10 {
            memo.remember(format!("held-{i}"), looked(now), || unreachable!("within the slack"));
        }
        // Deleted or moved away: kept until the memo passes the slack, then dropped.
        for i in 0..(SLACK - 10) {
            memo.remember(format!("gone-{i}"), looked(now), || unreachable!("within the slack"));
        }
        assert_eq!(memo.looks.len(), SLACK);
        memo.remember("gone-last".into(), looked(now), || {
            asked += 1;
            held.clone()
        });
        assert_eq!(memo.looks.len(), 10, "only the held configs are left");
        assert!(held.iter().all(|uid| memo.get(uid).is_some()));
        // The next check waits for twice what was left plus the slack: amortized.
        for i in 0..(2 * 10 + SLACK - 10) {
            memo.remember(format!("later-{i}"), looked(now), || unreachable!("below the next check"));
        }
        memo.remember("later-last".into(), looked(now), || {
            asked += 1;
            held.clone()
        });
        assert_eq!((memo.looks.len(), asked), (10, 2));
        memo.forget("held-0");
        assert!(memo.get("held-0").is_none());
    }

    #[test]
    fn fingerprints_follow_content() {
        let a: Result<&str, String> = Ok("a");
        assert_eq!(fingerprint(&[&a, &Some(1)]), fingerprint(&[&a, &Some(1)]));
        assert_ne!(fingerprint(&[&a, &Some(1)]), fingerprint(&[&a, &Some(2)]));
        assert_ne!(fingerprint(&[&a]), fingerprint(&[&Err::<&str, String>("a".into())]));
    }

    #[test]
    fn each_input_that_changes_is_looked_at() {
        let now = Instant::now();
        let last = looked(now);
        let changed = [
            Inputs { config: Some("11".into()), ..inputs() },
            Inputs { target: Some("22".into()), ..inputs() },
            Inputs { target: None, ..inputs() },
            Inputs { generated: vec![("xs.example.org".into(), None)], ..inputs() },
            Inputs { naming: 5, ..inputs() },
            Inputs { servers: 6, ..inputs() },
        ];
        for seen in changed {
            assert!(matches!(plan(Some(&last), &seen, now), Plan::Look { .. }), "{seen:?}");
        }
    }

    fn any_inputs() -> impl Strategy<Value = Inputs> {
        let rv = proptest::option::of(prop_oneof![Just("1".to_string()), Just("2".to_string())]);
        let generated = proptest::collection::vec(("[ab]", rv.clone()), 0..2);
        (rv.clone(), rv, generated, 0u64..2, 0u64..2).prop_map(
            |(config, target, generated, naming, servers)| Inputs {
                config,
                target,
                generated,
                naming,
                servers,
            },
        )
    }

    proptest! {
        /// Quiet exactly when a look at rest exists, its slow resync is not due and every
        /// input is as it decided on; a quiet wake comes back no later than the resync.
        #[test]
        fn quiet_only_when_every_input_is_unchanged(
            was in any_inputs(),
            seen in any_inputs(),
            remembered in any::<bool>(),
            elapsed in 0u64..800,
            requeue in 1u64..400,
        ) {
            let start = Instant::now();
            let last = Looked {
                inputs: was.clone(),
                requeue: Duration::from_secs(requeue),
                resync_due: start + FULL_RESYNC,
            };
            let now = start + Duration::from_secs(elapsed);
            let got = plan(remembered.then_some(&last), &seen, now);
            let quiet = remembered && now < last.resync_due && was == seen;
            match got {
                Plan::Quiet { requeue: r } => {
                    prop_assert!(quiet);
                    prop_assert!(r <= last.requeue && now + r <= last.resync_due);
                    prop_assert!(r > Duration::ZERO);
                }
                Plan::Look { .. } => prop_assert!(!quiet),
            }
        }
    }
}
