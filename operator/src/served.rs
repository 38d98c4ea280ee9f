//! What a server's replicas serve, aggregated from their served-target Leases (design §5).
//!
//! The answer is the **intersection** over live Leases: a target counts as served only when
//! every live replica holds a plan for it, because the apiserver may send a review to any of
//! them. A Lease that cannot answer (truncated, missing or undecodable set) makes the whole
//! answer "cannot tell": a partial intersection would claim less than is true, and worse, an
//! empty one would look like "the source dropped everything".

use std::collections::{BTreeMap, BTreeSet};

use dco_api::served_lease::{self, Report};
use dco_api::{LABEL_INSTANCE, ServerStatus};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// The served-target part of a ConversionWebhookServer's status.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Aggregate {
    /// Sorted; empty when `truncated`.
    pub served_targets: Vec<String>,
    pub reporting_replicas: i32,
    pub truncated: bool,
    /// When the first live Lease expires unless renewed: the controller looks again then.
    pub next_expiry: Option<Timestamp>,
}

impl Aggregate {
    pub fn write_to(&self, status: &mut ServerStatus) {
        status.served_targets = self.served_targets.clone();
        status.reporting_replicas = self.reporting_replicas;
        status.served_targets_truncated = self.truncated;
    }
}

/// When `lease` stops being live: `renewTime + leaseDurationSeconds`. A Lease without either
/// never counts as live.
pub fn expiry(lease: &Lease) -> Option<Timestamp> {
    let spec = lease.spec.as_ref()?;
    let renewed = spec.renew_time.as_ref()?.0;
    let secs = spec.lease_duration_seconds?;
    renewed.checked_add(SignedDuration::from_secs(i64::from(secs))).ok()
}

/// The Leases of server `instance` in `namespace` that are live at `now`, each with when it
/// expires and what it reports: the filter both questions below start from.
fn live_reports<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    instance: &str,
    namespace: &str,
    now: Timestamp,
) -> impl Iterator<Item = (Timestamp, Report)> {
    let empty = BTreeMap::new();
    leases.into_iter().filter_map(move |lease| {
        let meta = &lease.metadata;
        let ours = meta.namespace.as_deref() == Some(namespace)
            && meta.labels.as_ref().and_then(|l| l.get(LABEL_INSTANCE)).map(String::as_str) == Some(instance)
            && meta.deletion_timestamp.is_none();
        let expires = expiry(lease).filter(|e| ours && *e > now)?;
        Some((expires, served_lease::read(meta.annotations.as_ref().unwrap_or(&empty))))
    })
}

/// Aggregate the Leases of server `instance` in `namespace` that are live at `now`.
pub fn aggregate<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    instance: &str,
    namespace: &str,
    now: Timestamp,
) -> Aggregate {
    let mut reporting = 0i32;
    let mut truncated = false;
    let mut next_expiry: Option<Timestamp> = None;
    let mut intersection: Option<BTreeSet<String>> = None;
    for (expires, report) in live_reports(leases, instance, namespace, now) {
        reporting = reporting.saturating_add(1);
        next_expiry = Some(next_expiry.map_or(expires, |n| n.min(expires)));
        match report {
            Report::Targets(set) => {
                intersection = Some(match intersection {
                    None => set,
                    Some(acc) => acc.intersection(&set).cloned().collect(),
                });
            }
            Report::CannotTell(_) => truncated = true,
        }
    }
    let served_targets =
        if truncated { Vec::new() } else { intersection.unwrap_or_default().into_iter().collect() };
    Aggregate { served_targets, reporting_replicas: reporting, truncated, next_expiry }
}

/// Whether **any** live replica of a server still holds `target`: the question a move asks of
/// its source ("no live replica reports it any more"), which the intersection cannot answer.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Held {
    /// Live Leases of the server.
    pub live: i32,
    /// At least one live Lease lists the target.
    pub by_any: bool,
    /// A live Lease cannot answer (truncated, missing or undecodable set).
    pub cannot_tell: bool,
}

pub fn held<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    instance: &str,
    namespace: &str,
    target: &str,
    now: Timestamp,
) -> Held {
    let mut out = Held::default();
    for (_, report) in live_reports(leases, instance, namespace, now) {
        out.live = out.live.saturating_add(1);
        match report {
            Report::Targets(set) => out.by_any |= set.contains(target),
            Report::CannotTell(_) => out.cannot_tell = true,
        }
    }
    out
}

/// What in a Lease matters to the aggregate apart from its renewals: the instance and the
/// reported set (or its absence). The Lease watch passes an event on only when this changes,
/// so 30-second heartbeats of many replicas do not wake the controller.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Reported {
    pub instance: Option<String>,
    pub set: Option<String>,
    pub truncated: Option<String>,
    pub expiry: Option<Timestamp>,
}

impl Reported {
    pub fn of(lease: &Lease) -> Self {
        let ann = lease.metadata.annotations.as_ref();
        Reported {
            instance: lease.metadata.labels.as_ref().and_then(|l| l.get(LABEL_INSTANCE)).cloned(),
            set: ann.and_then(|a| a.get(dco_api::ANNOTATION_SERVED_TARGETS)).cloned(),
            truncated: ann.and_then(|a| a.get(dco_api::ANNOTATION_SERVED_TRUNCATED)).cloned(),
            expiry: expiry(lease),
        }
    }

    /// Whether going from `self` (the last event seen) to `next` (seen at `now`) can change
    /// an aggregate: a different instance or set, or a Lease that had expired coming back.
    pub fn changes_aggregate(&self, next: &Reported, now: Timestamp) -> bool {
        self.instance != next.instance
            || self.set != next.set
            || self.truncated != next.truncated
            || self.expiry.is_none_or(|e| e <= now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dco_api::served_lease::{DEFAULT_MAX_ENCODED_BYTES, encode};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + secs).unwrap()
    }

    fn lease(name: &str, instance: &str, targets: Option<&[&str]>, renewed: i64) -> Lease {
        let annotations = match targets {
            Some(t) => encode(t.iter(), DEFAULT_MAX_ENCODED_BYTES)
                .annotations()
                .into_iter()
                .filter_map(|(k, v)| v.map(|v| (k, v)))
                .collect(),
            None => BTreeMap::new(),
        };
        Lease {
            metadata: ObjectMeta {
                name: Some(format!("dco-served-{name}")),
                namespace: Some("dco-system".into()),
                labels: Some(BTreeMap::from([(LABEL_INSTANCE.to_string(), instance.to_string())])),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(ts(renewed))),
                lease_duration_seconds: Some(90),
                ..LeaseSpec::default()
            }),
        }
    }

    #[test]
    fn intersection_over_live_replicas_of_the_instance() {
        let leases = [
            lease("a-1", "a", Some(&["x", "y", "z"]), 0),
            lease("a-2", "a", Some(&["y", "z"]), 10),
            lease("b-1", "b", Some(&["q"]), 0),
            // Expired 1 s ago: its missing "z" must not shrink the answer.
            lease("a-3", "a", Some(&["y"]), -91),
        ];
        let agg = aggregate(&leases, "a", "dco-system", ts(0));
        assert_eq!(agg.served_targets, ["y", "z"]);
        assert_eq!(agg.reporting_replicas, 2);
        assert!(!agg.truncated);
        assert_eq!(agg.next_expiry, Some(ts(90)));
    }

    #[test]
    fn a_truncated_or_missing_set_is_cannot_tell_never_partial() {
        let mut t = lease("a-2", "a", Some(&["y"]), 0);
        t.metadata.annotations =
            Some(BTreeMap::from([(dco_api::ANNOTATION_SERVED_TRUNCATED.to_string(), "true".to_string())]));
        let leases = [lease("a-1", "a", Some(&["x", "y"]), 0), t];
        let agg = aggregate(&leases, "a", "dco-system", ts(0));
        assert!(agg.truncated);
        assert!(agg.served_targets.is_empty());
        assert_eq!(agg.reporting_replicas, 2);

        let leases = [lease("a-1", "a", Some(&["x"]), 0), lease("a-2", "a", None, 0)];
        assert!(aggregate(&leases, "a", "dco-system", ts(0)).truncated);

        let mut garbage = lease("a-2", "a", Some(&["x"]), 0);
        garbage.metadata.annotations =
            Some(BTreeMap::from([(dco_api::ANNOTATION_SERVED_TARGETS.to_string(), "%%%".to_string())]));
        let leases = [lease("a-1", "a", Some(&["x"]), 0), garbage];
        assert!(aggregate(&leases, "a", "dco-system", ts(0)).truncated);
    }

    #[test]
    fn no_live_leases_is_zero_reporting_and_empty() {
        let leases = [lease("a-1", "a", Some(&["x"]), -200)];
        assert_eq!(aggregate(&leases, "a", "dco-system", ts(0)), Aggregate::default());
        // Other namespaces do not count.
        assert_eq!(aggregate(&leases, "a", "elsewhere", ts(-150)).reporting_replicas, 0);
    }

    #[test]
    fn held_asks_whether_any_live_replica_still_has_the_target() {
        let leases = [lease("a-1", "a", Some(&["x"]), 0), lease("a-2", "a", Some(&["x", "y"]), 0)];
        let h = held(&leases, "a", "dco-system", "y", ts(0));
        assert_eq!(h, Held { live: 2, by_any: true, cannot_tell: false });
        assert!(!held(&leases, "a", "dco-system", "z", ts(0)).by_any);
        // The intersection says "y" is not served; for a source that is not "dropped".
        assert_eq!(aggregate(&leases, "a", "dco-system", ts(0)).served_targets, ["x"]);
        let mut t = lease("a-3", "a", None, 0);
        t.metadata.annotations =
            Some(BTreeMap::from([(dco_api::ANNOTATION_SERVED_TRUNCATED.to_string(), "true".to_string())]));
        assert!(held(&[t], "a", "dco-system", "y", ts(0)).cannot_tell);
        assert_eq!(held(&leases, "a", "dco-system", "y", ts(100)), Held::default());
    }

    #[test]
    fn heartbeats_do_not_change_the_aggregate_but_set_changes_and_revivals_do() {
        let before = Reported::of(&lease("a-1", "a", Some(&["x"]), 0));
        let renewed = Reported::of(&lease("a-1", "a", Some(&["x"]), 30));
        assert!(!before.changes_aggregate(&renewed, ts(30)));
        let grown = Reported::of(&lease("a-1", "a", Some(&["x", "y"]), 30));
        assert!(before.changes_aggregate(&grown, ts(30)));
        // The last renewal had lapsed: the replica comes back, the intersection may change.
        assert!(before.changes_aggregate(&renewed, ts(95)));
    }
}
