//! Whether a server's reconcile must apply its objects again, or only render its status from
//! the caches (docs/operator.md, "The server wing"): pure, over what the last full apply
//! desired and left ([`Applied`]) and what the watches show now ([`Versions`]).
//!
//! A server is reconciled whenever one of its replicas' Leases could lapse (about once a
//! minute), and on every change of what it owns; re-applying every owned object, listing them
//! all for the prune and reading its Secrets each time cost 20 requests a server a minute on
//! an idle cluster. Now a reconcile applies only when an input changed: the desired objects
//! (a hash of them and of `spec.certificate`), the Deployment, Service or Secrets as their
//! watches show them (an edit or a deletion by hand changes their resourceVersion), the
//! certificate's renewal time, or the slow resync ([`FULL_RESYNC`]) that heals what no watch
//! follows (ServiceAccount, Role and bindings, HPA, PDB). It prunes only when the desired
//! objects changed, on its first apply and on the slow resync.

use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::time::{Duration, Instant};

use serde::Serialize;

use super::status::Certificate;

/// How often a server's objects are applied and pruned with no change seen: what heals an
/// owned object no watch follows. Jittered by ±10 % ([`jittered`]) so servers spread out.
pub const FULL_RESYNC: Duration = Duration::from_secs(600);

/// The resourceVersions of the owned objects that watches follow: as the caches show them,
/// or as the last full apply left them. `None`: not there (not yet, or deleted).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Versions {
    pub deployment: Option<String>,
    pub service: Option<String>,
    pub ca: Option<String>,
    pub tls: Option<String>,
}

/// What a server's last full apply desired and left.
#[derive(Clone, Debug, PartialEq)]
pub struct Applied {
    /// [`fingerprint`] of the desired objects.
    pub desired: u64,
    pub versions: Versions,
    pub certificate: Certificate,
    /// The Service's first port, as applied.
    pub service_port: i32,
    /// When the certificate must be looked at (its renewal).
    pub certificate_due: Instant,
    /// When the slow resync is due.
    pub resync_due: Instant,
}

/// The last full apply of each server, by uid (a server deleted and made again under its
/// name starts afresh); kept in `Context::memos`.
#[derive(Clone, Debug, Default)]
pub struct Memo(pub HashMap<String, Applied>);

/// What a reconcile does with the server's objects.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Plan {
    /// Nothing changed: the status from the caches only, no request but a status write if
    /// the status changed (a Lease lapsed, a config was assigned).
    Quiet,
    /// Apply every desired object (and the certificate step); `prune` lists the owned kinds
    /// and deletes what is no longer desired. `why` goes to the debug log.
    Apply { prune: bool, why: &'static str },
}

/// The plan, given the last full apply (`None`: none since this replica started, or took
/// the server's shard), the desired objects' fingerprint and the versions seen now.
pub fn plan(last: Option<&Applied>, desired: u64, seen: &Versions, now: Instant) -> Plan {
    let Some(last) = last else {
        return Plan::Apply { prune: true, why: "no apply yet on this replica" };
    };
    if last.desired != desired {
        return Plan::Apply { prune: true, why: "the desired objects changed" };
    }
    if now >= last.resync_due {
        return Plan::Apply { prune: true, why: "the slow resync is due" };
    }
    if last.versions.deployment != seen.deployment || last.versions.service != seen.service {
        return Plan::Apply { prune: false, why: "the Deployment or Service changed or is gone" };
    }
    if last.versions.ca != seen.ca || last.versions.tls != seen.tls {
        return Plan::Apply { prune: false, why: "a Secret changed or is gone" };
    }
    if now >= last.certificate_due {
        return Plan::Apply { prune: false, why: "the certificate is due a look" };
    }
    Plan::Quiet
}

/// A hash of `parts` serialized: equal parts, equal fingerprints (within this process,
/// which is as long as a memo lives).
pub fn fingerprint<T: Serialize>(parts: &[T]) -> u64 {
    let mut h = DefaultHasher::new();
    for p in parts {
        // A part that does not serialize hashes as its error text: still stable.
        match serde_json::to_vec(p) {
            Ok(bytes) => bytes.hash(&mut h),
            Err(e) => e.to_string().hash(&mut h),
        }
    }
    h.finish()
}

pub use crate::retry::jittered;

#[cfg(test)]
mod tests {
    use super::*;

    fn versions() -> Versions {
        Versions {
            deployment: Some("10".into()),
            service: Some("11".into()),
            ca: Some("12".into()),
            tls: Some("13".into()),
        }
    }

    fn applied(now: Instant) -> Applied {
        Applied {
            desired: 7,
            versions: versions(),
            certificate: Certificate::SelfManaged { leaf_not_after: 0 },
            service_port: 443,
            certificate_due: now + Duration::from_secs(120),
            resync_due: now + FULL_RESYNC,
        }
    }

    #[test]
    fn nothing_changed_is_quiet() {
        let now = Instant::now();
        let last = applied(now);
        assert_eq!(plan(Some(&last), 7, &versions(), now + Duration::from_secs(60)), Plan::Quiet);
    }

    #[test]
    fn the_first_reconcile_and_a_changed_spec_apply_and_prune() {
        let now = Instant::now();
        assert!(matches!(plan(None, 7, &versions(), now), Plan::Apply { prune: true, .. }));
        let last = applied(now);
        assert!(matches!(plan(Some(&last), 8, &versions(), now), Plan::Apply { prune: true, .. }));
    }

    #[test]
    fn an_owned_object_edited_or_deleted_by_hand_is_applied_again_without_a_prune() {
        let now = Instant::now();
        let last = applied(now);
        let gone = Versions { service: None, ..versions() };
        assert!(matches!(plan(Some(&last), 7, &gone, now), Plan::Apply { prune: false, .. }));
        let edited = Versions { deployment: Some("20".into()), ..versions() };
        assert!(matches!(plan(Some(&last), 7, &edited, now), Plan::Apply { prune: false, .. }));
        let rotated = Versions { tls: Some("21".into()), ..versions() };
        assert!(matches!(plan(Some(&last), 7, &rotated, now), Plan::Apply { prune: false, .. }));
    }

    #[test]
    fn the_renewal_and_the_slow_resync_apply_once_due() {
        let now = Instant::now();
        let last = applied(now);
        let renew = last.certificate_due;
        assert!(matches!(plan(Some(&last), 7, &versions(), renew), Plan::Apply { prune: false, .. }));
        let resync = last.resync_due;
        assert!(matches!(plan(Some(&last), 7, &versions(), resync), Plan::Apply { prune: true, .. }));
    }

    #[test]
    fn fingerprints_follow_content_and_jitter_stays_within_a_tenth() {
        assert_eq!(fingerprint(&["a", "b"]), fingerprint(&["a", "b"]));
        assert_ne!(fingerprint(&["a", "b"]), fingerprint(&["a", "c"]));
        for _ in 0..100 {
            let j = jittered(FULL_RESYNC);
            assert!(j >= FULL_RESYNC * 9 / 10 && j <= FULL_RESYNC * 11 / 10, "{j:?}");
        }
    }
}
