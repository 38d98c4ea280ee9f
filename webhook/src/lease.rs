//! The served-target Lease publisher (`docs/webhook.md`): `dco-served-<pod>` in the replica's
//! namespace, labelled with the instance and `app.kubernetes.io/managed-by`, owned by the
//! Pod (garbage-collected with it), carrying the sorted set of targets this replica holds a
//! servable plan for, renewed every heartbeat and republished on any registry change (at once,
//! or with the others of a burst: at most one write per [`COALESCE`]).
//!
//! Publishing is best effort: a replica that cannot write its Lease still serves; what it
//! loses is the operator's proof that work can be moved onto it, which the operator reports.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dco_api::served_lease::{self, Encoded};
use dco_api::{LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference};
use kube::Client;
use kube::api::{Api, Patch, PatchParams};

use crate::metrics::{Metrics, ResultLabel};
use crate::registry::Registry;

/// SSA field manager of the publisher.
pub const FIELD_MANAGER: &str = "dco-webhook";

#[derive(Clone, Debug)]
pub struct LeaseSettings {
    pub pod_name: String,
    pub namespace: String,
    pub instance: String,
    pub renew_interval: Duration,
    /// `spec.leaseDurationSeconds`: readers treat a Lease not renewed within it as dead.
    pub lease_duration: Duration,
    /// Cap on the encoded set; above it the Lease is marked truncated.
    pub max_encoded_bytes: usize,
}

/// The Lease to apply, a pure function of its inputs.
pub fn desired_lease(s: &LeaseSettings, pod_uid: &str, encoded: &Encoded, now: MicroTime) -> Lease {
    let labels = BTreeMap::from([
        (LABEL_INSTANCE.to_string(), s.instance.clone()),
        (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
    ]);
    // Only present keys: with server-side apply, a key this manager stops sending is removed,
    // which is how a set turns into the truncated marker and back.
    let annotations: BTreeMap<String, String> =
        encoded.annotations().into_iter().filter_map(|(k, v)| v.map(|v| (k, v))).collect();
    Lease {
        metadata: ObjectMeta {
            name: Some(dco_api::served_lease_name(&s.pod_name)),
            namespace: Some(s.namespace.clone()),
            labels: Some(labels),
            annotations: Some(annotations),
            owner_references: Some(vec![OwnerReference {
                api_version: "v1".into(),
                kind: "Pod".into(),
                name: s.pod_name.clone(),
                uid: pod_uid.to_string(),
                controller: Some(false),
                block_owner_deletion: None,
            }]),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(s.pod_name.clone()),
            lease_duration_seconds: Some(i32::try_from(s.lease_duration.as_secs()).unwrap_or(i32::MAX)),
            renew_time: Some(now),
            ..LeaseSpec::default()
        }),
    }
}

pub struct LeasePublisher {
    health: Arc<crate::health::Health>,
    settings: LeaseSettings,
    leases: Api<Lease>,
    pods: Api<Pod>,
    registry: Arc<Registry>,
    metrics: Arc<Metrics>,
    pod_uid: Option<String>,
    last_truncated: Option<bool>,
}

#[derive(Debug, thiserror::Error)]
pub enum PublishError {
    #[error("cannot read Pod {namespace}/{pod} to own the Lease (needs get on pods): {source}")]
    Pod { namespace: String, pod: String, source: kube::Error },
    #[error(
        "cannot apply Lease {namespace}/{name} (the Role needs get/create/update/patch on leases in {namespace}): {source}"
    )]
    Apply { namespace: String, name: String, source: kube::Error },
}

impl LeasePublisher {
    pub fn new(
        client: Client,
        settings: LeaseSettings,
        registry: Arc<Registry>,
        metrics: Arc<Metrics>,
        health: Arc<crate::health::Health>,
    ) -> Self {
        LeasePublisher {
            health,
            leases: Api::namespaced(client.clone(), &settings.namespace),
            pods: Api::namespaced(client, &settings.namespace),
            settings,
            registry,
            metrics,
            pod_uid: None,
            last_truncated: None,
        }
    }

    /// Apply the Lease once.
    pub async fn publish(&mut self) -> Result<(), PublishError> {
        let uid = match &self.pod_uid {
            Some(u) => u.clone(),
            None => {
                let pod =
                    self.pods.get(&self.settings.pod_name).await.map_err(|source| PublishError::Pod {
                        namespace: self.settings.namespace.clone(),
                        pod: self.settings.pod_name.clone(),
                        source,
                    })?;
                let uid = pod.metadata.uid.unwrap_or_default();
                self.pod_uid = Some(uid.clone());
                uid
            }
        };
        let targets = self.registry.reported_targets();
        let encoded = served_lease::encode(&targets, self.settings.max_encoded_bytes);
        if self.last_truncated != Some(encoded.is_truncated()) {
            if let Encoded::Truncated { encoded_bytes, cap } = &encoded {
                tracing::warn!(
                    targets = targets.len(),
                    encoded_bytes,
                    cap,
                    "served-target set is over the cap; publishing the truncated marker, so moves onto this instance block until it shrinks or --served-targets-max-bytes grows"
                );
            }
            self.last_truncated = Some(encoded.is_truncated());
        }
        let now = MicroTime(k8s_openapi::jiff::Timestamp::now());
        let lease = desired_lease(&self.settings, &uid, &encoded, now);
        let name = dco_api::served_lease_name(&self.settings.pod_name);
        self.leases
            .patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&lease))
            .await
            .map_err(|source| PublishError::Apply {
                namespace: self.settings.namespace.clone(),
                name: name.clone(),
                source,
            })?;
        tracing::debug!(lease = %name, targets = targets.len(), truncated = encoded.is_truncated(), "published served targets");
        Ok(())
    }

    /// Publish on every registry change and every heartbeat until `stop` resolves, at most one
    /// write per [`COALESCE`]. Failures are retried after a short backoff, never fatal.
    pub async fn run(self, stop: impl std::future::Future<Output = ()>) {
        let changes = self.registry.subscribe();
        let timing = Timing {
            renew: self.settings.renew_interval,
            retry: Duration::from_secs(5).min(self.settings.renew_interval),
            coalesce: COALESCE,
        };
        drive(self, changes, stop, timing).await;
    }
}

/// The shortest time between two writes of the Lease. A change is published at once when the
/// last write is older than this, else with everything else that changed by then: during a
/// rebalance a source's sync passes drain its moving targets pass after pass, and a burst of
/// 150 moves must not become 150 writes per replica. The operator reads the set to finish each
/// move (`docs/operations.md`, "What a move costs the cluster"), so it must not wait longer.
pub const COALESCE: Duration = Duration::from_millis(250);

/// When the publisher writes.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The heartbeat with nothing changed.
    pub renew: Duration,
    /// After a failed write.
    pub retry: Duration,
    pub coalesce: Duration,
}

/// One write of the Lease, as [`drive`] sees it.
pub trait Publish {
    /// Writes the current set; whether it succeeded.
    fn publish_once(&mut self) -> impl std::future::Future<Output = bool> + Send;
}

impl Publish for LeasePublisher {
    async fn publish_once(&mut self) -> bool {
        match self.publish().await {
            Ok(()) => {
                self.metrics.lease_publishes.get_or_create(&ResultLabel { result: "ok".into() }).inc();
                self.health.mark_lease_published();
                true
            }
            Err(e) => {
                self.metrics.lease_publishes.get_or_create(&ResultLabel { result: "error".into() }).inc();
                tracing::warn!(error = %e, "cannot publish served targets; work cannot be moved onto this instance until this succeeds");
                false
            }
        }
    }
}

/// Writes at once, then on every change of `changes` (coalesced, [`COALESCE`]) and every
/// heartbeat, until `stop` resolves or the registry is gone. The first write is not delayed:
/// a new replica's first set (its share, read whole) is what lets moves onto it begin.
pub async fn drive<P: Publish>(
    mut publisher: P,
    mut changes: tokio::sync::watch::Receiver<u64>,
    stop: impl std::future::Future<Output = ()>,
    timing: Timing,
) {
    let mut stop = std::pin::pin!(stop);
    loop {
        changes.mark_unchanged();
        let wrote = tokio::time::Instant::now();
        let wait = if publisher.publish_once().await { timing.renew } else { timing.retry };
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep(wait) => continue,
            changed = changes.changed() => if changed.is_err() { return },
        }
        // Changed: written with whatever else changes until a gap after the last write.
        tokio::select! {
            () = &mut stop => return,
            () = tokio::time::sleep_until(wrote + timing.coalesce) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dco_api::{ANNOTATION_SERVED_TARGETS, ANNOTATION_SERVED_TRUNCATED};

    fn settings() -> LeaseSettings {
        LeaseSettings {
            pod_name: "pool-a-7d9f-x2k".into(),
            namespace: "dco-system".into(),
            instance: "pool-a".into(),
            renew_interval: Duration::from_secs(30),
            lease_duration: Duration::from_secs(90),
            max_encoded_bytes: served_lease::DEFAULT_MAX_ENCODED_BYTES,
        }
    }

    #[test]
    fn lease_is_named_labelled_owned_and_carries_the_set() {
        let enc = served_lease::encode(["b.example.org", "a.example.org"], 1 << 20);
        let now = MicroTime(k8s_openapi::jiff::Timestamp::UNIX_EPOCH);
        let l = desired_lease(&settings(), "uid-1", &enc, now.clone());
        assert_eq!(l.metadata.name.as_deref(), Some("dco-served-pool-a-7d9f-x2k"));
        assert_eq!(l.metadata.namespace.as_deref(), Some("dco-system"));
        let labels = l.metadata.labels.unwrap();
        assert_eq!(labels[LABEL_INSTANCE], "pool-a");
        assert_eq!(labels[LABEL_MANAGED_BY], "dco");
        let owner = &l.metadata.owner_references.unwrap()[0];
        assert_eq!(
            (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
            ("Pod", "pool-a-7d9f-x2k", "uid-1")
        );
        let ann = l.metadata.annotations.unwrap();
        assert!(!ann.contains_key(ANNOTATION_SERVED_TRUNCATED));
        let set = served_lease::decode(&ann[ANNOTATION_SERVED_TARGETS]).unwrap();
        assert_eq!(set.into_iter().collect::<Vec<_>>(), ["a.example.org", "b.example.org"]);
        let spec = l.spec.unwrap();
        assert_eq!(spec.renew_time, Some(now));
        assert_eq!(spec.lease_duration_seconds, Some(90));
        assert_eq!(spec.holder_identity.as_deref(), Some("pool-a-7d9f-x2k"));
    }

    /// When each write happened and which registry version it carried.
    type Writes = Arc<std::sync::Mutex<Vec<(std::time::Instant, u64)>>>;

    struct Recorder {
        changes: tokio::sync::watch::Receiver<u64>,
        writes: Writes,
    }

    impl Publish for Recorder {
        async fn publish_once(&mut self) -> bool {
            let seen = *self.changes.borrow();
            self.writes.lock().unwrap().push((std::time::Instant::now(), seen));
            true
        }
    }

    fn recorder() -> (tokio::sync::watch::Sender<u64>, Recorder, tokio::sync::watch::Receiver<u64>, Writes) {
        let (tx, rx) = tokio::sync::watch::channel(0u64);
        let writes = Arc::new(std::sync::Mutex::new(Vec::new()));
        (tx, Recorder { changes: rx.clone(), writes: writes.clone() }, rx, writes)
    }

    const TIMING: Timing =
        Timing { renew: Duration::from_secs(60), retry: Duration::from_secs(5), coalesce: COALESCE };

    #[tokio::test]
    async fn a_burst_of_changes_is_written_a_few_times_and_the_last_one_within_the_gap() {
        let (tx, rec, rx, writes) = recorder();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(drive(rec, rx, async move { drop(stop_rx.await) }, TIMING));
        // 150 moves drained one pass after another over about 1.5 s.
        let first_change = std::time::Instant::now();
        for v in 1..=150u64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            tx.send_replace(v);
        }
        let last_change = std::time::Instant::now();
        tokio::time::sleep(COALESCE * 2).await;
        let _ = stop_tx.send(());
        task.await.unwrap();
        let writes = writes.lock().unwrap().clone();
        // The first write, then at most one per gap over the burst (its length as it ran: a
        // loaded machine stretches the sleeps) and one more for its end.
        let gaps = (last_change - first_change).as_millis() / COALESCE.as_millis();
        let most = 2 + usize::try_from(gaps).unwrap();
        assert!(writes.len() <= most, "{} writes for 150 changes over {gaps} gaps", writes.len());
        assert!(writes.len() >= 3, "the burst was not written as it went: {} writes", writes.len());
        for w in writes.windows(2) {
            let gap = w[1].0 - w[0].0;
            assert!(gap >= COALESCE - Duration::from_millis(5), "two writes {gap:?} apart");
        }
        let (at, version) = *writes.last().unwrap();
        assert_eq!(version, 150, "the last write carries the last change");
        assert!(at.saturating_duration_since(last_change) <= COALESCE + Duration::from_millis(200));
    }

    #[tokio::test]
    async fn a_change_after_a_quiet_spell_is_written_at_once() {
        let (tx, rec, rx, writes) = recorder();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn(drive(rec, rx, async move { drop(stop_rx.await) }, TIMING));
        tokio::time::sleep(COALESCE + Duration::from_millis(50)).await;
        let changed = std::time::Instant::now();
        tx.send_replace(1);
        tokio::time::sleep(Duration::from_millis(200)).await;
        let _ = stop_tx.send(());
        task.await.unwrap();
        let writes = writes.lock().unwrap().clone();
        assert_eq!(writes.len(), 2, "the first write and the change");
        assert_eq!(writes[1].1, 1);
        assert!(writes[1].0 - changed < Duration::from_millis(150), "waited {:?}", writes[1].0 - changed);
    }

    #[tokio::test]
    async fn with_nothing_changed_it_writes_at_each_heartbeat() {
        let (_tx, rec, rx, writes) = recorder();
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let timing = Timing { renew: Duration::from_millis(100), ..TIMING };
        let task = tokio::spawn(drive(rec, rx, async move { drop(stop_rx.await) }, timing));
        tokio::time::sleep(Duration::from_millis(450)).await;
        let _ = stop_tx.send(());
        task.await.unwrap();
        let n = writes.lock().unwrap().len();
        assert!((3..=6).contains(&n), "{n} writes in 450 ms at a 100 ms heartbeat");
    }

    #[test]
    fn truncated_lease_has_the_marker_and_no_set() {
        let enc = served_lease::encode(["a.example.org"], 4);
        let l =
            desired_lease(&settings(), "uid-1", &enc, MicroTime(k8s_openapi::jiff::Timestamp::UNIX_EPOCH));
        let ann = l.metadata.annotations.unwrap();
        assert_eq!(ann.get(ANNOTATION_SERVED_TRUNCATED).map(String::as_str), Some("true"));
        assert!(!ann.contains_key(ANNOTATION_SERVED_TARGETS));
    }
}
