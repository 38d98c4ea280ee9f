//! The three controllers on the shared caches: each reads its primary stream and the queue
//! the fan-out feeds, the configs' paced at their share of `--rebalance-qps`; every way in is
//! stamped for the queue metrics (queued.rs).

use std::sync::Arc;

use dco_api::target::TARGET_PAGE;
use dco_api::{CRDConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use futures::{Future, Stream, StreamExt, future, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Service;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, controller, watcher};
use kube::{Client, ResourceExt};
use tokio::sync::mpsc;

use super::health::Instruments;
use super::queued;
use super::wakes::Queues;
use super::watches::{Primaries, Primary};
use crate::config::{self, ConfigWing};
use crate::context::Context;
use crate::namespaces::Events;
use crate::observability::queue::Queue;
use crate::observability::watch_metrics::{WatchErrorLabels, WatchMetrics};
use crate::server::ServerWing;
use crate::sharding::leases::Snapshot;
use crate::shutdown::Shutdown;
use crate::wake::pacing::{self, Pacer};
use crate::wake::views::owner_of;

/// Runs the three controllers until the stop signal.
pub async fn run(
    ctx: &Arc<Context>,
    primaries: Primaries,
    queues: Queues,
    rebalance_qps: u32,
    membership: tokio::sync::watch::Receiver<Snapshot>,
    instruments: &Instruments,
    stop: &Shutdown,
) {
    let (errors, waits) = (&instruments.watches, &instruments.queues);
    // Each controller's queue depth and wait (queued.rs): a paced wake waits from its arrival.
    let server_q = queued::queue::<ServerWing>(waits, ctx.stores.servers.clone());
    let ccc_q = queued::queue::<ConfigWing<CRDConversionConfig>>(waits, ctx.stores.cccs.clone());
    let xcc_q = queued::queue::<ConfigWing<XRDConversionConfig>>(waits, ctx.stores.xccs.clone());
    let owned = (primaries.deployments, primaries.services);
    let servers = servers(ctx, primaries.servers, owned, queues.servers, errors, stop, &server_q);
    // One budget for both config controllers, divided among the live members.
    let pacer = Arc::new(Pacer::new(rebalance_qps, move || membership.borrow().live.len()));
    // The one CRD watch also wakes the XRDConversionConfigs of the XRDs whose generated CRDs
    // change (wake/generated.rs).
    let (generated_tx, generated_rx) = mpsc::unbounded_channel();
    let paced = pacing::paced(queues.cccs, pacer.clone(), arrived(&ccc_q));
    let cccs = crd_configs(ctx, primaries.cccs, paced, generated_tx, errors, stop, &ccc_q);
    let generated = stream::unfold(generated_rx, |mut rx| async { rx.recv().await.map(|r| (r, rx)) });
    let paced = pacing::paced(queues.xccs, pacer, arrived(&xcc_q));
    let xccs = xrd_configs(ctx, primaries.xccs, paced, generated, errors, stop, &xcc_q);
    tokio::join!(servers, cccs, xccs);
}

/// At most `--max-concurrent-reconciles` reconciles of a controller at once.
fn bounded(ctx: &Context) -> controller::Config {
    controller::Config::default().concurrency(ctx.settings.max_concurrent)
}

/// A wake's arrival at the pacer stamps its config.
fn arrived<K>(q: &Arc<Queue<K>>) -> impl FnMut(&ObjectRef<K>) + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Send + Sync + 'static,
{
    let q = q.clone();
    move |r| q.triggered(r, std::time::Instant::now())
}

/// Follows Crossplane's XRD CRD (`dco_api::crossplane`), its watch's errors counted as the
/// other watches' are (kind `CustomResourceDefinition`). Dropping it ends the detection.
pub fn crossplane(client: &Client, errors: &WatchMetrics) -> dco_api::crossplane::Detector {
    let errors = errors.errors.clone();
    dco_api::crossplane::Detector::start_counting(client.clone(), move |e| {
        let reason = crate::observability::watch_metrics::reason(e);
        errors.get_or_create(&WatchErrorLabels { kind: "CustomResourceDefinition", reason }).inc();
    })
}

/// The server controller, also woken by the Deployments and Services it owns: their watches
/// (runtime/watches.rs, one per namespace, reflected into `Context::watched`) are driven here
/// as kube-runtime's `watches` (touched objects, deletions included), with their errors counted.
fn servers(
    ctx: &Arc<Context>,
    primary: Primary<ConversionWebhookServer>,
    (deployments, services): (Vec<Events<Deployment>>, Vec<Events<Service>>),
    queue: mpsc::Receiver<ObjectRef<ConversionWebhookServer>>,
    errors: &WatchMetrics,
    stop: &Shutdown,
    q: &Arc<Queue<ConversionWebhookServer>>,
) -> impl Future<Output = ()> {
    let mut ctl = Controller::for_shared_stream(queued::primary(q, primary), ctx.stores.servers.clone());
    for events in deployments {
        let touched = errors.counted("Deployment", events).touched_objects();
        ctl = ctl.watches_stream(touched, queued::mapped(q, |d| owner_of(&d)));
    }
    for events in services {
        let touched = errors.counted("Service", events).touched_objects();
        ctl = ctl.watches_stream(touched, queued::mapped(q, |s| owner_of(&s)));
    }
    let woken = stream::unfold(queue, |mut rx| async { rx.recv().await.map(|r| (r, rx)) });
    ctl.reconcile_on(queued::stamped(q, woken))
        .with_config(bounded(ctx))
        .graceful_shutdown_on(stopped(stop))
        .run(queued::reconcile::<ServerWing>(q), queued::error_policy::<ServerWing>(q), ctx.clone())
        .inspect(queued::forget_missing(q))
        .for_each(log_results("conversionwebhookserver"))
}

/// The CRDConversionConfig controller, also woken by its target CRDs. Targets are watched as
/// metadata only: an event names the CRD, and the reconcile reads the one it needs
/// (config/driver.rs), so the schemas of every CRD in the cluster never reach the operator;
/// the list is read in small pages (`TARGET_PAGE`). Each event's resourceVersion goes to
/// `Watched::targets` first, which a config's idle wake compares (config/idle.rs).
fn crd_configs(
    ctx: &Arc<Context>,
    primary: Primary<CRDConversionConfig>,
    paced: impl Stream<Item = ObjectRef<CRDConversionConfig>> + Send + 'static,
    generated: mpsc::UnboundedSender<ObjectRef<XRDConversionConfig>>,
    errors: &WatchMetrics,
    stop: &Shutdown,
    q: &Arc<Queue<CRDConversionConfig>>,
) -> impl Future<Output = ()> {
    let store = ctx.stores.cccs.clone();
    let xccs = ctx.stores.xccs.clone();
    let targets = ctx.watched.targets.clone();
    let crds = watcher(
        Api::<PartialObjectMeta<CustomResourceDefinition>>::all(ctx.client.clone()),
        watcher::Config::default().page_size(TARGET_PAGE),
    )
    .inspect(move |ev| {
        if let Ok(ev) = ev {
            targets.apply(dco_api::config::TargetKind::Crd, ev);
        }
    })
    .touched_objects();
    Controller::for_shared_stream(queued::primary(q, primary), ctx.stores.cccs.clone())
        .watches_stream(
            errors.counted("CustomResourceDefinition", crds),
            queued::mapped(q, move |crd: PartialObjectMeta<CustomResourceDefinition>| {
                crate::observability::memory::touched();
                if let Some(xrd) = crate::wake::generated::xrd_of(&crd) {
                    for r in crate::kinds::configs_of_target(&xccs, &xrd) {
                        // The receiver lives as long as the XRD config controller; once it is
                        // gone nothing is left to wake.
                        let _ = generated.send(r);
                    }
                }
                crate::kinds::configs_of_target(&store, &crd.name_any())
            }),
        )
        .reconcile_on(paced)
        .with_config(bounded(ctx))
        .graceful_shutdown_on(stopped(stop))
        .run(
            queued::reconcile::<ConfigWing<CRDConversionConfig>>(q),
            queued::error_policy::<ConfigWing<CRDConversionConfig>>(q),
            ctx.clone(),
        )
        .inspect(queued::forget_missing(q))
        .for_each(log_results("crdconversionconfig"))
}

/// The XRDConversionConfig controller. XRDs are watched while Crossplane is installed,
/// through the API version it serves, followed from start to stop (config/xrds.rs):
/// installing, upgrading or removing it re-reconciles every XRDConversionConfig. The CRDs
/// Crossplane generates from an XRD wake its configs too (`generated`, from the CRD watch).
fn xrd_configs(
    ctx: &Arc<Context>,
    primary: Primary<XRDConversionConfig>,
    paced: impl Stream<Item = ObjectRef<XRDConversionConfig>> + Send + 'static,
    generated: impl Stream<Item = ObjectRef<XRDConversionConfig>> + Send + 'static,
    errors: &WatchMetrics,
    stop: &Shutdown,
    q: &Arc<Queue<XRDConversionConfig>>,
) -> impl Future<Output = ()> {
    let xrd_events = config::xrds::triggers(
        ctx.client.clone(),
        ctx.crossplane.clone(),
        ctx.stores.xccs.clone(),
        ctx.watched.targets.clone(),
        errors.clone(),
    )
    .inspect(|_| crate::observability::memory::touched());
    Controller::for_shared_stream(queued::primary(q, primary), ctx.stores.xccs.clone())
        .reconcile_on(paced)
        .reconcile_on(queued::stamped(q, xrd_events))
        .reconcile_on(queued::stamped(q, generated))
        .with_config(bounded(ctx))
        .graceful_shutdown_on(stopped(stop))
        .run(
            queued::reconcile::<ConfigWing<XRDConversionConfig>>(q),
            queued::error_policy::<ConfigWing<XRDConversionConfig>>(q),
            ctx.clone(),
        )
        .inspect(queued::forget_missing(q))
        .for_each(log_results("xrdconversionconfig"))
}

/// The controllers stop on the replica's own termination signal (shutdown.rs), which logs
/// the stop once; kube-runtime's `shutdown_on_signal` would install a handler per controller,
/// each logging "press ctrl+c to shut down gracefully".
fn stopped(stop: &Shutdown) -> impl Future<Output = ()> + Send + Sync + 'static {
    let stop = stop.clone();
    async move { stop.stopping().await }
}

fn log_results<T: std::fmt::Debug, E: std::fmt::Display>(
    what: &'static str,
) -> impl FnMut(Result<T, E>) -> future::Ready<()> {
    move |r| {
        crate::observability::memory::touched();
        match r {
            Ok(o) => tracing::debug!(controller = what, object = ?o, "reconciled"),
            Err(e) => tracing::debug!(controller = what, error = %e, "reconcile error"),
        }
        future::ready(())
    }
}
