//! The HTTPS surface end to end on loopback: real TLS, real hyper, the axum routes, with a
//! small hand-made plan so every bad-input path can be provoked on purpose.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use dco_api::config::TargetKind;
use dco_api::stop::{Shutdown, Trigger};
use dco_webhook::budget::Budget;
use dco_webhook::health::Health;
use dco_webhook::hold::HoldReason;
use dco_webhook::metrics::Metrics;
use dco_webhook::plan::{BadReview, Compiler, Reviewed, ServablePlan};
use dco_webhook::pool::Pool;
use dco_webhook::registry::{ConfigRef, Entry, Failure, Registry, Served};
use dco_webhook::routes::{App, Limits, admin_router, router};
use dco_webhook::serve::Transport;
use dco_webhook::tls::{CertFiles, CertStore, server_config};
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use serde_json::{Value, json};

/// Sets every object's apiVersion to the desired one. Objects can ask to fail (`spec.fail`),
/// to be slow (`spec.sleepMs`) or to panic (`spec.panic`).
struct Relabel;

impl ServablePlan for Relabel {
    fn hub_version(&self) -> &str {
        "v2"
    }
    fn versions(&self) -> Vec<String> {
        vec!["v1".into(), "v2".into()]
    }
    fn hash(&self) -> String {
        "relabel".into()
    }
    fn review(&self, body: &[u8]) -> Result<Reviewed, BadReview> {
        let review: Value = serde_json::from_slice(body).map_err(|e| BadReview::Malformed(e.to_string()))?;
        let req = review.get("request").ok_or(BadReview::MissingRequest)?;
        let uid = req["uid"].as_str().unwrap_or_default().to_string();
        let desired = req["desiredAPIVersion"].as_str().unwrap_or_default();
        let objects = req["objects"].as_array().cloned().unwrap_or_default();
        let mut out = Vec::new();
        let mut failure = None;
        for mut o in objects.clone() {
            if o.pointer("/spec/panic").is_some() {
                panic!("asked to");
            }
            if let Some(ms) = o.pointer("/spec/sleepMs").and_then(Value::as_u64) {
                std::thread::sleep(Duration::from_millis(ms));
            }
            if o.pointer("/spec/fail").is_some() {
                failure =
                    Some(format!("Widget default/{}: spec.fail: cannot convert", o["metadata"]["name"]));
                break;
            }
            o["apiVersion"] = json!(desired);
            out.push(o);
        }
        let result = match &failure {
            Some(m) => json!({"status": "Failure", "message": m}),
            None => json!({"status": "Success"}),
        };
        let body = json!({"apiVersion": review["apiVersion"], "kind": "ConversionReview",
            "response": {"uid": uid, "convertedObjects": if failure.is_some() { json!([]) } else { json!(out) }, "result": result}});
        Ok(Reviewed {
            body: body.to_string().into(),
            uid,
            objects: objects.len(),
            failure,
            to: None,
            tally: vec![],
        })
    }
}

/// Per-thread allocation counts, so the conversion memory budget is live in these tests as
/// it is in `dco-webhook`.
#[global_allocator]
static ALLOCATOR: dco_webhook::alloc::Counting = dco_webhook::alloc::Counting;

struct Harness {
    base: String,
    admin: String,
    client: reqwest::Client,
    app: Arc<App>,
    certs: Arc<CertStore>,
    dir: PathBuf,
    stop: Trigger,
    server: tokio::task::JoinHandle<()>,
}

fn write_cert(dir: &std::path::Path) -> String {
    let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(dir.join("tls.crt"), ck.cert.pem()).unwrap();
    std::fs::write(dir.join("tls.key"), ck.signing_key.serialize_pem()).unwrap();
    ck.cert.pem()
}

fn client_trusting(ca_pem: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca_pem.as_bytes()).unwrap())
        .resolve("localhost", "127.0.0.1:0".parse().unwrap())
        .pool_max_idle_per_host(0)
        .build()
        .unwrap()
}

fn entry(target: &str, served: bool, failure: Option<&str>) -> Entry {
    Entry {
        target: target.into(),
        target_kind: TargetKind::Crd,
        config: Some(ConfigRef { kind: "CRDConversionConfig".into(), name: "widgets".into() }),
        served: served.then(|| Served {
            plan: Arc::new(Relabel),
            plan_hash: "relabel".into(),
            compiled_at: SystemTime::now(),
            fingerprint: "f".into(),
            signals: Default::default(),
        }),
        failure: failure.map(|m| Failure {
            message: format!("{m}: spoke v1, rule 0 (FieldRename) spec.x: no such path (enum value SECRET)"),
            summary: m.into(),
            errors: vec!["spoke v1, rule 0 (FieldRename) spec.x: no such path (enum value SECRET)".into()],
            locations: vec!["spoke v1, rule 0 (FieldRename), spec.x".into()],
            at: SystemTime::now(),
            fingerprint: "f".into(),
            fail_closed: false,
        }),
        hold: HoldReason::Assigned,
        draining_until: None,
        last_review: Default::default(),
    }
}

async fn start(limits: Limits) -> Harness {
    start_with(limits, false).await
}

async fn start_with(limits: Limits, debug_full_errors: bool) -> Harness {
    let _ = rustls::crypto::ring::default_provider().install_default();
    let dir = std::env::temp_dir().join(format!("dco-http-{}-{}", std::process::id(), rand_suffix()));
    std::fs::create_dir_all(&dir).unwrap();
    let ca = write_cert(&dir);
    let certs = CertStore::load(CertFiles { cert: dir.join("tls.crt"), key: dir.join("tls.key") }).unwrap();
    let tls = Arc::new(server_config(certs.clone()).unwrap());
    let metrics = Arc::new(Metrics::new());
    let registry = Arc::new(Registry::new());
    registry.insert(entry("widgets.example.org", true, None));
    registry.insert(entry(
        "broken.example.org",
        false,
        Some("CRDConversionConfig \"broken\" does not compile"),
    ));
    let app = Arc::new(App {
        registry,
        health: Arc::new(Health::new(metrics.clone())),
        budget: Budget::new(256 << 20, metrics.inflight_bytes.clone()),
        metrics,
        limits,
        pool: Arc::new(Pool::new(1).unwrap()),
        instance: "pool-a".into(),
        debug_full_errors,
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let admin_listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_port = admin_listener.local_addr().unwrap().port();
    let (shutdown, stop) = Shutdown::manual();
    let server = tokio::spawn(dco_webhook::serve::serve(
        listener,
        tls,
        router(app.clone()),
        Transport::default(),
        app.metrics.clone(),
        shutdown.clone(),
        Duration::from_secs(5),
    ));
    tokio::spawn(dco_webhook::serve::serve_admin(admin_listener, admin_router(app.clone()), async move {
        shutdown.closing().await
    }));
    Harness {
        base: format!("https://localhost:{port}"),
        admin: format!("http://127.0.0.1:{admin_port}"),
        client: client_trusting(&ca),
        app,
        certs,
        dir,
        stop,
        server,
    }
}

fn rand_suffix() -> u64 {
    SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos() as u64
}

fn review(api_version: &str, objects: Vec<Value>) -> Value {
    json!({"apiVersion": api_version, "kind": "ConversionReview",
        "request": {"uid": "uid-123", "desiredAPIVersion": "example.org/v2", "objects": objects}})
}

fn widget(name: &str, spec: Value) -> Value {
    json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": name, "namespace": "default"}, "spec": spec})
}

impl Harness {
    async fn post(&self, target: &str, body: impl Into<reqwest::Body>) -> (u16, String) {
        let r = self.client.post(format!("{}/convert/{target}", self.base)).body(body).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
    /// A plain review is still answered (after whatever the test threw at the server).
    async fn assert_still_serving(&self) {
        let body = review("apiextensions.k8s.io/v1", vec![widget("a", json!({}))]).to_string();
        let (status, text) = self.post("widgets.example.org", body).await;
        assert_eq!(status, 200, "{text}");
    }
    async fn get(&self, path: &str) -> (u16, String) {
        let r = self.client.get(format!("{}{path}", self.base)).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
    /// The plain-HTTP admin listener.
    async fn admin(&self, path: &str) -> (u16, String) {
        let r = self.client.get(format!("{}{path}", self.admin)).send().await.unwrap();
        (r.status().as_u16(), r.text().await.unwrap())
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test]
async fn converts_v1_and_v1beta1_reviews() {
    let h = start(Limits::default()).await;
    for av in ["apiextensions.k8s.io/v1", "apiextensions.k8s.io/v1beta1"] {
        let body = review(av, vec![widget("a", json!({})), widget("b", json!({}))]).to_string();
        let (status, text) = h.post("widgets.example.org", body).await;
        assert_eq!(status, 200, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["apiVersion"], av);
        assert_eq!(v["response"]["uid"], "uid-123");
        assert_eq!(v["response"]["convertedObjects"][1]["apiVersion"], "example.org/v2");
    }
    let (_, metrics) = h.admin("/metrics").await;
    assert!(
        metrics.contains(r#"dco_webhook_requests_total{target="widgets.example.org",result="success"} 2"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"dco_webhook_objects_converted_total{target="widgets.example.org"} 4"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn unknown_target_fails_closed_with_503() {
    let h = start(Limits::default()).await;
    let (status, text) =
        h.post("nobody.example.org", review("apiextensions.k8s.io/v1", vec![]).to_string()).await;
    assert_eq!(status, 503);
    assert!(text.contains("\"nobody.example.org\"") && text.contains("\"pool-a\""), "{text}");
    // A target whose config never compiled is not servable either, and says why.
    let (status, text) =
        h.post("broken.example.org", review("apiextensions.k8s.io/v1", vec![]).to_string()).await;
    assert_eq!(status, 503);
    assert!(text.contains("does not compile"), "{text}");
    let (_, metrics) = h.admin("/metrics").await;
    // Made-up paths never become labels.
    assert!(!metrics.contains("nobody.example.org"), "{metrics}");
    assert!(
        metrics.contains(r#"dco_webhook_requests_total{target="<unknown>",result="unknown_target"} 1"#),
        "{metrics}"
    );
}

#[tokio::test]
async fn a_fail_closed_target_answers_a_failure_review_naming_the_config_and_the_drift() {
    let h = start(Limits::default()).await;
    let mut closed = entry(
        "widgets.example.org",
        true,
        Some(
            "CRDConversionConfig \"widgets\" does not compile against CustomResourceDefinition \"widgets.example.org\"",
        ),
    );
    closed.failure.as_mut().unwrap().fail_closed = true;
    h.app.registry.insert(closed);
    let body = review("apiextensions.k8s.io/v1", vec![widget("a", json!({}))]).to_string();
    let (status, text) = h.post("widgets.example.org", body).await;
    // A review, so the apiserver shows the message to whoever read or wrote the object.
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["response"]["uid"], "uid-123");
    assert_eq!(v["response"]["result"]["status"], "Failure");
    assert_eq!(v["response"]["convertedObjects"], json!([]), "the stale plan must not answer");
    let msg = v["response"]["result"]["message"].as_str().unwrap();
    assert!(
        msg.contains("\"pool-a\"")
            && msg.contains("CRDConversionConfig \"widgets\"")
            && msg.contains("widgets.example.org")
            && msg.contains("spec.x: no such path"),
        "{msg}"
    );
    let (_, metrics) = h.admin("/metrics").await;
    assert!(
        metrics
            .contains(r#"dco_webhook_requests_total{target="widgets.example.org",result="fail_closed"} 1"#),
        "{metrics}"
    );
    let (_, registry) = h.admin("/debug/registry").await;
    assert!(registry.contains(r#""failClosed": true"#), "{registry}");
    // KeepServingStale (the same failure, not closed) keeps answering from the plan.
    let mut stale =
        entry("widgets.example.org", true, Some("CRDConversionConfig \"widgets\" does not compile"));
    stale.failure.as_mut().unwrap().fail_closed = false;
    h.app.registry.insert(stale);
    h.assert_still_serving().await;
}

#[tokio::test]
async fn a_review_of_a_draining_plan_is_stamped_so_the_drain_waits_for_the_apiservers() {
    let h = start(Limits::default()).await;
    let body = || review("apiextensions.k8s.io/v1", vec![widget("a", json!({}))]).to_string();
    let (status, text) = h.post("widgets.example.org", body()).await;
    assert_eq!(status, 200, "{text}");
    let held = h.app.registry.get("widgets.example.org").unwrap();
    assert_eq!(held.last_review.get(), None, "a plan that is not draining is not stamped");
    // The sync pass starts a drain (sync.rs): the copy it swaps in shares the stamp.
    let draining = Entry { draining_until: Some(SystemTime::now()), ..(*held).clone() };
    h.app.registry.insert(draining);
    let before = std::time::Instant::now();
    let (status, text) = h.post("widgets.example.org", body()).await;
    assert_eq!(status, 200, "a draining plan still answers: {text}");
    assert!(held.last_review.get().is_some_and(|t| t >= before), "the review was not stamped");
}

#[tokio::test]
async fn malformed_json_and_missing_request_are_400() {
    let h = start(Limits::default()).await;
    let (status, text) = h.post("widgets.example.org", "{not json").await;
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("not a ConversionReview"), "{text}");
    let (status, text) = h
        .post(
            "widgets.example.org",
            json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "ConversionReview"}).to_string(),
        )
        .await;
    assert_eq!(status, 400);
    assert!(text.contains("no .request"), "{text}");
}

#[tokio::test]
async fn body_over_the_limit_is_413() {
    let h = start(Limits { max_body_bytes: 4096, ..Limits::default() }).await;
    let big =
        review("apiextensions.k8s.io/v1", vec![widget("a", json!({"blob": "x".repeat(8192)}))]).to_string();
    let (status, text) = h.post("widgets.example.org", big.clone()).await;
    assert_eq!(status, 413);
    assert!(text.contains("--max-request-bytes"), "{text}");
    // Also when the client streams without a Content-Length.
    let chunks: Vec<Result<Vec<u8>, std::io::Error>> =
        big.into_bytes().chunks(1000).map(|c| Ok(c.to_vec())).collect();
    let stream = reqwest::Body::wrap_stream(futures::stream::iter(chunks));
    let (status, _) = h.post("widgets.example.org", stream).await;
    assert_eq!(status, 413);
}

#[tokio::test]
async fn an_object_that_fails_is_a_failure_result_naming_it() {
    let h = start(Limits::default()).await;
    let body = review(
        "apiextensions.k8s.io/v1",
        vec![widget("ok", json!({})), widget("bad-one", json!({"fail": true}))],
    );
    let (status, text) = h.post("widgets.example.org", body.to_string()).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["response"]["result"]["status"], "Failure");
    assert!(v["response"]["result"]["message"].as_str().unwrap().contains("bad-one"), "{text}");
    let (_, metrics) = h.admin("/metrics").await;
    assert!(metrics.contains(r#"result="conversion_failure"} 1"#), "{metrics}");
}

#[tokio::test]
async fn a_slow_review_times_out_with_a_failure_echoing_the_uid() {
    let h = start(Limits { request_timeout: Duration::from_millis(100), ..Limits::default() }).await;
    let body = review("apiextensions.k8s.io/v1beta1", vec![widget("slow", json!({"sleepMs": 400}))]);
    let (status, text) = h.post("widgets.example.org", body.to_string()).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["apiVersion"], "apiextensions.k8s.io/v1beta1");
    assert_eq!(v["response"]["uid"], "uid-123");
    assert_eq!(v["response"]["result"]["status"], "Failure");
    assert!(v["response"]["result"]["message"].as_str().unwrap().contains("--request-timeout"), "{text}");
}

#[tokio::test]
async fn a_panicking_plan_is_a_500_and_the_server_keeps_serving() {
    let h = start(Limits::default()).await;
    let (status, text) = h
        .post(
            "widgets.example.org",
            review("apiextensions.k8s.io/v1", vec![widget("p", json!({"panic": 1}))]).to_string(),
        )
        .await;
    assert_eq!(status, 500);
    assert!(text.contains("internal error"), "{text}");
    h.assert_still_serving().await;
    let (_, metrics) = h.admin("/metrics").await;
    assert!(metrics.contains(r#"dco_webhook_panics_total{target="widgets.example.org"} 1"#), "{metrics}");
}

#[tokio::test]
async fn wrong_method_and_path_are_refused() {
    let h = start(Limits::default()).await;
    assert_eq!(h.get("/convert/widgets.example.org").await.0, 405);
    assert_eq!(h.get("/nothing-here").await.0, 404);
}

#[tokio::test]
async fn readiness_follows_sync_and_shutdown_and_health_is_always_ok() {
    let h = start(Limits::default()).await;
    assert_eq!(h.get("/healthz").await, (200, "ok".to_string()));
    let (status, text) = h.get("/readyz").await;
    assert_eq!(status, 503);
    assert!(text.contains("not yet synced"), "{text}");
    h.app.health.mark_synced();
    assert_eq!(h.get("/readyz").await.0, 200);
    assert!(h.admin("/metrics").await.1.contains("dco_webhook_ready 1"));
    h.app.health.mark_shutting_down();
    let (status, text) = h.get("/readyz").await;
    assert_eq!(status, 503);
    assert!(text.contains("shutting down"), "{text}");
    assert_eq!(h.get("/healthz").await.0, 200);
}

#[tokio::test]
async fn debug_registry_shows_plans_and_failures() {
    let h = start(Limits::default()).await;
    let (status, text) = h.admin("/debug/registry").await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&text).unwrap();
    let entries = v.as_array().unwrap();
    assert_eq!(entries.len(), 2);
    assert_eq!(entries[0]["target"], "broken.example.org");
    assert_eq!(entries[0]["servable"], false);
    assert!(entries[0]["lastError"]["message"].as_str().unwrap().contains("does not compile"));
    // Where the error is, not what it says (it can quote the schema).
    assert_eq!(entries[0]["lastError"]["locations"], json!(["spoke v1, rule 0 (FieldRename), spec.x"]));
    assert!(!text.contains("SECRET"), "{text}");
    assert_eq!(entries[1]["servable"], true);
    assert_eq!(entries[1]["hold"], "Assigned");
    assert_eq!(entries[1]["versions"], json!(["v1", "v2"]));
    assert_eq!(entries[1]["config"]["name"], "widgets");
}

#[tokio::test]
async fn debug_registry_shows_the_full_errors_only_when_asked() {
    let h = start_with(Limits::default(), true).await;
    let (_, text) = h.admin("/debug/registry").await;
    let v: Value = serde_json::from_str(&text).unwrap();
    assert!(v[0]["lastError"]["message"].as_str().unwrap().contains("SECRET"), "{text}");
    assert_eq!(v[0]["lastError"]["errors"].as_array().unwrap().len(), 1);
}

#[tokio::test]
async fn operator_endpoints_are_only_on_the_admin_listener() {
    let h = start(Limits::default()).await;
    assert_eq!(h.get("/metrics").await.0, 404);
    assert_eq!(h.get("/debug/registry").await.0, 404);
    assert_eq!(h.admin("/metrics").await.0, 200);
    // The probes answer on both.
    assert_eq!(h.get("/healthz").await.0, 200);
    assert_eq!(h.admin("/healthz").await.0, 200);
}

#[tokio::test]
async fn a_trickled_body_is_answered_408_within_the_request_timeout() {
    let h = start(Limits { request_timeout: Duration::from_millis(300), ..Limits::default() }).await;
    let body = review("apiextensions.k8s.io/v1", vec![widget("a", json!({}))]).to_string().into_bytes();
    let chunks = futures::stream::unfold(body, |mut rest| async move {
        if rest.is_empty() {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        let tail = rest.split_off(1);
        Some((Ok::<_, std::io::Error>(std::mem::replace(&mut rest, tail)), rest))
    });
    let t = std::time::Instant::now();
    let (status, text) = h.post("widgets.example.org", reqwest::Body::wrap_stream(chunks)).await;
    assert_eq!(status, 408, "{text}");
    assert!(text.contains("--request-timeout"), "{text}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    let (_, metrics) = h.admin("/metrics").await;
    assert!(metrics.contains(r#"result="body_timeout"} 1"#), "{metrics}");
}

#[tokio::test]
async fn a_rotated_certificate_is_served_without_restart() {
    let h = start(Limits::default()).await;
    assert!(!h.certs.reload().unwrap(), "unchanged files must not swap");
    let new_ca = write_cert(&h.dir);
    assert!(h.certs.reload().unwrap());
    // A client trusting only the new certificate now connects; the old client does not.
    let fresh = client_trusting(&new_ca);
    let r = fresh.get(format!("{}/healthz", h.base)).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(h.client.get(format!("{}/healthz", h.base)).send().await.is_err());
    // A broken pair keeps the current certificate.
    std::fs::write(h.dir.join("tls.key"), "garbage").unwrap();
    let err = h.certs.reload().unwrap_err().to_string();
    assert!(err.contains("tls.key"), "{err}");
    assert_eq!(fresh.get(format!("{}/healthz", h.base)).send().await.unwrap().status(), 200);
    let other = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
    std::fs::write(h.dir.join("tls.key"), other.signing_key.serialize_pem()).unwrap();
    let err = h.certs.reload().unwrap_err().to_string();
    assert!(err.contains("does not belong"), "{err}");
}

#[tokio::test]
async fn graceful_stop_drains_in_flight_requests_then_refuses_new_ones() {
    let h = start(Limits::default()).await;
    let slow = {
        let (client, url) = (h.client.clone(), format!("{}/convert/widgets.example.org", h.base));
        let body =
            review("apiextensions.k8s.io/v1", vec![widget("slow", json!({"sleepMs": 600}))]).to_string();
        tokio::spawn(async move { client.post(url).body(body).send().await.map(|r| r.status().as_u16()) })
    };
    tokio::time::sleep(Duration::from_millis(150)).await;
    h.stop.close();
    assert_eq!(slow.await.unwrap().unwrap(), 200, "the in-flight request must complete");
    let mut h = h;
    tokio::time::timeout(Duration::from_secs(5), &mut h.server)
        .await
        .expect("serve returns after draining")
        .unwrap();
    assert!(h.client.get(format!("{}/healthz", h.base)).send().await.is_err(), "the listener is closed");
}

/// From the termination signal until the end of the delay every answer closes its connection
/// — HTTP/1.1 `Connection: close`, HTTP/2 GOAWAY — and new connections are still served; an
/// idle connection is not closed before (docs/webhook.md, "Shutdown").
#[tokio::test]
async fn a_stopping_server_closes_each_connection_with_its_answer_and_still_serves() {
    let h = start(Limits::default()).await;
    let url = format!("{}/convert/widgets.example.org", h.base);
    let body = review("apiextensions.k8s.io/v1", vec![widget("a", json!({"x": 1}))]).to_string();
    let ca = std::fs::read_to_string(h.dir.join("tls.crt")).unwrap();
    let http1 = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).unwrap())
        .resolve("localhost", "127.0.0.1:0".parse().unwrap())
        .http1_only()
        .build()
        .unwrap();
    let post = |c: &reqwest::Client| c.post(&url).body(body.clone()).send();
    let before = post(&http1).await.unwrap();
    assert_eq!((before.status().as_u16(), before.version()), (200, reqwest::Version::HTTP_11));
    assert!(before.headers().get("connection").is_none(), "kept alive before the signal");

    // An HTTP/2 connection opened before the signal.
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.as_bytes()).unwrap()).unwrap();
    let mut tls = rustls::ClientConfig::builder().with_root_certificates(roots).with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let port = h.base.rsplit(':').next().unwrap();
    let tcp = tokio::net::TcpStream::connect(format!("127.0.0.1:{port}")).await.unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect("localhost".try_into().unwrap(), tcp)
        .await
        .unwrap();
    let (h2_client, h2_conn) = h2::client::handshake(stream).await.unwrap();
    let h2_conn = tokio::spawn(h2_conn);
    let mut h2_client = h2_client.ready().await.unwrap();
    let req = http::Request::post(url.clone()).body(()).unwrap();
    let (resp, mut send) = h2_client.send_request(req, false).unwrap();
    send.send_data(body.clone().into(), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);

    h.stop.stop();
    let during = post(&http1).await.unwrap();
    assert_eq!(during.status(), 200);
    assert_eq!(during.headers().get("connection").map(|v| v.to_str().unwrap()), Some("close"));
    // The next request needs a new connection, which is accepted and served.
    let again = post(&http1).await.unwrap();
    assert_eq!(again.status(), 200);
    assert_eq!(again.headers().get("connection").map(|v| v.to_str().unwrap()), Some("close"));
    // The HTTP/2 connection opened before the signal answers, then gets GOAWAY and ends.
    let req = http::Request::post(url.clone()).body(()).unwrap();
    let mut h2_client = h2_client.ready().await.unwrap();
    let (resp, mut send) = h2_client.send_request(req, false).unwrap();
    send.send_data(body.clone().into(), true).unwrap();
    assert_eq!(resp.await.unwrap().status(), 200);
    // The client keeps its handle: only the server's GOAWAY ends the connection.
    tokio::time::timeout(Duration::from_secs(5), h2_conn)
        .await
        .expect("the HTTP/2 connection ends after the signal")
        .unwrap()
        .unwrap();
    assert!(h2_client.ready().await.is_err(), "no new stream on a connection that got GOAWAY");
    assert_eq!(post(&h.client).await.unwrap().status(), 200, "a new HTTP/2 connection is served");

    h.stop.close();
    let mut h = h;
    tokio::time::timeout(Duration::from_secs(5), &mut h.server).await.expect("serve returns").unwrap();
    assert!(post(&http1).await.is_err(), "the listener is closed once the delay is over");
}

/// A real engine plan for `deep.example.org`: v2 (hub) `spec.a`, `spec.items[].n` and a
/// free-form `spec.free`; v1 has `spec.b` (with `root_cel`, filled by a CEL rule that reads
/// the free-form value, else renamed) and `spec.items[].m` (ForEach with a CEL rule per item).
fn engine_entry(root_cel: bool) -> Entry {
    let free = json!({"x-kubernetes-preserve-unknown-fields": true});
    let schema = |a: &str, n: &str| {
        json!({"type": "object", "properties": {"apiVersion": {"type": "string"}, "kind": {"type": "string"},
            "metadata": {"type": "object"}, "spec": {"type": "object", "properties": {
                a: {"type": "integer"}, "free": free, "seen": {"type": "boolean"},
                "items": {"type": "array", "items": {"type": "object", "properties": {n: {"type": "integer"}}}}}}}})
    };
    let crd = json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "deep.example.org"},
        "spec": {"group": "example.org", "names": {"kind": "Widget", "plural": "deep"}, "scope": "Namespaced", "versions": [
            {"name": "v1", "served": true, "storage": false, "schema": {"openAPIV3Schema": schema("b", "m")}},
            {"name": "v2", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema("a", "n")}}]}});
    let cel = |hub: &str, spoke: &str, h2s: &str, s2h: &str| {
        json!({"strategy": "CEL", "acknowledgeLossy": true, "reason": "test",
            "cel": {"hubPaths": [hub], "spokePaths": [spoke], "hubToSpoke": h2s, "spokeToHub": s2h}})
    };
    let root = if root_cel {
        cel(
            "spec.a",
            "spec.b",
            r#"{"spec.b": object.spec.a}"#,
            r#"{"spec.a": object.spec.b + (object.spec.free == object.spec.free ? 0 : 1)}"#,
        )
    } else {
        json!({"strategy": "FieldRename", "fieldRename": {"hubPath": "spec.a", "spokePath": "spec.b"}})
    };
    let spec = serde_json::from_value(json!({"hubVersion": "v2", "spokes": [{"version": "v1", "rules": [
        root,
        {"strategy": "ForEach", "acknowledgeLossy": true, "reason": "test", "forEach": {"hubItemsPath": "spec.items", "spokeItemsPath": "spec.items", "rules": [
            cel("n", "m", r#"{"m": object.n}"#, r#"{"n": [object.m, object.m, object.m].map(x, x * 2).filter(x, x > 0).size() > 0 ? object.m : 0}"#)]}}]}]}))
    .unwrap();
    let compiled = dco_webhook::engine::EngineCompiler.compile(&spec, &crd);
    assert!(compiled.errors.is_empty(), "{:?}", compiled.errors);
    let mut e = entry("deep.example.org", true, None);
    e.served.as_mut().unwrap().plan = compiled.plan.unwrap();
    e
}

fn deep_review(objects: &[String]) -> String {
    format!(
        r#"{{"apiVersion":"apiextensions.k8s.io/v1","kind":"ConversionReview","request":{{"uid":"deep-1","desiredAPIVersion":"example.org/v2","objects":[{}]}}}}"#,
        objects.join(",")
    )
}

#[tokio::test]
async fn deeply_nested_objects_are_answered_and_the_server_stays_up() {
    let h = start(Limits::default()).await;
    h.app.registry.insert(engine_entry(true));
    for levels in [1_900, 8_700, 9_998] {
        // CEL compares the deep value with itself: the whole object goes through CEL values.
        let deep = "[".repeat(levels) + "1" + &"]".repeat(levels);
        let object = format!(
            r#"{{"apiVersion":"example.org/v1","kind":"Widget","metadata":{{"name":"d","namespace":"default"}},"spec":{{"b":5,"free":{deep}}}}}"#
        );
        let (status, text) = h.post("deep.example.org", deep_review(&[object])).await;
        assert_eq!(status, 200, "{levels} levels: {}", &text[..text.len().min(300)]);
        assert!(text.contains(r#""status":"Success""#) && text.contains(r#""a":5"#), "{levels} levels");
    }
    // Each conversion's peak memory is measured (CEL values of 10,000 levels are megabytes).
    let (_, metrics) = h.admin("/metrics").await;
    let count = metrics.lines().find(|l| l.starts_with("dco_webhook_conversion_memory_bytes_count"));
    assert_eq!(count, Some("dco_webhook_conversion_memory_bytes_count 3"), "{metrics}");
    let sum: f64 = metrics
        .lines()
        .find_map(|l| l.strip_prefix("dco_webhook_conversion_memory_bytes_sum "))
        .and_then(|v| v.parse().ok())
        .unwrap();
    assert!(sum > 1e6, "{sum}");
    // Past the limit: refused, naming it; the next review is served as usual.
    let deep = "[".repeat(10_000) + &"]".repeat(10_000);
    let object = format!(r#"{{"apiVersion":"example.org/v1","kind":"Widget","spec":{{"free":{deep}}}}}"#);
    let (status, text) = h.post("deep.example.org", deep_review(&[object])).await;
    assert_eq!(status, 400);
    assert!(text.contains("nests deeper than 10000 levels"), "{text}");
    h.assert_still_serving().await;
}

#[tokio::test]
async fn a_timed_out_conversion_stops_and_frees_its_thread() {
    // One conversion thread: a conversion that ran on after its answer would hold up the next.
    // (Memory is not what this test is about: a generous factor keeps that budget out of it.)
    let h = start(Limits {
        request_timeout: Duration::from_millis(500),
        conversion_memory_factor: 1_000,
        ..Limits::default()
    })
    .await;
    h.app.registry.insert(engine_entry(false));
    let items: Vec<String> = (0..300_000).map(|i| format!(r#"{{"m":{}}}"#, i + 1)).collect();
    let object = format!(
        r#"{{"apiVersion":"example.org/v1","kind":"Widget","metadata":{{"name":"many","namespace":"default"}},"spec":{{"b":1,"items":[{}]}}}}"#,
        items.join(",")
    );
    let started = std::time::Instant::now();
    let (status, text) = h.post("deep.example.org", deep_review(&[object])).await;
    assert_eq!(status, 200);
    assert!(
        text.contains("Failure") && text.contains("--request-timeout"),
        "{}",
        &text[..text.len().min(400)]
    );
    let (status, text) = h
        .post(
            "deep.example.org",
            deep_review(&[r#"{"apiVersion":"example.org/v1","kind":"Widget","spec":{"b":2}}"#.to_string()]),
        )
        .await;
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""a":2"#), "{text}");
    // 300,000 CEL evaluations take about 3 s (measured, test build); stopped at the deadline,
    // the thread was free again right after it.
    assert!(started.elapsed() < Duration::from_millis(1_500), "took {:?}", started.elapsed());
}

#[tokio::test]
async fn a_conversion_over_its_memory_budget_fails_with_a_message() {
    let h = start(Limits { conversion_memory_factor: 1, ..Limits::default() }).await;
    h.app.registry.insert(engine_entry(true));
    // Two million values handed to CEL: over 128 MiB as CEL values, the floor of the budget.
    let free = format!("[{}]", vec!["0"; 2_000_000].join(","));
    let object = format!(
        r#"{{"apiVersion":"example.org/v1","kind":"Widget","metadata":{{"name":"wide","namespace":"default"}},"spec":{{"b":1,"free":{free}}}}}"#
    );
    let (status, text) = h.post("deep.example.org", deep_review(&[object])).await;
    assert_eq!(status, 200);
    let v: Value = serde_json::from_str(&text).unwrap();
    let msg = v["response"]["result"]["message"].as_str().unwrap();
    assert!(msg.contains("Widget default/wide: spoke v1, rule 0 (CEL)"), "{msg}");
    assert!(msg.contains("--conversion-memory-factor"), "{msg}");
}
