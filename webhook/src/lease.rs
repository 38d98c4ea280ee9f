//! The served-target Lease publisher (`docs/webhook.md`): `dco-served-<pod>` in the replica's
//! namespace, labelled with the instance and `app.kubernetes.io/managed-by`, owned by the
//! Pod (garbage-collected with it), carrying the sorted set of targets this replica holds a
//! servable plan for, renewed every heartbeat and republished at once on any registry change.
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

    /// Publish on every registry change and every heartbeat until `stop` resolves. Failures
    /// are retried after a short backoff, never fatal.
    pub async fn run(mut self, stop: impl std::future::Future<Output = ()>) {
        let mut changes = self.registry.subscribe();
        let mut stop = std::pin::pin!(stop);
        let retry = Duration::from_secs(5).min(self.settings.renew_interval);
        loop {
            changes.mark_unchanged();
            let wait = match self.publish().await {
                Ok(()) => {
                    self.metrics.lease_publishes.get_or_create(&ResultLabel { result: "ok".into() }).inc();
                    self.health.mark_lease_published();
                    self.settings.renew_interval
                }
                Err(e) => {
                    self.metrics.lease_publishes.get_or_create(&ResultLabel { result: "error".into() }).inc();
                    tracing::warn!(error = %e, "cannot publish served targets; work cannot be moved onto this instance until this succeeds");
                    retry
                }
            };
            tokio::select! {
                () = &mut stop => return,
                () = tokio::time::sleep(wait) => {}
                changed = changes.changed() => if changed.is_err() { return },
            }
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
