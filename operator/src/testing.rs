//! Reconcile paths against a mocked apiserver (tower-test), in the style of kube-rs'
//! controller-rs: the test plays the apiserver, asserting each request the reconcile makes in
//! order and answering it, so the exact writes (field manager, paths, bodies) are checked.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dco_api::{
    CRDConversionConfig, ConversionWebhookServer, FINALIZER_IN_USE, FINALIZER_SAFE_REVERT, LABEL_INSTANCE,
    LABEL_MANAGED_BY, MANAGED_BY,
};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Secret;
use kube::client::Body;
use kube::runtime::reflector::{self, store::Writer};
use kube::runtime::watcher;
use kube::{Client, Resource};
use serde_json::{Value, json};

use crate::context::{Context, Settings, Stores};
use crate::observability::metrics::Metrics;
use crate::sharding::gate::Gate;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub struct ApiServerVerifier(Handle);

pub struct Writers {
    pub servers: Writer<ConversionWebhookServer>,
    pub leases: Writer<Lease>,
    pub secrets: Writer<Secret>,
    #[allow(dead_code)]
    pub cccs: Writer<CRDConversionConfig>,
}

impl Writers {
    pub fn server(&mut self, s: ConversionWebhookServer) {
        self.servers.apply_watcher_event(&watcher::Event::Apply(s));
    }
    pub fn secret(&mut self, s: Secret) {
        self.secrets.apply_watcher_event(&watcher::Event::Apply(s));
    }
    pub fn lease(&mut self, l: Lease) {
        self.leases.apply_watcher_event(&watcher::Event::Apply(l));
    }
}

/// A client whose every request the returned verifier answers.
pub fn mock_client() -> (Client, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServerVerifier(handle))
}

pub fn test_context() -> (Arc<Context>, ApiServerVerifier, Writers) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = Client::new(service, "default");
    let (servers, servers_w) = reflector::store();
    let (leases, leases_w) = reflector::store();
    let (secrets, secrets_w) = reflector::store();
    let (cccs, cccs_w) = reflector::store();
    let (xccs, _) = reflector::store();
    let stores = Stores { servers, leases: leases.into(), secrets: secrets.into(), xccs, cccs };
    let ctx =
        Context::new(client, Settings::default(), stores, Arc::new(Metrics::default()), Gate::everything());
    (
        Arc::new(ctx),
        ApiServerVerifier(handle),
        Writers { servers: servers_w, leases: leases_w, secrets: secrets_w, cccs: cccs_w },
    )
}

/// One request the reconcile must make next.
pub struct Exchange {
    pub method: Method,
    pub path: String,
    pub query: String,
    pub body: Value,
    send: tower_test::mock::SendResponse<Response<Body>>,
}

impl Exchange {
    pub fn reply(self, status: StatusCode, body: &Value) {
        let bytes = serde_json::to_vec(body).unwrap_or_default();
        let resp = Response::builder().status(status).body(Body::from(bytes));
        match resp {
            Ok(r) => self.send.send_response(r),
            Err(e) => panic!("building a mock response: {e}"),
        }
    }

    pub fn ok(self, body: &Value) {
        self.reply(StatusCode::OK, body);
    }

    /// Answer an apply with the object as applied (what the apiserver would return).
    pub fn echo(self) {
        let b = self.body.clone();
        self.ok(&b);
    }

    /// Answer a status apply with `obj` carrying the applied status.
    pub fn with_status<K: serde::Serialize>(self, obj: &K) {
        let mut full = serde_json::to_value(obj).unwrap_or_default();
        full["status"] = self.body["status"].clone();
        self.ok(&full);
    }

    pub fn not_found(self) {
        let status = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "NotFound", "code": 404, "message": "not found"});
        self.reply(StatusCode::NOT_FOUND, &status);
    }

    pub fn is_apply_by_operator(&self) -> bool {
        self.method == Method::PATCH
            && self.query.contains("fieldManager=dco-operator")
            && self.query.contains("force=true")
    }
}

impl ApiServerVerifier {
    pub async fn next(&mut self) -> Exchange {
        let next = tokio::time::timeout(Duration::from_secs(5), self.0.next_request()).await;
        let (req, send) = match next {
            Ok(Some(r)) => r,
            Ok(None) => panic!("the reconcile dropped the client before the expected request"),
            Err(_) => panic!("the reconcile made no further request within 5 s"),
        };
        let method = req.method().clone();
        let path = req.uri().path().to_string();
        let query = req.uri().query().unwrap_or_default().to_string();
        let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or(Value::Null)
        };
        Exchange { method, path, query, body, send }
    }

    /// The next request must be `method` on `path`.
    /// A config reconcile's list of every config (`server::config_refs`): `cccs` as the
    /// CRDConversionConfigs, `xccs` as the XRDConversionConfigs.
    pub async fn configs_listed(&mut self, cccs: Vec<Value>, xccs: Vec<Value>) {
        let l = self.expect(Method::GET, "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs").await;
        l.ok(&config_list(cccs));
        let l = self.expect(Method::GET, "/apis/conversion.dco.rs/v1alpha1/xrdconversionconfigs").await;
        l.ok(&config_list(xccs));
    }

    pub async fn expect(&mut self, method: Method, path: &str) -> Exchange {
        let x = self.next().await;
        assert_eq!((&x.method, x.path.as_str()), (&method, path), "unexpected request; body: {}", x.body);
        x
    }

    /// Answer any Event POSTs (their order relative to each other is not the point), returning
    /// their reasons, until a request of another kind arrives, which is returned.
    pub async fn events_then(&mut self, reasons: &mut Vec<String>) -> Exchange {
        loop {
            let x = self.next().await;
            if x.method == Method::POST && x.path.ends_with("/events") {
                reasons.push(x.body["reason"].as_str().unwrap_or_default().to_string());
                x.echo();
                continue;
            }
            return x;
        }
    }
}

// --- fixtures --------------------------------------------------------------------------

pub const TARGET: &str = "widgets.example.org";

pub fn server(name: &str, default: bool, ready: i32, served: &[&str]) -> ConversionWebhookServer {
    let mut s: ConversionWebhookServer = serde_json::from_value(json!({
        "apiVersion": "conversion.dco.rs/v1alpha1",
        "kind": "ConversionWebhookServer",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "generation": 1, "finalizers": [FINALIZER_IN_USE]},
        "spec": {"default": default, "replicas": 2},
        "status": {
            "replicas": 2, "readyReplicas": ready, "reportingReplicas": ready,
            "servedTargets": served,
            "conditions": [{"type": "Available", "status": if ready > 0 { "True" } else { "False" }, "reason": "R", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
        }
    }))
    .unwrap_or_else(|e| panic!("server fixture: {e}"));
    s.meta_mut().resource_version = Some("1".into());
    s
}

pub const CA_PEM: &str = "-----BEGIN CERTIFICATE-----\nTUlJQ0ZBS0U=\n-----END CERTIFICATE-----\n";

pub fn tls_secret(server: &str) -> Secret {
    let names = crate::names::ServerNames::new(server, "dco-system");
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": names.tls_secret, "namespace": "dco-system",
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: server}},
        "data": {"ca.crt": base64_of(CA_PEM), "tls.crt": base64_of("x"), "tls.key": base64_of("y")},
    }))
    .unwrap_or_else(|e| panic!("secret fixture: {e}"))
}

pub fn base64_of(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(s.as_bytes())
}

fn schema(spec: Value) -> Value {
    json!({"openAPIV3Schema": {"type": "object", "properties": {
        "apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"},
        "spec": {"type": "object", "properties": spec}}}})
}

pub fn crd(conversion: Value) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": TARGET, "generation": 3, "uid": "crd-uid"},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [
                {"name": "v1", "served": true, "storage": false, "schema": schema(json!({"storageSize": {"type": "integer"}, "owner": {"type": "string"}}))},
                {"name": "v2", "served": true, "storage": true, "schema": schema(json!({"storageGB": {"type": "integer"}, "owner": {"type": "string"}}))},
            ],
            "conversion": conversion,
        },
        "status": {
            "conditions": [{"type": "Established", "status": "True", "reason": "InitialNamesAccepted", "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
            "acceptedNames": {"plural": "widgets", "kind": "Widget"},
            "storedVersions": ["v2"],
        }
    })
}

/// A list of config objects (either kind), as the apiserver answers one.
pub fn config_list(items: Vec<Value>) -> Value {
    json!({"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "List", "metadata": {"resourceVersion": "9"}, "items": items})
}

pub fn config(pin: Option<&str>, status: Value) -> CRDConversionConfig {
    let mut spec = json!({
        "targetCRD": {"name": TARGET},
        "hubVersion": "v2",
        "spokes": [{"version": "v1", "rules": [
            {"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.storageGB", "spokePath": "spec.storageSize"}}
        ]}],
    });
    if let Some(p) = pin {
        spec["webhookServerRef"] = json!({"name": p});
    }
    serde_json::from_value(json!({
        "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "CRDConversionConfig",
        "metadata": {"name": "widgets", "uid": "cfg-uid", "generation": 1, "finalizers": [FINALIZER_SAFE_REVERT], "resourceVersion": "7"},
        "spec": spec,
        "status": status,
    }))
    .unwrap_or_else(|e| panic!("config fixture: {e}"))
}

pub fn wired_to(server: &str) -> Value {
    json!({"strategy": "Webhook", "webhook": {
        "clientConfig": {
            "service": {"namespace": "dco-system", "name": format!("dco-webhook-{server}"), "path": format!("/convert/{TARGET}"), "port": 443},
            "caBundle": base64_of(CA_PEM)},
        "conversionReviewVersions": ["v1"]}})
}

pub fn labels_of(l: &[(&str, &str)]) -> BTreeMap<String, String> {
    l.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{config, server};
    use dco_api::served_lease::{DEFAULT_MAX_ENCODED_BYTES, encode};
    use k8s_openapi::api::coordination::v1::LeaseSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use k8s_openapi::jiff::Timestamp;

    const CCC_PATH: &str = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.org";
    const STATUS_PATH: &str = "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs/widgets/status";
    const CFG_PATH: &str = "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs/widgets";

    async fn run_config(
        ctx: Arc<Context>,
        cfg: CRDConversionConfig,
    ) -> tokio::task::JoinHandle<crate::error::Result<kube::runtime::controller::Action>> {
        tokio::spawn(config::reconcile(Arc::new(cfg), ctx))
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
        api.configs_listed(vec![], vec![]).await;
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
        let cond = st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "HandoverReady"))
            .cloned();
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
        api.configs_listed(vec![], vec![]).await;
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
        let hr = st["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "HandoverReady"))
            .cloned();
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
        api.configs_listed(vec![], vec![]).await;
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
        api.configs_listed(vec![], vec![]).await;
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
        api.configs_listed(vec![], vec![]).await;
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
        let task = run_config(ctx, cfg.clone()).await;
        api.expect(Method::GET, CFG_PATH).await.ok(&serde_json::to_value(&cfg).unwrap_or_default());
        api.expect(Method::GET, CCC_PATH).await.ok(&crd(json!({"strategy": "None"})));
        let mut first = serde_json::to_value(&cfg).unwrap_or_default();
        first["metadata"]["name"] = json!("a-first");
        api.configs_listed(vec![first, serde_json::to_value(&cfg).unwrap_or_default()], vec![]).await;
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

    fn lease(pod: &str, server: &str, targets: &[&str]) -> Lease {
        let annotations = encode(targets.iter(), DEFAULT_MAX_ENCODED_BYTES)
            .annotations()
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect();
        Lease {
            metadata: ObjectMeta {
                name: Some(format!("dco-served-{pod}")),
                namespace: Some("dco-system".into()),
                labels: Some(labels_of(&[(LABEL_INSTANCE, server), (LABEL_MANAGED_BY, MANAGED_BY)])),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(Timestamp::now())),
                lease_duration_seconds: Some(90),
                ..LeaseSpec::default()
            }),
        }
    }

    #[tokio::test]
    async fn server_reconcile_applies_the_workload_issues_certs_and_aggregates_leases() {
        let (ctx, mut api, mut w) = test_context();
        let cws = server("a", true, 0, &[]);
        w.server(cws.clone());
        w.lease(lease("a-1", "a", &["t1", "t2"]));
        w.lease(lease("a-2", "a", &["t2", "t3"]));
        w.lease(lease("b-1", "b", &["t9"]));
        let task = tokio::spawn(server::reconcile(Arc::new(cws.clone()), ctx));

        let ns = "/api/v1/namespaces/dco-system";
        let rbac = "/apis/rbac.authorization.k8s.io/v1";
        for path in [
            format!("{ns}/serviceaccounts/dco-webhook-a"),
            format!("{rbac}/namespaces/dco-system/roles/dco-webhook-a"),
            format!("{rbac}/namespaces/dco-system/rolebindings/dco-webhook-a"),
            format!("{rbac}/clusterroles/dco-webhook-a"),
            format!("{rbac}/clusterrolebindings/dco-webhook-a"),
        ] {
            let x = api.expect(Method::PATCH, &path).await;
            assert!(x.is_apply_by_operator());
            assert_eq!(x.body["metadata"]["ownerReferences"][0]["uid"], "uid-a");
            x.echo();
        }
        api.expect(Method::GET, &format!("{ns}/secrets/dco-webhook-a-ca")).await.not_found();
        api.expect(Method::GET, &format!("{ns}/secrets/dco-webhook-a-tls")).await.not_found();
        let ca = api.expect(Method::PATCH, &format!("{ns}/secrets/dco-webhook-a-ca")).await;
        assert!(ca.body["data"]["ca.key"].is_string());
        ca.echo();
        let tls = api.expect(Method::PATCH, &format!("{ns}/secrets/dco-webhook-a-tls")).await;
        assert_eq!(tls.body["type"], "kubernetes.io/tls");
        assert!(tls.body["data"]["tls.crt"].is_string() && tls.body["data"]["ca.crt"].is_string());
        tls.echo();
        let mut reasons = Vec::new();
        let svc = api.events_then(&mut reasons).await;
        assert_eq!(reasons, ["CertificateIssued"]);
        assert_eq!(svc.path, format!("{ns}/services/dco-webhook-a"));
        svc.echo();
        let deploy =
            api.expect(Method::PATCH, "/apis/apps/v1/namespaces/dco-system/deployments/dco-webhook-a").await;
        assert_eq!(deploy.body["spec"]["template"]["spec"]["containers"][0]["args"][0], "--instance=a");
        let mut d = deploy.body.clone();
        d["status"] = json!({"replicas": 2, "readyReplicas": 2});
        deploy.ok(&d);
        // The prune lists every owned kind by the server's labels; nothing else is there.
        for path in crate::testing::server_tests::owned_lists("dco-system") {
            let list = api.expect(Method::GET, &path).await;
            assert!(list.query.contains("labelSelector="), "{path}?{}", list.query);
            list.ok(&crate::testing::server_tests::metadata_list(Vec::new()));
        }
        // The assignments come from a list of every config, not from this replica's config
        // cache, which holds only its own shards (the store here is empty).
        let cccs = api.expect(Method::GET, "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs").await;
        assert!(cccs.query.contains("limit=500"), "{}", cccs.query);
        let pinned = serde_json::to_value(config(Some("a"), json!({}))).unwrap();
        cccs.ok(&config_list(vec![pinned]));
        api.expect(Method::GET, "/apis/conversion.dco.rs/v1alpha1/xrdconversionconfigs")
            .await
            .ok(&config_list(Vec::new()));
        let status = api
            .expect(Method::PATCH, "/apis/conversion.dco.rs/v1alpha1/conversionwebhookservers/a/status")
            .await;
        let st = &status.body["status"];
        assert_eq!(st["readyReplicas"], 2);
        assert_eq!(st["reportingReplicas"], 2);
        assert_eq!(st["servedTargets"], json!(["t2"]));
        assert_eq!(st["servedTargetsTruncated"], false);
        assert_eq!(st["endpoint"], "https://dco-webhook-a.dco-system.svc:443");
        assert_eq!(st["assignedConfigs"][0]["name"], "widgets", "{st}");
        let conds: Vec<(String, String)> = st["conditions"]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|c| {
                (c["type"].as_str().unwrap_or("").to_string(), c["status"].as_str().unwrap_or("").to_string())
            })
            .collect();
        for want in ["Available", "CertificateReady", "ServiceReady"] {
            assert!(conds.contains(&(want.to_string(), "True".to_string())), "{want} not True in {conds:?}");
        }
        status.with_status(&cws);
        let action = task.await.unwrap();
        assert!(action.is_ok(), "{action:?}");
    }
}

/// The server wing's apply-and-prune, against the mocked apiserver.
#[cfg(test)]
pub(crate) mod server_tests {
    use super::*;
    use crate::server;

    const NS: &str = "/api/v1/namespaces/dco-system";
    const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
    const HPAS: &str = "/apis/autoscaling/v2/namespaces/dco-system/horizontalpodautoscalers";
    const STATUS: &str = "/apis/conversion.dco.rs/v1alpha1/conversionwebhookservers/a/status";

    /// The lists the prune makes, in its order (`server::owned::Owned::prune`).
    pub fn owned_lists(ns: &str) -> [String; 10] {
        let rbac = "/apis/rbac.authorization.k8s.io/v1";
        [
            format!("/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers"),
            format!("/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"),
            format!("/apis/apps/v1/namespaces/{ns}/deployments"),
            format!("/api/v1/namespaces/{ns}/services"),
            format!("/api/v1/namespaces/{ns}/secrets"),
            format!("{rbac}/namespaces/{ns}/rolebindings"),
            format!("{rbac}/namespaces/{ns}/roles"),
            format!("/api/v1/namespaces/{ns}/serviceaccounts"),
            format!("{rbac}/clusterrolebindings"),
            format!("{rbac}/clusterroles"),
        ]
    }

    /// A metadata-only list answer (`Api::list_metadata`).
    pub fn metadata_list(items: Vec<Value>) -> Value {
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {"resourceVersion": "9"}, "items": items})
    }

    /// One listed object: `name` with server `instance`'s labels, controlled by `owner_uid`
    /// (or by nothing).
    fn listed(name: &str, instance: &str, owner_uid: Option<&str>) -> Value {
        let mut meta = json!({
            "name": name, "namespace": "dco-system", "uid": format!("obj-{name}"),
            "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTANCE: instance},
        });
        if let Some(uid) = owner_uid {
            meta["ownerReferences"] = json!([{
                "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                "name": instance, "uid": uid, "controller": true, "blockOwnerDeletion": true,
            }]);
        }
        json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadata", "metadata": meta})
    }

    fn cluster_scoped(mut v: Value) -> Value {
        if let Some(m) = v["metadata"].as_object_mut() {
            m.remove("namespace");
        }
        v
    }

    /// What a whole server reconcile asked of the apiserver.
    struct Played {
        /// `METHOD path` of every request but Events, in order.
        requests: Vec<String>,
        /// The DELETE requests: path and body (the DeleteParams).
        deletes: Vec<(String, Value)>,
        status: Value,
    }

    /// Plays the apiserver for one reconcile of `cws`: applies are echoed (the Deployment
    /// with 2 ready replicas), Secrets are not found yet, lists answer `lists` by path
    /// (empty when absent), deletes succeed; ends with the status write.
    async fn play(
        api: &mut ApiServerVerifier,
        cws: &ConversionWebhookServer,
        lists: &BTreeMap<String, Vec<Value>>,
    ) -> Played {
        let mut played = Played { requests: Vec::new(), deletes: Vec::new(), status: Value::Null };
        let mut events = Vec::new();
        loop {
            let x = api.events_then(&mut events).await;
            played.requests.push(format!("{} {}", x.method, x.path));
            match x.method {
                Method::PATCH if x.path == STATUS => {
                    played.status = x.body["status"].clone();
                    x.with_status(cws);
                    return played;
                }
                Method::PATCH if x.path.ends_with("/deployments/dco-webhook-a") => {
                    assert!(x.is_apply_by_operator());
                    let mut d = x.body.clone();
                    d["status"] = json!({"replicas": 2, "readyReplicas": 2});
                    x.ok(&d);
                }
                Method::PATCH => {
                    assert!(x.is_apply_by_operator(), "{} {}", x.path, x.query);
                    x.echo();
                }
                Method::GET if x.query.contains("labelSelector=") => {
                    let items = lists.get(&x.path).cloned().unwrap_or_default();
                    x.ok(&metadata_list(items));
                }
                Method::GET if x.path.ends_with("conversionconfigs") => x.ok(&config_list(Vec::new())),
                Method::GET => x.not_found(),
                Method::DELETE => {
                    played.deletes.push((x.path.clone(), x.body.clone()));
                    x.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
                }
                _ => panic!("unexpected request {} {}", x.method, x.path),
            }
        }
    }

    /// A reconcile of `cws` (cached as the only server) against a fresh mocked apiserver.
    fn spawn(
        cws: &ConversionWebhookServer,
    ) -> (ApiServerVerifier, tokio::task::JoinHandle<crate::error::Result<kube::runtime::controller::Action>>)
    {
        let (ctx, api, mut w) = test_context();
        w.server(cws.clone());
        (api, tokio::spawn(server::reconcile(Arc::new(cws.clone()), ctx)))
    }

    async fn reconcile(cws: ConversionWebhookServer, lists: BTreeMap<String, Vec<Value>>) -> Played {
        let (mut api, task) = spawn(&cws);
        let played = play(&mut api, &cws, &lists).await;
        let res = task.await.unwrap();
        assert!(res.is_ok(), "{res:?}");
        played
    }

    #[tokio::test]
    async fn an_hpa_removed_from_the_spec_is_pruned_and_nothing_else() {
        // Server a has no spec.autoscaling: its HPA from before is an orphan.
        let cws = server("a", true, 2, &[]);
        let lists = BTreeMap::from([
            (
                HPAS.to_string(),
                vec![
                    listed("dco-webhook-a", "a", Some("uid-a")),
                    // Another server's, even with a's labels copied onto it.
                    listed("dco-webhook-b", "b", Some("uid-b")),
                    listed("copied", "a", Some("uid-b")),
                    // a's labels but no controller: someone else's object.
                    listed("by-hand", "a", None),
                ],
            ),
            // The desired Deployment and the Secrets the certificate step reads.
            (
                "/apis/apps/v1/namespaces/dco-system/deployments".to_string(),
                vec![listed("dco-webhook-a", "a", Some("uid-a"))],
            ),
            (
                format!("{NS}/secrets"),
                vec![
                    listed("dco-webhook-a-ca", "a", Some("uid-a")),
                    listed("dco-webhook-a-tls", "a", Some("uid-a")),
                ],
            ),
        ]);
        let played = reconcile(cws, lists).await;
        assert_eq!(played.deletes.len(), 1, "{:?}", played.deletes);
        let (path, body) = &played.deletes[0];
        assert_eq!(path, &format!("{HPAS}/dco-webhook-a"));
        // Only the object listed: a same-named one made since fails the precondition.
        assert_eq!(body["preconditions"]["uid"], "obj-dco-webhook-a");
        assert_eq!(body["propagationPolicy"], "Background");
        // The prune comes after every apply and before the status write.
        let at = |r: &str| played.requests.iter().position(|x| x == r).unwrap_or(usize::MAX);
        assert!(
            at("PATCH /apis/apps/v1/namespaces/dco-system/deployments/dco-webhook-a")
                < at(&format!("GET {HPAS}"))
        );
        assert!(at(&format!("DELETE {HPAS}/dco-webhook-a")) < at(&format!("PATCH {STATUS}")));
    }

    #[tokio::test]
    async fn a_desired_hpa_and_pdb_are_applied_not_pruned() {
        let mut cws = server("a", true, 2, &[]);
        cws.spec.autoscaling = serde_json::from_value(json!({"minReplicas": 2, "maxReplicas": 4})).ok();
        cws.spec.pod_disruption_budget = serde_json::from_value(json!({"minAvailable": 1})).ok();
        let lists = BTreeMap::from([
            (HPAS.to_string(), vec![listed("dco-webhook-a", "a", Some("uid-a"))]),
            (
                "/apis/policy/v1/namespaces/dco-system/poddisruptionbudgets".to_string(),
                vec![listed("dco-webhook-a", "a", Some("uid-a"))],
            ),
            (
                format!("{RBAC}/clusterroles"),
                vec![cluster_scoped(listed("dco-webhook-a", "a", Some("uid-a")))],
            ),
        ]);
        let played = reconcile(cws, lists).await;
        assert!(played.deletes.is_empty(), "{:?}", played.deletes);
        for applied in [
            format!("PATCH {HPAS}/dco-webhook-a"),
            "PATCH /apis/policy/v1/namespaces/dco-system/poddisruptionbudgets/dco-webhook-a".to_string(),
        ] {
            assert!(played.requests.contains(&applied), "{applied} not in {:?}", played.requests);
        }
    }

    #[tokio::test]
    async fn the_secrets_stay_while_cert_manager_is_missing_and_a_dropped_service_account_goes() {
        // spec.certificate without cert-manager installed: the self-managed Secrets are
        // neither rewritten nor pruned (the Pods keep serving the old one), the condition says
        // what to do; spec.serviceAccountName: the operator's ServiceAccount from before is pruned.
        let mut cws = server("a", true, 2, &[]);
        cws.spec.certificate = serde_json::from_value(json!({"issuerRef": {"name": "ca"}})).ok();
        cws.spec.service_account_name = Some("mine".into());
        let lists = BTreeMap::from([
            (
                format!("{NS}/secrets"),
                vec![
                    listed("dco-webhook-a-ca", "a", Some("uid-a")),
                    listed("dco-webhook-a-tls", "a", Some("uid-a")),
                ],
            ),
            (format!("{NS}/serviceaccounts"), vec![listed("dco-webhook-a", "a", Some("uid-a"))]),
        ]);
        let played = reconcile(cws, lists).await;
        let deleted: Vec<&str> = played.deletes.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(deleted, [format!("{NS}/serviceaccounts/dco-webhook-a")]);
        let reads: Vec<&String> =
            played.requests.iter().filter(|r| r.starts_with("GET") && r.contains("/secrets/")).collect();
        assert_eq!(
            reads,
            [&format!("GET {NS}/secrets/dco-webhook-a-tls")],
            "only the serving Secret is read"
        );
        assert!(
            played.requests.contains(&"GET /apis/cert-manager.io/v1".to_string()),
            "{:?}",
            played.requests
        );
        assert!(!played.requests.iter().any(|r| r.starts_with("PATCH") && r.contains("/secrets/")));
        let cert = played.status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "CertificateReady"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (cert["status"].clone(), cert["reason"].clone()),
            (json!("False"), json!("CertManagerNotInstalled"))
        );
    }

    const CM: &str = "/apis/cert-manager.io/v1";
    const CERTS: &str = "/apis/cert-manager.io/v1/namespaces/dco-system/certificates";

    fn cert_manager_discovery() -> Value {
        json!({"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": "cert-manager.io/v1",
            "resources": [{"name": "certificates", "singularName": "certificate", "namespaced": true,
                "kind": "Certificate", "verbs": ["get", "list", "watch", "create", "patch", "delete"]}]})
    }

    #[tokio::test]
    async fn with_cert_manager_the_server_applies_a_certificate_and_waits_for_it() {
        let mut cws = server("a", true, 2, &[]);
        cws.spec.certificate = serde_json::from_value(
            json!({"issuerRef": {"name": "ca"}, "duration": "24h", "renewBefore": "8h"}),
        )
        .ok();
        let (mut api, task) = spawn(&cws);
        let mut events = Vec::new();
        let mut requests = Vec::new();
        let mut certificate = Value::Null;
        let status = loop {
            let x = api.events_then(&mut events).await;
            requests.push(format!("{} {}", x.method, x.path));
            match (&x.method, x.path.as_str()) {
                (&Method::GET, CM) => x.ok(&cert_manager_discovery()),
                (&Method::PATCH, p) if p == format!("{CERTS}/dco-webhook-a") => {
                    assert!(x.is_apply_by_operator(), "{}", x.query);
                    certificate = x.body.clone();
                    x.echo();
                }
                (&Method::PATCH, STATUS) => {
                    let st = x.body["status"].clone();
                    x.with_status(&cws);
                    break st;
                }
                (&Method::PATCH, p) if p.ends_with("/deployments/dco-webhook-a") => {
                    let mut d = x.body.clone();
                    d["status"] = json!({"replicas": 2, "readyReplicas": 0});
                    x.ok(&d);
                }
                (&Method::GET, _) if x.query.contains("labelSelector=") => x.ok(&metadata_list(Vec::new())),
                (&Method::GET, p) if p.ends_with("conversionconfigs") => x.ok(&config_list(Vec::new())),
                (&Method::GET, _) => x.not_found(),
                (&Method::PATCH, p) => {
                    assert!(!p.contains("/secrets/"), "wrote a Secret cert-manager issues: {p}");
                    x.echo()
                }
                _ => panic!("unexpected request {} {}", x.method, x.path),
            }
        };
        assert!(task.await.unwrap().is_ok());
        // The Certificate before the Deployment whose Pods mount its Secret.
        let at = |r: &str| requests.iter().position(|x| x == r).unwrap_or(usize::MAX);
        assert!(
            at(&format!("PATCH {CERTS}/dco-webhook-a"))
                < at("PATCH /apis/apps/v1/namespaces/dco-system/deployments/dco-webhook-a")
        );
        assert_eq!(certificate["spec"]["secretName"], "dco-webhook-a-tls");
        assert_eq!(
            (certificate["spec"]["duration"].as_str(), certificate["spec"]["renewBefore"].as_str()),
            (Some("24h"), Some("8h"))
        );
        assert_eq!(certificate["metadata"]["ownerReferences"][0]["uid"], "uid-a");
        let cert = status["conditions"]
            .as_array()
            .and_then(|cs| cs.iter().find(|c| c["type"] == "CertificateReady"))
            .cloned()
            .unwrap_or_default();
        assert_eq!(
            (cert["status"].as_str(), cert["reason"].as_str()),
            (Some("False"), Some("CertificatePending"))
        );
        assert!(cert["message"].as_str().unwrap_or_default().contains("ContainerCreating"), "{cert}");
        assert_eq!(events, ["CertificatePending"]);
    }

    /// One reconcile of a server whose serving Secret cert-manager issued from a Certificate
    /// that is Ready with a leaf from `not_before`: the DELETEs it made.
    async fn issued_reconcile(not_before: &str) -> Vec<String> {
        let mut cws = server("a", true, 2, &[]);
        cws.spec.certificate = serde_json::from_value(json!({"issuerRef": {"name": "ca"}})).ok();
        let mut issued = tls_secret("a");
        issued.metadata.labels = Some(crate::names::ServerNames::new("a", "dco-system").labels());
        issued.metadata.annotations =
            Some(BTreeMap::from([("cert-manager.io/certificate-name".into(), "dco-webhook-a".into())]));
        issued.metadata.owner_references = Some(vec![crate::server::cert_manager::secret_owner(
            &crate::server::desired::owner(&cws).unwrap(),
        )]);
        let (mut api, task) = spawn(&cws);
        let mut events = Vec::new();
        let mut deletes = Vec::new();
        loop {
            let x = api.events_then(&mut events).await;
            match (&x.method, x.path.as_str()) {
                (&Method::GET, CM) => x.ok(&cert_manager_discovery()),
                (&Method::GET, p) if p == format!("{NS}/secrets/dco-webhook-a-tls") => {
                    x.ok(&serde_json::to_value(&issued).unwrap())
                }
                (&Method::PATCH, p) if p == format!("{CERTS}/dco-webhook-a") => {
                    let mut c = x.body.clone();
                    c["metadata"]["generation"] = json!(1);
                    c["status"] = json!({"notBefore": not_before, "notAfter": "2099-01-01T00:00:00Z",
                        "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "", "observedGeneration": 1}]});
                    x.ok(&c);
                }
                (&Method::GET, p) if p == format!("{NS}/secrets") => x.ok(&metadata_list(vec![
                    listed("dco-webhook-a-ca", "a", Some("uid-a")),
                    listed("dco-webhook-a-tls", "a", Some("uid-a")),
                ])),
                (&Method::DELETE, _) => {
                    deletes.push(x.path.clone());
                    x.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
                }
                (&Method::PATCH, STATUS) => {
                    let cert = x.body["status"]["conditions"]
                        .as_array()
                        .and_then(|cs| cs.iter().find(|c| c["type"] == "CertificateReady"))
                        .cloned()
                        .unwrap_or_default();
                    assert_eq!(
                        (cert["status"].as_str(), cert["reason"].as_str()),
                        (Some("True"), Some("CertManager"))
                    );
                    x.with_status(&cws);
                    break;
                }
                (&Method::GET, _) if x.query.contains("labelSelector=") => x.ok(&metadata_list(Vec::new())),
                (&Method::GET, p) if p.ends_with("conversionconfigs") => x.ok(&config_list(Vec::new())),
                (&Method::GET, _) => x.not_found(),
                (&Method::PATCH, p) => {
                    assert!(!p.contains("/secrets/"), "rewrote a Secret cert-manager issued: {p}");
                    x.echo()
                }
                _ => panic!("unexpected request {} {}", x.method, x.path),
            }
        }
        assert!(task.await.unwrap().is_ok());
        deletes
    }

    #[tokio::test]
    async fn the_self_managed_ca_secret_goes_once_cert_manager_s_leaf_has_been_out_long_enough() {
        let recent = (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60))
            .to_string();
        assert!(issued_reconcile(&recent).await.is_empty(), "pruned within the grace");
        let old = (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(301))
            .to_string();
        assert_eq!(issued_reconcile(&old).await, [format!("{NS}/secrets/dco-webhook-a-ca")]);
    }

    #[tokio::test]
    async fn with_cert_manager_the_ca_bundle_trusts_the_kept_self_managed_ca_too() {
        let (ctx, _api, mut w) = test_context();
        let mut cws = server("a", true, 2, &[]);
        w.secret(tls_secret("a"));
        assert_eq!(ctx.ca_bundle(&cws).as_deref(), Some(CA_PEM));
        let own = "-----BEGIN CERTIFICATE-----\nT1dOQ0E=\n-----END CERTIFICATE-----\n";
        w.secret(
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "dco-webhook-a-ca", "namespace": "dco-system"},
            "data": {"ca.crt": base64_of(own)}}))
            .unwrap(),
        );
        assert_eq!(
            ctx.ca_bundle(&cws).as_deref(),
            Some(CA_PEM),
            "self-managed: the serving Secret's ca.crt only"
        );
        cws.spec.certificate = serde_json::from_value(json!({"issuerRef": {"name": "ca"}})).ok();
        assert_eq!(ctx.ca_bundle(&cws), Some(format!("{}\n{}", CA_PEM.trim_end(), own)));
    }

    #[tokio::test]
    async fn removing_spec_certificate_deletes_the_certificate_before_the_secret_is_rewritten() {
        let cws = server("a", true, 2, &[]);
        let issued = json!({"apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
            "metadata": {"name": "dco-webhook-a-tls", "namespace": "dco-system",
                "annotations": {"cert-manager.io/certificate-name": "dco-webhook-a", "cert-manager.io/issuer-name": "ca", "other": "kept"}},
            "data": {"tls.crt": "Y2VydA==", "tls.key": "a2V5", "ca.crt": "Y2E="}});
        let owned_cert = json!({"apiVersion": "cert-manager.io/v1", "kind": "Certificate",
            "metadata": {"name": "dco-webhook-a", "namespace": "dco-system", "uid": "cert-uid",
                "ownerReferences": [{"apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
                    "name": "a", "uid": "uid-a", "controller": true}]}});
        let (mut api, task) = spawn(&cws);
        let mut events = Vec::new();
        let mut requests = Vec::new();
        let (mut deleted, mut stripped) = (Value::Null, Value::Null);
        loop {
            let x = api.events_then(&mut events).await;
            requests.push(format!("{} {}", x.method, x.path));
            match (&x.method, x.path.as_str()) {
                (&Method::GET, p) if p == format!("{NS}/secrets/dco-webhook-a-tls") => x.ok(&issued),
                (&Method::GET, p) if p == format!("{CERTS}/dco-webhook-a") => x.ok(&owned_cert),
                (&Method::DELETE, p) if p == format!("{CERTS}/dco-webhook-a") => {
                    deleted = x.body.clone();
                    x.ok(&json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}));
                }
                (&Method::PATCH, p)
                    if p == format!("{NS}/secrets/dco-webhook-a-tls") && !x.is_apply_by_operator() =>
                {
                    stripped = x.body.clone();
                    x.ok(&issued);
                }
                (&Method::PATCH, STATUS) => {
                    x.with_status(&cws);
                    break;
                }
                (&Method::GET, _) if x.query.contains("labelSelector=") => x.ok(&metadata_list(Vec::new())),
                (&Method::GET, p) if p.ends_with("conversionconfigs") => x.ok(&config_list(Vec::new())),
                (&Method::GET, _) => x.not_found(),
                (&Method::PATCH, _) => x.echo(),
                _ => panic!("unexpected request {} {}", x.method, x.path),
            }
        }
        assert!(task.await.unwrap().is_ok());
        assert_eq!(deleted["preconditions"]["uid"], "cert-uid");
        assert_eq!(
            stripped,
            json!({"metadata": {"annotations": {"cert-manager.io/certificate-name": null, "cert-manager.io/issuer-name": null}}})
        );
        let at = |r: &str| requests.iter().position(|x| x == r).unwrap_or(usize::MAX);
        let rewrite =
            requests.iter().rposition(|r| r == &format!("PATCH {NS}/secrets/dco-webhook-a-tls")).unwrap_or(0);
        assert!(at(&format!("DELETE {CERTS}/dco-webhook-a")) < rewrite, "{requests:?}");
        assert!(events.contains(&"CertificateReleased".to_string()), "{events:?}");
    }

    #[tokio::test]
    async fn a_delete_that_lost_the_race_is_not_an_error() {
        let cws = server("a", true, 2, &[]);
        let (mut api, task) = spawn(&cws);
        let (mut events, mut raced) = (Vec::new(), Vec::new());
        loop {
            let x = api.events_then(&mut events).await;
            match (&x.method, x.path.as_str()) {
                (&Method::GET, p) if p == HPAS => {
                    x.ok(&metadata_list(vec![
                        listed("gone", "a", Some("uid-a")),
                        listed("replaced", "a", Some("uid-a")),
                    ]));
                }
                (&Method::DELETE, p) if p == format!("{HPAS}/gone") => {
                    raced.push("gone");
                    x.not_found()
                }
                (&Method::DELETE, p) if p == format!("{HPAS}/replaced") => {
                    raced.push("replaced");
                    let conflict = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Conflict", "code": 409, "message": "Precondition failed: UID in precondition: obj-replaced, UID in object meta: other"});
                    x.reply(StatusCode::CONFLICT, &conflict);
                }
                (&Method::PATCH, STATUS) => {
                    x.with_status(&cws);
                    break;
                }
                (&Method::GET, _) if x.query.contains("labelSelector=") => x.ok(&metadata_list(Vec::new())),
                (&Method::GET, p) if p.ends_with("conversionconfigs") => x.ok(&config_list(Vec::new())),
                (&Method::GET, _) => x.not_found(),
                (&Method::PATCH, _) => x.echo(),
                _ => panic!("unexpected request {} {}", x.method, x.path),
            }
        }
        assert_eq!(raced, ["gone", "replaced"]);
        let res = task.await.unwrap();
        assert!(res.is_ok(), "{res:?}");
    }

    /// A server whose namespace (here `--namespace`, dco-system) is not among
    /// `--server-namespaces`: nothing is written for it but its status (`Available=False`
    /// `NamespaceNotWatched`, naming the chart value and the flag) and one Warning Event; the
    /// next reconcile, seeing that status, writes it again unchanged and sends no second Event.
    #[tokio::test]
    async fn a_server_outside_the_watched_namespaces_is_refused_in_its_status() {
        let (ctx, _unused, _w) = test_context();
        let mut settings = ctx.settings.clone();
        settings.server_namespaces = crate::namespaces::ServerNamespaces::parse("team-a").unwrap();
        let mut cws = server("a", true, 0, &[]);
        let mut first_status = Value::Null;
        for round in 0..2 {
            let (ctx, mut api, mut w) = test_context();
            w.server(cws.clone());
            let ctx = Arc::new(Context::new(
                ctx.client.clone(),
                settings.clone(),
                ctx.stores.clone(),
                ctx.metrics.clone(),
                ctx.gate.clone(),
            ));
            let task = tokio::spawn(server::reconcile(Arc::new(cws.clone()), ctx));
            let mut events = Vec::new();
            let status = loop {
                let x = api.events_then(&mut events).await;
                match x.method {
                    Method::PATCH if x.path == STATUS => {
                        let st = x.body["status"].clone();
                        x.with_status(&cws);
                        break st;
                    }
                    Method::GET if x.path.ends_with("conversionconfigs") => x.ok(&config_list(Vec::new())),
                    _ => panic!("round {round}: a refused server's reconcile asked {} {}", x.method, x.path),
                }
            };
            if round == 0 {
                let x = api.next().await;
                assert!(x.method == Method::POST && x.path.ends_with("/events"), "{} {}", x.method, x.path);
                assert_eq!(
                    (x.body["reason"].as_str(), x.body["type"].as_str()),
                    (Some("NamespaceNotWatched"), Some("Warning"))
                );
                let note = x.body["note"].as_str().unwrap_or_default().to_string();
                assert!(
                    note.contains("rbac.serverNamespaces") && note.contains("--server-namespaces=team-a"),
                    "{note}"
                );
                x.echo();
                first_status = status.clone();
            } else {
                assert_eq!(status, first_status, "the second reconcile changed the status");
            }
            let action = task.await.unwrap().expect("a refusal is no reconcile error");
            assert_eq!(action, kube::runtime::controller::Action::requeue(Duration::from_secs(300)));
            assert!(events.is_empty(), "round {round}: Events {events:?} before the status");
            let available = status["conditions"]
                .as_array()
                .and_then(|c| c.iter().find(|c| c["type"] == "Available"))
                .cloned()
                .unwrap_or_default();
            assert_eq!(
                (available["status"].as_str(), available["reason"].as_str()),
                (Some("False"), Some("NamespaceNotWatched"))
            );
            let message = available["message"].as_str().unwrap_or_default();
            assert!(
                message.contains("\"dco-system\"") && message.contains("rbac.serverNamespaces"),
                "{message}"
            );
            // The next round's server carries what this one wrote.
            cws.status = Some(serde_json::from_value(status).unwrap());
        }
    }

    #[tokio::test]
    async fn a_failed_apply_prunes_nothing() {
        let cws = server("a", true, 2, &[]);
        let (mut api, task) = spawn(&cws);
        let mut events = Vec::new();
        loop {
            let x = api.events_then(&mut events).await;
            assert!(!x.query.contains("labelSelector="), "listed for a prune after a failed apply");
            match x.method {
                Method::PATCH if x.path.ends_with("/services/dco-webhook-a") => {
                    let err = json!({"kind": "Status", "apiVersion": "v1", "status": "Failure", "reason": "Invalid", "code": 422, "message": "spec.ports: Invalid value"});
                    x.reply(StatusCode::UNPROCESSABLE_ENTITY, &err);
                    break;
                }
                Method::PATCH => x.echo(),
                Method::GET => x.not_found(),
                _ => panic!("unexpected request {} {}", x.method, x.path),
            }
        }
        let res = task.await.unwrap();
        assert!(res.is_err(), "the apply error is the reconcile's");
    }
}
