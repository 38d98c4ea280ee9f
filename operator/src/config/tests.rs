//! The config wing's reconciles against the mocked apiserver (`crate::testing`).

use std::sync::Arc;

use dco_api::CRDConversionConfig;
use http::Method;
use kube::Resource;
use serde_json::{Value, json};

use crate::config::ConfigWing;
use crate::context::Context;
use crate::context::testing::test_context;
use crate::reconcile::reconcile;
use crate::testing::*;
use k8s_openapi::jiff::Timestamp;

const CCC_PATH: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.org";
const STATUS_PATH: &str = "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs/widgets/status";
const CFG_PATH: &str = "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs/widgets";

async fn run_config(
    ctx: Arc<Context>,
    cfg: CRDConversionConfig,
) -> tokio::task::JoinHandle<crate::error::Result<kube::runtime::controller::Action>> {
    tokio::spawn(reconcile::<ConfigWing<CRDConversionConfig>>(Arc::new(cfg), ctx))
}

/// A first wiring to server `a`, driven through the API: the Event reasons in order and
/// the status written.
/// A reconcile of a new config for an unwired target (strategy None), server `a` with 2
/// ready replicas whose Leases list what `second` says for the second replica (the first
/// reports the target), up to the config's and the target's reads.
async fn adopting(
    second: &[&str],
) -> (
    ApiServerVerifier,
    CRDConversionConfig,
    tokio::task::JoinHandle<crate::error::Result<kube::runtime::controller::Action>>,
) {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[]));
    w.secret(tls_secret("a"));
    w.lease(lease("a-1", "a", &[TARGET]));
    w.lease(lease("a-2", "a", second));
    let cfg = config(None, json!({}));
    let task = run_config(ctx, cfg.clone()).await;
    api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&cfg).unwrap_or_default());
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(json!({"strategy": "None"})));
    (api, cfg, task)
}

async fn first_wiring() -> (Vec<String>, Value) {
    // A first wiring waits for the destination like any move: both replicas report it.
    let (mut api, cfg, task) = adopting(&[TARGET]).await;
    let mut reasons = Vec::new();
    let patch = api.events_then(&mut reasons).await;
    assert_eq!((&patch.method, patch.path.as_str()), (&Method::PATCH, CCC_PATH));
    assert!(patch.is_apply_by_operator(), "query {}", patch.query);
    // Only spec.conversion is sent, and it names the server's Service, path and CA.
    assert_eq!(patch.body["spec"].as_object().map(|o| o.len()), Some(1));
    assert_eq!(patch.body["spec"]["conversion"], wired_to("a"));
    patch.ok(&crd(wired_to("a")));

    let status = api.events_then(&mut reasons).await;
    assert_eq!((&status.method, status.path.as_str()), (&Method::PATCH, STATUS_PATH));
    assert!(status.is_apply_by_operator());
    let st = status.body["status"].clone();
    status.with_status(&cfg);
    let res = task.await.unwrap();
    assert!(res.is_ok(), "{res:?}");
    (reasons, st)
}

/// Until the destination's replicas report the target, a first wiring writes nothing to
/// the target: adopting a live target is a move too.
#[tokio::test]
async fn a_first_wiring_waits_for_the_destinations_leases() {
    let (mut api, cfg, task) = adopting(&[]).await;
    let mut reasons = Vec::new();
    let status = api.events_then(&mut reasons).await;
    assert_eq!((&status.method, status.path.as_str()), (&Method::PATCH, STATUS_PATH), "no target patch");
    let st = status.body["status"].clone();
    status.with_status(&cfg);
    assert!(task.await.unwrap().is_ok());
    assert_eq!(reasons, ["HandoverStarted"]);
    assert_eq!(st["handover"]["state"], "Compiling");
    let cond =
        st["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == "HandoverReady")).cloned();
    assert_eq!(cond.map(|c| c["reason"].clone()), Some(json!("AwaitingDestination")));
}

#[tokio::test]
async fn first_wiring_goes_straight_to_the_resolved_server_and_settles() {
    let (reasons, st) = first_wiring().await;
    assert_eq!(st["phase"], "Applied");
    assert_eq!(st["assignedWebhookServer"], "a");
    assert_eq!(st["webhookPath"], "/convert/widgets.example.org");
    assert_eq!(st["handover"]["state"], "SourceDropped");
    assert_eq!(st["handover"]["destination"], "a");
    assert!(st["handover"].get("source").is_none());
    assert!(st["handover"]["traceparent"].as_str().is_some_and(|t| t.starts_with("00-")));
    assert_eq!(st["overallLossless"], true);
    let cond =
        |t: &str| st["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == t)).cloned();
    assert_eq!(cond("HandoverReady").map(|c| c["reason"].clone()), Some(json!("HandoverReady")));
    assert_eq!(cond("Validated").map(|c| c["status"].clone()), Some(json!("True")));
    assert_eq!(reasons, ["HandoverStarted", "DestinationReady", "Patched", "SourceDropped"]);
}

/// With handover spans exported, the same move is one trace: the persisted traceparent's
/// trace id, one span per Event, each leaving the state the last one entered.
#[tokio::test]
async fn each_transition_is_a_span_of_the_persisted_trace() {
    use crate::observability::telemetry::testing::{capture, spans, text};
    // This thread's subscriber: the test runtime has one thread, which polls the reconcile.
    let (_guard, exporter) = capture();
    let (reasons, st) = first_wiring().await;

    let traceparent = st["handover"]["traceparent"].as_str().unwrap_or_default().to_string();
    let mut spans = spans(&exporter);
    // The root span, sent with the first transition, has the traceparent's own ids.
    let root = spans.remove(0);
    assert_eq!(root.name, "handover");
    assert_eq!(Some(root.span_context.span_id().to_string().as_str()), traceparent.get(36..52));
    assert_eq!(root.parent_span_id, opentelemetry::trace::SpanId::INVALID);
    let names: Vec<&str> = spans.iter().map(|s| s.name.as_ref()).collect();
    assert_eq!(names, reasons);
    let states: Vec<(String, String)> =
        spans.iter().map(|s| (text(s, "dco.handover.from"), text(s, "dco.handover.to"))).collect();
    assert_eq!(
        states,
        [
            ("Unassigned", "Compiling"),
            ("Compiling", "DestinationReady"),
            ("DestinationReady", "Patched"),
            ("Patched", "SourceDropped")
        ]
        .map(|(a, b)| (a.to_string(), b.to_string()))
    );
    for span in &spans {
        let sc = &span.span_context;
        assert_eq!(traceparent.get(3..35), Some(sc.trace_id().to_string().as_str()), "{traceparent}");
        assert_eq!(traceparent.get(36..52), Some(span.parent_span_id.to_string().as_str()));
        assert_eq!(text(span, "dco.config"), "CRDConversionConfig/widgets");
        assert_eq!(text(span, "dco.target"), "widgets.example.org");
        assert!(span.end_time >= span.start_time);
    }
}

fn settled_on(server: &str) -> Value {
    json!({
        "phase": "Applied", "assignedWebhookServer": server,
        "handover": {"state": "SourceDropped", "destination": server, "attempt": 1},
    })
}

#[tokio::test]
async fn a_move_waits_for_every_replica_of_the_destination_without_touching_the_target() {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[TARGET]));
    // b runs, but its replicas do not report the target yet.
    w.server(server("b", false, 2, &[]));
    w.lease(lease("b-1", "b", &[]));
    w.lease(lease("b-2", "b", &[]));
    w.secret(tls_secret("a"));
    w.secret(tls_secret("b"));
    let cfg = config(Some("b"), settled_on("a"));
    let task = run_config(ctx, cfg.clone()).await;

    api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&cfg).unwrap_or_default());
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(wired_to("a")));
    let mut reasons = Vec::new();
    let status = api.events_then(&mut reasons).await;
    // No CRD patch: the next request is already the status.
    assert_eq!((&status.method, status.path.as_str()), (&Method::PATCH, STATUS_PATH));
    let st = &status.body["status"];
    assert_eq!(st["handover"]["state"], "Compiling");
    assert_eq!(st["handover"]["source"], "a");
    assert_eq!(st["handover"]["destination"], "b");
    assert_eq!(st["handover"]["attempt"], 2);
    assert_eq!(st["phase"], "Validated");
    assert_eq!(reasons, ["HandoverStarted"]);
    let hr =
        st["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == "HandoverReady")).cloned();
    assert_eq!(hr.map(|c| c["reason"].clone()), Some(json!("AwaitingDestination")));
    status.with_status(&cfg);
    let res = task.await.unwrap();
    assert!(res.is_ok(), "{res:?}");
}

#[tokio::test]
async fn once_the_destination_reports_the_target_is_rewired_and_waits_for_the_source() {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[TARGET]));
    w.server(server("b", false, 2, &[TARGET]));
    // Every replica of b reports the target.
    w.lease(lease("b-1", "b", &[TARGET]));
    w.lease(lease("b-2", "b", &[TARGET]));
    w.secret(tls_secret("a"));
    w.secret(tls_secret("b"));
    // One replica of a still holds the target: the source has not dropped it.
    w.lease(lease("a-1", "a", &[TARGET]));
    w.lease(lease("a-2", "a", &[]));
    let compiling = json!({
        "phase": "Validated", "assignedWebhookServer": "b",
        "handover": {"state": "Compiling", "source": "a", "destination": "b", "attempt": 2, "traceparent": "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01"},
    });
    let cfg = config(Some("b"), compiling);
    let task = run_config(ctx, cfg.clone()).await;

    api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&cfg).unwrap_or_default());
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(wired_to("a")));
    let mut reasons = Vec::new();
    let patch = api.events_then(&mut reasons).await;
    assert_eq!((&patch.method, patch.path.as_str()), (&Method::PATCH, CCC_PATH));
    assert_eq!(patch.body["spec"]["conversion"], wired_to("b"));
    patch.ok(&crd(wired_to("b")));
    let status = api.events_then(&mut reasons).await;
    let st = &status.body["status"];
    // The source still reports the target: the move is Patched, not yet settled.
    assert_eq!(st["handover"]["state"], "Patched");
    assert_eq!(st["handover"]["traceparent"], "00-0123456789abcdef0123456789abcdef-0123456789abcdef-01");
    assert_eq!(reasons, ["DestinationReady", "Patched"]);
    status.with_status(&cfg);
    let res = task.await.unwrap();
    assert!(res.is_ok(), "{res:?}");
}

#[tokio::test]
async fn the_move_settles_once_no_replica_of_the_source_holds_the_target() {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[]));
    w.server(server("b", false, 2, &[TARGET]));
    w.secret(tls_secret("a"));
    w.secret(tls_secret("b"));
    w.lease(lease("a-1", "a", &[]));
    w.lease(lease("a-2", "a", &["other.example.org"]));
    let patched = json!({
        "phase": "Validated", "assignedWebhookServer": "b",
        "handover": {"state": "Patched", "source": "a", "destination": "b", "attempt": 2},
    });
    let cfg = config(Some("b"), patched);
    let task = run_config(ctx, cfg.clone()).await;
    api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&cfg).unwrap_or_default());
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(wired_to("b")));
    let mut reasons = Vec::new();
    let status = api.events_then(&mut reasons).await;
    assert_eq!((&status.method, status.path.as_str()), (&Method::PATCH, STATUS_PATH));
    let st = &status.body["status"];
    assert_eq!(st["handover"]["state"], "SourceDropped");
    assert_eq!(st["phase"], "Applied");
    assert_eq!(reasons, ["SourceDropped"]);
    status.with_status(&cfg);
    let res = task.await.unwrap();
    assert!(res.is_ok(), "{res:?}");
}

#[tokio::test]
async fn a_rotated_ca_is_pushed_to_a_settled_target_without_a_move() {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[TARGET]));
    w.secret(tls_secret("a"));
    let cfg = config(None, settled_on("a"));
    let task = run_config(ctx, cfg.clone()).await;
    api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&cfg).unwrap_or_default());
    // The target still carries the CA from before the rotation.
    let mut old = wired_to("a");
    old["webhook"]["clientConfig"]["caBundle"] =
        json!(base64_of("-----BEGIN CERTIFICATE-----\nT0xE\n-----END CERTIFICATE-----\n"));
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(old));
    let patch = api.expect(Method::PATCH, CCC_PATH).await;
    assert!(patch.is_apply_by_operator());
    assert_eq!(patch.body["spec"]["conversion"], wired_to("a"));
    patch.ok(&crd(wired_to("a")));
    let mut reasons = Vec::new();
    let status = api.events_then(&mut reasons).await;
    assert_eq!(reasons, ["WiringRefreshed"]);
    let st = &status.body["status"];
    assert_eq!(
        (st["phase"].clone(), st["handover"]["state"].clone()),
        (json!("Applied"), json!("SourceDropped"))
    );
    assert_eq!(st["handover"]["attempt"], 1, "a CA refresh is not a move");
    status.with_status(&cfg);
    let res = task.await.unwrap();
    assert!(res.is_ok(), "{res:?}");
}

/// Two configs for one target that slipped past admission: the one not chosen (the
/// first by kind, then name, is; here CRDConversionConfig `a-first`) writes nothing to
/// the target, although its destination serves it, and says which config is served.
#[tokio::test]
async fn a_config_another_one_overrides_never_writes_the_target() {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[]));
    w.secret(tls_secret("a"));
    w.lease(lease("a-1", "a", &[TARGET]));
    w.lease(lease("a-2", "a", &[TARGET]));
    let cfg = config(None, json!({}));
    // The other config, in the index of every config (fed by the unsharded watch).
    let mut first = cfg.clone();
    first.metadata.name = Some("a-first".into());
    for c in [first, cfg.clone()] {
        ctx.watched.config_refs.apply(&kube::runtime::watcher::Event::Apply(c));
    }
    let task = run_config(ctx, cfg.clone()).await;
    api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&cfg).unwrap_or_default());
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(json!({"strategy": "None"})));
    // No target patch, no Event: the next request is the status.
    let status = api.next().await;
    assert_eq!((&status.method, status.path.as_str()), (&Method::PATCH, STATUS_PATH), "{}", status.body);
    let st = status.body["status"].clone();
    status.with_status(&cfg);
    assert!(task.await.unwrap().is_ok());
    let cond =
        |t: &str| st["conditions"].as_array().and_then(|cs| cs.iter().find(|c| c["type"] == t)).cloned();
    let want = "CRDConversionConfig a-first also names CustomResourceDefinition widgets.example.org and is the one served (the first by kind, then name, as every webhook replica chooses); this config is ignored and never writes the target: delete one of them";
    let conflict = cond("Conflict").unwrap_or_default();
    assert_eq!(
        (&conflict["status"], &conflict["reason"], &conflict["message"]),
        (&json!("True"), &json!("Conflict"), &json!(want))
    );
    let handover = cond("HandoverReady").unwrap_or_default();
    assert_eq!((&handover["status"], &handover["reason"]), (&json!("False"), &json!("Conflict")));
    assert_eq!(st["phase"], "Invalid");
    assert_eq!(st["message"], want);
    assert_eq!(st["handover"]["state"], "Unassigned");
}

/// "Delete one of them" is safe whichever goes: the deleted config leaves the target's
/// wiring to the other one instead of reverting it to None.
#[tokio::test]
async fn deleting_one_of_two_configs_for_a_target_leaves_it_wired() {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[TARGET]));
    w.secret(tls_secret("a"));
    let mut cfg = config(None, settled_on("a"));
    cfg.meta_mut().deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
    let task = run_config(ctx, cfg.clone()).await;
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(wired_to("a")));
    let other = json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "XRDConversionConfig",
        "metadata": {"name": "other", "uid": "other-uid"},
        "spec": {"targetXRD": {"name": TARGET}, "hubVersion": "v2", "spokes": []}});
    api.configs_listed(vec![serde_json::to_value(&cfg).unwrap_or_default()], vec![other]).await;
    let ev = api.next().await;
    assert!(ev.path.ends_with("/events"), "no revert: {} {}", ev.method, ev.path);
    assert_eq!(ev.body["reason"], "RevertSkipped");
    assert_eq!(
        ev.body["note"],
        "left CustomResourceDefinition widgets.example.org's spec.conversion wired to ConversionWebhookServer a: XRDConversionConfig other names it too"
    );
    ev.echo();
    // Then the finalizer goes, with the target untouched.
    let fin = api.next().await;
    assert_eq!((&fin.method, fin.path.as_str()), (&Method::PATCH, CFG_PATH), "{}", fin.body);
    fin.ok(&serde_json::to_value(&cfg).unwrap_or_default());
    assert!(task.await.unwrap().is_ok());
}

#[tokio::test]
async fn deleting_a_config_whose_target_serves_two_versions_is_blocked() {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[TARGET]));
    w.secret(tls_secret("a"));
    let mut cfg = config(None, settled_on("a"));
    cfg.meta_mut().deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
    let task = run_config(ctx, cfg.clone()).await;
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(wired_to("a")));
    api.configs_listed(vec![], vec![]).await;
    let status = api.expect(Method::PATCH, STATUS_PATH).await;
    let blocked = status.body["status"]["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DeletionBlocked"))
        .cloned()
        .unwrap_or_default();
    assert!(blocked["message"].as_str().unwrap_or_default().contains("allow-unsafe-delete"));
    status.with_status(&cfg);
    let mut reasons = Vec::new();
    let ev = api.next().await;
    assert!(ev.path.ends_with("/events"));
    reasons.push(ev.body["reason"].as_str().unwrap_or_default().to_string());
    ev.echo();
    assert_eq!(reasons, ["DeletionBlocked"]);
    let res = task.await.unwrap();
    assert!(res.is_err(), "the finalizer must stay");
}

/// A deleting config whose target serves two versions, annotated to be deleted anyway: the
/// finalizer goes straight to the revert write.
fn deleting_unsafe(status: Value) -> CRDConversionConfig {
    let mut cfg = config(None, status);
    cfg.meta_mut().deletion_timestamp =
        Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()));
    cfg.meta_mut().annotations =
        Some([(dco_api::ANNOTATION_ALLOW_UNSAFE_DELETE.to_string(), "true".to_string())].into());
    cfg
}

const REFUSED: &str = "CustomResourceDefinition.apiextensions.k8s.io \"widgets.example.org\" is invalid: spec.conversion: Invalid value: \"None\": pinned by policy";

/// One finalizer run whose revert write the apiserver refuses (422 Invalid) however often it
/// is sent: the status written after the refusal, and the reason and type of the one Event
/// posted if `event`.
async fn refused_revert(cfg: &CRDConversionConfig, event: bool) -> (Value, Vec<String>) {
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[TARGET]));
    w.secret(tls_secret("a"));
    let task = run_config(ctx, cfg.clone()).await;
    api.expect(Method::GET, CCC_PATH).await.ok(&crd(wired_to("a")));
    api.configs_listed(vec![], vec![]).await;
    let reverting = api.expect(Method::PATCH, STATUS_PATH).await;
    assert_eq!(reverting.body["status"]["phase"], "Reverting");
    reverting.with_status(cfg);
    let refusal = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid",
        "code": 422, "message": REFUSED});
    let status = loop {
        let x = api.next().await;
        if (&x.method, x.path.as_str()) != (&Method::PATCH, CCC_PATH) {
            break x;
        }
        x.reply(http::StatusCode::UNPROCESSABLE_ENTITY, &refusal);
    };
    assert_eq!((&status.method, status.path.as_str()), (&Method::PATCH, STATUS_PATH), "{}", status.body);
    let st = status.body["status"].clone();
    status.with_status(cfg);
    let mut reasons = Vec::new();
    if event {
        let x = api.next().await;
        assert!(x.method == Method::POST && x.path.ends_with("/events"), "{} {}", x.method, x.path);
        reasons.push(x.body["reason"].as_str().unwrap_or_default().to_string());
        reasons.push(x.body["type"].as_str().unwrap_or_default().to_string());
        x.echo();
    }
    // A reconcile that posted an Event unasked would wait for its answer and not end.
    let out = tokio::time::timeout(std::time::Duration::from_secs(5), task).await;
    let res = out.expect("the reconcile ends").unwrap();
    assert!(res.is_err(), "the finalizer must stay while the revert is refused");
    (st, reasons)
}

/// A refused revert holds the deletion and says so on the config: `DeletionBlocked` True
/// `RevertFailed` naming the target, the apiserver's answer and the ways out, phase
/// `Reverting`, one Warning Event; a retry with the same answer posts no second Event.
#[tokio::test]
async fn a_refused_revert_blocks_deletion_visibly_once() {
    let cfg = deleting_unsafe(settled_on("a"));
    let (st, event) = refused_revert(&cfg, true).await;
    assert_eq!(event, ["RevertFailed", "Warning"]);
    assert_eq!(st["phase"], "Reverting");
    let blocked = st["conditions"]
        .as_array()
        .and_then(|cs| cs.iter().find(|c| c["type"] == "DeletionBlocked"))
        .cloned()
        .unwrap_or_default();
    assert_eq!((&blocked["status"], &blocked["reason"]), (&json!("True"), &json!("RevertFailed")));
    let msg = blocked["message"].as_str().unwrap_or_default();
    for part in [
        "cannot revert CustomResourceDefinition widgets.example.org's spec.conversion to None",
        "ConversionWebhookServer a",
        "HTTP 422 Invalid",
        REFUSED,
        "remove the finalizer conversion.dco.rs/safe-revert from this config",
    ] {
        assert!(msg.contains(part), "no {part:?} in {msg}");
    }
    // The retry: the config now carries that condition; the same refusal is no news.
    let again = deleting_unsafe(st.clone());
    let (st2, _) = refused_revert(&again, false).await;
    assert_eq!(st2["conditions"], st["conditions"]);
}

/// Events about a failed revert: the first failure and each new message, not each retry.
#[test]
fn a_failed_revert_is_news_once_per_message() {
    use crate::config::deletion::{REVERT_FAILED, note_revert_failed, revert_failed_message};
    let refused = |msg: &str| crate::error::Error::Kube {
        action: "revert spec.conversion of",
        kind: "CustomResourceDefinition",
        name: TARGET.into(),
        source: kube::Error::Api(Box::new(
            serde_json::from_value(
                json!({"status": "Failure", "reason": "Invalid", "code": 422, "message": msg}),
            )
            .unwrap(),
        )),
    };
    let target = format!("CustomResourceDefinition {TARGET}");
    let first = revert_failed_message(&target, "a", &refused("no"));
    let other = revert_failed_message(&target, "a", &refused("still no"));
    assert!(first.contains("HTTP 422 Invalid: no."), "{first}");
    let now = Timestamp::now();
    let mut st = dco_api::ConfigStatus::default();
    assert!(note_revert_failed(&mut st, &first, Some(1), now));
    assert!(!note_revert_failed(&mut st, &first, Some(1), now));
    assert!(note_revert_failed(&mut st, &other, Some(1), now));
    assert_eq!(st.phase, Some(dco_api::config::Phase::Reverting));
    let c = st.conditions.iter().find(|c| c.type_ == "DeletionBlocked").unwrap();
    assert_eq!(
        (c.status.as_str(), c.reason.as_str(), c.message.as_str()),
        ("True", REVERT_FAILED, other.as_str())
    );
    // Blocked for another reason before (several versions served): the refusal is news.
    let mut st = dco_api::ConfigStatus::default();
    dco_state::conditions::set(
        &mut st.conditions,
        "DeletionBlocked",
        true,
        "TargetServesSeveralVersions",
        first.clone(),
        None,
        now,
    );
    assert!(note_revert_failed(&mut st, &first, None, now));
    // Not an answer of the apiserver: the error itself, bounded.
    let long = crate::error::Error::NotReady("x".repeat(5000));
    let msg = revert_failed_message(&target, "a", &long);
    assert!(msg.contains("the write failed: xxx") && msg.contains("x …. Retrying"), "{msg}");
    // An Event's note holds at most 1024 bytes: the answer is cut, the ways out stay.
    assert_eq!(msg.len(), 1024, "{msg}");
    assert!(msg.ends_with("which no longer converts it"), "{msg}");
    // A status write that did not record the news leaves its Event to the attempt that does:
    // a newer config (409) or the fence; any other failure does not hold the Event back.
    use crate::config::deletion::retold;
    let conflict = crate::error::Error::Kube {
        action: "write status of",
        kind: "CRDConversionConfig",
        name: "c".into(),
        source: kube::Error::Api(Box::new(
            serde_json::from_value(
                json!({"status": "Failure", "reason": "Conflict", "code": 409, "message": "modified"}),
            )
            .unwrap(),
        )),
    };
    assert!(retold(&Err(conflict)));
    assert!(retold(&Err(crate::error::Error::Fenced { write: "status", paused: false })));
    assert!(!retold(&Err(refused("no"))));
    assert!(!retold(&Ok(())));
}

/// The CRD watch's view of the target at resourceVersion `rv` (`Watched::targets`).
fn watched_target(ctx: &Context, rv: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let mut meta = kube::api::PartialObjectMeta::<CustomResourceDefinition>::default();
    meta.metadata.name = Some(TARGET.into());
    meta.metadata.resource_version = Some(rv.into());
    let ev = kube::runtime::watcher::Event::Apply(meta);
    ctx.watched.targets.apply(dco_api::config::TargetKind::Crd, &ev);
}

/// A wake of a config at rest with nothing changed since its last look makes no request
/// (config/idle.rs); the watch showing its target edited makes the next wake look again,
/// and a look whose status is what the config carries writes none.
#[tokio::test]
async fn a_wake_of_a_config_at_rest_with_nothing_changed_makes_no_request() {
    use std::time::Duration;
    let (ctx, mut api, mut w) = test_context();
    w.server(server("a", true, 2, &[TARGET]));
    w.secret(tls_secret("a"));
    let cfg = config(None, settled_on("a"));
    let mut target = crd(wired_to("a"));
    target["metadata"]["resourceVersion"] = json!("20");
    watched_target(&ctx, "20");

    // The first wake looks: the config, its target, the configs naming it, the status.
    let task = run_config(ctx.clone(), cfg.clone()).await;
    api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&cfg).unwrap_or_default());
    api.expect(Method::GET, CCC_PATH).await.ok(&target);
    let status = api.events_then(&mut Vec::new()).await;
    assert_eq!((&status.method, status.path.as_str()), (&Method::PATCH, STATUS_PATH));
    let mut written = cfg.clone();
    written.meta_mut().resource_version = Some("8".into());
    written.status = serde_json::from_value(status.body["status"].clone()).ok();
    status.with_status(&written);
    let resync = kube::runtime::controller::Action::requeue(Duration::from_secs(300));
    assert_eq!(task.await.unwrap().ok(), Some(resync.clone()));

    // The timer's wake, the cache holding the config as written: no request (the mocked
    // apiserver answers none, so a request would hang the reconcile).
    let quiet = run_config(ctx.clone(), written.clone()).await;
    let res = tokio::time::timeout(Duration::from_secs(5), quiet).await.expect("no request");
    assert_eq!(res.unwrap().ok(), Some(resync.clone()), "woken again at the next --resync");

    // Someone edits the target: the watch shows it, and the wake looks again. Its status is
    // what the config carries: nothing is written.
    watched_target(&ctx, "21");
    target["metadata"]["resourceVersion"] = json!("21");
    let task = run_config(ctx.clone(), written.clone()).await;
    api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&written).unwrap_or_default());
    api.expect(Method::GET, CCC_PATH).await.ok(&target);
    let res = tokio::time::timeout(Duration::from_secs(5), task).await.expect("no status write");
    assert_eq!(res.unwrap().ok(), Some(resync));

    // Quiet again at the new version.
    let quiet = run_config(ctx, written).await;
    assert!(tokio::time::timeout(Duration::from_secs(5), quiet).await.is_ok(), "no request");
}
