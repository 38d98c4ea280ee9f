//! The server wing's apply-and-prune and status against the mocked apiserver
//! (`crate::testing`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use dco_api::{ConversionWebhookServer, LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY};
use http::{Method, StatusCode};
use serde_json::{Value, json};

use crate::context::Context;
use crate::context::testing::test_context;
use crate::server::ServerWing;
use crate::testing::*;

const NS: &str = "/api/v1/namespaces/dco-system";
const RBAC: &str = "/apis/rbac.authorization.k8s.io/v1";
const HPAS: &str = "/apis/autoscaling/v2/namespaces/dco-system/horizontalpodautoscalers";
const STATUS: &str = "/apis/conversion.dco.rs/v1alpha1/conversionwebhookservers/a/status";

/// The lists the prune makes, in its order (`server::owned::OwnedObjects::prune`).
fn owned_lists(ns: &str) -> [String; 10] {
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
fn metadata_list(items: Vec<Value>) -> Value {
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
                d["metadata"]["resourceVersion"] = json!("5");
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
) -> (ApiServerVerifier, tokio::task::JoinHandle<crate::error::Result<kube::runtime::controller::Action>>) {
    let (ctx, api, mut w) = test_context();
    w.server(cws.clone());
    (api, tokio::spawn(crate::reconcile::reconcile::<ServerWing>(Arc::new(cws.clone()), ctx)))
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
        (format!("{RBAC}/clusterroles"), vec![cluster_scoped(listed("dco-webhook-a", "a", Some("uid-a")))]),
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
    assert_eq!(reads, [&format!("GET {NS}/secrets/dco-webhook-a-tls")], "only the serving Secret is read");
    assert!(played.requests.contains(&"GET /apis/cert-manager.io/v1".to_string()), "{:?}", played.requests);
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
    cws.spec.certificate =
        serde_json::from_value(json!({"issuerRef": {"name": "ca"}, "duration": "24h", "renewBefore": "8h"}))
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
    issued.metadata.owner_references =
        Some(vec![crate::server::cert_manager::secret_owner(&crate::server::desired::owner(&cws).unwrap())]);
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
    let recent =
        (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60)).to_string();
    assert!(issued_reconcile(&recent).await.is_empty(), "pruned within the grace");
    let old =
        (k8s_openapi::jiff::Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(301)).to_string();
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
        let task = tokio::spawn(crate::reconcile::reconcile::<ServerWing>(Arc::new(cws.clone()), ctx));
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
        assert!(message.contains("\"dco-system\"") && message.contains("rbac.serverNamespaces"), "{message}");
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

#[tokio::test]
async fn server_reconcile_applies_the_workload_issues_certs_and_aggregates_leases() {
    let (ctx, mut api, mut w) = test_context();
    let cws = server("a", true, 0, &[]);
    w.server(cws.clone());
    w.lease(lease("a-1", "a", &["t1", "t2"]));
    w.lease(lease("a-2", "a", &["t2", "t3"]));
    w.lease(lease("b-1", "b", &["t9"]));
    // The assignments come from the index of every config (crate::config_refs), not from
    // this replica's config cache, which holds only its own shards (empty here), nor from a
    // list of every config.
    ctx.watched.config_refs.apply(&kube::runtime::watcher::Event::Apply(config(Some("a"), json!({}))));
    let task = tokio::spawn(crate::reconcile::reconcile::<ServerWing>(Arc::new(cws.clone()), ctx));

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
    for path in owned_lists("dco-system") {
        let list = api.expect(Method::GET, &path).await;
        assert!(list.query.contains("labelSelector="), "{path}?{}", list.query);
        list.ok(&metadata_list(Vec::new()));
    }
    let status =
        api.expect(Method::PATCH, "/apis/conversion.dco.rs/v1alpha1/conversionwebhookservers/a/status").await;
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

/// Plays one full reconcile of server `a` on `ctx` (`play`: the Deployment answered at
/// resourceVersion 5); returns the status it wrote.
async fn full_reconcile(
    ctx: &Arc<Context>,
    api: &mut ApiServerVerifier,
    cws: &ConversionWebhookServer,
) -> Value {
    let task = tokio::spawn(crate::reconcile::reconcile::<ServerWing>(Arc::new(cws.clone()), ctx.clone()));
    let played = play(api, cws, &BTreeMap::new()).await;
    assert!(played.requests.len() > 10, "a full apply and prune: {:?}", played.requests);
    assert!(task.await.unwrap().is_ok());
    played.status
}

/// The Deployment `play` answers an apply with, as its watch would show it.
fn applied_deployment(rv: &str) -> k8s_openapi::api::apps::v1::Deployment {
    serde_json::from_value(json!({
        "metadata": {"name": "dco-webhook-a", "namespace": "dco-system", "resourceVersion": rv},
        "spec": {"replicas": 2, "selector": {}, "template": {}},
        "status": {"replicas": 2, "readyReplicas": 2},
    }))
    .unwrap()
}

/// A reconcile of `cws` that must make no request at all: it returns within 2 s (a request
/// would wait for the mock's answer, which never comes).
async fn quiet_reconcile(
    ctx: &Arc<Context>,
    cws: &ConversionWebhookServer,
) -> kube::runtime::controller::Action {
    let task = crate::reconcile::reconcile::<ServerWing>(Arc::new(cws.clone()), ctx.clone());
    match tokio::time::timeout(Duration::from_secs(2), task).await {
        Ok(res) => res.expect("a quiet reconcile succeeds"),
        Err(_) => panic!("the reconcile sent a request although nothing changed"),
    }
}

#[tokio::test]
async fn a_server_whose_objects_and_status_are_as_applied_costs_no_request_and_a_change_applies_again() {
    let (ctx, mut api, mut w) = test_context();
    let mut cws = server("a", true, 2, &[]);
    w.server(cws.clone());
    // The first reconcile applies every object, issues the certificate, prunes and writes status;
    // the Deployment comes back at resourceVersion 5.
    let status = full_reconcile(&ctx, &mut api, &cws).await;
    // The watches show what it applied, and the server carries the status it wrote.
    w.deployments.apply_watcher_event(&kube::runtime::watcher::Event::Apply(applied_deployment("5")));
    cws.status = Some(serde_json::from_value(status).unwrap());
    let action = quiet_reconcile(&ctx, &cws).await;
    assert!(action != kube::runtime::controller::Action::await_change(), "it still looks again: {action:?}");
    // A Deployment edited by hand (a new resourceVersion) is applied again, without a prune.
    w.deployments.apply_watcher_event(&kube::runtime::watcher::Event::Apply(applied_deployment("9")));
    let task = tokio::spawn(crate::reconcile::reconcile::<ServerWing>(Arc::new(cws.clone()), ctx.clone()));
    let mut requests = Vec::new();
    let mut events = Vec::new();
    loop {
        let x = api.events_then(&mut events).await;
        requests.push(format!("{} {}", x.method, x.path));
        assert!(!x.query.contains("labelSelector="), "no prune for an edit: {requests:?}");
        match x.method {
            Method::PATCH if x.path.ends_with("/deployments/dco-webhook-a") => {
                let mut d = x.body.clone();
                d["metadata"]["resourceVersion"] = json!("5");
                d["status"] = json!({"replicas": 2, "readyReplicas": 2});
                x.ok(&d);
                break;
            }
            Method::PATCH => x.echo(),
            Method::GET => x.not_found(),
            _ => panic!("unexpected request {} {}", x.method, x.path),
        }
    }
    assert!(task.await.unwrap().is_ok());
    assert!(requests.iter().any(|r| r.ends_with("/services/dco-webhook-a")), "{requests:?}");
    // Healed: the watch shows the apply's answer again, and nothing is sent.
    w.deployments.apply_watcher_event(&kube::runtime::watcher::Event::Apply(applied_deployment("5")));
    quiet_reconcile(&ctx, &cws).await;
    // A Deployment gone from the watch (deleted by hand) is applied again too.
    w.deployments.apply_watcher_event(&kube::runtime::watcher::Event::Delete(applied_deployment("5")));
    let task = tokio::spawn(crate::reconcile::reconcile::<ServerWing>(Arc::new(cws.clone()), ctx.clone()));
    let first = api.events_then(&mut events).await;
    assert_eq!(first.method, Method::PATCH, "an apply first: {}", first.path);
    drop(first);
    drop(api);
    let _ = task.await;
}
