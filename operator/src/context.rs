//! What every reconcile shares: the client, the settings, the caches and the event recorder.

use std::sync::Arc;
use std::time::Duration;

use dco_api::assign::{ServerInfo, Servers};
use dco_api::crossplane::{XrdApi, XrdApiReceiver};
use dco_api::{CRDConversionConfig, ConversionWebhookServer, XRDConversionConfig};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Secret, Service};
use kube::runtime::events::{Recorder, Reporter};
use kube::runtime::reflector::{ObjectRef, Store};

use std::future::Future;

use crate::config_refs::ConfigRefs;
use crate::error::Error;
use crate::sharding::gate::{Gate, Lapse, Pass};
use crate::target_versions::TargetVersions;
use kube::{Client, Resource};

/// The gate's pass of the reconcile running in this task, and the gate to ask again.
struct Fence {
    pass: Pass,
    gate: Gate,
}

tokio::task_local! {
    /// Set by [`Context::fenced`] around one reconcile.
    static FENCE: Fence;
}

/// Right before a write (`write` names it): whether the running reconcile's pass still holds —
/// its shard still this replica's by its own clock, and no pause since (docs/sharding.md,
/// "After a pause"). `Err(Error::Fenced)` stops the reconcile without writing; the reconcile
/// shape turns it into a retry. Outside a reconcile (the wings' unit tests call them
/// directly) there is no pass and nothing to fence.
pub fn fence(write: &'static str) -> Result<(), Error> {
    match FENCE.try_with(|f| f.gate.fence(&f.pass)) {
        Ok(Err(lapse)) => Err(Error::Fenced { write, paused: lapse == Lapse::Paused }),
        Ok(Ok(())) | Err(_) => Ok(()),
    }
}

use crate::names::{FIELD_MANAGER, ServerNames};
use crate::namespaces::{NamespacedStore, ServerNamespaces};
use crate::observability::metrics::Metrics;
use crate::pki::{self, Lifetimes};

/// Operator-wide settings from the command line.
#[derive(Clone, Debug)]
pub struct OperatorSettings {
    /// Where a server's workload goes when its `spec.namespace` is empty.
    pub namespace: String,
    /// The dco-webhook image when a server sets none.
    pub webhook_image: String,
    /// `--listen` of the webhook containers (`$(POD_IP)` is expanded by the kubelet).
    pub webhook_listen: String,
    /// Port of the webhook containers' `--admin-listen`, on `webhook_listen`'s host.
    pub webhook_admin_port: u16,
    /// Flags added to every webhook container before the server's `extraArgs`.
    pub webhook_args: Vec<String>,
    pub cert_lifetimes: Lifetimes,
    /// How often a settled object is looked at again without an event.
    pub resync: Duration,
    /// Reconciles each controller runs at once (`--max-concurrent-reconciles`).
    pub max_concurrent: u16,
    /// `--selector`: the label selector of the configs and servers this operator manages.
    pub selector: Option<String>,
    /// `--server-namespaces` with `namespace`: where servers may run (crate::namespaces).
    pub server_namespaces: ServerNamespaces,
}

impl Default for OperatorSettings {
    fn default() -> Self {
        OperatorSettings {
            namespace: "dco-system".to_string(),
            webhook_image: format!("dco-webhook:v{}", env!("CARGO_PKG_VERSION")),
            webhook_listen: "0.0.0.0:9443".to_string(),
            webhook_admin_port: 8080,
            webhook_args: Vec::new(),
            cert_lifetimes: Lifetimes::default(),
            resync: Duration::from_secs(300),
            max_concurrent: 16,
            selector: None,
            server_namespaces: ServerNamespaces::All,
        }
    }
}

/// The caches the reconcilers read instead of calling the apiserver: the stores of the one
/// watch per kind that runtime/watches.rs opens (the controllers and the fan-out run on the same).
#[derive(Clone)]
pub struct Stores {
    pub servers: Store<ConversionWebhookServer>,
    /// Served-target Leases and the coordinator's (label `app.kubernetes.io/managed-by=dco`),
    /// one store per watched namespace.
    pub leases: NamespacedStore<Lease>,
    /// The operator's Secrets (same label): serving certificates and CAs, one store per
    /// watched namespace (`--server-namespaces`).
    pub secrets: NamespacedStore<Secret>,
    pub xccs: Store<XRDConversionConfig>,
    pub cccs: Store<CRDConversionConfig>,
}

/// What the wings read besides [`Stores`]: every config of both kinds as the
/// assignment rules see them (unsharded, `crate::config_refs`), the resourceVersion of every
/// CRD and XRD (`crate::target_versions`, for the config wing's idle wakes), and the Deployments and
/// Services the servers own, whose watches also wake their servers (runtime/controllers.rs).
/// Empty until `Context::with_watched`; the Deployments and Services fill as the server
/// controller drives their watches, so a reconcile reads an object absent there as one to apply.
#[derive(Clone)]
pub struct Watched {
    pub config_refs: ConfigRefs,
    pub targets: TargetVersions,
    pub deployments: NamespacedStore<Deployment>,
    pub services: NamespacedStore<Service>,
}

impl Default for Watched {
    fn default() -> Self {
        Watched {
            config_refs: ConfigRefs::new(0),
            targets: TargetVersions::default(),
            deployments: kube::runtime::reflector::store().0.into(),
            services: kube::runtime::reflector::store().0.into(),
        }
    }
}

/// What a wing remembers of its last reconciles, one value per type its users choose
/// (server/idle.rs keeps what each server's last apply left), so this module names none of
/// their types.
#[derive(Default)]
pub struct Memos(std::sync::Mutex<http::Extensions>);

impl Memos {
    /// `f` on the memo of type `T` (its default the first time).
    pub fn with<T: Default + Clone + Send + Sync + 'static, R>(&self, f: impl FnOnce(&mut T) -> R) -> R {
        let mut ext = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if ext.get::<T>().is_none() {
            ext.insert(T::default());
        }
        f(ext.get_mut::<T>().expect("inserted above"))
    }
}

pub struct Context {
    pub client: Client,
    pub settings: OperatorSettings,
    pub stores: Stores,
    pub recorder: Recorder,
    pub metrics: Arc<Metrics>,
    /// Whether this replica owns an object's shard (`sharding/gate.rs`).
    pub gate: Gate,
    /// The XRD API the cluster serves, as `dco_api::crossplane::Detector` follows it: XRDs are
    /// read and written through it (`config/target.rs`).
    pub crossplane: XrdApiReceiver,
    pub watched: Watched,
    pub memos: Memos,
}

impl Context {
    pub fn new(
        client: Client,
        settings: OperatorSettings,
        stores: Stores,
        metrics: Arc<Metrics>,
        gate: Gate,
    ) -> Self {
        let reporter = Reporter {
            controller: FIELD_MANAGER.to_string(),
            instance: std::env::var("POD_NAME").ok().or_else(|| std::env::var("HOSTNAME").ok()),
        };
        // No Crossplane until `with_crossplane` says otherwise (the runtime always does).
        let crossplane = tokio::sync::watch::channel(Some(XrdApi::ABSENT)).1;
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            settings,
            stores,
            metrics,
            gate,
            crossplane,
            watched: Watched::default(),
            memos: Memos::default(),
        }
    }

    /// Reads every config's `ConfigRef` and the owned Deployments and Services from `watched`.
    pub fn with_watched(self, watched: Watched) -> Self {
        Context { watched, ..self }
    }

    /// Reads and writes XRDs through the API `crossplane` publishes.
    pub fn with_crossplane(self, crossplane: XrdApiReceiver) -> Self {
        Context { crossplane, ..self }
    }

    /// The XRD API the cluster serves now (once the detector's first list answered; absent if
    /// the detector is gone).
    pub async fn xrd_api(&self) -> XrdApi {
        dco_api::crossplane::wait_known(&mut self.crossplane.clone()).await.unwrap_or(XrdApi::ABSENT)
    }

    /// The reconcile gate: `Err(action)` when another replica owns the object's shard (the
    /// reconcile stops there; the owner's OnChange re-enqueues it when ownership moves), else
    /// the pass the reconcile's writes are fenced on ([`Context::fenced`]).
    pub fn admit<K: Resource>(
        &self,
        controller: &str,
        o: &K,
    ) -> Result<Pass, kube::runtime::controller::Action> {
        if let Some(pass) = self.gate.pass(o.meta().uid.as_deref()) {
            // Who reconciled what, by shard (the sharding tests read it on /metrics).
            self.metrics.let_through(controller, pass.shard);
            tracing::debug!(controller, object = %o.meta().name.as_deref().unwrap_or_default(), shard = pass.shard,
                "reconciling: this replica owns the object's shard");
            return Ok(pass);
        }
        self.metrics.skipped(controller);
        if self.gate.holds(o.meta().uid.as_deref()) {
            // Held but past the renew deadline (a late tick, a pause): ours again once
            // renewed, so try again then rather than wait for an event that may not come.
            return Err(kube::runtime::controller::Action::requeue(self.gate.lapse_retry));
        }
        Err(kube::runtime::controller::Action::await_change())
    }

    /// Runs one reconcile under `pass`: every [`fence`] inside it checks that pass.
    pub async fn fenced<T>(&self, pass: Pass, reconcile: impl Future<Output = T>) -> T {
        FENCE.scope(Fence { pass, gate: self.gate.clone() }, reconcile).await
    }

    /// [`fence`].
    pub fn fence(&self, write: &'static str) -> Result<(), Error> {
        fence(write)
    }

    /// The resolver over the cached servers. A server being deleted is out of the pool and
    /// not the default (`ServerInfo::from`, shared with the webhook replicas so both agree):
    /// its targets move away, which is what lets its finalizer go.
    pub fn servers(&self) -> Servers {
        Servers::new(self.stores.servers.state().iter().map(|s| ServerInfo::from(s.as_ref())))
    }

    pub fn server(&self, name: &str) -> Option<Arc<ConversionWebhookServer>> {
        self.stores.servers.get(&ObjectRef::new(name))
    }

    pub fn names(&self, server: &ConversionWebhookServer) -> ServerNames {
        ServerNames::of(server, &self.settings.namespace)
    }

    /// The PEM bundle the apiserver must trust to call `server`, from the cached Secret. While
    /// cert-manager issues (`spec.certificate`) and the self-managed CA Secret is still kept
    /// (server/cert_manager.rs `keep_self_managed_ca`), that CA is trusted too: a replica may
    /// still serve the operator's leaf until it loads cert-manager's.
    pub fn ca_bundle(&self, server: &ConversionWebhookServer) -> Option<String> {
        let names = self.names(server);
        let ca_of = |name: &str| {
            let secret = self.stores.secrets.get(&ObjectRef::new(name).within(&names.namespace))?;
            Some(secret.data.as_ref()?.get(pki::CA_CRT)?.0.clone())
        };
        let kept = if server.spec.certificate.is_some() { ca_of(&names.ca_secret) } else { None };
        pki::ca_bundle(ca_of(&names.tls_secret).as_deref(), kept.as_deref())
    }

    /// Which server's Service is `(namespace, name)`.
    pub fn server_by_service(&self, namespace: &str, service: &str) -> Option<Arc<ConversionWebhookServer>> {
        self.stores.servers.state().into_iter().find(|s| {
            let n = self.names(s);
            n.namespace == namespace && n.service() == service
        })
    }

    /// Publish an Event about `obj` (`dco_state::drive::publish`).
    pub async fn event<K: Resource<DynamicType = ()>>(
        &self,
        obj: &K,
        warning: bool,
        reason: &str,
        action: &str,
        note: String,
    ) {
        dco_state::drive::publish(&self.recorder, obj, warning, reason, action, note).await;
    }
}

/// A [`Context`] over a mocked apiserver and stores the test fills, for the wings' tests.
#[cfg(test)]
pub(crate) mod testing {
    use std::sync::Arc;

    use dco_api::{CRDConversionConfig, ConversionWebhookServer};
    use k8s_openapi::api::coordination::v1::Lease;
    use k8s_openapi::api::core::v1::Secret;
    use kube::runtime::reflector::{self, store::Writer};
    use kube::runtime::watcher;

    use k8s_openapi::api::apps::v1::Deployment;
    use k8s_openapi::api::core::v1::Service;

    use super::{Context, OperatorSettings, Stores, Watched};
    use crate::config_refs::ConfigRefs;
    use crate::observability::metrics::Metrics;
    use crate::sharding::gate::Gate;
    use crate::testing::{ApiServerVerifier, mock_client};

    pub(crate) struct Writers {
        pub servers: Writer<ConversionWebhookServer>,
        pub leases: Writer<Lease>,
        pub secrets: Writer<Secret>,
        #[allow(dead_code)]
        pub cccs: Writer<CRDConversionConfig>,
        pub deployments: Writer<Deployment>,
        #[allow(dead_code)]
        pub services: Writer<Service>,
    }

    impl Writers {
        pub fn server(&mut self, s: ConversionWebhookServer) {
            self.servers.apply_watcher_event(&watcher::Event::Apply(s));
        }
        pub fn secret(&mut self, s: Secret) {
            self.secrets.apply_watcher_event(&watcher::Event::Apply(s));
        }
        pub fn lease(&mut self, l: Lease) {
            self.leases.apply_watcher_event(&watcher::Event::Apply(l));
        }
    }

    pub(crate) fn test_context() -> (Arc<Context>, ApiServerVerifier, Writers) {
        let (client, api) = mock_client();
        let (servers, servers_w) = reflector::store();
        let (leases, leases_w) = reflector::store();
        let (secrets, secrets_w) = reflector::store();
        let (cccs, cccs_w) = reflector::store();
        let (xccs, _) = reflector::store();
        let stores = Stores { servers, leases: leases.into(), secrets: secrets.into(), xccs, cccs };
        let (deployments, deployments_w) = reflector::store();
        let (services, services_w) = reflector::store();
        let watched = Watched {
            config_refs: ConfigRefs::new(2),
            targets: Default::default(),
            deployments: deployments.into(),
            services: services.into(),
        };
        let ctx = Context::new(
            client,
            OperatorSettings::default(),
            stores,
            Arc::new(Metrics::default()),
            Gate::everything(),
        )
        .with_watched(watched);
        let writers = Writers {
            servers: servers_w,
            leases: leases_w,
            secrets: secrets_w,
            cccs: cccs_w,
            deployments: deployments_w,
            services: services_w,
        };
        (Arc::new(ctx), api, writers)
    }
}
