//! Prometheus metrics served on `/metrics`: every family, with its type and labels, is in
//! docs/operations.md, "Metrics" (a test in status_metrics.rs holds the two together).
//! Families are listed before their first sample (`dco_api::metrics::register`). This module
//! holds the registry and the reconcilers' families; each subsystem defines its own families
//! and registers them ([`Register`]): the shard coordinator and watches
//! (sharding/metrics.rs), every watch's errors (watch_metrics.rs), admission
//! (admission/metrics.rs) and the series read from the caches at each scrape (status_metrics.rs).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use dco_api::metrics::register;

/// A subsystem's families, registered once into the operator's registry.
pub trait Register {
    fn register(&self, registry: &mut Registry);
}

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
pub struct ShardLabels {
    pub controller: String,
    pub shard: u32,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    pub reason: String,
}

/// `dco_operator_reconciles_fenced_total`: `write` is one of a few fixed names of the
/// reconcile's writes, `reason` `not_owned` or `paused`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FencedLabels {
    pub controller: String,
    pub write: &'static str,
    pub reason: &'static str,
}

/// `dco_operator_xrd_wiring_reverts_total`: `owner` is `package` when a Crossplane package
/// owns the XRD, else `other` (two series at most).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RevertLabels {
    pub owner: &'static str,
}

/// The registry, and the families of the reconcilers.
pub struct Metrics {
    pub registry: Registry,
    pub reconciles: Family<ControllerLabel, Counter>,
    pub failures: Family<ErrorLabels, Counter>,
    pub duration: Family<ControllerLabel, Histogram>,
    pub handover_transitions: Family<TransitionLabels, Counter>,
    pub target_patches: Counter,
    /// Reconciles the shard gate stopped: another replica owns the object's shard.
    pub skipped: Family<ControllerLabel, Counter>,
    /// Reconciles the shard gate let through, by the object's shard: who reconciled what.
    pub let_through: Family<ShardLabels, Counter>,
    /// Reconciles stopped before a write: the gate's pass lapsed since (context.rs `fence`).
    pub fenced: Family<FencedLabels, Counter>,
    /// Reverts of an XRD's wiring by another writer (config/reverts.rs).
    pub xrd_wiring_reverts: Family<RevertLabels, Counter>,
    /// Seconds from dco's write of an XRD's spec.conversion to its generated CRDs carrying it.
    pub propagation_lag: Histogram,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(&[])
    }
}

impl Metrics {
    /// The reconcilers' families, then each of `parts`', then the process's.
    pub fn new(parts: &[&dyn Register]) -> Self {
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
        register(
            &mut registry,
            "reconciles_skipped",
            "Reconciles stopped by the shard gate: another replica owns the object's shard",
            skipped.clone(),
        );
        let let_through = Family::<ShardLabels, Counter>::default();
        register(
            &mut registry,
            "shard_reconciles",
            "Reconciles the shard gate let through, by the object's shard",
            let_through.clone(),
        );
        let fenced = Family::<FencedLabels, Counter>::default();
        register(
            &mut registry,
            "reconciles_fenced",
            "Reconciles stopped right before a write: the object's shard was no longer this replica's, or this process was paused since the gate let the reconcile through",
            fenced.clone(),
        );
        let xrd_wiring_reverts = Family::<RevertLabels, Counter>::default();
        register(
            &mut registry,
            "xrd_wiring_reverts",
            "Reverts of an XRD's spec.conversion by a writer other than dco, by whether a Crossplane package owns the XRD",
            xrd_wiring_reverts.clone(),
        );
        let propagation_lag = Histogram::new([0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0]);
        register(
            &mut registry,
            "xrd_propagation_lag_seconds",
            "Seconds from dco's write of an XRD's spec.conversion to every CRD Crossplane generated from it carrying it",
            propagation_lag.clone(),
        );
        for part in parts {
            part.register(&mut registry);
        }
        dco_api::metrics::register_process(&mut registry, env!("CARGO_PKG_VERSION"));
        Metrics {
            registry,
            reconciles,
            failures,
            duration,
            handover_transitions,
            target_patches,
            skipped,
            let_through,
            fenced,
            xrd_wiring_reverts,
            propagation_lag,
        }
    }

    pub fn skipped(&self, controller: &str) {
        self.skipped.get_or_create(&ControllerLabel { controller: controller.to_string() }).inc();
    }

    pub fn let_through(&self, controller: &str, shard: u32) {
        self.let_through.get_or_create(&ShardLabels { controller: controller.to_string(), shard }).inc();
    }

    pub fn fenced(&self, controller: &str, write: &'static str, paused: bool) {
        let reason = if paused { "paused" } else { "not_owned" };
        self.fenced.get_or_create(&FencedLabels { controller: controller.to_string(), write, reason }).inc();
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
