//! The shard-scoped watches of the config kinds (docs/sharding.md, "The server-side sharded
//! watch"): each replica asks the apiserver for only the configs of the shards it owns
//! (KEP-5866's `shardSelector`), re-checks every object itself with the same hash, and
//! restarts the watch when its shards change.
//!
//! Three parts, in the order a request meets them:
//! - [`probe`]: whether the apiserver applies `shardSelector` at all. A server without the
//!   `ShardedListAndWatch` gate ignores the parameter silently, and custom-resource lists never
//!   echo `metadata.shardInfo`, so the answer comes from a list of a built-in kind (the shard
//!   Leases), once, at start.
//! - [`SelectorLayer`]: a tower layer on the watch client that appends the owned shards'
//!   selector (`shard::OwnedShards::selector`) to list and watch requests of the sharded
//!   kinds, and counts the bytes of their responses. kube-rs has no field for the parameter.
//! - [`watch`]: the kube-runtime watcher of one kind, restarted whenever the owned set changes
//!   (a new list under the new selector: the reflector swaps its store at the list's end, so
//!   a lost shard's objects leave it and a taken one's arrive), with every applied object
//!   re-checked against the gate (`gate::Gate`), selector or not. A wrong guess about
//!   the server costs bandwidth, never a second owner; the reconcile gate stays the check.
//!
//! Servers are not narrowed: every config's assignment resolves against the whole pool
//! (`context::Context::servers`), so they are facts as well as sharded objects, watched whole
//! and gated at reconcile (docs/sharding.md).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context as TaskContext, Poll};

use futures::{Stream, StreamExt, future::BoxFuture, stream};
use http::{Request, Response};
use http_body_util::BodyExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::client::Body;
use kube::runtime::watcher;
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use tokio::sync::watch as channel;
use tower::{Layer, Service};

use super::metrics::{KindLabel, ShardingMetrics};
use crate::sharding::coordinator::ShardOwnership;
use crate::sharding::gate::Gate;
use crate::sharding::shard::{OwnedShards, Shards};

/// The query parameter of KEP-5866.
const PARAM: &str = "shardSelector";

/// What a replica that owns no shard asks for. The grammar has no empty union and the
/// apiserver refuses an empty range ("start must be less than end"), so: the one hash 0,
/// which a uid hits with probability 2^-64 and the client-side check drops even then.
const NOTHING: &str = "shardRange(object.metadata.uid, '0x0000000000000000', '0x0000000000000001')";

/// The selector that owns the whole hash space: what the probe asks for.
pub fn whole_space(shards: Shards) -> String {
    OwnedShards::new(shards, shards.all()).selector().unwrap_or_default()
}

/// Whether the apiserver filters by `shardSelector`: a list of the shard Leases in the lease
/// namespace with the whole-space selector, which a server with the feature echoes in
/// `metadata.shardInfo` (only built-in list types do). Any failure reads as "no": the
/// fallback is the unsharded stream, checked client-side, which is always correct.
pub async fn probe(client: &Client, lease_namespace: &str, shards: Shards) -> bool {
    let url = format!(
        "/apis/coordination.k8s.io/v1/namespaces/{}/leases?limit=1&{PARAM}={}",
        query_escape(lease_namespace),
        query_escape(&whole_space(shards))
    );
    let req = match Request::get(url).body(Vec::new()) {
        Ok(r) => r,
        Err(_) => return false,
    };
    match client.request::<k8s_openapi::List<Lease>>(req).await {
        Ok(list) => list.metadata.shard_info.is_some(),
        Err(e) => {
            tracing::warn!(error = %e, "probing the apiserver for shardSelector failed; watching every config and filtering here");
            false
        }
    }
}

/// Percent-encodes everything but RFC 3986's unreserved characters.
fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() * 3);
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// What the layer needs: which paths are sharded, the owned set, and whether to ask.
struct Scope {
    /// `(collection path, kind)` of each sharded kind, e.g.
    /// `/apis/conversion.dco.rs/v1alpha1/crdconversionconfigs`.
    paths: Vec<(String, &'static str)>,
    shards: Shards,
    owned: channel::Receiver<ShardOwnership>,
    supported: AtomicBool,
    metrics: Arc<ShardingMetrics>,
}

impl Scope {
    /// The kind of a list or watch request of a sharded kind, if `req` is one.
    fn kind_of<B>(&self, req: &Request<B>) -> Option<&'static str> {
        if req.method() != http::Method::GET {
            return None;
        }
        let path = req.uri().path();
        self.paths.iter().find(|(p, _)| p == path).map(|(_, k)| *k)
    }

    /// The selector to send now: none when the server ignores it or when every shard is
    /// owned (the whole space is the unsharded stream).
    fn selector(&self) -> Option<String> {
        if !self.supported.load(Ordering::Relaxed) {
            return None;
        }
        let owned = OwnedShards::new(self.shards, self.owned.borrow().held());
        if owned.owned.len() == self.shards.count() as usize {
            return None;
        }
        Some(owned.selector().unwrap_or_else(|| NOTHING.to_string()))
    }
}

/// Adds the owned shards' `shardSelector` to list and watch requests of the sharded kinds,
/// and counts their response bytes (`dco_operator_watch_received_bytes`).
#[derive(Clone)]
pub struct SelectorLayer {
    scope: Arc<Scope>,
}

impl SelectorLayer {
    pub fn new(
        shards: Shards,
        owned: channel::Receiver<ShardOwnership>,
        metrics: Arc<ShardingMetrics>,
    ) -> Self {
        SelectorLayer {
            scope: Arc::new(Scope {
                paths: Vec::new(),
                shards,
                owned,
                supported: AtomicBool::new(false),
                metrics,
            }),
        }
    }

    /// Shards the cluster-scoped list and watch requests of kind `K`. Call before cloning.
    pub fn shard<K: Resource<DynamicType = ()>>(mut self) -> Self {
        let path = K::url_path(&(), None);
        if let Some(scope) = Arc::get_mut(&mut self.scope) {
            scope.paths.push((path, leak_kind::<K>()));
        }
        self
    }

    /// Whether the selector is sent (the probe's answer).
    pub fn set_supported(&self, yes: bool) {
        self.scope.supported.store(yes, Ordering::Relaxed);
    }

    pub fn supported(&self) -> bool {
        self.scope.supported.load(Ordering::Relaxed)
    }

    /// The selector this replica's next list or watch of a sharded kind carries.
    pub fn current(&self) -> Option<String> {
        self.scope.selector()
    }
}

/// `K::kind` as a `&'static str` for metric labels: the kinds are a fixed few.
fn leak_kind<K: Resource<DynamicType = ()>>() -> &'static str {
    Box::leak(K::kind(&()).into_owned().into_boxed_str())
}

impl<S> Layer<S> for SelectorLayer {
    type Service = SelectorService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        SelectorService { inner, scope: self.scope.clone() }
    }
}

#[derive(Clone)]
pub struct SelectorService<S> {
    inner: S,
    scope: Arc<Scope>,
}

type DynBody = kube::client::DynBody;

impl<S, B> Service<Request<Body>> for SelectorService<S>
where
    S: Service<Request<Body>, Response = Response<B>> + Send,
    S::Future: Send + 'static,
    B: http_body::Body<Data = bytes::Bytes> + Send + Unpin + 'static,
    B::Error: Into<tower::BoxError>,
{
    type Response = Response<Box<DynBody>>;
    type Error = S::Error;
    type Future = BoxFuture<'static, Result<Self::Response, Self::Error>>;

    fn poll_ready(&mut self, cx: &mut TaskContext<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<Body>) -> Self::Future {
        let kind = self.scope.kind_of(&req);
        if kind.is_some()
            && let Some(selector) = self.scope.selector()
        {
            with_param(req.uri_mut(), &selector);
        }
        let fut = self.inner.call(req);
        let bytes =
            kind.map(|kind| self.scope.metrics.watch_bytes.get_or_create(&KindLabel { kind }).clone());
        Box::pin(async move {
            let resp = fut.await?;
            Ok(resp.map(|body| {
                let counted = body
                    .map_frame(move |f| {
                        if let (Some(d), Some(bytes)) = (f.data_ref(), bytes.as_ref()) {
                            bytes.inc_by(d.len() as u64);
                        }
                        f
                    })
                    .map_err(Into::into);
                Box::new(counted) as Box<DynBody>
            }))
        })
    }
}

/// `uri` with `shardSelector=<selector>` appended to its query.
fn with_param(uri: &mut http::Uri, selector: &str) {
    let pq = uri.path_and_query().map(|p| p.as_str()).unwrap_or("/");
    let sep = if pq.contains('?') { '&' } else { '?' };
    let mut parts = uri.clone().into_parts();
    if let Ok(p) = format!("{pq}{sep}{PARAM}={}", query_escape(selector)).parse() {
        parts.path_and_query = Some(p);
        if let Ok(next) = http::Uri::from_parts(parts) {
            *uri = next;
        }
    }
}

/// The watch of sharded kind `K`: restarted whenever the held shards change, every applied
/// object kept only if `gate` holds its shard. Deletions pass (the store drops what it holds).
pub fn watch<K>(
    api: Api<K>,
    config: watcher::Config,
    gate: Gate,
    owned: channel::Receiver<ShardOwnership>,
    metrics: Arc<ShardingMetrics>,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let kind = leak_kind::<K>();
    let restarts = metrics.watch_restarts.get_or_create(&KindLabel { kind }).clone();
    let make = move || watcher(api.clone(), config.clone()).boxed();
    restarting(make, owned, move || {
        // Named by kind: each config kind has its own shard-scoped watch.
        tracing::info!(kind, "the owned shards changed; restarting the shard-scoped watch");
        restarts.inc();
    })
    .filter(move |ev| {
        let keep = match ev {
            Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                gate.holds(o.meta().uid.as_deref())
            }
            _ => true,
        };
        if matches!(
            ev,
            Ok(watcher::Event::Apply(_) | watcher::Event::InitApply(_) | watcher::Event::Delete(_))
        ) {
            metrics.watch_events.get_or_create(&KindLabel { kind }).inc();
            if !keep {
                metrics.watch_dropped.get_or_create(&KindLabel { kind }).inc();
            }
        }
        futures::future::ready(keep)
    })
}

/// The stream `make` returns, made anew each time `changes` fires.
fn restarting<T, S>(
    make: impl Fn() -> S + Send + 'static,
    changes: channel::Receiver<ShardOwnership>,
    on_restart: impl Fn() + Send + 'static,
) -> impl Stream<Item = T> + Send
where
    S: Stream<Item = T> + Send + Unpin + 'static,
    T: Send + 'static,
{
    struct State<S, M, R> {
        current: Option<S>,
        changes: Option<channel::Receiver<ShardOwnership>>,
        make: M,
        on_restart: R,
    }
    let state = State { current: None, changes: Some(changes), make, on_restart };
    stream::unfold(state, |mut st| async move {
        loop {
            let current = st.current.get_or_insert_with(&st.make);
            let changed = async {
                match st.changes.as_mut() {
                    Some(rx) => rx.changed().await.is_ok(),
                    None => futures::future::pending().await,
                }
            };
            tokio::select! {
                biased;
                alive = changed => {
                    if alive {
                        (st.on_restart)();
                        st.current = None;
                    } else {
                        // The Coordinator is gone (shutdown): keep the watch as it is.
                        st.changes = None;
                    }
                }
                next = current.next() => return next.map(|ev| (ev, st)),
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use dco_api::CRDConversionConfig;
    use http::StatusCode;
    use k8s_openapi::jiff::{SignedDuration, Timestamp};

    fn owned_of(shards: Shards, which: &[u32]) -> ShardOwnership {
        let until = Timestamp::now() + SignedDuration::from_secs(600);
        ShardOwnership::some(shards, which.iter().copied(), until)
    }

    #[test]
    fn escape_keeps_unreserved_and_encodes_the_rest() {
        assert_eq!(
            query_escape("shardRange(object.metadata.uid, '0x0', '0x1') || x"),
            "shardRange%28object.metadata.uid%2C%20%270x0%27%2C%20%270x1%27%29%20%7C%7C%20x"
        );
    }

    /// List and watch requests of a sharded kind carry the owned shards' selector once the
    /// probe said yes; other requests, and everything before the probe, go as they were.
    #[tokio::test]
    async fn the_layer_adds_the_selector_to_sharded_lists_only() {
        let shards = Shards::new(4).unwrap();
        let (tx, rx) = channel::channel(owned_of(shards, &[0, 2]));
        let metrics = Arc::new(ShardingMetrics::default());
        let layer = SelectorLayer::new(shards, rx, metrics.clone()).shard::<CRDConversionConfig>();
        assert_eq!(layer.current(), None, "not before the probe");
        let (_none_tx, none) = channel::channel(ShardOwnership::default());
        let idle = SelectorLayer::new(shards, none, metrics.clone());
        idle.set_supported(true);
        assert_eq!(idle.current().as_deref(), Some(NOTHING), "owning nothing asks for (almost) nothing");
        layer.set_supported(true);
        let want = OwnedShards::new(shards, [0, 2]).selector().unwrap();
        assert_eq!(layer.current().as_deref(), Some(want.as_str()));

        let (service, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let client = kube::client::ClientBuilder::new(service, "default").with_layer(&layer).build();
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..3 {
                let (req, send) = handle.next_request().await.expect("a request");
                seen.push(req.uri().to_string());
                let body = serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {"resourceVersion": "1"}, "items": []});
                send.send_response(
                    Response::builder()
                        .status(StatusCode::OK)
                        .body(Body::from(serde_json::to_vec(&body).unwrap()))
                        .unwrap(),
                );
            }
            seen
        });
        let configs: Api<CRDConversionConfig> = Api::all(client.clone());
        configs.list(&kube::api::ListParams::default()).await.unwrap();
        let _ = configs.get_opt("one").await;
        tx.send_replace(owned_of(shards, &[0, 1, 2, 3]));
        configs.list(&kube::api::ListParams::default()).await.unwrap();
        let seen = server.await.unwrap();
        assert!(seen[0].contains(&format!("{PARAM}={}", query_escape(&want))), "{}", seen[0]);
        assert!(!seen[1].contains(PARAM), "a get by name is not sharded: {}", seen[1]);
        assert!(!seen[2].contains(PARAM), "owning every shard sends none: {}", seen[2]);
        let text = crate::observability::metrics::Metrics::new(&[&*metrics]).encode();
        assert!(text.contains("watch_received_bytes_total{kind=\"CRDConversionConfig\"}"), "{text}");
    }

    /// The watch drops objects of shards it does not own, and starts over when they change.
    #[tokio::test]
    async fn the_stream_restarts_when_the_owned_set_changes() {
        let (tx, rx) = channel::channel(ShardOwnership::default());
        let made = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let m = made.clone();
        let restarts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let r = restarts.clone();
        let s = restarting(
            move || {
                let n = m.fetch_add(1, Ordering::SeqCst);
                stream::iter(vec![n * 10, n * 10 + 1]).chain(stream::pending()).boxed()
            },
            rx,
            move || {
                r.fetch_add(1, Ordering::SeqCst);
            },
        );
        let mut s = std::pin::pin!(s);
        assert_eq!(s.next().await, Some(0));
        assert_eq!(s.next().await, Some(1));
        tx.send_replace(ShardOwnership::default());
        assert_eq!(s.next().await, Some(10), "a new stream after the change");
        assert_eq!(restarts.load(Ordering::SeqCst), 1);
        drop(tx);
        assert_eq!(s.next().await, Some(11), "the Coordinator gone: the stream goes on");
    }
}
