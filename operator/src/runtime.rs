//! Wiring: the caches, the three controllers and what wakes them, the rebalancing fan-out,
//! and the health/metrics endpoint.

use std::num::NonZeroU32;
use std::sync::Arc;

use anyhow::Context as _;
use dco_api::{
    CRDConversionConfig, ConversionWebhookServer, LABEL_INSTANCE, LABEL_MANAGED_BY, MANAGED_BY,
    XRDConversionConfig,
};
use futures::{Stream, StreamExt, future, stream};
use governor::{Quota, RateLimiter};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use tokio::sync::mpsc;

use crate::assigned::{self, ConfigRef};
use crate::cli::Args;
use crate::config::{self, target};
use crate::context::{Context, Settings, Stores};
use crate::leases::lease_triggers;
use crate::metrics::Metrics;
use crate::server;

/// The CRD whose presence means XRDs can be watched.
const XRD_CRD: &str = "compositeresourcedefinitions.apiextensions.crossplane.io";

/// The watch config of the kinds `--selector` narrows (servers and configs).
fn scoped(selector: &Option<String>) -> watcher::Config {
    match selector {
        Some(s) => watcher::Config::default().labels(s),
        None => watcher::Config::default(),
    }
}

fn managed() -> watcher::Config {
    watcher::Config::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY}"))
}

/// Drop what no reconcile reads, so large objects cost less memory.
fn slim<K: Resource>(o: &mut K) {
    o.meta_mut().managed_fields = None;
}

fn instance_of<K: Resource>(o: &K) -> Option<ObjectRef<ConversionWebhookServer>> {
    o.meta().labels.as_ref()?.get(LABEL_INSTANCE).map(|i| ObjectRef::new(i))
}

/// A config event → the servers whose status (assignments) or deletion depends on it.
fn config_servers(c: &ConfigRef) -> Vec<ObjectRef<ConversionWebhookServer>> {
    let mut names: Vec<&String> =
        [&c.pin, &c.assigned, &c.source, &c.destination].into_iter().flatten().collect();
    names.sort();
    names.dedup();
    names.into_iter().map(|n| ObjectRef::new(n)).collect()
}

/// Server and certificate changes → the configs to reconcile again, per kind.
async fn fan_out<S1, S2>(
    ctx: Arc<Context>,
    servers: S1,
    secrets: S2,
    ccc: mpsc::Sender<ObjectRef<CRDConversionConfig>>,
    xcc: mpsc::Sender<ObjectRef<XRDConversionConfig>>,
) where
    S1: Stream<Item = Result<watcher::Event<ConversionWebhookServer>, watcher::Error>> + Send,
    S2: Stream<Item = Result<watcher::Event<Secret>, watcher::Error>> + Send,
{
    fn changed<K>(ev: watcher::Event<K>, of: fn(&K) -> Option<String>) -> Option<String> {
        match ev {
            watcher::Event::Apply(o) | watcher::Event::Delete(o) => of(&o),
            _ => None,
        }
    }
    let servers = servers.map(move |e| match e {
        Ok(ev) => changed(ev, |s: &ConversionWebhookServer| Some(s.name_any())),
        Err(e) => {
            tracing::warn!(error = %e, "ConversionWebhookServer watch failed; retrying");
            None
        }
    });
    let secrets = secrets.map(move |e| match e {
        Ok(ev) => changed(ev, |s: &Secret| instance_of(s).map(|r| r.name)),
        Err(e) => {
            tracing::warn!(error = %e, "Secret watch failed; retrying (the operator needs list/watch on secrets)");
            None
        }
    });
    let mut changes = std::pin::pin!(stream::select(servers, secrets).filter_map(future::ready));
    while let Some(server) = changes.next().await {
        let pool = ctx.servers();
        for name in assigned::affected_by(&refs(&ctx.stores.cccs), &pool, &server) {
            if ccc.send(ObjectRef::new(&name)).await.is_err() {
                return;
            }
        }
        for name in assigned::affected_by(&refs(&ctx.stores.xccs), &pool, &server) {
            if xcc.send(ObjectRef::new(&name)).await.is_err() {
                return;
            }
        }
    }
}

fn refs<K>(store: &Store<K>) -> Vec<ConfigRef>
where
    K: config::ConfigKind,
{
    store.state().iter().map(|c| ConfigRef::of(c.as_ref())).collect()
}

/// Reconcile requests from a channel, paced (rebalancing may enqueue many configs at once).
fn paced<K>(rx: mpsc::Receiver<ObjectRef<K>>, qps: u32) -> impl Stream<Item = ObjectRef<K>> + Send
where
    K: Resource + Send + 'static,
    K::DynamicType: Send,
{
    let quota = Quota::per_second(NonZeroU32::new(qps.max(1)).unwrap_or(NonZeroU32::MIN));
    let limiter = Arc::new(RateLimiter::direct(quota));
    stream::unfold(rx, |mut rx| async { rx.recv().await.map(|r| (r, rx)) }).then(move |r| {
        let l = limiter.clone();
        async move {
            l.until_ready().await;
            r
        }
    })
}

fn configs_of_target<K>(store: &Store<K>, target: &str) -> Vec<ObjectRef<K>>
where
    K: dco_api::config::ConversionConfig + Resource<DynamicType = ()> + Clone + 'static,
{
    store
        .state()
        .iter()
        .filter(|c| c.target_name() == target)
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

async fn serve_health(
    addr: std::net::SocketAddr,
    metrics: Arc<Metrics>,
    ready: Arc<std::sync::atomic::AtomicBool>,
) {
    use axum::routing::get;
    use std::sync::atomic::Ordering;
    let app = axum::Router::new()
        .route("/healthz", get(|| async { "ok" }))
        .route(
            "/readyz",
            get(move || {
                let r = ready.load(Ordering::SeqCst);
                async move {
                    if r {
                        (axum::http::StatusCode::OK, "ok")
                    } else {
                        (axum::http::StatusCode::SERVICE_UNAVAILABLE, "caches not synced yet")
                    }
                }
            }),
        )
        .route(
            "/metrics",
            get(move || {
                let body = metrics.encode();
                async move { body }
            }),
        );
    match tokio::net::TcpListener::bind(addr).await {
        Ok(l) => {
            if let Err(e) = axum::serve(l, app).await {
                tracing::error!(error = %e, "health/metrics server stopped");
            }
        }
        Err(e) => {
            tracing::error!(%addr, error = %e, "cannot listen for /healthz and /metrics; change --metrics-listen")
        }
    }
}

fn log_results<T: std::fmt::Debug, E: std::fmt::Display>(
    what: &'static str,
) -> impl FnMut(Result<T, E>) -> future::Ready<()> {
    move |r| {
        match r {
            Ok(o) => tracing::debug!(controller = what, object = ?o, "reconciled"),
            Err(e) => tracing::debug!(controller = what, error = %e, "reconcile error"),
        }
        future::ready(())
    }
}

pub async fn run(args: Args) -> anyhow::Result<()> {
    let client = Client::try_default()
        .await
        .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let settings = Settings {
        namespace: args.namespace.clone(),
        webhook_image: args.webhook_image.clone(),
        webhook_listen: args.webhook_listen.clone(),
        webhook_admin_port: args.webhook_admin_port,
        webhook_args: args.webhook_args.clone(),
        resync: args.resync,
        ..Settings::default()
    };
    let metrics = Arc::new(Metrics::default());
    let ready = Arc::new(std::sync::atomic::AtomicBool::new(false));
    tokio::spawn(serve_health(args.metrics_listen, metrics.clone(), ready.clone()));

    // Caches shared by the reconcilers. Each stream is driven by exactly one consumer.
    let (leases, leases_w) = reflector::store();
    let lease_events = reflector::reflector(
        leases_w,
        watcher(Api::<Lease>::all(client.clone()), managed()).modify(slim::<Lease>).default_backoff(),
    );
    let (secrets, secrets_w) = reflector::store();
    let secret_events = reflector::reflector(
        secrets_w,
        watcher(Api::<Secret>::all(client.clone()), managed()).modify(slim::<Secret>).default_backoff(),
    );
    let (servers, servers_w) = reflector::store();
    let server_events = reflector::reflector(
        servers_w,
        watcher(Api::<ConversionWebhookServer>::all(client.clone()), scoped(&args.selector))
            .modify(slim::<ConversionWebhookServer>)
            .default_backoff(),
    );

    let ccc_ctl = Controller::new(Api::<CRDConversionConfig>::all(client.clone()), scoped(&args.selector));
    let xcc_ctl = Controller::new(Api::<XRDConversionConfig>::all(client.clone()), scoped(&args.selector));
    let stores = Stores {
        servers: servers.clone(),
        leases: leases.clone(),
        secrets: secrets.clone(),
        xccs: xcc_ctl.store(),
        cccs: ccc_ctl.store(),
    };
    let ctx = Arc::new(Context::new(client.clone(), settings, stores.clone(), metrics));

    let (ccc_tx, ccc_rx) = mpsc::channel(4096);
    let (xcc_tx, xcc_rx) = mpsc::channel(4096);
    tokio::spawn(fan_out(ctx.clone(), server_events, secret_events, ccc_tx, xcc_tx));

    // Reconciles must not start on empty caches (an empty server cache reads as "no server").
    let lease_trigger = lease_triggers(lease_events);
    let (lt_tx, mut lt_rx) = mpsc::channel(4096);
    tokio::spawn(async move {
        let mut s = std::pin::pin!(lease_trigger);
        while let Some(r) = s.next().await {
            if lt_tx.send(r).await.is_err() {
                return;
            }
        }
    });
    let lease_refs = stream::poll_fn(move |cx| lt_rx.poll_recv(cx));
    tokio::try_join!(
        async { servers.wait_until_ready().await.context("server cache") },
        async { secrets.wait_until_ready().await.context("secret cache") },
        async { leases.wait_until_ready().await.context("lease cache") },
    )?;
    ready.store(true, std::sync::atomic::Ordering::SeqCst);
    tracing::info!("caches synced; starting the controllers");

    let cws_ctl =
        Controller::new(Api::<ConversionWebhookServer>::all(client.clone()), scoped(&args.selector))
            .watches(Api::<Deployment>::all(client.clone()), managed(), |d| instance_of(&d))
            .watches(Api::<Service>::all(client.clone()), managed(), |s| instance_of(&s))
            .watches(Api::<Secret>::all(client.clone()), managed(), |s| instance_of(&s))
            .watches(Api::<CRDConversionConfig>::all(client.clone()), scoped(&args.selector), |c| {
                config_servers(&ConfigRef::of(&c))
            })
            .watches(Api::<XRDConversionConfig>::all(client.clone()), scoped(&args.selector), |c| {
                config_servers(&ConfigRef::of(&c))
            })
            .reconcile_on(lease_refs)
            .shutdown_on_signal()
            .run(server::reconcile, server::error_policy, ctx.clone())
            .for_each(log_results("conversionwebhookserver"));

    let ccc_store = stores.cccs.clone();
    let ccc_run = ccc_ctl
        .watches(
            Api::<CustomResourceDefinition>::all(client.clone()),
            watcher::Config::default(),
            move |crd| configs_of_target(&ccc_store, &crd.name_any()),
        )
        .reconcile_on(paced(ccc_rx, args.rebalance_qps))
        .shutdown_on_signal()
        .run(config::reconcile::<CRDConversionConfig>, config::error_policy, ctx.clone())
        .for_each(log_results("crdconversionconfig"));

    let xrds_installed = Api::<CustomResourceDefinition>::all(client.clone())
        .get_opt(XRD_CRD)
        .await
        .map(|c| c.is_some())
        .unwrap_or(false);
    let xcc_store = stores.xccs.clone();
    let mut xcc_ctl = xcc_ctl.reconcile_on(paced(xcc_rx, args.rebalance_qps));
    if xrds_installed {
        let ar = target::xrd_resource();
        xcc_ctl = xcc_ctl.watches_with(
            Api::<DynamicObject>::all_with(client.clone(), &ar),
            ar,
            watcher::Config::default(),
            move |xrd| configs_of_target(&xcc_store, &xrd.name_any()),
        );
    } else {
        tracing::info!(
            "Crossplane is not installed ({XRD_CRD} not found); XRDConversionConfigs are re-checked every --resync"
        );
    }
    let xcc_run = xcc_ctl
        .shutdown_on_signal()
        .run(config::reconcile::<XRDConversionConfig>, config::error_policy, ctx.clone())
        .for_each(log_results("xrdconversionconfig"));

    tokio::join!(cws_ctl, ccc_run, xcc_run);
    tracing::info!("controllers stopped");
    Ok(())
}
