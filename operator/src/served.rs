//! The one reader of served-target Leases (`docs/webhook.md`, "The served-target Lease"):
//! what a server's replicas serve, for its status (the aggregate), for a move (one server's
//! [`Replicas`] for one target), and which Lease events can change either (the trigger
//! stream).
//!
//! The answer is the **intersection** over live Leases: a target counts as served only when
//! every live replica holds a plan for it, because the apiserver may send a review to any of
//! them. A Lease that cannot answer (truncated, missing or undecodable set) makes the whole
//! answer "cannot tell": a partial intersection would claim less than is true, and worse, an
//! empty one would look like "the source dropped everything".

use std::collections::{BTreeMap, BTreeSet, HashMap};

use dco_api::served_lease::{self, CannotTell, Report};
use dco_api::{ConversionWebhookServer, LABEL_INSTANCE, ServerStatus};
use dco_state::handover::Replicas;
use futures::{Stream, StreamExt, stream};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use kube::ResourceExt;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::watcher;

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
/// expires, what it reports and its name: the filter both questions below start from.
fn live_reports<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    instance: &str,
    namespace: &str,
    now: Timestamp,
) -> impl Iterator<Item = (Timestamp, Report, &'a str)> {
    let empty = BTreeMap::new();
    leases.into_iter().filter_map(move |lease| {
        let meta = &lease.metadata;
        let ours = meta.namespace.as_deref() == Some(namespace)
            && meta.labels.as_ref().and_then(|l| l.get(LABEL_INSTANCE)).map(String::as_str) == Some(instance)
            && meta.deletion_timestamp.is_none();
        let expires = expiry(lease).filter(|e| ours && *e > now)?;
        let name = meta.name.as_deref().unwrap_or_default();
        Some((expires, served_lease::read(meta.annotations.as_ref().unwrap_or(&empty)), name))
    })
}

/// Why Lease `namespace/name` cannot say what its replica serves, for a condition message.
pub fn cannot_tell(namespace: &str, name: &str, why: &CannotTell) -> String {
    match why {
        CannotTell::Truncated => format!(
            "Lease {namespace}/{name} is marked truncated (its replica's set is over --served-targets-max-bytes)"
        ),
        CannotTell::Missing => format!("Lease {namespace}/{name} carries no served-target set"),
        CannotTell::Undecodable(e) => format!("Lease {namespace}/{name} cannot be decoded: {e}"),
    }
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
    for (expires, report, _) in live_reports(leases, instance, namespace, now) {
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

/// One server's replicas as a move needs them for `target`: the fact the handover machine
/// reads for both the destination ("every live replica holds it") and the source ("no live
/// replica holds it any more", which the intersection cannot answer), so both are read the
/// same way, from the Leases themselves. `ready` is the server's ready replica count (its
/// Deployment, through the server's status); the caller sets [`Replicas::replicas`].
pub fn replicas<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    instance: &str,
    namespace: &str,
    target: &str,
    ready: i32,
    now: Timestamp,
) -> Replicas {
    let mut out = Replicas { ready, ..Replicas::default() };
    let mut by_all = true;
    let mut unreadable: Vec<String> = Vec::new();
    for (_, report, name) in live_reports(leases, instance, namespace, now) {
        out.live = out.live.saturating_add(1);
        match report {
            Report::Targets(set) => {
                let has = set.contains(target);
                out.by_any |= has;
                by_all &= has;
            }
            Report::CannotTell(why) => unreadable.push(cannot_tell(namespace, name, &why)),
        }
    }
    // Named, at most a few: one is enough to act on, and a condition message stays short.
    if let Some(first) = unreadable.first() {
        out.cannot_tell = Some(match unreadable.len() {
            1 => first.clone(),
            n => format!("{first} (and {} more of its Leases cannot tell)", n - 1),
        });
    }
    out.by_all = by_all && out.live > 0 && out.cannot_tell.is_none();
    out
}

/// How many live replicas of server `instance` report `target` (the metric
/// `dco_operator_target_serving_replicas`, status_metrics.rs). `None` when the Leases cannot
/// tell: a live Lease is truncated or unreadable, or no Lease is live while `ready` replicas
/// run (a server that publishes none, `HandoverUnverified`). No live Lease and nothing ready is
/// `Some(0)`: nothing runs that could serve it.
pub fn reporting<'a>(
    leases: impl IntoIterator<Item = &'a Lease>,
    instance: &str,
    namespace: &str,
    target: &str,
    ready: i32,
    now: Timestamp,
) -> Option<i32> {
    let (mut live, mut listing) = (0i32, 0i32);
    for (_, report, _) in live_reports(leases, instance, namespace, now) {
        live = live.saturating_add(1);
        listing = listing.saturating_add(i32::from(report.targets()?.contains(target)));
    }
    (live > 0 || ready <= 0).then_some(listing)
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

/// Lease events → the servers whose aggregate they can change. Heartbeats (a renewal with the
/// same set) pass nothing; a changed set, a new or deleted Lease, or a revival does.
pub fn lease_triggers<S>(leases: S) -> impl Stream<Item = ObjectRef<ConversionWebhookServer>>
where
    S: Stream<Item = Result<watcher::Event<Lease>, watcher::Error>>,
{
    let mut seen: HashMap<(String, String), Reported> = HashMap::new();
    leases.flat_map(move |ev| {
        let key = |l: &Lease| (l.namespace().unwrap_or_default(), l.name_any());
        let mut out: Vec<String> = Vec::new();
        match ev {
            Ok(watcher::Event::Apply(l) | watcher::Event::InitApply(l)) => {
                let next = Reported::of(&l);
                let prev = seen.get(&key(&l));
                if prev.is_none_or(|p| p.changes_aggregate(&next, Timestamp::now())) {
                    out.extend(prev.and_then(|p| p.instance.clone()).filter(|i| Some(i) != next.instance.as_ref()));
                    out.extend(next.instance.clone());
                }
                seen.insert(key(&l), next);
            }
            Ok(watcher::Event::Delete(l)) => {
                seen.remove(&key(&l));
                out.extend(Reported::of(&l).instance);
            }
            Ok(_) => {}
            Err(e) => tracing::warn!(error = %e, "Lease watch failed; retrying (the operator needs list/watch on leases)"),
        }
        stream::iter(out.into_iter().map(|i| ObjectRef::new(&i)))
    })
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
    fn reporting_counts_live_replicas_listing_the_target() {
        let leases = [
            lease("a-1", "a", Some(&["x", "y"]), 0),
            lease("a-2", "a", Some(&["y"]), 0),
            lease("a-3", "a", Some(&["x"]), -91),
            lease("b-1", "b", Some(&["x"]), 0),
        ];
        assert_eq!(reporting(&leases, "a", "dco-system", "x", 2, ts(0)), Some(1));
        assert_eq!(reporting(&leases, "a", "dco-system", "y", 2, ts(0)), Some(2));
        assert_eq!(reporting(&leases, "a", "dco-system", "z", 2, ts(0)), Some(0));
        // No live Lease: nothing runs (0), or replicas run that publish none (cannot tell).
        assert_eq!(reporting(&leases, "c", "dco-system", "x", 0, ts(0)), Some(0));
        assert_eq!(reporting(&leases, "c", "dco-system", "x", 1, ts(0)), None);
        let mut t = lease("a-4", "a", Some(&["x"]), 0);
        t.metadata.annotations =
            Some(BTreeMap::from([(dco_api::ANNOTATION_SERVED_TRUNCATED.to_string(), "true".to_string())]));
        let with_truncated = [leases[0].clone(), t];
        assert_eq!(reporting(&with_truncated, "a", "dco-system", "z", 2, ts(0)), None);
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
    fn replicas_answer_both_roles_from_the_leases() {
        use dco_state::handover::Serving;
        let leases = [lease("a-1", "a", Some(&["x"]), 0), lease("a-2", "a", Some(&["x", "y"]), 0)];
        let r = replicas(&leases, "a", "dco-system", "y", 2, ts(0));
        assert_eq!(r, Replicas { ready: 2, live: 2, by_all: false, by_any: true, ..Replicas::default() });
        // One replica still holds y: a source that has not dropped it, a destination not ready.
        assert_eq!(r.as_source(), Serving::Serves);
        assert_eq!(r.as_destination(), Serving::NotServing);
        let x = replicas(&leases, "a", "dco-system", "x", 2, ts(0));
        assert_eq!((x.as_destination(), x.as_source()), (Serving::Serves, Serving::Serves));
        assert_eq!(replicas(&leases, "a", "dco-system", "z", 2, ts(0)).as_source(), Serving::NotServing);
        // A third ready replica without a Lease: the destination cannot tell.
        let three = replicas(&leases, "a", "dco-system", "x", 3, ts(0));
        assert!(matches!(three.as_destination(), Serving::CannotTell(m) if m.contains("2 of 3")));
        let mut t = lease("a-3", "a", None, 0);
        t.metadata.annotations =
            Some(BTreeMap::from([(dco_api::ANNOTATION_SERVED_TRUNCATED.to_string(), "true".to_string())]));
        let r = replicas(&[t], "a", "dco-system", "y", 1, ts(0));
        assert!(matches!(r.as_source(), Serving::CannotTell(m) if m.contains("may still hold")));
        let want = "Lease dco-system/dco-served-a-3 is marked truncated (its replica's set is over --served-targets-max-bytes)";
        assert_eq!(r.as_destination(), Serving::CannotTell(want.into()));
        // An undecodable set is named with the decoder's reason.
        let mut g = lease("a-4", "a", None, 0);
        g.metadata.annotations =
            Some(BTreeMap::from([(dco_api::ANNOTATION_SERVED_TARGETS.to_string(), "%%%".to_string())]));
        let r = replicas(&[g], "a", "dco-system", "y", 1, ts(0));
        assert!(
            matches!(r.as_destination(), Serving::CannotTell(m) if m.starts_with("Lease dco-system/dco-served-a-4 cannot be decoded: annotation")),
            "{r:?}"
        );
        // Expired Leases: nothing live, so a running server publishes none.
        let r = replicas(&leases, "a", "dco-system", "y", 2, ts(100));
        assert_eq!((r.live, r.as_source(), r.as_destination()), (0, Serving::NoLeases, Serving::NoLeases));
        // Nothing runs and nothing reports: nothing serves, in either role.
        let r = replicas(&leases, "a", "dco-system", "y", 0, ts(100));
        assert_eq!((r.as_source(), r.as_destination()), (Serving::NotServing, Serving::NotServing));
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

#[cfg(test)]
mod trigger_tests {
    use super::*;
    use dco_api::served_lease::{DEFAULT_MAX_ENCODED_BYTES, encode};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

    fn lease(pod: &str, instance: &str, targets: &[&str], renewed_ago: i64) -> Lease {
        let annotations = encode(targets.iter(), DEFAULT_MAX_ENCODED_BYTES)
            .annotations()
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        let renewed = Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(renewed_ago);
        Lease {
            metadata: ObjectMeta {
                name: Some(format!("dco-served-{pod}")),
                namespace: Some("ns".into()),
                labels: Some([(LABEL_INSTANCE.to_string(), instance.to_string())].into()),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(renewed)),
                lease_duration_seconds: Some(30),
                ..LeaseSpec::default()
            }),
        }
    }

    #[tokio::test]
    async fn lease_events_wake_servers_only_when_a_reported_set_can_change() {
        let events = vec![
            Ok(watcher::Event::InitApply(lease("a-1", "a", &["x"], 0))),
            // Heartbeat: same set, renewed.
            Ok(watcher::Event::Apply(lease("a-1", "a", &["x"], 0))),
            Ok(watcher::Event::Apply(lease("b-1", "b", &["y"], 0))),
            // The set grew.
            Ok(watcher::Event::Apply(lease("a-1", "a", &["x", "z"], 0))),
            // Another heartbeat of b.
            Ok(watcher::Event::Apply(lease("b-1", "b", &["y"], 0))),
            // b's replica had lapsed (last seen renewed 60 s ago), then it comes back.
            Ok(watcher::Event::Apply(lease("b-2", "b", &["y"], 60))),
            Ok(watcher::Event::Apply(lease("b-2", "b", &["y"], 0))),
            // A Lease moving to another instance wakes both.
            Ok(watcher::Event::Apply(lease("b-2", "c", &["y"], 0))),
            Ok(watcher::Event::Delete(lease("a-1", "a", &["x", "z"], 0))),
            Err(watcher::Error::NoResourceVersion),
        ];
        let woken: Vec<String> = lease_triggers(stream::iter(events)).map(|r| r.name).collect().await;
        assert_eq!(woken, ["a", "b", "a", "b", "b", "b", "c", "a"]);
    }
}
