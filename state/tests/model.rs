//! A model check of the handover protocol (docs/operations.md, "How a target is wired and
//! moved"), exhaustive over every interleaving of the steps below, with the real decision
//! function: the operator's step is `dco_state::handover::step` itself, fed the facts the
//! operator would gather from the modelled world. `cargo test -p dco-state --test model -- --nocapture` prints the states
//! explored.
//!
//! The world: two servers `a` and `b`, each with two webhook replicas; one target, at first
//! served by strategy `None`; two apiservers, each with its own, independently lagging view
//! of the target's `spec.conversion`. The steps, in any order:
//! - the resolver reassigns the target to the other server (at most `REASSIGNS` times);
//! - an apiserver catches up with the stored `spec.conversion`;
//! - a replica compiles the plan (when its server is assigned, the target names it, or the
//!   persisted move is away from it and may still route to it);
//!   starts draining it when neither holds (its Lease stops listing the target then) or
//!   cancels the drain when one holds again; drops it once the drain is over (no apiserver
//!   names its server any more — the drain period's promise, which the two-apiserver test
//!   measures — and its Lease without the target is published); becomes ready (its first
//!   pass done and its own Lease published); publishes its served-target Lease; crashes
//!   (plan and readiness gone, its
//!   Lease left behind, at most `CRASHES` in all), restarts, or has its crashed Lease expire;
//! - the operator steps the machine from the persisted status and carries out its wiring,
//!   then writes the status in a second write — and may crash between the two (once).
//!
//! Checked: **safe** — every ready replica of the server that any apiserver's view names
//! holds a plan for the target, in every reachable state (no request is routed to a replica
//! that cannot convert); **settles** — every path ends settled on the assigned server, with
//! both apiservers' views and the stored wiring naming it; **one write per move** — the stored
//! `spec.conversion` changes at most once per attempt.

use std::collections::BTreeMap;

use dco_api::{HandoverState, HandoverStatus};
use dco_state::handover::{Action as Do, Facts, Replicas, step};
use stateright::{Checker, Model, Property};

const SERVERS: [&str; 2] = ["a", "b"];
const REPLICAS: usize = 2;
const APISERVERS: usize = 2;
const REASSIGNS: u8 = 2;
const CRASHES: u8 = 1;
const OPERATOR_CRASHES: u8 = 1;

type Srv = u8;

#[derive(Clone, Copy, Debug, Default, Hash, PartialEq, Eq)]
struct Replica {
    up: bool,
    ready: bool,
    holds: bool,
    /// Holding a plan it no longer should (not assigned, not named): the drain period, during
    /// which it still answers but its Lease no longer lists the target.
    draining: bool,
    /// What its served-target Lease says, while the Lease is live: holds the target or not.
    lease: Option<bool>,
    /// This process has published its Lease (a restart clears it; the Lease stays).
    published: bool,
}

impl Replica {
    /// What its Lease lists (webhook/src/registry.rs `reported_targets`): a plan, not draining.
    fn reported(&self) -> bool {
        self.holds && !self.draining
    }
}

/// The persisted handover status, as far as the machine reads it.
#[derive(Clone, Debug, Default, Hash, PartialEq, Eq)]
struct Persisted {
    state: HandoverState,
    source: Option<Srv>,
    destination: Option<Srv>,
    unverified: bool,
    attempt: u32,
}

impl Persisted {
    fn to_status(&self) -> HandoverStatus {
        HandoverStatus {
            state: self.state,
            source: self.source.map(|s| SERVERS[s as usize].to_string()),
            destination: self.destination.map(|s| SERVERS[s as usize].to_string()),
            unverified: self.unverified,
            attempt: self.attempt,
            since: Some(NOW.into()),
            ..HandoverStatus::default()
        }
    }

    fn of(s: &HandoverStatus) -> Self {
        let srv = |n: &Option<String>| {
            n.as_deref().and_then(|n| SERVERS.iter().position(|s| *s == n)).map(|i| i as Srv)
        };
        Persisted {
            state: s.state,
            source: srv(&s.source),
            destination: srv(&s.destination),
            unverified: s.unverified,
            attempt: s.attempt,
        }
    }
}

const NOW: &str = "2026-12-01T00:00:00Z";

#[derive(Clone, Debug, Hash, PartialEq, Eq)]
struct World {
    assigned: Srv,
    reassigns: u8,
    /// The stored `spec.conversion`: the server it names (`None`: strategy None).
    wired: Option<Srv>,
    views: [Option<Srv>; APISERVERS],
    replicas: [[Replica; REPLICAS]; 2],
    crashes: u8,
    status: Persisted,
    /// The operator patched the target (or needed not) and has yet to write this status.
    pending: Option<Persisted>,
    operator_crashes: u8,
    /// Changes of the stored `spec.conversion`, by attempt.
    writes: BTreeMap<u32, u8>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Act {
    Reassign,
    Sync(usize),
    Compile(usize, usize),
    StartDrain(usize, usize),
    CancelDrain(usize, usize),
    Drop(usize, usize),
    Ready(usize, usize),
    Publish(usize, usize),
    Crash(usize, usize),
    Restart(usize, usize),
    Expire(usize, usize),
    Operate,
    WriteStatus,
    OperatorCrash,
}

struct Protocol;

impl World {
    fn named(&self, x: usize) -> bool {
        self.wired == Some(x as Srv)
    }

    fn in_a_view(&self, x: usize) -> bool {
        self.views.contains(&Some(x as Srv))
    }

    /// The hold rule (webhook/src/hold.rs): assigned, named by the stored wiring, or the
    /// persisted move is away from `x` and may still route to it (`sync::MovedFrom::holds`:
    /// from DestinationReady until a drain period after the switch, which here is until every
    /// apiserver's view has caught up).
    fn should_hold(&self, x: usize) -> bool {
        self.ours(x) || self.moving_away(x)
    }

    /// Assigned or named: held and reported.
    fn ours(&self, x: usize) -> bool {
        self.assigned as usize == x || self.named(x)
    }

    /// Moving away from `x` and maybe still routed there: built by a replica without it and
    /// served as draining (not reported); never dropped meanwhile.
    fn moving_away(&self, x: usize) -> bool {
        self.status.source == Some(x as Srv)
            && match self.status.state {
                HandoverState::DestinationReady => true,
                HandoverState::Patched | HandoverState::SourceDropped => self.in_a_view(x),
                HandoverState::Unassigned | HandoverState::Compiling => false,
            }
    }

    /// What the operator observes of server `x`.
    fn observed(&self, x: usize) -> Replicas {
        let rs = &self.replicas[x];
        let live: Vec<bool> = rs.iter().filter_map(|r| r.lease).collect();
        Replicas {
            ready: rs.iter().filter(|r| r.ready).count() as i32,
            replicas: rs.len() as i32,
            live: live.len() as i32,
            by_all: !live.is_empty() && live.iter().all(|h| *h),
            by_any: live.iter().any(|h| *h),
            cannot_tell: None,
        }
    }

    fn facts(&self) -> Facts {
        let dest = self.assigned as usize;
        let ready = self.observed(dest).ready > 0;
        Facts {
            now: NOW.into(),
            destination: Ok(SERVERS[dest].to_string()),
            compiled: Ok(()),
            target_ready: Ok(()),
            destination_ready: if ready { Ok(()) } else { Err("no ready replica".into()) },
            wired_to: self.wired.map(|s| SERVERS[s as usize].to_string()),
            wiring_current: true,
            servers: (0..2).map(|x| (SERVERS[x].to_string(), self.observed(x))).collect(),
            new_traceparent: "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into(),
            conflict: Ok(()),
            wired_gone: None,
            propagated: Ok(()),
        }
    }

    /// The operator's step: the machine's next status, and the stored wiring after its actions.
    fn operate(&self) -> (Persisted, Option<Srv>) {
        let s = step(&self.status.to_status(), &self.facts());
        let mut wired = self.wired;
        for a in &s.actions {
            if let Do::WireTo(to) = a {
                wired = SERVERS.iter().position(|s| s == to).map(|i| i as Srv);
            }
        }
        (Persisted::of(&s.next), wired)
    }

    fn settled(&self) -> bool {
        let a = Some(self.assigned);
        self.pending.is_none()
            && self.status.state == HandoverState::SourceDropped
            && self.status.destination == a
            && self.wired == a
            && self.views.iter().all(|v| *v == a)
    }
}

impl Model for Protocol {
    type State = World;
    type Action = Act;

    fn init_states(&self) -> Vec<World> {
        let r = Replica {
            up: true,
            ready: true,
            holds: false,
            draining: false,
            lease: Some(false),
            published: true,
        };
        vec![World {
            assigned: 0,
            reassigns: 0,
            wired: None,
            views: [None; APISERVERS],
            replicas: [[r; REPLICAS]; 2],
            crashes: 0,
            status: Persisted::default(),
            pending: None,
            operator_crashes: 0,
            writes: BTreeMap::new(),
        }]
    }

    fn actions(&self, w: &World, out: &mut Vec<Act>) {
        if w.reassigns < REASSIGNS {
            out.push(Act::Reassign);
        }
        for i in 0..APISERVERS {
            if w.views[i] != w.wired {
                out.push(Act::Sync(i));
            }
        }
        for x in 0..2 {
            for r in 0..REPLICAS {
                let rep = w.replicas[x][r];
                if rep.up && !rep.holds && w.should_hold(x) {
                    out.push(Act::Compile(x, r));
                }
                if rep.holds && !rep.draining && !w.ours(x) {
                    out.push(Act::StartDrain(x, r));
                }
                if rep.draining && w.ours(x) {
                    out.push(Act::CancelDrain(x, r));
                }
                // The drain is over: still neither assigned nor named (webhook/src/hold.rs),
                // every apiserver has switched away (what the drain period is for), and its
                // Lease, which stopped listing the target when the drain began, is published.
                if rep.draining && !w.should_hold(x) && !w.in_a_view(x) && rep.lease != Some(true) {
                    out.push(Act::Drop(x, r));
                }
                // Ready once its first pass holds what it should and this process has
                // published its Lease (webhook/src/health.rs): a Lease left by the crashed
                // process must not vouch for it.
                if rep.up
                    && !rep.ready
                    && (rep.holds || !w.should_hold(x))
                    && rep.published
                    && rep.lease == Some(rep.reported())
                {
                    out.push(Act::Ready(x, r));
                }
                if rep.up && (rep.lease != Some(rep.reported()) || !rep.published) {
                    out.push(Act::Publish(x, r));
                }
                if rep.up && w.crashes < CRASHES {
                    out.push(Act::Crash(x, r));
                }
                if !rep.up {
                    out.push(Act::Restart(x, r));
                    if rep.lease.is_some() {
                        out.push(Act::Expire(x, r));
                    }
                }
            }
        }
        match &w.pending {
            None => {
                let (next, wired) = w.operate();
                if next != w.status || wired != w.wired {
                    out.push(Act::Operate);
                }
            }
            Some(_) => {
                out.push(Act::WriteStatus);
                if w.operator_crashes < OPERATOR_CRASHES {
                    out.push(Act::OperatorCrash);
                }
            }
        }
    }

    fn next_state(&self, w: &World, a: Act) -> Option<World> {
        let mut n = w.clone();
        match a {
            Act::Reassign => {
                n.assigned = 1 - n.assigned;
                n.reassigns += 1;
            }
            Act::Sync(i) => n.views[i] = n.wired,
            Act::Compile(x, r) => {
                let ours = n.ours(x);
                let rep = &mut n.replicas[x][r];
                (rep.holds, rep.draining) = (true, !ours);
            }
            Act::StartDrain(x, r) => n.replicas[x][r].draining = true,
            Act::CancelDrain(x, r) => n.replicas[x][r].draining = false,
            Act::Drop(x, r) => (n.replicas[x][r].holds, n.replicas[x][r].draining) = (false, false),
            Act::Ready(x, r) => n.replicas[x][r].ready = true,
            Act::Publish(x, r) => {
                let rep = &mut n.replicas[x][r];
                (rep.lease, rep.published) = (Some(rep.reported()), true);
            }
            Act::Crash(x, r) => {
                let rep = &mut n.replicas[x][r];
                (rep.up, rep.ready, rep.holds, rep.draining, rep.published) =
                    (false, false, false, false, false);
                n.crashes += 1;
            }
            Act::Restart(x, r) => n.replicas[x][r].up = true,
            Act::Expire(x, r) => n.replicas[x][r].lease = None,
            Act::Operate => {
                let (next, wired) = w.operate();
                if wired != n.wired {
                    *n.writes.entry(next.attempt).or_default() += 1;
                    n.wired = wired;
                }
                n.pending = Some(next);
            }
            Act::WriteStatus => n.status = n.pending.take()?,
            Act::OperatorCrash => {
                n.pending = None;
                n.operator_crashes += 1;
            }
        }
        Some(n)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("safe: every ready replica of a named server holds the plan", |_, w: &World| {
                w.status.unverified
                    || w.views
                        .iter()
                        .flatten()
                        .all(|x| w.replicas[*x as usize].iter().all(|r| !r.ready || r.holds))
            }),
            Property::always("one write of spec.conversion per move", |_, w: &World| {
                w.writes.values().all(|n| *n <= 1)
            }),
            Property::eventually("settles on the assigned server", |_, w: &World| w.settled()),
        ]
    }
}

#[test]
fn the_handover_protocol_is_safe_and_settles_in_every_interleaving() {
    let checker = Protocol.checker().threads(2).spawn_bfs().join();
    eprintln!(
        "handover model: {} states explored, {} unique, max depth {}",
        checker.state_count(),
        checker.unique_state_count(),
        checker.max_depth()
    );
    checker.assert_properties();
}
