//! What a replica keeps of each watched config (`docs/webhook.md`, "Targets read whole"): every
//! replica watches every config in scope, its own server's share or not, so what it stores of
//! one is paid once per config in the cluster, not per target it serves. It keeps what the
//! share (`share.rs`), the hold rule (`sync::MovedFrom`) and the sync pass (`caches::world`)
//! read: the metadata's name, uid and generation (and resourceVersion), the spec,
//! `status.assignedWebhookServer` and the handover's state, ends, start and trace. The rest of the status (spoke statuses, rule
//! results, conditions, messages: most of a settled config's bytes), the annotations (a
//! client-side `kubectl apply` copies the whole spec into one), the labels (the watch's
//! selector is the apiserver's to apply), finalizers, owner references and `managedFields`
//! are the operator's and the user's, read by no replica, and are dropped as each object
//! arrives, before the reflector stores it.

use dco_api::{CRDConversionConfig, ConfigStatus, HandoverStatus, XRDConversionConfig};
use kube::Resource;

/// A config kind whose status this module narrows.
pub trait WithStatus: Resource {
    fn status_mut(&mut self) -> &mut Option<ConfigStatus>;
}

impl WithStatus for CRDConversionConfig {
    fn status_mut(&mut self) -> &mut Option<ConfigStatus> {
        &mut self.status
    }
}

impl WithStatus for XRDConversionConfig {
    fn status_mut(&mut self) -> &mut Option<ConfigStatus> {
        &mut self.status
    }
}

/// Narrows `c` to what a replica reads (the reflector's `modify`). A field a replica starts
/// to read must be kept here: the stores never see the rest.
pub fn config<C: WithStatus>(c: &mut C) {
    let meta = c.meta_mut();
    meta.managed_fields = None;
    meta.annotations = None;
    meta.labels = None;
    meta.finalizers = None;
    meta.owner_references = None;
    let status = c.status_mut();
    *status = status.take().map(placement);
}

/// The placement and handover parts of a status: what `dco_api::placement::Placement::of` and
/// `sync::MovedFrom::of` read.
fn placement(s: ConfigStatus) -> ConfigStatus {
    ConfigStatus {
        assigned_webhook_server: s.assigned_webhook_server,
        handover: s.handover.map(|h| HandoverStatus {
            state: h.state,
            source: h.source,
            destination: h.destination,
            since: h.since,
            traceparent: h.traceparent,
            ..HandoverStatus::default()
        }),
        ..ConfigStatus::default()
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use dco_api::HandoverState;
    use dco_api::assign::{ServerInfo, Servers};
    use dco_api::config::ConversionConfig;
    use dco_api::config::{Phase, RevertStatus};
    use proptest::prelude::*;

    use super::*;
    use crate::share::{Candidate, Share};
    use crate::sync::MovedFrom;

    const SERVERS: [&str; 4] = ["s0", "s1", "s2", "s3"];

    fn arb_server() -> impl Strategy<Value = Option<String>> {
        proptest::option::of(proptest::sample::select(&SERVERS[..]).prop_map(str::to_string))
    }

    fn arb_state() -> impl Strategy<Value = HandoverState> {
        proptest::sample::select(vec![
            HandoverState::Unassigned,
            HandoverState::Compiling,
            HandoverState::DestinationReady,
            HandoverState::Patched,
            HandoverState::SourceDropped,
        ])
    }

    /// Seconds ago a move's state began, or an unparsable or absent `since`.
    fn arb_since() -> impl Strategy<Value = Option<String>> {
        let now = k8s_openapi::jiff::Timestamp::now();
        prop_oneof![
            Just(None),
            Just(Some("not a time".to_string())),
            (0i64..120).prop_map(move |ago| Some(
                (now - k8s_openapi::jiff::SignedDuration::from_secs(ago)).to_string()
            )),
        ]
    }

    prop_compose! {
        fn arb_handover()(
            state in arb_state(), source in arb_server(), destination in arb_server(), since in arb_since(),
            attempt in 0u32..5, traceparent in proptest::option::of("00-[0-9a-f]{32}-[0-9a-f]{16}-01"),
            message in proptest::option::of(".{0,40}"), unverified in any::<bool>(),
        ) -> HandoverStatus {
            HandoverStatus { state, source, destination, since, attempt, traceparent, message, unverified }
        }
    }

    prop_compose! {
        /// A status with everything the operator writes, the parts a replica drops filled in.
        fn arb_status()(
            assigned in arb_server(), handover in proptest::option::of(arb_handover()),
            message in proptest::option::of(".{0,80}"), noise in 0usize..4,
        ) -> ConfigStatus {
            ConfigStatus {
                observed_generation: Some(3),
                observed_target_generation: Some(7),
                schema_hash: Some("f".repeat(64)),
                phase: Some(Phase::Applied),
                assigned_webhook_server: assigned,
                webhook_path: Some("/convert/t.example.org".into()),
                overall_lossless: Some(true),
                spoke_statuses: serde_json::from_value(serde_json::Value::Array(vec![
                    serde_json::json!({"version": "v1", "lossless": {"hubToSpoke": true, "spokeToHub": true},
                        "warnings": ["a spoke warning"]});
                    noise
                ]))
                .unwrap(),
                last_applied_plan_hash: Some("a".repeat(64)),
                message,
                handover,
                reverts: (noise > 1).then(|| RevertStatus { count: 2, ..RevertStatus::default() }),
                ..ConfigStatus::default()
            }
        }
    }

    fn ccc(pin: Option<&str>, status: Option<ConfigStatus>) -> CRDConversionConfig {
        let mut c: CRDConversionConfig = serde_json::from_value(serde_json::json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": "c", "uid": "u-1", "generation": 4,
                "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{...}"},
                "labels": {"team": "a"}, "finalizers": ["conversion.dco.rs/safe-revert"],
                "managedFields": [{"manager": "kubectl", "operation": "Apply"}]},
            "spec": {"targetCRD": {"name": "t.example.org"}, "hubVersion": "v2",
                "spokes": [{"version": "v1", "rules": []}]},
        }))
        .unwrap();
        c.spec.conversion.webhook_server_ref =
            pin.map(|p| serde_json::from_value(serde_json::json!({"name": p})).unwrap());
        c.status = status;
        c
    }

    /// Every decision a replica takes from one config, on each server.
    fn decisions(c: &CRDConversionConfig, servers: &Servers, now: SystemTime) -> Vec<String> {
        let moved_from = c.handover().and_then(MovedFrom::of);
        let placement = c.placement();
        let candidate = Candidate {
            target: c.target_name(),
            pin: c.conversion().webhook_server_ref.as_ref().map(|r| r.name.as_str()),
            placement: &placement,
            moved_from: moved_from.as_ref(),
        };
        let mut out = vec![format!("{placement:?} {moved_from:?}")];
        for s in SERVERS {
            let share = Share { instance: s, servers, drain: Duration::from_secs(30) };
            out.push(format!("{s}: {:?} {:?}", share.why(&candidate, now), share.expires(&candidate, now)));
            out.push(format!(
                "{s} holds: {:?}",
                moved_from.as_ref().map(|m| m.holds(s, Duration::from_secs(30), now))
            ));
        }
        let view = crate::caches::config_view("CRDConversionConfig", c);
        out.push(format!(
            "{} {} {:?} {} {:?}",
            view.name, view.target, view.spec, view.fingerprint, view.moved_from
        ));
        out
    }

    proptest! {
        /// The share, the hold rule's move window and the pass's view of a config are the
        /// same whether the replica stored it whole or narrowed.
        #[test]
        fn a_narrowed_config_decides_as_the_whole_one(
            status in proptest::option::of(arb_status()),
            pin in proptest::option::of(proptest::sample::select(&SERVERS[..])),
            members in 0usize..=SERVERS.len(),
        ) {
            let servers = Servers::new(SERVERS[..members].iter().map(|n| ServerInfo {
                name: n.to_string(), default: false, pool_weight: Some(1),
            }));
            let whole = ccc(pin, status);
            let mut kept = whole.clone();
            config(&mut kept);
            let now = SystemTime::now();
            prop_assert_eq!(decisions(&kept, &servers, now), decisions(&whole, &servers, now));
            prop_assert!(kept.metadata.managed_fields.is_none() && kept.metadata.annotations.is_none());
            prop_assert!(kept.metadata.labels.is_none() && kept.metadata.finalizers.is_none());
            let bytes = |c: &CRDConversionConfig| serde_json::to_vec(c).unwrap().len();
            prop_assert!(bytes(&kept) < bytes(&whole));
        }
    }

    #[test]
    fn only_the_placement_and_the_handover_are_kept_of_a_status() {
        let mut c = ccc(
            None,
            Some(ConfigStatus {
                phase: Some(Phase::Applied),
                message: Some("applied".into()),
                assigned_webhook_server: Some("s1".into()),
                handover: Some(HandoverStatus {
                    state: HandoverState::Patched,
                    source: Some("s0".into()),
                    destination: Some("s1".into()),
                    since: Some("2026-12-03T08:00:00Z".into()),
                    attempt: 2,
                    traceparent: Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into()),
                    message: Some("patched".into()),
                    unverified: true,
                }),
                ..ConfigStatus::default()
            }),
        );
        config(&mut c);
        let status = serde_json::to_value(c.status.unwrap()).unwrap();
        assert_eq!(
            status,
            serde_json::json!({
                "assignedWebhookServer": "s1",
                "handover": {"state": "Patched", "source": "s0", "destination": "s1",
                    "since": "2026-12-03T08:00:00Z", "attempt": 0,
                    "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"},
            })
        );
        assert_eq!(
            (c.metadata.name.as_deref(), c.metadata.uid.as_deref(), c.metadata.generation),
            (Some("c"), Some("u-1"), Some(4))
        );
    }
}
