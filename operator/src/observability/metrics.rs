//! Prometheus metrics of the reconcilers, served on `/metrics`: every family, with its type
//! and labels, is in docs/operations.md, "Metrics" (a test below holds the two together).
//! Families are listed before their first sample (`dco_api::metrics::register`); what the
//! alerts read from the caches is computed at each scrape by a collector runtime.rs hands to
//! [`Metrics::new`] (status_metrics.rs).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use dco_api::metrics::register;

use prometheus_client::collector::Collector;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabel {
    pub controller: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    pub controller: String,
    pub error: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    pub reason: String,
}

pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<ControllerLabel, Counter>,
    pub failures: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabel, Histogram>,
    pub handover_transitions: Family<TransitionLabels, Counter>,
    pub target_patches: Counter,
    /// Reconciles the shard gate stopped: another replica owns the object's shard.
    pub skipped: Family<ControllerLabel, Counter>,
    /// Coordinator ticks by result, and its shard takes and frees.
    pub coordinator_ticks: Family<ResultLabel, Counter>,
    pub shard_takes: Counter,
    pub shard_frees: Counter,
    /// Shards this replica owns now.
    pub owned_shards: prometheus_client::metrics::gauge::Gauge,
    /// 1 when the apiserver applies `shardSelector` and the config watches send it.
    pub sharded_watch: prometheus_client::metrics::gauge::Gauge,
    /// The shard-scoped watches, by kind: response bytes of their lists and watches, objects
    /// received, objects the client-side check dropped, restarts on ownership change.
    pub watch_bytes: Family<KindLabel, Counter>,
    pub watch_events: Family<KindLabel, Counter>,
    pub watch_dropped: Family<KindLabel, Counter>,
    pub watch_restarts: Family<KindLabel, Counter>,
    /// Admission reviews answered (admission/serve.rs), by kind and verdict, and how long.
    pub admission_reviews: Family<AdmissionLabels, Counter>,
    pub admission_duration: Histogram,
    /// This replica's admission registration passes, by outcome (admission/registration.rs).
    pub admission_registration: Family<RegistrationLabels, Counter>,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub kind: String,
    pub allowed: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistrationLabels {
    pub outcome: &'static str,
}

/// The kind of a shard-scoped watch (sharding/sharded_watch.rs).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabel {
    pub kind: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, prometheus_client::encoding::EncodeLabelSet)]
pub struct ResultLabel {
    pub result: &'static str,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(None)
    }
}

impl Metrics {
    /// Every family, and `status`, the collector of the series read from the caches at each
    /// scrape, when there is one.
    pub fn new(status: Option<Box<dyn Collector>>) -> Self {
        let mut registry = Registry::with_prefix("dco_operator");
        let reconciles = Family::<ControllerLabel, Counter>::default();
        let failures = Family::<ErrorLabels, Counter>::default();
        let duration = Family::<ControllerLabel, Histogram>::new_with_constructor(|| {
            Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0])
        });
        let handover_transitions = Family::<TransitionLabels, Counter>::default();
        let target_patches = Counter::default();
        register(&mut registry, "reconciles", "Reconciles run", reconciles.clone());
        register(&mut registry, "reconcile_errors", "Reconciles that failed, by error", failures.clone());
        register(&mut registry, "reconcile_duration_seconds", "Reconcile duration", duration.clone());
        register(
            &mut registry,
            "handover_transitions",
            "Handover state transitions, by reason",
            handover_transitions.clone(),
        );
        register(
            &mut registry,
            "target_conversion_patches",
            "Server-side applies of targets' spec.conversion",
            target_patches.clone(),
        );
        let skipped = Family::<ControllerLabel, Counter>::default();
        let coordinator_ticks = Family::<ResultLabel, Counter>::default();
        let (shard_takes, shard_frees) = (Counter::default(), Counter::default());
        let owned_shards = prometheus_client::metrics::gauge::Gauge::default();
        register(
            &mut registry,
            "reconciles_skipped",
            "Reconciles stopped by the shard gate: another replica owns the object's shard",
            skipped.clone(),
        );
        register(
            &mut registry,
            "coordinator_ticks",
            "Coordinator ticks, by result",
            coordinator_ticks.clone(),
        );
        register(&mut registry, "shard_takes", "Shard Leases this replica took", shard_takes.clone());
        register(&mut registry, "shard_frees", "Shard Leases this replica freed", shard_frees.clone());
        register(&mut registry, "owned_shards", "Shards this replica owns", owned_shards.clone());
        let sharded_watch = prometheus_client::metrics::gauge::Gauge::default();
        register(
            &mut registry,
            "sharded_watch",
            "1 when the apiserver filters the config watches by shardSelector (KEP-5866), 0 when this replica filters them alone",
            sharded_watch.clone(),
        );
        let (watch_bytes, watch_events, watch_dropped, watch_restarts) =
            (Family::default(), Family::default(), Family::default(), Family::default());
        for (name, help, family) in [
            (
                "watch_received_bytes",
                "Response bytes of the shard-scoped lists and watches, by kind",
                &watch_bytes,
            ),
            (
                "watch_received_events",
                "Objects the shard-scoped watches received (listed, applied or deleted), by kind",
                &watch_events,
            ),
            (
                "watch_dropped_events",
                "Objects of shards this replica does not own that reached it and were dropped client-side, by kind",
                &watch_dropped,
            ),
            (
                "watch_restarts",
                "Restarts of the shard-scoped watches after the owned shards changed, by kind",
                &watch_restarts,
            ),
        ] {
            register(&mut registry, name, help, family.clone());
        }
        let admission_reviews = Family::<AdmissionLabels, Counter>::default();
        let admission_duration = Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0]);
        register(
            &mut registry,
            "admission_reviews",
            "Admission reviews answered, by kind and verdict",
            admission_reviews.clone(),
        );
        register(
            &mut registry,
            "admission_review_duration_seconds",
            "Time to answer an admission review",
            admission_duration.clone(),
        );
        let admission_registration = Family::<RegistrationLabels, Counter>::default();
        register(
            &mut registry,
            "admission_registration_passes",
            "Admission registration passes of this replica, by outcome: registered, no_configuration (its installer has not created it yet), nobody_answers (no Ready Pod behind the Service yet) or failed",
            admission_registration.clone(),
        );
        if let Some(status) = status {
            registry.register_collector(status);
        }
        dco_api::metrics::register_process(&mut registry, env!("CARGO_PKG_VERSION"));
        Metrics {
            registry,
            admission_reviews,
            admission_duration,
            admission_registration,
            reconciles,
            failures,
            duration,
            handover_transitions,
            target_patches,
            skipped,
            coordinator_ticks,
            shard_takes,
            shard_frees,
            owned_shards,
            sharded_watch,
            watch_bytes,
            watch_events,
            watch_dropped,
            watch_restarts,
        }
    }

    pub fn admission(&self, kind: &str, allowed: bool, took: Duration) {
        let allowed = if allowed { "true" } else { "false" };
        self.admission_reviews.get_or_create(&AdmissionLabels { kind: kind.to_string(), allowed }).inc();
        self.admission_duration.observe(took.as_secs_f64());
    }

    pub fn skipped(&self, controller: &str) {
        self.skipped.get_or_create(&ControllerLabel { controller: controller.to_string() }).inc();
    }

    pub fn reconciled(&self, controller: &str, took: Duration) {
        let l = ControllerLabel { controller: controller.to_string() };
        self.reconciles.get_or_create(&l).inc();
        self.duration.get_or_create(&l).observe(took.as_secs_f64());
    }

    pub fn failed(&self, controller: &str, error: &crate::error::Error) {
        self.failures
            .get_or_create(&ErrorLabels { controller: controller.to_string(), error: error.metric_label() })
            .inc();
    }

    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
