//! The mocked apiserver (tower-test) the wings' tests run their reconciles against, in the
//! style of kube-rs' controller-rs: the test plays the apiserver, asserting each request the
//! reconcile makes in order and answering it, so the exact writes (field manager, paths,
//! bodies) are checked; and the fixtures both wings' tests share.

use std::collections::BTreeMap;
use std::time::Duration;

use dco_api::served_lease::{DEFAULT_MAX_ENCODED_BYTES, encode};
use dco_api::{
    CRDConversionConfig, ConversionWebhookServer, FINALIZER_IN_USE, FINALIZER_SAFE_REVERT, LABEL_INSTANCE,
    LABEL_MANAGED_BY, MANAGED_BY,
};
use http::{Method, Request, Response, StatusCode};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::coordination::v1::LeaseSpec;
use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::client::Body;
use kube::{Client, Resource};
use serde_json::{Value, json};

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;

pub struct ApiServerVerifier(Handle);

/// A client whose every request the returned verifier answers.
pub fn mock_client() -> (Client, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (Client::new(service, "default"), ApiServerVerifier(handle))
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

    /// A config deletion's list of the configs naming its target (`kinds::configs_naming`): `cccs` as the
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

/// The wiring to server `a`'s Service in `dco-system` for `target` (`/convert/<target>`), as
/// the config wing's status, propagation and revert tests expect it.
pub fn wiring(target: &str) -> dco_api::target::Wiring {
    dco_api::target::Wiring {
        namespace: "dco-system".into(),
        service: "dco-webhook-a".into(),
        path: format!("/convert/{target}"),
        port: 443,
        ca_bundle: "PEM".into(),
        review_versions: vec!["v1".into()],
    }
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

/// A served-target Lease of replica `pod` of `server`, reporting `targets`, renewed now.
pub fn lease(pod: &str, server: &str, targets: &[&str]) -> Lease {
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
