//! `POST /validate` over HTTPS: an `admission.k8s.io/v1` AdmissionReview in, the verdict out;
//! and `POST /mutate-xrd`, the XRD guard's (xrd_guard.rs).
//!
//! The certificate comes from [`CertResolver`], swapped in place by registration.rs when the
//! Secret changes, so a rotation needs no restart. Every input is bounded: the body
//! ([`MAX_BODY`]), the TLS handshake and the request headers (10 s), the open connections
//! ([`MAX_CONNECTIONS`]), the close of a stopping replica's connections ([`CLOSE_TIMEOUT`]),
//! and every read a rule needs ([`READ_TIMEOUT`], within the
//! `timeoutSeconds` the apiserver waits).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use axum::extract::{DefaultBodyLimit, State};
use axum::routing::post;
use dco_api::config::ConversionConfig;
use dco_api::{CRDConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::admission::{AdmissionRequest, AdmissionResponse, AdmissionReview, Operation as KubeOp};
use kube::runtime::reflector::Store;
use kube::{Client, ResourceExt};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use serde::de::DeserializeOwned;
use tokio::net::TcpListener;
use tokio::sync::{Notify, Semaphore, watch};
use tokio_rustls::TlsAcceptor;
use tower::ServiceExt;

use super::config::{ConfigFacts, OtherConfig, TargetLookup};
use super::metrics::AdmissionMetrics;
use super::server::{ConfigPin, ServerFacts};
use super::{Operation, Validate, Verdict};
use crate::kinds::ConfigRef;
use crate::shutdown::Shutdown;

/// An AdmissionReview holds the object and the old one; the apiserver limits each to 3 MiB.
pub const MAX_BODY: usize = 8 * 1024 * 1024;
pub const MAX_CONNECTIONS: usize = 256;
/// Each read a rule needs; the VWC's `timeoutSeconds` is 5 (registration.rs).
pub const READ_TIMEOUT: Duration = Duration::from_secs(2);
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pages of the config lists (duplicate target, server in use).
const PAGE: u32 = 500;
const MAX_PAGES: usize = 40;

/// The serving certificate, swapped in place (registration.rs): no restart on rotation.
#[derive(Debug, Default)]
pub struct CertResolver {
    current: ArcSwapOption<CertifiedKey>,
}

impl CertResolver {
    pub fn set(&self, key: Arc<CertifiedKey>) {
        self.current.store(Some(key));
    }

    pub fn loaded(&self) -> bool {
        self.current.load().is_some()
    }

    /// What the next handshake is served (`resolve` ignores the ClientHello).
    pub fn current(&self) -> Option<Arc<CertifiedKey>> {
        self.current.load_full()
    }
}

impl ResolvesServerCert for CertResolver {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.current()
    }
}

/// A `CertifiedKey` from PEM text, with the process's crypto provider (main.rs installs ring).
pub fn certified_key(cert_pem: &str, key_pem: &str) -> Result<CertifiedKey, String> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(cert_pem.as_bytes())
        .collect::<Result<_, _>>()
        .map_err(|e| format!("tls.crt: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(key_pem.as_bytes()).map_err(|e| format!("tls.key: {e}"))?;
    let provider = rustls::crypto::ring::default_provider();
    CertifiedKey::from_der(certs, key, &provider).map_err(|e| format!("serving certificate: {e}"))
}

/// What the handlers read.
#[derive(Clone)]
pub struct Admission {
    pub client: Client,
    pub servers: Store<ConversionWebhookServer>,
    /// `--selector`: the configs whose servers this operator manages.
    pub selector: Option<String>,
    pub metrics: Arc<AdmissionMetrics>,
    /// The XRD guard, with `--xrd-guard` (xrd_guard.rs); without it `/mutate-xrd` admits
    /// every update unchanged.
    pub xrd_guard: Option<Arc<super::xrd_guard::Guard>>,
}

fn op(o: &KubeOp) -> Option<Operation> {
    match o {
        KubeOp::Create => Some(Operation::Create),
        KubeOp::Update => Some(Operation::Update),
        KubeOp::Delete => Some(Operation::Delete),
        KubeOp::Connect => None,
    }
}

fn typed<K: DeserializeOwned>(o: &Option<DynamicObject>) -> Result<Option<K>, String> {
    o.as_ref()
        .map(|o| serde_json::to_value(o).and_then(serde_json::from_value))
        .transpose()
        .map_err(|e| e.to_string())
}

async fn bounded<T, E: std::fmt::Display>(
    what: &str,
    f: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, String> {
    match tokio::time::timeout(READ_TIMEOUT, f).await {
        Ok(Ok(v)) => Ok(v),
        Ok(Err(e)) => Err(format!("reading {what}: {e}")),
        Err(_) => Err(format!("reading {what} took longer than {READ_TIMEOUT:?}")),
    }
}

/// Every object of kind `K` (paged, at most `MAX_PAGES`), mapped by `f`.
async fn list_all<K, T>(
    api: Api<K>,
    labels: Option<&str>,
    fields: Option<&str>,
    f: impl Fn(&K) -> T,
) -> Result<Vec<T>, String>
where
    K: kube::Resource + Clone + DeserializeOwned + std::fmt::Debug,
{
    let mut out = Vec::new();
    let mut lp = ListParams::default().limit(PAGE);
    if let Some(l) = labels {
        lp = lp.labels(l);
    }
    if let Some(fs) = fields {
        lp = lp.fields(fs);
    }
    for _ in 0..MAX_PAGES {
        let page = api.list(&lp).await.map_err(|e| e.to_string())?;
        out.extend(page.items.iter().map(&f));
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(c) => lp = lp.continue_token(&c),
            None => return Ok(out),
        }
    }
    Err(format!("more than {} configs", PAGE as usize * MAX_PAGES))
}

impl Admission {
    /// The XRD API version to read XRDs through (`dco_api::crossplane::served` of Crossplane's
    /// XRD CRD, read now); `None` without Crossplane.
    async fn xrd_version(&self) -> Result<Option<dco_api::crossplane::XrdVersion>, String> {
        let api = Api::<CustomResourceDefinition>::all(self.client.clone());
        let crd = bounded("Crossplane's XRD CRD", api.get_opt(dco_api::target::XRD_CRD_NAME)).await?;
        Ok(crd.as_ref().and_then(|c| dco_api::crossplane::served(c).preferred()))
    }

    async fn target<K: ConversionConfig>(&self, cfg: &K) -> TargetLookup {
        let name = cfg.target_name();
        let got = match cfg.target_kind() {
            dco_api::config::TargetKind::Crd => {
                let api = Api::<CustomResourceDefinition>::all(self.client.clone());
                bounded("the target", api.get_opt(name))
                    .await
                    .map(|o| o.map(|c| serde_json::to_value(c).unwrap_or_default()))
            }
            dco_api::config::TargetKind::Xrd => {
                // The one version served of the two suffices to read it: v2 where served (a
                // request here is rare, so discovery is asked rather than followed).
                let ar = match self.xrd_version().await {
                    Ok(Some(v)) => v.resource(),
                    Ok(None) => return TargetLookup::Missing,
                    Err(e) => return TargetLookup::Unknown(e),
                };
                let api = Api::<DynamicObject>::all_with(self.client.clone(), &ar);
                match bounded("the target", api.get_opt(name)).await {
                    // No Crossplane: no XRD of any name.
                    Err(e) if e.contains("404") => Ok(None),
                    r => r.map(|o| o.map(|x| serde_json::to_value(x).unwrap_or_default())),
                }
            }
        };
        match got {
            Ok(Some(v)) => TargetLookup::Found(v),
            Ok(None) => TargetLookup::Missing,
            Err(e) => TargetLookup::Unknown(e),
        }
    }

    /// Configs of both kinds; `labels` narrows them (the in-use check: this operator's only),
    /// `target` to those naming it, by the target name's field selector (`selectableFields`
    /// of both CRDs, `ConversionConfig::TARGET_FIELD`): a small list, not every config. `f`
    /// gets each as the assignment rules see it and whether it is being deleted.
    async fn configs<T>(
        &self,
        labels: Option<&str>,
        target: Option<&str>,
        f: fn(ConfigRef, bool) -> T,
    ) -> Result<Vec<T>, String> {
        let ccc = Api::<CRDConversionConfig>::all(self.client.clone());
        let xcc = Api::<XRDConversionConfig>::all(self.client.clone());
        let (cf, xf) = match target {
            Some(t) => (
                Some(format!("{}={t}", CRDConversionConfig::TARGET_FIELD)),
                Some(format!("{}={t}", XRDConversionConfig::TARGET_FIELD)),
            ),
            None => (None, None),
        };
        let (ccc, xcc) = tokio::join!(
            bounded(
                "the CRDConversionConfigs",
                list_all(ccc, labels, cf.as_deref(), |c| f(ConfigRef::of(c), deleting(c)))
            ),
            bounded(
                "the XRDConversionConfigs",
                list_all(xcc, labels, xf.as_deref(), |c| f(ConfigRef::of(c), deleting(c)))
            ),
        );
        let mut out = ccc?;
        out.extend(xcc?);
        Ok(out)
    }

    async fn config_verdict<K>(
        &self,
        req: &AdmissionRequest<DynamicObject>,
        op: Operation,
    ) -> Result<Verdict, String>
    where
        K: Validate<Facts = ConfigFacts> + ConversionConfig + DeserializeOwned + kube::Resource,
    {
        let new: Option<K> = typed(&req.object)?;
        let old: Option<K> = typed(&req.old_object)?;
        let Some(n) = &new else { return Ok(K::validate(op, None, old.as_ref(), &empty_config_facts())) };
        if let Some(o) = &old
            && o.conversion() == n.conversion()
            && o.target_name() == n.target_name()
        {
            // Metadata only: the rules admit it without reading anything (config.rs).
            return Ok(K::validate(op, new.as_ref(), old.as_ref(), &empty_config_facts()));
        }
        let needs_others = old.as_ref().is_none_or(|o| o.target_name() != n.target_name());
        let (target, others) = tokio::join!(self.target(n), async {
            if needs_others {
                Some(
                    self.configs(None, Some(n.target_name()), |c, deleting| OtherConfig {
                        kind: c.kind,
                        name: c.name,
                        target: c.target,
                        deleting,
                    })
                    .await,
                )
            } else {
                None
            }
        });
        let servers = self.servers.state().iter().map(|s| s.name_any()).collect();
        Ok(K::validate(op, new.as_ref(), old.as_ref(), &ConfigFacts { target, others, servers }))
    }

    async fn server_verdict(
        &self,
        req: &AdmissionRequest<DynamicObject>,
        op: Operation,
    ) -> Result<Verdict, String> {
        let new: Option<ConversionWebhookServer> = typed(&req.object)?;
        let old: Option<ConversionWebhookServer> = typed(&req.old_object)?;
        let servers: Vec<ConversionWebhookServer> =
            self.servers.state().iter().map(|s| (**s).clone()).collect();
        let configs = if op == Operation::Delete
            && old.as_ref().is_some_and(|o| o.metadata.deletion_timestamp.is_none())
        {
            Some(
                self.configs(self.selector.as_deref(), None, |c, _| ConfigPin {
                    kind: c.kind,
                    name: c.name,
                    target: c.target,
                    pin: c.pin,
                })
                .await,
            )
        } else {
            None
        };
        let facts = ServerFacts { servers, configs };
        Ok(ConversionWebhookServer::validate(op, new.as_ref(), old.as_ref(), &facts))
    }

    /// The answer to one review.
    pub async fn review(&self, review: AdmissionReview<DynamicObject>) -> AdmissionReview<DynamicObject> {
        let req: AdmissionRequest<DynamicObject> = match review.try_into() {
            Ok(r) => r,
            Err(e) => return AdmissionResponse::invalid(e).into_review(),
        };
        let started = std::time::Instant::now();
        let kind = req.kind.kind.clone();
        let verdict = match op(&req.operation) {
            None => Ok(Verdict { allowed: true, message: None, warnings: vec![] }),
            Some(op) => match kind.as_str() {
                "CRDConversionConfig" => self.config_verdict::<CRDConversionConfig>(&req, op).await,
                "XRDConversionConfig" => self.config_verdict::<XRDConversionConfig>(&req, op).await,
                "ConversionWebhookServer" => self.server_verdict(&req, op).await,
                // Registered for dco's kinds only (registration.rs); anything else is not ours.
                _ => Ok(Verdict { allowed: true, message: None, warnings: vec![] }),
            },
        };
        let verdict = verdict.unwrap_or_else(|e| Verdict {
            allowed: false,
            message: Some(format!("{kind} {}: cannot read the object under review: {e}", req.name)),
            warnings: vec![],
        });
        self.metrics.review(&kind, verdict.allowed, started.elapsed());
        tracing::debug!(kind, name = %req.name, operation = ?req.operation, allowed = verdict.allowed,
            message = verdict.message.as_deref().unwrap_or_default(), "admission review");
        let mut resp = AdmissionResponse::from(&req);
        if let Some(m) = verdict.message.filter(|_| !verdict.allowed) {
            resp = resp.deny(m);
            resp.result.code = 403;
            resp.result.reason = "Forbidden".to_string();
        }
        if !verdict.warnings.is_empty() {
            resp.warnings = Some(verdict.warnings);
        }
        resp.into_review()
    }
}

fn deleting(o: &impl kube::Resource) -> bool {
    o.meta().deletion_timestamp.is_some()
}

fn empty_config_facts() -> ConfigFacts {
    ConfigFacts { target: TargetLookup::Missing, others: None, servers: vec![] }
}

pub fn router(adm: Admission) -> axum::Router {
    axum::Router::new()
        .route(
            "/validate",
            post(
                |State(adm): State<Admission>,
                 axum::Json(review): axum::Json<AdmissionReview<DynamicObject>>| async move {
                    axum::Json(adm.review(review).await)
                },
            ),
        )
        .route(
            super::xrd_guard::PATH,
            post(
                |State(adm): State<Admission>,
                 axum::Json(review): axum::Json<AdmissionReview<DynamicObject>>| async move {
                    axum::Json(match &adm.xrd_guard {
                        Some(guard) => guard.review(review),
                        None => match TryInto::<AdmissionRequest<DynamicObject>>::try_into(review) {
                            Ok(req) => AdmissionResponse::from(&req).into_review(),
                            Err(e) => AdmissionResponse::invalid(e).into_review(),
                        },
                    })
                },
            ),
        )
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(adm)
}

/// How long the connections open at the end of the drain get to finish their reviews once
/// they were asked to close: the apiserver waits `timeoutSeconds` (5) for an answer.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(6);

/// Serve `router` over TLS on `listener` with the certificate `certs` holds. From the
/// termination signal on, every answer closes its connection (HTTP/1.1 `Connection: close`,
/// HTTP/2 GOAWAY; `dco_api::stop`), so the apiserver sends its next review on a new
/// connection, to a Ready Pod. Once the drain of `shutdown` is over: stop accepting, ask every
/// connection still open to close (HTTP/1.1: `Connection: close` on the answer in flight, or
/// closed at once when idle), and wait at most [`CLOSE_TIMEOUT`] for them.
pub async fn serve(
    listener: TcpListener,
    certs: Arc<CertResolver>,
    router: axum::Router,
    shutdown: Shutdown,
) -> anyhow::Result<()> {
    let mut tls =
        rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_protocol_versions(&[&rustls::version::TLS13, &rustls::version::TLS12])?
            .with_no_client_auth()
            .with_cert_resolver(certs);
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(tls));
    let addr = listener.local_addr()?;
    tracing::info!(%addr, "serving admission reviews on POST /validate");
    let slots = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http1().timer(TokioTimer::new()).header_read_timeout(HANDSHAKE_TIMEOUT);
    let builder = Arc::new(builder);
    let (closing_tx, closing) = watch::channel(false);
    loop {
        let accepted = tokio::select! {
            () = shutdown.drained() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => tokio::select! {
                    () = shutdown.drained() => break,
                    c = listener.accept() => c.map(|c| (slot, c)),
                },
                Err(_) => break,
            },
        };
        let (slot, (tcp, peer)) = match accepted {
            Ok(c) => c,
            Err(e) => {
                tracing::warn!(error = %e, "accepting an admission connection failed");
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        shutdown.accepted();
        let conn = Conn {
            acceptor: acceptor.clone(),
            router: router.clone(),
            builder: builder.clone(),
            closing: closing.clone(),
            shutdown: shutdown.clone(),
        };
        tokio::spawn(async move {
            let _slot = slot;
            conn.serve(tcp, peer).await;
        });
    }
    drop(listener);
    let open = MAX_CONNECTIONS - slots.available_permits();
    let seen = shutdown.seen();
    tracing::info!(
        reviews = seen.answers,
        connections = seen.connections,
        last_accept_ms = seen.last_accept_ms,
        open,
        "admission drain over: reviews answered and connections accepted since the termination signal (the last this many ms after it); closing the open connections"
    );
    let _ = closing_tx.send(true);
    let started = tokio::time::Instant::now();
    let all = u32::try_from(MAX_CONNECTIONS).unwrap_or(u32::MAX);
    tokio::select! {
        _ = slots.acquire_many(all) => tracing::info!(ms = started.elapsed().as_millis(), "admission connections closed"),
        () = tokio::time::sleep(CLOSE_TIMEOUT) => tracing::warn!(
            still_open = MAX_CONNECTIONS - slots.available_permits(),
            "admission connections still open after {CLOSE_TIMEOUT:?}; exiting anyway"
        ),
    }
    Ok(())
}

/// One accepted admission connection and what it needs.
struct Conn {
    acceptor: TlsAcceptor,
    router: axum::Router,
    builder: Arc<auto::Builder<TokioExecutor>>,
    closing: watch::Receiver<bool>,
    shutdown: Shutdown,
}

impl Conn {
    async fn serve(mut self, tcp: tokio::net::TcpStream, peer: SocketAddr) {
        let stream = match tokio::time::timeout(HANDSHAKE_TIMEOUT, self.acceptor.accept(tcp)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return tracing::debug!(%peer, error = %e, "admission TLS handshake failed"),
            Err(_) => return tracing::debug!(%peer, "admission TLS handshake timed out"),
        };
        let (router, shutdown) = (self.router, self.shutdown);
        let goaway = Arc::new(Notify::new());
        let answered = goaway.clone();
        let service = hyper::service::service_fn(move |req: http::Request<Incoming>| {
            let version = req.version();
            let call = router.clone().oneshot(req.map(axum::body::Body::new));
            let (shutdown, answered) = (shutdown.clone(), answered.clone());
            async move {
                let mut resp = call.await.unwrap_or_else(|never: Infallible| match never {});
                // While draining, each answer closes its connection (HTTP/1.1 by its header,
                // HTTP/2 by GOAWAY), so the next review opens a new one, to a Ready Pod
                // (dco_api::stop).
                if shutdown.close_with_answer(version, resp.headers_mut()) {
                    answered.notify_one();
                }
                Ok::<_, Infallible>(resp)
            }
        });
        let conn = self.builder.serve_connection(TokioIo::new(stream), service);
        tokio::pin!(conn);
        // Not at the signal: an idle HTTP/1.1 connection asked to close is closed at once,
        // maybe as the next review is sent on it.
        let mut asked = *self.closing.borrow();
        if asked {
            conn.as_mut().graceful_shutdown();
        }
        loop {
            tokio::select! {
                ended = conn.as_mut() => {
                    if let Err(e) = ended {
                        tracing::debug!(%peer, error = %e, "admission connection ended with an error");
                    }
                    return;
                }
                _ = self.closing.changed(), if !asked => {
                    asked = true;
                    conn.as_mut().graceful_shutdown();
                }
                () = goaway.notified(), if !asked => {
                    asked = true;
                    conn.as_mut().graceful_shutdown();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn leaf(host: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let cert = rcgen::CertificateParams::new(vec![host.to_string()]).unwrap().self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    /// A rotation is one swap: the next handshake gets the new certificate, no restart.
    #[test]
    fn the_served_certificate_is_swapped_in_place() {
        let r = CertResolver::default();
        assert!(!r.loaded() && r.current().is_none());
        let (a_crt, a_key) = leaf("a.ns.svc");
        let (b_crt, b_key) = leaf("a.ns.svc");
        r.set(Arc::new(certified_key(&a_crt, &a_key).unwrap()));
        let first = r.current().unwrap().cert[0].clone();
        r.set(Arc::new(certified_key(&b_crt, &b_key).unwrap()));
        let second = r.current().unwrap().cert[0].clone();
        assert_ne!(first, second);
        assert!(certified_key(&a_crt, &b_key).is_err(), "a key that is not the certificate's is refused");
        assert!(certified_key("garbage", &a_key).is_err());
    }

    #[tokio::test]
    async fn reviews_of_other_kinds_and_garbage_are_bounded_and_answered() {
        let (ctx, _api, _w) = crate::context::testing::test_context();
        let adm = Admission {
            client: ctx.client.clone(),
            servers: ctx.stores.servers.clone(),
            selector: None,
            metrics: Arc::new(AdmissionMetrics::default()),
            xrd_guard: None,
        };
        let app = router(adm);
        let req = |body: Vec<u8>| {
            http::Request::post("/validate")
                .header("content-type", "application/json")
                .body(axum::body::Body::from(body))
                .unwrap()
        };
        let big = app.clone().oneshot(req(vec![b' '; MAX_BODY + 1])).await.unwrap();
        assert_eq!(big.status(), http::StatusCode::PAYLOAD_TOO_LARGE);
        let review = serde_json::json!({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
            "request": {"uid": "u1", "kind": {"group": "", "version": "v1", "kind": "ConfigMap"},
                "resource": {"group": "", "version": "v1", "resource": "configmaps"},
                "name": "x", "operation": "CREATE", "userInfo": {},
                "object": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "x"}}}});
        let resp = app.oneshot(req(serde_json::to_vec(&review).unwrap())).await.unwrap();
        assert_eq!(resp.status(), http::StatusCode::OK);
        let body = http_body_util::BodyExt::collect(resp.into_body()).await.unwrap().to_bytes();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(v["response"]["uid"], "u1");
        assert_eq!(v["response"]["allowed"], true);
    }
}
