//! The metrics the alerts read (charts/dco/files/prometheus-rules.yaml), computed from the
//! caches at each scrape (docs/operations.md, "Metrics"): for each config of the shards this
//! replica holds, its phase, whether it compiles, its handover's state and since when, since
//! when its handover has not been ready, and how many replicas of the server its target is
//! wired to report it; for each server it holds,
//! when its serving certificate expires and how many replicas it wants and has ready; since
//! when each config has not been applied; and when the admission certificate this replica
//! serves expires; and how many of the operator's shards have no live owner, as this
//! replica's Coordinator saw them at its last tick. Read at scrape time rather than kept as gauges, so a deleted config or a
//! shard that moved to another replica leaves no stale series behind, and the families are
//! listed (empty) before the caches exist.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, OnceLock};

use dco_api::{ConversionWebhookServer, HandoverState};
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use k8s_openapi::jiff::Timestamp;
use kube::Resource;
use kube::runtime::reflector::{ObjectRef, Store};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet};
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;

use crate::admission::serve::CertResolver;
use crate::context::Stores;
use crate::kinds::ConfigKind;
use crate::names::ServerNames;
use crate::sharding::gate::Gate;

/// What the collector reads, once the wiring has made it (runtime/health.rs).
pub struct Source {
    pub stores: Stores,
    pub gate: Gate,
    /// `--namespace`: where a server without `spec.namespace` runs (ServerNames).
    pub namespace: String,
    /// The Coordinator's view after its last tick (sharding/leases.rs).
    pub membership: tokio::sync::watch::Receiver<crate::sharding::leases::Snapshot>,
}

/// The admission certificate this replica serves, and the Secret it comes from.
pub struct AdmissionCertificate {
    pub secret: String,
    pub certs: Arc<CertResolver>,
}

/// The collector (registered and fed by runtime/health.rs).
#[derive(Default)]
pub struct StatusMetrics {
    source: OnceLock<Source>,
    admission: OnceLock<AdmissionCertificate>,
}

impl std::fmt::Debug for StatusMetrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StatusMetrics")
    }
}

impl StatusMetrics {
    pub fn set_source(&self, source: Source) {
        let _ = self.source.set(source);
    }

    pub fn set_admission(&self, admission: AdmissionCertificate) {
        let _ = self.admission.set(admission);
    }

    /// The rows at `now`.
    pub fn observe(&self, now: Timestamp) -> Rows {
        let mut rows = Rows::default();
        if let Some(s) = self.source.get() {
            configs(s, &s.stores.cccs, now, &mut rows);
            configs(s, &s.stores.xccs, now, &mut rows);
            server_certificates(s, &mut rows);
            server_replicas(s, &mut rows);
            let snap = s.membership.borrow();
            if snap.at.is_some() {
                rows.shards = Some((snap.shards, unowned(&snap)));
            }
        }
        if let Some(a) = self.admission.get()
            && let Some(key) = a.certs.current()
            && let Some(leaf) = key.cert.first()
            && let Ok((_, cert)) = x509_parser::parse_x509_certificate(leaf.as_ref())
        {
            rows.certificates.push(CertRow {
                labels: CertLabels { usage: "admission", secret: a.secret.clone(), server: String::new() },
                not_after: cert.validity().not_after.timestamp(),
            });
        }
        rows
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConfigLabels {
    pub kind: &'static str,
    pub target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PhaseLabels {
    pub kind: &'static str,
    pub target: String,
    pub phase: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HandoverLabels {
    pub kind: &'static str,
    pub target: String,
    pub state: String,
    pub destination: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotReadyLabels {
    pub kind: &'static str,
    pub target: String,
    pub state: String,
    /// The `HandoverReady` condition's reason (e.g. `AwaitingDestination`).
    pub reason: String,
    /// `status.assignedWebhookServer` (else the handover's destination).
    pub destination: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotPropagatedLabels {
    pub kind: &'static str,
    pub target: String,
    /// The `ConversionPropagated` condition's reason (`CRDDiffers`, …).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct NotAppliedLabels {
    pub kind: &'static str,
    pub target: String,
    /// The reason of the condition that says why ([`not_applied`]).
    pub reason: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServerLabel {
    pub server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ServingLabels {
    pub kind: &'static str,
    pub target: String,
    pub server: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CertLabels {
    /// `webhook` (a server's serving certificate) or `admission`.
    pub usage: &'static str,
    /// `<namespace>/<name>` of the Secret.
    pub secret: String,
    /// The ConversionWebhookServer (empty for the admission certificate).
    pub server: String,
}

#[derive(Clone, Debug, PartialEq)]
pub struct CertRow {
    pub labels: CertLabels,
    /// Unix seconds.
    pub not_after: i64,
}

/// One scrape's worth of series.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    pub phases: Vec<PhaseLabels>,
    pub compile_failed: Vec<(ConfigLabels, bool)>,
    /// When the current state was entered (`status.handover.since`), Unix seconds.
    pub handovers: Vec<(HandoverLabels, f64)>,
    /// Since when `HandoverReady` has been False (its lastTransitionTime, which only a change
    /// of its status moves: a move's start, or the moment it was blocked), Unix seconds.
    pub not_ready: Vec<(NotReadyLabels, f64)>,
    pub serving: Vec<(ServingLabels, i32)>,
    /// XRD configs: whether `ConversionPropagated` is True.
    pub propagated: Vec<(ConfigLabels, bool)>,
    /// XRD configs wired but not propagated: since when (the condition's lastTransitionTime).
    pub not_propagated: Vec<(NotPropagatedLabels, f64)>,
    pub certificates: Vec<CertRow>,
    /// Configs not applied ([`not_applied`]): since when, Unix seconds.
    pub not_applied: Vec<(NotAppliedLabels, f64)>,
    /// Each server's `(desired, ready)` replicas ([`desired_replicas`], `status.readyReplicas`).
    pub server_replicas: Vec<(ServerLabel, i32, i32)>,
    /// `(shards, shards without a live owner)` after the Coordinator's last tick.
    pub shards: Option<(u32, usize)>,
}

/// Shards whose Lease is free or held by a replica that is not a live member (its member
/// Lease expired): nobody reconciles their objects until a live replica takes them.
pub fn unowned(snap: &crate::sharding::leases::Snapshot) -> usize {
    (0..snap.shards)
        .filter(|i| match snap.owners.get(i) {
            Some(Some(holder)) => !snap.live.contains(holder),
            _ => true,
        })
        .count()
}

fn state_name(s: HandoverState) -> &'static str {
    match s {
        HandoverState::Unassigned => "Unassigned",
        HandoverState::Compiling => "Compiling",
        HandoverState::DestinationReady => "DestinationReady",
        HandoverState::Patched => "Patched",
        HandoverState::SourceDropped => "SourceDropped",
    }
}

fn configs<K: ConfigKind>(s: &Source, store: &Store<K>, now: Timestamp, rows: &mut Rows) {
    let leases = s.stores.leases.state();
    for c in store.state() {
        // The store holds the shards this replica holds (sharding/sharded_watch.rs); the check keeps a
        // config out for the moment a relist is still swapping it.
        if !s.gate.holds(c.meta().uid.as_deref()) {
            continue;
        }
        let Some(st) = c.config_status() else { continue };
        let (kind, target) = (K::KIND, c.target_name().to_string());
        if let Some(p) = st.phase {
            rows.phases.push(PhaseLabels { kind, target: target.clone(), phase: format!("{p:?}") });
        }
        let condition = |t: &str| st.conditions.iter().find(|c| c.type_ == t);
        if let Some(v) = condition(crate::config::condition::VALIDATED) {
            rows.compile_failed.push((ConfigLabels { kind, target: target.clone() }, v.status == "False"));
        }
        if let Some(p) = condition(crate::config::condition::CONVERSION_PROPAGATED) {
            rows.propagated.push((ConfigLabels { kind, target: target.clone() }, p.status == "True"));
            // NotWired: nothing of dco's to propagate, so nothing lags.
            if p.status == "False" && p.reason != crate::config::propagation::reason::NOT_WIRED {
                let labels = NotPropagatedLabels { kind, target: target.clone(), reason: p.reason.clone() };
                rows.not_propagated.push((labels, seconds(p.last_transition_time.0)));
            }
        }
        if let Some((reason, since)) = not_applied(&st.conditions) {
            let labels = NotAppliedLabels { kind, target: target.clone(), reason };
            rows.not_applied.push((labels, seconds(since)));
        }
        let Some(h) = &st.handover else { continue };
        let (state, destination) =
            (state_name(h.state).to_string(), h.destination.clone().unwrap_or_default());
        if let Some(since) = h.since.as_deref().and_then(|t| t.parse::<Timestamp>().ok()) {
            let labels = HandoverLabels {
                kind,
                target: target.clone(),
                state: state.clone(),
                destination: destination.clone(),
            };
            rows.handovers.push((labels, seconds(since)));
        }
        if let Some(c) = condition(dco_state::handover::CONDITION).filter(|c| c.status == "False") {
            // Where the target should go: a move that cannot start (a pin to a server that is
            // not Available) still has the old server as its handover's destination.
            let destination = st.assigned_webhook_server.clone().unwrap_or(destination);
            let labels =
                NotReadyLabels { kind, target: target.clone(), state, reason: c.reason.clone(), destination };
            rows.not_ready.push((labels, seconds(c.last_transition_time.0)));
        }
        // The server the target's spec.conversion names, as the machine recorded it: the
        // destination from Patched on, the source before (docs/operations.md, "How a target
        // is wired and moved"). A foreign webhook or strategy None is no dco server.
        let wired = match h.state {
            HandoverState::Patched | HandoverState::SourceDropped => h.destination.as_deref(),
            _ => h.source.as_deref(),
        };
        let Some(server) = wired else { continue };
        let n = match s.stores.servers.get(&ObjectRef::new(server)) {
            // A server that is gone leaves nothing running behind its Service.
            None => Some(0),
            Some(srv) => {
                let names = ServerNames::of(&srv, &s.namespace);
                let ready = srv.status.as_ref().map_or(0, |st| st.ready_replicas);
                crate::served::reporting(
                    leases.iter().map(AsRef::as_ref),
                    server,
                    &names.namespace,
                    &target,
                    ready,
                    now,
                )
            }
        };
        if let Some(n) = n {
            rows.serving.push((ServingLabels { kind, target, server: server.to_string() }, n));
        }
    }
}

/// Why and since when a config is not applied, or `None` while it is. `Applied` False says it
/// (the wiring names a server that is gone, is being redone, was reverted or has not
/// propagated); a config never applied has no `Applied` yet, and the first of `TargetHealthy`
/// (the target missing or not Established), `Validated`, `WebhookServerReady` and
/// `HandoverReady` that is False says why. Since: that condition's `lastTransitionTime`.
pub fn not_applied(conditions: &[Condition]) -> Option<(String, Timestamp)> {
    use crate::config::condition as c;
    let find = |t: &str| conditions.iter().find(|x| x.type_ == t);
    let blocking = match find(c::APPLIED) {
        Some(a) if a.status == "True" => return None,
        Some(a) => Some(a),
        None => [c::TARGET_HEALTHY, c::VALIDATED, c::WEBHOOK_SERVER_READY, dco_state::handover::CONDITION]
            .into_iter()
            .find_map(|t| find(t).filter(|x| x.status == "False")),
    }?;
    Some((blocking.reason.clone(), blocking.last_transition_time.0))
}

fn seconds(t: Timestamp) -> f64 {
    t.as_millisecond() as f64 / 1000.0
}

/// The expiry of `tls.crt` (the leaf, its first certificate) in PEM.
pub fn leaf_not_after(pem: &[u8]) -> Option<i64> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    Some(p.parse_x509().ok()?.validity().not_after.timestamp())
}

fn server_certificates(s: &Source, rows: &mut Rows) {
    for srv in s.stores.servers.state() {
        if !s.gate.holds(srv.meta().uid.as_deref()) {
            continue;
        }
        let names = ServerNames::of(&srv, &s.namespace);
        let secret: Option<Arc<Secret>> =
            s.stores.secrets.get(&ObjectRef::new(&names.tls_secret).within(&names.namespace));
        let pem = secret.as_ref().and_then(|s| s.data.as_ref()?.get(crate::pki::TLS_CRT).cloned());
        if let Some(not_after) = pem.and_then(|p| leaf_not_after(&p.0)) {
            rows.certificates.push(CertRow {
                labels: CertLabels {
                    usage: "webhook",
                    secret: format!("{}/{}", names.namespace, names.tls_secret),
                    server: server_name(&srv),
                },
                not_after,
            });
        }
    }
}

/// The replicas a server asks for: `spec.replicas`, or with `spec.autoscaling` the count its
/// HPA keeps (the Deployment's replicas, within the HPA's bounds).
pub fn desired_replicas(s: &ConversionWebhookServer) -> i32 {
    match &s.spec.autoscaling {
        None => s.spec.replicas,
        Some(a) => {
            let running = s.status.as_ref().map_or(0, |st| st.replicas);
            running.clamp(a.min_replicas, a.max_replicas.max(a.min_replicas))
        }
    }
}

fn server_replicas(s: &Source, rows: &mut Rows) {
    for srv in s.stores.servers.state() {
        if !s.gate.holds(srv.meta().uid.as_deref()) {
            continue;
        }
        let ready = srv.status.as_ref().map_or(0, |st| st.ready_replicas);
        rows.server_replicas.push((ServerLabel { server: server_name(&srv) }, desired_replicas(&srv), ready));
    }
}

fn server_name(s: &ConversionWebhookServer) -> String {
    s.meta().name.clone().unwrap_or_default()
}

/// Registered as a collector: read at each scrape.
impl crate::observability::metrics::Register for Arc<StatusMetrics> {
    fn register(&self, registry: &mut prometheus_client::registry::Registry) {
        registry.register_collector(Box::new(self.clone()));
    }
}

impl Collector for StatusMetrics {
    fn encode(&self, mut encoder: DescriptorEncoder) -> Result<(), std::fmt::Error> {
        let rows = self.observe(Timestamp::now());
        encode_gauges(
            &mut encoder,
            "config_phase",
            "1 for each config's status.phase, by config kind and target",
            rows.phases.into_iter().map(|l| (l, 1)),
        )?;
        encode_gauges(
            &mut encoder,
            "config_compile_failed",
            "1 while a config's rules do not compile against its target's live schemas (Validated=False), else 0",
            rows.compile_failed.into_iter().map(|(l, f)| (l, i64::from(f))),
        )?;
        encode_timestamps(
            &mut encoder,
            "handover_state_entered_timestamp_seconds",
            "When each config's handover entered its current state (status.handover.since), by state and destination",
            rows.handovers,
        )?;
        encode_timestamps(
            &mut encoder,
            "handover_not_ready_since_timestamp_seconds",
            "Since when a config's HandoverReady condition has been False (a move started or was blocked), by state, reason and destination; absent while it is True",
            rows.not_ready,
        )?;
        encode_gauges(
            &mut encoder,
            "config_propagated",
            "XRD configs: 1 while every CRD Crossplane generated from the XRD carries dco's wiring (ConversionPropagated=True), else 0",
            rows.propagated.into_iter().map(|(l, p)| (l, i64::from(p))),
        )?;
        encode_timestamps(
            &mut encoder,
            "config_not_propagated_since_timestamp_seconds",
            "XRD configs wired by dco whose generated CRDs do not carry the wiring: since when (ConversionPropagated's lastTransitionTime), by reason",
            rows.not_propagated,
        )?;
        encode_timestamps(
            &mut encoder,
            "config_not_applied_since_timestamp_seconds",
            "Since when a config has not been applied (Applied False, or never applied: the first False of TargetHealthy, Validated, WebhookServerReady, HandoverReady), by that condition's reason; absent while Applied is True",
            rows.not_applied,
        )?;
        encode_gauges(
            &mut encoder,
            "server_replicas_desired",
            "Replicas a ConversionWebhookServer asks for (spec.replicas, or its HPA's count within spec.autoscaling)",
            rows.server_replicas.iter().map(|(l, d, _)| (l.clone(), i64::from(*d))),
        )?;
        encode_gauges(
            &mut encoder,
            "server_replicas_ready",
            "Ready replicas of a ConversionWebhookServer's Deployment (status.readyReplicas)",
            rows.server_replicas.into_iter().map(|(l, _, r)| (l, i64::from(r))),
        )?;
        encode_gauges(
            &mut encoder,
            "target_serving_replicas",
            "Live replicas of the server a target is wired to whose served-target Lease lists it (absent when the Leases cannot tell)",
            rows.serving.into_iter().map(|(l, n)| (l, i64::from(n))),
        )?;
        for (name, help, value) in [
            ("shards", "Shards of the operator's work (--shards)", rows.shards.map(|s| i64::from(s.0))),
            (
                "unowned_shards",
                "Shards whose Lease is free or held by a replica that is no longer a live member, at this replica's last coordinator tick",
                rows.shards.map(|s| i64::try_from(s.1).unwrap_or(i64::MAX)),
            ),
        ] {
            let m =
                encoder.encode_descriptor(name, help, None, prometheus_client::metrics::MetricType::Gauge)?;
            if let Some(v) = value {
                prometheus_client::encoding::EncodeMetric::encode(
                    &prometheus_client::metrics::gauge::ConstGauge::new(v),
                    m,
                )?;
            }
        }
        encode_gauges(
            &mut encoder,
            "certificate_expiration_timestamp_seconds",
            "When a serving certificate the operator manages expires (notAfter of tls.crt), by usage, Secret and server",
            rows.certificates.into_iter().map(|c| (c.labels, c.not_after)),
        )
    }
}

/// A gauge family of `rows`, encoded (an empty family is still listed).
fn encode_gauges<L>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, i64)>,
) -> Result<(), std::fmt::Error>
where
    Family<L, Gauge>: prometheus_client::encoding::EncodeMetric,
    L: Clone + std::hash::Hash + Eq,
{
    let family = Family::<L, Gauge>::default();
    for (l, v) in rows {
        family.get_or_create(&l).set(v);
    }
    dco_api::metrics::encode_family(encoder, name, help, &family)
}

/// [`encode_gauges`] of Unix times in seconds.
fn encode_timestamps<L>(
    encoder: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    rows: impl IntoIterator<Item = (L, f64)>,
) -> Result<(), std::fmt::Error>
where
    Family<L, Gauge<f64, AtomicU64>>: prometheus_client::encoding::EncodeMetric,
    L: Clone + std::hash::Hash + Eq,
{
    let family = Family::<L, Gauge<f64, AtomicU64>>::default();
    for (l, v) in rows {
        family.get_or_create(&l).set(v);
    }
    dco_api::metrics::encode_family(encoder, name, help, &family)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::collections::BTreeMap;

    use dco_api::served_lease::{DEFAULT_MAX_ENCODED_BYTES, encode};
    use k8s_openapi::api::coordination::v1::Lease;
    use kube::runtime::reflector;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    const NOW: i64 = 1_800_000_000;

    fn ts(secs: i64) -> Timestamp {
        Timestamp::from_second(NOW + secs).unwrap()
    }

    fn config(name: &str, target: &str, status: serde_json::Value) -> dco_api::CRDConversionConfig {
        serde_json::from_value(json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"targetCRD": {"name": target}, "hubVersion": "v2", "spokes": []},
            "status": status,
        }))
        .unwrap()
    }

    fn server(name: &str, ready: i32) -> ConversionWebhookServer {
        serde_json::from_value(json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name, "uid": format!("uid-{name}")},
            "spec": {"namespace": "dco-system", "replicas": 3},
            "status": {"readyReplicas": ready},
        }))
        .unwrap()
    }

    fn served_lease(pod: &str, instance: &str, targets: &[&str]) -> Lease {
        let annotations: BTreeMap<String, String> = encode(targets.iter(), DEFAULT_MAX_ENCODED_BYTES)
            .annotations()
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        serde_json::from_value(json!({
            "metadata": {"name": format!("dco-served-{pod}"), "namespace": "dco-system",
                "labels": {dco_api::LABEL_INSTANCE: instance}, "annotations": annotations},
            "spec": {"renewTime": ts(-5).to_string(), "leaseDurationSeconds": 30},
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str, reason: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": reason, "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    /// A store of `objects`, as a reflector would hold them.
    fn store<K>(objects: Vec<K>) -> Store<K>
    where
        K: Resource<DynamicType = ()>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned
            + Send
            + Sync
            + 'static,
    {
        let (store, mut w) = reflector::store();
        w.apply_watcher_event(&Event::Init);
        for o in objects {
            w.apply_watcher_event(&Event::InitApply(o));
        }
        w.apply_watcher_event(&Event::InitDone);
        store
    }

    /// Three configs (settled on a; moving from a gone b, not compiling; wired to a, which
    /// does not report it), server a with two replicas and its serving Secret, and a
    /// Coordinator view with one dead and one free shard of 4. Also the leaf's expiry.
    pub(crate) fn fixture_source() -> (Source, i64) {
        let settled = config(
            "settled",
            "widgets.example.org",
            json!({
                "phase": "Applied",
                "conditions": [condition("Validated", "True", "Compiled"), condition("HandoverReady", "True", "HandoverReady"), condition("Applied", "True", "Wired")],
                "handover": {"state": "SourceDropped", "destination": "a", "since": ts(-3600).to_string(), "attempt": 1},
            }),
        );
        // Moving from b (gone: nothing serves behind its Service) to a, and not compiling.
        let moving = config(
            "moving",
            "gadgets.example.org",
            json!({
                "phase": "Stale",
                "conditions": [condition("Validated", "False", "CompileFailed"), condition("HandoverReady", "False", "AwaitingDestination")],
                "handover": {"state": "Compiling", "source": "b", "destination": "a", "since": ts(-900).to_string(), "attempt": 2},
            }),
        );
        // Wired to a, which no replica of a reports.
        let dropped = config(
            "dropped",
            "gizmos.example.org",
            json!({"handover": {"state": "SourceDropped", "destination": "a", "since": ts(-60).to_string()}}),
        );
        // Its target does not exist: never applied.
        let orphan = config(
            "orphan",
            "orphans.example.org",
            json!({"phase": "Pending", "conditions": [condition("TargetHealthy", "False", "TargetNotFound")]}),
        );
        // An XRD wired to a whose claim CRD does not carry the wiring yet.
        let xrd: dco_api::XRDConversionConfig = serde_json::from_value(json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
            "metadata": {"name": "xdbs", "uid": "uid-xdbs"},
            "spec": {"targetXRD": {"name": "xdbs.example.org"}, "hubVersion": "v2", "spokes": []},
            "status": {
                "conditions": [condition("ConversionPropagated", "False", "CRDDiffers")],
                "handover": {"state": "Patched", "destination": "a", "since": ts(-30).to_string()},
            },
        }))
        .unwrap();
        let tls = crate::pki::ensure(
            "a",
            "dco-webhook-a.dco-system.svc",
            crate::pki::Current::default(),
            NOW,
            &crate::pki::Lifetimes::default(),
        )
        .unwrap()
        .write_tls
        .unwrap();
        let secret: Secret = serde_json::from_value(json!({
            "metadata": {"name": "dco-webhook-a-tls", "namespace": "dco-system"},
            "data": tls.iter().map(|(k, v)| (k.clone(), base64::Engine::encode(&base64::engine::general_purpose::STANDARD, v))).collect::<BTreeMap<_, _>>(),
        }))
        .unwrap();
        let not_after = leaf_not_after(&tls[crate::pki::TLS_CRT]).unwrap();
        let stores = Stores {
            servers: store(vec![server("a", 2)]),
            leases: store(vec![
                served_lease("a-1", "a", &["widgets.example.org", "gadgets.example.org"]),
                served_lease("a-2", "a", &["widgets.example.org"]),
            ])
            .into(),
            secrets: store(vec![secret]).into(),
            xccs: store(vec![xrd]),
            cccs: store(vec![settled, moving, dropped, orphan]),
        };
        let snapshot = crate::sharding::leases::Snapshot {
            me: "r1".into(),
            at: Some(ts(0)),
            shards: 4,
            live: vec!["r1".into(), "r2".into()],
            // Shard 2 is held by a replica that is gone, shard 3 is free.
            owners: BTreeMap::from([
                (0, Some("r1".into())),
                (1, Some("r2".into())),
                (2, Some("r3".into())),
                (3, None),
            ]),
            owned: vec![0],
        };
        // A receiver keeps the last value after its sender is gone.
        let (_, membership) = tokio::sync::watch::channel(snapshot);
        (Source { stores, gate: Gate::everything(), namespace: "dco-system".into(), membership }, not_after)
    }

    fn fixture() -> (StatusMetrics, i64) {
        let (source, not_after) = fixture_source();
        let m = StatusMetrics::default();
        m.set_source(source);
        (m, not_after)
    }

    #[test]
    fn rows_come_from_the_cached_status() {
        let (m, not_after) = fixture();
        let rows = m.observe(ts(0));
        let kind = "CRDConversionConfig";
        let failed: BTreeMap<String, bool> =
            rows.compile_failed.iter().map(|(l, f)| (l.target.clone(), *f)).collect();
        // The third config has no Validated condition yet: no series rather than a guess.
        assert_eq!(
            failed,
            BTreeMap::from([
                ("gadgets.example.org".to_string(), true),
                ("widgets.example.org".to_string(), false)
            ])
        );
        assert!(rows.compile_failed.iter().all(|(l, _)| l.kind == kind));
        let serving: BTreeMap<String, (String, i32)> =
            rows.serving.iter().map(|(l, n)| (l.target.clone(), (l.server.clone(), *n))).collect();
        assert_eq!(serving["widgets.example.org"], ("a".to_string(), 2));
        // Before Patched the target still names the source: b is gone, so 0.
        assert_eq!(serving["gadgets.example.org"], ("b".to_string(), 0));
        assert_eq!(serving["gizmos.example.org"], ("a".to_string(), 0));
        let moving = rows.handovers.iter().find(|(l, _)| l.target == "gadgets.example.org").unwrap();
        let want = HandoverLabels {
            kind,
            target: "gadgets.example.org".into(),
            state: "Compiling".into(),
            destination: "a".into(),
        };
        assert_eq!(moving.0, want);
        assert_eq!(moving.1, (NOW - 900) as f64);
        assert_eq!(rows.handovers.len(), 4, "three CRD configs and the XRD config");
        // Only the moving config's HandoverReady is False: since its lastTransitionTime.
        let not_ready = NotReadyLabels {
            kind,
            target: "gadgets.example.org".into(),
            state: "Compiling".into(),
            reason: "AwaitingDestination".into(),
            destination: "a".into(),
        };
        assert_eq!(rows.not_ready, [(not_ready, 1_767_225_600.0)]);
        assert_eq!(rows.shards, Some((4, 2)));
        let xkind = "XRDConversionConfig";
        assert_eq!(
            rows.propagated,
            [(ConfigLabels { kind: xkind, target: "xdbs.example.org".into() }, false)]
        );
        let np = NotPropagatedLabels {
            kind: xkind,
            target: "xdbs.example.org".into(),
            reason: "CRDDiffers".into(),
        };
        assert_eq!(rows.not_propagated, [(np, 1_767_225_600.0)]);
        assert_eq!(
            rows.certificates,
            [CertRow {
                labels: CertLabels {
                    usage: "webhook",
                    secret: "dco-system/dco-webhook-a-tls".into(),
                    server: "a".into()
                },
                not_after,
            }]
        );
        assert_eq!(not_after, NOW + 365 * 86_400);
        // Not applied: the one without a target, and the one that does not compile.
        let mut not_applied: Vec<(String, String)> =
            rows.not_applied.iter().map(|(l, _)| (l.target.clone(), l.reason.clone())).collect();
        not_applied.sort();
        assert_eq!(
            not_applied,
            [
                ("gadgets.example.org".to_string(), "CompileFailed".to_string()),
                ("orphans.example.org".to_string(), "TargetNotFound".to_string())
            ]
        );
        assert!(rows.not_applied.iter().all(|(_, since)| *since == 1_767_225_600.0));
        assert_eq!(rows.server_replicas, [(ServerLabel { server: "a".into() }, 3, 2)]);
    }

    #[test]
    fn not_applied_reads_applied_first_then_what_is_in_the_way() {
        let conds =
            |cs: Vec<serde_json::Value>| -> Vec<Condition> { serde_json::from_value(json!(cs)).unwrap() };
        let applied = conds(vec![
            condition("Applied", "True", "Wired"),
            condition("Validated", "False", "CompileFailed"),
        ]);
        assert_eq!(
            not_applied(&applied),
            None,
            "a drifted schema on a served target is Stale, not unapplied"
        );
        let gone = conds(vec![
            condition("Applied", "False", "WiredServerMissing"),
            condition("TargetHealthy", "False", "x"),
        ]);
        assert_eq!(not_applied(&gone).unwrap().0, "WiredServerMissing");
        let waiting = conds(vec![
            condition("TargetHealthy", "True", "Established"),
            condition("Validated", "True", "Compiled"),
            condition("WebhookServerReady", "False", "NoReadyReplicas"),
            condition("HandoverReady", "False", "AwaitingDestination"),
        ]);
        assert_eq!(not_applied(&waiting).unwrap().0, "NoReadyReplicas", "the first in the way");
        assert_eq!(not_applied(&[]), None, "no status yet: no guess");
    }

    #[test]
    fn an_autoscaled_server_wants_what_its_hpa_keeps() {
        let mut s = server("h", 1);
        s.spec.autoscaling =
            Some(dco_api::server::AutoscalingSpec { min_replicas: 2, max_replicas: 5, ..Default::default() });
        s.status.as_mut().unwrap().replicas = 4;
        assert_eq!(desired_replicas(&s), 4);
        s.status.as_mut().unwrap().replicas = 0;
        assert_eq!(desired_replicas(&s), 2, "never below the HPA's minimum");
        s.spec.autoscaling = None;
        assert_eq!(desired_replicas(&s), 3);
    }

    #[test]
    fn a_replica_exports_only_the_configs_and_servers_of_shards_it_holds() {
        let (m, _) = fixture();
        let source = m.source.get().unwrap();
        let nothing = crate::sharding::coordinator::ShardOwnership::default();
        let (_keep, owned) = tokio::sync::watch::channel(nothing);
        let gate = Gate::new(crate::sharding::shard::Shards::new(4).unwrap(), owned);
        let other = StatusMetrics::default();
        other.set_source(Source {
            stores: source.stores.clone(),
            gate,
            namespace: "dco-system".into(),
            membership: source.membership.clone(),
        });
        let rows = other.observe(ts(0));
        assert!(rows.phases.is_empty() && rows.handovers.is_empty() && rows.serving.is_empty());
        assert!(rows.not_ready.is_empty() && rows.compile_failed.is_empty());
        assert!(rows.certificates.is_empty());
        assert_eq!(rows.shards, Some((4, 2)), "the coordinator's view is every replica's");
    }

    #[test]
    fn the_families_are_listed_before_the_caches_exist() {
        let mut r = prometheus_client::registry::Registry::with_prefix("dco_operator");
        r.register_collector(Box::new(StatusMetrics::default()));
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &r).unwrap();
        for f in [
            "config_phase",
            "config_compile_failed",
            "handover_state_entered_timestamp_seconds",
            "handover_not_ready_since_timestamp_seconds",
            "target_serving_replicas",
            "certificate_expiration_timestamp_seconds",
            "shards",
            "unowned_shards",
            "config_not_applied_since_timestamp_seconds",
            "server_replicas_desired",
            "server_replicas_ready",
        ] {
            assert!(text.contains(&format!("# TYPE dco_operator_{f} gauge")), "{f} in\n{text}");
        }
    }
}

/// The whole `/metrics` exposition (observability/metrics.rs with this collector) against the
/// naming rules and docs/operations.md.
#[cfg(test)]
mod exposition_tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::StatusMetrics;
    use crate::admission::metrics::AdmissionMetrics;
    use crate::observability::api_metrics::{ApiMetrics, RequestLabels, VerbLabel};
    use crate::observability::metrics::{Metrics, TransitionLabels};
    use crate::observability::queue::QueueMetrics;
    use crate::observability::watch_metrics::{WatchErrorLabels, WatchMetrics};
    use crate::sharding::metrics::{KindLabel, ResultLabel, ShardingMetrics};
    use dco_api::metrics::{compare_with_docs, convention_problems, documented, parse_exposition};

    /// Every family with samples where it has labels: the status collector on its fixture,
    /// each counter and histogram touched once.
    fn exercised() -> String {
        let status = Arc::new(StatusMetrics::default());
        let (sharding, admission) = (ShardingMetrics::default(), AdmissionMetrics::default());
        let watches = WatchMetrics::default();
        let (api, queues) = (ApiMetrics::default(), QueueMetrics::default());
        let m = Metrics::new(&[&sharding, &watches, &admission, &status, &api, &queues]);
        api.requests.get_or_create(&RequestLabels { verb: "patch", code: "200" }).inc();
        api.duration.get_or_create(&VerbLabel { verb: "patch" }).observe(0.01);
        api.throttled.get_or_create(&VerbLabel { verb: "list" }).inc();
        let (store, _) = kube::runtime::reflector::store::<dco_api::CRDConversionConfig>();
        let q = queues.queue("crdconversionconfig", store);
        let now = std::time::Instant::now();
        q.triggered(&kube::runtime::reflector::ObjectRef::new("a"), now);
        q.started(&kube::runtime::reflector::ObjectRef::new("a"), now);
        watches.errors.get_or_create(&WatchErrorLabels { kind: "Secret", reason: "forbidden" }).inc();
        status.set_source(super::tests::fixture_source().0);
        m.reconciled("crdconversionconfig", Duration::from_millis(3));
        m.failed(
            "crdconversionconfig",
            &crate::error::Error::NotReady("the destination is not ready".into()),
        );
        m.skipped("conversionwebhookserver");
        m.let_through("crdconversionconfig", 7);
        admission.review("CRDConversionConfig", false, Duration::from_millis(2));
        m.handover_transitions.get_or_create(&TransitionLabels { reason: "Patched".into() }).inc();
        m.xrd_wiring_reverts
            .get_or_create(&crate::observability::metrics::RevertLabels { owner: "package" })
            .inc();
        m.propagation_lag.observe(1.0);
        sharding.coordinator_ticks.get_or_create(&ResultLabel { result: "ok" }).inc();
        for f in
            [&sharding.watch_bytes, &sharding.watch_events, &sharding.watch_dropped, &sharding.watch_restarts]
        {
            f.get_or_create(&KindLabel { kind: "CRDConversionConfig" }).inc();
        }
        m.encode()
    }

    #[test]
    fn every_family_follows_the_naming_rules() {
        let fams = parse_exposition(&exercised());
        assert!(fams.len() >= 28, "{fams:?}");
        let problems = convention_problems(&fams, "dco_operator");
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// docs/operations.md, "Metrics", lists exactly the families this binary exports, with
    /// their types and labels.
    #[test]
    fn the_operations_doc_lists_every_family() {
        let docs = documented(include_str!("../../docs/operations.md"), "dco_operator");
        let problems = compare_with_docs(&parse_exposition(&exercised()), &docs, "dco_operator");
        assert!(problems.is_empty(), "docs/operations.md is out of date:\n{}", problems.join("\n"));
    }

    #[test]
    fn families_without_samples_are_listed() {
        let (sharding, admission) = (ShardingMetrics::default(), AdmissionMetrics::default());
        let text = Metrics::new(&[&sharding, &admission, &Arc::new(StatusMetrics::default())]).encode();
        for f in
            ["dco_operator_reconcile_errors", "dco_operator_admission_reviews", "dco_operator_config_phase"]
        {
            assert!(text.contains(&format!("# TYPE {f} ")), "{f} in\n{text}");
        }
    }
}
