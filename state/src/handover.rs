//! The handover state machine (design §6): moving a target's `spec.conversion` from the
//! server that serves it now (the source) to the one the resolver chose (the destination)
//! with no moment in which the target is unserved.
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

/// What a server's served-target Leases say about one target (read from the cache).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Serving {
    /// Every live replica reports the target and all ready replicas report.
    Serves,
    /// The replicas report, and the target is not (or no longer) in their intersection.
    NotServing,
    /// The server publishes no Leases at all (an older webhook, or Leases forbidden by RBAC).
    NoLeases,
    /// The Leases cannot answer: a truncated or undecodable set, or fewer reporting replicas
    /// than ready ones. Never read as a partial answer.
    CannotTell(String),
}

/// Everything one step needs, gathered by the operator from its caches.
#[derive(Clone, Debug)]
pub struct Facts<'a> {
    /// RFC 3339 time of this reconcile, recorded as `since` on a transition.
    pub now: &'a str,
    /// The resolver's answer, or why there is none.
    pub destination: Result<&'a str, String>,
    /// Whether the config compiles against the live target schema, or why not.
    pub compiled: Result<(), String>,
    /// The server whose Service the target's `spec.conversion` names now, if any.
    pub wired_to: Option<&'a str>,
    /// The destination's Leases about this target.
    pub destination_serving: Serving,
    /// The source's Leases about this target (ignored when there is no source).
    pub source_serving: Serving,
    /// A fresh W3C traceparent for a move that starts in this step.
    pub new_traceparent: &'a str,
}

/// What the operator must do for the machine to make progress.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Action {
    /// Server-side apply the target's `spec.conversion` to point at this server.
    WireTo(String),
}

pub const CONDITION: &str = "HandoverReady";

pub mod reason {
    pub const NO_SERVER: &str = "NoServer";
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
}

pub struct Handover;

impl Machine for Handover {
    type State = HandoverStatus;
    type Facts<'a> = Facts<'a>;
    type Action = Action;

    fn step(state: &HandoverStatus, facts: &Facts<'_>) -> Step<HandoverStatus, Action> {
        step(state, facts)
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
    to: S,
    facts: &Facts<'_>,
    event: &'static str,
    note: String,
    condition: ConditionUpdate,
) -> Step<HandoverStatus, Action> {
    let mut next = state.clone();
    next.state = to;
    next.since = Some(facts.now.to_string());
    next.message = Some(note.clone());
    Step { next, actions: vec![], condition, event: Some(EventNote { warning: false, reason: event, note }) }
}

/// A new move from Compiling, with `source` = the server the target names now.
fn start(
    state: &HandoverStatus,
    dest: &str,
    facts: &Facts<'_>,
    restarted: bool,
) -> Step<HandoverStatus, Action> {
    let next = HandoverStatus {
        state: S::Compiling,
        source: facts.wired_to.map(str::to_string),
        destination: Some(dest.to_string()),
        since: Some(facts.now.to_string()),
        attempt: state.attempt.saturating_add(1),
        traceparent: Some(facts.new_traceparent.to_string()),
        message: None,
        unverified: false,
    };
    let from = facts.wired_to.map_or("nothing".to_string(), |s| format!("server {s}"));
    let (reason, note) = if restarted {
        (
            reason::RESTARTED,
            format!(
                "destination changed to {dest} before the target was re-wired; moving from {from} to {dest}"
            ),
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
pub fn step(state: &HandoverStatus, facts: &Facts<'_>) -> Step<HandoverStatus, Action> {
    // Without a resolver answer nothing moves and nothing is un-wired: the target keeps
    // whatever serves it now.
    let dest = match &facts.destination {
        Ok(d) => *d,
        Err(why) => return stay(state, false, reason::NO_SERVER, why.clone()),
    };
    let current = state.destination.as_deref();

    match state.state {
        S::Unassigned => match &facts.compiled {
            Ok(()) => start(state, dest, facts, false),
            Err(why) => stay(state, false, reason::COMPILE_FAILED, why.clone()),
        },
        S::Compiling | S::DestinationReady if current != Some(dest) => start(state, dest, facts, true),
        S::Patched | S::SourceDropped if current != Some(dest) => start(state, dest, facts, false),
        S::Compiling => {
            if let Err(why) = &facts.compiled {
                return stay(state, false, reason::COMPILE_FAILED, why.clone());
            }
            let source = state.source.as_deref();
            if source.is_none() || source == Some(dest) {
                let note = format!("first wiring of the target to server {dest}: nothing to hand over");
                return go(
                    state,
                    S::DestinationReady,
                    facts,
                    reason::DESTINATION_READY,
                    note.clone(),
                    patching(dest),
                );
            }
            match &facts.destination_serving {
                Serves => {
                    let note = format!("every live replica of server {dest} reports a compiled plan");
                    go(state, S::DestinationReady, facts, reason::DESTINATION_READY, note, patching(dest))
                }
                NoLeases => {
                    let note =
                        format!("server {dest} publishes no served-target Leases; proceeding unverified");
                    let mut s = go(
                        state,
                        S::DestinationReady,
                        facts,
                        reason::DESTINATION_READY,
                        note,
                        patching(dest),
                    );
                    s.next.unverified = true;
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
                    format!("server {dest}'s Leases cannot tell whether it serves the target: {why}"),
                ),
            }
        }
        S::DestinationReady => {
            if facts.wired_to == Some(dest) {
                let note = format!("the target's spec.conversion now names server {dest}");
                let cond = ConditionUpdate {
                    status: false,
                    reason: reason::AWAITING_SOURCE_DROP,
                    message: awaiting_source(state.source.as_deref()),
                };
                return go(state, S::Patched, facts, reason::PATCHED, note, cond);
            }
            let mut s = stay(state, false, reason::PATCHING, format!("wiring the target to server {dest}"));
            s.actions.push(Action::WireTo(dest.to_string()));
            s
        }
        S::Patched => {
            let source = state.source.as_deref().filter(|s| *s != dest);
            let Some(source) = source else {
                return go(
                    state,
                    S::SourceDropped,
                    facts,
                    reason::SOURCE_DROPPED,
                    settled_note(dest),
                    ready(state),
                );
            };
            match &facts.source_serving {
                NotServing => {
                    let note =
                        format!("server {source} no longer holds the target; the move to {dest} is complete");
                    go(state, S::SourceDropped, facts, reason::SOURCE_DROPPED, note, ready(state))
                }
                NoLeases => {
                    let note = format!("server {source} publishes no Leases; assuming it dropped the target");
                    let mut s =
                        go(state, S::SourceDropped, facts, reason::SOURCE_DROPPED, note, ready(state));
                    s.next.unverified = true;
                    s.condition = ready(&s.next);
                    s
                }
                Serves | CannotTell(_) => {
                    stay(state, false, reason::AWAITING_SOURCE_DROP, awaiting_source(Some(source)))
                }
            }
        }
        S::SourceDropped => {
            if facts.wired_to != Some(dest) {
                // Someone re-wired the target by hand: put it back, through the same guard.
                let note = format!(
                    "the target's spec.conversion names {}, not server {dest}; re-wiring",
                    facts.wired_to.unwrap_or("no webhook")
                );
                let mut s =
                    go(state, S::DestinationReady, facts, reason::WIRING_DRIFTED, note, patching(dest));
                if let Some(e) = s.event.as_mut() {
                    e.warning = true;
                }
                return s;
            }
            Step { next: state.clone(), actions: vec![], condition: ready(state), event: None }
        }
    }
}

use Serving::{CannotTell, NoLeases, NotServing, Serves};

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

fn settled_note(dest: &str) -> String {
    format!("server {dest} serves the target; nothing to drop")
}

fn ready(state: &HandoverStatus) -> ConditionUpdate {
    let dest = state.destination.as_deref().unwrap_or("?");
    if state.unverified {
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
