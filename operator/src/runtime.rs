//! Wiring: one watch per kind, the caches and the three controllers on them, what wakes each
//! (the rules in rebalance.rs), and the health/metrics endpoint.

use std::sync::Arc;

use anyhow::Context as _;
use dco_api::{
    CRDConversionConfig, ConversionWebhookServer, LABEL_MANAGED_BY, MANAGED_BY, XRDConversionConfig,
};
use futures::{Stream, StreamExt, future, stream};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, PartialObjectMeta};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use kube::runtime::{Controller, WatchStreamExt, watcher};
use kube::{Client, Resource, ResourceExt};
use serde::de::DeserializeOwned;
use tokio::sync::mpsc;

use crate::cli::Args;
use crate::config;
use crate::context::{Context, OperatorSettings, Stores};
use crate::kinds::ConfigKind;
use crate::kinds::ConfigRef;
use crate::namespaces;
use crate::observability::metrics::Metrics;
use crate::rebalance::{self, CaView, Changes, Fanout, ServedView, ServerView, Wake};
use crate::served::lease_triggers;
use crate::server;
use crate::sharding::coordinator;
use crate::sharding::gate::Gate;
use crate::sharding::shard::Shards;
use crate::sharding::sharded_watch::{self, SelectorLayer};
use crate::sharding::{leases, run};
use crate::shutdown::{Readiness, Shutdown};
use dco_api::target::{TARGET_PAGE, slim};
use k8s_openapi::jiff::SignedDuration;
use kube::client::ClientBuilder;

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

/// One watch of kind `K` from `events` (a kube-runtime watcher, or the shard-scoped one of
/// sharding/sharded_watch.rs): its store, the stream of its objects that triggers its controller, the
/// sender that feeds that stream (the root event stream's [`dispatch`] passes every applied
/// object on), and the root event stream, which must be driven for any of them to move.
///
/// Not kube-runtime's shared subscriber: its `ReflectHandle` returns `Pending` without a
/// waker when an object it was told about is already gone from the store (deleted before the
/// controller read the event), which stalls the controller until some unrelated event wakes
/// it. Here a gone object is skipped and the next one read. The channel is unbounded: the
/// controllers start only once every store has listed, so a bounded one would hold the first
/// list (and so the start) back as soon as there are more objects than it holds; what waits
/// in it is one small reference per event, and the controller merges repeats.
#[allow(clippy::type_complexity)]
fn shared<K>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
) -> (
    Store<K>,
    impl Stream<Item = Arc<K>> + Send,
    mpsc::UnboundedSender<ObjectRef<K>>,
    impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
)
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    let (store, writer) = reflector::store();
    let (tx, rx) = mpsc::unbounded_channel::<ObjectRef<K>>();
    (store.clone(), triggers(store, rx), tx, reflected(events, writer))
}

/// The objects named on `rx`, as `store` holds them now; one gone meanwhile is skipped.
fn triggers<K>(
    store: Store<K>,
    rx: mpsc::UnboundedReceiver<ObjectRef<K>>,
) -> impl Stream<Item = Arc<K>> + Send
where
    K: Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
{
    stream::unfold(rx, |mut rx| async { rx.recv().await.map(|r| (r, rx)) })
        .filter_map(move |r| future::ready(store.get(&r)))
}

/// `events` slimmed (dco_api::target::slim), retried with backoff, and reflected into `writer`.
fn reflected<K>(
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send,
    writer: Writer<K>,
) -> impl Stream<Item = watcher::Result<watcher::Event<K>>> + Send
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
{
    events.modify(slim::<K>).default_backoff().reflect_shared(writer)
}

/// Dispatch a root event stream: every applied object of a shard this replica owns goes to
/// `triggers` (its controller's primary stream, when it has one: the enqueue filter, which
/// only shortens queues — the reconcile gate is the check), and `changed` picks what else
/// each event must wake.
async fn dispatch<K>(
    kind: &'static str,
    events: impl Stream<Item = watcher::Result<watcher::Event<K>>>,
    triggers: Option<(mpsc::UnboundedSender<ObjectRef<K>>, Gate)>,
    mut changed: impl FnMut(&watcher::Event<K>) -> Vec<Wake>,
    fanout: Fanout,
) where
    K: Resource<DynamicType = ()>,
{
    let mut events = std::pin::pin!(events);
    // The objects of a (re)list, sent once it is done: the reflector swaps them into its store
    // only at `InitDone`, and a trigger read before that finds nothing and is skipped
    // (`triggers`). A shard-scoped watch relists whenever the owned shards change, with the
    // controllers running (sharding/sharded_watch.rs).
    let mut listed: Vec<ObjectRef<K>> = Vec::new();
    while let Some(ev) = events.next().await {
        match ev {
            Ok(ev) => {
                crate::observability::memory::touched();
                if let Some((tx, gate)) = &triggers {
                    let sent = match &ev {
                        watcher::Event::Init => {
                            listed.clear();
                            true
                        }
                        watcher::Event::InitApply(o) => {
                            if gate.holds(o.meta().uid.as_deref()) {
                                listed.push(ObjectRef::from_obj(o));
                            }
                            true
                        }
                        watcher::Event::InitDone => listed.drain(..).all(|r| tx.send(r).is_ok()),
                        watcher::Event::Apply(o) => {
                            !gate.holds(o.meta().uid.as_deref()) || tx.send(ObjectRef::from_obj(o)).is_ok()
                        }
                        watcher::Event::Delete(_) => true,
                    };
                    if !sent {
                        return;
                    }
                }
                for w in changed(&ev) {
                    if !fanout.wake(w).await {
                        return;
                    }
                }
            }
            Err(e) => {
                tracing::warn!(kind, error = %e, "watch failed; retrying (the operator needs list/watch on it)")
            }
        }
    }
}

/// A Secret's changes → the servers whose CA bundle it changes, and its owner (like
/// `Controller::watches`: every touched Secret wakes its owner, deletions too).
fn secret_changes() -> impl FnMut(&watcher::Event<Secret>) -> Vec<Wake> {
    let mut ca = Changes::default();
    move |ev| {
        let mut out: Vec<Wake> = rebalance::servers_of(&ca.observe(ev, CaView::of), |v| &v.server)
            .into_iter()
            .map(Wake::Rebalance)
            .collect();
        if let watcher::Event::Apply(s) | watcher::Event::Delete(s) = ev {
            out.extend(rebalance::owner_of(s).map(Wake::Server));
        }
        out
    }
}

/// A config's changes → the servers whose status or deletion reads it (`ConfigRef`).
fn config_changes<K: ConfigKind>() -> impl FnMut(&watcher::Event<K>) -> Vec<Wake> {
    let mut changes = Changes::default();
    move |ev| {
        let changed = changes.observe(ev, |c: &K| Some(ConfigRef::of(c)));
        rebalance::config_servers(&changed).into_iter().map(Wake::Server).collect()
    }
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

async fn serve_health(
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

pub async fn run(args: Args) -> anyhow::Result<()> {
    // Bound before anything else, so a replica that cannot serve them never turns Ready.
    let bound = crate::shutdown::bind(&args).await?;
    crate::observability::memory::spawn_trimmer(std::time::Duration::from_secs(5));
    let kube_config = kube::Config::infer()
        .await
        .context("cannot build a Kubernetes client (in-cluster config or KUBECONFIG)")?;
    let client = Client::try_from(kube_config.clone()).context("cannot build a Kubernetes client")?;
    let settings = OperatorSettings {
        namespace: args.namespace.clone(),
        webhook_image: args.webhook_image.clone(),
        webhook_listen: args.webhook_listen.clone(),
        webhook_admin_port: args.webhook_admin_port,
        webhook_args: args.webhook_args.clone(),
        resync: args.resync,
        selector: args.selector.clone(),
        server_namespaces: args.server_namespaces.with(&args.namespace),
        ..OperatorSettings::default()
    };
    let status_metrics = Arc::new(crate::status_metrics::StatusMetrics::default());
    let sharding_metrics = Arc::new(crate::sharding::metrics::ShardingMetrics::default());
    let admission_metrics = Arc::new(crate::admission::metrics::AdmissionMetrics::default());
    let metrics = Arc::new(Metrics::new(&[&*sharding_metrics, &*admission_metrics, &status_metrics]));
    let readiness = Arc::new(Readiness::default());
    let stop = Shutdown::start(readiness.clone(), args.shutdown_drain);

    // The Coordinator (sharding/leases.rs, sharding/run.rs): Prime runs one tick before the watches start, so the
    // gate knows the owned shards at the first event.
    let shards = Shards::new(args.shards).context("--shards must be at least 1")?;
    let coordination = coordinator::CoordinatorSettings::new(
        shards,
        SignedDuration::try_from(args.lease_duration).context("--lease-duration")?,
        SignedDuration::try_from(args.lease_renew_interval).context("--lease-renew-interval")?,
    );
    coordination
        .check()
        .map_err(|e| anyhow::anyhow!("{e}; fix --lease-duration or --lease-renew-interval"))?;
    let lease_ns = args.lease_namespace.clone().unwrap_or_else(|| args.namespace.clone());
    let lease_names = leases::LeaseNames::for_selector(args.selector.as_deref());
    let coordinator = run::Thread::start(
        kube_config.clone(),
        lease_ns.clone(),
        lease_names.clone(),
        coordination,
        args.replica_id(),
        leases::PodRef::from_env(&lease_ns),
        sharding_metrics.clone(),
    )
    .await?;
    let gate = coordinator.gate.clone();

    // The config watches ask for this replica's shards only, through a client whose layer adds
    // the selector when the apiserver applies it (sharding/sharded_watch.rs).
    let selector = SelectorLayer::new(shards, coordinator.owned.clone(), sharding_metrics.clone())
        .shard::<CRDConversionConfig>()
        .shard::<XRDConversionConfig>();
    let supported = sharded_watch::probe(&client, &lease_ns, shards).await;
    selector.set_supported(supported);
    sharding_metrics.sharded_watch.set(i64::from(supported));
    if supported {
        tracing::info!(
            "the apiserver filters by shardSelector (KEP-5866): the config watches carry this replica's shards only"
        );
    } else {
        tracing::info!(
            "the apiserver ignores shardSelector (ShardedListAndWatch off or absent): every config reaches this replica and is filtered here"
        );
    }
    let watch_client = ClientBuilder::try_from(kube_config)
        .context("cannot build the watch client")?
        .with_layer(&selector)
        .build();
    let membership_view = coordinator.snapshot.clone();
    let debug = DebugShards { snapshot: membership_view.clone(), selector: selector.clone() };
    tokio::spawn(serve_health(bound.metrics, metrics.clone(), readiness.clone(), debug));

    // One watch per kind; the stores the reconcilers read are these reflectors' own. Servers
    // are watched whole: every config's assignment resolves against the whole pool.
    let (servers, server_sub, server_tx, server_events) =
        shared(watcher(Api::<ConversionWebhookServer>::all(client.clone()), scoped(&args.selector)));
    let (cccs, ccc_sub, ccc_trigger_tx, ccc_events) = shared(sharded_watch::watch(
        Api::<CRDConversionConfig>::all(watch_client.clone()),
        scoped(&args.selector),
        gate.clone(),
        coordinator.owned.clone(),
        sharding_metrics.clone(),
    ));
    let (xccs, xcc_sub, xcc_trigger_tx, xcc_events) = shared(sharded_watch::watch(
        Api::<XRDConversionConfig>::all(watch_client.clone()),
        scoped(&args.selector),
        gate.clone(),
        coordinator.owned.clone(),
        sharding_metrics.clone(),
    ));
    // Secrets and Leases trigger no controller of their own: a deleted serving Secret wakes
    // its server through `dispatch`, which sees deletions too. Both, like the Deployments and
    // Services below, are watched only where servers may run (`--server-namespaces`,
    // namespaces.rs), the Leases in the coordinator's namespace too.
    let server_ns = settings.server_namespaces.clone();
    let (secrets, secret_events) = namespaces::watch::<Secret>(&client, &server_ns, managed());
    // Leases are facts, read whole, through `lease_triggers`.
    let (leases, lease_events) = namespaces::watch::<Lease>(&client, &server_ns.with(&lease_ns), managed());
    let lease_events = namespaces::merged(lease_events);
    tracing::info!(namespaces = %server_ns.render(), "watching Secrets, Deployments, Services and Leases");
    let stores = Stores {
        servers: servers.clone(),
        leases: leases.clone(),
        secrets: secrets.clone(),
        xccs: xccs.clone(),
        cccs: cccs.clone(),
    };
    status_metrics.set_source(crate::status_metrics::Source {
        stores: stores.clone(),
        gate: gate.clone(),
        namespace: args.namespace.clone(),
        membership: membership_view.clone(),
    });
    let ctx = Arc::new(Context::new(client.clone(), settings, stores.clone(), metrics.clone(), gate.clone()));
    // OnChange: every held server goes back into its controller's queue (the gate lets the
    // owned ones through). The configs need no such pass: the same change restarts their
    // shard-scoped watches, whose relist enqueues every held config once it is in the store
    // (`dispatch`), so a second enqueue here would only reconcile each of them twice.
    let on_change = {
        let (servers, gate, requeue) = (servers.clone(), gate.clone(), server_tx.clone());
        move || {
            for s in servers.state().iter().filter(|o| gate.holds(o.meta().uid.as_deref())) {
                let _ = requeue.send(ObjectRef::from_obj(s.as_ref()));
            }
        }
    };
    let mut coordinator = coordinator;
    coordinator.run(on_change);

    // Who wakes whom, apart from each controller's own objects (see rebalance.rs):
    // server spec/deletion/existence and CA → the configs it affects (paced); its Leases and
    // its served status → the unsettled configs it takes part in; a config's ConfigRef → its
    // servers. Nothing wakes a config because a server's status listed it.
    let (ccc_tx, ccc_rx) = mpsc::channel(4096);
    let (xcc_tx, xcc_rx) = mpsc::channel(4096);
    let (cws_tx, cws_rx) = mpsc::channel::<ObjectRef<ConversionWebhookServer>>(4096);
    let fanout = Fanout::new(ctx.clone(), ccc_tx, xcc_tx, cws_tx);
    tokio::spawn(dispatch(
        "CRDConversionConfig",
        ccc_events,
        Some((ccc_trigger_tx, gate.clone())),
        config_changes(),
        fanout.clone(),
    ));
    tokio::spawn(dispatch(
        "XRDConversionConfig",
        xcc_events,
        Some((xcc_trigger_tx, gate.clone())),
        config_changes(),
        fanout.clone(),
    ));
    let (mut spec, mut served) = (Changes::default(), Changes::default());
    let server_changes = move |ev: &watcher::Event<ConversionWebhookServer>| {
        let mut out: Vec<Wake> = rebalance::servers_of(&spec.observe(ev, ServerView::of), |v| &v.name)
            .into_iter()
            .map(Wake::Rebalance)
            .collect();
        out.extend(
            rebalance::servers_of(&served.observe(ev, ServedView::of), |v| &v.name)
                .into_iter()
                .map(Wake::Progress),
        );
        out
    };
    tokio::spawn(dispatch(
        "ConversionWebhookServer",
        server_events,
        Some((server_tx, gate.clone())),
        server_changes,
        fanout.clone(),
    ));
    // One dispatch per namespace: `Changes` reads a relist as the whole of its watch.
    for events in secret_events {
        tokio::spawn(dispatch("Secret", events, None, secret_changes(), fanout.clone()));
    }
    // Another replica's free of a shard Lease, a new member or a member Lease gone asks this
    // Coordinator for a tick now rather than at its next interval (sharding/run.rs).
    let coordinator_nudges = {
        let nudge = coordinator.nudge.clone();
        let mut nudges = run::Nudges::new(lease_ns, &lease_names, &args.replica_id());
        move |ev: &watcher::Result<watcher::Event<Lease>>| {
            let now = match ev {
                Ok(watcher::Event::Apply(l)) => nudges.observe(l),
                Ok(watcher::Event::Delete(l)) => nudges.observe_deleted(l),
                _ => false,
            };
            if now {
                nudge.notify_one();
            }
        }
    };
    let lease_fanout = fanout.clone();
    tokio::spawn(async move {
        let mut triggers = std::pin::pin!(lease_triggers(lease_events.inspect(coordinator_nudges)));
        while let Some(server) = triggers.next().await {
            let progress = Wake::Progress(server.name.clone());
            if !lease_fanout.wake(progress).await || !lease_fanout.wake(Wake::Server(server)).await {
                return;
            }
        }
    });
    drop(fanout);

    // Reconciles must not start on empty caches (an empty server cache reads as "no server",
    // an empty config cache as "nothing assigned").
    tokio::try_join!(
        async { servers.wait_until_ready().await.context("server cache") },
        async { secrets.wait_until_ready().await.context("secret cache") },
        async { leases.wait_until_ready().await.context("lease cache") },
        async { cccs.wait_until_ready().await.context("CRDConversionConfig cache") },
        async { xccs.wait_until_ready().await.context("XRDConversionConfig cache") },
    )?;
    // The admission webhook (admission/): Ready only once it serves a certificate too, since
    // the apiserver's calls go to whichever Ready Pod the Service picks.
    let (mut admission, mut registered) = (None, None);
    if let Some((svc_ns, svc)) = &args.admission_service {
        let certs = Arc::new(crate::admission::serve::CertResolver::default());
        let reg = crate::admission::registration::Registration {
            service_namespace: svc_ns.clone(),
            service: svc.clone(),
            port: i32::from(args.admission_port),
            target_port: i32::from(args.admission_listen.port()),
            pod_selector: args
                .admission_pod_selector
                .as_deref()
                .map(crate::cli::parse_labels)
                .transpose()
                .map_err(anyhow::Error::msg)?,
            webhook_name: args.admission_webhook_name.clone().unwrap_or_else(|| {
                crate::admission::registration::default_webhook_name(args.selector.as_deref())
            }),
            object_selector: args
                .selector
                .as_deref()
                .filter(|s| !s.is_empty())
                .map(crate::admission::registration::object_selector)
                .transpose()
                .map_err(anyhow::Error::msg)?,
            owner: args.admission_configuration,
        };
        status_metrics.set_admission(crate::status_metrics::AdmissionCertificate {
            secret: format!("{svc_ns}/{}", reg.secret_names().1),
            certs: certs.clone(),
        });
        let adm = crate::admission::serve::Admission {
            client: client.clone(),
            servers: servers.clone(),
            selector: args.selector.clone(),
            metrics: admission_metrics.clone(),
        };
        let router = crate::admission::serve::router(adm);
        let listener = bound.admission.context("the admission listener is bound with --admission-service")?;
        let serving = crate::admission::serve::serve(listener, certs.clone(), router, stop.clone());
        admission = Some(crate::shutdown::spawn_listener(readiness.clone(), "admission", serving));
        registered = Some(reg.clone());
        tokio::spawn(crate::admission::registration::run(
            client.clone(),
            reg,
            certs.clone(),
            ctx.settings.cert_lifetimes,
            admission_metrics.registration.clone(),
        ));
        while !certs.loaded() {
            tokio::time::sleep(std::time::Duration::from_millis(200)).await;
        }
        tracing::info!("admission webhook serving");
    }
    readiness.mark_synced();
    tracing::info!("caches synced; starting the controllers");

    let mut cws_ctl = Controller::for_shared_stream(server_sub, servers.clone());
    for scope in server_ns.scopes() {
        cws_ctl = cws_ctl
            .watches(namespaces::api::<Deployment>(&client, &scope), managed(), |d| rebalance::owner_of(&d))
            .watches(namespaces::api::<Service>(&client, &scope), managed(), |s| rebalance::owner_of(&s));
    }
    let cws_ctl = cws_ctl
        .reconcile_on(stream::unfold(cws_rx, |mut rx| async { rx.recv().await.map(|r| (r, rx)) }))
        .shutdown_on_signal()
        .run(server::reconcile, server::error_policy, ctx.clone())
        .for_each(log_results("conversionwebhookserver"));

    // One rebalance budget for both config controllers, divided among the live members.
    let members = membership_view.clone();
    let pacer = Arc::new(rebalance::Pacer::new(args.rebalance_qps, move || members.borrow().live.len()));
    let ccc_store = cccs.clone();
    // Targets are watched as metadata only: an event names the CRD, and the reconcile reads
    // the one it needs (config/driver.rs), so the schemas of every CRD in the cluster never
    // reach the operator; the list is read in small pages (`TARGET_PAGE`).
    let ccc_run = Controller::for_shared_stream(ccc_sub, cccs)
        .watches(
            Api::<PartialObjectMeta<CustomResourceDefinition>>::all(client.clone()),
            watcher::Config::default().page_size(TARGET_PAGE),
            move |crd| {
                crate::observability::memory::touched();
                configs_of_target(&ccc_store, &crd.name_any())
            },
        )
        .reconcile_on(rebalance::paced(ccc_rx, pacer.clone()))
        .shutdown_on_signal()
        .run(config::reconcile::<CRDConversionConfig>, config::error_policy, ctx.clone())
        .for_each(log_results("crdconversionconfig"));

    // XRDs are watched while Crossplane is installed, followed from start to stop
    // (config/xrds.rs): installing or removing it re-reconciles every XRDConversionConfig.
    let crossplane = dco_api::crossplane::Detector::start(client.clone());
    let xrd_events = config::xrds::triggers(client.clone(), crossplane.subscribe(), xccs.clone())
        .inspect(|_| crate::observability::memory::touched());
    let xcc_ctl = Controller::for_shared_stream(xcc_sub, xccs)
        .reconcile_on(rebalance::paced(xcc_rx, pacer))
        .reconcile_on(xrd_events);
    let xcc_run = xcc_ctl
        .shutdown_on_signal()
        .run(config::reconcile::<XRDConversionConfig>, config::error_policy, ctx.clone())
        .for_each(log_results("xrdconversionconfig"));

    tokio::join!(cws_ctl, ccc_run, xcc_run);
    tracing::info!("controllers stopped");
    // The shards go to the other replicas now; admission drains meanwhile (shutdown.rs).
    coordinator.stop().await;
    if let Some(served) = admission {
        served.await.context("the admission listener")??;
    }
    if let Some(reg) = registered {
        // The last replica to stop takes its webhooks out: with `failurePolicy: Fail` they
        // would refuse every write of dco's kinds while no replica runs.
        crate::admission::registration::withdraw_if_last(&client, &reg).await;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server(name: &str) -> ConversionWebhookServer {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "conversion.dco.rs/v1alpha1", "kind": "ConversionWebhookServer",
            "metadata": {"name": name}, "spec": {},
        }))
        .unwrap()
    }

    /// The enqueue filter: only objects of owned shards reach the controller's queue.
    #[tokio::test]
    async fn only_owned_objects_are_enqueued() {
        use crate::sharding::coordinator::ShardOwnership;
        use crate::sharding::shard::Shards;
        let shards = Shards::new(2).unwrap();
        let uids = [
            "0e8f2c1a-5b7d-4c3e-9a1f-7d6b5c4a3e21",
            "c3d9a7e2-1f4b-4e8a-b6c5-2a9d8e7f6b10",
            "5a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d",
            "f1e2d3c4-b5a6-4978-8695-a4b3c2d1e0f9",
        ];
        let in_shard =
            |i| uids.iter().copied().find(|u| shards.of_uid(u) == i).expect("a fixture uid in each shard");
        let (a, b) = (in_shard(0), in_shard(1));
        let until = k8s_openapi::jiff::Timestamp::now() + k8s_openapi::jiff::SignedDuration::from_secs(60);
        // Every shard of a 1-shard space is shard 0 of 2: a's.
        let owned = ShardOwnership::all(Shards::new(1).unwrap(), until);
        let (_keep, rx) = tokio::sync::watch::channel(owned);
        let gate = Gate::new(shards, rx);
        let with_uid = |name: &str, uid: &str| {
            let mut s = server(name);
            s.metadata.uid = Some(uid.to_string());
            s
        };
        let events = stream::iter(vec![
            Ok(watcher::Event::Apply(with_uid("theirs", b))),
            Ok(watcher::Event::Apply(with_uid("ours", a))),
            // A relist: its objects are enqueued once it is done (the store has them then).
            Ok(watcher::Event::Init),
            Ok(watcher::Event::InitApply(with_uid("listed", a))),
            Ok(watcher::Event::InitApply(with_uid("listed-theirs", b))),
            Ok(watcher::Event::InitDone),
        ]);
        let (tx, mut rx) = mpsc::unbounded_channel();
        let (ctx, _api, _w) = crate::context::testing::test_context();
        let (ccc, _) = mpsc::channel(1);
        let (xcc, _) = mpsc::channel(1);
        let (cws, _) = mpsc::channel(1);
        let fanout = Fanout::new(ctx, ccc, xcc, cws);
        dispatch("ConversionWebhookServer", events, Some((tx, gate)), |_| Vec::new(), fanout).await;
        let mut got = Vec::new();
        while let Ok(r) = rx.try_recv() {
            got.push(r.name);
        }
        assert_eq!(got, ["ours", "listed"]);
    }

    /// An object deleted before its controller read the trigger is skipped, and the stream
    /// goes on to the next one instead of stalling (what kube-runtime's subscriber does).
    #[tokio::test]
    async fn a_trigger_for_a_deleted_object_is_skipped() {
        let (store, mut writer) = reflector::store();
        let (tx, rx) = mpsc::unbounded_channel();
        let mut triggers = std::pin::pin!(triggers(store, rx));
        writer.apply_watcher_event(&watcher::Event::Apply(server("a")));
        tx.send(ObjectRef::new("a")).unwrap();
        writer.apply_watcher_event(&watcher::Event::Delete(server("a")));
        let later = tokio::spawn(async move {
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
            writer.apply_watcher_event(&watcher::Event::Apply(server("b")));
            tx.send(ObjectRef::new("b")).unwrap();
            tx
        });
        let next = tokio::time::timeout(std::time::Duration::from_secs(5), triggers.next()).await;
        assert_eq!(next.expect("the stream went on").map(|s| s.name_any()).as_deref(), Some("b"));
        drop(later.await);
    }
}
