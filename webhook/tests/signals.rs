//! The conversion signals on `/metrics` (docs/operations.md, "Metrics") moved by real engine
//! plans through the real routes: objects per version pair and result, acknowledged losses,
//! `<other>` for versions a target does not have, and the series count of a replica holding
//! 300 targets against the bound docs/operations.md states.

use std::sync::Arc;
use std::time::SystemTime;

use axum::body::Body;
use dco_api::config::{ConversionSpec, TargetKind};
use dco_webhook::budget::Budget;
use dco_webhook::engine::EngineCompiler;
use dco_webhook::health::Health;
use dco_webhook::hold::HoldReason;
use dco_webhook::metrics::Metrics;
use dco_webhook::plan::Compiler;
use dco_webhook::pool::Pool;
use dco_webhook::registry::{ConfigRef, Entry, Map, Registry, Served};
use dco_webhook::routes::{App, Limits, admin_router, router};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// Conversion memory is budgeted per thread, as in `dco-webhook`.
#[global_allocator]
static ALLOCATOR: dco_webhook::alloc::Counting = dco_webhook::alloc::Counting;

const VERSIONS: [&str; 3] = ["v1", "v2", "v3"];

/// A CRD `name` with hub v2 (`spec.a`, `spec.n` integer, `spec.gone`), spoke v1 (`spec.b`,
/// `spec.n` a string) and spoke v3 (`spec.a`, `spec.n`), and its engine plan: a rename and a
/// TypeCoerce to v1, and on both spokes a Delete of the hub-only `spec.gone`, acknowledged
/// lossy.
fn engine_entry(name: &str) -> Entry {
    let schema = |props: Value| {
        json!({"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"}, "spec": {"type": "object", "properties": props}}})
    };
    let int = json!({"type": "integer"});
    let text = json!({"type": "string"});
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {"group": "example.org", "names": {"kind": "Widget", "plural": name.split('.').next().unwrap()},
            "scope": "Namespaced", "versions": [
            {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema(json!({"b": int, "n": text}))}},
            {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema(json!({"a": int, "n": int, "gone": int}))}},
            {"name": "v3", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema(json!({"a": int, "n": int}))}}]}});
    let delete = json!({"strategy": "Delete", "delete": {"path": "spec.gone", "existsOn": "Hub"},
        "acknowledgeLossy": true, "reason": "spec.gone is unused"});
    let spec: ConversionSpec = serde_json::from_value(json!({"hubVersion": "v2", "spokes": [
        {"version": "v1", "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}},
            {"strategy": "TypeCoerce", "typeCoerce": {"path": "spec.n"}},
            delete]},
        {"version": "v3", "rules": [delete]}]}))
    .unwrap();
    let compiled = EngineCompiler.compile(&spec, &crd);
    assert!(compiled.errors.is_empty(), "{:?}", compiled.errors);
    let plan = compiled.plan.unwrap();
    Entry {
        target: name.into(),
        target_kind: TargetKind::Crd,
        config: Some(ConfigRef { kind: "CRDConversionConfig".into(), name: name.into() }),
        served: Some(Served {
            plan_hash: plan.hash(),
            plan,
            compiled_at: SystemTime::now(),
            fingerprint: "f".into(),
            signals: Default::default(),
        }),
        failure: None,
        hold: HoldReason::Assigned,
        draining_until: None,
        last_review: Default::default(),
    }
}

/// A Widget at `version` with every field that version has (the hub's `spec.gone` set).
fn widget(version: &str, n: &str) -> Value {
    let spec = match version {
        "v1" => json!({"b": 1, "n": n}),
        "v2" => json!({"a": 1, "n": n.parse::<i64>().unwrap_or(0), "gone": 7}),
        _ => json!({"a": 1, "n": n.parse::<i64>().unwrap_or(0)}),
    };
    json!({"apiVersion": format!("example.org/{version}"), "kind": "Widget",
        "metadata": {"name": "w", "namespace": "default"}, "spec": spec})
}

struct Replica {
    app: Arc<App>,
}

impl Replica {
    fn new(targets: impl IntoIterator<Item = Entry>) -> Replica {
        let metrics = Arc::new(Metrics::new());
        let registry = Arc::new(Registry::new());
        registry.update(|m| {
            for e in targets {
                m.insert(e.target.clone(), Arc::new(e));
            }
            ((), true)
        });
        // What the sync pass does after each swap.
        dco_webhook::signals::follow(&metrics, &Map::new(), &registry.snapshot());
        let app = Arc::new(App {
            registry,
            health: Arc::new(Health::new(metrics.clone())),
            budget: Budget::new(256 << 20, metrics.inflight_bytes.clone()),
            metrics,
            limits: Limits::default(),
            pool: Arc::new(Pool::new(2).unwrap()),
            instance: "signals".into(),
            debug_full_errors: false,
        });
        Replica { app }
    }

    /// Posts a review of `objects` to `desired` for `target`; the answer's result status.
    async fn convert(&self, target: &str, desired: &str, objects: Vec<Value>) -> String {
        let review = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview",
            "request": {"uid": "u-1", "desiredAPIVersion": desired, "objects": objects}});
        let req = http::Request::post(format!("/convert/{target}"))
            .header("content-type", "application/json")
            .body(Body::from(review.to_string()))
            .unwrap();
        let resp = router(self.app.clone()).oneshot(req).await.unwrap();
        assert_eq!(resp.status(), 200);
        let body: Value =
            serde_json::from_slice(&resp.into_body().collect().await.unwrap().to_bytes()).unwrap();
        body["response"]["result"]["status"].as_str().unwrap().to_string()
    }

    async fn metrics(&self) -> String {
        let req = http::Request::get("/metrics").body(Body::empty()).unwrap();
        let resp = admin_router(self.app.clone()).oneshot(req).await.unwrap();
        String::from_utf8(resp.into_body().collect().await.unwrap().to_bytes().to_vec()).unwrap()
    }
}

fn sample(text: &str, series: &str) -> Option<u64> {
    text.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

#[tokio::test]
async fn conversions_count_objects_per_version_pair_result_and_loss() {
    let target = "widgets.example.org";
    let r = Replica::new([engine_entry(target)]);
    // Two hub objects to v1: both converted, both lose spec.gone.
    assert_eq!(
        r.convert(target, "example.org/v1", vec![widget("v2", "1"), widget("v2", "2")]).await,
        "Success"
    );
    // v1 to v3 goes through the hub; the spoke objects have no spec.gone to lose.
    assert_eq!(r.convert(target, "example.org/v3", vec![widget("v1", "3")]).await, "Success");
    // "x" is no integer: a rule error, and the object beside it is not returned.
    assert_eq!(
        r.convert(target, "example.org/v2", vec![widget("v1", "4"), widget("v1", "x")]).await,
        "Failure"
    );
    // Made-up versions are `<other>`, whatever the client posts.
    assert_eq!(r.convert(target, "example.org/v9", vec![widget("v2", "5")]).await, "Failure");
    let mut made_up = widget("v2", "6");
    made_up["apiVersion"] = json!("example.org/v1000");
    assert_eq!(r.convert(target, "example.org/v1", vec![made_up]).await, "Failure");

    let text = r.metrics().await;
    let conv = |from: &str, to: &str, result: &str| {
        sample(
            &text,
            &format!(
                r#"dco_webhook_conversions_total{{target="{target}",from_version="{from}",to_version="{to}",result="{result}"}}"#
            ),
        )
    };
    assert_eq!(conv("v2", "v1", "success"), Some(2), "{text}");
    assert_eq!(conv("v1", "v3", "success"), Some(1));
    assert_eq!(conv("v1", "v2", "rule_error"), Some(1));
    assert_eq!(conv("v1", "v2", "aborted"), Some(1));
    assert_eq!(conv("v2", "<other>", "invalid_object"), Some(1));
    assert_eq!(conv("<other>", "v1", "invalid_object"), Some(1));
    assert!(!text.contains("v9") && !text.contains("v1000"), "made-up versions became labels:\n{text}");
    let lossy = |from: &str, to: &str| {
        sample(
            &text,
            &format!(
                r#"dco_webhook_lossy_conversions_total{{target="{target}",from_version="{from}",to_version="{to}"}}"#
            ),
        )
    };
    assert_eq!(lossy("v2", "v1"), Some(2));
    assert_eq!(lossy("v1", "v3"), None, "nothing was dropped on the way");
    assert_eq!(sample(&text, &format!(r#"dco_webhook_plan_compile_ok{{target="{target}"}}"#)), Some(1));
    // The latency buckets reach the apiserver's 30 s.
    assert!(
        text.contains(&format!(
            r#"dco_webhook_request_duration_seconds_bucket{{le="30.0",target="{target}",result="success"}} 2"#
        )),
        "{text}"
    );
}

/// One replica holding 300 targets of 3 versions each, every target converting at every
/// ordered version pair (hub objects carrying a field an acknowledged-lossy rule drops): the
/// target-labelled series on `/metrics` are exactly what docs/operations.md ("Cardinality")
/// counts per target.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_hundred_targets_expose_the_series_the_bound_counts() {
    const TARGETS: usize = 300;
    let names: Vec<String> = (0..TARGETS).map(|i| format!("signals{i}.example.org")).collect();
    let r = Replica::new(names.iter().map(|n| engine_entry(n)));
    for name in &names {
        for from in VERSIONS {
            for to in VERSIONS {
                let status = r.convert(name, &format!("example.org/{to}"), vec![widget(from, "1")]).await;
                assert_eq!(status, "Success", "{name} {from}→{to}");
            }
        }
    }
    let text = r.metrics().await;
    let series: Vec<&str> = text.lines().filter(|l| !l.starts_with('#') && !l.is_empty()).collect();
    let per_target = |family: &str| {
        series.iter().filter(|l| l.starts_with(family) && l.contains(r#"target="signals"#)).count()
    };
    let v = VERSIONS.len();
    // Buckets (16 bounds and +Inf), _sum and _count of the one (target, success) histogram.
    let latency_series = 17 + 2;
    let expected = [
        ("dco_webhook_conversions_total", v * v),
        // From the hub to each spoke: the hub's spec.gone is dropped.
        ("dco_webhook_lossy_conversions_total", v - 1),
        ("dco_webhook_requests_total", 1),
        ("dco_webhook_request_duration_seconds", latency_series),
        ("dco_webhook_objects_converted_total", 1),
        ("dco_webhook_plan_compiled_timestamp_seconds", 1),
        ("dco_webhook_plan_compile_ok", 1),
    ];
    let mut total = 0;
    for (family, each) in expected {
        assert_eq!(per_target(family), TARGETS * each, "{family}");
        total += TARGETS * each;
    }
    let labelled = series.iter().filter(|l| l.contains(r#"target="signals"#)).count();
    assert_eq!(labelled, total, "a target-labelled family the formula does not count");
    println!(
        "series on /metrics with {TARGETS} targets × {v} versions, every pair converted: {} in all, {labelled} labelled with a target ({} per target)",
        series.len(),
        labelled / TARGETS
    );
}
