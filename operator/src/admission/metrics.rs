//! The admission webhook's families (docs/operations.md, "Metrics"), registered into the
//! operator's registry (`observability::metrics`).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use dco_api::metrics::register;

use crate::observability::metrics::Register;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AdmissionLabels {
    pub kind: String,
    pub allowed: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GuardLabels {
    /// `true` for a dry run: Crossplane's package manager dry-runs each update and then writes
    /// what the dry run answered, so the guard's restore of its dry run is what keeps the wiring.
    pub dry_run: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RegistrationLabels {
    pub outcome: &'static str,
}

pub struct AdmissionMetrics {
    /// Admission reviews answered (serve.rs), by kind and verdict, and how long.
    pub reviews: Family<AdmissionLabels, Counter>,
    pub duration: Histogram,
    /// This replica's admission registration passes, by outcome (registration.rs).
    pub registration: Family<RegistrationLabels, Counter>,
    /// Updates of XRDs the XRD guard answered with a restore of dco's `spec.conversion`
    /// (xrd_guard.rs), by whether the update was a dry run.
    pub xrd_guard_restores: Family<GuardLabels, Counter>,
}

impl Default for AdmissionMetrics {
    fn default() -> Self {
        AdmissionMetrics {
            reviews: Family::default(),
            duration: Histogram::new([0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 2.5, 5.0]),
            registration: Family::default(),
            xrd_guard_restores: Family::default(),
        }
    }
}

impl AdmissionMetrics {
    pub fn review(&self, kind: &str, allowed: bool, took: Duration) {
        let allowed = if allowed { "true" } else { "false" };
        self.reviews.get_or_create(&AdmissionLabels { kind: kind.to_string(), allowed }).inc();
        self.duration.observe(took.as_secs_f64());
    }
}

impl Register for AdmissionMetrics {
    fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "admission_reviews",
            "Admission reviews answered, by kind and verdict",
            self.reviews.clone(),
        );
        register(
            registry,
            "admission_review_duration_seconds",
            "Time to answer an admission review",
            self.duration.clone(),
        );
        register(
            registry,
            "admission_registration_passes",
            "Admission registration passes of this replica, by outcome: registered, no_configuration (its installer has not created it yet), nobody_answers (no Ready Pod behind the Service yet) or failed",
            self.registration.clone(),
        );
        register(
            registry,
            "xrd_guard_restores",
            "Updates of XRDs that would have dropped or changed dco's spec.conversion, answered by the XRD guard with a patch restoring it, by dry_run",
            self.xrd_guard_restores.clone(),
        );
    }
}
