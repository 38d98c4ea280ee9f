//! From a server's status (read from the cache, never by calling its Pods) to what the
//! handover machine needs to know about one target: [`Serving`].

use dco_api::ServerStatus;
use dco_state::handover::Serving;

use crate::leases::Held;

/// What `status` says about `target`. `None` means the server object is gone, so nothing of it
/// can be serving.
pub fn serving(status: Option<&ServerStatus>, target: &str) -> Serving {
    let Some(s) = status else { return Serving::NotServing };
    let (ready, reporting) = (s.ready_replicas, s.reporting_replicas);
    if ready <= 0 && reporting <= 0 {
        // Nothing runs: nothing can serve. For a destination this waits (the move blocks);
        // for a source it means the target has been dropped.
        return Serving::NotServing;
    }
    if s.served_targets_truncated {
        return Serving::CannotTell(
            "a replica's served-target set is truncated (over --served-targets-max-bytes) or unreadable"
                .to_string(),
        );
    }
    if reporting <= 0 {
        return Serving::NoLeases;
    }
    if reporting < ready {
        return Serving::CannotTell(format!(
            "only {reporting} of {ready} ready replicas publish a live served-target Lease"
        ));
    }
    if s.served_targets.iter().any(|t| t == target) { Serving::Serves } else { Serving::NotServing }
}

/// What a move's **source** still does with `target`: it has dropped the target only when no
/// live replica holds it any more (the union, not the intersection: one replica still serving
/// is still serving). `status` is `None` when the server object is gone.
pub fn source_serving(status: Option<&ServerStatus>, held: &Held) -> Serving {
    let Some(s) = status else { return Serving::NotServing };
    if held.by_any {
        return Serving::Serves;
    }
    if held.cannot_tell {
        return Serving::CannotTell(
            "a replica's served-target set is truncated or unreadable, so it may still hold the target"
                .to_string(),
        );
    }
    if held.live == 0 && s.ready_replicas > 0 {
        return Serving::NoLeases;
    }
    Serving::NotServing
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(ready: i32, reporting: i32, served: &[&str], truncated: bool) -> ServerStatus {
        ServerStatus {
            ready_replicas: ready,
            reporting_replicas: reporting,
            served_targets: served.iter().map(|s| s.to_string()).collect(),
            served_targets_truncated: truncated,
            ..ServerStatus::default()
        }
    }

    #[test]
    fn every_case() {
        let t = "widgets.example.org";
        assert_eq!(serving(None, t), Serving::NotServing);
        assert_eq!(serving(Some(&status(0, 0, &[], false)), t), Serving::NotServing);
        assert_eq!(serving(Some(&status(2, 2, &[t], false)), t), Serving::Serves);
        // More reporting than ready (a terminating Pod's Lease is still live) is fine.
        assert_eq!(serving(Some(&status(2, 3, &["a", t], false)), t), Serving::Serves);
        assert_eq!(serving(Some(&status(2, 2, &["other"], false)), t), Serving::NotServing);
        assert_eq!(serving(Some(&status(2, 0, &[], false)), t), Serving::NoLeases);
        assert!(
            matches!(serving(Some(&status(3, 2, &[t], false)), t), Serving::CannotTell(m) if m.contains("2 of 3"))
        );
        assert!(matches!(serving(Some(&status(2, 2, &[], true)), t), Serving::CannotTell(_)));
        // Truncation wins even over a listed target: the list cannot be trusted.
        assert!(matches!(serving(Some(&status(2, 2, &[t], true)), t), Serving::CannotTell(_)));
    }

    #[test]
    fn a_source_has_dropped_only_when_no_replica_holds_the_target() {
        let st = status(2, 2, &[], false);
        let held = |live, by_any, cannot_tell| Held { live, by_any, cannot_tell };
        assert_eq!(source_serving(None, &held(2, true, false)), Serving::NotServing);
        assert_eq!(source_serving(Some(&st), &held(2, true, false)), Serving::Serves);
        assert_eq!(source_serving(Some(&st), &held(2, false, false)), Serving::NotServing);
        assert!(matches!(source_serving(Some(&st), &held(2, false, true)), Serving::CannotTell(_)));
        assert_eq!(source_serving(Some(&st), &held(0, false, false)), Serving::NoLeases);
        assert_eq!(
            source_serving(Some(&status(0, 0, &[], false)), &held(0, false, false)),
            Serving::NotServing
        );
    }
}
