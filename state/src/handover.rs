//! The handover state machine (`docs/operations.md`, "How a target is wired and moved"):
//! moving a target's `spec.conversion` from the server that serves it now (the source) to
//! the one the resolver chose (the destination) with no moment in which the target is
//! unserved.
//!
//! ```text
//! Unassigned → Compiling → DestinationReady → Patched → SourceDropped
//! ```
//!
//! The target is only re-wired once every live replica of the destination reports holding a
//! compiled plan for it; the source keeps its plan while the target still names it, so the
//! apiserver always reaches a replica that can convert.

use dco_api::HandoverState as S;
use dco_api::HandoverStatus;

use crate::machine::{ConditionUpdate, EventNote, Machine, Step};

/// What a server's served-target Leases say about one target, read as one role needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    /// The role's question is answered yes: for a destination, every live replica reports the
    /// target and all ready replicas report; for a source, some live replica still holds it.
    Serves,
    /// The replicas report, and the target is not (or no longer) where the role asks.
    NotServing,
    /// The server publishes no Leases at all (an older webhook, or Leases forbidden by RBAC).
    NoLeases,
    /// The Leases cannot answer: a truncated or undecodable set, or fewer reporting replicas
    /// than ready ones. Never read as a partial answer.
    CannotTell(String),
}

/// One server's replicas as the operator observed them for one target: its ready replicas
/// (from the Deployment, through the server's status) and its live served-target Leases
/// (read from the cache by `operator/src/leases.rs`). A server missing from
/// [`Facts::servers`] does not exist, so nothing of it serves.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Replicas {
    pub ready: i32,
    /// Every replica Pod the server runs, ready or not (its Deployment's `status.replicas`);
    /// 0 when unknown, read as "as many as are ready".
    pub replicas: i32,
    /// Live served-target Leases.
    pub live: i32,
    /// Every live Lease lists the target (false when none is live).
    pub by_all: bool,
    /// Some live Lease lists the target.
    pub by_any: bool,
    /// Why a live Lease cannot answer (truncated, missing or undecodable set), if one cannot.
    pub cannot_tell: Option<String>,
}

impl Replicas {
    /// Whether a move may wire the target to this server: every replica the apiserver may
    /// call holds a plan for it.
    pub fn as_destination(&self) -> Serving {
        if self.ready <= 0 && self.live <= 0 {
            // Nothing runs, so nothing can serve: the move waits.
            return Serving::NotServing;
        }
        if let Some(why) = &self.cannot_tell {
            return Serving::CannotTell(why.clone());
        }
        if self.live <= 0 {
            // Without Leases, readiness is the only sign a replica holds the plan (a webhook
            // replica turns Ready after its first full pass over the configs): every replica
            // the Service may route to must be Ready first.
            if self.ready < self.replicas {
                return Serving::CannotTell(format!(
                    "it publishes no served-target Leases and only {} of its {} replicas are Ready; without Leases the move waits for every replica to be Ready",
                    self.ready.max(0),
                    self.replicas
                ));
            }
            return Serving::NoLeases;
        }
        if self.live < self.ready {
            return Serving::CannotTell(format!(
                "only {} of {} ready replicas publish a live served-target Lease",
                self.live, self.ready
            ));
        }
        if self.by_all { Serving::Serves } else { Serving::NotServing }
    }

    /// Whether a move's source still holds the target: it has dropped it only when no live
    /// replica holds it (the union, not the intersection: one replica still serving is
    /// serving).
    pub fn as_source(&self) -> Serving {
        if self.by_any {
            return Serving::Serves;
        }
        if let Some(why) = &self.cannot_tell {
            return Serving::CannotTell(format!("{why}, so it may still hold the target"));
        }
        if self.live == 0 && self.ready > 0 {
            return Serving::NoLeases;
        }
        Serving::NotServing
    }
}

/// Everything one step needs, gathered by the operator from its caches and one read of the
/// target (`operator/src/config/facts.rs`).
#[derive(Clone, Debug)]
pub struct Facts {
    /// RFC 3339 time of this reconcile, recorded as `since` on a transition.
    pub now: String,
    /// The resolver's answer, or why there is none.
    pub destination: Result<String, String>,
    /// Whether the config compiles against the live target schema, or why not.
    pub compiled: Result<(), String>,
    /// The target exists and is Established, or why not. Nothing is wired to a target the
    /// apiserver has not accepted.
    pub target_ready: Result<(), String>,
    /// The destination can be wired to now (it has a ready replica and an issued CA), or why
    /// not. A move never points a target at a server that cannot answer.
    pub destination_ready: Result<(), String>,
    /// The server whose Service the target's `spec.conversion` names now, if any.
    pub wired_to: Option<String>,
    /// The target's `spec.conversion` already says exactly what wiring it to the destination
    /// would write (CA bundle, review versions). Only meaningful when it names the destination.
    pub wiring_current: bool,
    /// The replicas of every server the move involves (the destination, the move's source,
    /// the server the target names), by server name.
    pub servers: std::collections::BTreeMap<String, Replicas>,
    /// A fresh W3C traceparent for a move that starts in this step.
    pub new_traceparent: String,
    /// Another config names the same target and is the one chosen (the first by kind and
    /// name, as every webhook replica chooses: webhook/src/sync.rs), or `Ok`. A config that
    /// is not chosen never writes the target: no move, no wiring, no refresh.
    pub conflict: Result<(), String>,
    /// The target's `spec.conversion` names the Service of a server that no longer exists (it
    /// was force-deleted): nothing answers the apiserver's conversions. `None` when it names
    /// an existing server, another webhook, or nothing.
    pub wired_gone: Option<Gone>,
    /// Every object the apiserver reads the target's wiring from carries the wiring the
    /// target names, or what differs. A CRD is its own: always `Ok`. A Crossplane XRD is not:
    /// Crossplane copies its `spec.conversion` into the CRDs it generates (the composite's,
    /// and the claim's), and only those make the apiserver call a webhook, so a move is not
    /// over, and a target not served as its status says, until they name the destination.
    pub propagated: Result<(), String>,
}

/// A wiring whose server is gone: the Service the target names and, when known, its server.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Gone {
    /// `<namespace>/<name>` of the Service.
    pub service: String,
    /// The server that Service was made for, when the config's handover or pin names it.
    pub server: Option<String>,
}

impl Gone {
    /// `Service ns/name (of ConversionWebhookServer s, which no longer exists)`.
    pub fn describe(&self) -> String {
        match &self.server {
            Some(s) => {
                format!("Service {} (of ConversionWebhookServer {s}, which no longer exists)", self.service)
            }
            None => format!("Service {} (of a ConversionWebhookServer that no longer exists)", self.service),
        }
    }

    /// What a person reads in the Event and the conditions.
    pub fn note(&self) -> String {
        format!(
            "the target's spec.conversion names {}: every conversion of the target fails until it is wired to a server that exists",
            self.describe()
        )
    }
}

impl Facts {
    fn replicas(&self, server: &str) -> Replicas {
        self.servers.get(server).cloned().unwrap_or_default()
    }

    /// Whatever keeps a wiring from happening now, in the order a person fixes them.
    fn gate(&self) -> Result<(), (&'static str, String)> {
        self.target_ready.clone().map_err(|why| (reason::AWAITING_TARGET, why))?;
        self.destination_ready.clone().map_err(|why| (reason::AWAITING_DESTINATION, why))
    }
}

/// What the operator must do for the machine to make progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Server-side apply the target's `spec.conversion` to point at this server: the move's
    /// one change of the target's spec.
    WireTo(String),
    /// The target is settled on this server but its `spec.conversion` is out of date (the CA
    /// rotated, or the review versions changed): write it again. Not a move: no transition.
    Refresh(String),
}

pub const CONDITION: &str = "HandoverReady";

pub mod reason {
    pub const NO_SERVER: &str = "NoServer";
    pub const AWAITING_TARGET: &str = "AwaitingTarget";
    pub const COMPILE_FAILED: &str = "CompileFailed";
    pub const AWAITING_DESTINATION: &str = "AwaitingDestination";
    pub const PATCHING: &str = "Patching";
    pub const AWAITING_SOURCE_DROP: &str = "AwaitingSourceDrop";
    pub const READY: &str = "HandoverReady";
    pub const UNVERIFIED: &str = "HandoverUnverified";
    pub const STARTED: &str = "HandoverStarted";
    pub const RESTARTED: &str = "HandoverRestarted";
    pub const DESTINATION_READY: &str = "DestinationReady";
    pub const PATCHED: &str = "Patched";
    pub const SOURCE_DROPPED: &str = "SourceDropped";
    pub const WIRING_DRIFTED: &str = "WiringDrifted";
    pub const CONFLICT: &str = "Conflict";
    pub const WIRED_SERVER_MISSING: &str = "WiredServerMissing";
    pub const AWAITING_PROPAGATION: &str = "AwaitingPropagation";
}

pub struct Handover;

impl Machine for Handover {
    type State = HandoverStatus;
    type Facts = Facts;
    type Action = Action;

    fn step(state: &HandoverStatus, facts: &Facts) -> Step<HandoverStatus, Action> {
        step(state, facts)
    }
}

/// The handover as the machine reasons about it: what exists only in some states lives in
/// their variants — a destination from Compiling on, the proof of the destination's readiness
/// from DestinationReady on. `HandoverStatus` (`status.handover`) is its wire form, which also
/// carries what every state has (`since`, `attempt`, `traceparent`, `message`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Move<'a> {
    /// No move has started.
    Unassigned,
    /// A move waits for every live replica of the destination to report the target.
    Compiling(Route<'a>),
    /// The destination serves (or could not say so: [`Proof::Unverified`]); wiring next.
    DestinationReady(Route<'a>, Proof),
    /// The target names the destination; the source has not let go yet.
    Patched(Route<'a>, Proof),
    /// Settled on the destination.
    SourceDropped(Route<'a>, Proof),
}

/// Where a move goes, and where from (`None`: nothing served the target before).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Route<'a> {
    pub source: Option<&'a str>,
    pub destination: &'a str,
}

/// How the destination's readiness was established.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proof {
    /// Through its served-target Leases (or the target named the destination already).
    Verified,
    /// A server that publishes no Leases: assumed, and said so in `HandoverReady`.
    Unverified,
}

impl<'a> Move<'a> {
    /// Reads the wire form. A moving state without a destination (a status edited by hand)
    /// reads as Unassigned, so a fresh move starts rather than one to nowhere.
    pub fn of(status: &'a HandoverStatus) -> Self {
        let Some(destination) = status.destination.as_deref() else { return Move::Unassigned };
        let route = Route { source: status.source.as_deref(), destination };
        let proof = if status.unverified { Proof::Unverified } else { Proof::Verified };
        match status.state {
            S::Unassigned => Move::Unassigned,
            S::Compiling => Move::Compiling(route),
            S::DestinationReady => Move::DestinationReady(route, proof),
            S::Patched => Move::Patched(route, proof),
            S::SourceDropped => Move::SourceDropped(route, proof),
        }
    }

    /// Writes this state into `status`, keeping its bookkeeping.
    pub fn write(self, status: &mut HandoverStatus) {
        let (state, route, proof) = match self {
            Move::Unassigned => {
                status.state = S::Unassigned;
                return;
            }
            Move::Compiling(r) => (S::Compiling, r, Proof::Verified),
            Move::DestinationReady(r, p) => (S::DestinationReady, r, p),
            Move::Patched(r, p) => (S::Patched, r, p),
            Move::SourceDropped(r, p) => (S::SourceDropped, r, p),
        };
        status.state = state;
        status.source = route.source.map(str::to_string);
        status.destination = Some(route.destination.to_string());
        status.unverified = proof == Proof::Unverified;
    }
}

fn stay(
    state: &HandoverStatus,
    status: bool,
    reason: &'static str,
    message: String,
) -> Step<HandoverStatus, Action> {
    let mut next = state.clone();
    next.message = Some(message.clone());
    Step { next, actions: vec![], condition: ConditionUpdate { status, reason, message }, event: None }
}

fn go(
    state: &HandoverStatus,
    to: Move<'_>,
    facts: &Facts,
    event: &'static str,
    note: String,
    condition: ConditionUpdate,
) -> Step<HandoverStatus, Action> {
    let mut next = state.clone();
    to.write(&mut next);
    next.since = Some(facts.now.clone());
    next.message = Some(note.clone());
    Step { next, actions: vec![], condition, event: Some(EventNote { warning: false, reason: event, note }) }
}

/// A new move from Compiling, with `source` = the server the target names now.
fn start(state: &HandoverStatus, dest: &str, facts: &Facts, restarted: bool) -> Step<HandoverStatus, Action> {
    let mut next = HandoverStatus {
        since: Some(facts.now.clone()),
        attempt: state.attempt.saturating_add(1),
        traceparent: Some(facts.new_traceparent.clone()),
        ..HandoverStatus::default()
    };
    Move::Compiling(Route { source: facts.wired_to.as_deref(), destination: dest }).write(&mut next);
    let from = match (&facts.wired_to, &facts.wired_gone) {
        (Some(s), _) => format!("server {s}"),
        (None, Some(gone)) => gone.describe(),
        (None, None) => "no dco server (strategy None, or another webhook)".to_string(),
    };
    let (reason, note) = if restarted {
        (
            reason::RESTARTED,
            format!(
                "destination changed to {dest} before the target was re-wired; moving from {from} to {dest}"
            ),
        )
    } else if facts.wired_to.as_deref() == Some(dest) {
        (
            reason::STARTED,
            format!("re-wiring the target to server {dest}, which its spec.conversion names already"),
        )
    } else {
        (reason::STARTED, format!("moving the target from {from} to server {dest}"))
    };
    let message = format!("compiling the plan for server {dest}");
    Step {
        next: HandoverStatus { message: Some(note.clone()), ..next },
        actions: vec![],
        condition: ConditionUpdate { status: false, reason: reason::AWAITING_DESTINATION, message },
        event: Some(EventNote { warning: false, reason, note }),
    }
}

/// One transition (or none) from `state` under `facts`.
///
/// Every step toward the destination that would end in a wiring (starting or restarting a
/// move, re-wiring a drifted target, the wiring itself) first passes [`Facts::gate`]: the
/// target is Established and the destination can answer. Waiting on the source, and resting
/// where the target is settled, need neither.
pub fn step(state: &HandoverStatus, facts: &Facts) -> Step<HandoverStatus, Action> {
    // A config that another one overrides touches nothing: the other one owns the target.
    if let Err(why) = &facts.conflict {
        return stay(state, false, reason::CONFLICT, why.clone());
    }
    // The server the move rests on (or starts from) is gone: say so once, and start over
    // from nothing, so the next move neither waits on it nor claims it as its source.
    if let Some(gone) = &facts.wired_gone
        && believes_served(state)
    {
        return lost(state, gone, facts);
    }
    // Without a resolver answer nothing moves and nothing is un-wired: the target keeps
    // whatever serves it now, which the message says.
    let dest = match &facts.destination {
        Ok(d) => d.as_str(),
        Err(why) => {
            return match (&facts.wired_gone, &facts.wired_to) {
                (Some(gone), _) => {
                    stay(state, false, reason::WIRED_SERVER_MISSING, format!("{}; {why}", gone.note()))
                }
                (None, Some(w)) => stay(
                    state,
                    false,
                    reason::NO_SERVER,
                    format!("{why}; meanwhile the target stays wired to server {w}"),
                ),
                (None, None) => stay(state, false, reason::NO_SERVER, why.clone()),
            };
        }
    };
    let blocked =
        |state: &HandoverStatus| facts.gate().err().map(|(reason, why)| stay(state, false, reason, why));
    let wired_to_dest = facts.wired_to.as_deref() == Some(dest);

    match Move::of(state) {
        Move::Unassigned => match &facts.compiled {
            Ok(()) => blocked(state).unwrap_or_else(|| start(state, dest, facts, false)),
            Err(why) => stay(state, false, reason::COMPILE_FAILED, why.clone()),
        },
        Move::Compiling(r) | Move::DestinationReady(r, _) if r.destination != dest => {
            blocked(state).unwrap_or_else(|| start(state, dest, facts, true))
        }
        Move::Patched(r, _) | Move::SourceDropped(r, _) if r.destination != dest => {
            blocked(state).unwrap_or_else(|| start(state, dest, facts, false))
        }
        Move::Compiling(route) => {
            if let Err(why) = &facts.compiled {
                return stay(state, false, reason::COMPILE_FAILED, why.clone());
            }
            if let Some(s) = blocked(state) {
                return s;
            }
            let ready = |proof| Move::DestinationReady(route, proof);
            if route.source == Some(dest) {
                // The target names the destination already: re-wiring changes no routing.
                let note = format!("the target already names server {dest}: nothing to hand over");
                return go(
                    state,
                    ready(Proof::Verified),
                    facts,
                    reason::DESTINATION_READY,
                    note,
                    patching(dest),
                );
            }
            // A first wiring waits like any move: a live multi-version target is already
            // served — by strategy None, or by another webhook — so adopting it is a move from
            // that to the destination, which must hold the plan before the apiserver calls it.
            match facts.replicas(dest).as_destination() {
                Serves => {
                    // Adopting: nothing of dco's served the target (a target wired to a gone
                    // server is not adopted, it is recovered).
                    let note = match (route.source, &facts.wired_gone) {
                        (None, None) => format!(
                            "every live replica of server {dest} reports a compiled plan; adopting the target"
                        ),
                        _ => format!("every live replica of server {dest} reports a compiled plan"),
                    };
                    go(state, ready(Proof::Verified), facts, reason::DESTINATION_READY, note, patching(dest))
                }
                NoLeases => {
                    let r = facts.replicas(dest);
                    let note = format!(
                        "server {dest} publishes no served-target Leases (its Lease Role missing, or a webhook version that does not publish them): not verified that its replicas hold a compiled plan for the target; all {} of its replicas are Ready, so wiring the target to it anyway (HandoverUnverified)",
                        r.ready
                    );
                    let mut s = go(
                        state,
                        ready(Proof::Unverified),
                        facts,
                        reason::DESTINATION_READY,
                        note,
                        patching(dest),
                    );
                    if let Some(e) = s.event.as_mut() {
                        e.warning = true;
                    }
                    s
                }
                NotServing => stay(
                    state,
                    false,
                    reason::AWAITING_DESTINATION,
                    format!("waiting for every live replica of server {dest} to report the target"),
                ),
                CannotTell(why) => stay(
                    state,
                    false,
                    reason::AWAITING_DESTINATION,
                    format!(
                        "server {dest}'s Leases cannot tell whether it serves the target, so the move waits: {why}"
                    ),
                ),
            }
        }
        Move::DestinationReady(route, proof) => {
            if wired_to_dest {
                let note = format!("the target's spec.conversion now names server {dest}");
                let cond = ConditionUpdate {
                    status: false,
                    reason: reason::AWAITING_SOURCE_DROP,
                    message: awaiting_source(route.source),
                };
                return go(state, Move::Patched(route, proof), facts, reason::PATCHED, note, cond);
            }
            if let Some(s) = blocked(state) {
                return s;
            }
            // The proof must still hold when the wiring is written, not only when it was
            // made: between the two the destination may have dropped the plan (a reassignment
            // away and back, or a reconcile that stalled), and a wiring on a stale proof
            // routes reviews to replicas without it (the model check, state/tests/model.rs).
            if route.source != Some(dest) {
                let still = match facts.replicas(dest).as_destination() {
                    Serves => Ok(()),
                    NoLeases if proof == Proof::Unverified => Ok(()),
                    NoLeases => Err("publishes no served-target Leases any more".to_string()),
                    NotServing => Err("no longer has every live replica report the target".to_string()),
                    CannotTell(why) => Err(format!("cannot tell whether it still serves the target: {why}")),
                };
                if let Err(why) = still {
                    return stay(
                        state,
                        false,
                        reason::AWAITING_DESTINATION,
                        format!("server {dest} {why}; waiting before wiring the target to it"),
                    );
                }
            }
            let mut s = stay(state, false, reason::PATCHING, format!("wiring the target to server {dest}"));
            s.actions.push(Action::WireTo(dest.to_string()));
            s
        }
        Move::Patched(route, proof) => {
            // The source keeps the target until the objects the apiserver reads the wiring
            // from (an XRD's generated CRDs) name the destination: until then its reviews
            // still go to the source.
            if let Err(why) = &facts.propagated {
                return stay(state, false, reason::AWAITING_PROPAGATION, awaiting_propagation(dest, why));
            }
            let dropped = |proof, note| {
                let to = Move::SourceDropped(route, proof);
                go(state, to, facts, reason::SOURCE_DROPPED, note, ready(route, proof))
            };
            let Some(source) = route.source.filter(|s| *s != dest) else {
                return dropped(proof, settled_note(dest));
            };
            match facts.replicas(source).as_source() {
                NotServing => dropped(
                    proof,
                    format!("server {source} no longer holds the target; the move to {dest} is complete"),
                ),
                NoLeases => dropped(
                    Proof::Unverified,
                    format!(
                        "server {source} publishes no served-target Leases: not verified that it dropped the target; assuming it did"
                    ),
                ),
                Serves | CannotTell(_) => {
                    stay(state, false, reason::AWAITING_SOURCE_DROP, awaiting_source(Some(source)))
                }
            }
        }
        Move::SourceDropped(route, proof) => {
            if !wired_to_dest {
                if let Some(s) = blocked(state) {
                    return s;
                }
                // Someone re-wired the target by hand: put it back, through the same guard.
                let note = format!(
                    "the target's spec.conversion names {}, not server {dest}; re-wiring",
                    facts.wired_to.as_deref().unwrap_or("no webhook")
                );
                let to = Move::DestinationReady(route, proof);
                let mut s = go(state, to, facts, reason::WIRING_DRIFTED, note, patching(dest));
                if let Some(e) = s.event.as_mut() {
                    e.warning = true;
                }
                return s;
            }
            // Settled. Same server, new details (a rotated CA, other review versions): write
            // them, which is not a move. Nothing to write while they cannot be built.
            let actions = if !facts.wiring_current && facts.destination_ready.is_ok() {
                vec![Action::Refresh(dest.to_string())]
            } else {
                vec![]
            };
            // Settled on the target, but what the apiserver reads lags or was changed behind
            // it (Crossplane has not re-rendered the CRDs yet, or someone edited one): not
            // ready until it carries the wiring again. Not a move: no transition.
            let condition = match &facts.propagated {
                Ok(()) => ready(route, proof),
                Err(why) => ConditionUpdate {
                    status: false,
                    reason: reason::AWAITING_PROPAGATION,
                    message: awaiting_propagation(dest, why),
                },
            };
            Step { next: state.clone(), actions, condition, event: None }
        }
    }
}

use Serving::{CannotTell, NoLeases, NotServing, Serves};

/// Whether `state` holds that the server the target names serves it: settled or patched on
/// the destination, or moving away from a source.
fn believes_served(state: &HandoverStatus) -> bool {
    match Move::of(state) {
        Move::Unassigned => false,
        Move::Compiling(r) | Move::DestinationReady(r, _) => r.source.is_some(),
        Move::Patched(..) | Move::SourceDropped(..) => true,
    }
}

/// The wired server is gone: back to Unassigned (keeping the attempt and its trace), with a
/// Warning Event naming the Service. The next move starts from nothing.
fn lost(state: &HandoverStatus, gone: &Gone, facts: &Facts) -> Step<HandoverStatus, Action> {
    let note = gone.note();
    let next = HandoverStatus {
        state: S::Unassigned,
        since: Some(facts.now.clone()),
        attempt: state.attempt,
        traceparent: state.traceparent.clone(),
        message: Some(note.clone()),
        ..HandoverStatus::default()
    };
    Step {
        next,
        actions: vec![],
        condition: ConditionUpdate {
            status: false,
            reason: reason::WIRED_SERVER_MISSING,
            message: note.clone(),
        },
        event: Some(EventNote { warning: true, reason: reason::WIRED_SERVER_MISSING, note }),
    }
}

fn patching(dest: &str) -> ConditionUpdate {
    ConditionUpdate {
        status: false,
        reason: reason::PATCHING,
        message: format!("wiring the target to server {dest}"),
    }
}

fn awaiting_source(source: Option<&str>) -> String {
    match source {
        Some(s) => format!("waiting for server {s} to drop the target"),
        None => "waiting for the previous server to drop the target".to_string(),
    }
}

fn awaiting_propagation(dest: &str, why: &str) -> String {
    format!("the target names server {dest}, but not yet everything the apiserver reads it from: {why}")
}

fn settled_note(dest: &str) -> String {
    format!("server {dest} serves the target; nothing to drop")
}

/// `HandoverReady=True`: settled on `route`'s destination.
fn ready(route: Route<'_>, proof: Proof) -> ConditionUpdate {
    let dest = route.destination;
    if proof == Proof::Unverified {
        ConditionUpdate {
            status: true,
            reason: reason::UNVERIFIED,
            message: format!(
                "served by server {dest}; the move was not verified through served-target Leases"
            ),
        }
    } else {
        ConditionUpdate { status: true, reason: reason::READY, message: format!("served by server {dest}") }
    }
}

#[cfg(test)]
mod tests;
