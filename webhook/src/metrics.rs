//! Prometheus metrics. Target labels come only from the registry (unknown paths are
//! labelled `<unknown>`), so a client cannot blow up cardinality by posting to made-up paths.
//! Every family, with its type and labels, is in docs/operations.md, "Metrics" (a test below
//! holds the two together); families are listed before their first sample
//! (`dco_api::metrics::register`).

use prometheus_client::encoding::{EncodeLabelSet, EncodeLabelValue};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry as PromRegistry;
use std::sync::atomic::AtomicU64;

use dco_api::metrics::register;

/// Label value for a path that names no registry entry.
pub const UNKNOWN_TARGET: &str = "<unknown>";

#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum Outcome {
    /// Converted every object.
    success,
    /// A Failure ConversionReview: an object could not be converted.
    conversion_failure,
    /// No servable plan for the target (503).
    unknown_target,
    /// Malformed JSON or no request (400).
    bad_request,
    /// Over the body limit (413).
    too_large,
    /// The conversion ran past the per-request time budget.
    timeout,
    /// The body did not arrive within the request timeout (408).
    body_timeout,
    /// The in-flight byte budget could not hold the body in time (503).
    over_budget,
    /// The plan panicked; answered with 500.
    internal_error,
    /// A Failure ConversionReview: the config no longer compiles and its `driftPolicy` is
    /// FailClosed.
    fail_closed,
}

impl Outcome {
    /// Every value, to remove a departed target's series.
    pub const ALL: [Outcome; 10] = [
        Outcome::success,
        Outcome::conversion_failure,
        Outcome::unknown_target,
        Outcome::bad_request,
        Outcome::too_large,
        Outcome::timeout,
        Outcome::body_timeout,
        Outcome::over_budget,
        Outcome::internal_error,
        Outcome::fail_closed,
    ];
}

/// What happened to one object of a review the plan answered (`dco_engine::ObjectResult`);
/// docs/operations.md, "Metrics", lists the classes.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, EncodeLabelValue)]
#[allow(non_camel_case_types)]
pub enum ConversionResult {
    /// Converted and returned.
    success,
    /// A rule could not convert a value the object holds.
    rule_error,
    /// Not an object of the target: another kind, an undeclared apiVersion or
    /// desiredAPIVersion, not a JSON object, a key twice.
    invalid_object,
    /// The review's time or memory budget stopped the conversion.
    stopped,
    /// Not returned because another object of the same review failed.
    aborted,
}

impl ConversionResult {
    pub const ALL: [ConversionResult; 5] = [
        ConversionResult::success,
        ConversionResult::rule_error,
        ConversionResult::invalid_object,
        ConversionResult::stopped,
        ConversionResult::aborted,
    ];

    pub fn of(r: dco_engine::ObjectResult) -> Self {
        use dco_engine::{FailureClass, ObjectResult};
        match r {
            ObjectResult::Success => ConversionResult::success,
            ObjectResult::Failed(FailureClass::Rule) => ConversionResult::rule_error,
            ObjectResult::Failed(FailureClass::InvalidObject) => ConversionResult::invalid_object,
            ObjectResult::Failed(FailureClass::Stopped) => ConversionResult::stopped,
            ObjectResult::Aborted => ConversionResult::aborted,
        }
    }
}

/// Objects of one version pair; versions are the plan's or `<other>` (`signals.rs`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConversionLabels {
    pub target: String,
    pub from_version: String,
    pub to_version: String,
    pub result: ConversionResult,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PairLabels {
    pub target: String,
    pub from_version: String,
    pub to_version: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub target: String,
    pub result: Outcome,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TargetLabel {
    pub target: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StateLabel {
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabel {
    pub result: String,
}

pub struct Metrics {
    registry: PromRegistry,
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<RequestLabels, Histogram>,
    pub objects_converted: Family<TargetLabel, Counter>,
    /// Objects of the reviews a plan answered, per version pair and result (`signals.rs`).
    pub conversions: Family<ConversionLabels, Counter>,
    /// Returned objects an acknowledged loss dropped data from.
    pub lossy_conversions: Family<PairLabels, Counter>,
    /// Conversions that panicked (caught; answered 500).
    pub panics: Family<TargetLabel, Counter>,
    /// When the plan serving a target was compiled (Unix seconds), and whether the last
    /// compile of its config succeeded; set from the registry after each sync pass.
    pub plan_compiled: Family<TargetLabel, Gauge<f64, AtomicU64>>,
    pub plan_compile_ok: Family<TargetLabel, Gauge>,
    pub compile_failures: Family<TargetLabel, Counter>,
    /// Registry entries by state: `served` (has a plan) and `failed` (no plan, last compile failed).
    pub registry_entries: Family<StateLabel, Gauge>,
    pub ready: Gauge,
    pub tls_reloads: Family<ResultLabel, Counter>,
    pub lease_publishes: Family<ResultLabel, Counter>,
    /// Bytes of request bodies and answers reserved from the in-flight budget.
    pub inflight_bytes: Gauge,
    /// Requests that had to wait for the budget: `granted` in time or `refused`.
    pub budget_waits: Family<ResultLabel, Counter>,
    /// Connections open on the conversion listener (TLS handshake included).
    pub connections: Gauge,
    /// Times the accept loop stopped at `--max-connections` (new connections wait in the
    /// kernel's backlog meanwhile).
    pub connection_limit_reached: Counter,
    /// Connections the server closed, by reason (`idle`, `header_timeout`, `stalled_write`,
    /// `handshake_timeout`, `handshake_failed`, `error`, `shutdown`).
    pub connections_closed: Family<ReasonLabel, Counter>,
    /// Peak heap growth of each conversion, against `--conversion-memory-factor`'s budget.
    pub conversion_memory: Histogram,
    /// Targets held whole (schemas) because a config in scope names them (`targets.rs`),
    /// and the bytes of their kept JSON.
    pub targets_held: Gauge,
    pub targets_held_bytes: Gauge,
    /// 1 while XRDs are watched (Crossplane is installed and their first list is done).
    pub xrds_watched: Gauge,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReasonLabel {
    pub reason: &'static str,
}

fn latency_histogram() -> Histogram {
    // 1 ms .. 30 s: a review of one small object is sub-millisecond, a large list is tens
    // of milliseconds, and the apiserver gives up at 30 s (`--request-timeout` answers at 25).
    Histogram::new([
        0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 16.0, 20.0, 30.0,
    ])
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    pub fn new() -> Self {
        let mut registry = PromRegistry::with_prefix("dco_webhook");
        let requests = Family::<RequestLabels, Counter>::default();
        let latency =
            Family::<RequestLabels, Histogram>::new_with_constructor(latency_histogram as fn() -> _);
        let objects_converted = Family::<TargetLabel, Counter>::default();
        let compile_failures = Family::<TargetLabel, Counter>::default();
        let conversions = Family::<ConversionLabels, Counter>::default();
        let lossy_conversions = Family::<PairLabels, Counter>::default();
        let panics = Family::<TargetLabel, Counter>::default();
        let plan_compiled = Family::<TargetLabel, Gauge<f64, AtomicU64>>::default();
        let plan_compile_ok = Family::<TargetLabel, Gauge>::default();
        let registry_entries = Family::<StateLabel, Gauge>::default();
        let ready = Gauge::default();
        let tls_reloads = Family::<ResultLabel, Counter>::default();
        let lease_publishes = Family::<ResultLabel, Counter>::default();
        let inflight_bytes = Gauge::default();
        let budget_waits = Family::<ResultLabel, Counter>::default();
        let connections = Gauge::default();
        let connection_limit_reached = Counter::default();
        let connections_closed = Family::<ReasonLabel, Counter>::default();
        // 1 MiB .. 4 GiB by factors of 4.
        let conversion_memory = Histogram::new((0..12).map(|i| f64::from(1u32 << 20) * 4f64.powi(i)));
        let targets_held = Gauge::default();
        let targets_held_bytes = Gauge::default();
        let xrds_watched = Gauge::default();
        register(
            &mut registry,
            "requests",
            "ConversionReview requests by target and result",
            requests.clone(),
        );
        register(
            &mut registry,
            "request_duration_seconds",
            "ConversionReview handling time by target and result",
            latency.clone(),
        );
        register(
            &mut registry,
            "objects_converted",
            "Objects converted successfully",
            objects_converted.clone(),
        );
        register(
            &mut registry,
            "conversions",
            "Objects of the ConversionReviews a plan answered, by target, version pair and result",
            conversions.clone(),
        );
        register(
            &mut registry,
            "lossy_conversions",
            "Returned objects an acknowledged loss (acknowledgeLossy rule, unmappedFieldPolicy Warn) dropped data from",
            lossy_conversions.clone(),
        );
        register(&mut registry, "panics", "Conversions that panicked (caught; answered 500)", panics.clone());
        register(
            &mut registry,
            "plan_compiled_timestamp_seconds",
            "When the plan serving the target was compiled (Unix time)",
            plan_compiled.clone(),
        );
        register(
            &mut registry,
            "plan_compile_ok",
            "1 when the last compile of the target's config succeeded, 0 when it failed (an older plan or none serves)",
            plan_compile_ok.clone(),
        );
        register(
            &mut registry,
            "compile_failures",
            "Compiles that failed; the last good plan keeps serving",
            compile_failures.clone(),
        );
        register(&mut registry, "registry_entries", "Registry entries by state", registry_entries.clone());
        register(&mut registry, "ready", "1 when /readyz answers 200", ready.clone());
        register(&mut registry, "tls_reloads", "Serving certificate reloads by result", tls_reloads.clone());
        register(
            &mut registry,
            "lease_publishes",
            "Served-target Lease publishes by result",
            lease_publishes.clone(),
        );
        register(
            &mut registry,
            "inflight_bytes",
            "Bytes of ConversionReviews reserved from the in-flight budget (--max-inflight-bytes)",
            inflight_bytes.clone(),
        );
        register(
            &mut registry,
            "budget_waits",
            "Requests that waited for the in-flight byte budget, by result",
            budget_waits.clone(),
        );
        register(
            &mut registry,
            "open_connections",
            "Open connections on the conversion listener",
            connections.clone(),
        );
        register(
            &mut registry,
            "connection_limit_reached",
            "Times new connections had to wait because --max-connections were open",
            connection_limit_reached.clone(),
        );
        register(
            &mut registry,
            "connections_closed",
            "Connections closed by the server, by reason",
            connections_closed.clone(),
        );
        register(
            &mut registry,
            "conversion_memory_bytes",
            "Peak heap growth of each review's conversion (bounded by --conversion-memory-factor)",
            conversion_memory.clone(),
        );
        register(
            &mut registry,
            "targets_held",
            "Targets read whole because a config in scope names them; every other CRD and XRD is watched as metadata only",
            targets_held.clone(),
        );
        register(
            &mut registry,
            "targets_held_bytes",
            "Bytes of the JSON kept of the targets held whole",
            targets_held_bytes.clone(),
        );
        register(
            &mut registry,
            "xrds_watched",
            "1 while CompositeResourceDefinitions are watched: Crossplane is installed and their first list is done; 0 while it is not installed",
            xrds_watched.clone(),
        );
        dco_api::metrics::register_process(&mut registry, env!("CARGO_PKG_VERSION"));
        Metrics {
            registry,
            conversion_memory,
            targets_held,
            targets_held_bytes,
            xrds_watched,
            inflight_bytes,
            budget_waits,
            connections,
            connection_limit_reached,
            connections_closed,
            requests,
            latency,
            objects_converted,
            conversions,
            lossy_conversions,
            panics,
            plan_compiled,
            plan_compile_ok,
            compile_failures,
            registry_entries,
            ready,
            tls_reloads,
            lease_publishes,
        }
    }

    pub fn observe_request(&self, target: &str, result: Outcome, seconds: f64) {
        let labels = RequestLabels { target: target.to_string(), result };
        self.requests.get_or_create(&labels).inc();
        self.latency.get_or_create(&labels).observe(seconds);
    }

    /// A request had to wait for the in-flight budget: `granted` or `refused`.
    pub fn budget_wait(&self, result: &str) {
        self.budget_waits.get_or_create(&ResultLabel { result: result.to_string() }).inc();
    }

    pub fn set_registry_size(&self, served: usize, failed: usize) {
        let set = |state: &str, n: usize| {
            self.registry_entries
                .get_or_create(&StateLabel { state: state.to_string() })
                .set(i64::try_from(n).unwrap_or(i64::MAX));
        };
        set("served", served);
        set("failed", failed);
    }

    /// The text exposition format.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        // Encoding into a String only fails on a formatter error, which String never returns.
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dco_api::metrics::{compare_with_docs, convention_problems, documented, parse_exposition};

    /// Every family with samples where it has labels.
    fn exercised() -> String {
        let m = Metrics::new();
        m.observe_request("db.example.org", Outcome::success, 0.003);
        m.objects_converted.get_or_create(&TargetLabel { target: "db.example.org".into() }).inc();
        m.compile_failures.get_or_create(&TargetLabel { target: "db.example.org".into() }).inc();
        let (target, from_version, to_version) =
            ("db.example.org".to_string(), "v1".to_string(), "v2".to_string());
        let pair = PairLabels { target: target.clone(), from_version, to_version };
        m.conversions
            .get_or_create(&ConversionLabels {
                target: pair.target.clone(),
                from_version: pair.from_version.clone(),
                to_version: pair.to_version.clone(),
                result: ConversionResult::success,
            })
            .inc();
        m.lossy_conversions.get_or_create(&pair).inc();
        m.panics.get_or_create(&TargetLabel { target: target.clone() }).inc();
        m.plan_compiled.get_or_create(&TargetLabel { target: target.clone() }).set(1.8e9);
        m.plan_compile_ok.get_or_create(&TargetLabel { target }).set(1);
        m.set_registry_size(1, 0);
        m.tls_reloads.get_or_create(&ResultLabel { result: "ok".into() }).inc();
        m.lease_publishes.get_or_create(&ResultLabel { result: "ok".into() }).inc();
        m.budget_wait("granted");
        m.connections_closed.get_or_create(&ReasonLabel { reason: "idle" }).inc();
        m.encode()
    }

    #[test]
    fn every_family_follows_the_naming_rules() {
        let fams = parse_exposition(&exercised());
        assert!(fams.len() >= 20, "{fams:?}");
        let problems = convention_problems(&fams, "dco_webhook");
        assert!(problems.is_empty(), "{}", problems.join("\n"));
    }

    /// docs/operations.md, "Metrics", lists exactly the families this binary exports, with
    /// their types and labels.
    #[test]
    fn the_operations_doc_lists_every_family() {
        let docs = documented(include_str!("../../docs/operations.md"), "dco_webhook");
        let problems = compare_with_docs(&parse_exposition(&exercised()), &docs, "dco_webhook");
        assert!(problems.is_empty(), "docs/operations.md is out of date:\n{}", problems.join("\n"));
    }

    #[test]
    fn families_without_samples_are_listed() {
        let text = Metrics::new().encode();
        for f in ["dco_webhook_requests", "dco_webhook_compile_failures", "dco_webhook_budget_waits"] {
            assert!(text.contains(&format!("# TYPE {f} ")), "{f} in\n{text}");
        }
    }

    #[test]
    fn exposes_every_family_by_name() {
        let m = Metrics::new();
        m.observe_request("db.example.org", Outcome::success, 0.003);
        m.objects_converted.get_or_create(&TargetLabel { target: "db.example.org".into() }).inc_by(7);
        m.compile_failures.get_or_create(&TargetLabel { target: "db.example.org".into() }).inc();
        m.set_registry_size(3, 1);
        let text = m.encode();
        for needle in [
            r#"dco_webhook_requests_total{target="db.example.org",result="success"} 1"#,
            r#"dco_webhook_request_duration_seconds_count{target="db.example.org",result="success"} 1"#,
            r#"dco_webhook_objects_converted_total{target="db.example.org"} 7"#,
            r#"dco_webhook_compile_failures_total{target="db.example.org"} 1"#,
            r#"dco_webhook_registry_entries{state="served"} 3"#,
            r#"dco_webhook_registry_entries{state="failed"} 1"#,
        ] {
            assert!(text.contains(needle), "missing {needle} in\n{text}");
        }
    }
}
