//! The metric families, and the endpoint that serves them with the probes and `/debug/shards`.

use std::sync::Arc;

use super::sharding::Sharding;
use crate::admission::metrics::AdmissionMetrics;
use crate::context::Stores;
use crate::observability::api_metrics::ApiMetrics;
use crate::observability::metrics::Metrics;
use crate::observability::queue::QueueMetrics;
use crate::observability::watch_metrics::WatchMetrics;
use crate::sharding::leases;
use crate::sharding::metrics::ShardingMetrics;
use crate::sharding::sharded_watch::SelectorLayer;
use crate::shutdown::Readiness;
use crate::status_metrics::{self, StatusMetrics};

/// Each subsystem's families and the registry that serves them all.
pub struct Instruments {
    pub status: Arc<StatusMetrics>,
    pub sharding: Arc<ShardingMetrics>,
    pub admission: Arc<AdmissionMetrics>,
    /// The errors of every watch (watches.rs, controllers.rs, config/xrds.rs).
    pub watches: WatchMetrics,
    /// Every Kubernetes API request, by verb (clients.rs).
    pub api: ApiMetrics,
    /// The controllers' queues (controllers.rs).
    pub queues: QueueMetrics,
    pub registry: Arc<Metrics>,
}

impl Instruments {
    pub fn new() -> Self {
        let status = Arc::new(StatusMetrics::default());
        let sharding = Arc::new(ShardingMetrics::default());
        let admission = Arc::new(AdmissionMetrics::default());
        let watches = WatchMetrics::default();
        let (api, queues) = (ApiMetrics::default(), QueueMetrics::default());
        let registry = Arc::new(Metrics::new(&[&*sharding, &watches, &*admission, &status, &api, &queues]));
        Instruments { status, sharding, admission, watches, api, queues, registry }
    }

    /// The status gauges read the caches at scrape time, once they exist.
    pub fn collect(&self, stores: &Stores, namespace: &str, sharding: &Sharding) {
        self.status.set_source(status_metrics::Source {
            stores: stores.clone(),
            gate: sharding.gate(),
            namespace: namespace.to_string(),
            membership: sharding.membership(),
        });
    }
}

/// What `/debug/shards` shows: the Coordinator's last view and this replica's selector.
#[derive(Clone)]
struct DebugShards {
    snapshot: tokio::sync::watch::Receiver<leases::Snapshot>,
    selector: SelectorLayer,
}

impl DebugShards {
    fn render(&self) -> serde_json::Value {
        let snap = self.snapshot.borrow().clone();
        serde_json::json!({
            "replica": snap.me,
            "tickedAt": snap.at.map(|t| t.to_string()),
            "shards": snap.shards,
            "liveMembers": snap.live,
            "owners": snap.owners,
            "owned": snap.owned,
            "serverSideSelector": self.selector.supported(),
            "selector": self.selector.current(),
        })
    }
}

/// `Ok` as 200 "ok", an error as 503 with its text.
fn probe(r: Result<(), String>) -> (axum::http::StatusCode, String) {
    match r {
        Ok(()) => (axum::http::StatusCode::OK, "ok".to_string()),
        Err(why) => (axum::http::StatusCode::SERVICE_UNAVAILABLE, why),
    }
}

/// Serves `/healthz`, `/readyz`, `/debug/shards` and `/metrics` on `listener` (`--metrics-listen`).
pub fn spawn(
    listener: tokio::net::TcpListener,
    metrics: &Instruments,
    readiness: &Arc<Readiness>,
    sharding: &Sharding,
) {
    let debug = DebugShards { snapshot: sharding.membership(), selector: sharding.selector.clone() };
    tokio::spawn(serve(listener, metrics.registry.clone(), readiness.clone(), debug));
}

async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    debug: DebugShards,
) {
    use axum::routing::get;
    let live = readiness.clone();
    let app = axum::Router::new()
        .route("/healthz", get(move || std::future::ready(probe(live.live()))))
        .route("/readyz", get(move || std::future::ready(probe(readiness.ready()))))
        .route(
            "/debug/shards",
            get(move || {
                let body = debug.render();
                async move { axum::Json(body) }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let body = metrics.encode();
                // The body is OpenMetrics (prometheus-client's text encoder: `# EOF`, counters
                // typed without `_total`); as text/plain a scraper would read them untyped.
                let kind = "application/openmetrics-text; version=1.0.0; charset=utf-8";
                async move { ([(axum::http::header::CONTENT_TYPE, kind)], body) }
            }),
        );
    if let Err(e) = axum::serve(listener, app).await {
        tracing::error!(error = %e, "health/metrics server stopped");
    }
}
