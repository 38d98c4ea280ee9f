//! Which targets this replica's server may serve, and so which it reads whole (`targets.rs`,
//! `docs/webhook.md`, "Targets read whole"). Everything the hold rule (`hold.rs`) can hold
//! must be in the share, read before the sync pass asks: a target is in it while its config
//!
//! * resolves to this server now (the resolver, `dco_api::assign`, as the operator runs it:
//!   pin, pool, default), so the destination of a move reads the target from the same event
//!   that makes it the destination, before the operator can ask its Leases to prove it;
//! * has a status that involves this server (`dco_api::placement`, the operator's own test):
//!   assigned or moving here, or moving away from here — the source's replicas keep serving
//!   the target while it still names their Service, and a replica that restarted meanwhile
//!   must be able to build the plan;
//! * moved away from here recently enough that apiservers may still call us
//!   ([`MovedFrom::holds`], the hold rule's `MovingAway`);
//! * has not been placed by the operator yet (no status): its target may be wired to any
//!   server (a config created again over a wired target, a restore from a backup).
//!
//! And any target the registry holds (a plan kept after its config was deleted) stays read
//! too (`caches.rs`). The hold rule's clause "the live target still names our Service" needs
//! the target whole, which is what this avoids reading; the operator records that Service's
//! server as the move's source before it changes anything, so the clause is covered by the
//! status from the first reconcile on.
//!
//! Pure: the config's facts in, a reason (or none) out.

use std::time::{Duration, SystemTime};

use dco_api::assign::Servers;
use dco_api::placement::Placement;

use crate::sync::MovedFrom;

/// Why a target is in this server's share.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Why {
    /// The resolver assigns it here now.
    Assigned,
    /// The config's status assigns it here or moves it to or from here.
    Involved,
    /// It moved away from here within a drain period.
    MovingAway,
    /// No status yet: it may be wired anywhere.
    Unplaced,
}

/// What the share needs of one config.
#[derive(Clone, Copy, Debug)]
pub struct Candidate<'a> {
    pub target: &'a str,
    /// `spec.webhookServerRef.name`.
    pub pin: Option<&'a str>,
    pub placement: &'a Placement,
    pub moved_from: Option<&'a MovedFrom>,
}

/// One server's share, over one snapshot of the servers.
#[derive(Clone, Copy, Debug)]
pub struct Share<'a> {
    pub instance: &'a str,
    pub servers: &'a Servers,
    /// `--drain-period`.
    pub drain: Duration,
}

impl Share<'_> {
    /// Why `c`'s target is in the share at `now`, or `None` when it is not.
    pub fn why(&self, c: &Candidate<'_>, now: SystemTime) -> Option<Why> {
        if self.servers.resolve(c.target, c.pin).is_ok_and(|a| a.server == self.instance) {
            Some(Why::Assigned)
        } else if c.placement.involves(c.pin, self.instance) {
            Some(Why::Involved)
        } else if c.moved_from.is_some_and(|m| m.holds(self.instance, self.drain, now)) {
            Some(Why::MovingAway)
        } else if c.placement.unplaced() {
            Some(Why::Unplaced)
        } else {
            None
        }
    }

    /// When `c`'s target leaves the share by time alone (the end of a `MovingAway` window),
    /// so the reader decides again then rather than at the next event.
    pub fn expires(&self, c: &Candidate<'_>, now: SystemTime) -> Option<SystemTime> {
        if self.why(c, now) != Some(Why::MovingAway) {
            return None;
        }
        c.moved_from.and_then(|m| m.since).map(|since| since + self.drain)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dco_api::HandoverState as S;
    use dco_api::assign::ServerInfo;
    use proptest::prelude::*;

    const DRAIN: Duration = Duration::from_secs(30);

    fn pool(names: &[&str]) -> Servers {
        Servers::new(names.iter().map(|n| ServerInfo {
            name: n.to_string(),
            default: false,
            pool_weight: Some(1),
        }))
    }

    fn placed(assigned: &str, source: Option<&str>, settled: bool) -> Placement {
        Placement {
            assigned: Some(assigned.into()),
            source: source.map(str::to_string),
            destination: Some(assigned.into()),
            settled,
        }
    }

    fn share<'a>(instance: &'a str, servers: &'a Servers) -> Share<'a> {
        Share { instance, servers, drain: DRAIN }
    }

    fn candidate<'a>(target: &'a str, pin: Option<&'a str>, placement: &'a Placement) -> Candidate<'a> {
        Candidate { target, pin, placement, moved_from: None }
    }

    #[test]
    fn a_pin_puts_the_target_in_the_pinned_share_before_the_operator_acts() {
        // Settled on a; pinned to b: b reads it from the pin's event on, a still has it
        // (the status still assigns it there) until the operator moves it.
        let servers = pool(&["a", "b", "c"]);
        let p = placed("a", Some("a"), true);
        let c = candidate("t.example.org", Some("b"), &p);
        let now = SystemTime::now();
        assert_eq!(share("b", &servers).why(&c, now), Some(Why::Assigned));
        assert_eq!(share("a", &servers).why(&c, now), Some(Why::Involved));
        assert_eq!(share("c", &servers).why(&c, now), None);
    }

    #[test]
    fn a_move_keeps_the_source_until_it_settles_then_for_a_drain_period() {
        let servers = pool(&["b"]);
        let now = SystemTime::now();
        let moving = placed("b", Some("a"), false);
        let c = candidate("t.example.org", None, &moving);
        assert_eq!(share("a", &servers).why(&c, now), Some(Why::Involved));

        let settled = placed("b", Some("a"), true);
        let mf = |ago: u64| MovedFrom {
            server: "a".into(),
            state: S::SourceDropped,
            since: Some(now - Duration::from_secs(ago)),
            move_id: None,
        };
        let recent = mf(10);
        let c = Candidate { moved_from: Some(&recent), ..candidate("t.example.org", None, &settled) };
        assert_eq!(share("a", &servers).why(&c, now), Some(Why::MovingAway));
        assert_eq!(share("a", &servers).expires(&c, now), Some(now + Duration::from_secs(20)));
        assert_eq!(share("b", &servers).expires(&c, now), None, "the destination's is not timed");
        let old = mf(31);
        let c = Candidate { moved_from: Some(&old), ..c };
        assert_eq!(share("a", &servers).why(&c, now), None, "every apiserver has switched by then");
    }

    #[test]
    fn an_unplaced_config_is_in_every_share_and_an_unresolvable_one_in_none_once_placed() {
        let servers = pool(&[]);
        let none = Placement::default();
        let c = candidate("t.example.org", None, &none);
        let now = SystemTime::now();
        for s in ["a", "b"] {
            assert_eq!(share(s, &servers).why(&c, now), Some(Why::Unplaced));
        }
        let p = placed("gone", None, true);
        assert_eq!(share("a", &servers).why(&candidate("t.example.org", None, &p), now), None);
    }

    fn arb_target() -> impl Strategy<Value = String> {
        "[a-z]{1,12}\\.example[0-9]{0,2}\\.org"
    }

    proptest! {
        /// A settled config, placed where the resolver puts it, is in exactly one share:
        /// the replicas of all servers together read each target once.
        #[test]
        fn a_settled_target_is_in_exactly_one_share(
            target in arb_target(),
            members in 1usize..8,
            pinned in proptest::option::of(0usize..8),
        ) {
            let names: Vec<String> = (0..members).map(|i| format!("s{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let servers = pool(&refs);
            let pin = pinned.map(|i| refs[i % members]);
            let at = servers.resolve(&target, pin).unwrap().server;
            let p = placed(&at, Some("old"), true);
            let c = candidate(&target, pin, &p);
            let now = SystemTime::now();
            let holders: Vec<&str> =
                refs.iter().copied().filter(|s| share(s, &servers).why(&c, now).is_some()).collect();
            prop_assert_eq!(holders, vec![at.as_str()]);
        }

        /// Wherever the resolver or the status puts a target (the operator's proof of a move
        /// asks the destination, its wiring names the source), that server reads it.
        #[test]
        fn every_server_a_move_involves_reads_the_target(
            target in arb_target(),
            members in 1usize..6,
            assigned in 0usize..6,
            source in 0usize..6,
            destination in 0usize..6,
            settled in any::<bool>(),
            pinned in proptest::option::of(0usize..6),
        ) {
            let names: Vec<String> = (0..members).map(|i| format!("s{i}")).collect();
            let refs: Vec<&str> = names.iter().map(String::as_str).collect();
            let servers = pool(&refs);
            let name = |i: usize| refs[i % members].to_string();
            let p = Placement {
                assigned: Some(name(assigned)),
                source: Some(name(source)),
                destination: Some(name(destination)),
                settled,
            };
            let pin = pinned.map(|i| refs[i % members]);
            let c = candidate(&target, pin, &p);
            let now = SystemTime::now();
            let reads = |s: &str| share(s, &servers).why(&c, now).is_some();
            prop_assert!(reads(&servers.resolve(&target, pin).unwrap().server));
            prop_assert!(reads(&name(assigned)) && reads(&name(destination)));
            if !settled {
                prop_assert!(reads(&name(source)));
            }
            for s in &refs {
                let involved = [Some(name(assigned)), Some(name(destination)), (!settled).then(|| name(source))]
                    .contains(&Some(s.to_string()));
                let resolved = servers.resolve(&target, pin).unwrap().server == *s;
                prop_assert_eq!(reads(s), involved || resolved, "server {}", s);
            }
        }
    }
}
