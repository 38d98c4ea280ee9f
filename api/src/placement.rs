//! Where a config's status puts its target, and which servers that involves: the operator
//! wakes and blocks on it (a server's change wakes the configs it involves, a server is not
//! deleted while one moves away from it) and a webhook replica reads whole the targets its
//! server is involved in (`docs/webhook.md`, "Targets read whole"). One test for both, so
//! a replica reads a target whenever the operator may ask its server to prove it serves it.

use crate::config::{ConfigStatus, HandoverState};

/// What the operator persisted of a config's resolution and move.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Placement {
    /// `status.assignedWebhookServer`: the resolver's last answer as persisted.
    pub assigned: Option<String>,
    /// `status.handover.source`: the server the target named when the move began.
    pub source: Option<String>,
    /// `status.handover.destination`.
    pub destination: Option<String>,
    /// The handover is in SourceDropped (nothing in flight).
    pub settled: bool,
}

impl Placement {
    pub fn of(status: Option<&ConfigStatus>) -> Placement {
        let handover = status.and_then(|s| s.handover.as_ref());
        Placement {
            assigned: status.and_then(|s| s.assigned_webhook_server.clone()),
            source: handover.and_then(|h| h.source.clone()),
            destination: handover.and_then(|h| h.destination.clone()),
            settled: handover.is_some_and(|h| h.state == HandoverState::SourceDropped),
        }
    }

    /// The operator has not placed the target yet: no resolution persisted and no move. Its
    /// target may still be wired to any server (a config created again over a wired target, a
    /// restore from a backup, which drops status).
    pub fn unplaced(&self) -> bool {
        self.assigned.is_none() && self.source.is_none() && self.destination.is_none()
    }

    /// Whether the config (pinned to `pin`) touches `server`: it pins it, the operator
    /// assigned the target to it, moves it there, or is moving it away from it.
    pub fn involves(&self, pin: Option<&str>, server: &str) -> bool {
        let (a, s, d) = (self.assigned.as_deref(), self.source.as_deref(), self.destination.as_deref());
        involves(server, pin, a, s, d, self.settled)
    }
}

/// [`Placement::involves`] over borrowed fields, for callers that keep them apart.
pub fn involves(
    server: &str,
    pin: Option<&str>,
    assigned: Option<&str>,
    source: Option<&str>,
    destination: Option<&str>,
    settled: bool,
) -> bool {
    let is = |o: Option<&str>| o == Some(server);
    is(pin) || is(assigned) || is(destination) || (is(source) && !settled)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::HandoverStatus;

    fn status(assigned: Option<&str>, handover: Option<(HandoverState, &str, &str)>) -> ConfigStatus {
        ConfigStatus {
            assigned_webhook_server: assigned.map(str::to_string),
            handover: handover.map(|(state, source, destination)| HandoverStatus {
                state,
                source: Some(source.to_string()),
                destination: Some(destination.to_string()),
                ..HandoverStatus::default()
            }),
            ..ConfigStatus::default()
        }
    }

    #[test]
    fn a_move_involves_both_ends_until_it_settles_then_the_destination() {
        let moving = Placement::of(Some(&status(Some("b"), Some((HandoverState::Compiling, "a", "b")))));
        assert!(moving.involves(None, "a") && moving.involves(None, "b") && !moving.involves(None, "c"));
        let settled = Placement::of(Some(&status(Some("b"), Some((HandoverState::SourceDropped, "a", "b")))));
        assert!(!settled.involves(None, "a") && settled.involves(None, "b"));
        assert!(settled.involves(Some("c"), "c"), "a pin involves its server before any status");
        assert!(!moving.unplaced() && !settled.unplaced());
    }

    #[test]
    fn a_config_without_status_is_unplaced_and_involves_only_its_pin() {
        let none = Placement::of(None);
        assert!(none.unplaced());
        assert!(!none.involves(None, "a") && none.involves(Some("a"), "a"));
        assert!(Placement::of(Some(&ConfigStatus::default())).unplaced());
        assert!(!Placement::of(Some(&status(Some("a"), None))).unplaced());
    }
}
