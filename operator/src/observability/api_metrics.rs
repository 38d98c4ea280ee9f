//! The operator's Kubernetes API requests, by verb (docs/operations.md, "Metrics"): a tower
//! layer on every client the operator builds ([`client`]), under kube's retry layer, so each
//! attempt counts and a 429 the retry answered still shows.
//!
//! The verb is client-go's: the method, whether the path names one object, and `watch=true`.
//! Labels are bounded: nine verbs, and the code from a fixed set or its class. Durations run
//! from the request to the end of the answer's body; watches stay out of the histogram (a
//! watch is open for minutes by design) and are counted only.

use std::pin::Pin;
use std::task::{Context as TaskContext, Poll};
use std::time::Instant;

use futures::future::BoxFuture;
use http::{Method, Request, Response, StatusCode};
use kube::client::{Body, DynBody};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use tower::{BoxError, Layer, Service};

use dco_api::metrics::register;

use crate::observability::metrics::Register;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    pub verb: &'static str,
    pub code: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabel {
    pub verb: &'static str,
}

/// The three families, shared by every client's layer.
#[derive(Clone, Debug)]
pub struct ApiMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub duration: Family<VerbLabel, Histogram>,
    pub throttled: Family<VerbLabel, Counter>,
}

impl Default for ApiMetrics {
    fn default() -> Self {
        ApiMetrics {
            requests: Family::default(),
            duration: Family::new_with_constructor(|| {
                Histogram::new([0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0])
            }),
            throttled: Family::default(),
        }
    }
}

impl Register for ApiMetrics {
    fn register(&self, registry: &mut Registry) {
        register(
            registry,
            "api_requests",
            "Kubernetes API requests the operator sent (each retry counts), by verb and answer code",
            self.requests.clone(),
        );
        register(
            registry,
            "api_request_duration_seconds",
            "Seconds from a Kubernetes API request to the end of its answer's body, by verb; watches excluded",
            self.duration.clone(),
        );
        register(
            registry,
            "api_throttled",
            "Kubernetes API requests the apiserver refused with 429 (priority and fairness), by verb",
            self.throttled.clone(),
        );
    }
}

impl ApiMetrics {
    /// The operator's client from `config` ([`ApiMetrics::client_through`] with no other layer).
    pub fn client(&self, config: kube::Config) -> Result<kube::Client, kube::Error> {
        self.client_through(config, &tower::layer::util::Identity::new())
    }

    /// The operator's client from `config`, `layer` under this one: this layer under kube's
    /// own retry of 429, 503 and 504 (moved above it), so every attempt is seen. The retry
    /// needs a service it can clone, hence the buffer (it holds a request only until the
    /// connection pool takes it). Must run on a Tokio runtime (the buffer's worker).
    pub fn client_through<L>(&self, mut config: kube::Config, layer: &L) -> Result<kube::Client, kube::Error>
    where
        L: Layer<Buffered>,
        L::Service: Service<Request<Body>, Response = Response<Box<DynBody>>, Error = BoxError>
            + Clone
            + Send
            + 'static,
        <L::Service as Service<Request<Body>>>::Future: Send + 'static,
    {
        let retry = config.default_retry;
        config.default_retry = false;
        let builder = kube::client::ClientBuilder::try_from(config)?
            .with_layer(&tower::buffer::BufferLayer::new(1024))
            .with_layer(layer)
            .with_layer(&ApiMetricsLayer(self.clone()));
        let policy = kube::client::retry::RetryPolicy::server_retry();
        let retry = tower::util::option_layer(retry.then(|| tower::retry::RetryLayer::new(policy)));
        Ok(builder.with_layer(&retry).build())
    }

    fn answered(&self, verb: &'static str, status: StatusCode) {
        self.requests.get_or_create(&RequestLabels { verb, code: code(status) }).inc();
        if status == StatusCode::TOO_MANY_REQUESTS {
            self.throttled.get_or_create(&VerbLabel { verb }).inc();
        }
    }
}

/// The verbs, as client-go and the apiserver's audit name them; `other` for the rest (HEAD,
/// OPTIONS, a method kube never sends).
pub fn verb(method: &Method, path: &str, query: Option<&str>) -> &'static str {
    let watching =
        query.into_iter().flat_map(|q| q.split('&')).any(|kv| matches!(kv, "watch=true" | "watch=1"));
    let named = names_one_object(path);
    match *method {
        Method::GET if watching => "watch",
        Method::GET if named => "get",
        Method::GET => "list",
        Method::POST => "create",
        Method::PUT => "update",
        Method::PATCH => "patch",
        Method::DELETE if named => "delete",
        Method::DELETE => "deletecollection",
        _ => "other",
    }
}

/// Whether a path names one object (`…/widgets/a`, `…/widgets/a/status`) rather than a
/// collection (`…/widgets`, `…/namespaces/n/widgets`); paths outside `/api` and `/apis`
/// (discovery, `/version`) read as one object.
fn names_one_object(path: &str) -> bool {
    let segs: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let rest = match segs.as_slice() {
        ["api", _version, rest @ ..] => rest,
        ["apis", _group, _version, rest @ ..] => rest,
        _ => return true,
    };
    let rest = match rest {
        ["namespaces", _ns, resource, tail @ ..] => {
            return !tail.is_empty() || resource.is_empty();
        }
        r => r,
    };
    rest.len() != 1
}

/// The answer's codes reported exactly: those a controller meets and alerts on.
const EXACT_CODES: [&str; 15] =
    ["200", "201", "204", "304", "400", "401", "403", "404", "409", "410", "422", "429", "500", "503", "504"];

/// The answer's code: exact for [`EXACT_CODES`], else its class (`1xx` … `5xx`).
pub fn code(status: StatusCode) -> &'static str {
    let exact = EXACT_CODES.iter().find(|c| **c == status.as_str());
    exact.copied().unwrap_or(match status.as_u16() {
        100..=199 => "1xx",
        200..=299 => "2xx",
        300..=399 => "3xx",
        400..=499 => "4xx",
        _ => "5xx",
    })
}

/// kube's default stack behind a buffer: what the layer of [`ApiMetrics::client_through`] wraps.
pub type Buffered =
    tower::buffer::Buffer<Request<Body>, BoxFuture<'static, Result<Response<Box<DynBody>>, BoxError>>>;

/// The layer ([`ApiMetrics::client`]).
#[derive(Clone)]
pub struct ApiMetricsLayer(pub ApiMetrics);

impl<S> Layer<S> for ApiMetricsLayer {
    type Service = ApiMetricsService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        ApiMetricsService { inner, metrics: self.0.clone() }
    }
}

#[derive(Clone)]
pub struct ApiMetricsService<S> {
    inner: S,
    metrics: ApiMetrics,
}

impl<S, ReqB, B> Service<Request<ReqB>> for ApiMetricsService<S>
where
    S: Service<Request<ReqB>, Response = Response<B>>,
    S::Future: Send + 'static,
    B: http_body::Body + Unpin,
{
    type Response = Response<Timed<B>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let verb = verb(req.method(), req.uri().path(), req.uri().query());
        let metrics = self.metrics.clone();
        let started = Instant::now();
        let fut = self.inner.call(req);
        Box::pin(async move {
            match fut.await {
                Ok(res) => {
                    metrics.answered(verb, res.status());
                    let timer = (verb != "watch")
                        .then(|| (metrics.duration.get_or_create(&VerbLabel { verb }).clone(), started));
                    Ok(res.map(|body| Timed { inner: body, timer }))
                }
                Err(e) => {
                    // No answer (connect, TLS, timeout): counted, with no code to give.
                    metrics.requests.get_or_create(&RequestLabels { verb, code: "error" }).inc();
                    Err(e)
                }
            }
        })
    }
}

/// An answer's body that observes its request's duration once, when it ends or is dropped.
pub struct Timed<B> {
    inner: B,
    timer: Option<(Histogram, Instant)>,
}

impl<B> Timed<B> {
    fn observe(&mut self) {
        if let Some((h, started)) = self.timer.take() {
            h.observe(started.elapsed().as_secs_f64());
        }
    }
}

impl<B> Drop for Timed<B> {
    fn drop(&mut self) {
        self.observe();
    }
}

impl<B: http_body::Body + Unpin> http_body::Body for Timed<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Self::Data>, Self::Error>>> {
        let this = self.get_mut();
        let out = Pin::new(&mut this.inner).poll_frame(cx);
        if matches!(out, Poll::Ready(None | Some(Err(_)))) {
            this.observe();
        }
        out
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verb_comes_from_the_method_the_path_and_watch() {
        let cases = [
            ("GET", "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs", None, "list"),
            (
                "GET",
                "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs",
                Some("watch=true&resourceVersion=5"),
                "watch",
            ),
            ("GET", "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs/a", None, "get"),
            ("GET", "/api/v1/namespaces/dco-system/secrets", Some("labelSelector=x"), "list"),
            ("GET", "/api/v1/namespaces/dco-system/secrets/s", None, "get"),
            ("GET", "/apis/coordination.k8s.io/v1/namespaces/dco-system/leases", Some("watch=1"), "watch"),
            ("GET", "/api/v1/namespaces", None, "list"),
            ("GET", "/api/v1/namespaces/dco-system", None, "get"),
            ("GET", "/apis", None, "get"),
            ("GET", "/version", None, "get"),
            (
                "PATCH",
                "/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs/a/status",
                Some("fieldManager=dco-operator&force=true"),
                "patch",
            ),
            (
                "PATCH",
                "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/widgets.example.org",
                None,
                "patch",
            ),
            ("PUT", "/apis/coordination.k8s.io/v1/namespaces/n/leases/l", None, "update"),
            ("POST", "/apis/events.k8s.io/v1/namespaces/n/events", None, "create"),
            ("DELETE", "/apis/apps/v1/namespaces/n/deployments/d", None, "delete"),
            ("DELETE", "/apis/apps/v1/namespaces/n/deployments", Some("labelSelector=x"), "deletecollection"),
            ("HEAD", "/api/v1/pods", None, "other"),
        ];
        for (method, path, query, want) in cases {
            let m = Method::from_bytes(method.as_bytes()).unwrap();
            assert_eq!(verb(&m, path, query), want, "{method} {path}?{query:?}");
        }
    }

    #[test]
    fn codes_are_a_fixed_set() {
        assert_eq!(code(StatusCode::OK), "200");
        assert_eq!(code(StatusCode::TOO_MANY_REQUESTS), "429");
        assert_eq!(code(StatusCode::IM_A_TEAPOT), "4xx");
        assert_eq!(code(StatusCode::from_u16(599).unwrap()), "5xx");
        let all: std::collections::BTreeSet<&str> =
            (100..=599).map(|c| code(StatusCode::from_u16(c).unwrap())).collect();
        assert_eq!(all.len(), 20, "{all:?}");
    }

    /// Through a client whose apiserver answers a 429 first: both attempts are counted, the
    /// retry's answer reaches the caller, the duration covers a get and no watch.
    #[tokio::test]
    async fn every_attempt_is_counted_and_a_429_is_throttling() {
        let metrics = ApiMetrics::default();
        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let stack = tower::ServiceBuilder::new()
            .layer(tower::retry::RetryLayer::new(kube::client::retry::RetryPolicy::server_retry()))
            .layer(ApiMetricsLayer(metrics.clone()))
            .service(service);
        let client = kube::Client::new(stack, "default");
        let server = tokio::spawn(async move {
            let (req, send) = handle.next_request().await.unwrap();
            assert_eq!(req.uri().path(), "/api/v1/namespaces/default/secrets/s");
            send.send_response(Response::builder().status(429).body(Body::from(b"{}".to_vec())).unwrap());
            let (_, send) = handle.next_request().await.unwrap();
            let s = serde_json::json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "default"}});
            send.send_response(
                Response::builder().body(Body::from(serde_json::to_vec(&s).unwrap())).unwrap(),
            );
            let (req, send) = handle.next_request().await.unwrap();
            assert_eq!(req.uri().query().map(|q| q.contains("watch=true")), Some(true));
            send.send_response(Response::builder().body(Body::from(Vec::new())).unwrap());
        });
        let secrets: kube::Api<k8s_openapi::api::core::v1::Secret> = kube::Api::default_namespaced(client);
        secrets.get("s").await.unwrap();
        let mut watch = secrets.watch(&kube::api::WatchParams::default(), "0").await.unwrap().boxed();
        use futures::StreamExt;
        while watch.next().await.is_some() {}
        server.await.unwrap();
        let count = |verb, code| metrics.requests.get_or_create(&RequestLabels { verb, code }).get();
        assert_eq!((count("get", "429"), count("get", "200"), count("watch", "200")), (1, 1, 1));
        assert_eq!(metrics.throttled.get_or_create(&VerbLabel { verb: "get" }).get(), 1);
        let text = crate::observability::metrics::Metrics::new(&[&metrics]).encode();
        assert!(text.contains("dco_operator_api_request_duration_seconds_count{verb=\"get\"} 2"), "{text}");
        assert!(!text.contains("duration_seconds_count{verb=\"watch\"}"), "{text}");
    }
}
